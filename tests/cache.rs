//! The cache through `cassist run` (SPEC 4, issue 5): the real binary on
//! small temporary projects whose agent counts its invocations.
//!
//! Every project has three tasks, `base`, `top` (depends on `base`) and
//! `other`. Each task's context is a source file and its own output file
//! `out/<task>.txt`; the agent (a shell script outside the project) appends
//! the task's name to a counter file outside the project, then writes the
//! `# Goal` section of its prompt into `out/<task>.txt`. So a changed goal
//! is a changed output, and the counter says which tasks an agent ran for.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::fx::wait_with_limit;
use common::git;
use serde_json::Value;

// ---------------------------------------------------------------------------
// Support

/// The counting agent. `COUNT_DIR` (pass-env) is a folder outside the
/// project: `calls` gets one line per invocation. With `SLEEP_TASK` naming
/// this task, the agent touches `$COUNT_DIR/<task>.started` and waits (at
/// most 60 s) for `$COUNT_DIR/go`. With `AGENT_SLEEP`, it sleeps that long.
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
if [ -n "${AGENT_SLEEP:-}" ]; then
    sleep "$AGENT_SLEEP"
fi
mkdir -p out
printf '%s\n' "$prompt" | awk '/^# Goal$/ { f = 1; next } /^# / { f = 0 } f && NF' > "out/$CASSIST_TASK.txt"
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

/// A project (outside the temp folders) and a folder outside it, in the
/// temp folder, for the agent script, its counter, HOME and reports.
struct Fx {
    dir: tempfile::TempDir,
    out: tempfile::TempDir,
}

impl Fx {
    /// The three-task project, committed to git with every output at
    /// `todo`.
    fn new() -> Fx {
        // Outside the temp folders (agents may write those), as the tests of
        // `run` do; the agent's counter is in one.
        let dir = tempfile::Builder::new().prefix("cassist-cache-").tempdir_in(common::outside_temp_dir()).unwrap();
        let out = tempfile::Builder::new().prefix("cassist-cache-out-").tempdir().unwrap();
        let fx = Fx { dir, out };
        let script = fx.out().join("count.sh");
        std::fs::write(&script, AGENT).unwrap();
        std::fs::create_dir_all(fx.count_dir()).unwrap();
        fx.write("cassist.kdl", &fx.config(""));
        fx.write("prompt.md", TEMPLATE);
        fx.write("tasks/t.kdl", TASKS);
        for (f, t) in [("x", "base"), ("y", "top"), ("z", "other")] {
            fx.write(&format!("src/{f}.py"), &format!("print('{f}')\n"));
            fx.write(&format!("out/{t}.txt"), "todo\n");
        }
        git(fx.path(), &["init", "-q"]);
        git(fx.path(), &["add", "-A"]);
        git(
            fx.path(),
            &["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", "commit", "-qm", "init"],
        );
        fx
    }

