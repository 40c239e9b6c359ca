use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::kill;
use nix::unistd::Pid;

use super::*;
use crate::process::test_support::*;
use crate::process::*;

#[test]
fn exit_code_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let f = go(&sh(dir.path(), "exit 3"));
    assert_eq!(f.outcome, Outcome::Exited(3));
    assert!(!f.success());
    let f = go(&sh(dir.path(), "exit 0"));
    assert!(f.success());
    assert!(f.pid > 0);
}

#[test]
fn exit_137_from_a_shell_is_an_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(go(&sh(dir.path(), "exit 137")).outcome, Outcome::Exited(137));
}

#[test]
fn signal_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let f = go(&sh(dir.path(), "kill -KILL $$"));
    assert_eq!(f.outcome, Outcome::Signaled(9));
    assert!(!f.success());
    assert_eq!(go(&sh(dir.path(), "kill -TERM $$")).outcome, Outcome::Signaled(15));
}

#[test]
fn environment_is_exactly_the_given_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Command::new(["env"], dir.path());
    c.env = vec![
        ("PATH".into(), "/usr/bin:/bin".into()),
        ("CASSIST_TASK".into(), "demo/part".into()),
        ("EMPTY".into(), "".into()),
        ("SPACED".into(), "a b  c".into()),
    ];
    let f = go(&c);
    assert!(f.success(), "{}", f.tail);
    let mut got: Vec<&str> = f.tail.lines().collect();
    got.sort();
    assert_eq!(got, ["CASSIST_TASK=demo/part", "EMPTY=", "PATH=/usr/bin:/bin", "SPACED=a b  c"]);
}

#[test]
fn argv_and_cwd_are_given() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = sh(dir.path(), r#"pwd; echo "$0|$1|$2""#);
    c.argv.extend(["zero".into(), "one".into(), "two words".into()]);
    let f = go(&c);
    let cwd = dir.path().canonicalize().unwrap();
    assert_eq!(f.tail, format!("{}\nzero|one|two words\n", cwd.display()));
}

#[test]
fn stderr_is_interleaved_with_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let f = go(&sh(dir.path(), "echo one; echo two >&2; echo three"));
    assert_eq!(f.tail, "one\ntwo\nthree\n");
    assert_eq!(f.output_bytes, 14);
}

#[test]
fn stdin_is_delivered() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Command::new(["cat"], dir.path());
    c.env = base_env();
    c.stdin = Some(b"hello\nworld\n".to_vec());
    assert_eq!(go(&c).tail, "hello\nworld\n");

    // Larger than a pipe buffer, read while we read its output.
    let mut c = Command::new(["wc", "-c"], dir.path());
    c.env = base_env();
    c.stdin = Some(vec![b'x'; 3 << 20]);
    assert_eq!(go(&c).tail.trim(), (3 << 20).to_string());
}

#[test]
fn stdin_none_is_dev_null() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Command::new(["cat"], dir.path());
    c.env = base_env();
    c.timeout = Some(Duration::from_secs(5));
    let f = go(&c);
    assert_eq!(f.outcome, Outcome::Exited(0));
    assert_eq!(f.tail, "");
}

#[test]
fn stdin_not_read_does_not_block() {
    let dir = tempfile::tempdir().unwrap();
    for script in ["true", "sleep 0.2"] {
        let mut c = sh(dir.path(), script);
        c.stdin = Some(vec![b'x'; 4 << 20]);
        c.timeout = Some(Duration::from_secs(10));
        let f = go(&c);
        assert_eq!(f.outcome, Outcome::Exited(0), "{script}");
    }
}

#[test]
fn timeout_kills_the_whole_tree() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let mut c = sh(
        dir.path(),
        "echo $$ >> pids; sleep 100 & echo $! >> pids; sleep 100 >/dev/null 2>&1 & echo $! >> pids; wait",
    );
    c.timeout = Some(ms(200));
    // The children die of SIGTERM: no need to wait for the grace.
    c.grace = Duration::from_secs(5);
    let t = Instant::now();
    let f = go_bounded(&c, &Cancel::new(), Duration::from_secs(10), &pids);
    assert_eq!(f.outcome, Outcome::TimedOut);
    assert_eq!(f.timeout, Some(ms(200)));
    assert!(t.elapsed() >= ms(200));
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert_tree_gone(&f, &pids);
}

