//! What the review rejects as security issues (SPEC 3.5), proven by
//! `cassist run` with small hostile agents, in both workspace modes:
//! cassist's own files, special files and mode bits, symlinks leaving the
//! project, names that are not UTF-8, files and changes over `limits`;
//! and what is recorded of a run: transcripts capped, the result file
//! redacted before it is stored. Each attack must fail with a clear
//! reason and leave the user's tree (and the store) as it was.

use serde_json::Value;

use crate::support::{Project, Test, assert_same_tree, contains_bytes, files_under, in_both_modes};

/// A project whose task `t` is done by the agent `hostile`, running
/// `script` with `sh -c` in its workspace; `config` is added to
/// `cassist.kdl`, `scope` is the task's (none: the whole project).
fn project(script: &str, config: &str, scope: &[&str]) -> Project {
    let scope = if scope.is_empty() {
        String::new()
    } else {
        let paths: String = scope.iter().map(|p| format!("        path {p:?}\n")).collect();
        format!("    scope {{\n{paths}    }}\n")
    };
    let task =
        format!("task \"t\" {{\n    goal \"Do the task.\"\n    agent \"hostile\"\n    max-iterations 1\n{scope}}}\n");
    Test::trusted()
        .kdl(config)
        .sh_agent("hostile", &format!("cat > /dev/null\n{script}"))
        .tasks(&task)
        .file("src/app.py", "print('hi')\n")
        .git()
        .build()
}

/// The findings of the task's review of attempt 1, as (rule, message).
fn findings(p: &Project) -> Vec<(String, String)> {
    let review: Value = serde_json::from_str(&p.record("t", "review-1.json")).unwrap();
    review["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["rule"].as_str().unwrap().to_owned(), f["message"].as_str().unwrap().to_owned()))
        .collect()
}

/// Runs the project's task, which must fail rejected as a security issue
/// whose reason holds `reason`, leaving the tree as it was; its findings.
#[track_caller]
fn rejected(p: &Project, mode: &[(&str, &str)], reason: &str) -> Vec<(String, String)> {
    let before = p.tree();
    let done = p.run(&[]).envs(mode).status(1).exec();
    let t = done.task("t");
    assert_eq!(t["state"], "failed", "{t}");
    let why = t["reason"].as_str().unwrap();
    assert!(why.starts_with("rejected as a security issue: "), "{why}");
    assert!(why.contains(reason), "{why}");
    assert_same_tree(&p.tree(), &before, "a rejected change reached the tree");
    assert_eq!(p.status(), "", "git sees a change");
    // Nothing was recorded as done: no lock entry, no store entry.
    assert!(!p.exists("cassist.lock") || !p.read("cassist.lock").contains("\"t\""));
    assert!(
        !p.exists(".cassist/store/entries")
            || std::fs::read_dir(p.path().join(".cassist/store/entries")).unwrap().next().is_none()
    );
    findings(p)
}

fn rules(findings: &[(String, String)]) -> Vec<&str> {
    findings.iter().map(|(r, _)| r.as_str()).collect()
}

// ---------------------------------------------------------------------------
// cassist's own files

/// An agent raises the project's trust and plants a task file asking for
/// `full`, so that the next run would obey them.
fn trust_escalation_is_rejected(mode: &[(&str, &str)]) {
    let p = project(
        r#"printf '\ntrust "full"\n' >> cassist.kdl
printf 'task "evil" {\n    goal "x"\n    sandbox "full"\n}\n' > tasks/evil.kdl
echo fine > src/ok.txt
"#,
        "",
        &[],
    );
    let found = rejected(&p, mode, "changed cassist.kdl, the project config");
    assert_eq!(rules(&found), ["own-files", "own-files"], "{found:#?}");
    assert!(found[1].1.contains("created tasks/evil.kdl, a KDL file"), "{found:#?}");
}

in_both_modes!(trust_escalation_is_rejected: trust_escalation_is_rejected_overlay, trust_escalation_is_rejected_copy);

/// A task whose scope names `cassist.kdl` literally may change it.
fn own_file_named_in_the_scope_is_the_tasks(mode: &[(&str, &str)]) {
    let p = project("printf '\\nbuild \"true\"\\n' >> cassist.kdl\n", "", &["cassist.kdl"]);
    let done = p.run(&[]).envs(mode).exec();
    assert_eq!(done.task("t")["state"], "passed");
    assert!(p.read("cassist.kdl").ends_with("\nbuild \"true\"\n"));
}

in_both_modes!(own_file_named_in_the_scope_is_the_tasks: own_file_named_in_the_scope_overlay, own_file_named_in_the_scope_copy);

// ---------------------------------------------------------------------------
// Entries that never land

/// Special files and bits, symlinks leaving the project, a name that is
/// not UTF-8: each rejected, none opened (the fifo would block cassist),
/// none written.
fn special_entries_are_rejected(mode: &[(&str, &str)]) {
    let p = project(
        r#"set -e
mkfifo src/ctl.fifo
python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind("src/run.sock")'
cp /bin/sh src/sh && chmod 4755 src/sh
ln -s /etc/passwd src/passwd
ln -s ../../outside src/up
printf 'x\n' > "src/$(printf 'bad\377name').py"
"#,
        "",
        &[],
    );
    let found = rejected(&p, mode, "");
    let mut got: Vec<(&str, &str)> = found.iter().map(|(r, m)| (r.as_str(), m.split(' ').next().unwrap())).collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("path-name", "the"),
            ("special-bits", "src/sh"),
            ("special-file", "src/ctl.fifo"),
            ("special-file", "src/run.sock"),
            ("symlink", "src/passwd"),
            ("symlink", "src/up"),
        ],
        "{found:#?}"
    );
    let message = |rule: &str| &found.iter().find(|(r, _)| r == rule).unwrap().1;
    assert!(message("path-name").contains("src/bad\\xffname.py is not valid UTF-8"), "{found:#?}");
    assert!(message("special-bits").contains("has the setuid bit (mode 4755)"), "{found:#?}");
    assert!(!p.exists("src/sh") && !p.exists("src/passwd"));
}

