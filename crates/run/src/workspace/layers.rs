//! Integration layers ([`IntegrationLayer`]): the changes that passed and
//! are not in the user's tree yet, each as an overlay layer that the
//! workspaces made meanwhile stack over the project (copy mode writes them
//! over its copy, [`apply_layer`]).

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::Error;
use super::cleanup::remove_tree;
use super::tree::{copy_entry, sanitize};
use crate::entry;
use cassist_core::changes::{ChangeKind, ChangeSet};

/// The prefix of a process's folder of integration layers ([`layers_home`]).
pub(super) const LAYERS: &str = "layers-";

/// Where this process keeps its integration layers under `parent`.
pub fn layers_home(parent: &Path) -> PathBuf {
    parent.join(format!("{LAYERS}{}", std::process::id()))
}

/// Removes this process's folder of integration layers once nothing uses
/// them (the end of a run).
pub fn remove_layers(parent: &Path) {
    remove_tree(&layers_home(parent));
}

/// An integration layer: exactly one accepted change (or several merged),
/// as an overlay layer: its written files, whiteouts for what it deletes.
/// Made once, never changed; workspaces started while it is pending stack
/// it over the project ([`Workspace::create_over`](super::Workspace::create_over)). Removed when the last
/// workspace using it (and the run's list of pending layers) lets it go.
#[derive(Debug)]
pub struct IntegrationLayer {
    dir: PathBuf,
    /// The paths it writes or deletes.
    paths: std::collections::BTreeSet<String>,
}

impl IntegrationLayer {
    /// Writes `changes` (applied in order: a later change of a path wins)
    /// into a new layer under `parent`. O(change).
    /// The layers live in `<parent>/layers-<pid>/` ([`layers_home`]),
    /// whose name says whose they are: a run killed before removing them
    /// leaves them to the next run's [`remove_stale`](super::remove_stale).
    pub fn create(parent: &Path, name: &str, changes: &[&ChangeSet]) -> Result<IntegrationLayer, Error> {
        IntegrationLayer::merge(parent, name, changes, &[])
    }

    /// [`create`](Self::create) of the changes that the layers `from`
    /// (newest first) hold: a file is hard-linked from the newest of them
    /// that has it (no new inode, no copy; layers never change), written
    /// where it cannot be.
    pub fn merge(
        parent: &Path,
        name: &str,
        changes: &[&ChangeSet],
        from: &[&IntegrationLayer],
    ) -> Result<IntegrationLayer, Error> {
        let home = layers_home(parent);
        std::fs::create_dir_all(&home)?;
        let dir = tempfile::Builder::new().prefix(&format!("{}-", sanitize(name))).tempdir_in(&home)?.keep();
        let mut layer = IntegrationLayer { dir, paths: Default::default() };
        for (path, op) in fold(changes) {
            layer.paths.insert(path.clone());
            let target = layer.dir.join(&path);
            // What stands in this layer where a folder on the way must be:
            // a file of an earlier change (it hides the folder below, so
            // a deletion under it is done already), or a whiteout.
            let blocking = Path::new(&path)
                .ancestors()
                .skip(1)
                .filter(|a| !a.as_os_str().is_empty())
                .find(|a| std::fs::symlink_metadata(layer.dir.join(a)).is_ok_and(|m| !m.is_dir()));
            if let Some(at) = blocking {
                let at = layer.dir.join(at);
                if op.is_none() && !std::fs::symlink_metadata(&at).is_ok_and(|m| entry::is_whiteout(&m)) {
                    continue;
                }
                std::fs::remove_file(&at)?;
            }
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)?;
            }
            match std::fs::symlink_metadata(&target) {
                Ok(m) if m.is_dir() => remove_tree(&target),
                Ok(_) => std::fs::remove_file(&target)?,
                Err(_) => {}
            }
            let source = from.iter().find(|l| l.paths.contains(&path)).map(|l| l.dir.join(&path));
            if source.is_some_and(|src| std::fs::hard_link(src, &target).is_ok()) {
                continue;
            }
            match op {
                Some((bytes, mode)) => write_entry(&target, bytes, mode)?,
                None => whiteout(&target)?,
            }
        }
        Ok(layer)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The paths it writes or deletes.
    pub fn paths(&self) -> &std::collections::BTreeSet<String> {
        &self.paths
    }
}