#[test]
fn term_ignoring_child_is_killed_after_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    // Ignored signals stay ignored in the children.
    let mut c =
        sh(dir.path(), "trap '' TERM; echo $$ >> pids; sleep 100 & echo $! >> pids; while :; do sleep 0.05; done");
    c.timeout = Some(ms(200));
    c.grace = ms(300);
    let t = Instant::now();
    let f = go_bounded(&c, &Cancel::new(), Duration::from_secs(10), &pids);
    assert_eq!(f.outcome, Outcome::TimedOut);
    assert!(t.elapsed() >= ms(500), "returned before the grace: {:?}", t.elapsed());
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert_tree_gone(&f, &pids);
}

#[test]
fn cancel_stops_the_tree() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let c = sh(dir.path(), "echo $$ >> pids; sleep 100 & echo $! >> pids; wait");
    let cancel = Cancel::new();
    let remote = cancel.clone();
    let canceller = thread::spawn(move || {
        thread::sleep(ms(150));
        remote.cancel();
    });
    let t = Instant::now();
    let f = go_bounded(&c, &cancel, Duration::from_secs(10), &pids);
    canceller.join().unwrap();
    assert_eq!(f.outcome, Outcome::Cancelled);
    assert!(t.elapsed() >= ms(150) && t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert_tree_gone(&f, &pids);
}

#[test]
fn cancelled_before_the_run_stops_the_child_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let mut c = sh(dir.path(), "echo $$ >> pids; sleep 100 & echo $! >> pids; wait");
    c.timeout = Some(Duration::from_secs(60));
    let cancel = Cancel::new();
    cancel.cancel();
    let f = go_bounded(&c, &cancel, Duration::from_secs(10), &pids);
    assert_eq!(f.outcome, Outcome::Cancelled);
}

#[test]
fn cancel_from_a_signal_handler_wakes_a_run_on_another_thread() {
    // The Ctrl-C path: the handler runs on whichever thread the signal
    // lands on (here the canceller's), and the run wakes through the
    // token's eventfd alone.
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let c = sh(dir.path(), "echo $$ > started; exec sleep 100");
    let cancel = Cancel::new();
    let in_handler = cancel.clone();
    // SAFETY: Cancel::cancel is async-signal-safe.
    unsafe { signal_hook::low_level::register(libc::SIGUSR1, move || in_handler.cancel()) }.unwrap();
    let canceller = thread::spawn(move || {
        while !started.exists() {
            thread::sleep(ms(10));
        }
        signal_hook::low_level::raise(libc::SIGUSR1).unwrap();
    });
    let f = go_bounded(&c, &cancel, Duration::from_secs(10), &dir.path().join("started"));
    canceller.join().unwrap();
    assert_eq!(f.outcome, Outcome::Cancelled);
}

#[test]
fn leftovers_of_a_normal_exit_are_killed() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    // One holds our output pipe, one does not.
    let c = sh(
        dir.path(),
        "echo $$ >> pids; sleep 100 & echo $! >> pids; sleep 100 >/dev/null 2>&1 & echo $! >> pids; echo bye",
    );
    let t = Instant::now();
    let f = go_bounded(&c, &Cancel::new(), Duration::from_secs(10), &pids);
    assert_eq!(f.outcome, Outcome::Exited(0));
    assert_eq!(f.tail, "bye\n");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert_tree_gone(&f, &pids);
}

#[test]
fn escaped_grandchild_holding_stdout_does_not_hang() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("escaped");
    let c = sh(dir.path(), "setsid sh -c 'echo $$ > escaped; exec sleep 30' & sleep 0.2; echo done");
    let t = Instant::now();
    let f = go_bounded(&c, &Cancel::new(), Duration::from_secs(5), &pid_file);
    let elapsed = t.elapsed();
    // Clean up the escapee before asserting.
    let escaped = pids_in(&pid_file);
    for pid in &escaped {
        let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
    }
    assert_eq!(f.outcome, Outcome::Exited(0));
    assert_eq!(f.tail, "done\n");
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
    assert!(elapsed >= DRAIN_LIMIT, "the escapee did not hold the pipe? {elapsed:?}");
    assert_eq!(escaped.len(), 1);
}

