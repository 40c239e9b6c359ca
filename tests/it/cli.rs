//! Command behaviour (SPEC 1, 2, 5): check, discovery, run order, -C and
//! the project root, prompt, explain, agents, init, completions, colours,
//! trust and agent selection.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::Stdio;

use serde_json::Value;

use crate::support::{
    Output, Project, Test, copy_tree, flat, map as map_of, names, section, snapshot, task, write_executable,
};

/// The `name` of the task's input of kind `kind` (the first one).
fn input(task: &Value, kind: &str) -> String {
    task["inputs"].as_array().unwrap().iter().find(|i| i["kind"] == kind).unwrap_or_else(|| panic!("no {kind} input"))
        ["name"]
        .as_str()
        .unwrap()
        .to_owned()
}

const TRUSTED: &str = "trust \"workspace-write\"\n";

fn simple_task(name: &str) -> String {
    format!("task \"{name}\" {{\n    goal \"Do {name}.\"\n}}\n")
}

/// A project with `cassist.kdl` trusting the workspace, and `files`.
fn trusted(files: &[(&str, &str)]) -> Project {
    files.iter().fold(Test::new().file("cassist.kdl", TRUSTED), |t, (rel, text)| t.file(rel, text)).build()
}

// ---------------------------------------------------------------------------
// check

#[test]
fn check_reports_counts_and_writes_nothing() {
    let p = trusted(&[
        ("src/text.py", "x = 1\n"),
        (
            "tasks/text.kdl",
            "task \"a\" {\n    goal \"A.\"\n    context {\n        file \"src/text.py\"\n    }\n}\n\ntask \"b\" {\n    goal \"B.\"\n    depends-on \"a\"\n}\n",
        ),
        ("tasks/more/c.kdl", &simple_task("c")),
    ]);
    let before = snapshot(p.path(), &[]);
    // A trusted valid project gives no warning.
    p.cassist(&["check"]).stdout("ok: 3 tasks in 2 files\n").stderr("").exec();
    assert!(!p.exists(".cassist"), "check wrote .cassist/");
    assert_eq!(snapshot(p.path(), &[]), before, "check changed the project");

    // Singular forms.
    let p = trusted(&[("tasks/one.kdl", &simple_task("solo"))]);
    p.cassist(&["check"]).stdout("ok: 1 task in 1 file\n").exec();
    // -q: nothing at all.
    p.cassist(&["check", "-q"]).stdout("").exec();
}

#[test]
fn check_fails_with_exit_2_and_writes_nothing_on_an_invalid_task() {
    let p = trusted(&[
        ("tasks/good.kdl", &simple_task("good")),
        ("tasks/bad.kdl", "task \"bad\" {\n    goal \"B.\"\n    agent \"claud\"\n}\n"),
    ]);
    p.cassist(&["check"])
        .status(2)
        .stdout("")
        .stderr_has("unknown agent `claud`")
        .stderr_has("did you mean `claude`?")
        // The diagnostic points at the value.
        .stderr_has("tasks/bad.kdl:3:11")
        .stderr_has("error: 1 error in tasks/bad.kdl; nothing was run")
        .exec();
    assert!(!p.exists(".cassist"));
}

/// A model name is one word: in a task, in `defaults` and from `--model`
/// (it becomes one argument of the agent's command).
#[test]
fn a_model_that_is_no_name_is_a_diagnostic() {
    let p = trusted(&[("tasks/t.kdl", "task \"a\" {\n    goal \"G.\"\n    model \"\"\n}\n")]);
    let out = p.cassist(&["check"]).status(2).exec();
    assert!(out.stderr.contains("invalid model name ``") && out.stderr.contains("t.kdl:3"), "{}", out.stderr);
    p.file("tasks/t.kdl", "task \"a\" {\n    goal \"G.\"\n    model \"claude sonnet\"\n}\n");
    p.cassist(&["check"]).status(2).stderr_has("invalid model name `claude sonnet`").exec();
    p.file("tasks/t.kdl", simple_task("a"));
    p.cassist(&["check"]).exec();
    p.cassist(&["plan", "--model", " "]).status(2).stderr_has("invalid model name ` ` given by --model").exec();
    p.edit("cassist.kdl", "trust", "defaults {\n    model \"a\tb\"\n}\ntrust");
    p.cassist(&["check"]).status(2).stderr_has("invalid model name").exec();
}

#[test]
fn files_nested_too_deep_are_a_diagnostic_not_a_crash() {
    // The KDL parser recurses once per level: hundreds of levels used to
    // overflow its stack (exit 134).
    let deep =
        |depth: usize| format!("task \"t\" {{\n    goal \"g\"\n}}\nx {}{}\n", "{ y ".repeat(depth), "}".repeat(depth));
    for (file, config) in [("tasks/deep.kdl", TRUSTED.to_owned()), ("tasks/t.kdl", format!("{TRUSTED}{}", deep(500)))] {
        let p = trusted(&[("tasks/t.kdl", &simple_task("t"))]);
        p.file("cassist.kdl", &config);
        if file == "tasks/deep.kdl" {
            p.file(file, deep(100_000));
        }
        let where_ = if file == "tasks/deep.kdl" { file } else { "cassist.kdl" };
        p.cassist(&["check"])
            .status(2)
            .stdout("")
            .stderr_has(&format!("{where_} is nested more than 32 levels deep"))
            .stderr_has("nothing was run")
            .exec();
        p.cassist(&["run"]).status(2).stderr_has("nested more than 32 levels").exec();
        assert!(!p.exists(".cassist"), "nothing is written");
    }
}

