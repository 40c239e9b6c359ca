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
