//! Integration layers and the quiescent flush. A task that passes does not write the user's tree: its change
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
//! Every write is a three-way merge ([`crate::workspace::merge_set`]),
//! O(change): when a task lands, its change is merged dry into what passed
//! before over the user's tree, and a path that a change landed since the
//! task started also changed is a conflict; at the flush each change is
//! merged for real, in order, into the tree as it is then (each over the
//! ones before it), and the merged contents are what the transaction
//! writes. A change that does not merge is not written (the user's text
//! stays as it is), nor any later one that touches its paths or depends
//! on its task.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use crate::workspace::{self, IntegrationLayer};
use cassist_core::changes::{ChangeKind, ChangeSet};
use cassist_core::failpoint;
use cassist_core::lock::LockLine;
use cassist_core::merge::Merged;
use cassist_core::plan::PlannedTask;
use cassist_core::store::Entry;

use super::Runner;
use super::record::{Recorded, lock_line};

/// More pending layers than this are merged into one for the workspaces
/// started from then on: overlayfs stacks a few hundred layers at most,
/// and the mount options fit one page.
pub const MERGE_PAST: usize = 16;

/// How many layers of one level are merged into one of the next
/// ([`to_merge`]).
const FANOUT: usize = 4;

/// What a pending layer holds: the landings `from..to` (those with an
/// empty change have no layer of their own), merged `level` times.
#[derive(Debug, Clone, Copy)]
struct Tier {
    level: u32,
    from: usize,
    to: usize,
}

/// Which of the newest pending layers (levels given newest first) to
/// merge into one now, and the level of the result; `None`: none. Merged
/// by levels, as a log-structured store does: [`FANOUT`] layers of one
/// level at the top become one of the next, so each change is copied
/// O(log n) times over a run and the stack stays short (merging every
/// pending change at each step copied O(n²) files: a 1,000-task run at
/// `-j 2` spent most of its time creating folders). Past [`MERGE_PAST`]
/// layers, every layer below the highest level is merged into one of
/// that level.
fn to_merge(levels: &[u32]) -> Option<(usize, u32)> {
    if let Some(top) = levels.get(..FANOUT)
        && top.iter().all(|&l| l == top[0])
    {
        return Some((FANOUT, top[0] + 1));
    }
    if levels.len() > MERGE_PAST {
        let highest = levels.iter().copied().max().unwrap_or(0);
        let below = levels.iter().take_while(|&&l| l < highest).count();
        return Some((below.max(2), highest));
    }
    None
}

/// A passed (or replayed) task's change, waiting for the flush.
pub struct Landing {
    pub t: PlannedTask,
    pub changes: ChangeSet,
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
    /// What each layer of `stack` holds, in the same order.
    tiers: Vec<Tier>,
    /// Landings so far (a workspace remembers how many it saw).
    seq: u64,
    /// cassist's own view of what this run wrote: every path a flushed
    /// change wrote or deleted, with the task's own content (never a
    /// user's edit merged into it). After-states and outputs are hashed
    /// through it, so a user's edit is never recorded as a task's work.
    written: cassist_core::plan::state::Overlay,
}

/// Why a change cannot be integrated: paths another task's change wrote
/// since this task started (path, task), and paths whose edits in the
/// project do not merge with it (each with why).
#[derive(Debug, Default)]
pub struct Conflicts {
    pub by_tasks: Vec<(String, String)>,
    pub by_user: Vec<String>,
}

impl Conflicts {
    /// The reason the task fails with; `patch`: where its patch is kept.
    pub fn reason(&self, patch: &std::path::Path) -> String {
        let mut why = Vec::new();
        if !self.by_tasks.is_empty() {
            let by: BTreeSet<&str> = self.by_tasks.iter().map(|(_, t)| t.as_str()).collect();
            let paths: Vec<&str> = self.by_tasks.iter().map(|(p, _)| p.as_str()).collect();
            let tasks = by.iter().map(|t| format!("`{t}`")).collect::<Vec<_>>().join(", ");
            why.push(format!("{} also changed by {tasks}, which passed while this task ran", paths.join(", ")));
        }
        if !self.by_user.is_empty() {
            why.push(format!(
                "edited in the project while the task ran, and the edits do not merge: {}; the project keeps its version",
                self.by_user.join("; ")
            ));
        }
        format!("conflict: {}; nothing was integrated (the patch is in {})", why.join("; "), patch.display())
    }
}

