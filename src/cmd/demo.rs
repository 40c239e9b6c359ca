//! `cassist demo [DIR]`: the bundled demo written into a new folder and
//! run there, then where it is and what to try next. The demo's files are
//! embedded in the binary (a unit test keeps them equal to the
//! repository's), so an installed `cassist` needs no checkout.

use std::path::{Path, PathBuf};

use super::{Error, Result};
use crate::cli::{RunArgs, TaskArgs};
use crate::report::Output;

/// The demo, by its path in the demo folder (the same as in this
/// repository): the config with the demo agent, the three tasks, the small
/// Python project they change, and the scripted agent.
pub const FILES: &[(&str, &[u8])] = &[
    ("cassist.kdl", include_bytes!("../../cassist.kdl")),
    ("tasks/survey.kdl", include_bytes!("../../tasks/survey.kdl")),
    ("tasks/text.kdl", include_bytes!("../../tasks/text.kdl")),
    ("fixtures/demo/AGENTS.md", include_bytes!("../../fixtures/demo/AGENTS.md")),
    ("fixtures/demo/textkit/__init__.py", include_bytes!("../../fixtures/demo/textkit/__init__.py")),
    ("fixtures/demo/textkit/text.py", include_bytes!("../../fixtures/demo/textkit/text.py")),
    ("fixtures/demo/tests/__init__.py", include_bytes!("../../fixtures/demo/tests/__init__.py")),
    ("fixtures/demo/tests/test_text.py", include_bytes!("../../fixtures/demo/tests/test_text.py")),
    ("fixtures/agents/demo-agent.py", include_bytes!("../../fixtures/agents/demo-agent.py")),
];

pub fn run(cwd: &Path, given: &Path, out: &Output) -> Result {
    let target = cwd.join(given);
    let non_empty = match std::fs::read_dir(&target) {
        Ok(mut entries) => entries.next().is_some(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => true,
        Err(e) => return Err(Error::Input(format!("cannot use {}: {e}", given.display()))),
    };
    if non_empty {
        return Err(Error::Input(format!(
            "{} already exists and is not empty: the demo needs a new folder (`cassist demo OTHER-DIR`)",
            given.display()
        )));
    }
    write_files(&target)
        .map_err(|e| Error::Internal(format!("cannot write the demo into {}: {e}", given.display())))?;
    if !out.quiet {
        cassist_core::errln!("wrote the bundled demo into {}; running `cassist run tasks/` there", given.display());
    }
    std::env::set_current_dir(&target)
        .map_err(|e| Error::Internal(format!("cannot enter {}: {e}", given.display())))?;
    let args = RunArgs {
        tasks: TaskArgs { paths: vec![PathBuf::from("tasks")], ..TaskArgs::default() },
        ..RunArgs::default()
    };
    let result = super::run::run(&target, &args, out);
    if !out.quiet {
        cassist_core::outln!("{}", next_steps(given, result.is_ok()));
    }
    result
}

/// Every demo file under `dir` (created when missing).
fn write_files(dir: &Path) -> std::io::Result<()> {
    for (rel, bytes) in FILES {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, bytes)?;
        if rel.ends_with(".py") && rel.starts_with("fixtures/agents/") {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    Ok(())
}

/// Where the demo is and what to try next.
fn next_steps(dir: &Path, passed: bool) -> String {
    let shown = dir.display().to_string();
    let cd = if shown.contains(char::is_whitespace) { format!("cd '{shown}'") } else { format!("cd {shown}") };
    let outcome = if passed {
        "The demo ran: the agent's changes are in fixtures/demo/ (uncommitted)."
    } else {
        "The demo did not pass; what happened is above."
    };
    format!(
        "\n{outcome} The demo is in {shown}. Try next:\n\
         \x20 {cd}\n\
         \x20 cassist plan                  # every task up to date: an unchanged task never runs twice\n\
         \x20 cassist prompt add-slugify    # the prompt the agent got, the survey's findings included\n\
         \x20 cassist explain add-slugify   # the inputs behind its hash: why it would run again\n\
         \x20 echo '# a note' >> fixtures/demo/tests/test_text.py\n\
         \x20 cassist run                   # a hand edit costs an acceptance run, not an agent: verified\n\
         \x20 cassist run tasks/ --agent claude   # the same tasks on Claude Code (or codex, droid, gemini)\n\
         Every prompt, transcript, review and patch is under .cassist/runs/."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The embedded demo is the repository's: same files, same bytes, and
    /// no file of `tasks/` or `fixtures/demo/` left out.
    #[test]
    fn the_embedded_demo_equals_the_repository_files() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        for (rel, bytes) in FILES {
            let on_disk = std::fs::read(repo.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
            assert!(on_disk == *bytes, "{rel} changed since this binary was built: rebuild");
        }
        let mut in_repo = Vec::new();
        for dir in ["tasks", "fixtures/demo"] {
            for entry in cassist_core::paths::project_walker(&repo.join(dir), true) {
                if entry.file_type().is_some_and(|t| t.is_file()) {
                    let rel = entry.path().strip_prefix(repo).unwrap().to_string_lossy().into_owned();
                    in_repo.push(rel);
                }
            }
        }
        for rel in &in_repo {
            assert!(FILES.iter().any(|(f, _)| f == rel), "{rel} is part of the demo but not embedded in demo::FILES");
        }
    }

    #[test]
    fn the_next_steps_name_the_folder_and_the_commands() {
        let text = next_steps(Path::new("my demo"), true);
        for want in ["in my demo", "cd 'my demo'", "cassist plan", "cassist prompt add-slugify", "cassist explain"] {
            assert!(text.contains(want), "{want}: {text}");
        }
    }
}
