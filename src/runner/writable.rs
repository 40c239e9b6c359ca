//! What an agent may write under Landlock.

use std::path::{Path, PathBuf};

use crate::agent::invoke::Invocation;
use crate::spec::SandboxLevel;
use crate::workspace::Mode;

use super::Runner;

impl Runner {
    /// What the agent may write under Landlock (`None`: no Landlock, for
    /// `full` or where the kernel lacks it): its workspace unless read-only,
    /// its prompt/result folder, temp folders, `/dev`, and the agent's own
    /// state folders (created first: a rule needs an existing path).
    pub(super) fn writable_paths(
        &self,
        level: SandboxLevel,
        workspace: &Path,
        io: &Path,
        inv: &Invocation,
    ) -> Option<Vec<PathBuf>> {
        if level == SandboxLevel::Full || !self.landlock {
            return None;
        }
        let root = &self.plan.project.root;
        let mut paths = vec![io.to_path_buf(), PathBuf::from("/dev")];
        paths.extend(self.temp_folders(level, workspace));
        if level == SandboxLevel::WorkspaceWrite {
            paths.push(workspace.to_path_buf());
        }
        for var in ["CODEX_HOME", "CLAUDE_CONFIG_DIR"] {
            if inv.pass_env.iter().any(|v| v == var)
                && let Some(p) = std::env::var_os(var).map(PathBuf::from)
                && !p.starts_with(root)
            {
                paths.push(p);
            }
        }
        if inv.name == "claude"
            && let Some(f) = crate::agent::adapter::home_path(".claude.json")
            && f.exists()
        {
            paths.push(f);
        }
        paths.extend(self.agent_state_dirs(inv));
        paths.retain(|p| p.exists());
        Some(paths)
    }

    /// Temp folders, unless the user's project is inside one and is
    /// reachable (copy mode), or a read-only agent's workspace is inside
    /// one (a copy under /tmp, or a project under /tmp in overlay mode):
    /// then only the agent's private temp folder (its TMPDIR, inside `io`).
    fn temp_folders(&self, level: SandboxLevel, workspace: &Path) -> Vec<PathBuf> {
        let root = &self.plan.project.root;
        let mut temps = vec![PathBuf::from("/tmp"), PathBuf::from("/var/tmp"), PathBuf::from("/dev/shm")];
        if let Some(t) = std::env::var_os("TMPDIR") {
            temps.push(PathBuf::from(t));
        }
        let ws_real = workspace.canonicalize().unwrap_or_else(|_| workspace.to_path_buf());
        temps
            .into_iter()
            .map(|t| t.canonicalize().unwrap_or(t))
            .filter(|t| {
                let holds_read_only_workspace = level == SandboxLevel::ReadOnly && ws_real.starts_with(t);
                (self.mode == Mode::Overlay || !root.starts_with(t)) && !holds_read_only_workspace
            })
            .collect()
    }

    /// The agent's own state folders in HOME (made for built-in agents
    /// that lack them, never inside the project).
    fn agent_state_dirs(&self, inv: &Invocation) -> Vec<PathBuf> {
        let root = &self.plan.project.root;
        let Some(home) = std::env::var_os("HOME").map(PathBuf::from) else { return Vec::new() };
        let mut paths = Vec::new();
        for rel in crate::agent::state_dirs(&inv.name) {
            let p = home.join(rel);
            // Never make folders in the user's project (a HOME inside
            // it), nor for agents that do not need them.
            if !p.exists() && crate::spec::BUILTIN_AGENTS.contains(&inv.name.as_str()) && !p.starts_with(root) {
                let _ = std::fs::create_dir_all(&p);
            }
            if !p.starts_with(root) || self.mode == Mode::Overlay {
                paths.push(p);
            }
        }
        paths
    }
}