in_both_modes!(special_entries_are_rejected: special_entries_are_rejected_overlay, special_entries_are_rejected_copy);

/// A 2 GiB sparse file is rejected from its size alone: never read, never
/// copied into memory, the store or the tree.
fn sparse_file_over_the_limit_is_rejected_unread(mode: &[(&str, &str)]) {
    let p = project("truncate -s 2G src/big.bin\n", "", &["src/**"]);
    let started = std::time::Instant::now();
    let found = rejected(&p, mode, "src/big.bin is 2 GiB, over the file-size limit of 16 MiB");
    eprintln!("a 2 GiB sparse file rejected in {:?}", started.elapsed());
    assert_eq!(rules(&found), ["limits"]);
    assert!(!p.exists("src/big.bin"));
    let stored: u64 = files_under(&p.path().join(".cassist")).iter().map(|(_, b)| b.len() as u64).sum();
    assert!(stored < 1 << 20, "{stored} bytes under .cassist/");
}

in_both_modes!(sparse_file_over_the_limit_is_rejected_unread: sparse_file_rejected_overlay, sparse_file_rejected_copy);

/// The limits of `cassist.kdl`: a file over `file-size` and a change over
/// `change-size`, each rejected with the sizes.
fn limits_of_the_config_are_applied(mode: &[(&str, &str)]) {
    let p = project(
        "head -c 2000 /dev/zero > src/big.bin\nfor i in 1 2 3 4 5; do head -c 1000 /dev/zero > src/f$i.bin; done\n",
        "limits {\n    file-size \"1KiB\"\n    change-size \"4KiB\"\n}\n",
        &[],
    );
    let found = rejected(&p, mode, "src/big.bin is 1.9 KiB, over the file-size limit of 1 KiB");
    assert_eq!(rules(&found), ["limits", "limits"], "{found:#?}");
    assert_eq!(found[1].1, "the change is 4.8 KiB, over the change-size limit of 4 KiB; make a smaller change");
}

in_both_modes!(limits_of_the_config_are_applied: limits_of_the_config_overlay, limits_of_the_config_copy);

// ---------------------------------------------------------------------------
// What is recorded

/// A transcript keeps the first and the last half of its limit, with a
/// marker saying how much was cut.
#[test]
fn transcripts_are_capped_head_and_tail() {
    let p = project(
        "head -c 3000000 /dev/zero | tr '\\0' x; echo; echo the-end; echo ok > src/ok.txt\n",
        "limits {\n    transcript \"1MiB\"\n}\n",
        &[],
    );
    let done = p.run(&[]).exec();
    assert_eq!(done.task("t")["state"], "passed");
    let transcript = std::fs::read(p.records("t").join("transcript-1.log")).unwrap();
    let total = 3_000_000 + "\nthe-end\n".len();
    let marker = format!("\n[cassist: {} bytes cut]\n", total - (1 << 20));
    assert_eq!(transcript.len(), (1 << 20) + marker.len());
    assert!(transcript.starts_with(&[b'x'; 1000]));
    assert!(contains_bytes(&transcript, marker.as_bytes()));
    assert!(transcript.ends_with(b"x\nthe-end\n"));
}

