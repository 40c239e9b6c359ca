//! One task, from prompt to an integrated, verified change (SPEC 3):
//! workspace → setup → prompt → agent → review → acceptance → (feedback) →
//! integrate → build → record.
//!
//! The runner holds no global state: everything it needs comes in a
//! [`Runner`], everything it did goes out as a [`TaskResult`] and events.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::accept::{self, AcceptanceResult};
use crate::agent::adapter::{AdapterInput, ErrorKind, READ_ONLY_TURN_CAP, read_tail};
use crate::agent::invoke::{self, Invocation, Placeholders};
use crate::changes::{ChangeSet, unified_diff};
use crate::event::{AcceptanceReport, Event, Events, PartState, TaskEnd, TaskState};
use crate::plan::{Plan, PlannedTask};
use crate::process::{self, Cancel, Outcome, Redactor};
use crate::review::{self, Review, ReviewInput};
use crate::spec::Kind;
use crate::split::{self, Part};
use crate::text::{tail_lines, truncate_chars};
use crate::workspace::{IntegrateError, Mode, Workspace};

/// Summaries of explore/review tasks are cut to this length (SPEC 1).
pub const SUMMARY_LIMIT: usize = 1000;
/// Feedback to the agent is cut to about this many bytes (SPEC 3.7).
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
    /// Keep the workspace for inspection whatever `--keep-workspace` says.
    keep_workspace: bool,
}

impl TaskResult {
    pub fn new(end: TaskEnd) -> TaskResult {
        TaskResult { end, record_dir: None, changes: None, split: Vec::new(), keep_workspace: false }
    }
}

/// Everything one task run needs; shared by the tasks running at once.
pub struct Runner {
    pub plan: std::sync::Arc<Plan>,
    /// The cassist binary (it runs the workspace wrapper).
    pub exe: PathBuf,
    /// Where workspaces are made (outside the project).
    pub workspaces: PathBuf,
    pub mode: Mode,
    /// `.cassist/runs/<id>/`: records of this run.
    pub run_dir: PathBuf,
    pub keep_workspace: bool,
    /// Whether Landlock can be used here (probed once by the caller).
    pub landlock: bool,
    pub redactor: std::sync::Arc<Redactor>,
    pub cancel: Cancel,
    pub events: Events,
    /// `--max-cost`: no agent starts once the spend reaches it.
    pub max_cost: Option<f64>,
    /// What agents reported spending in this run, in micro-dollars.
    pub spent: std::sync::atomic::AtomicU64,
    /// Written while a change goes into the user's tree (one at a time);
    /// read while the tree is read whole: a workspace's starting state, a
    /// task's hash.
    pub integration: std::sync::RwLock<()>,
}

/// What a task runs: its agent, resolved.
struct Agent {
    inv: Invocation,
}

/// What one agent run came to.
enum Step {
    /// It ran to its end, successfully or not.
    Ran(Ran),
    /// The same prompt goes to the next agent of the chain.
    Again,
    /// Killed or timed out: too large for one run (SPEC 3.8).
    Oversized(Oversized),
}

struct Ran {
    finished: process::Finished,
    /// Refused or failed tool calls of a CLI that exited 0.
    soft_failure: Option<String>,
    /// The agent wrote a result report.
    reported: bool,
    summary: Option<String>,
    cost_usd: Option<f64>,
}

struct Oversized {
    /// `killed` or `timed out`.
    what: &'static str,
    elapsed: Duration,
    /// The outcome in words (`killed by signal 9 (SIGKILL)`).
    detail: String,
    tail: String,
    cost_usd: Option<f64>,
}

/// An agent's run, judged: its change is fine (on to acceptance), or the
/// agent gets another iteration with feedback.
enum Judged {
    Fine(ChangeSet),
    Problem { reason: String, feedback: String, changes: Option<ChangeSet> },
}

/// Appends the `# Review feedback` section.
fn push_feedback(prompt: &mut String, feedback: Option<&str>) {
    if let Some(f) = feedback {
        prompt.push_str("\n# Review feedback\n");
        prompt.push_str(f);
        if !prompt.ends_with('\n') {
            prompt.push('\n');
        }
    }
}

/// Each changed path with a hash of what it holds now (or of its removal),
/// to tell what one part of a split task changed.
fn fingerprint(changes: &ChangeSet) -> std::collections::BTreeMap<String, blake3::Hash> {
    changes
        .changes
        .iter()
        .map(|c| {
            let mut h = blake3::Hasher::new();
            h.update(format!("{:?}{:?}", c.kind, c.mode).as_bytes());
            if let Some(b) = &c.new {
                h.update(b);
            }
            (c.path.clone(), h.finalize())
        })
        .collect()
}

/// A failed acceptance command in iteration `iteration`: the feedback for
/// the next, or, after the last, the task fails with the reason.
fn acceptance_failed(f: &AcceptanceResult, iteration: u32, max: u32, report: &mut TaskResult) -> Result<String, ()> {
    if iteration < max {
        return Ok(accept::feedback(f, FEEDBACK_LIMIT));
    }
    let why = match (f.timed_out, f.exit_code) {
        (true, _) => "timed out".to_owned(),
        (false, Some(c)) => format!("exit code {c}"),
        (false, None) => "killed".to_owned(),
    };
    report.end.report.state = TaskState::Failed;
    report.end.report.reason = Some(format!(
        "acceptance command `{}` failed ({why}) after {iteration} iteration{}",
        f.command,
        if iteration == 1 { "" } else { "s" }
    ));
    report.end.tail = f.tail.clone();
    Err(())
}

impl Runner {
    /// What agents reported spending so far in this run.
    pub fn spent_usd(&self) -> f64 {
        self.spent.load(std::sync::atomic::Ordering::SeqCst) as f64 / 1e6
    }

    /// Whether `--max-cost` forbids starting another agent.
    pub fn budget_reached(&self) -> bool {
        self.max_cost.is_some_and(|max| self.spent_usd() >= max)
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
        self.recorded(t, TaskResult::new(t.end()), |record, report| {
            self.run_in(t, summaries, recorded_split, record, report)
        })
    }

