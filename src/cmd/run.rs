//! `cassist run`: every task of the plan, one after another in dependency
//! order, each through the runner.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::Serialize;

use crate::cli::RunArgs;
use crate::exit;
use crate::plan::{Plan, PlannedTask, State};
use crate::process::{Cancel, Redactor};
use crate::report::Output;
use crate::report::table::Table;
use crate::runner::{Event, Runner, TaskReport, TaskState};
use crate::workspace::detect_mode;

/// The `--report-json` document (SPEC 5).
#[derive(Serialize)]
pub struct RunReport<'a> {
    pub tasks: &'a [TaskReport],
    pub passed: usize,
    pub failed: usize,
    pub blocked: usize,
    pub cached: usize,
}

impl<'a> RunReport<'a> {
    pub fn new(tasks: &'a [TaskReport]) -> RunReport<'a> {
        let count = |s: &[TaskState]| tasks.iter().filter(|t| s.contains(&t.state)).count();
        RunReport {
            tasks,
            passed: count(&[TaskState::Passed]),
            failed: count(&[TaskState::Failed]),
            blocked: count(&[TaskState::Blocked]),
            cached: count(&[TaskState::UpToDate, TaskState::Replayed]),
        }
    }
}

pub fn run(cwd: &Path, args: &RunArgs, out: &Output) -> i32 {
    // Task files and config are read and checked first: invalid input ends
    // here, with nothing written.
    let loaded = match crate::plan::load(cwd, &super::load_options(&args.tasks)) {
        Ok(l) => l,
        Err(diags) => {
            out.print_diagnostics(&diags);
            return exit::INVALID_INPUT;
        }
    };
    // One run at a time per project: a second waits, then plans on what
    // the first recorded (and runs nothing twice).
    let root = loaded.project.root.clone();
    let _project_lock = match crate::store::ProjectLock::acquire(&root, || {
        eprintln!("waiting for another cassist run on this project to finish...")
    }) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: cannot lock {}: {e}", crate::store::state_dir(&root).display());
            return exit::TASK_FAILED;
        }
    };
    let plan = match crate::plan::plan(loaded) {
        Ok(p) => {
            out.print_diagnostics(&p.warnings);
            p
        }
        Err(d) => {
            out.print_diagnostics(&[d]);
            return exit::INVALID_INPUT;
        }
    };
    // --filter: the named tasks and what they depend on.
    let selected: Vec<PlannedTask> = match select(&plan, &args.filter) {
        Ok(s) => s.into_iter().cloned().collect(),
        Err(d) => {
            out.print_diagnostics(&[d]);
            return exit::INVALID_INPUT;
        }
    };

    let cancel = Cancel::default();
    let interrupts = install_ctrl_c(cancel.clone());

    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("error: cannot find the cassist binary: {e}");
            return exit::TASK_FAILED;
        }
    };
    let workspaces = workspaces_dir(&plan.project.root);
    crate::workspace::remove_stale(&workspaces);
    let (mode, why) = detect_mode(&exe, &plan.project.root, &workspaces);
    if let Some(why) = why {
        eprintln!(
            "note: copy-on-write workspaces are unavailable here ({why}); each task works on a copy of the project instead"
        );
    }
    let run_id = run_id();
    let run_dir = crate::store::state_dir(&plan.project.root).join("runs").join(&run_id);
    if let Err(e) = crate::store::ensure_state_dir(&plan.project.root).and_then(|_| std::fs::create_dir_all(&run_dir)) {
        eprintln!("error: cannot create {}: {e}", run_dir.display());
        return exit::TASK_FAILED;
    }
    // CASSIST_LANDLOCK=off leaves the sandbox to the agents' flags and the
    // review, as on a kernel without Landlock.
    let landlock_off = std::env::var("CASSIST_LANDLOCK").is_ok_and(|v| v == "off");
    let landlock = !landlock_off && crate::sandbox::landlock_abi() > 0;
    if !landlock && !landlock_off {
        eprintln!(
            "note: this kernel has no Landlock: sandbox levels rely on the agents' own flags and on the review of each change"
        );
    }
    let redactor = Redactor::from_env();
    let total = selected.len();
    let done = AtomicUsize::new(0);
    let events = |e: Event<'_>| {
        if out.quiet {
            return;
        }
        let n = done.load(Ordering::Relaxed) + 1;
        match e {
            Event::Phase { task, phase, attempt, detail } => {
                let attempt = if attempt > 0 { format!(" (attempt {attempt})") } else { String::new() };
                let detail = if detail.is_empty() { String::new() } else { format!(": {detail}") };
                eprintln!("[{n}/{total}] {task}: {phase}{attempt}{detail}");
            }
            Event::Note { task, message } => eprintln!("[{n}/{total}] {task}: {message}"),
        }
    };
    let runner = Runner {
        plan: &plan,
        exe,
        workspaces,
        mode,
        run_dir: run_dir.clone(),
        keep_workspace: args.keep_workspace,
        landlock,
        redactor: &redactor,
        cancel: cancel.clone(),
        events: &events,
    };

    crate::plan::timing("prepare run");
    let mut reports: Vec<TaskReport> = Vec::new();
    let mut by_name: HashMap<String, usize> = HashMap::new();
    let mut stop: Option<String> = None;
    // What each task hands its dependents: its recorded output.
    let mut outputs: HashMap<String, String> = HashMap::new();
    let mut lock = plan.lock.clone();
    let mut needs_agent: Vec<(String, Vec<String>)> = Vec::new();
    // Until a task of this run touches the tree, the plan's hashes are the
    // tree's: hashing again is needed only from then on.
    let mut touched = false;
    for planned in &selected {
        let mut t = planned.clone();
        let report = if cancel.is_cancelled() {
            TaskReport::skipped(&t, "interrupted")
        } else if let Some(why) = &stop {
            TaskReport::skipped(&t, why.clone())
        } else if let Some(dep) = t
            .key
            .spec
            .depends_on
            .iter()
            .find(|d| by_name.get(*d).is_some_and(|&i| !reports[i].state.is_success()))
            .cloned()
        {
            // With --locked, a dependency held back because it needs an
            // agent changes this task's inputs too: name it as well.
            let held_back = |d: &String| {
                by_name.get(d).is_none_or(|&i| reports[i].state.is_success()) || needs_agent.iter().any(|(n, _)| n == d)
            };
            if args.locked
                && t.key.spec.depends_on.iter().all(held_back)
                && runner.plan.rehash(&mut t, &outputs).is_ok()
                && t.state == State::Run
            {
                let why = crate::cache::why(runner.plan, &t);
                needs_agent.push((t.task.name.clone(), why.clone()));
                outputs.insert(t.task.name.clone(), t.hash.clone());
                TaskReport::skipped(&t, format!("--locked: an agent would be needed ({})", why.join("; ")))
            } else {
                TaskReport::skipped(&t, format!("dependency `{dep}` did not pass"))
            }
        } else if let Err(e) = if touched { runner.plan.rehash(&mut t, &outputs) } else { Ok(()) } {
            TaskReport { state: TaskState::Failed, reason: Some(e), ..TaskReport::new(&t) }
        } else {
            if args.no_cache {
                t.state = State::Run;
            }
            let summaries: Vec<(String, String)> = runner
                .plan
                .summary_dependencies(&t)
                .iter()
                .filter_map(|d| {
                    by_name
                        .get(&d.task.name)
                        .and_then(|&i| reports[i].summary.clone())
                        .map(|s| (d.task.name.clone(), s))
                })
                .collect();
            let r = match t.state {
                State::UpToDate => up_to_date(&runner, &t, &lock),
                State::Replay => match runner.plan.store.get_entry(&lock.tasks[&t.task.name].before) {
                    Some(entry) => runner.replay_task(&t, &entry),
                    None => TaskReport {
                        state: TaskState::Failed,
                        reason: Some("the stored change vanished from the store".into()),
                        ..TaskReport::new(&t)
                    },
                },
                State::Run if args.locked => {
                    let why = crate::cache::why(runner.plan, &t);
                    needs_agent.push((t.task.name.clone(), why.clone()));
                    TaskReport::skipped(&t, format!("--locked: an agent would be needed ({})", why.join("; ")))
                }
                State::Run => {
                    // A task that had to be split last time starts split.
                    let split = lock
                        .tasks
                        .get(&t.task.name)
                        .and_then(|l| runner.plan.store.get_entry(&l.before))
                        .map(|e| e.split)
                        .unwrap_or_default();
                    runner.run_task(&t, &summaries, &split)
                }
            };
            // Record what passed: the store entry and the lock line. A
            // failure to record never fails the run.
            let output = match (r.state, t.state) {
                (TaskState::UpToDate, _) => lock.tasks.get(&t.task.name).map(|e| e.patch.clone()),
                (TaskState::Replayed, _) => {
                    // The stored entry (the agent's prompts, transcripts,
                    // cost) and the lock line stand as recorded: recording
                    // the replay would drop them and churn the lock's date.
                    // Only the after-state may move.
                    let mut after = t.clone();
                    let rehashed = runner.plan.rehash(&mut after, &outputs).is_ok();
                    let moved = match lock.tasks.get_mut(&t.task.name) {
                        Some(entry) if rehashed && entry.after != after.hash => {
                            crate::cache::update_after(&runner.plan.store, entry, &after);
                            true
                        }
                        _ => false,
                    };
                    if moved && let Err(e) = lock.save(&runner.plan.project.root) {
                        eprintln!("warning: could not write cassist.lock: {e}");
                    }
                    lock.tasks.get(&t.task.name).map(|e| e.patch.clone())
                }
                (TaskState::Passed, _) => {
                    let mut after = t.clone();
                    let recorded =
                        runner.plan.rehash(&mut after, &outputs).map_err(std::io::Error::other).and_then(|()| {
                            let version = runner.plan.hashing.versions.get(&r.agent).cloned().flatten();
                            crate::cache::record(
                                &runner.plan.store,
                                &mut lock,
                                &runner.plan.project.root,
                                &t,
                                &after,
                                &r,
                                version,
                            )
                        });
                    match recorded {
                        Ok(patch) => Some(patch),
                        Err(e) => {
                            eprintln!("warning: could not record `{}` in the cache: {e}", t.task.name);
                            None
                        }
                    }
                }
                _ => None,
            };
            outputs.insert(t.task.name.clone(), output.unwrap_or_else(|| t.hash.clone()));
            touched |= !matches!(r.state, TaskState::UpToDate | TaskState::Skipped);
            print_finished(out, &r, args.output_logs);
            let failed = !r.state.is_success() && r.state != TaskState::Skipped;
            if failed && !args.keep_going && stop.is_none() {
                stop = Some(format!("not started: `{}` failed (use --keep-going to run independent tasks)", r.name));
            }
            r
        };
        done.fetch_add(1, Ordering::Relaxed);
        by_name.insert(report.name.clone(), reports.len());
        reports.push(report);
    }

    crate::plan::timing("run tasks");
    let interrupted = cancel.is_cancelled() || interrupts.load(Ordering::SeqCst) > 0;
    // A later task may change an earlier one's context files: the state
    // the project is left in is what each recorded task's after-hash must
    // describe, so an unchanged project is up-to-date next time.
    if touched && !interrupted && !args.locked {
        let mut changed = false;
        for planned in &selected {
            let Some(&i) = by_name.get(&planned.task.name) else { continue };
            if !reports[i].state.is_success() || !lock.tasks.contains_key(&planned.task.name) {
                continue;
            }
            let mut t = planned.clone();
            if runner.plan.rehash(&mut t, &outputs).is_ok()
                && let Some(entry) = lock.tasks.get_mut(&t.task.name)
                && entry.after != t.hash
            {
                crate::cache::update_after(&runner.plan.store, entry, &t);
                changed = true;
            }
        }
        if changed && let Err(e) = lock.save(&runner.plan.project.root) {
            eprintln!("warning: could not write cassist.lock: {e}");
        }
    }
    runner.plan.save_caches();
    crate::plan::timing("final hashes");
    if !out.quiet || reports.iter().any(|r| !r.state.is_success()) {
        print_summary(out, &reports, &run_dir);
    }
    if let Some(path) = &args.report_json {
        let doc = RunReport::new(&reports);
        let json = serde_json::to_vec_pretty(&doc).unwrap_or_default();
        if let Err(e) = crate::store::write_atomic(path, &json) {
            eprintln!("error: cannot write {}: {e}", path.display());
        }
    }
    if !needs_agent.is_empty() {
        eprintln!("--locked: {} task(s) would need an agent run:", needs_agent.len());
        for (name, why) in &needs_agent {
            eprintln!("  {name}: {}", why.join("; "));
        }
        return exit::LOCKED;
    }
    if interrupted {
        eprintln!(
            "interrupted: agents stopped, workspaces removed; the project is as it was after the last integrated task"
        );
        return exit::INTERRUPTED;
    }
    if reports.iter().all(|r| r.state.is_success()) { exit::SUCCESS } else { exit::TASK_FAILED }
}

