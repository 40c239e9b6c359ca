//! The command's view of the filesystem, built by the namespace's init
//! before the command starts (with namespaces only). In order:
//!
//! 1. every mount private: nothing made here propagates out, nothing made
//!    outside comes in;
//! 2. the overlay over the project's own path: the lower layers (top
//!    first) read-only under the command's writable layer;
//! 3. the [`read_only`](super::ExecSpec::read_only) paths (the project's
//!    `.git`) bind-mounted read-only over themselves;
//! 4. a fresh `/proc` of the PID namespace;
//! 5. confined commands: an agent's state folders copy-on-write, each an
//!    overlay over itself with an upper folder of the task's own (a state
//!    file: a copy of the task's own bound over it), the shared paths in
//!    them put back ([`super::StateViews`]);
//! 6. confined commands: the paths to keep are cloned (detached mounts,
//!    `open_tree`), then, shortest path first, each covered folder gets its
//!    tmpfs — `/tmp` and `/var/tmp` a private writable one, each hidden
//!    folder an empty read-only one — each hidden file (or socket) an
//!    empty read-only file, and each kept path is moved back where it was;
//!    a minimal read-only `/dev` replaces the machine's.
//!
//! Without capabilities (dropped before exec, [`super::confine`]) none of
//! this can be undone from inside.

use std::ffi::{CString, NulError};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};

use super::ExecSpec;
use super::confine::SAFE_DEVICES;

/// Why the command's view could not be built. Each message says what was
/// being done, its cause included.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("cannot create user and mount namespaces: {0}")]
    Namespaces(Errno),
    #[error("cannot map the user id: {0}")]
    MapUser(io::Error),
    #[error("cannot map the group id: {0}")]
    MapGroup(io::Error),
    #[error("cannot make mounts private: {0}")]
    MakePrivate(Errno),
    /// Every set of overlay options was refused; the last refusal.
    #[error("cannot mount the overlay workspace: {0}")]
    Overlay(Errno),
    #[error("cannot give {} a copy-on-write view ({cause}); name it in CASSIST_SHARED_STATE to let agents write it for real", path.display())]
    StateView { path: PathBuf, cause: Box<dyn std::error::Error + Send + Sync> },
    #[error("cannot make {} read-only: {error}", path.display())]
    ReadOnly { path: PathBuf, error: Errno },
    #[error("cannot cover {}: {error}", path.display())]
    Cover { path: PathBuf, error: Errno },
    /// The folder or file a mount goes on could not be made.
    #[error("cannot make {}: {error}", path.display())]
    MountPoint { path: PathBuf, error: io::Error },
    #[error("cannot keep {} visible: {error}", path.display())]
    Keep { path: PathBuf, error: io::Error },
    #[error("cannot keep {} read-only: {error}", path.display())]
    KeepReadOnly { path: PathBuf, error: io::Error },
    #[error("cannot put {} back: {error}", path.display())]
    PutBack { path: PathBuf, error: io::Error },
    /// A step of the private `/dev` (`what`) failed.
    #[error("cannot make the private /dev ({what}): {cause}")]
    Dev { what: &'static str, cause: Box<dyn std::error::Error + Send + Sync> },
    /// A path holds a NUL byte (no system call can name it).
    #[error(transparent)]
    Nul(#[from] NulError),
}

type Result<T> = std::result::Result<T, MountError>;

fn write_proc(file: &str, text: &str) -> std::io::Result<()> {
    std::fs::write(format!("/proc/self/{file}"), text)
}

/// Enters new user + mount + PID namespaces, mapping the current user to
/// itself.
pub fn enter_namespaces() -> Result<()> {
    let uid = nix::unistd::getuid();
    let gid = nix::unistd::getgid();
    unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWPID)
        .map_err(MountError::Namespaces)?;
    let _ = write_proc("setgroups", "deny");
    write_proc("uid_map", &format!("{uid} {uid} 1")).map_err(MountError::MapUser)?;
    write_proc("gid_map", &format!("{gid} {gid} 1")).map_err(MountError::MapGroup)?;
    Ok(())
}

