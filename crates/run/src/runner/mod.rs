//! One task, from prompt to an integrated, verified change:
//! workspace → setup → prompt → agent → review → acceptance → (feedback |
//! split) → integrate → build → record.
//!
//! The runner holds no global state: everything it needs comes in a
//! [`Runner`], everything it did goes out as a [`TaskResult`] and events.
//! Each step is a file: [`setup`], [`attempt`] (one agent run, with
//! [`agents`] for the failover chain), [`judge`], [`acceptance`],
//! [`integrate`] (after [`record`]: a passed task is in the store before
//! its change reaches the tree; its change waits as an integration layer
//! for [`flush`], which the scheduler calls when no task runs), with
//! [`jail`] saying what confines each of their commands, and the loops
//! that drive them, [`whole_loop`] and [`split_loop`]; [`replay`] applies
//! a stored change instead, and [`verify`] re-runs the acceptance commands
//! of a task whose recorded change is in the tree, with no agent. They are functions over one task's
//! [`TaskContext`] (whose methods keep what it carries) and fail with a
//! [`Failure`]; the task's report is made from how it went in one place,
//! [`Ending::into_result`].

mod acceptance;
mod agents;
mod attempt;
mod context;
mod failure;
pub mod flush;
mod integrate;
mod jail;
mod judge;
pub mod network;
pub mod record;
mod replay;
mod resources;
mod setup;
mod split_loop;
mod verify;
mod whole_loop;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::workspace::{Mode, Workspace};
use cassist_core::changes::ChangeSet;
use cassist_core::event::{Event, Events, TaskEnd, TaskState};
use cassist_core::lock::LockLine;
use cassist_core::part::Part;
use cassist_core::plan::{Plan, PlannedTask};
use cassist_core::text::truncate_chars;
use cassist_sandbox::process::{Cancel, Redactor};

use context::{Facts, TaskContext};
pub use failure::{CommandError, Failure};
pub use resources::Resources;
pub use verify::Verifications;

/// Summaries of explore/review tasks (the findings their dependents' prompts
/// are given) are cut to this many characters.
pub const SUMMARY_LIMIT: usize = 1000;
/// The `# Review feedback` of the next iteration's prompt (the review's
/// findings, or the failing command's output) is cut to about this many
/// bytes.
pub const FEEDBACK_LIMIT: usize = 4096;

/// What the runner hands back for one task: how it ended, and what the
/// scheduler records of it.
#[derive(Debug)]
pub struct TaskResult {
    pub end: TaskEnd,
    /// Where everything of this task was recorded.
    pub record_dir: Option<PathBuf>,
    /// The change that was integrated.
    pub changes: Option<ChangeSet>,
    /// The parts a split task passed with, in order (recorded, so that it
    /// starts split next time).
    pub split: Vec<Part>,
    /// The task's `cassist.lock` line as its integration wrote it (a
    /// removal when it could not be recorded); a change waiting for the
    /// flush has none yet ([`flush::Flushed`] brings it).
    pub lock_line: Option<LockLine>,
    /// A passed task's store entry was written.
    pub recorded: bool,
    /// `--locked`: the task would need an agent, and why (a stored change
    /// it was to replay was refused).
    pub needs_agent: Option<Vec<String>>,
    /// A verification found the recorded change no longer meets the task
    /// (why, in words): it has not ended, its agent is to run (after its
    /// stale dependencies are refreshed: the scheduler's to decide).
    pub unmet: Option<String>,
}

impl TaskResult {
    pub fn new(end: TaskEnd) -> TaskResult {
        TaskResult {
            end,
            record_dir: None,
            changes: None,
            split: Vec::new(),
            lock_line: None,
            recorded: false,
            needs_agent: None,
            unmet: None,
        }
    }
}

/// What a task whose replay is refused runs with instead: what
/// [`Runner::run_task`] needs.
#[derive(Debug, Clone, Default)]
pub struct Instead {
    /// The findings of its explore/review dependencies.
    pub summaries: Vec<(String, String)>,
    /// The parts it was last split into, if it was.
    pub split: Vec<Part>,
}

