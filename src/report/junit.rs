//! `--junit FILE`: the run as JUnit XML, the shape CI systems read
//! (GitHub test reporters, GitLab, Jenkins, Buildkite): one `<testsuite>`,
//! one `<testcase>` per task. A failed or blocked task is a `<failure>`
//! whose message is the reason and whose text is the tail of the failing
//! output; a skipped task is `<skipped>`; the summary and the transcript
//! path go to `<system-out>`.

use std::fmt::Write as _;

use crate::event::{TaskEnd, TaskState};

/// The XML document for `ends`; `seconds` is the run's wall time.
pub fn render(ends: &[TaskEnd], seconds: f64, timestamp: &str) -> String {
    let failures = ends.iter().filter(|e| e.state().is_failure()).count();
    let skipped = ends.iter().filter(|e| e.state() == TaskState::Skipped).count();
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        x,
        "<testsuites name=\"cassist\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" skipped=\"{skipped}\" time=\"{seconds:.3}\">",
        ends.len()
    );
    let _ = writeln!(
        x,
        "  <testsuite name=\"cassist run\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" skipped=\"{skipped}\" time=\"{seconds:.3}\" timestamp=\"{}\">",
        ends.len(),
        attr(timestamp)
    );
    for end in ends {
        let r = &end.report;
        let _ = write!(
            x,
            "    <testcase name=\"{}\" classname=\"{}\" file=\"{}\" line=\"{}\" time=\"{:.3}\"",
            attr(&r.name),
            attr(&classname(&end.location.file)),
            attr(&end.location.file),
            end.location.line,
            r.duration_ms as f64 / 1000.0
        );
        x.push_str(">\n");
        match r.state {
            TaskState::Failed | TaskState::Blocked => {
                let reason = r.reason.as_deref().unwrap_or(r.state.as_str());
                let _ = writeln!(
                    x,
                    "      <failure message=\"{}\" type=\"{}\">{}</failure>",
                    attr(reason),
                    r.state.as_str(),
                    text(&format!("{reason}\n\n{}", crate::text::tail_lines(&end.tail, 8000)))
                );
            }
            TaskState::Skipped => {
                let _ = writeln!(x, "      <skipped message=\"{}\"/>", attr(r.reason.as_deref().unwrap_or("skipped")));
            }
            _ => {}
        }
        let mut out = format!("state: {}\nagent: {}\nattempts: {}\n", r.state.as_str(), r.agent, r.attempts);
        if let Some(c) = r.cost_usd {
            let _ = writeln!(out, "cost: ${c:.4}");
        }
        if !r.changed_files.is_empty() {
            let _ = writeln!(out, "changed: {}", r.changed_files.join(", "));
        }
        if let Some(s) = &r.summary {
            let _ = writeln!(out, "summary:\n{s}");
        }
        if let Some(t) = &end.transcript {
            let _ = writeln!(out, "transcript: {}", t.display());
        }
        let _ = writeln!(x, "      <system-out>{}</system-out>", text(&out));
        x.push_str("    </testcase>\n");
    }
    x.push_str("  </testsuite>\n</testsuites>\n");
    x
}

/// `tasks/auth.kdl` → `tasks.auth`: the grouping CI reporters show.
fn classname(file: &str) -> String {
    let stem = file.strip_suffix(".kdl").unwrap_or(file);
    stem.replace('/', ".")
}

/// Characters XML 1.0 cannot hold at all (most control characters) are
/// dropped; the rest is escaped.
fn escape(s: &str, quotes: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' if quotes => out.push_str("&quot;"),
            '\n' if quotes => out.push_str("&#10;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => {}
            c => out.push(c),
        }
    }
    out
}

fn attr(s: &str) -> String {
    escape(s, true)
}

fn text(s: &str) -> String {
    escape(s, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_drops_control_characters() {
        assert_eq!(attr("a<b>&\"c\"\nd"), "a&lt;b&gt;&amp;&quot;c&quot;&#10;d");
        assert_eq!(text("x\u{1b}[31my\u{0}z\n"), "x[31myz\n");
        assert_eq!(classname("tasks/auth/login.kdl"), "tasks.auth.login");
    }
}
