//! A task's state against `cassist.lock` and the store, the
//! outputs part of its after-state, and the replays a plan predicts.
//!
//! The task's inputs are "as recorded" when they equal the lock's `after`,
//! or when they do once each input file that is one of the task's outputs
//! is taken as the run left it (a task that reads what it writes: the
//! user's edit of that output changes its inputs, not what it was asked).
//!
//! - `up-to-date`: the inputs are as recorded and the outputs (the paths
//!   its change wrote or deleted) hold what the run left; or the user
//!   edited or deleted some of them (a note says which: "output edited:
//!   out.txt"), which cassist never rewrites.
//! - `replay`: the inputs are as recorded and an output the task created
//!   is missing, or every output is back as it was before the run; or the
//!   inputs equal the lock's `before`; or the store holds an entry for the
//!   current inputs (a run killed before its lock line was written, a lost
//!   line, inputs seen before). The entry must be usable (every object its
//!   change writes there and whole) and its change must apply to the tree
//!   as it is, merged three-way as a replay writes it: else the task is
//!   `run` ("replay would conflict: PATH"), rather than a replay that fails
//!   on every run.
//! - `run`: anything else, an unusable entry included (with a warning).
//!
//! Which outputs a run left, with their content and whether the task
//! created them, is in its lock line (an older cassist's line has only
//! their hash: the store says which they are). A task replayed by
//! `run --locked`, which writes no lock line, is found by its after-state
//! in the store ([`Store::entry_by_after`]).
//!
//! Planning in run order, a task predicted `replay` lays its change (as
//! merged into the tree) over an [`Overlay`]; later tasks' inputs and
//! outputs are hashed through it, as `run` sees them once the replay is
//! done.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;

use super::context::ResolvedFile;
use super::filehash::FileHashCache;
use super::hash::{Input, hash_bytes, hash_json};
use super::{PlannedTask, State};
use crate::changes::ChangeKind;
use crate::lock::{Lock, LockEntry, LockedOutput};
use crate::merge::{Merged, Version};
use crate::paths::{Stamp, build_glob, is_literal, is_reserved, normalize};
use crate::spec::Kind;
use crate::store::{Entry, Outputs, Store};

/// What the hash of a path that is neither a file nor a symlink (a folder,
/// a fifo) is taken to be in a task's outputs.
const NOT_A_FILE: &str = "not-a-file";

/// Why a task is in its state, as far as the cache is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Basis {
    /// Nothing recorded matches: the agent is needed.
    #[default]
    Nothing,
    /// The inputs are as the lock's after-state records them and the
    /// outputs are as the run left them, or edited by the user (or the
    /// line has no outputs to check, or the store no record of which they
    /// are).
    After,
    /// The inputs are as the lock's after-state records them, but an
    /// output the task created is missing, or every output is back as it
    /// was before the run: the change is written again.
    OutputsChanged,
    /// The inputs equal the lock's before-state.
    Before,
    /// The store holds an entry for the current inputs that the lock does
    /// not name.
    StoreEntry,
    /// The inputs are the after-state of a store entry the lock does not
    /// name (a replay by `run --locked`, which writes no lock line).
    StoreAfter,
    /// The recipe and the dependencies are as the lock line records them,
    /// and the change is still in the tree; only files the task reads
    /// (or the agent's version, or the limits of a run) changed: state
    /// `verify` (its acceptance commands decide) or `stale` (an
    /// explore/review task keeps its findings).
    Recipe,
    /// The inputs are an after-state a verification recorded (the lock
    /// line's run passed its acceptance commands on this tree): up to
    /// date.
    Verified,
}

/// What the lock and the store say of a task, beside its [`State`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cached {
    pub basis: Basis,
    /// State `replay`: the input hash naming the store entry to replay
    /// ([`Basis::StoreAfter`]: the entry whose after-state the task is in).
    pub entry: Option<String>,
    /// The recorded patch, handed to dependents (`up-to-date`, `replay`).
    pub patch: Option<String>,
    /// A store entry that would have been used but cannot be: why (the
    /// task then runs as if there were none, with a warning).
    pub unusable: Option<String>,
    /// [`Basis::OutputsChanged`]: which, in words ("output out/x.txt
    /// deleted").
    pub outputs_changed: Vec<String>,
    /// State `up-to-date`: the outputs the user edited or deleted since
    /// the run, in words ("output edited: out.txt"); they are left as
    /// they are.
    pub outputs_edited: Vec<String>,
    /// State `run` instead of `replay`: the first path where the stored
    /// change does not merge into the tree as it is.
    pub conflict: Option<String>,
    /// The tasks before it whose predicted replays change its inputs.
    pub after_replay_of: Vec<String>,
    /// Hashed through the changes of replays predicted before it (not the
    /// tree as it is): `run` hashes it again when it starts.
    pub predicted: bool,
    /// State `replay`: the entry was fetched from the remote cache (by the
    /// command layer, into the store) for this plan: `replay (remote)`.
    pub remote: bool,
}

/// The hash of a task's outputs: blake3 over the canonical JSON of the
/// sorted map path → content hash (`null`: absent).
pub fn outputs_hash(outputs: &Outputs) -> String {
    hash_json(outputs)
}

/// The per-output record of a store entry's run: each output with its
/// content hash as the run left it (the entry's `outputs`) and whether the
/// change created it (added it, or renamed a file to it). Empty when the
/// entry does not say what its outputs held (an older release's).
pub fn output_records(e: &Entry) -> BTreeMap<String, LockedOutput> {
    let Some(outputs) = &e.outputs else { return BTreeMap::new() };
    let created: BTreeSet<&str> = e
        .changes
        .iter()
        .filter(|c| matches!(c.kind, ChangeKind::Added | ChangeKind::Renamed { .. }))
        .map(|c| c.path.as_str())
        .collect();
    outputs
        .iter()
        .map(|(path, hash)| {
            (path.clone(), LockedOutput { hash: hash.clone(), created: created.contains(path.as_str()) })
        })
        .collect()
}

