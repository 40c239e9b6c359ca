//! Turning a resolved agent into a command line and an environment: the
//! agent a task names (a built-in, or a custom command of `cassist.kdl`),
//! where its program is, the placeholders of a custom command, and the
//! environment allowlist: an agent gets the common variables below, its
//! own, and the `CASSIST_*` ones of its run, never the whole of cassist's
//! environment.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use cassist_core::spec::{CustomAgentDef, ProjectConfig};

use super::Agent;
use super::custom::Command;

/// Variables every agent gets from cassist's environment when set.
pub const COMMON_ENV: &[&str] = &["HOME", "PATH", "USER", "LOGNAME", "LANG", "TERM", "TMPDIR", "TZ"];

/// One agent a task may start: a built-in of [`super::BUILTINS`] or a
/// custom command. It is the [`Agent`] it holds.
#[derive(Debug, Clone)]
pub enum Invocation {
    Builtin(&'static dyn Agent),
    Custom(Command),
}

impl std::ops::Deref for Invocation {
    type Target = dyn Agent;

    fn deref(&self) -> &(dyn Agent + 'static) {
        match self {
            Invocation::Builtin(agent) => *agent,
            Invocation::Custom(command) => command,
        }
    }
}

/// The invocation of one (non-`try`) agent: a custom agent of
/// `cassist.kdl`, else the built-in of that name.
pub fn invocation(config: &ProjectConfig, name: &str) -> Option<Invocation> {
    if let Some(agent) = config.agents.get(name) {
        return match &agent.def {
            CustomAgentDef::Command { argv } => Some(Invocation::Custom(Command {
                name: name.to_owned(),
                argv: argv.clone(),
                pass_env: agent.pass_env.clone(),
                allow: agent.allow.clone(),
            })),
            CustomAgentDef::Try(_) => None,
        };
    }
    super::builtin(name).map(Invocation::Builtin)
}

/// Where the program of `agent` is, looked up like the workspace will: a
/// path with `/` relative to the project root, else on `PATH`.
pub fn locate(agent: &dyn Agent, root: &Path, path_var: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    let program = agent.program();
    if program.is_empty() {
        return None;
    }
    if program.contains('/') {
        let p = if Path::new(program).is_absolute() { PathBuf::from(program) } else { root.join(program) };
        return p.is_file().then_some(p);
    }
    super::which(program, path_var)
}

/// Values for the placeholders of a command.
pub struct Placeholders<'a> {
    pub prompt: &'a str,
    pub prompt_file: &'a Path,
    pub workdir: &'a Path,
    pub task: &'a str,
    /// The model asked for; empty for the CLI's own default.
    pub model: &'a str,
}

/// Fills `{prompt}`, `{prompt_file}`, `{workdir}`, `{task}` and `{model}` in each
/// argument (each stays one argument: no shell is involved).
pub fn fill_argv(argv: &[String], ph: &Placeholders<'_>) -> Vec<OsString> {
    argv.iter()
        .map(|a| {
            OsString::from(cassist_core::template::fill(a, |name| {
                Some(match name {
                    "prompt" => ph.prompt.to_owned(),
                    "prompt_file" => ph.prompt_file.display().to_string(),
                    "workdir" => ph.workdir.display().to_string(),
                    "task" => ph.task.to_owned(),
                    "model" => ph.model.to_owned(),
                    _ => return None,
                })
            }))
        })
        .collect()
}

/// The environment of an agent: the common allowlist and `LC_*` from
/// cassist's own environment, the agent's own variables, then `extra`
/// (the `CASSIST_*` values). Nothing else of the parent leaks through.
pub fn environment(pass_env: &[&str], extra: &[(String, OsString)]) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = Vec::new();
    for (k, v) in std::env::vars_os() {
        let Some(key) = k.to_str() else { continue };
        if cassist_sandbox::process::NEVER_PASSED.contains(&key) {
            continue;
        }
        if COMMON_ENV.contains(&key) || key.starts_with("LC_") || pass_env.contains(&key) {
            env.push((k, v));
        }
    }
    for (k, v) in extra {
        env.retain(|(ek, _)| ek != k.as_str());
        env.push((k.into(), v.clone()));
    }
    env.sort();
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_placeholders_without_shell_quoting() {
        let ph = Placeholders {
            prompt: "a 'quoted' \"prompt\" $HOME",
            prompt_file: Path::new("/tmp/p.md"),
            workdir: Path::new("/w"),
            task: "t1",
            model: "m-2",
        };
        let argv = fill_argv(
            &[
                "x".into(),
                "--msg={prompt}".into(),
                "{prompt_file}".into(),
                "{workdir}/{task}".into(),
                "-m{model}".into(),
            ],
            &ph,
        );
        assert_eq!(
            argv,
            vec![
                OsString::from("x"),
                OsString::from("--msg=a 'quoted' \"prompt\" $HOME"),
                OsString::from("/tmp/p.md"),
                OsString::from("/w/t1"),
                OsString::from("-mm-2"),
            ]
        );
    }
}
