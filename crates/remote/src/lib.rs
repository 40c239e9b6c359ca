//! The team cache: a remote store behind the local one, like a Nix
//! substituter. A task whose inputs have no run in the local store is
//! looked up there; what a run records is uploaded for the team. [`Remote`] is the configured remote with
//! the keys whose entries are believed and the key that signs ours.
//!
//! Layout, the same on every backend (a name per object): `objects/<blake3>`
//! holds an object's bytes as the local store has them, `entries/<before
//! input hash>` the signed envelope of a store entry ([`sign`]).
//!
//! Every remote I/O runs on the tokio runtime owned here, nowhere else;
//! cassist itself does it, never an agent or a task command. Failure is
//! never fatal and never slow: each request is bounded, all lookups of a
//! command share one budget, and the first connection failure, refusal or
//! timeout makes the remote unavailable for the rest of the command (one
//! warning), so the rest is skipped.
//!
//! The command layer uses it: planning never imports it (it finds what was
//! fetched in the local store, as any entry).

mod s3;
pub mod sign;
mod turbo;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ed25519_dalek::{SigningKey, VerifyingKey};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use cassist_core::spec::remote::{RemoteUrl, parse_url};
use cassist_core::spec::{ProjectConfig, SpecDiagnostic};
use cassist_core::store::{ENTRY_FORMAT, Entry, ObjectError, Store};

/// Connecting to the remote.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// One lookup (a read), answer included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// One transfer of an object or an upload: its size is not bounded, and an
/// S3 server may allocate storage on a first write. Lookups are done by
/// then (the remote answered), and uploads run in the background.
const TRANSFER_TIMEOUT: Duration = Duration::from_secs(20);
/// All the lookups of one command: a base, and a share per lookup, so
/// that a healthy remote serving a thousand entries is not cut off half
/// way (a fresh clone of a big fan-out needs every entry), while a remote
/// that fails or hangs is given up at its first fault anyway.
const LOOKUP_BUDGET: Duration = Duration::from_secs(5);
const LOOKUP_SHARE: Duration = Duration::from_millis(20);
/// Lookups at once.
const PARALLEL_LOOKUPS: usize = 64;
/// Uploads at once.
const PARALLEL_UPLOADS: usize = 16;

/// The environment variables that configure the remote.
pub const ENV_REMOTE: &str = "CASSIST_REMOTE";
pub const ENV_SIGNING_KEY: &str = "CASSIST_CACHE_SIGNING_KEY";

/// The end of a command's lookup budget once a batch of `lookups` is
/// added: the base from the first batch on, and each batch's share.
fn lookup_deadline(end: Option<Instant>, now: Instant, lookups: usize) -> Instant {
    let share = LOOKUP_SHARE.saturating_mul(u32::try_from(lookups).unwrap_or(u32::MAX));
    end.unwrap_or(now + LOOKUP_BUDGET) + share
}

/// Why a request failed.
#[derive(Debug)]
pub enum Fault {
    /// The remote cannot serve: down, refusing, hanging. It is not asked
    /// again in this command.
    Down(String),
    /// This one name could not be had.
    Item(String),
}

enum Backend {
    S3(s3::S3),
    Turbo(turbo::Turbo),
}

/// The largest signed entry read from the remote: an entry names its
/// changes' paths and objects (at most `limits { files }` of them), never
/// their contents.
pub const ENTRY_CAP: u64 = 16 << 20;

/// Past this many bytes a read waits for its turn: one large read at a
/// time, so that many lookups answered with floods hold at most one
/// large buffer (and the small ones) at once.
pub const LARGE_READ: u64 = 256 << 10;

/// The largest object read from the remote, whatever the server sends: a
/// file of a change, or a record (a transcript, a prompt, the patch) of a
/// run, none of which the project's limits let grow past the largest of
/// them.
fn object_cap(limits: &cassist_core::limits::Limits) -> u64 {
    limits.file_size.max(limits.change_size).max(limits.transcript).saturating_add(1 << 20)
}

/// A read given up: the remote offered more than a `name` can hold.
fn too_large(name: &str, cap: u64) -> Fault {
    Fault::Item(format!(
        "{name} is larger than it can be ({} at most); not read",
        cassist_core::limits::format_size(cap)
    ))
}

