//! Task files: one or more `task "name" { ... }` nodes in a `.kdl` file
//! (KDL v2, v1 accepted), task names unique across the run.

use std::sync::Arc;
use std::time::Duration;

use kdl::{KdlNode, KdlValue};
use miette::SourceSpan;

use super::diag::{Diagnostics, SourceFile, Spanned, parse_source};
use super::reader::{DiagExt, Once, Reader, type_name};
use super::types::{Kind, SandboxLevel};

/// Nodes allowed inside a `task` block.
pub const TASK_NODES: &[&str] = &[
    "goal",
    "agent",
    "model",
    "kind",
    "sandbox",
    "timeout",
    "max-cost",
    "max-iterations",
    "depends-on",
    "context",
    "scope",
    "constraints",
    "acceptance",
    "reference",
];

/// One acceptance command.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Acceptance {
    pub run: Spanned<String>,
    pub timeout: Option<Duration>,
}

/// A task as written, validated for shape. Names of agents and
/// dependencies, trust and context files are checked later, once every
/// file and the config are read.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Task {
    pub name: String,
    pub name_span: SourceSpan,
    /// The `task` node's name, for "pointing at the task" (annotations).
    pub node_span: SourceSpan,
    /// The file the task is in (not cached: set again from the file read).
    #[serde(skip, default = "SourceFile::empty")]
    pub source: Arc<SourceFile>,
    pub goal: String,
    pub agent: Option<Spanned<String>>,
    /// The model the agent CLI is told to use (`None`: the config's
    /// default, else the CLI's own).
    pub model: Option<Spanned<String>>,
    pub kind: Kind,
    pub sandbox: Option<Spanned<SandboxLevel>>,
    pub timeout: Option<Duration>,
    pub max_cost: Option<f64>,
    pub max_iterations: Option<u32>,
    pub depends_on: Vec<Spanned<String>>,
    pub context: Vec<Spanned<String>>,
    pub scope: Vec<Spanned<String>>,
    pub constraints: Vec<String>,
    pub acceptance: Vec<Acceptance>,
    pub reference: Vec<Spanned<String>>,
}

/// Whether a task name is well formed: it becomes part of subtask names,
/// environment values and store paths.
pub fn valid_task_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        && name.len() <= 100
}

/// Where a task name that is not [`valid_task_name`] goes wrong, as a span
/// in the source and a label: the first character not allowed, pointed
/// at where it is written (`é` is not ASCII; an invisible character named
/// by its code point), else the whole name.
fn name_problem(text: &str, entry: SourceSpan, name: &str) -> (SourceSpan, String) {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    let bad = name.chars().find(|&c| !allowed(c));
    let Some(c) = bad else {
        return if name.is_empty() {
            (entry, "empty name".to_owned())
        } else if name.len() > 100 {
            (entry, format!("{} characters, more than 100", name.chars().count()))
        } else {
            (entry, "must start with a letter or digit".to_owned())
        };
    };
    let label = if crate::text::is_invisible(c) || c.is_control() {
        format!("invisible character U+{:04X}", c as u32)
    } else if c == ' ' {
        "a space is not allowed".to_owned()
    } else if !c.is_ascii() {
        format!("`{c}` is not ASCII")
    } else {
        format!("`{c}` is not allowed")
    };
    // The character as written in the source (it may be escaped there).
    let written = text.get(entry.offset()..entry.offset() + entry.len()).and_then(|src| src.find(c));
    let span = written.map_or(entry, |at| SourceSpan::from(entry.offset() + at..entry.offset() + at + c.len_utf8()));
    (span, label)
}

/// Parses one task file. Tasks with errors are still returned when their
/// name could be read, so that later checks (dependencies) do not report
/// them as missing; the caller must not run anything when `diags` has errors.
/// Returns `None` when the file is not valid KDL at all.
pub fn parse_task_file(src: &Arc<SourceFile>, diags: &mut Diagnostics) -> Option<Vec<Task>> {
    let doc = parse_source(src, diags)?;
    let mut r = Reader::new(src, diags);
    let mut tasks = Vec::new();
    if doc.nodes().is_empty() {
        r.warn("empty-file", format!("{} holds no task", src.name), SourceSpan::from(0..0), "")
            .set_help("write `task \"name\" { goal \"...\" }`, or remove the file");
    }
    for node in doc.nodes() {
        if Reader::name(node) != "task" {
            r.unknown_node(node, "at the top of a task file", &["task"]);
            continue;
        }
        if let Some(task) = parse_task(&mut r, node) {
            tasks.push(task);
        }
    }
    Some(tasks)
}

