//! The team cache (issue 15, SPEC 4 "Remote cache") against real servers
//! started by the suite: SeaweedFS serving S3 and `turborepo-remote-cache`
//! (tests/it/support/servers.rs), a listener that never answers for a
//! hanging remote. No mocks.
//!
//! Two machines are two projects with the same files at the same commit,
//! each with its own store: machine A runs the tasks (its agent counts its
//! calls) and pushes; machine B, a fresh clone without A's changes,
//! replays them from the remote with no agent call.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::support::{FloodServer, Output, Project, S3Server, SilentServer, Test, TurboServer, write};

// ---------------------------------------------------------------------------
// Support

/// The counting agent: appends the task's name to `$COUNT_DIR/calls`, then
/// writes `out/<task>.txt`. With `SLEEP_TASK` naming the task, it touches
/// `$COUNT_DIR/<task>.started` and waits (at most 60 s) for `$COUNT_DIR/go`.
const AGENT: &str = r#"#!/bin/sh
set -eu
cat > /dev/null
echo "$CASSIST_TASK" >> "$COUNT_DIR/calls"
if [ "${SLEEP_TASK:-}" = "$CASSIST_TASK" ]; then
    touch "$COUNT_DIR/$CASSIST_TASK.started"
    n=0
    while [ ! -e "$COUNT_DIR/go" ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n + 1)); done
fi
mkdir -p out
echo "made by the agent for $CASSIST_TASK" > "out/$CASSIST_TASK.txt"
"#;

/// `one`, `two` (depends on `one`: its hash is known only once `one`'s
/// output is) and `three`.
const TASKS: &str = r#"
task "one" {
    goal "write out/one.txt"
    context { file "src/seed.txt"; }
}
task "two" {
    goal "write out/two.txt"
    depends-on "one"
    context { file "src/seed.txt"; }
}
task "three" {
    goal "write out/three.txt"
    context { file "src/seed.txt"; }
}
"#;

/// What the machines of one team share: the agent script (its path is in
/// `cassist.kdl`, the same on every machine) and a key pair.
struct Team {
    _dir: tempfile::TempDir,
    script: PathBuf,
    public: String,
    secret: String,
}

impl Team {
    fn new() -> Team {
        let dir = tempfile::tempdir_in(crate::support::outside_temp_dir()).unwrap();
        let script = dir.path().join("count.sh");
        write(&script, AGENT);
        let (public, secret) = keygen();
        Team { _dir: dir, script, public, secret }
    }

    /// A machine: the project with `tasks`, a `cache { … }` block holding
    /// `cache`, committed to git.
    fn machine(&self, cache: &str, tasks: &str) -> Project {
        let p = Test::new().outside_tmp().file("src/seed.txt", "seed\n").file("tasks/t.kdl", tasks).build();
        let count = p.out().join("count");
        std::fs::create_dir_all(&count).unwrap();
        let p = p.with_env("COUNT_DIR", &count.display().to_string());
        p.file(
            "cassist.kdl",
            format!(
                "trust \"workspace-write\"\ntest #false\ndefaults {{\n    agent \"count\"\n}}\ncache {{\n{cache}\n}}\nagent \"count\" {{\n    command \"sh\" {:?}\n    pass-env \"COUNT_DIR\" \"SLEEP_TASK\"\n}}\n",
                self.script.display().to_string()
            ),
        );
        p.commit_all();
        p
    }

    /// The cache block trusting this team's key.
    fn trusting(&self, remote: &str) -> String {
        format!("    {remote}\n    trusted-key \"{}\"", self.public)
    }

    fn signing(&self) -> (&'static str, String) {
        ("CASSIST_CACHE_SIGNING_KEY", self.secret.clone())
    }
}

