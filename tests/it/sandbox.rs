//! The sandbox of every command of a task (SPEC 6; `src/sandbox/`,
//! `src/runner/jail.rs`), tried through `cassist run` the way an attacker
//! would: a fake agent, setup, acceptance, test or build command
//! (`fixtures/agents/jail-probe.py`) tries each way out and prints what
//! happened; the tests check that every way was refused and that nothing
//! was lost (the user's tree, HOME, the run's outcome).
//!
//! Cases that apply to both workspace modes are written once as `fn
//! case(env)` and run twice ([`in_both_modes!`]): overlay (with
//! namespaces) and copy (`CASSIST_WORKSPACE=copy`, no namespaces).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::support::{
    Project, Sandbox, Test, assert_same_tree, in_both_modes, processes_with, sandbox_or_skip, snapshot, strings,
    unique_marker,
};

/// The probe (see its doc), copied where the commands of `p`'s tasks see
/// it.
fn probe(p: &Project) -> String {
    p.fixture_copy("agents/jail-probe.py").display().to_string()
}

/// `python3 PROBE ARGS` as a shell command (setup, acceptance, test,
/// build) of `p`, with `env` set for it (those commands get no pass-env).
fn probe_cmd(p: &Project, env: &[(&str, &str)], args: &str) -> String {
    let vars: String = env.iter().map(|(k, v)| format!("{k}={v:?} ")).collect();
    format!("{vars}python3 {:?} {args}", probe(p))
}

/// The variables the probe agent is passed.
const PROBE_ENV: &[&str] = &["PROBE_PID_FILE", "PROBE_MARKER", "PROBE_EDIT", "PROBE_OUT"];

/// A trusted project (outside the temp folders, with `src/a.txt`) whose
/// agent `probe` runs the probe with `agent_args` (the agent's program
/// stays visible wherever it is); `config` goes into `cassist.kdl` after
/// the trust.
fn project(config: &str, agent_args: &[&str], tasks: &str) -> Project {
    Test::new()
        .outside_tmp()
        .config(&format!("trust \"workspace-write\"\n{config}\n"))
        .agent("probe", "jail-probe.py", agent_args, PROBE_ENV)
        .tasks(tasks)
        .file("src/a.txt", "a\n")
        .git()
        .build()
}

/// A task `name` of the probe agent: `body` goes inside its block.
fn task(name: &str, body: &str) -> String {
    format!("task {name:?} {{\n    goal \"Probe.\"\n    agent \"probe\"\n    max-iterations 1\n{body}}}\n")
}

/// A code task that may change `src/**`, with acceptance commands.
fn code_task(name: &str, acceptance: &[&str]) -> String {
    let runs: String = acceptance.iter().map(|a| format!("        run {a:?}\n")).collect();
    let acceptance = if runs.is_empty() { String::new() } else { format!("    acceptance {{\n{runs}    }}\n") };
    task(name, &format!("    scope {{\n        path \"src/**\"\n    }}\n{acceptance}"))
}

/// A read-only task.
fn explore_task(name: &str) -> String {
    task(name, "    kind \"explore\"\n")
}

/// Adds `config` to `p`'s `cassist.kdl` after the trust, `tasks` as its
/// tasks, and commits: for what names the probe's copy, which exists
/// once the project does.
fn configure(p: &Project, config: &str, tasks: &str) {
    p.edit("cassist.kdl", "trust \"workspace-write\"\n", &format!("trust \"workspace-write\"\n{config}"));
    p.file("tasks/t.kdl", tasks);
    p.commit_all();
}

/// The probe's lines of `text`: probe → verdict (`ALLOWED ...`,
/// `refused ...`).
fn verdicts(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once(": "))
        .filter(|(_, v)| v.starts_with("ALLOWED") || v.starts_with("refused"))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Every probe of `text` whose name starts with one of `prefixes` was
/// refused, and each prefix was tried at least once.
#[track_caller]
fn assert_refused(text: &str, prefixes: &[&str], what: &str) {
    let v = verdicts(text);
    for prefix in prefixes {
        let tried: Vec<_> = v.iter().filter(|(k, _)| k.starts_with(prefix)).collect();
        assert!(!tried.is_empty(), "{what}: `{prefix}` was not tried:\n{text}");
        for (k, verdict) in tried {
            assert!(verdict.starts_with("refused"), "{what}: `{k}` got through ({verdict}):\n{text}");
        }
    }
}

/// The line of `text` that starts with `prefix`.
#[track_caller]
fn line<'a>(text: &'a str, prefix: &str) -> &'a str {
    text.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no `{prefix}` line in:\n{text}"))
}

fn is_overlay(env: &[(&str, &str)]) -> bool {
    env.is_empty()
}

