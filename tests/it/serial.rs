//! Tasks whose scopes may overlap never run at the same time: the later
//! one (in run order, then by name) starts once the earlier one has ended
//! and its change is in the tree, so two tasks editing one file both land
//! at any `-j`, and `cassist.lock` is the same at `-j 1` and `-j 8` but
//! for its dates. Tasks that change no file (explore, review) and tasks
//! with disjoint scopes still run at the same time; a code task without a
//! scope runs alone, and `plan` warns about it.
//!
//! The agent is `fixtures/agents/scripted.sh`: it logs when each task
//! starts and ends, keeps a copy of each file it edits as it found it, and
//! waits for another task to start where told (two tasks that wait for
//! each other pass only when they run at the same time).

use std::collections::{BTreeMap, BTreeSet};

use crate::support::{Project, Test, snapshot, task};

/// A project's files by path, with their text.
type Files = BTreeMap<String, String>;

/// A project whose tasks all run `scripted.sh`.
struct Scripted {
    p: Project,
}

impl Scripted {
    fn new(tasks: &str, files: &[(&str, &str)]) -> Scripted {
        let mut t = Test::trusted()
            .kdl("defaults {\n    agent \"scripted\"\n}\n")
            .agent("scripted", "scripted.sh", &[], &["SCRIPTED_LOG", "SCRIPTED_RULES"])
            .tasks(tasks);
        for (path, text) in files {
            t = t.file(path, text);
        }
        let p = t.git().build();
        std::fs::create_dir_all(p.out().join("log")).unwrap();
        Scripted { p }
    }

    /// `cassist run ARGS` with the agents' rules.
    fn run(&self, rules: &str, args: &[&str]) -> crate::support::Cmd {
        let mut cmd = self.p.run(args);
        cmd.env("SCRIPTED_LOG", self.p.out().join("log")).env("SCRIPTED_RULES", rules);
        cmd
    }

    /// The agents' events in the order they happened: `(what, task)`.
    fn events(&self) -> Vec<(String, String)> {
        let text = std::fs::read_to_string(self.p.out().join("log/events")).unwrap_or_default();
        text.lines()
            .map(|l| {
                let (what, task) = l.split_once(' ').unwrap();
                (what.to_owned(), task.to_owned())
            })
            .collect()
    }

    /// Where `what task` is in the events.
    #[track_caller]
    fn at(&self, what: &str, task: &str) -> usize {
        let events = self.events();
        events
            .iter()
            .position(|(w, t)| w == what && t == task)
            .unwrap_or_else(|| panic!("no {what} {task}: {events:?}"))
    }

    /// `later` started only after `earlier` ended.
    #[track_caller]
    fn after(&self, later: &str, earlier: &str) {
        assert!(
            self.at("start", later) > self.at("end", earlier),
            "{later} started before {earlier} ended: {:?}",
            self.events()
        );
    }

    /// `a` and `b` ran at the same time: each started before the other
    /// ended.
    #[track_caller]
    fn together(&self, a: &str, b: &str) {
        assert!(
            self.at("start", a) < self.at("end", b) && self.at("start", b) < self.at("end", a),
            "{a} and {b} did not run at the same time: {:?}",
            self.events()
        );
    }

    /// The file `path` as `task`'s agent found it in its workspace.
    #[track_caller]
    fn seen(&self, task: &str, path: &str) -> String {
        let file = self.p.out().join("log/seen").join(task).join(path);
        std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
    }

    /// The project's files but `.git/` and `.cassist/`, each with its
    /// text (folders left out: they follow from the files).
    fn tree(&self) -> Files {
        snapshot(self.p.path(), &[".git", ".cassist"])
            .into_iter()
            .filter(|(_, bytes)| bytes.as_slice() != b"<dir>")
            .map(|(path, bytes)| (path.display().to_string(), String::from_utf8(bytes).expect("a text file")))
            .collect()
    }

    /// The task names of `cassist.lock`.
    fn locked(&self) -> BTreeSet<String> {
        let lock = cassist_core::lock::Lock::load(self.p.path()).expect("cassist.lock reads");
        lock.tasks.keys().cloned().collect()
    }
}

/// `before` with `changes` (path, text) and the lock file as it is now.
fn expected(s: &Scripted, before: &Files, changes: &[(&str, &str)]) -> Files {
    let mut want = before.clone();
    for (path, text) in changes {
        want.insert((*path).to_owned(), (*text).to_owned());
    }
    want.insert("cassist.lock".to_owned(), s.p.read("cassist.lock"));
    want
}

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

const NOTES: &str = "line one\nline two\n";

