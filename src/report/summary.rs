//! The end of `cassist run` on stdout: a table of the tasks (the parts of a
//! split task under its row), then each failure with the tail of its
//! output, where its transcript is and the workspace kept, then a count.
//! With `-q`, the failures and the count only.
//! Reasons, tails and part names (file names) go through
//! [`printable`]: what an agent wrote never drives the terminal.

use std::path::Path;

use crate::report::Output;
use crate::report::table::Table;
use cassist_core::event::{PartState, SubtaskReport, TaskEnd};
use cassist_core::text::printable;

/// Prints the summary of `ends`; with `-q`, without the table: only the
/// failures and the count.
pub fn print(out: &Output, ends: &[TaskEnd], run_dir: &Path) {
    if !out.quiet {
        print_table(out, ends);
    }
    for e in ends.iter().filter(|e| e.state().is_failure()) {
        if !out.quiet {
            cassist_core::outln!();
        }
        print_failure(out, e);
    }
    let passed = ends.iter().filter(|e| e.state().is_success()).count();
    if !out.quiet {
        cassist_core::outln!();
    }
    cassist_core::outln!("{passed} of {} task(s) passed; records in {}", ends.len(), run_dir.display());
}

/// The table of the tasks, a row per task and one per part of a split
/// task, after a blank line; a MODEL column when a task asked for one.
fn print_table(out: &Output, ends: &[TaskEnd]) {
    let models = ends.iter().any(|e| e.model.is_some());
    let mut headers = vec!["TASK", "STATE", "AGENT", "ATTEMPTS", "TIME", "COST"];
    if models {
        headers.insert(3, "MODEL");
    }
    let mut table = Table::new(&headers);
    for e in ends {
        let r = &e.report;
        let mut row = vec![
            r.name.clone(),
            out.end_state(e),
            printable(&r.agent).into_owned(),
            r.attempts.to_string(),
            cassist_core::text::duration_ms(r.duration_ms),
            cost(r.cost_usd),
        ];
        if models {
            row.insert(3, e.model.as_deref().map_or_else(|| out.dim("default"), |m| printable(m).into_owned()));
        }
        table.row(row);
        subtask_rows(out, &mut table, &r.subtasks, 1, models);
    }
    cassist_core::outln!();
    cassist_core::out!("{}", table.render(|h| out.dim(h)));
}

/// A failed task: its name and reason, the tail of its failing output,
/// where its transcript and its kept workspace are.
fn print_failure(out: &Output, e: &TaskEnd) {
    let reason = printable(e.report.reason.as_deref().unwrap_or("failed"));
    cassist_core::outln!("{} {}: {reason}", out.red("✗"), e.name());
    if !e.tail.trim().is_empty() {
        let tail = printable(&cassist_core::text::tail_lines(&e.tail, 1500)).into_owned();
        for line in tail.lines().rev().take(15).collect::<Vec<_>>().into_iter().rev() {
            cassist_core::outln!("    {}", out.dim(line));
        }
    }
    if let Some(t) = &e.transcript {
        cassist_core::outln!("  transcript: {}", t.display());
    }
    if let Some(w) = &e.kept_workspace {
        cassist_core::outln!("  workspace kept: {}", w.display());
        cassist_core::outln!(
            "  {}",
            out.dim("(the task's files with its change, to test in; `cassist cache gc` removes it)")
        );
    }
}

/// The parts of a split task under its row, indented by depth.
fn subtask_rows(out: &Output, table: &mut Table, subtasks: &[SubtaskReport], depth: usize, models: bool) {
    for s in subtasks {
        let state = s.state.as_str();
        let state = match s.state {
            PartState::Passed => out.green(state),
            PartState::Split | PartState::Skipped => out.yellow(state),
            PartState::Failed | PartState::Blocked => out.red(state),
        };
        let mut row = vec![
            format!("{}└ {}", "  ".repeat(depth - 1), printable(&s.name)),
            state,
            String::new(),
            s.attempts.to_string(),
            cassist_core::text::duration_ms(s.duration_ms),
            cost(s.cost_usd),
        ];
        if models {
            row.insert(3, String::new());
        }
        table.row(row);
        subtask_rows(out, table, &s.subtasks, depth + 1, models);
    }
}

/// `$0.42`, or `-` when the agent reported no cost.
fn cost(usd: Option<f64>) -> String {
    usd.map_or("-".to_owned(), |c| format!("${c:.2}"))
}
