//! `cassist run` end to end (SPEC 3 and 5, issue 3): the real binary on
//! small temporary projects, with the fake agents of `fixtures/agents/`.
//!
//! Each test writes a `cassist.kdl` whose custom agent runs one of those
//! scripts by absolute path, runs `cassist run`, and checks what a user
//! would see: the exit code, the `--report-json` document, the files of the
//! project (and its git state), the records under `.cassist/`, and that no
//! process of the agent is left behind.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::fx::*;
use common::{assert_same_tree, git, processes_with};
use serde_json::Value;

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
    let fx = Fx::new(&agent("good", "good.sh", &[], &[]), HELLO_TASK);
    fx.file("src/hello.txt", "old greeting\n").file("README.md", "a project\n").git_init();
    let head = fx.head();

    let done = fx.run(&[], env);
    done.exit(0);
    assert!(done.stderr.contains(&format!("add-hello: workspace: {mode}")), "{}", done.transcript());
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
    let json = done.json();
    assert_eq!(
        (json["passed"].as_u64(), json["failed"].as_u64(), json["blocked"].as_u64()),
        (Some(1), Some(0), Some(0))
    );

    // In the user's tree, uncommitted.
    assert_eq!(fx.read("src/hello.txt"), "hello from add-hello\n");
    assert_eq!(fx.head(), head, "cassist moved HEAD");
    assert_eq!(git(fx.path(), &["rev-list", "--count", "HEAD"]).trim(), "1");
    assert_eq!(fx.status(), " M src/hello.txt\n", ".cassist/ must be ignored and the change left uncommitted");

    // The records.
    assert!(fx.record("add-hello", "prompt-1.md").starts_with("# Goal\n"));
    assert!(fx.record("add-hello", "transcript-1.log").contains("good: wrote src/hello.txt"));
    assert!(fx.record("add-hello", "result-1.json").contains("\"success\": true"));
    let review: Value = serde_json::from_str(&fx.record("add-hello", "review-1.json")).unwrap();
    assert!(review.is_object(), "{review}");
    let acc: Value = serde_json::from_str(&fx.record("add-hello", "acceptance-1.json")).unwrap();
    assert_eq!(acc[0]["passed"], true, "{acc}");
    let patch = fx.record("add-hello", "patch.diff");
    assert!(patch.contains("-old greeting") && patch.contains("+hello from add-hello"), "{patch}");
    let recorded: Value = serde_json::from_str(&fx.record("add-hello", "report.json")).unwrap();
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
    passing_task_is_integrated_uncommitted(&[("CASSIST_WORKSPACE", "copy")], "copy");
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
    let fx = Fx::new(&agent("fixer", "fix-on-feedback.sh", &[], &["FAKE_LOG"]), &answer_task(42, 3));
    fx.file("src/answer.txt", "0\n").git_init();
    let head = fx.head();
    let done = fx.run(&[], &[("FAKE_LOG", fx.out().to_str().unwrap())]);
    done.exit(0);
    let t = done.task("answer");
    assert_eq!(t["state"], "passed");
    assert_eq!(t["attempts"], 2);
    assert_eq!(strings(&t["changed_files"]), ["src/answer.txt"]);
    assert_eq!(fx.read("src/answer.txt"), "42\n");
    assert_eq!(fx.head(), head);
    assert_eq!(fx.status(), " M src/answer.txt\n");

    // The first round failed on acceptance...
    let first: Value = serde_json::from_str(&fx.record("answer", "acceptance-1.json")).unwrap();
    assert_eq!(first[0]["passed"], false, "{first}");
    assert_eq!(first[0]["exit_code"], 1, "{first}");
    let prompt1 = fx.record("answer", "prompt-1.md");
    assert!(!prompt1.contains("# Review feedback"), "{prompt1}");
    assert!(!fx.stdin_of("answer", 1).contains("# Review feedback"));
    // ... and the second prompt carries the failure: in the record and on
    // the agent's stdin.
    let prompt2 = fx.record("answer", "prompt-2.md");
    for prompt in [prompt2.as_str(), fx.stdin_of("answer", 2).as_str()] {
        let feedback = section(prompt, "Review feedback");
        assert!(feedback.contains("ANSWER-CHECK: got 41, want 42"), "{prompt}");
        assert!(feedback.contains("exit code 1"), "{prompt}");
        assert!(prompt.starts_with(&prompt1), "the second prompt is the first plus the feedback:\n{prompt}");
    }
    assert_eq!(fx.stdin_of("answer", 2).trim_end(), prompt2.trim_end(), "the agent got the recorded prompt");
}