const NOTES_TASKS: &str = r#"
task "first" {
    goal "Change line 1 of notes.txt."
    context {
        file "notes.txt"
    }
    scope {
        path "notes.txt"
    }
}

task "look" {
    goal "Read notes.txt."
    kind "explore"
    context {
        file "notes.txt"
    }
}

task "second" {
    goal "Append a line to notes.txt."
    context {
        file "notes.txt"
    }
    scope {
        path "notes.txt"
    }
}
"#;

#[test]
fn two_tasks_editing_one_file_in_a_parallel_run_both_land() {
    let s = Scripted::new(NOTES_TASKS, &[("notes.txt", NOTES)]);
    let before = s.tree();
    // `first` and `look` wait for each other: they run at the same time
    // (an explore task overlaps nothing); `second` would too, were it not
    // for the scope it shares with `first`.
    let rules = "first=await:look first=line1:notes.txt look=await:first second=append:notes.txt";
    let done = s.run(rules, &["-j", "4"]).exec();
    let json = done.report_json();
    for t in ["first", "look", "second"] {
        assert_eq!(task(&json, t)["state"], "passed", "{t}: {}", done.transcript());
    }
    s.together("first", "look");
    s.after("second", "first");
    // Each edit was made on the file as the one before left it.
    assert_eq!(s.seen("first", "notes.txt"), NOTES);
    assert_eq!(s.seen("second", "notes.txt"), "edited by first\nline two\n");
    let notes = "edited by first\nline two\nadded by second\n";
    assert_eq!(s.tree(), expected(&s, &before, &[("notes.txt", notes)]));
    assert_eq!(s.locked(), names(&["first", "look", "second"]));

    // Then `plan`, `run`, `plan`: every task up-to-date, both edits stay,
    // nothing is written again.
    let planned = |when: &str| {
        let plan = s.p.cassist(&["plan", "--json"]).exec();
        for t in plan.json()["tasks"].as_array().unwrap() {
            assert_eq!(t["state"], "up-to-date", "{when}: {}", plan.transcript());
        }
    };
    planned("after the run");
    let lock = s.p.read("cassist.lock");
    let again = s.run(rules, &["-j", "4"]).exec();
    for t in ["first", "look", "second"] {
        assert_eq!(task(&again.report_json(), t)["state"], "up-to-date", "{t}: {}", again.transcript());
    }
    assert_eq!(s.p.read("notes.txt"), notes, "{}", again.transcript());
    assert_eq!(s.p.read("cassist.lock"), lock);
    planned("after the second run");
}

#[test]
fn a_failed_task_does_not_hold_back_a_later_overlapping_one() {
    let tasks = format!(
        "{NOTES_TASKS}\ntask \"third\" {{\n    goal \"Append again.\"\n    depends-on \"first\"\n    scope {{\n        path \"notes.txt\"\n    }}\n}}\n"
    );
    let s = Scripted::new(&tasks, &[("notes.txt", NOTES)]);
    let before = s.tree();
    let rules = "first=fail second=append:notes.txt third=append:notes.txt";
    let done = s.run(rules, &["-j", "4", "--keep-going"]).status(1).exec();
    let json = done.report_json();
    assert_eq!(task(&json, "first")["state"], "blocked", "{}", done.transcript());
    assert_eq!(task(&json, "second")["state"], "passed", "{}", done.transcript());
    // What depends on the failure is skipped, overlapping or not.
    assert_eq!(task(&json, "third")["state"], "skipped");
    assert_eq!(task(&json, "third")["reason"], "dependency `first` did not pass");
    s.after("second", "first");
    // `second` started from a tree without the failed change.
    assert_eq!(s.seen("second", "notes.txt"), NOTES);
    let notes = "line one\nline two\nadded by second\n";
    assert_eq!(s.tree(), expected(&s, &before, &[("notes.txt", notes)]));
    assert_eq!(s.locked(), names(&["look", "second"]));
}

/// Overlapping and disjoint tasks: two on one file, a folder and a file in
/// it, a task without a scope, a glob over a folder, a dependency, an
/// explore task.
const MIXED_TASKS: &str = r#"
task "a-src" {
    goal "Append to src/log.txt."
    context {
        file "src/log.txt"
    }
    scope {
        path "src/**"
    }
}

task "b-log" {
    goal "Append to src/log.txt."
    context {
        file "src/log.txt"
    }
    scope {
        path "src/log.txt"
    }
}

task "c-docs" {
    goal "Append to docs/c.md."
    context {
        file "docs/c.md"
    }
    scope {
        path "docs/c.md"
    }
}

task "d-all" {
    goal "Append to src/log.txt and write docs/d.md."
    context {
        file "src/log.txt"
    }
}

