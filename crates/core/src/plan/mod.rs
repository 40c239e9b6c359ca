//! From task files to a [`Plan`]: discovery, validation across files,
//! context resolution, the DAG and the input hashes.

pub mod context;
pub mod dag;
pub mod discover;
pub mod filehash;
pub mod hash;
pub mod state;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::project::Project;
use crate::spec::cache::SpecCache;
use crate::spec::config::CustomAgentDef;
use crate::spec::diag::{SpecDiagnostic, suggestion};
use crate::spec::task::parse_task_file;
use crate::spec::{Diagnostics, Kind, SandboxLevel, SourceFile, Task, read_source};
use context::{ResolveError, ResolvedFile, Resolver};
use hash::{AcceptanceKey, AgentKey, Input, InputKey, ProjectKey, SpecKey, hash_bytes, hash_json};

/// Built-in defaults when neither the task nor `defaults` say.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);
pub const DEFAULT_MAX_ITERATIONS: u32 = 3;
/// The agent of a task when neither it, `--agent`/`CASSIST_AGENT` nor
/// `defaults` name one: a built-in agent.
pub const DEFAULT_AGENT: &str = "claude";

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

/// A task's state against the cache (SPEC 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    UpToDate,
    Replay,
    Run,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::UpToDate => "up-to-date",
            State::Replay => "replay",
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
    pub state: State,
    /// What stands behind the state (the entry to replay, the recorded
    /// patch, an unusable entry).
    pub cached: state::Cached,
    /// The agent's turn cap when set by the caller (the MCP server's
    /// dispatches); else read-only kinds get the adapters' own cap.
    pub turn_cap: Option<u32>,
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

    /// The prompt parts of a task.
    /// The prompt of `t` (SPEC 3.1), with the findings of its
    /// explore/review dependencies.
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

