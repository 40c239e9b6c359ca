//! Diagnostics for task files and the project config.
//!
//! Every problem found in user input becomes a [`SpecDiagnostic`]: a message,
//! the file it is in, a labelled span and help text. They are collected, never
//! thrown, so that one run reports every error of every file.

use std::fmt;
use std::sync::Arc;

use miette::{Diagnostic, LabeledSpan, NamedSource, Severity, SourceSpan};

/// `s` with its invisible characters escaped (see [`SpecDiagnostic`]).
pub fn shown(s: String) -> String {
    match crate::text::shown(&s) {
        std::borrow::Cow::Borrowed(_) => s,
        std::borrow::Cow::Owned(o) => o,
    }
}

/// A file read from disk, kept whole so diagnostics can point into it.
#[derive(Debug)]
pub struct SourceFile {
    /// The name shown to the user: relative to the project root when inside it.
    pub name: String,
    pub text: Arc<String>,
}

impl SourceFile {
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> Arc<SourceFile> {
        Arc::new(SourceFile { name: name.into(), text: Arc::new(text.into()) })
    }

    /// A placeholder, replaced before use.
    pub fn empty() -> Arc<SourceFile> {
        SourceFile::new("", "")
    }

    /// 1-based line and column of a byte offset.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let before = &self.text.as_bytes()[..offset];
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let line_start = before.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
        let col = String::from_utf8_lossy(&before[line_start..]).chars().count() + 1;
        (line, col)
    }
}

/// A value read from a KDL document, with where it was.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Spanned<T> {
    pub value: T,
    pub span: SourceSpan,
}

impl<T> Spanned<T> {
    pub fn new(value: T, span: SourceSpan) -> Self {
        Spanned { value, span }
    }
}

/// One problem in user input. Its message, labels and help show every
/// invisible character as an escape ([`crate::text::shown`]): a name that
/// holds a zero-width space must not look valid in the message that
/// rejects it.
#[derive(Debug, Clone)]
pub struct SpecDiagnostic {
    pub code: &'static str,
    pub message: String,
    pub severity: Severity,
    /// The file and span it points at; `None` for problems with no location
    /// (a folder with no task files, say).
    pub source: Option<Arc<SourceFile>>,
    pub labels: Vec<(SourceSpan, String)>,
    pub help: Option<String>,
    named: Option<Box<NamedSource<Arc<String>>>>,
}

impl SpecDiagnostic {
    pub fn error(code: &'static str, message: impl Into<String>) -> Self {
        SpecDiagnostic {
            code,
            message: shown(message.into()),
            severity: Severity::Error,
            source: None,
            labels: Vec::new(),
            help: None,
            named: None,
        }
    }

    pub fn warning(code: &'static str, message: impl Into<String>) -> Self {
        SpecDiagnostic { severity: Severity::Warning, ..Self::error(code, message) }
    }

    /// Points the diagnostic at `span` of `source` with a label.
    pub fn at(mut self, source: &Arc<SourceFile>, span: SourceSpan, label: impl Into<String>) -> Self {
        if self.source.is_none() {
            self.named = Some(Box::new(NamedSource::new(source.name.clone(), Arc::clone(&source.text))));
            self.source = Some(Arc::clone(source));
        }
        self.labels.push((span, shown(label.into())));
        self
    }

    /// A second label in the same file.
    pub fn also(mut self, span: SourceSpan, label: impl Into<String>) -> Self {
        self.labels.push((span, shown(label.into())));
        self
    }

    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(shown(help.into()));
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// Sort key: file name, then position, then message.
    fn sort_key(&self) -> (String, usize, String) {
        let file = self.source.as_ref().map(|s| s.name.clone()).unwrap_or_default();
        let offset = self.labels.first().map_or(0, |(s, _)| s.offset());
        (file, offset, self.message.clone())
    }

    /// `file:line:col` of the primary label, for one-line renderings.
    pub fn location(&self) -> Option<(String, usize, usize)> {
        let source = self.source.as_ref()?;
        let (span, _) = self.labels.first()?;
        let (line, col) = source.line_col(span.offset());
        Some((source.name.clone(), line, col))
    }
}

impl fmt::Display for SpecDiagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SpecDiagnostic {}

