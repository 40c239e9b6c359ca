//! What must never land, whatever the task's scope and level: changes to
//! cassist's own files (unless the scope names the file literally), below
//! `.git/` and `.cassist/`, names that are not UTF-8, special files and
//! mode bits, symlinks leaving the project, files and changes over the
//! project's `limits`. A rejection here is a security issue.

use std::collections::{BTreeMap, BTreeSet};

use super::scope::Scope;
use super::{Finding, ReviewInput, Rule, Severity, verb};
use cassist_core::changes::{Change, ChangeKind, ChangeSet, Hazard};
use cassist_core::limits::{TooManyFiles, format_size};
use cassist_core::paths::is_reserved_name;

/// The paths a change touches: its own, and where a rename came from.
fn touched_paths(c: &Change) -> impl Iterator<Item = &str> {
    let from = match &c.kind {
        ChangeKind::Renamed { from } => Some(from.as_str()),
        _ => None,
    };
    std::iter::once(c.path.as_str()).chain(from)
}

/// `a/.git/` for `a/.git/hooks/x`: the first `.git` or `.cassist` folder
/// on the way, with its slash.
fn reserved_root(path: &str) -> Option<&str> {
    let mut end = 0;
    for part in path.split('/') {
        end += part.len();
        if is_reserved_name(std::ffi::OsStr::new(part)) {
            return Some(&path[..(end + 1).min(path.len())]);
        }
        end += 1;
    }
    None
}

/// What must never land, whatever the task's scope and level: changes to
/// cassist's own files (unless the scope names the file), below `.git/`
/// and `.cassist/`, names that are not UTF-8, special files and mode
/// bits, symlinks leaving the project, files and changes over the limits.
pub(super) fn check(changes: &ChangeSet, input: &ReviewInput) -> Vec<Finding> {
    let reject = |rule, path: &str, message: String| Finding {
        rule,
        severity: Severity::Reject,
        path: Some(path.to_owned()),
        message,
    };
    let scope = Scope::new(input.scope);
    let mut own = Vec::new();
    let mut reserved: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut entries = Vec::new();
    let mut total: u64 = 0;
    for c in &changes.changes {
        for path in touched_paths(c) {
            if let Some(root) = reserved_root(path) {
                reserved.entry(root).or_default().push(path);
            } else if let Some(what) = input.own_files.what(path)
                && !scope.names_literally(path)
            {
                own.push(reject(
                    Rule::OwnFiles,
                    path,
                    format!(
                        "{} {path}, {what}: one of cassist's own files, which a task may change only when its scope names the file; restore it",
                        verb(&c.kind)
                    ),
                ));
            }
        }
        if let Some(Hazard::NonUtf8Name(_)) = &c.hazard {
            entries.push(reject(
                Rule::PathName,
                &c.path,
                format!(
                    "the name {} is not valid UTF-8 (shown with its bytes escaped); cassist never renames a file: give it a UTF-8 name",
                    c.path
                ),
            ));
            continue;
        }
        if !c.writes() {
            continue;
        }
        if let Some(Hazard::Special(s)) = &c.hazard {
            entries.push(reject(
                Rule::SpecialFile,
                &c.path,
                format!("{} is {}: a change holds files, folders and symlinks only; remove it", c.path, s.describe()),
            ));
        }
        let bits = c.special_bits();
        if bits != 0 {
            let names: Vec<&str> = [(0o4000, "setuid"), (0o2000, "setgid"), (0o1000, "sticky")]
                .iter()
                .filter(|(b, _)| bits & b != 0)
                .map(|(_, n)| *n)
                .collect();
            entries.push(reject(
                Rule::SpecialBits,
                &c.path,
                format!(
                    "{} has the {} bit{} (mode {:o}): remove {} (`chmod ug-s,-t {}`)",
                    c.path,
                    names.join(" and "),
                    if names.len() == 1 { "" } else { "s" },
                    c.mode & 0o7777,
                    if names.len() == 1 { "it" } else { "them" },
                    c.path
                ),
            ));
        }
        if let Some(target) = c.symlink_leaving() {
            entries.push(reject(
                Rule::Symlink,
                &c.path,
                format!(
                    "{} is a symlink to {target}, which leads outside the project; remove it, or point it with a relative path at a file inside the project",
                    c.path
                ),
            ));
        }
        let size = c.new_size();
        if size > input.limits.file_size {
            entries.push(reject(
                Rule::Limits,
                &c.path,
                format!(
                    "{} is {}, over the file-size limit of {}; remove it or make it smaller",
                    c.path,
                    format_size(size),
                    format_size(input.limits.file_size)
                ),
            ));
        } else {
            total = total.saturating_add(size);
        }
    }
    let mut out = own;
    for (root, paths) in reserved {
        let n = paths.len();
        let shown: Vec<&str> = paths.iter().take(3).copied().collect();
        out.push(reject(
            Rule::OwnFiles,
            root,
            format!(
                "changed {n} file{} under {root} ({}{}): git's and cassist's own folders are never part of a change; remove them, and do not run `git init`, `git add` or `git commit`",
                if n == 1 { "" } else { "s" },
                shown.join(", "),
                if n > shown.len() { ", …" } else { "" }
            ),
        ));
    }
    out.extend(entries);
    let count = changes.changes.len() as u64;
    if count > input.limits.files {
        out.push(Finding {
            rule: Rule::Limits,
            severity: Severity::Reject,
            path: None,
            message: TooManyFiles { count, limit: input.limits.files }.to_string(),
        });
    }
    if total > input.limits.change_size {
        out.push(Finding {
            rule: Rule::Limits,
            severity: Severity::Reject,
            path: None,
            message: format!(
                "the change is {}, over the change-size limit of {}; make a smaller change",
                format_size(total),
                format_size(input.limits.change_size)
            ),
        });
    }
    out
}

