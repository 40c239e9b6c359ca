//! Acceptance results: test counts parsed from the output of the common
//! test runners (cargo test, pytest, jest, vitest, go test and more), and
//! the feedback an agent is given when an acceptance command fails: the
//! command, its status and the end of its output, in the next attempt's
//! prompt. Pure logic; running the commands is the executor's job.

use std::borrow::Cow;
use std::sync::LazyLock;
use std::time::Duration;

use regex::Regex;
use serde::{Deserialize, Serialize};

/// Timeout of an acceptance command that sets none: ten minutes.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// Most bytes of a failing command's output given back to the agent:
/// about 4 KB, which keeps the next prompt short.
pub const FEEDBACK_LIMIT: usize = 4096;

/// Test counts of one command's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Counts {
    pub passed: u64,
    pub failed: u64,
    pub skipped: u64,
}

impl Counts {
    pub fn total(&self) -> u64 {
        self.passed + self.failed + self.skipped
    }

    fn add(&mut self, other: Counts) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.skipped += other.skipped;
    }
}

impl std::fmt::Display for Counts {
    /// `3 passed, 1 failed` (and `, 2 skipped` when any were).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} passed, {} failed", self.passed, self.failed)?;
        if self.skipped > 0 {
            write!(f, ", {} skipped", self.skipped)?;
        }
        Ok(())
    }
}

/// The outcome of one acceptance command.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AcceptanceResult {
    pub command: String,
    /// `None` when the command was killed by a signal (or at its timeout).
    pub exit_code: Option<i32>,
    pub passed: bool,
    pub duration_ms: u64,
    pub counts: Option<Counts>,
    pub timed_out: bool,
    /// The last part of the command's output (stdout and stderr).
    #[serde(skip)]
    pub tail: String,
    /// Why it could not run a program it named, where the sandbox hides
    /// that program ("/tmp/venv/bin/pytest is not visible in the
    /// sandbox: …").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

static ANSI: LazyLock<Regex> = LazyLock::new(|| {
    // CSI sequences (colours, cursor moves), OSC sequences (titles,
    // hyperlinks) ended by BEL or ST, and lone two-byte escapes.
    Regex::new(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]").unwrap()
});

/// `text` without ANSI escape sequences.
pub fn strip_ansi(text: &str) -> Cow<'_, str> {
    if text.contains('\x1b') { ANSI.replace_all(text, "") } else { Cow::Borrowed(text) }
}

/// A parser of one runner's output, split into lines.
type Parser = fn(&[&str]) -> Option<Counts>;

/// Passed/failed/skipped counts from the output of cargo test (and
/// nextest), pytest, unittest, jest, vitest, mocha, bun test and go test;
/// the counts of every runner recognized in the output are added up (a
/// command may run several). `None` when nothing is recognized.
pub fn parse_counts(output: &str) -> Option<Counts> {
    let clean = strip_ansi(output);
    // Progress lines are rewritten with `\r`; each part is a line.
    let lines: Vec<&str> = clean.split(['\n', '\r']).map(str::trim_end).collect();
    let parsers: [Parser; 8] = [cargo, nextest, pytest, unittest, jest, vitest, mocha_or_bun, go];
    let mut total: Option<Counts> = None;
    for parse in parsers {
        if let Some(c) = parse(&lines) {
            total.get_or_insert_with(Counts::default).add(c);
        }
    }
    total
}

/// Adds every `N word` item of a summary to counts, by the word's meaning.
fn tally(items: &str, counts: &mut Counts) {
    static ITEM: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"(\d+) ([a-zA-Z]+(?: out)?)").unwrap());
    for c in ITEM.captures_iter(items) {
        let n: u64 = c[1].parse().unwrap_or(0);
        match c[2].to_ascii_lowercase().as_str() {
            "passed" | "passing" | "pass" | "xpassed" | "ok" => counts.passed += n,
            "failed" | "failing" | "fail" | "error" | "errors" | "failures" | "timed out" => counts.failed += n,
            "skipped" | "skip" | "pending" | "todo" | "xfailed" | "ignored" => counts.skipped += n,
            _ => {} // warnings, deselected, total, rerun, ...
        }
    }
}

