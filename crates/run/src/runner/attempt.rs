//! One agent run: the prompt and result files, the command line through
//! the agent's adapter, its environment, the run in the sandbox, and what
//! its output says (cost, agent errors, the agent's own report).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::agent::adapter::{AdapterInput, AgentOutput, READ_ONLY_TURN_CAP, read_tail};
use crate::agent::invoke::{self, Invocation, Placeholders};
use crate::workspace::{Layer, Mode};
use cassist_core::part::Part;
use cassist_core::spec::SandboxLevel;
use cassist_sandbox::process::{self, Outcome};

use super::agents::{self, agent_error_reason};
use super::jail::Role;
use super::{Failure, SUMMARY_LIMIT, TaskContext};

/// What one agent run is asked to do.
pub struct Request<'p> {
    pub prompt: &'p str,
    /// The whole task, or a part of a split one.
    pub part: &'p Part,
    /// `CASSIST_ATTEMPT`: the attempt of this part.
    pub part_attempt: u32,
    pub timeout: Duration,
}

/// What one agent run came to.
pub enum Step {
    /// It ran to its end, successfully or not.
    Ran(Ran),
    /// The same prompt goes to the next agent of the chain.
    Again,
    /// Killed or timed out: too large for one run, so the task is split
    /// rather than retried as it is.
    Oversized(Oversized),
}

pub struct Ran {
    pub finished: process::Finished,
    /// Refused or failed tool calls of a CLI that exited 0.
    pub soft_failure: Option<String>,
    /// The agent reported: it wrote a result report, or (a built-in CLI)
    /// its output ends with a final result message. An agent that changed
    /// nothing and reported nothing is resumed once.
    pub reported: bool,
    pub summary: Option<String>,
    pub cost_usd: Option<f64>,
}

pub struct Oversized {
    /// `killed` or `timed out`.
    pub what: &'static str,
    pub elapsed: Duration,
    /// The outcome in words (`killed by signal 9 (SIGKILL)`).
    pub detail: String,
    pub tail: String,
    pub cost_usd: Option<f64>,
}

/// The files of one agent run.
struct RunFiles {
    /// The agent's own folder outside the workspace.
    io: PathBuf,
    prompt: PathBuf,
    result: PathBuf,
    transcript: PathBuf,
}

/// One run of the first agent of the chain.
pub fn attempt(task: &mut TaskContext<'_>, req: &Request<'_>) -> Result<Step, Failure> {
    let attempt = task.facts().attempts + 1;
    task.runner().check_budget()?;
    let files = write_prompt(task, req.prompt, attempt)?;
    let inv = task.choose_agent();
    let who = match &task.task().model {
        Some(m) => format!("{} ({m})", inv.name()),
        None => inv.name().to_owned(),
    };
    let detail = if req.part.is_whole() { who } else { format!("{who}, part {}", req.part.label()) };
    task.phase("agent", attempt, detail);
    let finished = match run_agent(task, &inv, req, &files) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound || e.kind() == std::io::ErrorKind::PermissionDenied => {
            // The wrapper could not start: the next agent of the chain, if
            // any.
            return agents::next_after_start_failure(task, &e.to_string());
        }
        Err(super::CommandError::Refused(why)) => {
            return Err(Failure::failed(format!("agent `{}` failed: {why}", inv.name())));
        }
        Err(super::CommandError::OverLimit(over)) => {
            // It ran: its transcript is the task's.
            task.count_run(files.transcript.clone());
            return Err(Failure::over_limit(&format!("the agent `{}`", inv.name()), &over));
        }
        Err(e) => return Err(Failure::failed(format!("cannot start agent `{}`: {e}", inv.name()))),
    };
    if finished.outcome == Outcome::Exited(cassist_sandbox::sandbox::NOT_FOUND)
        && finished.tail.contains("cassist: cannot run")
    {
        // It failed to start: the next agent of the chain, if any.
        return agents::next_after_start_failure(task, finished.tail.trim());
    }
    after_run(task, &inv, finished, req.part, &files, attempt)
}

/// The prompt of attempt `attempt`, where the agent reads it and in the
/// record.
fn write_prompt(task: &TaskContext<'_>, prompt: &str, attempt: u32) -> Result<RunFiles, Failure> {
    let io = task.workspace().io_dir().map_err(|e| Failure::failed(format!("cannot prepare the workspace: {e}")))?;
    let record = task.record_dir();
    let files = RunFiles {
        prompt: io.join(format!("prompt-{attempt}.md")),
        result: io.join(format!("result-{attempt}.json")),
        transcript: record.join(format!("transcript-{attempt}.log")),
        io,
    };
    let _ = std::fs::remove_file(&files.result);
    write_new(&files.prompt, prompt.as_bytes())
        .map_err(|e| Failure::failed(format!("cannot write the prompt: {e}")))?;
    let _ = std::fs::write(record.join(format!("prompt-{attempt}.md")), task.runner().redactor.redact(prompt));
    Ok(files)
}

