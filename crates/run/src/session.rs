//! The run pipeline as one library call: open the project (read and check
//! its task files, take the project lock, finish what a killed cassist
//! left), plan (with the team cache filling the store), select, prepare
//! (workspaces, sandbox probes, the run's record folder), schedule, land,
//! record, move the after-states, upload. `cassist run` and `cassist mcp`
//! both run tasks through a [`Session`]; neither repeats its steps.
//!
//! ```text
//! Session::open ─▶ plan() / select() ─▶ prepare() ─▶ Prepared::run ─▶ Ran::finish
//! ```
//!
//! The caller keeps what is its own: how tasks are chosen beyond names
//! (`--shard`), Ctrl-C, progress and the reports. Its [`Sink`] hears of each
//! task as it ends.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cassist_core::event::{Events, TaskEnd, TaskState};
use cassist_core::lock::{Lock, LockLine};
use cassist_core::plan::{LoadOptions, Loaded, Plan, PlannedTask, State, again};
use cassist_core::spec::{ProjectConfig, SpecDiagnostic};
use cassist_core::store::ProjectLock;
use cassist_core::team::TeamCache;
use cassist_core::{errln, fsx};
use cassist_sandbox::process::{Cancel, Redactor};

use crate::runner::network::{self, Egress};
use crate::runner::{Resources, Runner};
use crate::scheduler;
use crate::workspace::{self, Mode};

/// How long the end of a run waits for its uploads to the team cache.
pub const UPLOAD_WAIT: Duration = Duration::from_secs(30);

/// How long an interrupted run waits for them: what is left goes with
/// `cassist cache push`.
pub const INTERRUPTED_UPLOAD_WAIT: Duration = Duration::from_secs(2);

