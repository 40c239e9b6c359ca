//! The child's output, read as it comes and kept bounded: redacted to the
//! transcript, its tail in memory, scanned for a killed process.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};

use super::kill_scan::KillScan;
use super::transcript::CappedFile;
use super::{CHUNK, RedactingWriter, Redactor};

#[derive(Default)]
pub(super) struct Captured {
    pub(super) output_bytes: u64,
    pub(super) tail: String,
    pub(super) killed_hint: bool,
    pub(super) transcript_error: Option<io::Error>,
}

/// The child's output, read as it comes: streamed redacted to the
/// transcript, its tail kept, scanned for a killed process.
pub(super) struct Output {
    reader: io::PipeReader,
    out: RedactingWriter<Sink>,
    scan: KillScan,
    total: u64,
    buf: Vec<u8>,
    /// EOF (or a read error): nothing more will come.
    pub(super) done: bool,
}

impl Output {
    pub(super) fn new(
        reader: io::PipeReader,
        transcript: Option<CappedFile>,
        redactor: &Redactor,
        tail_limit: usize,
    ) -> Output {
        Output {
            reader,
            out: RedactingWriter::new(Sink::new(transcript, tail_limit), redactor),
            scan: KillScan::default(),
            total: 0,
            buf: vec![0u8; CHUNK],
            done: false,
        }
    }

    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        self.reader.as_fd()
    }

    /// Reads what the pipe holds now (one chunk at most).
    pub(super) fn read(&mut self) {
        match (&self.reader).read(&mut self.buf) {
            Ok(0) => self.done = true,
            Ok(n) => {
                self.total += n as u64;
                self.scan.feed(&self.buf[..n]);
                // The sink never fails.
                let _ = self.out.write_all(&self.buf[..n]);
            }
            Err(e) if matches!(e.kind(), io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock) => {}
            Err(_) => self.done = true,
        }
    }

    pub(super) fn finish(mut self) -> Captured {
        let _ = self.out.finish();
        let mut sink = self.out.into_inner();
        if let Some(file) = &mut sink.transcript
            && let Err(e) = file.finish()
        {
            sink.transcript_error = Some(e);
        }
        Captured {
            output_bytes: self.total,
            tail: sink.tail_text(),
            killed_hint: self.scan.found,
            transcript_error: sink.transcript_error,
        }
    }
}

/// Where redacted output goes: the transcript file and the tail. Never
/// fails: a transcript write error is kept and the transcript dropped.
struct Sink {
    transcript: Option<CappedFile>,
    transcript_error: Option<io::Error>,
    tail: VecDeque<u8>,
    tail_limit: usize,
}

impl Sink {
    fn new(transcript: Option<CappedFile>, tail_limit: usize) -> Sink {
        Sink { transcript, transcript_error: None, tail: VecDeque::with_capacity(tail_limit), tail_limit }
    }

    fn tail_text(&mut self) -> String {
        let bytes = self.tail.make_contiguous();
        // Drop a character cut in half at the start.
        let skip = bytes.iter().take(3).take_while(|b| (**b & 0xC0) == 0x80).count();
        String::from_utf8_lossy(&bytes[skip..]).into_owned()
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.tail_limit > 0 {
            if buf.len() >= self.tail_limit {
                self.tail.clear();
                self.tail.extend(&buf[buf.len() - self.tail_limit..]);
            } else {
                let overflow = (self.tail.len() + buf.len()).saturating_sub(self.tail_limit);
                self.tail.drain(..overflow);
                self.tail.extend(buf);
            }
        }
        if let Some(file) = &mut self.transcript
            && let Err(e) = file.write_all(buf)
        {
            self.transcript_error = Some(e);
            self.transcript = None;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use crate::process::test_support::*;
    use crate::process::*;

    #[test]
    fn secret_split_across_writes_is_redacted_in_transcript_and_tail() {
        let dir = tempfile::tempdir().unwrap();
        let transcript = dir.path().join("t.log");
        std::fs::write(&transcript, "earlier\n").unwrap();
        let mut c = sh(dir.path(), "printf 'abc-s3cr'; sleep 0.2; printf 'et-value-xyz\\n'");
        c.transcript = Some(transcript.clone());
        let redactor = Redactor::new(vec![b"s3cret-value".to_vec()]);
        let f = run(&c, &redactor, &Cancel::new()).unwrap();
        assert_eq!(std::fs::read_to_string(&transcript).unwrap(), "earlier\nabc-[REDACTED]-xyz\n");
        assert_eq!(f.tail, "abc-[REDACTED]-xyz\n");
        assert_eq!(f.output_bytes, "abc-s3cret-value-xyz\n".len() as u64);
        assert!(f.transcript_error.is_none());
    }

    #[test]
    fn output_larger_than_the_tail_limit_keeps_only_the_tail() {
        let dir = tempfile::tempdir().unwrap();
        let transcript = dir.path().join("t.log");
        let mut c = sh(dir.path(), "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); echo \"line $i\"; done");
        c.tail_limit = 100;
        c.transcript = Some(transcript.clone());
        let f = go(&c);
        let full = std::fs::read_to_string(&transcript).unwrap();
        assert_eq!(full.lines().count(), 20000);
        assert_eq!(f.output_bytes, full.len() as u64);
        assert_eq!(f.tail.len(), 100);
        assert!(full.ends_with(&f.tail));
        assert!(f.tail.ends_with("line 20000\n"));
    }

    #[test]
    fn tail_drops_a_cut_character() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = sh(dir.path(), "printf 'aé'");
        c.tail_limit = 2; // the two bytes of 'é'
        assert_eq!(go(&c).tail, "é");
        c.tail_limit = 1; // only its second byte
        assert_eq!(go(&c).tail, "");
    }

    /// `cargo test -p cassist-sandbox --lib process::capture::tests::one_gigabyte -- --ignored --nocapture`
    #[test]
    #[ignore]
    // Its figures go to the test harness's output.
    #[allow(clippy::disallowed_macros)]
    fn one_gigabyte_of_output_in_constant_memory() {
        fn hwm_kib() -> u64 {
            let status = std::fs::read_to_string("/proc/self/status").unwrap();
            let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
            line.split_whitespace().nth(1).unwrap().parse().unwrap()
        }
        let dir = tempfile::tempdir().unwrap();
        let before = hwm_kib();
        let mut c = sh(dir.path(), "yes | head -c 1000000000");
        c.transcript = Some(dir.path().join("t.log"));
        let redactor = Redactor::new(vec![b"not-in-the-output".to_vec()]);
        let t = Instant::now();
        let f = run(&c, &redactor, &Cancel::new()).unwrap();
        let elapsed = t.elapsed();
        let after = hwm_kib();
        let written = std::fs::metadata(dir.path().join("t.log")).unwrap().len();
        println!(
            "1 GB: {} bytes in {elapsed:?}, transcript {written} bytes, VmHWM before {before} KiB, after {after} KiB (+{} KiB)",
            f.output_bytes,
            after - before
        );
        assert_eq!(f.output_bytes, 1_000_000_000);
        // The transcript is capped: the first and last 32 MiB, a marker.
        let marker = format!("\n[cassist: {} bytes cut]\n", 1_000_000_000 - (64u64 << 20));
        assert_eq!(written, (64 << 20) + marker.len() as u64);
        assert!(after - before < 20 * 1024, "peak RSS grew by {} KiB", after - before);
    }
}
