//! A `cassist.lock` written by the previous release, whose lines have no
//! `recipe` and no `dependencies`, plans and runs as it did: on the tree
//! its run left, every task is `up-to-date`, no agent runs and the file is
//! never rewritten, in a fresh clone (no `.cassist/`) as with the store
//! kept.
//!
//! The lock is `fixtures/locks/previous-release/demo.lock`: what cassist
//! 70efc90 wrote for the bundled demo (its README says how to make it
//! again). The demo's results are deterministic, so the tree this cassist
//! leaves is the one that lock describes.

use std::collections::BTreeMap;

use crate::demo::{DEMO_TASKS, demo};
use crate::support::{Output, Project, fixtures, map};

/// The previous release's lock of the demo.
fn previous_lock() -> String {
    let path = fixtures().join("locks/previous-release/demo.lock");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// An agent that fails, in place of the demo agent (same command line, so
/// the same input hashes): a run that calls it cannot pass.
const FAILING_AGENT: &str = "import sys\nprint('the agent was called')\nsys.exit(1)\n";

fn all(state: &str) -> BTreeMap<String, String> {
    map(&DEMO_TASKS.map(|t| (t, state)))
}

/// The demo, committed and run by this cassist (its changes are in the
/// tree): the lock this run wrote.
fn demo_run() -> (Project, String) {
    let p = demo();
    p.commit_all();
    let first = p.run(&[]).exec();
    assert_eq!(first.states(), all("passed"), "{}", first.transcript());
    let lock = p.read("cassist.lock");
    (p, lock)
}

/// [`demo_run`], then its agent made to fail and the previous release's
/// lock in place of the one this run wrote; `.cassist/` removed unless
/// `keep_store` (a fresh clone of a project that committed the lock).
fn demo_with_previous_lock(keep_store: bool) -> Project {
    let (p, _) = demo_run();
    p.file("fixtures/agents/demo-agent.py", FAILING_AGENT);
    p.file("cassist.lock", previous_lock());
    if !keep_store {
        std::fs::remove_dir_all(p.path().join(".cassist")).unwrap();
    }
    p
}

/// A run that found every task up to date and started no agent.
#[track_caller]
fn assert_all_up_to_date(run: &Output) {
    assert_eq!(run.states(), all("up-to-date"), "{}", run.transcript());
    for t in DEMO_TASKS {
        assert_eq!(run.task(t)["attempts"], 0, "{t} called an agent:\n{}", run.transcript());
    }
    assert_eq!(run.report_json()["cached"], 3, "{}", run.transcript());
}

/// `plan --json` says every task is up to date; `run --locked` exits 0
/// with no agent call and leaves the tree, the lock included, byte for
/// byte as it was.
#[track_caller]
fn assert_plans_and_runs_locked_as_before(p: &Project) {
    assert_eq!(p.plan_states(), all("up-to-date"), "{}", p.cassist(&["plan"]).exec().stdout);
    let tree = p.tree();
    let locked = p.run(&["--locked"]).exec();
    assert_all_up_to_date(&locked);
    assert_eq!(p.read("cassist.lock"), previous_lock(), "--locked rewrote the previous release's lock");
    crate::support::assert_same_tree(&p.tree(), &tree, "run --locked");
}

#[test]
fn the_previous_release_recorded_the_hashes_this_one_records() {
    // The fixture is the previous release's: none of the new fields.
    let previous = previous_lock();
    assert!(!previous.contains("recipe") && !previous.contains("dependencies"), "{previous}");
    // Its lines hold what this release records, the new fields and the
    // dates aside.
    let (_p, lock) = demo_run();
    let old_fields = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| !["recipe ", "dependencies ", "date "].iter().any(|f| l.trim_start().starts_with(f)))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(old_fields(&lock), old_fields(&previous), "this release's lock:\n{lock}");
    for t in DEMO_TASKS {
        assert!(lock.contains(&format!("task {t:?} {{\n    before ")), "{lock}");
    }
    assert_eq!(lock.matches("    recipe ").count(), 3, "{lock}");
}

#[test]
fn a_fresh_clone_with_a_previous_release_lock_is_up_to_date_and_calls_no_agent() {
    let p = demo_with_previous_lock(false);
    assert_plans_and_runs_locked_as_before(&p);
}

#[test]
fn a_previous_release_lock_with_the_store_kept_is_up_to_date_and_calls_no_agent() {
    let p = demo_with_previous_lock(true);
    assert!(p.exists(".cassist/store"));
    assert_plans_and_runs_locked_as_before(&p);
}

/// A plain `cassist run` (which writes lock lines for what it runs) finds
/// nothing to run and writes nothing: the previous release's lines are
/// not brought up to the new format.
#[test]
fn a_plain_run_leaves_a_previous_release_lock_as_it_is() {
    for keep_store in [false, true] {
        let p = demo_with_previous_lock(keep_store);
        let tree = p.tree();
        let run = p.run(&[]).exec();
        assert_all_up_to_date(&run);
        assert_eq!(p.read("cassist.lock"), previous_lock(), "a plain run rewrote the lock (store kept: {keep_store})");
        crate::support::assert_same_tree(&p.tree(), &tree, "a plain run");
        // And it still plans and runs `--locked` as before.
        assert_plans_and_runs_locked_as_before(&p);
    }
}
