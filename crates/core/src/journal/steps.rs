//! The steps of a transaction on the tree: each path written through a
//! temp file or removed, forward (the new contents) or backward (the old
//! ones), and the checks of the paths a transaction may touch.
//!
//! Every write checks, right before its rename (or unlink), that the path
//! still holds what it was decided on (type, permission bits, length, then
//! content): a file the user saved in between stops the write
//! ([`StepError::Changed`]) instead of being overwritten. Only the paths
//! of the transaction are read, so the check costs O(change).
//!
//! The flush writes each path's new content over its old one
//! ([`forward`]). What the next command does is three-way, with the
//! path's content now as one side ([`crate::merge`]), since the user may
//! have saved files between the kill and the recovery:
//! - [`roll_forward`]: from old to new. Now = new: nothing; now = old:
//!   new; otherwise old, now and new are merged. Every path is decided
//!   before any is written: one conflict and nothing is written (the
//!   caller rolls the transaction back instead).
//! - [`backward`]: from new to old. Now = old: nothing; now = new: old;
//!   otherwise new, now and old are merged (the change taken out, the
//!   user's edit kept); a conflict leaves the user's file as it is.

use std::io::Write;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use super::error::{StepError, UnsafePath};
use super::{Content, Step};
use crate::changes::{S_IFLNK, S_IFMT};
use crate::failpoint;
use crate::fsx::TMP_PREFIX;
use crate::merge::{Conflict, Merged, Version, merge, merge_unknown_base};
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

/// Writes every step's new state over its old one, in order: a path that
/// no longer holds its old state is not written ([`StepError::Changed`]).
/// On an error, the index of the step that failed; that path was not
/// changed (its temp file is removed).
pub(super) fn forward(root: &Path, store: &Store, steps: &[Step], points: Points) -> Result<(), (usize, StepError)> {
    let sync = sync_each(steps.len());
    for (i, s) in steps.iter().enumerate() {
        let old = s.old.as_ref().map(|c| Held::of(store, c));
        let to = Side { content: s.new.as_ref(), prune: true };
        carry_out(root, store, &s.path, &Act::Target, to, old.as_ref(), &points, sync).map_err(|e| (i, e))?;
        failpoint::hit(points.file);
    }
    Ok(())
}

/// How a [`roll_forward`] ended.
#[derive(Debug)]
pub(super) enum Forward {
    /// Every path holds its new state, merged with the user's edits.
    Done,
    /// These paths (each with why) conflict: nothing was written.
    Conflicts(Vec<String>),
    /// The step at this index failed; the ones before are written.
    Failed(usize, StepError),
}

/// Takes every step three-way from its old state to its new one, the
/// path's content now as the third side; in order, every path decided
/// before any is written.
pub(super) fn roll_forward(root: &Path, store: &Store, steps: &[Step], points: Points) -> Forward {
    let mut plan = Vec::with_capacity(steps.len());
    let mut conflicts = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        match look(root, store, &s.path, s.old.as_ref(), s.new.as_ref()) {
            Ok((Act::Conflict(c), _)) => conflicts.push(format!("{}: {c}", s.path)),
            Ok(decided) => plan.push(decided),
            Err(e) => return Forward::Failed(i, e),
        }
    }
    if !conflicts.is_empty() {
        return Forward::Conflicts(conflicts);
    }
    let sync = sync_each(steps.len());
    for (i, (s, (act, held))) in steps.iter().zip(&plan).enumerate() {
        let to = Side { content: s.new.as_ref(), prune: true };
        if let Err(e) = carry_out(root, store, &s.path, act, to, held.as_ref(), &points, sync) {
            return Forward::Failed(i, e);
        }
        failpoint::hit(points.file);
    }
    Forward::Done
}

/// What a roll back left other than it was.
#[derive(Debug, Default)]
pub(super) struct Back {
    /// Paths that could not be written (each with why): the next command
    /// tries again.
    pub(super) failed: Vec<String>,
    /// Paths the user edited after the change was written, where taking
    /// the change back out conflicts with the edit (each with why): left
    /// as the user left them, for good.
    pub(super) kept: Vec<String>,
}

