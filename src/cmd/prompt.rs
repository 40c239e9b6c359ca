//! `cassist prompt TASK`: the rendered prompt.

use std::path::Path;

use crate::cli::TaskArgs;
use crate::exit;
use crate::report::Output;

pub fn run(cwd: &Path, name: &str, args: &TaskArgs, out: &Output) -> i32 {
    let plan = match super::plan_or_exit(cwd, args, out) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let Some(task) = plan.get(name) else {
        out.print_diagnostics(&[plan.unknown_task(name)]);
        return exit::INVALID_INPUT;
    };
    // Findings of explore/review dependencies exist only once they ran.
    let summaries: Vec<(String, String)> = plan
        .summary_dependencies(task)
        .iter()
        .map(|d| (d.task.name.clone(), format!("(the final message of `{}` goes here once it has run)", d.task.name)))
        .collect();
    crate::out!("{}", plan.render_prompt(task, &summaries));
    exit::SUCCESS
}