/// Everything one task run needs; shared by the tasks running at once.
pub struct Runner {
    pub plan: Arc<Plan>,
    /// The cassist binary (it writes stored changes into a workspace).
    pub exe: PathBuf,
    /// The program that runs the sandbox wrapper
    /// ([`crate::workspace::wrapper_program`]).
    pub wrapper: PathBuf,
    /// Where workspaces are made (outside the project).
    pub workspaces: PathBuf,
    pub mode: Mode,
    /// `.cassist/runs/<id>/`: records of this run.
    pub run_dir: PathBuf,
    pub keep_workspace: bool,
    /// Whether Landlock can be used here (probed once by the caller).
    pub landlock: bool,
    /// Paths in the agents' state folders that stay the user's own, not
    /// copy-on-write (`CASSIST_SHARED_STATE`, canonical).
    pub shared_state: Vec<PathBuf>,
    pub redactor: Arc<Redactor>,
    pub cancel: Cancel,
    pub events: Events,
    /// `--max-cost`: no agent starts once the spend reaches it.
    pub max_cost: Option<f64>,
    /// `--locked`: nothing writes `cassist.lock`.
    pub locked: bool,
    /// What agents reported spending in this run, in micro-dollars.
    pub spent: AtomicU64,
    /// Written while a change is built and lands (one at a time) and while
    /// the flush writes the user's tree; read while the tree is read: a
    /// workspace's start, a task's hash.
    pub integration: std::sync::RwLock<()>,
    /// The changes that passed and wait for the flush, and the layers
    /// workspaces stack meanwhile ([`flush`]).
    pub pending: std::sync::Mutex<flush::Pending>,
    /// The verifications of this run (tasks in state `verify`), each run
    /// once ([`verify`]).
    pub verifications: Verifications,
    /// What each command of a task may reach, and the proxy that lets it
    /// ([`network`]).
    pub egress: Arc<network::Egress>,
    /// The memory and processes each command may use, and the run's
    /// cgroups that bound them.
    pub resources: Resources,
}

/// A task that passed: its state, and what the scheduler records.
struct Done {
    /// [`TaskState::Passed`] or [`TaskState::Replayed`].
    state: TaskState,
    /// The change that was integrated.
    changes: ChangeSet,
    /// The parts a split task passed with.
    split: Vec<Part>,
    /// Its store entry was written (a passed task's).
    recorded: bool,
}

/// How a task went: what it did, how it ended, and its workspace (kept for
/// inspection after a failure, when asked).
struct Ending {
    facts: Facts,
    outcome: Result<Done, Failure>,
    workspace: Option<Workspace>,
}

impl Ending {
    /// A task that failed before it had a workspace.
    fn early(facts: Facts, failure: Failure) -> Ending {
        Ending { facts, outcome: Err(failure), workspace: None }
    }

    /// The one place a task's result is made: `base` (the task as
    /// planned) with what it did and how it ended. `keep_workspace` is
    /// `--keep-workspace`.
    fn into_result(self, base: TaskEnd, keep_workspace: bool) -> TaskResult {
        let Ending { facts, outcome, workspace } = self;
        let mut end = base;
        let report = &mut end.report;
        if let Some(agent) = facts.agent {
            report.agent = agent;
        }
        report.attempts = facts.attempts;
        report.cost_usd = facts.cost_usd;
        report.changed_files = facts.changed_files;
        report.acceptance = facts.acceptance;
        report.summary = facts.summary;
        report.subtasks = facts.subtasks;
        end.transcript = facts.transcript;
        match outcome {
            Ok(done) => {
                if let Some(ws) = workspace {
                    ws.remove_in_background();
                }
                end.report.state = done.state;
                end.report.reason = facts.nothing_integrated;
                TaskResult {
                    end,
                    record_dir: None,
                    changes: Some(done.changes),
                    split: done.split,
                    lock_line: None,
                    recorded: done.recorded,
                    needs_agent: None,
                    unmet: None,
                }
            }
            Err(f) => {
                end.report.state = f.state;
                // Whatever was running when Ctrl-C came, the task ends
                // for that.
                end.report.reason = Some(if f.interrupted { failure::INTERRUPTED.to_owned() } else { f.reason });
                end.tail = f.tail;
                end.interrupted = f.interrupted;
                if let Some(mut ws) = workspace {
                    if (keep_workspace || f.keep_workspace) && !f.interrupted {
                        // Without its tree (it could not be written), the
                        // workspace's own folder.
                        end.kept_workspace = Some(ws.keep().unwrap_or_else(|_| ws.base().to_path_buf()));
                    } else {
                        ws.remove_in_background();
                    }
                }
                TaskResult::new(end)
            }
        }
    }
}

