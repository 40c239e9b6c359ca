//! `cassist run` end to end (SPEC 3 and 5, issue 3): the real binary on
//! small temporary projects, with the fake agents of `fixtures/agents/`.
//!
//! Each test writes a `cassist.kdl` whose custom agent runs one of those
//! scripts by absolute path, runs `cassist run`, and checks what a user
//! would see: the exit code, the `--report-json` document, the files of the
//! project (and its git state), the records under `.cassist/`, and that no
//! process of the agent is left behind.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;

use crate::support::in_both_modes;
use crate::support::{
    COPY, Project, Sandbox, Test, assert_no_temp_files, assert_same_tree, contains_bytes, files_under, processes_with,
    sandbox_or_skip, section, signal, strings, unique_marker, workspaces_in,
};

const HELLO_TASK: &str = r##"task "add-hello" {
    goal "Write a greeting into src/hello.txt."
    agent "good"
    context {
        file "src/hello.txt"
    }
    scope {
        path "src/**"
    }
    acceptance {
        run #"grep -q "hello from add-hello" src/hello.txt"#
    }
}
"##;

/// Test 1, in the given workspace mode: a passing task is integrated into
/// the user's tree and left uncommitted.
fn passing_task_is_integrated_uncommitted(env: &[(&str, &str)], mode: &str) {
    let p = Test::trusted()
        .agent("good", "good.sh", &[], &[])
        .tasks(HELLO_TASK)
        .file("src/hello.txt", "old greeting\n")
        .file("README.md", "a project\n")
        .git()
        .build();
    let head = p.head();

    let done = p.run(&[]).envs(env).stderr_has(&format!("add-hello: workspace: {mode}")).exec();
    let t = done.task("add-hello");
    assert_eq!(t["state"], "passed");
    assert_eq!(t["agent"], "good");
    assert_eq!(t["attempts"], 1);
    assert_eq!(strings(&t["changed_files"]), ["src/hello.txt"]);
    assert_eq!(t["summary"], "wrote src/hello.txt");
    assert_eq!(t["reason"], Value::Null);
    let acceptance = t["acceptance"].as_array().unwrap();
    assert_eq!(acceptance.len(), 1, "{t}");
    assert_eq!(acceptance[0]["command"], r#"grep -q "hello from add-hello" src/hello.txt"#);
    assert_eq!(acceptance[0]["exit_code"], 0);
    assert_eq!(acceptance[0]["passed"], true);
    let json = done.report_json();
    assert_eq!(
        (json["passed"].as_u64(), json["failed"].as_u64(), json["blocked"].as_u64()),
        (Some(1), Some(0), Some(0))
    );

    // In the user's tree, uncommitted.
    assert_eq!(p.read("src/hello.txt"), "hello from add-hello\n");
    assert_eq!(p.head(), head, "cassist moved HEAD");
    assert_eq!(p.git(&["rev-list", "--count", "HEAD"]).trim(), "1");
    assert_eq!(p.status(), " M src/hello.txt\n", ".cassist/ must be ignored and the change left uncommitted");

    // The records.
    assert!(p.record("add-hello", "prompt-1.md").starts_with("# Goal\n"));
    assert!(p.record("add-hello", "transcript-1.log").contains("good: wrote src/hello.txt"));
    assert!(p.record("add-hello", "result-1.json").contains("\"success\": true"));
    let review: Value = serde_json::from_str(&p.record("add-hello", "review-1.json")).unwrap();
    assert!(review.is_object(), "{review}");
    let acc: Value = serde_json::from_str(&p.record("add-hello", "acceptance-1.json")).unwrap();
    assert_eq!(acc[0]["passed"], true, "{acc}");
    let patch = p.record("add-hello", "patch.diff");
    assert!(patch.contains("-old greeting") && patch.contains("+hello from add-hello"), "{patch}");
    let recorded: Value = serde_json::from_str(&p.record("add-hello", "report.json")).unwrap();
    assert_eq!(recorded["state"], "passed");
}

// ---------------------------------------------------------------------------
// 1, 14. A passing task

#[test]
fn passing_task_is_integrated_and_left_uncommitted() {
    passing_task_is_integrated_uncommitted(&[], "overlay");
}

#[test]
fn passing_task_is_integrated_with_the_copy_fallback() {
    passing_task_is_integrated_uncommitted(COPY, "copy");
}

// ---------------------------------------------------------------------------
// 2, 3. Acceptance feedback and giving up

/// A task whose acceptance wants `want` in src/answer.txt; the agent writes
/// 41, then 42 once it gets feedback.
fn answer_task(want: u32, max_iterations: u32) -> String {
    format!(
        r##"task "answer" {{
    goal "Write the answer into src/answer.txt."
    agent "fixer"
    max-iterations {max_iterations}
    context {{
        file "src/answer.txt"
    }}
    scope {{
        path "src/answer.txt"
    }}
    acceptance {{
        run #"a=$(cat src/answer.txt); test "$a" = {want} || {{ echo "ANSWER-CHECK: got $a, want {want}"; exit 1; }}"#
    }}
}}
"##
    )
}

#[test]
fn failing_acceptance_goes_back_to_the_agent_who_fixes_it() {
    let p = Test::trusted()
        .agent("fixer", "fix-on-feedback.sh", &[], &["FAKE_LOG"])
        .tasks(&answer_task(42, 3))
        .file("src/answer.txt", "0\n")
        .git()
        .build();
    let head = p.head();
    let done = p.run(&[]).env("FAKE_LOG", p.out()).file("src/answer.txt", "42\n").exec();
    let t = done.task("answer");
    assert_eq!(t["state"], "passed");
    assert_eq!(t["attempts"], 2);
    assert_eq!(strings(&t["changed_files"]), ["src/answer.txt"]);
    assert_eq!(p.head(), head);
    assert_eq!(p.status(), " M src/answer.txt\n");

    // The first round failed on acceptance...
    let first: Value = serde_json::from_str(&p.record("answer", "acceptance-1.json")).unwrap();
    assert_eq!(first[0]["passed"], false, "{first}");
    assert_eq!(first[0]["exit_code"], 1, "{first}");
    let prompt1 = p.record("answer", "prompt-1.md");
    assert!(!prompt1.contains("# Review feedback"), "{prompt1}");
    assert!(!p.stdin_of("answer", 1).contains("# Review feedback"));
    // ... and the second prompt carries the failure: in the record and on
    // the agent's stdin.
    let prompt2 = p.record("answer", "prompt-2.md");
    for prompt in [prompt2.as_str(), p.stdin_of("answer", 2).as_str()] {
        let feedback = section(prompt, "Review feedback");
        assert!(feedback.contains("ANSWER-CHECK: got 41, want 42"), "{prompt}");
        assert!(feedback.contains("exit code 1"), "{prompt}");
        assert!(prompt.starts_with(&prompt1), "the second prompt is the first plus the feedback:\n{prompt}");
    }
    assert_eq!(p.stdin_of("answer", 2).trim_end(), prompt2.trim_end(), "the agent got the recorded prompt");
}

