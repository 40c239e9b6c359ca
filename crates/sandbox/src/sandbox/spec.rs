//! What the wrapper is asked to do: [`ExecSpec`], and the parts of it the
//! run crate fills for each command ([`Jail`], [`StateViews`], [`Overlay`]).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::net::Network;

/// What `__sandbox-exec` is asked to do.
#[derive(Debug, Clone, Default)]
pub struct ExecSpec {
    /// New user, mount and PID namespaces (copy mode: none).
    pub namespaces: bool,
    /// The copy-on-write workspace to mount (with namespaces only).
    pub overlay: Option<Overlay>,
    /// Below `full`: no capabilities and `no_new_privs` in every mode, and
    /// with namespaces a private `/tmp`, `/var/tmp`, `/dev/shm`, a minimal
    /// `/dev` and the [`hide`](ExecSpec::hide) paths hidden.
    pub confined: bool,
    /// Paths hidden (confined): with namespaces a folder is covered by an
    /// empty read-only tmpfs, anything else (a file, a socket) by an empty
    /// read-only file; in copy mode they are left out of what Landlock
    /// lets it read. Canonical paths.
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
    /// The command's network (with namespaces).
    pub network: Network,
    /// The memory and processes the command may use.
    pub bounds: Bounds,
    pub argv: Vec<OsString>,
}

/// The memory and processes one command may use, and the cgroups that
/// bound them. The wrapper makes a child of each of the [`cgroups`]
/// (named by its own pid), sets the limits its controllers take there and
/// moves itself in before it forks or enters a namespace: the command,
/// its namespace and everything they start are inside. A limit no cgroup
/// takes falls back to a resource limit of each process (`RLIMIT_DATA`,
/// `RLIMIT_NPROC`).
///
/// [`cgroups`]: Bounds::cgroups
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bounds {
    /// The run's cgroup folders, one per hierarchy that has the memory or
    /// the pids controller.
    pub cgroups: Vec<PathBuf>,
    /// Bytes of memory, all the command's processes together.
    pub memory: Option<u64>,
    /// Processes and threads at once (the wrapper's own not counted).
    pub processes: Option<u64>,
}

/// What confines one command of a task, apart from its view of the
/// project (see [`ExecSpec`] for each field).
#[derive(Debug, Clone, Default)]
pub struct Jail {
    pub confined: bool,
    pub hide: Vec<PathBuf>,
    pub keep: Vec<PathBuf>,
    /// Host paths it may read but never write, whatever is around them
    /// (added to [`ExecSpec::read_only`]).
    pub read_only: Vec<PathBuf>,
    pub writable: Vec<PathBuf>,
    pub landlock: bool,
    pub grace: Option<Duration>,
    pub state: Option<StateViews>,
    /// With namespaces: the network it gets (see [`Network`]).
    pub network: Network,
    pub bounds: Bounds,
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
        let Jail {
            confined,
            mut hide,
            mut keep,
            read_only: extra_read_only,
            writable,
            landlock,
            grace,
            state,
            network,
            bounds,
        } = jail;
        let mut read_only: Vec<PathBuf> = git_dir(root).into_iter().collect();
        read_only.extend(extra_read_only);
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
            network: if namespaces { network } else { Network::Host },
            bounds,
            argv,
        }
    }
}

/// Folders a confined command with namespaces gets a private tmpfs on (and
/// may write).
pub const PRIVATE_TEMP: [&str; 3] = ["/tmp", "/var/tmp", "/dev/shm"];

/// Whether `path` is one of `writable` or below one, the private temp
/// folders aside: what is kept visible below them is not theirs.
pub(super) fn may_write(writable: &[PathBuf], path: &Path) -> bool {
    writable.iter().filter(|w| !PRIVATE_TEMP.iter().any(|t| w.as_path() == Path::new(t))).any(|w| path.starts_with(w))
}

/// The `.git` (a folder, or a file naming one) of the repository `root` is
/// in: its own, or the nearest above it.
fn git_dir(root: &Path) -> Option<PathBuf> {
    root.ancestors().map(|d| d.join(".git")).find(|g| g.symlink_metadata().is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

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
