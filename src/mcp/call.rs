//! What the tools do, on blocking threads: plan the project (with the
//! call's inline tasks), and run a selection of its tasks through the same
//! preparation, scheduler, runner, store and lock as `cassist run`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use crate::cmd::Error;
use crate::cmd::run::{Settings, UPLOAD_WAIT, finish_uploads, prepare, select, update_after_states};
use cassist_core::event::TaskEnd;
use cassist_core::plan::{INLINE_SOURCE, LoadOptions, Plan, PlannedTask};
use cassist_core::spec::{SourceFile, SpecDiagnostic};
use cassist_sandbox::process::Cancel;

/// What every call of one server shares: where it serves, and the
/// `cassist mcp` arguments (task paths, `--agent`, `--model`).
pub struct Serving {
    pub cwd: PathBuf,
    pub options: LoadOptions,
}

/// Why a call did nothing: said to the client as a tool error.
#[derive(Debug)]
pub struct Refused(pub String);

impl From<Error> for Refused {
    fn from(e: Error) -> Refused {
        match e {
            Error::Invalid(diags) => Refused(diagnostics(&diags)),
            e => Refused(e.to_string()),
        }
    }
}

/// Diagnostics as plain text, errors first, one a line.
pub fn diagnostics(diags: &[SpecDiagnostic]) -> String {
    let mut lines: Vec<String> = diags.iter().filter(|d| d.is_error()).map(diagnostic).collect();
    if lines.is_empty() {
        lines = diags.iter().map(diagnostic).collect();
    }
    lines.join("\n")
}

/// One diagnostic on one line: what, where (in a task file), the help.
pub fn diagnostic(d: &SpecDiagnostic) -> String {
    let mut s = format!("{}: {}", if d.is_error() { "error" } else { "warning" }, d.message);
    match d.location() {
        Some((file, line, col)) if file != INLINE_SOURCE => s.push_str(&format!(" ({file}:{line}:{col})")),
        _ => {}
    }
    if d.code == "duplicate-task" && d.source.as_ref().is_some_and(|s| s.name == INLINE_SOURCE) {
        s.push_str("; an inline task cannot take the name of a task of the project's task files, nor of another inline task of the call: give it another `name`");
    } else if let Some(help) = &d.help {
        s.push_str(&format!("; {help}"));
    }
    s
}

impl Serving {
    /// The plan of the project's task files.
    /// With the project's remote cache, as `cassist plan` does (the tasks
    /// to run are looked up there, and what is found fills the store).
    pub fn plan(&self) -> Result<Plan, Refused> {
        let opts = self.options(None);
        let loaded = cassist_core::plan::load(&self.cwd, &opts).map_err(|d| Refused(diagnostics(&d)))?;
        let remote = crate::cmd::open_remote(&loaded.project.config)?;
        Ok(crate::cmd::plan_with_remote(&self.cwd, &opts, loaded, remote.as_ref())?)
    }

    /// The load options of a call: the server's, with the call's inline
    /// tasks; no `tasks/` folder is as no task file.
    fn options(&self, inline: Option<Arc<SourceFile>>) -> LoadOptions {
        LoadOptions { inline: inline.into_iter().collect(), tasks_optional: true, ..self.options.clone() }
    }
}

/// Which tasks a run call runs.
pub enum Selection {
    /// Tasks of the task files, with what they depend on.
    Named(Vec<String>),
    /// The inline tasks of the call (by name), with their task file.
    Inline { names: Vec<String>, source: Arc<SourceFile>, turn_cap: Option<u32> },
}

/// A run call: what to run, its budget, and where its news go.
pub struct RunCall {
    pub selection: Selection,
    pub max_cost: Option<f64>,
    pub cancel: Cancel,
    pub events: cassist_core::event::Events,
}

/// The outcome of a run call: one end per task run, and the warnings of
/// the plan.
pub struct Ran {
    pub ends: Vec<TaskEnd>,
    pub warnings: Vec<String>,
}

impl Serving {
    /// Runs a call's tasks as `cassist run` would, under the project lock
    /// (the calls of a server wait for each other as concurrent runs do).
    /// `finished` hears of each task as it ends.
    pub fn run(&self, call: RunCall, finished: &mut dyn FnMut(&TaskEnd)) -> Result<Ran, Refused> {
        let inline = match &call.selection {
            Selection::Inline { source, .. } => Some(source.clone()),
            Selection::Named(_) => None,
        };
        // Read and checked first: invalid input ends here, with nothing
        // written.
        let opts = self.options(inline);
        let loaded = cassist_core::plan::load(&self.cwd, &opts).map_err(|d| Refused(diagnostics(&d)))?;
        let root = loaded.project.root.clone();
        let _lock = cassist_core::store::ProjectLock::acquire(&root, || {
            cassist_core::errln!("waiting for another cassist run on this project to finish...")
        })
        .map_err(|e| Refused(format!("cannot lock {}: {e}", cassist_core::fsx::state_dir(&root).display())))?;
        crate::cmd::recover(&root, true);
        // The remote cache as in `run`: looked up for the tasks to run,
        // written with what passes (with a signing key).
        let remote = crate::cmd::open_remote(&loaded.project.config)?;
        let plan = crate::cmd::plan_with_remote(&self.cwd, &opts, loaded, remote.as_ref())?;
        let warnings = plan.warnings.iter().map(diagnostic).collect();
        let selected: Vec<PlannedTask> = match &call.selection {
            Selection::Named(names) => select(&plan, names)?.into_iter().cloned().collect(),
            Selection::Inline { names, turn_cap, .. } => plan
                .tasks
                .iter()
                .filter(|t| t.inline() && names.contains(&t.task.name))
                .map(|t| PlannedTask { turn_cap: *turn_cap, ..t.clone() })
                .collect(),
        };
        if call.cancel.is_cancelled() {
            return Err(Refused("cancelled before it started".into()));
        }
        let settings = Settings { keep_workspace: false, max_cost: call.max_cost, locked: false, quiet: false };
        let runner = prepare(plan, &settings)?.runner(call.cancel.clone(), call.events);
        let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
        let opts = cassist_run::scheduler::Options { jobs, keep_going: false, locked: false, no_cache: false };
        let outcome =
            cassist_run::scheduler::run(runner.clone(), selected.clone(), HashMap::new(), &opts, &mut |end| {
                finished(end);
                if let Some(remote) = &remote
                    && end.state() == cassist_core::event::TaskState::Passed
                {
                    remote.spawn_upload(&runner.plan.store, end.name(), &end.report.hash);
                }
            });
        // Every change was flushed: no layer is in use.
        cassist_run::workspace::remove_layers(&runner.workspaces);
        let cassist_run::scheduler::Outcome { reports, outputs, mut lock, touched, hashed_at_end, .. } = outcome;
        let mut moved = Vec::new();
        if touched && !call.cancel.is_cancelled() {
            moved = update_after_states(&runner.plan, &selected, &reports, &outputs, &hashed_at_end, &mut lock);
        }
        runner.plan.save_caches();
        if let Some(remote) = &remote {
            // A cancelled call waits for its uploads briefly, as an
            // interrupted run does.
            let wait = if call.cancel.is_cancelled() { std::time::Duration::from_secs(2) } else { UPLOAD_WAIT };
            finish_uploads(remote, &runner.plan.store, &moved, wait);
        }
        Ok(Ran { ends: reports, warnings })
    }
}
