//! The bundled demo (README quick start): `cassist run tasks/` on a copy of
//! `cassist.kdl`, `tasks/` and `fixtures/` passes every task with the
//! scripted demo agent and integrates its changes.

mod common;

use common::{Project, copy_tree, repo};

#[test]
fn the_bundled_demo_runs_end_to_end_on_a_copy() {
    let p = Project::new();
    std::fs::copy(repo().join("cassist.kdl"), p.path().join("cassist.kdl")).unwrap();
    for dir in ["tasks", "fixtures/demo", "fixtures/agents"] {
        std::fs::create_dir_all(p.path().join(dir)).unwrap();
        copy_tree(&repo().join(dir), &p.path().join(dir));
    }
    let report = p.path().join("report.json");
    let home = tempfile::tempdir().unwrap();
    let run = p.run_env(
        &["run", "tasks/", "--report-json", report.to_str().unwrap()],
        &[("HOME", home.path().to_str().unwrap())],
    );
    assert_eq!(run.code(), 0, "{}", run.transcript());
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(json["passed"], 3, "{json:#}");
    let survey = &json["tasks"][0];
    assert_eq!(survey["name"], "survey-textkit");
    assert!(survey["summary"].as_str().unwrap().contains("normalize_space"), "{survey}");
    let text = p.read("fixtures/demo/textkit/text.py");
    assert!(text.contains("def slugify(") && text.contains("def truncate("), "{text}");
    assert!(p.path().join("fixtures/demo/tests/test_slugify.py").is_file());
    // The integrated code passes the demo project's own tests.
    let tests = std::process::Command::new("python3")
        .args(["-m", "unittest", "discover", "-s", "tests", "-t", "."])
        .current_dir(p.path().join("fixtures/demo"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    assert!(tests.status.success(), "{}", String::from_utf8_lossy(&tests.stderr));
    // The summary table names each task.
    for name in ["survey-textkit", "add-slugify", "add-truncate"] {
        assert!(run.stdout().contains(name), "{}", run.stdout());
    }
}
