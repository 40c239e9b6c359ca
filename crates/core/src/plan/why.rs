//! Why a task is in its state: the inputs that differ from what
//! `cassist.lock` and the store recorded, in words (`cassist explain`, and
//! the reasons `run --locked` gives for a task that would need an agent).

use std::collections::BTreeMap;

use super::state::Basis;
use super::{Plan, PlannedTask, State};

/// Why `t` is in its state: the inputs that differ from what the lock
/// recorded, in words ("goal changed", "src/text.py changed",
/// "dependency text-module changed", "agent claude 1.2 → 1.3",
/// "model claude-sonnet-4-5 → claude-opus-4-1", "template changed").
pub fn why(plan: &Plan, t: &PlannedTask) -> Vec<String> {
    // A forced task: what differs from the state it was planned in.
    let mut reasons = match &t.again {
        Some(super::again::Again::Forced(was)) => differences(plan, &PlannedTask { state: *was, ..t.clone() }),
        _ => differences(plan, t),
    };
    match (t.state, t.cached.basis) {
        (State::Verify, _) => reasons.push(
            "only files it reads (or the agent's version, or a run limit) changed, and its change is still in the tree: its acceptance commands decide whether the recorded change still holds; the agent runs only if they fail (or with --force)"
                .to_owned(),
        ),
        (State::Stale, _) => reasons.push(
            "only files it reads (or the agent's version, or a run limit) changed: its recorded findings are kept; it runs again when it is named (--filter, --force) or when a task depending on it runs its agent"
                .to_owned(),
        ),
        _ => {}
    }
    if let Some(again) = &t.again {
        reasons.push(again.reason());
    }
    reasons
}

