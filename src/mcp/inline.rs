//! Inline tasks: the tasks a coordinator gives in a tool call, written as
//! the text of a task file (source [`INLINE_SOURCE`]) so that they are
//! read, checked, planned, hashed and run exactly as task files are.

use std::sync::Arc;

use rmcp::schemars::{self, JsonSchema};
use serde::{Deserialize, Serialize};

use cassist_core::plan::INLINE_SOURCE;
use cassist_core::spec::SourceFile;

/// At most this many inline tasks in one `run_tasks` call.
pub const MAX_INLINE: usize = 8;
/// The turn cap of a `dispatch_subagent` sub-agent.
pub const DISPATCH_TURNS: u32 = 15;

/// What a task does (README, "Tasks by example": the kinds).
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

/// A sandbox level (README, "Security: what a task can and cannot do").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum InlineSandbox {
    ReadOnly,
    WorkspaceWrite,
    Full,
}

/// One task given inline: the dispatch of a sub-agent with a goal and a
/// kind (the fields of a task file).
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
    fn node(&self, name: &str) -> String {
        let mut out = format!("task {} {{\n", quoted(name));
        let mut one = |key: &str, value: &str| out.push_str(&format!("    {key} {}\n", quoted(value)));
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
            out.push_str(&format!("    {key} {{\n"));
            for v in values {
                out.push_str(&format!("        {item} {}\n", quoted(v)));
            }
            out.push_str("    }\n");
        };
        block("context", "file", &self.context);
        block("scope", "path", &self.scope);
        block("constraints", "-", &self.constraints);
        block("acceptance", "run", &self.acceptance);
        out.push_str("}\n");
        out
    }
}

/// `s` as a KDL v2 quoted string: quotes and backslashes escaped, and
/// every character KDL forbids in a document or that would end the line
/// (controls, newlines, bidi and invisible characters) as `\u{..}`.
fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control()
                || cassist_core::text::is_invisible(c)
                || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2028}' | '\u{2029}') =>
            {
                out.push_str(&format!("\\u{{{:x}}}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
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
    let text: String = tasks.iter().map(|(name, t)| t.node(name)).collect();
    SourceFile::new(INLINE_SOURCE, text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cassist_core::spec::Diagnostics;
    use cassist_core::spec::task::parse_task_file;
    use proptest::prelude::any;

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
        assert_eq!(read.kind, cassist_core::spec::Kind::Explore);
        assert_eq!(read.timeout, Some(std::time::Duration::from_secs(180)));
        assert_eq!(read.agent.as_ref().unwrap().value, "claude");
        assert_eq!(src.name, INLINE_SOURCE);
    }

    proptest::proptest! {
        #[test]
        fn any_text_reads_back_unchanged(goal in "\\PC*|[\\x00-\\x{10ffff}]{0,40}", item in any::<String>()) {
            proptest::prop_assume!(!goal.trim().is_empty() && !item.trim().is_empty());
            let mut t = task(&goal);
            t.constraints = vec![item.clone()];
            let src = source(&[("a".into(), &t)]);
            let mut diags = Diagnostics::default();
            let tasks = parse_task_file(&src, &mut diags);
            proptest::prop_assert!(tasks.is_some(), "not KDL: {:?}", src.text);
            let tasks = tasks.unwrap();
            proptest::prop_assert_eq!(&tasks[0].goal, &goal);
            proptest::prop_assert_eq!(&tasks[0].constraints, &vec![item]);
        }
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
