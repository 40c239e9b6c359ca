//! The transcript file of a run, bounded on disk ([`CappedFile`]).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::CHUNK;

/// A transcript that keeps the first half and the last half of `limit`
/// bytes of one run's output, with a marker line where the middle was
/// cut. Memory and disk stay bounded: past the limit, the last half is a
/// ring inside the file itself, put in order when the run ends.
pub(super) struct CappedFile {
    file: File,
    /// The folder of the file (for the temp file that puts the ring in
    /// order).
    dir: PathBuf,
    /// Where this run's output starts (the file may hold earlier runs').
    base: u64,
    head: u64,
    ring: u64,
    /// Bytes of output so far.
    written: u64,
}

impl CappedFile {
    pub(super) fn open(path: &Path, limit: u64) -> io::Result<CappedFile> {
        let file = OpenOptions::new().create(true).read(true).write(true).truncate(false).open(path)?;
        let base = file.metadata()?.len();
        let limit = limit.max(2);
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf();
        Ok(CappedFile { file, dir, base, head: limit / 2, ring: limit - limit / 2, written: 0 })
    }

    pub(super) fn write_all(&mut self, mut buf: &[u8]) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        while !buf.is_empty() {
            let i = self.written;
            // Up to the end of the head, or of the ring.
            let (at, room) = if i < self.head {
                (i, self.head - i)
            } else {
                let pos = (i - self.head) % self.ring;
                (self.head + pos, self.ring - pos)
            };
            let n = (buf.len() as u64).min(room) as usize;
            self.file.write_all_at(&buf[..n], self.base + at)?;
            self.written += n as u64;
            buf = &buf[n..];
        }
        Ok(())
    }

    /// Once the run ended: when output was cut, the marker, then the last
    /// half in order.
    pub(super) fn finish(&mut self) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        let limit = self.head + self.ring;
        if self.written <= limit {
            return Ok(());
        }
        let cut = self.written - limit;
        // The ring position of the oldest byte kept.
        let oldest = (self.written - self.head) % self.ring;
        let ring_at = self.base + self.head;
        let mut ordered = scratch_file(&self.dir)?;
        copy_range(&self.file, ring_at + oldest, self.ring - oldest, &mut ordered)?;
        copy_range(&self.file, ring_at, oldest, &mut ordered)?;
        let marker = format!("\n[cassist: {cut} bytes cut]\n");
        self.file.set_len(ring_at)?;
        self.file.write_all_at(marker.as_bytes(), ring_at)?;
        copy_range(&ordered, 0, self.ring, &mut WriteAt { file: &self.file, at: ring_at + marker.len() as u64 })
    }
}

/// A file of no name in `dir`, gone once closed: `O_TMPFILE`, or where
/// the filesystem has none, [`created_then_unlinked`].
fn scratch_file(dir: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    match OpenOptions::new().read(true).write(true).mode(0o600).custom_flags(libc::O_TMPFILE).open(dir) {
        Ok(file) => Ok(file),
        Err(_) => created_then_unlinked(dir),
    }
}

/// A new file in `dir`, its name removed at once.
fn created_then_unlinked(dir: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut tries = 0;
    loop {
        let path = dir.join(format!(".cassist-scratch-{}-{tries}", std::process::id()));
        match OpenOptions::new().read(true).write(true).mode(0o600).create_new(true).open(&path) {
            Ok(file) => {
                std::fs::remove_file(&path)?;
                return Ok(file);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 1000 => tries += 1,
            Err(e) => return Err(e),
        }
    }
}

/// `len` bytes of `from` at `at`, written to `to`, 64 KiB at a time.
fn copy_range(from: &File, mut at: u64, len: u64, to: &mut impl Write) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; CHUNK.min(len as usize).max(1)];
    let end = at + len;
    while at < end {
        let want = ((end - at) as usize).min(buf.len());
        let n = from.read_at(&mut buf[..want], at)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        to.write_all(&buf[..n])?;
        at += n as u64;
    }
    Ok(())
}

/// Writes to a file from an offset on.
struct WriteAt<'f> {
    file: &'f File,
    at: u64,
}

impl Write for WriteAt<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let n = self.file.write_at(buf, self.at)?;
        self.at += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Seek};

    use super::*;
    use crate::process::test_support::*;
    use crate::process::*;

    #[test]
    fn scratch_files_have_no_name() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(format!(".cassist-scratch-{}-0", std::process::id())), "taken").unwrap();
        for make in [scratch_file, created_then_unlinked] {
            let mut file = make(dir.path()).unwrap();
            file.write_all(b"ring").unwrap();
            file.rewind().unwrap();
            let mut back = String::new();
            file.read_to_string(&mut back).unwrap();
            assert_eq!(back, "ring");
            let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
            assert_eq!(names.len(), 1, "only the file that was there: {names:?}");
        }
    }

    #[test]
    fn transcripts_keep_the_first_and_the_last_half_of_their_limit() {
        let dir = tempfile::tempdir().unwrap();
        let transcript = dir.path().join("t.log");
        std::fs::write(&transcript, "earlier run\n").unwrap();
        // 20000 numbered lines, 208894 bytes; 1000 are kept.
        let script = "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); echo \"line $i\"; done";
        let mut c = sh(dir.path(), script);
        c.transcript = Some(transcript.clone());
        c.transcript_limit = 1000;
        let f = go(&c);
        let full: String = (1..=20000).map(|i| format!("line {i}\n")).collect();
        assert_eq!(f.output_bytes, full.len() as u64);
        let kept = std::fs::read_to_string(&transcript).unwrap();
        let cut = full.len() - 1000;
        let expected =
            format!("earlier run\n{}\n[cassist: {cut} bytes cut]\n{}", &full[..500], &full[full.len() - 500..]);
        assert_eq!(kept, expected);
        assert!(kept.ends_with("line 20000\n"), "the end of the output, where a CLI's final JSON is, is kept");
        assert!(f.tail.ends_with("line 20000\n") && f.transcript_error.is_none());

        // Within the limit, the transcript is the whole output, as it came.
        let mut c = sh(dir.path(), script);
        c.transcript = Some(dir.path().join("whole.log"));
        c.transcript_limit = full.len() as u64;
        go(&c);
        assert_eq!(std::fs::read_to_string(dir.path().join("whole.log")).unwrap(), full);

        // Past it by one byte, and wrapped several times over an odd ring.
        for limit in [full.len() as u64 - 1, 333] {
            let mut c = sh(dir.path(), script);
            let log = dir.path().join(format!("t-{limit}.log"));
            c.transcript = Some(log.clone());
            c.transcript_limit = limit;
            go(&c);
            let (head, ring) = ((limit / 2) as usize, (limit - limit / 2) as usize);
            let cut = full.len() - limit as usize;
            let expected = format!("{}\n[cassist: {cut} bytes cut]\n{}", &full[..head], &full[full.len() - ring..]);
            assert_eq!(std::fs::read_to_string(&log).unwrap(), expected, "limit {limit}");
        }
    }

    #[test]
    fn transcript_that_cannot_be_opened_is_an_error_before_running() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = sh(dir.path(), "echo ran > ran");
        c.transcript = Some(dir.path().join("no/such/dir/t.log"));
        assert!(run(&c, &Redactor::default(), &Cancel::new()).is_err());
        assert!(!dir.path().join("ran").exists());
    }
}
