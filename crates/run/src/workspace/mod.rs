//! Workspaces: an isolated, copy-on-write view of the project for one task,
//! the change set it ends with, and integrating that change set into the
//! user's tree.
//!
//! The normal mode is an overlayfs over the project's own path inside
//! unprivileged namespaces (see [`cassist_sandbox::sandbox`]): set-up costs a couple
//! of folders whatever the size of the repository, and every command of
//! the task runs inside it. A workspace is a stack of layers: read-only
//! lower layers under one writable layer per command ([`Layer`]):
//!
//! - `setup` commands write the setup layer, over the project;
//! - the agent writes the agent layer, over the setup layer and the
//!   project: the agent layer, compared with what the layers below show,
//!   is exactly the change set;
//! - acceptance commands and the project test write a scratch layer over
//!   the agent's, made fresh for each acceptance round and thrown away
//!   after it: what they write (`__pycache__/`, `target/`, coverage) is
//!   never part of the change, never seen by the next attempt and never
//!   blamed on the agent;
//! - the project's `build` commands write a build layer over the task's
//!   integration layer, the integration layers of the changes that passed
//!   before and the user's tree (not over the workspace's own layers),
//!   thrown away after them: the "still compiles" check reads the tree as
//!   the change will leave it, and nothing it writes reaches the user's
//!   tree (no build script rewrites `cassist.kdl`, a task file, `.git` or
//!   the store).
//!
//! Under the setup layer, a workspace stacks the *integration layers*
//! ([`IntegrationLayer`]) that existed when it was made, newest first: the
//! changes of tasks that passed but are not in the user's tree yet (the
//! tree is written only when no task runs). Its view is fixed when it is
//! made: nothing that passes later appears in it, and the lower layers of
//! a mounted overlay never change.
//!
//! The lower layers are a list (top first) so that more can go under them.
//!
//! Where namespaces or overlayfs are unavailable, the project's files
//! (tracked and untracked-but-not-ignored) are copied instead, once said.
//! Copy mode has no layers: what setup leaves is the base the change is
//! measured from, and acceptance runs on a throw-away copy of the agent's
//! result, at the workspace's own path (the agent's result is set aside
//! meanwhile and put back after); the build, on a throw-away copy of the
//! user's tree with the integration layers written over it, at the same
//! path. A copy workspace is the project with its integration layers
//! written over it.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use crate::entry::{self, Kind, Reader, raw_path};
use cassist_core::changes::{Change, ChangeKind, ChangeSet};
use cassist_core::journal;
use cassist_core::limits::Limits;
use cassist_core::paths::{Stamp, is_reserved, is_reserved_name, project_files, workspace_walker};
use cassist_sandbox::process;
use cassist_sandbox::sandbox::{ExecSpec, Jail};

/// How a workspace is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Overlay,
    Copy,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Overlay => "overlay",
            Mode::Copy => "copy",
        }
    }
}

/// The mode this machine supports for `root`, probed once per process by
/// building in new namespaces the view a confined command gets (the
/// overlay over the project with its upper dir under `parent`, so both
/// filesystems are tried, private `/tmp` and `/dev`, hidden and kept
/// folders), through the cassist binary `exe`. A probe that worked is
/// remembered in `.cassist/cache/sandbox-probe` while nothing it depends
/// on changes ([`probe_key`]): it costs a process and a dozen mounts, more
/// than the rest of a run's set-up. `CASSIST_WORKSPACE=copy` forces the
/// copy mode. The second value says why overlay is not used.
pub fn detect_mode(exe: &Path, root: &Path, parent: &Path) -> (Mode, Option<String>) {
    static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
    if std::env::var("CASSIST_WORKSPACE").is_ok_and(|v| v == "copy") {
        return (Mode::Copy, None);
    }
    if !cassist_sandbox::sandbox::overlay_safe(root) || !cassist_sandbox::sandbox::overlay_safe(parent) {
        return (
            Mode::Copy,
            Some(format!("the path {} holds `,` or `:`, which overlayfs cannot mount", root.display())),
        );
    }
    let probe = PROBE.get_or_init(|| {
        let cache = probe_cache(root);
        let key = probe_key(exe, root, parent);
        if std::fs::read_to_string(&cache).is_ok_and(|k| k == key) {
            return Ok(());
        }
        std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
        let dir = tempfile::Builder::new().prefix("probe-").tempdir_in(parent).map_err(|e| e.to_string())?;
        let mut probe = process::Command::inheriting([
            exe.as_os_str(),
            "__sandbox-probe".as_ref(),
            dir.path().as_os_str(),
            root.as_os_str(),
        ]);
        let (k, v) = cassist_sandbox::sandbox::WRAPPER_ENV;
        probe.env.push((k.into(), v.into()));
        let done =
            process::run(&probe, &process::Redactor::default(), &process::Cancel::new()).map_err(|e| e.to_string())?;
        remove_tree(dir.path());
        // The probe prints only its reason for failing.
        if !done.success() {
            return Err(done.tail.trim().to_owned());
        }
        if cassist_core::fsx::ensure_state_dir(root).is_ok() {
            let _ = cassist_core::fsx::write_atomic(&cache, key.as_bytes());
        }
        Ok(())
    });
    match probe {
        Ok(()) => (Mode::Overlay, None),
        Err(why) => (
            Mode::Copy,
            Some(if why.is_empty() { "user namespaces or overlayfs are unavailable".into() } else { why.clone() }),
        ),
    }
}

/// The program that runs the sandbox wrapper for every command of a task:
/// [`cassist_sandbox::sandbox::WRAPPER_PROGRAM`] beside cassist (`exe`) when it is
/// of this very build (it answers `--build-id` with
/// [`cassist_sandbox::sandbox::build_id`]), else cassist itself (then said once,
/// unless `quiet`: a wrapper of another build may behave otherwise, so it
/// is never used). The answer is remembered in
/// `.cassist/cache/sandbox-wrapper` by the program's path, size and times.
pub fn wrapper_program(exe: &Path, root: &Path, quiet: bool) -> PathBuf {
    let candidate = exe.with_file_name(cassist_sandbox::sandbox::WRAPPER_PROGRAM);
    let Ok(meta) = std::fs::metadata(&candidate) else { return exe.to_path_buf() };
    let id = cassist_sandbox::sandbox::build_id();
    let s = Stamp::of(&meta);
    let key = format!("{} {} {} {} {id}\n", candidate.display(), s.size, s.mtime_ns, s.ctime_ns);
    let cache = cassist_core::fsx::state_dir(root).join("cache").join("sandbox-wrapper");
    if std::fs::read_to_string(&cache).is_ok_and(|k| k == key) {
        return candidate;
    }
    let mut ask = process::Command::inheriting([candidate.as_os_str(), "--build-id".as_ref()]);
    ask.timeout = Some(std::time::Duration::from_secs(10));
    let answer = process::run(&ask, &process::Redactor::default(), &process::Cancel::new());
    match answer {
        Ok(done) if done.success() && done.tail.trim() == id => {
            if cassist_core::fsx::ensure_state_dir(root).is_ok() {
                let _ = cassist_core::fsx::write_cache(&cache, key.as_bytes());
            }
            candidate
        }
        _ => {
            if !quiet {
                cassist_core::errln!(
                    "note: {} is not of this cassist's build (reinstall both): cassist runs its sandbox wrapper itself, which starts slower",
                    candidate.display()
                );
            }
            exe.to_path_buf()
        }
    }
}

/// Where a probe that worked is remembered.
fn probe_cache(root: &Path) -> PathBuf {
    cassist_core::fsx::state_dir(root).join("cache").join("sandbox-probe")
}

/// Forgets a probe that worked: a command's sandbox could not be set up
/// after all (the machine changed in a way [`probe_key`] does not see).
pub fn forget_probe(root: &Path) {
    let _ = std::fs::remove_file(probe_cache(root));
}

/// What the probe's answer depends on: the cassist binary (path, size,
/// mtime), the kernel, the settings that allow user namespaces, the user,
/// and the two folders.
fn probe_key(exe: &Path, root: &Path, parent: &Path) -> String {
    let exe_stamp = std::fs::metadata(exe).map(|m| Stamp::of(&m)).map(|s| format!("{} {}", s.size, s.mtime_ns));
    let mut key = format!("exe {} {}\n", exe.display(), exe_stamp.unwrap_or_default());
    for setting in [
        "kernel/osrelease",
        "user/max_user_namespaces",
        "kernel/unprivileged_userns_clone",
        "kernel/apparmor_restrict_unprivileged_userns",
    ] {
        let value = std::fs::read_to_string(format!("/proc/sys/{setting}")).unwrap_or_else(|_| "-".into());
        key.push_str(&format!("{setting} {}\n", value.trim()));
    }
    key.push_str(&format!("uid {}\nroot {}\nparent {}\n", nix::unistd::getuid(), root.display(), parent.display()));
    key
}

/// The writable layer of one command of a task (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    /// `setup` commands: over the project.
    Setup,
    /// The agent and the replay helper: over the setup layer; the change.
    Agent,
    /// Acceptance and the project test: over the agent's layer, thrown away
    /// after each round ([`Workspace::begin_scratch`]).
    Scratch,
    /// The `build` commands after integration: over the user's tree alone,
    /// thrown away after them ([`Workspace::begin_build`]).
    Build,
}

impl Layer {
    fn dir_name(self) -> &'static str {
        match self {
            Layer::Setup => "setup",
            Layer::Agent => "agent",
            Layer::Scratch => "scratch",
            Layer::Build => "build",
        }
    }
}

