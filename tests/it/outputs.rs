//! What a task's outputs decide (the states table of the README's cache section): a user's edit
//! of an output is kept and said, never rewritten; a created output that
//! is missing, or every output back at its base, is written again by a
//! replay, if the stored change merges into the tree as it is; a replay
//! that would conflict is `run`, not a failure repeated on every run. The
//! lock records each output, so a clone decides from it alone; the store
//! finds an entry by its after-state, so `run --locked` (which writes no
//! lock line) leaves its tasks up-to-date. And `cache gc` removes the
//! workspaces kept for projects that are gone.
//!
//! The agent (a shell script outside the project) appends the task's name
//! to a counter outside the project, then does what the task's name says:
//! `gen` writes `out.txt`, `other` writes `other.md`, `edit` appends
//! " (reviewed)" to line 2 of `notes.txt`, `touch` adds a line to
//! `src.txt`.

use std::path::{Path, PathBuf};

use crate::support::{Project, Test, Tree, assert_same_tree, map as states, snapshot, write};

// ---------------------------------------------------------------------------
// Support

const AGENT: &str = r#"#!/bin/sh
set -eu
cat > /dev/null
echo "$CASSIST_TASK" >> "$COUNT_DIR/calls"
case "$CASSIST_TASK" in
    gen) printf 'generated 1\ngenerated 2\n' > out.txt ;;
    other) echo other > other.md ;;
    edit) sed -i '2s/$/ (reviewed)/' notes.txt ;;
    touch) echo touched >> src.txt ;;
esac
"#;

/// What `gen` writes.
const GENERATED: &str = "generated 1\ngenerated 2\n";

/// A project with `tasks` and `files`, the counting agent as every task's
/// and no project test, committed to git.
fn project(tasks: &str, files: &[(&str, &str)]) -> Project {
    let test = Test::trusted().file("tasks/t.kdl", tasks).file("src.txt", "source\n");
    let p = files.iter().fold(test, |t, (rel, text)| t.file(rel, text)).build();
    let count = p.out().join("count");
    std::fs::create_dir_all(&count).unwrap();
    let p = p.with_env("COUNT_DIR", &count.display().to_string());
    let script = p.out().join("agent.sh");
    write(&script, AGENT);
    p.file(
        "cassist.kdl",
        format!(
            "{}defaults {{\n    agent \"count\"\n}}\nagent \"count\" {{\n    command \"sh\" {:?}\n    pass-env \"COUNT_DIR\"\n}}\n",
            "trust \"workspace-write\"\ntest #false\n\n",
            script.display().to_string()
        ),
    );
    p.commit_all();
    p
}

/// The tasks an agent ran for so far, in call order.
fn calls(p: &Project) -> Vec<String> {
    match std::fs::read_to_string(p.out().join("count/calls")) {
        Ok(t) => t.lines().map(str::to_owned).collect(),
        Err(_) => Vec::new(),
    }
}

/// `git add -A && git commit`: the user commits what cassist wrote.
fn commit(p: &Project) {
    p.git(&["add", "-A"]);
    p.git(&["commit", "-qm", "what cassist wrote"]);
}

/// Every file of the project but cassist's `.cassist/` and git's `.git/`
/// (git refreshes its index when asked for a status), with its bytes.
fn tree(p: &Project) -> Tree {
    snapshot(p.path(), &[".cassist", ".git"])
}

/// The tree with `rel` holding `text` instead.
fn with(tree: &Tree, rel: &str, text: &str) -> Tree {
    let mut t = tree.clone();
    t.insert(PathBuf::from(rel), text.as_bytes().to_vec());
    t
}

/// `gen` creates `out.txt`; its context is `context`.
fn gen_task(context: &str) -> String {
    format!("task \"gen\" {{\n    goal \"Generate out.txt.\"\n    context {{\n        file {context:?}\n    }}\n}}\n")
}

