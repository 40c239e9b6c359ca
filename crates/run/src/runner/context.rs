//! What one task's run carries from step to step: the task, its record
//! folder, its workspace, the agents it may use, and what it did so far.
//! The steps ([`super::setup`], [`super::attempt`], [`super::judge`],
//! [`super::acceptance`], [`super::integrate`], the loops) are functions
//! over a [`TaskContext`]; what they change of it goes through its
//! methods, each keeping its own rule (an attempt is counted with its
//! transcript, a cost adds to the run's spend too).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::agent::invoke::{self, Invocation};
use crate::workspace::{Layer, Mode, Workspace};
use cassist_core::changes::ChangeSet;
use cassist_core::event::{AcceptanceReport, Event, SubtaskReport};
use cassist_core::limits::TooManyFiles;
use cassist_core::plan::PlannedTask;
use cassist_sandbox::process;

use super::jail::{Role, copy_mode_tmp};
use super::{Failure, Runner};

/// What a task did, reported however it ends: the facts of its report
/// that are not how it ended.
#[derive(Debug, Default)]
pub struct Facts {
    /// The agent that ran last (the planned one when none ran).
    pub agent: Option<String>,
    /// Agent runs.
    pub attempts: u32,
    pub cost_usd: Option<f64>,
    /// The transcript of the last agent run.
    pub transcript: Option<PathBuf>,
    pub changed_files: Vec<String>,
    pub acceptance: Vec<AcceptanceReport>,
    pub summary: Option<String>,
    /// The parts of a split task, as a tree.
    pub subtasks: Vec<SubtaskReport>,
    /// Why a task that passed integrated nothing (its report's reason).
    pub nothing_integrated: Option<String>,
}

/// One task's run in its workspace.
pub struct TaskContext<'a> {
    runner: &'a Runner,
    t: &'a PlannedTask,
    /// `.cassist/runs/<id>/<task>/`.
    record: &'a Path,
    ws: Workspace,
    /// The agents left to try, in order; the first runs.
    agents: Vec<Invocation>,
    /// The environment of setup, acceptance and build commands (their
    /// `TMPDIR` is private: `/tmp`, or copy mode's own folder).
    base_env: Vec<(OsString, OsString)>,
    facts: Facts,
    /// The hosts the egress proxy refused its commands, by host.
    refused: std::sync::Mutex<std::collections::BTreeMap<String, u64>>,
    /// The iteration running now, from 1: a failed review or acceptance
    /// goes back to the agent in the next, up to the task's
    /// `max-iterations`.
    iteration: u32,
    /// What the next prompt of the whole task is told (review or
    /// acceptance feedback).
    feedback: Option<String>,
    /// When the task started.
    started: Instant,
}

/// The environment of setup, acceptance and build commands, whose
/// `TMPDIR` is `tmp`: never a variable that names one of the session's
/// sockets, which their sandbox hides.
fn base_env(tmp: PathBuf) -> Vec<(OsString, OsString)> {
    let mut env = invoke::environment(&[], &[("TMPDIR".into(), tmp.into())]);
    cassist_sandbox::sandbox::without_socket_env(&mut env);
    env
}

