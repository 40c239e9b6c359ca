//! From loaded tasks to a [`Plan`] ([`plan`]): every file hashed once
//! through the file-hash cache, each task's input key and hash made
//! ([`Hashing`]) and its state decided against `cassist.lock` and the
//! store, with the replays predicted before it laid over the tree. During a
//! run, [`Plan::rehash`] and [`Plan::hash_inputs`] hash a task again.

use std::collections::HashMap;

use super::context::{ResolveError, ResolvedFile, Resolver, sort_unique};
use super::filehash::{self, ReadError};
use super::hash::{self, Input, ProjectKey, hash_bytes, hash_json};
use super::par::timing;
use super::settings::{agent_key, network_input, planned_task, sandbox_paths_input};
use super::{Loaded, Plan, PlannedTask, State, state};
use crate::project::Project;
use crate::spec::diag::SpecDiagnostic;

/// Why a task could not be hashed again during a run.
#[derive(Debug, thiserror::Error)]
pub enum HashError {
    /// A context or reference pattern leads outside the project.
    #[error(transparent)]
    Escapes(#[from] ResolveError),
    /// A thread panicked holding the file-hash cache.
    #[error("the file-hash cache is unusable")]
    CacheUnusable,
    /// A file of the task's inputs does not read.
    #[error(transparent)]
    Read(#[from] ReadError),
}

/// Hashes the loaded tasks into a plan. `versions` holds the version of
/// each agent of [`Loaded::builtin_agents`] as its CLI reports it (`None`:
/// not installed, or it says nothing).
pub fn plan(loaded: Loaded, versions: HashMap<String, Option<String>>) -> Result<Plan, SpecDiagnostic> {
    let Loaded { project, tasks, files, template, warnings, agent_override, model_override, mut spec_cache } = loaded;
    let config = &project.config;

    // Hash every distinct file once, in parallel, through the cache.
    let cache_path = crate::fsx::state_dir(&project.root).join("cache").join("file-hashes");
    let mut cache = filehash::FileHashCache::load(&cache_path);
    let mut unique: Vec<&ResolvedFile> = files.iter().flat_map(|(c, r)| c.iter().chain(r.iter())).collect();
    // Standing instructions: the configured file and the instruction
    // files cited in prompts (AGENTS.md, ...) change what an agent does.
    let instruction_patterns = instruction_patterns(&project);
    let instructions = resolve_instructions(&mut Resolver::new(&project.root), &instruction_patterns);
    unique.extend(instructions.iter());
    unique.sort_by(|a, b| a.path.cmp(&b.path));
    unique.dedup_by(|a, b| a.path == b.path);
    let hashes =
        cache.hash_files(&project.root, &unique).map_err(|e| SpecDiagnostic::error("read-failed", e.to_string()))?;
    let file_hash: HashMap<String, String> =
        unique.iter().zip(hashes).map(|(f, h)| (f.path.clone(), blake3::Hash::from(h).to_hex().to_string())).collect();
    let files_hashed = cache.hashed;

    timing("hash files");

    let instruction_inputs: Vec<Input> = instructions
        .iter()
        .map(|i| Input { kind: "instructions", name: i.path.clone(), hash: file_hash[i.path.as_str()].clone() })
        .collect();
    let lock = crate::lock::Lock::load(&project.root).map_err(|e| {
        SpecDiagnostic::error("bad-lock", e.to_string()).help(
            "cassist.lock is written by `cassist run`; restore it from version control, or delete it to record afresh",
        )
    })?;
    let store = crate::store::Store::open(&project.root).with_files_limit(project.config.limits.files);
    timing("read lock");
    let hashing = Hashing::new(&project, &template, versions);
    let mut planned: Vec<PlannedTask> = Vec::with_capacity(tasks.len());
    // What each planned task hands its dependents: its recorded output
    // (patch hash) when it will not run, else its input hash.
    let mut outputs: HashMap<String, String> = HashMap::new();
    // The changes of the replays predicted so far: later tasks see them, so
    // that `plan` predicts a chain of replays as `run` will do it (a
    // replayed change that alters a later task's context files changes its
    // hash).
    let mut overlay = state::Overlay::default();
    let mut output_index = state::OutputIndex::load(&project.root);
    // The paths they write, with the place in run order of the first task
    // whose replay writes each.
    let mut replayed_paths: HashMap<String, usize> = HashMap::new();
    let mut warnings = warnings;
    for (at, (task, (ctx, refs))) in tasks.into_iter().zip(files).enumerate() {
        let mut t = planned_task(task, &ctx, &refs, agent_override.as_deref(), model_override.as_deref(), config);
        let root = &project.root;
        let mut hash_file = |path: &str| cache.hash_path(root, path);
        let (instructions, context, reference) = if overlay.is_empty() {
            let file_inputs = |kind: &'static str, files: &[ResolvedFile]| -> Vec<Input> {
                files
                    .iter()
                    .map(|f| Input { kind, name: f.path.clone(), hash: file_hash[f.path.as_str()].clone() })
                    .collect()
            };
            (instruction_inputs.clone(), file_inputs("context", &ctx), file_inputs("reference", &refs))
        } else {
            let values = |v: &[crate::spec::Spanned<String>]| v.iter().map(|p| p.value.clone()).collect::<Vec<_>>();
            let context = overlay.inputs("context", &values(&t.task.context), &ctx, &file_hash, &mut hash_file);
            let reference = overlay.inputs("reference", &values(&t.task.reference), &refs, &file_hash, &mut hash_file);
            t.context_files = context.iter().map(|i| i.name.clone()).collect();
            t.reference_files = reference.iter().map(|i| i.name.clone()).collect();
            let instr =
                overlay.inputs("instructions", &instruction_patterns, &instructions, &file_hash, &mut hash_file);
            (instr, context, reference)
        };
        hashing.fill_key(config, &mut t, &instructions, context, reference, &outputs);
        hashing.fill_recipe_if_needed(config, &lock, &mut t);
        let mut view = state::View::new(&project.root, &mut cache, &overlay).after_replays(&replayed_paths, at);
        let (st, cached) = state::state_of(&lock, &store, &mut output_index, &t, &mut view);
        // What a predicted replay does to the tree, as it will merge it.
        let merged = view.take_merged();
        (t.state, t.cached) = (st, cached);
        if !overlay.is_empty() {
            t.cached.predicted = true;
            let inputs = t.key.inputs.iter().filter(|i| matches!(i.kind, "context" | "reference" | "instructions"));
            t.cached.after_replay_of =
                overlay.writers(inputs.map(|i| i.name.as_str())).into_iter().map(str::to_owned).collect();
        }
        if let Some(why) = &t.cached.unusable {
            warnings.push(unusable_warning(&t.task.name, why));
        }
        if t.state == State::Replay {
            for (path, m) in &merged {
                if *m != crate::merge::Merged::Keep {
                    replayed_paths.entry(path.clone()).or_insert(at);
                }
            }
            overlay.lay_merged(&t.task.name, merged);
        }
        let output = match (&t.cached.patch, t.state) {
            // A task to verify or stale hands on its recorded output: its
            // dependents are decided on it (should its acceptance fail and
            // its agent run, they are hashed again with the new output).
            (Some(patch), State::UpToDate | State::Replay | State::Verify | State::Stale) => patch.clone(),
            _ => t.hash.clone(),
        };
        outputs.insert(t.task.name.clone(), output);
        planned.push(t);
    }
    timing("hash tasks");
    // A stale task that a task depending on it runs its agent runs first,
    // for that task's prompt: decided here on the whole plan, as a run of
    // every task does (a run decides it again on its own tasks).
    super::again::refresh(&mut planned);
    if std::fs::create_dir_all(crate::fsx::state_dir(&project.root)).is_ok() {
        let _ = crate::fsx::ensure_state_dir(&project.root);
        let _ = cache.save();
        let _ = spec_cache.save();
        let _ = output_index.save(&lock);
    }
    Ok(Plan {
        project,
        tasks: planned,
        template: template.1,
        template_name: template.0,
        warnings,
        files_hashed,
        lock,
        store,
        hashing,
        file_cache: std::sync::Mutex::new(cache),
        output_index: std::sync::Mutex::new(output_index),
        remote_entries: Default::default(),
        replayed_paths,
    })
}

/// The warning for a store entry a task cannot use: the task then runs as
/// if there were no entry, and its run stores a new one.
pub fn unusable_warning(task: &str, why: &str) -> SpecDiagnostic {
    SpecDiagnostic::warning(
        "unusable-cache-entry",
        format!("the stored run of task `{task}` cannot be used: {why}; the task runs as if there were none"),
    )
    .help("the task's next run stores it afresh; `cassist cache clean` empties the store")
}

/// What every task's key shares.
#[derive(Debug, Clone)]
pub struct Hashing {
    pub template_name: String,
    pub template_hash: String,
    /// The project's commands and limits (for the tasks that run its
    /// tests and build).
    pub project_hash: String,
    /// The same without `test` and `build` (for the tasks that do not).
    pub project_hash_without_checks: String,
    pub versions: HashMap<String, Option<String>>,
}

impl Hashing {
    /// What the tasks of `project` share: the prompt template (name, text)
    /// and the project's commands and limits; `versions`: the agents' as
    /// their CLIs report them.
    pub fn new(project: &Project, template: &(String, String), versions: HashMap<String, Option<String>>) -> Hashing {
        let config = &project.config;
        let project_key = ProjectKey {
            setup: config.setup.clone(),
            test: project.test_commands(),
            build: config.build.clone(),
            limits: hash::LimitsKey::of(&config.limits),
        };
        let project_hash = hash_json(&project_key);
        // What a task that never runs the project's tests and build sees of
        // the project: `setup` runs for every task, `test` and `build` only
        // for those of [`PlannedTask::runs_project_checks`].
        let project_hash_without_checks = hash_json(&ProjectKey { test: Vec::new(), build: Vec::new(), ..project_key });
        Hashing {
            template_name: template.0.clone(),
            template_hash: hash_bytes(template.1.as_bytes()),
            project_hash,
            project_hash_without_checks,
            versions,
        }
    }
    /// Fills `t.key.inputs` and `t.hash` from the given file inputs and the
    /// outputs of the tasks it depends on.
    pub fn fill_key(
        &self,
        config: &crate::spec::ProjectConfig,
        t: &mut PlannedTask,
        instructions: &[Input],
        context: Vec<Input>,
        reference: Vec<Input>,
        outputs: &HashMap<String, String>,
    ) {
        let agent_key = agent_key(config, &t.agent, &self.versions);
        let project_hash = if t.runs_project_checks() { &self.project_hash } else { &self.project_hash_without_checks };
        let mut inputs = vec![
            Input { kind: "spec", name: t.task.name.clone(), hash: hash_json(&t.key.spec) },
            Input { kind: "agent", name: t.agent.clone(), hash: hash_json(&agent_key) },
        ];
        // Only a model asked for is an input: the CLI's own default keeps
        // the hashes of tasks that name none as they were.
        if let Some(m) = &t.model {
            inputs.push(Input { kind: "model", name: m.clone(), hash: hash_bytes(m.as_bytes()) });
        }
        inputs.extend([
            Input { kind: "sandbox", name: t.sandbox.to_string(), hash: hash_bytes(t.sandbox.as_str().as_bytes()) },
            Input { kind: "template", name: self.template_name.clone(), hash: self.template_hash.clone() },
            Input { kind: "project", name: "commands".to_owned(), hash: project_hash.clone() },
        ]);
        // The hosts and host paths its commands are given: inputs only
        // when the config names any, so that a project without them
        // hashes as before they existed.
        inputs.extend(network_input(config, &t.agent));
        inputs.extend(sandbox_paths_input(config));
        inputs.extend(instructions.iter().cloned());
        inputs.extend(context);
        inputs.extend(reference);
        for d in &t.key.spec.depends_on {
            inputs.push(Input {
                kind: "dependency",
                name: d.clone(),
                hash: outputs.get(d).cloned().unwrap_or_default(),
            });
        }
        t.key.inputs = inputs;
        t.hash = t.key.hash();
        // Made when needed ([`Hashing::fill_recipe`]): most tasks of a
        // plan are up to date, decided without it.
        (t.recipe, t.dependencies) = (String::new(), None);
    }

