//! The process runner: how cassist starts an agent or an acceptance command,
//! watches it, stops it and records what it printed.
//!
//! Modelled on cargo-nextest's runner:
//!
//! - the child gets its **own process group**, so the whole tree it spawns
//!   can be signalled at once (and a Ctrl-C on the terminal reaches cassist
//!   only, which then stops every child on purpose through [`Cancel`]);
//! - on **timeout or cancel**: `SIGTERM` to the group, a grace period, then
//!   `SIGKILL` to the group;
//! - when the direct child exits on its own, whatever it left behind in its
//!   group is killed too (the group is signalled while the exited child is
//!   still an unreaped zombie, so the group id cannot have been reused);
//! - the environment is exactly [`Command::env`], never the parent's;
//! - stdout and stderr share one pipe, read by a thread in 64 KiB chunks and
//!   streamed through a [`RedactingWriter`] to the transcript file as they
//!   come; only the last [`Command::tail_limit`] bytes are kept in memory, so
//!   memory stays constant whatever the child prints;
//! - stdin is written by its own thread, so a child that never reads it
//!   cannot block us;
//! - recording never breaks the run: a transcript that cannot be written is
//!   reported in [`Finished::transcript_error`], the child runs on.
//!
//! A process that escapes its group (`setsid`) cannot be found by group; once
//! the child is gone, cassist stops reading output it may still hold open
//! after [`DRAIN_LIMIT`], so [`run`] returns in bounded time anyway.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

/// Text that replaces a secret value in transcripts and tails.
pub const REDACTED: &str = "[REDACTED]";

/// Parts of a variable name that mark its value as a secret (case-insensitive).
pub const SECRET_NAME_PARTS: [&str; 6] = ["KEY", "TOKEN", "SECRET", "PASSWORD", "AUTH", "CREDENTIAL"];

/// Values shorter than this are not treated as secrets (`1`, `true`, `yes`
/// would otherwise be blanked out everywhere).
pub const MIN_SECRET_LEN: usize = 6;

/// Size of one read of the child's output.
pub const CHUNK: usize = 64 * 1024;

/// How often the wait loop looks at the timeout and at [`Cancel`].
pub const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// How long output is still read once the child has been reaped and its
/// group killed (only a process that escaped the group can hold it longer).
pub const DRAIN_LIMIT: Duration = Duration::from_secs(1);

/// How long [`run`] waits for killed members of the group to be gone.
const VANISH_LIMIT: Duration = Duration::from_secs(1);

/// `PATH` used to find the program when the environment has none (glibc's
/// default for `execvp`).
const DEFAULT_PATH: &str = "/bin:/usr/bin";

// ---------------------------------------------------------------------------
// Redaction
// ---------------------------------------------------------------------------

/// Replaces known secret values by [`REDACTED`].
///
/// [`Redactor::from_env`] takes the values of cassist's own variables whose
/// names contain one of [`SECRET_NAME_PARTS`] (case-insensitive), ignoring
/// values shorter than [`MIN_SECRET_LEN`] bytes. Where secrets overlap, the
/// longest one at the leftmost position wins. Cheap to clone.
#[derive(Clone, Default)]
pub struct Redactor {
    matcher: Option<Arc<Matcher>>,
}

struct Matcher {
    /// All secrets at once, leftmost-longest; `None` only if the automaton
    /// could not be built (then the naive search below is used).
    automaton: Option<aho_corasick::AhoCorasick>,
    /// Longest first, deduplicated.
    secrets: Vec<Vec<u8>>,
    longest: usize,
}

impl Matcher {
    /// Leftmost match at or after `from`; the longest secret at that position.
    fn find_at(&self, hay: &[u8], from: usize) -> Option<(usize, usize)> {
        if let Some(ac) = &self.automaton {
            return ac.find(aho_corasick::Input::new(hay).range(from..)).map(|m| (m.start(), m.end()));
        }
        let mut best: Option<(usize, usize)> = None;
        for secret in &self.secrets {
            let Some(at) = hay[from..].windows(secret.len()).position(|w| w == secret.as_slice()) else {
                continue;
            };
            let start = from + at;
            if best.is_none_or(|(b, _)| start < b) {
                best = Some((start, start + secret.len()));
            }
        }
        best
    }
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secrets themselves.
        let n = self.matcher.as_ref().map_or(0, |m| m.secrets.len());
        f.debug_struct("Redactor").field("secrets", &n).finish()
    }
}

impl Redactor {
    /// Secrets taken from cassist's own environment ([`std::env::vars_os`]).
    pub fn from_env() -> Redactor {
        Redactor::from_vars(std::env::vars_os())
    }

    /// Secrets taken from the given variables: the values of those whose
    /// name [`is_secret_name`](Redactor::is_secret_name).
    pub fn from_vars<I, K, V>(vars: I) -> Redactor
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        let secrets = vars
            .into_iter()
            .filter(|(name, _)| Redactor::is_secret_name(name.as_ref()))
            .map(|(_, value)| value.as_ref().as_bytes().to_vec())
            .collect();
        Redactor::new(secrets)
    }

    /// Whether a variable of this name holds a secret: its name contains
    /// one of [`SECRET_NAME_PARTS`], case-insensitive.
    pub fn is_secret_name(name: &OsStr) -> bool {
        let upper = name.as_bytes().to_ascii_uppercase();
        SECRET_NAME_PARTS.iter().any(|part| upper.windows(part.len()).any(|w| w == part.as_bytes()))
    }

    /// A redactor for these values; those shorter than [`MIN_SECRET_LEN`]
    /// bytes are ignored.
    pub fn new(secrets: Vec<Vec<u8>>) -> Redactor {
        let mut secrets: Vec<Vec<u8>> = secrets.into_iter().filter(|s| s.len() >= MIN_SECRET_LEN).collect();
        if secrets.is_empty() {
            return Redactor { matcher: None };
        }
        secrets.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        secrets.dedup();
        let longest = secrets[0].len();
        // Leftmost-longest: where secrets overlap, the longest one at the
        // leftmost position wins, whatever the bytes (no escaping needed).
        let automaton = aho_corasick::AhoCorasick::builder()
            .match_kind(aho_corasick::MatchKind::LeftmostLongest)
            .build(&secrets)
            .ok();
        Redactor { matcher: Some(Arc::new(Matcher { automaton, secrets, longest })) }
    }

    /// Whether `bytes` hold the value of one of the secrets.
    pub fn contains_secret(&self, bytes: &[u8]) -> bool {
        self.matcher.as_ref().is_some_and(|m| m.find_at(bytes, 0).is_some())
    }

    /// `text` with every secret replaced by [`REDACTED`].
    pub fn redact(&self, text: &str) -> String {
        match self.redact_bytes(text.as_bytes()) {
            std::borrow::Cow::Borrowed(_) => text.to_owned(),
            std::borrow::Cow::Owned(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        }
    }

    /// `bytes` with every secret replaced by [`REDACTED`].
    pub fn redact_bytes<'a>(&self, bytes: &'a [u8]) -> std::borrow::Cow<'a, [u8]> {
        let Some(m) = &self.matcher else {
            return std::borrow::Cow::Borrowed(bytes);
        };
        let mut out = Vec::new();
        let mut pos = 0;
        while let Some((start, end)) = m.find_at(bytes, pos) {
            out.extend_from_slice(&bytes[pos..start]);
            out.extend_from_slice(REDACTED.as_bytes());
            pos = end;
        }
        if pos == 0 {
            return std::borrow::Cow::Borrowed(bytes);
        }
        out.extend_from_slice(&bytes[pos..]);
        std::borrow::Cow::Owned(out)
    }

    /// Whether there is nothing to redact.
    pub fn is_empty(&self) -> bool {
        self.matcher.is_none()
    }

    /// Length of the longest secret (0 when empty).
    pub fn longest(&self) -> usize {
        self.matcher.as_ref().map_or(0, |m| m.longest)
    }
}

