//! The steps of a transaction on the tree: each path written through a
//! temp file or removed, forward (the new contents) or backward (the old
//! ones), and the checks of the paths a transaction may touch.

use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use super::error::{StepError, UnsafePath};
use super::{Content, Step};
use crate::failpoint;
use crate::fsx::TMP_PREFIX;
use crate::store::Store;

/// The failpoints of one way through the steps: after a temp file is
/// written (before its rename), after each path.
pub(super) struct Points {
    pub(super) temp: &'static str,
    pub(super) file: &'static str,
}

pub(super) const FLUSH: Points = Points { temp: "flush-temp", file: "flush-file" };
pub(super) const UNDO: Points = Points { temp: "rollback-temp", file: "rollback-file" };
pub(super) const RECOVER: Points = Points { temp: "recover-temp", file: "recover-file" };

/// Writes every step's new state, in order. On an error, the index of the
/// step that failed (it may be half done: a temp file, which is removed).
pub(super) fn forward(root: &Path, store: &Store, steps: &[Step], points: Points) -> Result<(), (usize, StepError)> {
    let sync = sync_each(steps.len());
    for (i, s) in steps.iter().enumerate() {
        match &s.new {
            Some(c) => place(root, store, &s.path, c, &points, sync),
            None => remove(root, &s.path, true).map_err(StepError::from),
        }
        .map_err(|e| (i, e))?;
        failpoint::hit(points.file);
    }
    Ok(())
}

/// Puts every step's old state back, last first: the writes, then the
/// folders they made (when empty), then the deletions. Returns what could
/// not be put back, with why.
pub(super) fn backward(root: &Path, store: &Store, steps: &[Step], made: &[String], points: Points) -> Vec<String> {
    let mut problems = Vec::new();
    let sync = sync_each(steps.len());
    let restore = |s: &Step, problems: &mut Vec<String>| {
        let done = match &s.old {
            Some(c) => place(root, store, &s.path, c, &points, sync),
            None => remove(root, &s.path, false).map_err(StepError::from),
        };
        if let Err(e) = done {
            problems.push(format!("{}: {e}", s.path));
        }
        failpoint::hit(points.file);
    };
    for s in steps.iter().rev().filter(|s| s.new.is_some()) {
        restore(s, &mut problems);
    }
    for dir in made.iter().rev() {
        let _ = std::fs::remove_dir(root.join(dir));
    }
    for s in steps.iter().rev().filter(|s| s.new.is_none()) {
        restore(s, &mut problems);
    }
    problems
}

/// Up to this many paths, each file is synced before it is renamed in;
/// past it, the whole file system is synced once before the journal goes
/// (one `syncfs` costs tens of milliseconds, one file's sync well under
/// one).
const SYNC_EACH_UP_TO: usize = 32;

pub(super) fn sync_each(paths: usize) -> bool {
    paths <= SYNC_EACH_UP_TO
}