    /// Sets `t`'s recipe and dependencies hashes (its key made): what a
    /// task whose inputs differ from both recorded states is compared on,
    /// and what a run records.
    pub fn fill_recipe(&self, config: &crate::spec::ProjectConfig, t: &mut PlannedTask) {
        let agent_key = agent_key(config, &t.agent, &self.versions);
        t.recipe = recipe_hash(&t.key, &agent_key);
        t.dependencies = dependencies_hash(&t.key);
    }

    /// [`Hashing::fill_recipe`] where `lock` decides `t` by it: its line
    /// records a recipe, and `t`'s inputs are neither state it records.
    pub fn fill_recipe_if_needed(
        &self,
        config: &crate::spec::ProjectConfig,
        lock: &crate::lock::Lock,
        t: &mut PlannedTask,
    ) {
        if lock.tasks.get(&t.task.name).is_some_and(|l| l.recipe.is_some() && l.after != t.hash && l.before != t.hash) {
            self.fill_recipe(config, t);
        }
    }
}

/// The recipe of a task whose input key is `key` (its agent's key
/// `agent`): everything of the key but what the tree and the machine bring
/// to it (the network allow-lists and sandbox paths are in it). Left out:
/// the contents of the files it reads (context, reference,
/// standing instructions) and which files its patterns match now, its
/// dependencies' outputs (compared on their own:
/// [`dependencies_hash`]), the agent's version, and the limits that bound
/// a run (timeout, max-iterations, max-cost, acceptance timeouts). Two
/// states of a task with the same recipe ask the same of the agent: the
/// task's acceptance commands can tell whether its recorded change still
/// meets it.
pub fn recipe_hash(key: &hash::InputKey, agent: &hash::AgentKey) -> String {
    #[derive(serde::Serialize)]
    struct Recipe<'a> {
        format: u32,
        spec: hash::SpecKey,
        agent: hash::AgentKey,
        inputs: Vec<&'a Input>,
    }
    let mut spec = key.spec.clone();
    (spec.timeout_ms, spec.max_iterations, spec.max_cost) = (0, 0, None);
    for a in &mut spec.acceptance {
        a.timeout_ms = None;
    }
    let agent = hash::AgentKey { version: None, ..agent.clone() };
    let inputs = key
        .inputs
        .iter()
        .filter(|i| matches!(i.kind, "model" | "sandbox" | "template" | "project" | "network" | "sandbox-paths"))
        .collect();
    hash_json(&Recipe { format: key.format, spec, agent, inputs })
}

