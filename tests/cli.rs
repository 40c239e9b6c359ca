//! Command behaviour (SPEC 1, 2, 5): check, discovery, run order, -C and
//! the project root, prompt, explain, agents, init, completions, colours,
//! trust and agent selection.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{Project, Run};
use serde_json::Value;

/// Runs the binary in `dir` with the same clean environment as
/// [`Project::run_env`], minus `NO_COLOR` unless given in `env`.
fn run_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_cassist"));
    cmd.current_dir(dir).args(args).env_clear().env("PATH", std::env::var_os("PATH").unwrap_or_default());
    cmd.env("HOME", dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    Run(cmd.output().expect("run cassist"))
}

/// Every file under `dir` with its content (folders as `None`).
fn tree(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    walkdir::WalkDir::new(dir)
        .min_depth(1)
        .into_iter()
        .map(|e| {
            let e = e.unwrap();
            let rel = e.path().strip_prefix(dir).unwrap().to_path_buf();
            let content = e.file_type().is_file().then(|| std::fs::read(e.path()).unwrap());
            (rel, content)
        })
        .collect()
}

fn names(json: &Value) -> Vec<String> {
    json["tasks"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect()
}

fn task<'a>(json: &'a Value, name: &str) -> &'a Value {
    json["tasks"].as_array().unwrap().iter().find(|t| t["name"] == name).unwrap_or_else(|| panic!("no task {name}"))
}

