//! Snapshot views and the quiescent flush (issue 13, decisions 1 and 2):
//! a task that passes becomes an integration layer that workspaces
//! started later stack; the user's tree is written only when no task is
//! running; a conflict found at the flush keeps the user's edit; many
//! pending layers are merged; `-j 1` writes the tree after each task.

use crate::support::{Cmd, Project, Test, in_both_modes, unique_marker, workspaces_in};

/// Tasks `name` writing `out/<name>.txt`, in this order, none depending
/// on another.
fn tasks(names: &[&str], acceptance: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for name in names {
        out.push_str(&format!("task {name:?} {{\n    goal \"Write out/{name}.txt.\"\n    scope {{\n        path \"out/{name}.txt\"\n    }}\n"));
        for (task, run) in acceptance {
            if task == name {
                out.push_str(&format!("    acceptance {{\n        run {run:?}\n    }}\n"));
            }
        }
        out.push_str("}\n\n");
    }
    out
}

/// A project whose agent is `timed.sh` (see tests/it/parallel.rs).
fn timed(names: &[&str]) -> (Project, String) {
    let marker = unique_marker("snapshot");
    let env = ["TIMED_LOG", "TIMED_SLEEP", "TIMED_AWAIT"];
    let p = Test::trusted()
        .kdl("defaults {\n    agent \"timed\"\n}\n")
        .agent("timed", "timed.sh", &[&marker], &env)
        .tasks(&tasks(names, &[]))
        .file("out/.keep", "")
        .git()
        .build();
    std::fs::create_dir_all(p.out().join("log")).unwrap();
    let log = p.out().join("log").display().to_string();
    (p, log)
}

/// `cassist run ARGS` on a [`timed`] project whose task `held` waits for
/// the returned file (the others do not wait).
fn held_run(p: &Project, log: &str, args: &[&str], held: &str) -> (Cmd, std::path::PathBuf) {
    let go = p.out().join("go");
    let mut cmd = p.run(args);
    cmd.env("TIMED_LOG", log).env("TIMED_SLEEP", "0").env("TIMED_AWAIT", format!("{held}=file:{}", go.display()));
    (cmd, go)
}

/// A task started before another task passed never sees its change: not
/// while its agent runs, not in its acceptance; and the user's tree gets
/// the change only once no task is running.
fn a_tasks_view_is_fixed(mode: &[(&str, &str)]) {
    // Outside the project, where the agent's sandbox lets it look (not
    // under /tmp, which is its own).
    let out = tempfile::Builder::new().prefix("cassist-gate-").tempdir_in(crate::support::outside_temp_dir()).unwrap();
    let gate = out.path().join("go");
    let script = format!(
        "case $CASSIST_TASK in \
           fast) echo fast > out/fast.txt ;; \
           slow) while [ ! -e {gate} ]; do sleep 0.05; done; \
                 {{ ls out; cat out/fast.txt 2>/dev/null || echo no-fast; }} > out/slow.txt ;; \
         esac",
        gate = gate.display()
    );
    let p = Test::trusted()
        .kdl("defaults {\n    agent \"sh\"\n}\n")
        .sh_agent("sh", &script)
        .tasks(&tasks(&["slow", "fast"], &[("slow", "test ! -e out/fast.txt")]))
        .file("out/.keep", "")
        .git()
        .build();
    let mut run = p.run(&["-j", "2"]).envs(mode).spawn();
    run.wait_for_stdout("fast passed");
    // `slow` still runs: nothing is written under its view.
    assert!(!p.exists("out/fast.txt"), "the tree was written while a task ran");
    std::fs::write(&gate, "").unwrap();
    let out = run.finish();
    assert_eq!(out.code(), 0, "{}", out.transcript());
    let seen = p.read("out/slow.txt");
    assert!(seen.contains("no-fast") && !seen.contains("fast.txt"), "slow saw fast's change:\n{seen}");
    // Both written at the end.
    assert_eq!(p.read("out/fast.txt"), "fast\n");
}
in_both_modes!(a_tasks_view_is_fixed: a_tasks_view_is_fixed_in_overlay_mode, a_tasks_view_is_fixed_in_copy_mode);

/// `-j 1`: the tree is written after each task, before the next starts.
#[test]
fn one_job_writes_the_tree_after_each_task() {
    let (p, log) = timed(&["a", "b"]);
    let (cmd, go) = held_run(&p, &log, &["-j", "1"], "b");
    let mut run = cmd.spawn();
    run.wait_for_stdout("a passed");
    crate::support::wait_until(std::time::Duration::from_secs(20), "a in the tree", || p.exists("out/a.txt"));
    std::fs::write(&go, "").unwrap();
    let out = run.finish();
    assert_eq!(out.code(), 0, "{}", out.transcript());
    assert!(p.read("out/b.txt").contains("a.txt"), "b did not see a: {}", p.read("out/b.txt"));
}