/// The state of task `t` (its input key and hash made). `view` is the
/// tree as it is (or will be, once the replays predicted before `t` are
/// done); which paths are the task's outputs comes from its lock line, or
/// from `index`.
pub fn state_of(
    lock: &Lock,
    store: &Store,
    index: &mut OutputIndex,
    t: &PlannedTask,
    view: &mut View<'_>,
) -> (State, Cached) {
    let (name, hash) = (t.task.name.as_str(), t.hash.as_str());
    let line = lock.tasks.get(name);
    let mut cached = Cached::default();
    let replay = |cached: &mut Cached, key: &str, basis: Basis| -> Option<Entry> {
        // An entry the lock records must hold the lock's patch.
        let locked_patch = line.filter(|l| l.before == key).map(|l| l.patch.as_str());
        match store.usable_entry_for(key, locked_patch) {
            Ok(Some(entry)) => {
                *cached = Cached {
                    basis,
                    entry: Some(key.to_owned()),
                    patch: Some(entry.patch.clone()),
                    ..Cached::default()
                };
                Some(entry)
            }
            Ok(None) => None,
            Err(why) => {
                cached.unusable = Some(why.to_string());
                None
            }
        }
    };
    // A replay the tree takes as it is, else `run` naming the conflict.
    let applies = |mut cached: Cached, entry: &Entry, view: &mut View<'_>| -> (State, Cached) {
        match view.dry_run(store, entry) {
            Ok(merged) => {
                view.merged = merged;
                (State::Replay, cached)
            }
            Err(path) => {
                cached = Cached { basis: cached.basis, conflict: Some(path), ..Cached::default() };
                (State::Run, cached)
            }
        }
    };
    // Inputs equal to `before` are the row below, even where taking the
    // outputs as recorded would make them `after`.
    if let Some(l) = line
        && (l.after == hash || l.before != hash)
    {
        let recorded = Recorded::Line(l);
        match recorded.outputs_if_inputs_same(t, store, index, view) {
            Err(why) => cached.unusable = Some(why),
            Ok(None) => {}
            Ok(Some(Outcome::Kept(edited))) => {
                let cached =
                    Cached { basis: Basis::After, patch: Some(l.patch.clone()), outputs_edited: edited, ..cached };
                return (State::UpToDate, cached);
            }
            Ok(Some(Outcome::Replay(changed))) => {
                if let Some(entry) = replay(&mut cached, &l.before, Basis::OutputsChanged) {
                    cached.outputs_changed = changed;
                    return applies(cached, &entry, view);
                }
                cached.basis = Basis::OutputsChanged;
                cached.outputs_changed = changed;
            }
        }
    }
    if let Some(l) = line
        && l.before == hash
        && l.after != hash
        && cached.basis != Basis::OutputsChanged
        && let Some(entry) = replay(&mut cached, &l.before, Basis::Before)
    {
        return applies(cached, &entry, view);
    }
    if line.is_none_or(|l| l.after != hash && l.before != hash)
        && cached.basis == Basis::Nothing
        && let Some(found) = by_after_state(store, index, t, view, &mut cached)
    {
        return match found {
            (Outcome::Kept(edited), e) => {
                // The lock line's own run, its after-state moved here by a
                // verification that wrote no lock line (`run --locked`).
                let verified = line.is_some_and(|l| l.before == e.before && l.patch == e.patch);
                let cached = Cached {
                    basis: if verified { Basis::Verified } else { Basis::StoreAfter },
                    entry: Some(e.before),
                    patch: Some(e.patch),
                    outputs_edited: edited,
                    ..Cached::default()
                };
                (State::UpToDate, cached)
            }
            (Outcome::Replay(changed), e) => match replay(&mut cached, &e.before, Basis::OutputsChanged) {
                Some(entry) => {
                    cached.outputs_changed = changed;
                    applies(cached, &entry, view)
                }
                None => (State::Run, cached),
            },
        };
    }
    if line.is_none_or(|l| l.before != hash)
        && let Some(entry) = replay(&mut cached, hash, Basis::StoreEntry)
    {
        return applies(cached, &entry, view);
    }
    if let Some(l) = line
        && l.after != hash
        && l.before != hash
        && cached.basis == Basis::Nothing
        && let Some(decided) = same_recipe(l, store, index, t, view, &mut cached)
    {
        return decided;
    }
    (State::Run, cached)
}

/// A task whose lock line records the same recipe and dependencies as it
/// has now, while its inputs differ from both recorded states: only files
/// it reads changed, or the agent's version, or the limits of a run.
/// An explore/review task is `stale` (its findings are kept); a task with
/// acceptance commands whose change is still in the tree is `verify` (or
/// `up-to-date`, when a verification already recorded this after-state in
/// the store: in the entry of the line's run, or, with no entry, beside
/// it); anything else, `None`: `run`.
fn same_recipe(
    l: &LockEntry,
    store: &Store,
    index: &mut OutputIndex,
    t: &PlannedTask,
    view: &mut View<'_>,
    cached: &mut Cached,
) -> Option<(State, Cached)> {
    if l.recipe.as_deref() != Some(t.recipe.as_str()) || l.dependencies != t.dependencies {
        return None;
    }
    let base = Cached { basis: Basis::Recipe, patch: Some(l.patch.clone()), ..Cached::default() };
    match t.kind() {
        Kind::Explore | Kind::Review => return Some((State::Stale, base)),
        Kind::Code | Kind::Test if t.task.acceptance.is_empty() => return None,
        Kind::Code | Kind::Test => {}
    }
    // Verified on this tree before (the entry's after-state moved here):
    // up to date, unless its outputs say otherwise.
    if let Ok(Some(e)) = store.read_entry(&l.before)
        && e.task == t.task.name
        && e.patch == l.patch
        && e.after == t.hash
        && let Ok(Some(Outcome::Kept(edited))) = Recorded::Entry(&e).outputs_if_inputs_same(t, store, index, view)
    {
        let verified = Cached { basis: Basis::Verified, entry: Some(e.before), outputs_edited: edited, ..base };
        return Some((State::UpToDate, verified));
    }
    // The same where the store has no entry of the line's run (a fresh
    // clone): the line as the verification left it.
    if let Some(v) = store.verified(&l.before)
        && v.task == t.task.name
        && v.line.before == l.before
        && v.line.patch == l.patch
        && v.line.after == t.hash
        && let Ok(Some(Outcome::Kept(edited))) = Recorded::Line(&v.line).outputs_if_inputs_same(t, store, index, view)
    {
        return Some((State::UpToDate, Cached { basis: Basis::Verified, outputs_edited: edited, ..base }));
    }
    // The change must still be in the tree: outputs as the run left them,
    // or edited by the user; not a created output missing, nor every
    // output back at its base.
    let recorded = Recorded::Line(l);
    let outputs = match recorded.outputs(store) {
        Ok(Some(o)) => o,
        // Not known which files it wrote: the change cannot be checked.
        Ok(None) => return None,
        Err(why) => {
            cached.unusable = Some(why);
            return None;
        }
    };
    let paths: Vec<String> = outputs.keys().cloned().collect();
    let now = view.hashes(&paths);
    match recorded.judge(store, &outputs, &now, view) {
        Outcome::Kept(edited) => Some((State::Verify, Cached { outputs_edited: edited, ..base })),
        Outcome::Replay(changed) => {
            cached.outputs_changed = changed;
            None
        }
    }
}

/// The store entry whose after-state `t`'s inputs are (the lock names
/// none: a `run --locked` replayed it), with what its outputs say.
fn by_after_state(
    store: &Store,
    index: &mut OutputIndex,
    t: &PlannedTask,
    view: &mut View<'_>,
    cached: &mut Cached,
) -> Option<(Outcome, Entry)> {
    let e = match store.entry_by_after(&t.hash) {
        Ok(Some(e)) if e.task == t.task.name => e,
        Ok(_) => return None,
        Err(why) => {
            cached.unusable = Some(why.to_string());
            return None;
        }
    };
    let outcome = Recorded::Entry(&e).outputs_if_inputs_same(t, store, index, view).ok().flatten()?;
    Some((outcome, e))
}

