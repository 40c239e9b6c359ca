//! The cache through `cassist run` (SPEC 4, issue 5): the real binary on
//! small temporary projects whose agent counts its invocations.
//!
//! Every project has three tasks, `base`, `top` (depends on `base`) and
//! `other`. Each task's context is a source file and its own output file
//! `out/<task>.txt`; the agent (a shell script outside the project) appends
//! the task's name to a counter file outside the project, then writes the
//! `# Goal` section of its prompt into `out/<task>.txt`. So a changed goal
//! is a changed output, and the counter says which tasks an agent ran for.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::{Output, Project, Test, flat, map as states, processes_with, wait_until, write, write_executable};

// ---------------------------------------------------------------------------
// Support

/// The counting agent. `COUNT_DIR` (pass-env) is a folder outside the
/// project: `calls` gets one line per invocation; `hook-<task>.sh` there,
/// if any, is sourced after it wrote `out/<task>.txt`. With `SLEEP_TASK` naming
/// this task, the agent touches `$COUNT_DIR/<task>.started` and waits (at
/// most 60 s) for `$COUNT_DIR/go`.
const AGENT: &str = r#"#!/bin/sh
set -eu
prompt=$(cat)
echo "$CASSIST_TASK" >> "$COUNT_DIR/calls"
if [ "${SLEEP_TASK:-}" = "$CASSIST_TASK" ]; then
    touch "$COUNT_DIR/$CASSIST_TASK.started"
    n=0
    while [ ! -e "$COUNT_DIR/go" ] && [ $n -lt 600 ]; do
        sleep 0.1
        n=$((n + 1))
    done
fi
mkdir -p out
printf '%s\n' "$prompt" | awk '/^# Goal$/ { f = 1; next } /^# / { f = 0 } f && NF' > "out/$CASSIST_TASK.txt"
if [ -f "$COUNT_DIR/hook-$CASSIST_TASK.sh" ]; then
    . "$COUNT_DIR/hook-$CASSIST_TASK.sh"
fi
echo "count: wrote out/$CASSIST_TASK.txt"
printf '{"success": true, "summary": "wrote out/%s.txt"}\n' "$CASSIST_TASK" > "$CASSIST_RESULT_FILE"
"#;

const TEMPLATE: &str = "# Goal\n{goal}\n\n# Context\n{context}\n\n# Acceptance criteria\n{acceptance}\n";

const TASKS: &str = r#"task "base" {
    goal "Write the base."
    context {
        file "src/x.py"
        file "out/base.txt"
    }
    scope {
        path "out/**"
    }
    acceptance {
        run "grep -q base out/base.txt && test ! -e stop-base"
    }
}

task "top" {
    goal "Write the top."
    depends-on "base"
    context {
        file "src/y.py"
        file "out/top.txt"
    }
    scope {
        path "out/**"
    }
    acceptance {
        run "grep -q top out/top.txt"
    }
}

task "other" {
    goal "Write the other."
    context {
        file "src/z.py"
        file "out/other.txt"
    }
    scope {
        path "out/**"
    }
}
"#;

/// The same tasks, reformatted: comments, blank lines, other indentation,
/// children and tasks in another order, lists reordered.
const TASKS_REFORMATTED: &str = r#"// The same three tasks, written differently.

task "other" {
  scope { path "out/**"; }
  context {
    file "out/other.txt" // its output
    file "src/z.py"
  }
  goal "Write the other."
}

/* the base of top */
task "base" {
  acceptance { run "grep -q base out/base.txt && test ! -e stop-base"; }
  context { file "out/base.txt"; file "src/x.py"; }
  goal "Write the base."
  scope { path "out/**"; }
}

task "top" { depends-on "base"; goal "Write the top."
  context {
    file "out/top.txt"
    file "src/y.py"
  }

  scope { path "out/**"; }
  acceptance { run "grep -q top out/top.txt"; }
}
"#;

const ALL: [&str; 3] = ["base", "other", "top"];

/// The three-task project (outside the temp folders), committed to git
/// with every output at `todo`; the agent script and its counter are in the
/// out folder (agents may write temp folders). Every command gets
/// `COUNT_DIR`.
fn project() -> Project {
    project_with(TASKS, &[])
}

/// The project with `tasks` as its task file and `files` added.
fn project_with(tasks: &str, files: &[(&str, &str)]) -> Project {
    let test = Test::new().outside_tmp().file("prompt.md", TEMPLATE).file("tasks/t.kdl", tasks);
    let test = [("x", "base"), ("y", "top"), ("z", "other")].iter().fold(test, |t, (f, task)| {
        t.file(&format!("src/{f}.py"), format!("print('{f}')\n")).file(&format!("out/{task}.txt"), "todo\n")
    });
    let test = files.iter().fold(test, |t, (rel, text)| t.file(rel, text));
    let p = test.build();
    let count_dir = p.out().join("count");
    let p = p.with_env("COUNT_DIR", &count_dir.display().to_string());
    std::fs::create_dir_all(&count_dir).unwrap();
    write(&p.out().join("count.sh"), AGENT);
    p.file("cassist.kdl", config(&p, ""));
    p.commit_all();
    p
}

/// `cassist.kdl`, with `extra` (comments, blank lines) between nodes.
fn config(p: &Project, extra: &str) -> String {
    let script = p.out().join("count.sh");
    format!(
        "trust \"workspace-write\"{extra}\ntest #false\nprompt-template \"prompt.md\"\n{extra}\ndefaults {{\n    agent \"count\"\n}}\n{extra}\nagent \"count\" {{\n    command \"sh\" {:?}\n    pass-env \"COUNT_DIR\" \"SLEEP_TASK\"\n}}\n",
        script.display().to_string()
    )
}

fn count_dir(p: &Project) -> PathBuf {
    p.out().join("count")
}

/// The tasks an agent ran for so far, in call order.
fn calls(p: &Project) -> Vec<String> {
    match std::fs::read_to_string(count_dir(p).join("calls")) {
        Ok(t) => t.lines().map(str::to_owned).collect(),
        Err(_) => Vec::new(),
    }
}

/// The calls so far, sorted.
fn calls_sorted(p: &Project) -> Vec<String> {
    let mut c = calls(p);
    c.sort();
    c
}

/// `git checkout -- out`: every output back to `todo`.
fn restore_outputs(p: &Project) {
    p.git(&["checkout", "--", "out"]);
    for t in ALL {
        assert_eq!(p.read(&format!("out/{t}.txt")), "todo\n");
    }
}

/// The lock and the store agree: `cassist.lock` parses, names every
/// task in `tasks`, and each entry it references is whole in the store
/// with the same patch; no temp file is left in the store's folders.
#[track_caller]
fn assert_consistent(p: &Project, tasks: &[&str]) {
    let lock = cassist_core::lock::Lock::load(p.path()).unwrap_or_else(|e| panic!("cassist.lock: {e}"));
    let names: Vec<&str> = lock.tasks.keys().map(String::as_str).collect();
    assert_eq!(names, tasks, "the tasks in cassist.lock");
    let store = cassist_core::store::Store::open(p.path());
    for (name, l) in &lock.tasks {
        let entry = store
            .get_entry(&l.before)
            .unwrap_or_else(|| panic!("the store has no whole entry for `{name}` ({})", l.before));
        assert_eq!(entry.task, *name);
        assert_eq!(entry.patch, l.patch, "`{name}`: the lock's patch is the entry's");
        assert_eq!(entry.after, l.after, "`{name}`: the lock's after-hash is the entry's");
        let outputs = entry.outputs.as_ref().map(cassist_core::plan::state::outputs_hash);
        assert_eq!(outputs, l.outputs, "`{name}`: the lock's outputs are the entry's");
    }
    for sub in ["entries", "objects"] {
        crate::support::assert_no_temp_files(&p.path().join(".cassist/store").join(sub));
    }
}