/// Builds the command's view (see the module doc). Runs in the namespace's
/// init, before the command is forked.
pub fn prepare(spec: &ExecSpec) -> Result<()> {
    mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>)
        .map_err(MountError::MakePrivate)?;
    if let Some(o) = &spec.overlay {
        mount_overlay(&o.target, &o.lowers, &o.upper, &o.work)?;
    }
    for p in &spec.read_only {
        bind_read_only(p)?;
    }
    // A /proc of this PID namespace: the command sees its own processes
    // only, not cassist's or the machine's (nor their environments).
    // Where /proc cannot be mounted (a container that masks parts of its
    // own), the old one stays, and Landlock still keeps the command from
    // reading other processes' memory and environment.
    let _ = mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    );
    if spec.confined {
        if let Some(state) = &spec.state {
            state_views(state)?;
        }
        cover(spec)?;
        minimal_dev()?;
    }
    Ok(())
}

/// Mounts the copy-on-write views of `state` (see [`super::StateViews`]).
/// A path that is missing, shared, or neither a folder nor a file is left
/// as it is.
fn state_views(state: &super::StateViews) -> Result<()> {
    // The shared paths inside a view, cloned before the view covers them.
    let mut shared = Vec::new();
    for s in &state.shared {
        if state.paths.iter().any(|p| s.starts_with(p) && !state.is_shared(p))
            && let Some(fd) = clone_tree(s, false)?
        {
            shared.push((s, fd));
        }
    }
    for path in state.paths.iter().filter(|p| !state.is_shared(p)) {
        let Ok(meta) = path.symlink_metadata() else { continue };
        let under = state.under(path);
        let err = |cause: Box<dyn std::error::Error + Send + Sync>| MountError::StateView { path: path.clone(), cause };
        if meta.is_dir() {
            let (upper, work) = (under.join("upper"), under.join("work"));
            for d in [&upper, &work] {
                std::fs::create_dir_all(d).map_err(|e| err(e.into()))?;
            }
            mount_overlay(path, std::slice::from_ref(path), &upper, &work).map_err(|e| err(e.into()))?;
        } else if meta.is_file() {
            if under.symlink_metadata().is_err() {
                std::fs::create_dir_all(&state.dir).map_err(|e| err(e.into()))?;
                std::fs::copy(path, &under).map_err(|e| err(e.into()))?;
            }
            mount(Some(&under), path, None::<&str>, MsFlags::MS_BIND, None::<&str>).map_err(|e| err(e.into()))?;
        }
    }
    for (path, fd) in &shared {
        move_mount(fd, path)?;
    }
    Ok(())
}