impl Diagnostic for SpecDiagnostic {
    fn code<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        Some(Box::new(format!("cassist::{}", self.code)))
    }

    fn severity(&self) -> Option<Severity> {
        Some(self.severity)
    }

    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.help.as_ref().map(|h| Box::new(h) as Box<dyn fmt::Display>)
    }

    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        self.named.as_deref().map(|n| n as &dyn miette::SourceCode)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        if self.named.is_none() || self.labels.is_empty() {
            return None;
        }
        Some(Box::new(self.labels.iter().enumerate().map(|(i, (span, label))| {
            let label = (!label.is_empty()).then(|| label.clone());
            if i == 0 {
                LabeledSpan::new_primary_with_span(label, *span)
            } else {
                LabeledSpan::new_with_span(label, *span)
            }
        })))
    }
}

/// Every diagnostic of one run, in the order they are shown.
#[derive(Debug, Default)]
pub struct Diagnostics {
    items: Vec<SpecDiagnostic>,
}

impl Diagnostics {
    pub fn push(&mut self, d: SpecDiagnostic) {
        self.items.push(d);
    }

    pub fn extend(&mut self, other: Diagnostics) {
        self.items.extend(other.items);
    }

    /// The diagnostic pushed last.
    pub fn last_mut(&mut self) -> &mut SpecDiagnostic {
        let last = self.items.len() - 1;
        &mut self.items[last]
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn has_errors(&self) -> bool {
        self.items.iter().any(SpecDiagnostic::is_error)
    }

    pub fn error_count(&self) -> usize {
        self.items.iter().filter(|d| d.is_error()).count()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The diagnostics sorted by file and line; duplicates removed.
    pub fn sorted(mut self) -> Vec<SpecDiagnostic> {
        self.items.sort_by_cached_key(SpecDiagnostic::sort_key);
        self.items.dedup_by(|a, b| a.sort_key() == b.sort_key() && a.code == b.code && a.labels == b.labels);
        self.items
    }
}

/// Parses KDL v2, falling back to v1 (`KdlDocument::parse`), without its
/// panics.
///
/// The v1 parser (kdl 4.7.1, behind kdl's `v1-fallback`) panics on a type
/// annotation that is a keyword near the end of the text, such as `(true)`,
/// `a (null)1` or `(false)🦀`: it slices the error span out of the text
/// *after* the keyword, with the keyword's length. Such a document is
/// invalid in both versions, so a panic here reports the v2 errors instead.
pub fn parse_kdl(text: &str) -> Result<kdl::KdlDocument, kdl::KdlError> {
    catch_quietly(|| kdl::KdlDocument::parse(text)).unwrap_or_else(|| kdl::KdlDocument::parse_v2(text))
}

/// The deepest nesting of children blocks (and of block comments) cassist
/// reads. Task files need three levels; the KDL parser recurses once per
/// level (~40 KiB of stack each in a debug build), and a file nested
/// hundreds deep overflowed the stack of the thread parsing it.
pub const MAX_KDL_DEPTH: usize = 32;

/// Parses `src` as KDL into a document, or pushes why not: a file nested
/// deeper than [`MAX_KDL_DEPTH`] is refused before the parser sees it, and
/// a parse error becomes our diagnostics.
pub fn parse_source(src: &Arc<SourceFile>, diags: &mut Diagnostics) -> Option<kdl::KdlDocument> {
    if let Some(at) = too_deep(&src.text, MAX_KDL_DEPTH) {
        diags.push(
            SpecDiagnostic::error("too-deep", format!("{} is nested more than {MAX_KDL_DEPTH} levels deep", src.name))
                .at(src, SourceSpan::from(at..at + 1), format!("level {} starts here", MAX_KDL_DEPTH + 1))
                .help(
                    "task files need only a few levels (`task { context { file ... } }`); close the blocks you opened",
                ),
        );
        return None;
    }
    match parse_kdl(&src.text) {
        Ok(mut doc) => {
            straighten_quotes(src, doc.nodes_mut(), diags);
            Some(doc)
        }
        Err(err) => {
            for d in from_kdl_error(src, &err) {
                diags.push(d);
            }
            None
        }
    }
}

/// Opening and closing typographic quotes, as word processors and chat
/// tools type them.
const OPENING_QUOTES: &[char] = &['“', '„', '‘', '‚', '«', '‹', '「', '”', '’', '»'];
const CLOSING_QUOTES: &[char] = &['”', '“', '’', '‘', '»', '«', '›', '」'];

/// Reports values written in typographic quotes (`goal “fix the bug”`):
/// KDL reads them as bare words, quotes included, one value per word. Each
/// such value becomes one diagnostic pointing at it, with the line to
/// write instead, and is replaced by the string meant, so that no second
/// error ("takes one value, found 3") follows from it.
fn straighten_quotes(src: &Arc<SourceFile>, nodes: &mut [kdl::KdlNode], diags: &mut Diagnostics) {
    let text = src.text.as_str();
    let written = |e: &kdl::KdlEntry| -> Option<String> {
        let kdl::KdlValue::String(s) = e.value() else { return None };
        let span = e.span();
        // A bare word: no quote of KDL's own in its source.
        let raw = text.get(span.offset()..span.offset() + span.len())?;
        (!raw.contains('"')).then(|| s.clone())
    };
    for node in nodes {
        let name = node.name().value().to_owned();
        let entries = node.entries_mut();
        let mut i = 0;
        while i < entries.len() {
            let Some(first) = written(&entries[i]).filter(|s| s.starts_with(OPENING_QUOTES)) else {
                i += 1;
                continue;
            };
            let property = entries[i].name().map(|n| n.value().to_owned());
            // The last word of the value: the first that ends with a
            // closing quote (a property value is one word).
            let closes = |s: &str, own: bool| s.ends_with(CLOSING_QUOTES) && (!own || s.chars().count() > 1);
            let mut last = i;
            if property.is_none() && !closes(&first, true) {
                let mut j = i + 1;
                while j < entries.len() && entries[j].name().is_none() {
                    last = j;
                    if written(&entries[j]).is_some_and(|s| closes(&s, false)) {
                        break;
                    }
                    j += 1;
                }
            }
            let start = if property.is_some() {
                entries[i].span().offset() + entries[i].span().len() - first.len()
            } else {
                entries[i].span().offset()
            };
            let end = entries[last].span().offset() + entries[last].span().len();
            let quoted = &text[start..end];
            let open = quoted.chars().next().map_or(0, char::len_utf8);
            let close = quoted.chars().last().filter(|c| CLOSING_QUOTES.contains(c) && quoted.len() > open);
            let inner = &quoted[open..quoted.len() - close.map_or(0, |c| c.len_utf8())];
            let fixed = format!("\"{}\"", inner.replace('\\', "\\\\").replace('"', "\\\""));
            let what = property.as_deref().unwrap_or(&name);
            let line = match &property {
                Some(key) => format!("{key}={fixed}"),
                None => format!("{name} {fixed}"),
            };
            let words = if last > i { "this value" } else { "this word" };
            diags.push(
                SpecDiagnostic::error(
                    "typographic-quotes",
                    format!("`{what}` has a value in typographic quotes: {quoted}"),
                )
                .at(src, SourceSpan::from(start..end), format!("{words} is in typographic quotes"))
                .help(format!("KDL strings take straight double quotes: write `{line}`")),
            );
            let mut value = kdl::KdlEntry::new(inner.to_owned());
            if let Some(key) = &property {
                value = kdl::KdlEntry::new_prop(key.as_str(), inner.to_owned());
            }
            value.set_span(SourceSpan::from(start..end));
            entries.splice(i..=last, [value]);
            i += 1;
        }
        if let Some(children) = node.children_mut() {
            straighten_quotes(src, children.nodes_mut(), diags);
        }
    }
}

/// The byte offset where KDL text first nests children blocks `{` or
/// block comments `/*` more than `max` deep, if it does. Strings, raw
/// strings (v2 `#"…"#`, v1 `r#"…"#`) and line comments are skipped; a text
/// the parser would reject anyway may be counted roughly, never missed.
pub fn too_deep(text: &str, max: usize) -> Option<usize> {
    let b = text.as_bytes();
    let (mut i, mut blocks, mut comments) = (0, 0usize, 0usize);
    let starts = |i: usize, pat: &[u8]| b.get(i..i + pat.len()) == Some(pat);
    while i < b.len() {
        if comments > 0 {
            if starts(i, b"*/") {
                comments -= 1;
                i += 2;
            } else if starts(i, b"/*") {
                comments += 1;
                if comments > max {
                    return Some(i);
                }
                i += 2;
            } else {
                i += 1;
            }
            continue;
        }
        match b[i] {
            b'/' if starts(i, b"//") => {
                i = b[i..].iter().position(|&c| c == b'\n').map_or(b.len(), |p| i + p);
            }
            b'/' if starts(i, b"/*") => {
                comments = 1;
                if comments > max {
                    return Some(i);
                }
                i += 2;
            }
            b'{' => {
                blocks += 1;
                if blocks > max {
                    return Some(i);
                }
                i += 1;
            }
            b'}' => {
                blocks = blocks.saturating_sub(1);
                i += 1;
            }
            b'"' => i = skip_string(b, i, 0),
            b'#' => {
                let hashes = b[i..].iter().take_while(|&&c| c == b'#').count();
                i = if b.get(i + hashes) == Some(&b'"') { skip_string(b, i + hashes, hashes) } else { i + hashes };
            }
            // A v1 raw string, `r"…"` or `r#"…"#`, where a value starts.
            b'r' if i == 0 || !(b[i - 1].is_ascii_alphanumeric() || matches!(b[i - 1], b'-' | b'_' | b'.')) => {
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                i = if b.get(i + 1 + hashes) == Some(&b'"') { skip_string(b, i + 1 + hashes, hashes) } else { i + 1 };
            }
            _ => i += 1,
        }
    }
    None
}

/// The offset after the string starting with the quote at `q`: a raw
/// string closed by `"` and `hashes` `#`s, or (no hashes) an escaped one;
/// `"""` opens a multi-line string closed by `"""`.
fn skip_string(b: &[u8], q: usize, hashes: usize) -> usize {
    let multi = b.get(q..q + 3) == Some(b"\"\"\"".as_slice());
    let mut i = q + if multi { 3 } else { 1 };
    while i < b.len() {
        if hashes == 0 && b[i] == b'\\' {
            i += 2;
            continue;
        }
        let quotes = if multi { 3 } else { 1 };
        if b[i..].starts_with(&b"\"\"\""[..quotes])
            && b[i + quotes..].iter().take(hashes).filter(|&&c| c == b'#').count() == hashes
        {
            return i + quotes + hashes;
        }
        i += 1;
    }
    b.len()
}

/// Runs `f`, turning a panic into `None` without printing it: the panic
/// hook stays silent while this thread is inside `f`, and is unchanged
/// otherwise.
fn catch_quietly<R>(f: impl FnOnce() -> R + std::panic::UnwindSafe) -> Option<R> {
    use std::cell::Cell;
    thread_local! {
        static QUIET: Cell<bool> = const { Cell::new(false) };
    }
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                previous(info);
            }
        }));
    });
    QUIET.with(|q| q.set(true));
    let result = std::panic::catch_unwind(f);
    QUIET.with(|q| q.set(false));
    result.ok()
}

