//! Content hashes of files, cached on disk by (path, size, mtime, inode) so
//! that an unchanged re-plan reads no file contents.
//!
//! The cache is a text file of lines `ino size mtime_ns hash path`, written
//! atomically. An entry whose mtime is within two seconds of the time
//! it was hashed is not trusted later (the file could have changed again in
//! the same clock tick, the "racy git" problem), so it is hashed again.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
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

/// A line of the cache file: where it starts, where its path starts, where
/// it ends (byte offsets into the file's text).
#[derive(Clone, Copy)]
struct Line {
    start: usize,
    path: usize,
    end: usize,
}

/// The on-disk cache of file hashes.
pub struct FileHashCache {
    path: PathBuf,
    /// The cache file as it was read. Its lines are parsed when looked up,
    /// not at load: a plan of one task in a project whose cache knows
    /// 100,000 files parses one line.
    text: String,
    /// Each line of `text` after the header, sorted by path (as
    /// [`save`](Self::save) writes them).
    lines: Vec<Line>,
    /// Files hashed by this process; they override `lines`.
    fresh: HashMap<String, Entry>,
    /// How many files were read and hashed by this process (for tests and
    /// `-v`).
    pub hashed: usize,
}

impl FileHashCache {
    /// Loads the cache at `path`; a missing or unreadable cache is empty.
    pub fn load(path: &Path) -> FileHashCache {
        FileHashCache::load_text(path.to_path_buf(), std::fs::read_to_string(path).unwrap_or_default(), 0)
    }

    /// The cache whose file at `path` holds `text`.
    fn load_text(path: PathBuf, mut text: String, hashed: usize) -> FileHashCache {
        let mut lines = Vec::new();
        match text.split_once('\n') {
            Some((HEADER, _)) => {
                let mut at = HEADER.len() + 1;
                for line in text[at..].split_terminator('\n') {
                    // The path follows the fourth space.
                    let path = line.match_indices(' ').nth(3).map_or(line.len(), |(i, _)| i + 1);
                    lines.push(Line { start: at, path: at + path, end: at + line.len() });
                    at += line.len() + 1;
                }
            }
            _ => text.clear(),
        }
        let mut cache = FileHashCache { path, text, lines, fresh: HashMap::new(), hashed };
        // Written sorted; one edited by hand may not be.
        if !cache.lines.is_sorted_by(|a, b| cache.path_of(*a) <= cache.path_of(*b)) {
            let mut lines = std::mem::take(&mut cache.lines);
            lines.sort_by(|a, b| cache.path_of(*a).cmp(cache.path_of(*b)));
            cache.lines = lines;
        }
        cache
    }

    /// The path a line of the file is about (`""` if it has none).
    fn path_of(&self, l: Line) -> &str {
        &self.text[l.path..l.end]
    }

    /// What the cache knows of `path`.
    fn get(&self, path: &str) -> Option<Entry> {
        // Nothing hashed yet in an unchanged project: no key to hash.
        if !self.fresh.is_empty()
            && let Some(e) = self.fresh.get(path)
        {
            return Some(*e);
        }
        let i = self.lines.binary_search_by(|&l| self.path_of(l).cmp(path)).ok()?;
        let l = self.lines[i];
        parse_entry(&self.text[l.start..l.path])
    }

    /// The hex blake3 hash of the file at `path` (relative to `root`), as
    /// [`Self::hash_files`] finds it; `None` when it is no readable file.
    pub fn hash_path(&mut self, root: &Path, path: &str) -> Option<String> {
        let m = std::fs::metadata(root.join(path)).ok().filter(|m| m.is_file())?;
        let f = ResolvedFile { path: path.to_owned(), stamp: Stamp::of(&m) };
        let h = self.hash_files(root, &[&f]).ok()?.pop()?;
        Some(blake3::Hash::from(h).to_hex().to_string())
    }

