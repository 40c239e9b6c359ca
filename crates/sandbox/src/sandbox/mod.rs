//! The sandbox every command of a task runs in, from the inside.
//!
//! cassist re-executes itself as `cassist __sandbox-exec` (a fresh,
//! single-threaded process: namespaces cannot be entered from a threaded
//! one, and building a Landlock ruleset allocates, which is not safe
//! between `fork` and `exec` of a threaded one) with an [`ExecSpec`]: the
//! workspace's layers, what to hide and keep, what the command may write,
//! and the command. Every command of a task goes through it — setup, the
//! agent, acceptance, the project test, the replay helper and the `build`
//! commands (on a throw-away layer over the integrated tree) — at every
//! sandbox level (`full`
//! included: there without the confinement below, but still in its own
//! session and, where namespaces work, its own PID namespace).
//!
//! ## With namespaces (overlay mode)
//!
//! 1. The wrapper enters new user, mount and PID namespaces (the user is
//!    mapped to itself) and forks the namespace's init (PID 1).
//! 2. The init makes every mount private and builds the command's view
//!    ([`mounts`]): the overlay over the project's own path (lower layers
//!    read-only, the command's layer on top: every write lands there); the
//!    project's `.git` bind-mounted read-only over itself (no index
//!    rewritten, no hook planted); a fresh `/proc` of the PID namespace
//!    (only the task's own processes, not cassist's environment); and,
//!    for a confined command, a private tmpfs on `/tmp` and `/var/tmp`, a
//!    minimal `/dev` (null, zero, full, random, urandom, a private `devpts`
//!    for ptys, a private `/dev/shm`; no tty, no console, no block device;
//!    read-only), and an empty read-only tmpfs over each hidden folder (the
//!    project's `.cassist/`, the folder holding every workspace, so that no
//!    task reaches another task's layers or io folder). What the command
//!    needs under a hidden folder (its project view, its own io folder, a
//!    HOME or PATH entry under `/tmp`) is cloned before and put back after.
//!    An agent's state folders (`~/.claude`, `~/.cache`, ...) are seen
//!    copy-on-write ([`StateViews`]): the CLI reads its login and settings,
//!    and nothing it writes there (a hook in `~/.claude/settings.json`, a
//!    poisoned cache) reaches the user's next session.
//! 3. The init forks the command ([`confine`]): own session (no
//!    controlling terminal: nothing can be typed into the user's shell),
//!    fds 0–2 only, no capability left (it cannot unmount its overlay to
//!    reach the real tree), `no_new_privs`, and Landlock: read everywhere,
//!    write only where its level allows, ioctl only on the safe `/dev`
//!    nodes and its own ptys, no signal and no abstract unix socket
//!    outside its own domain (ABI ≥ 6).
//! 4. The init forwards TERM/INT/HUP/QUIT to the command's process group,
//!    reaps orphans, and exits with the command's status; its exit ends
//!    every process left in the namespace: nothing outlives the command.
//!    If the wrapper dies, the init follows (parent-death signal), and the
//!    wrapper dies with cassist.
//!
//! ## Without namespaces (copy mode)
//!
//! The wrapper forks the command, which gets the same last steps (own
//! session, fds 0–2, no capabilities, `no_new_privs`, Landlock with signal
//! and abstract-socket scoping). The wrapper is the command's child
//! subreaper: every process the command leaves behind, double-forked
//! daemons and `setsid` included, becomes its child and is killed when the
//! command ends, when cassist stops it (after its grace) and when cassist
//! dies. What copy mode lacks: private `/tmp`, `/var/tmp` and `/dev`, the
//! PID namespace (`/proc` shows the machine), the read isolation of other
//! tasks' files and of cassist's own where Landlock is missing (with it,
//! the hidden folders and `/dev` are left out of what the command may
//! read, and `/tmp` out of what it may write: `TMPDIR` is a folder of the
//! task's own), a read-only `.git` (there is none in the copy), ptys, and
//! the copy-on-write view of an agent's state folders (they are the user's
//! own, writable).
//!
//! The wrapper exits like the command did (same code, or the same signal),
//! so the runner outside sees the command's own outcome.

mod confine;
mod mounts;

