//! Crash-safe writes of the user's tree: a change goes in as one
//! journaled transaction, so that a cassist killed at any moment leaves
//! every file whole, old or new, and the next command finishes the job.
//!
//! A [`Transaction`] lists files to write (their contents are objects of
//! the store) and files to delete, and the `cassist.lock` lines that go
//! with them. Applying it:
//!
//! 1. the old content of every path it touches is stored as an object
//!    (or noted absent);
//! 2. the journal, `.cassist/journal`, is written: every path with its new
//!    and old content and mode, the folders the transaction makes, the lock
//!    lines and what the lock held for their tasks, and a checksum of all
//!    that; it is written beside (a temp file), synced and renamed in, and
//!    `.cassist/` is synced. Nothing of the tree is touched before;
//! 3. each file is written through a temp file named `.cassist-tmp-*` in
//!    its own folder (written, synced, renamed over the file), or unlinked;
//!    deletions go first (a folder may give way to a file), folders left
//!    empty by a deletion go too. Right before each rename (or unlink) the
//!    path must still hold its old content: a file the user saved since
//!    step 1 stops the transaction, which is rolled back
//!    ([`JournalError::Changed`]), and the user's file stays as it is;
//! 4. the lock lines are written, then the journal is removed and
//!    `.cassist/` synced.
//!
//! The runner's flush knows its lock lines before it writes anything (the
//! after-states are hashed on the tree as the changes will leave it), so
//! its journal is committed from the start ([`Transaction::apply`]): one
//! journal written and flushed per integration. A transaction can also
//! stay *open* after step 3 ([`Transaction::begin`]): the caller looks at
//! the tree it made and then either commits it with its lock lines
//! ([`Open::commit`]: the journal is first rewritten as committed, with the
//! lines) or rolls it back ([`Open::roll_back`]). An open transaction that
//! is dropped is rolled back.
//!
//! [`recover()`] is what the next command does first with what a killed
//! cassist left. The user may have saved files between the kill and then,
//! so each path is taken three-way, its content now being one side
//! ([`crate::merge`]): a committed journal is rolled forward (a path that
//! holds its new content stays, one that holds its old content gets the
//! new one, one the user edited gets the merge of the edit and the
//! change) and its lock lines written; where an edit conflicts with the
//! change, nothing is written forward and the whole transaction is rolled
//! back instead, the lock's lines for its tasks as they were before (its
//! tasks are replayed from the store). An open journal, or a committed one whose new contents are no
//! longer whole in the store, is rolled back: a path that holds its new
//! content gets its old one back, one the user edited since gets the
//! change taken out of the edit, or, where that conflicts, is left as the
//! user made it. Either way the temp files in the journal's folders are
//! removed and the journal goes; a recovery killed half-way is simply done
//! again, the same way (a journal turned back is first rewritten as
//! open). A journal that does not read back whole (its checksum) was
//! never acted on, since the tree is touched only once the journal is
//! complete: the tree is left as it is.
//!
//! One transaction at a time per project: the caller keeps them apart (the
//! runner's integration lock, the project lock between processes).
//!
//! The kill tests hit the [`crate::failpoint`]s named `flush-*` here (after
//! each step), `rollback-*` and `recover-*`. A SIGKILL is what they check;
//! against a power loss, what a transaction wrote is on disk before its
//! journal goes: each file's data is synced before it is renamed in (or,
//! for a large transaction, the file system is synced once), and the
//! journal's removal is synced.
//!
//! Here: the transaction and its two ends. The journal file's format and
//! checksum are in `file.rs`, the steps on the tree (writing a path
//! through a temp file, putting an old content back, the paths refused)
//! in `steps.rs`, what the next command does in `recover.rs`.

