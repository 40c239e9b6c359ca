//! Crash-safe writes of the user's tree (SPEC 3.9): a change goes in as one
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
//!    lines, and a checksum of all that; it is written beside (a temp
//!    file), synced and renamed in, and `.cassist/` is synced. Nothing of
//!    the tree is touched before;
//! 3. each file is written through a temp file named `.cassist-tmp-*` in
//!    its own folder (written, synced, renamed over the file), or unlinked;
//!    deletions go first (a folder may give way to a file), folders left
//!    empty by a deletion go too;
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
//! [`recover`] is what the next command does first with what a killed
//! cassist left: a committed journal is rolled forward (every file written
//! again, which is idempotent) and its lock lines written; an open one,
//! or a committed one whose new contents are no longer whole in the
//! store, is rolled back with the old contents. Either way the temp files
//! in the journal's folders are removed and the journal goes; a recovery
//! killed half-way is simply done again. A journal that does not read
//! back whole (its checksum) was never acted on, since the tree is touched
//! only once the journal is complete: the tree is left as it is.
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

use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use crate::failpoint;
use crate::fsx::{TMP_PREFIX, ensure_state_dir, state_dir, sync_dir};
use crate::lock::{Lock, LockLine};
use crate::store::Store;

/// The journal's name in `.cassist/`.
pub const JOURNAL: &str = "journal";
/// Where an unreadable journal is set aside.
const INVALID: &str = "journal.invalid";
/// The first line of a journal starts with this, then its checksum.
const HEADER: &str = "cassist-journal 1";
const FORMAT: u32 = 1;

const S_IFMT: u32 = libc::S_IFMT;
const S_IFLNK: u32 = libc::S_IFLNK;
const S_IFREG: u32 = libc::S_IFREG;

/// A file's content, as an object of the store, and its mode (type and
/// permission bits: a regular file or a symlink, whose content is its
/// target).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Content {
    pub hash: String,
    pub mode: u32,
}

impl Content {
    fn is_symlink(&self) -> bool {
        self.mode & S_IFMT == S_IFLNK
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
}

impl Transaction {
    /// A transaction on the project at `root` (its store is the project's).
    pub fn new(root: &Path) -> Transaction {
        Transaction { root: root.to_path_buf(), store: Store::open(root), writes: Vec::new(), deletes: Vec::new() }
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

    /// No file to write or delete.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.deletes.is_empty()
    }

    /// Applies the transaction and writes `lock` with it, in one go: from
    /// the moment its journal exists, a killed cassist's transaction is
    /// completed by the next command. With no file, the lock lines are
    /// simply written.
    pub fn apply(self, lock: Vec<LockLine>) -> std::io::Result<()> {
        self.start(Some(lock.clone()))?.finish(lock)
    }

    /// Writes the files and leaves the transaction open: a killed
    /// cassist's open transaction is rolled back by the next command.
    /// [`Open::commit`] or [`Open::roll_back`] ends it. On an error nothing
    /// of the tree has changed.
    pub fn begin(self) -> std::io::Result<Open> {
        self.start(None)
    }

