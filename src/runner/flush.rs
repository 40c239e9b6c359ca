//! Integration layers and the quiescent flush (issue 13, decisions 1 and
//! 2). A task that passes does not write the user's tree: its change
//! becomes an immutable integration layer ([`IntegrationLayer`]) that
//! workspaces started from then on stack over the project, and a
//! [`Landing`] waits in the run's [`Pending`] list. The scheduler calls
//! [`Runner::flush`] when no task is running (after every task with `-j
//! 1`, at the end of a wave with `-j N`, after Ctrl-C): every pending
//! change is written, in order, as one journaled transaction with the
//! tasks' `cassist.lock` lines. So the lower layers of a mounted overlay
//! never change, and a task's view is the tree as it started plus what
//! had passed by then.
//!
//! Conflicts are found from changed paths, O(change): when a task lands,
//! a path that a change landed since it started also changed, or that
//! the user changed in the tree since ([`crate::workspace::conflicts`]);
//! at the flush the tree check runs again, and a change that conflicts
//! is not written, nor any later one that touches its paths or depends
//! on its task.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use crate::changes::ChangeSet;
use crate::failpoint;
use crate::lock::LockLine;
use crate::plan::PlannedTask;
use crate::store::Entry;
use crate::workspace::{self, IntegrationLayer};

use super::Runner;
use super::record::{Recorded, lock_line};

/// More pending layers than this are merged into one for the workspaces
/// started from then on: overlayfs stacks a few hundred layers at most,
/// and the mount options fit one page.
pub const MERGE_PAST: usize = 16;

/// A passed (or replayed) task's change, waiting for the flush.
pub struct Landing {
    pub t: PlannedTask,
    pub changes: ChangeSet,
    /// When its task started ([`workspace::start_stamp`]).
    pub started: i128,
    /// The store entry it was replayed from.
    pub replayed: Option<Entry>,
    /// The store entry its pass wrote (taken back if it is not written).
    pub recorded: Option<Recorded>,
    /// Where its patch is kept (named when it is not written).
    pub patch: PathBuf,
    /// The order it landed in.
    seq: u64,
}

/// The changes waiting for the flush, and the layers workspaces stack.
#[derive(Default)]
pub struct Pending {
    landings: Vec<Landing>,
    /// Newest first: what a workspace started now stacks over the project.
    stack: Vec<Arc<IntegrationLayer>>,
    /// Landings so far (a workspace remembers how many it saw).
    seq: u64,
}

/// What the flush did with a task's change.
pub enum Flushed {
    /// Written; its lock line (none under `--locked`, or when the lock's
    /// line stands).
    Written { task: String, line: Option<LockLine> },
    /// Not written, and why: the task fails.
    NotWritten { task: String, reason: String },
}

impl Runner {
    /// What a workspace started now sees: the pending layers, newest
    /// first, and how many changes had landed.
    pub fn view(&self) -> (Vec<Arc<IntegrationLayer>>, u64) {
        let pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        (pending.stack.clone(), pending.seq)
    }

