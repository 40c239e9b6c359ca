//! What confines each command of a task (SPEC 6): where it may write, what
//! it keeps seeing where its temp folders are private and other tasks'
//! folders hidden. The mechanisms are [`cassist_sandbox::sandbox`]'s; this is the
//! policy, one [`Role`] at a time.
//!
//! | role | writes (Landlock) |
//! |---|---|
//! | agent, read-only | its io folder, temp folders, its own state folders (copy-on-write) |
//! | agent, workspace-write | the same and its workspace |
//! | agent, full | anywhere: no Landlock, no private mounts |
//! | setup, acceptance, project test | its workspace layer, temp folders; never HOME, never the io folder |
//! | build (after integration) | its throw-away layer over the user's tree, temp folders |
//! | replay helper | its workspace |
//!
//! An agent's state folders (`~/.claude`, `~/.cache`, `$CODEX_HOME`, ...)
//! and `~/.claude.json` are, with namespaces, copy-on-write views of the
//! user's own whose changes stay in the task's workspace base and go with
//! it ([`StateViews`]): the CLI reads its login and settings, keeps its
//! state from one attempt to the next, and nothing it writes there (a hook
//! in `settings.json`) reaches the user's next session. In copy mode they
//! are the user's own, writable.
//!
//! Temp folders: with namespaces, the command's own private `/tmp`,
//! `/var/tmp` and `/dev/shm`; in copy mode, a folder of the task's own
//! (`TMPDIR`): the machine's `/tmp` is shared, so it is not writable.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::agent::invoke::Invocation;
use crate::workspace::{Mode, Workspace};
use cassist_core::spec::SandboxLevel;
use cassist_sandbox::sandbox::{Jail, PRIVATE_TEMP, StateViews};

use super::Runner;

/// A command of a task, by what it is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Setup,
    Agent,
    /// Acceptance commands and the project test.
    Acceptance,
    /// The helper that writes a stored change into the workspace.
    Replay,
    /// The `build` command after integration, on a throw-away layer over
    /// the user's tree.
    Build,
}

/// The folder copy mode gives setup, acceptance and build commands as
/// `TMPDIR` (the agent's is in its io folder).
pub fn copy_mode_tmp(ws: &Workspace) -> PathBuf {
    ws.base().join("tmp")
}

impl Runner {
    /// The jail of a command of `role`, for a task at `level` whose
    /// workspace is `ws`. The agent's `io` folder and invocation are given
    /// for [`Role::Agent`] (and `io` for [`Role::Replay`]), `env` is the
    /// command's environment (what it names under a hidden folder stays
    /// visible).
    pub(super) fn jail(
        &self,
        role: Role,
        level: SandboxLevel,
        ws: &Workspace,
        io: Option<&Path>,
        inv: Option<&Invocation>,
        env: &[(OsString, OsString)],
    ) -> Jail {
        let full_agent = role == Role::Agent && level == SandboxLevel::Full;
        if full_agent {
            return Jail { grace: Some(GRACE), ..Jail::default() };
        }
        let temps: Vec<PathBuf> = match self.mode {
            Mode::Overlay => PRIVATE_TEMP.iter().map(PathBuf::from).collect(),
            Mode::Copy if role == Role::Agent => Vec::new(),
            Mode::Copy => vec![copy_mode_tmp(ws)],
        };
        let mut writable: Vec<PathBuf> = Vec::new();
        let mut keep: Vec<PathBuf> = Vec::new();
        let mut state = None;
        match role {
            Role::Agent => {
                writable.extend(io.map(Path::to_path_buf));
                writable.extend(temps);
                if level == SandboxLevel::WorkspaceWrite {
                    writable.push(ws.dir.clone());
                }
                if let Some(inv) = inv {
                    let own = self.agent_state(inv);
                    if self.mode == Mode::Overlay {
                        state = Some(self.state_views(ws, &own));
                    }
                    writable.extend(own);
                }
            }
            Role::Setup | Role::Acceptance | Role::Build => {
                writable.push(ws.dir.clone());
                writable.extend(temps);
            }
            Role::Replay => {
                writable.push(ws.dir.clone());
                keep.push(self.plan.store.dir().to_path_buf());
                keep.extend(io.map(Path::to_path_buf));
                // The replay helper is cassist itself: it must stay
                // visible where it lives under a hidden or private folder
                // (a build under `/tmp`).
                keep.push(self.exe.clone());
            }
        }
        writable.retain(|p| p.exists());
        // What it writes stays visible (the private temp folders are its
        // own, not kept).
        keep.extend(writable.iter().filter(|w| !PRIVATE_TEMP.iter().any(|t| w.as_path() == Path::new(t))).cloned());
        keep.extend(visible_from_env(env));
        // The agent's program and the files its command line names (a
        // script under /tmp, say).
        if let Some(inv) = inv {
            keep.extend(inv.argv.iter().filter(|a| a.starts_with('/')).map(PathBuf::from));
        }
        let keep = keep.into_iter().filter_map(|p| p.canonicalize().ok()).collect();
        let writable = writable.into_iter().map(|p| p.canonicalize().unwrap_or(p)).collect();
        Jail {
            confined: true,
            hide: vec![self.workspaces.canonicalize().unwrap_or_else(|_| self.workspaces.clone())],
            keep,
            writable,
            landlock: self.landlock,
            grace: Some(GRACE),
            state,
        }
    }

