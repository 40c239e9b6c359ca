//! A task's effective settings: what it names itself, else what the
//! command line gives, else the `defaults` of `cassist.kdl`, else the
//! built-in defaults; and the parts of its input key they make.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use super::context::ResolvedFile;
use super::hash::{self, AcceptanceKey, AgentKey, InputKey, SpecKey};
use super::{PlannedTask, State, state};
use crate::spec::config::{CustomAgentDef, ProjectConfig};
use crate::spec::{SandboxLevel, Task};

/// Built-in defaults when neither the task nor `defaults` say.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);
pub const DEFAULT_MAX_ITERATIONS: u32 = 3;
/// The agent of a task when neither it, `--agent`/`CASSIST_AGENT` nor
/// `defaults` name one: a built-in agent.
pub const DEFAULT_AGENT: &str = "claude";

/// A task's agent: its own, else `--agent`/`CASSIST_AGENT`, else
/// `defaults.agent` of `cassist.kdl`, else [`DEFAULT_AGENT`].
pub fn resolve_agent(task: &Task, agent_override: Option<&str>, config: &ProjectConfig) -> String {
    task.agent
        .as_ref()
        .map(|a| a.value.clone())
        .or_else(|| agent_override.map(str::to_owned))
        .or_else(|| config.defaults.agent.as_ref().map(|a| a.value.clone()))
        .unwrap_or_else(|| DEFAULT_AGENT.to_owned())
}

/// A task's model: its own, else `--model`, else `defaults.model` of
/// `cassist.kdl`, else none (the agent CLI's own default).
pub fn resolve_model(task: &Task, model_override: Option<&str>, config: &ProjectConfig) -> Option<String> {
    task.model
        .as_ref()
        .map(|m| m.value.clone())
        .or_else(|| model_override.map(str::to_owned))
        .or_else(|| config.defaults.model.as_ref().map(|m| m.value.clone()))
}

/// The sandbox a task runs under: read-only kinds are forced read-only; no
/// trust means read-only; otherwise the task's level, else the trust (never
/// `full` unless asked for).
pub fn effective_sandbox(task: &Task, trust: Option<SandboxLevel>) -> SandboxLevel {
    let Some(trust) = trust else { return SandboxLevel::ReadOnly };
    if task.kind.is_read_only() {
        return SandboxLevel::ReadOnly;
    }
    match &task.sandbox {
        Some(s) => s.value.min(trust),
        None => trust.min(SandboxLevel::WorkspaceWrite),
    }
}

/// What of agent `name` goes into a task's input key: its version as its
/// CLI reports it (`versions`), and for a custom agent of the config its
/// command or failover list and the variables it is passed.
pub(super) fn agent_key(config: &ProjectConfig, name: &str, versions: &HashMap<String, Option<String>>) -> AgentKey {
    let mut key = AgentKey {
        name: name.to_owned(),
        version: versions.get(name).cloned().flatten(),
        command: Vec::new(),
        pass_env: Vec::new(),
        try_agents: Vec::new(),
    };
    if let Some(custom) = config.agents.get(name) {
        key.pass_env = custom.pass_env.clone();
        match &custom.def {
            CustomAgentDef::Command { argv } => key.command = argv.clone(),
            CustomAgentDef::Try(list) => key.try_agents = list.iter().map(|s| s.value.clone()).collect(),
        }
    }
    key
}

/// The `network` input of a task whose agent is `agent`: the project's
/// allow-list and the `allow` hosts of the agents `agent` may run (itself,
/// or the members of its `try` chain); `None` when there are neither.
pub(super) fn network_input(config: &ProjectConfig, agent: &str) -> Option<hash::Input> {
    let sorted = |hosts: &mut dyn Iterator<Item = &String>| -> Vec<String> {
        let set: BTreeSet<String> = hosts.cloned().collect();
        set.into_iter().collect()
    };
    let candidates = config.candidates(agent);
    let mut agent_hosts = candidates.iter().filter_map(|c| config.agents.get(c)).flat_map(|a| a.allow.iter());
    let key = hash::NetworkKey {
        allow: config.network.as_ref().map(|n| sorted(&mut n.allow.iter())),
        agent: sorted(&mut agent_hosts),
    };
    if key.allow.is_none() && key.agent.is_empty() {
        return None;
    }
    Some(hash::Input { kind: "network", name: "allow".to_owned(), hash: hash::hash_json(&key) })
}