/// The `name` of the task's input of kind `kind` (the first one).
fn input(task: &Value, kind: &str) -> String {
    task["inputs"].as_array().unwrap().iter().find(|i| i["kind"] == kind).unwrap_or_else(|| panic!("no {kind} input"))
        ["name"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The text of one `# Section` of a prompt, up to the next heading.
fn section(prompt: &str, heading: &str) -> String {
    let start = prompt.find(&format!("# {heading}\n")).unwrap_or_else(|| panic!("no # {heading} in:\n{prompt}"));
    let body = &prompt[start + heading.len() + 3..];
    let end = body.find("\n# ").map_or(body.len(), |e| e + 1);
    body[..end].to_owned()
}

/// `s` with every run of whitespace made one space (diagnostics wrap).
fn flat(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[track_caller]
fn assert_exit(run: &Run, code: i32) {
    assert_eq!(run.code(), code, "expected exit {code}:\n{}", run.transcript());
}

const TRUSTED: &str = "trust \"workspace-write\"\n";

fn simple_task(name: &str) -> String {
    format!("task \"{name}\" {{\n    goal \"Do {name}.\"\n}}\n")
}

// ---------------------------------------------------------------------------
// check

#[test]
fn check_reports_counts_and_writes_nothing() {
    let p = Project::new();
    p.file("cassist.kdl", TRUSTED)
        .file("src/text.py", "x = 1\n")
        .file(
            "tasks/text.kdl",
            "task \"a\" {\n    goal \"A.\"\n    context {\n        file \"src/text.py\"\n    }\n}\n\ntask \"b\" {\n    goal \"B.\"\n    depends-on \"a\"\n}\n",
        )
        .file("tasks/more/c.kdl", &simple_task("c"));
    let before = tree(p.path());
    let run = p.run(&["check"]);
    assert_exit(&run, 0);
    assert_eq!(run.stdout(), "ok: 3 tasks in 2 files\n");
    assert_eq!(run.stderr(), "", "a trusted valid project gives no warning");
    assert!(!p.path().join(".cassist").exists(), "check wrote .cassist/");
    assert_eq!(tree(p.path()), before, "check changed the project");

    // Singular forms.
    let p = Project::new();
    p.file("cassist.kdl", TRUSTED).file("tasks/one.kdl", &simple_task("solo"));
    assert_eq!(p.run(&["check"]).stdout(), "ok: 1 task in 1 file\n");
    // -q: nothing at all.
    let q = p.run(&["check", "-q"]);
    assert_exit(&q, 0);
    assert_eq!(q.stdout(), "");
}

#[test]
fn check_fails_with_exit_2_and_writes_nothing_on_an_invalid_task() {
    let p = Project::new();
    p.file("cassist.kdl", TRUSTED)
        .file("tasks/good.kdl", &simple_task("good"))
        .file("tasks/bad.kdl", "task \"bad\" {\n    goal \"B.\"\n    agent \"claud\"\n}\n");
    let run = p.run(&["check"]);
    assert_exit(&run, 2);
    assert_eq!(run.stdout(), "");
    let err = run.stderr();
    assert!(err.contains("unknown agent `claud`"), "{err}");
    assert!(err.contains("did you mean `claude`?"), "{err}");
    assert!(err.contains("tasks/bad.kdl:3:11"), "the diagnostic must point at the value:\n{err}");
    assert!(err.contains("error: 1 error in tasks/bad.kdl; nothing was run"), "{err}");
    assert!(!p.path().join(".cassist").exists());
}

// ---------------------------------------------------------------------------
// Discovery

fn discovery_project() -> Project {
    let p = Project::new();
    p.file("cassist.kdl", TRUSTED)
        .file("tasks/one.kdl", &simple_task("a"))
        .file("tasks/sub/deep/two.kdl", &format!("{}{}", simple_task("b"), simple_task("c")))
        .file("tasks/notes.txt", "not a task file {{{")
        .file("tasks/README.md", "task \"x\" {")
        .file("tasks/.draft/x.kdl", "task \"draft\" {\n    goal 42\n    nonsense\n")
        .file("tasks/sub/.hidden/y.kdl", "task {")
        .file(".cassist/junk.kdl", "not { kdl");
    p
}

#[test]
fn discovery_walks_folders_and_skips_hidden_ones() {
    let p = discovery_project();
    let run = p.run(&["check"]);
    assert_exit(&run, 0);
    assert_eq!(run.stdout(), "ok: 3 tasks in 2 files\n");
    let json = p.run(&["plan", "--json"]).json();
    let files: Vec<(&str, &str)> = json["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap(), t["file"].as_str().unwrap()))
        .collect();
    assert_eq!(files, [("a", "tasks/one.kdl"), ("b", "tasks/sub/deep/two.kdl"), ("c", "tasks/sub/deep/two.kdl")]);

    // Walking the project root: cassist.kdl is the config, not a task
    // file, and .cassist/ is skipped.
    let run = p.run(&["check", "."]);
    assert_exit(&run, 0);
    assert_eq!(run.stdout(), "ok: 3 tasks in 2 files\n");
}

#[test]
fn discovery_takes_explicit_files_and_folders() {
    let p = discovery_project();
    let run = p.run(&["check", "tasks/one.kdl"]);
    assert_exit(&run, 0);
    assert_eq!(run.stdout(), "ok: 1 task in 1 file\n");
    let run = p.run(&["check", "tasks/sub", "tasks/one.kdl"]);
    assert_exit(&run, 0);
    assert_eq!(run.stdout(), "ok: 3 tasks in 2 files\n");
    // The same file twice counts once.
    let run = p.run(&["check", "tasks/one.kdl", "tasks/one.kdl"]);
    assert_eq!(run.stdout(), "ok: 1 task in 1 file\n");
    // A file named explicitly is read even in a hidden folder.
    let run = p.run(&["check", "tasks/.draft/x.kdl"]);
    assert_exit(&run, 2);
    assert!(run.stderr().contains("tasks/.draft/x.kdl"), "{}", run.stderr());
}

#[test]
fn discovery_errors_for_missing_paths_and_empty_folders() {
    let p = Project::new();
    p.file("cassist.kdl", TRUSTED).file("tasks/one.kdl", &simple_task("a"));
    std::fs::create_dir_all(p.path().join("empty")).unwrap();
    p.file("only-hidden/.x/t.kdl", &simple_task("h"));

    let run = p.run(&["check", "nope"]);
    assert_exit(&run, 2);
    assert_eq!(run.stdout(), "");
    assert!(run.stderr().contains("nope does not exist"), "{}", run.stderr());

    let run = p.run(&["check", "tasks/one.kdl", "missing.kdl"]);
    assert_exit(&run, 2);
    assert!(run.stderr().contains("missing.kdl does not exist"), "{}", run.stderr());

    for dir in ["empty", "only-hidden"] {
        let run = p.run(&["check", dir]);
        assert_exit(&run, 2);
        assert!(run.stderr().contains(&format!("no task files (*.kdl) in {dir}")), "{}", run.stderr());
    }
    assert!(!p.path().join(".cassist").exists());

    // No tasks/ folder at all: say where cassist looked and how to start.
    let p = Project::new();
    p.file("cassist.kdl", TRUSTED);
    let run = p.run(&["check"]);
    assert_exit(&run, 2);
    let err = run.stderr();
    assert!(err.contains("tasks/ does not exist"), "{err}");
    assert!(err.contains("cassist init"), "{err}");
    // plan says the same.
    let plan = p.run(&["plan"]);
    assert_exit(&plan, 2);
    assert_eq!(plan.stderr(), err);
}

// ---------------------------------------------------------------------------
// Run order

#[test]
fn run_order_is_topological_with_ties_by_name() {
    let p = Project::new();
    p.file("cassist.kdl", TRUSTED).file("tasks/1.kdl", &format!("{}{}", simple_task("c"), simple_task("a"))).file(
        "tasks/2.kdl",
        &format!("{}task \"d\" {{\n    goal \"D.\"\n    depends-on \"c\"\n}}\n", simple_task("b")),
    );
    let json = p.run(&["plan", "--json"]).json();
    assert_eq!(names(&json), ["a", "b", "c", "d"]);
    assert_eq!(task(&json, "d")["depends_on"], serde_json::json!(["c"]));

    // A dependency comes first even when its name sorts last; among ready
    // tasks the name decides, whatever the files' order.
    let p = Project::new();
    p.file("cassist.kdl", TRUSTED)
        .file("tasks/a.kdl", "task \"zeta\" {\n    goal \"Z.\"\n}\ntask \"alpha\" {\n    goal \"A.\"\n    depends-on \"zeta\" \"mid\"\n}\n")
        .file("tasks/b.kdl", "task \"mid\" {\n    goal \"M.\"\n    depends-on \"zeta\"\n}\ntask \"beta\" {\n    goal \"B.\"\n}\n")
        .file("tasks/c.kdl", &simple_task("omega"));
    let json = p.run(&["plan", "--json"]).json();
    assert_eq!(names(&json), ["beta", "omega", "zeta", "mid", "alpha"]);
    assert_eq!(task(&json, "alpha")["depends_on"], serde_json::json!(["mid", "zeta"]));
    // The human plan numbers them in the same order.
    let out = p.run(&["plan"]).stdout();
    let rows: Vec<(String, String)> = out
        .lines()
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(|l| {
            let mut w = l.split_whitespace();
            (w.next().unwrap().to_owned(), w.next().unwrap().to_owned())
        })
        .collect();
    let expected: Vec<(String, String)> = ["beta", "omega", "zeta", "mid", "alpha"]
        .iter()
        .enumerate()
        .map(|(i, n)| ((i + 1).to_string(), (*n).to_owned()))
        .collect();
    assert_eq!(rows, expected, "{out}");
    assert!(out.contains("5 tasks; 5 to run"), "{out}");
}

// ---------------------------------------------------------------------------
// -C and the project root

#[test]
fn dash_c_runs_in_another_folder() {
    let p = Project::new();
    p.file("proj/cassist.kdl", TRUSTED).file("proj/tasks/a.kdl", &simple_task("a"));
    // Without -C the current folder has no tasks.
    assert_exit(&p.run(&["check"]), 2);
    let run = p.run(&["-C", "proj", "check"]);
    assert_exit(&run, 0);
    assert_eq!(run.stdout(), "ok: 1 task in 1 file\n");
    // -C after the subcommand, with an absolute path, from elsewhere.
    let elsewhere = tempfile::tempdir().unwrap();
    let abs = p.path().join("proj");
    let run = run_in(elsewhere.path(), &["plan", "--json", "-C", abs.to_str().unwrap()], &[]);
    assert_exit(&run, 0);
    let json = run.json();
    assert_eq!(names(&json), ["a"]);
    assert_eq!(task(&json, "a")["file"], "tasks/a.kdl");
    // The state lands in the project, not in the current folder.
    assert!(abs.join(".cassist").is_dir());
    assert!(!elsewhere.path().join(".cassist").exists());

    let run = p.run(&["-C", "no/such/dir", "check"]);
    assert_exit(&run, 2);
    assert!(run.stderr().contains("cannot use -C no/such/dir"), "{}", run.stderr());
}

#[test]
fn the_project_root_is_found_from_a_subfolder() {
    let p = Project::new();
    p.file("cassist.kdl", TRUSTED)
        .file("src/deep/er/mod.py", "")
        .file("src/text.py", "x = 1\n")
        .file("tasks/a.kdl", "task \"a\" {\n    goal \"A.\"\n    context {\n        file \"src/text.py\"\n    }\n}\n");
    let sub = p.path().join("src/deep/er");
    let run = run_in(&sub, &["check"], &[("NO_COLOR", "1")]);
    assert_exit(&run, 0);
    assert_eq!(run.stdout(), "ok: 1 task in 1 file\n");
    let run = run_in(&sub, &["plan", "--json"], &[]);
    assert_exit(&run, 0);
    let json = run.json();
    assert_eq!(task(&json, "a")["file"], "tasks/a.kdl");
    assert_eq!(input(task(&json, "a"), "context"), "src/text.py");
    assert_eq!(input(task(&json, "a"), "sandbox"), "workspace-write", "the config of the root was not read");
    assert!(p.path().join(".cassist").is_dir());
    assert!(!sub.join(".cassist").exists());
    // Paths on the command line are relative to the current folder.
    let run = run_in(&sub, &["check", "../../../tasks/a.kdl"], &[]);
    assert_exit(&run, 0);

    // Without cassist.kdl, the git root is the project root.
    let p = Project::new();
    std::fs::create_dir_all(p.path().join(".git")).unwrap();
    p.file("src/x/y.py", "").file("tasks/a.kdl", &simple_task("a"));
    let run = run_in(&p.path().join("src/x"), &["check"], &[("NO_COLOR", "1")]);
    assert_exit(&run, 0);
    assert!(run.stdout().contains("ok: 1 task in 1 file"));
}

// ---------------------------------------------------------------------------
// prompt

fn prompt_project() -> Project {
    let p = Project::new();
    p.file("cassist.kdl", TRUSTED).file("src/text.py", "x = 1\n").file(
        "tasks/t.kdl",
        r#"task "add-slugify" {
    goal "Add slugify(title) to src/text.py."
    context {
        file "src/text.py"
    }
    scope {
        path "src/text.py"
    }
}
task "survey" {
    goal "Describe src/text.py."
    kind "explore"
}
task "audit" {
    goal "Review src/text.py."
    kind "review"
    sandbox "workspace-write"
}
"#,
    );
    p
}

#[test]
fn prompt_of_an_unknown_task_suggests_the_nearest() {
    let p = prompt_project();
    let run = p.run(&["prompt", "add-slugfy"]);
    assert_exit(&run, 2);
    assert_eq!(run.stdout(), "");
    assert!(run.stderr().contains("no task named `add-slugfy`"), "{}", run.stderr());
    assert!(run.stderr().contains("did you mean `add-slugify`?"), "{}", run.stderr());
    // Nothing near: point at `cassist plan`.
    let run = p.run(&["prompt", "zzzzzzzzzzzz"]);
    assert_exit(&run, 2);
    assert!(!run.stderr().contains("did you mean"), "{}", run.stderr());
    assert!(run.stderr().contains("cassist plan"), "{}", run.stderr());
}

#[test]
fn prompt_of_read_only_and_code_tasks() {
    let p = prompt_project();
    let code = p.run(&["prompt", "add-slugify"]);
    assert_exit(&code, 0);
    let code = code.stdout();
    assert_eq!(section(&code, "Goal"), "Add slugify(title) to src/text.py.\n\n");
    assert!(section(&code, "Context").contains("- `src/text.py`"), "{code}");
    let constraints = section(&code, "Constraints");
    assert!(constraints.contains("- Do not change files outside the scope: `src/text.py`."), "{code}");
    assert!(constraints.contains("Do not commit, push or pull"), "{code}");
    assert!(!constraints.contains("read-only"), "{code}");

    let explore = p.run(&["prompt", "survey"]);
    assert_exit(&explore, 0);
    let constraints = section(&explore.stdout(), "Constraints");
    assert!(
        constraints.contains("- This is a read-only explore task: do not create, modify or delete any file."),
        "{constraints}"
    );
    assert!(!constraints.contains("outside the scope"), "{constraints}");

    // A review task is read-only too, whatever sandbox it asks for (with a
    // warning).
    let review = p.run(&["prompt", "audit"]);
    assert_exit(&review, 0);
    assert!(review.stdout().contains("This is a read-only review task"), "{}", review.stdout());
    assert!(review.stderr().contains("`review` tasks are read-only; sandbox `workspace-write` is ignored"));
    let json = p.run(&["plan", "--json"]).json();
    assert_eq!(input(task(&json, "audit"), "sandbox"), "read-only");
    assert_eq!(input(task(&json, "survey"), "sandbox"), "read-only");
    assert_eq!(input(task(&json, "add-slugify"), "sandbox"), "workspace-write");
}

#[test]
fn prompt_cites_agents_md_and_claude_md_only_when_present() {
    let p = prompt_project();
    let context = |p: &Project| section(&p.run(&["prompt", "add-slugify"]).stdout(), "Context");
    let none = context(&p);
    assert!(!none.contains("AGENTS.md") && !none.contains("CLAUDE.md"), "{none}");
    assert!(!none.contains("standing instructions"), "{none}");

    p.file("AGENTS.md", "# Agents\n");
    let agents = context(&p);
    assert!(
        agents.contains("The project's standing instructions are in `AGENTS.md`: read and follow them."),
        "{agents}"
    );
    assert!(!agents.contains("CLAUDE.md"), "{agents}");

    p.file("CLAUDE.md", "# Claude\n");
    let both = context(&p);
    assert!(both.contains("standing instructions are in `AGENTS.md`, `CLAUDE.md`:"), "{both}");

    std::fs::remove_file(p.path().join("AGENTS.md")).unwrap();
    let claude = context(&p);
    assert!(claude.contains("standing instructions are in `CLAUDE.md`:"), "{claude}");
    assert!(!claude.contains("AGENTS.md"), "{claude}");

    // A folder named like one is not a file to cite; one in a subfolder is
    // not the project's.
    std::fs::remove_file(p.path().join("CLAUDE.md")).unwrap();
    std::fs::create_dir_all(p.path().join("AGENTS.md")).unwrap();
    p.file("src/CLAUDE.md", "# not the root one\n");
    let neither = context(&p);
    assert!(!neither.contains("standing instructions"), "{neither}");
}

// ---------------------------------------------------------------------------
// explain

#[test]
fn explain_lists_every_input() {
    let p = Project::new();
    p.file("cassist.kdl", TRUSTED).file("src/a.py", "a\n").file("src/b.py", "b\n").file("docs/ref.md", "r\n").file(
        "tasks/t.kdl",
        r#"task "base" {
    goal "Base."
}
task "top" {
    goal "Top goal."
    depends-on "base"
    context {
        file "src/*.py"
    }
    reference {
        file "docs/ref.md"
    }
}
"#,
    );
    let plan = p.run(&["plan", "--json"]).json();
    let top = task(&plan, "top");
    let run = p.run(&["explain", "top"]);
    assert_exit(&run, 0);
    let out = run.stdout();
    assert!(out.starts_with("task top (tasks/t.kdl)\n"), "{out}");
    assert!(out.contains(&format!("hash {}\n", top["hash"].as_str().unwrap())), "{out}");
    assert!(out.contains("state run\n"), "{out}");
    let rows: Vec<Vec<&str>> =
        out.lines().skip_while(|l| !l.starts_with("INPUT")).skip(1).map(|l| l.split_whitespace().collect()).collect();
    // Nothing recorded yet: no comparison column value.
    assert!(rows.iter().all(|r| r.len() == 4 && r[3] == "-"), "{out}");
    assert!(out.contains("never run"), "{out}");
    let rows: Vec<Vec<&str>> = rows.into_iter().map(|r| r[..3].to_vec()).collect();
    let expected: Vec<Vec<String>> = top["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            vec![
                i["kind"].as_str().unwrap().to_owned(),
                i["name"].as_str().unwrap().to_owned(),
                i["hash"].as_str().unwrap()[..16].to_owned(),
            ]
        })
        .collect();
    assert_eq!(rows, expected, "{out}");
    let kinds: Vec<&str> = rows.iter().map(|r| r[0]).collect();
    assert_eq!(
        kinds,
        ["spec", "agent", "sandbox", "template", "project", "context", "context", "reference", "dependency"],
        "{out}"
    );
    let named: Vec<&str> = rows.iter().map(|r| r[1]).collect();
    // (The project input's name is whatever plan --json says: checked above.)
    assert_eq!(named[..4], ["top", "claude", "workspace-write", "default"]);
    assert_eq!(named[5..], ["src/a.py", "src/b.py", "docs/ref.md", "base"]);

    let run = p.run(&["explain", "topp"]);
    assert_exit(&run, 2);
    assert!(run.stderr().contains("did you mean `top`?"), "{}", run.stderr());
}

