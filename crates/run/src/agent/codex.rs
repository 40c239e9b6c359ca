//! OpenAI Codex CLI (`codex exec`): `--json` JSONL events, its own
//! bubblewrap sandbox nested inside ours.

use std::path::Path;

use super::Agent;
use super::adapter::{AdapterInput, AgentOutput, ErrorKind, classify, exit_code, json_objects};
use cassist_core::spec::SandboxLevel;
use cassist_sandbox::process::Outcome;

/// OpenAI Codex CLI.
#[derive(Debug)]
pub struct Codex;

impl Agent for Codex {
    fn name(&self) -> &str {
        "codex"
    }

    fn program(&self) -> &str {
        "codex"
    }

    fn install_line(&self) -> Option<&str> {
        Some("npm install -g @openai/codex")
    }

    fn pass_env(&self) -> Vec<&str> {
        super::with_network_env(ENV)
    }

    fn api_hosts(&self) -> Vec<String> {
        ["api.openai.com", "chatgpt.com", "auth.openai.com"].map(String::from).to_vec()
    }

    fn state_vars(&self) -> &[&str] {
        &["CODEX_HOME"]
    }

    fn home_state(&self) -> &[&str] {
        &[".codex"]
    }

    fn argv(&self, input: &AdapterInput<'_>) -> Vec<String> {
        argv(input)
    }

    fn parse(&self, text: &str, outcome: Outcome, io: &Path) -> Option<AgentOutput> {
        Some(parse(text, outcome, io))
    }

    /// Codex runs with danger-full-access where its own sandbox cannot
    /// start: the user is told what enforces the level instead.
    fn sandbox_note(&self, argv: &[String], level: SandboxLevel, landlock: bool) -> Option<String> {
        if level == SandboxLevel::Full || !argv.iter().any(|a| a == "danger-full-access") {
            return None;
        }
        Some(if landlock {
            format!(
                "codex's own sandbox cannot start inside cassist's Landlock sandbox: Landlock enforces `{level}` (codex runs with danger-full-access)"
            )
        } else {
            format!(
                "no user namespaces here for codex's own sandbox: `{level}` rests on the review of the change (codex runs with danger-full-access)"
            )
        })
    }
}

/// Variables Codex gets: its home (config, state) and key.
pub const ENV: &[&str] = &["CODEX_HOME", "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"];

/// The file `-o` writes the final message to.
pub const LAST_MESSAGE: &str = "codex-last-message.txt";

fn argv(input: &AdapterInput<'_>) -> Vec<String> {
    // Codex's own sandbox (bubblewrap) needs user namespaces and mounts:
    // where it cannot start (no user namespaces, or inside cassist's
    // Landlock sandbox, which refuses mounts) Codex runs unrestricted and
    // cassist's Landlock sandbox enforces the level.
    let level = match input.sandbox {
        _ if !input.userns => "danger-full-access",
        _ if input.read_only_kind => "read-only",
        SandboxLevel::ReadOnly => "read-only",
        SandboxLevel::WorkspaceWrite => "workspace-write",
        SandboxLevel::Full => "danger-full-access",
    };
    let mut argv: Vec<String> = ["codex", "exec", "-C"].iter().map(|s| (*s).to_owned()).collect();
    argv.push(input.workdir.display().to_string());
    argv.extend(["--sandbox".to_owned(), level.to_owned(), "--json".to_owned(), "-o".to_owned()]);
    argv.push(input.io_dir.join(LAST_MESSAGE).display().to_string());
    // Outside a git repository (a copy workspace) Codex refuses to start
    // without this; its calls home are switched off.
    argv.extend(
        ["--skip-git-repo-check", "--disable", "plugins", "-c", "analytics.enabled=false"]
            .iter()
            .map(|s| (*s).to_owned()),
    );
    // The flag wins over `model` in `$CODEX_HOME/config.toml`.
    argv.extend(super::adapter::model_flag(input.model));
    argv
}

