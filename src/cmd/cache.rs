//! `cassist cache ls|gc|clean`: the store; `cache push|pull|keygen`: the
//! remote cache (`gc` and `clean` never touch it).

use std::collections::HashSet;
use std::path::Path;

use super::{Error, Result};
use crate::cli::CacheCommand;
use crate::report::Output;
use crate::report::table::Table;
use cassist_core::store::Store;

pub fn run(cwd: &Path, command: &CacheCommand, out: &Output) -> Result {
    let root = cassist_core::project::find_root(cwd);
    let root = std::fs::canonicalize(&root).unwrap_or(root);
    let store = Store::open(&root);
    match command {
        CacheCommand::Ls => {
            let entries = store.list();
            if entries.is_empty() {
                cassist_core::outln!("the store is empty ({})", store.dir().display());
                return Ok(());
            }
            let lock = cassist_core::lock::Lock::load(&root).unwrap_or_default();
            // Which entries the remote also has (a column when there is a
            // remote that answers).
            // A config that does not read (or a bad key) leaves the
            // column out: listing the store never depends on the remote.
            let remote = open_remote(&root).ok().flatten();
            let on_remote = remote.as_ref().and_then(|r| {
                let befores: Vec<String> = entries.iter().map(|(e, _, _)| e.before.clone()).collect();
                let (have, warning) = r.has_entries(&befores);
                if let Some(w) = warning {
                    cassist_core::errln!("warning: {w}");
                }
                have
            });
            let mut headers = vec!["TASK", "HASH", "AGE", "SIZE", "IN LOCK"];
            if on_remote.is_some() {
                headers.push("REMOTE");
            }
            headers.push("SUMMARY");
            let mut table = Table::new(&headers);
            let now = std::time::SystemTime::now();
            for (e, size, when) in &entries {
                let age = now.duration_since(*when).map_or("-".to_owned(), |d| human_age(d.as_secs()));
                let locked = lock.tasks.get(&e.task).is_some_and(|l| l.before == e.before);
                // An agent's text: shown, never sent to the terminal.
                let summary = cassist_core::text::printable(e.summary.as_deref().unwrap_or(""));
                let summary = cassist_core::text::first_line(&summary, 50).into_owned();
                let mut row = vec![
                    e.task.clone(),
                    e.before[..12].to_owned(),
                    age,
                    human_size(*size),
                    if locked { out.green("yes") } else { out.dim("no") },
                ];
                if let Some(have) = &on_remote {
                    row.push(if have.contains(&e.before) { out.green("yes") } else { out.dim("no") });
                }
                row.push(summary);
                table.row(row);
            }
            cassist_core::out!("{}", table.render(|h| out.dim(h)));
            cassist_core::outln!(
                "{} entr{}, {} on disk in {} (SIZE: what removing the entry alone frees)",
                entries.len(),
                if entries.len() == 1 { "y" } else { "ies" },
                human_size(store.disk_bytes()),
                store.dir().display()
            );
            Ok(())
        }
        CacheCommand::Gc { keep } => {
            let lock = cassist_core::lock::Lock::load(&root).map_err(|e| Error::Input(e.to_string()))?;
            let referenced: HashSet<String> = lock.tasks.values().map(|l| l.before.clone()).collect();
            let _guard = cassist_core::store::ProjectLock::acquire(&root, || {
                cassist_core::errln!("waiting for a cassist run on this project to finish...")
            });
            let (removed, freed) =
                store.gc(&referenced, *keep).map_err(|e| Error::Internal(format!("cannot collect the store: {e}")))?;
            cassist_core::outln!(
                "removed {removed} entr{}, freed {}",
                if removed == 1 { "y" } else { "ies" },
                human_size(freed)
            );
            // The workspaces kept for the user (--keep-workspace, blocked
            // tasks) stay until now.
            let parent = cassist_run::workspace::parent_dir(&root);
            let (kept, bytes) = cassist_run::workspace::remove_kept(&parent, &root);
            if kept > 0 {
                cassist_core::outln!("removed {kept} kept workspace(s), freed {}", human_size(bytes));
            }
            // Those of projects that are gone: no run of theirs will.
            let (orphans, bytes) =
                cassist_run::workspace::remove_orphaned_kept(&parent, cassist_run::workspace::ORPHAN_GRACE);
            if orphans > 0 {
                cassist_core::outln!(
                    "removed {orphans} workspace(s) kept for projects that no longer exist, freed {}",
                    human_size(bytes)
                );
            }
            Ok(())
        }
        CacheCommand::Clean => {
            let _guard = cassist_core::store::ProjectLock::acquire(&root, || {
                cassist_core::errln!("waiting for a cassist run on this project to finish...")
            });
            let bytes = store.disk_bytes();
            store.clean().map_err(|e| Error::Internal(format!("cannot remove {}: {e}", store.dir().display())))?;
            cassist_core::outln!("removed {}, freed {}", store.dir().display(), human_size(bytes));
            Ok(())
        }
        CacheCommand::Keygen => {
            let (public, secret) = cassist_remote::sign::keygen().map_err(|e| Error::Internal(e.to_string()))?;
            cassist_core::outln!("public {public}");
            cassist_core::outln!("secret {secret}");
            Ok(())
        }
        CacheCommand::Push => push(&root, &store, out),
        CacheCommand::Pull(args) => pull(cwd, args, out),
    }
}