/// A [`Write`] adapter that redacts a stream.
///
/// It holds back at most `longest secret - 1` bytes that could be the start
/// of a secret completed by the next write, so a secret split across writes
/// is still replaced. Call [`finish`](RedactingWriter::finish) at the end to
/// write what is held back; [`flush`](Write::flush) flushes the inner writer
/// but keeps those bytes (they might still become a secret). Dropping the
/// writer without `finish` loses them (it never leaks them).
pub struct RedactingWriter<W: Write> {
    inner: W,
    matcher: Option<Arc<Matcher>>,
    pending: Vec<u8>,
    out: Vec<u8>,
}

impl<W: Write> RedactingWriter<W> {
    pub fn new(inner: W, redactor: &Redactor) -> RedactingWriter<W> {
        RedactingWriter { inner, matcher: redactor.matcher.clone(), pending: Vec::new(), out: Vec::new() }
    }

    /// Writes whatever is held back (redacted) and flushes the inner writer.
    pub fn finish(&mut self) -> io::Result<()> {
        self.emit(true)?;
        self.inner.flush()
    }

    /// The inner writer, without writing what is held back: call
    /// [`finish`](RedactingWriter::finish) first.
    pub fn into_inner(self) -> W {
        self.inner
    }

    pub fn get_ref(&self) -> &W {
        &self.inner
    }

    pub fn get_mut(&mut self) -> &mut W {
        &mut self.inner
    }

    /// Number of bytes currently held back.
    pub fn held_back(&self) -> usize {
        self.pending.len()
    }

    fn emit(&mut self, all: bool) -> io::Result<()> {
        let Some(m) = &self.matcher else {
            return Ok(());
        };
        let hold = if all { 0 } else { m.longest - 1 };
        // A match starting before `safe_end` is complete: even the longest
        // secret starting there fits in what we have.
        let safe_end = self.pending.len().saturating_sub(hold);
        self.out.clear();
        let mut pos = 0;
        while let Some((start, end)) = m.find_at(&self.pending, pos) {
            if start >= safe_end {
                break;
            }
            self.out.extend_from_slice(&self.pending[pos..start]);
            self.out.extend_from_slice(REDACTED.as_bytes());
            pos = end;
        }
        let keep_from = pos.max(safe_end);
        self.out.extend_from_slice(&self.pending[pos..keep_from]);
        self.pending.drain(..keep_from);
        if self.out.is_empty() {
            return Ok(());
        }
        self.inner.write_all(&self.out)
    }
}

impl<W: Write> Write for RedactingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.matcher.is_none() {
            self.inner.write_all(buf)?;
            return Ok(buf.len());
        }
        self.pending.extend_from_slice(buf);
        self.emit(false)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

// ---------------------------------------------------------------------------
// Command, outcome
// ---------------------------------------------------------------------------

/// Shared flag that stops running processes (Ctrl-C). Cheap to clone; all
/// clones share the flag. A run that sees it set stops its child the way a
/// timeout does and reports [`Outcome::Cancelled`].
#[derive(Clone, Default, Debug)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    pub fn new() -> Cancel {
        Cancel::default()
    }

    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

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
    /// How many of the last output bytes [`Finished::tail`] keeps.
    pub tail_limit: usize,
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
            .field("tail_limit", &self.tail_limit)
            .finish()
    }
}

impl Command {
    /// A command with an empty environment, no stdin, no timeout, a 5 s
    /// grace, no transcript and an 8 KiB tail.
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
            tail_limit: 8 * 1024,
        }
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
    /// The timeout the command had (for [`describe`](Finished::describe)).
    pub timeout: Option<Duration>,
    /// Why the transcript is incomplete, if writing it failed.
    pub transcript_error: Option<String>,
}

impl Finished {
    /// Exited with code 0.
    pub fn success(&self) -> bool {
        self.outcome == Outcome::Exited(0)
    }

    /// `exit code 3`, `killed by signal 9 (SIGKILL)`, `timed out after 3m`,
    /// `cancelled`.
    pub fn describe(&self) -> String {
        match self.outcome {
            Outcome::Exited(code) => format!("exit code {code}"),
            Outcome::Signaled(sig) => match Signal::try_from(sig) {
                Ok(s) => format!("killed by signal {sig} ({})", s.as_str()),
                Err(_) => format!("killed by signal {sig}"),
            },
            Outcome::TimedOut => match self.timeout {
                Some(t) => format!("timed out after {}", crate::text::duration(t)),
                None => "timed out".to_owned(),
            },
            Outcome::Cancelled => "cancelled".to_owned(),
        }
    }
}

// ---------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------