/// Runs the agent in the workspace's sandbox until it ends.
fn run_agent(
    task: &TaskContext<'_>,
    inv: &Invocation,
    req: &Request<'_>,
    files: &RunFiles,
) -> Result<process::Finished, super::CommandError> {
    let (t, runner, ws) = (task.task(), task.runner(), task.workspace());
    let subtask = req.part.name(task.name());
    let mut env = agent_env(inv, req, &subtask, files, t.model.as_deref());
    // Below `full` the session's sockets are hidden: nothing points at
    // them (whatever `pass-env` says).
    if t.sandbox != SandboxLevel::Full {
        cassist_sandbox::sandbox::without_socket_env(&mut env);
    }
    let mut jail = runner.jail(Role::Agent, t.sandbox, ws, Some(&files.io), Some(inv), &env);
    let net = task.network(Role::Agent, Some(inv), &mut jail)?;
    if let Some(net) = &net {
        super::network::set_env(&mut env, &net.env);
    }
    let landlock = jail.landlock;
    // A built-in adapter maps the sandbox level, the kind, the turn cap and
    // the budget onto its CLI's own flags.
    let base_argv = inv.argv(&AdapterInput {
        sandbox: t.sandbox,
        read_only_kind: t.task.kind.is_read_only(),
        max_turns: t.turn_cap.or(t.task.kind.is_read_only().then_some(READ_ONLY_TURN_CAP)),
        max_cost: t.max_cost,
        model: t.model.as_deref(),
        prompt_file: &files.prompt,
        workdir: &ws.dir,
        io_dir: &files.io,
        // Under Landlock no sandbox of the agent's own can be set up
        // (Landlock refuses mount(2), and the uid map is not writable): a
        // CLI's own sandbox (Codex's bubblewrap) fails there, so Landlock
        // alone enforces the level.
        userns: !landlock && (runner.mode == Mode::Overlay || cassist_sandbox::sandbox::userns_available()),
    });
    if let Some(note) = inv.sandbox_note(&base_argv, t.sandbox, landlock) {
        task.note(note);
    }
    let argv = invoke::fill_argv(
        &base_argv,
        &Placeholders {
            prompt: req.prompt,
            prompt_file: &files.prompt,
            workdir: &ws.dir,
            task: &subtask,
            model: t.model.as_deref().unwrap_or(""),
        },
    );
    let mut cmd = ws.sandboxed(Layer::Agent, argv, jail)?;
    cmd.env = env;
    // Every agent gets the prompt on stdin too.
    cmd.stdin = Some(req.prompt.to_owned().into_bytes());
    cmd.timeout = Some(req.timeout);
    cmd.transcript = Some(files.transcript.clone());
    let finished = runner.run(&cmd)?;
    task.after_network(net.as_ref(), &finished)?;
    Ok(finished)
}

