//! What this machine supports (Landlock, user namespaces, paths an
//! overlay can name) and the probe that tries the whole view once.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, fork};

use super::{ExecSpec, Overlay, WRAPPER_ENV, mounts};

/// The Landlock ABI of the running kernel (0: not available).
///
/// A raw system call: the `landlock` crate asks the same, but keeps the
/// answer to itself, and `nix` has no wrapper.
pub fn landlock_abi() -> i64 {
    // SAFETY: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
    // only returns the ABI version.
    let r = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<u8>(), 0usize, 1u32) };
    if r < 0 { 0 } else { r }
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

/// `cassist __sandbox-probe DIR [LOWER]`: builds, in new namespaces, the
/// view a confined command gets — an overlay over LOWER (the project: its
/// filesystem must support being a lower dir) with its upper and work dirs
/// under DIR, a private `/tmp` and `/dev`, DIR hidden with LOWER and (read-
/// only) the upper dir kept, and a file in it hidden as secrets are —
/// and exits 0 when all of it works here.
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
    let secret = upper.join("secret");
    if std::fs::write(&secret, "").is_err() {
        std::process::exit(1);
    }
    let spec = ExecSpec {
        namespaces: true,
        overlay: Some(Overlay { target: lower.clone(), lowers: vec![lower.clone()], upper: upper.clone(), work }),
        confined: true,
        hide: vec![dir.to_path_buf(), secret],
        keep: vec![lower.clone(), upper],
        cwd: lower,
        ..ExecSpec::default()
    };
    if let Err(e) = mounts::enter_namespaces() {
        crate::say(format_args!("{e}"));
        std::process::exit(1);
    }
    // Every confined command gets a network namespace of its own.
    if let Err(e) = super::net::enter(&super::Network::Isolated) {
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
