//! The copy-on-write workspace, from the inside.
//!
//! cassist re-executes itself as `cassist __sandbox-exec` (a fresh,
//! single-threaded process: namespaces cannot be entered from a threaded
//! one) with the project folder, an upper and a work folder and a command.
//! The wrapper:
//!
//! 1. enters new user, mount and PID namespaces;
//! 2. forks the namespace's init (PID 1), which mounts an overlayfs over the
//!    project's own path (project = lower dir, the task's upper dir on top),
//!    so the command sees the project where it is, and every write lands in
//!    the upper dir: the upper dir is exactly the change set;
//! 3. the init forks the command, forwards TERM/INT/HUP to it, reaps
//!    orphans, and exits with the command's status. When the init exits the
//!    kernel kills whatever is left in the namespace: no process of the
//!    command's tree survives it. If the wrapper itself is killed, the init
//!    follows (parent-death signal).
//!
//! The wrapper exits like the command did (same code, or the same signal),
//! so the runner outside sees the command's own outcome.

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};

use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};
use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, kill, sigaction};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, fork};

/// Exit code of the wrapper when the namespace or the mount could not be
/// set up (the command never ran).
pub const SETUP_FAILED: i32 = 125;
/// Exit code when the command could not be started (as in shells).
pub const NOT_FOUND: i32 = 127;

/// What `__sandbox-exec` is asked to do.
#[derive(Debug, Clone)]
pub struct ExecSpec {
    /// The copy-on-write workspace to mount, if any (none in copy mode:
    /// then only Landlock applies).
    pub overlay: Option<Overlay>,
    /// Where the command starts.
    pub cwd: PathBuf,
    /// With Landlock: the folders (and files) the command may write;
    /// everything else is read-only. `None`: no Landlock.
    pub writable: Option<Vec<PathBuf>>,
    pub argv: Vec<OsString>,
}

/// An overlay over `lower` (the project folder, also the mount point).
#[derive(Debug, Clone)]
pub struct Overlay {
    pub lower: PathBuf,
    pub upper: PathBuf,
    pub work: PathBuf,
}

impl ExecSpec {
    /// The arguments that make `cassist` run this spec.
    pub fn to_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec!["__sandbox-exec".into()];
        if let Some(o) = &self.overlay {
            for (flag, path) in [("--lower", &o.lower), ("--upper", &o.upper), ("--work", &o.work)] {
                args.push(flag.into());
                args.push(path.clone().into());
            }
        }
        args.push("--cwd".into());
        args.push(self.cwd.clone().into());
        if let Some(w) = &self.writable {
            args.push("--landlock".into());
            for p in w {
                args.push("--write".into());
                args.push(p.clone().into());
            }
        }
        args.push("--".into());
        args.extend(self.argv.iter().cloned());
        args
    }
}

/// The Landlock ABI of the running kernel (0: not available).
pub fn landlock_abi() -> i64 {
    // SAFETY: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
    // only returns the ABI version.
    let r = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<u8>(), 0usize, 1u32) };
    if r < 0 { 0 } else { r }
}

/// Restricts this process (and what it executes): read everywhere, write
/// only beneath `writable`. Returns whether the kernel enforced it.
pub fn apply_landlock(writable: &[PathBuf]) -> Result<bool, String> {
    use landlock::{
        ABI, Access, AccessFs, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, path_beneath_rules,
    };
    let abi = ABI::V5;
    let status = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .and_then(|r| r.create())
        .and_then(|r| r.add_rules(path_beneath_rules(["/"], AccessFs::from_read(abi))))
        .and_then(|r| r.add_rules(path_beneath_rules(writable, AccessFs::from_all(abi))))
        .and_then(|r| r.restrict_self())
        .map_err(|e| format!("cannot apply the Landlock sandbox: {e}"))?;
    Ok(status.ruleset != RulesetStatus::NotEnforced)
}

/// Applies Landlock for `spec` (if asked) and executes its command; never
/// returns.
fn exec_command(spec: &ExecSpec, argv: &[CString]) -> ! {
    if let Some(w) = &spec.writable
        && let Err(e) = apply_landlock(w)
    {
        eprintln!("cassist: {e}");
        std::process::exit(SETUP_FAILED);
    }
    let err = nix::unistd::execvp(&argv[0], argv).err();
    let name = spec.argv[0].to_string_lossy();
    match err {
        Some(nix::errno::Errno::ENOENT) => eprintln!("cassist: cannot run `{name}`: command not found"),
        Some(e) => eprintln!("cassist: cannot run `{name}`: {e}"),
        None => {}
    }
    std::process::exit(NOT_FOUND);
}

