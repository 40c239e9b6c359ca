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
//! - stdout and stderr share one pipe, read in 64 KiB chunks and streamed
//!   through a [`RedactingWriter`] to the transcript file as they come; only
//!   the last [`Command::tail_limit`] bytes are kept in memory, so memory
//!   stays constant whatever the child prints; the transcript keeps the
//!   first and the last half of [`Command::transcript_limit`] bytes, with a
//!   marker line where the middle was cut (the last half is a ring inside
//!   the file, so disk use is bounded too);
//! - stdin is written as the pipe takes it (non-blocking), so a child that
//!   never reads it cannot block us;
//! - waiting is event-driven: one `poll` selects the child's exit (a
//!   pidfd), the [`Cancel`] token (an eventfd), both pipes and the next
//!   deadline together, on the calling thread;
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
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

/// Text that replaces a secret value in transcripts and tails.
pub const REDACTED: &str = "[REDACTED]";

/// Parts of a variable name that mark its value as a secret (case-insensitive).
/// The credentials of the remote cache: cassist itself talks to the
/// remote, no process it starts ever gets them, whatever `pass-env` says
/// (an agent holding them could write entries everyone trusts, or read the
/// team's cache).
pub const NEVER_PASSED: &[&str] =
    &["CASSIST_CACHE_SIGNING_KEY", "TURBO_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"];

pub const SECRET_NAME_PARTS: [&str; 6] = ["KEY", "TOKEN", "SECRET", "PASSWORD", "AUTH", "CREDENTIAL"];

/// Values shorter than this are not treated as secrets (`1`, `true`, `yes`
/// would otherwise be blanked out everywhere).
pub const MIN_SECRET_LEN: usize = 6;

/// Size of one read of the child's output.
pub const CHUNK: usize = 64 * 1024;

/// How long output is still read once the child has been reaped and its
/// group killed (only a process that escaped the group can hold it longer).
pub const DRAIN_LIMIT: Duration = Duration::from_secs(1);

/// How much of a command's output its transcript keeps unless the caller
/// says otherwise ([`Command::transcript_limit`]; the project's `limits`
/// set it for task commands).
pub const DEFAULT_TRANSCRIPT_LIMIT: u64 = 64 << 20;

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

    /// A document an agent wrote (its result file, a CLI's JSON output)
    /// redacted for storing: every secret replaced in its bytes and, when
    /// it is JSON, in its strings as they decode (a secret written with
    /// `\u` escapes is found too; the document is then written again).
    pub fn redact_document(&self, bytes: &[u8]) -> Vec<u8> {
        if self.is_empty() {
            return bytes.to_vec();
        }
        if let Ok(mut doc) = serde_json::from_slice::<serde_json::Value>(bytes)
            && self.redact_json(&mut doc)
        {
            return serde_json::to_vec_pretty(&doc).unwrap_or_else(|_| self.redact_bytes(bytes).into_owned());
        }
        self.redact_bytes(bytes).into_owned()
    }

    /// Redacts every string (and key) of `v`; whether any held a secret.
    fn redact_json(&self, v: &mut serde_json::Value) -> bool {
        use serde_json::Value;
        match v {
            Value::String(s) if self.contains_secret(s.as_bytes()) => {
                *s = self.redact(s);
                true
            }
            Value::Array(items) => items.iter_mut().fold(false, |any, item| self.redact_json(item) | any),
            Value::Object(map) => {
                let mut any = false;
                let old = std::mem::take(map);
                for (k, mut item) in old {
                    any |= self.redact_json(&mut item) | self.contains_secret(k.as_bytes());
                    map.insert(self.redact(&k), item);
                }
                any
            }
            _ => false,
        }
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

/// Stops running processes (Ctrl-C). Cheap to clone; all clones share one
/// token. A run that sees it cancelled stops its child the way a timeout
/// does and reports [`Outcome::Cancelled`].
///
/// Cancelling *notifies*: [`run`] waits in one `poll` on the child's exit,
/// its output and this token's eventfd, and [`cancelled`](Cancel::cancelled)
/// wakes an async waiter; nothing looks at a flag on a tick. An eventfd
/// (rather than a Condvar or `tokio::sync::Notify`) because it can be
/// waited for together with the child's pidfd and pipes in one `poll`, and
/// because setting it is async-signal-safe, so a signal handler may cancel.
#[derive(Clone, Default, Debug)]
pub struct Cancel(Arc<Latch>);

impl Cancel {
    pub fn new() -> Cancel {
        Cancel::default()
    }

    /// Cancels, waking every waiter. Async-signal-safe (an atomic and a
    /// `write`): may be called from a signal handler.
    pub fn cancel(&self) {
        self.0.set();
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.is_set()
    }

    /// Completes once the token is cancelled. Needs a tokio runtime with
    /// I/O enabled. Should the token's eventfd not be made (no fd left), it
    /// never completes: the caller then sees the cancel at its next look at
    /// [`is_cancelled`](Cancel::is_cancelled).
    pub async fn cancelled(&self) {
        use tokio::io::{Interest, unix::AsyncFd};
        if self.is_cancelled() {
            return;
        }
        // A duplicate, so two waiters never register the same fd.
        let Ok(fd) = self.0.fd().and_then(|fd| fd.try_clone_to_owned()) else {
            return std::future::pending().await;
        };
        // SAFETY: an `OwnedFd` stays open, the same file, as long as it lives.
        let Ok(fd) = (unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }) else {
            return std::future::pending().await;
        };
        while !self.is_cancelled() {
            match fd.readable().await {
                Ok(mut ready) if !self.is_cancelled() => ready.clear_ready(),
                Ok(_) => {}
                Err(_) => return std::future::pending().await,
            }
        }
    }
}