/// `changes` without those that touch a path `findings` reject as
/// cassist's own (a file, or a `.git/` or `.cassist/` folder): such a path
/// is not also out of scope.
pub(super) fn without_own_files(changes: &ChangeSet, findings: &[Finding]) -> ChangeSet {
    let own: BTreeSet<&str> =
        findings.iter().filter(|f| f.rule == Rule::OwnFiles).filter_map(|f| f.path.as_deref()).collect();
    ChangeSet {
        changes: changes
            .changes
            .iter()
            .filter(|c| !touched_paths(c).any(|p| own.contains(p) || own.iter().any(|o| reserved_root(p) == Some(*o))))
            .cloned()
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::review::test_support::*;
    use crate::review::{OwnFiles, Review, ReviewInput, review};
    use cassist_core::changes::{S_IFLNK, S_IFREG};
    use cassist_core::limits::Limits;
    use cassist_core::spec::{Kind, SandboxLevel};

    #[test]
    fn empty_scope_allows_all_but_git_and_cassist() {
        let r = run(
            vec![
                added(".cassist/state.json", "{}"),
                modified(".git/config", "a", "b"),
                added(".github/workflows/ci.yml", "on: push\n"),
                added("anything/else.txt", "x\n"),
            ],
            &[],
            &[],
        );
        // Rejected as cassist's own files, one finding per folder.
        let paths: Vec<_> = r.findings.iter().map(|f| f.path.clone().unwrap()).collect();
        assert_eq!(paths, [".cassist/", ".git/"]);
        assert_eq!(rules(&r), [Rule::OwnFiles, Rule::OwnFiles]);
        assert!(
            r.findings[1].message.contains("changed 1 file under .git/ (.git/config)"),
            "{}",
            r.findings[1].message
        );
        assert!(r.findings[1].message.contains("never part of a change"));
        assert!(r.security_issue());
    }

    #[test]
    fn git_is_rejected_even_under_a_catch_all_glob_or_named_literally() {
        for scope in ["**", ".git/hooks/pre-commit", ".git"] {
            let r = run(vec![added(".git/hooks/pre-commit", "#!/bin/sh\n")], &[scope], &[]);
            assert_eq!(rules(&r), [Rule::OwnFiles], "{scope}");
        }
        // A submodule's repository too, and many files make one finding.
        let many: Vec<Change> = (0..5).map(|i| added(&format!("vendor/lib/.git/objects/{i}"), "x")).collect();
        let r = run(many, &[], &[]);
        assert_eq!(r.findings.len(), 1);
        assert_eq!(r.findings[0].path.as_deref(), Some("vendor/lib/.git/"));
        assert!(
            r.findings[0].message.contains("changed 5 files under vendor/lib/.git/ ("),
            "{}",
            r.findings[0].message
        );
        assert!(r.findings[0].message.contains(", …)"));
    }

    fn own() -> OwnFiles {
        OwnFiles {
            task_files: vec!["tasks/t.kdl".into(), "jobs/run.task".into()],
            template: Some("prompts/task.md".into()),
            instructions: Some("./docs/agents.md".into()),
        }
    }

    fn run_input(changes: Vec<Change>, scope: &[&str], own_files: &OwnFiles, limits: Limits) -> Review {
        let scope = strings(scope);
        let input = ReviewInput {
            scope: &scope,
            sandbox: SandboxLevel::WorkspaceWrite,
            kind: Kind::Code,
            constraints: &[],
            project_has_tests: false,
            own_files,
            limits,
        };
        review(&set(changes), &input)
    }

    #[test]
    fn cassist_own_files_are_rejected_unless_named_literally() {
        let own = own();
        for path in [
            "cassist.kdl",
            "cassist.lock",
            ".agents/config.toml",
            "prompts/task.md",
            "docs/agents.md",
            "tasks/t.kdl",
            "jobs/run.task",
            "tasks/new-evil.kdl",
            "deep/er/other.kdl",
        ] {
            let r = run_input(vec![modified(path, "a", "b")], &[], &own, Limits::DEFAULT);
            assert_eq!(rules(&r), [Rule::OwnFiles], "{path}");
            assert!(r.security_issue(), "{path}");
            let m = &r.findings[0].message;
            assert!(m.contains(&format!("changed {path}, ")) && m.contains("one of cassist's own files"), "{m}");
            assert!(m.contains("only when its scope names the file; restore it"), "{m}");
            // Named literally in the scope, the change is the task's.
            let r = run_input(vec![modified(path, "a", "b")], &[path], &own, Limits::DEFAULT);
            assert!(r.findings.is_empty(), "{path}: {:?}", r.findings);
            // A folder or a glob naming it is not enough.
            let folder = path.rsplit_once('/').map_or("**", |(d, _)| d);
            let r = run_input(vec![modified(path, "a", "b")], &[folder, "**/*.kdl"], &own, Limits::DEFAULT);
            assert_eq!(rules(&r), [Rule::OwnFiles], "{path} under {folder}");
        }
        // What each is, said; a narrow scope adds no second finding.
        let r = run_input(vec![added("cassist.kdl", "trust \"full\"\n")], &["src/**"], &own, Limits::DEFAULT);
        assert_eq!(rules(&r), [Rule::OwnFiles]);
        assert!(r.findings[0].message.contains("created cassist.kdl, the project config"));
        // Deleting or moving one away counts too.
        let r =
            run_input(vec![change("cassist.lock", ChangeKind::Deleted, Some("x"), None)], &[], &own, Limits::DEFAULT);
        assert_eq!(rules(&r), [Rule::OwnFiles]);
        let moved = change("x.txt", ChangeKind::Renamed { from: "tasks/t.kdl".into() }, Some("t"), Some("t"));
        let r = run_input(vec![moved], &[], &own, Limits::DEFAULT);
        assert_eq!(r.findings[0].path.as_deref(), Some("tasks/t.kdl"));
        // Other files are not cassist's.
        for path in ["src/cassist.kdl.md", "README.md", "docs/other.md", "prompts/other.md"] {
            let r = run_input(vec![modified(path, "a", "b")], &[], &own, Limits::DEFAULT);
            assert!(r.findings.is_empty(), "{path}: {:?}", r.findings);
        }
    }

    fn with_mode(mut c: Change, mode: u32) -> Change {
        c.mode = mode;
        c
    }

    #[test]
    fn special_files_bits_links_and_names_are_rejected_as_security_issues() {
        let fifo = Change {
            new: None,
            hazard: Some(Hazard::Special(cassist_core::changes::Special::Fifo)),
            ..added("run/ctl", "")
        };
        let socket = Change {
            new: None,
            hazard: Some(Hazard::Special(cassist_core::changes::Special::Socket)),
            ..added("s", "")
        };
        let r = run(vec![fifo, socket], &[], &[]);
        assert_eq!(rules(&r), [Rule::SpecialFile, Rule::SpecialFile]);
        assert!(
            r.findings[0]
                .message
                .starts_with("run/ctl is a fifo: a change holds files, folders and symlinks only; remove it")
        );
        assert!(r.findings[1].message.contains("is a socket"));
        assert!(r.security_issue());

        let r = run(vec![with_mode(added("bin/sh", "#!"), S_IFREG | 0o4755)], &[], &[]);
        assert_eq!(rules(&r), [Rule::SpecialBits]);
        assert_eq!(r.findings[0].message, "bin/sh has the setuid bit (mode 4755): remove it (`chmod ug-s,-t bin/sh`)");
        let r = run(vec![with_mode(added("d/x", ""), S_IFREG | 0o3775)], &[], &[]);
        assert!(r.findings[0].message.contains("has the setgid and sticky bits (mode 3775): remove them"));
        // A file deleted with its bits is fine.
        let gone = with_mode(change("bin/old", ChangeKind::Deleted, Some("x"), None), S_IFREG | 0o4755);
        assert!(run(vec![gone], &[], &[]).findings.is_empty());

        let link = |path: &str, target: &str| with_mode(added(path, target), S_IFLNK | 0o777);
        let r = run(
            vec![link("passwd", "/etc/passwd"), link("a/b/up", "../../../x"), link("a/ok", "../src/x.py")],
            &[],
            &[],
        );
        assert_eq!(rules(&r), [Rule::Symlink, Rule::Symlink]);
        assert_eq!(
            r.findings[0].message,
            "passwd is a symlink to /etc/passwd, which leads outside the project; remove it, or point it with a relative path at a file inside the project"
        );
        assert_eq!(r.findings[1].path.as_deref(), Some("a/b/up"));

        let bad = Change {
            new: None,
            hazard: Some(Hazard::NonUtf8Name(b"src/bad\xff.py".to_vec())),
            ..added("src/bad\\xff.py", "")
        };
        let r = run(vec![bad], &["src/**"], &[]);
        assert_eq!(rules(&r), [Rule::PathName]);
        assert!(
            r.findings[0]
                .message
                .starts_with("the name src/bad\\xff.py is not valid UTF-8 (shown with its bytes escaped)")
        );
        assert!(r.security_issue());
    }

    #[test]
    fn files_and_changes_over_the_limits_are_rejected_with_their_sizes() {
        let big = Change { new: None, hazard: Some(Hazard::Unread { size: 2 << 30 }), ..added("src/big.bin", "") };
        let r = run(vec![big], &[], &[]);
        assert_eq!(rules(&r), [Rule::Limits]);
        assert_eq!(
            r.findings[0].message,
            "src/big.bin is 2 GiB, over the file-size limit of 16 MiB; remove it or make it smaller"
        );
        assert!(r.security_issue());

        let small = Limits { file_size: 10, change_size: 25, transcript: 1 << 20, files: 10_000, ..Limits::DEFAULT };
        let files = vec![
            added("a", "0123456789"),
            added("b", "0123456789"),
            Change { new: None, hazard: Some(Hazard::Unread { size: 9 }), ..added("c", "") },
            added("d", "0123456789x"),
            change("e", ChangeKind::Deleted, Some(&"x".repeat(100)), None),
        ];
        let r = run_input(files, &[], &OwnFiles::default(), small);
        // d is over file-size on its own; a, b and c make 29 bytes.
        assert_eq!(rules(&r), [Rule::Limits, Rule::Limits]);
        assert_eq!(r.findings[0].path.as_deref(), Some("d"));
        assert_eq!(
            r.findings[0].message,
            "d is 11 bytes, over the file-size limit of 10 bytes; remove it or make it smaller"
        );
        assert_eq!(r.findings[1].path, None);
        assert_eq!(
            r.findings[1].message,
            "the change is 29 bytes, over the change-size limit of 25 bytes; make a smaller change"
        );
    }

    #[test]
    fn a_change_over_the_files_limit_is_rejected_with_its_count() {
        let limits = Limits { files: 5, ..Limits::DEFAULT };
        // Empty files and deletions count too.
        let mut files: Vec<Change> = (0..4).map(|i| added(&format!("src/f{i}"), "")).collect();
        files.push(change("src/gone", ChangeKind::Deleted, Some("x"), None));
        let r = run_input(files.clone(), &[], &OwnFiles::default(), limits);
        assert!(!r.rejected(), "5 entries are within `files 5`: {r:?}");
        files.push(added("src/f5", ""));
        let r = run_input(files, &[], &OwnFiles::default(), limits);
        assert_eq!(rules(&r), [Rule::Limits]);
        assert_eq!(r.findings[0].message, "the change has 6 files, over the limit of 5 (limits files)");
        assert!(r.security_issue());
    }

    #[test]
    fn the_first_security_issue_is_the_reason() {
        let r = run(vec![added("notes/x.txt", "x"), added("cassist.kdl", "trust \"full\"")], &["src/**"], &[]);
        assert_eq!(rules(&r), [Rule::OwnFiles, Rule::Scope]);
        assert_eq!(r.first_security_issue().map(|f| f.rule), Some(Rule::OwnFiles));
        assert!(!run(vec![added("notes/x.txt", "x")], &["src/**"], &[]).security_issue());
    }
}