/// cargo test: one `test result:` line per test binary and for doc-tests.
fn cargo(lines: &[&str]) -> Option<Counts> {
    static RESULT: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^\s*test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored;").unwrap());
    let mut out = None;
    for l in lines {
        if let Some(c) = RESULT.captures(l) {
            let n = |i: usize| c[i].parse::<u64>().unwrap_or(0);
            out.get_or_insert_with(Counts::default).add(Counts { passed: n(1), failed: n(2), skipped: n(3) });
        }
    }
    out
}

/// cargo nextest: `Summary [   0.012s] 10 tests run: 9 passed, 1 failed, 2 skipped`.
fn nextest(lines: &[&str]) -> Option<Counts> {
    static SUMMARY: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^\s*Summary \[[^\]]*\]\s+\d+ tests? run: (.*)$").unwrap());
    sum_matches(lines, &SUMMARY)
}

/// Sums the counts of the `N word` items captured by `re` on every line.
fn sum_matches(lines: &[&str], re: &Regex) -> Option<Counts> {
    let mut out = None;
    for l in lines {
        if let Some(c) = re.captures(l) {
            tally(&c[1], out.get_or_insert_with(Counts::default));
        }
    }
    out
}

/// pytest: the final `=== 1 failed, 3 passed, 2 skipped, 1 warning in 0.12s ===`
/// line, or its `-q` form without the `=`s; errors count as failures.
fn pytest(lines: &[&str]) -> Option<Counts> {
    static SUMMARY: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(
            r"^=*\s*((?:\d+ (?:passed|failed|skipped|errors?|xfailed|xpassed|deselected|warnings?|rerun)(?:, )?)+|no tests ran)\s+in\s+[\d.]+\s*s(?:econds)?\b",
        )
        .unwrap()
    });
    sum_matches(lines, &SUMMARY)
}

/// unittest (and Django): `Ran 5 tests in 0.002s`, then `OK`,
/// `OK (skipped=1)` or `FAILED (failures=1, errors=1)`.
fn unittest(lines: &[&str]) -> Option<Counts> {
    static RAN: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^Ran (\d+) tests? in [\d.]+s").unwrap());
    static VERDICT: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^(OK|FAILED)(?: \((.*)\))?$").unwrap());
    static ITEM: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"([a-z ]+)=(\d+)").unwrap());
    let mut out = None;
    for (i, l) in lines.iter().enumerate() {
        let Some(ran) = RAN.captures(l) else { continue };
        let ran: u64 = ran[1].parse().unwrap_or(0);
        let Some(verdict) = lines[i + 1..].iter().take(5).find_map(|l| VERDICT.captures(l)) else { continue };
        let mut c = Counts::default();
        for item in ITEM.captures_iter(verdict.get(2).map_or("", |m| m.as_str())) {
            let n: u64 = item[2].parse().unwrap_or(0);
            match item[1].trim() {
                "failures" | "errors" | "unexpected successes" => c.failed += n,
                "skipped" | "expected failures" => c.skipped += n,
                _ => {}
            }
        }
        c.passed = ran.saturating_sub(c.failed + c.skipped);
        out.get_or_insert_with(Counts::default).add(c);
    }
    out
}

/// jest: `Tests:       1 failed, 1 skipped, 4 passed, 6 total`.
fn jest(lines: &[&str]) -> Option<Counts> {
    static SUMMARY: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^\s*Tests:\s+(.*\d+ total.*)$").unwrap());
    sum_matches(lines, &SUMMARY)
}

/// vitest: `      Tests  1 failed | 4 passed | 1 skipped (6)`.
fn vitest(lines: &[&str]) -> Option<Counts> {
    static SUMMARY: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^\s*Tests\s+(\d+ [a-z]+(?:\s*\|\s*\d+ [a-z]+)*)\s*\(\d+\)").unwrap());
    sum_matches(lines, &SUMMARY)
}

/// mocha (`  4 passing (12ms)`, `  1 failing`, `  2 pending`) and bun test
/// (` 4 pass`, ` 1 fail`, ` 1 skip`).
fn mocha_or_bun(lines: &[&str]) -> Option<Counts> {
    static LINE: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"^\s*(\d+ (?:passing|failing|pending))(?: \(\d+m?s\))?$|^ ?(\d+ (?:pass|fail|skip|todo))$").unwrap()
    });
    let mut out = None;
    for l in lines {
        if let Some(c) = LINE.captures(l) {
            let item = c.get(1).or_else(|| c.get(2)).map_or("", |m| m.as_str());
            tally(item, out.get_or_insert_with(Counts::default));
        }
    }
    out
}