/// Runs `cmd` to completion and returns how it ended.
///
/// The child runs in its own process group; on timeout or [`Cancel`] the
/// group gets `SIGTERM`, then `SIGKILL` after [`Command::grace`]. When the
/// child exits, what is left of its group is killed: no process of the group
/// survives `run`. Errors are spawn failures (a missing program is
/// [`io::ErrorKind::NotFound`] naming it), an unusable `cwd` or transcript;
/// once the child has started, `run` returns `Ok`.
pub fn run(cmd: &Command, redactor: &Redactor, cancel: &Cancel) -> io::Result<Finished> {
    let started = Instant::now();
    let program = resolve_program(cmd)?;
    if !cmd.cwd.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("cannot run `{}`: working folder {} does not exist", cmd.program(), cmd.cwd.display()),
        ));
    }
    let transcript =
        match &cmd.transcript {
            Some(path) => Some(OpenOptions::new().create(true).append(true).open(path).map_err(|e| {
                io::Error::new(e.kind(), format!("cannot open the transcript {}: {e}", path.display()))
            })?),
            None => None,
        };

    // Both pipes are close-on-exec on our side; the child gets its ends as
    // fds 0, 1 and 2 only.
    let (out_reader, out_writer) = io::pipe()?;
    let mut expr = duct::cmd(program.clone(), &cmd.argv[1..])
        .dir(&cmd.cwd)
        .full_env(cmd.env.iter().cloned())
        // The outer redirection applies first: stdout goes to the pipe,
        // then stderr joins stdout.
        .stderr_to_stdout()
        .stdout_file(File::from(OwnedFd::from(out_writer)))
        .unchecked();
    let stdin_writer = match &cmd.stdin {
        Some(_) => {
            let (r, w) = io::pipe()?;
            expr = expr.stdin_file(File::from(OwnedFd::from(r)));
            Some(w)
        }
        None => {
            expr = expr.stdin_null();
            None
        }
    };
    let arg0 = cmd.argv[0].clone();
    expr = expr.before_spawn(move |c| {
        c.arg0(&arg0);
        c.process_group(0);
        // If cassist itself dies (SIGKILL), the command dies with it.
        // SAFETY: prctl is async-signal-safe; nothing else runs in the hook.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(c, || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
                Ok(())
            });
        }
        Ok(())
    });
    let handle = expr.start().map_err(|e| spawn_error(cmd, &program, e));
    // The expression holds our copies of the child's pipe ends: close them,
    // or we would never see EOF on the output.
    drop(expr);
    let handle = handle?;
    let pid = handle.pids()[0];
    let pgid = pid as i32;
    register_group(pgid);
    let mut guard = GroupGuard { pgid, armed: true };

    let stop_stdin = Arc::new(AtomicBool::new(false));
    let stdin_thread = match (stdin_writer, &cmd.stdin) {
        (Some(writer), Some(bytes)) => {
            let bytes = bytes.clone();
            let stop = stop_stdin.clone();
            Some(thread::Builder::new().name("cassist-stdin".into()).spawn(move || feed_stdin(writer, &bytes, &stop))?)
        }
        _ => None,
    };

    let stop_output = Arc::new(AtomicBool::new(false));
    let (output_tx, output_rx) = mpsc::channel();
    let output_thread = {
        let stop = stop_output.clone();
        let redactor = redactor.clone();
        let tail_limit = cmd.tail_limit;
        thread::Builder::new().name("cassist-output".into()).spawn(move || {
            let captured = pump_output(out_reader, transcript, &redactor, tail_limit, &stop);
            let _ = output_tx.send(captured);
        })?
    };

    let (exit_tx, exit_rx) = mpsc::channel();
    let waiter = thread::Builder::new().name("cassist-wait".into()).spawn(move || {
        let _ = wait_exited_unreaped(pid);
        let _ = exit_tx.send(());
    })?;

    // Wait for the exit, the timeout or a cancel.
    let deadline = cmd.timeout.map(|t| started + t);
    let mut stopped_by: Option<Outcome> = None;
    loop {
        let mut wait = POLL_INTERVAL;
        if let Some(deadline) = deadline {
            wait = wait.min(deadline.saturating_duration_since(Instant::now()));
        }
        match exit_rx.recv_timeout(wait) {
            Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if cancel.is_cancelled() {
            stopped_by = Some(Outcome::Cancelled);
        } else if deadline.is_some_and(|d| Instant::now() >= d) {
            stopped_by = Some(Outcome::TimedOut);
        }
        if stopped_by.is_some() {
            signal_group(pgid, Signal::SIGTERM);
            if let Err(mpsc::RecvTimeoutError::Timeout) = exit_rx.recv_timeout(cmd.grace) {
                signal_group(pgid, Signal::SIGKILL);
                let _ = exit_rx.recv();
            }
            break;
        }
    }
    // The child has exited but is not reaped yet, so its pid still names
    // this group: kill what it left behind, then reap it.
    signal_group(pgid, Signal::SIGKILL);
    let _ = waiter.join();
    let status = handle.wait().map(|out| out.status);
    guard.armed = false;
    stop_stdin.store(true, Ordering::SeqCst);

    // Output still held open after this can only be an escaped process's.
    let captured = match output_rx.recv_timeout(DRAIN_LIMIT) {
        Ok(c) => Some(c),
        Err(_) => {
            stop_output.store(true, Ordering::SeqCst);
            output_rx.recv().ok()
        }
    };
    let _ = output_thread.join();
    if let Some(t) = stdin_thread {
        let _ = t.join();
    }
    // SIGKILL takes effect asynchronously: wait until the killed members
    // have let go of their files and folders (a zombie has), so the caller
    // may remove the workspace at once. Zombies are left to their new
    // parent (init reaps orphans in its own time).
    if group_exists(pgid) {
        let vanish_deadline = Instant::now() + VANISH_LIMIT;
        while !live_group_members(pgid).is_empty() && Instant::now() < vanish_deadline {
            thread::sleep(Duration::from_millis(5));
        }
    }

    let status = status?;
    let outcome = match stopped_by {
        Some(o) => o,
        None => match (status.code(), status.signal()) {
            (Some(code), _) => Outcome::Exited(code),
            (None, Some(sig)) => Outcome::Signaled(sig),
            (None, None) => Outcome::Exited(-1),
        },
    };
    let captured = captured.unwrap_or_default();
    Ok(Finished {
        outcome,
        duration: started.elapsed(),
        tail: captured.tail,
        output_bytes: captured.output_bytes,
        killed_by_oom_hint: captured.killed_hint,
        pid,
        timeout: cmd.timeout,
        transcript_error: captured.transcript_error.map(|e| e.to_string()),
    })
}

