//! The exit codes cassist documents to its users (the README's
//! "Commands"), in one place.

/// Every task passed, was up-to-date or was replayed.
pub const SUCCESS: i32 = 0;
/// A task failed or was blocked.
pub const TASK_FAILED: i32 = 1;
/// Invalid input: CLI usage, a task file, the project config.
pub const INVALID_INPUT: i32 = 2;
/// `--locked` and an agent would be needed.
pub const LOCKED: i32 = 3;
/// Interrupted (Ctrl-C).
pub const INTERRUPTED: i32 = 130;