/// Whether the case can run here: overlay cases need the namespaces, and
/// every case needs Landlock (each is skipped, saying so, or fails under
/// `CASSIST_REQUIRE_SANDBOX=1`).
fn available(env: &[(&str, &str)]) -> bool {
    sandbox_or_skip(Sandbox::Landlock) && (!is_overlay(env) || sandbox_or_skip(Sandbox::Overlay))
}

// ---------------------------------------------------------------------------
// Every command: own session, no terminal, fds 0-2, no capabilities

/// What every command of a task probes about itself.
const SELF: &str = "status fds tty tiocsti pts-read";

/// Setup, agent, acceptance, project test and build: each in its own
/// session without a controlling terminal, even when cassist runs on one
/// (so nothing can be typed into the user's shell with TIOCSTI), with fds
/// 0-2 only (no pipe of the wrapper's: the init's report pipe is
/// close-on-exec), no capability and `no_new_privs`.
fn every_command_is_confined(env: &[(&str, &str)]) {
    if !available(env) {
        return;
    }
    let args: Vec<&str> = SELF.split(' ').collect();
    let p = project("", &args, "");
    let cmd = probe_cmd(&p, &[], SELF);
    configure(&p, &format!("setup {cmd:?}\ntest {cmd:?}\nbuild {cmd:?}\n"), &code_task("t", &[&cmd]));
    let done = p.run(&[]).env("PROBE_EDIT", "src/a.txt").envs(env).on_tty();
    assert_eq!(done.task("t")["state"], "passed", "{}", done.transcript());
    assert_eq!(p.read("src/a.txt"), "probed\n");
    for (what, log) in [
        ("setup", "setup.log"),
        ("agent", "transcript-1.log"),
        ("acceptance", "acceptance-1-1.log"),
        ("project test", "acceptance-1-2.log"),
        ("build", "build.log"),
    ] {
        let text = p.record("t", log);
        assert_refused(&text, &["tty", "tiocsti", "pts-read"], what);
        let status = line(&text, "status: ");
        assert!(status.contains("CapEff=0000000000000000"), "{what}: {status}");
        assert!(status.contains("CapBnd=0000000000000000"), "{what}: {status}");
        assert!(status.contains("NoNewPrivs=1"), "{what}: {status}");
        assert!(status.ends_with("tty_nr=0"), "{what} has a controlling terminal: {status}");
        assert_eq!(line(&text, "fds: "), "fds: 0 1 2", "{what}");
    }
}

in_both_modes!(every_command_is_confined: every_command_is_confined_with_namespaces, every_command_is_confined_in_copy_mode);

/// A `full` agent is unconfined (it may write anywhere, keeps what
/// capabilities it has: SPEC 6), but still runs through the wrapper: its
/// own session without a controlling terminal, and with namespaces its own
/// PID namespace and the repository's `.git` read-only.
fn a_full_agent_still_has_its_own_session(env: &[(&str, &str)]) {
    if !available(env) {
        return;
    }
    let outside = crate::support::outside_temp_dir().join(unique_marker("full"));
    let p = Test::new()
        .outside_tmp()
        .config("trust \"full\"\ntest #false\n")
        .agent(
            "probe",
            "jail-probe.py",
            &["status", "tty", "proc", "git", "write", outside.to_str().unwrap()],
            PROBE_ENV,
        )
        .tasks(&task("f", "    sandbox \"full\"\n"))
        .file("src/a.txt", "a\n")
        .git()
        .build();
    let done = p.run(&[]).envs(env).on_tty();
    assert_eq!(done.task("f")["state"], "passed", "{}", done.transcript());
    let text = p.record("f", "transcript-1.log");
    // (No TIOCSTI tried here: a full agent keeps its capabilities and sees
    // the machine's /dev/pts, and as root CAP_SYS_ADMIN may push into any
    // terminal: the probe would type into every terminal of the machine,
    // other tests' among them.)
    assert_refused(&text, &["tty"], "full agent");
    assert!(line(&text, "status: ").ends_with("tty_nr=0"), "{text}");
    assert_eq!(verdicts(&text)[&format!("write {}", outside.display())], "ALLOWED", "full writes anywhere");
    let _ = std::fs::remove_file(&outside);
    if is_overlay(env) {
        assert_refused(&text, &["git"], "full agent");
        let proc = line(&text, "proc: ");
        let count: usize = proc["proc: ".len()..].split(' ').next().unwrap().parse().unwrap();
        assert!(count <= 3, "{proc}");
    }
}

in_both_modes!(a_full_agent_still_has_its_own_session: a_full_agent_still_has_its_own_session_with_namespaces, a_full_agent_still_has_its_own_session_in_copy_mode);

