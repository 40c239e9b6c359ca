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
//!    (module `mounts`): the overlay over the project's own path (lower layers
//!    read-only, the command's layer on top: every write lands there); the
//!    project's `.git` bind-mounted read-only over itself (no index
//!    rewritten, no hook planted); a fresh `/proc` of the PID namespace
//!    (only the task's own processes, not cassist's environment); and,
//!    for a confined command, a private tmpfs on `/tmp` and `/var/tmp`, a
//!    minimal `/dev` (null, zero, full, random, urandom, a private `devpts`
//!    for ptys, a private `/dev/shm`; no tty, no console, no block device;
//!    read-only), an empty read-only tmpfs over each hidden folder (the
//!    project's `.cassist/`, the folder holding every workspace, so that no
//!    task reaches another task's layers or io folder; the user's secrets,
//!    module `secrets`) and an empty read-only file over each hidden file
//!    or socket (`~/.netrc`, the Docker socket). What the command
//!    needs under a hidden folder (its project view, its own io folder, a
//!    HOME or PATH entry under `/tmp`) is cloned before and put back after.
//!    An agent's state folders (`~/.claude`, `~/.cache`, ...) are seen
//!    copy-on-write ([`StateViews`]): the CLI reads its login and settings,
//!    and nothing it writes there (a hook in `~/.claude/settings.json`, a
//!    poisoned cache) reaches the user's next session.
//! 3. The init forks the command (module `confine`): own session (no
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
//! tasks' files, of cassist's own and of the user's secrets where Landlock
//! is missing (with it, the hidden folders and files and `/dev` are left
//! out of what the command may read — so a folder holding one cannot be
//! listed, though what else is in it reads — and `/tmp` out of what it may
//! write: `TMPDIR` is a folder of the task's own), a read-only `.git` (there is none in the copy), ptys, and
//! the copy-on-write view of an agent's state folders (they are the user's
//! own, writable).
//!
//! The wrapper exits like the command did (same code, or the same signal),
//! so the runner outside sees the command's own outcome.
//!
//! ## Memory and processes
//!
//! Before anything else, the wrapper moves itself into a cgroup of its
//! own under the run's, where the command's memory (all its processes
//! together) and process count are bounded ([`Bounds`]); where cassist has
//! no cgroup it may write, each process gets resource limits instead. After
//! the command, cassist reads from the cgroup's counters which limit it
//! went past, and removes the cgroup with whatever is left in it.
//!
//! The modules: `spec` (what the wrapper is asked to do, [`ExecSpec`]),
//! `args` (the spec as the wrapper's arguments and back), `cgroup` (the
//! memory and process limits), `secrets` (the paths every confined
//! command has hidden), `exec` (the
//! wrapper itself: namespaces, the init, the command), `supervise` (the
//! wait for the command, signals forwarded, orphans reaped), `mounts`
//! (the command's view of the filesystem), `confine` (the command's own
//! last steps), `host` (what this machine supports, and the probe) and
//! `build_id` (which wrapper program is this build's).

mod args;
mod build_id;
mod cgroup;
mod confine;
mod exec;
mod host;
mod mounts;
mod net;
mod secrets;
mod spec;
mod supervise;

pub use args::ArgsError;
pub use build_id::build_id;
pub use cgroup::{Exceeded, Hierarchy, RunCgroups, find as find_cgroups};
pub use exec::{exec, main};
pub use host::{landlock_abi, overlay_safe, probe, userns_available};
pub use net::{NetError, Network, PROXY_ADDR, proxy_env, receive_fd, socket_path_fits};
pub use secrets::{HOME_SECRETS, SECRET_SOCKETS, SOCKET_ENV, secret_paths, socket_paths, without_socket_env};
pub use spec::{Bounds, ExecSpec, Jail, Overlay, PRIVATE_TEMP, StateViews};

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

/// Prints why the sandbox could not be set up and exits with
/// [`SETUP_FAILED`].
fn fail(what: impl std::fmt::Display) -> ! {
    crate::say(format_args!("cassist: {what}"));
    std::process::exit(SETUP_FAILED)
}
