//! The out-of-memory hint: a line of output that reports a killed process.

use std::sync::OnceLock;

/// Looks for a line that reports a killed process, across chunk boundaries.
#[derive(Default)]
pub(super) struct KillScan {
    /// The end of the previous data, prefixed with `|` when it does not
    /// start a line (so `^` cannot match there).
    carry: Vec<u8>,
    window: Vec<u8>,
    pub(super) found: bool,
}

impl KillScan {
    const CARRY: usize = 128;

    pub(super) fn feed(&mut self, chunk: &[u8]) {
        static WORD: OnceLock<regex::bytes::Regex> = OnceLock::new();
        static LINE: OnceLock<regex::bytes::Regex> = OnceLock::new();
        if self.found {
            return;
        }
        let word = WORD.get_or_init(|| regex::bytes::Regex::new("Killed|SIGKILL").expect("valid regex"));
        let line = LINE.get_or_init(|| {
            regex::bytes::Regex::new(
                r"(?m)^[ \t]*Killed(?:: 9)?[ \t\r]*$|\b[0-9]+[ \t]+Killed\b|SIGKILL: kill|signal 9 \[Killed\]",
            )
            .expect("valid regex")
        });
        self.window.clear();
        self.window.extend_from_slice(&self.carry);
        self.window.extend_from_slice(chunk);
        if word.is_match(&self.window) && line.is_match(&self.window) {
            self.found = true;
            return;
        }
        let w = &self.window;
        self.carry.clear();
        if w.len() <= Self::CARRY {
            self.carry.extend_from_slice(w);
        } else {
            let cut = w.len() - Self::CARRY;
            if w[cut - 1] != b'\n' {
                self.carry.push(b'|');
            }
            self.carry.extend_from_slice(&w[cut..]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::test_support::*;

    #[test]
    fn killed_line_is_a_hint() {
        let dir = tempfile::tempdir().unwrap();
        for (script, hint) in [
            ("echo Killed", true),
            ("echo 'sh: line 1: 4242 Killed    cargo build'", true),
            ("echo 'error: process didn'\\''t exit successfully (signal: 9, SIGKILL: kill)'", true),
            ("echo 'Not Killed here'; echo 'Killed by a test'", false),
        ] {
            assert_eq!(go(&sh(dir.path(), script)).killed_by_oom_hint, hint, "{script}");
        }
    }

    #[test]
    fn kill_scan_sees_lines_across_chunks() {
        let mut scan = KillScan::default();
        scan.feed(&[b'y'; 200]);
        scan.feed(b"\nKil");
        scan.feed(b"led\n");
        assert!(scan.found);

        // "Killed" at the start of a chunk but in the middle of a line.
        let mut scan = KillScan::default();
        scan.feed(&[b'y'; 300]);
        scan.feed(b"Killed\n");
        assert!(!scan.found);
    }
}
