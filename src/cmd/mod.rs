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
use cassist_core::plan::{LoadOptions, Loaded, Plan};

/// What a command gives back.
pub type Result<T = ()> = std::result::Result<T, Error>;

/// Runs `command` in `dir` (`-C`) or the current folder. The sandbox
/// wrapper is not a command: `main_entry` execs it before anything else.
pub fn run(command: Command, dir: Option<&Path>, out: &Output) -> Result {
    // A helper in a workspace: the folder it is started in is its own.
    if let Command::ApplyChanges { spec } = &command {
        return cassist_run::cache::apply_changes(spec).map_err(Error::Helper);
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
    // holds the project lock (cmd/run.rs).
    if matches!(command, Command::Plan { .. } | Command::Prompt { .. } | Command::Explain { .. } | Command::Cache(_)) {
        let root = cassist_core::project::find_root(cwd);
        recover(&std::fs::canonicalize(&root).unwrap_or(root), false);
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

/// Completes or rolls back an integration a killed cassist left in the
/// project at `root`, and removes its stray temp files (SPEC 3.9), saying
/// so in one line. Under the project lock: `held` when the command holds
/// it; otherwise it is taken for the moment, and when another cassist
/// holds it (a run in progress: the integration is its own) nothing is
/// done.
pub fn recover(root: &Path, held: bool) {
    if !cassist_core::journal::pending(root) {
        return;
    }
    let _lock = match held {
        true => None,
        false => match cassist_core::store::ProjectLock::try_acquire(root) {
            Ok(Some(lock)) => Some(lock),
            _ => return,
        },
    };
    if let Some(done) = cassist_core::journal::recover(root) {
        cassist_core::errln!("note: {done}");
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

/// Hashes loaded tasks into a plan. The version of each built-in agent the
/// tasks may use is part of their hashes: its CLI is asked here, at the
/// command edge (planning runs nothing), through the cache in
/// `.cassist/cache/agent-versions` (an unchanged CLI is not asked again).
pub fn plan_loaded(loaded: Loaded) -> Result<Plan> {
    let state = cassist_core::fsx::state_dir(&loaded.project.root);
    let versions = loaded
        .builtin_agents()
        .into_iter()
        .map(|name| {
            let version = cassist_run::agent::cached_version(&state, &name);
            (name, version)
        })
        .collect();
    cassist_core::plan::timing("agent versions");
    cassist_core::plan::plan(loaded, versions).map_err(|d| Error::Invalid(vec![d]))
}

/// Loads and plans, printing the warnings.
fn load_plan(cwd: &Path, args: &TaskArgs, out: &Output) -> Result<Plan> {
    let loaded = cassist_core::plan::load(cwd, &load_options(args)).map_err(Error::Invalid)?;
    let plan = plan_loaded(loaded)?;
    out.print_diagnostics(&plan.warnings);
    Ok(plan)
}

/// Loads and plans with the remote cache: the tasks in state `run` are
/// looked up remotely ([`plan_with_remote`]); the warnings are printed.
fn load_plan_remote(cwd: &Path, args: &TaskArgs, out: &Output) -> Result<Plan> {
    let loaded = cassist_core::plan::load(cwd, &load_options(args)).map_err(Error::Invalid)?;
    let remote = open_remote(&loaded.project.config)?;
    let plan = plan_with_remote(cwd, &load_options(args), loaded, remote.as_ref())?;
    out.print_diagnostics(&plan.warnings);
    Ok(plan)
}

/// The project's remote cache, if one is configured and not turned off
/// (`CASSIST_REMOTE=off`); a bad URL or key is invalid input.
pub fn open_remote(config: &cassist_core::spec::ProjectConfig) -> Result<Option<cassist_remote::Remote>> {
    cassist_remote::Remote::open(config).map_err(|d| Error::Invalid(vec![d]))
}

/// Plans `loaded`; with a remote, the tasks in state `run` are looked up
/// there (all at once, in parallel) and what is fetched lands in the local
/// store, where planning finds it as any entry (a cache fill, like a Nix
/// substituter: planning itself never reaches the network). A task
/// fetched this way may change what its dependents hash to, so the plan
/// is made again until a round fetches nothing. The tasks replayed from a
/// fetched entry are marked `remote`. Warnings go with the plan's.
pub fn plan_with_remote(
    cwd: &Path,
    opts: &LoadOptions,
    loaded: Loaded,
    remote: Option<&cassist_remote::Remote>,
) -> Result<Plan> {
    let mut plan = plan_loaded(loaded)?;
    let Some(remote) = remote else {
        mark_fetched(&mut plan, Default::default());
        return Ok(plan);
    };
    let mut asked: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut fetched: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut warnings = Vec::new();
    loop {
        let wanted: Vec<(String, String)> = plan
            .tasks
            .iter()
            .filter(|t| t.state == cassist_core::plan::State::Run)
            .flat_map(|t| {
                // Its inputs; and, when they are the lock's after-state
                // (outputs edited, the store's entry gone), the entry the
                // lock names.
                let line = plan.lock.tasks.get(&t.task.name).filter(|l| l.after == t.hash);
                std::iter::once(t.hash.clone()).chain(line.map(|l| l.before.clone())).map(|h| (t.task.name.clone(), h))
            })
            .filter(|(_, h)| asked.insert(h.clone()))
            .collect();
        if wanted.is_empty() {
            break;
        }
        let fill = remote.fill(&plan.store, &wanted);
        warnings.extend(fill.warnings);
        if fill.fetched.is_empty() {
            break;
        }
        fetched.extend(fill.fetched);
        let loaded = cassist_core::plan::load(cwd, opts).map_err(Error::Invalid)?;
        plan = plan_loaded(loaded)?;
    }
    mark_fetched(&mut plan, fetched);
    plan.warnings.extend(warnings.into_iter().map(|w| cassist_core::spec::SpecDiagnostic::warning("remote-cache", w)));
    Ok(plan)
}

/// Marks the tasks that replay an entry fetched from the remote cache, now
/// (`fetched`) or earlier (the store says so).
fn mark_fetched(plan: &mut Plan, mut fetched: std::collections::HashSet<String>) {
    for t in &plan.tasks {
        if let Some(e) = &t.cached.entry
            && t.state == cassist_core::plan::State::Replay
            && plan.store.was_fetched(e)
        {
            fetched.insert(e.clone());
        }
    }
    plan.remote_entries = fetched;
    let remote: Vec<bool> = plan.tasks.iter().map(|t| plan.from_remote(t)).collect();
    for (t, remote) in plan.tasks.iter_mut().zip(remote) {
        t.cached.remote = remote;
    }
}

/// Serializes a `--json` document for stdout.
fn to_json(doc: &impl serde::Serialize) -> Result<String> {
    serde_json::to_string_pretty(doc).map_err(|e| Error::Internal(format!("cannot write JSON: {e}")))
}