mod error;
mod file;
mod recover;
mod steps;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use crate::changes::{S_IFLNK, S_IFMT, S_IFREG};
use crate::failpoint;
use crate::fsx::state_dir;
use crate::lock::{Lock, LockLine};
use crate::merge::Version;
use crate::store::Store;
pub use error::{JournalError, StepError, UnsafePath};
pub use file::JOURNAL;
use file::{FORMAT, remove_journal, write_journal};
pub use recover::{Outcome, Recovered, pending, recover};
use steps::{FLUSH, UNDO, backward, capture, forward, made_folders, remove_temps, unsafe_path};

/// A file's content, as an object of the store, and its mode (type and
/// permission bits: a regular file or a symlink, whose content is its
/// target).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Content {
    pub hash: String,
    pub mode: u32,
}

impl Content {
    /// The same content, type and permission bits as `hash` and `mode`.
    fn is(&self, hash: &str, mode: u32) -> bool {
        const KEPT: u32 = S_IFMT | 0o777;
        self.hash == hash && self.mode & KEPT == mode & KEPT
    }
}

/// One path of a transaction: what it becomes (`None`: deleted) and what
/// it was (`None`: absent).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Step {
    path: String,
    new: Option<Content>,
    old: Option<Content>,
}

/// The journal's document.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Journal {
    format: u32,
    /// Its lock lines are final: roll forward. Otherwise the transaction
    /// was still open: roll back.
    committed: bool,
    /// Deletions first, then writes.
    steps: Vec<Step>,
    /// The folders the writes make (absent before), shallowest first.
    made: Vec<String>,
    lock: Vec<LockLine>,
    /// What the lock held for the tasks of `lock` before (`None`: no
    /// line): put back when a committed journal is turned back, since
    /// its lines may be written already.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    lock_before: Vec<LockLine>,
}

impl Journal {
    /// The folders the journal's temp files may lie in: each path's own,
    /// and the root (the lock file's).
    fn folders(&self) -> Vec<String> {
        let mut dirs: Vec<String> = self
            .steps
            .iter()
            .map(|s| Path::new(&s.path).parent().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default())
            .chain([String::new()])
            .collect();
        dirs.sort();
        dirs.dedup();
        dirs
    }
}

/// Changes to write into the user's tree as one crash-safe step.
#[derive(Debug)]
pub struct Transaction {
    root: PathBuf,
    store: Store,
    writes: Vec<(String, Content)>,
    deletes: Vec<String>,
    /// What the caller saw at a path (hash and mode; `None`: absent).
    expected: Vec<(String, Option<(String, u32)>)>,
}

impl Transaction {
    /// A transaction on the project at `root` (its store is the project's).
    pub fn new(root: &Path) -> Transaction {
        Transaction {
            root: root.to_path_buf(),
            store: Store::open(root),
            writes: Vec::new(),
            deletes: Vec::new(),
            expected: Vec::new(),
        }
    }

    /// `path` (relative to the root) gets `bytes`, stored now as an
    /// object. `mode` says a regular file (its permission bits are kept,
    /// never a setuid, setgid or sticky bit) or a symlink (`bytes` is its
    /// target).
    pub fn write(&mut self, path: &str, bytes: &[u8], mode: u32) -> std::io::Result<()> {
        let hash = self.store.put_object(bytes)?;
        self.write_stored(path, &hash, mode);
        Ok(())
    }

    /// `path` gets the store object `hash` (already stored), as
    /// [`Transaction::write`].
    pub fn write_stored(&mut self, path: &str, hash: &str, mode: u32) {
        let mode = if mode & S_IFMT == S_IFLNK { S_IFLNK | 0o777 } else { S_IFREG | (mode & 0o777) };
        self.writes.push((path.to_owned(), Content { hash: hash.to_owned(), mode }));
    }

    /// `path` is deleted (nothing if it is absent).
    pub fn delete(&mut self, path: &str) {
        self.deletes.push(path.to_owned());
    }

    /// The caller decided what to write at `path` on the tree holding
    /// `old` there (`None`: absent), a merge's own side, say: the
    /// transaction is refused ([`JournalError::Changed`], nothing written)
    /// when the path holds anything else by the time its old content is
    /// kept, and stopped as any write when it does right before its
    /// rename.
    pub fn expect(&mut self, path: &str, old: Option<Version<'_>>) {
        let seen = old.map(|v| (blake3::hash(v.bytes).to_hex().to_string(), v.mode));
        self.expected.push((path.to_owned(), seen));
    }