/// go test: with `-v` (`=== RUN` lines), one count per `--- PASS:` /
/// `--- FAIL:` / `--- SKIP:` line, subtests included; without, one count
/// per package (`ok  pkg 0.01s`, `FAIL pkg 0.01s`). A package that does not
/// build counts as one failure either way.
fn go(lines: &[&str]) -> Option<Counts> {
    static RESULT: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^\s*--- (PASS|FAIL|SKIP): \S").unwrap());
    static OK: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^ok\s+\S+\s+(?:\(cached\)|[\d.]+m?s)(?:\s|$)").unwrap());
    static FAIL: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^FAIL\s+\S+\s+(?:[\d.]+m?s|\[([a-z ]+ failed)\])(?:\s|$)").unwrap());
    let verbose = lines.iter().any(|l| l.trim_start().starts_with("=== RUN "));
    let mut out: Option<Counts> = None;
    for l in lines {
        if verbose {
            if let Some(c) = RESULT.captures(l) {
                let counts = out.get_or_insert_with(Counts::default);
                match &c[1] {
                    "PASS" => counts.passed += 1,
                    "FAIL" => counts.failed += 1,
                    _ => counts.skipped += 1,
                }
            } else if FAIL.captures(l).is_some_and(|c| c.get(1).is_some()) {
                out.get_or_insert_with(Counts::default).failed += 1;
            }
        } else if OK.is_match(l) {
            out.get_or_insert_with(Counts::default).passed += 1;
        } else if FAIL.is_match(l) {
            out.get_or_insert_with(Counts::default).failed += 1;
        }
    }
    out
}

/// The last `limit` bytes of `text`, starting at a line boundary when
/// there is one in that window; and whether anything was cut.
fn tail_at_line(text: &str, limit: usize) -> (&str, bool) {
    if text.len() <= limit {
        return (text, false);
    }
    let mut start = text.len() - limit;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    if let Some(nl) = text[start..].find('\n')
        && start + nl + 1 < text.len()
    {
        start += nl + 1;
    }
    (&text[start..], true)
}

