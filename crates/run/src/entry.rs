//! Reading one entry of a workspace safely, for its change set: the lstat
//! first, and the file type decides (a fifo, socket or device is never
//! opened); sizes are checked against the limits before any byte is read
//! (a 2 GB sparse file costs neither memory nor time); names that are not
//! UTF-8 are kept as bytes, never renamed; modes are kept whole, special
//! bits included; contents are compared as streams.
//!
//! Which layers a workspace has and where an entry's older self lies is
//! the workspace's business ([`crate::workspace`]); this module judges and
//! reads one entry at a time.

use std::ffi::OsStr;
use std::fs::{File, Metadata};
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use cassist_core::changes::{Change, ChangeKind, Hazard, Special, escape_bytes};
use cassist_core::limits::Limits;

/// Why an entry could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file system refused (the entry is gone, unreadable...).
    #[error(transparent)]
    Io(#[from] io::Error),
    /// What stands at the path is no longer the regular file its lstat
    /// showed (a symlink or a fifo was put in its place since): never
    /// followed, never opened for reading.
    #[error("{} is not a regular file", .0.display())]
    NotAFile(PathBuf),
    /// A folder was given where a change's entry must be a file, a
    /// symlink or a special file.
    #[error("{} is a folder", .0.display())]
    Folder(PathBuf),
}

/// What an entry is, from its lstat alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Symlink,
    Dir,
    Special(Special),
}

/// The kind of the entry `meta` describes (an `lstat`).
pub fn kind(meta: &Metadata) -> Kind {
    let ft = meta.file_type();
    if ft.is_file() {
        Kind::File
    } else if ft.is_symlink() {
        Kind::Symlink
    } else if ft.is_dir() {
        Kind::Dir
    } else {
        Kind::Special(Special::of_mode(meta.mode()).unwrap_or(Special::CharDevice))
    }
}

/// Whether `meta` is an overlayfs whiteout (a character device 0/0): in an
/// upper dir, a deletion.
pub fn is_whiteout(meta: &Metadata) -> bool {
    meta.file_type().is_char_device() && meta.rdev() == 0
}

/// A path relative to the root as a change names it: `/`-separated text,
/// and, when it is not UTF-8, its raw bytes (the text then shows them
/// escaped).
pub fn name(rel: &Path) -> (String, Option<Vec<u8>>) {
    match rel.to_str() {
        Some(s) => (s.to_owned(), None),
        None => {
            let raw = rel.as_os_str().as_bytes();
            (escape_bytes(raw), Some(raw.to_vec()))
        }
    }
}

/// The path a change names, as bytes on disk (its raw name when that is
/// not UTF-8).
pub fn raw_path(c: &Change) -> PathBuf {
    match &c.hazard {
        Some(Hazard::NonUtf8Name(raw)) => PathBuf::from(OsStr::from_bytes(raw)),
        _ => PathBuf::from(&c.path),
    }
}

/// Opens a regular file for reading without following a symlink or
/// blocking on a fifo put in its place, and checks it is still a file.
fn open_file(path: &Path) -> Result<File, Error> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(Error::NotAFile(path.to_path_buf()));
    }
    Ok(f)
}