#[test]
fn instructions_and_template_through_a_symlink_out_of_the_project_are_refused() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.md"), "leaked {goal}\n").unwrap();
    for node in ["instructions", "prompt-template"] {
        let p = trusted(&[("tasks/t.kdl", &simple_task("t"))]);
        std::fs::create_dir_all(p.path().join("docs")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret.md"), p.path().join("docs/agent.md")).unwrap();
        p.file("cassist.kdl", format!("{TRUSTED}{node} \"docs/agent.md\"\n"));
        p.cassist(&["check"])
            .status(2)
            .stderr_has("`docs/agent.md` leads outside the project (to ")
            .stderr_has("secret.md)")
            .stderr_has("cassist.kdl:2:")
            .exec();
        p.cassist(&["prompt", "t"]).status(2).stdout_lacks("leaked").exec();
        assert!(!p.exists(".cassist"), "nothing is written");
    }
}

// ---------------------------------------------------------------------------
// Discovery

fn discovery_project() -> Project {
    trusted(&[
        ("tasks/one.kdl", &simple_task("a")),
        ("tasks/sub/deep/two.kdl", &format!("{}{}", simple_task("b"), simple_task("c"))),
        ("tasks/notes.txt", "not a task file {{{"),
        ("tasks/README.md", "task \"x\" {"),
        ("tasks/.draft/x.kdl", "task \"draft\" {\n    goal 42\n    nonsense\n"),
        ("tasks/sub/.hidden/y.kdl", "task {"),
        (".cassist/junk.kdl", "not { kdl"),
    ])
}

