//! cassist: a declarative, reproducible task runner for coding agents.
//! This crate is the command line: [`cli`] (arguments), [`cmd`] (one file
//! per subcommand), [`report`] (every output), and above them [`mcp`]
//! (`cassist mcp`, the MCP server). What they run lives in the library
//! crates below (README, "Development"): `cassist-core` (spec, plan,
//! store, lock), `cassist-run` (the run pipeline), `cassist-remote` (the
//! team cache) and `cassist-sandbox` (spawning and the sandbox wrapper).

pub use cassist_core::{err, errln, out, outln};

pub mod cli;
pub mod cmd;
pub mod mcp;
pub mod report;

use cassist_core::exit;
use cassist_sandbox::sandbox;
use clap::Parser;

/// Runs the command line and returns the process exit code: the one
/// place a command's error is printed and mapped to its code.
pub fn main_entry() -> i32 {
    // The sandbox wrapper (`sandbox::ExecSpec::to_args`) must stay
    // single-threaded: it execs (or exits) before anything else runs.
    let mut args = std::env::args_os();
    if args.nth(1).is_some_and(|a| a == sandbox::WRAPPER_COMMAND) {
        sandbox::main(args)
    }
    // A shell asking what to complete (the scripts of `cassist completions`).
    cmd::answer_shell();
    let (out, result) = match cli::Cli::try_parse() {
        Ok(cli::Cli { dir, color, quiet, verbose, command }) => match command {
            cli::Command::SandboxProbe { dir, lower } => sandbox::probe(&dir, lower.as_deref()),
            // Above the commands: it runs tasks as `run` does, its own way.
            cli::Command::Mcp { tasks } => {
                let out = report::Output::new(color, quiet, verbose);
                (out, mcp::main(dir.as_deref(), &tasks))
            }
            command => {
                let out = report::Output::new(color, quiet, verbose);
                let result = cmd::run(command, dir.as_deref(), &out);
                (out, result)
            }
        },
        // clap prints its own message; no output flag was read.
        Err(e) => (report::Output::new(cli::ColorChoice::Auto, false, 0), Err(e.into())),
    };
    // Workspaces still being removed in the background go before cassist
    // does.
    cassist_run::workspace::finish_removals();
    match result {
        Ok(()) if cassist_core::stdout_failed() => exit::TASK_FAILED,
        Ok(()) => exit::SUCCESS,
        Err(e) => {
            e.print(&out);
            e.code()
        }
    }
}
