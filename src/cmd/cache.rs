//! `cassist cache ls|gc|clean`: the store.

use std::collections::HashSet;
use std::path::Path;

use super::{Error, Result};
use crate::cli::CacheCommand;
use crate::report::Output;
use crate::report::table::Table;
use crate::store::Store;

pub fn run(cwd: &Path, command: &CacheCommand, out: &Output) -> Result {
    let root = crate::project::find_root(cwd);
    let root = std::fs::canonicalize(&root).unwrap_or(root);
    let store = Store::open(&root);
    match command {
        CacheCommand::Ls => {
            let entries = store.list();
            if entries.is_empty() {
                crate::outln!("the store is empty ({})", store.dir().display());
                return Ok(());
            }
            let lock = crate::lock::Lock::load(&root).unwrap_or_default();
            let mut table = Table::new(&["TASK", "HASH", "AGE", "SIZE", "IN LOCK", "SUMMARY"]);
            let now = std::time::SystemTime::now();
            for (e, size, when) in &entries {
                let age = now.duration_since(*when).map_or("-".to_owned(), |d| human_age(d.as_secs()));
                let locked = lock.tasks.get(&e.task).is_some_and(|l| l.before == e.before);
                // An agent's text: shown, never sent to the terminal.
                let summary = crate::text::printable(e.summary.as_deref().unwrap_or(""));
                let summary = crate::text::first_line(&summary, 50).into_owned();
                table.row(vec![
                    e.task.clone(),
                    e.before[..12].to_owned(),
                    age,
                    human_size(*size),
                    if locked { out.green("yes") } else { out.dim("no") },
                    summary,
                ]);
            }
            crate::out!("{}", table.render(|h| out.dim(h)));
            crate::outln!(
                "{} entr{}, {} on disk in {} (SIZE: what removing the entry alone frees)",
                entries.len(),
                if entries.len() == 1 { "y" } else { "ies" },
                human_size(store.disk_bytes()),
                store.dir().display()
            );
            Ok(())
        }
        CacheCommand::Gc { keep } => {
            let lock = crate::lock::Lock::load(&root).map_err(|e| Error::Input(e.0))?;
            let referenced: HashSet<String> = lock.tasks.values().map(|l| l.before.clone()).collect();
            let _guard = crate::store::ProjectLock::acquire(&root, || {
                crate::errln!("waiting for a cassist run on this project to finish...")
            });
            let (removed, freed) =
                store.gc(&referenced, *keep).map_err(|e| Error::Internal(format!("cannot collect the store: {e}")))?;
            crate::outln!(
                "removed {removed} entr{}, freed {}",
                if removed == 1 { "y" } else { "ies" },
                human_size(freed)
            );
            // The workspaces kept for the user (--keep-workspace, blocked
            // tasks) stay until now.
            let (kept, bytes) = crate::workspace::remove_kept(&crate::workspace::parent_dir(&root), &root);
            if kept > 0 {
                crate::outln!("removed {kept} kept workspace(s), freed {}", human_size(bytes));
            }
            Ok(())
        }
        CacheCommand::Clean => {
            let _guard = crate::store::ProjectLock::acquire(&root, || {
                crate::errln!("waiting for a cassist run on this project to finish...")
            });
            let bytes = store.disk_bytes();
            store.clean().map_err(|e| Error::Internal(format!("cannot remove {}: {e}", store.dir().display())))?;
            crate::outln!("removed {}, freed {}", store.dir().display(), human_size(bytes));
            Ok(())
        }
    }
}

fn human_size(bytes: u64) -> String {
    match bytes {
        b if b < 1024 => format!("{b} B"),
        b if b < 1024 * 1024 => format!("{:.1} KiB", b as f64 / 1024.0),
        b if b < 1024 * 1024 * 1024 => format!("{:.1} MiB", b as f64 / 1048576.0),
        b => format!("{:.1} GiB", b as f64 / 1073741824.0),
    }
}

fn human_age(secs: u64) -> String {
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}
