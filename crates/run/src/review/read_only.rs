//! The read-only rule: a task of a read-only kind (explore, review, test)
//! or under the read-only sandbox level may change nothing; every change
//! it makes is rejected.

use super::{Finding, ReviewInput, Rule, Severity, describe_path, verb};
use cassist_core::changes::ChangeSet;
use cassist_core::spec::{Kind, SandboxLevel};

/// Whether the task may change nothing: its sandbox level is read-only or
/// its kind is explore, review or test.
pub(super) fn applies(input: &ReviewInput) -> bool {
    input.sandbox == SandboxLevel::ReadOnly || matches!(input.kind, Kind::Explore | Kind::Review | Kind::Test)
}

/// A rejection for each change of a read-only task of kind `kind`, saying
/// what makes it read-only.
pub(super) fn check(changes: &ChangeSet, kind: Kind) -> Vec<Finding> {
    let why = match kind {
        Kind::Explore => "kind explore",
        Kind::Review => "kind review",
        Kind::Test => "kind test",
        Kind::Code => "sandbox read-only",
    };
    changes
        .changes
        .iter()
        .map(|c| Finding {
            rule: Rule::ReadOnly,
            severity: Severity::Reject,
            path: Some(c.path.clone()),
            message: format!(
                "this task is read-only ({why}) but {} {}; make no changes to project files",
                verb(&c.kind),
                describe_path(c)
            ),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::review::Rule;
    use crate::review::test_support::*;
    use cassist_core::spec::{Kind, SandboxLevel};

    #[test]
    fn read_only_kinds_and_sandbox_reject_any_change() {
        for (sandbox, kind) in [
            (SandboxLevel::ReadOnly, Kind::Code),
            (SandboxLevel::WorkspaceWrite, Kind::Explore),
            (SandboxLevel::WorkspaceWrite, Kind::Review),
            (SandboxLevel::Full, Kind::Test),
        ] {
            let r = run_with(vec![modified("src/a.rs", "a\n", "b\n")], &[], &[], sandbox, kind, true);
            assert_eq!(rules(&r), [Rule::ReadOnly], "{sandbox:?} {kind:?}");
            assert!(r.findings[0].message.contains("read-only"));
            assert!(r.findings[0].message.contains("make no changes"));
        }
    }

    #[test]
    fn read_only_without_changes_is_clean() {
        let r = run_with(vec![], &[], &[], SandboxLevel::ReadOnly, Kind::Explore, true);
        assert!(r.findings.is_empty());
    }

    #[test]
    fn read_only_still_reports_secrets() {
        let r = run_with(
            vec![added("notes.txt", "AKIAQWERTYUIOPASDFGH\n")],
            &[],
            &[],
            SandboxLevel::ReadOnly,
            Kind::Review,
            false,
        );
        assert_eq!(rules(&r), [Rule::ReadOnly, Rule::Secret]);
        assert!(r.security_issue());
    }
}