/// The one command that
/// [`a_command_starts_without_a_fork_unless_it_needs_a_hook`] traces.
#[test]
#[ignore = "run under strace by a_command_starts_without_a_fork_unless_it_needs_a_hook"]
fn start_one_command_for_the_trace() {
    let mut c = Command::new(["true"], "/");
    c.env = base_env();
    c.die_with_cassist = std::env::var_os("CASSIST_TEST_DIE_WITH_CASSIST").is_some();
    assert!(go(&c).success());
}

/// A command with no hook between `fork` and `exec` (a sandboxed one: the
/// wrapper sees to dying with cassist itself) is started with
/// `posix_spawn`, which glibc does with `clone(CLONE_VM | CLONE_VFORK)`
/// and no copy of cassist's address space; one that must die with cassist
/// needs the hook, so a fork. Seen with strace (skipped without it).
#[test]
fn a_command_starts_without_a_fork_unless_it_needs_a_hook() {
    let Some(strace) = find_in_path("strace".as_ref(), "/usr/bin:/bin".as_ref(), Path::new("/")) else {
        crate::say(format_args!("SKIPPED: no strace"));
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for die_with_cassist in [false, true] {
        let log = dir.path().join(format!("trace-{die_with_cassist}"));
        let mut traced = std::process::Command::new(&strace);
        traced
            .args(["-f", "-qq", "-e", "trace=clone,clone3,fork,vfork", "-o"])
            .arg(&log)
            .arg(std::env::current_exe().unwrap())
            .args(["--exact", "process::runner::tests::start_one_command_for_the_trace", "--ignored"])
            .args(["--test-threads=1", "--quiet"])
            .env_remove("CASSIST_TEST_DIE_WITH_CASSIST")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        if die_with_cassist {
            traced.env("CASSIST_TEST_DIE_WITH_CASSIST", "1");
        }
        let status = traced.status().unwrap();
        let trace = std::fs::read_to_string(&log).unwrap_or_default();
        if !status.success() && trace.is_empty() {
            crate::say(format_args!("SKIPPED: strace cannot trace here ({status})"));
            return;
        }
        assert!(status.success(), "{status}: {trace}");
        // New processes, not threads.
        let started: Vec<&str> = trace
            .lines()
            .filter(|l| ["clone(", "clone3(", "fork(", "vfork("].iter().any(|c| l.contains(c)))
            .filter(|l| !l.contains("CLONE_THREAD"))
            .collect();
        assert_eq!(started.len(), 1, "one process started: {trace}");
        assert_eq!(started[0].contains("CLONE_VFORK"), !die_with_cassist, "{}", started[0]);
    }
}

/// What one start costs cassist itself: its CPU time (user and system,
/// the child's own not counted) and the wall time for each run of a
/// command started the way task commands are (no pre-exec hook), with a
/// 4 KB argument (a prompt) and 40 variables. Figures, not a check:
/// `cargo test --release -p cassist-sandbox --lib spawn_cost -- --ignored --nocapture`
#[test]
#[ignore]
// Its figures go to the test harness's output.
#[allow(clippy::disallowed_macros)]
fn spawn_cost() {
    fn cpu_us() -> i64 {
        // SAFETY: getrusage fills the zeroed struct it is given.
        let usage = unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            libc::getrusage(libc::RUSAGE_SELF, &mut usage);
            usage
        };
        let (user, system) = (usage.ru_utime, usage.ru_stime);
        (user.tv_sec + system.tv_sec) * 1_000_000 + user.tv_usec + system.tv_usec
    }
    let mut c = Command::sandboxed(vec!["/bin/true".into(), "x".repeat(4000).into()], "/");
    c.env = (0..40).map(|i| (format!("VAR_{i}").into(), format!("value-{i}").into())).collect();
    c.env.push(("PATH".into(), "/usr/bin:/bin".into()));
    for _ in 0..20 {
        go(&c);
    }
    let runs = 400;
    let (cpu, wall) = (cpu_us(), Instant::now());
    for _ in 0..runs {
        assert!(go(&c).success());
    }
    let (cpu, wall) = (cpu_us() - cpu, wall.elapsed());
    println!(
        "{runs} starts: cassist's CPU {:.1} µs each, wall {:.1} µs each",
        cpu as f64 / f64::from(runs),
        wall.as_micros() as f64 / f64::from(runs)
    );
}