/// A one-shot event a `poll` can wait for: once [`set`](Latch::set), its
/// eventfd stays readable (it is never read), so any number of waiters wake
/// at once. The fd is made by the first waiter that asks for it; `set` is
/// async-signal-safe.
#[derive(Debug)]
struct Latch {
    set: AtomicBool,
    /// The eventfd, `-1` until a waiter asks for it.
    fd: AtomicI32,
}

impl Default for Latch {
    fn default() -> Latch {
        Latch { set: AtomicBool::new(false), fd: AtomicI32::new(-1) }
    }
}

impl Latch {
    fn set(&self) {
        if self.set.swap(true, Ordering::SeqCst) {
            return;
        }
        // A waiter that made its fd after this load sees `set` (both
        // sequentially consistent) and wakes the fd itself.
        let fd = self.fd.load(Ordering::SeqCst);
        if fd >= 0 {
            wake_eventfd(fd);
        }
    }

    fn is_set(&self) -> bool {
        self.set.load(Ordering::SeqCst)
    }

    /// The fd that is readable once the latch is set; open as long as the
    /// latch.
    fn fd(&self) -> io::Result<BorrowedFd<'_>> {
        let mut fd = self.fd.load(Ordering::SeqCst);
        if fd < 0 {
            // SAFETY: a plain syscall; on success the fd is ours.
            let made = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
            if made < 0 {
                return Err(io::Error::last_os_error());
            }
            match self.fd.compare_exchange(-1, made, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => {
                    fd = made;
                    if self.is_set() {
                        wake_eventfd(fd);
                    }
                }
                Err(theirs) => {
                    // Another waiter was first.
                    // SAFETY: `made` is ours and used nowhere else.
                    unsafe { libc::close(made) };
                    fd = theirs;
                }
            }
        }
        // SAFETY: the fd is closed only when the latch is dropped.
        Ok(unsafe { BorrowedFd::borrow_raw(fd) })
    }
}

impl Drop for Latch {
    fn drop(&mut self) {
        let fd = *self.fd.get_mut();
        if fd >= 0 {
            // SAFETY: the latch owns its fd.
            unsafe { libc::close(fd) };
        }
    }
}