/// What a command needs under a folder the sandbox covers stays visible,
/// read-only: a project under `/tmp` (its workspace), the agent's program
/// and the script its command line names there, a PATH entry there. The
/// agent still has its own, empty `/tmp` around them, and may not write
/// them.
#[test]
fn what_a_command_needs_under_tmp_stays_visible() {
    if !available(&[]) {
        return;
    }
    let p = Test::new().under_tmp().config("trust \"workspace-write\"\ntest #false\n").build();
    let tmp = p.tmp().canonicalize().unwrap();
    crate::support::write_executable(&tmp.join("bin/tool"), "#!/bin/sh\necho tool ran\n");
    crate::support::write(
        &tmp.join("agent.sh"),
        "tool; ls /tmp; echo x > \"$0\" || echo script read-only; echo done > src/a.txt\n",
    );
    p.file(
        "cassist.kdl",
        format!(
            "trust \"workspace-write\"\ntest #false\nagent \"a\" {{\n    command \"/bin/sh\" {:?}\n}}\n",
            tmp.join("agent.sh").display().to_string()
        ),
    );
    p.file("tasks/t.kdl", code_task("t", &[]).replace("\"probe\"", "\"a\""));
    p.file("src/a.txt", "a\n");
    let unrelated = tempfile::Builder::new().prefix("cassist-test-unrelated-").tempfile_in("/tmp").unwrap();
    let done = p.run(&[]).path_first(&[&tmp.join("bin")]).exec();
    assert_eq!(done.task("t")["state"], "passed", "{}", done.transcript());
    let text = p.record("t", "transcript-1.log");
    let unrelated = unrelated.path().file_name().unwrap().to_string_lossy().into_owned();
    assert!(!text.contains(&unrelated), "the machine's /tmp was seen: {text}");
    assert!(text.contains("tool ran") && text.contains("script read-only"), "{text}");
    // Its /tmp holds only the mount points of what it keeps.
    let first = p.path().strip_prefix("/tmp").unwrap().components().next().unwrap();
    assert!(text.contains(&first.as_os_str().to_string_lossy().into_owned()), "{text}");
    assert_eq!(p.read("src/a.txt"), "done\n");
    assert_eq!(std::fs::read_to_string(tmp.join("agent.sh")).unwrap().lines().count(), 1, "the script was written");
}

// ---------------------------------------------------------------------------
// No way out of the workspace

/// An acceptance command runs the agent's code: it may not write HOME,
/// nor unmount (or mount over) its workspace to reach the user's tree;
/// what it writes stays out of the change and out of the tree.
fn acceptance_cannot_get_out(env: &[(&str, &str)]) {
    if !available(env) {
        return;
    }
    let p = project("test #false", &[], "");
    let attack = format!(
        "{}; umount -l \"$PWD\"; echo pwned > pwned.txt; echo pwned > src/pwned.txt; true",
        probe_cmd(&p, &[], "write-home umount mount")
    );
    configure(&p, "", &code_task("t", &[&attack]));
    let before = p.tree();
    let done = p.run(&[]).env("PROBE_EDIT", "src/a.txt").envs(env).exec();
    let t = done.task("t");
    assert_eq!(t["state"], "passed", "{}", done.transcript());
    assert_eq!(t["changed_files"], serde_json::json!(["src/a.txt"]), "{t}");
    let log = p.record("t", "acceptance-1-1.log");
    assert_refused(&log, &["write-home", "umount", "mount"], "acceptance");
    assert!(!p.home().join(".bashrc").exists(), "acceptance wrote HOME");
    // Only the agent's change reached the tree.
    let mut expected = before;
    expected.insert("src/a.txt".into(), b"probed\n".to_vec());
    let mut after = p.tree();
    after.remove(Path::new("cassist.lock"));
    assert_same_tree(&after, &expected, "the tree holds more than the agent's change");
}

in_both_modes!(acceptance_cannot_get_out: acceptance_cannot_get_out_with_namespaces, acceptance_cannot_get_out_in_copy_mode);

/// The agent may not write HOME, unmount or mount over its workspace, nor
/// write into the repository's `.git` (read-only in its view; the copy
/// has none).
fn agent_cannot_get_out(env: &[(&str, &str)]) {
    if !available(env) {
        return;
    }
    let p = project("test #false", &["write-home", "umount", "mount", "git"], &code_task("t", &[]));
    let git_before = snapshot(&p.path().join(".git"), &[]);
    let done = p.run(&[]).env("PROBE_EDIT", "src/a.txt").envs(env).exec();
    assert_eq!(done.task("t")["state"], "passed", "{}", done.transcript());
    let text = p.record("t", "transcript-1.log");
    assert_refused(&text, &["write-home", "umount", "mount", "git"], "agent");
    assert!(!p.home().join(".bashrc").exists(), "the agent wrote HOME");
    assert_same_tree(&snapshot(&p.path().join(".git"), &[]), &git_before, "the agent changed .git");
}