/// Kills the group if `run` leaves early (a failed thread spawn, a panic).
struct GroupGuard {
    pgid: i32,
    armed: bool,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            signal_group(self.pgid, Signal::SIGKILL);
        }
        unregister_group(self.pgid);
    }
}

/// Process groups of the commands running now, for [`kill_all_groups`]
/// (a fixed table of atomics: it is read from a signal handler).
static GROUPS: [std::sync::atomic::AtomicI32; 256] = [const { std::sync::atomic::AtomicI32::new(0) }; 256];

fn register_group(pgid: i32) {
    for slot in &GROUPS {
        if slot.compare_exchange(0, pgid, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
            return;
        }
    }
}

fn unregister_group(pgid: i32) {
    for slot in &GROUPS {
        let _ = slot.compare_exchange(pgid, 0, Ordering::SeqCst, Ordering::SeqCst);
    }
}

/// SIGKILL to the process group of every command running now. Only
/// async-signal-safe calls: usable from a signal handler (a second
/// Ctrl-C).
pub fn kill_all_groups() {
    for slot in &GROUPS {
        let pgid = slot.load(Ordering::SeqCst);
        if pgid > 0 {
            // SAFETY: kill is async-signal-safe.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    }
}

fn signal_group(pgid: i32, signal: Signal) {
    // ESRCH (nothing left) is fine; nothing else can reasonably happen.
    let _ = killpg(Pid::from_raw(pgid), signal);
}

fn group_exists(pgid: i32) -> bool {
    !matches!(kill(Pid::from_raw(-pgid), None), Err(Errno::ESRCH))
}

/// Members of process group `pgid` that are not zombies (from `/proc`;
/// empty where there is no `/proc`).
pub fn live_group_members(pgid: i32) -> Vec<i32> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid pgrp ...": comm may hold spaces and parens.
        let Some(close) = stat.rfind(')') else { continue };
        let mut fields = stat[close + 1..].split_ascii_whitespace();
        let state = fields.next().unwrap_or("Z");
        let pgrp = fields.nth(1).and_then(|f| f.parse::<i32>().ok());
        if pgrp == Some(pgid) && state != "Z" && state != "X" {
            found.push(pid);
        }
    }
    found
}

/// Blocks until `pid` has exited, leaving it a zombie (not reaped).
fn wait_exited_unreaped(pid: u32) -> io::Result<()> {
    loop {
        // SAFETY: waitid with a valid out-pointer to a zeroed siginfo_t.
        let r = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOWAIT)
        };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Waits until `fd` has one of `events`, at most `timeout`; `false` on timeout.
fn poll_fd(fd: RawFd, events: libc::c_short, timeout: Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd { fd, events, revents: 0 };
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: one valid pollfd.
    let r = unsafe { libc::poll(&mut pfd, 1, ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted { Ok(false) } else { Err(e) };
    }
    Ok(r > 0)
}

fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an fd we own.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Writes `bytes` to the child's stdin and closes it. Stops when the child
/// closes its end (EPIPE, ignored) or when `stop` is set (the child is gone
/// and an escaped process holds the pipe without reading).
fn feed_stdin(writer: io::PipeWriter, bytes: &[u8], stop: &AtomicBool) {
    let fd = writer.as_raw_fd();
    // Non-blocking on our end only (the child's end is a separate open
    // file), so `stop` is looked at even when the pipe is full.
    if set_nonblocking(fd).is_err() {
        return;
    }
    let mut off = 0;
    while off < bytes.len() && !stop.load(Ordering::SeqCst) {
        match (&writer).write(&bytes[off..]) {
            Ok(n) => off += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let _ = poll_fd(fd, libc::POLLOUT, Duration::from_millis(50));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break, // EPIPE: the child does not want more
        }
    }
}

#[derive(Default)]
struct Captured {
    output_bytes: u64,
    tail: String,
    killed_hint: bool,
    transcript_error: Option<io::Error>,
}

/// Reads the child's output until EOF (or `stop`), streaming it redacted to
/// the transcript and keeping the tail.
fn pump_output(
    reader: io::PipeReader,
    transcript: Option<File>,
    redactor: &Redactor,
    tail_limit: usize,
    stop: &AtomicBool,
) -> Captured {
    let fd = reader.as_raw_fd();
    let mut buf = vec![0u8; CHUNK];
    let mut out = RedactingWriter::new(Sink::new(transcript, tail_limit), redactor);
    let mut scan = KillScan::default();
    let mut total: u64 = 0;
    while !stop.load(Ordering::SeqCst) {
        match poll_fd(fd, libc::POLLIN, Duration::from_millis(50)) {
            Ok(false) => continue,
            Ok(true) => {}
            Err(_) => break,
        }
        match (&reader).read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                total += n as u64;
                scan.feed(&buf[..n]);
                // The sink never fails.
                let _ = out.write_all(&buf[..n]);
            }
            Err(e) if matches!(e.kind(), io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock) => {}
            Err(_) => break,
        }
    }
    let _ = out.finish();
    let mut sink = out.into_inner();
    Captured {
        output_bytes: total,
        tail: sink.tail_text(),
        killed_hint: scan.found,
        transcript_error: sink.transcript_error,
    }
}

/// Where redacted output goes: the transcript file and the tail. Never
/// fails: a transcript write error is kept and the transcript dropped.
struct Sink {
    transcript: Option<File>,
    transcript_error: Option<io::Error>,
    tail: VecDeque<u8>,
    tail_limit: usize,
}

impl Sink {
    fn new(transcript: Option<File>, tail_limit: usize) -> Sink {
        Sink { transcript, transcript_error: None, tail: VecDeque::with_capacity(tail_limit), tail_limit }
    }

