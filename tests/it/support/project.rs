//! The fixture builder: [`Test`] describes a project (its files,
//! `cassist.kdl`, tasks, fake agents from `fixtures/agents/`, git) and
//! [`Test::build`] makes it a [`Project`] on disk, whose commands
//! ([`Project::cassist`], [`Project::run`]) say what they expect.
//!
//! Every project has folders of its own, all removed with it:
//! - the project itself, under the temp folder ([`Test::new`]) or outside
//!   the temp folders ([`Test::trusted`], [`Test::outside_tmp`]): agents may
//!   write temp folders, so a project there would be writable to them;
//! - `home`, outside the temp folders, the HOME of every command (agents
//!   keep state there, and cassist prepares their state folders in it);
//! - `tmp`, in the temp folder, the TMPDIR of every command: cassist makes
//!   its workspaces there (those it keeps too), not in the machine's
//!   `/tmp/cassist-<uid>` that every other run of the suite shares;
//! - `fixtures`, outside the temp folders, the copies of the fixtures that
//!   a task's commands run ([`Project::fixture_copy`]);
//! - `out`, `home/.cache/cassist-test-out`, for what the agents and the
//!   test leave there (logs, markers, scripts, the `--report-json` file).
//!   Every command of a task has a private `/tmp` and may write nothing
//!   outside its workspace but its own folders: `~/.cache` is the one an
//!   agent of any kind may write (its state folder), so agents leave what
//!   the test reads there. Acceptance and setup commands may not. An
//!   agent's state folders are copy-on-write (nothing it writes there
//!   outlives its task): `out` is named in `CASSIST_SHARED_STATE` for every
//!   command, so it stays the real folder.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::Value;

use super::{Cmd, Tree, fixtures, git, git_commit_all, snapshot, write};

/// `cassist.kdl` of a project that runs agents: trusted to write its
/// workspace, no project test command (the tasks' acceptance decides).
pub const TRUSTED_NO_TESTS: &str = "trust \"workspace-write\"\ntest #false\n\n";

/// Where a project goes.
enum Place {
    Tmp,
    OutsideTmp,
    In(PathBuf),
}

/// A project to be built.
#[must_use]
pub struct Test {
    place: Place,
    config: Option<String>,
    fixtures: Vec<String>,
    files: Vec<(String, Vec<u8>)>,
    git: bool,
}

impl Test {
    /// An empty project under the temp folder.
    pub fn new() -> Test {
        Test { place: Place::Tmp, config: None, fixtures: Vec::new(), files: Vec::new(), git: false }
    }

    /// A project for running agents: outside the temp folders, with
    /// [`TRUSTED_NO_TESTS`] as the start of its `cassist.kdl`.
    pub fn trusted() -> Test {
        Test::new().outside_tmp().config(TRUSTED_NO_TESTS)
    }

    /// The project under the temp folder.
    pub fn under_tmp(mut self) -> Test {
        self.place = Place::Tmp;
        self
    }

    /// The project outside the temp folders.
    pub fn outside_tmp(mut self) -> Test {
        self.place = Place::OutsideTmp;
        self
    }

    /// The project in a new folder under `base`.
    pub fn in_dir(mut self, base: &Path) -> Test {
        self.place = Place::In(base.to_path_buf());
        self
    }

    /// `cassist.kdl` starts with `text` (replacing what was there).
    pub fn config(mut self, text: &str) -> Test {
        self.config = Some(text.to_owned());
        self
    }

    /// Adds `text` to `cassist.kdl`.
    pub fn kdl(mut self, text: &str) -> Test {
        self.config.get_or_insert_with(String::new).push_str(text);
        self
    }

    /// Adds a custom agent `name` running `fixtures/agents/<script> ARGS`,
    /// passed the variables `pass_env`.
    pub fn agent(self, name: &str, script: &str, args: &[&str], pass_env: &[&str]) -> Test {
        self.kdl(&agent_block(name, script, args, pass_env))
    }

    /// Adds a custom agent `name` running `script` with `sh -c` in its
    /// workspace.
    pub fn sh_agent(self, name: &str, script: &str) -> Test {
        self.kdl(&sh_agent_block(name, script))
    }

    /// Adds a custom agent `name` running `program` (any path) with the
    /// prompt file.
    pub fn program_agent(self, name: &str, program: &str) -> Test {
        self.kdl(&format!("agent {name:?} {{\n    command {program:?} \"{{prompt_file}}\"\n}}\n"))
    }

    /// `tasks/t.kdl`.
    pub fn tasks(self, kdl: &str) -> Test {
        self.file("tasks/t.kdl", kdl)
    }

    /// A file of the project (written after `cassist.kdl`, so it may
    /// replace it).
    pub fn file(mut self, rel: &str, bytes: impl AsRef<[u8]>) -> Test {
        self.files.push((rel.to_owned(), bytes.as_ref().to_vec()));
        self
    }

