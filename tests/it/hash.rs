//! Input-hash stability (SPEC 4), observed through `plan --json`: what must
//! not change a task's hash (formatting, comments, order, file layout, KDL
//! version) and what must (goal, context files, constraints, acceptance,
//! agent, sandbox, template, project commands, dependencies); and the
//! file-hash cache that keeps re-planning cheap.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::support::{Project, Test, task};

const CONFIG: &str = r#"trust "workspace-write"
test "python3 -m pytest -q"
prompt-template "prompts/task.md"
"#;

const TEMPLATE: &str = "Task {task}.\n\n# Goal\n{goal}\n\n# Context\n{context}\n\n# Constraints\n{constraints}\n\n# Acceptance criteria\n{acceptance}\n\n# Reference\n{reference}\n";

/// The canonical way of writing the three tasks of the test project.
/// `alpha` depends on `base`; `other` is unrelated, names its own agent and
/// is read-only.
const TASKS: &str = r#"task "alpha" {
    goal "Add slugify(title) to src/text.py."
    timeout "3m"
    max-iterations 2
    depends-on "base"
    context {
        file "src/*.py"
        file "docs/notes.md"
    }
    scope {
        path "src/text.py"
        path "tests/**"
    }
    constraints {
        - "Do not add dependencies"
        - "Keep the public API unchanged"
    }
    acceptance {
        run "python3 -m pytest -q tests" timeout="1m"
        run "ruff check src"
    }
    reference {
        file "docs/ref.md"
    }
}

task "base" {
    goal "Create src/text.py with title_case(text)."
    context {
        file "src/text.py"
    }
}

task "other" {
    goal "Describe the project layout."
    agent "claude"
    kind "explore"
}
"#;

fn project() -> Project {
    Test::new()
        .file("cassist.kdl", CONFIG)
        .file("prompts/task.md", TEMPLATE)
        .file("src/text.py", "def title_case(text):\n    return text.title()\n")
        .file("src/util.py", "X = 1\n")
        .file("docs/notes.md", "# Notes\n")
        .file("docs/ref.md", "# Reference\n")
        .file("tasks/main.kdl", TASKS)
        .build()
}

fn plan_json(p: &Project, args: &[&str], env: &[(&str, &str)]) -> Value {
    let mut all = vec!["plan", "--json"];
    all.extend_from_slice(args);
    p.cassist(&all).envs(env).exec().json()
}

/// Task name → input hash.
fn hashes_of(json: &Value) -> BTreeMap<String, String> {
    json["tasks"]
        .as_array()
        .expect("tasks array")
        .iter()
        .map(|t| (t["name"].as_str().unwrap().to_owned(), t["hash"].as_str().unwrap().to_owned()))
        .collect()
}

fn hashes(p: &Project) -> BTreeMap<String, String> {
    hashes_of(&plan_json(p, &[], &[]))
}

/// Task name → the whole `plan --json` entry, without `file` (which moves
/// with the task).
fn entries(p: &Project) -> BTreeMap<String, Value> {
    let json = plan_json(p, &[], &[]);
    json["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let mut t = t.clone();
            t.as_object_mut().unwrap().remove("file");
            (t["name"].as_str().unwrap().to_owned(), t)
        })
        .collect()
}

