//! What the built-in adapters share: the input they map onto a CLI's flags,
//! the normalized result parsed from its output, and the error kinds the
//! runner turns into outcomes.

use std::path::{Path, PathBuf};

use serde::Serialize;

use cassist_core::spec::SandboxLevel;
use cassist_sandbox::process::Outcome;

/// The turn cap of `explore` and `review` tasks (they read and report, in
/// a few turns) where a CLI has one and the task sets none.
pub const READ_ONLY_TURN_CAP: u32 = 15;

/// What an adapter needs to build its command line.
#[derive(Debug, Clone)]
pub struct AdapterInput<'a> {
    pub sandbox: SandboxLevel,
    /// `explore`/`review`: read and search tools only.
    pub read_only_kind: bool,
    pub max_turns: Option<u32>,
    pub max_cost: Option<f64>,
    /// The model to ask for; `None`: the CLI's own default (no flag).
    pub model: Option<&'a str>,
    pub prompt_file: &'a Path,
    pub workdir: &'a Path,
    /// A folder outside the workspace the agent may write (e.g. Codex's
    /// last-message file).
    pub io_dir: &'a Path,
    /// Whether the agent can make user namespaces of its own here (Codex's
    /// bubblewrap needs them).
    pub userns: bool,
}

/// Why an agent run went wrong, as far as its output tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorKind {
    /// Not logged in, bad or missing key.
    Auth,
    /// 429: retry later, or fail over to the next agent.
    RateLimited,
    /// 5xx / 529: the service is overloaded; retry later or fail over.
    Overloaded,
    /// The budget (`max-cost`) was spent.
    BudgetExceeded,
    /// The turn cap was reached.
    TurnCap,
    /// The agent's tool calls were denied (it exited 0 all the same).
    PermissionDenied,
    /// A tool call failed (and the CLI exited 0 all the same).
    ToolFailed,
    Other,
}

impl ErrorKind {
    /// Whether another agent of a `try` chain should be tried with the
    /// same prompt: the model API cannot serve now, another may.
    pub fn fails_over(self) -> bool {
        matches!(self, ErrorKind::RateLimited | ErrorKind::Overloaded)
    }

    /// Whether the task ends with it (when no agent fails over): retrying
    /// the same prompt with the same agent cannot fix it.
    pub fn ends_task(self) -> bool {
        match self {
            ErrorKind::RateLimited
            | ErrorKind::Overloaded
            | ErrorKind::Auth
            | ErrorKind::BudgetExceeded
            | ErrorKind::TurnCap => true,
            ErrorKind::PermissionDenied | ErrorKind::ToolFailed | ErrorKind::Other => false,
        }
    }

    /// Whether it is refused or failed tool calls of a CLI that exited 0
    /// all the same: the run failed, and the agent is told in its next
    /// iteration.
    pub fn is_tool_failure(self) -> bool {
        matches!(self, ErrorKind::PermissionDenied | ErrorKind::ToolFailed)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct AgentError {
    pub kind: ErrorKind,
    pub message: String,
}

/// The normalized result of one agent run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AgentOutput {
    /// The final message.
    pub summary: Option<String>,
    /// What the CLI said of its own success, when it says.
    pub success: Option<bool>,
    pub turns: Option<u32>,
    pub tokens_in: Option<u64>,
    pub tokens_out: Option<u64>,
    pub cost_usd: Option<f64>,
    pub error: Option<AgentError>,
}

impl AgentOutput {
    pub fn error(kind: ErrorKind, message: impl Into<String>) -> AgentOutput {
        AgentOutput {
            error: Some(AgentError { kind, message: message.into() }),
            success: Some(false),
            ..AgentOutput::default()
        }
    }
}

/// JSON objects in `text` that start at the beginning of a line (pretty
/// printed or not), in order. Output of CLIs interleaves JSON with log
/// lines; this finds the documents among them.
pub fn json_objects(text: &str) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    let mut offset = 0;
    while offset < text.len() {
        let line_end = text[offset..].find('\n').map_or(text.len(), |p| offset + p + 1);
        let line = &text[offset..line_end];
        if line.starts_with('{') {
            let mut stream = serde_json::Deserializer::from_str(&text[offset..]).into_iter::<serde_json::Value>();
            if let Some(Ok(v)) = stream.next() {
                let used = stream.byte_offset();
                if v.is_object() {
                    out.push(v);
                }
                offset += used.max(1);
                // Continue from the next line start.
                if let Some(p) = text[offset..].find('\n') {
                    offset += p + 1;
                } else {
                    break;
                }
                continue;
            }
        }
        offset = line_end;
    }
    out
}

