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
//!
//! The two modes are two implementations of one trait, `Backing`:
//! `overlay` and `copy`, chosen once, when the workspace is made
//! ([`Workspace::create_over`]); [`Workspace`] does what is the same in
//! both. Beside them: `probe` decides the mode a machine supports,
//! `wrapper` finds the program that runs the sandbox wrapper, `layers`
//! makes integration layers, `integration` writes a change into the user's
//! tree, `cleanup` removes workspaces (stale, kept, in the background),
//! `lowers` reads a stack of layers as overlayfs merges them, `ignored`
//! applies `.gitignore` and `tree` copies files.

mod cleanup;
mod copy;
mod ignored;
mod integration;
mod layers;
mod lowers;
mod overlay;
mod probe;
mod start;
#[cfg(test)]
mod test_support;
mod threeway;
mod tree;
mod wrapper;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::entry::{self, Reader, raw_path};
use cassist_core::changes::{Change, ChangeKind, ChangeSet};
use cassist_core::journal;
use cassist_core::limits::Limits;
use cassist_sandbox::process;
use cassist_sandbox::sandbox::{ExecSpec, Jail, Overlay};

pub use cleanup::{
    ORPHAN_GRACE, finish_removals, remove_kept, remove_orphaned_kept, remove_stale, remove_stale_in_background,
    remove_tree,
};
pub use integration::{IntegrateError, Integrated, integrate, never_written, start_stamp, write_merged};
pub use layers::{IntegrationLayer, fold, layers_home, remove_layers};
pub use probe::{detect_mode, forget_probe};
pub use threeway::{Held, PathConflict, SetError, merge_set, read_held};
pub use wrapper::wrapper_program;

use copy::CopyBacking;
use ignored::{IgnoreCheck, Literals};
use overlay::OverlayBacking;

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