/// What a recorded run's outputs say, its inputs being as recorded.
enum Outcome {
    /// Up to date: the outputs are as the run left them, or edited or
    /// deleted by the user (these, in words).
    Kept(Vec<String>),
    /// Written again: a created output is missing, or every output is back
    /// at its base (why, in words).
    Replay(Vec<String>),
}

/// A recorded run: a lock line, or a store entry the lock does not name.
enum Recorded<'a> {
    Line(&'a LockEntry),
    Entry(&'a Entry),
}

impl Recorded<'_> {
    fn before(&self) -> &str {
        match self {
            Recorded::Line(l) => &l.before,
            Recorded::Entry(e) => &e.before,
        }
    }

    fn after(&self) -> &str {
        match self {
            Recorded::Line(l) => &l.after,
            Recorded::Entry(e) => &e.after,
        }
    }

    /// Each output with what the run left there and whether the task
    /// created it; `Ok(None)` when nothing says (a line of an older
    /// cassist whose entry is gone, or without outputs at all); an error
    /// when the entry that would say is unreadable.
    fn outputs(&self, store: &Store) -> Result<Option<Cow<'_, BTreeMap<String, LockedOutput>>>, String> {
        let l = match self {
            Recorded::Entry(e) => return Ok(Some(Cow::Owned(output_records(e)))),
            Recorded::Line(l) if !l.output_files.is_empty() => return Ok(Some(Cow::Borrowed(&l.output_files))),
            Recorded::Line(l) => l,
        };
        let Some(summary) = &l.outputs else { return Ok(None) };
        // No output at all (a change that wrote nothing): known from the
        // lock alone.
        if *summary == outputs_hash(&Outputs::new()) {
            return Ok(Some(Cow::Owned(BTreeMap::new())));
        }
        match store.read_entry(&l.before) {
            Err(why) => Err(why.to_string()),
            Ok(Some(e)) if e.patch == l.patch && e.outputs.as_ref().is_some_and(|o| outputs_hash(o) == *summary) => {
                Ok(Some(Cow::Owned(output_records(&e))))
            }
            Ok(_) => Ok(None),
        }
    }

    /// When `t`'s inputs are as recorded, what its outputs say; `Ok(None)`
    /// when they are not.
    fn outputs_if_inputs_same(
        &self,
        t: &PlannedTask,
        store: &Store,
        index: &mut OutputIndex,
        view: &mut View<'_>,
    ) -> Result<Option<Outcome>, String> {
        let after = self.after();
        if after.is_empty() {
            return Ok(None);
        }
        if t.hash == after {
            // The usual case, quickly: outputs as recorded.
            if let Recorded::Line(l) = self
                && l.output_files.is_empty()
            {
                return self.older_line(l, store, index, view);
            }
        }
        let Some(recorded) = self.outputs(store)? else {
            return Ok((t.hash == after).then(|| Outcome::Kept(Vec::new())));
        };
        if t.hash != after && hash_with_outputs(t, &recorded).is_none_or(|h| h != after) {
            return Ok(None);
        }
        let paths: Vec<String> = recorded.keys().cloned().collect();
        let now = view.hashes(&paths);
        Ok(Some(self.judge(store, &recorded, &now, view)))
    }

    /// [`Self::outputs_if_inputs_same`] for a lock line of an older
    /// cassist (its outputs' hash only) whose inputs equal its `after`:
    /// which files they are comes from the index, what they held from the
    /// store entry, read only when they differ.
    fn older_line(
        &self,
        l: &LockEntry,
        store: &Store,
        index: &mut OutputIndex,
        view: &mut View<'_>,
    ) -> Result<Option<Outcome>, String> {
        let Some(summary) = &l.outputs else { return Ok(Some(Outcome::Kept(Vec::new()))) };
        let Some(paths) = index.paths(store, &l.before, &l.patch).map(<[String]>::to_vec) else {
            // No entry says which files they are: checked on inputs only;
            // an entry there but unreadable cannot say either.
            return match store.read_entry(&l.before) {
                Err(why) => Err(why.to_string()),
                Ok(_) => Ok(Some(Outcome::Kept(Vec::new()))),
            };
        };
        let now = view.hashes(&paths);
        if outputs_hash(&now) == *summary {
            return Ok(Some(Outcome::Kept(Vec::new())));
        }
        match self.outputs(store)? {
            Some(recorded) => Ok(Some(self.judge(store, &recorded, &now, view))),
            // Changed, but not known how: left as they are.
            None => Ok(Some(Outcome::Kept(vec!["outputs changed since the recorded run".to_owned()]))),
        }
    }

    /// What the outputs `now` say against what the run left (`recorded`):
    /// a created output missing, an output an earlier task's replay
    /// rewrites, or every output back at its base (as the store entry has
    /// it), is a replay; an output edited or deleted is the user's, kept.
    fn judge(
        &self,
        store: &Store,
        recorded: &BTreeMap<String, LockedOutput>,
        now: &Outputs,
        view: &View<'_>,
    ) -> Outcome {
        let mut missing = Vec::new();
        let mut edited = Vec::new();
        for (path, o) in recorded {
            let here = now.get(path).cloned().flatten();
            if here == o.hash {
                continue;
            }
            match (&here, o.created) {
                _ if view.replayed_before(path) => {
                    missing.push(format!("output {path} changed by the replay of an earlier task"))
                }
                (None, true) => missing.push(format!("output {path} deleted (the task created it)")),
                (None, false) => edited.push(format!("output deleted: {path}")),
                (Some(_), _) => edited.push(format!("output edited: {path}")),
            }
        }
        if !missing.is_empty() {
            return Outcome::Replay(missing);
        }
        if edited.is_empty() {
            return Outcome::Kept(edited);
        }
        // Every output back at what the run started from: undone, as by
        // `git checkout`.
        let bases = store.read_entry(self.before()).ok().flatten().map(|e| bases(&e));
        let undone = bases.is_some_and(|bases| {
            recorded.keys().all(|p| match bases.get(p) {
                Some(Some(base)) => now.get(p).cloned().flatten() == *base,
                _ => false,
            })
        });
        if undone {
            return Outcome::Replay(vec!["every output is back as it was before the run".to_owned()]);
        }
        Outcome::Kept(edited)
    }
}

/// Each path a recorded change touches, with its content hash before the
/// change (`Some(None)`: absent; `None`: not known, the content was not
/// kept).
fn bases(e: &Entry) -> BTreeMap<String, Option<Option<String>>> {
    let mut out = BTreeMap::new();
    for c in &e.changes {
        let base = match &c.kind {
            ChangeKind::Added | ChangeKind::Renamed { .. } => Some(None),
            ChangeKind::Modified | ChangeKind::Deleted => c.old.clone().map(Some),
        };
        out.insert(c.path.clone(), base);
        if let ChangeKind::Renamed { from } = &c.kind {
            out.insert(from.clone(), c.old.clone().map(Some));
        }
    }
    out
}

