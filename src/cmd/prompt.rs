//! `cassist prompt TASK`: the rendered prompt (its control characters
//! shown, not sent to the terminal: findings of dependencies and context
//! files may be an agent's text).

use std::path::Path;

use super::{Error, Result};
use crate::cli::TaskArgs;
use crate::report::Output;

pub fn run(cwd: &Path, name: &str, args: &TaskArgs, out: &Output) -> Result {
    let plan = super::load_plan(cwd, args, out)?;
    let task = plan.get(name).ok_or_else(|| Error::Invalid(vec![plan.unknown_task(name)]))?;
    // Findings of explore/review dependencies exist only once they ran.
    let summaries: Vec<(String, String)> = plan
        .summary_dependencies(task)
        .iter()
        .map(|d| (d.task.name.clone(), format!("(the final message of `{}` goes here once it has run)", d.task.name)))
        .collect();
    crate::out!("{}", crate::text::printable(&plan.render_prompt(task, &summaries)));
    Ok(())
}
