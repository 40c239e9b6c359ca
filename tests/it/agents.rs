//! The real agent CLIs through `cassist run` (issue 4's Done means): Claude
//! Code, Codex, Gemini CLI and Droid, each driven offline by a scripted
//! model server of `fixtures/model-server/` on 127.0.0.1, and Landlock
//! tests with fake agents.
//!
//! The CLIs come from `.ci/install-agents.sh` (pinned versions, installed
//! with npm into a cache folder when missing). When it fails (no npm
//! registry), the CLI tests fail, unless `CASSIST_SKIP_AGENT_CLIS=1` is set:
//! then they are skipped, saying so.
//!
//! Each CLI test starts its own server (`python3 fixtures/model-server/
//! <api>.py SCRIPT --log LOG`, on a port of its own), writes the CLI's
//! config into a temporary HOME outside the project, and runs the real
//! `cassist` binary with a cleared environment: PATH (the CLI's bin folder
//! first), HOME, and the CLI's own variables. Calls home are not blocked by
//! a proxy (cassist passes no proxy variables to agents): the CLIs' own
//! switches are relied on (cassist sets `CLAUDE_CODE_DISABLE_NONESSENTIAL_
//! TRAFFIC=1`, passes Codex `--disable plugins -c analytics.enabled=false`,
//! sets `FACTORY_AIRGAP_ENABLED=1` for Droid with a custom model; the Gemini
//! settings switch usage statistics off), and each test checks from the
//! server's log that the model server got exactly the requests expected.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{
    Output, Project, Sandbox, Test, Tree, assert_same_tree, fixtures, outside_temp_dir, run_installer, sandbox_or_skip,
    sh_agent_block, snapshot, strings, write,
};

mod coordinator;

// ---------------------------------------------------------------------------
// The CLIs

/// `cmd → bin folder` from `.ci/install-agents.sh`, or why it failed.
fn installed_clis() -> &'static Result<BTreeMap<String, PathBuf>, String> {
    static CLIS: OnceLock<Result<BTreeMap<String, PathBuf>, String>> = OnceLock::new();
    CLIS.get_or_init(|| run_installer("install-agents.sh"))
}

/// The bin folder of CLI `cmd`; `None` (skip the test) only when the
/// install failed and `CASSIST_SKIP_AGENT_CLIS=1` is set.
fn cli_dir(cmd: &str) -> Option<PathBuf> {
    match installed_clis() {
        Ok(clis) => {
            let dir = clis.get(cmd).unwrap_or_else(|| panic!("install-agents.sh printed no `{cmd}=` line: {clis:?}"));
            assert!(dir.join(cmd).exists(), "{} is missing", dir.join(cmd).display());
            Some(dir.clone())
        }
        Err(e) if std::env::var("CASSIST_SKIP_AGENT_CLIS").is_ok_and(|v| v == "1") => {
            eprintln!("SKIPPED (CASSIST_SKIP_AGENT_CLIS=1): the {cmd} CLI could not be installed: {e}");
            None
        }
        Err(e) => panic!(
            "the agent CLIs could not be installed, so the end-to-end agent tests cannot run \
             (set CASSIST_SKIP_AGENT_CLIS=1 to skip them):\n{e}"
        ),
    }
}

// ---------------------------------------------------------------------------
// The scripted model servers

/// One `fixtures/model-server/<api>.py`, killed when dropped.
struct Server {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

/// One request in a server's log.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Req {
    method: String,
    path: String,
    /// The script step that answered it.
    step: Option<u64>,
    status: u16,
}

impl Server {
    /// Starts `api` (`anthropic`, `openai` or `gemini`) with `script`.
    fn start(api: &str, script: &Value) -> Server {
        Server::start_with(api, script, &[])
    }

    /// [`Server::start`] with more arguments (`--dump DIR`, say).
    fn start_with(api: &str, script: &Value, args: &[&std::ffi::OsStr]) -> Server {
        let dir = tempfile::Builder::new().prefix("cassist-model-server-").tempdir().unwrap();
        std::fs::write(dir.path().join("script.json"), serde_json::to_vec_pretty(script).unwrap()).unwrap();
        let stdout = std::fs::File::create(dir.path().join("stdout")).unwrap();
        let stderr = std::fs::File::create(dir.path().join("stderr")).unwrap();
        let child = Command::new("python3")
            .arg(fixtures().join("model-server").join(format!("{api}.py")))
            .arg(dir.path().join("script.json"))
            .arg("--log")
            .arg(dir.path().join("log"))
            .args(["--max-seconds", "300"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .expect("python3");
        let mut server = Server { child, port: 0, dir };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let out = std::fs::read_to_string(server.dir.path().join("stdout")).unwrap_or_default();
            if let Some(port) = out.lines().find_map(|l| l.strip_prefix("PORT=")).and_then(|p| p.trim().parse().ok()) {
                server.port = port;
                return server;
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("{api}.py exited ({status}): {}", server.stderr());
            }
            assert!(Instant::now() < deadline, "{api}.py printed no PORT= line: {}", server.stderr());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.authority())
    }

    fn authority(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }

    /// The raw log: JSON lines (anthropic.py) or text lines (the others).
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }

