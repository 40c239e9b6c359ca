//! The scheduler of `cassist run` (SPEC 5): at most `--jobs` tasks at once,
//! each started once every task it depends on has passed and been
//! integrated.
//!
//! It runs on a single-threaded tokio runtime; each task runs on tokio's
//! blocking pool through the [`Runner`], which does the blocking work
//! (processes, file systems). The scheduler alone holds the run's state:
//! which task is waiting, running or done, what each hands its dependents,
//! the lock file and the store records. Tasks report progress as events to
//! the reporter; the scheduler hands it each finished task. Neither reaches
//! into the other.

use std::collections::HashMap;
use std::sync::Arc;

use crate::event::{TaskEnd, TaskState};
use crate::lock::Lock;
use crate::plan::{PlannedTask, State};
use crate::runner::{Runner, TaskResult};

/// How to schedule.
#[derive(Debug, Clone)]
pub struct Options {
    /// Tasks running at once.
    pub jobs: usize,
    pub keep_going: bool,
    pub locked: bool,
    pub no_cache: bool,
}

/// What a run did.
pub struct Outcome {
    /// One end per task, in run order.
    pub reports: Vec<TaskEnd>,
    /// What each task handed its dependents (its recorded output).
    pub outputs: HashMap<String, String>,
    /// The lock file as the run left it (saved after each recorded task).
    pub lock: Lock,
    /// `--locked`: the tasks that would need an agent, and why.
    pub needs_agent: Vec<(String, Vec<String>)>,
    /// A task of this run changed the user's tree.
    pub touched: bool,
}

enum Slot {
    Waiting,
    Running,
    Done(usize),
}

/// Runs `tasks` (in run order; a dependency outside them counts as done,
/// with its output in `outputs`). `finished` is called once per task, in
/// the order they end.
pub fn run(
    runner: Arc<Runner>,
    tasks: Vec<PlannedTask>,
    outputs: HashMap<String, String>,
    opts: &Options,
    finished: &mut dyn FnMut(&TaskEnd),
) -> Outcome {
    let rt = tokio::runtime::Builder::new_current_thread()
        // For the cancel token's eventfd.
        .enable_io()
        .max_blocking_threads(opts.jobs.max(1) + 2)
        .build()
        .expect("a tokio runtime");
    rt.block_on(schedule(runner, tasks, outputs, opts, finished))
}

