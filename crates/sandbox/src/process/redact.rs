//! Secrets out of what cassist keeps: [`Redactor`] replaces the values of
//! secret-looking variables by [`REDACTED`], in text, bytes and JSON
//! documents; [`RedactingWriter`] does it to a stream, a secret split
//! across writes included.

use std::ffi::OsStr;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

/// Text that replaces a secret value in transcripts and tails.
pub const REDACTED: &str = "[REDACTED]";

/// Parts of a variable name that mark its value as a secret (case-insensitive).
pub const SECRET_NAME_PARTS: [&str; 6] = ["KEY", "TOKEN", "SECRET", "PASSWORD", "AUTH", "CREDENTIAL"];

/// Values shorter than this are not treated as secrets (`1`, `true`, `yes`
/// would otherwise be blanked out everywhere).
pub const MIN_SECRET_LEN: usize = 6;

/// Replaces known secret values by [`REDACTED`].
///
/// [`Redactor::from_env`] takes the values of cassist's own variables whose
/// names contain one of [`SECRET_NAME_PARTS`] (case-insensitive), ignoring
/// values shorter than [`MIN_SECRET_LEN`] bytes. Where secrets overlap, the
/// longest one at the leftmost position wins. Cheap to clone.
#[derive(Clone, Default)]
pub struct Redactor {
    matcher: Option<Arc<Matcher>>,
}

struct Matcher {
    /// All secrets at once, leftmost-longest; `None` only if the automaton
    /// could not be built (then the naive search below is used).
    automaton: Option<aho_corasick::AhoCorasick>,
    /// Longest first, deduplicated.
    secrets: Vec<Vec<u8>>,
    longest: usize,
}

impl Matcher {
    /// Leftmost match at or after `from`; the longest secret at that position.
    fn find_at(&self, hay: &[u8], from: usize) -> Option<(usize, usize)> {
        if let Some(ac) = &self.automaton {
            return ac.find(aho_corasick::Input::new(hay).range(from..)).map(|m| (m.start(), m.end()));
        }
        let mut best: Option<(usize, usize)> = None;
        for secret in &self.secrets {
            let Some(at) = hay[from..].windows(secret.len()).position(|w| w == secret.as_slice()) else {
                continue;
            };
            let start = from + at;
            if best.is_none_or(|(b, _)| start < b) {
                best = Some((start, start + secret.len()));
            }
        }
        best
    }
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secrets themselves.
        let n = self.matcher.as_ref().map_or(0, |m| m.secrets.len());
        f.debug_struct("Redactor").field("secrets", &n).finish()
    }
}

impl Redactor {
    /// Secrets taken from cassist's own environment ([`std::env::vars_os`]).
    pub fn from_env() -> Redactor {
        Redactor::from_vars(std::env::vars_os())
    }

