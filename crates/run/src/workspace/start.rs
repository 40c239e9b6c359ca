//! The base of a task's change: the files as the task's view had them
//! when it was fixed, which every write of the change into the user's tree
//! merges against ([`super::threeway`]).
//!
//! A workspace's view is the project's tree under the integration layers
//! that had passed. The layers never change; the tree does: the user keeps
//! editing while the agent runs. So when the view is fixed, the files the
//! task may change (those its scope names, below the literal folders of
//! its patterns) are copied aside ([`Start::capture`]), up to
//! [`MAX_FILES`] files and [`MAX_BYTES`] bytes. Reading the change, each
//! path's base comes from that copy; a path the copy does not cover is
//! taken from the tree when the tree has not changed there since the task
//! started (its ctime is before the start stamp), and is otherwise marked
//! as having no known base ([`Change::base_unknown`]): writing it is then a
//! conflict unless the tree already holds the result, never a guess.
//!
//! An unscoped task could change any file: nothing is copied for it (a
//! copy of the whole project per task would cost more than the run), so a
//! file the user edits while it runs and that it changes too is a
//! conflict.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::review::Scope;
use cassist_core::changes::{Change, ChangeKind};
use cassist_core::paths::{Stamp, is_reserved};
use cassist_core::plan::overlap::literal_prefix;

/// Files copied aside for one task, at most.
pub const MAX_FILES: usize = 2_000;
/// Bytes copied aside for one task, at most.
pub const MAX_BYTES: u64 = 64 << 20;

/// What was kept of the view when it was fixed.
pub struct Start {
    /// Where the copies are (same relative paths).
    dir: PathBuf,
    /// The copied paths, with their mode.
    kept: HashMap<String, u32>,
    /// The literal folders (or files) whose in-scope files were all copied:
    /// a path below one that was not copied was absent at the start.
    covered: Vec<String>,
    scope: Scope,
    /// When the task started ([`super::start_stamp`]).
    started: i128,
}

impl Start {
    /// Nothing kept: every base is checked on the tree's stamps.
    pub fn none(started: i128) -> Start {
        Start { dir: PathBuf::new(), kept: HashMap::new(), covered: Vec::new(), scope: Scope::new(&[]), started }
    }

    /// Copies the files of `root` that `scope` names into `dir`, within
    /// the limits; a folder not copied whole is not covered.
    pub fn capture(root: &Path, dir: &Path, scope: &[String], started: i128) -> std::io::Result<Start> {
        let mut start = Start::none(started);
        start.dir = dir.to_path_buf();
        start.scope = Scope::new(scope);
        if start.scope.is_everything() {
            return Ok(start);
        }
        let mut prefixes: Vec<String> = scope.iter().map(|p| literal_prefix(p)).collect();
        prefixes.sort();
        prefixes.dedup();
        // A prefix below another is walked with it.
        let all = prefixes.clone();
        prefixes.retain(|p| !all.iter().any(|q| q != p && below(p, q)));
        if prefixes.iter().any(|p| p.is_empty()) {
            // A pattern such as `**/*.rs` may name any file.
            return Ok(start);
        }
        let (mut files, mut bytes) = (0usize, 0u64);
        'prefixes: for prefix in prefixes {
            if is_reserved(&prefix) {
                continue;
            }
            let mut copied = Vec::new();
            let walk = walkdir::WalkDir::new(root.join(&prefix)).follow_links(false).into_iter().filter_entry(|e| {
                e.path().strip_prefix(root).ok().and_then(Path::to_str).is_some_and(|rel| !is_reserved(rel))
            });
            for e in walk {
                let e = match e {
                    Ok(e) => e,
                    // Absent: nothing to copy, and covered.
                    Err(e) if e.io_error().is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound) => break,
                    Err(_) => continue 'prefixes,
                };
                let t = e.file_type();
                if t.is_dir() {
                    continue;
                }
                let Some(rel) = e.path().strip_prefix(root).ok().and_then(Path::to_str) else { continue };
                if !(t.is_file() || t.is_symlink()) || !start.scope.contains(rel) {
                    continue;
                }
                let meta = e.metadata()?;
                files += 1;
                bytes += meta.len();
                if files > MAX_FILES || bytes > MAX_BYTES {
                    // Past the limits: this prefix is not covered, and no
                    // other is copied.
                    for rel in copied {
                        start.kept.remove(&rel);
                    }
                    break 'prefixes;
                }
                let to = dir.join(rel);
                if let Some(parent) = to.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                if t.is_symlink() {
                    std::os::unix::fs::symlink(std::fs::read_link(e.path())?, &to)?;
                } else if std::fs::copy(e.path(), &to).is_err() {
                    // Gone or unreadable meanwhile: not kept, so its base is
                    // checked on the tree.
                    continue;
                }
                start.kept.insert(rel.to_owned(), meta.mode());
                copied.push(rel.to_owned());
            }
            start.covered.push(prefix);
        }
        Ok(start)
    }

    /// Whether the copy says what `rel` was at the start (kept, or absent
    /// below a covered prefix).
    fn covers(&self, rel: &str) -> bool {
        self.kept.contains_key(rel)
            || (self.scope.contains(rel) && self.covered.iter().any(|p| rel == p || below(rel, p)))
    }

    /// Sets each change's base (`old`, `old_mode`, `base_unknown`) to the
    /// path as the view had it: from the copy where it covers the path;
    /// unchanged where `in_stack` says an integration layer shows it
    /// (layers never change); else from the tree as read, when the tree
    /// has not changed there since the start, or marked unknown.
    pub fn fix(&self, root: &Path, changes: &mut [Change], in_stack: &dyn Fn(&str) -> bool) {
        for c in changes.iter_mut() {
            let (base_path, expects_file) = match &c.kind {
                ChangeKind::Renamed { from } => (from.clone(), true),
                ChangeKind::Added => (c.path.clone(), false),
                _ => (c.path.clone(), true),
            };
            if in_stack(&base_path) {
                continue;
            }
            if self.covers(&base_path) {
                match self.kept.get(&base_path) {
                    Some(mode) => {
                        let copy = self.dir.join(&base_path);
                        let bytes = if mode & cassist_core::changes::S_IFMT == cassist_core::changes::S_IFLNK {
                            std::fs::read_link(&copy).ok().map(|t| t.into_os_string().into_encoded_bytes())
                        } else {
                            std::fs::read(&copy).ok()
                        };
                        match bytes {
                            Some(b) => {
                                c.old = Some(b);
                                c.old_mode = Some(*mode);
                            }
                            None => c.base_unknown = true,
                        }
                    }
                    None => {
                        c.old = None;
                        c.old_mode = None;
                    }
                }
                continue;
            }
            // Not copied: the tree's content is the base while the tree has
            // not changed there since the start.
            match std::fs::symlink_metadata(root.join(&base_path)) {
                Ok(m) if Stamp::of(&m).ctime_ns >= self.started => c.base_unknown = true,
                Ok(_) => {}
                Err(_) if expects_file => c.base_unknown = true,
                Err(_) => {}
            }
        }
    }
}

