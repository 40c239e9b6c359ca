//! The scheduler of a run: at most `--jobs` tasks at once,
//! each started once every task it depends on has passed and been
//! integrated, and every earlier task whose scope it overlaps
//! ([`cassist_core::plan::overlap`]) has ended and its change has been
//! written into the tree: overlapping tasks run one after the other, in
//! run order, each from a tree that holds the changes of those before it,
//! as they would with `-j 1`.
//!
//! It runs on a single-threaded tokio runtime; each task runs on tokio's
//! blocking pool through the [`Runner`], which does the blocking work
//! (processes, file systems). The scheduler alone holds the run's state:
//! which task is waiting, running or done, what each hands its dependents,
//! the lock file and the store records. Tasks report progress as events to
//! the reporter; the scheduler hands it each finished task. Neither reaches
//! into the other.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::runner::flush::Flushed;
use crate::runner::{Instead, Runner, TaskResult};
use cassist_core::event::{TaskEnd, TaskState};
use cassist_core::lock::Lock;
use cassist_core::plan::again::Again;
use cassist_core::plan::overlap::{self, Footprint};
use cassist_core::plan::state::Basis;
use cassist_core::plan::{HashError, PlannedTask, State};

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
    /// The tasks whose lock line the run's last write of the tree wrote,
    /// with the after-state hashed on the tree as it left it: nothing
    /// changed that tree since, so the end of the run need not hash them
    /// again (the end of the run moves their after-states).
    pub hashed_at_end: HashSet<String>,
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
    outputs: HashMap<String, String>,
    opts: &Options,
    finished: &mut dyn FnMut(&TaskEnd),
) -> Outcome {
    let mut run = Schedule::new(runner, tasks, outputs, opts);
    let mut joins: tokio::task::JoinSet<(usize, PlannedTask, TaskResult)> = tokio::task::JoinSet::new();
    // Which task each job runs, should a job end without its result.
    let mut jobs_of: HashMap<tokio::task::Id, usize> = HashMap::new();
    let cancel = run.runner.cancel.clone();
    let cancelled = cancel.cancelled();
    tokio::pin!(cancelled);

    loop {
        // Start what can start, and settle what never will.
        for (i, t, job) in run.start_ready(finished) {
            let runner = run.runner.clone();
            let handle = joins.spawn_blocking(move || {
                let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&runner, &t)));
                let r = ran.unwrap_or_else(|_| {
                    TaskResult::new(t.end().ended(TaskState::Failed, "internal error: the task's thread panicked"))
                });
                (i, t, r)
            });
            jobs_of.insert(handle.id(), i);
        }
        if run.running == 0 {
            // A task waits for a change to reach the tree: written now
            // (nothing runs), and it can start.
            if !run.unflushed.is_empty() {
                run.flush();
                continue;
            }
            break;
        }
        // Wait for a task to end, or for Ctrl-C: then what waits is
        // settled at once (a task being stopped ends on its own).
        let next = tokio::select! {
            next = joins.join_next_with_id() => next,
            () = &mut cancelled, if !cancel.is_cancelled() => continue,
        };
        let (i, t, r) = match next {
            Some(Ok((id, done))) => {
                jobs_of.remove(&id);
                done
            }
            Some(Err(e)) => {
                let Some(i) = jobs_of.remove(&e.id()) else { continue };
                let t = run.tasks[i].clone();
                let r = TaskResult::new(t.end().ended(TaskState::Failed, format!("internal error: {e}")));
                (i, t, r)
            }
            None => {
                // No job left although some counted as running: cannot
                // happen; end rather than spin.
                debug_assert!(false, "{} jobs counted but none left", run.running);
                break;
            }
        };
        run.running -= 1;
        run.done(i, &t, r, finished);
        // A quiescent point: no task's view spans the write.
        if run.running == 0 {
            run.flush();
        }
    }
    run.flush();
    run.tell_stale(finished, true);
    run.outcome()
}

