//! The out-of-memory hint: a line of output that reports a killed process.

use std::sync::OnceLock;

use aho_corasick::AhoCorasick;

/// Looks for a line that reports a killed process, across chunk boundaries:
/// [`reports_a_kill`] over the end of the data before and the new chunk.
#[derive(Default)]
pub(super) struct KillScan {
    /// The end of the previous data, prefixed with `|` when it does not
    /// start a line (so it cannot be taken for a line's start).
    carry: Vec<u8>,
    window: Vec<u8>,
    pub(super) found: bool,
}

impl KillScan {
    const CARRY: usize = 128;

    pub(super) fn feed(&mut self, chunk: &[u8]) {
        if self.found {
            return;
        }
        self.window.clear();
        self.window.extend_from_slice(&self.carry);
        self.window.extend_from_slice(chunk);
        if reports_a_kill(&self.window) {
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

/// Whether `hay` holds one of the ways a shell, a runtime or cargo says
/// that a process was killed (what the kernel's out-of-memory killer
/// does):
///
/// - a line of `Killed` alone (or `Killed: 9`), blanks and a `\r` around
///   it (a shell's report of its job);
/// - `Killed` after a number and blanks, as a word (`sh: line 1: 4242
///   Killed    cargo build`);
/// - `SIGKILL: kill` (cargo's `signal: 9, SIGKILL: kill`);
/// - `signal 9 [Killed]`.
///
/// Lines end at `\n`; the start and the end of `hay` count as a line's
/// start and end. A word is made of letters, digits and `_` (Unicode
/// letters and digits too).
fn reports_a_kill(hay: &[u8]) -> bool {
    static WORDS: OnceLock<Option<AhoCorasick>> = OnceLock::new();
    const KILLED: &[u8] = b"Killed";
    // Every form holds one of the two: one pass finds where to look.
    let Some(words) = WORDS.get_or_init(|| AhoCorasick::new([KILLED, b"SIGKILL: kill".as_slice()]).ok()) else {
        return false;
    };
    words.find_iter(hay).any(|m| {
        if m.pattern().as_usize() == 1 {
            return true;
        }
        let (before, after) = (&hay[..m.start()], &hay[m.end()..]);
        killed_alone_on_its_line(before, after)
            || killed_after_a_number(before, after)
            || (before.ends_with(b"signal 9 [") && after.starts_with(b"]"))
    })
}

/// `Killed` (or `Killed: 9`) between `before` and `after` is alone on its
/// line but for blanks (and a `\r` after it).
fn killed_alone_on_its_line(before: &[u8], after: &[u8]) -> bool {
    let blank_to_line_start = before.iter().rev().find(|b| !matches!(b, b' ' | b'\t')).is_none_or(|b| *b == b'\n');
    let blank_to_line_end =
        |rest: &[u8]| rest.iter().find(|b| !matches!(b, b' ' | b'\t' | b'\r')).is_none_or(|b| *b == b'\n');
    blank_to_line_start && (after.strip_prefix(b": 9").is_some_and(blank_to_line_end) || blank_to_line_end(after))
}

/// `Killed` between `before` and `after` is a word that follows blanks,
/// which follow a number that starts a word.
fn killed_after_a_number(before: &[u8], after: &[u8]) -> bool {
    let blanks = before.iter().rev().take_while(|b| matches!(b, b' ' | b'\t')).count();
    let number = &before[..before.len() - blanks];
    let digits = number.iter().rev().take_while(|b| b.is_ascii_digit()).count();
    blanks > 0
        && digits > 0
        && !last_char(&number[..number.len() - digits]).is_some_and(is_word)
        && !first_char(after).is_some_and(is_word)
}

/// A character of a word: a letter, a digit or `_`.
fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The character `bytes` start with, if they start with valid UTF-8.
fn first_char(bytes: &[u8]) -> Option<char> {
    let len = match bytes.first()? {
        b if *b < 0x80 => 1,
        b if *b >> 5 == 0b110 => 2,
        b if *b >> 4 == 0b1110 => 3,
        _ => 4,
    };
    std::str::from_utf8(bytes.get(..len)?).ok()?.chars().next()
}

/// The character `bytes` end with, if they end with valid UTF-8.
fn last_char(bytes: &[u8]) -> Option<char> {
    (1..=4.min(bytes.len())).find_map(|n| std::str::from_utf8(&bytes[bytes.len() - n..]).ok()?.chars().next_back())
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

    #[test]
    fn each_form_of_a_kill_report_is_seen_and_its_look_alikes_are_not() {
        for hay in [
            "Killed",
            "  Killed \r\n",
            "make: ok\n\tKilled: 9\nnext",
            "4242 Killed    cargo build",
            "sh: line 1: 4242\tKilled",
            "(signal: 9, SIGKILL: kill)",
            "exited with signal 9 [Killed].",
            "x\n Killed\t",
        ] {
            assert!(reports_a_kill(hay.as_bytes()), "{hay:?}");
        }
        for hay in [
            "Not Killed here",
            "Killed by a test",
            "Killed: 99",
            "Killedx",
            "a4242 Killed",
            "4242 Killedx",
            "4242Killed",
            "é4242 Killed",
            "4242 Killedé",
            "signal 9 [Killed",
            "SIGKILL: Kill",
            "|Killed",
        ] {
            assert!(!reports_a_kill(hay.as_bytes()), "{hay:?}");
        }
    }

    /// The scan says what the regular expression it replaces said,
    /// `(?m)^[ \t]*Killed(?:: 9)?[ \t\r]*$|\b[0-9]+[ \t]+Killed\b|SIGKILL: kill|signal 9 \[Killed\]`,
    /// on many texts made of the pieces that matter.
    #[test]
    fn the_scan_agrees_with_the_regular_expression_it_replaces() {
        let regex = regex::bytes::Regex::new(
            r"(?m)^[ \t]*Killed(?:: 9)?[ \t\r]*$|\b[0-9]+[ \t]+Killed\b|SIGKILL: kill|signal 9 \[Killed\]",
        )
        .unwrap();
        let pieces: [&[u8]; 18] = [
            b"Killed",
            b"Kill",
            b"ed",
            b": 9",
            b"9",
            b"42",
            b" ",
            b"\t",
            b"\r",
            b"\n",
            b"x",
            b"_",
            "é".as_bytes(),
            b"|",
            b"SIGKILL: kill",
            b"SIGKILL",
            b"signal 9 [",
            b"]",
        ];
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let (mut seen, mut hay) = (0, Vec::new());
        for _ in 0..200_000 {
            hay.clear();
            for _ in 0..next() % 8 {
                hay.extend_from_slice(pieces[(next() % pieces.len() as u64) as usize]);
            }
            let expected = regex.is_match(&hay);
            assert_eq!(reports_a_kill(&hay), expected, "{:?}", String::from_utf8_lossy(&hay));
            seen += usize::from(expected);
        }
        assert!(seen > 1000, "only {seen} texts reported a kill");
    }
}
