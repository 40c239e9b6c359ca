//! A stack of read-only layers, top first, read as overlayfs shows them
//! merged ([`Lowers`]).

use std::cell::RefCell;
use std::collections::HashMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The read-only layers under a writable one, top first, as overlayfs
/// shows them merged: an entry of a higher layer hides the same path
/// below; a whiteout (a 0/0 character device) deletes it; an opaque folder
/// hides the folders of the same path below.
pub(super) struct Lowers<'a> {
    layers: &'a [PathBuf],
    /// The layers that show each folder looked up so far (empty: no folder
    /// there in the merged view): the folders on a path's way are looked
    /// up once, not once for every entry below them.
    folders: RefCell<HashMap<PathBuf, Vec<&'a Path>>>,
}

/// What [`Lowers::walk`] calls for each entry: `(rel, real, is_dir, from)`;
/// a folder is entered when it returns true.
pub(super) type Visit<'v> = dyn FnMut(&Path, &Path, bool, &[&Path]) -> bool + 'v;

/// One path in the merged view.
enum Merged<'a> {
    Absent,
    /// A file (or symlink, or anything not a folder), in this layer.
    Entry(&'a Path),
    /// A folder: the layers that show their part of it, top first.
    Folder(Vec<&'a Path>),
}

impl<'a> Lowers<'a> {
    pub(super) fn new(layers: &'a [PathBuf]) -> Lowers<'a> {
        Lowers { layers, folders: RefCell::new(HashMap::new()) }
    }

    /// `rel_dir/name` seen through `layers` (those showing `rel_dir`).
    fn step(rel: &Path, layers: &[&'a Path]) -> Merged<'a> {
        let mut folders = Vec::new();
        for layer in layers {
            let p = layer.join(rel);
            let Ok(m) = std::fs::symlink_metadata(&p) else { continue };
            if m.is_dir() {
                folders.push(*layer);
                if is_opaque(&p) {
                    break;
                }
            } else if !folders.is_empty() || (m.file_type().is_char_device() && m.rdev() == 0) {
                // Hidden by a folder above, or deleted.
                break;
            } else {
                return Merged::Entry(layer);
            }
        }
        if folders.is_empty() { Merged::Absent } else { Merged::Folder(folders) }
    }

    fn merged(&self, rel: &Path) -> Merged<'a> {
        let Some(parent) = rel.parent() else { return Merged::Folder(self.all()) };
        let layers = self.folder(parent);
        if layers.is_empty() { Merged::Absent } else { Lowers::step(rel, &layers) }
    }

    fn all(&self) -> Vec<&'a Path> {
        self.layers.iter().map(PathBuf::as_path).collect()
    }

    /// The layers that show the folder `dir`, top first; empty when the
    /// merged view has no folder there.
    fn folder(&self, dir: &Path) -> Vec<&'a Path> {
        if dir.as_os_str().is_empty() {
            return self.all();
        }
        if let Some(f) = self.folders.borrow().get(dir) {
            return f.clone();
        }
        let f = match self.merged(dir) {
            Merged::Folder(f) => f,
            _ => Vec::new(),
        };
        self.folders.borrow_mut().insert(dir.to_path_buf(), f.clone());
        f
    }

    /// Where the entry the lowers show at `rel` really is (a file's layer,
    /// or the topmost part of a folder); `None` when they show nothing.
    pub(super) fn path(&self, rel: &Path) -> Option<PathBuf> {
        match self.merged(rel) {
            Merged::Absent => None,
            Merged::Entry(layer) => Some(layer.join(rel)),
            Merged::Folder(f) => f.first().map(|layer| layer.join(rel)),
        }
    }

    /// The entries but folders below folder `rel_dir` in the merged view:
    /// their relative path, and where each really is.
    pub(super) fn files_below(&self, rel_dir: &Path) -> Vec<(PathBuf, PathBuf)> {
        let mut out = Vec::new();
        self.walk(rel_dir, &mut |rel, real, is_dir, _| {
            if !is_dir {
                out.push((rel.to_path_buf(), real.to_path_buf()));
            }
            true
        });
        out
    }

    /// Visits the merged view below folder `rel_dir`, a folder before what
    /// it holds: `visit(rel, real, is_dir, from)` for each entry, where
    /// `real` is where it really is (a folder: its topmost part) and `from`
    /// the layers that show it, top first. A folder is entered when
    /// `visit` returns true.
    pub(super) fn walk(&self, rel_dir: &Path, visit: &mut Visit<'_>) {
        let Merged::Folder(top) = self.merged(rel_dir) else { return };
        let mut stack = vec![(rel_dir.to_path_buf(), top)];
        while let Some((dir, layers)) = stack.pop() {
            let mut names = std::collections::BTreeSet::new();
            for layer in &layers {
                for e in std::fs::read_dir(layer.join(&dir)).into_iter().flatten().flatten() {
                    names.insert(e.file_name());
                }
            }
            for name in names {
                let rel = dir.join(&name);
                match Lowers::step(&rel, &layers) {
                    Merged::Absent => {}
                    Merged::Entry(layer) => {
                        visit(&rel, &layer.join(&rel), false, &[layer]);
                    }
                    Merged::Folder(f) => {
                        if visit(&rel, &f[0].join(&rel), true, &f) {
                            stack.push((rel, f));
                        }
                    }
                }
            }
        }
    }
}

/// Whether the folder `dir` of a layer is opaque: it hides the folders of
/// the same path in the layers below.
pub(super) fn is_opaque(dir: &Path) -> bool {
    for name in ["user.overlay.opaque", "trusted.overlay.opaque"] {
        let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else { return false };
        let Ok(attr) = std::ffi::CString::new(name) else { continue };
        let mut buf = [0u8; 4];
        // SAFETY: valid C strings and buffer.
        let n = unsafe { libc::lgetxattr(path.as_ptr(), attr.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if n > 0 && buf[0] == b'y' {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::test_support::layer;
    use std::os::unix::ffi::OsStrExt;

    fn opaque(dir: &Path) -> bool {
        let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
        // SAFETY: valid C strings and value.
        unsafe { libc::setxattr(c.as_ptr(), c"user.overlay.opaque".as_ptr(), c"y".as_ptr().cast(), 1, 0) == 0 }
    }

    #[test]
    // A skip is said to the test harness's output.
    #[allow(clippy::disallowed_macros)]
    fn lowers_merge_as_overlayfs_does() {
        let tmp = tempfile::tempdir().unwrap();
        let (top, bottom) = (tmp.path().join("top"), tmp.path().join("bottom"));
        layer(&bottom, &[("a.txt", Some("a0")), ("gone.txt", Some("g")), ("d/x", Some("x0")), ("o/old", Some("o"))]);
        layer(&bottom, &[("f/inner", Some("i")), ("keep/k", Some("k"))]);
        if !layer(&top, &[("a.txt", Some("a1")), ("gone.txt", None), ("d/y", Some("y1")), ("o/new", Some("n"))])
            || !layer(&top, &[("f", Some("a file over a folder")), ("keep/k2", Some("k2"))])
            || !opaque(&top.join("o"))
        {
            eprintln!("SKIPPED: cannot make whiteouts or opaque folders here");
            return;
        }
        let layers = vec![top.clone(), bottom.clone()];
        let l = Lowers::new(&layers);
        assert_eq!(l.path(Path::new("a.txt")), Some(top.join("a.txt")));
        assert_eq!(l.path(Path::new("gone.txt")), None, "a whiteout deletes");
        assert_eq!(l.path(Path::new("d/x")), Some(bottom.join("d/x")), "folders merge");
        assert_eq!(l.path(Path::new("d/y")), Some(top.join("d/y")));
        assert_eq!(l.path(Path::new("o/old")), None, "an opaque folder hides the one below");
        assert_eq!(l.path(Path::new("f")), Some(top.join("f")));
        assert_eq!(l.path(Path::new("f/inner")), None, "a file hides a folder below");
        assert_eq!(l.path(Path::new("nowhere")), None);
        let mut below: Vec<(String, PathBuf)> =
            l.files_below(Path::new("")).into_iter().map(|(r, p)| (r.to_string_lossy().into_owned(), p)).collect();
        below.sort();
        let want: Vec<(String, PathBuf)> = [
            ("a.txt", &top),
            ("d/x", &bottom),
            ("d/y", &top),
            ("f", &top),
            ("keep/k", &bottom),
            ("keep/k2", &top),
            ("o/new", &top),
        ]
        .iter()
        .map(|(r, l)| ((*r).to_owned(), l.join(r)))
        .collect();
        assert_eq!(below, want);
    }
}