/// Writes `content` at `rel` through a temp file in its folder; `sync`:
/// the temp file's data is synced before the rename.
fn place(
    root: &Path,
    store: &Store,
    rel: &str,
    content: &Content,
    points: &Points,
    sync: bool,
) -> Result<(), StepError> {
    let path = root.join(rel);
    let dir = path.parent().unwrap_or(root);
    std::fs::create_dir_all(dir)?;
    // A folder of the project that is a symlink leading elsewhere is not
    // written through.
    let real = dir.canonicalize()?;
    if !real.starts_with(root.canonicalize()?) {
        return Err(StepError::Outside(real));
    }
    let bytes = store.get_object(&content.hash)?;
    let tmp = dir.join(crate::fsx::temp_name());
    let written = (|| {
        if content.is_symlink() {
            std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(&bytes), &tmp)?;
        } else {
            let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
            f.write_all(&bytes)?;
            f.set_permissions(std::fs::Permissions::from_mode(content.mode & 0o7777))?;
            if sync {
                f.sync_data()?;
            }
        }
        failpoint::hit(points.temp);
        std::fs::rename(&tmp, &path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    Ok(written?)
}

/// Removes the file (or symlink) at `rel`; `prune`: and the folders above
/// it left empty. A folder there is left alone.
fn remove(root: &Path, rel: &str, prune: bool) -> std::io::Result<()> {
    let path = root.join(rel);
    match std::fs::symlink_metadata(&path) {
        Err(e) if absent(&e) => {}
        Err(e) => return Err(e),
        Ok(m) if m.is_dir() => {}
        Ok(_) => std::fs::remove_file(&path)?,
    }
    if prune {
        let mut dir = path.parent();
        while let Some(d) = dir {
            if d == root || !d.starts_with(root) || std::fs::remove_dir(d).is_err() {
                break;
            }
            dir = d.parent();
        }
    }
    Ok(())
}

/// The content at `rel` now, stored as an object; `None` when absent (or
/// a folder, which the change's deletions empty).
pub(super) fn capture(root: &Path, store: &Store, rel: &str) -> Result<Option<Content>, StepError> {
    let path = root.join(rel);
    let meta = match std::fs::symlink_metadata(&path) {
        Err(e) if absent(&e) => return Ok(None),
        Err(e) => return Err(e.into()),
        Ok(m) => m,
    };
    let ft = meta.file_type();
    let hash = if ft.is_symlink() {
        store.put_object(std::fs::read_link(&path)?.as_os_str().as_bytes())?
    } else if ft.is_file() {
        // Read, not hard-linked into the store: a link would let a later
        // edit of the user's file change the object.
        store.put_object(&std::fs::read(&path)?)?
    } else if ft.is_dir() {
        return Ok(None);
    } else {
        return Err(StepError::Special(rel.to_owned()));
    };
    Ok(Some(Content { hash, mode: meta.mode() }))
}

/// An error that says the path is not there (a missing file, or a file
/// where a folder of the path would be).
fn absent(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(nix::errno::Errno::ENOTDIR as i32)
}

/// The folders the writes of `steps` make, shallowest first.
pub(super) fn made_folders(root: &Path, steps: &[Step]) -> Vec<String> {
    let mut made = std::collections::BTreeSet::new();
    for s in steps.iter().filter(|s| s.new.is_some()) {
        let mut missing = Vec::new();
        let mut dir = Path::new(&s.path).parent();
        while let Some(d) = dir.filter(|d| !d.as_os_str().is_empty()) {
            if made.contains(&d.to_string_lossy().into_owned()) || root.join(d).is_dir() {
                break;
            }
            missing.push(d.to_string_lossy().into_owned());
            dir = d.parent();
        }
        made.extend(missing);
    }
    // Sorted by depth, then name: parents before their children.
    let mut made: Vec<String> = made.into_iter().collect();
    made.sort_by_key(|d| (d.matches('/').count(), d.clone()));
    made
}

/// Why `rel` is no path a transaction may touch: not relative and plain,
/// or in git's or cassist's own folder.
pub(super) fn unsafe_path(rel: &str) -> Option<UnsafePath> {
    let p = Path::new(rel);
    if rel.is_empty() || !p.components().all(|c| matches!(c, Component::Normal(_))) {
        return Some(UnsafePath::NotPlain);
    }
    match p.components().next() {
        Some(Component::Normal(first)) if first == ".git" || first == ".cassist" => Some(UnsafePath::OwnFolder),
        _ => None,
    }
}

/// The `.cassist-tmp-*` files directly in folder `dir`.
pub(super) fn temps_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    rd.flatten()
        .filter(|e| e.file_name().as_bytes().starts_with(TMP_PREFIX.as_bytes()))
        .filter(|e| e.file_type().is_ok_and(|t| !t.is_dir()))
        .map(|e| e.path())
        .collect()
}

/// Removes the temp files in the given folders of the root; how many.
pub(super) fn remove_temps(root: &Path, folders: &[String]) -> usize {
    folders.iter().flat_map(|f| temps_in(&root.join(f))).filter(|p| std::fs::remove_file(p).is_ok()).count()
}