/// The hash of the outputs of the dependencies in `key` (`None`: it has
/// none): a task re-verified in place of a run must depend on what it
/// depended on when it ran.
pub fn dependencies_hash(key: &hash::InputKey) -> Option<String> {
    let deps: Vec<&Input> = key.inputs.iter().filter(|i| i.kind == "dependency").collect();
    (!deps.is_empty()).then(|| hash_json(&deps))
}

impl Plan {
    /// Hashes `t` again on the project as it is now (earlier tasks may have
    /// changed its context files), with the outputs of its dependencies,
    /// and sets its state. Used by `run` right before each task.
    pub fn rehash(&self, t: &mut PlannedTask, outputs: &HashMap<String, String>) -> Result<(), HashError> {
        self.hash_inputs(t, outputs, &state::Overlay::default())?;
        self.hashing.fill_recipe_if_needed(&self.project.config, &self.lock, t);
        let root = &self.project.root;
        let Ok(mut cache) = self.file_cache.lock() else { return Err(HashError::CacheUnusable) };
        let mut index = self.output_index.lock().unwrap_or_else(|e| e.into_inner());
        let overlay = state::Overlay::default();
        let at = self.tasks.iter().position(|p| p.task.name == t.task.name).unwrap_or(self.tasks.len());
        let mut view = state::View::new(root, &mut cache, &overlay).after_replays(&self.replayed_paths, at);
        let (st, cached) = state::state_of(&self.lock, &self.store, &mut index, t, &mut view);
        (t.state, t.cached) = (st, cached);
        t.cached.remote = self.from_remote(t);
        Ok(())
    }