    /// `cassist.kdl`, with `extra` (comments, blank lines) between nodes.
    fn config(&self, extra: &str) -> String {
        let script = self.out().join("count.sh");
        format!(
            "trust \"workspace-write\"{extra}\ntest #false\nprompt-template \"prompt.md\"\n{extra}\ndefaults {{\n    agent \"count\"\n}}\n{extra}\nagent \"count\" {{\n    command \"sh\" {:?}\n    pass-env \"COUNT_DIR\" \"SLEEP_TASK\" \"AGENT_SLEEP\"\n}}\n",
            script.display().to_string()
        )
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn out(&self) -> &Path {
        self.out.path()
    }

    fn count_dir(&self) -> PathBuf {
        self.out().join("count")
    }

    fn write(&self, rel: &str, text: &str) {
        let path = self.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
    }

    /// Replaces `from` (which must be there) with `to` in a project file.
    #[track_caller]
    fn edit(&self, rel: &str, from: &str, to: &str) {
        let text = self.read(rel);
        assert!(text.contains(from), "{rel} has no {from:?}:\n{text}");
        self.write(rel, &text.replacen(from, to, 1));
    }

    /// The tasks an agent ran for so far, in call order.
    fn calls(&self) -> Vec<String> {
        match std::fs::read_to_string(self.count_dir().join("calls")) {
            Ok(t) => t.lines().map(str::to_owned).collect(),
            Err(_) => Vec::new(),
        }
    }

    /// The calls so far, sorted.
    fn calls_sorted(&self) -> Vec<String> {
        let mut c = self.calls();
        c.sort();
        c
    }

    fn home(&self) -> PathBuf {
        let home = self.out().join("home");
        std::fs::create_dir_all(&home).unwrap();
        home
    }

    /// `cassist ARGS` in the project: a clean environment (PATH, NO_COLOR,
    /// HOME outside the project, the agent's COUNT_DIR) plus `env`.
    fn command(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_cassist"));
        cmd.current_dir(self.path())
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.home())
            .env("NO_COLOR", "1")
            .env("COUNT_DIR", self.count_dir())
            .stdin(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd
    }

    /// `cassist ARGS` to completion.
    fn cassist(&self, args: &[&str]) -> Done {
        let output = self.command(args, &[]).output().expect("run cassist");
        Done::new(output.status, &output.stdout, &output.stderr, String::new())
    }

    /// `cassist run --report-json OUT/<report> ARGS` (the report named
    /// after the call, so concurrent runs keep theirs).
    fn run_cmd(&self, report: &str, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut full = vec!["run", "--report-json"];
        let path = self.out().join(report);
        let _ = std::fs::remove_file(&path);
        let path = path.display().to_string();
        full.push(&path);
        full.extend_from_slice(args);
        self.command(&full, env)
    }

    /// `cassist run ARGS` to completion.
    fn run(&self, args: &[&str]) -> Done {
        self.run_env(args, &[])
    }

    fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Done {
        let output = self.run_cmd("report.json", args, env).output().expect("run cassist");
        let report = std::fs::read_to_string(self.out().join("report.json")).unwrap_or_default();
        Done::new(output.status, &output.stdout, &output.stderr, report)
    }

    /// `git checkout -- out`: every output back to `todo`.
    fn restore_outputs(&self) {
        git(self.path(), &["checkout", "--", "out"]);
        for t in ALL {
            assert_eq!(self.read(&format!("out/{t}.txt")), "todo\n");
        }
    }

    /// `cassist plan --json`: each task's state.
    fn plan_states(&self) -> BTreeMap<String, String> {
        let done = self.cassist(&["plan", "--json"]);
        done.exit(0);
        let json: Value = serde_json::from_str(&done.stdout).unwrap_or_else(|e| panic!("{e}:\n{}", done.transcript()));
        json["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["name"].as_str().unwrap().to_owned(), t["state"].as_str().unwrap().to_owned()))
            .collect()
    }

    /// `cassist explain TASK`, which must succeed.
    #[track_caller]
    fn explain(&self, task: &str) -> String {
        let done = self.cassist(&["explain", task]);
        done.exit(0);
        done.stdout
    }

    /// The lock and the store agree: `cassist.lock` parses, names every
    /// task in `tasks`, and each entry it references is whole in the store
    /// with the same patch; no temp file is left in the store's folders.
    #[track_caller]
    fn assert_consistent(&self, tasks: &[&str]) {
        let lock = cassist::lock::Lock::load(self.path()).unwrap_or_else(|e| panic!("cassist.lock: {}", e.0));
        let names: Vec<&str> = lock.tasks.keys().map(String::as_str).collect();
        assert_eq!(names, tasks, "the tasks in cassist.lock");
        let store = cassist::store::Store::open(self.path());
        for (name, l) in &lock.tasks {
            let entry = store
                .get_entry(&l.before)
                .unwrap_or_else(|| panic!("the store has no whole entry for `{name}` ({})", l.before));
            assert_eq!(entry.task, *name);
            assert_eq!(entry.patch, l.patch, "`{name}`: the lock's patch is the entry's");
            assert_eq!(entry.after, l.after, "`{name}`: the lock's after-hash is the entry's");
        }
        for sub in ["entries", "objects"] {
            for e in walkdir::WalkDir::new(self.path().join(".cassist/store").join(sub)).into_iter().flatten() {
                let name = e.file_name().to_string_lossy();
                assert!(!name.starts_with(".tmp"), "a temp file is left in the store: {}", e.path().display());
            }
        }
    }
}

/// The end of one cassist process.
struct Done {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    /// The `--report-json` file ("" when not written).
    report: String,
}

impl Done {
    fn new(status: ExitStatus, stdout: &[u8], stderr: &[u8], report: String) -> Done {
        Done {
            status,
            stdout: String::from_utf8_lossy(stdout).into_owned(),
            stderr: String::from_utf8_lossy(stderr).into_owned(),
            report,
        }
    }

    fn transcript(&self) -> String {
        format!(
            "exit: {:?}\n--- stdout\n{}--- stderr\n{}--- report\n{}",
            self.status, self.stdout, self.stderr, self.report
        )
    }

    #[track_caller]
    fn exit(&self, code: i32) -> &Done {
        assert_eq!(self.status.code(), Some(code), "expected exit {code}:\n{}", self.transcript());
        self
    }

    #[track_caller]
    fn json(&self) -> Value {
        serde_json::from_str(&self.report).unwrap_or_else(|e| panic!("invalid report ({e}):\n{}", self.transcript()))
    }

    /// Each task's state in the report.
    #[track_caller]
    fn states(&self) -> BTreeMap<String, String> {
        self.json()["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["name"].as_str().unwrap().to_owned(), t["state"].as_str().unwrap().to_owned()))
            .collect()
    }

    #[track_caller]
    fn task(&self, name: &str) -> Value {
        self.json()["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no task {name}:\n{}", self.transcript()))
    }
}

/// `[(task, state)]` as the map [`Done::states`] returns.
fn states(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(t, s)| ((*t).to_owned(), (*s).to_owned())).collect()
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
fn first_run(fx: &Fx) -> Done {
    let done = fx.run(&[]);
    done.exit(0);
    assert_eq!(done.states(), all("passed"), "{}", done.transcript());
    assert_eq!(fx.calls_sorted(), strings(&ALL));
    assert_eq!(fx.read("out/base.txt"), "Write the base.\n");
    assert_eq!(fx.read("out/top.txt"), "Write the top.\n");
    assert_eq!(fx.read("out/other.txt"), "Write the other.\n");
    fx.assert_consistent(&ALL);
    done
}

/// A run in which no agent starts and every task is up-to-date.
#[track_caller]
fn assert_all_up_to_date(fx: &Fx) {
    let before = fx.calls();
    let done = fx.run(&[]);
    done.exit(0);
    assert_eq!(done.states(), all("up-to-date"), "{}", done.transcript());
    assert_eq!(fx.calls(), before, "no agent may run on an up-to-date project");
}

// ---------------------------------------------------------------------------
// First and second run

#[test]
fn the_first_run_calls_the_agent_and_the_second_none() {
    let fx = Fx::new();
    let first = first_run(&fx);
    assert_eq!(first.json()["cached"], 0);
    assert_eq!(fx.plan_states(), all("up-to-date"));

    let second = fx.run(&[]);
    second.exit(0);
    assert_eq!(fx.calls().len(), 3, "the second run called an agent:\n{}", second.transcript());
    assert_eq!(second.states(), all("up-to-date"), "{}", second.transcript());
    let json = second.json();
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
    assert_eq!(fx.read("out/base.txt"), "Write the base.\n");
    fx.assert_consistent(&ALL);
    // The lock does not change when nothing ran.
    let lock = fx.read("cassist.lock");
    assert_all_up_to_date(&fx);
    assert_eq!(fx.read("cassist.lock"), lock, "an up-to-date run rewrote cassist.lock");
}

// ---------------------------------------------------------------------------
// Replay

#[test]
fn restored_outputs_are_replayed_without_an_agent() {
    let fx = Fx::new();
    first_run(&fx);
    let lock = fx.read("cassist.lock");
    fx.restore_outputs();
    assert_eq!(fx.plan_states(), all("replay"));

    let done = fx.run(&[]);
    done.exit(0);
    assert_eq!(fx.calls().len(), 3, "a replay called an agent:\n{}", done.transcript());
    assert_eq!(done.states(), all("replayed"), "{}", done.transcript());
    assert_eq!(done.json()["cached"], 3);
    // The change is in the tree again, uncommitted.
    assert_eq!(fx.read("out/base.txt"), "Write the base.\n");
    assert_eq!(fx.read("out/top.txt"), "Write the top.\n");
    assert_eq!(fx.read("out/other.txt"), "Write the other.\n");
    let status = git(fx.path(), &["status", "--porcelain", "--", "out"]);
    assert_eq!(status, " M out/base.txt\n M out/other.txt\n M out/top.txt\n");
    // Acceptance was verified again.
    let acceptance = done.task("base")["acceptance"].clone();
    assert_eq!(acceptance[0]["command"], "grep -q base out/base.txt && test ! -e stop-base", "{acceptance}");
    assert_eq!(acceptance[0]["passed"], true, "{acceptance}");
    fx.assert_consistent(&ALL);
    // The record of the agent's run stands: the lock (dates included) and
    // the store entry with its prompt and transcript.
    assert_eq!(fx.read("cassist.lock"), lock, "a replay rewrote cassist.lock");
    let store = cassist::store::Store::open(fx.path());
    for (name, l) in cassist::lock::Lock::load(fx.path()).unwrap().tasks {
        let entry = store.get_entry(&l.before).unwrap();
        assert_eq!(entry.attempts, 1, "{name}: the entry of the agent's run was replaced");
        for record in ["prompt-1.md", "transcript-1.log", "review-1.json"] {
            assert!(entry.records.contains_key(record), "{name}: the entry lost {record}: {:?}", entry.records);
        }
    }
    let up = fx.run(&[]);
    up.exit(0);
    assert_eq!(up.states(), all("up-to-date"));
    assert_eq!(up.stdout.matches("transcript: ").count(), 3, "{}", up.transcript());

    // One output restored: only that task is replayed.
    git(fx.path(), &["checkout", "--", "out/other.txt"]);
    let done = fx.run(&[]);
    done.exit(0);
    assert_eq!(done.states(), states(&[("base", "up-to-date"), ("other", "replayed"), ("top", "up-to-date")]));
    assert_eq!(fx.read("out/other.txt"), "Write the other.\n");
    assert_eq!(fx.calls().len(), 3);
}

#[test]
fn a_replay_verifies_acceptance_again() {
    let fx = Fx::new();
    first_run(&fx);
    fx.restore_outputs();
    // `stop-base` is no input of `base`, but its acceptance fails with it.
    fx.write("stop-base", "");
    assert_eq!(fx.plan_states(), all("replay"));
    // One task at a time: fail-fast leaves `other` unstarted.
    let done = fx.run(&["-j", "1"]);
    done.exit(1);
    let base = done.task("base");
    assert_eq!(base["state"], "failed", "{}", done.transcript());
    assert_eq!(base["acceptance"][0]["passed"], false, "{base}");
    assert_eq!(fx.read("out/base.txt"), "todo\n", "a replay that fails acceptance is not integrated");
    assert_eq!(fx.calls().len(), 3, "a replay called an agent:\n{}", done.transcript());

    std::fs::remove_file(fx.path().join("stop-base")).unwrap();
    let done = fx.run(&[]);
    done.exit(0);
    assert_eq!(done.states(), all("replayed"), "{}", done.transcript());
    assert_eq!(fx.calls().len(), 3);
    assert_eq!(fx.read("out/base.txt"), "Write the base.\n");
}

// ---------------------------------------------------------------------------
// What invalidates a task

#[test]
fn a_changed_goal_runs_that_task_again_and_only_it() {
    let fx = Fx::new();
    first_run(&fx);
    fx.edit("tasks/t.kdl", "Write the other.", "Write the other, again.");
    assert!(fx.explain("other").contains("goal changed"), "{}", fx.explain("other"));
    assert_eq!(fx.plan_states(), states(&[("base", "up-to-date"), ("other", "run"), ("top", "up-to-date")]));

    let done = fx.run(&[]);
    done.exit(0);
    assert_eq!(done.states(), states(&[("base", "up-to-date"), ("other", "passed"), ("top", "up-to-date")]));
    assert_eq!(fx.calls_sorted(), strings(&["base", "other", "other", "top"]));
    assert_eq!(fx.read("out/other.txt"), "Write the other, again.\n");
    fx.assert_consistent(&ALL);
    assert_all_up_to_date(&fx);
}

#[test]
fn one_byte_of_a_context_file_runs_that_task_again_and_only_it() {
    let fx = Fx::new();
    first_run(&fx);
    fx.write("src/z.py", "print('Z')\n");
    let why = fx.explain("other");
    assert!(why.contains("src/z.py changed"), "{why}");
    assert!(!why.contains("goal changed"), "{why}");

    let done = fx.run(&[]);
    done.exit(0);
    assert_eq!(done.states(), states(&[("base", "up-to-date"), ("other", "passed"), ("top", "up-to-date")]));
    assert_eq!(fx.calls_sorted(), strings(&["base", "other", "other", "top"]));
    fx.assert_consistent(&ALL);
    assert_all_up_to_date(&fx);
}

#[test]
fn a_changed_template_runs_every_task_again() {
    let fx = Fx::new();
    first_run(&fx);
    fx.write("prompt.md", &format!("{TEMPLATE}\n"));
    for t in ALL {
        let why = fx.explain(t);
        assert!(why.contains("template changed"), "{t}: {why}");
    }
    let done = fx.run(&[]);
    done.exit(0);
    assert_eq!(done.states(), all("passed"), "{}", done.transcript());
    assert_eq!(fx.calls().len(), 6);
    assert_all_up_to_date(&fx);
}

#[test]
fn a_dependencys_new_output_runs_its_dependents_again() {
    let fx = Fx::new();
    first_run(&fx);
    fx.edit("tasks/t.kdl", "Write the base.", "Write the base, version two.");
    assert!(fx.explain("base").contains("goal changed"));
    let why = fx.explain("top");
    assert!(why.contains("dependency base changed"), "{why}");
    assert!(!why.contains("goal changed"), "{why}");
    assert_eq!(fx.plan_states(), states(&[("base", "run"), ("other", "up-to-date"), ("top", "run")]));

    let done = fx.run(&[]);
    done.exit(0);
    assert_eq!(done.states(), states(&[("base", "passed"), ("other", "up-to-date"), ("top", "passed")]));
    assert_eq!(fx.calls_sorted(), strings(&["base", "base", "other", "top", "top"]));
    assert_eq!(fx.read("out/base.txt"), "Write the base, version two.\n");
    fx.assert_consistent(&ALL);
    assert_all_up_to_date(&fx);

    // Only the dependency runs (--filter): the dependent's record is stale
    // and names why.
    fx.edit("tasks/t.kdl", "Write the base, version two.", "Write the base, version three.");
    let done = fx.run(&["--filter", "base"]);
    done.exit(0);
    assert_eq!(done.states(), states(&[("base", "passed")]));
    assert_eq!(fx.plan_states(), states(&[("base", "up-to-date"), ("other", "up-to-date"), ("top", "run")]));
    let why = fx.explain("top");
    assert!(why.contains("dependency base changed"), "{why}");
}

#[test]
fn reformatting_the_kdl_runs_nothing() {
    let fx = Fx::new();
    first_run(&fx);
    fx.write("tasks/t.kdl", TASKS_REFORMATTED);
    fx.write("cassist.kdl", &format!("// the project\n{}", fx.config("\n// a comment\n")));
    assert_eq!(fx.plan_states(), all("up-to-date"), "{}", fx.cassist(&["plan"]).stdout);
    assert_all_up_to_date(&fx);
    fx.assert_consistent(&ALL);
}

// ---------------------------------------------------------------------------
// --locked, --no-cache

#[test]
fn locked_never_starts_an_agent() {
    let fx = Fx::new();

    // Nothing recorded: every task would need an agent.
    let done = fx.run(&["--locked"]);
    done.exit(3);
    assert!(fx.calls().is_empty());
    assert_eq!(fx.read("out/base.txt"), "todo\n");
    for t in ALL {
        assert!(done.stderr.contains(&format!("  {t}: never run")), "{t}:\n{}", done.transcript());
    }
    assert!(!fx.path().join("cassist.lock").exists(), "--locked wrote cassist.lock");

    first_run(&fx);
    let lock = fx.read("cassist.lock");
    fx.run(&["--locked"]).exit(0);

    // A replay needs no agent: allowed.
    fx.restore_outputs();
    let done = fx.run(&["--locked"]);
    done.exit(0);
    assert_eq!(done.states(), all("replayed"), "{}", done.transcript());
    assert_eq!(fx.calls().len(), 3);

    // A changed goal would: exit 3, the task and why on stderr, nothing
    // changed.
    fx.edit("tasks/t.kdl", "Write the other.", "Write the other, again.");
    let tree = fx.read("out/other.txt");
    let done = fx.run(&["--locked"]);
    done.exit(3);
    assert_eq!(fx.calls().len(), 3, "--locked started an agent:\n{}", done.transcript());
    assert!(done.stderr.contains("--locked: 1 task(s) would need an agent run"), "{}", done.transcript());
    assert!(done.stderr.contains("  other: goal changed"), "{}", done.transcript());
    assert_eq!(done.states(), states(&[("base", "up-to-date"), ("other", "skipped"), ("top", "up-to-date")]));
    assert_eq!(fx.read("out/other.txt"), tree);
    assert_eq!(fx.read("cassist.lock"), lock, "--locked changed cassist.lock");
}

#[test]
fn locked_names_the_dependents_of_a_task_that_needs_an_agent() {
    let fx = Fx::new();
    first_run(&fx);
    fx.write("src/x.py", "print('X')\n");
    let done = fx.run(&["--locked"]);
    done.exit(3);
    assert_eq!(fx.calls().len(), 3);
    assert!(done.stderr.contains("  base: src/x.py changed"), "{}", done.transcript());
    assert!(
        done.stderr.contains("  top: dependency base changed"),
        "top would need an agent too (its dependency's output changes):\n{}",
        done.transcript()
    );
    assert!(done.stderr.contains("--locked: 2 task(s) would need an agent run"), "{}", done.transcript());
}

#[test]
fn no_cache_calls_the_agent() {
    let fx = Fx::new();
    first_run(&fx);
    let done = fx.run(&["--no-cache"]);
    done.exit(0);
    assert_eq!(done.states(), all("passed"), "{}", done.transcript());
    assert_eq!(fx.calls().len(), 6);
    fx.assert_consistent(&ALL);
    assert_all_up_to_date(&fx);
}

// ---------------------------------------------------------------------------
// explain

#[test]
fn explain_names_the_change() {
    let fx = Fx::new();
    let why = fx.explain("base");
    assert!(why.contains("state run") && why.contains("never run"), "{why}");
    first_run(&fx);
    let why = fx.explain("base");
    assert!(why.contains("state up-to-date") && why.contains("unchanged since it was recorded"), "{why}");
    assert!(!why.contains(" changed\n"), "{why}");

    // Each change, then back.
    let cases: [(&str, &str, &str, &str, &str); 4] = [
        ("tasks/t.kdl", "Write the top.", "Write the top!", "top", "goal changed"),
        ("src/x.py", "print('x')", "print('x') ", "base", "src/x.py changed"),
        ("tasks/t.kdl", "Write the base.", "Write the base!", "top", "dependency base changed"),
        ("prompt.md", "# Context", "# Context:", "other", "template changed"),
    ];
    for (file, from, to, task, reason) in cases {
        fx.edit(file, from, to);
        let why = fx.explain(task);
        assert!(why.contains("state run"), "{file}: {why}");
        assert!(why.contains(&format!("\n  {reason}\n")), "{file}: `{task}` should say {reason:?}:\n{why}");
        assert!(why.contains("changed"), "{why}");
        fx.edit(file, to, from);
        assert!(fx.explain(task).contains("state up-to-date"));
    }
    // The table marks the changed input.
    fx.write("src/y.py", "print('Y')\n");
    let why = fx.explain("top");
    let row = why.lines().find(|l| l.contains("src/y.py")).unwrap_or_else(|| panic!("no src/y.py row:\n{why}"));
    assert!(row.ends_with("changed"), "{row}");
    let row = why.lines().find(|l| l.contains("out/top.txt")).unwrap();
    assert!(row.ends_with("unchanged"), "{row}");
    assert_eq!(fx.calls().len(), 3, "explain started an agent");
}

// ---------------------------------------------------------------------------
// Two processes, a killed process

#[test]
fn two_runs_at_once_call_each_agent_once() {
    let fx = Fx::new();
    // Each agent takes a while, so the runs overlap.
    let env = [("AGENT_SLEEP", "0.3")];
    let mut a = fx.run_cmd("a.json", &[], &env).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut b = fx.run_cmd("b.json", &[], &env).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    wait_with_limit(&mut a, Duration::from_secs(120));
    wait_with_limit(&mut b, Duration::from_secs(120));
    let done = |c: Child, report: &str| {
        let o = c.wait_with_output().unwrap();
        Done::new(o.status, &o.stdout, &o.stderr, std::fs::read_to_string(fx.out().join(report)).unwrap_or_default())
    };
    let (a, b) = (done(a, "a.json"), done(b, "b.json"));
    a.exit(0);
    b.exit(0);
    assert_eq!(fx.calls_sorted(), strings(&ALL), "each agent once in all:\n{}\n{}", a.transcript(), b.transcript());
    let waited: Vec<&Done> =
        [&a, &b].into_iter().filter(|d| d.stderr.contains("waiting for another cassist run")).collect();
    assert_eq!(waited.len(), 1, "one run waits for the other:\n{}\n{}", a.transcript(), b.transcript());
    let (first, second) = if std::ptr::eq(waited[0], &a) { (&b, &a) } else { (&a, &b) };
    assert_eq!(first.states(), all("passed"), "{}", first.transcript());
    assert_eq!(second.states(), all("up-to-date"), "{}", second.transcript());
    fx.assert_consistent(&ALL);
    assert_eq!(fx.read("out/top.txt"), "Write the top.\n");
    assert_all_up_to_date(&fx);
}

#[test]
fn a_run_killed_mid_task_leaves_a_store_the_next_run_uses() {
    let fx = Fx::new();
    let started = fx.count_dir().join("top.started");
    // The workspaces under a temp folder of the test's own: a killed run
    // cannot remove its workspace (nor stop its agent, which waits for
    // `go` below), so it goes away with the test.
    let tmp = fx.out().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let tmp = tmp.display().to_string();
    let mut child = fx
        .run_cmd("killed.json", &[], &[("SLEEP_TASK", "top"), ("TMPDIR", &tmp)])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !started.exists() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("cassist ended ({status}) before the agent of top started");
        }
        assert!(Instant::now() < deadline, "the agent of top did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9));
    // The agent dies with cassist (parent-death signal): no process of it
    // is left.
    let marker = fx.out().join("count.sh").display().to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let alive = common::processes_with(&marker);
        if alive.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "the agent outlived the killed cassist: {alive:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::write(fx.count_dir().join("go"), "").unwrap();

    // What was recorded before the kill is whole; top is not recorded.
    let lock = cassist::lock::Lock::load(fx.path()).expect("cassist.lock parses after a kill");
    assert!(lock.tasks.contains_key("base") && !lock.tasks.contains_key("top"), "{lock:?}");
    let recorded: Vec<&str> = lock.tasks.keys().map(String::as_str).collect();
    fx.assert_consistent(&recorded);
    assert_eq!(fx.read("out/top.txt"), "todo\n", "the killed task was integrated");

    // The killed run's workspace is still there; the next run removes it.
    let workspaces = |tmp: &str| -> usize {
        walkdir::WalkDir::new(tmp)
            .min_depth(2)
            .max_depth(2)
            .into_iter()
            .flatten()
            .filter(|e| e.path().join("owner.pid").is_file())
            .count()
    };
    assert_eq!(workspaces(&tmp), 1, "the killed run's workspace");
    let done = fx.run_env(&[], &[("TMPDIR", &tmp)]);
    done.exit(0);
    assert_eq!(workspaces(&tmp), 0, "the stale workspace was not removed");
    let s = done.states();
    assert_eq!(s["base"], "up-to-date", "{}", done.transcript());
    assert_eq!(s["top"], "passed", "{}", done.transcript());
    assert!(s.values().all(|v| v == "up-to-date" || v == "passed"), "{}", done.transcript());
    let calls = fx.calls_sorted();
    assert_eq!(calls.iter().filter(|c| *c == "base").count(), 1, "{calls:?}");
    assert_eq!(calls.iter().filter(|c| *c == "top").count(), 2, "{calls:?}");
    assert_eq!(calls.iter().filter(|c| *c == "other").count(), 1, "{calls:?}");
    assert_eq!(fx.read("out/top.txt"), "Write the top.\n");
    fx.assert_consistent(&ALL);
    assert_all_up_to_date(&fx);
}

// ---------------------------------------------------------------------------
// cassist cache

#[test]
fn cache_ls_gc_and_clean() {
    let fx = Fx::new();
    let ls = fx.cassist(&["cache", "ls"]);
    ls.exit(0);
    assert!(ls.stdout.contains("the store is empty"), "{}", ls.transcript());

    first_run(&fx);
    let ls = fx.cassist(&["cache", "ls"]);
    ls.exit(0);
    for t in ALL {
        let row =
            ls.stdout.lines().find(|l| l.starts_with(&format!("{t} "))).unwrap_or_else(|| panic!("{}", ls.stdout));
        assert!(row.contains(" yes ") && row.contains(&format!("wrote out/{t}.txt")), "{row}");
    }
    assert!(ls.stdout.contains("3 entries"), "{}", ls.stdout);

    // A new goal for other: its old entry is no longer in the lock.
    fx.edit("tasks/t.kdl", "Write the other.", "Write the other, again.");
    fx.run(&[]).exit(0);
    let ls = fx.cassist(&["cache", "ls"]);
    assert!(ls.stdout.contains("4 entries"), "{}", ls.stdout);
    assert_eq!(ls.stdout.lines().filter(|l| l.starts_with("other ") && l.contains(" no ")).count(), 1, "{}", ls.stdout);

    // gc --keep 0 keeps what the lock references, drops the rest.
    let gc = fx.cassist(&["cache", "gc", "--keep", "0"]);
    gc.exit(0);
    assert!(gc.stdout.contains("removed 1 entry"), "{}", gc.transcript());
    let ls = fx.cassist(&["cache", "ls"]);
    assert!(ls.stdout.contains("3 entries") && !ls.stdout.contains(" no "), "{}", ls.stdout);
    fx.assert_consistent(&ALL);
    // What gc kept still replays. (The entry of `other` recorded its
    // second run, made on its first output: `todo` is not its before-state.)
    git(fx.path(), &["checkout", "--", "out/base.txt", "out/top.txt"]);
    let done = fx.run(&[]);
    done.exit(0);
    assert_eq!(done.states(), states(&[("base", "replayed"), ("other", "up-to-date"), ("top", "replayed")]));
    assert_eq!(fx.calls().len(), 4);
    assert_eq!(fx.read("out/top.txt"), "Write the top.\n");
    fx.write("out/other.txt", "Write the other.\n");
    let done = fx.run(&[]);
    done.exit(0);
    assert_eq!(done.states(), states(&[("base", "up-to-date"), ("other", "replayed"), ("top", "up-to-date")]));
    assert_eq!(fx.read("out/other.txt"), "Write the other, again.\n");
    assert_eq!(fx.calls().len(), 4);

    // clean empties the store: nothing to replay, the agent runs again.
    let clean = fx.cassist(&["cache", "clean"]);
    clean.exit(0);
    assert!(!fx.path().join(".cassist/store/entries").exists());
    assert!(fx.cassist(&["cache", "ls"]).stdout.contains("the store is empty"));
    fx.restore_outputs();
    assert_eq!(fx.plan_states(), all("run"));
    let why = fx.explain("base");
    assert!(why.contains("the store holds no record"), "{why}");
    let done = fx.run(&[]);
    done.exit(0);
    assert_eq!(done.states(), all("passed"), "{}", done.transcript());
    assert_eq!(fx.calls().len(), 7);
    fx.assert_consistent(&ALL);
    assert_all_up_to_date(&fx);
}

// ---------------------------------------------------------------------------
// A broken lock

#[test]
fn a_corrupt_lock_is_a_clear_error() {
    let fx = Fx::new();
    first_run(&fx);
    let lock = fx.read("cassist.lock");
    fx.write("cassist.lock", &format!("{}\ntask \"base\" {{ before", &lock[..lock.len() / 2]));
    for args in [&["run"][..], &["plan"], &["explain", "base"]] {
        let done = fx.cassist(args);
        done.exit(2);
        assert!(done.stderr.contains("cassist.lock is not valid KDL"), "{args:?}:\n{}", done.transcript());
        assert!(done.stderr.contains("restore it from version control"), "{args:?}:\n{}", done.transcript());
    }
    fx.write("cassist.lock", &lock.replace("version 1", "version 9"));
    let done = fx.cassist(&["run"]);
    done.exit(2);
    assert!(done.stderr.contains("upgrade cassist"), "{}", done.transcript());
    assert_eq!(fx.calls().len(), 3, "an agent ran despite the broken lock");
    fx.write("cassist.lock", &lock);
    assert_all_up_to_date(&fx);
}

/// A fake `claude` CLI: `--version` prints the version in `FAKE_CLAUDE_VERSION`
/// (baked into the script, so a new version is a new binary); otherwise it
/// writes `out/<task>.txt` and prints Claude's JSON result.
fn fake_claude(bin: &Path, version: &str) {
    let script = format!(
        "#!/bin/sh\nif [ \"${{1:-}}\" = --version ]; then echo '{version} (Claude Code)'; exit 0; fi\ncat > /dev/null\nmkdir -p out\necho \"claude $CASSIST_TASK\" > \"out/$CASSIST_TASK.txt\"\necho '{{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"done\",\"num_turns\":1,\"usage\":{{\"input_tokens\":10,\"output_tokens\":2}},\"total_cost_usd\":0.01,\"permission_denials\":[]}}'\n"
    );
    std::fs::create_dir_all(bin).unwrap();
    let path = bin.join("claude");
    std::fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    // A new binary on every call: a later mtime even within one second.
    let when = std::time::SystemTime::now() + Duration::from_secs(if version.ends_with('3') { 10 } else { 0 });
    std::fs::File::options().write(true).open(&path).unwrap().set_modified(when).unwrap();
}

#[test]
fn a_new_agent_version_reruns_the_task_and_explain_names_it() {
    let fx = Fx::new();
    fx.write("tasks/t.kdl", "task \"solo\" {\n    goal \"Write out/solo.txt.\"\n    agent \"claude\"\n}\n");
    let bin = fx.out().join("bin");
    fake_claude(&bin, "1.2");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let run = |args: &[&str]| fx.run_env(args, &[("PATH", &path)]);
    let done = run(&["--filter", "solo"]);
    done.exit(0);
    assert_eq!(done.states()["solo"], "passed", "{}", done.transcript());
    let lock = cassist::lock::Lock::load(fx.path()).unwrap();
    assert_eq!(lock.tasks["solo"].agent_version.as_deref(), Some("1.2 (Claude Code)"));
    assert_eq!(run(&["--filter", "solo"]).states()["solo"], "up-to-date");

    fake_claude(&bin, "1.3");
    let explain = fx.command(&["explain", "solo"], &[("PATH", &path)]).output().unwrap();
    let text = String::from_utf8_lossy(&explain.stdout);
    assert!(text.contains("agent claude 1.2 (Claude Code) → 1.3 (Claude Code)"), "{text}");
    let done = run(&["--filter", "solo"]);
    assert_eq!(done.states()["solo"], "passed", "a new agent version runs the task again: {}", done.transcript());
}

#[test]
fn replaying_a_change_never_writes_through_a_symlink() {
    // The agent replaces a symlink by a file; the replay must do the same,
    // not write the new content into the link's target.
    let p = common::Project {
        dir: tempfile::Builder::new().prefix("cassist-link-").tempdir_in(common::outside_temp_dir()).unwrap(),
    };
    p.file(
        "cassist.kdl",
        "trust \"workspace-write\"\ntest #false\nagent \"fake\" {\n    command \"sh\" \"-c\" \"rm link.txt; echo new > link.txt\"\n}\ndefaults {\n    agent \"fake\"\n}\n",
    )
    .file("tasks/t.kdl", "task \"t\" {\n    goal \"Replace the link.\"\n    context {\n        file \"link.txt\"\n    }\n}\n")
    .file("real.txt", "original\n");
    std::os::unix::fs::symlink("real.txt", p.path().join("link.txt")).unwrap();
    let home = tempfile::tempdir().unwrap();
    let env = [("HOME", home.path().to_str().unwrap())];
    assert_eq!(p.run_env(&["run"], &env).code(), 0);
    let link = p.path().join("link.txt");
    assert!(!std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    // Put the link back: the task is replayed.
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink("real.txt", &link).unwrap();
    let plan = p.run_env(&["plan", "--json"], &env).json();
    assert_eq!(plan["tasks"][0]["state"], "replay");
    let run = p.run_env(&["run"], &env);
    assert_eq!(run.code(), 0, "{}", run.transcript());
    assert_eq!(p.read("real.txt"), "original\n", "the replay wrote through the symlink");
    assert!(!std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert_eq!(p.read("link.txt"), "new\n");
}
