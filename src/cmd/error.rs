//! How a command fails: every subcommand returns this error, and
//! `main_entry` prints it once and maps it to the documented exit code
//! (README, "Commands") in
//! [`Error::code`], the one place the codes of `exit.rs` are chosen.

use crate::report::Output;
use cassist_core::spec::SpecDiagnostic;

/// What a command could not do, with the words the user is shown.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The command line does not parse, or asks for `--help` or
    /// `--version`: clap says so itself.
    #[error(transparent)]
    Usage(#[from] clap::Error),
    /// Task files or the config are invalid: their diagnostics, with the
    /// count of errors under them.
    #[error("{}", invalid(.0))]
    Invalid(Vec<SpecDiagnostic>),
    /// Other invalid input: an argument, a folder.
    #[error("{0}")]
    Input(String),
    /// `--locked`, and these tasks would need an agent run (with why).
    #[error("{}", locked(.0))]
    Locked(Vec<(String, Vec<String>)>),
    /// A task failed or was blocked; the summary already said which.
    #[error("a task failed or was blocked")]
    TaskFailed,
    /// Stopped by Ctrl-C.
    #[error("interrupted: agents stopped, workspaces removed; the project is as it was after the last integrated task")]
    Interrupted,
    /// cassist could not do its own work: a lock, a folder, a file.
    #[error("{0}")]
    Internal(String),
    /// A hidden helper cassist runs in a workspace failed; it speaks as
    /// the sandbox wrapper does (`cassist: ...`).
    #[error("{0}")]
    Helper(String),
}

impl From<cassist_run::session::Error> for Error {
    fn from(e: cassist_run::session::Error) -> Error {
        match e {
            cassist_run::session::Error::Invalid(diags) => Error::Invalid(diags),
            e => Error::Internal(e.to_string()),
        }
    }
}

impl Error {
    /// The exit code: 0 success, 1 a task failed, 2 invalid input, 3
    /// `--locked` and an agent would be needed, 130 interrupted.
    pub fn code(&self) -> i32 {
        use cassist_core::exit;
        match self {
            Error::Usage(e) if !e.use_stderr() => exit::SUCCESS,
            Error::Usage(_) | Error::Invalid(_) | Error::Input(_) => exit::INVALID_INPUT,
            Error::Locked(_) => exit::LOCKED,
            Error::Interrupted => exit::INTERRUPTED,
            Error::TaskFailed | Error::Internal(_) | Error::Helper(_) => exit::TASK_FAILED,
        }
    }

    /// Says what went wrong, on stderr (clap's help and version on stdout).
    pub fn print(&self, out: &Output) {
        match self {
            Error::Usage(e) => {
                let _ = e.print();
            }
            Error::Invalid(diags) => out.print_diagnostics(diags),
            Error::Input(m) | Error::Internal(m) => cassist_core::errln!("error: {m}"),
            Error::Helper(m) => cassist_core::errln!("cassist: {m}"),
            Error::Locked(_) | Error::Interrupted => cassist_core::errln!("{self}"),
            Error::TaskFailed => {}
        }
    }
}

fn invalid(diags: &[SpecDiagnostic]) -> String {
    let errors = diags.iter().filter(|d| d.is_error()).count();
    format!("{errors} error(s) in the task files or the config")
}

fn locked(tasks: &[(String, Vec<String>)]) -> String {
    let mut text = format!("--locked: {} task(s) would need an agent run:", tasks.len());
    for (name, why) in tasks {
        text.push_str(&format!("\n  {name}: {}", why.join("; ")));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use cassist_core::exit;

    #[test]
    fn each_failure_has_its_documented_code() {
        let spec = SpecDiagnostic::error("x", "bad");
        let cases = [
            (Error::Invalid(vec![spec]), exit::INVALID_INPUT),
            (Error::Input("-C".into()), exit::INVALID_INPUT),
            (Error::Locked(vec![("a".into(), vec!["goal changed".into()])]), exit::LOCKED),
            (Error::TaskFailed, exit::TASK_FAILED),
            (Error::Interrupted, exit::INTERRUPTED),
            (Error::Internal("disk".into()), exit::TASK_FAILED),
            (Error::Helper("no store".into()), exit::TASK_FAILED),
        ];
        for (e, code) in cases {
            assert_eq!(e.code(), code, "{e:?}");
        }
        let usage = <crate::cli::Cli as clap::Parser>::try_parse_from(["cassist", "--bogus"]).unwrap_err();
        assert_eq!(Error::from(usage).code(), exit::INVALID_INPUT);
        let help = <crate::cli::Cli as clap::Parser>::try_parse_from(["cassist", "--help"]).unwrap_err();
        assert_eq!(Error::from(help).code(), exit::SUCCESS);
    }

    #[test]
    fn locked_names_each_task_and_why() {
        let e = Error::Locked(vec![("a".into(), vec!["goal changed".into(), "new file x".into()])]);
        assert_eq!(e.to_string(), "--locked: 1 task(s) would need an agent run:\n  a: goal changed; new file x");
    }
}
