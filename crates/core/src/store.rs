//! The content-addressed store under `.cassist/store/` and the project
//! lock; writes go through [`crate::fsx`].

use std::path::{Path, PathBuf};

use crate::fsx::{ensure_state_dir, state_dir, write_atomic};

/// The content-addressed store `.cassist/store/`: `objects/` holds blobs
/// named by their blake3 hash, `entries/` one JSON document per recorded
/// task run, named by the task's input hash before the run. Every write is
/// atomic (temp file + rename) and objects are written before the entry
/// that names them, so a crash never leaves an entry with missing parts.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
    /// Most entries a usable entry's change may have (`limits { files }`).
    files_limit: u64,
}

/// One change of a recorded patch; contents are objects of the store.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StoredChange {
    pub path: String,
    #[serde(flatten)]
    pub kind: crate::changes::ChangeKind,
    /// Hash of the content before (none for added files).
    pub old: Option<String>,
    /// Hash of the content after (none for deleted files).
    pub new: Option<String>,
    pub mode: u32,
    /// Mode before (none for added files, and in entries of older
    /// releases): the base of the three-way merge, beside `old`. Not part
    /// of the patch hash ([`patch_hash`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_mode: Option<u32>,
}

/// The patch hash of a recorded change: blake3 over the canonical JSON of
/// its changes, without their base modes (an entry of an older release,
/// which has none, keeps its hash).
pub fn patch_hash(changes: &[StoredChange]) -> String {
    let bare: Vec<StoredChange> = changes.iter().map(|c| StoredChange { old_mode: None, ..c.clone() }).collect();
    crate::plan::hash::hash_json(&bare)
}

/// A recorded task run.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Entry {
    pub format: u32,
    pub task: String,
    /// Input hash before the run (the entry's name) and after integration.
    pub before: String,
    pub after: String,
    /// Hash of `changes` (canonical JSON).
    pub patch: String,
    pub changes: Vec<StoredChange>,
    /// The input key document the `before` hash was made from.
    pub key: serde_json::Value,
    /// The key of the state the project was left in (after the run).
    #[serde(default)]
    pub after_key: Option<serde_json::Value>,
    /// The task's recipe and its dependencies' outputs at the run, as its
    /// lock line records them (`None` in an older cassist's entry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recipe: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependencies: Option<String>,
    /// The task's outputs as the run left the tree: each path its patch
    /// wrote or deleted, with its content hash then (`None`: absent). The
    /// lock's `outputs` is their hash; `explain` names the ones that differ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs: Option<Outputs>,
    pub agent: String,
    pub agent_version: Option<String>,
    pub date: String,
    pub summary: Option<String>,
    pub cost_usd: Option<f64>,
    pub duration_ms: u64,
    pub attempts: u32,
    /// Named records (prompts, transcripts, review, acceptance, patch.diff)
    /// → object hash.
    pub records: std::collections::BTreeMap<String, String>,
    /// The parts a task that had to be split passed with (an oversized
    /// task is cut into parts rather than retried whole): it starts split
    /// the next time its inputs change.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub split: Vec<crate::part::Part>,
}

pub const ENTRY_FORMAT: u32 = 1;

/// A lock line verified on the tree its after-state names, kept where the
/// store has no entry of its run ([`Store::put_verified`]).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Verified {
    pub task: String,
    pub line: crate::lock::LockEntry,
}

/// A task's outputs: path → content hash (`None`: absent), sorted.
pub type Outputs = std::collections::BTreeMap<String, Option<String>>;

impl Entry {
    /// The objects it names: its changes' old and new contents and its
    /// records (what `cache gc` keeps, what the remote cache carries).
    pub fn objects(&self) -> std::collections::HashSet<String> {
        objects_of(self)
    }

    /// The paths the recorded change wrote or deleted (a rename's source
    /// too), sorted: the task's outputs.
    pub fn output_paths(&self) -> Vec<String> {
        output_paths(&self.changes)
    }
}

/// The paths `changes` write or delete (a rename's source too), sorted.
fn output_paths(changes: &[StoredChange]) -> Vec<String> {
    let mut paths: Vec<String> = changes
        .iter()
        .flat_map(|c| {
            let from = match &c.kind {
                crate::changes::ChangeKind::Renamed { from } => Some(from.clone()),
                _ => None,
            };
            std::iter::once(c.path.clone()).chain(from)
        })
        .collect();
    paths.sort();
    paths.dedup();
    paths
}

/// The objects an entry names: the new and old contents of its changes,
/// and its records (what `cache gc` keeps for it).
fn objects_of(e: &Entry) -> std::collections::HashSet<String> {
    e.changes.iter().flat_map(|c| [c.new.clone(), c.old.clone()]).flatten().chain(e.records.values().cloned()).collect()
}

/// Whether `s` can be a hash of the store (and so a file name in it): hex
/// digits only, as an entry from elsewhere (the remote cache) may say
/// anything.
fn is_hash(s: &str) -> bool {
    !s.is_empty() && s.len() <= 128 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Why an object of the store could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// Missing or unreadable.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// Its bytes do not hash to its name.
    #[error("store object {hash} is corrupt")]
    Corrupt { hash: String },
}