    /// The copy-on-write views of an agent's state paths `own`, their
    /// changes under the workspace base of `ws` (those in the project are
    /// the workspace's own already).
    fn state_views(&self, ws: &Workspace, own: &[PathBuf]) -> StateViews {
        let root = &self.plan.project.root;
        let mut paths: Vec<PathBuf> =
            own.iter().filter_map(|p| p.canonicalize().ok()).filter(|p| !p.starts_with(root)).collect();
        // Once each, a folder before what is inside it.
        paths.sort();
        paths.dedup();
        StateViews { paths, dir: ws.base().join("state"), shared: self.shared_state.clone() }
    }

    /// What an agent may write besides its workspace and io folder: its
    /// own state folders (created first for built-in agents: a rule needs
    /// an existing path).
    fn agent_state(&self, inv: &Invocation) -> Vec<PathBuf> {
        let root = &self.plan.project.root;
        let mut paths = Vec::new();
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
        {
            paths.push(f);
        }
        if let Some(home) = std::env::var_os("HOME").map(PathBuf::from) {
            for rel in crate::agent::state_dirs(&inv.name) {
                let p = home.join(rel);
                // Never make folders in the user's project (a HOME inside
                // it), nor for agents that do not need them.
                if !p.exists()
                    && cassist_core::spec::BUILTIN_AGENTS.contains(&inv.name.as_str())
                    && !p.starts_with(root)
                {
                    let _ = std::fs::create_dir_all(&p);
                }
                // In the project (a HOME there), only the overlay keeps
                // its writes in the workspace.
                if !p.starts_with(root) || self.mode == Mode::Overlay {
                    paths.push(p);
                }
            }
        }
        paths
    }
}

/// How long the copy-mode wrapper lets a command handle a TERM before it
/// kills everything the command started (cassist's own grace, 5 s, is
/// longer: the wrapper cleans up before cassist's SIGKILL).
const GRACE: Duration = Duration::from_millis(4500);

/// What a command must still see where folders are covered: HOME and the
/// PATH entries of its environment. (A file an acceptance command names
/// under `/tmp` is not seen: its own `/tmp` is private.)
fn visible_from_env(env: &[(OsString, OsString)]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for (k, v) in env {
        if k == "HOME" {
            out.push(PathBuf::from(v));
        } else if k == "PATH" {
            out.extend(std::env::split_paths(v).filter(|p| p.is_absolute()));
        }
    }
    out
}
