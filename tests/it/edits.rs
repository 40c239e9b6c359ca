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
