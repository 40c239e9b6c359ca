//! Stale explore tasks and `run --force`, on a copy of the bundled demo
//! (`survey-textkit` explores, `add-slugify` depends on it, `add-truncate`
//! on `add-slugify`) whose agent logs each call.
//!
//! A stale task (only what it reads changed) keeps its recorded findings
//! until it is named or a task depending on it runs its agent; `--force`
//! runs tasks again whatever their state, never what they depend on.
//! `fixtures/demo/tests/__init__.py` is read by the survey alone: editing
//! it makes the survey stale and nothing else.

use std::collections::BTreeMap;

use crate::support::{Project, Test, copy_tree, map, repo, task};

const SURVEY: &str = "survey-textkit";
const SLUGIFY: &str = "add-slugify";
const TRUNCATE: &str = "add-truncate";

/// A file only the survey reads.
const SURVEY_ONLY: &str = "fixtures/demo/tests/__init__.py";

/// The demo agent, each call logged in `out/calls` (the task's name) and
/// its prompt kept in `out/<task>.prompt`.
const LOGGED_AGENT: &str = r#"command "sh" "-c" "echo \"$CASSIST_TASK\" >> \"$HOME/.cache/cassist-test-out/calls\"; cp \"$CASSIST_PROMPT_FILE\" \"$HOME/.cache/cassist-test-out/$CASSIST_TASK.prompt\"; exec python3 fixtures/agents/demo-agent.py""#;

/// The demo, committed and run once (every task passed), its call log
/// emptied.
fn demo_ran() -> Project {
    let config = std::fs::read_to_string(repo().join("cassist.kdl")).unwrap();
    let plain = r#"command "python3" "fixtures/agents/demo-agent.py""#;
    assert!(config.contains(plain), "{config}");
    let p = Test::new().file("cassist.kdl", config.replace(plain, LOGGED_AGENT)).build();
    for dir in ["tasks", "fixtures/demo", "fixtures/agents"] {
        std::fs::create_dir_all(p.path().join(dir)).unwrap();
        copy_tree(&repo().join(dir), &p.path().join(dir));
    }
    p.commit_all();
    let first = p.run(&[]).exec();
    assert_eq!(first.states(), all("passed"), "{}", first.transcript());
    assert_eq!(take_calls(&p), [SURVEY, SLUGIFY, TRUNCATE]);
    assert_eq!(p.plan_states(), all("up-to-date"));
    p
}

fn all(state: &str) -> BTreeMap<String, String> {
    map(&[(SURVEY, state), (SLUGIFY, state), (TRUNCATE, state)])
}

fn states(survey: &str, slugify: &str, truncate: &str) -> BTreeMap<String, String> {
    map(&[(SURVEY, survey), (SLUGIFY, slugify), (TRUNCATE, truncate)])
}

/// The tasks an agent ran for since the last call, in call order.
fn take_calls(p: &Project) -> Vec<String> {
    let path = p.out().join("calls");
    let calls = std::fs::read_to_string(&path).unwrap_or_default().lines().map(str::to_owned).collect();
    let _ = std::fs::remove_file(&path);
    calls
}

/// Makes the survey stale: a file only it reads changes.
fn survey_stale(p: &Project, note: &str) {
    let text = p.read(SURVEY_ONLY);
    p.file(SURVEY_ONLY, format!("{text}# {note}\n"));
    assert_eq!(p.plan_states(), states("stale", "up-to-date", "up-to-date"));
}

/// The lock line of `task`.
#[track_caller]
fn lock_line(p: &Project, task: &str) -> cassist_core::lock::LockEntry {
    let lock = cassist_core::lock::Lock::load(p.path()).unwrap();
    lock.tasks.get(task).unwrap_or_else(|| panic!("no lock line for {task}")).clone()
}

/// `task`'s input hash in `cassist plan --json`.
fn planned_hash(p: &Project, name: &str) -> String {
    let json = p.cassist(&["plan", "--json"]).exec().json();
    task(&json, name)["hash"].as_str().unwrap().to_owned()
}

