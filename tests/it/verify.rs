//! Re-verification (plan state `verify`): a code or test task with
//! acceptance commands, whose recipe and dependencies are as its lock line
//! records them while a file it reads changed (or its agent's version, or
//! a run limit), and whose change is still in the tree, is checked by its
//! acceptance commands alone: passing, `verified` with no agent; failing,
//! its agent runs (`--locked`: exit 3 naming the command); a command that
//! cannot start is an environment failure, never an agent's job.
//!
//! The agents count their calls in a file of the out folder, so every test
//! says how many agents ran; which acceptance commands ran is read from the
//! run's records folder (`acceptance-0-N.log`: a verification's).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::support::{
    Output, Project, TRUSTED_NO_TESTS, Test, assert_same_tree, files_under, git_env, in_both_modes, map,
    processes_with, signal, snapshot, unique_marker, wait_until, write, write_executable,
};

// ---------------------------------------------------------------------------
// Support

/// The tasks the agents ran for so far, in call order (`calls` in the
/// out folder, one line per call).
fn calls(p: &Project) -> Vec<String> {
    match std::fs::read_to_string(p.out().join("calls")) {
        Ok(t) => t.lines().map(str::to_owned).collect(),
        Err(_) => Vec::new(),
    }
}

/// How many times an agent ran for `name`.
fn calls_for(p: &Project, name: &str) -> usize {
    calls(p).iter().filter(|c| *c == name).count()
}

/// The records folder of the run that printed `out` ("records in DIR").
#[track_caller]
fn run_dir(out: &Output) -> PathBuf {
    let line = out.stdout.lines().find(|l| l.contains("records in ")).unwrap_or_else(|| {
        panic!("no records folder named:\n{}", out.transcript());
    });
    PathBuf::from(line.rsplit("records in ").next().unwrap().trim())
}

/// The tasks of the run that printed `out` whose acceptance commands ran
/// as a verification (`acceptance-0-*.log` in their records), sorted.
#[track_caller]
fn verified_by_commands(out: &Output) -> Vec<String> {
    let dir = run_dir(out);
    let mut tasks: Vec<String> = files_under(&dir)
        .into_iter()
        .filter(|(path, _)| path.file_name().unwrap().to_string_lossy().starts_with("acceptance-0-"))
        .map(|(path, _)| path.parent().unwrap().file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    tasks.sort();
    tasks.dedup();
    tasks
}

/// Every acceptance log of the run that printed `out` (any attempt).
fn acceptance_logs(out: &Output) -> Vec<PathBuf> {
    files_under(&run_dir(out))
        .into_iter()
        .map(|(path, _)| path)
        .filter(|path| path.file_name().unwrap().to_string_lossy().starts_with("acceptance-"))
        .collect()
}

/// `plan --json` in `dir`: each task's state and input hash, by name.
fn plan_in(p: &Project, dir: &Path, bin: Option<&Path>) -> BTreeMap<String, (String, String)> {
    let mut cmd = p.cassist(&["plan", "--json"]);
    cmd.current_dir(dir);
    if let Some(bin) = bin {
        cmd.path_first(&[bin]);
    }
    let json = cmd.exec().json();
    json["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let name = t["name"].as_str().unwrap().to_owned();
            (name, (t["state"].as_str().unwrap().to_owned(), t["hash"].as_str().unwrap().to_owned()))
        })
        .collect()
}

/// Each task's state in a [`plan_in`].
fn states_of(plan: &BTreeMap<String, (String, String)>) -> BTreeMap<String, String> {
    plan.iter().map(|(name, (state, _))| (name.clone(), state.clone())).collect()
}

