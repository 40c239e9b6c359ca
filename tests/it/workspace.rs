//! Copy-on-write workspaces (`src/workspace.rs`, `src/sandbox.rs`), through
//! the library API, in both modes: the overlay (project path overmounted in
//! user + mount + PID namespaces by `cassist __sandbox-exec`) and the copy
//! fallback.
//!
//! Every case is written once as `fn case(mode)` and instantiated twice by
//! [`both_modes!`]: `overlay::case` and `copy::case`. Overlay cases are
//! skipped, saying why, where copy-on-write workspaces are unavailable
//! (a failure under `CASSIST_REQUIRE_SANDBOX=1`).
//!
//! The workspace is given the real cassist binary to run its wrapper
//! (`Workspace::create(CASSIST, ..)`).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use cassist_core::changes::{Change, ChangeKind, ChangeSet, Hazard, Special};
use cassist_core::paths::is_reserved;
use cassist_run::workspace::{
    IntegrateError, Layer, Mode, Workspace, detect_mode, remove_kept, remove_stale, remove_tree,
};
use cassist_sandbox::sandbox::Jail;

use crate::support::{
    CASSIST, Project, Sandbox, Test, git_env, processes_with, sandbox_or_skip, unique_marker, wait_until,
};

// ---------------------------------------------------------------------------
// Support
// ---------------------------------------------------------------------------

/// Whether overlay workspaces work here (else the overlay case is skipped,
/// or fails under `CASSIST_REQUIRE_SANDBOX=1`).
#[track_caller]
fn overlay_available() -> bool {
    sandbox_or_skip(Sandbox::Overlay)
}

/// The full name of the test `name` of this module, for `--exact`.
fn test_name(name: &str) -> String {
    let module = module_path!().split_once("::").map_or(module_path!(), |(_, m)| m);
    format!("{module}::{name}")
}

/// Instantiates `fn $case(mode: Mode)` as `overlay::$case` and `copy::$case`.
macro_rules! both_modes {
    ($($case:ident),* $(,)?) => {
        mod overlay {
            $(
                #[test]
                fn $case() {
                    if super::overlay_available() {
                        super::$case(cassist_run::workspace::Mode::Overlay);
                    }
                }
            )*
        }
        mod copy {
            $(
                #[test]
                fn $case() {
                    super::$case(cassist_run::workspace::Mode::Copy);
                }
            )*
        }
    };
}

both_modes!(
    user_tree_untouched,
    change_kinds,
    unchanged_workspace_has_no_changes,
    git_in_a_repository_is_not_a_change,
    git_init_is_not_a_change,
    placed_files_are_not_changes,
    deleted_then_recreated_folder,
    file_replaced_by_folder,
    integrate_applies_exactly,
    conflict_leaves_tree_untouched,
    conflict_on_added_and_deleted_files,
    rollback_restores_the_tree,
    exit_code_is_the_commands,
    drop_removes_the_workspace,
    keep_keeps_the_workspace,
    two_workspaces_are_independent,
    stdin_reaches_the_command,
    symlinked_project_path,
    own_folders_are_changes,
    hostile_entries_are_read_safely_and_never_integrated,
    set_bits_on_an_unchanged_file_are_a_change,
    special_files_of_the_project_are_left_alone,
    kept_workspaces_survive_until_removed,
    ignored_outputs_are_named_and_the_scopes_are_kept,
    hostile_entries_neither_leak_into_a_change_nor_fill_a_kept_tree,
);

const GITIGNORE: &str = "__pycache__/\n*.log\n/target/\n";

/// Path, content and permission bits of the fixture project.
fn fixture_files() -> Vec<(&'static str, Vec<u8>, u32)> {
    vec![
        ("README.md", b"# demo project\n".to_vec(), 0o644),
        (".gitignore", GITIGNORE.as_bytes().to_vec(), 0o644),
        ("src/main.rs", b"fn main() {\n    demo::run();\n}\n".to_vec(), 0o644),
        ("src/lib.rs", b"pub fn run() {}\n".to_vec(), 0o644),
        ("docs/guide.md", b"the guide\n".to_vec(), 0o644),
        ("docs/api.md", b"the api\n".to_vec(), 0o644),
        ("docs/sub/deep.md", b"deep docs\n".to_vec(), 0o644),
        ("data/blob.bin", vec![0, 1, 2, 0, 255, 0, b'x', 0], 0o644),
        ("scripts/build.sh", b"#!/bin/sh\necho build\n".to_vec(), 0o644),
        ("old/name.txt", b"rename me: unique content 1\n".to_vec(), 0o644),
        ("keep/same.txt", b"same bytes\n".to_vec(), 0o644),
        ("regen/one.txt", b"one\n".to_vec(), 0o644),
        ("regen/two.txt", b"two\n".to_vec(), 0o644),
        ("regen/deep/three.txt", b"three\n".to_vec(), 0o644),
        // Ignored by .gitignore: never part of a change set.
        ("ignored.log", b"old log\n".to_vec(), 0o644),
        ("__pycache__/cached.pyc", vec![0x42, 0, 0x0d, 0x0a], 0o644),
    ]
}

/// The fixture project (under the temp folder), committed to a fresh git
/// repository when `git`.
fn fixture(git: bool) -> Project {
    let p = fixture_files().into_iter().fold(Test::new(), |t, (rel, bytes, _)| t.file(rel, bytes)).build();
    for (rel, _, mode) in fixture_files() {
        std::fs::set_permissions(p.path().join(rel), std::fs::Permissions::from_mode(mode)).unwrap();
    }
    if git {
        p.commit_all();
    }
    p
}

/// The folder for the project's workspaces, outside it (overlayfs refuses
/// an upper dir inside its lower dir).
fn parent(p: &Project) -> PathBuf {
    p.tmp().canonicalize().unwrap().join("workspaces")
}

fn workspace(p: &Project, mode: Mode) -> Workspace {
    Workspace::create(Path::new(CASSIST), p.path(), &parent(p), mode, "task one").expect("create workspace")
}

/// The argv that runs `sh -c SCRIPT` in the workspace, with the real
/// cassist binary as the wrapper (see the module doc).
fn argv_for(ws: &Workspace, script: &str) -> Vec<OsString> {
    let mut argv = ws.wrap(vec!["sh".into(), "-c".into(), script.into()]).expect("wrap");
    let me = std::env::current_exe().unwrap();
    if Path::new(&argv[0]) == me {
        argv[0] = CASSIST.into();
    }
    argv
}

fn command_for(ws: &Workspace, script: &str) -> Command {
    let argv = argv_for(ws, script);
    let mut cmd = Command::new(&argv[0]);
    git_env(&mut cmd).args(&argv[1..]).current_dir(&ws.dir).stdin(Stdio::null());
    cmd
}

/// Runs `sh -c SCRIPT` in the workspace.
fn run(ws: &Workspace, script: &str) -> Output {
    command_for(ws, script).output().expect("start the wrapped command")
}

