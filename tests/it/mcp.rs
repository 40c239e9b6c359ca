//! `cassist mcp` (SPEC 7) at the protocol level: the real binary spoken to
//! in JSON-RPC over its stdio, with fake agents.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::mcp::{Mcp, ok, tool_error};
use crate::support::{Project, Test, assert_same_tree, processes_with, unique_marker, wait_until, workspaces_in};

/// `cassist mcp ARGS` in the project, as [`Project::cassist`] runs it.
fn mcp(p: &Project, args: &[&str]) -> Mcp {
    let mut all = vec!["mcp"];
    all.extend_from_slice(args);
    Mcp::initialized(p.cassist(&all).command()).0
}

/// A project whose default agent `counter` notes each call in OUT/calls
/// and reports `summary` (Python's repr of a string) as its summary.
fn counting(summary: &str) -> Test {
    let script = format!(
        "echo call >> {out}/calls; cat > /dev/null; python3 -c 'import json, sys; json.dump({{\"success\": True, \"summary\": {summary}}}, open(sys.argv[1], \"w\"))' \"$CASSIST_RESULT_FILE\"",
        out = "$CASSIST_TEST_OUT"
    );
    Test::trusted().kdl("defaults { agent \"counter\" }\n").sh_agent("counter", &script)
}

/// The agent calls noted so far.
fn calls(p: &Project) -> usize {
    std::fs::read_to_string(p.out().join("calls")).map_or(0, |s| s.lines().count())
}

/// A project of [`counting`], with the out folder's path written into
/// the agent's script.
fn counting_project(summary: &str, more: impl FnOnce(Test) -> Test) -> Project {
    let p = more(counting(summary)).build();
    let config = p.read("cassist.kdl").replace("$CASSIST_TEST_OUT", &p.out_str());
    p.file("cassist.kdl", config);
    p
}

#[test]
fn initialize_and_the_tools_with_their_schemas() {
    // No tasks/ folder: the server still serves (dispatches need none).
    let p = Test::new().build();
    let (mut m, init) = Mcp::initialized(p.cassist(&["mcp"]).command());
    assert_eq!(init["result"]["serverInfo"]["name"], "cassist", "{init}");
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18", "{init}");
    assert!(init["result"]["capabilities"]["tools"].is_object(), "{init}");

    let list = m.request("tools/list", json!({}));
    let tools = list["result"]["tools"].as_array().unwrap_or_else(|| panic!("{list}"));
    let mut names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    names.sort();
    assert_eq!(names, ["dispatch_subagent", "explain_task", "list_tasks", "run_tasks"]);
    let tool = |name: &str| tools.iter().find(|t| t["name"] == name).unwrap();
    for t in tools {
        assert_eq!(t["inputSchema"]["type"], "object", "{t}");
        assert!(t["description"].as_str().is_some_and(|d| d.len() > 40), "{t}");
    }
    let dispatch = &tool("dispatch_subagent")["inputSchema"];
    assert_eq!(dispatch["required"], json!(["agent_type", "task"]), "{dispatch}");
    let kinds = dispatch["$defs"]["AgentType"].to_string();
    for k in ["explore", "test", "review"] {
        assert!(kinds.contains(&format!("\"{k}\"")), "{kinds}");
    }
    let run = &tool("run_tasks")["inputSchema"];
    for field in ["names", "tasks", "max_cost"] {
        assert!(run["properties"][field].is_object(), "no {field}: {run}");
    }
    let inline = &run["$defs"]["InlineTask"];
    assert_eq!(inline["required"], json!(["goal", "kind"]), "{inline}");
    for field in ["name", "agent", "model", "context", "scope", "constraints", "acceptance", "sandbox", "timeout"] {
        assert!(inline["properties"][field].is_object(), "no {field}: {inline}");
    }
    assert_eq!(tool("explain_task")["inputSchema"]["required"], json!(["name"]));

    // With no task file, no task.
    let listed = m.call("list_tasks", json!({}), None);
    assert_eq!(ok(&listed)["tasks"], json!([]), "{listed}");
    assert!(m.close(Duration::from_secs(10)).success());
}

