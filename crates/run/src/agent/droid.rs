//! Factory Droid (`droid exec -o stream-json`): JSONL events; its autonomy
//! levels are not a sandbox (Landlock is).

use std::path::Path;

use super::Agent;
use super::adapter::{AdapterInput, AgentError, AgentOutput, ErrorKind, classify, exit_code, json_objects};
use cassist_core::spec::SandboxLevel;
use cassist_sandbox::process::Outcome;

/// Factory Droid.
#[derive(Debug)]
pub struct Droid;

impl Agent for Droid {
    fn name(&self) -> &str {
        "droid"
    }

    fn program(&self) -> &str {
        "droid"
    }

    fn install_line(&self) -> Option<&str> {
        Some("npm install -g droid")
    }

    fn pass_env(&self) -> Vec<&str> {
        super::with_network_env(ENV)
    }

    fn api_hosts(&self) -> Vec<String> {
        ["api.factory.ai", "app.factory.ai"].map(String::from).to_vec()
    }

    fn extra_env(&self, model: Option<&str>) -> Vec<(String, String)> {
        extra_env(model)
    }

    fn home_state(&self) -> &[&str] {
        &[".factory"]
    }

    fn argv(&self, input: &AdapterInput<'_>) -> Vec<String> {
        argv(input)
    }

    fn parse(&self, text: &str, outcome: Outcome, _io: &Path) -> Option<AgentOutput> {
        Some(parse(text, outcome))
    }
}

/// Variables Droid gets: its key and the air-gap switch.
pub const ENV: &[&str] = &["FACTORY_API_KEY", "FACTORY_AIRGAP_ENABLED"];

/// The custom model to use when there is no Factory key: the first
/// `customModels` entry of `~/.factory/settings.json` (bring your own key).
pub fn custom_model() -> Option<String> {
    if std::env::var_os("FACTORY_API_KEY").is_some() {
        return None;
    }
    let path = super::adapter::home_path(".factory/settings.json")?;
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    v["customModels"].as_array()?.first()?["model"].as_str().map(|m| format!("custom:{m}"))
}

fn argv(input: &AdapterInput<'_>) -> Vec<String> {
    let mut argv: Vec<String> =
        ["droid", "exec", "-o", "stream-json", "--cwd"].iter().map(|s| (*s).to_owned()).collect();
    argv.push(input.workdir.display().to_string());
    argv.push("-f".to_owned());
    argv.push(input.prompt_file.display().to_string());
    match input.sandbox {
        _ if input.read_only_kind => {}
        SandboxLevel::ReadOnly => {}
        SandboxLevel::WorkspaceWrite => argv.extend(["--auto".to_owned(), "low".to_owned()]),
        SandboxLevel::Full => argv.push("--skip-permissions-unsafe".to_owned()),
    }
    // The model asked for, else (no Factory key) the first custom model.
    argv.extend(super::adapter::model_flag(input.model.map(str::to_owned).or_else(custom_model).as_deref()));
    argv
}

/// Extra variables: no calls home with a custom model (airgap), the one
/// asked for (`custom:<model>`) or the one used without a Factory key.
pub fn extra_env(model: Option<&str>) -> Vec<(String, String)> {
    let custom = match model {
        Some(m) => m.starts_with("custom:"),
        None => custom_model().is_some(),
    };
    if custom { vec![("FACTORY_AIRGAP_ENABLED".into(), "1".into())] } else { Vec::new() }
}

/// Parses the stream-json events: `completion{finalText, numTurns, usage}`,
/// `error{source, message}`, or a `result` object.
fn parse(text: &str, outcome: Outcome) -> AgentOutput {
    let mut out = AgentOutput::default();
    let mut errors: Vec<String> = Vec::new();
    let mut failure_result: Option<String> = None;
    for v in json_objects(text) {
        match v["type"].as_str().unwrap_or("") {
            "completion" => {
                out.summary = v["finalText"].as_str().map(str::to_owned);
                out.turns = v["numTurns"].as_u64().map(|n| n as u32);
                out.tokens_in = v["usage"]["input_tokens"].as_u64();
                out.tokens_out = v["usage"]["output_tokens"].as_u64();
            }
            "message" if v["role"] == "assistant" => {
                if let Some(t) = v["text"].as_str() {
                    out.summary = Some(t.to_owned());
                }
            }
            "error" => {
                if let Some(m) = v["message"].as_str() {
                    errors.push(m.to_owned());
                }
            }
            "result" => {
                if v["is_error"].as_bool() == Some(true) {
                    failure_result = v["result"].as_str().map(str::to_owned);
                } else {
                    out.summary = v["result"].as_str().map(str::to_owned).or(out.summary);
                    out.turns = v["num_turns"].as_u64().map(|n| n as u32).or(out.turns);
                    out.tokens_in = v["usage"]["input_tokens"].as_u64().or(out.tokens_in);
                    out.tokens_out = v["usage"]["output_tokens"].as_u64().or(out.tokens_out);
                }
            }
            _ => {}
        }
    }
    // The most specific error: the agent loop's (`<status> <body>`) before
    // the CLI's "Exec failed".
    let message = errors
        .iter()
        .find(|m| !m.contains("Exec failed"))
        .cloned()
        .or(failure_result)
        .or_else(|| errors.first().cloned());
    if let Some(message) = message
        && exit_code(outcome) != Some(0)
    {
        let kind =
            if message.contains("insufficient permission") { ErrorKind::PermissionDenied } else { classify(&message) };
        return AgentOutput { error: Some(AgentError { kind, message }), success: Some(false), ..out };
    }
    out.success = Some(exit_code(outcome) == Some(0));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_completion() {
        let text = r#"{"type":"system","subtype":"init","cwd":"/p"}
{"type":"tool_call","toolName":"Create"}
{"type":"message","role":"assistant","text":"Wrote src/calc.py."}
{"type":"completion","finalText":"Wrote src/calc.py.","numTurns":2,"usage":{"input_tokens":200,"output_tokens":40}}
"#;
        let out = parse(text, Outcome::Exited(0));
        assert_eq!(out.summary.as_deref(), Some("Wrote src/calc.py."));
        assert_eq!((out.turns, out.tokens_in, out.tokens_out), (Some(2), Some(200), Some(40)));
        assert_eq!(out.success, Some(true));
    }

    #[test]
    fn maps_api_errors_from_the_agent_loop() {
        for (status, kind) in
            [("401", ErrorKind::Auth), ("429", ErrorKind::RateLimited), ("529", ErrorKind::Overloaded)]
        {
            let text = format!(
                "{{\"type\":\"error\",\"source\":\"agent_loop\",\"message\":\"{status} {{\\\"type\\\":\\\"error\\\"}}\"}}\n{{\"type\":\"error\",\"source\":\"cli\",\"message\":\"Exec failed\"}}\n"
            );
            assert_eq!(parse(&text, Outcome::Exited(1)).error.unwrap().kind, kind, "{status}");
        }
    }
}
