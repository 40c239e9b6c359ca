//! The wrapper itself: from its arguments to the command's `exec`, through
//! the namespaces and their init (overlay mode) or the subreaper (copy
//! mode).

use std::ffi::{CString, OsString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;

use nix::sys::signal::{SigSet, Signal, kill};
use nix::sys::wait::WaitStatus;
use nix::unistd::{ForkResult, Pid, fork};

use super::supervise::{Supervisor, exit_like};
use super::{ExecSpec, SETUP_FAILED, WRAPPER_ENV, cgroup, confine, fail, mounts, net};

/// `cassist __sandbox-exec ARGS`: reads the spec and execs (never returns).
pub fn main(args: impl IntoIterator<Item = OsString>) -> ! {
    match ExecSpec::from_args(args) {
        Ok(spec) => exec(&spec),
        Err(e) => fail(e),
    }
}

fn c_argv(spec: &ExecSpec) -> Vec<CString> {
    let argv: Vec<CString> = match spec.argv.iter().map(|a| CString::new(a.as_bytes())).collect() {
        Ok(v) => v,
        Err(_) => fail("a command argument holds a NUL byte"),
    };
    if argv.is_empty() {
        fail("no command given");
    }
    argv
}

/// `cassist __sandbox-exec`: never returns.
pub fn exec(spec: &ExecSpec) -> ! {
    // SAFETY: this process is single-threaded (a fresh re-exec of cassist).
    unsafe { std::env::remove_var(WRAPPER_ENV.0) };
    let argv = c_argv(spec);
    // Into the command's cgroup first: whatever it forks, the namespace
    // included, is inside.
    if let Err(e) = cgroup::enter(&spec.bounds) {
        fail(e);
    }
    // Every signal the supervisors wait for is blocked and taken with
    // sigtimedwait, in order, on this one thread; the command gets an
    // empty mask back before it execs.
    let waited = supervised_signals();
    if waited.thread_block().is_err() {
        fail("cannot block signals");
    }
    if !spec.namespaces {
        // Copy mode. cassist's death reaches the wrapper as a signal it
        // can act on: it kills what the command left, then exits.
        set_parent_death_signal(Signal::SIGUSR1, parent(spec));
        supervise_copy(spec, &argv)
    }
    // The wrapper (and through the init's own parent-death signal, the
    // whole namespace) ends when cassist does.
    set_parent_death_signal(Signal::SIGKILL, parent(spec));
    if let Err(e) = mounts::enter_namespaces() {
        fail(e);
    }
    // Held open until the namespace is gone (the init inherits it): its
    // end tells cassist to stop serving the command's network.
    let _egress = match net::enter(&spec.network) {
        Ok(stream) => stream,
        Err(e) => fail(e),
    };
    // The init tells through this pipe which signal ended the command: its
    // own exit can only be a code. Close-on-exec: the command never holds
    // it (it could forge a "killed" report).
    let (read_end, write_end) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
        Ok(p) => p,
        Err(e) => fail(format!("cannot start the workspace: {e}")),
    };
    // SAFETY: this process is single-threaded (a fresh re-exec of cassist).
    match unsafe { fork() } {
        Err(e) => fail(format!("cannot start the workspace: {e}")),
        Ok(ForkResult::Child) => {
            drop(read_end);
            init(spec, &argv, write_end)
        }
        Ok(ForkResult::Parent { child }) => {
            drop(write_end);
            let status = Supervisor::new(child, false, false, None).run();
            if let WaitStatus::Exited(..) = status {
                let mut buf = [0u8; 1];
                if let Ok(1) = nix::unistd::read(&read_end, &mut buf)
                    && let Ok(sig) = Signal::try_from(buf[0] as i32)
                {
                    exit_like(WaitStatus::Signaled(child, sig, false));
                }
            }
            exit_like(status)
        }
    }
}

/// PID 1 of the namespace: builds the command's view, starts it and waits
/// for it. `report` receives the signal that ended the command, if one did.
fn init(spec: &ExecSpec, argv: &[CString], report: OwnedFd) -> ! {
    // Its parent is outside the namespace (getppid() says 0).
    set_parent_death_signal(Signal::SIGKILL, None);
    if let Err(e) = mounts::prepare(spec) {
        fail(e);
    }
    // SAFETY: still single-threaded.
    match unsafe { fork() } {
        Err(e) => fail(format!("cannot start the command: {e}")),
        Ok(ForkResult::Child) => confine::exec_command(spec, argv),
        Ok(ForkResult::Parent { child }) => {
            // Returning from PID 1 ends every other process of the
            // namespace.
            match Supervisor::new(child, true, false, None).run() {
                WaitStatus::Exited(_, code) => std::process::exit(code),
                WaitStatus::Signaled(_, sig, _) => {
                    let _ = nix::unistd::write(&report, &[sig as i32 as u8]);
                    std::process::exit(128 + sig as i32)
                }
                _ => std::process::exit(SETUP_FAILED),
            }
        }
    }
}

/// Copy mode: the command as our child, ourselves its subreaper.
fn supervise_copy(spec: &ExecSpec, argv: &[CString]) -> ! {
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        fail(format!("cannot supervise the command: {}", std::io::Error::from(e)));
    }
    let wrapper = Pid::this();
    // SAFETY: single-threaded.
    match unsafe { fork() } {
        Err(e) => fail(format!("cannot start the command: {e}")),
        Ok(ForkResult::Child) => {
            set_parent_death_signal(Signal::SIGKILL, Some(wrapper));
            confine::exec_command(spec, argv)
        }
        Ok(ForkResult::Parent { child }) => exit_like(Supervisor::new(child, true, true, spec.grace).run()),
    }
}

/// Signals the supervisors take with `sigtimedwait`.
pub(super) fn supervised_signals() -> SigSet {
    let mut set = SigSet::empty();
    for sig in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP, Signal::SIGQUIT, Signal::SIGCHLD, Signal::SIGUSR1] {
        set.add(sig);
    }
    set
}

/// The process the wrapper must die with, when it was told.
fn parent(spec: &ExecSpec) -> Option<Pid> {
    spec.parent.and_then(|p| i32::try_from(p).ok()).map(Pid::from_raw)
}

/// `PR_SET_PDEATHSIG`; if the parent is no longer `parent` (it died
/// before the call), acts as if the signal came.
fn set_parent_death_signal(sig: Signal, parent: Option<Pid>) {
    let _ = nix::sys::prctl::set_pdeathsig(sig);
    if parent.is_some_and(|p| nix::unistd::getppid() != p) {
        // A blocked signal stays pending: the supervisor takes it.
        let _ = kill(Pid::this(), sig);
    }
}
