//! Recording one task's result. A task that passed is recorded in the
//! store *before* its change reaches the user's tree: from then on a
//! killed cassist never calls the agent for it again, the plan replays it
//! from the store entry. What a store entry holds is made here; once the
//! task has ended, [`finish_record`] completes it (its records, its
//! duration), and the end of the run moves its after-state
//! ([`update_after`]).

use std::collections::BTreeMap;
use std::path::Path;

use cassist_core::changes::ChangeSet;
use cassist_core::failpoint;
use cassist_core::lock::LockEntry;
use cassist_core::part::Part;
use cassist_core::plan::PlannedTask;
use cassist_core::store::{ENTRY_FORMAT, Entry, Outputs, Store, StoredChange};

use super::{TaskContext, TaskResult};

/// Why a task's result could not be recorded.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// A change names what is never stored (nor written).
    #[error("{path} is never stored: {why}")]
    NeverStored { path: String, why: String },
    /// The entry [`finish_record`] completes is not in the store.
    #[error("its store entry was not written before integration")]
    NoEntry,
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Stores a change set's contents; the stored changes and the patch hash
/// (blake3 of their canonical JSON).
pub fn store_changes(store: &Store, changes: &ChangeSet) -> Result<(Vec<StoredChange>, String), RecordError> {
    let mut out = Vec::new();
    for c in &changes.changes {
        if let Some(why) = crate::workspace::never_written(c) {
            return Err(RecordError::NeverStored { path: c.path.clone(), why });
        }
        let old = c.old.as_deref().map(|b| store.put_object(b)).transpose()?;
        let new = c.new.as_deref().map(|b| store.put_object(b)).transpose()?;
        failpoint::hit("record-object");
        out.push(StoredChange {
            path: c.path.clone(),
            kind: c.kind.clone(),
            old,
            new,
            mode: c.mode,
            old_mode: c.old_mode,
        });
    }
    let patch = cassist_core::store::patch_hash(&out);
    Ok((out, patch))
}

/// What a store entry says of a task's run besides its change.
pub struct Run<'a> {
    pub agent: &'a str,
    pub agent_version: Option<String>,
    pub summary: Option<String>,
    pub cost_usd: Option<f64>,
    pub duration_ms: u64,
    pub attempts: u32,
    /// The task's record folder: every file in it is stored.
    pub records: Option<&'a Path>,
    /// The parts a split task passed with.
    pub split: &'a [Part],
    pub date: String,
}

/// Stores the files of a record folder; name → object hash.
pub fn store_records(store: &Store, dir: &Path) -> std::io::Result<BTreeMap<String, String>> {
    let mut records = BTreeMap::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_file()) {
                records.insert(e.file_name().to_string_lossy().into_owned(), store.put_object_file(&e.path())?);
            }
        }
    }
    Ok(records)
}

/// Stores `changes` (objects first) and the entry of `before`'s run (its
/// inputs as it started); `after`: the task hashed on the tree its change
/// made, once known.
pub fn put_entry(
    store: &Store,
    before: &PlannedTask,
    after: Option<&PlannedTask>,
    changes: &ChangeSet,
    run: &Run<'_>,
) -> Result<Entry, RecordError> {
    let (stored, patch) = store_changes(store, changes)?;
    // Right after integration, the outputs are the change's new contents.
    let outputs = cassist_core::plan::state::outputs_of(&stored);
    let records = match run.records {
        Some(dir) => store_records(store, dir)?,
        None => BTreeMap::new(),
    };
    let entry = Entry {
        format: ENTRY_FORMAT,
        task: before.task.name.clone(),
        before: before.hash.clone(),
        after: after.map(|a| a.hash.clone()).unwrap_or_default(),
        patch,
        changes: stored,
        key: serde_json::to_value(&before.key).unwrap_or_default(),
        after_key: after.and_then(|a| serde_json::to_value(&a.key).ok()),
        recipe: Some(before.recipe.clone()).filter(|r| !r.is_empty()),
        dependencies: before.dependencies.clone(),
        outputs: Some(outputs),
        agent: run.agent.to_owned(),
        agent_version: run.agent_version.clone(),
        date: run.date.clone(),
        summary: run.summary.clone(),
        cost_usd: run.cost_usd,
        duration_ms: run.duration_ms,
        attempts: run.attempts,
        records,
        split: run.split.to_vec(),
    };
    store.put_entry(&entry)?;
    failpoint::hit("record-entry");
    Ok(entry)
}

/// The lock line of a store entry (a passed task's, or a replayed entry
/// the lock did not record: a replay is recorded as a run is).
pub fn lock_line(e: &Entry) -> LockEntry {
    LockEntry {
        before: e.before.clone(),
        after: e.after.clone(),
        recipe: e.recipe.clone(),
        dependencies: e.dependencies.clone(),
        outputs: e.outputs.as_ref().map(cassist_core::plan::state::outputs_hash),
        output_files: cassist_core::plan::state::output_records(e),
        patch: e.patch.clone(),
        agent: e.agent.clone(),
        agent_version: e.agent_version.clone(),
        date: e.date.clone(),
    }
}