impl Drop for IntegrationLayer {
    fn drop(&mut self) {
        remove_tree(&self.dir);
    }
}

/// What `changes`, applied in order, leave at each path they touch: the
/// new content and mode, or `None` (deleted).
pub fn fold<'a>(changes: &[&'a ChangeSet]) -> BTreeMap<String, Option<(&'a [u8], u32)>> {
    let mut out = BTreeMap::new();
    for set in changes {
        for c in &set.changes {
            if let ChangeKind::Renamed { from } = &c.kind {
                out.insert(from.clone(), None);
            }
            out.insert(c.path.clone(), c.new.as_deref().map(|b| (b, c.mode)));
        }
    }
    out
}

/// Writes a file (or a symlink, by the mode) with `bytes`, without special
/// bits.
fn write_entry(target: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    if mode & cassist_core::changes::S_IFMT == cassist_core::changes::S_IFLNK {
        let to = std::ffi::OsStr::from_bytes(bytes);
        return std::os::unix::fs::symlink(to, target);
    }
    std::fs::write(target, bytes)?;
    std::fs::set_permissions(target, std::fs::Permissions::from_mode(mode & 0o777))
}

/// What overlayfs takes for a deleted entry: a 0/0 character device.
fn whiteout(target: &Path) -> Result<(), Error> {
    let c = std::ffi::CString::new(target.as_os_str().as_bytes())?;
    // SAFETY: a valid path.
    if unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o600, 0) } != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(())
}