/// When a task started, as the project's own file system stamps a change
/// made then: the ctime of a file made in `.cassist/` (or, in a project
/// without one, in `scratch`) and removed at once, changed until its ctime
/// moves past the one it was made with. A file system stamps changes with
/// a clock that ticks (by a few milliseconds, a second on some): what was
/// written just before (another task's change, the fixture of a test) may
/// carry the same stamp as the marker; once the stamp has moved on, every
/// change to the tree from then on has a ctime after what was written
/// before, at or after the returned one. The conflict check
/// ([`conflicts`]) compares changed paths' ctimes with it. Costs well
/// under a millisecond where stamps are fine-grained once read (Linux 6.13
/// and later), up to one tick of the clock elsewhere.
pub fn start_stamp(root: &Path, scratch: &Path) -> std::io::Result<i128> {
    let state = cassist_core::fsx::state_dir(root);
    let dir = if state.is_dir() { state } else { scratch.to_path_buf() };
    let marker = tempfile::Builder::new().prefix("started-").tempfile_in(dir)?;
    let ctime = || marker.as_file().metadata().map(|m| Stamp::of(&m).ctime_ns);
    let first = ctime()?;
    let give_up = std::time::Instant::now() + std::time::Duration::from_millis(1100);
    loop {
        // A change of the marker's mode changes its ctime only.
        marker.as_file().set_permissions(std::fs::Permissions::from_mode(0o600))?;
        let now = ctime()?;
        if now > first || std::time::Instant::now() > give_up {
            return Ok(now);
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
}

/// One task's workspace.
pub struct Workspace {
    pub mode: Mode,
    /// The program that runs the sandbox wrapper ([`wrapper_program`]).
    exe: PathBuf,
    /// The user's project (canonical).
    pub root: PathBuf,
    /// Where commands run: the project path itself (overlay) or the copy.
    pub dir: PathBuf,
    /// Holds the layers and their work dirs, or the copy.
    base: PathBuf,
    /// When the task started ([`start_stamp`]): a change of the tree
    /// stamped at or after it is a conflict.
    started: i128,
    /// Copy mode: each file as copied (after setup: as setup left it).
    copied: HashMap<String, Copied>,
    /// Paths cassist itself placed (instructions files): never part of the
    /// change set.
    placed: Vec<String>,
    /// The throw-away layer in use ([`Layer::Scratch`] or [`Layer::Build`];
    /// copy mode: a throw-away copy), if any.
    scratch: Option<Layer>,
    /// What reading the change set may cost (SPEC 2 `limits`).
    pub limits: Limits,
    keep: bool,
    /// The task's name (what a kept workspace's marker names).
    name: String,
    /// The integration layers it stacks over the project, newest first:
    /// the changes that had passed but were not yet in the tree when it
    /// was made ([`create_over`](Self::create_over)).
    stack: Vec<Arc<IntegrationLayer>>,
    /// The layers the build stacks ([`begin_build_over`](Self::begin_build_over)).
    build_stack: Vec<Arc<IntegrationLayer>>,
    /// How many changes had landed when it was made (the runner's count).
    pub view: u64,
    /// The files the task's scope names literally: part of the change
    /// even when `.gitignore` ignores them ([`name_literally`](Self::name_literally)).
    literals: Vec<String>,
    /// Ignored entries the agent wrote, as the last
    /// [`changes`](Self::changes) found them (a folder ends with `/`).
    ignored: Vec<String>,
    /// Copy mode: the ignored entries setup left (not the agent's).
    setup_ignored: std::collections::HashSet<String>,
}

impl Workspace {
    /// Makes a workspace for `root` under `parent` (a folder outside the
    /// project: overlayfs refuses an upper dir inside its lower dir).
    pub fn create(exe: &Path, root: &Path, parent: &Path, mode: Mode, name: &str) -> std::io::Result<Workspace> {
        Workspace::create_over(exe, root, parent, mode, name, Vec::new())
    }

    /// [`create`](Self::create) with integration layers over the project
    /// (newest first): the workspace sees the project as they leave it,
    /// and nothing that lands later. Copy mode copies the project and
    /// writes the layers over the copy.
    pub fn create_over(
        exe: &Path,
        root: &Path,
        parent: &Path,
        mode: Mode,
        name: &str,
        stack: Vec<Arc<IntegrationLayer>>,
    ) -> std::io::Result<Workspace> {
        let root = &root.canonicalize()?;
        std::fs::create_dir_all(parent)?;
        let base = tempfile::Builder::new().prefix(&format!("{}-", sanitize(name))).tempdir_in(parent)?.keep();
        // Whose it is: a workspace left by a cassist that was killed is
        // removed by the next run (`remove_stale`).
        std::fs::write(base.join(OWNER), std::process::id().to_string())?;
        // Taken before anything runs in the workspace (and, copy mode,
        // before copying), so that any later edit of the project, by the
        // user or by another task's integration, is a conflict at
        // integration rather than taken as the starting state. O(1): the
        // paths the task changes are checked at integration, no others.
        let started = start_stamp(root, &base)?;
        let mut ws = Workspace {
            exe: exe.to_path_buf(),
            mode,
            root: root.to_path_buf(),
            dir: root.to_path_buf(),
            base,
            started,
            copied: HashMap::new(),
            placed: Vec::new(),
            scratch: None,
            limits: Limits::DEFAULT,
            keep: false,
            name: name.to_owned(),
            literals: Vec::new(),
            ignored: Vec::new(),
            setup_ignored: Default::default(),
            stack,
            build_stack: Vec::new(),
            view: 0,
        };
        match mode {
            Mode::Overlay => {
                for layer in [Layer::Setup, Layer::Agent] {
                    std::fs::create_dir(ws.layer(layer))?;
                    std::fs::create_dir(ws.work_dir(layer))?;
                }
            }
            Mode::Copy => {
                let copy = ws.base.join("project");
                std::fs::create_dir(&copy)?;
                copy_project(root, &copy)?;
                for layer in ws.stack.iter().rev() {
                    apply_layer(&layer.dir, &copy)?;
                }
                ws.copied = hash_files(&copy)?;
                ws.dir = copy;
            }
        }
        Ok(ws)
    }

    /// The base folder (upper and work dirs, or the copy).
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// The folder of a writable layer (overlay mode).
    fn layer(&self, layer: Layer) -> PathBuf {
        self.base.join(layer.dir_name())
    }

    /// The overlay work dir that goes with a layer.
    fn work_dir(&self, layer: Layer) -> PathBuf {
        self.base.join(format!("{}.work", layer.dir_name()))
    }

    /// The read-only layers under `layer`'s, top first; the project last.
    fn lowers(&self, layer: Layer) -> Vec<PathBuf> {
        let below: &[Layer] = match layer {
            Layer::Setup | Layer::Build => &[],
            Layer::Agent => &[Layer::Setup],
            Layer::Scratch => &[Layer::Agent, Layer::Setup],
        };
        let stack = if layer == Layer::Build { &self.build_stack } else { &self.stack };
        below
            .iter()
            .map(|l| self.layer(*l))
            .chain(stack.iter().map(|l| l.dir.clone()))
            .chain([self.root.clone()])
            .collect()
    }

    /// The integration layers it stacks, newest first.
    pub fn stack(&self) -> &[Arc<IntegrationLayer>] {
        &self.stack
    }

    /// The argv that runs `argv` in the workspace, writing `layer`, as
    /// `jail` confines it. Whatever the jail: the project's `.git` is
    /// read-only (and its `.cassist/` hidden from a confined command), and
    /// the workspace path stays visible.
    pub fn command(&self, layer: Layer, argv: Vec<OsString>, jail: Jail) -> std::io::Result<Vec<OsString>> {
        let overlay = match self.mode {
            Mode::Copy => None,
            Mode::Overlay => {
                if matches!(layer, Layer::Scratch | Layer::Build) && self.scratch != Some(layer) {
                    return Err(std::io::Error::other(format!(
                        "no {} layer: begin_scratch or begin_build first",
                        layer.dir_name()
                    )));
                }
                Some(cassist_sandbox::sandbox::Overlay {
                    target: self.root.clone(),
                    lowers: self.lowers(layer),
                    upper: self.layer(layer),
                    work: self.work_dir(layer),
                })
            }
        };
        let spec = ExecSpec::for_project(jail, self.mode == Mode::Overlay, overlay, &self.root, &self.dir, argv);
        let mut out = vec![self.exe.clone().into_os_string()];
        out.extend(spec.to_args());
        Ok(out)
    }

    /// [`Self::command`] as the command the runner starts, in the
    /// workspace's folder: through the wrapper, which sees itself to dying
    /// with cassist ([`process::Command::sandboxed`]).
    pub fn sandboxed(&self, layer: Layer, argv: Vec<OsString>, jail: Jail) -> std::io::Result<process::Command> {
        Ok(process::Command::sandboxed(self.command(layer, argv, jail)?, self.dir.clone()))
    }

    /// `argv` in the agent's layer, unconfined (own session and
    /// namespaces only): for tests of the workspace itself.
    pub fn wrap(&self, argv: Vec<OsString>) -> std::io::Result<Vec<OsString>> {
        self.command(Layer::Agent, argv, Jail::default())
    }

    /// A fresh scratch layer over the agent's, for one acceptance round
    /// ([`Layer::Scratch`]); copy mode: the agent's result is set aside
    /// and a throw-away copy of it takes its place. Ended by
    /// [`end_scratch`](Self::end_scratch).
    pub fn begin_scratch(&mut self) -> std::io::Result<()> {
        self.begin_throwaway(Layer::Scratch)
    }

    /// A fresh build layer over the user's tree as it is now (integrated),
    /// for the `build` commands ([`Layer::Build`]); copy mode: the agent's
    /// result is set aside and a throw-away copy of the user's tree takes
    /// its place. Ended by [`end_scratch`](Self::end_scratch).
    pub fn begin_build(&mut self) -> std::io::Result<()> {
        self.begin_build_over(Vec::new())
    }

    /// [`begin_build`](Self::begin_build) over integration layers (newest
    /// first) over the user's tree: the changes that passed and are not
    /// written yet.
    pub fn begin_build_over(&mut self, stack: Vec<Arc<IntegrationLayer>>) -> std::io::Result<()> {
        self.build_stack = stack;
        self.begin_throwaway(Layer::Build)
    }

    fn begin_throwaway(&mut self, layer: Layer) -> std::io::Result<()> {
        self.end_scratch();
        match self.mode {
            Mode::Overlay => {
                std::fs::create_dir(self.layer(layer))?;
                std::fs::create_dir(self.work_dir(layer))?;
            }
            Mode::Copy => {
                let aside = self.base.join(SET_ASIDE);
                std::fs::rename(&self.dir, &aside)?;
                self.scratch = Some(layer);
                return match layer {
                    Layer::Build => {
                        std::fs::create_dir(&self.dir)?;
                        copy_project(&self.root, &self.dir)?;
                        self.build_stack.iter().rev().try_for_each(|l| apply_layer(&l.dir, &self.dir))
                    }
                    _ => copy_tree(&aside, &self.dir),
                };
            }
        }
        self.scratch = Some(layer);
        Ok(())
    }

    /// Throws the throw-away layer away (copy mode: puts the agent's
    /// result back). Nothing when there is none.
    pub fn end_scratch(&mut self) {
        match self.mode {
            Mode::Overlay => {
                for layer in [Layer::Scratch, Layer::Build] {
                    remove_tree(&self.layer(layer));
                    remove_tree(&self.work_dir(layer));
                }
            }
            Mode::Copy => {
                let aside = self.base.join(SET_ASIDE);
                if aside.exists() {
                    remove_tree(&self.dir);
                    let _ = std::fs::rename(&aside, &self.dir);
                }
            }
        }
        self.scratch = None;
    }

    /// After the `setup` commands: copy mode measures the change from what
    /// they left (overlay mode has their layer for it).
    pub fn setup_done(&mut self) -> std::io::Result<()> {
        if self.mode == Mode::Copy {
            self.copied = hash_files(&self.dir)?;
            for rel in &self.literals {
                let path = self.dir.join(rel);
                if !self.copied.contains_key(rel)
                    && plain_path(&self.dir, rel)
                    && let Ok(meta) = std::fs::symlink_metadata(&path)
                    && let Some(c) = copied_of(&path, &meta)?
                {
                    self.copied.insert(rel.clone(), c);
                }
            }
            // What setup left that .gitignore ignores is not the agent's.
            let ignore = IgnoreCheck::new(&self.root, vec![self.dir.clone()]);
            self.setup_ignored = self.copy_ignored(&ignore).into_iter().collect();
        }
        Ok(())
    }

    /// The files the task's scope names literally (relative, normalized):
    /// part of the change even when `.gitignore` ignores them; other
    /// ignored files the agent writes are left out and named by
    /// [`ignored`](Self::ignored). Called before anything runs in the
    /// workspace: such a file the project has (ignored, so left out of
    /// the walk) is part of the starting state, and copy mode copies it.
    pub fn name_literally(&mut self, paths: &[String]) -> std::io::Result<()> {
        self.literals = paths.iter().filter(|p| !p.is_empty() && !is_reserved(p)).cloned().collect();
        // The overlay shows the project's ignored files as they are.
        if self.mode != Mode::Copy {
            return Ok(());
        }
        for rel in self.literals.clone() {
            let src = self.root.join(&rel);
            if self.copied.contains_key(&rel) || !plain_path(&self.root, &rel) {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(&src) else { continue };
            if !matches!(entry::kind(&meta), Kind::File | Kind::Symlink) {
                continue;
            }
            let dst = self.dir.join(&rel);
            if let Some(parent) = dst.parent() {
                std::fs::create_dir_all(parent)?;
            }
            copy_entry(&src, &dst, &meta)?;
            if let Some(c) = copied_of(&dst, &std::fs::symlink_metadata(&dst)?)? {
                self.copied.insert(rel, c);
            }
        }
        Ok(())
    }

    /// Whether the scope names `rel` literally.
    fn is_literal(&self, rel: &Path) -> bool {
        rel.to_str().is_some_and(|r| self.literals.iter().any(|l| l == r))
    }

    /// Whether the scope names literally a path below folder `rel`.
    fn literal_below(&self, rel: &Path) -> bool {
        rel.to_str().is_some_and(|r| {
            self.literals.iter().any(|l| l.strip_prefix(r).is_some_and(|below| below.starts_with('/')))
        })
    }

    /// Ignored entries the agent wrote, sorted, as the last
    /// [`changes`](Self::changes) found them: not part of the change (a
    /// folder, ending with `/`, stands for everything below it).
    pub fn ignored(&self) -> &[String] {
        &self.ignored
    }

    /// A folder outside the project for the prompt and result files of the
    /// agent: writable under every sandbox level, never part of the change.
    pub fn io_dir(&self) -> std::io::Result<PathBuf> {
        let dir = self.base.join("io");
        std::fs::create_dir_all(&dir)?;
        Ok(dir)
    }

    /// Writes a file into the workspace (not the user's tree) that is not
    /// part of the change set: the instructions file placed for the agent
    /// (overlay mode: into the setup layer, under the agent's).
    pub fn place(&mut self, rel: &str, bytes: &[u8]) -> std::io::Result<()> {
        let target = match self.mode {
            Mode::Overlay => self.layer(Layer::Setup).join(rel),
            Mode::Copy => self.dir.join(rel),
        };
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(target, bytes)?;
        self.placed.push(rel.to_owned());
        Ok(())
    }

    /// What changed in the workspace: new, modified, deleted and renamed
    /// entries, binary ones included, read within [`limits`](Self::limits)
    /// (see [`crate::entry`]); never ignored files or what cassist placed.
    /// Entries the review rejects are part of it, never left out: special
    /// files, names that are not UTF-8, files over the limits (unread),
    /// changes below `.git/` and `.cassist/`.
    pub fn changes(&mut self) -> std::io::Result<ChangeSet> {
        let mut raw: BTreeMap<String, Change> = BTreeMap::new();
        // .gitignore files as the agent left them: the workspace's first.
        let layers: Vec<PathBuf> = match self.mode {
            Mode::Overlay => [self.layer(Layer::Agent)].into_iter().chain(self.lowers(Layer::Agent)).collect(),
            Mode::Copy => vec![self.dir.clone()],
        };
        let ignore = IgnoreCheck::new(&self.root, layers);
        let mut reader = Reader::new(self.limits);
        let mut ignored = Vec::new();
        match self.mode {
            Mode::Overlay => self.overlay_changes(&mut reader, &ignore, &mut raw, &mut ignored)?,
            Mode::Copy => {
                self.copy_changes(&mut reader, &mut raw)?;
                ignored = self.copy_ignored(&ignore).into_iter().filter(|p| !self.setup_ignored.contains(p)).collect();
            }
        }
        raw.retain(|path, c| {
            let rel = raw_path(c);
            !self.placed.contains(path) && (self.is_literal(&rel) || !ignore.ignored(&rel, false))
        });
        ignored.retain(|p| !self.placed.contains(p));
        ignored.sort();
        self.ignored = ignored;
        Ok(ChangeSet { changes: detect_renames(raw.into_values().collect()) })
    }

    /// The agent's layer against what the lowers show (see [`Lowers`]):
    /// every entry of the agent's layer is new, changed, a copy-up of an
    /// unchanged file, or a whiteout.
    fn overlay_changes(
        &self,
        reader: &mut Reader,
        ignore: &IgnoreCheck,
        out: &mut BTreeMap<String, Change>,
        ignored: &mut Vec<String>,
    ) -> std::io::Result<()> {
        let upper = self.layer(Layer::Agent);
        let lower_dirs = self.lowers(Layer::Agent);
        let lowers = Lowers::new(&lower_dirs);
        let mut insert = |c: Change| insert_change(out, c);
        let mut stack = vec![PathBuf::new()];
        while let Some(rel_dir) = stack.pop() {
            let dir = upper.join(&rel_dir);
            // An opaque folder hides everything below it in the lowers.
            if !rel_dir.as_os_str().is_empty() && is_opaque(&dir) {
                for (rel, real) in lowers.files_below(&rel_dir) {
                    if upper.join(&rel).symlink_metadata().is_err() {
                        insert(reader.deleted(&rel, &real));
                    }
                }
            }
            for e in std::fs::read_dir(&dir)? {
                let rel = rel_dir.join(e?.file_name());
                let path = upper.join(&rel);
                let meta = std::fs::symlink_metadata(&path)?;
                // What the lowers show at this path.
                let below = lowers.path(&rel).and_then(|p| std::fs::symlink_metadata(&p).ok().map(|m| (p, m)));
                let below_is_dir = below.as_ref().is_some_and(|(_, m)| m.is_dir());
                if entry::kind(&meta) == Kind::Dir {
                    // An ignored folder is named as a whole, unless the
                    // scope names a file below it.
                    if ignore.ignored(&rel, true) && !self.literal_below(&rel) {
                        if writes_below(&path) {
                            ignored.push(format!("{}/", entry::name(&rel).0));
                        }
                        continue;
                    }
                    // A file (or a symlink, never followed) replaced by a
                    // folder.
                    if let Some((lower, _)) = &below
                        && !below_is_dir
                    {
                        insert(reader.deleted(&rel, lower));
                    }
                    stack.push(rel);
                    continue;
                }
                // A folder replaced by anything else, or deleted (a
                // whiteout): its files are gone.
                if below_is_dir {
                    for (p, real) in lowers.files_below(&rel) {
                        insert(reader.deleted(&p, &real));
                    }
                }
                if entry::is_whiteout(&meta) {
                    if let Some((lower, _)) = &below
                        && !below_is_dir
                    {
                        insert(reader.deleted(&rel, lower));
                    }
                    continue;
                }
                let old = below.filter(|(_, m)| matches!(entry::kind(m), Kind::File | Kind::Symlink));
                // A copy-up (opened for writing, touched) of an unchanged file.
                if let Some((lower, lm)) = &old
                    && entry::same_entry(&path, &meta, lower, lm)?
                {
                    continue;
                }
                if ignore.ignored(&rel, false) && !self.is_literal(&rel) {
                    ignored.push(entry::name(&rel).0);
                    continue;
                }
                insert(reader.change(&rel, &path, &meta, old.as_ref().map(|(p, m)| (p.as_path(), m)))?);
            }
        }
        Ok(())
    }

    /// The copy against what was copied: every entry of the copy (`.git/`
    /// and `.cassist/` folders included) whose type, mode or content is not
    /// what was copied, and what was copied and is gone.
    fn copy_changes(&self, reader: &mut Reader, out: &mut BTreeMap<String, Change>) -> std::io::Result<()> {
        let mut seen = std::collections::HashSet::new();
        for e in workspace_walker(&self.dir) {
            if e.file_type().is_none_or(|t| t.is_dir()) {
                continue;
            }
            let Ok(rel) = e.path().strip_prefix(&self.dir) else { continue };
            let meta = std::fs::symlink_metadata(e.path())?;
            self.copy_change(reader, out, &mut seen, rel, e.path(), &meta)?;
        }
        // The files the scope names that .gitignore ignores (the walk
        // leaves them out).
        for rel in &self.literals {
            let path = self.dir.join(rel);
            if !seen.contains(rel)
                && plain_path(&self.dir, rel)
                && let Ok(meta) = std::fs::symlink_metadata(&path)
                && !meta.is_dir()
            {
                self.copy_change(reader, out, &mut seen, Path::new(rel), &path, &meta)?;
            }
        }
        for rel in self.copied.keys() {
            if !seen.contains(rel) {
                insert_change(out, reader.deleted(Path::new(rel), &self.started_from(Path::new(rel))));
            }
        }
        Ok(())
    }

    /// Copy mode: the entry `rel` of the copy (at `path`) against what
    /// was copied; `seen` gets its name.
    fn copy_change(
        &self,
        reader: &mut Reader,
        out: &mut BTreeMap<String, Change>,
        seen: &mut std::collections::HashSet<String>,
        rel: &Path,
        path: &Path,
        meta: &std::fs::Metadata,
    ) -> std::io::Result<()> {
        let (name, _) = entry::name(rel);
        let copied = self.copied.get(&name);
        seen.insert(name);
        // Unchanged: the same type, mode and size (from the lstat) and
        // the same bytes (hashed as a stream).
        if let Some(c) = copied
            && meta.mode() & TYPE_AND_PERMISSIONS == c.mode
            && meta.len() == c.size
            && entry::hash_entry(path, meta)?.as_ref() == Some(&c.hash)
        {
            return Ok(());
        }
        let orig = self.started_from(rel);
        let old = match copied {
            Some(_) => std::fs::symlink_metadata(&orig).ok(),
            None => None,
        };
        insert_change(out, reader.change(rel, path, meta, old.as_ref().map(|m| (orig.as_path(), m)))?);
        Ok(())
    }

    /// Where the file at `rel` the task started from is: in the newest of
    /// its integration layers that has it, else in the project.
    fn started_from(&self, rel: &Path) -> PathBuf {
        let view: Vec<PathBuf> = self.stack.iter().map(|l| l.dir.clone()).chain([self.root.clone()]).collect();
        Lowers::new(&view).path(rel).unwrap_or_else(|| self.root.join(rel))
    }

    /// Copy mode: the ignored entries of the copy (a folder as a whole,
    /// unless the scope names a file below it), but the files the scope
    /// names.
    fn copy_ignored(&self, ignore: &IgnoreCheck) -> Vec<String> {
        let mut out = Vec::new();
        let mut walk = walkdir::WalkDir::new(&self.dir).min_depth(1).into_iter();
        while let Some(Ok(e)) = walk.next() {
            let is_dir = e.file_type().is_dir();
            let Ok(rel) = e.path().strip_prefix(&self.dir) else { continue };
            if is_reserved_name(e.file_name()) {
                if is_dir {
                    walk.skip_current_dir();
                }
                continue;
            }
            if !ignore.ignored(rel, is_dir) || self.is_literal(rel) {
                continue;
            }
            if !is_dir {
                out.push(entry::name(rel).0);
            } else if !self.literal_below(rel) {
                out.push(format!("{}/", entry::name(rel).0));
                walk.skip_current_dir();
            }
        }
        out
    }

    /// Keeps the workspace on disk for the user instead of removing it,
    /// until `cassist cache gc` (or a `--keep-workspace` run of the same
    /// project) removes it: [`remove_stale`] leaves it. Writes the task's
    /// view with its change into `<workspace>/tree`, a plain folder one
    /// can `cd` into and test in (the files a copy-mode workspace holds:
    /// what the project shows but what `.gitignore` ignores, `.git/` and
    /// `.cassist/`, under what the layers above it hold, without what
    /// cassist placed; symlinks as symlinks, never followed, and special
    /// files left out), and returns its path. O(repository), only when
    /// keeping. An error leaves the workspace kept without its tree.
    pub fn keep(&mut self) -> std::io::Result<PathBuf> {
        self.keep = true;
        self.end_scratch();
        let tree = self.base.join(TREE);
        match self.mode {
            Mode::Overlay => {
                for layer in [Layer::Setup, Layer::Agent] {
                    remove_tree(&self.work_dir(layer));
                }
                self.materialize(&tree)?;
            }
            Mode::Copy => {
                std::fs::rename(&self.dir, &tree)?;
                self.dir = tree.clone();
                for rel in &self.placed {
                    let _ = std::fs::remove_file(tree.join(rel));
                }
                // Special files the agent made (a fifo would hang a
                // `grep -r` there), never opened.
                for e in walkdir::WalkDir::new(&tree).into_iter().flatten() {
                    let t = e.file_type();
                    if !(t.is_dir() || t.is_file() || t.is_symlink()) {
                        std::fs::remove_file(e.path())?;
                    }
                }
            }
        }
        // Last: a workspace whose marker is missing is not kept.
        let marker = KeptMarker { task: self.name.clone(), root: self.root.clone() };
        std::fs::write(self.base.join(KEPT), serde_json::to_vec(&marker).map_err(std::io::Error::other)?)?;
        Ok(tree)
    }

    /// Overlay mode: writes the agent's view (its layer over the lowers)
    /// into the new folder `to` (see [`keep`](Self::keep)).
    fn materialize(&self, to: &Path) -> std::io::Result<()> {
        let layers: Vec<PathBuf> = [self.layer(Layer::Agent)].into_iter().chain(self.lowers(Layer::Agent)).collect();
        let ignore = IgnoreCheck::new(&self.root, layers.clone());
        let view = Lowers::new(&layers);
        std::fs::create_dir(to)?;
        let mut result = Ok(());
        view.walk(Path::new(""), &mut |rel, real, is_dir, from| {
            let project_only = from == [self.root.as_path()];
            if result.is_err()
                || rel.file_name().is_some_and(is_reserved_name)
                || self.placed.iter().any(|p| Path::new(p) == rel)
                || (project_only && ignore.ignored(rel, is_dir))
            {
                return false;
            }
            let dest = to.join(rel);
            // The files of the workspace's own layers are linked: what the
            // agent wrote (a sparse 2 GiB file...) costs nothing more. What
            // others use (the project, shared layers) is copied.
            let own = real.starts_with(&self.base);
            result = if is_dir {
                std::fs::create_dir(&dest)
            } else {
                std::fs::symlink_metadata(real).and_then(|meta| {
                    if own && meta.is_file() && std::fs::hard_link(real, &dest).is_ok() {
                        return Ok(());
                    }
                    copy_entry(real, &dest, &meta)
                })
            };
            is_dir
        });
        result
    }

    /// Begins integrating `changes` into the user's tree: the transaction
    /// is open; see [`integrate`].
    pub fn begin_integration(&self, changes: &ChangeSet) -> Result<journal::Open, IntegrateError> {
        integrate(&self.root, changes, self.started)
    }

    /// When the task started ([`start_stamp`]).
    pub fn started(&self) -> i128 {
        self.started
    }

    /// Integrates `changes` into the user's tree and commits it at once
    /// (no lock line goes with it); what was written.
    pub fn integrate(&mut self, changes: &ChangeSet) -> Result<Integrated, IntegrateError> {
        let open = self.begin_integration(changes)?;
        let done = Integrated {
            written: open.written().map(str::to_owned).collect(),
            deleted: open.deleted().map(str::to_owned).collect(),
        };
        open.commit(Vec::new()).map_err(|e| IntegrateError::Io(e.to_string()))?;
        Ok(done)
    }
}

impl Workspace {
    /// Drops the workspace, its folder removed on a background thread
    /// ([`finish_removals`] waits for it) rather than now: removing a
    /// workspace's dozen folders costs a disk round trip each where the
    /// file system discards freed blocks at once (ext4 `-o discard`),
    /// milliseconds the task's recording and integration need not wait
    /// for. A kept workspace stays.
    pub fn remove_in_background(mut self) {
        if self.keep {
            return;
        }
        // Drop leaves it to the background.
        self.keep = true;
        remove_later(self.base.clone());
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        if !self.keep {
            remove_tree(&self.base);
        }
    }
}

/// What the background thread removes: a workspace folder, or every
/// stale one under a parent ([`remove_stale`]).
enum Removal {
    Workspace(PathBuf),
    Stale(PathBuf),
}

/// The thread that removes workspaces in the background, and what to send
/// it.
type Remover = (std::sync::mpsc::Sender<Removal>, std::thread::JoinHandle<()>);
static REMOVER: std::sync::Mutex<Option<Remover>> = std::sync::Mutex::new(None);

/// Removes the workspace folder `base` on the background thread (started
/// if need be); its `owner.pid` goes last, so a cassist killed meanwhile
/// leaves a folder [`remove_stale`] recognizes.
fn remove_later(base: PathBuf) {
    in_background(Removal::Workspace(base));
}

/// [`remove_stale`] on the background thread: the folders that killed runs
/// left (of any project of the user's) need not hold up this run's start;
/// cassist waits for them before it exits ([`finish_removals`]).
pub fn remove_stale_in_background(parent: &Path) {
    in_background(Removal::Stale(parent.to_path_buf()));
}

fn in_background(job: Removal) {
    let remove = |job: Removal| match job {
        Removal::Workspace(base) => {
            for e in std::fs::read_dir(&base).into_iter().flatten().flatten() {
                if e.file_name() != OWNER {
                    match e.file_type() {
                        Ok(t) if t.is_dir() => remove_tree(&e.path()),
                        _ => {
                            let _ = std::fs::remove_file(e.path());
                        }
                    }
                }
            }
            remove_tree(&base);
        }
        Removal::Stale(parent) => {
            remove_stale(&parent);
        }
    };
    let mut remover = REMOVER.lock().unwrap_or_else(|e| e.into_inner());
    if remover.is_none() {
        let (tx, rx) = std::sync::mpsc::channel::<Removal>();
        let spawned = std::thread::Builder::new().name("cassist-remove".into()).spawn(move || {
            for job in rx {
                remove(job);
            }
        });
        if let Ok(handle) = spawned {
            *remover = Some((tx, handle));
        }
    }
    let unsent = match remover.as_ref() {
        Some((tx, _)) => tx.send(job).err().map(|e| e.0),
        None => Some(job),
    };
    if let Some(job) = unsent {
        remove(job);
    }
}

/// Waits until every workspace given to [`Workspace::remove_in_background`]
/// (and every sweep of [`remove_stale_in_background`]) is removed (before
/// cassist exits).
pub fn finish_removals() {
    let remover = REMOVER.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some((tx, handle)) = remover {
        drop(tx);
        let _ = handle.join();
    }
}

const OWNER: &str = "owner.pid";
/// The prefix of a process's folder of integration layers ([`layers_home`]).
const LAYERS: &str = "layers-";
/// The marker of a kept workspace ([`KeptMarker`]).
const KEPT: &str = "kept";
/// Where a kept workspace's tree is.
const TREE: &str = "tree";

/// What a kept workspace's marker says: whose task it was.
#[derive(serde::Serialize, serde::Deserialize)]
struct KeptMarker {
    task: String,
    root: PathBuf,
}
/// Copy mode: where the agent's result waits while acceptance runs on a
/// throw-away copy of it (or the build on one of the user's tree).
const SET_ASIDE: &str = "agent-result";

/// The read-only layers under a writable one, top first, as overlayfs
/// shows them merged: an entry of a higher layer hides the same path
/// below; a whiteout (a 0/0 character device) deletes it; an opaque folder
/// hides the folders of the same path below.
struct Lowers<'a> {
    layers: &'a [PathBuf],
}

/// What [`Lowers::walk`] calls for each entry: `(rel, real, is_dir, from)`;
/// a folder is entered when it returns true.
type Visit<'v> = dyn FnMut(&Path, &Path, bool, &[&Path]) -> bool + 'v;

/// One path in the merged view.
enum Merged<'a> {
    Absent,
    /// A file (or symlink, or anything not a folder), in this layer.
    Entry(&'a Path),
    /// A folder: the layers that show their part of it, top first.
    Folder(Vec<&'a Path>),
}

impl<'a> Lowers<'a> {
    fn new(layers: &'a [PathBuf]) -> Lowers<'a> {
        Lowers { layers }
    }

    /// `rel_dir/name` seen through `layers` (those showing `rel_dir`).
    fn step(rel: &Path, layers: &[&'a Path]) -> Merged<'a> {
        let mut folders = Vec::new();
        for layer in layers {
            let p = layer.join(rel);
            let Ok(m) = std::fs::symlink_metadata(&p) else { continue };
            if m.is_dir() {
                folders.push(*layer);
                if is_opaque(&p) {
                    break;
                }
            } else if !folders.is_empty() || (m.file_type().is_char_device() && m.rdev() == 0) {
                // Hidden by a folder above, or deleted.
                break;
            } else {
                return Merged::Entry(layer);
            }
        }
        if folders.is_empty() { Merged::Absent } else { Merged::Folder(folders) }
    }

    fn merged(&self, rel: &Path) -> Merged<'a> {
        let mut layers: Vec<&'a Path> = self.layers.iter().map(PathBuf::as_path).collect();
        let mut at = PathBuf::new();
        let mut found = Merged::Folder(layers.clone());
        for name in rel.components() {
            at.push(name);
            found = Lowers::step(&at, &layers);
            match &found {
                Merged::Folder(f) => layers = f.clone(),
                _ => layers = Vec::new(),
            }
        }
        if rel.as_os_str().is_empty() { Merged::Folder(layers) } else { found }
    }

    /// Where the entry the lowers show at `rel` really is (a file's layer,
    /// or the topmost part of a folder); `None` when they show nothing.
    fn path(&self, rel: &Path) -> Option<PathBuf> {
        match self.merged(rel) {
            Merged::Absent => None,
            Merged::Entry(layer) => Some(layer.join(rel)),
            Merged::Folder(f) => f.first().map(|layer| layer.join(rel)),
        }
    }

    /// The entries but folders below folder `rel_dir` in the merged view:
    /// their relative path, and where each really is.
    fn files_below(&self, rel_dir: &Path) -> Vec<(PathBuf, PathBuf)> {
        let mut out = Vec::new();
        self.walk(rel_dir, &mut |rel, real, is_dir, _| {
            if !is_dir {
                out.push((rel.to_path_buf(), real.to_path_buf()));
            }
            true
        });
        out
    }

    /// Visits the merged view below folder `rel_dir`, a folder before what
    /// it holds: `visit(rel, real, is_dir, from)` for each entry, where
    /// `real` is where it really is (a folder: its topmost part) and `from`
    /// the layers that show it, top first. A folder is entered when
    /// `visit` returns true.
    fn walk(&self, rel_dir: &Path, visit: &mut Visit<'_>) {
        let Merged::Folder(top) = self.merged(rel_dir) else { return };
        let mut stack = vec![(rel_dir.to_path_buf(), top)];
        while let Some((dir, layers)) = stack.pop() {
            let mut names = std::collections::BTreeSet::new();
            for layer in &layers {
                for e in std::fs::read_dir(layer.join(&dir)).into_iter().flatten().flatten() {
                    names.insert(e.file_name());
                }
            }
            for name in names {
                let rel = dir.join(&name);
                match Lowers::step(&rel, &layers) {
                    Merged::Absent => {}
                    Merged::Entry(layer) => {
                        visit(&rel, &layer.join(&rel), false, &[layer]);
                    }
                    Merged::Folder(f) => {
                        if visit(&rel, &f[0].join(&rel), true, &f) {
                            stack.push((rel, f));
                        }
                    }
                }
            }
        }
    }
}

/// Copies the tree `from` to `to` (which must not exist): folders, files
/// with their modes, symlinks as symlinks; nothing else.
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    for entry in walkdir::WalkDir::new(from) {
        let entry = entry.map_err(std::io::Error::other)?;
        let rel = entry.path().strip_prefix(from).unwrap_or(Path::new(""));
        let dest = to.join(rel);
        let ft = entry.file_type();
        if ft.is_dir() {
            std::fs::create_dir(&dest)?;
            let mode = entry.metadata().map_err(std::io::Error::other)?.mode();
            std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(mode & 0o7777))?;
        } else {
            copy_entry(entry.path(), &dest, &entry.metadata().map_err(std::io::Error::other)?)?;
        }
    }
    Ok(())
}

/// A file of the project as copy mode copied it (or setup left it).
struct Copied {
    /// blake3 of its bytes (a symlink: of its target).
    hash: [u8; 32],
    /// Its type and permission bits.
    mode: u32,
    size: u64,
}

/// Every project file and symlink under `dir` (anything else is left out,
/// never opened), hashed as a stream: a large file costs no memory.
fn hash_files(dir: &Path) -> std::io::Result<HashMap<String, Copied>> {
    let mut copied = HashMap::new();
    for (rel, meta) in project_files(dir) {
        if let Some(c) = copied_of(&dir.join(&rel), &meta)? {
            copied.insert(rel, c);
        }
    }
    Ok(copied)
}

/// A file or symlink at `path` (whose lstat is `meta`) as copied.
fn copied_of(path: &Path, meta: &std::fs::Metadata) -> std::io::Result<Option<Copied>> {
    Ok(entry::hash_entry(path, meta)?.map(|hash| Copied {
        hash,
        mode: meta.mode() & TYPE_AND_PERMISSIONS,
        size: meta.len(),
    }))
}

/// Where a project's workspaces are made: outside the project (overlayfs
/// refuses an upper dir inside its lower dir), under the temp folder, per
/// user.
pub fn parent_dir(root: &Path) -> PathBuf {
    let uid = nix::unistd::getuid();
    let mut dir = std::env::temp_dir().join(format!("cassist-{uid}"));
    if dir.starts_with(root) {
        dir = PathBuf::from("/tmp").join(format!("cassist-{uid}"));
    }
    dir
}

/// Where this process keeps its integration layers under `parent`.
pub fn layers_home(parent: &Path) -> PathBuf {
    parent.join(format!("{LAYERS}{}", std::process::id()))
}

/// Removes this process's folder of integration layers once nothing uses
/// them (the end of a run).
pub fn remove_layers(parent: &Path) {
    remove_tree(&layers_home(parent));
}

/// Removes the workspaces under `parent` whose cassist process is gone (a
/// run killed with SIGKILL cannot clean up after itself), and such a
/// process's integration layers, but the kept workspaces
/// ([`Workspace::keep`]). Returns how many.
pub fn remove_stale(parent: &Path) -> usize {
    let mut removed = 0;
    let Ok(rd) = std::fs::read_dir(parent) else { return 0 };
    for e in rd.flatten() {
        let dir = e.path();
        if dir.join(KEPT).exists() {
            continue;
        }
        let layers_of = e.file_name().to_str().and_then(|n| n.strip_prefix(LAYERS)).and_then(|p| p.parse::<i32>().ok());
        let owner = || std::fs::read_to_string(dir.join(OWNER)).ok().and_then(|s| s.trim().parse::<i32>().ok());
        let Some(pid) = layers_of.or_else(owner) else {
            continue;
        };
        let alive = cassist_core::fsx::cassist_alive(pid);
        if !alive {
            remove_tree(&dir);
            removed += 1;
        }
    }
    removed
}

/// Removes the workspaces under `parent` kept for a task of the project
/// at `root` ([`Workspace::keep`]; the caller holds the project's lock,
/// so no run of it is keeping one now). Returns how many, and the bytes
/// they held.
pub fn remove_kept(parent: &Path, root: &Path) -> (usize, u64) {
    let (mut removed, mut bytes) = (0, 0);
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let Ok(rd) = std::fs::read_dir(parent) else { return (0, 0) };
    for e in rd.flatten() {
        let dir = e.path();
        let Some(marker) =
            std::fs::read(dir.join(KEPT)).ok().and_then(|bytes| serde_json::from_slice::<KeptMarker>(&bytes).ok())
        else {
            continue;
        };
        if marker.root != root {
            continue;
        }
        let size: u64 = walkdir::WalkDir::new(&dir)
            .into_iter()
            .flatten()
            .filter_map(|e| e.metadata().ok())
            .map(|m| m.blocks() * 512)
            .sum();
        remove_tree(&dir);
        if !dir.exists() {
            removed += 1;
            bytes += size;
        }
    }
    (removed, bytes)
}

/// Removes a folder tree, including the kernel's unreadable overlay work
/// folders (mode 000, nested in a volatile overlay's: `work/incompat/
/// volatile`).
pub fn remove_tree(path: &Path) {
    if std::fs::remove_dir_all(path).is_ok() || !path.exists() {
        return;
    }
    // Each folder is opened up before it is read (a walker reads a
    // folder before it yields it); no link is followed.
    let mut dirs = vec![path.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(e.path());
            }
        }
    }
    let _ = std::fs::remove_dir_all(path);
}

/// A file's type and permission bits (special bits included) of a mode.
const TYPE_AND_PERMISSIONS: u32 = cassist_core::changes::S_IFMT | 0o7777;

fn insert_change(out: &mut BTreeMap<String, Change>, c: Change) {
    out.insert(c.path.clone(), c);
}

fn sanitize(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '_' }).take(60).collect()
}

