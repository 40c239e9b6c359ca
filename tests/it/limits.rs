//! The memory and processes of each command of a task (`limits { memory;
//! processes }` of `cassist.kdl`): a setup command, an agent or an
//! acceptance command past a limit fails its task naming the limit (never
//! feedback for the agent), nothing is integrated, nothing of it is left
//! running, and no cgroup of the run is left behind. Where no cgroup can
//! be written (`CASSIST_CGROUPS=off` stands for such a machine), each
//! process gets resource limits instead, said once.
//!
//! Cases that apply to both workspace modes run twice
//! ([`in_both_modes!`]): overlay (with namespaces) and copy
//! (`CASSIST_WORKSPACE=copy`, no namespaces).

use std::path::PathBuf;

use crate::support::{Project, Sandbox, Test, in_both_modes, processes_with, sandbox_or_skip, unique_marker};

/// Allocates and touches 300 MiB, then says so.
const HOG: &str = r#"python3 -c "b = b'x' * (300 << 20); print('allocated', len(b))""#;

/// A task `t` of the agent `agent` that may change `src/**`, with the
/// acceptance command `acceptance` (a minute at most: a limit that does
/// not hold fails the test soon) and three iterations (a failure fed back
/// to the agent runs it again).
fn task(agent: &str, acceptance: &str) -> String {
    format!(
        "task \"t\" {{\n    goal \"Write src/hello.txt.\"\n    agent {agent:?}\n    max-iterations 3\n    \
         scope {{\n        path \"src/**\"\n    }}\n    acceptance {{\n        run {acceptance:?} timeout=\"1m\"\n    }}\n}}\n"
    )
}

/// A trusted project whose agent `good` writes `src/hello.txt` (and `hog`
/// allocates 300 MiB first), with `config` in its `cassist.kdl`.
fn project(config: &str, tasks: &str) -> Project {
    Test::trusted()
        .kdl(config)
        .agent("good", "good.sh", &[], &[])
        .sh_agent("hog", &format!("{HOG} && mkdir -p src && echo hog > src/hello.txt"))
        .tasks(tasks)
        .file("src/a.txt", "a\n")
        .git()
        .build()
}

/// Whether the case can run here: a cgroup cassist may write (skipped,
/// saying so, or a failure under `CASSIST_REQUIRE_SANDBOX=1`), and the
/// namespaces for the overlay mode.
fn available(env: &[(&str, &str)]) -> bool {
    sandbox_or_skip(Sandbox::Cgroup) && (!env.is_empty() || sandbox_or_skip(Sandbox::Overlay))
}

/// The cgroup folders (`cassist-PID`, under the cgroups cassist uses
/// here) of the runs of `p` that are still there: a run removes its own.
/// A run's records are in `.cassist/runs/SECONDS-PID`.
fn cgroups_left(p: &Project) -> Vec<PathBuf> {
    let runs = std::fs::read_dir(p.path().join(".cassist/runs")).unwrap();
    let pids: Vec<String> = runs
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.rsplit_once('-').map(|(_, pid)| pid.to_owned()))
        .collect();
    assert!(!pids.is_empty(), "no run recorded");
    let mut left = Vec::new();
    for h in cassist_sandbox::sandbox::find_cgroups() {
        left.extend(pids.iter().map(|pid| h.own.join(format!("cassist-{pid}"))).filter(|d| d.exists()));
    }
    left
}

/// The failed run of `p`: exit 1, task `t` failed for `reason` after
/// `attempts` agent runs, nothing integrated, no cgroup left.
#[track_caller]
fn assert_failed(p: &Project, env: &[(&str, &str)], reason: &str, attempts: u64) {
    let before = p.tree();
    let done = p.run(&[]).envs(env).status(1).exec();
    let t = done.task("t");
    assert_eq!(t["state"], "failed", "{}", done.transcript());
    assert_eq!(t["reason"], reason, "{}", done.transcript());
    assert_eq!(t["attempts"], attempts, "not fed back to the agent: {t}");
    assert_eq!(p.tree(), before, "nothing integrated");
    assert!(!p.exists("src/hello.txt"));
    assert_eq!(cgroups_left(p), Vec::<PathBuf>::new(), "cgroups left behind");
}

