//! `cassist run`: the tasks of the plan through the scheduler, with the
//! reporter showing progress; then the summary and the reports.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{Error, Result};
use crate::cli::RunArgs;
use crate::report::progress::{Reporter, Style};
use crate::report::{self, Output};
use cassist_core::event::TaskEnd;
use cassist_core::plan::{Plan, PlannedTask, State};
use cassist_run::session::{Session, Settings, Sink};
use cassist_sandbox::process::Cancel;

pub fn run(cwd: &Path, args: &RunArgs, out: &Output) -> Result {
    // Read and checked, locked, recovered and planned; the team cache is
    // looked up for the tasks to run (not with --no-cache) and written with
    // what passes (with a signing key).
    let session = Session::open(cwd, &super::load_options(&args.tasks), &super::open_team_cache, !args.no_cache)?;
    let plan = session.plan();
    out.print_diagnostics(&plan.warnings);
    // --filter: the named tasks and what they depend on; --shard: a slice.
    let selected = session.select(&args.filter)?;
    // --force runs selected tasks again; it selects none.
    session.check_force(&args.force, &selected)?;
    let (selected, outside) = match args.shard {
        Some(shard) => shard_of(plan, selected, shard)?,
        None => (selected, HashMap::new()),
    };

    let cancel = Cancel::default();
    let (interrupts, told) = install_ctrl_c(cancel.clone());

    let settings = Settings {
        keep_workspace: args.keep_workspace,
        max_cost: args.max_cost,
        locked: args.locked,
        quiet: out.quiet,
        jobs: args.jobs.map_or_else(|| Settings::new().jobs, |j| j as usize),
        keep_going: args.keep_going,
        no_cache: args.no_cache,
        force: args.force.clone(),
    };
    let prepared = session.prepare(settings)?;
    let run_dir = prepared.run_dir().to_path_buf();
    let reporter = Reporter::start(*out, Style::detect(out), selected.len(), args.output_logs);
    if let Some(told) = told {
        tell_interrupts(told, reporter.interrupts());
    }
    let started = std::time::Instant::now();
    let events = reporter.events();
    let mut sink = Shown(Some(reporter));
    let ran = prepared.run(selected, outside, cancel.clone(), events, &mut sink);
    let interrupted = cancel.is_cancelled() || interrupts.load(Ordering::SeqCst) > 0;
    report::summary::print(out, &ran.reports, &run_dir);
    if let Some(path) = &args.report_json {
        write_report(path, &report::json::render(&ran.reports));
    }
    if let Some(path) = &args.junit {
        let xml = report::junit::render(&ran.reports, started.elapsed(), std::time::SystemTime::now());
        write_report(path, xml.as_bytes());
    }
    report::github::print(&ran.reports, &ran.plan().project.root);
    let (reports, needs_agent) = (ran.reports.clone(), ran.needs_agent.clone());
    for w in ran.finish() {
        cassist_core::errln!("warning: {w}");
    }
    // When several apply: 130 if interrupted, else 1 (a task failed, an
    // environment failure) before 3 (an agent would be needed); each
    // cause is said.
    let failed = reports.iter().any(|r| r.state().is_failure());
    if !needs_agent.is_empty() && (interrupted || failed) {
        cassist_core::errln!("{}", Error::Locked(needs_agent.clone()));
    }
    if interrupted {
        return Err(Error::Interrupted);
    }
    if failed {
        return Err(Error::TaskFailed);
    }
    if !needs_agent.is_empty() {
        return Err(Error::Locked(needs_agent));
    }
    if reports.iter().all(|r| r.state().is_success()) { Ok(()) } else { Err(Error::TaskFailed) }
}

/// The progress display as the run's sink: each task's end is shown as it
/// comes; the display stops once every task has ended.
struct Shown(Option<Reporter>);

impl Sink for Shown {
    fn finished(&mut self, end: &TaskEnd) {
        if let Some(r) = &self.0 {
            r.finished(end);
        }
    }

    fn all_finished(&mut self) {
        if let Some(r) = self.0.take() {
            r.finish();
        }
    }
}

