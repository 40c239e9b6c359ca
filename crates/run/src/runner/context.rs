//! What one task's run carries from step to step: the task, its record
//! folder, its workspace, the agents it may use, and what it did so far.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::agent::invoke::{self, Invocation};
use crate::workspace::{Layer, Mode, Workspace};
use cassist_core::changes::ChangeSet;
use cassist_core::event::{AcceptanceReport, Event, SubtaskReport};
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
    pub runner: &'a Runner,
    pub t: &'a PlannedTask,
    pub name: &'a str,
    /// `.cassist/runs/<id>/<task>/`.
    pub record: &'a Path,
    pub ws: Workspace,
    /// The agents left to try, in order; the first runs.
    pub agents: Vec<Invocation>,
    /// The environment of setup, acceptance and build commands (their
    /// `TMPDIR` is private: `/tmp`, or copy mode's own folder).
    pub base_env: Vec<(OsString, OsString)>,
    /// A read-only kind or sandbox: no project tests, changes rejected.
    pub read_only: bool,
    pub facts: Facts,
    /// The iteration running now, from 1: a failed review or acceptance
    /// goes back to the agent in the next, up to the task's
    /// `max-iterations`.
    pub iteration: u32,
    /// What the next prompt of the whole task is told (review or
    /// acceptance feedback).
    pub feedback: Option<String>,
    /// When the task started.
    pub started: std::time::Instant,
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
            name: t.task.name.as_str(),
            record,
            ws,
            agents,
            base_env: invoke::environment(&[], &[("TMPDIR".into(), tmp.into())]),
            read_only: t.read_only(),
            facts,
            iteration: 1,
            feedback: None,
            started: std::time::Instant::now(),
        }
    }

    pub fn phase(&self, phase: &'static str, attempt: u32, detail: impl Into<String>) {
        self.runner.phase(self.name, phase, attempt, detail);
    }

    pub fn note(&self, message: impl Into<String>) {
        self.runner.event(Event::Note { task: self.name, message: message.into() });
    }

    /// Ctrl-C ends the task before its next step.
    pub fn check_cancel(&self) -> Result<(), Failure> {
        if self.runner.cancel.is_cancelled() { Err(Failure::interrupted()) } else { Ok(()) }
    }

    /// Another iteration, or, after the last, `failure`.
    pub fn next_iteration(&mut self, failure: impl FnOnce() -> Failure) -> Result<(), Failure> {
        if self.iteration >= self.t.max_iterations {
            return Err(failure());
        }
        self.iteration += 1;
        Ok(())
    }

    /// The workspace's change so far.
    pub fn read_changes(&mut self) -> Result<ChangeSet, Failure> {
        self.ws.changes().map_err(|e| Failure::failed(format!("cannot read the workspace's changes: {e}")))
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
    ) -> std::io::Result<process::Finished> {
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
        let jail = self.runner.jail(role, self.t.sandbox, &self.ws, None, None, &self.base_env);
        let mut c = self.ws.sandboxed(layer, vec!["sh".into(), "-c".into(), cmd.into()], jail)?;
        c.env = self.base_env.clone();
        c.timeout = timeout;
        c.transcript = Some(log.to_path_buf());
        self.runner.run(&c)
    }
}
