//! `--report-json FILE`: the run as a JSON document (one object per task:
//! name, state, agent, attempts, cost, duration, changed files, reason).

use serde::Serialize;

use cassist_core::event::{TaskEnd, TaskReport, TaskState};

/// The `--report-json` document.
#[derive(Serialize)]
pub struct RunReport<'a> {
    pub tasks: Vec<&'a TaskReport>,
    pub passed: usize,
    pub failed: usize,
    pub blocked: usize,
    pub cached: usize,
}

impl<'a> RunReport<'a> {
    pub fn new(ends: &'a [TaskEnd]) -> RunReport<'a> {
        let tasks: Vec<&TaskReport> = ends.iter().map(|e| &e.report).collect();
        let count = |s: &[TaskState]| tasks.iter().filter(|t| s.contains(&t.state)).count();
        let (passed, failed) = (count(&[TaskState::Passed]), count(&[TaskState::Failed]));
        let (blocked, cached) = (
            count(&[TaskState::Blocked]),
            count(&[TaskState::UpToDate, TaskState::Replayed, TaskState::Verified, TaskState::Stale]),
        );
        RunReport { tasks, passed, failed, blocked, cached }
    }
}

/// The document for `ends`, pretty-printed.
pub fn render(ends: &[TaskEnd]) -> Vec<u8> {
    serde_json::to_vec_pretty(&RunReport::new(ends)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cassist_core::event::Location;

    #[test]
    fn verified_and_stale_count_as_cached_with_their_own_state() {
        let end = |name: &str, state: TaskState| {
            let mut e = TaskEnd::new(name, "h", "a", Location { file: "tasks/t.kdl".into(), line: 1 });
            e.report.state = state;
            e
        };
        let ends = [
            end("p", TaskState::Passed),
            end("u", TaskState::UpToDate),
            end("r", TaskState::Replayed),
            end("v", TaskState::Verified),
            end("s", TaskState::Stale),
            end("f", TaskState::Failed),
        ];
        let doc: serde_json::Value = serde_json::from_slice(&render(&ends)).unwrap();
        assert_eq!(
            (doc["passed"].as_u64(), doc["cached"].as_u64(), doc["failed"].as_u64()),
            (Some(1), Some(4), Some(1))
        );
        let states: Vec<&str> = doc["tasks"].as_array().unwrap().iter().map(|t| t["state"].as_str().unwrap()).collect();
        assert_eq!(states, ["passed", "up-to-date", "replayed", "verified", "stale", "failed"]);
    }
}