task "e-look" {
    goal "Read the README."
    kind "explore"
    context {
        file "README.md"
    }
}

task "f-docs" {
    goal "Append to docs/c.md and write docs/f.md."
    context {
        file "docs/c.md"
    }
    scope {
        path "docs/*.md"
    }
}

task "g-other" {
    goal "Write other/g.txt."
    scope {
        path "other/g.txt"
    }
}

task "h-src" {
    goal "Write src/h/h.txt."
    scope {
        path "src/h/**"
    }
}

task "i-dep" {
    goal "Append to docs/c.md."
    depends-on "c-docs"
    context {
        file "docs/c.md"
    }
    scope {
        path "docs/c.md"
    }
}
"#;

const MIXED_RULES: &str = "a-src=append:src/log.txt b-log=append:src/log.txt c-docs=append:docs/c.md \
     d-all=append:src/log.txt d-all=append:docs/d.md f-docs=append:docs/c.md f-docs=append:docs/f.md \
     g-other=append:other/g.txt h-src=append:src/h/h.txt i-dep=append:docs/c.md";

const MIXED_FILES: &[(&str, &str)] = &[("src/log.txt", "log\n"), ("docs/c.md", "# C\n"), ("README.md", "readme\n")];

/// `cassist.lock` without its `date` lines.
fn lock_without_dates(s: &Scripted) -> String {
    let text = s.p.read("cassist.lock");
    text.lines().filter(|l| !l.trim_start().starts_with("date ")).map(|l| format!("{l}\n")).collect()
}

#[test]
fn the_lock_is_the_same_at_j1_and_j8_but_for_its_dates() {
    let mut runs = Vec::new();
    for jobs in ["1", "8"] {
        let s = Scripted::new(MIXED_TASKS, MIXED_FILES);
        let before = s.tree();
        let done = s.run(MIXED_RULES, &["-j", jobs]).exec();
        assert_eq!(done.report_json()["passed"], 9, "-j {jobs}: {}", done.transcript());
        let want = expected(
            &s,
            &before,
            &[
                ("src/log.txt", "log\nadded by a-src\nadded by b-log\nadded by d-all\n"),
                ("docs/c.md", "# C\nadded by c-docs\nadded by f-docs\nadded by i-dep\n"),
                ("docs/d.md", "added by d-all\n"),
                ("docs/f.md", "added by f-docs\n"),
                ("other/g.txt", "added by g-other\n"),
                ("src/h/h.txt", "added by h-src\n"),
            ],
        );
        assert_eq!(s.tree(), want, "-j {jobs}");
        // The overlapping ones ran in order, each from the tree the one
        // before left.
        for (later, earlier) in [
            ("b-log", "a-src"),
            ("d-all", "a-src"),
            ("d-all", "b-log"),
            ("d-all", "c-docs"),
            ("f-docs", "c-docs"),
            ("f-docs", "d-all"),
            ("g-other", "d-all"),
            ("h-src", "a-src"),
            ("h-src", "d-all"),
            ("i-dep", "f-docs"),
        ] {
            s.after(later, earlier);
        }
        assert_eq!(s.seen("d-all", "src/log.txt"), "log\nadded by a-src\nadded by b-log\n", "-j {jobs}");
        assert_eq!(s.seen("i-dep", "docs/c.md"), "# C\nadded by c-docs\nadded by f-docs\n", "-j {jobs}");
        assert_eq!(s.locked().len(), 9, "-j {jobs}");
        runs.push(lock_without_dates(&s));
    }
    assert_eq!(runs[0], runs[1], "cassist.lock at -j 1, then at -j 8");
}

#[test]
fn tasks_with_disjoint_scopes_still_run_at_the_same_time() {
    let tasks = r#"
task "left" {
    goal "Write src/a/x.txt."
    scope {
        path "src/a/**"
    }
}

task "right" {
    goal "Append to src/b.rs."
    scope {
        path "src/b.rs"
    }
}
"#;
    let s = Scripted::new(tasks, &[("src/b.rs", "fn b() {}\n")]);
    let before = s.tree();
    // Each waits for the other to start: both pass only side by side.
    let rules = "left=await:right left=append:src/a/x.txt right=await:left right=append:src/b.rs";
    let done = s.run(rules, &["-j", "2"]).exec();
    assert_eq!(done.report_json()["passed"], 2, "{}", done.transcript());
    s.together("left", "right");
    let want =
        expected(&s, &before, &[("src/a/x.txt", "added by left\n"), ("src/b.rs", "fn b() {}\nadded by right\n")]);
    assert_eq!(s.tree(), want);
    assert_eq!(s.locked(), names(&["left", "right"]));
}