/// At most `cap` bytes of a regular file, or `Err(size)` when it holds
/// more (it may have grown since its lstat).
fn read_capped(path: &Path, cap: u64) -> Result<Result<Vec<u8>, u64>, Error> {
    let f = open_file(path)?;
    let mut bytes = Vec::new();
    f.take(cap + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap { Ok(Err(bytes.len() as u64)) } else { Ok(Ok(bytes)) }
}

/// A symlink's target as bytes.
fn link_target(path: &Path) -> io::Result<Vec<u8>> {
    Ok(std::fs::read_link(path)?.into_os_string().into_encoded_bytes())
}

/// Whether two files or two symlinks (lstat `am`, `bm`) hold the same
/// bytes and the same permission bits (special bits included): file
/// contents compared as streams, never held whole.
pub fn same_entry(a: &Path, am: &Metadata, b: &Path, bm: &Metadata) -> Result<bool, Error> {
    if kind(am) != kind(bm) || am.mode() & 0o7777 != bm.mode() & 0o7777 {
        return Ok(false);
    }
    match kind(am) {
        Kind::Symlink => Ok(link_target(a)? == link_target(b)?),
        Kind::File if am.len() != bm.len() => Ok(false),
        Kind::File => Ok(same_contents(&mut open_file(a)?, &mut open_file(b)?)?),
        _ => Ok(false),
    }
}

fn same_contents(a: &mut File, b: &mut File) -> io::Result<bool> {
    let mut ba = vec![0u8; 64 << 10];
    let mut bb = vec![0u8; 64 << 10];
    loop {
        let n = read_full(a, &mut ba)?;
        let m = read_full(b, &mut bb)?;
        if n != m || ba[..n] != bb[..m] {
            return Ok(false);
        }
        if n == 0 {
            return Ok(true);
        }
    }
}

/// Fills `buf` as far as the file goes.
fn read_full(f: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// blake3 of a file's bytes or a symlink's target, streamed; `None` for
/// anything else.
pub fn hash_entry(path: &Path, meta: &Metadata) -> Result<Option<[u8; 32]>, Error> {
    match kind(meta) {
        Kind::Symlink => Ok(Some(*blake3::hash(&link_target(path)?).as_bytes())),
        Kind::File => {
            let mut hasher = blake3::Hasher::new();
            io::copy(&mut open_file(path)?, &mut hasher)?;
            Ok(Some(*hasher.finalize().as_bytes()))
        }
        _ => Ok(None),
    }
}

/// Reads the entries of one change set within the [`Limits`]: a file over
/// `file-size`, or one that would take the change past `change-size`, is
/// never read (its change carries [`Hazard::Unread`] with its size); once
/// the change has more entries than `files`, no content at all is read
/// (the entries are only counted: the change is rejected with its count).
pub struct Reader {
    limits: Limits,
    /// Bytes of the change so far (files within `file-size`), read or
    /// not.
    used: u64,
    /// Entries of the change so far.
    entries: u64,
}

impl Reader {
    pub fn new(limits: Limits) -> Reader {
        Reader { limits, used: 0, entries: 0 }
    }

    /// Whether the change has more entries than `limits { files }` allows:
    /// from the first past it on, the changes given hold no content.
    pub fn over_files(&self) -> bool {
        self.entries > self.limits.files
    }

    /// Counts one more entry; whether it is past the limit.
    fn count(&mut self) -> bool {
        self.entries = self.entries.saturating_add(1);
        self.over_files()
    }

    /// The change the entry at `path` (lstat `meta`; `rel` relative to the
    /// root) makes over `old`, the project's entry at the same path when
    /// it is a file or a symlink (with its lstat). The caller knows it is
    /// a change; this reads only what may be read.
    pub fn change(
        &mut self,
        rel: &Path,
        path: &Path,
        meta: &Metadata,
        old: Option<(&Path, &Metadata)>,
    ) -> Result<Change, Error> {
        let (name, raw) = name(rel);
        let kind = if old.is_some() { ChangeKind::Modified } else { ChangeKind::Added };
        let mut change = Change {
            path: name,
            kind,
            old: None,
            new: None,
            mode: meta.mode(),
            hazard: None,
            old_mode: None,
            base_unknown: false,
        };
        if self.count() {
            // Counted, never read.
            change.hazard = raw.map(Hazard::NonUtf8Name);
            change.old_mode = old.map(|(_, m)| m.mode());
            return Ok(change);
        }
        change.hazard = match (raw, self::kind(meta)) {
            (Some(raw), _) => Some(Hazard::NonUtf8Name(raw)),
            (None, Kind::Special(s)) => Some(Hazard::Special(s)),
            (None, Kind::Dir) => return Err(Error::Folder(path.to_path_buf())),
            (None, Kind::File | Kind::Symlink) => match self.read(path, meta)? {
                Ok(bytes) => {
                    change.new = Some(bytes);
                    None
                }
                Err(size) => Some(Hazard::Unread { size }),
            },
        };
        if let Some((old_path, old_meta)) = old {
            change.old = read_old(old_path, old_meta, self.limits.file_size);
            change.old_mode = Some(old_meta.mode());
        }
        Ok(change)
    }

    /// A file's bytes or a symlink's target, or `Err(size)` when reading
    /// it would pass a limit. A file within `file-size` counts against
    /// `change-size` either way.
    fn read(&mut self, path: &Path, meta: &Metadata) -> Result<Result<Vec<u8>, u64>, Error> {
        if meta.file_type().is_symlink() {
            let target = link_target(path)?;
            self.used += target.len() as u64;
            return Ok(Ok(target));
        }
        let size = meta.len();
        if size > self.limits.file_size {
            // Rejected on its own: it does not count against the rest.
            return Ok(Err(size));
        }
        let room = self.limits.change_size.saturating_sub(self.used);
        self.used = self.used.saturating_add(size);
        if size > room {
            return Ok(Err(size));
        }
        match read_capped(path, size)? {
            Ok(bytes) => Ok(Ok(bytes)),
            // It grew since its lstat.
            Err(size) => Ok(Err(size)),
        }
    }

    /// The deletion of the project's entry at `rel` (`path`, if it still
    /// exists): its old content, when within `file-size` (and the change
    /// within `files`).
    pub fn deleted(&mut self, rel: &Path, path: &Path) -> Change {
        let (name, raw) = name(rel);
        let meta = if self.count() { None } else { std::fs::symlink_metadata(path).ok() };
        Change {
            path: name,
            kind: ChangeKind::Deleted,
            old: meta.as_ref().and_then(|m| read_old(path, m, self.limits.file_size)),
            new: None,
            mode: meta.as_ref().map_or(0o100644, |m| m.mode()),
            hazard: raw.map(Hazard::NonUtf8Name),
            old_mode: meta.map(|m| m.mode()),
            base_unknown: false,
        }
    }
}

/// The project's side of a change: a file's bytes or a symlink's target,
/// `None` for anything else or a file over `file_size`.
pub fn read_old(path: &Path, meta: &Metadata, file_size: u64) -> Option<Vec<u8>> {
    match kind(meta) {
        Kind::Symlink => link_target(path).ok(),
        Kind::File if meta.len() <= file_size => read_capped(path, file_size).ok()?.ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cassist_core::changes::{S_IFLNK, S_IFMT, S_IFREG};
    use std::os::unix::fs::PermissionsExt;
    use std::time::{Duration, Instant};

    const SMALL: Limits =
        Limits { file_size: 1 << 10, change_size: 4 << 10, transcript: 1 << 20, files: 100, ..Limits::DEFAULT };

    fn lstat(p: &Path) -> Metadata {
        std::fs::symlink_metadata(p).unwrap()
    }

    fn change(r: &mut Reader, dir: &Path, rel: &str) -> Change {
        let p = dir.join(rel);
        r.change(Path::new(rel), &p, &lstat(&p), None).unwrap()
    }

    #[test]
    fn special_files_are_never_opened() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        nix::unistd::mkfifo(&d.join("fifo"), nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        let _socket = std::os::unix::net::UnixListener::bind(d.join("socket")).unwrap();
        let mut r = Reader::new(SMALL);
        // A fifo opened for reading would block until a writer comes: the
        // test would hang.
        let c = change(&mut r, d, "fifo");
        assert_eq!((c.hazard, c.new, c.kind), (Some(Hazard::Special(Special::Fifo)), None, ChangeKind::Added));
        let c = change(&mut r, d, "socket");
        assert_eq!(c.hazard, Some(Hazard::Special(Special::Socket)));
        assert_eq!(kind(&lstat(Path::new("/dev/null"))), Kind::Special(Special::CharDevice));
        assert!(!is_whiteout(&lstat(Path::new("/dev/null"))));
        // Even when a fifo takes a file's place after its lstat.
        std::fs::write(d.join("was-a-file"), "x").unwrap();
        let meta = lstat(&d.join("was-a-file"));
        std::fs::remove_file(d.join("was-a-file")).unwrap();
        nix::unistd::mkfifo(&d.join("was-a-file"), nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        assert!(r.change(Path::new("was-a-file"), &d.join("was-a-file"), &meta, None).is_err());
    }

    #[test]
    fn sizes_are_checked_before_reading() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // A 2 GiB sparse file: reading it would take seconds and 2 GiB.
        let big = File::create(d.join("big.bin")).unwrap();
        big.set_len(2 << 30).unwrap();
        let started = Instant::now();
        let mut r = Reader::new(Limits::DEFAULT);
        let c = change(&mut r, d, "big.bin");
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!((c.new_size(), c.hazard, c.new), (2 << 30, Some(Hazard::Unread { size: 2 << 30 }), None));
        // Nor is its old side read.
        assert_eq!(read_old(&d.join("big.bin"), &lstat(&d.join("big.bin")), 16 << 20), None);

        // Over file-size, and past change-size in total.
        let mut r = Reader::new(SMALL);
        std::fs::write(d.join("over"), vec![b'a'; 1025]).unwrap();
        assert_eq!(change(&mut r, d, "over").hazard, Some(Hazard::Unread { size: 1025 }));
        for i in 0..3 {
            std::fs::write(d.join(format!("f{i}")), vec![b'b'; 1000]).unwrap();
            assert_eq!(change(&mut r, d, &format!("f{i}")).new.map(|b| b.len()), Some(1000), "f{i}");
        }
        // 3000 bytes counted (the file over file-size is not): the next
        // 1000 fit 4 KiB, one more does not.
        std::fs::write(d.join("f3"), vec![b'b'; 1000]).unwrap();
        assert_eq!(change(&mut r, d, "f3").new.map(|b| b.len()), Some(1000));
        std::fs::write(d.join("f4"), vec![b'b'; 100]).unwrap();
        assert_eq!(change(&mut r, d, "f4").hazard, Some(Hazard::Unread { size: 100 }));
    }

    #[test]
    fn names_modes_and_links_are_kept_as_they_are() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let bad = OsStr::from_bytes(b"bad\xff.txt");
        std::fs::write(d.join(bad), "x").unwrap();
        let mut r = Reader::new(SMALL);
        let p = d.join(bad);
        let c = r.change(Path::new(bad), &p, &lstat(&p), None).unwrap();
        assert_eq!(c.path, "bad\\xff.txt");
        assert_eq!(c.hazard, Some(Hazard::NonUtf8Name(b"bad\xff.txt".to_vec())));
        assert_eq!(raw_path(&c), Path::new(bad));

        std::fs::write(d.join("suid"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(d.join("suid"), std::fs::Permissions::from_mode(0o4755)).unwrap();
        let c = change(&mut r, d, "suid");
        assert_eq!((c.mode & 0o7777, c.mode & S_IFMT, c.special_bits()), (0o4755, S_IFREG, 0o4000));

        std::os::unix::fs::symlink("/etc/passwd", d.join("abs")).unwrap();
        std::os::unix::fs::symlink("../../x", d.join("up")).unwrap();
        for (rel, target) in [("abs", "/etc/passwd"), ("up", "../../x")] {
            let c = change(&mut r, d, rel);
            assert_eq!((c.new.as_deref(), c.mode & S_IFMT), (Some(target.as_bytes()), S_IFLNK));
            assert_eq!(c.symlink_leaving().as_deref(), Some(target));
        }
    }

    #[test]
    fn entries_compare_by_content_and_every_mode_bit() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let same =
            |a: &str, b: &str| same_entry(&d.join(a), &lstat(&d.join(a)), &d.join(b), &lstat(&d.join(b))).unwrap();
        std::fs::write(d.join("a"), vec![7u8; 200_000]).unwrap();
        std::fs::write(d.join("b"), vec![7u8; 200_000]).unwrap();
        let mut c = vec![7u8; 200_000];
        c[150_000] = 8;
        std::fs::write(d.join("c"), c).unwrap();
        assert!(same("a", "b"));
        assert!(!same("a", "c"));
        std::fs::set_permissions(d.join("b"), std::fs::Permissions::from_mode(0o4644)).unwrap();
        assert!(!same("a", "b"), "a setuid bit is a change");
        std::os::unix::fs::symlink("a", d.join("l1")).unwrap();
        std::os::unix::fs::symlink("a", d.join("l2")).unwrap();
        assert!(same("l1", "l2"));
        assert!(!same("l1", "a"));
        assert_eq!(
            hash_entry(&d.join("a"), &lstat(&d.join("a"))).unwrap(),
            Some(*blake3::hash(&[7u8; 200_000]).as_bytes())
        );
    }
}