/// Converts a KDL parse failure into our diagnostics.
pub fn from_kdl_error(source: &Arc<SourceFile>, err: &kdl::KdlError) -> Vec<SpecDiagnostic> {
    let mut out = Vec::new();
    // One root cause often yields several parser diagnostics (an unclosed
    // block is reported at its start and at the end); the first is the one
    // to fix.
    for d in err.diagnostics.iter().take(1) {
        let message = d.message.clone().unwrap_or_else(|| "invalid KDL".to_owned());
        let mut chars = message.chars();
        let message = match chars.next() {
            Some(c) => c.to_lowercase().chain(chars).collect::<String>(),
            None => message,
        };
        let label = d.label.clone().unwrap_or_else(|| "here".to_owned());
        let mut diag = SpecDiagnostic::error("syntax", format!("invalid KDL: {message}")).at(
            source,
            clamp(d.span, source.text.len()),
            label,
        );
        diag.help = Some(d.help.clone().unwrap_or_else(|| {
            "fix the syntax here; task files are KDL v2 (https://kdl.dev), KDL v1 files are accepted too".to_owned()
        }));
        out.push(diag);
    }
    if out.is_empty() {
        out.push(
            SpecDiagnostic::error("syntax", "invalid KDL document")
                .at(source, SourceSpan::from(0..0), "")
                .help("task files are KDL v2 (https://kdl.dev); KDL v1 files are accepted too"),
        );
    }
    out
}

