//! Copying and looking through folder trees: files with their modes,
//! symlinks as symlinks, never followed; anything else left out, never
//! opened.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::Error;
use crate::entry::{self, Kind};
use cassist_core::paths::project_files;

/// Copies the tree `from` to `to` (which must not exist): folders, files
/// with their modes, symlinks as symlinks; nothing else.
pub(super) fn copy_tree(from: &Path, to: &Path) -> Result<(), Error> {
    for entry in walkdir::WalkDir::new(from) {
        let entry = entry?;
        let rel = entry.path().strip_prefix(from).unwrap_or(Path::new(""));
        let dest = to.join(rel);
        let ft = entry.file_type();
        if ft.is_dir() {
            std::fs::create_dir(&dest)?;
            let mode = entry.metadata()?.mode();
            std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(mode & 0o7777))?;
        } else {
            copy_entry(entry.path(), &dest, &entry.metadata()?)?;
        }
    }
    Ok(())
}

/// Copies the project's files and symlinks into `to` (anything else is
/// left out, never opened), contents streamed.
pub(super) fn copy_project(root: &Path, to: &Path) -> std::io::Result<()> {
    for (rel, meta) in project_files(root) {
        let src = root.join(&rel);
        let dst = to.join(&rel);
        let kind = entry::kind(&meta);
        if !matches!(kind, Kind::File | Kind::Symlink) {
            continue;
        }
        if let Some(parent) = dst.parent() {
            std::fs::create_dir_all(parent)?;
        }
        copy_entry(&src, &dst, &meta)?;
    }
    Ok(())
}

/// Copies a file (contents streamed, permissions kept) or a symlink (as a
/// symlink) at `src`, whose lstat is `meta`, to the new path `dst`;
/// anything else is left out, never opened.
pub(super) fn copy_entry(src: &Path, dst: &Path, meta: &std::fs::Metadata) -> std::io::Result<()> {
    match entry::kind(meta) {
        Kind::Symlink => std::os::unix::fs::symlink(std::fs::read_link(src)?, dst),
        Kind::File => {
            std::fs::copy(src, dst)?;
            std::fs::set_permissions(dst, std::fs::Permissions::from_mode(meta.mode() & 0o7777))
        }
        _ => Ok(()),
    }
}

/// Whether a folder of a layer holds anything but folders and whiteouts
/// (what deleting files leaves): something was written below it.
pub(super) fn writes_below(dir: &Path) -> bool {
    walkdir::WalkDir::new(dir)
        .min_depth(1)
        .into_iter()
        .flatten()
        .any(|e| !e.file_type().is_dir() && !e.metadata().is_ok_and(|m| entry::is_whiteout(&m)))
}

/// Whether `rel` leads from `root` through folders only (no symlink on
/// the way: what it names is inside `root`).
pub(super) fn plain_path(root: &Path, rel: &str) -> bool {
    let mut at = root.to_path_buf();
    let parts: Vec<&str> = rel.split('/').collect();
    parts[..parts.len() - 1].iter().all(|part| {
        at.push(part);
        std::fs::symlink_metadata(&at).is_ok_and(|m| m.is_dir())
    })
}

/// Entries below `dir` but folders (relative to `root`), not following
/// symlinks.
pub(super) fn files_below(dir: &Path, root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in walkdir::WalkDir::new(dir).into_iter().flatten() {
        if entry.file_type().is_dir() {
            continue;
        }
        if let Ok(rel) = entry.path().strip_prefix(root) {
            out.push(rel.to_path_buf());
        }
    }
    out
}

/// A task's name as part of a folder name: ASCII letters, digits, `-` and
/// `.` kept, anything else as `_`, at most 60 characters.
pub(super) fn sanitize(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '_' }).take(60).collect()
}
