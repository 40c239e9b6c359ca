//! A task's state against `cassist.lock` and the store, the
//! outputs part of its after-state, and the replays a plan predicts.
//!
//! - `up-to-date`: the inputs equal the lock's `after` and the task's
//!   outputs (the paths its patch wrote or deleted) still hash to the
//!   lock's `outputs` (a line without `outputs` is checked on inputs only).
//! - `replay`: the inputs equal the lock's `after` but an output was
//!   deleted or edited; or the inputs equal the lock's `before`; or the
//!   store holds an entry for the current inputs (a run killed before its
//!   lock line was written, a lost line, inputs seen before). The entry
//!   must be usable: every object its change writes there and whole.
//! - `run`: anything else, an unusable entry included (with a warning).
//!
//! Planning in run order, a task predicted `replay` lays its change over an
//! [`Overlay`] of the tree; later tasks' inputs and outputs are hashed
//! through it, as `run` sees them once the replay is done.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use super::State;
use super::context::ResolvedFile;
use super::filehash::FileHashCache;
use super::hash::{Input, hash_bytes, hash_json};
use crate::lock::Lock;
use crate::paths::{Stamp, build_glob, is_literal, is_reserved, normalize};
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
    /// The inputs equal the lock's after-state and the outputs are as the
    /// run left them (or the line has no outputs to check, or the store no
    /// record of which they are).
    After,
    /// The inputs equal the lock's after-state but an output was deleted or
    /// edited: the change is written again.
    OutputsChanged,
    /// The inputs equal the lock's before-state.
    Before,
    /// The store holds an entry for the current inputs that the lock does
    /// not name.
    StoreEntry,
}

/// What the lock and the store say of a task, beside its [`State`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cached {
    pub basis: Basis,
    /// State `replay`: the input hash naming the store entry to replay.
    pub entry: Option<String>,
    /// The recorded patch, handed to dependents (`up-to-date`, `replay`).
    pub patch: Option<String>,
    /// A store entry that would have been used but cannot be: why (the
    /// task then runs as if there were none, with a warning).
    pub unusable: Option<String>,
    /// [`Basis::OutputsChanged`]: which, in words ("output out/x.txt
    /// deleted").
    pub outputs_changed: Vec<String>,
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

/// The state of a task whose input hash is `hash`, named `name`.
/// `outputs_now` hashes the given paths as the tree is (or will be); which
/// paths they are comes from `index`.
pub fn state_of(
    lock: &Lock,
    store: &Store,
    index: &mut OutputIndex,
    name: &str,
    hash: &str,
    outputs_now: &mut dyn FnMut(&[String]) -> Outputs,
) -> (State, Cached) {
    let line = lock.tasks.get(name);
    let mut cached = Cached::default();
    let replay = |cached: &mut Cached, key: &str, basis: Basis| -> bool {
        // An entry the lock records must hold the lock's patch.
        let locked_patch = line.filter(|l| l.before == key).map(|l| l.patch.as_str());
        match store.usable_entry_for(key, locked_patch) {
            Ok(Some(entry)) => {
                *cached = Cached { basis, entry: Some(key.to_owned()), patch: Some(entry.patch), ..Cached::default() };
                true
            }
            Ok(None) => false,
            Err(why) => {
                cached.unusable = Some(why.to_string());
                false
            }
        }
    };
    if let Some(l) = line
        && l.after == hash
    {
        let now = match &l.outputs {
            // Which files they are is in the store only.
            Some(recorded) => match index.paths(store, &l.before, &l.patch) {
                Some(paths) => Some(outputs_now(paths)).filter(|now| outputs_hash(now) != *recorded),
                // An entry that is there but cannot say which files they
                // are (unreadable, or not the lock's patch): whether they
                // are intact is unknown, so the task is never up-to-date.
                None => match unreadable_entry(store, l) {
                    Some(why) => {
                        cached.unusable = Some(why);
                        cached.basis = Basis::OutputsChanged;
                        return (State::Run, cached);
                    }
                    None => None,
                },
            },
            None => None,
        };
        let Some(now) = now else {
            return (
                State::UpToDate,
                Cached { basis: Basis::After, patch: Some(l.patch.clone()), ..Cached::default() },
            );
        };
        let recorded = store.read_entry(&l.before).ok().flatten().and_then(|e| e.outputs);
        let changed = changed_outputs(recorded.as_ref(), &now);
        if replay(&mut cached, &l.before, Basis::OutputsChanged) {
            cached.outputs_changed = changed;
            return (State::Replay, cached);
        }
        cached.basis = Basis::OutputsChanged;
        cached.outputs_changed = changed;
    }
    if let Some(l) = line
        && l.before == hash
        && l.after != hash
        && replay(&mut cached, &l.before, Basis::Before)
    {
        return (State::Replay, cached);
    }
    if line.is_none_or(|l| l.before != hash) && replay(&mut cached, hash, Basis::StoreEntry) {
        return (State::Replay, cached);
    }
    (State::Run, cached)
}