/// The input hash of `t` with each of its input files that is one of its
/// outputs taken as the run left it (`recorded`): a file the user edited
/// gets its recorded hash back, one deleted comes back where its task's
/// patterns take it in, one the task deleted goes. `None` when no input
/// is an output.
fn hash_with_outputs(t: &PlannedTask, recorded: &BTreeMap<String, LockedOutput>) -> Option<String> {
    const KINDS: [(&str, u8); 3] = [("instructions", 1), ("context", 2), ("reference", 3)];
    let rank = |kind: &str| match kind {
        "instructions" => 1,
        "context" => 2,
        "reference" => 3,
        "dependency" => 4,
        _ => 0,
    };
    let mut key = t.key.clone();
    let mut changed = false;
    let matchers = [None, Some(Matcher::new(&t.key.spec.context)), Some(Matcher::new(&t.key.spec.reference))];
    for (path, o) in recorded {
        for ((kind, r), matcher) in KINDS.iter().zip(&matchers) {
            let at = key.inputs.iter().position(|i| i.kind == *kind && i.name == *path);
            match (at, &o.hash) {
                (Some(i), Some(h)) if key.inputs[i].hash != *h => {
                    key.inputs[i].hash = h.clone();
                    changed = true;
                }
                (Some(i), None) => {
                    key.inputs.remove(i);
                    changed = true;
                }
                // Instruction files are found by name, not by the task's
                // patterns: one deleted is not known to be one.
                (None, Some(h)) if matcher.as_ref().is_some_and(|m| m.matches(path)) => {
                    let i = key
                        .inputs
                        .iter()
                        .position(|i| rank(i.kind) > *r || (rank(i.kind) == *r && i.name > *path))
                        .unwrap_or(key.inputs.len());
                    key.inputs.insert(i, Input { kind, name: path.clone(), hash: h.clone() });
                    changed = true;
                }
                _ => {}
            }
        }
    }
    changed.then(|| key.hash())
}

/// The paths each recorded patch wrote or deleted, by patch hash, kept in
/// `.cassist/cache/outputs.json`: planning reads this one file instead of
/// one store entry per task. A patch hash names its changes, so what the
/// index says never goes stale; a patch it lacks is read from the store
/// entry and added.
pub struct OutputIndex {
    path: std::path::PathBuf,
    patches: HashMap<String, Vec<String>>,
    /// The patches looked up since the index was loaded.
    used: std::collections::HashSet<String>,
    dirty: bool,
}

impl OutputIndex {
    /// The index of the project at `root`; a missing or unreadable one is
    /// empty.
    pub fn load(root: &Path) -> OutputIndex {
        let path = crate::fsx::state_dir(root).join("cache").join("outputs.json");
        let patches = std::fs::read(&path).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
        OutputIndex { path, patches, used: Default::default(), dirty: false }
    }

    /// The outputs of the change `patch`, recorded in the store entry of
    /// input hash `before`; `None` when the store has no readable entry of
    /// it.
    pub fn paths(&mut self, store: &Store, before: &str, patch: &str) -> Option<&[String]> {
        if !self.patches.contains_key(patch) {
            let paths = store.output_paths(before, patch)?;
            self.patches.insert(patch.to_owned(), paths);
            self.dirty = true;
        }
        if !self.used.contains(patch) {
            self.used.insert(patch.to_owned());
        }
        self.patches.get(patch).map(Vec::as_slice)
    }

    /// Writes the index if it changed (a cache: failing is no error worth
    /// stopping for). Only the patches of `lock`'s lines and those looked
    /// up are kept: every run of a task records a new patch, and an index
    /// that kept them all would grow with the project's history (what it
    /// drops is read from its store entry again should it be needed).
    pub fn save(&mut self, lock: &Lock) -> std::io::Result<()> {
        let live: std::collections::HashSet<&str> = lock.tasks.values().map(|l| l.patch.as_str()).collect();
        let before = self.patches.len();
        let used = &self.used;
        self.patches.retain(|patch, _| used.contains(patch) || live.contains(patch.as_str()));
        if !self.dirty && self.patches.len() == before {
            return Ok(());
        }
        let sorted: BTreeMap<&String, &Vec<String>> = self.patches.iter().collect();
        crate::fsx::write_cache(&self.path, &serde_json::to_vec(&sorted)?)?;
        self.dirty = false;
        Ok(())
    }
}

/// Each of `paths` (relative) with its content hash in the tree at `root`
/// seen through `overlay`: a file's through the file-hash cache, a
/// symlink's over its target as written (as the store holds it), `None`
/// when absent.
pub fn outputs_now(root: &Path, cache: &mut FileHashCache, paths: &[String], overlay: &Overlay) -> Outputs {
    let mut out = Outputs::new();
    let mut files: Vec<ResolvedFile> = Vec::new();
    for path in paths {
        if let Some(laid) = overlay.files.get(path) {
            out.insert(path.clone(), laid.hash.clone());
            continue;
        }
        let full = root.join(path);
        let hash = match std::fs::symlink_metadata(&full) {
            Err(_) => None,
            Ok(m) if m.file_type().is_symlink() => std::fs::read_link(&full)
                .ok()
                .map(|t| hash_bytes(std::os::unix::ffi::OsStrExt::as_bytes(t.as_os_str()))),
            Ok(m) if m.is_file() => {
                files.push(ResolvedFile { path: path.clone(), stamp: Stamp::of(&m) });
                continue;
            }
            Ok(_) => Some(NOT_A_FILE.to_owned()),
        };
        out.insert(path.clone(), hash);
    }
    let refs: Vec<&ResolvedFile> = files.iter().collect();
    match cache.hash_files(root, &refs) {
        Ok(hashes) => {
            for (f, h) in files.iter().zip(hashes) {
                out.insert(f.path.clone(), Some(blake3::Hash::from(h).to_hex().to_string()));
            }
        }
        // Gone or unreadable since the stat: not what the run left.
        Err(_) => {
            for f in &files {
                out.insert(f.path.clone(), Some(NOT_A_FILE.to_owned()));
            }
        }
    }
    out
}

/// The tree as a plan sees it: the project at `root` with the replays
/// predicted so far laid over it (`overlay`), files hashed through the
/// file-hash cache.
pub struct View<'a> {
    root: &'a Path,
    cache: &'a mut FileHashCache,
    overlay: &'a Overlay,
    /// What the last replay [`state_of`] predicted does to the tree, path
    /// by path (see [`View::dry_run`]).
    merged: Vec<(String, Merged)>,
    /// The paths the replays the plan predicted write, each with the place
    /// in run order of the first task whose replay does, and the place of
    /// the task looked at: an output that differs from what its run left
    /// because an earlier task's replay wrote it is no edit of the user's.
    replayed: Option<(&'a HashMap<String, usize>, usize)>,
}