/// Runs `sh -c SCRIPT` in the workspace; it must succeed. Returns stdout.
fn run_ok(ws: &Workspace, script: &str) -> String {
    let out = run(ws, script);
    assert!(
        out.status.success(),
        "`{script}` failed in the {} workspace ({}):\nstdout: {}\nstderr: {}",
        ws.mode.as_str(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One entry of a folder tree.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Dir { mode: u32 },
    File { mode: u32, bytes: Vec<u8> },
    Link(PathBuf),
    Other { mode: u32 },
}

/// Every entry below `root` (relative paths), `.git/` included, cassist's
/// own `.cassist/` not.
fn tree(root: &Path) -> BTreeMap<String, Node> {
    let mut out = BTreeMap::new();
    // Integration keeps its journal and the old contents in cassist's own
    // `.cassist/`, which is no part of the user's files.
    let walk = walkdir::WalkDir::new(root).min_depth(1).sort_by_file_name();
    for entry in walk.into_iter().filter_entry(|e| e.depth() != 1 || e.file_name() != ".cassist") {
        let entry = entry.expect("walk the tree");
        let rel = entry.path().strip_prefix(root).unwrap().to_string_lossy().into_owned();
        let meta = entry.path().symlink_metadata().unwrap();
        let mode = meta.mode() & 0o7777;
        let node = if meta.is_dir() {
            Node::Dir { mode }
        } else if meta.is_file() {
            Node::File { mode, bytes: std::fs::read(entry.path()).unwrap() }
        } else if meta.file_type().is_symlink() {
            Node::Link(std::fs::read_link(entry.path()).unwrap())
        } else {
            Node::Other { mode: meta.mode() }
        };
        out.insert(rel, node);
    }
    out
}

/// The tree without folders (what git sees).
fn tree_files(root: &Path) -> BTreeMap<String, Node> {
    tree(root).into_iter().filter(|(_, n)| !matches!(n, Node::Dir { .. })).collect()
}

/// Inode, mtime and ctime of every entry below `root`: equal only if
/// nothing was written, even with the same bytes.
fn stamps(root: &Path) -> BTreeMap<String, (u64, i64, i64, i64, i64)> {
    walkdir::WalkDir::new(root)
        .sort_by_file_name()
        .into_iter()
        .map(|e| {
            let e = e.expect("walk the tree");
            let m = e.path().symlink_metadata().unwrap();
            let rel = e.path().strip_prefix(root).unwrap().to_string_lossy().into_owned();
            (rel, (m.ino(), m.mtime(), m.mtime_nsec(), m.ctime(), m.ctime_nsec()))
        })
        .collect()
}

/// The differences between two trees, one line each (empty if equal).
fn tree_diff<V: PartialEq + std::fmt::Debug>(before: &BTreeMap<String, V>, after: &BTreeMap<String, V>) -> Vec<String> {
    let short = |v: &V| {
        let s = format!("{v:?}");
        if s.len() > 120 { format!("{}...", &s[..120]) } else { s }
    };
    let mut out = Vec::new();
    for (k, v) in before {
        match after.get(k) {
            None => out.push(format!("removed: {k} (was {})", short(v))),
            Some(w) if w != v => out.push(format!("changed: {k}: {} -> {}", short(v), short(w))),
            _ => {}
        }
    }
    for (k, w) in after {
        if !before.contains_key(k) {
            out.push(format!("added: {k} ({})", short(w)));
        }
    }
    out
}

#[track_caller]
fn assert_same<V: PartialEq + std::fmt::Debug>(what: &str, before: &BTreeMap<String, V>, after: &BTreeMap<String, V>) {
    let diff = tree_diff(before, after);
    assert!(diff.is_empty(), "{what}:\n  {}", diff.join("\n  "));
}

/// The paths of a change set but those below `.git/` (or `.cassist/`).
fn without_git(cs: &ChangeSet) -> Vec<&str> {
    cs.paths().into_iter().filter(|p| !is_reserved(p)).collect()
}

fn by_path(cs: &ChangeSet) -> BTreeMap<String, Change> {
    cs.changes.iter().map(|c| (c.path.clone(), c.clone())).collect()
}

/// A short view of a change set for failure messages.
fn describe(cs: &ChangeSet) -> String {
    cs.changes.iter().map(|c| format!("{} {:?} mode {:o}", c.path, c.kind, c.mode)).collect::<Vec<_>>().join("\n  ")
}

fn content(rel: &str) -> Vec<u8> {
    fixture_files().into_iter().find(|(p, _, _)| *p == rel).map(|(_, b, _)| b).expect("a fixture file")
}

const S_IFMT: u32 = 0o170000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;

/// What a fake agent does: every kind of change, plus writes that must
/// never be part of the change set.
const AGENT: &str = r#"set -e
# added
echo '// a new module' > src/new.rs
# modified
printf 'pub fn run() {\n    println!("hi");\n}\n' > src/lib.rs
# a whole folder deleted, and a single file
rm -r docs
rm README.md
# renamed, same content, into a new folder
mkdir -p new && mv old/name.txt new/place.txt
# binary: added and modified
printf 'bin\000ary\377\n' > data/new.bin
printf '\000\001\002\003' > data/blob.bin
# mode only
chmod +x scripts/build.sh
# the same bytes written again, and a touch: no change
printf 'same bytes\n' > keep/same.txt
touch src/main.rs
# a symlink
ln -s src/lib.rs link.rs
# ignored by .gitignore
mkdir -p __pycache__ src/__pycache__ target/debug
echo x > __pycache__/new.pyc
echo y > src/__pycache__/lib.pyc
echo built > target/debug/out
echo log > build.log
echo more >> ignored.log
"#;

/// Checks the change set `AGENT` leaves.
#[track_caller]
fn check_agent_changes(cs: &ChangeSet) {
    let all = describe(cs);
    let got = by_path(cs);
    let expected = [
        "README.md",
        "data/blob.bin",
        "data/new.bin",
        "docs/api.md",
        "docs/guide.md",
        "docs/sub/deep.md",
        "link.rs",
        "new/place.txt",
        "scripts/build.sh",
        "src/lib.rs",
        "src/new.rs",
    ];
    assert_eq!(got.keys().map(String::as_str).collect::<Vec<_>>(), expected, "change set:\n  {all}");
    assert_eq!(cs.paths(), expected, "the change set is sorted by path");

    let c = &got["src/new.rs"];
    assert_eq!(c.kind, ChangeKind::Added);
    assert_eq!(c.old, None);
    assert_eq!(c.new.as_deref(), Some(&b"// a new module\n"[..]));
    assert_eq!(c.mode & S_IFMT, S_IFREG);
    assert!(!c.is_binary());

    let c = &got["src/lib.rs"];
    assert_eq!(c.kind, ChangeKind::Modified);
    assert_eq!(c.old.as_deref(), Some(&b"pub fn run() {}\n"[..]));
    assert_eq!(c.new.as_deref(), Some(&b"pub fn run() {\n    println!(\"hi\");\n}\n"[..]));
    assert_eq!(c.added_lines(), ["pub fn run() {", "    println!(\"hi\");", "}"]);

    for rel in ["README.md", "docs/api.md", "docs/guide.md", "docs/sub/deep.md"] {
        let c = &got[rel];
        assert_eq!(c.kind, ChangeKind::Deleted, "{rel}");
        assert_eq!(c.old.as_deref(), Some(&content(rel)[..]), "{rel}: the old content");
        assert_eq!(c.new, None, "{rel}");
    }

    let c = &got["new/place.txt"];
    assert_eq!(c.kind, ChangeKind::Renamed { from: "old/name.txt".into() });
    assert_eq!(c.old.as_deref(), Some(&content("old/name.txt")[..]));
    assert_eq!(c.new.as_deref(), Some(&content("old/name.txt")[..]));

    let c = &got["data/new.bin"];
    assert_eq!(c.kind, ChangeKind::Added);
    assert_eq!(c.new.as_deref(), Some(&b"bin\0ary\xff\n"[..]));
    assert!(c.is_binary());

    let c = &got["data/blob.bin"];
    assert_eq!(c.kind, ChangeKind::Modified);
    assert_eq!(c.old.as_deref(), Some(&content("data/blob.bin")[..]));
    assert_eq!(c.new.as_deref(), Some(&[0u8, 1, 2, 3][..]));
    assert!(c.is_binary());

    let c = &got["scripts/build.sh"];
    assert_eq!(c.kind, ChangeKind::Modified, "a chmod +x is a change");
    assert_eq!(c.old, c.new, "same content");
    assert_eq!(c.mode & 0o777, 0o755);
    assert_eq!(c.mode & S_IFMT, S_IFREG);

    let c = &got["link.rs"];
    assert_eq!(c.kind, ChangeKind::Added);
    assert_eq!(c.new.as_deref(), Some(&b"src/lib.rs"[..]), "a symlink's content is its target");
    assert_eq!(c.mode & S_IFMT, S_IFLNK);
}

/// Lists the files of the current folder as the user's git would see them
/// (no `.git/`, `.cassist/` or ignored files): path, permissions, hash;
/// symlinks with their target. Runs inside a workspace or in the tree.
const LIST: &str = r#"find . \( -path ./.git -o -path ./.cassist -o -path ./target -o -name __pycache__ -o -name '*.log' \) -prune \
    -o \( -type f -o -type l \) -print | LC_ALL=C sort | while read -r p; do
  if [ -L "$p" ]; then echo "L $p -> $(readlink "$p")"
  else echo "F $p $(stat -c %a "$p") $(sha256sum < "$p" | cut -d' ' -f1)"; fi
done
"#;

fn list_tree(root: &Path) -> String {
    let out = Command::new("sh").arg("-c").arg(LIST).current_dir(root).output().unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn kill_all(procs: &[(i32, String)]) {
    for (pid, _) in procs {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), nix::sys::signal::Signal::SIGKILL);
    }
}

// ---------------------------------------------------------------------------
// The cases, in both modes
// ---------------------------------------------------------------------------

/// Nothing the command does reaches the user's tree: same entries, bytes,
/// modes, inodes and times, `.git/` and ignored files included.
fn user_tree_untouched(mode: Mode) {
    let f = fixture(true);
    let before = tree(f.path());
    let before_stamps = stamps(f.path());
    let mut ws = workspace(&f, mode);
    ws.place("CLAUDE.md", b"placed instructions\n").unwrap();
    run_ok(&ws, AGENT);
    // And git, inside: add, commit, a new branch. The overlay shows the
    // project's .git read-only: git cannot write it (nor plant a hook).
    // The copy has no .git/: `git init` makes one there.
    let git =
        "set -e; git init -q; git add -A; git commit -qm agent; git checkout -qb agent-branch; echo x > .git/extra";
    if mode == Mode::Overlay {
        let out = run(&ws, git);
        assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("Read-only file system"));
    } else {
        run_ok(&ws, git);
    }
    // The workspace sees its own changes...
    let seen =
        run_ok(&ws, "cat src/lib.rs CLAUDE.md; test ! -e README.md && echo no-readme; git log --oneline | wc -l");
    assert!(seen.contains("println!") && seen.contains("placed instructions") && seen.contains("no-readme"), "{seen}");
    let commits = '1';
    assert!(seen.trim_end().ends_with(commits), "{commits} commits inside: {seen}");
    // (What git wrote is part of the change set, for the review to reject.)
    assert_eq!(without_git(&ws.changes().unwrap()).len(), 11);
    // ...the user's tree none of them.
    assert_same("the user's tree changed", &before, &tree(f.path()));
    assert_same("entries of the user's tree were rewritten", &before_stamps, &stamps(f.path()));
    assert_eq!(f.git(&["rev-list", "--count", "HEAD"]).trim(), "1");
}

