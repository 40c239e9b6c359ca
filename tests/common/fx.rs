//! The fixture of the `run` tests: a project outside the temp folders, a
//! folder beside it for what agents and tests leave there, and the end of
//! one `cassist run` with its `--report-json` document.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Project, git};

/// A project, and a folder outside it for what the agents and the tests
/// leave there (saved prompts, markers, the report).
pub struct Fx {
    pub project: Project,
    pub out: tempfile::TempDir,
}

impl Fx {
    /// A project with `cassist.kdl` (trusted, no project test command,
    /// `agents` appended) and `tasks/t.kdl` holding `tasks`.
    pub fn new(agents: &str, tasks: &str) -> Fx {
        // Outside the temp folder: in copy mode, agents may write temp
        // folders only when the user's project is not inside one (see
        // `absolute_path_write_in_copy_mode_is_refused`).
        let dir = tempfile::Builder::new().prefix("cassist-test-").tempdir_in(super::outside_temp_dir()).unwrap();
        Fx::with_project(Project { dir }, agents, tasks)
    }

    /// Like [`new`](Fx::new), with the project under the temp folder.
    pub fn new_under_tmp(agents: &str, tasks: &str) -> Fx {
        Fx::with_project(Project::new(), agents, tasks)
    }

    pub fn with_project(project: Project, agents: &str, tasks: &str) -> Fx {
        project
            .file("cassist.kdl", &format!("trust \"workspace-write\"\ntest #false\n\n{agents}"))
            .file("tasks/t.kdl", tasks);
        let out = tempfile::Builder::new().prefix("cassist-test-out-").tempdir().unwrap();
        Fx { project, out }
    }

    pub fn path(&self) -> &Path {
        self.project.path()
    }

    pub fn out(&self) -> &Path {
        self.out.path()
    }

    pub fn file(&self, rel: &str, text: &str) -> &Fx {
        self.project.file(rel, text);
        self
    }

    pub fn read(&self, rel: &str) -> String {
        self.project.read(rel)
    }

    pub fn home(&self) -> PathBuf {
        let home = self.out().join("home");
        std::fs::create_dir_all(&home).unwrap();
        home
    }

    pub fn report_path(&self) -> PathBuf {
        self.out().join("report.json")
    }

    /// `cassist run --report-json OUT/report.json ARGS` to completion.
    pub fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Done {
        let started = Instant::now();
        let output = self.command(args, env).output().expect("run cassist");
        Done {
            status: output.status,
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            elapsed: started.elapsed(),
            report: std::fs::read_to_string(self.report_path()).unwrap_or_default(),
        }
    }

