//! How cassist starts a process: [`process`], the one spawner (process
//! groups, event-driven waits, bounded and redacted capture, cancellation
//! and the grace kill), and [`sandbox`], the wrapper every command of a task
//! starts through (user, mount and PID namespaces, overlay mounts, Landlock,
//! no capabilities), which the `cassist-sandbox` program runs.
//!
//! This crate depends on nothing else of cassist: the wrapper program links
//! it alone.

pub mod process;
pub mod sandbox;

/// A line on stderr that never panics (a closed pipe drops it).
pub(crate) fn say(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "{args}");
}
