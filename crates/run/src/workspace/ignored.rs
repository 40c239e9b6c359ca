//! What `.gitignore` leaves out of a change ([`IgnoreCheck`]), and the
//! files a task's scope names literally, which it never leaves out
//! ([`Literals`]).

use std::collections::HashMap;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use cassist_core::paths::is_reserved;

/// The files a task's scope names literally (relative, normalized): part
/// of the change even when `.gitignore` ignores them.
#[derive(Debug, Default)]
pub(super) struct Literals(Vec<String>);

impl Literals {
    /// The literal paths of a scope, but `.git/` and `.cassist/` and the
    /// empty path.
    pub(super) fn new(paths: &[String]) -> Literals {
        Literals(paths.iter().filter(|p| !p.is_empty() && !is_reserved(p)).cloned().collect())
    }

    pub(super) fn iter(&self) -> std::slice::Iter<'_, String> {
        self.0.iter()
    }

    /// Whether the scope names `rel` literally.
    pub(super) fn names(&self, rel: &Path) -> bool {
        rel.to_str().is_some_and(|r| self.0.iter().any(|l| l == r))
    }

    /// Whether the scope names literally a path below folder `rel`.
    pub(super) fn names_below(&self, rel: &Path) -> bool {
        rel.to_str()
            .is_some_and(|r| self.0.iter().any(|l| l.strip_prefix(r).is_some_and(|below| below.starts_with('/'))))
    }
}

/// `.gitignore` rules of the project, asked path by path.
pub(super) struct IgnoreCheck {
    root: PathBuf,
    /// Folders that hold the files, most recent first (an overlay's upper
    /// dir, then the project); paths in them mirror the project's.
    layers: Vec<PathBuf>,
    cache: std::cell::RefCell<HashMap<PathBuf, Option<ignore::gitignore::Gitignore>>>,
}

impl IgnoreCheck {
    pub(super) fn new(root: &Path, layers: Vec<PathBuf>) -> IgnoreCheck {
        IgnoreCheck { root: root.to_path_buf(), layers, cache: Default::default() }
    }

    /// The `.gitignore` of a project folder as the workspace sees it.
    fn gitignore_file(&self, dir: &Path) -> Option<PathBuf> {
        let rel = dir.strip_prefix(&self.root).ok()?;
        for layer in &self.layers {
            let f = layer.join(rel).join(".gitignore");
            match std::fs::symlink_metadata(&f) {
                Ok(m) if m.is_file() => return Some(f),
                // A whiteout: deleted in the workspace.
                Ok(m) if m.file_type().is_char_device() => return None,
                _ => {}
            }
        }
        None
    }

    fn matcher(&self, dir: &Path) -> Option<ignore::gitignore::Gitignore> {
        let mut cache = self.cache.borrow_mut();
        cache
            .entry(dir.to_path_buf())
            .or_insert_with(|| {
                let mut b = ignore::gitignore::GitignoreBuilder::new(dir);
                let mut any = false;
                if let Some(file) = self.gitignore_file(dir) {
                    any |= b.add(&file).is_none();
                }
                if dir == self.root {
                    let exclude = self.root.join(".git/info/exclude");
                    if exclude.is_file() {
                        any |= b.add(&exclude).is_none();
                    }
                }
                if any { b.build().ok() } else { None }
            })
            .clone()
    }

    /// Whether `rel` (a file, or a folder when `is_dir`) is ignored by any
    /// `.gitignore` on its way.
    pub(super) fn ignored(&self, rel: &Path, is_dir: bool) -> bool {
        let full = self.root.join(rel);
        let mut dirs: Vec<PathBuf> =
            full.ancestors().skip(1).take_while(|d| d.starts_with(&self.root)).map(Path::to_path_buf).collect();
        dirs.reverse();
        let mut ignored = false;
        for d in dirs {
            if let Some(m) = self.matcher(&d) {
                match m.matched_path_or_any_parents(&full, is_dir) {
                    ignore::Match::Ignore(_) => ignored = true,
                    ignore::Match::Whitelist(_) => ignored = false,
                    ignore::Match::None => {}
                }
            }
        }
        ignored
    }
}
