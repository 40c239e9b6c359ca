//! The agents a task may use: its agent, or its `try` chain, resolved to
//! the ones installed; the next one when the first cannot serve.

use crate::agent::adapter::ErrorKind;
use crate::agent::invoke::{self, Invocation};
use cassist_core::spec::ProjectConfig;

use super::attempt::Step;
use super::{Failure, TaskContext};

/// The candidates for `agent` that are installed, in order; the task fails
/// when none is.
pub fn resolve(config: &ProjectConfig, root: &std::path::Path, agent: &str) -> Result<Vec<Invocation>, Failure> {
    let mut found: Vec<Invocation> = Vec::new();
    let mut missing: Vec<String> = Vec::new();
    for cand in config.candidates(agent) {
        match invoke::invocation(config, &cand) {
            Some(inv) if invoke::locate(&*inv, root, None).is_some() => found.push(inv),
            Some(inv) => missing.push(describe_missing(&cand, &inv)),
            None => missing.push(format!("`{cand}` is not an agent")),
        }
    }
    if found.is_empty() {
        // The task's own agent, or each agent of its `try` chain.
        let what = match config.agents.get(agent).map(|a| &a.def) {
            Some(cassist_core::spec::CustomAgentDef::Try(_)) => {
                format!("no agent of the `try` chain `{agent}` is available")
            }
            _ => format!("the task's agent `{agent}` is not available"),
        };
        return Err(Failure::failed(format!(
            "{what}: {}; install it, or choose another agent with `agent` in the task, --agent or CASSIST_AGENT (`cassist agents` lists them)",
            missing.join("; ")
        )));
    }
    Ok(found)
}

fn describe_missing(name: &str, inv: &Invocation) -> String {
    let program = inv.program();
    match inv.install_line() {
        Some(hint) => format!("`{name}` is not installed (`{program}` is not on PATH; install it with `{hint}`)"),
        None => format!("custom agent `{name}`: `{program}` was not found (check its `command` in cassist.kdl)"),
    }
}

/// The reason of a task ended by an agent error that retrying the same
/// prompt cannot fix.
pub fn agent_error_reason(agent: &str, kind: ErrorKind, message: &str) -> String {
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

/// The agent that could not start is dropped: the next is tried, or the
/// task fails when none is left.
pub fn next_after_start_failure(task: &mut TaskContext<'_>, why: &str) -> Result<Step, Failure> {
    let (gone, next) = task.drop_agent();
    let Some(next) = next else {
        return Err(Failure::failed(format!(
            "the agent `{gone}` could not be started ({why}); install it or choose another agent"
        )));
    };
    task.note(format!("`{gone}` could not start; trying `{next}`"));
    Ok(Step::Again)
}

/// An agent whose error fails over ([`ErrorKind::fails_over`]) with
/// another after it in the chain: the same prompt goes to the next.
pub fn next_after_api_error(task: &mut TaskContext<'_>, kind: ErrorKind) -> Step {
    let (gone, next) = task.drop_agent();
    task.note(format!(
        "`{gone}` is {}; trying `{}`",
        if kind == ErrorKind::RateLimited { "rate limited" } else { "overloaded" },
        next.unwrap_or_default()
    ));
    Step::Again
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_errors_keep_the_first_line_of_the_message() {
        let r = agent_error_reason("codex", ErrorKind::RateLimited, "429 Too Many Requests\nretry-after: 20");
        assert_eq!(
            r,
            "agent `codex` is rate limited by its model API (429 Too Many Requests); retry later, or add another agent to a `try` chain"
        );
        let long = "x".repeat(400);
        assert_eq!(agent_error_reason("a", ErrorKind::Other, &long), format!("agent `a` failed: {}", "x".repeat(300)));
    }
}