/// Makes an eventfd readable. Async-signal-safe.
fn wake_eventfd(fd: RawFd) {
    let one: u64 = 1;
    // SAFETY: an 8-byte write from a valid buffer.
    unsafe { libc::write(fd, (&raw const one).cast(), 8) };
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
///
/// One `poll` on the calling thread waits for everything at once: the
/// child's exit (its pidfd), the cancel token, the output pipe, the stdin
/// pipe and the next deadline (timeout, end of the grace, end of the
/// drain). No thread is started, nothing is looked at on a tick.
pub fn run(cmd: &Command, redactor: &Redactor, cancel: &Cancel) -> io::Result<Finished> {
    let started = Instant::now();
    let program = resolve_program(cmd)?;
    if !cmd.cwd.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("cannot run `{}`: working folder {} does not exist", cmd.program(), cmd.cwd.display()),
        ));
    }
    let transcript = match &cmd.transcript {
        Some(path) => Some(
            CappedFile::open(path, cmd.transcript_limit)
                .map_err(|e| io::Error::new(e.kind(), format!("cannot open the transcript {}: {e}", path.display())))?,
        ),
        None => None,
    };
    let cancel_fd = cancel.0.fd()?.as_raw_fd();
    let (mut child, out_reader, stdin_writer) = spawn(cmd, &program)?;
    let pid = child.id();
    let pgid = pid as i32;
    let mut guard = GroupGuard::register(pgid);
    let exit = match ExitWatch::new(pid) {
        Ok(w) => w,
        Err(e) => {
            signal_group(pgid, Signal::SIGKILL);
            let _ = child.wait();
            guard.disarm();
            return Err(e);
        }
    };
    let feed = match (stdin_writer, cmd.stdin.as_deref()) {
        (Some(writer), Some(bytes)) if !bytes.is_empty() => Some(Feed { writer, bytes, written: 0 }),
        // Nothing to write: dropping our end closes the child's stdin.
        _ => None,
    };
    let mut watched = Watched {
        child,
        pgid,
        guard,
        exit,
        output: Output::new(out_reader, transcript, redactor, cmd.tail_limit),
        feed,
        cancel,
        cancel_fd,
    };
    let (status, stopped_by) = watched.wait(cmd.timeout.map(|t| started + t), cmd.grace);
    let captured = watched.output.finish();
    watched.exit.finish();
    wait_until_members_gone(pgid);

    let status = status?;
    let outcome = match stopped_by {
        Some(o) => o,
        None => match (status.code(), status.signal()) {
            (Some(code), _) => Outcome::Exited(code),
            (None, Some(sig)) => Outcome::Signaled(sig),
            (None, None) => Outcome::Exited(-1),
        },
    };
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

/// Starts `program` as `cmd` says, in its own process group. Returns the
/// child, our end of its output pipe (stdout and stderr) and, when it gets
/// stdin, our end of that pipe.
fn spawn(cmd: &Command, program: &Path) -> io::Result<(std::process::Child, io::PipeReader, Option<io::PipeWriter>)> {
    // Our ends of the pipes are close-on-exec and non-blocking (the child's
    // ends are separate open files, blocking as usual); the child gets its
    // ends as fds 0, 1 and 2 only.
    let (out_reader, out_writer) = io::pipe()?;
    set_nonblocking(out_reader.as_raw_fd())?;
    let mut spawn = std::process::Command::new(program);
    spawn
        .arg0(&cmd.argv[0])
        .args(&cmd.argv[1..])
        .current_dir(&cmd.cwd)
        .env_clear()
        .envs(cmd.env.iter().map(|(k, v)| (k, v)))
        // stdout and stderr: one pipe, so their lines interleave as printed.
        .stdout(OwnedFd::from(out_writer.try_clone()?))
        .stderr(OwnedFd::from(out_writer))
        .process_group(0);
    let stdin_writer = match &cmd.stdin {
        Some(_) => {
            let (r, w) = io::pipe()?;
            set_nonblocking(w.as_raw_fd())?;
            spawn.stdin(OwnedFd::from(r));
            Some(w)
        }
        None => {
            spawn.stdin(Stdio::null());
            None
        }
    };
    if cmd.die_with_cassist {
        // If cassist itself dies (SIGKILL), the command dies with it.
        // SAFETY: prctl is async-signal-safe; nothing else runs in the hook.
        unsafe {
            spawn.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
                Ok(())
            });
        }
    }
    let child = spawn.spawn().map_err(|e| spawn_error(cmd, program, e));
    // The builder holds our copies of the child's pipe ends: close them, or
    // we would never see EOF on the output.
    drop(spawn);
    Ok((child?, out_reader, stdin_writer))
}

/// A started child and everything [`Watched::wait`] selects on.
struct Watched<'a> {
    child: std::process::Child,
    pgid: i32,
    guard: GroupGuard,
    exit: ExitWatch,
    output: Output,
    feed: Option<Feed<'a>>,
    cancel: &'a Cancel,
    cancel_fd: RawFd,
}