/// What the flush did with a task's change.
// A few per flush, moved once: not worth a box.
#[allow(clippy::large_enum_variant)]
pub enum Flushed {
    /// Written; its lock line (none under `--locked`, or when the lock's
    /// line stands). `hashed`: the line's after-state was hashed on the
    /// tree this flush left.
    Written { task: String, line: Option<LockLine>, hashed: bool },
    /// Not written, and why: the task fails.
    NotWritten { task: String, reason: String },
}

impl Runner {
    /// cassist's own view of what this run wrote ([`Pending`]'s `written`).
    pub fn written(&self) -> cassist_core::plan::state::Overlay {
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).written.clone()
    }

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
    pub fn land(&self, mut landing: Landing, layer: Option<Arc<IntegrationLayer>>, seen: u64) -> Result<(), Conflicts> {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let paths: BTreeSet<&str> = changed_paths(&landing.changes);
        let by_tasks: BTreeSet<(String, String)> = pending
            .landings
            .iter()
            .filter(|l| l.seq >= seen)
            .flat_map(|l| {
                changed_paths(&l.changes)
                    .into_iter()
                    .filter(|p| paths.contains(p))
                    .map(|p| (p.to_owned(), l.t.task.name.clone()))
                    .collect::<Vec<_>>()
            })
            .collect();
        let by_tasks: Vec<(String, String)> = by_tasks.into_iter().collect();
        // The change merged, dry, into the tree as the flush will find
        // it: what passed before, over the user's tree now.
        let root = &self.plan.project.root;
        let mut ours = |p: &str| -> std::io::Result<workspace::Held> {
            match pending.landings.iter().rev().find_map(|l| theirs_at(&l.changes, p)) {
                Some(held) => Ok(held),
                None => workspace::read_held(root, p),
            }
        };
        let by_user: Vec<String> = match workspace::merge_set(&landing.changes, &mut ours) {
            Ok(_) => Vec::new(),
            Err(workspace::SetError::Conflicts(c)) => {
                c.into_iter().filter(|c| !by_tasks.iter().any(|(q, _)| *q == c.path)).map(|c| c.to_string()).collect()
            }
            Err(workspace::SetError::Io(e)) => vec![format!("cannot be read ({e})")],
        };
        if !by_tasks.is_empty() || !by_user.is_empty() {
            withdraw(self, landing.recorded.take());
            return Err(Conflicts { by_tasks, by_user });
        }
        landing.seq = pending.seq;
        pending.seq += 1;
        pending.landings.push(landing);
        if let Some(layer) = layer {
            let from = pending.tiers.first().map_or(0, |t| t.to);
            let to = pending.landings.len();
            pending.stack.insert(0, layer);
            pending.tiers.insert(0, Tier { level: 0, from, to });
        }
        loop {
            let levels: Vec<u32> = pending.tiers.iter().map(|t| t.level).collect();
            let Some((n, level)) = to_merge(&levels) else { break };
            // The newest `n` layers become one, of the landings they hold.
            let (from, to) = (pending.tiers[n - 1].from, pending.tiers[0].to);
            let sets: Vec<&ChangeSet> = pending.landings[from..to].iter().map(|l| &l.changes).collect();
            // Should merging fail, the stack stays as it is (longer).
            let sources: Vec<&IntegrationLayer> = pending.stack[..n].iter().map(|l| l.as_ref()).collect();
            let Ok(merged) = IntegrationLayer::merge(&self.workspaces, "merged", &sets, &sources) else { break };
            drop(sources);
            pending.stack.splice(..n, [Arc::new(merged)]);
            pending.tiers.splice(..n, [Tier { level, from, to }]);
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
        pending.tiers.clear();
        let mut overlay = pending.written.clone();
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
        // What the tree will hold at each path merged so far, by the
        // changes kept before (each merged over the one before it).
        let mut merged: BTreeMap<String, Merged> = BTreeMap::new();
        // What the tree held at each path when it was first read: the
        // transaction is refused if it holds anything else when written.
        let mut seen: BTreeMap<String, workspace::Held> = BTreeMap::new();
        for mut l in landings {
            let paths = changed_paths(&l.changes);
            let mut ours = |p: &str| -> std::io::Result<workspace::Held> {
                match merged.get(p) {
                    Some(Merged::Write { bytes, mode }) => Ok(workspace::Held::Entry(bytes.clone(), *mode)),
                    Some(Merged::Delete) => Ok(workspace::Held::Absent),
                    _ => {
                        let held = workspace::read_held(root, p)?;
                        seen.entry(p.to_owned()).or_insert_with(|| held.clone());
                        Ok(held)
                    }
                }
            };
            let reason = if let Some(dep) = l.t.key.spec.depends_on.iter().find(|d| dropped_tasks.contains(*d)) {
                Err(format!(
                    "dependency `{dep}` could not be integrated; nothing was integrated (the patch is in {})",
                    l.patch.display()
                ))
            } else if let Some(p) = paths.iter().find(|p| dropped_paths.contains(**p)) {
                Err(format!(
                    "conflict: {p} was changed by a task that could not be integrated; nothing was integrated (the patch is in {})",
                    l.patch.display()
                ))
            } else {
                match workspace::merge_set(&l.changes, &mut ours) {
                    Ok(writes) => Ok(writes),
                    Err(workspace::SetError::Conflicts(c)) => {
                        Err(Conflicts { by_tasks: Vec::new(), by_user: c.iter().map(|c| c.to_string()).collect() }
                            .reason(&l.patch))
                    }
                    Err(workspace::SetError::Io(e)) => Err(format!(
                        "cannot read the tree to merge the change: {e}; nothing was integrated (the patch is in {})",
                        l.patch.display()
                    )),
                }
            };
            match reason {
                Ok(writes) => {
                    merged.extend(writes);
                    kept.push(l);
                }
                Err(reason) => {
                    withdraw(self, l.recorded.take());
                    dropped_paths.extend(paths.iter().map(|p| (*p).to_owned()));
                    dropped_tasks.insert(l.t.task.name.clone());
                    out.push(Flushed::NotWritten { task: l.t.task.name.clone(), reason });
                }
            }
        }
        let sets: Vec<&ChangeSet> = kept.iter().map(|l| &l.changes).collect();
        let mut transaction = cassist_core::journal::Transaction::new(root);
        // The tree as cassist's own view leaves it: the tasks' results,
        // never a user's edit merged into them, for their after-states.
        let folded = workspace::fold(&sets);
        for (path, op) in &folded {
            overlay.lay_content("", path, *op);
        }
        let io_error = workspace::write_merged(&mut transaction, &merged).err();
        for (path, held) in &seen {
            if merged.get(path).is_some_and(|m| !matches!(m, Merged::Keep)) {
                match held {
                    workspace::Held::Entry(bytes, mode) => {
                        transaction.expect(path, Some(cassist_core::merge::Version::new(bytes, *mode)))
                    }
                    workspace::Held::Absent => transaction.expect(path, None),
                    // A folder the change replaces: its files are the
                    // change's own deletions.
                    workspace::Held::Folder(_) | workspace::Held::Other => {}
                }
            }
        }
        failpoint::hit("flush-checked");
        if let Some(e) = io_error {
            return cannot_write(self, kept, out, &e);
        }
        // The after-states, hashed on the tree as the changes will leave
        // it: the journal holds the lock lines from the start (one journal
        // written and flushed, not an open one, then a committed one).
        let lines: Vec<(String, Option<LockLine>, bool)> = kept
            .iter()
            .map(|l| {
                let after = hashed_after(self, &l.t, &overlay);
                let line = line_for(self, l, after.as_ref());
                let hashed =
                    matches!((&line, &after), (Some(LockLine { entry: Some(e), .. }), Some(a)) if e.after == a.hash);
                (l.t.task.name.clone(), line, hashed)
            })
            .collect();
        let all: Vec<LockLine> = lines.iter().filter_map(|(_, l, _)| l.clone()).collect();
        if let Err(e) = transaction.apply(all) {
            return cannot_write(self, kept, out, &e);
        }
        // The changes are in the tree: their after-states were reached.
        for l in &kept {
            let before = l.replayed.as_ref().map(|e| &e.before).or(l.recorded.as_ref().map(|r| &r.entry.before));
            if let Some(before) = before {
                self.plan.store.index_after(before);
            }
        }
        out.extend(lines.into_iter().map(|(task, line, hashed)| Flushed::Written { task, line, hashed }));
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).written = overlay;
        out
    }
}