    /// Runs `body` with the task's record folder, timed; the report goes
    /// into the folder as `report.json`.
    fn recorded(
        &self,
        t: &PlannedTask,
        mut report: TaskResult,
        body: impl FnOnce(&Path, &mut TaskResult),
    ) -> TaskResult {
        let start = Instant::now();
        let record = self.run_dir.join(&t.task.name);
        if let Err(e) = std::fs::create_dir_all(&record) {
            report.end.report.state = TaskState::Failed;
            report.end.report.reason = Some(format!("cannot create {}: {e}", record.display()));
            return report;
        }
        report.record_dir = Some(record.clone());
        body(&record, &mut report);
        report.end.report.duration_ms = start.elapsed().as_millis() as u64;
        if let Some(s) = &report.end.report.summary {
            report.end.report.summary = Some(truncate_chars(s, SUMMARY_LIMIT));
        }
        if let Ok(json) = serde_json::to_vec_pretty(&report.end.report) {
            let _ = crate::store::write_atomic(&record.join("report.json"), &json);
        }
        report
    }

    fn run_in(
        &self,
        t: &PlannedTask,
        summaries: &[(String, String)],
        recorded_split: &[Part],
        record: &Path,
        report: &mut TaskResult,
    ) {
        let project = &self.plan.project;
        let name = t.task.name.as_str();

        // The agent: the first of its candidates that is installed.
        let mut candidates: Vec<Agent> = Vec::new();
        let mut missing: Vec<String> = Vec::new();
        for cand in invoke::candidates(&project.config, &t.agent) {
            match invoke::invocation(&project.config, &cand) {
                Some(inv) if invoke::locate(&inv, &project.root, None).is_some() => candidates.push(Agent { inv }),
                Some(inv) => missing.push(describe_missing(&cand, &inv)),
                None => missing.push(format!("`{cand}` is not an agent")),
            }
        }
        if candidates.is_empty() {
            report.end.report.state = TaskState::Failed;
            report.end.report.reason = Some(format!(
                "sub-agent unavailable: {}; install it, or choose another agent with `agent` in the task, --agent or CASSIST_AGENT (`cassist agents` lists them)",
                missing.join("; ")
            ));
            return;
        }

        // The workspace.
        self.phase(name, "workspace", 0, self.mode.as_str());
        let created = {
            let _no_integration = self.integration.read().unwrap_or_else(|e| e.into_inner());
            Workspace::create(&self.exe, &project.root, &self.workspaces, self.mode, name)
        };
        let mut ws = match created {
            Ok(ws) => ws,
            Err(e) => {
                report.end.report.state = TaskState::Failed;
                report.end.report.reason = Some(format!("cannot create the workspace: {e}"));
                return;
            }
        };
        let mut tree = None;
        let outcome = self.run_agent_loop(t, summaries, recorded_split, record, report, &mut ws, candidates, &mut tree);
        if let Some(tree) = tree.as_mut() {
            // A part that ended the task (a reported failure, Ctrl-C,
            // --max-cost, an agent error) says so.
            if let Some(i) = tree.current.take()
                && !report.end.report.state.is_success()
            {
                let node = &mut tree.nodes[i].report;
                if !matches!(node.state, PartState::Blocked | PartState::Split) {
                    node.state = if report.end.report.state == TaskState::Blocked {
                        PartState::Blocked
                    } else {
                        PartState::Failed
                    };
                    node.reason = report.end.report.reason.clone();
                }
            }
            report.end.report.subtasks = tree.reports();
        }
        if (outcome.is_err() || !report.end.report.state.is_success())
            && (self.keep_workspace || report.keep_workspace)
            && !report.end.interrupted
        {
            report.end.kept_workspace = Some(ws.keep());
        }
    }

