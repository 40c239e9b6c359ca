//! What confines each command of a task: where it may write, what
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
//!
//! Secrets: every command but a `full` agent has the user's secrets
//! ([`secret_paths`]: `~/.ssh`, the cloud and registry credentials, the
//! session's sockets) and the project's `sandbox { hide … }` paths hidden.
//! Hiding wins over what would keep them visible (an agent's state
//! folder, a `PATH` entry, a `sandbox { read … }` path, a path the agent's
//! command names); only what the command cannot work without stays: its
//! workspace, io folder, HOME, and for the replay helper the store and
//! cassist itself. The `sandbox { read … }` paths are read-only host paths
//! every command sees, under its private `/tmp` too (a venv there).
//!
//! Every role below `full` is bounded by the project's `limits { memory;
//! processes }` ([`super::Resources`]).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::agent::Agent;
use crate::agent::invoke::Invocation;
use crate::workspace::{Mode, Workspace};
use cassist_core::spec::SandboxLevel;
use cassist_sandbox::sandbox::{Jail, PRIVATE_TEMP, StateViews, secret_paths, socket_paths};

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
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let secrets = self.hidden_paths(home.as_deref());
        let under_secret = |p: &Path| secrets.iter().any(|s| p.starts_with(s));
        // What the command cannot work without, kept visible even where a
        // hidden path holds it.
        let mut essential: Vec<PathBuf> = vec![ws.dir.clone()];
        essential.extend(io.map(Path::to_path_buf));
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
                    let mut own = agent_state(&**inv, &self.plan.project.root, self.mode, home.as_deref(), |v| {
                        std::env::var_os(v)
                    });
                    // A state path that is hidden stays hidden.
                    own.retain(|p| !under_secret(&p.canonicalize().unwrap_or_else(|_| p.clone())));
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
                // The replay helper is cassist itself: it must stay
                // visible where it lives under a hidden or private folder
                // (a build under `/tmp`).
                essential.extend([self.plan.store.dir().to_path_buf(), self.exe.clone()]);
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
            keep.extend(inv.named_paths());
        }
        essential.extend(env.iter().filter(|(k, _)| k == "HOME").map(|(_, v)| PathBuf::from(v)));
        let canonical =
            |paths: Vec<PathBuf>| -> Vec<PathBuf> { paths.into_iter().filter_map(|p| p.canonicalize().ok()).collect() };
        let essential = canonical(essential);
        let reads = self.read_paths(home.as_deref(), &secrets);
        let mut keep = canonical(keep);
        keep.retain(|p| essential.contains(p) || !under_secret(p));
        keep.extend(essential.iter().filter(|e| !keep.contains(e)).cloned().collect::<Vec<_>>());
        keep.extend(reads.iter().cloned());
        let writable: Vec<PathBuf> = writable.into_iter().map(|p| p.canonicalize().unwrap_or(p)).collect();
        // A read path holding what the command writes is left to Landlock
        // (its mount cannot be read-only).
        let read_only = reads.into_iter().filter(|r| !writable.iter().any(|w| w.starts_with(r))).collect();
        let mut hide = vec![self.workspaces.canonicalize().unwrap_or_else(|_| self.workspaces.clone())];
        hide.extend(secrets);
        Jail {
            confined: true,
            hide,
            keep,
            read_only,
            writable,
            landlock: self.landlock,
            grace: Some(GRACE),
            state,
            // The replay helper (cassist itself) needs no network; the
            // other roles get theirs from the task ([`super::network`]).
            network: if role == Role::Replay && self.mode == Mode::Overlay {
                cassist_sandbox::sandbox::Network::Isolated
            } else {
                cassist_sandbox::sandbox::Network::Host
            },
            bounds: self.resources.bounds(),
        }
    }

    /// What every confined command has hidden: the user's secrets
    /// ([`secret_paths`]), the sockets cassist's environment names
    /// ([`socket_paths`]: an ssh agent's under `/tmp` too) and the
    /// project's `sandbox { hide … }` paths, those that exist, canonical (a
    /// link is hidden where it leads).
    pub(super) fn hidden_paths(&self, home: Option<&Path>) -> Vec<PathBuf> {
        let runtime = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from);
        let mut paths = secret_paths(home, runtime.as_deref());
        paths.extend(socket_paths(|v| std::env::var_os(v)));
        paths.extend(self.plan.project.config.sandbox.hide_paths(home));
        let mut out: Vec<PathBuf> = paths.into_iter().filter_map(|p| p.canonicalize().ok()).collect();
        out.sort();
        out.dedup();
        out
    }

    /// The project's `sandbox { read … }` paths that exist, canonical,
    /// but those a hidden path (`hidden`) holds, those in the folder of
    /// every workspace, and those holding a private temp folder (`/`,
    /// `/var`: only what is outside the private folders is seen of them).
    fn read_paths(&self, home: Option<&Path>, hidden: &[PathBuf]) -> Vec<PathBuf> {
        let workspaces = self.workspaces.canonicalize().unwrap_or_else(|_| self.workspaces.clone());
        let temps: Vec<PathBuf> = PRIVATE_TEMP.iter().filter_map(|t| Path::new(t).canonicalize().ok()).collect();
        self.plan
            .project
            .config
            .sandbox
            .read_paths(home)
            .into_iter()
            .filter_map(|p| p.canonicalize().ok())
            .filter(|p| !hidden.iter().any(|h| p.starts_with(h)) && !p.starts_with(&workspaces))
            .filter(|p| !temps.iter().any(|t| t.starts_with(p)))
            .collect()
    }

    /// Why `path`, a program or file a command of a task named, is not in
    /// its view: it is under a hidden path, or (with namespaces) under a
    /// private temp folder, and no `sandbox { read … }` path nor `PATH`
    /// entry of `env` keeps it visible. `None` when it is seen, or is not
    /// on this machine at all.
    pub(super) fn unseen(&self, path: &Path, env: &[(OsString, OsString)]) -> Option<Unseen> {
        // The folder canonical, not the name: a venv's `bin/python` is a
        // link out of it, yet it is the venv that must be seen.
        let real = match (path.parent(), path.file_name()) {
            (Some(dir), Some(name)) => dir.canonicalize().ok()?.join(name),
            _ => path.canonicalize().ok()?,
        };
        real.symlink_metadata().ok()?;
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let hidden = self.hidden_paths(home.as_deref());
        if let Some(h) = hidden.iter().find(|h| real.starts_with(h)) {
            return Some(Unseen::Hidden(h.clone()));
        }
        if self.mode != Mode::Overlay {
            return None;
        }
        let kept: Vec<PathBuf> = self
            .read_paths(home.as_deref(), &hidden)
            .into_iter()
            .chain(visible_from_env(env).into_iter().filter_map(|p| p.canonicalize().ok()))
            .collect();
        if kept.iter().any(|k| real.starts_with(k)) {
            return None;
        }
        PRIVATE_TEMP.iter().filter_map(|t| Path::new(t).canonicalize().ok()).find_map(|t| {
            let first = real.strip_prefix(&t).ok()?.components().next()?;
            Some(Unseen::Private { folder: t.clone(), read: t.join(first) })
        })
    }

    /// What a command that could not run a program (exit code 126 or 127)
    /// is told when its command line `cmd` or the end of its output `tail`
    /// names a path its sandbox hides ([`Runner::unseen`]): that it is not
    /// visible, and how to make it so where it can be.
    pub(super) fn unseen_program_note(
        &self,
        code: Option<i32>,
        cmd: &str,
        tail: &str,
        env: &[(OsString, OsString)],
    ) -> Option<String> {
        if !matches!(code, Some(126 | 127)) {
            return None;
        }
        let words = cmd.split(is_separator).chain(tail.split(is_separator));
        let (path, unseen) =
            words.filter(|w| w.starts_with('/')).find_map(|w| self.unseen(Path::new(w), env).map(|u| (w, u)))?;
        Some(match unseen {
            Unseen::Private { folder, read } => format!(
                "{path} is not visible in the sandbox: every command has a private, empty {}; to let commands read it, add `sandbox {{ read \"{}\" }}` to cassist.kdl",
                folder.display(),
                read.display()
            ),
            Unseen::Hidden(h) => format!(
                "{path} is not visible in the sandbox: {} is hidden from every command (it holds secrets, or `sandbox {{ hide … }}` in cassist.kdl names it), and a hidden path cannot be read",
                h.display()
            ),
        })
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
}