#[test]
fn giving_up_after_max_iterations_leaves_the_tree_untouched() {
    let fx = Fx::new(&agent("fixer", "fix-on-feedback.sh", &[], &[]), &answer_task(43, 2));
    fx.file("src/answer.txt", "0\n").file("notes.txt", "untracked and kept\n").git_init();
    fx.file("notes.txt", "changed before the run\n");
    let head = fx.head();
    let status = fx.status();
    let before = fx.tree();

    let done = fx.run(&[], &[]);
    done.exit(1);
    let t = done.task("answer");
    assert_eq!(t["state"], "failed");
    assert_eq!(t["attempts"], 2);
    let reason = t["reason"].as_str().unwrap();
    assert!(reason.contains("acceptance command") && reason.contains("after 2 iterations"), "{reason}");
    assert_eq!(done.json()["failed"], 1);
    assert!(done.stdout.contains("ANSWER-CHECK: got 42, want 43"), "the failing tail is shown:\n{}", done.stdout);
    assert!(done.stdout.contains("transcript: "), "{}", done.stdout);

    assert_same_tree(&fx.tree(), &before, "a failed task changed the user's tree");
    assert_eq!(fx.head(), head);
    assert_eq!(fx.status(), status);
    assert!(!fx.records("answer").join("patch.diff").exists(), "no accepted patch");
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
    let fx = Fx::new(&agent("stray", "out-of-scope.sh", &[], &[]), &scope_task(1));
    fx.file("src/keep.txt", "keep\n").git_init();
    let before = fx.tree();
    let done = fx.run(&[], &[]);
    done.exit(1);
    let t = done.task("scoped");
    assert_eq!(t["state"], "failed");
    let reason = t["reason"].as_str().unwrap();
    assert!(reason.contains("modified unrelated files") && reason.contains("notes/out.txt"), "{reason}");
    assert_same_tree(&fx.tree(), &before, "nothing of a rejected change is integrated");
    assert!(!fx.path().join("notes/out.txt").exists() && !fx.path().join("src/in.txt").exists());
    assert_eq!(fx.status(), "");
}