    fn tail_text(&mut self) -> String {
        let bytes = self.tail.make_contiguous();
        // Drop a character cut in half at the start.
        let skip = bytes.iter().take(3).take_while(|b| (**b & 0xC0) == 0x80).count();
        String::from_utf8_lossy(&bytes[skip..]).into_owned()
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.tail_limit > 0 {
            if buf.len() >= self.tail_limit {
                self.tail.clear();
                self.tail.extend(&buf[buf.len() - self.tail_limit..]);
            } else {
                let overflow = (self.tail.len() + buf.len()).saturating_sub(self.tail_limit);
                self.tail.drain(..overflow);
                self.tail.extend(buf);
            }
        }
        if let Some(file) = &mut self.transcript
            && let Err(e) = file.write_all(buf)
        {
            self.transcript_error = Some(e);
            self.transcript = None;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Looks for a line that reports a killed process, across chunk boundaries.
#[derive(Default)]
struct KillScan {
    /// The end of the previous data, prefixed with `|` when it does not
    /// start a line (so `^` cannot match there).
    carry: Vec<u8>,
    window: Vec<u8>,
    found: bool,
}

impl KillScan {
    const CARRY: usize = 128;

    fn feed(&mut self, chunk: &[u8]) {
        static WORD: OnceLock<regex::bytes::Regex> = OnceLock::new();
        static LINE: OnceLock<regex::bytes::Regex> = OnceLock::new();
        if self.found {
            return;
        }
        let word = WORD.get_or_init(|| regex::bytes::Regex::new("Killed|SIGKILL").expect("valid regex"));
        let line = LINE.get_or_init(|| {
            regex::bytes::Regex::new(
                r"(?m)^[ \t]*Killed(?:: 9)?[ \t\r]*$|\b[0-9]+[ \t]+Killed\b|SIGKILL: kill|signal 9 \[Killed\]",
            )
            .expect("valid regex")
        });
        self.window.clear();
        self.window.extend_from_slice(&self.carry);
        self.window.extend_from_slice(chunk);
        if word.is_match(&self.window) && line.is_match(&self.window) {
            self.found = true;
            return;
        }
        let w = &self.window;
        self.carry.clear();
        if w.len() <= Self::CARRY {
            self.carry.extend_from_slice(w);
        } else {
            let cut = w.len() - Self::CARRY;
            if w[cut - 1] != b'\n' {
                self.carry.push(b'|');
            }
            self.carry.extend_from_slice(&w[cut..]);
        }
    }
}

/// The program to execute: `argv[0]` resolved as [`Command::argv`] says.
fn resolve_program(cmd: &Command) -> io::Result<PathBuf> {
    let Some(prog) = cmd.argv.first() else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty command"));
    };
    let path = Path::new(prog);
    if prog.as_bytes().contains(&b'/') {
        let full = if path.is_absolute() { path.to_path_buf() } else { cmd.cwd.join(path) };
        if !full.exists() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("program `{}` not found: no file {}", prog.to_string_lossy(), full.display()),
            ));
        }
        return Ok(full);
    }
    let search: &OsStr =
        cmd.env.iter().rev().find(|(k, _)| k == "PATH").map_or(OsStr::new(DEFAULT_PATH), |(_, v)| v.as_os_str());
    find_in_path(prog, search, &cmd.cwd).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("program `{}` not found in PATH ({})", prog.to_string_lossy(), search.to_string_lossy()),
        )
    })
}

/// The first executable file named `program` in the folders of `path`
/// (`:`-separated, as in `PATH`); empty and relative entries are taken
/// relative to `cwd`. The one `PATH` lookup of cassist.
pub fn find_in_path(program: &OsStr, path: &OsStr, cwd: &Path) -> Option<PathBuf> {
    path.as_bytes().split(|b| *b == b':').find_map(|dir| {
        let candidate = cwd.join(OsStr::from_bytes(dir)).join(program);
        is_executable_file(&candidate).then_some(candidate)
    })
}