/// The attempts each task of a report made, by name.
fn attempts(out: &Output) -> BTreeMap<String, u64> {
    out.report_json()["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap().to_owned(), t["attempts"].as_u64().unwrap()))
        .collect()
}

fn lock_of(dir: &Path) -> cassist_core::lock::Lock {
    cassist_core::lock::Lock::load(dir).unwrap_or_else(|e| panic!("cassist.lock: {e}"))
}

/// A counting agent of the out folder: appends its task to `calls`, then
/// writes `out/<task>.txt` (saying which call it was, so each run writes
/// something new) and reports success. `hook-<task>.sh` in the out
/// folder, if any, is sourced first.
const COUNT_AGENT: &str = r#"#!/bin/sh
set -eu
cat > /dev/null
echo "$CASSIST_TASK" >> "$COUNT_OUT/calls"
n=$(wc -l < "$COUNT_OUT/calls")
if [ -f "$COUNT_OUT/hook-$CASSIST_TASK.sh" ]; then
    . "$COUNT_OUT/hook-$CASSIST_TASK.sh"
fi
mkdir -p out
printf 'good work on %s (call %s)\n' "$CASSIST_TASK" "$n" > "out/$CASSIST_TASK.txt"
printf '{"success": true, "summary": "wrote out/%s.txt"}\n' "$CASSIST_TASK" > "$CASSIST_RESULT_FILE"
"#;

/// A project (outside the temp folders, in git) whose tasks `tasks` run
/// the counting agent; `files` added. `extra` goes into `cassist.kdl`.
fn counted(tasks: &str, files: &[(&str, &str)], extra: &str) -> Project {
    let test = files.iter().fold(Test::trusted().tasks(tasks), |t, (rel, text)| t.file(rel, text));
    let p = test.build();
    let script = p.out().join("count.sh");
    write(&script, COUNT_AGENT.replace("$COUNT_OUT", &p.out_str()));
    p.file(
        "cassist.kdl",
        format!(
            "{TRUSTED_NO_TESTS}defaults {{\n    agent \"count\"\n}}\nagent \"count\" {{\n    command \"sh\" {:?}\n}}\n{extra}",
            script.display().to_string()
        ),
    );
    p.commit_all();
    p
}

/// `p` with the variables of a workspace mode (none, or [`COPY`](crate::support::COPY)) set for
/// every command.
fn in_mode(p: Project, mode: &[(&str, &str)]) -> Project {
    mode.iter().fold(p, |p, (k, v)| p.with_env(k, v))
}

/// A copy of the bundled demo whose agent counts its calls (a wrapper of
/// the demo agent in the out folder).
fn counted_demo() -> Project {
    let p = crate::demo::demo();
    let wrapper = p.out().join("demo-agent.sh");
    write(
        &wrapper,
        format!("echo \"$CASSIST_TASK\" >> {:?}\nexec python3 fixtures/agents/demo-agent.py\n", p.out().join("calls")),
    );
    p.edit(
        "cassist.kdl",
        "command \"python3\" \"fixtures/agents/demo-agent.py\"",
        &format!("command \"sh\" {:?}", wrapper.display().to_string()),
    );
    p
}

/// The demo's states, slugify's, truncate's, survey's.
fn demo_states(slugify: &str, truncate: &str, survey: &str) -> BTreeMap<String, String> {
    map(&[("add-slugify", slugify), ("add-truncate", truncate), ("survey-textkit", survey)])
}

/// A context-only edit of the demo: a comment at the end of the test file
/// the code tasks read (and no task writes).
fn touch_demo_tests(dir: &Path) {
    let file = dir.join("fixtures/demo/tests/test_text.py");
    let text = std::fs::read_to_string(&file).unwrap();
    write(&file, format!("{text}# a comment a user added\n"));
}

/// The demo run once by its agent: three calls, everything passed.
fn demo_run_once() -> Project {
    let p = counted_demo();
    p.commit_all();
    let first = p.run(&[]).exec();
    assert_eq!(first.states(), demo_states("passed", "passed", "passed"), "{}", first.transcript());
    assert_eq!(calls(&p).len(), 3);
    p
}

// ---------------------------------------------------------------------------
// The demo: a context edit costs acceptance runs, not agents

/// The whole sequence on the demo at `dir` (run once there, then a
/// comment added to a file the code tasks only read).
fn context_edit_is_verified(p: &Project, dir: &Path) {
    let agents = calls(p).len();
    touch_demo_tests(dir);
    let plan = plan_in(p, dir, None);
    assert_eq!(states_of(&plan), demo_states("verify", "verify", "stale"));

    // --locked verifies: no agent, the lock as it was.
    let lock = std::fs::read(dir.join("cassist.lock")).unwrap();
    let locked = p.run(&["--locked"]).current_dir(dir).exec();
    assert_eq!(locked.states(), demo_states("verified", "verified", "stale"), "{}", locked.transcript());
    assert_eq!(calls(p).len(), agents, "a verification called an agent:\n{}", locked.transcript());
    assert_eq!(attempts(&locked).values().sum::<u64>(), 0, "{}", locked.transcript());
    assert_eq!(verified_by_commands(&locked), ["add-slugify", "add-truncate"]);
    assert!(std::fs::read(dir.join("cassist.lock")).unwrap() == lock, "--locked wrote cassist.lock");
    // Each acceptance command of the task ran, and passed.
    let slugify = locked.task("add-slugify");
    let commands = slugify["acceptance"].as_array().unwrap();
    assert_eq!(commands.len(), 2, "{slugify:#}");

    // The next --locked run finds the verified state in the store: no
    // acceptance command runs again.
    let again = p.run(&["--locked"]).current_dir(dir).exec();
    assert_eq!(again.states(), demo_states("up-to-date", "up-to-date", "stale"), "{}", again.transcript());
    assert_eq!(acceptance_logs(&again), Vec::<PathBuf>::new(), "{}", again.transcript());
    assert!(std::fs::read(dir.join("cassist.lock")).unwrap() == lock, "--locked wrote cassist.lock");

    // A plain run writes the code tasks' lock lines: their after-state is
    // the tree as it is now.
    let before = lock_of(dir);
    let plain = p.run(&[]).current_dir(dir).exec();
    assert_eq!(plain.states(), demo_states("up-to-date", "up-to-date", "stale"), "{}", plain.transcript());
    assert_eq!(calls(p).len(), agents, "{}", plain.transcript());
    let after = lock_of(dir);
    for name in ["add-slugify", "add-truncate"] {
        let (was, now) = (&before.tasks[name], &after.tasks[name]);
        assert_eq!(now.after, plan[name].1, "`{name}`: the lock's after-state is the verified tree");
        assert_ne!(now.after, was.after, "`{name}`");
        assert_eq!((&now.before, &now.patch, &now.recipe), (&was.before, &was.patch, &was.recipe), "`{name}`");
    }
    // A stale task's findings are recorded as holding for its files as
    // they are: its line takes the new after-state too.
    let survey = (&before.tasks["survey-textkit"], &after.tasks["survey-textkit"]);
    assert_ne!(survey.1.after, survey.0.after, "the stale task's after-state moves");
    assert_eq!((&survey.1.before, &survey.1.patch), (&survey.0.before, &survey.0.patch));
    // And the next plan is all up to date.
    assert_eq!(states_of(&plan_in(p, dir, None)), demo_states("up-to-date", "up-to-date", "up-to-date"));
    let last = p.run(&["--locked"]).current_dir(dir).exec();
    assert_eq!(last.states(), demo_states("up-to-date", "up-to-date", "up-to-date"), "{}", last.transcript());
    assert_eq!(acceptance_logs(&last), Vec::<PathBuf>::new());
    assert_eq!(calls(p).len(), agents);
}

#[test]
fn a_context_edit_of_the_demo_is_verified_with_no_agent() {
    let p = demo_run_once();
    context_edit_is_verified(&p, p.path());
}

#[test]
fn a_context_edit_is_verified_in_a_fresh_clone() {
    let p = demo_run_once();
    p.git(&["add", "-A"]);
    p.git(&["commit", "-qm", "the demo ran"]);
    let base = tempfile::Builder::new().prefix("cassist-test-clone-").tempdir().unwrap();
    let clone = base.path().join("clone");
    let done = git_env(&mut std::process::Command::new("git"))
        .args(["clone", "-q"])
        .arg(p.path())
        .arg(&clone)
        .output()
        .unwrap();
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    assert!(!clone.join(".cassist").exists());
    assert_eq!(states_of(&plan_in(&p, &clone, None)), demo_states("up-to-date", "up-to-date", "up-to-date"));
    context_edit_is_verified(&p, &clone);
}

/// A plain run straight after the edit verifies and writes the lock lines
/// at once.
#[test]
fn a_plain_run_verifies_and_writes_the_lock_line() {
    let p = demo_run_once();
    touch_demo_tests(p.path());
    let plan = plan_in(&p, p.path(), None);
    let done = p.run(&[]).exec();
    assert_eq!(done.states(), demo_states("verified", "verified", "stale"), "{}", done.transcript());
    assert_eq!(calls(&p).len(), 3);
    let lock = lock_of(p.path());
    for name in ["add-slugify", "add-truncate"] {
        assert_eq!(lock.tasks[name].after, plan[name].1, "`{name}`");
    }
    assert_eq!(p.plan_states(), demo_states("up-to-date", "up-to-date", "up-to-date"));
    let again = p.run(&["--locked"]).exec();
    assert_eq!(acceptance_logs(&again), Vec::<PathBuf>::new(), "{}", again.transcript());
}

// ---------------------------------------------------------------------------
// What makes a task `verify`, and what `run`

/// A fake `claude` CLI in `bin`: `--version` prints `version`; otherwise
/// it counts the call in `calls` of `out`, writes `out/<task>.txt` and
/// prints Claude's JSON result. A new version is a new binary (a later
/// mtime, even within one second: `later` seconds ahead).
fn fake_claude(bin: &Path, out: &Path, version: &str, later: u64) {
    let script = format!(
        "#!/bin/sh\nif [ \"${{1:-}}\" = --version ]; then echo '{version} (Claude Code)'; exit 0; fi\ncat > /dev/null\necho \"$CASSIST_TASK\" >> {calls:?}\nmkdir -p out\necho \"claude $CASSIST_TASK\" > \"out/$CASSIST_TASK.txt\"\necho '{{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"done\",\"num_turns\":1,\"usage\":{{\"input_tokens\":10,\"output_tokens\":2}},\"total_cost_usd\":0.01,\"permission_denials\":[]}}'\n",
        calls = out.join("calls")
    );
    let path = bin.join("claude");
    write_executable(&path, &script);
    let when = std::time::SystemTime::now() + Duration::from_secs(later);
    std::fs::File::options().write(true).open(&path).unwrap().set_modified(when).unwrap();
}

const SOLO: &str = r#"task "solo" {
    goal "Write out/solo.txt."
    agent "claude"
    context {
        file "src/x.py"
    }
    scope {
        path "out/**"
    }
    acceptance {
        run "grep -q claude out/solo.txt"
    }
}
"#;

