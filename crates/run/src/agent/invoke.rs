//! Turning a resolved agent into a command line and an environment: custom
//! commands with `{prompt}`, `{prompt_file}`, `{workdir}`, `{task}`,
//! `{model}`;
//! failover chains; the environment allowlist (SPEC 3.3).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use cassist_core::spec::{CustomAgentDef, ProjectConfig};

/// Variables every agent gets from cassist's environment when set.
pub const COMMON_ENV: &[&str] = &["HOME", "PATH", "USER", "LOGNAME", "LANG", "TERM", "TMPDIR", "TZ"];

/// How to start one agent.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// The agent's name (a built-in, or a custom agent of cassist.kdl).
    pub name: String,
    /// argv before placeholders are filled.
    pub argv: Vec<String>,
    /// Variables passed through from cassist's environment.
    pub pass_env: Vec<String>,
    /// Whether the prompt goes on stdin (always, for custom agents too).
    pub stdin_prompt: bool,
    /// The adapter of a built-in agent.
    pub builtin: Option<super::Builtin>,
}

/// Why no agent could be started.
#[derive(Debug, Clone)]
pub struct Unavailable {
    pub agent: String,
    pub message: String,
}

/// The invocation of one (non-`try`) agent.
pub fn invocation(config: &ProjectConfig, name: &str) -> Option<Invocation> {
    if let Some(agent) = config.agents.get(name) {
        return match &agent.def {
            CustomAgentDef::Command { argv } => Some(Invocation {
                name: name.to_owned(),
                argv: argv.clone(),
                pass_env: agent.pass_env.clone(),
                stdin_prompt: true,
                builtin: None,
            }),
            CustomAgentDef::Try(_) => None,
        };
    }
    super::builtin_invocation(name)
}

/// Where the program of `inv` is, looked up like the workspace will: a
/// path with `/` relative to the project root, else on `PATH`.
pub fn locate(inv: &Invocation, root: &Path, path_var: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    let program = inv.argv.first()?;
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
pub fn environment(pass_env: &[String], extra: &[(String, OsString)]) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = Vec::new();
    for (k, v) in std::env::vars_os() {
        let Some(key) = k.to_str() else { continue };
        if cassist_sandbox::process::NEVER_PASSED.contains(&key) {
            continue;
        }
        if COMMON_ENV.contains(&key) || key.starts_with("LC_") || pass_env.iter().any(|p| p == key) {
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
