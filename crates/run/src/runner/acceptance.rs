//! Acceptance: the task's acceptance commands, then the project's tests
//! (not for read-only tasks), in the workspace.

use std::time::{Duration, Instant};

use crate::accept::{self, AcceptanceResult};
use cassist_core::event::AcceptanceReport;
use cassist_sandbox::process::Outcome;

use super::jail::Role;
use super::{CommandError, FEEDBACK_LIMIT, Failure, TaskContext};

/// Runs the acceptance commands, then the project tests, until one fails,
/// on a scratch layer over the agent's result that is thrown away after
/// (nothing they write is part of the change or seen by the next attempt);
/// records them as the report's `acceptance`. `Some(result)` names the one
/// that failed.
pub fn acceptance(task: &mut TaskContext<'_>, attempt: u32) -> Result<Option<AcceptanceResult>, Failure> {
    let commands = acceptance_commands(task);
    let mut results: Vec<AcceptanceResult> = Vec::new();
    let mut failed: Option<AcceptanceResult> = None;
    if !commands.is_empty() {
        task.workspace_mut()
            .begin_scratch()
            .map_err(|e| Failure::failed(format!("cannot prepare the acceptance layer: {e}")))?;
    }
    let mut outcome = Ok(());
    for (k, (cmd, timeout)) in commands.iter().enumerate() {
        task.phase("acceptance", attempt, cmd.clone());
        let log = task.record_dir().join(format!("acceptance-{attempt}-{}.log", k + 1));
        let result = match accept(task, cmd, timeout.unwrap_or(accept::DEFAULT_TIMEOUT), &log) {
            Ok(r) => r,
            Err(f) => {
                outcome = Err(f);
                break;
            }
        };
        let ok = result.passed;
        results.push(result.clone());
        if !ok {
            failed = Some(result);
            break;
        }
    }
    task.workspace_mut().end_scratch();
    outcome?;
    task.set_acceptance(
        results
            .iter()
            .map(|r| AcceptanceReport { command: r.command.clone(), exit_code: r.exit_code, passed: r.passed })
            .collect(),
    );
    let _ = std::fs::write(
        task.record_dir().join(format!("acceptance-{attempt}.json")),
        serde_json::to_vec_pretty(&results).unwrap_or_default(),
    );
    Ok(failed)
}

/// The acceptance commands with their timeouts, then the project's tests
/// if the task runs them (the rule its hash follows too).
fn acceptance_commands(task: &TaskContext<'_>) -> Vec<(String, Option<Duration>)> {
    let t = task.task();
    let tests = if t.runs_project_checks() { task.runner().plan.project.test_commands() } else { Vec::new() };
    let own = t.task.acceptance.iter().map(|a| (a.run.value.clone(), a.timeout));
    own.chain(tests.into_iter().map(|c| (c, None))).collect()
}

/// One acceptance command in the workspace.
fn accept(
    task: &TaskContext<'_>,
    cmd: &str,
    timeout: Duration,
    log: &std::path::Path,
) -> Result<AcceptanceResult, Failure> {
    let begun = Instant::now();
    let f = task.shell(Role::Acceptance, cmd, Some(timeout), log).map_err(|e| match e {
        // Not the change's failure: never feedback for the agent.
        CommandError::OverLimit(over) => Failure::over_limit(&format!("the acceptance command `{cmd}`"), &over),
        e => Failure::failed(format!("acceptance command `{cmd}` could not run: {e}")),
    })?;
    if f.outcome == Outcome::Cancelled {
        return Err(Failure::interrupted());
    }
    let exit_code = crate::agent::adapter::exit_code(f.outcome);
    Ok(AcceptanceResult {
        command: cmd.to_owned(),
        exit_code,
        note: task.runner().unseen_program_note(exit_code, cmd, &f.tail, task.base_env()),
        passed: f.success(),
        duration_ms: begun.elapsed().as_millis() as u64,
        counts: accept::parse_counts(&f.tail),
        timed_out: f.outcome == Outcome::TimedOut,
        tail: f.tail,
    })
}

/// A failed acceptance command: the feedback for the next iteration, or,
/// after the last, the task fails with the reason.
pub fn acceptance_failed(task: &mut TaskContext<'_>, f: &AcceptanceResult) -> Result<String, Failure> {
    let iteration = task.iteration();
    task.next_iteration(|| acceptance_failure(f, iteration))?;
    Ok(accept::feedback(f, FEEDBACK_LIMIT))
}

/// The failure of a task whose acceptance command `f` failed in its last
/// iteration, `iteration`.
fn acceptance_failure(f: &AcceptanceResult, iteration: u32) -> Failure {
    let s = if iteration == 1 { "" } else { "s" };
    Failure::failed(format!("{} after {iteration} iteration{s}{}", failed(f), note(f))).with_tail(f.tail.clone())
}

/// How acceptance command `f` failed, in words: "acceptance command `make
/// test` failed (exit code 2)" (or "(timed out)", "(killed)").
pub fn failed(f: &AcceptanceResult) -> String {
    let why = match (f.timed_out, f.exit_code) {
        (true, _) => "timed out".to_owned(),
        (false, Some(c)) => format!("exit code {c}"),
        (false, None) => "killed".to_owned(),
    };
    format!("acceptance command `{}` failed ({why})", f.command)
}

/// What follows [`failed`] at the end of the reason: why it could not run
/// a program the sandbox hides ("; /tmp/venv/bin/pytest is not visible in
/// the sandbox: …"), or nothing.
pub fn note(f: &AcceptanceResult) -> String {
    f.note.as_ref().map(|n| format!("; {n}")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(exit_code: Option<i32>, timed_out: bool) -> AcceptanceResult {
        AcceptanceResult {
            command: "make test".into(),
            exit_code,
            passed: false,
            duration_ms: 5,
            counts: None,
            timed_out,
            tail: "FAIL x\n".into(),
            note: None,
        }
    }

    #[test]
    fn the_last_failed_acceptance_says_how_and_after_how_many_iterations() {
        let f = acceptance_failure(&result(Some(2), false), 1);
        assert_eq!(f.reason, "acceptance command `make test` failed (exit code 2) after 1 iteration");
        assert_eq!(f.tail, "FAIL x\n");
        let f = acceptance_failure(&result(None, true), 3);
        assert_eq!(f.reason, "acceptance command `make test` failed (timed out) after 3 iterations");
        let f = acceptance_failure(&result(None, false), 2);
        assert_eq!(f.reason, "acceptance command `make test` failed (killed) after 2 iterations");
        let hidden = AcceptanceResult { note: Some("/tmp/v/bin/t is not visible".into()), ..result(Some(127), false) };
        assert_eq!(
            acceptance_failure(&hidden, 1).reason,
            "acceptance command `make test` failed (exit code 127) after 1 iteration; /tmp/v/bin/t is not visible"
        );
    }
}
