//! Integration of a task that passed: its change becomes an integration
//! layer ([`crate::workspace::IntegrationLayer`]), the project's `build`
//! commands check that it still compiles on a throw-away layer over it,
//! the changes that passed before it and the user's tree (copy mode: a
//! throw-away copy of them), and it lands in the run's pending list, for
//! the flush to write into the user's tree when no task is running
//! ([`super::flush`]). Nothing the build writes reaches the user's tree, so
//! the agent's code it runs (a build script) cannot rewrite the project,
//! cassist's own files, `.git` or the store. A failed build drops the
//! change.
//!
//! The order is what makes a kill at any moment cost at most a replay,
//! never a second agent run: the task's store entry is written first
//! ([`super::record`]); the tree is written later, by the flush, as one
//! journaled transaction with the tasks' `cassist.lock` lines. A cassist
//! killed before the flush leaves the tree as it was and the store entry,
//! which makes the task `replay`.

use std::sync::Arc;

use crate::accept;
use crate::workspace::{IntegrateError, IntegrationLayer};
use cassist_core::changes::{ChangeSet, unified_diff};
use cassist_core::failpoint;
use cassist_core::store::Entry;

use super::flush::Landing;
use super::jail::Role;
use super::{Failure, TaskContext};

/// Where the change being integrated comes from.
pub enum Origin<'a> {
    /// The agent's change, accepted just now; `split`: the parts it passed
    /// with. It is recorded in the store before the tree is touched.
    Passed { split: &'a [cassist_core::part::Part] },
    /// A store entry's change, replayed.
    Replayed(&'a Entry),
}

/// Records the change (a passed task's), integrates it into the user's
/// tree and runs the `build` commands there (taking the change back out if
/// one fails); whether the task's store entry was written.
pub fn integrate_and_build(
    task: &mut TaskContext<'_>,
    changes: &ChangeSet,
    origin: Origin<'_>,
) -> Result<bool, Failure> {
    let runner = task.runner();
    let patch = task.record_dir().join("patch.diff");
    let _ = std::fs::write(&patch, runner.redactor.redact(&unified_diff(changes)));
    // What the agent wrote that .gitignore ignores is said, never dropped
    // silently; when it is all the agent wrote, the report says why nothing
    // was integrated.
    let ignored = task.workspace().ignored();
    if !task.read_only() && !ignored.is_empty() {
        let note = format!("not integrated, ignored by .gitignore: {}", some_paths(ignored));
        let note = runner.redactor.redact(&note);
        task.note(note.clone());
        if changes.is_empty() {
            task.set_nothing_integrated(note);
        }
    }
    let refused: Vec<String> = changes
        .changes
        .iter()
        .filter_map(|c| crate::workspace::never_written(c).map(|why| format!("{}: {why}", c.path)))
        .collect();
    if !refused.is_empty() {
        return Err(Failure::failed(format!("{}; nothing was integrated", IntegrateError::Refused(refused))));
    }
    // One change at a time is recorded, built and lands.
    let _one_at_a_time = runner.integration.write().unwrap_or_else(|e| e.into_inner());
    let date = cassist_core::lock::now_rfc3339();
    let (replayed, recorded) = match origin {
        Origin::Passed { split } => (None, task.record_passed(changes, split, &date)),
        Origin::Replayed(e) => (Some(e), None),
    };
    // The change as an integration layer, for the workspaces started from
    // now on and the build.
    let layer = if changes.is_empty() {
        None
    } else {
        task.phase("integrate", task.facts().attempts, format!("{} file(s)", changes.changes.len()));
        match IntegrationLayer::create(&runner.workspaces, task.name(), &[changes]) {
            Ok(layer) => Some(Arc::new(layer)),
            Err(e) => {
                task.withdraw(recorded);
                return Err(Failure::failed(format!("cannot write the change's layer: {e}; nothing was integrated")));
            }
        }
    };
    // The build checks the project as the change leaves it over what
    // passed before (nothing to build without a change), for a task that
    // runs the project's checks (the rule its hash follows too).
    if let Some(layer) = &layer
        && task.task().runs_project_checks()
        && !runner.plan.project.config.build.is_empty()
    {
        let stack: Vec<_> = std::iter::once(layer.clone()).chain(runner.view().0).collect();
        failpoint::hit("build-start");
        let built = build(task, stack);
        task.workspace_mut().end_scratch();
        failpoint::hit("build-end");
        if let Err((why, tail)) = built {
            task.withdraw(recorded);
            return Err(Failure::failed(format!("{why}; nothing was integrated")).with_tail(tail));
        }
    }
    land(task, changes, replayed, recorded, patch, layer)
}

/// Queues the change for the flush ([`super::flush`]), unless it conflicts
/// with what landed since the task started or with the user's edits.
fn land(
    task: &TaskContext<'_>,
    changes: &ChangeSet,
    replayed: Option<&Entry>,
    recorded: Option<super::record::Recorded>,
    patch: std::path::PathBuf,
    layer: Option<Arc<IntegrationLayer>>,
) -> Result<bool, Failure> {
    let was_recorded = recorded.is_some();
    let ws = task.workspace();
    let landing = Landing::new(task.task(), changes, replayed, recorded, patch.clone());
    match task.runner().land(landing, layer, ws.view) {
        Ok(()) => Ok(was_recorded),
        Err(conflicts) => Err(Failure::failed(conflicts.reason(&patch))),
    }
}

/// The `build` commands in order, on a throw-away layer over the user's
/// tree as integrated; the first that fails: why, and the end of its
/// output.
fn build(task: &mut TaskContext<'_>, stack: Vec<Arc<IntegrationLayer>>) -> Result<(), (String, String)> {
    task.workspace_mut()
        .begin_build_over(stack)
        .map_err(|e| (format!("cannot prepare the build layer after integration: {e}"), String::new()))?;
    let log = task.record_dir().join("build.log");
    for cmd in &task.runner().plan.project.config.build {
        task.phase("build", task.facts().attempts, cmd.clone());
        let why = match task.shell(Role::Build, cmd, Some(accept::DEFAULT_TIMEOUT), &log) {
            Ok(f) if f.success() => continue,
            Ok(f) => (super::failure::ended(&f), f.tail),
            Err(super::CommandError::OverLimit(over)) => {
                return Err((format!("the build command `{cmd}` after integration {over}"), over.tail.clone()));
            }
            Err(e) => (e.to_string(), String::new()),
        };
        return Err((format!("build command `{cmd}` failed after integration ({})", why.0), why.1));
    }
    Ok(())
}

/// At most ten of `paths`, then how many more.
pub fn some_paths(paths: &[String]) -> String {
    const SHOWN: usize = 10;
    let mut out = paths.iter().take(SHOWN).map(String::as_str).collect::<Vec<_>>().join(", ");
    if paths.len() > SHOWN {
        out.push_str(&format!(" (and {} more)", paths.len() - SHOWN));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn some_paths_names_ten_then_counts() {
        let paths: Vec<String> = (0..13).map(|i| format!("f{i}")).collect();
        assert_eq!(some_paths(&paths[..2]), "f0, f1");
        assert_eq!(some_paths(&paths), "f0, f1, f2, f3, f4, f5, f6, f7, f8, f9 (and 3 more)");
    }
}