const UNSCOPED_TASKS: &str = r#"
task "a-unscoped" {
    goal "Write a.txt and append to notes.txt."
}

task "b-look" {
    goal "Look around."
    kind "explore"
}

task "c-review" {
    goal "Review."
    kind "review"
}

task "d-scoped" {
    goal "Write d.txt."
    scope {
        path "d.txt"
    }
}

task "e-scoped" {
    goal "Write e.txt."
    scope {
        path "e.txt"
    }
}

task "g-unscoped" {
    goal "Append to notes.txt."
}

task "h-scoped" {
    goal "Append to notes.txt."
    scope {
        path "notes.txt"
    }
}
"#;

#[test]
fn a_task_without_a_scope_runs_alone_but_explore_and_review_tasks_run_beside_it() {
    let s = Scripted::new(UNSCOPED_TASKS, &[("notes.txt", "notes\n")]);
    let before = s.tree();
    let rules = "a-unscoped=await:b-look a-unscoped=await:c-review a-unscoped=append:a.txt a-unscoped=append:notes.txt \
         b-look=await:a-unscoped c-review=await:a-unscoped \
         d-scoped=await:e-scoped d-scoped=append:d.txt e-scoped=await:d-scoped e-scoped=append:e.txt \
         g-unscoped=append:notes.txt h-scoped=append:notes.txt";
    let done = s.run(rules, &["-j", "4"]).exec();
    assert_eq!(done.report_json()["passed"], 7, "{}", done.transcript());
    // Read-only tasks ran beside the unscoped one...
    s.together("a-unscoped", "b-look");
    s.together("a-unscoped", "c-review");
    // ...code tasks did not: before it, after it, and disjoint ones side by
    // side between two unscoped ones.
    for (later, earlier) in [
        ("d-scoped", "a-unscoped"),
        ("e-scoped", "a-unscoped"),
        ("g-unscoped", "d-scoped"),
        ("g-unscoped", "e-scoped"),
        ("h-scoped", "g-unscoped"),
    ] {
        s.after(later, earlier);
    }
    s.together("d-scoped", "e-scoped");
    assert_eq!(s.seen("g-unscoped", "notes.txt"), "notes\nadded by a-unscoped\n");
    assert_eq!(s.seen("h-scoped", "notes.txt"), "notes\nadded by a-unscoped\nadded by g-unscoped\n");
    let want = expected(
        &s,
        &before,
        &[
            ("a.txt", "added by a-unscoped\n"),
            ("d.txt", "added by d-scoped\n"),
            ("e.txt", "added by e-scoped\n"),
            ("notes.txt", "notes\nadded by a-unscoped\nadded by g-unscoped\nadded by h-scoped\n"),
        ],
    );
    assert_eq!(s.tree(), want);
    assert_eq!(s.locked().len(), 7);
}

#[test]
fn plan_warns_once_per_code_task_without_a_scope() {
    let s = Scripted::new(UNSCOPED_TASKS, &[("notes.txt", "notes\n")]);
    let before = s.tree();
    let done = s.p.cassist(&["plan"]).exec();
    for name in ["a-unscoped", "g-unscoped"] {
        let warning = format!("task `{name}` has no scope: it may change any file, so it runs alone");
        assert_eq!(done.stderr.matches(&warning).count(), 1, "{}", done.transcript());
    }
    assert_eq!(done.stderr.matches("has no scope").count(), 2, "{}", done.transcript());
    assert!(!done.stdout.contains("has no scope"), "{}", done.transcript());
    // `--json`: the warnings on stderr, the document unchanged on stdout.
    let json = s.p.cassist(&["plan", "--json"]).stderr_has("task `a-unscoped` has no scope").exec();
    let doc: serde_json::Value = serde_json::from_str(&json.stdout).expect("plan --json is JSON");
    assert_eq!(doc.as_object().unwrap().keys().collect::<Vec<_>>(), ["tasks"]);
    let mut keys: Vec<&String> = doc["tasks"][0].as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["agent", "depends_on", "file", "hash", "inputs", "kind", "name", "state"]);
    assert_eq!(doc["tasks"].as_array().unwrap().len(), 7);
    // Planning wrote nothing of the project.
    assert_eq!(s.tree(), before);

    // One code task alone has nothing to wait for: no warning; nor has a
    // read-only one.
    let alone = r#"
task "only" {
    goal "Change anything."
}

task "look" {
    goal "Look around."
    kind "explore"
}

task "read" {
    goal "Read anything."
    sandbox "read-only"
}
"#;
    let s = Scripted::new(alone, &[]);
    s.p.cassist(&["plan"]).stderr_lacks("has no scope").exec();
}
