//! The process runner: how cassist starts an agent or an acceptance command,
//! watches it, stops it and records what it printed.
//!
//! Modelled on cargo-nextest's runner:
//!
//! - the child gets its **own process group**, so the whole tree it spawns
//!   can be signalled at once (and a Ctrl-C on the terminal reaches cassist
//!   only, which then stops every child on purpose through [`Cancel`]);
//! - on **timeout or cancel**: `SIGTERM` to the group, a grace period, then
//!   `SIGKILL` to the group;
//! - when the direct child exits on its own, whatever it left behind in its
//!   group is killed too (the group is signalled while the exited child is
//!   still an unreaped zombie, so the group id cannot have been reused);
//! - the command is built by duct (program, arguments, environment,
//!   folder, stdio) and started by the standard library, with
//!   `posix_spawn` (no copy of cassist's address space) unless it must
//!   die with cassist, which needs a hook between `fork` and `exec`
//!   ([`Command::die_with_cassist`]); everything else here is cassist's
//!   own layer around it;
//! - the environment is exactly [`Command::env`], never the parent's;
//! - stdout and stderr share one pipe, read in 64 KiB chunks and streamed
//!   through a [`RedactingWriter`] to the transcript file as they come; only
//!   the last [`Command::tail_limit`] bytes are kept in memory, so memory
//!   stays constant whatever the child prints; the transcript keeps the
//!   first and the last half of [`Command::transcript_limit`] bytes, with a
//!   marker line where the middle was cut (the last half is a ring inside
//!   the file, so disk use is bounded too);
//! - stdin is written as the pipe takes it (non-blocking), so a child that
//!   never reads it cannot block us;
//! - waiting is event-driven: one `poll` selects the child's exit (a
//!   pidfd), the [`Cancel`] token (an eventfd), both pipes and the next
//!   deadline together, on the calling thread;
//! - recording never breaks the run: a transcript that cannot be written is
//!   reported in [`Finished::transcript_error`], the child runs on.
//!
//! A process that escapes its group (`setsid`) cannot be found by group; once
//! the child is gone, cassist stops reading output it may still hold open
//! after [`DRAIN_LIMIT`], so [`run`] returns in bounded time anyway.
//!
//! One module for each concern, everything used outside re-exported here:
//! `command` (what to run, how it ended), `program` (the `PATH` lookup),
//! `runner` ([`run`]: the spawn and the one `poll` loop), `wait` (the
//! child's exit as an fd), `group` (the process groups of the commands
//! running now), `capture` and `transcript` (output kept bounded in memory
//! and on disk), `kill_scan` (the out-of-memory hint), `redact` (secrets
//! out of what is kept), `cancel` (the token that stops runs) and `error`
//! (why a command could not be run).

mod cancel;
mod capture;
mod command;
mod error;
mod group;
mod kill_scan;
mod program;
mod redact;
mod runner;
#[cfg(test)]
mod test_support;
mod transcript;
mod wait;

use std::time::Duration;

pub use cancel::Cancel;
pub use command::{Command, Finished, NEVER_PASSED, Outcome};
pub use error::RunError;
pub use group::{kill_all_groups, live_group_members};
pub use program::{find_in_path, is_executable_file};
pub use redact::{MIN_SECRET_LEN, REDACTED, RedactingWriter, Redactor, SECRET_NAME_PARTS};
pub use runner::run;

/// Size of one read of the child's output.
pub const CHUNK: usize = 64 * 1024;

/// How long output is still read once the child has been reaped and its
/// group killed (only a process that escaped the group can hold it longer).
pub const DRAIN_LIMIT: Duration = Duration::from_secs(1);

/// How much of a command's output its transcript keeps unless the caller
/// says otherwise ([`Command::transcript_limit`]; the project's `limits`
/// set it for task commands).
pub const DEFAULT_TRANSCRIPT_LIMIT: u64 = 64 << 20;
