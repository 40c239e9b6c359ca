//! `cassist run`: the tasks of the plan through the scheduler, with the
//! reporter showing progress; then the summary and the reports.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{Error, Result};
use crate::cli::RunArgs;
use crate::report::progress::{Reporter, Style};
use crate::report::{self, Output};
use cassist_core::plan::{Plan, PlannedTask, State};
use cassist_run::runner::Runner;
use cassist_run::scheduler;
use cassist_run::workspace::{Mode, detect_mode};
use cassist_sandbox::process::{Cancel, Redactor};

pub fn run(cwd: &Path, args: &RunArgs, out: &Output) -> Result {
    // Task files and config are read and checked first: invalid input ends
    // here, with nothing written.
    let loaded = cassist_core::plan::load(cwd, &super::load_options(&args.tasks)).map_err(Error::Invalid)?;
    // One run at a time per project: a second waits, then plans on what
    // the first recorded (and runs nothing twice).
    let root = loaded.project.root.clone();
    let project_lock = cassist_core::store::ProjectLock::acquire(&root, || {
        cassist_core::errln!("waiting for another cassist run on this project to finish...")
    })
    .map_err(|e| Error::Internal(format!("cannot lock {}: {e}", cassist_core::fsx::state_dir(&root).display())))?;
    // A run killed while this one waited for the lock may have left an
    // integration unfinished.
    super::recover(&root, true);
    // The remote cache: looked up for the tasks to run (not with
    // --no-cache), written with what passes (with a signing key).
    let remote = super::open_remote(&loaded.project.config)?;
    let plan = super::plan_with_remote(
        cwd,
        &super::load_options(&args.tasks),
        loaded,
        remote.as_ref().filter(|_| !args.no_cache),
    )?;
    out.print_diagnostics(&plan.warnings);
    // --filter: the named tasks and what they depend on; --shard: a slice.
    let selected: Vec<PlannedTask> = select(&plan, &args.filter)?.into_iter().cloned().collect();
    let (selected, outside) = match args.shard {
        Some(shard) => shard_of(&plan, selected, shard)?,
        None => (selected, HashMap::new()),
    };

    let cancel = Cancel::default();
    let (interrupts, told) = install_ctrl_c(cancel.clone());

    let settings = Settings {
        keep_workspace: args.keep_workspace,
        max_cost: args.max_cost,
        locked: args.locked,
        quiet: out.quiet,
    };
    let prepared = prepare(plan, &settings)?;
    let jobs = args.jobs.map_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()), |j| j as usize);
    let reporter = Reporter::start(*out, Style::detect(out), selected.len(), args.output_logs);
    if let Some(told) = told {
        tell_interrupts(told, reporter.interrupts());
    }
    let runner = prepared.runner(cancel.clone(), reporter.events());
    let run_dir = runner.run_dir.clone();

    cassist_core::plan::timing("prepare run");
    let started = std::time::Instant::now();
    let opts = scheduler::Options { jobs, keep_going: args.keep_going, locked: args.locked, no_cache: args.no_cache };
    let outcome = scheduler::run(runner.clone(), selected.clone(), outside, &opts, &mut |r| {
        reporter.finished(r);
        // Recorded in the store: its objects and signed entry go up in
        // the background (decision 6), never holding up the run.
        if let Some(remote) = &remote
            && r.state() == cassist_core::event::TaskState::Passed
        {
            remote.spawn_upload(&runner.plan.store, r.name(), &r.report.hash);
        }
    });
    reporter.finish();
    // Every change was flushed: no layer is in use.
    cassist_run::workspace::remove_layers(&runner.workspaces);
    let scheduler::Outcome { mut reports, outputs, mut lock, needs_agent, touched, hashed_at_end } = outcome;
    for r in &mut reports {
        r.refused = needs_agent.iter().any(|(name, _)| name == r.name());
    }
    let plan = &runner.plan;

    cassist_core::plan::timing("run tasks");
    let interrupted = cancel.is_cancelled() || interrupts.load(Ordering::SeqCst) > 0;
    let mut moved = Vec::new();
    if touched && !interrupted && !args.locked {
        moved = update_after_states(plan, &selected, &reports, &outputs, &hashed_at_end, &mut lock);
    }
    plan.save_caches();
    cassist_core::plan::timing("final hashes");
    report::summary::print(out, &reports, &run_dir);
    if let Some(path) = &args.report_json {
        write_report(path, &report::json::render(&reports));
    }
    if let Some(path) = &args.junit {
        let xml = report::junit::render(&reports, started.elapsed(), std::time::SystemTime::now());
        write_report(path, xml.as_bytes());
    }
    report::github::print(&reports, &plan.project.root);
    // The uploads are waited for, bounded, without the project lock.
    drop(project_lock);
    if let Some(remote) = &remote {
        // Interrupted: a short wait only, what is left goes with `cache push`.
        let wait = if interrupted { std::time::Duration::from_secs(2) } else { UPLOAD_WAIT };
        finish_uploads(remote, &plan.store, &moved, wait);
    }
    if !needs_agent.is_empty() {
        return Err(Error::Locked(needs_agent));
    }
    if interrupted {
        return Err(Error::Interrupted);
    }
    if reports.iter().all(|r| r.state().is_success()) { Ok(()) } else { Err(Error::TaskFailed) }
}

