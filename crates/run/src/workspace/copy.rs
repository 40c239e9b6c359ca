//! The copy mode ([`CopyBacking`]), where namespaces or overlayfs are
//! unavailable: the workspace is a copy of the project's files with the
//! integration layers written over it; the change is the copy against
//! what was copied (after setup: what setup left).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::cleanup::remove_tree;
use super::ignored::{IgnoreCheck, Literals};
use super::layers::apply_layer;
use super::lowers::Lowers;
use super::tree::{copy_entry, copy_project, copy_tree, plain_path};
use super::{Backing, Error, IntegrationLayer, Layer, Scan, Site, insert_change};
use crate::entry::{self, Kind, Reader};
use cassist_core::changes::Change;
use cassist_core::paths::{is_reserved_name, project_files, workspace_walker};
use cassist_sandbox::sandbox::Overlay;

/// Where the agent's result waits while acceptance runs on a throw-away
/// copy of it (or the build on one of the user's tree).
const SET_ASIDE: &str = "agent-result";

/// A file's type and permission bits (special bits included) of a mode.
const TYPE_AND_PERMISSIONS: u32 = cassist_core::changes::S_IFMT | 0o7777;

/// A workspace that is a copy of the project: commands run in the copy,
/// at its own path, without namespaces.
pub(super) struct CopyBacking {
    site: Site,
    /// The copy, where commands run.
    dir: PathBuf,
    /// Each file as copied (after setup: as setup left it).
    copied: HashMap<String, Copied>,
    /// The ignored entries setup left (not the agent's).
    setup_ignored: HashSet<String>,
}

/// A file of the project as copy mode copied it (or setup left it).
struct Copied {
    /// blake3 of its bytes (a symlink: of its target).
    hash: [u8; 32],
    /// Its type and permission bits.
    mode: u32,
    size: u64,
}

impl CopyBacking {
    /// Copies the project into the workspace's folder and writes its
    /// integration layers over the copy, oldest first.
    pub(super) fn create(site: Site) -> Result<CopyBacking, Error> {
        let copy = site.base.join("project");
        std::fs::create_dir(&copy)?;
        copy_project(&site.root, &copy)?;
        for layer in site.stack.iter().rev() {
            apply_layer(layer.dir(), &copy)?;
        }
        let copied = hash_files(&copy)?;
        Ok(CopyBacking { site, dir: copy, copied, setup_ignored: HashSet::new() })
    }

    /// Where the file at `rel` the task started from is: in the newest of
    /// its integration layers that has it, else in the project.
    fn started_from(&self, rel: &Path) -> PathBuf {
        let view: Vec<PathBuf> =
            self.site.stack.iter().map(|l| l.dir().to_path_buf()).chain([self.site.root.clone()]).collect();
        Lowers::new(&view).path(rel).unwrap_or_else(|| self.site.root.join(rel))
    }

    /// The entry `rel` of the copy (at `path`) against what was copied;
    /// `seen` gets its name.
    fn change(
        &self,
        reader: &mut Reader,
        out: &mut BTreeMap<String, Change>,
        seen: &mut HashSet<String>,
        rel: &Path,
        path: &Path,
        meta: &std::fs::Metadata,
    ) -> Result<(), Error> {
        let (name, _) = entry::name(rel);
        let copied = self.copied.get(&name);
        seen.insert(name);
        // Unchanged: the same type, mode and size (from the lstat) and
        // the same bytes (hashed as a stream).
        if let Some(c) = copied
            && meta.mode() & TYPE_AND_PERMISSIONS == c.mode
            && meta.len() == c.size
            && entry::hash_entry(path, meta)?.as_ref() == Some(&c.hash)
        {
            return Ok(());
        }
        // Where it started from, for a file that was copied (an added one
        // has no older self to look up).
        let orig = copied.map(|_| self.started_from(rel));
        let old = orig.as_ref().and_then(|o| std::fs::symlink_metadata(o).ok().map(|m| (o.as_path(), m)));
        insert_change(out, reader.change(rel, path, meta, old.as_ref().map(|(p, m)| (*p, m)))?);
        Ok(())
    }

    /// The ignored entries of the copy (a folder as a whole, unless the
    /// scope names a file below it), but the files the scope names.
    fn ignored(&self, ignore: &IgnoreCheck, literals: &Literals) -> Vec<String> {
        let mut out = Vec::new();
        let mut walk = walkdir::WalkDir::new(&self.dir).min_depth(1).into_iter();
        while let Some(Ok(e)) = walk.next() {
            let is_dir = e.file_type().is_dir();
            let Ok(rel) = e.path().strip_prefix(&self.dir) else { continue };
            if is_reserved_name(e.file_name()) {
                if is_dir {
                    walk.skip_current_dir();
                }
                continue;
            }
            if !ignore.ignored(rel, is_dir) || literals.names(rel) {
                continue;
            }
            if !is_dir {
                out.push(entry::name(rel).0);
            } else if !literals.names_below(rel) {
                out.push(format!("{}/", entry::name(rel).0));
                walk.skip_current_dir();
            }
        }
        out
    }
}

impl Backing for CopyBacking {
    fn site(&self) -> &Site {
        &self.site
    }

    fn dir(&self) -> &Path {
        &self.dir
    }

    /// None: commands run in the copy.
    fn overlay(&self, _layer: Layer, _build_stack: &[Arc<IntegrationLayer>]) -> Result<Option<Overlay>, Error> {
        Ok(None)
    }

