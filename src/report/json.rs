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
