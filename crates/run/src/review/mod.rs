//! Review of a change set before acceptance: what an agent changed is
//! checked for what must never land (cassist's own files, special files
//! and mode bits, symlinks leaving the project, names that are not UTF-8,
//! files and changes over the limits), against the task's scope, its
//! read-only kind or sandbox, new dependencies in manifests, secrets in
//! added lines, and whether tests were touched. Pure logic: the change set
//! comes in, the findings go out, each with a message an agent can act on.
//!
//! One module per rule family: `never_lands` (the hard rules), `scope`,
//! `read_only`, `dependency`, `secret` and `testing`; [`review`] runs them
//! in that order.

mod dependency;
mod never_lands;
mod read_only;
mod scope;
mod secret;
#[cfg(test)]
mod test_support;
mod testing;

use serde::{Deserialize, Serialize};

use cassist_core::changes::{Change, ChangeKind, ChangeSet};
use cassist_core::limits::Limits;
use cassist_core::paths::normalize;
use cassist_core::spec::{Kind, SandboxLevel};

pub use dependency::constraints_allow_dependencies;
pub use scope::Scope;
pub use secret::shannon_entropy;
pub use testing::{has_tests, looks_like_test_path};

/// How serious a finding is: a rejection sends the change back to the
/// agent; a warning is recorded and shown but does not block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    Reject,
    Warning,
}

/// The review rule a finding comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rule {
    /// cassist's own files, `.git/` and `.cassist/`.
    OwnFiles,
    /// A name that is not valid UTF-8.
    PathName,
    /// A fifo, socket or device file.
    SpecialFile,
    /// setuid, setgid or sticky bits.
    SpecialBits,
    /// A symlink leading out of the project.
    Symlink,
    /// A file or change over `limits`.
    Limits,
    Scope,
    ReadOnly,
    Dependency,
    Secret,
    Tests,
}

impl Rule {
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::OwnFiles => "own-files",
            Rule::PathName => "path-name",
            Rule::SpecialFile => "special-file",
            Rule::SpecialBits => "special-bits",
            Rule::Symlink => "symlink",
            Rule::Limits => "limits",
            Rule::Scope => "scope",
            Rule::ReadOnly => "read-only",
            Rule::Dependency => "dependency",
            Rule::Secret => "secret",
            Rule::Tests => "tests",
        }
    }

    /// Whether a rejection by this rule is a security issue (a secret,
    /// cassist's own files, what must never land): reported as such, never
    /// retried with the secret echoed, and its message never holds a
    /// secret.
    pub fn is_security(self) -> bool {
        !matches!(self, Rule::Scope | Rule::ReadOnly | Rule::Dependency | Rule::Tests)
    }
}

/// One thing the review found. `message` never holds a secret's value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub rule: Rule,
    pub severity: Severity,
    pub path: Option<String>,
    pub message: String,
}

/// What the review needs to know about the task.
pub struct ReviewInput<'a> {
    /// Scope globs; empty means anything but `.git/` and `.cassist/`.
    pub scope: &'a [String],
    pub sandbox: SandboxLevel,
    pub kind: Kind,
    pub constraints: &'a [String],
    pub project_has_tests: bool,
    /// cassist's own files in this run.
    pub own_files: &'a OwnFiles,
    pub limits: Limits,
}

/// cassist's own files, which a change may touch only when the
/// task's scope names the file literally: `cassist.kdl`, `cassist.lock`,
/// `.agents/config.toml`, the prompt template and instructions file, the
/// run's task files, and any other `.kdl` file (a task file of a later
/// run). Below `.git/` and `.cassist/` nothing may change at all.
#[derive(Debug, Clone, Default)]
pub struct OwnFiles {
    /// The run's task files, relative to the root.
    pub task_files: Vec<String>,
    pub template: Option<String>,
    pub instructions: Option<String>,
}

impl OwnFiles {
    /// What `path` is to cassist, when it is one of its own files (not
    /// counting `.git/` and `.cassist/`).
    pub fn what(&self, path: &str) -> Option<&'static str> {
        let is = |p: &Option<String>| p.as_deref().is_some_and(|p| normalize(p) == path);
        Some(match path {
            "cassist.kdl" => "the project config",
            "cassist.lock" => "the lock file",
            ".agents/config.toml" => "the trust setting",
            _ if is(&self.template) => "the prompt template",
            _ if is(&self.instructions) => "the agents' standing instructions",
            _ if self.task_files.iter().any(|t| normalize(t) == path) => "a task file of this run",
            _ if path.ends_with(".kdl") => "a KDL file, which cassist reads as task file when given its folder",
            _ => return None,
        })
    }
}

/// The findings of one review, in rule order (what must never land:
/// own files, names, special files and bits, symlinks, limits; then
/// read-only or scope, dependencies, secrets, tests), paths sorted within
/// a rule.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Review {
    pub findings: Vec<Finding>,
}

/// Most bytes of findings [`Review::feedback`] puts into a prompt: the
/// agent's next prompt gets about 4 KB of feedback at most.
pub const FEEDBACK_LIMIT: usize = 4096;

impl Review {
    /// Whether any finding rejects the change.
    pub fn rejected(&self) -> bool {
        self.findings.iter().any(|f| f.severity == Severity::Reject)
    }

    /// Whether a rejection is a security issue (a secret, cassist's own
    /// files, what must never land), reported as such.
    pub fn security_issue(&self) -> bool {
        self.first_security_issue().is_some()
    }

