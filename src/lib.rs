//! cassist: a declarative, reproducible task runner for coding agents.
//!
//! Data and imports flow one way, spec → plan → scheduler → runner →
//! report. The modules by layer; each imports only from its own layer and
//! those listed before it (a unit test, `layering.rs`, keeps it so):
//!
//! - Leaves, shared by many stages, importing nothing of the crate:
//!   [`paths`] (globs, the project walker, the one `.git`/`.cassist` rule,
//!   file stamps), [`fsx`] (atomic writes, the `.cassist/` folder),
//!   [`event`] (task states, reports, progress events), [`changes`] (change
//!   sets), [`limits`] (size limits, sizes read and shown), [`part`] (a part
//!   of a split task), [`template`] (the `{name}` placeholder syntax),
//!   [`text`], [`exit`] (the exit codes), [`failpoint`] (the crash points
//!   of the kill tests).
//! - [`spec`]: task files and `cassist.kdl` read into typed values; imports
//!   leaves only.
//! - What planning builds on: [`prompt`] (rendering the prompt),
//!   [`project`] (the root and its config), [`lock`] (`cassist.lock`),
//!   [`store`] (the content-addressed store), [`journal`] (crash-safe,
//!   journaled writes of the user's tree, and their recovery).
//! - [`plan`]: context files resolved, the DAG ordered, inputs hashed. It
//!   starts no process: agent versions are handed in by the command layer.
//! - Running tasks: [`process`] (the spawner), [`sandbox`] (the namespace
//!   wrapper), [`entry`] (one entry of a workspace read safely),
//!   [`workspace`], [`agent`], [`review`], [`accept`], [`split`],
//!   [`runner`] (one task), [`cache`] (recording and replaying results),
//!   [`scheduler`] (the batch).
//! - The edge: [`cli`] (arguments), [`report`] (every output), [`cmd`] (one
//!   file per subcommand).

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
pub mod entry;
pub mod event;
pub mod exit;
pub mod failpoint;
pub mod fsx;
pub mod journal;
pub mod limits;
pub mod lock;
pub mod part;
pub mod paths;
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
pub mod template;
pub mod text;
pub mod workspace;

#[cfg(test)]
mod layering;

use clap::Parser;

/// Runs the command line and returns the process exit code: the one
/// place a command's error is printed and mapped to its code.
pub fn main_entry() -> i32 {
    let (out, result) = match cli::Cli::try_parse() {
        Ok(cli::Cli { dir, color, quiet, verbose, command }) => match command {
            // The sandbox wrapper must stay single-threaded: it execs (or
            // exits) before anything else runs.
            cli::Command::SandboxExec {
                mount_at,
                lower,
                upper,
                work,
                hide,
                keep,
                read_only,
                cwd,
                namespaces,
                confined,
                landlock,
                write,
                grace_ms,
                state,
                state_dir,
                shared,
                argv,
            } => {
                let overlay = match (mount_at, upper, work) {
                    (Some(target), Some(upper), Some(work)) => {
                        Some(sandbox::Overlay { target, lowers: lower, upper, work })
                    }
                    _ => None,
                };
                sandbox::exec(&sandbox::ExecSpec {
                    namespaces,
                    overlay,
                    confined,
                    hide,
                    keep,
                    read_only,
                    cwd,
                    writable: write,
                    landlock,
                    grace: grace_ms.map(std::time::Duration::from_millis),
                    state: state_dir.map(|dir| sandbox::StateViews { paths: state, dir, shared }),
                    argv,
                })
            }
            cli::Command::SandboxProbe { dir, lower } => sandbox::probe(&dir, lower.as_deref()),
            command => {
                let out = report::Output::new(color, quiet, verbose);
                let result = cmd::run(command, dir.as_deref(), &out);
                (out, result)
            }
        },
        // clap prints its own message; no output flag was read.
        Err(e) => (report::Output::new(cli::ColorChoice::Auto, false, 0), Err(e.into())),
    };
    match result {
        Ok(()) => exit::SUCCESS,
        Err(e) => {
            e.print(&out);
            e.code()
        }
    }
}
