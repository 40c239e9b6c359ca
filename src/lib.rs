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
//! - [`remote`]: the team cache (a remote store behind the local one,
//!   signed entries); the command layer uses it, planning never does.
//! - Running tasks: [`process`] (the spawner), [`sandbox`] (the namespace
//!   wrapper), [`entry`] (one entry of a workspace read safely),
//!   [`workspace`], [`agent`], [`review`], [`accept`], [`split`],
//!   [`runner`] (one task), [`cache`] (recording and replaying results),
//!   [`scheduler`] (the batch).
//! - The edge: [`cli`] (arguments), [`report`] (every output), [`cmd`] (one
//!   file per subcommand), and above it [`mcp`] (`cassist mcp`: the MCP
//!   server, which runs tasks through `run`'s preparation).

/// `println!` that never panics and never stops cassist: a reader that
/// went away (`cassist plan --json | head`) loses the rest of the output,
/// and the command still does its work and exits with its own code
/// ([`write_stdout`]). The one way cassist writes its standard output.
#[macro_export]
macro_rules! outln {
    () => {
        $crate::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` counterpart of [`outln!`].
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::write_stdout(format_args!($($arg)*))
    };
}

/// `eprintln!` that never panics and never stops cassist
/// ([`write_stderr`]): `cassist run 2>&1 | head -1` runs to its end. The
/// one way cassist writes its standard error.
#[macro_export]
macro_rules! errln {
    () => {
        $crate::write_stderr(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::write_stderr(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprint!` counterpart of [`errln!`].
#[macro_export]
macro_rules! err {
    ($($arg:tt)*) => {
        $crate::write_stderr(format_args!($($arg)*))
    };
}

/// A failure to write stdout other than a closed pipe (a full disk, say).
static STDOUT_FAILED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Writes to stdout, flushed ([`outln!`], [`out!`]). A closed pipe drops
/// what is written, silently: the reader has all it wanted, and cassist
/// goes on (a run has agents to stop, workspaces to remove, a tree to
/// leave whole and its exit code to give). Any other failure is said once
/// on stderr, and the command then exits 1 even if it succeeded
/// ([`main_entry`]): its output is lost.
#[doc(hidden)]
pub fn write_stdout(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush())
        && e.kind() != std::io::ErrorKind::BrokenPipe
        && !STDOUT_FAILED.swap(true, std::sync::atomic::Ordering::SeqCst)
    {
        errln!("error: cannot write to standard output: {e}");
    }
}

/// Writes to stderr ([`errln!`], [`err!`]); a failure (a closed pipe)
/// drops what is written, silently, and cassist goes on.
#[doc(hidden)]
pub fn write_stderr(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let _ = std::io::stderr().lock().write_fmt(args);
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
pub mod mcp;
pub mod part;
pub mod paths;
pub mod plan;
pub mod process;
pub mod project;
pub mod prompt;
pub mod remote;
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
    workspace::finish_removals();
    match result {
        Ok(()) if STDOUT_FAILED.load(std::sync::atomic::Ordering::SeqCst) => exit::TASK_FAILED,
        Ok(()) => exit::SUCCESS,
        Err(e) => {
            e.print(&out);
            e.code()
        }
    }
}
