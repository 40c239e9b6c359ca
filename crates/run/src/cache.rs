//! The Nix-style part of a run (SPEC 4): recording a task's result in the
//! store and `cassist.lock`, replaying it, and saying why a task is in its
//! state.

use std::collections::BTreeMap;
use std::path::Path;

use crate::runner::TaskResult;
use cassist_core::changes::{Change, ChangeKind};
use cassist_core::lock::LockEntry;
use cassist_core::plan::state::Basis;
use cassist_core::plan::{Plan, PlannedTask, State};
use cassist_core::store::{Outputs, Store, StoredChange};

/// Completes the store entry of a task that passed: the runner wrote it
/// before the change reached the tree ([`crate::runner::record`]); what is
/// known only once the task has ended (its whole record folder, its
/// duration) goes in now. Returns the task's output (the patch hash).
pub fn finish_record(store: &Store, t: &PlannedTask, result: &TaskResult) -> std::io::Result<String> {
    let mut entry = store
        .read_entry(&t.hash)
        .ok()
        .flatten()
        .ok_or_else(|| std::io::Error::other("its store entry was not written before integration"))?;
    if let Some(dir) = &result.record_dir {
        entry.records.extend(crate::runner::record::store_records(store, dir)?);
    }
    entry.duration_ms = result.end.report.duration_ms;
    // Whole on disk already: the records need no flush of their own.
    store.amend_entry(&entry)?;
    Ok(entry.patch)
}

/// Moves a recorded task's after-state to the project as a run left it:
/// `t`'s current hash and the task's `outputs` then, in the lock entry and
/// the store entry. Only the end of a run calls this (SPEC 4: nothing
/// writes an intermediate after-state).
/// `outputs`: `None` when the store no longer says which files they are
/// (the recorded hash then stays).
pub fn update_after(store: &Store, entry: &mut LockEntry, t: &PlannedTask, outputs: Option<Outputs>) {
    entry.after = t.hash.clone();
    if let Some(o) = &outputs {
        entry.outputs = Some(cassist_core::plan::state::outputs_hash(o));
    }
    if let Ok(Some(mut e)) = store.read_entry(&entry.before) {
        e.after = t.hash.clone();
        e.after_key = serde_json::to_value(&t.key).ok();
        if outputs.is_some() {
            e.outputs = outputs;
        }
        let _ = store.put_entry(&e);
    }
}

/// `cassist __apply-changes SPEC`: writes a stored change into the current
/// folder. SPEC is `{"store": DIR, "changes": [StoredChange]}`.
pub fn apply_changes(spec: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let text = std::fs::read(spec).map_err(|e| format!("cannot read {}: {e}", spec.display()))?;
    let v: serde_json::Value = serde_json::from_slice(&text).map_err(|e| e.to_string())?;
    let store_dir = v["store"].as_str().ok_or("no store")?;
    let changes: Vec<StoredChange> = serde_json::from_value(v["changes"].clone()).map_err(|e| e.to_string())?;
    // The store lives under the project: `.cassist/store` → its root.
    let root = Path::new(store_dir).parent().and_then(Path::parent).ok_or("bad store path")?;
    let store = Store::open(root);
    // What is never written, whatever an entry says (it may come from a
    // remote store): checked before anything is.
    for c in &changes {
        let symlink = c.mode & cassist_core::changes::S_IFMT == cassist_core::changes::S_IFLNK;
        let new = match &c.new {
            Some(h) if symlink => Some(store.get_object(h).map_err(|e| e.to_string())?),
            Some(_) => Some(Vec::new()),
            None => None,
        };
        let check = Change { path: c.path.clone(), kind: c.kind.clone(), old: None, new, mode: c.mode, hazard: None };
        if let Some(why) = crate::workspace::never_written(&check) {
            return Err(format!("refused to write {}: {why}", c.path));
        }
    }
    for c in &changes {
        if let ChangeKind::Renamed { from } = &c.kind {
            let _ = std::fs::remove_file(from);
        }
        if c.new.is_none() {
            match std::fs::remove_file(&c.path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("cannot delete {}: {e}", c.path)),
            }
            // Folders left empty go too (a folder may give way to a file).
            let mut dir = Path::new(&c.path).parent();
            while let Some(d) = dir.filter(|d| !d.as_os_str().is_empty()) {
                if std::fs::remove_dir(d).is_err() {
                    break;
                }
                dir = d.parent();
            }
        }
    }
    for c in &changes {
        let Some(h) = &c.new else { continue };
        let bytes = store.get_object(h).map_err(|e| e.to_string())?;
        if let Some(parent) = Path::new(&c.path).parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
        }
        // Never write through what is there now (a symlink would lead the
        // write elsewhere): replace it.
        match std::fs::symlink_metadata(&c.path) {
            Ok(m) if !m.is_dir() => {
                std::fs::remove_file(&c.path).map_err(|e| format!("cannot replace {}: {e}", c.path))?
            }
            _ => {}
        }
        if c.mode & libc::S_IFMT == libc::S_IFLNK {
            std::os::unix::fs::symlink(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&bytes), &c.path)
                .map_err(|e| e.to_string())?;
        } else {
            std::fs::write(&c.path, &bytes).map_err(|e| format!("cannot write {}: {e}", c.path))?;
            std::fs::set_permissions(&c.path, std::fs::Permissions::from_mode(c.mode & 0o777))
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// Why `t` is in its state: the inputs that differ from what the lock
/// recorded, in words ("goal changed", "src/text.py changed",
/// "dependency text-module changed", "agent claude 1.2 → 1.3",
/// "model claude-sonnet-4-5 → claude-opus-4-1", "template changed").
pub fn why(plan: &Plan, t: &PlannedTask) -> Vec<String> {
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
    match (t.state, c.basis) {
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
        (State::Run, _) => {}
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
    let by = |k: &cassist_core::plan::hash::InputKey| -> BTreeMap<(String, String), String> {
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
                _ => format!("{name} changed"),
            }),
            None => reasons.push(match kind.as_str() {
                "agent" => format!("agent changed to {name}"),
                "sandbox" => format!("sandbox changed to {name}"),
                "context" | "reference" | "instructions" => format!("{name} added"),
                _ => format!("{kind} {name} added"),
            }),
        }
    }
    for (kind, name) in a.keys() {
        if !b.contains_key(&(kind.clone(), name.clone()))
            && matches!(kind.as_str(), "context" | "reference" | "instructions" | "dependency")
        {
            reasons.push(format!("{name} removed"));
        }
    }
    if reasons.len() == known {
        reasons.push("inputs changed".to_owned());
    }
    reasons
}

fn key_from_json(v: &serde_json::Value) -> Option<cassist_core::plan::hash::InputKey> {
    let spec: cassist_core::plan::hash::SpecKey = serde_json::from_value(v["spec"].clone()).ok()?;
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
                "instructions" => "instructions",
                "context" => "context",
                "reference" => "reference",
                "dependency" => "dependency",
                _ => return None,
            };
            Some(cassist_core::plan::hash::Input {
                kind,
                name: i["name"].as_str()?.to_owned(),
                hash: i["hash"].as_str()?.to_owned(),
            })
        })
        .collect();
    Some(cassist_core::plan::hash::InputKey { format: v["format"].as_u64()? as u32, spec, inputs })
}