fn parse_task(r: &mut Reader<'_>, node: &KdlNode) -> Option<Task> {
    const EXAMPLE: &str = "task \"add-slugify\" { goal \"...\" }";
    r.check_props(node, &[]);
    let args = Reader::positional(node);
    let name_entry = match args.as_slice() {
        [one] => one,
        [] => {
            r.error("missing-task-name", "a task needs a name", Reader::name_span(node), "no name")
                .set_help(format!("write it as `{EXAMPLE}`"));
            return None;
        }
        [first, rest @ ..] => {
            let span = super::reader::join(rest.iter().map(|e| e.span()));
            r.error("too-many-values", format!("a task takes one name, found {}", args.len()), span, "extra value")
                .set_help(format!("write it as `{EXAMPLE}`"));
            first
        }
    };
    let name = match name_entry.value() {
        KdlValue::String(s) => s.clone(),
        other => {
            r.error(
                "wrong-type",
                format!("a task name must be a string, found {}", type_name(other)),
                name_entry.span(),
                "expected a string",
            )
            .set_help(format!("write it as `{EXAMPLE}`"));
            return None;
        }
    };
    if !valid_task_name(&name) {
        let (span, label) = name_problem(&r.src.text, name_entry.span(), &name);
        r.error("bad-task-name", format!("invalid task name `{name}`"), span, label).set_help(
            "task names use only ASCII letters and digits, `.`, `_` and `-`, start with a letter or digit, and are at most 100 characters long",
        );
    }

    let mut task = Task {
        name,
        name_span: name_entry.span(),
        node_span: Reader::name_span(node),
        source: Arc::clone(r.src),
        goal: String::new(),
        agent: None,
        model: None,
        kind: Kind::Code,
        sandbox: None,
        timeout: None,
        max_cost: None,
        max_iterations: None,
        depends_on: Vec::new(),
        context: Vec::new(),
        scope: Vec::new(),
        constraints: Vec::new(),
        acceptance: Vec::new(),
        reference: Vec::new(),
    };
    let mut goal_seen = false;
    let mut once = Once::default();
    let children = match node.children() {
        Some(doc) => doc.nodes(),
        None => &[],
    };
    for child in children {
        let child_name = Reader::name(child);
        let is_single =
            !matches!(child_name, "depends-on" | "context" | "scope" | "constraints" | "acceptance" | "reference");
        if is_single && TASK_NODES.contains(&child_name) && !once.first(r, child) {
            continue;
        }
        match child_name {
            "goal" => {
                goal_seen = true;
                if let Some(goal) = r.single_string(child, "goal \"Add slugify(title) to src/text.py\"") {
                    if goal.value.trim().is_empty() {
                        r.error("empty-goal", "the goal is empty", goal.span, "empty")
                            .set_help("say what the agent must achieve, in a sentence or more");
                    }
                    task.goal = goal.value;
                }
            }
            "agent" => task.agent = r.single_string(child, "agent \"claude\""),
            "model" => task.model = read_model(r, child),
            "kind" => {
                if let Some(kind) = r.single_string(child, "kind \"code\"") {
                    match Kind::parse(&kind.value) {
                        Some(k) => task.kind = k,
                        None => {
                            r.error(
                                "unknown-kind",
                                format!("unknown kind `{}`", kind.value),
                                kind.span,
                                "unknown kind",
                            )
                            .set_help(super::diag::suggestion(&kind.value, Kind::NAMES));
                        }
                    }
                }
            }
            "sandbox" => {
                if let Some(level) = r.single_string(child, "sandbox \"workspace-write\"") {
                    match SandboxLevel::parse(&level.value) {
                        Some(l) => task.sandbox = Some(Spanned::new(l, level.span)),
                        None => {
                            r.error(
                                "unknown-sandbox",
                                format!("unknown sandbox level `{}`", level.value),
                                level.span,
                                "unknown level",
                            )
                            .set_help(super::diag::suggestion(&level.value, SandboxLevel::NAMES));
                        }
                    }
                }
            }
            "timeout" => {
                if let Some(e) = r.single(child, "timeout \"3m\"") {
                    task.timeout = r.duration("timeout", e).map(|d| d.value);
                }
            }
            "max-cost" => task.max_cost = read_cost(r, child),
            "max-iterations" => task.max_iterations = read_positive_int(r, child, "max-iterations 3"),
            "depends-on" => task.depends_on.extend(r.string_list(child, "depends-on \"other-task\"")),
            "context" => task.context.extend(read_files(r, child, "file", "context { file \"src/*.py\" }")),
            "scope" => task.scope.extend(read_files(r, child, "path", "scope { path \"src/**\" }")),
            "reference" => task.reference.extend(read_files(r, child, "file", "reference { file \"docs/api.md\" }")),
            "constraints" => {
                for item in r.block(child, "constraints { - \"Keep the public API\" }") {
                    if Reader::name(item) != "-" {
                        r.error(
                            "bad-constraint",
                            format!("constraints are `-` items, found `{}`", Reader::name(item)),
                            Reader::name_span(item),
                            "expected `-`",
                        )
                        .set_help("write each constraint as `- \"Do not add dependencies\"`");
                        continue;
                    }
                    if let Some(s) = r.single_string(item, "- \"Do not add dependencies\"") {
                        if s.value.trim().is_empty() {
                            r.error("empty-value", "empty constraint", s.span, "empty")
                                .set_help("remove it or say what must hold");
                        } else {
                            task.constraints.push(s.value);
                        }
                    }
                }
            }
            "acceptance" => {
                for item in r.block(child, "acceptance { run \"cargo test\" }") {
                    if Reader::name(item) != "run" {
                        r.unknown_node(item, "in `acceptance`", &["run"]);
                        continue;
                    }
                    if let Some(a) = read_run(r, item) {
                        task.acceptance.push(a);
                    }
                }
            }
            _ => r.unknown_node(child, "in a task", TASK_NODES),
        }
    }
    if !goal_seen {
        r.error("missing-goal", format!("task `{}` has no goal", task.name), task.name_span, "this task")
            .set_help("every task needs `goal \"...\"`: what the agent must achieve");
    }
    Some(task)
}