/// A `code` task in a project without trust would run read-only and
/// could change nothing: it fails at once, before its agent is called,
/// naming the line that lets agents change files (`trust` in `cassist.kdl`:
/// the highest sandbox level tasks may use; a project without one runs
/// every task read-only).
fn untrusted_code_task(t: &PlannedTask, config: &cassist_core::spec::ProjectConfig) -> Option<Failure> {
    (t.kind() == cassist_core::spec::Kind::Code && config.trust.is_none()).then(|| {
        Failure::failed(
            "this project sets no trust, so this `code` task could only run read-only and change nothing; \
             its agent was not started. Add `trust \"workspace-write\"` to cassist.kdl to let agents change files",
        )
    })
}

impl Runner {
    /// What agents reported spending so far in this run.
    pub fn spent_usd(&self) -> f64 {
        self.spent.load(Ordering::SeqCst) as f64 / 1e6
    }

    /// Whether `--max-cost` forbids starting another agent.
    pub fn budget_reached(&self) -> bool {
        self.max_cost.is_some_and(|max| self.spent_usd() >= max)
    }

    /// No agent starts once `--max-cost` is reached.
    fn check_budget(&self) -> Result<(), Failure> {
        if !self.budget_reached() {
            return Ok(());
        }
        Err(Failure::failed(format!(
            "--max-cost reached: agents reported ${:.2} of ${:.2}; no further agent run was started",
            self.spent_usd(),
            self.max_cost.unwrap_or_default()
        )))
    }

    /// Runs a command of a task through its sandbox wrapper (started with
    /// [`cassist_sandbox::sandbox::WRAPPER_ENV`]). A wrapper that could not set the
    /// sandbox up makes the next run probe again. A command that failed
    /// after it went past a limit of `limits` (its cgroup's counters say)
    /// is [`CommandError::OverLimit`]; its cgroup is removed either way.
    fn run(&self, cmd: &cassist_sandbox::process::Command) -> Result<cassist_sandbox::process::Finished, CommandError> {
        let mut cmd = cmd.clone();
        let (k, v) = cassist_sandbox::sandbox::WRAPPER_ENV;
        cmd.env.push((k.into(), v.into()));
        // How much of its output its transcript keeps (`limits { transcript
        // }` of cassist.kdl: head and tail, the middle cut with a marker).
        cmd.transcript_limit = self.plan.project.config.limits.transcript;
        let f = cassist_sandbox::process::run(&cmd, &self.redactor, &self.cancel)?;
        let exceeded = self.resources.finish(f.pid);
        if exceeded.any() && !f.success() && f.outcome != cassist_sandbox::process::Outcome::Cancelled {
            return Err(CommandError::OverLimit(Box::new(self.resources.over_limit(exceeded, f.tail))));
        }
        if self.mode == Mode::Overlay
            && f.outcome == cassist_sandbox::process::Outcome::Exited(cassist_sandbox::sandbox::SETUP_FAILED)
            && f.tail.contains("cassist: ")
        {
            crate::workspace::forget_probe(&self.plan.project.root);
        }
        Ok(f)
    }

    fn event(&self, e: Event<'_>) {
        (self.events)(e)
    }

    fn phase(&self, task: &str, phase: &'static str, attempt: u32, detail: impl Into<String>) {
        self.event(Event::Phase { task, phase, attempt, detail: detail.into() });
    }

    /// Runs one task. `summaries` are the findings of its explore/review
    /// dependencies; `recorded_split` the parts it was last split into, if
    /// it was (it then starts split).
    pub fn run_task(&self, t: &PlannedTask, summaries: &[(String, String)], recorded_split: &[Part]) -> TaskResult {
        self.recorded(t, Facts::default(), |record, facts| {
            let project = &self.plan.project;
            if let Some(f) = untrusted_code_task(t, &project.config) {
                return Ending::early(facts, f);
            }
            // The agent: the first of its candidates that is installed.
            let agents = match agents::resolve(&project.config, &project.root, &t.agent) {
                Ok(agents) => agents,
                Err(f) => return Ending::early(facts, f),
            };
            let ws = match self.create_workspace(t) {
                Ok(ws) => ws,
                Err(f) => return Ending::early(facts, f),
            };
            let mut task = TaskContext::new(self, t, record, ws, agents, facts);
            let outcome = whole_loop::run(&mut task, summaries, recorded_split);
            let (facts, ws) = task.into_parts();
            Ending { facts, outcome, workspace: Some(ws) }
        })
    }