fn is_opaque(dir: &Path) -> bool {
    for name in ["user.overlay.opaque", "trusted.overlay.opaque"] {
        let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else { return false };
        let Ok(attr) = std::ffi::CString::new(name) else { continue };
        let mut buf = [0u8; 4];
        // SAFETY: valid C strings and buffer.
        let n = unsafe { libc::lgetxattr(path.as_ptr(), attr.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if n > 0 && buf[0] == b'y' {
            return true;
        }
    }
    false
}

/// Entries below `dir` but folders (relative to `root`), not following
/// symlinks.
fn files_below(dir: &Path, root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in walkdir::WalkDir::new(dir).into_iter().flatten() {
        if entry.file_type().is_dir() {
            continue;
        }
        if let Ok(rel) = entry.path().strip_prefix(root) {
            out.push(rel.to_path_buf());
        }
    }
    out
}

/// A deleted and an added file with the same content are a rename.
fn detect_renames(changes: Vec<Change>) -> Vec<Change> {
    let mut deleted_by_content: HashMap<Vec<u8>, usize> = HashMap::new();
    for (i, c) in changes.iter().enumerate() {
        if c.kind == ChangeKind::Deleted
            && c.hazard.is_none()
            && let Some(old) = &c.old
            && !old.is_empty()
        {
            deleted_by_content.entry(old.clone()).or_insert(i);
        }
    }
    let mut drop = vec![false; changes.len()];
    let mut out = changes.clone();
    for (i, c) in changes.iter().enumerate() {
        if c.kind != ChangeKind::Added || c.hazard.is_some() {
            continue;
        }
        let Some(new) = &c.new else { continue };
        if let Some(j) = deleted_by_content.remove(new) {
            out[i].kind = ChangeKind::Renamed { from: changes[j].path.clone() };
            out[i].old = changes[j].old.clone();
            drop[j] = true;
        }
    }
    out.into_iter().zip(drop).filter(|(_, d)| !d).map(|(c, _)| c).collect()
}

/// Copies the project's files and symlinks into `to` (anything else is
/// left out, never opened), contents streamed.
fn copy_project(root: &Path, to: &Path) -> std::io::Result<()> {
    for (rel, meta) in project_files(root) {
        let src = root.join(&rel);
        let dst = to.join(&rel);
        let kind = entry::kind(&meta);
        if !matches!(kind, Kind::File | Kind::Symlink) {
            continue;
        }
        if let Some(parent) = dst.parent() {
            std::fs::create_dir_all(parent)?;
        }
        copy_entry(&src, &dst, &meta)?;
    }
    Ok(())
}

/// Copies a file (contents streamed, permissions kept) or a symlink (as a
/// symlink) at `src`, whose lstat is `meta`, to the new path `dst`;
/// anything else is left out, never opened.
fn copy_entry(src: &Path, dst: &Path, meta: &std::fs::Metadata) -> std::io::Result<()> {
    match entry::kind(meta) {
        Kind::Symlink => std::os::unix::fs::symlink(std::fs::read_link(src)?, dst),
        Kind::File => {
            std::fs::copy(src, dst)?;
            std::fs::set_permissions(dst, std::fs::Permissions::from_mode(meta.mode() & 0o7777))
        }
        _ => Ok(()),
    }
}

/// Whether a folder of a layer holds anything but folders and whiteouts
/// (what deleting files leaves): something was written below it.
fn writes_below(dir: &Path) -> bool {
    walkdir::WalkDir::new(dir)
        .min_depth(1)
        .into_iter()
        .flatten()
        .any(|e| !e.file_type().is_dir() && !e.metadata().is_ok_and(|m| entry::is_whiteout(&m)))
}

/// Whether `rel` leads from `root` through folders only (no symlink on
/// the way: what it names is inside `root`).
fn plain_path(root: &Path, rel: &str) -> bool {
    let mut at = root.to_path_buf();
    let parts: Vec<&str> = rel.split('/').collect();
    parts[..parts.len() - 1].iter().all(|part| {
        at.push(part);
        std::fs::symlink_metadata(&at).is_ok_and(|m| m.is_dir())
    })
}

/// `.gitignore` rules of the project, asked path by path.
struct IgnoreCheck {
    root: PathBuf,
    /// Folders that hold the files, most recent first (an overlay's upper
    /// dir, then the project); paths in them mirror the project's.
    layers: Vec<PathBuf>,
    cache: std::cell::RefCell<HashMap<PathBuf, Option<ignore::gitignore::Gitignore>>>,
}

impl IgnoreCheck {
    fn new(root: &Path, layers: Vec<PathBuf>) -> IgnoreCheck {
        IgnoreCheck { root: root.to_path_buf(), layers, cache: Default::default() }
    }

    /// The `.gitignore` of a project folder as the workspace sees it.
    fn gitignore_file(&self, dir: &Path) -> Option<PathBuf> {
        let rel = dir.strip_prefix(&self.root).ok()?;
        for layer in &self.layers {
            let f = layer.join(rel).join(".gitignore");
            match std::fs::symlink_metadata(&f) {
                Ok(m) if m.is_file() => return Some(f),
                // A whiteout: deleted in the workspace.
                Ok(m) if m.file_type().is_char_device() => return None,
                _ => {}
            }
        }
        None
    }

    fn matcher(&self, dir: &Path) -> Option<ignore::gitignore::Gitignore> {
        let mut cache = self.cache.borrow_mut();
        cache
            .entry(dir.to_path_buf())
            .or_insert_with(|| {
                let mut b = ignore::gitignore::GitignoreBuilder::new(dir);
                let mut any = false;
                if let Some(file) = self.gitignore_file(dir) {
                    any |= b.add(&file).is_none();
                }
                if dir == self.root {
                    let exclude = self.root.join(".git/info/exclude");
                    if exclude.is_file() {
                        any |= b.add(&exclude).is_none();
                    }
                }
                if any { b.build().ok() } else { None }
            })
            .clone()
    }

    /// Whether `rel` (a file, or a folder when `is_dir`) is ignored by any
    /// `.gitignore` on its way.
    fn ignored(&self, rel: &Path, is_dir: bool) -> bool {
        let full = self.root.join(rel);
        let mut dirs: Vec<PathBuf> =
            full.ancestors().skip(1).take_while(|d| d.starts_with(&self.root)).map(Path::to_path_buf).collect();
        dirs.reverse();
        let mut ignored = false;
        for d in dirs {
            if let Some(m) = self.matcher(&d) {
                match m.matched_path_or_any_parents(&full, is_dir) {
                    ignore::Match::Ignore(_) => ignored = true,
                    ignore::Match::Whitelist(_) => ignored = false,
                    ignore::Match::None => {}
                }
            }
        }
        ignored
    }
}

/// An integration layer: exactly one accepted change (or several merged),
/// as an overlay layer: its written files, whiteouts for what it deletes.
/// Made once, never changed; workspaces started while it is pending stack
/// it over the project ([`Workspace::create_over`]). Removed when the last
/// workspace using it (and the run's list of pending layers) lets it go.
#[derive(Debug)]
pub struct IntegrationLayer {
    dir: PathBuf,
    /// The paths it writes or deletes.
    paths: std::collections::BTreeSet<String>,
}

impl IntegrationLayer {
    /// Writes `changes` (applied in order: a later change of a path wins)
    /// into a new layer under `parent`. O(change).
    /// The layers live in `<parent>/layers-<pid>/` ([`layers_home`]),
    /// whose name says whose they are: a run killed before removing them
    /// leaves them to the next run's [`remove_stale`].
    pub fn create(parent: &Path, name: &str, changes: &[&ChangeSet]) -> std::io::Result<IntegrationLayer> {
        IntegrationLayer::merge(parent, name, changes, &[])
    }

    /// [`create`](Self::create) of the changes that the layers `from`
    /// (newest first) hold: a file is hard-linked from the newest of them
    /// that has it (no new inode, no copy; layers never change), written
    /// where it cannot be.
    pub fn merge(
        parent: &Path,
        name: &str,
        changes: &[&ChangeSet],
        from: &[&IntegrationLayer],
    ) -> std::io::Result<IntegrationLayer> {
        let home = layers_home(parent);
        std::fs::create_dir_all(&home)?;
        let dir = tempfile::Builder::new().prefix(&format!("{}-", sanitize(name))).tempdir_in(&home)?.keep();
        let mut layer = IntegrationLayer { dir, paths: Default::default() };
        for (path, op) in fold(changes) {
            layer.paths.insert(path.clone());
            let target = layer.dir.join(&path);
            // What stands in this layer where a folder on the way must be:
            // a file of an earlier change (it hides the folder below, so
            // a deletion under it is done already), or a whiteout.
            let blocking = Path::new(&path)
                .ancestors()
                .skip(1)
                .filter(|a| !a.as_os_str().is_empty())
                .find(|a| std::fs::symlink_metadata(layer.dir.join(a)).is_ok_and(|m| !m.is_dir()));
            if let Some(at) = blocking {
                let at = layer.dir.join(at);
                if op.is_none() && !std::fs::symlink_metadata(&at).is_ok_and(|m| entry::is_whiteout(&m)) {
                    continue;
                }
                std::fs::remove_file(&at)?;
            }
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)?;
            }
            match std::fs::symlink_metadata(&target) {
                Ok(m) if m.is_dir() => remove_tree(&target),
                Ok(_) => std::fs::remove_file(&target)?,
                Err(_) => {}
            }
            let source = from.iter().find(|l| l.paths.contains(&path)).map(|l| l.dir.join(&path));
            if source.is_some_and(|src| std::fs::hard_link(src, &target).is_ok()) {
                continue;
            }
            match op {
                Some((bytes, mode)) => write_entry(&target, bytes, mode)?,
                None => whiteout(&target)?,
            }
        }
        Ok(layer)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The paths it writes or deletes.
    pub fn paths(&self) -> &std::collections::BTreeSet<String> {
        &self.paths
    }
}

impl Drop for IntegrationLayer {
    fn drop(&mut self) {
        remove_tree(&self.dir);
    }
}

/// What `changes`, applied in order, leave at each path they touch: the
/// new content and mode, or `None` (deleted).
pub fn fold<'a>(changes: &[&'a ChangeSet]) -> BTreeMap<String, Option<(&'a [u8], u32)>> {
    let mut out = BTreeMap::new();
    for set in changes {
        for c in &set.changes {
            if let ChangeKind::Renamed { from } = &c.kind {
                out.insert(from.clone(), None);
            }
            out.insert(c.path.clone(), c.new.as_deref().map(|b| (b, c.mode)));
        }
    }
    out
}

