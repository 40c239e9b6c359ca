//! What the tools do, on blocking threads: plan the project (with the
//! call's inline tasks), and run a selection of its tasks through the same
//! run pipeline as `cassist run` ([`cassist_run::session`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use crate::cmd::Error;
use cassist_core::event::TaskEnd;
use cassist_core::plan::{INLINE_SOURCE, LoadOptions, Plan, PlannedTask};
use cassist_core::spec::{SourceFile, SpecDiagnostic};
use cassist_core::team::TeamCache;
use cassist_run::session::{Session, Settings, Sink};
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

impl From<cassist_run::session::Error> for Refused {
    fn from(e: cassist_run::session::Error) -> Refused {
        Error::from(e).into()
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
        Ok(cassist_run::session::plan(&self.cwd, &opts, loaded, remote.as_ref().map(|r| r as &dyn TeamCache))?)
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
        // Read and checked, locked, recovered and planned as in `run`: the
        // team cache is looked up for the tasks to run and written with what
        // passes (with a signing key).
        let session = Session::open(&self.cwd, &self.options(inline), &crate::cmd::open_team_cache, true)?;
        let plan = session.plan();
        let warnings = plan.warnings.iter().map(diagnostic).collect();
        let selected: Vec<PlannedTask> = match &call.selection {
            Selection::Named(names) => session.select(names)?,
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
        let settings = Settings { max_cost: call.max_cost, ..Settings::new() };
        let prepared = session.prepare(settings)?;
        let ran = prepared.run(selected, HashMap::new(), call.cancel.clone(), call.events, &mut Told(finished));
        let ends = ran.reports.clone();
        // A cancelled call waits for its uploads briefly, as an interrupted
        // run does.
        for w in ran.finish() {
            cassist_core::errln!("warning: {w}");
        }
        Ok(Ran { ends, warnings })
    }
}

/// A call's sink: the caller hears of each task as it ends.
struct Told<'a>(&'a mut dyn FnMut(&TaskEnd));

impl Sink for Told<'_> {
    fn finished(&mut self, end: &TaskEnd) {
        (self.0)(end)
    }
}