    /// No file to write or delete.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.deletes.is_empty()
    }

    /// Applies the transaction and writes `lock` with it, in one go: from
    /// the moment its journal exists, a killed cassist's transaction is
    /// completed by the next command. With no file, the lock lines are
    /// simply written.
    pub fn apply(self, lock: Vec<LockLine>) -> Result<(), JournalError> {
        self.start(Some(lock.clone()))?.finish(lock)
    }

    /// Writes the files and leaves the transaction open: a killed
    /// cassist's open transaction is rolled back by the next command.
    /// [`Open::commit`] or [`Open::roll_back`] ends it. On an error nothing
    /// of the tree has changed.
    pub fn begin(self) -> Result<Open, JournalError> {
        self.start(None)
    }

    /// Steps 1 to 3; `lock`: committed from the start, with these lines.
    fn start(self, lock: Option<Vec<LockLine>>) -> Result<Open, JournalError> {
        let Transaction { root, store, writes, deletes, expected } = self;
        let mut open = Open {
            root,
            store,
            journal: Journal {
                format: FORMAT,
                committed: lock.is_some(),
                steps: Vec::new(),
                made: Vec::new(),
                lock: lock.unwrap_or_default(),
                lock_before: Vec::new(),
            },
            written: false,
            ended: true,
        };
        if writes.is_empty() && deletes.is_empty() {
            return Ok(open);
        }
        if state_dir(&open.root).join(JOURNAL).exists() {
            return Err(JournalError::Unfinished);
        }
        let written: std::collections::HashSet<&str> = writes.iter().map(|(p, _)| p.as_str()).collect();
        let mut seen = std::collections::HashSet::new();
        let mut steps = Vec::new();
        let deletes = deletes.iter().filter(|p| !written.contains(p.as_str())).map(|p| (p.clone(), None));
        for (path, new) in deletes.chain(writes.iter().map(|(p, c)| (p.clone(), Some(c.clone())))) {
            if let Some(why) = unsafe_path(&path) {
                return Err(JournalError::Refused { path, why });
            }
            if !seen.insert(path.clone()) {
                continue;
            }
            let old = capture(&open.root, &open.store, &path).map_err(JournalError::Capture)?;
            let seen = expected.iter().rev().find(|(p, _)| *p == path).map(|(_, seen)| seen);
            let moved = match (seen, &old) {
                (None, _) | (Some(None), None) => false,
                (Some(Some((hash, mode))), Some(old)) => !old.is(hash, *mode),
                (Some(_), _) => true,
            };
            if moved {
                return Err(JournalError::Changed { path, problems: Vec::new() });
            }
            steps.push(Step { path, new, old });
        }
        open.journal.made = made_folders(&open.root, &steps);
        open.journal.steps = steps;
        open.journal.lock_before = lock_before(&open.root, &open.journal.lock);
        failpoint::hit("flush-begin");
        write_journal(&open.root, &open.journal)?;
        open.written = true;
        open.ended = false;
        failpoint::hit("flush-journal");
        if let Err((done, e)) = forward(&open.root, &open.store, &open.journal.steps, FLUSH) {
            // What was written is taken back out (three-way: the user may
            // have saved one of them since); the step that failed and the
            // rest were never written. Killed meanwhile, the next command
            // goes on rolling back.
            remove_temps(&open.root, &open.journal.folders());
            reopen(&open.root, &mut open.journal);
            let back = backward(&open.root, &open.store, &open.journal.steps[..done], &open.journal.made, UNDO);
            if back.failed.is_empty() {
                let _ = remove_journal(&open.root, open.journal.steps.len());
            }
            open.ended = true;
            let path = open.journal.steps[done].path.clone();
            let problems = back.all();
            return Err(match e {
                StepError::Changed => JournalError::Changed { path, problems },
                e => JournalError::Write { path, source: e, problems },
            });
        }
        failpoint::hit("flush-applied");
        Ok(open)
    }
}

