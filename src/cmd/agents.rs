//! `cassist agents`: built-in and custom agents, installed?, version.

use std::path::Path;

use super::{Error, Result};
use crate::report::Output;
use crate::report::table::Table;
use cassist_core::spec::CustomAgentDef;
use cassist_core::spec::Diagnostics;
use cassist_run::agent::{Agent, BUILTINS, which};

struct Row {
    /// The built-in agent, whose CLI is asked its version.
    builtin: Option<&'static dyn Agent>,
    name: String,
    kind: &'static str,
    program: String,
    found: Option<std::path::PathBuf>,
    version: Option<String>,
    hint: String,
}

pub fn run(cwd: &Path, out: &Output) -> Result {
    let mut diags = Diagnostics::default();
    let project = cassist_core::project::Project::load(cwd, &mut diags);
    if diags.has_errors() {
        return Err(Error::Invalid(diags.sorted()));
    }
    let mut rows: Vec<Row> = Vec::new();
    for agent in BUILTINS {
        rows.push(Row {
            builtin: Some(*agent),
            name: agent.name().to_owned(),
            kind: "built-in",
            program: agent.program().to_owned(),
            found: which(agent.program(), None),
            version: None,
            hint: agent.install_line().unwrap_or_default().to_owned(),
        });
    }
    for (name, agent) in &project.config.agents {
        match &agent.def {
            CustomAgentDef::Command { argv } => {
                let program = argv.first().cloned().unwrap_or_default();
                let found = which(&program, None).or_else(|| {
                    // Relative programs are relative to the project root.
                    program.contains('/').then(|| project.root.join(&program)).filter(|p| p.is_file())
                });
                rows.push(Row {
                    builtin: None,
                    name: name.clone(),
                    kind: "custom",
                    program,
                    found,
                    version: None,
                    hint: "check the `command` in cassist.kdl".to_owned(),
                });
            }
            CustomAgentDef::Try(list) => {
                let names: Vec<&str> = list.iter().map(|s| s.value.as_str()).collect();
                rows.push(Row {
                    builtin: None,
                    name: name.clone(),
                    kind: "failover",
                    program: format!("try {}", names.join(", ")),
                    found: None,
                    version: None,
                    hint: String::new(),
                });
            }
        }
    }
    // Versions of built-in CLIs, asked in parallel: each may take a while
    // to start (Node).
    std::thread::scope(|s| {
        for row in rows.iter_mut() {
            if let (Some(agent), Some(path)) = (row.builtin, row.found.clone()) {
                s.spawn(move || row.version = agent.version(&path));
            }
        }
    });
    // A failover chain is available when one of its agents is.
    let available: Vec<(String, bool)> = rows.iter().map(|r| (r.name.clone(), r.found.is_some())).collect();
    for row in rows.iter_mut().filter(|r| r.kind == "failover") {
        if let Some(CustomAgentDef::Try(list)) = project.config.agents.get(&row.name).map(|a| &a.def) {
            let first = list.iter().find(|n| available.iter().any(|(a, ok)| a == &n.value && *ok));
            row.hint = match first {
                Some(n) => format!("would use {}", n.value),
                None => "none of its agents is installed".to_owned(),
            };
        }
    }
    let mut table = Table::new(&["AGENT", "TYPE", "PROGRAM", "INSTALLED", "VERSION"]);
    for r in &rows {
        let installed = match (&r.found, r.kind) {
            (_, "failover") => {
                if r.hint.starts_with("would") {
                    out.green(&r.hint)
                } else {
                    out.yellow(&r.hint)
                }
            }
            (Some(p), _) => out.green(&p.display().to_string()),
            (None, "built-in") => out.yellow("not found"),
            (None, _) => out.yellow(&format!("not found ({})", r.hint)),
        };
        table.row(vec![
            r.name.clone(),
            r.kind.to_owned(),
            r.program.clone(),
            installed,
            // What the program printed: shown, never sent to the terminal.
            r.version.as_deref().map_or_else(|| "-".to_owned(), |v| cassist_core::text::printable(v).into_owned()),
        ]);
    }
    cassist_core::out!("{}", table.render(|h| out.dim(h)));
    // How to install the missing CLIs: whole lines, to paste into a shell.
    let missing: Vec<&Row> = rows.iter().filter(|r| r.kind == "built-in" && r.found.is_none()).collect();
    if !missing.is_empty() {
        cassist_core::outln!("\nTo install a missing CLI, run its line:");
        for r in missing {
            cassist_core::outln!("  {}", r.hint);
        }
    }
    Ok(())
}