/// The state of one run: which task waits, runs or is done, what each
/// hands its dependents, the lock file as recorded so far.
struct Schedule<'a> {
    runner: Arc<Runner>,
    tasks: Vec<PlannedTask>,
    opts: &'a Options,
    index: HashMap<String, usize>,
    /// Per task, the tasks of this run it depends on.
    deps: Vec<Vec<usize>>,
    slots: Vec<Slot>,
    /// Finished tasks, in the order they ended (slots point into it).
    reports: Vec<TaskEnd>,
    outputs: HashMap<String, String>,
    lock: Lock,
    /// The stored entries of the tasks planned up-to-date, as they are
    /// shown, by input hash: read ahead on every core.
    shown: HashMap<String, cassist_core::store::EntrySummary>,
    needs_agent: Vec<(String, Vec<String>)>,
    /// Fail-fast: why no new task starts.
    stop: Option<String>,
    /// Until a task of this run touches the tree, the plan's hashes are
    /// the tree's: hashing again is needed only from then on.
    touched: bool,
    hashed_at_end: HashSet<String>,
    running: usize,
    /// Per task, the later tasks that wait for it to end because their
    /// scopes overlap ([`cassist_core::plan::overlap::waits`]).
    waited_by: Vec<Vec<usize>>,
    /// Per task, how many of the tasks it waits for are not released yet.
    blockers: Vec<usize>,
    /// Per task, whether it is released: it ended, its change (if any) is
    /// in the tree, and every task it waits for is released.
    released: Vec<bool>,
    /// The ended tasks whose change waits for the flush, and per task
    /// whether it is one of them.
    unflushed: Vec<usize>,
    flushing: Vec<bool>,
    /// A task that ended waits for the flush before a later one can
    /// start: nothing new starts until the running tasks end and it
    /// happens.
    drain: bool,
    /// Per task, the tasks of this run that depend on it directly.
    dependents: Vec<Vec<usize>>,
    /// Stale tasks whose end is not told yet: a task depending on them
    /// may still turn to its agent (its verification failing) and refresh
    /// them first; told once every such task has ended.
    untold: Vec<usize>,
    /// Per task, why its agent runs though it was to be verified: its
    /// verification found the recorded change no longer meets it.
    unmet: Vec<Option<String>>,
    /// A task just sent a stale dependency back to wait to be refreshed.
    refreshing: bool,
}