/// The first run of `gen`: it passes, `out.txt` is what it wrote, the
/// lock records it as created; the user commits.
fn gen_ran(p: &Project) {
    let done = p.run(&[]).exec();
    assert_eq!(done.states(), states(&[("gen", "passed")]), "{}", done.transcript());
    assert_eq!(p.read("out.txt"), GENERATED);
    let lock = cassist_core::lock::Lock::load(p.path()).unwrap();
    let out = &lock.tasks["gen"].output_files["out.txt"];
    assert!(out.created, "{out:?}");
    assert_eq!(out.hash.as_deref(), Some(blake3::hash(GENERATED.as_bytes()).to_hex().as_str()));
    let text = p.read("cassist.lock");
    assert!(
        text.contains(&format!("    output \"out.txt\" \"{}\" created=#true\n", out.hash.as_ref().unwrap())),
        "{text}"
    );
    commit(p);
}

/// The reported sequence on a project where `gen` has run and the user
/// committed: a hand edit of `out.txt` is kept (plan, explain and run say
/// so; nothing is written; exit 0), then `rm out.txt` is a replay that
/// writes it back as the task wrote it.
fn edit_then_delete(p: &Project) {
    let lock = p.read("cassist.lock");
    p.file("out.txt", "generated 1\nedited by hand\n");
    let edited = tree(p);

    assert_eq!(p.plan_states(), states(&[("gen", "up-to-date")]));
    let plan = p.cassist(&["plan"]).exec();
    assert!(plan.stdout.contains("\ngen: output edited: out.txt\n"), "{}", plan.transcript());
    let why = p.explain("gen");
    assert!(why.contains("state up-to-date\n  output edited: out.txt\n"), "{why}");
    let done = p.run(&[]).exec();
    assert_eq!(done.code(), 0);
    assert_eq!(done.states(), states(&[("gen", "up-to-date")]), "{}", done.transcript());
    assert!(done.stdout.contains("gen up-to-date (output edited: out.txt, kept)"), "{}", done.transcript());
    assert_eq!(done.task("gen")["reason"], "output edited: out.txt");
    assert_same_tree(&tree(p), &edited, "an up-to-date run with an edited output");
    assert_eq!(p.read("cassist.lock"), lock, "the lock moved to the user's edit");
    assert_eq!(calls(p), ["gen"]);

    std::fs::remove_file(p.path().join("out.txt")).unwrap();
    assert_eq!(p.plan_states(), states(&[("gen", "replay")]));
    let done = p.run(&[]).exec();
    assert_eq!(done.code(), 0);
    assert_eq!(done.states(), states(&[("gen", "replayed")]), "{}", done.transcript());
    assert_same_tree(&tree(p), &with(&edited, "out.txt", GENERATED), "after the replay");
    assert_eq!(p.read("cassist.lock"), lock);
    assert_eq!(calls(p), ["gen"], "a replay called the agent");
    assert_eq!(p.plan_states(), states(&[("gen", "up-to-date")]));
}

// ---------------------------------------------------------------------------
// The user's edits

#[test]
fn a_hand_edit_of_a_created_output_is_kept_and_a_deleted_one_written_again() {
    let p = project(&gen_task("src.txt"), &[]);
    gen_ran(&p);
    edit_then_delete(&p);
}

/// The task reads what it writes: the user's edit changes its inputs, but
/// only in its own output, which is as good as unchanged.
#[test]
fn a_task_that_reads_its_own_output_keeps_a_hand_edit_too() {
    let p = project(&gen_task("*.txt"), &[]);
    gen_ran(&p);
    let lock = cassist_core::lock::Lock::load(p.path()).unwrap();
    assert_ne!(lock.tasks["gen"].before, lock.tasks["gen"].after, "out.txt is one of its inputs");
    edit_then_delete(&p);
}