#[test]
fn discovery_walks_folders_and_skips_hidden_ones() {
    let p = discovery_project();
    p.cassist(&["check"]).stdout("ok: 3 tasks in 2 files\n").exec();
    let json = p.cassist(&["plan", "--json"]).exec().json();
    let files: Vec<(&str, &str)> = json["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap(), t["file"].as_str().unwrap()))
        .collect();
    assert_eq!(files, [("a", "tasks/one.kdl"), ("b", "tasks/sub/deep/two.kdl"), ("c", "tasks/sub/deep/two.kdl")]);

    // Walking the project root: cassist.kdl is the config, not a task
    // file, and .cassist/ is skipped.
    p.cassist(&["check", "."]).stdout("ok: 3 tasks in 2 files\n").exec();
}

#[test]
fn discovery_takes_explicit_files_and_folders() {
    let p = discovery_project();
    p.cassist(&["check", "tasks/one.kdl"]).stdout("ok: 1 task in 1 file\n").exec();
    p.cassist(&["check", "tasks/sub", "tasks/one.kdl"]).stdout("ok: 3 tasks in 2 files\n").exec();
    // The same file twice counts once.
    p.cassist(&["check", "tasks/one.kdl", "tasks/one.kdl"]).stdout("ok: 1 task in 1 file\n").exec();
    // A file named explicitly is read even in a hidden folder.
    p.cassist(&["check", "tasks/.draft/x.kdl"]).status(2).stderr_has("tasks/.draft/x.kdl").exec();
}

#[test]
fn discovery_errors_for_missing_paths_and_empty_folders() {
    let p = trusted(&[("tasks/one.kdl", &simple_task("a")), ("only-hidden/.x/t.kdl", &simple_task("h"))]);
    std::fs::create_dir_all(p.path().join("empty")).unwrap();

    p.cassist(&["check", "nope"]).status(2).stdout("").stderr_has("nope does not exist").exec();
    p.cassist(&["check", "tasks/one.kdl", "missing.kdl"]).status(2).stderr_has("missing.kdl does not exist").exec();
    for dir in ["empty", "only-hidden"] {
        p.cassist(&["check", dir]).status(2).stderr_has(&format!("no task files (*.kdl) in {dir}")).exec();
    }
    assert!(!p.exists(".cassist"));

    // No tasks/ folder at all: say where cassist looked and how to start.
    let p = trusted(&[]);
    let check = p.cassist(&["check"]).status(2).stderr_has("tasks/ does not exist").stderr_has("cassist init").exec();
    // plan says the same.
    p.cassist(&["plan"]).status(2).stderr(&check.stderr).exec();
}

// ---------------------------------------------------------------------------
// Run order

#[test]
fn run_order_is_topological_with_ties_by_name() {
    let p = trusted(&[
        ("tasks/1.kdl", &format!("{}{}", simple_task("c"), simple_task("a"))),
        ("tasks/2.kdl", &format!("{}task \"d\" {{\n    goal \"D.\"\n    depends-on \"c\"\n}}\n", simple_task("b"))),
    ]);
    let json = p.cassist(&["plan", "--json"]).exec().json();
    assert_eq!(names(&json), ["a", "b", "c", "d"]);
    assert_eq!(task(&json, "d")["depends_on"], serde_json::json!(["c"]));

    // A dependency comes first even when its name sorts last; among ready
    // tasks the name decides, whatever the files' order.
    let p = trusted(&[
        (
            "tasks/a.kdl",
            "task \"zeta\" {\n    goal \"Z.\"\n}\ntask \"alpha\" {\n    goal \"A.\"\n    depends-on \"zeta\" \"mid\"\n}\n",
        ),
        (
            "tasks/b.kdl",
            "task \"mid\" {\n    goal \"M.\"\n    depends-on \"zeta\"\n}\ntask \"beta\" {\n    goal \"B.\"\n}\n",
        ),
        ("tasks/c.kdl", &simple_task("omega")),
    ]);
    let json = p.cassist(&["plan", "--json"]).exec().json();
    assert_eq!(names(&json), ["beta", "omega", "zeta", "mid", "alpha"]);
    assert_eq!(task(&json, "alpha")["depends_on"], serde_json::json!(["mid", "zeta"]));
    // The human plan numbers them in the same order.
    let out = p.cassist(&["plan"]).stdout_has("5 tasks; 5 to run").exec().stdout;
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
}

// ---------------------------------------------------------------------------
// -C and the project root

#[test]
fn dash_c_runs_in_another_folder() {
    let p = Test::new().file("proj/cassist.kdl", TRUSTED).file("proj/tasks/a.kdl", simple_task("a")).build();
    // Without -C the current folder has no tasks.
    p.cassist(&["check"]).status(2).exec();
    p.cassist(&["-C", "proj", "check"]).stdout("ok: 1 task in 1 file\n").exec();
    // -C after the subcommand, with an absolute path, from elsewhere.
    let elsewhere = tempfile::tempdir().unwrap();
    let abs = p.path().join("proj");
    let json = p.cassist(&["plan", "--json", "-C", abs.to_str().unwrap()]).current_dir(elsewhere.path()).exec().json();
    assert_eq!(names(&json), ["a"]);
    assert_eq!(task(&json, "a")["file"], "tasks/a.kdl");
    // The state lands in the project, not in the current folder.
    assert!(abs.join(".cassist").is_dir());
    assert!(!elsewhere.path().join(".cassist").exists());

    p.cassist(&["-C", "no/such/dir", "check"]).status(2).stderr_has("cannot use -C no/such/dir").exec();
}

#[test]
fn the_project_root_is_found_from_a_subfolder() {
    let p = trusted(&[
        ("src/deep/er/mod.py", ""),
        ("src/text.py", "x = 1\n"),
        ("tasks/a.kdl", "task \"a\" {\n    goal \"A.\"\n    context {\n        file \"src/text.py\"\n    }\n}\n"),
    ]);
    let sub = p.path().join("src/deep/er");
    p.cassist(&["check"]).current_dir(&sub).stdout("ok: 1 task in 1 file\n").exec();
    let json = p.cassist(&["plan", "--json"]).current_dir(&sub).exec().json();
    assert_eq!(task(&json, "a")["file"], "tasks/a.kdl");
    assert_eq!(input(task(&json, "a"), "context"), "src/text.py");
    assert_eq!(input(task(&json, "a"), "sandbox"), "workspace-write", "the config of the root was not read");
    assert!(p.exists(".cassist"));
    assert!(!sub.join(".cassist").exists());
    // Paths on the command line are relative to the current folder.
    p.cassist(&["check", "../../../tasks/a.kdl"]).current_dir(&sub).exec();

    // Without cassist.kdl, the git root is the project root.
    let p = Test::new().file("src/x/y.py", "").file("tasks/a.kdl", simple_task("a")).build();
    std::fs::create_dir_all(p.path().join(".git")).unwrap();
    p.cassist(&["check"]).current_dir(&p.path().join("src/x")).stdout_has("ok: 1 task in 1 file").exec();
}

// ---------------------------------------------------------------------------
// prompt

fn prompt_project() -> Project {
    trusted(&[
        ("src/text.py", "x = 1\n"),
        (
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
        ),
    ])
}

#[test]
fn prompt_of_an_unknown_task_suggests_the_nearest() {
    let p = prompt_project();
    p.cassist(&["prompt", "add-slugfy"])
        .status(2)
        .stdout("")
        .stderr_has("no task named `add-slugfy`")
        .stderr_has("did you mean `add-slugify`?")
        .exec();
    // Nothing near: point at `cassist plan`.
    p.cassist(&["prompt", "zzzzzzzzzzzz"]).status(2).stderr_lacks("did you mean").stderr_has("cassist plan").exec();
}

#[test]
fn prompt_of_read_only_and_code_tasks() {
    let p = prompt_project();
    let code = p.cassist(&["prompt", "add-slugify"]).exec().stdout;
    assert_eq!(section(&code, "Goal"), "Add slugify(title) to src/text.py.\n\n");
    assert!(section(&code, "Context").contains("- `src/text.py`"), "{code}");
    let constraints = section(&code, "Constraints");
    assert!(constraints.contains("- Do not change files outside the scope: `src/text.py`."), "{code}");
    assert!(constraints.contains("Do not commit, push or pull"), "{code}");
    assert!(!constraints.contains("read-only"), "{code}");

    let explore = p.cassist(&["prompt", "survey"]).exec().stdout;
    let constraints = section(&explore, "Constraints");
    assert!(
        constraints.contains("- This is a read-only explore task: do not create, modify or delete any file."),
        "{constraints}"
    );
    assert!(!constraints.contains("outside the scope"), "{constraints}");

    // A review task is read-only too, whatever sandbox it asks for (with a
    // warning).
    p.cassist(&["prompt", "audit"])
        .stdout_has("This is a read-only review task")
        .stderr_has("`review` tasks are read-only; sandbox `workspace-write` is ignored")
        .exec();
    let json = p.cassist(&["plan", "--json"]).exec().json();
    assert_eq!(input(task(&json, "audit"), "sandbox"), "read-only");
    assert_eq!(input(task(&json, "survey"), "sandbox"), "read-only");
    assert_eq!(input(task(&json, "add-slugify"), "sandbox"), "workspace-write");
}

#[test]
fn prompt_cites_agents_md_and_claude_md_only_when_present() {
    let p = prompt_project();
    let context = |p: &Project| section(&p.cassist(&["prompt", "add-slugify"]).exec().stdout, "Context").to_owned();
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
    let p = trusted(&[
        ("src/a.py", "a\n"),
        ("src/b.py", "b\n"),
        ("docs/ref.md", "r\n"),
        (
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
        ),
    ]);
    let plan = p.cassist(&["plan", "--json"]).exec().json();
    let top = task(&plan, "top");
    let out = p.cassist(&["explain", "top"]).exec().stdout;
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

    p.cassist(&["explain", "topp"]).status(2).stderr_has("did you mean `top`?").exec();
}

#[test]
fn explain_json_has_the_key_document() {
    let p = trusted(&[
        ("src/a.py", "a\n"),
        (
            "tasks/t.kdl",
            "task \"t\" {\n    goal \"The goal.\"\n    timeout \"90s\"\n    context {\n        file \"src/a.py\"\n    }\n    constraints {\n        - \"Be brief\"\n    }\n    acceptance {\n        run \"true\" timeout=\"1m\"\n    }\n}\n",
        ),
    ]);
    let plan = p.cassist(&["plan", "--json"]).exec().json();
    let doc = p.cassist(&["explain", "t", "--json"]).exec().json();
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
    let p = Test::new().file("cassist.kdl", AGENTS_CONFIG).build();
    let empty = tempfile::tempdir().unwrap();
    let out = p.cassist(&["agents"]).env("PATH", empty.path()).exec().stdout;
    let (table, install) = out.split_once("\n\n").unwrap_or((&out, ""));
    let first: Vec<&str> = table.lines().filter_map(|l| l.split_whitespace().next()).collect();
    assert_eq!(first, ["AGENT", "claude", "codex", "droid", "gemini", "aider", "fast"], "{out}");
    // Each missing CLI's install command on a line of its own, whole, to
    // paste into a shell: the npm packages of AGENT-CLIS.md.
    let lines: Vec<&str> = install.lines().skip(1).map(str::trim).collect();
    assert_eq!(
        lines,
        [
            "npm install -g @anthropic-ai/claude-code",
            "npm install -g @openai/codex",
            "npm install -g droid",
            "npm install -g @google/gemini-cli",
        ],
        "{out}"
    );
    for name in ["claude", "codex", "droid", "gemini"] {
        let row = agent_row(&out, name);
        assert!(row.contains("built-in"), "{row}");
        assert!(row.contains("not found"), "{row}");
        assert!(row.trim_end().ends_with('-'), "no version expected: {row}");
    }
    let aider = agent_row(&out, "aider");
    assert!(aider.contains("custom") && aider.contains("not found"), "{aider}");
    let fast = agent_row(&out, "fast");
    assert!(fast.contains("failover") && fast.contains("try claude, codex"), "{fast}");
    assert!(fast.contains("none of its agents is installed"), "{fast}");
}

#[test]
fn agents_shows_the_path_and_version_of_an_installed_cli() {
    let p = Test::new().file("cassist.kdl", AGENTS_CONFIG).build();
    let bin = tempfile::tempdir().unwrap();
    let claude = bin.path().join("claude");
    write_executable(
        &claude,
        "#!/bin/sh\nif [ \"$1\" = --version ]; then echo '2.1.197 (Claude Code)'; exit 0; fi\necho 'unexpected call' >&2\nexit 1\n",
    );
    // Not executable: not installed.
    std::fs::write(bin.path().join("aider"), "#!/bin/sh\n").unwrap();

    let out = p.cassist(&["agents"]).env("PATH", bin.path()).exec().stdout;
    let row = agent_row(&out, "claude");
    assert!(row.contains(claude.to_str().unwrap()), "{row}");
    assert!(row.trim_end().ends_with("2.1.197 (Claude Code)"), "{row}");
    assert!(!row.contains("not found"), "{row}");
    assert!(agent_row(&out, "codex").contains("not found"), "{out}");
    assert!(agent_row(&out, "aider").contains("not found"), "{out}");
    assert!(agent_row(&out, "fast").contains("would use claude"), "{out}");

    // Without the fake CLI on PATH: not found again.
    let empty = tempfile::tempdir().unwrap();
    let out = p.cassist(&["agents"]).env("PATH", empty.path()).exec().stdout;
    assert!(agent_row(&out, "claude").contains("not found"), "{out}");
    assert!(!out.contains("2.1.197"), "{out}");
}

/// A CLI asked its version writes state of its own (in HOME, its XDG
/// folders and TMPDIR, as Gemini CLI and Codex do): cassist runs the probe
/// with a HOME and TMPDIR of its own, removed after it, so none of that
/// reaches the user's folders.
#[test]
fn the_version_probe_writes_nothing_in_the_users_folders() {
    let p = Test::new().file("cassist.kdl", AGENTS_CONFIG).build();
    let bin = tempfile::tempdir().unwrap();
    write_executable(
        &bin.path().join("claude"),
        "#!/bin/sh
[ \"$1\" = --version ] || exit 1
echo '2.1.197 (Claude Code)'
\
         mkdir -p \"$HOME/.claude\" \"${XDG_CACHE_HOME:-$HOME/.cache}\" && echo state > \"$HOME/.claude/state.json\"\n\
         echo cache > \"${XDG_CACHE_HOME:-$HOME/.cache}/claude.tmp\"\n\
         echo tmp > \"${TMPDIR:-/tmp}/claude-version.tmp\"\n",
    );
    let xdg = p.home().join("xdg-cache");
    std::fs::create_dir_all(&xdg).unwrap();
    let out = p.cassist(&["agents"]).env("PATH", bin.path()).env("XDG_CACHE_HOME", &xdg).exec().stdout;
    assert!(agent_row(&out, "claude").trim_end().ends_with("2.1.197 (Claude Code)"), "{out}");
    assert_eq!(p.home_files(), BTreeMap::new(), "the probe wrote HOME");
    let left: Vec<_> = std::fs::read_dir(p.tmp()).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(left.is_empty(), "the probe left in TMPDIR: {left:?}");
}

#[test]
fn agents_reports_an_invalid_config() {
    let p = Test::new().file("cassist.kdl", "trust \"workspace-writ\"\n").build();
    p.cassist(&["agents"]).status(2).stderr_has("unknown trust level `workspace-writ`").exec();
}

// ---------------------------------------------------------------------------
// init

#[test]
fn init_writes_a_project_that_passes_check() {
    let p = Test::new().build();
    p.cassist(&["init"]).stdout_has("wrote cassist.kdl and tasks/example.kdl").exec();
    let config = p.read("cassist.kdl");
    let example = p.read("tasks/example.kdl");
    assert!(config.contains("trust \"workspace-write\""), "{config}");
    assert!(example.contains("task \"example\""), "{example}");
    // No README.md to give as context yet: that part is commented out.
    assert!(example.contains("    // context {"), "{example}");
    // It is valid as written, even in a folder with nothing else in it;
    // the written config sets a trust: no warning.
    p.cassist(&["check"]).stdout("ok: 1 task in 1 file\n").stderr("").exec();
    p.cassist(&["prompt", "example"]).stdout_has("Add a README section").exec();
}

#[test]
fn init_in_a_project_with_a_readme_uses_it_as_context() {
    let p = Test::new().file("README.md", "# My project\n").build();
    p.cassist(&["init"]).exec();
    let example = p.read("tasks/example.kdl");
    assert!(example.contains("\n    context {\n        file \"README.md\""), "{example}");
    p.cassist(&["check"]).stdout("ok: 1 task in 1 file\n").exec();
    let json = p.cassist(&["plan", "--json"]).exec().json();
    assert_eq!(input(task(&json, "example"), "context"), "README.md");
    assert_eq!(input(task(&json, "example"), "sandbox"), "workspace-write");
    assert_eq!(task(&json, "example")["agent"], "claude");
}

#[test]
fn a_second_init_changes_nothing() {
    let p = Test::new().build();
    p.cassist(&["init"]).exec();
    // The user edits the files; init must not clobber them.
    p.file("cassist.kdl", "trust \"read-only\"\n");
    let before = snapshot(p.path(), &[]);
    p.cassist(&["init"]).status(2).stderr_has("cassist.kdl and tasks/example.kdl already exist").exec();
    assert_eq!(snapshot(p.path(), &[]), before);

    // One of the two present is enough to refuse, and the other is not
    // written either.
    let p = Test::new().file("tasks/example.kdl", simple_task("mine")).build();
    let before = snapshot(p.path(), &[]);
    p.cassist(&["init"]).status(2).stderr_has("tasks/example.kdl already exists").no_file("cassist.kdl").exec();
    assert_eq!(snapshot(p.path(), &[]), before);
}

// ---------------------------------------------------------------------------
// completions and usage errors

/// What bash completes for `words` (the last one being completed) in the
/// project, through the script of `cassist completions bash`, sourced in a
/// real bash that finds `cassist` on its PATH: the whole protocol.
fn bash_completes(p: &Project, words: &[&str]) -> Vec<String> {
    let bin = Path::new(crate::support::CASSIST).parent().unwrap();
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let script = format!(
        "source <(cassist completions bash) || exit 9\n\
         COMP_WORDS=(cassist {words}); COMP_CWORD={cword}; COMP_TYPE=9\n\
         _clap_complete_cassist cassist {current} {previous}\n\
         printf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        words = quoted.join(" "),
        cword = words.len(),
        current = quoted.last().unwrap(),
        previous = if words.len() > 1 { quoted[words.len() - 2].clone() } else { "cassist".to_owned() },
    );
    let out = std::process::Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &script])
        .current_dir(p.path())
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("HOME", p.path())
        .output()
        .expect("bash");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().filter(|l| !l.is_empty()).map(str::to_owned).collect()
}