#[test]
fn giving_up_after_max_iterations_leaves_the_tree_untouched() {
    let p = Test::trusted()
        .agent("fixer", "fix-on-feedback.sh", &[], &[])
        .tasks(&answer_task(43, 2))
        .file("src/answer.txt", "0\n")
        .file("notes.txt", "untracked and kept\n")
        .git()
        .build();
    p.file("notes.txt", "changed before the run\n");
    let head = p.head();
    let status = p.status();
    let before = p.tree();

    // The failing tail is shown.
    let done = p.run(&[]).status(1).stdout_has("ANSWER-CHECK: got 42, want 43").stdout_has("transcript: ").exec();
    let t = done.task("answer");
    assert_eq!(t["state"], "failed");
    assert_eq!(t["attempts"], 2);
    let reason = t["reason"].as_str().unwrap();
    assert!(reason.contains("acceptance command") && reason.contains("after 2 iterations"), "{reason}");
    assert_eq!(done.report_json()["failed"], 1);

    assert_same_tree(&p.tree(), &before, "a failed task changed the user's tree");
    assert_eq!(p.head(), head);
    assert_eq!(p.status(), status);
    assert!(!p.records("answer").join("patch.diff").exists(), "no accepted patch");
}

// ---------------------------------------------------------------------------
// 4. Scope

fn scope_task(max_iterations: u32) -> String {
    format!(
        r#"task "scoped" {{
    goal "Write src/in.txt."
    agent "stray"
    max-iterations {max_iterations}
    scope {{
        path "src/**"
    }}
    acceptance {{
        run "test -f src/in.txt"
    }}
}}
"#
    )
}

#[test]
fn out_of_scope_edit_is_rejected_and_kept_out_of_the_tree() {
    let p = Test::trusted()
        .agent("stray", "out-of-scope.sh", &[], &[])
        .tasks(&scope_task(1))
        .file("src/keep.txt", "keep\n")
        .git()
        .build();
    let before = p.tree();
    let done = p.run(&[]).status(1).no_file("notes/out.txt").no_file("src/in.txt").exec();
    let t = done.task("scoped");
    assert_eq!(t["state"], "failed");
    let reason = t["reason"].as_str().unwrap();
    assert!(reason.contains("modified unrelated files") && reason.contains("notes/out.txt"), "{reason}");
    assert_same_tree(&p.tree(), &before, "nothing of a rejected change is integrated");
    assert_eq!(p.status(), "");
}

#[test]
fn out_of_scope_edit_is_fixed_on_review_feedback() {
    let p = Test::trusted()
        .agent("stray", "out-of-scope.sh", &[], &[])
        .tasks(&scope_task(2))
        .file("src/keep.txt", "keep\n")
        .git()
        .build();
    let done = p.run(&[]).file("src/in.txt", "in scope, attempt 2\n").exec();
    let t = done.task("scoped");
    assert_eq!(t["state"], "passed");
    assert_eq!(t["attempts"], 2);
    assert_eq!(strings(&t["changed_files"]), ["src/in.txt"]);
    let feedback = section(&p.record("scoped", "prompt-2.md"), "Review feedback").to_owned();
    assert!(feedback.contains("modified unrelated files") && feedback.contains("notes/out.txt"), "{feedback}");
    assert!(!p.exists("notes"), "the out-of-scope file reached the tree");
    assert_eq!(p.status(), "?? src/in.txt\n");
}

// ---------------------------------------------------------------------------
// 5. A planted secret

#[test]
fn planted_secret_is_rejected_and_never_recorded() {
    // The key the agent plants, put together here as in the script.
    let key = format!("{}{}", "AKIA", "Q7WXZ2K9LM4PR8TN");
    let task = r#"task "config" {
    goal "Add the region setting to src/config.py."
    agent "planter"
    max-iterations 2
    scope {
        path "src/**"
    }
}
"#;
    let p = Test::trusted()
        .agent("planter", "plant-secret.sh", &[], &["FAKE_LOG"])
        .tasks(task)
        .file("src/app.py", "print('hi')\n")
        .git()
        .build();
    let before = p.tree();
    let done = p.run(&[]).env("FAKE_LOG", p.out()).status(1).exec();
    let t = done.task("config");
    assert_eq!(t["state"], "failed");
    let reason = t["reason"].as_str().unwrap();
    assert!(reason.contains("security issue") && reason.contains("AWS access key"), "{reason}");
    assert!(reason.contains("src/config.py"), "{reason}");
    assert_same_tree(&p.tree(), &before, "the user's tree changed");

    // The agent planted it every time (so a retry happened) and was told
    // why without being shown the key.
    let second = p.stdin_of("config", 2);
    assert!(section(&second, "Review feedback").contains("AWS access key"), "{second}");
    assert!(!second.contains(&key));
    // Nowhere in what cassist printed or recorded.
    for (what, text) in [("stdout", &done.stdout), ("stderr", &done.stderr), ("report", &done.report)] {
        assert!(!text.contains(&key), "the key is in {what}:\n{text}");
    }
    let files = files_under(&p.path().join(".cassist"));
    assert!(files.iter().any(|(p, _)| p.ends_with("review-2.json")), "{files:?}");
    for (path, bytes) in &files {
        assert!(!contains_bytes(bytes, key.as_bytes()), "the key is in {}", path.display());
    }
}

// ---------------------------------------------------------------------------
// 6. Read-only tasks

#[test]
fn read_only_task_that_changes_a_file_is_rejected() {
    let tasks = r#"task "look" {
    goal "Review src/hello.txt."
    kind "review"
    agent "good"
    max-iterations 1
}