impl<'a> Schedule<'a> {
    fn new(
        runner: Arc<Runner>,
        tasks: Vec<PlannedTask>,
        outputs: HashMap<String, String>,
        opts: &'a Options,
    ) -> Schedule<'a> {
        let index: HashMap<String, usize> = tasks.iter().enumerate().map(|(i, t)| (t.task.name.clone(), i)).collect();
        let deps: Vec<Vec<usize>> = tasks
            .iter()
            .map(|t| t.key.spec.depends_on.iter().filter_map(|d| index.get(d).copied()).collect())
            .collect();
        let slots = tasks.iter().map(|_| Slot::Waiting).collect();
        let footprints: Vec<Footprint> = tasks.iter().map(Footprint::of).collect();
        let waits = overlap::waits(&footprints);
        let mut waited_by = vec![Vec::new(); tasks.len()];
        for (i, w) in waits.iter().enumerate() {
            for &j in w {
                waited_by[j].push(i);
            }
        }
        let mut dependents = vec![Vec::new(); tasks.len()];
        for (i, d) in deps.iter().enumerate() {
            for &j in d {
                dependents[j].push(i);
            }
        }
        let lock = runner.plan.lock.clone();
        let shown = if opts.no_cache { HashMap::new() } else { read_shown(&runner.plan.store, &tasks, &lock) };
        let tasks_len = tasks.len();
        Schedule {
            reports: Vec::with_capacity(tasks.len()),
            runner,
            tasks,
            opts,
            index,
            deps,
            slots,
            outputs,
            lock,
            shown,
            needs_agent: Vec::new(),
            stop: None,
            touched: false,
            hashed_at_end: HashSet::new(),
            running: 0,
            waited_by,
            blockers: waits.iter().map(Vec::len).collect(),
            released: vec![false; tasks_len],
            unflushed: Vec::new(),
            flushing: vec![false; tasks_len],
            drain: false,
            dependents,
            untold: Vec::new(),
            unmet: vec![None; tasks_len],
            refreshing: false,
        }
    }

    /// Settles every waiting task that can be settled without a job and
    /// returns the jobs of those that can start now (marked running).
    fn start_ready(&mut self, finished: &mut dyn FnMut(&TaskEnd)) -> Vec<(usize, PlannedTask, Job)> {
        let mut jobs = Vec::new();
        let mut progress = true;
        while progress {
            progress = false;
            for i in 0..self.tasks.len() {
                if !matches!(self.slots[i], Slot::Waiting) {
                    continue;
                }
                match self.next_step(i) {
                    // A stale dependency (earlier in run order) waits again
                    // to be refreshed: another pass starts it.
                    Step::Wait if self.refreshing => {
                        self.refreshing = false;
                        progress = true;
                    }
                    Step::Wait => {}
                    Step::Settled(r) => {
                        let t = self.tasks[i].clone();
                        self.done(i, &t, *r, finished);
                        progress = true;
                    }
                    Step::Job(t, job) => {
                        self.slots[i] = Slot::Running;
                        self.running += 1;
                        jobs.push((i, *t, job));
                    }
                }
            }
        }
        jobs
    }

    fn succeeded(&self, i: usize) -> Option<bool> {
        match self.slots[i] {
            Slot::Done(r) => Some(self.reports[r].state().is_success()),
            _ => None,
        }
    }

    /// What waiting task `i` does now.
    fn next_step(&mut self, i: usize) -> Step {
        let failed_dep = self.deps[i].iter().copied().find(|&d| self.succeeded(d) == Some(false));
        let waiting_for_dep = self.deps[i].iter().any(|&d| self.succeeded(d).is_none());
        let t = &self.tasks[i];
        if self.runner.cancel.is_cancelled() {
            return Step::Settled(Box::new(TaskResult::new(t.skipped("interrupted"))));
        }
        if let Some(dep) = failed_dep
            && !(self.opts.locked && waiting_for_dep)
        {
            let (t, dep) = (t.clone(), self.tasks[dep].task.name.clone());
            return Step::Settled(Box::new(TaskResult::new(self.dependency_failed(&t, &dep))));
        }
        if let Some(why) = &self.stop {
            return Step::Settled(Box::new(TaskResult::new(t.skipped(why.clone()))));
        }
        if waiting_for_dep
            || failed_dep.is_some()
            || self.blockers[i] > 0
            || self.drain
            || self.running >= self.opts.jobs
        {
            return Step::Wait;
        }
        let mut t = t.clone();
        match self.start(&mut t) {
            Start::Done(r) => {
                if self.opts.locked && r.state() == TaskState::Skipped && t.state == State::Run {
                    self.needs_agent.push((t.task.name.clone(), cassist_core::plan::why::why(&self.runner.plan, &t)));
                    self.outputs.insert(t.task.name.clone(), t.hash.clone());
                }
                Step::Settled(Box::new(TaskResult::new(*r)))
            }
            Start::Spawn(job) => Step::Job(Box::new(t), job),
            Start::Wait => Step::Wait,
        }
    }

    /// Task `i` ended: recorded, handed to the reporter, marked done. A
    /// task whose verification found its recorded change no longer meets
    /// it has not ended: it waits again, to run its agent.
    fn done(&mut self, i: usize, t: &PlannedTask, r: TaskResult, finished: &mut dyn FnMut(&TaskEnd)) {
        if let Some(why) = r.unmet {
            self.unmet[i] = Some(why);
            self.slots[i] = Slot::Waiting;
            return;
        }
        let landed = r.end.state().is_success() && r.changes.as_ref().is_some_and(|c| !c.is_empty());
        let mut end = self.settle(t, r);
        if let Some(why) = &self.unmet[i]
            && end.state() == TaskState::Passed
        {
            let ran = format!("{why}, so its agent ran");
            end.report.reason = Some(match end.report.reason.take() {
                Some(reason) => format!("{reason} ({ran})"),
                None => ran,
            });
        }
        // A stale task is told once no task depending on it can still
        // refresh it.
        if end.state() == TaskState::Stale && !self.dependents_ended(i) {
            self.untold.push(i);
        } else {
            finished(&end);
        }
        self.slots[i] = Slot::Done(self.reports.len());
        self.reports.push(end);
        self.tell_stale(finished, false);
        if landed {
            // Its change is in the tree only once flushed.
            self.unflushed.push(i);
            self.flushing[i] = true;
            self.drain |= self.waited_by[i].iter().any(|&k| matches!(self.slots[k], Slot::Waiting));
        } else {
            self.release(i);
        }
    }

    /// Whether every task of this run depending on task `i` has ended.
    fn dependents_ended(&self, i: usize) -> bool {
        self.dependents[i].iter().all(|&k| matches!(self.slots[k], Slot::Done(_)))
    }

    /// Tells the reporter of the stale tasks no task can refresh any more
    /// (`all`: every one left, the run is over).
    fn tell_stale(&mut self, finished: &mut dyn FnMut(&TaskEnd), all: bool) {
        let untold = std::mem::take(&mut self.untold);
        for i in untold {
            match self.slots[i] {
                Slot::Done(r) if all || self.dependents_ended(i) => finished(&self.reports[r]),
                Slot::Done(_) => self.untold.push(i),
                // Refreshed: it is told when that run ends.
                _ => {}
            }
        }
    }

    /// Before task `i` runs its agent for a reason of its own: each stale
    /// explore/review task it depends on directly, settled in this run
    /// with its recorded findings, runs again first, so that its fresh
    /// findings go into `i`'s prompt. Whether any does (`i` then waits).
    fn refresh_stale_dependencies(&mut self, i: usize) -> bool {
        let name = self.tasks[i].task.name.clone();
        let mut any = false;
        for d in self.deps[i].clone() {
            let Slot::Done(r) = self.slots[d] else { continue };
            if self.reports[r].state() != TaskState::Stale || !self.tasks[d].read_only() {
                continue;
            }
            self.tasks[d].again = Some(Again::Refresh(name.clone()));
            self.slots[d] = Slot::Waiting;
            self.untold.retain(|&u| u != d);
            any = true;
        }
        self.refreshing |= any;
        any
    }

    /// Releases task `i` if it can be (it ended, its change is in the
    /// tree, what it waits for is released), then the tasks waiting for
    /// it that can be: a task settled without running (skipped, say) may
    /// end before what it waits for, and a task waiting for it must wait
    /// for those too.
    fn release(&mut self, i: usize) {
        let mut todo = vec![i];
        while let Some(i) = todo.pop() {
            if self.released[i] || self.blockers[i] > 0 || !matches!(self.slots[i], Slot::Done(_)) || self.flushing[i] {
                continue;
            }
            self.released[i] = true;
            for &k in &self.waited_by[i] {
                self.blockers[k] -= 1;
                if self.blockers[k] == 0 {
                    todo.push(k);
                }
            }
        }
    }

    /// The reports in run order.
    fn outcome(self) -> Outcome {
        let mut ordered: Vec<Option<TaskEnd>> = self.reports.into_iter().map(Some).collect();
        let reports = self
            .slots
            .iter()
            .enumerate()
            .map(|(i, s)| match s {
                Slot::Done(r) => ordered[*r].take().unwrap_or_else(|| self.tasks[i].end()),
                // Every task is settled before the loop ends; should one
                // not be, it is reported, not lost.
                _ => self.tasks[i].skipped("not run (internal error)"),
            })
            .collect();
        Outcome {
            reports,
            outputs: self.outputs,
            lock: self.lock,
            needs_agent: self.needs_agent,
            touched: self.touched,
            hashed_at_end: self.hashed_at_end,
        }
    }
}