    /// Every request the server got, in order.
    fn requests(&self) -> Vec<Req> {
        let status_re = regex::Regex::new(r" -> (\d{3})\b").unwrap();
        let step_re = regex::Regex::new(r" step=(\d+)").unwrap();
        self.log()
            .lines()
            .map(|line| {
                if let Ok(v) = serde_json::from_str::<Value>(line) {
                    return Req {
                        method: v["method"].as_str().unwrap_or("").to_owned(),
                        path: v["path"].as_str().unwrap_or("").to_owned(),
                        step: v["step"].as_u64(),
                        status: v["status"].as_u64().unwrap_or(0) as u16,
                    };
                }
                // `HH:MM:SS.mmm METHOD PATH ... [-> STATUS]`
                let mut words = line.split_whitespace().skip(1);
                Req {
                    method: words.next().unwrap_or("").to_owned(),
                    path: words.next().unwrap_or("").to_owned(),
                    step: step_re.captures(line).and_then(|c| c[1].parse().ok()),
                    status: status_re.captures(line).and_then(|c| c[1].parse().ok()).unwrap_or(200),
                }
            })
            .collect()
    }

    /// The model requests (POSTs), after checking there was nothing else
    /// but Claude Code's `HEAD /` to the base URL; no call through the
    /// server as a proxy (`CONNECT`), no 404.
    #[track_caller]
    fn model_requests(&self, path: &str) -> Vec<Req> {
        let all = self.requests();
        let (posts, others): (Vec<Req>, Vec<Req>) = all.into_iter().partition(|r| r.method == "POST");
        assert!(others.iter().all(|r| r.method == "HEAD" && r.path == "/"), "unexpected requests: {others:?}");
        assert!(posts.iter().all(|r| r.path == path), "requests other than POST {path}:\n{}", self.log());
        posts
    }

    /// The model each conversation request asked for, in order: Claude
    /// Code's and Droid's requests that offer tools (not their side
    /// requests), Codex's `model` of each request, Gemini's model in the
    /// path of each `streamGenerateContent`.
    fn models(&self) -> Vec<String> {
        let codex = regex::Regex::new(r" POST \S*/responses .*?\bmodel=(\S+)").unwrap();
        let gemini = regex::Regex::new(r" POST /v1beta/models/([^/:\s]+):streamGenerateContent").unwrap();
        self.log()
            .lines()
            .filter_map(|line| match serde_json::from_str::<Value>(line) {
                Ok(v) => (v["main"] == true).then(|| v["model"].as_str().unwrap_or("").to_owned()),
                Err(_) => codex.captures(line).or_else(|| gemini.captures(line)).map(|c| c[1].to_owned()),
            })
            .collect()
    }

    /// The steps the model requests were answered with.
    #[track_caller]
    fn steps(&self, path: &str) -> Vec<u64> {
        self.model_requests(path).iter().map(|r| r.step.unwrap_or(u64::MAX)).collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------
// The four CLIs: their API, their config, their variables

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cli {
    Claude,
    Codex,
    Gemini,
    Droid,
}

/// The model Gemini CLI is pinned to (no router request then).
const GEMINI_MODEL: &str = "gemini-2.5-flash";

impl Cli {
    fn name(self) -> &'static str {
        match self {
            Cli::Claude => "claude",
            Cli::Codex => "codex",
            Cli::Gemini => "gemini",
            Cli::Droid => "droid",
        }
    }

    fn api(self) -> &'static str {
        match self {
            Cli::Claude | Cli::Droid => "anthropic",
            Cli::Codex => "openai",
            Cli::Gemini => "gemini",
        }
    }