task "peek" {
    goal "Read src/hello.txt."
    sandbox "read-only"
    agent "good"
    max-iterations 1
}
"#;
    let p = Test::trusted()
        .agent("good", "good.sh", &[], &[])
        .tasks(tasks)
        .file("src/hello.txt", "untouched\n")
        .git()
        .build();
    let before = p.tree();
    // Without Landlock (CASSIST_LANDLOCK=off, as on a kernel without it)
    // in copy mode, the write happens in the workspace, and the review
    // rejects it.
    let done = p.run(&["--keep-going"]).env("CASSIST_LANDLOCK", "off").envs(COPY).status(1).exec();
    for name in ["look", "peek"] {
        let t = done.task(name);
        assert_eq!(t["state"], "failed", "{t}");
        let reason = t["reason"].as_str().unwrap();
        assert!(reason.contains("read-only") && reason.contains("src/hello.txt"), "{name}: {reason}");
    }
    assert_eq!(done.report_json()["failed"], 2);
    assert_same_tree(&p.tree(), &before, "the user's tree changed");
    assert_eq!(p.read("src/hello.txt"), "untouched\n");
    // In overlay mode a read-only task's workspace is mounted read-only,
    // Landlock or not: the write itself is refused.
    if sandbox_or_skip(Sandbox::Overlay) {
        std::fs::remove_dir_all(p.path().join(".cassist/runs")).unwrap();
        let done = p.run(&["--keep-going"]).env("CASSIST_LANDLOCK", "off").status(1).exec();
        for name in ["look", "peek"] {
            let t = done.task(name);
            assert_eq!(t["state"], "failed", "{t}");
            assert!(t["changed_files"].as_array().unwrap().is_empty(), "{t}");
        }
        assert!(p.record("look", "transcript-1.log").contains("Read-only file system"));
        assert_same_tree(&p.tree(), &before, "the user's tree changed");
    }
    // With Landlock the write itself is refused: the agent fails to write.
    if sandbox_or_skip(Sandbox::Landlock) {
        std::fs::remove_dir_all(p.path().join(".cassist/runs")).unwrap();
        let done = p.run(&["--keep-going"]).status(1).exec();
        for name in ["look", "peek"] {
            let t = done.task(name);
            assert_eq!(t["state"], "failed", "{t}");
            assert!(t["changed_files"].as_array().unwrap().is_empty(), "{t}");
        }
        let transcript = p.record("look", "transcript-1.log");
        assert!(transcript.contains("ermission denied") || transcript.contains("Read-only"), "{transcript}");
        assert_same_tree(&p.tree(), &before, "the user's tree changed");
    }
}

// ---------------------------------------------------------------------------
// 7. The agent's own report of failure

#[test]
fn agent_reporting_failure_ends_the_task_blocked() {
    let task = r#"task "needs-key" {
    goal "Call the service."
    agent "quitter"
    max-iterations 3
}
"#;
    let p = Test::trusted()
        .agent("quitter", "report-failure.sh", &[], &[])
        .tasks(task)
        .file("src/a.txt", "a\n")
        .git()
        .build();
    let before = p.tree();
    let done = p.run(&[]).status(1).stdout_has("needs an API key").exec();
    let t = done.task("needs-key");
    assert_eq!(t["state"], "blocked");
    assert_eq!(t["attempts"], 1, "a reported failure is not retried");
    assert!(t["reason"].as_str().unwrap().contains("needs an API key"), "{t}");
    let json = done.report_json();
    assert_eq!((json["blocked"].as_u64(), json["failed"].as_u64()), (Some(1), Some(0)));
    assert_same_tree(&p.tree(), &before, "the user's tree changed");
}

// ---------------------------------------------------------------------------
// 8. Timeout

/// The agent ignores SIGTERM, and so do its children: the whole tree must
/// be killed at the timeout, in either workspace mode. A timed-out task is
/// not retried as is but split (SPEC 3.8); this agent hangs only on the
/// whole task and does nothing on its parts.
fn hung_agent_is_killed_at_its_timeout(env: &[(&str, &str)]) {
    let marker = unique_marker("hang");
    let task = r#"task "hang" {
    goal "Hang."
    agent "hang"
    timeout "2s"
}
"#;
    let p = Test::trusted().agent("hang", "hang.sh", &[&marker], &[]).tasks(task).file("src/a.txt", "a\n").build();
    let before = p.tree();
    // SIGTERM at 2 s is ignored; SIGKILL follows after the grace. The
    // agent's children sleep for 1000 s: a run that ends at all killed them;
    // the limit only guards against a hang.
    let done = p
        .run(&[])
        .envs(env)
        .stderr_has("agent timed out (timed out after 2s)")
        .spawn()
        .finish_within(Duration::from_secs(120));
    eprintln!("hung agent {env:?}: cassist ran {:.2}s", done.elapsed.as_secs_f64());
    let t = done.task("hang");
    let parts: Vec<&str> = t["subtasks"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(parts, ["hang/header", "hang/impl", "hang/test"], "{t}");
    assert_eq!(t["attempts"], 4, "{t}");
    assert!(done.elapsed >= Duration::from_secs(2), "ended before its timeout: {:?}", done.elapsed);
    let left = processes_with(&marker);
    assert!(left.is_empty(), "processes left behind: {left:?}");
    let mut after = p.tree();
    assert!(after.remove(&PathBuf::from("cassist.lock")).is_some(), "the passed task was not recorded");
    assert_same_tree(&after, &before, "the user's tree changed");
    assert!(p.record("hang", "transcript-1.log").contains("hang: waiting"));
    assert!(p.record("hang", "transcript-2.log").contains("hang: part header"));
}

in_both_modes!(hung_agent_is_killed_at_its_timeout: hung_agent_and_its_children_are_killed_at_the_timeout, hung_agent_and_its_children_are_killed_at_the_timeout_in_copy_mode);

// ---------------------------------------------------------------------------
// 9, 10. The environment and secrets

#[test]
fn agent_environment_is_the_allowlist_plus_pass_env() {
    let task = r#"task "env-task" {
    goal "Show the environment."
    agent "env"
}
"#;
    let p = Test::trusted()
        .agent("env", "env-dump.sh", &[], &["PASSED_VAR", "FAKE_LOG"])
        .tasks(task)
        .file("src/a.txt", "a\n")
        .build();
    p.run(&[])
        .envs(&[
            ("FOO_UNLISTED", "1"),
            ("OPENAI_API_KEY", "sk-test-abcdefghijklmnop"),
            ("PASSED_VAR", "passed-value"),
            ("FAKE_LOG", &p.out_str()),
        ])
        .exec();
    let text = std::fs::read_to_string(p.out().join("env.txt")).unwrap();
    let env: BTreeMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
    assert_eq!(env.get("PASSED_VAR"), Some(&"passed-value"), "{text}");
    assert_eq!(env.get("CASSIST_TASK"), Some(&"env-task"), "{text}");
    assert_eq!(env.get("CASSIST_ATTEMPT"), Some(&"1"), "{text}");
    assert_eq!(env.get("CASSIST_PART"), Some(&""), "{text}");
    assert!(env.contains_key("HOME") && env.contains_key("PATH"), "{text}");
    for var in ["CASSIST_PROMPT_FILE", "CASSIST_RESULT_FILE"] {
        let value = env.get(var).unwrap_or_else(|| panic!("no {var} in:\n{text}"));
        assert!(Path::new(value).is_absolute(), "{var}={value}");
        assert!(!Path::new(value).starts_with(p.path()), "{var}={value} is inside the project");
    }
    assert!(!env.contains_key("FOO_UNLISTED"), "an unlisted variable leaked:\n{text}");
    assert!(!env.contains_key("OPENAI_API_KEY"), "another agent's key leaked:\n{text}");
    assert!(!text.contains("sk-test-abcdefghijklmnop"), "{text}");
}

