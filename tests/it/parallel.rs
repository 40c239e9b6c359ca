//! Batch runs (SPEC 5 `run`, issue 7): the parallel scheduler, fail-fast
//! and `--keep-going`, `--shard`, `--max-cost`, Ctrl-C, the progress
//! output on and off a terminal, JUnit and GitHub annotations.
//!
//! The agent is `fixtures/agents/timed.sh`: it logs when each task starts
//! and ends, and writes `out/<task>.txt` listing the outputs it saw.

use std::collections::BTreeSet;
use std::io::BufRead;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::support::{
    Cmd, Key, Project, Test, assert_same_tree, names as task_names, processes_with, signal, task, unique_marker,
    wait_until, wait_with_limit, workspaces_in,
};

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

/// A project whose tasks all run `timed.sh`, and the marker on the agents'
/// command lines.
struct Batch {
    p: Project,
    marker: String,
}

impl Batch {
    fn new(tasks: &[T<'_>]) -> Batch {
        Batch::with_config(tasks, "")
    }

    /// With `config` added to `cassist.kdl`.
    fn with_config(tasks: &[T<'_>], config: &str) -> Batch {
        let marker = unique_marker("timed");
        let env =
            ["TIMED_LOG", "TIMED_SLEEP", "TIMED_WAIT", "TIMED_COST", "TIMED_FAIL", "TIMED_BARRIER", "TIMED_AWAIT"];
        let p = Test::trusted()
            .kdl(&format!("{config}\ndefaults {{\n    agent \"timed\"\n}}\n"))
            .agent("timed", "timed.sh", &[&marker], &env)
            .tasks(&tasks_kdl(tasks))
            .file("out/.keep", "")
            .git()
            .build();
        std::fs::create_dir_all(p.out().join("log")).unwrap();
        Batch { p, marker }
    }

    fn log(&self) -> String {
        self.p.out().join("log").display().to_string()
    }

    /// `cassist run ARGS` with the agents' log.
    fn run(&self, args: &[&str]) -> Cmd {
        let mut cmd = self.p.run(args);
        cmd.env("TIMED_LOG", self.log());
        cmd
    }

    /// The agents' events in the order they happened: `(what, task)` with
    /// `what` one of start, end.
    fn events(&self) -> Vec<(String, String)> {
        let text = std::fs::read_to_string(self.p.out().join("log/events")).unwrap_or_default();
        text.lines()
            .map(|l| {
                let mut words = l.split(' ');
                (words.next().unwrap().to_owned(), words.next().unwrap().to_owned())
            })
            .collect()
    }

    /// Where `what task` is in the events (the first time).
    #[track_caller]
    fn at(&self, what: &str, task: &str) -> usize {
        let events = self.events();
        events
            .iter()
            .position(|(w, t)| w == what && t == task)
            .unwrap_or_else(|| panic!("no {what} {task}: {events:?}"))
    }

    fn started(&self) -> Vec<String> {
        self.events().into_iter().filter(|(w, _)| w == "start").map(|(_, t)| t).collect()
    }

    fn ended(&self) -> Vec<String> {
        self.events().into_iter().filter(|(w, _)| w == "end").map(|(_, t)| t).collect()
    }

    /// The most agent runs under way at one moment.
    fn max_overlap(&self) -> usize {
        let (mut now, mut max) = (0i32, 0i32);
        for (what, _) in self.events() {
            now += if what == "start" { 1 } else { -1 };
            max = max.max(now);
        }
        max as usize
    }
}

fn names(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("t{i:02}")).collect()
}

#[test]
fn twelve_independent_tasks_run_four_at_a_time_and_all_integrate() {
    let names = names(12);
    let tasks: Vec<T<'_>> = names.iter().map(|n| T(n, &[])).collect();
    let b = Batch::new(&tasks);
    // Each agent waits until the group of four it started in is complete:
    // with -j 4 the run ends only when four at a time really ran at once
    // (else the agents give up and report failure).
    let done = b.run(&["-j", "4"]).env("TIMED_BARRIER", "4").exec();
    assert_eq!(b.ended().len(), 12, "{}", done.transcript());
    assert_eq!(b.max_overlap(), 4, "at most 4 at once, and 4 in parallel: {:?}", b.events());
    for n in &names {
        assert!(b.p.read(&format!("out/{n}.txt")).starts_with("saw: "), "out/{n}.txt not integrated");
    }
    assert_eq!(done.report_json()["passed"], 12);
}

#[test]
fn integrations_happen_one_at_a_time() {
    // The `build` command runs inside the integration: it says when it
    // starts and ends (in the task's build.log), and takes a while.
    let build = "echo start $(date +%s.%N); sleep 0.3; echo end $(date +%s.%N)";
    let names = names(6);
    let tasks: Vec<T<'_>> = names.iter().map(|n| T(n, &[])).collect();
    let b = Batch::with_config(&tasks, &format!("build {build:?}"));
    // The six agents run at once and end together, so all six are ready to
    // integrate at the same moment.
    b.run(&["-j", "6"]).env("TIMED_BARRIER", "6").exec();
    let mut lines: Vec<(f64, String)> = Vec::new();
    for n in &names {
        let log = std::fs::read_to_string(b.p.records(n).join("build.log")).unwrap();
        lines.extend(log.lines().map(|l| (l.split(' ').nth(1).unwrap().parse().unwrap(), l.to_owned())));
    }
    lines.sort_by(|a, b| a.0.total_cmp(&b.0));
    let text: String = lines.iter().map(|(_, l)| format!("{l}\n")).collect();
    let times: Vec<f64> = lines.iter().map(|(t, _)| *t).collect();
    assert_eq!(times.len(), 12, "{text}");
    let kinds: Vec<&str> = text.lines().map(|l| l.split(' ').next().unwrap()).collect();
    assert_eq!(kinds, ["start", "end"].repeat(6), "integrations overlapped:\n{text}");
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{text}");
    // The agents themselves did overlap.
    assert_eq!(b.max_overlap(), 6, "{:?}", b.events());
}

#[test]
fn a_task_starts_only_after_its_dependencies_integrated() {
    let tasks =
        [T("base", &[]), T("left", &["base"]), T("right", &["base"]), T("top", &["left", "right"]), T("alone", &[])];
    let b = Batch::new(&tasks);
    // Independent tasks wait for each other to start: they overlap.
    let meet = "base=start:alone alone=start:base left=start:right right=start:left";
    b.run(&["-j", "4"]).env("TIMED_AWAIT", meet).env("TIMED_SLEEP", "0").exec();
    for (task, deps) in [("left", vec!["base"]), ("right", vec!["base"]), ("top", vec!["left", "right"])] {
        let seen = b.p.read(&format!("out/{task}.txt"));
        for d in deps {
            assert!(b.at("start", task) > b.at("end", d), "{task} started before {d} ended: {:?}", b.events());
            assert!(seen.contains(&format!("{d}.txt")), "{task} did not see {d}'s integrated output: {seen}");
        }
    }
    assert!(b.max_overlap() >= 2, "{:?}", b.events());
}

#[test]
fn fail_fast_starts_nothing_after_a_failure_but_lets_running_tasks_finish() {
    let tasks = [T("a-fails", &[]), T("b-slow", &[]), T("c", &[]), T("d", &[]), T("e", &[])];
    let b = Batch::new(&tasks);
    // b-slow is still running when a-fails has failed: it ends only once
    // cassist has reported that failure.
    let go = b.p.out().join("go");
    let mut run = b
        .run(&["-j", "2"])
        .env("TIMED_FAIL", "a-fails")
        .env("TIMED_SLEEP", "0")
        .env("TIMED_AWAIT", format!("b-slow=file:{}", go.display()))
        .status(1)
        .spawn();
    run.wait_for_stdout("a-fails blocked");
    std::fs::write(&go, "").unwrap();
    let done = run.finish();
    let mut started = b.started();
    started.sort();
    assert_eq!(started, ["a-fails", "b-slow"], "{}", done.transcript());
    assert!(b.at("end", "a-fails") < b.at("end", "b-slow"), "{:?}", b.events());
    let json = done.report_json();
    assert_eq!(task_names(&json)[..2], ["a-fails", "b-slow"]);
    assert_eq!(task(&json, "a-fails")["state"], "blocked");
    assert_eq!(task(&json, "b-slow")["state"], "passed", "a running task finishes");
    assert!(b.p.exists("out/b-slow.txt"));
    for t in &json["tasks"].as_array().unwrap()[2..] {
        assert_eq!(t["state"], "skipped");
        assert!(t["reason"].as_str().unwrap().contains("`a-fails` failed"), "{t}");
    }
}

#[test]
fn keep_going_runs_everything_that_does_not_depend_on_a_failure() {
    let tasks =
        [T("a-fails", &[]), T("b-needs-a", &["a-fails"]), T("c-needs-b", &["b-needs-a"]), T("d", &[]), T("e", &[])];
    let b = Batch::new(&tasks);
    let done =
        b.run(&["-j", "2", "--keep-going"]).env("TIMED_FAIL", "a-fails").env("TIMED_SLEEP", "0").status(1).exec();
    let started: BTreeSet<String> = b.started().into_iter().collect();
    assert_eq!(started, ["a-fails", "d", "e"].iter().map(|s| s.to_string()).collect());
    let json = done.report_json();
    assert_eq!(task(&json, "b-needs-a")["state"], "skipped");
    assert_eq!(task(&json, "b-needs-a")["reason"], "dependency `a-fails` did not pass");
    assert_eq!(task(&json, "c-needs-b")["reason"], "dependency `b-needs-a` did not pass");
    assert_eq!(task(&json, "d")["state"], "passed");
    assert_eq!(task(&json, "e")["state"], "passed");
}

#[test]
fn the_shards_together_run_every_task_exactly_once() {
    let names = names(10);
    let tasks: Vec<T<'_>> = names.iter().map(|n| T(n, &[])).collect();
    let b = Batch::new(&tasks);
    let mut ran: Vec<String> = Vec::new();
    for k in 1..=3 {
        let before = b.started().len();
        let done = b.run(&["--shard", &format!("{k}/3")]).env("TIMED_SLEEP", "0").exec();
        let mine: Vec<String> = b.started()[before..].to_vec();
        let reported = task_names(&done.report_json());
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
    b.run(&["--shard", &format!("{k_dep}/3")])
        .status(2)
        .stderr_has(&format!(
            "task `{dependent}` depends on `base`, which is in another shard and is not up to date (state run)"
        ))
        .exec();
    assert!(b.started().is_empty(), "nothing may start");
    // Once base's shard ran, the dependent's can.
    b.run(&["--shard", &format!("{k_base}/3")]).exec();
    b.run(&["--shard", &format!("{k_dep}/3")]).exec();
    assert_eq!(b.started(), ["base", dependent.as_str()]);
}

#[test]
fn max_cost_stops_starting_agents_once_spend_reaches_it() {
    let names = names(6);
    let tasks: Vec<T<'_>> = names.iter().map(|n| T(n, &[])).collect();
    let b = Batch::new(&tasks);
    // The summary shows the cost.
    let done = b
        .run(&["-j", "1", "--max-cost", "1.00"])
        .env("TIMED_COST", "0.4")
        .env("TIMED_SLEEP", "0")
        .status(1)
        .stdout_has("$0.40")
        .exec();
    // 0.4, 0.8, 1.2: the third run reaches the budget; no fourth starts.
    assert_eq!(b.started(), ["t01", "t02", "t03"], "{}", done.transcript());
    let json = done.report_json();
    let tasks = json["tasks"].as_array().unwrap();
    for t in &tasks[..3] {
        assert_eq!(t["state"], "passed");
        assert_eq!(t["cost_usd"], 0.4);
    }
    for t in &tasks[3..] {
        assert_eq!(t["state"], "skipped");
        assert!(t["reason"].as_str().unwrap().contains("--max-cost $1.00 reached (agents reported $1.20)"), "{t}");
    }
}

#[test]
fn ctrl_c_in_a_parallel_run_leaves_no_process_and_a_consistent_tree() {
    let names = names(6);
    let tasks: Vec<T<'_>> = names.iter().map(|n| T(n, &[])).collect();
    let b = Batch::new(&tasks);
    let before = b.p.tree();
    let tmp = b.p.out().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let never = b.p.out().join("never");
    let run = b.run(&["-j", "3"]).env("TIMED_WAIT", &never).env("TMPDIR", &tmp).status(130).spawn();
    wait_until(Duration::from_secs(30), "three agents started", || b.started().len() >= 3);
    assert!(!processes_with(&b.marker).is_empty());
    signal(run.pid(), Signal::SIGINT);
    let done = run.finish_within(Duration::from_secs(30));
    assert_eq!(b.started().len(), 3, "nothing starts after Ctrl-C");
    let left = processes_with(&b.marker);
    assert!(left.is_empty(), "processes left behind: {left:?}");
    let remaining = workspaces_in(&tmp);
    assert!(remaining.is_empty(), "workspaces left: {remaining:?}");
    assert_same_tree(&b.p.tree(), &before, "the user's tree changed");
    for t in done.report_json()["tasks"].as_array().unwrap() {
        assert_ne!(t["state"], "passed", "{t}");
    }
    assert!(!b.p.exists("cassist.lock"));
}

#[test]
fn without_a_terminal_progress_is_plain_lines() {
    let b = Batch::new(&[T("one", &[]), T("two", &["one"])]);
    let done = b.run(&["-j", "2"]).env("TIMED_SLEEP", "0").stdout_has("one passed in").exec();
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
}

#[test]
fn quiet_prints_the_failures_and_the_count_only() {
    // -q (`--help`: "only failures and the summary"): no progress, no
    // table; a block per failed task, then the count, on success too.
    let b = Batch::new(&[T("ok", &[]), T("bad", &[])]);
    let done = b
        .run(&["-q", "-j", "1", "--keep-going"])
        .env("TIMED_FAIL", "bad")
        .env("TIMED_SLEEP", "0")
        .status(1)
        .stderr("")
        .stdout_lacks("ok passed")
        .stdout_lacks("TASK")
        .exec();
    let lines: Vec<&str> = done.stdout.lines().collect();
    assert_eq!(lines[0], "✗ bad: the agent reported that it cannot do the task: told to fail", "{}", done.stdout);
    assert!(lines[1..lines.len() - 1].iter().all(|l| l.starts_with("  ")), "{}", done.stdout);
    assert!(lines[lines.len() - 1].starts_with("1 of 2 task(s) passed; records in "), "{}", done.stdout);

    let b = Batch::new(&[T("ok", &[]), T("fine", &[])]);
    let done = b.run(&["-q"]).env("TIMED_SLEEP", "0").stderr("").exec();
    assert_eq!(done.stdout.lines().count(), 1, "{}", done.stdout);
    assert!(done.stdout.starts_with("2 of 2 task(s) passed; records in "), "{}", done.stdout);
}

/// `cassist run ARGS` on a pseudo-terminal (TERM=xterm-256color, no
/// NO_COLOR unless in `env`); all it wrote.
fn run_on_tty(b: &Batch, args: &[&str], env: &[(&str, &str)]) -> String {
    let mut cmd = b.p.cassist(&["run"]);
    cmd.args(args).env("TIMED_LOG", b.log()).unset("NO_COLOR").env("TERM", "xterm-256color").envs(env);
    cmd.on_tty().stdout
}

#[test]
fn on_a_terminal_bars_are_drawn_and_cleared() {
    let tasks = [T("alpha", &[]), T("beta", &[]), T("gamma", &["alpha"])];
    let b = Batch::new(&tasks);
    let raw = run_on_tty(&b, &["-j", "2"], &[("TIMED_SLEEP", "1.2")]);
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
    let raw = run_on_tty(&b, &[], &[("TIMED_SLEEP", "0.5"), ("NO_COLOR", "1")]);
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
    let junit = b.p.out().join("junit.xml");
    let done = b
        .run(&["--keep-going", "--junit", junit.to_str().unwrap()])
        .envs(&[("TIMED_FAIL", "b-fails"), ("TIMED_SLEEP", "0"), ("GITHUB_ACTIONS", "true")])
        .status(1)
        .exec();
    let xml = std::fs::read_to_string(&junit).unwrap();
    let doc = roxmltree::Document::parse(&xml).unwrap_or_else(|e| panic!("invalid XML ({e}):\n{xml}"));
    let suite = doc.descendants().find(|n| n.has_tag_name("testsuite")).unwrap();
    let json = done.report_json();
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
    let checkout = b.p.path().parent().unwrap().to_str().unwrap().to_owned();
    let done = b
        .run(&["--keep-going"])
        .envs(&[("TIMED_FAIL", "b-fails"), ("TIMED_SLEEP", "0"), ("GITHUB_ACTIONS", "true")])
        .env("GITHUB_WORKSPACE", &checkout)
        .status(1)
        .exec();
    let project = b.p.path().file_name().unwrap().to_str().unwrap();
    let annotation = format!("::error file={project}/tasks/t.kdl,line={line},");
    assert!(done.stdout.lines().any(|l| l.starts_with(&annotation)), "no {annotation} in:\n{}", done.stdout);
}

#[test]
fn a_reader_that_goes_away_does_not_end_the_run() {
    let tasks = [T("a", &[]), T("b-fails", &[]), T("c", &[]), T("d", &[])];
    let b = Batch::new(&tasks);
    // b-fails ends only once the reader is gone: its line and everything
    // after meet a closed pipe.
    let closed = b.p.out().join("closed");
    let (reader, writer) = std::io::pipe().unwrap();
    let mut cmd = b
        .run(&["-j", "1", "--keep-going"])
        .envs(&[("TIMED_SLEEP", "0"), ("TIMED_FAIL", "b-fails")])
        .env("TIMED_AWAIT", format!("b-fails=file:{}", closed.display()))
        .command();
    let mut child = cmd.stdout(writer.try_clone().unwrap()).stderr(writer).spawn().unwrap();
    drop(cmd);
    // `cassist run 2>&1 | head -1`: one line, then the pipe is closed.
    let mut first = String::new();
    std::io::BufReader::new(reader).read_line(&mut first).unwrap();
    assert!(first.starts_with("[0/4] a: "), "{first}");
    std::fs::write(&closed, "").unwrap();
    let status = wait_with_limit(&mut child, Duration::from_secs(60));
    assert_eq!(status.code(), Some(1), "the run's own exit code, not a quiet 0");
    assert_eq!(b.started(), ["a", "b-fails", "c", "d"]);
    for t in ["a", "c", "d"] {
        assert!(b.p.exists(&format!("out/{t}.txt")), "{t} was not integrated");
    }
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(b.p.report_path()).unwrap()).unwrap();
    assert_eq!(report["passed"], 3);
    assert_eq!(task_names(&report), ["a", "b-fails", "c", "d"]);
}

/// Tasks a, b and c (which depends on b) run once; then a's output is
/// deleted (a replays) and b's goal changes: b, and c through it, would
/// need an agent.
fn refused_by_locked() -> Batch {
    let b = Batch::new(&[T("a", &[]), T("b", &[]), T("c", &["b"])]);
    b.run(&[]).env("TIMED_SLEEP", "0").exec();
    std::fs::remove_file(b.p.path().join("out/a.txt")).unwrap();
    b.p.edit("tasks/t.kdl", "Write out/b.txt.", "Write out/b.txt, again.");
    b
}

#[test]
fn in_junit_a_task_locked_refused_is_a_failure() {
    let b = refused_by_locked();
    let junit = b.p.out().join("junit.xml");
    let done = b.run(&["--locked", "--junit", junit.to_str().unwrap()]).status(3).exec();
    let states: Vec<(String, String)> = done.states().into_iter().collect();
    let want = [("a", "replayed"), ("b", "skipped"), ("c", "skipped")].map(|(n, s)| (n.to_owned(), s.to_owned()));
    assert_eq!(states, want, "{}", done.transcript());
    let xml = std::fs::read_to_string(&junit).unwrap();
    let doc = roxmltree::Document::parse(&xml).unwrap_or_else(|e| panic!("invalid XML ({e}):\n{xml}"));
    for node in doc.descendants().filter(|n| n.has_tag_name("testsuites") || n.has_tag_name("testsuite")) {
        let counts: Vec<Option<&str>> = ["tests", "failures", "errors", "skipped"].map(|a| node.attribute(a)).to_vec();
        assert_eq!(counts, [Some("3"), Some("2"), Some("0"), Some("0")], "CI must show the red job red:\n{xml}");
    }
    let case = |n: &str| doc.descendants().find(|c| c.has_tag_name("testcase") && c.attribute("name") == Some(n));
    for name in ["b", "c"] {
        let failure = case(name).unwrap().children().find(|c| c.has_tag_name("failure")).expect("a <failure>");
        assert_eq!(failure.attribute("type"), Some("locked"), "{xml}");
        assert!(failure.attribute("message").unwrap().starts_with("--locked: an agent would be needed"), "{xml}");
    }
    assert!(case("a").unwrap().children().all(|c| !c.has_tag_name("failure") && !c.has_tag_name("skipped")));
}

#[test]
fn a_locked_run_into_a_closed_pipe_does_its_work_and_exits_3() {
    // `cassist run --locked 2>&1 | head -1`: the reader goes away after
    // the first line, or before cassist writes anything.
    for read_first_line in [true, false] {
        let b = refused_by_locked();
        let (reader, writer) = std::io::pipe().unwrap();
        let mut cmd = b.run(&["--locked"]).command();
        cmd.stdout(writer.try_clone().unwrap()).stderr(writer);
        if !read_first_line {
            drop(reader);
            let mut child = cmd.spawn().unwrap();
            drop(cmd);
            assert_done(&b, &mut child);
        } else {
            let mut child = cmd.spawn().unwrap();
            drop(cmd);
            let mut first = String::new();
            std::io::BufReader::new(reader).read_line(&mut first).unwrap();
            assert!(!first.is_empty());
            assert_done(&b, &mut child);
        }
    }

    fn assert_done(b: &Batch, child: &mut std::process::Child) {
        let status = wait_with_limit(child, Duration::from_secs(60));
        assert_eq!(status.code(), Some(3), "--locked's own exit code, not a panic (101)");
        assert!(b.p.exists("out/a.txt"), "a was not replayed");
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(b.p.report_path()).unwrap()).unwrap();
        assert_eq!(task(&report, "a")["state"], "replayed");
        assert_eq!(task(&report, "b")["state"], "skipped");
    }
}