#[test]
fn completions_complete_subcommands_and_task_names() {
    let p = Test::new()
        .tasks(
            "task \"add-slugify\" {\n    goal \"a\"\n}\ntask \"add-truncate\" {\n    goal \"b\"\n}\ntask \"survey-textkit\" {\n    goal \"c\"\n}\n",
        )
        .build();
    p.cassist(&["completions", "bash"]).stdout_has("complete -o nospace").stdout_has("CASSIST_COMPLETE").exec();
    let subcommands = bash_completes(&p, &[""]);
    for sub in ["run", "check", "plan", "prompt", "explain", "agents", "init", "demo", "completions"] {
        assert!(subcommands.iter().any(|s| s == sub), "{sub} in {subcommands:?}");
    }
    assert!(!subcommands.iter().any(|s| s.starts_with("__")), "hidden helpers are not offered: {subcommands:?}");
    // Task names of the project, after `prompt`, `explain` and `--filter`.
    assert_eq!(bash_completes(&p, &["prompt", "add-"]), ["add-slugify", "add-truncate"]);
    assert_eq!(bash_completes(&p, &["explain", "sur"]), ["survey-textkit"]);
    assert_eq!(bash_completes(&p, &["run", "--filter", "add-t"]), ["add-truncate"]);
    // `-C DIR`: the tasks of that project.
    let outer = Test::new().build();
    let inner = outer.path().join("proj");
    std::fs::create_dir_all(&inner).unwrap();
    copy_tree(p.path(), &inner);
    assert_eq!(bash_completes(&outer, &["-C", "proj", "prompt", "add-s"]), ["add-slugify"]);
    assert_eq!(bash_completes(&outer, &["prompt", "add-s"]), Vec::<String>::new());
    // A task file with an error elsewhere still names its tasks.
    p.file("tasks/t.kdl", "task \"add-slugify\" {\n    goal \"a\"\n    timeout \"1.5m\"\n}\n");
    assert_eq!(bash_completes(&p, &["prompt", "add"]), ["add-slugify"]);

    let zsh = p.cassist(&["completions", "zsh"]).exec();
    assert!(zsh.stdout.starts_with("#compdef cassist"), "{}", zsh.stdout);
    p.cassist(&["completions", "fish"]).stdout_has("complete --keep-order --exclusive --command cassist").exec();
    p.cassist(&["completions", "tcsh"]).status(2).stderr_has("invalid value 'tcsh'").exec();
    // Completing writes nothing into the project.
    assert!(!p.exists(".cassist"));
}

