//! Gemini CLI: `--output-format json`; the exit code is the HTTP status of
//! an API error (mod 256); it exits 0 after a failed tool call.

use std::path::Path;

use super::Agent;
use super::adapter::{AdapterInput, AgentError, AgentOutput, ErrorKind, classify, exit_code, json_objects};
use cassist_core::spec::SandboxLevel;
use cassist_sandbox::process::Outcome;

/// Gemini CLI.
#[derive(Debug)]
pub struct Gemini;

impl Agent for Gemini {
    fn name(&self) -> &str {
        "gemini"
    }

    fn program(&self) -> &str {
        "gemini"
    }

    fn install_line(&self) -> Option<&str> {
        Some("npm install -g @google/gemini-cli")
    }

    fn pass_env(&self) -> Vec<&str> {
        super::with_network_env(ENV)
    }

    fn home_state(&self) -> &[&str] {
        &[".gemini"]
    }

    fn instructions_file(&self) -> &str {
        "GEMINI.md"
    }

    fn api_hosts(&self) -> Vec<String> {
        ["generativelanguage.googleapis.com", "cloudcode-pa.googleapis.com", "oauth2.googleapis.com"]
            .map(String::from)
            .to_vec()
    }

    fn broker(&self) -> Option<&'static super::BrokerVars> {
        Some(&BROKER)
    }

    fn argv(&self, input: &AdapterInput<'_>) -> Vec<String> {
        argv(input)
    }

    fn parse(&self, text: &str, outcome: Outcome, _io: &Path) -> Option<AgentOutput> {
        Some(parse(text, outcome))
    }
}

/// Its base URL and keys (sent as `x-goog-api-key`).
pub static BROKER: super::BrokerVars = super::BrokerVars {
    base_var: "GOOGLE_GEMINI_BASE_URL",
    default_base: "https://generativelanguage.googleapis.com",
    keys: &[("GEMINI_API_KEY", "x-goog-api-key", false), ("GOOGLE_API_KEY", "x-goog-api-key", false)],
};

/// Variables Gemini CLI gets: its keys, endpoint, model and the Vertex
/// settings.
pub const ENV: &[&str] = &[
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GOOGLE_GEMINI_BASE_URL",
    "GEMINI_MODEL",
    "GOOGLE_CLOUD_PROJECT",
    "GOOGLE_CLOUD_LOCATION",
    "GOOGLE_GENAI_USE_VERTEXAI",
    "GOOGLE_APPLICATION_CREDENTIALS",
];

fn argv(input: &AdapterInput<'_>) -> Vec<String> {
    let mut argv: Vec<String> =
        ["gemini", "--output-format", "json", "--skip-trust"].iter().map(|s| (*s).to_owned()).collect();
    match input.sandbox {
        // Read-only: the default mode offers no write tool.
        _ if input.read_only_kind => {}
        SandboxLevel::ReadOnly => {}
        SandboxLevel::WorkspaceWrite => argv.extend(["--approval-mode".to_owned(), "auto_edit".to_owned()]),
        SandboxLevel::Full => argv.push("--yolo".to_owned()),
    }
    // The flag wins over `GEMINI_MODEL`.
    argv.extend(super::adapter::model_flag(input.model));
    argv
}