    /// Steps 1 to 3; `lock`: committed from the start, with these lines.
    fn start(self, lock: Option<Vec<LockLine>>) -> std::io::Result<Open> {
        let Transaction { root, store, writes, deletes } = self;
        let mut open = Open {
            root,
            store,
            journal: Journal {
                format: FORMAT,
                committed: lock.is_some(),
                steps: Vec::new(),
                made: Vec::new(),
                lock: lock.unwrap_or_default(),
            },
            written: false,
            ended: true,
        };
        if writes.is_empty() && deletes.is_empty() {
            return Ok(open);
        }
        if state_dir(&open.root).join(JOURNAL).exists() {
            return Err(std::io::Error::other(
                "an earlier integration is unfinished (.cassist/journal): the next cassist command puts it right",
            ));
        }
        let written: std::collections::HashSet<&str> = writes.iter().map(|(p, _)| p.as_str()).collect();
        let mut seen = std::collections::HashSet::new();
        let mut steps = Vec::new();
        let deletes = deletes.iter().filter(|p| !written.contains(p.as_str())).map(|p| (p.clone(), None));
        for (path, new) in deletes.chain(writes.iter().map(|(p, c)| (p.clone(), Some(c.clone())))) {
            if let Some(why) = unsafe_path(&path) {
                return Err(std::io::Error::other(format!("refused to write `{path}`: {why}")));
            }
            if !seen.insert(path.clone()) {
                continue;
            }
            let old = capture(&open.root, &open.store, &path)?;
            steps.push(Step { path, new, old });
        }
        open.journal.made = made_folders(&open.root, &steps);
        open.journal.steps = steps;
        failpoint::hit("flush-begin");
        write_journal(&open.root, &open.journal)?;
        open.written = true;
        open.ended = false;
        failpoint::hit("flush-journal");
        if let Err((done, e)) = forward(&open.root, &open.store, &open.journal.steps, FLUSH) {
            // What was written is taken back out; the rest was never touched.
            remove_temps(&open.root, &open.journal.folders());
            let problems = backward(&open.root, &open.store, &open.journal.steps[..=done], &open.journal.made, UNDO);
            if problems.is_empty() {
                let _ = remove_journal(&open.root, open.journal.steps.len());
            }
            open.ended = true;
            let also = if problems.is_empty() { String::new() } else { format!(" ({})", problems.join("; ")) };
            return Err(std::io::Error::new(e.kind(), format!("{e}{also}")));
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
    pub fn commit(mut self, lock: Vec<LockLine>) -> std::io::Result<()> {
        if self.written && !lock.is_empty() {
            let mut committed = self.journal.clone();
            committed.committed = true;
            committed.lock = lock.clone();
            write_journal(&self.root, &committed)?;
            self.journal = committed;
            failpoint::hit("flush-commit");
        }
        self.finish(lock)
    }

    /// Step 4.
    fn finish(mut self, lock: Vec<LockLine>) -> std::io::Result<()> {
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
    pub fn roll_back(mut self) -> std::io::Result<()> {
        self.undo()
    }

    fn undo(&mut self) -> std::io::Result<()> {
        if std::mem::replace(&mut self.ended, true) || !self.written {
            return Ok(());
        }
        remove_temps(&self.root, &self.journal.folders());
        let problems = backward(&self.root, &self.store, &self.journal.steps, &self.journal.made, UNDO);
        if !problems.is_empty() {
            // The journal stays: the next command tries again.
            return Err(std::io::Error::other(format!("could not restore {}", problems.join("; "))));
        }
        remove_journal(&self.root, self.journal.steps.len())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        let _ = self.undo();
    }
}

/// What [`recover`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    pub outcome: Outcome,
    /// Paths of the transaction.
    pub files: usize,
    /// Lock lines written.
    pub lock_lines: usize,
    /// `.cassist-tmp-*` files removed.
    pub temps: usize,
    /// Paths that could not be put right, with why.
    pub problems: Vec<String>,
}

/// Which way an interrupted transaction went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// No journal: only stray temp files were removed.
    Swept,
    /// Rolled forward, lock lines written.
    Completed,
    /// Rolled back: every file as before.
    RolledBack,
    /// The journal did not read back whole (why): it never acted, the
    /// tree is as it was; it is kept as `.cassist/journal.invalid`.
    Unreadable(String),
}

impl std::fmt::Display for Recovered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let temps = match self.temps {
            0 => String::new(),
            n => format!(", {n} temporary file(s) removed"),
        };
        match &self.outcome {
            Outcome::Swept => write!(f, "removed {} temporary file(s) a killed cassist left", self.temps)?,
            Outcome::Completed => write!(
                f,
                "completed the integration a killed cassist left unfinished ({} file(s), {} lock line(s){temps})",
                self.files, self.lock_lines
            )?,
            Outcome::RolledBack => write!(
                f,
                "rolled back the integration a killed cassist left unfinished ({} file(s) as they were{temps}); its task is replayed from the store",
                self.files
            )?,
            Outcome::Unreadable(why) => write!(
                f,
                "the integration journal of a killed cassist does not read back whole ({why}): it was never acted on, the tree is as it was; kept as .cassist/{INVALID}{temps}"
            )?,
        }
        if !self.problems.is_empty() {
            write!(f, "; could not put right: {}", self.problems.join("; "))?;
        }
        Ok(())
    }
}

/// Whether a killed cassist left something for [`recover`]: a journal, or
/// a temp file at the project root (the lock's) or of the journal.
pub fn pending(root: &Path) -> bool {
    let state = state_dir(root);
    state.join(JOURNAL).exists()
        || state.join(JOURNAL_TMP).exists()
        || !temps_in(root).is_empty()
        || OWN_FOLDERS.iter().any(|f| !leftover_temps_in(&root.join(f)).is_empty())
}

