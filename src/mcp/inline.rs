//! Inline tasks: the tasks a coordinator gives in a tool call, written as
//! the text of a task file (source [`INLINE_SOURCE`]) so that they are
//! read, checked, planned, hashed and run exactly as task files are.

use std::sync::Arc;

use kdl::{KdlDocument, KdlEntry, KdlNode};
use rmcp::schemars::{self, JsonSchema};
use serde::{Deserialize, Serialize};

use crate::plan::INLINE_SOURCE;
use crate::spec::SourceFile;

/// At most this many inline tasks in one `run_tasks` call (SPEC 7).
pub const MAX_INLINE: usize = 8;
/// The turn cap of a `dispatch_subagent` sub-agent (SPEC 7).
pub const DISPATCH_TURNS: u32 = 15;

/// What a task does (SPEC 1, "Kinds").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum InlineKind {
    /// Changes files.
    Code,
    /// Reads and reports; changes no file.
    Explore,
    /// Reviews and reports; changes no file.
    Review,
    /// May run commands; changes no project file.
    Test,
}

/// A sandbox level (SPEC 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum InlineSandbox {
    ReadOnly,
    WorkspaceWrite,
    Full,
}

/// One task given inline: the dispatch of a sub-agent with a goal and a
/// kind (the fields of a task file, SPEC 1).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InlineTask {
    /// The task's name (letters, digits, `.`, `_`, `-`); default
    /// `mcp-` and 8 hex digits of a hash of the task. It must not be the
    /// name of a task of the project's task files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What the sub-agent must do.
    pub goal: String,
    /// `code` changes files; `explore` and `review` are read-only and
    /// report a summary; `test` may run commands but changes no file.
    pub kind: InlineKind,
    /// The agent (a built-in: claude, codex, gemini, droid, or one the
    /// project's cassist.kdl declares); default as for task files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The model the agent's CLI is told to use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Files (paths or globs relative to the project root) the sub-agent
    /// is given as context; each must match a file.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub context: Vec<String>,
    /// What a `code` task may change (paths or globs); default anything.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scope: Vec<String>,
    /// Rules the sub-agent must keep.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub constraints: Vec<String>,
    /// Shell commands that must pass for the change to be accepted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acceptance: Vec<String>,
    /// At most the project's trust.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<InlineSandbox>,
    /// Per agent run, e.g. "90s", "3m", "1h30m".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

impl InlineTask {
    /// A `dispatch_subagent` call as an inline task.
    pub fn dispatch(kind: InlineKind, goal: String, context: Vec<String>) -> InlineTask {
        InlineTask {
            name: None,
            goal,
            kind,
            agent: None,
            model: None,
            context,
            scope: Vec::new(),
            constraints: Vec::new(),
            acceptance: Vec::new(),
            sandbox: None,
            timeout: None,
        }
    }

    /// The task's name: its own, else `mcp-` and 8 hex digits of the hash
    /// of what it asks (`origin` tells the tools apart: a dispatch is
    /// capped at 15 turns, a task of `run_tasks` is not).
    pub fn name(&self, origin: &str) -> String {
        if let Some(name) = &self.name {
            return name.clone();
        }
        let spec = serde_json::to_vec(self).unwrap_or_default();
        let mut h = blake3::Hasher::new();
        h.update(origin.as_bytes());
        h.update(b"\n");
        h.update(&spec);
        format!("mcp-{}", &h.finalize().to_hex()[..8])
    }