use std::ffi::{CString, OsString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{SigSet, Signal, kill, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, fork};

/// Exit code of the wrapper when the namespace or the mount could not be
/// set up (the command never ran).
pub const SETUP_FAILED: i32 = 125;
/// Exit code when the command could not be started (as in shells).
pub const NOT_FOUND: i32 = 127;

/// A variable the wrapper is started with and takes out of the
/// environment before the command starts: its allocator then makes no
/// transparent huge page, which a short-lived process pays for (a 2 MiB
/// page zeroed, then copied on each fork) more than it gains.
pub const WRAPPER_ENV: (&str, &str) = ("MIMALLOC_ALLOW_THP", "0");

/// The hidden command that runs the sandbox wrapper ([`main`]).
pub const WRAPPER_COMMAND: &str = "__sandbox-exec";

/// The wrapper as a program of its own, installed beside cassist
/// (`src/bin/cassist-sandbox.rs`): started for every command of a task,
/// it maps, relocates and tears down a few hundred kilobytes where
/// cassist's own image is a hundred megabytes (a millisecond or two per
/// command). cassist falls back to running the wrapper itself
/// (`cassist __sandbox-exec`) when it is missing or of another build.
pub const WRAPPER_PROGRAM: &str = "cassist-sandbox";

/// What identifies this build's wrapper: the version, and a hash of the
/// wrapper's sources and of the dependencies' exact versions
/// (`Cargo.lock`). A `cassist-sandbox` that answers anything else is not
/// used.
pub fn build_id() -> String {
    format!("{}-{BUILD_HASH:016x}", env!("CARGO_PKG_VERSION"))
}

const BUILD_HASH: u64 = fnv1a(&[
    include_bytes!("mod.rs"),
    include_bytes!("mounts.rs"),
    include_bytes!("confine.rs"),
    include_bytes!("../lib.rs"),
    include_bytes!("../process/mod.rs"),
    include_bytes!("../process/cancel.rs"),
    include_bytes!("../process/capture.rs"),
    include_bytes!("../process/command.rs"),
    include_bytes!("../process/group.rs"),
    include_bytes!("../process/kill_scan.rs"),
    include_bytes!("../process/program.rs"),
    include_bytes!("../process/redact.rs"),
    include_bytes!("../process/run.rs"),
    include_bytes!("../process/transcript.rs"),
    include_bytes!("../process/wait.rs"),
    include_bytes!("../../Cargo.toml"),
    include_bytes!("../../../../Cargo.lock"),
]);

/// FNV-1a over `parts`, at compile time.
const fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325_u64;
    let mut i = 0;
    while i < parts.len() {
        let part = parts[i];
        let mut j = 0;
        while j < part.len() {
            hash ^= part[j] as u64;
            hash = hash.wrapping_mul(0x0100_0000_01b3);
            j += 1;
        }
        i += 1;
    }
    hash
}

/// What `__sandbox-exec` is asked to do.
#[derive(Debug, Clone, Default)]
pub struct ExecSpec {
    /// New user, mount and PID namespaces (copy mode: none).
    pub namespaces: bool,
    /// The copy-on-write workspace to mount (with namespaces only).
    pub overlay: Option<Overlay>,
    /// Below `full`: no capabilities and `no_new_privs` in every mode, and
    /// with namespaces a private `/tmp`, `/var/tmp`, `/dev/shm`, a minimal
    /// `/dev` and the [`hide`](ExecSpec::hide) folders hidden.
    pub confined: bool,
    /// Folders covered by an empty read-only tmpfs (confined, with
    /// namespaces); in copy mode, left out of what Landlock lets it read.
    pub hide: Vec<PathBuf>,
    /// Paths kept visible where a private or hidden folder would cover
    /// them (canonical paths).
    pub keep: Vec<PathBuf>,
    /// Paths bind-mounted read-only over themselves (with namespaces).
    pub read_only: Vec<PathBuf>,
    /// Where the command starts.
    pub cwd: PathBuf,
    /// What the command may write (confined): with Landlock, everything
    /// else is read-only; without it, a kept path outside these is still
    /// mounted read-only.
    pub writable: Vec<PathBuf>,
    /// Enforce [`writable`](ExecSpec::writable) with Landlock.
    pub landlock: bool,
    /// Copy mode: how long after a TERM the wrapper waits before it kills
    /// whatever the command left (cassist's own grace is longer).
    pub grace: Option<Duration>,
    /// Paths seen copy-on-write (confined, with namespaces).
    pub state: Option<StateViews>,
    /// The process that starts the wrapper (cassist): the wrapper asks to
    /// die with it (`PR_SET_PDEATHSIG`), then checks that it is still its
    /// parent, so no death slips in between. cassist then needs no hook
    /// between `fork` and `exec`, and starts the wrapper the cheap way
    /// (`posix_spawn`: no copy of its address space).
    pub parent: Option<u32>,
    pub argv: Vec<OsString>,
}

