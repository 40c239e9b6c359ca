//! Recovery of oversized tasks (SPEC 3.8, issue 6): an agent killed or
//! timed out is not retried as is; the task is split into one prompt per
//! file, then header / impl / test, with the timeout 1.5x per round, and
//! blocked after 3 rounds.
//!
//! The agent is `fixtures/agents/split-agent.py`: it logs every call
//! (task, part, attempt, start time, prompt) and is killed or hangs on the
//! prompts its `SPLIT_MODE` calls too large.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::support::{Output, Project, Test, assert_same_tree, in_both_modes, section};

/// One logged call of the agent.
#[derive(Debug)]
struct Call {
    task: String,
    part: String,
    attempt: String,
    start: f64,
    prompt: String,
}

const AGENT: &str = "split";

/// A project with the split agent and `tasks`; `files` are written and
/// committed.
fn split_project(tasks: &str, files: &[(&str, &str)]) -> Project {
    let test = Test::trusted()
        .kdl(&format!("defaults {{\n    agent {AGENT:?}\n}}\n"))
        .agent(AGENT, "split-agent.py", &[], &["SPLIT_MODE", "SPLIT_LOG", "KILL_STYLE"])
        .tasks(tasks);
    let p = files.iter().fold(test, |t, (rel, text)| t.file(rel, text)).git().build();
    std::fs::create_dir_all(p.out().join("log")).unwrap();
    p
}

/// `cassist run` with the agent in `mode`, dying the `style` way; it must
/// exit with `code`.
fn run(p: &Project, mode: &str, style: &str, code: i32) -> Output {
    run_env(p, mode, style, code, &[])
}

fn run_env(p: &Project, mode: &str, style: &str, code: i32, env: &[(&str, &str)]) -> Output {
    let log = p.out().join("log");
    let done = p
        .run(&[])
        .env("SPLIT_MODE", mode)
        .env("SPLIT_LOG", &log)
        .env("KILL_STYLE", style)
        .envs(env)
        .status(code)
        .exec();
    eprintln!(
        "scenario {mode}/{style}: {} agent calls so far, cassist ran {:.2}s",
        calls_of(p).len(),
        done.elapsed.as_secs_f64()
    );
    done
}

/// Every call of the agent so far, in order.
fn calls_of(p: &Project) -> Vec<Call> {
    let text = std::fs::read_to_string(p.out().join("log/calls.jsonl")).unwrap_or_default();
    text.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            Call {
                task: v["task"].as_str().unwrap().to_owned(),
                part: v["part"].as_str().unwrap().to_owned(),
                attempt: v["attempt"].as_str().unwrap_or("").to_owned(),
                start: v["start"].as_f64().unwrap(),
                prompt: v["prompt"].as_str().unwrap().to_owned(),
            }
        })
        .collect()
}

fn clear_calls(p: &Project) {
    let _ = std::fs::remove_file(p.out().join("log/calls.jsonl"));
}

fn names(calls: &[Call]) -> Vec<&str> {
    calls.iter().map(|c| c.task.as_str()).collect()
}

/// `(name, state, timeout_ms)` of each subtask, depth first, with its depth.
fn tree(subtasks: &Value, depth: usize, out: &mut Vec<(usize, String, String, u64)>) {
    for s in subtasks.as_array().unwrap() {
        out.push((
            depth,
            s["name"].as_str().unwrap().to_owned(),
            s["state"].as_str().unwrap().to_owned(),
            s["timeout_ms"].as_u64().unwrap(),
        ));
        tree(&s["subtasks"], depth + 1, out);
    }
}

fn subtasks(t: &Value) -> Vec<(usize, String, String, u64)> {
    let mut out = Vec::new();
    tree(&t["subtasks"], 0, &mut out);
    out
}

fn row(depth: usize, name: &str, state: &str, timeout_ms: u64) -> (usize, String, String, u64) {
    (depth, name.to_owned(), state.to_owned(), timeout_ms)
}

/// Task `two` over `a.py` and `b.py` (and a shared spec), with the
/// acceptance command `check`.
fn two(check: &str) -> String {
    format!(
        r#"task "two" {{
    goal "Make a.py and b.py say they are done."
    timeout "20s"
    context {{
        file "a.py"
        file "b.py"
        file "docs/spec.md"
    }}
    scope {{
        path "a.py"
        path "b.py"
    }}
    acceptance {{
        run {check:?}
    }}
}}
"#
    )
}