    /// The task as a task file's `task` node named `name`.
    fn node(&self, name: &str) -> KdlNode {
        let mut task = KdlNode::new("task");
        task.push(KdlEntry::new(name));
        let mut body = KdlDocument::new();
        let mut one = |key: &str, value: &str| {
            let mut n = KdlNode::new(key);
            n.push(KdlEntry::new(value));
            body.nodes_mut().push(n);
        };
        one("goal", &self.goal);
        one("kind", kind_name(self.kind));
        if let Some(a) = &self.agent {
            one("agent", a);
        }
        if let Some(m) = &self.model {
            one("model", m);
        }
        if let Some(s) = self.sandbox {
            one("sandbox", sandbox_name(s));
        }
        if let Some(t) = &self.timeout {
            one("timeout", t);
        }
        let mut block = |key: &str, item: &str, values: &[String]| {
            if values.is_empty() {
                return;
            }
            let mut n = KdlNode::new(key);
            let mut children = KdlDocument::new();
            for v in values {
                let mut c = KdlNode::new(item);
                c.push(KdlEntry::new(v.as_str()));
                children.nodes_mut().push(c);
            }
            n.set_children(children);
            body.nodes_mut().push(n);
        };
        block("context", "file", &self.context);
        block("scope", "path", &self.scope);
        block("constraints", "-", &self.constraints);
        block("acceptance", "run", &self.acceptance);
        task.set_children(body);
        task
    }
}

fn kind_name(k: InlineKind) -> &'static str {
    match k {
        InlineKind::Code => "code",
        InlineKind::Explore => "explore",
        InlineKind::Review => "review",
        InlineKind::Test => "test",
    }
}

fn sandbox_name(s: InlineSandbox) -> &'static str {
    match s {
        InlineSandbox::ReadOnly => "read-only",
        InlineSandbox::WorkspaceWrite => "workspace-write",
        InlineSandbox::Full => "full",
    }
}

/// The task file of inline tasks, each with its name.
pub fn source(tasks: &[(String, &InlineTask)]) -> Arc<SourceFile> {
    let mut doc = KdlDocument::new();
    for (name, t) in tasks {
        doc.nodes_mut().push(t.node(name));
    }
    doc.autoformat();
    SourceFile::new(INLINE_SOURCE, doc.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Diagnostics;
    use crate::spec::task::parse_task_file;

    fn task(goal: &str) -> InlineTask {
        InlineTask::dispatch(InlineKind::Explore, goal.into(), vec!["src/*.rs".into()])
    }

    #[test]
    fn inline_tasks_read_back_as_written_whatever_their_text() {
        let mut t = task("Say \"hi\" \\ then\nnew line, tab\t, bidi \u{202e} and } { // /* -");
        t.constraints = vec!["no \"deps\"".into(), "- dash".into()];
        t.acceptance = vec!["test -f x && echo '}'".into()];
        t.scope = vec!["src/**".into()];
        t.timeout = Some("3m".into());
        t.sandbox = Some(InlineSandbox::ReadOnly);
        t.agent = Some("claude".into());
        t.model = Some("m-1".into());
        let src = source(&[("a".into(), &t)]);
        let mut diags = Diagnostics::default();
        let tasks = parse_task_file(&src, &mut diags).expect("valid KDL");
        assert!(!diags.has_errors(), "{:?}\n{}", diags.sorted(), src.text);
        let [read] = tasks.as_slice() else { panic!("one task: {tasks:?}") };
        assert_eq!(read.name, "a");
        assert_eq!(read.goal, t.goal);
        assert_eq!(read.constraints, t.constraints);
        assert_eq!(read.acceptance[0].run.value, t.acceptance[0]);
        assert_eq!(read.context[0].value, "src/*.rs");
        assert_eq!(read.scope[0].value, "src/**");
        assert_eq!(read.kind, crate::spec::Kind::Explore);
        assert_eq!(read.timeout, Some(std::time::Duration::from_secs(180)));
        assert_eq!(read.agent.as_ref().unwrap().value, "claude");
        assert_eq!(src.name, INLINE_SOURCE);
    }

    #[test]
    fn names_follow_the_task_and_the_tool() {
        let a = task("look");
        assert_eq!(a.name("dispatch"), a.clone().name("dispatch"));
        assert!(a.name("dispatch").starts_with("mcp-") && a.name("dispatch").len() == 12);
        assert_ne!(a.name("dispatch"), a.name("run"));
        assert_ne!(a.name("dispatch"), task("look again").name("dispatch"));
        let named = InlineTask { name: Some("mine".into()), ..a };
        assert_eq!(named.name("dispatch"), "mine");
    }
}