/// The agent writes a secret of the environment into its result file,
/// as it is and with JSON escapes: neither reaches `.cassist/runs` or the
/// store.
fn result_file_is_redacted_before_it_is_stored(mode: &[(&str, &str)]) {
    let secret = "tok-0123456789abcdef";
    let script = r#"cat > /dev/null
escaped="\\u0074ok-0123456789abcdef"
printf '{"success": true, "summary": "done", "token": "%s", "escaped": "%s"}' "$MY_SERVICE_TOKEN" "$escaped" > "$CASSIST_RESULT_FILE"
echo ok > src/ok.txt
"#;
    let p = Test::trusted()
        .kdl(&format!(
            "agent \"hostile\" {{\n    command \"sh\" \"-c\" {script:?}\n    pass-env \"MY_SERVICE_TOKEN\"\n}}\n"
        ))
        .tasks("task \"t\" {\n    goal \"Do the task.\"\n    agent \"hostile\"\n}\n")
        .file("src/app.py", "print('hi')\n")
        .git()
        .build();
    let done = p.run(&[]).envs(mode).env("MY_SERVICE_TOKEN", secret).exec();
    assert_eq!(done.task("t")["state"], "passed");
    let recorded: Value = serde_json::from_str(&p.record("t", "result-1.json")).unwrap();
    assert_eq!((recorded["token"].as_str(), recorded["escaped"].as_str()), (Some("[REDACTED]"), Some("[REDACTED]")));
    assert_eq!(recorded["summary"], "done");
    let files = files_under(&p.path().join(".cassist"));
    assert!(files.iter().any(|(f, _)| f.to_string_lossy().contains("/store/objects/")), "{files:?}");
    for (path, bytes) in &files {
        assert!(!contains_bytes(bytes, secret.as_bytes()), "the secret is in {}", path.display());
        assert!(!contains_bytes(bytes, b"\\u0074ok-0123456789abcdef"), "the escaped secret is in {}", path.display());
    }
}

in_both_modes!(result_file_is_redacted_before_it_is_stored: result_file_redacted_overlay, result_file_redacted_copy);

/// A symlink whose target is a secret of the environment, and a file
/// named after it: rejected, and neither the findings nor the report that
/// name them record the secret.
#[test]
fn a_secret_named_by_a_finding_is_never_recorded() {
    let secret = "tok-0123456789abcdef";
    let script = "cat > /dev/null\nln -s \"/$MY_SERVICE_TOKEN\" src/leak\necho x > \"src/$MY_SERVICE_TOKEN.txt\"\n";
    let p = Test::trusted()
        .kdl(&format!(
            "agent \"hostile\" {{\n    command \"sh\" \"-c\" {script:?}\n    pass-env \"MY_SERVICE_TOKEN\"\n}}\n"
        ))
        .tasks("task \"t\" {\n    goal \"Do the task.\"\n    agent \"hostile\"\n    max-iterations 1\n}\n")
        .file("src/app.py", "print('hi')\n")
        .git()
        .build();
    let done = p.run(&[]).env("MY_SERVICE_TOKEN", secret).status(1).exec();
    let t = done.task("t");
    let reason = t["reason"].as_str().unwrap().to_owned();
    assert!(reason.contains("src/leak is a symlink to /[REDACTED]"), "{reason}");
    let mut changed = crate::support::strings(&t["changed_files"]);
    changed.sort();
    assert_eq!(changed, ["src/[REDACTED].txt", "src/leak"]);
    let review = p.record("t", "review-1.json");
    assert!(review.contains("the name of src/[REDACTED].txt holds the value of a secret"), "{review}");
    for (path, bytes) in files_under(&p.path().join(".cassist")) {
        assert!(!contains_bytes(&bytes, secret.as_bytes()), "the secret is in {}", path.display());
    }
    for text in [&done.stdout, &done.stderr, &done.report] {
        assert!(!text.contains(secret), "{text}");
    }
}