#[test]
fn a_second_identical_dispatch_is_served_from_the_cache() {
    let long = format!("\"found: \" + \"{}\" * 1500", "é");
    let p = counting_project(&long, |t| t.file("src/lib.rs", "fn main() {}\n").git());
    let before = p.tree();
    let mut m = mcp(&p, &[]);
    let args = json!({"agent_type": "explore", "task": "Where is main?", "context": ["src/lib.rs"]});

    let first = m.call("dispatch_subagent", args.clone(), Some(7));
    let summary = first["result"]["content"][0]["text"].as_str().unwrap_or_else(|| panic!("{first:#}")).to_owned();
    assert_eq!(first["result"]["isError"], false, "{first:#}");
    // Cut at 1000 characters (not bytes), with an ellipsis.
    assert_eq!(summary.chars().count(), 1000, "{summary}");
    assert!(summary.starts_with("found: éé") && summary.ends_with('…'), "{summary}");
    assert_eq!(first["result"]["_meta"]["cassist/state"], "passed", "{first:#}");
    assert_eq!(calls(&p), 1);
    // One notification per state change, for the token asked.
    let progress = m.progress(7);
    assert!(progress.len() >= 3, "{progress:?}");
    assert!(progress.iter().any(|s| s.ends_with(": agent (attempt 1)")), "{progress:?}");
    assert!(progress.last().unwrap().ends_with(": passed"), "{progress:?}");

    let second = m.call("dispatch_subagent", args.clone(), Some(8));
    assert_eq!(second["result"]["content"][0]["text"].as_str(), Some(summary.as_str()), "{second:#}");
    assert_eq!(second["result"]["_meta"]["cassist/state"], "replayed", "{second:#}");
    assert_eq!(calls(&p), 1, "the second dispatch called the agent");

    // Another question is another task.
    let other = m.call("dispatch_subagent", json!({"agent_type": "review", "task": "Review main."}), None);
    ok(&other);
    assert_eq!(calls(&p), 2);
    assert!(m.close(Duration::from_secs(10)).success());

    // Inline tasks are recorded in the store, never in cassist.lock (the
    // record of task files); the tree is untouched.
    let lock = std::fs::read_to_string(p.path().join("cassist.lock")).unwrap_or_default();
    assert!(!lock.contains("mcp-"), "an inline task in cassist.lock:\n{lock}");
    let mut after = p.tree();
    after.remove(&PathBuf::from("cassist.lock"));
    assert_same_tree(&after, &before, "a read-only dispatch changed the tree");
}