/// The feedback for the agent's next prompt when an acceptance command
/// failed: which command, its exit status (and test counts), and the tail
/// of its output, at most `limit` bytes cut at a line boundary, with a
/// note when cut.
pub fn feedback(result: &AcceptanceResult, limit: usize) -> String {
    let status = if result.timed_out {
        let secs = (result.duration_ms + 500) / 1000;
        format!("was stopped at its timeout after {}", cassist_core::text::duration(Duration::from_secs(secs)))
    } else {
        match result.exit_code {
            Some(0) if result.passed => "passed".to_owned(),
            Some(code) => format!("failed with exit code {code}"),
            None => "was killed by a signal".to_owned(),
        }
    };
    let mut out = format!("The acceptance command `{}` {status}", result.command);
    if let Some(c) = result.counts {
        out.push_str(&format!(" ({c})"));
    }
    out.push_str(".\n");
    if let Some(note) = &result.note {
        out.push_str(&format!("Note: {note}.\n"));
    }
    let clean = strip_ansi(&result.tail);
    let tail = clean.trim_end();
    let tail = tail.trim_start_matches('\n');
    if tail.trim().is_empty() {
        out.push_str("It printed nothing.\n");
        return out;
    }
    let (shown, cut) = tail_at_line(tail, limit);
    if cut {
        out.push_str(&format!("The last {} bytes of its output (earlier output cut):\n", shown.len()));
    } else {
        out.push_str("Its output:\n");
    }
    // A fence longer than any run of backticks in the output.
    let longest = shown.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    out.push_str(&format!("{fence}\n{shown}\n{fence}\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(passed: u64, failed: u64, skipped: u64) -> Option<Counts> {
        Some(Counts { passed, failed, skipped })
    }

    #[test]
    fn cargo_test_sums_every_binary_and_doctests() {
        let out = r#"   Compiling demo v0.1.0 (/tmp/demo)
    Finished `test` profile [unoptimized + debuginfo] target(s) in 1.52s
     Running unittests src/lib.rs (target/debug/deps/demo-1a2b3c4d5e6f7a8b)

running 4 tests
test parse::tests::empty ... ok
test parse::tests::nested ... ok
test parse::tests::slow ... ignored
test parse::tests::unicode ... FAILED

failures:

---- parse::tests::unicode stdout ----
thread 'parse::tests::unicode' panicked at src/parse.rs:88:9:
assertion `left == right` failed
  left: 3
 right: 4

failures:
    parse::tests::unicode

test result: FAILED. 2 passed; 1 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s

     Running tests/cli.rs (target/debug/deps/cli-9f8e7d6c5b4a3210)

running 3 tests
test help ... ok
test version ... ok
test run ... ok

test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.20s

   Doc-tests demo

running 2 tests
test src/lib.rs - parse (line 10) ... ok
test src/lib.rs - Config (line 30) ... ignored

test result: ok. 1 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.31s

error: test failed, to rerun pass `--lib`
"#;
        assert_eq!(parse_counts(out), counts(6, 1, 2));
    }

    #[test]
    fn cargo_test_with_colours() {
        let out = "test result: \x1b[31mFAILED\x1b[0m. 7 passed; 2 failed; 0 ignored; 0 measured; 3 filtered out; finished in 0.05s\n";
        assert_eq!(parse_counts(out), counts(7, 2, 0));
    }

    #[test]
    fn nextest_summary() {
        let out = "────────────\n     Summary [   0.012s] 11 tests run: 9 passed (1 slow), 2 failed, 3 skipped\n   FAIL [   0.003s] demo::a\n";
        assert_eq!(parse_counts(out), counts(9, 2, 3));
    }

    #[test]
    fn pytest_summary_with_errors_and_warnings() {
        let out = r#"============================= test session starts ==============================
platform linux -- Python 3.12.3, pytest-8.2.0, pluggy-1.5.0
rootdir: /tmp/demo
collected 9 items / 1 error

tests/test_text.py ..F.s.s                                               [ 77%]
tests/test_slug.py .                                                     [100%]

==================================== ERRORS ====================================
____________________ ERROR collecting tests/test_broken.py _____________________
ImportError while importing test module '/tmp/demo/tests/test_broken.py'.
=================================== FAILURES ===================================
_________________________________ test_slugify _________________________________

    def test_slugify():
>       assert slugify("Hello World") == "hello-world"
E       AssertionError: assert 'Hello-World' == 'hello-world'

tests/test_text.py:12: AssertionError
=============================== warnings summary ===============================
tests/test_text.py::test_old
  /tmp/demo/src/text.py:3: DeprecationWarning: old API

-- Docs: https://docs.pytest.org/en/stable/how-to/capture-warnings.html
=========================== short test summary info ============================
FAILED tests/test_text.py::test_slugify - AssertionError: assert 'Hello-World' == 'hello-world'
ERROR tests/test_broken.py
==== 1 failed, 5 passed, 2 skipped, 1 warning, 1 error in 0.12s ====
"#;
        assert_eq!(parse_counts(out), counts(5, 2, 2));
    }

    #[test]
    fn pytest_quiet_and_coloured_forms() {
        assert_eq!(
            parse_counts("....                                    [100%]\n4 passed in 0.01s\n"),
            counts(4, 0, 0)
        );
        let coloured = "\x1b[32m\x1b[1m3 passed\x1b[0m, \x1b[33m1 xfailed\x1b[0m\x1b[32m in 0.05s\x1b[0m\n";
        assert_eq!(parse_counts(coloured), counts(3, 0, 1));
        let long = "=== 2 passed, 3 deselected in 62.01s (0:01:02) ===\n";
        assert_eq!(parse_counts(long), counts(2, 0, 0));
        assert_eq!(parse_counts("\n============ no tests ran in 0.01s ============\n"), counts(0, 0, 0));
        assert_eq!(parse_counts("=========== 1 error in 0.05s ===========\n"), counts(0, 1, 0));
    }

    #[test]
    fn unittest_ok_and_failed() {
        let ok = "......s\n----------------------------------------------------------------------\nRan 7 tests in 0.004s\n\nOK (skipped=1)\n";
        assert_eq!(parse_counts(ok), counts(6, 0, 1));
        let failed = r#"..FE.
======================================================================
ERROR: test_b (test_mod.T.test_b)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "test_mod.py", line 9, in test_b
    raise ValueError
ValueError

======================================================================
FAIL: test_a (test_mod.T.test_a)
----------------------------------------------------------------------
AssertionError: 1 != 2

----------------------------------------------------------------------
Ran 5 tests in 0.001s

FAILED (failures=1, errors=1)
"#;
        assert_eq!(parse_counts(failed), counts(3, 2, 0));
        assert_eq!(parse_counts("Ran 1 test in 0.000s\n\nOK\n"), counts(1, 0, 0));
    }

    #[test]
    fn jest_summary() {
        let out = r#" PASS  src/sum.test.js
 FAIL  src/slug.test.js
  ● slugify › lowercases

    expect(received).toBe(expected) // Object.is equality

Test Suites: 1 failed, 1 passed, 2 total
Tests:       1 failed, 1 skipped, 4 passed, 6 total
Snapshots:   0 total
Time:        1.234 s
Ran all test suites.
"#;
        assert_eq!(parse_counts(out), counts(4, 1, 1));
        let coloured = "\x1b[1mTests:       \x1b[22m\x1b[1m\x1b[32m5 passed\x1b[39m\x1b[22m, 5 total\n";
        assert_eq!(parse_counts(coloured), counts(5, 0, 0));
    }

    #[test]
    fn vitest_summary() {
        let out = r#"
 ❯ src/slug.test.ts (3 tests | 1 failed) 12ms
 ✓ src/sum.test.ts (2 tests) 3ms

 Test Files  1 failed | 1 passed (2)
      Tests  1 failed | 4 passed | 1 skipped (6)
   Start at  10:12:01
   Duration  412ms (transform 40ms, setup 0ms, collect 55ms, tests 15ms)
"#;
        assert_eq!(parse_counts(out), counts(4, 1, 1));
        let coloured = " \x1b[2m     Tests \x1b[22m \x1b[1m\x1b[32m5 passed\x1b[39m\x1b[22m\x1b[90m (5)\x1b[39m\n";
        assert_eq!(parse_counts(coloured), counts(5, 0, 0));
    }

    #[test]
    fn mocha_and_bun() {
        let mocha = "  slugify\n    ✓ lowercases\n    1) trims\n\n  4 passing (12ms)\n  1 failing\n  2 pending\n";
        assert_eq!(parse_counts(mocha), counts(4, 1, 2));
        let bun = "src/a.test.ts:\n✓ a [0.10ms]\n\n 3 pass\n 1 skip\n 1 fail\n 9 expect() calls\nRan 5 tests across 1 file. [12.00ms]\n";
        assert_eq!(parse_counts(bun), counts(3, 1, 1));
    }

    #[test]
    fn go_test_verbose_counts_test_lines() {
        let out = r#"=== RUN   TestAdd
--- PASS: TestAdd (0.00s)
=== RUN   TestSlug
=== RUN   TestSlug/spaces
=== RUN   TestSlug/unicode
    slug_test.go:21: got "a-b", want "a_b"
--- FAIL: TestSlug (0.00s)
    --- PASS: TestSlug/spaces (0.00s)
    --- FAIL: TestSlug/unicode (0.00s)
=== RUN   TestNetwork
    net_test.go:8: no network
--- SKIP: TestNetwork (0.00s)
FAIL
FAIL	example.com/demo/text	0.004s
=== RUN   TestOther
--- PASS: TestOther (0.00s)
PASS
ok  	example.com/demo/other	0.002s
# example.com/demo/broken
broken/x.go:3:1: syntax error: non-declaration statement outside function body
FAIL	example.com/demo/broken [build failed]
FAIL
"#;
        assert_eq!(parse_counts(out), counts(3, 3, 1));
    }

    #[test]
    fn go_test_quiet_counts_packages() {
        let out = "--- FAIL: TestSlug (0.00s)\n    slug_test.go:21: got 1\nFAIL\nFAIL\texample.com/demo/text\t0.004s\nok  \texample.com/demo/other\t(cached)\nok  \texample.com/demo/cov\t0.010s\tcoverage: 81.2% of statements\n?   \texample.com/demo/cmd\t[no test files]\nFAIL\texample.com/demo/broken [setup failed]\nFAIL\n";
        assert_eq!(parse_counts(out), counts(2, 2, 0));
    }

    #[test]
    fn nothing_recognized() {
        assert_eq!(parse_counts(""), None);
        assert_eq!(parse_counts("All checks passed!\nFound 0 errors.\n"), None);
        assert_eq!(
            parse_counts("error[E0425]: cannot find value `x` in this scope\nerror: could not compile `demo`\n"),
            None
        );
        assert_eq!(parse_counts("ok\nFAIL\nOK\n"), None);
    }

    #[test]
    fn carriage_returns_split_lines() {
        let out = "running...\r\x1b[K3 passed, 1 failed in 0.50s\n";
        assert_eq!(parse_counts(out), counts(3, 1, 0));
    }

    #[test]
    fn strips_ansi_sequences() {
        assert_eq!(strip_ansi("plain"), "plain");
        assert_eq!(strip_ansi("\x1b[1;31merror\x1b[0m: \x1b]8;;http://x\x07link\x1b]8;;\x07\x1b[2K"), "error: link");
    }

    fn result(tail: &str) -> AcceptanceResult {
        AcceptanceResult {
            command: "python3 -m pytest -q".into(),
            exit_code: Some(1),
            passed: false,
            duration_ms: 1234,
            counts: counts(3, 1, 0),
            timed_out: false,
            tail: tail.into(),
            note: None,
        }
    }

    #[test]
    fn feedback_names_command_status_and_output() {
        let fb = feedback(
            &result("F...\nFAILED tests/test_a.py::test_x - assert 1 == 2\n3 passed, 1 failed in 0.1s\n"),
            4096,
        );
        assert!(
            fb.starts_with(
                "The acceptance command `python3 -m pytest -q` failed with exit code 1 (3 passed, 1 failed).\n"
            ),
            "{fb}"
        );
        assert!(fb.contains("Its output:\n```\nF...\nFAILED tests/test_a.py::test_x"), "{fb}");
        assert!(fb.ends_with("in 0.1s\n```\n"), "{fb}");
    }

    #[test]
    fn feedback_cuts_at_a_line_boundary_with_a_note() {
        let tail: String = (0..1000).map(|i| format!("line {i:04} of the output\n")).collect();
        let fb = feedback(&result(&tail), 4096);
        assert!(fb.contains("earlier output cut"), "{fb}");
        let body = fb.split("```\n").nth(1).unwrap();
        assert!(body.len() <= 4096 + 1);
        assert!(body.starts_with("line "), "{body}");
        assert!(body.ends_with("line 0999 of the output\n"));
        assert!(fb.len() < 4096 + 300);
    }

    #[test]
    fn feedback_cut_without_newlines_respects_char_boundaries() {
        let tail = "é".repeat(5000);
        let fb = feedback(&result(&tail), 101);
        let body = fb.split("```\n").nth(1).unwrap().trim_end();
        assert!(body.len() <= 101 && body.chars().all(|c| c == 'é'), "{body}");
    }

    #[test]
    fn feedback_for_timeouts_signals_and_silence() {
        let mut r = result("");
        r.timed_out = true;
        r.exit_code = None;
        r.counts = None;
        r.duration_ms = 600_012;
        assert_eq!(
            feedback(&r, 4096),
            "The acceptance command `python3 -m pytest -q` was stopped at its timeout after 10m.\nIt printed nothing.\n"
        );
        r.timed_out = false;
        r.tail = "\x1b[31mKilled\x1b[0m\n".into();
        let fb = feedback(&r, 4096);
        assert!(fb.contains("was killed by a signal.\n"), "{fb}");
        assert!(fb.contains("```\nKilled\n```"), "{fb}");
    }

    #[test]
    fn feedback_fence_outlasts_backticks_in_output() {
        let fb = feedback(&result("```rust\nfn x() {}\n```\n"), 4096);
        assert!(fb.contains("````\n```rust"), "{fb}");
    }

    #[test]
    fn result_serializes_without_tail() {
        let json = serde_json::to_value(result("secret output")).unwrap();
        assert!(json.get("tail").is_none());
        assert_eq!(json["counts"]["failed"], 1);
        assert_eq!(DEFAULT_TIMEOUT, Duration::from_secs(600));
        assert_eq!(counts(1, 2, 3).unwrap().to_string(), "1 passed, 2 failed, 3 skipped");
        assert_eq!(counts(1, 2, 3).unwrap().total(), 6);
    }
}