    /// The blake3 hash of each file, in order. Files whose size, mtime and
    /// inode match the cache are not read.
    pub fn hash_files(&mut self, root: &Path, files: &[&ResolvedFile]) -> Result<Vec<[u8; 32]>, ReadError> {
        let mut out: Vec<Option<[u8; 32]>> = vec![None; files.len()];
        let mut todo = Vec::new();
        for (i, f) in files.iter().enumerate() {
            match self.get(&f.path) {
                Some(e) if e.trusted && e.stamp.same_content(&f.stamp) => out[i] = Some(e.hash),
                _ => todo.push(i),
            }
        }
        if !todo.is_empty() {
            let results = hash_parallel(root, files, &todo);
            let now = now_ns();
            for (i, r) in todo.iter().zip(results) {
                let hash = r.map_err(|source| ReadError { path: files[*i].path.clone(), source })?;
                out[*i] = Some(hash);
                let f = files[*i];
                let trusted = now - f.stamp.mtime_ns > RACY_WINDOW_NS;
                self.fresh.insert(f.path.clone(), Entry { stamp: f.stamp, hash, trusted });
            }
            self.hashed += todo.len();
        }
        Ok(out.into_iter().map(|h| h.unwrap_or_default()).collect())
    }

    /// Writes the cache if it changed (temp file + rename): the lines read,
    /// but for the files hashed again, and those files, sorted. Failing to
    /// write a cache is not an error worth stopping for: it is reported by
    /// the caller as a warning at most.
    pub fn save(&mut self) -> std::io::Result<()> {
        if self.fresh.is_empty() {
            return Ok(());
        }
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut fresh: Vec<(&String, &Entry)> = self.fresh.iter().filter(|(k, _)| !k.contains('\n')).collect();
        fresh.sort_by(|a, b| a.0.cmp(b.0));
        let mut text = String::with_capacity(self.text.len() + fresh.len() * 120);
        text.push_str(HEADER);
        text.push('\n');
        let mut old = self.lines.iter().map(|&l| (self.path_of(l), l)).peekable();
        for (k, e) in fresh {
            while let Some((_, l)) = old.next_if(|(p, _)| *p < k.as_str()) {
                text.push_str(&self.text[l.start..l.end]);
                text.push('\n');
            }
            old.next_if(|(p, _)| *p == k.as_str());
            let hash = if e.trusted { blake3::Hash::from(e.hash).to_hex().to_string() } else { "-".to_owned() };
            text.push_str(&format!("{} {} {} {} {}\n", e.stamp.ino, e.stamp.size, e.stamp.mtime_ns, hash, k));
        }
        for (_, l) in old {
            text.push_str(&self.text[l.start..l.end]);
            text.push('\n');
        }
        crate::fsx::write_cache(&self.path, text.as_bytes())?;
        *self = FileHashCache::load_text(std::mem::take(&mut self.path), text, self.hashed);
        Ok(())
    }
}

/// The entry of a line without its path: `ino size mtime hash ` (the path
/// is what the line was found by).
fn parse_entry(fields: &str) -> Option<Entry> {
    let mut it = fields.split(' ');
    let ino = it.next()?.parse().ok()?;
    let size = it.next()?.parse().ok()?;
    let mtime_ns = it.next()?.parse().ok()?;
    let hash = blake3::Hash::from_hex(it.next()?).ok()?;
    Some(Entry { stamp: Stamp { size, mtime_ns, ino, ..Stamp::default() }, hash: *hash.as_bytes(), trusted: true })
}

fn now_ns() -> i128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i128)
}

