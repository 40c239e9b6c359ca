//! Writing a task's change into the user's tree ([`integrate`]): what is
//! never written ([`never_written`]), and what the user changed since the
//! task started ([`start_stamp`], [`conflicts`]).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::tree::files_below;
use cassist_core::changes::{Change, ChangeKind, ChangeSet};
use cassist_core::journal;
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
    /// Files the user changed since the workspace was made.
    #[error("conflict: changed in the project meanwhile: {}", .0.join(", "))]
    Conflict(Vec<String>),
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

/// The paths of `changes` the project's tree at `root` no longer shows as
/// the task that made them saw it when it started at `started` ([`start_stamp`]),
/// sorted: O(change), no other file is looked at. A path is a conflict
/// when:
/// - it exists and its ctime is at or after the start (the user, or
///   anything else, changed it since; nothing sets a ctime back);
/// - the change expects it (a modified, deleted or renamed file) and it
///   is gone;
/// - it is a folder the change replaces by a file, and the folder holds a
///   file the change does not remove;
/// - a file stands where the change needs a folder on its way.
///
/// A path `in_view` says an integration layer under the task's workspace
/// (not yet in the tree) changed is a conflict only when it exists in the
/// tree with a ctime at or after the start.
pub fn conflicts(root: &Path, changes: &ChangeSet, started: i128, in_view: &dyn Fn(&str) -> bool) -> Vec<String> {
    // Paths the change set removes (a folder may give way to a file).
    let removed: std::collections::HashSet<&str> = changes
        .changes
        .iter()
        .flat_map(|c| match &c.kind {
            ChangeKind::Deleted => vec![c.path.as_str()],
            ChangeKind::Renamed { from } => vec![from.as_str()],
            _ => Vec::new(),
        })
        .collect();
    let changed_since = |m: &std::fs::Metadata| Stamp::of(m).ctime_ns >= started;
    let mut out = Vec::new();
    let mut check = |rel: &str, expected: bool| {
        let conflict = match std::fs::symlink_metadata(root.join(rel)) {
            Ok(m) if changed_since(&m) => true,
            _ if in_view(rel) => false,
            // A folder the change replaces by a file: fine when every file
            // it holds is removed by the change too.
            Ok(m) if m.is_dir() => {
                !files_below(&root.join(rel), root).iter().all(|p| p.to_str().is_some_and(|p| removed.contains(p)))
            }
            Ok(_) => false,
            Err(_) if expected => true,
            // Absent, as the change expects: a file on its way that stands
            // where a folder must be is the user's.
            Err(_) => Path::new(rel)
                .ancestors()
                .skip(1)
                .filter(|a| !a.as_os_str().is_empty())
                .find_map(|a| std::fs::symlink_metadata(root.join(a)).ok().map(|m| (a, m)))
                .is_some_and(|(a, m)| !m.is_dir() && !a.to_str().is_some_and(|a| removed.contains(a))),
        };
        if conflict {
            out.push(rel.to_owned());
        }
    };
    for c in &changes.changes {
        check(&c.path, !matches!(c.kind, ChangeKind::Added | ChangeKind::Renamed { .. }));
        if let ChangeKind::Renamed { from } = &c.kind {
            check(from, true);
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Begins writing `changes` into the user's tree at `root`, uncommitted,
/// as a journaled transaction ([`cassist_core::journal`]): the files are written
/// when this returns, and the transaction stays open until the caller
/// commits it (with the task's lock line) or rolls it back; a killed
/// cassist's open transaction is rolled back by the next command.
///
/// A change integration must never write ([`never_written`]) refuses the
/// whole set; then the changed paths are checked against the task's start
/// ([`conflicts`]): one changed meanwhile is a conflict and nothing is
/// written. Modes are written without special bits.
pub fn integrate(root: &Path, changes: &ChangeSet, started: i128) -> Result<journal::Open, IntegrateError> {
    let refused: Vec<String> =
        changes.changes.iter().filter_map(|c| never_written(c).map(|why| format!("{}: {why}", c.path))).collect();
    if !refused.is_empty() {
        return Err(IntegrateError::Refused(refused));
    }
    let conflicts = conflicts(root, changes, started, &|_| false);
    if !conflicts.is_empty() {
        return Err(IntegrateError::Conflict(conflicts));
    }
    let mut transaction = journal::Transaction::new(root);
    for c in &changes.changes {
        if let ChangeKind::Renamed { from } = &c.kind {
            transaction.delete(from);
        }
        match &c.new {
            Some(bytes) => transaction.write(&c.path, bytes, c.mode).map_err(IntegrateError::Io)?,
            None => transaction.delete(&c.path),
        }
    }
    Ok(transaction.begin()?)
}