/// Mounts the overlay at `target`.
///
/// `volatile` (Linux 5.10+): the overlay never syncs its upper
/// filesystem. Without it, the end of every sandboxed command (the
/// unmount, when its namespace goes) runs a `syncfs` of the whole
/// filesystem the layers live on — whatever else is dirty on it too —
/// and the command waits for it. Nothing is lost: a layer is a
/// throw-away scratch area that cassist reads after the command ended
/// (from the page cache, like any file), and what cassist keeps of it
/// (store objects, integrated files, the journal) it writes and syncs
/// itself. A `fsync` inside the sandbox becomes a no-op, as the layer
/// does not outlive the workspace.
fn mount_overlay(target: &Path, lowers: &[PathBuf], upper: &Path, work: &Path) -> Result<()> {
    // A volatile overlay leaves `work/incompat/volatile` in its work
    // folder, and the kernel refuses to mount over it again (the layer
    // may have lost writes in a crash). The same layer is mounted again
    // by the next command of the same workspace, and nothing crashed in
    // between that its files depend on: the kernel's own scratch folder
    // goes, as the kernel would clean it anyway.
    let scratch = work.join("work");
    if scratch.join("incompat").symlink_metadata().is_ok() {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    let lowerdir: Vec<String> = lowers.iter().map(|l| l.display().to_string()).collect();
    let base = format!("lowerdir={},upperdir={},workdir={}", lowerdir.join(":"), upper.display(), work.display());
    // `userxattr` keeps overlay metadata in user.* xattrs, which an
    // unprivileged mount may write; older kernels lack it and `volatile`.
    let options = [format!("{base},userxattr,volatile"), format!("{base},userxattr"), base];
    let mut last = Errno::UnknownErrno;
    for o in &options {
        match mount(Some("overlay"), target, Some("overlay"), MsFlags::empty(), Some(o.as_str())) {
            Ok(()) => return Ok(()),
            Err(e) => last = e,
        }
    }
    Err(MountError::Overlay(last))
}

/// `path` (a folder or a file) bind-mounted read-only over itself, with
/// what is mounted below it; nothing when it does not exist.
fn bind_read_only(path: &Path) -> Result<()> {
    if path.symlink_metadata().is_err() {
        return Ok(());
    }
    let err = |error| MountError::ReadOnly { path: path.to_path_buf(), error };
    mount(Some(path), path, None::<&str>, MsFlags::MS_BIND | MsFlags::MS_REC, None::<&str>).map_err(err)?;
    mount(None::<&str>, path, None::<&str>, MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY, None::<&str>)
        .map_err(err)
}

/// What goes over one path.
enum Op {
    /// A private, writable tmpfs (`/tmp`).
    Private,
    /// An empty, read-only tmpfs.
    Hide,
    /// An empty, read-only file (over a hidden file or socket), made
    /// before anything was covered.
    HideFile(OwnedFd),
    /// The original, cloned before anything was covered.
    Keep(OwnedFd),
}

/// What covers one path: a private tmpfs, or (hidden) an empty tmpfs for
/// a folder or an empty file for anything else.
#[derive(Clone, Copy, PartialEq)]
enum Cover {
    Private,
    Folder,
    File,
}

/// Covers the private and hidden folders and the hidden files, keeping
/// what must stay visible under them.
fn cover(spec: &ExecSpec) -> Result<()> {
    let mut covers: Vec<(PathBuf, Cover)> = Vec::new();
    // `/dev/shm` is part of the private `/dev`.
    for t in &super::PRIVATE_TEMP[..2] {
        // `/var/tmp` may be a link to `/tmp`, or missing.
        if let Ok(real) = Path::new(t).canonicalize()
            && real.is_dir()
            && !covers.iter().any(|(c, _)| *c == real)
        {
            covers.push((real, Cover::Private));
        }
    }
    for h in &spec.hide {
        let Ok(meta) = h.metadata() else { continue };
        if !covers.iter().any(|(c, _)| c == h) {
            covers.push((h.clone(), if meta.is_dir() { Cover::Folder } else { Cover::File }));
        }
    }
    // A kept path wins over a cover of the same path.
    covers.retain(|(c, _)| !spec.keep.contains(c));
    let cover_paths: Vec<PathBuf> = covers.iter().map(|(c, _)| c.clone()).collect();
    let writable = |p: &Path| super::spec::may_write(&spec.writable, p);
    let mut ops: Vec<(PathBuf, Op)> = Vec::new();
    // A cover is needed where the original shows (not under a cover, or
    // under something kept); a keep where a cover hides it, or where what
    // is kept around it is read-only and it is not.
    let shown: Vec<&(PathBuf, Cover)> =
        covers.iter().filter(|(c, _)| !matches!(nearest(c, &cover_paths, &spec.keep), Some(Around::Cover))).collect();
    let files: Vec<&PathBuf> = shown.iter().filter(|(_, k)| *k == Cover::File).map(|(c, _)| c).collect();
    let mut empties = empty_files(&files)?.into_iter();
    for (c, kind) in shown {
        let op = match kind {
            Cover::Private => Op::Private,
            Cover::Folder => Op::Hide,
            // One each: `empty_files` made as many as asked.
            Cover::File => match empties.next() {
                Some(fd) => Op::HideFile(fd),
                None => continue,
            },
        };
        ops.push((c.clone(), op));
    }
    for k in &spec.keep {
        let needed = match nearest(k, &cover_paths, &spec.keep) {
            Some(Around::Cover) => true,
            Some(Around::Keep(outer)) => writable(k) != writable(outer),
            None => false,
        };
        if needed && let Some(fd) = clone_tree(k, !writable(k))? {
            ops.push((k.clone(), Op::Keep(fd)));
        }
    }
    // Outermost first: a path's mount point exists once what is around it
    // is in place.
    ops.sort_by_key(|(p, _)| p.components().count());
    for i in 0..ops.len() {
        let (path, op) = &ops[i];
        match op {
            Op::Keep(fd) | Op::HideFile(fd) => move_mount(fd, path)?,
            Op::Private | Op::Hide => {
                let private = matches!(op, Op::Private);
                let mode = if private { "mode=1777" } else { "mode=755" };
                mount(Some("tmpfs"), path, Some("tmpfs"), MsFlags::MS_NOSUID | MsFlags::MS_NODEV, Some(mode))
                    .map_err(|error| MountError::Cover { path: path.clone(), error })?;
                // The mount points of what comes inside.
                for (inner, inner_op) in &ops[i + 1..] {
                    if let Ok(rel) = inner.strip_prefix(path) {
                        let file = match inner_op {
                            Op::Keep(fd) => is_file(fd),
                            Op::HideFile(_) => true,
                            Op::Private | Op::Hide => false,
                        };
                        make_mount_point(path, rel, file)?;
                    }
                }
                if !private {
                    mount(
                        None::<&str>,
                        path,
                        None::<&str>,
                        MsFlags::MS_REMOUNT
                            | MsFlags::MS_BIND
                            | MsFlags::MS_RDONLY
                            | MsFlags::MS_NOSUID
                            | MsFlags::MS_NODEV,
                        None::<&str>,
                    )
                    .map_err(|error| MountError::ReadOnly { path: path.clone(), error })?;
                }
            }
        }
    }
    Ok(())
}

/// One empty, read-only file for each of `targets` (detached mounts to
/// move over them), or none when there are none. The file is made on a
/// scratch tmpfs mounted for a moment over `/tmp` (or the first target's
/// folder; nothing else runs in the namespace yet), cloned once per
/// target, and the scratch tmpfs unmounted: the clones keep the file,
/// which no path leads to any more. Never over `/`: a lookup of `/` does
/// not cross what is mounted over it, so the file would land in the real
/// root.
fn empty_files(targets: &[&PathBuf]) -> Result<Vec<OwnedFd>> {
    let Some(first) = targets.first() else { return Ok(Vec::new()) };
    let tmp = Path::new("/tmp").canonicalize().ok();
    let mut candidates = tmp.as_deref().into_iter().chain(first.parent());
    let Some(at) = candidates.find(|d| d.parent().is_some() && d.is_dir()) else {
        return Err(MountError::Cover { path: first.to_path_buf(), error: Errno::ENOENT });
    };
    let err = |error| MountError::Cover { path: at.to_path_buf(), error };
    mount(
        Some("tmpfs"),
        at,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("mode=755,size=4k"),
    )
    .map_err(err)?;
    let file = at.join("empty");
    let made = std::fs::File::create(&file).and_then(|f| {
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(0o444))
    });
    let clones = match made {
        Ok(()) => targets
            .iter()
            .map(|_| {
                let gone = || MountError::Keep { path: file.clone(), error: io::ErrorKind::NotFound.into() };
                clone_tree(&file, true)?.ok_or_else(gone)
            })
            .collect::<Result<Vec<_>>>(),
        Err(error) => Err(MountError::MountPoint { path: file.clone(), error }),
    };
    nix::mount::umount2(at, nix::mount::MntFlags::MNT_DETACH).map_err(err)?;
    clones
}

