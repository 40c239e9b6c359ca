//! What the next command does with a transaction a killed cassist left
//! ([`recover`]), and the temp files a kill leaves.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::file::{INVALID, JOURNAL, JOURNAL_TMP, read_journal, remove_journal};
use super::steps::{Forward, RECOVER, backward, remove_temps, roll_forward, temps_in};
use super::{Content, reopen};
use crate::fsx::{state_dir, sync_dir};
use crate::lock::Lock;
use crate::store::Store;

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
    /// Rolled back: every file as before (but the user's edits made
    /// since, which are kept).
    RolledBack,
    /// Rolled back instead of forward, its lock lines not written: files
    /// the user edited since the kill conflict with the change (each path
    /// with why). The user's edits are kept; its tasks are replayed from
    /// the store.
    Conflicted(Vec<String>),
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
            Outcome::Conflicted(paths) => write!(
                f,
                "rolled back the integration a killed cassist left unfinished instead of completing it: files edited since conflict with it ({}); your edits were kept and its tasks are replayed from the store ({} file(s){temps})",
                paths.join("; "),
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
    let mut journal = match read_journal(root) {
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
                outcome: Outcome::Unreadable(why.to_string()),
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
    // Turned back: the files, then the lock lines it may have written.
    let back = |journal: &mut super::Journal, problems: &mut Vec<String>| {
        reopen(root, journal);
        problems.extend(backward(root, &store, &journal.steps, &journal.made, RECOVER).all());
        if let Err(e) = Lock::update(root, &journal.lock_before) {
            problems.push(format!("{}: {e}", crate::lock::LOCK_FILE));
        }
    };
    let outcome = if forward_ok {
        match roll_forward(root, &store, &journal.steps, RECOVER) {
            Forward::Done => {
                match Lock::update(root, &journal.lock) {
                    Ok(()) => lock_lines = journal.lock.len(),
                    Err(e) => problems.push(format!("{}: {e}", crate::lock::LOCK_FILE)),
                }
                Outcome::Completed
            }
            Forward::Conflicts(paths) => {
                back(&mut journal, &mut problems);
                Outcome::Conflicted(paths)
            }
            Forward::Failed(i, e) => {
                // Cannot go forward (a full disk, say): back, then.
                problems.push(format!("rolling forward failed ({}: {e})", journal.steps[i].path));
                back(&mut journal, &mut problems);
                Outcome::RolledBack
            }
        }
    } else {
        back(&mut journal, &mut problems);
        Outcome::RolledBack
    };
    if let Err(e) = remove_journal(root, journal.steps.len()) {
        problems.push(format!(".cassist/{JOURNAL}: {e}"));
    }
    Some(Recovered { outcome, files: journal.steps.len(), lock_lines, temps, problems })
}
