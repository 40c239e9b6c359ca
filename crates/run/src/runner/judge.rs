//! How an agent run ended, and the review of its change: fine (on to
//! acceptance), or a problem the agent gets another iteration for.

use crate::review::{self, OwnFiles, Review, ReviewInput};
use cassist_core::changes::ChangeSet;
use cassist_core::text::tail_lines;

use super::attempt::Ran;
use super::{FEEDBACK_LIMIT, Failure, TaskContext};

/// An agent's run, judged.
pub enum Judged {
    Fine(ChangeSet),
    Problem {
        reason: String,
        /// What the agent is told in its next iteration.
        feedback: String,
        /// The change it made, when it was reviewed.
        changes: Option<ChangeSet>,
    },
}

/// How the agent ended and what its change looks like: the change, or the
/// reason to go back to the agent and what to tell it.
pub fn judge(task: &mut TaskContext<'_>, attempt: u32, ran: &Ran) -> Result<Judged, Failure> {
    if let Some(problem) = run_problem(ran) {
        return Ok(problem);
    }
    // What changed.
    task.phase("review", attempt, "");
    let changes = match task.read_changes_within_limits()? {
        Ok(changes) => changes,
        // Counted, not read: rejected with its count alone.
        Err(too_many) => {
            let review = Review {
                findings: vec![review::Finding {
                    rule: review::Rule::Limits,
                    severity: review::Severity::Reject,
                    path: None,
                    message: too_many.to_string(),
                }],
            };
            record_review(task, attempt, &review);
            let reason = review_reason(&review, task.read_only());
            return Ok(Judged::Problem { reason, feedback: review.feedback(), changes: None });
        }
    };
    task.set_changed_files(&changes);
    let review = review_changes(task, &changes);
    record_review(task, attempt, &review);
    for w in review.findings.iter().filter(|f| f.severity == review::Severity::Warning) {
        task.note(format!("review: {}", w.message));
    }
    if review.rejected() {
        return Ok(Judged::Problem {
            reason: review_reason(&review, task.read_only()),
            feedback: review.feedback(),
            changes: Some(changes),
        });
    }
    Ok(Judged::Fine(changes))
}

/// Writes attempt `attempt`'s review into the task's record folder.
fn record_review(task: &TaskContext<'_>, attempt: u32, review: &Review) {
    let _ = std::fs::write(
        task.record_dir().join(format!("review-{attempt}.json")),
        serde_json::to_vec_pretty(review).unwrap_or_default(),
    );
}

/// The review of `changes` ([`review::review`]: scope, read-only, new
/// dependencies, secrets, cassist's own files, special files, sizes), and
/// of the values of secret variables written into them.
pub fn review_changes(task: &TaskContext<'_>, changes: &ChangeSet) -> Review {
    review_for(task.runner(), task.task(), changes)
}

/// [`review_changes`] of task `t`, against its spec and the project's
/// config as this run has them (a stored change is reviewed before it has
/// a workspace).
pub fn review_for(runner: &super::Runner, t: &cassist_core::plan::PlannedTask, changes: &ChangeSet) -> Review {
    let plan = &runner.plan;
    let config = &plan.project.config;
    let own_files = OwnFiles {
        task_files: plan.tasks.iter().map(|t| t.task.source.name.clone()).collect(),
        template: config.prompt_template.as_ref().map(|p| p.value.clone()),
        instructions: config.instructions.as_ref().map(|p| p.value.clone()),
    };
    let mut review = review::review(
        changes,
        &ReviewInput {
            scope: &t.key.spec.scope,
            sandbox: t.sandbox,
            kind: t.task.kind,
            constraints: &t.task.constraints,
            project_has_tests: t.task.kind == cassist_core::spec::Kind::Code && tests_near(&plan.project.root, changes),
            own_files: &own_files,
            limits: config.limits,
        },
    );
    // The value of a secret variable of cassist's own environment,
    // written into a file, is a leak whatever its shape.
    let redactor = &runner.redactor;
    for c in &changes.changes {
        let in_name = redactor.contains_secret(c.path.as_bytes());
        let in_content = c.new.as_deref().is_some_and(|b| redactor.contains_secret(b))
            && !c.old.as_deref().is_some_and(|b| redactor.contains_secret(b));
        let messages = [
            (in_name, format!("the name of {} holds the value of a secret environment variable: rename it", c.path)),
            (
                in_content,
                format!(
                    "the value of a secret environment variable was written into {}: remove it and read the value from the environment instead",
                    c.path
                ),
            ),
        ];
        for (_, message) in messages.into_iter().filter(|(found, _)| *found) {
            review.findings.push(review::Finding {
                rule: review::Rule::Secret,
                severity: review::Severity::Reject,
                path: Some(c.path.clone()),
                message,
            });
        }
    }
    // Findings name paths and symlink targets the agent chose: never
    // a secret's value, in the feedback or the records.
    for f in &mut review.findings {
        f.message = redactor.redact(&f.message);
        f.path = f.path.as_deref().map(|p| redactor.redact(p));
    }
    review
}