in_both_modes!(agent_cannot_get_out: agent_cannot_get_out_with_namespaces, agent_cannot_get_out_in_copy_mode);

/// cassist's own folders: the project's `.cassist/` (records, store) is
/// out of sight of every command, and the repository's `.git` read-only
/// (no hook planted), by its workspace path or the project's own; the
/// `build` command, run after integration on a throw-away layer over the
/// user's tree, may write that layer but nothing outside it (not HOME),
/// and nothing it writes reaches the user's tree.
fn cassists_own_folders_are_out_of_reach(env: &[(&str, &str)]) {
    if !available(env) {
        return;
    }
    let p = project("test #false", &[], "");
    let root = p.path().display().to_string();
    let outside =
        crate::support::outside_temp_dir().join(format!("{}-outside", p.path().file_name().unwrap().to_string_lossy()));
    let own =
        format!("read {root}/.cassist/.gitignore write {root}/.cassist/planted write {root}/.git/hooks/pre-commit git");
    let build = format!(
        "{}; echo built > built.txt && cat built.txt",
        probe_cmd(&p, &[], &format!("write-home write {}", outside.display()))
    );
    p.file(
        "cassist.kdl",
        format!(
            "trust \"workspace-write\"\ntest #false\nbuild {build:?}\n{}",
            crate::support::sh_agent_block(
                "probe",
                &format!("python3 {:?} {own} && echo probed > src/a.txt", probe(&p))
            )
        ),
    );
    p.file("tasks/t.kdl", code_task("t", &[&probe_cmd(&p, &[], &own)]));
    p.commit_all();
    let git_before = snapshot(&p.path().join(".git"), &[]);
    let done = p.run(&[]).envs(env).exec();
    assert_eq!(done.task("t")["state"], "passed", "{}", done.transcript());
    for (what, log) in [("agent", "transcript-1.log"), ("acceptance", "acceptance-1-1.log")] {
        let text = p.record("t", log);
        assert_refused(&text, &["read /", "write /", "git"], what);
    }
    assert_refused(&p.record("t", "build.log"), &["write-home", "write /"], "build");
    assert!(!p.exists(".cassist/planted") && !p.exists(".git/hooks/pre-commit") && !outside.exists());
    assert_same_tree(&snapshot(&p.path().join(".git"), &[]), &git_before, ".git changed");
    // The build wrote its own layer, which was thrown away.
    assert!(p.record("t", "build.log").lines().any(|l| l == "built"), "the build could not write its layer");
    assert!(!p.exists("built.txt"), "what the build wrote reached the user's tree");
}

in_both_modes!(cassists_own_folders_are_out_of_reach: cassists_own_folders_are_out_of_reach_with_namespaces, cassists_own_folders_are_out_of_reach_in_copy_mode);

// ---------------------------------------------------------------------------
// Devices

/// No block device can be opened for writing (with namespaces there is
/// none to open: `/dev` holds the safe nodes and private ptys only, and is
/// read-only), and no terminal of the machine can be read.
fn no_device_but_the_safe_ones(env: &[(&str, &str)]) {
    if !available(env) {
        return;
    }
    let p = project("test #false", &["blockdev", "pts-read", "tty", "dev"], &explore_task("look"));
    let done = p.run(&[]).envs(env).exec();
    assert_eq!(done.task("look")["state"], "passed", "{}", done.transcript());
    let text = p.record("look", "transcript-1.log");
    assert_refused(&text, &["blockdev /dev/loop0", "blockdev create", "pts-read", "tty"], "agent");
    assert_refused(&text, &["blockdev"], "agent");
    let dev = verdicts(&text)["dev"].clone();
    if is_overlay(env) {
        assert_eq!(dev, "ALLOWED fd full null ptmx pts random shm stderr stdin stdout urandom zero");
    } else {
        // Copy mode: the machine's /dev, which it may not even list.
        assert!(dev.starts_with("refused"), "{dev}");
    }
}

in_both_modes!(no_device_but_the_safe_ones: no_device_but_the_safe_ones_with_namespaces, no_device_but_the_safe_ones_in_copy_mode);

// ---------------------------------------------------------------------------
// Processes