/// Why a session stopped before it ran anything.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The task files or the config are invalid, or a task named does not
    /// exist: nothing was written.
    #[error("the task files or the config are invalid")]
    Invalid(Vec<SpecDiagnostic>),
    /// The project lock cannot be taken.
    #[error("cannot lock {}: {source}", .state.display())]
    Lock {
        state: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// cassist cannot find its own program (the sandbox wrapper is it).
    #[error("cannot find the cassist binary: {0}")]
    Binary(#[source] std::io::Error),
    /// The run's record folder cannot be made.
    #[error("cannot create {}: {source}", .path.display())]
    RunFolder {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Opens the team cache of a project from its config: `None` when it has
/// none; a bad URL or key is a diagnostic.
pub type OpenTeamCache<'a> = &'a dyn Fn(&ProjectConfig) -> Result<Option<Box<dyn TeamCache>>, SpecDiagnostic>;

/// A project opened for a run: its task files read and checked, the
/// project lock held (one run at a time per project), and planned.
pub struct Session {
    plan: Plan,
    lock: ProjectLock,
    team: Option<Arc<dyn TeamCache>>,
}

impl Session {
    /// Reads and checks the task files and config of the project at `cwd`
    /// (invalid input ends here, with nothing written), takes the project
    /// lock (a second run waits, then plans on what the first recorded, so
    /// nothing runs twice), completes or rolls back an integration a killed
    /// cassist left, and plans. The team cache `team` opens is looked up
    /// for the tasks to run when `lookups` (not with `--no-cache`), and
    /// takes the entries of what passes.
    pub fn open(cwd: &Path, options: &LoadOptions, team: OpenTeamCache<'_>, lookups: bool) -> Result<Session, Error> {
        let mut loaded = cassist_core::plan::load(cwd, options).map_err(Error::Invalid)?;
        let root = loaded.project.root.clone();
        let mut waited = false;
        let lock = ProjectLock::acquire(&root, || {
            waited = true;
            errln!("waiting for another cassist run on this project to finish...")
        })
        .map_err(|source| Error::Lock { state: fsx::state_dir(&root), source })?;
        if waited {
            // The other run changed the tree meanwhile: what was read of
            // its files (their sizes and times, which the file-hash cache
            // trusts) is read again.
            loaded = cassist_core::plan::load(cwd, options).map_err(Error::Invalid)?;
        }
        // A run killed while this one waited for the lock may have left an
        // integration unfinished.
        recover(&root, true);
        let team: Option<Arc<dyn TeamCache>> =
            team(&loaded.project.config).map_err(|d| Error::Invalid(vec![d]))?.map(Arc::from);
        let plan = plan(cwd, options, loaded, team.as_deref().filter(|_| lookups))?;
        Ok(Session { plan, lock, team })
    }

    /// The plan of every task of the project.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The tasks named in `names` and every task they depend on, in run
    /// order; all tasks when `names` is empty. An unknown name is invalid
    /// input. A stale task named runs again (its findings made afresh), and
    /// so does a stale task that a selected task depending on it runs its
    /// agent ([`cassist_core::plan::again`]).
    pub fn select(&self, names: &[String]) -> Result<Vec<PlannedTask>, Error> {
        let mut selected: Vec<PlannedTask> = select(&self.plan, names)?.into_iter().cloned().collect();
        again::name(&mut selected, names);
        again::refresh(&mut selected);
        Ok(selected)
    }

    /// Checks the tasks to force ([`Settings::force`]) against `selected`:
    /// each must be a task of the project, and among the tasks selected
    /// (forcing a task runs it again; it never adds it to a run).
    pub fn check_force(&self, force: &[String], selected: &[PlannedTask]) -> Result<(), Error> {
        let mut problems = Vec::new();
        for name in force {
            if self.plan.get(name).is_none() {
                problems.push(self.plan.unknown_task(name));
            } else if !selected.iter().any(|t| t.task.name == *name) {
                problems.push(
                    SpecDiagnostic::error(
                        "forced-not-selected",
                        format!("task `{name}` is to be forced, but it is not among the selected tasks"),
                    )
                    .help(format!(
                        "forcing a task runs it again, it does not select it: select it too (`--filter {name}`), or force another"
                    )),
                );
            }
        }
        if problems.is_empty() { Ok(()) } else { Err(Error::Invalid(problems)) }
    }

    /// Sets up the run: stale workspaces removed, the workspace mode and
    /// Landlock probed (with a note on stderr when one is missing, unless
    /// `quiet`), the run's record folder made.
    pub fn prepare(self, settings: Settings) -> Result<Prepared, Error> {
        if settings.locked && !settings.force.is_empty() {
            // Nothing is written yet.
            return Err(Error::Invalid(vec![
                SpecDiagnostic::error("force-locked", "--force runs agents, which --locked never does")
                    .help("drop --force, or --locked"),
            ]));
        }
        let Session { plan, lock, team } = self;
        let quiet = settings.quiet;
        let egress = Egress::new(&plan.project.config).map_err(|message| {
            Error::Invalid(vec![SpecDiagnostic::error("network-setting", message).help(format!(
                "{} lists host names or addresses, each with an optional :port, separated by commas (`127.0.0.1:9000,pkg.internal`); {}=host gives commands the machine's network",
                network::ALLOW_VAR,
                network::MODE_VAR
            ))])
        })?;
        let exe = std::env::current_exe().map_err(Error::Binary)?;
        let workspaces = workspace::parent_dir(&plan.project.root);
        workspace::remove_stale_in_background(&workspaces);
        if settings.keep_workspace {
            // This run keeps its own: the ones earlier runs kept go.
            let (removed, _) = workspace::remove_kept(&workspaces, &plan.project.root);
            if removed > 0 && !quiet {
                errln!("note: removed {removed} workspace(s) kept by an earlier run of this project");
            }
        }
        let (mode, why) = workspace::detect_mode(&exe, &plan.project.root, &workspaces);
        let wrapper = workspace::wrapper_program(&exe, &plan.project.root, quiet);
        if mode == Mode::Copy && !quiet {
            let because = match why {
                Some(why) => format!("copy-on-write workspaces are unavailable here ({why}{})", apparmor_hint()),
                None => "CASSIST_WORKSPACE=copy".to_owned(),
            };
            errln!(
                "note: {because}; each task works on a copy of the project instead, and its commands go without what namespaces give: a private /tmp, /var/tmp and /dev, a PID namespace of their own (they see every process of the machine), a read-only .git, ptys, and a copy-on-write view of the agents' state folders (what an agent writes in ~/.claude, ~/.codex, ~/.gemini, ~/.factory or ~/.cache stays there), and a network of their own: they reach any host, the machine's loopback services included, and an agent holds its API key itself"
            );
        }
        let run_dir = fsx::state_dir(&plan.project.root).join("runs").join(run_id());
        fsx::ensure_state_dir(&plan.project.root)
            .and_then(|_| std::fs::create_dir_all(&run_dir))
            .map_err(|source| Error::RunFolder { path: run_dir.clone(), source })?;
        // CASSIST_LANDLOCK=off leaves the sandbox to the agents' flags and
        // the review, as on a kernel without Landlock.
        let landlock_off = std::env::var("CASSIST_LANDLOCK").is_ok_and(|v| v == "off");
        let landlock = !landlock_off && cassist_sandbox::sandbox::landlock_abi() > 0;
        if !landlock && !landlock_off && !quiet {
            let copy = if mode == Mode::Copy {
                "; in copy mode nothing keeps a command from reading other tasks' folders or the machine's terminals, nor from writing outside its workspace"
            } else {
                ""
            };
            errln!(
                "note: this kernel has no Landlock: sandbox levels rely on the agents' own flags and on the review of each change{copy}"
            );
        }
        if egress.host && mode == Mode::Overlay && !quiet {
            errln!(
                "note: {}=host: the commands of tasks have the machine's network (any host, its loopback services, cloud metadata) and agents hold their API keys",
                network::MODE_VAR
            );
        }
        if mode == Mode::Overlay
            && !egress.host
            && egress.setup_is_open()
            && !plan.project.config.setup.is_empty()
            && !quiet
        {
            errln!(
                "note: setup commands may reach any public host, as cassist.kdl has no `network` block; name the hosts they need with `network {{ allow \"registry.npmjs.org\" }}` (agents and acceptance commands reach only those)"
            );
        }
        Ok(Prepared { plan, lock, team, exe, wrapper, workspaces, mode, run_dir, landlock, settings, egress })
    }
}

/// What to do where AppArmor keeps unprivileged users from making user
/// namespaces (Ubuntu 23.10 and later), or nothing.
fn apparmor_hint() -> &'static str {
    match std::fs::read_to_string("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") {
        Ok(v) if v.trim() == "1" => {
            "; AppArmor restricts unprivileged user namespaces here: allow them with `sudo sysctl kernel.apparmor_restrict_unprivileged_userns=0`, or give cassist an AppArmor profile with `userns,`"
        }
        _ => "",
    }
}

/// How a run goes.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `--keep-workspace`.
    pub keep_workspace: bool,
    /// `--max-cost` (for the whole run).
    pub max_cost: Option<f64>,
    /// `--locked`: nothing needs an agent, and `cassist.lock` is never
    /// written.
    pub locked: bool,
    /// No notes on stderr.
    pub quiet: bool,
    /// Tasks running at once.
    pub jobs: usize,
    /// `--keep-going`.
    pub keep_going: bool,
    /// `--no-cache`.
    pub no_cache: bool,
    /// `--force`: the tasks whose agents run again, their cache ignored
    /// (whatever their state), but not what they depend on; each must be
    /// among the tasks run ([`Session::check_force`]). Never with
    /// `locked`.
    pub force: Vec<String>,
}

impl Settings {
    /// A plain run: as many tasks at once as there are cores.
    pub fn new() -> Settings {
        Settings {
            keep_workspace: false,
            max_cost: None,
            locked: false,
            quiet: false,
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
            keep_going: false,
            no_cache: false,
            force: Vec::new(),
        }
    }
}

impl Default for Settings {
    fn default() -> Settings {
        Settings::new()
    }
}

/// Hears of a run's tasks as they end.
pub trait Sink {
    /// `end` is how a task ended (passed, replayed, failed...), in the
    /// order tasks end.
    fn finished(&mut self, end: &TaskEnd);

    /// Every task has ended; the end of the run (after-states, caches)
    /// follows.
    fn all_finished(&mut self) {}
}

/// A run set up, before it has a cancel token and an event sink.
pub struct Prepared {
    plan: Plan,
    lock: ProjectLock,
    team: Option<Arc<dyn TeamCache>>,
    exe: PathBuf,
    wrapper: PathBuf,
    workspaces: PathBuf,
    mode: Mode,
    run_dir: PathBuf,
    landlock: bool,
    settings: Settings,
    egress: Egress,
}

impl Prepared {
    /// The folder of the run's records (`.cassist/runs/ID`).
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// Runs `tasks` (in run order; a dependency outside them counts as
    /// done, with its recorded output in `outside`), stopped by `cancel`,
    /// telling `events` of their progress and `sink` of each end. The tasks
    /// of [`Settings::force`] run their agents again, as do the stale tasks
    /// [`Session::select`] marked to refresh; with `--locked`, no stale task
    /// runs (its findings stand). Each task that
    /// passes is uploaded to the team cache in the background. Then, unless
    /// the run was interrupted or is `--locked`, the after-states of the
    /// recorded tasks (stale ones included: their findings are kept) move
    /// to the tree as the run left it.
    pub fn run(
        self,
        mut tasks: Vec<PlannedTask>,
        outside: HashMap<String, String>,
        cancel: Cancel,
        events: Events,
        sink: &mut dyn Sink,
    ) -> Ran {
        let Prepared { plan, lock, team, exe, wrapper, workspaces, mode, run_dir, landlock, settings, egress } = self;
        if settings.locked {
            again::undo(&mut tasks);
        } else {
            again::force(&mut tasks, &settings.force);
        }
        let resources = Resources::new(&plan.project.config.limits, settings.quiet);
        let runner = Arc::new(Runner {
            plan: Arc::new(plan),
            exe,
            wrapper,
            workspaces,
            mode,
            run_dir: run_dir.clone(),
            keep_workspace: settings.keep_workspace,
            landlock,
            shared_state: shared_state(),
            redactor: Arc::new(Redactor::from_env()),
            cancel: cancel.clone(),
            events,
            max_cost: settings.max_cost,
            locked: settings.locked,
            spent: Default::default(),
            integration: Default::default(),
            pending: Default::default(),
            verifications: Default::default(),
            egress: Arc::new(egress),
            resources,
        });
        // Any task that starts a command needs the proxy (with namespaces):
        // it starts while the first workspace is made.
        if mode == Mode::Overlay && tasks.iter().any(|t| t.state != State::UpToDate) {
            runner.egress.warm();
        }
        cassist_core::plan::timing("prepare run");
        let opts = scheduler::Options {
            jobs: settings.jobs,
            keep_going: settings.keep_going,
            locked: settings.locked,
            no_cache: settings.no_cache,
        };
        let outcome = scheduler::run(runner.clone(), tasks.clone(), outside, &opts, &mut |end| {
            sink.finished(end);
            // Recorded in the store: its objects and signed entry go up in
            // the background, never holding up the run.
            if let Some(team) = &team {
                match end.state() {
                    TaskState::Passed => team.spawn_upload(&runner.plan.store, end.name(), &end.report.hash),
                    // The entry of its recorded run took the verified
                    // after-state: the team's next `--locked` run of this
                    // tree needs no acceptance run either.
                    TaskState::Verified => {
                        if let Some(line) = runner.plan.lock.tasks.get(end.name()) {
                            team.spawn_upload(&runner.plan.store, end.name(), &line.before);
                        }
                    }
                    _ => {}
                }
            }
        });
        sink.all_finished();
        // Every change was flushed: no layer is in use.
        workspace::remove_layers(&runner.workspaces);
        let scheduler::Outcome { mut reports, outputs, lock: mut lock_file, needs_agent, touched, hashed_at_end } =
            outcome;
        for r in &mut reports {
            r.refused = needs_agent.iter().any(|(name, _)| name == r.name());
        }
        cassist_core::plan::timing("run tasks");
        let interrupted = cancel.is_cancelled();
        let mut moved = Vec::new();
        // A stale task changes nothing, but its after-state moves: its
        // findings are kept for the inputs it has now.
        let stale = reports.iter().any(|r| r.state() == TaskState::Stale);
        if (touched || stale) && !interrupted && !settings.locked {
            let written = runner.written();
            // Untouched, only the stale tasks' after-states can move.
            let only_stale = !touched;
            moved = update_after_states(
                &runner.plan,
                &tasks,
                &reports,
                &outputs,
                &hashed_at_end,
                &written,
                only_stale,
                &mut lock_file,
            );
        }
        runner.plan.save_caches();
        cassist_core::plan::timing("final hashes");
        Ran { reports, needs_agent, run_dir, runner, moved, cancel, lock, team }
    }
}

/// A run that has ended, its uploads perhaps still going and the project
/// still locked until [`Ran::finish`].
pub struct Ran {
    /// One end per task run, in run order.
    pub reports: Vec<TaskEnd>,
    /// `--locked`: the tasks that would have needed an agent, and why.
    pub needs_agent: Vec<(String, Vec<String>)>,
    /// The folder of the run's records.
    pub run_dir: PathBuf,
    runner: Arc<Runner>,
    /// The task and input hash of each entry whose after-state the end of
    /// the run moved: the team cache gets it again.
    moved: Vec<(String, String)>,
    cancel: Cancel,
    lock: ProjectLock,
    team: Option<Arc<dyn TeamCache>>,
}

impl Ran {
    /// The plan the run ran.
    pub fn plan(&self) -> &Plan {
        &self.runner.plan
    }

    /// Releases the project lock, then waits for the uploads to the team
    /// cache (at most [`UPLOAD_WAIT`], or [`INTERRUPTED_UPLOAD_WAIT`] when
    /// the run was stopped), sending again the entries whose after-state
    /// moved. Returns a warning for each that did not go up.
    pub fn finish(self) -> Vec<String> {
        let Ran { runner, moved, cancel, lock, team, .. } = self;
        // The uploads are waited for without the project lock.
        drop(lock);
        let Some(team) = team else { return Vec::new() };
        let wait = if cancel.is_cancelled() { INTERRUPTED_UPLOAD_WAIT } else { UPLOAD_WAIT };
        let started = std::time::Instant::now();
        let (_, mut warnings) = team.finish_uploads(wait);
        if !moved.is_empty() {
            for (task, before) in &moved {
                team.spawn_upload(&runner.plan.store, task, before);
            }
            warnings.extend(team.finish_uploads(wait.saturating_sub(started.elapsed())).1);
        }
        warnings
    }
}

/// Moves the after-states of a run's recorded tasks to the project as the
/// run left it. A later task may change an earlier one's context files or
/// outputs: the state the project is left in is what each recorded task's
/// after-state (inputs and outputs) must describe, so an unchanged project
/// is up-to-date next time. This is the only place an after-state moves;
/// it is never called with `--locked` (which never writes the lock) nor
/// after an interrupted run. Returns the task and input hash of each entry
/// whose after-state moved (the team cache gets it again). The tasks in
/// `hashed_at_end` were hashed on the tree as the run leaves it when their
/// change was written (nothing was written after): they are not hashed
/// again. Both are hashed through `written`, cassist's own view of what
/// the run wrote: a user's edit merged into a task's file is never taken
/// for the task's work. With `only_stale`, only the tasks that ended
/// `stale` are looked at (nothing else can have moved).
#[allow(clippy::too_many_arguments)]
fn update_after_states(
    plan: &Plan,
    selected: &[PlannedTask],
    reports: &[TaskEnd],
    outputs: &HashMap<String, String>,
    hashed_at_end: &HashSet<String>,
    written: &cassist_core::plan::state::Overlay,
    only_stale: bool,
    lock: &mut Lock,
) -> Vec<(String, String)> {
    let mut changed = Vec::new();
    for (planned, r) in selected.iter().zip(reports) {
        // A task whose outputs the user edited keeps its record: what it
        // wrote, not the user's edit.
        if !r.state().is_success()
            || (only_stale && r.state() != TaskState::Stale)
            || !lock.tasks.contains_key(&planned.task.name)
            || hashed_at_end.contains(&planned.task.name)
            || !planned.cached.outputs_edited.is_empty()
        {
            continue;
        }
        let mut t = planned.clone();
        if plan.hash_inputs(&mut t, outputs, written).is_ok()
            && let Some(entry) = lock.tasks.get_mut(&t.task.name)
        {
            let now = plan.outputs_through(entry, written);
            let moved = now.as_ref().is_some_and(|o| entry.outputs != Some(cassist_core::plan::state::outputs_hash(o)));
            if entry.after != t.hash || moved {
                crate::runner::record::update_after(&plan.store, entry, &t, now);
                changed.push(LockLine { task: t.task.name.clone(), entry: Some(entry.clone()) });
            }
        }
    }
    if let Err(e) = Lock::update(&plan.project.root, &changed) {
        errln!("warning: could not write cassist.lock: {e}");
    }
    changed.iter().filter_map(|l| Some((l.task.clone(), l.entry.as_ref()?.before.clone()))).collect()
}

/// The tasks named in `names` and every task they depend on, in run
/// order; all tasks when `names` is empty. An unknown name is invalid
/// input.
pub fn select<'a>(plan: &'a Plan, names: &[String]) -> Result<Vec<&'a PlannedTask>, Error> {
    if names.is_empty() {
        return Ok(plan.tasks.iter().collect());
    }
    let mut want: HashSet<&str> = HashSet::new();
    let mut stack: Vec<&str> = Vec::new();
    for f in names {
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

/// Completes or rolls back an integration a killed cassist left in the
/// project at `root`, and removes its stray temp files, saying so in one
/// line. Under the project lock: `held` when the caller holds it;
/// otherwise it is taken for the moment, and when another cassist holds it
/// (a run in progress: the integration is its own) nothing is done.
pub fn recover(root: &Path, held: bool) {
    if !cassist_core::journal::pending(root) {
        return;
    }
    let _lock = match held {
        true => None,
        false => match ProjectLock::try_acquire(root) {
            Ok(Some(lock)) => Some(lock),
            _ => return,
        },
    };
    if let Some(done) = cassist_core::journal::recover(root) {
        errln!("note: {done}");
    }
}

/// Hashes loaded tasks into a plan. The version of each built-in agent the
/// tasks may use is part of their hashes: its CLI is asked here (planning
/// itself runs nothing), through the cache in
/// `.cassist/cache/agent-versions` (an unchanged CLI is not asked again).
pub fn plan_loaded(loaded: Loaded) -> Result<Plan, Error> {
    let state = fsx::state_dir(&loaded.project.root);
    let versions = loaded
        .builtin_agents()
        .into_iter()
        .map(|name| {
            let version = crate::agent::cached_version(&state, &name);
            (name, version)
        })
        .collect();
    cassist_core::plan::timing("agent versions");
    cassist_core::plan::plan(loaded, versions).map_err(|d| Error::Invalid(vec![d]))
}

/// Plans `loaded`; with a team cache, the tasks in state `run` are looked
/// up there (all at once, in parallel) and what is fetched lands in the
/// local store, where planning finds it as any entry (a cache fill, like a
/// Nix substituter: planning itself never reaches the network). A task
/// fetched this way may change what its dependents hash to, so the plan is
/// made again until a round fetches nothing. The tasks replayed from a
/// fetched entry are marked `remote`. Warnings go with the plan's.
pub fn plan(cwd: &Path, opts: &LoadOptions, loaded: Loaded, team: Option<&dyn TeamCache>) -> Result<Plan, Error> {
    let mut plan = plan_loaded(loaded)?;
    let Some(team) = team else {
        mark_fetched(&mut plan, Default::default());
        return Ok(plan);
    };
    let mut asked: HashSet<String> = HashSet::new();
    let mut fetched: HashSet<String> = HashSet::new();
    let mut warnings = Vec::new();
    loop {
        // A task to verify: the entry of its recorded run, in case the
        // team verified this very tree already (its after-state is then
        // this one, and the task is up to date without a verification).
        let verified_elsewhere = plan.tasks.iter().filter(|t| t.state == State::Verify).filter_map(|t| {
            let line = plan.lock.tasks.get(&t.task.name)?;
            let local = plan.store.read_entry(&line.before).ok().flatten();
            local.is_none_or(|e| e.after != t.hash).then(|| (t.task.name.clone(), line.before.clone()))
        });
        let wanted: Vec<(String, String)> = plan
            .tasks
            .iter()
            .filter(|t| t.state == State::Run)
            .flat_map(|t| {
                // Its inputs; and, when they are the lock's after-state
                // (outputs edited, the store's entry gone), the entry the
                // lock names.
                let line = plan.lock.tasks.get(&t.task.name).filter(|l| {
                    l.after == t.hash || t.cached.basis == cassist_core::plan::state::Basis::OutputsChanged
                });
                std::iter::once(t.hash.clone()).chain(line.map(|l| l.before.clone())).map(|h| (t.task.name.clone(), h))
            })
            .chain(verified_elsewhere)
            .filter(|(_, h)| asked.insert(h.clone()))
            .collect();
        if wanted.is_empty() {
            break;
        }
        let fill = team.fill(&plan.store, &wanted);
        warnings.extend(fill.warnings);
        if fill.fetched.is_empty() {
            break;
        }
        fetched.extend(fill.fetched);
        let loaded = cassist_core::plan::load(cwd, opts).map_err(Error::Invalid)?;
        plan = plan_loaded(loaded)?;
    }
    mark_fetched(&mut plan, fetched);
    plan.warnings.extend(warnings.into_iter().map(|w| SpecDiagnostic::warning("remote-cache", w)));
    Ok(plan)
}

/// Marks the tasks that replay an entry fetched from the team cache, now
/// (`fetched`) or earlier (the store says so).
fn mark_fetched(plan: &mut Plan, mut fetched: HashSet<String>) {
    for t in &plan.tasks {
        if let Some(e) = &t.cached.entry
            && t.state == State::Replay
            && plan.store.was_fetched(e)
        {
            fetched.insert(e.clone());
        }
    }
    plan.remote_entries = fetched;
    let remote: Vec<bool> = plan.tasks.iter().map(|t| plan.from_remote(t)).collect();
    for (t, remote) in plan.tasks.iter_mut().zip(remote) {
        t.cached.remote = remote;
    }
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