#[test]
fn ctrl_c_on_a_terminal_says_what_it_stops_at_once_and_a_second_stops_at_once() {
    let marker = unique_marker("tty-ctrl-c");
    // Scoped apart, so that they run at the same time (two code tasks
    // without a scope would run one after the other).
    let tasks = "task \"alpha\" {\n    goal \"Hang.\"\n    scope {\n        path \"alpha.txt\"\n    }\n}\n\n\
                 task \"beta\" {\n    goal \"Hang.\"\n    scope {\n        path \"beta.txt\"\n    }\n}\n";
    let p = Test::trusted()
        .kdl("defaults {\n    agent \"hang\"\n}\n")
        .agent("hang", "hang.sh", &[&marker], &[])
        .tasks(tasks)
        .git()
        .build();
    let before = p.tree();
    let tmp = p.out().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let stopping = "stopping 2 agents… (Ctrl-C again to stop at once)";
    let tty = p.cassist(&["run", "-j", "2"]).env("TERM", "xterm-256color").env("TMPDIR", &tmp).status(130).on_tty_keys(
        30,
        100,
        &[
            Key::WaitFor("alpha agent (attempt 1)"),
            Key::WaitFor("beta agent (attempt 1)"),
            Key::Sleep(Duration::from_millis(500)),
            Key::Type("\u{3}"),
            Key::WaitFor(stopping),
            Key::Sleep(Duration::from_millis(1200)),
            Key::Type("\u{3}"),
            Key::WaitFor("stopping at once"),
        ],
    );
    let show = |screen: &[String]| screen.join("\n");
    // Said at once.
    let said = tty.marks[4].1 - tty.marks[3].1;
    assert!(said < 1.0, "`{stopping}` came {said:.2}s after Ctrl-C");
    // While the agents stop, the bars keep ticking, drawn once: the
    // terminal's `^C` left no stale copy of them.
    let (then, now) = (tty.screen_at(4), tty.screen_at(5));
    for screen in [&then, &now] {
        let bars = screen.iter().filter(|l| l.starts_with("cassist [")).count();
        assert_eq!(bars, 1, "the overall bar, once:\n{}", show(screen));
        assert_eq!(screen.iter().filter(|l| l.contains(stopping)).count(), 1, "{}", show(screen));
    }
    let task_lines =
        |s: &[String]| s.iter().filter(|l| l.contains(" alpha ") || l.contains(" beta ")).cloned().collect::<Vec<_>>();
    assert_eq!(task_lines(&now).len(), 2, "{}", show(&now));
    assert_ne!(task_lines(&then), task_lines(&now), "the bars stood still while stopping");
    // The second Ctrl-C kills what still runs (they ignore SIGTERM: the
    // grace would have taken 4.5 s more) and still cleans up.
    let took = tty.seconds_after(6);
    assert!(took < 3.0, "cassist ended {took:.2}s after the second Ctrl-C");
    let end = tty.screen();
    assert!(end.iter().any(|l| l.contains("stopping at once")), "{}", show(&end));
    assert!(
        !end.iter().any(|l| l.starts_with("cassist [") || l.contains("agent (attempt")),
        "bars left:\n{}",
        show(&end)
    );
    for t in ["alpha", "beta"] {
        let row = end.iter().find(|l| l.starts_with(&format!("{t} "))).unwrap_or_else(|| panic!("{}", show(&end)));
        assert!(row.contains(" interrupted "), "{row}");
    }
    assert!(processes_with(&marker).is_empty(), "processes left: {:?}", processes_with(&marker));
    assert!(workspaces_in(&tmp).is_empty(), "workspaces left: {:?}", workspaces_in(&tmp));
    assert_same_tree(&p.tree(), &before, "the user's tree changed");
}
