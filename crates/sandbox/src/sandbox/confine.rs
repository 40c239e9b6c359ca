//! The command's own last steps, in its own process, after the mounts and
//! just before `exec` — the same in every mode:
//!
//! - signals as a fresh process has them (nothing blocked, SIGPIPE back to
//!   its default: cassist's runtime ignores it);
//! - its own session: no controlling terminal, so `/dev/tty` cannot be
//!   opened and nothing can be pushed into the user's shell (TIOCSTI);
//! - file descriptors 0–2 only (`close_range`): nothing cassist or the
//!   wrapper held open reaches it;
//! - below `full`: every capability dropped (bounding, ambient, effective,
//!   permitted, inheritable; root's exec fix-ups locked off), so it cannot
//!   mount, unmount (its overlay, to reach the real tree) or bypass a
//!   permission; and `no_new_privs`, so no setuid program gives any back;
//! - Landlock ([`ruleset`]), built before the capabilities go (it opens
//!   the paths it names) and enforced after.

use std::ffi::CString;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, BitFlags, Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, Scope,
    path_beneath_rules,
};

use nix::sys::signal::{SigHandler, Signal, signal};

use super::{ExecSpec, NOT_FOUND, fail};

/// Device nodes every command may read, write and ioctl: harmless ones.
pub const SAFE_DEVICES: [&str; 5] = ["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"];

/// The Landlock ABI cassist asks for (downgraded to what the kernel has):
/// 6 brings signal and abstract unix socket scoping, 9 the connections to
/// pathname unix sockets.
const WANTED_ABI: ABI = ABI::V9;

/// Confines this process as `spec` says and executes the command; never
/// returns.
pub fn exec_command(spec: &ExecSpec, argv: &[CString]) -> ! {
    reset_signals();
    if let Err(e) = nix::unistd::chdir(&spec.cwd) {
        fail(format!("cannot enter {}: {e}", spec.cwd.display()));
    }
    if let Err(e) = nix::unistd::setsid() {
        fail(format!("cannot start a session: {e}"));
    }
    close_fds_above_stderr();
    let ruleset = match spec.landlock {
        true => match ruleset(spec) {
            Ok(r) => Some(r),
            Err(e) => fail(format!("cannot build the Landlock sandbox: {e}")),
        },
        false => None,
    };
    if spec.confined {
        if let Err(e) = drop_capabilities() {
            fail(format!("cannot drop capabilities: {e}"));
        }
        if let Err(e) = nix::sys::prctl::set_no_new_privs() {
            fail(format!("cannot set no_new_privs: {e}"));
        }
    }
    if let Some(r) = ruleset
        && let Err(e) = r.restrict_self()
    {
        fail(format!("cannot apply the Landlock sandbox: {e}"));
    }
    let err = nix::unistd::execvp(&argv[0], argv).err();
    let name = spec.argv[0].to_string_lossy();
    match err {
        Some(nix::errno::Errno::ENOENT) => crate::say(format_args!("cassist: cannot run `{name}`: command not found")),
        Some(e) => crate::say(format_args!("cassist: cannot run `{name}`: {e}")),
        None => {}
    }
    std::process::exit(NOT_FOUND);
}

fn reset_signals() {
    let _ = nix::sys::signal::SigSet::empty().thread_set_mask();
    // SAFETY: restoring the default action installs no handler.
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) };
}

/// Closes every file descriptor above 2. `close_range` is a raw system
/// call: `nix` has no wrapper, and glibc's needs glibc 2.34 where the
/// program runs.
fn close_fds_above_stderr() {
    // SAFETY: close_range on our own fds; nothing of ours above 2 is used
    // any more in this process, except what Landlock opens afterwards.
    let r = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
    if r != 0 {
        // Before Linux 5.9: one by one.
        let max = nix::unistd::sysconf(nix::unistd::SysconfVar::OPEN_MAX).ok().flatten().unwrap_or(1024);
        for fd in 3..max as i32 {
            // Fds of this process (or none): nothing of ours above 2 is used
            // any more.
            let _ = nix::unistd::close(fd);
        }
    }
}

