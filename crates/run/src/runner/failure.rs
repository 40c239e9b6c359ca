//! How a task fails: one typed value that every step returns through `?`,
//! carrying the state the task ends in and the reason the user reads.

use cassist_core::event::TaskState;
use cassist_sandbox::process::{Finished, Outcome};

use super::resources::OverLimit;

/// The reason of a task Ctrl-C stopped (its state is `failed` in the
/// report: interrupted is not a state of its own).
pub const INTERRUPTED: &str = "interrupted (Ctrl-C)";

/// Why a task did not pass. The task's report is made from it in one
/// place ([`super::Ending`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{reason}")]
pub struct Failure {
    /// [`TaskState::Failed`] or [`TaskState::Blocked`].
    pub state: TaskState,
    /// The reason, exactly as reported.
    pub reason: String,
    /// The end of the output that failed, if a command's.
    pub tail: String,
    /// Ended by Ctrl-C.
    pub interrupted: bool,
    /// Keep the workspace for inspection whatever `--keep-workspace` says.
    pub keep_workspace: bool,
}

impl Failure {
    /// The task failed for `reason`.
    pub fn failed(reason: impl Into<String>) -> Failure {
        Failure {
            state: TaskState::Failed,
            reason: reason.into(),
            tail: String::new(),
            interrupted: false,
            keep_workspace: false,
        }
    }

    /// The task cannot be done as it is written, for `reason`.
    pub fn blocked(reason: impl Into<String>) -> Failure {
        Failure { state: TaskState::Blocked, ..Failure::failed(reason) }
    }

    /// Ctrl-C stopped the task.
    pub fn interrupted() -> Failure {
        Failure { interrupted: true, ..Failure::failed(INTERRUPTED) }
    }

    /// The same failure, with the end of the output that failed.
    pub fn with_tail(self, tail: impl Into<String>) -> Failure {
        Failure { tail: tail.into(), ..self }
    }

    /// The same failure; whether it came from Ctrl-C.
    pub fn interrupted_if(self, interrupted: bool) -> Failure {
        Failure { interrupted, ..self }
    }

    /// The same failure; its workspace is kept for inspection.
    pub fn keeping_workspace(self) -> Failure {
        Failure { keep_workspace: true, ..self }
    }

    /// `what` (`the setup command `npm ci``) failed after it went past a
    /// limit of `limits`: an environment failure, never feedback for the
    /// agent.
    pub fn over_limit(what: &str, over: &OverLimit) -> Failure {
        Failure::failed(format!("{what} {over}")).with_tail(over.tail.clone())
    }
}

/// Why a command of a task could not be run at all: its sandboxed command
/// line could not be made, the spawner could not start it, or a folder it
/// needs could not be made; or why it failed for its environment: it went
/// past a limit of `limits`. (A command that ran and failed otherwise is a
/// [`Finished`] with its outcome.)
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error(transparent)]
    OverLimit(Box<OverLimit>),
    #[error(transparent)]
    Start(#[from] cassist_sandbox::process::RunError),
    #[error(transparent)]
    Workspace(#[from] crate::workspace::Error),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The egress proxy could not serve the command.
    #[error("{0}")]
    Network(String),
    /// It failed while the egress proxy refused it a host: an environment
    /// failure, never the agent's to fix ([`super::network::refused_reason`]).
    #[error("{0}")]
    Refused(String),
}

impl CommandError {
    /// The kind of the underlying OS error (`NotFound` for a program that
    /// is not there), `Other` for what is not one.
    pub fn kind(&self) -> std::io::ErrorKind {
        match self {
            CommandError::Start(e) => e.kind(),
            CommandError::Workspace(crate::workspace::Error::Io(e)) | CommandError::Io(e) => e.kind(),
            CommandError::Workspace(_)
            | CommandError::Network(_)
            | CommandError::Refused(_)
            | CommandError::OverLimit(_) => std::io::ErrorKind::Other,
        }
    }
}

/// How a command ended, as its reason says it: `exit code 3`, `killed by
/// signal 9 (SIGKILL)`, `timed out after 3m`, `cancelled`.
pub fn ended(f: &Finished) -> String {
    match f.outcome {
        Outcome::Exited(code) => format!("exit code {code}"),
        Outcome::Signaled(sig) => match nix::sys::signal::Signal::try_from(sig) {
            Ok(s) => format!("killed by signal {sig} ({})", s.as_str()),
            Err(_) => format!("killed by signal {sig}"),
        },
        Outcome::TimedOut => match f.timeout {
            Some(t) => format!("timed out after {}", cassist_core::text::duration(t)),
            None => "timed out".to_owned(),
        },
        Outcome::Cancelled => "cancelled".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn constructors_set_state_and_flags() {
        let f = Failure::failed("no");
        assert_eq!(
            (f.state, f.reason.as_str(), f.interrupted, f.keep_workspace),
            (TaskState::Failed, "no", false, false)
        );
        assert_eq!(f.to_string(), "no");
        let b = Failure::blocked("too big").with_tail("out").keeping_workspace();
        assert_eq!((b.state, b.tail.as_str(), b.keep_workspace), (TaskState::Blocked, "out", true));
        let i = Failure::interrupted();
        assert_eq!((i.state, i.reason.as_str(), i.interrupted), (TaskState::Failed, INTERRUPTED, true));
        assert!(Failure::failed("x").interrupted_if(true).interrupted);
    }

    fn finished(outcome: Outcome, timeout: Option<Duration>) -> Finished {
        Finished {
            outcome,
            duration: Duration::ZERO,
            tail: String::new(),
            output_bytes: 0,
            killed_by_oom_hint: false,
            pid: 1,
            timeout,
            transcript_error: None,
        }
    }

    #[test]
    fn a_command_end_is_said_in_words() {
        assert_eq!(ended(&finished(Outcome::Exited(3), None)), "exit code 3");
        assert_eq!(ended(&finished(Outcome::Signaled(9), None)), "killed by signal 9 (SIGKILL)");
        assert_eq!(ended(&finished(Outcome::Signaled(77), None)), "killed by signal 77");
        assert_eq!(ended(&finished(Outcome::TimedOut, Some(Duration::from_millis(200)))), "timed out after 200ms");
        assert_eq!(ended(&finished(Outcome::TimedOut, Some(Duration::from_secs(180)))), "timed out after 3m");
        assert_eq!(ended(&finished(Outcome::Cancelled, None)), "cancelled");
    }

    #[test]
    fn a_command_that_cannot_start_keeps_its_kind_and_words() {
        use cassist_sandbox::process::RunError;
        use std::io::{Error, ErrorKind};
        // NotFound and PermissionDenied send the task to the next agent of
        // its chain: the kind must come through whatever the layer.
        let missing = CommandError::from(RunError::NotInPath { program: "claude".into(), path: "/bin".into() });
        assert_eq!(missing.kind(), ErrorKind::NotFound);
        assert_eq!(missing.to_string(), "program `claude` not found in PATH (/bin)");
        let denied = CommandError::from(crate::workspace::Error::Io(Error::from(ErrorKind::PermissionDenied)));
        assert_eq!(denied.kind(), ErrorKind::PermissionDenied);
        assert_eq!(CommandError::from(Error::from(ErrorKind::NotFound)).kind(), ErrorKind::NotFound);
    }
}