#[test]
fn a_new_agent_version_or_run_limit_is_verified_a_new_recipe_is_run() {
    let p = Test::trusted().tasks(SOLO).file("src/x.py", "print('x')\n").git().build();
    let bin = p.out().join("bin");
    let out = p.out();
    fake_claude(&bin, &out, "1.2", 0);
    let plan = || states_of(&plan_in(&p, p.path(), Some(&bin)))["solo"].clone();
    let done = p.run(&[]).path_first(&[&bin]).exec();
    assert_eq!(done.states()["solo"], "passed", "{}", done.transcript());
    assert_eq!(calls(&p), ["solo"]);
    assert_eq!(plan(), "up-to-date");

    // A new version of the agent's CLI: its acceptance decides.
    fake_claude(&bin, &out, "1.3", 10);
    assert_eq!(plan(), "verify");
    let done = p.run(&[]).path_first(&[&bin]).exec();
    assert_eq!(done.states()["solo"], "verified", "{}", done.transcript());
    assert_eq!(calls(&p), ["solo"], "a new agent version called the agent");
    assert_eq!(plan(), "up-to-date");

    // A limit of a run is no new recipe either.
    let tasks = p.read("tasks/t.kdl");
    for limit in ["timeout \"7m\"", "max-iterations 5", "max-cost 2.50"] {
        p.file("tasks/t.kdl", tasks.replacen("agent \"claude\"", &format!("agent \"claude\"\n    {limit}"), 1));
        assert_eq!(plan(), "verify", "{limit}");
    }
    p.file("tasks/t.kdl", &tasks);
    assert_eq!(plan(), "up-to-date");

    // What the task asks of the agent is a new recipe: the agent runs,
    // even with a file it reads changed as well.
    p.file("src/x.py", "print('x, edited')\n");
    assert_eq!(plan(), "verify");
    for (from, to) in [
        ("Write out/solo.txt.", "Write out/solo.txt, please."),
        ("grep -q claude out/solo.txt", "grep -q solo out/solo.txt"),
        ("agent \"claude\"", "agent \"claude\"\n    model \"opus\""),
    ] {
        p.file("tasks/t.kdl", tasks.replacen(from, to, 1));
        assert_eq!(plan(), "run", "{to}");
    }
    assert_eq!(calls(&p), ["solo"]);
}