/// cassist's own folders where it writes files atomically while it runs
/// (the planning caches, the agent versions): a kill leaves a temp file
/// there that no journal names.
const OWN_FOLDERS: [&str; 2] = [".cassist", ".cassist/cache"];

/// The temp files in folder `dir` of a cassist that is gone: their name
/// holds a pid with no process, or none. Another cassist running in the
/// project (a `plan` beside a `run`) keeps its own.
fn leftover_temps_in(dir: &Path) -> Vec<PathBuf> {
    temps_in(dir)
        .into_iter()
        .filter(|p| {
            let owner = p.file_name().and_then(|n| crate::fsx::temp_owner(n.as_bytes()));
            owner
                .is_none_or(|pid| pid != std::process::id() && !i32::try_from(pid).is_ok_and(crate::fsx::cassist_alive))
        })
        .collect()
}

/// Removes the leftover temp files of cassist's own folders; how many.
fn sweep_own_folders(root: &Path) -> usize {
    OWN_FOLDERS
        .iter()
        .flat_map(|f| leftover_temps_in(&root.join(f)))
        .filter(|p| std::fs::remove_file(p).is_ok())
        .count()
}

/// Completes or rolls back the transaction a killed cassist left, and
/// removes its temp files; `None` when there was nothing to do. Run it
/// first, holding the project lock, in every command that reads the
/// project's state.
pub fn recover(root: &Path) -> Option<Recovered> {
    let state = state_dir(root);
    // A journal being written when cassist was killed: the tree was not
    // touched yet.
    let mut temps = usize::from(std::fs::remove_file(state.join(JOURNAL_TMP)).is_ok());
    temps += sweep_own_folders(root);
    let journal = match read_journal(root) {
        Ok(Some(j)) => j,
        Ok(None) => {
            temps += remove_temps(root, &[String::new()]);
            return (temps > 0).then(|| Recovered {
                outcome: Outcome::Swept,
                files: 0,
                lock_lines: 0,
                temps,
                problems: Vec::new(),
            });
        }
        Err(why) => {
            let _ = std::fs::rename(state.join(JOURNAL), state.join(INVALID));
            let _ = sync_dir(&state);
            temps += remove_temps(root, &[String::new()]);
            return Some(Recovered {
                outcome: Outcome::Unreadable(why),
                files: 0,
                lock_lines: 0,
                temps,
                problems: Vec::new(),
            });
        }
    };
    // Temp files first: a folder the transaction made is removed only
    // when empty.
    temps += remove_temps(root, &journal.folders());
    let store = Store::open(root);
    let whole = |c: &Option<Content>| c.as_ref().is_none_or(|c| store.get_object(&c.hash).is_ok());
    let forward_ok = journal.committed && journal.steps.iter().all(|s| whole(&s.new));
    let mut problems = Vec::new();
    let mut lock_lines = 0;
    let outcome = if forward_ok {
        match forward(root, &store, &journal.steps, RECOVER) {
            Ok(()) => {
                match Lock::update(root, &journal.lock) {
                    Ok(()) => lock_lines = journal.lock.len(),
                    Err(e) => problems.push(format!("{}: {e}", crate::lock::LOCK_FILE)),
                }
                Outcome::Completed
            }
            Err((_, e)) => {
                // Cannot go forward (a full disk, say): back, then.
                problems.push(format!("rolling forward failed ({e})"));
                problems.extend(backward(root, &store, &journal.steps, &journal.made, RECOVER));
                Outcome::RolledBack
            }
        }
    } else {
        problems.extend(backward(root, &store, &journal.steps, &journal.made, RECOVER));
        Outcome::RolledBack
    };
    if let Err(e) = remove_journal(root, journal.steps.len()) {
        problems.push(format!(".cassist/{JOURNAL}: {e}"));
    }
    Some(Recovered { outcome, files: journal.steps.len(), lock_lines, temps, problems })
}

/// Where the journal is written before it is renamed in.
const JOURNAL_TMP: &str = ".cassist-tmp-journal";

/// The failpoints of one way through the steps: after a temp file is
/// written (before its rename), after each path.
struct Points {
    temp: &'static str,
    file: &'static str,
}

