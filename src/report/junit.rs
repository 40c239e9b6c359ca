//! `--junit FILE`: the run as JUnit XML, the shape CI systems read
//! (GitHub test reporters, GitLab, Jenkins, Buildkite): one `<testsuite>`,
//! one `<testcase>` per task with its task file and line. A failed or
//! blocked task is a `<failure>` whose message is the reason and whose text
//! is the tail of the failing output, and so is a task `--locked` refused
//! (type `locked`: the job fails); another skipped task is `<skipped>`; the
//! summary and the transcript path go to `<system-out>`.
//!
//! Written by `quick-junit` (cargo-nextest's writer), which escapes markup
//! and drops escape sequences (colour codes, and the window titles or
//! clipboard writes an agent may print) and the C0 control characters XML
//! cannot hold. What it leaves that a terminal would obey (C1 controls,
//! DEL, bidirectional overrides: a report read with `cat`) is shown by
//! [`cassist_core::text::printable`].

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

use cassist_core::event::{TaskEnd, TaskState};

/// The XML document for `ends`; `elapsed` is the run's wall time, `now`
/// the suite's timestamp.
pub fn render(ends: &[TaskEnd], elapsed: Duration, now: SystemTime) -> String {
    let mut suite = TestSuite::new("cassist run");
    suite.set_time(elapsed).set_timestamp(chrono::DateTime::<chrono::Utc>::from(now));
    suite.add_test_cases(ends.iter().map(test_case));
    let mut report = Report::new("cassist");
    report.set_time(elapsed).add_test_suite(suite);
    // Serializing to a String fails only on a writer error.
    report.to_string().unwrap_or_default()
}

fn test_case(end: &TaskEnd) -> TestCase {
    let r = &end.report;
    let status = match r.state {
        // `--locked` refused it: the job fails (exit 3), so must the test.
        TaskState::Skipped if end.refused => failure(end, "locked"),
        TaskState::Failed | TaskState::Blocked => failure(end, end.shown_state()),
        TaskState::Skipped => {
            let mut status = TestCaseStatus::skipped();
            status.set_message(xml_text(r.reason.as_deref().unwrap_or("skipped")));
            status
        }
        TaskState::Passed | TaskState::UpToDate | TaskState::Replayed | TaskState::Verified | TaskState::Stale => {
            TestCaseStatus::success()
        }
    };
    let mut case = TestCase::new(r.name.as_str(), status);
    case.set_classname(classname(&end.location.file)).set_time(Duration::from_millis(r.duration_ms));
    case.extra.insert("file".into(), end.location.file.as_str().into());
    case.extra.insert("line".into(), end.location.line.to_string().into());
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
    case.set_system_out(xml_text(&out));
    case
}

/// A `<failure>` of type `kind`: the reason, and the tail of the failing
/// output.
fn failure(end: &TaskEnd, kind: &str) -> TestCaseStatus {
    let reason = end.report.reason.as_deref().unwrap_or(end.report.state.as_str());
    let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
    status
        .set_message(xml_text(reason))
        .set_type(kind)
        .set_description(xml_text(&format!("{reason}\n\n{}", cassist_core::text::tail_lines(&end.tail, 8000))));
    status
}

/// `tasks/auth.kdl` → `tasks.auth`: the grouping CI reporters show.
fn classname(file: &str) -> String {
    let stem = file.strip_suffix(".kdl").unwrap_or(file);
    stem.replace('/', ".")
}

/// `s` as quick-junit will write it (escape sequences and C0 controls
/// dropped), with what it leaves that a terminal would obey shown
/// visibly, and without the two noncharacters XML 1.0 cannot hold.
fn xml_text(s: &str) -> String {
    let stripped = quick_junit::XmlString::new(s);
    cassist_core::text::printable(&stripped).replace(['\u{FFFE}', '\u{FFFF}'], "")
}

#[cfg(test)]
mod tests {
    use super::*;
    use cassist_core::event::Location;

    fn end(name: &str, state: TaskState, reason: Option<&str>) -> TaskEnd {
        let mut e = TaskEnd::new(name, "hash", "claude", Location { file: "tasks/auth/login.kdl".into(), line: 7 });
        e.report.state = state;
        e.report.reason = reason.map(str::to_owned);
        e.report.duration_ms = 1500;
        e
    }