/// A dependency whose output changed: its dependent runs, even when only
/// a file it reads changed besides; as planned (the dependency's goal
/// changed) and as run (the dependency's verification failed and its
/// agent wrote something new).
#[test]
fn a_dependent_runs_when_its_dependency_ran_again() {
    let tasks = r#"task "base" {
    goal "Write the base."
    context {
        file "src/common.py"
    }
    scope {
        path "out/base.txt"
    }
    acceptance {
        run "grep -q good out/base.txt"
    }
}

task "top" {
    goal "Write the top."
    depends-on "base"
    context {
        file "src/common.py"
        file "out/base.txt"
    }
    scope {
        path "out/top.txt"
    }
    acceptance {
        run "grep -q good out/top.txt"
    }
}
"#;
    let files = [("src/common.py", "common\n"), ("out/base.txt", "todo\n"), ("out/top.txt", "todo\n")];
    let p = counted(tasks, &files, "");
    let done = p.run(&[]).exec();
    assert_eq!(done.states(), map(&[("base", "passed"), ("top", "passed")]), "{}", done.transcript());
    p.file("src/common.py", "common, edited\n");
    assert_eq!(p.plan_states(), map(&[("base", "verify"), ("top", "verify")]));

    // Planned: base's goal changed.
    p.edit("tasks/t.kdl", "Write the base.", "Write the base, again.");
    assert_eq!(p.plan_states(), map(&[("base", "run"), ("top", "run")]));
    p.edit("tasks/t.kdl", "Write the base, again.", "Write the base.");
    assert_eq!(p.plan_states(), map(&[("base", "verify"), ("top", "verify")]));

    // Run: base's change no longer passes (the user broke its output), so
    // its agent runs and writes something new; top then runs too.
    p.file("out/base.txt", "broken\n");
    assert_eq!(p.plan_states(), map(&[("base", "verify"), ("top", "verify")]));
    let done = p.run(&[]).exec();
    assert_eq!(done.states(), map(&[("base", "passed"), ("top", "passed")]), "{}", done.transcript());
    assert_eq!(calls(&p), ["base", "top", "base", "top"], "{}", done.transcript());
    let base = done.task("base");
    assert!(base["reason"].as_str().unwrap_or_default().contains("grep -q good out/base.txt"), "{base:#}");
}

