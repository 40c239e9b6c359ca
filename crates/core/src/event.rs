//! What a run tells the outside world: the state a task ended in, the
//! report of each finished task (its entry in the `--report-json` file, and
//! what the terminal and CI outputs add to it), and the progress events of
//! tasks that are running.
//!
//! A leaf: it imports nothing of the crate. The runner and the scheduler
//! make these values; the reporter only receives them.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;

/// How a task ended: the `state` of its `--report-json` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskState {
    Passed,
    UpToDate,
    Replayed,
    /// Its recorded change was re-verified by its acceptance commands on
    /// the tree as it is (no agent): up to date.
    Verified,
    /// An explore/review task whose files changed: its recorded findings
    /// stand.
    Stale,
    Failed,
    Blocked,
    Skipped,
}

impl TaskState {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Passed => "passed",
            TaskState::UpToDate => "up-to-date",
            TaskState::Replayed => "replayed",
            TaskState::Verified => "verified",
            TaskState::Stale => "stale",
            TaskState::Failed => "failed",
            TaskState::Blocked => "blocked",
            TaskState::Skipped => "skipped",
        }
    }

    pub fn is_success(self) -> bool {
        matches!(
            self,
            TaskState::Passed | TaskState::UpToDate | TaskState::Replayed | TaskState::Verified | TaskState::Stale
        )
    }

    /// Failed or blocked: the task makes the run fail.
    pub fn is_failure(self) -> bool {
        matches!(self, TaskState::Failed | TaskState::Blocked)
    }
}

/// One acceptance command in the report.
#[derive(Debug, Clone, Serialize)]
pub struct AcceptanceReport {
    pub command: String,
    pub exit_code: Option<i32>,
    pub passed: bool,
}

/// How a part of a split task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PartState {
    /// Done, and its change passed review.
    Passed,
    /// Killed or timed out, and replaced by smaller parts.
    Split,
    Failed,
    /// Still killed after the last round.
    Blocked,
    /// Not reached.
    Skipped,
}

impl PartState {
    pub fn as_str(self) -> &'static str {
        match self {
            PartState::Passed => "passed",
            PartState::Split => "split",
            PartState::Failed => "failed",
            PartState::Blocked => "blocked",
            PartState::Skipped => "skipped",
        }
    }
}

/// One subtask in the report (an item of a task's `subtasks`): the parts
/// it was split into, if it was, are its own `subtasks`.
#[derive(Debug, Clone, Serialize)]
pub struct SubtaskReport {
    pub name: String,
    /// `CASSIST_PART`.
    pub part: String,
    pub round: u32,
    pub state: PartState,
    pub attempts: u32,
    pub duration_ms: u64,
    pub timeout_ms: u64,
    pub changed_files: Vec<String>,
    pub reason: Option<String>,
    pub summary: Option<String>,
    pub cost_usd: Option<f64>,
    pub subtasks: Vec<SubtaskReport>,
}

/// What happened to one task: exactly its entry in the `--report-json`
/// file.
#[derive(Debug, Clone, Serialize)]
pub struct TaskReport {
    pub name: String,
    pub state: TaskState,
    pub hash: String,
    pub agent: String,
    pub attempts: u32,
    pub duration_ms: u64,
    pub changed_files: Vec<String>,
    pub acceptance: Vec<AcceptanceReport>,
    /// The parts of a task that was split (an oversized task is cut into
    /// parts rather than retried whole), as a tree.
    pub subtasks: Vec<SubtaskReport>,
    pub reason: Option<String>,
    pub summary: Option<String>,
    pub cost_usd: Option<f64>,
}

/// Where a task is written: its task file and the line of its node (for
/// CI annotations and JUnit).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Location {
    pub file: String,
    pub line: usize,
}

/// A finished task as the reporter receives it: its report, and what the
/// terminal summary, JUnit and CI annotations show besides.
#[derive(Debug, Clone)]
pub struct TaskEnd {
    pub report: TaskReport,
    pub location: Location,
    /// The tail of the failing output.
    pub tail: String,
    /// Where the transcript of the last agent run is.
    pub transcript: Option<PathBuf>,
    /// A workspace kept for inspection.
    pub kept_workspace: Option<PathBuf>,
    /// Ended by Ctrl-C.
    pub interrupted: bool,
    /// Not run because `--locked` refused it: it needs an agent. `skipped`
    /// in the report (no state of its own there), a failure in JUnit: the
    /// run fails.
    pub refused: bool,
    /// A replay of an entry fetched from the remote cache: shown
    /// `replayed (remote)` (the JSON state stays `replayed`).
    pub remote: bool,
    /// The model the agent was told to use (`None`: the CLI's default);
    /// shown in the summary table (not a field of the `--report-json`
    /// entry).
    pub model: Option<String>,
}

impl TaskEnd {
    /// A task that has not run (yet): `skipped`, nothing done.
    pub fn new(name: &str, hash: &str, agent: &str, location: Location) -> TaskEnd {
        TaskEnd {
            report: TaskReport {
                name: name.to_owned(),
                state: TaskState::Skipped,
                hash: hash.to_owned(),
                agent: agent.to_owned(),
                attempts: 0,
                duration_ms: 0,
                changed_files: Vec::new(),
                acceptance: Vec::new(),
                subtasks: Vec::new(),
                reason: None,
                summary: None,
                cost_usd: None,
            },
            location,
            tail: String::new(),
            transcript: None,
            kept_workspace: None,
            interrupted: false,
            refused: false,
            remote: false,
            model: None,
        }
    }

    /// The same task ended in `state` for `reason`.
    pub fn ended(mut self, state: TaskState, reason: impl Into<String>) -> TaskEnd {
        self.report.state = state;
        self.report.reason = Some(reason.into());
        self
    }

    pub fn name(&self) -> &str {
        &self.report.name
    }

    pub fn state(&self) -> TaskState {
        self.report.state
    }

    /// The state people read: `interrupted` for a task Ctrl-C stopped
    /// (`failed` in the report), else the state.
    pub fn shown_state(&self) -> &'static str {
        match self.report.state {
            s if self.interrupted && s.is_failure() => "interrupted",
            TaskState::Replayed if self.remote => "replayed (remote)",
            s => s.as_str(),
        }
    }
}

/// Progress of a task, for the reporter.
#[derive(Debug, Clone)]
pub enum Event<'a> {
    Phase {
        task: &'a str,
        phase: &'static str,
        attempt: u32,
        detail: String,
    },
    Note {
        task: &'a str,
        message: String,
    },
    /// An agent run reported what it cost.
    Cost {
        task: &'a str,
        usd: f64,
    },
}

/// Where the runner's events go (the reporter, through a channel).
pub type Events = Arc<dyn Fn(Event<'_>) + Send + Sync>;