#[test]
fn explain_json_has_the_key_document() {
    let p = Project::new();
    p.file("cassist.kdl", TRUSTED).file("src/a.py", "a\n").file(
        "tasks/t.kdl",
        "task \"t\" {\n    goal \"The goal.\"\n    timeout \"90s\"\n    context {\n        file \"src/a.py\"\n    }\n    constraints {\n        - \"Be brief\"\n    }\n    acceptance {\n        run \"true\" timeout=\"1m\"\n    }\n}\n",
    );
    let plan = p.run(&["plan", "--json"]).json();
    let run = p.run(&["explain", "t", "--json"]);
    assert_exit(&run, 0);
    let doc = run.json();
    assert_eq!(doc["name"], "t");
    assert_eq!(doc["hash"], plan["tasks"][0]["hash"]);
    assert_eq!(doc["state"], "run");
    let key = &doc["key"];
    assert_eq!(key["format"], 1);
    assert_eq!(key["spec"]["goal"], "The goal.");
    assert_eq!(key["spec"]["name"], "t");
    assert_eq!(key["spec"]["kind"], "code");
    assert_eq!(key["spec"]["timeout_ms"], 90_000);
    assert_eq!(key["spec"]["context"], serde_json::json!(["src/a.py"]));
    assert_eq!(key["spec"]["constraints"], serde_json::json!(["Be brief"]));
    assert_eq!(key["spec"]["acceptance"], serde_json::json!([{"run": "true", "timeout_ms": 60_000}]));
    assert_eq!(key["inputs"], plan["tasks"][0]["inputs"]);
    assert_eq!(
        key["inputs"][5],
        serde_json::json!({"kind": "context", "name": "src/a.py", "hash": blake3::hash(b"a\n").to_hex().to_string()})
    );
}

