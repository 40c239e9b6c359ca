//! From task files to a [`Plan`]: discovery, validation across files,
//! context resolution, the DAG and the input hashes.
//!
//! [`load()`] reads and checks (`load.rs`), [`plan()`] hashes and decides each
//! task's state (`hashing.rs`); a task's effective settings are in
//! `settings.rs`, the helpers that spread work over the cores in `par.rs`.

pub mod again;
pub mod context;
pub mod dag;
pub mod discover;
pub mod filehash;
pub mod hash;
mod hashing;
mod load;
pub mod overlap;
mod par;
mod settings;
pub mod state;
#[cfg(test)]
mod tests;
pub mod why;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::project::Project;
use crate::spec::cache::SpecCache;
use crate::spec::diag::SpecDiagnostic;
use crate::spec::{Kind, SandboxLevel, SourceFile, Task};
use context::ResolvedFile;
use hash::InputKey;
pub use hashing::{HashError, Hashing, plan, unusable_warning};
pub use load::load;
pub use par::{par_chunks, timing};
pub use settings::{
    DEFAULT_AGENT, DEFAULT_MAX_ITERATIONS, DEFAULT_TIMEOUT, effective_sandbox, resolve_agent, resolve_model,
};

/// What the command line adds to the task files.
#[derive(Debug, Default, Clone)]
pub struct LoadOptions {
    /// Files and folders given on the command line (default: `tasks/`).
    pub paths: Vec<PathBuf>,
    /// `--agent`.
    pub agent: Option<String>,
    /// `--model`.
    pub model: Option<String>,
    /// Tasks given inline (by the MCP server), each a task file's text
    /// named [`INLINE_SOURCE`]: read, checked and planned with the task
    /// files, after them.
    pub inline: Vec<Arc<SourceFile>>,
    /// No `tasks/` folder is as no task file (the MCP server dispatches
    /// inline tasks in any project).
    pub tasks_optional: bool,
}

/// The source name of inline tasks: they are never written to
/// `cassist.lock` (the committed record of task files), only to the store.
pub const INLINE_SOURCE: &str = "<mcp>";

/// A task's resolved context and reference files.
pub type TaskFiles = (Vec<ResolvedFile>, Vec<ResolvedFile>);

/// Everything read and validated, before hashing.
pub struct Loaded {
    pub project: Project,
    /// Tasks in run order.
    pub tasks: Vec<Task>,
    /// Per task (same order): resolved context and reference files.
    pub files: Vec<TaskFiles>,
    pub template: (String, String),
    /// Warnings to show even when everything is valid.
    pub warnings: Vec<SpecDiagnostic>,
    pub agent_override: Option<String>,
    /// `--model`.
    pub model_override: Option<String>,
    /// Parsed task files, saved by [`plan`] (`check` writes nothing).
    pub spec_cache: SpecCache,
}

/// A task's state against the cache: `up-to-date` (its recorded run's
/// after-state is the project now: nothing to do), `replay` (a stored run
/// of the same inputs: its change is applied again, no agent), `verify`
/// (only files it reads or the agent's version changed, and its change is
/// still in the tree: its acceptance commands decide, no agent), `stale`
/// (an explore/review task whose files changed: its findings are kept
/// until a dependent runs), `run` (the agent runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    UpToDate,
    Replay,
    Verify,
    Stale,
    Run,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::UpToDate => "up-to-date",
            State::Replay => "replay",
            State::Verify => "verify",
            State::Stale => "stale",
            State::Run => "run",
        }
    }
}

/// One task, ready to run.
#[derive(Debug, Clone)]
pub struct PlannedTask {
    pub task: Task,
    pub agent: String,
    /// The model the agent is told to use; `None`: the CLI's own default.
    pub model: Option<String>,
    pub sandbox: SandboxLevel,
    pub timeout: Duration,
    pub max_iterations: u32,
    pub max_cost: Option<f64>,
    pub context_files: Vec<String>,
    pub reference_files: Vec<String>,
    pub key: InputKey,
    pub hash: String,
    /// What the task asks, without what the tree and the machine bring
    /// ([`hashing::recipe_hash`]): equal to its lock line's, a change of
    /// its files alone is re-verified rather than run again. Empty until
    /// needed ([`Hashing::fill_recipe`]).
    pub recipe: String,
    /// The hash of its dependencies' outputs (`None`: it has none, or not
    /// made yet, as `recipe`).
    pub dependencies: Option<String>,
    pub state: State,
    /// What stands behind the state (the entry to replay, the recorded
    /// patch, an unusable entry).
    pub cached: state::Cached,
    /// The agent's turn cap when set by the caller (the MCP server's
    /// dispatches); else read-only kinds get the adapters' own cap.
    pub turn_cap: Option<u32>,
    /// Why it runs its agent though its cache would spare it (state
    /// `run`): forced, or a stale task refreshed ([`again`]). Hashing it
    /// again during a run leaves this as it is.
    pub again: Option<again::Again>,
}