impl Backend {
    /// `name`, read within `limit` and at most `cap` bytes; past
    /// [`LARGE_READ`] bytes, only while holding `large` (one at a time).
    async fn get(&self, name: &str, limit: Duration, cap: u64, large: &Semaphore) -> Result<Option<Vec<u8>>, Fault> {
        bounded(limit, async {
            match self {
                Backend::S3(b) => b.get(name, cap, large).await,
                Backend::Turbo(b) => b.get(name, cap, large).await,
            }
        })
        .await
    }

    async fn has(&self, name: &str) -> Result<bool, Fault> {
        bounded(REQUEST_TIMEOUT, async {
            match self {
                Backend::S3(b) => b.has(name).await,
                Backend::Turbo(b) => b.has(name).await,
            }
        })
        .await
    }

    async fn put(&self, name: &str, bytes: Vec<u8>) -> Result<(), Fault> {
        bounded(TRANSFER_TIMEOUT, async {
            match self {
                Backend::S3(b) => b.put(name, bytes).await,
                Backend::Turbo(b) => b.put(name, bytes).await,
            }
        })
        .await
    }
}

/// A request within `limit`, whatever the backend does (the HTTP client
/// bounds connecting).
async fn bounded<T>(limit: Duration, f: impl Future<Output = Result<T, Fault>>) -> Result<T, Fault> {
    match tokio::time::timeout(limit, f).await {
        Ok(r) => r,
        Err(_) => Err(Fault::Down(format!("no answer within {} s", limit.as_secs()))),
    }
}

fn object_name(hash: &str) -> String {
    format!("objects/{hash}")
}

fn entry_name(before: &str) -> String {
    format!("entries/{before}")
}

/// What the tasks share.
struct Inner {
    /// The URL as configured, for messages.
    shown: String,
    backend: Backend,
    trusted: Vec<VerifyingKey>,
    signer: Option<SigningKey>,
    /// Why the remote is unavailable, once it is.
    down: Mutex<Option<String>>,
    /// The largest object read ([`object_cap`]).
    object_cap: u64,
    /// The turn of large reads ([`LARGE_READ`]).
    large: Semaphore,
}

impl Inner {
    fn is_down(&self) -> bool {
        self.down.lock().map(|d| d.is_some()).unwrap_or(true)
    }

    fn mark_down(&self, why: String) {
        if let Ok(mut d) = self.down.lock()
            && d.is_none()
        {
            *d = Some(why);
        }
    }

    /// The result of a request, a [`Fault::Down`] marking the remote
    /// unavailable.
    fn seen<T>(&self, r: Result<T, Fault>) -> Result<T, EntryError> {
        match r {
            Ok(v) => Ok(v),
            Err(Fault::Down(why)) => {
                self.mark_down(why);
                Err(EntryError::Down)
            }
            Err(Fault::Item(why)) => Err(EntryError::Item(why)),
        }
    }
}