/// The changes could not be written (the transaction is rolled back, or
/// left to the next command): their tasks fail.
///
/// A file the user saved while the transaction was being written stops
/// it ([`JournalError::Changed`](cassist_core::journal::JournalError::Changed)):
/// the tasks' store entries stay, so the next run replays their changes,
/// merged with that edit, instead of calling their agents again.
fn cannot_write(
    runner: &Runner,
    kept: Vec<Landing>,
    mut out: Vec<Flushed>,
    e: &(dyn std::error::Error + 'static),
) -> Vec<Flushed> {
    let changed = match e.downcast_ref::<cassist_core::journal::JournalError>() {
        Some(cassist_core::journal::JournalError::Changed { path, .. }) => Some(path),
        _ => None,
    };
    for mut l in kept {
        let reason = match changed {
            Some(path) => format!(
                "conflict: {path} was saved while the change was being written; the project keeps its version; nothing was integrated (the next run replays it; the patch is in {})",
                l.patch.display()
            ),
            None => {
                withdraw(runner, l.recorded.take());
                format!("cannot write the change: {e}; nothing was integrated (the patch is in {})", l.patch.display())
            }
        };
        out.push(Flushed::NotWritten { task: l.t.task.name.clone(), reason });
    }
    out
}

/// What `changes` leave at `p`, when they touch it.
fn theirs_at(changes: &ChangeSet, p: &str) -> Option<workspace::Held> {
    changes.changes.iter().rev().find_map(|c| {
        if c.path == p {
            Some(match &c.new {
                Some(b) => workspace::Held::Entry(b.clone(), c.mode),
                None => workspace::Held::Absent,
            })
        } else if matches!(&c.kind, ChangeKind::Renamed { from } if from == p) {
            Some(workspace::Held::Absent)
        } else {
            None
        }
    })
}

/// The paths a change writes or removes.
fn changed_paths(changes: &ChangeSet) -> BTreeSet<&str> {
    let mut out = BTreeSet::new();
    for c in &changes.changes {
        out.insert(c.path.as_str());
        if let ChangeKind::Renamed { from } = &c.kind {
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

/// The task hashed on the tree as the changes of `overlay` leave it (the
/// after-state the lock records), with the same dependency outputs it
/// started with.
pub fn hashed_after(
    runner: &Runner,
    t: &PlannedTask,
    overlay: &cassist_core::plan::state::Overlay,
) -> Option<PlannedTask> {
    let outputs: HashMap<String, String> =
        t.key.inputs.iter().filter(|i| i.kind == "dependency").map(|i| (i.name.clone(), i.hash.clone())).collect();
    let mut after = t.clone();
    runner.plan.hash_inputs(&mut after, &outputs, overlay).ok().map(|()| after)
}

/// The lock line the flush writes for a landed change: a passed task's
/// new record (or the removal of an older one, when it could not be
/// recorded); a replayed task's record from its entry when the lock has
/// none for it, else nothing (the line stands as recorded). Nothing with
/// `--locked`, nor for an inline task. The entry learns the after-state first, when it does not
/// know it yet.
fn line_for(runner: &Runner, l: &Landing, after: Option<&PlannedTask>) -> Option<LockLine> {
    // An inline task (MCP) is recorded in the store only: the lock is the
    // record of task files.
    if runner.locked || l.t.inline() {
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
        // The entry is on disk whole already (flushed before the change
        // reached the tree), and the lock line the journal writes holds
        // the after-state too: no flush of its own.
        store.amend_entry(&e).ok().map(|()| e)
    };
    match &l.replayed {
        None => {
            let entry = l.recorded.as_ref().and_then(|r| complete(&r.entry)).map(|e| lock_line(&e));
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
        replayed: Option<&Entry>,
        recorded: Option<Recorded>,
        patch: PathBuf,
    ) -> Landing {
        Landing { t: t.clone(), changes: changes.clone(), replayed: replayed.cloned(), recorded, patch, seq: 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pushes `n` layers of one landing each through [`to_merge`]: the
    /// stack never goes past [`MERGE_PAST`], and the landings copied by
    /// merges stay O(n log n).
    fn simulate(n: usize) -> (usize, usize) {
        let mut tiers: Vec<(u32, usize)> = Vec::new(); // (level, landings)
        let (mut deepest, mut copied) = (0, 0);
        for _ in 0..n {
            tiers.insert(0, (0, 1));
            loop {
                let levels: Vec<u32> = tiers.iter().map(|t| t.0).collect();
                let Some((k, level)) = to_merge(&levels) else { break };
                let landings: usize = tiers[..k].iter().map(|t| t.1).sum();
                copied += landings;
                tiers.splice(..k, [(level, landings)]);
            }
            deepest = deepest.max(tiers.len());
        }
        (deepest, copied)
    }

    #[test]
    fn merged_by_levels_the_stack_stays_short_and_copies_stay_few() {
        for n in [1, 3, 4, 16, 17, 20, 1_000, 5_000, 50_000] {
            let (deepest, copied) = simulate(n);
            assert!(deepest <= MERGE_PAST, "{n} landings: {deepest} layers deep");
            let log = (n as f64).log(FANOUT as f64).ceil() as usize + 1;
            assert!(copied <= 2 * n * log, "{n} landings: {copied} copied by merges (2 n log n = {})", 2 * n * log);
        }
        // The old rule (everything at each merge) copied 31,000 for 1,000.
        assert!(simulate(1_000).1 < 6_000);
    }
}
