//! The CI fan-out of the README's team-cache recipe (issue 15), against
//! real servers (SeaweedFS for S3, turborepo-remote-cache): shard checkouts run `cassist run --shard K/N`
//! with the signing key and push what they record; a fresh clone of the
//! same commit (empty store, none of the agents' changes) runs `cassist
//! cache pull` and `cassist run --locked` with read-only credentials and no
//! key: every task replays from the remote, with zero agent calls, and the tree holds every change. As
//! the recipe's collect job then does, a plain `cassist run` from the clean
//! checkout replays the same entries, now local, and records `cassist.lock`
//! (`--locked` never writes it, SPEC 4).

use std::collections::BTreeMap;

use crate::support::{Project, S3Server, Test, TurboServer, git, write_executable};

/// The agent, committed in the project (the same command in every
/// checkout): counts its call in `$COUNT_DIR/calls`, then writes the
/// task's name and goal into `out/<task>.txt`.
const AGENT: &str = r#"#!/bin/sh
set -eu
prompt=$(cat)
echo "$CASSIST_TASK" >> "$COUNT_DIR/calls"
mkdir -p out
{ echo "$CASSIST_TASK"; printf '%s\n' "$prompt" | awk '/^# Goal$/ { f = 1; next } /^# / { f = 0 } f && NF'; } > "out/$CASSIST_TASK.txt"
printf '{"success": true, "summary": "wrote out/%s.txt"}\n' "$CASSIST_TASK" > "$CASSIST_RESULT_FILE"
"#;

/// The tasks: independent, so that any shard can run any of them. Each
/// has its output in its context, so its change moves its input hash (the
/// after-state differs from the before-state, as for most real tasks).
const TASKS: [&str; 6] = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"];

/// The remote's prefix in the bucket.
const PREFIX: &str = "fanout";

fn tasks_kdl() -> String {
    TASKS
        .iter()
        .map(|t| {
            format!(
                "task \"{t}\" {{\n    goal \"Write the {t} file.\"\n    context {{\n        file \"src/{t}.txt\"\n        file \"out/{t}.txt\"\n    }}\n    \
                 scope {{\n        path \"out/{t}.txt\"\n    }}\n    acceptance {{\n        run \"grep -q {t} out/{t}.txt\"\n    }}\n}}\n"
            )
        })
        .collect()
}

/// `cassist cache keygen`: (public, secret).
fn keygen(p: &Project) -> (String, String) {
    let out = p.cassist(&["cache", "keygen"]).exec();
    let field = |name: &str| {
        out.stdout
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("no `{name}` line:\n{}", out.stdout))
            .trim()
            .to_owned()
    };
    (field("public "), field("secret "))
}

