//! The prompt an agent gets, rendered from a template: Markdown
//! with `{name}` placeholders (the syntax is [`crate::template`]'s).

use crate::template::fill;

/// The default template: Goal, Context (files, and the findings of the
/// explore/review tasks it depends on), Constraints (the scope among
/// them), Acceptance criteria, Reference.
pub const DEFAULT_TEMPLATE: &str = "\
# Goal
{goal}

# Context
{context}

# Constraints
{constraints}

# Acceptance criteria
{acceptance}

# Reference
{reference}
";

/// Placeholders a prompt template may use.
pub const TEMPLATE_PLACEHOLDERS: &[&str] =
    &["goal", "context", "constraints", "acceptance", "reference", "scope", "task", "kind"];

/// Instruction files cited in the Context section when the project has them.
pub const INSTRUCTION_FILES: &[&str] = &["AGENTS.md", "SKILL.md", "TOOL.md", "CLAUDE.md"];

/// What the prompt of one task is made of, already resolved by the plan.
pub struct PromptParts<'a> {
    pub task: &'a str,
    pub kind: crate::spec::Kind,
    pub goal: &'a str,
    pub context_files: &'a [String],
    /// Instruction files present at the project root.
    pub instruction_files: &'a [String],
    /// `(task, summary)` of explore/review dependencies.
    pub dependency_summaries: &'a [(String, String)],
    pub scope: &'a [String],
    pub constraints: &'a [String],
    pub acceptance: &'a [String],
    pub test_commands: &'a [String],
    pub reference_files: &'a [String],
}

fn bullets(items: impl IntoIterator<Item = String>) -> String {
    items.into_iter().map(|i| format!("- {i}")).collect::<Vec<_>>().join("\n")
}

impl PromptParts<'_> {
    pub fn context_section(&self) -> String {
        let mut out = Vec::new();
        if self.context_files.is_empty() {
            out.push("No context files were named; explore the project as needed.".to_owned());
        } else {
            out.push("Read these files first (paths relative to the project root):".to_owned());
            out.push(bullets(self.context_files.iter().map(|f| format!("`{f}`"))));
        }
        if !self.instruction_files.is_empty() {
            let list = self.instruction_files.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(", ");
            out.push(format!("\nThe project's standing instructions are in {list}: read and follow them."));
        }
        for (task, summary) in self.dependency_summaries {
            out.push(format!("\nFindings of task `{task}`:\n{summary}"));
        }
        out.join("\n")
    }

    pub fn scope_text(&self) -> String {
        if self.kind.is_read_only() {
            "nothing: this task is read-only".to_owned()
        } else if self.scope.is_empty() {
            "anything in the project except `.git/` and `.cassist/`".to_owned()
        } else {
            self.scope.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", ")
        }
    }

    pub fn constraints_section(&self) -> String {
        let mut items: Vec<String> = self.constraints.to_vec();
        if self.kind.is_read_only() {
            items.push(format!(
                "This is a read-only {} task: do not create, modify or delete any file. Your final message is the result: make it a complete, concise answer.",
                self.kind
            ));
        } else if self.kind == crate::spec::Kind::Test {
            items.push("This is a test task: you may run commands, but do not change any project file.".to_owned());
        } else {
            items.push(format!("Do not change files outside the scope: {}.", self.scope_text()));
        }
        if self.kind == crate::spec::Kind::Code {
            items.push("Do not commit, push or pull: leave your changes uncommitted in the working tree.".to_owned());
            items.push(
                "Add no dependency unless the constraints allow it, and say why in your final message when you do."
                    .to_owned(),
            );
        } else {
            items.push("Do not commit, push or pull.".to_owned());
        }
        items.push(
            "When you are done, you may write a JSON report to the file named by `$CASSIST_RESULT_FILE`: \
             `{\"success\": true, \"summary\": \"...\"}`, or `{\"success\": false, \"reason\": \"...\"}` if the task cannot be done."
                .to_owned(),
        );
        bullets(items)
    }

    pub fn acceptance_section(&self) -> String {
        if self.kind.is_read_only() {
            let mut out = "Your final message is the result: a complete, concise answer to the goal.".to_owned();
            if !self.acceptance.is_empty() {
                out.push_str("\nThese commands must still exit 0 in the project root:\n");
                out.push_str(&bullets(self.acceptance.iter().map(|c| format!("`{c}`"))));
            }
            return out;
        }
        if self.acceptance.is_empty() && self.test_commands.is_empty() {
            return "No acceptance commands: the change is reviewed, not tested.".to_owned();
        }
        let mut out = Vec::new();
        if !self.acceptance.is_empty() {
            out.push("The task is done when each of these commands exits 0 in the project root:".to_owned());
            out.push(bullets(self.acceptance.iter().map(|c| format!("`{c}`"))));
        }
        if !self.test_commands.is_empty() {
            out.push(if self.acceptance.is_empty() {
                "The task is done when the project's tests pass:".to_owned()
            } else {
                "Then the project's tests must still pass:".to_owned()
            });
            out.push(bullets(self.test_commands.iter().map(|c| format!("`{c}`"))));
        }
        out.join("\n")
    }

    pub fn reference_section(&self) -> String {
        if self.reference_files.is_empty() {
            "None.".to_owned()
        } else {
            format!("Consult these when useful:\n{}", bullets(self.reference_files.iter().map(|f| format!("`{f}`"))))
        }
    }

    /// The value of one template placeholder.
    pub fn value(&self, name: &str) -> Option<String> {
        Some(match name {
            "goal" => self.goal.trim().to_owned(),
            "context" => self.context_section(),
            "constraints" => self.constraints_section(),
            "acceptance" => self.acceptance_section(),
            "reference" => self.reference_section(),
            "scope" => self.scope_text(),
            "task" => self.task.to_owned(),
            "kind" => self.kind.to_string(),
            _ => return None,
        })
    }

    /// The whole prompt.
    pub fn render(&self, template: &str) -> String {
        let mut s = fill(template, |n| self.value(n));
        if !s.ends_with('\n') {
            s.push('\n');
        }
        s
    }
}
