//! The tests rule: a code change in a project that has tests should add
//! or change one; when it does not, a warning (not a rejection) says so.

use std::sync::LazyLock;

use regex::Regex;

use super::{Finding, ReviewInput, Rule, Severity};
use cassist_core::changes::{ChangeKind, ChangeSet};
use cassist_core::spec::Kind;

/// Whether `path` (relative, `/`-separated) follows a common test layout:
/// a `tests/`, `test/`, `__tests__/`, `testdata/` folder (or a top-level
/// `spec/`), `*_test.go`, `test_*.py`, `*_test.py`, `conftest.py`,
/// `*.test.ts`/`.js`, `*.spec.ts`/`.js`, `tests.rs`, `*_test.rs`,
/// `*Test.java`, `*_spec.rb`, ...
pub fn looks_like_test_path(path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let Some((name, dirs)) = parts.split_last() else { return false };
    if dirs.iter().any(|d| matches!(*d, "tests" | "test" | "__tests__" | "testdata" | "testing"))
        || dirs.first().is_some_and(|d| *d == "spec")
    {
        return true;
    }
    let (stem, ext) = name.rsplit_once('.').unwrap_or((name, ""));
    match ext {
        "py" => stem.starts_with("test_") || stem.ends_with("_test") || matches!(stem, "tests" | "conftest"),
        "go" | "rs" | "rb" | "exs" | "ex" | "cc" | "cpp" | "c" => {
            stem.ends_with("_test") || stem.ends_with("_tests") || stem.ends_with("_spec") || stem == "tests"
        }
        "ts" | "tsx" | "js" | "jsx" | "mjs" | "cjs" | "mts" | "cts" => {
            stem.ends_with(".test") || stem.ends_with(".spec") || stem.ends_with("_test") || stem.ends_with(".e2e")
        }
        "java" | "kt" | "scala" | "cs" | "swift" | "php" => {
            stem.ends_with("Test") || stem.ends_with("Tests") || stem.ends_with("Spec") || stem.ends_with("IT")
        }
        _ => false,
    }
}

/// Whether any of `files` follows a test layout (see [`looks_like_test_path`]).
pub fn has_tests<'a>(files: impl IntoIterator<Item = &'a str>) -> bool {
    files.into_iter().any(looks_like_test_path)
}

/// Added lines that write a test inside a source file (Rust's inline test
/// modules, Python test functions).
static TEST_MARKER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"#\[(?:[a-z_]+::)?test\]|#\[cfg\(test\)\]|^\s*(?:async\s+)?def\s+test_|^\s*func\s+Test[A-Z_]").unwrap()
});

fn is_documentation(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    let name = lower.rsplit('/').next().unwrap_or(&lower);
    [".md", ".rst", ".txt", ".adoc"].iter().any(|e| name.ends_with(e))
        || lower.starts_with("docs/")
        || name.starts_with("license")
        || name.starts_with("changelog")
}

/// Whether the change writes tests: a test path, or test code added inline.
/// A change of documentation only needs none.
fn touches_tests(changes: &ChangeSet) -> bool {
    if changes.changes.iter().all(|c| is_documentation(&c.path)) {
        return true;
    }
    changes.changes.iter().any(|c| {
        looks_like_test_path(&c.path)
            || matches!(&c.kind, ChangeKind::Renamed { from } if looks_like_test_path(from))
            || (!c.is_binary() && c.added_lines().iter().any(|l| TEST_MARKER.is_match(l)))
    })
}

/// A warning when `changes`, a code task's, touch no test in a project
/// that has tests.
pub(super) fn check(changes: &ChangeSet, input: &ReviewInput) -> Option<Finding> {
    (input.kind == Kind::Code && input.project_has_tests && !touches_tests(changes)).then(|| Finding {
        rule: Rule::Tests,
        severity: Severity::Warning,
        path: None,
        message: "no test was added or changed; add or update a test that covers this change".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::review::test_support::*;
    use crate::review::{Rule, Severity};
    use cassist_core::spec::{Kind, SandboxLevel};

    #[test]
    fn test_paths() {
        for p in [
            "tests/cli.rs",
            "test/helper.js",
            "src/__tests__/a.tsx",
            "pkg/foo_test.go",
            "test_text.py",
            "pkg/sub/text_test.py",
            "conftest.py",
            "web/button.test.ts",
            "web/button.spec.js",
            "src/plan/tests.rs",
            "core/src/test/java/com/x/FooTest.java",
            "spec/models/user_spec.rb",
            "app/FooTests.cs",
        ] {
            assert!(looks_like_test_path(p), "{p}");
        }
        for p in ["src/text.py", "src/spec/types.rs", "contest.py", "src/testament.rs", "latest/x.go", "README.md"] {
            assert!(!looks_like_test_path(p), "{p}");
        }
        assert!(has_tests(["src/a.rs", "tests/b.rs"]));
        assert!(!has_tests(["src/a.rs"]));
    }

    #[test]
    fn warns_when_project_has_tests_and_none_touched() {
        let code = || vec![modified("src/text.py", "a\n", "b\n")];
        let r = run_with(code(), &[], &[], SandboxLevel::WorkspaceWrite, Kind::Code, true);
        assert_eq!(rules(&r), [Rule::Tests]);
        assert_eq!(r.findings[0].severity, Severity::Warning);
        assert!(!r.rejected());
        assert!(r.findings[0].message.contains("no test was added or changed"));
        // No tests in the project: nothing to say.
        assert!(run_with(code(), &[], &[], SandboxLevel::WorkspaceWrite, Kind::Code, false).findings.is_empty());
    }

    #[test]
    fn touching_tests_or_inline_tests_or_docs_only_needs_no_warning() {
        let cases = vec![
            vec![modified("src/text.py", "a\n", "b\n"), added("tests/test_text.py", "def test_x(): pass\n")],
            vec![modified(
                "src/lib.rs",
                "fn a() {}\n",
                "fn a() {}\n#[cfg(test)]\nmod tests {\n#[test]\nfn t() {}\n}\n",
            )],
            vec![modified("README.md", "a\n", "b\n")],
        ];
        for changes in cases {
            let r = run_with(changes, &[], &[], SandboxLevel::WorkspaceWrite, Kind::Code, true);
            assert!(r.findings.is_empty(), "{r:?}");
        }
    }
}
