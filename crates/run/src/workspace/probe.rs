//! Which workspace mode a machine supports ([`detect_mode`]): a probe of
//! the namespaces and mounts a confined command needs, run once and
//! remembered while nothing it depends on changes.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::Mode;
use super::cleanup::remove_tree;
use cassist_core::paths::Stamp;
use cassist_sandbox::process;

/// Why the probe found that copy-on-write workspaces cannot be used.
#[derive(Debug, thiserror::Error)]
enum ProbeError {
    /// Its folder could not be made.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// Its process could not be run.
    #[error(transparent)]
    Run(#[from] process::RunError),
    /// The probe failed, saying why (its output, trimmed: empty when it
    /// said nothing).
    #[error("{0}")]
    Failed(String),
}

/// The mode this machine supports for `root`, probed once per process by
/// building in new namespaces the view a confined command gets (the
/// overlay over the project with its upper dir under `parent`, so both
/// filesystems are tried, private `/tmp` and `/dev`, hidden and kept
/// folders), through the cassist binary `exe`. A probe that worked is
/// remembered in `.cassist/cache/sandbox-probe` while nothing it depends
/// on changes (`probe_key`): it costs a process and a dozen mounts, more
/// than the rest of a run's set-up. `CASSIST_WORKSPACE=copy` forces the
/// copy mode. The second value says why overlay is not used.
pub fn detect_mode(exe: &Path, root: &Path, parent: &Path) -> (Mode, Option<String>) {
    static PROBE: OnceLock<Result<(), ProbeError>> = OnceLock::new();
    if std::env::var("CASSIST_WORKSPACE").is_ok_and(|v| v == "copy") {
        return (Mode::Copy, None);
    }
    if !cassist_sandbox::sandbox::overlay_safe(root) || !cassist_sandbox::sandbox::overlay_safe(parent) {
        return (
            Mode::Copy,
            Some(format!("the path {} holds `,` or `:`, which overlayfs cannot mount", root.display())),
        );
    }
    let probe = PROBE.get_or_init(|| {
        let cache = probe_cache(root);
        let key = probe_key(exe, root, parent);
        if std::fs::read_to_string(&cache).is_ok_and(|k| k == key) {
            return Ok(());
        }
        std::fs::create_dir_all(parent)?;
        let dir = tempfile::Builder::new().prefix("probe-").tempdir_in(parent)?;
        let mut probe = process::Command::inheriting([
            exe.as_os_str(),
            "__sandbox-probe".as_ref(),
            dir.path().as_os_str(),
            root.as_os_str(),
        ]);
        let (k, v) = cassist_sandbox::sandbox::WRAPPER_ENV;
        probe.env.push((k.into(), v.into()));
        let done = process::run(&probe, &process::Redactor::default(), &process::Cancel::new())?;
        remove_tree(dir.path());
        // The probe prints only its reason for failing.
        if !done.success() {
            return Err(ProbeError::Failed(done.tail.trim().to_owned()));
        }
        if cassist_core::fsx::ensure_state_dir(root).is_ok() {
            let _ = cassist_core::fsx::write_atomic(&cache, key.as_bytes());
        }
        Ok(())
    });
    match probe {
        Ok(()) => (Mode::Overlay, None),
        Err(ProbeError::Failed(said)) if said.is_empty() => {
            (Mode::Copy, Some("user namespaces or overlayfs are unavailable".into()))
        }
        Err(why) => (Mode::Copy, Some(why.to_string())),
    }
}

/// Where a probe that worked is remembered.
fn probe_cache(root: &Path) -> PathBuf {
    cassist_core::fsx::state_dir(root).join("cache").join("sandbox-probe")
}

/// Forgets a probe that worked: a command's sandbox could not be set up
/// after all (the machine changed in a way `probe_key` does not see).
pub fn forget_probe(root: &Path) {
    let _ = std::fs::remove_file(probe_cache(root));
}

/// What the probe's answer depends on: the cassist binary (path, size,
/// mtime), the kernel, the settings that allow user namespaces, the user,
/// and the two folders.
fn probe_key(exe: &Path, root: &Path, parent: &Path) -> String {
    let exe_stamp = std::fs::metadata(exe).map(|m| Stamp::of(&m)).map(|s| format!("{} {}", s.size, s.mtime_ns));
    let mut key = format!("exe {} {}\n", exe.display(), exe_stamp.unwrap_or_default());
    for setting in [
        "kernel/osrelease",
        "user/max_user_namespaces",
        "kernel/unprivileged_userns_clone",
        "kernel/apparmor_restrict_unprivileged_userns",
    ] {
        let value = std::fs::read_to_string(format!("/proc/sys/{setting}")).unwrap_or_else(|_| "-".into());
        key.push_str(&format!("{setting} {}\n", value.trim()));
    }
    key.push_str(&format!("uid {}\nroot {}\nparent {}\n", nix::unistd::getuid(), root.display(), parent.display()));
    key
}