#[test]
fn a_custom_agent_gets_the_model_in_its_command_and_environment() {
    // `$1` is the `--model={model}` argument; each run appends a line to
    // the out folder (its state folder, shared with the test).
    let script = "printf '%s arg=%s env=%s\\n' \"$CASSIST_TASK\" \"$1\" \"${CASSIST_MODEL-unset}\" \
                  >> \"$HOME/.cache/cassist-test-out/models\"; echo \"$1\" > \"$CASSIST_TASK.txt\"";
    let agent = format!("agent \"m\" {{\n    command \"sh\" \"-c\" {script:?} \"m\" \"--model={{model}}\"\n}}\n");
    let tasks = "task \"pinned\" {\n    goal \"Write pinned.txt.\"\n    agent \"m\"\n    model \"m-task\"\n}\n\
                 task \"plain\" {\n    goal \"Write plain.txt.\"\n    agent \"m\"\n}\n";
    let models = |p: &Project| {
        let mut lines: Vec<String> =
            std::fs::read_to_string(p.out().join("models")).unwrap_or_default().lines().map(str::to_owned).collect();
        lines.sort();
        lines
    };
    // No model anywhere: `{model}` is empty, `CASSIST_MODEL` unset.
    let p = Test::trusted().kdl(&agent).tasks(tasks).build();
    let done = p.run(&[]).exec();
    assert_eq!(models(&p), ["pinned arg=--model=m-task env=m-task", "plain arg=--model= env=unset"]);
    let table = done.stdout.lines().skip_while(|l| !l.starts_with("TASK ")).collect::<Vec<_>>().join("\n");
    assert!(table.starts_with("TASK") && table.contains(" MODEL "), "{}", done.stdout);
    assert!(table.lines().any(|l| l.starts_with("pinned ") && l.contains(" m-task ")), "{table}");
    assert!(table.lines().any(|l| l.starts_with("plain ") && l.contains(" default ")), "{table}");
    // `defaults { model }`, then `--model` over it; the task's own wins.
    let p = Test::trusted().kdl("defaults {\n    model \"m-default\"\n}\n").kdl(&agent).tasks(tasks).build();
    p.run(&[]).exec();
    assert_eq!(models(&p), ["pinned arg=--model=m-task env=m-task", "plain arg=--model=m-default env=m-default"]);
    p.run(&["--model", "m-cli"]).exec();
    assert_eq!(
        models(&p),
        [
            "pinned arg=--model=m-task env=m-task",
            "plain arg=--model=m-cli env=m-cli",
            "plain arg=--model=m-default env=m-default"
        ]
    );
}

#[test]
fn secret_value_never_appears_under_dot_cassist() {
    let secret = "s3cr3t-value-123456";
    let task = r#"task "leak" {
    goal "Use the service token."
    agent "leaky"
    scope {
        path "src/**"
    }
}
"#;
    let p = Test::trusted()
        .agent("leaky", "leak-env-secret.sh", &[], &["MY_SERVICE_TOKEN"])
        .tasks(task)
        .file("src/a.txt", "a\n")
        .git()
        .build();
    // The value written into a file is rejected as a security issue and
    // never reaches the user's tree.
    let done = p.run(&[]).env("MY_SERVICE_TOKEN", secret).status(1).no_file("src/token.txt").exec();
    let files = files_under(&p.path().join(".cassist"));
    assert!(files.len() > 3, "{files:?}");
    for (path, bytes) in &files {
        assert!(!contains_bytes(bytes, secret.as_bytes()), "the secret is in {}", path.display());
    }
    let transcript = p.record("leak", "transcript-1.log");
    assert!(transcript.contains("leak: the token is [REDACTED]"), "{transcript}");
    assert!(transcript.contains("leak: stderr also says [REDACTED]"), "{transcript}");
    for (what, text) in [("stdout", &done.stdout), ("stderr", &done.stderr), ("report", &done.report)] {
        assert!(!text.contains(secret), "the secret is in {what}:\n{text}");
    }
    let t = done.task("leak");
    assert_eq!(t["state"], "failed", "{t}");
    assert!(t["reason"].as_str().unwrap().contains("security issue"), "{t}");
}

// ---------------------------------------------------------------------------
// 11. A flood of output

#[test]
fn agent_printing_a_gigabyte_does_not_grow_cassist() {
    let bytes: u64 = 1_000_000_000;
    let task = r#"task "flood" {
    goal "Print a lot."
    agent "flood"
    scope {
        path "src/**"
    }
}
"#;
    let p =
        Test::trusted().agent("flood", "flood.sh", &[], &["FAKE_BYTES"]).tasks(task).file("src/a.txt", "a\n").build();
    let n = bytes.to_string();
    // A secret in the environment, so the transcript goes through the
    // redacting writer as in real use.
    let env = [("FAKE_BYTES", n.as_str()), ("SOME_API_KEY", "not-in-the-output-42")];
    let started = Instant::now();
    let (status, maxrss_kib) = p.run(&[]).envs(&env).peak_rss();
    eprintln!(
        "1 GB of agent output: cassist peak RSS {:.1} MiB, {:.1}s",
        maxrss_kib as f64 / 1024.0,
        started.elapsed().as_secs_f64()
    );
    assert!(status.success(), "{status:?}: {}", std::fs::read_to_string(p.report_path()).unwrap_or_default());
    // The transcript keeps the first and the last 32 MiB (limits'
    // default) with a marker between.
    let transcript = p.records("flood").join("transcript-1.log");
    let len = std::fs::metadata(&transcript).unwrap().len();
    let marker = format!("\n[cassist: {} bytes cut]\n", bytes + 1 - (64 << 20));
    assert_eq!(len, (64 << 20) + marker.len() as u64, "the transcript is capped");
    assert_eq!(p.read("src/flood.txt"), "flooded\n");
    assert!(maxrss_kib < 100 * 1024, "cassist peak RSS {maxrss_kib} KiB");
}

// ---------------------------------------------------------------------------
// 12. Conflict at integration

fn conflict_at_integration(mode: &[(&str, &str)]) {
    let task = r#"task "edit-shared" {
    goal "Add a line to src/shared.txt."
    agent "slow"
    scope {
        path "src/**"
    }
}
"#;
    let p = Test::trusted()
        .agent("slow", "wait-then-edit.sh", &[], &["FAKE_MARKER"])
        .tasks(task)
        .file("src/shared.txt", "base\n")
        .git()
        .build();
    let workspace = if mode.is_empty() { "overlay" } else { "copy" };
    let mut run = p
        .run(&[])
        .env("FAKE_MARKER", p.out())
        .envs(mode)
        .status(1)
        .stderr_has(&format!("workspace: {workspace}"))
        .stdout_has("conflict")
        // The user's edit is kept.
        .file("src/shared.txt", "base\nthe user's own edit\n")
        .spawn();
    run.wait_for_file(&p.out().join("started"));
    // The user edits the same file while the agent works.
    p.file("src/shared.txt", "base\nthe user's own edit\n");
    std::fs::write(p.out().join("go"), "").unwrap();
    let done = run.finish();
    let t = done.task("edit-shared");
    assert_eq!(t["state"], "failed");
    let reason = t["reason"].as_str().unwrap();
    assert!(reason.contains("conflict") && reason.contains("src/shared.txt"), "{reason}");
    // The agent's patch is kept.
    assert!(p.record("edit-shared", "patch.diff").contains("+agent's line"));
}

