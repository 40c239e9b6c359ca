//! Small text helpers shared by the runner and the reports. A leaf.

use std::time::Duration;

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
    fn truncation_marks_the_cut() {
        assert_eq!(truncate_chars("abc", 3), "abc");
        assert_eq!(truncate_chars("abcdef", 4), "abc…");
        assert_eq!(truncate_chars("ééééé", 2), "é…");
    }
}