#[test]
fn run_tasks_runs_named_tasks_into_the_lock_and_inline_tasks_into_the_store() {
    let tasks = r#"task "hello" {
    goal "Write src/hello.txt."
    agent "good"
}
task "broken" {
    goal "Give up."
    agent "quitter"
}
"#;
    let p = Test::trusted()
        .agent("good", "good.sh", &[], &[])
        .agent("quitter", "report-failure.sh", &[], &[])
        .tasks(tasks)
        .file("src/a.txt", "a\n")
        .git()
        .build();
    let mut m = mcp(&p, &[]);

    let listed = m.call("list_tasks", json!({}), None);
    let listed = ok(&listed);
    let hello = listed["tasks"].as_array().unwrap().iter().find(|t| t["name"] == "hello").unwrap();
    assert_eq!(
        *hello,
        json!({"name": "hello", "kind": "code", "state": "run", "agent": "good", "goal": "Write src/hello.txt."})
    );

    let ran = m.call("run_tasks", json!({"names": ["hello"]}), Some(1));
    let t = &ok(&ran)["tasks"][0];
    assert_eq!((t["name"].as_str(), t["state"].as_str()), (Some("hello"), Some("passed")), "{ran:#}");
    assert_eq!(t["changed_files"], json!(["src/hello.txt"]), "{t}");
    assert_eq!(t["summary"], "wrote src/hello.txt", "{t}");
    for field in ["acceptance", "cost_usd", "reason"] {
        assert!(t.get(field).is_some(), "no {field}: {t}");
    }
    assert_eq!(p.read("src/hello.txt"), "hello from hello\n");
    // As `cassist run` does: the lock records the task, and it is
    // up-to-date now.
    assert!(p.read("cassist.lock").contains("hello"), "{}", p.read("cassist.lock"));
    let explained = m.call("explain_task", json!({"name": "hello"}), None);
    let explained = ok(&explained);
    assert_eq!(explained["state"], "up-to-date", "{explained}");
    assert!(explained["inputs"].as_array().is_some_and(|i| i.iter().any(|i| i["kind"] == "spec")), "{explained}");
    p.cassist(&["plan"]).stdout_has("up-to-date").exec();

    // A failing task is a result, with its reason (stdout stays protocol
    // only while it fails).
    let failed = m.call("run_tasks", json!({"names": ["broken"]}), None);
    let t = &ok(&failed)["tasks"][0];
    assert_eq!(t["state"], "blocked", "{t}");
    assert!(t["reason"].as_str().is_some_and(|r| r.contains("needs an API key")), "{t}");

    // An inline code task: run, recorded in the store, not in the lock.
    let inline = json!({"tasks": [{"name": "inl", "goal": "Write the hello file.", "kind": "code", "agent": "good", "scope": ["src/**"]}]});
    let ran = m.call("run_tasks", inline.clone(), None);
    let t = &ok(&ran)["tasks"][0];
    assert_eq!((t["name"].as_str(), t["state"].as_str()), (Some("inl"), Some("passed")), "{ran:#}");
    assert_eq!(p.read("src/hello.txt"), "hello from inl\n");
    assert!(!p.read("cassist.lock").contains("inl"), "{}", p.read("cassist.lock"));
    let again = m.call("run_tasks", inline, None);
    assert_eq!(ok(&again)["tasks"][0]["state"], "replayed", "{again:#}");

    // An inline name must not be a task file's.
    let clash = m.call("run_tasks", json!({"tasks": [{"name": "hello", "goal": "G.", "kind": "explore"}]}), None);
    let why = tool_error(&clash);
    assert!(why.contains("`hello`") && why.contains("another `name`"), "{why}");
    assert!(m.close(Duration::from_secs(10)).success());
}

/// A stale explore task (a file it reads changed) keeps its findings
/// until it is named: `run_tasks` naming it runs its agent again.
#[test]
fn run_tasks_naming_a_stale_task_runs_it_again() {
    let tasks = "task \"look\" {\n    kind \"explore\"\n    goal \"Look.\"\n    context {\n        file \"notes.txt\"\n    }\n}\n";
    let p = counting_project("\"seen\"", |t| t.tasks(tasks).file("notes.txt", "one\n").git());
    let mut m = mcp(&p, &[]);
    let state = |m: &mut Mcp| {
        let listed = m.call("list_tasks", json!({}), None);
        ok(&listed)["tasks"][0]["state"].as_str().unwrap().to_owned()
    };
    let ran = m.call("run_tasks", json!({"names": ["look"]}), None);
    assert_eq!(ok(&ran)["tasks"][0]["state"], "passed", "{ran:#}");
    assert_eq!(calls(&p), 1);
    p.file("notes.txt", "two\n");
    assert_eq!(state(&mut m), "stale");
    let ran = m.call("run_tasks", json!({"names": ["look"]}), None);
    assert_eq!(ok(&ran)["tasks"][0]["state"], "passed", "{ran:#}");
    assert_eq!(calls(&p), 2, "named, the stale task runs again");
    assert_eq!(state(&mut m), "up-to-date");
    assert!(m.close(Duration::from_secs(10)).success());
}

#[test]
fn an_inline_task_asking_for_more_than_the_trust_is_refused() {
    let p = Test::new()
        .outside_tmp()
        .config("trust \"read-only\"\ntest #false\n")
        .agent("good", "good.sh", &[], &[])
        .file("src/a.txt", "a\n")
        .git()
        .build();
    let before = p.tree();
    let mut m = mcp(&p, &[]);
    let over = json!({"tasks": [{"goal": "Write.", "kind": "code", "agent": "good", "sandbox": "workspace-write"}]});
    let why = tool_error(&m.call("run_tasks", over, None));
    assert!(why.contains("asks for sandbox `workspace-write` but the project trusts only `read-only`"), "{why}");
    // A code task at the trust's level runs read-only, and its change is
    // refused by the review as in `cassist run`.
    let code = json!({"tasks": [{"goal": "Write.", "kind": "code", "agent": "good"}]});
    let ran = m.call("run_tasks", code, None);
    let t = &ok(&ran)["tasks"][0];
    assert_ne!(t["state"], "passed", "{t}");
    assert!(m.close(Duration::from_secs(10)).success());
    assert_same_tree(&p.tree(), &before, "a refused task changed the tree");
}