/// Writes a file (or a symlink, by the mode) with `bytes`, without special
/// bits.
fn write_entry(target: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    if mode & cassist_core::changes::S_IFMT == cassist_core::changes::S_IFLNK {
        let to = std::ffi::OsStr::from_bytes(bytes);
        return std::os::unix::fs::symlink(to, target);
    }
    std::fs::write(target, bytes)?;
    std::fs::set_permissions(target, std::fs::Permissions::from_mode(mode & 0o777))
}

/// What overlayfs takes for a deleted entry: a 0/0 character device.
fn whiteout(target: &Path) -> std::io::Result<()> {
    let c = std::ffi::CString::new(target.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: a valid path.
    if unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o600, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Writes the layer at `dir` (files, whiteouts) over the tree at `to`:
/// copy mode's view of integration layers. O(layer).
fn apply_layer(dir: &Path, to: &Path) -> std::io::Result<()> {
    for e in walkdir::WalkDir::new(dir).min_depth(1) {
        let e = e.map_err(std::io::Error::other)?;
        let Ok(rel) = e.path().strip_prefix(dir) else { continue };
        let dest = to.join(rel);
        let meta = std::fs::symlink_metadata(e.path())?;
        let there = std::fs::symlink_metadata(&dest).ok();
        if meta.is_dir() {
            if there.as_ref().is_some_and(|m| !m.is_dir()) {
                std::fs::remove_file(&dest)?;
            }
            if there.as_ref().is_none_or(|m| !m.is_dir()) {
                std::fs::create_dir(&dest)?;
            }
            continue;
        }
        match there {
            Some(m) if m.is_dir() => remove_tree(&dest),
            Some(_) => std::fs::remove_file(&dest)?,
            None => {}
        }
        if !entry::is_whiteout(&meta) {
            copy_entry(e.path(), &dest, &meta)?;
        }
    }
    Ok(())
}

/// What an integration wrote.
#[derive(Debug, Default)]
pub struct Integrated {
    pub written: Vec<String>,
    pub deleted: Vec<String>,
}

/// Why integration did not happen. The user's tree is unchanged.
#[derive(Debug)]
pub enum IntegrateError {
    /// Files the user changed since the workspace was made.
    Conflict(Vec<String>),
    /// Changes that are never written, whatever the review said (special
    /// files and bits, symlinks leaving the project, names that are not
    /// UTF-8, unread files): each with why.
    Refused(Vec<String>),
    Io(String),
}

impl std::fmt::Display for IntegrateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IntegrateError::Conflict(files) => {
                write!(f, "conflict: changed in the project meanwhile: {}", files.join(", "))
            }
            IntegrateError::Refused(why) => write!(f, "refused to write {}", why.join(", ")),
            IntegrateError::Io(e) => write!(f, "cannot write the change: {e}"),
        }
    }
}