/// `(kind, name)` of each input of a task.
fn input_names(task: &Value) -> Vec<(String, String)> {
    task["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["kind"].as_str().unwrap().to_owned(), i["name"].as_str().unwrap().to_owned()))
        .collect()
}

fn input_hash(task: &Value, kind: &str, name: &str) -> String {
    task["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["kind"] == kind && i["name"] == name)
        .unwrap_or_else(|| panic!("no input {kind} {name} in {task}"))["hash"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Replaces `tasks/` with the given files.
fn rewrite_tasks(p: &Project, files: &[(&str, &str)]) {
    std::fs::remove_dir_all(p.path().join("tasks")).unwrap();
    for (rel, text) in files {
        p.file(rel, text);
    }
}

/// Asserts that exactly the tasks in `changed` got a new hash.
#[track_caller]
fn assert_changed(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>, changed: &[&str]) {
    assert_eq!(before.keys().collect::<Vec<_>>(), after.keys().collect::<Vec<_>>(), "the set of tasks changed");
    for (name, hash) in before {
        if changed.contains(&name.as_str()) {
            assert_ne!(hash, &after[name], "the hash of `{name}` should have changed");
        } else {
            assert_eq!(hash, &after[name], "the hash of `{name}` should not have changed");
        }
    }
}

/// The name of the `project` input (the project's commands).
const PROJECT: &str = "commands";

fn blake3_hex(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

// ---------------------------------------------------------------------------
// Shape of the hashes.

#[test]
fn hashes_are_64_hex_chars_and_inputs_are_listed_in_order() {
    let p = project();
    let json = plan_json(&p, &[], &[]);
    let names: Vec<&str> = json["tasks"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["base", "alpha", "other"], "run order");
    let is_hex64 = |s: &str| s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    for t in json["tasks"].as_array().unwrap() {
        let h = t["hash"].as_str().unwrap();
        assert!(is_hex64(h), "task hash {h:?} is not 64 lowercase hex chars");
        for i in t["inputs"].as_array().unwrap() {
            let h = i["hash"].as_str().unwrap();
            assert!(is_hex64(h), "input hash {h:?} of {} is not 64 lowercase hex chars", t["name"]);
        }
    }
    let alpha = task(&json, "alpha");
    let own = |v: &[(&str, &str)]| v.iter().map(|(k, n)| ((*k).to_owned(), (*n).to_owned())).collect::<Vec<_>>();
    assert_eq!(
        input_names(alpha),
        own(&[
            ("spec", "alpha"),
            ("agent", "claude"),
            ("sandbox", "workspace-write"),
            ("template", "prompts/task.md"),
            ("project", PROJECT),
            ("context", "docs/notes.md"),
            ("context", "src/text.py"),
            ("context", "src/util.py"),
            ("reference", "docs/ref.md"),
            ("dependency", "base"),
        ])
    );
    assert_eq!(
        input_names(task(&json, "base")),
        own(&[
            ("spec", "base"),
            ("agent", "claude"),
            ("sandbox", "workspace-write"),
            ("template", "prompts/task.md"),
            ("project", PROJECT),
            ("context", "src/text.py"),
        ])
    );
    assert_eq!(
        input_names(task(&json, "other")),
        own(&[
            ("spec", "other"),
            ("agent", "claude"),
            ("sandbox", "read-only"),
            ("template", "prompts/task.md"),
            ("project", PROJECT),
        ])
    );
    // File inputs are the blake3 of the file's bytes; the dependency input
    // is the dependency's own hash.
    assert_eq!(input_hash(alpha, "context", "src/util.py"), blake3_hex(b"X = 1\n"));
    assert_eq!(input_hash(alpha, "context", "docs/notes.md"), blake3_hex(b"# Notes\n"));
    assert_eq!(input_hash(alpha, "reference", "docs/ref.md"), blake3_hex(b"# Reference\n"));
    assert_eq!(input_hash(alpha, "template", "prompts/task.md"), blake3_hex(TEMPLATE.as_bytes()));
    assert_eq!(input_hash(alpha, "dependency", "base"), task(&json, "base")["hash"].as_str().unwrap());
    // Distinct tasks, distinct hashes; and planning twice gives the same.
    let h = hashes_of(&json);
    assert_ne!(h["alpha"], h["base"]);
    assert_ne!(h["base"], h["other"]);
    assert_eq!(hashes(&p), h, "planning twice gave different hashes");
}

// ---------------------------------------------------------------------------
// What does not change a hash.

/// Every way of writing the same tasks: `(description, files under tasks/)`.
fn same_tasks_written_differently() -> Vec<(&'static str, Vec<(&'static str, &'static str)>)> {
    vec![
        (
            "reindented, joined with `;`, bare identifiers, line continuation",
            vec![(
                "tasks/main.kdl",
                r#"task alpha {
  goal "Add slugify(title) to src/text.py."; timeout "3m"; max-iterations 2; depends-on base
  context { file "src/*.py"; file "docs/notes.md" }
  scope { path "src/text.py"; path "tests/**" }
  constraints { - "Do not add dependencies"; - "Keep the public API unchanged" }
  acceptance {
            run "python3 -m pytest -q tests" \
                timeout="1m"
      run "ruff check src"
  }
  reference { file "docs/ref.md" }
}
task base { goal "Create src/text.py with title_case(text)."; context { file "src/text.py" } }
task other { goal "Describe the project layout."; agent claude; kind explore }
"#,
            )],
        ),
        (
            "comments of every kind, slashdash on extra nodes and values",
            vec![(
                "tasks/main.kdl",
                r#"// The test project's tasks.
/* A block comment
   over several lines. */
task "alpha" /* inline */ {
    goal "Add slugify(title) to src/text.py." // trailing comment
    /-sandbox "full"
    timeout "3m"
    max-iterations /* why two? */ 2
    depends-on "base" /-"other"
    context {
        file "src/*.py"
        /-file "does/not/exist.py"
        file "docs/notes.md"
    }
    scope {
        path "src/text.py"
        path "tests/**"
    }
    constraints {
        - "Do not add dependencies"
        - "Keep the public API unchanged"
        /-- "a constraint that was dropped"
    }
    acceptance {
        run "python3 -m pytest -q tests" timeout="1m"
        run "ruff check src" /-timeout="5m"
    }
    reference {
        file "docs/ref.md"
    }
}

/-task "draft" {
    goal "Not ready yet."
}

task "base" {
    goal "Create src/text.py with title_case(text)." /* the first step */
    context {
        file "src/text.py"
    }
}

task "other" {
    goal "Describe the project layout."
    agent "claude"
    kind "explore"
}
"#,
            )],
        ),
        (
            "tasks in another order, context entries reordered and repeated, multi-line goal",
            vec![(
                "tasks/main.kdl",
                r#"task "other" {
    kind "explore"
    agent "claude"
    goal "Describe the project layout."
}

task "base" {
    context {
        file "src/text.py"
    }
    goal "Create src/text.py with title_case(text)."
}

task "alpha" {
    reference {
        file "docs/ref.md"
    }
    acceptance {
        run "python3 -m pytest -q tests" timeout="1m"
        run "ruff check src"
    }
    constraints {
        - "Do not add dependencies"
        - "Keep the public API unchanged"
    }
    scope {
        path "tests/**"
        path "src/text.py"
    }
    context {
        file "docs/notes.md"
        file "src/*.py"
        file "src/*.py"
    }
    depends-on "base"
    max-iterations 2
    timeout "180s"
    goal """
        Add slugify(title) to src/text.py.
        """
}
"#,
            )],
        ),
        (
            "each task in its own file, one in a subfolder",
            vec![
                (
                    "tasks/alpha.kdl",
                    r#"task "alpha" {
    goal "Add slugify(title) to src/text.py."
    timeout "3m"
    max-iterations 2
    depends-on "base"
    context {
        file "src/*.py"
        file "docs/notes.md"
    }
    scope {
        path "src/text.py"
        path "tests/**"
    }
    constraints {
        - "Do not add dependencies"
        - "Keep the public API unchanged"
    }
    acceptance {
        run "python3 -m pytest -q tests" timeout="1m"
        run "ruff check src"
    }
    reference {
        file "docs/ref.md"
    }
}
"#,
                ),
                (
                    "tasks/deeper/base.kdl",
                    "task \"base\" {\n    goal \"Create src/text.py with title_case(text).\"\n    context {\n        file \"src/text.py\"\n    }\n}\n",
                ),
                (
                    "tasks/z-other.kdl",
                    "task \"other\" {\n    goal \"Describe the project layout.\"\n    agent \"claude\"\n    kind \"explore\"\n}\n",
                ),
            ],
        ),
        (
            "KDL v1 syntax (raw strings r\"...\"), mixed with a v2 file",
            vec![
                (
                    "tasks/v1.kdl",
                    r##"// KDL v1: r"..." raw strings do not exist in v2.
task "alpha" {
    goal r"Add slugify(title) to src/text.py."
    timeout "3m"
    max-iterations 2
    depends-on "base"
    context {
        file r"src/*.py"
        file "docs/notes.md"
    }
    scope {
        path "src/text.py"
        path r#"tests/**"#
    }
    constraints {
        - "Do not add dependencies"
        - "Keep the public API unchanged"
    }
    acceptance {
        run r"python3 -m pytest -q tests" timeout="1m"
        run "ruff check src"
    }
    reference {
        file "docs/ref.md"
    }
}

task "base" {
    goal "Create src/text.py with title_case(text)."
    context {
        file "src/text.py"
    }
}
"##,
                ),
                (
                    "tasks/v2.kdl",
                    "task other {\n    goal \"Describe the project layout.\"\n    agent claude\n    kind #\"explore\"#\n}\n",
                ),
            ],
        ),
    ]
}

#[test]
fn formatting_comments_order_layout_and_kdl_version_change_no_hash() {
    let p = project();
    let before = entries(&p);
    assert_eq!(before.len(), 3);
    for (what, files) in same_tasks_written_differently() {
        rewrite_tasks(&p, &files);
        p.cassist(&["check"]).label(what).stdout_has("ok: 3 tasks").exec();
        let after = entries(&p);
        for (name, entry) in &before {
            assert_eq!(&after[name], entry, "{what}: the plan of `{name}` changed");
        }
    }
}

#[test]
fn the_v1_variant_is_really_parsed_as_v1() {
    // Guards the test above: were the v1 file also valid v2, it would
    // prove nothing about v1 support.
    let p = Test::new().file("tasks/x.kdl", "task \"x\" {\n    goal r\"raw\"\n}\n").build();
    let json = p.cassist(&["explain", "x", "--json"]).exec().json();
    assert_eq!(json["key"]["spec"]["goal"], "raw");
}

// ---------------------------------------------------------------------------
// What changes a hash.

#[test]
fn one_byte_of_the_goal() {
    let p = project();
    let before = hashes(&p);
    p.edit("tasks/main.kdl", "slugify(title)", "slugify(titlE)");
    assert_changed(&before, &hashes(&p), &["alpha"]);
}

#[test]
fn a_dependency_goal_changes_the_dependent_too() {
    let p = project();
    let before = hashes(&p);
    p.edit("tasks/main.kdl", "with title_case(text).", "with title_case(text)!");
    let json = plan_json(&p, &[], &[]);
    let after = hashes_of(&json);
    assert_changed(&before, &after, &["alpha", "base"]);
    assert_eq!(input_hash(task(&json, "alpha"), "dependency", "base"), after["base"]);
}

#[test]
fn one_byte_of_a_context_file() {
    let p = project();
    let before = plan_json(&p, &[], &[]);
    p.file("src/util.py", "X = 2\n");
    let after = plan_json(&p, &[], &[]);
    assert_changed(&hashes_of(&before), &hashes_of(&after), &["alpha"]);
    assert_eq!(input_hash(task(&after, "alpha"), "context", "src/util.py"), blake3_hex(b"X = 2\n"));
    // Only that input changed.
    let a0 = task(&before, "alpha")["inputs"].as_array().unwrap().clone();
    let a1 = task(&after, "alpha")["inputs"].as_array().unwrap().clone();
    let differing: Vec<&str> =
        a0.iter().zip(&a1).filter(|(x, y)| x != y).map(|(x, _)| x["name"].as_str().unwrap()).collect();
    assert_eq!(differing, ["src/util.py"]);

    // A file shared by two tasks changes both (and `alpha` twice over: as
    // a context file and through its dependency).
    let before = hashes(&p);
    p.file("src/text.py", "def title_case(text):\n    return text.title()\n\n");
    assert_changed(&before, &hashes(&p), &["alpha", "base"]);
}

#[test]
fn one_byte_of_a_reference_file() {
    let p = project();
    let before = hashes(&p);
    p.file("docs/ref.md", "# Reference!\n");
    assert_changed(&before, &hashes(&p), &["alpha"]);
}

#[test]
fn a_new_file_matching_a_context_glob() {
    let p = project();
    let before = hashes(&p);
    p.file("src/new.py", "");
    let json = plan_json(&p, &[], &[]);
    assert_changed(&before, &hashes_of(&json), &["alpha"]);
    let names = input_names(task(&json, "alpha"));
    assert!(names.contains(&("context".to_owned(), "src/new.py".to_owned())), "{names:?}");
    // A file the glob does not match changes nothing.
    let before = hashes_of(&json);
    p.file("src/README.md", "not python\n");
    p.file("lib/other.py", "");
    assert_changed(&before, &hashes(&p), &[]);
}

#[test]
fn a_changed_constraint() {
    let p = project();
    let before = hashes(&p);
    p.edit("tasks/main.kdl", "Keep the public API unchanged", "Keep the public API unchanged.");
    assert_changed(&before, &hashes(&p), &["alpha"]);
    // Constraint order matters: the prompt lists them as written.
    let before = hashes(&p);
    p.edit(
        "tasks/main.kdl",
        "- \"Do not add dependencies\"\n        - \"Keep the public API unchanged.\"",
        "- \"Keep the public API unchanged.\"\n        - \"Do not add dependencies\"",
    );
    assert_changed(&before, &hashes(&p), &["alpha"]);
}

#[test]
fn a_changed_acceptance_command_or_its_timeout() {
    let p = project();
    let before = hashes(&p);
    p.edit("tasks/main.kdl", "run \"ruff check src\"", "run \"ruff check src/\"");
    let after = hashes(&p);
    assert_changed(&before, &after, &["alpha"]);
    p.edit("tasks/main.kdl", "timeout=\"1m\"", "timeout=\"2m\"");
    assert_changed(&after, &hashes(&p), &["alpha"]);
}

#[test]
fn a_changed_agent() {
    let p = project();
    let before = plan_json(&p, &[], &[]);
    // `--agent` changes every task that does not name its own agent (and
    // their dependents); `other` says `agent "claude"` and keeps its hash.
    let codex = plan_json(&p, &["--agent", "codex"], &[]);
    assert_eq!(task(&codex, "alpha")["agent"], "codex");
    assert_eq!(task(&codex, "base")["agent"], "codex");
    assert_eq!(task(&codex, "other")["agent"], "claude");
    assert_changed(&hashes_of(&before), &hashes_of(&codex), &["alpha", "base"]);
    assert_ne!(
        input_hash(task(&codex, "base"), "agent", "codex"),
        input_hash(task(&before, "base"), "agent", "claude")
    );
    // The same through CASSIST_AGENT gives the same hashes as --agent.
    let env = plan_json(&p, &[], &[("CASSIST_AGENT", "codex")]);
    assert_eq!(hashes_of(&env), hashes_of(&codex));

    // The task's own `agent`.
    let before = hashes_of(&before);
    p.edit("tasks/main.kdl", "agent \"claude\"", "agent \"gemini\"");
    assert_changed(&before, &hashes(&p), &["other"]);
}

#[test]
fn a_changed_model() {
    let p = project();
    let before = plan_json(&p, &[], &[]);
    // No model anywhere: no model input (the CLI's own default).
    assert!(input_names(task(&before, "base")).iter().all(|(k, _)| k != "model"));
    // `--model` changes every task without its own model (and dependents).
    let small = plan_json(&p, &["--model", "m-small"], &[]);
    assert_changed(&hashes_of(&before), &hashes_of(&small), &["alpha", "base", "other"]);
    assert_eq!(input_names(task(&small, "base"))[2], ("model".to_owned(), "m-small".to_owned()));
    assert_eq!(input_hash(task(&small, "base"), "model", "m-small"), blake3_hex(b"m-small"));
    // The task's own model wins over `--model`, which wins over
    // `defaults { model }`.
    p.edit("tasks/main.kdl", "agent \"claude\"", "agent \"claude\"\n    model \"m-small\"");
    let own = plan_json(&p, &[], &[]);
    assert_changed(&hashes_of(&before), &hashes_of(&own), &["other"]);
    assert_eq!(hashes_of(&own)["other"], hashes_of(&small)["other"]);
    let big = plan_json(&p, &["--model", "m-big"], &[]);
    assert_eq!(hashes_of(&big)["other"], hashes_of(&own)["other"]);
    p.edit("cassist.kdl", "prompt-template", "defaults {\n    model \"m-big\"\n}\nprompt-template");
    assert_eq!(hashes_of(&plan_json(&p, &[], &[])), hashes_of(&big), "defaults {{ model }} = --model");
    assert_eq!(hashes_of(&plan_json(&p, &["--model", "m-small"], &[]))["base"], hashes_of(&small)["base"]);
}

#[test]
fn a_changed_custom_agent_command() {
    let p = project();
    p.file(
        "cassist.kdl",
        format!("{CONFIG}agent \"mine\" {{\n    command \"my-agent\" \"--prompt\" \"{{prompt_file}}\"\n}}\n"),
    );
    let before = hashes_of(&plan_json(&p, &["--agent", "mine"], &[]));
    p.edit("cassist.kdl", "\"--prompt\"", "\"--prompt-file\"");
    let after = hashes_of(&plan_json(&p, &["--agent", "mine"], &[]));
    assert_changed(&before, &after, &["alpha", "base"]);
}

#[test]
fn a_changed_sandbox() {
    let p = project();
    let before = plan_json(&p, &[], &[]);
    // The task asks for less than the trust: it and its dependent change.
    p.edit("tasks/main.kdl", "task \"base\" {\n", "task \"base\" {\n    sandbox \"read-only\"\n");
    let after = plan_json(&p, &[], &[]);
    assert_changed(&hashes_of(&before), &hashes_of(&after), &["alpha", "base"]);
    assert_eq!(input_names(task(&after, "base"))[2], ("sandbox".to_owned(), "read-only".to_owned()));

    // Asking explicitly for what it gets anyway is no change.
    let p = project();
    let before = hashes(&p);
    p.edit("tasks/main.kdl", "task \"base\" {\n", "task \"base\" {\n    sandbox \"workspace-write\"\n");
    assert_changed(&before, &hashes(&p), &[]);

    // Without a trust every task runs read-only: the code tasks change, the
    // explore task (read-only anyway) does not.
    let p = project();
    let before = hashes(&p);
    p.edit("cassist.kdl", "trust \"workspace-write\"\n", "");
    assert_changed(&before, &hashes(&p), &["alpha", "base"]);
}

#[test]
fn a_changed_prompt_template() {
    let p = project();
    let before = plan_json(&p, &[], &[]);
    p.file("prompts/task.md", TEMPLATE.replacen("Task {task}.", "Task {task}:", 1));
    let after = plan_json(&p, &[], &[]);
    assert_changed(&hashes_of(&before), &hashes_of(&after), &["alpha", "base", "other"]);
    assert_eq!(
        input_hash(task(&after, "other"), "template", "prompts/task.md"),
        blake3_hex(TEMPLATE.replacen("Task {task}.", "Task {task}:", 1).as_bytes())
    );
    // Back to the built-in template.
    p.edit("cassist.kdl", "prompt-template \"prompts/task.md\"\n", "");
    let default = plan_json(&p, &[], &[]);
    assert_changed(&hashes_of(&after), &hashes_of(&default), &["alpha", "base", "other"]);
    assert_eq!(input_names(task(&default, "other"))[3], ("template".to_owned(), "default".to_owned()));
}

/// `test` and `build` are in the hashes of the tasks that run them only:
/// not of the explore task `other` (issue 14 changed this); `setup` runs
/// for every task and is in every hash.
#[test]
fn a_changed_project_test_build_or_setup_command() {
    let p = project();
    let before = hashes(&p);
    p.edit("cassist.kdl", "python3 -m pytest -q", "python3 -m pytest");
    let tested = hashes(&p);
    assert_changed(&before, &tested, &["alpha", "base"]);
    p.edit("cassist.kdl", "prompt-template", "build \"make\"\nprompt-template");
    let built = hashes(&p);
    assert_changed(&tested, &built, &["alpha", "base"]);
    p.edit("cassist.kdl", "build \"make\"", "build \"make all\"");
    assert_changed(&built, &hashes(&p), &["alpha", "base"]);
    p.edit("cassist.kdl", "prompt-template", "setup \"true\"\nprompt-template");
    assert_changed(&built, &hashes(&p), &["alpha", "base", "other"]);
    // A code task that runs read-only (it asks for it) runs no tests.
    let p = project();
    p.edit("tasks/main.kdl", "task \"base\" {\n", "task \"base\" {\n    sandbox \"read-only\"\n");
    let before = hashes(&p);
    p.edit("cassist.kdl", "python3 -m pytest -q", "python3 -m pytest");
    assert_changed(&before, &hashes(&p), &["alpha"]);
}

/// The limits that decide what the review rejects and what a command may
/// use change every task's hash; the defaults, written out or not, and the
/// transcript cap (which changes only what is recorded) do not.
#[test]
fn changed_limits() {
    let p = project();
    let before = hashes(&p);
    let config = std::fs::read_to_string(p.path().join("cassist.kdl")).unwrap();
    let with = |limits: &str| p.file("cassist.kdl", format!("{config}\nlimits {{\n{limits}\n}}\n"));
    with(
        "    file-size \"16MiB\"\n    change-size \"256MiB\"\n    files 10000\n    transcript \"64MiB\"\n    memory \"8GiB\"\n    processes 2048",
    );
    assert_eq!(hashes(&p), before, "the defaults written out");
    with("    transcript \"1MiB\"");
    assert_eq!(hashes(&p), before, "the transcript cap");
    with("    file-size \"1MiB\"");
    let smaller_files = hashes(&p);
    assert_changed(&before, &smaller_files, &["alpha", "base", "other"]);
    with("    change-size \"1GiB\"");
    let larger_changes = hashes(&p);
    assert_changed(&before, &larger_changes, &["alpha", "base", "other"]);
    assert_changed(&smaller_files, &larger_changes, &["alpha", "base", "other"]);
    with("    files 500");
    let fewer = hashes(&p);
    assert_changed(&before, &fewer, &["alpha", "base", "other"]);
    with("    memory \"1GiB\"");
    let less_memory = hashes(&p);
    assert_changed(&before, &less_memory, &["alpha", "base", "other"]);
    with("    processes 100");
    let fewer_processes = hashes(&p);
    assert_changed(&before, &fewer_processes, &["alpha", "base", "other"]);
    assert_changed(&less_memory, &fewer_processes, &["alpha", "base", "other"]);
    // With another limit changed too: the default `files`, `memory` and
    // `processes` add nothing.
    with("    file-size \"1MiB\"\n    files 10000\n    memory \"8GiB\"\n    processes 2048");
    assert_eq!(hashes(&p), smaller_files, "the default limits written out");
}

#[test]
fn spec_fields_each_change_the_hash() {
    // Every field of the normalized spec is part of the key.
    let cases: &[(&str, &str)] = &[
        ("timeout \"3m\"", "timeout \"4m\""),
        ("max-iterations 2", "max-iterations 3"),
        ("path \"tests/**\"", "path \"tests/*\""),
        ("file \"docs/notes.md\"", "file \"docs/*.md\""),
        ("max-iterations 2", "max-iterations 2\n    max-cost 1.5"),
        ("max-iterations 2", "max-iterations 2\n    kind \"test\""),
    ];
    for (from, to) in cases {
        let p = project();
        let before = hashes(&p);
        p.edit("tasks/main.kdl", from, to);
        let after = hashes(&p);
        assert_ne!(before["alpha"], after["alpha"], "{from:?} -> {to:?} did not change the hash");
        assert_eq!(before["base"], after["base"], "{from:?} -> {to:?} changed base");
        assert_eq!(before["other"], after["other"], "{from:?} -> {to:?} changed other");
    }
}

// ---------------------------------------------------------------------------
// The file-hash cache.

/// Sets a file's mtime (`touch -d`).
fn set_mtime(p: &Project, rel: &str, when: &str) {
    let status =
        std::process::Command::new("touch").args(["-d", when]).arg(p.path().join(rel)).status().expect("run touch");
    assert!(status.success(), "touch -d {when} {rel} failed");
}

/// `N` from "N file(s) hashed" of `plan -v`, and the hashes.
fn files_hashed(p: &Project) -> (usize, BTreeMap<String, String>) {
    let out = p.cassist(&["plan", "-v"]).exec().stdout;
    let line = out.lines().find(|l| l.contains("file(s) hashed")).unwrap_or_else(|| panic!("no count in:\n{out}"));
    let n = line
        .split("; ")
        .find_map(|part| part.strip_suffix(" file(s) hashed, the rest from the cache"))
        .unwrap_or_else(|| panic!("unexpected line {line:?}"));
    (n.parse().unwrap(), hashes(p))
}

const FILES: &[&str] = &["src/text.py", "src/util.py", "docs/notes.md", "docs/ref.md"];

#[test]
fn the_file_hash_cache_reads_only_changed_files() {
    let p = project();
    // Files written "now" are distrusted by the cache (racy protection):
    // date them in the past so it trusts them.
    for f in FILES {
        set_mtime(&p, f, "2020-01-01");
    }
    let (n, first) = files_hashed(&p);
    assert_eq!(n, FILES.len(), "first plan: every distinct file is hashed once");
    assert!(p.path().join(".cassist/cache/file-hashes").is_file());
    let (n, second) = files_hashed(&p);
    assert_eq!(n, 0, "second plan: everything from the cache");
    assert_eq!(first, second);

    // Change one file's content: exactly that one is read again.
    p.file("src/util.py", "X = 3\n");
    let (n, third) = files_hashed(&p);
    assert_eq!(n, 1);
    assert_changed(&first, &third, &["alpha"]);

    // A file whose mtime is not safely in the past is never trusted.
    let future = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() + 3600;
    set_mtime(&p, "src/util.py", &format!("@{future}"));
    let (n, fourth) = files_hashed(&p);
    assert_eq!(n, 1);
    let (n, fifth) = files_hashed(&p);
    assert_eq!(n, 1, "a racy entry must be hashed again");
    assert_eq!(fourth, third);
    assert_eq!(fifth, third);

    // Back in the past: hashed once more (new mtime), then trusted.
    set_mtime(&p, "src/util.py", "2020-01-02");
    assert_eq!(files_hashed(&p).0, 1);
    let (n, last) = files_hashed(&p);
    assert_eq!(n, 0);
    assert_eq!(last, third);
}

#[test]
fn a_cached_hash_is_not_reused_for_a_changed_file() {
    let p = project();
    for f in FILES {
        set_mtime(&p, f, "2020-01-01");
    }
    let (_, first) = files_hashed(&p);
    // Same size, new content, and an old mtime again (but a different one).
    p.file("src/util.py", "X = 9\n");
    set_mtime(&p, "src/util.py", "2020-01-03");
    let (n, after) = files_hashed(&p);
    assert_eq!(n, 1);
    assert_changed(&first, &after, &["alpha"]);
    let json = plan_json(&p, &[], &[]);
    assert_eq!(input_hash(task(&json, "alpha"), "context", "src/util.py"), blake3_hex(b"X = 9\n"));

    // A corrupt cache is ignored, not trusted.
    p.file(".cassist/cache/file-hashes", "garbage\n1 2 3 zz src/util.py\n");
    let (n, again) = files_hashed(&p);
    assert_eq!(n, FILES.len());
    assert_eq!(again, after);
}

#[test]
fn the_parsed_task_cache_serves_the_same_plan_and_never_a_stale_one() {
    let p = project();
    let cache = p.path().join(".cassist/cache/tasks.json");
    let first = plan_json(&p, &[], &[]);
    assert!(cache.is_file(), "plan should cache parsed task files");
    // From the cache: the same plan, byte for byte.
    assert_eq!(plan_json(&p, &[], &[]), first);
    // An edit is seen at once, and undoing it gives the old hashes back.
    let before = hashes_of(&first);
    p.edit("tasks/main.kdl", "Add slugify", "Add slugifY");
    let edited = hashes(&p);
    assert_changed(&before, &edited, &["alpha"]);
    p.edit("tasks/main.kdl", "Add slugifY", "Add slugify");
    assert_eq!(hashes(&p), before);
    // A corrupt cache is ignored, not trusted.
    std::fs::write(&cache, "{ not json").unwrap();
    assert_eq!(plan_json(&p, &[], &[]), first);
    // `check` reads it but never writes it.
    std::fs::remove_file(&cache).unwrap();
    p.cassist(&["check"]).exec();
    assert!(!cache.exists(), "check wrote the cache");
}