#[test]
fn bad_requests_get_errors_and_the_server_goes_on() {
    let p = counting_project("\"ok\"", |t| t.tasks("task \"t\" {\n    goal \"G.\"\n    kind \"explore\"\n}\n"));
    let mut m = mcp(&p, &[]);
    // Not JSON: a parse error with no id.
    m.send_raw("{this is not json");
    let e = m.until("a parse error", |v| v["error"]["code"] == -32700);
    assert_eq!(e["id"], Value::Null, "{e}");
    // JSON, but no request.
    m.send_raw("{\"jsonrpc\": \"2.0\", \"id\": 99, \"params\": 3}");
    let e = m.until("an invalid request error", |v| v.get("error").is_some() && v["error"]["code"] != -32700);
    assert!(e["error"]["code"].as_i64().is_some_and(|c| (-32700..=-32600).contains(&c)), "{e}");
    // An unknown tool, and arguments of the wrong shape: errors that say
    // what is wrong.
    let unknown = m.call("build_everything", json!({}), None);
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    let why = tool_error(&m.call("dispatch_subagent", json!({"agent_type": "build", "task": "x"}), None));
    assert!(why.contains("unknown variant `build`"), "{why}");
    let why = tool_error(&m.call("run_tasks", json!({"names": "t"}), None));
    assert!(why.contains("invalid type"), "{why}");
    let why =
        tool_error(&m.call("dispatch_subagent", json!({"agent_type": "explore", "task": "x", "turns": 99}), None));
    assert!(why.contains("unknown field `turns`"), "{why}");
    // Tool errors: nothing to run, an unknown task, too many tasks, an
    // invalid inline task.
    assert!(tool_error(&m.call("run_tasks", json!({}), None)).contains("give `names`"));
    let why = tool_error(&m.call("run_tasks", json!({"names": ["nope"]}), None));
    assert!(why.contains("no task named `nope`"), "{why}");
    let why = tool_error(&m.call("explain_task", json!({"name": "tt"}), None));
    assert!(why.contains("did you mean `t`?"), "{why}");
    let nine: Vec<Value> = (0..9).map(|i| json!({"goal": format!("G{i}"), "kind": "explore"})).collect();
    assert!(tool_error(&m.call("run_tasks", json!({"tasks": nine}), None)).contains("at most 8"));
    let why = tool_error(&m.call(
        "run_tasks",
        json!({"tasks": [{"goal": "G.", "kind": "explore", "timeout": "soon"}]}),
        None,
    ));
    assert!(why.contains("soon"), "{why}");
    let why = tool_error(&m.call(
        "dispatch_subagent",
        json!({"agent_type": "explore", "task": "x", "context": ["nope.rs"]}),
        None,
    ));
    assert!(why.contains("`nope.rs` matches no file"), "{why}");
    let why =
        tool_error(&m.call("run_tasks", json!({"tasks": [{"name": "a b", "goal": "G.", "kind": "explore"}]}), None));
    assert!(why.contains("a b"), "{why}");
    assert!(tool_error(&m.call("run_tasks", json!({"names": ["t"], "max_cost": -1}), None)).contains("`max_cost`"));
    // A call's budget: none left, no agent starts.
    let capped = m.call("run_tasks", json!({"tasks": [{"goal": "G.", "kind": "explore"}], "max_cost": 0}), None);
    let t = &ok(&capped)["tasks"][0];
    assert_eq!(t["state"], "skipped", "{t}");
    assert!(t["reason"].as_str().is_some_and(|r| r.contains("max-cost $0.00 reached")), "{t}");
    assert_eq!(calls(&p), 0, "an agent ran for a refused call");

    // The server still answers.
    let ping = m.request("ping", json!({}));
    assert!(ping.get("result").is_some(), "{ping}");
    let ran = m.call("run_tasks", json!({"names": ["t"]}), None);
    assert_eq!(ok(&ran)["tasks"][0]["state"], "passed", "{ran:#}");
    assert!(m.close(Duration::from_secs(10)).success());
}