/// Why a store entry cannot be used (the task then runs as if there were
/// no entry).
#[derive(Debug, thiserror::Error)]
pub enum Unusable {
    /// The entry file is not an entry this cassist reads.
    #[error("its entry {} is unreadable ({why})", .file.display())]
    Garbage {
        file: PathBuf,
        #[source]
        why: Garbage,
    },
    /// An object of the change is missing.
    #[error("store object {object} (the new {path}) is missing")]
    Missing { object: String, path: String },
    /// An object of the change does not hash to its name.
    #[error("store object {object} (the new {path}) is corrupt")]
    Corrupt { object: String, path: String },
    /// Its change list does not hash to the patch hash it records: edited
    /// after it was written.
    #[error("its change list does not hash to its patch hash {patch}")]
    Mismatch { patch: String },
    /// Its change list is not the patch `cassist.lock` records for it.
    #[error("its change list does not hash to the patch hash cassist.lock records ({locked})")]
    NotLocked { locked: String },
    /// Its change has more entries than `limits { files }` allows (found
    /// before any of its objects is read).
    #[error("its change has {count} files, over the limit of {limit} (limits files)")]
    TooManyFiles { count: u64, limit: u64 },
}

/// Whether `entry` may be replayed as far as its change list says, before
/// any object is read: at most `files_limit` entries, hashing to its own
/// patch hash and, when `cassist.lock` records a patch for it
/// (`locked_patch`), to that one.
pub fn check_entry(entry: &Entry, files_limit: u64, locked_patch: Option<&str>) -> Result<(), Unusable> {
    let count = entry.changes.len() as u64;
    if count > files_limit {
        return Err(Unusable::TooManyFiles { count, limit: files_limit });
    }
    let patch = patch_hash(&entry.changes);
    if patch != entry.patch {
        return Err(Unusable::Mismatch { patch: entry.patch.clone() });
    }
    match locked_patch {
        Some(locked) if locked != patch => Err(Unusable::NotLocked { locked: locked.to_owned() }),
        _ => Ok(()),
    }
}

/// Why an entry file is no entry this cassist reads.
#[derive(Debug, thiserror::Error)]
pub enum Garbage {
    #[error(transparent)]
    Read(std::io::Error),
    #[error(transparent)]
    Json(serde_json::Error),
    /// Another format than [`ENTRY_FORMAT`].
    #[error("entry format {0}")]
    Format(u32),
}

/// What [`Store::output_paths`] reads of an entry: its changes, nothing
/// else (an entry holds whole input keys; planning reads one per task).
#[derive(serde::Deserialize)]
struct ChangesOnly {
    format: u32,
    patch: String,
    changes: Vec<StoredChange>,
}

/// An [`Entry`] as `run` shows an up-to-date task: the rest of its fields
/// (the input keys above all) are skipped unread.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct EntrySummary {
    pub format: u32,
    pub changes: Vec<StoredChange>,
    pub summary: Option<String>,
    pub records: std::collections::BTreeMap<String, String>,
}

impl Store {
    pub fn open(root: &Path) -> Store {
        Store { dir: state_dir(root).join("store"), files_limit: u64::MAX }
    }

