//! Files cassist writes for itself: atomic writes and the `.cassist/` state
//! folder. A leaf: imports nothing of the crate.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// How every temporary file cassist makes starts (in the user's tree, in
/// `.cassist/`, beside a report): a killed cassist's leftovers are found
/// by this name and removed ([`crate::journal`]).
pub const TMP_PREFIX: &str = ".cassist-tmp-";

/// The start of this process's temp file names: [`TMP_PREFIX`] and the
/// pid, so that a sweep of cassist's own folders removes only the
/// leftovers of a cassist that is gone, never another running one's
/// ([`temp_owner`]).
pub fn temp_prefix() -> String {
    format!("{TMP_PREFIX}{}-", std::process::id())
}

/// A new temp file name of this process ([`temp_prefix`], a counter and
/// the time: never the same twice, across threads or runs).
pub fn temp_name() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    format!("{}{n}-{nanos}", temp_prefix())
}

/// Whether the cassist process `pid` (named in a temp file, a workspace's
/// owner file or a layers folder) still runs: a process with that pid
/// exists and is a cassist (a reused pid is not).
pub fn cassist_alive(pid: i32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
        && std::fs::read_to_string(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.contains("cassist"))
}

/// The pid in a temp file's name made with [`temp_prefix`]; `None` for a
/// name that is not a temp file, or holds no pid.
pub fn temp_owner(name: &[u8]) -> Option<u32> {
    let rest = name.strip_prefix(TMP_PREFIX.as_bytes())?;
    let end = rest.iter().position(|&b| b == b'-')?;
    std::str::from_utf8(&rest[..end]).ok()?.parse().ok()
}

/// The state folder of a project.
pub fn state_dir(root: &Path) -> PathBuf {
    root.join(".cassist")
}

/// Creates `.cassist/` with a `.gitignore` that keeps it out of git.
pub fn ensure_state_dir(root: &Path) -> std::io::Result<PathBuf> {
    let dir = state_dir(root);
    std::fs::create_dir_all(&dir)?;
    let ignore = dir.join(".gitignore");
    if !ignore.exists() {
        write_atomic(&ignore, b"# cassist's own state; cassist.lock at the project root is the file to commit\n*\n")?;
    }
    Ok(dir)
}

/// Writes `bytes` to `path` through a temporary file in the same folder
/// and a rename, so a reader never sees half a file. The file gets the
/// mode any file the user writes gets (`0o666` less the umask; tempfile
/// makes `0o600`).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    replace(path, bytes, true)
}

/// [`write_atomic`] for a cache cassist can rebuild: not synced to disk
/// (a reader still never sees half a file; after a power cut the file may
/// be the old one, or empty, and its reader starts over), so that a run
/// pays no disk flush for its caches.
pub fn write_cache(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    replace(path, bytes, false)
}

fn replace(path: &Path, bytes: &[u8], sync: bool) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let prefix = temp_prefix();
    let mut tmp = tempfile::Builder::new().prefix(&prefix).tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().set_permissions(std::fs::Permissions::from_mode(0o666 & !umask()))?;
    if sync {
        tmp.as_file().sync_data()?;
    }
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Makes the entries of folder `dir` (a rename, a removal) durable.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// The process's umask, read once from `/proc/self/status` (`Umask:`
/// line). Reading it with `umask(2)` means setting it, which would race
/// with other threads creating files; cassist never changes its umask, so
/// the first reading holds. `0o022` where `/proc` does not say.
fn umask() -> u32 {
    static UMASK: OnceLock<u32> = OnceLock::new();
    *UMASK.get_or_init(|| {
        std::fs::read_to_string("/proc/self/status").ok().as_deref().and_then(parse_umask).unwrap_or(0o022)
    })
}

/// The `Umask:` value of a `/proc/<pid>/status` text (octal).
fn parse_umask(status: &str) -> Option<u32> {
    let line = status.lines().find_map(|l| l.strip_prefix("Umask:"))?;
    u32::from_str_radix(line.trim(), 8).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_umask_line() {
        assert_eq!(parse_umask("Name:\tcassist\nUmask:\t0027\nState:\tR\n"), Some(0o027));
        assert_eq!(parse_umask("Name:\tcassist\n"), None);
    }

    #[test]
    fn atomic_writes_get_the_mode_of_a_plain_write() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain");
        std::fs::write(&plain, b"x").unwrap();
        let atomic = dir.path().join("sub").join("atomic");
        write_atomic(&atomic, b"y").unwrap();
        assert_eq!(std::fs::read(&atomic).unwrap(), b"y");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&atomic), mode(&plain));
    }
}