fn all(state: &str) -> BTreeMap<String, String> {
    states(&ALL.map(|t| (t, state)))
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// The first run: every task passes, one agent call each; the outputs are
/// in the tree.
#[track_caller]
fn first_run(p: &Project) -> Output {
    let done = p.run(&[]).exec();
    assert_eq!(done.states(), all("passed"), "{}", done.transcript());
    assert_eq!(calls_sorted(p), strings(&ALL));
    assert_eq!(p.read("out/base.txt"), "Write the base.\n");
    assert_eq!(p.read("out/top.txt"), "Write the top.\n");
    assert_eq!(p.read("out/other.txt"), "Write the other.\n");
    assert_consistent(p, &ALL);
    done
}

/// A run in which no agent starts and every task is up-to-date.
#[track_caller]
fn assert_all_up_to_date(p: &Project) {
    let before = calls(p);
    let done = p.run(&[]).exec();
    assert_eq!(done.states(), all("up-to-date"), "{}", done.transcript());
    assert_eq!(calls(p), before, "no agent may run on an up-to-date project");
}

// ---------------------------------------------------------------------------
// First and second run

#[test]
fn the_first_run_calls_the_agent_and_the_second_none() {
    let p = project();
    let first = first_run(&p);
    assert_eq!(first.report_json()["cached"], 0);
    assert_eq!(p.plan_states(), all("up-to-date"));

    let second = p.run(&[]).exec();
    assert_eq!(calls(&p).len(), 3, "the second run called an agent:\n{}", second.transcript());
    assert_eq!(second.states(), all("up-to-date"), "{}", second.transcript());
    let json = second.report_json();
    assert_eq!((json["cached"].as_u64(), json["passed"].as_u64()), (Some(3), Some(0)), "{json}");
    for t in ALL {
        let r = second.task(t);
        assert_eq!(r["attempts"], 0, "{r}");
        assert_eq!(r["summary"], format!("wrote out/{t}.txt"), "the stored summary comes back: {r}");
        assert!(
            second.stdout.contains(&format!("{t} up-to-date: wrote out/{t}.txt")),
            "a one-line replay of the stored summary:\n{}",
            second.transcript()
        );
    }
    assert!(second.stdout.contains("transcript: "), "{}", second.transcript());
    assert_eq!(p.read("out/base.txt"), "Write the base.\n");
    assert_consistent(&p, &ALL);
    // The lock does not change when nothing ran.
    let lock = p.read("cassist.lock");
    assert_all_up_to_date(&p);
    assert_eq!(p.read("cassist.lock"), lock, "an up-to-date run rewrote cassist.lock");
}

// ---------------------------------------------------------------------------
// Replay

#[test]
fn restored_outputs_are_replayed_without_an_agent() {
    let p = project();
    first_run(&p);
    let lock = p.read("cassist.lock");
    restore_outputs(&p);
    assert_eq!(p.plan_states(), all("replay"));

    let done = p.run(&[]).exec();
    assert_eq!(calls(&p).len(), 3, "a replay called an agent:\n{}", done.transcript());
    assert_eq!(done.states(), all("replayed"), "{}", done.transcript());
    assert_eq!(done.report_json()["cached"], 3);
    // The change is in the tree again, uncommitted.
    assert_eq!(p.read("out/base.txt"), "Write the base.\n");
    assert_eq!(p.read("out/top.txt"), "Write the top.\n");
    assert_eq!(p.read("out/other.txt"), "Write the other.\n");
    let status = p.git(&["status", "--porcelain", "--", "out"]);
    assert_eq!(status, " M out/base.txt\n M out/other.txt\n M out/top.txt\n");
    // Acceptance was verified again.
    let acceptance = done.task("base")["acceptance"].clone();
    assert_eq!(acceptance[0]["command"], "grep -q base out/base.txt && test ! -e stop-base", "{acceptance}");
    assert_eq!(acceptance[0]["passed"], true, "{acceptance}");
    assert_consistent(&p, &ALL);
    // The record of the agent's run stands: the lock (dates included) and
    // the store entry with its prompt and transcript.
    assert_eq!(p.read("cassist.lock"), lock, "a replay rewrote cassist.lock");
    let store = cassist_core::store::Store::open(p.path());
    for (name, l) in cassist_core::lock::Lock::load(p.path()).unwrap().tasks {
        let entry = store.get_entry(&l.before).unwrap();
        assert_eq!(entry.attempts, 1, "{name}: the entry of the agent's run was replaced");
        for record in ["prompt-1.md", "transcript-1.log", "review-1.json"] {
            assert!(entry.records.contains_key(record), "{name}: the entry lost {record}: {:?}", entry.records);
        }
    }
    let up = p.run(&[]).exec();
    assert_eq!(up.states(), all("up-to-date"));
    assert_eq!(up.stdout.matches("transcript: ").count(), 3, "{}", up.transcript());

    // One output restored: only that task is replayed.
    p.git(&["checkout", "--", "out/other.txt"]);
    let done = p.run(&[]).exec();
    assert_eq!(done.states(), states(&[("base", "up-to-date"), ("other", "replayed"), ("top", "up-to-date")]));
    assert_eq!(p.read("out/other.txt"), "Write the other.\n");
    assert_eq!(calls(&p).len(), 3);
}

/// cassist installed under `/tmp` (built in a temporary folder, say): the
/// replay helper is cassist itself, run in the sandbox whose `/tmp` is
/// private, and must still be found there.
#[test]
fn a_replay_works_with_cassist_installed_under_tmp() {
    if !crate::support::sandbox_or_skip(crate::support::Sandbox::Overlay) {
        return;
    }
    let p = project();
    first_run(&p);
    restore_outputs(&p);
    let bin = tempfile::Builder::new().prefix("cassist-bin-").tempdir_in("/tmp").unwrap();
    let exe = bin.path().join("cassist");
    std::fs::copy(crate::support::CASSIST, &exe).unwrap();

    let done = p.run(&[]).program(&exe).exec();
    assert_eq!(done.states(), all("replayed"), "{}", done.transcript());
    assert_eq!(calls(&p).len(), 3, "a replay called an agent:\n{}", done.transcript());
    assert_eq!(p.read("out/base.txt"), "Write the base.\n");
    assert_eq!(p.read("out/top.txt"), "Write the top.\n");
    assert_eq!(p.read("out/other.txt"), "Write the other.\n");
    assert_consistent(&p, &ALL);
}

#[test]
fn a_replay_verifies_acceptance_again() {
    let p = project();
    first_run(&p);
    restore_outputs(&p);
    let lock = p.read("cassist.lock");
    // `stop-base` is no input of `base`, but its acceptance fails with it.
    p.file("stop-base", "");
    assert_eq!(p.plan_states(), all("replay"));
    // `--locked` starts no agent: the task is refused, naming why.
    let done = p.run(&["-j", "1", "--locked"]).status(3).exec();
    let said = "  base: the replayed change no longer passes: acceptance command `grep -q base out/base.txt && test ! -e stop-base` failed";
    assert!(done.stderr.contains(said), "{}", done.transcript());
    assert_eq!(done.task("base")["state"], "skipped", "{}", done.transcript());
    assert_eq!(p.read("out/base.txt"), "todo\n", "a replay that fails acceptance is not integrated");
    assert_eq!(p.read("cassist.lock"), lock);
    assert_eq!(calls(&p).len(), 3, "a replay called an agent:\n{}", done.transcript());

    // `other`, independent of `base`, was replayed by that run.
    assert_eq!(p.read("out/other.txt"), "Write the other.\n");

    std::fs::remove_file(p.path().join("stop-base")).unwrap();
    let done = p.run(&[]).exec();
    let want = states(&[("base", "replayed"), ("other", "up-to-date"), ("top", "replayed")]);
    assert_eq!(done.states(), want, "{}", done.transcript());
    assert_eq!(calls(&p).len(), 3);
    assert_eq!(p.read("out/base.txt"), "Write the base.\n");
}

// ---------------------------------------------------------------------------
// Outputs (SPEC 4: the after-state covers the files a task wrote)

/// Two tasks whose context does not cover what they write: `first` writes
/// `out/first.txt`; `second` (after it) writes `out/second.txt` and adds a
/// line to `out/first.txt`.
const WRITERS: &str = r#"task "first" {
    goal "Write the first."
    context {
        file "src/x.py"
    }
    scope {
        path "out/**"
    }
}