/// Why `c` must never be written into a tree, whatever the review said:
/// [`Change::unsafe_reason`], or a path below `.git/` or `.cassist/`.
pub fn never_written(c: &Change) -> Option<String> {
    c.unsafe_reason().or_else(|| {
        let from = match &c.kind {
            ChangeKind::Renamed { from } => Some(from.as_str()),
            _ => None,
        };
        std::iter::once(c.path.as_str())
            .chain(from)
            .find(|p| is_reserved(p))
            .map(|p| format!("`{p}` lies in git's or cassist's own folder"))
    })
}

/// The paths of `changes` the project's tree at `root` no longer shows as
/// the task that made them saw it when it started at `started` ([`start_stamp`]),
/// sorted: O(change), no other file is looked at. A path is a conflict
/// when:
/// - it exists and its ctime is at or after the start (the user, or
///   anything else, changed it since; nothing sets a ctime back);
/// - the change expects it (a modified, deleted or renamed file) and it
///   is gone;
/// - it is a folder the change replaces by a file, and the folder holds a
///   file the change does not remove;
/// - a file stands where the change needs a folder on its way.
///
/// A path `in_view` says an integration layer under the task's workspace
/// (not yet in the tree) changed is a conflict only when it exists in the
/// tree with a ctime at or after the start.
pub fn conflicts(root: &Path, changes: &ChangeSet, started: i128, in_view: &dyn Fn(&str) -> bool) -> Vec<String> {
    // Paths the change set removes (a folder may give way to a file).
    let removed: std::collections::HashSet<&str> = changes
        .changes
        .iter()
        .flat_map(|c| match &c.kind {
            ChangeKind::Deleted => vec![c.path.as_str()],
            ChangeKind::Renamed { from } => vec![from.as_str()],
            _ => Vec::new(),
        })
        .collect();
    let changed_since = |m: &std::fs::Metadata| Stamp::of(m).ctime_ns >= started;
    let mut out = Vec::new();
    let mut check = |rel: &str, expected: bool| {
        let conflict = match std::fs::symlink_metadata(root.join(rel)) {
            Ok(m) if changed_since(&m) => true,
            _ if in_view(rel) => false,
            // A folder the change replaces by a file: fine when every file
            // it holds is removed by the change too.
            Ok(m) if m.is_dir() => {
                !files_below(&root.join(rel), root).iter().all(|p| p.to_str().is_some_and(|p| removed.contains(p)))
            }
            Ok(_) => false,
            Err(_) if expected => true,
            // Absent, as the change expects: a file on its way that stands
            // where a folder must be is the user's.
            Err(_) => Path::new(rel)
                .ancestors()
                .skip(1)
                .filter(|a| !a.as_os_str().is_empty())
                .find_map(|a| std::fs::symlink_metadata(root.join(a)).ok().map(|m| (a, m)))
                .is_some_and(|(a, m)| !m.is_dir() && !a.to_str().is_some_and(|a| removed.contains(a))),
        };
        if conflict {
            out.push(rel.to_owned());
        }
    };
    for c in &changes.changes {
        check(&c.path, !matches!(c.kind, ChangeKind::Added | ChangeKind::Renamed { .. }));
        if let ChangeKind::Renamed { from } = &c.kind {
            check(from, true);
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Begins writing `changes` into the user's tree at `root`, uncommitted,
/// as a journaled transaction ([`cassist_core::journal`]): the files are written
/// when this returns, and the transaction stays open until the caller
/// commits it (with the task's lock line) or rolls it back; a killed
/// cassist's open transaction is rolled back by the next command.
///
/// A change integration must never write ([`never_written`]) refuses the
/// whole set; then the changed paths are checked against the task's start
/// ([`conflicts`]): one changed meanwhile is a conflict and nothing is
/// written. Modes are written without special bits.
pub fn integrate(root: &Path, changes: &ChangeSet, started: i128) -> Result<journal::Open, IntegrateError> {
    let refused: Vec<String> =
        changes.changes.iter().filter_map(|c| never_written(c).map(|why| format!("{}: {why}", c.path))).collect();
    if !refused.is_empty() {
        return Err(IntegrateError::Refused(refused));
    }
    let conflicts = conflicts(root, changes, started, &|_| false);
    if !conflicts.is_empty() {
        return Err(IntegrateError::Conflict(conflicts));
    }
    let io = |e: std::io::Error| IntegrateError::Io(e.to_string());
    let mut transaction = journal::Transaction::new(root);
    for c in &changes.changes {
        if let ChangeKind::Renamed { from } = &c.kind {
            transaction.delete(from);
        }
        match &c.new {
            Some(bytes) => transaction.write(&c.path, bytes, c.mode).map_err(io)?,
            None => transaction.delete(&c.path),
        }
    }
    transaction.begin().map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    /// Writes `files` (path → content; `None`: a whiteout) under `dir`.
    fn layer(dir: &Path, files: &[(&str, Option<&str>)]) -> bool {
        for (rel, content) in files {
            let p = dir.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            match content {
                Some(c) => std::fs::write(&p, c).unwrap(),
                None => {
                    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
                    // SAFETY: a valid path; a 0/0 character device is what
                    // overlayfs writes for a deleted entry.
                    if unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o600, 0) } != 0 {
                        return false;
                    }
                }
            }
        }
        true
    }

    fn opaque(dir: &Path) -> bool {
        let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
        // SAFETY: valid C strings and value.
        unsafe { libc::setxattr(c.as_ptr(), c"user.overlay.opaque".as_ptr(), c"y".as_ptr().cast(), 1, 0) == 0 }
    }

    #[test]
    // A skip is said to the test harness's output.
    #[allow(clippy::disallowed_macros)]
    fn lowers_merge_as_overlayfs_does() {
        let tmp = tempfile::tempdir().unwrap();
        let (top, bottom) = (tmp.path().join("top"), tmp.path().join("bottom"));
        layer(&bottom, &[("a.txt", Some("a0")), ("gone.txt", Some("g")), ("d/x", Some("x0")), ("o/old", Some("o"))]);
        layer(&bottom, &[("f/inner", Some("i")), ("keep/k", Some("k"))]);
        if !layer(&top, &[("a.txt", Some("a1")), ("gone.txt", None), ("d/y", Some("y1")), ("o/new", Some("n"))])
            || !layer(&top, &[("f", Some("a file over a folder")), ("keep/k2", Some("k2"))])
            || !opaque(&top.join("o"))
        {
            eprintln!("SKIPPED: cannot make whiteouts or opaque folders here");
            return;
        }
        let layers = vec![top.clone(), bottom.clone()];
        let l = Lowers::new(&layers);
        assert_eq!(l.path(Path::new("a.txt")), Some(top.join("a.txt")));
        assert_eq!(l.path(Path::new("gone.txt")), None, "a whiteout deletes");
        assert_eq!(l.path(Path::new("d/x")), Some(bottom.join("d/x")), "folders merge");
        assert_eq!(l.path(Path::new("d/y")), Some(top.join("d/y")));
        assert_eq!(l.path(Path::new("o/old")), None, "an opaque folder hides the one below");
        assert_eq!(l.path(Path::new("f")), Some(top.join("f")));
        assert_eq!(l.path(Path::new("f/inner")), None, "a file hides a folder below");
        assert_eq!(l.path(Path::new("nowhere")), None);
        let mut below: Vec<(String, PathBuf)> =
            l.files_below(Path::new("")).into_iter().map(|(r, p)| (r.to_string_lossy().into_owned(), p)).collect();
        below.sort();
        let want: Vec<(String, PathBuf)> = [
            ("a.txt", &top),
            ("d/x", &bottom),
            ("d/y", &top),
            ("f", &top),
            ("keep/k", &bottom),
            ("keep/k2", &top),
            ("o/new", &top),
        ]
        .iter()
        .map(|(r, l)| ((*r).to_owned(), l.join(r)))
        .collect();
        assert_eq!(below, want);
    }

    fn change(path: &str, kind: ChangeKind, new: Option<&str>) -> Change {
        Change {
            path: path.into(),
            kind,
            old: None,
            new: new.map(|t| t.as_bytes().to_vec()),
            mode: cassist_core::changes::S_IFREG | 0o644,
            hazard: None,
        }
    }

    /// Two changes in one layer (as merging makes): the view over the tree
    /// is the tree with both applied in order, in overlay's terms and as
    /// copy mode writes it.
    /// A merge of layers links their files (same inode, nothing copied)
    /// and shows what the changes in order show.
    #[test]
    fn merged_layers_link_their_files_and_show_the_changes_in_order() {
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        if !layer(&root, &[("a.txt", Some("a0")), ("gone.txt", Some("g"))]) {
            return;
        }
        let parent = tmp.path().join("parent");
        let first = ChangeSet {
            changes: vec![
                change("a.txt", ChangeKind::Modified, Some("a1")),
                change("new/n.txt", ChangeKind::Added, Some("n")),
                change("keep/k.txt", ChangeKind::Added, Some("k")),
            ],
        };
        let second = ChangeSet {
            changes: vec![
                change("gone.txt", ChangeKind::Deleted, None),
                change("new/n.txt", ChangeKind::Modified, Some("n2")),
            ],
        };
        let l1 = IntegrationLayer::create(&parent, "one", &[&first]).unwrap();
        let l2 = IntegrationLayer::create(&parent, "two", &[&second]).unwrap();
        let merged = IntegrationLayer::merge(&parent, "merged", &[&first, &second], &[&l2, &l1]).unwrap();
        let ino = |dir: &Path, rel: &str| std::fs::symlink_metadata(dir.join(rel)).unwrap().ino();
        assert_eq!(ino(merged.dir(), "new/n.txt"), ino(l2.dir(), "new/n.txt"), "not linked from the newest layer");
        assert_eq!(ino(merged.dir(), "keep/k.txt"), ino(l1.dir(), "keep/k.txt"));
        assert_eq!(ino(merged.dir(), "a.txt"), ino(l1.dir(), "a.txt"));
        drop((l1, l2));
        let dirs = vec![merged.dir().to_path_buf(), root.clone()];
        let mut seen: Vec<(String, String)> = Lowers::new(&dirs)
            .files_below(Path::new(""))
            .into_iter()
            .map(|(rel, real)| (rel.to_string_lossy().into_owned(), std::fs::read_to_string(real).unwrap()))
            .collect();
        seen.sort();
        let want = [("a.txt", "a1"), ("keep/k.txt", "k"), ("new/n.txt", "n2")];
        let want: Vec<(String, String)> = want.iter().map(|(p, t)| ((*p).to_owned(), (*t).to_owned())).collect();
        assert_eq!(seen, want, "the merged layer outlives its sources and shows the changes in order");
    }

    #[test]
    fn an_integration_layer_shows_its_changes_over_the_tree() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        if !layer(
            &root,
            &[("a.txt", Some("a0")), ("gone.txt", Some("g")), ("docs/api.md", Some("api")), ("f", Some("f"))],
        ) {
            return;
        }
        let first = ChangeSet {
            changes: vec![
                change("a.txt", ChangeKind::Modified, Some("a1")),
                change("gone.txt", ChangeKind::Deleted, None),
                change("new/n.txt", ChangeKind::Added, Some("n")),
            ],
        };
        let second = ChangeSet {
            changes: vec![
                change("docs", ChangeKind::Added, Some("now a file")),
                change("docs/api.md", ChangeKind::Deleted, None),
                change("f", ChangeKind::Deleted, None),
                change("f/inner", ChangeKind::Added, Some("i")),
                change("new/n.txt", ChangeKind::Modified, Some("n2")),
            ],
        };
        let l = match IntegrationLayer::create(&tmp.path().join("parent"), "t", &[&first, &second]) {
            Ok(l) => l,
            Err(e) => panic!("cannot make an integration layer here: {e}"),
        };
        let want = [("a.txt", "a1"), ("docs", "now a file"), ("f/inner", "i"), ("new/n.txt", "n2")];
        let dirs = vec![l.dir().to_path_buf(), root.clone()];
        let view = Lowers::new(&dirs);
        let mut seen: Vec<(String, String)> = view
            .files_below(Path::new(""))
            .into_iter()
            .map(|(rel, real)| (rel.to_string_lossy().into_owned(), std::fs::read_to_string(real).unwrap()))
            .collect();
        seen.sort();
        let want: Vec<(String, String)> = want.iter().map(|(p, t)| ((*p).to_owned(), (*t).to_owned())).collect();
        assert_eq!(seen, want);
        assert_eq!(l.paths().len(), 7);
        // Copy mode: written over a copy of the tree.
        apply_layer(l.dir(), &root).unwrap();
        let mut copied: Vec<(String, String)> = walkdir::WalkDir::new(&root)
            .into_iter()
            .flatten()
            .filter(|e| !e.file_type().is_dir())
            .map(|e| {
                let rel = e.path().strip_prefix(&root).unwrap().to_string_lossy().into_owned();
                (rel, std::fs::read_to_string(e.path()).unwrap())
            })
            .collect();
        copied.sort();
        assert_eq!(copied, want);
        let dir = l.dir().to_path_buf();
        drop(l);
        assert!(!dir.exists(), "a layer nothing uses is removed");
    }
}