type Job = Box<dyn FnOnce(&Runner, &PlannedTask) -> TaskResult + Send>;

/// Hashes `t` again on the tree as it is, never halfway through another
/// task's integration.
fn rehash(runner: &Runner, t: &mut PlannedTask, outputs: &HashMap<String, String>) -> Result<(), HashError> {
    let _no_integration = runner.integration.read().unwrap_or_else(|e| e.into_inner());
    runner.plan.rehash(t, outputs)
}

enum Start {
    /// Settled on the spot: no job to run.
    Done(Box<TaskEnd>),
    /// Not yet: a stale dependency runs again first.
    Wait,
    Spawn(Job),
}

/// What a waiting task does now.
enum Step {
    /// A dependency has not ended, or no job slot is free.
    Wait,
    /// Settled on the spot (skipped, up-to-date, --locked, ...).
    Settled(Box<TaskResult>),
    /// Runs as a job.
    Job(Box<PlannedTask>, Job),
}

impl Schedule<'_> {
    /// What a task whose dependencies all passed does: its state decides.
    fn start(&mut self, t: &mut PlannedTask) -> Start {
        let runner = self.runner.clone();
        let runner = &runner;
        // Hashed again once the tree may differ from what the plan hashed:
        // a task of this run changed it, or the plan saw it through replays
        // predicted before it (which, with -j N, may not be done yet).
        let rehashed = self.touched || t.cached.predicted;
        if rehashed && let Err(e) = rehash(runner, t, &self.outputs) {
            return Start::Done(Box::new(t.end().ended(TaskState::Failed, e.to_string())));
        }
        if self.opts.no_cache {
            t.state = State::Run;
        }
        let i = self.index[&t.task.name];
        // Whether it runs its agent for a reason of its own (not only
        // because it is forced): its stale dependencies are refreshed
        // first.
        let own_reason = match &t.again {
            Some(Again::Forced(planned)) if !rehashed => *planned == State::Run,
            Some(Again::Forced(_)) => t.state == State::Run,
            Some(Again::Named | Again::Refresh(_)) => true,
            None => t.state == State::Run,
        } || self.unmet[i].is_some();
        // Forced, or a stale task refreshed: decided before the run, and
        // kept when hashing again brings back its cached state.
        if let Some(again) = &t.again
            && again.still_runs(t.state)
        {
            t.state = State::Run;
        }
        // Its verification failed: its agent runs.
        if self.unmet[i].is_some() {
            t.state = State::Run;
        }
        // About to run its agent for a reason of its own: its stale
        // dependencies first.
        if t.state == State::Run
            && own_reason
            && !self.opts.locked
            && !runner.budget_reached()
            && self.refresh_stale_dependencies(i)
        {
            return Start::Wait;
        }
        let recorded = || self.lock.tasks.get(&t.task.name).and_then(|l| runner.plan.store.get_entry(&l.before));
        if t.state == State::Replay {
            // The entry is checked again (the plan's check may be old): one
            // that cannot be used is as if there were none: the task runs.
            let key = t.cached.entry.clone().unwrap_or_default();
            // An entry the lock records must hold the lock's patch.
            let locked_patch = self.lock.tasks.get(&t.task.name).filter(|l| l.before == key).map(|l| l.patch.as_str());
            match runner.plan.store.usable_entry_for(&key, locked_patch) {
                // `--locked` replays only what cassist.lock records, or
                // what a trusted key signed (the remote cache).
                Ok(Some(_)) if self.opts.locked && t.cached.basis == Basis::StoreEntry && !t.cached.remote => {
                    t.state = State::Run;
                }
                Ok(Some(entry)) => {
                    // What the task runs with should its replay be refused.
                    let instead = Instead {
                        summaries: self.dependency_summaries(t),
                        split: recorded().map(|e| e.split).unwrap_or_default(),
                    };
                    return Start::Spawn(Box::new(move |runner, t| runner.replay_task(t, &entry, &instead)));
                }
                Ok(None) => {
                    warn(&format!("the stored run of task `{}` vanished from the store; the task runs", t.task.name));
                    t.state = State::Run;
                }
                Err(why) => {
                    warn(&cassist_core::plan::unusable_warning(&t.task.name, &why.to_string()).message);
                    t.cached.unusable = Some(why.to_string());
                    t.state = State::Run;
                }
            }
        } else if let Some(why) = &t.cached.unusable
            && self.runner.plan.get(&t.task.name).is_none_or(|p| p.cached.unusable.as_ref() != Some(why))
        {
            // Found when hashing again during the run: said now (the plan
            // said the others).
            warn(&cassist_core::plan::unusable_warning(&t.task.name, why).message);
        }
        match t.state {
            State::UpToDate => {
                if t.cached.basis == Basis::Verified && !self.opts.locked {
                    self.record_verified(t);
                }
                Start::Done(Box::new(up_to_date(runner, t, &self.lock, &self.shown)))
            }
            // Its recorded findings stand.
            State::Stale => {
                let mut end = up_to_date(runner, t, &self.lock, &self.shown);
                end.report.state = TaskState::Stale;
                end.report.reason =
                    Some("what it reads changed, not what it asks: its recorded findings are kept".to_owned());
                Start::Done(Box::new(end))
            }
            // Started above; never reached.
            State::Replay => Start::Done(Box::new(t.end().ended(TaskState::Failed, "internal error: replay"))),
            // Its acceptance commands decide; should they fail, it waits
            // again to run its agent ([`Schedule::done`]).
            State::Verify => Start::Spawn(Box::new(move |runner, t| runner.verify_task(t))),
            State::Run if self.opts.locked => {
                let why = cassist_core::plan::why::why(&runner.plan, t);
                Start::Done(Box::new(t.skipped(format!("--locked: an agent would be needed ({})", why.join("; ")))))
            }
            State::Run if runner.budget_reached() => Start::Done(Box::new(t.skipped(format!(
                "not started: --max-cost ${:.2} reached (agents reported ${:.2})",
                runner.max_cost.unwrap_or_default(),
                runner.spent_usd()
            )))),
            State::Run => {
                let summaries = self.dependency_summaries(t);
                // A task that had to be split last time starts split.
                let split = recorded().map(|e| e.split).unwrap_or_default();
                Start::Spawn(Box::new(move |runner, t| runner.run_task(t, &summaries, &split)))
            }
        }
    }

    /// A task up to date because a verification (by a `run --locked`,
    /// which writes no lock) recorded this after-state in the store entry
    /// of its lock line's run: its lock line takes it now.
    fn record_verified(&mut self, t: &PlannedTask) {
        let plan = &self.runner.plan;
        let Some(line) = self.lock.tasks.get(&t.task.name) else { return };
        let line = crate::runner::record::verified_line(plan, line, t);
        let line = cassist_core::lock::LockLine { task: t.task.name.clone(), entry: Some(line) };
        match Lock::update(&plan.project.root, std::slice::from_ref(&line)) {
            Ok(()) => {
                self.lock.apply(std::slice::from_ref(&line));
            }
            Err(e) => warn(&format!("could not write the verified state of `{}` to cassist.lock: {e}", t.task.name)),
        }
    }

    /// The findings of `t`'s explore/review dependencies.
    fn dependency_summaries(&self, t: &PlannedTask) -> Vec<(String, String)> {
        let plan = &self.runner.plan;
        plan.summary_dependencies(t)
            .iter()
            .filter_map(|d| {
                let summary = match self.index.get(&d.task.name) {
                    Some(&i) => match self.slots[i] {
                        Slot::Done(r) => self.reports[r].report.summary.clone(),
                        _ => None,
                    },
                    // Outside this run (another shard): up to date, its
                    // findings are in the store.
                    None => self
                        .lock
                        .tasks
                        .get(&d.task.name)
                        .and_then(|l| plan.store.get_entry(&l.before))
                        .and_then(|e| e.summary),
                };
                summary.map(|s| (d.task.name.clone(), s))
            })
            .collect()
    }

    /// A task whose dependency `dep` did not pass is skipped. With
    /// `--locked`, a dependency held back because it needs an agent changes
    /// this task's inputs too: it is named as needing one as well.
    fn dependency_failed(&mut self, t: &PlannedTask, dep: &str) -> TaskEnd {
        if self.opts.locked {
            let passed = |name: &String| match self.index.get(name) {
                // Outside this run: it was up to date.
                None => true,
                Some(&j) => self.succeeded(j) == Some(true),
            };
            let held_back = |d: &String| passed(d) || self.needs_agent.iter().any(|(n, _)| n == d);
            let mut t = t.clone();
            if t.key.spec.depends_on.iter().all(held_back)
                && self.runner.plan.rehash(&mut t, &self.outputs).is_ok()
                && t.state == State::Run
            {
                let why = cassist_core::plan::why::why(&self.runner.plan, &t);
                self.needs_agent.push((t.task.name.clone(), why.clone()));
                self.outputs.insert(t.task.name.clone(), t.hash.clone());
                return t.skipped(format!("--locked: an agent would be needed ({})", why.join("; ")));
            }
        }
        t.skipped(format!("dependency `{dep}` did not pass"))
    }

    /// Records what a finished task did (its lock line, written with its
    /// change, joins the lock as this run sees it; its store entry is
    /// completed; a failure to record never fails the run), and notes what
    /// it hands its dependents and whether it stops the run.
    fn settle(&mut self, t: &PlannedTask, r: TaskResult) -> TaskEnd {
        if let Some(line) = &r.lock_line {
            self.lock.apply(std::slice::from_ref(line));
        }
        // `--locked`: a replay that was refused needs an agent.
        if let Some(why) = &r.needs_agent {
            self.needs_agent.push((t.task.name.clone(), why.clone()));
        }
        let output = match r.end.state() {
            // In the after-state of an entry the lock does not name (a
            // `run --locked` replayed it): that entry's patch.
            TaskState::UpToDate if t.cached.basis == Basis::StoreAfter => t.cached.patch.clone(),
            TaskState::UpToDate | TaskState::Verified | TaskState::Stale => {
                self.lock.tasks.get(&t.task.name).map(|e| e.patch.clone())
            }
            // A replayed task's entry (the agent's prompts, transcripts,
            // cost) and lock line stand as recorded, and its after-state
            // does not move here: a replay reproduces the recorded tree,
            // and the end of the run (`cmd::run`, never with `--locked`)
            // hashes what the run left. An entry the lock did not record (a
            // run killed before its line was written) got its line with the
            // replayed change, joined above.
            TaskState::Replayed => t.cached.patch.clone(),
            TaskState::Passed => self.record(t, &r),
            _ => None,
        };
        if !self.outputs.contains_key(&t.task.name) || output.is_some() {
            self.outputs.insert(t.task.name.clone(), output.unwrap_or_else(|| t.hash.clone()));
        }
        let end = r.end;
        // Verified and stale tasks leave the tree as it was.
        self.touched |=
            !matches!(end.state(), TaskState::UpToDate | TaskState::Verified | TaskState::Stale | TaskState::Skipped);
        if end.state().is_failure() && !self.opts.keep_going && self.stop.is_none() && !end.interrupted {
            self.stop =
                Some(format!("not started: `{}` failed (use --keep-going to run independent tasks)", end.name()));
        }
        end
    }

    /// A passed task: the runner recorded it in the store and wrote its
    /// lock line with its change; its entry is completed here. Returns its
    /// output (the patch hash), or `None` when it was not recorded.
    fn record(&mut self, t: &PlannedTask, r: &TaskResult) -> Option<String> {
        if self.opts.locked {
            // No agent runs under `--locked`, so nothing passes; should
            // something, the lock is still never written.
            return None;
        }
        if !r.recorded {
            return None;
        }
        match crate::runner::record::finish_record(&self.runner.plan.store, t, r) {
            Ok(patch) => Some(patch),
            Err(e) => {
                cassist_core::errln!("warning: could not complete the record of `{}` in the cache: {e}", t.task.name);
                self.lock.tasks.get(&t.task.name).map(|l| l.patch.clone())
            }
        }
    }
}

