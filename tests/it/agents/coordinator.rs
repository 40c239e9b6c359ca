//! `cassist mcp` with real coordinators (issue 16): the pinned Claude Code,
//! driven by a scripted model server, calls `dispatch_subagent` and
//! `run_tasks` as a model would; the sub-agents are a fixture agent and the
//! real Claude Code on a server of its own. And the README's registration
//! snippets, each checked with the CLI's own `mcp list`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use super::{CASSIST_KDL, Server, cli_dir};
use crate::support::{CASSIST, Project, Test, repo, wait_with_limit, write};

/// The text of every `tool_result` block of the last user message of a
/// model request, with the name of the tool it answers.
fn tool_results(body: &Value) -> Vec<(String, String)> {
    let msgs = body["messages"].as_array().cloned().unwrap_or_default();
    let names: std::collections::HashMap<String, String> = msgs
        .iter()
        .filter(|m| m["role"] == "assistant")
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "tool_use")
        .map(|b| (b["id"].as_str().unwrap_or("").to_owned(), b["name"].as_str().unwrap_or("").to_owned()))
        .collect();
    let Some(last) = msgs.iter().rev().find(|m| m["role"] == "user") else { return Vec::new() };
    last["content"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter(|b| b["type"] == "tool_result")
        .map(|b| {
            let text = match &b["content"] {
                Value::String(s) => s.clone(),
                Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join("\n"),
                other => other.to_string(),
            };
            (names.get(b["tool_use_id"].as_str().unwrap_or("")).cloned().unwrap_or_default(), text)
        })
        .collect()
}