/// A read-only agent cannot signal cassist (nor, in copy mode, the wrapper
/// that supervises it; with namespaces, its init): the run ends as if
/// nothing was tried. With namespaces, `/proc` shows the task's own
/// processes only.
fn signals_never_reach_cassist(env: &[(&str, &str)]) {
    if !available(env) {
        return;
    }
    let p = project("test #false", &["signal", "proc"], &explore_task("look"));
    let pid_file = p.out().join("cassist.pid");
    let run = p.run(&[]).env("PROBE_PID_FILE", &pid_file).envs(env).spawn();
    std::fs::write(&pid_file, run.pid().to_string()).unwrap();
    let done = run.finish();
    assert_eq!(done.task("look")["state"], "passed", "{}", done.transcript());
    let text = p.record("look", "transcript-1.log");
    assert_refused(&text, &["signal"], "agent");
    if is_overlay(env) {
        assert!(verdicts(&text).contains_key("signal init"), "{text}");
        let proc = line(&text, "proc: ");
        assert!(proc.ends_with("cassist visible=False"), "{proc}");
        let count: usize = proc["proc: ".len()..].split(' ').next().unwrap().parse().unwrap();
        assert!(count <= 3, "{proc}");
    } else {
        assert!(verdicts(&text).contains_key("signal parent"), "{text}");
    }
}

in_both_modes!(signals_never_reach_cassist: signals_never_reach_cassist_with_namespaces, signals_never_reach_cassist_in_copy_mode);

/// A double-forked `setsid` daemon left by setup, the agent or an
/// acceptance command does not outlive its command.
fn no_process_outlives_its_command(env: &[(&str, &str)]) {
    if !available(env) {
        return;
    }
    let marker = unique_marker("daemon");
    let p = project("test #false", &["daemon"], "");
    let daemon = probe_cmd(&p, &[("PROBE_MARKER", &marker)], "daemon");
    configure(&p, &format!("setup {daemon:?}\n"), &code_task("t", &[&daemon]));
    let done = p.run(&[]).env("PROBE_MARKER", &marker).env("PROBE_EDIT", "src/a.txt").envs(env).exec();
    let left = processes_with(&marker);
    for (pid, _) in &left {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), nix::sys::signal::Signal::SIGKILL);
    }
    assert_eq!(done.task("t")["state"], "passed", "{}", done.transcript());
    for log in ["setup.log", "transcript-1.log", "acceptance-1-1.log"] {
        assert!(p.record("t", log).contains("daemon: left behind"), "{log}");
    }
    assert!(left.is_empty(), "processes outlived their command: {left:?}");
}

in_both_modes!(no_process_outlives_its_command: no_process_outlives_its_command_with_namespaces, no_process_outlives_its_command_in_copy_mode);

/// An agent deaf to SIGTERM that left a `setsid` daemon: when its
/// timeout stops it (TERM, the grace, then KILL), when the run is
/// interrupted (Ctrl-C) and when cassist itself is killed (SIGKILL:
/// nothing of cassist runs any more), no process of the task is left.
fn nothing_outlives_a_stopped_or_killed_run(env: &[(&str, &str)]) {
    use nix::sys::signal::Signal;
    if !available(env) {
        return;
    }
    for stop in [None, Some(Signal::SIGINT), Some(Signal::SIGKILL)] {
        let marker = unique_marker("stopped");
        let p = Test::trusted()
            .tasks("task \"t\" {\n    goal \"Hang.\"\n    agent \"deaf\"\n    timeout \"1s\"\n}\n")
            .file("src/a.txt", "a\n")
            .build();
        // Deaf on the whole task only: the parts it is split into after
        // its timeout end at once.
        let agent = format!(
            "test -n \"$CASSIST_PART\" && exit 0; python3 {:?} daemon && touch \"$PROBE_OUT/started\" && exec python3 -c \
             'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)' \"$PROBE_MARKER\"",
            probe(&p)
        );
        let block = crate::support::sh_agent_block("deaf", &agent)
            .replace("\n}\n", "\n    pass-env \"PROBE_OUT\" \"PROBE_MARKER\"\n}\n");
        p.file("cassist.kdl", p.read("cassist.kdl") + &block);
        let out = p.out();
        let mut run = p.run(&[]).env("PROBE_OUT", &out).env("PROBE_MARKER", &marker).envs(env).any_status().spawn();
        run.wait_for_file(&out.join("started"));
        crate::support::wait_until(std::time::Duration::from_secs(10), "the agent and its daemon run", || {
            processes_with(&marker).len() >= 2
        });
        if let Some(sig) = stop {
            crate::support::signal(run.pid(), sig);
        }
        let done = run.finish_within(std::time::Duration::from_secs(60));
        if stop.is_none() {
            assert!(done.stderr.contains("agent timed out"), "{}", done.transcript());
        }
        crate::support::wait_until(std::time::Duration::from_secs(10), "no process of the task left", || {
            processes_with(&marker).is_empty()
        });
    }
}

