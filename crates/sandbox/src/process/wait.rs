//! Waiting on fds: [`PollSet`], the one `ppoll` of a run, and [`ExitWatch`],
//! the child's exit as an fd that leaves it unreaped.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::thread;
use std::time::Instant;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, ppoll};
use nix::sys::time::TimeSpec;
use nix::sys::wait::{Id, WaitPidFlag, waitid};
use nix::unistd::Pid;

use super::cancel::Latch;
#[cfg(doc)]
use super::run;

/// The fds one wait of [`run`] is for, borrowed while it waits: a set is
/// made for each wait, then dropped before what is ready is read.
#[derive(Default)]
pub(super) struct PollSet<'fd> {
    fds: Vec<PollFd<'fd>>,
}

impl<'fd> PollSet<'fd> {
    /// Adds `fd`, waited for `events`; returns its index for
    /// [`ready`](PollSet::ready).
    pub(super) fn add(&mut self, fd: BorrowedFd<'fd>, events: PollFlags) -> usize {
        self.fds.push(PollFd::new(fd, events));
        self.fds.len() - 1
    }

    /// Whether the fd at `i` is ready (or hung up, or failed: the next
    /// read or write says which). Flags unknown to `nix` count as ready.
    pub(super) fn ready(&self, i: usize) -> bool {
        self.fds[i].revents().is_none_or(|r| !r.is_empty())
    }

    /// Waits until an fd is ready or `until` has come (for ever when
    /// `None`). A signal that interrupts the wait counts as a wake-up.
    pub(super) fn wait(&mut self, until: Option<Instant>) {
        let timeout = until.map(|u| TimeSpec::from(u.saturating_duration_since(Instant::now())));
        // Its errors (EINTR aside) cannot happen with these arguments, and
        // with every revents 0 the caller only looks at its clock again.
        let _ = ppoll(&mut self.fds, timeout, None);
    }
}

/// Tells when the child has exited, leaving it unreaped (a zombie still
/// holds its pid, so its process group id cannot be reused): a pidfd, or
/// where the kernel has none (before Linux 5.3), a thread blocked in
/// `waitid(WNOWAIT)` that sets a latch when it returns.
pub(super) enum ExitWatch {
    Pidfd(OwnedFd),
    /// `fd` is `latch`'s, open as long as it.
    Thread {
        latch: Arc<Latch>,
        fd: RawFd,
        thread: thread::JoinHandle<()>,
    },
}

impl ExitWatch {
    pub(super) fn new(pid: u32) -> io::Result<ExitWatch> {
        match pidfd_open(pid as i32) {
            Ok(fd) => Ok(ExitWatch::Pidfd(fd)),
            Err(_) => ExitWatch::with_thread(pid),
        }
    }

    pub(super) fn with_thread(pid: u32) -> io::Result<ExitWatch> {
        let latch = Arc::new(Latch::default());
        let fd = std::os::fd::AsRawFd::as_raw_fd(&latch.fd()?);
        let exited = latch.clone();
        let thread = thread::Builder::new().name("cassist-wait".into()).spawn(move || {
            let _ = wait_exited_unreaped(pid);
            exited.set();
        })?;
        Ok(ExitWatch::Thread { latch, fd, thread })
    }

    /// Readable once the child has exited.
    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        match self {
            ExitWatch::Pidfd(fd) => fd.as_fd(),
            // SAFETY: the latch's fd, open as long as `latch`, which lives
            // as long as `self`.
            ExitWatch::Thread { fd, .. } => unsafe { BorrowedFd::borrow_raw(*fd) },
        }
    }

    pub(super) fn finish(self) {
        if let ExitWatch::Thread { latch, thread, .. } = self {
            let _ = thread.join();
            // Only now may its fd close.
            drop(latch);
        }
    }
}

/// A pidfd for `pid` (readable once the process has exited). A raw
/// system call: `nix` has no wrapper for `pidfd_open`.
pub(super) fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: a plain syscall; on success the fd is ours.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Blocks until `pid` has exited, leaving it a zombie (not reaped).
fn wait_exited_unreaped(pid: u32) -> nix::Result<()> {
    loop {
        match waitid(Id::Pid(Pid::from_raw(pid as i32)), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) {
            Err(Errno::EINTR) => continue,
            done => return done.map(drop),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::process::test_support::*;

    #[test]
    fn exit_is_seen_without_a_pidfd_too() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "read x; exit 7"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let watch = ExitWatch::with_thread(child.id()).unwrap();
        assert!(!readable(watch.fd()));
        drop(child.stdin.take());
        let mut set = PollSet::default();
        set.add(watch.fd(), PollFlags::POLLIN);
        set.wait(Some(Instant::now() + Duration::from_secs(10)));
        assert!(set.ready(0));
        watch.finish();
        // Not reaped by the watch.
        assert_eq!(child.wait().unwrap().code(), Some(7));
    }
}