task "second" {
    goal "Write the second."
    depends-on "first"
    context {
        file "src/y.py"
    }
    scope {
        path "out/**"
    }
}
"#;

fn writers() -> Project {
    let p = project_with(WRITERS, &[]);
    write(&count_dir(&p).join("hook-second.sh"), "echo 'second was here' >> out/first.txt\n");
    let done = p.run(&[]).exec();
    assert_eq!(done.states(), states(&[("first", "passed"), ("second", "passed")]), "{}", done.transcript());
    assert_eq!(p.read("out/first.txt"), "Write the first.\nsecond was here\n");
    p
}

#[test]
fn a_missing_created_output_is_replayed_an_edited_one_kept() {
    let p = writers();
    // The outputs are hashed as the run left them: `second` edited the
    // output of `first`, which is still up-to-date.
    assert_eq!(p.plan_states(), states(&[("first", "up-to-date"), ("second", "up-to-date")]));
    assert_consistent(&p, &["first", "second"]);
    let lock = p.read("cassist.lock");
    assert_eq!(lock.matches("    outputs \"").count(), 2, "{lock}");
    // Each output is in the lock: `first` created `out/first.txt`, which
    // `second` changed; `second` created `out/second.txt`.
    let parsed = cassist_core::lock::Lock::load(p.path()).unwrap();
    let created = |task: &str| -> Vec<(String, bool)> {
        parsed.tasks[task].output_files.iter().map(|(path, o)| (path.clone(), o.created)).collect()
    };
    assert_eq!(created("first"), [("out/first.txt".to_owned(), true)]);
    assert_eq!(created("second"), [("out/first.txt".to_owned(), false), ("out/second.txt".to_owned(), true)]);

    // Deleted: `first` created it and writes it again; `second`'s line in
    // it goes with first's replay, so `second` is replayed too.
    std::fs::remove_file(p.path().join("out/first.txt")).unwrap();
    assert_eq!(p.plan_states(), states(&[("first", "replay"), ("second", "replay")]));
    let why = p.explain("first");
    assert!(why.contains("state replay") && why.contains("output out/first.txt deleted"), "{why}");
    let why = p.explain("second");
    assert!(why.contains("output out/first.txt changed by the replay of an earlier task"), "{why}");
    let done = p.run(&[]).exec();
    assert_eq!(done.states(), states(&[("first", "replayed"), ("second", "replayed")]), "{}", done.transcript());
    assert_eq!(calls_sorted(&p), strings(&["first", "second"]), "a replay called an agent");
    assert_eq!(p.read("out/first.txt"), "Write the first.\nsecond was here\n");
    assert_eq!(p.read("cassist.lock"), lock, "a replay reproduces the recorded tree");
    assert_eq!(p.plan_states(), states(&[("first", "up-to-date"), ("second", "up-to-date")]));

    // Edited by hand: the user's, left as it is by `run --locked` and
    // `run`, and said.
    p.file("out/second.txt", "edited by hand\n");
    assert_eq!(p.plan_states(), states(&[("first", "up-to-date"), ("second", "up-to-date")]));
    assert!(p.explain("second").contains("output edited: out/second.txt"), "{}", p.explain("second"));
    for args in [&["--locked"][..], &[]] {
        let done = p.run(args).exec();
        assert_eq!(
            done.states(),
            states(&[("first", "up-to-date"), ("second", "up-to-date")]),
            "{}",
            done.transcript()
        );
        assert!(
            done.stdout.contains("second up-to-date (output edited: out/second.txt, kept)"),
            "{}",
            done.transcript()
        );
        assert_eq!(done.task("second")["reason"], "output edited: out/second.txt");
        assert_eq!(p.read("out/second.txt"), "edited by hand\n");
        assert_eq!(p.read("cassist.lock"), lock);
    }

    // Deleted by hand: `second` created it, so it is written again; by
    // `--locked`, which leaves the lock alone.
    std::fs::remove_file(p.path().join("out/second.txt")).unwrap();
    assert_eq!(p.plan_states(), states(&[("first", "up-to-date"), ("second", "replay")]));
    let done = p.run(&["--locked"]).exec();
    assert_eq!(done.states(), states(&[("first", "up-to-date"), ("second", "replayed")]), "{}", done.transcript());
    assert_eq!(p.read("out/second.txt"), "Write the second.\n");
    assert_eq!(p.read("cassist.lock"), lock, "--locked wrote cassist.lock");
    assert_eq!(calls(&p).len(), 2);
    assert_consistent(&p, &["first", "second"]);
}

#[test]
fn a_lock_line_without_outputs_is_checked_on_inputs_only() {
    let p = writers();
    let lock = p.read("cassist.lock");
    // Neither the outputs' hash nor each output: as a release before both
    // wrote it.
    let old: String = lock.lines().filter(|l| !l.starts_with("    output")).map(|l| format!("{l}\n")).collect();
    assert_ne!(old, lock);
    p.file("cassist.lock", &old);
    std::fs::remove_file(p.path().join("out/second.txt")).unwrap();
    assert_eq!(p.plan_states(), states(&[("first", "up-to-date"), ("second", "up-to-date")]));
    let done = p.run(&[]).exec();
    assert_eq!(done.states(), states(&[("first", "up-to-date"), ("second", "up-to-date")]), "{}", done.transcript());
    assert_eq!(p.read("cassist.lock"), old, "an up-to-date run leaves an older lock as it is");
}

// ---------------------------------------------------------------------------
// Replay chains: `plan` predicts what `run` does

