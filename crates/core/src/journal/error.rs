//! Why a transaction did not go through, and why one path of it failed.

use std::path::PathBuf;

use crate::lock::LockError;
use crate::store::ObjectError;

/// Why a transaction could not be applied, committed or rolled back.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// The journal of an earlier transaction is still there: the next
    /// command's [`recover`](super::recover()) ends it first.
    #[error("an earlier integration is unfinished (.cassist/journal): the next cassist command puts it right")]
    Unfinished,
    /// A path no transaction may touch; nothing was written.
    #[error("refused to write `{path}`: {why}")]
    Refused { path: String, why: UnsafePath },
    /// The old content of a path could not be kept; nothing was written.
    #[error(transparent)]
    Capture(StepError),
    /// Writing the tree failed at `path`. What was written is taken back
    /// out; `problems`: the paths that could not be (each with why), for
    /// the next command to put right.
    #[error("{path}: {source}{}", also(.problems))]
    Write {
        path: String,
        #[source]
        source: StepError,
        problems: Vec<String>,
    },
    /// `path` no longer held what the transaction found there when it
    /// kept its old content (the user saved it meanwhile): the transaction
    /// stopped before writing it, what it wrote was taken back out, and
    /// the path is as the user left it. `problems`: as for
    /// [`JournalError::Write`].
    #[error("{path} changed while being written{}", also(.problems))]
    Changed { path: String, problems: Vec<String> },
    /// Rolling back left these paths (each with why) other than they
    /// were; the journal stays, and the next command tries again.
    #[error("could not restore {}", .0.join("; "))]
    NotRestored(Vec<String>),
    /// Writing, syncing or removing the journal file.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// Writing the lock lines.
    #[error(transparent)]
    Lock(#[from] LockError),
}

/// ` (p1; p2)` after a failed write's message, when some paths could not
/// be taken back.
fn also(problems: &[String]) -> String {
    if problems.is_empty() { String::new() } else { format!(" ({})", problems.join("; ")) }
}

/// What went wrong on one path of a transaction.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// Its folder is (under) a symlink leading out of the project, to this
    /// real folder: nothing is written through it.
    #[error("its folder leads outside the project (to {})", .0.display())]
    Outside(PathBuf),
    /// The path is neither a file, a symlink nor a folder (a FIFO, a
    /// socket, a device): a transaction does not replace it.
    #[error("cannot replace `{0}`: not a file, a symlink or a folder")]
    Special(String),
    /// The path no longer holds what the step was decided on: it is not
    /// written over.
    #[error("changed while being written")]
    Changed,
    /// The content to write is missing from the store, or not whole.
    #[error(transparent)]
    Object(#[from] ObjectError),
}

/// Why a path is none a transaction may touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UnsafePath {
    /// Empty, absolute, or with `.` or `..` in it.
    #[error("not a plain path inside the project")]
    NotPlain,
    /// Under `.git/` or `.cassist/`.
    #[error("it lies in git's or cassist's own folder")]
    OwnFolder,
}