#[test]
fn usage_errors_exit_2() {
    let p = Test::new().build();
    p.cassist(&["frobnicate"]).status(2).stderr_has("unrecognized subcommand 'frobnicate'").stdout("").exec();
    p.cassist(&["check", "--bogus"]).status(2).stderr_has("--bogus").exec();
    p.cassist(&["--color", "sometimes", "check"]).status(2).exec();
    p.cassist(&["prompt"]).status(2).stderr_has("<TASK>").exec();
    p.cassist(&[]).status(2).exec();
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
        p.cassist(args).label(&format!("{args:?}")).status(2).stderr_has(says).exec();
    }
    assert!(!p.exists(".cassist"));
    // --help and --version are not errors.
    p.cassist(&["--help"]).stdout_has("Usage: cassist").exec();
    p.cassist(&["--version"]).stdout(&format!("cassist {}\n", env!("CARGO_PKG_VERSION"))).exec();
}

// ---------------------------------------------------------------------------
// Colours

const ESC: &str = "\x1b[";

/// A project whose `check` prints a warning (no trust) and whose plan has a
/// table: both streams have something to colour.
fn colour_project() -> Project {
    Test::new().file("tasks/a.kdl", simple_task("a")).build()
}

/// Neither stream of `out` holds a colour.
#[track_caller]
fn assert_no_colour(out: &Output) {
    assert!(!out.stderr.contains(ESC) && !out.stdout.contains(ESC), "{}", out.transcript());
}