/// `use` depends on `make`, and its context (`out/m*.txt`) takes in the
/// file `make` adds (`out/make.txt`) besides `out/marker.txt`.
const CHAIN: &str = r#"task "make" {
    goal "Write the make."
    context {
        file "src/x.py"
    }
    scope {
        path "out/**"
    }
}

task "use" {
    goal "Write the use."
    depends-on "make"
    context {
        file "out/m*.txt"
    }
    scope {
        path "out/**"
    }
}
"#;

#[test]
fn plan_predicts_a_replay_chain_as_run_does_it() {
    let p = project_with(CHAIN, &[("out/marker.txt", "marker\n")]);
    let done = p.run(&[]).exec();
    assert_eq!(done.states(), states(&[("make", "passed"), ("use", "passed")]), "{}", done.transcript());
    let lock = p.read("cassist.lock");
    // Undone as a user would: `out/make.txt` and `out/use.txt` go.
    p.git(&["clean", "-fdq", "out"]);
    assert!(!p.exists("out/make.txt") && !p.exists("out/use.txt"));
    // The dependent's context is what the replay of `make` writes: `use`
    // is a replay too, not a run.
    assert_eq!(p.plan_states(), states(&[("make", "replay"), ("use", "replay")]));
    let why = p.explain("use");
    assert!(why.contains("state replay") && why.contains("as the replay of `make` will leave them"), "{why}");
    // And `run --locked` does exactly that, with no agent.
    let done = p.run(&["--locked"]).exec();
    assert_eq!(done.states(), states(&[("make", "replayed"), ("use", "replayed")]), "{}", done.transcript());
    assert_eq!(calls_sorted(&p), strings(&["make", "use"]));
    assert_eq!(p.read("out/use.txt"), "Write the use.\n");
    assert_eq!(p.read("cassist.lock"), lock);
    assert_eq!(p.plan_states(), states(&[("make", "up-to-date"), ("use", "up-to-date")]));
}

// ---------------------------------------------------------------------------
// A lost lock line (SPEC 4: the store is a cache the plan trusts)

#[test]
fn a_store_entry_for_the_current_inputs_is_replayed_and_its_lock_line_written_again() {
    let p = project();
    first_run(&p);
    let lock = p.read("cassist.lock");
    restore_outputs(&p);
    std::fs::remove_file(p.path().join("cassist.lock")).unwrap();
    assert_eq!(p.plan_states(), all("replay"), "the store holds a run of each task's inputs");
    let why = p.explain("top");
    assert!(why.contains("the store holds a run of these inputs that cassist.lock does not record"), "{why}");

    // `--locked` trusts the lock only: these would need an agent.
    let done = p.run(&["--locked"]).status(3).exec();
    assert!(done.stderr.contains("  base: cassist.lock does not record these inputs"), "{}", done.transcript());
    assert!(!p.exists("cassist.lock"), "--locked wrote cassist.lock");
    assert_eq!(p.read("out/base.txt"), "todo\n");

    let done = p.run(&[]).exec();
    assert_eq!(done.states(), all("replayed"), "{}", done.transcript());
    assert_eq!(calls(&p).len(), 3, "a lost lock line cost an agent:\n{}", done.transcript());
    assert_eq!(p.read("cassist.lock"), lock, "the lines come back as recorded");
    assert_consistent(&p, &ALL);
    assert_all_up_to_date(&p);

    // Inputs seen before are replayed too, whatever the lock says now.
    p.edit("tasks/t.kdl", "Write the other.", "Write the other, again.");
    p.run(&[]).exec();
    assert_eq!(calls(&p).len(), 4);
    p.edit("tasks/t.kdl", "Write the other, again.", "Write the other.");
    p.file("out/other.txt", "todo\n");
    assert_eq!(p.plan_states()["other"], "replay");
    let done = p.run(&[]).exec();
    assert_eq!(done.states()["other"], "replayed", "{}", done.transcript());
    assert_eq!(p.read("out/other.txt"), "Write the other.\n");
    assert_eq!(calls(&p).len(), 4);
    assert_consistent(&p, &ALL);
    assert_all_up_to_date(&p);
}

// ---------------------------------------------------------------------------
// A broken store (SPEC 4: an unusable entry is as if there were none)

/// The store entry `task`'s lock line names, and the object of the new
/// content of `path` in it.
fn stored(p: &Project, task: &str, path: &str) -> (PathBuf, PathBuf, String) {
    let lock = cassist_core::lock::Lock::load(p.path()).unwrap();
    let before = &lock.tasks[task].before;
    let store = p.path().join(".cassist/store");
    let entry = store.join("entries").join(format!("{before}.json"));
    let e = cassist_core::store::Store::open(p.path()).read_entry(before).unwrap().unwrap();
    let object = e.changes.iter().find(|c| c.path == path).unwrap().new.clone().unwrap();
    (entry, store.join("objects").join(&object[..2]).join(&object[2..]), object)
}

/// The words of a command's stderr, without the frame of a diagnostic
/// (which wraps its lines).
fn words(stderr: &str) -> String {
    flat(&stderr.replace('│', " "))
}

#[test]
fn a_corrupt_or_missing_object_or_a_garbage_entry_is_warned_about_and_the_task_runs() {
    let p = project();
    first_run(&p);
    restore_outputs(&p);
    let (_, base_object, base_hash) = stored(&p, "base", "out/base.txt");
    let (other_entry, other_object, other_hash) = stored(&p, "other", "out/other.txt");
    // Truncated, deleted.
    let bytes = std::fs::read(&base_object).unwrap();
    std::fs::write(&base_object, &bytes[..bytes.len() / 2]).unwrap();
    std::fs::remove_file(&other_object).unwrap();
    let lock = p.read("cassist.lock");

    let plan = p.cassist(&["plan", "--json"]).exec();
    let said = words(&plan.stderr);
    let base_said = format!("task `base` cannot be used: store object {base_hash} (the new out/base.txt) is corrupt");
    assert!(said.contains(&base_said), "{}", plan.transcript());
    let other_said = format!("`other` cannot be used: store object {other_hash} (the new out/other.txt) is missing");
    assert!(said.contains(&other_said), "{}", plan.transcript());
    assert!(said.contains("the task runs as if there were none"), "{said}");
    // `top` depends on `base`, which runs: a new input for it too.
    assert_eq!(p.plan_states(), all("run"));
    assert!(p.explain("base").contains("is corrupt"), "{}", p.explain("base"));

    // `--locked`: exit 3, each task named with why; nothing written.
    let done = p.run(&["--locked"]).status(3).exec();
    let said = words(&done.stderr);
    assert!(said.contains(&format!("base: the stored run cannot be used: store object {base_hash}")), "{said}");
    assert!(said.contains(&format!("other: the stored run cannot be used: store object {other_hash}")), "{said}");
    assert_eq!(calls(&p).len(), 3);
    assert_eq!(p.read("cassist.lock"), lock);

    // A plain run: the agent runs for each, and the store is whole again.
    let done = p.run(&[]).exec();
    assert_eq!(done.states()["base"], "passed", "{}", done.transcript());
    assert_eq!(done.states()["other"], "passed", "{}", done.transcript());
    assert_eq!(calls(&p).iter().filter(|c| *c != "top").count(), 4);
    assert_consistent(&p, &ALL);
    assert_all_up_to_date(&p);
    restore_outputs(&p);
    assert_eq!(p.plan_states(), all("replay"), "the objects were written again");
    let plan = p.cassist(&["plan"]).exec();
    assert!(!plan.stderr.contains("cannot be used"), "{}", plan.transcript());

    // A garbage entry file.
    std::fs::write(&other_entry, "{ \"format\": 1, \"task\": ").unwrap();
    let plan = p.cassist(&["plan"]).exec();
    let said = words(&plan.stderr);
    assert!(said.contains("`other` cannot be used: its entry ") && said.contains("is unreadable"), "{said}");
    let done = p.run(&[]).exec();
    assert_eq!(done.states(), states(&[("base", "replayed"), ("other", "passed"), ("top", "replayed")]));
    assert_consistent(&p, &ALL);
    assert_all_up_to_date(&p);
}