in_both_modes!(conflict_at_integration: conflict_at_integration_leaves_the_users_edit, conflict_at_integration_leaves_the_users_edit_in_copy_mode);

// ---------------------------------------------------------------------------
// 13. Ctrl-C

fn ctrl_c_stops_the_agent_and_cleans_up(mode: &[(&str, &str)]) {
    let marker = unique_marker("ctrl-c");
    let tasks = r#"task "first" {
    goal "Hang until interrupted."
    agent "hang"
    timeout "60s"
}

task "second" {
    goal "Never started."
    agent "good"
}
"#;
    let p = Test::trusted()
        .agent("hang", "hang.sh", &[&marker], &["FAKE_STARTED"])
        .agent("good", "good.sh", &[], &[])
        .tasks(tasks)
        .file("src/hello.txt", "untouched\n")
        .git()
        .build();
    let before = p.tree();
    let tmp = p.out().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let started = p.out().join("started");
    // One task at a time: `second` waits behind `first`.
    let mut run = p.run(&["-j", "1"]).env("TMPDIR", &tmp).env("FAKE_STARTED", &started).envs(mode).status(130).spawn();
    run.wait_for_file(&started);
    assert!(!workspaces_in(&tmp).is_empty(), "no workspace while the agent runs");
    assert!(!processes_with(&marker).is_empty());

    // SIGINT to cassist alone, as a terminal's Ctrl-C reaches it (its
    // agents run in their own process groups).
    let t0 = Instant::now();
    signal(run.pid(), Signal::SIGINT);
    let done = run.finish_within(Duration::from_secs(30));
    eprintln!("Ctrl-C {mode:?}: cassist ended {:.2}s after SIGINT", t0.elapsed().as_secs_f64());

    let left = processes_with(&marker);
    assert!(left.is_empty(), "processes left behind: {left:?}");
    let remaining = workspaces_in(&tmp);
    assert!(remaining.is_empty(), "workspaces left: {remaining:?}");
    assert_same_tree(&p.tree(), &before, "the user's tree changed");

    // Said at once, and the stopped task shows as interrupted (the report
    // keeps SPEC 5's `failed`, with the reason).
    assert!(done.stderr.contains("stopping 1 agent… (Ctrl-C again to stop at once)"), "{}", done.transcript());
    assert!(done.stdout.contains("first interrupted in "), "{}", done.transcript());
    assert!(done.stdout.lines().any(|l| l.starts_with("first ") && l.contains(" interrupted ")), "{}", done.stdout);

    // The store is consistent: every report is whole, no temp file left.
    let report = done.report_json();
    assert_eq!(report["tasks"][0]["state"], "failed", "{report}");
    assert_eq!(report["tasks"][0]["reason"], "interrupted (Ctrl-C)", "{report}");
    assert_eq!(report["tasks"][1]["state"], "skipped", "{report}");
    let files = files_under(&p.path().join(".cassist"));
    let reports: Vec<_> = files.iter().filter(|(p, _)| p.ends_with("report.json")).collect();
    assert!(!reports.is_empty(), "{files:?}");
    for (path, bytes) in reports {
        let r: Value = serde_json::from_slice(bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(r["reason"], "interrupted (Ctrl-C)", "{}", path.display());
    }
    assert_no_temp_files(&p.path().join(".cassist"));
}

in_both_modes!(ctrl_c_stops_the_agent_and_cleans_up: ctrl_c_stops_the_agent_and_cleans_up_the_workspace, ctrl_c_stops_the_agent_and_cleans_up_the_workspace_in_copy_mode);

// ---------------------------------------------------------------------------
// 15. Failover and missing agents

/// `try "missing-agent" "broken" "good"`: the first is not installed, the
/// second is there but cannot start (not executable); "good" does the task.
fn failover_passes_with_the_next_agent(env: &[(&str, &str)]) {
    let bin = tempfile::tempdir().unwrap();
    let broken = bin.path().join("not-executable");
    std::fs::write(&broken, "#!/bin/sh\nexit 0\n").unwrap();
    let p = Test::trusted()
        .agent("good", "good.sh", &[], &[])
        .program_agent("missing-agent", "/nonexistent/cassist-missing-agent")
        .program_agent("broken", broken.to_str().unwrap())
        .kdl("agent \"chain\" {\n    try \"missing-agent\" \"broken\" \"good\"\n}\n")
        .tasks(&HELLO_TASK.replace("agent \"good\"", "agent \"chain\""))
        .file("src/hello.txt", "old\n")
        .build();
    let done = p.run(&[]).envs(env).file("src/hello.txt", "hello from add-hello\n").exec();
    let t = done.task("add-hello");
    assert_eq!(t["state"], "passed");
    assert_eq!(t["agent"], "good");
    assert_eq!(t["attempts"], 1, "failed starts are not attempts");
}

in_both_modes!(failover_passes_with_the_next_agent: failover_chain_uses_the_next_installed_agent, failover_chain_uses_the_next_installed_agent_in_copy_mode);

#[test]
fn task_whose_agent_is_not_installed_fails_naming_it() {
    let p = Test::trusted()
        .program_agent("missing-agent", "cassist-no-such-program")
        .tasks(&HELLO_TASK.replace("agent \"good\"", "agent \"missing-agent\""))
        .file("src/hello.txt", "old\n")
        .build();
    let before = p.tree();
    // The task's own agent is not a "sub-agent" (issue 14, item 12).
    let done = p
        .run(&[])
        .status(1)
        .stdout_has("the task's agent `missing-agent` is not available")
        .stdout_lacks("sub-agent")
        .exec();
    let t = done.task("add-hello");
    assert_eq!(t["state"], "failed");
    assert_eq!(t["attempts"], 0);
    let reason = t["reason"].as_str().unwrap();
    assert!(reason.contains("the task's agent `missing-agent` is not available"), "{reason}");
    assert!(reason.contains("missing-agent") && reason.contains("cassist-no-such-program"), "{reason}");
    assert_same_tree(&p.tree(), &before, "the user's tree changed");
}

// ---------------------------------------------------------------------------
// 16. Explore summaries