// ---------------------------------------------------------------------------
// agents

const AGENTS_CONFIG: &str = r#"trust "workspace-write"
agent "aider" {
    command "aider" "--yes-always" "--message-file" "{prompt_file}"
}
agent "fast" {
    try "claude" "codex"
}
"#;

/// The line of the `agents` table for `name`.
fn agent_row<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no row for {name} in:\n{out}"))
}

#[test]
fn agents_lists_builtin_and_custom_agents() {
    let p = Project::new();
    p.file("cassist.kdl", AGENTS_CONFIG);
    let empty = tempfile::tempdir().unwrap();
    let run = p.run_env(&["agents"], &[("PATH", empty.path().to_str().unwrap())]);
    assert_exit(&run, 0);
    let out = run.stdout();
    let first: Vec<&str> = out.lines().filter_map(|l| l.split_whitespace().next()).collect();
    assert_eq!(first, ["AGENT", "claude", "codex", "droid", "gemini", "aider", "fast"], "{out}");
    for name in ["claude", "codex", "droid", "gemini"] {
        let row = agent_row(&out, name);
        assert!(row.contains("built-in"), "{row}");
        assert!(row.contains("not found"), "{row}");
        assert!(row.trim_end().ends_with('-'), "no version expected: {row}");
    }
    assert!(agent_row(&out, "claude").contains("npm install -g @anthropic-ai/claude-code"));
    let aider = agent_row(&out, "aider");
    assert!(aider.contains("custom") && aider.contains("not found"), "{aider}");
    let fast = agent_row(&out, "fast");
    assert!(fast.contains("failover") && fast.contains("try claude, codex"), "{fast}");
    assert!(fast.contains("none of its agents is installed"), "{fast}");
}