#[test]
fn claude_code_coordinates_sub_agents_through_cassist_mcp() {
    let Some(bin) = cli_dir("claude") else { return };
    // The sub-agent that is a real CLI: Claude Code again, against a server
    // of its own (a review: read-only, its final message is its summary).
    let sub = Server::start("anthropic", &json!([{"text": "Reviewed: add() returns a - b, so it subtracts."}]));
    // The coordinator's model: a dispatch, a run of an inline task, an
    // answer.
    let script = json!([
        {"tool": "mcp__cassist__dispatch_subagent",
         "input": {"agent_type": "explore", "task": "What does add() in src/calc.py do?", "context": ["src/calc.py"]}},
        {"tool": "mcp__cassist__run_tasks",
         "input": {"tasks": [{"name": "look", "goal": "Review src/calc.py: is add() right?", "kind": "review", "agent": "claude"}]}},
        {"text": "Both sub-agents found that add() subtracts."}
    ]);
    let dump = std::ffi::OsString::from("--dump");
    let coordinator_dir = tempfile::tempdir().unwrap();
    let dump_dir = coordinator_dir.path().join("dump");
    let coordinator = Server::start_with("anthropic", &script, &[&dump, dump_dir.as_os_str()]);
    let p = Test::new()
        .outside_tmp()
        .config(CASSIST_KDL)
        .agent("explorer", "summarize.sh", &[], &["FAKE_SUMMARY"])
        .kdl("defaults { agent \"explorer\" }\n")
        .file("src/calc.py", "def add(a, b):\n    return a - b\n")
        .git()
        .build();
    let before = p.tree();
    // As a user would register it (README), with the sub-agents' variables.
    let config = json!({"mcpServers": {"cassist": {
        "type": "stdio",
        "command": CASSIST,
        "args": ["mcp"],
        "env": {
            "ANTHROPIC_BASE_URL": sub.url(),
            "ANTHROPIC_API_KEY": "test-key",
            "FAKE_SUMMARY": "explorer: add() in src/calc.py subtracts b from a",
        },
    }}});
    let config_file = p.out().join("mcp.json");
    write(&config_file, config.to_string());
    let mut child = Command::new(bin.join("claude"))
        .args(["-p", "--output-format", "json", "--max-turns", "6", "--strict-mcp-config", "--mcp-config"])
        .arg(&config_file)
        .args(["--allowedTools", "mcp__cassist__dispatch_subagent,mcp__cassist__run_tasks"])
        .current_dir(p.path())
        .env_clear()
        .env("HOME", p.home())
        .env("TMPDIR", p.tmp())
        .env("PATH", std::env::join_paths([bin.as_path(), Path::new("/usr/bin"), Path::new("/bin")]).unwrap())
        .env("ANTHROPIC_BASE_URL", coordinator.url())
        .env("ANTHROPIC_API_KEY", "test-key")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("CASSIST_SHARED_STATE", p.out())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("claude");
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"Find out whether add() in src/calc.py is right; use your sub-agents.\n").unwrap();
    }
    let out = child.stdout.take().unwrap();
    let err = child.stderr.take().unwrap();
    let read = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let (out, err) = (read(Box::new(out)), read(Box::new(err)));
    let status = wait_with_limit(&mut child, Duration::from_secs(240));
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    let log = std::fs::read_to_string(coordinator.dir.path().join("log")).unwrap_or_default();
    assert!(status.success(), "claude: {status}\n{out}\n{err}\ncoordinator's server:\n{log}");
    let result: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(result["result"], "Both sub-agents found that add() subtracts.", "{result}");
    assert_eq!(result["permission_denials"], json!([]), "{result}");

    // What the coordinator's model was sent back: the sub-agents' results.
    let bodies: Vec<Value> =
        dumped_in(&dump_dir).into_iter().map(|d| d["body"].clone()).filter(|b| b["tools"].is_array()).collect();
    assert_eq!(bodies.len(), 3, "coordinator's server:\n{log}");
    let offered: Vec<&str> = bodies[0]["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    for tool in ["mcp__cassist__dispatch_subagent", "mcp__cassist__run_tasks", "mcp__cassist__list_tasks"] {
        assert!(offered.contains(&tool), "{tool} not offered: {offered:?}");
    }
    // After the dispatch: the fixture sub-agent's summary, as the result.
    let first = tool_results(&bodies[1]);
    assert_eq!(
        first,
        [(
            "mcp__cassist__dispatch_subagent".to_owned(),
            "explorer: add() in src/calc.py subtracts b from a".to_owned()
        )],
        "{:#}",
        bodies[1]["messages"]
    );
    // After run_tasks: the real Claude Code's review, passed.
    let second = tool_results(&bodies[2]);
    assert_eq!(second.len(), 1, "{second:?}");
    assert_eq!(second[0].0, "mcp__cassist__run_tasks");
    let ran: Value = serde_json::from_str(&second[0].1).unwrap_or_else(|e| panic!("{e}: {}", second[0].1));
    assert_eq!(ran["tasks"][0]["name"], "look", "{ran}");
    assert_eq!(ran["tasks"][0]["state"], "passed", "{ran}");
    assert_eq!(ran["tasks"][0]["summary"], "Reviewed: add() returns a - b, so it subtracts.", "{ran}");
    // The real CLI ran once, on its own server.
    let sub_log = std::fs::read_to_string(sub.dir.path().join("log")).unwrap_or_default();
    let sub_main = sub_log.lines().filter(|l| l.contains("\"main\": true")).count();
    assert_eq!(sub_main, 1, "sub-agent's server:\n{sub_log}");

    // Read-only sub-agents: the tree is as it was; inline tasks are not
    // in cassist.lock.
    let mut after = p.tree();
    if let Some(lock) = after.remove(Path::new("cassist.lock")) {
        let lock = String::from_utf8_lossy(&lock);
        assert!(!lock.contains("look") && !lock.contains("mcp-"), "{lock}");
    }
    crate::support::assert_same_tree(&after, &before, "the sub-agents changed the tree");
}

/// The request bodies dumped into `dir`, in order.
fn dumped_in(dir: &Path) -> Vec<Value> {
    let mut files: Vec<_> = std::fs::read_dir(dir).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    files.sort();
    files.iter().map(|f| serde_json::from_slice(&std::fs::read(f).unwrap()).unwrap()).collect()
}

