//! `cassist plan`: run order, hashes, states.

use std::path::Path;

use serde::Serialize;

use super::Result;
use crate::cli::TaskArgs;
use crate::report::Output;
use crate::report::table::Table;
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
    // they are), replays that would not merge into the tree.
    let mut notes = Vec::new();
    for t in &plan.tasks {
        let c = &t.cached;
        let said =
            c.outputs_edited.iter().cloned().chain(c.conflict.iter().map(|p| format!("replay would conflict: {p}")));
        notes.extend(said.map(|note| format!("{}: {}", t.task.name, cassist_core::text::printable(&note))));
    }
    if !notes.is_empty() {
        cassist_core::outln!();
        for note in notes {
            cassist_core::outln!("{note}");
        }
    }
    if !out.quiet {
        let runs = plan.tasks.iter().filter(|t| t.state == cassist_core::plan::State::Run).count();
        cassist_core::outln!(
            "\n{} task{}; {runs} to run{}",
            plan.tasks.len(),
            if plan.tasks.len() == 1 { "" } else { "s" },
            if out.verbose > 0 {
                format!("; {} file(s) hashed, the rest from the cache", plan.files_hashed)
            } else {
                String::new()
            }
        );
    }
    Ok(())
}