/// `edit` changes a file the user already had: deleting it is the user's
/// doing, kept and said; putting it back as it was before the run (as
/// `git checkout` does) is a replay.
#[test]
fn an_output_put_back_at_its_base_is_replayed_and_one_deleted_is_kept() {
    let tasks = "task \"edit\" {\n    goal \"Review line 2.\"\n    context {\n        file \"src.txt\"\n    }\n}\n";
    let p = project(tasks, &[("notes.txt", "a\nb\nc\n")]);
    let done = p.run(&[]).exec();
    assert_eq!(done.states(), states(&[("edit", "passed")]), "{}", done.transcript());
    assert_eq!(p.read("notes.txt"), "a\nb (reviewed)\nc\n");
    let lock = p.read("cassist.lock");
    assert!(lock.contains("    output \"notes.txt\" \""), "{lock}");
    assert!(!lock.contains("created=#true"), "notes.txt was there before: {lock}");
    commit(&p);

    p.git(&["checkout", "HEAD~1", "--", "notes.txt"]);
    assert_eq!(p.read("notes.txt"), "a\nb\nc\n");
    assert_eq!(p.plan_states(), states(&[("edit", "replay")]));
    assert!(p.explain("edit").contains("every output is back as it was before the run"), "{}", p.explain("edit"));
    let reverted = tree(&p);
    let done = p.run(&[]).exec();
    assert_eq!(done.states(), states(&[("edit", "replayed")]), "{}", done.transcript());
    assert_same_tree(&tree(&p), &with(&reverted, "notes.txt", "a\nb (reviewed)\nc\n"), "after the replay");
    assert_eq!(p.read("cassist.lock"), lock);
    assert_eq!(calls(&p), ["edit"]);

    // Deleted: the user's, kept.
    std::fs::remove_file(p.path().join("notes.txt")).unwrap();
    let deleted = tree(&p);
    assert_eq!(p.plan_states(), states(&[("edit", "up-to-date")]));
    let done = p.run(&[]).exec();
    assert_eq!(done.states(), states(&[("edit", "up-to-date")]), "{}", done.transcript());
    assert!(done.stdout.contains("edit up-to-date (output deleted: notes.txt, kept)"), "{}", done.transcript());
    assert_same_tree(&tree(&p), &deleted, "an up-to-date run with a deleted output");
    assert_eq!(p.read("cassist.lock"), lock);
    assert_eq!(calls(&p), ["edit"]);
}

/// `edit` changes line 2 of `notes.txt`; `touch` (after it) changes
/// `edit`'s context, so `edit`'s recorded before- and after-states
/// differ. The user puts the context back (the inputs are `edit`'s
/// before-state) and edits line 2 himself: the stored change would
/// conflict, so `edit` is `run`, and the agent works on the user's line.
#[test]
fn a_replay_that_would_conflict_is_run_and_the_users_line_kept() {
    let tasks = "task \"edit\" {\n    goal \"Review line 2.\"\n    context {\n        file \"src.txt\"\n    }\n}\n\ntask \"touch\" {\n    goal \"Touch the source.\"\n    depends-on \"edit\"\n    context {\n        file \"notes.txt\"\n    }\n}\n";
    let p = project(tasks, &[("notes.txt", "a\nb\nc\n")]);
    let done = p.run(&[]).exec();
    assert_eq!(done.states(), states(&[("edit", "passed"), ("touch", "passed")]), "{}", done.transcript());
    assert_eq!(p.read("src.txt"), "source\ntouched\n");
    commit(&p);
    let lock = cassist_core::lock::Lock::load(p.path()).unwrap();
    assert_ne!(lock.tasks["edit"].before, lock.tasks["edit"].after);

    p.file("src.txt", "source\n");
    p.file("notes.txt", "a\nmine\nc\n");
    let plan = p.cassist(&["plan"]).exec();
    assert!(plan.stdout.contains("\nedit: replay would conflict: notes.txt\n"), "{}", plan.transcript());
    assert_eq!(p.plan_states(), states(&[("edit", "run"), ("touch", "run")]));
    let why = p.explain("edit");
    assert!(why.contains("state run\n  replay would conflict: notes.txt\n"), "{why}");
    // `--locked` names it and writes nothing.
    let before = tree(&p);
    let done = p.run(&["--locked"]).status(3).exec();
    assert!(done.stderr.contains("edit: replay would conflict: notes.txt"), "{}", done.transcript());
    assert_same_tree(&tree(&p), &before, "--locked");
    // A run calls the agent, which works on the tree as it is.
    let done = p.run(&[]).exec();
    assert_eq!(done.states(), states(&[("edit", "passed"), ("touch", "passed")]), "{}", done.transcript());
    assert_eq!(calls(&p), ["edit", "touch", "edit", "touch"]);
    assert_eq!(p.read("notes.txt"), "a\nmine (reviewed)\nc\n");
    let after = with(&with(&before, "notes.txt", "a\nmine (reviewed)\nc\n"), "src.txt", "source\ntouched\n");
    assert_same_tree(&tree(&p), &with(&after, "cassist.lock", &p.read("cassist.lock")), "after the run");
    assert_eq!(p.plan_states(), states(&[("edit", "up-to-date"), ("touch", "up-to-date")]));
}