impl Back {
    /// Both lists, the failed paths first.
    pub(super) fn all(self) -> Vec<String> {
        self.failed.into_iter().chain(self.kept).collect()
    }
}

/// Takes every step three-way back from its new state to its old one,
/// last first: the writes, then the folders they made (when empty), then
/// the deletions.
pub(super) fn backward(root: &Path, store: &Store, steps: &[Step], made: &[String], points: Points) -> Back {
    let mut back = Back::default();
    let sync = sync_each(steps.len());
    let restore = |s: &Step, back: &mut Back| {
        match undo(root, store, s, &points, sync) {
            Ok(None) => {}
            Ok(Some(c)) => back.kept.push(format!(
                "{}: left as it is: taking the change back out conflicts with an edit made meanwhile ({c})",
                s.path
            )),
            Err(e) => back.failed.push(format!("{}: {e}", s.path)),
        }
        failpoint::hit(points.file);
    };
    for s in steps.iter().rev().filter(|s| s.new.is_some()) {
        restore(s, &mut back);
    }
    for dir in made.iter().rev() {
        let _ = std::fs::remove_dir(root.join(dir));
    }
    for s in steps.iter().rev().filter(|s| s.new.is_none()) {
        restore(s, &mut back);
    }
    back
}

/// How many times a roll back looks at a path again when it changed
/// between the look and the rename.
const LOOKS: usize = 3;

/// Takes one step back three-way; `Some`: it conflicts, and the path is
/// left as it is.
fn undo(root: &Path, store: &Store, s: &Step, points: &Points, sync: bool) -> Result<Option<Conflict>, StepError> {
    let mut looked = 1;
    loop {
        let (act, held) = look(root, store, &s.path, s.new.as_ref(), s.old.as_ref())?;
        if let Act::Conflict(c) = act {
            return Ok(Some(c));
        }
        let to = Side { content: s.old.as_ref(), prune: false };
        match carry_out(root, store, &s.path, &act, to, held.as_ref(), points, sync) {
            Err(StepError::Changed) if looked < LOOKS => looked += 1,
            done => return done.map(|()| None),
        }
    }
}

/// What a three-way step does at one path.
#[derive(Debug)]
pub(super) enum Act {
    /// The path already holds the result.
    Nothing,
    /// The target state goes in (the path goes, when the target is
    /// absent).
    Target,
    /// The merge of the target and the path's content goes in.
    Merged { bytes: Vec<u8>, mode: u32 },
    /// The two do not merge: the path is left as it is.
    Conflict(Conflict),
}

/// Where a step goes: the target state, and whether removing the path
/// removes the folders above it left empty.
#[derive(Clone, Copy)]
struct Side<'a> {
    content: Option<&'a Content>,
    prune: bool,
}

/// Reads `rel` and decides how to take it from `from` to `to`, three-way;
/// with what the path held, for the check before the rename.
fn look(
    root: &Path,
    store: &Store,
    rel: &str,
    from: Option<&Content>,
    to: Option<&Content>,
) -> Result<(Act, Option<Held>), StepError> {
    let now = read_now(root, rel)?;
    let held = now.as_ref().map(Now::held);
    let act = decide(store, from, to, now.as_ref(), held.as_ref())?;
    Ok((act, held))
}