impl Watched<'_> {
    /// Runs the child to its end, reading its output and writing its stdin
    /// meanwhile; stops it at `deadline` or on cancel (SIGTERM to the group,
    /// SIGKILL after `grace`). Returns its reaped status and, if cassist
    /// stopped it, why. Output is read until EOF, or for at most
    /// [`DRAIN_LIMIT`] once the child is reaped.
    fn wait(
        &mut self,
        deadline: Option<Instant>,
        grace: Duration,
    ) -> (io::Result<std::process::ExitStatus>, Option<Outcome>) {
        let mut stopped_by: Option<Outcome> = None;
        let mut kill_at: Option<Instant> = None;
        let mut set = PollSet::default();
        loop {
            let now = Instant::now();
            if stopped_by.is_none() {
                if self.cancel.is_cancelled() {
                    stopped_by = Some(Outcome::Cancelled);
                } else if deadline.is_some_and(|d| now >= d) {
                    stopped_by = Some(Outcome::TimedOut);
                }
                if stopped_by.is_some() {
                    signal_group(self.pgid, Signal::SIGTERM);
                    kill_at = Some(now + grace);
                }
            }
            if kill_at.is_some_and(|k| now >= k) {
                signal_group(self.pgid, Signal::SIGKILL);
                kill_at = None;
            }

            set.clear();
            let exit_at = set.add(self.exit.fd(), libc::POLLIN);
            if stopped_by.is_none() {
                // Ready once cancelled; looked at above.
                set.add(self.cancel_fd, libc::POLLIN);
            }
            let out_at = (!self.output.done).then(|| set.add(self.output.fd(), libc::POLLIN));
            let in_at = self.feed.as_ref().map(|f| set.add(f.writer.as_raw_fd(), libc::POLLOUT));
            set.wait(if stopped_by.is_none() { deadline } else { kill_at });

            if set.ready(exit_at) {
                break;
            }
            if out_at.is_some_and(|i| set.ready(i)) {
                self.output.read();
            }
            if let (Some(i), Some(f)) = (in_at, &mut self.feed)
                && set.ready(i)
                && !f.write()
            {
                self.feed = None;
            }
        }
        // The child has exited but is not reaped yet, so its pid still names
        // this group: kill what it left behind, then reap it.
        signal_group(self.pgid, Signal::SIGKILL);
        let status = self.child.wait();
        self.guard.disarm();
        // An escaped process may hold stdin without reading it.
        self.feed = None;
        // Output still held open after the drain can only be an escaped
        // process's.
        let drain_until = Instant::now() + DRAIN_LIMIT;
        while !self.output.done && Instant::now() < drain_until {
            set.clear();
            set.add(self.output.fd(), libc::POLLIN);
            set.wait(Some(drain_until));
            if set.ready(0) {
                self.output.read();
            }
        }
        (status, stopped_by)
    }
}

/// The fds one wait of [`run`] is for.
#[derive(Default)]
struct PollSet {
    fds: Vec<libc::pollfd>,
}

impl PollSet {
    fn clear(&mut self) {
        self.fds.clear();
    }

    /// Adds `fd`, waited for `events`; returns its index for
    /// [`ready`](PollSet::ready).
    fn add(&mut self, fd: RawFd, events: libc::c_short) -> usize {
        self.fds.push(libc::pollfd { fd, events, revents: 0 });
        self.fds.len() - 1
    }

    /// Whether the fd at `i` is ready (or hung up, or failed: the next
    /// read or write says which).
    fn ready(&self, i: usize) -> bool {
        self.fds[i].revents != 0
    }

    /// Waits until an fd is ready or `until` has come (for ever when
    /// `None`). A signal that interrupts the wait counts as a wake-up.
    fn wait(&mut self, until: Option<Instant>) {
        let timeout = until.map(|u| {
            let left = u.saturating_duration_since(Instant::now());
            libc::timespec { tv_sec: left.as_secs() as libc::time_t, tv_nsec: left.subsec_nanos() as libc::c_long }
        });
        let timeout_ptr = timeout.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: valid pollfds and timespec; no signal mask change. Its
        // errors (EINTR aside) cannot happen with these arguments, and with
        // every revents 0 the caller only looks at its clock again.
        unsafe { libc::ppoll(self.fds.as_mut_ptr(), self.fds.len() as libc::nfds_t, timeout_ptr, std::ptr::null()) };
    }
}

/// Tells when the child has exited, leaving it unreaped (a zombie still
/// holds its pid, so its process group id cannot be reused): a pidfd, or
/// where the kernel has none (before Linux 5.3), a thread blocked in
/// `waitid(WNOWAIT)` that sets a latch when it returns.
enum ExitWatch {
    Pidfd(OwnedFd),
    /// `fd` is `latch`'s, open as long as it.
    Thread {
        latch: Arc<Latch>,
        fd: RawFd,
        thread: thread::JoinHandle<()>,
    },
}

impl ExitWatch {
    fn new(pid: u32) -> io::Result<ExitWatch> {
        match pidfd_open(pid as i32) {
            Ok(fd) => Ok(ExitWatch::Pidfd(fd)),
            Err(_) => ExitWatch::with_thread(pid),
        }
    }

    fn with_thread(pid: u32) -> io::Result<ExitWatch> {
        let latch = Arc::new(Latch::default());
        let fd = latch.fd()?.as_raw_fd();
        let exited = latch.clone();
        let thread = thread::Builder::new().name("cassist-wait".into()).spawn(move || {
            let _ = wait_exited_unreaped(pid);
            exited.set();
        })?;
        Ok(ExitWatch::Thread { latch, fd, thread })
    }