#[test]
fn force_runs_an_up_to_date_task_again_and_the_dependents_its_new_output_changes() {
    let p = demo_ran();
    let run = p.run(&["--force", SLUGIFY]).exec();
    // The survey it depends on is not run again; add-truncate is hashed
    // again on add-slugify's new output (its change is already in the
    // tree: this time it changes nothing), which differs: it runs.
    assert_eq!(take_calls(&p), [SLUGIFY, TRUNCATE], "{}", run.transcript());
    assert_eq!(run.states(), states("up-to-date", "passed", "passed"), "{}", run.transcript());
    assert_eq!(p.plan_states(), all("up-to-date"));
    let again = p.run(&[]).exec();
    assert_eq!(again.states(), all("up-to-date"), "{}", again.transcript());
    assert_eq!(take_calls(&p), Vec::<String>::new());
}

#[test]
fn a_forced_explore_task_hands_on_the_same_output_and_its_dependents_stay_up_to_date() {
    let p = demo_ran();
    let patch = lock_line(&p, SURVEY).patch;
    let run = p.run(&["--force", SURVEY]).exec();
    assert_eq!(take_calls(&p), [SURVEY], "{}", run.transcript());
    assert_eq!(run.states(), states("passed", "up-to-date", "up-to-date"), "{}", run.transcript());
    // An explore task's output is the patch of an empty change: the same
    // as recorded, so what depends on it is as recorded too.
    assert_eq!(lock_line(&p, SURVEY).patch, patch);
    assert_eq!(p.plan_states(), all("up-to-date"));
}

#[test]
fn force_of_an_unknown_or_unselected_task_or_with_locked_is_exit_2_and_runs_nothing() {
    let p = demo_ran();
    let lock = p.read("cassist.lock");
    let tree = p.tree();
    std::fs::remove_file(p.report_path()).unwrap();
    p.run(&["--force", "add-slugfy"])
        .status(2)
        .stderr_has("no task named `add-slugfy`")
        .stderr_has("did you mean `add-slugify`?")
        .exec();
    p.run(&["--filter", SURVEY, "--force", SLUGIFY])
        .status(2)
        .stderr_has("task `add-slugify` is to be forced, but it is not among the selected tasks")
        .exec();
    p.run(&["--force", SLUGIFY, "--locked"]).status(2).stderr_has("cannot be used with").exec();
    assert_eq!(take_calls(&p), Vec::<String>::new());
    assert_eq!(p.read("cassist.lock"), lock);
    crate::support::assert_same_tree(&p.tree(), &tree, "a refused --force");
    assert!(!p.report_path().exists(), "a refused run wrote its report");
    // Both filters apply: add-slugify selected with what it depends on, and
    // forced.
    let run = p.run(&["--filter", SLUGIFY, "--force", SLUGIFY]).exec();
    assert_eq!(take_calls(&p), [SLUGIFY], "{}", run.transcript());
    assert_eq!(run.states(), map(&[(SURVEY, "up-to-date"), (SLUGIFY, "passed")]), "{}", run.transcript());
}

#[test]
fn a_context_edit_makes_the_survey_stale_in_the_plan_and_explain_says_why() {
    let p = demo_ran();
    // test_text.py is read by all three: the survey keeps its findings, the
    // code tasks' changes are to be verified.
    let text = p.read("fixtures/demo/tests/test_text.py");
    p.file("fixtures/demo/tests/test_text.py", format!("{text}# a note\n"));
    assert_eq!(p.plan_states(), states("stale", "verify", "verify"));
    let plan = p.cassist(&["plan"]).exec().stdout;
    assert!(plan.contains("\n3 tasks; 0 to run, 2 to verify, 1 stale\n"), "{plan}");
    assert!(plan.contains("\nsurvey-textkit: stale: what it reads changed, not what it asks"), "{plan}");
    let why = p.explain(SURVEY);
    assert!(why.contains("state stale"), "{why}");
    assert!(why.contains("\n  fixtures/demo/tests/test_text.py changed\n"), "{why}");
    assert!(why.contains("its recorded findings are kept"), "{why}");
    assert_eq!(take_calls(&p), Vec::<String>::new(), "planning ran an agent");
}