/// Added, modified, deleted (a file and a whole folder), renamed, binary,
/// mode-changed and symlink files, with the right kind and contents; same
/// bytes rewritten, `touch`, ignored files and `.cassist/` are not changes.
fn change_kinds(mode: Mode) {
    let f = fixture(true);
    let mut ws = workspace(&f, mode);
    run_ok(&ws, AGENT);
    check_agent_changes(&ws.changes().unwrap());
    // Asking twice gives the same answer.
    check_agent_changes(&ws.changes().unwrap());
}

fn unchanged_workspace_has_no_changes(mode: Mode) {
    let f = fixture(true);
    let mut ws = workspace(&f, mode);
    assert!(ws.changes().unwrap().is_empty());
    run_ok(
        &ws,
        "cat src/lib.rs >/dev/null; ls -R >/dev/null; touch README.md; cp -p keep/same.txt keep/same.txt.tmp; mv keep/same.txt.tmp keep/same.txt",
    );
    let cs = ws.changes().unwrap();
    assert!(cs.is_empty(), "change set:\n  {}", describe(&cs));
}

/// `git add`, `git commit` and a branch made inside the workspace of a
/// repository: the project's `.git/` is untouched. In the overlay it is
/// read-only: git reads it, and every write fails. In the copy, what git
/// wrote inside is in the change set below `.git/` only (the review
/// rejects it; integration refuses it).
fn git_in_a_repository_is_not_a_change(mode: Mode) {
    let f = fixture(true);
    let head = f.git(&["rev-parse", "HEAD"]);
    let git_before = tree(&f.path().join(".git"));
    let mut ws = workspace(&f, mode);
    // The copy has no .git/ of its own: `git init` makes one there.
    let git = "set -e; git init -q; echo 'pub fn more() {}' > src/more.rs; git add -A; git commit -qm agent; \
         git checkout -qb agent-work; git gc -q";
    if mode == Mode::Overlay {
        let out = run(&ws, &format!("git status --short >/dev/null && echo read; {git}"));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "read\n");
        assert!(String::from_utf8_lossy(&out.stderr).contains("Read-only file system"), "{out:?}");
        run_ok(&ws, "test ! -e .git/index.lock && echo 'pub fn more() {}' > src/more.rs");
    } else {
        run_ok(&ws, git);
    }
    let cs = ws.changes().unwrap();
    assert_eq!(without_git(&cs), ["src/more.rs"], "change set:\n  {}", describe(&cs));
    assert!(cs.paths().iter().all(|p| *p == "src/more.rs" || p.starts_with(".git/")), "{}", describe(&cs));
    if cs.paths().len() > 1 {
        assert!(matches!(ws.integrate(&cs), Err(IntegrateError::Refused(_))));
    }
    assert_eq!(f.git(&["rev-parse", "HEAD"]), head);
    assert_same("the user's .git/ changed", &git_before, &tree(&f.path().join(".git")));
}

/// A project that is not a repository: `git init` and `git add` inside make
/// no change but below `.git/`, which never reaches the tree.
fn git_init_is_not_a_change(mode: Mode) {
    let f = fixture(false);
    let mut ws = workspace(&f, mode);
    run_ok(&ws, "set -e; git init -q; git add -A; git commit -qm agent");
    let cs = ws.changes().unwrap();
    assert!(without_git(&cs).is_empty(), "change set:\n  {}", describe(&cs));
    assert!(cs.paths().iter().all(|p| p.starts_with(".git/")), "{}", describe(&cs));
    if !cs.is_empty() {
        assert!(matches!(ws.integrate(&cs), Err(IntegrateError::Refused(_))));
    }
    assert!(!f.path().join(".git").exists());
}

/// What an agent writes below `.cassist/` or `.git/` (where it can: the
/// sandbox may refuse the write) is part of the change set, never dropped
/// silently, and never integrated.
fn own_folders_are_changes(mode: Mode) {
    let f = fixture(true);
    let git_before = tree(&f.path().join(".git"));
    let mut ws = workspace(&f, mode);
    let wrote = run(
        &ws,
        "mkdir -p .cassist/runs && echo state > .cassist/runs/state.json && echo cassist; \
         mkdir -p .git/hooks && echo 'echo pwned' > .git/hooks/pre-commit && echo git; \
         echo 'x' > src/x.rs",
    );
    let wrote = String::from_utf8_lossy(&wrote.stdout).into_owned();
    let cs = ws.changes().unwrap();
    let mut expected = Vec::new();
    if wrote.contains("cassist") {
        expected.push(".cassist/runs/state.json");
    }
    if wrote.contains("git") {
        expected.push(".git/hooks/pre-commit");
    }
    expected.push("src/x.rs");
    assert_eq!(cs.paths(), expected, "change set:\n  {}", describe(&cs));
    let before = tree(f.path());
    if expected.len() > 1 {
        match ws.integrate(&cs) {
            Err(IntegrateError::Refused(why)) => {
                assert_eq!(why.len(), expected.len() - 1, "{why:?}");
                assert!(why[0].contains("lies in git's or cassist's own folder"), "{why:?}");
            }
            other => panic!("integration must refuse .git/ and .cassist/, got {other:?}"),
        }
    }
    assert_same("a refused integration changed the tree", &before, &tree(f.path()));
    assert_same("the project's .git/ changed", &git_before, &tree(&f.path().join(".git")));
}

