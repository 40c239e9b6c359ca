//! Re-verifying a finished task (state `verify`): only files it reads
//! changed (or its agent's version, or a run limit), and its recorded
//! change is still in the tree. No agent: the task's setup, then its
//! acceptance commands (and the project tests where it runs them) on the
//! tree as it is, in its sandbox, exactly as after an agent run.
//!
//! - They pass: `verified`. The store entry of the recorded run takes the
//!   new after-state (with no entry, as in a fresh clone, the store keeps
//!   the verified lock line beside), so the next `run --locked` of the same
//!   tree finds it without running them again; unless `--locked`, so does
//!   its lock line.
//! - One fails: the recorded change no longer meets the task; the agent
//!   runs on the tree as it is, once the scheduler has refreshed the
//!   task's stale dependencies (`--locked`: refused, naming the command
//!   and the end of its output).
//! - One cannot start (exit 126 or 127: its program is missing or on a
//!   path the sandbox hides), or setup fails: an environment failure. The
//!   task fails saying why; an agent could do nothing about it and is
//!   never called.
//!
//! Identical commands on an identical tree run once per run: tasks that
//! share their acceptance commands, setup, sandbox and scope, verified
//! while no change landed in between, share one verification.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cassist_core::changes::ChangeSet;
use cassist_core::event::{AcceptanceReport, TaskState};
use cassist_core::lock::{Lock, LockLine};
use cassist_core::plan::PlannedTask;

use super::acceptance::acceptance;
use super::context::{Facts, TaskContext};
use super::{Done, Ending, Failure, Runner, TaskResult, setup};
use crate::accept::AcceptanceResult;

/// The exit codes of a shell whose command could not start: found but
/// not executable (126), not found (127).
const CANNOT_START: [i32; 2] = [126, 127];

/// How much of a failing command's output a `--locked` refusal quotes, in
/// bytes (from the start of a line).
const TAIL_BYTES: usize = 1024;

/// What a verification found.
#[derive(Debug, Clone)]
pub enum Verdict {
    /// Every command passed (their reports).
    Passed(Vec<AcceptanceReport>),
    /// This command failed: the recorded change no longer meets the task.
    Unmet(AcceptanceResult),
}

/// The verifications of one run, by what decides their outcome (see
/// [`key`]): each is run once, a task with the same key waiting for the
/// first and taking its verdict.
#[derive(Default)]
pub struct Verifications {
    done: Mutex<HashMap<String, Slot>>,
}

/// One verification: the task that ran it and its verdict, once known.
type Slot = Arc<Mutex<Option<(String, Verdict)>>>;

impl Verifications {
    fn slot(&self, key: &str) -> Slot {
        let mut done = self.done.lock().unwrap_or_else(|e| e.into_inner());
        done.entry(key.to_owned()).or_default().clone()
    }
}

/// What decides a verification's outcome: the tree (the changes landed so
/// far in this run, `seq`), the commands that run (setup, acceptance with
/// their timeouts, the project tests if the task runs them) and what
/// confines them (sandbox level, kind, scope).
fn key(runner: &Runner, t: &PlannedTask, seq: u64) -> String {
    let project = &runner.plan.project;
    let tests = if t.runs_project_checks() { project.test_commands() } else { Vec::new() };
    let acceptance: Vec<(&str, Option<u128>)> =
        t.task.acceptance.iter().map(|a| (a.run.value.as_str(), a.timeout.map(|d| d.as_millis()))).collect();
    let doc = serde_json::json!({
        "tree": seq,
        "setup": project.config.setup,
        "acceptance": acceptance,
        "tests": tests,
        "sandbox": t.sandbox.as_str(),
        "kind": t.task.kind.as_str(),
        "scope": t.key.spec.scope,
    });
    cassist_core::plan::hash::hash_json(&doc)
}