/// A file of the project that could not be read to be hashed.
#[derive(Debug, thiserror::Error)]
#[error("cannot read {path}: {source}")]
pub struct ReadError {
    /// Relative to the project root.
    pub path: String,
    #[source]
    pub source: std::io::Error,
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
    if threads <= 1 {
        // One file: no thread of its own (starting one costs more than
        // hashing a small file), and a buffer its size (a fresh 256 KiB
        // one costs the allocator a new huge page to zero).
        let mut buf =
            vec![0u8; todo.iter().map(|&i| files[i].stamp.size as usize + 1).max().unwrap_or(1).min(256 * 1024)];
        return todo.iter().map(|&i| hash_file(&root.join(&files[i].path), &mut buf)).collect();
    }
    let next = AtomicUsize::new(0);
    // Each thread hands back what it hashed, by index: every index is
    // taken by exactly one thread.
    let mut hashed: Vec<(usize, std::io::Result<[u8; 32]>)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut buf = vec![0u8; 256 * 1024];
                    let mut mine = Vec::new();
                    loop {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        if k >= todo.len() {
                            break;
                        }
                        mine.push((k, hash_file(&root.join(&files[todo[k]].path), &mut buf)));
                    }
                    mine
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    });
    hashed.sort_unstable_by_key(|(k, _)| *k);
    hashed.into_iter().map(|(_, r)| r).collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved(root: &Path, path: &str) -> ResolvedFile {
        let meta = std::fs::symlink_metadata(root.join(path)).unwrap();
        ResolvedFile { path: path.to_owned(), stamp: Stamp::of(&meta) }
    }

    /// Files written long enough ago for their hashes to be trusted.
    fn old_files(root: &Path, names: &[&str]) {
        let past = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        for n in names {
            let p = root.join(n);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, format!("content of {n}")).unwrap();
            std::fs::File::options().write(true).open(&p).unwrap().set_modified(past).unwrap();
        }
    }

    fn hashes(cache: &mut FileHashCache, root: &Path, names: &[&str]) -> Vec<[u8; 32]> {
        let files: Vec<ResolvedFile> = names.iter().map(|n| resolved(root, n)).collect();
        cache.hash_files(root, &files.iter().collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn a_saved_cache_answers_without_reading_and_keeps_what_it_was_not_asked() {
        let dir = tempfile::tempdir().unwrap();
        let (root, at) = (dir.path(), dir.path().join("cache"));
        old_files(root, &["b.txt", "a.txt", "d/c.txt", "e.txt"]);
        let mut cache = FileHashCache::load(&at);
        let first = hashes(&mut cache, root, &["b.txt", "a.txt", "d/c.txt"]);
        assert_eq!(cache.hashed, 3);
        assert_eq!(first[0], *blake3::hash(b"content of b.txt").as_bytes());
        cache.save().unwrap();

        let mut cache = FileHashCache::load(&at);
        assert_eq!(hashes(&mut cache, root, &["d/c.txt", "b.txt", "a.txt"]), [first[2], first[0], first[1]]);
        assert_eq!(cache.hashed, 0, "nothing read");
        // A changed file is read again; a new one is added; the others stay.
        old_files(root, &["b.txt"]);
        std::fs::write(root.join("b.txt"), "new").unwrap();
        let again = hashes(&mut cache, root, &["b.txt", "e.txt"]);
        assert_eq!((cache.hashed, again[0]), (2, *blake3::hash(b"new").as_bytes()));
        cache.save().unwrap();
        let text = std::fs::read_to_string(&at).unwrap();
        let paths: Vec<&str> = text.lines().skip(1).map(|l| l.rsplit(' ').next().unwrap()).collect();
        assert_eq!(paths, ["a.txt", "b.txt", "d/c.txt", "e.txt"], "{text}");
        // Saved again, the cache still answers from memory and from disk.
        assert_eq!(hashes(&mut cache, root, &["a.txt"]), [first[1]]);
        let mut cache = FileHashCache::load(&at);
        hashes(&mut cache, root, &["a.txt", "b.txt", "d/c.txt", "e.txt"]);
        assert_eq!(cache.hashed, 1, "only b.txt's fresh hash (written within the racy window) is read again");
    }

    #[test]
    fn a_cache_out_of_order_or_broken_still_answers() {
        let dir = tempfile::tempdir().unwrap();
        let (root, at) = (dir.path(), dir.path().join("cache"));
        old_files(root, &["a.txt", "b.txt"]);
        let line = |n: &str| {
            let f = resolved(root, n);
            let h = blake3::hash(format!("content of {n}").as_bytes()).to_hex();
            format!("{} {} {} {h} {n}\n", f.stamp.ino, f.stamp.size, f.stamp.mtime_ns)
        };
        std::fs::write(&at, format!("{HEADER}\n{}garbage\n{}1 2 3 zz c.txt\n", line("b.txt"), line("a.txt"))).unwrap();
        let mut cache = FileHashCache::load(&at);
        hashes(&mut cache, root, &["a.txt", "b.txt"]);
        assert_eq!(cache.hashed, 0);
        std::fs::write(&at, "another header\n").unwrap();
        let mut cache = FileHashCache::load(&at);
        hashes(&mut cache, root, &["a.txt"]);
        assert_eq!(cache.hashed, 1);
    }
}