/// How to take a path that holds `now` (`held`) from `base` to `target`:
/// the three-way rule, with `now` as the path's own side.
fn decide(
    store: &Store,
    base: Option<&Content>,
    target: Option<&Content>,
    now: Option<&Now>,
    held: Option<&Held>,
) -> Result<Act, StepError> {
    let is = |c: Option<&Content>| match (held, c) {
        (None, None) => true,
        (Some(h), Some(c)) => h.is(c),
        _ => false,
    };
    if is(target) {
        return Ok(Act::Nothing);
    }
    if is(base) {
        return Ok(Act::Target);
    }
    let theirs = target.map(|c| store.get_object(&c.hash).map(|b| (b, c.mode))).transpose()?;
    let theirs = theirs.as_ref().map(|(b, m)| Version::new(b, *m));
    let ours = now.map(|n| Version::new(&n.bytes, n.mode));
    let merged = match base.map(|c| store.get_object(&c.hash).map(|b| (b, c.mode))).transpose() {
        Ok(base) => merge(base.as_ref().map(|(b, m)| Version::new(b, *m)), ours, theirs),
        // The content the step started from is no longer whole in the
        // store: never a guess.
        Err(_) => merge_unknown_base(ours, theirs),
    };
    Ok(match merged {
        Ok(Merged::Keep) => Act::Nothing,
        Ok(Merged::Delete) => Act::Target,
        Ok(Merged::Write { bytes, mode }) => Act::Merged { bytes, mode },
        Err(c) => Act::Conflict(c),
    })
}

/// Does `act` at `rel`, toward `to`, provided the path still holds `held`
/// right before the rename or unlink.
#[allow(clippy::too_many_arguments)]
fn carry_out(
    root: &Path,
    store: &Store,
    rel: &str,
    act: &Act,
    to: Side<'_>,
    held: Option<&Held>,
    points: &Points,
    sync: bool,
) -> Result<(), StepError> {
    match act {
        Act::Nothing | Act::Conflict(_) => Ok(()),
        Act::Target => match to.content {
            Some(c) => place(root, rel, &store.get_object(&c.hash)?, c.mode, held, points, sync),
            None => remove(root, rel, to.prune, held),
        },
        Act::Merged { bytes, mode } => place(root, rel, bytes, *mode, held, points, sync),
    }
}

/// File type and permission bits: what comparisons of modes look at.
fn kept(mode: u32) -> u32 {
    mode & (S_IFMT | 0o777)
}

/// What a path holds, as checked right before a rename: its length (when
/// known), its content's hash (a symlink's: its target's) and its type and
/// permission bits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Held {
    len: Option<u64>,
    hash: String,
    mode: u32,
}

impl Held {
    /// A content of the journal (its length from the store).
    fn of(store: &Store, c: &Content) -> Held {
        Held { len: store.object_len(&c.hash).ok(), hash: c.hash.clone(), mode: kept(c.mode) }
    }

    fn is(&self, c: &Content) -> bool {
        self.hash == c.hash && self.mode == kept(c.mode)
    }
}

/// A file's (or a symlink's) content and mode, read whole.
struct Now {
    bytes: Vec<u8>,
    mode: u32,
}

impl Now {
    fn held(&self) -> Held {
        Held {
            len: Some(self.bytes.len() as u64),
            hash: blake3::hash(&self.bytes).to_hex().to_string(),
            mode: kept(self.mode),
        }
    }
}

/// Up to this many paths, each file is synced before it is renamed in;
/// past it, the whole file system is synced once before the journal goes
/// (one `syncfs` costs tens of milliseconds, one file's sync well under
/// one).
const SYNC_EACH_UP_TO: usize = 32;

pub(super) fn sync_each(paths: usize) -> bool {
    paths <= SYNC_EACH_UP_TO
}