#[test]
fn locked_accepts_a_stale_task_and_a_plain_run_records_its_new_after_state() {
    let p = demo_ran();
    let findings = lock_line(&p, SURVEY);
    survey_stale(&p, "a note");
    let lock = p.read("cassist.lock");
    let locked = p.run(&["--locked"]).exec();
    assert_eq!(locked.states(), states("stale", "up-to-date", "up-to-date"), "{}", locked.transcript());
    let report = locked.report_json();
    assert_eq!(report["cached"], 3, "{report:#}");
    let survey = locked.task(SURVEY);
    assert!(survey["summary"].as_str().unwrap().contains("normalize_space"), "its recorded findings: {survey}");
    assert!(locked.stdout.contains("survey-textkit stale"), "{}", locked.stdout);
    // Named, it would run its agent: --locked keeps its findings.
    let named = p.run(&["--locked", "--filter", SURVEY]).exec();
    assert_eq!(named.states(), map(&[(SURVEY, "stale")]), "{}", named.transcript());
    assert_eq!(p.read("cassist.lock"), lock, "--locked wrote cassist.lock");
    assert_eq!(p.plan_states(), states("stale", "up-to-date", "up-to-date"));

    // A plain run keeps the findings for the inputs as they are now: the
    // lock line and its store entry take the new after-state.
    let hash = planned_hash(&p, SURVEY);
    let run = p.run(&[]).exec();
    assert_eq!(run.states(), states("stale", "up-to-date", "up-to-date"), "{}", run.transcript());
    let line = lock_line(&p, SURVEY);
    assert_eq!(line.after, hash);
    assert_eq!(
        (line.before, line.patch),
        (findings.before.clone(), findings.patch),
        "the findings are the recorded ones"
    );
    let entry = cassist_core::store::Store::open(p.path()).get_entry(&findings.before).unwrap();
    assert_eq!(entry.after, hash, "the store entry's after-state moved too");
    assert_eq!(p.plan_states(), all("up-to-date"));
    assert_eq!(take_calls(&p), Vec::<String>::new());
}

#[test]
fn naming_a_stale_task_refreshes_it_and_its_dependents_stay_up_to_date() {
    let p = demo_ran();
    survey_stale(&p, "a note");
    // Selected as what add-slugify depends on, not named: kept.
    let run = p.run(&["--filter", SLUGIFY]).exec();
    assert_eq!(run.states(), map(&[(SURVEY, "stale"), (SLUGIFY, "up-to-date")]), "{}", run.transcript());
    assert_eq!(take_calls(&p), Vec::<String>::new());

    survey_stale(&p, "another note");
    let run = p.run(&["--filter", SURVEY]).exec();
    assert_eq!(run.states(), map(&[(SURVEY, "passed")]), "{}", run.transcript());
    assert_eq!(take_calls(&p), [SURVEY]);
    let fresh = run.task(SURVEY)["summary"].as_str().unwrap().to_owned();
    assert!(fresh.contains("defines normalize_space, slugify, truncate;"), "{fresh}");
    // Its new findings change nothing its dependents hash.
    assert_eq!(p.plan_states(), all("up-to-date"));
    let run = p.run(&[]).exec();
    assert_eq!(run.states(), all("up-to-date"), "{}", run.transcript());
    assert_eq!(take_calls(&p), Vec::<String>::new());
}

#[test]
fn a_dependent_that_runs_its_agent_refreshes_its_stale_dependency_first() {
    let p = demo_ran();
    // What the survey reads changes (a new helper), and what add-slugify
    // asks (its goal): it runs, and gets the survey's fresh findings.
    let text = p.read("fixtures/demo/textkit/text.py");
    p.file(
        "fixtures/demo/textkit/text.py",
        format!("{text}\n\ndef shout(text: str) -> str:\n    return text.upper()\n"),
    );
    p.edit("tasks/text.kdl", "Add unit tests for it.", "Add unit tests for it, please.");
    let plan = p.plan_states();
    assert_eq!((plan[SURVEY].as_str(), plan[SLUGIFY].as_str()), ("run", "run"), "{plan:?}");
    let why = p.explain(SURVEY);
    assert!(why.contains("state run"), "{why}");
    assert!(why.contains("\n  refreshed: `add-slugify`, which depends on it, runs its agent\n"), "{why}");
    let shown = p.cassist(&["plan"]).exec().stdout;
    assert!(
        shown.contains("\nsurvey-textkit: refreshed: `add-slugify`, which depends on it, runs its agent\n"),
        "{shown}"
    );

    let run = p.run(&[]).exec();
    let calls = take_calls(&p);
    assert_eq!(calls[..2], [SURVEY, SLUGIFY], "the survey runs before the task that reads its findings");
    assert_eq!(run.task(SURVEY)["state"], "passed", "{}", run.transcript());
    assert_eq!(run.task(SLUGIFY)["state"], "passed", "{}", run.transcript());
    assert!(run.task(SURVEY)["summary"].as_str().unwrap().contains("shout"), "{}", run.transcript());
    let prompt = std::fs::read_to_string(p.out().join("add-slugify.prompt")).unwrap();
    assert!(prompt.contains("normalize_space, slugify, truncate, shout"), "fresh findings: {prompt}");
    assert_eq!(p.plan_states(), all("up-to-date"));
}

