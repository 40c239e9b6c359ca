//! Content hashes of files, cached on disk by (path, size, mtime, inode) so
//! that an unchanged re-plan reads no file contents.
//!
//! The cache is a text file of lines `ino size mtime_ns hash path`, written
//! atomically. An entry whose mtime is within [`RACY_WINDOW_NS`] of the time
//! it was hashed is not trusted later (the file could have changed again in
//! the same clock tick, the "racy git" problem), so it is hashed again.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::context::ResolvedFile;
use crate::paths::Stamp;

const RACY_WINDOW_NS: i128 = 2_000_000_000;
const HEADER: &str = "cassist file-hash cache v1";

#[derive(Clone, Copy)]
struct Entry {
    /// The file as it was hashed; the cache file keeps what
    /// [`Stamp::same_content`] compares.
    stamp: Stamp,
    hash: [u8; 32],
    /// When it was hashed; entries hashed too close to their mtime are
    /// re-checked.
    trusted: bool,
}

/// The on-disk cache of file hashes.
pub struct FileHashCache {
    path: PathBuf,
    entries: HashMap<String, Entry>,
    dirty: bool,
    /// How many files were read and hashed by this process (for tests and
    /// `-v`).
    pub hashed: usize,
}

impl FileHashCache {
    /// Loads the cache at `path`; a missing or unreadable cache is empty.
    pub fn load(path: &Path) -> FileHashCache {
        let mut entries = HashMap::new();
        if let Ok(text) = std::fs::read_to_string(path) {
            let mut lines = text.lines();
            if lines.next() == Some(HEADER) {
                for line in lines {
                    if let Some((k, e)) = parse_line(line) {
                        entries.insert(k, e);
                    }
                }
            }
        }
        FileHashCache { path: path.to_path_buf(), entries, dirty: false, hashed: 0 }
    }

    /// The blake3 hash of each file, in order. Files whose size, mtime and
    /// inode match the cache are not read.
    pub fn hash_files(
        &mut self,
        root: &Path,
        files: &[&ResolvedFile],
    ) -> Result<Vec<[u8; 32]>, (String, std::io::Error)> {
        let mut out: Vec<Option<[u8; 32]>> = vec![None; files.len()];
        let mut todo = Vec::new();
        for (i, f) in files.iter().enumerate() {
            match self.entries.get(&f.path) {
                Some(e) if e.trusted && e.stamp.same_content(&f.stamp) => out[i] = Some(e.hash),
                _ => todo.push(i),
            }
        }
        if !todo.is_empty() {
            let results = hash_parallel(root, files, &todo);
            let now = now_ns();
            for (i, r) in todo.iter().zip(results) {
                let hash = r.map_err(|e| (files[*i].path.clone(), e))?;
                out[*i] = Some(hash);
                let f = files[*i];
                let trusted = now - f.stamp.mtime_ns > RACY_WINDOW_NS;
                self.entries.insert(f.path.clone(), Entry { stamp: f.stamp, hash, trusted });
                self.dirty = true;
            }
            self.hashed += todo.len();
        }
        Ok(out.into_iter().map(|h| h.unwrap_or_default()).collect())
    }

    /// Writes the cache if it changed (temp file + rename). Failing to
    /// write a cache is not an error worth stopping for: it is reported by
    /// the caller as a warning at most.
    pub fn save(&mut self) -> std::io::Result<()> {
        if !self.dirty {
            return Ok(());
        }
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut keys: Vec<&String> = self.entries.keys().collect();
        keys.sort();
        let mut text = String::with_capacity(self.entries.len() * 120);
        text.push_str(HEADER);
        text.push('\n');
        for k in keys {
            if k.contains('\n') {
                continue;
            }
            let e = &self.entries[k];
            let hash = if e.trusted { blake3::Hash::from(e.hash).to_hex().to_string() } else { "-".to_owned() };
            text.push_str(&format!("{} {} {} {} {}\n", e.stamp.ino, e.stamp.size, e.stamp.mtime_ns, hash, k));
        }
        crate::fsx::write_atomic(&self.path, text.as_bytes())?;
        self.dirty = false;
        Ok(())
    }
}

fn parse_line(line: &str) -> Option<(String, Entry)> {
    let mut it = line.splitn(5, ' ');
    let ino = it.next()?.parse().ok()?;
    let size = it.next()?.parse().ok()?;
    let mtime_ns = it.next()?.parse().ok()?;
    let hash = blake3::Hash::from_hex(it.next()?).ok()?;
    let path = it.next()?.to_owned();
    Some((
        path,
        Entry { stamp: Stamp { size, mtime_ns, ino, ..Stamp::default() }, hash: *hash.as_bytes(), trusted: true },
    ))
}

fn now_ns() -> i128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i128)
}

/// Threads that read and hash files at once. More than the cores: a file
/// not in the page cache keeps its thread waiting for the disk, and disks
/// (and network file systems) serve many reads at once; on a 2-core
/// machine, 16 readers hash a cold project twice as fast as 2. Only files
/// the hash cache cannot vouch for are read: an unchanged project starts
/// none of these threads.
pub fn io_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    (cores * 4).clamp(16, 64)
}

/// Hashes `files[todo]` on [`io_threads`] threads, one file per step: most
/// context files are small, where a thread per file beats splitting one
/// file.
fn hash_parallel(root: &Path, files: &[&ResolvedFile], todo: &[usize]) -> Vec<std::io::Result<[u8; 32]>> {
    let threads = io_threads().min(todo.len());
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<std::io::Result<[u8; 32]>>>> = Mutex::new((0..todo.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mut buf = vec![0u8; 256 * 1024];
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    if k >= todo.len() {
                        break;
                    }
                    let r = hash_file(&root.join(&files[todo[k]].path), &mut buf);
                    if let Ok(mut g) = results.lock() {
                        g[k] = Some(r);
                    }
                }
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_default()
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(std::io::Error::other("not hashed"))))
        .collect()
}

/// blake3 of one file's content.
pub fn hash_file(path: &Path, buf: &mut [u8]) -> std::io::Result<[u8; 32]> {
    let mut f = std::fs::File::open(path)?;
    let mut h = blake3::Hasher::new();
    loop {
        let n = f.read(buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(*h.finalize().as_bytes())
}