    /// Secrets taken from the given variables: the values of those whose
    /// name [`is_secret_name`](Redactor::is_secret_name).
    pub fn from_vars<I, K, V>(vars: I) -> Redactor
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        let secrets = vars
            .into_iter()
            .filter(|(name, _)| Redactor::is_secret_name(name.as_ref()))
            .map(|(_, value)| value.as_ref().as_bytes().to_vec())
            .collect();
        Redactor::new(secrets)
    }

    /// Whether a variable of this name holds a secret: its name contains
    /// one of [`SECRET_NAME_PARTS`], case-insensitive.
    pub fn is_secret_name(name: &OsStr) -> bool {
        let upper = name.as_bytes().to_ascii_uppercase();
        SECRET_NAME_PARTS.iter().any(|part| upper.windows(part.len()).any(|w| w == part.as_bytes()))
    }

    /// A redactor for these values; those shorter than [`MIN_SECRET_LEN`]
    /// bytes are ignored.
    pub fn new(secrets: Vec<Vec<u8>>) -> Redactor {
        let mut secrets: Vec<Vec<u8>> = secrets.into_iter().filter(|s| s.len() >= MIN_SECRET_LEN).collect();
        if secrets.is_empty() {
            return Redactor { matcher: None };
        }
        secrets.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        secrets.dedup();
        let longest = secrets[0].len();
        // Leftmost-longest: where secrets overlap, the longest one at the
        // leftmost position wins, whatever the bytes (no escaping needed).
        let automaton = aho_corasick::AhoCorasick::builder()
            .match_kind(aho_corasick::MatchKind::LeftmostLongest)
            .build(&secrets)
            .ok();
        Redactor { matcher: Some(Arc::new(Matcher { automaton, secrets, longest })) }
    }

    /// Whether `bytes` hold the value of one of the secrets.
    pub fn contains_secret(&self, bytes: &[u8]) -> bool {
        self.matcher.as_ref().is_some_and(|m| m.find_at(bytes, 0).is_some())
    }

    /// `text` with every secret replaced by [`REDACTED`].
    pub fn redact(&self, text: &str) -> String {
        match self.redact_bytes(text.as_bytes()) {
            std::borrow::Cow::Borrowed(_) => text.to_owned(),
            std::borrow::Cow::Owned(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        }
    }

    /// `bytes` with every secret replaced by [`REDACTED`].
    pub fn redact_bytes<'a>(&self, bytes: &'a [u8]) -> std::borrow::Cow<'a, [u8]> {
        let Some(m) = &self.matcher else {
            return std::borrow::Cow::Borrowed(bytes);
        };
        let mut out = Vec::new();
        let mut pos = 0;
        while let Some((start, end)) = m.find_at(bytes, pos) {
            out.extend_from_slice(&bytes[pos..start]);
            out.extend_from_slice(REDACTED.as_bytes());
            pos = end;
        }
        if pos == 0 {
            return std::borrow::Cow::Borrowed(bytes);
        }
        out.extend_from_slice(&bytes[pos..]);
        std::borrow::Cow::Owned(out)
    }

    /// A document an agent wrote (its result file, a CLI's JSON output)
    /// redacted for storing: every secret replaced in its bytes and, when
    /// it is JSON, in its strings as they decode (a secret written with
    /// `\u` escapes is found too; the document is then written again).
    pub fn redact_document(&self, bytes: &[u8]) -> Vec<u8> {
        if self.is_empty() {
            return bytes.to_vec();
        }
        if let Ok(mut doc) = serde_json::from_slice::<serde_json::Value>(bytes)
            && self.redact_json(&mut doc)
        {
            return serde_json::to_vec_pretty(&doc).unwrap_or_else(|_| self.redact_bytes(bytes).into_owned());
        }
        self.redact_bytes(bytes).into_owned()
    }

    /// Redacts every string (and key) of `v`; whether any held a secret.
    fn redact_json(&self, v: &mut serde_json::Value) -> bool {
        use serde_json::Value;
        match v {
            Value::String(s) if self.contains_secret(s.as_bytes()) => {
                *s = self.redact(s);
                true
            }
            Value::Array(items) => items.iter_mut().fold(false, |any, item| self.redact_json(item) | any),
            Value::Object(map) => {
                let mut any = false;
                let old = std::mem::take(map);
                for (k, mut item) in old {
                    any |= self.redact_json(&mut item) | self.contains_secret(k.as_bytes());
                    map.insert(self.redact(&k), item);
                }
                any
            }
            _ => false,
        }
    }

    /// Whether there is nothing to redact.
    pub fn is_empty(&self) -> bool {
        self.matcher.is_none()
    }

    /// Length of the longest secret (0 when empty).
    pub fn longest(&self) -> usize {
        self.matcher.as_ref().map_or(0, |m| m.longest)
    }
}