#[test]
fn force_never_refreshes_the_stale_dependency_of_the_task_it_forces() {
    let p = demo_ran();
    survey_stale(&p, "a note");
    let run = p.run(&["--force", SLUGIFY]).exec();
    let calls = take_calls(&p);
    assert!(!calls.iter().any(|c| c == SURVEY), "{calls:?}\n{}", run.transcript());
    assert_eq!(calls.first().map(String::as_str), Some(SLUGIFY), "{calls:?}");
    assert_eq!(run.task(SURVEY)["state"], "stale", "{}", run.transcript());
    assert_eq!(run.task(SLUGIFY)["state"], "passed", "{}", run.transcript());
    // Its prompt had the survey's recorded findings (of the first run,
    // before add-slugify and add-truncate).
    let prompt = std::fs::read_to_string(p.out().join("add-slugify.prompt")).unwrap();
    assert!(prompt.contains("textkit/text.py defines normalize_space;"), "{prompt}");
}

#[test]
fn a_failed_verification_refreshes_the_stale_dependency_before_the_agent_runs() {
    let p = demo_ran();
    // A hand edit breaks add-slugify (its function goes, a helper comes)
    // and touches a test file it reads: it is to be verified, its
    // verification fails, and its agent runs, only during the run. The
    // survey, stale, runs first: its fresh findings (the new helper) go
    // into add-slugify's prompt.
    let text = p.read("fixtures/demo/textkit/text.py");
    let start = text.find("def slugify").expect("the demo agent added slugify");
    let end = text[start..].find("\ndef ").map_or(text.len(), |e| start + e + 1);
    let broken =
        format!("{}{}\n\ndef shout(text: str) -> str:\n    return text.upper()\n", &text[..start], &text[end..]);
    p.file("fixtures/demo/textkit/text.py", broken);
    let tests = p.read("fixtures/demo/tests/test_text.py");
    p.file("fixtures/demo/tests/test_text.py", format!("{tests}# touched\n"));
    assert_eq!(p.plan_states(), states("stale", "verify", "verify"));

    let run = p.run(&[]).exec();
    assert_eq!(run.code(), 0, "{}", run.transcript());
    let calls = take_calls(&p);
    assert_eq!(calls[..2], [SURVEY, SLUGIFY], "the survey runs before the task that reads its findings: {calls:?}");
    assert_eq!(run.task(SURVEY)["state"], "passed", "{}", run.transcript());
    assert_eq!(run.task(SLUGIFY)["state"], "passed", "{}", run.transcript());
    let reason = run.task(SLUGIFY)["reason"].as_str().unwrap_or_default().to_owned();
    assert!(reason.contains("failed") && reason.contains("so its agent ran"), "{reason}");
    let prompt = std::fs::read_to_string(p.out().join("add-slugify.prompt")).unwrap();
    assert!(prompt.contains("shout"), "fresh findings: {prompt}");
    // Told once, as it ended: never as stale first.
    let shown = format!("{}{}", run.stdout, run.stderr);
    assert!(!shown.contains("survey-textkit stale"), "{}", run.transcript());
    assert_eq!(shown.matches("survey-textkit passed in").count(), 1, "{}", run.transcript());
    assert_eq!(p.plan_states(), all("up-to-date"));
}
