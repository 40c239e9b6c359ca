//! The bundled demo (README quick start): `cassist run tasks/` on a copy of
//! `cassist.kdl`, `tasks/` and `fixtures/` passes every task with the
//! scripted demo agent and integrates its changes.

use crate::support::{Project, Test, assert_same_tree, copy_tree, map, repo, snapshot, task};

/// A copy of the bundled demo: `cassist.kdl`, `tasks/`, `fixtures/demo`
/// and the demo agent.
pub(crate) fn demo() -> Project {
    let p = Test::new().file("cassist.kdl", std::fs::read_to_string(repo().join("cassist.kdl")).unwrap()).build();
    for dir in ["tasks", "fixtures/demo", "fixtures/agents"] {
        std::fs::create_dir_all(p.path().join(dir)).unwrap();
        copy_tree(&repo().join(dir), &p.path().join(dir));
    }
    p
}

const DEMO_TASKS: [&str; 3] = ["add-slugify", "add-truncate", "survey-textkit"];

fn all(state: &str) -> std::collections::BTreeMap<String, String> {
    map(&DEMO_TASKS.map(|t| (t, state)))
}

/// `cassist plan --json`: each task's state.
fn plan_states(p: &Project) -> std::collections::BTreeMap<String, String> {
    let json = p.cassist(&["plan", "--json"]).exec().json();
    DEMO_TASKS.iter().map(|t| ((*t).to_owned(), task(&json, t)["state"].as_str().unwrap().to_owned())).collect()
}

