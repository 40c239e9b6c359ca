//! Batch runs (SPEC 5 `run`, issue 7): the parallel scheduler, fail-fast
//! and `--keep-going`, `--shard`, `--max-cost`, Ctrl-C, the progress
//! output on and off a terminal, JUnit and GitHub annotations.
//!
//! The agent is `fixtures/agents/timed.sh`: it logs when each task starts
//! and ends, and writes `out/<task>.txt` listing the outputs it saw.

mod common;

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::fx::{Done, Fx, agent, unique_marker, wait_with_limit};
use common::{assert_same_tree, processes_with};
use serde_json::Value;

/// One task of a test project: its name and what it depends on.
struct T<'a>(&'a str, &'a [&'a str]);

fn tasks_kdl(tasks: &[T<'_>]) -> String {
    let mut out = String::new();
    for T(name, deps) in tasks {
        out.push_str(&format!("task {name:?} {{\n    goal \"Write out/{name}.txt.\"\n    scope {{\n        path \"out/{name}.txt\"\n    }}\n"));
        for d in *deps {
            out.push_str(&format!("    depends-on {d:?}\n"));
        }
        out.push_str("}\n\n");
    }
    out
}

struct Batch {
    fx: Fx,
    marker: String,
}

impl Batch {
    fn new(tasks: &[T<'_>]) -> Batch {
        Batch::with_config(tasks, "")
    }

    /// With `config` added to `cassist.kdl`.
    fn with_config(tasks: &[T<'_>], config: &str) -> Batch {
        let marker = unique_marker("timed");
        let fx = Fx::new(
            &format!(
                "{config}\ndefaults {{\n    agent \"timed\"\n}}\n{}",
                agent(
                    "timed",
                    "timed.sh",
                    &[&marker],
                    &["TIMED_LOG", "TIMED_SLEEP", "TIMED_WAIT", "TIMED_COST", "TIMED_FAIL"]
                )
            ),
            &tasks_kdl(tasks),
        );
        fx.file("out/.keep", "").git_init();
        std::fs::create_dir_all(fx.out().join("log")).unwrap();
        Batch { fx, marker }
    }

    fn log(&self) -> String {
        self.fx.out().join("log").display().to_string()
    }

    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Done {
        let log = self.log();
        let mut vars = vec![("TIMED_LOG", log.as_str())];
        vars.extend_from_slice(env);
        let done = self.fx.run(args, &vars);
        eprintln!("cassist run {args:?}: {:.2}s", done.elapsed.as_secs_f64());
        done
    }

    /// `(task, start, end)` of each agent run that ended, by start.
    fn spans(&self) -> Vec<(String, f64, f64)> {
        let text = std::fs::read_to_string(self.fx.out().join("log/events")).unwrap_or_default();
        let mut starts: Vec<(String, f64)> = Vec::new();
        let mut spans = Vec::new();
        for line in text.lines() {
            let parts: Vec<&str> = line.split(' ').collect();
            let (what, task, at) = (parts[0], parts[1].to_owned(), parts[2].parse::<f64>().unwrap());
            if what == "start" {
                starts.push((task, at));
            } else if let Some(i) = starts.iter().position(|(t, _)| *t == task) {
                let (t, s) = starts.remove(i);
                spans.push((t, s, at));
            }
        }
        spans.sort_by(|a, b| a.1.total_cmp(&b.1));
        spans
    }

    fn started(&self) -> Vec<String> {
        let text = std::fs::read_to_string(self.fx.out().join("log/events")).unwrap_or_default();
        text.lines().filter(|l| l.starts_with("start ")).map(|l| l.split(' ').nth(1).unwrap().to_owned()).collect()
    }
}

/// The most agent runs that overlapped at one moment.
fn max_overlap(spans: &[(String, f64, f64)]) -> usize {
    let mut edges: Vec<(f64, i32)> = spans.iter().flat_map(|(_, s, e)| [(*s, 1), (*e, -1)]).collect();
    edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut now, mut max) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        max = max.max(now);
    }
    max as usize
}

fn states(done: &Done) -> Vec<(String, String)> {
    done.json()["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap().to_owned(), t["state"].as_str().unwrap().to_owned()))
        .collect()
}

fn names(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("t{i:02}")).collect()
}

#[test]
fn twelve_independent_tasks_run_four_at_a_time_and_all_integrate() {
    let names = names(12);
    let tasks: Vec<T<'_>> = names.iter().map(|n| T(n, &[])).collect();
    let b = Batch::new(&tasks);
    let done = b.run(&["-j", "4"], &[("TIMED_SLEEP", "1")]);
    done.exit(0);
    let spans = b.spans();
    assert_eq!(spans.len(), 12, "{}", done.transcript());
    let overlap = max_overlap(&spans);
    assert!((3..=4).contains(&overlap), "at most 4 at once, and really in parallel: {overlap} overlapped\n{spans:?}");
    for n in &names {
        assert!(b.fx.read(&format!("out/{n}.txt")).starts_with("saw: "), "out/{n}.txt not integrated");
    }
    let json = done.json();
    assert_eq!(json["passed"], 12);
    // Twelve 1-second agents, four at a time: about 3 s, far from 12 s.
    assert!(done.elapsed < Duration::from_secs(9), "took {:?}", done.elapsed);
}

#[test]
fn integrations_happen_one_at_a_time() {
    // The `build` command runs inside the integration: it logs when it
    // starts and ends, and takes a while.
    let log = tempfile::tempdir().unwrap();
    let file = log.path().join("builds");
    let build = format!("echo start $(date +%s.%N) >> {0:?}; sleep 0.3; echo end $(date +%s.%N) >> {0:?}", file);
    let names = names(6);
    let tasks: Vec<T<'_>> = names.iter().map(|n| T(n, &[])).collect();
    let b = Batch::with_config(&tasks, &format!("build {build:?}"));
    let done = b.run(&["-j", "6"], &[("TIMED_SLEEP", "0.2")]);
    done.exit(0);
    let text = std::fs::read_to_string(&file).unwrap();
    let times: Vec<f64> = text.lines().map(|l| l.split(' ').nth(1).unwrap().parse().unwrap()).collect();
    assert_eq!(times.len(), 12, "{text}");
    let kinds: Vec<&str> = text.lines().map(|l| l.split(' ').next().unwrap()).collect();
    assert_eq!(kinds, ["start", "end"].repeat(6), "integrations overlapped:\n{text}");
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{text}");
    // The agents themselves did overlap.
    assert!(max_overlap(&b.spans()) >= 3, "{:?}", b.spans());
}

#[test]
fn a_task_starts_only_after_its_dependencies_integrated() {
    let tasks =
        [T("base", &[]), T("left", &["base"]), T("right", &["base"]), T("top", &["left", "right"]), T("alone", &[])];
    let b = Batch::new(&tasks);
    let done = b.run(&["-j", "4"], &[("TIMED_SLEEP", "0.5")]);
    done.exit(0);
    let spans = b.spans();
    let span = |n: &str| spans.iter().find(|s| s.0 == n).cloned().unwrap();
    for (task, deps) in [("left", vec!["base"]), ("right", vec!["base"]), ("top", vec!["left", "right"])] {
        let seen = b.fx.read(&format!("out/{task}.txt"));
        for d in deps {
            assert!(span(task).1 > span(d).2, "{task} started before {d} ended: {spans:?}");
            assert!(seen.contains(&format!("{d}.txt")), "{task} did not see {d}'s integrated output: {seen}");
        }
    }
    // Independent branches did overlap.
    assert!(max_overlap(&spans) >= 2, "{spans:?}");
}

#[test]
fn fail_fast_starts_nothing_after_a_failure_but_lets_running_tasks_finish() {
    let tasks = [T("a-fails", &[]), T("b-slow", &[]), T("c", &[]), T("d", &[]), T("e", &[])];
    let b = Batch::new(&tasks);
    let done = b.run(&["-j", "2"], &[("TIMED_FAIL", "a-fails"), ("TIMED_SLEEP", "1")]);
    done.exit(1);
    let mut started = b.started();
    started.sort();
    assert_eq!(started, ["a-fails", "b-slow"], "{}", done.transcript());
    let s = states(&done);
    assert_eq!(s[0], ("a-fails".into(), "blocked".into()));
    assert_eq!(s[1], ("b-slow".into(), "passed".into()), "a running task finishes");
    assert!(b.fx.path().join("out/b-slow.txt").exists());
    for t in &done.json()["tasks"].as_array().unwrap()[2..] {
        assert_eq!(t["state"], "skipped");
        assert!(t["reason"].as_str().unwrap().contains("`a-fails` failed"), "{t}");
    }
}

#[test]
fn keep_going_runs_everything_that_does_not_depend_on_a_failure() {
    let tasks =
        [T("a-fails", &[]), T("b-needs-a", &["a-fails"]), T("c-needs-b", &["b-needs-a"]), T("d", &[]), T("e", &[])];
    let b = Batch::new(&tasks);
    let done = b.run(&["-j", "2", "--keep-going"], &[("TIMED_FAIL", "a-fails"), ("TIMED_SLEEP", "0.2")]);
    done.exit(1);
    let started: BTreeSet<String> = b.started().into_iter().collect();
    assert_eq!(started, ["a-fails", "d", "e"].iter().map(|s| s.to_string()).collect());
    let json = done.json();
    let task = |n: &str| json["tasks"].as_array().unwrap().iter().find(|t| t["name"] == n).unwrap().clone();
    assert_eq!(task("b-needs-a")["state"], "skipped");
    assert_eq!(task("b-needs-a")["reason"], "dependency `a-fails` did not pass");
    assert_eq!(task("c-needs-b")["reason"], "dependency `b-needs-a` did not pass");
    assert_eq!(task("d")["state"], "passed");
    assert_eq!(task("e")["state"], "passed");
}

#[test]
fn the_shards_together_run_every_task_exactly_once() {
    let names = names(10);
    let tasks: Vec<T<'_>> = names.iter().map(|n| T(n, &[])).collect();
    let b = Batch::new(&tasks);
    let mut ran: Vec<String> = Vec::new();
    for k in 1..=3 {
        let before = b.started().len();
        let done = b.run(&["--shard", &format!("{k}/3")], &[("TIMED_SLEEP", "0")]);
        done.exit(0);
        let mine: Vec<String> = b.started()[before..].to_vec();
        let reported: Vec<String> = states(&done).into_iter().map(|(n, _)| n).collect();
        let mut sorted = mine.clone();
        sorted.sort();
        assert_eq!(sorted, reported, "shard {k}/3 reports exactly the tasks it ran");
        ran.extend(mine);
    }
    ran.sort();
    assert_eq!(ran, names, "every task in exactly one shard");

    // A dependency in another shard must be up to date.
    let holds = |k: u64, t: &str| cassist::cli::Shard { k, n: 3 }.contains(t);
    let deps: Vec<String> = (1..=12).map(|i| format!("d{i}")).collect();
    let k_base = (1..=3).find(|&k| holds(k, "base")).unwrap();
    let dependent = deps.iter().find(|d| !holds(k_base, d)).expect("some task in another shard");
    let k_dep = (1..=3).find(|&k| holds(k, dependent)).unwrap();
    let b = Batch::new(&[T("base", &[]), T(dependent, &["base"])]);
    let done = b.run(&["--shard", &format!("{k_dep}/3")], &[]);
    done.exit(2);
    assert!(
        done.stderr.contains(&format!(
            "task `{dependent}` depends on `base`, which is in another shard and is not up to date (state run)"
        )),
        "{}",
        done.stderr
    );
    assert!(b.started().is_empty(), "nothing may start");
    // Once base's shard ran, the dependent's can.
    b.run(&["--shard", &format!("{k_base}/3")], &[]).exit(0);
    b.run(&["--shard", &format!("{k_dep}/3")], &[]).exit(0);
    assert_eq!(b.started(), ["base", dependent.as_str()]);
}

#[test]
fn max_cost_stops_starting_agents_once_spend_reaches_it() {
    let names = names(6);
    let tasks: Vec<T<'_>> = names.iter().map(|n| T(n, &[])).collect();
    let b = Batch::new(&tasks);
    let done = b.run(&["-j", "1", "--max-cost", "1.00"], &[("TIMED_COST", "0.4"), ("TIMED_SLEEP", "0")]);
    done.exit(1);
    // 0.4, 0.8, 1.2: the third run reaches the budget; no fourth starts.
    assert_eq!(b.started(), ["t01", "t02", "t03"], "{}", done.transcript());
    let json = done.json();
    let tasks = json["tasks"].as_array().unwrap();
    for t in &tasks[..3] {
        assert_eq!(t["state"], "passed");
        assert_eq!(t["cost_usd"], 0.4);
    }
    for t in &tasks[3..] {
        assert_eq!(t["state"], "skipped");
        assert!(t["reason"].as_str().unwrap().contains("--max-cost $1.00 reached (agents reported $1.20)"), "{t}");
    }
    assert!(done.stdout.contains("$0.40"), "the summary shows the cost:\n{}", done.stdout);
}

#[test]
fn ctrl_c_in_a_parallel_run_leaves_no_process_and_a_consistent_tree() {
    let names = names(6);
    let tasks: Vec<T<'_>> = names.iter().map(|n| T(n, &[])).collect();
    let b = Batch::new(&tasks);
    let before = b.fx.tree();
    let tmp = b.fx.out().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let never = b.fx.out().join("never");
    let log = b.log();
    let env = [("TIMED_LOG", log.as_str()), ("TIMED_WAIT", never.to_str().unwrap()), ("TMPDIR", tmp.to_str().unwrap())];
    let mut child = b.fx.command(&["-j", "3"], &env).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while b.started().len() < 3 {
        assert!(Instant::now() < deadline, "three agents did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!processes_with(&b.marker).is_empty());
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let status = wait_with_limit(&mut child, Duration::from_secs(30));
    assert_eq!(status.code(), Some(130), "{status:?}");
    assert_eq!(b.started().len(), 3, "nothing starts after Ctrl-C");
    let left = processes_with(&b.marker);
    assert!(left.is_empty(), "processes left behind: {left:?}");
    let workspaces = tmp.join(format!("cassist-{}", unsafe { libc::getuid() }));
    let remaining: Vec<_> =
        std::fs::read_dir(&workspaces).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    assert!(remaining.is_empty(), "workspaces left: {remaining:?}");
    assert_same_tree(&b.fx.tree(), &before, "the user's tree changed");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(b.fx.report_path()).unwrap()).unwrap();
    for t in report["tasks"].as_array().unwrap() {
        assert_ne!(t["state"], "passed", "{t}");
    }
    assert!(!b.fx.path().join("cassist.lock").exists());
}

#[test]
fn without_a_terminal_progress_is_plain_lines() {
    let b = Batch::new(&[T("one", &[]), T("two", &["one"])]);
    let done = b.run(&["-j", "2"], &[("TIMED_SLEEP", "0")]);
    done.exit(0);
    for stream in [&done.stdout, &done.stderr] {
        assert!(!stream.contains('\u{1b}') && !stream.contains('\r'), "control characters:\n{stream:?}");
    }
    let lines: Vec<&str> = done.stderr.lines().collect();
    assert!(
        lines.contains(&"[0/2] one: workspace: overlay") || lines.contains(&"[0/2] one: workspace: copy"),
        "{}",
        done.stderr
    );
    assert!(lines.iter().any(|l| l.starts_with("[1/2] two: agent (attempt 1)")), "{}", done.stderr);
    assert!(done.stdout.contains("one passed in"), "{}", done.stdout);

    // -q: only failures and the summary.
    let b = Batch::new(&[T("ok", &[]), T("bad", &[])]);
    let done = b.run(&["-q", "-j", "1", "--keep-going"], &[("TIMED_FAIL", "bad"), ("TIMED_SLEEP", "0")]);
    done.exit(1);
    assert_eq!(done.stderr, "", "no progress with -q");
    assert!(!done.stdout.contains("ok passed"), "{}", done.stdout);
    assert!(done.stdout.contains("bad blocked"), "{}", done.stdout);
    assert!(done.stdout.contains("TASK"), "the summary is printed:\n{}", done.stdout);
}

/// Runs `cassist run ARGS` under a pseudo-terminal; all it wrote.
fn run_in_pty(b: &Batch, args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let script = r#"
import os, pty, sys
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
out = b""
while True:
    try:
        chunk = os.read(fd, 65536)
    except OSError:
        break
    if not chunk:
        break
    out += chunk
_, status = os.waitpid(pid, 0)
sys.stdout.buffer.write(out)
sys.exit(os.waitstatus_to_exitcode(status))
"#;
    let mut cmd = std::process::Command::new("python3");
    cmd.arg("-c").arg(script).arg(env!("CARGO_BIN_EXE_cassist")).arg("run").args(args);
    cmd.current_dir(b.fx.path()).env_clear().env("PATH", std::env::var_os("PATH").unwrap_or_default());
    cmd.env("HOME", b.fx.out()).env("TERM", "xterm-256color").env("TIMED_LOG", b.log());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn on_a_terminal_bars_are_drawn_and_cleared() {
    let tasks = [T("alpha", &[]), T("beta", &[]), T("gamma", &["alpha"])];
    let b = Batch::new(&tasks);
    let (code, out) = run_in_pty(&b, &["-j", "2"], &[("TIMED_SLEEP", "1.2")]);
    assert_eq!(code, 0, "{out}");
    let raw = out;
    let out = strip_ansi(&raw);
    // The overall bar and a line per running task, with its phase.
    assert!(out.contains("cassist ["), "no overall bar:\n{out:?}");
    assert!(out.contains("/3 "), "{out:?}");
    assert!(out.contains("alpha") && out.contains("agent (attempt 1)"), "no task line:\n{out:?}");
    assert!(raw.contains("\u{1b}[2K"), "no terminal control at all:\n{raw:?}");
    // Finished cleanly: the summary comes last, after the bars were
    // cleared, with nothing drawn after it.
    let summary = out.rfind("TASK").expect("a summary table");
    let after = &out[summary..];
    assert!(!after.contains("cassist ["), "a bar was drawn after the summary:\n{after:?}");
    assert!(after.contains("3 of 3 task(s) passed"), "{after:?}");
    // The last thing written before the summary erases the bar's line.
    let raw_summary = raw.rfind("TASK").unwrap();
    let last_frame = &raw[..raw_summary];
    let tail = &last_frame[last_frame.rfind("cassist").unwrap()..];
    assert!(tail.contains("\r\u{1b}[2K"), "the bars were not cleared before the summary:\n{tail:?}");

    // NO_COLOR: bars still, but no colour at all.
    let b = Batch::new(&[T("solo", &[])]);
    let (code, raw) = run_in_pty(&b, &[], &[("TIMED_SLEEP", "0.5"), ("NO_COLOR", "1")]);
    assert_eq!(code, 0, "{raw:?}");
    assert!(strip_ansi(&raw).contains("cassist ["), "{raw:?}");
    for colour in ["\u{1b}[1m", "\u{1b}[2m", "\u{1b}[32m", "\u{1b}[36m"] {
        assert!(!raw.contains(colour), "{colour:?} with NO_COLOR:\n{raw:?}");
    }
}

/// `text` without its terminal escape sequences.
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[test]
fn junit_report_parses_and_matches_the_json_report() {
    let tasks = [T("a-ok", &[]), T("b-fails", &[]), T("c-needs-b", &["b-fails"]), T("d-ok", &[])];
    let b = Batch::new(&tasks);
    let junit = b.fx.out().join("junit.xml");
    let done = b.run(
        &["--keep-going", "--junit", junit.to_str().unwrap()],
        &[("TIMED_FAIL", "b-fails"), ("TIMED_SLEEP", "0"), ("GITHUB_ACTIONS", "true")],
    );
    done.exit(1);
    let xml = std::fs::read_to_string(&junit).unwrap();
    let doc = roxmltree::Document::parse(&xml).unwrap_or_else(|e| panic!("invalid XML ({e}):\n{xml}"));
    let suite = doc.descendants().find(|n| n.has_tag_name("testsuite")).unwrap();
    let json = done.json();
    let count = |a: &str| suite.attribute(a).unwrap().parse::<u64>().unwrap();
    assert_eq!(count("tests"), json["tasks"].as_array().unwrap().len() as u64);
    assert_eq!(count("failures"), json["failed"].as_u64().unwrap() + json["blocked"].as_u64().unwrap());
    assert_eq!(count("skipped"), 1);
    let cases: Vec<roxmltree::Node<'_, '_>> = suite.children().filter(|n| n.has_tag_name("testcase")).collect();
    assert_eq!(cases.len(), 4);
    let case = |n: &str| *cases.iter().find(|c| c.attribute("name") == Some(n)).unwrap();
    let failure = case("b-fails").children().find(|n| n.has_tag_name("failure")).expect("a <failure>");
    assert!(failure.attribute("message").unwrap().contains("told to fail"), "{xml}");
    assert!(case("c-needs-b").children().any(|n| n.has_tag_name("skipped")));
    assert!(case("a-ok").children().all(|n| !n.has_tag_name("failure")));
    let out = case("a-ok").children().find(|n| n.has_tag_name("system-out")).unwrap().text().unwrap();
    assert!(out.contains("summary:\nwrote out/a-ok.txt"), "{out}");
    assert!(out.contains("transcript: "), "{out}");
    assert_eq!(case("a-ok").attribute("file"), Some("tasks/t.kdl"));

    // On GitHub Actions the failure is also an annotation on the task's node.
    let line = tasks_kdl(&tasks).lines().position(|l| l.starts_with("task \"b-fails\"")).unwrap() + 1;
    let annotation = format!("::error file=tasks/t.kdl,line={line},title=cassist%3A task b-fails blocked::");
    assert!(done.stdout.lines().any(|l| l.starts_with(&annotation)), "no {annotation} in:\n{}", done.stdout);
    assert_eq!(done.stdout.lines().filter(|l| l.starts_with("::error")).count(), 1);

    // A project below the checkout: the path is the checkout's.
    let checkout = b.fx.path().parent().unwrap().to_str().unwrap().to_owned();
    let done = b.run(
        &["--keep-going"],
        &[("TIMED_FAIL", "b-fails"), ("GITHUB_ACTIONS", "true"), ("GITHUB_WORKSPACE", &checkout)],
    );
    let project = b.fx.path().file_name().unwrap().to_str().unwrap();
    let annotation = format!("::error file={project}/tasks/t.kdl,line={line},");
    assert!(done.stdout.lines().any(|l| l.starts_with(&annotation)), "no {annotation} in:\n{}", done.stdout);
}

#[test]
fn a_reader_that_goes_away_does_not_end_the_run() {
    use std::io::BufRead;
    let tasks = [T("a", &[]), T("b-fails", &[]), T("c", &[]), T("d", &[])];
    let b = Batch::new(&tasks);
    let log = b.log();
    let env = [("TIMED_LOG", log.as_str()), ("TIMED_SLEEP", "0.3"), ("TIMED_FAIL", "b-fails")];
    let mut child =
        b.fx.command(&["-j", "1", "--keep-going"], &env).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    // `cassist run | head -1`: one line, then the pipe is closed.
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert!(first.starts_with("a passed"), "{first}");
    let status = wait_with_limit(&mut child, Duration::from_secs(60));
    assert_eq!(status.code(), Some(1), "the run's own exit code, not a quiet 0");
    assert_eq!(b.started(), ["a", "b-fails", "c", "d"]);
    for t in ["a", "c", "d"] {
        assert!(b.fx.path().join(format!("out/{t}.txt")).exists(), "{t} was not integrated");
    }
    let report: Value = serde_json::from_str(&std::fs::read_to_string(b.fx.report_path()).unwrap()).unwrap();
    assert_eq!(report["passed"], 3);
}