    /// The model the CLI asks for when cassist passes no `--model`: its
    /// own default, or what its config says (see [`Cli::configure`]).
    fn default_model(self) -> &'static str {
        match self {
            Cli::Claude => "claude-opus-4-8",
            Cli::Codex => "gpt-5.5",
            Cli::Gemini => GEMINI_MODEL,
            Cli::Droid => "scripted-model",
        }
    }

    /// The path of a model request on the server.
    fn model_path(self) -> String {
        match self {
            Cli::Claude => "/v1/messages?beta=true".into(),
            Cli::Droid => "/v1/messages".into(),
            Cli::Codex => "/v1/responses".into(),
            Cli::Gemini => format!("/v1beta/models/{GEMINI_MODEL}:streamGenerateContent?alt=sse"),
        }
    }

    /// Writes the CLI's config for `server` into `home`; returns the
    /// variables cassist is started with (its allowlist passes them on).
    fn configure(self, server: &Server, home: &Path) -> Vec<(String, String)> {
        let var = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        match self {
            Cli::Claude => vec![var("ANTHROPIC_BASE_URL", &server.url()), var("ANTHROPIC_API_KEY", "test-key")],
            Cli::Codex => {
                // Tables after the top-level keys (see the server's README);
                // no retries, so a 429 fails at once.
                let config = format!(
                    "model = \"gpt-5.5\"\nmodel_provider = \"local\"\n\n[model_providers.local]\nname = \"local\"\n\
                     base_url = \"{}/v1\"\nenv_key = \"OPENAI_API_KEY\"\nwire_api = \"responses\"\n\
                     request_max_retries = 0\nstream_max_retries = 0\n",
                    server.url()
                );
                write(&home.join(".codex/config.toml"), &config);
                // Its config names the server, which it reaches through the
                // sandbox's egress proxy once the user opened it.
                vec![var("OPENAI_API_KEY", "sk-test-key"), var("CASSIST_NETWORK_ALLOW", &server.authority())]
            }
            Cli::Gemini => {
                // maxAttempts 1: a 429 fails at once (GEMINI_MODEL set, so
                // no router request with retries of its own).
                let settings = json!({
                    "security": {"auth": {"selectedType": "gemini-api-key"}},
                    "privacy": {"usageStatisticsEnabled": false},
                    "general": {"maxAttempts": 1},
                });
                write(&home.join(".gemini/settings.json"), settings.to_string());
                vec![
                    var("GEMINI_API_KEY", "test-key"),
                    var("GOOGLE_GEMINI_BASE_URL", &server.url()),
                    var("GEMINI_MODEL", GEMINI_MODEL),
                ]
            }
            Cli::Droid => {
                // A custom model: cassist then passes `-m custom:scripted-model`
                // and sets FACTORY_AIRGAP_ENABLED=1.
                let settings = json!({"customModels": [{
                    "model": "scripted-model", "displayName": "Scripted", "baseUrl": server.url(),
                    "apiKey": "test-key", "provider": "anthropic", "maxOutputTokens": 8192,
                }]});
                write(&home.join(".factory/settings.json"), settings.to_string());
                vec![var("CASSIST_NETWORK_ALLOW", &server.authority())]
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Projects and runs

/// The "make the failing test pass" project (outside the temp folders):
/// `add` subtracts.
fn calc(cassist_kdl: &str, tasks: &str) -> Project {
    Test::new()
        .outside_tmp()
        .config(cassist_kdl)
        .tasks(tasks)
        .file("src/calc.py", "def add(a, b):\n    return a - b\n")
        .file(
            "tests/test_calc.py",
            "import sys\nimport unittest\n\nsys.path.insert(0, \"src\")\nfrom calc import add\n\n\n\
             class TestAdd(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n",
        )
        .git()
        .build()
}

/// `cassist run` with the CLIs' bin folders first on PATH and their
/// variables; whatever it exits with.
fn run_cli(p: &Project, bin_dirs: &[&Path], env: &[(String, String)]) -> Output {
    p.run(&[]).path_first(bin_dirs).envs(env).any_status().exec()
}

/// Every file of the project but cassist's own records (`.cassist/`
/// and `cassist.lock`), with its bytes.
fn tree(p: &Project) -> Tree {
    snapshot(p.path(), &[".cassist", "cassist.lock"])
}

#[track_caller]
fn assert_close(got: &Value, want: f64, what: &str) {
    let g = got.as_f64().unwrap_or_else(|| panic!("{what}: not a number: {got}"));
    assert!((g - want).abs() < 1e-9, "{what}: {g} != {want}");
}

/// `cassist.kdl` of the CLI tests: trusted to write the workspace, no
/// project test command (the task's acceptance decides).
const CASSIST_KDL: &str = "trust \"workspace-write\"\ntest #false\n";

fn fix_task(agent: &str) -> String {
    format!(
        r#"task "fix" {{
    goal "Make the failing test pass: add() in src/calc.py must add."
    agent "{agent}"
    timeout "90s"
    max-iterations 1
    acceptance {{
        run "python3 -m unittest discover -s tests -q"
    }}
}}
"#
    )
}

const REVIEW_TASK: &str = r#"task "look" {
    goal "Review src/calc.py and say what is wrong with add()."
    kind "review"
    agent "AGENT"
    timeout "90s"
    max-iterations 1
}
"#;

// ---------------------------------------------------------------------------
// 1 and 3. "Make the failing test pass", and the parsed JSON output

/// What the agent's final message and usage must be parsed to.
struct Parsed {
    summary: &'static str,
    turns: u64,
    tokens_in: u64,
    tokens_out: u64,
    cost_usd: Option<f64>,
}

/// Runs the fix task on `cli` whose server plays `script` (steps of
/// which the final text is `want.summary`), and checks the task passed,
/// the fix is in the user's tree, uncommitted, and what was parsed.
fn fixes_the_failing_test(cli: Cli, script: Value, want: Parsed) {
    let Some(bin) = cli_dir(cli.name()) else { return };
    let server = Server::start(cli.api(), &script);
    let p = calc(CASSIST_KDL, &fix_task(cli.name()));
    let head = p.git(&["rev-parse", "HEAD"]);
    let env = cli.configure(&server, p.home());
    // cassist asks the CLI its version itself, outside any sandbox, and
    // remembers it; what the CLI writes to say it goes to a HOME of the
    // probe's own.
    let home = p.home_files();
    p.cassist(&["plan"]).path_first(&[&bin]).envs(&env).exec();
    assert_same_tree(&p.home_files(), &home, "asking the CLI its version wrote HOME");
    let done = run_cli(&p, &[&bin], &env);
    done.assert_code(0);
    // What the CLI wrote in its state folders went with the task: with
    // namespaces they are copy-on-write.
    if sandbox_or_skip(Sandbox::Overlay) {
        assert_same_tree(&p.home_files(), &home, "the CLI's state reached HOME");
    }

    let t = done.task("fix");
    assert_eq!(t["state"], "passed", "{}", done.transcript());
    assert_eq!(t["agent"], cli.name());
    assert_eq!(t["attempts"], 1);
    assert_eq!(strings(&t["changed_files"]), ["src/calc.py"]);
    assert_eq!(t["acceptance"][0]["passed"], true, "{t}");
    assert_eq!(t["summary"], want.summary, "the report's summary is the agent's final message");
    match want.cost_usd {
        Some(c) => assert_close(&t["cost_usd"], c, "report cost_usd"),
        None => assert!(t["cost_usd"].is_null(), "{t}"),
    }

    // Integrated into the user's tree, uncommitted.
    assert_eq!(p.read("src/calc.py"), "def add(a, b):\n    return a + b\n");
    assert_eq!(p.git(&["rev-parse", "HEAD"]), head, "cassist must not commit");
    assert_eq!(p.git(&["status", "--porcelain", "--untracked-files=no"]), " M src/calc.py\n");

    // The CLI's JSON output, normalized.
    let parsed = p.agent_json("fix", 1);
    assert_eq!(parsed["summary"], want.summary, "{parsed}");
    assert_eq!(parsed["success"], true, "{parsed}");
    assert!(parsed["error"].is_null(), "{parsed}");
    assert_eq!(parsed["turns"], want.turns, "turns: {parsed}");
    assert_eq!(parsed["tokens_in"], want.tokens_in, "tokens_in: {parsed}");
    assert_eq!(parsed["tokens_out"], want.tokens_out, "tokens_out: {parsed}");
    match want.cost_usd {
        Some(c) => assert_close(&parsed["cost_usd"], c, "agent cost_usd"),
        None => assert!(parsed["cost_usd"].is_null(), "{parsed}"),
    }

    // The server answered each step once, in order, and got nothing else.
    let steps = script.as_array().unwrap().len() as u64;
    assert_eq!(server.steps(&cli.model_path()), (0..steps).collect::<Vec<_>>(), "{}", server.log());
    // No model asked for: no `--model`, the CLI's own default.
    let models = server.models();
    assert_eq!(models, vec![cli.default_model(); steps as usize], "{}", server.log());
}

