//! A whole change set merged three-way into a tree ([`merge_set`]): each
//! path the change touches is merged with [`cassist_core::merge`] (base =
//! the path as the task's view had it, theirs = the task's result, ours =
//! the tree now), and the set lands only when every path merges. The same
//! code decides at every write: a task landing, the flush writing the
//! tree, a replay, the direct [`super::integrate`].

use std::collections::{BTreeMap, HashSet};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use cassist_core::changes::{Change, ChangeKind, ChangeSet, S_IFREG};
use cassist_core::merge::{self, Conflict, Merged, Version};

/// What a tree holds at a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    Absent,
    /// A file or a symlink (its target): bytes and mode.
    Entry(Vec<u8>, u32),
    /// A folder, with the files below it (relative to the root).
    Folder(Vec<String>),
    /// Anything else (a fifo, a socket): never merged into.
    Other,
}

impl Held {
    fn version(&self) -> Option<Version<'_>> {
        match self {
            Held::Entry(b, m) => Some(Version::new(b, *m)),
            _ => None,
        }
    }
}

/// What the tree at `root` holds at `rel`, never following a symlink.
pub fn read_held(root: &Path, rel: &str) -> std::io::Result<Held> {
    let path = root.join(rel);
    let meta = match std::fs::symlink_metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR) => {
            return Ok(Held::Absent);
        }
        Err(e) => return Err(e),
    };
    let t = meta.file_type();
    if t.is_symlink() {
        Ok(Held::Entry(std::fs::read_link(&path)?.as_os_str().as_bytes().to_vec(), meta.mode()))
    } else if t.is_file() {
        Ok(Held::Entry(std::fs::read(&path)?, meta.mode()))
    } else if t.is_dir() {
        let files = super::tree::files_below(&path, root).into_iter().filter_map(|p| p.to_str().map(str::to_owned));
        Ok(Held::Folder(files.collect()))
    } else {
        Ok(Held::Other)
    }
}

/// One path a change touches, as the merge sees it.
struct Side<'a> {
    path: &'a str,
    /// The path as the task's view had it; `None` inside: absent.
    /// `None` outside: not known.
    base: Option<Option<Version<'a>>>,
    theirs: Option<Version<'a>>,
}

/// The paths `c` touches: its own, and a rename's source (which it
/// removes).
fn sides(c: &Change) -> Vec<Side<'_>> {
    let base = || -> Option<Option<Version<'_>>> {
        if c.base_unknown {
            return None;
        }
        match (&c.old, c.old_mode) {
            (Some(b), mode) => Some(Some(Version::new(b, mode.unwrap_or(S_IFREG | 0o644)))),
            // Added: absent at the start.
            (None, None) => Some(None),
            // A file too large to read: its content is not known.
            (None, Some(_)) => None,
        }
    };
    let theirs = c.new.as_deref().map(|b| Version::new(b, c.mode));
    match &c.kind {
        ChangeKind::Renamed { from } => {
            vec![Side { path: from, base: base(), theirs: None }, Side { path: &c.path, base: Some(None), theirs }]
        }
        _ => vec![Side { path: &c.path, base: base(), theirs }],
    }
}

/// A path that does not merge, and why (`PATH: why`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathConflict {
    pub path: String,
    pub why: String,
}

impl std::fmt::Display for PathConflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.why)
    }
}

/// Why a change set does not merge into a tree.
#[derive(Debug)]
pub enum SetError {
    /// Paths that conflict; nothing of the set may land.
    Conflicts(Vec<PathConflict>),
    /// The tree could not be read.
    Io(std::io::Error),
}

/// The writes that merging `changes` into the tree `ours` shows gives,
/// by path, [`Merged::Keep`] left out: all or nothing. `ours(path)` says
/// what the tree holds now (it is asked for the change's paths and the
/// folders on their way).
pub fn merge_set(
    changes: &ChangeSet,
    ours: &mut dyn FnMut(&str) -> std::io::Result<Held>,
) -> Result<BTreeMap<String, Merged>, SetError> {
    let removed: HashSet<&str> = changes
        .changes
        .iter()
        .flat_map(|c| match &c.kind {
            ChangeKind::Deleted => vec![c.path.as_str()],
            ChangeKind::Renamed { from } => vec![from.as_str()],
            _ => Vec::new(),
        })
        .collect();
    let mut out = BTreeMap::new();
    let mut conflicts = Vec::new();
    let mut conflict = |path: &str, why: String| conflicts.push(PathConflict { path: path.to_owned(), why });
    for c in &changes.changes {
        for side in sides(c) {
            let held = ours(side.path).map_err(SetError::Io)?;
            let now = match &held {
                // A folder the change replaces: fine when it removes
                // every file below it too.
                Held::Folder(files) if files.iter().all(|f| removed.contains(f.as_str())) => Held::Absent,
                Held::Folder(_) if side.theirs.is_none() && side.base == Some(None) => Held::Absent,
                Held::Folder(_) => {
                    conflict(side.path, "a folder stands there, holding files the change does not remove".into());
                    continue;
                }
                Held::Other => {
                    conflict(side.path, "something that is neither a file nor a folder stands there".into());
                    continue;
                }
                h => h.clone(),
            };
            let merged = match side.base {
                Some(base) => merge::merge(base, now.version(), side.theirs),
                None => merge::merge_unknown_base(now.version(), side.theirs),
            };
            match merged {
                Ok(Merged::Keep) => {}
                Ok(m) => {
                    if matches!(m, Merged::Write { .. })
                        && let Some(a) = blocking_ancestor(side.path, &removed, ours).map_err(SetError::Io)?
                    {
                        conflict(side.path, format!("{a} is not a folder"));
                        continue;
                    }
                    out.insert(side.path.to_owned(), m);
                }
                Err(e) => conflict(side.path, describe(e)),
            }
        }
    }
    if conflicts.is_empty() { Ok(out) } else { Err(SetError::Conflicts(conflicts)) }
}