// ---------------------------------------------------------------------------
// What invalidates a task

#[test]
fn a_changed_goal_runs_that_task_again_and_only_it() {
    let p = project();
    first_run(&p);
    p.edit("tasks/t.kdl", "Write the other.", "Write the other, again.");
    assert!(p.explain("other").contains("goal changed"), "{}", p.explain("other"));
    assert_eq!(p.plan_states(), states(&[("base", "up-to-date"), ("other", "run"), ("top", "up-to-date")]));

    let done = p.run(&[]).exec();
    assert_eq!(done.states(), states(&[("base", "up-to-date"), ("other", "passed"), ("top", "up-to-date")]));
    assert_eq!(calls_sorted(&p), strings(&["base", "other", "other", "top"]));
    assert_eq!(p.read("out/other.txt"), "Write the other, again.\n");
    assert_consistent(&p, &ALL);
    assert_all_up_to_date(&p);
}

#[test]
fn one_byte_of_a_context_file_runs_that_task_again_and_only_it() {
    let p = project();
    first_run(&p);
    p.file("src/z.py", "print('Z')\n");
    let why = p.explain("other");
    assert!(why.contains("src/z.py changed"), "{why}");
    assert!(!why.contains("goal changed"), "{why}");

    let done = p.run(&[]).exec();
    assert_eq!(done.states(), states(&[("base", "up-to-date"), ("other", "passed"), ("top", "up-to-date")]));
    assert_eq!(calls_sorted(&p), strings(&["base", "other", "other", "top"]));
    assert_consistent(&p, &ALL);
    assert_all_up_to_date(&p);
}

#[test]
fn a_changed_template_runs_every_task_again() {
    let p = project();
    first_run(&p);
    p.file("prompt.md", format!("{TEMPLATE}\n"));
    for t in ALL {
        let why = p.explain(t);
        assert!(why.contains("template changed"), "{t}: {why}");
    }
    let done = p.run(&[]).exec();
    assert_eq!(done.states(), all("passed"), "{}", done.transcript());
    assert_eq!(calls(&p).len(), 6);
    assert_all_up_to_date(&p);
}

#[test]
fn a_dependencys_new_output_runs_its_dependents_again() {
    let p = project();
    first_run(&p);
    p.edit("tasks/t.kdl", "Write the base.", "Write the base, version two.");
    assert!(p.explain("base").contains("goal changed"));
    let why = p.explain("top");
    assert!(why.contains("dependency base changed"), "{why}");
    assert!(!why.contains("goal changed"), "{why}");
    assert_eq!(p.plan_states(), states(&[("base", "run"), ("other", "up-to-date"), ("top", "run")]));

    let done = p.run(&[]).exec();
    assert_eq!(done.states(), states(&[("base", "passed"), ("other", "up-to-date"), ("top", "passed")]));
    assert_eq!(calls_sorted(&p), strings(&["base", "base", "other", "top", "top"]));
    assert_eq!(p.read("out/base.txt"), "Write the base, version two.\n");
    assert_consistent(&p, &ALL);
    assert_all_up_to_date(&p);

    // Only the dependency runs (--filter): the dependent's record is stale
    // and names why.
    p.edit("tasks/t.kdl", "Write the base, version two.", "Write the base, version three.");
    let done = p.run(&["--filter", "base"]).exec();
    assert_eq!(done.states(), states(&[("base", "passed")]));
    assert_eq!(p.plan_states(), states(&[("base", "up-to-date"), ("other", "up-to-date"), ("top", "run")]));
    let why = p.explain("top");
    assert!(why.contains("dependency base changed"), "{why}");
}

#[test]
fn reformatting_the_kdl_runs_nothing() {
    let p = project();
    first_run(&p);
    p.file("tasks/t.kdl", TASKS_REFORMATTED);
    p.file("cassist.kdl", format!("// the project\n{}", config(&p, "\n// a comment\n")));
    assert_eq!(p.plan_states(), all("up-to-date"), "{}", p.cassist(&["plan"]).exec().stdout);
    assert_all_up_to_date(&p);
    assert_consistent(&p, &ALL);
}

// ---------------------------------------------------------------------------
// --locked, --no-cache

#[test]
fn locked_never_starts_an_agent() {
    let p = project();

    // Nothing recorded: every task would need an agent.
    let done = p.run(&["--locked"]).status(3).exec();
    assert!(calls(&p).is_empty());
    assert_eq!(p.read("out/base.txt"), "todo\n");
    for t in ALL {
        assert!(done.stderr.contains(&format!("  {t}: never run")), "{t}:\n{}", done.transcript());
    }
    assert!(!p.path().join("cassist.lock").exists(), "--locked wrote cassist.lock");

    first_run(&p);
    let lock = p.read("cassist.lock");
    p.run(&["--locked"]).exec();

    // A replay needs no agent: allowed.
    restore_outputs(&p);
    let done = p.run(&["--locked"]).exec();
    assert_eq!(done.states(), all("replayed"), "{}", done.transcript());
    assert_eq!(calls(&p).len(), 3);

    // A changed goal would: exit 3, the task and why on stderr, nothing
    // changed.
    p.edit("tasks/t.kdl", "Write the other.", "Write the other, again.");
    let tree = p.read("out/other.txt");
    let done = p.run(&["--locked"]).status(3).exec();
    assert_eq!(calls(&p).len(), 3, "--locked started an agent:\n{}", done.transcript());
    assert!(done.stderr.contains("--locked: 1 task(s) would need an agent run"), "{}", done.transcript());
    assert!(done.stderr.contains("  other: goal changed"), "{}", done.transcript());
    assert_eq!(done.states(), states(&[("base", "up-to-date"), ("other", "skipped"), ("top", "up-to-date")]));
    assert_eq!(p.read("out/other.txt"), tree);
    assert_eq!(p.read("cassist.lock"), lock, "--locked changed cassist.lock");
}

#[test]
fn locked_names_the_dependents_of_a_task_that_needs_an_agent() {
    let p = project();
    first_run(&p);
    // What `base` asks changed (a file it reads alone would be verified
    // by its acceptance command, with no agent).
    p.edit("tasks/t.kdl", "Write the base.", "Write the base!");
    let done = p.run(&["--locked"]).status(3).exec();
    assert_eq!(calls(&p).len(), 3);
    assert!(done.stderr.contains("  base: goal changed"), "{}", done.transcript());
    assert!(
        done.stderr.contains("  top: dependency base changed"),
        "top would need an agent too (its dependency's output changes):\n{}",
        done.transcript()
    );
    assert!(done.stderr.contains("--locked: 2 task(s) would need an agent run"), "{}", done.transcript());
}

