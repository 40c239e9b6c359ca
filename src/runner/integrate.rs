//! Integration: the change goes into the user's tree (one task at a time),
//! crash-safe, then the project's `build` commands check that it still
//! compiles, on a throw-away layer over the integrated tree (copy mode: a
//! throw-away copy of it): nothing they write reaches the user's tree, so
//! the agent's code they run (a build script) cannot rewrite the project,
//! cassist's own files, `.git` or the store. A failed build takes the
//! change back out.
//!
//! The order is what makes a kill at any moment cost at most a replay,
//! never a second agent run: the task's store entry is written first
//! ([`super::record`]); then the change is written as an open journaled
//! transaction ([`crate::journal`]); the task is hashed on the tree it
//! made and the `build` commands run; then the transaction is committed
//! with the task's `cassist.lock` line. A cassist killed before the commit
//! leaves an open transaction, which the next command rolls back: the
//! tree is as before the task, and the store entry makes it `replay`. A
//! kill after the commit leaves the change integrated and recorded.

use std::collections::HashMap;

use crate::accept;
use crate::changes::{ChangeSet, unified_diff};
use crate::failpoint;
use crate::lock::LockLine;
use crate::plan::PlannedTask;
use crate::store::Entry;
use crate::workspace::IntegrateError;

use super::jail::Role;
use super::record::{Recorded, lock_line};
use super::{Failure, TaskContext};