/// How [`prepare`] sets up a run.
pub struct Settings {
    pub keep_workspace: bool,
    /// `--max-cost` (for the whole run).
    pub max_cost: Option<f64>,
    pub locked: bool,
    /// No notes on stderr.
    pub quiet: bool,
}

/// A run set up, before its runner has a cancel token and an event sink.
pub struct Prepared {
    plan: Plan,
    exe: PathBuf,
    wrapper: PathBuf,
    workspaces: PathBuf,
    mode: Mode,
    run_dir: PathBuf,
    landlock: bool,
    keep_workspace: bool,
    max_cost: Option<f64>,
    locked: bool,
}

/// Sets up a run of `plan`'s tasks (the caller holds the project lock):
/// stale workspaces removed, the workspace mode and Landlock probed (with a
/// note on stderr when one is missing), the run's record folder made.
/// Shared by `run` and the MCP server.
pub fn prepare(plan: Plan, settings: &Settings) -> Result<Prepared> {
    let quiet = settings.quiet;
    let exe = std::env::current_exe().map_err(|e| Error::Internal(format!("cannot find the cassist binary: {e}")))?;
    let workspaces = cassist_run::workspace::parent_dir(&plan.project.root);
    cassist_run::workspace::remove_stale_in_background(&workspaces);
    if settings.keep_workspace {
        // This run keeps its own: the ones earlier runs kept go.
        let (removed, _) = cassist_run::workspace::remove_kept(&workspaces, &plan.project.root);
        if removed > 0 && !quiet {
            cassist_core::errln!("note: removed {removed} workspace(s) kept by an earlier run of this project");
        }
    }
    let (mode, why) = detect_mode(&exe, &plan.project.root, &workspaces);
    let wrapper = cassist_run::workspace::wrapper_program(&exe, &plan.project.root, quiet);
    if mode == Mode::Copy && !quiet {
        let because = match why {
            Some(why) => format!("copy-on-write workspaces are unavailable here ({why})"),
            None => "CASSIST_WORKSPACE=copy".to_owned(),
        };
        cassist_core::errln!(
            "note: {because}; each task works on a copy of the project instead, and its commands go without what namespaces give: a private /tmp, /var/tmp and /dev, a PID namespace of their own (they see every process of the machine), a read-only .git, ptys, and a copy-on-write view of the agents' state folders (what an agent writes in ~/.claude, ~/.codex, ~/.gemini, ~/.factory or ~/.cache stays there)"
        );
    }
    let run_dir = cassist_core::fsx::state_dir(&plan.project.root).join("runs").join(run_id());
    cassist_core::fsx::ensure_state_dir(&plan.project.root)
        .and_then(|_| std::fs::create_dir_all(&run_dir))
        .map_err(|e| Error::Internal(format!("cannot create {}: {e}", run_dir.display())))?;
    // CASSIST_LANDLOCK=off leaves the sandbox to the agents' flags and the
    // review, as on a kernel without Landlock.
    let landlock_off = std::env::var("CASSIST_LANDLOCK").is_ok_and(|v| v == "off");
    let landlock = !landlock_off && cassist_sandbox::sandbox::landlock_abi() > 0;
    if !landlock && !landlock_off && !quiet {
        let copy = if mode == Mode::Copy {
            "; in copy mode nothing keeps a command from reading other tasks' folders or the machine's terminals, nor from writing outside its workspace"
        } else {
            ""
        };
        cassist_core::errln!(
            "note: this kernel has no Landlock: sandbox levels rely on the agents' own flags and on the review of each change{copy}"
        );
    }
    Ok(Prepared {
        plan,
        exe,
        wrapper,
        workspaces,
        mode,
        run_dir,
        landlock,
        keep_workspace: settings.keep_workspace,
        max_cost: settings.max_cost,
        locked: settings.locked,
    })
}

impl Prepared {
    /// The runner of the run, stopped by `cancel`, telling `events`.
    pub fn runner(self, cancel: Cancel, events: cassist_core::event::Events) -> Arc<Runner> {
        Arc::new(Runner {
            plan: Arc::new(self.plan),
            exe: self.exe,
            wrapper: self.wrapper,
            workspaces: self.workspaces,
            mode: self.mode,
            run_dir: self.run_dir,
            keep_workspace: self.keep_workspace,
            landlock: self.landlock,
            shared_state: shared_state(),
            redactor: Arc::new(Redactor::from_env()),
            cancel,
            events,
            max_cost: self.max_cost,
            locked: self.locked,
            spent: Default::default(),
            integration: Default::default(),
            pending: Default::default(),
        })
    }
}

