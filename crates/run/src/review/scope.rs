//! The scope rule: a change may touch only the files its task's scope
//! names ([`Scope`]); `.git/` and `.cassist/` are never in scope.

use globset::{GlobSet, GlobSetBuilder};

use super::{Finding, Rule, Severity};
use cassist_core::changes::{ChangeKind, ChangeSet};
use cassist_core::paths::{build_glob, is_literal, is_reserved, normalize};

/// A task's scope: literal paths (a folder means everything below it) and
/// globs (`*` within a folder, `**` across), as task files mean them.
pub struct Scope {
    literals: Vec<String>,
    globs: GlobSet,
    everything: bool,
}

impl Scope {
    pub fn new(patterns: &[String]) -> Scope {
        let mut literals = Vec::new();
        let mut builder = GlobSetBuilder::new();
        let mut everything = patterns.is_empty();
        for p in patterns {
            let p = normalize(p);
            if p.is_empty() || p == "**" {
                everything = true;
            } else if is_literal(&p) {
                literals.push(p);
            } else if let Ok(g) = build_glob(&p) {
                builder.add(g);
            }
            // A bad glob was reported when the spec was read; it matches nothing.
        }
        let globs = builder.build().unwrap_or_else(|_| GlobSet::empty());
        Scope { literals, globs, everything }
    }

    /// Whether the scope names no path (everything is in it).
    pub fn is_everything(&self) -> bool {
        self.everything
    }

    /// The literal paths of the scope (files or folders).
    pub fn literals(&self) -> &[String] {
        &self.literals
    }

    /// Whether the scope names `path` itself literally (not a folder
    /// above it, not a glob).
    pub fn names_literally(&self, path: &str) -> bool {
        self.literals.iter().any(|l| l == path)
    }

    /// Whether `path` is in the scope; `.git/` and `.cassist/` never are,
    /// whatever the scope says.
    pub fn contains(&self, path: &str) -> bool {
        if is_reserved(path) {
            return false;
        }
        self.everything
            || self.globs.is_match(path)
            || self
                .literals
                .iter()
                .any(|l| path == l || path.strip_prefix(l.as_str()).is_some_and(|r| r.starts_with('/')))
    }
}

/// A rejection for each path a change touches outside the scope
/// `patterns` (moved away from, created, deleted or changed there).
pub(super) fn check(changes: &ChangeSet, patterns: &[String]) -> Vec<Finding> {
    let scope = Scope::new(patterns);
    let shown =
        if patterns.is_empty() { "the whole project but .git/ and .cassist/".to_owned() } else { patterns.join(", ") };
    let mut out = Vec::new();
    for c in &changes.changes {
        let mut outside: Vec<(&str, &str, &str)> = Vec::new();
        if let ChangeKind::Renamed { from } = &c.kind {
            if !scope.contains(from) {
                outside.push((from, "moved away", "move it back"));
            }
            if !scope.contains(&c.path) {
                outside.push((&c.path, "created", "remove it"));
            }
        } else if !scope.contains(&c.path) {
            outside.push(match c.kind {
                ChangeKind::Added => (&c.path, "created", "remove it"),
                ChangeKind::Deleted => (&c.path, "deleted", "restore it"),
                _ => (&c.path, "changed", "revert it"),
            });
        }
        for (path, what, fix) in outside {
            let never = if is_reserved(path) { "; .git/ and .cassist/ are never in scope" } else { "" };
            out.push(Finding {
                rule: Rule::Scope,
                severity: Severity::Reject,
                path: Some(path.to_owned()),
                message: format!(
                    "modified unrelated files: {what} {path}, outside the scope ({shown}{never}); {fix} and change only files in the scope"
                ),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::review::Rule;
    use crate::review::test_support::*;
    use cassist_core::changes::ChangeKind;

    #[test]
    fn in_scope_changes_pass() {
        let r = run(
            vec![modified("src/text.py", "a\n", "b\n"), added("tests/unit/test_text.py", "def test_a(): pass\n")],
            &["src/text.py", "tests/**"],
            &[],
        );
        assert!(r.findings.is_empty(), "{r:?}");
        assert!(!r.rejected());
    }

    #[test]
    fn out_of_scope_change_is_rejected_with_an_actionable_message() {
        let r = run(vec![modified("src/other.py", "a\n", "b\n")], &["src/text.py", "tests/**"], &[]);
        assert!(r.rejected());
        assert_eq!(rules(&r), [Rule::Scope]);
        let f = &r.findings[0];
        assert_eq!(f.path.as_deref(), Some("src/other.py"));
        assert!(f.message.contains("modified unrelated files"), "{}", f.message);
        assert!(f.message.contains("src/other.py"));
        assert!(f.message.contains("src/text.py, tests/**"));
        assert!(f.message.contains("revert it"));
    }

    #[test]
    fn literal_folder_scope_covers_everything_below() {
        let r = run(vec![added("src/pkg/deep/a.rs", "x\n"), added("srcx/a.rs", "x\n")], &["src/pkg/"], &[]);
        assert_eq!(r.findings.len(), 1);
        assert_eq!(r.findings[0].path.as_deref(), Some("srcx/a.rs"));
        assert!(r.findings[0].message.contains("remove it"));
    }

    #[test]
    fn star_stays_within_a_folder() {
        let r = run(vec![added("src/a.py", ""), added("src/sub/b.py", "")], &["src/*.py"], &[]);
        assert_eq!(r.findings.len(), 1);
        assert_eq!(r.findings[0].path.as_deref(), Some("src/sub/b.py"));
    }

    #[test]
    fn rename_checks_both_ends() {
        let c =
            change("src/new.py", ChangeKind::Renamed { from: "lib/old.py".into() }, Some("x = 1\n"), Some("x = 1\n"));
        let r = run(vec![c], &["src/**"], &[]);
        assert_eq!(r.findings.len(), 1);
        assert_eq!(r.findings[0].path.as_deref(), Some("lib/old.py"));
        assert!(r.findings[0].message.contains("move it back"));
    }

    #[test]
    fn deleting_outside_scope_is_rejected() {
        let r = run(vec![change("README.md", ChangeKind::Deleted, Some("# x\n"), None)], &["src/**"], &[]);
        assert_eq!(rules(&r), [Rule::Scope]);
        assert!(r.findings[0].message.contains("restore it"));
    }
}