/// The Landlock rules of a command confined by `spec`:
///
/// - read and execute everywhere ([`readable`]: in copy mode, everywhere
///   but `/dev` and the hidden folders and files), and connect to the unix
///   sockets there (ABI ≥ 9: a hidden socket, the ssh agent's, cannot be
///   reached in copy mode either);
/// - read and write (create, remove, rename, truncate) beneath
///   `spec.writable`, but never create a device node, and never ioctl a
///   device there; in copy mode a writable folder holding a hidden path
///   (a `sandbox { hide }` path in an agent's state folder) is written
///   only, its reading left to [`readable`], which leaves the hidden path
///   out;
/// - read, write and ioctl the [`SAFE_DEVICES`], and with a private
///   `devpts` its own ptys; no other device node can be opened for writing
///   or sent an ioctl (a block device, the user's terminal);
/// - no signal to a process outside its domain (cassist, the wrapper,
///   another task) and no connection to an abstract unix socket made
///   outside it (ABI ≥ 6).
///
/// Rules for paths that do not exist are left out.
fn ruleset(spec: &ExecSpec) -> Result<RulesetCreated, landlock::RulesetError> {
    let abi = WANTED_ABI;
    let read = AccessFs::from_read(abi) | AccessFs::ResolveUnix;
    let write = AccessFs::from_write(abi) & !(AccessFs::MakeChar | AccessFs::MakeBlock | AccessFs::IoctlDev);
    let device: BitFlags<AccessFs> = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev;
    let own_ptys = spec.namespaces && spec.confined;
    let ptys: &[&Path] = if own_ptys { &[Path::new("/dev/pts")] } else { &[] };
    let hidden = excluded(spec);
    let (write_only, read_write): (Vec<&PathBuf>, Vec<&PathBuf>) =
        spec.writable.iter().partition(|w| hidden.iter().any(|h| h != *w && h.starts_with(w)));
    Ruleset::default()
        .handle_access(AccessFs::from_all(abi))?
        .scope(Scope::Signal | Scope::AbstractUnixSocket)?
        .create()?
        .add_rules(path_beneath_rules(readable(spec), read))?
        .add_rules(path_beneath_rules(read_write, read | write))?
        .add_rules(path_beneath_rules(write_only, write))?
        .add_rules(path_beneath_rules(SAFE_DEVICES, device))?
        .add_rules(path_beneath_rules(ptys, device))
}

/// What a command may read: everything (with namespaces, what it must not
/// see is not mounted in its view). In copy mode, where the machine's
/// `/dev` and every task's folders are in its view, everything but `/dev`
/// (the user's terminal: its keystrokes) and the hidden folders and files
/// (other tasks' workspaces and io folders, the project's `.cassist/`, the
/// user's secrets), except what it keeps or writes there (but what is
/// hidden inside that). Listing a folder on the way to an exception (`/`,
/// `/tmp`, a HOME holding `.ssh`) is refused.
fn readable(spec: &ExecSpec) -> Vec<PathBuf> {
    if spec.namespaces || !spec.confined {
        return vec![PathBuf::from("/")];
    }
    let excluded = excluded(spec);
    let mut out = Vec::new();
    readable_beside(Path::new("/"), &excluded, &mut out);
    let inside = |p: &PathBuf| excluded.iter().any(|e| p.starts_with(e));
    for kept in spec.keep.iter().chain(&spec.writable).filter(|p| inside(p)) {
        if excluded.iter().any(|e| e != kept && e.starts_with(kept)) {
            readable_beside(kept, &excluded, &mut out);
        } else {
            out.push(kept.clone());
        }
    }
    out
}

/// What a command confined by `spec` may not read in copy mode (with
/// namespaces, or unconfined: nothing, what it must not see is not in its
/// view): `/dev` and the hidden paths that exist.
fn excluded(spec: &ExecSpec) -> Vec<PathBuf> {
    if spec.namespaces || !spec.confined {
        return Vec::new();
    }
    let mut excluded: Vec<PathBuf> = vec![PathBuf::from("/dev")];
    excluded.extend(spec.hide.iter().filter(|h| h.symlink_metadata().is_ok()).cloned());
    excluded
}

/// Collects the entries of `dir` (which holds an excluded path) that hold
/// none, going down into those that do.
fn readable_beside(dir: &Path, excluded: &[PathBuf], out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let p = entry.path();
        if excluded.contains(&p) {
            continue;
        }
        // A rule follows a link: one leading to or around an excluded
        // path would open it (its target is walked where it lies).
        if entry.file_type().is_ok_and(|t| t.is_symlink())
            && p.canonicalize().is_ok_and(|real| excluded.iter().any(|e| e.starts_with(&real) || real.starts_with(e)))
        {
            continue;
        }
        if excluded.iter().any(|e| e.starts_with(&p)) {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                readable_beside(&p, excluded, out);
            }
        } else {
            out.push(p);
        }
    }
}

/// Drops every capability: out of the bounding set (nothing can come back
/// by exec), the ambient set, and the effective, permitted and inheritable
/// sets; root's fix-ups on exec and setuid are locked off. Where this
/// process has no `CAP_SETPCAP` it has nothing to drop from the bounding
/// set, and the rest still holds.
fn drop_capabilities() -> std::io::Result<()> {
    let secure = libc::SECBIT_NOROOT
        | libc::SECBIT_NOROOT_LOCKED
        | libc::SECBIT_NO_SETUID_FIXUP
        | libc::SECBIT_NO_SETUID_FIXUP_LOCKED
        | libc::SECBIT_KEEP_CAPS_LOCKED;
    // SAFETY: plain prctl calls.
    unsafe {
        libc::prctl(libc::PR_SET_SECUREBITS, secure as libc::c_ulong, 0, 0, 0);
        for cap in 0..64 {
            if libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) != 0
                && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL)
            {
                // Past the last capability of this kernel.
                break;
            }
        }
        libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong, 0, 0, 0);
    }
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    // `capset` is a raw system call: neither `nix` nor `libc` wraps it.
    const VERSION_3: u32 = 0x2008_0522;
    let header = Header { version: VERSION_3, pid: 0 };
    let data = [Data { effective: 0, permitted: 0, inheritable: 0 }; 2];
    // SAFETY: capset with a v3 header and its two data structs.
    if unsafe { libc::syscall(libc::SYS_capset, &header as *const Header, data.as_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