/// Whether `rel` lies below folder `dir` (`dir` not empty).
fn below(rel: &str, dir: &str) -> bool {
    !dir.is_empty() && rel.strip_prefix(dir).is_some_and(|r| r.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cassist_core::changes::S_IFREG;

    fn modified(path: &str, old: &str) -> Change {
        Change {
            path: path.into(),
            kind: ChangeKind::Modified,
            old: Some(old.as_bytes().to_vec()),
            new: Some(b"task\n".to_vec()),
            mode: S_IFREG | 0o644,
            hazard: None,
            old_mode: Some(S_IFREG | 0o644),
            base_unknown: false,
        }
    }

    #[test]
    fn the_copy_is_the_base_after_the_user_edits_the_tree() {
        let root = tempfile::tempdir().unwrap();
        let aside = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("docs")).unwrap();
        std::fs::write(root.path().join("docs/a.md"), "start\n").unwrap();
        std::fs::write(root.path().join("other.txt"), "other\n").unwrap();
        let started = super::super::start_stamp(root.path(), aside.path()).unwrap();
        let start = Start::capture(root.path(), &aside.path().join("start"), &["docs/**".into()], started).unwrap();
        // The user edits both files after the start.
        std::fs::write(root.path().join("docs/a.md"), "user\n").unwrap();
        std::fs::write(root.path().join("other.txt"), "user\n").unwrap();
        let mut changes = vec![modified("docs/a.md", "user\n"), modified("other.txt", "user\n")];
        start.fix(root.path(), &mut changes, &|_| false);
        assert_eq!(changes[0].old.as_deref(), Some(&b"start\n"[..]), "the copy is the base");
        assert!(!changes[0].base_unknown);
        assert!(changes[1].base_unknown, "not copied and changed since the start: unknown");
    }

    #[test]
    fn an_unchanged_file_outside_the_copy_is_its_own_base() {
        let root = tempfile::tempdir().unwrap();
        let aside = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("a.txt"), "a\n").unwrap();
        let started = super::super::start_stamp(root.path(), aside.path()).unwrap();
        let start = Start::none(started);
        let mut changes = vec![modified("a.txt", "a\n")];
        start.fix(root.path(), &mut changes, &|_| false);
        assert!(!changes[0].base_unknown);
        assert_eq!(changes[0].old.as_deref(), Some(&b"a\n"[..]));
    }

    #[test]
    fn past_the_limits_nothing_is_covered() {
        let root = tempfile::tempdir().unwrap();
        let aside = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("many")).unwrap();
        for i in 0..MAX_FILES + 1 {
            std::fs::write(root.path().join(format!("many/{i}")), "").unwrap();
        }
        let start = Start::capture(root.path(), &aside.path().join("start"), &["many/**".into()], 0).unwrap();
        assert!(start.kept.is_empty() && start.covered.is_empty());
    }

    #[test]
    fn a_file_added_below_a_covered_folder_had_no_base() {
        let root = tempfile::tempdir().unwrap();
        let aside = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("docs")).unwrap();
        let start = Start::capture(root.path(), &aside.path().join("start"), &["docs".into()], i128::MAX).unwrap();
        assert!(start.covers("docs/new.md"));
        assert!(!start.covers("src/x.rs"));
    }
}