/// A run that failed, or whose tool calls failed: the problem, before any
/// review.
fn run_problem(ran: &Ran) -> Option<Judged> {
    if ran.finished.success() && ran.soft_failure.is_none() {
        return None;
    }
    let why = match &ran.soft_failure {
        Some(m) if ran.finished.success() => format!("the agent's tool calls failed ({m})"),
        _ => format!("the agent exited with {}", super::failure::ended(&ran.finished)),
    };
    let feedback =
        format!("{why}. The end of its output:\n\n```\n{}\n```\n", tail_lines(&ran.finished.tail, FEEDBACK_LIMIT));
    Some(Judged::Problem { reason: why, feedback, changes: None })
}

fn review_reason(review: &Review, read_only: bool) -> String {
    let security = review.first_security_issue();
    let first = security.or_else(|| review.findings.iter().find(|f| f.severity == review::Severity::Reject));
    let prefix = if security.is_some() {
        "rejected as a security issue"
    } else if read_only {
        "rejected: a read-only task changed files"
    } else {
        "rejected by review"
    };
    match first {
        Some(f) => format!("{prefix}: {}", f.message),
        None => prefix.to_owned(),
    }
}

/// Whether the project has tests where `changes` are: a test file or
/// folder ([`review::looks_like_test_path`]) in one of the folders on the
/// way from the root to a changed path. O(change): those folders are
/// listed, never the whole project.
fn tests_near(root: &std::path::Path, changes: &ChangeSet) -> bool {
    let mut listed = std::collections::HashSet::new();
    for c in &changes.changes {
        for dir in std::path::Path::new(&c.path).ancestors().skip(1) {
            // Its ancestors are listed too.
            if !listed.insert(dir.to_path_buf()) {
                break;
            }
            let Ok(entries) = std::fs::read_dir(root.join(dir)) else { continue };
            for e in entries.flatten() {
                let Some(name) = e.file_name().to_str().map(str::to_owned) else { continue };
                let rel = dir.join(&name).to_string_lossy().into_owned();
                // A folder is a test folder when a file in it would be a test.
                let probe = if e.file_type().is_ok_and(|t| t.is_dir()) { format!("{rel}/_") } else { rel };
                if !cassist_core::paths::is_reserved_name(e.file_name().as_os_str())
                    && review::looks_like_test_path(&probe)
                {
                    return true;
                }
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use cassist_core::changes::{Change, ChangeKind};

    fn added(path: &str) -> ChangeSet {
        let change = Change {
            path: path.into(),
            kind: ChangeKind::Added,
            old: None,
            new: Some(b"x\n".to_vec()),
            mode: 0o100644,
            hazard: None,
            old_mode: None,
            base_unknown: false,
        };
        ChangeSet { changes: vec![change] }
    }

    #[test]
    fn tests_are_looked_for_on_the_way_to_the_change_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for f in ["pkg/a/src/lib.rs", "pkg/a/tests/it.rs", "pkg/b/src/lib.rs", "other/deep/x_test.go", "docs/guide.md"]
        {
            std::fs::create_dir_all(root.join(f).parent().unwrap()).unwrap();
            std::fs::write(root.join(f), "x\n").unwrap();
        }
        // A test folder beside the changed file's folder.
        assert!(tests_near(root, &added("pkg/a/src/lib.rs")));
        assert!(tests_near(root, &added("pkg/a/src/new/mod.rs")));
        // A test file in the same folder.
        assert!(tests_near(root, &added("other/deep/x.go")));
        // None on the way: tests elsewhere in the project are not looked for.
        assert!(!tests_near(root, &added("pkg/b/src/lib.rs")));
        assert!(!tests_near(root, &added("docs/guide.md")));
        std::fs::create_dir_all(root.join("tests")).unwrap();
        assert!(tests_near(root, &added("docs/guide.md")), "a tests/ folder at the root covers everything");
    }
}