/// Moves the after-states of a run's recorded tasks to the project as the
/// run left it. A later task may change an earlier one's context files or
/// outputs: the state the project is left in is what each recorded task's
/// after-state (inputs and outputs) must describe, so an unchanged project
/// is up-to-date next time. This is the only place an after-state moves;
/// the caller never calls it with `--locked` (which never writes the lock)
/// nor after an interrupted run. Returns the task and input hash of each
/// entry whose after-state moved (the remote cache gets it again). The
/// tasks in `hashed_at_end` were hashed on the tree as the run leaves it
/// when their change was written (nothing was written after): they are
/// not hashed again.
pub fn update_after_states(
    plan: &Plan,
    selected: &[PlannedTask],
    reports: &[cassist_core::event::TaskEnd],
    outputs: &HashMap<String, String>,
    hashed_at_end: &std::collections::HashSet<String>,
    lock: &mut cassist_core::lock::Lock,
) -> Vec<(String, String)> {
    let mut changed = Vec::new();
    for (planned, r) in selected.iter().zip(reports) {
        if !r.state().is_success()
            || !lock.tasks.contains_key(&planned.task.name)
            || hashed_at_end.contains(&planned.task.name)
        {
            continue;
        }
        let mut t = planned.clone();
        if plan.rehash(&mut t, outputs).is_ok()
            && let Some(entry) = lock.tasks.get_mut(&t.task.name)
        {
            let now = plan.outputs_now(entry);
            let moved = now.as_ref().is_some_and(|o| entry.outputs != Some(cassist_core::plan::state::outputs_hash(o)));
            if entry.after != t.hash || moved {
                cassist_run::cache::update_after(&plan.store, entry, &t, now);
                changed.push(cassist_core::lock::LockLine { task: t.task.name.clone(), entry: Some(entry.clone()) });
            }
        }
    }
    if let Err(e) = cassist_core::lock::Lock::update(&plan.project.root, &changed) {
        cassist_core::errln!("warning: could not write cassist.lock: {e}");
    }
    changed.iter().filter_map(|l| Some((l.task.clone(), l.entry.as_ref()?.before.clone()))).collect()
}

/// How long the end of a run waits for its uploads to the remote cache.
pub const UPLOAD_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Waits for the uploads of the run (at most `wait` in all), then sends again the entries whose
/// after-state the end of the run moved (`moved`: task, input hash); what
/// did not go up is a warning.
pub fn finish_uploads(
    remote: &cassist_remote::Remote,
    store: &cassist_core::store::Store,
    moved: &[(String, String)],
    wait: std::time::Duration,
) {
    let started = std::time::Instant::now();
    let (_, mut warnings) = remote.finish_uploads(wait);
    if !moved.is_empty() {
        for (task, before) in moved {
            remote.spawn_upload(store, task, before);
        }
        warnings.extend(remote.finish_uploads(wait.saturating_sub(started.elapsed())).1);
    }
    for w in warnings {
        cassist_core::errln!("warning: {w}");
    }
}

/// `--shard K/N`: the selected tasks in slice K, and the output of each
/// task they depend on outside it, which must be up to date (its output is
/// then the recorded one). Anything else is an error naming the task.
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
            if dep.state == State::UpToDate {
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

pub fn select<'a>(plan: &'a Plan, filter: &[String]) -> Result<Vec<&'a PlannedTask>> {
    if filter.is_empty() {
        return Ok(plan.tasks.iter().collect());
    }
    let mut want: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let mut stack: Vec<&str> = Vec::new();
    for f in filter {
        let Some(t) = plan.get(f) else { return Err(Error::Invalid(vec![plan.unknown_task(f)])) };
        stack.push(&t.task.name);
    }
    while let Some(n) = stack.pop() {
        if want.insert(n)
            && let Some(t) = plan.get(n)
        {
            stack.extend(t.key.spec.depends_on.iter().map(String::as_str));
        }
    }
    Ok(plan.tasks.iter().filter(|t| want.contains(t.task.name.as_str())).collect())
}

fn run_id() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    format!("{secs}-{}", std::process::id())
}

/// `CASSIST_SHARED_STATE`: paths (separated by `:`) in the agents' state
/// folders that every agent writes for real, not copy-on-write: a cache
/// that must outlive tasks, a login whose refreshed token must be kept.
/// What an agent writes there reaches the user's next session.
fn shared_state() -> Vec<PathBuf> {
    let Some(list) = std::env::var_os("CASSIST_SHARED_STATE") else { return Vec::new() };
    std::env::split_paths(&list).filter(|p| p.is_absolute()).filter_map(|p| p.canonicalize().ok()).collect()
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