/// Parses the JSONL events (`thread.started`, `item.completed`,
/// `turn.completed{usage}`, `turn.failed`, `error`).
fn parse(text: &str, outcome: Outcome, io: &Path) -> AgentOutput {
    let mut out = AgentOutput::default();
    let mut turns = 0u32;
    let (mut tin, mut tout) = (0u64, 0u64);
    let mut saw_usage = false;
    let mut failure: Option<String> = None;
    let mut failed_items: Vec<String> = Vec::new();
    for v in json_objects(text) {
        match v["type"].as_str().unwrap_or("") {
            "turn.started" => turns += 1,
            "turn.completed" => {
                saw_usage = true;
                tin += v["usage"]["input_tokens"].as_u64().unwrap_or(0);
                tout += v["usage"]["output_tokens"].as_u64().unwrap_or(0);
            }
            "turn.failed" => failure = v["error"]["message"].as_str().map(str::to_owned),
            "error" if failure.is_none() => {
                let m = v["message"].as_str().unwrap_or("");
                // Informational errors (reconnects, unknown model metadata)
                // are not failures unless the turn fails.
                if m.contains("exceeded retry limit") {
                    failure = Some(m.to_owned());
                }
            }
            "item.completed" => {
                let item = &v["item"];
                match item["type"].as_str().unwrap_or("") {
                    "agent_message" => out.summary = item["text"].as_str().map(str::to_owned),
                    "file_change" if item["status"] == "failed" => failed_items.push("a file change failed".into()),
                    _ => {}
                }
            }
            _ => {}
        }
    }
    if let Ok(last) = std::fs::read_to_string(io.join(LAST_MESSAGE))
        && !last.trim().is_empty()
    {
        out.summary = Some(last.trim().to_owned());
    }
    if turns > 0 {
        out.turns = Some(turns);
    }
    if saw_usage {
        out.tokens_in = Some(tin);
        out.tokens_out = Some(tout);
    }
    if let Some(message) = failure {
        let kind = match classify(&message) {
            ErrorKind::Other if message.contains("Quota exceeded") => ErrorKind::RateLimited,
            k => k,
        };
        return AgentOutput { error: Some(super::adapter::AgentError { kind, message }), success: Some(false), ..out };
    }
    out.success = Some(exit_code(outcome) == Some(0));
    if !failed_items.is_empty() {
        out.error = Some(super::adapter::AgentError { kind: ErrorKind::ToolFailed, message: failed_items.join("; ") });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_successful_run() {
        let text = r#"Reading prompt from stdin...
{"type":"thread.started","thread_id":"t"}
{"type":"turn.started"}
{"type":"item.completed","item":{"id":"item_0","type":"file_change","changes":[{"path":"/p/fix.txt","kind":"add"}],"status":"completed"}}
{"type":"item.completed","item":{"id":"item_1","type":"agent_message","text":"Added fix.txt"}}
{"type":"turn.completed","usage":{"input_tokens":200,"cached_input_tokens":0,"output_tokens":40}}
"#;
        let dir = tempfile::tempdir().unwrap();
        let out = parse(text, Outcome::Exited(0), dir.path());
        assert_eq!(out.summary.as_deref(), Some("Added fix.txt"));
        assert_eq!((out.tokens_in, out.tokens_out, out.turns), (Some(200), Some(40), Some(1)));
        assert_eq!(out.success, Some(true));
        assert!(out.error.is_none());
    }

    #[test]
    fn maps_failures() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            ("exceeded retry limit, last status: 429 Too Many Requests", ErrorKind::RateLimited),
            ("Quota exceeded. Check your plan and billing details.", ErrorKind::RateLimited),
            (
                "unexpected status 503 Service Unavailable: x, url: http://127.0.0.1:1/v1/responses",
                ErrorKind::Overloaded,
            ),
            ("unexpected status 401 Unauthorized: Incorrect API key provided", ErrorKind::Auth),
        ];
        for (message, kind) in cases {
            let text = format!("{{\"type\":\"turn.failed\",\"error\":{{\"message\":{message:?}}}}}\n");
            let out = parse(&text, Outcome::Exited(1), dir.path());
            assert_eq!(out.error.as_ref().map(|e| e.kind), Some(kind), "{message}");
        }
    }

    #[test]
    fn sandbox_levels_map_to_codex_flags() {
        let dir = std::path::Path::new("/w");
        let input = |sandbox, read_only_kind, userns| AdapterInput {
            sandbox,
            read_only_kind,
            max_turns: None,
            max_cost: None,
            model: None,
            prompt_file: dir,
            workdir: dir,
            io_dir: dir,
            userns,
        };
        let level = |i: &AdapterInput<'_>| {
            let a = argv(i);
            a[a.iter().position(|x| x == "--sandbox").unwrap() + 1].clone()
        };
        assert_eq!(level(&input(SandboxLevel::ReadOnly, false, true)), "read-only");
        assert_eq!(level(&input(SandboxLevel::WorkspaceWrite, false, true)), "workspace-write");
        assert_eq!(level(&input(SandboxLevel::WorkspaceWrite, true, true)), "read-only");
        assert_eq!(level(&input(SandboxLevel::WorkspaceWrite, false, false)), "danger-full-access");
        assert_eq!(level(&input(SandboxLevel::ReadOnly, true, false)), "danger-full-access");
        assert_eq!(level(&input(SandboxLevel::Full, false, true)), "danger-full-access");
        assert!(argv(&input(SandboxLevel::ReadOnly, false, true)).contains(&"--skip-git-repo-check".to_owned()));
    }
}