/// `run "command" timeout="1m"`.
fn read_run(r: &mut Reader<'_>, node: &KdlNode) -> Option<Acceptance> {
    const EXAMPLE: &str = "run \"cargo test\" timeout=\"10m\"";
    r.check_props(node, &["timeout"]);
    r.check_no_children(node);
    let mut timeout = None;
    for e in node.entries() {
        if e.name().is_some_and(|n| n.value() == "timeout") {
            timeout = r.duration("timeout", e).map(|d| d.value);
        }
    }
    let args = Reader::positional(node);
    match args.as_slice() {
        [one] => {
            let cmd = r.string(node, one, EXAMPLE)?;
            if cmd.value.trim().is_empty() {
                r.error("empty-value", "empty acceptance command", cmd.span, "empty")
                    .set_help("give a shell command that exits 0 when the task is done");
                return None;
            }
            Some(Acceptance { run: cmd, timeout })
        }
        [] => {
            r.error("missing-value", "`run` needs a command", Reader::name_span(node), "no command")
                .set_help(format!("write it as `{EXAMPLE}`"));
            None
        }
        [_, rest @ ..] => {
            let span = super::reader::join(rest.iter().map(|e| e.span()));
            r.error("too-many-values", "`run` takes one command string", span, "extra value")
                .set_help("quote the whole command as one string: `run \"pytest -q tests\"`");
            None
        }
    }
}

/// A block of `file "glob"` (or `path`) items.
pub fn read_files(r: &mut Reader<'_>, node: &KdlNode, item: &str, example: &str) -> Vec<Spanned<String>> {
    let mut out = Vec::new();
    for child in r.block(node, example) {
        if Reader::name(child) != item {
            let parent = Reader::name(node).to_owned();
            r.unknown_node(child, &format!("in `{parent}`"), &[item]);
            continue;
        }
        for s in r.string_list(child, &format!("{item} \"src/*.py\"")) {
            if let Err((why, help)) = check_path_pattern(&s.value) {
                r.error("bad-path", why, s.span, "here").set_help(help);
            } else {
                out.push(s);
            }
        }
    }
    out
}

