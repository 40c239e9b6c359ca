//! The one check of what the kernel offers the sandbox. A test that needs
//! it asks [`sandbox_or_skip`]: where the feature is missing the test is
//! skipped, saying so, unless `CASSIST_REQUIRE_SANDBOX=1` (set by
//! `.ci/run`) makes that a failure, so that a CI machine without it cannot
//! be green while testing nothing.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use super::CASSIST;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sandbox {
    /// Copy-on-write overlay workspaces: unprivileged user, mount and PID
    /// namespaces and overlayfs (`cassist __sandbox-probe`).
    Overlay,
    /// Landlock filesystem rules.
    Landlock,
    /// A cgroup this process may write with the memory and pids
    /// controllers (v2 delegated, or v1 hierarchies of them).
    Cgroup,
}

impl std::fmt::Display for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Sandbox::Overlay => "overlay workspaces (user namespaces and overlayfs)",
            Sandbox::Landlock => "Landlock",
            Sandbox::Cgroup => "a writable cgroup with the memory and pids controllers",
        })
    }
}

/// Whether `what` works here. When it does not: a failure under
/// `CASSIST_REQUIRE_SANDBOX=1`, else `false` with a SKIPPED line (the
/// caller then skips the test, or checks the behaviour without it).
#[track_caller]
pub fn sandbox_or_skip(what: Sandbox) -> bool {
    let Err(why) = available(what) else { return true };
    if std::env::var("CASSIST_REQUIRE_SANDBOX").is_ok_and(|v| v == "1") {
        panic!("{what} unavailable here ({why}), and CASSIST_REQUIRE_SANDBOX=1 requires it");
    }
    eprintln!(
        "SKIPPED: {what} unavailable here ({why}): what needs it is not tested \
         (CASSIST_REQUIRE_SANDBOX=1 makes this a failure)"
    );
    false
}

fn available(what: Sandbox) -> &'static Result<(), String> {
    static OVERLAY: OnceLock<Result<(), String>> = OnceLock::new();
    static LANDLOCK: OnceLock<Result<(), String>> = OnceLock::new();
    static CGROUP: OnceLock<Result<(), String>> = OnceLock::new();
    match what {
        Sandbox::Overlay => OVERLAY.get_or_init(probe_overlay),
        Sandbox::Landlock => LANDLOCK.get_or_init(|| match cassist_sandbox::sandbox::landlock_abi() {
            0 => Err("the kernel has no Landlock ABI".into()),
            _ => Ok(()),
        }),
        Sandbox::Cgroup => CGROUP.get_or_init(find_cgroup),
    }
}

/// Where cassist looks for its cgroups (nothing written): both
/// controllers found, in folders this process may write.
fn find_cgroup() -> Result<(), String> {
    let found = cassist_sandbox::sandbox::find_cgroups();
    for (controller, has) in [("memory", found.iter().any(|h| h.memory)), ("pids", found.iter().any(|h| h.pids))] {
        if !has {
            return Err(format!("no cgroup with the {controller} controller"));
        }
    }
    for h in &found {
        nix::unistd::access(&h.own, nix::unistd::AccessFlags::W_OK)
            .map_err(|e| format!("{} is not writable: {e}", h.own.display()))?;
    }
    Ok(())
}

/// The probe cassist runs before choosing the overlay, run with the real
/// binary (cassist's own probe re-executes the current executable, which
/// in a test is this test binary).
fn probe_overlay() -> Result<(), String> {
    if std::env::var("CASSIST_WORKSPACE").is_ok_and(|v| v == "copy") {
        return Err("CASSIST_WORKSPACE=copy".into());
    }
    let dir = tempfile::Builder::new().prefix("cassist-test-probe-").tempdir().map_err(|e| e.to_string())?;
    let out = Command::new(CASSIST)
        .arg("__sandbox-probe")
        .arg(dir.path())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    cassist_run::workspace::remove_tree(dir.path());
    if out.status.success() {
        Ok(())
    } else {
        let why = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        Err(if why.is_empty() { format!("{} failed: {}", Path::new(CASSIST).display(), out.status) } else { why })
    }
}