    /// The command [`run`](Fx::run) runs: the same clean environment as
    /// `Project::run_env` (PATH only, NO_COLOR) plus `env`, but with HOME a
    /// folder of its own outside the project, as on a real machine (agents
    /// keep state there, and cassist prepares their state folders in it).
    pub fn command(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_cassist"));
        cmd.current_dir(self.path())
            .arg("run")
            .arg("--report-json")
            .arg(self.report_path())
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.home())
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd
    }

    /// Makes the project a git repository with one commit of everything.
    pub fn git_init(&self) -> &Fx {
        git(self.path(), &["init", "-q"]);
        git(self.path(), &["add", "-A"]);
        git(
            self.path(),
            &["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", "commit", "-qm", "init"],
        );
        self
    }

    pub fn head(&self) -> String {
        git(self.path(), &["rev-parse", "HEAD"])
    }

    /// `git status --porcelain` without the lock file cassist writes (it is
    /// meant to be committed; its own tests check it).
    pub fn status(&self) -> String {
        git(self.path(), &["status", "--porcelain"])
            .lines()
            .filter(|l| *l != "?? cassist.lock")
            .map(|l| format!("{l}\n"))
            .collect()
    }

    /// Every file of the project but `.cassist/`, with its bytes (folders
    /// and symlinks too): compared before and after a run that must leave
    /// the tree as it was.
    pub fn tree(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        super::snapshot(self.path(), &[".cassist"])
    }

    /// `.cassist/runs/<id>/<task>/` of the only run so far.
    pub fn records(&self, task: &str) -> PathBuf {
        let runs: Vec<PathBuf> = std::fs::read_dir(self.path().join(".cassist/runs"))
            .expect(".cassist/runs")
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(runs.len(), 1, "expected one run: {runs:?}");
        runs[0].join(task)
    }

    pub fn record(&self, task: &str, file: &str) -> String {
        let path = self.records(task).join(file);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// What an agent saved of its stdin (`FAKE_LOG`).
    pub fn stdin_of(&self, task: &str, attempt: u32) -> String {
        let path = self.out().join(format!("{task}-stdin-{attempt}.md"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }
}

/// The end of one `cassist run`.
pub struct Done {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
    /// The `--report-json` file ("" when not written).
    pub report: String,
}

impl Done {
    pub fn code(&self) -> i32 {
        self.status.code().unwrap_or(-1)
    }

    pub fn transcript(&self) -> String {
        format!(
            "exit: {:?}\n--- stdout\n{}--- stderr\n{}--- report\n{}",
            self.status, self.stdout, self.stderr, self.report
        )
    }

    #[track_caller]
    pub fn exit(&self, code: i32) -> &Done {
        assert_eq!(self.code(), code, "expected exit {code}:\n{}", self.transcript());
        self
    }

    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.report).unwrap_or_else(|e| panic!("invalid report ({e}):\n{}", self.transcript()))
    }

    /// The report entry of `name`.
    #[track_caller]
    pub fn task(&self, name: &str) -> Value {
        let json = self.json();
        json["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no task {name}:\n{}", self.transcript()))
    }
}

/// The absolute path of a fake agent.
pub fn agent_script(name: &str) -> String {
    super::fixtures().join("agents").join(name).display().to_string()
}

/// A custom agent `name` running `fixtures/agents/<script> ARGS`.
pub fn agent(name: &str, script: &str, args: &[&str], pass_env: &[&str]) -> String {
    let mut command = format!("{:?}", agent_script(script));
    for a in args {
        command.push_str(&format!(" {a:?}"));
    }
    let mut out = format!("agent {name:?} {{\n    command {command}\n");
    if !pass_env.is_empty() {
        let vars: Vec<String> = pass_env.iter().map(|v| format!("{v:?}")).collect();
        out.push_str(&format!("    pass-env {}\n", vars.join(" ")));
    }
    out.push_str("}\n");
    out
}

/// A marker unique to this test process and call, for `/proc/*/cmdline`.
pub fn unique_marker(what: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("cassist-test-{what}-{}-{nanos}", std::process::id())
}

/// Waits until `path` exists; panics after `limit` (with what the child
/// printed, when it has already ended).
pub fn wait_for_file(path: &Path, child: &mut Child, limit: Duration) {
    let deadline = Instant::now() + limit;
    while !path.exists() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("cassist ended ({status}) before {} appeared", path.display());
        }
        assert!(Instant::now() < deadline, "{} did not appear within {limit:?}", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for `child` at most `limit`, killing it past that.
pub fn wait_with_limit(child: &mut Child, limit: Duration) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("cassist did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every file under `dir` (recursively) with its bytes.
pub fn files_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().is_file())
        .map(|e| (e.path().to_path_buf(), std::fs::read(e.path()).unwrap()))
        .collect()
}

pub fn contains_bytes(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The text of one `# Section` of a prompt, up to the next heading.
pub fn section<'a>(prompt: &'a str, heading: &str) -> &'a str {
    let start = prompt.find(&format!("# {heading}\n")).unwrap_or_else(|| panic!("no # {heading} in:\n{prompt}"));
    let body = &prompt[start + heading.len() + 3..];
    let end = body.find("\n# ").map_or(body.len(), |e| e + 1);
    &body[..end]
}

pub fn strings(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_owned()).collect()
}