#[test]
fn no_cache_calls_the_agent() {
    let p = project();
    first_run(&p);
    let done = p.run(&["--no-cache"]).exec();
    assert_eq!(done.states(), all("passed"), "{}", done.transcript());
    assert_eq!(calls(&p).len(), 6);
    assert_consistent(&p, &ALL);
    assert_all_up_to_date(&p);
}

// ---------------------------------------------------------------------------
// explain

#[test]
fn explain_names_the_change() {
    let p = project();
    let why = p.explain("base");
    assert!(why.contains("state run") && why.contains("never run"), "{why}");
    first_run(&p);
    let why = p.explain("base");
    assert!(why.contains("state up-to-date") && why.contains("unchanged since it was recorded"), "{why}");
    assert!(!why.contains(" changed\n"), "{why}");

    // Each change, then back.
    // A file it reads alone: its acceptance command decides (`verify`).
    let cases: [(&str, &str, &str, &str, &str, &str); 4] = [
        ("tasks/t.kdl", "Write the top.", "Write the top!", "top", "goal changed", "run"),
        ("src/x.py", "print('x')", "print('x') ", "base", "src/x.py changed", "verify"),
        ("tasks/t.kdl", "Write the base.", "Write the base!", "top", "dependency base changed", "run"),
        ("prompt.md", "# Context", "# Context:", "other", "template changed", "run"),
    ];
    for (file, from, to, task, reason, state) in cases {
        p.edit(file, from, to);
        let why = p.explain(task);
        assert!(why.contains(&format!("state {state}\n")), "{file}: {why}");
        assert!(why.contains(&format!("\n  {reason}\n")), "{file}: `{task}` should say {reason:?}:\n{why}");
        assert!(why.contains("changed"), "{why}");
        p.edit(file, to, from);
        assert!(p.explain(task).contains("state up-to-date"));
    }
    // The table marks the changed input.
    p.file("src/y.py", "print('Y')\n");
    let why = p.explain("top");
    let row = why.lines().find(|l| l.contains("src/y.py")).unwrap_or_else(|| panic!("no src/y.py row:\n{why}"));
    assert!(row.ends_with("changed"), "{row}");
    let row = why.lines().find(|l| l.contains("out/top.txt")).unwrap();
    assert!(row.ends_with("unchanged"), "{row}");
    assert_eq!(calls(&p).len(), 3, "explain started an agent");
}

#[test]
fn a_changed_model_runs_that_task_again_and_explain_names_it() {
    let p = project();
    first_run(&p);
    // `--model` asks for a model for every task: all of them run.
    let json = p.cassist(&["plan", "--json", "--model", "m-small"]).exec().json();
    assert!(json["tasks"].as_array().unwrap().iter().all(|t| t["state"] == "run"), "{json}");
    // A task's own model: that task only (nothing depends on `other`).
    p.edit("tasks/t.kdl", "goal \"Write the other.\"", "goal \"Write the other.\"\n    model \"m-big\"");
    assert_eq!(p.plan_states(), states(&[("base", "up-to-date"), ("other", "run"), ("top", "up-to-date")]));
    let why = p.explain("other");
    assert!(why.contains("\n  model default → m-big\n"), "{why}");
    let row = why.lines().find(|l| l.starts_with("model ")).unwrap_or_else(|| panic!("no model row:\n{why}"));
    assert!(row.contains("m-big") && row.ends_with("new"), "{row}");
    let done = p.run(&[]).exec();
    assert_eq!(done.task("other")["state"], "passed", "{}", done.transcript());
    assert_eq!(calls(&p).last().map(String::as_str), Some("other"));
    assert_eq!(calls(&p).len(), 4);
    // From one model to another, and back to the CLI's default.
    p.edit("tasks/t.kdl", "model \"m-big\"", "model \"m-bigger\"");
    assert!(p.explain("other").contains("\n  model m-big → m-bigger\n"), "{}", p.explain("other"));
    // Back to the CLI's default, with the tree as the run of the default
    // left it: the store knows that after-state.
    p.edit("tasks/t.kdl", "\n    model \"m-bigger\"", "");
    assert_eq!(p.plan_states()["other"], "up-to-date");
    assert!(p.explain("other").contains("its inputs are as a stored run left them"), "{}", p.explain("other"));
    // With another output, it is not: the model change is what explain
    // names.
    p.file("out/other.txt", "Written by hand.\n");
    assert!(p.explain("other").contains("\n  model m-big → default\n"), "{}", p.explain("other"));
}

// ---------------------------------------------------------------------------
// The project's test and build commands (issue 14)

/// A code task, an explore and a review task (their agent writes only for
/// the code task), with `setup`, `test` and `build` commands that pass.
fn checks_project() -> Project {
    let agent = "if [ \"$CASSIST_TASK\" = write ]; then echo written > out.txt; fi; \
                 echo '{\"success\": true, \"summary\": \"done\"}' > \"$CASSIST_RESULT_FILE\"";
    let tasks = "task \"write\" {\n    goal \"Write out.txt.\"\n}\n\
                 task \"look\" {\n    goal \"Look around.\"\n    kind \"explore\"\n}\n\
                 task \"check\" {\n    goal \"Review it.\"\n    kind \"review\"\n}\n";
    Test::new()
        .outside_tmp()
        .config("trust \"workspace-write\"\nsetup \"true\"\ntest \"true\"\nbuild \"true\"\ndefaults {\n    agent \"a\"\n}\n")
        .sh_agent("a", agent)
        .tasks(tasks)
        .git()
        .build()
}

#[test]
fn a_changed_test_or_build_command_runs_only_the_tasks_that_run_it() {
    let p = checks_project();
    let done = p.run(&[]).exec();
    let passed = states(&[("check", "passed"), ("look", "passed"), ("write", "passed")]);
    assert_eq!(done.states(), passed, "{}", done.transcript());
    assert_eq!(p.read("out.txt"), "written\n");
    let up_to_date = states(&[("check", "up-to-date"), ("look", "up-to-date"), ("write", "up-to-date")]);
    assert_eq!(p.plan_states(), up_to_date);
    // The code task runs the tests and the build; the explore and review
    // tasks run neither.
    let code_only = states(&[("check", "up-to-date"), ("look", "up-to-date"), ("write", "run")]);
    for (from, to) in [("test \"true\"", "test \"true && true\""), ("build \"true\"", "build \"true && true\"")] {
        p.edit("cassist.kdl", from, to);
        assert_eq!(p.plan_states(), code_only, "{to}");
        let why = p.explain("write");
        assert!(why.contains("project config (setup, test, build commands or limits) changed"), "{why}");
        p.edit("cassist.kdl", to, from);
    }
    // `setup` runs for every task.
    p.edit("cassist.kdl", "setup \"true\"", "setup \"true && true\"");
    assert_eq!(p.plan_states(), states(&[("check", "run"), ("look", "run"), ("write", "run")]));
    p.edit("cassist.kdl", "setup \"true && true\"", "setup \"true\"");
    // And `run` agrees with `plan`.
    p.edit("cassist.kdl", "test \"true\"", "test \"true && true\"");
    let done = p.run(&[]).exec();
    let states_now = states(&[("check", "up-to-date"), ("look", "up-to-date"), ("write", "passed")]);
    assert_eq!(done.states(), states_now, "{}", done.transcript());
}