#[test]
fn explore_summary_reaches_the_dependents_prompt() {
    let summary = "SURVEY-SUMMARY: the greeting lives in src/hello.txt and nothing reads it.";
    let tasks = r#"task "survey" {
    goal "Find where the greeting lives."
    kind "explore"
    agent "explorer"
}

task "add-hello" {
    goal "Write a greeting into src/hello.txt."
    agent "good"
    depends-on "survey"
    scope {
        path "src/**"
    }
}
"#;
    let p = Test::trusted()
        .agent("explorer", "summarize.sh", &[], &["FAKE_SUMMARY"])
        .agent("good", "good.sh", &[], &["FAKE_LOG"])
        .tasks(tasks)
        .file("src/hello.txt", "old\n")
        .build();
    let done = p.run(&[]).env("FAKE_SUMMARY", summary).env("FAKE_LOG", p.out()).exec();
    let survey = done.task("survey");
    assert_eq!(survey["state"], "passed");
    assert_eq!(survey["summary"], summary);
    assert_eq!(strings(&survey["changed_files"]), Vec::<String>::new());
    let received = p.stdin_of("add-hello", 1);
    assert!(section(&received, "Context").contains(summary), "{received}");
    assert!(section(&p.record("add-hello", "prompt-1.md"), "Context").contains(summary));
    assert!(!section(&p.record("survey", "prompt-1.md"), "Context").contains(summary));
}

#[test]
fn long_summaries_are_cut_by_columns_with_an_ellipsis() {
    let summary = format!("Survey: {}\nA second line.", "日本語 words ".repeat(20));
    let p = Test::trusted()
        .agent("explorer", "summarize.sh", &[], &["FAKE_SUMMARY"])
        .tasks("task \"survey\" {\n    goal \"Survey.\"\n    kind \"explore\"\n    agent \"explorer\"\n}\n")
        .build();
    p.run(&[]).env("FAKE_SUMMARY", &summary).exec();
    let width = |s: &str| unicode_width::UnicodeWidthStr::width(s);
    let again = p.run(&[]).env("FAKE_SUMMARY", &summary).exec();
    let line = again.stdout.lines().find(|l| l.starts_with("survey up-to-date: ")).expect(&again.stdout);
    let shown = line.strip_prefix("survey up-to-date: ").unwrap();
    assert!(shown.starts_with("Survey: 日本語 words") && shown.ends_with('…'), "{line}");
    assert!(width(shown) <= 100 && width(shown) >= 98, "{} columns: {shown}", width(shown));

    let ls = p.cassist(&["cache", "ls"]).exec();
    let row = ls.stdout.lines().find(|l| l.starts_with("survey ")).expect(&ls.stdout);
    let cell = &row[row.find("Survey: ").expect(row)..];
    assert!(cell.ends_with('…') && width(cell) <= 50, "{row}");
}

// ---------------------------------------------------------------------------
// The sandbox around the agent

/// The agent writes to the user's project by absolute path: that write must
/// land in the workspace (and go through review) or be refused, never reach
/// the user's tree behind cassist's back.
fn absolute_path_write_goes_through_the_workspace(env: &[(&str, &str)], under_tmp: bool) {
    let task = r#"task "outside" {
    goal "Write src/in.txt."
    agent "outside"
    scope {
        path "src/**"
    }
}
"#;
    let test = Test::trusted().agent("outside", "write-outside.sh", &[], &["FAKE_TARGET"]);
    let p = if under_tmp { test.under_tmp() } else { test }.tasks(task).file("src/a.txt", "a\n").build();
    let target = p.path().join("src/escape.txt");
    let done = p.run(&[]).env("FAKE_TARGET", &target).envs(env).exec();
    let t = done.task("outside");
    let changed = strings(&t["changed_files"]);
    assert!(
        !target.exists() || changed.contains(&"src/escape.txt".to_owned()),
        "the agent wrote {} directly, bypassing review and integration (changed_files: {changed:?})",
        target.display()
    );
}

#[test]
fn absolute_path_write_lands_in_the_overlay() {
    absolute_path_write_goes_through_the_workspace(&[], false);
    absolute_path_write_goes_through_the_workspace(&[], true);
}

#[test]
fn absolute_path_write_in_copy_mode_is_refused() {
    absolute_path_write_goes_through_the_workspace(COPY, false);
    absolute_path_write_goes_through_the_workspace(COPY, true);
}

#[test]
fn run_adds_nothing_to_a_project_that_is_home() {
    let p = Test::trusted()
        .agent("quitter", "report-failure.sh", &[], &[])
        .tasks("task \"t\" {\n    goal \"G.\"\n    agent \"quitter\"\n}\n")
        .file("src/a.txt", "a\n")
        .build();
    let before = p.tree();
    // A user running cassist in their home folder.
    p.run(&[]).env("HOME", p.path()).status(1).exec();
    assert_same_tree(&p.tree(), &before, "a blocked task changed the user's tree");
}

// ---------------------------------------------------------------------------
// Project config around a run: setup, instructions, build, --filter,
// --keep-workspace

/// A project whose `cassist.kdl` holds `config` and an agent `a` running
/// `script` with `sh -c`, with `tasks` and `src/a.txt`.
fn sh_project(config: &str, script: &str, tasks: &str) -> Project {
    Test::trusted().kdl(config).sh_agent("a", script).tasks(tasks).file("src/a.txt", "a\n").build()
}

#[test]
fn setup_runs_in_the_workspace_first_and_a_failing_setup_calls_no_agent() {
    let task = "task \"t\" {\n    goal \"Use the setup output.\"\n    agent \"a\"\n}\n";
    // The agent copies what setup made into src/; the setup's own file is
    // not part of the change (setup writes a layer of its own, under the
    // agent's).
    let setup = "setup \"mkdir -p build && echo prepared > build/setup.txt\"\n";
    let p = sh_project(setup, "mkdir -p src && cp build/setup.txt src/seen.txt", task);
    let done = p.run(&[]).file("src/seen.txt", "prepared\n").no_file("build/setup.txt").exec();
    assert_eq!(strings(&done.task("t")["changed_files"]), ["src/seen.txt"]);

    let p = sh_project("setup \"echo setup-broke >&2; exit 3\"\n", "touch src/agent-ran.txt", task);
    let before = p.tree();
    // The setup's output is shown.
    let done = p.run(&[]).status(1).stdout_has("setup-broke").exec();
    let t = done.task("t");
    assert_eq!(t["attempts"], 0, "no agent call after a failed setup: {t}");
    assert!(t["reason"].as_str().unwrap().contains("setup command"), "{t}");
    assert_same_tree(&p.tree(), &before, "a failed setup changed the tree");
}

