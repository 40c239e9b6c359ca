//! Integration: the change goes into the user's tree (one task at a time),
//! then the project's `build` commands check that it still compiles, on a
//! throw-away layer over the integrated tree (copy mode: a throw-away copy
//! of it): nothing they write reaches the user's tree, so the agent's code
//! they run (a build script) cannot rewrite the project, cassist's own
//! files, `.git` or the store. A failed build takes the change back out.

use crate::accept;
use crate::changes::{ChangeSet, unified_diff};
use crate::workspace::IntegrateError;

use super::jail::Role;
use super::{Failure, TaskContext};

impl TaskContext<'_> {
    /// Records the patch, integrates it into the user's tree and runs the
    /// `build` commands over it (taking the change back out if one fails).
    pub fn integrate_and_build(&mut self, changes: &ChangeSet) -> Result<(), Failure> {
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
        if changes.is_empty() {
            return Ok(());
        }
        // One change at a time goes into the user's tree.
        let _one_at_a_time = self.runner.integration.write().unwrap_or_else(|e| e.into_inner());
        self.phase("integrate", self.facts.attempts, format!("{} file(s)", changes.changes.len()));
        let integrated = self.ws.integrate(changes).map_err(|e| match e {
            IntegrateError::Conflict(files) => Failure::failed(format!(
                "conflict: {} changed in the project while the task ran; nothing was integrated (the patch is in {})",
                files.join(", "),
                patch.display()
            )),
            e => Failure::failed(format!("{e}; nothing was integrated")),
        })?;
        if self.runner.plan.project.config.build.is_empty() {
            return Ok(());
        }
        let built = self.build();
        self.ws.end_scratch();
        if let Err((why, tail)) = built {
            crate::workspace::rollback(&self.runner.plan.project.root, &integrated);
            return Err(Failure::failed(format!("{why}; the change was taken back out")).with_tail(tail));
        }
        Ok(())
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