/// Tasks in run order with their hashes.
pub struct Plan {
    pub project: Project,
    pub tasks: Vec<PlannedTask>,
    pub template: String,
    pub template_name: String,
    pub warnings: Vec<SpecDiagnostic>,
    /// Files read and hashed while planning (the rest came from the cache).
    pub files_hashed: usize,
    /// `cassist.lock` as it was when planning.
    pub lock: crate::lock::Lock,
    pub store: crate::store::Store,
    /// What every task's key shares (for hashing again during a run).
    pub hashing: Hashing,
    /// The file-hash cache, kept for hashing again during a run (saved by
    /// [`Plan::save_caches`]).
    pub file_cache: std::sync::Mutex<filehash::FileHashCache>,
    /// Which paths each recorded patch wrote (saved by
    /// [`Plan::save_caches`]).
    pub output_index: std::sync::Mutex<state::OutputIndex>,
    /// The store entries the command layer fetched from the remote cache
    /// for this plan (by input hash): a task replaying one is
    /// `replay (remote)`, and `--locked` replays it as it would a locked
    /// one (a trusted key signed it).
    pub remote_entries: std::collections::HashSet<String>,
    /// The paths the replays this plan predicts write, each with the place
    /// in run order of the first task whose replay writes it: when a run
    /// hashes a task again, an output of it that such an earlier replay
    /// wrote is cassist's doing, not the user's edit (see
    /// [`state::state_of`]).
    pub replayed_paths: HashMap<String, usize>,
}

impl Plan {
    pub fn get(&self, name: &str) -> Option<&PlannedTask> {
        self.tasks.iter().find(|t| t.task.name == name)
    }

    /// A diagnostic for an unknown task name given on the command line.
    pub fn unknown_task(&self, name: &str) -> SpecDiagnostic {
        let names: Vec<&str> = self.tasks.iter().map(|t| t.task.name.as_str()).collect();
        SpecDiagnostic::error("unknown-task", format!("no task named `{name}`")).help(
            match crate::spec::diag::did_you_mean(name, names.iter().copied()) {
                Some(s) => format!("did you mean `{s}`?"),
                None => "`cassist plan` lists the tasks".to_owned(),
            },
        )
    }

    /// The prompt of `t`: the template filled with its goal, context,
    /// scope, constraints and acceptance, the project's test commands and
    /// instruction files, and the findings of its explore/review
    /// dependencies.
    pub fn render_prompt(&self, t: &PlannedTask, summaries: &[(String, String)]) -> String {
        self.render_prompt_with(t, summaries, &t.context_files)
    }

    /// The prompt with another list of context files (a part of a split
    /// task names only what it needs).
    pub fn render_prompt_with(&self, t: &PlannedTask, summaries: &[(String, String)], context: &[String]) -> String {
        let tests = self.project.test_commands();
        let instructions = self.project.instruction_files();
        let acceptance: Vec<String> = t.task.acceptance.iter().map(|a| a.run.value.clone()).collect();
        crate::prompt::PromptParts {
            task: &t.task.name,
            kind: t.task.kind,
            goal: &t.task.goal,
            context_files: context,
            instruction_files: &instructions,
            dependency_summaries: summaries,
            scope: &t.key.spec.scope,
            constraints: &t.task.constraints,
            acceptance: &acceptance,
            test_commands: &tests,
            reference_files: &t.reference_files,
        }
        .render(&self.template)
    }

    /// The explore/review tasks `t` depends on: their findings go into its
    /// prompt.
    pub fn summary_dependencies(&self, t: &PlannedTask) -> Vec<&PlannedTask> {
        t.key.spec.depends_on.iter().filter_map(|d| self.get(d)).filter(|d| d.task.kind.is_read_only()).collect()
    }
}

