//! The user's edits are safe: a file the user edits while a task runs is
//! merged three-way with the task's change, against the file as the
//! task's view had it (not the tree at landing); edits that do not merge
//! keep the user's text, fail the task, name the file and the patch, and
//! write no lock line.

use crate::support::{Project, Test, in_both_modes, wait_until};
use std::time::Duration;

const NOTES: &str = "one\ntwo\nthree\nfour\nfive\nsix\n";

/// A project whose task `edit` (scoped to `notes.txt` unless `scope` is
/// false) reads `notes.txt`, says so in `ready`, waits for `go`, then
/// writes what it read with line 1 changed to `TASK`: an agent that
/// writes its whole result from what it saw, as coding agents do.
fn project(scope: bool) -> (Project, std::path::PathBuf, std::path::PathBuf) {
    let script = "seen=$(cat notes.txt); touch \"$EDIT_READY\"; \
         while [ ! -e \"$EDIT_GO\" ]; do sleep 0.05; done; \
         printf '%s\\n' \"$seen\" | sed '1s/.*/TASK/' > notes.txt";
    let agent =
        format!("agent \"sh\" {{\n    command \"sh\" \"-c\" {script:?}\n    pass-env \"EDIT_READY\" \"EDIT_GO\"\n}}\n");
    let scope = if scope { "    scope {\n        path \"notes.txt\"\n    }\n" } else { "" };
    let p = Test::trusted()
        .kdl("defaults {\n    agent \"sh\"\n}\n")
        .kdl(&agent)
        .tasks(&format!("task \"edit\" {{\n    goal \"Change line one of notes.txt.\"\n{scope}}}\n"))
        .file("notes.txt", NOTES)
        .git()
        .build();
    let out = p.out();
    (p, out.join("ready"), out.join("go"))
}

/// Runs the task, making `edit` in the user's tree while its agent waits.
fn run_with_edit(
    p: &Project,
    ready: &std::path::Path,
    go: &std::path::Path,
    mode: &[(&str, &str)],
    edit: Option<&str>,
) -> crate::support::Output {
    let _ = std::fs::remove_file(ready);
    let _ = std::fs::remove_file(go);
    let run = p.run(&["--keep-going"]).envs(mode).env("EDIT_READY", ready).env("EDIT_GO", go).any_status().spawn();
    wait_until(Duration::from_secs(60), "the agent read notes.txt", || ready.exists());
    if let Some(edit) = edit {
        std::fs::write(p.path().join("notes.txt"), edit).unwrap();
    }
    std::fs::write(go, "").unwrap();
    run.finish()
}

/// The user edits line 5 while the agent, which read the file before,
/// changes line 1: both edits are in the file, the task passed, and its
/// recorded output is its own result (the user's line is not the task's
/// work).
fn an_edit_on_another_line_while_the_agent_runs_is_merged(mode: &[(&str, &str)]) {
    let (p, ready, go) = project(true);
    let out = run_with_edit(&p, &ready, &go, mode, Some("one\ntwo\nthree\nfour\nUSER\nsix\n"));
    assert_eq!(out.code(), 0, "{}", out.transcript());
    assert_eq!(p.read("notes.txt"), "TASK\ntwo\nthree\nfour\nUSER\nsix\n", "{}", out.transcript());
    assert_eq!(out.states()["edit"], "passed");
    assert!(p.read("cassist.lock").contains("task \"edit\""), "{}", p.read("cassist.lock"));
}
in_both_modes!(an_edit_on_another_line_while_the_agent_runs_is_merged: merged_in_overlay_mode, merged_in_copy_mode);