/// A task whose inputs equal its recorded after-state: nothing to do; its
/// stored summary is replayed in one line.
fn up_to_date(runner: &Runner<'_>, t: &PlannedTask, lock: &crate::lock::Lock) -> TaskReport {
    let mut r = TaskReport::new(t);
    r.state = TaskState::UpToDate;
    if let Some(l) = lock.tasks.get(&t.task.name) {
        r.agent = l.agent.clone();
        if let Some(entry) = runner.plan.store.get_entry(&l.before) {
            r.summary = entry.summary.clone();
            r.changed_files = entry.changes.iter().map(|c| c.path.clone()).collect();
            // The stored transcript, for `--output-logs`-style inspection.
            if let Some(h) =
                entry.records.iter().filter(|(k, _)| k.starts_with("transcript-")).map(|(_, h)| h).next_back()
            {
                let (a, b) = h.split_at(2);
                r.transcript = Some(runner.plan.store.dir().join("objects").join(a).join(b));
            }
        }
    }
    r
}

fn select<'a>(plan: &'a Plan, filter: &[String]) -> Result<Vec<&'a PlannedTask>, crate::spec::SpecDiagnostic> {
    if filter.is_empty() {
        return Ok(plan.tasks.iter().collect());
    }
    let mut want: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let mut stack: Vec<&str> = Vec::new();
    for f in filter {
        let Some(t) = plan.get(f) else { return Err(plan.unknown_task(f)) };
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

/// Workspaces live outside the project (overlayfs refuses an upper dir
/// inside its lower dir): under the temp folder, per user.
fn workspaces_dir(root: &Path) -> PathBuf {
    let uid = nix::unistd::getuid();
    let mut dir = std::env::temp_dir().join(format!("cassist-{uid}"));
    if dir.starts_with(root) {
        dir = PathBuf::from("/tmp").join(format!("cassist-{uid}"));
    }
    dir
}

fn print_finished(out: &Output, r: &TaskReport, logs: crate::cli::OutputLogs) {
    if out.quiet && r.state.is_success() {
        return;
    }
    if r.state == TaskState::UpToDate {
        // A cache hit: one line with the stored summary, and where the
        // transcript is (or the transcript itself with --output-logs full).
        let summary: String =
            r.summary.as_deref().unwrap_or("").lines().next().unwrap_or("").chars().take(100).collect();
        let mut line = format!("{} {}", r.name, out.green("up-to-date"));
        if !summary.is_empty() {
            line.push_str(&format!(": {summary}"));
        }
        crate::outln!("{line}");
        if let Some(t) = &r.transcript {
            if logs == crate::cli::OutputLogs::Full {
                if let Ok(text) = std::fs::read_to_string(t) {
                    for l in text.lines() {
                        crate::outln!("  | {l}");
                    }
                }
            } else {
                crate::outln!("  {}", out.dim(&format!("transcript: {}", t.display())));
            }
        }
        return;
    }
    let state = match r.state {
        TaskState::Passed | TaskState::UpToDate | TaskState::Replayed => out.green(r.state.as_str()),
        TaskState::Skipped => out.yellow(r.state.as_str()),
        _ => out.red(r.state.as_str()),
    };
    let mut line = format!("{} {state} in {:.1}s", r.name, r.duration_ms as f64 / 1000.0);
    if !r.changed_files.is_empty() && r.state.is_success() {
        line.push_str(&format!(", integrated {} file(s): {}", r.changed_files.len(), r.changed_files.join(", ")));
    }
    if let Some(reason) = &r.reason {
        line.push_str(&format!(": {reason}"));
    }
    crate::outln!("{line}");
    if r.state.is_success()
        && let Some(s) = &r.summary
        && !s.trim().is_empty()
        && !out.quiet
    {
        let first: String = s.lines().take(3).collect::<Vec<_>>().join("\n  ");
        crate::outln!("  {}", out.dim(&first));
    }
}

fn print_summary(out: &Output, reports: &[TaskReport], run_dir: &Path) {
    let mut table = Table::new(&["TASK", "STATE", "AGENT", "ATTEMPTS", "TIME", "COST"]);
    for r in reports {
        let state = match r.state {
            TaskState::Passed | TaskState::UpToDate | TaskState::Replayed => out.green(r.state.as_str()),
            TaskState::Skipped => out.yellow(r.state.as_str()),
            _ => out.red(r.state.as_str()),
        };
        table.row(vec![
            r.name.clone(),
            state,
            r.agent.clone(),
            r.attempts.to_string(),
            format!("{:.1}s", r.duration_ms as f64 / 1000.0),
            r.cost_usd.map_or("-".to_owned(), |c| format!("${c:.2}")),
        ]);
        subtask_rows(out, &mut table, &r.subtasks, 1);
    }
    crate::outln!();
    crate::out!("{}", table.render(|h| out.dim(h)));
    for r in reports.iter().filter(|r| matches!(r.state, TaskState::Failed | TaskState::Blocked)) {
        crate::outln!();
        crate::outln!("{} {}: {}", out.red("✗"), r.name, r.reason.as_deref().unwrap_or("failed"));
        if !r.tail.trim().is_empty() {
            let tail = crate::runner::tail_lines(&r.tail, 1500);
            for line in tail.lines().rev().take(15).collect::<Vec<_>>().into_iter().rev() {
                crate::outln!("    {}", out.dim(line));
            }
        }
        if let Some(t) = &r.transcript {
            crate::outln!("  transcript: {}", t.display());
        }
        if let Some(w) = &r.kept_workspace {
            crate::outln!("  workspace kept: {}", w.display());
        }
    }
    let passed = reports.iter().filter(|r| r.state.is_success()).count();
    crate::outln!();
    crate::outln!("{passed} of {} task(s) passed; records in {}", reports.len(), run_dir.display());
}

/// The parts of a split task under its row, indented by depth.
fn subtask_rows(out: &Output, table: &mut Table, subtasks: &[crate::split::SubtaskReport], depth: usize) {
    use crate::split::PartState;
    for s in subtasks {
        let state = s.state_str();
        let state = match s.state {
            PartState::Passed => out.green(state),
            PartState::Split | PartState::Skipped => out.yellow(state),
            PartState::Failed | PartState::Blocked => out.red(state),
        };
        table.row(vec![
            format!("{}└ {}", "  ".repeat(depth - 1), s.name),
            state,
            String::new(),
            s.attempts.to_string(),
            format!("{:.1}s", s.duration_ms as f64 / 1000.0),
            s.cost_usd.map_or("-".to_owned(), |c| format!("${c:.2}")),
        ]);
        subtask_rows(out, table, &s.subtasks, depth + 1);
    }
}

/// Ctrl-C: the first stops new tasks and ends running agents (through
/// `cancel`); a second ends cassist at once. Returns the count of
/// interrupts seen.
fn install_ctrl_c(cancel: Cancel) -> &'static AtomicUsize {
    static COUNT: AtomicUsize = AtomicUsize::new(0);
    extern "C" fn on_int(_: libc::c_int) {
        let n = COUNT.fetch_add(1, Ordering::SeqCst);
        if n >= 1 {
            crate::process::kill_all_groups();
            // SAFETY: _exit is async-signal-safe.
            unsafe { libc::_exit(crate::exit::INTERRUPTED) };
        }
    }
    use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
    let action = SigAction::new(SigHandler::Handler(on_int), SaFlags::SA_RESTART, SigSet::empty());
    // SAFETY: the handler only touches atomics and async-signal-safe calls.
    unsafe {
        let _ = sigaction(Signal::SIGINT, &action);
        let _ = sigaction(Signal::SIGTERM, &action);
    }
    std::thread::spawn(move || {
        loop {
            if COUNT.load(Ordering::SeqCst) > 0 {
                cancel.cancel();
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
    });
    &COUNT
}