/// What is nearest around a path.
enum Around<'a> {
    Cover,
    Keep(&'a Path),
}

/// The nearest folder around `p` (not `p` itself) that is covered or
/// kept; `None` when nothing around it is.
fn nearest<'a>(p: &Path, covers: &'a [PathBuf], keeps: &'a [PathBuf]) -> Option<Around<'a>> {
    let around = |a: &&PathBuf| p != *a && p.starts_with(a);
    let covers = covers.iter().filter(around).map(|a| (a.components().count(), Around::Cover));
    let keeps = keeps.iter().filter(around).map(|a| (a.components().count(), Around::Keep(a.as_path())));
    // The deepest; a keep wins over a cover of the same path.
    covers.chain(keeps).max_by_key(|(depth, a)| (*depth, matches!(a, Around::Keep(_)))).map(|(_, a)| a)
}

/// Makes `base/rel` (its folders, and a folder or an empty file at the
/// end) if missing.
fn make_mount_point(base: &Path, rel: &Path, file: bool) -> Result<()> {
    let target = base.join(rel);
    let err = |error| MountError::MountPoint { path: target.clone(), error };
    if file {
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(err)?;
        }
        if target.symlink_metadata().is_err() {
            std::fs::File::create(&target).map_err(err)?;
        }
        Ok(())
    } else {
        std::fs::create_dir_all(&target).map_err(err)
    }
}

fn is_file(fd: &OwnedFd) -> bool {
    nix::sys::stat::fstat(fd).is_ok_and(|s| s.st_mode & libc::S_IFMT != libc::S_IFDIR)
}