/// A store entry this run wrote, and the one it replaced (for
/// [`Recorded::withdraw`]).
pub struct Recorded {
    pub entry: Entry,
    previous: Option<Entry>,
}

impl TaskContext<'_> {
    /// Records the task that passed with `changes` in the store, before
    /// anything of it reaches the tree. A failure to record fails nothing:
    /// it is said, and the task is integrated unrecorded.
    pub(super) fn record_passed(&self, changes: &ChangeSet, split: &[Part], date: &str) -> Option<Recorded> {
        let plan = &self.runner().plan;
        let agent = self.facts().agent.as_deref().unwrap_or(&self.task().agent);
        let run = Run {
            agent,
            agent_version: plan.hashing.versions.get(agent).cloned().flatten(),
            summary: self.facts().summary.clone(),
            cost_usd: self.facts().cost_usd,
            duration_ms: self.started().elapsed().as_millis() as u64,
            attempts: self.facts().attempts,
            records: Some(self.record_dir()),
            split,
            date: date.to_owned(),
        };
        let previous = plan.store.get_entry(&self.task().hash);
        // What the lock line records to decide `verify` and `stale` later.
        let mut before = self.task().clone();
        plan.hashing.fill_recipe(&plan.project.config, &mut before);
        match put_entry(&plan.store, &before, None, changes, &run) {
            Ok(entry) => Some(Recorded { entry, previous }),
            Err(e) => {
                self.note(format!(
                    "could not record the task in the cache ({e}): it is integrated, but runs again next time"
                ));
                None
            }
        }
    }

    /// Takes back an entry [`Self::record_passed`] wrote, for a change that
    /// did not land (a conflict, a failed build): what the store held for
    /// these inputs before is put back, so that the next run calls the
    /// agent again rather than replaying a change that failed.
    pub(super) fn withdraw(&self, recorded: Option<Recorded>) {
        if let Some(r) = recorded {
            r.withdraw(&self.runner().plan.store);
        }
    }
}

impl Recorded {
    /// Puts back what the store held for these inputs before the entry
    /// was written (see [`TaskContext::withdraw`]).
    pub fn withdraw(self, store: &Store) {
        let _ = match self.previous {
            Some(p) => store.put_entry(&p),
            None => store.remove_entry(&self.entry.before),
        };
    }
}

/// Completes the store entry of a task that passed: the runner wrote it
/// before the change reached the tree ([`put_entry`]); what is known only
/// once the task has ended (its whole record folder, its
/// duration) goes in now. Returns the task's output (the patch hash).
pub fn finish_record(store: &Store, t: &PlannedTask, result: &TaskResult) -> Result<String, RecordError> {
    let mut entry = store.read_entry(&t.hash).ok().flatten().ok_or(RecordError::NoEntry)?;
    if let Some(dir) = &result.record_dir {
        entry.records.extend(store_records(store, dir)?);
    }
    entry.duration_ms = result.end.report.duration_ms;
    // Whole on disk already: the records need no flush of their own.
    store.amend_entry(&entry)?;
    Ok(entry.patch)
}

/// Moves a recorded task's after-state to the project as a run left it:
/// `t`'s current hash and the task's `outputs` then, in the lock entry and
/// the store entry. Only the end of a run calls this: nothing writes an
/// intermediate after-state, so an after-state always describes the tree
/// as a whole run left it.
/// `outputs`: `None` when the store no longer says which files they are
/// (the recorded hash then stays).
pub fn update_after(store: &Store, entry: &mut LockEntry, t: &PlannedTask, outputs: Option<Outputs>) {
    entry.after = t.hash.clone();
    if let Some(o) = &outputs {
        entry.outputs = Some(cassist_core::plan::state::outputs_hash(o));
        // Each output's record follows (whether the task created it does
        // not change).
        for (path, hash) in o {
            if let Some(recorded) = entry.output_files.get_mut(path) {
                recorded.hash = hash.clone();
            }
        }
    }
    if let Ok(Some(mut e)) = store.read_entry(&entry.before) {
        e.after = t.hash.clone();
        e.after_key = serde_json::to_value(&t.key).ok();
        if outputs.is_some() {
            e.outputs = outputs;
        }
        if e.patch == entry.patch {
            entry.output_files = cassist_core::plan::state::output_records(&e);
        }
        // The project is in that after-state now.
        if store.put_entry(&e).is_ok() {
            store.index_after(&e.before);
        }
    }
}

/// Lock line `line` of task `t`, its after-state moved to the tree as it
/// is now (`t` hashed on it) with the outputs there, in the store entry of
/// its run too ([`update_after`]): what a verification that passed
/// records.
pub fn verified_line(plan: &cassist_core::plan::Plan, line: &LockEntry, t: &PlannedTask) -> LockEntry {
    let mut line = line.clone();
    let outputs = plan.outputs_now(&line);
    update_after(&plan.store, &mut line, t, outputs);
    line
}