in_both_modes!(nothing_outlives_a_stopped_or_killed_run: nothing_outlives_a_stopped_or_killed_run_with_namespaces, nothing_outlives_a_stopped_or_killed_run_in_copy_mode);

// ---------------------------------------------------------------------------
// Tasks side by side

/// Two tasks at once (`-j 2`): `a` writes `/tmp` and tells where its
/// prompt is; `b`, running meanwhile, tries to see `a`'s `/tmp`, read its
/// prompt and plant a file next to it; `b`'s acceptance tries the prompt
/// too. With namespaces every task has its own `/tmp` and sees no other
/// task's folders; in copy mode `/tmp` is not writable, and other tasks'
/// folders are neither readable nor writable.
fn tasks_share_nothing(env: &[(&str, &str)]) {
    if !available(env) {
        return;
    }
    let p = project("test #false", &[], "");
    let out = p.out();
    let out = out.to_str().unwrap();
    let a = "tmp-write tell-io mark a-ready await b-done";
    let b = "await a-ready tmp-list read-told a write-told a tmp-write mark b-done";
    let acceptance = probe_cmd(&p, &[("PROBE_OUT", out)], "read-told a");
    let agent = |name: &str, args: &str| {
        let argv: Vec<String> = [probe(&p)].into_iter().chain(args.split(' ').map(str::to_owned)).collect();
        let argv: Vec<String> = argv.iter().map(|a| format!("{a:?}")).collect();
        format!("agent {name:?} {{\n    command {}\n    pass-env \"PROBE_OUT\" \"PROBE_EDIT\"\n}}\n", argv.join(" "))
    };
    p.file("cassist.kdl", format!("trust \"workspace-write\"\ntest #false\n{}{}", agent("pa", a), agent("pb", b)));
    // Scoped apart, so that they run at the same time.
    let tasks = code_task("a", &[]).replace("\"probe\"", "\"pa\"").replace("src/**", "src/a.txt")
        + &code_task("b", &[&acceptance]).replace("\"probe\"", "\"pb\"").replace("src/**", "src/b.txt");
    p.file("tasks/t.kdl", tasks);
    p.commit_all();
    let done = p.run(&["-j", "2"]).env("PROBE_OUT", out).env("PROBE_EDIT", "src/{task}.txt").envs(env).exec();
    assert_eq!(done.states(), crate::support::map(&[("a", "passed"), ("b", "passed")]), "{}", done.transcript());
    let a_text = p.record("a", "transcript-1.log");
    let b_text = p.record("b", "transcript-1.log");
    assert!(!b_text.contains("timed out") && !a_text.contains("timed out"), "not side by side:\n{a_text}\n{b_text}");
    assert_refused(&b_text, &["read-told a", "write-told a"], "b");
    assert_refused(&p.record("b", "acceptance-1-1.log"), &["read-told a"], "b's acceptance");
    let tmp = &verdicts(&b_text)["tmp-list"];
    if is_overlay(env) {
        assert_eq!(verdicts(&a_text)["tmp-write"], "ALLOWED", "its own /tmp");
        assert!(!tmp.contains("probe-a"), "b saw a's /tmp: {tmp}");
    } else {
        assert_refused(&a_text, &["tmp-write"], "a");
        assert!(tmp.starts_with("refused"), "{tmp}");
    }
    assert!(!Path::new("/tmp/probe-a").exists() && !Path::new("/tmp/probe-b").exists());
    assert_eq!(p.read("src/a.txt"), "probed\n");
    assert_eq!(p.read("src/b.txt"), "probed\n");
    let planted: Vec<PathBuf> = crate::support::workspaces_in(p.tmp());
    assert!(planted.iter().all(|w| !w.join("io/planted").exists()), "{planted:?}");
}

in_both_modes!(tasks_share_nothing: tasks_share_nothing_with_namespaces, tasks_share_nothing_in_copy_mode);

// ---------------------------------------------------------------------------
// Layers: what setup and acceptance write is never the agent's change

