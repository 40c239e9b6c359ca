//! Reading a run's tasks ([`load`]): the config and every task file read
//! and parsed (on all cores, through the parse cache), then checked across
//! files: unique names, known agents, sandboxes within the project's
//! trust, the prompt template's placeholders, the DAG, and every context,
//! reference and scope pattern resolved. Nothing is hashed yet.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::context::{ResolveError, ResolvedFile, Resolver, sort_unique};
use super::par::{par_chunks, timing};
use super::settings::resolve_agent;
use super::{LoadOptions, Loaded, TaskFiles, dag, discover};
use crate::project::Project;
use crate::spec::cache::SpecCache;
use crate::spec::config::ProjectConfig;
use crate::spec::diag::{SpecDiagnostic, suggestion};
use crate::spec::task::parse_task_file;
use crate::spec::{Diagnostics, SandboxLevel, SourceFile, Task, read_source};

/// The variable that names the agent of the tasks that name none, as
/// `--agent` does (the command line wins).
const AGENT_VAR: &str = "CASSIST_AGENT";

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

    drop_duplicate_names(&mut tasks, &mut diags);
    let env_agent = std::env::var(AGENT_VAR).ok().filter(|s| !s.is_empty());
    let (agent_override, model_override) = overrides(opts, env_agent, &project.config, &mut diags);
    let mut warnings = check_agents_and_sandboxes(&project.config, &tasks, &mut diags);
    let (template_name, template_text) = template(&project, &mut diags);

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

/// Task names are unique across the run: every task named as one before it
/// is an error, and is dropped.
pub(super) fn drop_duplicate_names(tasks: &mut Vec<Task>, diags: &mut Diagnostics) {
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
}

/// The agent and the model the command line gives every task that names
/// none: `--agent`, else `env_agent` (the [`AGENT_VAR`] variable), and
/// `--model`. An agent the config cannot know, or a model name that is
/// not one word, is an error.
pub(super) fn overrides(
    opts: &LoadOptions,
    env_agent: Option<String>,
    config: &ProjectConfig,
    diags: &mut Diagnostics,
) -> (Option<String>, Option<String>) {
    let agent_override = opts.agent.clone().or(env_agent);
    if let Some(a) = &agent_override
        && !config.may_know_agent(a)
    {
        let from = if opts.agent.is_some() { "--agent" } else { AGENT_VAR };
        diags.push(
            SpecDiagnostic::error("unknown-agent", format!("unknown agent `{a}` given by {from}"))
                .help(suggestion(a, &config.agent_names())),
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
    (agent_override, model_override)
}

/// Checks each task's agent and sandbox against the config: an unknown
/// agent and a sandbox above the project's trust are errors. Returns the
/// warnings: a sandbox a read-only kind ignores, and a project that sets
/// no trust while some task would change files.
pub(super) fn check_agents_and_sandboxes(
    config: &ProjectConfig,
    tasks: &[Task],
    diags: &mut Diagnostics,
) -> Vec<SpecDiagnostic> {
    let names = config.agent_names();
    let trust = config.trust.map(|t| t.level);
    let mut warnings = Vec::new();
    let mut untrusted_asks = false;
    for t in tasks {
        if let Some(a) = &t.agent
            && !config.may_know_agent(&a.value)
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
    warnings
}

/// The prompt template's name and text: the project's, its placeholders
/// checked, else the built-in one.
fn template(project: &Project, diags: &mut Diagnostics) -> (String, String) {
    let (template_name, template_src) = project.template();
    let template_text = match &template_src {
        Some(src) => {
            check_template(src, diags);
            src.text.to_string()
        }
        None => crate::prompt::DEFAULT_TEMPLATE.to_owned(),
    };
    (template_name, template_text)
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
    sort_unique(&mut out);
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
    /// their CLIs and hands the versions to [`plan`](super::plan()).
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
