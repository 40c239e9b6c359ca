//! The MCP tools (`list_tasks`, `run_tasks`,
//! `dispatch_subagent`, `explain_task`), their argument schemas, and what
//! a call does while it runs: progress notifications, cancellation.

use std::sync::{Arc, Condvar, Mutex};

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, ProgressNotificationParam, ServerCapabilities, ServerConfig,
};
use rmcp::schemars::{self, JsonSchema};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, tool, tool_handler, tool_router};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::call::{Ran, Refused, RunCall, Selection, Serving};
use super::inline::{DISPATCH_TURNS, InlineKind, InlineTask, MAX_INLINE, source};
use cassist_core::event::{Event, TaskEnd};
use cassist_sandbox::process::Cancel;

/// Summaries are cut at this many characters.
pub const SUMMARY_CHARS: usize = 1000;

/// The calls that run tasks now, to cancel them all (stdin closed, a
/// signal) and wait for their end before the server exits.
#[derive(Default)]
pub struct Calls {
    active: Mutex<Vec<(u64, Cancel)>>,
    next: std::sync::atomic::AtomicU64,
    ended: Condvar,
}

impl Calls {
    fn register(self: &Arc<Self>, cancel: Cancel) -> CallGuard {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.active.lock().unwrap_or_else(|e| e.into_inner()).push((id, cancel));
        CallGuard { calls: self.clone(), id }
    }

    /// Stops every call in progress as Ctrl-C stops a run.
    pub fn cancel_all(&self) {
        for (_, c) in self.active.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            c.cancel();
        }
    }

    /// Waits until no call runs.
    pub fn wait_idle(&self) {
        let mut active = self.active.lock().unwrap_or_else(|e| e.into_inner());
        while !active.is_empty() {
            active = self.ended.wait(active).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// A call in progress; its end is noted when dropped.
struct CallGuard {
    calls: Arc<Calls>,
    id: u64,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        let mut active = self.calls.active.lock().unwrap_or_else(|e| e.into_inner());
        active.retain(|(id, _)| *id != self.id);
        self.calls.ended.notify_all();
    }
}

/// The server: one per `cassist mcp`.
#[derive(Clone)]
pub struct Server {
    serving: Arc<Serving>,
    calls: Arc<Calls>,
    /// The calls being worked on, at most [`POOL`]: the others wait,
    /// costing a small future each, not a thread.
    pool: Arc<tokio::sync::Semaphore>,
    tool_router: ToolRouter<Server>,
}

/// Calls worked on at once (planning on a blocking thread, or a run on a
/// thread of its own); runs take turns on the project lock anyway.
pub const POOL: usize = 4;

/// `run_tasks`: tasks of the project's task files by name, or tasks given
/// inline.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunTasksArgs {
    /// Names of tasks of the project's task files (run with what they
    /// depend on).
    #[serde(default)]
    pub names: Option<Vec<String>>,
    /// Tasks given inline (at most 8): each the dispatch of a sub-agent
    /// with a goal and a kind.
    #[serde(default)]
    pub tasks: Option<Vec<InlineTask>>,
    /// No agent starts once the agents of this call reported spending
    /// this many US dollars.
    #[serde(default)]
    pub max_cost: Option<f64>,
}

/// The kind of a dispatched sub-agent.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AgentType {
    /// Reads the code and reports.
    Explore,
    /// Runs tests and reports; changes no file.
    Test,
    /// Reviews and reports.
    Review,
}

/// `dispatch_subagent`: one sub-agent that changes no file.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DispatchArgs {
    /// explore, test or review.
    pub agent_type: AgentType,
    /// What the sub-agent must find out, check or review.
    pub task: String,
    /// Files (paths or globs relative to the project root) it is given
    /// as context; each must match a file.
    #[serde(default)]
    pub context: Option<Vec<String>>,
}

/// `explain_task`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExplainArgs {
    /// A task of the project's task files.
    pub name: String,
}

/// One task's outcome in a tool result.
#[derive(Serialize)]
struct TaskOutcome<'a> {
    name: &'a str,
    state: &'static str,
    summary: Option<String>,
    changed_files: &'a [String],
    acceptance: &'a [cassist_core::event::AcceptanceReport],
    cost_usd: Option<f64>,
    reason: Option<&'a str>,
}

fn outcome(end: &TaskEnd) -> TaskOutcome<'_> {
    let r = &end.report;
    TaskOutcome {
        name: &r.name,
        state: r.state.as_str(),
        summary: r.summary.as_deref().map(|s| cassist_core::text::truncate_chars(s, SUMMARY_CHARS)),
        changed_files: &r.changed_files,
        acceptance: &r.acceptance,
        cost_usd: r.cost_usd,
        reason: r.reason.as_deref(),
    }
}

fn refused(why: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(why.into())])
}