    /// Sets `t`'s input key and hash (and its context and reference files)
    /// as they are on the project with `overlay`'s changes laid over it
    /// (none: as it is), with the outputs of its dependencies; its state is
    /// left as it was. The flush hashes a change's after-state this way
    /// before it writes the change, so that the journal holds the lock
    /// lines from the start.
    pub fn hash_inputs(
        &self,
        t: &mut PlannedTask,
        outputs: &HashMap<String, String>,
        overlay: &state::Overlay,
    ) -> Result<(), HashError> {
        let root = &self.project.root;
        let mut resolver = Resolver::new(root);
        let mut resolve = |patterns: &[String]| -> Result<Vec<ResolvedFile>, ResolveError> {
            let mut out = Vec::new();
            for p in patterns {
                out.extend(resolver.resolve(p)?);
            }
            sort_unique(&mut out);
            Ok(out)
        };
        let values = |v: &[crate::spec::Spanned<String>]| v.iter().map(|p| p.value.clone()).collect::<Vec<_>>();
        let (context_patterns, reference_patterns) = (values(&t.task.context), values(&t.task.reference));
        let ctx = resolve(&context_patterns)?;
        let refs = resolve(&reference_patterns)?;
        let instruction_patterns = instruction_patterns(&self.project);
        let instr = resolve_instructions(&mut resolver, &instruction_patterns);
        let Ok(mut cache) = self.file_cache.lock() else { return Err(HashError::CacheUnusable) };
        let mut inputs =
            |kind: &'static str, patterns: &[String], files: &[ResolvedFile]| -> Result<Vec<Input>, ReadError> {
                let refs: Vec<&ResolvedFile> = files.iter().collect();
                let hashes = cache.hash_files(root, &refs)?;
                let hashes: HashMap<String, String> = files
                    .iter()
                    .zip(hashes)
                    .map(|(f, h)| (f.path.clone(), blake3::Hash::from(h).to_hex().to_string()))
                    .collect();
                let mut hash_file = |path: &str| cache.hash_path(root, path);
                Ok(overlay.inputs(kind, patterns, files, &hashes, &mut hash_file))
            };
        let instructions = inputs("instructions", &instruction_patterns, &instr)?;
        let context = inputs("context", &context_patterns, &ctx)?;
        let reference = inputs("reference", &reference_patterns, &refs)?;
        t.context_files = context.iter().map(|i| i.name.clone()).collect();
        t.reference_files = reference.iter().map(|i| i.name.clone()).collect();
        self.hashing.fill_key(&self.project.config, t, &instructions, context, reference, outputs);
        Ok(())
    }
}

/// The instruction files a task's agent stands under, as patterns: the
/// configured `instructions`, then those the prompt cites (`AGENTS.md`,
/// ...).
fn instruction_patterns(project: &Project) -> Vec<String> {
    project.config.instructions.iter().map(|p| p.value.clone()).chain(project.instruction_files()).collect()
}

/// The files of the instruction `patterns`, sorted, each once; a pattern
/// that matches nothing or leads outside adds nothing.
fn resolve_instructions(resolver: &mut Resolver, patterns: &[String]) -> Vec<ResolvedFile> {
    let mut files = Vec::new();
    for name in patterns {
        if let Ok(found) = resolver.resolve(name) {
            files.extend(found);
        }
    }
    sort_unique(&mut files);
    files
}