/// An agent leaves what must never land: a fifo, a socket, a setuid
/// file, symlinks out of the project, a name that is not UTF-8, a 2 GiB
/// sparse file, a file over the limit. Reading the change set opens none
/// of the special files (it would block on the fifo), reads nothing over
/// the limits (the sparse file costs neither time nor memory), names the
/// file that is not UTF-8 with its bytes escaped; integration refuses
/// every one of them and writes nothing.
fn hostile_entries_are_read_safely_and_never_integrated(mode: Mode) {
    let f = fixture(true);
    let before = tree(f.path());
    let mut ws = workspace(&f, mode);
    ws.limits.file_size = 1 << 20;
    run_ok(
        &ws,
        r#"set -e
mkfifo run.fifo
python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind("run.sock")'
cp /bin/sh suid-sh && chmod 4755 suid-sh
ln -s /etc/passwd passwd
ln -s ../../x up
mkdir -p d && ln -s ../src/lib.rs d/fine
printf 'x\n' > "$(printf 'bad\377name.txt')"
truncate -s 2G sparse.bin
head -c 1048577 /dev/zero > over.bin
echo ok > ok.txt
"#,
    );
    let started = Instant::now();
    let cs = ws.changes().unwrap();
    let took = started.elapsed();
    let got = by_path(&cs);
    assert_eq!(
        got.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "bad\\xffname.txt",
            "d/fine",
            "ok.txt",
            "over.bin",
            "passwd",
            "run.fifo",
            "run.sock",
            "sparse.bin",
            "suid-sh",
            "up"
        ],
        "change set:\n  {}",
        describe(&cs)
    );
    assert!(took < Duration::from_secs(5), "reading the change set took {took:?}");
    assert_eq!(got["run.fifo"].hazard, Some(Hazard::Special(Special::Fifo)));
    assert_eq!(got["run.sock"].hazard, Some(Hazard::Special(Special::Socket)));
    assert_eq!(got["bad\\xffname.txt"].hazard, Some(Hazard::NonUtf8Name(b"bad\xffname.txt".to_vec())));
    assert_eq!(got["sparse.bin"].hazard, Some(Hazard::Unread { size: 2 << 30 }));
    assert_eq!(got["over.bin"].hazard, Some(Hazard::Unread { size: (1 << 20) + 1 }));
    for unread in ["run.fifo", "run.sock", "bad\\xffname.txt", "sparse.bin", "over.bin"] {
        assert_eq!(got[unread].new, None, "{unread} was read");
    }
    assert_eq!(got["suid-sh"].special_bits(), 0o4000);
    assert_eq!(got["passwd"].symlink_leaving().as_deref(), Some("/etc/passwd"));
    assert_eq!(got["up"].symlink_leaving().as_deref(), Some("../../x"));
    assert_eq!(got["d/fine"].symlink_leaving(), None);
    assert_eq!(got["ok.txt"].new.as_deref(), Some(&b"ok\n"[..]));

    match ws.integrate(&cs) {
        Err(IntegrateError::Refused(why)) => {
            let refused: Vec<&str> = why.iter().map(|w| w.split(':').next().unwrap()).collect();
            assert_eq!(
                refused,
                ["bad\\xffname.txt", "over.bin", "passwd", "run.fifo", "run.sock", "sparse.bin", "suid-sh", "up"],
                "{why:#?}"
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_same("a refused integration changed the tree", &before, &tree(f.path()));

    // Only what is safe, integrated: written as it was.
    let safe = ChangeSet {
        changes: cs.changes.iter().filter(|c| c.path == "ok.txt" || c.path == "d/fine").cloned().collect(),
    };
    ws.integrate(&safe).expect("integrate the safe part");
    assert_eq!(std::fs::read_link(f.path().join("d/fine")).unwrap(), Path::new("../src/lib.rs"));
}

/// A fifo in the user's project (a reader that opens it blocks): making the
/// workspace and reading its change never open it, and it is no change.
fn special_files_of_the_project_are_left_alone(mode: Mode) {
    let f = fixture(true);
    nix::unistd::mkfifo(&f.path().join("src/ctl.fifo"), nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    let mut ws = workspace(&f, mode);
    run_ok(&ws, "echo x > src/x.rs");
    let cs = ws.changes().unwrap();
    assert_eq!(cs.paths(), ["src/x.rs"], "change set:\n  {}", describe(&cs));
    ws.integrate(&cs).expect("integrate");
    assert!(std::fs::symlink_metadata(f.path().join("src/ctl.fifo")).unwrap().file_type().is_fifo());
}

/// A setuid bit set on a file whose bytes stay the same is a change (the
/// review sees the bit).
fn set_bits_on_an_unchanged_file_are_a_change(mode: Mode) {
    let f = fixture(true);
    let mut ws = workspace(&f, mode);
    run_ok(&ws, "chmod 6755 scripts/build.sh");
    let cs = ws.changes().unwrap();
    let got = by_path(&cs);
    assert_eq!(got.keys().map(String::as_str).collect::<Vec<_>>(), ["scripts/build.sh"]);
    assert_eq!(got["scripts/build.sh"].special_bits(), 0o6000);
    assert!(matches!(ws.integrate(&cs), Err(IntegrateError::Refused(_))));
    assert_eq!(std::fs::metadata(f.path().join("scripts/build.sh")).unwrap().mode() & 0o7777, 0o644);
}

/// Files cassist places (the instructions file) are visible inside but are
/// never changes, even when the agent edits them.
fn placed_files_are_not_changes(mode: Mode) {
    let f = fixture(true);
    let before = tree(f.path());
    let mut ws = workspace(&f, mode);
    ws.place("CLAUDE.md", b"top instructions\n").unwrap();
    ws.place("src/AGENTS.md", b"nested instructions\n").unwrap();
    ws.place("brand/new/dir/GEMINI.md", b"deep instructions\n").unwrap();
    let seen = run_ok(&ws, "cat CLAUDE.md src/AGENTS.md brand/new/dir/GEMINI.md; echo edited >> CLAUDE.md");
    assert_eq!(seen, "top instructions\nnested instructions\ndeep instructions\n");
    let cs = ws.changes().unwrap();
    assert!(cs.is_empty(), "change set:\n  {}", describe(&cs));
    assert_same("placing changed the user's tree", &before, &tree(f.path()));
}

/// A folder deleted and made again (an opaque folder in the overlay): what
/// was in it and is not any more is deleted; what is there again is
/// modified or added.
fn deleted_then_recreated_folder(mode: Mode) {
    let f = fixture(true);
    let mut ws = workspace(&f, mode);
    run_ok(
        &ws,
        "set -e; rm -r regen; mkdir -p regen/fresh regen/deep; printf 'one, rewritten\\n' > regen/one.txt; \
         printf 'fresh\\n' > regen/fresh/f.txt",
    );
    let cs = ws.changes().unwrap();
    let got = by_path(&cs);
    assert_eq!(
        got.keys().map(String::as_str).collect::<Vec<_>>(),
        ["regen/deep/three.txt", "regen/fresh/f.txt", "regen/one.txt", "regen/two.txt"],
        "change set:\n  {}",
        describe(&cs)
    );
    assert_eq!(got["regen/one.txt"].kind, ChangeKind::Modified);
    assert_eq!(got["regen/one.txt"].old.as_deref(), Some(&b"one\n"[..]));
    assert_eq!(got["regen/one.txt"].new.as_deref(), Some(&b"one, rewritten\n"[..]));
    assert_eq!(got["regen/fresh/f.txt"].kind, ChangeKind::Added);
    assert_eq!(got["regen/two.txt"].kind, ChangeKind::Deleted);
    assert_eq!(got["regen/two.txt"].old.as_deref(), Some(&b"two\n"[..]));
    assert_eq!(got["regen/deep/three.txt"].kind, ChangeKind::Deleted);

    // The same bytes written back after a folder's removal are no change.
    let mut ws = workspace(&f, mode);
    run_ok(&ws, "set -e; rm -r keep; mkdir keep; printf 'same bytes\\n' > keep/same.txt");
    let cs = ws.changes().unwrap();
    assert!(cs.is_empty(), "change set:\n  {}", describe(&cs));
}

/// A file replaced by a folder of the same name: the file is deleted, the
/// folder's files added, and integration makes the swap.
fn file_replaced_by_folder(mode: Mode) {
    let f = fixture(true);
    let mut ws = workspace(&f, mode);
    run_ok(&ws, "set -e; rm README.md; mkdir README.md; echo inside > README.md/index.md");
    let cs = ws.changes().unwrap();
    let got = by_path(&cs);
    assert_eq!(got.keys().map(String::as_str).collect::<Vec<_>>(), ["README.md", "README.md/index.md"]);
    assert_eq!(got["README.md"].kind, ChangeKind::Deleted);
    assert_eq!(got["README.md/index.md"].kind, ChangeKind::Added);
    ws.integrate(&cs).expect("integrate");
    assert_eq!(std::fs::read(f.path().join("README.md/index.md")).unwrap(), b"inside\n");
}

/// Integration leaves the user's files exactly as the workspace had them,
/// uncommitted, and the ignored/own/placed files out.
fn integrate_applies_exactly(mode: Mode) {
    let f = fixture(true);
    let head = f.git(&["rev-parse", "HEAD"]);
    let ignored_before = std::fs::read(f.path().join("ignored.log")).unwrap();
    let mut ws = workspace(&f, mode);
    ws.place("CLAUDE.md", b"instructions\n").unwrap();
    run_ok(&ws, AGENT);
    let inside = run_ok(&ws, LIST);
    let cs = ws.changes().unwrap();
    let done = ws.integrate(&cs).expect("integrate");
    // Compare without CLAUDE.md, which only the workspace has.
    let inside: String = inside.lines().filter(|l| !l.contains("./CLAUDE.md ")).map(|l| format!("{l}\n")).collect();
    assert_eq!(list_tree(f.path()), inside, "the user's files differ from the workspace's");
    assert!(inside.contains("F ./scripts/build.sh 755 "), "{inside}");
    assert!(inside.contains("L ./link.rs -> src/lib.rs"), "{inside}");

    // Byte for byte, the binary files.
    assert_eq!(std::fs::read(f.path().join("data/new.bin")).unwrap(), b"bin\0ary\xff\n");
    assert_eq!(std::fs::read(f.path().join("data/blob.bin")).unwrap(), [0, 1, 2, 3]);
    // Nothing else reached the tree.
    for rel in ["CLAUDE.md", "build.log", "__pycache__/new.pyc", "src/__pycache__", "target", ".cassist/runs"] {
        assert!(!f.path().join(rel).exists(), "{rel} reached the user's tree");
    }
    assert!(!f.path().join(".cassist/journal").exists(), "the integration's journal is left");
    assert_eq!(std::fs::read(f.path().join("ignored.log")).unwrap(), ignored_before);

    let mut written = done.written.clone();
    written.sort();
    let mut deleted = done.deleted.clone();
    deleted.sort();
    assert_eq!(
        written,
        ["data/blob.bin", "data/new.bin", "link.rs", "new/place.txt", "scripts/build.sh", "src/lib.rs", "src/new.rs"]
    );
    assert_eq!(deleted, ["README.md", "docs/api.md", "docs/guide.md", "docs/sub/deep.md", "old/name.txt"]);

    // Uncommitted: the same HEAD, and git sees the changes.
    assert_eq!(f.git(&["rev-parse", "HEAD"]), head);
    let status = f.git(&["status", "--porcelain", "--untracked-files=all"]);
    for line in [" M src/lib.rs", " D README.md", " D old/name.txt", " M scripts/build.sh", "?? src/new.rs"] {
        assert!(status.lines().any(|l| l == line), "`{line}` not in git status:\n{status}");
    }
    assert_eq!(f.git(&["diff", "--cached", "--name-only"]), "", "nothing staged");
}

/// The paths of integration conflicts.
fn conflict_paths(c: &[cassist_run::workspace::PathConflict]) -> Vec<&str> {
    c.iter().map(|c| c.path.as_str()).collect()
}

/// The user edits a file the agent also changed, after the workspace was
/// made: integration is refused, names the file and writes nothing.
fn conflict_leaves_tree_untouched(mode: Mode) {
    let f = fixture(true);
    let mut ws = workspace(&f, mode);
    run_ok(&ws, AGENT);
    let cs = ws.changes().unwrap();
    f.file("src/lib.rs", "pub fn run() { /* the user's edit */ }\n");
    // A file only the user changed is no conflict.
    f.file("src/main.rs", "fn main() { /* also the user's */ }\n");
    let before = tree(f.path());
    let before_stamps = stamps(f.path());
    match ws.integrate(&cs) {
        Err(IntegrateError::Conflict(files)) => assert_eq!(conflict_paths(&files), ["src/lib.rs"]),
        other => panic!("expected a conflict on src/lib.rs, got {other:?}"),
    }
    assert_same("a refused integration changed the tree", &before, &tree(f.path()));
    assert_same("a refused integration rewrote files", &before_stamps, &stamps(f.path()));
    let msg = ws.integrate(&cs).unwrap_err().to_string();
    assert!(msg.contains("src/lib.rs"), "{msg}");
}

/// Conflicts on a file both created, and on a file the agent deleted and
/// the user edited; both named, nothing written.
fn conflict_on_added_and_deleted_files(mode: Mode) {
    let f = fixture(true);
    let mut ws = workspace(&f, mode);
    run_ok(&ws, "set -e; echo agent > src/new.rs; rm docs/api.md; echo agent >> src/lib.rs");
    let cs = ws.changes().unwrap();
    f.file("src/new.rs", "user\n");
    f.file("docs/api.md", "the api, edited by the user\n");
    let before = tree(f.path());
    match ws.integrate(&cs) {
        Err(IntegrateError::Conflict(files)) => assert_eq!(conflict_paths(&files), ["docs/api.md", "src/new.rs"]),
        other => panic!("expected conflicts, got {other:?}"),
    }
    assert_same("a refused integration changed the tree", &before, &tree(f.path()));
}

/// Rolling back an integration (begun, not committed) gives back every
/// file as it was.
fn rollback_restores_the_tree(mode: Mode) {
    let f = fixture(true);
    let before = tree_files(f.path());
    let mut ws = workspace(&f, mode);
    run_ok(&ws, AGENT);
    let cs = ws.changes().unwrap();
    let open = ws.begin_integration(&cs).expect("integrate");
    assert!(!tree_diff(&before, &tree_files(f.path())).is_empty(), "integrate changed nothing");
    open.roll_back().unwrap();
    assert_same("rollback left differences", &before, &tree_files(f.path()));
}

/// The wrapper's exit code is the command's.
fn exit_code_is_the_commands(mode: Mode) {
    let f = fixture(true);
    let ws = workspace(&f, mode);
    for code in [0, 1, 3, 42, 125, 127, 255] {
        let out = run(&ws, &format!("exit {code}"));
        assert_eq!(out.status.code(), Some(code), "exit {code}: {}", String::from_utf8_lossy(&out.stderr));
    }
    assert_eq!(run(&ws, "no-such-command-xyz").status.code(), Some(127));
    // Output and the starting folder come through.
    let out = run_ok(&ws, "pwd; echo to-stderr >&2");
    assert_eq!(Path::new(out.trim()), ws.dir);
}

/// Dropping a workspace removes its base folder (the overlay's work folder
/// has mode 000).
fn drop_removes_the_workspace(mode: Mode) {
    let f = fixture(true);
    let mut ws = workspace(&f, mode);
    run_ok(&ws, AGENT);
    let _ = ws.changes().unwrap();
    let base = ws.base().to_path_buf();
    assert!(base.starts_with(parent(&f)), "{} not under {}", base.display(), parent(&f).display());
    if mode == Mode::Overlay {
        let work = base.join("agent.work/work");
        let m = std::fs::metadata(&work).expect("the overlay's agent.work/work folder");
        assert_eq!(m.mode() & 0o777, 0, "agent.work/work is mode 000");
    }
    drop(ws);
    assert!(!base.exists(), "{} left behind", base.display());
    assert_eq!(std::fs::read_dir(parent(&f)).unwrap().count(), 0);
}

/// A kept workspace holds the task's view as a plain folder (`tree`):
/// the project's files but ignored ones, `.git/` and what cassist placed,
/// with what setup and the agent did.
fn keep_keeps_the_workspace(mode: Mode) {
    let f = fixture(true);
    let mut ws = workspace(&f, mode);
    let script = "mkdir -p gen && echo made > gen/setup.txt";
    let setup = ws.command(Layer::Setup, vec!["sh".into(), "-c".into(), script.into()], Jail::default()).unwrap();
    let st = Command::new(&setup[0]).args(&setup[1..]).current_dir(&ws.dir).status().unwrap();
    assert!(st.success());
    ws.setup_done().unwrap();
    ws.place("AGENTS.md", b"placed by cassist\n").unwrap();
    run_ok(&ws, "set -e; echo kept > src/kept.rs; rm README.md; chmod +x scripts/build.sh; echo mine > agent.log");
    ws.begin_scratch().unwrap();
    let base = ws.base().to_path_buf();
    let tree_dir = ws.keep().expect("the kept tree");
    assert_eq!(tree_dir, base.join("tree"));
    drop(ws);
    assert!(base.is_dir());
    let mut want: BTreeMap<String, Node> = fixture_files()
        .into_iter()
        .filter(|(rel, _, _)| !["README.md", "ignored.log", "__pycache__/cached.pyc"].contains(rel))
        .map(|(rel, bytes, mode)| (rel.to_owned(), Node::File { mode, bytes }))
        .collect();
    want.insert("scripts/build.sh".into(), Node::File { mode: 0o755, bytes: content("scripts/build.sh") });
    want.insert("src/kept.rs".into(), Node::File { mode: 0o644, bytes: b"kept\n".to_vec() });
    want.insert("gen/setup.txt".into(), Node::File { mode: 0o644, bytes: b"made\n".to_vec() });
    // What the agent wrote is there, ignored or not.
    want.insert("agent.log".into(), Node::File { mode: 0o644, bytes: b"mine\n".to_vec() });
    assert_same("the kept tree", &want, &tree_files(&tree_dir));
    remove_tree(&base);
    assert!(!base.exists());
}

/// A kept workspace survives [`remove_stale`] (its process is gone), and
/// [`remove_kept`] removes it for its own project only.
fn kept_workspaces_survive_until_removed(mode: Mode) {
    let f = fixture(true);
    let mut ws = workspace(&f, mode);
    run_ok(&ws, "echo kept > src/kept.rs");
    let base = ws.base().to_path_buf();
    ws.keep().unwrap();
    drop(ws);
    // Its cassist is gone; so is a workspace that was not kept.
    let stale = workspace(&f, mode);
    let stale_base = stale.base().to_path_buf();
    std::mem::forget(stale);
    for b in [&base, &stale_base] {
        std::fs::write(b.join("owner.pid"), "999999999").unwrap();
    }
    assert_eq!(remove_stale(&parent(&f)), 1);
    assert!(base.join("tree/src/kept.rs").is_file() && !stale_base.exists());
    let other = fixture(false);
    assert_eq!(remove_kept(&parent(&f), other.path()), (0, 0), "another project's kept workspace");
    let (removed, bytes) = remove_kept(&parent(&f), f.path());
    assert!(removed == 1 && bytes > 0, "{removed} {bytes}");
    assert!(!base.exists());
}

/// An agent that turns the folder of a file its scope names into a link
/// to a secret outside, writes a 2 GiB sparse file, a fifo and a link to
/// `/etc/passwd`: the secret is never read into the change, and keeping
/// the workspace opens none of them, copies no 2 GiB and follows no link.
fn hostile_entries_neither_leak_into_a_change_nor_fill_a_kept_tree(mode: Mode) {
    let p = Test::new().file(".gitignore", "out.txt\n").file("src/a.txt", "a\n").build();
    let outside = p.tmp().join("secret");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("out.txt"), "SECRET-OUT").unwrap();
    let mut ws = Workspace::create(Path::new(CASSIST), p.path(), &parent(&p), mode, "hostile").unwrap();
    ws.name_literally(&["pkg/out.txt".to_owned()]).unwrap();
    run_ok(
        &ws,
        &format!(
            "set -e; ln -s {} pkg; truncate -s 2G sparse.bin; mkfifo run.fifo; ln -s /etc/passwd passwd",
            outside.display()
        ),
    );
    let cs = ws.changes().unwrap();
    assert!(
        cs.changes.iter().all(|c| !c.new.as_deref().is_some_and(|b| b.windows(6).any(|w| w == b"SECRET"))),
        "the secret was read through the agent's link: {}",
        describe(&cs)
    );
    let started = Instant::now();
    let kept = ws.keep().expect("the kept tree");
    assert!(started.elapsed() < Duration::from_secs(10), "keeping took {:?}", started.elapsed());
    drop(ws);
    let lstat = |rel: &str| std::fs::symlink_metadata(kept.join(rel));
    assert_eq!(std::fs::read_link(kept.join("pkg")).unwrap(), outside);
    assert_eq!(std::fs::read_link(kept.join("passwd")).unwrap(), Path::new("/etc/passwd"));
    assert!(lstat("run.fifo").is_err(), "a fifo in the kept tree");
    let sparse = lstat("sparse.bin").unwrap();
    assert!(sparse.len() == 2 << 30 && sparse.blocks() < 1024, "{} blocks", sparse.blocks());
    assert_eq!(std::fs::read_to_string(kept.join("src/a.txt")).unwrap(), "a\n");
    assert_eq!(std::fs::read_to_string(outside.join("out.txt")).unwrap(), "SECRET-OUT");
    remove_tree(kept.parent().unwrap());
}

/// Files the scope names literally are part of the change even when
/// `.gitignore` ignores them (in the view from the start, integrated);
/// other ignored files the agent wrote are named, not changes.
fn ignored_outputs_are_named_and_the_scopes_are_kept(mode: Mode) {
    let p = Test::new()
        .file(".gitignore", "out.txt\n*.tmp\nbuild/\ncache/\n")
        .file("cache/old.bin", "old\n")
        .file("packages/p0000/src.rs", "src\n")
        .file("packages/p0001/out.txt", "old out\n")
        .build();
    let mut ws = Workspace::create(Path::new(CASSIST), p.path(), &parent(&p), mode, "ignored").unwrap();
    let literal = ["packages/p0000/out.txt", "packages/p0001/out.txt", "build/keep.bin"];
    ws.name_literally(&literal.map(String::from)).unwrap();
    run_ok(
        &ws,
        "set -e; cp packages/p0001/out.txt seen.txt; echo new > packages/p0000/out.txt; \
         echo new1 > packages/p0001/out.txt; echo x > packages/p0000/x.tmp; mkdir -p build/sub; \
         echo o > build/sub/a.o; echo k > build/keep.bin; echo more >> packages/p0000/src.rs; rm -f cache/old.bin",
    );
    let cs = ws.changes().unwrap();
    assert_eq!(
        cs.paths(),
        ["build/keep.bin", "packages/p0000/out.txt", "packages/p0000/src.rs", "packages/p0001/out.txt", "seen.txt"],
        "{}",
        describe(&cs)
    );
    let out1 = &by_path(&cs)["packages/p0001/out.txt"];
    assert_eq!((&out1.kind, out1.old.as_deref()), (&ChangeKind::Modified, Some(&b"old out\n"[..])));
    assert_eq!(ws.ignored(), ["build/sub/", "packages/p0000/x.tmp"]);
    ws.integrate(&cs).expect("integrated");
    for (rel, text) in [
        ("packages/p0000/out.txt", "new\n"),
        ("packages/p0001/out.txt", "new1\n"),
        ("build/keep.bin", "k\n"),
        ("seen.txt", "old out\n"),
    ] {
        assert_eq!(p.read(rel), text, "{rel}");
    }
    assert!(!p.exists("packages/p0000/x.tmp") && !p.exists("build/sub"));
}

/// Two workspaces of one project at once (the scheduler will run tasks in
/// parallel): each sees only its own changes.
fn two_workspaces_are_independent(mode: Mode) {
    let f = fixture(true);
    let mut a = workspace(&f, mode);
    let mut b = workspace(&f, mode);
    assert_ne!(a.base(), b.base());
    let mut ca = command_for(&a, "echo a > src/lib.rs; sleep 0.3; cat src/lib.rs");
    let mut cb = command_for(&b, "echo b > src/lib.rs; rm README.md; sleep 0.3; cat src/lib.rs");
    let (pa, pb) = (ca.stdout(Stdio::piped()).spawn().unwrap(), cb.stdout(Stdio::piped()).spawn().unwrap());
    let (oa, ob) = (pa.wait_with_output().unwrap(), pb.wait_with_output().unwrap());
    assert_eq!(String::from_utf8_lossy(&oa.stdout), "a\n");
    assert_eq!(String::from_utf8_lossy(&ob.stdout), "b\n");
    assert_eq!(a.changes().unwrap().paths(), ["src/lib.rs"]);
    assert_eq!(b.changes().unwrap().paths(), ["README.md", "src/lib.rs"]);
    assert_eq!(std::fs::read(f.path().join("src/lib.rs")).unwrap(), content("src/lib.rs"));
}

/// The command reads the wrapper's stdin (the prompt is given on stdin).
fn stdin_reaches_the_command(mode: Mode) {
    let f = fixture(true);
    let ws = workspace(&f, mode);
    let mut child = command_for(&ws, "tr a-z A-Z").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"the prompt\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "THE PROMPT\n");
}

/// A project reached through a symlink (`/home` -> `/data/home`, macOS-like
/// `/tmp`): changes are seen and integrated all the same.
fn symlinked_project_path(mode: Mode) {
    let f = fixture(true);
    let link = parent(&f).with_file_name("link-to-project");
    std::os::unix::fs::symlink(f.path(), &link).unwrap();
    let mut ws = Workspace::create(Path::new(CASSIST), &link, &parent(&f), mode, "via link").unwrap();
    assert_eq!(ws.root, f.path(), "the project path is canonical");
    run_ok(&ws, "echo 'pub fn more() {}' >> src/lib.rs; rm README.md");
    let cs = ws.changes().unwrap();
    assert_eq!(cs.paths(), ["README.md", "src/lib.rs"], "change set:\n  {}", describe(&cs));
    assert_eq!(std::fs::read(f.path().join("src/lib.rs")).unwrap(), content("src/lib.rs"), "the user's tree");
    ws.integrate(&cs).unwrap();
    assert!(!f.path().join("README.md").exists());
    assert!(std::fs::read_to_string(f.path().join("src/lib.rs")).unwrap().contains("more"));
}

// ---------------------------------------------------------------------------
// Processes (overlay: the PID namespace)
// ---------------------------------------------------------------------------

/// A background process the command leaves behind does not survive the
/// wrapper.
#[test]
fn overlay_background_process_does_not_survive() {
    if !overlay_available() {
        return;
    }
    let f = fixture(true);
    let ws = workspace(&f, Mode::Overlay);
    let marker = unique_marker("bg");
    let out = run_ok(
        &ws,
        &format!("sh -c 'sleep 300; exit 0' {marker} >/dev/null 2>&1 & sleep 0.2; kill -0 $! && echo started"),
    );
    assert_eq!(out, "started\n");
    let left = processes_with(&marker);
    kill_all(&left);
    assert!(left.is_empty(), "processes left behind: {left:?}");
}

/// SIGTERM to the wrapper reaches the command (which may trap it), and its
/// children do not survive.
#[test]
fn overlay_sigterm_is_forwarded() {
    if !overlay_available() {
        return;
    }
    let f = fixture(true);
    let ws = workspace(&f, Mode::Overlay);
    let marker = unique_marker("term");
    let ready = parent(&f).join("ready");
    let got = parent(&f).join("got-term");
    let script = format!(
        "trap 'echo got-term > {got}; exit 3' TERM; sh -c 'sleep 300; exit 0' {marker} >/dev/null 2>&1 & \
         touch {ready}; wait",
        got = got.display(),
        ready = ready.display()
    );
    let mut child = command_for(&ws, &script).spawn().unwrap();
    wait_until(Duration::from_secs(10), "the command started", || ready.exists());
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = child.wait().unwrap();
    let left = processes_with(&marker);
    kill_all(&left);
    assert_eq!(status.code(), Some(3), "{status}");
    assert_eq!(std::fs::read_to_string(&got).unwrap(), "got-term\n");
    assert!(left.is_empty(), "processes left behind: {left:?}");
}

/// GAP (src/sandbox.rs, `init`): the PID namespace keeps the host's
/// `/proc`, so inside the workspace `ps`/`pgrep` list every process of the
/// machine with host PIDs that mean nothing there (`kill $(pgrep -f server)`
/// fails, or hits the namespace process that happens to have that number),
/// and the agent can read `/proc/<pid>/environ` of cassist itself (same
/// uid), secrets included, whatever the allowlisted environment. Fix: in
/// the init, after the overlay, mount a fresh proc on /proc
/// (`mount("proc", "/proc", "proc", MS_NOSUID|MS_NODEV|MS_NOEXEC)`); it
/// works unprivileged here (`unshare -Urpm --fork --mount-proc ps -e` as
/// nobody lists 3 processes).
#[test]
fn overlay_proc_shows_only_the_namespace() {
    if !overlay_available() {
        return;
    }
    let f = fixture(true);
    let ws = workspace(&f, Mode::Overlay);
    let me = std::process::id();
    let out = run(&ws, &format!("test ! -e /proc/{me} && test \"$(cat /proc/1/comm)\" != systemd"));
    assert!(out.status.success(), "the test process (host PID {me}) is visible inside the workspace");
}

/// A command killed by a signal: the wrapper ends by the same signal.
fn killed_by_signal(mode: Mode) {
    let f = fixture(true);
    let ws = workspace(&f, mode);
    for sig in [9, 15] {
        let out = run(&ws, &format!("kill -{sig} $$"));
        assert_eq!(out.status.signal(), Some(sig), "kill -{sig}: wrapper ended with {}", out.status);
    }
}

#[test]
fn copy_killed_by_signal() {
    killed_by_signal(Mode::Copy);
}

/// BUG (src/sandbox.rs, `init`): the namespace's init turns the command's
/// death by signal N into `exit(128 + N)`; the outer wrapper then sees a
/// normal exit and exits 128 + N instead of re-raising N (`exit_like` only
/// re-raises when the init itself was signalled, which never happens). The
/// runner cannot tell "killed by SIGKILL" (e.g. the OOM killer) from "exited
/// 137". Fix: let the init report the signal to the wrapper (a pipe, or a
/// status byte) and re-raise it in the wrapper.
#[test]
fn overlay_killed_by_signal() {
    if overlay_available() {
        killed_by_signal(Mode::Overlay);
    }
}

// ---------------------------------------------------------------------------
// Known bugs and gaps (ignored until fixed; each fails today)
// ---------------------------------------------------------------------------

/// Integration or rollback leaves empty folders behind.
fn folders_follow_the_files(mode: Mode) {
    let f = fixture(true);
    let before = tree(f.path());
    let mut ws = workspace(&f, mode);
    run_ok(&ws, AGENT);
    let cs = ws.changes().unwrap();
    let open = ws.begin_integration(&cs).expect("integrate");
    let dirs = |root: &Path| -> Vec<String> {
        tree(root)
            .into_iter()
            .filter(|(p, n)| matches!(n, Node::Dir { .. }) && !p.starts_with(".git") && !p.contains("__pycache__"))
            .map(|(p, _)| p)
            .collect()
    };
    // `rm -r docs` in the workspace: no docs/ after integration.
    let left: Vec<String> = dirs(f.path()).into_iter().filter(|d| d.starts_with("docs")).collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    open.roll_back().unwrap();
    // new/ was made for new/place.txt: gone again after the rollback.
    assert_same("rollback left folders", &before, &tree(f.path()));
}

/// BUG (src/workspace.rs, `remove_file`/`rollback`): deleting every file of
/// a folder leaves the empty folder (`rm -r docs` in the workspace leaves
/// `docs/` and `docs/sub/` in the user's tree), and a rollback leaves the
/// folders `write_file` created (`new/`). git does not see empty folders,
/// but the user does, and Python takes an empty folder for a namespace
/// package. Fix: after removing a file, remove its parents while empty (up
/// to the root); in rollback, the same for files that did not exist.
#[test]
fn copy_folders_follow_the_files() {
    folders_follow_the_files(Mode::Copy);
}

#[test]
fn overlay_folders_follow_the_files() {
    if overlay_available() {
        folders_follow_the_files(Mode::Overlay);
    }
}

/// A folder replaced by a file of the same name.
fn folder_replaced_by_file(mode: Mode) {
    let f = fixture(true);
    let mut ws = workspace(&f, mode);
    run_ok(&ws, "set -e; rm -r docs; echo 'now a file' > docs");
    let cs = ws.changes().unwrap();
    let got = by_path(&cs);
    assert_eq!(
        got.keys().map(String::as_str).collect::<Vec<_>>(),
        ["docs", "docs/api.md", "docs/guide.md", "docs/sub/deep.md"],
        "change set:\n  {}",
        describe(&cs)
    );
    ws.integrate(&cs).expect("integrate");
    assert_eq!(std::fs::read(f.path().join("docs")).unwrap(), b"now a file\n");
}

/// BUG (src/workspace.rs): a folder replaced by a file of the same name.
/// Overlay: `overlay_changes` sees a regular upper file over a lower folder
/// and reports only `docs` Added, not the deletion of `docs/*` (no
/// whiteouts are made for a replaced folder). Both modes: `integrate`
/// refuses with `Conflict(["docs"])` (the folder exists now and is not in
/// the manifest, which lists files only), and applying in path order would
/// write `docs` before removing `docs/*`. Fix: in the upper walk, a file
/// over a lower folder also deletes the files below it; in `integrate`,
/// ignore folders that only hold deleted files in the check, and apply
/// deletions before writes.
#[test]
fn copy_folder_replaced_by_file() {
    folder_replaced_by_file(Mode::Copy);
}

#[test]
fn overlay_folder_replaced_by_file() {
    if overlay_available() {
        folder_replaced_by_file(Mode::Overlay);
    }
}

/// A `.gitignore` the agent adds or edits applies to its own files.
fn agent_gitignore_applies(mode: Mode) {
    let f = fixture(true);
    let mut ws = workspace(&f, mode);
    run_ok(
        &ws,
        "set -e; mkdir -p tool/build; printf 'build/\\n' > tool/.gitignore; echo src > tool/main.rs; \
         echo obj > tool/build/out.o",
    );
    let cs = ws.changes().unwrap();
    assert_eq!(cs.paths(), ["tool/.gitignore", "tool/main.rs"], "change set:\n  {}", describe(&cs));
}

#[test]
fn copy_agent_gitignore_applies() {
    agent_gitignore_applies(Mode::Copy);
}

/// BUG (src/workspace.rs, `changes`): the modes disagree. The copy mode
/// lists the copy's files with the copy's `.gitignore` files (the agent's
/// included), the overlay filters with the project's only, so
/// `tool/build/out.o` (ignored by the agent's new `tool/.gitignore`) is a
/// change in the overlay and not in the copy. `git status` inside the
/// workspace agrees with the copy. Fix: build `IgnoreCheck` over the upper
/// dir's `.gitignore` files first (they shadow the project's), or read the
/// merged view.
#[test]
fn overlay_agent_gitignore_applies() {
    if overlay_available() {
        agent_gitignore_applies(Mode::Overlay);
    }
}

/// A same-size edit with the old mtime kept (`cp -p`, `rsync -t`, `tar x`,
/// `touch -r`): the file changed, its stamp (size, mtime, inode) did not.
fn conflict_with_mtime_kept(mode: Mode) {
    let f = fixture(true);
    let mut ws = workspace(&f, mode);
    run_ok(&ws, "echo agent >> src/lib.rs");
    let cs = ws.changes().unwrap();
    let path = f.path().join("src/lib.rs");
    let old = std::fs::metadata(&path).unwrap();
    std::fs::write(&path, b"pub fn RUN() {}\n").unwrap(); // same length
    let st =
        Command::new("touch").arg("-d").arg(format!("@{}.{:09}", old.mtime(), old.mtime_nsec())).arg(&path).status();
    assert!(st.unwrap().success());
    match ws.integrate(&cs) {
        Err(IntegrateError::Conflict(files)) => assert_eq!(conflict_paths(&files), ["src/lib.rs"]),
        other => panic!("the user's edit would be overwritten: {other:?}"),
    }
}

/// Integration called directly, with changes no workspace would give:
/// each one that must never be written refuses the whole set, and the
/// tree is left as it was.
#[test]
fn integrate_refuses_what_must_never_land_even_called_directly() {
    use cassist_core::changes::{S_IFLNK, S_IFREG};
    let f = fixture(true);
    let file = |path: &str, mode: u32| Change {
        path: path.into(),
        kind: ChangeKind::Added,
        old: None,
        new: Some(b"#!/bin/sh\n".to_vec()),
        mode,
        hazard: None,
        old_mode: None,
        base_unknown: false,
    };
    let ok = file("src/ok.rs", S_IFREG | 0o644);
    let cases = [
        (file("bin/sh", S_IFREG | 0o4755), "setuid"),
        (file("bin/sticky", S_IFREG | 0o1777), "sticky"),
        (
            Change { new: Some(b"/etc/passwd".to_vec()), ..file("passwd", S_IFLNK | 0o777) },
            "leading out of the project",
        ),
        (Change { new: Some(b"../../x".to_vec()), ..file("d/up", S_IFLNK | 0o777) }, "leading out of the project"),
        (file("../outside.txt", S_IFREG | 0o644), "not a plain path"),
        (file("/tmp/abs.txt", S_IFREG | 0o644), "not a plain path"),
        (file(".git/hooks/pre-commit", S_IFREG | 0o755), "own folder"),
        (file("sub/.cassist/x", S_IFREG | 0o644), "own folder"),
        (
            Change { kind: ChangeKind::Renamed { from: ".git/config".into() }, ..file("config", S_IFREG | 0o644) },
            "own folder",
        ),
        (file("fifo", 0o010644), "neither a file nor a symlink"),
        (
            Change { hazard: Some(Hazard::Special(Special::BlockDevice)), new: None, ..file("sda", 0o060600) },
            "a block device",
        ),
        (
            Change { hazard: Some(Hazard::NonUtf8Name(b"b\xff".to_vec())), ..file("b\\xff", S_IFREG | 0o644) },
            "not valid UTF-8",
        ),
        (
            Change { hazard: Some(Hazard::Unread { size: 1 << 40 }), new: None, ..file("huge", S_IFREG | 0o644) },
            "over the size limits",
        ),
    ];
    let before = tree(f.path());
    for (bad, why) in cases {
        let path = bad.path.clone();
        let set = ChangeSet { changes: vec![ok.clone(), bad] };
        match cassist_run::workspace::integrate(f.path(), &set) {
            Err(IntegrateError::Refused(refused)) => {
                assert_eq!(refused.len(), 1, "{refused:?}");
                assert!(refused[0].starts_with(&format!("{path}: ")) && refused[0].contains(why), "{refused:?}");
            }
            other => panic!("{path}: expected a refusal ({why}), got {other:?}"),
        }
        assert_same(&format!("{path}: a refused integration changed the tree"), &before, &tree(f.path()));
        assert!(!Path::new("/tmp/abs.txt").exists());
    }
}

/// BUG (src/workspace.rs, `Stamp`/`integrate`): the conflict check compares
/// size, mtime and inode only. An edit that keeps the size and the mtime
/// (`cp -p`, `rsync -t`, `tar x`, `touch -r`) goes unnoticed and the user's
/// edit is overwritten. Fix: add ctime to `Stamp` and compare it (no
/// user-space call can set it back); `mode` is stamped but not compared
/// either.
#[test]
fn copy_conflict_with_mtime_kept() {
    conflict_with_mtime_kept(Mode::Copy);
}

#[test]
fn overlay_conflict_with_mtime_kept() {
    if overlay_available() {
        conflict_with_mtime_kept(Mode::Overlay);
    }
}

// ---------------------------------------------------------------------------
// Mode selection
// ---------------------------------------------------------------------------

/// `CASSIST_WORKSPACE=copy` forces the copy mode, with no reason given.
/// Environment changes are process-wide, so this runs itself again in a
/// child process with the variable set.
#[test]
fn detect_mode_env_forces_copy() {
    if std::env::var("CASSIST_WORKSPACE").is_ok_and(|v| v == "copy") {
        let tmp = std::env::temp_dir();
        assert_eq!(detect_mode(Path::new(CASSIST), &tmp, &tmp), (Mode::Copy, None));
        return;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &test_name("detect_mode_env_forces_copy"), "--nocapture", "--test-threads=1"])
        .env("CASSIST_WORKSPACE", "copy")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains("1 passed"), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
}

/// A project path overlayfs cannot name (`,` or `:`) falls back to copying.
#[test]
fn detect_mode_refuses_unmountable_paths() {
    for name in ["a,b", "a:b"] {
        let (mode, why) = detect_mode(Path::new(CASSIST), &Path::new("/tmp").join(name), Path::new("/tmp"));
        assert_eq!(mode, Mode::Copy, "{name}");
        assert!(why.unwrap().contains(name), "{name}: the reason names the path");
    }
    assert_eq!(Mode::Overlay.as_str(), "overlay");
    assert_eq!(Mode::Copy.as_str(), "copy");
}

// ---------------------------------------------------------------------------
// Unprivileged
// ---------------------------------------------------------------------------

/// Runs the test `name` of this binary again as `nobody` when run as root,
/// where mode 000 folders are no obstacle and a test of their removal would
/// prove nothing. Returns whether the caller should run the test body here.
fn rerun_unprivileged(name: &str) -> bool {
    if !nix::unistd::getuid().is_root() || std::env::var_os("CASSIST_TEST_UNPRIVILEGED").is_some() {
        return true;
    }
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&exe)
        .args(["--exact", &test_name(name), "--nocapture", "--test-threads=1"])
        .env("CASSIST_TEST_UNPRIVILEGED", "1")
        .env("HOME", "/tmp")
        .env_remove("TMPDIR")
        .output();
    match out {
        Ok(out) => {
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            if !out.status.success() && stderr.contains("setpriv") {
                eprintln!("SKIPPED: cannot run as nobody here: {stderr}");
            } else {
                assert!(out.status.success() && stdout.contains("1 passed"), "as nobody:\n{stdout}\n{stderr}");
            }
        }
        Err(e) => eprintln!("SKIPPED: cannot run as nobody here (setpriv: {e})"),
    }
    false
}