fn internal(e: impl std::fmt::Display) -> ErrorData {
    ErrorData::internal_error(format!("internal error: {e}"), None)
}

impl Server {
    pub fn new(serving: Serving, calls: Arc<Calls>) -> Server {
        Server {
            serving: Arc::new(serving),
            calls,
            pool: Arc::new(tokio::sync::Semaphore::new(POOL)),
            tool_router: Self::tool_router(),
        }
    }

    /// The plan of the project's task files, made on a blocking thread.
    async fn plan(&self) -> Result<Result<cassist_core::plan::Plan, Refused>, ErrorData> {
        let serving = self.serving.clone();
        let _turn = self.pool.clone().acquire_owned().await.map_err(internal)?;
        tokio::task::spawn_blocking(move || serving.plan()).await.map_err(internal)
    }

    /// Runs `selection` on a thread of its own (the scheduler has its own
    /// runtime), sending a progress notification for each task state
    /// change when the client asked for them; the client cancelling the
    /// call stops its agents as Ctrl-C does.
    async fn run(
        &self,
        selection: Selection,
        max_cost: Option<f64>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Result<Ran, Refused>, ErrorData> {
        let cancel = Cancel::default();
        let _guard = self.calls.register(cancel.clone());
        let (news, mut heard) = tokio::sync::mpsc::unbounded_channel::<String>();
        let token = ctx.meta.get_progress_token();
        let peer = ctx.peer.clone();
        let forward = tokio::spawn(async move {
            let mut n = 0u32;
            while let Some(message) = heard.recv().await {
                let Some(token) = &token else { continue };
                n += 1;
                let p = ProgressNotificationParam::new(token.clone(), f64::from(n)).with_message(message);
                let _ = peer.notify_progress(p).await;
            }
        });
        let phases = news.clone();
        let events: cassist_core::event::Events = Arc::new(move |e: Event<'_>| {
            if let Event::Phase { task, phase, attempt, .. } = e {
                let _ = phases.send(format!("{task}: {phase} (attempt {attempt})"));
            }
        });
        let call = RunCall { selection, max_cost, cancel: cancel.clone(), events };
        let serving = self.serving.clone();
        let (done, result) = tokio::sync::oneshot::channel();
        // Its turn; a call cancelled while waiting for it ends there.
        let turn = tokio::select! {
            t = self.pool.clone().acquire_owned() => t.map_err(internal)?,
            () = ctx.ct.cancelled() => return Err(ErrorData::internal_error("cancelled before it started", None)),
        };
        std::thread::Builder::new()
            .name("cassist-mcp-run".into())
            .spawn(move || {
                let _turn = turn;
                let mut finished = |end: &TaskEnd| {
                    let _ = news.send(format!("{}: {}", end.name(), end.shown_state()));
                };
                let _ = done.send(serving.run(call, &mut finished));
            })
            .map_err(internal)?;
        let mut result = result;
        let ran = tokio::select! {
            r = &mut result => r,
            () = ctx.ct.cancelled() => {
                cancel.cancel();
                result.await
            }
        };
        let _ = forward.await;
        ran.map_err(internal)
    }
}