/// Keeps a span inside the text (parsers sometimes point one past the end).
pub fn clamp(span: SourceSpan, len: usize) -> SourceSpan {
    let start = span.offset().min(len);
    let end = (span.offset() + span.len()).min(len);
    SourceSpan::from(start..end)
}

/// The nearest valid word to `word`, for "did you mean" hints.
pub fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let word = word.to_lowercase();
    let mut best: Option<(f64, &str)> = None;
    for c in candidates {
        let lc = c.to_lowercase();
        let jw = strsim::jaro_winkler(&word, &lc);
        // Short words: one edit (a transposition counts as one) is close
        // enough even when Jaro-Winkler says otherwise (`tpo` for `top`).
        let edits = strsim::damerau_levenshtein(&word, &lc);
        let near = edits <= (word.chars().count().max(lc.chars().count()) / 4).max(1);
        let score = if near { jw.max(0.8) + 0.05 } else { jw };
        if score >= 0.8 && best.is_none_or(|(s, _)| score > s) {
            best = Some((score, c));
        }
    }
    best.map(|(_, c)| c)
}

/// "did you mean `x`?" or the list of valid words.
pub fn suggestion(word: &str, candidates: &[&str]) -> String {
    suggestion_with(word, candidates, |c| c.to_owned())
}