#[test]
fn claude_fixes_the_failing_test_with_read_and_edit() {
    // 100/20 tokens for the two tool responses, 1000/50 for the last:
    // Claude's price list for its default model (claude-opus-4-8, $5/M in,
    // $25/M out) makes 1200 · 5e-6 + 90 · 25e-6 = 0.00825.
    let script = json!([
        {"tool": "Read", "input": {"file_path": "{cwd}/src/calc.py"}},
        {"tool": "Edit", "input": {"file_path": "{cwd}/src/calc.py", "old_string": "a - b", "new_string": "a + b"}},
        {"text": "Fixed add(): it subtracted.", "usage": {"input_tokens": 1000, "output_tokens": 50}},
    ]);
    let want = Parsed {
        summary: "Fixed add(): it subtracted.",
        turns: 3,
        tokens_in: 1200,
        tokens_out: 90,
        cost_usd: Some(0.00825),
    };
    fixes_the_failing_test(Cli::Claude, script, want);
}

#[test]
fn codex_fixes_the_failing_test_with_apply_patch() {
    let patch = "*** Begin Patch\n*** Update File: {cwd}/src/calc.py\n@@\n def add(a, b):\n-    return a - b\n+    return a + b\n*** End Patch\n";
    let script = json!([
        {"tool": "apply_patch", "input": patch},
        {"text": "Patched add() to add.", "usage": {"input": 1000, "output": 50}},
    ]);
    // Codex reports no turn count: `turns` is its number of `turn.started`
    // events (one per `codex exec`), not of model requests (2 here). Usage is
    // the sum over the turn's requests; no cost.
    let want = Parsed { summary: "Patched add() to add.", turns: 1, tokens_in: 1100, tokens_out: 70, cost_usd: None };
    fixes_the_failing_test(Cli::Codex, script, want);
}

#[test]
fn gemini_fixes_the_failing_test_with_replace() {
    let script = json!([
        {"tool": "replace", "input": {
            "file_path": "{cwd}/src/calc.py", "instruction": "Make add() add.",
            "old_string": "a - b", "new_string": "a + b"}},
        {"text": "Replaced a - b with a + b.", "usage": {"input": 1000, "output": 50}},
    ]);
    let want =
        Parsed { summary: "Replaced a - b with a + b.", turns: 2, tokens_in: 1100, tokens_out: 70, cost_usd: None };
    fixes_the_failing_test(Cli::Gemini, script, want);
}

#[test]
fn droid_fixes_the_failing_test_with_edit() {
    let script = json!([
        {"tool": "Edit", "input": {"file_path": "{cwd}/src/calc.py", "old_str": "a - b", "new_str": "a + b"}},
        {"text": "Edited add() to add.", "usage": {"input_tokens": 1000, "output_tokens": 50}},
    ]);
    // Droid reports no cost (`factory_credits: 0`).
    let want = Parsed { summary: "Edited add() to add.", turns: 2, tokens_in: 1100, tokens_out: 70, cost_usd: None };
    fixes_the_failing_test(Cli::Droid, script, want);
}

// ---------------------------------------------------------------------------
// The key stays outside: the CLI gets the egress proxy as its API's base URL
// and a placeholder key; the proxy adds the real key to what it forwards.

/// Runs the fix task on `cli` with its real key `key` in cassist's
/// environment, the server refusing any other key; `before` are script
/// steps before the fix (a shell tool printing what the CLI sees). The
/// task passes, every request the server got carried the real key (else
/// it would have answered 401), and neither the CLI's requests nor
/// anything cassist kept holds it. Returns the dumped request bodies.
fn the_key_stays_outside(cli: Cli, key_var: &str, before: Vec<Value>, edit: Value) -> String {
    let key = crate::support::unique_marker("real-key");
    let dump = tempfile::tempdir().unwrap();
    let mut steps = before;
    steps.push(edit);
    steps.push(json!({"text": "Fixed."}));
    let script = Value::Array(steps);
    let server = Server::start_with(
        cli.api(),
        &script,
        &["--api-key".as_ref(), key.as_ref(), "--dump".as_ref(), dump.path().as_os_str()],
    );
    let bin = cli_dir(cli.name()).expect("checked by the caller");
    let p = calc(CASSIST_KDL, &fix_task(cli.name()));
    let mut env = cli.configure(&server, p.home());
    if cli == Cli::Claude {
        // Its shell, without asking.
        write(&p.home().join(".claude/settings.json"), json!({"permissions": {"allow": ["Bash"]}}).to_string());
    }
    for (k, v) in env.iter_mut() {
        if k == key_var {
            *v = key.clone();
        }
    }
    let done = run_cli(&p, &[&bin], &env);
    assert_eq!(done.task("fix")["state"], "passed", "{}\n{}", done.transcript(), server.log());
    let requests = server.requests();
    assert!(!requests.is_empty());
    assert!(requests.iter().all(|r| r.status != 401), "a request came without the real key: {}", server.log());
    // The dumps: a request body (gemini.py), or its path, headers and
    // body (anthropic.py): the headers carry the key the proxy added.
    let mut bodies = String::new();
    for f in std::fs::read_dir(dump.path()).unwrap() {
        let raw = std::fs::read(f.unwrap().path()).unwrap();
        match serde_json::from_slice::<Value>(&raw) {
            Ok(v) if v.get("headers").is_some() => {
                let headers = v["headers"].to_string();
                assert!(headers.contains(&key), "a request without the real key: {headers}");
                bodies.push_str(&v["body"].to_string());
            }
            _ => bodies.push_str(&String::from_utf8_lossy(&raw)),
        }
    }
    assert!(!bodies.contains(&key), "the CLI sent its real key in a request body");
    let mut kept = done.transcript();
    for (path, bytes) in crate::support::files_under(&p.path().join(".cassist")) {
        if crate::support::contains_bytes(&bytes, key.as_bytes()) {
            kept.push_str(&format!("\n{} holds the key", path.display()));
        }
    }
    assert!(!kept.contains(&key), "the key is in what cassist kept: {kept}");
    bodies
}