async fn schedule(
    runner: Arc<Runner>,
    tasks: Vec<PlannedTask>,
    mut outputs: HashMap<String, String>,
    opts: &Options,
    finished: &mut dyn FnMut(&TaskEnd),
) -> Outcome {
    let index: HashMap<String, usize> = tasks.iter().enumerate().map(|(i, t)| (t.task.name.clone(), i)).collect();
    let deps: Vec<Vec<usize>> =
        tasks.iter().map(|t| t.key.spec.depends_on.iter().filter_map(|d| index.get(d).copied()).collect()).collect();
    let mut slots: Vec<Slot> = tasks.iter().map(|_| Slot::Waiting).collect();
    let mut reports: Vec<TaskEnd> = Vec::with_capacity(tasks.len());
    let mut lock = runner.plan.lock.clone();
    let mut needs_agent: Vec<(String, Vec<String>)> = Vec::new();
    // Fail-fast: why no new task starts.
    let mut stop: Option<String> = None;
    // Until a task of this run touches the tree, the plan's hashes are the
    // tree's: hashing again is needed only from then on.
    let mut touched = false;
    let mut running = 0usize;
    let mut joins: tokio::task::JoinSet<(usize, PlannedTask, TaskResult)> = tokio::task::JoinSet::new();
    // Which task each job runs, should a job end without its result.
    let mut jobs_of: HashMap<tokio::task::Id, usize> = HashMap::new();
    let cancelled = runner.cancel.cancelled();
    tokio::pin!(cancelled);

    loop {
        // Start what can start, and settle what never will.
        let mut progress = true;
        while progress {
            progress = false;
            for i in 0..tasks.len() {
                if !matches!(slots[i], Slot::Waiting) {
                    continue;
                }
                let t = &tasks[i];
                let failed_dep = deps[i].iter().copied().find(|&d| match slots[d] {
                    Slot::Done(r) => !reports[r].state().is_success(),
                    _ => false,
                });
                let waiting_for_dep = deps[i].iter().any(|&d| !matches!(slots[d], Slot::Done(_)));
                let report = if runner.cancel.is_cancelled() {
                    Some(TaskResult::new(t.skipped("interrupted")))
                } else if let Some(dep) = failed_dep
                    && !(opts.locked && waiting_for_dep)
                {
                    let passed = |name: &String| match index.get(name) {
                        // Outside this run: it was up to date.
                        None => true,
                        Some(&j) => matches!(slots[j], Slot::Done(r) if reports[r].state().is_success()),
                    };
                    Some(TaskResult::new(dependency_failed(
                        &runner,
                        t,
                        &tasks[dep],
                        opts,
                        &passed,
                        &mut needs_agent,
                        &mut outputs,
                    )))
                } else if let Some(why) = &stop {
                    Some(TaskResult::new(t.skipped(why.clone())))
                } else if waiting_for_dep || failed_dep.is_some() || running >= opts.jobs {
                    None
                } else {
                    let mut t = t.clone();
                    match start(&runner, &mut t, opts, touched, &outputs, &lock, &reports, &slots, &index) {
                        Start::Done(r) => {
                            let r = *r;
                            if opts.locked && r.state() == TaskState::Skipped && t.state == State::Run {
                                needs_agent.push((t.task.name.clone(), crate::cache::why(&runner.plan, &t)));
                                outputs.insert(t.task.name.clone(), t.hash.clone());
                            }
                            Some(TaskResult::new(r))
                        }
                        Start::Spawn(job) => {
                            slots[i] = Slot::Running;
                            running += 1;
                            let runner = runner.clone();
                            let handle = joins.spawn_blocking(move || {
                                let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&runner, &t)));
                                let r = ran.unwrap_or_else(|_| {
                                    TaskResult::new(
                                        t.end().ended(TaskState::Failed, "internal error: the task's thread panicked"),
                                    )
                                });
                                (i, t, r)
                            });
                            jobs_of.insert(handle.id(), i);
                            None
                        }
                    }
                };
                if let Some(r) = report {
                    // Settled without a job (skipped, up-to-date, --locked).
                    let t = tasks[i].clone();
                    let r = settle(&runner, &t, r, &mut lock, &mut outputs, &mut touched, &mut stop, opts);
                    finished(&r);
                    slots[i] = Slot::Done(reports.len());
                    reports.push(r);
                    progress = true;
                }
            }
        }
        if running == 0 {
            break;
        }
        // Wait for a task to end, or for Ctrl-C: then what waits is
        // settled at once (a task being stopped ends on its own).
        let next = tokio::select! {
            next = joins.join_next_with_id() => next,
            () = &mut cancelled, if !runner.cancel.is_cancelled() => continue,
        };
        let (i, t, r) = match next {
            Some(Ok((id, done))) => {
                jobs_of.remove(&id);
                done
            }
            Some(Err(e)) => {
                let Some(i) = jobs_of.remove(&e.id()) else { continue };
                let t = tasks[i].clone();
                let r = TaskResult::new(t.end().ended(TaskState::Failed, format!("internal error: {e}")));
                (i, t, r)
            }
            None => {
                // No job left although some counted as running: cannot
                // happen; end rather than spin.
                debug_assert!(false, "{running} jobs counted but none left");
                break;
            }
        };
        running -= 1;
        let r = settle(&runner, &t, r, &mut lock, &mut outputs, &mut touched, &mut stop, opts);
        finished(&r);
        slots[i] = Slot::Done(reports.len());
        reports.push(r);
    }

    // Reports in run order.
    let mut ordered: Vec<Option<TaskEnd>> = reports.into_iter().map(Some).collect();
    let reports = slots
        .iter()
        .enumerate()
        .map(|(i, s)| match s {
            Slot::Done(r) => ordered[*r].take().unwrap_or_else(|| tasks[i].end()),
            // Every task is settled before the loop ends; should one not be,
            // it is reported, not lost.
            _ => tasks[i].skipped("not run (internal error)"),
        })
        .collect();
    Outcome { reports, outputs, lock, needs_agent, touched }
}

