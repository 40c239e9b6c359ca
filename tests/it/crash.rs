//! Crash safety (SPEC 3.9, issue 13): cassist killed at every step of
//! recording, integration and build, and from outside at random moments
//! of a 400-file integration. After each kill, and after the next
//! command, every file of the change is whole (old or new, never a mix
//! inside a file, and never half the change once the next command has
//! run), no `.cassist-tmp-*` is left, the lock parses and the store reads;
//! the run after that leaves the tree changed and never calls the agent
//! again for a task that was recorded. The same with the user saving
//! files between the kill and the next command: every edit survives the
//! recovery byte for byte, and the task has a lock line only when its
//! change is all in.
//!
//! The kills at each step use cassist's failpoints
//! (`CASSIST_FAILPOINT=name:N`: SIGKILL at the N-th hit of `name`); each
//! point is tried at every N until cassist runs past its last hit.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::{Output, Project, Test, write};

/// The counting agent: one line per call in `$COUNT_DIR/calls` (outside
/// the project), then every `src/*.txt` rewritten (`old NNN` → `new NNN`,
/// longer), `old/gone.txt` deleted (its folder with it), and
/// `new/dir/made.txt` made in new folders.
const AGENT: &str = r#"#!/bin/sh
set -eu
echo "$CASSIST_TASK" >> "$COUNT_DIR/calls"
for f in src/*.txt; do
    n=${f#src/}
    n=${n%.txt}
    printf 'new %s, as the agent wrote it\n' "$n" > "$f"
done
rm old/gone.txt
mkdir -p new/dir
echo made > new/dir/made.txt
printf '{"success": true, "summary": "changed"}\n' > "$CASSIST_RESULT_FILE"
"#;

const TASKS: &str = r#"task "change" {
    goal "Change every file."
    context {
        file "src/*.txt"
    }
    scope {
        path "src/**"
        path "old/**"
        path "new/**"
    }
}
"#;

fn old(i: usize) -> String {
    format!("old {i:03}\n")
}

fn new(i: usize) -> String {
    format!("new {i:03}, as the agent wrote it\n")
}

/// A project of `files` files `src/NNN.txt` (and `old/gone.txt`) with the
/// task `change`, its counting agent, and `build` as its build command.
fn project(files: usize, build: Option<&str>) -> Project {
    let test = (0..files).fold(Test::trusted().tasks(TASKS).file("old/gone.txt", "gone\n"), |t, i| {
        t.file(&format!("src/{i:03}.txt"), old(i))
    });
    let p = test.build();
    let count = p.out().join("count");
    std::fs::create_dir_all(&count).unwrap();
    let p = p.with_env("COUNT_DIR", count.to_str().unwrap());
    let script = p.out().join("count.sh");
    write(&script, AGENT);
    let build = build.map(|b| format!("build {b:?}\n")).unwrap_or_default();
    let config = format!(
        "trust \"workspace-write\"\ntest #false\n{build}defaults {{\n    agent \"count\"\n}}\nagent \"count\" {{\n    command \"sh\" {:?}\n    pass-env \"COUNT_DIR\"\n}}\n",
        script.display().to_string()
    );
    p.file("cassist.kdl", config);
    p
}

/// How many times the agent ran.
fn calls(p: &Project) -> usize {
    std::fs::read_to_string(p.out().join("count/calls")).map_or(0, |t| t.lines().count())
}

/// Where the change stands in the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Old,
    New,
    /// Some files old, some new (each of them whole).
    Mixed,
}

/// Checks that every file of the change is whole, old or new; says where
/// the change stands. Once a command has run after a kill, no temp file
/// or empty folder of the change is left either.
#[track_caller]
fn whole_files(p: &Project, files: usize, when: &str) -> Side {
    whole(p, files, when, true)
}

/// [`whole_files`] right after a kill: a temp file, or a folder made for
/// a file not yet written, may be there until the next command.
#[track_caller]
fn as_killed(p: &Project, files: usize, when: &str) -> Side {
    whole(p, files, when, false)
}

#[track_caller]
fn whole(p: &Project, files: usize, when: &str, recovered: bool) -> Side {
    let (mut olds, mut news) = (0, 0);
    let mut count = |is_new: bool| if is_new { news += 1 } else { olds += 1 };
    for i in 0..files {
        let got = std::fs::read_to_string(p.path().join(format!("src/{i:03}.txt")))
            .unwrap_or_else(|e| panic!("{when}: src/{i:03}.txt: {e}"));
        assert!(got == old(i) || got == new(i), "{when}: src/{i:03}.txt is neither old nor new: {got:?}");
        count(got == new(i));
    }
    match std::fs::read_to_string(p.path().join("old/gone.txt")) {
        Ok(t) => {
            assert_eq!(t, "gone\n", "{when}: old/gone.txt");
            count(false);
        }
        Err(_) => count(true),
    }
    match std::fs::read_to_string(p.path().join("new/dir/made.txt")) {
        Ok(t) => {
            assert_eq!(t, "made\n", "{when}: new/dir/made.txt");
            count(true);
        }
        Err(_) => {
            assert!(!recovered || !p.path().join("new").exists(), "{when}: an empty new/ is left");
            count(false);
        }
    }
    if !recovered {
        return side(olds, news);
    }
    for e in walkdir::WalkDir::new(p.path()).into_iter().filter_entry(|e| e.file_name() != "store") {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy();
        assert!(
            !name.starts_with(".cassist-tmp-") && !name.starts_with(".tmp"),
            "{when}: temp file left: {}",
            e.path().display()
        );
    }
    side(olds, news)
}

fn side(olds: usize, news: usize) -> Side {
    match (olds, news) {
        (_, 0) => Side::Old,
        (0, _) => Side::New,
        _ => Side::Mixed,
    }
}

/// The lock parses; every entry of the store reads; the task's lock line,
/// if any, names a whole entry with the same patch and after-state.
#[track_caller]
fn consistent(p: &Project, when: &str) {
    let lock = cassist_core::lock::Lock::load(p.path()).unwrap_or_else(|e| panic!("{when}: cassist.lock: {e}"));
    let store = cassist_core::store::Store::open(p.path());
    for e in std::fs::read_dir(store.dir().join("entries")).into_iter().flatten() {
        let path = e.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        serde_json::from_slice::<cassist_core::store::Entry>(&bytes)
            .unwrap_or_else(|e| panic!("{when}: {} does not read: {e}", path.display()));
    }
    if let Some(l) = lock.tasks.get("change") {
        let entry = store.get_entry(&l.before).unwrap_or_else(|| panic!("{when}: no whole entry for the lock line"));
        assert_eq!((entry.patch.as_str(), entry.after.as_str()), (l.patch.as_str(), l.after.as_str()), "{when}");
    }
}

/// `cassist plan --json`: the task's state (the command recovers first).
fn plan(p: &Project) -> (String, Output) {
    let out = p.cassist(&["plan", "--json"]).exec();
    let state = out.json()["tasks"][0]["state"].as_str().unwrap().to_owned();
    (state, out)
}

/// Runs `change` with `CASSIST_FAILPOINT=point:n`: the side the kill
/// left, or how cassist ended when it ran past the point's last hit.
fn killed_at(p: &Project, files: usize, point: &str, n: usize) -> Result<Side, Output> {
    let out = p.run(&[]).env("CASSIST_FAILPOINT", format!("{point}:{n}")).any_status().exec();
    if std::os::unix::process::ExitStatusExt::signal(&out.status) != Some(9) {
        return Err(out);
    }
    Ok(as_killed(p, files, &format!("killed at {point}:{n}")))
}

/// What a kill at a point leaves, and what follows.
struct Expect {
    /// After the kill and the next command (which recovers): the change
    /// in the tree or not.
    recovered: Side,
    /// What `plan` says then.
    state: &'static str,
    /// The next run's state for the task.
    next: &'static str,
    /// Agent calls in all.
    calls: usize,
}

/// Kills cassist at every hit of `point`, checking each time what the
/// kill and the next commands leave.
fn every_hit(point: &str, files: usize, build: Option<&str>, expect: &Expect) {
    let mut n = 1;
    loop {
        let p = project(files, build);
        let when = format!("{point}:{n}");
        let left = match killed_at(&p, files, point, n) {
            Ok(left) => left,
            Err(out) => {
                assert!(n > 1, "{point} was never hit:\n{}", out.transcript());
                out.assert_code(0);
                return;
            }
        };
        if left == Side::Mixed {
            assert!(p.path().join(".cassist/journal").exists(), "{when}: a mixed tree without a journal");
        }
        consistent(&p, &format!("{when}, as the kill left it"));
        let (state, out) = plan(&p);
        assert_eq!(whole_files(&p, files, &format!("{when}, after plan")), expect.recovered, "{}", out.transcript());
        assert!(!p.path().join(".cassist/journal").exists(), "{when}: the journal is left:\n{}", out.transcript());
        assert_eq!(state, expect.state, "{when}:\n{}", out.transcript());
        consistent(&p, &format!("{when}, after plan"));
        let out = p.run(&[]).exec();
        assert_eq!(out.states()["change"], expect.next, "{when}:\n{}", out.transcript());
        assert_eq!(whole_files(&p, files, &format!("{when}, after the next run")), Side::New);
        assert_eq!(calls(&p), expect.calls, "{when}: agent calls");
        consistent(&p, &format!("{when}, after the next run"));
        let (state, out) = plan(&p);
        assert_eq!(state, "up-to-date", "{when}, after the next run:\n{}", out.transcript());
        n += 1;
    }
}

/// The change was recorded, not integrated (or rolled back): replayed.
const REPLAYED: Expect = Expect { recovered: Side::Old, state: "replay", next: "replayed", calls: 1 };
/// The change was integrated and recorded.
const DONE: Expect = Expect { recovered: Side::New, state: "up-to-date", next: "up-to-date", calls: 1 };

const FILES: usize = 20;

#[test]
fn killed_while_recording_the_objects_the_task_runs_again() {
    // Nothing of the task is recorded yet: the agent runs again.
    every_hit("record-object", FILES, None, &Expect { recovered: Side::Old, state: "run", next: "passed", calls: 2 });
}

/// Recorded in the store, the journal not written yet: nothing of the
/// change is in the tree, and the next run replays it.
#[test]
fn killed_once_recorded_the_task_is_replayed_never_run_again() {
    for point in ["record-entry", "flush-begin"] {
        every_hit(point, FILES, None, &REPLAYED);
    }
}

/// The build runs on a layer before the flush: killed around it, nothing
/// reached the tree.
#[test]
fn killed_around_the_build_the_change_is_replayed() {
    for point in ["build-start", "build-end"] {
        every_hit(point, FILES, Some("test -f new/dir/made.txt"), &REPLAYED);
    }
}

/// The journal, written whole and flushed before any file of the tree,
/// holds the lock lines from the start (the after-states are hashed on
/// the tree as the change will leave it): from then on the next command
/// completes the change, whatever step the kill hit.
#[test]
fn killed_once_journaled_the_change_is_completed() {
    every_hit("flush-journal", FILES, None, &DONE);
}

#[test]
fn killed_while_writing_files_the_change_is_completed() {
    every_hit("flush-temp", FILES, None, &DONE);
}

#[test]
fn killed_after_any_file_the_change_is_completed() {
    every_hit("flush-file", FILES, None, &DONE);
}

#[test]
fn killed_after_the_files_the_change_is_completed() {
    for point in ["flush-applied", "flush-lock", "flush-done"] {
        every_hit(point, FILES, Some("true"), &DONE);
    }
}

/// A build that fails drops the change before anything of it reaches the
/// tree (the build runs on a layer over the change and the tree; issue
/// 13: the tree is written only by the flush): nothing to take back out,
/// and the next run asks the agent again (nothing to replay).
#[test]
fn a_change_whose_build_failed_never_reaches_the_tree() {
    let files = 6;
    let p = project(files, Some("exit 1"));
    let out = p.run(&[]).any_status().exec();
    assert_eq!(out.states()["change"], "failed", "{}", out.transcript());
    assert!(out.stdout.contains("nothing was integrated"), "{}", out.transcript());
    assert_eq!(whole_files(&p, files, "after the failed build"), Side::Old);
    let (state, out) = plan(&p);
    assert!(!out.stderr.contains("rolled back"), "{}", out.transcript());
    assert_eq!(state, "run", "a change whose build failed is not replayed:\n{}", out.transcript());
    consistent(&p, "after the failed build");
}

/// The agent of [`two_tasks`]: one line per call in `$COUNT_DIR/calls`,
/// then `out/<task>/<i>.txt` for i below `$PER_TASK`.
const WRITER: &str = r#"#!/bin/sh
set -eu
echo "$CASSIST_TASK" >> "$COUNT_DIR/calls"
mkdir -p "out/$CASSIST_TASK"
i=0
while [ "$i" -lt 5 ]; do
    echo "$CASSIST_TASK $i" > "out/$CASSIST_TASK/$i.txt"
    i=$((i + 1))
done
printf '{"success": true, "summary": "wrote"}\n' > "$CASSIST_RESULT_FILE"
"#;

/// Files each task of [`two_tasks`] writes.
const PER_TASK: usize = 5;

/// Two independent tasks, `one` and `two`, each writing its own files.
fn two_tasks() -> Project {
    let tasks = ["one", "two"]
        .map(|t| {
            format!(
                "task {t:?} {{\n    goal \"Write out/{t}.\"\n    scope {{\n        path \"out/{t}/**\"\n    }}\n}}\n"
            )
        })
        .join("\n");
    let p = Test::trusted().tasks(&tasks).file("out/.keep", "").build();
    let count = p.out().join("count");
    std::fs::create_dir_all(&count).unwrap();
    let p = p.with_env("COUNT_DIR", count.to_str().unwrap());
    let script = p.out().join("writer.sh");
    write(&script, WRITER);
    let config = format!(
        "trust \"workspace-write\"\ntest #false\ndefaults {{\n    agent \"w\"\n}}\nagent \"w\" {{\n    command \"sh\" {:?}\n    pass-env \"COUNT_DIR\"\n}}\n",
        script.display().to_string()
    );
    p.file("cassist.kdl", config);
    p
}

/// How many of `task`'s files are in the tree (each whole).
fn written(p: &Project, task: &str) -> usize {
    (0..PER_TASK)
        .filter(|i| match std::fs::read_to_string(p.path().join(format!("out/{task}/{i}.txt"))) {
            Ok(text) => {
                assert_eq!(text, format!("{task} {i}\n"), "out/{task}/{i}.txt is not whole");
                true
            }
            Err(_) => false,
        })
        .count()
}

/// Two tasks' changes pending together (`-j 2`: the first to pass waits
/// for the second) are written by one flush, one transaction: killed at
/// every step of it, the next command leaves both changes or neither, and
/// the run after that writes both without calling an agent again.
#[test]
fn killed_while_flushing_two_pending_changes_leaves_both_or_neither() {
    for point in ["flush-checked", "flush-journal", "flush-file", "flush-done"] {
        let mut n = 1;
        loop {
            let p = two_tasks();
            let when = format!("{point}:{n}");
            let out = p.run(&["-j", "2"]).env("CASSIST_FAILPOINT", &when).any_status().exec();
            if std::os::unix::process::ExitStatusExt::signal(&out.status) != Some(9) {
                assert!(n > 1, "{point} was never hit:\n{}", out.transcript());
                out.assert_code(0);
                assert_eq!((written(&p, "one"), written(&p, "two")), (PER_TASK, PER_TASK));
                break;
            }
            let plan = p.cassist(&["plan"]).exec();
            let both = (written(&p, "one"), written(&p, "two"));
            assert!(both == (0, 0) || both == (PER_TASK, PER_TASK), "{when}: {both:?} left:\n{}", plan.transcript());
            assert!(!p.path().join(".cassist/journal").exists(), "{when}");
            let next = p.run(&["-j", "2"]).exec();
            next.assert_code(0);
            assert_eq!((written(&p, "one"), written(&p, "two")), (PER_TASK, PER_TASK), "{when}");
            assert_eq!(
                calls(&p),
                2,
                "{when}: an agent ran again:\n{}\nkilled run:\n{}\nplan:\n{}",
                next.transcript(),
                out.transcript(),
                plan.transcript()
            );
            n += 1;
        }
    }
}

/// Killed while recovering: the next command recovers all the same.
#[test]
fn killed_while_recovering_the_next_command_recovers() {
    let files = 6;
    let mut n = 1;
    loop {
        let p = project(files, None);
        assert_eq!(killed_at(&p, files, "flush-file", 4).ok(), Some(Side::Mixed));
        let when = format!("recover-file:{n}");
        let out = p.cassist(&["plan"]).env("CASSIST_FAILPOINT", &when).any_status().exec();
        let killed = std::os::unix::process::ExitStatusExt::signal(&out.status) == Some(9);
        as_killed(&p, files, &when);
        let (state, out) = if killed { plan(&p) } else { (plan(&p).0, out) };
        assert!(out.stderr.contains("completed the integration"), "{when}:\n{}", out.transcript());
        assert_eq!(whole_files(&p, files, &format!("{when}, recovered")), Side::New);
        assert_eq!(state, "up-to-date", "{when}");
        if !killed {
            assert!(n > 1, "recover-file was never hit");
            return;
        }
        n += 1;
    }
}

/// SIGKILL from outside at moments spread over a 400-file integration,
/// again and again: each file is whole, the next command leaves the whole
/// change or none of it and no temp file, and the run after that
/// integrates it without calling the agent again.
#[test]
fn killed_from_outside_during_a_400_file_integration() {
    const FILES: usize = 400;
    const KILLS: u64 = 5;
    let p = project(FILES, None);
    let first = p.path().join("src/000.txt");
    let journal = p.path().join(".cassist/journal");
    // How long an integration takes here, unkilled.
    let window = {
        let run = p.run(&[]).spawn();
        let seen = wait_for_integration(&first, &journal, FILES);
        run.finish();
        seen.elapsed().max(Duration::from_millis(50))
    };
    let mut sides = Vec::new();
    for k in 0..KILLS {
        reset(&p, FILES);
        let run = p.run(&[]).any_status().spawn();
        let pid = run.pid();
        let seen = wait_for_integration(&first, &journal, FILES);
        // Spread over the window, from its start to past its end.
        let at = window.mul_f64(k as f64 / (KILLS - 1) as f64 * 1.2);
        std::thread::sleep(at.saturating_sub(seen.elapsed()));
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL);
        let out = run.finish();
        let when = format!("kill {k} at {at:?} of {window:?}");
        let left = as_killed(&p, FILES, &when);
        sides.push(left);
        let (state, plan_out) = plan(&p);
        let recovered = whole_files(&p, FILES, &format!("{when}, after plan"));
        assert_ne!(recovered, Side::Mixed, "{when}: half the change is left:\n{}", plan_out.transcript());
        assert!(!journal.exists(), "{when}");
        consistent(&p, &when);
        let next = p.run(&[]).exec();
        assert_eq!(whole_files(&p, FILES, &format!("{when}, next run")), Side::New, "{}", next.transcript());
        assert_eq!(calls(&p), 1, "{when}: the agent ran again ({state}):\n{}\n{}", out.transcript(), next.transcript());
        let (state, _) = plan(&p);
        assert_eq!(state, "up-to-date", "{when}");
    }
    eprintln!("integration window {window:?}; left by the kills: {sides:?}");
}

/// Waits for the integration to start (the journal, or a first changed
/// file); when it was seen.
fn wait_for_integration(first: &Path, journal: &Path, files: usize) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(120);
    let old = old(0);
    loop {
        if journal.exists() || std::fs::read_to_string(first).is_ok_and(|t| t != old) {
            return Instant::now();
        }
        assert!(Instant::now() < deadline, "no integration of {files} files began within 2 minutes");
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// The project as before the task ran: every file old, no lock, no store,
/// no call.
fn reset(p: &Project, files: usize) {
    for i in 0..files {
        std::fs::write(p.path().join(format!("src/{i:03}.txt")), old(i)).unwrap();
    }
    write(&p.path().join("old/gone.txt"), "gone\n");
    let _ = std::fs::remove_dir_all(p.path().join("new"));
    let _ = std::fs::remove_file(p.path().join("cassist.lock"));
    let _ = std::fs::remove_dir_all(p.path().join(".cassist/store"));
    let _ = std::fs::remove_file(p.out().join("count/calls"));
}

// Edits the user saves between a kill and the next command: the
// recovery is three-way (the tree now is one side), so every such edit
// survives it, byte for byte. An edit that merges with the change lets
// an integration that was journaled be completed; one that conflicts
// with it turns the whole integration back, and its lock line is not
// written.

/// The agent of [`lines_project`]: one line per call in
/// `$COUNT_DIR/calls`, then the first line of every `src/*.txt` changed,
/// `old/gone.txt` deleted, `new/dir/made.txt` made.
const LINES_AGENT: &str = r#"#!/bin/sh
set -eu
echo "$CASSIST_TASK" >> "$COUNT_DIR/calls"
for f in src/*.txt; do
    sed -i '1s/$/, as the agent wrote it/' "$f"
done
rm old/gone.txt
mkdir -p new/dir
echo made > new/dir/made.txt
printf '{"success": true, "summary": "changed"}\n' > "$CASSIST_RESULT_FILE"
"#;

/// The task of [`lines_project`]: no context, so the edits of the user
/// are outputs edited, never inputs changed.
const LINES_TASK: &str = r#"task "change" {
    goal "Change the first line of every file."
    scope {
        path "src/**"
        path "old/**"
        path "new/**"
    }
}
"#;

/// Files `src/NNN.txt` of [`lines_project`].
const LINE_FILES: usize = 4;

fn text_old(i: usize) -> String {
    format!("line 1 of {i:03}\nline 2\nline 3\nline 4\nline 5\n")
}

fn text_new(i: usize) -> String {
    format!("line 1 of {i:03}, as the agent wrote it\nline 2\nline 3\nline 4\nline 5\n")
}

/// A project of [`LINE_FILES`] five-line files, `old/gone.txt` and a file
/// of the user's the change does not touch, `docs/user.txt`, with the
/// task `change` and its counting agent.
fn lines_project() -> Project {
    let test = (0..LINE_FILES).fold(
        Test::trusted().tasks(LINES_TASK).file("old/gone.txt", "gone\n").file("docs/user.txt", "the user's own\n"),
        |t, i| t.file(&format!("src/{i:03}.txt"), text_old(i)),
    );
    let p = test.build();
    let count = p.out().join("count");
    std::fs::create_dir_all(&count).unwrap();
    let p = p.with_env("COUNT_DIR", count.to_str().unwrap());
    let script = p.out().join("lines.sh");
    write(&script, LINES_AGENT);
    let config = format!(
        "trust \"workspace-write\"\ntest #false\ndefaults {{\n    agent \"count\"\n}}\nagent \"count\" {{\n    command \"sh\" {:?}\n    pass-env \"COUNT_DIR\"\n}}\n",
        script.display().to_string()
    );
    p.file("cassist.kdl", config);
    p
}

/// Line `n` (from 1) of `text` set to `line`.
fn with_line(text: &str, n: usize, line: &str) -> String {
    let mut lines: Vec<&str> = text.lines().collect();
    lines[n - 1] = line;
    lines.join("\n") + "\n"
}

/// What the user does between the kill and the next command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Edits {
    /// Edits that merge with the change: the last line of a file it
    /// changes the first line of, a new file, a file of the user's it does
    /// not touch deleted.
    Merging,
    /// Those, and edits that conflict with it: the very line it changes in
    /// another file, a file it changes deleted, a file of the user's where
    /// it makes one.
    Conflicting,
}

const USERS_LINE_5: &str = "line 5, as the user saved it";
const USERS_LINE_1: &str = "line 1, as the user saved it";
const USERS_NOTES: &str = "the user's notes\n";
const USERS_MADE: &str = "the user's, where the change makes a file\n";

impl Edits {
    /// Saves the edits into the tree as it is now.
    fn make(self, root: &Path) {
        let edit = |rel: &str, n: usize, line: &str| {
            let now = std::fs::read_to_string(root.join(rel)).unwrap();
            std::fs::write(root.join(rel), with_line(&now, n, line)).unwrap();
        };
        edit("src/000.txt", 5, USERS_LINE_5);
        write(&root.join("notes/mine.txt"), USERS_NOTES);
        std::fs::remove_file(root.join("docs/user.txt")).unwrap();
        if self == Edits::Conflicting {
            edit("src/001.txt", 1, USERS_LINE_1);
            std::fs::remove_file(root.join("src/002.txt")).unwrap();
            write(&root.join("new/dir/made.txt"), USERS_MADE);
        }
    }

    /// Every path the change or the user touch, as the tree must hold it
    /// (`None`: absent) with the change in or out, and every edit of the
    /// user's in.
    fn expected(self, change_in: bool) -> Vec<(String, Option<String>)> {
        let src = |i: usize| if change_in { text_new(i) } else { text_old(i) };
        let mut tree: Vec<(String, Option<String>)> =
            (0..LINE_FILES).map(|i| (format!("src/{i:03}.txt"), Some(src(i)))).collect();
        tree[0].1 = Some(with_line(&src(0), 5, USERS_LINE_5));
        tree.push(("old/gone.txt".into(), (!change_in).then(|| "gone\n".into())));
        tree.push(("new/dir/made.txt".into(), change_in.then(|| "made\n".into())));
        tree.push(("notes/mine.txt".into(), Some(USERS_NOTES.into())));
        tree.push(("docs/user.txt".into(), None));
        if self == Edits::Conflicting {
            tree[1].1 = Some(with_line(&src(1), 1, USERS_LINE_1));
            tree[2].1 = None;
            tree.push(("new/dir/made.txt".into(), Some(USERS_MADE.into())));
        }
        // The last word on a path is the user's.
        let mut seen = std::collections::HashSet::new();
        let mut tree: Vec<_> = tree.into_iter().rev().filter(|(p, _)| seen.insert(p.clone())).collect();
        tree.reverse();
        tree
    }
}

/// The tree holds exactly `expected` on those paths, byte for byte, no
/// temp file anywhere, and no folder the change made is left empty.
#[track_caller]
fn holds(p: &Project, expected: &[(String, Option<String>)], when: &str) {
    for (rel, want) in expected {
        let got = std::fs::read(p.path().join(rel)).ok().map(|b| String::from_utf8(b).unwrap());
        assert_eq!(got.as_deref(), want.as_deref(), "{when}: {rel}");
    }
    if !p.path().join("new/dir").exists() {
        assert!(!p.path().join("new").exists(), "{when}: an empty new/ is left");
    }
    for e in walkdir::WalkDir::new(p.path()).into_iter().filter_entry(|e| e.file_name() != "store") {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy();
        assert!(!name.starts_with(".cassist-tmp-"), "{when}: temp file left: {}", e.path().display());
    }
}

/// Where a kill at `point` leaves the change once the next command
/// recovered, with `edits` saved in between: in or out.
fn change_in_after(point: &str, edits: Edits) -> bool {
    match point {
        // No journal yet: nothing of the change reached the tree.
        "flush-begin" | "flush-checked" => false,
        // The journal is gone: the change is all in, the edits came after.
        "flush-done" => true,
        // Journaled: completed with the edits merged, or turned back as a
        // whole when one conflicts.
        _ => edits == Edits::Merging,
    }
}

/// Kills `cassist run` at every hit of `point`, saves `edits`, lets the
/// next command recover, and checks the tree, the lock, and the runs
/// after.
fn every_hit_with_edits(point: &str, edits: Edits) {
    let mut n = 1;
    loop {
        let p = lines_project();
        let when = format!("{point}:{n}, {edits:?}");
        let out = p.run(&[]).env("CASSIST_FAILPOINT", format!("{point}:{n}")).any_status().exec();
        if std::os::unix::process::ExitStatusExt::signal(&out.status) != Some(9) {
            assert!(n > 1, "{point} was never hit:\n{}", out.transcript());
            out.assert_code(0);
            return;
        }
        let journaled = p.path().join(".cassist/journal").exists();
        assert_eq!(journaled, !matches!(point, "flush-begin" | "flush-checked" | "flush-done"), "{when}");
        edits.make(p.path());
        let change_in = change_in_after(point, edits);
        let expected = edits.expected(change_in);
        // The next command recovers.
        let (state, plan_out) = plan(&p);
        let when = format!("{when}, after the recovery");
        holds(&p, &expected, &when);
        assert!(!p.path().join(".cassist/journal").exists(), "{when}:\n{}", plan_out.transcript());
        if journaled {
            let said = if change_in { "completed the integration" } else { "your edits were kept" };
            assert!(plan_out.stderr.contains(said), "{when}: {said:?} not said:\n{}", plan_out.transcript());
        }
        let lock = cassist_core::lock::Lock::load(p.path()).unwrap();
        assert_eq!(lock.tasks.contains_key("change"), change_in, "{when}: the lock line\n{}", plan_out.transcript());
        consistent(&p, &when);
        if edits == Edits::Conflicting && !change_in {
            // The stored change no longer merges with the user's edits: the
            // plan's dry run of the replay says so, and the agent runs.
            assert_eq!(state, "run", "{when}\n{}", plan_out.transcript());
            let said = p.cassist(&["plan"]).exec();
            assert!(said.transcript().contains("replay would conflict"), "{when}\n{}", said.transcript());
        } else {
            assert!(["up-to-date", "replay"].contains(&state.as_str()), "{when}: {state}\n{}", plan_out.transcript());
        }
        later_runs_end_consistent(&p, &when);
        n += 1;
    }
}

/// The run after a recovery: exit 0 with the task replayed, up-to-date,
/// or (where replaying would conflict with an edit) run and passed; the
/// agent runs again only then; the files the change does not touch are
/// as the user left them; and the task is up-to-date afterwards.
#[track_caller]
fn later_runs_end_consistent(p: &Project, when: &str) {
    let out = p.run(&[]).exec();
    let state = out.states()["change"].clone();
    let calls_expected = if state == "passed" { 2 } else { 1 };
    assert!(["replayed", "up-to-date", "passed"].contains(&state.as_str()), "{when}: {state}\n{}", out.transcript());
    assert_eq!(calls(p), calls_expected, "{when}: agent calls ({state})\n{}", out.transcript());
    let users: Vec<(String, Option<String>)> =
        vec![("notes/mine.txt".into(), Some(USERS_NOTES.into())), ("docs/user.txt".into(), None)];
    holds(p, &users, &format!("{when}, the next run"));
    consistent(p, &format!("{when}, the next run"));
    let (state, out) = plan(p);
    assert_eq!(state, "up-to-date", "{when}, after the next run:\n{}", out.transcript());
}

/// Every step of a flush, killed, then edits that merge with the change.
#[test]
fn killed_at_any_step_of_a_flush_then_edits_that_merge_are_all_kept() {
    for point in ["flush-begin", "flush-checked", "flush-journal", "flush-temp", "flush-file", "flush-applied"] {
        every_hit_with_edits(point, Edits::Merging);
    }
}

#[test]
fn killed_once_the_files_are_written_then_edits_that_merge_are_all_kept() {
    for point in ["flush-lock", "flush-done"] {
        every_hit_with_edits(point, Edits::Merging);
    }
}

/// Every step of a flush, killed, then edits that conflict with the
/// change: a journaled change is turned back as a whole, every edit kept.
#[test]
fn killed_at_any_step_of_a_flush_then_conflicting_edits_turn_the_change_back() {
    for point in ["flush-begin", "flush-checked", "flush-journal", "flush-temp", "flush-file", "flush-applied"] {
        every_hit_with_edits(point, Edits::Conflicting);
    }
}

/// Killed after the lock line was written: the conflict takes it out
/// again.
#[test]
fn killed_once_the_files_are_written_then_conflicting_edits_turn_the_change_back() {
    for point in ["flush-lock", "flush-done"] {
        every_hit_with_edits(point, Edits::Conflicting);
    }
}

/// Killed half-way through a flush, edits saved, then the recovery
/// itself killed at every step: the command after that recovers the same
/// way, every edit kept.
#[test]
fn killed_while_recovering_with_edits_the_next_command_keeps_them_all() {
    for edits in [Edits::Merging, Edits::Conflicting] {
        for point in ["recover-temp", "recover-file"] {
            let mut n = 1;
            loop {
                let p = lines_project();
                let out = p.run(&[]).env("CASSIST_FAILPOINT", "flush-file:3").any_status().exec();
                assert_eq!(std::os::unix::process::ExitStatusExt::signal(&out.status), Some(9), "{}", out.transcript());
                edits.make(p.path());
                let failpoint = format!("{point}:{n}");
                let when = format!("{failpoint}, {edits:?}");
                let out = p.cassist(&["plan"]).env("CASSIST_FAILPOINT", &failpoint).any_status().exec();
                let killed = std::os::unix::process::ExitStatusExt::signal(&out.status) == Some(9);
                let (state, plan_out) = plan(&p);
                let expected = edits.expected(edits == Edits::Merging);
                holds(&p, &expected, &format!("{when}, recovered"));
                assert!(!p.path().join(".cassist/journal").exists(), "{when}:\n{}", plan_out.transcript());
                let lock = cassist_core::lock::Lock::load(p.path()).unwrap();
                assert_eq!(lock.tasks.contains_key("change"), edits == Edits::Merging, "{when}");
                consistent(&p, &when);
                // Turned back: the stored change no longer merges with the
                // user's edits, and the plan's dry run says so.
                let want: &[&str] = if edits == Edits::Merging { &["up-to-date", "replay"] } else { &["run"] };
                assert!(want.contains(&state.as_str()), "{when}: {state}");
                if !killed {
                    assert!(n > 1, "{point} was never hit:\n{}", out.transcript());
                    later_runs_end_consistent(&p, &when);
                    break;
                }
                n += 1;
            }
        }
    }
}