/// Why a workspace, or an integration layer, could not do what it was
/// asked.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file system refused.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// An entry could not be read safely ([`crate::entry`]).
    #[error(transparent)]
    Entry(#[from] entry::Error),
    /// A folder could not be walked.
    #[error(transparent)]
    Walk(#[from] walkdir::Error),
    /// A command was to write a throw-away layer that was not begun
    /// ([`Workspace::begin_scratch`], [`Workspace::begin_build`]).
    #[error("no {} layer: begin_scratch or begin_build first", .0.dir_name())]
    NoThrowaway(Layer),
    /// A kept workspace's marker could not be written.
    #[error(transparent)]
    Marker(#[from] serde_json::Error),
    /// A path of a change holds a NUL byte, which no file name can.
    #[error(transparent)]
    Nul(#[from] std::ffi::NulError),
    /// The change touches more entries than `limits { files }` allows
    /// (counted; nothing past the limit was read).
    #[error(transparent)]
    TooManyFiles(#[from] cassist_core::limits::TooManyFiles),
}

/// Where a workspace is: set when it is made, the same for its whole life.
struct Site {
    /// The user's project (canonical).
    root: PathBuf,
    /// Holds the layers and their work dirs, or the copy.
    base: PathBuf,
    /// The integration layers it stacks over the project, newest first:
    /// the changes that had passed but were not yet in the tree when it
    /// was made ([`Workspace::create_over`]).
    stack: Vec<Arc<IntegrationLayer>>,
}

/// What a task's workspace does that depends on how it is made: the
/// overlay of layers ([`OverlayBacking`]) or the copy ([`CopyBacking`]).
/// It makes the task's view of the project (when it is made), says how a
/// command runs in it, makes and ends the throw-away layers, measures the
/// change set and keeps the view for the user. [`Workspace`] does the rest,
/// the same for both.
trait Backing: Send + Sync {
    /// Where the workspace is.
    fn site(&self) -> &Site;

    /// Where commands run: the project path itself (overlay) or the copy.
    fn dir(&self) -> &Path;

    /// The overlay a command that writes `layer` runs in (the build layer
    /// over `build_stack`); `None` where commands run in a plain folder,
    /// without namespaces. A throw-away layer must have been begun.
    fn overlay(&self, layer: Layer, build_stack: &[Arc<IntegrationLayer>]) -> Result<Option<Overlay>, Error>;

    /// Makes a fresh throw-away `layer` ([`Layer::Scratch`] or
    /// [`Layer::Build`], the latter over `build_stack`); none is in use.
    fn begin_throwaway(&mut self, layer: Layer, build_stack: &[Arc<IntegrationLayer>]) -> Result<(), Error>;

    /// Throws the throw-away layer away; nothing when there is none.
    fn end_throwaway(&mut self);

    /// The `setup` commands are done: what they left is where the change
    /// is measured from.
    fn setup_done(&mut self, literals: &Literals) -> Result<(), Error>;

    /// The scope names `literals`: such a file the project has (ignored by
    /// `.gitignore`, so left out of a walk) is part of the starting state.
    /// Called before anything runs in the workspace.
    fn name_literally(&mut self, literals: &Literals) -> Result<(), Error>;

    /// The folder a file cassist places for the agent is written into.
    fn place_dir(&self) -> PathBuf;

    /// The folders whose `.gitignore` files the change is judged by, as
    /// the agent left them: the workspace's own first, the project last.
    fn gitignore_layers(&self) -> Vec<PathBuf>;

    /// Puts every change the agent made into the scan's `found`; returns
    /// the ignored entries it wrote (a folder ending with `/`), which are
    /// not part of the change.
    fn changes(&self, scan: &mut Scan<'_>) -> Result<Vec<String>, Error>;

    /// Writes the task's view with its change into the new folder `tree`
    /// (see [`Workspace::keep`]), without what cassist `placed`; commands
    /// run there from now on.
    fn keep(&mut self, tree: &Path, placed: &[String]) -> Result<(), Error>;
}

/// What reading a workspace's change set works with ([`Backing::changes`]).
struct Scan<'a> {
    /// Reads each entry within the limits.
    reader: Reader,
    /// `.gitignore` as the agent left it.
    ignore: IgnoreCheck,
    /// The files the scope names literally.
    literals: &'a Literals,
    /// The changes found, by path.
    found: BTreeMap<String, Change>,
}

/// Where a kept workspace's tree is.
const TREE: &str = "tree";

/// One task's workspace.
pub struct Workspace {
    pub mode: Mode,
    /// The program that runs the sandbox wrapper ([`wrapper_program`]).
    exe: PathBuf,
    /// The user's project (canonical).
    pub root: PathBuf,
    /// Where commands run: the project path itself (overlay) or the copy.
    pub dir: PathBuf,
    /// What the mode does.
    backing: Box<dyn Backing>,
    /// When the task started ([`start_stamp`]): a change of the tree
    /// stamped at or after it is a conflict.
    started: i128,
    /// Paths cassist itself placed (instructions files): never part of the
    /// change set.
    placed: Vec<String>,
    /// What reading the change set may cost (the project's `limits`: the
    /// largest file, and the largest change, read).
    pub limits: Limits,
    keep: bool,
    /// The task's name (what a kept workspace's marker names).
    name: String,
    /// The layers the build stacks ([`begin_build_over`](Self::begin_build_over)).
    build_stack: Vec<Arc<IntegrationLayer>>,
    /// How many changes had landed when it was made (the runner's count).
    pub view: u64,
    /// The files the task's scope names literally: part of the change
    /// even when `.gitignore` ignores them ([`name_literally`](Self::name_literally)).
    literals: Literals,
    /// Ignored entries the agent wrote, as the last
    /// [`changes`](Self::changes) found them (a folder ends with `/`).
    ignored: Vec<String>,
    /// What the view held when it was fixed, the base of the change
    /// ([`keep_start`](Self::keep_start)).
    start: start::Start,
}

impl Workspace {
    /// Makes a workspace for `root` under `parent` (a folder outside the
    /// project: overlayfs refuses an upper dir inside its lower dir).
    pub fn create(exe: &Path, root: &Path, parent: &Path, mode: Mode, name: &str) -> Result<Workspace, Error> {
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
    ) -> Result<Workspace, Error> {
        let root = root.canonicalize()?;
        std::fs::create_dir_all(parent)?;
        let base = tempfile::Builder::new().prefix(&format!("{}-", tree::sanitize(name))).tempdir_in(parent)?.keep();
        // Whose it is: a workspace left by a cassist that was killed is
        // removed by the next run (`remove_stale`).
        cleanup::mark_owner(&base)?;
        // Taken before anything runs in the workspace (and, copy mode,
        // before copying), so that any later edit of the project, by the
        // user or by another task's integration, is a conflict at
        // integration rather than taken as the starting state. O(1): the
        // paths the task changes are checked at integration, no others.
        let started = start_stamp(&root, &base)?;
        let site = Site { root: root.clone(), base: base.clone(), stack };
        let backing: Result<Box<dyn Backing>, Error> = match mode {
            Mode::Overlay => OverlayBacking::create(site).map(|b| Box::new(b) as Box<dyn Backing>),
            Mode::Copy => CopyBacking::create(site).map(|b| Box::new(b) as Box<dyn Backing>),
        };
        let backing = backing.inspect_err(|_| remove_tree(&base))?;
        Ok(Workspace {
            exe: exe.to_path_buf(),
            mode,
            dir: backing.dir().to_path_buf(),
            root,
            backing,
            started,
            placed: Vec::new(),
            limits: Limits::DEFAULT,
            keep: false,
            name: name.to_owned(),
            literals: Literals::default(),
            ignored: Vec::new(),
            build_stack: Vec::new(),
            view: 0,
            start: start::Start::none(started),
        })
    }

    /// Copies aside the files of the project that `scope` names, as they
    /// are now: the base the change is merged against when it is written
    /// into the user's tree, whatever the user edits meanwhile (see
    /// [`start`]). Called before anything runs in the workspace.
    pub fn keep_start(&mut self, scope: &[String]) -> Result<(), Error> {
        let dir = self.base().join("start");
        self.start = start::Start::capture(&self.root, &dir, scope, self.started)?;
        Ok(())
    }

    /// The base folder (upper and work dirs, or the copy).
    pub fn base(&self) -> &Path {
        &self.backing.site().base
    }

    /// The integration layers it stacks, newest first.
    pub fn stack(&self) -> &[Arc<IntegrationLayer>] {
        &self.backing.site().stack
    }

    /// The argv that runs `argv` in the workspace, writing `layer`, as
    /// `jail` confines it. Whatever the jail: the project's `.git` is
    /// read-only (and its `.cassist/` hidden from a confined command), and
    /// the workspace path stays visible.
    pub fn command(&self, layer: Layer, argv: Vec<OsString>, jail: Jail) -> Result<Vec<OsString>, Error> {
        let overlay = self.backing.overlay(layer, &self.build_stack)?;
        let namespaces = overlay.is_some();
        let spec = ExecSpec::for_project(jail, namespaces, overlay, &self.root, &self.dir, argv);
        let mut out = vec![self.exe.clone().into_os_string()];
        out.extend(spec.to_args());
        Ok(out)
    }

    /// [`Self::command`] as the command the runner starts, in the
    /// workspace's folder: through the wrapper, which sees itself to dying
    /// with cassist ([`process::Command::sandboxed`]).
    pub fn sandboxed(&self, layer: Layer, argv: Vec<OsString>, jail: Jail) -> Result<process::Command, Error> {
        Ok(process::Command::sandboxed(self.command(layer, argv, jail)?, self.dir.clone()))
    }

    /// `argv` in the agent's layer, unconfined (own session and
    /// namespaces only): for tests of the workspace itself.
    pub fn wrap(&self, argv: Vec<OsString>) -> Result<Vec<OsString>, Error> {
        self.command(Layer::Agent, argv, Jail::default())
    }

    /// A fresh scratch layer over the agent's, for one acceptance round
    /// ([`Layer::Scratch`]); copy mode: the agent's result is set aside
    /// and a throw-away copy of it takes its place. Ended by
    /// [`end_scratch`](Self::end_scratch).
    pub fn begin_scratch(&mut self) -> Result<(), Error> {
        self.begin_throwaway(Layer::Scratch)
    }

    /// A fresh build layer over the user's tree as it is now (integrated),
    /// for the `build` commands ([`Layer::Build`]); copy mode: the agent's
    /// result is set aside and a throw-away copy of the user's tree takes
    /// its place. Ended by [`end_scratch`](Self::end_scratch).
    pub fn begin_build(&mut self) -> Result<(), Error> {
        self.begin_build_over(Vec::new())
    }

    /// [`begin_build`](Self::begin_build) over integration layers (newest
    /// first) over the user's tree: the changes that passed and are not
    /// written yet.
    pub fn begin_build_over(&mut self, stack: Vec<Arc<IntegrationLayer>>) -> Result<(), Error> {
        self.build_stack = stack;
        self.begin_throwaway(Layer::Build)
    }

    fn begin_throwaway(&mut self, layer: Layer) -> Result<(), Error> {
        self.end_scratch();
        self.backing.begin_throwaway(layer, &self.build_stack)
    }

    /// Throws the throw-away layer away (copy mode: puts the agent's
    /// result back). Nothing when there is none.
    pub fn end_scratch(&mut self) {
        self.backing.end_throwaway();
    }

    /// After the `setup` commands: copy mode measures the change from what
    /// they left (overlay mode has their layer for it).
    pub fn setup_done(&mut self) -> Result<(), Error> {
        self.backing.setup_done(&self.literals)
    }

    /// The files the task's scope names literally (relative, normalized):
    /// part of the change even when `.gitignore` ignores them; other
    /// ignored files the agent writes are left out and named by
    /// [`ignored`](Self::ignored). Called before anything runs in the
    /// workspace: such a file the project has (ignored, so left out of
    /// the walk) is part of the starting state, and copy mode copies it.
    pub fn name_literally(&mut self, paths: &[String]) -> Result<(), Error> {
        self.literals = Literals::new(paths);
        self.backing.name_literally(&self.literals)
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
        let dir = self.base().join("io");
        std::fs::create_dir_all(&dir)?;
        Ok(dir)
    }

    /// Writes a file into the workspace (not the user's tree) that is not
    /// part of the change set: the instructions file placed for the agent
    /// (overlay mode: into the setup layer, under the agent's).
    pub fn place(&mut self, rel: &str, bytes: &[u8]) -> std::io::Result<()> {
        let target = self.backing.place_dir().join(rel);
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
    /// changes below `.git/` and `.cassist/`. A change with more entries
    /// than `limits { files }` is [`Error::TooManyFiles`], with its count:
    /// past the limit, entries are counted and nothing more is read.
    pub fn changes(&mut self) -> Result<ChangeSet, Error> {
        let (raw, over) = self.scan(self.limits)?;
        let count = raw.len() as u64;
        if count > self.limits.files {
            return Err(cassist_core::limits::TooManyFiles { count, limit: self.limits.files }.into());
        }
        let raw = if over {
            // Entries left out after they were counted (ignored deletions,
            // what cassist placed) took the count past the limit: the
            // change is within it, read whole.
            self.scan(Limits { files: u64::MAX, ..self.limits })?.0
        } else {
            raw
        };
        let mut changes = detect_renames(raw.into_values().collect());
        let stack = self.stack();
        self.start.fix(&self.root, &mut changes, &|p| stack.iter().any(|l| l.paths().contains(p)));
        Ok(ChangeSet { changes })
    }

    /// One reading of the change within `limits`: its entries by path, and
    /// whether the reader went past `files` (their content is then unread).
    fn scan(&mut self, limits: Limits) -> Result<(BTreeMap<String, Change>, bool), Error> {
        let mut scan = Scan {
            reader: Reader::new(limits),
            // .gitignore files as the agent left them: the workspace's first.
            ignore: IgnoreCheck::new(&self.root, self.backing.gitignore_layers()),
            literals: &self.literals,
            found: BTreeMap::new(),
        };
        let mut ignored = self.backing.changes(&mut scan)?;
        let Scan { ignore, found: mut raw, reader, .. } = scan;
        raw.retain(|path, c| {
            let rel = raw_path(c);
            !self.placed.contains(path) && (self.literals.names(&rel) || !ignore.ignored(&rel, false))
        });
        ignored.retain(|p| !self.placed.contains(p));
        ignored.sort();
        self.ignored = ignored;
        Ok((raw, reader.over_files()))
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
    pub fn keep(&mut self) -> Result<PathBuf, Error> {
        self.keep = true;
        self.end_scratch();
        let tree = self.base().join(TREE);
        let kept = self.backing.keep(&tree, &self.placed);
        self.dir = self.backing.dir().to_path_buf();
        kept?;
        // Last: a workspace whose marker is missing is not kept.
        cleanup::mark_kept(self.base(), &self.name, &self.root)?;
        Ok(tree)
    }

    /// Begins integrating `changes` into the user's tree: the transaction
    /// is open; see [`integrate`].
    pub fn begin_integration(&self, changes: &ChangeSet) -> Result<journal::Open, IntegrateError> {
        integrate(&self.root, changes)
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
        open.commit(Vec::new())?;
        Ok(done)
    }

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
        cleanup::remove_later(self.base().to_path_buf());
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        if !self.keep {
            remove_tree(self.base());
        }
    }
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

/// Puts `c` into a change set being read, by its path (a later change of
/// the same path replaces an earlier one).
fn insert_change(out: &mut BTreeMap<String, Change>, c: Change) {
    out.insert(c.path.clone(), c);
}

/// A deleted and an added file with the same content are a rename.
fn detect_renames(changes: Vec<Change>) -> Vec<Change> {
    let mut deleted_by_content: std::collections::HashMap<Vec<u8>, usize> = std::collections::HashMap::new();
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
            out[i].old_mode = changes[j].old_mode;
            drop[j] = true;
        }
    }
    out.into_iter().zip(drop).filter(|(_, d)| !d).map(|(c, _)| c).collect()
}