/// Like [`suggestion`], each candidate shown through `show` (e.g. with
/// braces around placeholders). The valid words are always listed.
pub fn suggestion_with(word: &str, candidates: &[&str], show: impl Fn(&str) -> String) -> String {
    let list = candidates.iter().map(|c| format!("`{}`", show(c))).collect::<Vec<_>>().join(", ");
    match did_you_mean(word, candidates.iter().copied()) {
        Some(c) => format!("did you mean `{}`? (expected one of: {list})", show(c)),
        None => format!("expected one of: {list}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> String {
        format!("task \"t\" {{ goal \"g\" }}\nx {}{}\n", "{ y ".repeat(depth), "}".repeat(depth))
    }

    #[test]
    fn nesting_is_counted_outside_strings_and_comments() {
        assert_eq!(too_deep(&nested(3), 3), None);
        let text = nested(4);
        let at = too_deep(&text, 3).expect("four levels are more than three");
        assert_eq!(&text[at..at + 1], "{");
        assert_eq!(text[..at].matches('{').count(), 4, "the fourth block of x (after the task's one) is the culprit");
        // Braces in strings, raw strings and comments are text, not blocks.
        for quiet in [
            r#"a "{{{{{{" "\"{{{{""#,
            "a #\"{{{{\\\"{{\"#",
            "a r#\"{{{{{\"#",
            "a \"\"\"\n{{{{{\n\"\"\"",
            "// {{{{{{\na",
            "/* {{{{{ */ a",
        ] {
            assert_eq!(too_deep(quiet, 2), None, "{quiet}");
        }
        // Nested block comments count as levels too (the parser recurses).
        assert!(too_deep(&format!("{}a{}", "/*".repeat(5), "*/".repeat(5)), 4).is_some());
    }

    #[test]
    fn a_file_nested_too_deep_is_a_diagnostic_not_a_crash() {
        for depth in [MAX_KDL_DEPTH + 1, 500, 100_000] {
            let src = SourceFile::new("tasks/deep.kdl", nested(depth));
            let mut diags = Diagnostics::default();
            assert!(parse_source(&src, &mut diags).is_none());
            let d = diags.sorted();
            assert_eq!(d.len(), 1, "{d:?}");
            assert_eq!(d[0].code, "too-deep");
            assert!(d[0].message.contains("nested more than 32 levels"), "{}", d[0].message);
        }
    }

    #[test]
    fn the_deepest_file_allowed_parses_on_a_small_stack() {
        // Task files are parsed on worker threads; the deepest nesting
        // allowed must fit their stack.
        let text = nested(MAX_KDL_DEPTH - 1);
        let parsed = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                let src = SourceFile::new("tasks/ok.kdl", text);
                let mut diags = Diagnostics::default();
                parse_source(&src, &mut diags).is_some() && diags.is_empty()
            })
            .unwrap()
            .join()
            .unwrap();
        assert!(parsed);
    }
}
