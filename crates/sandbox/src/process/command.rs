//! What to run ([`Command`]) and how it ended ([`Finished`], [`Outcome`]).

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use super::DEFAULT_TRANSCRIPT_LIMIT;
#[cfg(doc)]
use super::{Cancel, run};

/// The credentials of the remote cache: cassist itself talks to the
/// remote, no process it starts ever gets them, whatever `pass-env` says
/// (an agent holding them could write entries everyone trusts, or read the
/// team's cache).
pub const NEVER_PASSED: &[&str] =
    &["CASSIST_CACHE_SIGNING_KEY", "TURBO_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"];

/// One process to run. Its `Debug` shows the names of the environment
/// variables, never their values.
#[derive(Clone)]
pub struct Command {
    /// `argv[0]` is the program. Without a `/` it is looked up in the `PATH`
    /// of [`env`](Command::env) (`/bin:/usr/bin` when there is none); with a
    /// `/` and relative, it is taken relative to [`cwd`](Command::cwd). The
    /// child sees `argv[0]` as given.
    pub argv: Vec<OsString>,
    pub cwd: PathBuf,
    /// The complete environment of the child: nothing is inherited. When a
    /// name appears twice, the last value wins.
    pub env: Vec<(OsString, OsString)>,
    /// Written to the child's stdin, which is then closed; `None` gives
    /// `/dev/null`.
    pub stdin: Option<Vec<u8>>,
    pub timeout: Option<Duration>,
    /// Time between `SIGTERM` and `SIGKILL` when stopping the child.
    pub grace: Duration,
    /// stdout and stderr interleaved, appended to this file as they come,
    /// redacted. Created if missing.
    pub transcript: Option<PathBuf>,
    /// Most bytes of this run's output the transcript keeps: the first
    /// half and the last half, with `[cassist: N bytes cut]` between.
    pub transcript_limit: u64,
    /// How many of the last output bytes [`Finished::tail`] keeps.
    pub tail_limit: usize,
    /// The child gets `SIGKILL` when cassist dies, even by `SIGKILL`
    /// (`PR_SET_PDEATHSIG`). This needs a hook between `fork` and `exec`, so
    /// a full `fork`; without it the child is started the cheaper way
    /// (`posix_spawn`, a `vfork`).
    pub die_with_cassist: bool,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Command")
            .field("argv", &self.argv)
            .field("cwd", &self.cwd)
            .field("env", &self.env.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .field("stdin", &self.stdin.as_ref().map(|b| format!("{} bytes", b.len())))
            .field("timeout", &self.timeout)
            .field("grace", &self.grace)
            .field("transcript", &self.transcript)
            .field("transcript_limit", &self.transcript_limit)
            .field("tail_limit", &self.tail_limit)
            .field("die_with_cassist", &self.die_with_cassist)
            .finish()
    }
}

impl Command {
    /// A command with an empty environment, no stdin, no timeout, a 5 s
    /// grace, no transcript and an 8 KiB tail, that dies with cassist.
    pub fn new<I, S>(argv: I, cwd: impl Into<PathBuf>) -> Command
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        Command {
            argv: argv.into_iter().map(Into::into).collect(),
            cwd: cwd.into(),
            env: Vec::new(),
            stdin: None,
            timeout: None,
            grace: Duration::from_secs(5),
            transcript: None,
            transcript_limit: DEFAULT_TRANSCRIPT_LIMIT,
            tail_limit: 8 * 1024,
            die_with_cassist: true,
        }
    }

    /// A command started through the sandbox wrapper
    /// ([`crate::sandbox::ExecSpec::for_project`]), which sees itself to
    /// dying with cassist (it is told cassist's pid): it needs no hook
    /// between `fork` and `exec`, so it starts without a full `fork` of
    /// cassist (whose address space the kernel would copy, then throw
    /// away at the `exec`).
    pub fn sandboxed(argv: Vec<OsString>, cwd: impl Into<PathBuf>) -> Command {
        let mut c = Command::new(argv, cwd);
        c.die_with_cassist = false;
        c
    }

    /// A command with cassist's own environment and current folder, for
    /// cassist's own short helpers and `--version` probes (agents and
    /// acceptance commands get an environment made for them). It does not
    /// die with cassist (it ends by itself or at its timeout), so it starts
    /// without a full `fork` of cassist.
    pub fn inheriting<I, S>(argv: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        let mut c = Command::new(argv, cwd);
        c.env = std::env::vars_os().filter(|(k, _)| !k.to_str().is_some_and(|k| NEVER_PASSED.contains(&k))).collect();
        c.die_with_cassist = false;
        c
    }

    /// The program as given, for messages.
    pub fn program(&self) -> String {
        self.argv.first().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default()
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The child exited by itself with this code (a shell reporting a killed
    /// command with `exit 137` is `Exited(137)`).
    Exited(i32),
    /// The child was killed by this signal, not by cassist (e.g. `9` from
    /// the OOM killer).
    Signaled(i32),
    /// cassist stopped it at its timeout.
    TimedOut,
    /// cassist stopped it because of [`Cancel`].
    Cancelled,
}

/// The result of [`run`].
#[derive(Debug, Clone)]
pub struct Finished {
    pub outcome: Outcome,
    /// Wall time of the whole run.
    pub duration: Duration,
    /// The last [`Command::tail_limit`] bytes of output, redacted, as lossy
    /// UTF-8 (a character cut at the start is dropped).
    pub tail: String,
    /// Bytes the child printed (before redaction).
    pub output_bytes: u64,
    /// A line reporting a process killed (`Killed`, `1234 Killed  cmd`,
    /// `SIGKILL: kill`, `signal 9 [Killed]`) was seen in the output: a hint
    /// that something was killed for lack of memory.
    pub killed_by_oom_hint: bool,
    /// Process id of the direct child, which is also its process group id.
    pub pid: u32,
    /// The timeout the command had (said in the reason of a timed-out
    /// command).
    pub timeout: Option<Duration>,
    /// Why the transcript is incomplete, if writing it failed.
    pub transcript_error: Option<String>,
}

impl Finished {
    /// Exited with code 0.
    pub fn success(&self) -> bool {
        self.outcome == Outcome::Exited(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::test_support::*;

    #[test]
    fn inheriting_takes_our_environment_and_folder() {
        let c = Command::inheriting(["sh", "-c", "pwd; echo \"PATH=$PATH\""]);
        assert!(!c.die_with_cassist);
        let f = go(&c);
        let here = std::env::current_dir().unwrap();
        let path = std::env::var("PATH").unwrap();
        assert_eq!(f.tail, format!("{}\nPATH={path}\n", here.display()));
    }

    #[test]
    fn command_debug_hides_values() {
        let mut c = Command::new(["agent"], "/tmp");
        c.env = vec![("API_TOKEN".into(), "tok-123456".into())];
        c.stdin = Some(b"prompt".to_vec());
        let shown = format!("{c:?}");
        assert!(shown.contains("API_TOKEN") && shown.contains("6 bytes"), "{shown}");
        assert!(!shown.contains("tok-123456") && !shown.contains("prompt"), "{shown}");
    }
}
