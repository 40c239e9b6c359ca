//! Claude Code (`claude -p --output-format json`): one JSON result object;
//! it exits 0 with `permission_denials` when writes were refused.

use std::path::Path;

use super::Agent;
use super::adapter::{AdapterInput, AgentError, AgentOutput, ErrorKind, classify, exit_code, json_objects, model_flag};
use cassist_core::spec::SandboxLevel;
use cassist_sandbox::process::Outcome;

/// Claude Code.
#[derive(Debug)]
pub struct Claude;

impl Agent for Claude {
    fn name(&self) -> &str {
        "claude"
    }

    fn program(&self) -> &str {
        "claude"
    }

    fn install_line(&self) -> Option<&str> {
        Some("npm install -g @anthropic-ai/claude-code")
    }

    fn pass_env(&self) -> Vec<&str> {
        super::with_network_env(ENV)
    }

    fn extra_env(&self, _model: Option<&str>) -> Vec<(String, String)> {
        EXTRA_ENV.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn state_vars(&self) -> &[&str] {
        &["CLAUDE_CONFIG_DIR"]
    }

    fn home_state(&self) -> &[&str] {
        &[".claude"]
    }

    fn home_state_files(&self) -> &[&str] {
        &[".claude.json"]
    }

    fn instructions_file(&self) -> &str {
        "CLAUDE.md"
    }

    fn api_hosts(&self) -> Vec<String> {
        vec!["api.anthropic.com".into(), "console.anthropic.com".into(), "claude.ai".into()]
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

/// Variables Claude Code gets: its keys, endpoints, config folder and the
/// Bedrock and Vertex switches.
pub const ENV: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_MODEL",
    "CLAUDE_CONFIG_DIR",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "CLAUDE_CODE_MAX_RETRIES",
    "AWS_REGION",
    "AWS_PROFILE",
    "ANTHROPIC_VERTEX_PROJECT_ID",
    "CLOUD_ML_REGION",
];

/// Its base URL and keys (an API key as `x-api-key`, a token as
/// `Bearer`).
pub static BROKER: super::BrokerVars = super::BrokerVars {
    base_var: "ANTHROPIC_BASE_URL",
    default_base: "https://api.anthropic.com",
    keys: &[("ANTHROPIC_API_KEY", "x-api-key", false), ("ANTHROPIC_AUTH_TOKEN", "authorization", true)],
};

/// Set for every run: Claude Code otherwise calls home (telemetry, an MCP
/// registry) even with a custom base URL.
pub const EXTRA_ENV: &[(&str, &str)] = &[("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")];

fn argv(input: &AdapterInput<'_>) -> Vec<String> {
    let mut argv: Vec<String> = ["claude", "-p", "--output-format", "json"].iter().map(|s| (*s).to_owned()).collect();
    let read_only = input.read_only_kind || input.sandbox == SandboxLevel::ReadOnly;
    if read_only {
        // Only read/search tools are offered; dontAsk denies the rest.
        argv.extend(["--permission-mode", "dontAsk", "--tools", "Read,Glob,Grep"].iter().map(|s| (*s).to_owned()));
    } else if input.sandbox == SandboxLevel::Full {
        argv.extend(["--permission-mode", "bypassPermissions"].iter().map(|s| (*s).to_owned()));
    } else {
        argv.extend(["--permission-mode", "acceptEdits"].iter().map(|s| (*s).to_owned()));
    }
    if let Some(n) = input.max_turns {
        argv.extend(["--max-turns".to_owned(), n.to_string()]);
    }
    if let Some(c) = input.max_cost {
        argv.extend(["--max-budget-usd".to_owned(), format!("{c}")]);
    }
    argv.extend(model_flag(input.model));
    argv
}

/// Parses `{type: "result", subtype, is_error, result, num_turns, usage,
/// total_cost_usd, permission_denials}`.
fn parse(text: &str, outcome: Outcome) -> AgentOutput {
    let objects = json_objects(text);
    let Some(v) = objects.iter().rev().find(|v| v.get("subtype").is_some() || v["type"] == "result") else {
        return match exit_code(outcome) {
            Some(0) | None => AgentOutput::default(),
            Some(c) => AgentOutput::error(classify(text), format!("claude exited with code {c}")),
        };
    };
    let mut out = AgentOutput {
        summary: v["result"].as_str().map(str::to_owned),
        turns: v["num_turns"].as_u64().map(|n| n as u32),
        cost_usd: v["total_cost_usd"].as_f64(),
        ..AgentOutput::default()
    };
    let usage = &v["usage"];
    if usage.is_object() {
        out.tokens_in = Some(
            usage["input_tokens"].as_u64().unwrap_or(0)
                + usage["cache_read_input_tokens"].as_u64().unwrap_or(0)
                + usage["cache_creation_input_tokens"].as_u64().unwrap_or(0),
        );
        out.tokens_out = usage["output_tokens"].as_u64();
    }
    let subtype = v["subtype"].as_str().unwrap_or("");
    let is_error = v["is_error"].as_bool().unwrap_or(false);
    let message = out.summary.clone().unwrap_or_else(|| subtype.to_owned());
    let kind = match subtype {
        "error_max_turns" => Some(ErrorKind::TurnCap),
        s if s.starts_with("error_max_budget") => Some(ErrorKind::BudgetExceeded),
        _ if is_error => Some(match v["api_error_status"].as_u64() {
            Some(429) => ErrorKind::RateLimited,
            Some(500..=599) => ErrorKind::Overloaded,
            Some(401 | 403) => ErrorKind::Auth,
            _ => classify(&message),
        }),
        _ => None,
    };
    if let Some(kind) = kind {
        out.success = Some(false);
        out.error = Some(AgentError { kind, message });
        return out;
    }
    // Exit 0 with refused tool calls is a failure signal.
    if let Some(denials) = v["permission_denials"].as_array().filter(|d| !d.is_empty()) {
        let tools: Vec<&str> = denials.iter().filter_map(|d| d["tool_name"].as_str()).collect();
        out.success = Some(false);
        out.error = Some(AgentError {
            kind: ErrorKind::PermissionDenied,
            message: format!("tool calls were denied: {}", tools.join(", ")),
        });
        return out;
    }
    out.success = Some(exit_code(outcome) == Some(0));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(extra: &str) -> String {
        format!(
            "{{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"Wrote src/calc.py.\",\"num_turns\":2,\"usage\":{{\"input_tokens\":200,\"output_tokens\":40}},\"total_cost_usd\":0.002,\"permission_denials\":[]{extra}}}\n"
        )
    }

    #[test]
    fn parses_success() {
        let out = parse(&result(""), Outcome::Exited(0));
        assert_eq!(out.summary.as_deref(), Some("Wrote src/calc.py."));
        assert_eq!(
            (out.turns, out.tokens_in, out.tokens_out, out.cost_usd),
            (Some(2), Some(200), Some(40), Some(0.002))
        );
        assert_eq!(out.success, Some(true));
    }

    #[test]
    fn permission_denials_are_a_failure_despite_exit_0() {
        let text =
            result("").replace("\"permission_denials\":[]", "\"permission_denials\":[{\"tool_name\":\"Write\"}]");
        let out = parse(&text, Outcome::Exited(0));
        assert_eq!(out.error.unwrap().kind, ErrorKind::PermissionDenied);
    }

    #[test]
    fn maps_errors() {
        let cases = [
            ("\"subtype\":\"error_max_turns\",\"is_error\":true", ErrorKind::TurnCap),
            ("\"subtype\":\"error_max_budget_usd\",\"is_error\":true", ErrorKind::BudgetExceeded),
            ("\"subtype\":\"success\",\"is_error\":true,\"api_error_status\":529", ErrorKind::Overloaded),
            ("\"subtype\":\"success\",\"is_error\":true,\"api_error_status\":429", ErrorKind::RateLimited),
            ("\"subtype\":\"success\",\"is_error\":true,\"api_error_status\":401", ErrorKind::Auth),
        ];
        for (fields, kind) in cases {
            let text = format!("{{\"type\":\"result\",{fields},\"result\":\"API Error\"}}\n");
            assert_eq!(parse(&text, Outcome::Exited(1)).error.unwrap().kind, kind, "{fields}");
        }
    }

    #[test]
    fn read_only_offers_read_tools_only() {
        let d = std::path::Path::new("/w");
        let input = AdapterInput {
            sandbox: SandboxLevel::WorkspaceWrite,
            read_only_kind: true,
            max_turns: Some(15),
            max_cost: Some(2.5),
            model: None,
            prompt_file: d,
            workdir: d,
            io_dir: d,
            userns: true,
        };
        let a = argv(&input).join(" ");
        assert!(a.contains("--permission-mode dontAsk --tools Read,Glob,Grep"), "{a}");
        assert!(a.contains("--max-turns 15") && a.contains("--max-budget-usd 2.5"), "{a}");
    }
}