const DONE: &str = "grep -qx 'done a.py' a.py && grep -qx 'done b.py' b.py";
const LAYERED: &str = "test \"$(cat a.py b.py)\" = \"$(printf 'header\\nimpl\\ntest\\nheader\\nimpl\\ntest')\"";

const TWO_FILES: &[(&str, &str)] = &[("a.py", "todo\n"), ("b.py", "todo\n"), ("docs/spec.md", "the spec\n")];

in_both_modes!(
    killed_whole_task: killed_on_the_whole_task_succeeds_with_one_file_per_prompt,
    killed_on_the_whole_task_succeeds_with_one_file_per_prompt_in_copy_mode
);

fn killed_whole_task(env: &[(&str, &str)]) {
    let s = split_project(&two(DONE), TWO_FILES);
    let done = run_env(&s, "whole", "signal", 0, env);
    let calls = calls_of(&s);
    assert_eq!(names(&calls), ["two", "two/a.py", "two/b.py"], "{}", done.transcript());
    assert_eq!(calls.iter().map(|c| c.part.as_str()).collect::<Vec<_>>(), ["", "file:a.py", "file:b.py"]);
    // Both parts are integrated.
    assert_eq!(s.read("a.py"), "done a.py\n");
    assert_eq!(s.read("b.py"), "done b.py\n");
    assert_eq!(s.git(&["status", "--porcelain", "--", "a.py", "b.py"]), " M a.py\n M b.py\n");

    // A part's prompt keeps the goal, says what this part does and does
    // not do, and lists its own file and the shared context only.
    let p = &calls[1].prompt;
    assert!(section(p, "Goal").contains("Make a.py and b.py say they are done."), "{p}");
    let part = section(p, "Part");
    assert!(part.contains("part 1 of 2 of task `two`"), "{part}");
    assert!(part.contains("everything the goal asks of `a.py`"), "{part}");
    assert!(part.contains("Do not: create, change or delete any other file"), "{part}");
    let context = section(p, "Context");
    assert!(context.contains("`a.py`") && context.contains("`docs/spec.md`"), "{context}");
    assert!(!context.contains("`b.py`"), "the other part's file is not its context:\n{context}");
    assert!(!calls[0].prompt.contains("# Part"), "the whole task has no # Part section");

    let t = done.task("two");
    assert_eq!(t["state"], "passed");
    assert_eq!(t["attempts"], 3);
    assert_eq!(
        subtasks(&t),
        [row(0, "two/a.py", "passed", 30_000), row(0, "two/b.py", "passed", 30_000)],
        "parts get the timeout x1.5"
    );
    let parts = t["subtasks"].as_array().unwrap();
    assert_eq!(parts[0]["part"], "file:a.py");
    assert_eq!(parts[0]["changed_files"], serde_json::json!(["a.py"]));
    assert_eq!(parts[1]["changed_files"], serde_json::json!(["b.py"]));
    assert_eq!(t["changed_files"], serde_json::json!(["a.py", "b.py"]));
    // The summary table shows the parts under their task.
    assert!(done.stdout.contains("└ two/a.py"), "{}", done.stdout);
    assert!(done.stdout.contains("split") || done.stderr.contains("split"), "{}", done.transcript());
}