#[test]
fn instructions_are_placed_under_the_agents_name_and_never_integrated() {
    // A custom agent reads AGENTS.md; it copies what it saw into src/.
    let test = || {
        Test::trusted()
            .kdl("instructions \"docs/agent.md\"\n")
            .sh_agent("a", "mkdir -p src && cp AGENTS.md src/seen.md && echo appended >> AGENTS.md")
            .tasks("task \"t\" {\n    goal \"Follow the instructions.\"\n    agent \"a\"\n}\n")
            .file("docs/agent.md", "Always write tests.\n")
    };
    let p = test().file("src/a.txt", "a\n").build();
    let done = p.run(&[]).file("src/seen.md", "Always write tests.\n").exec();
    assert!(!p.exists("AGENTS.md"), "the placed instructions reached the user's tree");
    assert_eq!(strings(&done.task("t")["changed_files"]), vec!["src/seen.md".to_owned()]);

    // A project that has its own AGENTS.md keeps it: nothing is placed. The
    // agent appended to the project's AGENTS.md: a real change now.
    let p = test().file("AGENTS.md", "The project's own.\n").build();
    p.run(&[]).file("src/seen.md", "The project's own.\n").file("AGENTS.md", "The project's own.\nappended\n").exec();
}

#[test]
fn a_failing_build_takes_the_change_back_out() {
    let task = "task \"t\" {\n    goal \"Change src/a.txt.\"\n    agent \"a\"\n}\n";
    let p = sh_project("build \"grep -q changed src/a.txt\"\n", "echo changed > src/a.txt", task);
    p.run(&[]).file("src/a.txt", "changed\n").exec();

    let broken = "echo changed > src/a.txt; echo new > src/b.txt";
    let p = sh_project("build \"echo build-broke; exit 2\"\n", broken, task);
    let before = p.tree();
    let done = p.run(&[]).status(1).no_file("src/b.txt").exec();
    let t = done.task("t");
    assert!(t["reason"].as_str().unwrap().contains("build command"), "{t}");
    assert_same_tree(&p.tree(), &before, "a failed build left the change in the tree");
}

#[test]
fn filter_runs_a_task_and_what_it_depends_on_only() {
    let tasks = "task \"base\" {\n    goal \"B.\"\n    agent \"a\"\n}\n\
                 task \"top\" {\n    goal \"T.\"\n    agent \"a\"\n    depends-on \"base\"\n}\n\
                 task \"other\" {\n    goal \"O.\"\n    agent \"a\"\n}\n";
    let p = sh_project("", "mkdir -p src && echo x > src/$CASSIST_TASK.txt", tasks);
    let done = p.run(&["--filter", "top"]).no_file("src/other.txt").exec();
    assert_eq!(crate::support::names(&done.report_json()), ["base", "top"]);
    assert!(p.exists("src/base.txt") && p.exists("src/top.txt"));
    // An unknown name is invalid input.
    p.run(&["--filter", "tpo"]).status(2).stderr_has("did you mean `top`").exec();
}

/// The tree a run's summary names as the workspace it kept.
#[track_caller]
fn kept_tree(done: &crate::support::Output) -> PathBuf {
    let line = done.stdout.lines().find(|l| l.contains("workspace kept:")).unwrap_or_else(|| panic!("{}", done.stdout));
    let kept = PathBuf::from(line.split("workspace kept:").nth(1).unwrap().trim());
    assert!(kept.is_dir() && kept.ends_with("tree"), "{}", kept.display());
    kept
}

/// `sh -c script` in `dir`: whether it succeeded.
fn sh_in(dir: &Path, script: &str) -> bool {
    std::process::Command::new("sh").args(["-c", script]).current_dir(dir).status().unwrap().success()
}

/// `--keep-workspace` keeps a failed task's workspace as a full tree the
/// user can test in; it survives other runs, of the project and of
/// another one, until a `--keep-workspace` run of the project or its
/// `cassist cache gc` removes it.
fn keep_workspace_keeps_a_testable_tree_until_gc(mode: &[(&str, &str)]) {
    let task = "task \"t\" {\n    goal \"G.\"\n    agent \"a\"\n    max-iterations 1\n    acceptance {\n        run \"sh check.sh\"\n    }\n}\n";
    let p = sh_project("", "echo broken > src/a.txt", task);
    p.file("check.sh", "grep -qx fixed src/a.txt\n");
    // Workspaces under a temp folder of the test's own, shared with the
    // other project.
    let tmp = p.out().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let done = p.run(&["--keep-workspace"]).env("TMPDIR", &tmp).envs(mode).status(1).exec();
    let kept = kept_tree(&done);
    // The task's acceptance command, in the kept tree: the project's
    // files with the agent's change; it passes once the user fixes it
    // there.
    assert_eq!(std::fs::read_to_string(kept.join("src/a.txt")).unwrap(), "broken\n");
    assert!(!sh_in(&kept, "sh check.sh"), "acceptance passed on the agent's change in {}", kept.display());
    std::fs::write(kept.join("src/a.txt"), "fixed\n").unwrap();
    assert!(sh_in(&kept, "sh check.sh"), "acceptance failed on the fixed tree in {}", kept.display());
    assert_eq!(p.read("src/a.txt"), "a\n", "the kept tree is not the user's");

    // Another run of the project keeps nothing and leaves it; so does a
    // run of another project.
    p.run(&[]).env("TMPDIR", &tmp).envs(mode).status(1).stdout_lacks("workspace kept:").exec();
    let other = sh_project("", "echo other > src/a.txt", "task \"o\" {\n    goal \"O.\"\n    agent \"a\"\n}\n");
    other.run(&[]).env("TMPDIR", &tmp).envs(mode).exec();
    assert!(kept.join("src/a.txt").is_file(), "a later run removed the kept workspace");

    // A --keep-workspace run of the project replaces it with its own.
    let done = p
        .run(&["--keep-workspace"])
        .env("TMPDIR", &tmp)
        .envs(mode)
        .status(1)
        .stderr_has("removed 1 workspace(s) kept by an earlier run of this project")
        .exec();
    let newer = kept_tree(&done);
    assert!(!kept.exists() && newer != kept, "{}", kept.display());

    // The other project's gc leaves it; the project's removes it and says so.
    other.cassist(&["cache", "gc"]).env("TMPDIR", &tmp).stdout_lacks("kept workspace").exec();
    assert!(newer.is_dir());
    p.cassist(&["cache", "gc"]).env("TMPDIR", &tmp).stdout_has("removed 1 kept workspace(s), freed ").exec();
    assert!(!newer.exists(), "{}", newer.display());
}

in_both_modes!(keep_workspace_keeps_a_testable_tree_until_gc: keep_workspace_keeps_a_testable_tree_until_gc_in_overlay_mode, keep_workspace_keeps_a_testable_tree_until_gc_in_copy_mode);