/// Why one entry was not fetched, or not uploaded: the words of its
/// warning, but for [`EntryError::Down`], said once for all.
#[derive(Debug, thiserror::Error)]
enum EntryError {
    /// The remote became unavailable (its warning says why, once).
    #[error("the remote cache is unavailable")]
    Down,
    /// This one name could not be had.
    #[error("{0}")]
    Item(String),
    #[error(transparent)]
    Envelope(#[from] sign::OpenError),
    #[error("truncated or unreadable entry ({0})")]
    Unreadable(#[source] serde_json::Error),
    #[error("entry format {0} is not one this cassist reads")]
    Format(u32),
    /// Signed under another input hash than the one it was found under.
    #[error("it is the entry of input hash {found}, not {before}")]
    Misnamed { found: String, before: String },
    #[error("object {0} is missing on the remote")]
    MissingObject(String),
    #[error("object {hash} hashes to {got}")]
    BadObject { hash: String, got: String },
    #[error("cannot write the local store: {0}")]
    LocalStore(#[source] std::io::Error),
    #[error("no signing key")]
    NoSigner,
    /// The local entry to upload does not read.
    #[error("its store entry is unreadable: {0}")]
    LocalEntry(#[source] std::io::Error),
    #[error("its store entry is unreadable: {0}")]
    LocalEntryParse(#[source] serde_json::Error),
    #[error("object {hash}: {source}")]
    LocalObject {
        hash: String,
        #[source]
        source: ObjectError,
    },
}

pub use cassist_core::team::Fill;

/// An upload under way: the task, and its end.
type Upload = (String, tokio::task::JoinHandle<Result<(), EntryError>>);

/// The configured remote cache.
pub struct Remote {
    inner: Arc<Inner>,
    rt: Option<tokio::runtime::Runtime>,
    /// The end of the lookup budget, from the first lookup on; each batch
    /// of lookups moves it by its share.
    deadline: Mutex<Option<Instant>>,
    /// Whether the unavailability was said.
    told: std::sync::atomic::AtomicBool,
    uploads: Mutex<Vec<Upload>>,
    upload_slots: Arc<Semaphore>,
}

impl Drop for Remote {
    fn drop(&mut self) {
        // Uploads still pending were waited for (or given up on) already.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl Remote {
    /// The remote of the project: `CASSIST_REMOTE` (empty or `off`: none),
    /// else `cache { remote … }`; `None` when there is none. A bad URL or
    /// key (config or environment) is a diagnostic.
    pub fn open(config: &ProjectConfig) -> Result<Option<Remote>, SpecDiagnostic> {
        let cache = &config.cache;
        let env_url = std::env::var(ENV_REMOTE).ok();
        let url = match env_url.as_deref().map(str::trim) {
            Some("" | "off") => return Ok(None),
            Some(url) => {
                parse_url(url).map_err(|why| {
                    SpecDiagnostic::error("bad-remote", format!("{ENV_REMOTE}: {why}"))
                        .help("set it to `s3://bucket/prefix` or `turbo+https://host`, or to `off`")
                })?;
                url.to_owned()
            }
            None => match &cache.remote {
                Some(r) => r.url.value.clone(),
                None => return Ok(None),
            },
        };
        let mut trusted = Vec::new();
        for k in &cache.trusted_keys {
            match sign::public_from_bytes(&k.value) {
                Ok(v) => trusted.push(v),
                Err(why) => {
                    let d = SpecDiagnostic::error("bad-key", format!("this trusted key does not read: {why}"));
                    return Err(match &config.source {
                        Some(src) => d.at(src, k.span, "bad key"),
                        None => d,
                    });
                }
            }
        }
        let signer = match std::env::var(ENV_SIGNING_KEY).ok().filter(|v| !v.trim().is_empty()) {
            Some(text) => Some(sign::secret_from_text(&text).map_err(|why| {
                SpecDiagnostic::error("bad-key", format!("{ENV_SIGNING_KEY} does not read: {why}"))
                    .help("set it to the `secret` line of `cassist cache keygen` (`cassist-ed25519-secret:…`)")
            })?),
            None => None,
        };
        // The signer's own entries are believed.
        if let Some(s) = &signer
            && !trusted.contains(&s.verifying_key())
        {
            trusted.push(s.verifying_key());
        }
        let remote_config = cache.remote.as_ref();
        fn internal(e: impl std::fmt::Display) -> SpecDiagnostic {
            SpecDiagnostic::error("remote-failed", format!("cannot use the remote cache: {e}"))
        }
        // TLS through rustls with ring (no C toolchain needed); installed
        // once per process, a second call is refused harmlessly.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .pool_max_idle_per_host(PARALLEL_LOOKUPS)
            .build()
            .map_err(internal)?;
        let backend = match parse_url(&url).map_err(internal)? {
            RemoteUrl::S3 { bucket, prefix } => Backend::S3(
                s3::S3::new(
                    &bucket,
                    &prefix,
                    remote_config.and_then(|r| r.endpoint.as_deref()),
                    remote_config.and_then(|r| r.region.as_deref()),
                    client,
                )
                .map_err(internal)?,
            ),
            RemoteUrl::Turbo { base } => {
                Backend::Turbo(turbo::Turbo::new(&base, remote_config.and_then(|r| r.team.as_deref()), client))
            }
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("cassist-remote")
            .enable_all()
            .build()
            .map_err(internal)?;
        Ok(Some(Remote {
            inner: Arc::new(Inner {
                shown: url,
                backend,
                trusted,
                signer,
                down: Mutex::new(None),
                object_cap: object_cap(&config.limits),
                large: Semaphore::new(1),
            }),
            rt: Some(rt),
            deadline: Mutex::new(None),
            told: Default::default(),
            uploads: Mutex::new(Vec::new()),
            upload_slots: Arc::new(Semaphore::new(PARALLEL_UPLOADS)),
        }))
    }

    fn rt(&self) -> &tokio::runtime::Runtime {
        self.rt.as_ref().expect("the runtime lives as long as the remote")
    }

    /// The URL as configured.
    pub fn url(&self) -> &str {
        &self.inner.shown
    }

    /// Whether entries are signed and uploaded (`CASSIST_CACHE_SIGNING_KEY`).
    pub fn can_write(&self) -> bool {
        self.inner.signer.is_some()
    }

    /// Whether the remote turned out unavailable in this command.
    pub fn is_down(&self) -> bool {
        self.inner.is_down()
    }

    /// The warning that the remote is unavailable, the first time only.
    fn down_warning(&self) -> Option<String> {
        let why = self.inner.down.lock().ok()?.clone()?;
        if self.told.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return None;
        }
        Some(format!("remote cache {} unavailable ({why}): going on locally", self.inner.shown))
    }

    /// What is left of the lookup budget for a batch of `lookups` (it
    /// starts with the first lookup: the base, then each batch's share).
    fn budget(&self, lookups: usize) -> Duration {
        let Ok(mut d) = self.deadline.lock() else { return Duration::ZERO };
        let now = Instant::now();
        let end = lookup_deadline(*d, now, lookups);
        *d = Some(end);
        end.saturating_duration_since(now)
    }

    /// The remote is given up: its lookups ran out of their budget.
    fn out_of_budget(&self) {
        self.inner.mark_down(format!(
            "lookups took longer than their budget ({} s and {} ms a lookup)",
            LOOKUP_BUDGET.as_secs(),
            LOOKUP_SHARE.as_millis()
        ));
    }

    /// Looks up `wanted` (task name, input hash) in parallel and writes
    /// each entry that passes every check, with its objects, into `store`
    /// (objects first, the entry last). An entry is used only if its
    /// envelope reads, its key is trusted, its signature verifies, it
    /// names the hash it was found under, and every object it names
    /// hashes to its name; anything else is a warning naming the task.
    pub fn fill(&self, store: &Store, wanted: &[(String, String)]) -> Fill {
        let mut fill = Fill::default();
        if wanted.is_empty() || self.is_down() {
            return fill;
        }
        // The lookups, all under the command's budget; then the objects of
        // the entries found and verified, each transfer bounded.
        let budget = self.budget(wanted.len());
        let slots = Arc::new(Semaphore::new(PARALLEL_LOOKUPS));
        type Found = Result<Option<(Entry, String)>, EntryError>;
        let mut found: Vec<(String, String, Found)> = Vec::new();
        let finished = self.rt().block_on(async {
            let mut set = JoinSet::new();
            for (task, key) in wanted.iter().cloned() {
                let (inner, slots) = (self.inner.clone(), slots.clone());
                set.spawn(async move {
                    let _slot = slots.acquire_owned().await;
                    let r = if inner.is_down() { Err(EntryError::Down) } else { look_up(&inner, &key).await };
                    (task, key, r)
                });
            }
            tokio::time::timeout(budget, async {
                while let Some(r) = set.join_next().await {
                    if let Ok(r) = r {
                        found.push(r);
                    }
                }
            })
            .await
            .is_ok()
        });
        if !finished {
            self.out_of_budget();
        }
        let mut results: Vec<(String, String, Result<(), EntryError>)> = Vec::new();
        let mut verified = Vec::new();
        for (task, key, r) in found {
            match r {
                Ok(Some(entry)) => verified.push((task, key, entry)),
                Ok(None) => {}
                Err(why) => results.push((task, key, Err(why))),
            }
        }
        self.rt().block_on(async {
            let mut set = JoinSet::new();
            for (task, key, (entry, signer)) in verified {
                let (inner, store, slots) = (self.inner.clone(), store.clone(), slots.clone());
                set.spawn(async move {
                    let _slot = slots.acquire_owned().await;
                    let r = if inner.is_down() {
                        Err(EntryError::Down)
                    } else {
                        fetch_objects(&inner, &store, entry, &signer).await
                    };
                    (task, key, r)
                });
            }
            while let Some(r) = set.join_next().await {
                if let Ok(r) = r {
                    results.push(r);
                }
            }
        });
        results.sort_by(|a, b| a.0.cmp(&b.0));
        for (task, key, r) in results {
            match r {
                Ok(()) => fill.fetched.push(key),
                Err(EntryError::Down) => {}
                Err(why) => fill.warnings.push(format!("the remote cache entry of task `{task}` is not used: {why}")),
            }
        }
        fill.warnings.extend(self.down_warning());
        fill
    }

    /// Which of `befores` the remote holds an entry for (`None`: the remote
    /// cannot say).
    pub fn has_entries(&self, befores: &[String]) -> (Option<HashSet<String>>, Option<String>) {
        if self.is_down() {
            return (None, self.down_warning());
        }
        let slots = Arc::new(Semaphore::new(PARALLEL_LOOKUPS));
        let budget = self.budget(befores.len());
        let mut have = HashSet::new();
        let finished = self.rt().block_on(async {
            let mut set = JoinSet::new();
            for b in befores.iter().cloned() {
                let (inner, slots) = (self.inner.clone(), slots.clone());
                set.spawn(async move {
                    let _slot = slots.acquire_owned().await;
                    if inner.is_down() {
                        return (b, false);
                    }
                    let r = inner.backend.has(&entry_name(&b)).await;
                    (b, inner.seen(r).unwrap_or(false))
                });
            }
            tokio::time::timeout(budget, async {
                while let Some(Ok((b, has))) = set.join_next().await {
                    if has {
                        have.insert(b);
                    }
                }
            })
            .await
            .is_ok()
        });
        if !finished {
            self.out_of_budget();
        }
        if self.is_down() {
            return (None, self.down_warning());
        }
        (Some(have), None)
    }

    /// Uploads the entry recorded for `before` (task `task`) in the
    /// background: the objects the remote lacks first, then the signed
    /// entry; an entry whose objects did not all go up is never uploaded.
    /// Nothing without a signing key. [`Remote::finish_uploads`] waits.
    pub fn spawn_upload(&self, store: &Store, task: &str, before: &str) {
        if !self.can_write() || self.is_down() {
            return;
        }
        let (inner, store, slots, b) =
            (self.inner.clone(), store.clone(), self.upload_slots.clone(), before.to_owned());
        let handle = self.rt().spawn(async move {
            let _slot = slots.acquire_owned().await;
            if inner.is_down() {
                return Err(EntryError::Down);
            }
            upload(&inner, &store, &b).await
        });
        if let Ok(mut u) = self.uploads.lock() {
            u.push((task.to_owned(), handle));
        }
    }

    /// Waits for the uploads started so far, at most `bound` in all; the
    /// warnings for what did not go up. Returns (entries uploaded,
    /// warnings).
    pub fn finish_uploads(&self, bound: Duration) -> (usize, Vec<String>) {
        let pending: Vec<_> = self.uploads.lock().map(|mut u| std::mem::take(&mut *u)).unwrap_or_default();
        if pending.is_empty() {
            return (0, self.down_warning().into_iter().collect());
        }
        let deadline = tokio::time::Instant::now() + bound;
        let mut warnings = Vec::new();
        let mut done = 0;
        let mut missed: Vec<String> = Vec::new();
        self.rt().block_on(async {
            for (task, mut handle) in pending {
                match tokio::time::timeout_at(deadline, &mut handle).await {
                    Ok(Ok(Ok(()))) => done += 1,
                    Ok(Ok(Err(EntryError::Down))) => missed.push(task),
                    Ok(Ok(Err(why))) => {
                        warnings.push(format!("the run of task `{task}` was not uploaded to the remote cache: {why}"))
                    }
                    Ok(Err(e)) => warnings.push(format!("the upload of task `{task}` failed: {e}")),
                    Err(_) => {
                        handle.abort();
                        missed.push(task);
                    }
                }
            }
        });
        warnings.extend(self.down_warning());
        if !missed.is_empty() {
            missed.sort();
            missed.dedup();
            warnings.push(format!(
                "not uploaded to the remote cache: {} (`cassist cache push` sends them later)",
                missed.iter().map(|t| format!("`{t}`")).collect::<Vec<_>>().join(", ")
            ));
        }
        (done, warnings)
    }
}

/// The entry the remote holds for `before`, and its signer, if it passes
/// every check of its envelope: `Ok(None)` when there is none, why not
/// when it is not used ([`EntryError::Down`]: the remote became
/// unavailable).
async fn look_up(inner: &Inner, before: &str) -> Result<Option<(Entry, String)>, EntryError> {
    let Some(envelope) =
        inner.seen(inner.backend.get(&entry_name(before), REQUEST_TIMEOUT, ENTRY_CAP, &inner.large).await)?
    else {
        return Ok(None);
    };
    let (bytes, signer) = sign::open(&envelope, before, &inner.trusted)?;
    let entry: Entry = serde_json::from_slice(&bytes).map_err(EntryError::Unreadable)?;
    if entry.format != ENTRY_FORMAT {
        return Err(EntryError::Format(entry.format));
    }
    if entry.before != before {
        return Err(EntryError::Misnamed { found: entry.before, before: before.to_owned() });
    }
    Ok(Some((entry, signer)))
}

/// Fetches the objects of a verified `entry` the local store lacks, checks
/// each against its name, then writes them and the entry (marked fetched)
/// into the store; nothing is written unless all are whole.
async fn fetch_objects(inner: &Inner, store: &Store, entry: Entry, signer: &str) -> Result<(), EntryError> {
    let mut objects: HashMap<String, Vec<u8>> = HashMap::new();
    let mut names: Vec<String> = entry.objects().into_iter().collect();
    names.sort();
    for h in names {
        if store.get_object(&h).is_ok() {
            continue;
        }
        let Some(bytes) =
            inner.seen(inner.backend.get(&object_name(&h), TRANSFER_TIMEOUT, inner.object_cap, &inner.large).await)?
        else {
            return Err(EntryError::MissingObject(h));
        };
        let got = blake3::hash(&bytes).to_hex().to_string();
        if got != h {
            return Err(EntryError::BadObject { hash: h, got });
        }
        objects.insert(h, bytes);
    }
    for bytes in objects.values() {
        store.put_object(bytes).map_err(EntryError::LocalStore)?;
    }
    store.put_fetched_entry(&entry, signer).map_err(EntryError::LocalStore)?;
    Ok(())
}

/// Uploads one recorded entry: missing objects, then the signed entry.
/// [`EntryError::Down`]: the remote became unavailable (said once,
/// elsewhere).
async fn upload(inner: &Inner, store: &Store, before: &str) -> Result<(), EntryError> {
    let signer = inner.signer.as_ref().ok_or(EntryError::NoSigner)?;
    let bytes = std::fs::read(store.entry_path(before)).map_err(EntryError::LocalEntry)?;
    let entry: Entry = serde_json::from_slice(&bytes).map_err(EntryError::LocalEntryParse)?;
    let mut names: Vec<String> = entry.objects().into_iter().collect();
    names.sort();
    for h in names {
        if inner.seen(inner.backend.has(&object_name(&h)).await)? {
            continue;
        }
        let object = store.get_object(&h).map_err(|source| EntryError::LocalObject { hash: h.clone(), source })?;
        inner.seen(inner.backend.put(&object_name(&h), object).await)?;
    }
    let envelope = sign::seal(signer, before, &bytes);
    inner.seen(inner.backend.put(&entry_name(before), envelope).await)
}

/// The run pipeline reaches the remote only through this trait.
impl cassist_core::team::TeamCache for Remote {
    fn fill(&self, store: &Store, wanted: &[(String, String)]) -> Fill {
        Remote::fill(self, store, wanted)
    }

    fn spawn_upload(&self, store: &Store, task: &str, before: &str) {
        Remote::spawn_upload(self, store, task, before)
    }

    fn finish_uploads(&self, bound: Duration) -> (usize, Vec<String>) {
        Remote::finish_uploads(self, bound)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_layout() {
        assert_eq!(object_name("ab12"), "objects/ab12");
        assert_eq!(entry_name("cd34"), "entries/cd34");
        assert_eq!(turbo::artifact_id("entries/cd34"), "cassist-entries-cd34");
    }

    #[test]
    fn an_entry_not_used_says_why_in_the_words_of_its_warning() {
        let misnamed = EntryError::Misnamed { found: "a1".into(), before: "b2".into() };
        assert_eq!(misnamed.to_string(), "it is the entry of input hash a1, not b2");
        let bad = EntryError::BadObject { hash: "h".into(), got: "g".into() };
        assert_eq!(bad.to_string(), "object h hashes to g");
        assert_eq!(EntryError::MissingObject("h".into()).to_string(), "object h is missing on the remote");
        assert_eq!(EntryError::Format(9).to_string(), "entry format 9 is not one this cassist reads");
        assert_eq!(EntryError::Item("truncated (eof)".into()).to_string(), "truncated (eof)");
        let unsigned = EntryError::from(sign::OpenError::BadSignature);
        assert_eq!(unsigned.to_string(), "bad signature");
    }

    #[test]
    fn the_lookup_budget_grows_with_the_lookups_and_starts_once() {
        let now = Instant::now();
        // A thousand lookups of a fresh clone get their share: 5 s + 20 s.
        let first = lookup_deadline(None, now, 1000);
        assert_eq!(first - now, Duration::from_secs(25));
        // A later batch of the same command extends the same budget; it
        // does not start a new one.
        let later = now + Duration::from_secs(3);
        assert_eq!(lookup_deadline(Some(first), later, 50), first + Duration::from_secs(1));
        // One lookup: hardly more than the base.
        assert_eq!(lookup_deadline(None, now, 1) - now, Duration::from_millis(5020));
    }
}