/// A regular file with an execute bit.
pub fn is_executable_file(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn spawn_error(cmd: &Command, program: &Path, e: io::Error) -> io::Error {
    let hint = if e.kind() == io::ErrorKind::NotFound { " (is the interpreter on its #! line installed?)" } else { "" };
    io::Error::new(e.kind(), format!("cannot start `{}` ({}): {e}{hint}", cmd.program(), program.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn base_env() -> Vec<(OsString, OsString)> {
        vec![("PATH".into(), "/usr/bin:/bin".into())]
    }

    fn sh(dir: &Path, script: &str) -> Command {
        let mut c = Command::new(["sh", "-c", script], dir);
        c.env = base_env();
        c.grace = ms(200);
        c
    }

    fn go(cmd: &Command) -> Finished {
        run(cmd, &Redactor::default(), &Cancel::new()).expect("run")
    }

    /// Runs in a thread and fails (instead of hanging) when `run` does not
    /// return within `limit`; then kills what the pids file names.
    fn go_bounded(cmd: &Command, cancel: &Cancel, limit: Duration, pids: &Path) -> Finished {
        let (tx, rx) = mpsc::channel();
        let (cmd2, cancel2) = (cmd.clone(), cancel.clone());
        thread::spawn(move || {
            let _ = tx.send(run(&cmd2, &Redactor::default(), &cancel2));
        });
        match rx.recv_timeout(limit) {
            Ok(result) => result.expect("run"),
            Err(_) => {
                for pid in std::fs::read_to_string(pids).unwrap_or_default().split_whitespace() {
                    let pid: i32 = pid.parse().unwrap();
                    let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
                    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                }
                panic!("run did not return within {limit:?}");
            }
        }
    }

    /// Whether a process exists and is not a zombie.
    fn alive(pid: i32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => {
                let after = &stat[stat.rfind(')').unwrap() + 2..];
                !after.starts_with('Z') && !after.starts_with('X')
            }
            Err(_) => false,
        }
    }

    /// `kill(-pgid, 0)` gives ESRCH within `limit`. Orphans' zombies stay
    /// in the group until init reaps them, which this VM's init does only
    /// every second or two.
    fn group_gone_within(pgid: i32, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        loop {
            if kill(Pid::from_raw(-pgid), None) == Err(Errno::ESRCH) {
                return true;
            }
            if Instant::now() > end {
                return false;
            }
            thread::sleep(ms(10));
        }
    }

    fn pids_in(file: &Path) -> Vec<i32> {
        std::fs::read_to_string(file).unwrap().split_whitespace().map(|p| p.parse().unwrap()).collect()
    }

    fn assert_tree_gone(f: &Finished, pids_file: &Path) {
        let pgid = f.pid as i32;
        assert_eq!(live_group_members(pgid), Vec::<i32>::new(), "live members of group {pgid}");
        let pids = pids_in(pids_file);
        assert!(pids.len() >= 2, "{pids:?}");
        for pid in pids {
            assert!(!alive(pid), "process {pid} survived");
        }
        assert!(group_gone_within(pgid, Duration::from_secs(10)), "group {pgid} still exists");
    }

    #[test]
    fn exit_code_is_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let f = go(&sh(dir.path(), "exit 3"));
        assert_eq!(f.outcome, Outcome::Exited(3));
        assert!(!f.success());
        assert_eq!(f.describe(), "exit code 3");
        let f = go(&sh(dir.path(), "exit 0"));
        assert!(f.success());
        assert!(f.pid > 0);
    }

    #[test]
    fn exit_137_from_a_shell_is_an_exit_code() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(go(&sh(dir.path(), "exit 137")).outcome, Outcome::Exited(137));
    }

    #[test]
    fn signal_is_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let f = go(&sh(dir.path(), "kill -KILL $$"));
        assert_eq!(f.outcome, Outcome::Signaled(9));
        assert!(!f.success());
        assert_eq!(f.describe(), "killed by signal 9 (SIGKILL)");
        assert_eq!(go(&sh(dir.path(), "kill -TERM $$")).outcome, Outcome::Signaled(15));
    }

    #[test]
    fn environment_is_exactly_the_given_one() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Command::new(["env"], dir.path());
        c.env = vec![
            ("PATH".into(), "/usr/bin:/bin".into()),
            ("CASSIST_TASK".into(), "demo/part".into()),
            ("EMPTY".into(), "".into()),
            ("SPACED".into(), "a b  c".into()),
        ];
        let f = go(&c);
        assert!(f.success(), "{}", f.tail);
        let mut got: Vec<&str> = f.tail.lines().collect();
        got.sort();
        assert_eq!(got, ["CASSIST_TASK=demo/part", "EMPTY=", "PATH=/usr/bin:/bin", "SPACED=a b  c"]);
    }

    #[test]
    fn argv_and_cwd_are_given() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = sh(dir.path(), r#"pwd; echo "$0|$1|$2""#);
        c.argv.extend(["zero".into(), "one".into(), "two words".into()]);
        let f = go(&c);
        let cwd = dir.path().canonicalize().unwrap();
        assert_eq!(f.tail, format!("{}\nzero|one|two words\n", cwd.display()));
    }

    #[test]
    fn relative_program_with_a_slash_is_taken_from_cwd() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("agent.sh");
        std::fs::write(&script, "#!/bin/sh\necho \"agent $0\"\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut c = Command::new(["./agent.sh"], dir.path());
        c.env = base_env();
        // A script's $0 is the path the kernel was given: the resolved one.
        let expected = format!("agent {}\n", dir.path().join("./agent.sh").display());
        assert_eq!(go(&c).tail, expected);
    }

    #[test]
    fn stderr_is_interleaved_with_stdout() {
        let dir = tempfile::tempdir().unwrap();
        let f = go(&sh(dir.path(), "echo one; echo two >&2; echo three"));
        assert_eq!(f.tail, "one\ntwo\nthree\n");
        assert_eq!(f.output_bytes, 14);
    }

    #[test]
    fn stdin_is_delivered() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Command::new(["cat"], dir.path());
        c.env = base_env();
        c.stdin = Some(b"hello\nworld\n".to_vec());
        assert_eq!(go(&c).tail, "hello\nworld\n");

        // Larger than a pipe buffer, read while we read its output.
        let mut c = Command::new(["wc", "-c"], dir.path());
        c.env = base_env();
        c.stdin = Some(vec![b'x'; 3 << 20]);
        assert_eq!(go(&c).tail.trim(), (3 << 20).to_string());
    }

    #[test]
    fn stdin_none_is_dev_null() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Command::new(["cat"], dir.path());
        c.env = base_env();
        c.timeout = Some(Duration::from_secs(5));
        let f = go(&c);
        assert_eq!(f.outcome, Outcome::Exited(0));
        assert_eq!(f.tail, "");
    }

    #[test]
    fn stdin_not_read_does_not_block() {
        let dir = tempfile::tempdir().unwrap();
        for script in ["true", "sleep 0.2"] {
            let mut c = sh(dir.path(), script);
            c.stdin = Some(vec![b'x'; 4 << 20]);
            c.timeout = Some(Duration::from_secs(10));
            let f = go(&c);
            assert_eq!(f.outcome, Outcome::Exited(0), "{script}");
        }
    }

    #[test]
    fn timeout_kills_the_whole_tree() {
        let dir = tempfile::tempdir().unwrap();
        let pids = dir.path().join("pids");
        let mut c = sh(
            dir.path(),
            "echo $$ >> pids; sleep 100 & echo $! >> pids; sleep 100 >/dev/null 2>&1 & echo $! >> pids; wait",
        );
        c.timeout = Some(ms(200));
        // The children die of SIGTERM: no need to wait for the grace.
        c.grace = Duration::from_secs(5);
        let t = Instant::now();
        let f = go_bounded(&c, &Cancel::new(), Duration::from_secs(10), &pids);
        assert_eq!(f.outcome, Outcome::TimedOut);
        assert_eq!(f.describe(), "timed out after 200ms");
        assert!(t.elapsed() >= ms(200));
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
        assert_tree_gone(&f, &pids);
    }

    #[test]
    fn term_ignoring_child_is_killed_after_the_grace() {
        let dir = tempfile::tempdir().unwrap();
        let pids = dir.path().join("pids");
        // Ignored signals stay ignored in the children.
        let mut c =
            sh(dir.path(), "trap '' TERM; echo $$ >> pids; sleep 100 & echo $! >> pids; while :; do sleep 0.05; done");
        c.timeout = Some(ms(200));
        c.grace = ms(300);
        let t = Instant::now();
        let f = go_bounded(&c, &Cancel::new(), Duration::from_secs(10), &pids);
        assert_eq!(f.outcome, Outcome::TimedOut);
        assert!(t.elapsed() >= ms(500), "returned before the grace: {:?}", t.elapsed());
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
        assert_tree_gone(&f, &pids);
    }

    #[test]
    fn cancel_stops_the_tree() {
        let dir = tempfile::tempdir().unwrap();
        let pids = dir.path().join("pids");
        let c = sh(dir.path(), "echo $$ >> pids; sleep 100 & echo $! >> pids; wait");
        let cancel = Cancel::new();
        let remote = cancel.clone();
        let canceller = thread::spawn(move || {
            thread::sleep(ms(150));
            remote.cancel();
        });
        let t = Instant::now();
        let f = go_bounded(&c, &cancel, Duration::from_secs(10), &pids);
        canceller.join().unwrap();
        assert_eq!(f.outcome, Outcome::Cancelled);
        assert_eq!(f.describe(), "cancelled");
        assert!(t.elapsed() >= ms(150) && t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
        assert_tree_gone(&f, &pids);
    }

    #[test]
    fn leftovers_of_a_normal_exit_are_killed() {
        let dir = tempfile::tempdir().unwrap();
        let pids = dir.path().join("pids");
        // One holds our output pipe, one does not.
        let c = sh(
            dir.path(),
            "echo $$ >> pids; sleep 100 & echo $! >> pids; sleep 100 >/dev/null 2>&1 & echo $! >> pids; echo bye",
        );
        let t = Instant::now();
        let f = go_bounded(&c, &Cancel::new(), Duration::from_secs(10), &pids);
        assert_eq!(f.outcome, Outcome::Exited(0));
        assert_eq!(f.tail, "bye\n");
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
        assert_tree_gone(&f, &pids);
    }

    #[test]
    fn escaped_grandchild_holding_stdout_does_not_hang() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("escaped");
        let c = sh(dir.path(), "setsid sh -c 'echo $$ > escaped; exec sleep 30' & sleep 0.2; echo done");
        let t = Instant::now();
        let f = go_bounded(&c, &Cancel::new(), Duration::from_secs(5), &pid_file);
        let elapsed = t.elapsed();
        // Clean up the escapee before asserting.
        let escaped = pids_in(&pid_file);
        for pid in &escaped {
            let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
        }
        assert_eq!(f.outcome, Outcome::Exited(0));
        assert_eq!(f.tail, "done\n");
        assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
        assert!(elapsed >= DRAIN_LIMIT, "the escapee did not hold the pipe? {elapsed:?}");
        assert_eq!(escaped.len(), 1);
    }

    #[test]
    fn missing_program_is_not_found_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Command::new(["cassist-no-such-agent"], dir.path());
        c.env = base_env();
        let e = run(&c, &Redactor::default(), &Cancel::new()).expect_err("an error");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("cassist-no-such-agent"), "{e}");

        let mut c = Command::new(["./bin/missing-agent"], dir.path());
        c.env = base_env();
        let e = run(&c, &Redactor::default(), &Cancel::new()).expect_err("an error");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("./bin/missing-agent"), "{e}");
    }

    #[test]
    fn program_is_looked_up_in_the_given_path_only() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Command::new(["sh", "-c", "true"], dir.path());
        c.env = vec![("PATH".into(), dir.path().into())];
        let e = run(&c, &Redactor::default(), &Cancel::new()).expect_err("sh is not in that PATH");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn path_lookup_takes_the_first_executable_and_relative_entries_from_cwd() {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["a", "b", "c"] {
            std::fs::create_dir(dir.path().join(sub)).unwrap();
        }
        std::fs::write(dir.path().join("a/tool"), "").unwrap(); // not executable
        for at in ["b/tool", "c/tool", "tool"] {
            std::fs::write(dir.path().join(at), "").unwrap();
            std::fs::set_permissions(dir.path().join(at), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let abs = |s: &str| dir.path().join(s);
        let path = std::env::join_paths([abs("a"), abs("b"), abs("c")]).unwrap();
        assert_eq!(find_in_path("tool".as_ref(), &path, Path::new("/")), Some(abs("b/tool")));
        assert_eq!(find_in_path("tool".as_ref(), "a:c".as_ref(), dir.path()), Some(abs("c/tool")));
        assert_eq!(find_in_path("tool".as_ref(), "a::c".as_ref(), dir.path()), Some(abs("tool")));
        assert_eq!(find_in_path("tool".as_ref(), "a".as_ref(), dir.path()), None);
        assert_eq!(find_in_path("tool".as_ref(), "c".as_ref(), Path::new("")), None, "relative to our own cwd");
    }

    #[test]
    fn missing_interpreter_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("agent");
        std::fs::write(&script, "#!/no/such/interpreter\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let c = Command::new(["./agent"], dir.path());
        let e = run(&c, &Redactor::default(), &Cancel::new()).expect_err("an error");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("`./agent`"), "{e}");
    }

    #[test]
    fn secret_split_across_writes_is_redacted_in_transcript_and_tail() {
        let dir = tempfile::tempdir().unwrap();
        let transcript = dir.path().join("t.log");
        std::fs::write(&transcript, "earlier\n").unwrap();
        let mut c = sh(dir.path(), "printf 'abc-s3cr'; sleep 0.2; printf 'et-value-xyz\\n'");
        c.transcript = Some(transcript.clone());
        let redactor = Redactor::new(vec![b"s3cret-value".to_vec()]);
        let f = run(&c, &redactor, &Cancel::new()).unwrap();
        assert_eq!(std::fs::read_to_string(&transcript).unwrap(), "earlier\nabc-[REDACTED]-xyz\n");
        assert_eq!(f.tail, "abc-[REDACTED]-xyz\n");
        assert_eq!(f.output_bytes, "abc-s3cret-value-xyz\n".len() as u64);
        assert!(f.transcript_error.is_none());
    }

    #[test]
    fn output_larger_than_the_tail_limit_keeps_only_the_tail() {
        let dir = tempfile::tempdir().unwrap();
        let transcript = dir.path().join("t.log");
        let mut c = sh(dir.path(), "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); echo \"line $i\"; done");
        c.tail_limit = 100;
        c.transcript = Some(transcript.clone());
        let f = go(&c);
        let full = std::fs::read_to_string(&transcript).unwrap();
        assert_eq!(full.lines().count(), 20000);
        assert_eq!(f.output_bytes, full.len() as u64);
        assert_eq!(f.tail.len(), 100);
        assert!(full.ends_with(&f.tail));
        assert!(f.tail.ends_with("line 20000\n"));
    }

    #[test]
    fn killed_line_is_a_hint() {
        let dir = tempfile::tempdir().unwrap();
        for (script, hint) in [
            ("echo Killed", true),
            ("echo 'sh: line 1: 4242 Killed    cargo build'", true),
            ("echo 'error: process didn'\\''t exit successfully (signal: 9, SIGKILL: kill)'", true),
            ("echo 'Not Killed here'; echo 'Killed by a test'", false),
        ] {
            assert_eq!(go(&sh(dir.path(), script)).killed_by_oom_hint, hint, "{script}");
        }
    }

    #[test]
    fn kill_scan_sees_lines_across_chunks() {
        let mut scan = KillScan::default();
        scan.feed(&[b'y'; 200]);
        scan.feed(b"\nKil");
        scan.feed(b"led\n");
        assert!(scan.found);

        // "Killed" at the start of a chunk but in the middle of a line.
        let mut scan = KillScan::default();
        scan.feed(&[b'y'; 300]);
        scan.feed(b"Killed\n");
        assert!(!scan.found);
    }

    #[test]
    fn redactor_takes_secret_looking_variables() {
        let r = Redactor::from_vars([
            ("OPENAI_API_KEY", "sk-123456789"),
            ("github_token", "ghp_abcdefgh"),
            ("MY_PASSWORD", "hunter2-long"),
            ("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI"),
            ("X_AUTH", "authvalue"),
            ("GCP_CREDENTIALS", "/creds.json"),
            ("SHORT_KEY", "12345"),
            ("HOME", "/home/someone"),
        ]);
        assert_eq!(
            r.redact("sk-123456789 ghp_abcdefgh hunter2-long wJalrXUtnFEMI authvalue /creds.json 12345 /home/someone"),
            "[REDACTED] [REDACTED] [REDACTED] [REDACTED] [REDACTED] [REDACTED] 12345 /home/someone"
        );
        assert!(!r.is_empty());
        assert!(Redactor::from_vars([("HOME", "/home/someone")]).is_empty());
        assert!(Redactor::new(vec![b"12345".to_vec()]).is_empty());
        assert_eq!(format!("{r:?}"), "Redactor { secrets: 6 }");
    }

    #[test]
    fn longest_overlapping_secret_wins() {
        let r = Redactor::new(vec![b"abcdef".to_vec(), b"abcdefghij".to_vec(), b"ghijkl".to_vec()]);
        assert_eq!(r.redact("xx abcdefghij yy"), "xx [REDACTED] yy");
        assert_eq!(r.redact("abcdefgh"), "[REDACTED]gh");
        assert_eq!(r.redact("no secret"), "no secret");
        assert_eq!(r.redact("a+b.c*[regex]"), "a+b.c*[regex]");
        let meta = Redactor::new(vec![b"a+b.c*[x]".to_vec()]);
        assert_eq!(meta.redact("1 a+b.c*[x] 2 aab.cc[x]"), "1 [REDACTED] 2 aab.cc[x]");
    }

    #[test]
    fn automaton_and_naive_search_agree() {
        let r = Redactor::new(vec![b"abcdef".to_vec(), b"abcdefghij".to_vec(), b"cdefgh".to_vec(), b"zzzzzz".to_vec()]);
        let m = r.matcher.as_ref().unwrap();
        assert!(m.automaton.is_some());
        let naive = Matcher { automaton: None, secrets: m.secrets.clone(), longest: m.longest };
        let text = b"-abcdefghij-abcdef-abcdezzzzzzzzz-abcdefghi-cdefghij-xabcdefgh";
        for from in 0..text.len() {
            assert_eq!(m.find_at(text, from), naive.find_at(text, from), "from {from}");
        }
    }

    #[test]
    fn redacting_writer_matches_one_shot_redaction_whatever_the_split() {
        let r = Redactor::new(vec![b"abcdef".to_vec(), b"abcdefghij".to_vec(), b"zzzzzz".to_vec()]);
        let text = b"-abcdefghij-abcdef-abcdezzzzzzzz-abcdefghi-abcdefghij";
        let expected = r.redact_bytes(text).into_owned();
        for step in 1..text.len() {
            let mut w = RedactingWriter::new(Vec::new(), &r);
            for piece in text.chunks(step) {
                w.write_all(piece).unwrap();
                assert!(w.held_back() < r.longest(), "held back {}", w.held_back());
                // What is out already is final.
                assert!(expected.starts_with(w.get_ref()), "step {step}");
            }
            w.finish().unwrap();
            assert_eq!(w.into_inner(), expected, "step {step}");
        }
    }

    #[test]
    fn redacting_writer_without_secrets_passes_through() {
        let mut w = RedactingWriter::new(Vec::new(), &Redactor::default());
        w.write_all(b"abc").unwrap();
        assert_eq!(w.get_ref(), b"abc");
        w.finish().unwrap();
        assert_eq!(w.into_inner(), b"abc");
    }

    #[test]
    fn non_utf8_secrets_are_redacted() {
        let r = Redactor::new(vec![vec![0xff, 0xfe, b'a', b'b', 0x80, 0x00]]);
        let out = r.redact_bytes(&[b'x', 0xff, 0xfe, b'a', b'b', 0x80, 0x00, b'y']);
        assert_eq!(&*out, b"x[REDACTED]y");
    }

    #[test]
    fn tail_drops_a_cut_character() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = sh(dir.path(), "printf 'aé'");
        c.tail_limit = 2; // the two bytes of 'é'
        assert_eq!(go(&c).tail, "é");
        c.tail_limit = 1; // only its second byte
        assert_eq!(go(&c).tail, "");
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

    #[test]
    fn transcript_that_cannot_be_opened_is_an_error_before_running() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = sh(dir.path(), "echo ran > ran");
        c.transcript = Some(dir.path().join("no/such/dir/t.log"));
        assert!(run(&c, &Redactor::default(), &Cancel::new()).is_err());
        assert!(!dir.path().join("ran").exists());
    }

    /// `cargo test --lib process::tests::one_gigabyte -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn one_gigabyte_of_output_in_constant_memory() {
        fn hwm_kib() -> u64 {
            let status = std::fs::read_to_string("/proc/self/status").unwrap();
            let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
            line.split_whitespace().nth(1).unwrap().parse().unwrap()
        }
        let dir = tempfile::tempdir().unwrap();
        let before = hwm_kib();
        let mut c = sh(dir.path(), "yes | head -c 1000000000");
        c.transcript = Some(dir.path().join("t.log"));
        let redactor = Redactor::new(vec![b"not-in-the-output".to_vec()]);
        let t = Instant::now();
        let f = run(&c, &redactor, &Cancel::new()).unwrap();
        let elapsed = t.elapsed();
        let after = hwm_kib();
        let written = std::fs::metadata(dir.path().join("t.log")).unwrap().len();
        println!(
            "1 GB: {} bytes in {elapsed:?}, transcript {written} bytes, VmHWM before {before} KiB, after {after} KiB (+{} KiB)",
            f.output_bytes,
            after - before
        );
        assert_eq!(f.output_bytes, 1_000_000_000);
        assert_eq!(written, 1_000_000_000);
        assert!(after - before < 20 * 1024, "peak RSS grew by {} KiB", after - before);
    }
}