/// SPEC 3.6 (the Python case of the issue): a project without
/// `__pycache__` in `.gitignore`; attempt 1 fails acceptance, whose test
/// run writes `__pycache__`; attempt 2 is right. The task passes with the
/// agent's change only: the test runner's files are in no change, no
/// attempt and no tree.
fn acceptance_by_products_are_not_the_agents(env: &[(&str, &str)]) {
    if !available(env) {
        return;
    }
    let agent = "if grep -q '# Review feedback' \"$CASSIST_PROMPT_FILE\"; then op=+; else op=-; fi; \
                 printf 'def add(a, b):\\n    return a %s b\\n' \"$op\" > src/calc.py; \
                 ls -a src tests > \"$HOME/.cache/cassist-test-out/seen-$CASSIST_ATTEMPT\"";
    let task = "task \"fix\" {\n    goal \"Make add() add.\"\n    agent \"a\"\n    max-iterations 3\n    scope {\n        path \"src/**\"\n    }\n    acceptance {\n        run \"python3 -m unittest discover -s tests -t .; s=$?; ls src; exit $s\"\n    }\n}\n";
    let p = Test::trusted()
        .sh_agent("a", agent)
        .tasks(task)
        .file(".gitignore", ".cassist/\n")
        .file("src/__init__.py", "")
        .file("src/calc.py", "def add(a, b):\n    return 0\n")
        .file("tests/__init__.py", "")
        .file("tests/test_calc.py", "import unittest\nfrom src.calc import add\n\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n")
        .git()
        .build();
    let out = p.out();
    let done = p.run(&[]).envs(env).exec();
    let t = done.task("fix");
    assert_eq!(t["state"], "passed", "{}", done.transcript());
    assert_eq!(t["attempts"], 2, "{t}");
    assert_eq!(strings(&t["changed_files"]), ["src/calc.py"], "{t}");
    assert!(p.read("src/calc.py").contains("a + b"));
    // The second attempt did not see the first one's test run.
    let seen = std::fs::read_to_string(out.join("seen-2")).unwrap();
    assert!(!seen.contains("__pycache__"), "attempt 2 saw: {seen}");
    // Its test run did write them.
    let log = p.record("fix", "acceptance-1-1.log");
    assert!(log.contains("FAILED") && log.contains("__pycache__"), "{log}");
    // Nor the tree, nor what is recorded.
    let tree = p.tree();
    assert!(tree.keys().all(|k| !k.to_string_lossy().contains("__pycache__")), "{:?}", tree.keys());
    assert!(!p.record("fix", "patch.diff").contains("__pycache__"));
}

in_both_modes!(acceptance_by_products_are_not_the_agents: acceptance_by_products_are_not_the_agents_with_namespaces, acceptance_by_products_are_not_the_agents_in_copy_mode);

/// What an acceptance command writes in scope, even, is thrown away after
/// its round: attempt 1's acceptance leaves `src/by-acceptance.txt` and
/// fails; the agent's next attempt does not see it, and the acceptance of
/// attempt 2 (which fails if the file is there) passes. What setup makes
/// is seen by the agent and acceptance but is not part of the change.
fn acceptance_writes_are_thrown_away(env: &[(&str, &str)]) {
    if !available(env) {
        return;
    }
    let agent = "test -e src/prepared.txt || exit 9; \
                 if [ -e src/by-acceptance.txt ]; then echo saw > src/leak.txt; fi; \
                 if [ \"$CASSIST_ATTEMPT\" = 2 ]; then echo ok > src/ok.txt; else echo wip > src/wip.txt; fi";
    let check = "test -e src/prepared.txt && test ! -e src/by-acceptance.txt && test -e src/ok.txt \
                 || { echo made > src/by-acceptance.txt; echo not yet; exit 1; }";
    let task = format!(
        "task \"t\" {{\n    goal \"Write ok.\"\n    agent \"a\"\n    max-iterations 2\n    scope {{\n        path \"src/**\"\n    }}\n    acceptance {{\n        run {check:?}\n    }}\n}}\n"
    );
    let p = Test::trusted()
        .kdl("setup \"echo setup > src/prepared.txt\"\n")
        .sh_agent("a", agent)
        .tasks(&task)
        .file("src/a.txt", "a\n")
        .git()
        .build();
    let done = p.run(&[]).envs(env).exec();
    let t = done.task("t");
    assert_eq!(t["state"], "passed", "{}", done.transcript());
    assert_eq!(strings(&t["changed_files"]), ["src/ok.txt", "src/wip.txt"], "{t}");
    for gone in ["src/by-acceptance.txt", "src/leak.txt", "src/prepared.txt"] {
        assert!(!p.exists(gone), "{gone} reached the tree");
    }
}

in_both_modes!(acceptance_writes_are_thrown_away: acceptance_writes_are_thrown_away_with_namespaces, acceptance_writes_are_thrown_away_in_copy_mode);

// ---------------------------------------------------------------------------
// Copy mode says what it lacks