    /// Replays a recorded change (a task in state `replay`: its inputs are
    /// a stored run's, its change is not in the tree): no agent; the stored
    /// change is checked and reviewed, merged in a fresh workspace,
    /// reviewed again, accepted, and integrated ([`replay`]). A change
    /// refused at any step is never the task's failure: one warning says
    /// why and the agent runs instead, with `instead`; under `--locked`
    /// the task is refused (it would need an agent).
    pub fn replay_task(&self, t: &PlannedTask, entry: &cassist_core::store::Entry, instead: &Instead) -> TaskResult {
        if let Err(refused) = replay::vet(self, t, entry) {
            return self.instead_of_replay(t, refused, instead);
        }
        let facts = Facts { agent: Some(entry.agent.clone()), summary: entry.summary.clone(), ..Facts::default() };
        let mut refused = None;
        let result = self.recorded(t, facts, |record, facts| {
            let ws = match self.create_workspace(t) {
                Ok(ws) => ws,
                Err(f) => return Ending::early(facts, f),
            };
            let mut task = TaskContext::new(self, t, record, ws, Vec::new(), facts);
            let outcome = match replay::replay(&mut task, entry) {
                Ok(Ok(changes)) => Ok(Done { state: TaskState::Replayed, changes, split: Vec::new(), recorded: false }),
                Ok(Err(r)) => {
                    let failure = Failure::failed(r.0.clone());
                    refused = Some(r);
                    Err(failure)
                }
                Err(f) => Err(f),
            };
            // A replay's workspace is never kept: it goes with the task.
            let (facts, _ws) = task.into_parts();
            Ending { facts, outcome, workspace: None }
        });
        match refused {
            Some(refused) => self.instead_of_replay(t, refused, instead),
            None => result,
        }
    }

    /// A replay that was refused: the agent runs instead, after one
    /// warning naming the task and why; under `--locked`, which starts no
    /// agent, the task is refused as one that needs an agent.
    fn instead_of_replay(&self, t: &PlannedTask, refused: replay::Refused, instead: &Instead) -> TaskResult {
        let name = &t.task.name;
        let why = self.redactor.redact(&refused.0);
        if self.locked {
            let mut r = TaskResult::new(t.skipped(format!("--locked: an agent would be needed ({why})")));
            r.needs_agent = Some(vec![why]);
            return r;
        }
        cassist_core::errln!("warning: task `{name}`: {why}; running the agent instead");
        self.run_task(t, &instead.summaries, &instead.split)
    }

    /// Runs `body` with the task's record folder, timed; the report goes
    /// into the folder as `report.json`.
    fn recorded(&self, t: &PlannedTask, facts: Facts, body: impl FnOnce(&Path, Facts) -> Ending) -> TaskResult {
        let start = Instant::now();
        let record = self.run_dir.join(&t.task.name);
        if let Err(e) = std::fs::create_dir_all(&record) {
            let failure = Failure::failed(format!("cannot create {}: {e}", record.display()));
            return Ending::early(facts, failure).into_result(t.end(), self.keep_workspace);
        }
        let mut result = body(&record, facts).into_result(t.end(), self.keep_workspace);
        result.record_dir = Some(record.clone());
        let report = &mut result.end.report;
        report.duration_ms = start.elapsed().as_millis() as u64;
        // Paths are the agent's choice: a file named after a secret is
        // rejected, and its name reported redacted.
        redact_paths(&self.redactor, &mut report.changed_files, &mut report.subtasks);
        if let Some(s) = &report.summary {
            report.summary = Some(truncate_chars(s, SUMMARY_LIMIT));
        }
        if let Ok(json) = serde_json::to_vec_pretty(report) {
            // A record for the user, like the prompt and transcript beside
            // it: replaced at once (never seen half written), but not
            // flushed to disk, which would hold the task's end up for a
            // disk round trip; nothing cassist decides depends on it.
            let _ = cassist_core::fsx::write_cache(&record.join("report.json"), &json);
        }
        result
    }

