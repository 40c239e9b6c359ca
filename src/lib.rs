//! cassist: a declarative, reproducible task runner for coding agents.
//!
//! The pipeline, one stage per module: [`spec`] reads task files and the
//! config into typed values, [`plan`] resolves context files, orders the
//! DAG and hashes inputs, [`prompt`] renders what an agent is given,
//! [`store`] keeps state under `.cassist/`, [`report`] shows it all.

/// `println!` to stdout that ends the process quietly when the reader has
/// gone away (`cassist plan --json | head`), instead of panicking.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        if let Err(e) = writeln!(out, $($arg)*).and_then(|_| out.flush()) {
            $crate::report::stdout_failed(e);
        }
    }};
}

/// `print!` counterpart of [`outln!`].
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        if let Err(e) = write!(out, $($arg)*).and_then(|_| out.flush()) {
            $crate::report::stdout_failed(e);
        }
    }};
}

pub mod accept;
pub mod agent;
pub mod cache;
pub mod changes;
pub mod cli;
pub mod cmd;
pub mod event;
pub mod exit;
pub mod lock;
pub mod plan;
pub mod process;
pub mod project;
pub mod prompt;
pub mod report;
pub mod review;
pub mod runner;
pub mod sandbox;
pub mod scheduler;
pub mod spec;
pub mod split;
pub mod store;
pub mod text;
pub mod workspace;

use clap::Parser;

/// Runs the command line and returns the process exit code.
pub fn main_entry() -> i32 {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { exit::INVALID_INPUT } else { exit::SUCCESS };
        }
    };
    // The sandbox wrapper must stay single-threaded: handled before anything
    // else runs.
    match cli.command {
        cli::Command::SandboxExec { lower, upper, work, cwd, landlock, write, argv } => {
            let overlay = match (lower, upper, work) {
                (Some(lower), Some(upper), Some(work)) => Some(sandbox::Overlay { lower, upper, work }),
                _ => None,
            };
            sandbox::exec(&sandbox::ExecSpec { overlay, cwd, writable: landlock.then_some(write), argv })
        }
        cli::Command::SandboxProbe { dir, lower } => sandbox::probe(&dir, lower.as_deref()),
        cli::Command::ApplyChanges { spec } => std::process::exit(match cache::apply_changes(&spec) {
            Ok(()) => exit::SUCCESS,
            Err(e) => {
                eprintln!("cassist: {e}");
                exit::TASK_FAILED
            }
        }),
        _ => {}
    }
    let out = report::Output::new(cli.color, cli.quiet, cli.verbose);
    if let Some(dir) = &cli.dir
        && let Err(e) = std::env::set_current_dir(dir)
    {
        eprintln!("error: cannot use -C {}: {e}", dir.display());
        return exit::INVALID_INPUT;
    }
    let cwd = match std::env::current_dir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: cannot read the current folder: {e}");
            return exit::INVALID_INPUT;
        }
    };
    cmd::dispatch(cli.command, &cwd, &out)
}