impl Schedule<'_> {
    /// Writes what passed into the user's tree ([`Runner::flush`]): the
    /// lock lines join the lock as this run sees it; a task whose change
    /// could not be written fails, with why (its progress line stands;
    /// the summary and the reports say it).
    fn flush(&mut self) {
        let flushed = self.runner.flush();
        // Written or not, the changes that waited are settled: the tasks
        // waiting for them start from the tree as it is now.
        self.drain = false;
        for i in std::mem::take(&mut self.unflushed) {
            self.flushing[i] = false;
            self.release(i);
        }
        if flushed.iter().any(|f| matches!(f, Flushed::Written { .. })) {
            // The tree changed: what an earlier flush hashed may have moved.
            self.hashed_at_end.clear();
        }
        for flushed in flushed {
            match flushed {
                Flushed::Written { task, line: Some(line), hashed } => {
                    self.lock.apply(std::slice::from_ref(&line));
                    if hashed {
                        self.hashed_at_end.insert(task);
                    }
                }
                Flushed::Written { line: None, .. } => {}
                Flushed::NotWritten { task, reason } => {
                    let Some(&i) = self.index.get(&task) else { continue };
                    let Slot::Done(r) = self.slots[i] else { continue };
                    let end = &mut self.reports[r];
                    end.report.state = TaskState::Failed;
                    end.report.reason = Some(reason.clone());
                    cassist_core::errln!("error: `{task}` passed but could not be integrated: {reason}");
                    if !self.opts.keep_going && self.stop.is_none() {
                        self.stop =
                            Some(format!("not started: `{task}` failed (use --keep-going to run independent tasks)"));
                    }
                }
            }
        }
    }
}

