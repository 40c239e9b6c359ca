//! [`run`]: the spawn, and the one `poll` loop that watches the child to
//! its end.

use std::ffi::OsString;
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::time::{Duration, Instant};

use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::poll::PollFlags;
use nix::sys::signal::Signal;

use super::capture::Output;
use super::group::{GroupGuard, signal_group, wait_until_members_gone};
use super::program::{resolve_program, spawn_error};
use super::transcript::CappedFile;
use super::wait::{ExitWatch, PollSet};
use super::{Cancel, Command, DRAIN_LIMIT, Finished, Outcome, Redactor, RunError};

/// Runs `cmd` to completion and returns how it ended.
///
/// The child runs in its own process group; on timeout or [`Cancel`] the
/// group gets `SIGTERM`, then `SIGKILL` after [`Command::grace`]. When the
/// child exits, what is left of its group is killed: no process of the group
/// survives `run`. Errors are spawn failures (a missing program is
/// [`io::ErrorKind::NotFound`] naming it, see [`RunError::kind`]), an
/// unusable `cwd` or transcript; once the child has started, `run` returns
/// `Ok`.
///
/// One `poll` on the calling thread waits for everything at once: the
/// child's exit (its pidfd), the cancel token, the output pipe, the stdin
/// pipe and the next deadline (timeout, end of the grace, end of the
/// drain). No thread is started, nothing is looked at on a tick.
pub fn run(cmd: &Command, redactor: &Redactor, cancel: &Cancel) -> Result<Finished, RunError> {
    let started = Instant::now();
    let program = resolve_program(cmd)?;
    if !cmd.cwd.is_dir() {
        return Err(RunError::NoWorkingFolder { program: cmd.program(), cwd: cmd.cwd.clone() });
    }
    let transcript = match &cmd.transcript {
        Some(path) => Some(
            CappedFile::open(path, cmd.transcript_limit)
                .map_err(|error| RunError::Transcript { path: path.clone(), error })?,
        ),
        None => None,
    };
    let cancel_fd = cancel.0.fd()?;
    let (child, out_reader, stdin_writer) = spawn(cmd, &program)?;
    // The one process of the expression.
    let pid = child.pids()[0];
    let pgid = pid as i32;
    let mut guard = GroupGuard::register(pgid);
    let exit = match ExitWatch::new(pid) {
        Ok(w) => w,
        Err(e) => {
            signal_group(pgid, Signal::SIGKILL);
            let _ = child.wait();
            guard.disarm();
            return Err(e.into());
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
///
/// duct builds the command (program, environment, folder, stdio); the
/// hook it runs on the `std::process::Command` before the spawn adds what
/// duct has no word for: `argv[0]` as given, the process group and, for a
/// command that dies with cassist, the parent-death signal. The arguments
/// are added there too: duct formats the arguments it is given into a
/// string for its messages at every start, which costs about 15 µs a
/// kilobyte, and an agent's prompt may be an argument of many kilobytes.
/// Only the parent-death signal is a hook between `fork` and `exec`: without
/// it (a command started through the sandbox wrapper, which sees to dying
/// with cassist itself, or [`Command::inheriting`]) nothing stands in the
/// way of `posix_spawn`, which starts the child without copying cassist's
/// address space. duct adds no hook of its own, and the program is an
/// absolute path already, so it is not looked up again.
fn spawn(cmd: &Command, program: &Path) -> Result<(duct::Handle, io::PipeReader, Option<io::PipeWriter>), RunError> {
    // Our ends of the pipes are close-on-exec and non-blocking (the child's
    // ends are separate open files, blocking as usual); the child gets its
    // ends as fds 0, 1 and 2 only.
    let (out_reader, out_writer) = io::pipe()?;
    set_nonblocking(out_reader.as_fd())?;
    let mut expression = duct::cmd(program, std::iter::empty::<OsString>())
        .dir(&cmd.cwd)
        .full_env(cmd.env.iter().map(|(k, v)| (k, v)))
        // stdout and stderr: one pipe, so their lines interleave as printed.
        .stdout_file(out_writer.try_clone()?)
        .stderr_file(out_writer)
        // The exit status is cassist's to read, never an error.
        .unchecked();
    let stdin_writer = match &cmd.stdin {
        Some(_) => {
            let (r, w) = io::pipe()?;
            set_nonblocking(w.as_fd())?;
            expression = expression.stdin_file(r);
            Some(w)
        }
        None => {
            expression = expression.stdin_null();
            None
        }
    };
    let (argv0, args) = (cmd.argv[0].clone(), cmd.argv[1..].to_vec());
    let die_with_cassist = cmd.die_with_cassist;
    expression = expression.before_spawn(move |spawn| {
        spawn.arg0(&argv0).args(&args).process_group(0);
        if die_with_cassist {
            // If cassist itself dies (SIGKILL), the command dies with it.
            // SAFETY: prctl is async-signal-safe (nix's wrapper only adds
            // the errno check); nothing else runs in the hook.
            unsafe {
                spawn.pre_exec(|| {
                    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
                    Ok(())
                });
            }
        }
        Ok(())
    });
    let child = expression.start().map_err(|e| spawn_error(cmd, program, e));
    // The expression holds our copies of the child's pipe ends: close them,
    // or we would never see EOF on the output.
    drop(expression);
    Ok((child?, out_reader, stdin_writer))
}

/// A started child and everything [`Watched::wait`] selects on.
struct Watched<'a> {
    child: duct::Handle,
    pgid: i32,
    guard: GroupGuard,
    exit: ExitWatch,
    output: Output,
    feed: Option<Feed<'a>>,
    cancel: &'a Cancel,
    cancel_fd: BorrowedFd<'a>,
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

            let (exited, out_ready, in_ready) = {
                let mut set = PollSet::default();
                let exit_at = set.add(self.exit.fd(), PollFlags::POLLIN);
                if stopped_by.is_none() {
                    // Ready once cancelled; looked at above.
                    set.add(self.cancel_fd, PollFlags::POLLIN);
                }
                let out_at = (!self.output.done).then(|| set.add(self.output.fd(), PollFlags::POLLIN));
                let in_at = self.feed.as_ref().map(|f| set.add(f.writer.as_fd(), PollFlags::POLLOUT));
                set.wait(if stopped_by.is_none() { deadline } else { kill_at });
                (set.ready(exit_at), out_at.is_some_and(|i| set.ready(i)), in_at.is_some_and(|i| set.ready(i)))
            };
            if exited {
                break;
            }
            if out_ready {
                self.output.read();
            }
            if in_ready && self.feed.as_mut().is_some_and(|f| !f.write()) {
                self.feed = None;
            }
        }
        // The child has exited but is not reaped yet, so its pid still names
        // this group: kill what it left behind, then reap it.
        signal_group(self.pgid, Signal::SIGKILL);
        let status = self.child.wait().map(|output| output.status);
        self.guard.disarm();
        // An escaped process may hold stdin without reading it.
        self.feed = None;
        // Output still held open after the drain can only be an escaped
        // process's.
        let drain_until = Instant::now() + DRAIN_LIMIT;
        while !self.output.done && Instant::now() < drain_until {
            let mut set = PollSet::default();
            set.add(self.output.fd(), PollFlags::POLLIN);
            set.wait(Some(drain_until));
            if set.ready(0) {
                drop(set);
                self.output.read();
            }
        }
        (status, stopped_by)
    }
}

fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    let flags = OFlag::from_bits_retain(fcntl(fd, FcntlArg::F_GETFL)?);
    fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
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

#[cfg(test)]
mod tests;