/// Why the store entry `line` names cannot be read for its outputs, when
/// it is there: unreadable, or recording another patch than the lock.
/// `None` when there is no entry (a fresh clone: the line is checked on
/// its inputs).
fn unreadable_entry(store: &Store, line: &crate::lock::LockEntry) -> Option<String> {
    match store.read_entry(&line.before) {
        Ok(None) => None,
        Ok(Some(e)) if e.patch != line.patch => {
            Some(crate::store::Unusable::NotLocked { locked: line.patch.clone() }.to_string())
        }
        Ok(Some(_)) => None,
        Err(why) => Some(why.to_string()),
    }
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

/// The outputs that differ from what the run left, in words.
fn changed_outputs(recorded: Option<&Outputs>, now: &Outputs) -> Vec<String> {
    let Some(recorded) = recorded else { return vec!["its outputs changed".to_owned()] };
    let mut out: Vec<String> = now
        .iter()
        .filter(|(path, hash)| recorded.get(*path) != Some(hash))
        .map(|(path, hash)| match (recorded.get(path).cloned().flatten(), hash) {
            (Some(_), None) => format!("output {path} deleted"),
            (None, Some(_)) => format!("output {path} added again (the run left it deleted)"),
            _ => format!("output {path} changed"),
        })
        .collect();
    if out.is_empty() {
        out.push("its outputs changed".to_owned());
    }
    out
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
#[derive(Debug, Clone)]
struct Laid {
    hash: Option<String>,
    /// For a symlink: its target as written.
    link: Option<String>,
    /// The task whose replay writes it.
    by: String,
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
            self.files.insert(path, Laid { hash: None, link: None, by: by.to_owned() });
        }
        for c in &entry.changes {
            let symlink = c.mode & crate::changes::S_IFMT == crate::changes::S_IFLNK;
            let link = match &c.new {
                Some(h) if symlink => store.get_object(h).ok().map(|b| String::from_utf8_lossy(&b).into_owned()),
                _ => None,
            };
            self.files.insert(c.path.clone(), Laid { hash: c.new.clone(), link, by: by.to_owned() });
        }
    }

    /// Lays one path of a change about to be written: its new content
    /// (and mode), or `None` for a deletion.
    pub fn lay_content(&mut self, by: &str, path: &str, new: Option<(&[u8], u32)>) {
        let laid = match new {
            None => Laid { hash: None, link: None, by: by.to_owned() },
            Some((bytes, mode)) => {
                let symlink = mode & crate::changes::S_IFMT == crate::changes::S_IFLNK;
                Laid {
                    hash: Some(hash_bytes(bytes)),
                    link: symlink.then(|| String::from_utf8_lossy(bytes).into_owned()),
                    by: by.to_owned(),
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
            outputs: None,
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
        let laid = |h: Option<&str>| Laid { hash: h.map(str::to_owned), link: None, by: "dep".into() };
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
        overlay
            .files
            .insert("a/link".into(), Laid { hash: Some("l".into()), link: Some("../b/t".into()), by: "x".into() });
        overlay.files.insert("b/t".into(), Laid { hash: Some("t".into()), link: None, by: "x".into() });
        overlay
            .files
            .insert("out".into(), Laid { hash: Some("o".into()), link: Some("../../etc".into()), by: "x".into() });
        let mut none = |_: &str| None;
        assert_eq!(overlay.content("a/link", &overlay.files["a/link"].clone(), &mut none), Some("t".into()));
        assert_eq!(overlay.content("out", &overlay.files["out"].clone(), &mut none), None);
        let mut disk = |p: &str| (p == "c").then(|| "c-hash".to_owned());
        overlay.files.insert("d".into(), Laid { hash: Some("l".into()), link: Some("c".into()), by: "x".into() });
        assert_eq!(overlay.content("d", &overlay.files["d"].clone(), &mut disk), Some("c-hash".into()));
    }
}