// ---------------------------------------------------------------------------
// Two processes, a killed process

#[test]
fn two_runs_at_once_call_each_agent_once() {
    let p = project();
    // The first run holds the project while the agent of `base` waits for
    // `go`; the second starts then, and must wait for the first.
    let started = count_dir(&p).join("base.started");
    let run = |report: &str| {
        let mut cmd = p.cassist(&["run"]);
        cmd.report(&p.out().join(report)).env("SLEEP_TASK", "base").stderr_lacks("waiting for another cassist run");
        cmd
    };
    let mut a = run("a.json").spawn();
    a.wait_for_file(&started);
    let mut b = p.cassist(&["run"]);
    let mut b = b.report(&p.out().join("b.json")).env("SLEEP_TASK", "base").spawn();
    b.wait_for_stderr("waiting for another cassist run");
    std::fs::write(count_dir(&p).join("go"), "").unwrap();
    let (a, b) = (a.finish(), b.finish());
    assert_eq!(calls_sorted(&p), strings(&ALL), "each agent once in all:\n{}\n{}", a.transcript(), b.transcript());
    assert_eq!(a.states(), all("passed"), "{}", a.transcript());
    assert_eq!(b.states(), all("up-to-date"), "{}", b.transcript());
    assert_consistent(&p, &ALL);
    assert_eq!(p.read("out/top.txt"), "Write the top.\n");
    assert_all_up_to_date(&p);
}

#[test]
fn a_run_killed_mid_task_leaves_a_store_the_next_run_uses() {
    let p = project();
    let started = count_dir(&p).join("top.started");
    // The workspaces under a temp folder of the test's own: a killed run
    // cannot remove its workspace (nor stop its agent, which waits for
    // `go` below), so it goes away with the test.
    let tmp = p.out().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let tmp = tmp.display().to_string();
    let mut run = p
        .cassist(&["run"])
        .report(&p.out().join("killed.json"))
        .env("SLEEP_TASK", "top")
        .env("TMPDIR", &tmp)
        .any_status()
        .spawn();
    run.wait_for_file(&started);
    crate::support::signal(run.pid(), nix::sys::signal::Signal::SIGKILL);
    let killed = run.finish();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&killed.status), Some(9));
    // The agent dies with cassist (parent-death signal): no process of it
    // is left.
    let marker = p.out().join("count.sh").display().to_string();
    wait_until(Duration::from_secs(10), "the agent died with the killed cassist", || {
        processes_with(&marker).is_empty()
    });
    std::fs::write(count_dir(&p).join("go"), "").unwrap();

    // What was recorded before the kill is whole; top is not recorded.
    let lock = cassist_core::lock::Lock::load(p.path()).expect("cassist.lock parses after a kill");
    assert!(lock.tasks.contains_key("base") && !lock.tasks.contains_key("top"), "{lock:?}");
    let recorded: Vec<&str> = lock.tasks.keys().map(String::as_str).collect();
    assert_consistent(&p, &recorded);
    assert_eq!(p.read("out/top.txt"), "todo\n", "the killed task was integrated");

    // The killed task's workspace is still there; the next run removes it.
    // (Named after its task: `base`'s, handed to the background removal
    // when it passed, may or may not be gone by the kill.)
    let workspaces = |tmp: &str, task: &str| -> usize {
        walkdir::WalkDir::new(tmp)
            .min_depth(2)
            .max_depth(2)
            .into_iter()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(task))
            .filter(|e| e.path().join("owner.pid").is_file())
            .count()
    };
    assert_eq!(workspaces(&tmp, "top-"), 1, "the killed run's workspace");
    let done = p.run(&[]).env("TMPDIR", &tmp).exec();
    assert_eq!(workspaces(&tmp, ""), 0, "the stale workspace was not removed");
    let s = done.states();
    assert_eq!(s["base"], "up-to-date", "{}", done.transcript());
    assert_eq!(s["top"], "passed", "{}", done.transcript());
    assert!(s.values().all(|v| v == "up-to-date" || v == "passed"), "{}", done.transcript());
    let calls = calls_sorted(&p);
    assert_eq!(calls.iter().filter(|c| *c == "base").count(), 1, "{calls:?}");
    assert_eq!(calls.iter().filter(|c| *c == "top").count(), 2, "{calls:?}");
    assert_eq!(calls.iter().filter(|c| *c == "other").count(), 1, "{calls:?}");
    assert_eq!(p.read("out/top.txt"), "Write the top.\n");
    assert_consistent(&p, &ALL);
    assert_all_up_to_date(&p);
}

// ---------------------------------------------------------------------------
// cassist cache

/// The bytes of the files of the project's store.
fn store_bytes(p: &Project) -> u64 {
    walkdir::WalkDir::new(p.path().join(".cassist/store"))
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file())
        .map(|e| e.metadata().unwrap().len())
        .sum()
}

/// A size as `cache ls` and `cache gc` show it.
fn human_size(bytes: u64) -> String {
    match bytes {
        b if b < 1024 => format!("{b} B"),
        b if b < 1024 * 1024 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{:.1} MiB", b as f64 / 1048576.0),
    }
}