impl<'a> View<'a> {
    pub fn new(root: &'a Path, cache: &'a mut FileHashCache, overlay: &'a Overlay) -> View<'a> {
        View { root, cache, overlay, merged: Vec::new(), replayed: None }
    }

    /// The view for the task at place `at` in run order, knowing which
    /// paths the replays predicted before it write (`replayed`, see
    /// [`crate::plan::Plan::replayed_paths`]).
    pub fn after_replays(mut self, replayed: &'a HashMap<String, usize>, at: usize) -> View<'a> {
        self.replayed = Some((replayed, at));
        self
    }

    /// Whether the replay of a task before this one writes `path`.
    fn replayed_before(&self, path: &str) -> bool {
        self.replayed.is_some_and(|(paths, at)| paths.get(path).is_some_and(|&by| by < at))
    }

    /// What the replay [`state_of`] last predicted on this view does to
    /// the tree (to lay over it: [`Overlay::lay_merged`]).
    pub fn take_merged(&mut self) -> Vec<(String, Merged)> {
        std::mem::take(&mut self.merged)
    }

    /// Each of `paths` with its content hash (see [`outputs_now`]).
    pub fn hashes(&mut self, paths: &[String]) -> Outputs {
        outputs_now(self.root, self.cache, paths, self.overlay)
    }

    /// The content and mode at `path` (`None`: absent); an error for what
    /// no change can be merged into (a folder, a fifo) or what cannot be
    /// read.
    fn read(&self, store: &Store, path: &str) -> Result<Option<Side<'_>>, ()> {
        use std::os::unix::fs::MetadataExt;
        if let Some(laid) = self.overlay.files.get(path) {
            let Some(hash) = &laid.hash else { return Ok(None) };
            return match &laid.bytes {
                Some(bytes) => Ok(Some((Cow::Borrowed(&bytes[..]), laid.mode))),
                None => store.get_object(hash).map(|b| Some((Cow::Owned(b), laid.mode))).map_err(|_| ()),
            };
        }
        let full = self.root.join(path);
        let meta = match std::fs::symlink_metadata(&full) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(_) => return Err(()),
            Ok(m) => m,
        };
        let bytes = if meta.file_type().is_symlink() {
            std::fs::read_link(&full).map(|t| t.into_os_string().into_encoded_bytes()).map_err(|_| ())?
        } else if meta.is_file() {
            std::fs::read(&full).map_err(|_| ())?
        } else {
            return Err(());
        };
        Ok(Some((Cow::Owned(bytes), meta.mode())))
    }

    /// What writing `entry`'s change into this tree would do, path by
    /// path, by the three-way rule every write of the tree follows (base:
    /// the content the change started from, ours: the tree, theirs: the
    /// change's result); `Err(path)`: the first path that would conflict,
    /// where the change would not apply.
    pub fn dry_run(&self, store: &Store, entry: &Entry) -> Result<Vec<(String, Merged)>, String> {
        let object = |hash: &Option<String>| -> Option<Vec<u8>> { store.get_object(hash.as_deref()?).ok() };
        let mut out = Vec::new();
        for c in &entry.changes {
            let base_mode = c.old_mode.unwrap_or(c.mode);
            let new = match &c.new {
                Some(_) => Some(object(&c.new).ok_or_else(|| c.path.clone())?),
                None => None,
            };
            // The content a modified, deleted or renamed file started
            // from, when it was kept (else the merge never guesses).
            let old = || match object(&c.old) {
                Some(b) => Base::Known(Some(b)),
                None => Base::Unknown,
            };
            let mut sides = Vec::new();
            match &c.kind {
                ChangeKind::Added => sides.push((c.path.as_str(), Base::Known(None), new)),
                ChangeKind::Renamed { from } => {
                    sides.push((from.as_str(), old(), None));
                    sides.push((c.path.as_str(), Base::Known(None), new));
                }
                ChangeKind::Modified | ChangeKind::Deleted => sides.push((c.path.as_str(), old(), new)),
            }
            for (path, base, theirs) in sides {
                let ours = self.read(store, path).map_err(|()| path.to_owned())?;
                let ours = ours.as_ref().map(|(b, m)| Version::new(b, *m));
                let theirs = theirs.as_deref().map(|b| Version::new(b, c.mode));
                let merged = match &base {
                    Base::Known(base) => {
                        crate::merge::merge(base.as_deref().map(|b| Version::new(b, base_mode)), ours, theirs)
                    }
                    Base::Unknown => crate::merge::merge_unknown_base(ours, theirs),
                };
                out.push((path.to_owned(), merged.map_err(|_| path.to_owned())?));
            }
        }
        Ok(out)
    }
}

/// What a path held before a recorded change: its content (`None`:
/// absent), or not known (not kept, or gone from the store).
enum Base {
    Known(Option<Vec<u8>>),
    Unknown,
}

/// Content and mode of a path as a view has it.
type Side<'a> = (Cow<'a, [u8]>, u32);

/// The outputs a change leaves right after it is written: each path with
/// its new content (as the store names it), `None` for a deletion (a
/// rename's source too).
pub fn outputs_of(changes: &[crate::store::StoredChange]) -> Outputs {
    let mut out = Outputs::new();
    for c in changes {
        if let crate::changes::ChangeKind::Renamed { from } = &c.kind {
            out.insert(from.clone(), None);
        }
    }
    for c in changes {
        out.insert(c.path.clone(), c.new.clone());
    }
    out
}

/// A path a predicted replay writes (`hash`: its new content, `None`: it
/// deletes it).
#[derive(Debug, Clone, Default)]
struct Laid {
    hash: Option<String>,
    /// For a symlink: its target as written.
    link: Option<String>,
    /// The task whose replay writes it.
    by: String,
    /// Its mode (file type and permissions; 0 for a deletion).
    mode: u32,
    /// Its content, when it is no object of the store (a change merged
    /// with the tree's).
    bytes: Option<Arc<[u8]>>,
}

/// The tree as the replays predicted so far will leave it: the paths they
/// write or delete, over the project as it is.
#[derive(Debug, Clone, Default)]
pub struct Overlay {
    files: BTreeMap<String, Laid>,
}

impl Overlay {
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Lays the change of `entry` (replayed by task `by`) over the tree.
    pub fn lay(&mut self, by: &str, entry: &Entry, store: &Store) {
        for path in entry.output_paths() {
            self.files.insert(path, Laid { hash: None, link: None, by: by.to_owned(), mode: 0, bytes: None });
        }
        for c in &entry.changes {
            let symlink = c.mode & crate::changes::S_IFMT == crate::changes::S_IFLNK;
            let link = match &c.new {
                Some(h) if symlink => store.get_object(h).ok().map(|b| String::from_utf8_lossy(&b).into_owned()),
                _ => None,
            };
            let mode = if c.new.is_some() { c.mode } else { 0 };
            self.files.insert(c.path.clone(), Laid { hash: c.new.clone(), link, by: by.to_owned(), mode, bytes: None });
        }
    }

    /// Lays what a replay by `by` does to the tree, as [`View::dry_run`]
    /// merged it: the paths it writes or deletes (a path the tree already
    /// holds as the change leaves it is not laid).
    pub fn lay_merged(&mut self, by: &str, merged: Vec<(String, Merged)>) {
        for (path, m) in merged {
            match m {
                Merged::Keep => {}
                Merged::Delete => self.lay_content(by, &path, None),
                Merged::Write { bytes, mode } => {
                    self.lay_content(by, &path, Some((&bytes, mode)));
                    if let Some(laid) = self.files.get_mut(&path) {
                        laid.bytes = Some(Arc::from(bytes));
                    }
                }
            }
        }
    }

