//! Agents: the built-in adapters and custom commands from `cassist.kdl`.
//!
//! This module knows each built-in agent's program and how to ask its
//! version; running agents comes with the executor.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The built-in agents, in the order they are listed.
pub const BUILTIN_AGENTS: &[&str] = &["claude", "codex", "droid", "gemini"];

/// The program a built-in agent runs, and how to install it.
pub fn builtin_program(name: &str) -> Option<(&'static str, &'static str)> {
    Some(match name {
        "claude" => ("claude", "npm install -g @anthropic-ai/claude-code"),
        "codex" => ("codex", "npm install -g @openai/codex"),
        "droid" => ("droid", "npm install -g droid (Factory Droid)"),
        "gemini" => ("gemini", "npm install -g @google/gemini-cli"),
        _ => return None,
    })
}

/// Finds `program` on `PATH` (or as a path when it holds a `/`).
pub fn which(program: &str, path_var: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    if program.contains('/') {
        let p = Path::new(program);
        return is_executable(p).then(|| p.to_path_buf());
    }
    let path_var = path_var.map(ToOwned::to_owned).or_else(|| std::env::var_os("PATH"))?;
    std::env::split_paths(&path_var).map(|dir| dir.join(program)).find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Runs `program --version` with a timeout and returns its first line that
/// holds a digit (CLIs print banners around the version).
pub fn version_of(program: &Path, timeout: Duration) -> Option<String> {
    let handle =
        duct::cmd(program, ["--version"]).stdin_null().stderr_to_stdout().stdout_capture().unchecked().start().ok()?;
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match handle.try_wait() {
            Ok(Some(out)) => {
                let text = String::from_utf8_lossy(&out.stdout);
                return text.lines().map(str::trim).find(|l| l.chars().any(|c| c.is_ascii_digit())).map(|l| {
                    let l: String = l.chars().take(80).collect();
                    l
                });
            }
            Ok(None) if std::time::Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = handle.kill();
                return None;
            }
        }
    }
}

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

/// The command line and variables of a built-in agent (workspace-write
/// mode; the full adapters map every sandbox level and parse the CLIs'
/// JSON output).
pub fn builtin_invocation(name: &str) -> Option<invoke::Invocation> {
    let (argv, env): (&[&str], &[&str]) = match name {
        "claude" => (
            &["claude", "-p", "--output-format", "json", "--permission-mode", "acceptEdits"],
            &["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "CLAUDE_CONFIG_DIR"],
        ),
        "codex" => (
            &["codex", "exec", "--sandbox", "workspace-write", "--json", "--skip-git-repo-check"],
            &["CODEX_HOME", "OPENAI_API_KEY"],
        ),
        "gemini" => (
            &["gemini", "--output-format", "json", "--approval-mode", "auto_edit", "--skip-trust"],
            &["GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL", "GEMINI_MODEL"],
        ),
        "droid" => (&["droid", "exec", "--auto", "low", "-o", "json", "-f", "{prompt_file}"], &["FACTORY_API_KEY"]),
        _ => return None,
    };
    Some(invoke::Invocation {
        name: name.to_owned(),
        argv: argv.iter().map(|s| (*s).to_owned()).collect(),
        pass_env: env.iter().map(|s| (*s).to_owned()).collect(),
        stdin_prompt: true,
    })
}