const FLUSH: Points = Points { temp: "flush-temp", file: "flush-file" };
const UNDO: Points = Points { temp: "rollback-temp", file: "rollback-file" };
const RECOVER: Points = Points { temp: "recover-temp", file: "recover-file" };

/// Writes every step's new state, in order. On an error, the index of the
/// step that failed (it may be half done: a temp file, which is removed).
fn forward(root: &Path, store: &Store, steps: &[Step], points: Points) -> Result<(), (usize, std::io::Error)> {
    let sync = sync_each(steps.len());
    for (i, s) in steps.iter().enumerate() {
        match &s.new {
            Some(c) => place(root, store, &s.path, c, &points, sync),
            None => remove(root, &s.path, true),
        }
        .map_err(|e| (i, std::io::Error::new(e.kind(), format!("{}: {e}", s.path))))?;
        failpoint::hit(points.file);
    }
    Ok(())
}

/// Puts every step's old state back, last first: the writes, then the
/// folders they made (when empty), then the deletions. Returns what could
/// not be put back, with why.
fn backward(root: &Path, store: &Store, steps: &[Step], made: &[String], points: Points) -> Vec<String> {
    let mut problems = Vec::new();
    let sync = sync_each(steps.len());
    let restore = |s: &Step, problems: &mut Vec<String>| {
        let done = match &s.old {
            Some(c) => place(root, store, &s.path, c, &points, sync),
            None => remove(root, &s.path, false),
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

fn sync_each(paths: usize) -> bool {
    paths <= SYNC_EACH_UP_TO
}

/// Writes `content` at `rel` through a temp file in its folder; `sync`:
/// the temp file's data is synced before the rename.
fn place(root: &Path, store: &Store, rel: &str, content: &Content, points: &Points, sync: bool) -> std::io::Result<()> {
    let path = root.join(rel);
    let dir = path.parent().unwrap_or(root);
    std::fs::create_dir_all(dir)?;
    // A folder of the project that is a symlink leading elsewhere is not
    // written through.
    let real = dir.canonicalize()?;
    if !real.starts_with(root.canonicalize()?) {
        return Err(std::io::Error::other(format!("its folder leads outside the project (to {})", real.display())));
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
    written
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
fn capture(root: &Path, store: &Store, rel: &str) -> std::io::Result<Option<Content>> {
    let path = root.join(rel);
    let meta = match std::fs::symlink_metadata(&path) {
        Err(e) if absent(&e) => return Ok(None),
        Err(e) => return Err(e),
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
        return Err(std::io::Error::other(format!("cannot replace `{rel}`: not a file, a symlink or a folder")));
    };
    Ok(Some(Content { hash, mode: meta.mode() }))
}

/// An error that says the path is not there (a missing file, or a file
/// where a folder of the path would be).
fn absent(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR)
}

/// The folders the writes of `steps` make, shallowest first.
fn made_folders(root: &Path, steps: &[Step]) -> Vec<String> {
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
fn unsafe_path(rel: &str) -> Option<&'static str> {
    let p = Path::new(rel);
    if rel.is_empty() || !p.components().all(|c| matches!(c, Component::Normal(_))) {
        return Some("not a plain path inside the project");
    }
    match p.components().next() {
        Some(Component::Normal(first)) if first == ".git" || first == ".cassist" => {
            Some("it lies in git's or cassist's own folder")
        }
        _ => None,
    }
}

/// The `.cassist-tmp-*` files directly in folder `dir`.
fn temps_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    rd.flatten()
        .filter(|e| e.file_name().as_bytes().starts_with(TMP_PREFIX.as_bytes()))
        .filter(|e| e.file_type().is_ok_and(|t| !t.is_dir()))
        .map(|e| e.path())
        .collect()
}

/// Removes the temp files in the given folders of the root; how many.
fn remove_temps(root: &Path, folders: &[String]) -> usize {
    folders.iter().flat_map(|f| temps_in(&root.join(f))).filter(|p| std::fs::remove_file(p).is_ok()).count()
}

fn write_journal(root: &Path, journal: &Journal) -> std::io::Result<()> {
    let dir = ensure_state_dir(root)?;
    let body = serde_json::to_vec(journal).map_err(std::io::Error::other)?;
    let mut text = format!("{HEADER} {}\n", blake3::hash(&body).to_hex()).into_bytes();
    text.extend_from_slice(&body);
    let tmp = dir.join(JOURNAL_TMP);
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&text)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, dir.join(JOURNAL))?;
    sync_dir(&dir)
}

/// The journal, if there is one; why not, if it does not read back whole
/// and sound.
fn read_journal(root: &Path) -> Result<Option<Journal>, String> {
    let bytes = match std::fs::read(state_dir(root).join(JOURNAL)) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let nl = bytes.iter().position(|&b| b == b'\n').ok_or("no header")?;
    let header = std::str::from_utf8(&bytes[..nl]).map_err(|_| "a bad header")?;
    let sum = header.strip_prefix(HEADER).and_then(|s| s.strip_prefix(' ')).ok_or("a bad header")?;
    let body = &bytes[nl + 1..];
    if blake3::hash(body).to_hex().as_str() != sum {
        return Err("its checksum does not match: it is cut short or damaged".into());
    }
    let journal: Journal = serde_json::from_slice(body).map_err(|e| format!("it does not parse: {e}"))?;
    if journal.format != FORMAT {
        return Err(format!("format {} is not {FORMAT}", journal.format));
    }
    let paths = journal.steps.iter().map(|s| &s.path).chain(&journal.made);
    if let Some(bad) = paths.into_iter().find(|p| unsafe_path(p).is_some()) {
        return Err(format!("it names `{bad}`, which is no path of the project"));
    }
    Ok(Some(journal))
}

/// Removes the journal of a transaction of `paths` paths, once what it
/// wrote is on disk.
fn remove_journal(root: &Path, paths: usize) -> std::io::Result<()> {
    let dir = state_dir(root);
    if !sync_each(paths) {
        let f = std::fs::File::open(root)?;
        // SAFETY: syncfs(2) on a descriptor we own.
        if unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&f)) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    match std::fs::remove_file(dir.join(JOURNAL)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    sync_dir(&dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::LockEntry;
    use std::collections::BTreeMap;

    /// Every path under `root` but `.cassist/` and `cassist.lock`: its content (a symlink's
    /// target, `<dir>` for a folder) and permission bits.
    fn tree(root: &Path) -> BTreeMap<String, (Vec<u8>, u32)> {
        walkdir::WalkDir::new(root)
            .min_depth(1)
            .into_iter()
            .filter_entry(|e| e.file_name() != ".cassist" && e.file_name() != crate::lock::LOCK_FILE)
            .map(|e| {
                let e = e.unwrap();
                let rel = e.path().strip_prefix(root).unwrap().to_string_lossy().into_owned();
                let meta = e.path().symlink_metadata().unwrap();
                let bytes = if meta.is_symlink() {
                    std::fs::read_link(e.path()).unwrap().into_os_string().into_encoded_bytes()
                } else if meta.is_dir() {
                    b"<dir>".to_vec()
                } else {
                    std::fs::read(e.path()).unwrap()
                };
                (rel, (bytes, meta.mode() & 0o7777))
            })
            .collect()
    }

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    /// A project: `keep`, `edit.txt` (mode 644), `gone.txt`, `folder/only`
    /// (a folder a file replaces), `empty/` (an empty folder of the
    /// user's), `link` → `keep`.
    fn project() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "keep", "keep\n");
        write(root, "edit.txt", "old\n");
        std::fs::set_permissions(root.join("edit.txt"), std::fs::Permissions::from_mode(0o644)).unwrap();
        write(root, "gone.txt", "gone\n");
        write(root, "folder/only", "only\n");
        std::fs::create_dir(root.join("empty")).unwrap();
        std::os::unix::fs::symlink("keep", root.join("link")).unwrap();
        dir
    }

    fn line(task: &str) -> LockLine {
        let entry = LockEntry {
            before: format!("{task}-before"),
            after: format!("{task}-after"),
            outputs: None,
            patch: "p".into(),
            agent: "demo".into(),
            agent_version: None,
            date: "2026-01-01T00:00:00Z".into(),
        };
        LockLine { task: task.into(), entry: Some(entry) }
    }

    /// The change: an edit (made executable), a deletion, a new file in
    /// new folders, a file replacing a folder, a file in the user's empty
    /// folder, the symlink retargeted, a symlink added.
    fn change(root: &Path) -> Transaction {
        let mut t = Transaction::new(root);
        t.write("edit.txt", b"new\n", 0o100755).unwrap();
        t.delete("gone.txt");
        t.write("new/deep/file.txt", b"fresh\n", 0o100644).unwrap();
        t.delete("folder/only");
        t.write("folder", b"a file now\n", 0o104755).unwrap();
        t.write("empty/inside", b"in\n", 0o100600).unwrap();
        t.write("link", b"edit.txt", S_IFLNK | 0o777).unwrap();
        t.write("new/link", b"../keep", S_IFLNK | 0o777).unwrap();
        t
    }

    /// The tree the change makes.
    fn changed(root: &Path) -> BTreeMap<String, (Vec<u8>, u32)> {
        let other = project();
        change(other.path()).apply(Vec::new()).unwrap();
        let t = tree(other.path());
        let _ = root;
        t
    }

    fn journal_left(root: &Path) -> bool {
        state_dir(root).join(JOURNAL).exists()
    }

    fn no_temps(root: &Path) {
        for e in walkdir::WalkDir::new(root).into_iter().flatten() {
            let name = e.file_name().to_string_lossy();
            assert!(!name.starts_with(TMP_PREFIX), "temp file left: {}", e.path().display());
        }
    }

    #[test]
    fn apply_writes_the_change_and_its_lock_lines() {
        let dir = project();
        let root = dir.path();
        change(root).apply(vec![line("t")]).unwrap();
        let t = tree(root);
        assert_eq!(t["edit.txt"], (b"new\n".to_vec(), 0o755));
        assert!(!t.contains_key("gone.txt"));
        assert_eq!(t["new/deep/file.txt"].0, b"fresh\n");
        // Never a setuid bit, whatever was asked.
        assert_eq!(t["folder"], (b"a file now\n".to_vec(), 0o755));
        assert_eq!(t["empty/inside"], (b"in\n".to_vec(), 0o600));
        assert_eq!(t["link"].0, b"edit.txt");
        assert_eq!(t["new/link"].0, b"../keep");
        assert_eq!(t["keep"].0, b"keep\n");
        assert_eq!(Lock::load(root).unwrap().tasks["t"], line("t").entry.unwrap());
        assert!(!journal_left(root));
        no_temps(root);
        assert_eq!(recover(root), None, "nothing left to recover");
    }

    #[test]
    fn an_open_transaction_rolls_back_to_the_same_tree() {
        let dir = project();
        let root = dir.path();
        let before = tree(root);
        let open = change(root).begin().unwrap();
        assert!(journal_left(root));
        assert_eq!(tree(root), changed(root), "the files are written while it is open");
        assert_eq!(open.written().count(), 6);
        assert_eq!(open.deleted().collect::<Vec<_>>(), ["gone.txt", "folder/only"]);
        open.roll_back().unwrap();
        assert_eq!(tree(root), before, "rolled back: the user's empty folder stays, made folders go");
        assert!(!journal_left(root));
        // Dropped without a decision: rolled back too.
        drop(change(root).begin().unwrap());
        assert_eq!(tree(root), before);
        no_temps(root);
    }

    #[test]
    fn a_commit_writes_the_lock_lines_and_ends_the_journal() {
        let dir = project();
        let root = dir.path();
        let open = change(root).begin().unwrap();
        open.commit(vec![line("a"), line("b")]).unwrap();
        assert!(!journal_left(root));
        assert_eq!(Lock::load(root).unwrap().tasks.len(), 2);
        assert_eq!(tree(root), changed(root));
        // A removal line takes an older record out.
        Transaction::new(root).apply(vec![LockLine { task: "a".into(), entry: None }]).unwrap();
        assert_eq!(Lock::load(root).unwrap().tasks.keys().collect::<Vec<_>>(), ["b"]);
    }

    /// The states a killed cassist may leave: the journal (open or
    /// committed) with the first `k` steps applied and a temp file beside
    /// the next one.
    fn killed_after(root: &Path, committed: bool, k: usize) -> Journal {
        killed_after_with(root, committed, k, change)
    }

    fn killed_after_with(root: &Path, committed: bool, k: usize, change: fn(&Path) -> Transaction) -> Journal {
        let open = change(root).start(committed.then(|| vec![line("t")])).unwrap();
        let journal = open.journal.clone();
        // Back to the tree before, without ending the journal, then the
        // first k steps again.
        let made = journal.made.clone();
        assert!(backward(root, &open.store, &journal.steps, &made, UNDO).is_empty());
        std::mem::forget(open);
        forward(root, &Store::open(root), &journal.steps[..k], FLUSH).unwrap();
        if let Some(next) = journal.steps.get(k) {
            let dir = root.join(&next.path);
            let dir = dir.parent().unwrap();
            if dir.is_dir() {
                std::fs::write(dir.join(crate::fsx::temp_name()), "half").unwrap();
            }
        }
        journal
    }

    #[test]
    fn recovery_completes_a_committed_journal_from_any_step() {
        let steps = killed_after(project().path(), true, 0).steps.len();
        for k in 0..=steps {
            let dir = project();
            let root = dir.path();
            killed_after(root, true, k);
            let r = recover(root).expect("something to recover");
            assert_eq!(r.outcome, Outcome::Completed, "after {k} step(s): {r}");
            assert!(r.problems.is_empty(), "{r}");
            assert_eq!(r.lock_lines, 1);
            assert_eq!(tree(root), changed(root), "after {k} step(s)");
            assert!(Lock::load(root).unwrap().tasks.contains_key("t"));
            assert!(!journal_left(root));
            no_temps(root);
        }
    }

    #[test]
    fn recovery_rolls_an_open_journal_back_from_any_step() {
        let steps = killed_after(project().path(), false, 0).steps.len();
        for k in 0..=steps {
            let dir = project();
            let root = dir.path();
            let before = tree(root);
            killed_after(root, false, k);
            let r = recover(root).expect("something to recover");
            assert_eq!(r.outcome, Outcome::RolledBack, "after {k} step(s): {r}");
            assert!(r.problems.is_empty(), "{r}");
            assert_eq!(tree(root), before, "after {k} step(s)");
            assert!(Lock::load(root).unwrap().tasks.is_empty(), "an open journal writes no lock line");
            assert!(!journal_left(root));
            no_temps(root);
            // Twice is the same as once.
            assert_eq!(recover(root), None);
        }
    }

    #[test]
    fn a_committed_journal_whose_new_content_is_gone_is_rolled_back() {
        let dir = project();
        let root = dir.path();
        let before = tree(root);
        let journal = killed_after(root, true, 2);
        let new = journal.steps.iter().rev().find_map(|s| s.new.clone()).unwrap();
        let (a, b) = new.hash.split_at(2);
        std::fs::remove_file(Store::open(root).dir().join("objects").join(a).join(b)).unwrap();
        let r = recover(root).unwrap();
        assert_eq!(r.outcome, Outcome::RolledBack, "{r}");
        assert_eq!(tree(root), before);
        assert!(Lock::load(root).unwrap().tasks.is_empty());
    }

    /// A smaller change (a journal of a few hundred bytes): an edit, a
    /// deletion, a file in a new folder.
    fn small_change(root: &Path) -> Transaction {
        let mut t = Transaction::new(root);
        t.delete("gone.txt");
        t.write("edit.txt", b"new\n", 0o100644).unwrap();
        t.write("new/file.txt", b"fresh\n", 0o100644).unwrap();
        t
    }

    #[test]
    fn a_journal_cut_short_at_any_byte_never_makes_things_worse() {
        // The whole journal, as written for the change.
        let dir = project();
        killed_after_with(dir.path(), true, 0, small_change);
        let bytes = std::fs::read(state_dir(dir.path()).join(JOURNAL)).unwrap();
        let whole = {
            let other = project();
            small_change(other.path()).apply(Vec::new()).unwrap();
            tree(other.path())
        };
        for half_applied in [false, true] {
            let dir = project();
            let root = dir.path();
            killed_after_with(root, true, if half_applied { 2 } else { 0 }, small_change);
            let mut as_left = tree(root);
            as_left.retain(|p, _| !p.rsplit('/').next().unwrap().starts_with(TMP_PREFIX));
            for cut in 0..bytes.len() {
                std::fs::write(state_dir(root).join(JOURNAL), &bytes[..cut]).unwrap();
                let r = recover(root).expect("an unreadable journal is said");
                assert!(matches!(r.outcome, Outcome::Unreadable(_)), "cut at {cut}: {r}");
                assert_eq!(tree(root), as_left, "cut at {cut}: the tree is left as it is");
                assert!(!journal_left(root) && state_dir(root).join(INVALID).exists());
                assert!(Lock::load(root).unwrap().tasks.is_empty());
            }
            // Whole, it is completed.
            std::fs::write(state_dir(root).join(JOURNAL), &bytes).unwrap();
            assert_eq!(recover(root).unwrap().outcome, Outcome::Completed);
            assert_eq!(tree(root), whole);
        }
    }

    #[test]
    fn a_damaged_journal_is_not_acted_on() {
        let dir = project();
        let root = dir.path();
        let as_left = {
            killed_after(root, true, 1);
            tree(root)
        };
        let path = state_dir(root).join(JOURNAL);
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 2;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(recover(root).unwrap().outcome, Outcome::Unreadable(_)));
        assert_eq!(tree(root), as_left);
    }

    #[test]
    fn paths_outside_the_project_or_in_its_own_folders_are_refused() {
        let dir = project();
        let root = dir.path();
        let before = tree(root);
        for bad in ["../escape", "/etc/passwd", ".git/hooks/pre-commit", ".cassist/journal", "a/../../b", ""] {
            let mut t = Transaction::new(root);
            t.write("fine.txt", b"x", 0o100644).unwrap();
            t.write(bad, b"x", 0o100644).unwrap();
            assert!(t.apply(Vec::new()).is_err(), "{bad:?} was accepted");
            assert_eq!(tree(root), before, "{bad:?}: nothing is written");
        }
        // Nor through a folder that leads outside.
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("out")).unwrap();
        let mut t = Transaction::new(root);
        t.write("out/x", b"x", 0o100644).unwrap();
        assert!(t.apply(Vec::new()).is_err());
        assert!(!outside.path().join("x").exists());
    }

    #[test]
    fn a_failed_write_takes_back_what_was_written() {
        let dir = project();
        let root = dir.path();
        // `keep/x` cannot be written: `keep` is a file that stays.
        let before = tree(root);
        let mut t = Transaction::new(root);
        t.write("edit.txt", b"new\n", 0o100644).unwrap();
        t.delete("gone.txt");
        t.write("keep/x", b"x", 0o100644).unwrap();
        assert!(t.apply(vec![line("t")]).is_err());
        assert_eq!(tree(root), before);
        assert!(!journal_left(root));
        assert!(Lock::load(root).unwrap().tasks.is_empty());
        no_temps(root);
    }

    #[test]
    fn stray_temp_files_at_the_root_are_pending_and_swept() {
        let dir = project();
        let root = dir.path();
        assert!(!pending(root));
        std::fs::write(root.join(format!("{TMP_PREFIX}lock")), "half").unwrap();
        assert!(pending(root));
        let r = recover(root).unwrap();
        assert_eq!((r.outcome, r.temps), (Outcome::Swept, 1));
        assert!(!pending(root));
    }

    #[test]
    fn leftover_temp_files_of_cassists_own_folders_are_pending_and_swept() {
        let dir = project();
        let root = dir.path();
        let cache = root.join(".cassist/cache");
        std::fs::create_dir_all(&cache).unwrap();
        // A killed cassist's (no process has pid 999999999: pid_max is at
        // most 2^22), one with no pid (an older cassist), and one of a
        // cassist running now (this process), which stays.
        let gone = cache.join(format!("{TMP_PREFIX}999999999-file-hashes"));
        let unnamed = root.join(".cassist").join(format!("{TMP_PREFIX}Xa1b2c"));
        let running = cache.join(format!("{}specs", crate::fsx::temp_prefix()));
        for f in [&gone, &unnamed, &running] {
            std::fs::write(f, "half").unwrap();
        }
        assert!(pending(root));
        let r = recover(root).unwrap();
        assert_eq!((r.outcome, r.temps), (Outcome::Swept, 2));
        assert!(!gone.exists() && !unnamed.exists());
        assert!(running.exists(), "the temp file of a running cassist was removed");
        assert!(!pending(root));
    }

    #[test]
    fn the_message_says_which_way_it_went() {
        let r = Recovered { outcome: Outcome::Completed, files: 3, lock_lines: 1, temps: 1, problems: Vec::new() };
        assert_eq!(
            r.to_string(),
            "completed the integration a killed cassist left unfinished (3 file(s), 1 lock line(s), 1 temporary file(s) removed)"
        );
        let r = Recovered { outcome: Outcome::RolledBack, temps: 0, problems: vec!["a: gone".into()], ..r };
        assert!(r.to_string().starts_with("rolled back") && r.to_string().ends_with("could not put right: a: gone"));
    }
}