    /// The task's workspace, made while no change is being integrated.
    fn create_workspace(&self, t: &PlannedTask) -> Result<Workspace, Failure> {
        let name = t.task.name.as_str();
        self.phase(name, "workspace", 0, self.mode.as_str());
        let _no_integration = self.integration.read().unwrap_or_else(|e| e.into_inner());
        let cannot = |e: crate::workspace::Error| Failure::failed(format!("cannot create the workspace: {e}"));
        // What passed and is not in the tree yet is in its view; nothing
        // that lands later is.
        let (stack, view) = self.view();
        let mut ws =
            Workspace::create_over(&self.wrapper, &self.plan.project.root, &self.workspaces, self.mode, name, stack)
                .map_err(cannot)?;
        ws.view = view;
        ws.limits = self.plan.project.config.limits;
        // What the scope names is part of the change even when ignored.
        ws.name_literally(crate::review::Scope::new(&t.key.spec.scope).literals()).map_err(cannot)?;
        // The base the change is merged against, whatever the user edits
        // while the task runs.
        ws.keep_start(&t.key.spec.scope).map_err(cannot)?;
        Ok(ws)
    }
}

/// Redacts the changed files of a report and of its subtasks.
fn redact_paths(redactor: &Redactor, files: &mut [String], subtasks: &mut [cassist_core::event::SubtaskReport]) {
    for f in files.iter_mut() {
        *f = redactor.redact(f);
    }
    for s in subtasks {
        redact_paths(redactor, &mut s.changed_files, &mut s.subtasks);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cassist_core::event::{AcceptanceReport, Location};

    fn base() -> TaskEnd {
        TaskEnd::new("fix", "h1", "claude", Location { file: "tasks/fix.kdl".into(), line: 3 })
    }

    fn facts() -> Facts {
        Facts {
            agent: Some("codex".into()),
            attempts: 2,
            cost_usd: Some(0.5),
            transcript: Some(PathBuf::from("/r/transcript-2.log")),
            changed_files: vec!["a.py".into()],
            acceptance: vec![AcceptanceReport { command: "make test".into(), exit_code: Some(1), passed: false }],
            summary: Some("tried".into()),
            subtasks: Vec::new(),
            nothing_integrated: None,
        }
    }

    #[test]
    fn a_failure_becomes_the_tasks_state_reason_and_tail() {
        let failure = Failure::blocked("too large").with_tail("Killed\n").keeping_workspace();
        let r = Ending::early(facts(), failure).into_result(base(), true);
        let end = &r.end;
        assert_eq!((end.report.state, end.report.reason.as_deref()), (TaskState::Blocked, Some("too large")));
        assert_eq!((end.tail.as_str(), end.interrupted, &end.kept_workspace), ("Killed\n", false, &None));
        // What the task did is reported whatever way it ended.
        assert_eq!((end.report.agent.as_str(), end.report.attempts, end.report.cost_usd), ("codex", 2, Some(0.5)));
        assert_eq!(end.report.changed_files, ["a.py"]);
        assert_eq!(end.report.acceptance.len(), 1);
        assert_eq!(end.report.summary.as_deref(), Some("tried"));
        assert_eq!(end.transcript.as_deref(), Some(Path::new("/r/transcript-2.log")));
        assert_eq!((end.report.name.as_str(), end.location.line), ("fix", 3));
        assert!(r.changes.is_none() && r.split.is_empty() && r.record_dir.is_none());

        let r = Ending::early(Facts::default(), Failure::interrupted()).into_result(base(), true);
        assert_eq!((r.end.report.state, r.end.interrupted), (TaskState::Failed, true));
        // No agent ran: the planned one is reported.
        assert_eq!((r.end.report.agent.as_str(), r.end.report.attempts), ("claude", 0));
    }

    #[test]
    fn a_task_that_passed_hands_over_its_change_and_parts() {
        let done = Done {
            state: TaskState::Passed,
            changes: ChangeSet::default(),
            split: vec![Part::whole()],
            recorded: false,
        };
        let r = Ending { facts: facts(), outcome: Ok(done), workspace: None }.into_result(base(), true);
        assert_eq!((r.end.report.state, r.end.report.reason.as_deref()), (TaskState::Passed, None));
        assert_eq!((r.end.tail.as_str(), r.end.interrupted), ("", false));
        assert!(r.changes.is_some());
        assert_eq!(r.split, [Part::whole()]);

        // A task that passed with nothing to integrate says why.
        let why = "not integrated, ignored by .gitignore: out.log";
        let facts = Facts { nothing_integrated: Some(why.into()), ..facts() };
        let done = Done { state: TaskState::Passed, changes: ChangeSet::default(), split: Vec::new(), recorded: false };
        let r = Ending { facts, outcome: Ok(done), workspace: None }.into_result(base(), true);
        assert_eq!((r.end.report.state, r.end.report.reason.as_deref()), (TaskState::Passed, Some(why)));
    }
}