/// What a run that started came to: counted, its cost added, then judged
/// by how it ended and what its output and report say.
fn after_run(
    task: &mut TaskContext<'_>,
    inv: &Invocation,
    finished: process::Finished,
    part: &Part,
    files: &RunFiles,
    attempt: u32,
) -> Result<Step, Failure> {
    task.count_run(files.transcript.clone());
    let (record, redactor) = (task.record_dir(), &task.runner().redactor);
    // The agent's result file, read once (within a limit) and recorded
    // redacted: nothing stores it as the agent wrote it.
    let result = match read_result_bytes(&files.result) {
        ResultBytes::Absent => None,
        ResultBytes::TooLarge(size) => {
            task.note(format!(
                "the agent's result file is {}, over {}: it is ignored",
                cassist_core::limits::format_size(size),
                cassist_core::limits::format_size(RESULT_LIMIT)
            ));
            let note = format!("[cassist: a result file of {size} bytes was ignored]\n");
            let _ = std::fs::write(record.join(format!("result-{attempt}.json")), note);
            None
        }
        ResultBytes::Read(bytes) => {
            let _ = std::fs::write(record.join(format!("result-{attempt}.json")), redactor.redact_document(&bytes));
            Some(bytes)
        }
    };

    // What the CLI's machine-readable output says, and what the run cost:
    // counted for a killed run too.
    let parsed = inv.parse(&read_tail(&files.transcript, 4 << 20), finished.outcome, &files.io);
    // Any agent may report its cost in its result file; a built-in CLI's
    // own output, when it says, takes precedence.
    let cost_usd = parsed.as_ref().and_then(|p| p.cost_usd).or_else(|| result.as_deref().and_then(result_cost));
    if let Some(c) = cost_usd {
        task.add_cost(c);
    }
    let oversized = |what: &'static str| {
        Ok(Step::Oversized(Oversized {
            what,
            elapsed: finished.duration,
            detail: super::failure::ended(&finished),
            tail: finished.tail.clone(),
            cost_usd,
        }))
    };
    match finished.outcome {
        Outcome::Cancelled => return Err(Failure::interrupted()),
        Outcome::TimedOut => return oversized("timed out"),
        Outcome::Signaled(9) | Outcome::Exited(137) => return oversized("killed"),
        Outcome::Exited(c) if c != 0 && finished.killed_by_oom_hint => return oversized("killed"),
        _ => {}
    }
    if let Some(p) = &parsed {
        let _ = std::fs::write(
            record.join(format!("agent-{attempt}.json")),
            redactor.redact_document(&serde_json::to_vec_pretty(p).unwrap_or_default()),
        );
        if let Some(step) = agent_error(task, inv, p, &finished.tail)? {
            return Ok(step);
        }
    }

    // The agent's own report.
    let agent_report = result.as_deref().and_then(read_result_file);
    if let Some(Err(reason)) = &agent_report {
        let reason = redactor.redact(reason);
        return Err(Failure::blocked(if part.is_whole() {
            format!("the agent reported that it cannot do the task: {reason}")
        } else {
            format!("the agent reported that it cannot do {} of the task: {reason}", part.describe())
        }));
    }
    let reported = agent_report.is_some() || parsed.as_ref().is_some_and(|p| p.summary.is_some());
    let summary = match agent_report {
        Some(Ok(Some(s))) => Some(s),
        _ => parsed.as_ref().and_then(|p| p.summary.clone()).or_else(|| last_message(&finished.tail)),
    };
    // A CLI that exits 0 after refused or failed tool calls failed.
    let soft_failure = parsed
        .as_ref()
        .and_then(|p| p.error.as_ref())
        .filter(|e| e.kind.is_tool_failure())
        .map(|e| redactor.redact(&e.message));
    Ok(Step::Ran(Ran { finished, soft_failure, reported, summary: summary.map(|s| redactor.redact(&s)), cost_usd }))
}

/// An error the CLI reported: the next agent of the chain, the end of the
/// task, or (for refused or failed tool calls) nothing yet.
fn agent_error(
    task: &mut TaskContext<'_>,
    inv: &Invocation,
    output: &AgentOutput,
    tail: &str,
) -> Result<Option<Step>, Failure> {
    let Some(err) = &output.error else { return Ok(None) };
    if err.kind.fails_over() && task.has_next_agent() {
        return Ok(Some(agents::next_after_api_error(task, err.kind)));
    }
    if err.kind.ends_task() {
        let message = task.runner().redactor.redact(&err.message);
        return Err(Failure::failed(agent_error_reason(inv.name(), err.kind, &message)).with_tail(tail));
    }
    Ok(None)
}

/// The agent's environment: the allowlist and its own variables, the
/// `CASSIST_*` variables of this run (`CASSIST_MODEL` when a model is
/// asked for), and a private temp folder.
fn agent_env(
    inv: &Invocation,
    req: &Request<'_>,
    subtask: &str,
    files: &RunFiles,
    model: Option<&str>,
) -> Vec<(OsString, OsString)> {
    let mut extra: Vec<(String, OsString)> = vec![
        ("CASSIST_TASK".into(), subtask.into()),
        ("CASSIST_ATTEMPT".into(), req.part_attempt.to_string().into()),
        ("CASSIST_PART".into(), req.part.env().into()),
        ("CASSIST_PROMPT_FILE".into(), files.prompt.clone().into()),
        ("CASSIST_RESULT_FILE".into(), files.result.clone().into()),
    ];
    if let Some(m) = model {
        extra.push(("CASSIST_MODEL".into(), m.into()));
    }
    extra.extend(inv.extra_env(model).into_iter().map(|(k, v)| (k, OsString::from(v))));
    // A private temp folder, inside the agent's writable io folder.
    let tmp = files.io.join("tmp");
    if std::fs::create_dir_all(&tmp).is_ok() {
        extra.push(("TMPDIR".into(), tmp.into()));
    }
    invoke::environment(&inv.pass_env(), &extra)
}

/// Writes `bytes` to a new file at `path`, replacing what is there: never
/// through a symlink an agent put in its place (its io folder is writable
/// to it).
fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).custom_flags(libc::O_NOFOLLOW).open(path)?;
    f.write_all(bytes)
}

/// Most bytes of a result file that are read: a report is a few lines.
const RESULT_LIMIT: u64 = 1 << 20;

