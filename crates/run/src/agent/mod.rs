//! Agents: the built-in adapters and custom commands from `cassist.kdl`,
//! all behind one trait, [`Agent`].
//!
//! A built-in agent is one file of this folder (its program, variables,
//! flags and output format) and one line of [`BUILTINS`]; the runner asks
//! the trait and never names an agent. The names the task format accepts
//! are `cassist_core::spec::BUILTIN_AGENTS`: a test below holds the two
//! lists to the same agents, in the same order.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cassist_core::spec::SandboxLevel;
use cassist_sandbox::process;

pub mod adapter;
pub mod claude;
pub mod codex;
pub mod custom;
pub mod droid;
pub mod gemini;
pub mod invoke;

use adapter::{AdapterInput, AgentOutput};

/// The built-in agents, in the order `cassist agents` lists them.
pub static BUILTINS: &[&dyn Agent] = &[&claude::Claude, &codex::Codex, &droid::Droid, &gemini::Gemini];

/// The built-in agent called `name`.
pub fn builtin(name: &str) -> Option<&'static dyn Agent> {
    BUILTINS.iter().copied().find(|a| a.name() == name)
}

/// How long a CLI may take to say its version.
pub const VERSION_TIMEOUT: Duration = Duration::from_secs(10);

/// Folders under `$HOME` that every agent may write (tools keep caches
/// there), besides its own [`Agent::home_state`].
pub const SHARED_HOME_STATE: &[&str] = &[".cache"];

/// One agent: what it runs, what it is given, and how its output reads.
///
/// The defaults suit a built-in CLI; a custom command
/// ([`custom::Command`]) overrides what cassist does not know of it.
pub trait Agent: Send + Sync + std::fmt::Debug {
    /// The name tasks and `cassist.kdl` call it by.
    fn name(&self) -> &str;

    /// The program it starts: a name looked up on `PATH`, or a path (one
    /// with a `/`, relative to the project root).
    fn program(&self) -> &str;

    /// The shell line that installs the program, whole, to paste; `None`
    /// for a command of the user's own.
    fn install_line(&self) -> Option<&str>;

    /// The program's version as it reports it (a built-in CLI's version is
    /// part of every task's input hash), or `None`.
    fn version(&self, program: &Path) -> Option<String> {
        version_of(program, VERSION_TIMEOUT)
    }

    /// Variables passed through from cassist's environment, besides the
    /// ones every agent gets ([`invoke::COMMON_ENV`]).
    fn pass_env(&self) -> Vec<&str>;

    /// Variables set for every run of `model` (`None`: the CLI's default).
    fn extra_env(&self, _model: Option<&str>) -> Vec<(String, String)> {
        Vec::new()
    }

    /// Variables that name a state folder of this CLI (`CODEX_HOME`). Such
    /// a folder is writable to any agent that is passed the variable.
    fn state_vars(&self) -> &[&str] {
        &[]
    }

    /// Folders under `$HOME` it keeps its state in: left writable by the
    /// sandbox (a CLI denied its state folder fails in odd ways).
    fn home_state(&self) -> &[&str] {
        &[]
    }

    /// Files under `$HOME` it keeps its state in (`.claude.json`).
    fn home_state_files(&self) -> &[&str] {
        &[]
    }

    /// Whether its state folders are made before it runs when missing (a
    /// sandbox rule needs an existing path). Never for a custom command:
    /// cassist does not know what it needs.
    fn makes_state_dirs(&self) -> bool {
        true
    }

    /// The file it reads standing instructions from, at the workspace
    /// root: the project's `instructions` file is placed there.
    fn instructions_file(&self) -> &str {
        "AGENTS.md"
    }

    /// Its command line for one run, before placeholders are filled: a
    /// built-in CLI maps the sandbox level, the task kind, the turn cap,
    /// the budget and the model onto its own flags. The prompt goes on
    /// stdin too.
    fn argv(&self, input: &AdapterInput<'_>) -> Vec<String>;

    /// Paths its configured command names (a script under `/tmp`): they
    /// stay visible in the sandbox where folders are hidden.
    fn named_paths(&self) -> Vec<PathBuf> {
        Vec::new()
    }

    /// What its output says, from the end of its transcript `text` and
    /// its io folder `io`: `None` for an agent whose output cassist does
    /// not read (a custom command reports through its result file).
    fn parse(&self, text: &str, outcome: process::Outcome, io: &Path) -> Option<AgentOutput>;

    /// The hosts of its model API (and its login), which it may reach
    /// from its network namespace besides the project's own hosts.
    fn api_hosts(&self) -> Vec<String> {
        Vec::new()
    }

    /// How its API key is kept out of its sandbox: the variables of its
    /// base URL and keys ([`BrokerVars`]); `None` for a CLI that cannot be
    /// pointed at another base URL.
    fn broker(&self) -> Option<&'static BrokerVars> {
        None
    }

    /// What the user is told about the sandbox of a run with `argv` at
    /// `level` (`landlock`: under cassist's Landlock sandbox), when the
    /// CLI's own sandbox had to be left off.
    fn sandbox_note(&self, _argv: &[String], _level: SandboxLevel, _landlock: bool) -> Option<String> {
        None
    }
}

