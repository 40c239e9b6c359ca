//! What every area of the suite shares: the fixture builder ([`Test`] →
//! [`Project`]), the command runner ([`Cmd`] → [`Output`] or [`Running`]),
//! the one sandbox check ([`sandbox_or_skip`]), the real remote-cache
//! servers ([`S3Server`], [`TurboServer`], [`SilentServer`]), and small
//! helpers over trees, processes and reports.

mod cmd;
pub mod mcp;
mod project;
mod sandbox;
mod servers;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use serde_json::Value;

pub use cmd::{Cmd, Key, Output};
pub use project::{Project, TRUSTED_NO_TESTS, Test, sh_agent_block};
pub use sandbox::{Sandbox, sandbox_or_skip};
pub use servers::{FloodServer, S3Server, SilentServer, TurboServer, curl, curl_with_body, run_installer, server_tool};

/// The environment that makes cassist use copy workspaces.
pub const COPY: &[(&str, &str)] = &[("CASSIST_WORKSPACE", "copy")];

/// Two tests of one case `fn $case(env: &[(&str, &str)])`: `$overlay` with
/// no variable (the overlay, where the kernel has it), `$copy` with
/// [`COPY`].
macro_rules! in_both_modes {
    ($case:ident: $overlay:ident, $copy:ident) => {
        #[test]
        fn $overlay() {
            $case(&[]);
        }

        #[test]
        fn $copy() {
            $case($crate::support::COPY);
        }
    };
}
pub(crate) use in_both_modes;

/// Whether `env` asks for copy workspaces ([`COPY`]).
pub fn copy_mode(env: &[(&str, &str)]) -> bool {
    env.iter().any(|(k, v)| *k == "CASSIST_WORKSPACE" && *v == "copy")
}

/// Whether the sandbox a case run with `env` needs is here: Landlock, and
/// the overlay unless `env` asks for copy mode. Skips (or fails under
/// `CASSIST_REQUIRE_SANDBOX=1`) when it is not.
#[track_caller]
pub fn sandboxed(env: &[(&str, &str)]) -> bool {
    (copy_mode(env) || sandbox_or_skip(Sandbox::Overlay)) && sandbox_or_skip(Sandbox::Landlock)
}

/// The real binary under test.
pub const CASSIST: &str = env!("CARGO_BIN_EXE_cassist");

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn fixtures() -> PathBuf {
    repo().join("fixtures")
}

/// Writes a file, creating its folders.
pub fn write(path: &Path, text: impl AsRef<[u8]>) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// Writes an executable file (mode 755), creating its folders.
pub fn write_executable(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    write(path, text);
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
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

// ---------------------------------------------------------------------------
// git

/// `cmd` with no user or system git configuration and a fixed author.
pub fn git_env(cmd: &mut Command) -> &mut Command {
    cmd.env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "test")
        .env("GIT_AUTHOR_EMAIL", "test@example.com")
        .env("GIT_COMMITTER_NAME", "test")
        .env("GIT_COMMITTER_EMAIL", "test@example.com")
        .env("GIT_TERMINAL_PROMPT", "0")
}

/// `git ARGS` in `dir`; its stdout. Fails the test when git fails.
#[track_caller]
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = git_env(&mut Command::new("git")).current_dir(dir).args(args).output().expect("git");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Makes `dir` a git repository with one commit of everything in it.
pub fn git_commit_all(dir: &Path) {
    git(dir, &["init", "-q"]);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-qm", "init"]);
}

// ---------------------------------------------------------------------------
// Trees

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

/// Every file under `dir` (recursively) with its bytes.
pub fn files_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().is_file())
        .map(|e| (e.path().to_path_buf(), std::fs::read(e.path()).unwrap()))
        .collect()
}

pub fn contains_bytes(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Fails when a file under `dir` is a temp file left half-written
/// (`.tmp*`).
#[track_caller]
pub fn assert_no_temp_files(dir: &Path) {
    for e in walkdir::WalkDir::new(dir).into_iter().flatten() {
        let name = e.file_name().to_string_lossy();
        assert!(!name.starts_with(".tmp"), "half-written file left: {}", e.path().display());
    }
}

// ---------------------------------------------------------------------------
// Processes

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

/// A marker unique to this test process and call, for `/proc/*/cmdline`.
pub fn unique_marker(what: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("cassist-test-{what}-{}-{nanos}", std::process::id())
}

/// Sends `signal` to process `pid`.
pub fn signal(pid: u32, signal: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal).unwrap();
}

/// Waits for `child` at most `limit`, killing it past that.
#[track_caller]
pub fn wait_with_limit(child: &mut Child, limit: Duration) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("cassist did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `what` every 20 ms until it holds; panics after `limit`.
#[track_caller]
pub fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The workspaces left in `tmp` (cassist's TMPDIR) by the current user.
pub fn workspaces_in(tmp: &Path) -> Vec<PathBuf> {
    let dir = tmp.join(format!("cassist-{}", nix::unistd::getuid()));
    std::fs::read_dir(&dir).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default()
}

// ---------------------------------------------------------------------------
// Text and JSON

/// The text of one `# Section` of a prompt, up to the next heading.
#[track_caller]
pub fn section<'a>(prompt: &'a str, heading: &str) -> &'a str {
    let start = prompt.find(&format!("# {heading}\n")).unwrap_or_else(|| panic!("no # {heading} in:\n{prompt}"));
    let body = &prompt[start + heading.len() + 3..];
    let end = body.find("\n# ").map_or(body.len(), |e| e + 1);
    &body[..end]
}

/// `s` with every run of whitespace made one space (diagnostics wrap).
pub fn flat(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The strings of a JSON array.
#[track_caller]
pub fn strings(v: &Value) -> Vec<String> {
    v.as_array().unwrap_or_else(|| panic!("not an array: {v}")).iter().map(|s| s.as_str().unwrap().to_owned()).collect()
}

/// The entry named `name` of a document's `tasks` array (`plan --json`,
/// `--report-json`).
#[track_caller]
pub fn task<'a>(json: &'a Value, name: &str) -> &'a Value {
    json["tasks"]
        .as_array()
        .unwrap_or_else(|| panic!("no tasks array in {json}"))
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no task {name} in {json}"))
}

/// The names in a document's `tasks` array, in order.
pub fn names(json: &Value) -> Vec<String> {
    json["tasks"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect()
}

/// `[(a, b)]` as an ordered map of owned strings.
pub fn map(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
    pairs.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect()
}