/// The `sandbox-paths` input of every task: the paths of `sandbox { read
/// …; hide … }` as written; `None` when there are none.
pub(super) fn sandbox_paths_input(config: &ProjectConfig) -> Option<hash::Input> {
    if config.sandbox.is_empty() {
        return None;
    }
    let sorted = |v: &[crate::spec::Spanned<String>]| -> Vec<String> {
        let set: BTreeSet<String> = v.iter().map(|s| s.value.clone()).collect();
        set.into_iter().collect()
    };
    let key = hash::SandboxPathsKey { read: sorted(&config.sandbox.read), hide: sorted(&config.sandbox.hide) };
    Some(hash::Input { kind: "sandbox-paths", name: "read/hide".to_owned(), hash: hash::hash_json(&key) })
}

/// The normalized spec of a task, with its effective settings.
pub(super) fn spec_key(task: &Task, timeout: Duration, max_iterations: u32, max_cost: Option<f64>) -> SpecKey {
    let sorted = |v: &[crate::spec::Spanned<String>]| -> Vec<String> {
        let set: BTreeSet<String> = v.iter().map(|s| s.value.clone()).collect();
        set.into_iter().collect()
    };
    SpecKey {
        name: task.name.clone(),
        goal: task.goal.clone(),
        kind: task.kind.to_string(),
        timeout_ms: timeout.as_millis() as u64,
        max_iterations,
        max_cost,
        context: sorted(&task.context),
        scope: sorted(&task.scope),
        reference: sorted(&task.reference),
        constraints: task.constraints.clone(),
        acceptance: task
            .acceptance
            .iter()
            .map(|a| AcceptanceKey { run: a.run.value.clone(), timeout_ms: a.timeout.map(|d| d.as_millis() as u64) })
            .collect(),
        depends_on: sorted(&task.depends_on),
    }
}

/// `task` with its effective settings, its context and reference files
/// (`ctx`, `refs`) and the spec part of its input key: not hashed yet, its
/// state `run` until it is.
pub(super) fn planned_task(
    task: Task,
    ctx: &[ResolvedFile],
    refs: &[ResolvedFile],
    agent_override: Option<&str>,
    model_override: Option<&str>,
    config: &ProjectConfig,
) -> PlannedTask {
    let agent = resolve_agent(&task, agent_override, config);
    let model = resolve_model(&task, model_override, config);
    let sandbox = effective_sandbox(&task, config.trust.map(|t| t.level));
    let timeout = task.timeout.or(config.defaults.timeout).unwrap_or(DEFAULT_TIMEOUT);
    let max_iterations = task.max_iterations.or(config.defaults.max_iterations).unwrap_or(DEFAULT_MAX_ITERATIONS);
    let max_cost = task.max_cost.or(config.defaults.max_cost);
    PlannedTask {
        agent,
        model,
        sandbox,
        timeout,
        max_iterations,
        max_cost,
        context_files: ctx.iter().map(|f| f.path.clone()).collect(),
        reference_files: refs.iter().map(|f| f.path.clone()).collect(),
        key: InputKey {
            format: hash::KEY_FORMAT,
            spec: spec_key(&task, timeout, max_iterations, max_cost),
            inputs: Vec::new(),
        },
        hash: String::new(),
        recipe: String::new(),
        dependencies: None,
        state: State::Run,
        cached: state::Cached::default(),
        turn_cap: None,
        again: None,
        task,
    }
}