    /// The agent's result is set aside; a throw-away copy of it (scratch),
    /// or of the user's tree with `build_stack` written over it (build),
    /// takes its place, at the same path.
    fn begin_throwaway(&mut self, layer: Layer, build_stack: &[Arc<IntegrationLayer>]) -> Result<(), Error> {
        let aside = self.site.base.join(SET_ASIDE);
        std::fs::rename(&self.dir, &aside)?;
        match layer {
            Layer::Build => {
                std::fs::create_dir(&self.dir)?;
                copy_project(&self.site.root, &self.dir)?;
                build_stack.iter().rev().try_for_each(|l| apply_layer(l.dir(), &self.dir))
            }
            _ => copy_tree(&aside, &self.dir),
        }
    }

    /// Puts the agent's result back.
    fn end_throwaway(&mut self) {
        let aside = self.site.base.join(SET_ASIDE);
        if aside.exists() {
            remove_tree(&self.dir);
            let _ = std::fs::rename(&aside, &self.dir);
        }
    }

    /// The change is measured from what setup left; what setup left that
    /// `.gitignore` ignores is not the agent's.
    fn setup_done(&mut self, literals: &Literals) -> Result<(), Error> {
        self.copied = hash_files(&self.dir)?;
        for rel in literals.iter() {
            let path = self.dir.join(rel);
            if !self.copied.contains_key(rel)
                && plain_path(&self.dir, rel)
                && let Ok(meta) = std::fs::symlink_metadata(&path)
                && let Some(c) = copied_of(&path, &meta)?
            {
                self.copied.insert(rel.clone(), c);
            }
        }
        let ignore = IgnoreCheck::new(&self.site.root, vec![self.dir.clone()]);
        self.setup_ignored = self.ignored(&ignore, literals).into_iter().collect();
        Ok(())
    }

    /// Copies the files the scope names that the project has but the copy
    /// left out (ignored by `.gitignore`).
    fn name_literally(&mut self, literals: &Literals) -> Result<(), Error> {
        for rel in literals.iter() {
            let src = self.site.root.join(rel);
            if self.copied.contains_key(rel) || !plain_path(&self.site.root, rel) {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(&src) else { continue };
            if !matches!(entry::kind(&meta), Kind::File | Kind::Symlink) {
                continue;
            }
            let dst = self.dir.join(rel);
            if let Some(parent) = dst.parent() {
                std::fs::create_dir_all(parent)?;
            }
            copy_entry(&src, &dst, &meta)?;
            if let Some(c) = copied_of(&dst, &std::fs::symlink_metadata(&dst)?)? {
                self.copied.insert(rel.clone(), c);
            }
        }
        Ok(())
    }

    /// The copy itself.
    fn place_dir(&self) -> PathBuf {
        self.dir.clone()
    }

    fn gitignore_layers(&self) -> Vec<PathBuf> {
        vec![self.dir.clone()]
    }

    /// The copy against what was copied: every entry of the copy (`.git/`
    /// and `.cassist/` folders included) whose type, mode or content is not
    /// what was copied, and what was copied and is gone; the ignored
    /// entries the agent wrote are those setup did not leave.
    fn changes(&self, scan: &mut Scan<'_>) -> Result<Vec<String>, Error> {
        let Scan { reader, ignore, literals, found: out } = scan;
        let mut seen = HashSet::new();
        for e in workspace_walker(&self.dir) {
            if e.file_type().is_none_or(|t| t.is_dir()) {
                continue;
            }
            let Ok(rel) = e.path().strip_prefix(&self.dir) else { continue };
            let meta = std::fs::symlink_metadata(e.path())?;
            self.change(reader, out, &mut seen, rel, e.path(), &meta)?;
        }
        // The files the scope names that .gitignore ignores (the walk
        // leaves them out).
        for rel in literals.iter() {
            let path = self.dir.join(rel);
            if !seen.contains(rel)
                && plain_path(&self.dir, rel)
                && let Ok(meta) = std::fs::symlink_metadata(&path)
                && !meta.is_dir()
            {
                self.change(reader, out, &mut seen, Path::new(rel), &path, &meta)?;
            }
        }
        for rel in self.copied.keys() {
            if !seen.contains(rel) {
                insert_change(out, reader.deleted(Path::new(rel), &self.started_from(Path::new(rel))));
            }
        }
        Ok(self.ignored(ignore, literals).into_iter().filter(|p| !self.setup_ignored.contains(p)).collect())
    }

    /// The copy becomes the tree, without what cassist placed and without
    /// the special files the agent made (a fifo would hang a `grep -r`
    /// there), never opened.
    fn keep(&mut self, tree: &Path, placed: &[String]) -> Result<(), Error> {
        std::fs::rename(&self.dir, tree)?;
        self.dir = tree.to_path_buf();
        for rel in placed {
            let _ = std::fs::remove_file(tree.join(rel));
        }
        for e in walkdir::WalkDir::new(tree).into_iter().flatten() {
            let t = e.file_type();
            if !(t.is_dir() || t.is_file() || t.is_symlink()) {
                std::fs::remove_file(e.path())?;
            }
        }
        Ok(())
    }
}

/// Every project file and symlink under `dir` (anything else is left out,
/// never opened), hashed as a stream: a large file costs no memory.
fn hash_files(dir: &Path) -> Result<HashMap<String, Copied>, Error> {
    let mut copied = HashMap::new();
    for (rel, meta) in project_files(dir) {
        if let Some(c) = copied_of(&dir.join(&rel), &meta)? {
            copied.insert(rel, c);
        }
    }
    Ok(copied)
}

/// A file or symlink at `path` (whose lstat is `meta`) as copied.
fn copied_of(path: &Path, meta: &std::fs::Metadata) -> Result<Option<Copied>, Error> {
    Ok(entry::hash_entry(path, meta)?.map(|hash| Copied {
        hash,
        mode: meta.mode() & TYPE_AND_PERMISSIONS,
        size: meta.len(),
    }))
}