/// Reads the config and every task file, and checks everything that can be
/// checked without running anything. All problems of all files come back
/// at once, sorted.
pub fn load(cwd: &Path, opts: &LoadOptions) -> Result<Loaded, Vec<SpecDiagnostic>> {
    timing("start");
    let mut diags = Diagnostics::default();
    let project = Project::load(cwd, &mut diags);

    // Task files.
    let files = match discover::task_files(cwd, &project.root, &opts.paths) {
        Ok(f) => f,
        Err(d) if opts.tasks_optional && opts.paths.is_empty() && d.code == "no-such-path" => Vec::new(),
        Err(d) => {
            diags.push(d);
            return Err(diags.sorted());
        }
    };
    timing("discover");
    let mut spec_cache = SpecCache::load(&crate::fsx::state_dir(&project.root).join("cache").join("tasks.json"));
    let (mut tasks, mut partial) = parse_files(&project, &files, &mut spec_cache, &mut diags);
    for src in &opts.inline {
        match parse_task_file(src, &mut diags) {
            Some(t) => tasks.extend(t),
            None => partial = true,
        }
    }
    timing("parse");

    // Names unique across the run.
    let mut first: HashMap<String, usize> = HashMap::new();
    let mut dup = vec![false; tasks.len()];
    for (i, t) in tasks.iter().enumerate() {
        if let Some(&j) = first.get(&t.name) {
            let prev = &tasks[j];
            let (line, col) = prev.source.line_col(prev.name_span.offset());
            let mut d = SpecDiagnostic::error("duplicate-task", format!("task `{}` is defined twice", t.name)).at(
                &t.source,
                t.name_span,
                "defined again here",
            );
            if Arc::ptr_eq(&prev.source, &t.source) {
                d = d.also(prev.name_span, "first defined here");
            }
            diags.push(d.help(format!(
                "task names are unique across the run; the first is at {}:{line}:{col}",
                prev.source.name
            )));
            dup[i] = true;
        } else {
            first.insert(t.name.clone(), i);
        }
    }
    let mut i = 0;
    tasks.retain(|_| {
        i += 1;
        !dup[i - 1]
    });

    // Agents, sandbox and trust.
    let agent_override = opts.agent.clone().or_else(|| std::env::var("CASSIST_AGENT").ok().filter(|s| !s.is_empty()));
    if let Some(a) = &agent_override
        && !project.config.may_know_agent(a)
    {
        let from = if opts.agent.is_some() { "--agent" } else { "CASSIST_AGENT" };
        diags.push(
            SpecDiagnostic::error("unknown-agent", format!("unknown agent `{a}` given by {from}"))
                .help(suggestion(a, &project.config.agent_names())),
        );
    }
    let model_override = opts.model.clone();
    if let Some(m) = &model_override
        && (m.trim().is_empty() || m.chars().any(|c| c.is_whitespace() || c.is_control()))
    {
        diags.push(
            SpecDiagnostic::error("bad-model", format!("invalid model name `{m}` given by --model"))
                .help("give the model the agent's CLI knows, as one word, e.g. `--model claude-sonnet-4-5`"),
        );
    }
    let names = project.config.agent_names();
    let trust = project.config.trust.map(|t| t.level);
    let mut warnings = Vec::new();
    let mut untrusted_asks = false;
    for t in &tasks {
        if let Some(a) = &t.agent
            && !project.config.may_know_agent(&a.value)
        {
            diags.push(
                SpecDiagnostic::error("unknown-agent", format!("unknown agent `{}`", a.value))
                    .at(&t.source, a.span, "unknown agent")
                    .help(suggestion(&a.value, &names)),
            );
        }
        if let Some(s) = &t.sandbox {
            match trust {
                Some(level) if s.value > level => {
                    diags.push(
                        SpecDiagnostic::error(
                            "sandbox-above-trust",
                            format!(
                                "task `{}` asks for sandbox `{}` but the project trusts only `{level}`",
                                t.name, s.value
                            ),
                        )
                        .at(&t.source, s.span, "above the project's trust")
                        .help(format!(
                            "lower the task's sandbox, or raise `trust` in cassist.kdl to `{}` if you mean it",
                            s.value
                        )),
                    );
                }
                None if s.value > SandboxLevel::ReadOnly => untrusted_asks = true,
                _ => {}
            }
            if t.kind.is_read_only() && s.value > SandboxLevel::ReadOnly {
                warnings.push(
                    SpecDiagnostic::warning(
                        "sandbox-ignored",
                        format!("`{}` tasks are read-only; sandbox `{}` is ignored", t.kind, s.value),
                    )
                    .at(&t.source, s.span, "ignored"),
                );
            }
        }
    }
    if trust.is_none() && !tasks.is_empty() && (untrusted_asks || tasks.iter().any(|t| !t.kind.is_read_only())) {
        warnings.push(SpecDiagnostic::warning("untrusted-project", "this project sets no trust: every task runs read-only, and `code` tasks fail without starting their agent").help(
            "to let agents change files, add `trust \"workspace-write\"` to cassist.kdl (or `trust_level = \"trusted\"` to .agents/config.toml)",
        ));
    }

    // Template placeholders.
    let (template_name, template_src) = project.template();
    let template_text = match &template_src {
        Some(src) => {
            check_template(src, &mut diags);
            src.text.to_string()
        }
        None => crate::prompt::DEFAULT_TEMPLATE.to_owned(),
    };

    // The DAG.
    let order = dag::order(&tasks, partial, &mut diags);

    // Context and reference files.
    timing("validate");
    let resolved = resolve_tasks(&project.root, &tasks, &mut diags);
    timing("resolve");

    if diags.has_errors() {
        // Warnings are left out: nothing runs, and a warning drawn from a
        // broken config (say, "no trust") would only mislead.
        return Err(diags.sorted());
    }
    let Some(order) = order else {
        return Err(diags.sorted());
    };
    for d in diags.sorted() {
        warnings.push(d);
    }
    let mut slots: Vec<Option<(Task, TaskFiles)>> = tasks.into_iter().zip(resolved).map(Some).collect();
    let (tasks, files): (Vec<_>, Vec<_>) = order.iter().filter_map(|&i| slots[i].take()).unzip();
    Ok(Loaded {
        project,
        tasks,
        files,
        template: (template_name, template_text),
        warnings,
        agent_override,
        model_override,
        spec_cache,
    })
}