#[test]
fn color_always_never_and_no_color() {
    let p = colour_project();
    // NO_COLOR=1 (set by the harness) and auto, off a terminal: none.
    assert_no_colour(&p.cassist(&["check"]).stderr_has("sets no trust").exec());
    // --color always wins, on both streams.
    p.cassist(&["--color", "always", "check"]).stderr_has(ESC).stderr_has("sets no trust").exec();
    p.cassist(&["plan", "--color", "always"]).stdout_has(ESC).exec();
    // An error diagnostic too.
    p.cassist(&["--color", "always", "check", "nope"]).status(2).stderr_has(ESC).exec();
    // --color never: none, even without NO_COLOR.
    for (args, status) in [
        (&["--color", "never", "check"][..], 0),
        (&["--color", "never", "plan"], 0),
        (&["--color", "never", "check", "nope"], 2),
    ] {
        let out =
            p.cassist(args).unset("NO_COLOR").env("TERM", "xterm").label(&format!("{args:?}")).status(status).exec();
        assert_no_colour(&out);
    }
    // auto, no NO_COLOR, not a terminal: none.
    assert_no_colour(&p.cassist(&["plan"]).unset("NO_COLOR").env("TERM", "xterm").exec());
    // --json never has colour.
    let out = p.cassist(&["--color", "always", "plan", "--json"]).stdout_lacks(ESC).exec();
    out.json();
}