/// The user edits a file a task wrote after the task passed, before the
/// flush: the change is not written, the user's edit stays, and the task
/// fails with the conflict (the other task's change is written).
#[test]
fn a_conflict_found_at_the_flush_keeps_the_users_edit() {
    let (p, log) = timed(&["fast", "slow"]);
    let (mut cmd, go) = held_run(&p, &log, &["-j", "2", "--keep-going"], "slow");
    let mut run = cmd.status(1).spawn();
    run.wait_for_stdout("fast passed");
    p.file("out/fast.txt", "the user's\n");
    std::fs::write(&go, "").unwrap();
    let out = run.finish();
    assert_eq!(p.read("out/fast.txt"), "the user's\n", "{}", out.transcript());
    assert!(p.read("out/slow.txt").starts_with("saw: "));
    let states = out.states();
    assert_eq!(states["fast"], "failed", "{}", out.transcript());
    assert_eq!(states["slow"], "passed", "{}", out.transcript());
    let reason = out.task("fast")["reason"].as_str().unwrap_or_default().to_owned();
    assert!(
        reason.contains("conflict: edited in the project while the task ran, and the edits do not merge: out/fast.txt: added on both sides with different content; the project keeps its version;"),
        "{reason}"
    );
    // Not recorded: the next run asks the agent again.
    let plan = p.cassist(&["plan", "--json"]).exec();
    assert!(plan.stdout.contains("\"run\""), "{}", plan.transcript());
}

/// More changes pass while a task runs than stack as layers: they are
/// merged, and every later workspace still sees all of them; none reaches
/// the tree before the long task ends.
#[test]
fn many_pending_layers_are_merged_and_all_seen() {
    let quick: Vec<String> = (1..=20).map(|i| format!("q{i:02}")).collect();
    let mut names = vec!["long"];
    names.extend(quick.iter().map(String::as_str));
    let (p, log) = timed(&names);
    let tmp = tempfile::tempdir().unwrap();
    let (mut cmd, go) = held_run(&p, &log, &["-j", "2"], "long");
    let mut run = cmd.env("TMPDIR", tmp.path()).spawn();
    run.wait_for_stdout("q20 passed");
    assert!(!p.exists("out/q01.txt"), "the tree was written while a task ran");
    // 20 changes pending, merged by levels of four: sixteen into one
    // layer, the last four into another (flush::to_merge).
    let layers: usize = workspaces_in(tmp.path())
        .iter()
        .filter(|d| d.file_name().is_some_and(|n| n.to_string_lossy().starts_with("layers-")))
        .map(|d| std::fs::read_dir(d).unwrap().count())
        .sum();
    assert_eq!(layers, 2, "pending layers on disk");
    std::fs::write(&go, "").unwrap();
    let out = run.finish();
    assert_eq!(out.code(), 0, "{}", out.transcript());
    let seen = p.read("out/q20.txt");
    for q in &quick[..19] {
        assert!(seen.contains(&format!("{q}.txt")), "q20 did not see {q}: {seen}");
    }
    assert!(!p.read("out/long.txt").contains("q01"), "long saw what passed after it started");
    for q in &quick {
        assert!(p.exists(&format!("out/{q}.txt")), "{q} not written");
    }
}

/// Tasks `first` and `second` whose agents say they started and wait for
/// their gate (in $GATES, the test's `out` folder, where agents may
/// write), then write `out/<task>.txt`, and `out/shared.txt` too
/// (`same`).
fn gated(same: bool) -> Project {
    let shared = if same { "echo $CASSIST_TASK > out/shared.txt; " } else { "" };
    let script = format!(
        "touch $GATES/$CASSIST_TASK.started; \
         while [ ! -e $GATES/$CASSIST_TASK.go ]; do sleep 0.05; done; \
         {shared}echo $CASSIST_TASK > out/$CASSIST_TASK.txt"
    );
    let scope = |name: &str| {
        let mut paths = format!("        path \"out/{name}.txt\"\n");
        if same {
            paths.push_str("        path \"out/shared.txt\"\n");
        }
        format!("task {name:?} {{\n    goal \"Write out/{name}.txt.\"\n    scope {{\n{paths}    }}\n}}\n\n")
    };
    Test::trusted()
        .kdl("defaults {\n    agent \"sh\"\n}\n")
        .kdl(&format!("agent \"sh\" {{\n    command \"sh\" \"-c\" {script:?}\n    pass-env \"GATES\"\n}}\n"))
        .tasks(&format!("{}{}", scope("first"), scope("second")))
        .file("out/.keep", "")
        .file("src/kept.txt", "the user's\n")
        .git()
        .build()
}

/// The two [`gated`] tasks, each writing its own file, run at once,
/// `first` passing while `second` runs. Returns the run and the project,
/// `second` passing last.
fn two_at_once(mode: &[(&str, &str)]) -> (crate::support::Output, Project) {
    let p = gated(false);
    let gates = p.out();
    let mut run = p.run(&["-j", "2", "--keep-going"]).env("GATES", &gates).envs(mode).any_status().spawn();
    // Both agents run (each task's view is fixed) before `first` passes;
    // `second` ends after it.
    run.wait_for_file(&gates.join("first.started"));
    run.wait_for_file(&gates.join("second.started"));
    std::fs::write(gates.join("first.go"), "").unwrap();
    run.wait_for_stdout("first passed");
    std::fs::write(gates.join("second.go"), "").unwrap();
    (run.finish(), p)
}