/// What `agent` may write besides its workspace and io folder: the state
/// folders its variables name (`var` reads cassist's environment), and its
/// own files and folders under `home`, a missing folder made first for an
/// agent that [`Agent::makes_state_dirs`] (a rule needs an existing path).
/// Never a folder made in the user's project `root` (a HOME inside it);
/// state in the project is writable only where the overlay keeps its
/// writes in the workspace (`mode`).
fn agent_state(
    agent: &dyn Agent,
    root: &Path,
    mode: Mode,
    home: Option<&Path>,
    var: impl Fn(&str) -> Option<OsString>,
) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    let passed = agent.pass_env();
    for name in crate::agent::all_state_vars() {
        if passed.contains(&name)
            && let Some(p) = var(name).map(PathBuf::from)
            && !p.starts_with(root)
        {
            paths.push(p);
        }
    }
    let Some(home) = home else { return paths };
    paths.extend(agent.home_state_files().iter().map(|f| home.join(f)));
    for rel in crate::agent::state_dirs(agent) {
        let p = home.join(rel);
        if !p.exists() && agent.makes_state_dirs() && !p.starts_with(root) {
            let _ = std::fs::create_dir_all(&p);
        }
        if !p.starts_with(root) || mode == Mode::Overlay {
            paths.push(p);
        }
    }
    paths
}