#[test]
fn cache_ls_gc_and_clean() {
    let p = project();
    let ls = p.cassist(&["cache", "ls"]).exec();
    assert!(ls.stdout.contains("the store is empty"), "{}", ls.transcript());

    first_run(&p);
    let ls = p.cassist(&["cache", "ls"]).exec();
    for t in ALL {
        let row =
            ls.stdout.lines().find(|l| l.starts_with(&format!("{t} "))).unwrap_or_else(|| panic!("{}", ls.stdout));
        assert!(row.contains(" yes ") && row.contains(&format!("wrote out/{t}.txt")), "{row}");
    }
    assert!(ls.stdout.contains("3 entries"), "{}", ls.stdout);

    // A new goal for other: its old entry is no longer in the lock.
    p.edit("tasks/t.kdl", "Write the other.", "Write the other, again.");
    p.run(&[]).exec();
    let ls = p.cassist(&["cache", "ls"]).exec();
    assert!(ls.stdout.contains("4 entries"), "{}", ls.stdout);
    assert_eq!(ls.stdout.lines().filter(|l| l.starts_with("other ") && l.contains(" no ")).count(), 1, "{}", ls.stdout);

    // The sizes add up: the store's bytes on disk, and per entry what
    // removing it alone frees (not the objects it shares: other's first
    // output is its second run's old content).
    let before = store_bytes(&p);
    assert!(ls.stdout.contains(&format!("4 entries, {} on disk in ", human_size(before))), "{}", ls.stdout);
    let row = ls.stdout.lines().find(|l| l.starts_with("other ") && l.contains(" no ")).unwrap();

    // gc --keep 0 keeps what the lock references, drops the rest, and
    // frees what `ls` said it would.
    let gc = p.cassist(&["cache", "gc", "--keep", "0"]).exec();
    let freed = human_size(before - store_bytes(&p));
    assert_eq!(gc.stdout, format!("removed 1 entry, freed {freed}\n"), "{}", gc.transcript());
    assert!(row.contains(&format!("  {freed}  ")), "cache ls said {row:?}; gc freed {freed}");
    let ls = p.cassist(&["cache", "ls"]).exec();
    assert!(ls.stdout.contains("3 entries") && !ls.stdout.contains(" no "), "{}", ls.stdout);
    assert!(ls.stdout.contains(&format!("3 entries, {} on disk", human_size(store_bytes(&p)))), "{}", ls.stdout);
    assert_consistent(&p, &ALL);
    // What gc kept still replays. (The entry of `other` recorded its
    // second run, made on its first output: `todo` is not its before-state.)
    p.git(&["checkout", "--", "out/base.txt", "out/top.txt"]);
    let done = p.run(&[]).exec();
    assert_eq!(done.states(), states(&[("base", "replayed"), ("other", "up-to-date"), ("top", "replayed")]));
    assert_eq!(calls(&p).len(), 4);
    assert_eq!(p.read("out/top.txt"), "Write the top.\n");
    p.file("out/other.txt", "Write the other.\n");
    let done = p.run(&[]).exec();
    assert_eq!(done.states(), states(&[("base", "up-to-date"), ("other", "replayed"), ("top", "up-to-date")]));
    assert_eq!(p.read("out/other.txt"), "Write the other, again.\n");
    assert_eq!(calls(&p).len(), 4);

    // clean empties the store: nothing to replay, the agent runs again.
    let bytes = human_size(store_bytes(&p));
    p.cassist(&["cache", "clean"]).stdout_has(&format!(", freed {bytes}\n")).exec();
    assert!(!p.exists(".cassist/store/entries"));
    p.cassist(&["cache", "ls"]).stdout_has("the store is empty").exec();
    restore_outputs(&p);
    // `other`'s output, put back to `todo`, is no longer what its run
    // started from: the user's, left as it is.
    assert_eq!(p.plan_states(), states(&[("base", "run"), ("other", "up-to-date"), ("top", "run")]));
    let why = p.explain("base");
    assert!(why.contains("the store holds no record"), "{why}");
    assert!(p.explain("other").contains("output edited: out/other.txt"), "{}", p.explain("other"));
    let done = p.run(&[]).exec();
    assert_eq!(done.states(), states(&[("base", "passed"), ("other", "up-to-date"), ("top", "passed")]));
    assert_eq!(calls(&p).len(), 6);
    assert_eq!(p.read("out/other.txt"), "todo\n");
    assert_all_up_to_date(&p);
}

// ---------------------------------------------------------------------------
// A broken lock

#[test]
fn a_corrupt_lock_is_a_clear_error() {
    let p = project();
    first_run(&p);
    let lock = p.read("cassist.lock");
    p.file("cassist.lock", format!("{}\ntask \"base\" {{ before", &lock[..lock.len() / 2]));
    for args in [&["run"][..], &["plan"], &["explain", "base"]] {
        let done = p.cassist(args).status(2).exec();
        assert!(done.stderr.contains("cassist.lock is not valid KDL"), "{args:?}:\n{}", done.transcript());
        assert!(done.stderr.contains("restore it from version control"), "{args:?}:\n{}", done.transcript());
    }
    p.file("cassist.lock", lock.replace("version 1", "version 9"));
    let done = p.cassist(&["run"]).status(2).exec();
    assert!(done.stderr.contains("upgrade cassist"), "{}", done.transcript());
    assert_eq!(calls(&p).len(), 3, "an agent ran despite the broken lock");
    p.file("cassist.lock", &lock);
    assert_all_up_to_date(&p);
}

/// A fake `claude` CLI: `--version` prints the version in `FAKE_CLAUDE_VERSION`
/// (baked into the script, so a new version is a new binary); otherwise it
/// writes `out/<task>.txt` and prints Claude's JSON result.
fn fake_claude(bin: &Path, version: &str) {
    let script = format!(
        "#!/bin/sh\nif [ \"${{1:-}}\" = --version ]; then echo '{version} (Claude Code)'; exit 0; fi\ncat > /dev/null\nmkdir -p out\necho \"claude $CASSIST_TASK\" > \"out/$CASSIST_TASK.txt\"\necho '{{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"done\",\"num_turns\":1,\"usage\":{{\"input_tokens\":10,\"output_tokens\":2}},\"total_cost_usd\":0.01,\"permission_denials\":[]}}'\n"
    );
    let path = bin.join("claude");
    write_executable(&path, &script);
    // A new binary on every call: a later mtime even within one second.
    let when = std::time::SystemTime::now() + Duration::from_secs(if version.ends_with('3') { 10 } else { 0 });
    std::fs::File::options().write(true).open(&path).unwrap().set_modified(when).unwrap();
}

#[test]
fn a_new_agent_version_reruns_the_task_and_explain_names_it() {
    let p = project();
    p.file("tasks/t.kdl", "task \"solo\" {\n    goal \"Write out/solo.txt.\"\n    agent \"claude\"\n}\n");
    let bin = p.out().join("bin");
    fake_claude(&bin, "1.2");
    let run = |args: &[&str]| p.run(args).path_first(&[&bin]).exec();
    let done = run(&["--filter", "solo"]);
    assert_eq!(done.states()["solo"], "passed", "{}", done.transcript());
    let lock = cassist_core::lock::Lock::load(p.path()).unwrap();
    assert_eq!(lock.tasks["solo"].agent_version.as_deref(), Some("1.2 (Claude Code)"));
    assert_eq!(run(&["--filter", "solo"]).states()["solo"], "up-to-date");

    fake_claude(&bin, "1.3");
    let text = p.cassist(&["explain", "solo"]).path_first(&[&bin]).exec().stdout;
    assert!(text.contains("agent claude 1.2 (Claude Code) → 1.3 (Claude Code)"), "{text}");
    let done = run(&["--filter", "solo"]);
    assert_eq!(done.states()["solo"], "passed", "a new agent version runs the task again: {}", done.transcript());
}

#[test]
fn replaying_a_change_never_writes_through_a_symlink() {
    // The agent replaces a symlink by a file; the replay must do the same,
    // not write the new content into the link's target.
    let p = Test::trusted()
        .sh_agent("fake", "rm link.txt; echo new > link.txt")
        .kdl("defaults {\n    agent \"fake\"\n}\n")
        .tasks("task \"t\" {\n    goal \"Replace the link.\"\n    context {\n        file \"link.txt\"\n    }\n}\n")
        .file("real.txt", "original\n")
        .build();
    std::os::unix::fs::symlink("real.txt", p.path().join("link.txt")).unwrap();
    p.cassist(&["run"]).exec();
    let link = p.path().join("link.txt");
    assert!(!std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    // Put the link back: the task is replayed.
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink("real.txt", &link).unwrap();
    let plan = p.cassist(&["plan", "--json"]).exec().json();
    assert_eq!(plan["tasks"][0]["state"], "replay");
    p.cassist(&["run"]).exec();
    assert_eq!(p.read("real.txt"), "original\n", "the replay wrote through the symlink");
    assert!(!std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert_eq!(p.read("link.txt"), "new\n");
}