#[test]
fn color_auto_on_a_terminal_honours_no_color() {
    let p = colour_project();
    // What `cassist ARGS` writes to a terminal (TERM=xterm, no NO_COLOR).
    let tty = |args: &[&str], env: &[(&str, &str)]| {
        p.cassist(args).unset("NO_COLOR").env("TERM", "xterm").envs(env).on_tty().stdout
    };
    let coloured = tty(&["check"], &[]);
    assert!(coloured.contains("sets no trust"), "{coloured}");
    assert!(coloured.contains(ESC), "auto on a terminal must colour: {coloured:?}");
    let plain = tty(&["check"], &[("NO_COLOR", "1")]);
    assert!(plain.contains("sets no trust"), "{plain}");
    assert!(!plain.contains(ESC), "NO_COLOR must turn colours off: {plain:?}");
    let never = tty(&["--color", "never", "plan"], &[]);
    assert!(never.contains("TASK"), "{never}");
    assert!(!never.contains(ESC), "{never:?}");
    // An empty NO_COLOR does not count (no-color.org).
    let empty = tty(&["check"], &[("NO_COLOR", "")]);
    assert!(empty.contains(ESC), "{empty:?}");
    let dumb = tty(&["check"], &[("TERM", "dumb")]);
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

/// `plan --json`: its output, and each task's sandbox.
fn sandboxes(p: &Project) -> (Output, BTreeMap<String, String>) {
    let run = p.cassist(&["plan", "--json"]).exec();
    let json = run.json();
    let map = names(&json).into_iter().map(|n| (n.clone(), input(task(&json, &n), "sandbox"))).collect();
    (run, map)
}

#[test]
fn without_trust_everything_is_read_only_with_a_warning() {
    let p = Test::new().file("tasks/t.kdl", TRUST_TASKS).build();
    let (run, map) = sandboxes(&p);
    assert!(run.stderr.contains("this project sets no trust: every task runs read-only"), "{}", run.stderr);
    // The help says how to opt in (miette may wrap it).
    let help = flat(&run.stderr);
    assert!(help.contains("add `trust \"workspace-write\"` to cassist.kdl"), "{help}");
    assert!(help.contains("`trust_level = \"trusted\"` to .agents/config.toml"), "{help}");
    assert_eq!(map, map_of(&[("careful", "read-only"), ("edit", "read-only"), ("look", "read-only")]));
    // The human plan shows it too.
    let out = p.cassist(&["plan"]).exec().stdout;
    let edit = out.lines().find(|l| l.split_whitespace().nth(1) == Some("edit")).unwrap();
    assert!(edit.contains(" read-only "), "{out}");
    // check warns too, and still succeeds.
    p.cassist(&["check"]).stderr_has("sets no trust").exec();
    // -q hides warnings.
    p.cassist(&["check", "-q"]).stderr("").exec();

    // A task asking for more is no error without trust; it just does not get it.
    p.file("tasks/u.kdl", "task \"wants\" {\n    goal \"W.\"\n    sandbox \"workspace-write\"\n}\n");
    let (run, map) = sandboxes(&p);
    assert!(run.stderr.contains("sets no trust"));
    assert_eq!(map["wants"], "read-only");

    // An untrusted .agents/config.toml changes nothing.
    p.file(".agents/config.toml", "trust_level = \"untrusted\"\n");
    let (run, map) = sandboxes(&p);
    assert!(run.stderr.contains("sets no trust"));
    assert_eq!(map["edit"], "read-only");

    // Only read-only tasks: nothing to warn about.
    let p = Test::new().file("tasks/t.kdl", "task \"look\" {\n    goal \"L.\"\n    kind \"review\"\n}\n").build();
    p.cassist(&["check"]).stderr("").exec();
}

#[test]
fn agents_config_toml_trust_gives_workspace_write() {
    let p = Test::new()
        .file("tasks/t.kdl", TRUST_TASKS)
        .file(".agents/config.toml", "# codex-style\ntrust_level = \"trusted\"\n")
        .build();
    let (run, map) = sandboxes(&p);
    assert_eq!(run.stderr, "", "no warning about trust");
    assert_eq!(map, map_of(&[("careful", "read-only"), ("edit", "workspace-write"), ("look", "read-only")]));
    // It counts as workspace-write: asking for full is an error.
    p.file("tasks/f.kdl", "task \"all\" {\n    goal \"A.\"\n    sandbox \"full\"\n}\n");
    p.cassist(&["check"])
        .status(2)
        .stderr_has("asks for sandbox `full` but the project trusts only `workspace-write`")
        .exec();

    // Invalid TOML is an error, not silently untrusted.
    let p = Test::new().file("tasks/t.kdl", TRUST_TASKS).file(".agents/config.toml", "trust_level = \n").build();
    p.cassist(&["check"]).status(2).stderr_has(".agents/config.toml").exec();
}

#[test]
fn trust_in_cassist_kdl() {
    let p = trusted(&[("tasks/t.kdl", TRUST_TASKS)]);
    let (run, map) = sandboxes(&p);
    assert_eq!(run.stderr, "");
    assert_eq!(map, map_of(&[("careful", "read-only"), ("edit", "workspace-write"), ("look", "read-only")]));

    // trust "full": a task gets full only when it asks for it.
    p.file("cassist.kdl", "trust \"full\"\n")
        .file("tasks/f.kdl", "task \"all\" {\n    goal \"A.\"\n    sandbox \"full\"\n}\n");
    let (_, map) = sandboxes(&p);
    assert_eq!(
        map,
        map_of(&[("all", "full"), ("careful", "read-only"), ("edit", "workspace-write"), ("look", "read-only")])
    );

    // trust "read-only": a task asking for more is an error pointing at it.
    p.file("cassist.kdl", "trust \"read-only\"\n");
    p.cassist(&["check"])
        .status(2)
        .stderr_has("task `all` asks for sandbox `full` but the project trusts only `read-only`")
        .stderr_has("tasks/f.kdl:3:13")
        .exec();
    // cassist.kdl wins over .agents/config.toml.
    std::fs::remove_file(p.path().join("tasks/f.kdl")).unwrap();
    p.file(".agents/config.toml", "trust_level = \"trusted\"\n");
    let (_, map) = sandboxes(&p);
    assert_eq!(map["edit"], "read-only");
}

// ---------------------------------------------------------------------------
// Agent selection

fn agent_project(defaults: Option<&str>) -> Project {
    let mut config = TRUSTED.to_owned();
    if let Some(a) = defaults {
        config.push_str(&format!("defaults {{\n    agent \"{a}\"\n}}\n"));
    }
    config.push_str("agent \"mine\" {\n    command \"my-agent\" \"{prompt_file}\"\n}\n");
    Test::new()
        .config(&config)
        .tasks("task \"own\" {\n    goal \"O.\"\n    agent \"droid\"\n}\ntask \"free\" {\n    goal \"F.\"\n}\n")
        .build()
}

/// `plan --json ARGS`: the document.
fn plan(p: &Project, args: &[&str], env: &[(&str, &str)]) -> Value {
    let mut all = vec!["plan", "--json"];
    all.extend_from_slice(args);
    p.cassist(&all).envs(env).exec().json()
}

fn agents_of(p: &Project, args: &[&str], env: &[(&str, &str)]) -> (String, String) {
    let json = plan(p, args, env);
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
    let hash = |args: &[&str], env: &[(&str, &str)]| task(&plan(&p, args, env), "free")["hash"].clone();
    assert_eq!(hash(&["--agent", "codex"], &[]), hash(&[], &[("CASSIST_AGENT", "codex")]));
    assert_ne!(hash(&["--agent", "codex"], &[]), hash(&[], &[]));

    // --agent reaches prompt and explain too.
    let json = p.cassist(&["explain", "free", "--json", "--agent", "codex"]).exec().json();
    assert_eq!(json["key"]["inputs"][1]["name"], "codex");
}

#[test]
fn an_unknown_agent_is_exit_2() {
    let p = agent_project(None);
    p.cassist(&["plan", "--json", "--agent", "claud"])
        .status(2)
        .stdout("")
        .stderr_has("unknown agent `claud` given by --agent")
        .stderr_has("did you mean `claude`?")
        .exec();
    assert!(!p.exists(".cassist"), "nothing is written on invalid input");

    p.cassist(&["check"])
        .env("CASSIST_AGENT", "kodex")
        .status(2)
        .stderr_has("unknown agent `kodex` given by CASSIST_AGENT")
        .stderr_has("did you mean `codex`?")
        .exec();

    // An unknown defaults.agent is an error in cassist.kdl.
    let p = agent_project(Some("gemnii"));
    p.cassist(&["check"]).status(2).stderr_has("gemnii").stderr_has("cassist.kdl").exec();
}

#[test]
fn closed_stdout_is_not_a_crash() {
    // `cassist plan --json | head -c 1`: the reader goes away early.
    let p = (0..300)
        .fold(Test::new().file("cassist.kdl", TRUSTED), |t, i| {
            t.file(&format!("tasks/t{i}.kdl"), format!("task \"t{i}\" {{ goal \"goal {i}\" }}\n"))
        })
        .build();
    let mut child =
        p.cassist(&["plan", "--json"]).command().stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    child.stdout.take().unwrap().read_exact(&mut [0u8; 1]).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "cassist panicked on a closed pipe:\n{stderr}");
    assert!(!stderr.contains("Broken pipe"), "{stderr}");
}

#[test]
fn run_with_an_invalid_spec_exits_2_and_writes_nothing() {
    let p = trusted(&[("tasks/a.kdl", "task \"x\" { gaol \"y\" }\n")]);
    p.cassist(&["run"]).status(2).stderr_has("did you mean `goal`?").no_file("cassist.lock").exec();
    assert!(!p.exists(".cassist"), "run wrote .cassist/ for an invalid spec");
}