/// Lexical checks of a path or glob relative to the project root: not
/// absolute, no `..` leaving the project, a valid glob.
pub fn check_path_pattern(p: &str) -> Result<(), (String, String)> {
    if p.trim().is_empty() {
        return Err(("empty path".into(), "give a path relative to the project root".into()));
    }
    if p.starts_with('/') || p.starts_with('\\') || p.chars().nth(1) == Some(':') || p.starts_with('~') {
        return Err((
            format!("absolute path `{p}`"),
            "paths are relative to the project root (the folder of cassist.kdl); files outside the project cannot be used".into(),
        ));
    }
    let mut depth: i32 = 0;
    for part in p.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return Err((
                        format!("`{p}` leaves the project"),
                        "paths are relative to the project root and must stay inside it".into(),
                    ));
                }
            }
            _ => depth += 1,
        }
    }
    if let Err(e) = crate::paths::build_glob(p) {
        return Err((
            format!("invalid glob `{p}`: {}", e.kind()),
            "globs use `*`, `**`, `?`, `[abc]` and `{a,b}`".into(),
        ));
    }
    Ok(())
}

fn read_cost(r: &mut Reader<'_>, node: &KdlNode) -> Option<f64> {
    let e = r.single(node, "max-cost 2.50")?;
    let v = match e.value() {
        KdlValue::Float(f) => *f,
        KdlValue::Integer(i) => *i as f64,
        other => {
            r.error(
                "wrong-type",
                format!("`max-cost` expects a number of US dollars, found {}", type_name(other)),
                e.span(),
                "expected a number",
            )
            .set_help("write it as `max-cost 2.50` (no quotes, no currency sign)");
            return None;
        }
    };
    if !(v.is_finite() && v > 0.0) {
        r.error("bad-number", format!("`max-cost` must be more than zero, found {v}"), e.span(), "not positive")
            .set_help("give the most the agent may spend in US dollars, e.g. `max-cost 2.50`");
        return None;
    }
    Some(v)
}

pub fn read_positive_int(r: &mut Reader<'_>, node: &KdlNode, example: &str) -> Option<u32> {
    let e = r.single(node, example)?;
    let name = Reader::name(node);
    match e.value() {
        KdlValue::Integer(i) if (1..=1000).contains(i) => Some(*i as u32),
        KdlValue::Integer(i) => {
            r.error("bad-number", format!("`{name}` must be between 1 and 1000, found {i}"), e.span(), "out of range")
                .set_help(format!("write it as `{example}`"));
            None
        }
        KdlValue::Float(f) => {
            r.error(
                "wrong-type",
                format!("`{name}` expects a whole number, found the fraction {f}"),
                e.span(),
                "not a whole number",
            )
            .set_help(format!("write it as `{example}`"));
            None
        }
        other => {
            r.error(
                "wrong-type",
                format!("`{name}` expects a whole number, found {}", type_name(other)),
                e.span(),
                "expected a whole number",
            )
            .set_help(format!("write it as `{example}`"));
            None
        }
    }
}

/// `model "claude-sonnet-4-5"`, shared with `defaults`: one non-empty
/// name without spaces (it becomes one argument of the agent's command).
pub fn read_model(r: &mut Reader<'_>, node: &KdlNode) -> Option<Spanned<String>> {
    let model = r.single_string(node, "model \"claude-sonnet-4-5\"")?;
    if model.value.trim().is_empty() || model.value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        r.error("bad-model", format!("invalid model name `{}`", model.value), model.span, "not a model name")
            .set_help("give the model the agent's CLI knows, as one word, e.g. `model \"claude-sonnet-4-5\"`");
        return None;
    }
    Some(model)
}

/// Reads `max-cost`, shared with `defaults`.
pub fn read_max_cost(r: &mut Reader<'_>, node: &KdlNode) -> Option<f64> {
    read_cost(r, node)
}
