//! cassist's core: what a run is made of, read and decided, without running
//! anything. Task files and `cassist.kdl` are read into typed values
//! ([`spec`]); the tasks are planned ([`plan`]: context files resolved, the
//! DAG ordered, inputs hashed, states decided); results are kept in the
//! content-addressed [`store`] and `cassist.lock` ([`lock`]), and the
//! user's tree is written only through the crash-safe [`journal`].
//!
//! Nothing here starts a process: this crate does not depend on
//! `cassist-sandbox`, so the compiler keeps it that way. Agent versions are
//! handed in by the caller.
//!
//! The leaves many stages share: [`paths`] (globs, the project walker, the
//! one `.git`/`.cassist` rule, file stamps), [`fsx`] (atomic writes, the
//! `.cassist/` folder), [`event`] (task states, reports, progress events),
//! [`changes`] (change sets), [`limits`] (size limits), [`netaddr`] (the
//! hosts of the network allow-lists), [`part`] (a part of a split task),
//! [`template`] (the `{name}` placeholder syntax), [`text`], [`exit`] (the
//! exit codes), [`failpoint`] (the crash points of the kill tests).

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
/// (`cassist::main_entry`): its output is lost.
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

/// Whether a write to stdout failed other than by a closed pipe: the
/// command's output is lost, so it exits 1 even if it succeeded.
pub fn stdout_failed() -> bool {
    STDOUT_FAILED.load(std::sync::atomic::Ordering::SeqCst)
}

/// Writes to stderr ([`errln!`], [`err!`]); a failure (a closed pipe)
/// drops what is written, silently, and cassist goes on.
#[doc(hidden)]
pub fn write_stderr(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let _ = std::io::stderr().lock().write_fmt(args);
}

pub mod changes;
pub mod event;
pub mod exit;
pub mod failpoint;
pub mod fsx;
pub mod journal;
pub mod limits;
pub mod lock;
pub mod merge;
pub mod netaddr;
pub mod part;
pub mod paths;
pub mod plan;
pub mod project;
pub mod prompt;
pub mod spec;
pub mod store;
pub mod team;
pub mod template;
pub mod text;
