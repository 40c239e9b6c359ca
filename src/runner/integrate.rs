//! Integration: the change goes into the user's tree (one task at a time),
//! then the project's `build` commands run there; a failed build takes the
//! change back out.

use std::ffi::OsString;

use crate::accept;
use crate::changes::{ChangeSet, unified_diff};
use crate::process;
use crate::sandbox::ExecSpec;
use crate::workspace::{IntegrateError, Mode};

use super::jail::Role;
use super::{Failure, TaskContext};

impl TaskContext<'_> {
    /// Records the patch, integrates it into the user's tree and runs the
    /// `build` commands there (taking the change back out if one fails).
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
        for cmd in &self.runner.plan.project.config.build {
            self.phase("build", self.facts.attempts, cmd.clone());
            if let Err((why, tail)) = self.build(cmd) {
                crate::workspace::rollback(&self.runner.plan.project.root, &integrated);
                return Err(Failure::failed(format!(
                    "build command `{cmd}` failed after integration ({why}); the change was taken back out"
                ))
                .with_tail(tail));
            }
        }
        Ok(())
    }

    /// One `build` command in the user's tree: why it failed, and the end
    /// of its output.
    fn build(&self, cmd: &str) -> Result<(), (String, String)> {
        let root = &self.runner.plan.project.root;
        let argv: Vec<OsString> = vec!["sh".into(), "-c".into(), cmd.into()];
        // In the user's tree, but sandboxed like acceptance: it runs the
        // agent's code (a build script) with the project as all it may
        // write.
        let jail = self.runner.jail(Role::Build, self.t.sandbox, &self.ws, None, None, &self.base_env);
        let namespaces = self.runner.mode == Mode::Overlay;
        let spec = ExecSpec::for_project(jail, namespaces, None, root, root, argv);
        let argv: Vec<OsString> =
            [self.runner.exe.clone().into_os_string()].into_iter().chain(spec.to_args()).collect();
        let mut c = process::Command::new(argv, root.clone());
        c.env = self.base_env.clone();
        c.transcript = Some(self.record.join("build.log"));
        c.timeout = Some(accept::DEFAULT_TIMEOUT);
        match self.runner.run(&c) {
            Ok(f) if f.success() => Ok(()),
            Ok(f) => Err((f.describe(), f.tail)),
            Err(e) => Err((e.to_string(), String::new())),
        }
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