/// What confines one command of a task, apart from its view of the
/// project (see [`ExecSpec`] for each field).
#[derive(Debug, Clone, Default)]
pub struct Jail {
    pub confined: bool,
    pub hide: Vec<PathBuf>,
    pub keep: Vec<PathBuf>,
    pub writable: Vec<PathBuf>,
    pub landlock: bool,
    pub grace: Option<Duration>,
    pub state: Option<StateViews>,
}

/// An agent's state folders and files (canonical paths), seen
/// copy-on-write by a confined command with namespaces: a folder as an
/// overlay whose lower is the real folder and whose upper is a folder of
/// the task's own under `dir`, a file as a copy of its own under `dir`
/// bind-mounted over it. What the command writes there stays under `dir`
/// (which goes with the task's workspace), never in the real path; what
/// it wrote in an earlier run of the same task is there again. The
/// `shared` paths (`CASSIST_SHARED_STATE`), equal to one of `paths` or
/// inside one, stay the real ones.
#[derive(Debug, Clone, Default)]
pub struct StateViews {
    pub paths: Vec<PathBuf>,
    pub dir: PathBuf,
    pub shared: Vec<PathBuf>,
}

impl StateViews {
    /// Where the copy-on-write part of `path` goes under [`dir`](Self::dir):
    /// one name per path (`%` and `/` escaped).
    pub fn under(&self, path: &Path) -> PathBuf {
        let name = path.to_string_lossy().replace('%', "%25").replace('/', "%2F");
        self.dir.join(name)
    }

    /// Whether `path` stays the real one: it is shared, or inside a shared
    /// path.
    pub fn is_shared(&self, path: &Path) -> bool {
        self.shared.iter().any(|s| path.starts_with(s))
    }
}

/// An overlay mounted at `target` (the project's own path): `lowers`,
/// top first, read-only under the writable `upper`.
#[derive(Debug, Clone)]
pub struct Overlay {
    pub target: PathBuf,
    pub lowers: Vec<PathBuf>,
    pub upper: PathBuf,
    pub work: PathBuf,
}

impl ExecSpec {
    /// A command of a task that sees the project at `root` (the overlay or
    /// the copy), starting in `cwd`, confined by
    /// `jail`. Whatever the jail, the repository's `.git` is read-only
    /// (no index rewritten, no hook planted) and `cwd` stays visible; a
    /// confined command does not see the project's `.cassist/` at all.
    pub fn for_project(
        jail: Jail,
        namespaces: bool,
        overlay: Option<Overlay>,
        root: &Path,
        cwd: &Path,
        argv: Vec<OsString>,
    ) -> ExecSpec {
        let Jail { confined, mut hide, mut keep, writable, landlock, grace, state } = jail;
        let mut read_only: Vec<PathBuf> = git_dir(root).into_iter().collect();
        if confined {
            // cassist's own state: its store, lock and records.
            hide.push(root.join(".cassist"));
            // A read-only command's project view is read-only by its
            // mount too, whatever is around it.
            if !may_write(&writable, cwd) {
                read_only.push(cwd.to_path_buf());
            }
        }
        keep.push(cwd.to_path_buf());
        ExecSpec {
            namespaces,
            overlay,
            confined,
            hide,
            keep,
            read_only,
            cwd: cwd.to_path_buf(),
            writable,
            landlock,
            grace,
            state,
            parent: Some(std::process::id()),
            argv,
        }
    }

    /// The arguments that make `cassist` run this spec.
    pub fn to_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![WRAPPER_COMMAND.into()];
        let mut push = |flag: &str, path: &Path| {
            args.push(flag.into());
            args.push(path.into());
        };
        if let Some(o) = &self.overlay {
            push("--mount-at", &o.target);
            for l in &o.lowers {
                push("--lower", l);
            }
            push("--upper", &o.upper);
            push("--work", &o.work);
        }
        for p in &self.hide {
            push("--hide", p);
        }
        for p in &self.keep {
            push("--keep", p);
        }
        for p in &self.read_only {
            push("--read-only", p);
        }
        push("--cwd", &self.cwd);
        for p in &self.writable {
            push("--write", p);
        }
        if self.namespaces {
            args.push("--namespaces".into());
        }
        if self.confined {
            args.push("--confined".into());
        }
        if self.landlock {
            args.push("--landlock".into());
        }
        if let Some(g) = self.grace {
            args.push("--grace-ms".into());
            args.push(g.as_millis().to_string().into());
        }
        if let Some(p) = self.parent {
            args.push("--parent".into());
            args.push(p.to_string().into());
        }
        if let Some(s) = &self.state {
            args.push("--state-dir".into());
            args.push(s.dir.clone().into());
            for p in &s.paths {
                args.push("--state".into());
                args.push(p.into());
            }
            for p in &s.shared {
                args.push("--shared".into());
                args.push(p.into());
            }
        }
        args.push("--".into());
        args.extend(self.argv.iter().cloned());
        args
    }
}

