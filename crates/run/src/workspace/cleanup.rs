//! Removing workspaces: a task's own when it ends (at once, or on a
//! background thread), those a killed cassist left ([`remove_stale`]),
//! those kept for the user ([`remove_kept`]); and the marks that tell them
//! apart (whose a workspace is, whether it is kept).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::Error;
use super::layers::LAYERS;

/// The file of a workspace folder that names the cassist process it is
/// for.
const OWNER: &str = "owner.pid";
/// The marker of a kept workspace ([`KeptMarker`]).
const KEPT: &str = "kept";

/// What a kept workspace's marker says: whose task it was.
#[derive(serde::Serialize, serde::Deserialize)]
struct KeptMarker {
    task: String,
    root: PathBuf,
}

/// Marks the workspace folder `base` as this process's: once the process
/// is gone, [`remove_stale`] removes it.
pub(super) fn mark_owner(base: &Path) -> std::io::Result<()> {
    std::fs::write(base.join(OWNER), std::process::id().to_string())
}

/// Marks the workspace folder `base` as kept for the user, the task
/// `task`'s of the project at `root`: [`remove_stale`] leaves it,
/// [`remove_kept`] removes it.
pub(super) fn mark_kept(base: &Path, task: &str, root: &Path) -> Result<(), Error> {
    let marker = KeptMarker { task: task.to_owned(), root: root.to_path_buf() };
    std::fs::write(base.join(KEPT), serde_json::to_vec(&marker)?)?;
    Ok(())
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
pub(super) fn remove_later(base: PathBuf) {
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

/// Waits until every workspace given to [`Workspace::remove_in_background`](super::Workspace::remove_in_background)
/// (and every sweep of [`remove_stale_in_background`]) is removed (before
/// cassist exits).
pub fn finish_removals() {
    let remover = REMOVER.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some((tx, handle)) = remover {
        drop(tx);
        let _ = handle.join();
    }
}

/// Removes the workspaces under `parent` whose cassist process is gone (a
/// run killed with SIGKILL cannot clean up after itself), and such a
/// process's integration layers, but the kept workspaces
/// ([`Workspace::keep`](super::Workspace::keep)). Returns how many.
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
/// at `root` ([`Workspace::keep`](super::Workspace::keep); the caller holds the project's lock,
/// so no run of it is keeping one now). Returns how many, and the bytes
/// they held.
pub fn remove_kept(parent: &Path, root: &Path) -> (usize, u64) {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    remove_kept_where(parent, |_, marker| marker.root == root)
}

/// Removes the kept workspaces under `parent` whose marker (at `mark`)
/// `pick` chooses; how many, and the bytes they held.
fn remove_kept_where(parent: &Path, mut pick: impl FnMut(&Path, &KeptMarker) -> bool) -> (usize, u64) {
    let (mut removed, mut bytes) = (0, 0);
    let Ok(rd) = std::fs::read_dir(parent) else { return (0, 0) };
    for e in rd.flatten() {
        let dir = e.path();
        let mark = dir.join(KEPT);
        let Some(marker) = std::fs::read(&mark).ok().and_then(|b| serde_json::from_slice::<KeptMarker>(&b).ok()) else {
            continue;
        };
        if !pick(&mark, &marker) {
            continue;
        }
        let size = disk_usage(&dir);
        remove_tree(&dir);
        if !dir.exists() {
            removed += 1;
            bytes += size;
        }
    }
    (removed, bytes)
}

/// How long a workspace kept for a project that no longer exists stays
/// before [`remove_orphaned_kept`] removes it (time for a project moved
/// or deleted by mistake to come back).
pub const ORPHAN_GRACE: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// Removes the workspaces under `parent` kept for a project whose folder
/// no longer exists, kept longer than `grace` ago (the time of the mark):
/// no run of that project will remove them, so any project's `cache gc`
/// does. Returns how many, and the bytes they held.
pub fn remove_orphaned_kept(parent: &Path, grace: std::time::Duration) -> (usize, u64) {
    let now = std::time::SystemTime::now();
    remove_kept_where(parent, |mark, marker| {
        // Gone for sure: not there, and not hidden behind a folder this
        // user cannot read.
        let gone =
            matches!(std::fs::symlink_metadata(&marker.root), Err(e) if e.kind() == std::io::ErrorKind::NotFound);
        let kept_since = std::fs::metadata(mark).and_then(|m| m.modified()).ok();
        let old = kept_since.and_then(|t| now.duration_since(t).ok()).is_some_and(|age| age > grace);
        gone && old
    })
}

/// The bytes a folder tree holds on disk.
fn disk_usage(dir: &Path) -> u64 {
    walkdir::WalkDir::new(dir).into_iter().flatten().filter_map(|e| e.metadata().ok()).map(|m| m.blocks() * 512).sum()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder kept for the project at `root`, marked `age` ago.
    fn kept(parent: &Path, name: &str, root: &Path, age: std::time::Duration) -> PathBuf {
        let dir = parent.join(name);
        std::fs::create_dir_all(dir.join("tree")).unwrap();
        std::fs::write(dir.join("tree/file"), "x").unwrap();
        mark_kept(&dir, "t", root).unwrap();
        let when = std::time::SystemTime::now() - age;
        std::fs::File::options().write(true).open(dir.join(KEPT)).unwrap().set_modified(when).unwrap();
        dir
    }

    #[test]
    fn only_old_workspaces_of_projects_that_are_gone_are_removed() {
        let parent = tempfile::tempdir().unwrap();
        let live = tempfile::tempdir().unwrap();
        let gone = live.path().join("moved-away");
        let day = std::time::Duration::from_secs(24 * 3600);
        let orphan = kept(parent.path(), "orphan", &gone, 8 * day);
        let recent = kept(parent.path(), "recent", &gone, 2 * day);
        let alive = kept(parent.path(), "alive", live.path(), 30 * day);
        // Not a kept workspace at all.
        std::fs::create_dir_all(parent.path().join("other")).unwrap();
        let (removed, bytes) = remove_orphaned_kept(parent.path(), ORPHAN_GRACE);
        assert_eq!(removed, 1);
        assert!(bytes > 0);
        assert!(!orphan.exists() && recent.exists() && alive.exists() && parent.path().join("other").exists());
        // Once the grace is over, the other one goes too.
        assert_eq!(remove_orphaned_kept(parent.path(), day).0, 1);
        assert!(!recent.exists() && alive.exists());
    }
}
