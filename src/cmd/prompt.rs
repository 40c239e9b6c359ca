//! `cassist prompt TASK`: the prompt the agent got or will get (its
//! control characters shown, not sent to the terminal: findings of
//! dependencies and context files may be an agent's text).

use std::path::Path;

use super::{Error, Result};
use crate::cli::TaskArgs;
use crate::report::Output;
use cassist_core::plan::{Plan, PlannedTask, State};

pub fn run(cwd: &Path, name: &str, args: &TaskArgs, out: &Output) -> Result {
    let plan = super::load_plan(cwd, args, out)?;
    let task = plan.get(name).ok_or_else(|| Error::Invalid(vec![plan.unknown_task(name)]))?;
    let summaries: Vec<(String, String)> = plan
        .summary_dependencies(task)
        .into_iter()
        .filter_map(|d| findings(&plan, d).map(|s| (d.task.name.clone(), s)))
        .collect();
    cassist_core::out!("{}", cassist_core::text::printable(&plan.render_prompt(task, &summaries)));
    Ok(())
}

/// What explore/review task `d` hands the prompts of its dependents, as
/// the scheduler would: the findings recorded for its current inputs (the
/// store entry it is up to date with, or the one it replays). Until it has
/// run on them, a placeholder says so; a recorded run without findings
/// hands none.
fn findings(plan: &Plan, d: &PlannedTask) -> Option<String> {
    let name = &d.task.name;
    let entry = match d.state {
        // A stale task's recorded findings stand until it runs again.
        State::UpToDate | State::Stale | State::Verify => {
            plan.lock.tasks.get(name).and_then(|l| plan.store.get_entry(&l.before))
        }
        State::Replay => d.cached.entry.as_deref().and_then(|k| plan.store.get_entry(k)),
        State::Run => None,
    };
    match entry {
        Some(e) => e.summary.map(|s| cassist_core::text::truncate_chars(&s, cassist_run::runner::SUMMARY_LIMIT)),
        None if plan.lock.tasks.contains_key(name) => {
            Some(format!("(the final message of `{name}` goes here once it has run again: its inputs changed)"))
        }
        None => Some(format!("(the final message of `{name}` goes here once it has run)")),
    }
}