/// The words of a conflict.
fn describe(c: Conflict) -> String {
    c.to_string()
}

/// A folder on the way to `rel` that the tree holds as something else
/// (a file the change does not remove).
fn blocking_ancestor(
    rel: &str,
    removed: &HashSet<&str>,
    ours: &mut dyn FnMut(&str) -> std::io::Result<Held>,
) -> std::io::Result<Option<String>> {
    let mut at = String::new();
    let parts: Vec<&str> = rel.split('/').collect();
    for part in &parts[..parts.len().saturating_sub(1)] {
        if !at.is_empty() {
            at.push('/');
        }
        at.push_str(part);
        match ours(&at)? {
            Held::Absent => return Ok(None),
            Held::Folder(_) => {}
            _ if removed.contains(at.as_str()) => return Ok(None),
            _ => return Ok(Some(at)),
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn modified(path: &str, old: &str, new: &str) -> Change {
        Change {
            path: path.into(),
            kind: ChangeKind::Modified,
            old: Some(old.as_bytes().to_vec()),
            new: Some(new.as_bytes().to_vec()),
            mode: S_IFREG | 0o644,
            hazard: None,
            old_mode: Some(S_IFREG | 0o644),
            base_unknown: false,
        }
    }

    fn tree(files: &[(&str, &str)]) -> impl FnMut(&str) -> std::io::Result<Held> {
        let files: BTreeMap<String, String> = files.iter().map(|(p, c)| (p.to_string(), c.to_string())).collect();
        move |p: &str| {
            Ok(match files.get(p) {
                Some(c) => Held::Entry(c.as_bytes().to_vec(), S_IFREG | 0o644),
                None if files.keys().any(|k| k.starts_with(&format!("{p}/"))) => {
                    Held::Folder(files.keys().filter(|k| k.starts_with(&format!("{p}/"))).cloned().collect())
                }
                None => Held::Absent,
            })
        }
    }

    #[test]
    fn every_path_merges_or_nothing_does() {
        let set =
            ChangeSet { changes: vec![modified("a", "1\n2\n3\n4\n", "1\n2\n3\nX\n"), modified("b", "x\n", "y\n")] };
        let mut ours = tree(&[("a", "U\n2\n3\n4\n"), ("b", "x\n")]);
        let out = merge_set(&set, &mut ours).unwrap();
        assert_eq!(out["a"], Merged::Write { bytes: b"U\n2\n3\nX\n".to_vec(), mode: S_IFREG | 0o644 });
        assert_eq!(out["b"], Merged::Write { bytes: b"y\n".to_vec(), mode: S_IFREG | 0o644 });
        // The user changed the line `b`'s change changes: the whole set conflicts.
        let mut ours = tree(&[("a", "U\n2\n3\n4\n"), ("b", "user\n")]);
        match merge_set(&set, &mut ours) {
            Err(SetError::Conflicts(c)) => assert_eq!(c.iter().map(|c| c.path.as_str()).collect::<Vec<_>>(), ["b"]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_unknown_base_conflicts_unless_the_tree_holds_the_result() {
        let mut c = modified("a", "1\n", "2\n");
        c.base_unknown = true;
        let set = ChangeSet { changes: vec![c] };
        assert!(matches!(merge_set(&set, &mut tree(&[("a", "1\n")])), Err(SetError::Conflicts(_))));
        assert!(merge_set(&set, &mut tree(&[("a", "2\n")])).unwrap().is_empty());
    }

    #[test]
    fn a_file_in_the_way_of_a_folder_conflicts() {
        let added = Change {
            path: "d/x".into(),
            kind: ChangeKind::Added,
            old: None,
            new: Some(b"x\n".to_vec()),
            mode: S_IFREG | 0o644,
            hazard: None,
            old_mode: None,
            base_unknown: false,
        };
        let set = ChangeSet { changes: vec![added] };
        match merge_set(&set, &mut tree(&[("d", "a file\n")])) {
            Err(SetError::Conflicts(c)) => assert!(c[0].why.contains("d is not a folder"), "{c:?}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(merge_set(&set, &mut tree(&[])).unwrap().len(), 1);
    }

    #[test]
    fn a_rename_of_a_user_edited_file_conflicts() {
        let renamed = Change {
            path: "new".into(),
            kind: ChangeKind::Renamed { from: "old".into() },
            old: Some(b"a\n".to_vec()),
            new: Some(b"a\n".to_vec()),
            mode: S_IFREG | 0o644,
            hazard: None,
            old_mode: Some(S_IFREG | 0o644),
            base_unknown: false,
        };
        let set = ChangeSet { changes: vec![renamed] };
        assert!(matches!(merge_set(&set, &mut tree(&[("old", "a\nuser\n")])), Err(SetError::Conflicts(_))));
        let out = merge_set(&set, &mut tree(&[("old", "a\n")])).unwrap();
        assert_eq!(out["old"], Merged::Delete);
        assert!(matches!(out["new"], Merged::Write { .. }));
    }
}
