//! Replay of a recorded change: a task whose inputs are those of a stored
//! run while its change is not in the tree (state `replay`) calls no
//! agent; the stored change is written in a fresh workspace, reviewed for
//! security issues, acceptance is verified, and the change is integrated.

use std::path::Path;

use crate::workspace::Layer;
use cassist_core::changes::ChangeSet;
use cassist_core::store::Entry;

use super::integrate::Origin;
use super::jail::Role;
use super::{Failure, TaskContext};

impl TaskContext<'_> {
    /// Replays `entry`'s change; the change that was integrated, and the
    /// lock line written with it.
    pub fn replay(&mut self, entry: &Entry) -> Result<ChangeSet, Failure> {
        self.phase("replay", 0, format!("{} file(s)", entry.changes.len()));
        self.write_stored_change(entry)?;
        let changes = self.read_changes()?;
        self.facts.changed_files = changes.paths().iter().map(|s| (*s).to_owned()).collect();
        // What must never land does not, even from a store entry.
        if let Some(f) = self.review(&changes).first_security_issue() {
            return Err(Failure::failed(format!("the stored change is rejected as a security issue: {}", f.message)));
        }
        if let Some(f) = self.acceptance(1)? {
            return Err(Failure::failed(format!(
                "the replayed change no longer passes: acceptance command `{}` failed; run with --no-cache to call the agent",
                f.command
            ))
            .with_tail(f.tail));
        }
        self.integrate_and_build(&changes, Origin::Replayed(entry))?;
        Ok(changes)
    }

    /// The stored change is written inside the workspace (a helper run
    /// through the wrapper, so deletions are real there too).
    fn write_stored_change(&self, entry: &Entry) -> Result<(), Failure> {
        let cannot = |e: &dyn std::fmt::Display| Failure::failed(format!("cannot replay the stored change: {e}"));
        let spec = self.ws.io_dir().map_err(|e| cannot(&e))?.join("replay.json");
        let doc = serde_json::json!({"store": self.runner.plan.store.dir(), "changes": entry.changes});
        std::fs::write(&spec, serde_json::to_vec(&doc).unwrap_or_default()).map_err(|e| cannot(&e))?;
        let exe = self.runner.exe.clone().into_os_string();
        let io = spec.parent().map(Path::to_path_buf);
        let jail = self.runner.jail(Role::Replay, self.t.sandbox, &self.ws, io.as_deref(), None, &self.base_env);
        let mut c = self
            .ws
            .sandboxed(Layer::Agent, vec![exe, "__apply-changes".into(), spec.into_os_string()], jail)
            .map_err(|e| cannot(&e))?;
        c.env = self.base_env.clone();
        c.transcript = Some(self.record.join("replay.log"));
        match self.runner.run(&c) {
            Ok(f) if f.success() => Ok(()),
            Ok(f) => Err(cannot(&super::failure::ended(&f)).with_tail(f.tail)),
            Err(e) => Err(cannot(&e)),
        }
    }
}