    /// The iterations of one task inside its workspace; fills `report`.
    #[allow(clippy::too_many_arguments)]
    fn run_agent_loop(
        &self,
        t: &PlannedTask,
        summaries: &[(String, String)],
        recorded_split: &[Part],
        record: &Path,
        report: &mut TaskResult,
        ws: &mut Workspace,
        mut candidates: Vec<Agent>,
        tree: &mut Option<split::Tree>,
    ) -> Result<(), ()> {
        let project = &self.plan.project;
        let name = t.task.name.as_str();
        let base_env = invoke::environment(&[], &[]);

        // Setup commands.
        for cmd in &project.config.setup {
            self.phase(name, "setup", 0, cmd.clone());
            let r = self.shell(ws, cmd, &base_env, Some(accept::DEFAULT_TIMEOUT), &record.join("setup.log"));
            match r {
                Ok(f) if f.success() => {}
                Ok(f) => {
                    report.end.report.state = TaskState::Failed;
                    report.end.report.reason = Some(format!("setup command `{cmd}` failed: {}", f.describe()));
                    report.end.tail = f.tail;
                    report.end.interrupted = f.outcome == Outcome::Cancelled;
                    return Err(());
                }
                Err(e) => {
                    report.end.report.state = TaskState::Failed;
                    report.end.report.reason = Some(format!("setup command `{cmd}` could not run: {e}"));
                    return Err(());
                }
            }
        }

        // Standing instructions, under the name the agent reads.
        if let Some(instr) = &project.config.instructions {
            let file = instructions_name(&candidates[0].inv.name);
            if !project.root.join(file).exists()
                && let Ok(bytes) = std::fs::read(project.root.join(&instr.value))
            {
                let _ = ws.place(file, &bytes);
            }
        }

        let base_prompt = self.plan.render_prompt(t, summaries);
        let read_only = t.task.kind.is_read_only() || t.sandbox == crate::spec::SandboxLevel::ReadOnly;
        // What a split makes parts of, and the split this task needed last
        // time, if any: it starts split instead of being killed again.
        let files = split::files(t, &project.root);
        *tree = split::from_recorded(recorded_split, &files, t.task.kind).map(|first| {
            let tree = split::Tree::new(first, name, t.timeout);
            self.event(Event::Note {
                task: name,
                message: format!(
                    "this task needed splitting last time: it starts split into {} part(s)",
                    tree.queue.len()
                ),
            });
            tree
        });

        let mut feedback: Option<String> = None;
        // Split: feedback for the part at `pos` only, and the position in
        // the queue of parts.
        let mut part_feedback: Option<String> = None;
        let mut pos: usize = 0;
        let mut resumed = false;
        let mut iteration: u32 = 1;
        let last_changes: ChangeSet = loop {
            if self.cancel.is_cancelled() {
                report.end.report.state = TaskState::Failed;
                report.end.report.reason = Some("interrupted".into());
                report.end.interrupted = true;
                return Err(());
            }
            let attempt = report.end.report.attempts + 1;

            // ---- split: the parts, one after another, then acceptance.
            if let Some(tree) = tree.as_mut() {
                if pos < tree.queue.len() {
                    let idx = tree.queue[pos];
                    let part = tree.nodes[idx].part.clone();
                    let leaves = tree.leaves();
                    let context = split::context_for(&part, t, &files);
                    let mut prompt = split::with_section(
                        &self.plan.render_prompt_with(t, summaries, &context),
                        &split::section(&part, name, t.task.kind, pos, &leaves),
                    );
                    push_feedback(&mut prompt, part_feedback.as_deref().or(feedback.as_deref()));
                    let before = ws.changes().map(|c| fingerprint(&c)).unwrap_or_default();
                    let timeout = part.timeout(t.timeout);
                    let part_attempt = tree.nodes[idx].next_attempt();
                    tree.current = Some(idx);
                    let started = Instant::now();
                    let step =
                        self.agent_step(t, record, ws, &mut candidates, &prompt, &part, part_attempt, timeout, report);
                    let node = &mut tree.nodes[idx].report;
                    node.duration_ms += started.elapsed().as_millis() as u64;
                    let ran = match step? {
                        Step::Again => continue,
                        Step::Oversized(o) => {
                            node.attempts += 1;
                            if let Some(c) = o.cost_usd {
                                node.cost_usd = Some(node.cost_usd.unwrap_or(0.0) + c);
                            }
                            node.state = PartState::Split;
                            node.reason = Some(format!("agent {} after {}", o.what, split::seconds(o.elapsed)));
                            if part.round >= split::MAX_ROUNDS {
                                node.state = PartState::Blocked;
                                report.end.report.state = TaskState::Blocked;
                                report.end.report.reason = Some(format!(
                                    "split {} times; agent still {} on {} after {}",
                                    split::MAX_ROUNDS,
                                    o.what,
                                    part.describe(),
                                    split::seconds(o.elapsed)
                                ));
                                report.end.tail = o.tail;
                                report.keep_workspace = true;
                                return Err(());
                            }
                            let children = part.children(&files, t.task.kind);
                            let n = children.len();
                            let next = children[0].timeout(t.timeout);
                            tree.split(pos, children, name, t.timeout);
                            part_feedback = None;
                            self.phase(
                                name,
                                "split",
                                attempt,
                                format!(
                                    "{} {} ({}): {n} part(s), round {} of {}, timeout {}",
                                    part.describe(),
                                    o.what,
                                    o.detail,
                                    part.round + 1,
                                    split::MAX_ROUNDS,
                                    process::human_duration(next)
                                ),
                            );
                            continue;
                        }
                        Step::Ran(r) => r,
                    };
                    node.attempts += 1;
                    node.summary = ran.summary.clone();
                    if let Some(c) = ran.cost_usd {
                        node.cost_usd = Some(node.cost_usd.unwrap_or(0.0) + c);
                    }
                    let outcome = match self.judge(t, ws, record, attempt, &ran, report) {
                        Ok(o) => o,
                        Err(()) => return Err(()),
                    };
                    let (changes, problem) = match outcome {
                        Judged::Fine(changes) => (Some(changes), None),
                        Judged::Problem { reason, feedback, changes } => (changes, Some((reason, feedback))),
                    };
                    let node = &mut tree.nodes[idx].report;
                    if let Some(c) = &changes {
                        let after = fingerprint(c);
                        node.changed_files = after
                            .iter()
                            .filter(|(p, h)| before.get(*p) != Some(*h))
                            .map(|(p, _)| p.clone())
                            .chain(before.keys().filter(|p| !after.contains_key(*p)).cloned())
                            .collect();
                        node.changed_files.sort();
                    }
                    if let Some((reason, fb)) = problem {
                        node.state = PartState::Failed;
                        node.reason = Some(reason.clone());
                        if iteration >= t.max_iterations {
                            report.end.report.state = TaskState::Failed;
                            report.end.report.reason = Some(format!("{}: {reason}", part.name(name)));
                            report.end.tail = ran.finished.tail;
                            return Err(());
                        }
                        part_feedback = Some(fb);
                        iteration += 1;
                        continue;
                    }
                    node.state = PartState::Passed;
                    node.reason = None;
                    tree.current = None;
                    part_feedback = None;
                    pos += 1;
                    continue;
                }
                // Every part is done: the whole task's acceptance.
                report.end.report.summary = Some(
                    tree.queue
                        .iter()
                        .filter_map(|&i| {
                            let n = &tree.nodes[i];
                            n.report.summary.as_ref().map(|s| format!("{}: {}", n.part.label(), s.trim()))
                        })
                        .collect::<Vec<_>>()
                        .join("\n"),
                )
                .filter(|s| !s.is_empty());
                let changes = match self.read_changes(ws, report) {
                    Ok(c) => c,
                    Err(()) => return Err(()),
                };
                match self.acceptance(t, ws, record, report.end.report.attempts, read_only, &base_env, report)? {
                    None => break changes,
                    Some(f) => {
                        // Every part again, each told what failed.
                        feedback = Some(acceptance_failed(&f, iteration, t.max_iterations, report)?);
                        part_feedback = None;
                        pos = 0;
                        iteration += 1;
                        continue;
                    }
                }
            }

            // ---- the whole task in one prompt.
            let mut prompt = base_prompt.clone();
            push_feedback(&mut prompt, feedback.as_deref());
            let whole = Part::whole();
            let ran =
                match self.agent_step(t, record, ws, &mut candidates, &prompt, &whole, attempt, t.timeout, report)? {
                    Step::Again => continue,
                    Step::Oversized(o) => {
                        // Not retried as is: split.
                        let first: Vec<(Part, Vec<Part>)> =
                            whole.children(&files, t.task.kind).into_iter().map(|p| (p, Vec::new())).collect();
                        let next = first[0].0.timeout(t.timeout);
                        let new = split::Tree::new(first, name, t.timeout);
                        self.phase(
                            name,
                            "split",
                            attempt,
                            format!(
                                "agent {} ({}): {} part(s), round 1 of {}, timeout {}",
                                o.what,
                                o.detail,
                                new.queue.len(),
                                split::MAX_ROUNDS,
                                process::human_duration(next)
                            ),
                        );
                        *tree = Some(new);
                        pos = 0;
                        continue;
                    }
                    Step::Ran(r) => r,
                };
            report.end.report.summary = ran.summary.clone();
            let changes = match self.judge(t, ws, record, attempt, &ran, report)? {
                Judged::Fine(changes) => changes,
                Judged::Problem { reason, feedback: fb, .. } => {
                    if iteration >= t.max_iterations {
                        report.end.report.state = TaskState::Failed;
                        report.end.report.reason = Some(reason);
                        report.end.tail = ran.finished.tail;
                        return Err(());
                    }
                    feedback = Some(fb);
                    iteration += 1;
                    continue;
                }
            };
            if changes.is_empty() && !ran.reported && t.task.kind == Kind::Code && !resumed {
                resumed = true;
                feedback = Some(
                    "You stopped without changing any file and without a report. Continue the task: make the change, or report why it cannot be done.".into(),
                );
                self.event(Event::Note { task: name, message: "the agent changed nothing; resuming it once".into() });
                continue;
            }

            // Acceptance, then the project tests.
            if let Some(f) = self.acceptance(t, ws, record, attempt, read_only, &base_env, report)? {
                feedback = Some(acceptance_failed(&f, iteration, t.max_iterations, report)?);
                iteration += 1;
                continue;
            }
            break changes;
        };

        if let Some(tree) = tree.as_ref() {
            report.split = tree.leaves();
        }
        self.integrate_and_build(t, ws, &last_changes, record, &base_env, report)?;
        report.changes = Some(last_changes);
        report.end.report.state = TaskState::Passed;
        Ok(())
    }

