//! What the unit tests of the workspace modules share.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Writes `files` (path → content; `None`: a whiteout) under `dir`;
/// false when whiteouts cannot be made here.
pub(super) fn layer(dir: &Path, files: &[(&str, Option<&str>)]) -> bool {
    for (rel, content) in files {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        match content {
            Some(c) => std::fs::write(&p, c).unwrap(),
            None => {
                let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
                // SAFETY: a valid path; a 0/0 character device is what
                // overlayfs writes for a deleted entry.
                if unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o600, 0) } != 0 {
                    return false;
                }
            }
        }
    }
    true
}
