//! One file per subcommand; each returns an exit code.

mod agents;
mod cache;
mod check;
mod explain;
mod init;
mod plan;
mod prompt;
mod run;

use std::path::Path;

use crate::cli::{Command, TaskArgs};
use crate::plan::{LoadOptions, Plan};
use crate::report::Output;

pub fn dispatch(command: Command, cwd: &Path, out: &Output) -> i32 {
    match command {
        Command::Run(args) => run::run(cwd, &args, out),
        Command::Check(args) => check::run(cwd, &args, out),
        Command::Plan { tasks, json } => plan::run(cwd, &tasks, json, out),
        Command::Prompt { task, tasks } => prompt::run(cwd, &task, &tasks, out),
        Command::Explain { task, tasks, json } => explain::run(cwd, &task, &tasks, json, out),
        Command::Agents => agents::run(cwd, out),
        Command::Cache(c) => cache::run(cwd, &c, out),
        Command::Init => init::run(cwd, out),
        Command::SandboxExec { .. } | Command::SandboxProbe { .. } | Command::ApplyChanges { .. } => {
            crate::exit::INVALID_INPUT
        }
        Command::Completions { shell } => {
            let mut cmd = <crate::cli::Cli as clap::CommandFactory>::command();
            let mut buf = Vec::new();
            clap_complete::generate(shell, &mut cmd, "cassist", &mut buf);
            crate::out!("{}", String::from_utf8_lossy(&buf));
            crate::exit::SUCCESS
        }
    }
}

fn load_options(args: &TaskArgs) -> LoadOptions {
    LoadOptions { paths: args.paths.clone(), agent: args.agent.clone() }
}

/// Loads and plans, printing diagnostics; `Err` holds the exit code.
fn plan_or_exit(cwd: &Path, args: &TaskArgs, out: &Output) -> Result<Plan, i32> {
    match crate::plan::load_and_plan(cwd, &load_options(args)) {
        Ok(plan) => {
            out.print_diagnostics(&plan.warnings);
            Ok(plan)
        }
        Err(diags) => {
            out.print_diagnostics(&diags);
            Err(crate::exit::INVALID_INPUT)
        }
    }
}