impl ExecSpec {
    /// The spec [`ExecSpec::to_args`] wrote, from the arguments after
    /// `__sandbox-exec`. Read by hand, not by the command-line parser: the
    /// wrapper starts for every command of a task, and building the whole
    /// command-line definition would be most of its start-up.
    pub fn from_args(args: impl IntoIterator<Item = OsString>) -> Result<ExecSpec, String> {
        let mut spec = ExecSpec::default();
        let (mut target, mut lowers, mut upper, mut work) = (None, Vec::new(), None, None);
        let (mut state_dir, mut state, mut shared) = (None, Vec::new(), Vec::new());
        let mut cwd = None;
        let mut args = args.into_iter();
        while let Some(flag) = args.next() {
            let Some(flag) = flag.to_str().map(str::to_owned) else {
                return Err(format!("unexpected wrapper argument {flag:?}"));
            };
            match flag.as_str() {
                "--" => {
                    spec.argv = args.collect();
                    break;
                }
                "--namespaces" => spec.namespaces = true,
                "--confined" => spec.confined = true,
                "--landlock" => spec.landlock = true,
                _ => {
                    let value = args.next().ok_or_else(|| format!("`{flag}` needs a value"))?;
                    let path = PathBuf::from(&value);
                    match flag.as_str() {
                        "--mount-at" => target = Some(path),
                        "--lower" => lowers.push(path),
                        "--upper" => upper = Some(path),
                        "--work" => work = Some(path),
                        "--hide" => spec.hide.push(path),
                        "--keep" => spec.keep.push(path),
                        "--read-only" => spec.read_only.push(path),
                        "--cwd" => cwd = Some(path),
                        "--write" => spec.writable.push(path),
                        "--state-dir" => state_dir = Some(path),
                        "--state" => state.push(path),
                        "--shared" => shared.push(path),
                        "--parent" => {
                            let pid = value.to_str().and_then(|v| v.parse().ok()).ok_or("`--parent` needs a pid")?;
                            spec.parent = Some(pid);
                        }
                        "--grace-ms" => {
                            let ms =
                                value.to_str().and_then(|v| v.parse().ok()).ok_or("`--grace-ms` needs a number")?;
                            spec.grace = Some(Duration::from_millis(ms));
                        }
                        _ => return Err(format!("unknown wrapper argument `{flag}`")),
                    }
                }
            }
        }
        spec.cwd = cwd.ok_or("no `--cwd` given")?;
        spec.overlay = match (target, upper, work) {
            (Some(target), Some(upper), Some(work)) => Some(Overlay { target, lowers, upper, work }),
            (None, None, None) if lowers.is_empty() => None,
            _ => return Err("an overlay needs `--mount-at`, `--upper` and `--work`".into()),
        };
        spec.state = match state_dir {
            Some(dir) => Some(StateViews { paths: state, dir, shared }),
            None if state.is_empty() && shared.is_empty() => None,
            None => return Err("`--state` needs `--state-dir`".into()),
        };
        if spec.argv.is_empty() {
            return Err("no command given".into());
        }
        Ok(spec)
    }
}

/// `cassist __sandbox-exec ARGS`: reads the spec and execs (never returns).
pub fn main(args: impl IntoIterator<Item = OsString>) -> ! {
    match ExecSpec::from_args(args) {
        Ok(spec) => exec(&spec),
        Err(e) => fail(e),
    }
}

/// The Landlock ABI of the running kernel (0: not available).
pub fn landlock_abi() -> i64 {
    // SAFETY: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
    // only returns the ABI version.
    let r = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<u8>(), 0usize, 1u32) };
    if r < 0 { 0 } else { r }
}

/// Folders a confined command with namespaces gets a private tmpfs on (and
/// may write).
pub const PRIVATE_TEMP: [&str; 3] = ["/tmp", "/var/tmp", "/dev/shm"];