/// A [`Write`] adapter that redacts a stream.
///
/// It holds back at most `longest secret - 1` bytes that could be the start
/// of a secret completed by the next write, so a secret split across writes
/// is still replaced. Call [`finish`](RedactingWriter::finish) at the end to
/// write what is held back; [`flush`](Write::flush) flushes the inner writer
/// but keeps those bytes (they might still become a secret). Dropping the
/// writer without `finish` loses them (it never leaks them).
pub struct RedactingWriter<W: Write> {
    inner: W,
    matcher: Option<Arc<Matcher>>,
    pending: Vec<u8>,
    out: Vec<u8>,
}

impl<W: Write> RedactingWriter<W> {
    pub fn new(inner: W, redactor: &Redactor) -> RedactingWriter<W> {
        RedactingWriter { inner, matcher: redactor.matcher.clone(), pending: Vec::new(), out: Vec::new() }
    }

    /// Writes whatever is held back (redacted) and flushes the inner writer.
    pub fn finish(&mut self) -> io::Result<()> {
        self.emit(true)?;
        self.inner.flush()
    }

    /// The inner writer, without writing what is held back: call
    /// [`finish`](RedactingWriter::finish) first.
    pub fn into_inner(self) -> W {
        self.inner
    }

    pub fn get_ref(&self) -> &W {
        &self.inner
    }

    pub fn get_mut(&mut self) -> &mut W {
        &mut self.inner
    }

    /// Number of bytes currently held back.
    pub fn held_back(&self) -> usize {
        self.pending.len()
    }

    fn emit(&mut self, all: bool) -> io::Result<()> {
        let Some(m) = &self.matcher else {
            return Ok(());
        };
        let hold = if all { 0 } else { m.longest - 1 };
        // A match starting before `safe_end` is complete: even the longest
        // secret starting there fits in what we have.
        let safe_end = self.pending.len().saturating_sub(hold);
        self.out.clear();
        let mut pos = 0;
        while let Some((start, end)) = m.find_at(&self.pending, pos) {
            if start >= safe_end {
                break;
            }
            self.out.extend_from_slice(&self.pending[pos..start]);
            self.out.extend_from_slice(REDACTED.as_bytes());
            pos = end;
        }
        let keep_from = pos.max(safe_end);
        self.out.extend_from_slice(&self.pending[pos..keep_from]);
        self.pending.drain(..keep_from);
        if self.out.is_empty() {
            return Ok(());
        }
        self.inner.write_all(&self.out)
    }
}