/// Writes `bytes` with `mode` (a regular file's permission bits, or a
/// symlink whose target they are) at `rel` through a temp file in its
/// folder, provided the path still holds `held` (`None`: absent, or a
/// folder) right before the rename; `sync`: the temp file's data is synced
/// before the rename.
fn place(
    root: &Path,
    rel: &str,
    bytes: &[u8],
    mode: u32,
    held: Option<&Held>,
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
    let tmp = dir.join(crate::fsx::temp_name());
    let written = (|| {
        if mode & S_IFMT == S_IFLNK {
            std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(bytes), &tmp)?;
        } else {
            let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
            f.write_all(bytes)?;
            f.set_permissions(std::fs::Permissions::from_mode(mode & 0o7777))?;
            if sync {
                f.sync_data()?;
            }
        }
        failpoint::hit(points.temp);
        still_holds(&path, rel, held)?;
        std::fs::rename(&tmp, &path)?;
        Ok(())
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Removes the file (or symlink) at `rel`, provided it still holds `held`
/// right before the unlink; `prune`: and the folders above it left empty.
/// A folder there is left alone.
fn remove(root: &Path, rel: &str, prune: bool, held: Option<&Held>) -> Result<(), StepError> {
    let path = root.join(rel);
    match std::fs::symlink_metadata(&path) {
        Err(e) if absent(&e) => {}
        Err(e) => return Err(e.into()),
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            still_holds(&path, rel, held)?;
            std::fs::remove_file(&path)?;
        }
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

/// [`StepError::Changed`] unless `path` holds `held` (`None`: absent, or a
/// folder): type and permission bits and length first, then the content.
fn still_holds(path: &Path, rel: &str, held: Option<&Held>) -> Result<(), StepError> {
    before_rename(rel);
    let meta = match std::fs::symlink_metadata(path) {
        Err(e) if absent(&e) => return if held.is_none() { Ok(()) } else { Err(StepError::Changed) },
        Err(e) => return Err(e.into()),
        Ok(m) => m,
    };
    let ft = meta.file_type();
    if ft.is_dir() {
        return if held.is_none() { Ok(()) } else { Err(StepError::Changed) };
    }
    let Some(h) = held else { return Err(StepError::Changed) };
    if (!ft.is_file() && !ft.is_symlink()) || kept(meta.mode()) != h.mode || h.len.is_some_and(|l| l != meta.len()) {
        return Err(StepError::Changed);
    }
    let hash = if ft.is_symlink() {
        blake3::hash(std::fs::read_link(path)?.as_os_str().as_bytes())
    } else {
        let mut hasher = blake3::Hasher::new();
        std::io::copy(&mut std::fs::File::open(path)?, &mut hasher)?;
        hasher.finalize()
    };
    if hash.to_hex().as_str() == h.hash { Ok(()) } else { Err(StepError::Changed) }
}

/// What the tests run right before the check of a rename or an unlink.
#[cfg(test)]
pub(super) type Hook = Box<dyn FnMut(&str)>;

#[cfg(test)]
thread_local! {
    /// Called with the path right before each check that precedes a
    /// rename or an unlink: where the tests' user saves a file.
    pub(super) static BEFORE_RENAME: std::cell::RefCell<Option<Hook>> =
        const { std::cell::RefCell::new(None) };
}

#[cfg(test)]
fn before_rename(rel: &str) {
    BEFORE_RENAME.with(|h| {
        if let Some(f) = h.borrow_mut().as_mut() {
            f(rel);
        }
    });
}

#[cfg(not(test))]
fn before_rename(_: &str) {}

/// The file or symlink at `rel` now, read whole; `None` when absent (or a
/// folder, which the change's deletions empty).
fn read_now(root: &Path, rel: &str) -> Result<Option<Now>, StepError> {
    let path = root.join(rel);
    let meta = match std::fs::symlink_metadata(&path) {
        Err(e) if absent(&e) => return Ok(None),
        Err(e) => return Err(e.into()),
        Ok(m) => m,
    };
    let ft = meta.file_type();
    let bytes = if ft.is_symlink() {
        std::fs::read_link(&path)?.into_os_string().into_vec()
    } else if ft.is_file() {
        std::fs::read(&path)?
    } else if ft.is_dir() {
        return Ok(None);
    } else {
        return Err(StepError::Special(rel.to_owned()));
    };
    Ok(Some(Now { bytes, mode: meta.mode() }))
}

/// The content at `rel` now, stored as an object; `None` when absent (or
/// a folder, which the change's deletions empty).
pub(super) fn capture(root: &Path, store: &Store, rel: &str) -> Result<Option<Content>, StepError> {
    // Read, not hard-linked into the store: a link would let a later edit
    // of the user's file change the object.
    let Some(now) = read_now(root, rel)? else { return Ok(None) };
    let hash = store.put_object(&now.bytes)?;
    Ok(Some(Content { hash, mode: now.mode }))
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