/// With `CASSIST_TIMINGS=1`, prints how long each planning phase took
/// (and `run` its own phases).
pub fn timing(phase: &str) {
    use std::sync::Mutex;
    use std::time::Instant;
    static LAST: Mutex<Option<Instant>> = Mutex::new(None);
    if std::env::var_os("CASSIST_TIMINGS").is_none() {
        return;
    }
    if let Ok(mut last) = LAST.lock() {
        let now = Instant::now();
        if let Some(prev) = *last {
            crate::errln!("timing: {phase:<12} {:>8.1} ms", (now - prev).as_secs_f64() * 1000.0);
        }
        *last = Some(now);
    }
}

/// Fewer items than this are worked on by the calling thread ([`par_chunks`]).
const INLINE_ITEMS: usize = 8;

/// `f` over `items` split in one chunk per core (at most 8), on scoped
/// threads; the results in the items' order. A few items go in one chunk
/// on the calling thread: starting a thread (its stack, the allocator's
/// first pages for it) costs more than the work of a few.
pub fn par_chunks<T: Sync, R: Send>(items: &[T], f: impl Fn(&[T]) -> R + Sync) -> Vec<R> {
    if items.is_empty() {
        return Vec::new();
    }
    if items.len() < INLINE_ITEMS {
        return vec![f(items)];
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 8);
    let chunk = items.len().div_ceil(threads).max(1);
    let f = &f;
    std::thread::scope(|s| {
        let handles: Vec<_> = items.chunks(chunk).map(|part| s.spawn(move || f(part))).collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    })
}

/// Reads and parses task files on all cores; results keep the files'
/// order. `partial` is true when some file could not be parsed at all.
fn parse_files(
    project: &Project,
    files: &[PathBuf],
    cache: &mut SpecCache,
    diags: &mut Diagnostics,
) -> (Vec<Task>, bool) {
    let cache_ro: &SpecCache = cache;
    type Parsed = (Vec<Task>, bool, Diagnostics, Vec<(Arc<SourceFile>, Vec<Task>)>);
    let results: Vec<Parsed> = par_chunks(files, |part| {
        let mut diags = Diagnostics::default();
        let mut tasks = Vec::new();
        let mut partial = false;
        let mut fresh = Vec::new();
        let mut folders = HashMap::new();
        for path in part {
            match read_source(path, project.display_in(path, &mut folders)) {
                Ok(src) => {
                    if let Some(t) = cache_ro.get(&src) {
                        tasks.extend(t);
                        continue;
                    }
                    let before = diags.len();
                    match parse_task_file(&src, &mut diags) {
                        Some(t) => {
                            if diags.len() == before {
                                fresh.push((Arc::clone(&src), t.clone()));
                            }
                            tasks.extend(t);
                        }
                        None => partial = true,
                    }
                }
                Err(d) => {
                    diags.push(d);
                    partial = true;
                }
            }
        }
        (tasks, partial, diags, fresh)
    });
    let mut tasks = Vec::new();
    let mut partial = false;
    for (t, p, d, fresh) in results {
        tasks.extend(t);
        partial |= p;
        diags.extend(d);
        for (src, parsed) in fresh {
            cache.put(&src, &parsed);
        }
    }
    (tasks, partial)
}

/// Resolves every task's context, reference and scope patterns, on all
/// cores (each thread with its own listing caches).
fn resolve_tasks(root: &Path, tasks: &[Task], diags: &mut Diagnostics) -> Vec<TaskFiles> {
    let results: Vec<(Vec<TaskFiles>, Diagnostics)> = par_chunks(tasks, |part| {
        let mut resolver = Resolver::new(root);
        let patterns = part.iter().flat_map(|t| t.context.iter().chain(&t.reference).chain(&t.scope));
        resolver.prefetch(patterns.map(|p| p.value.as_str()));
        let mut diags = Diagnostics::default();
        let mut out = Vec::with_capacity(part.len());
        for t in part {
            let ctx = resolve_all(&mut resolver, t, &t.context, true, &mut diags);
            let refs = resolve_all(&mut resolver, t, &t.reference, true, &mut diags);
            for s in &t.scope {
                // Scope globs may match nothing, but must not lead outside.
                if let Err(ResolveError::Escapes { path, target }) = resolver.resolve(&s.value) {
                    diags.push(escape_diag(t, s.span, &path, &target));
                }
            }
            out.push((ctx, refs));
        }
        (out, diags)
    });
    let mut out = Vec::with_capacity(tasks.len());
    for (files, d) in results {
        out.extend(files);
        diags.extend(d);
    }
    out
}