    /// One agent run with `prompt`. `part` is what it is (the whole task,
    /// or a part of a split one) and `part_attempt` its attempt number.
    #[allow(clippy::too_many_arguments)]
    fn agent_step(
        &self,
        t: &PlannedTask,
        record: &Path,
        ws: &Workspace,
        candidates: &mut Vec<Agent>,
        prompt: &str,
        part: &Part,
        part_attempt: u32,
        timeout: Duration,
        report: &mut TaskResult,
    ) -> Result<Step, ()> {
        let name = t.task.name.as_str();
        let attempt = report.end.report.attempts + 1;
        if self.budget_reached() {
            report.end.report.state = TaskState::Failed;
            report.end.report.reason = Some(format!(
                "--max-cost reached: agents reported ${:.2} of ${:.2}; no further agent run was started",
                self.spent_usd(),
                self.max_cost.unwrap_or_default()
            ));
            return Err(());
        }
        let io = match ws.io_dir() {
            Ok(d) => d,
            Err(e) => {
                report.end.report.state = TaskState::Failed;
                report.end.report.reason = Some(format!("cannot prepare the workspace: {e}"));
                return Err(());
            }
        };
        let prompt_file = io.join(format!("prompt-{attempt}.md"));
        let result_file = io.join(format!("result-{attempt}.json"));
        let transcript = record.join(format!("transcript-{attempt}.log"));
        let _ = std::fs::remove_file(&result_file);
        if let Err(e) = std::fs::write(&prompt_file, prompt) {
            report.end.report.state = TaskState::Failed;
            report.end.report.reason = Some(format!("cannot write the prompt: {e}"));
            return Err(());
        }
        let _ = std::fs::write(record.join(format!("prompt-{attempt}.md")), self.redactor.redact(prompt));

        let agent = &candidates[0];
        report.end.report.agent = agent.inv.name.clone();
        let subtask = part.name(name);
        let detail =
            if part.is_whole() { agent.inv.name.clone() } else { format!("{}, part {}", agent.inv.name, part.label()) };
        self.phase(name, "agent", attempt, detail);
        let writable = self.writable_paths(t.sandbox, &ws.dir, &io, &agent.inv);
        // A built-in adapter maps the sandbox level, the kind, the turn
        // cap and the budget onto its CLI's own flags.
        let base_argv = match agent.inv.builtin {
            Some(b) => b.argv(&AdapterInput {
                sandbox: t.sandbox,
                read_only_kind: t.task.kind.is_read_only(),
                max_turns: t.task.kind.is_read_only().then_some(READ_ONLY_TURN_CAP),
                max_cost: t.max_cost,
                prompt_file: &prompt_file,
                workdir: &ws.dir,
                io_dir: &io,
                // Under Landlock no sandbox of the agent's own can be
                // set up (Landlock refuses mount(2), and the uid map
                // is not writable): Codex's bubblewrap fails there, so
                // Landlock alone enforces the level.
                userns: writable.is_none() && (self.mode == Mode::Overlay || crate::sandbox::userns_available()),
            }),
            None => agent.inv.argv.clone(),
        };
        if agent.inv.builtin == Some(crate::agent::Builtin::Codex)
            && t.sandbox != crate::spec::SandboxLevel::Full
            && base_argv.iter().any(|a| a == "danger-full-access")
        {
            self.event(Event::Note {
                task: name,
                message: if writable.is_some() {
                    format!(
                        "codex's own sandbox cannot start inside cassist's Landlock sandbox: Landlock enforces `{}` (codex runs with danger-full-access)",
                        t.sandbox
                    )
                } else {
                    format!(
                        "no user namespaces here for codex's own sandbox: `{}` rests on the review of the change (codex runs with danger-full-access)",
                        t.sandbox
                    )
                },
            });
        }
        let argv = invoke::fill_argv(
            &base_argv,
            &Placeholders { prompt, prompt_file: &prompt_file, workdir: &ws.dir, task: &subtask },
        );
        let mut extra: Vec<(String, OsString)> = vec![
            ("CASSIST_TASK".into(), subtask.clone().into()),
            ("CASSIST_ATTEMPT".into(), part_attempt.to_string().into()),
            ("CASSIST_PART".into(), part.env().into()),
            ("CASSIST_PROMPT_FILE".into(), prompt_file.clone().into()),
            ("CASSIST_RESULT_FILE".into(), result_file.clone().into()),
        ];
        if let Some(b) = agent.inv.builtin {
            extra.extend(b.extra_env().into_iter().map(|(k, v)| (k, OsString::from(v))));
        }
        // A private temp folder, inside the agent's writable io folder.
        let tmp = io.join("tmp");
        if std::fs::create_dir_all(&tmp).is_ok() {
            extra.push(("TMPDIR".into(), tmp.into()));
        }
        let env = invoke::environment(&agent.inv.pass_env, &extra);
        let finished = match ws.wrap_sandboxed(argv, writable).and_then(|argv| {
            let mut cmd = process::Command::new(argv, ws.dir.clone());
            cmd.env = env;
            cmd.stdin = agent.inv.stdin_prompt.then(|| prompt.to_owned().into_bytes());
            cmd.timeout = Some(timeout);
            cmd.transcript = Some(transcript.clone());
            process::run(&cmd, &self.redactor, &self.cancel)
        }) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound || e.kind() == std::io::ErrorKind::PermissionDenied => {
                // Copy mode starts the agent directly: it failed to
                // start, so the next agent of the chain, if any.
                return self.next_candidate(name, candidates, &e.to_string(), report);
            }
            Err(e) => {
                report.end.report.state = TaskState::Failed;
                report.end.report.reason = Some(format!("cannot start agent `{}`: {e}", agent.inv.name));
                return Err(());
            }
        };
        if finished.outcome == Outcome::Exited(crate::sandbox::NOT_FOUND)
            && finished.tail.contains("cassist: cannot run")
        {
            // It failed to start: the next agent of the chain, if any.
            return self.next_candidate(name, candidates, finished.tail.trim(), report);
        }
        report.end.report.attempts += 1;
        report.end.transcript = Some(transcript.clone());
        let _ = std::fs::copy(&result_file, record.join(format!("result-{attempt}.json")));