#[test]
fn claude_never_holds_its_api_key() {
    if cli_dir("claude").is_none() || !sandbox_or_skip(Sandbox::Overlay) {
        return;
    }
    let shell = json!({"tool": "Bash", "input": {
        "command": "env | grep -E 'ANTHROPIC|PROXY' | sort; cat \"$HOME/.claude.json\" \"$HOME/.claude/settings.json\" 2>&1 | head -c 2000",
        "description": "Show the environment"
    }});
    let edit = json!({"tool": "Edit", "input": {"file_path": "{cwd}/src/calc.py", "old_string": "a - b", "new_string": "a + b"}});
    // Claude edits only a file it has read.
    let read = json!({"tool": "Read", "input": {"file_path": "{cwd}/src/calc.py"}});
    let bodies = the_key_stays_outside(Cli::Claude, "ANTHROPIC_API_KEY", vec![shell, read], edit);
    // What its shell printed came back in the next request: the proxy as
    // its API, a placeholder as its key.
    assert!(bodies.contains("ANTHROPIC_API_KEY=cassist-brokered-key"), "{bodies}");
    assert!(bodies.contains("ANTHROPIC_BASE_URL=http://127.0.0.1:38127"), "{bodies}");
}

#[test]
fn gemini_never_holds_its_api_key() {
    if cli_dir("gemini").is_none() || !sandbox_or_skip(Sandbox::Overlay) {
        return;
    }
    let edit = json!({"tool": "replace", "input": {
        "file_path": "{cwd}/src/calc.py", "instruction": "Make add() add.", "old_string": "a - b", "new_string": "a + b"
    }});
    the_key_stays_outside(Cli::Gemini, "GEMINI_API_KEY", Vec::new(), edit);
}

// ---------------------------------------------------------------------------
// 2. Read-only really prevents a write

/// Runs a `kind "review"` task on `cli` whose server script tries to
/// write src/calc.py; checks nothing reached the user's tree and nothing
/// was integrated. Returns the report entry, the server and the fixture.
fn review_tries_to_write(cli: Cli, script: Value) -> Option<(Value, Output, Server, Project)> {
    let bin = cli_dir(cli.name())?;
    let server = Server::start(cli.api(), &script);
    let p = calc(CASSIST_KDL, &REVIEW_TASK.replace("AGENT", cli.name()));
    let before = tree(&p);
    let env = cli.configure(&server, p.home());
    let done = run_cli(&p, &[&bin], &env);
    let t = done.task("look");
    assert_eq!(t["agent"], cli.name());
    assert_same_tree(&tree(&p), &before, "a read-only task changed the user's tree");
    assert_eq!(p.git(&["status", "--porcelain", "--untracked-files=no"]), "");
    assert!(strings(&t["changed_files"]).is_empty(), "the write reached the workspace: {t}");
    assert!(!done.stderr.contains("integrate"), "something was integrated:\n{}", done.transcript());
    // Every step was played: the write attempts were made, and refused.
    let steps = script.as_array().unwrap().len() as u64;
    assert_eq!(server.steps(&cli.model_path()), (0..steps).collect::<Vec<_>>(), "{}", server.log());
    Some((t, done, server, p))
}

#[test]
fn claude_read_only_offers_no_write_tool() {
    let script = json!([
        {"tool": "Write", "input": {"file_path": "{cwd}/src/calc.py", "content": "written\n"}},
        {"tool": "Edit", "input": {"file_path": "{cwd}/src/calc.py", "old_string": "a - b", "new_string": "a + b"}},
        {"text": "add() subtracts."},
    ]);
    let Some((t, done, server, _p)) = review_tries_to_write(Cli::Claude, script) else { return };
    // `--tools Read,Glob,Grep`: the write tools do not exist; Claude exits 0
    // with no permission_denials (the refusal is only in the tool result),
    // so the review passes with no change.
    done.assert_code(0);
    assert_eq!(t["state"], "passed", "{t}");
    assert_eq!(t["summary"], "add() subtracts.");
    let log = server.log();
    assert!(log.contains("No such tool available: Write"), "{log}");
    assert!(log.contains("No such tool available: Edit"), "{log}");
}