/// `--shard K/N`: the selected tasks in slice K, and the output of each
/// task they depend on outside it, which must be up to date or stale (its
/// output is then the recorded one). Anything else is an error naming the task.
fn shard_of(
    plan: &Plan,
    selected: Vec<PlannedTask>,
    shard: crate::cli::Shard,
) -> Result<(Vec<PlannedTask>, HashMap<String, String>)> {
    let (mine, others): (Vec<PlannedTask>, Vec<PlannedTask>) =
        selected.into_iter().partition(|t| shard.contains(&t.task.name));
    let others: HashMap<&str, &PlannedTask> = others.iter().map(|t| (t.task.name.as_str(), t)).collect();
    let mut outside = HashMap::new();
    let mut problems = Vec::new();
    for t in &mine {
        for d in &t.key.spec.depends_on {
            let Some(dep) = others.get(d.as_str()) else { continue };
            // A stale task's recorded findings and output stand.
            if matches!(dep.state, State::UpToDate | State::Stale) {
                if let Some(l) = plan.lock.tasks.get(d) {
                    outside.insert(d.clone(), l.patch.clone());
                }
            } else {
                problems.push(format!(
                    "task `{}` depends on `{d}`, which is in another shard and is not up to date (state {})",
                    t.task.name,
                    dep.state.as_str()
                ));
            }
        }
    }
    if !problems.is_empty() {
        problems.sort();
        problems.dedup();
        return Err(Error::Input(format!(
            "--shard {shard}: {}; run the shards of its dependencies first (and keep .cassist/store between them), or run without --shard",
            problems.join("; ")
        )));
    }
    Ok((mine, outside))
}

/// Writes a report file; a failure is said, and the run goes on.
fn write_report(path: &Path, bytes: &[u8]) {
    if let Err(e) = cassist_core::fsx::write_atomic(path, bytes) {
        cassist_core::errln!("error: cannot write {}: {e}", path.display());
    }
}

/// Ctrl-C (or SIGTERM). The first stops new tasks and ends running agents
/// (cancelling `cancel` wakes every wait at once: each agent gets SIGTERM,
/// then SIGKILL after its grace period). The second kills what still runs
/// at once (SIGKILL to every child's process group), and the run still
/// ends as after the first: workspaces removed, store and tree
/// consistent. A third ends cassist at once. Returns the count of
/// interrupts seen, and a socket that gets a byte for each (for
/// [`tell_interrupts`]; `None` if it could not be made).
pub fn install_ctrl_c(cancel: Cancel) -> (&'static AtomicUsize, Option<std::os::unix::net::UnixStream>) {
    static COUNT: AtomicUsize = AtomicUsize::new(0);
    let pair = std::os::unix::net::UnixStream::pair().ok();
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let cancel = cancel.clone();
        let action = move || match COUNT.fetch_add(1, Ordering::SeqCst) {
            0 => cancel.cancel(),
            1 => cassist_sandbox::process::kill_all_groups(),
            _ => {
                cassist_sandbox::process::kill_all_groups();
                signal_hook::low_level::exit(cassist_core::exit::INTERRUPTED);
            }
        };
        // SAFETY: the action is async-signal-safe: atomics, and `write`
        // (Cancel::cancel), `kill` and `_exit`.
        let _ = unsafe { signal_hook::low_level::register(signal, action) };
        // Registered after the action: run after it, in the same handler.
        if let Some(writer) = pair.as_ref().and_then(|(w, _)| w.try_clone().ok()) {
            let _ = signal_hook::low_level::pipe::register(signal, writer);
        }
    }
    (&COUNT, pair.map(|(_, reader)| reader))
}

/// Tells `tell` of each interrupt as it comes, from a thread of its own
/// that waits for the bytes the signal handler writes to `told`: the
/// reporter says at once what cassist does about it.
fn tell_interrupts(mut told: std::os::unix::net::UnixStream, tell: impl Fn(usize) + Send + 'static) {
    let _ = std::thread::Builder::new().name("cassist-ctrl-c".into()).spawn(move || {
        use std::io::Read as _;
        let mut seen = 0;
        let mut buf = [0u8; 16];
        while let Ok(n) = told.read(&mut buf) {
            if n == 0 {
                break;
            }
            for _ in 0..n {
                seen += 1;
                tell(seen);
            }
        }
    });
}