fn acceptance_past_the_memory_limit(env: &[(&str, &str)]) {
    if !available(env) {
        return;
    }
    let p = project("limits {\n    memory \"64MiB\"\n}\n", &task("good", HOG));
    let reason =
        format!("the acceptance command `{HOG}` went past the memory limit (64 MiB, limits memory in cassist.kdl)");
    assert_failed(&p, env, &reason, 1);
}

in_both_modes!(acceptance_past_the_memory_limit: acceptance_past_the_memory_limit_fails_the_task,
    acceptance_past_the_memory_limit_fails_the_task_in_copy_mode);

fn setup_past_the_memory_limit(env: &[(&str, &str)]) {
    if !available(env) {
        return;
    }
    let p = project(&format!("limits {{\n    memory \"64MiB\"\n}}\nsetup {HOG:?}\n"), &task("good", "true"));
    let reason = format!("the setup command `{HOG}` went past the memory limit (64 MiB, limits memory in cassist.kdl)");
    assert_failed(&p, env, &reason, 0);
}

in_both_modes!(setup_past_the_memory_limit: setup_past_the_memory_limit_fails_the_task,
    setup_past_the_memory_limit_fails_the_task_in_copy_mode);

fn agent_past_the_memory_limit(env: &[(&str, &str)]) {
    if !available(env) {
        return;
    }
    let p = project("limits {\n    memory \"64MiB\"\n}\n", &task("hog", "true"));
    let reason = "the agent `hog` went past the memory limit (64 MiB, limits memory in cassist.kdl)";
    assert_failed(&p, env, reason, 1);
}

in_both_modes!(agent_past_the_memory_limit: agent_past_the_memory_limit_fails_the_task,
    agent_past_the_memory_limit_fails_the_task_in_copy_mode);

/// 500 shells, each sleeping, started in the background: far more than
/// 50 processes.
fn fork_bomb(marker: &str) -> String {
    format!("i=0; while [ $i -lt 500 ]; do sh -c 'sleep 600; :' {marker} & i=$((i + 1)); done; wait")
}

fn acceptance_past_the_process_limit(env: &[(&str, &str)]) {
    if !available(env) {
        return;
    }
    let marker = unique_marker("fork-bomb");
    let bomb = fork_bomb(&marker);
    let p = project("limits {\n    processes 50\n}\n", &task("good", &bomb));
    let reason =
        format!("the acceptance command `{bomb}` went past the process limit (50, limits processes in cassist.kdl)");
    assert_failed(&p, env, &reason, 1);
    assert_eq!(processes_with(&marker), Vec::new(), "processes left running");
}

in_both_modes!(acceptance_past_the_process_limit: acceptance_past_the_process_limit_fails_the_task,
    acceptance_past_the_process_limit_fails_the_task_in_copy_mode);

/// The default limits leave room for a normal task: one that allocates
/// 300 MiB and starts a hundred processes passes. The cgroups a killed run
/// left (one of a process no longer alive) are removed by the next run.
#[test]
fn the_default_limits_let_a_normal_task_pass() {
    if !available(&[]) {
        return;
    }
    let stale = StaleCgroups::make();
    let marker = unique_marker("busy");
    let busy = format!("{HOG} && {}", fork_bomb(&marker).replace("500", "100").replace("sleep 600", "sleep 1"));
    let p = project("", &task("good", &busy));
    let done = p.run(&[]).exec();
    assert_eq!(done.task("t")["state"], "passed", "{}", done.transcript());
    assert_eq!(p.read("src/hello.txt"), "hello from t\n");
    assert!(!done.transcript().contains("no cgroup can bound"), "{}", done.transcript());
    assert_eq!(cgroups_left(&p), Vec::<PathBuf>::new(), "cgroups left behind");
    let kept: Vec<&PathBuf> = stale.0.iter().filter(|d| d.exists()).collect();
    assert!(kept.is_empty(), "a killed run's cgroups were kept: {kept:?}");
}

