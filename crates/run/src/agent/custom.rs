//! A custom agent of `cassist.kdl`: any command, with placeholders in its
//! arguments ([`super::invoke::fill_argv`]) and the variables its
//! `pass-env` lists. It may report through its result file; cassist reads
//! nothing else of its output.

use std::path::{Path, PathBuf};

use super::Agent;
use super::adapter::{AdapterInput, AgentOutput};
use cassist_sandbox::process::Outcome;

/// A custom command agent.
#[derive(Debug, Clone)]
pub struct Command {
    /// Its name in `cassist.kdl`.
    pub name: String,
    /// Its command, placeholders unfilled.
    pub argv: Vec<String>,
    /// Its `pass-env` variables.
    pub pass_env: Vec<String>,
    /// Its `allow` hosts: its model API, which it may reach from its
    /// network namespace.
    pub allow: Vec<String>,
}

impl Agent for Command {
    fn name(&self) -> &str {
        &self.name
    }

    fn program(&self) -> &str {
        self.argv.first().map_or("", String::as_str)
    }

    /// The user's own command: cassist cannot install it.
    fn install_line(&self) -> Option<&str> {
        None
    }

    /// Not asked: a command need not know `--version`, and its version is
    /// not part of the input hash.
    fn version(&self, _program: &Path) -> Option<String> {
        None
    }

    fn api_hosts(&self) -> Vec<String> {
        self.allow.clone()
    }

    fn pass_env(&self) -> Vec<&str> {
        self.pass_env.iter().map(String::as_str).collect()
    }

    fn makes_state_dirs(&self) -> bool {
        false
    }

    /// Its command as written: the task's flags are the user's to put in
    /// it (`{model}`, say).
    fn argv(&self, _input: &AdapterInput<'_>) -> Vec<String> {
        self.argv.clone()
    }

    /// The absolute paths among its arguments (its program, a script).
    fn named_paths(&self) -> Vec<PathBuf> {
        self.argv.iter().filter(|a| a.starts_with('/')).map(PathBuf::from).collect()
    }

    fn parse(&self, _text: &str, _outcome: Outcome, _io: &Path) -> Option<AgentOutput> {
        None
    }
}