fn escape_diag(t: &Task, span: miette::SourceSpan, path: &str, target: &str) -> SpecDiagnostic {
    SpecDiagnostic::error("path-escapes", format!("`{path}` leads outside the project (to {target})"))
        .at(&t.source, span, "symlink out of the project")
        .help("agents work on a copy of the project; files outside it cannot be used: copy the file into the project instead")
}

fn resolve_all(
    resolver: &mut Resolver,
    t: &Task,
    patterns: &[crate::spec::Spanned<String>],
    must_match: bool,
    diags: &mut Diagnostics,
) -> Vec<ResolvedFile> {
    let mut out: Vec<ResolvedFile> = Vec::new();
    for p in patterns {
        match resolver.resolve(&p.value) {
            Ok(files) if files.is_empty() && must_match => {
                if let Some(ignored) = resolver.ignored_match(&p.value) {
                    diags.push(
                        SpecDiagnostic::error(
                            "only-ignored",
                            format!("`{}` matches only files ignored by .gitignore, such as `{ignored}`", p.value),
                        )
                        .at(&t.source, p.span, "only ignored files")
                        .help(format!(
                            "globs leave out the files git ignores; name the file itself (`file \"{ignored}\"`) to include it, or stop ignoring it in .gitignore"
                        )),
                    );
                    continue;
                }
                let help = match resolver.nearest(&p.value) {
                    Some(near) => format!("did you mean `{near}`? (paths are relative to the project root)"),
                    None => "paths are relative to the project root; a context entry must match a file, so that a typo cannot silently change what the agent sees".to_owned(),
                };
                diags.push(
                    SpecDiagnostic::error("no-match", format!("`{}` matches no file", p.value))
                        .at(&t.source, p.span, "matches nothing")
                        .help(help),
                )
            }
            Ok(files) => out.extend(files),
            Err(ResolveError::Escapes { path, target }) => diags.push(escape_diag(t, p.span, &path, &target)),
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out.dedup_by(|a, b| a.path == b.path);
    out
}

fn check_template(src: &Arc<SourceFile>, diags: &mut Diagnostics) {
    for (range, name) in crate::template::scan_placeholders(&src.text) {
        if !crate::prompt::TEMPLATE_PLACEHOLDERS.contains(&name.as_str()) {
            let mut d = SpecDiagnostic::error(
                "unknown-placeholder",
                format!("unknown placeholder `{{{name}}}` in the prompt template"),
            )
            .at(src, range.into(), "unknown placeholder")
            .help(format!(
                "{}; write `{{{{` and `}}}}` for literal braces",
                crate::spec::diag::suggestion_with(&name, crate::prompt::TEMPLATE_PLACEHOLDERS, |c| format!("{{{c}}}"))
            ));
            d.code = "unknown-placeholder";
            diags.push(d);
        }
    }
}

impl Loaded {
    /// The built-in agents whose versions are part of the tasks' hashes:
    /// those the tasks use and those their failover chains may use, in
    /// first-use order. Planning runs nothing: the command layer asks
    /// their CLIs and hands the versions to [`plan`].
    pub fn builtin_agents(&self) -> Vec<String> {
        let config = &self.project.config;
        let mut out: Vec<String> = Vec::new();
        for task in &self.tasks {
            let agent = resolve_agent(task, self.agent_override.as_deref(), config);
            for cand in config.candidates(&agent) {
                if crate::spec::BUILTIN_AGENTS.contains(&cand.as_str()) && !out.contains(&cand) {
                    out.push(cand);
                }
            }
        }
        out
    }
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
    let mut instructions: Vec<ResolvedFile> = Vec::new();
    {
        let mut r = context::Resolver::new(&project.root);
        let names = config.instructions.iter().map(|p| p.value.clone()).chain(project.instruction_files());
        for name in names {
            if let Ok(files) = r.resolve(&name) {
                instructions.extend(files);
            }
        }
        instructions.sort_by(|a, b| a.path.cmp(&b.path));
        instructions.dedup_by(|a, b| a.path == b.path);
    }
    unique.extend(instructions.iter());
    unique.sort_by(|a, b| a.path.cmp(&b.path));
    unique.dedup_by(|a, b| a.path == b.path);
    let hashes = cache
        .hash_files(&project.root, &unique)
        .map_err(|(path, e)| SpecDiagnostic::error("read-failed", format!("cannot read {path}: {e}")))?;
    let file_hash: HashMap<String, String> =
        unique.iter().zip(hashes).map(|(f, h)| (f.path.clone(), blake3::Hash::from(h).to_hex().to_string())).collect();
    let files_hashed = cache.hashed;

    timing("hash files");
    let template_hash = hash_bytes(template.1.as_bytes());
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

    let instruction_inputs: Vec<Input> = instructions
        .iter()
        .map(|i| Input { kind: "instructions", name: i.path.clone(), hash: file_hash[i.path.as_str()].clone() })
        .collect();
    let lock = crate::lock::Lock::load(&project.root).map_err(|e| {
        SpecDiagnostic::error("bad-lock", e.0).help(
            "cassist.lock is written by `cassist run`; restore it from version control, or delete it to record afresh",
        )
    })?;
    let store = crate::store::Store::open(&project.root);
    timing("read lock");
    let hashing = Hashing {
        template_name: template.0.clone(),
        template_hash,
        project_hash,
        project_hash_without_checks,
        versions,
    };
    let mut planned: Vec<PlannedTask> = Vec::with_capacity(tasks.len());
    // What each planned task hands its dependents: its recorded output
    // (patch hash) when it will not run, else its input hash.
    let mut outputs: HashMap<String, String> = HashMap::new();
    // The changes of the replays predicted so far: later tasks see them
    // (SPEC 4: `plan` predicts replay chains as `run` does them).
    let mut overlay = state::Overlay::default();
    let mut output_index = state::OutputIndex::load(&project.root);
    let instruction_patterns: Vec<String> =
        config.instructions.iter().map(|p| p.value.clone()).chain(project.instruction_files()).collect();
    let mut warnings = warnings;
    for (task, (ctx, refs)) in tasks.into_iter().zip(files) {
        let agent = resolve_agent(&task, agent_override.as_deref(), config);
        let model = resolve_model(&task, model_override.as_deref(), config);
        let sandbox = effective_sandbox(&task, config.trust.map(|t| t.level));
        let timeout = task.timeout.or(config.defaults.timeout).unwrap_or(DEFAULT_TIMEOUT);
        let max_iterations = task.max_iterations.or(config.defaults.max_iterations).unwrap_or(DEFAULT_MAX_ITERATIONS);
        let max_cost = task.max_cost.or(config.defaults.max_cost);
        let mut t = PlannedTask {
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
            state: State::Run,
            cached: state::Cached::default(),
            turn_cap: None,
            task,
        };
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
        let (st, cached) = state::state_of(&lock, &store, &mut output_index, &t.task.name, &t.hash, &mut |paths| {
            state::outputs_now(&project.root, &mut cache, paths, &overlay)
        });
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
        if t.state == State::Replay
            && let Some(entry) = t.cached.entry.as_deref().and_then(|k| store.read_entry(k).ok().flatten())
        {
            overlay.lay(&t.task.name, &entry, &store);
        }
        let output = match (&t.cached.patch, t.state) {
            (Some(patch), State::UpToDate | State::Replay) => patch.clone(),
            _ => t.hash.clone(),
        };
        outputs.insert(t.task.name.clone(), output);
        planned.push(t);
    }
    timing("hash tasks");
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
    })
}

