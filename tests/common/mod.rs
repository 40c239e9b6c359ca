//! Test support: run the real `cassist` binary in a temporary project.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Output;

pub mod fx;

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

/// `git ARGS` in `dir`; its stdout. Fails the test when git fails.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git").current_dir(dir).args(args).output().expect("git");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every path of a tree with its bytes (a symlink: its target; a folder:
/// `<dir>`), for comparing a tree before and after.
pub type Tree = std::collections::BTreeMap<PathBuf, Vec<u8>>;

/// The tree under `root`, leaving out the top-level entries named in `skip`
/// (cassist's own `.cassist/`, say).
pub fn snapshot(root: &Path, skip: &[&str]) -> Tree {
    walkdir::WalkDir::new(root)
        .min_depth(1)
        .into_iter()
        .filter_entry(|e| e.depth() != 1 || !skip.iter().any(|s| e.file_name() == *s))
        .map(|e| {
            let e = e.unwrap();
            let rel = e.path().strip_prefix(root).unwrap().to_path_buf();
            let bytes = if e.file_type().is_file() {
                std::fs::read(e.path()).unwrap()
            } else if e.file_type().is_symlink() {
                std::fs::read_link(e.path()).unwrap().into_os_string().into_encoded_bytes()
            } else {
                b"<dir>".to_vec()
            };
            (rel, bytes)
        })
        .collect()
}

/// Fails listing the paths that differ between two [`snapshot`]s.
#[track_caller]
pub fn assert_same_tree(after: &Tree, before: &Tree, what: &str) {
    let mut diff = Vec::new();
    for (path, bytes) in after {
        match before.get(path) {
            None => diff.push(format!("added {}", path.display())),
            Some(b) if b != bytes => diff.push(format!("changed {}", path.display())),
            Some(_) => {}
        }
    }
    for path in before.keys().filter(|p| !after.contains_key(*p)) {
        diff.push(format!("removed {}", path.display()));
    }
    assert!(diff.is_empty(), "{what}: {diff:#?}");
}

/// Live processes whose command line holds `marker` (zombies have none).
pub fn processes_with(marker: &str) -> Vec<(i32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if text.contains(marker) {
            found.push((pid, text));
        }
    }
    found
}
