//! Small text helpers shared by the runner and the reports. A leaf.

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

/// `s` cut to `n` characters, the last one an ellipsis when cut.
pub fn truncate_chars(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(n.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn truncation_marks_the_cut() {
        assert_eq!(truncate_chars("abc", 3), "abc");
        assert_eq!(truncate_chars("abcdef", 4), "abc…");
        assert_eq!(truncate_chars("ééééé", 2), "é…");
    }
}