        // What the CLI's machine-readable output says, and what the run
        // cost: counted for a killed run too.
        let parsed = agent.inv.builtin.map(|b| b.parse(&read_tail(&transcript, 4 << 20), finished.outcome, &io));
        let mut cost_usd = None;
        // Any agent may report its cost in its result file; a built-in
        // CLI's own output, when it says, takes precedence.
        let reported_cost = parsed.as_ref().and_then(|p| p.cost_usd).or_else(|| result_cost(&result_file));
        if let Some(c) = reported_cost {
            report.end.report.cost_usd = Some(report.end.report.cost_usd.unwrap_or(0.0) + c);
            cost_usd = Some(c);
            self.spent.fetch_add((c.max(0.0) * 1e6).round() as u64, std::sync::atomic::Ordering::SeqCst);
            self.event(Event::Cost { task: name, usd: c });
        }
        let oversized = |what: &'static str| {
            Ok(Step::Oversized(Oversized {
                what,
                elapsed: finished.duration,
                detail: finished.describe(),
                tail: finished.tail.clone(),
                cost_usd,
            }))
        };
        match finished.outcome {
            Outcome::Cancelled => {
                report.end.report.state = TaskState::Failed;
                report.end.report.reason = Some("interrupted".into());
                report.end.interrupted = true;
                return Err(());
            }
            Outcome::TimedOut => return oversized("timed out"),
            Outcome::Signaled(9) | Outcome::Exited(137) => return oversized("killed"),
            Outcome::Exited(c) if c != 0 && finished.killed_by_oom_hint => return oversized("killed"),
            _ => {}
        }

        if let Some(p) = &parsed {
            let _ = std::fs::write(
                record.join(format!("agent-{attempt}.json")),
                self.redactor.redact(&serde_json::to_string_pretty(p).unwrap_or_default()),
            );
            if let Some(err) = &p.error {
                let message = self.redactor.redact(&err.message);
                let agent_name = agent.inv.name.clone();
                match err.kind {
                    ErrorKind::RateLimited | ErrorKind::Overloaded if candidates.len() > 1 => {
                        let gone = candidates.remove(0);
                        self.event(Event::Note {
                            task: name,
                            message: format!(
                                "`{}` is {}; trying `{}`",
                                gone.inv.name,
                                if err.kind == ErrorKind::RateLimited { "rate limited" } else { "overloaded" },
                                candidates[0].inv.name
                            ),
                        });
                        return Ok(Step::Again);
                    }
                    ErrorKind::RateLimited
                    | ErrorKind::Overloaded
                    | ErrorKind::Auth
                    | ErrorKind::BudgetExceeded
                    | ErrorKind::TurnCap => {
                        report.end.report.state = TaskState::Failed;
                        report.end.report.reason = Some(agent_error_reason(&agent_name, err.kind, &message));
                        report.end.tail = finished.tail;
                        return Err(());
                    }
                    ErrorKind::PermissionDenied | ErrorKind::ToolFailed | ErrorKind::Other => {}
                }
            }
        }

        // The agent's own report.
        let agent_report = read_result_file(&result_file);
        if let Some(Err(reason)) = &agent_report {
            report.end.report.state = TaskState::Blocked;
            report.end.report.reason = Some(if part.is_whole() {
                format!("the agent reported that it cannot do the task: {reason}")
            } else {
                format!("the agent reported that it cannot do {} of the task: {reason}", part.describe())
            });
            return Err(());
        }
        let summary = match &agent_report {
            Some(Ok(Some(s))) => Some(s.clone()),
            _ => parsed.as_ref().and_then(|p| p.summary.clone()).or_else(|| last_message(&finished.tail)),
        };
        // A CLI that exits 0 after refused or failed tool calls failed.
        let soft_failure = parsed
            .as_ref()
            .and_then(|p| p.error.as_ref())
            .filter(|e| matches!(e.kind, ErrorKind::PermissionDenied | ErrorKind::ToolFailed))
            .map(|e| self.redactor.redact(&e.message));
        Ok(Step::Ran(Ran {
            finished,
            soft_failure,
            reported: agent_report.is_some(),
            summary: summary.map(|s| self.redactor.redact(&s)),
            cost_usd,
        }))
    }

    /// The agent of the chain that could not start is dropped: the next is
    /// tried, or the task fails when none is left.
    fn next_candidate(
        &self,
        task: &str,
        candidates: &mut Vec<Agent>,
        why: &str,
        report: &mut TaskResult,
    ) -> Result<Step, ()> {
        let gone = candidates.remove(0);
        if candidates.is_empty() {
            report.end.report.state = TaskState::Failed;
            report.end.report.reason = Some(format!(
                "sub-agent unavailable: `{}` could not be started ({why}); install it or choose another agent",
                gone.inv.name
            ));
            return Err(());
        }
        self.event(Event::Note {
            task,
            message: format!("`{}` could not start; trying `{}`", gone.inv.name, candidates[0].inv.name),
        });
        Ok(Step::Again)
    }

    /// The workspace's change so far.
    fn read_changes(&self, ws: &mut Workspace, report: &mut TaskResult) -> Result<ChangeSet, ()> {
        ws.changes().map_err(|e| {
            report.end.report.state = TaskState::Failed;
            report.end.report.reason = Some(format!("cannot read the workspace's changes: {e}"));
        })
    }

    /// How the agent ended and what its change looks like: the change, or
    /// the reason to go back to the agent and what to tell it.
    fn judge(
        &self,
        t: &PlannedTask,
        ws: &mut Workspace,
        record: &Path,
        attempt: u32,
        ran: &Ran,
        report: &mut TaskResult,
    ) -> Result<Judged, ()> {
        let name = t.task.name.as_str();
        if !ran.finished.success() || ran.soft_failure.is_some() {
            let why = match &ran.soft_failure {
                Some(m) if ran.finished.success() => format!("the agent's tool calls failed ({m})"),
                _ => format!("the agent exited with {}", ran.finished.describe()),
            };
            let feedback = format!(
                "{why}. The end of its output:\n\n```\n{}\n```\n",
                tail_lines(&ran.finished.tail, FEEDBACK_LIMIT)
            );
            return Ok(Judged::Problem { reason: why, feedback, changes: None });
        }

        // What changed.
        self.phase(name, "review", attempt, "");
        let changes = self.read_changes(ws, report)?;
        report.end.report.changed_files = changes.paths().iter().map(|s| (*s).to_owned()).collect();
        let project = &self.plan.project;
        let mut review = review::review(
            &changes,
            &ReviewInput {
                scope: &t.key.spec.scope,
                sandbox: t.sandbox,
                kind: t.task.kind,
                constraints: &t.task.constraints,
                project_has_tests: project_has_tests(&project.root),
            },
        );
        // The value of a secret variable of cassist's own environment,
        // written into a file, is a leak whatever its shape.
        for c in &changes.changes {
            if c.new.as_deref().is_some_and(|b| self.redactor.contains_secret(b))
                && !c.old.as_deref().is_some_and(|b| self.redactor.contains_secret(b))
            {
                review.findings.push(review::Finding {
                    rule: review::Rule::Secret,
                    severity: review::Severity::Reject,
                    path: Some(c.path.clone()),
                    message: format!(
                        "the value of a secret environment variable was written into {}: remove it and read the value from the environment instead",
                        c.path
                    ),
                });
            }
        }
        let _ = std::fs::write(
            record.join(format!("review-{attempt}.json")),
            serde_json::to_vec_pretty(&review).unwrap_or_default(),
        );
        for w in review.findings.iter().filter(|f| f.severity == review::Severity::Warning) {
            self.event(Event::Note { task: name, message: format!("review: {}", w.message) });
        }
        if review.rejected() {
            let read_only = t.task.kind.is_read_only() || t.sandbox == crate::spec::SandboxLevel::ReadOnly;
            return Ok(Judged::Problem {
                reason: review_reason(&review, read_only),
                feedback: review.feedback(),
                changes: Some(changes),
            });
        }
        Ok(Judged::Fine(changes))
    }

    /// Runs the acceptance commands, then the project tests (not for
    /// read-only tasks), in the workspace; fills `report.end.report.acceptance`.
    /// `Ok(Some(result))` names the first that failed.
    #[allow(clippy::too_many_arguments)]
    fn acceptance(
        &self,
        t: &PlannedTask,
        ws: &Workspace,
        record: &Path,
        attempt: u32,
        read_only: bool,
        base_env: &[(OsString, OsString)],
        report: &mut TaskResult,
    ) -> Result<Option<AcceptanceResult>, ()> {
        let name = t.task.name.as_str();
        let tests = self.plan.project.test_commands();
        let mut results: Vec<AcceptanceResult> = Vec::new();
        let mut failed: Option<AcceptanceResult> = None;
        let commands: Vec<(String, Option<Duration>)> = t
            .task
            .acceptance
            .iter()
            .map(|a| (a.run.value.clone(), a.timeout))
            .chain(if read_only { Vec::new() } else { tests.iter().map(|c| (c.clone(), None)).collect() })
            .collect();
        for (k, (cmd, timeout)) in commands.iter().enumerate() {
            self.phase(name, "acceptance", attempt, cmd.clone());
            let log = record.join(format!("acceptance-{attempt}-{}.log", k + 1));
            let begun = Instant::now();
            let f = match self.shell(ws, cmd, base_env, Some(timeout.unwrap_or(accept::DEFAULT_TIMEOUT)), &log) {
                Ok(f) => f,
                Err(e) => {
                    report.end.report.state = TaskState::Failed;
                    report.end.report.reason = Some(format!("acceptance command `{cmd}` could not run: {e}"));
                    return Err(());
                }
            };
            if f.outcome == Outcome::Cancelled {
                report.end.report.state = TaskState::Failed;
                report.end.report.reason = Some("interrupted".into());
                report.end.interrupted = true;
                return Err(());
            }
            let result = AcceptanceResult {
                command: cmd.clone(),
                exit_code: match f.outcome {
                    Outcome::Exited(c) => Some(c),
                    _ => None,
                },
                passed: f.success(),
                duration_ms: begun.elapsed().as_millis() as u64,
                counts: accept::parse_counts(&f.tail),
                timed_out: f.outcome == Outcome::TimedOut,
                tail: f.tail.clone(),
            };
            let ok = result.passed;
            results.push(result.clone());
            if !ok {
                failed = Some(result);
                break;
            }
        }
        report.end.report.acceptance = results
            .iter()
            .map(|r| AcceptanceReport { command: r.command.clone(), exit_code: r.exit_code, passed: r.passed })
            .collect();
        let _ = std::fs::write(
            record.join(format!("acceptance-{attempt}.json")),
            serde_json::to_vec_pretty(&results).unwrap_or_default(),
        );
        Ok(failed)
    }

    /// Records the patch, integrates it into the user's tree and runs the
    /// `build` commands there (taking the change back out if one fails).
    fn integrate_and_build(
        &self,
        t: &PlannedTask,
        ws: &mut Workspace,
        changes: &ChangeSet,
        record: &Path,
        base_env: &[(OsString, OsString)],
        report: &mut TaskResult,
    ) -> Result<(), ()> {
        let project = &self.plan.project;
        let name = t.task.name.as_str();
        let diff = unified_diff(changes);
        let _ = std::fs::write(record.join("patch.diff"), self.redactor.redact(&diff));
        if changes.is_empty() {
            return Ok(());
        }
        // One change at a time goes into the user's tree.
        let _one_at_a_time = self.integration.write().unwrap_or_else(|e| e.into_inner());
        self.phase(name, "integrate", report.end.report.attempts, format!("{} file(s)", changes.changes.len()));
        let integrated = match ws.integrate(changes) {
            Ok(i) => i,
            Err(IntegrateError::Conflict(files)) => {
                report.end.report.state = TaskState::Failed;
                report.end.report.reason = Some(format!(
                    "conflict: {} changed in the project while the task ran; nothing was integrated (the patch is in {})",
                    files.join(", "),
                    record.join("patch.diff").display()
                ));
                return Err(());
            }
            Err(e) => {
                report.end.report.state = TaskState::Failed;
                report.end.report.reason = Some(format!("{e}; nothing was integrated"));
                return Err(());
            }
        };
        for cmd in &project.config.build {
            self.phase(name, "build", report.end.report.attempts, cmd.clone());
            let argv: Vec<OsString> = vec!["sh".into(), "-c".into(), cmd.into()];
            let mut c = process::Command::new(argv, project.root.clone());
            c.env = base_env.to_vec();
            c.transcript = Some(record.join("build.log"));
            c.timeout = Some(accept::DEFAULT_TIMEOUT);
            let ok = process::run(&c, &self.redactor, &self.cancel);
            let failed = match &ok {
                Ok(f) if f.success() => None,
                Ok(f) => Some((f.describe(), f.tail.clone())),
                Err(e) => Some((e.to_string(), String::new())),
            };
            if let Some((why, tail)) = failed {
                crate::workspace::rollback(&project.root, &integrated);
                report.end.report.state = TaskState::Failed;
                report.end.report.reason = Some(format!(
                    "build command `{cmd}` failed after integration ({why}); the change was taken back out"
                ));
                report.end.tail = tail;
                return Err(());
            }
        }
        Ok(())
    }

    /// Replays a recorded change (SPEC 4 `replay`): no agent; the stored
    /// patch is applied in a fresh workspace, acceptance is verified, and
    /// the change is integrated.
    pub fn replay_task(&self, t: &PlannedTask, entry: &crate::store::Entry) -> TaskResult {
        let mut report = TaskResult::new(t.end());
        report.end.report.agent = entry.agent.clone();
        report.end.report.summary = entry.summary.clone();
        self.recorded(t, report, |record, report| {
            if self.replay_in(t, entry, record, report).is_ok() {
                report.end.report.state = TaskState::Replayed;
            }
        })
    }

    fn replay_in(
        &self,
        t: &PlannedTask,
        entry: &crate::store::Entry,
        record: &Path,
        report: &mut TaskResult,
    ) -> Result<(), ()> {
        let record = record.to_path_buf();
        let name = t.task.name.as_str();
        self.phase(name, "workspace", 0, self.mode.as_str());
        let created = {
            let _no_integration = self.integration.read().unwrap_or_else(|e| e.into_inner());
            Workspace::create(&self.exe, &self.plan.project.root, &self.workspaces, self.mode, name)
        };
        let mut ws = created.map_err(|e| {
            report.end.report.state = TaskState::Failed;
            report.end.report.reason = Some(format!("cannot create the workspace: {e}"));
        })?;
        self.phase(name, "replay", 0, format!("{} file(s)", entry.changes.len()));
        let base_env = invoke::environment(&[], &[]);
        // The stored change is written inside the workspace (a helper
        // run through the wrapper, so deletions are real there too).
        let cannot = |report: &mut TaskResult, e: std::io::Error| {
            report.end.report.state = TaskState::Failed;
            report.end.report.reason = Some(format!("cannot replay the stored change: {e}"));
            Err(())
        };
        let spec = match ws.io_dir() {
            Ok(d) => d.join("replay.json"),
            Err(e) => return cannot(report, e),
        };
        let doc = serde_json::json!({"store": self.plan.store.dir(), "changes": entry.changes});
        if let Err(e) = std::fs::write(&spec, serde_json::to_vec(&doc).unwrap_or_default()) {
            return cannot(report, e);
        }
        let argv =
            match ws.wrap(vec![self.exe.clone().into_os_string(), "__apply-changes".into(), spec.into_os_string()]) {
                Ok(a) => a,
                Err(e) => return cannot(report, e),
            };
        let mut c = process::Command::new(argv, ws.dir.clone());
        c.env = base_env.clone();
        c.transcript = Some(record.join("replay.log"));
        match process::run(&c, &self.redactor, &self.cancel) {
            Ok(f) if f.success() => {}
            Ok(f) => {
                report.end.report.state = TaskState::Failed;
                report.end.report.reason = Some(format!("cannot replay the stored change: {}", f.describe()));
                report.end.tail = f.tail;
                return Err(());
            }
            Err(e) => {
                report.end.report.state = TaskState::Failed;
                report.end.report.reason = Some(format!("cannot replay the stored change: {e}"));
                return Err(());
            }
        }
        let changes = ws.changes().map_err(|e| {
            report.end.report.state = TaskState::Failed;
            report.end.report.reason = Some(format!("cannot read the workspace's changes: {e}"));
        })?;
        report.end.report.changed_files = changes.paths().iter().map(|s| (*s).to_owned()).collect();
        let read_only = t.task.kind.is_read_only() || t.sandbox == crate::spec::SandboxLevel::ReadOnly;
        if let Some(f) = self.acceptance(t, &ws, &record, 1, read_only, &base_env, report)? {
            report.end.report.state = TaskState::Failed;
            report.end.report.reason = Some(format!(
                "the replayed change no longer passes: acceptance command `{}` failed; run with --no-cache to call the agent",
                f.command
            ));
            report.end.tail = f.tail;
            return Err(());
        }
        self.integrate_and_build(t, &mut ws, &changes, &record, &base_env, report)?;
        report.changes = Some(changes);
        Ok(())
    }

    /// What the agent may write under Landlock (`None`: no Landlock, for
    /// `full` or where the kernel lacks it): its workspace unless read-only,
    /// its prompt/result folder, temp folders, `/dev`, and the agent's own
    /// state folders (created first: a rule needs an existing path).
    fn writable_paths(
        &self,
        level: crate::spec::SandboxLevel,
        workspace: &Path,
        io: &Path,
        inv: &Invocation,
    ) -> Option<Vec<PathBuf>> {
        if level == crate::spec::SandboxLevel::Full || !self.landlock {
            return None;
        }
        let root = &self.plan.project.root;
        let mut paths = vec![io.to_path_buf(), PathBuf::from("/dev")];
        // Temp folders, unless the user's project is inside one and is
        // reachable (copy mode), or a read-only agent's workspace is inside
        // one (a copy under /tmp, or a project under /tmp in overlay mode):
        // then only the agent's private temp folder (its TMPDIR, inside `io`).
        let mut temps = vec![PathBuf::from("/tmp"), PathBuf::from("/var/tmp"), PathBuf::from("/dev/shm")];
        if let Some(t) = std::env::var_os("TMPDIR") {
            temps.push(PathBuf::from(t));
        }
        let ws_real = workspace.canonicalize().unwrap_or_else(|_| workspace.to_path_buf());
        for t in temps {
            let t = t.canonicalize().unwrap_or(t);
            let holds_read_only_workspace = level == crate::spec::SandboxLevel::ReadOnly && ws_real.starts_with(&t);
            if (self.mode == Mode::Overlay || !root.starts_with(&t)) && !holds_read_only_workspace {
                paths.push(t);
            }
        }
        if level == crate::spec::SandboxLevel::WorkspaceWrite {
            paths.push(workspace.to_path_buf());
        }
        for var in ["CODEX_HOME", "CLAUDE_CONFIG_DIR"] {
            if inv.pass_env.iter().any(|v| v == var)
                && let Some(p) = std::env::var_os(var).map(PathBuf::from)
                && !p.starts_with(root)
            {
                paths.push(p);
            }
        }
        if inv.name == "claude"
            && let Some(f) = crate::agent::adapter::home_path(".claude.json")
            && f.exists()
        {
            paths.push(f);
        }
        if let Some(home) = std::env::var_os("HOME").map(PathBuf::from) {
            for rel in crate::agent::state_dirs(&inv.name) {
                let p = home.join(rel);
                // Never make folders in the user's project (a HOME inside
                // it), nor for agents that do not need them.
                if !p.exists() && crate::agent::BUILTIN_AGENTS.contains(&inv.name.as_str()) && !p.starts_with(root) {
                    let _ = std::fs::create_dir_all(&p);
                }
                if !p.starts_with(root) || self.mode == Mode::Overlay {
                    paths.push(p);
                }
            }
        }
        paths.retain(|p| p.exists());
        Some(paths)
    }

    /// `sh -c cmd` inside the workspace.
    fn shell(
        &self,
        ws: &Workspace,
        cmd: &str,
        env: &[(OsString, OsString)],
        timeout: Option<Duration>,
        log: &Path,
    ) -> std::io::Result<process::Finished> {
        let argv = ws.wrap(vec!["sh".into(), "-c".into(), cmd.into()])?;
        let mut c = process::Command::new(argv, ws.dir.clone());
        c.env = env.to_vec();
        c.timeout = timeout;
        c.transcript = Some(log.to_path_buf());
        process::run(&c, &self.redactor, &self.cancel)
    }
}

