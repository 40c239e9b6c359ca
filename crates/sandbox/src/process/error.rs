//! Why a command could not be run: [`RunError`].

use std::io;
use std::path::PathBuf;

#[cfg(doc)]
use super::{Command, run};

/// Why [`run`] could not run a command. Each message names the command
/// and says what is wrong, its cause included (an error here has no
/// separate source to print).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// [`Command::argv`] is empty.
    #[error("empty command")]
    EmptyCommand,
    /// The program was named by a path (it holds a `/`), and no file is
    /// there.
    #[error("program `{program}` not found: no file {}", path.display())]
    NoSuchProgram { program: String, path: PathBuf },
    /// The program was named alone, and no folder of the `PATH` holds an
    /// executable of that name.
    #[error("program `{program}` not found in PATH ({path})")]
    NotInPath { program: String, path: String },
    /// [`Command::cwd`] is not a folder.
    #[error("cannot run `{program}`: working folder {} does not exist", cwd.display())]
    NoWorkingFolder { program: String, cwd: PathBuf },
    /// [`Command::transcript`] cannot be opened for writing.
    #[error("cannot open the transcript {}: {error}", path.display())]
    Transcript { path: PathBuf, error: io::Error },
    /// The kernel would not start the program (`resolved`, where the
    /// lookup found it). `NotFound` here means the file is there but the
    /// interpreter its `#!` line names is not.
    #[error("cannot start `{program}` ({}): {error}{}", resolved.display(), interpreter_hint(error))]
    Start { program: String, resolved: PathBuf, error: io::Error },
    /// What a run needs from the system failed: a pipe, the cancel token's
    /// eventfd, the watch on the child's exit, the wait for it.
    #[error(transparent)]
    Os(#[from] io::Error),
}

impl RunError {
    /// The kind of I/O error this is: [`io::ErrorKind::NotFound`] for a
    /// program or folder that is not there, the cause's own kind where
    /// there is one.
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            RunError::EmptyCommand => io::ErrorKind::InvalidInput,
            RunError::NoSuchProgram { .. } | RunError::NotInPath { .. } | RunError::NoWorkingFolder { .. } => {
                io::ErrorKind::NotFound
            }
            RunError::Transcript { error, .. } | RunError::Start { error, .. } | RunError::Os(error) => error.kind(),
        }
    }
}

/// For callers that work in [`io::Result`]: the same kind, and this error
/// inside (its message, and [`io::Error::get_ref`] gives it back).
impl From<RunError> for io::Error {
    fn from(e: RunError) -> io::Error {
        match e {
            RunError::Os(e) => e,
            e => io::Error::new(e.kind(), e),
        }
    }
}

fn interpreter_hint(e: &io::Error) -> &'static str {
    if e.kind() == io::ErrorKind::NotFound { " (is the interpreter on its #! line installed?)" } else { "" }
}