type Job = Box<dyn FnOnce(&Runner, &PlannedTask) -> TaskResult + Send>;

/// Hashes `t` again on the tree as it is, never halfway through another
/// task's integration.
fn rehash(runner: &Runner, t: &mut PlannedTask, outputs: &HashMap<String, String>) -> Result<(), String> {
    let _no_integration = runner.integration.read().unwrap_or_else(|e| e.into_inner());
    runner.plan.rehash(t, outputs)
}

enum Start {
    /// Settled on the spot: no job to run.
    Done(Box<TaskEnd>),
    Spawn(Job),
}

/// What a task whose dependencies all passed does: its state decides.
#[allow(clippy::too_many_arguments)]
fn start(
    runner: &Runner,
    t: &mut PlannedTask,
    opts: &Options,
    touched: bool,
    outputs: &HashMap<String, String>,
    lock: &Lock,
    reports: &[TaskEnd],
    slots: &[Slot],
    index: &HashMap<String, usize>,
) -> Start {
    if touched && let Err(e) = rehash(runner, t, outputs) {
        return Start::Done(Box::new(t.end().ended(TaskState::Failed, e)));
    }
    if opts.no_cache {
        t.state = State::Run;
    }
    match t.state {
        State::UpToDate => Start::Done(Box::new(up_to_date(runner, t, lock))),
        State::Replay => match lock.tasks.get(&t.task.name).and_then(|l| runner.plan.store.get_entry(&l.before)) {
            Some(entry) => Start::Spawn(Box::new(move |runner, t| runner.replay_task(t, &entry))),
            None => {
                Start::Done(Box::new(t.end().ended(TaskState::Failed, "the stored change vanished from the store")))
            }
        },
        State::Run if opts.locked => {
            let why = crate::cache::why(&runner.plan, t);
            Start::Done(Box::new(t.skipped(format!("--locked: an agent would be needed ({})", why.join("; ")))))
        }
        State::Run if runner.budget_reached() => Start::Done(Box::new(t.skipped(format!(
            "not started: --max-cost ${:.2} reached (agents reported ${:.2})",
            runner.max_cost.unwrap_or_default(),
            runner.spent_usd()
        )))),
        State::Run => {
            // The findings of its explore/review dependencies.
            let summaries: Vec<(String, String)> = runner
                .plan
                .summary_dependencies(t)
                .iter()
                .filter_map(|d| {
                    let summary = match index.get(&d.task.name) {
                        Some(&i) => match slots[i] {
                            Slot::Done(r) => reports[r].report.summary.clone(),
                            _ => None,
                        },
                        // Outside this run (another shard): up to date, its
                        // findings are in the store.
                        None => lock
                            .tasks
                            .get(&d.task.name)
                            .and_then(|l| runner.plan.store.get_entry(&l.before))
                            .and_then(|e| e.summary),
                    };
                    summary.map(|s| (d.task.name.clone(), s))
                })
                .collect();
            // A task that had to be split last time starts split.
            let split = lock
                .tasks
                .get(&t.task.name)
                .and_then(|l| runner.plan.store.get_entry(&l.before))
                .map(|e| e.split)
                .unwrap_or_default();
            Start::Spawn(Box::new(move |runner, t| runner.run_task(t, &summaries, &split)))
        }
    }
}