impl Runner {
    /// Verifies task `t` (state `verify`). When its acceptance fails, the
    /// result says so ([`TaskResult::unmet`]): its agent is to run (under
    /// `--locked`, it is refused).
    pub fn verify_task(&self, t: &PlannedTask) -> TaskResult {
        let name = &t.task.name;
        let Some(line) = self.plan.lock.tasks.get(name) else {
            // Planned `verify` only against a lock line: cannot happen.
            let mut r = TaskResult::new(t.end());
            r.unmet = Some("it has no record to verify".to_owned());
            return r;
        };
        let seq = self.view().1;
        let slot = self.verifications.slot(&key(self, t, seq));
        // Held while verifying: a task with the same key waits for it.
        let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
        let facts = Facts {
            agent: Some(line.agent.clone()),
            summary: self.plan.store.get_summary(&line.before).and_then(|e| e.summary),
            ..Facts::default()
        };
        let mut verdict = None;
        let result = match slot.as_ref() {
            Some((by, v)) => {
                verdict = Some(v.clone());
                let mut r = TaskResult::new(t.end());
                if let Verdict::Passed(reports) = v {
                    r.end.report.acceptance = reports.clone();
                    r.end.report.agent = line.agent.clone();
                    r.end.report.summary = facts.summary;
                    r.end.report.state = TaskState::Verified;
                    r.end.report.reason = Some(format!("verified with `{by}`: the same commands on the same tree"));
                }
                r
            }
            None => self.recorded(t, facts, |record, facts| {
                let ws = match self.create_workspace(t) {
                    Ok(ws) => ws,
                    Err(f) => return Ending::early(facts, f),
                };
                let mut task = TaskContext::new(self, t, record, ws, Vec::new(), facts);
                let outcome = verification(&mut task).map(|v| {
                    verdict = Some(v);
                    Done {
                        state: TaskState::Verified,
                        changes: ChangeSet::default(),
                        split: Vec::new(),
                        recorded: false,
                    }
                });
                let (facts, ws) = task.into_parts();
                Ending { facts, outcome, workspace: Some(ws) }
            }),
        };
        if slot.is_none()
            && let Some(v) = &verdict
        {
            *slot = Some((name.clone(), v.clone()));
        }
        drop(slot);
        match verdict {
            Some(Verdict::Passed(_)) => self.verified(t, line, result),
            Some(Verdict::Unmet(failed)) => self.unmet(t, &failed),
            // Failed to verify (setup, the sandbox, Ctrl-C): the task's
            // failure, with why.
            None => result,
        }
    }

    /// A verification passed: the recorded run's after-state moves to the
    /// tree as it is, in the store (always) and in the lock (not under
    /// `--locked`).
    fn verified(&self, t: &PlannedTask, line: &cassist_core::lock::LockEntry, mut result: TaskResult) -> TaskResult {
        result.end.report.state = TaskState::Verified;
        result.end.report.changed_files.clear();
        let line = super::record::verified_line(&self.plan, line, t);
        let store = &self.plan.store;
        // No entry of the recorded run took the new after-state (a fresh
        // clone): recorded beside, for the next run of the same tree.
        if !matches!(store.read_entry(&line.before), Ok(Some(_)))
            && let Err(e) = store.put_verified(&t.task.name, &line)
        {
            cassist_core::errln!(
                "warning: could not record that `{}` was verified ({e}); it is verified again next time",
                t.task.name
            );
        }
        if !self.locked {
            let lock_line = LockLine { task: t.task.name.clone(), entry: Some(line) };
            match Lock::update(&self.plan.project.root, std::slice::from_ref(&lock_line)) {
                Ok(()) => result.lock_line = Some(lock_line),
                Err(e) => cassist_core::errln!(
                    "warning: `{}` was verified but cassist.lock could not be written ({e}); it is verified again next time",
                    t.task.name
                ),
            }
        }
        result
    }

    /// A verification found the recorded change no longer meets the
    /// task: the agent runs (`--locked`: refused, saying which command
    /// failed and how).
    fn unmet(&self, t: &PlannedTask, failed: &AcceptanceResult) -> TaskResult {
        let why =
            format!("{} on the tree as it is{}", super::acceptance::failed(failed), super::acceptance::note(failed));
        let tail = self.redactor.redact(&cassist_core::text::tail_lines(&failed.tail, TAIL_BYTES));
        if self.locked {
            let quoted = if tail.trim().is_empty() { String::new() } else { format!("; its output ends:\n{tail}") };
            let mut r = TaskResult::new(t.skipped(format!("--locked: an agent would be needed ({why})")));
            r.end.tail = failed.tail.clone();
            r.needs_agent = Some(vec![format!("{why}{quoted}")]);
            return r;
        }
        cassist_core::errln!("note: task `{}`: {why}; its agent runs", t.task.name);
        let mut r = TaskResult::new(t.end());
        r.unmet = Some(why);
        r
    }
}

/// Setup, then the acceptance commands and the project tests, on the
/// workspace as it started (the tree as it is, and the changes passed but
/// not yet written). `Err`: the verification itself could not be made.
fn verification(task: &mut TaskContext<'_>) -> Result<Verdict, Failure> {
    setup::setup(task)
        .map_err(|f| Failure { reason: format!("environment failure, no agent was called: {}", f.reason), ..f })?;
    // Attempt 0: its records stand beside those of an agent run that
    // may follow.
    let failed = acceptance(task, 0)?;
    let Some(failed) = failed else { return Ok(Verdict::Passed(task.facts().acceptance.clone())) };
    if let Some(code) = failed.exit_code.filter(|c| CANNOT_START.contains(c)) {
        let what = if code == 127 { "command not found" } else { "not executable" };
        return Err(Failure::failed(format!(
            "environment failure, no agent was called: acceptance command `{}` could not start in the task's sandbox (exit {code}: {what}); its program is not installed, or lives where the task's sandbox does not show it (a private temp folder, another home)",
            failed.command
        ))
        .with_tail(failed.tail));
    }
    Ok(Verdict::Unmet(failed))
}