/// A warning on stderr (between progress lines).
fn warn(message: &str) {
    cassist_core::errln!("warning: {message}");
}

/// The entries of the tasks planned up-to-date or stale, as [`up_to_date`] shows
/// them, read on every core: a run with a thousand up-to-date tasks reads a
/// thousand entries before it can say so.
fn read_shown(
    store: &cassist_core::store::Store,
    tasks: &[PlannedTask],
    lock: &Lock,
) -> HashMap<String, cassist_core::store::EntrySummary> {
    let keys: Vec<&str> = tasks
        .iter()
        .filter(|t| matches!(t.state, State::UpToDate | State::Stale))
        .filter_map(|t| lock.tasks.get(&t.task.name))
        .map(|l| l.before.as_str())
        .collect();
    cassist_core::plan::par_chunks(&keys, |part| {
        part.iter().filter_map(|k| store.get_summary(k).map(|e| (k.to_string(), e))).collect::<Vec<_>>()
    })
    .into_iter()
    .flatten()
    .collect()
}

/// A task whose inputs equal its recorded after-state: nothing to do; its
/// stored summary is shown (read ahead in `shown`, else now).
fn up_to_date(
    runner: &Runner,
    t: &PlannedTask,
    lock: &Lock,
    shown: &HashMap<String, cassist_core::store::EntrySummary>,
) -> TaskEnd {
    let mut r = t.end();
    r.report.state = TaskState::UpToDate;
    // Outputs the user changed since the run: said, and left as they are.
    if !t.cached.outputs_edited.is_empty() {
        r.report.reason = Some(t.cached.outputs_edited.join("; "));
    }
    // The entry whose after-state it is: the lock line's, or one the lock
    // does not name (a `run --locked` replayed it).
    let recorded = lock.tasks.get(&t.task.name).map(|l| (l.agent.clone(), l.before.clone()));
    let recorded = match (&t.cached.entry, recorded) {
        (Some(e), Some((agent, before))) if *e != before => Some((agent, e.clone())),
        (Some(e), None) => Some((t.agent.clone(), e.clone())),
        (_, recorded) => recorded,
    };
    if let Some((agent, before)) = recorded {
        r.report.agent = agent;
        if let Some(entry) = shown.get(&before).cloned().or_else(|| runner.plan.store.get_summary(&before)) {
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
