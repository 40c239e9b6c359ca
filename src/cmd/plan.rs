//! `cassist plan`: run order, hashes, states.

use std::path::Path;

use serde::Serialize;

use super::Result;
use crate::cli::TaskArgs;
use crate::report::Output;
use crate::report::table::Table;
use cassist_core::plan::State;
use cassist_core::plan::hash::Input;

/// The `plan --json` document: the run order, and per task its hash,
/// state, agent and dependencies.
#[derive(Serialize)]
pub struct PlanJson<'a> {
    pub tasks: Vec<PlanTaskJson<'a>>,
}

#[derive(Serialize)]
pub struct PlanTaskJson<'a> {
    pub name: &'a str,
    pub file: &'a str,
    pub hash: &'a str,
    pub state: &'static str,
    pub agent: &'a str,
    pub kind: &'static str,
    pub depends_on: &'a [String],
    pub inputs: &'a [Input],
}

pub fn run(cwd: &Path, args: &TaskArgs, json: bool, out: &Output) -> Result {
    let plan = super::load_plan_remote(cwd, args, out)?;
    // A code task without a scope runs alone: said here, where the order
    // is shown.
    out.print_diagnostics(&cassist_core::plan::overlap::unscoped_warnings(&plan.tasks));
    if json {
        let doc = PlanJson {
            tasks: plan
                .tasks
                .iter()
                .map(|t| PlanTaskJson {
                    name: &t.task.name,
                    file: &t.task.source.name,
                    hash: &t.hash,
                    state: t.state.as_str(),
                    agent: &t.agent,
                    kind: t.task.kind.as_str(),
                    depends_on: &t.key.spec.depends_on,
                    inputs: &t.key.inputs,
                })
                .collect(),
        };
        cassist_core::outln!("{}", super::to_json(&doc)?);
        return Ok(());
    }
    let mut table = Table::new(&["#", "TASK", "STATE", "AGENT", "KIND", "SANDBOX", "HASH", "DEPENDS ON"]);
    for (i, t) in plan.tasks.iter().enumerate() {
        let state = match t.state {
            cassist_core::plan::State::UpToDate => out.green(t.shown_state()),
            cassist_core::plan::State::Replay
            | cassist_core::plan::State::Verify
            | cassist_core::plan::State::Stale => out.yellow(t.shown_state()),
            cassist_core::plan::State::Run => out.bold(t.shown_state()),
        };
        table.row(vec![
            (i + 1).to_string(),
            t.task.name.clone(),
            state,
            t.agent.clone(),
            t.task.kind.to_string(),
            t.sandbox.to_string(),
            t.hash[..12].to_owned(),
            if t.key.spec.depends_on.is_empty() { out.dim("-") } else { t.key.spec.depends_on.join(", ") },
        ]);
    }
    cassist_core::out!("{}", table.render(|h| out.dim(h)));
    // What the states alone do not say: outputs the user changed (kept as
    // they are), replays that would not merge into the tree, findings kept
    // or made afresh.
    let mut notes = Vec::new();
    for t in &plan.tasks {
        let c = &t.cached;
        let said =
            c.outputs_edited.iter().cloned().chain(c.conflict.iter().map(|p| format!("replay would conflict: {p}")));
        let findings = match (&t.again, t.state) {
            (Some(again), _) => Some(again.reason()),
            (None, State::Stale) => Some(
                "stale: what it reads changed, not what it asks: its recorded findings are kept until a task depending on it runs its agent, or it is named (--filter, --force)"
                    .to_owned(),
            ),
            _ => None,
        };
        let said = said.chain(findings);
        notes.extend(said.map(|note| format!("{}: {}", t.task.name, cassist_core::text::printable(&note))));
    }
    if !notes.is_empty() {
        cassist_core::outln!();
        for note in notes {
            cassist_core::outln!("{note}");
        }
    }
    if !out.quiet {
        cassist_core::outln!(
            "\n{}{}",
            count_line(&plan.tasks.iter().map(|t| t.state).collect::<Vec<_>>()),
            if out.verbose > 0 {
                format!("; {} file(s) hashed, the rest from the cache", plan.files_hashed)
            } else {
                String::new()
            }
        );
    }
    Ok(())
}

/// The last line of the plan: how many tasks, how many run their agent,
/// and, when there are any, how many are verified by their acceptance
/// commands and how many keep their findings ("3 tasks; 0 to run, 2 to
/// verify, 1 stale").
fn count_line(states: &[State]) -> String {
    let count = |s: State| states.iter().filter(|t| **t == s).count();
    let mut line =
        format!("{} task{}; {} to run", states.len(), if states.len() == 1 { "" } else { "s" }, count(State::Run));
    for (state, words) in [(State::Verify, "to verify"), (State::Stale, "stale")] {
        let n = count(state);
        if n > 0 {
            line.push_str(&format!(", {n} {words}"));
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_line_names_verify_and_stale_only_when_there_are_some() {
        use State::*;
        assert_eq!(count_line(&[UpToDate, UpToDate, UpToDate]), "3 tasks; 0 to run");
        assert_eq!(count_line(&[Run]), "1 task; 1 to run");
        assert_eq!(count_line(&[Stale, Verify, Verify]), "3 tasks; 0 to run, 2 to verify, 1 stale");
        assert_eq!(count_line(&[Run, Replay, Stale]), "3 tasks; 1 to run, 1 stale");
        assert_eq!(count_line(&[Verify, UpToDate]), "2 tasks; 0 to run, 1 to verify");
    }
}