    /// A copy of `fixtures/<rel>` (symlinks kept as symlinks) as the
    /// project's files.
    pub fn fixture(mut self, rel: &str) -> Test {
        self.fixtures.push(rel.to_owned());
        self
    }

    /// Makes the project a git repository with one commit of everything.
    pub fn git(mut self) -> Test {
        self.git = true;
        self
    }

    pub fn build(self) -> Project {
        let base = match &self.place {
            Place::Tmp => std::env::temp_dir(),
            Place::OutsideTmp => super::outside_temp_dir(),
            Place::In(base) => base.clone(),
        };
        let dir = tempfile::Builder::new().prefix("cassist-test-").tempdir_in(base).expect("project folder");
        let root = dir.path().canonicalize().unwrap();
        let p = Project {
            root,
            _dir: dir,
            home: OnceLock::new(),
            tmp: OnceLock::new(),
            fixtures: OnceLock::new(),
            env: Vec::new(),
        };
        for rel in &self.fixtures {
            super::copy_tree(&fixtures().join(rel), p.path());
        }
        if let Some(config) = &self.config {
            p.file("cassist.kdl", config);
        }
        for (rel, text) in &self.files {
            p.file(rel, text);
        }
        if self.git {
            p.commit_all();
        }
        p
    }
}

/// The `cassist.kdl` block of a custom agent `name` running `script` with
/// `sh -c` in its workspace.
pub fn sh_agent_block(name: &str, script: &str) -> String {
    format!("agent {name:?} {{\n    command \"sh\" \"-c\" {script:?}\n}}\n")
}

/// The absolute path of a fake agent of `fixtures/agents/`.
fn agent_script(name: &str) -> String {
    fixtures().join("agents").join(name).display().to_string()
}

