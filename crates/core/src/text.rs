//! Small text helpers shared by the runner and the reports. A leaf.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::time::Duration;

/// `text` made safe to print on a terminal. Whatever came from an agent or
/// a command it ran (a summary, a reason, the tail of a failing output, a
/// transcript, a file name, a version string) must never drive the user's
/// terminal: set its title, write its clipboard (OSC 52: pasted into a
/// shell later), clear it, ring it, move the cursor over what cassist
/// said. Every control character but `\n` and `\t` is shown as an escape
/// instead: C0 ones and DEL as `\x1b`, C1 ones (which some terminals obey
/// like ESC sequences) and the bidirectional overrides and isolates (which
/// reorder what is shown) as `\u{9b}`; a carriage return is dropped before
/// a line feed (a CRLF line ending) and shown as `\r` elsewhere (it would
/// overwrite the line). Borrowed when there is nothing to change.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| c != '\n' && c != '\t' && (c.is_control() || is_bidi_control(c))) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' | '\t' => out.push(c),
            '\r' if chars.peek() == Some(&'\n') => {}
            '\r' => out.push_str("\\r"),
            '\0'..='\x1f' | '\x7f' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if c.is_control() || is_bidi_control(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The characters that override or isolate the direction of what follows
/// (U+202A–U+202E, U+2066–U+2069): text shown in another order than it is.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// At most `limit` bytes of the end of `text`, starting at a line.
pub fn tail_lines(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.trim_end().to_owned();
    }
    let mut start = text.len() - limit;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let start = text[start..].find('\n').map_or(start, |p| start + p + 1);
    text[start..].trim_end().to_owned()
}

/// `s` cut to fit `width` terminal columns: when it does not, it is cut at
/// a character boundary and ends with `…` (within the width). Wide
/// characters take two columns, combining marks none. The one way cassist
/// shortens what it shows (summaries, progress lines, table cells); `s` is
/// text to show, without escape sequences ([`printable`]).
pub fn truncate(s: &str, width: usize) -> Cow<'_, str> {
    use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};
    if s.width() <= width {
        return Cow::Borrowed(s);
    }
    let room = width.saturating_sub(1);
    let (mut used, mut end) = (0, 0);
    for (i, c) in s.char_indices() {
        used += c.width().unwrap_or(0);
        if used > room {
            break;
        }
        end = i + c.len_utf8();
    }
    Cow::Owned(format!("{}…", &s[..end]))
}

/// The first line of `s` in at most `width` columns, ending with `…` when
/// anything was left out: the rest of the line, or the lines after it.
pub fn first_line(s: &str, width: usize) -> Cow<'_, str> {
    let s = s.trim_start_matches('\n');
    let line = s.lines().next().unwrap_or("");
    if s.trim_end().len() > line.len() {
        Cow::Owned(truncate(&format!("{line}…"), width).into_owned())
    } else {
        truncate(line, width)
    }
}