/// Where the change being integrated comes from.
pub enum Origin<'a> {
    /// The agent's change, accepted just now; `split`: the parts it passed
    /// with. It is recorded in the store before the tree is touched.
    Passed { split: &'a [crate::part::Part] },
    /// A store entry's change, replayed.
    Replayed(&'a Entry),
}

impl TaskContext<'_> {
    /// Records the change (a passed task's), integrates it into the user's
    /// tree and runs the `build` commands there (taking the change back
    /// out if one fails); the task's `cassist.lock` line, as written with
    /// the change.
    pub fn integrate_and_build(
        &mut self,
        changes: &ChangeSet,
        origin: Origin<'_>,
    ) -> Result<Option<LockLine>, Failure> {
        let patch = self.record.join("patch.diff");
        let _ = std::fs::write(&patch, self.runner.redactor.redact(&unified_diff(changes)));
        // What the agent wrote that .gitignore ignores is said, never
        // dropped silently; when it is all the agent wrote, the report
        // says why nothing was integrated.
        if !self.read_only && !self.ws.ignored().is_empty() {
            let note = format!("not integrated, ignored by .gitignore: {}", some_paths(self.ws.ignored()));
            let note = self.runner.redactor.redact(&note);
            self.note(note.clone());
            if changes.is_empty() {
                self.facts.nothing_integrated = Some(note);
            }
        }
        // One change at a time goes into the user's tree.
        let _one_at_a_time = self.runner.integration.write().unwrap_or_else(|e| e.into_inner());
        let date = crate::lock::now_rfc3339();
        let recorded = match origin {
            Origin::Passed { split } => self.record_passed(changes, split, &date),
            Origin::Replayed(_) => None,
        };
        let open = if changes.is_empty() {
            None
        } else {
            self.phase("integrate", self.facts.attempts, format!("{} file(s)", changes.changes.len()));
            match self.ws.begin_integration(changes) {
                Ok(open) => Some(open),
                Err(e) => {
                    self.withdraw(recorded);
                    return Err(match e {
                        IntegrateError::Conflict(files) => Failure::failed(format!(
                            "conflict: {} changed in the project while the task ran; nothing was integrated (the patch is in {})",
                            files.join(", "),
                            patch.display()
                        )),
                        e => Failure::failed(format!("{e}; nothing was integrated")),
                    });
                }
            }
        };
        let after = self.hashed_after();
        // The build checks the integrated tree (nothing to build without
        // a change), for a task that runs the project's checks (the rule
        // its hash follows too).
        if open.is_some() && self.t.runs_project_checks() && !self.runner.plan.project.config.build.is_empty() {
            failpoint::hit("build-start");
            let built = self.build();
            self.ws.end_scratch();
            failpoint::hit("build-end");
            if let Err((why, tail)) = built {
                // The entry goes first: killed while the change is taken
                // back out, the next run asks the agent again rather than
                // replaying a change that failed its build.
                self.withdraw(recorded);
                let back = match open.map(crate::journal::Open::roll_back) {
                    Some(Err(e)) => {
                        format!("taking the change back out failed ({e}); the next cassist command finishes it")
                    }
                    _ => "the change was taken back out".to_owned(),
                };
                return Err(Failure::failed(format!("{why}; {back}")).with_tail(tail));
            }
        }
        let line = self.lock_line(&origin, recorded, after.as_ref());
        let lines: Vec<LockLine> = line.clone().into_iter().collect();
        match open {
            Some(open) => open.commit(lines),
            None => crate::journal::Transaction::new(&self.runner.plan.project.root).apply(lines),
        }
        .map_err(|e| Failure::failed(format!("cannot finish the integration: {e}")))?;
        Ok(line)
    }

    /// The task hashed on the tree as its change left it (the after-state
    /// the lock records), with the same dependency outputs it started with.
    fn hashed_after(&self) -> Option<PlannedTask> {
        let outputs: HashMap<String, String> = self
            .t
            .key
            .inputs
            .iter()
            .filter(|i| i.kind == "dependency")
            .map(|i| (i.name.clone(), i.hash.clone()))
            .collect();
        let mut after = self.t.clone();
        self.runner.plan.rehash(&mut after, &outputs).ok().map(|()| after)
    }

    /// The lock line the integration writes: a passed task's new record
    /// (or the removal of an older one, when it could not be recorded); a
    /// replayed task's record from its entry when the lock has none for
    /// it, else nothing (the line stands as recorded). Nothing with
    /// `--locked`. The entry learns the after-state first, when it does not
    /// know it yet (a passed task's; the entry of a run killed before its
    /// change was integrated).
    fn lock_line(
        &self,
        origin: &Origin<'_>,
        recorded: Option<Recorded>,
        after: Option<&PlannedTask>,
    ) -> Option<LockLine> {
        if self.runner.locked {
            return None;
        }
        let store = &self.runner.plan.store;
        let task = self.name.to_owned();
        let complete = |e: &Entry| -> Option<Entry> {
            if !e.after.is_empty() {
                return Some(e.clone());
            }
            let after = after?;
            let mut e = e.clone();
            e.after = after.hash.clone();
            e.after_key = serde_json::to_value(&after.key).ok();
            store.put_entry(&e).ok().map(|()| e)
        };
        match origin {
            Origin::Passed { .. } => {
                let entry = recorded.and_then(|r| complete(&r.entry)).map(|e| lock_line(&e));
                Some(LockLine { task, entry })
            }
            Origin::Replayed(e) => {
                let stands = self.runner.plan.lock.tasks.get(self.name).is_some_and(|l| l.before == e.before);
                (!stands).then(|| complete(e)).flatten().map(|e| LockLine { task, entry: Some(lock_line(&e)) })
            }
        }
    }

    /// The `build` commands in order, on a throw-away layer over the user's
    /// tree as integrated; the first that fails: why, and the end of its
    /// output.
    fn build(&mut self) -> Result<(), (String, String)> {
        self.ws
            .begin_build()
            .map_err(|e| (format!("cannot prepare the build layer after integration: {e}"), String::new()))?;
        for cmd in &self.runner.plan.project.config.build {
            self.phase("build", self.facts.attempts, cmd.clone());
            let why = match self.shell(Role::Build, cmd, Some(accept::DEFAULT_TIMEOUT), &self.record.join("build.log"))
            {
                Ok(f) if f.success() => continue,
                Ok(f) => (f.describe(), f.tail),
                Err(e) => (e.to_string(), String::new()),
            };
            return Err((format!("build command `{cmd}` failed after integration ({})", why.0), why.1));
        }
        Ok(())
    }
}

/// At most ten of `paths`, then how many more.
pub fn some_paths(paths: &[String]) -> String {
    const SHOWN: usize = 10;
    let mut out = paths.iter().take(SHOWN).map(String::as_str).collect::<Vec<_>>().join(", ");
    if paths.len() > SHOWN {
        out.push_str(&format!(" (and {} more)", paths.len() - SHOWN));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn some_paths_names_ten_then_counts() {
        let paths: Vec<String> = (0..13).map(|i| format!("f{i}")).collect();
        assert_eq!(some_paths(&paths[..2]), "f0, f1");
        assert_eq!(some_paths(&paths), "f0, f1, f2, f3, f4, f5, f6, f7, f8, f9 (and 3 more)");
    }
}