/// A task whose dependency `dep` did not pass is skipped. With `--locked`,
/// a dependency held back because it needs an agent changes this task's
/// inputs too: it is named as needing one as well.
#[allow(clippy::too_many_arguments)]
fn dependency_failed(
    runner: &Runner,
    t: &PlannedTask,
    dep: &PlannedTask,
    opts: &Options,
    passed: &dyn Fn(&String) -> bool,
    needs_agent: &mut Vec<(String, Vec<String>)>,
    outputs: &mut HashMap<String, String>,
) -> TaskEnd {
    if opts.locked {
        let held_back = |d: &String| passed(d) || needs_agent.iter().any(|(n, _)| n == d);
        let mut t = t.clone();
        if t.key.spec.depends_on.iter().all(held_back)
            && runner.plan.rehash(&mut t, outputs).is_ok()
            && t.state == State::Run
        {
            let why = crate::cache::why(&runner.plan, &t);
            needs_agent.push((t.task.name.clone(), why.clone()));
            outputs.insert(t.task.name.clone(), t.hash.clone());
            return t.skipped(format!("--locked: an agent would be needed ({})", why.join("; ")));
        }
    }
    t.skipped(format!("dependency `{}` did not pass", dep.task.name))
}

/// Records what a finished task did (the store entry and the lock line for
/// what passed; a failure to record never fails the run), and notes what it
/// hands its dependents and whether it stops the run.
#[allow(clippy::too_many_arguments)]
fn settle(
    runner: &Runner,
    t: &PlannedTask,
    r: TaskResult,
    lock: &mut Lock,
    outputs: &mut HashMap<String, String>,
    touched: &mut bool,
    stop: &mut Option<String>,
    opts: &Options,
) -> TaskEnd {
    let root = &runner.plan.project.root;
    let output = match r.end.state() {
        TaskState::UpToDate => lock.tasks.get(&t.task.name).map(|e| e.patch.clone()),
        TaskState::Replayed => {
            // The stored entry (the agent's prompts, transcripts, cost) and
            // the lock line stand as recorded: recording the replay would
            // drop them and churn the lock's date. Only the after-state may
            // move.
            let mut after = t.clone();
            let rehashed = rehash(runner, &mut after, outputs).is_ok();
            let moved = match lock.tasks.get_mut(&t.task.name) {
                Some(entry) if rehashed && entry.after != after.hash => {
                    crate::cache::update_after(&runner.plan.store, entry, &after);
                    true
                }
                _ => false,
            };
            if moved && let Err(e) = lock.save(root) {
                eprintln!("warning: could not write cassist.lock: {e}");
            }
            lock.tasks.get(&t.task.name).map(|e| e.patch.clone())
        }
        TaskState::Passed => {
            let mut after = t.clone();
            let recorded = rehash(runner, &mut after, outputs).map_err(std::io::Error::other).and_then(|()| {
                let version = runner.plan.hashing.versions.get(&r.end.report.agent).cloned().flatten();
                crate::cache::record(&runner.plan.store, lock, root, t, &after, &r, version)
            });
            match recorded {
                Ok(patch) => Some(patch),
                Err(e) => {
                    eprintln!("warning: could not record `{}` in the cache: {e}", t.task.name);
                    // An older record of the task no longer describes it.
                    if lock.tasks.remove(&t.task.name).is_some()
                        && let Err(e) = lock.save(root)
                    {
                        eprintln!("warning: could not write cassist.lock: {e}");
                    }
                    None
                }
            }
        }
        _ => None,
    };
    if !outputs.contains_key(&t.task.name) || output.is_some() {
        outputs.insert(t.task.name.clone(), output.unwrap_or_else(|| t.hash.clone()));
    }
    let end = r.end;
    *touched |= !matches!(end.state(), TaskState::UpToDate | TaskState::Skipped);
    if end.state().is_failure() && !opts.keep_going && stop.is_none() && !end.interrupted {
        *stop = Some(format!("not started: `{}` failed (use --keep-going to run independent tasks)", end.name()));
    }
    end
}

/// A task whose inputs equal its recorded after-state: nothing to do; its
/// stored summary is shown.
fn up_to_date(runner: &Runner, t: &PlannedTask, lock: &Lock) -> TaskEnd {
    let mut r = t.end();
    r.report.state = TaskState::UpToDate;
    if let Some(l) = lock.tasks.get(&t.task.name) {
        r.report.agent = l.agent.clone();
        if let Some(entry) = runner.plan.store.get_entry(&l.before) {
            r.report.summary = entry.summary.clone();
            r.report.changed_files = entry.changes.iter().map(|c| c.path.clone()).collect();
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