// ---------------------------------------------------------------------------
// The lock

/// A lock written by the release before per-output records: its lines
/// have the outputs' hash only. Nothing changed: up-to-date, the lock
/// left as it is; an edited output: kept, as the store says which it is.
#[test]
fn a_lock_of_the_previous_format_still_plans_up_to_date() {
    let p = project(&gen_task("src.txt"), &[]);
    gen_ran(&p);
    let lock = p.read("cassist.lock");
    let old: String = lock.lines().filter(|l| !l.starts_with("    output ")).map(|l| format!("{l}\n")).collect();
    assert_ne!(old, lock);
    assert!(old.contains("    outputs \""), "{old}");
    p.file("cassist.lock", &old);
    assert_eq!(p.plan_states(), states(&[("gen", "up-to-date")]));
    let done = p.run(&[]).exec();
    assert_eq!(done.states(), states(&[("gen", "up-to-date")]), "{}", done.transcript());
    assert_eq!(p.read("cassist.lock"), old, "an up-to-date run leaves an older lock as it is");
    p.file("out.txt", "mine\n");
    let done = p.run(&[]).exec();
    assert_eq!(done.states(), states(&[("gen", "up-to-date")]), "{}", done.transcript());
    assert_eq!(done.task("gen")["reason"], "output edited: out.txt");
    assert_eq!(p.read("out.txt"), "mine\n");
    assert_eq!(p.read("cassist.lock"), old);
    assert_eq!(calls(&p), ["gen"]);
}

/// A clone with no `.cassist/` decides from the lock alone: an edited
/// output is kept; a missing created one needs the store to be written
/// again, and without it the task runs.
#[test]
fn a_clone_without_the_store_decides_from_the_lock() {
    let p = project(&gen_task("src.txt"), &[]);
    gen_ran(&p);
    std::fs::remove_dir_all(p.path().join(".cassist")).unwrap();
    p.file("out.txt", "mine\n");
    assert_eq!(p.plan_states(), states(&[("gen", "up-to-date")]));
    assert!(p.explain("gen").contains("output edited: out.txt"), "{}", p.explain("gen"));
    std::fs::remove_file(p.path().join("out.txt")).unwrap();
    assert_eq!(p.plan_states(), states(&[("gen", "run")]));
    let why = p.explain("gen");
    assert!(
        why.contains("output out.txt deleted (the task created it)") && why.contains("the store holds no record"),
        "{why}"
    );
}

// ---------------------------------------------------------------------------
// `run --locked` and after-states