    #[test]
    fn cases_carry_what_ci_reads_and_hostile_text_stays_valid_xml() {
        assert_eq!(classname("tasks/auth/login.kdl"), "tasks.auth.login");
        let mut failed = end("b", TaskState::Blocked, Some("a<b>&\"c\" \u{1b}[31mred\u{1b}[0m\u{0}\u{FFFF}"));
        failed.tail = "x\u{1b}[31my\u{0}z\n".into();
        let mut ok = end("a", TaskState::Passed, None);
        ok.report.summary = Some("wrote <it> & more".into());
        ok.transcript = Some("/tmp/t.log".into());
        let ends = [ok, failed, end("c", TaskState::Skipped, Some("b failed"))];
        let xml = render(&ends, Duration::from_millis(2500), SystemTime::UNIX_EPOCH);
        let doc = roxmltree::Document::parse(&xml).unwrap_or_else(|e| panic!("invalid XML ({e}):\n{xml}"));

        let suites = doc.root_element();
        assert_eq!((suites.tag_name().name(), suites.attribute("name")), ("testsuites", Some("cassist")));
        let suite = suites.children().find(|n| n.has_tag_name("testsuite")).unwrap();
        for node in [suites, suite] {
            let attrs: Vec<Option<&str>> =
                ["tests", "failures", "errors", "skipped", "time"].iter().map(|a| node.attribute(*a)).collect();
            assert_eq!(attrs, [Some("3"), Some("1"), Some("0"), Some("1"), Some("2.500")], "{xml}");
        }
        assert_eq!(suite.attribute("name"), Some("cassist run"));
        assert!(suite.attribute("timestamp").unwrap().starts_with("1970-01-01T00:00:00"), "{xml}");

        let cases: Vec<_> = suite.children().filter(|n| n.has_tag_name("testcase")).collect();
        let case = |n: &str| *cases.iter().find(|c| c.attribute("name") == Some(n)).unwrap();
        let child = |n: &str, tag: &str| case(n).children().find(|c| c.has_tag_name(tag));
        for attr in
            [("classname", "tasks.auth.login"), ("file", "tasks/auth/login.kdl"), ("line", "7"), ("time", "1.500")]
        {
            assert_eq!(case("a").attribute(attr.0), Some(attr.1), "{xml}");
        }
        assert!(child("a", "failure").is_none() && child("a", "skipped").is_none());
        let out = child("a", "system-out").unwrap().text().unwrap();
        assert_eq!(
            out,
            "state: passed\nagent: claude\nattempts: 0\nsummary:\nwrote <it> & more\ntranscript: /tmp/t.log\n"
        );

        let failure = child("b", "failure").unwrap();
        assert_eq!(failure.attribute("message"), Some("a<b>&\"c\" red"));
        assert_eq!(failure.attribute("type"), Some("blocked"));
        assert_eq!(failure.text(), Some("a<b>&\"c\" red\n\nxyz"));
        assert_eq!(child("c", "skipped").unwrap().attribute("message"), Some("b failed"));
    }

    #[test]
    fn verified_and_stale_tasks_are_successes() {
        let ends = [end("v", TaskState::Verified, None), end("s", TaskState::Stale, Some("findings kept"))];
        let xml = render(&ends, Duration::from_millis(1), SystemTime::UNIX_EPOCH);
        let doc = roxmltree::Document::parse(&xml).unwrap();
        let suite = doc.root_element().children().find(|n| n.has_tag_name("testsuite")).unwrap();
        let attrs: Vec<Option<&str>> =
            ["tests", "failures", "errors", "skipped"].iter().map(|a| suite.attribute(*a)).collect();
        assert_eq!(attrs, [Some("2"), Some("0"), Some("0"), Some("0")], "{xml}");
        assert!(xml.contains("state: verified") && xml.contains("state: stale"), "{xml}");
    }

    #[test]
    fn a_task_locked_refused_is_a_failure_not_a_skip() {
        let mut refused = end("a", TaskState::Skipped, Some("--locked: an agent would be needed (goal changed)"));
        refused.refused = true;
        let ends = [refused, end("b", TaskState::Skipped, Some("not started"))];
        let xml = render(&ends, Duration::from_millis(1), SystemTime::UNIX_EPOCH);
        let doc = roxmltree::Document::parse(&xml).unwrap_or_else(|e| panic!("invalid XML ({e}):\n{xml}"));
        let suite = doc.descendants().find(|n| n.has_tag_name("testsuite")).unwrap();
        assert_eq!((suite.attribute("failures"), suite.attribute("skipped")), (Some("1"), Some("1")), "{xml}");
        let failure = doc.descendants().find(|n| n.has_tag_name("failure")).unwrap();
        assert_eq!(failure.parent().unwrap().attribute("name"), Some("a"));
        assert_eq!(failure.attribute("type"), Some("locked"));
        assert_eq!(failure.attribute("message"), Some("--locked: an agent would be needed (goal changed)"));
    }

    #[test]
    fn a_task_ctrl_c_stopped_is_an_interrupted_failure() {
        let mut stopped = end("a", TaskState::Failed, Some("interrupted (Ctrl-C)"));
        stopped.interrupted = true;
        let xml = render(&[stopped], Duration::from_millis(1), SystemTime::UNIX_EPOCH);
        let doc = roxmltree::Document::parse(&xml).unwrap_or_else(|e| panic!("invalid XML ({e}):\n{xml}"));
        let failure = doc.descendants().find(|n| n.has_tag_name("failure")).unwrap();
        assert_eq!(failure.attribute("type"), Some("interrupted"), "{xml}");
        assert_eq!(failure.attribute("message"), Some("interrupted (Ctrl-C)"));
    }

    #[test]
    fn nothing_a_terminal_obeys_is_left_in_the_xml() {
        let evil = "x \u{1b}]52;c;ZWNobw==\u{7}\u{1b}[2J \u{9b}31m\u{7f} \u{202e}txt.exe \u{8}\r";
        let mut failed = end("b", TaskState::Failed, Some(evil));
        failed.tail = format!("{evil}\n");
        failed.report.summary = Some(evil.into());
        let xml = render(&[failed], Duration::from_millis(1), SystemTime::UNIX_EPOCH);
        assert!(xml.chars().all(|c| c == '\n' || !c.is_control()) && !xml.contains('\u{202e}'), "{xml:?}");
        let doc = roxmltree::Document::parse(&xml).unwrap_or_else(|e| panic!("invalid XML ({e}):\n{xml}"));
        let failure = doc.descendants().find(|n| n.has_tag_name("failure")).unwrap();
        assert_eq!(failure.attribute("message"), Some("x  31m\\x7f \\u{202e}txt.exe "));
    }
}