// ---------------------------------------------------------------------------
// A failing verification

#[test]
fn a_breaking_edit_fails_verification_and_the_agent_runs_once() {
    let p = demo_run_once();
    // The user removes slugify (and edits the test file, so this is not
    // only an edit of the task's own output).
    let text = p.read("fixtures/demo/textkit/text.py");
    let start = text.find("\n\ndef slugify(").expect("slugify in text.py");
    let end = text[start + 2..].find("\n\ndef ").map_or(text.len(), |e| start + 2 + e);
    p.file("fixtures/demo/textkit/text.py", format!("{}{}", &text[..start], &text[end..]));
    assert!(!p.read("fixtures/demo/textkit/text.py").contains("def slugify("));
    assert!(p.read("fixtures/demo/textkit/text.py").contains("def truncate("));
    touch_demo_tests(p.path());
    assert_eq!(p.plan_states(), demo_states("verify", "verify", "stale"));

    // --locked: refused, naming the command that failed and its output.
    let before = p.tree();
    let lock = p.read("cassist.lock");
    let locked = p.run(&["--locked"]).status(3).exec();
    assert_eq!(calls(&p).len(), 3);
    let stderr = crate::support::flat(&locked.stderr);
    assert!(stderr.contains("add-slugify"), "{}", locked.transcript());
    assert!(stderr.contains("python3 -m unittest discover -s tests -t ."), "{}", locked.transcript());
    assert!(
        locked.stderr.contains("cannot import name 'slugify'"),
        "the command's output is quoted:\n{}",
        locked.transcript()
    );
    assert_same_tree(&p.tree(), &before, "--locked changed the tree");
    assert_eq!(p.read("cassist.lock"), lock);

    // A plain run: the agent runs once for add-slugify, saying why.
    let done = p.run(&[]).exec();
    assert_eq!(done.states()["add-slugify"], "passed", "{}", done.transcript());
    assert_eq!(calls_for(&p, "add-slugify"), 2, "{:?}\n{}", calls(&p), done.transcript());
    let reason = done.task("add-slugify")["reason"].as_str().unwrap_or_default().to_owned();
    assert!(
        reason.contains("acceptance command `cd fixtures/demo && python3 -m unittest discover -s tests -t .` failed"),
        "{reason}"
    );
    assert!(done.stderr.contains("its agent runs"), "{}", done.transcript());
    assert!(p.read("fixtures/demo/textkit/text.py").contains("def slugify("));
    // add-slugify's new output is a new input of add-truncate: not what
    // it ran with, so its agent runs too.
    assert_eq!(done.states()["add-truncate"], "passed", "{}", done.transcript());
    assert_eq!(calls_for(&p, "add-truncate"), 2, "{:?}", calls(&p));
    // The survey it depends on, stale, was refreshed before its agent ran.
    assert_eq!(calls_for(&p, "survey-textkit"), 2, "{:?}", calls(&p));
    let plan = p.plan_states();
    assert_eq!(plan["add-slugify"], "up-to-date");
    assert_eq!(plan["add-truncate"], "up-to-date");
}