    /// The first rejection that is a security issue.
    pub fn first_security_issue(&self) -> Option<&Finding> {
        self.findings.iter().find(|f| f.severity == Severity::Reject && f.rule.is_security())
    }

    /// A one-line reason for a rejected review (the first rejection, and
    /// how many more there are), for reports and the last failure reason.
    pub fn reason(&self) -> Option<String> {
        let rejects: Vec<&Finding> = self.findings.iter().filter(|f| f.severity == Severity::Reject).collect();
        let first = rejects.first()?;
        Some(match rejects.len() {
            1 => first.message.clone(),
            n => format!("{} (and {} more finding{})", first.message, n - 1, if n == 2 { "" } else { "s" }),
        })
    }

    /// The findings as markdown bullets for the agent's next prompt, at
    /// most about [`FEEDBACK_LIMIT`] bytes. Built from the messages only,
    /// which never hold a secret's value.
    pub fn feedback(&self) -> String {
        let mut out = String::new();
        for (i, f) in self.findings.iter().enumerate() {
            let label = match f.severity {
                Severity::Reject => "rejected",
                Severity::Warning => "warning",
            };
            let line = format!("- [{label}] {}\n", f.message);
            if !out.is_empty() && out.len() + line.len() > FEEDBACK_LIMIT {
                let rest = self.findings.len() - i;
                out.push_str(&format!("- … and {rest} more finding{} like these\n", if rest == 1 { "" } else { "s" }));
                break;
            }
            out.push_str(&line);
        }
        out
    }
}

/// Reviews `changes` against the task described by `input`.
pub fn review(changes: &ChangeSet, input: &ReviewInput) -> Review {
    let mut findings = never_lands::check(changes, input);
    // A path already rejected as cassist's own is not also out of scope.
    let changes = &never_lands::without_own_files(changes, &findings);
    let read_only = read_only::applies(input);
    if read_only {
        findings.extend(read_only::check(changes, input.kind));
    } else {
        findings.extend(scope::check(changes, input.scope));
        if !constraints_allow_dependencies(input.constraints) {
            findings.extend(dependency::check(changes));
        }
    }
    findings.extend(secret::check(changes));
    if !read_only {
        findings.extend(testing::check(changes, input));
    }
    Review { findings }
}

/// What a change did to its path, as a finding says it.
fn verb(kind: &ChangeKind) -> &'static str {
    match kind {
        ChangeKind::Added => "created",
        ChangeKind::Modified => "changed",
        ChangeKind::Deleted => "deleted",
        ChangeKind::Renamed { .. } => "moved",
    }
}

/// A change's path, or where it was moved from and to.
fn describe_path(c: &Change) -> String {
    match &c.kind {
        ChangeKind::Renamed { from } => format!("{from} to {}", c.path),
        _ => c.path.clone(),
    }
}

/// A side of a change as text, when it is UTF-8.
fn text(bytes: Option<&Vec<u8>>) -> Option<&str> {
    bytes.and_then(|b| std::str::from_utf8(b).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::review::test_support::*;

    #[test]
    fn feedback_lists_findings_as_bullets() {
        let r = run_with(
            vec![modified("src/other.py", "a\n", "b\n")],
            &["src/text.py"],
            &[],
            SandboxLevel::WorkspaceWrite,
            Kind::Code,
            true,
        );
        let fb = r.feedback();
        assert!(fb.starts_with("- [rejected] modified unrelated files: changed src/other.py"), "{fb}");
        assert!(fb.contains("\n- [warning] no test was added or changed"), "{fb}");
        assert_eq!(r.reason().unwrap(), r.findings[0].message);
        assert_eq!(Review::default().reason(), None);
        assert_eq!(Review::default().feedback(), "");
    }

    #[test]
    fn reason_counts_further_rejections() {
        let r = run(vec![added("a/x.txt", "x\n"), added("b/y.txt", "y\n"), added("c/z.txt", "z\n")], &["src/**"], &[]);
        let reason = r.reason().unwrap();
        assert!(reason.starts_with("modified unrelated files: created a/x.txt"), "{reason}");
        assert!(reason.ends_with("(and 2 more findings)"), "{reason}");
    }

    #[test]
    fn feedback_is_bounded() {
        let changes = (0..500).map(|i| added(&format!("other/file{i:03}.txt"), "x\n")).collect();
        let r = run(changes, &["src/**"], &[]);
        assert_eq!(r.findings.len(), 500);
        let fb = r.feedback();
        assert!(fb.len() <= FEEDBACK_LIMIT + 100, "{}", fb.len());
        assert!(fb.contains("more findings like these"));
    }

    #[test]
    fn serializes_kebab_case() {
        let f = Finding { rule: Rule::ReadOnly, severity: Severity::Warning, path: None, message: "m".into() };
        let json = serde_json::to_string(&f).unwrap();
        assert_eq!(json, r#"{"rule":"read-only","severity":"warning","path":null,"message":"m"}"#);
        for rule in [
            Rule::OwnFiles,
            Rule::PathName,
            Rule::SpecialFile,
            Rule::SpecialBits,
            Rule::Symlink,
            Rule::Limits,
            Rule::Scope,
            Rule::ReadOnly,
            Rule::Dependency,
            Rule::Secret,
            Rule::Tests,
        ] {
            assert_eq!(serde_json::to_string(&rule).unwrap(), format!("\"{}\"", rule.as_str()));
        }
    }
}