/// The code block after `<!-- mcp-snippet: NAME -->` in README.md.
fn snippet(readme: &str, name: &str) -> String {
    let marker = format!("<!-- mcp-snippet: {name} -->");
    let at = readme.find(&marker).unwrap_or_else(|| panic!("README.md has no {marker}"));
    let rest = &readme[at + marker.len()..];
    let fence = rest.find("```").unwrap();
    let body = &rest[fence..];
    let start = body.find('\n').unwrap() + 1;
    let end = body[start..].find("```").unwrap();
    body[start..start + end].to_owned()
}

/// Runs a CLI's listing command in `p` with a HOME and TMPDIR of its own
/// and `cassist` on PATH; its stdout and stderr together.
fn listing(p: &Project, bin: &Path, argv: &[&str], env: &[(&str, &str)]) -> String {
    let cassist_dir = Path::new(CASSIST).parent().unwrap();
    let path = std::env::join_paths([bin, cassist_dir, Path::new("/usr/bin"), Path::new("/bin")]).unwrap();
    let mut cmd = Command::new(bin.join(argv[0]));
    cmd.args(&argv[1..])
        .current_dir(p.path())
        .env_clear()
        .env("HOME", p.home())
        .env("TMPDIR", p.tmp())
        .env("PATH", path)
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .envs(env.iter().copied())
        .stdin(Stdio::null());
    let out = cmd.output().expect(argv[0]);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{argv:?}: {}\n{text}", out.status);
    text
}

#[test]
fn the_readme_registration_snippets_are_accepted_by_each_cli() {
    let (Some(claude), Some(codex), Some(gemini)) = (cli_dir("claude"), cli_dir("codex"), cli_dir("gemini")) else {
        return;
    };
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let project = || Test::new().outside_tmp().config(CASSIST_KDL).file("src/a.txt", "a\n").git().build();

    // Claude Code: the `claude mcp add` line, run as written...
    let p = project();
    let add = snippet(&readme, "claude-add");
    let argv: Vec<&str> = add.split_whitespace().collect();
    listing(&p, &claude, &argv, &[]);
    let mcp_json: Value = serde_json::from_str(&p.read(".mcp.json")).unwrap();
    assert_eq!(mcp_json["mcpServers"]["cassist"]["args"], json!(["mcp"]), "{mcp_json}");
    // ...and the `.mcp.json` as written, approved ahead as the README says.
    let p = project();
    p.file(".mcp.json", snippet(&readme, "claude-mcp-json"));
    p.file(".claude/settings.local.json", r#"{"enabledMcpjsonServers": ["cassist"]}"#);
    let listed = listing(&p, &claude, &["claude", "mcp", "list"], &[]);
    assert!(listed.contains("cassist: cassist mcp - ✔ Connected"), "{listed}");

    // Codex: ~/.codex/config.toml.
    let p = project();
    write(&p.home().join(".codex/config.toml"), snippet(&readme, "codex-config-toml"));
    let listed = listing(&p, &codex, &["codex", "mcp", "list"], &[]);
    let row = listed.lines().find(|l| l.starts_with("cassist ")).unwrap_or_else(|| panic!("{listed}"));
    let words: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&words[..3], ["cassist", "cassist", "mcp"], "{listed}");
    assert!(words.contains(&"enabled"), "{listed}");

    // Gemini CLI: ~/.gemini/settings.json, in a trusted folder.
    let p = project();
    write(&p.home().join(".gemini/settings.json"), snippet(&readme, "gemini-settings-json"));
    let listed = listing(&p, &gemini, &["gemini", "mcp", "list"], &[("GEMINI_CLI_TRUST_WORKSPACE", "true")]);
    assert!(listed.contains("✓ cassist: cassist mcp (stdio) - Connected"), "{listed}");
}