    /// Lays one path of a change about to be written: its new content
    /// (and mode), or `None` for a deletion.
    pub fn lay_content(&mut self, by: &str, path: &str, new: Option<(&[u8], u32)>) {
        let laid = match new {
            None => Laid { hash: None, link: None, by: by.to_owned(), mode: 0, bytes: None },
            Some((bytes, mode)) => {
                let symlink = mode & crate::changes::S_IFMT == crate::changes::S_IFLNK;
                Laid {
                    hash: Some(hash_bytes(bytes)),
                    link: symlink.then(|| String::from_utf8_lossy(bytes).into_owned()),
                    by: by.to_owned(),
                    mode,
                    bytes: None,
                }
            }
        };
        self.files.insert(path.to_owned(), laid);
    }

    /// The tasks whose predicted replays change any of `inputs` (by name)
    /// or add to them, sorted.
    pub fn writers<'a>(&'a self, names: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
        let mut by: Vec<&str> = names.filter_map(|n| self.files.get(n)).map(|l| l.by.as_str()).collect();
        by.sort();
        by.dedup();
        by
    }

    /// The inputs of `kind` from `files` (resolved from `patterns` on the
    /// tree as it is; `hashes` holds their hashes) as the laid changes will
    /// leave them: a laid path gets its new hash, a deleted one goes, and
    /// a laid path the patterns match is added. `hash_file` hashes a file
    /// of the tree (a symlink's target).
    pub fn inputs(
        &self,
        kind: &'static str,
        patterns: &[String],
        files: &[ResolvedFile],
        hashes: &HashMap<String, String>,
        hash_file: &mut dyn FnMut(&str) -> Option<String>,
    ) -> Vec<Input> {
        let mut map: BTreeMap<String, String> =
            files.iter().filter_map(|f| Some((f.path.clone(), hashes.get(&f.path)?.clone()))).collect();
        if !self.is_empty() {
            // The laid paths that count: those of the files resolved, and
            // those the patterns match, looked for only under each
            // pattern's literal folders (a flush lays a thousand tasks'
            // changes, and hashes each of them over all of them).
            let matcher = Matcher::new(patterns);
            let mut laid: BTreeSet<&String> =
                map.keys().filter_map(|p| self.files.get_key_value(p)).map(|(k, _)| k).collect();
            for pattern in patterns {
                let prefix = literal_prefix(pattern);
                let under = self
                    .files
                    .range::<str, _>((std::ops::Bound::Included(prefix.as_str()), std::ops::Bound::Unbounded));
                for (path, _) in under.take_while(|(p, _)| p.starts_with(&prefix)) {
                    if matcher.matches(path) {
                        laid.insert(path);
                    }
                }
            }
            for path in laid {
                match self.content(path, &self.files[path], hash_file) {
                    Some(h) => map.insert(path.clone(), h),
                    None => map.remove(path),
                };
            }
        }
        map.into_iter().map(|(name, hash)| Input { kind, name, hash }).collect()
    }

    /// The content hash a laid path will have as a context file: a
    /// symlink's is its target's (followed, as resolving does), `None`
    /// when absent or leading nowhere.
    fn content(&self, path: &str, laid: &Laid, hash_file: &mut dyn FnMut(&str) -> Option<String>) -> Option<String> {
        let mut seen = 0;
        let (mut path, mut laid) = (path.to_owned(), laid.clone());
        loop {
            let Some(target) = &laid.link else { return laid.hash.clone() };
            seen += 1;
            if seen > 40 || target.starts_with('/') {
                return None;
            }
            let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
            let next = normalize(&format!("{dir}/{target}"));
            if target.split('/').filter(|c| *c == "..").count() > dir.split('/').filter(|c| !c.is_empty()).count() {
                return None; // leads out of the project
            }
            match self.files.get(&next) {
                Some(l) => (path, laid) = (next, l.clone()),
                None => return hash_file(&next),
            }
        }
    }
}

/// What every path `pattern` matches starts with: its folders before the
/// first one with a wildcard (a literal pattern: itself, which names a
/// file or every file below a folder).
fn literal_prefix(pattern: &str) -> String {
    let pattern = normalize(pattern);
    if is_literal(&pattern) {
        return pattern;
    }
    let mut prefix = String::new();
    for part in pattern.split('/') {
        if !is_literal(part) {
            break;
        }
        prefix.push_str(part);
        prefix.push('/');
    }
    prefix
}

/// Whether a path is one a task's context patterns resolve to (the
/// resolver's rules: a literal names a file or every file below a folder;
/// a glob matches; `.git/` and `.cassist/` never).
struct Matcher {
    literals: Vec<String>,
    globs: Option<globset::GlobSet>,
}

impl Matcher {
    fn new(patterns: &[String]) -> Matcher {
        let mut literals = Vec::new();
        let mut set = globset::GlobSetBuilder::new();
        let mut any = false;
        for p in patterns {
            let p = normalize(p);
            if is_literal(&p) {
                literals.push(p);
            } else if let Ok(g) = build_glob(&p) {
                set.add(g);
                any = true;
            }
        }
        Matcher { literals, globs: if any { set.build().ok() } else { None } }
    }