impl Plan {
    /// Writes the caches kept in memory during a run.
    pub fn save_caches(&self) {
        if let Ok(mut c) = self.file_cache.lock() {
            let _ = c.save();
        }
        if let Ok(mut c) = self.output_index.lock() {
            let _ = c.save(&self.lock);
        }
    }

    /// Whether `t` replays an entry fetched from the remote cache.
    pub fn from_remote(&self, t: &PlannedTask) -> bool {
        t.state == State::Replay && t.cached.entry.as_ref().is_some_and(|e| self.remote_entries.contains(e))
    }

    /// The outputs of the change a lock line records, in the project as it
    /// is now: each path with its content hash (`None`: absent), through
    /// the file-hash cache. `None` when neither the line nor the store says
    /// which files they are.
    pub fn outputs_now(&self, line: &crate::lock::LockEntry) -> Option<crate::store::Outputs> {
        self.outputs_through(line, &state::Overlay::default())
    }

    /// [`outputs_now`](Self::outputs_now) with `overlay`'s paths taken as
    /// it lays them.
    pub fn outputs_through(
        &self,
        line: &crate::lock::LockEntry,
        overlay: &state::Overlay,
    ) -> Option<crate::store::Outputs> {
        // The file cache first, then the index, as `rehash` takes them.
        let mut cache = self.file_cache.lock().unwrap_or_else(|e| e.into_inner());
        let mut index = self.output_index.lock().unwrap_or_else(|e| e.into_inner());
        let listed: Vec<String>;
        let paths = if line.output_files.is_empty() {
            index.paths(&self.store, &line.before, &line.patch)?
        } else {
            listed = line.output_files.keys().cloned().collect();
            &listed
        };
        Some(state::outputs_now(&self.project.root, &mut cache, paths, overlay))
    }
}

/// Loads and plans without agent versions (every one `None`): for tests
/// and tools that start no agent. Commands ask the CLIs for their versions
/// first (see [`Loaded::builtin_agents`]).
pub fn load_and_plan(cwd: &Path, opts: &LoadOptions) -> Result<Plan, Vec<SpecDiagnostic>> {
    let loaded = load(cwd, opts)?;
    plan(loaded, HashMap::new()).map_err(|d| vec![d])
}

impl PlannedTask {
    pub fn kind(&self) -> Kind {
        self.task.kind
    }

    /// Given inline (MCP), not by a task file: recorded in the store only.
    pub fn inline(&self) -> bool {
        self.task.source.name == INLINE_SOURCE
    }

    /// A read-only kind (`explore`, `review`) or sandbox: it may change no
    /// file, and any change it makes is rejected.
    pub fn read_only(&self) -> bool {
        self.task.kind.is_read_only() || self.sandbox == SandboxLevel::ReadOnly
    }

    /// Whether the task runs the project's `test` commands (after its
    /// acceptance) and `build` (after integrating its change): only a task
    /// that may change files does. The runner asks this before running
    /// them, and the input hash holds those commands only when it is true
    /// (`setup` runs for every task and is in every hash).
    pub fn runs_project_checks(&self) -> bool {
        !self.read_only()
    }

    /// Its state as `plan` and `explain` show it: `replay (remote)` for a
    /// replay of an entry just fetched from the remote cache.
    pub fn shown_state(&self) -> &'static str {
        match self.state {
            State::Replay if self.cached.remote => "replay (remote)",
            s => s.as_str(),
        }
    }

    /// This task's end before anything happened: `skipped`, nothing done.
    pub fn end(&self) -> crate::event::TaskEnd {
        let location = crate::event::Location {
            file: self.task.source.name.clone(),
            line: self.task.source.line_col(self.task.node_span.offset()).0,
        };
        let mut end = crate::event::TaskEnd::new(&self.task.name, &self.hash, &self.agent, location);
        end.model = self.model.clone();
        end.remote = self.cached.remote;
        end
    }

    /// This task, skipped for `reason`.
    pub fn skipped(&self, reason: impl Into<String>) -> crate::event::TaskEnd {
        self.end().ended(crate::event::TaskState::Skipped, reason)
    }
}
