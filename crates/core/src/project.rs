//! The project: its root folder and config.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::spec::config::{ProjectConfig, TestSetting, parse_config};
use crate::spec::{Diagnostics, SourceFile, read_source};

pub const CONFIG_FILE: &str = "cassist.kdl";

/// A project root and its parsed config.
pub struct Project {
    /// Canonical path of the root.
    pub root: PathBuf,
    pub config: ProjectConfig,
}

/// The project root for `cwd`: the nearest folder holding `cassist.kdl`,
/// else the git root, else `cwd` itself.
pub fn find_root(cwd: &Path) -> PathBuf {
    if let Some(dir) = cwd.ancestors().find(|d| d.join(CONFIG_FILE).is_file()) {
        return dir.to_path_buf();
    }
    if let Some(dir) = cwd.ancestors().find(|d| d.join(".git").exists()) {
        return dir.to_path_buf();
    }
    cwd.to_path_buf()
}

impl Project {
    /// Finds the root from `cwd` and reads the config; problems go to
    /// `diags`.
    pub fn load(cwd: &Path, diags: &mut Diagnostics) -> Project {
        let root = find_root(cwd);
        let root = std::fs::canonicalize(&root).unwrap_or(root);
        let config_path = root.join(CONFIG_FILE);
        let src = if config_path.is_file() {
            match read_source(&config_path, CONFIG_FILE.to_owned()) {
                Ok(s) => Some(s),
                Err(d) => {
                    diags.push(d);
                    None
                }
            }
        } else {
            None
        };
        let mut config = parse_config(&root, src.as_ref(), diags);
        // A config that exists but cannot be read defines what it defines.
        config.unreadable |= config_path.is_file() && src.is_none();
        Project { root, config }
    }

    /// How a path is shown: relative to the root when inside it.
    pub fn display(&self, path: &Path) -> String {
        let abs = if path.is_absolute() {
            path.to_path_buf()
        } else {
            std::env::current_dir().unwrap_or_default().join(path)
        };
        self.shown(std::fs::canonicalize(&abs).unwrap_or(abs))
    }

    /// [`display`](Self::display) of many paths: a file that is not a
    /// symlink is shown from the real path of its folder, found once per
    /// folder (in `folders`), not from a `realpath` of its own (a readlink
    /// per folder above it, for each of a thousand task files).
    pub fn display_in(&self, path: &Path, folders: &mut HashMap<PathBuf, PathBuf>) -> String {
        let link = std::fs::symlink_metadata(path).map_or(true, |m| m.file_type().is_symlink());
        match (path.parent(), path.file_name()) {
            (Some(dir), Some(name)) if path.is_absolute() && !link => {
                let real = folders
                    .entry(dir.to_path_buf())
                    .or_insert_with(|| std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()));
                self.shown(real.join(name))
            }
            _ => self.display(path),
        }
    }

    fn shown(&self, abs: PathBuf) -> String {
        match abs.strip_prefix(&self.root) {
            Ok(rel) if !rel.as_os_str().is_empty() => rel.to_string_lossy().into_owned(),
            _ => abs.to_string_lossy().into_owned(),
        }
    }

    /// The project test commands: `test` if set, none for `test off`,
    /// else detected from the project's files.
    pub fn test_commands(&self) -> Vec<String> {
        match &self.config.test {
            TestSetting::Off => Vec::new(),
            TestSetting::Commands(c) => c.clone(),
            TestSetting::Detect => detect_test_commands(&self.root),
        }
    }

    /// The instruction files cited in prompts, present at the root.
    pub fn instruction_files(&self) -> Vec<String> {
        crate::prompt::INSTRUCTION_FILES
            .iter()
            .filter(|f| self.root.join(f).is_file())
            .map(|f| (*f).to_owned())
            .collect()
    }

    /// The prompt template's text and name (`default` when built in).
    pub fn template(&self) -> (String, Option<std::sync::Arc<SourceFile>>) {
        match &self.config.prompt_template {
            Some(p) => match read_source(&self.root.join(&p.value), p.value.clone()) {
                Ok(src) => (p.value.clone(), Some(src)),
                Err(_) => ("default".to_owned(), None),
            },
            None => ("default".to_owned(), None),
        }
    }
}

/// `Cargo.toml` → `cargo test`, `package.json` → `npm test` (`pnpm test`
/// with a pnpm lockfile), `pyproject.toml` / `pytest.ini` / `tests/*.py` →
/// `python3 -m pytest`; several → all of them.
pub fn detect_test_commands(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if root.join("Cargo.toml").is_file() {
        out.push("cargo test".to_owned());
    }
    if root.join("package.json").is_file() {
        out.push(if root.join("pnpm-lock.yaml").is_file() { "pnpm test" } else { "npm test" }.to_owned());
    }
    let has_py_tests = std::fs::read_dir(root.join("tests"))
        .map(|rd| rd.flatten().any(|e| e.path().extension().is_some_and(|x| x == "py")))
        .unwrap_or(false);
    if root.join("pyproject.toml").is_file() || root.join("pytest.ini").is_file() || has_py_tests {
        out.push("python3 -m pytest".to_owned());
    }
    out
}