/// A run in copy mode says once, before anything runs, which guarantees
/// its commands go without.
#[test]
fn copy_mode_says_once_what_it_lacks() {
    let p = project("test #false", &[], &format!("{}{}", explore_task("one"), explore_task("two")));
    let done = p.run(&[]).envs(crate::support::COPY).exec();
    let note = "note: CASSIST_WORKSPACE=copy; each task works on a copy of the project instead, and its commands go \
                without what namespaces give: a private /tmp, /var/tmp and /dev, a PID namespace of their own (they \
                see every process of the machine), a read-only .git, ptys, and a copy-on-write view of the agents' \
                state folders (what an agent writes in ~/.claude, ~/.codex, ~/.gemini, ~/.factory or ~/.cache stays \
                there), and a network of their own: they reach any host, the machine's loopback services included, \
                and an agent holds its API key itself\n";
    assert_eq!(done.stderr.matches(note).count(), 1, "{}", done.stderr);
    assert!(done.stderr.starts_with(note), "said first: {}", done.stderr);
    // Not with namespaces.
    if sandbox_or_skip(Sandbox::Overlay) {
        let done = p.run(&[]).exec();
        assert!(!done.stderr.contains("note:"), "{}", done.stderr);
    }
}

/// The overlay probe runs once: a run that found it working remembers it
/// (`.cassist/cache/sandbox-probe`, keyed by the binary, the kernel and
/// what allows user namespaces); a key that does not match probes again.
#[test]
fn a_probe_that_worked_is_remembered() {
    if !sandbox_or_skip(Sandbox::Overlay) {
        return;
    }
    let p = project("test #false", &[], &explore_task("look"));
    p.run(&[]).stderr_has("look: workspace: overlay").exec();
    let cache = p.path().join(".cassist/cache/sandbox-probe");
    let key = std::fs::read_to_string(&cache).unwrap();
    assert!(key.contains(crate::support::CASSIST) && key.contains("kernel/osrelease "), "{key}");
    let ino = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
    let first = ino(&cache);
    p.run(&["--no-cache"]).stderr_has("look: workspace: overlay").exec();
    assert_eq!(ino(&cache), first, "probed again (the answer was written anew)");
    std::fs::write(&cache, key.replace("kernel/osrelease ", "kernel/osrelease 0.0-")).unwrap();
    p.run(&["--no-cache"]).stderr_has("look: workspace: overlay").exec();
    assert_eq!(std::fs::read_to_string(&cache).unwrap(), key, "probed again");
}

/// Every command of a task starts through `cassist-sandbox` installed
/// beside cassist when it is of the same build (the answer remembered in
/// `.cassist/cache/sandbox-wrapper`); without one, or beside one of
/// another build (said once, never started for a command), cassist runs
/// the wrapper itself, and the task runs all the same.
#[test]
fn the_wrapper_program_of_the_same_build_is_used_and_no_other() {
    let p = project("test #false", &[], &explore_task("look"));
    // As cargo built them: side by side.
    let done = p.run(&[]).exec();
    assert_eq!(done.states()["look"], "passed", "{}", done.transcript());
    let cache = p.path().join(".cassist/cache/sandbox-wrapper");
    let sibling = Path::new(crate::support::CASSIST).with_file_name("cassist-sandbox");
    let key = std::fs::read_to_string(&cache).unwrap();
    assert!(key.starts_with(&format!("{} ", sibling.display())), "{key}");
    // Installed alone.
    let bin = tempfile::Builder::new().prefix("cassist-bin-").tempdir_in(p.path().parent().unwrap()).unwrap();
    let exe = bin.path().join("cassist");
    if std::fs::hard_link(crate::support::CASSIST, &exe).is_err() {
        std::fs::copy(crate::support::CASSIST, &exe).unwrap();
    }
    std::fs::remove_file(&cache).unwrap();
    let done = p.run(&["--no-cache"]).program(&exe).exec();
    assert_eq!(done.states()["look"], "passed", "{}", done.transcript());
    assert!(!done.stderr.contains("note:"), "{}", done.stderr);
    assert!(!cache.exists(), "nothing to remember");
    // Beside a `cassist-sandbox` of another build: asked, refused.
    let calls = bin.path().join("calls");
    let other = bin.path().join("cassist-sandbox");
    std::fs::write(&other, format!("#!/bin/sh\necho \"$@\" >> {:?}\necho 0.0.0-0000000000000000\n", calls)).unwrap();
    std::fs::set_permissions(&other, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let done = p.run(&["--no-cache"]).program(&exe).exec();
    assert_eq!(done.states()["look"], "passed", "{}", done.transcript());
    let note = format!("note: {} is not of this cassist's build", other.display());
    assert_eq!(done.stderr.matches(&note).count(), 1, "{}", done.stderr);
    assert_eq!(std::fs::read_to_string(&calls).unwrap(), "--build-id\n", "started for a command");
    assert!(!cache.exists(), "a refusal is not remembered");
}
