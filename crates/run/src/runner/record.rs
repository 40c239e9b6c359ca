//! Recording a task that passed (SPEC 3.10) in the store *before* its
//! change reaches the user's tree: from then on a killed cassist never
//! calls the agent for it again, the plan replays it from the store entry
//! (SPEC 4). What a store entry holds is made here, for the scheduler too
//! ([`crate::cache`] completes the entry when the task has ended).

use std::collections::BTreeMap;
use std::path::Path;

use cassist_core::changes::ChangeSet;
use cassist_core::failpoint;
use cassist_core::lock::LockEntry;
use cassist_core::part::Part;
use cassist_core::plan::PlannedTask;
use cassist_core::store::{ENTRY_FORMAT, Entry, Store, StoredChange};

use super::TaskContext;

/// Stores a change set's contents; the stored changes and the patch hash
/// (blake3 of their canonical JSON).
pub fn store_changes(store: &Store, changes: &ChangeSet) -> std::io::Result<(Vec<StoredChange>, String)> {
    let mut out = Vec::new();
    for c in &changes.changes {
        if let Some(why) = crate::workspace::never_written(c) {
            return Err(std::io::Error::other(format!("{} is never stored: {why}", c.path)));
        }
        let old = c.old.as_deref().map(|b| store.put_object(b)).transpose()?;
        let new = c.new.as_deref().map(|b| store.put_object(b)).transpose()?;
        failpoint::hit("record-object");
        out.push(StoredChange { path: c.path.clone(), kind: c.kind.clone(), old, new, mode: c.mode });
    }
    let patch = cassist_core::plan::hash::hash_json(&out);
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
) -> std::io::Result<Entry> {
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
/// the lock did not record: SPEC 4).
pub fn lock_line(e: &Entry) -> LockEntry {
    LockEntry {
        before: e.before.clone(),
        after: e.after.clone(),
        outputs: e.outputs.as_ref().map(cassist_core::plan::state::outputs_hash),
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
        match put_entry(&plan.store, self.task(), None, changes, &run) {
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