fn c_argv(spec: &ExecSpec) -> Vec<CString> {
    let argv: Vec<CString> = match spec.argv.iter().map(|a| CString::new(a.as_bytes())).collect() {
        Ok(v) => v,
        Err(_) => {
            eprintln!("cassist: a command argument holds a NUL byte");
            std::process::exit(SETUP_FAILED);
        }
    };
    if argv.is_empty() {
        eprintln!("cassist: no command given");
        std::process::exit(SETUP_FAILED);
    }
    argv
}

/// Whether a path can be named in overlayfs mount options (which use `,`
/// and `:` as separators).
pub fn overlay_safe(path: &Path) -> bool {
    let b = path.as_os_str().as_bytes();
    !b.iter().any(|c| matches!(c, b',' | b':' | b'\\' | b'\n'))
}

/// The PID signals are forwarded to (0: none yet).
static FORWARD_TO: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward(sig: libc::c_int) {
    let pid = FORWARD_TO.load(Ordering::SeqCst);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

fn forward_signals_to(pid: Pid) {
    FORWARD_TO.store(pid.as_raw(), Ordering::SeqCst);
    let action = SigAction::new(SigHandler::Handler(forward), SaFlags::SA_RESTART, SigSet::empty());
    for sig in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP, Signal::SIGQUIT] {
        // SAFETY: the handler only calls kill().
        let _ = unsafe { sigaction(sig, &action) };
    }
}

/// Ends this process the way `status` ended the command: the same exit
/// code, or the same signal.
fn exit_like(status: WaitStatus) -> ! {
    match status {
        WaitStatus::Exited(_, code) => std::process::exit(code),
        WaitStatus::Signaled(_, sig, _) => {
            let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
            // SAFETY: restoring the default action.
            let _ = unsafe { sigaction(sig, &default) };
            let _ = kill(Pid::this(), sig);
            std::process::exit(128 + sig as i32)
        }
        _ => std::process::exit(SETUP_FAILED),
    }
}

fn write_proc(file: &str, text: &str) -> std::io::Result<()> {
    std::fs::write(format!("/proc/self/{file}"), text)
}

/// Enters new user + mount + PID namespaces, mapping the current user to
/// itself.
fn enter_namespaces() -> Result<(), String> {
    let uid = nix::unistd::getuid();
    let gid = nix::unistd::getgid();
    unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWPID)
        .map_err(|e| format!("cannot create user and mount namespaces: {e}"))?;
    let _ = write_proc("setgroups", "deny");
    write_proc("uid_map", &format!("{uid} {uid} 1")).map_err(|e| format!("cannot map the user id: {e}"))?;
    write_proc("gid_map", &format!("{gid} {gid} 1")).map_err(|e| format!("cannot map the group id: {e}"))?;
    Ok(())
}

/// Mounts the overlay over `lower` (inside the new mount namespace).
fn mount_overlay(lower: &Path, upper: &Path, work: &Path) -> Result<(), String> {
    mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>)
        .map_err(|e| format!("cannot make mounts private: {e}"))?;
    let base = format!("lowerdir={},upperdir={},workdir={}", lower.display(), upper.display(), work.display());
    // `userxattr` keeps overlay metadata in user.* xattrs, which an
    // unprivileged mount may write; older kernels lack the option.
    let with_user = format!("{base},userxattr");
    mount(Some("overlay"), lower, Some("overlay"), MsFlags::empty(), Some(with_user.as_str()))
        .or_else(|_| mount(Some("overlay"), lower, Some("overlay"), MsFlags::empty(), Some(base.as_str())))
        .map_err(|e| format!("cannot mount the overlay workspace: {e}"))
}