/// The user edits the line the agent changes: the user's text stays, the
/// task fails naming the file and where its patch is, no lock line.
fn an_edit_on_the_same_line_is_a_conflict(mode: &[(&str, &str)]) {
    let (p, ready, go) = project(true);
    let edited = "USER\ntwo\nthree\nfour\nfive\nsix\n";
    let out = run_with_edit(&p, &ready, &go, mode, Some(edited));
    assert_eq!(out.code(), 1, "{}", out.transcript());
    assert_eq!(p.read("notes.txt"), edited, "the user's line was lost:\n{}", out.transcript());
    assert_eq!(out.states()["edit"], "failed");
    let reason = out.task("edit")["reason"].as_str().unwrap_or_default().to_owned();
    assert!(reason.contains("notes.txt: both sides changed the same or adjacent lines"), "{reason}");
    let patch = reason.split("the patch is in ").nth(1).and_then(|r| r.strip_suffix(')')).unwrap_or_default();
    let diff = std::fs::read_to_string(patch).unwrap_or_else(|e| panic!("patch {patch:?}: {e}\n{reason}"));
    assert!(diff.contains("+TASK"), "{diff}");
    assert!(!p.exists("cassist.lock") || !p.read("cassist.lock").contains("\"edit\""), "a lock line was written");
    assert!(out.transcript().contains("the patch is in"), "{}", out.transcript());
}
in_both_modes!(an_edit_on_the_same_line_is_a_conflict: same_line_in_overlay_mode, same_line_in_copy_mode);

/// An unscoped task could change any file, so nothing was copied aside
/// when it started: a file the user edits while it runs, which it changes
/// too, has no known base, and is a conflict rather than a guess.
#[test]
fn an_edit_whose_base_is_not_known_is_a_conflict() {
    let (p, ready, go) = project(false);
    let edited = "one\ntwo\nthree\nfour\nUSER\nsix\n";
    let out = run_with_edit(&p, &ready, &go, &[], Some(edited));
    assert_eq!(out.code(), 1, "{}", out.transcript());
    assert_eq!(p.read("notes.txt"), edited);
    let reason = out.task("edit")["reason"].as_str().unwrap_or_default().to_owned();
    assert!(
        reason.contains("notes.txt: changed meanwhile, and the content the task started from is not known"),
        "{reason}"
    );
}

/// Without a user edit, the scoped and unscoped task both land.
#[test]
fn without_an_edit_the_change_lands_whole() {
    for scoped in [true, false] {
        let (p, ready, go) = project(scoped);
        let out = run_with_edit(&p, &ready, &go, &[], None);
        assert_eq!(out.code(), 0, "{}", out.transcript());
        assert_eq!(p.read("notes.txt"), "TASK\ntwo\nthree\nfour\nfive\nsix\n");
    }
}

/// What the property test does to the project, one step at a time.
#[derive(Debug, Clone)]
enum Step {
    /// The user writes a line of their own at `line` (4 or 5: lines the
    /// tasks never touch) of file `file`, or appends one (`line` 6).
    UserEdit { file: usize, line: usize },
    /// The goal of task `task` changes: its agent writes a new line.
    NewGoal { task: usize },
    /// The user puts file `file` back as it was committed (their own
    /// lines there go too: that is their doing).
    Revert { file: usize },
    /// `cassist run -j jobs`.
    Run { jobs: usize },
}

const FILES: [&str; 2] = ["a.txt", "b.txt"];
/// Tasks: name, file, the line its agent sets. `ta` and `ta2` share
/// `a.txt` (their scopes overlap), on lines far enough apart to merge.
const TASKS: [(&str, usize, usize); 3] = [("ta", 0, 0), ("ta2", 0, 2), ("tb", 1, 0)];

fn base_text(file: usize) -> String {
    (0..6).map(|i| format!("{}{i}\n", &FILES[file][..1])).collect()
}

fn tasks_kdl(versions: &[u32]) -> String {
    TASKS
        .iter()
        .zip(versions)
        .map(|((name, file, line), v)| {
            format!(
                "task {name:?} {{\n    goal \"Set line {line} of {f} to {name}-VERSION-{v}.\"\n    scope {{\n        path {f:?}\n    }}\n}}\n",
                f = FILES[*file]
            )
        })
        .collect()
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        3 => (0..2usize, 4..7usize).prop_map(|(file, line)| Step::UserEdit { file, line }),
        2 => (0..3usize).prop_map(|task| Step::NewGoal { task }),
        1 => (0..2usize).prop_map(|file| Step::Revert { file }),
        3 => prop_oneof![Just(1usize), Just(4usize)].prop_map(|jobs| Step::Run { jobs }),
    ]
}