/// `gen` reads and writes `out.txt`, and `other` writes `other.md`. The
/// clone's committed lock has no line for `gen` (added after the lock was
/// committed; CI pushed its run to the team cache), and its store pulled
/// gen's entry: `run --locked` replays it without writing the lock; then
/// `gen` is up-to-date, and a second `run --locked` calls nothing.
#[test]
fn after_a_locked_replay_the_task_is_up_to_date() {
    let tasks = format!(
        "{}\ntask \"other\" {{\n    goal \"Write other.txt.\"\n    context {{\n        file \"src.txt\"\n    }}\n}}\n",
        gen_task("*.txt")
    );
    let a = project(&tasks, &[]);
    let done = a.run(&["-j", "1"]).exec();
    assert_eq!(done.states(), states(&[("gen", "passed"), ("other", "passed")]), "{}", done.transcript());

    // The clone: the files as committed before the run, a lock with
    // `other`'s line only, a store with other's entry and gen's pulled.
    let b = Test::trusted().build();
    for rel in ["tasks/t.kdl", "src.txt", "cassist.kdl"] {
        b.file(rel, a.read(rel));
    }
    let mut lock = cassist_core::lock::Lock::load(a.path()).unwrap();
    let gen_line = lock.tasks.remove("gen").unwrap();
    lock.save(b.path()).unwrap();
    let committed = b.read("cassist.lock");
    crate::support::copy_tree(
        &a.path().join(".cassist/store/objects"),
        &mkdir(&b.path().join(".cassist/store/objects")),
    );
    let (from, to) = (cassist_core::store::Store::open(a.path()), cassist_core::store::Store::open(b.path()));
    to.put_entry(&from.read_entry(&lock.tasks["other"].before).unwrap().unwrap()).unwrap();
    to.put_fetched_entry(&from.read_entry(&gen_line.before).unwrap().unwrap(), "cassist-ed25519:test").unwrap();
    let b = b.with_env("COUNT_DIR", &a.out().join("count").display().to_string());
    assert_eq!(b.plan_states(), states(&[("gen", "replay"), ("other", "replay")]));

    let done = b.run(&["--locked"]).exec();
    assert_eq!(done.states(), states(&[("gen", "replayed"), ("other", "replayed")]), "{}", done.transcript());
    assert_eq!(b.read("out.txt"), GENERATED);
    assert_eq!(b.read("other.md"), "other\n");
    assert_eq!(b.read("cassist.lock"), committed, "--locked wrote the lock");
    assert_eq!(b.plan_states(), states(&[("gen", "up-to-date"), ("other", "up-to-date")]));
    assert!(b.explain("gen").contains("its inputs are as a stored run left them"), "{}", b.explain("gen"));
    let replayed = tree(&b);
    let done = b.run(&["--locked"]).exec();
    assert_eq!(done.states(), states(&[("gen", "up-to-date"), ("other", "up-to-date")]), "{}", done.transcript());
    assert_same_tree(&tree(&b), &replayed, "a second --locked run");
    assert_eq!(b.read("cassist.lock"), committed);
    assert_eq!(calls(&a), ["gen", "other"], "an agent ran on the clone");
}

fn mkdir(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    dir.to_path_buf()
}

// ---------------------------------------------------------------------------
// Kept workspaces of projects that are gone

/// A workspace kept (`run --keep-workspace`, a blocked task) for a
/// project that was deleted is removed by `cache gc` of any other project
/// once it has been kept a week; a recent one, or an old one of a project
/// still there, stays.
#[test]
fn cache_gc_removes_old_workspaces_kept_for_projects_that_are_gone() {
    let p = project(&gen_task("src.txt"), &[]);
    let parent = p.tmp().join(format!("cassist-{}", nix::unistd::getuid()));
    let gone = p.tmp().join("deleted-project");
    let day = std::time::Duration::from_secs(24 * 3600);
    // A kept workspace as cassist leaves it: its tree and its mark, naming
    // the task and project, dated when it was kept.
    let kept = |name: &str, root: &Path, age: std::time::Duration| -> PathBuf {
        let dir = parent.join(name);
        std::fs::create_dir_all(dir.join("tree")).unwrap();
        std::fs::write(dir.join("tree/file.txt"), "work\n").unwrap();
        let mark = serde_json::json!({"task": "gen", "root": root});
        std::fs::write(dir.join("kept"), mark.to_string()).unwrap();
        let when = std::time::SystemTime::now() - age;
        std::fs::File::options().write(true).open(dir.join("kept")).unwrap().set_modified(when).unwrap();
        dir
    };
    let old = kept("orphan-old", &gone, 8 * day);
    let recent = kept("orphan-recent", &gone, day);
    let live = kept("live-old", p.path(), 30 * day);

    // Another project's gc.
    let other = project(&gen_task("src.txt"), &[]);
    let gc = other.cassist(&["cache", "gc"]).env("TMPDIR", p.tmp()).exec();
    assert!(
        gc.stdout.contains("removed 1 workspace(s) kept for projects that no longer exist, freed "),
        "{}",
        gc.transcript()
    );
    assert!(!old.exists(), "the week-old orphan stayed");
    assert!(recent.exists() && live.exists(), "a recent orphan or a live project's workspace went");
    let again = other.cassist(&["cache", "gc"]).env("TMPDIR", p.tmp()).exec();
    assert!(!again.stdout.contains("no longer exist"), "{}", again.transcript());
    // The project's own gc removes its own, at any age.
    let own = p.cassist(&["cache", "gc"]).exec();
    assert!(own.stdout.contains("removed 1 kept workspace(s)"), "{}", own.transcript());
    assert!(!live.exists() && recent.exists());
}
