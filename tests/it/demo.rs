//! The bundled demo (README quick start): `cassist run tasks/` on a copy of
//! `cassist.kdl`, `tasks/` and `fixtures/` passes every task with the
//! scripted demo agent and integrates its changes.

use crate::support::{Test, copy_tree, repo, task};

#[test]
fn the_bundled_demo_runs_end_to_end_on_a_copy() {
    let p = Test::new().file("cassist.kdl", std::fs::read_to_string(repo().join("cassist.kdl")).unwrap()).build();
    for dir in ["tasks", "fixtures/demo", "fixtures/agents"] {
        std::fs::create_dir_all(p.path().join(dir)).unwrap();
        copy_tree(&repo().join(dir), &p.path().join(dir));
    }
    let run = p.run(&["tasks/"]).exec();
    let json = run.report_json();
    assert_eq!(json["passed"], 3, "{json:#}");
    let survey = &json["tasks"][0];
    assert_eq!(survey["name"], "survey-textkit");
    assert!(survey["summary"].as_str().unwrap().contains("normalize_space"), "{survey}");
    assert!(task(&json, "add-slugify")["state"] == "passed", "{json:#}");
    let text = p.read("fixtures/demo/textkit/text.py");
    assert!(text.contains("def slugify(") && text.contains("def truncate("), "{text}");
    assert!(p.exists("fixtures/demo/tests/test_slugify.py"));
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
        assert!(run.stdout.contains(name), "{}", run.stdout);
    }
}
