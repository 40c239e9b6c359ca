//! `cassist explain TASK`: each named input with its hash.

use std::path::Path;

use crate::cli::TaskArgs;
use crate::exit;
use crate::report::Output;
use crate::report::table::Table;

pub fn run(cwd: &Path, name: &str, args: &TaskArgs, json: bool, out: &Output) -> i32 {
    let plan = match super::plan_or_exit(cwd, args, out) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let Some(task) = plan.get(name) else {
        out.print_diagnostics(&[plan.unknown_task(name)]);
        return exit::INVALID_INPUT;
    };
    if json {
        #[derive(serde::Serialize)]
        struct Doc<'a> {
            name: &'a str,
            hash: &'a str,
            state: &'static str,
            key: &'a crate::plan::hash::InputKey,
        }
        let doc = Doc { name: &task.task.name, hash: &task.hash, state: task.state.as_str(), key: &task.key };
        match serde_json::to_string_pretty(&doc) {
            Ok(s) => crate::outln!("{s}"),
            Err(e) => {
                eprintln!("error: cannot write JSON: {e}");
                return exit::TASK_FAILED;
            }
        }
        return exit::SUCCESS;
    }
    crate::outln!("{} {} ({})", out.bold("task"), task.task.name, task.task.source.name);
    crate::outln!("{} {}", out.bold("hash"), task.hash);
    crate::outln!("{} {}", out.bold("state"), task.state.as_str());
    crate::outln!("  {}", out.dim("no run of this task is recorded yet: every input is new"));
    crate::outln!();
    let mut table = Table::new(&["INPUT", "NAME", "HASH"]);
    for i in &task.key.inputs {
        let hash = if i.hash.is_empty() { "-".to_owned() } else { i.hash[..16].to_owned() };
        table.row(vec![i.kind.to_owned(), i.name.clone(), hash]);
    }
    crate::out!("{}", table.render(|h| out.dim(h)));
    exit::SUCCESS
}