/// A transaction whose files are written, not yet committed (or, from
/// [`Transaction::apply`], being finished).
#[derive(Debug)]
#[must_use = "an open transaction is rolled back when dropped"]
pub struct Open {
    root: PathBuf,
    store: Store,
    journal: Journal,
    /// A journal is on disk.
    written: bool,
    /// Committed or rolled back.
    ended: bool,
}

impl Open {
    /// The paths written, in order.
    pub fn written(&self) -> impl Iterator<Item = &str> {
        self.journal.steps.iter().filter(|s| s.new.is_some()).map(|s| s.path.as_str())
    }

    /// The paths deleted, in order.
    pub fn deleted(&self) -> impl Iterator<Item = &str> {
        self.journal.steps.iter().filter(|s| s.new.is_none()).map(|s| s.path.as_str())
    }

    /// Makes the transaction final with its lock lines: the journal is
    /// rewritten as committed (from then on a killed cassist's transaction
    /// is completed by the next command), the lines are written, the
    /// journal goes. On an error writing the lock, the transaction stays
    /// committed and the next command completes it.
    pub fn commit(mut self, lock: Vec<LockLine>) -> Result<(), JournalError> {
        if self.written && !lock.is_empty() {
            let mut committed = self.journal.clone();
            committed.committed = true;
            committed.lock_before = lock_before(&self.root, &lock);
            committed.lock = lock.clone();
            write_journal(&self.root, &committed)?;
            self.journal = committed;
            failpoint::hit("flush-commit");
        }
        self.finish(lock)
    }

    /// Step 4.
    fn finish(mut self, lock: Vec<LockLine>) -> Result<(), JournalError> {
        self.ended = true;
        Lock::update(&self.root, &lock)?;
        if self.written {
            failpoint::hit("flush-lock");
            remove_journal(&self.root, self.journal.steps.len())?;
            failpoint::hit("flush-done");
        }
        Ok(())
    }

    /// Puts every file back as it was and ends the transaction.
    pub fn roll_back(mut self) -> Result<(), JournalError> {
        self.undo()
    }

    fn undo(&mut self) -> Result<(), JournalError> {
        if std::mem::replace(&mut self.ended, true) || !self.written {
            return Ok(());
        }
        remove_temps(&self.root, &self.journal.folders());
        let back = backward(&self.root, &self.store, &self.journal.steps, &self.journal.made, UNDO);
        if !back.failed.is_empty() {
            // The journal stays: the next command tries again.
            return Err(JournalError::NotRestored(back.all()));
        }
        // The paths kept as the user edited them stay so: nothing is left
        // to try again.
        remove_journal(&self.root, self.journal.steps.len())?;
        if back.kept.is_empty() { Ok(()) } else { Err(JournalError::NotRestored(back.kept)) }
    }
}

/// The lines the lock holds now for the tasks of `lines` (`None` where it
/// has none); nothing when it does not read (then it cannot be written
/// either).
fn lock_before(root: &Path, lines: &[LockLine]) -> Vec<LockLine> {
    if lines.is_empty() {
        return Vec::new();
    }
    let Ok(lock) = Lock::load(root) else { return Vec::new() };
    lines.iter().map(|l| LockLine { task: l.task.clone(), entry: lock.tasks.get(&l.task).cloned() }).collect()
}

/// Marks a committed journal that is being turned back as open again, so
/// that a cassist killed during the roll back is rolled back by the next
/// command too, not forward. Should the rewrite fail, the next command
/// decides afresh from the tree, which loses nothing either way.
fn reopen(root: &Path, journal: &mut Journal) {
    if journal.committed {
        journal.committed = false;
        journal.lock.clear();
        let _ = write_journal(root, journal);
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        let _ = self.undo();
    }
}