#[test]
fn agents_shows_the_path_and_version_of_an_installed_cli() {
    use std::os::unix::fs::PermissionsExt;
    let p = Project::new();
    p.file("cassist.kdl", AGENTS_CONFIG);
    let bin = tempfile::tempdir().unwrap();
    let claude = bin.path().join("claude");
    std::fs::write(
        &claude,
        "#!/bin/sh\nif [ \"$1\" = --version ]; then echo '2.1.197 (Claude Code)'; exit 0; fi\necho 'unexpected call' >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&claude, std::fs::Permissions::from_mode(0o755)).unwrap();
    // Not executable: not installed.
    let aider = bin.path().join("aider");
    std::fs::write(&aider, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&aider, std::fs::Permissions::from_mode(0o644)).unwrap();

    let run = p.run_env(&["agents"], &[("PATH", bin.path().to_str().unwrap())]);
    assert_exit(&run, 0);
    let out = run.stdout();
    let row = agent_row(&out, "claude");
    assert!(row.contains(claude.to_str().unwrap()), "{row}");
    assert!(row.trim_end().ends_with("2.1.197 (Claude Code)"), "{row}");
    assert!(!row.contains("not found"), "{row}");
    assert!(agent_row(&out, "codex").contains("not found"), "{out}");
    assert!(agent_row(&out, "aider").contains("not found"), "{out}");
    assert!(agent_row(&out, "fast").contains("would use claude"), "{out}");

    // Without the fake CLI on PATH: not found again.
    let empty = tempfile::tempdir().unwrap();
    let run = p.run_env(&["agents"], &[("PATH", empty.path().to_str().unwrap())]);
    let out = run.stdout();
    assert!(agent_row(&out, "claude").contains("not found"), "{out}");
    assert!(!out.contains("2.1.197"), "{out}");
}

#[test]
fn agents_reports_an_invalid_config() {
    let p = Project::new();
    p.file("cassist.kdl", "trust \"workspace-writ\"\n");
    let run = p.run(&["agents"]);
    assert_exit(&run, 2);
    assert!(run.stderr().contains("unknown trust level `workspace-writ`"), "{}", run.stderr());
}

// ---------------------------------------------------------------------------
// init

#[test]
fn init_writes_a_project_that_passes_check() {
    let p = Project::new();
    let run = p.run(&["init"]);
    assert_exit(&run, 0);
    assert!(run.stdout().contains("wrote cassist.kdl and tasks/example.kdl"), "{}", run.stdout());
    let config = p.read("cassist.kdl");
    let example = p.read("tasks/example.kdl");
    assert!(config.contains("trust \"workspace-write\""), "{config}");
    assert!(example.contains("task \"example\""), "{example}");
    // No README.md to give as context yet: that part is commented out.
    assert!(example.contains("    // context {"), "{example}");
    // It is valid as written, even in a folder with nothing else in it.
    let check = p.run(&["check"]);
    assert_exit(&check, 0);
    assert_eq!(check.stdout(), "ok: 1 task in 1 file\n");
    assert_eq!(check.stderr(), "", "the written config sets a trust: no warning");
    let prompt = p.run(&["prompt", "example"]);
    assert_exit(&prompt, 0);
    assert!(prompt.stdout().contains("Add a README section"), "{}", prompt.stdout());
}

#[test]
fn init_in_a_project_with_a_readme_uses_it_as_context() {
    let p = Project::new();
    p.file("README.md", "# My project\n");
    assert_exit(&p.run(&["init"]), 0);
    let example = p.read("tasks/example.kdl");
    assert!(example.contains("\n    context {\n        file \"README.md\""), "{example}");
    let check = p.run(&["check"]);
    assert_exit(&check, 0);
    assert_eq!(check.stdout(), "ok: 1 task in 1 file\n");
    let json = p.run(&["plan", "--json"]).json();
    assert_eq!(input(task(&json, "example"), "context"), "README.md");
    assert_eq!(input(task(&json, "example"), "sandbox"), "workspace-write");
    assert_eq!(task(&json, "example")["agent"], "claude");
}

#[test]
fn a_second_init_changes_nothing() {
    let p = Project::new();
    assert_exit(&p.run(&["init"]), 0);
    // The user edits the files; init must not clobber them.
    p.file("cassist.kdl", "trust \"read-only\"\n");
    let before = tree(p.path());
    let run = p.run(&["init"]);
    assert_exit(&run, 2);
    assert!(run.stderr().contains("cassist.kdl and tasks/example.kdl already exist"), "{}", run.stderr());
    assert_eq!(tree(p.path()), before);

    // One of the two present is enough to refuse, and the other is not
    // written either.
    let p = Project::new();
    p.file("tasks/example.kdl", &simple_task("mine"));
    let before = tree(p.path());
    let run = p.run(&["init"]);
    assert_exit(&run, 2);
    assert!(run.stderr().contains("tasks/example.kdl already exists"), "{}", run.stderr());
    assert_eq!(tree(p.path()), before);
    assert!(!p.path().join("cassist.kdl").exists());
}

// ---------------------------------------------------------------------------
// completions and usage errors

#[test]
fn completions_print_a_script() {
    let p = Project::new();
    let bash = p.run(&["completions", "bash"]);
    assert_exit(&bash, 0);
    let script = bash.stdout();
    assert!(script.contains("_cassist()"), "{script}");
    assert!(script.contains("complete -F _cassist"), "{script}");
    for sub in ["check", "plan", "prompt", "explain", "agents", "init", "completions"] {
        assert!(script.contains(sub), "bash completion lacks {sub}");
    }
    let zsh = p.run(&["completions", "zsh"]);
    assert_exit(&zsh, 0);
    assert!(zsh.stdout().starts_with("#compdef cassist"), "{}", zsh.stdout());
    let fish = p.run(&["completions", "fish"]);
    assert_exit(&fish, 0);
    assert!(fish.stdout().contains("complete -c cassist"), "{}", fish.stdout());

    let bad = p.run(&["completions", "tcsh"]);
    assert_exit(&bad, 2);
    assert!(bad.stderr().contains("invalid value 'tcsh'"), "{}", bad.stderr());
}

#[test]
fn usage_errors_exit_2() {
    let p = Project::new();
    let run = p.run(&["frobnicate"]);
    assert_exit(&run, 2);
    assert!(run.stderr().contains("unrecognized subcommand 'frobnicate'"), "{}", run.stderr());
    assert_eq!(run.stdout(), "");
    let run = p.run(&["check", "--bogus"]);
    assert_exit(&run, 2);
    assert!(run.stderr().contains("--bogus"), "{}", run.stderr());
    let run = p.run(&["--color", "sometimes", "check"]);
    assert_exit(&run, 2);
    let run = p.run(&["prompt"]);
    assert_exit(&run, 2);
    assert!(run.stderr().contains("<TASK>"), "{}", run.stderr());
    let run = p.run(&[]);
    assert_exit(&run, 2);
    // The batch flags check their values, and nothing is written.
    for (args, says) in [
        (&["run", "--shard", "0/3"][..], "1 <= K <= N, got 0/3"),
        (&["run", "--shard", "4/3"][..], "1 <= K <= N, got 4/3"),
        (&["run", "--shard", "2"][..], "is not K/N"),
        (&["run", "--shard", "a/3"][..], "`a` is not a whole number"),
        (&["run", "-j", "0"][..], "0 is not in 1..=1024"),
        (&["run", "--max-cost", "lots"][..], "`lots` is not an amount in USD"),
        (&["run", "--max-cost", "-1"][..], "-1"),
    ] {
        let run = p.run(args);
        assert_exit(&run, 2);
        assert!(run.stderr().contains(says), "{args:?}: {}", run.stderr());
    }
    assert!(!p.path().join(".cassist").exists());
    // --help and --version are not errors.
    let run = p.run(&["--help"]);
    assert_exit(&run, 0);
    assert!(run.stdout().contains("Usage: cassist"), "{}", run.stdout());
    let run = p.run(&["--version"]);
    assert_exit(&run, 0);
    assert_eq!(run.stdout(), format!("cassist {}\n", env!("CARGO_PKG_VERSION")));
}

// ---------------------------------------------------------------------------
// Colours

const ESC: &str = "\x1b[";

/// A project whose `check` prints a warning (no trust) and whose plan has a
/// table: both streams have something to colour.
fn colour_project() -> Project {
    let p = Project::new();
    p.file("tasks/a.kdl", &simple_task("a"));
    p
}

#[test]
fn color_always_never_and_no_color() {
    let p = colour_project();
    // NO_COLOR=1 (set by the harness) and auto, off a terminal: none.
    let run = p.run(&["check"]);
    assert_exit(&run, 0);
    assert!(run.stderr().contains("sets no trust"), "{}", run.stderr());
    assert!(!run.stderr().contains(ESC) && !run.stdout().contains(ESC), "{}", run.transcript());
    // --color always wins, on both streams.
    let run = p.run(&["--color", "always", "check"]);
    assert!(run.stderr().contains(ESC), "{:?}", run.stderr());
    assert!(run.stderr().contains("sets no trust"));
    let run = p.run(&["plan", "--color", "always"]);
    assert!(run.stdout().contains(ESC), "{:?}", run.stdout());
    // An error diagnostic too.
    let run = p.run(&["--color", "always", "check", "nope"]);
    assert_exit(&run, 2);
    assert!(run.stderr().contains(ESC), "{:?}", run.stderr());
    // --color never: none, even without NO_COLOR.
    for args in
        [&["--color", "never", "check"][..], &["--color", "never", "plan"], &["--color", "never", "check", "nope"]]
    {
        let run = run_in(p.path(), args, &[("TERM", "xterm")]);
        assert!(!run.stderr().contains(ESC) && !run.stdout().contains(ESC), "{args:?}: {}", run.transcript());
    }
    // auto, no NO_COLOR, not a terminal: none.
    let run = run_in(p.path(), &["plan"], &[("TERM", "xterm")]);
    assert!(!run.stderr().contains(ESC) && !run.stdout().contains(ESC), "{}", run.transcript());
    // --json never has colour.
    let run = p.run(&["--color", "always", "plan", "--json"]);
    assert!(!run.stdout().contains(ESC));
    run.json();
}

/// Runs the binary on a pseudo-terminal through util-linux `script`;
/// `None` when `script` is not installed.
fn run_on_tty(dir: &Path, args: &str, env: &[(&str, &str)]) -> Option<String> {
    let ok = std::process::Command::new("script").arg("--version").output().is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("util-linux `script` not found: terminal colour checks skipped");
        return None;
    }
    let mut cmd = std::process::Command::new("script");
    cmd.current_dir(dir)
        .args(["-qec", &format!("'{}' {args}", env!("CARGO_BIN_EXE_cassist")), "/dev/null"])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("TERM", "xterm");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run script");
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn color_auto_on_a_terminal_honours_no_color() {
    let p = colour_project();
    let Some(coloured) = run_on_tty(p.path(), "check", &[]) else { return };
    assert!(coloured.contains("sets no trust"), "{coloured}");
    assert!(coloured.contains(ESC), "auto on a terminal must colour: {coloured:?}");
    let plain = run_on_tty(p.path(), "check", &[("NO_COLOR", "1")]).unwrap();
    assert!(plain.contains("sets no trust"), "{plain}");
    assert!(!plain.contains(ESC), "NO_COLOR must turn colours off: {plain:?}");
    let never = run_on_tty(p.path(), "--color never plan", &[]).unwrap();
    assert!(never.contains("TASK"), "{never}");
    assert!(!never.contains(ESC), "{never:?}");
    // An empty NO_COLOR does not count (no-color.org).
    let empty = run_on_tty(p.path(), "check", &[("NO_COLOR", "")]).unwrap();
    assert!(empty.contains(ESC), "{empty:?}");
    let dumb = run_on_tty(p.path(), "check", &[("TERM", "dumb")]).unwrap();
    assert!(!dumb.contains(ESC), "TERM=dumb: {dumb:?}");
}

// ---------------------------------------------------------------------------
// Trust

const TRUST_TASKS: &str = r#"task "edit" {
    goal "Change src/x.py."
}
task "look" {
    goal "Describe src/x.py."
    kind "explore"
}
task "careful" {
    goal "Change src/x.py carefully."
    sandbox "read-only"
}
"#;