/// Why a path is not in a command's view ([`Runner::unseen`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Unseen {
    /// Under a hidden path, this one.
    Hidden(PathBuf),
    /// Under the private temp folder `folder`; `read` is the folder under
    /// it that `sandbox { read … }` would keep visible.
    Private { folder: PathBuf, read: PathBuf },
}

/// What ends a path in a shell command line or a shell's message
/// (`sh: 1: /tmp/venv/bin/pytest: not found`).
fn is_separator(c: char) -> bool {
    c.is_whitespace() || matches!(c, ';' | '&' | '|' | '(' | ')' | '<' | '>' | '\'' | '"' | '`' | ':' | '=' | ',')
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::adapter::{AdapterInput, AgentOutput};

    /// An agent known only through the trait: what the sandbox leaves it
    /// comes from its answers, never from its name.
    #[derive(Debug)]
    struct Fake {
        makes: bool,
        passes: Vec<&'static str>,
    }

    impl Agent for Fake {
        fn name(&self) -> &str {
            "claude"
        }
        fn program(&self) -> &str {
            "fake"
        }
        fn install_line(&self) -> Option<&str> {
            None
        }
        fn pass_env(&self) -> Vec<&str> {
            self.passes.clone()
        }
        fn home_state(&self) -> &[&str] {
            &[".fake"]
        }
        fn home_state_files(&self) -> &[&str] {
            &[".fake.json"]
        }
        fn makes_state_dirs(&self) -> bool {
            self.makes
        }
        fn argv(&self, _input: &AdapterInput<'_>) -> Vec<String> {
            vec!["fake".into()]
        }
        fn parse(&self, _text: &str, _outcome: cassist_sandbox::process::Outcome, _io: &Path) -> Option<AgentOutput> {
            None
        }
    }

    #[test]
    fn an_agents_state_is_what_its_trait_says() {
        let dir = tempfile::tempdir().unwrap();
        let (home, root) = (dir.path().join("home"), dir.path().join("project"));
        std::fs::create_dir_all(&home).unwrap();
        let codex_home = dir.path().join("codex-home");
        let var = |v: &str| (v == "CODEX_HOME").then(|| codex_home.clone().into_os_string());
        let agent = Fake { makes: false, passes: vec!["CODEX_HOME"] };
        let paths = agent_state(&agent, &root, Mode::Overlay, Some(&home), var);
        assert_eq!(paths, [codex_home.clone(), home.join(".fake.json"), home.join(".fake"), home.join(".cache")]);
        assert!(!home.join(".fake").exists(), "nothing is made for an agent that does not ask");
        // Named "claude", but neither passed CLAUDE_CONFIG_DIR nor given
        // `.claude`: the name decides nothing.
        assert!(!paths.iter().any(|p| p.ends_with(".claude") || p.ends_with(".claude.json")));

        let agent = Fake { makes: true, passes: Vec::new() };
        let paths = agent_state(&agent, &root, Mode::Copy, Some(&home), var);
        assert_eq!(paths, [home.join(".fake.json"), home.join(".fake"), home.join(".cache")]);
        assert!(home.join(".fake").is_dir() && home.join(".cache").is_dir());

        // A HOME inside the project: nothing made there, and in copy mode
        // nothing of it writable.
        let inner = root.join("home");
        assert_eq!(agent_state(&agent, &root, Mode::Copy, Some(&inner), var), [inner.join(".fake.json")]);
        assert!(!inner.exists());
        assert_eq!(agent_state(&agent, &root, Mode::Overlay, None, var), Vec::<PathBuf>::new());
    }
}