// `open_tree`, `mount_setattr` and `move_mount` (the mount API of Linux
// 5.2 and 5.12) are raw system calls: `nix` has no wrapper for them.
const OPEN_TREE_CLONE: libc::c_uint = 1;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 4;

/// A detached copy of the mount tree at `path` (with what is mounted
/// below it), read-only if asked; `None` when `path` does not exist.
fn clone_tree(path: &Path, read_only: bool) -> Result<Option<OwnedFd>> {
    let c = CString::new(path.as_os_str().as_bytes())?;
    let flags = OPEN_TREE_CLONE | AT_RECURSIVE | libc::O_CLOEXEC as libc::c_uint;
    // SAFETY: a valid C string; on success the fd is ours.
    let fd = unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, c.as_ptr(), flags) };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::NotFound {
            return Ok(None);
        }
        return Err(MountError::Keep { path: path.to_path_buf(), error: e });
    }
    // SAFETY: a fresh fd owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    if read_only {
        #[repr(C)]
        struct MountAttr {
            attr_set: u64,
            attr_clr: u64,
            propagation: u64,
            userns_fd: u64,
        }
        const MOUNT_ATTR_RDONLY: u64 = 1;
        let attr = MountAttr { attr_set: MOUNT_ATTR_RDONLY, attr_clr: 0, propagation: 0, userns_fd: 0 };
        let empty = c"";
        // SAFETY: a valid fd, C string and mount_attr of the size given.
        let r = unsafe {
            libc::syscall(
                libc::SYS_mount_setattr,
                fd.as_raw_fd(),
                empty.as_ptr(),
                (libc::AT_EMPTY_PATH as libc::c_uint) | AT_RECURSIVE,
                &attr as *const MountAttr,
                std::mem::size_of::<MountAttr>(),
            )
        };
        if r != 0 {
            return Err(MountError::KeepReadOnly { path: path.to_path_buf(), error: io::Error::last_os_error() });
        }
    }
    Ok(Some(fd))
}

/// Attaches the detached mount `fd` at `path`.
fn move_mount(fd: &OwnedFd, path: &Path) -> Result<()> {
    let c = CString::new(path.as_os_str().as_bytes())?;
    let empty = c"";
    // SAFETY: a valid fd and C strings.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            fd.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_FDCWD,
            c.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if r != 0 {
        return Err(MountError::PutBack { path: path.to_path_buf(), error: io::Error::last_os_error() });
    }
    Ok(())
}

/// Replaces `/dev` by a read-only tmpfs holding the [`SAFE_DEVICES`]
/// (bind-mounted from the machine's), `fd`/`stdin`/`stdout`/`stderr`
/// links, a private `devpts` (ptys of this sandbox only; `ptmx` links into
/// it) and a private writable `/dev/shm`. No `tty`, no console, no block
/// device: a write to a name that is not there fails (read-only).
fn minimal_dev() -> Result<()> {
    let mut nodes = Vec::new();
    for dev in SAFE_DEVICES {
        if let Some(fd) = clone_tree(Path::new(dev), false)? {
            nodes.push((dev, fd));
        }
    }
    let dev = Path::new("/dev");
    fn err(what: &'static str, cause: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> MountError {
        MountError::Dev { what, cause: cause.into() }
    }
    mount(Some("tmpfs"), dev, Some("tmpfs"), MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC, Some("mode=755"))
        .map_err(|e| err("tmpfs", e))?;
    for (name, fd) in &nodes {
        let path = Path::new(name);
        std::fs::File::create(path).map_err(|e| err(name, e))?;
        move_mount(fd, path)?;
    }
    for (link, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("ptmx", "pts/ptmx"),
    ] {
        std::os::unix::fs::symlink(target, dev.join(link)).map_err(|e| err(link, e))?;
    }
    for sub in ["pts", "shm"] {
        std::fs::create_dir(dev.join(sub)).map_err(|e| err(sub, e))?;
    }
    mount(
        Some("devpts"),
        "/dev/pts",
        Some("devpts"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=620"),
    )
    .map_err(|e| err("devpts", e))?;
    mount(Some("tmpfs"), "/dev/shm", Some("tmpfs"), MsFlags::MS_NOSUID | MsFlags::MS_NODEV, Some("mode=1777"))
        .map_err(|e| err("shm", e))?;
    mount(
        None::<&str>,
        dev,
        None::<&str>,
        MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(|e| err("read-only", e))
}