/// Whether `path` is one of `writable` or below one, the private temp
/// folders aside: what is kept visible below them is not theirs.
fn may_write(writable: &[PathBuf], path: &Path) -> bool {
    writable.iter().filter(|w| !PRIVATE_TEMP.iter().any(|t| w.as_path() == Path::new(t))).any(|w| path.starts_with(w))
}

/// The `.git` (a folder, or a file naming one) of the repository `root` is
/// in: its own, or the nearest above it.
fn git_dir(root: &Path) -> Option<PathBuf> {
    root.ancestors().map(|d| d.join(".git")).find(|g| g.symlink_metadata().is_ok())
}

/// Whether a path can be named in overlayfs mount options (which use `,`
/// and `:` as separators).
pub fn overlay_safe(path: &Path) -> bool {
    let b = path.as_os_str().as_bytes();
    !b.iter().any(|c| matches!(c, b',' | b':' | b'\\' | b'\n'))
}

/// Whether this process could make a user namespace (for agents that bring
/// their own namespace sandbox, like Codex's bubblewrap).
pub fn userns_available() -> bool {
    std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
        .is_ok_and(|s| s.trim().parse::<u64>().is_ok_and(|n| n > 0))
}

/// Prints why the sandbox could not be set up and exits with
/// [`SETUP_FAILED`].
fn fail(what: impl std::fmt::Display) -> ! {
    crate::say(format_args!("cassist: {what}"));
    std::process::exit(SETUP_FAILED)
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
    // SAFETY: a plain prctl.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        fail(format!("cannot supervise the command: {}", std::io::Error::last_os_error()));
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
fn supervised_signals() -> SigSet {
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

/// Waits for a command, forwarding signals to it and reaping orphans.
struct Supervisor {
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
    fn new(child: Pid, group: bool, sweep: bool, grace: Option<Duration>) -> Supervisor {
        Supervisor { child, group, sweep, grace, status: None }
    }

    /// Runs until the command has ended; its status.
    fn run(mut self) -> WaitStatus {
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
    let ts = timeout
        .map(|t| libc::timespec { tv_sec: t.as_secs() as libc::time_t, tv_nsec: t.subsec_nanos() as libc::c_long });
    let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: a valid signal set and timespec; the siginfo is not wanted.
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
fn exit_like(status: WaitStatus) -> ! {
    match status {
        WaitStatus::Exited(_, code) => std::process::exit(code),
        WaitStatus::Signaled(_, sig, _) => {
            // SAFETY: restoring the default action, unblocking the signal.
            unsafe {
                libc::signal(sig as i32, libc::SIG_DFL);
            }
            let mut one = SigSet::empty();
            one.add(sig);
            let _ = one.thread_unblock();
            let _ = kill(Pid::this(), sig);
            std::process::exit(128 + sig as i32)
        }
        _ => std::process::exit(SETUP_FAILED),
    }
}

/// `cassist __sandbox-probe DIR [LOWER]`: builds, in new namespaces, the
/// view a confined command gets — an overlay over LOWER (the project: its
/// filesystem must support being a lower dir) with its upper and work dirs
/// under DIR, a private `/tmp` and `/dev`, DIR hidden with LOWER and (read-
/// only) the upper dir kept — and exits 0 when all of it works here.
pub fn probe(dir: &Path, lower: Option<&Path>) -> ! {
    // SAFETY: single-threaded.
    unsafe { std::env::remove_var(WRAPPER_ENV.0) };
    let lower = lower.map_or_else(|| dir.join("lower"), Path::to_path_buf);
    let (upper, work) = (dir.join("upper"), dir.join("work"));
    for d in [&lower, &upper, &work] {
        if std::fs::create_dir_all(d).is_err() {
            std::process::exit(1);
        }
    }
    let lower = lower.canonicalize().unwrap_or(lower);
    let spec = ExecSpec {
        namespaces: true,
        overlay: Some(Overlay { target: lower.clone(), lowers: vec![lower.clone()], upper: upper.clone(), work }),
        confined: true,
        hide: vec![dir.to_path_buf()],
        keep: vec![lower.clone(), upper],
        cwd: lower,
        ..ExecSpec::default()
    };
    if let Err(e) = mounts::enter_namespaces() {
        crate::say(format_args!("{e}"));
        std::process::exit(1);
    }
    // SAFETY: single-threaded.
    match unsafe { fork() } {
        Ok(ForkResult::Child) => match mounts::prepare(&spec) {
            Ok(()) => std::process::exit(0),
            Err(e) => {
                crate::say(format_args!("{e}"));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_id_is_the_version_and_a_hash() {
        let id = build_id();
        let (version, hash) = id.split_once('-').unwrap();
        assert_eq!(version, env!("CARGO_PKG_VERSION"));
        assert!(hash.len() == 16 && hash.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
        assert_eq!(fnv1a(&[b"a", b"b"]), fnv1a(&[b"ab"]), "over the bytes, whatever their parts");
        assert_ne!(fnv1a(&[b"ab"]), fnv1a(&[b"ba"]));
    }

    #[test]
    fn the_wrapper_reads_back_every_spec_it_is_given() {
        use std::os::unix::ffi::OsStringExt;
        let odd = OsString::from_vec(b"/p/n\xffot-utf8".to_vec());
        let full = ExecSpec {
            namespaces: true,
            overlay: Some(Overlay {
                target: "/proj".into(),
                lowers: vec!["/ws/setup".into(), PathBuf::from(&odd)],
                upper: "/ws/agent".into(),
                work: "/ws/agent.work".into(),
            }),
            confined: true,
            hide: vec!["/proj/.cassist".into(), "--looks-like-a-flag".into()],
            keep: vec!["/proj".into()],
            read_only: vec!["/proj/.git".into()],
            cwd: "/proj/sub dir".into(),
            writable: vec!["/proj".into(), "/tmp".into()],
            landlock: true,
            grace: Some(Duration::from_millis(1500)),
            state: Some(StateViews {
                paths: vec!["/home/u/.cache".into()],
                dir: "/ws/state".into(),
                shared: vec!["/home/u/.cache/keep".into()],
            }),
            parent: Some(4242),
            argv: vec!["sh".into(), "-c".into(), "--".into(), odd.clone(), "--cwd".into()],
        };
        let plain = ExecSpec { cwd: "/w".into(), argv: vec!["true".into()], ..ExecSpec::default() };
        for spec in [full, plain] {
            let args = spec.to_args();
            assert_eq!(args[0], WRAPPER_COMMAND);
            let back = ExecSpec::from_args(args.into_iter().skip(1)).unwrap();
            assert_eq!(format!("{back:?}"), format!("{spec:?}"));
        }
        let bad = |args: &[&str]| ExecSpec::from_args(args.iter().map(OsString::from)).unwrap_err();
        assert!(bad(&["--", "true"]).contains("--cwd"));
        assert!(bad(&["--cwd", "/w", "--bogus", "x", "--", "true"]).contains("unknown wrapper argument `--bogus`"));
        assert!(bad(&["--cwd", "/w", "--upper", "/u", "--", "true"]).contains("--mount-at"));
        assert!(bad(&["--cwd", "/w", "--state", "/s", "--", "true"]).contains("--state-dir"));
        assert!(bad(&["--cwd", "/w", "--grace-ms", "soon", "--", "true"]).contains("number"));
        assert!(bad(&["--cwd", "/w", "--parent", "me", "--", "true"]).contains("pid"));
        assert!(bad(&["--cwd", "/w"]).contains("no command"));
        assert!(bad(&["--cwd"]).contains("needs a value"));
    }

    #[test]
    fn each_state_path_has_a_place_of_its_own_and_shared_paths_stay_real() {
        let views = StateViews {
            paths: vec![PathBuf::from("/home/u/.cache"), PathBuf::from("/home/u/.claude.json")],
            dir: PathBuf::from("/ws/state"),
            shared: vec![PathBuf::from("/home/u/.cache/keep")],
        };
        assert_eq!(views.under(Path::new("/home/u/.cache")), Path::new("/ws/state/%2Fhome%2Fu%2F.cache"));
        // `a/b` and `a%2Fb` do not share a place.
        assert_ne!(views.under(Path::new("/a/b")), views.under(Path::new("/a%2Fb")));
        assert!(
            views.is_shared(Path::new("/home/u/.cache/keep")) && views.is_shared(Path::new("/home/u/.cache/keep/x"))
        );
        assert!(!views.is_shared(Path::new("/home/u/.cache")) && !views.is_shared(Path::new("/home/u/.cache/keeper")));
        let spec = ExecSpec { state: Some(views), argv: vec!["true".into()], ..ExecSpec::default() };
        let args: Vec<String> = spec.to_args().iter().map(|a| a.to_string_lossy().into_owned()).collect();
        let flags = args.join(" ");
        assert!(
            flags.contains(
                "--state-dir /ws/state --state /home/u/.cache --state /home/u/.claude.json --shared /home/u/.cache/keep --"
            ),
            "{flags}"
        );
    }
}