/// `s` cut to `n` characters, the last one an ellipsis when cut: a limit
/// on what is stored (a summary in the report), not on what is shown.
pub fn truncate_chars(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(n.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// A duration as people read it, the one way cassist writes durations:
/// `200ms`, `1.5s`, `45s`, `3m`, `3m20s`, `1h`, `2h5m7s`. Below a minute
/// tenths of a second show, cut rather than rounded (a part stopped after
/// 3.96 s ran `3.9s`, not `4s`); from a minute on, whole seconds. Whole
/// durations read the way they are written in task files (`90ms`,
/// `1m30s`, `1h`); nothing at all is `0s`.
pub fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".to_owned();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let secs = ms / 1000;
    if secs < 60 {
        return if ms.is_multiple_of(1000) { format!("{secs}s") } else { format!("{secs}.{}s", ms % 1000 / 100) };
    }
    let mut out = String::new();
    for (n, unit) in [(secs / 3600, "h"), (secs / 60 % 60, "m"), (secs % 60, "s")] {
        if n > 0 {
            out.push_str(&format!("{n}{unit}"));
        }
    }
    out
}

/// [`duration`] of a count of milliseconds (the reports' `duration_ms`).
pub fn duration_ms(ms: u64) -> String {
    duration(Duration::from_millis(ms))
}

/// `text` with every character that cannot be seen shown as an escape,
/// for names and values quoted in diagnostics: what [`printable`]
/// escapes, plus the zero-width and other invisible format characters
/// (`zw\u{200b}sp` rather than a `zwsp` that looks valid), whitespace other
/// than a plain space and a line feed (a no-break space, a tab), and the
/// byte order mark. Visible non-ASCII text (`café`, `日本語`) is kept.
pub fn shown(text: &str) -> Cow<'_, str> {
    let hidden = |c: char| c != '\n' && (c.is_control() || is_bidi_control(c) || is_invisible(c));
    if !text.chars().any(hidden) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if hidden(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Characters that show nothing, or only blank space that is not a plain
/// space: Unicode's default-ignorable code points (zero-width spaces and
/// joiners, the soft hyphen, word joiners, variation selectors, tags, the
/// byte order mark, Hangul fillers) and the spaces other than U+0020.
pub fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{ad}' | '\u{34f}' | '\u{61c}' | '\u{115f}' | '\u{1160}' | '\u{17b4}' | '\u{17b5}'
        | '\u{180b}'..='\u{180f}' | '\u{200b}'..='\u{200f}' | '\u{2060}'..='\u{206f}' | '\u{3164}'
        | '\u{fe00}'..='\u{fe0f}' | '\u{feff}' | '\u{ffa0}' | '\u{fff0}'..='\u{fffb}'
        | '\u{1bca0}'..='\u{1bca3}' | '\u{1d173}'..='\u{1d17a}' | '\u{e0000}'..='\u{e0fff}')
        || (c.is_whitespace() && c != ' ')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_one_way() {
        let ms = Duration::from_millis;
        assert_eq!(duration(ms(0)), "0s");
        assert_eq!(duration(ms(5)), "5ms");
        assert_eq!(duration(ms(200)), "200ms");
        assert_eq!(duration(ms(1500)), "1.5s");
        assert_eq!(duration(ms(3960)), "3.9s");
        assert_eq!(duration(ms(2000)), "2s");
        assert_eq!(duration(Duration::from_secs(45)), "45s");
        assert_eq!(duration(Duration::from_secs(180)), "3m");
        assert_eq!(duration(Duration::from_secs(200)), "3m20s");
        assert_eq!(duration(ms(200_700)), "3m20s");
        assert_eq!(duration(Duration::from_secs(3900)), "1h5m");
        assert_eq!(duration(Duration::from_secs(3600)), "1h");
        assert_eq!(duration(Duration::from_secs(7507)), "2h5m7s");
        assert_eq!(duration_ms(600_000), "10m");
    }

    #[test]
    fn tails_cut_at_characters_and_lines() {
        let text = format!("{}xy\nlast line\n", "é".repeat(1001));
        let t = tail_lines(&text, 505);
        assert_eq!(t, "last line");
        let t = tail_lines(&"é".repeat(300), 101);
        assert!(t.chars().all(|c| c == 'é') && t.len() <= 101, "{t}");
        assert_eq!(tail_lines("short\n", 100), "short");
    }

    #[test]
    fn agent_text_cannot_drive_the_terminal() {
        let plain = "a summary\n\twith é, 日本語 and a tab";
        assert!(matches!(printable(plain), Cow::Borrowed(_)));
        let evil = "done \u{1b}]0;title\u{7}\u{1b}]52;c;ZWNobw==\u{7}\u{1b}[2J\u{7}";
        assert_eq!(printable(evil), "done \\x1b]0;title\\x07\\x1b]52;c;ZWNobw==\\x07\\x1b[2J\\x07");
        assert_eq!(printable("ok\r\nnext\rover\u{7f}\u{0}"), "ok\nnext\\rover\\x7f\\x00");
        assert_eq!(printable("c1 \u{9b}31m \u{85} \u{202e}gpj.exe"), "c1 \\u{9b}31m \\u{85} \\u{202e}gpj.exe");
        // Nothing a terminal obeys is left.
        for s in [evil, "\u{1b}\u{9b}\r\u{8}\u{2067}"] {
            assert!(printable(s).chars().all(|c| c == '\n' || !(c.is_control() || is_bidi_control(c))), "{s:?}");
        }
    }

    #[test]
    fn what_is_shown_is_cut_by_columns_and_marked() {
        assert!(matches!(truncate("abc", 3), Cow::Borrowed("abc")));
        assert_eq!(truncate("abcdef", 4), "abc…");
        assert_eq!(truncate("ééééé", 3), "éé…");
        // Wide characters take two columns; the cut never splits one.
        assert_eq!(truncate("日本語のテキスト", 6), "日本…");
        assert_eq!(truncate("日本語", 6), "日本語");
        // e + COMBINING ACUTE ACCENT stays whole.
        assert_eq!(truncate("cafe\u{301} au lait", 5), "cafe\u{301}…");
        assert_eq!(truncate("abc", 0), "…");
        for (s, w) in [("a very long summary of what was done", 20), ("日本語のテキストです", 9)] {
            assert!(unicode_width::UnicodeWidthStr::width(truncate(s, w).as_ref()) <= w);
        }
        assert_eq!(first_line("one line", 20), "one line");
        assert_eq!(first_line("\nfirst\nsecond", 20), "first…");
        assert_eq!(first_line("first line here\nsecond", 10), "first lin…");
        assert_eq!(first_line("trailing newline\n", 20), "trailing newline");
        assert_eq!(first_line("", 20), "");
    }

    #[test]
    fn truncation_marks_the_cut() {
        assert_eq!(truncate_chars("abc", 3), "abc");
        assert_eq!(truncate_chars("abcdef", 4), "abc…");
        assert_eq!(truncate_chars("ééééé", 2), "é…");
    }

    #[test]
    fn invisible_characters_are_shown_as_escapes() {
        assert!(matches!(shown("café, 日本語 and a space"), Cow::Borrowed(_)));
        assert_eq!(shown("zw\u{200b}sp"), "zw\\u{200b}sp");
        assert_eq!(shown("a\u{a0}b\tc\u{feff}\u{2060}\u{ad}"), "a\\u{a0}b\\tc\\u{feff}\\u{2060}\\u{ad}");
        assert_eq!(shown("\u{1b}[2J\u{202e}"), "\\u{1b}[2J\\u{202e}");
        assert_eq!(shown("two\nlines"), "two\nlines");
    }
}
