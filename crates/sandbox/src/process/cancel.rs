//! The cancel token: [`Cancel`], a one-shot event that a `poll` can wait
//! for together with a child's exit and pipes, and that a signal handler
//! may set.

use std::io;
use std::os::fd::{BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::thread;

use nix::poll::PollFlags;
use nix::sys::eventfd::{EfdFlags, EventFd};

use super::wait::PollSet;

#[cfg(doc)]
use super::{Outcome, run};

/// Stops running processes (Ctrl-C). Cheap to clone; all clones share one
/// token. A run that sees it cancelled stops its child the way a timeout
/// does and reports [`Outcome::Cancelled`].
///
/// Cancelling *notifies*: [`run`] waits in one `poll` on the child's exit,
/// its output and this token's eventfd, and [`cancelled`](Cancel::cancelled)
/// wakes an async waiter; nothing looks at a flag on a tick. An eventfd
/// (rather than a Condvar or an async notification) because it can be
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

    /// Completes once the token is cancelled, on any executor. The wait is
    /// a thread of its own, blocked in one `poll` on the token's eventfd
    /// (so a cancel from a signal handler wakes it too), that wakes the
    /// task; dropping the future ends that thread. Should an fd or the
    /// thread not be made (none left), it never completes: the caller then
    /// sees the cancel at its next look at
    /// [`is_cancelled`](Cancel::is_cancelled).
    pub async fn cancelled(&self) {
        if self.is_cancelled() {
            return;
        }
        WakeOnCancel { cancel: self.clone(), waiter: None }.await
    }
}

/// The future of [`Cancel::cancelled`].
struct WakeOnCancel {
    cancel: Cancel,
    /// Started at the first poll; `Err` if it could not be.
    waiter: Option<Result<Waiter, ()>>,
}

/// A thread that wakes the task waiting on a token once it is cancelled.
struct Waiter {
    /// The task to wake, the latest one that polled.
    waker: Arc<Mutex<Waker>>,
    /// Set when the future is dropped: the thread then ends.
    stop: Arc<Latch>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Waiter {
    fn start(cancel: &Cancel, waker: &Waker) -> io::Result<Waiter> {
        let stop = Arc::new(Latch::default());
        // Both fds made here, so the thread's own asking cannot fail.
        cancel.0.fd()?;
        stop.fd()?;
        let waker = Arc::new(Mutex::new(waker.clone()));
        let (token, stopped, to_wake) = (cancel.0.clone(), stop.clone(), waker.clone());
        let thread = thread::Builder::new().name("cassist-cancel".into()).spawn(move || {
            let (Ok(token_fd), Ok(stop_fd)) = (token.fd(), stopped.fd()) else { return };
            while !token.is_set() && !stopped.is_set() {
                let mut set = PollSet::default();
                set.add(token_fd, PollFlags::POLLIN);
                set.add(stop_fd, PollFlags::POLLIN);
                set.wait(None);
            }
            if token.is_set() {
                to_wake.lock().unwrap_or_else(PoisonError::into_inner).wake_by_ref();
            }
        })?;
        Ok(Waiter { waker, stop, thread: Some(thread) })
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.stop.set();
        if let Some(thread) = self.thread.take() {
            // It wakes at once: its poll is on the stop latch too.
            let _ = thread.join();
        }
    }
}

impl Future for WakeOnCancel {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.cancel.is_cancelled() {
            return Poll::Ready(());
        }
        match &self.waiter {
            None => {
                let waiter = Waiter::start(&self.cancel, cx.waker()).map_err(drop);
                self.waiter = Some(waiter);
            }
            Some(Ok(waiter)) => waiter.waker.lock().unwrap_or_else(PoisonError::into_inner).clone_from(cx.waker()),
            Some(Err(())) => {}
        }
        // A cancel that came while the waker was set: the thread may have
        // woken the one before.
        if self.cancel.is_cancelled() { Poll::Ready(()) } else { Poll::Pending }
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

    /// Runs `waiting` (given a clone of `cancel`) on a runtime of its own
    /// thread; what it returns comes through the receiver, with the thread.
    fn on_a_runtime<T: Send + 'static, F: Future<Output = T>>(
        cancel: &Cancel,
        waiting: impl FnOnce(Cancel) -> F + Send + 'static,
    ) -> (std::sync::mpsc::Receiver<T>, thread::JoinHandle<()>) {
        let remote = cancel.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let runner = thread::spawn(move || {
            // With a timer, but no I/O driver: the future needs none.
            let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
            let _ = tx.send(rt.block_on(waiting(remote)));
        });
        (rx, runner)
    }

    #[test]
    fn cancelled_future_completes_once_cancelled() {
        let cancel = Cancel::new();
        let (rx, runner) = on_a_runtime(&cancel, |remote| async move {
            // Two waiters on one token.
            tokio::join!(remote.cancelled(), remote.cancelled());
            remote.is_cancelled()
        });
        assert!(rx.recv_timeout(ms(100)).is_err(), "completed before the cancel");
        cancel.cancel();
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(true));
        runner.join().unwrap();
    }

    /// Dropped before the cancel, the future ends its thread (its drop
    /// waits for it): a scheduler that waits for a cancel once per run
    /// leaves no thread behind.
    #[test]
    fn a_dropped_cancelled_future_ends_its_thread() {
        let cancel = Cancel::new();
        let (rx, runner) = on_a_runtime(&cancel, |remote| async move {
            tokio::time::timeout(Duration::from_millis(50), remote.cancelled()).await.is_err()
        });
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(true), "not done within 10 s");
        runner.join().unwrap();
        // The waiting thread held the token too: it is gone.
        assert_eq!(Arc::strong_count(&cancel.0), 1);
        assert!(!cancel.is_cancelled());
    }
}