/// A counting-agent task `name` whose acceptance command is `command`
/// (which runs a program [`CHECK`]).
fn checked(name: &str, command: &str) -> String {
    format!(
        "task {name:?} {{\n    goal \"Write out/{name}.txt.\"\n    context {{\n        file \"src/x.py\"\n    }}\n    scope {{\n        path \"out/**\"\n    }}\n    acceptance {{\n        run {command:?}\n    }}\n}}\n"
    )
}

/// A check program: its argument says good work.
const CHECK: &str = "#!/bin/sh\ngrep -q good \"$1\"\n";

#[test]
fn a_command_that_cannot_start_is_an_environment_failure_not_the_agents_job() {
    use std::os::unix::fs::PermissionsExt;
    // `missing` runs `xyz-check-verify` from the out folder's `bin` (on
    // PATH); `denied`, `tools/check` of the project.
    let tasks =
        checked("missing", "xyz-check-verify out/missing.txt") + &checked("denied", "tools/check out/denied.txt");
    let p = counted(&tasks, &[("src/x.py", "print('x')\n")], "");
    let bin = p.out().join("bin");
    let tool = bin.join("xyz-check-verify");
    let check = p.path().join("tools/check");
    write_executable(&tool, CHECK);
    write_executable(&check, CHECK);
    let done = p.run(&[]).path_first(&[&bin]).exec();
    assert_eq!(done.states(), map(&[("denied", "passed"), ("missing", "passed")]), "{}", done.transcript());
    assert_eq!(calls(&p).len(), 2);
    p.file("src/x.py", "print('x, edited')\n");
    assert_eq!(p.plan_states(), map(&[("denied", "verify"), ("missing", "verify")]));

    // Not installed (127); not executable (126).
    std::fs::remove_file(&tool).unwrap();
    std::fs::set_permissions(&check, std::fs::Permissions::from_mode(0o644)).unwrap();
    let before = p.tree();
    let lock = p.read("cassist.lock");
    let done = p.run(&["--keep-going"]).path_first(&[&bin]).status(1).exec();
    for (name, command, code) in
        [("missing", "xyz-check-verify out/missing.txt", 127), ("denied", "tools/check out/denied.txt", 126)]
    {
        let t = done.task(name);
        assert_eq!(t["state"], "failed", "{t:#}");
        let reason = t["reason"].as_str().unwrap();
        assert!(reason.contains("environment failure"), "{reason}");
        assert!(reason.contains(&format!("`{command}`")), "{reason}");
        assert!(reason.contains(&format!("exit {code}")), "{reason}");
    }
    assert_eq!(calls(&p).len(), 2, "an agent was called:\n{}", done.transcript());
    assert!(!done.stderr.contains("its agent runs"), "{}", done.transcript());
    assert_same_tree(&p.tree(), &before, "an environment failure changed the tree");
    assert_eq!(p.read("cassist.lock"), lock);
    assert_eq!(p.plan_states(), map(&[("denied", "verify"), ("missing", "verify")]));

    // Back in place: verified.
    write_executable(&tool, CHECK);
    std::fs::set_permissions(&check, std::fs::Permissions::from_mode(0o755)).unwrap();
    let done = p.run(&[]).path_first(&[&bin]).exec();
    assert_eq!(done.states(), map(&[("denied", "verified"), ("missing", "verified")]), "{}", done.transcript());
    assert_eq!(calls(&p).len(), 2);
}