/// Where a CLI reads its API's base URL and key: with a key in cassist's
/// environment, the CLI gets the proxy as its base URL and a placeholder
/// key, and the proxy adds the real one ([`cassist_egress::Broker`]).
#[derive(Debug)]
pub struct BrokerVars {
    /// The variable of its base URL.
    pub base_var: &'static str,
    /// The base URL when that variable is not set.
    pub default_base: &'static str,
    /// The variables of its key, in the order the CLI prefers them, each
    /// with the header the key goes in and whether as `Bearer` token.
    pub keys: &'static [(&'static str, &'static str, bool)],
}

/// The key a CLI is given in place of its real one.
pub const PLACEHOLDER_KEY: &str = "cassist-brokered-key";

/// The folders under `$HOME` `agent` may write: its own, then the shared
/// ones.
pub fn state_dirs(agent: &dyn Agent) -> Vec<&str> {
    agent.home_state().iter().copied().chain(SHARED_HOME_STATE.iter().copied()).collect()
}

/// Every variable a built-in CLI reads a state folder from.
pub fn all_state_vars() -> impl Iterator<Item = &'static str> {
    BUILTINS.iter().flat_map(|a| a.state_vars().iter().copied())
}

/// What a built-in CLI needs to reach its model API from a network behind
/// a proxy or a private certificate authority.
pub const NETWORK_ENV: &[&str] = &[
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "NO_PROXY",
    "no_proxy",
    "ALL_PROXY",
    "all_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
];

/// A built-in CLI's variables `own`, then [`NETWORK_ENV`].
pub fn with_network_env(own: &'static [&'static str]) -> Vec<&'static str> {
    own.iter().chain(NETWORK_ENV).copied().collect()
}

/// Finds `program` on `PATH` (or as a path when it holds a `/`).
pub fn which(program: &str, path_var: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    if program.contains('/') {
        let p = Path::new(program);
        return process::is_executable_file(p).then(|| p.to_path_buf());
    }
    let path_var = path_var.map(ToOwned::to_owned).or_else(|| std::env::var_os("PATH"))?;
    // Relative entries stay relative to the current folder.
    process::find_in_path(program.as_ref(), &path_var, Path::new(""))
}

/// Runs `program --version` with a timeout and returns its first line that
/// holds a digit (CLIs print banners around the version), at most 80
/// characters. Through [`process::run`] like every command: its own process
/// group, killed whole at the timeout, or when the program exits; cassist's
/// environment, but for a HOME and TMPDIR of its own, removed once the
/// group is gone: CLIs write state even to say their version (Gemini CLI
/// its projects list, Codex its helper links), and one killed halfway
/// leaves temp files; none of that belongs in the user's folders.
pub fn version_of(program: &Path, timeout: Duration) -> Option<String> {
    let own = tempfile::Builder::new().prefix("cassist-version-").tempdir().ok()?;
    let (home, tmp) = (own.path().join("home"), own.path().join("tmp"));
    std::fs::create_dir(&home).ok()?;
    std::fs::create_dir(&tmp).ok()?;
    let mut cmd = process::Command::inheriting([program.as_os_str(), "--version".as_ref()]);
    // Variables that name state folders elsewhere go: those under HOME
    // are taken.
    cmd.env.retain(|(k, _)| !VERSION_UNSET.iter().any(|v| k == v));
    cmd.env.extend([("HOME".into(), home.into()), ("TMPDIR".into(), tmp.into())]);
    cmd.timeout = Some(timeout);
    // Killed at once at the timeout, as it always was.
    cmd.grace = Duration::ZERO;
    cmd.tail_limit = 64 * 1024;
    let done = process::run(&cmd, &process::Redactor::default(), &process::Cancel::new());
    crate::workspace::remove_tree(own.path());
    let done = done.ok()?;
    if done.outcome == process::Outcome::TimedOut {
        return None;
    }
    done.tail
        .lines()
        .map(str::trim)
        .find(|l| l.chars().any(|c| c.is_ascii_digit()))
        .map(|l| l.chars().take(80).collect())
}

/// Variables a `--version` probe goes without ([`version_of`]): where
/// CLIs keep their state and caches when not under HOME.
const VERSION_UNSET: &[&str] =
    &["XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "CODEX_HOME", "CLAUDE_CONFIG_DIR"];

/// The version of built-in agent `name` as its CLI reports it, cached in
/// `.cassist/cache/agent-versions` by the program's path, size and mtime,
/// so a command does not start the CLI each time (the command layer asks it
/// before planning; planning itself runs nothing). `None` when it is not
/// installed or says nothing.
pub fn cached_version(state_dir: &Path, name: &str) -> Option<String> {
    let agent = builtin(name)?;
    let path = which(agent.program(), None)?;
    let real = std::fs::canonicalize(&path).unwrap_or(path.clone());
    let stamp = cassist_core::paths::Stamp::of(&std::fs::metadata(&real).ok()?);
    let key = format!("{} {} {}", real.display(), stamp.size, stamp.mtime_ns);
    let cache_file = state_dir.join("cache").join("agent-versions");
    let mut cache: std::collections::BTreeMap<String, String> =
        std::fs::read_to_string(&cache_file).ok().and_then(|t| serde_json::from_str(&t).ok()).unwrap_or_default();
    if let Some(v) = cache.get(&key) {
        return Some(v.clone());
    }
    let v = agent.version(&path)?;
    cache.insert(key, v.clone());
    if let Ok(json) = serde_json::to_vec_pretty(&cache) {
        let _ = cassist_core::fsx::write_atomic(&cache_file, &json);
    }
    Some(v)
}

#[cfg(test)]
mod tests;