/// Drop removes an overlay workspace as an unprivileged user too, whose
/// `work/work` folder (mode 000, made by the kernel) `remove_dir_all` alone
/// cannot enter.
#[test]
fn overlay_drop_removes_the_workspace_unprivileged() {
    if rerun_unprivileged("overlay_drop_removes_the_workspace_unprivileged") && overlay_available() {
        drop_removes_the_workspace(Mode::Overlay);
        change_kinds(Mode::Overlay);
    }
}

// ---------------------------------------------------------------------------
// Measurement (bench/workspace.sh runs this)
// ---------------------------------------------------------------------------

/// Times workspace set-up through the library on the repository named by
/// `CASSIST_BENCH_REPO`: create + run `true` inside, then `changes()`, the
/// manifest's completion and the drop, `CASSIST_BENCH_RUNS` times (default
/// 10) in the overlay and `CASSIST_BENCH_RUNS_COPY` times (default 5) in the
/// copy mode. Prints one `BENCH` line per mode with medians in ms.
#[test]
#[ignore = "measurement; run by bench/workspace.sh"]
fn bench_workspace_setup() {
    let Some(repo) = std::env::var_os("CASSIST_BENCH_REPO") else {
        eprintln!("set CASSIST_BENCH_REPO to a repository");
        return;
    };
    let repo = PathBuf::from(repo).canonicalize().unwrap();
    let runs_of = |var: &str, default: usize| -> usize {
        std::env::var(var).ok().and_then(|v| v.parse().ok()).unwrap_or(default).max(1)
    };
    let parent = tempfile::Builder::new().prefix("cassist-bench-ws-").tempdir().unwrap();
    let median = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let n = v.len();
        if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
    };
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mut modes = vec![Mode::Copy];
    if overlay_available() {
        modes.insert(0, Mode::Overlay);
    }
    for mode in modes {
        let runs = match mode {
            Mode::Overlay => runs_of("CASSIST_BENCH_RUNS", 10),
            Mode::Copy => runs_of("CASSIST_BENCH_RUNS_COPY", 5),
        };
        let (mut setup, mut changes, mut manifest, mut dropping) = (vec![], vec![], vec![], vec![]);
        // One warm-up run, not counted.
        for i in 0..=runs {
            let t0 = Instant::now();
            let mut ws = Workspace::create(Path::new(CASSIST), &repo, parent.path(), mode, "bench").unwrap();
            let argv = {
                let mut argv = ws.wrap(vec!["true".into()]).unwrap();
                if Path::new(&argv[0]) == std::env::current_exe().unwrap() {
                    argv[0] = CASSIST.into();
                }
                argv
            };
            let st = Command::new(&argv[0]).args(&argv[1..]).current_dir(&ws.dir).status().unwrap();
            assert!(st.success());
            let t1 = Instant::now();
            let cs = ws.changes().unwrap();
            assert!(cs.is_empty());
            let t2 = Instant::now();
            ws.integrate(&ChangeSet::default()).unwrap();
            let t3 = Instant::now();
            drop(ws);
            let t4 = Instant::now();
            if i > 0 {
                setup.push(ms(t1 - t0));
                changes.push(ms(t2 - t1));
                manifest.push(ms(t3 - t2));
                dropping.push(ms(t4 - t3));
            }
        }
        println!(
            "BENCH mode={} runs={runs} setup_ms={:.1} changes_ms={:.1} manifest_wait_ms={:.1} drop_ms={:.1}",
            mode.as_str(),
            median(setup),
            median(changes),
            median(manifest),
            median(dropping)
        );
    }
}