    /// Readable once the child has exited.
    fn fd(&self) -> RawFd {
        match self {
            ExitWatch::Pidfd(fd) => fd.as_raw_fd(),
            // Open as long as `latch`.
            ExitWatch::Thread { fd, .. } => *fd,
        }
    }

    fn finish(self) {
        if let ExitWatch::Thread { latch, thread, .. } = self {
            let _ = thread.join();
            // Only now may its fd close.
            drop(latch);
        }
    }
}

/// A pidfd for `pid` (readable once the process has exited).
fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: a plain syscall; on success the fd is ours.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Kills the group if `run` leaves early (a failed spawn of a thread, a
/// panic); lists the group for [`kill_all_groups`] while it runs.
struct GroupGuard {
    pgid: i32,
    armed: bool,
}

impl GroupGuard {
    fn register(pgid: i32) -> GroupGuard {
        register_group(pgid);
        GroupGuard { pgid, armed: true }
    }

    /// The child is reaped: its group id may be reused from now on, so it
    /// must not be signalled any more.
    fn disarm(&mut self) {
        if self.armed {
            self.armed = false;
            unregister_group(self.pgid);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            signal_group(self.pgid, Signal::SIGKILL);
            unregister_group(self.pgid);
        }
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

/// SIGKILL takes effect asynchronously: waits until the killed members of
/// group `pgid` have let go of their files and folders (a zombie has), so
/// the caller may remove the workspace at once; at most [`VANISH_LIMIT`].
/// Zombies are left to their new parent (init reaps orphans in its own
/// time). Each member is watched through a pidfd; only where the kernel has
/// no pidfds is `/proc` looked at again every 5 ms (the one tick left, and
/// bounded by [`VANISH_LIMIT`]: the kernel gives no other event for the
/// death of a process that is not our child).
fn wait_until_members_gone(pgid: i32) {
    if !group_exists(pgid) {
        return;
    }
    let end = Instant::now() + VANISH_LIMIT;
    let mut watched = Vec::new();
    for pid in live_group_members(pgid) {
        match pidfd_open(pid) {
            Ok(fd) => watched.push(fd),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(_) => {
                while !live_group_members(pgid).is_empty() && Instant::now() < end {
                    thread::sleep(Duration::from_millis(5));
                }
                return;
            }
        }
    }
    let mut set = PollSet::default();
    while !watched.is_empty() && Instant::now() < end {
        set.clear();
        for fd in &watched {
            set.add(fd.as_raw_fd(), libc::POLLIN);
        }
        set.wait(Some(end));
        let mut i = 0;
        watched.retain(|_| {
            i += 1;
            !set.ready(i - 1)
        });
    }
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

/// The bytes for the child's stdin, written as the pipe takes them; the
/// pipe is closed when they are all written (or the feed dropped).
struct Feed<'a> {
    writer: io::PipeWriter,
    bytes: &'a [u8],
    written: usize,
}

impl Feed<'_> {
    /// Writes what the pipe takes now; `false` once done: all written, or
    /// the child closed its end (EPIPE, ignored: it wants no more).
    fn write(&mut self) -> bool {
        match (&self.writer).write(&self.bytes[self.written..]) {
            Ok(n) => {
                self.written += n;
                self.written < self.bytes.len()
            }
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => true,
            Err(_) => false,
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

/// The child's output, read as it comes: streamed redacted to the
/// transcript, its tail kept, scanned for a killed process.
struct Output {
    reader: io::PipeReader,
    out: RedactingWriter<Sink>,
    scan: KillScan,
    total: u64,
    buf: Vec<u8>,
    /// EOF (or a read error): nothing more will come.
    done: bool,
}

impl Output {
    fn new(reader: io::PipeReader, transcript: Option<CappedFile>, redactor: &Redactor, tail_limit: usize) -> Output {
        Output {
            reader,
            out: RedactingWriter::new(Sink::new(transcript, tail_limit), redactor),
            scan: KillScan::default(),
            total: 0,
            buf: vec![0u8; CHUNK],
            done: false,
        }
    }

    fn fd(&self) -> RawFd {
        self.reader.as_raw_fd()
    }

    /// Reads what the pipe holds now (one chunk at most).
    fn read(&mut self) {
        match (&self.reader).read(&mut self.buf) {
            Ok(0) => self.done = true,
            Ok(n) => {
                self.total += n as u64;
                self.scan.feed(&self.buf[..n]);
                // The sink never fails.
                let _ = self.out.write_all(&self.buf[..n]);
            }
            Err(e) if matches!(e.kind(), io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock) => {}
            Err(_) => self.done = true,
        }
    }

    fn finish(mut self) -> Captured {
        let _ = self.out.finish();
        let mut sink = self.out.into_inner();
        if let Some(file) = &mut sink.transcript
            && let Err(e) = file.finish()
        {
            sink.transcript_error = Some(e);
        }
        Captured {
            output_bytes: self.total,
            tail: sink.tail_text(),
            killed_hint: self.scan.found,
            transcript_error: sink.transcript_error,
        }
    }
}

/// Where redacted output goes: the transcript file and the tail. Never
/// fails: a transcript write error is kept and the transcript dropped.
struct Sink {
    transcript: Option<CappedFile>,
    transcript_error: Option<io::Error>,
    tail: VecDeque<u8>,
    tail_limit: usize,
}

impl Sink {
    fn new(transcript: Option<CappedFile>, tail_limit: usize) -> Sink {
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

/// A transcript that keeps the first half and the last half of `limit`
/// bytes of one run's output, with a marker line where the middle was
/// cut. Memory and disk stay bounded: past the limit, the last half is a
/// ring inside the file itself, put in order when the run ends.
struct CappedFile {
    file: File,
    /// The folder of the file (for the temp file that puts the ring in
    /// order).
    dir: PathBuf,
    /// Where this run's output starts (the file may hold earlier runs').
    base: u64,
    head: u64,
    ring: u64,
    /// Bytes of output so far.
    written: u64,
}

impl CappedFile {
    fn open(path: &Path, limit: u64) -> io::Result<CappedFile> {
        let file = OpenOptions::new().create(true).read(true).write(true).truncate(false).open(path)?;
        let base = file.metadata()?.len();
        let limit = limit.max(2);
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf();
        Ok(CappedFile { file, dir, base, head: limit / 2, ring: limit - limit / 2, written: 0 })
    }

    fn write_all(&mut self, mut buf: &[u8]) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        while !buf.is_empty() {
            let i = self.written;
            // Up to the end of the head, or of the ring.
            let (at, room) = if i < self.head {
                (i, self.head - i)
            } else {
                let pos = (i - self.head) % self.ring;
                (self.head + pos, self.ring - pos)
            };
            let n = (buf.len() as u64).min(room) as usize;
            self.file.write_all_at(&buf[..n], self.base + at)?;
            self.written += n as u64;
            buf = &buf[n..];
        }
        Ok(())
    }

    /// Once the run ended: when output was cut, the marker, then the last
    /// half in order.
    fn finish(&mut self) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        let limit = self.head + self.ring;
        if self.written <= limit {
            return Ok(());
        }
        let cut = self.written - limit;
        // The ring position of the oldest byte kept.
        let oldest = (self.written - self.head) % self.ring;
        let ring_at = self.base + self.head;
        let mut ordered = tempfile::tempfile_in(&self.dir)?;
        copy_range(&self.file, ring_at + oldest, self.ring - oldest, &mut ordered)?;
        copy_range(&self.file, ring_at, oldest, &mut ordered)?;
        let marker = format!("\n[cassist: {cut} bytes cut]\n");
        self.file.set_len(ring_at)?;
        self.file.write_all_at(marker.as_bytes(), ring_at)?;
        copy_range(&ordered, 0, self.ring, &mut WriteAt { file: &self.file, at: ring_at + marker.len() as u64 })
    }
}

/// `len` bytes of `from` at `at`, written to `to`, 64 KiB at a time.
fn copy_range(from: &File, mut at: u64, len: u64, to: &mut impl Write) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; CHUNK.min(len as usize).max(1)];
    let end = at + len;
    while at < end {
        let want = ((end - at) as usize).min(buf.len());
        let n = from.read_at(&mut buf[..want], at)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        to.write_all(&buf[..n])?;
        at += n as u64;
    }
    Ok(())
}

/// Writes to a file from an offset on.
struct WriteAt<'f> {
    file: &'f File,
    at: u64,
}

impl Write for WriteAt<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let n = self.file.write_at(buf, self.at)?;
        self.at += n as u64;
        Ok(n)
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
        return absolute(cmd, full);
    }
    let search: &OsStr =
        cmd.env.iter().rev().find(|(k, _)| k == "PATH").map_or(OsStr::new(DEFAULT_PATH), |(_, v)| v.as_os_str());
    let found = find_in_path(prog, search, &cmd.cwd).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("program `{}` not found in PATH ({})", prog.to_string_lossy(), search.to_string_lossy()),
        )
    })?;
    absolute(cmd, found)
}