/// The reason of a task ended by an agent error that retrying the same
/// prompt cannot fix.
fn agent_error_reason(agent: &str, kind: ErrorKind, message: &str) -> String {
    let first: String = message.lines().next().unwrap_or("").chars().take(300).collect();
    match kind {
        ErrorKind::RateLimited => format!(
            "agent `{agent}` is rate limited by its model API ({first}); retry later, or add another agent to a `try` chain"
        ),
        ErrorKind::Overloaded => format!(
            "agent `{agent}`: its model API is overloaded ({first}); retry later, or add another agent to a `try` chain"
        ),
        ErrorKind::Auth => format!(
            "agent `{agent}` is not logged in or its key was refused ({first}); log in with the CLI, or set its API key variable"
        ),
        ErrorKind::BudgetExceeded => {
            format!("agent `{agent}` reached the budget (max-cost) before finishing ({first})")
        }
        ErrorKind::TurnCap => format!("agent `{agent}` reached its turn cap before finishing ({first})"),
        _ => format!("agent `{agent}` failed: {first}"),
    }
}

fn describe_missing(name: &str, inv: &Invocation) -> String {
    let program = inv.argv.first().map(String::as_str).unwrap_or("");
    match crate::agent::builtin_program(name) {
        Some((_, hint)) => format!("`{name}` is not installed (`{program}` is not on PATH; {hint})"),
        None => format!("custom agent `{name}`: `{program}` was not found (check its `command` in cassist.kdl)"),
    }
}