#[test]
fn killed_on_file_parts_succeeds_on_header_impl_test() {
    let s = split_project(&two(LAYERED), TWO_FILES);
    let done = run(&s, "file", "137", 0);
    let calls = calls_of(&s);
    assert_eq!(
        names(&calls),
        [
            "two",
            "two/a.py",
            "two/a.py:header",
            "two/a.py:impl",
            "two/a.py:test",
            "two/b.py",
            "two/b.py:header",
            "two/b.py:impl",
            "two/b.py:test"
        ],
        "{}",
        done.transcript()
    );
    // In order, in one workspace: each part saw the previous one's work.
    assert_eq!(s.read("a.py"), "header\nimpl\ntest\n");
    assert_eq!(s.read("b.py"), "header\nimpl\ntest\n");
    let header = section(&calls[2].prompt, "Part");
    assert!(header.contains("only the interface of `a.py`"), "{header}");
    assert!(header.contains("Do not: write the implementation"), "{header}");
    let t = done.task("two");
    assert_eq!(t["state"], "passed");
    assert_eq!(
        subtasks(&t),
        [
            row(0, "two/a.py", "split", 30_000),
            row(1, "two/a.py:header", "passed", 45_000),
            row(1, "two/a.py:impl", "passed", 45_000),
            row(1, "two/a.py:test", "passed", 45_000),
            row(0, "two/b.py", "split", 30_000),
            row(1, "two/b.py:header", "passed", 45_000),
            row(1, "two/b.py:impl", "passed", 45_000),
            row(1, "two/b.py:test", "passed", 45_000),
        ]
    );
    assert!(t["subtasks"][0]["reason"].as_str().unwrap().starts_with("agent killed after"), "{t}");

    // The split is recorded: after a changed goal, the task starts split
    // (no whole-task or one-file prompt is paid for again).
    clear_calls(&s);
    s.edit("tasks/t.kdl", "say they are done", "say they are finished");
    s.file("a.py", "todo\n").file("b.py", "todo\n");
    let again = run(&s, "file", "137", 0);
    let calls = calls_of(&s);
    assert_eq!(
        names(&calls),
        ["two/a.py:header", "two/a.py:impl", "two/a.py:test", "two/b.py:header", "two/b.py:impl", "two/b.py:test"],
        "{}",
        again.transcript()
    );
    assert!(calls[0].prompt.contains("say they are finished"));
    assert!(again.stderr.contains("needed splitting last time"), "{}", again.stderr);
    assert_eq!(s.read("a.py"), "header\nimpl\ntest\n");
    let t = again.task("two");
    assert_eq!(t["subtasks"][0]["reason"], "split in an earlier run");
}

#[test]
fn one_file_is_split_into_header_impl_test_at_once() {
    let task = r#"task "big" {
    goal "Write src/big.rs."
    scope {
        path "src/big.rs"
    }
    acceptance {
        run "test \"$(cat src/big.rs)\" = \"$(printf 'header\nimpl\ntest')\""
    }
}
"#;
    let s = split_project(task, &[("src/big.rs", "")]);
    let done = run(&s, "whole", "message", 0);
    let calls = calls_of(&s);
    assert_eq!(
        names(&calls),
        ["big", "big/src/big.rs:header", "big/src/big.rs:impl", "big/src/big.rs:test"],
        "{}",
        done.transcript()
    );
    assert_eq!(calls[1].part, "header");
    assert_eq!(s.read("src/big.rs"), "header\nimpl\ntest\n");
}

#[test]
fn always_killed_ends_blocked_after_three_rounds() {
    let s = split_project(&two(DONE), TWO_FILES);
    let before = s.tree();
    let done = run(&s, "always", "signal", 1);
    let calls = calls_of(&s);
    // The whole task, a.py, a.py's header, and a.py's header once more:
    // a bounded number of calls, and b.py is never reached.
    assert_eq!(names(&calls), ["two", "two/a.py", "two/a.py:header", "two/a.py:header"], "{}", done.transcript());
    assert_eq!(calls.iter().map(|c| c.attempt.as_str()).collect::<Vec<_>>(), ["1", "1", "1", "2"]);
    let t = done.task("two");
    assert_eq!(t["state"], "blocked");
    let reason = t["reason"].as_str().unwrap();
    assert!(reason.starts_with("split 3 times; agent still killed on part header of a.py after "), "{reason}");
    assert_eq!(
        subtasks(&t),
        [
            row(0, "two/a.py", "split", 30_000),
            row(1, "two/a.py:header", "split", 45_000),
            row(2, "two/a.py:header", "blocked", 67_500),
            row(1, "two/a.py:impl", "skipped", 45_000),
            row(1, "two/a.py:test", "skipped", 45_000),
            row(0, "two/b.py", "skipped", 30_000),
        ]
    );
    // The user's tree is untouched, the workspace kept for inspection.
    let mut after = s.tree();
    after.remove(&PathBuf::from("cassist.lock"));
    assert_same_tree(&after, &before, "the user's tree changed");
    assert!(!s.exists("cassist.lock"), "a blocked task is not recorded");
    let kept = done.stdout.lines().find_map(|l| l.trim().strip_prefix("workspace kept: ")).map(PathBuf::from);
    let kept = kept.unwrap_or_else(|| panic!("no kept workspace:\n{}", done.stdout));
    assert!(kept.exists(), "{}", kept.display());
    let _ = std::fs::remove_dir_all(&kept);
    assert!(done.stdout.contains(reason), "{}", done.stdout);
}