fn sandboxes(p: &Project) -> (Run, BTreeMap<String, String>) {
    let run = p.run(&["plan", "--json"]);
    assert_exit(&run, 0);
    let json = run.json();
    let map = names(&json).into_iter().map(|n| (n.clone(), input(task(&json, &n), "sandbox"))).collect();
    (run, map)
}

fn sb(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect()
}

#[test]
fn without_trust_everything_is_read_only_with_a_warning() {
    let p = Project::new();
    p.file("tasks/t.kdl", TRUST_TASKS);
    let (run, map) = sandboxes(&p);
    assert!(run.stderr().contains("this project sets no trust: every task runs read-only"), "{}", run.stderr());
    // The help says how to opt in (miette may wrap it).
    let help = flat(&run.stderr());
    assert!(help.contains("add `trust \"workspace-write\"` to cassist.kdl"), "{help}");
    assert!(help.contains("`trust_level = \"trusted\"` to .agents/config.toml"), "{help}");
    assert_eq!(map, sb(&[("careful", "read-only"), ("edit", "read-only"), ("look", "read-only")]));
    // The human plan shows it too.
    let out = p.run(&["plan"]).stdout();
    let edit = out.lines().find(|l| l.split_whitespace().nth(1) == Some("edit")).unwrap();
    assert!(edit.contains(" read-only "), "{out}");
    // check warns too, and still succeeds.
    let check = p.run(&["check"]);
    assert_exit(&check, 0);
    assert!(check.stderr().contains("sets no trust"));
    // -q hides warnings.
    let quiet = p.run(&["check", "-q"]);
    assert_exit(&quiet, 0);
    assert_eq!(quiet.stderr(), "");

    // A task asking for more is no error without trust; it just does not get it.
    p.file("tasks/u.kdl", "task \"wants\" {\n    goal \"W.\"\n    sandbox \"workspace-write\"\n}\n");
    let (run, map) = sandboxes(&p);
    assert!(run.stderr().contains("sets no trust"));
    assert_eq!(map["wants"], "read-only");

    // An untrusted .agents/config.toml changes nothing.
    p.file(".agents/config.toml", "trust_level = \"untrusted\"\n");
    let (run, map) = sandboxes(&p);
    assert!(run.stderr().contains("sets no trust"));
    assert_eq!(map["edit"], "read-only");

    // Only read-only tasks: nothing to warn about.
    let p = Project::new();
    p.file("tasks/t.kdl", "task \"look\" {\n    goal \"L.\"\n    kind \"review\"\n}\n");
    let run = p.run(&["check"]);
    assert_exit(&run, 0);
    assert_eq!(run.stderr(), "");
}