/// The `cassist.kdl` block of a custom agent `name` running
/// `fixtures/agents/<script> ARGS`, passed the variables `pass_env`.
fn agent_block(name: &str, script: &str, args: &[&str], pass_env: &[&str]) -> String {
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

/// A project on disk, with its `out` and `home` folders (see the module
/// doc); all three go away with it.
pub struct Project {
    root: PathBuf,
    _dir: tempfile::TempDir,
    /// Made on first use (a test run as another user may not be able to).
    home: OnceLock<tempfile::TempDir>,
    /// Made on first use.
    tmp: OnceLock<tempfile::TempDir>,
    /// Made on first use.
    fixtures: OnceLock<tempfile::TempDir>,
    env: Vec<(String, String)>,
}

impl Project {
    /// The project folder (canonical).
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// The same project with `key` set for every command.
    pub fn with_env(mut self, key: &str, value: &str) -> Project {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    /// The folder for what agents and the test leave (in HOME's `.cache`,
    /// see the module doc), made on first use.
    pub fn out(&self) -> PathBuf {
        let out = self.home().join(".cache/cassist-test-out");
        std::fs::create_dir_all(&out).expect("out folder");
        out
    }

    /// [`out`](Project::out) as a string, for environment variables.
    pub fn out_str(&self) -> String {
        self.out().to_str().unwrap().to_owned()
    }

    /// A folder of the test's own in the temp folder, made on first use,
    /// and the TMPDIR of every command (what runs in a task's sandbox never
    /// sees it, but for its own workspace: its `/tmp` is private).
    pub fn tmp(&self) -> &Path {
        self.tmp
            .get_or_init(|| tempfile::Builder::new().prefix("cassist-test-tmp-").tempdir().expect("tmp folder"))
            .path()
    }

    /// The HOME of every command.
    pub fn home(&self) -> &Path {
        self.home
            .get_or_init(|| {
                let outside = super::outside_temp_dir();
                tempfile::Builder::new().prefix("cassist-test-home-").tempdir_in(outside).expect("home folder")
            })
            .path()
    }

    /// A copy of `fixtures/<rel>` (a file, or a folder with what is in it)
    /// for a task's commands to run, in a folder of the project's own
    /// outside the temp folders; made on first use, then the same. The
    /// checkout's own path will not do: it may lie under `/tmp`, which
    /// every command of a task sees as a private, empty folder (only an
    /// agent's own program and the paths on its command line stay visible
    /// there, not a script named inside a shell command).
    pub fn fixture_copy(&self, rel: &str) -> PathBuf {
        let dir = self.fixtures.get_or_init(|| {
            let outside = super::outside_temp_dir();
            tempfile::Builder::new().prefix("cassist-test-fixtures-").tempdir_in(outside).expect("fixtures folder")
        });
        let from = fixtures().join(rel);
        let to = dir.path().join(rel);
        if !to.exists() {
            if from.is_dir() {
                std::fs::create_dir_all(&to).unwrap();
                super::copy_tree(&from, &to);
            } else {
                std::fs::create_dir_all(to.parent().unwrap()).unwrap();
                std::fs::copy(&from, &to).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
            }
        }
        to
    }

    /// HOME's files and symlinks, `.cache` included, but the `out` folder
    /// (what the test and cassist write there: the report) and folders
    /// (cassist makes built-in agents' state folders): what no agent may
    /// leave behind.
    pub fn home_files(&self) -> Tree {
        let mut home = snapshot(self.home(), &[]);
        home.retain(|path, bytes| !path.starts_with(".cache/cassist-test-out") && bytes.as_slice() != b"<dir>");
        home
    }

    /// Writes a project file (creating folders).
    pub fn file(&self, rel: &str, bytes: impl AsRef<[u8]>) -> &Project {
        write(&self.path().join(rel), bytes);
        self
    }

    #[track_caller]
    pub fn read(&self, rel: &str) -> String {
        let path = self.path().join(rel);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    pub fn exists(&self, rel: &str) -> bool {
        self.path().join(rel).exists()
    }

    /// Replaces `from` (which must be there) with `to` in a project file.
    #[track_caller]
    pub fn edit(&self, rel: &str, from: &str, to: &str) {
        let text = self.read(rel);
        assert!(text.contains(from), "{rel} has no {from:?}:\n{text}");
        self.file(rel, text.replacen(from, to, 1));
    }

    /// `git ARGS` in the project; its stdout.
    #[track_caller]
    pub fn git(&self, args: &[&str]) -> String {
        git(self.path(), args)
    }

    /// Makes the project a git repository with one commit of everything.
    pub fn commit_all(&self) -> &Project {
        git_commit_all(self.path());
        self
    }

    pub fn head(&self) -> String {
        self.git(&["rev-parse", "HEAD"])
    }

    /// `git status --porcelain` without the lock file cassist writes (it is
    /// meant to be committed; its own tests check it).
    pub fn status(&self) -> String {
        self.git(&["status", "--porcelain"])
            .lines()
            .filter(|l| *l != "?? cassist.lock")
            .map(|l| format!("{l}\n"))
            .collect()
    }

    /// Every file of the project but `.cassist/`, with its bytes (folders
    /// and symlinks too): compared before and after a run that must leave
    /// the tree as it was.
    pub fn tree(&self) -> Tree {
        snapshot(self.path(), &[".cassist"])
    }

    /// `cassist ARGS` in the project: a clean environment (PATH, HOME,
    /// TMPDIR=tmp, NO_COLOR=1, CASSIST_SHARED_STATE=out and the project's
    /// variables), expecting success unless told otherwise.
    pub fn cassist(&self, args: &[&str]) -> Cmd {
        let mut cmd = Cmd::new(self.path(), args);
        cmd.env("HOME", self.home()).env("TMPDIR", self.tmp()).env("CASSIST_SHARED_STATE", self.out());
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd
    }

    /// `cassist run --report-json OUT/report.json ARGS`: the output holds
    /// the report.
    pub fn run(&self, args: &[&str]) -> Cmd {
        let mut cmd = self.cassist(&["run"]);
        cmd.report(&self.report_path()).args(args);
        cmd
    }

    /// `cassist plan --json`: each task's state, by name.
    pub fn plan_states(&self) -> std::collections::BTreeMap<String, String> {
        let json = self.cassist(&["plan", "--json"]).exec().json();
        json["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["name"].as_str().unwrap().to_owned(), t["state"].as_str().unwrap().to_owned()))
            .collect()
    }

    /// `cassist explain TASK`, which must succeed: its output.
    #[track_caller]
    pub fn explain(&self, task: &str) -> String {
        self.cassist(&["explain", task]).exec().stdout
    }

    pub fn report_path(&self) -> PathBuf {
        self.out().join("report.json")
    }

    /// `.cassist/runs/<id>/<task>/` of the only run so far.
    #[track_caller]
    pub fn records(&self, task: &str) -> PathBuf {
        let runs: Vec<PathBuf> = std::fs::read_dir(self.path().join(".cassist/runs"))
            .expect(".cassist/runs")
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(runs.len(), 1, "expected one run: {runs:?}");
        runs[0].join(task)
    }

    /// One record file of `task` in the only run so far.
    #[track_caller]
    pub fn record(&self, task: &str, file: &str) -> String {
        let path = self.records(task).join(file);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// The normalized parse of the agent's output (`agent-N.json`).
    #[track_caller]
    pub fn agent_json(&self, task: &str, attempt: u32) -> Value {
        serde_json::from_str(&self.record(task, &format!("agent-{attempt}.json"))).unwrap()
    }

    /// What an agent saved of its stdin (`FAKE_LOG`, set to the out folder).
    #[track_caller]
    pub fn stdin_of(&self, task: &str, attempt: u32) -> String {
        let path = self.out().join(format!("{task}-stdin-{attempt}.md"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }
}