/// `cassist __sandbox-exec`: never returns.
pub fn exec(spec: &ExecSpec) -> ! {
    // The wrapper (and through the init's own parent-death signal, the
    // whole namespace) ends when cassist does.
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    let Some(overlay) = spec.overlay.clone() else {
        // Copy mode: no namespaces, Landlock only.
        let argv = c_argv(spec);
        if let Err(e) = nix::unistd::chdir(&spec.cwd) {
            eprintln!("cassist: cannot enter {}: {e}", spec.cwd.display());
            std::process::exit(SETUP_FAILED);
        }
        exec_command(spec, &argv)
    };
    if let Err(e) = enter_namespaces() {
        eprintln!("cassist: {e}");
        std::process::exit(SETUP_FAILED);
    }
    // The init tells through this pipe which signal ended the command:
    // its own exit can only be a code.
    let (read_end, write_end) = match nix::unistd::pipe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("cassist: cannot start the workspace: {e}");
            std::process::exit(SETUP_FAILED);
        }
    };
    // SAFETY: this process is single-threaded (a fresh re-exec of cassist).
    match unsafe { fork() } {
        Err(e) => {
            eprintln!("cassist: cannot start the workspace: {e}");
            std::process::exit(SETUP_FAILED);
        }
        Ok(ForkResult::Parent { child }) => {
            drop(write_end);
            forward_signals_to(child);
            loop {
                match waitpid(child, None) {
                    Ok(status @ WaitStatus::Signaled(..)) => exit_like(status),
                    Ok(status @ WaitStatus::Exited(..)) => {
                        let mut buf = [0u8; 1];
                        if let Ok(1) = nix::unistd::read(&read_end, &mut buf)
                            && let Ok(sig) = Signal::try_from(buf[0] as i32)
                        {
                            exit_like(WaitStatus::Signaled(child, sig, false));
                        }
                        exit_like(status)
                    }
                    Ok(_) => continue,
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(_) => std::process::exit(SETUP_FAILED),
                }
            }
        }
        Ok(ForkResult::Child) => {
            drop(read_end);
            init(spec, &overlay, write_end)
        }
    }
}

/// PID 1 of the namespace. `report` receives the signal that ended the
/// command, if one did.
fn init(spec: &ExecSpec, overlay: &Overlay, report: std::os::fd::OwnedFd) -> ! {
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    if let Err(e) = mount_overlay(&overlay.lower, &overlay.upper, &overlay.work) {
        eprintln!("cassist: {e}");
        std::process::exit(SETUP_FAILED);
    }
    // A /proc of this PID namespace: the command sees its own processes
    // only, not cassist's or the machine's (nor their environments).
    // Where /proc cannot be mounted (some containers), the old one stays.
    let _ = mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    );
    if let Err(e) = nix::unistd::chdir(&spec.cwd) {
        eprintln!("cassist: cannot enter {}: {e}", spec.cwd.display());
        std::process::exit(SETUP_FAILED);
    }
    let argv = c_argv(spec);
    // SAFETY: still single-threaded.
    match unsafe { fork() } {
        Err(e) => {
            eprintln!("cassist: cannot start the command: {e}");
            std::process::exit(SETUP_FAILED);
        }
        Ok(ForkResult::Child) => exec_command(spec, &argv),
        Ok(ForkResult::Parent { child }) => {
            forward_signals_to(child);
            loop {
                match waitpid(None::<Pid>, None) {
                    Ok(status @ (WaitStatus::Exited(pid, _) | WaitStatus::Signaled(pid, _, _))) if pid == child => {
                        // Returning from PID 1 ends every other process of
                        // the namespace.
                        match status {
                            WaitStatus::Exited(_, code) => std::process::exit(code),
                            WaitStatus::Signaled(_, sig, _) => {
                                let _ = nix::unistd::write(&report, &[sig as i32 as u8]);
                                std::process::exit(128 + sig as i32)
                            }
                            _ => std::process::exit(SETUP_FAILED),
                        }
                    }
                    Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
                    Err(_) => std::process::exit(SETUP_FAILED),
                }
            }
        }
    }
}

/// `cassist __sandbox-probe DIR [LOWER]`: mounts a throw-away overlay in new
/// namespaces, with upper and work dirs under DIR over LOWER (the project:
/// its filesystem must support being a lower dir); exit 0 when
/// copy-on-write workspaces work here.
pub fn probe(dir: &Path, lower: Option<&Path>) -> ! {
    let lower = lower.map_or_else(|| dir.join("lower"), Path::to_path_buf);
    let (upper, work) = (dir.join("upper"), dir.join("work"));
    for d in [&lower, &upper, &work] {
        if std::fs::create_dir_all(d).is_err() {
            std::process::exit(1);
        }
    }
    if let Err(e) = enter_namespaces() {
        eprintln!("{e}");
        std::process::exit(1);
    }
    // SAFETY: single-threaded.
    match unsafe { fork() } {
        Ok(ForkResult::Child) => match mount_overlay(&lower, &upper, &work) {
            Ok(()) => std::process::exit(0),
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(1)
            }
        },
        Ok(ForkResult::Parent { child }) => match waitpid(child, None) {
            Ok(WaitStatus::Exited(_, 0)) => std::process::exit(0),
            _ => std::process::exit(1),
        },
        Err(_) => std::process::exit(1),
    }
}

/// Whether this process could make a user namespace (for agents that bring
/// their own namespace sandbox, like Codex's bubblewrap).
pub fn userns_available() -> bool {
    std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
        .is_ok_and(|s| s.trim().parse::<u64>().is_ok_and(|n| n > 0))
}
