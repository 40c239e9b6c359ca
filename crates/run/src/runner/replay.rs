//! Replay of a recorded change: a task whose inputs are those of a stored
//! run while its change is not in the tree (state `replay`) calls no
//! agent. A stored change is trusted no more than an agent's (it may have
//! been edited by hand, or come from the team cache): before anything is
//! applied, its change list must be within `limits { files }` and hash to
//! its patch hash and to the one `cassist.lock` records for it, and it is
//! reviewed as a fresh change against the task's spec and config as they
//! are now ([`vet`]). It is then merged into a fresh workspace, three ways,
//! path by path (the `__apply-changes` helper, [`crate::apply`]); the
//! change read from that workspace is reviewed again, acceptance runs on
//! it, and exactly it is integrated ([`replay`]).
//!
//! A change refused at any of these steps is never a failure of the task:
//! the caller runs the agent instead, or, under `--locked`, refuses the
//! task ([`Refused`]).

use std::path::Path;

use crate::workspace::Layer;
use cassist_core::changes::{Change, ChangeSet, Hazard, Special};
use cassist_core::limits::Limits;
use cassist_core::plan::PlannedTask;
use cassist_core::store::{Entry, Store, StoredChange};

use super::acceptance::acceptance;
use super::integrate::{Origin, integrate_and_build};
use super::jail::Role;
use super::judge::{review_changes, review_for};
use super::{Failure, Runner, TaskContext};

/// Why a stored change is not replayed, in words that finish "warning:
/// task `NAME`: ...". The task runs its agent instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

/// Whether `entry`'s change may be applied for task `t`, before anything
/// is: within `limits { files }` (before any object is read), hashing to
/// its patch hash and to the lock line's when the lock records the entry,
/// and passing the whole review of a fresh change (scope, read-only, new
/// dependencies, secrets, cassist's own files, special files, limits).
pub fn vet(runner: &Runner, t: &PlannedTask, entry: &Entry) -> Result<(), Refused> {
    let plan = &runner.plan;
    let limits = plan.project.config.limits;
    let locked = plan.lock.tasks.get(&t.task.name).filter(|l| l.before == entry.before).map(|l| l.patch.as_str());
    cassist_core::store::check_entry(entry, limits.files, locked)
        .map_err(|why| Refused(format!("the stored change cannot be used: {why}")))?;
    let changes = stored_changes(&plan.store, &entry.changes, limits)?;
    let review = review_for(runner, t, &changes);
    if review.rejected() {
        return Err(Refused(format!("the stored change is refused: {}", review.reason().unwrap_or_default())));
    }
    // What is never written, whatever the review says (a path leaving the
    // project, say, which no agent's change can hold).
    if let Some((path, why)) =
        changes.changes.iter().find_map(|c| crate::workspace::never_written(c).map(|why| (&c.path, why)))
    {
        return Err(Refused(format!("the stored change is refused: {path}: {why}")));
    }
    Ok(())
}

/// The stored change as a change set, read within the limits as an
/// agent's change is: an object over `file-size`, or past `change-size`,
/// is never read (the review rejects it with its size).
fn stored_changes(store: &Store, stored: &[StoredChange], limits: Limits) -> Result<ChangeSet, Refused> {
    let mut used: u64 = 0;
    let mut changes = Vec::with_capacity(stored.len());
    for c in stored {
        let mut change = Change {
            path: c.path.clone(),
            kind: c.kind.clone(),
            old: None,
            new: None,
            mode: c.mode,
            hazard: None,
            old_mode: c.old_mode,
            base_unknown: false,
        };
        // A file type no change may hold is named as reading one would.
        change.hazard = Special::of_mode(c.mode).filter(|_| c.new.is_some()).map(Hazard::Special);
        if let Some(h) = c.new.as_ref().filter(|_| change.hazard.is_none()) {
            let size = store.object_len(h).map_err(|e| {
                Refused(format!("the stored change cannot be used: store object {h} (the new {}): {e}", c.path))
            })?;
            let room = limits.change_size.saturating_sub(used);
            if size <= limits.file_size {
                used = used.saturating_add(size);
            }
            if size > limits.file_size || size > room {
                change.hazard = Some(Hazard::Unread { size });
            } else {
                change.new = Some(store.get_object(h).map_err(|e| {
                    Refused(format!("the stored change cannot be used: store object {h} (the new {}): {e}", c.path))
                })?);
            }
        }
        // The content before, as far as it can be had within `file-size`
        // (without it, every line counts as new to the review).
        change.old = c
            .old
            .as_deref()
            .filter(|h| store.object_len(h).is_ok_and(|n| n <= limits.file_size))
            .and_then(|h| store.get_object(h).ok());
        changes.push(change);
    }
    Ok(ChangeSet { changes })
}