#[test]
fn codex_read_only_rejects_apply_patch() {
    let patch = "*** Begin Patch\n*** Update File: {cwd}/src/calc.py\n@@\n def add(a, b):\n-    return a - b\n+    return a + b\n*** End Patch\n";
    let script = json!([{"tool": "apply_patch", "input": patch}, {"text": "add() subtracts."}]);
    let landlock = sandbox_or_skip(Sandbox::Landlock);
    let Some((t, done, server, _p)) = review_tries_to_write(Cli::Codex, script) else { return };
    if landlock {
        // Codex's own sandbox cannot start inside Landlock: it runs with
        // danger-full-access and Landlock refuses the write, which Codex
        // reports as a failed file change: the task fails, nothing lands.
        done.assert_code(1);
        assert_eq!(t["state"], "failed", "{t}");
        assert!(t["reason"].as_str().unwrap().contains("file change failed"), "{t}");
        assert!(done.stderr.contains("Landlock enforces `read-only`"), "{}", done.stderr);
        let _ = server;
    } else {
        // `--sandbox read-only`: Codex refuses the patch itself and exits 0.
        done.assert_code(0);
        assert_eq!(t["state"], "passed", "{t}");
        assert_eq!(t["summary"], "add() subtracts.");
        let log = server.log();
        assert!(log.contains("patch rejected: writing is blocked by read-only sandbox"), "{log}");
    }
}

#[test]
fn gemini_read_only_offers_no_write_tool() {
    let script = json!([
        {"tool": "write_file", "input": {"file_path": "{cwd}/src/calc.py", "content": "written\n"}},
        {"text": "add() subtracts."},
    ]);
    let Some((t, done, server, p)) = review_tries_to_write(Cli::Gemini, script) else { return };
    // The default approval mode offers no write tool; Gemini exits 0 after
    // the failed tool call, which cassist counts as the agent failing.
    done.assert_code(1);
    assert_eq!(t["state"], "failed", "{t}");
    let reason = t["reason"].as_str().unwrap();
    assert!(reason.contains("tool calls failed") && reason.contains("write_file"), "{reason}");
    assert_eq!(p.agent_json("look", 1)["error"]["kind"], "tool-failed");
    let log = server.log();
    assert!(log.contains("Tool \\\"write_file\\\" not found"), "{log}");
}

#[test]
fn droid_read_only_refuses_create_and_landlock_refuses_its_shell_write() {
    // Droid's read-only mode (no `--auto`) refuses Create, but its Execute
    // tool runs a command the model itself calls low-risk, writes included:
    // only cassist's Landlock sandbox stops that one.
    let script = json!([
        {"tool": "Create", "input": {"file_path": "{cwd}/src/calc.py", "content": "written\n"}},
        {"tool": "Execute", "input": {
            "command": "echo written > src/calc.py", "summary": "Rewrite the calc module",
            "riskLevel": "low", "riskLevelReason": "Only one file"}},
        {"text": "add() subtracts."},
    ]);
    // Without Landlock: only that the review rejects the write.
    let landlock = sandbox_or_skip(Sandbox::Landlock);
    let Some((t, done, server, _p)) = review_tries_to_write(Cli::Droid, script) else { return };
    let log = server.log();
    assert!(log.contains("Tool Create is not permitted in this exec session"), "{log}");
    if landlock {
        done.assert_code(0);
        assert_eq!(t["state"], "passed", "{t}");
        // Landlock, or first the read-only mount of the overlay.
        let refused = ["Permission denied", "Read-only file system"];
        assert!(refused.iter().any(|r| log.contains(&format!("src/calc.py: {r}"))), "{log}");
    } else {
        done.assert_code(1);
        assert_eq!(t["state"], "failed", "{t}");
        assert!(t["reason"].as_str().unwrap().contains("read-only"), "{t}");
    }
}

// ---------------------------------------------------------------------------
// 4. API errors give the mapped outcome

