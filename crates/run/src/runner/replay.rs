//! Replay of a recorded change: a task whose inputs are those of a stored
//! run while its change is not in the tree (state `replay`) calls no
//! agent; the stored change is written in a fresh workspace, reviewed for
//! security issues, acceptance is verified, and the change is integrated.

use std::path::Path;

use crate::workspace::Layer;
use cassist_core::changes::ChangeSet;
use cassist_core::store::Entry;

use super::acceptance::acceptance;
use super::integrate::{Origin, integrate_and_build};
use super::jail::Role;
use super::judge::review_changes;
use super::{Failure, TaskContext};

/// Replays `entry`'s change; the change that was integrated.
pub fn replay(task: &mut TaskContext<'_>, entry: &Entry) -> Result<ChangeSet, Failure> {
    task.phase("replay", 0, format!("{} file(s)", entry.changes.len()));
    write_stored_change(task, entry)?;
    let changes = task.read_changes()?;
    task.set_changed_files(&changes);
    // What must never land does not, even from a store entry.
    if let Some(f) = review_changes(task, &changes).first_security_issue() {
        return Err(Failure::failed(format!("the stored change is rejected as a security issue: {}", f.message)));
    }
    if let Some(f) = acceptance(task, 1)? {
        return Err(Failure::failed(format!(
            "the replayed change no longer passes: acceptance command `{}` failed; run with --no-cache to call the agent",
            f.command
        ))
        .with_tail(f.tail));
    }
    integrate_and_build(task, &changes, Origin::Replayed(entry))?;
    Ok(changes)
}

/// The stored change is written inside the workspace (a helper run through
/// the wrapper, so deletions are real there too).
fn write_stored_change(task: &TaskContext<'_>, entry: &Entry) -> Result<(), Failure> {
    let (runner, ws) = (task.runner(), task.workspace());
    let cannot = |e: &dyn std::fmt::Display| Failure::failed(format!("cannot replay the stored change: {e}"));
    let spec = ws.io_dir().map_err(|e| cannot(&e))?.join("replay.json");
    let doc = serde_json::json!({"store": runner.plan.store.dir(), "changes": entry.changes});
    std::fs::write(&spec, serde_json::to_vec(&doc).unwrap_or_default()).map_err(|e| cannot(&e))?;
    let exe = runner.exe.clone().into_os_string();
    let io = spec.parent().map(Path::to_path_buf);
    let jail = runner.jail(Role::Replay, task.task().sandbox, ws, io.as_deref(), None, task.base_env());
    let mut c = ws
        .sandboxed(Layer::Agent, vec![exe, "__apply-changes".into(), spec.into_os_string()], jail)
        .map_err(|e| cannot(&e))?;
    c.env = task.base_env().to_vec();
    c.transcript = Some(task.record_dir().join("replay.log"));
    match runner.run(&c) {
        Ok(f) if f.success() => Ok(()),
        Ok(f) => Err(cannot(&super::failure::ended(&f)).with_tail(f.tail)),
        Err(e) => Err(cannot(&e)),
    }
}