#[test]
fn out_of_scope_edit_is_fixed_on_review_feedback() {
    let fx = Fx::new(&agent("stray", "out-of-scope.sh", &[], &[]), &scope_task(2));
    fx.file("src/keep.txt", "keep\n").git_init();
    let done = fx.run(&[], &[]);
    done.exit(0);
    let t = done.task("scoped");
    assert_eq!(t["state"], "passed");
    assert_eq!(t["attempts"], 2);
    assert_eq!(strings(&t["changed_files"]), ["src/in.txt"]);
    let feedback = section(&fx.record("scoped", "prompt-2.md"), "Review feedback").to_owned();
    assert!(feedback.contains("modified unrelated files") && feedback.contains("notes/out.txt"), "{feedback}");
    assert_eq!(fx.read("src/in.txt"), "in scope, attempt 2\n");
    assert!(!fx.path().join("notes").exists(), "the out-of-scope file reached the tree");
    assert_eq!(fx.status(), "?? src/in.txt\n");
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
    let fx = Fx::new(&agent("planter", "plant-secret.sh", &[], &["FAKE_LOG"]), task);
    fx.file("src/app.py", "print('hi')\n").git_init();
    let before = fx.tree();
    let done = fx.run(&[], &[("FAKE_LOG", fx.out().to_str().unwrap())]);
    done.exit(1);
    let t = done.task("config");
    assert_eq!(t["state"], "failed");
    let reason = t["reason"].as_str().unwrap();
    assert!(reason.contains("security issue") && reason.contains("AWS access key"), "{reason}");
    assert!(reason.contains("src/config.py"), "{reason}");
    assert_same_tree(&fx.tree(), &before, "the user's tree changed");

    // The agent planted it every time (so a retry happened) and was told
    // why without being shown the key.
    let second = fx.stdin_of("config", 2);
    assert!(section(&second, "Review feedback").contains("AWS access key"), "{second}");
    assert!(!second.contains(&key));
    // Nowhere in what cassist printed or recorded.
    for (what, text) in [("stdout", &done.stdout), ("stderr", &done.stderr), ("report", &done.report)] {
        assert!(!text.contains(&key), "the key is in {what}:\n{text}");
    }
    let files = files_under(&fx.path().join(".cassist"));
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
    let fx = Fx::new(&agent("good", "good.sh", &[], &[]), tasks);
    fx.file("src/hello.txt", "untouched\n").git_init();
    let before = fx.tree();
    // Without Landlock (CASSIST_LANDLOCK=off, as on a kernel without it)
    // the write happens in the workspace, and the review rejects it.
    let done = fx.run(&["--keep-going"], &[("CASSIST_LANDLOCK", "off")]);
    done.exit(1);
    for name in ["look", "peek"] {
        let t = done.task(name);
        assert_eq!(t["state"], "failed", "{t}");
        let reason = t["reason"].as_str().unwrap();
        assert!(reason.contains("read-only") && reason.contains("src/hello.txt"), "{name}: {reason}");
    }
    assert_eq!(done.json()["failed"], 2);
    assert_same_tree(&fx.tree(), &before, "the user's tree changed");
    assert_eq!(fx.read("src/hello.txt"), "untouched\n");
    // With Landlock the write itself is refused: the agent fails to write.
    if cassist::sandbox::landlock_abi() > 0 {
        std::fs::remove_dir_all(fx.path().join(".cassist/runs")).unwrap();
        let done = fx.run(&["--keep-going"], &[]);
        done.exit(1);
        for name in ["look", "peek"] {
            let t = done.task(name);
            assert_eq!(t["state"], "failed", "{t}");
            assert!(t["changed_files"].as_array().unwrap().is_empty(), "{t}");
        }
        let transcript = fx.record("look", "transcript-1.log");
        assert!(transcript.contains("ermission denied") || transcript.contains("Read-only"), "{transcript}");
        assert_same_tree(&fx.tree(), &before, "the user's tree changed");
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
    let fx = Fx::new(&agent("quitter", "report-failure.sh", &[], &[]), task);
    fx.file("src/a.txt", "a\n").git_init();
    let before = fx.tree();
    let done = fx.run(&[], &[]);
    done.exit(1);
    let t = done.task("needs-key");
    assert_eq!(t["state"], "blocked");
    assert_eq!(t["attempts"], 1, "a reported failure is not retried");
    assert!(t["reason"].as_str().unwrap().contains("needs an API key"), "{t}");
    let json = done.json();
    assert_eq!((json["blocked"].as_u64(), json["failed"].as_u64()), (Some(1), Some(0)));
    assert!(done.stdout.contains("needs an API key"), "{}", done.stdout);
    assert_same_tree(&fx.tree(), &before, "the user's tree changed");
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
    let fx = Fx::new(&agent("hang", "hang.sh", &[&marker], &[]), task);
    fx.file("src/a.txt", "a\n");
    let before = fx.tree();
    let done = fx.run(&[], env);
    // SIGTERM at 2 s is ignored; SIGKILL follows after the 5 s grace.
    let (timeout, grace, slack) = (2.0, 5.0, 4.0);
    eprintln!("hung agent {env:?}: cassist ran {:.2}s", done.elapsed.as_secs_f64());
    done.exit(0);
    let t = done.task("hang");
    let parts: Vec<&str> = t["subtasks"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(parts, ["hang/header", "hang/impl", "hang/test"], "{t}");
    assert_eq!(t["attempts"], 4, "{t}");
    assert!(done.stderr.contains("agent timed out (timed out after 2s)"), "{}", done.stderr);
    assert!(done.elapsed.as_secs_f64() >= timeout, "ended before its timeout: {:?}", done.elapsed);
    assert!(done.elapsed.as_secs_f64() < timeout + grace + slack, "took {:?}", done.elapsed);
    let left = processes_with(&marker);
    assert!(left.is_empty(), "processes left behind: {left:?}");
    let mut after = fx.tree();
    assert!(after.remove(&PathBuf::from("cassist.lock")).is_some(), "the passed task was not recorded");
    assert_same_tree(&after, &before, "the user's tree changed");
    assert!(fx.record("hang", "transcript-1.log").contains("hang: waiting"));
    assert!(fx.record("hang", "transcript-2.log").contains("hang: part header"));
}

#[test]
fn hung_agent_and_its_children_are_killed_at_the_timeout() {
    hung_agent_is_killed_at_its_timeout(&[]);
}

#[test]
fn hung_agent_and_its_children_are_killed_at_the_timeout_in_copy_mode() {
    hung_agent_is_killed_at_its_timeout(&[("CASSIST_WORKSPACE", "copy")]);
}

// ---------------------------------------------------------------------------
// 9, 10. The environment and secrets

#[test]
fn agent_environment_is_the_allowlist_plus_pass_env() {
    let task = r#"task "env-task" {
    goal "Show the environment."
    agent "env"
}
"#;
    let fx = Fx::new(&agent("env", "env-dump.sh", &[], &["PASSED_VAR", "FAKE_LOG"]), task);
    fx.file("src/a.txt", "a\n");
    let out = fx.out().to_str().unwrap().to_owned();
    let done = fx.run(
        &[],
        &[
            ("FOO_UNLISTED", "1"),
            ("OPENAI_API_KEY", "sk-test-abcdefghijklmnop"),
            ("PASSED_VAR", "passed-value"),
            ("FAKE_LOG", &out),
        ],
    );
    done.exit(0);
    let text = std::fs::read_to_string(fx.out().join("env.txt")).unwrap();
    let env: BTreeMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
    assert_eq!(env.get("PASSED_VAR"), Some(&"passed-value"), "{text}");
    assert_eq!(env.get("CASSIST_TASK"), Some(&"env-task"), "{text}");
    assert_eq!(env.get("CASSIST_ATTEMPT"), Some(&"1"), "{text}");
    assert_eq!(env.get("CASSIST_PART"), Some(&""), "{text}");
    assert!(env.contains_key("HOME") && env.contains_key("PATH"), "{text}");
    let project = fx.path().canonicalize().unwrap();
    for var in ["CASSIST_PROMPT_FILE", "CASSIST_RESULT_FILE"] {
        let value = env.get(var).unwrap_or_else(|| panic!("no {var} in:\n{text}"));
        assert!(Path::new(value).is_absolute(), "{var}={value}");
        assert!(
            !Path::new(value).starts_with(&project) && !Path::new(value).starts_with(fx.path()),
            "{var}={value} is inside the project"
        );
    }
    assert!(!env.contains_key("FOO_UNLISTED"), "an unlisted variable leaked:\n{text}");
    assert!(!env.contains_key("OPENAI_API_KEY"), "another agent's key leaked:\n{text}");
    assert!(!text.contains("sk-test-abcdefghijklmnop"), "{text}");
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
    let fx = Fx::new(&agent("leaky", "leak-env-secret.sh", &[], &["MY_SERVICE_TOKEN"]), task);
    fx.file("src/a.txt", "a\n").git_init();
    let done = fx.run(&[], &[("MY_SERVICE_TOKEN", secret)]);
    let files = files_under(&fx.path().join(".cassist"));
    assert!(files.len() > 3, "{files:?}");
    for (path, bytes) in &files {
        assert!(!contains_bytes(bytes, secret.as_bytes()), "the secret is in {}", path.display());
    }
    let transcript = fx.record("leak", "transcript-1.log");
    assert!(transcript.contains("leak: the token is [REDACTED]"), "{transcript}");
    assert!(transcript.contains("leak: stderr also says [REDACTED]"), "{transcript}");
    for (what, text) in [("stdout", &done.stdout), ("stderr", &done.stderr), ("report", &done.report)] {
        assert!(!text.contains(secret), "the secret is in {what}:\n{text}");
    }
    // The value written into a file is rejected as a security issue and
    // never reaches the user's tree.
    let t = done.task("leak");
    assert_eq!(t["state"], "failed", "{t}");
    assert!(t["reason"].as_str().unwrap().contains("security issue"), "{t}");
    assert!(!fx.path().join("src/token.txt").exists(), "the secret reached the user's tree");
}

// ---------------------------------------------------------------------------
// 11. A flood of output

/// Runs `cmd` to its end and returns its status and peak RSS in KiB: the
/// `ru_maxrss` wait4(2) reports for this child (its own peak, or that of a
/// descendant it reaped, whichever is larger), not the whole test process's
/// RUSAGE_CHILDREN, which other tests' children share.
fn run_measured(mut cmd: Command) -> (ExitStatus, i64) {
    use std::os::unix::process::ExitStatusExt;
    let child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: a zeroed rusage is valid; wait4 on our own child's pid.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
    std::mem::forget(child); // reaped already
    (ExitStatus::from_raw(status), usage.ru_maxrss)
}

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
    let fx = Fx::new(&agent("flood", "flood.sh", &[], &["FAKE_BYTES"]), task);
    fx.file("src/a.txt", "a\n");
    let n = bytes.to_string();
    // A secret in the environment, so the transcript goes through the
    // redacting writer as in real use.
    let env = [("FAKE_BYTES", n.as_str()), ("SOME_API_KEY", "not-in-the-output-42")];
    let started = Instant::now();
    let (status, maxrss_kib) = run_measured(fx.command(&[], &env));
    eprintln!(
        "1 GB of agent output: cassist peak RSS {:.1} MiB, {:.1}s",
        maxrss_kib as f64 / 1024.0,
        started.elapsed().as_secs_f64()
    );
    assert!(status.success(), "{status:?}: {}", std::fs::read_to_string(fx.report_path()).unwrap_or_default());
    let transcript = fx.records("flood").join("transcript-1.log");
    let len = std::fs::metadata(&transcript).unwrap().len();
    assert!(len > bytes, "the transcript holds the whole output: {len} bytes");
    let _ = std::fs::remove_file(&transcript); // 1 GB
    assert_eq!(fx.read("src/flood.txt"), "flooded\n");
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
    let fx = Fx::new(&agent("slow", "wait-then-edit.sh", &[], &["FAKE_MARKER"]), task);
    fx.file("src/shared.txt", "base\n").git_init();
    let out = fx.out().to_str().unwrap().to_owned();
    let env = [&[("FAKE_MARKER", out.as_str())], mode].concat();
    let mut child = fx.command(&[], &env).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    wait_for_file(&fx.out().join("started"), &mut child, Duration::from_secs(30));
    // The user edits the same file while the agent works.
    fx.file("src/shared.txt", "base\nthe user's own edit\n");
    std::fs::write(fx.out().join("go"), "").unwrap();
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let workspace = if mode.is_empty() { "overlay" } else { "copy" };
    assert!(stderr.contains(&format!("workspace: {workspace}")), "{stderr}");
    assert_eq!(output.status.code(), Some(1), "{stdout}\n{stderr}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(fx.report_path()).unwrap()).unwrap();
    let t = &report["tasks"][0];
    assert_eq!(t["state"], "failed");
    let reason = t["reason"].as_str().unwrap();
    assert!(reason.contains("conflict") && reason.contains("src/shared.txt"), "{reason}");
    assert!(stdout.contains("conflict"), "{stdout}");
    assert_eq!(fx.read("src/shared.txt"), "base\nthe user's own edit\n", "the user's edit was overwritten");
    // The agent's patch is kept.
    assert!(fx.record("edit-shared", "patch.diff").contains("+agent's line"));
}

#[test]
fn conflict_at_integration_leaves_the_users_edit() {
    conflict_at_integration(&[]);
}

#[test]
fn conflict_at_integration_leaves_the_users_edit_in_copy_mode() {
    conflict_at_integration(&[("CASSIST_WORKSPACE", "copy")]);
}

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
    let agents =
        format!("{}{}", agent("hang", "hang.sh", &[&marker], &["FAKE_STARTED"]), agent("good", "good.sh", &[], &[]));
    let fx = Fx::new(&agents, tasks);
    fx.file("src/hello.txt", "untouched\n").git_init();
    let before = fx.tree();
    let tmp = fx.out().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let started = fx.out().join("started");
    let mut env = vec![("TMPDIR", tmp.to_str().unwrap()), ("FAKE_STARTED", started.to_str().unwrap())];
    env.extend_from_slice(mode);
    // One task at a time: `second` waits behind `first`.
    let mut child = fx.command(&["-j", "1"], &env).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    wait_for_file(&started, &mut child, Duration::from_secs(30));
    let workspaces = tmp.join(format!("cassist-{}", unsafe { libc::getuid() }));
    assert!(std::fs::read_dir(&workspaces).unwrap().count() > 0, "no workspace while the agent runs");
    assert!(!processes_with(&marker).is_empty());

    // SIGINT to cassist alone, as a terminal's Ctrl-C reaches it (its
    // agents run in their own process groups).
    let t0 = Instant::now();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let status = wait_with_limit(&mut child, Duration::from_secs(30));
    eprintln!("Ctrl-C {mode:?}: cassist ended {:.2}s after SIGINT", t0.elapsed().as_secs_f64());
    assert_eq!(status.code(), Some(130), "{status:?}");

    let left = processes_with(&marker);
    assert!(left.is_empty(), "processes left behind: {left:?}");
    let remaining: Vec<_> =
        std::fs::read_dir(&workspaces).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    assert!(remaining.is_empty(), "workspaces left: {remaining:?}");
    assert_same_tree(&fx.tree(), &before, "the user's tree changed");

    // The store is consistent: every report is whole, no temp file left.
    let report: Value = serde_json::from_str(&std::fs::read_to_string(fx.report_path()).unwrap()).unwrap();
    assert_eq!(report["tasks"][0]["reason"], "interrupted", "{report}");
    assert_eq!(report["tasks"][1]["state"], "skipped", "{report}");
    let files = files_under(&fx.path().join(".cassist"));
    let reports: Vec<_> = files.iter().filter(|(p, _)| p.ends_with("report.json")).collect();
    assert!(!reports.is_empty(), "{files:?}");
    for (path, bytes) in reports {
        let r: Value = serde_json::from_slice(bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(r["reason"], "interrupted", "{}", path.display());
    }
    for (path, _) in &files {
        let name = path.file_name().unwrap().to_string_lossy();
        assert!(!name.starts_with(".tmp"), "half-written file left: {}", path.display());
    }
}

#[test]
fn ctrl_c_stops_the_agent_and_cleans_up_the_workspace() {
    ctrl_c_stops_the_agent_and_cleans_up(&[]);
}

#[test]
fn ctrl_c_stops_the_agent_and_cleans_up_the_workspace_in_copy_mode() {
    ctrl_c_stops_the_agent_and_cleans_up(&[("CASSIST_WORKSPACE", "copy")]);
}

// ---------------------------------------------------------------------------
// 15. Failover and missing agents

/// A custom agent `name` running `program` (any path) with the prompt file.
fn command_agent(name: &str, program: &str) -> String {
    format!("agent {name:?} {{\n    command {program:?} \"{{prompt_file}}\"\n}}\n")
}

/// `try "missing-agent" "broken" "good"`: the first is not installed, the
/// second is there but cannot start (not executable); "good" does the task.
fn failover_passes_with_the_next_agent(env: &[(&str, &str)]) {
    let fx = Fx::new("", "");
    let broken = fx.out().join("not-executable");
    std::fs::write(&broken, "#!/bin/sh\nexit 0\n").unwrap();
    let agents = [
        agent("good", "good.sh", &[], &[]),
        command_agent("missing-agent", "/nonexistent/cassist-missing-agent"),
        command_agent("broken", broken.to_str().unwrap()),
        "agent \"chain\" {\n    try \"missing-agent\" \"broken\" \"good\"\n}\n".to_owned(),
    ];
    fx.file("cassist.kdl", &format!("trust \"workspace-write\"\ntest #false\n\n{}", agents.concat()))
        .file("tasks/t.kdl", &HELLO_TASK.replace("agent \"good\"", "agent \"chain\""))
        .file("src/hello.txt", "old\n");
    let done = fx.run(&[], env);
    done.exit(0);
    let t = done.task("add-hello");
    assert_eq!(t["state"], "passed");
    assert_eq!(t["agent"], "good");
    assert_eq!(t["attempts"], 1, "failed starts are not attempts");
    assert_eq!(fx.read("src/hello.txt"), "hello from add-hello\n");
}

#[test]
fn failover_chain_uses_the_next_installed_agent() {
    failover_passes_with_the_next_agent(&[]);
}

#[test]
fn failover_chain_uses_the_next_installed_agent_in_copy_mode() {
    failover_passes_with_the_next_agent(&[("CASSIST_WORKSPACE", "copy")]);
}

#[test]
fn task_whose_agent_is_not_installed_fails_naming_it() {
    let agents = command_agent("missing-agent", "cassist-no-such-program");
    let fx = Fx::new(&agents, &HELLO_TASK.replace("agent \"good\"", "agent \"missing-agent\""));
    fx.file("src/hello.txt", "old\n");
    let before = fx.tree();
    let done = fx.run(&[], &[]);
    done.exit(1);
    let t = done.task("add-hello");
    assert_eq!(t["state"], "failed");
    assert_eq!(t["attempts"], 0);
    let reason = t["reason"].as_str().unwrap();
    assert!(reason.contains("sub-agent unavailable"), "{reason}");
    assert!(reason.contains("missing-agent") && reason.contains("cassist-no-such-program"), "{reason}");
    assert!(done.stdout.contains("sub-agent unavailable"), "{}", done.stdout);
    assert_same_tree(&fx.tree(), &before, "the user's tree changed");
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
    let agents = format!(
        "{}{}",
        agent("explorer", "summarize.sh", &[], &["FAKE_SUMMARY"]),
        agent("good", "good.sh", &[], &["FAKE_LOG"])
    );
    let fx = Fx::new(&agents, tasks);
    fx.file("src/hello.txt", "old\n");
    let done = fx.run(&[], &[("FAKE_SUMMARY", summary), ("FAKE_LOG", fx.out().to_str().unwrap())]);
    done.exit(0);
    let survey = done.task("survey");
    assert_eq!(survey["state"], "passed");
    assert_eq!(survey["summary"], summary);
    assert_eq!(strings(&survey["changed_files"]), Vec::<String>::new());
    let received = fx.stdin_of("add-hello", 1);
    assert!(section(&received, "Context").contains(summary), "{received}");
    assert!(section(&fx.record("add-hello", "prompt-1.md"), "Context").contains(summary));
    assert!(!section(&fx.record("survey", "prompt-1.md"), "Context").contains(summary));
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
    let agents = agent("outside", "write-outside.sh", &[], &["FAKE_TARGET"]);
    let fx = if under_tmp { Fx::new_under_tmp(&agents, task) } else { Fx::new(&agents, task) };
    fx.file("src/a.txt", "a\n");
    let target = fx.path().join("src/escape.txt");
    let done = fx.run(&[], &[&[("FAKE_TARGET", target.to_str().unwrap())], env].concat());
    done.exit(0);
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
    absolute_path_write_goes_through_the_workspace(&[("CASSIST_WORKSPACE", "copy")], false);
    absolute_path_write_goes_through_the_workspace(&[("CASSIST_WORKSPACE", "copy")], true);
}

#[test]
fn run_adds_nothing_to_a_project_that_is_home() {
    let fx = Fx::new(
        &agent("quitter", "report-failure.sh", &[], &[]),
        "task \"t\" {\n    goal \"G.\"\n    agent \"quitter\"\n}\n",
    );
    fx.file("src/a.txt", "a\n");
    let before = fx.tree();
    // tests/common's Project::run sets HOME to the project.
    fx.run(&[], &[("HOME", fx.path().to_str().unwrap())]).exit(1);
    assert_same_tree(&fx.tree(), &before, "a blocked task changed the user's tree");
}

// ---------------------------------------------------------------------------
// Project config around a run: setup, instructions, build, --filter,
// --keep-workspace

/// A custom agent that runs `script` with `sh -c` in its workspace.
fn sh_agent(name: &str, script: &str) -> String {
    format!("agent {name:?} {{\n    command \"sh\" \"-c\" {script:?}\n}}\n")
}

#[test]
fn setup_runs_in_the_workspace_first_and_a_failing_setup_calls_no_agent() {
    let task = "task \"t\" {\n    goal \"Use the setup output.\"\n    agent \"a\"\n}\n";
    // The agent copies what setup made into src/ (the setup's own file is
    // part of the change too: it was made in the workspace).
    let agents = format!(
        "setup \"mkdir -p build && echo prepared > build/setup.txt\"\n{}",
        sh_agent("a", "mkdir -p src && cp build/setup.txt src/seen.txt")
    );
    let fx = Fx::new(&agents, task);
    fx.file("src/a.txt", "a\n");
    let done = fx.run(&[], &[]);
    done.exit(0);
    assert_eq!(fx.read("src/seen.txt"), "prepared\n");

    let agents = format!("setup \"echo setup-broke >&2; exit 3\"\n{}", sh_agent("a", "touch src/agent-ran.txt"));
    let fx = Fx::new(&agents, task);
    fx.file("src/a.txt", "a\n");
    let before = fx.tree();
    let done = fx.run(&[], &[]);
    done.exit(1);
    let t = done.task("t");
    assert_eq!(t["attempts"], 0, "no agent call after a failed setup: {t}");
    assert!(t["reason"].as_str().unwrap().contains("setup command"), "{t}");
    assert!(done.stdout.contains("setup-broke"), "the setup's output is shown: {}", done.stdout);
    assert_same_tree(&fx.tree(), &before, "a failed setup changed the tree");
}

#[test]
fn instructions_are_placed_under_the_agents_name_and_never_integrated() {
    let task = "task \"t\" {\n    goal \"Follow the instructions.\"\n    agent \"a\"\n}\n";
    // A custom agent reads AGENTS.md; it copies what it saw into src/.
    let agents = format!(
        "instructions \"docs/agent.md\"\n{}",
        sh_agent("a", "mkdir -p src && cp AGENTS.md src/seen.md && echo appended >> AGENTS.md")
    );
    let fx = Fx::new(&agents, task);
    fx.file("docs/agent.md", "Always write tests.\n").file("src/a.txt", "a\n");
    let done = fx.run(&[], &[]);
    done.exit(0);
    assert_eq!(fx.read("src/seen.md"), "Always write tests.\n");
    assert!(!fx.path().join("AGENTS.md").exists(), "the placed instructions reached the user's tree");
    assert_eq!(strings(&done.task("t")["changed_files"]), vec!["src/seen.md".to_owned()]);

    // A project that has its own AGENTS.md keeps it: nothing is placed.
    let fx = Fx::new(&agents, task);
    fx.file("docs/agent.md", "Always write tests.\n").file("AGENTS.md", "The project's own.\n");
    let done = fx.run(&[], &[]);
    // The agent appended to the project's AGENTS.md: a real change now.
    done.exit(0);
    assert_eq!(fx.read("src/seen.md"), "The project's own.\n");
    assert_eq!(fx.read("AGENTS.md"), "The project's own.\nappended\n");
}

#[test]
fn a_failing_build_takes_the_change_back_out() {
    let task = "task \"t\" {\n    goal \"Change src/a.txt.\"\n    agent \"a\"\n}\n";
    let ok = format!("build \"grep -q changed src/a.txt\"\n{}", sh_agent("a", "echo changed > src/a.txt"));
    let fx = Fx::new(&ok, task);
    fx.file("src/a.txt", "a\n");
    fx.run(&[], &[]).exit(0);
    assert_eq!(fx.read("src/a.txt"), "changed\n");

    let broken = format!(
        "build \"echo build-broke; exit 2\"\n{}",
        sh_agent("a", "echo changed > src/a.txt; echo new > src/b.txt")
    );
    let fx = Fx::new(&broken, task);
    fx.file("src/a.txt", "a\n");
    let before = fx.tree();
    let done = fx.run(&[], &[]);
    done.exit(1);
    let t = done.task("t");
    assert!(t["reason"].as_str().unwrap().contains("build command"), "{t}");
    assert_same_tree(&fx.tree(), &before, "a failed build left the change in the tree");
    assert!(!fx.path().join("src/b.txt").exists());
}

#[test]
fn filter_runs_a_task_and_what_it_depends_on_only() {
    let tasks = "task \"base\" {\n    goal \"B.\"\n    agent \"a\"\n}\n\
                 task \"top\" {\n    goal \"T.\"\n    agent \"a\"\n    depends-on \"base\"\n}\n\
                 task \"other\" {\n    goal \"O.\"\n    agent \"a\"\n}\n";
    let fx = Fx::new(&sh_agent("a", "mkdir -p src && echo x > src/$CASSIST_TASK.txt"), tasks);
    fx.file("src/a.txt", "a\n");
    let done = fx.run(&["--filter", "top"], &[]);
    done.exit(0);
    let names: Vec<String> =
        done.json()["tasks"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect();
    assert_eq!(names, ["base", "top"]);
    assert!(fx.path().join("src/base.txt").exists() && fx.path().join("src/top.txt").exists());
    assert!(!fx.path().join("src/other.txt").exists());
    // An unknown name is invalid input.
    let done = fx.run(&["--filter", "tpo"], &[]);
    done.exit(2);
    assert!(done.stderr.contains("did you mean `top`"), "{}", done.stderr);
}

#[test]
fn keep_workspace_keeps_a_failed_tasks_workspace() {
    let task = "task \"t\" {\n    goal \"G.\"\n    agent \"a\"\n    max-iterations 1\n    acceptance {\n        run \"false\"\n    }\n}\n";
    let fx = Fx::new(&sh_agent("a", "echo changed > src/a.txt"), task);
    fx.file("src/a.txt", "a\n");
    let done = fx.run(&["--keep-workspace"], &[]);
    done.exit(1);
    let line = done.stdout.lines().find(|l| l.contains("workspace kept:")).unwrap_or_else(|| panic!("{}", done.stdout));
    let kept = PathBuf::from(line.split("workspace kept:").nth(1).unwrap().trim());
    assert!(kept.is_dir(), "{}", kept.display());
    // The change is there to inspect (overlay: the upper dir; copy: the copy).
    let found = ["upper/src/a.txt", "project/src/a.txt"]
        .iter()
        .any(|rel| std::fs::read_to_string(kept.join(rel)).is_ok_and(|t| t == "changed\n"));
    assert!(found, "the kept workspace does not hold the change: {}", kept.display());
    cassist::workspace::remove_tree(&kept);
    // Without the flag nothing is kept.
    let done = fx.run(&[], &[]);
    done.exit(1);
    assert!(!done.stdout.contains("workspace kept:"), "{}", done.stdout);
}
