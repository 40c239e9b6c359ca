//! The `.cassist/` folder: atomic writes. The content-addressed store and
//! the lock file build on this.

use std::io::Write;
use std::path::{Path, PathBuf};

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
/// and a rename, so a reader never sees half a file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    // Readable like any file the user writes (tempfile makes 0600).
    let umask = {
        // SAFETY: umask is always safe; set back at once.
        let m = unsafe { libc::umask(0o022) };
        unsafe { libc::umask(m) };
        m
    };
    use std::os::unix::fs::PermissionsExt;
    tmp.as_file().set_permissions(std::fs::Permissions::from_mode(0o666 & !(umask as u32)))?;
    tmp.as_file().sync_data()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