/// Writes the layer at `dir` (files, whiteouts) over the tree at `to`:
/// copy mode's view of integration layers. O(layer).
pub(super) fn apply_layer(dir: &Path, to: &Path) -> Result<(), Error> {
    for e in walkdir::WalkDir::new(dir).min_depth(1) {
        let e = e?;
        let Ok(rel) = e.path().strip_prefix(dir) else { continue };
        let dest = to.join(rel);
        let meta = std::fs::symlink_metadata(e.path())?;
        let there = std::fs::symlink_metadata(&dest).ok();
        if meta.is_dir() {
            if there.as_ref().is_some_and(|m| !m.is_dir()) {
                std::fs::remove_file(&dest)?;
            }
            if there.as_ref().is_none_or(|m| !m.is_dir()) {
                std::fs::create_dir(&dest)?;
            }
            continue;
        }
        match there {
            Some(m) if m.is_dir() => remove_tree(&dest),
            Some(_) => std::fs::remove_file(&dest)?,
            None => {}
        }
        if !entry::is_whiteout(&meta) {
            copy_entry(e.path(), &dest, &meta)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::lowers::Lowers;
    use crate::workspace::test_support::layer;
    use cassist_core::changes::Change;

    fn change(path: &str, kind: ChangeKind, new: Option<&str>) -> Change {
        Change {
            path: path.into(),
            kind,
            old: None,
            new: new.map(|t| t.as_bytes().to_vec()),
            mode: cassist_core::changes::S_IFREG | 0o644,
            hazard: None,
            old_mode: None,
            base_unknown: false,
        }
    }

    /// Two changes in one layer (as merging makes): the view over the tree
    /// is the tree with both applied in order, in overlay's terms and as
    /// copy mode writes it.
    /// A merge of layers links their files (same inode, nothing copied)
    /// and shows what the changes in order show.
    #[test]
    fn merged_layers_link_their_files_and_show_the_changes_in_order() {
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        if !layer(&root, &[("a.txt", Some("a0")), ("gone.txt", Some("g"))]) {
            return;
        }
        let parent = tmp.path().join("parent");
        let first = ChangeSet {
            changes: vec![
                change("a.txt", ChangeKind::Modified, Some("a1")),
                change("new/n.txt", ChangeKind::Added, Some("n")),
                change("keep/k.txt", ChangeKind::Added, Some("k")),
            ],
        };
        let second = ChangeSet {
            changes: vec![
                change("gone.txt", ChangeKind::Deleted, None),
                change("new/n.txt", ChangeKind::Modified, Some("n2")),
            ],
        };
        let l1 = IntegrationLayer::create(&parent, "one", &[&first]).unwrap();
        let l2 = IntegrationLayer::create(&parent, "two", &[&second]).unwrap();
        let merged = IntegrationLayer::merge(&parent, "merged", &[&first, &second], &[&l2, &l1]).unwrap();
        let ino = |dir: &Path, rel: &str| std::fs::symlink_metadata(dir.join(rel)).unwrap().ino();
        assert_eq!(ino(merged.dir(), "new/n.txt"), ino(l2.dir(), "new/n.txt"), "not linked from the newest layer");
        assert_eq!(ino(merged.dir(), "keep/k.txt"), ino(l1.dir(), "keep/k.txt"));
        assert_eq!(ino(merged.dir(), "a.txt"), ino(l1.dir(), "a.txt"));
        drop((l1, l2));
        let dirs = vec![merged.dir().to_path_buf(), root.clone()];
        let mut seen: Vec<(String, String)> = Lowers::new(&dirs)
            .files_below(Path::new(""))
            .into_iter()
            .map(|(rel, real)| (rel.to_string_lossy().into_owned(), std::fs::read_to_string(real).unwrap()))
            .collect();
        seen.sort();
        let want = [("a.txt", "a1"), ("keep/k.txt", "k"), ("new/n.txt", "n2")];
        let want: Vec<(String, String)> = want.iter().map(|(p, t)| ((*p).to_owned(), (*t).to_owned())).collect();
        assert_eq!(seen, want, "the merged layer outlives its sources and shows the changes in order");
    }

    #[test]
    fn an_integration_layer_shows_its_changes_over_the_tree() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        if !layer(
            &root,
            &[("a.txt", Some("a0")), ("gone.txt", Some("g")), ("docs/api.md", Some("api")), ("f", Some("f"))],
        ) {
            return;
        }
        let first = ChangeSet {
            changes: vec![
                change("a.txt", ChangeKind::Modified, Some("a1")),
                change("gone.txt", ChangeKind::Deleted, None),
                change("new/n.txt", ChangeKind::Added, Some("n")),
            ],
        };
        let second = ChangeSet {
            changes: vec![
                change("docs", ChangeKind::Added, Some("now a file")),
                change("docs/api.md", ChangeKind::Deleted, None),
                change("f", ChangeKind::Deleted, None),
                change("f/inner", ChangeKind::Added, Some("i")),
                change("new/n.txt", ChangeKind::Modified, Some("n2")),
            ],
        };
        let l = match IntegrationLayer::create(&tmp.path().join("parent"), "t", &[&first, &second]) {
            Ok(l) => l,
            Err(e) => panic!("cannot make an integration layer here: {e}"),
        };
        let want = [("a.txt", "a1"), ("docs", "now a file"), ("f/inner", "i"), ("new/n.txt", "n2")];
        let dirs = vec![l.dir().to_path_buf(), root.clone()];
        let view = Lowers::new(&dirs);
        let mut seen: Vec<(String, String)> = view
            .files_below(Path::new(""))
            .into_iter()
            .map(|(rel, real)| (rel.to_string_lossy().into_owned(), std::fs::read_to_string(real).unwrap()))
            .collect();
        seen.sort();
        let want: Vec<(String, String)> = want.iter().map(|(p, t)| ((*p).to_owned(), (*t).to_owned())).collect();
        assert_eq!(seen, want);
        assert_eq!(l.paths().len(), 7);
        // Copy mode: written over a copy of the tree.
        apply_layer(l.dir(), &root).unwrap();
        let mut copied: Vec<(String, String)> = walkdir::WalkDir::new(&root)
            .into_iter()
            .flatten()
            .filter(|e| !e.file_type().is_dir())
            .map(|e| {
                let rel = e.path().strip_prefix(&root).unwrap().to_string_lossy().into_owned();
                (rel, std::fs::read_to_string(e.path()).unwrap())
            })
            .collect();
        copied.sort();
        assert_eq!(copied, want);
        let dir = l.dir().to_path_buf();
        drop(l);
        assert!(!dir.exists(), "a layer nothing uses is removed");
    }
}