impl<W: Write> Write for RedactingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.matcher.is_none() {
            self.inner.write_all(buf)?;
            return Ok(buf.len());
        }
        self.pending.extend_from_slice(buf);
        self.emit(false)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_are_redacted_in_their_bytes_and_their_decoded_strings() {
        let r = Redactor::new(vec![b"s3cret-value".to_vec()]);
        // Written with a JSON escape, the secret is found as the string decodes.
        let doc = br#"{"success": true, "summary": "the key is s3cret-value", "n": [1, "s3cret-value"]}"#;
        let out = String::from_utf8(r.redact_document(doc)).unwrap();
        assert!(!out.contains("s3cret-value") && !out.contains("s3cr\\u0065t"), "{out}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["summary"], "the key is [REDACTED]");
        assert_eq!(v["n"][1], "[REDACTED]");
        assert_eq!(v["success"], true);
        // Not JSON: its bytes.
        assert_eq!(r.redact_document(b"plain s3cret-value\n"), b"plain [REDACTED]\n");
        // Nothing to redact: as it was.
        assert_eq!(r.redact_document(br#"{"a": 1}"#), br#"{"a": 1}"#);
        assert_eq!(Redactor::default().redact_document(b"s3cret-value"), b"s3cret-value");
    }

    #[test]
    fn redactor_takes_secret_looking_variables() {
        let r = Redactor::from_vars([
            ("OPENAI_API_KEY", "sk-123456789"),
            ("github_token", "ghp_abcdefgh"),
            ("MY_PASSWORD", "hunter2-long"),
            ("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI"),
            ("X_AUTH", "authvalue"),
            ("GCP_CREDENTIALS", "/creds.json"),
            ("SHORT_KEY", "12345"),
            ("HOME", "/home/someone"),
        ]);
        assert_eq!(
            r.redact("sk-123456789 ghp_abcdefgh hunter2-long wJalrXUtnFEMI authvalue /creds.json 12345 /home/someone"),
            "[REDACTED] [REDACTED] [REDACTED] [REDACTED] [REDACTED] [REDACTED] 12345 /home/someone"
        );
        assert!(!r.is_empty());
        assert!(Redactor::from_vars([("HOME", "/home/someone")]).is_empty());
        assert!(Redactor::new(vec![b"12345".to_vec()]).is_empty());
        assert_eq!(format!("{r:?}"), "Redactor { secrets: 6 }");
    }

    #[test]
    fn longest_overlapping_secret_wins() {
        let r = Redactor::new(vec![b"abcdef".to_vec(), b"abcdefghij".to_vec(), b"ghijkl".to_vec()]);
        assert_eq!(r.redact("xx abcdefghij yy"), "xx [REDACTED] yy");
        assert_eq!(r.redact("abcdefgh"), "[REDACTED]gh");
        assert_eq!(r.redact("no secret"), "no secret");
        assert_eq!(r.redact("a+b.c*[regex]"), "a+b.c*[regex]");
        let meta = Redactor::new(vec![b"a+b.c*[x]".to_vec()]);
        assert_eq!(meta.redact("1 a+b.c*[x] 2 aab.cc[x]"), "1 [REDACTED] 2 aab.cc[x]");
    }

    #[test]
    fn automaton_and_naive_search_agree() {
        let r = Redactor::new(vec![b"abcdef".to_vec(), b"abcdefghij".to_vec(), b"cdefgh".to_vec(), b"zzzzzz".to_vec()]);
        let m = r.matcher.as_ref().unwrap();
        assert!(m.automaton.is_some());
        let naive = Matcher { automaton: None, secrets: m.secrets.clone(), longest: m.longest };
        let text = b"-abcdefghij-abcdef-abcdezzzzzzzzz-abcdefghi-cdefghij-xabcdefgh";
        for from in 0..text.len() {
            assert_eq!(m.find_at(text, from), naive.find_at(text, from), "from {from}");
        }
    }

    #[test]
    fn redacting_writer_matches_one_shot_redaction_whatever_the_split() {
        let r = Redactor::new(vec![b"abcdef".to_vec(), b"abcdefghij".to_vec(), b"zzzzzz".to_vec()]);
        let text = b"-abcdefghij-abcdef-abcdezzzzzzzz-abcdefghi-abcdefghij";
        let expected = r.redact_bytes(text).into_owned();
        for step in 1..text.len() {
            let mut w = RedactingWriter::new(Vec::new(), &r);
            for piece in text.chunks(step) {
                w.write_all(piece).unwrap();
                assert!(w.held_back() < r.longest(), "held back {}", w.held_back());
                // What is out already is final.
                assert!(expected.starts_with(w.get_ref()), "step {step}");
            }
            w.finish().unwrap();
            assert_eq!(w.into_inner(), expected, "step {step}");
        }
    }

    #[test]
    fn redacting_writer_without_secrets_passes_through() {
        let mut w = RedactingWriter::new(Vec::new(), &Redactor::default());
        w.write_all(b"abc").unwrap();
        assert_eq!(w.get_ref(), b"abc");
        w.finish().unwrap();
        assert_eq!(w.into_inner(), b"abc");
    }

    #[test]
    fn non_utf8_secrets_are_redacted() {
        let r = Redactor::new(vec![vec![0xff, 0xfe, b'a', b'b', 0x80, 0x00]]);
        let out = r.redact_bytes(&[b'x', 0xff, 0xfe, b'a', b'b', 0x80, 0x00, b'y']);
        assert_eq!(&*out, b"x[REDACTED]y");
    }
}