/// Two tasks whose scopes share a path never run at once (so a change
/// landed while a task ran never touches its paths): `second` starts only
/// once `first` has passed and its change is in the tree, and both land,
/// `second`'s edit over `first`'s; the rest of the tree stands.
fn tasks_sharing_a_path_run_one_after_the_other(mode: &[(&str, &str)]) {
    let p = gated(true);
    let gates = p.out();
    let mut run = p.run(&["-j", "2"]).env("GATES", &gates).envs(mode).any_status().spawn();
    run.wait_for_file(&gates.join("first.started"));
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(!gates.join("second.started").exists(), "`second` started while `first` ran");
    std::fs::write(gates.join("first.go"), "").unwrap();
    run.wait_for_file(&gates.join("second.started"));
    // Written before `second` started: its view holds it.
    assert_eq!(p.read("out/shared.txt"), "first\n");
    assert_eq!(p.read("out/first.txt"), "first\n");
    std::fs::write(gates.join("second.go"), "").unwrap();
    let out = run.finish();
    assert_eq!(out.code(), 0, "{}", out.transcript());
    assert_eq!(p.read("out/shared.txt"), "second\n");
    assert_eq!(p.read("out/first.txt"), "first\n");
    assert_eq!(p.read("out/second.txt"), "second\n");
    assert_eq!(p.read("src/kept.txt"), "the user's\n");
    assert_eq!(locked(&p), ["first", "second"], "the tasks in cassist.lock");
}
in_both_modes!(tasks_sharing_a_path_run_one_after_the_other: tasks_sharing_a_path_run_one_after_the_other_in_overlay_mode, tasks_sharing_a_path_run_one_after_the_other_in_copy_mode);

/// The same two tasks writing different files: no conflict, both land.
fn changes_to_different_paths_both_land(mode: &[(&str, &str)]) {
    let (out, p) = two_at_once(mode);
    assert_eq!(out.code(), 0, "{}", out.transcript());
    assert_eq!(p.read("out/first.txt"), "first\n");
    assert_eq!(p.read("out/second.txt"), "second\n");
    assert_eq!(locked(&p), ["first", "second"], "the tasks in cassist.lock");
}
in_both_modes!(changes_to_different_paths_both_land: changes_to_different_paths_both_land_in_overlay_mode, changes_to_different_paths_both_land_in_copy_mode);

/// Ctrl-C with `-j 2` while `slow` runs and `fast` has passed: cassist
/// ends 130 after writing what passed (decision 1: "after Ctrl-C for what
/// passed"): `fast`'s change and lock line, nothing of `slow`, no temp
/// file in the tree; the next plan has `fast` up-to-date and the next
/// run calls no agent for it.
#[test]
fn ctrl_c_flushes_what_passed() {
    use nix::sys::signal::Signal;
    let (p, log) = timed(&["slow", "fast"]);
    let (mut cmd, _never) = held_run(&p, &log, &["-j", "2"], "slow");
    let mut run = cmd.status(130).spawn();
    run.wait_for_stdout("fast passed");
    assert!(!p.exists("out/fast.txt"), "the tree was written while a task ran");
    crate::support::signal(run.pid(), Signal::SIGINT);
    let out = run.finish_within(std::time::Duration::from_secs(30));
    assert!(p.read("out/fast.txt").starts_with("saw: "), "{}", out.transcript());
    assert!(!p.exists("out/slow.txt"), "the interrupted task's change was written");
    assert_eq!(locked(&p), ["fast"], "the tasks in cassist.lock");
    for e in walkdir::WalkDir::new(p.path()).into_iter().filter_entry(|e| e.file_name() != "store") {
        let e = e.unwrap();
        assert!(
            !e.file_name().to_string_lossy().starts_with(".cassist-tmp-"),
            "temp file left: {}",
            e.path().display()
        );
    }
    assert_eq!(plan_states(&p), [["fast", "up-to-date"], ["slow", "run"]]);
    // The next run asks the agent for `slow` only.
    let again = p.run(&["-j", "2"]).env("TIMED_LOG", &log).env("TIMED_SLEEP", "0").exec();
    let starts = |task: &str| {
        std::fs::read_to_string(p.out().join("log/events"))
            .unwrap()
            .lines()
            .filter(|l| l.starts_with(&format!("start {task} ")))
            .count()
    };
    assert_eq!((starts("fast"), starts("slow")), (1, 2), "{}", again.transcript());
}

/// `cassist plan --json`: each task's name and state, in order.
fn plan_states(p: &Project) -> Vec<[String; 2]> {
    let plan = p.cassist(&["plan", "--json"]).exec().json();
    plan["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| [t["name"].as_str().unwrap().to_owned(), t["state"].as_str().unwrap().to_owned()])
        .collect()
}

/// The tasks `cassist.lock` has a line for.
fn locked(p: &Project) -> Vec<String> {
    let lock = cassist_core::lock::Lock::load(p.path()).unwrap_or_else(|e| panic!("cassist.lock: {e}"));
    lock.tasks.into_keys().collect()
}