/// Replays `entry`'s change in the task's workspace: merged there,
/// reviewed, accepted, integrated. `Ok(Err(_))`: refused, nothing of it
/// integrated; `Err(_)`: the task fails (what cassist itself could not
/// do, or the change not landing).
pub fn replay(task: &mut TaskContext<'_>, entry: &Entry) -> Result<Result<ChangeSet, Refused>, Failure> {
    task.phase("replay", 0, format!("{} file(s)", entry.changes.len()));
    if let Err(refused) = merge_stored_change(task, entry)? {
        return Ok(Err(refused));
    }
    // What the merge left in the workspace is what is checked and lands.
    let changes = match task.read_changes_within_limits()? {
        Ok(changes) => changes,
        Err(too_many) => return Ok(Err(Refused(format!("the merged change is refused: {too_many}")))),
    };
    task.set_changed_files(&changes);
    let review = review_changes(task, &changes);
    if review.rejected() {
        let why = review.reason().unwrap_or_default();
        return Ok(Err(Refused(format!("the merged change is refused: {why}"))));
    }
    if let Some(f) = acceptance(task, 1)? {
        return Ok(Err(Refused(format!(
            "the replayed change no longer passes: acceptance command `{}` failed",
            f.command
        ))));
    }
    integrate_and_build(task, &changes, Origin::Replayed(entry))?;
    Ok(Ok(changes))
}

/// The stored change is merged into the workspace by a helper run through
/// the wrapper (so deletions are real there too), with the task's own
/// confinement. A conflict, or anything else that stops the helper,
/// refuses the replay; only a helper that could not be started fails the
/// task.
fn merge_stored_change(task: &TaskContext<'_>, entry: &Entry) -> Result<Result<(), Refused>, Failure> {
    let (runner, ws) = (task.runner(), task.workspace());
    let cannot = |e: &dyn std::fmt::Display| Failure::failed(format!("cannot replay the stored change: {e}"));
    let spec = ws.io_dir().map_err(|e| cannot(&e))?.join("replay.json");
    let doc = serde_json::json!({
        "store": runner.plan.store.dir(),
        "changes": entry.changes,
        "file_size": runner.plan.project.config.limits.file_size,
    });
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
        Ok(f) if f.success() => Ok(Ok(())),
        Ok(f) => Ok(Err(Refused(helper_said(&f.tail).unwrap_or_else(|| {
            format!("the stored change could not be written: the helper {}", super::failure::ended(&f))
        })))),
        Err(super::CommandError::OverLimit(over)) => {
            Err(Failure::over_limit("the helper that writes the stored change", &over))
        }
        Err(e) => Err(cannot(&e)),
    }
}

/// What the helper said when it stopped: its last `cassist: ` line
/// ("replay would conflict: PATH (why)", "refused to write PATH: why").
fn helper_said(tail: &str) -> Option<String> {
    let said = tail.lines().rev().find_map(|l| l.strip_prefix("cassist: "))?;
    Some(if said.starts_with("replay would conflict") {
        said.to_owned()
    } else {
        format!("the stored change could not be written: {said}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_helpers_last_word_is_the_reason() {
        let tail =
            "some output\ncassist: replay would conflict: notes.txt (both sides changed the same or adjacent lines)\n";
        assert_eq!(
            helper_said(tail).as_deref(),
            Some("replay would conflict: notes.txt (both sides changed the same or adjacent lines)")
        );
        assert_eq!(
            helper_said("cassist: refused to write .git/x: no\n").as_deref(),
            Some("the stored change could not be written: refused to write .git/x: no")
        );
        assert_eq!(helper_said("killed\n"), None);
    }

    #[test]
    fn a_stored_object_over_the_limits_is_never_read() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path());
        let big = store.put_object(&[b'x'; 2000]).unwrap();
        let small = store.put_object(b"small\n").unwrap();
        let change = |path: &str, new: &str| StoredChange {
            path: path.into(),
            kind: cassist_core::changes::ChangeKind::Added,
            old: None,
            new: Some(new.to_owned()),
            mode: 0o100644,
            old_mode: None,
        };
        let limits = Limits { file_size: 1000, change_size: 10, ..Limits::DEFAULT };
        let set =
            stored_changes(&store, &[change("big", &big), change("a", &small), change("b", &small)], limits).unwrap();
        let read: Vec<(Option<usize>, Option<Hazard>)> =
            set.changes.iter().map(|c| (c.new.as_ref().map(Vec::len), c.hazard.clone())).collect();
        // Over file-size; within; past change-size (6 + 6 > 10).
        assert_eq!(
            read,
            [(None, Some(Hazard::Unread { size: 2000 })), (Some(6), None), (None, Some(Hazard::Unread { size: 6 }))]
        );
        let missing = stored_changes(&store, &[change("gone", &"0".repeat(64))], Limits::DEFAULT).unwrap_err();
        assert!(missing.0.contains("the new gone"), "{missing:?}");
        // A fifo is a fifo, its object never read.
        let fifo = StoredChange { mode: 0o010644, ..change("pipe", &"0".repeat(64)) };
        let set = stored_changes(&store, &[fifo], Limits::DEFAULT).unwrap();
        assert_eq!(set.changes[0].hazard, Some(Hazard::Special(Special::Fifo)));
    }
}