/// Runs the fix task on `cli` against a server that answers every request
/// with `status`; checks the task failed with a reason holding `reason`,
/// the parsed error kind, one request only, and an untouched tree.
fn api_error_is_mapped(cli: Cli, status: u16, extra_env: &[(&str, &str)], kind: &str, reason: &str) {
    let Some(bin) = cli_dir(cli.name()) else { return };
    let server = Server::start(cli.api(), &json!([{"status": status}, {"text": "never sent"}]));
    let p = calc(CASSIST_KDL, &fix_task(cli.name()));
    let before = tree(&p);
    let mut env = cli.configure(&server, p.home());
    env.extend(extra_env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    let done = run_cli(&p, &[&bin], &env);
    done.assert_code(1);
    let t = done.task("fix");
    assert_eq!(t["state"], "failed", "{t}");
    let why = t["reason"].as_str().unwrap();
    assert!(why.contains(reason) && why.contains(&format!("agent `{}`", cli.name())), "{why}");
    let parsed = p.agent_json("fix", 1);
    assert_eq!(parsed["error"]["kind"], kind, "{parsed}");
    assert_eq!(parsed["success"], false, "{parsed}");
    assert_same_tree(&tree(&p), &before, "a failed task changed the user's tree");
    // The CLI gave up after one request: no retries.
    let requests = server.model_requests(&cli.model_path());
    assert_eq!(requests.len(), 1, "{}", server.log());
    assert_eq!(requests[0].status, status, "{}", server.log());
}

#[test]
fn claude_529_is_overloaded() {
    // CLAUDE_CODE_MAX_RETRIES is in the claude adapter's allowlist.
    api_error_is_mapped(Cli::Claude, 529, &[("CLAUDE_CODE_MAX_RETRIES", "0")], "overloaded", "overloaded");
}

#[test]
fn codex_429_is_rate_limited() {
    // request_max_retries = 0 and stream_max_retries = 0 in config.toml.
    api_error_is_mapped(Cli::Codex, 429, &[], "rate-limited", "rate limited");
}

#[test]
fn gemini_429_is_rate_limited() {
    // general.maxAttempts = 1 in settings.json, GEMINI_MODEL set.
    api_error_is_mapped(Cli::Gemini, 429, &[], "rate-limited", "rate limited");
}

#[test]
fn droid_401_is_an_auth_error() {
    // Droid retries 429 five times over ~80 s (529: ten times, ~265 s) for a
    // custom model, ignoring retry headers, and nothing shortens that; so
    // its mapped outcome is checked with a 401, which it does not retry.
    api_error_is_mapped(Cli::Droid, 401, &[], "auth", "not logged in or its key was refused");
}

#[test]
fn overloaded_claude_fails_over_to_codex() {
    let (Some(claude_bin), Some(codex_bin)) = (cli_dir("claude"), cli_dir("codex")) else { return };
    let anthropic = Server::start("anthropic", &json!([{"status": 529}, {"text": "never sent"}]));
    let patch = "*** Begin Patch\n*** Update File: {cwd}/src/calc.py\n@@\n def add(a, b):\n-    return a - b\n+    return a + b\n*** End Patch\n";
    let openai =
        Server::start("openai", &json!([{"tool": "apply_patch", "input": patch}, {"text": "Codex fixed it."}]));
    let kdl = format!("{CASSIST_KDL}agent \"chain\" {{\n    try \"claude\" \"codex\"\n}}\n");
    let p = calc(&kdl, &fix_task("chain"));
    let mut env = Cli::Claude.configure(&anthropic, p.home());
    env.extend(Cli::Codex.configure(&openai, p.home()));
    env.push(("CLAUDE_CODE_MAX_RETRIES".into(), "0".into()));
    let done = run_cli(&p, &[&claude_bin, &codex_bin], &env);
    done.assert_code(0);
    let t = done.task("fix");
    assert_eq!(t["state"], "passed", "{t}");
    assert_eq!(t["agent"], "codex", "{t}");
    assert_eq!(t["summary"], "Codex fixed it.");
    assert!(done.stderr.contains("`claude` is overloaded; trying `codex`"), "{}", done.transcript());
    assert_eq!(p.read("src/calc.py"), "def add(a, b):\n    return a + b\n");
    assert_eq!(p.agent_json("fix", 1)["error"]["kind"], "overloaded");
    assert_eq!(p.agent_json("fix", 2)["summary"], "Codex fixed it.");
    let claude_requests = anthropic.model_requests(&Cli::Claude.model_path());
    assert_eq!(claude_requests.iter().map(|r| r.status).collect::<Vec<_>>(), [529], "{}", anthropic.log());
    assert_eq!(openai.steps(&Cli::Codex.model_path()), [0, 1], "{}", openai.log());
}

/// A built-in CLI's final message counts as its report (SPEC 3.4): Claude
/// changes nothing and says so; it is not resumed (one model request), the
/// acceptance commands decide.
#[test]
fn claude_final_message_counts_as_its_report_no_second_call() {
    let Some(bin) = cli_dir("claude") else { return };
    let server = Server::start("anthropic", &json!([{"text": "add() looks right to me."}]));
    let p = calc(CASSIST_KDL, &fix_task("claude"));
    let env = Cli::Claude.configure(&server, p.home());
    let done = run_cli(&p, &[&bin], &env);
    done.assert_code(1);
    let t = done.task("fix");
    assert_eq!((t["state"].as_str(), t["attempts"].as_u64()), (Some("failed"), Some(1)), "{t}");
    assert!(t["reason"].as_str().unwrap().contains("acceptance command"), "{t}");
    assert_eq!(server.steps(&Cli::Claude.model_path()), [0], "{}", server.log());
}

// ---------------------------------------------------------------------------
// 5. The model asked for reaches the model server (issue 14)

/// Runs the review task on `cli` with `model "<model>"` against a server
/// that answers with a final message; checks the server was asked for
/// `seen` (the CLI got `--model`), and the summary table names the model.
fn asks_the_server_for_the_model(cli: Cli, model: &str, seen: &str) {
    let Some(bin) = cli_dir(cli.name()) else { return };
    let server = Server::start(cli.api(), &json!([{"text": "add() subtracts."}]));
    let task = REVIEW_TASK
        .replace("AGENT", cli.name())
        .replace("    kind \"review\"\n", &format!("    kind \"review\"\n    model \"{model}\"\n"));
    let p = calc(CASSIST_KDL, &task);
    let env = cli.configure(&server, p.home());
    if cli == Cli::Droid {
        // Two custom models: the one asked for is not the first.
        let custom = |m: &str| {
            json!({
                "model": m, "displayName": m, "baseUrl": server.url(),
                "apiKey": "test-key", "provider": "anthropic", "maxOutputTokens": 8192,
            })
        };
        let settings = json!({"customModels": [custom("scripted-model"), custom("other-model")]});
        write(&p.home().join(".factory/settings.json"), settings.to_string());
    }
    let done = run_cli(&p, &[&bin], &env);
    done.assert_code(0);
    let t = done.task("look");
    assert_eq!(t["state"], "passed", "{}", done.transcript());
    assert_eq!(t["summary"], "add() subtracts.");
    let models = server.models();
    assert!(!models.is_empty(), "no conversation request:\n{}", server.log());
    assert!(models.iter().all(|m| m == seen), "asked for {model}, the server saw {models:?}:\n{}", server.log());
    // The summary table's row of the task, under its MODEL column.
    let mut table = done.stdout.lines().skip_while(|l| !l.starts_with("TASK "));
    let header = table.next().unwrap_or_else(|| panic!("no summary table:\n{}", done.stdout));
    let row = table.find(|l| l.starts_with("look ")).unwrap_or_else(|| panic!("{}", done.stdout));
    let at = header.find("MODEL").unwrap_or_else(|| panic!("no MODEL column:\n{}", done.stdout));
    assert!(row[at..].starts_with(model), "the summary table names the model:\n{}", done.stdout);
}

#[test]
fn claude_is_asked_for_the_model() {
    asks_the_server_for_the_model(Cli::Claude, "claude-sonnet-4-5", "claude-sonnet-4-5");
}

#[test]
fn codex_is_asked_for_the_model() {
    // config.toml says gpt-5.5: the flag wins.
    asks_the_server_for_the_model(Cli::Codex, "gpt-5.4", "gpt-5.4");
}

#[test]
fn gemini_is_asked_for_the_model() {
    // GEMINI_MODEL says gemini-2.5-flash: the flag wins.
    asks_the_server_for_the_model(Cli::Gemini, "gemini-2.5-pro", "gemini-2.5-pro");
}

#[test]
fn droid_is_asked_for_the_model() {
    // Without the flag Droid would use the first custom model.
    asks_the_server_for_the_model(Cli::Droid, "custom:other-model", "other-model");
}

// ---------------------------------------------------------------------------
// Landlock, with fake agents

/// A workspace-write agent writes `$HOME/escape.txt`, the user's project
/// by absolute path (copy mode only: in overlay mode that path is the
/// workspace), and `src/in.txt` in its workspace: only the last lands.
fn workspace_write_agent_writes_only_its_workspace(mode: &str) {
    let copy = mode == "copy";
    let p = Test::new()
        .outside_tmp()
        .tasks("task \"w\" {\n    goal \"Write src/in.txt.\"\n    agent \"writer\"\n}\n")
        .file("src/a.txt", "a\n")
        .build();
    let home_target = p.home().join("escape.txt");
    let project_target = p.path().join("src/escape.txt");
    let mut targets = vec![home_target.clone()];
    if copy {
        targets.push(project_target.clone());
    }
    let mut script = String::new();
    for t in &targets {
        script.push_str(&format!("if echo x > '{}'; then echo 'WROTE {}'; fi; ", t.display(), t.display()));
    }
    script.push_str("echo fixed > src/in.txt");
    p.file("cassist.kdl", format!("{CASSIST_KDL}{}", sh_agent_block("writer", &script))).commit_all();
    let env = if copy { vec![("CASSIST_WORKSPACE".to_owned(), "copy".to_owned())] } else { Vec::new() };
    let done = run_cli(&p, &[], &env);
    done.assert_code(0);
    let t = done.task("w");
    assert_eq!(t["state"], "passed", "{t}");
    assert_eq!(strings(&t["changed_files"]), ["src/in.txt"], "{t}");
    assert_eq!(p.read("src/in.txt"), "fixed\n");
    assert!(!home_target.exists(), "{mode}: the agent wrote {}", home_target.display());
    assert!(!project_target.exists(), "{mode}: the agent wrote {}", project_target.display());
    let transcript = p.record("w", "transcript-1.log");
    assert!(!transcript.contains("WROTE"), "{transcript}");
    assert_eq!(transcript.matches("Permission denied").count(), targets.len(), "{transcript}");
}

#[test]
fn landlock_workspace_write_agent_cannot_write_home_or_the_project() {
    if !sandbox_or_skip(Sandbox::Landlock) {
        return;
    }
    workspace_write_agent_writes_only_its_workspace("copy");
    workspace_write_agent_writes_only_its_workspace("overlay");
}

/// A read-only agent tries to write its workspace (and may write its temp
/// folder), with the project under `base`.
fn read_only_agent_cannot_write_its_workspace(mode: &str, base: &Path) {
    let script = "if echo x > src/ro.txt; then echo WROTE; fi; \
                  if echo x > src/a.txt; then echo WROTE; fi; \
                  if echo t > \"$TMPDIR/t.txt\"; then echo TMP-OK; fi";
    let p = Test::new()
        .in_dir(base)
        .config(&format!("{CASSIST_KDL}{}", sh_agent_block("reader", script)))
        .tasks("task \"r\" {\n    goal \"Read src/a.txt.\"\n    kind \"review\"\n    agent \"reader\"\n}\n")
        .file("src/a.txt", "a\n")
        .git()
        .build();
    let before = tree(&p);
    let env = if mode == "copy" { vec![("CASSIST_WORKSPACE".to_owned(), "copy".to_owned())] } else { Vec::new() };
    let done = run_cli(&p, &[], &env);
    done.assert_code(0);
    let t = done.task("r");
    let mode = format!("{mode} mode, project under {}", base.display());
    assert_eq!(t["state"], "passed", "{mode}: {t}");
    assert!(strings(&t["changed_files"]).is_empty(), "{mode}: {t}");
    assert_same_tree(&tree(&p), &before, "a read-only agent changed the user's tree");
    let transcript = p.record("r", "transcript-1.log");
    assert!(!transcript.contains("WROTE"), "{mode}: {transcript}");
    // Refused by Landlock, or (overlay mode) first by the read-only mount
    // of a read-only task's workspace.
    let refused = transcript.matches("Permission denied").count() + transcript.matches("Read-only file system").count();
    assert_eq!(refused, 2, "{mode}: {transcript}");
    assert!(transcript.contains("TMP-OK"), "{mode}: its own temp folder stays writable: {transcript}");
}

#[test]
fn landlock_read_only_agent_cannot_write_its_workspace() {
    if !sandbox_or_skip(Sandbox::Landlock) {
        return;
    }
    // The workspace in a temp folder (the copy always is; a project under
    // /tmp too in overlay mode) must not be writable through that folder.
    for base in [&outside_temp_dir(), &std::env::temp_dir()] {
        read_only_agent_cannot_write_its_workspace("overlay", base);
        read_only_agent_cannot_write_its_workspace("copy", base);
    }
}
