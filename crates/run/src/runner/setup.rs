//! Before the first agent run: the project's `setup` commands in the
//! workspace, and its standing instructions under the name the agent
//! reads.

use crate::accept;
use cassist_sandbox::process::Outcome;

use super::jail::Role;
use super::{CommandError, Failure, TaskContext};

/// Runs the `setup` commands in the workspace, in order; the first that
/// fails fails the task.
pub fn setup(task: &mut TaskContext<'_>) -> Result<(), Failure> {
    let log = task.record_dir().join("setup.log");
    let commands = &task.runner().plan.project.config.setup;
    if commands.is_empty() {
        return Ok(());
    }
    for cmd in commands {
        task.phase("setup", 0, cmd.clone());
        match task.shell(Role::Setup, cmd, Some(accept::DEFAULT_TIMEOUT), &log) {
            Ok(f) if f.success() => {}
            Ok(f) => {
                let code = crate::agent::adapter::exit_code(f.outcome);
                let note = task.runner().unseen_program_note(code, cmd, &f.tail, task.base_env());
                let note = note.map(|n| format!(": {n}")).unwrap_or_default();
                return Err(Failure::failed(format!(
                    "setup command `{cmd}` failed: {}{note}",
                    super::failure::ended(&f)
                ))
                .with_tail(f.tail)
                .interrupted_if(f.outcome == Outcome::Cancelled));
            }
            Err(CommandError::OverLimit(over)) => {
                return Err(Failure::over_limit(&format!("the setup command `{cmd}`"), &over));
            }
            Err(e) => return Err(Failure::failed(format!("setup command `{cmd}` could not run: {e}"))),
        }
    }
    task.workspace_mut().setup_done().map_err(|e| Failure::failed(format!("cannot read what setup left: {e}")))
}

/// Places the project's `instructions` file in the workspace under the
/// name the first agent reads ([`crate::agent::Agent::instructions_file`]),
/// unless the project has that file.
pub fn place_instructions(task: &mut TaskContext<'_>) {
    let project = &task.runner().plan.project;
    if let Some(instr) = &project.config.instructions {
        let file = task.agent().instructions_file().to_owned();
        if !project.root.join(&file).exists()
            && let Ok(bytes) = std::fs::read(project.root.join(&instr.value))
        {
            let _ = task.workspace_mut().place(&file, &bytes);
        }
    }
}