#[test]
fn the_bundled_demo_runs_end_to_end_on_a_copy() {
    let p = demo();
    let run = p.run(&["tasks/"]).exec();
    let json = run.report_json();
    assert_eq!(json["passed"], 3, "{json:#}");
    let survey = &json["tasks"][0];
    assert_eq!(survey["name"], "survey-textkit");
    assert!(survey["summary"].as_str().unwrap().contains("normalize_space"), "{survey}");
    assert!(task(&json, "add-slugify")["state"] == "passed", "{json:#}");
    let text = p.read("fixtures/demo/textkit/text.py");
    assert!(text.contains("def slugify(") && text.contains("def truncate("), "{text}");
    assert!(p.exists("fixtures/demo/tests/test_slugify.py"));
    // The integrated code passes the demo project's own tests.
    let tests = std::process::Command::new("python3")
        .args(["-m", "unittest", "discover", "-s", "tests", "-t", "."])
        .current_dir(p.path().join("fixtures/demo"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    assert!(tests.status.success(), "{}", String::from_utf8_lossy(&tests.stderr));
    // The summary table names each task.
    for name in ["survey-textkit", "add-slugify", "add-truncate"] {
        assert!(run.stdout.contains(name), "{}", run.stdout);
    }
}

/// The demo run once, then its changes undone as a user would (`git
/// checkout . && git clean -fd fixtures`): every task is predicted
/// `replay` (the dependents' context is what the replay of their
/// dependencies writes).
fn demo_run_then_restored() -> Project {
    let p = demo();
    p.commit_all();
    let first = p.run(&[]).exec();
    assert_eq!(first.states(), all("passed"), "{}", first.transcript());
    assert_eq!(plan_states(&p), all("up-to-date"));
    p.git(&["checkout", "."]);
    p.git(&["clean", "-fdq", "fixtures"]);
    assert!(!p.read("fixtures/demo/textkit/text.py").contains("def slugify("));
    assert_eq!(plan_states(&p), all("replay"), "the plan predicts the whole replay chain");
    p
}

/// After a replay, the demo is up-to-date: `plan` says so, and a
/// `--locked` run replays nothing and calls no agent.
#[track_caller]
fn assert_demo_up_to_date(p: &Project, lock: &str) {
    assert_eq!(plan_states(p), all("up-to-date"), "{}", p.cassist(&["plan"]).exec().stdout);
    let again = p.run(&["--locked"]).exec();
    assert_eq!(again.states(), all("up-to-date"), "{}", again.transcript());
    assert_eq!(p.read("cassist.lock"), lock, "the lock is the first run's");
    let text = p.read("fixtures/demo/textkit/text.py");
    assert!(text.contains("def slugify(") && text.contains("def truncate("), "{text}");
}

#[test]
fn a_locked_replay_of_the_demo_leaves_it_up_to_date_and_the_lock_as_it_was() {
    let p = demo_run_then_restored();
    let lock = p.read("cassist.lock");
    let replay = p.run(&["--locked"]).exec();
    assert_eq!(replay.states(), all("replayed"), "{}", replay.transcript());
    assert_eq!(p.read("cassist.lock"), lock, "--locked wrote cassist.lock");
    assert_demo_up_to_date(&p, &lock);
}

#[test]
fn a_plain_replay_of_the_demo_leaves_it_up_to_date() {
    let p = demo_run_then_restored();
    let lock = p.read("cassist.lock");
    let replay = p.run(&[]).exec();
    assert_eq!(replay.states(), all("replayed"), "{}", replay.transcript());
    assert_eq!(p.read("cassist.lock"), lock, "a replay reproduces the recorded tree: the lock stands");
    assert_demo_up_to_date(&p, &lock);
}

#[test]
fn prompt_shows_what_the_agent_got_with_the_findings_of_its_dependency() {
    let p = demo();
    p.commit_all();
    let prompt = || p.cassist(&["prompt", "add-slugify"]).exec().stdout;
    let placeholder = "(the final message of `survey-textkit` goes here once it has run)";
    assert!(prompt().contains(placeholder), "{}", prompt());

    let run = p.run(&[]).exec();
    assert_eq!(run.states(), all("passed"), "{}", run.transcript());
    // Up to date: the prompt add-slugify got, survey-textkit's recorded
    // findings included.
    let got = p.record("add-slugify", "prompt-1.md");
    assert!(got.contains("normalize_space") && !got.contains("goes here"), "{got}");
    assert_eq!(prompt(), got);
    // To be replayed: the same.
    p.git(&["checkout", "."]);
    p.git(&["clean", "-fdq", "fixtures"]);
    assert_eq!(plan_states(&p), all("replay"));
    assert_eq!(prompt(), got);
    // survey-textkit's inputs changed: what it will find is not known yet.
    p.edit("tasks/survey.kdl", "in a few lines.", "in a few short lines.");
    let again = "(the final message of `survey-textkit` goes here once it has run again: its inputs changed)";
    assert!(prompt().contains(again), "{}", prompt());
}

/// `cassist demo DIR` (README quick start): the demo written into a new
/// folder from the copy embedded in the binary, run there, then where it
/// is and what to try next.
#[test]
fn cassist_demo_writes_the_demo_into_a_new_folder_and_runs_it() {
    let base = Test::new().build();
    let run = base.cassist(&["demo", "my-demo"]).exec();
    assert!(run.stdout.contains("3 of 3 task(s) passed"), "{}", run.transcript());
    for name in DEMO_TASKS {
        assert!(run.stdout.contains(name), "{}", run.stdout);
    }
    for hint in
        ["The demo is in my-demo", "cd my-demo", "cassist plan", "cassist prompt add-slugify", "cassist explain"]
    {
        assert!(run.stdout.contains(hint), "{hint}: {}", run.stdout);
    }
    // The agent's changes are in the demo folder.
    let demo = base.path().join("my-demo");
    let text = std::fs::read_to_string(demo.join("fixtures/demo/textkit/text.py")).unwrap();
    assert!(text.contains("def slugify(") && text.contains("def truncate("), "{text}");
    assert!(demo.join("fixtures/demo/tests/test_slugify.py").exists());
    // Run again from inside it: nothing left to run.
    let json = base.cassist(&["-C", "my-demo", "plan", "--json"]).exec().json();
    for name in DEMO_TASKS {
        assert_eq!(task(&json, name)["state"], "up-to-date", "{json:#}");
    }

    // A folder that is not empty is refused, and nothing is written.
    for dir in ["my-demo", "other"] {
        base.file("other/notes.txt", "mine\n");
        let before = snapshot(base.path(), &[]);
        base.cassist(&["demo", dir]).status(2).stderr_has("is not empty").stdout("").exec();
        assert_same_tree(&snapshot(base.path(), &[]), &before, "a refused demo");
    }
}

/// The README's quick start is the two commands, and CI (`.ci/run`) runs
/// exactly its test command.
#[test]
fn the_readme_quick_start_is_two_commands_and_ci_runs_its_test_command() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let quick = &readme[readme.find("## Quick start").expect("a quick start")..];
    let block = quick.split("```sh\n").nth(1).and_then(|b| b.split("```").next()).expect("a sh block");
    let commands: Vec<&str> = block.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(commands, ["cargo install --locked --path . && cassist demo", "cargo test --locked"], "{block}");
    assert!(quick.contains("7 minutes") && quick.contains("git clone") && quick.contains("cd cassist-demo"));
    let ci = std::fs::read_to_string(repo().join(".ci/run")).unwrap();
    let last = ci.lines().rev().find(|l| !l.trim().is_empty() && !l.starts_with('#')).unwrap();
    assert_eq!(last, format!("CASSIST_REQUIRE_SANDBOX=1 {}", commands[1]), "the last command of .ci/run");
    // `cassist demo` in a clone leaves the clone clean.
    let ignore = std::fs::read_to_string(repo().join(".gitignore")).unwrap();
    assert!(ignore.lines().any(|l| l == "/cassist-demo/"), "{ignore}");
}