#[test]
fn concurrent_calls_wait_for_each_other_on_the_project_lock() {
    let p = counting_project("\"ok\"", |t| t.git());
    let mut m = mcp(&p, &[]);
    let ids: Vec<u64> = (0..3)
        .map(|i| m.call_start("dispatch_subagent", json!({"agent_type": "explore", "task": format!("Q{i}")}), None))
        .collect();
    for id in ids {
        let answer = m.answer(id);
        assert_eq!(answer["result"]["_meta"]["cassist/state"], "passed", "{answer:#}");
    }
    assert_eq!(calls(&p), 3);
    assert!(m.close(Duration::from_secs(10)).success());
}

#[test]
fn a_dispatch_is_shared_through_the_team_cache() {
    let Some(turbo) = crate::support::TurboServer::start() else { return };
    let keys = Test::new().build().cassist(&["cache", "keygen"]).exec().stdout;
    let key = |which: &str| keys.lines().find_map(|l| l.strip_prefix(which)).unwrap().trim().to_owned();
    let (public, secret) = (key("public "), key("secret "));
    let config = format!("cache {{\n    {}\n    trusted-key \"{public}\"\n}}\n", turbo.remote_kdl());
    let a = counting_project("\"shared\"", |t| t.kdl(&config).file("src/lib.rs", "fn main() {}\n").git())
        .with_env("TURBO_TOKEN", crate::support::TurboServer::TOKEN)
        .with_env("CASSIST_CACHE_SIGNING_KEY", &secret);
    let args = json!({"agent_type": "explore", "task": "Where is main?", "context": ["src/lib.rs"]});
    let mut m = mcp(&a, &[]);
    let first = m.call("dispatch_subagent", args.clone(), None);
    assert_eq!(first["result"]["_meta"]["cassist/state"], "passed", "{first:#}");
    assert!(m.close(Duration::from_secs(30)).success());
    assert_eq!(calls(&a), 1);

    // Another clone of the project (the same files and config; the agent
    // counts in the same file), no signing key: served from the remote.
    let b = Test::new()
        .outside_tmp()
        .file("cassist.kdl", a.read("cassist.kdl"))
        .file("src/lib.rs", "fn main() {}\n")
        .git()
        .build();
    let b = b
        .with_env("HOME", a.home().to_str().unwrap())
        .with_env("CASSIST_SHARED_STATE", &a.out_str())
        .with_env("TURBO_TOKEN", crate::support::TurboServer::TOKEN);
    let mut m = mcp(&b, &[]);
    let again = m.call("dispatch_subagent", args, None);
    assert_eq!(again["result"]["_meta"]["cassist/state"], "replayed", "{again:#}");
    assert_eq!(again["result"]["content"], first["result"]["content"], "{again:#}");
    assert!(m.close(Duration::from_secs(30)).success());
    assert_eq!(calls(&a), 1, "the clone's dispatch called the agent");
}

/// A project whose agent hangs (deaf to SIGTERM, with children) until
/// killed; the test's TMPDIR for cassist's workspaces.
fn hanging() -> (Project, String, PathBuf, PathBuf) {
    let marker = unique_marker("mcp-hang");
    let p = Test::trusted()
        .kdl("defaults { agent \"hang\" }\n")
        .agent("hang", "hang.sh", &[&marker], &["FAKE_STARTED"])
        .file("src/a.txt", "a\n")
        .git()
        .build();
    let tmp = p.out().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let started = p.out().join("started");
    (p, marker, tmp, started)
}

fn hanging_server(p: &Project, tmp: &std::path::Path, started: &std::path::Path) -> Mcp {
    let mut cmd = p.cassist(&["mcp"]).command();
    cmd.env("TMPDIR", tmp).env("FAKE_STARTED", started);
    Mcp::initialized(cmd).0
}