/// The file an agent reads its standing instructions from (SPEC 2).
pub fn instructions_name(agent: &str) -> &'static str {
    match agent {
        "claude" => "CLAUDE.md",
        "gemini" => "GEMINI.md",
        _ => "AGENTS.md",
    }
}

/// `cost_usd` of the agent's result report, when it gives one.
fn result_cost(path: &Path) -> Option<f64> {
    let text = std::fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v.get("cost_usd").and_then(|c| c.as_f64()).filter(|c| c.is_finite() && *c >= 0.0)
}

/// The agent's result report: `None` when absent or unreadable,
/// `Some(Ok(summary))` on success, `Some(Err(reason))` on reported failure.
fn read_result_file(path: &Path) -> Option<Result<Option<String>, String>> {
    let text = std::fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    match v.get("success").and_then(|s| s.as_bool()) {
        Some(true) => Some(Ok(v.get("summary").and_then(|s| s.as_str()).map(str::to_owned))),
        Some(false) => Some(Err(v
            .get("reason")
            .and_then(|s| s.as_str())
            .filter(|s| !s.trim().is_empty())
            .unwrap_or("no reason given")
            .to_owned())),
        None => None,
    }
}

/// The agent's last words: the end of its output.
fn last_message(tail: &str) -> Option<String> {
    let t = tail.trim();
    if t.is_empty() {
        return None;
    }
    let start = t.len().saturating_sub(SUMMARY_LIMIT);
    let start = (start..t.len()).find(|&i| t.is_char_boundary(i)).unwrap_or(t.len());
    Some(t[start..].to_owned())
}

fn review_reason(review: &Review, read_only: bool) -> String {
    let first = review.findings.iter().find(|f| f.severity == review::Severity::Reject);
    let prefix = if review.security_issue() {
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

fn project_has_tests(root: &Path) -> bool {
    let files = crate::workspace::project_files(root);
    review::has_tests(files.iter().map(|(p, _)| p.as_str()))
}