    fn matches(&self, path: &str) -> bool {
        if is_reserved(path) {
            return false;
        }
        self.literals.iter().any(|l| path == l || path.strip_prefix(l.as_str()).is_some_and(|r| r.starts_with('/')))
            || self.globs.as_ref().is_some_and(|g| g.is_match(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outputs_hash_is_over_sorted_paths_and_absence_counts() {
        let a: Outputs = [("b".to_owned(), Some("1".to_owned())), ("a".to_owned(), None)].into();
        let b: Outputs = [("a".to_owned(), None), ("b".to_owned(), Some("1".to_owned()))].into();
        assert_eq!(outputs_hash(&a), outputs_hash(&b));
        let c: Outputs = [("a".to_owned(), Some("0".to_owned())), ("b".to_owned(), Some("1".to_owned()))].into();
        assert_ne!(outputs_hash(&a), outputs_hash(&c));
    }

    #[test]
    fn the_output_index_keeps_what_the_lock_names_or_was_looked_up() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let path = crate::fsx::state_dir(root).join("cache").join("outputs.json");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        // Three patches known: one of the lock, one looked up now, one of
        // an older run that nothing names any more.
        let known = r#"{"locked":["a.txt"],"looked-up":["b.txt"],"stale":["c.txt"]}"#;
        std::fs::write(&path, known).unwrap();
        let store = Store::open(root);
        let mut index = OutputIndex::load(root);
        assert_eq!(index.paths(&store, "no-entry", "looked-up"), Some(&["b.txt".to_owned()][..]));
        let mut lock = Lock::default();
        let line = |patch: &str| crate::lock::LockEntry {
            before: "b".into(),
            after: "a".into(),
            recipe: None,
            dependencies: None,
            outputs: None,
            output_files: Default::default(),
            patch: patch.into(),
            agent: "x".into(),
            agent_version: None,
            date: "d".into(),
        };
        lock.tasks.insert("t".into(), line("locked"));
        index.save(&lock).unwrap();
        let saved: BTreeMap<String, Vec<String>> = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(saved.keys().collect::<Vec<_>>(), ["locked", "looked-up"]);
        // Nothing more to drop: the file is left as it is.
        std::fs::write(&path, "untouched").unwrap();
        index.save(&lock).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "untouched");
    }

    /// A project whose task `t` reads `*.txt` (so its own output
    /// `out.txt` too) besides `src.txt`, planned with `out.txt` holding
    /// `out` (`None`: absent).
    fn planned(dir: &Path, out: Option<&str>) -> (crate::plan::Plan, PlannedTask) {
        let write = |rel: &str, text: &str| {
            std::fs::create_dir_all(dir.join(rel).parent().unwrap()).unwrap();
            std::fs::write(dir.join(rel), text).unwrap();
        };
        write("cassist.kdl", "trust \"workspace-write\"\n");
        write("tasks/t.kdl", "task \"t\" {\n    goal \"g\"\n    context {\n        file \"*.txt\"\n    }\n}\n");
        if !dir.join("src.txt").exists() {
            write("src.txt", "source\n");
        }
        match out {
            Some(text) => write("out.txt", text),
            None => {
                let _ = std::fs::remove_file(dir.join("out.txt"));
            }
        }
        let plan = crate::plan::load_and_plan(dir, &Default::default()).unwrap();
        let t = plan.tasks[0].clone();
        (plan, t)
    }

    /// The state of `t` against `lock` and the project's store, on the
    /// tree as it is.
    fn state(dir: &Path, lock: &Lock, t: &PlannedTask) -> (State, Cached) {
        let store = Store::open(dir);
        let mut cache = FileHashCache::load(&dir.join("no-cache"));
        let overlay = Overlay::default();
        let mut view = View::new(dir, &mut cache, &overlay);
        state_of(lock, &store, &mut OutputIndex::load(dir), t, &mut view)
    }

    /// A store entry of task `t`: its run from `before` to `after` made
    /// these changes (path, kind, old, new), their contents stored.
    fn entry(
        store: &Store,
        before: &str,
        after: &str,
        changes: &[(&str, ChangeKind, Option<&str>, Option<&str>)],
    ) -> Entry {
        let put = |text: Option<&str>| text.map(|t| store.put_object(t.as_bytes()).unwrap());
        let changes: Vec<crate::store::StoredChange> = changes
            .iter()
            .map(|(path, kind, old, new)| crate::store::StoredChange {
                path: (*path).to_owned(),
                kind: kind.clone(),
                old: put(*old),
                new: put(*new),
                mode: crate::changes::S_IFREG | 0o644,
                old_mode: old.map(|_| crate::changes::S_IFREG | 0o644),
            })
            .collect();
        let e = Entry {
            format: crate::store::ENTRY_FORMAT,
            task: "t".into(),
            before: before.into(),
            after: after.into(),
            patch: crate::store::patch_hash(&changes),
            outputs: Some(outputs_of(&changes)),
            changes,
            key: serde_json::json!({}),
            after_key: None,
            recipe: None,
            dependencies: None,
            agent: "a".into(),
            agent_version: None,
            date: String::new(),
            summary: None,
            cost_usd: None,
            duration_ms: 0,
            attempts: 1,
            records: Default::default(),
            split: Vec::new(),
        };
        store.put_entry(&e).unwrap();
        e
    }

    /// The lock of one line, `t`'s, made from its store entry.
    fn lock_of(e: &Entry) -> Lock {
        let line = LockEntry {
            before: e.before.clone(),
            after: e.after.clone(),
            recipe: None,
            dependencies: None,
            outputs: e.outputs.as_ref().map(outputs_hash),
            output_files: output_records(e),
            patch: e.patch.clone(),
            agent: e.agent.clone(),
            agent_version: None,
            date: String::new(),
        };
        Lock { tasks: [("t".to_owned(), line)].into() }
    }

    #[test]
    fn inputs_that_differ_only_in_the_tasks_own_outputs_are_as_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let (_, landed) = planned(dir.path(), Some("landed\n"));
        let recorded: BTreeMap<String, LockedOutput> =
            [("out.txt".to_owned(), LockedOutput { hash: Some(hash_bytes(b"landed\n")), created: true })].into();
        assert_eq!(hash_with_outputs(&landed, &recorded), None, "nothing to take back");
        let (_, edited) = planned(dir.path(), Some("edited\n"));
        assert_ne!(edited.hash, landed.hash);
        assert_eq!(hash_with_outputs(&edited, &recorded).as_deref(), Some(landed.hash.as_str()));
        // Deleted: it comes back where the task's pattern takes it in.
        let (_, deleted) = planned(dir.path(), None);
        assert_eq!(hash_with_outputs(&deleted, &recorded).as_deref(), Some(landed.hash.as_str()));
        // One the task deleted goes.
        let gone: BTreeMap<String, LockedOutput> = [("out.txt".to_owned(), LockedOutput::default())].into();
        assert_eq!(hash_with_outputs(&edited, &gone).as_deref(), Some(deleted.hash.as_str()));
        // Another input changed too: not as recorded.
        std::fs::write(dir.path().join("src.txt"), "other source\n").unwrap();
        let (_, moved) = planned(dir.path(), Some("edited\n"));
        assert_ne!(hash_with_outputs(&moved, &recorded).as_deref(), Some(landed.hash.as_str()));
    }