/// The warning for a store entry a task cannot use (SPEC 4).
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
    }
}

/// The normalized spec of a task, with its effective settings.
fn spec_key(task: &Task, timeout: Duration, max_iterations: u32, max_cost: Option<f64>) -> SpecKey {
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

    /// Hashes `t` again on the project as it is now (earlier tasks may have
    /// changed its context files), with the outputs of its dependencies,
    /// and sets its state. Used by `run` right before each task.
    pub fn rehash(&self, t: &mut PlannedTask, outputs: &HashMap<String, String>) -> Result<(), String> {
        self.hash_inputs(t, outputs, &state::Overlay::default())?;
        let root = &self.project.root;
        let Ok(mut cache) = self.file_cache.lock() else { return Err("the file-hash cache is unusable".into()) };
        let mut index = self.output_index.lock().unwrap_or_else(|e| e.into_inner());
        let (st, cached) = state::state_of(&self.lock, &self.store, &mut index, &t.task.name, &t.hash, &mut |paths| {
            state::outputs_now(root, &mut cache, paths, &state::Overlay::default())
        });
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
    ) -> Result<(), String> {
        let root = &self.project.root;
        let mut resolver = Resolver::new(root);
        let mut resolve = |patterns: &[String]| -> Result<Vec<ResolvedFile>, String> {
            let mut out = Vec::new();
            for p in patterns {
                match resolver.resolve(p) {
                    Ok(f) => out.extend(f),
                    Err(ResolveError::Escapes { path, target }) => {
                        return Err(format!("`{path}` leads outside the project (to {target})"));
                    }
                }
            }
            out.sort_by(|a, b| a.path.cmp(&b.path));
            out.dedup_by(|a, b| a.path == b.path);
            Ok(out)
        };
        let values = |v: &[crate::spec::Spanned<String>]| v.iter().map(|p| p.value.clone()).collect::<Vec<_>>();
        let (context_patterns, reference_patterns) = (values(&t.task.context), values(&t.task.reference));
        let ctx = resolve(&context_patterns)?;
        let refs = resolve(&reference_patterns)?;
        let instruction_patterns: Vec<String> = self
            .project
            .config
            .instructions
            .iter()
            .map(|p| p.value.clone())
            .chain(self.project.instruction_files())
            .collect();
        let mut instr = Vec::new();
        for name in &instruction_patterns {
            if let Ok(files) = resolver.resolve(name) {
                instr.extend(files);
            }
        }
        instr.sort_by(|a, b| a.path.cmp(&b.path));
        instr.dedup_by(|a, b| a.path == b.path);
        let Ok(mut cache) = self.file_cache.lock() else { return Err("the file-hash cache is unusable".into()) };
        let mut inputs =
            |kind: &'static str, patterns: &[String], files: &[ResolvedFile]| -> Result<Vec<Input>, String> {
                let refs: Vec<&ResolvedFile> = files.iter().collect();
                let hashes = cache.hash_files(root, &refs).map_err(|(p, e)| format!("cannot read {p}: {e}"))?;
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

    /// Whether `t` replays an entry fetched from the remote cache.
    pub fn from_remote(&self, t: &PlannedTask) -> bool {
        t.state == State::Replay && t.cached.entry.as_ref().is_some_and(|e| self.remote_entries.contains(e))
    }

    /// The outputs of the change a lock line records, in the project as it
    /// is now: each path with its content hash (`None`: absent), through
    /// the file-hash cache. `None` when the store no longer says which
    /// files they are.
    pub fn outputs_now(&self, line: &crate::lock::LockEntry) -> Option<crate::store::Outputs> {
        // The file cache first, then the index, as `rehash` takes them.
        let mut cache = self.file_cache.lock().unwrap_or_else(|e| e.into_inner());
        let mut index = self.output_index.lock().unwrap_or_else(|e| e.into_inner());
        let paths = index.paths(&self.store, &line.before, &line.patch)?;
        Some(state::outputs_now(&self.project.root, &mut cache, paths, &state::Overlay::default()))
    }
}

/// A task's agent: its own, else `--agent`/`CASSIST_AGENT`, else
/// `defaults.agent`, else `claude` (SPEC 2).
pub fn resolve_agent(task: &Task, agent_override: Option<&str>, config: &crate::spec::ProjectConfig) -> String {
    task.agent
        .as_ref()
        .map(|a| a.value.clone())
        .or_else(|| agent_override.map(str::to_owned))
        .or_else(|| config.defaults.agent.as_ref().map(|a| a.value.clone()))
        .unwrap_or_else(|| DEFAULT_AGENT.to_owned())
}

/// A task's model: its own, else `--model`, else `defaults.model`, else
/// none (the CLI's own default) (SPEC 2).
pub fn resolve_model(task: &Task, model_override: Option<&str>, config: &crate::spec::ProjectConfig) -> Option<String> {
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

fn agent_key(config: &crate::spec::ProjectConfig, name: &str, versions: &HashMap<String, Option<String>>) -> AgentKey {
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
