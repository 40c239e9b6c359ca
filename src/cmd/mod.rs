//! One file per subcommand; each returns `Ok(())` or an [`Error`], which
//! `main_entry` prints and maps to the exit code.

mod agents;
mod cache;
mod check;
mod complete;
mod demo;
mod error;
mod explain;
mod init;
mod plan;
mod prompt;
pub mod run;

use std::path::Path;

pub use complete::answer_shell;
pub use error::Error;

use crate::cli::{Command, TaskArgs};
use crate::report::Output;
use cassist_core::plan::{LoadOptions, Plan};
use cassist_core::team::TeamCache;

/// What a command gives back.
pub type Result<T = ()> = std::result::Result<T, Error>;

/// Runs `command` in `dir` (`-C`) or the current folder. The sandbox
/// wrapper is not a command: `main_entry` execs it before anything else.
pub fn run(command: Command, dir: Option<&Path>, out: &Output) -> Result {
    // A helper in a workspace: the folder it is started in is its own.
    if let Command::ApplyChanges { spec } = &command {
        return cassist_run::apply::apply_changes(spec).map_err(|e| Error::Helper(e.to_string()));
    }
    let cwd = enter(dir)?;
    dispatch(command, &cwd, out)
}

/// Goes into `dir` (`-C`) when given; the folder a command works in.
pub fn enter(dir: Option<&Path>) -> Result<std::path::PathBuf> {
    if let Some(dir) = dir {
        std::env::set_current_dir(dir).map_err(|e| Error::Input(format!("cannot use -C {}: {e}", dir.display())))?;
    }
    std::env::current_dir().map_err(|e| Error::Input(format!("cannot read the current folder: {e}")))
}

fn dispatch(command: Command, cwd: &Path, out: &Output) -> Result {
    // What reads the project's state first puts right what a killed
    // cassist left in it; `check` stays read-only; `run` does it once it
    // holds the project lock (`Session::open`).
    if matches!(command, Command::Plan { .. } | Command::Prompt { .. } | Command::Explain { .. } | Command::Cache(_)) {
        let root = cassist_core::project::find_root(cwd);
        cassist_run::session::recover(&std::fs::canonicalize(&root).unwrap_or(root), false);
    }
    match command {
        Command::Run(args) => run::run(cwd, &args, out),
        Command::Check(args) => check::run(cwd, &args, out),
        Command::Plan { tasks, json } => plan::run(cwd, &tasks, json, out),
        Command::Prompt { task, tasks } => prompt::run(cwd, &task, &tasks, out),
        Command::Explain { task, tasks, json } => explain::run(cwd, &task, &tasks, json, out),
        Command::Agents => agents::run(cwd, out),
        Command::Cache(c) => cache::run(cwd, &c, out),
        Command::Init => init::run(cwd, out),
        Command::Demo { folder } => demo::run(cwd, &folder, out),
        Command::SandboxProbe { .. } | Command::ApplyChanges { .. } => {
            unreachable!("the hidden helpers are run before any command")
        }
        Command::Mcp { .. } => unreachable!("the MCP server is started before any command (lib.rs)"),
        Command::Completions { shell } => complete::print_script(shell),
    }
}

pub fn load_options(args: &TaskArgs) -> LoadOptions {
    LoadOptions {
        paths: args.paths.clone(),
        agent: args.agent.clone(),
        model: args.model.clone(),
        ..LoadOptions::default()
    }
}

/// Loads and plans, printing the warnings.
fn load_plan(cwd: &Path, args: &TaskArgs, out: &Output) -> Result<Plan> {
    let loaded = cassist_core::plan::load(cwd, &load_options(args)).map_err(Error::Invalid)?;
    let plan = cassist_run::session::plan_loaded(loaded)?;
    out.print_diagnostics(&plan.warnings);
    Ok(plan)
}

/// Loads and plans with the remote cache: the tasks in state `run` are
/// looked up remotely ([`cassist_run::session::plan`]); the warnings are
/// printed.
fn load_plan_remote(cwd: &Path, args: &TaskArgs, out: &Output) -> Result<Plan> {
    let loaded = cassist_core::plan::load(cwd, &load_options(args)).map_err(Error::Invalid)?;
    let remote = open_remote(&loaded.project.config)?;
    let team = remote.as_ref().map(|r| r as &dyn TeamCache);
    let plan = cassist_run::session::plan(cwd, &load_options(args), loaded, team)?;
    out.print_diagnostics(&plan.warnings);
    Ok(plan)
}

/// The project's remote cache, if one is configured and not turned off
/// (`CASSIST_REMOTE=off`); a bad URL or key is invalid input.
pub fn open_remote(config: &cassist_core::spec::ProjectConfig) -> Result<Option<cassist_remote::Remote>> {
    cassist_remote::Remote::open(config).map_err(|d| Error::Invalid(vec![d]))
}

/// [`open_remote`] as the run pipeline takes it: the team cache behind its
/// trait.
pub fn open_team_cache(
    config: &cassist_core::spec::ProjectConfig,
) -> std::result::Result<Option<Box<dyn TeamCache>>, cassist_core::spec::SpecDiagnostic> {
    Ok(cassist_remote::Remote::open(config)?.map(|r| Box::new(r) as Box<dyn TeamCache>))
}

/// Serializes a `--json` document for stdout.
fn to_json(doc: &impl serde::Serialize) -> Result<String> {
    serde_json::to_string_pretty(doc).map_err(|e| Error::Internal(format!("cannot write JSON: {e}")))
}