    /// Queues a change that passed, with its layer (none for an empty
    /// change): unless a change landed since its task started (`seen`
    /// landings before) touches one of its paths, or the user changed one
    /// in the tree meanwhile, which are the conflicts returned (its store
    /// entry is then taken back).
    pub fn land(
        &self,
        mut landing: Landing,
        layer: Option<Arc<IntegrationLayer>>,
        seen: u64,
        in_view: &dyn Fn(&str) -> bool,
    ) -> Result<(), Vec<String>> {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let paths: BTreeSet<&str> = changed_paths(&landing.changes);
        let mut conflicts: BTreeSet<String> = pending
            .landings
            .iter()
            .filter(|l| l.seq >= seen)
            .flat_map(|l| {
                changed_paths(&l.changes)
                    .into_iter()
                    .filter(|p| paths.contains(p))
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .collect();
        conflicts.extend(workspace::conflicts(&self.plan.project.root, &landing.changes, landing.started, in_view));
        if !conflicts.is_empty() {
            withdraw(self, landing.recorded.take());
            return Err(conflicts.into_iter().collect());
        }
        landing.seq = pending.seq;
        pending.seq += 1;
        pending.landings.push(landing);
        if let Some(layer) = layer {
            pending.stack.insert(0, layer);
        }
        if pending.stack.len() > MERGE_PAST {
            let sets: Vec<&ChangeSet> = pending.landings.iter().map(|l| &l.changes).collect();
            // Should merging fail, the stack stays as it is (longer).
            if let Ok(merged) = IntegrationLayer::create(&self.workspaces, "merged", &sets) {
                pending.stack = vec![Arc::new(merged)];
            }
        }
        Ok(())
    }

    /// Writes every pending change into the user's tree, in order, as one
    /// journaled transaction with their lock lines; called only when no
    /// task is running. A change the user's tree conflicts with now is not
    /// written, nor any later one that touches its paths or whose task
    /// depends on its task.
    pub fn flush(&self) -> Vec<Flushed> {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let landings = std::mem::take(&mut pending.landings);
        // Nothing uses the layers once written: a workspace started after
        // the flush sees the tree.
        pending.stack.clear();
        drop(pending);
        if landings.is_empty() {
            return Vec::new();
        }
        let _one_writer = self.integration.write().unwrap_or_else(|e| e.into_inner());
        let root = &self.plan.project.root;
        let mut out = Vec::new();
        let mut kept: Vec<Landing> = Vec::new();
        let mut dropped_paths: BTreeSet<String> = BTreeSet::new();
        let mut dropped_tasks: HashSet<String> = HashSet::new();
        for mut l in landings {
            let kept_paths: BTreeSet<&str> = kept.iter().flat_map(|k| changed_paths(&k.changes)).collect();
            let in_view = |p: &str| kept_paths.contains(p);
            let paths = changed_paths(&l.changes);
            let user = workspace::conflicts(root, &l.changes, l.started, &in_view);
            let reason = if !user.is_empty() {
                Some(format!(
                    "conflict: {} changed in the project while the task ran; nothing was integrated (the patch is in {})",
                    user.join(", "),
                    l.patch.display()
                ))
            } else if let Some(dep) = l.t.key.spec.depends_on.iter().find(|d| dropped_tasks.contains(*d)) {
                Some(format!(
                    "dependency `{dep}` could not be integrated; nothing was integrated (the patch is in {})",
                    l.patch.display()
                ))
            } else if let Some(p) = paths.iter().find(|p| dropped_paths.contains(**p)) {
                Some(format!(
                    "conflict: {p} was changed by a task that could not be integrated; nothing was integrated (the patch is in {})",
                    l.patch.display()
                ))
            } else {
                None
            };
            match reason {
                Some(reason) => {
                    withdraw(self, l.recorded.take());
                    dropped_paths.extend(paths.iter().map(|p| (*p).to_owned()));
                    dropped_tasks.insert(l.t.task.name.clone());
                    out.push(Flushed::NotWritten { task: l.t.task.name.clone(), reason });
                }
                None => kept.push(l),
            }
        }
        let sets: Vec<&ChangeSet> = kept.iter().map(|l| &l.changes).collect();
        let mut transaction = crate::journal::Transaction::new(root);
        let folded = workspace::fold(&sets);
        let mut io_error = None;
        // Deletions first: a folder may give way to a file.
        for (path, _) in folded.iter().filter(|(_, op)| op.is_none()) {
            transaction.delete(path);
        }
        for (path, op) in &folded {
            if let Some((bytes, mode)) = op
                && let Err(e) = transaction.write(path, bytes, *mode)
            {
                io_error = Some(e);
            }
        }
        failpoint::hit("flush-checked");
        let open = match io_error {
            Some(e) => Err(e),
            None if transaction.is_empty() => Ok(None),
            None => transaction.begin().map(Some),
        };
        let open = match open {
            Ok(open) => open,
            Err(e) => return cannot_write(self, kept, out, &e),
        };
        // The after-states, hashed on the tree the changes made.
        let lines: Vec<(String, Option<LockLine>)> = kept
            .iter_mut()
            .map(|l| {
                let after = hashed_after(self, &l.t);
                let line = line_for(self, l, after.as_ref());
                (l.t.task.name.clone(), line)
            })
            .collect();
        let all: Vec<LockLine> = lines.iter().filter_map(|(_, l)| l.clone()).collect();
        let done = match open {
            Some(open) => open.commit(all),
            None => crate::journal::Transaction::new(root).apply(all),
        };
        if let Err(e) = done {
            return cannot_write(self, kept, out, &e);
        }
        out.extend(lines.into_iter().map(|(task, line)| Flushed::Written { task, line }));
        out
    }
}

/// The changes could not be written (the transaction is rolled back, or
/// left to the next command): their tasks fail.
fn cannot_write(runner: &Runner, kept: Vec<Landing>, mut out: Vec<Flushed>, e: &std::io::Error) -> Vec<Flushed> {
    for mut l in kept {
        withdraw(runner, l.recorded.take());
        out.push(Flushed::NotWritten {
            task: l.t.task.name.clone(),
            reason: format!(
                "cannot write the change: {e}; nothing was integrated (the patch is in {})",
                l.patch.display()
            ),
        });
    }
    out
}

/// The paths a change writes or removes.
fn changed_paths(changes: &ChangeSet) -> BTreeSet<&str> {
    let mut out = BTreeSet::new();
    for c in &changes.changes {
        out.insert(c.path.as_str());
        if let crate::changes::ChangeKind::Renamed { from } = &c.kind {
            out.insert(from.as_str());
        }
    }
    out
}

/// Takes back the store entry a pass wrote, for a change that did not
/// land: what the store held for these inputs before is put back.
pub fn withdraw(runner: &Runner, recorded: Option<Recorded>) {
    if let Some(r) = recorded {
        r.withdraw(&runner.plan.store);
    }
}

/// The task hashed on the tree as its change left it (the after-state the
/// lock records), with the same dependency outputs it started with.
pub fn hashed_after(runner: &Runner, t: &PlannedTask) -> Option<PlannedTask> {
    let outputs: HashMap<String, String> =
        t.key.inputs.iter().filter(|i| i.kind == "dependency").map(|i| (i.name.clone(), i.hash.clone())).collect();
    let mut after = t.clone();
    runner.plan.rehash(&mut after, &outputs).ok().map(|()| after)
}

/// The lock line the flush writes for a landed change: a passed task's
/// new record (or the removal of an older one, when it could not be
/// recorded); a replayed task's record from its entry when the lock has
/// none for it, else nothing (the line stands as recorded). Nothing with
/// `--locked`. The entry learns the after-state first, when it does not
/// know it yet.
fn line_for(runner: &Runner, l: &mut Landing, after: Option<&PlannedTask>) -> Option<LockLine> {
    if runner.locked {
        return None;
    }
    let store = &runner.plan.store;
    let task = l.t.task.name.clone();
    let complete = |e: &Entry| -> Option<Entry> {
        if !e.after.is_empty() {
            return Some(e.clone());
        }
        let after = after?;
        // As the store has it now: the scheduler added the task's records
        // to it when the task ended.
        let mut e =
            store.read_entry(&e.before).ok().flatten().filter(|s| s.patch == e.patch).unwrap_or_else(|| e.clone());
        e.after = after.hash.clone();
        e.after_key = serde_json::to_value(&after.key).ok();
        store.put_entry(&e).ok().map(|()| e)
    };
    match &l.replayed {
        None => {
            let entry = l.recorded.take().and_then(|r| complete(&r.entry)).map(|e| lock_line(&e));
            Some(LockLine { task, entry })
        }
        Some(e) => {
            let stands = runner.plan.lock.tasks.get(&task).is_some_and(|line| line.before == e.before);
            (!stands).then(|| complete(e)).flatten().map(|e| LockLine { task, entry: Some(lock_line(&e)) })
        }
    }
}

impl Landing {
    pub fn new(
        t: &PlannedTask,
        changes: &ChangeSet,
        started: i128,
        replayed: Option<&Entry>,
        recorded: Option<Recorded>,
        patch: PathBuf,
    ) -> Landing {
        Landing {
            t: t.clone(),
            changes: changes.clone(),
            started,
            replayed: replayed.cloned(),
            recorded,
            patch,
            seq: 0,
        }
    }
}