/// Each command's overlay is mounted `volatile` where the kernel has it
/// (5.10+): the end of a command then does not `syncfs` the whole file
/// system the layers live on (whatever else is dirty on it too). A
/// volatile layer's work folder is refused by the kernel as the mount left
/// it, yet the next command of the same layer mounts it again, and what
/// both wrote is the change.
#[test]
fn overlay_layers_are_volatile_and_mount_again() {
    if overlay_available() {
        volatile_layers_mount_again();
    }
}

/// The same as an unprivileged user, for whom the kernel's mode 000 work
/// folder left by the last mount is no open door.
#[test]
fn overlay_layers_mount_again_unprivileged() {
    if rerun_unprivileged("overlay_layers_mount_again_unprivileged") && overlay_available() {
        volatile_layers_mount_again();
    }
}

fn volatile_layers_mount_again() {
    let f = fixture(true);
    let mut ws = workspace(&f, Mode::Overlay);
    let dir = ws.dir.display().to_string();
    let mounts = run_ok(&ws, "cat /proc/self/mountinfo; echo one > one.txt");
    let overlay = mounts
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(dir.as_str()) && l.contains(" - overlay "))
        .unwrap_or_else(|| panic!("no overlay at {dir} in:\n{mounts}"));
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let version: Vec<u32> = release.split(['.', '-']).take(2).filter_map(|n| n.trim().parse().ok()).collect();
    if version >= vec![5, 10] {
        // Shown as `fsync=volatile` by newer kernels.
        let volatile = overlay.split([' ', ',']).any(|o| o == "volatile" || o == "fsync=volatile");
        assert!(volatile, "not volatile: {overlay}");
    }
    run_ok(&ws, "echo two > two.txt");
    run_ok(&ws, "echo three >> one.txt");
    let cs = ws.changes().unwrap();
    let mut paths: Vec<&str> = cs.changes.iter().map(|c| c.path.as_str()).collect();
    paths.sort();
    assert_eq!(paths, ["one.txt", "two.txt"], "{}", describe(&cs));
    let one = cs.changes.iter().find(|c| c.path == "one.txt").unwrap();
    assert_eq!(one.new.as_deref(), Some(&b"one\nthree\n"[..]));
}