/// The remote of the project at `root` (its `cassist.kdl` and the
/// environment).
fn open_remote(root: &Path) -> Result<Option<cassist_remote::Remote>> {
    let mut diags = cassist_core::spec::Diagnostics::default();
    let project = cassist_core::project::Project::load(root, &mut diags);
    if diags.has_errors() {
        return Err(Error::Invalid(diags.sorted()));
    }
    super::open_remote(&project.config)
}

/// How long `cache push` waits for its uploads.
const PUSH_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

/// `cache push`: every local entry the remote lacks goes up, signed.
fn push(root: &Path, store: &Store, out: &Output) -> Result {
    let remote = open_remote(root)?.ok_or_else(|| {
        Error::Input("no remote cache: configure `cache { remote \"…\" }` in cassist.kdl, or set CASSIST_REMOTE".into())
    })?;
    if !remote.can_write() {
        return Err(Error::Input(format!(
            "pushing needs a signing key: set {} to the `secret` line of `cassist cache keygen`",
            cassist_remote::ENV_SIGNING_KEY
        )));
    }
    let entries = store.list();
    let befores: Vec<String> = entries.iter().map(|(e, _, _)| e.before.clone()).collect();
    let (have, warning) = remote.has_entries(&befores);
    if let Some(w) = warning {
        return Err(Error::Internal(w));
    }
    let have = have.unwrap_or_default();
    let mut skipped = 0;
    for (e, _, _) in &entries {
        if have.contains(&e.before) {
            skipped += 1;
        } else {
            remote.spawn_upload(store, &e.task, &e.before);
        }
    }
    let (sent, warnings) = remote.finish_uploads(PUSH_WAIT);
    for w in &warnings {
        cassist_core::errln!("warning: {w}");
    }
    if !out.quiet {
        cassist_core::outln!(
            "pushed {sent} entr{} to {}; {skipped} already there",
            if sent == 1 { "y" } else { "ies" },
            remote.url()
        );
    }
    if sent + skipped < entries.len() { Err(Error::TaskFailed) } else { Ok(()) }
}

/// `cache pull [PATH...]`: the tasks in PATH whose state would be `run`
/// are looked up remotely; what passes every check lands in the store.
fn pull(cwd: &Path, args: &crate::cli::TaskArgs, out: &Output) -> Result {
    let loaded = cassist_core::plan::load(cwd, &super::load_options(args)).map_err(Error::Invalid)?;
    let remote = super::open_remote(&loaded.project.config)?.ok_or_else(|| {
        Error::Input("no remote cache: configure `cache { remote \"…\" }` in cassist.kdl, or set CASSIST_REMOTE".into())
    })?;
    let plan = cassist_run::session::plan(cwd, &super::load_options(args), loaded, Some(&remote))?;
    out.print_diagnostics(&plan.warnings);
    let pulled = plan.tasks.iter().filter(|t| t.cached.remote).count();
    if !out.quiet {
        cassist_core::outln!(
            "pulled {pulled} entr{} from {}; {} task(s) still to run",
            if pulled == 1 { "y" } else { "ies" },
            remote.url(),
            plan.tasks.iter().filter(|t| t.state == cassist_core::plan::State::Run).count()
        );
    }
    Ok(())
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