#[test]
fn agents_config_toml_trust_gives_workspace_write() {
    let p = Project::new();
    p.file("tasks/t.kdl", TRUST_TASKS).file(".agents/config.toml", "# codex-style\ntrust_level = \"trusted\"\n");
    let (run, map) = sandboxes(&p);
    assert!(!run.stderr().contains("sets no trust"), "{}", run.stderr());
    assert_eq!(run.stderr(), "");
    assert_eq!(map, sb(&[("careful", "read-only"), ("edit", "workspace-write"), ("look", "read-only")]));
    // It counts as workspace-write: asking for full is an error.
    p.file("tasks/f.kdl", "task \"all\" {\n    goal \"A.\"\n    sandbox \"full\"\n}\n");
    let run = p.run(&["check"]);
    assert_exit(&run, 2);
    assert!(
        run.stderr().contains("asks for sandbox `full` but the project trusts only `workspace-write`"),
        "{}",
        run.stderr()
    );

    // Invalid TOML is an error, not silently untrusted.
    let p = Project::new();
    p.file("tasks/t.kdl", TRUST_TASKS).file(".agents/config.toml", "trust_level = \n");
    let run = p.run(&["check"]);
    assert_exit(&run, 2);
    assert!(run.stderr().contains(".agents/config.toml"), "{}", run.stderr());
}

#[test]
fn trust_in_cassist_kdl() {
    let p = Project::new();
    p.file("cassist.kdl", TRUSTED).file("tasks/t.kdl", TRUST_TASKS);
    let (run, map) = sandboxes(&p);
    assert_eq!(run.stderr(), "");
    assert_eq!(map, sb(&[("careful", "read-only"), ("edit", "workspace-write"), ("look", "read-only")]));

    // trust "full": a task gets full only when it asks for it.
    p.file("cassist.kdl", "trust \"full\"\n")
        .file("tasks/f.kdl", "task \"all\" {\n    goal \"A.\"\n    sandbox \"full\"\n}\n");
    let (_, map) = sandboxes(&p);
    assert_eq!(
        map,
        sb(&[("all", "full"), ("careful", "read-only"), ("edit", "workspace-write"), ("look", "read-only")])
    );

    // trust "read-only": a task asking for more is an error pointing at it.
    p.file("cassist.kdl", "trust \"read-only\"\n");
    let run = p.run(&["check"]);
    assert_exit(&run, 2);
    let err = run.stderr();
    assert!(err.contains("task `all` asks for sandbox `full` but the project trusts only `read-only`"), "{err}");
    assert!(err.contains("tasks/f.kdl:3:13"), "{err}");
    // cassist.kdl wins over .agents/config.toml.
    std::fs::remove_file(p.path().join("tasks/f.kdl")).unwrap();
    p.file(".agents/config.toml", "trust_level = \"trusted\"\n");
    let (_, map) = sandboxes(&p);
    assert_eq!(map["edit"], "read-only");
}

