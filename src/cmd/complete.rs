//! Shell completions that know the project: `cassist completions SHELL`
//! prints a script that asks cassist itself what to complete (clap_complete's
//! dynamic engine, behind `CASSIST_COMPLETE`), so task names complete after
//! `prompt`, `explain` and `--filter`, from the task files of the folder the
//! shell is in.

use std::ffi::OsString;

use clap::CommandFactory;
use clap_complete::engine::{ArgValueCandidates, CompletionCandidate};
use clap_complete::env::{CompleteEnv, Shells};

use super::{Error, Result};
use crate::cli::Cli;

/// The variable the completion scripts set when they call cassist back.
const VAR: &str = "CASSIST_COMPLETE";

/// Answers a completion request of a shell (when `CASSIST_COMPLETE` is
/// set) and exits; returns at once otherwise.
pub fn answer_shell() {
    if std::env::var_os(VAR).is_none() {
        return;
    }
    CompleteEnv::with_factory(command).var(VAR).complete();
}

/// The script for `shell` that registers the completions of `cassist`.
pub fn print_script(shell: clap_complete::Shell) -> Result {
    let name = shell.to_string();
    let shells = Shells::builtins();
    let completer =
        shells.completer(&name).ok_or_else(|| Error::Input(format!("no completions for the shell `{name}`")))?;
    let mut buf = Vec::new();
    completer
        .write_registration(VAR, "cassist", "cassist", "cassist", &mut buf)
        .map_err(|e| Error::Internal(format!("cannot write the completion script: {e}")))?;
    cassist_core::out!("{}", String::from_utf8_lossy(&buf));
    Ok(())
}

/// The command line, with task names offered where a task is named.
fn command() -> clap::Command {
    // `mut_arg` moves the argument last: `paths` is moved after `task`
    // again, so that the positionals keep their order.
    let task_then_paths =
        |c: clap::Command| c.mut_arg("task", |a| a.add(ArgValueCandidates::new(task_names))).mut_arg("paths", |a| a);
    Cli::command()
        .mut_subcommand("prompt", task_then_paths)
        .mut_subcommand("explain", task_then_paths)
        .mut_subcommand("run", |c| c.mut_arg("filter", |a| a.add(ArgValueCandidates::new(task_names))))
}

/// The names of the tasks under the project of the current folder, or of
/// the `-C DIR` on the line being completed (`tasks/`), read as far as the
/// files allow: a task file with an error elsewhere still names its tasks.
/// Nothing is written.
fn task_names() -> Vec<CompletionCandidate> {
    let Ok(here) = std::env::current_dir() else { return Vec::new() };
    // The line being completed follows `--` (`cassist -- cassist -C DIR prompt …`).
    let line: Vec<OsString> = std::env::args_os().skip_while(|a| a != "--").skip(1).collect();
    let cwd = match dir_option(&line) {
        Some(dir) => here.join(dir),
        None => here,
    };
    let root = cassist_core::project::find_root(&cwd);
    let Ok(files) = cassist_core::plan::discover::task_files(&cwd, &root, &[]) else { return Vec::new() };
    let mut names = Vec::new();
    for path in files {
        let Ok(src) = cassist_core::spec::read_source(&path, path.display().to_string()) else { continue };
        let mut diags = cassist_core::spec::Diagnostics::default();
        for task in cassist_core::spec::task::parse_task_file(&src, &mut diags).unwrap_or_default() {
            let help = task.goal.split_whitespace().collect::<Vec<_>>().join(" ");
            let help = cassist_core::text::truncate(&help, 60).into_owned();
            names.push(CompletionCandidate::new(OsString::from(task.name)).help(Some(help.into())));
        }
    }
    names
}

/// The last `-C DIR` (or `-CDIR`, `-C=DIR`) of a command line.
fn dir_option(line: &[OsString]) -> Option<std::path::PathBuf> {
    let mut dir = None;
    for (i, arg) in line.iter().enumerate() {
        let Some(arg) = arg.to_str() else { continue };
        if arg == "--" {
            break;
        }
        if arg == "-C" {
            dir = line.get(i + 1).map(std::path::PathBuf::from);
        } else if let Some(rest) = arg.strip_prefix("-C") {
            dir = Some(std::path::PathBuf::from(rest.trim_start_matches('=')));
        }
    }
    dir
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_folder_of_dash_c_is_found_on_the_line() {
        let line = |args: &[&str]| args.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        let dir = |args: &[&str]| super::dir_option(&line(args)).map(|p| p.display().to_string());
        assert_eq!(dir(&["cassist", "-C", "demo", "prompt", "add"]), Some("demo".into()));
        assert_eq!(dir(&["cassist", "-Cdemo", "prompt"]), Some("demo".into()));
        assert_eq!(dir(&["cassist", "-C=demo", "prompt"]), Some("demo".into()));
        assert_eq!(dir(&["cassist", "prompt", "add"]), None);
    }

    /// The command line with its completers is still a valid one (clap
    /// checks every subcommand when completing, not only the one run).
    #[test]
    fn the_completing_command_line_is_valid() {
        super::command().debug_assert();
    }
}
