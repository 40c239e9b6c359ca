//! Every invalid project under `fixtures/specs/invalid/` gets its full
//! diagnostic snapshotted; every valid one its `check`, `plan --json` and
//! prompts.

use crate::support::{Test, fixtures, names};

fn cases(kind: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fixtures().join("specs").join(kind))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn invalid_specs_are_reported_with_exit_2() {
    let cases = cases("invalid");
    assert!(cases.len() >= 30, "the corpus has {} cases", cases.len());
    for case in cases {
        let p = Test::new().fixture(&format!("specs/invalid/{case}")).build();
        let run = p.cassist(&["check"]).label(&case).status(2).stderr_has("×").stderr_lacks("panicked").exec();
        // Nothing is written when a spec is invalid.
        assert!(!p.exists(".cassist"), "{case} wrote .cassist/");
        // `plan` reports the same and writes nothing either.
        p.cassist(&["plan"]).label(&case).status(2).stderr(&run.stderr).exec();
        assert!(!p.exists(".cassist"), "{case}: plan wrote .cassist/");
        insta::assert_snapshot!(format!("invalid-{case}"), run.transcript());
    }
}

#[test]
fn valid_specs_plan_and_prompt() {
    for case in cases("valid") {
        let p = Test::new().fixture(&format!("specs/valid/{case}")).build();
        let check = p.cassist(&["check"]).label(&case).exec();
        let plan = p.cassist(&["plan", "--json"]).label(&case).exec();
        insta::assert_snapshot!(format!("valid-{case}-check"), check.transcript());
        insta::assert_snapshot!(format!("valid-{case}-plan-json"), plan.stdout);
        for name in names(&plan.json()) {
            let prompt = p.cassist(&["prompt", &name]).label(&case).exec();
            insta::assert_snapshot!(format!("valid-{case}-prompt-{name}"), prompt.stdout);
        }
    }
}

/// The edge cases of issue 14 (item 10), each pinned by what the message
/// must say (the corpus snapshots show where each label points).
#[test]
fn diagnostic_edge_cases_name_the_real_problem() {
    let check = |case: &str, has: &[&str], lacks: &[&str]| {
        let p = Test::new().fixture(&format!("specs/invalid/{case}")).build();
        let mut cmd = p.cassist(&["check"]);
        cmd.label(case).status(2);
        for h in has {
            cmd.stderr_has(h);
        }
        for l in lacks {
            cmd.stderr_lacks(l);
        }
        cmd.exec()
    };
    // `é` is a letter, but not an ASCII one: the help says ASCII and the
    // label points at it.
    check("62-task-name-not-ascii", &["`é` is not ASCII", "only ASCII letters and digits"], &[]);
    // An invisible character is shown as an escape, and named.
    check(
        "63-task-name-invisible-char",
        &["invalid task name `zw\\u{200b}sp`", "invisible character U+200B"],
        &["`zw\u{200b}sp`"],
    );
    // Typographic quotes: one diagnostic per value, with the line to write,
    // and no "takes one value, found 4" on top.
    let out = check(
        "64-typographic-quotes",
        &[
            "`goal` has a value in typographic quotes: “fix”",
            "write `goal \"fix\"`",
            "`goal` has a value in typographic quotes: “fix the bug in slugify”",
            "write `goal \"fix the bug in slugify\"`",
            "write `timeout=\"1m\"`",
            "3 errors in",
        ],
        &["takes one value", "invalid duration"],
    );
    assert_eq!(out.stderr.matches("cassist::typographic-quotes").count(), 3, "{}", out.stderr);
    // A fraction says so, and how to write the duration.
    check(
        "65-duration-fraction",
        &["fractions are not supported: write \"1m30s\" or \"90s\"", "fractions are not supported: write \"500ms\""],
        &["has no unit"],
    );
    // A cycle is reported together with the other errors.
    check(
        "66-dependency-cycle-and-unknown-dependency",
        &["dependency cycle: add-slug-tests -> add-slugify -> add-slug-tests", "unknown task `no-such-task`"],
        &[],
    );
    // A syntax error in cassist.kdl: that one error, no "unknown agent"
    // for the tasks using the agent it defines.
    check("67-config-syntax-error-custom-agent", &["invalid KDL", "1 error in cassist.kdl"], &["unknown agent"]);

    // A glob that matches only ignored files says so, not "typo".
    let p = Test::new()
        .config("trust \"workspace-write\"\n")
        .file(".gitignore", "*.log\nbuild/\n")
        .file("run.log", "log\n")
        .file("build/out/report.txt", "out\n")
        .file("src/a.py", "x = 1\n")
        .tasks(
            "task \"logs\" {\n    goal \"Read the logs.\"\n    context {\n        file \"*.log\"\n        file \"**/*.txt\"\n    }\n}\n",
        )
        .git()
        .build();
    p.cassist(&["check"])
        .status(2)
        .stderr_has("`*.log` matches only files ignored by .gitignore, such as `run.log`")
        .stderr_has("`**/*.txt` matches only files ignored by .gitignore, such as `build/out/report.txt`")
        .stderr_has("name the file itself (`file \"run.log\"`)")
        .stderr_lacks("matches no file")
        .exec();
    // A literal path names an ignored file, as the help says.
    p.file(
        "tasks/t.kdl",
        "task \"logs\" {\n    goal \"Read the logs.\"\n    context {\n        file \"run.log\"\n    }\n}\n",
    );
    p.cassist(&["check"]).exec();
}
