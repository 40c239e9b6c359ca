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
    assert!(reason.contains("conflict") && reason.contains("out/fast.txt"), "{reason}");
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
    // 20 changes pending: the first 17 were merged into one layer when
    // the 17th passed; the three after it stack over that one.
    let layers: usize = workspaces_in(tmp.path())
        .iter()
        .filter(|d| d.file_name().is_some_and(|n| n.to_string_lossy().starts_with("layers-")))
        .map(|d| std::fs::read_dir(d).unwrap().count())
        .sum();
    assert_eq!(layers, 4, "pending layers on disk");
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