#[test]
fn a_hung_agent_is_split_with_the_timeout_growing_each_round() {
    let task = r#"task "slow" {
    goal "Write slow.rs."
    timeout "1s"
    scope {
        path "slow.rs"
    }
}
"#;
    let s = split_project(task, &[("slow.rs", "")]);
    let done = run(&s, "hang", "signal", 1);
    let calls = calls_of(&s);
    assert_eq!(names(&calls), ["slow", "slow/slow.rs:header", "slow/slow.rs:header", "slow/slow.rs:header"]);
    let t = done.task("slow");
    assert_eq!(
        subtasks(&t),
        [
            row(0, "slow/slow.rs:header", "split", 1_500),
            row(1, "slow/slow.rs:header", "split", 2_250),
            row(2, "slow/slow.rs:header", "blocked", 3_375),
            row(0, "slow/slow.rs:impl", "skipped", 1_500),
            row(0, "slow/slow.rs:test", "skipped", 1_500),
        ]
    );
    // Each call ran until its timeout, which grows 1.5x: each part ran at
    // least its timeout (cassist's own measure, from its start to its
    // stop), and the run at least all of them. The agent never ends by
    // itself, so each call that ended was stopped; the gaps between the
    // agent's starts (which also hold the interpreter's start-up, so they
    // are no lower bound) only guard against a stop far past the timeout.
    let gaps: Vec<f64> = calls.windows(2).map(|w| w[1].start - w[0].start).collect();
    for (gap, timeout) in gaps.iter().zip([1.0, 1.5, 2.25]) {
        assert!(*gap < timeout + 10.0, "gaps {gaps:?}");
    }
    let mut node = &t["subtasks"][0];
    for timeout_ms in [1_500, 2_250, 3_375] {
        assert_eq!(node["timeout_ms"], timeout_ms);
        assert!(node["duration_ms"].as_u64().unwrap() >= timeout_ms, "{node}");
        node = &node["subtasks"][0];
    }
    let reason = t["reason"].as_str().unwrap();
    assert!(reason.starts_with("split 3 times; agent still timed out on part header of slow.rs after 3."), "{reason}");
    assert!(done.elapsed >= Duration::from_secs_f64(1.0 + 1.5 + 2.25 + 3.375), "{:?}", done.elapsed);
}

#[test]
fn failed_acceptance_sends_every_part_back_with_the_feedback() {
    let s = split_project("", TWO_FILES);
    // Acceptance fails after the first round of calls (three: the whole
    // task, then its two parts), which it reads in the agents' log: what
    // an acceptance command writes is thrown away, so it cannot keep a
    // mark of its own.
    let calls = s.out().join("log/calls.jsonl");
    let check = format!("test $(wc -l < {calls:?}) -gt 3 || {{ echo 'FAILED: b.py is wrong'; exit 1; }}");
    s.file("tasks/t.kdl", two(&format!("{DONE} && {check}")));
    let done = run(&s, "whole", "signal", 0);
    let calls = calls_of(&s);
    assert_eq!(names(&calls), ["two", "two/a.py", "two/b.py", "two/a.py", "two/b.py"], "{}", done.transcript());
    assert_eq!(calls.iter().map(|c| c.attempt.as_str()).collect::<Vec<_>>(), ["1", "1", "1", "2", "2"]);
    for c in &calls[..3] {
        assert!(!c.prompt.contains("# Review feedback"), "{}", c.prompt);
    }
    for c in &calls[3..] {
        let feedback = section(&c.prompt, "Review feedback");
        assert!(feedback.contains("FAILED: b.py is wrong"), "{feedback}");
        assert!(c.prompt.contains("# Part"), "{}", c.prompt);
    }
    let t = done.task("two");
    assert_eq!(t["attempts"], 5);
    assert_eq!(t["subtasks"][1]["attempts"], 2);
}