/// cassist starts the wrapper without a hook between fork and exec (no
/// parent-death signal set for it): the wrapper sets its own and checks
/// that the process it was told (`--parent`, cassist) is still its parent.
/// Told a parent that is not its own — as when cassist died before the
/// wrapper got that far — it ends at once, and takes its command with it,
/// in both modes.
#[test]
fn a_wrapper_whose_cassist_is_gone_ends_with_its_command() {
    let mut modes = vec![false];
    if overlay_available() {
        modes.push(true);
    }
    for namespaces in modes {
        let marker = unique_marker("orphan-wrapper");
        let mut args: Vec<String> = vec!["__sandbox-exec".into(), "--cwd".into(), "/tmp".into()];
        if namespaces {
            args.push("--namespaces".into());
        }
        // PID 1 is never the wrapper's parent here: the test is.
        args.extend(["--parent", "1", "--", "sh", "-c", &format!("sleep 30 # {marker}")].map(String::from));
        let started = Instant::now();
        let out = Command::new(CASSIST).args(&args).stdin(Stdio::null()).output().unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "namespaces {namespaces}: the wrapper waited for its command"
        );
        assert!(
            out.status.signal() == Some(9) || out.status.code() == Some(128 + 9),
            "namespaces {namespaces}: {:?} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let what = format!("namespaces {namespaces}: no process of its command left");
        wait_until(Duration::from_secs(5), &what, || processes_with(&marker).is_empty());
    }
}
