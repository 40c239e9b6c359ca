//! Every invalid project under `fixtures/specs/invalid/` gets its full
//! diagnostic snapshotted; every valid one its `check`, `plan --json` and
//! prompts.

mod common;

use common::{Project, fixtures};

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
        let p = Project::from_fixture(&format!("specs/invalid/{case}"));
        let run = p.run(&["check"]);
        assert_eq!(run.code(), 2, "{case} must fail with exit 2:\n{}", run.transcript());
        let stderr = run.stderr();
        assert!(stderr.contains("×"), "{case}: no diagnostic:\n{stderr}");
        assert!(!stderr.contains("panicked"), "{case} panicked:\n{stderr}");
        // Nothing is written when a spec is invalid.
        assert!(!p.path().join(".cassist").exists(), "{case} wrote .cassist/");
        // `plan` reports the same and writes nothing either.
        let plan = p.run(&["plan"]);
        assert_eq!(plan.code(), 2, "{case}: plan must fail too");
        assert_eq!(plan.stderr(), stderr, "{case}: plan and check disagree");
        assert!(!p.path().join(".cassist").exists(), "{case}: plan wrote .cassist/");
        insta::assert_snapshot!(format!("invalid-{case}"), run.transcript());
    }
}

#[test]
fn valid_specs_plan_and_prompt() {
    for case in cases("valid") {
        let p = Project::from_fixture(&format!("specs/valid/{case}"));
        let check = p.run(&["check"]);
        check.success();
        let plan = p.run(&["plan", "--json"]);
        plan.success();
        insta::assert_snapshot!(format!("valid-{case}-check"), check.transcript());
        insta::assert_snapshot!(format!("valid-{case}-plan-json"), plan.stdout());
        let json = plan.json();
        for task in json["tasks"].as_array().unwrap() {
            let name = task["name"].as_str().unwrap();
            let prompt = p.run(&["prompt", name]);
            prompt.success();
            insta::assert_snapshot!(format!("valid-{case}-prompt-{name}"), prompt.stdout());
        }
    }
}