/// `program` as a path that does not depend on the current folder: the
/// child changes folder before its exec, so a relative path (only with a
/// relative `cwd`) would be taken from `cwd` a second time.
fn absolute(cmd: &Command, program: PathBuf) -> io::Result<PathBuf> {
    if program.is_absolute() {
        return Ok(program);
    }
    program.canonicalize().map_err(|e| spawn_error(cmd, &program, e))
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
        let (tx, rx) = std::sync::mpsc::channel();
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
    fn inheriting_takes_our_environment_and_folder() {
        let c = Command::inheriting(["sh", "-c", "pwd; echo \"PATH=$PATH\""]);
        assert!(!c.die_with_cassist);
        let f = go(&c);
        let here = std::env::current_dir().unwrap();
        let path = std::env::var("PATH").unwrap();
        assert_eq!(f.tail, format!("{}\nPATH={path}\n", here.display()));
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
    fn relative_program_in_a_relative_cwd_is_found_once() {
        // A folder below the current one (the tests run in the crate's
        // folder), named by a path relative to it: one that goes down only,
        // so a second join with `cwd` names no file.
        let dir = tempfile::Builder::new().prefix(".process-test-").tempdir_in(".").unwrap();
        let rel = Path::new(dir.path().file_name().unwrap());
        std::fs::write(dir.path().join("agent.sh"), "#!/bin/sh\necho ran\n").unwrap();
        std::fs::set_permissions(dir.path().join("agent.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut c = Command::new(["./agent.sh"], rel);
        c.env = base_env();
        assert_eq!(go(&c).tail, "ran\n");
        let mut c = Command::new(["agent.sh"], rel);
        c.env = vec![("PATH".into(), ".".into())];
        assert_eq!(go(&c).tail, "ran\n");
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
        assert_eq!(f.timeout, Some(ms(200)));
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
        assert!(t.elapsed() >= ms(150) && t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
        assert_tree_gone(&f, &pids);
    }

    /// Whether `fd` is readable now (without waiting).
    fn readable(fd: RawFd) -> bool {
        let mut set = PollSet::default();
        set.add(fd, libc::POLLIN);
        set.wait(Some(Instant::now()));
        set.ready(0)
    }

    #[test]
    fn cancel_makes_the_fd_readable_whether_it_was_made_before_or_after() {
        let early = Cancel::new();
        let fd = early.0.fd().unwrap().as_raw_fd();
        assert!(!readable(fd));
        early.clone().cancel();
        assert!(early.is_cancelled() && readable(fd));
        early.cancel(); // twice is fine
        assert!(readable(fd));

        let late = Cancel::new();
        late.cancel();
        assert!(readable(late.0.fd().unwrap().as_raw_fd()));
    }

    #[test]
    fn cancelled_before_the_run_stops_the_child_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let pids = dir.path().join("pids");
        let mut c = sh(dir.path(), "echo $$ >> pids; sleep 100 & echo $! >> pids; wait");
        c.timeout = Some(Duration::from_secs(60));
        let cancel = Cancel::new();
        cancel.cancel();
        let f = go_bounded(&c, &cancel, Duration::from_secs(10), &pids);
        assert_eq!(f.outcome, Outcome::Cancelled);
    }

    #[test]
    fn cancel_from_a_signal_handler_wakes_a_run_on_another_thread() {
        // The Ctrl-C path: the handler runs on whichever thread the signal
        // lands on (here the canceller's), and the run wakes through the
        // token's eventfd alone.
        let dir = tempfile::tempdir().unwrap();
        let started = dir.path().join("started");
        let c = sh(dir.path(), "echo $$ > started; exec sleep 100");
        let cancel = Cancel::new();
        let in_handler = cancel.clone();
        // SAFETY: Cancel::cancel is async-signal-safe.
        unsafe { signal_hook::low_level::register(libc::SIGUSR1, move || in_handler.cancel()) }.unwrap();
        let canceller = thread::spawn(move || {
            while !started.exists() {
                thread::sleep(ms(10));
            }
            signal_hook::low_level::raise(libc::SIGUSR1).unwrap();
        });
        let f = go_bounded(&c, &cancel, Duration::from_secs(10), &dir.path().join("started"));
        canceller.join().unwrap();
        assert_eq!(f.outcome, Outcome::Cancelled);
    }

    #[test]
    fn cancelled_future_completes_once_cancelled() {
        let cancel = Cancel::new();
        let remote = cancel.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
            rt.block_on(async {
                // Two waiters on one token.
                tokio::join!(remote.cancelled(), remote.cancelled());
            });
            let _ = tx.send(remote.is_cancelled());
        });
        assert!(rx.recv_timeout(ms(100)).is_err(), "completed before the cancel");
        cancel.cancel();
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(true));
        waiter.join().unwrap();
    }

    #[test]
    fn exit_is_seen_without_a_pidfd_too() {
        let mut child =
            std::process::Command::new("sh").args(["-c", "read x; exit 7"]).stdin(Stdio::piped()).spawn().unwrap();
        let watch = ExitWatch::with_thread(child.id()).unwrap();
        assert!(!readable(watch.fd()));
        drop(child.stdin.take());
        let mut set = PollSet::default();
        set.add(watch.fd(), libc::POLLIN);
        set.wait(Some(Instant::now() + Duration::from_secs(10)));
        assert!(set.ready(0));
        watch.finish();
        // Not reaped by the watch.
        assert_eq!(child.wait().unwrap().code(), Some(7));
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
    fn transcripts_keep_the_first_and_the_last_half_of_their_limit() {
        let dir = tempfile::tempdir().unwrap();
        let transcript = dir.path().join("t.log");
        std::fs::write(&transcript, "earlier run\n").unwrap();
        // 20000 numbered lines, 208894 bytes; 1000 are kept.
        let script = "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); echo \"line $i\"; done";
        let mut c = sh(dir.path(), script);
        c.transcript = Some(transcript.clone());
        c.transcript_limit = 1000;
        let f = go(&c);
        let full: String = (1..=20000).map(|i| format!("line {i}\n")).collect();
        assert_eq!(f.output_bytes, full.len() as u64);
        let kept = std::fs::read_to_string(&transcript).unwrap();
        let cut = full.len() - 1000;
        let expected =
            format!("earlier run\n{}\n[cassist: {cut} bytes cut]\n{}", &full[..500], &full[full.len() - 500..]);
        assert_eq!(kept, expected);
        assert!(kept.ends_with("line 20000\n"), "the end of the output, where a CLI's final JSON is, is kept");
        assert!(f.tail.ends_with("line 20000\n") && f.transcript_error.is_none());

        // Within the limit, the transcript is the whole output, as it came.
        let mut c = sh(dir.path(), script);
        c.transcript = Some(dir.path().join("whole.log"));
        c.transcript_limit = full.len() as u64;
        go(&c);
        assert_eq!(std::fs::read_to_string(dir.path().join("whole.log")).unwrap(), full);

        // Past it by one byte, and wrapped several times over an odd ring.
        for limit in [full.len() as u64 - 1, 333] {
            let mut c = sh(dir.path(), script);
            let log = dir.path().join(format!("t-{limit}.log"));
            c.transcript = Some(log.clone());
            c.transcript_limit = limit;
            go(&c);
            let (head, ring) = ((limit / 2) as usize, (limit - limit / 2) as usize);
            let cut = full.len() - limit as usize;
            let expected = format!("{}\n[cassist: {cut} bytes cut]\n{}", &full[..head], &full[full.len() - ring..]);
            assert_eq!(std::fs::read_to_string(&log).unwrap(), expected, "limit {limit}");
        }
    }

    #[test]
    fn documents_are_redacted_in_their_bytes_and_their_decoded_strings() {
        let r = Redactor::new(vec![b"s3cret-value".to_vec()]);
        // Written with a JSON escape, the secret is found as the string decodes.
        let doc = br#"{"success": true, "summary": "the key is s3cret-value", "n": [1, "s3cret-value"]}"#;
        let out = String::from_utf8(r.redact_document(doc)).unwrap();
        assert!(!out.contains("s3cret-value") && !out.contains("s3cr\\u0065t"), "{out}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["summary"], "the key is [REDACTED]");
        assert_eq!(v["n"][1], "[REDACTED]");
        assert_eq!(v["success"], true);
        // Not JSON: its bytes.
        assert_eq!(r.redact_document(b"plain s3cret-value\n"), b"plain [REDACTED]\n");
        // Nothing to redact: as it was.
        assert_eq!(r.redact_document(br#"{"a": 1}"#), br#"{"a": 1}"#);
        assert_eq!(Redactor::default().redact_document(b"s3cret-value"), b"s3cret-value");
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
    // Its figures go to the test harness's output.
    #[allow(clippy::disallowed_macros)]
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
        // The transcript is capped: the first and last 32 MiB, a marker.
        let marker = format!("\n[cassist: {} bytes cut]\n", 1_000_000_000 - (64u64 << 20));
        assert_eq!(written, (64 << 20) + marker.len() as u64);
        assert!(after - before < 20 * 1024, "peak RSS grew by {} KiB", after - before);
    }
}