/// Classifies an error message by what API errors usually say.
pub fn classify(message: &str) -> ErrorKind {
    let m = message.to_lowercase();
    if m.contains("429")
        || m.contains("rate limit")
        || m.contains("rate_limit")
        || m.contains("too many requests")
        || m.contains("quota")
        || m.contains("resource has been exhausted")
    {
        ErrorKind::RateLimited
    } else if m.contains("529")
        || m.contains("overloaded")
        || m.contains("503")
        || m.contains("500")
        || m.contains("502")
        || m.contains("high demand")
        || m.contains("unavailable")
    {
        ErrorKind::Overloaded
    } else if m.contains("401")
        || m.contains("403")
        || m.contains("unauthorized")
        || m.contains("authentication")
        || m.contains("api key")
        || m.contains("api_key")
        || m.contains("x-api-key")
        || m.contains("not logged in")
        || m.contains("login")
        || m.contains("log in")
        || m.contains("unauthenticated")
    {
        ErrorKind::Auth
    } else if m.contains("budget") || m.contains("max cost") || m.contains("spending") {
        ErrorKind::BudgetExceeded
    } else if m.contains("max turns")
        || m.contains("max_turns")
        || m.contains("turn limit")
        || m.contains("max session turns")
    {
        ErrorKind::TurnCap
    } else {
        ErrorKind::Other
    }
}

/// The last part of a transcript, enough to hold an agent's final JSON.
pub fn read_tail(path: &Path, limit: u64) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else { return String::new() };
    let len = f.metadata().map_or(0, |m| m.len());
    if len > limit {
        let _ = f.seek(SeekFrom::Start(len - limit));
    }
    let mut buf = Vec::new();
    let _ = f.take(limit).read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

/// `outcome` as an exit code, when it is one.
pub fn exit_code(outcome: Outcome) -> Option<i32> {
    match outcome {
        Outcome::Exited(c) => Some(c),
        _ => None,
    }
}

/// `--model MODEL` when a model is asked for: the flag of every built-in
/// CLI (Claude Code, Codex, Gemini CLI, Droid).
pub fn model_flag(model: Option<&str>) -> Vec<String> {
    model.map(|m| vec!["--model".to_owned(), m.to_owned()]).unwrap_or_default()
}

/// A folder under `$HOME`, when HOME is set.
pub fn home_path(rel: &str) -> Option<PathBuf> {
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(rel))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_json_among_log_lines() {
        let text = "Warning: 256-color support not detected\n{\n  \"response\": \"hi\",\n  \"stats\": {}\n}\nnoise\n{\"a\":1}\n";
        let found = json_objects(text);
        assert_eq!(found.len(), 2);
        assert_eq!(found[0]["response"], "hi");
        assert_eq!(found[1]["a"], 1);
    }

    #[test]
    fn only_an_api_that_cannot_serve_now_fails_over_and_tool_failures_never_end_the_task() {
        use ErrorKind::*;
        let all = [Auth, RateLimited, Overloaded, BudgetExceeded, TurnCap, PermissionDenied, ToolFailed, Other];
        let over: Vec<ErrorKind> = all.into_iter().filter(|k| k.fails_over()).collect();
        assert_eq!(over, [RateLimited, Overloaded]);
        let ends: Vec<ErrorKind> = all.into_iter().filter(|k| k.ends_task()).collect();
        assert_eq!(ends, [Auth, RateLimited, Overloaded, BudgetExceeded, TurnCap]);
        let tools: Vec<ErrorKind> = all.into_iter().filter(|k| k.is_tool_failure()).collect();
        assert_eq!(tools, [PermissionDenied, ToolFailed]);
        // What fails over ends the task when no agent is left.
        assert!(all.iter().all(|k| !k.fails_over() || k.ends_task()));
    }

    #[test]
    fn classifies_api_errors() {
        assert_eq!(classify("exceeded retry limit, last status: 429 Too Many Requests"), ErrorKind::RateLimited);
        assert_eq!(classify("API Error: 529 {\"type\":\"overloaded_error\"}"), ErrorKind::Overloaded);
        assert_eq!(classify("unexpected status 401 Unauthorized: Incorrect API key"), ErrorKind::Auth);
        assert_eq!(classify("something else"), ErrorKind::Other);
    }
}