/// A verification runs the project's setup and tests as an agent run
/// would: a failing test is a change that no longer holds (`--locked`
/// names it); a failing setup, an environment failure.
#[test]
fn setup_and_project_tests_run_in_a_verification() {
    let tasks = checked("missing", "xyz-check-verify out/missing.txt");
    let p = counted(&tasks, &[("src/x.py", "print('x')\n")], "");
    p.edit("cassist.kdl", "test #false", "setup \"test ! -e no-setup\"\ntest \"test ! -e no-tests\"");
    let bin = p.out().join("bin");
    write_executable(&bin.join("xyz-check-verify"), CHECK);
    let run = |args: &[&str], code: i32| p.run(args).path_first(&[&bin]).status(code).exec();
    assert_eq!(run(&[], 0).states()["missing"], "passed");
    p.file("src/x.py", "print('x, edited')\n");
    assert_eq!(p.plan_states()["missing"], "verify");
    let lock = p.read("cassist.lock");

    p.file("no-tests", "");
    let done = run(&["--locked"], 3);
    assert!(done.stderr.contains("`test ! -e no-tests`"), "{}", done.transcript());
    std::fs::remove_file(p.path().join("no-tests")).unwrap();

    p.file("no-setup", "");
    let done = run(&[], 1);
    let reason = done.task("missing")["reason"].as_str().unwrap().to_owned();
    assert!(reason.contains("environment failure") && reason.contains("setup"), "{reason}");
    std::fs::remove_file(p.path().join("no-setup")).unwrap();
    assert_eq!(calls(&p), ["missing"], "an agent ran");
    assert_eq!(p.read("cassist.lock"), lock);

    assert_eq!(run(&[], 0).states()["missing"], "verified");
    assert_eq!(calls(&p), ["missing"]);
}

// ---------------------------------------------------------------------------
// How verifications run

#[test]
fn identical_commands_on_the_same_tree_run_once() {
    let task = |name: &str| {
        format!(
            "task {name:?} {{\n    goal \"Write out/{name}.txt.\"\n    context {{\n        file \"src/common.py\"\n    }}\n    scope {{\n        path \"out/**\"\n    }}\n    acceptance {{\n        run \"test -d out\"\n    }}\n}}\n"
        )
    };
    let tasks = format!("{}\n{}", task("one"), task("two"));
    let p = counted(&tasks, &[("src/common.py", "common\n")], "");
    p.run(&[]).exec();
    assert_eq!(calls(&p).len(), 2);
    p.file("src/common.py", "common, edited\n");
    assert_eq!(p.plan_states(), map(&[("one", "verify"), ("two", "verify")]));
    let done = p.run(&[]).exec();
    assert_eq!(done.states(), map(&[("one", "verified"), ("two", "verified")]), "{}", done.transcript());
    assert_eq!(calls(&p).len(), 2);
    let ran = verified_by_commands(&done);
    assert_eq!(ran.len(), 1, "the same command on the same tree ran {ran:?}:\n{}", done.transcript());
    let other = if ran[0] == "one" { "two" } else { "one" };
    let reason = done.task(other)["reason"].as_str().unwrap_or_default().to_owned();
    assert!(reason.contains(&format!("verified with `{}`", ran[0])), "{reason}");
    assert_eq!(p.plan_states(), map(&[("one", "up-to-date"), ("two", "up-to-date")]));
}