/// What [`why`] says before the verdict of states `verify` and `stale`.
fn differences(plan: &Plan, t: &PlannedTask) -> Vec<String> {
    let c = &t.cached;
    let replays = match c.after_replay_of.as_slice() {
        [] => String::new(),
        tasks => format!(
            " (as the replay of {} will leave them)",
            tasks.iter().map(|t| format!("`{t}`")).collect::<Vec<_>>().join(", ")
        ),
    };
    let mut reasons: Vec<String> = c.outputs_changed.clone();
    if let Some(u) = &c.unusable {
        reasons.push(format!("the stored run cannot be used: {u}"));
    }
    if let Some(path) = &c.conflict {
        reasons.push(format!("replay would conflict: {path}"));
        reasons.push(
            "the stored change does not merge into the tree as it is (both changed the same lines of it); the agent runs on the tree as it is"
                .to_owned(),
        );
        return reasons;
    }
    match (t.state, c.basis) {
        (State::UpToDate, _) if !c.outputs_edited.is_empty() => {
            let mut notes = c.outputs_edited.clone();
            notes.push("its inputs are as recorded; an output changed since the run is the user's: cassist leaves it as it is (delete a file the task created to have it written again)".to_owned());
            return notes;
        }
        (State::UpToDate, Basis::Verified) => {
            return vec![
                "its inputs changed since the recorded run, and its acceptance commands passed on the tree as it is: verified, its recorded change holds"
                    .to_owned(),
            ];
        }
        (State::UpToDate, Basis::StoreAfter) => {
            return vec![
                "its inputs are as a stored run left them, one cassist.lock does not record (a `run --locked` replayed it, or it is an earlier run's)"
                    .to_owned(),
            ];
        }
        (State::UpToDate, _) => return vec!["unchanged since it was recorded".to_owned()],
        (State::Replay, _) if c.remote => {
            reasons.push(format!(
                "the remote cache holds a run of these inputs{replays}, signed by a trusted key; it was fetched into the store and the change is replayed"
            ));
            return reasons;
        }
        (State::Replay, Basis::OutputsChanged) => {
            reasons.push(format!(
                "its inputs are as the recorded run left them{replays}; the stored change is written again"
            ));
            return reasons;
        }
        (State::Run, Basis::OutputsChanged) if c.unusable.is_none() => {
            reasons.push(
                "the store holds no record of the run to write again (it was cleaned, or this is a fresh clone)"
                    .to_owned(),
            );
            return reasons;
        }
        (State::Replay, Basis::StoreEntry) => {
            reasons.push(format!(
                "the store holds a run of these inputs{replays} that cassist.lock does not record (an interrupted run, or inputs seen before); the stored change is replayed"
            ));
            return reasons;
        }
        (State::Replay, _) => {
            reasons.push(format!(
                "inputs equal the recorded state before the run{replays}; the stored change is replayed"
            ));
            return reasons;
        }
        (State::Run, Basis::OutputsChanged) => return reasons,
        (State::Run, Basis::StoreEntry) => {
            reasons.push(
                "cassist.lock does not record these inputs, though the store holds a run of them (`cassist run` without --locked replays it and records it)"
                    .to_owned(),
            );
            return reasons;
        }
        (State::Run | State::Verify | State::Stale, _) => {}
    }
    let Some(locked) = plan.lock.tasks.get(&t.task.name) else {
        reasons.push("never run: no record in cassist.lock".to_owned());
        return reasons;
    };
    // Compare with the state the project was left in (the entry's
    // after-key), else with the state before the run.
    let Some(entry) = plan.store.read_entry(&locked.before).ok().flatten() else {
        reasons.push(format!(
            "inputs changed since {} (the store holds no record of them to compare: it was cleaned, or this is a fresh clone)",
            if locked.date.is_empty() { "the last run".to_owned() } else { locked.date.clone() }
        ));
        return reasons;
    };
    let after = entry.after_key.is_some();
    let old = match key_from_json(entry.after_key.as_ref().unwrap_or(&entry.key)) {
        Some(k) => k,
        None => {
            reasons.push("inputs changed (the recorded key is from another version of cassist)".to_owned());
            return reasons;
        }
    };
    let known = reasons.len();
    let spec_old = &old.spec;
    let spec_new = &t.key.spec;
    let fields: [(&str, bool); 10] = [
        ("goal", spec_old.goal != spec_new.goal),
        ("kind", spec_old.kind != spec_new.kind),
        ("timeout", spec_old.timeout_ms != spec_new.timeout_ms),
        ("max-iterations", spec_old.max_iterations != spec_new.max_iterations),
        ("max-cost", spec_old.max_cost != spec_new.max_cost),
        ("context", spec_old.context != spec_new.context),
        ("scope", spec_old.scope != spec_new.scope),
        ("reference", spec_old.reference != spec_new.reference),
        ("constraints", spec_old.constraints != spec_new.constraints),
        ("acceptance", spec_old.acceptance != spec_new.acceptance),
    ];
    for (name, changed) in fields {
        if changed {
            reasons.push(format!("{name} changed"));
        }
    }
    if spec_old.depends_on != spec_new.depends_on {
        reasons.push("depends-on changed".to_owned());
    }
    let by = |k: &super::hash::InputKey| -> BTreeMap<(String, String), String> {
        k.inputs
            .iter()
            .filter(|i| i.kind != "spec")
            .map(|i| ((i.kind.to_owned(), i.name.clone()), i.hash.clone()))
            .collect()
    };
    let (a, b) = (by(&old), by(&t.key));
    // The model asked for: one input named by the model, absent for the
    // CLI's own default.
    let model = |m: &BTreeMap<(String, String), String>| m.keys().find(|(k, _)| k == "model").map(|(_, n)| n.clone());
    let (old_model, new_model) = (model(&a), model(&b));
    if old_model != new_model {
        let name = |m: Option<String>| m.unwrap_or_else(|| "default".to_owned());
        reasons.push(format!("model {} → {}", name(old_model), name(new_model)));
    }
    // The files a task integrated are its own output: compare them with
    // the after-state instead (they are expected to differ from before).
    let own: std::collections::HashSet<&str> =
        if after { Default::default() } else { entry.changes.iter().map(|c| c.path.as_str()).collect() };
    for ((kind, name), hash) in b.iter().filter(|((k, _), _)| k != "model") {
        match a.get(&(kind.clone(), name.clone())) {
            Some(h) if h == hash => {}
            Some(_) if (kind == "context" || kind == "reference") && own.contains(name.as_str()) => {
                let now = hash.as_str();
                let stored =
                    entry.changes.iter().find(|c| &c.path == name).and_then(|c| c.new.as_deref()).unwrap_or("");
                let stored_hash =
                    plan.store.get_object(stored).map(|b| blake3::hash(&b).to_hex().to_string()).unwrap_or_default();
                if stored_hash != now {
                    reasons.push(format!("{name} changed"));
                }
            }
            Some(_) => reasons.push(match kind.as_str() {
                "dependency" => format!("dependency {name} changed"),
                "agent" => match (&locked.agent_version, plan.hashing.versions.get(name).cloned().flatten()) {
                    (Some(o), Some(n)) if *o != n => format!("agent {name} {o} → {n}"),
                    _ => format!("agent {name} changed"),
                },
                "template" => "template changed".to_owned(),
                "project" => "project config (setup, test, build commands or limits) changed".to_owned(),
                "sandbox" => "sandbox changed".to_owned(),
                "network" | "sandbox-paths" => config_change(kind),
                _ => format!("{name} changed"),
            }),
            None => reasons.push(match kind.as_str() {
                "agent" => format!("agent changed to {name}"),
                "sandbox" => format!("sandbox changed to {name}"),
                "network" | "sandbox-paths" => config_change(kind),
                "context" | "reference" | "instructions" => format!("{name} added"),
                _ => format!("{kind} {name} added"),
            }),
        }
    }
    for (kind, name) in a.keys() {
        if b.contains_key(&(kind.clone(), name.clone())) {
            continue;
        }
        if matches!(kind.as_str(), "context" | "reference" | "instructions" | "dependency") {
            reasons.push(format!("{name} removed"));
        } else if matches!(kind.as_str(), "network" | "sandbox-paths") {
            reasons.push(config_change(kind));
        }
    }
    if reasons.len() == known {
        reasons.push("inputs changed".to_owned());
    }
    reasons
}

/// What a change of the input `kind` of the config says: the network
/// allow-lists (`network { allow }`, an agent's `allow`) or the sandbox's
/// host paths (`sandbox { read; hide }`), given, changed or taken out.
fn config_change(kind: &str) -> String {
    match kind {
        "network" => "network allow-list changed".to_owned(),
        _ => "sandbox paths changed".to_owned(),
    }
}

fn key_from_json(v: &serde_json::Value) -> Option<super::hash::InputKey> {
    let spec: super::hash::SpecKey = serde_json::from_value(v["spec"].clone()).ok()?;
    let inputs = v["inputs"]
        .as_array()?
        .iter()
        .filter_map(|i| {
            let kind: &'static str = match i["kind"].as_str()? {
                "spec" => "spec",
                "agent" => "agent",
                "model" => "model",
                "sandbox" => "sandbox",
                "template" => "template",
                "project" => "project",
                "network" => "network",
                "sandbox-paths" => "sandbox-paths",
                "instructions" => "instructions",
                "context" => "context",
                "reference" => "reference",
                "dependency" => "dependency",
                _ => return None,
            };
            Some(super::hash::Input {
                kind,
                name: i["name"].as_str()?.to_owned(),
                hash: i["hash"].as_str()?.to_owned(),
            })
        })
        .collect();
    Some(super::hash::InputKey { format: v["format"].as_u64()? as u32, spec, inputs })
}