/// The issue's case: the scope names `packages/p0000/out.txt`, which
/// `.gitignore` ignores: it is integrated; another ignored file the agent
/// wrote is named in a note.
fn an_ignored_output_the_scope_names_is_integrated(mode: &[(&str, &str)]) {
    let task = "task \"t\" {\n    goal \"Write out.txt.\"\n    agent \"a\"\n    scope {\n        path \"packages/p0000/out.txt\"\n    }\n}\n";
    let project = |script: &str, task: &str| {
        Test::trusted().sh_agent("a", script).tasks(task).file(".gitignore", "out.txt\n*.log\n").build()
    };
    let p = project(
        "mkdir -p packages/p0000 && echo result > packages/p0000/out.txt && echo log > packages/p0000/run.log",
        task,
    );
    let done = p
        .run(&[])
        .envs(mode)
        .file("packages/p0000/out.txt", "result\n")
        .no_file("packages/p0000/run.log")
        .stderr_has("t: not integrated, ignored by .gitignore: packages/p0000/run.log")
        .exec();
    let t = done.task("t");
    assert_eq!(strings(&t["changed_files"]), ["packages/p0000/out.txt"], "{t}");
    assert_eq!(t["reason"], Value::Null, "{t}");

    // An agent that writes only ignored files: told so when resumed, and
    // the report says why nothing was integrated.
    let p = project(
        "mkdir -p packages/p0000 && echo log > packages/p0000/run.log",
        &task.replace("out.txt\"", "other.txt\""),
    );
    let done = p.run(&[]).envs(mode).no_file("packages/p0000/run.log").exec();
    let t = done.task("t");
    let why = "not integrated, ignored by .gitignore: packages/p0000/run.log";
    assert_eq!((t["attempts"].as_u64(), t["reason"].as_str()), (Some(2), Some(why)), "{t}");
    assert!(done.stdout.contains(why), "{}", done.stdout);
    let resumed = p.record("t", "prompt-2.md");
    assert!(
        resumed.contains("ignored by .gitignore, so they are not part of the change: packages/p0000/run.log"),
        "{resumed}"
    );
}

in_both_modes!(an_ignored_output_the_scope_names_is_integrated: an_ignored_output_the_scope_names_is_integrated_in_overlay_mode, an_ignored_output_the_scope_names_is_integrated_in_copy_mode);

/// The tasks an agent writing `$CASSIST_TASK` to the out folder's `calls`
/// ran for, sorted.
fn calls_of(p: &Project) -> Vec<String> {
    let mut calls: Vec<String> =
        std::fs::read_to_string(p.out().join("calls")).unwrap_or_default().lines().map(str::to_owned).collect();
    calls.sort();
    calls
}

/// Counts its calls in the out folder (its state folder, shared with the
/// test), and changes nothing.
const IDLE_AGENT: &str = "echo \"$CASSIST_TASK\" >> \"$HOME/.cache/cassist-test-out/calls\"";

/// An agent that changes nothing and writes no report (SPEC 3.4) is
/// resumed once, unless the task's acceptance commands pass on the
/// unchanged tree: the goal is met already, no second (paid) call.
#[test]
fn an_agent_that_changes_nothing_is_resumed_once_unless_acceptance_passes() {
    let tasks = "task \"met\" {\n    goal \"Keep x.txt.\"\n    agent \"idle\"\n    acceptance {\n        run \"test -f x.txt\"\n    }\n}\n\
                 task \"unmet\" {\n    goal \"Write y.txt.\"\n    agent \"idle\"\n    max-iterations 1\n    acceptance {\n        run \"test -f y.txt\"\n    }\n}\n\
                 task \"open\" {\n    goal \"Do something.\"\n    agent \"idle\"\n}\n";
    let p = Test::trusted().sh_agent("idle", IDLE_AGENT).tasks(tasks).file("x.txt", "x\n").build();
    let done = p.run(&["--keep-going"]).any_status().exec();
    assert_eq!(calls_of(&p), ["met", "open", "open", "unmet", "unmet"], "{}", done.transcript());
    let met = done.task("met");
    assert_eq!((met["state"].as_str(), met["attempts"].as_u64()), (Some("passed"), Some(1)), "{met}");
    assert_eq!(met["acceptance"][0]["passed"], true, "{met}");
    assert!(done.stderr.contains("the acceptance commands pass: the goal is met"), "{}", done.stderr);
    // Acceptance fails on the unchanged tree: resumed, told why.
    let unmet = done.task("unmet");
    assert_eq!((unmet["state"].as_str(), unmet["attempts"].as_u64()), (Some("failed"), Some(2)), "{unmet}");
    let resumed = p.record("unmet", "prompt-2.md");
    assert!(resumed.contains("You stopped without changing any file"), "{resumed}");
    assert!(resumed.contains("test -f y.txt"), "the failed acceptance command: {resumed}");
    // No acceptance commands: resumed once, as before.
    assert_eq!(done.task("open")["attempts"], 2);
    assert!(p.record("open", "prompt-2.md").contains("You stopped without changing any file"));
}

/// Without trust a `code` task could only run read-only: it fails at
/// once, its agent never called, saying what to add to cassist.kdl; the
/// other kinds run read-only as before (SPEC 2).
#[test]
fn without_trust_a_code_task_fails_before_its_agent_is_called() {
    let tasks = "task \"edit\" {\n    goal \"Write y.txt.\"\n    agent \"idle\"\n}\n\
                 task \"look\" {\n    goal \"Describe x.txt.\"\n    kind \"review\"\n    agent \"idle\"\n}\n";
    let p = Test::new()
        .outside_tmp()
        .config("test #false\n")
        .sh_agent("idle", IDLE_AGENT)
        .tasks(tasks)
        .file("x.txt", "x\n")
        .build();
    let done = p.run(&["--keep-going"]).status(1).exec();
    assert_eq!(calls_of(&p), ["look"], "{}", done.transcript());
    let edit = done.task("edit");
    assert_eq!((edit["state"].as_str(), edit["attempts"].as_u64()), (Some("failed"), Some(0)), "{edit}");
    let reason = edit["reason"].as_str().unwrap();
    assert!(reason.contains("sets no trust") && reason.contains("its agent was not started"), "{reason}");
    assert!(reason.contains("Add `trust \"workspace-write\"` to cassist.kdl"), "{reason}");
    assert!(done.stdout.contains("Add `trust \"workspace-write\"` to cassist.kdl"), "{}", done.stdout);
    assert_eq!(done.task("look")["state"], "passed");
    let warning = crate::support::flat(&done.stderr);
    assert!(warning.contains("and `code` tasks fail without starting"), "{warning}");
    // With trust, it runs.
    p.edit("cassist.kdl", "test #false\n", "trust \"workspace-write\"\ntest #false\n");
    p.run(&["--filter", "edit"]).any_status().exec();
    assert_eq!(calls_of(&p), ["edit", "edit", "look"]);
}