/// What the result file holds.
enum ResultBytes {
    Absent,
    TooLarge(u64),
    Read(Vec<u8>),
}

/// The result file's bytes, read only when it is a regular file within
/// [`RESULT_LIMIT`] (never following a symlink or opening a fifo).
fn read_result_bytes(path: &Path) -> ResultBytes {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else { return ResultBytes::Absent };
    if !meta.is_file() {
        return ResultBytes::Absent;
    }
    if meta.len() > RESULT_LIMIT {
        return ResultBytes::TooLarge(meta.len());
    }
    let Ok(f) = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path)
    else {
        return ResultBytes::Absent;
    };
    let mut bytes = Vec::new();
    match f.take(RESULT_LIMIT + 1).read_to_end(&mut bytes) {
        Ok(n) if n as u64 > RESULT_LIMIT => ResultBytes::TooLarge(n as u64),
        Ok(_) => ResultBytes::Read(bytes),
        Err(_) => ResultBytes::Absent,
    }
}

/// `cost_usd` of the agent's result report, when it gives one.
fn result_cost(bytes: &[u8]) -> Option<f64> {
    let v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    v.get("cost_usd").and_then(|c| c.as_f64()).filter(|c| c.is_finite() && *c >= 0.0)
}

/// The agent's result report: `None` when not a report,
/// `Some(Ok(summary))` on success, `Some(Err(reason))` on reported failure.
fn read_result_file(bytes: &[u8]) -> Option<Result<Option<String>, String>> {
    let v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    match v.get("success").and_then(|s| s.as_bool()) {
        Some(true) => Some(Ok(v.get("summary").and_then(|s| s.as_str()).map(str::to_owned))),
        Some(false) => Some(Err(v
            .get("reason")
            .and_then(|s| s.as_str())
            .filter(|s| !s.trim().is_empty())
            .unwrap_or("no reason given")
            .to_owned())),
        None => None,
    }
}

/// The agent's last words: the end of its output.
fn last_message(tail: &str) -> Option<String> {
    let t = tail.trim();
    if t.is_empty() {
        return None;
    }
    let start = t.len().saturating_sub(SUMMARY_LIMIT);
    let start = (start..t.len()).find(|&i| t.is_char_boundary(i)).unwrap_or(t.len());
    Some(t[start..].to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_files_say_success_summary_or_reason() {
        assert_eq!(read_result_file(b"not json"), None);
        let report = br#"{"success": true, "summary": "done", "cost_usd": 0.25}"#;
        assert_eq!(read_result_file(report), Some(Ok(Some("done".into()))));
        assert_eq!(result_cost(report), Some(0.25));
        assert_eq!(read_result_file(br#"{"success": false, "reason": "  "}"#), Some(Err("no reason given".into())));
        assert_eq!(read_result_file(br#"{"cost_usd": -1}"#), None);
        assert_eq!(result_cost(br#"{"cost_usd": -1}"#), None);
    }

    #[test]
    fn result_files_are_read_within_a_limit_and_never_through_a_link_or_fifo() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("result.json");
        assert!(matches!(read_result_bytes(&f), ResultBytes::Absent));
        std::fs::write(&f, "{}").unwrap();
        assert!(matches!(read_result_bytes(&f), ResultBytes::Read(b) if b == b"{}"));
        // A sparse file of 2 GiB: its size says enough.
        std::fs::File::create(&f).unwrap().set_len(2 << 30).unwrap();
        assert!(matches!(read_result_bytes(&f), ResultBytes::TooLarge(n) if n == 2 << 30));
        std::fs::remove_file(&f).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", &f).unwrap();
        assert!(matches!(read_result_bytes(&f), ResultBytes::Absent));
        std::fs::remove_file(&f).unwrap();
        nix::unistd::mkfifo(&f, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        assert!(matches!(read_result_bytes(&f), ResultBytes::Absent), "a fifo would block");
    }

    #[test]
    fn prompts_are_never_written_through_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("bashrc");
        std::fs::write(&victim, "the user's\n").unwrap();
        let prompt = dir.path().join("prompt-2.md");
        std::os::unix::fs::symlink(&victim, &prompt).unwrap();
        write_new(&prompt, b"# Goal\n").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "the user's\n");
        assert!(std::fs::symlink_metadata(&prompt).unwrap().is_file());
        assert_eq!(std::fs::read_to_string(&prompt).unwrap(), "# Goal\n");
    }

    #[test]
    fn the_last_message_is_cut_at_a_character_boundary() {
        assert_eq!(last_message("  \n"), None);
        let long = format!("{}é{}", "a".repeat(10), "b".repeat(SUMMARY_LIMIT - 1));
        let m = last_message(&long).unwrap();
        assert_eq!(m, "b".repeat(SUMMARY_LIMIT - 1));
    }
}
