//! `cassist explain TASK`: each named input with its hash (names and
//! reasons through [`cassist_core::text::printable`]: a file name may be an
//! agent's).

use std::path::Path;

use super::{Error, Result};
use crate::cli::TaskArgs;
use crate::report::Output;
use crate::report::table::Table;

pub fn run(cwd: &Path, name: &str, args: &TaskArgs, json: bool, out: &Output) -> Result {
    let plan = super::load_plan_remote(cwd, args, out)?;
    let task = plan.get(name).ok_or_else(|| Error::Invalid(vec![plan.unknown_task(name)]))?;
    if json {
        #[derive(serde::Serialize)]
        struct Doc<'a> {
            name: &'a str,
            hash: &'a str,
            state: &'static str,
            key: &'a cassist_core::plan::hash::InputKey,
        }
        let doc = Doc { name: &task.task.name, hash: &task.hash, state: task.state.as_str(), key: &task.key };
        cassist_core::outln!("{}", super::to_json(&doc)?);
        return Ok(());
    }
    cassist_core::outln!("{} {} ({})", out.bold("task"), task.task.name, task.task.source.name);
    cassist_core::outln!("{} {}", out.bold("hash"), task.hash);
    cassist_core::outln!("{} {}", out.bold("state"), task.shown_state());
    for reason in cassist_core::plan::why::why(&plan, task) {
        cassist_core::outln!("  {}", cassist_core::text::printable(&reason));
    }
    cassist_core::outln!();
    // Each input against the recorded one (the state the last run left).
    let recorded: std::collections::HashMap<(String, String), String> = plan
        .lock
        .tasks
        .get(&task.task.name)
        .and_then(|l| plan.store.get_entry(&l.before))
        .and_then(|e| e.after_key.or(Some(e.key)))
        .and_then(|k| k["inputs"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|i| {
            Some(((i["kind"].as_str()?.to_owned(), i["name"].as_str()?.to_owned()), i["hash"].as_str()?.to_owned()))
        })
        .collect();
    let mut table = Table::new(&["INPUT", "NAME", "HASH", "VS. RECORDED"]);
    for i in &task.key.inputs {
        let hash = if i.hash.is_empty() { "-".to_owned() } else { i.hash[..16].to_owned() };
        let mark = match recorded.get(&(i.kind.to_owned(), i.name.clone())) {
            _ if recorded.is_empty() => "-".to_owned(),
            Some(h) if *h == i.hash => out.green("unchanged"),
            Some(_) => out.yellow("changed"),
            None => out.yellow("new"),
        };
        table.row(vec![i.kind.to_owned(), cassist_core::text::printable(&i.name).into_owned(), hash, mark]);
    }
    cassist_core::out!("{}", table.render(|h| out.dim(h)));
    Ok(())
}
