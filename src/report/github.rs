//! On GitHub Actions (`GITHUB_ACTIONS=true`), failed tasks are also printed
//! as workflow commands, `::error file=…,line=…,title=…::message`, which
//! GitHub shows on the task's KDL node in the pull request's diff.

use cassist_core::event::TaskEnd;

/// Whether this run is on GitHub Actions.
pub fn active() -> bool {
    std::env::var("GITHUB_ACTIONS").is_ok_and(|v| v == "true")
}

/// On GitHub Actions, prints the [`annotations`] of `ends` to stdout.
pub fn print(ends: &[TaskEnd], root: &std::path::Path) {
    if active() {
        for line in annotations(ends, root) {
            cassist_core::outln!("{line}");
        }
    }
}

/// A task file's path as GitHub wants it: relative to the checkout
/// (`GITHUB_WORKSPACE`), which the project root may be below.
fn repo_path(root: &std::path::Path, file: &str) -> String {
    let abs = root.join(file);
    std::env::var_os("GITHUB_WORKSPACE")
        .map(std::path::PathBuf::from)
        .and_then(|ws| {
            let ws = ws.canonicalize().unwrap_or(ws);
            abs.strip_prefix(&ws).ok().map(|p| p.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| file.to_owned())
}

/// One `::error` line per failed or blocked task; `root` is the project's.
pub fn annotations(ends: &[TaskEnd], root: &std::path::Path) -> Vec<String> {
    ends.iter()
        .filter(|e| e.state().is_failure())
        .map(|end| {
            let r = &end.report;
            let title = format!("cassist: task {} {}", r.name, r.state.as_str());
            // What an agent wrote: GitHub's log obeys colour and other
            // escape sequences.
            let mut message =
                cassist_core::text::printable(r.reason.as_deref().unwrap_or(r.state.as_str())).into_owned();
            if let Some(t) = &end.transcript {
                message.push_str(&format!("\ntranscript: {}", t.display()));
            }
            format!(
                "::error file={},line={},title={}::{}",
                property(&repo_path(root, &end.location.file)),
                end.location.line,
                property(&title),
                data(&message)
            )
        })
        .collect()
}

/// Escaping of a command's message (GitHub's `escapeData`).
fn data(s: &str) -> String {
    s.replace('%', "%25").replace('\r', "%0D").replace('\n', "%0A")
}

/// Escaping of a command's property (GitHub's `escapeProperty`).
fn property(s: &str) -> String {
    data(s).replace(':', "%3A").replace(',', "%2C")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_like_the_actions_toolkit() {
        assert_eq!(data("50%\nnext\r"), "50%25%0Anext%0D");
        assert_eq!(property("a:b,c"), "a%3Ab%2Cc");
    }

    #[test]
    fn only_failed_and_blocked_tasks_are_annotated() {
        use cassist_core::event::TaskState;
        let ends: Vec<TaskEnd> = [
            TaskState::Passed,
            TaskState::UpToDate,
            TaskState::Replayed,
            TaskState::Verified,
            TaskState::Stale,
            TaskState::Skipped,
            TaskState::Failed,
        ]
        .into_iter()
        .map(|state| {
            let location = cassist_core::event::Location { file: "tasks/t.kdl".into(), line: 1 };
            let mut end = TaskEnd::new(state.as_str(), "hash", "a", location);
            end.report.state = state;
            end
        })
        .collect();
        let lines = annotations(&ends, std::path::Path::new("/nowhere"));
        assert_eq!(lines, ["::error file=tasks/t.kdl,line=1,title=cassist%3A task failed failed::failed"]);
    }

    #[test]
    fn an_agents_reason_cannot_drive_the_log() {
        let location = cassist_core::event::Location { file: "tasks/t.kdl".into(), line: 3 };
        let mut end = TaskEnd::new("t", "hash", "a", location);
        end.report.state = cassist_core::event::TaskState::Blocked;
        end.report.reason = Some("stuck \u{1b}[2J\u{1b}]0;title\u{7}\r\n::warning::forged".into());
        let lines = annotations(&[end], std::path::Path::new("/nowhere"));
        assert_eq!(
            lines,
            [
                "::error file=tasks/t.kdl,line=3,title=cassist%3A task t blocked::stuck \\x1b[2J\\x1b]0;title\\x07%0A::warning::forged"
            ]
        );
    }
}
