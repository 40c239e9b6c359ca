//! The wait for the command: signals forwarded to it, orphans reaped, and
//! in copy mode whatever it left behind killed.

use std::time::{Duration, Instant};

use nix::sys::signal::{SigHandler, SigSet, Signal, kill, killpg, signal};
use nix::sys::time::TimeSpec;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use super::SETUP_FAILED;
use super::exec::supervised_signals;

/// Waits for a command, forwarding signals to it and reaping orphans.
pub(super) struct Supervisor {
    child: Pid,
    /// Signals go to the command's process group (it leads one: its own
    /// session), not only to it.
    group: bool,
    /// Copy mode: kill every descendant left when the command ends.
    sweep: bool,
    /// Copy mode: after a forwarded TERM, the command's tree is killed
    /// after this long.
    grace: Option<Duration>,
    /// The command's status, once reaped.
    status: Option<WaitStatus>,
}

impl Supervisor {
    pub(super) fn new(child: Pid, group: bool, sweep: bool, grace: Option<Duration>) -> Supervisor {
        Supervisor { child, group, sweep, grace, status: None }
    }

    /// Runs until the command has ended; its status.
    pub(super) fn run(mut self) -> WaitStatus {
        let set = supervised_signals();
        let mut kill_at: Option<Instant> = None;
        let status = loop {
            let timeout = kill_at.map(|k| k.saturating_duration_since(Instant::now()));
            match wait_signal(&set, timeout) {
                Some(Signal::SIGUSR1) => {
                    // cassist died (copy mode): nothing of the command may
                    // outlive it.
                    self.kill_all();
                    std::process::exit(128 + libc::SIGKILL);
                }
                Some(sig @ (Signal::SIGTERM | Signal::SIGINT | Signal::SIGHUP | Signal::SIGQUIT)) => {
                    self.forward(sig);
                    if let Some(g) = self.grace {
                        kill_at.get_or_insert(Instant::now() + g);
                    }
                }
                _ => {}
            }
            if kill_at.is_some_and(|k| Instant::now() >= k) {
                self.kill_all();
                kill_at = None;
            }
            self.reap_exited();
            if let Some(status) = self.status {
                break status;
            }
        };
        if self.sweep {
            self.kill_all();
        }
        status
    }

    fn forward(&self, sig: Signal) {
        if self.group {
            let _ = killpg(self.child, sig);
        }
        let _ = kill(self.child, sig);
    }

    /// Reaps every child that has exited (without waiting).
    fn reap_exited(&mut self) {
        while self.reap_one(true) {}
    }

    /// Reaps one child (waiting for one with `!nohang`), keeping the
    /// command's status; whether one was reaped.
    fn reap_one(&mut self, nohang: bool) -> bool {
        let flags = if nohang { WaitPidFlag::WNOHANG | WaitPidFlag::__WALL } else { WaitPidFlag::__WALL };
        match waitpid(None::<Pid>, Some(flags)) {
            Ok(s @ (WaitStatus::Exited(pid, _) | WaitStatus::Signaled(pid, _, _))) => {
                if pid == self.child {
                    self.status = Some(s);
                }
                true
            }
            Ok(WaitStatus::StillAlive) | Err(_) => false,
            Ok(_) => true,
        }
    }

    /// SIGKILL to the command's group, then to every descendant (they are
    /// all our children or theirs: we are the subreaper), until none is
    /// left.
    fn kill_all(&mut self) {
        let _ = killpg(self.child, Signal::SIGKILL);
        let _ = kill(self.child, Signal::SIGKILL);
        if !self.sweep {
            return;
        }
        for _ in 0..1000 {
            let children = children_of(Pid::this());
            if children.is_empty() {
                break;
            }
            for pid in &children {
                for d in descendants_of(*pid) {
                    let _ = kill(d, Signal::SIGKILL);
                }
                let _ = kill(*pid, Signal::SIGKILL);
            }
            // Their children come to us as they die.
            for _ in &children {
                self.reap_one(false);
            }
        }
        self.reap_exited();
    }
}

/// One signal of `set`, or `None` at the timeout (never, without one) or
/// on an interruption.
fn wait_signal(set: &SigSet, timeout: Option<Duration>) -> Option<Signal> {
    let ts = timeout.map(TimeSpec::from);
    let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t.as_ref() as *const libc::timespec);
    // SAFETY: a valid signal set and timespec; the siginfo is not wanted.
    // (nix has no wrapper for sigtimedwait.)
    let sig = unsafe { libc::sigtimedwait(set.as_ref(), std::ptr::null_mut(), ts_ptr) };
    if sig < 0 { None } else { Signal::try_from(sig).ok() }
}

/// The children of `pid` (from `/proc`).
fn children_of(pid: Pid) -> Vec<Pid> {
    let list = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"));
    if let Ok(text) = list {
        return text.split_ascii_whitespace().filter_map(|p| p.parse().ok()).map(Pid::from_raw).collect();
    }
    // Without CONFIG_PROC_CHILDREN: every process's parent.
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(p) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else { continue };
        // "pid (comm) state ppid ...": comm may hold spaces and parens.
        let ppid = stat.rfind(')').and_then(|c| stat[c + 1..].split_ascii_whitespace().nth(1)?.parse::<i32>().ok());
        if ppid == Some(pid.as_raw()) {
            out.push(Pid::from_raw(p));
        }
    }
    out
}

/// Every descendant of `pid` as seen now, children first.
fn descendants_of(pid: Pid) -> Vec<Pid> {
    let mut out = Vec::new();
    let mut queue = vec![pid];
    while let Some(p) = queue.pop() {
        for c in children_of(p) {
            if !out.contains(&c) {
                out.push(c);
                queue.push(c);
            }
        }
    }
    out
}

/// Ends this process the way `status` ended the command: the same exit
/// code, or the same signal.
pub(super) fn exit_like(status: WaitStatus) -> ! {
    match status {
        WaitStatus::Exited(_, code) => std::process::exit(code),
        WaitStatus::Signaled(_, sig, _) => {
            // SAFETY: restoring the default action installs no handler.
            let _ = unsafe { signal(sig, SigHandler::SigDfl) };
            let mut one = SigSet::empty();
            one.add(sig);
            let _ = one.thread_unblock();
            let _ = kill(Pid::this(), sig);
            std::process::exit(128 + sig as i32)
        }
        _ => std::process::exit(SETUP_FAILED),
    }
}
