//! What the unit tests of the review's rule families share: changes made
//! from text, and a review of them with a task's scope, constraints,
//! level and kind.

use super::*;
use cassist_core::changes::{Change, ChangeKind, ChangeSet, S_IFREG};
use cassist_core::limits::Limits;
use cassist_core::spec::{Kind, SandboxLevel};

pub(super) fn change(path: &str, kind: ChangeKind, old: Option<&str>, new: Option<&str>) -> Change {
    Change {
        path: path.into(),
        kind,
        old: old.map(|s| s.as_bytes().to_vec()),
        new: new.map(|s| s.as_bytes().to_vec()),
        mode: S_IFREG | 0o644,
        hazard: None,
        old_mode: None,
        base_unknown: false,
    }
}
pub(super) fn added(path: &str, new: &str) -> Change {
    change(path, ChangeKind::Added, None, Some(new))
}
pub(super) fn modified(path: &str, old: &str, new: &str) -> Change {
    change(path, ChangeKind::Modified, Some(old), Some(new))
}
pub(super) fn set(changes: Vec<Change>) -> ChangeSet {
    ChangeSet { changes }
}
pub(super) fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}
pub(super) fn run(changes: Vec<Change>, scope: &[&str], constraints: &[&str]) -> Review {
    run_with(changes, scope, constraints, SandboxLevel::WorkspaceWrite, Kind::Code, false)
}
pub(super) fn run_with(
    changes: Vec<Change>,
    scope: &[&str],
    constraints: &[&str],
    sandbox: SandboxLevel,
    kind: Kind,
    project_has_tests: bool,
) -> Review {
    let scope = strings(scope);
    let constraints = strings(constraints);
    let own_files = OwnFiles::default();
    let input = ReviewInput {
        scope: &scope,
        sandbox,
        kind,
        constraints: &constraints,
        project_has_tests,
        own_files: &own_files,
        limits: Limits::DEFAULT,
    };
    review(&set(changes), &input)
}
pub(super) fn rules(r: &Review) -> Vec<Rule> {
    r.findings.iter().map(|f| f.rule).collect()
}