// ---------------------------------------------------------------------------
// Agent selection

fn agent_project(defaults: Option<&str>) -> Project {
    let p = Project::new();
    let mut config = TRUSTED.to_owned();
    if let Some(a) = defaults {
        config.push_str(&format!("defaults {{\n    agent \"{a}\"\n}}\n"));
    }
    config.push_str("agent \"mine\" {\n    command \"my-agent\" \"{prompt_file}\"\n}\n");
    p.file("cassist.kdl", &config).file(
        "tasks/t.kdl",
        "task \"own\" {\n    goal \"O.\"\n    agent \"droid\"\n}\ntask \"free\" {\n    goal \"F.\"\n}\n",
    );
    p
}

fn agents_of(p: &Project, args: &[&str], env: &[(&str, &str)]) -> (String, String) {
    let mut all = vec!["plan", "--json"];
    all.extend_from_slice(args);
    let run = p.run_env(&all, env);
    assert_exit(&run, 0);
    let json = run.json();
    let free = task(&json, "free");
    assert_eq!(free["agent"].as_str().unwrap(), input(free, "agent"), "agent field and input disagree");
    (task(&json, "own")["agent"].as_str().unwrap().to_owned(), free["agent"].as_str().unwrap().to_owned())
}

#[test]
fn agent_precedence() {
    let own = |s: &str| ("droid".to_owned(), s.to_owned());
    // Nothing set: claude.
    let p = agent_project(None);
    assert_eq!(agents_of(&p, &[], &[]), own("claude"));
    assert_eq!(agents_of(&p, &[], &[("CASSIST_AGENT", "gemini")]), own("gemini"));
    assert_eq!(agents_of(&p, &[], &[("CASSIST_AGENT", "")]), own("claude"), "an empty CASSIST_AGENT is unset");

    // defaults.agent < CASSIST_AGENT < --agent < the task's agent.
    let p = agent_project(Some("gemini"));
    assert_eq!(agents_of(&p, &[], &[]), own("gemini"));
    assert_eq!(agents_of(&p, &[], &[("CASSIST_AGENT", "codex")]), own("codex"));
    assert_eq!(agents_of(&p, &["--agent", "claude"], &[("CASSIST_AGENT", "codex")]), own("claude"));
    assert_eq!(agents_of(&p, &["--agent", "mine"], &[]), own("mine"));
    assert_eq!(agents_of(&p, &[], &[("CASSIST_AGENT", "mine")]), own("mine"));
    // The same agent however chosen gives the same hash.
    let hash = |args: &[&str], env: &[(&str, &str)]| {
        let mut all = vec!["plan", "--json"];
        all.extend_from_slice(args);
        task(&p.run_env(&all, env).json(), "free")["hash"].as_str().unwrap().to_owned()
    };
    assert_eq!(hash(&["--agent", "codex"], &[]), hash(&[], &[("CASSIST_AGENT", "codex")]));
    assert_ne!(hash(&["--agent", "codex"], &[]), hash(&[], &[]));

    // --agent reaches prompt and explain too.
    let run = p.run(&["explain", "free", "--json", "--agent", "codex"]);
    assert_exit(&run, 0);
    assert_eq!(run.json()["key"]["inputs"][1]["name"], "codex");
}

#[test]
fn an_unknown_agent_is_exit_2() {
    let p = agent_project(None);
    let run = p.run(&["plan", "--json", "--agent", "claud"]);
    assert_exit(&run, 2);
    assert_eq!(run.stdout(), "");
    assert!(run.stderr().contains("unknown agent `claud` given by --agent"), "{}", run.stderr());
    assert!(run.stderr().contains("did you mean `claude`?"), "{}", run.stderr());
    assert!(!p.path().join(".cassist").exists(), "nothing is written on invalid input");

    let run = p.run_env(&["check"], &[("CASSIST_AGENT", "kodex")]);
    assert_exit(&run, 2);
    assert!(run.stderr().contains("unknown agent `kodex` given by CASSIST_AGENT"), "{}", run.stderr());
    assert!(run.stderr().contains("did you mean `codex`?"), "{}", run.stderr());

    // An unknown defaults.agent is an error in cassist.kdl.
    let p = agent_project(Some("gemnii"));
    let run = p.run(&["check"]);
    assert_exit(&run, 2);
    assert!(run.stderr().contains("gemnii"), "{}", run.stderr());
    assert!(run.stderr().contains("cassist.kdl"), "{}", run.stderr());
}

#[test]
fn closed_stdout_is_not_a_crash() {
    // `cassist plan --json | head -c 1`: the reader goes away early.
    let p = Project::new();
    p.file("cassist.kdl", "trust \"workspace-write\"\n");
    for i in 0..300 {
        p.file(&format!("tasks/t{i}.kdl"), &format!("task \"t{i}\" {{ goal \"goal {i}\" }}\n"));
    }
    let out = std::process::Command::new("sh")
        .current_dir(p.path())
        .arg("-c")
        .arg(format!("'{}' plan --json | head -c 1 >/dev/null; true", env!("CARGO_BIN_EXE_cassist")))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "cassist panicked on a closed pipe:\n{stderr}");
    assert!(!stderr.contains("Broken pipe"), "{stderr}");
}

#[test]
fn run_with_an_invalid_spec_exits_2_and_writes_nothing() {
    let p = Project::new();
    p.file("cassist.kdl", "trust \"workspace-write\"\n").file("tasks/a.kdl", "task \"x\" { gaol \"y\" }\n");
    let run = p.run(&["run"]);
    assert_eq!(run.code(), 2, "{}", run.transcript());
    assert!(run.stderr().contains("did you mean `goal`?"), "{}", run.stderr());
    assert!(!p.path().join(".cassist").exists(), "run wrote .cassist/ for an invalid spec");
    assert!(!p.path().join("cassist.lock").exists());
}