/// Parses `{session_id, response, stats}` or `{error: {type, message, code}}`.
fn parse(text: &str, outcome: Outcome) -> AgentOutput {
    let objects = json_objects(text);
    let result = objects.iter().rev().find(|v| v.get("response").is_some() || v.get("error").is_some());
    let code = exit_code(outcome);
    let mut out = AgentOutput::default();
    if let Some(v) = result {
        if let Some(err) = v.get("error").filter(|e| e.is_object()) {
            let message = err["message"].as_str().unwrap_or("unknown error").to_owned();
            let kind = kind_of(code, &message, err["type"].as_str().unwrap_or(""));
            return AgentOutput::error(kind, message);
        }
        out.summary = v["response"].as_str().map(str::to_owned);
        let stats = &v["stats"];
        if let Some(models) = stats["models"].as_object() {
            let (mut tin, mut tout, mut turns) = (0u64, 0u64, 0u64);
            for m in models.values() {
                tin += m["tokens"]["input"].as_u64().or(m["tokens"]["prompt"].as_u64()).unwrap_or(0);
                tout += m["tokens"]["candidates"].as_u64().unwrap_or(0);
                turns += m["roles"]["main"]["totalRequests"].as_u64().unwrap_or(0);
            }
            out.tokens_in = Some(tin);
            out.tokens_out = Some(tout);
            if turns > 0 {
                out.turns = Some(turns as u32);
            }
        }
        let failed = stats["tools"]["totalFail"].as_u64().unwrap_or(0);
        out.success = Some(code == Some(0) && failed == 0);
        if failed > 0 {
            // Gemini exits 0 after a failed tool call: a failure signal.
            let names: Vec<String> = stats["tools"]["byName"]
                .as_object()
                .map(|m| {
                    m.iter().filter(|(_, t)| t["fail"].as_u64().unwrap_or(0) > 0).map(|(n, _)| n.clone()).collect()
                })
                .unwrap_or_default();
            out.error = Some(AgentError {
                kind: ErrorKind::ToolFailed,
                message: format!("{failed} tool call(s) failed ({})", names.join(", ")),
            });
        }
        return out;
    }
    match code {
        Some(0) | None => out,
        Some(c) => AgentOutput::error(kind_of(Some(c), "", ""), format!("gemini exited with code {c}")),
    }
}

fn kind_of(code: Option<i32>, message: &str, ty: &str) -> ErrorKind {
    match code {
        Some(173) => ErrorKind::RateLimited,            // 429
        Some(247 | 244 | 246) => ErrorKind::Overloaded, // 503, 500, 502
        Some(145 | 144 | 147 | 41) => ErrorKind::Auth,  // 401, 400 API_KEY_INVALID, 403, no auth
        Some(53) => ErrorKind::TurnCap,
        _ if ty.contains("TurnLimited") => ErrorKind::TurnCap,
        _ => classify(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_success_with_stats() {
        let text = "Warning: 256-color support not detected\n{\n  \"session_id\": \"s\",\n  \"response\": \"Wrote hello.txt\",\n  \"stats\": {\"models\": {\"r\": {\"tokens\": {\"input\": 100, \"candidates\": 20}, \"roles\": {\"utility_router\": {}}}, \"m\": {\"tokens\": {\"input\": 200, \"candidates\": 40}, \"roles\": {\"main\": {\"totalRequests\": 2}}}}, \"tools\": {\"totalCalls\": 1, \"totalFail\": 0}}\n}\n";
        let out = parse(text, Outcome::Exited(0));
        assert_eq!(out.summary.as_deref(), Some("Wrote hello.txt"));
        assert_eq!((out.tokens_in, out.tokens_out, out.turns), (Some(300), Some(60), Some(2)));
        assert_eq!(out.success, Some(true));
    }

    #[test]
    fn a_failed_tool_call_is_a_failure_despite_exit_0() {
        let text = "{\"response\": \"done\", \"stats\": {\"tools\": {\"totalFail\": 1, \"byName\": {\"write_file\": {\"fail\": 1}}}}}\n";
        let out = parse(text, Outcome::Exited(0));
        assert_eq!(out.success, Some(false));
        let e = out.error.unwrap();
        assert_eq!(e.kind, ErrorKind::ToolFailed);
        assert!(e.message.contains("write_file"));
    }

    #[test]
    fn api_errors_by_exit_code() {
        for (code, kind) in [
            (173, ErrorKind::RateLimited),
            (247, ErrorKind::Overloaded),
            (145, ErrorKind::Auth),
            (53, ErrorKind::TurnCap),
        ] {
            let text = format!(
                "at x (y.js:1)\n{{\"session_id\": \"s\", \"error\": {{\"type\": \"Error\", \"message\": \"m\", \"code\": {code}}}}}\n"
            );
            assert_eq!(parse(&text, Outcome::Exited(code)).error.unwrap().kind, kind, "{code}");
        }
    }
}