/// `cassist cache keygen`: (public, secret).
fn keygen() -> (String, String) {
    let p = Test::new().build();
    let out = p.cassist(&["cache", "keygen"]).exec();
    assert_eq!(out.code(), 0, "{}", out.transcript());
    let line = |k: &str| {
        out.stdout.lines().find_map(|l| l.strip_prefix(k)).unwrap_or_else(|| panic!("{}", out.transcript())).to_owned()
    };
    (line("public "), line("secret "))
}

/// The tasks an agent ran for on machine `p`, sorted.
fn calls(p: &Project) -> Vec<String> {
    let mut c: Vec<String> = std::fs::read_to_string(p.out().join("count/calls"))
        .map(|t| t.lines().map(str::to_owned).collect())
        .unwrap_or_default();
    c.sort();
    c
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

/// The states `plan` shows, by task (its text table).
fn plan_states(out: &Output) -> BTreeMap<String, String> {
    out.stdout
        .lines()
        .skip(1)
        .filter_map(|l| {
            let cols: Vec<&str> = l.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
            (cols.len() > 3).then(|| (cols[1].to_owned(), cols[2].to_owned()))
        })
        .collect()
}

/// Stderr with the warnings' wrapped lines joined again.
fn unwrapped(stderr: &str) -> String {
    stderr.replace("\n  │ ", " ")
}

/// `state` for each of `tasks`.
fn all(tasks: &[&str], state: &str) -> BTreeMap<String, String> {
    tasks.iter().map(|t| ((*t).to_owned(), state.to_owned())).collect()
}

/// The outputs of the tasks on machine `p`.
fn outputs(p: &Project) -> Vec<(String, String)> {
    ["one", "two", "three"]
        .iter()
        .filter(|t| p.exists(&format!("out/{t}.txt")))
        .map(|t| ((*t).to_owned(), p.read(&format!("out/{t}.txt"))))
        .collect()
}

/// A team whose machine A ran every task and pushed.
struct Pushed {
    team: Team,
    /// The `cache` block of the team's machines.
    cache: String,
    a: Project,
}

/// Machine A of a new team (`remote`: the `remote` line; `server_env`:
/// the server's credentials) runs every task with the signing key: three
/// agent calls, uploaded.
fn machine_a_runs_and_pushes(remote: &str, server_env: &[(&'static str, String)]) -> Pushed {
    let team = Team::new();
    let cache = team.trusting(remote);
    let a = team.machine(&cache, TASKS);
    let mut env = server_env.to_vec();
    env.push(team.signing());
    let out = a.run(&[]).envs(&env).exec();
    assert_eq!(out.code(), 0, "{}", out.transcript());
    assert_eq!(calls(&a), strings(&["one", "three", "two"]));
    assert!(!out.stderr.contains("not uploaded"), "{}", out.transcript());
    Pushed { team, cache, a }
}

/// Machine B (a fresh clone, empty store) replays every task from the
/// remote with no agent call: in `plan` (`replay (remote)`), `run
/// --locked` and `run`; it ends with A's outputs.
fn machine_b_replays_everything(team: &Team, a: &Project, cache: &str, env: &[(&str, String)]) {
    let b = team.machine(cache, TASKS);
    let plan = b.cassist(&["plan"]).envs(env).exec();
    assert_eq!(plan.code(), 0, "{}", plan.transcript());
    assert_eq!(plan_states(&plan), all(&["one", "two", "three"], "replay (remote)"), "{}", plan.transcript());
    let json = b.cassist(&["plan", "--json"]).envs(env).exec();
    assert!(json.json()["tasks"].as_array().unwrap().iter().all(|t| t["state"] == "replay"), "{}", json.stdout);
    assert_eq!(calls(&b), Vec::<String>::new());
    let why = b.cassist(&["explain", "two"]).envs(env).exec();
    assert!(why.stdout.contains("state replay (remote)"), "{}", why.transcript());
    assert!(why.stdout.contains("signed by a trusted key"), "{}", why.transcript());

    // `run --locked` on another fresh clone: everything from the remote.
    let c = team.machine(cache, TASKS);
    let out = c.run(&["--locked"]).envs(env).exec();
    assert_eq!(out.code(), 0, "{}", out.transcript());
    assert!(out.states().values().all(|s| s == "replayed"), "{}", out.transcript());
    assert!(out.stdout.contains("replayed (remote)"), "{}", out.transcript());
    assert_eq!(calls(&c), Vec::<String>::new(), "no agent on a clone that the remote serves");
    assert_eq!(outputs(&c), outputs(a));

    // `run` on B (filled by its plan).
    let out = b.run(&[]).envs(env).exec();
    assert_eq!(out.code(), 0, "{}", out.transcript());
    assert!(out.states().values().all(|s| s == "replayed"), "{}", out.transcript());
    assert_eq!(calls(&b), Vec::<String>::new());
    assert_eq!(outputs(&b), outputs(a));
    // And then up to date, with no remote at all.
    let out = b.run(&[]).env("CASSIST_REMOTE", "off").exec();
    assert!(out.states().values().all(|s| s == "up-to-date"), "{}", out.transcript());
}

// ---------------------------------------------------------------------------
// Both backends: A pushes, B replays with zero agent calls

#[test]
fn s3_machine_b_replays_what_machine_a_pushed_with_no_agent_call() {
    let Some(s3) = S3Server::start() else { return };
    let Pushed { team, cache, a } = machine_a_runs_and_pushes(&s3.remote_kdl("team"), &s3.env());
    let entries = s3.keys("team/entries/");
    assert_eq!(entries.len(), 3, "{entries:?}");
    assert!(!s3.keys("team/objects/").is_empty());
    machine_b_replays_everything(&team, &a, &cache, &s3.reader_env());
}

#[test]
fn turbo_machine_b_replays_what_machine_a_pushed_with_no_agent_call() {
    let Some(turbo) = TurboServer::start() else { return };
    let Pushed { team, cache, a } = machine_a_runs_and_pushes(&turbo.remote_kdl(), &turbo.env());
    let ids = turbo.ids();
    assert_eq!(ids.iter().filter(|i| i.starts_with("cassist-entries-")).count(), 3, "{ids:?}");
    machine_b_replays_everything(&team, &a, &cache, &turbo.env());
}

// ---------------------------------------------------------------------------
// Entries that are never used

/// The envelope of the entry of `task` on the Turbo server, as JSON, and its
/// artifact id.
fn envelope_of(turbo: &TurboServer, p: &Project, task: &str) -> (String, serde_json::Value) {
    let plan = p.cassist(&["plan", "--json"]).env("CASSIST_REMOTE", "off").exec();
    let hash = plan.json()["tasks"].as_array().unwrap().iter().find(|t| t["name"] == task).unwrap()["hash"]
        .as_str()
        .unwrap()
        .to_owned();
    let id = format!("cassist-entries-{hash}");
    let bytes = turbo.get(&id).unwrap_or_else(|| panic!("no entry {id}: {:?}", turbo.ids()));
    (id, serde_json::from_slice(&bytes).unwrap())
}

/// The entry inside an envelope.
fn entry_in(envelope: &serde_json::Value) -> serde_json::Value {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD.decode(envelope["entry"].as_str().unwrap()).unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[test]
fn tampered_resigned_truncated_and_unknown_key_entries_are_never_used() {
    let Some(turbo) = TurboServer::start() else { return };
    let Pushed { team, cache, a } = machine_a_runs_and_pushes(&turbo.remote_kdl(), &turbo.env());

    // `one`: an object replaced by other bytes (its name stays).
    let (_, one) = envelope_of(&turbo, &a, "one");
    let change = entry_in(&one)["changes"][0].clone();
    let object = change["new"].as_str().unwrap().to_owned();
    turbo.put(&format!("cassist-objects-{object}"), b"planted by an attacker\n");
    // `three`: its entry changed after signing (the signature no longer
    // covers it), then the same entry signed by a key nobody trusts.
    let (three_id, three) = envelope_of(&turbo, &a, "three");
    let mut forged = three.clone();
    let mut entry = entry_in(&three);
    entry["summary"] = "changed after signing".into();
    use base64::Engine as _;
    forged["entry"] = base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(&entry).unwrap()).into();
    turbo.put(&three_id, &serde_json::to_vec(&forged).unwrap());

    let b = team.machine(&cache, TASKS);
    let out = b.cassist(&["plan"]).envs(&turbo.env()).exec();
    assert_eq!(out.code(), 0, "{}", out.transcript());
    let err = unwrapped(&out.stderr);
    assert!(err.contains(&format!("task `one` is not used: object {object} hashes to")), "{}", out.transcript());
    assert!(err.contains("task `three` is not used: bad signature"), "{}", out.transcript());
    assert_eq!(plan_states(&out), all(&["one", "two", "three"], "run"), "{}", out.transcript());
    // Nothing of a refused entry reached the store.
    assert!(!b.path().join(".cassist/store/entries").join(format!("{}.json", &three_id[16..])).exists());
    let planted = blake3::hash(b"planted by an attacker\n").to_hex().to_string();
    assert!(!b.path().join(".cassist/store/objects").join(&planted[..2]).join(&planted[2..]).exists());

    // An unknown signer: the same project trusting another key only.
    let other = Team::new();
    let c = team.machine(&other.trusting(&turbo.remote_kdl()), TASKS);
    let out = c.cassist(&["plan"]).envs(&turbo.env()).exec();
    let err = unwrapped(&out.stderr);
    assert!(err.contains("is not used: untrusted key cassist-"), "{}", out.transcript());
    assert!(plan_states(&out).iter().all(|(_, s)| s == "run"), "{}", out.transcript());

    // Truncated: half an envelope.
    let bytes = serde_json::to_vec(&three).unwrap();
    turbo.put(&three_id, &bytes[..bytes.len() / 2]);
    let d = team.machine(&cache, TASKS);
    let out = d.run(&[]).envs(&turbo.env()).exec();
    assert_eq!(out.code(), 0, "{}", out.transcript());
    let err = unwrapped(&out.stderr);
    assert!(err.contains("task `three` is not used: truncated"), "{}", out.transcript());
    // The refused tasks ran their agent; `two` (after `one`) too, as its
    // input is `one`'s new output. Nothing was lost: every output is A's.
    assert_eq!(calls(&d), strings(&["one", "three", "two"]));
    assert_eq!(outputs(&d), outputs(&a));
}

// ---------------------------------------------------------------------------
// A read-only client

#[test]
fn a_client_without_a_signing_key_reads_but_never_writes() {
    let Some(turbo) = TurboServer::start() else { return };
    let team = Team::new();
    let cache = team.trusting(&turbo.remote_kdl());
    // A token that may write, but no key: nothing goes up.
    let a = team.machine(&cache, TASKS);
    let out = a.run(&[]).envs(&turbo.env()).exec();
    assert_eq!(out.code(), 0, "{}", out.transcript());
    assert_eq!(turbo.ids(), Vec::<String>::new());
    // `cache push` says why it cannot.
    let out = a.cassist(&["cache", "push"]).envs(&turbo.env()).status(2).exec();
    assert!(out.stderr.contains("CASSIST_CACHE_SIGNING_KEY"), "{}", out.transcript());
    // With the key, `cache push` sends A's entries (then nothing more);
    // a reader (no key) replays them and writes nothing.
    let mut env = turbo.env();
    env.push(team.signing());
    let out = a.cassist(&["cache", "push"]).envs(&env).exec();
    assert!(out.stdout.contains("pushed 3 entries"), "{}", out.transcript());
    let out = a.cassist(&["cache", "push"]).envs(&env).exec();
    assert!(out.stdout.contains("pushed 0 entries") && out.stdout.contains("3 already there"), "{}", out.stdout);
    let before = turbo.ids();
    let c = team.machine(&cache, TASKS);
    let out = c.cassist(&["cache", "pull"]).envs(&turbo.env()).exec();
    assert!(out.stdout.contains("pulled 3 entries"), "{}", out.transcript());
    // Pulled (verified then) into the store: `run --locked` replays them
    // with the remote off, as `replay (remote)`.
    let out = c.cassist(&["plan"]).env("CASSIST_REMOTE", "off").exec();
    assert_eq!(plan_states(&out), all(&["one", "two", "three"], "replay (remote)"), "{}", out.transcript());
    let out = c.run(&["--locked"]).env("CASSIST_REMOTE", "off").exec();
    assert!(out.states().values().all(|s| s == "replayed"), "{}", out.transcript());
    assert_eq!(calls(&c), Vec::<String>::new());
    let b = team.machine(&cache, TASKS);
    b.file("src/seed.txt", "another seed\n");
    b.commit_all();
    let out = b.run(&[]).envs(&turbo.env()).exec();
    assert_eq!(out.code(), 0, "{}", out.transcript());
    assert_eq!(calls(&b), strings(&["one", "three", "two"]), "other inputs: the agent runs");
    assert_eq!(turbo.ids(), before, "a reader never writes");
    // `cache ls` marks what the remote has.
    let out = a.cassist(&["cache", "ls"]).envs(&turbo.env()).exec();
    assert!(out.stdout.contains("REMOTE"), "{}", out.transcript());
    assert_eq!(out.stdout.lines().skip(1).take(3).filter(|l| l.contains(" yes ")).count(), 3, "{}", out.stdout);
    let out = b.cassist(&["cache", "ls"]).envs(&turbo.env()).exec();
    let rows: Vec<&str> = out.stdout.lines().skip(1).take(3).collect();
    assert!(rows.iter().all(|l| l.split_whitespace().nth(6) == Some("no")), "{}", out.stdout);
    // `cache gc` and `cache clean` never touch the remote.
    a.cassist(&["cache", "gc", "--keep", "0"]).envs(&env).exec();
    a.cassist(&["cache", "clean"]).envs(&env).exec();
    assert_eq!(turbo.ids(), before);
}

// ---------------------------------------------------------------------------
// Failure is never fatal, never slow

#[test]
fn a_server_killed_mid_run_costs_one_warning_and_the_run_goes_on() {
    let Some(mut turbo) = TurboServer::start() else { return };
    let team = Team::new();
    let cache = team.trusting(&turbo.remote_kdl());
    let a = team.machine(&cache, TASKS);
    let mut env = turbo.env();
    env.push(team.signing());
    let mut run = a.run(&["-j", "1"]).envs(&env).env("SLEEP_TASK", "one").spawn();
    let count = a.out().join("count");
    run.wait_for_file(&count.join("one.started"));
    turbo.kill();
    write(&count.join("go"), "");
    let out = run.finish_within(Duration::from_secs(60));
    assert_eq!(out.code(), 0, "{}", out.transcript());
    assert!(out.states().values().all(|s| s == "passed"), "{}", out.transcript());
    assert_eq!(out.stderr.matches("unavailable").count(), 1, "{}", out.transcript());
    assert!(out.stderr.contains("going on locally"), "{}", out.transcript());
    assert!(out.elapsed < Duration::from_secs(30), "{:?}", out.elapsed);
    // Then a fresh clone's plan against the dead server: one warning,
    // fast, and every task to run.
    let b = team.machine(&cache, TASKS);
    let out = b.cassist(&["plan"]).envs(&env).exec();
    assert_eq!(plan_states(&out), all(&["one", "two", "three"], "run"), "{}", out.transcript());
    assert!(out.stderr.contains("unavailable (cannot connect)"), "{}", out.transcript());
    assert!(out.elapsed < Duration::from_secs(5), "{:?}", out.elapsed);
}

#[test]
fn an_s3_remote_nobody_listens_on_is_one_short_warning() {
    // A port nothing listens on (bound, then closed).
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let team = Team::new();
    let cache =
        team.trusting(&format!("remote \"s3://cassist/p\" endpoint=\"http://127.0.0.1:{port}\" region=\"us-east-1\""));
    let a = team.machine(&cache, TASKS);
    let out = a.cassist(&["plan"]).exec();
    assert_eq!(out.code(), 0, "{}", out.transcript());
    assert_eq!(out.stderr.matches("unavailable").count(), 1, "{}", out.transcript());
    // What the user reads is why, not the request OpenDAL sent.
    assert!(out.stderr.contains("unavailable (cannot connect: Connection refused"), "{}", out.transcript());
    assert!(!out.stderr.contains("entries/"), "{}", out.transcript());
}

#[test]
fn a_hanging_server_costs_a_few_seconds_at_most() {
    let silent = SilentServer::start();
    let team = Team::new();
    let many: String = (0..40)
        .map(|i| {
            format!("task \"t{i}\" {{\n    goal \"write out/t{i}.txt\"\n    context {{ file \"src/seed.txt\"; }}\n}}\n")
        })
        .collect();
    let cache = team.trusting(&format!("remote \"turbo+{}\" team=\"x\"", silent.http()));
    let a = team.machine(&cache, &many);
    let out = a.cassist(&["plan"]).exec();
    assert_eq!(out.code(), 0, "{}", out.transcript());
    assert!(out.stderr.contains("unavailable"), "{}", out.transcript());
    assert!(out.elapsed < Duration::from_secs(8), "plan took {:?}", out.elapsed);
    assert!(silent.connections() > 0);
    // A run that uploads to it: bounded too.
    let out = a.run(&["--filter", "t0"]).env(team.signing().0, team.signing().1).exec();
    assert_eq!(out.code(), 0, "{}", out.transcript());
    assert!(out.elapsed < Duration::from_secs(20), "run took {:?}", out.elapsed);
}

// ---------------------------------------------------------------------------
// Credentials stay with cassist

#[test]
fn agents_and_task_commands_never_see_the_remote_credentials() {
    let team = Team::new();
    let p = Test::new()
        .outside_tmp()
        .config(
            "trust \"workspace-write\"\ntest #false\ncache {\n    remote \"turbo+http://127.0.0.1:9\" team=\"x\"\n}\nagent \"dump\" {\n    command \"sh\" \"-c\" \"env > $COUNT_DIR/env.txt; mkdir -p out; echo x > out/x.txt\"\n    pass-env \"COUNT_DIR\" \"TURBO_TOKEN\" \"AWS_SECRET_ACCESS_KEY\" \"AWS_ACCESS_KEY_ID\" \"AWS_SESSION_TOKEN\" \"CASSIST_CACHE_SIGNING_KEY\"\n}\n"
        )
        .file(
            "tasks/t.kdl",
            "task \"leak\" {\n    agent \"dump\"\n    goal \"x\"\n    acceptance {\n        run \"! env | grep -q -e TURBO_TOKEN -e AWS_SECRET -e AWS_ACCESS_KEY -e AWS_SESSION -e CASSIST_CACHE_SIGNING\"\n    }\n}\n",
        )
        .build();
    let count = p.out().join("count");
    std::fs::create_dir_all(&count).unwrap();
    let out = p
        .run(&[])
        .env("COUNT_DIR", &count)
        .env("TURBO_TOKEN", "turbo-secret-value")
        .env("AWS_SECRET_ACCESS_KEY", "aws-secret-value")
        .env("AWS_ACCESS_KEY_ID", "aws-key-id-value")
        .env("AWS_SESSION_TOKEN", "aws-session-value")
        .env(team.signing().0, &team.secret)
        .exec();
    assert_eq!(out.code(), 0, "{}", out.transcript());
    let seen = std::fs::read_to_string(count.join("env.txt")).unwrap();
    for secret in ["turbo-secret-value", "aws-secret-value", "aws-key-id-value", "aws-session-value", &team.secret] {
        assert!(!seen.contains(secret), "the agent saw {secret}:\n{seen}");
    }
    assert!(seen.contains("COUNT_DIR="), "the dump is real:\n{seen}");
}

// ---------------------------------------------------------------------------
// Configuration

#[test]
fn bad_keys_and_urls_are_diagnostics() {
    let p = Test::new()
        .config("cache {\n    remote \"s3://b/p\"\n    trusted-key \"cassist-ed25519:AAAA\"\n}\n")
        .file("tasks/t.kdl", "task \"a\" {\n    goal \"x\"\n}\n")
        .build();
    let out = p.cassist(&["plan"]).status(2).exec();
    assert!(out.stderr.contains("this trusted key does not read: it holds 3 bytes, not 32"), "{}", out.transcript());
    assert!(out.stderr.contains("cassist.kdl:3"), "points at the key: {}", out.transcript());
    p.file("cassist.kdl", "cache {\n    remote \"ftp://b\"\n}\n");
    let out = p.cassist(&["check"]).status(2).exec();
    assert!(out.stderr.contains("is not a remote cache URL"), "{}", out.transcript());
    p.file("cassist.kdl", "cache {\n    remote \"s3://b/p\" endpoint=8333\n}\n");
    let out = p.cassist(&["check"]).status(2).exec();
    assert!(out.stderr.contains("`endpoint` expects a string, found an integer"), "{}", out.transcript());
    assert!(out.stderr.contains("cassist.kdl:2"), "points at the property: {}", out.transcript());
    p.file("cassist.kdl", "cache {\n    remote \"s3://b/p\"\n}\n");
    let out = p.cassist(&["plan"]).env("CASSIST_CACHE_SIGNING_KEY", "cassist-ed25519-secret:nope").status(2).exec();
    assert!(out.stderr.contains("CASSIST_CACHE_SIGNING_KEY does not read"), "{}", out.transcript());
    let out = p.cassist(&["plan"]).env("CASSIST_REMOTE", "gs://x").status(2).exec();
    assert!(out.stderr.contains("CASSIST_REMOTE: `gs://x` is not a remote cache URL"), "{}", out.transcript());
    // `off` turns the remote off: no lookup, no warning.
    let out = p.cassist(&["plan"]).env("CASSIST_REMOTE", "off").exec();
    assert!(!out.stderr.contains("remote"), "{}", out.transcript());
    // Listing the store never depends on the remote's settings.
    let before = "ab".repeat(32);
    p.file(
        &format!(".cassist/store/entries/{before}.json"),
        format!(
            r#"{{"format":1,"task":"a","before":"{before}","after":"","patch":"p","changes":[],"key":{{}},"agent":"x","agent_version":null,"date":"","summary":null,"cost_usd":null,"duration_ms":1,"attempts":1,"records":{{}}}}"#
        ),
    );
    let out = p.cassist(&["cache", "ls"]).env("CASSIST_REMOTE", "gs://x").exec();
    assert!(out.stdout.contains("1 entry") && !out.stdout.contains("REMOTE"), "{}", out.transcript());
}

// ---------------------------------------------------------------------------
// A verification is shared: the team's next run of the same tree needs no
// acceptance run

/// `one` writes `out/one.txt`; its acceptance command checks it. It reads
/// `src/seed.txt` and `src/notes.txt`.
const VERIFIED_TASKS: &str = r#"
task "one" {
    goal "write out/one.txt"
    context {
        file "src/seed.txt"
        file "src/notes.txt"
    }
    acceptance { run "grep -q 'made by the agent' out/one.txt"; }
}
"#;

#[test]
fn a_verification_pushed_by_machine_a_spares_machine_b_the_acceptance_run() {
    let Some(s3) = S3Server::start() else { return };
    let team = Team::new();
    let cache = team.trusting(&s3.remote_kdl("team"));
    let mut env = s3.env();
    env.push(team.signing());
    let a = team.machine(&cache, VERIFIED_TASKS);
    a.file("src/notes.txt", "notes\n");
    let out = a.run(&[]).envs(&env).exec();
    assert_eq!(out.code(), 0, "{}", out.transcript());
    assert_eq!(calls(&a), strings(&["one"]));
    // Machine B: a clone of what A committed (its lock and output, no
    // store).
    let b = team.machine(&cache, VERIFIED_TASKS);
    b.file("src/notes.txt", "notes\n");
    b.file("out/one.txt", a.read("out/one.txt"));
    b.file("cassist.lock", a.read("cassist.lock"));
    b.commit_all();

    // The same hand edit on both: A verifies it (no agent) and pushes.
    let edit = "notes, edited by hand\n";
    a.file("src/notes.txt", edit);
    let out = a.run(&["--locked"]).envs(&env).exec();
    assert_eq!(out.code(), 0, "{}", out.transcript());
    assert_eq!(out.states()["one"], "verified", "{}", out.transcript());
    assert_eq!(calls(&a), strings(&["one"]), "no agent for a verification");

    // B finds A's verification: up to date, no acceptance command runs.
    b.file("src/notes.txt", edit);
    let reader = s3.reader_env();
    let plan = b.cassist(&["plan"]).envs(&reader).exec();
    assert_eq!(plan_states(&plan), all(&["one"], "up-to-date"), "{}", plan.transcript());
    let out = b.run(&["--locked"]).envs(&reader).exec();
    assert_eq!(out.code(), 0, "{}", out.transcript());
    assert_eq!(out.states()["one"], "up-to-date", "{}", out.transcript());
    assert!(!out.stderr.contains(": acceptance: "), "no acceptance command ran: {}", out.transcript());
    assert_eq!(calls(&b), Vec::<String>::new());
    // Without the remote, B must verify itself.
    let c = team.machine(&cache, VERIFIED_TASKS);
    c.file("src/notes.txt", edit);
    c.file("out/one.txt", a.read("out/one.txt"));
    c.file("cassist.lock", b.read("cassist.lock"));
    let plan = c.cassist(&["plan"]).env("CASSIST_REMOTE", "off").exec();
    assert_eq!(plan_states(&plan), all(&["one"], "verify"), "{}", plan.transcript());
}

// ---------------------------------------------------------------------------
// Bounded reads

#[test]
fn a_remote_answering_with_gigabytes_costs_a_warning_not_the_memory() {
    let flood = FloodServer::start();
    let team = Team::new();
    let cache = team.trusting(&format!("    remote \"turbo+http://127.0.0.1:{}\"", flood.port));
    let p = team.machine(&cache, TASKS);
    // `cassist plan` looks the tasks to run up: each answer is an endless
    // body. Its peak memory, as the kernel counts it for a child.
    let script = "import resource, subprocess, sys\n\
                  r = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n\
                  sys.stdout.write(r.stdout + r.stderr)\n\
                  print('exit', r.returncode)\n\
                  print('maxrss-kb', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n";
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_cassist"))
        .arg("plan")
        .current_dir(p.path())
        .env("HOME", p.home())
        .env("TMPDIR", p.tmp())
        .env("TURBO_TOKEN", "t")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("exit 0"), "{text}");
    let rss_kb: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("maxrss-kb "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    assert!(rss_kb < 100 * 1024, "cassist plan peaked at {rss_kb} KB:\n{text}");
    assert!(unwrapped(&text).contains("larger than it can be"), "{text}");
    // It stopped reading long before the flood's end.
    let sent = flood.sent.load(std::sync::atomic::Ordering::Relaxed);
    assert!(sent < FloodServer::FLOOD / 4, "the server sent {sent} bytes");
    assert!(text.contains("3 tasks; 3 to run"), "the tasks stay to be run: {text}");
}