/// Runs `steps` and checks after each run that no line the user wrote is
/// lost, and that no task said passed, replayed or up-to-date while its
/// line is missing from its file (but where it says the user edited its
/// output, which is then the user's to keep).
fn check_steps(steps: &[Step]) {
    // The agent sets its line to `<task>-VERSION-<n>` as its goal says.
    let script = "v=$(grep -o '[a-z0-9]*-VERSION-[0-9]*' \"$CASSIST_PROMPT_FILE\" | head -1); \
                  f=$(grep -o '[ab]\\.txt' \"$CASSIST_PROMPT_FILE\" | head -1); \
                  l=$(grep -o 'Set line [0-9]' \"$CASSIST_PROMPT_FILE\" | head -1 | cut -d' ' -f3); \
                  awk -v l=\"$l\" -v v=\"$v\" 'NR==l+1 {{print v; next}} {{print}}' \"$f\" > \"$f.new\" && mv \"$f.new\" \"$f\"";
    let mut versions = vec![1u32; TASKS.len()];
    let p = Test::trusted()
        .kdl("defaults {\n    agent \"sh\"\n}\n")
        .sh_agent("sh", script)
        .tasks(&tasks_kdl(&versions))
        .file(FILES[0], base_text(0))
        .file(FILES[1], base_text(1))
        .git()
        .build();
    // The user's lines still meant to be in each file.
    let mut mine: Vec<Vec<String>> = vec![Vec::new(), Vec::new()];
    let mut n = 0;
    for (i, s) in steps.iter().enumerate() {
        match *s {
            Step::UserEdit { file, line } => {
                n += 1;
                let token = format!("user-{n}");
                let mut lines: Vec<String> = p.read(FILES[file]).lines().map(str::to_owned).collect();
                if line < lines.len() {
                    let old = std::mem::replace(&mut lines[line], token.clone());
                    mine[file].retain(|t| *t != old);
                } else {
                    lines.push(token.clone());
                }
                mine[file].push(token);
                p.file(FILES[file], format!("{}\n", lines.join("\n")));
            }
            Step::NewGoal { task } => {
                versions[task] += 1;
                p.file("tasks/t.kdl", tasks_kdl(&versions));
            }
            Step::Revert { file } => {
                mine[file].clear();
                p.file(FILES[file], base_text(file));
            }
            Step::Run { jobs } => {
                let out = p.run(&["-j", &jobs.to_string(), "--keep-going"]).any_status().exec();
                let ctx = || format!("after steps {:?}:\n{}", &steps[..=i], out.transcript());
                assert!(matches!(out.code(), 0 | 1), "{}", ctx());
                for (file, tokens) in mine.iter().enumerate() {
                    let text = p.read(FILES[file]);
                    for t in tokens {
                        assert!(text.lines().any(|l| l == t), "{t} lost from {}:\n{text}\n{}", FILES[file], ctx());
                    }
                }
                let states = out.states();
                for ((name, file, line), v) in TASKS.iter().zip(&versions) {
                    let state = states.get(*name).map(String::as_str).unwrap_or("");
                    // An output the user edited (their revert of the task's
                    // line included) is theirs: kept, and said.
                    let reason = out.task(name)["reason"].as_str().unwrap_or_default().to_owned();
                    let users = state == "up-to-date" && reason.contains("output edited");
                    if matches!(state, "passed" | "replayed" | "up-to-date") && !users {
                        let text = p.read(FILES[*file]);
                        let want = format!("{name}-VERSION-{v}");
                        assert_eq!(text.lines().nth(*line), Some(want.as_str()), "{name} {state}:\n{text}\n{}", ctx());
                    }
                }
            }
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config { cases: 10, failure_persistence: None, ..Default::default() })]

    /// Random sequences of user edits, new goals, reverts and runs (at
    /// `-j 1` and `-j 4`) never lose a line the user wrote, and a task is
    /// never reported done while its change is missing.
    #[test]
    fn no_sequence_loses_a_users_line(steps in proptest::collection::vec(step(), 1..8)) {
        let mut steps = steps;
        steps.push(Step::Run { jobs: 4 });
        check_steps(&steps);
    }
}
