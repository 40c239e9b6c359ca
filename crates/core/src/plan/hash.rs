//! The input hash of a task (what decides whether a recorded run can stand
//! for it; the README's "How the hash is made"): a canonical serde
//! document of named parts,
//! hashed with blake3. The document itself can be printed and diffed, which
//! is how `explain` says what changed.

use serde::Serialize;

/// Bumped when the key's shape changes, so old cache entries never match.
pub const KEY_FORMAT: u32 = 1;

/// The parts of a task's spec that matter to its result, normalized: no
/// formatting, comments, file name or position.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct SpecKey {
    pub name: String,
    pub goal: String,
    pub kind: String,
    pub timeout_ms: u64,
    pub max_iterations: u32,
    pub max_cost: Option<f64>,
    /// Patterns as written, sorted and de-duplicated.
    pub context: Vec<String>,
    pub scope: Vec<String>,
    pub reference: Vec<String>,
    /// In order: the prompt lists them as written.
    pub constraints: Vec<String>,
    pub acceptance: Vec<AcceptanceKey>,
    pub depends_on: Vec<String>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct AcceptanceKey {
    pub run: String,
    pub timeout_ms: Option<u64>,
}

/// What the resolved agent contributes.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct AgentKey {
    pub name: String,
    pub version: Option<String>,
    /// A custom agent's command line, pass-env and failover list.
    pub command: Vec<String>,
    pub pass_env: Vec<String>,
    pub try_agents: Vec<String>,
}

/// The hosts the commands of a task may reach: `network { allow … }` of
/// the project (`None` without the block: setup then reaches any host),
/// and the `allow` hosts of the custom agents it may run. Each list
/// sorted and de-duplicated. Not an input at all when neither is given,
/// so that a key made before allow-lists existed keeps its hash.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct NetworkKey {
    pub allow: Option<Vec<String>>,
    pub agent: Vec<String>,
}

/// The host paths of `sandbox { read …; hide … }`, as written (`~/` not
/// taken against anyone's HOME), sorted and de-duplicated. Not an input
/// when both are empty.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SandboxPathsKey {
    pub read: Vec<String>,
    pub hide: Vec<String>,
}

/// Project config that changes what a run does.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ProjectKey {
    pub setup: Vec<String>,
    pub test: Vec<String>,
    pub build: Vec<String>,
    /// The limits that decide what the review rejects and what a command
    /// may use, when they are not the defaults (so that the defaults,
    /// written or not, hash as before).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<LimitsKey>,
}

/// The part of `limits` that changes outcomes: what the review rejects,
/// and what a command may use (the transcript cap changes only what is
/// recorded).
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct LimitsKey {
    pub file_size: u64,
    pub change_size: u64,
    /// Left out at its default, as are the ones below, so that a key made
    /// before the limit existed keeps its hash.
    #[serde(skip_serializing_if = "is_default_files")]
    pub files: u64,
    #[serde(skip_serializing_if = "is_default_memory")]
    pub memory: u64,
    #[serde(skip_serializing_if = "is_default_processes")]
    pub processes: u64,
}

fn is_default_files(files: &u64) -> bool {
    *files == crate::limits::Limits::DEFAULT.files
}

fn is_default_memory(memory: &u64) -> bool {
    *memory == crate::limits::Limits::DEFAULT.memory
}

fn is_default_processes(processes: &u64) -> bool {
    *processes == crate::limits::Limits::DEFAULT.processes
}

impl LimitsKey {
    /// The key of `limits`, `None` for the defaults.
    pub fn of(limits: &crate::limits::Limits) -> Option<LimitsKey> {
        let key = |l: &crate::limits::Limits| LimitsKey {
            file_size: l.file_size,
            change_size: l.change_size,
            files: l.files,
            memory: l.memory,
            processes: l.processes,
        };
        let key_now = key(limits);
        (key_now != key(&crate::limits::Limits::DEFAULT)).then_some(key_now)
    }
}

/// One named input and its hash.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Input {
    pub kind: &'static str,
    pub name: String,
    pub hash: String,
}

/// The whole key: what the input hash is the hash of.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct InputKey {
    pub format: u32,
    pub spec: SpecKey,
    pub inputs: Vec<Input>,
}

impl InputKey {
    pub fn hash(&self) -> String {
        hash_json(self)
    }
}

/// blake3 of the canonical JSON of `value` (struct fields in declaration
/// order, maps sorted, no whitespace).
pub fn hash_json<T: Serialize>(value: &T) -> String {
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    blake3::hash(&bytes).to_hex().to_string()
}

pub fn hash_bytes(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}
