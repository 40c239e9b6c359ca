//! Test support: run the real `cassist` binary in a temporary project.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Output;

/// A temporary project folder.
pub struct Project {
    pub dir: tempfile::TempDir,
}

impl Project {
    pub fn new() -> Project {
        Project { dir: tempfile::Builder::new().prefix("cassist-test-").tempdir().expect("temp dir") }
    }

    /// A copy of `fixtures/<rel>` (symlinks kept as symlinks).
    pub fn from_fixture(rel: &str) -> Project {
        let p = Project::new();
        copy_tree(&fixtures().join(rel), p.path());
        p
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a file (creating folders).
    pub fn file(&self, rel: &str, text: &str) -> &Project {
        let path = self.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
        self
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path().join(rel)).unwrap()
    }

    /// Runs `cassist ARGS` in the project with a clean environment.
    pub fn run(&self, args: &[&str]) -> Run {
        self.run_env(args, &[])
    }

    pub fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_cassist"));
        cmd.current_dir(self.path()).args(args).env_clear().env("PATH", std::env::var_os("PATH").unwrap_or_default());
        cmd.env("HOME", self.path()).env("NO_COLOR", "1");
        for (k, v) in env {
            cmd.env(k, v);
        }
        Run(cmd.output().expect("run cassist"))
    }
}

/// The result of one run.
pub struct Run(pub Output);

impl Run {
    pub fn code(&self) -> i32 {
        self.0.status.code().unwrap_or(-1)
    }
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.0.stdout).into_owned()
    }
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.0.stderr).into_owned()
    }
    /// Exit code, stdout and stderr in one text, for snapshots.
    pub fn transcript(&self) -> String {
        format!("exit: {}\n--- stdout\n{}--- stderr\n{}", self.code(), self.stdout(), self.stderr())
    }
    #[track_caller]
    pub fn success(&self) -> &Run {
        assert_eq!(self.code(), 0, "expected success:\n{}", self.transcript());
        self
    }
    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout()).unwrap_or_else(|e| panic!("invalid JSON ({e}):\n{}", self.transcript()))
    }
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn fixtures() -> PathBuf {
    repo().join("fixtures")
}

/// Copies a folder, recreating symlinks as symlinks.
pub fn copy_tree(from: &Path, to: &Path) {
    for entry in walkdir::WalkDir::new(from).min_depth(1) {
        let entry = entry.unwrap();
        let rel = entry.path().strip_prefix(from).unwrap();
        let dest = to.join(rel);
        let ft = entry.file_type();
        if ft.is_symlink() {
            let target = std::fs::read_link(entry.path()).unwrap();
            std::os::unix::fs::symlink(target, &dest).unwrap();
        } else if ft.is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
        } else {
            std::fs::copy(entry.path(), &dest).unwrap();
        }
    }
}

/// A folder for test projects that lies outside the temp folders: agents
/// may write temp folders, so a project (or HOME) inside one would be
/// writable to them. `CARGO_TARGET_TMPDIR` unless the checkout itself is
/// under a temp folder (as a CI clone may be), else `~/.cache/cassist-tests`.
pub fn outside_temp_dir() -> PathBuf {
    let temps: Vec<PathBuf> = ["/tmp", "/var/tmp", "/dev/shm"]
        .iter()
        .map(PathBuf::from)
        .chain(std::env::var_os("TMPDIR").map(PathBuf::from))
        .map(|p| p.canonicalize().unwrap_or(p))
        .collect();
    let under_temp = |p: &Path| {
        let p = p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        temps.iter().any(|t| p.starts_with(t))
    };
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    if !under_temp(&target) {
        return target;
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/root"));
    let dir = home.join(".cache").join("cassist-tests");
    std::fs::create_dir_all(&dir).expect("create ~/.cache/cassist-tests");
    dir
}
