//! Agents: the built-in adapters and custom commands from `cassist.kdl`.
//!
//! This module knows each built-in agent's program and how to ask its
//! version; running agents comes with the executor.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::process;

/// The program a built-in agent runs, and the shell line that installs it
/// (a whole command, to paste: the npm packages of AGENT-CLIS.md).
pub fn builtin_program(name: &str) -> Option<(&'static str, &'static str)> {
    Some(match name {
        "claude" => ("claude", "npm install -g @anthropic-ai/claude-code"),
        "codex" => ("codex", "npm install -g @openai/codex"),
        "droid" => ("droid", "npm install -g droid"),
        "gemini" => ("gemini", "npm install -g @google/gemini-cli"),
        _ => return None,
    })
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

pub mod invoke;

/// Folders under `$HOME` an agent keeps its state in: left writable by the
/// sandbox (a CLI denied its state dir fails in odd ways). `.cache` for
/// every agent.
pub fn state_dirs(name: &str) -> Vec<&'static str> {
    let own: &[&str] = match name {
        "claude" => &[".claude"],
        "codex" => &[".codex"],
        "gemini" => &[".gemini"],
        "droid" => &[".factory"],
        _ => &[],
    };
    own.iter().copied().chain([".cache"]).collect()
}

pub mod adapter;
pub mod claude;
pub mod codex;
pub mod droid;
pub mod gemini;

/// A built-in adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builtin {
    Claude,
    Codex,
    Droid,
    Gemini,
}

impl Builtin {
    pub fn from_name(name: &str) -> Option<Builtin> {
        Some(match name {
            "claude" => Builtin::Claude,
            "codex" => Builtin::Codex,
            "droid" => Builtin::Droid,
            "gemini" => Builtin::Gemini,
            _ => return None,
        })
    }

    /// The command line for one run (the prompt goes on stdin too).
    pub fn argv(self, input: &adapter::AdapterInput<'_>) -> Vec<String> {
        match self {
            Builtin::Claude => claude::argv(input),
            Builtin::Codex => codex::argv(input),
            Builtin::Droid => droid::argv(input),
            Builtin::Gemini => gemini::argv(input),
        }
    }

    /// Variables passed through from cassist's environment.
    pub fn env(self) -> &'static [&'static str] {
        match self {
            Builtin::Claude => claude::ENV,
            Builtin::Codex => codex::ENV,
            Builtin::Droid => droid::ENV,
            Builtin::Gemini => gemini::ENV,
        }
    }

    /// Variables set for every run of `model` (`None`: the CLI's default).
    pub fn extra_env(self, model: Option<&str>) -> Vec<(String, String)> {
        match self {
            Builtin::Claude => claude::EXTRA_ENV.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
            Builtin::Droid => droid::extra_env(model),
            Builtin::Codex | Builtin::Gemini => Vec::new(),
        }
    }

    /// Parses the CLI's output (the end of its transcript).
    pub fn parse(self, text: &str, outcome: crate::process::Outcome, io: &Path) -> adapter::AgentOutput {
        match self {
            Builtin::Claude => claude::parse(text, outcome),
            Builtin::Codex => codex::parse(text, outcome, io),
            Builtin::Droid => droid::parse(text, outcome),
            Builtin::Gemini => gemini::parse(text, outcome),
        }
    }
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

/// A built-in agent: its program (for finding it) and variables; the
/// command line is made per run by its adapter.
pub fn builtin_invocation(name: &str) -> Option<invoke::Invocation> {
    let b = Builtin::from_name(name)?;
    let (program, _) = builtin_program(name)?;
    Some(invoke::Invocation {
        name: name.to_owned(),
        argv: vec![program.to_owned()],
        pass_env: b.env().iter().chain(NETWORK_ENV).map(|s| (*s).to_owned()).collect(),
        stdin_prompt: true,
        builtin: Some(b),
    })
}

/// The version of built-in agent `name` as its CLI reports it, cached in
/// `.cassist/cache/agent-versions` by the program's path, size and mtime,
/// so a command does not start the CLI each time (the command layer asks it
/// before planning; planning itself runs nothing). `None` when it is not
/// installed or says nothing.
pub fn cached_version(state_dir: &Path, name: &str) -> Option<String> {
    let (program, _) = builtin_program(name)?;
    let path = which(program, None)?;
    let real = std::fs::canonicalize(&path).unwrap_or(path.clone());
    let stamp = crate::paths::Stamp::of(&std::fs::metadata(&real).ok()?);
    let key = format!("{} {} {}", real.display(), stamp.size, stamp.mtime_ns);
    let cache_file = state_dir.join("cache").join("agent-versions");
    let mut cache: std::collections::BTreeMap<String, String> =
        std::fs::read_to_string(&cache_file).ok().and_then(|t| serde_json::from_str(&t).ok()).unwrap_or_default();
    if let Some(v) = cache.get(&key) {
        return Some(v.clone());
    }
    let v = version_of(&path, Duration::from_secs(10))?;
    cache.insert(key, v.clone());
    if let Ok(json) = serde_json::to_vec_pretty(&cache) {
        let _ = crate::fsx::write_atomic(&cache_file, &json);
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_agents_pass_their_own_and_network_variables_only() {
        let inv = builtin_invocation("claude").unwrap();
        for v in ["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "HTTPS_PROXY", "NO_PROXY", "NODE_EXTRA_CA_CERTS"] {
            assert!(inv.pass_env.iter().any(|p| p == v), "{v}");
        }
        assert!(!inv.pass_env.iter().any(|p| p == "OPENAI_API_KEY"), "another agent's key");
        let codex = builtin_invocation("codex").unwrap();
        assert!(codex.pass_env.iter().any(|p| p == "CODEX_HOME"));
        assert!(!codex.pass_env.iter().any(|p| p == "ANTHROPIC_API_KEY"));
    }

    #[test]
    fn every_built_in_cli_is_told_the_model_asked_for_and_none_else() {
        let d = Path::new("/w");
        let input = |model| adapter::AdapterInput {
            sandbox: crate::spec::SandboxLevel::WorkspaceWrite,
            read_only_kind: false,
            max_turns: None,
            max_cost: None,
            model,
            prompt_file: d,
            workdir: d,
            io_dir: d,
            userns: true,
        };
        for b in [Builtin::Claude, Builtin::Codex, Builtin::Gemini, Builtin::Droid] {
            let argv = b.argv(&input(Some("m-1")));
            let at = argv.iter().position(|a| a == "--model").unwrap_or_else(|| panic!("{b:?}: {argv:?}"));
            assert_eq!(argv[at + 1], "m-1", "{b:?}");
            assert_eq!(argv.iter().filter(|a| *a == "--model" || *a == "-m").count(), 1, "{b:?}: {argv:?}");
            if b != Builtin::Droid {
                // Droid falls back to a custom model of its settings.
                let argv = b.argv(&input(None));
                assert!(!argv.iter().any(|a| a == "--model" || a == "-m"), "{b:?}: the CLI's default: {argv:?}");
            }
        }
        assert_eq!(droid::extra_env(Some("custom:local")), [("FACTORY_AIRGAP_ENABLED".to_owned(), "1".to_owned())]);
        assert!(droid::extra_env(Some("gpt-5")).is_empty());
    }
}
