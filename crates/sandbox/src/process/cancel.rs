//! The cancel token: [`Cancel`], a one-shot event that a `poll` can wait
//! for together with a child's exit and pipes, and that a signal handler
//! may set.

use std::io;
use std::os::fd::{BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use nix::sys::eventfd::{EfdFlags, EventFd};

#[cfg(doc)]
use super::{Outcome, run};

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
pub struct Cancel(pub(super) Arc<Latch>);

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
pub(super) struct Latch {
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
    pub(super) fn set(&self) {
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

    pub(super) fn is_set(&self) -> bool {
        self.set.load(Ordering::SeqCst)
    }

    /// The fd that is readable once the latch is set; open as long as the
    /// latch.
    pub(super) fn fd(&self) -> io::Result<BorrowedFd<'_>> {
        let mut fd = self.fd.load(Ordering::SeqCst);
        if fd < 0 {
            let made = EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)?;
            let made = OwnedFd::from(made).into_raw_fd();
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
                    drop(unsafe { OwnedFd::from_raw_fd(made) });
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
            drop(unsafe { OwnedFd::from_raw_fd(fd) });
        }
    }
}

/// Makes an eventfd readable. Async-signal-safe.
fn wake_eventfd(fd: RawFd) {
    // SAFETY: the callers' fd is open (a latch's, closed only when the
    // latch is dropped). write(2) is async-signal-safe, and nix's wrapper
    // adds only the errno check.
    let _ = nix::unistd::write(unsafe { BorrowedFd::borrow_raw(fd) }, &1u64.to_ne_bytes());
}

#[cfg(test)]
mod tests {
    use std::thread;
    use std::time::Duration;

    use super::*;
    use crate::process::test_support::*;

    #[test]
    fn cancel_makes_the_fd_readable_whether_it_was_made_before_or_after() {
        let early = Cancel::new();
        let fd = early.0.fd().unwrap();
        assert!(!readable(fd));
        early.clone().cancel();
        assert!(early.is_cancelled() && readable(fd));
        early.cancel(); // twice is fine
        assert!(readable(fd));

        let late = Cancel::new();
        late.cancel();
        assert!(readable(late.0.fd().unwrap()));
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
}