    /// The same store, whose usable entries have at most `files` entries
    /// in their change (`limits { files }`).
    pub fn with_files_limit(self, files: u64) -> Store {
        Store { files_limit: files, ..self }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn object_path(&self, hash: &str) -> PathBuf {
        let (a, b) = hash.split_at(2.min(hash.len()));
        self.dir.join("objects").join(a).join(b)
    }

    /// Stores `bytes`; returns their hash. An object already there is kept
    /// only when it is whole: a corrupt one is written again.
    pub fn put_object(&self, bytes: &[u8]) -> std::io::Result<String> {
        let hash = blake3::hash(bytes).to_hex().to_string();
        let path = self.object_path(&hash);
        if !self.is_whole(&path, &hash) {
            write_atomic(&path, bytes)?;
        }
        Ok(hash)
    }

    /// Whether the object at `path` is there and hashes to `hash`.
    fn is_whole(&self, path: &Path, hash: &str) -> bool {
        let Ok(mut f) = std::fs::File::open(path) else { return false };
        let mut hasher = blake3::Hasher::new();
        std::io::copy(&mut f, &mut hasher).is_ok() && hasher.finalize().to_hex().as_str() == hash
    }

    /// Stores a file's content without reading it into memory (a
    /// transcript may be huge): hashed as a stream, then hard-linked (or
    /// copied) into place.
    pub fn put_object_file(&self, file: &Path) -> std::io::Result<String> {
        let mut hasher = blake3::Hasher::new();
        let mut f = std::fs::File::open(file)?;
        std::io::copy(&mut f, &mut hasher)?;
        let hash = hasher.finalize().to_hex().to_string();
        let path = self.object_path(&hash);
        if !self.is_whole(&path, &hash) {
            let dir = path.parent().unwrap_or(&self.dir);
            std::fs::create_dir_all(dir)?;
            // A name of its own per call: tasks record from several
            // threads, and two may store the same content at once.
            let tmp = dir.join(crate::fsx::temp_name());
            let _ = std::fs::remove_file(&tmp);
            if std::fs::hard_link(file, &tmp).is_err() {
                std::fs::copy(file, &tmp)?;
            }
            std::fs::rename(&tmp, &path)?;
        }
        Ok(hash)
    }

    /// The bytes of an object, checked against their hash.
    pub fn get_object(&self, hash: &str) -> Result<Vec<u8>, ObjectError> {
        let bytes = std::fs::read(self.object_path(hash))?;
        if blake3::hash(&bytes).to_hex().as_str() != hash {
            return Err(ObjectError::Corrupt { hash: hash.to_owned() });
        }
        Ok(bytes)
    }

    /// The size of an object as stored (read from its metadata: nothing
    /// of it is read).
    pub fn object_len(&self, hash: &str) -> std::io::Result<u64> {
        Ok(std::fs::metadata(self.object_path(hash))?.len())
    }

    pub fn has_object(&self, hash: &str) -> bool {
        self.object_path(hash).is_file()
    }

    /// The file of the entry recorded for input hash `before`.
    pub fn entry_path(&self, before: &str) -> PathBuf {
        self.dir.join("entries").join(format!("{before}.json"))
    }

    /// The entry recorded for input hash `before`: `Ok(None)` when there is
    /// none, an error when its file is there but unreadable. Its objects
    /// are not checked (see [`Store::usable_entry`]).
    pub fn read_entry(&self, before: &str) -> Result<Option<Entry>, Unusable> {
        let file = self.entry_path(before);
        let text = match std::fs::read(&file) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Unusable::Garbage { file, why: Garbage::Read(e) }),
        };
        let entry: Entry = serde_json::from_slice(&text)
            .map_err(|e| Unusable::Garbage { file: file.clone(), why: Garbage::Json(e) })?;
        if entry.format != ENTRY_FORMAT {
            return Err(Unusable::Garbage { file, why: Garbage::Format(entry.format) });
        }
        Ok(Some(entry))
    }

    /// The entry recorded for `before`, if it can be replayed: its file
    /// reads, its change list passes [`check_entry`] (before any object is
    /// read), and every object its change writes is there and whole (read
    /// and hashed: O(change)). `Ok(None)`: no entry.
    pub fn usable_entry(&self, before: &str) -> Result<Option<Entry>, Unusable> {
        self.usable_entry_for(before, None)
    }

    /// [`Store::usable_entry`], for an entry `cassist.lock` records with
    /// the patch hash `locked_patch` (when it records one).
    pub fn usable_entry_for(&self, before: &str, locked_patch: Option<&str>) -> Result<Option<Entry>, Unusable> {
        let Some(entry) = self.read_entry(before)? else { return Ok(None) };
        check_entry(&entry, self.files_limit, locked_patch)?;
        for c in &entry.changes {
            let Some(object) = &c.new else { continue };
            // Hashed as a stream: an object is never held whole here.
            let path = self.object_path(object);
            if !path.is_file() {
                return Err(Unusable::Missing { object: object.clone(), path: c.path.clone() });
            }
            if !self.is_whole(&path, object) {
                return Err(Unusable::Corrupt { object: object.clone(), path: c.path.clone() });
            }
        }
        Ok(Some(entry))
    }

    /// The outputs of the entry recorded for `before` (the paths its change
    /// wrote or deleted), reading nothing else of it; `None` when there is
    /// no readable entry, or its patch is not `patch`.
    pub fn output_paths(&self, before: &str, patch: &str) -> Option<Vec<String>> {
        let text = std::fs::read(self.entry_path(before)).ok()?;
        let entry: ChangesOnly = serde_json::from_slice(&text).ok()?;
        (entry.format == ENTRY_FORMAT && entry.patch == patch).then(|| output_paths(&entry.changes))
    }

    /// Records an entry (its objects must be stored already). An entry
    /// written here is no longer the one fetched from the remote cache.
    pub fn put_entry(&self, entry: &Entry) -> std::io::Result<()> {
        self.write_entry(entry, true)
    }

    /// [`Store::put_entry`] without a disk flush, for what only adds to an
    /// entry already on disk whole (a reader still never sees half a file;
    /// after a power cut the entry may be the one before, which replays the
    /// same change). A passed task's records and its after-state go in this
    /// way: neither is needed to replay it, and the lock line holds the
    /// after-state as well.
    pub fn amend_entry(&self, entry: &Entry) -> std::io::Result<()> {
        self.write_entry(entry, false)
    }

    fn write_entry(&self, entry: &Entry, flush: bool) -> std::io::Result<()> {
        // Compact: `run` reads the entry of every up-to-date task, and two
        // thirds of it are input keys it skips; indentation was a third of
        // the bytes to skip.
        // An encoding error (there is none for an entry) would come as an
        // `InvalidData` one: serde_json's own conversion.
        let json = serde_json::to_vec(entry)?;
        self.unmark_fetched(&entry.before);
        let path = self.entry_path(&entry.before);
        if flush { write_atomic(&path, &json) } else { crate::fsx::write_cache(&path, &json) }?;
        Ok(())
    }

    /// Notes that the change of the entry recorded for `before` is in this
    /// project's tree, with its after-state: called once the change has
    /// landed, never when an entry is merely written (a run killed before
    /// its change landed, an entry fetched from the team cache: that
    /// after-state was never reached here). An index: failing to keep it
    /// costs a lookup, never an entry.
    pub fn index_after(&self, before: &str) {
        if let Ok(Some(e)) = self.read_entry(before)
            && is_hash(&e.after)
            && is_hash(&e.before)
        {
            let _ = crate::fsx::write_cache(&self.after_path(&e.after), e.before.as_bytes());
        }
    }

    /// Records that `line`, the lock line of `task`'s run with its
    /// after-state moved to the tree as it is, passed its acceptance
    /// commands there, where the store holds no entry of that run to take
    /// the new after-state (a fresh clone, whose only record is the lock):
    /// so the next plan of the same tree finds it ([`Store::verified`])
    /// and verifies nothing again. One per run, the last verification's.
    pub fn put_verified(&self, task: &str, line: &crate::lock::LockEntry) -> std::io::Result<()> {
        if !is_hash(&line.before) {
            return Ok(());
        }
        let json = serde_json::to_vec(&Verified { task: task.to_owned(), line: line.clone() })?;
        crate::fsx::write_cache(&self.verified_path(&line.before), &json)
    }

    /// What [`Store::put_verified`] recorded of the run whose input hash
    /// before it was `before`; `None` when nothing, or nothing readable.
    pub fn verified(&self, before: &str) -> Option<Verified> {
        if !is_hash(before) {
            return None;
        }
        let text = std::fs::read(self.verified_path(before)).ok()?;
        serde_json::from_slice(&text).ok()
    }

    fn verified_path(&self, before: &str) -> PathBuf {
        self.dir.join("verified").join(format!("{before}.json"))
    }

    /// The file of the after-state index: the input hash before the run
    /// of the entry whose after-state is `after`.
    fn after_path(&self, after: &str) -> PathBuf {
        self.dir.join("after").join(after)
    }

    /// The entry whose run left its task's inputs hashed `after` (its
    /// after-state), found through the index kept as changes land
    /// ([`Store::index_after`]): so a task a `run --locked` replayed (which
    /// writes no lock line) is known to be up to date. `Ok(None)`: no
    /// entry has it (the index may be stale: the entry is read and
    /// checked); an error when the entry named is unreadable.
    pub fn entry_by_after(&self, after: &str) -> Result<Option<Entry>, Unusable> {
        let Ok(before) = std::fs::read_to_string(self.after_path(after)) else { return Ok(None) };
        if !is_hash(&before) {
            return Ok(None);
        }
        Ok(self.read_entry(&before)?.filter(|e| e.after == after))
    }

    /// The mark of an entry fetched from the remote cache (its signature
    /// verified then): `remote/<before>`, holding the signer's key.
    fn fetched_mark(&self, before: &str) -> PathBuf {
        self.dir.join("remote").join(before)
    }

    /// Records `entry` as fetched from the remote cache, signed by
    /// `signer` (objects first, the entry, then the mark). Any later write
    /// of the entry drops the mark.
    pub fn put_fetched_entry(&self, entry: &Entry, signer: &str) -> std::io::Result<()> {
        self.put_entry(entry)?;
        write_atomic(&self.fetched_mark(&entry.before), signer.as_bytes())
    }

    /// Whether the entry of `before` is as it was fetched from the remote
    /// cache.
    pub fn was_fetched(&self, before: &str) -> bool {
        self.fetched_mark(before).is_file()
    }

    fn unmark_fetched(&self, before: &str) {
        let _ = std::fs::remove_file(self.fetched_mark(before));
    }

    /// Removes the entry recorded for input hash `before` (its objects
    /// stay until `cache gc`).
    pub fn remove_entry(&self, before: &str) -> std::io::Result<()> {
        match std::fs::remove_file(self.entry_path(before)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// The entry recorded for input hash `before`, if it is whole: every
    /// object it names is present.
    pub fn get_entry(&self, before: &str) -> Option<Entry> {
        self.whole_entry(before, |e: &Entry| (e.format, &e.changes))
    }

    /// What [`get_entry`](Self::get_entry) gives of an entry to show it,
    /// without its input keys: most of its text, not turned into values.
    pub fn get_summary(&self, before: &str) -> Option<EntrySummary> {
        self.whole_entry(before, |e: &EntrySummary| (e.format, &e.changes))
    }

    fn whole_entry<T: serde::de::DeserializeOwned>(
        &self,
        before: &str,
        parts: impl Fn(&T) -> (u32, &Vec<StoredChange>),
    ) -> Option<T> {
        let text = std::fs::read(self.entry_path(before)).ok()?;
        let entry: T = serde_json::from_slice(&text).ok()?;
        let (format, changes) = parts(&entry);
        let complete = changes.iter().all(|c| c.new.as_deref().is_none_or(|h| self.has_object(h)));
        (format == ENTRY_FORMAT && complete).then_some(entry)
    }

    /// Every entry, newest first, with the bytes removing it alone would
    /// free (its entry file, its line of the after-state index and the
    /// objects no other entry names) and its age.
    pub fn list(&self) -> Vec<(Entry, u64, std::time::SystemTime)> {
        let mut read = Vec::new();
        let Ok(rd) = std::fs::read_dir(self.dir.join("entries")) else { return read };
        for e in rd.flatten() {
            let Ok(meta) = e.metadata() else { continue };
            let Ok(bytes) = std::fs::read(e.path()) else { continue };
            let Ok(entry) = serde_json::from_slice::<Entry>(&bytes) else { continue };
            read.push((entry, meta.len(), meta.modified().unwrap_or(std::time::UNIX_EPOCH)));
        }
        // How many entries name each object.
        let mut names: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
        for (e, _, _) in &read {
            for h in objects_of(e) {
                *names.entry(h).or_default() += 1;
            }
        }
        let mut out: Vec<_> = read
            .into_iter()
            .map(|(e, file, when)| {
                // Its line of the after-state index goes with it.
                let indexed = std::fs::read(self.after_path(&e.after))
                    .ok()
                    .filter(|b| is_hash(&e.after) && *b == e.before.as_bytes())
                    .map_or(0, |b| b.len() as u64);
                let file = file + indexed;
                let own: u64 = objects_of(&e)
                    .iter()
                    .filter(|h| names.get(*h) == Some(&1))
                    .filter_map(|h| std::fs::metadata(self.object_path(h)).ok())
                    .map(|m| m.len())
                    .sum();
                (e, file + own, when)
            })
            .collect();
        out.sort_by_key(|e| std::cmp::Reverse(e.2));
        out
    }

    /// The bytes of every file of the store: what `cache clean` frees.
    pub fn disk_bytes(&self) -> u64 {
        walkdir::WalkDir::new(&self.dir)
            .into_iter()
            .flatten()
            .filter(|e| e.file_type().is_file())
            .filter_map(|e| e.metadata().ok())
            .map(|m| m.len())
            .sum()
    }

    /// Removes entries not in `keep` beyond the newest `newest`, then every
    /// object no remaining entry names. Returns (entries removed, bytes
    /// freed: the entry files and objects removed).
    pub fn gc(&self, keep: &std::collections::HashSet<String>, newest: usize) -> std::io::Result<(usize, u64)> {
        let entries = self.list();
        let mut removed = 0;
        let mut freed = 0;
        let mut live: std::collections::HashSet<String> = std::collections::HashSet::new();
        for (i, (e, _, _)) in entries.iter().enumerate() {
            if i < newest || keep.contains(&e.before) {
                live.extend(objects_of(e));
            } else {
                let path = self.entry_path(&e.before);
                let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
                std::fs::remove_file(path)?;
                self.unmark_fetched(&e.before);
                freed += bytes;
                removed += 1;
            }
        }
        freed += self.gc_after_index();
        for entry in walkdir::WalkDir::new(self.dir.join("objects")).into_iter().flatten() {
            if !entry.file_type().is_file() {
                continue;
            }
            let p = entry.path();
            let name = format!(
                "{}{}",
                p.parent().and_then(|d| d.file_name()).map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
                p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
            );
            if !live.contains(&name) {
                freed += entry.metadata().map_or(0, |m| m.len());
                std::fs::remove_file(p)?;
            }
        }
        Ok((removed, freed))
    }

    /// Drops what the after-state index says of entries that are gone or
    /// whose after-state moved since.
    /// Returns the bytes freed.
    fn gc_after_index(&self) -> u64 {
        let mut freed = 0;
        let Ok(rd) = std::fs::read_dir(self.dir.join("after")) else { return 0 };
        for file in rd.flatten() {
            let after = file.file_name().to_string_lossy().into_owned();
            let live = std::fs::read_to_string(file.path())
                .ok()
                .and_then(|before| self.after_of(&before))
                .is_some_and(|a| a == after);
            if !live {
                let bytes = file.metadata().map_or(0, |m| m.len());
                if std::fs::remove_file(file.path()).is_ok() {
                    freed += bytes;
                }
            }
        }
        freed
    }

    /// The after-state of the entry of `before`, reading nothing else of it.
    fn after_of(&self, before: &str) -> Option<String> {
        #[derive(serde::Deserialize)]
        struct AfterOnly {
            after: String,
        }
        let text = std::fs::read(self.entry_path(before)).ok()?;
        serde_json::from_slice::<AfterOnly>(&text).ok().map(|e| e.after)
    }

    /// Removes the whole store.
    pub fn clean(&self) -> std::io::Result<()> {
        match std::fs::remove_dir_all(&self.dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// An exclusive lock on a project's `.cassist/`, held while a run records
/// results: two cassist processes on one project take turns instead of
/// corrupting the store or running the same task twice.
pub struct ProjectLock {
    _file: std::fs::File,
}

impl ProjectLock {
    /// Waits for the lock; `on_wait` is called once if another process
    /// holds it.
    pub fn acquire(root: &Path, on_wait: impl FnOnce()) -> std::io::Result<ProjectLock> {
        let dir = ensure_state_dir(root)?;
        let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(dir.join("lock"))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                on_wait();
                file.lock()?;
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
        Ok(ProjectLock { _file: file })
    }

    /// The lock if no other process holds it; `None` if one does.
    pub fn try_acquire(root: &Path) -> std::io::Result<Option<ProjectLock>> {
        let dir = ensure_state_dir(root)?;
        let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(dir.join("lock"))?;
        match file.try_lock() {
            Ok(()) => Ok(Some(ProjectLock { _file: file })),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tasks record at the same time, from threads of one process, and
    /// two of them may store the same content (the same transcript, the
    /// same file): neither may fail.
    #[test]
    fn the_same_file_stored_from_several_threads_at_once() {
        for round in 0..50 {
            let dir = tempfile::tempdir().unwrap();
            let store = Store::open(dir.path());
            let file = dir.path().join("transcript.log");
            std::fs::write(&file, format!("the same content {round}\n").repeat(64)).unwrap();
            let barrier = std::sync::Barrier::new(4);
            let hashes: Vec<String> = std::thread::scope(|s| {
                let threads: Vec<_> = (0..4)
                    .map(|_| {
                        s.spawn(|| {
                            barrier.wait();
                            store.put_object_file(&file)
                        })
                    })
                    .collect();
                threads.into_iter().map(|t| t.join().unwrap().expect("put_object_file failed")).collect()
            });
            assert!(hashes.windows(2).all(|w| w[0] == w[1]));
            assert!(std::fs::read(&file).unwrap() == store.get_object(&hashes[0]).unwrap());
        }
    }

    #[test]
    fn a_verified_line_is_kept_by_its_run_and_only_under_a_hash() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path());
        let line = crate::lock::LockEntry {
            before: "ab12".into(),
            after: "cd34".into(),
            patch: "ef56".into(),
            ..Default::default()
        };
        assert!(store.verified("ab12").is_none());
        store.put_verified("t", &line).unwrap();
        let got = store.verified("ab12").expect("recorded");
        assert_eq!((got.task.as_str(), &got.line), ("t", &line));
        // The last verification's stands.
        let moved = crate::lock::LockEntry { after: "9876".into(), ..line.clone() };
        store.put_verified("t", &moved).unwrap();
        assert_eq!(store.verified("ab12").unwrap().line.after, "9876");
        // A name that is no hash (a hand-edited lock) names no file.
        let odd = crate::lock::LockEntry { before: "../../x".into(), ..line };
        store.put_verified("t", &odd).unwrap();
        assert!(store.verified("../../x").is_none());
        assert!(!dir.path().join(".cassist/x.json").exists() && !dir.path().join("x.json").exists());
    }

    #[test]
    fn objects_round_trip_and_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path());
        let h = store.put_object(b"hello").unwrap();
        assert_eq!(store.get_object(&h).unwrap(), b"hello");
        assert!(store.has_object(&h));
        std::fs::write(store.object_path(&h), b"tampered").unwrap();
        assert!(store.get_object(&h).is_err(), "a corrupt object is refused");
        // Stored again, it is whole again.
        assert_eq!(store.put_object(b"hello").unwrap(), h);
        assert_eq!(store.get_object(&h).unwrap(), b"hello");
        std::fs::write(store.object_path(&h), b"hell").unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"hello").unwrap();
        assert_eq!(store.put_object_file(&file).unwrap(), h);
        assert_eq!(store.get_object(&h).unwrap(), b"hello");
    }

    /// An entry of task `name` (recorded before-hash `name`) adding `x`
    /// with the object `object`.
    fn entry(name: &str, object: &str) -> Entry {
        let changes = vec![StoredChange {
            path: "x".into(),
            kind: crate::changes::ChangeKind::Added,
            old: None,
            new: Some(object.to_owned()),
            mode: 0o100644,
            old_mode: None,
        }];
        Entry {
            format: ENTRY_FORMAT,
            task: name.into(),
            before: name.into(),
            after: String::new(),
            patch: patch_hash(&changes),
            changes,
            key: serde_json::json!({}),
            after_key: None,
            recipe: None,
            dependencies: None,
            outputs: None,
            agent: "demo".into(),
            agent_version: None,
            date: String::new(),
            summary: None,
            cost_usd: None,
            duration_ms: 1,
            attempts: 1,
            records: Default::default(),
            split: Vec::new(),
        }
    }

    #[test]
    fn an_entry_with_a_missing_object_is_not_used() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path());
        let h = store.put_object(b"new content").unwrap();
        let mut e = entry("b", &h);
        e.summary = Some("wrote x".into());
        store.put_entry(&e).unwrap();
        assert!(store.get_entry("b").is_some());
        let shown = store.get_summary("b").unwrap();
        assert_eq!((shown.summary.as_deref(), shown.changes, shown.records), (Some("wrote x"), e.changes, e.records));
        std::fs::remove_file(store.object_path(&h)).unwrap();
        assert!(store.get_entry("b").is_none());
        assert!(store.get_summary("b").is_none());
    }

    #[test]
    fn a_missing_corrupt_or_garbage_entry_is_unusable_and_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path());
        assert!(matches!(store.usable_entry("none"), Ok(None)));
        let h = store.put_object(b"new content").unwrap();
        store.put_entry(&entry("b", &h)).unwrap();
        assert!(store.usable_entry("b").unwrap().is_some());
        let patch = entry("b", &h).patch;
        assert_eq!(store.output_paths("b", &patch), Some(vec!["x".to_owned()]));
        assert_eq!(store.output_paths("b", "another patch"), None);
        // Truncated: present, but not what its name says.
        std::fs::write(store.object_path(&h), b"new").unwrap();
        let corrupt = store.usable_entry("b").unwrap_err();
        assert!(matches!(&corrupt, Unusable::Corrupt { object, path } if *object == h && path == "x"), "{corrupt:?}");
        assert!(store.read_entry("b").unwrap().is_some(), "the entry itself still reads");
        std::fs::remove_file(store.object_path(&h)).unwrap();
        let missing = store.usable_entry("b").unwrap_err();
        assert!(matches!(&missing, Unusable::Missing { object, path } if *object == h && path == "x"), "{missing:?}");
        assert!(missing.to_string().contains(&h), "{missing}");
        std::fs::write(store.entry_path("b"), b"{ not json").unwrap();
        let garbage = store.usable_entry("b").unwrap_err();
        assert!(matches!(garbage, Unusable::Garbage { .. }), "{garbage:?}");
        assert!(garbage.to_string().contains("b.json"), "{garbage}");
        assert_eq!(store.output_paths("b", &patch), None);
    }

    #[test]
    fn an_entry_whose_change_list_is_not_its_patch_or_the_locks_or_too_long_is_unusable() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path());
        let h = store.put_object(b"new content").unwrap();
        let e = entry("b", &h);
        store.put_entry(&e).unwrap();
        assert!(store.usable_entry_for("b", Some(&e.patch)).unwrap().is_some());
        // The lock records another patch for it.
        let other = "0".repeat(64);
        let refused = store.usable_entry_for("b", Some(&other)).unwrap_err();
        assert!(matches!(&refused, Unusable::NotLocked { locked } if *locked == other), "{refused:?}");
        assert!(refused.to_string().contains("cassist.lock"), "{refused}");
        // A change list edited after the entry was written.
        let mut forged = e.clone();
        forged.changes[0].path = "y".into();
        store.put_entry(&forged).unwrap();
        let refused = store.usable_entry("b").unwrap_err();
        assert!(matches!(&refused, Unusable::Mismatch { patch } if *patch == e.patch), "{refused:?}");
        // Its patch hash made to match: the lock's still does not.
        forged.patch = patch_hash(&forged.changes);
        store.put_entry(&forged).unwrap();
        assert!(store.usable_entry("b").unwrap().is_some());
        assert!(matches!(store.usable_entry_for("b", Some(&e.patch)), Err(Unusable::NotLocked { .. })));
        // Over `limits { files }`: refused before any object is read (the
        // one it names is gone).
        let mut many = e.clone();
        many.changes = (0..3).map(|i| StoredChange { path: format!("f{i}"), ..e.changes[0].clone() }).collect();
        many.patch = patch_hash(&many.changes);
        store.put_entry(&many).unwrap();
        std::fs::remove_file(store.object_path(&h)).unwrap();
        let refused = store.clone().with_files_limit(2).usable_entry("b").unwrap_err();
        assert_eq!(refused.to_string(), "its change has 3 files, over the limit of 2 (limits files)");
        assert!(matches!(store.with_files_limit(3).usable_entry("b"), Err(Unusable::Missing { .. })));
    }

    #[test]
    fn recorded_split_parts_keep_their_json() {
        use crate::part::{Part, Piece};
        let parts = vec![
            Part { file: Some("a.py".into()), piece: None, round: 1 },
            Part { file: Some("b.py".into()), piece: Some(Piece::Impl), round: 2 },
            Part { file: None, piece: Some(Piece::Header), round: 1 },
        ];
        let json =
            r#"[{"file":"a.py","round":1},{"file":"b.py","piece":"impl","round":2},{"piece":"header","round":1}]"#;
        assert_eq!(serde_json::to_string(&parts).unwrap(), json);
        assert_eq!(serde_json::from_str::<Vec<Part>>(json).unwrap(), parts);
    }

    #[test]
    fn gc_keeps_what_is_referenced_and_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path());
        let epoch = std::time::UNIX_EPOCH;
        for (i, name) in ["a", "b", "c"].iter().enumerate() {
            let h = store.put_object(format!("content {i}").as_bytes()).unwrap();
            store.put_entry(&entry(name, &h)).unwrap();
            // Recorded one after the other: c is the newest, whatever the
            // clock's resolution.
            let when = epoch + std::time::Duration::from_secs(1_000_000 + i as u64 * 60);
            std::fs::File::options().write(true).open(store.entry_path(name)).unwrap().set_modified(when).unwrap();
        }
        let newest: Vec<String> = {
            let mut l = store.list();
            l.sort_by_key(|(_, _, t)| std::cmp::Reverse(*t));
            l.into_iter().map(|(e, _, _)| e.task).collect()
        };
        assert_eq!(newest, ["c", "b", "a"], "the entries' ages as recorded");
        let keep: std::collections::HashSet<String> = ["a".to_owned()].into();
        let (removed, freed) = store.gc(&keep, 1).unwrap();
        assert_eq!(removed, 1, "b goes: not kept, not the newest");
        assert!(freed > 0);
        assert!(store.get_entry("a").is_some() && store.get_entry("c").is_some() && store.get_entry("b").is_none());
    }

    #[test]
    fn the_mark_of_a_fetched_entry_goes_with_any_later_write_or_gc() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path());
        let h = store.put_object(b"fetched").unwrap();
        store.put_fetched_entry(&entry("a", &h), "cassist-ed25519:k").unwrap();
        store.put_fetched_entry(&entry("b", &h), "cassist-ed25519:k").unwrap();
        assert!(store.was_fetched("a") && store.was_fetched("b") && !store.was_fetched("c"));
        // Written again here (a local run of the same inputs, a moved
        // after-state): no longer what was fetched.
        store.put_entry(&entry("a", &h)).unwrap();
        assert!(!store.was_fetched("a"));
        // Collected: the mark goes with it.
        store.gc(&Default::default(), 0).unwrap();
        assert!(!store.was_fetched("b") && store.get_entry("b").is_none());
    }

    #[test]
    fn an_entry_s_size_is_what_removing_it_frees() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path());
        let shared = store.put_object(&[b's'; 3000]).unwrap();
        let own = store.put_object(&[b'o'; 500]).unwrap();
        let other = store.put_object(&[b'x'; 700]).unwrap();
        // a names the shared object (as its change's old content) and its
        // own; b names the shared one; c its own.
        let mut a = entry("a", &own);
        a.changes[0].old = Some(shared.clone());
        store.put_entry(&a).unwrap();
        store.put_entry(&entry("b", &shared)).unwrap();
        store.put_entry(&entry("c", &other)).unwrap();
        let file = |n: &str| std::fs::metadata(store.entry_path(n)).unwrap().len();
        let sizes: std::collections::HashMap<String, u64> =
            store.list().into_iter().map(|(e, size, _)| (e.task, size)).collect();
        assert_eq!(sizes["a"], file("a") + 500, "the shared object is not a's alone");
        assert_eq!(sizes["b"], file("b"));
        assert_eq!(sizes["c"], file("c") + 700);
        let total = store.disk_bytes();
        assert_eq!(total, file("a") + file("b") + file("c") + 3000 + 500 + 700);

        let keep: std::collections::HashSet<String> = ["b".to_owned(), "c".to_owned()].into();
        assert_eq!(store.gc(&keep, 0).unwrap(), (1, sizes["a"]));
        assert_eq!(store.disk_bytes(), total - sizes["a"]);
        let b = file("b");
        let keep: std::collections::HashSet<String> = ["c".to_owned()].into();
        assert_eq!(store.gc(&keep, 0).unwrap(), (1, b + 3000), "b's object is its own now");
    }

    #[test]
    fn an_entry_is_found_by_its_after_state() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path());
        let h = store.put_object(b"x").unwrap();
        let mut e = entry("b1", &h);
        store.put_entry(&e).unwrap();
        assert!(store.entry_by_after("").unwrap().is_none(), "no after-state, no index");
        e.after = "a1".into();
        store.amend_entry(&e).unwrap();
        // Written, not landed: a run killed before its change reached the
        // tree never reached that after-state.
        assert!(store.entry_by_after("a1").unwrap().is_none());
        store.index_after("b1");
        assert_eq!(store.entry_by_after("a1").unwrap().map(|e| e.before), Some("b1".to_owned()));
        assert!(store.entry_by_after("a2").unwrap().is_none());
        // Moved: the old after-state no longer names it.
        e.after = "a2".into();
        store.put_entry(&e).unwrap();
        store.index_after("b1");
        assert!(store.entry_by_after("a1").unwrap().is_none());
        assert_eq!(store.entry_by_after("a2").unwrap().map(|e| e.before), Some("b1".to_owned()));
        // A fetched entry's after-state was reached elsewhere: not indexed
        // until its change lands here.
        let mut f = entry("b2", &h);
        f.after = "a3".into();
        store.put_fetched_entry(&f, "k").unwrap();
        assert!(store.entry_by_after("a3").unwrap().is_none());
        store.index_after("b2");
        assert_eq!(store.entry_by_after("a3").unwrap().map(|e| e.before), Some("b2".to_owned()));
        // gc drops what names a removed or moved entry, and keeps the rest.
        let keep: std::collections::HashSet<String> = ["b1".to_owned()].into();
        store.gc(&keep, 0).unwrap();
        let left: Vec<String> = std::fs::read_dir(store.dir().join("after"))
            .unwrap()
            .map(|f| f.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, ["a2"]);
        // An after-state that is no hash (an entry from elsewhere) names
        // no file.
        let mut g = entry("b3", &h);
        g.after = "../../escape".into();
        store.put_entry(&g).unwrap();
        assert!(!dir.path().join(".cassist/escape").exists() && !store.dir().join("escape").exists());
        assert!(store.entry_by_after("../../escape").unwrap().is_none());
        // An unreadable entry is said, not taken for none.
        std::fs::write(store.entry_path("b1"), b"{ garbage").unwrap();
        assert!(store.entry_by_after("a2").is_err());
    }

    #[test]
    fn the_project_lock_is_exclusive() {
        let dir = tempfile::tempdir().unwrap();
        let first = ProjectLock::acquire(dir.path(), || {}).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let root = dir.path().to_path_buf();
        let t = std::thread::spawn(move || {
            let mut waited = false;
            let _second = ProjectLock::acquire(&root, || waited = true).unwrap();
            tx.send(waited).unwrap();
        });
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(rx.try_recv().is_err(), "the second lock must wait");
        drop(first);
        assert!(rx.recv().unwrap(), "the waiter was told it waits");
        t.join().unwrap();
    }
}
