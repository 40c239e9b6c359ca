//! Writing a task's change into the user's tree ([`integrate`]): what is
//! never written ([`never_written`]), each path merged three-way with what
//! the tree holds now ([`super::threeway`]), and when the task started
//! ([`start_stamp`]: a path the tree changed at since has no known base
//! unless a copy of it was kept).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::threeway::{PathConflict, SetError, merge_set, read_held};
use cassist_core::changes::{Change, ChangeKind, ChangeSet};
use cassist_core::journal;
use cassist_core::merge::Merged;
use cassist_core::paths::{Stamp, is_reserved};

/// When a task started, as the project's own file system stamps a change
/// made then: the ctime of a file made in `.cassist/` (or, in a project
/// without one, in `scratch`) and removed at once, changed until its ctime
/// moves past the one it was made with. A file system stamps changes with
/// a clock that ticks (by a few milliseconds, a second on some): what was
/// written just before (another task's change, the fixture of a test) may
/// carry the same stamp as the marker; once the stamp has moved on, every
/// change to the tree from then on has a ctime after what was written
/// before, at or after the returned one. The conflict check
/// ([`conflicts`]) compares changed paths' ctimes with it. Costs well
/// under a millisecond where stamps are fine-grained once read (Linux 6.13
/// and later), up to one tick of the clock elsewhere.
pub fn start_stamp(root: &Path, scratch: &Path) -> std::io::Result<i128> {
    let state = cassist_core::fsx::state_dir(root);
    let dir = if state.is_dir() { state } else { scratch.to_path_buf() };
    let marker = tempfile::Builder::new().prefix("started-").tempfile_in(dir)?;
    let ctime = || marker.as_file().metadata().map(|m| Stamp::of(&m).ctime_ns);
    let first = ctime()?;
    let give_up = std::time::Instant::now() + std::time::Duration::from_millis(1100);
    loop {
        // A change of the marker's mode changes its ctime only.
        marker.as_file().set_permissions(std::fs::Permissions::from_mode(0o600))?;
        let now = ctime()?;
        if now > first || std::time::Instant::now() > give_up {
            return Ok(now);
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
}

/// What an integration wrote.
#[derive(Debug, Default)]
pub struct Integrated {
    pub written: Vec<String>,
    pub deleted: Vec<String>,
}

/// Why integration did not happen. The user's tree is unchanged.
#[derive(Debug, thiserror::Error)]
pub enum IntegrateError {
    /// Paths whose edits since the task started do not merge with the
    /// change (each with why).
    #[error("conflict: {}", .0.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(", "))]
    Conflict(Vec<PathConflict>),
    /// Changes that are never written, whatever the review said (special
    /// files and bits, symlinks leaving the project, names that are not
    /// UTF-8, unread files): each with why.
    #[error("refused to write {}", .0.join(", "))]
    Refused(Vec<String>),
    /// The tree could not be written.
    #[error("cannot write the change: {0}")]
    Io(#[source] std::io::Error),
    /// The journal could not be written (nothing of the change was).
    #[error("cannot write the change: {0}")]
    Journal(#[from] cassist_core::journal::JournalError),
}

/// Why `c` must never be written into a tree, whatever the review said:
/// [`Change::unsafe_reason`], or a path below `.git/` or `.cassist/`.
pub fn never_written(c: &Change) -> Option<String> {
    c.unsafe_reason().or_else(|| {
        let from = match &c.kind {
            ChangeKind::Renamed { from } => Some(from.as_str()),
            _ => None,
        };
        std::iter::once(c.path.as_str())
            .chain(from)
            .find(|p| is_reserved(p))
            .map(|p| format!("`{p}` lies in git's or cassist's own folder"))
    })
}

/// Begins writing `changes` into the user's tree at `root`, uncommitted,
/// as a journaled transaction ([`cassist_core::journal`]): the files are written
/// when this returns, and the transaction stays open until the caller
/// commits it (with the task's lock line) or rolls it back; a killed
/// cassist's open transaction is rolled back by the next command.
///
/// A change integration must never write ([`never_written`]) refuses the
/// whole set; then every path is merged three-way into the tree as it is
/// ([`merge_set`]): one that conflicts leaves the whole set out, and
/// nothing is written. Modes are written without special bits.
pub fn integrate(root: &Path, changes: &ChangeSet) -> Result<journal::Open, IntegrateError> {
    let refused: Vec<String> =
        changes.changes.iter().filter_map(|c| never_written(c).map(|why| format!("{}: {why}", c.path))).collect();
    if !refused.is_empty() {
        return Err(IntegrateError::Refused(refused));
    }
    let merged = match merge_set(changes, &mut |p| read_held(root, p)) {
        Ok(m) => m,
        Err(SetError::Conflicts(c)) => return Err(IntegrateError::Conflict(c)),
        Err(SetError::Io(e)) => return Err(IntegrateError::Io(e)),
    };
    let mut transaction = journal::Transaction::new(root);
    write_merged(&mut transaction, &merged).map_err(IntegrateError::Io)?;
    Ok(transaction.begin()?)
}

/// Puts merged paths into a transaction (deletions are ordered first by
/// the transaction itself).
pub fn write_merged(
    transaction: &mut journal::Transaction,
    merged: &std::collections::BTreeMap<String, Merged>,
) -> std::io::Result<()> {
    for (path, m) in merged {
        match m {
            Merged::Write { bytes, mode } => transaction.write(path, bytes, *mode)?,
            Merged::Delete => transaction.delete(path),
            Merged::Keep => {}
        }
    }
    Ok(())
}