    #[test]
    fn a_user_edit_is_kept_a_missing_created_output_replayed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path());
        let (_, before) = planned(dir.path(), None);
        let (_, after) = planned(dir.path(), Some("new\n"));
        let e = entry(&store, &before.hash, &after.hash, &[("out.txt", ChangeKind::Added, None, Some("new\n"))]);
        let lock = lock_of(&e);
        let (st, c) = state(dir.path(), &lock, &after);
        assert_eq!((st, c.basis, c.outputs_edited.len()), (State::UpToDate, Basis::After, 0));

        let (_, edited) = planned(dir.path(), Some("mine\n"));
        let (st, c) = state(dir.path(), &lock, &edited);
        assert_eq!((st, c.outputs_edited), (State::UpToDate, vec!["output edited: out.txt".to_owned()]));

        let (_, deleted) = planned(dir.path(), None);
        let (st, c) = state(dir.path(), &lock, &deleted);
        assert_eq!((st, c.entry.as_deref()), (State::Replay, Some(before.hash.as_str())));
        // Without the entry (a clone with no store): the agent runs.
        store.remove_entry(&e.before).unwrap();
        let (st, c) = state(dir.path(), &lock, &deleted);
        assert_eq!((st, c.unusable), (State::Run, None));
        // An entry that does not read: said, and the task runs.
        std::fs::create_dir_all(store.entry_path("x").parent().unwrap()).unwrap();
        std::fs::write(store.entry_path(&e.before), "{ garbage").unwrap();
        let (st, c) = state(dir.path(), &lock, &deleted);
        assert!(st == State::Run && c.unusable.is_some(), "{c:?}");
    }

    #[test]
    fn a_changed_file_is_replayed_when_back_at_its_base_and_kept_when_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path());
        // `t` changed `out.txt` (which it reads) from `a b c` to `a B c`.
        let (_, before) = planned(dir.path(), Some("a\nb\nc\n"));
        let (_, after) = planned(dir.path(), Some("a\nB\nc\n"));
        let changes = [("out.txt", ChangeKind::Modified, Some("a\nb\nc\n"), Some("a\nB\nc\n"))];
        let e = entry(&store, &before.hash, &after.hash, &changes);
        let lock = lock_of(&e);
        // Back at its base: the inputs are the before-state.
        let (st, c) = state(dir.path(), &lock, &before);
        assert_eq!((st, c.basis), (State::Replay, Basis::Before));
        // Deleted by the user: kept.
        let (_, deleted) = planned(dir.path(), None);
        let (st, c) = state(dir.path(), &lock, &deleted);
        assert_eq!((st, c.outputs_edited), (State::UpToDate, vec!["output deleted: out.txt".to_owned()]));
        // Edited on another line: kept too.
        let (_, edited) = planned(dir.path(), Some("a\nB\nc!\n"));
        let (st, _) = state(dir.path(), &lock, &edited);
        assert_eq!(st, State::UpToDate);
    }

    #[test]
    fn a_replay_that_would_not_merge_is_run_and_one_that_merges_is_laid_merged() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path());
        let (_, before) = planned(dir.path(), Some("x\n"));
        // `t`'s stored run changed `notes.md` (no input of it) and lock
        // names it with inputs equal to now: a replay, if it merges.
        let changes = [("notes.md", ChangeKind::Modified, Some("a\nb\nc\nd\ne\n"), Some("a\nB\nc\nd\ne\n"))];
        let e = entry(&store, &before.hash, "elsewhere", &changes);
        let lock = lock_of(&e);
        std::fs::write(dir.path().join("notes.md"), "a\nmine\nc\nd\ne\n").unwrap();
        let (st, c) = state(dir.path(), &lock, &before);
        assert_eq!((st, c.basis, c.conflict.as_deref()), (State::Run, Basis::Before, Some("notes.md")));
        assert_eq!(c.entry, None);
        // The user's edit on another line: merged.
        std::fs::write(dir.path().join("notes.md"), "a\nb\nc\nd\nmine\n").unwrap();
        let mut cache = FileHashCache::load(&dir.path().join("no-cache"));
        let overlay = Overlay::default();
        let mut view = View::new(dir.path(), &mut cache, &overlay);
        let (st, _) = state_of(&lock, &store, &mut OutputIndex::load(dir.path()), &before, &mut view);
        assert_eq!(st, State::Replay);
        let merged = view.take_merged();
        let want = Merged::Write { bytes: b"a\nB\nc\nd\nmine\n".to_vec(), mode: crate::changes::S_IFREG | 0o644 };
        assert_eq!(merged, [("notes.md".to_owned(), want)]);
        // Laid over the tree, a later dry run reads the merged content.
        let mut overlay = Overlay::default();
        overlay.lay_merged("t", merged);
        let again = View::new(dir.path(), &mut cache, &overlay);
        assert_eq!(again.dry_run(&store, &e).unwrap(), [("notes.md".to_owned(), Merged::Keep)]);
        // A base that was not kept: never guessed.
        let mut unknown = e.clone();
        unknown.changes[0].old = None;
        let none = Overlay::default();
        let view = View::new(dir.path(), &mut cache, &none);
        assert_eq!(view.dry_run(&store, &unknown), Err("notes.md".to_owned()));
    }

    #[test]
    fn a_pattern_matches_only_below_its_literal_folders() {
        assert_eq!(literal_prefix("src/*.py"), "src/");
        assert_eq!(literal_prefix("./packages/p1/src/**/*.ts"), "packages/p1/src/");
        assert_eq!(literal_prefix("lib"), "lib");
        assert_eq!(literal_prefix("**/x.txt"), "");
        assert_eq!(literal_prefix("{a,b}/x"), "");
    }

    #[test]
    fn laid_paths_join_the_inputs_their_patterns_match() {
        let mut overlay = Overlay::default();
        let laid =
            |h: Option<&str>| Laid { hash: h.map(str::to_owned), link: None, by: "dep".into(), ..Laid::default() };
        overlay.files.insert("src/new.py".into(), laid(Some("n")));
        overlay.files.insert("src/old.py".into(), laid(None));
        overlay.files.insert("src/kept.py".into(), laid(Some("k2")));
        overlay.files.insert("docs/x.md".into(), laid(Some("d")));
        overlay.files.insert("lib/a/b.txt".into(), laid(Some("b")));
        let f = |p: &str| ResolvedFile { path: p.into(), stamp: Stamp::default() };
        let files = [f("src/kept.py"), f("src/old.py"), f("src/same.py")];
        let hashes: HashMap<String, String> =
            [("src/kept.py", "k"), ("src/old.py", "o"), ("src/same.py", "s")].map(|(a, b)| (a.into(), b.into())).into();
        let patterns = ["src/*.py".to_owned(), "lib".to_owned()];
        let inputs = overlay.inputs("context", &patterns, &files, &hashes, &mut |_| None);
        let got: Vec<(&str, &str)> = inputs.iter().map(|i| (i.name.as_str(), i.hash.as_str())).collect();
        assert_eq!(got, [("lib/a/b.txt", "b"), ("src/kept.py", "k2"), ("src/new.py", "n"), ("src/same.py", "s")]);
        assert_eq!(overlay.writers(["src/same.py", "src/new.py"].into_iter()), ["dep"]);
    }

    #[test]
    fn a_laid_symlink_is_followed_like_the_resolver_does() {
        let mut overlay = Overlay::default();
        overlay.files.insert(
            "a/link".into(),
            Laid { hash: Some("l".into()), link: Some("../b/t".into()), by: "x".into(), ..Laid::default() },
        );
        overlay
            .files
            .insert("b/t".into(), Laid { hash: Some("t".into()), link: None, by: "x".into(), ..Laid::default() });
        overlay.files.insert(
            "out".into(),
            Laid { hash: Some("o".into()), link: Some("../../etc".into()), by: "x".into(), ..Laid::default() },
        );
        let mut none = |_: &str| None;
        assert_eq!(overlay.content("a/link", &overlay.files["a/link"].clone(), &mut none), Some("t".into()));
        assert_eq!(overlay.content("out", &overlay.files["out"].clone(), &mut none), None);
        let mut disk = |p: &str| (p == "c").then(|| "c-hash".to_owned());
        overlay.files.insert(
            "d".into(),
            Laid { hash: Some("l".into()), link: Some("c".into()), by: "x".into(), ..Laid::default() },
        );
        assert_eq!(overlay.content("d", &overlay.files["d"].clone(), &mut disk), Some("c-hash".into()));
    }
}
