//! `cassist init`: a commented config and an example task.

use std::path::Path;

use super::{Error, Result};
use crate::report::Output;

pub const CONFIG_TEMPLATE: &str = r#"// cassist.kdl: the project config of cassist (https://kdl.dev syntax).
// Every setting is optional.

// The highest sandbox level tasks may use. Without a trust, every task
// runs read-only. Levels: "read-only", "workspace-write", "full".
trust "workspace-write"

defaults {
    agent "claude"          // claude | codex | droid | gemini | a custom agent below
    // model "claude-sonnet-4-5"  // the model the agent is told to use (default: its CLI's own)
    timeout "30m"           // per agent invocation: "90s", "3m", "1h30m"
    max-iterations 3        // review/acceptance feedback rounds
    // max-cost 2.50        // USD per task, where the agent reports cost
}

// What a change may hold: a larger file or change is rejected by the
// review; transcripts keep their first and last halves. The defaults:
// limits {
//     file-size "16MiB"
//     change-size "256MiB"
//     transcript "64MiB"
// }

// setup "npm ci"           // run in each fresh workspace before the agent
// test "cargo test"        // project tests (detected when not set; `test #false` turns them off)
// build "cargo build"      // must still pass after a change is integrated
// prompt-template "prompts/task.md"
// instructions "docs/agent-instructions.md"

// A custom agent: any command. {prompt}, {prompt_file}, {workdir}, {task}
// and {model} are replaced; the prompt also arrives on stdin.
// agent "aider" {
//     command "aider" "--yes-always" "--message-file" "{prompt_file}"
//     pass-env "OPENAI_API_KEY"
// }

// A failover chain: the first available agent wins.
// agent "fast" {
//     try "claude" "codex"
// }
"#;

pub const EXAMPLE_TASK: &str = r#"// A task for a coding agent. `cassist check` validates it,
// `cassist prompt example` shows what the agent would be told.
task "example" {
    goal "Add a README section that explains how to run the tests."
    // kind "code"                 // code | explore | review | test
    // depends-on "other-task"
    context {
        file "README.md"           // globs relative to the project root
    }
    scope {                        // what the agent may change
        path "README.md"
    }
    constraints {
        - "Keep the existing sections unchanged"
    }
    acceptance {
        run "grep -qi test README.md" timeout="1m"
    }
}
"#;

/// The example's context block, as written in [`EXAMPLE_TASK`].
const EXAMPLE_CONTEXT: &str =
    "    context {\n        file \"README.md\"           // globs relative to the project root\n    }\n";

/// The example task for `cwd`: a context file must exist, so without a
/// README.md the context block is written commented out (else the example
/// would fail `cassist check` right away).
fn example_task(cwd: &Path) -> String {
    if cwd.join("README.md").is_file() {
        return EXAMPLE_TASK.to_owned();
    }
    EXAMPLE_TASK.replace(
        EXAMPLE_CONTEXT,
        "    // context {                 // context files must exist: add README.md, then uncomment\n    //     file \"README.md\"       // globs relative to the project root\n    // }\n",
    )
}

pub fn run(cwd: &Path, out: &Output) -> Result {
    let config = cwd.join(cassist_core::project::CONFIG_FILE);
    let example = cwd.join("tasks").join("example.kdl");
    let existing: Vec<String> = [&config, &example]
        .iter()
        .filter(|p| p.exists())
        .map(|p| p.strip_prefix(cwd).unwrap_or(p).display().to_string())
        .collect();
    if !existing.is_empty() {
        let d = cassist_core::spec::SpecDiagnostic::error(
            "init-exists",
            format!("{} already exist{}", existing.join(" and "), if existing.len() == 1 { "s" } else { "" }),
        )
        .help("cassist init never overwrites files; move them away first, or edit them");
        return Err(Error::Invalid(vec![d]));
    }
    std::fs::create_dir_all(cwd.join("tasks"))
        .and_then(|_| write_new(&config, CONFIG_TEMPLATE))
        .and_then(|_| write_new(&example, &example_task(cwd)))
        .map_err(|e| Error::Internal(format!("cannot write the files: {e}")))?;
    if !out.quiet {
        cassist_core::outln!("wrote cassist.kdl and tasks/example.kdl");
        cassist_core::outln!("next: edit tasks/example.kdl, then `cassist check` and `cassist plan`");
    }
    Ok(())
}

/// Creates a file that must not exist yet (no race with another writer).
fn write_new(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(path)?;
    f.write_all(text.as_bytes())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_example_holds_the_context_block() {
        assert!(super::EXAMPLE_TASK.contains(super::EXAMPLE_CONTEXT));
    }
}