/// One remote for the scenario: its `remote` line, the environment of the
/// shards (may write) and of the collect job (reads), and the entries it
/// holds.
struct Remote {
    kdl: String,
    writer: Vec<(&'static str, String)>,
    reader: Vec<(&'static str, String)>,
    entries: Box<dyn Fn() -> Vec<String>>,
}

/// The origin: a git repository whose `cassist.kdl` names the remote and
/// trusts a new key; with the key's secret.
fn origin(remote: &Remote) -> (Project, String) {
    let mut test = Test::trusted().file("tools/agent.sh", AGENT).file("tasks/t.kdl", tasks_kdl());
    for t in TASKS {
        test = test.file(&format!("src/{t}.txt"), format!("{t} source\n")).file(&format!("out/{t}.txt"), "todo\n");
    }
    let p = test.build();
    let (public, secret) = keygen(&p);
    let config = format!(
        "trust \"workspace-write\"\ntest #false\n\ndefaults {{\n    agent \"count\"\n}}\n\
         agent \"count\" {{\n    command \"sh\" \"tools/agent.sh\"\n    pass-env \"COUNT_DIR\"\n}}\n\
         cache {{\n    {}\n    trusted-key \"{public}\"\n}}\n",
        remote.kdl
    );
    p.file("cassist.kdl", config);
    write_executable(&p.path().join("tools/agent.sh"), AGENT);
    p.file(".gitignore", "/.cassist/\n");
    p.commit_all();
    (p, secret)
}

/// A fresh clone of `origin` (its own HOME and store), whose agent counts
/// in its own `out` folder.
fn clone(origin: &Project) -> Project {
    let p = Test::new().outside_tmp().build();
    git(p.path(), &["clone", "-q", origin.path().to_str().unwrap(), "."]);
    let count = p.out().join("count");
    std::fs::create_dir_all(&count).unwrap();
    p.with_env("COUNT_DIR", count.to_str().unwrap())
}

/// The tasks the agent was called for in `p`, in order.
fn calls(p: &Project) -> Vec<String> {
    std::fs::read_to_string(p.out().join("count/calls")).unwrap_or_default().lines().map(str::to_owned).collect()
}

fn all(state: &str) -> BTreeMap<String, String> {
    TASKS.iter().map(|t| ((*t).to_owned(), state.to_owned())).collect()
}

/// `out/<task>.txt` of every task.
fn outputs(p: &Project) -> BTreeMap<String, String> {
    TASKS.iter().map(|t| ((*t).to_owned(), p.read(&format!("out/{t}.txt")))).collect()
}

#[test]
fn shards_push_to_s3_and_a_fresh_clone_replays_every_task_with_no_agent() {
    let Some(s3) = S3Server::start() else { return };
    fan_out(&Remote {
        kdl: s3.remote_kdl(PREFIX),
        writer: s3.env(),
        reader: s3.reader_env(),
        entries: Box::new(move || s3.keys(&format!("{PREFIX}/entries/"))),
    });
}

/// The same against a Turborepo remote-cache server: one token (the
/// collect job has it too, with no signing key).
#[test]
fn shards_push_to_a_turborepo_server_and_a_fresh_clone_replays_every_task_with_no_agent() {
    let Some(turbo) = TurboServer::start() else { return };
    fan_out(&Remote {
        kdl: turbo.remote_kdl(),
        writer: turbo.env(),
        reader: turbo.env(),
        entries: Box::new(move || turbo.ids().into_iter().filter(|id| id.contains("entries")).collect()),
    });
}

fn fan_out(remote: &Remote) {
    let (origin, secret) = origin(remote);

    // The shard jobs: each runs its slice and pushes it, signed.
    let shards: Vec<Project> = (1..=2).map(|_| clone(&origin)).collect();
    let mut ran = Vec::new();
    for (k, shard) in shards.iter().enumerate() {
        let slice = format!("{}/2", k + 1);
        let done =
            shard.run(&["--shard", &slice]).envs(&remote.writer).env("CASSIST_CACHE_SIGNING_KEY", &secret).exec();
        assert!(done.states().values().all(|s| s == "passed"), "shard {slice}:\n{}", done.transcript());
        assert!(!done.stderr.contains("warning"), "shard {slice}:\n{}", done.transcript());
        let mine = calls(shard);
        assert_eq!(mine.len(), done.states().len(), "shard {slice}: one agent call per task");
        assert!(!mine.is_empty(), "shard {slice} got no task: pick other task names");
        ran.extend(mine);
    }
    ran.sort();
    assert_eq!(ran, TASKS, "every task ran in exactly one shard");
    let entries = (remote.entries)();
    assert_eq!(entries.len(), TASKS.len(), "one signed entry per task on the remote: {entries:?}");
    let expected: BTreeMap<String, String> = shards
        .iter()
        .flat_map(|s| outputs(s).into_iter().filter(|(_, text)| text != "todo\n").collect::<Vec<_>>())
        .collect();
    assert_eq!(expected.len(), TASKS.len());

    // The collect job: a fresh clone, read-only credentials, no key.
    let collect = clone(&origin);
    assert!(collect.exists("cassist.kdl") && !collect.exists(".cassist"), "a fresh clone");
    assert!(outputs(&collect).values().all(|t| t == "todo\n"), "the clone has none of the agents' changes");
    // As the recipe does: `cache pull`, then `run --locked`.
    let pulled = collect.cassist(&["cache", "pull"]).envs(&remote.reader).exec();
    assert!(pulled.stdout.contains("0 task(s) still to run"), "{}", pulled.transcript());
    assert!(calls(&collect).is_empty());
    let done = collect.run(&["--locked"]).envs(&remote.reader).exec();
    assert_eq!(done.states(), all("replayed"), "{}", done.transcript());
    assert!(calls(&collect).is_empty(), "--locked called an agent: {:?}", calls(&collect));
    assert!(done.stdout.contains("alpha    replayed (remote)"), "{}", done.transcript());
    assert_eq!(outputs(&collect), expected, "the tree holds every shard's change");
    assert!(!collect.exists("cassist.lock"), "--locked wrote cassist.lock");

    // The recipe's "Record cassist.lock" step: from the clean checkout, a
    // plain run replays what is now in the local store and records it.
    collect.git(&["checkout", "--", "."]);
    collect.git(&["clean", "-fdq", "-e", ".cassist"]);
    assert!(outputs(&collect).values().all(|t| t == "todo\n"));
    let done = collect.run(&[]).envs(&remote.reader).exec();
    assert_eq!(done.states(), all("replayed"), "{}", done.transcript());
    assert!(calls(&collect).is_empty(), "recording the lock called an agent: {:?}", calls(&collect));
    assert_eq!(outputs(&collect), expected);
    let lock = collect.read("cassist.lock");
    for t in TASKS {
        assert!(lock.contains(&format!("task \"{t}\"")), "cassist.lock lacks {t}:\n{lock}");
    }
    let plan = collect.cassist(&["plan", "--json"]).envs(&remote.reader).exec();
    let json = plan.json();
    for t in TASKS {
        assert_eq!(crate::support::task(&json, t)["state"], "up-to-date", "{t}: {}", plan.stdout);
    }
    assert_eq!((remote.entries)(), entries, "a client with no key wrote to the remote");
}