#[test]
fn cancelling_a_call_stops_its_agents_as_ctrl_c_does() {
    let (p, marker, tmp, started) = hanging();
    let before = p.tree();
    let mut m = hanging_server(&p, &tmp, &started);
    let id = m.call_start("dispatch_subagent", json!({"agent_type": "explore", "task": "Hang."}), Some(3));
    wait_until(Duration::from_secs(60), "the agent started", || started.exists());
    assert!(!workspaces_in(&tmp).is_empty(), "no workspace while the agent runs");
    assert!(!processes_with(&marker).is_empty());

    m.notify("notifications/cancelled", json!({"requestId": id, "reason": "the user changed their mind"}));
    wait_until(Duration::from_secs(60), "the agent and its children were killed", || {
        processes_with(&marker).is_empty()
    });
    wait_until(Duration::from_secs(30), "the workspace was removed", || workspaces_in(&tmp).is_empty());
    assert_same_tree(&p.tree(), &before, "the user's tree changed");
    // The server goes on serving.
    let ping = m.request("ping", json!({}));
    assert!(ping.get("result").is_some(), "{ping}");
    assert!(m.close(Duration::from_secs(30)).success());
    assert!(processes_with(&marker).is_empty());
}

#[test]
fn closing_stdin_stops_the_calls_agents_and_the_server() {
    let (p, marker, tmp, started) = hanging();
    let before = p.tree();
    let mut m = hanging_server(&p, &tmp, &started);
    m.call_start("run_tasks", json!({"tasks": [{"goal": "Hang.", "kind": "code"}]}), None);
    wait_until(Duration::from_secs(60), "the agent started", || started.exists());
    let t0 = std::time::Instant::now();
    let status = m.close(Duration::from_secs(60));
    eprintln!("stdin closed: cassist mcp ended {:.2}s later ({status})", t0.elapsed().as_secs_f64());
    let left = processes_with(&marker);
    assert!(left.is_empty(), "processes left behind: {left:?}");
    assert!(workspaces_in(&tmp).is_empty(), "workspaces left: {:?}", workspaces_in(&tmp));
    assert_same_tree(&p.tree(), &before, "the user's tree changed");
}

#[test]
fn sigterm_stops_the_server_and_its_calls_as_ctrl_c_stops_a_run() {
    let (p, marker, tmp, started) = hanging();
    let before = p.tree();
    let mut m = hanging_server(&p, &tmp, &started);
    m.call_start("dispatch_subagent", json!({"agent_type": "test", "task": "Hang."}), None);
    wait_until(Duration::from_secs(60), "the agent started", || started.exists());
    crate::support::signal(m.pid(), nix::sys::signal::Signal::SIGTERM);
    let status = m.close(Duration::from_secs(60));
    assert_eq!(status.code(), Some(130), "{status}");
    let left = processes_with(&marker);
    assert!(left.is_empty(), "processes left behind: {left:?}");
    assert!(workspaces_in(&tmp).is_empty(), "workspaces left: {:?}", workspaces_in(&tmp));
    assert_same_tree(&p.tree(), &before, "the user's tree changed");
}

#[test]
fn hundreds_of_calls_at_once_are_served_by_a_bounded_pool() {
    const CALLS: usize = 600;
    let p = counting_project("\"ok\"", |t| t.git());
    let mut m = mcp(&p, &[]);
    let pid = m.pid();
    let threads = || {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines().find_map(|l| l.strip_prefix("Threads:")).and_then(|v| v.trim().parse::<usize>().ok())
            })
            .unwrap_or(0)
    };
    let mut ids: std::collections::HashSet<u64> =
        (0..CALLS).map(|_| m.send("tools/call", json!({"name": "list_tasks", "arguments": {}}))).collect();
    let mut peak = threads();
    while !ids.is_empty() {
        let Some(v) = m.next(Duration::from_secs(120)) else { panic!("{} calls unanswered", ids.len()) };
        if v.get("method").is_none()
            && let Some(id) = v["id"].as_u64()
        {
            assert!(v["result"]["isError"] != true, "{v}");
            ids.remove(&id);
        }
        peak = peak.max(threads());
    }
    // The async runtime's workers, the reader and writer, a bounded pool
    // of calls: not a thread per call.
    assert!(peak <= 24, "{peak} threads for {CALLS} calls at once");
    assert!(m.close(Duration::from_secs(10)).success());
}