#[tool_router]
impl Server {
    /// The project's tasks.
    #[tool(
        description = "List the tasks of the project's task files: name, kind, state (up-to-date, replay: served from the cache, verify: its acceptance commands decide, stale: an explore/review task's recorded findings kept though what it reads changed, until it is named in run_tasks or a task depending on it runs; run: needs an agent), agent and goal.",
        annotations(read_only_hint = true)
    )]
    async fn list_tasks(&self) -> Result<CallToolResult, ErrorData> {
        let plan = match self.plan().await? {
            Ok(p) => p,
            Err(Refused(why)) => return Ok(refused(why)),
        };
        let tasks: Vec<Value> = plan
            .tasks
            .iter()
            .map(|t| {
                json!({
                    "name": t.task.name,
                    "kind": t.task.kind.as_str(),
                    "state": t.state.as_str(),
                    "agent": t.agent,
                    "goal": t.task.goal,
                })
            })
            .collect();
        Ok(CallToolResult::structured(json!({ "tasks": tasks })))
    }

    /// Runs tasks by name or inline.
    #[tool(
        description = "Run tasks through cassist, each in its sandbox with its timeout, review, acceptance and cache: either `names` of tasks of the project's task files, or up to 8 inline `tasks` (a goal and a kind each). Runs them in parallel, dependencies respected; an unchanged task is served from the cache without an agent. Returns per task its state, summary (at most 1000 characters), changed files, acceptance results, cost and the reason of a failure."
    )]
    async fn run_tasks(
        &self,
        Parameters(args): Parameters<RunTasksArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let names = args.names.unwrap_or_default();
        let tasks = args.tasks.unwrap_or_default();
        let selection = match (names.is_empty(), tasks.is_empty()) {
            (false, true) => Selection::Named(names),
            (true, false) if tasks.len() > MAX_INLINE => {
                return Ok(refused(format!("{} inline tasks given: at most {MAX_INLINE} in one call", tasks.len())));
            }
            (true, false) => {
                let named: Vec<(String, &InlineTask)> = tasks.iter().map(|t| (t.name("run"), t)).collect();
                let names = named.iter().map(|(n, _)| n.clone()).collect();
                Selection::Inline { names, source: source(&named), turn_cap: None }
            }
            (false, false) => return Ok(refused("give either `names` or `tasks`, not both")),
            (true, true) => return Ok(refused("give `names` (tasks of the task files) or `tasks` (inline tasks)")),
        };
        if args.max_cost.is_some_and(|c| !(c.is_finite() && c >= 0.0)) {
            return Ok(refused("`max_cost` must be a number of US dollars, 0 or more"));
        }
        let ran = match self.run(selection, args.max_cost, &ctx).await? {
            Ok(ran) => ran,
            Err(Refused(why)) => return Ok(refused(why)),
        };
        let tasks: Vec<TaskOutcome<'_>> = ran.ends.iter().map(outcome).collect();
        let mut doc = json!({ "tasks": tasks });
        if !ran.warnings.is_empty() {
            doc["warnings"] = json!(ran.warnings);
        }
        Ok(CallToolResult::structured(doc))
    }

    /// One read-only sub-agent.
    #[tool(
        description = "Dispatch one sub-agent (explore, test or review) with a task and optional context files: it runs sandboxed with an isolated context and at most 15 turns, changes no file, and returns its summary (at most 1000 characters). The same dispatch again is served from cassist's cache."
    )]
    async fn dispatch_subagent(
        &self,
        Parameters(args): Parameters<DispatchArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let kind = match args.agent_type {
            AgentType::Explore => InlineKind::Explore,
            AgentType::Test => InlineKind::Test,
            AgentType::Review => InlineKind::Review,
        };
        let task = InlineTask::dispatch(kind, args.task, args.context.unwrap_or_default());
        let name = task.name("dispatch");
        let selection = Selection::Inline {
            names: vec![name.clone()],
            source: source(&[(name, &task)]),
            turn_cap: Some(DISPATCH_TURNS),
        };
        let ran = match self.run(selection, None, &ctx).await? {
            Ok(ran) => ran,
            Err(Refused(why)) => return Ok(refused(why)),
        };
        let Some(end) = ran.ends.first() else { return Ok(refused("the sub-agent did not run")) };
        let o = outcome(end);
        // The summary alone is the result (what a coordinator reads); how
        // the task ended is in `_meta`.
        let mut meta = serde_json::Map::new();
        meta.insert("cassist/task".into(), json!(o.name));
        meta.insert("cassist/state".into(), json!(o.state));
        let result = match (&o.summary, end.state().is_success()) {
            (Some(s), true) => CallToolResult::success(vec![ContentBlock::text(s.clone())]),
            (None, true) => CallToolResult::success(vec![ContentBlock::text("(the sub-agent gave no summary)")]),
            (_, false) => CallToolResult::error(vec![ContentBlock::text(format!(
                "sub-agent {}: {}",
                o.state,
                o.reason.unwrap_or("no reason given")
            ))]),
        };
        Ok(result.with_meta(Some(rmcp::model::MetaObject(meta))))
    }

    /// Why a task is in its state.
    #[tool(
        description = "Explain a task of the project's task files: its state, input hash and the reasons (what changed since its recorded run), as `cassist explain` does.",
        annotations(read_only_hint = true)
    )]
    async fn explain_task(&self, Parameters(args): Parameters<ExplainArgs>) -> Result<CallToolResult, ErrorData> {
        let plan = match self.plan().await? {
            Ok(p) => p,
            Err(Refused(why)) => return Ok(refused(why)),
        };
        let Some(t) = plan.get(&args.name) else {
            return Ok(refused(super::call::diagnostic(&plan.unknown_task(&args.name))));
        };
        let inputs: Vec<Value> =
            t.key.inputs.iter().map(|i| json!({"kind": i.kind, "name": i.name, "hash": i.hash})).collect();
        Ok(CallToolResult::structured(json!({
            "name": t.task.name,
            "state": t.state.as_str(),
            "hash": t.hash,
            "reasons": cassist_core::plan::why::why(&plan, t),
            "inputs": inputs,
        })))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("cassist", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "cassist runs coding sub-agents sandboxed, with timeouts, review, acceptance and a content-addressed cache. Use dispatch_subagent for an explore/test/review sub-task, run_tasks for tasks of the project's task files or inline tasks, list_tasks and explain_task to see the project's tasks.",
            )
    }
}