fn what_a_verification_writes_never_reaches_the_tree(mode: &[(&str, &str)]) {
    let tasks = r#"task "t" {
    goal "Write out/t.txt."
    context {
        file "src/x.py"
    }
    scope {
        path "out/**"
    }
    acceptance {
        run "touch stray.txt out/stray.txt; echo junk >> src/x.py; grep -q good out/t.txt"
    }
}
"#;
    let p = in_mode(counted(tasks, &[("src/x.py", "print('x')\n")], ""), mode);
    let done = p.run(&[]).exec();
    assert_eq!(done.states()["t"], "passed", "{}", done.transcript());
    assert!(!p.exists("stray.txt") && !p.exists("out/stray.txt"), "an agent run's acceptance left its by-products");
    p.file("src/x.py", "print('x, edited')\n");
    assert_eq!(p.plan_states()["t"], "verify");
    let before = snapshot(p.path(), &[".cassist", "cassist.lock"]);
    let done = p.run(&[]).exec();
    assert_eq!(done.states()["t"], "verified", "{}", done.transcript());
    assert_same_tree(&snapshot(p.path(), &[".cassist", "cassist.lock"]), &before, "a verification changed the tree");
    assert_eq!(p.plan_states()["t"], "up-to-date");
}

in_both_modes!(what_a_verification_writes_never_reaches_the_tree: what_a_verification_writes_nothing_into_the_tree, what_a_verification_writes_nothing_into_the_tree_in_copy_mode);

fn ctrl_c_during_a_verification_leaves_it_to_verify(mode: &[(&str, &str)]) {
    let marker = unique_marker("verify");
    let tasks = format!(
        r#"task "t" {{
    goal "Write out/t.txt."
    context {{
        file "src/x.py"
    }}
    scope {{
        path "out/**"
    }}
    acceptance {{
        run "if [ -e slow ]; then sh -c 'sleep 30; true' {marker}; fi; grep -q good out/t.txt"
    }}
}}
"#
    );
    let p = in_mode(counted(&tasks, &[("src/x.py", "print('x')\n")], ""), mode);
    let done = p.run(&[]).exec();
    assert_eq!(done.states()["t"], "passed", "{}", done.transcript());
    p.file("src/x.py", "print('x, edited')\n");
    p.file("slow", "");
    assert_eq!(p.plan_states()["t"], "verify");
    let before = p.tree();
    let lock = p.read("cassist.lock");
    let store = snapshot(&p.path().join(".cassist/store"), &[]);

    let run = p.run(&[]).status(130).spawn();
    let sleeping = || processes_with(&marker).iter().any(|(_, cmd)| cmd.starts_with("sh -c sleep 30"));
    wait_until(Duration::from_secs(60), "the verification's command started", sleeping);
    signal(run.pid(), Signal::SIGINT);
    let done = run.finish_within(Duration::from_secs(30));
    assert_eq!(done.states()["t"], "failed", "{}", done.transcript());
    assert!(processes_with(&marker).is_empty(), "the verification's command was left running");
    assert_eq!(calls(&p).len(), 1, "an agent ran after Ctrl-C");
    assert_same_tree(&p.tree(), &before, "Ctrl-C during a verification changed the tree");
    assert_eq!(p.read("cassist.lock"), lock);
    // Nothing of it recorded as verified: the store's entries and
    // after-states are as they were, and the task is still to verify.
    let now = snapshot(&p.path().join(".cassist/store"), &[]);
    let entries = |t: &crate::support::Tree| -> Vec<(PathBuf, Vec<u8>)> {
        t.iter()
            .filter(|(k, _)| ["entries", "after", "verified"].iter().any(|d| k.starts_with(d)))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    assert_eq!(entries(&now), entries(&store), "Ctrl-C recorded something in the store's entries");
    assert_eq!(p.plan_states()["t"], "verify");

    // Let it finish: verified.
    std::fs::remove_file(p.path().join("slow")).unwrap();
    let done = p.run(&[]).exec();
    assert_eq!(done.states()["t"], "verified", "{}", done.transcript());
    assert_eq!(calls(&p).len(), 1);
}

in_both_modes!(ctrl_c_during_a_verification_leaves_it_to_verify: ctrl_c_during_a_verification_records_nothing, ctrl_c_during_a_verification_records_nothing_in_copy_mode);