/// Cgroups as a killed run of cassist leaves them (`cassist-PID` with a
/// command's cgroup in it, PID a process no longer alive), in each
/// hierarchy cassist uses here; removed when dropped, if still there.
struct StaleCgroups(Vec<PathBuf>);

impl StaleCgroups {
    fn make() -> StaleCgroups {
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let pid = gone.id();
        gone.wait().unwrap();
        let mut dirs = Vec::new();
        for h in cassist_sandbox::sandbox::find_cgroups() {
            let dir = h.own.join(format!("cassist-{pid}"));
            std::fs::create_dir(&dir).unwrap();
            std::fs::create_dir(dir.join("12345")).unwrap();
            dirs.push(dir);
        }
        StaleCgroups(dirs)
    }
}

impl Drop for StaleCgroups {
    fn drop(&mut self) {
        for d in &self.0 {
            let _ = std::fs::remove_dir(d.join("12345"));
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// Without a cgroup: the fallback is said once however many commands
/// run, each process is held to the memory limit (the 300 MiB allocation
/// fails), and the task fails as its acceptance command did. A run whose
/// tasks are all up to date starts no command and says nothing of it.
#[test]
fn without_a_cgroup_each_process_is_limited_and_that_is_said_once() {
    const NOTE: &str = "note: no cgroup can bound the memory and processes of each command here \
                        (CASSIST_CGROUPS=off); instead each process may use the memory limit on its own \
                        (RLIMIT_DATA): a command's processes together are not bounded;";
    let off = [("CASSIST_CGROUPS", "off")];
    let tasks = format!("{}{}", task("good", HOG), task("good", "true").replace("task \"t\"", "task \"u\""));
    let p = project("limits {\n    memory \"64MiB\"\n}\n", &tasks);
    let done = p.run(&["--keep-going"]).envs(&off).status(1).exec();
    assert_eq!(done.transcript().matches(NOTE).count(), 1, "{}", done.transcript());
    let t = done.task("t");
    assert_eq!(t["state"], "failed");
    assert_eq!(t["attempts"], 3, "an ordinary failure: fed back to the agent: {t}");
    let reason = t["reason"].as_str().unwrap();
    assert!(reason.starts_with(&format!("acceptance command `{HOG}` failed (exit code 1)")), "{reason}");
    assert!(p.record("t", "acceptance-1-1.log").contains("MemoryError"));
    assert_eq!(done.task("u")["state"], "passed");

    // `u` is up to date now: no command starts, no cgroup is looked for.
    p.commit_all();
    let again = p.run(&["--filter", "u"]).envs(&off).exec();
    assert_eq!(again.task("u")["state"], "up-to-date", "{}", again.transcript());
    assert!(!again.transcript().contains("no cgroup can bound"), "{}", again.transcript());
}

/// A bad `memory` or `processes` is a diagnostic at its spot, exit 2,
/// nothing run or written.
#[test]
fn bad_limits_are_diagnostics() {
    for (body, said) in [
        ("memory \"8 GiB\"", "invalid size `8 GiB` for `memory`"),
        ("processes 0", "`processes` must be at least 1, found 0"),
    ] {
        let p = project(&format!("limits {{\n    {body}\n}}\n"), &task("good", "true"));
        let before = p.tree();
        p.run(&[]).status(2).stderr_has(said).stderr_has("cassist.kdl:").exec();
        assert_eq!(p.tree(), before, "{body}: nothing written");
        assert!(!p.path().join(".cassist").exists(), "{body}: nothing written");
    }
}