impl<'a> TaskContext<'a> {
    pub fn new(
        runner: &'a Runner,
        t: &'a PlannedTask,
        record: &'a Path,
        ws: Workspace,
        agents: Vec<Invocation>,
        facts: Facts,
    ) -> TaskContext<'a> {
        let tmp = match runner.mode {
            Mode::Overlay => PathBuf::from("/tmp"),
            Mode::Copy => copy_mode_tmp(&ws),
        };
        TaskContext {
            runner,
            t,
            record,
            ws,
            agents,
            base_env: base_env(tmp),
            facts,
            refused: Default::default(),
            iteration: 1,
            feedback: None,
            started: Instant::now(),
        }
    }

    /// What the task did and its workspace, once it ended.
    pub fn into_parts(self) -> (Facts, Workspace) {
        (self.facts, self.ws)
    }

    pub fn runner(&self) -> &'a Runner {
        self.runner
    }

    /// The task as planned.
    pub fn task(&self) -> &'a PlannedTask {
        self.t
    }

    /// The task's name.
    pub fn name(&self) -> &'a str {
        self.t.task.name.as_str()
    }

    /// The task's record folder, `.cassist/runs/<id>/<task>/`.
    pub fn record_dir(&self) -> &'a Path {
        self.record
    }

    pub fn workspace(&self) -> &Workspace {
        &self.ws
    }

    pub fn workspace_mut(&mut self) -> &mut Workspace {
        &mut self.ws
    }

    /// The environment of setup, acceptance and build commands.
    pub fn base_env(&self) -> &[(OsString, OsString)] {
        &self.base_env
    }

    /// A read-only kind or sandbox: no project tests, changes rejected.
    pub fn read_only(&self) -> bool {
        self.t.read_only()
    }

    /// What the task did so far.
    pub fn facts(&self) -> &Facts {
        &self.facts
    }

    /// When the task started.
    pub fn started(&self) -> Instant {
        self.started
    }

    pub fn phase(&self, phase: &'static str, attempt: u32, detail: impl Into<String>) {
        self.runner.phase(self.name(), phase, attempt, detail);
    }

    pub fn note(&self, message: impl Into<String>) {
        self.runner.event(Event::Note { task: self.name(), message: message.into() });
    }

    /// Ctrl-C ends the task before its next step.
    pub fn check_cancel(&self) -> Result<(), Failure> {
        if self.runner.cancel.is_cancelled() { Err(Failure::interrupted()) } else { Ok(()) }
    }

    /// The iteration running now, from 1.
    pub fn iteration(&self) -> u32 {
        self.iteration
    }

    /// Another iteration, or, after the last, `failure`.
    pub fn next_iteration(&mut self, failure: impl FnOnce() -> Failure) -> Result<(), Failure> {
        if self.iteration >= self.t.max_iterations {
            return Err(failure());
        }
        self.iteration += 1;
        Ok(())
    }

    /// What the next prompt of the whole task is told, if anything.
    pub fn feedback(&self) -> Option<&str> {
        self.feedback.as_deref()
    }

    pub fn set_feedback(&mut self, feedback: String) {
        self.feedback = Some(feedback);
    }

    /// The agent that runs next: the first of the chain left.
    pub fn agent(&self) -> &Invocation {
        &self.agents[0]
    }

    /// Whether another agent of the chain is left after the first.
    pub fn has_next_agent(&self) -> bool {
        self.agents.len() > 1
    }

    /// The first agent is dropped from the chain: its name, and the name
    /// of the one that runs next, if any is left.
    pub fn drop_agent(&mut self) -> (String, Option<String>) {
        let gone = self.agents.remove(0);
        (gone.name().to_owned(), self.agents.first().map(|next| next.name().to_owned()))
    }

    /// The agent of the run starting now; the task's report names it from
    /// now on.
    pub fn choose_agent(&mut self) -> Invocation {
        let agent = self.agents[0].clone();
        self.facts.agent = Some(agent.name().to_owned());
        agent
    }

    /// An agent run ended, its output in `transcript`.
    pub fn count_run(&mut self, transcript: PathBuf) {
        self.facts.attempts += 1;
        self.facts.transcript = Some(transcript);
    }

    /// What an agent run reported spending: the task's and the run's
    /// totals.
    pub fn add_cost(&mut self, usd: f64) {
        self.facts.cost_usd = Some(self.facts.cost_usd.unwrap_or(0.0) + usd);
        self.runner.spent.fetch_add((usd.max(0.0) * 1e6).round() as u64, std::sync::atomic::Ordering::SeqCst);
        self.runner.event(Event::Cost { task: self.name(), usd });
    }

    /// The files the task's change touches, for its report.
    pub fn set_changed_files(&mut self, changes: &ChangeSet) {
        self.facts.changed_files = changes.paths().iter().map(|s| (*s).to_owned()).collect();
    }

    /// The acceptance commands that ran last, for the report.
    pub fn set_acceptance(&mut self, acceptance: Vec<AcceptanceReport>) {
        self.facts.acceptance = acceptance;
    }

    pub fn set_summary(&mut self, summary: Option<String>) {
        self.facts.summary = summary;
    }

    /// The parts of a split task, as its report shows them.
    pub fn set_subtasks(&mut self, subtasks: Vec<SubtaskReport>) {
        self.facts.subtasks = subtasks;
    }

    /// Why the task passed without integrating anything.
    pub fn set_nothing_integrated(&mut self, why: String) {
        self.facts.nothing_integrated = Some(why);
    }

    /// The workspace's change so far.
    pub fn read_changes(&mut self) -> Result<ChangeSet, Failure> {
        self.read_changes_within_limits()?
            .map_err(|too_many| Failure::failed(format!("rejected as a security issue: {too_many}")))
    }

    /// The workspace's change, or its count when it touches more entries
    /// than `limits { files }` allows (nothing past the limit was read).
    pub fn read_changes_within_limits(&mut self) -> Result<Result<ChangeSet, TooManyFiles>, Failure> {
        match self.ws.changes() {
            Ok(changes) => Ok(Ok(changes)),
            Err(crate::workspace::Error::TooManyFiles(too_many)) => Ok(Err(too_many)),
            Err(e) => Err(Failure::failed(format!("cannot read the workspace's changes: {e}"))),
        }
    }

    /// `sh -c cmd` in the workspace as a command of `role` (setup: its
    /// layer; acceptance: the scratch layer; build: the build layer over
    /// the user's tree), logged to `log`.
    pub fn shell(
        &self,
        role: Role,
        cmd: &str,
        timeout: Option<Duration>,
        log: &Path,
    ) -> Result<process::Finished, super::CommandError> {
        let layer = match role {
            Role::Setup => Layer::Setup,
            Role::Build => Layer::Build,
            _ => Layer::Scratch,
        };
        if self.runner.mode == Mode::Copy {
            // A fresh private TMPDIR for each command.
            let tmp = copy_mode_tmp(&self.ws);
            crate::workspace::remove_tree(&tmp);
            std::fs::create_dir_all(&tmp)?;
        }
        let mut jail = self.runner.jail(role, self.t.sandbox, &self.ws, None, None, &self.base_env);
        let net = self.network(role, None, &mut jail)?;
        let mut c = self.ws.sandboxed(layer, vec!["sh".into(), "-c".into(), cmd.into()], jail)?;
        c.env = self.base_env.clone();
        if let Some(net) = &net {
            super::network::set_env(&mut c.env, &net.env);
        }
        c.timeout = timeout;
        c.transcript = Some(log.to_path_buf());
        let finished = self.runner.run(&c)?;
        self.after_network(net.as_ref(), &finished)?;
        Ok(finished)
    }

    /// The network of a command of `role` that `jail` confines (`inv`:
    /// the agent's): with namespaces and below `full`, a namespace of its
    /// own whose way out is a new lease of the egress proxy, set in
    /// `jail`; the command's variables and lease, to keep until it ends.
    pub fn network(
        &self,
        role: Role,
        inv: Option<&crate::agent::invoke::Invocation>,
        jail: &mut cassist_sandbox::sandbox::Jail,
    ) -> Result<Option<super::network::CommandNet>, super::CommandError> {
        if self.runner.mode != Mode::Overlay || !jail.confined || role == Role::Replay || self.runner.egress.host {
            return Ok(None);
        }
        let net = self.runner.egress.command(role, inv).map_err(super::CommandError::Network)?;
        jail.network = net.network.clone();
        Ok(Some(net))
    }

    /// After a command with `net`: what the proxy refused it is recorded
    /// (`network.json` in the task's record, and a note); a command that
    /// failed while refused a host failed for that
    /// ([`super::CommandError::Refused`]).
    pub fn after_network(
        &self,
        net: Option<&super::network::CommandNet>,
        finished: &process::Finished,
    ) -> Result<(), super::CommandError> {
        let Some(lease) = net.and_then(|n| n.lease.as_ref()) else { return Ok(()) };
        let refused = lease.refused();
        if refused.is_empty() {
            return Ok(());
        }
        let shown: Vec<String> = refused.iter().map(|(h, n)| format!("{h} ({n}×)")).collect();
        self.note(format!("network refused: {}", shown.join(", ")));
        let all = {
            let mut all = self.refused.lock().unwrap_or_else(|e| e.into_inner());
            for (h, n) in &refused {
                *all.entry(h.clone()).or_default() += n;
            }
            all.clone()
        };
        let doc = serde_json::json!({ "refused": all });
        let _ = std::fs::write(self.record.join("network.json"), serde_json::to_vec_pretty(&doc).unwrap_or_default());
        if !finished.success() && finished.outcome != cassist_sandbox::process::Outcome::Cancelled {
            return Err(super::CommandError::Refused(super::network::refused_reason(&refused)));
        }
        Ok(())
    }
}
