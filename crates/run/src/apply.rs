//! `cassist __apply-changes SPEC`: the helper that merges a stored change
//! into the folder it is started in. The runner starts it inside a task's
//! sandbox to replay a recorded change onto the task's workspace, so the
//! write happens with the task's own confinement, never cassist's.
//!
//! Each path is a three-way merge ([`cassist_core::merge`]): base = the
//! stored old content (and mode), ours = what the folder holds now (the
//! user's tree, plus what landed before), theirs = the stored new content.
//! Every path is decided before anything is written: a conflict on any
//! path writes nothing and names the paths.

use std::collections::HashSet;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use cassist_core::changes::{Change, ChangeKind, S_IFLNK, S_IFMT};
use cassist_core::limits::Limits;
use cassist_core::merge::{Merged, Version, merge, merge_unknown_base};
use cassist_core::store::{Store, StoredChange};

/// Why the helper wrote nothing, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The SPEC file does not say what it must.
    #[error("{0}")]
    Spec(&'static str),
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    /// A change names what is never written (checked before anything is).
    #[error("refused to write {path}: {why}")]
    Refused { path: String, why: String },
    /// A stored object the change writes cannot be read.
    #[error("{0}")]
    Object(cassist_core::store::ObjectError),
    /// The change does not merge into what the folder holds: each path
    /// with why. Nothing was written.
    #[error("replay would conflict: {}", .0.join("; "))]
    Conflicts(Vec<String>),
    #[error("{0}")]
    Os(std::io::Error),
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
}

/// The words of a conflict at a path, where the merge rule gives none.
const FOLDER_IN_THE_WAY: &str = "a folder holding other files stands where the change writes a file";
const SPECIAL_IN_THE_WAY: &str = "neither a file nor a symlink stands there now";
const SYMLINK_ON_THE_WAY: &str = "a symlink stands on its way";
const FILE_ON_THE_WAY: &str = "a file stands where the change needs a folder";

/// `cassist __apply-changes SPEC`: merges a stored change into the current
/// folder. SPEC is `{"store": DIR, "changes": [StoredChange], "file_size":
/// N}` (`file_size`, optional: the largest file of the folder read for a
/// merge; a larger one there conflicts).
pub fn apply_changes(spec: &Path) -> Result<(), ApplyError> {
    let text = std::fs::read(spec).map_err(|e| ApplyError::Io(format!("cannot read {}", spec.display()), e))?;
    let v: serde_json::Value = serde_json::from_slice(&text)?;
    let store_dir = v["store"].as_str().ok_or(ApplyError::Spec("no store"))?;
    let changes: Vec<StoredChange> = serde_json::from_value(v["changes"].clone())?;
    let file_size = v["file_size"].as_u64().unwrap_or(Limits::DEFAULT.file_size);
    // The store lives under the project: `.cassist/store` → its root.
    let root = Path::new(store_dir).parent().and_then(Path::parent).ok_or(ApplyError::Spec("bad store path"))?;
    apply_in(Path::new("."), &Store::open(root), &changes, file_size)
}

/// Merges `changes` (their contents in `store`) into the folder `dir`.
pub fn apply_in(dir: &Path, store: &Store, changes: &[StoredChange], file_size: u64) -> Result<(), ApplyError> {
    refuse_never_written(store, changes)?;
    let steps = decide(dir, store, changes, file_size)?;
    write(dir, &steps)
}

/// What is never written, whatever an entry says (it may come from a
/// remote store): checked before anything is.
fn refuse_never_written(store: &Store, changes: &[StoredChange]) -> Result<(), ApplyError> {
    for c in changes {
        let symlink = c.mode & S_IFMT == S_IFLNK;
        let new = match &c.new {
            Some(h) if symlink => Some(store.get_object(h).map_err(ApplyError::Object)?),
            Some(_) => Some(Vec::new()),
            None => None,
        };
        let check = Change {
            path: c.path.clone(),
            kind: c.kind.clone(),
            old: None,
            new,
            mode: c.mode,
            hazard: None,
            old_mode: None,
            base_unknown: false,
        };
        if let Some(why) = crate::workspace::never_written(&check) {
            return Err(ApplyError::Refused { path: c.path.clone(), why });
        }
    }
    Ok(())
}

/// A file's bytes (a symlink's target) and its mode.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Side {
    bytes: Vec<u8>,
    mode: u32,
}

impl Side {
    fn version(&self) -> Version<'_> {
        Version::new(&self.bytes, self.mode)
    }
}

/// What a path was before the change, as its entry says.
enum Base {
    /// It did not exist.
    Absent,
    Known(Side),
    /// Its content is known, its mode is not (an entry of an older
    /// release): taken from the folder when the content there is the same.
    WithoutMode(Vec<u8>),
    /// Not known (not stored, or its object is gone).
    Unknown,
}

/// One path of the change: its base and the change's result there.
struct Wanted {
    path: String,
    base: Base,
    theirs: Option<Side>,
}

/// What the merge leaves at one path.
struct Step {
    path: String,
    merged: Merged,
}

/// The paths of `changes` with their bases and results (a rename is its
/// source removed and its target added).
fn wanted(store: &Store, changes: &[StoredChange]) -> Result<Vec<Wanted>, ApplyError> {
    let mut out = Vec::new();
    for c in changes {
        let theirs = match &c.new {
            Some(h) => Some(Side { bytes: store.get_object(h).map_err(ApplyError::Object)?, mode: c.mode }),
            None => None,
        };
        let old = || match (&c.old, store_object(store, c.old.as_deref())) {
            (Some(_), Some(bytes)) => match c.old_mode {
                Some(mode) => Base::Known(Side { bytes, mode }),
                None => Base::WithoutMode(bytes),
            },
            _ => Base::Unknown,
        };
        match &c.kind {
            ChangeKind::Added => out.push(Wanted { path: c.path.clone(), base: Base::Absent, theirs }),
            ChangeKind::Modified | ChangeKind::Deleted => {
                out.push(Wanted { path: c.path.clone(), base: old(), theirs })
            }
            ChangeKind::Renamed { from } => {
                out.push(Wanted { path: from.clone(), base: old(), theirs: None });
                out.push(Wanted { path: c.path.clone(), base: Base::Absent, theirs });
            }
        }
    }
    Ok(out)
}

/// An object's bytes, `None` when it cannot be had whole.
fn store_object(store: &Store, hash: Option<&str>) -> Option<Vec<u8>> {
    store.get_object(hash?).ok()
}

/// How each path merges, decided before anything is written; every
/// conflict, or none.
fn decide(dir: &Path, store: &Store, changes: &[StoredChange], file_size: u64) -> Result<Vec<Step>, ApplyError> {
    let wanted = wanted(store, changes)?;
    // What the change removes: a folder holding only these gives way.
    let removed: HashSet<&str> = wanted.iter().filter(|w| w.theirs.is_none()).map(|w| w.path.as_str()).collect();
    let mut steps = Vec::new();
    let mut conflicts = Vec::new();
    for w in &wanted {
        let ours = match ours(dir, &w.path, w.theirs.is_some(), &removed, file_size) {
            Ok(ours) => ours,
            Err(why) => {
                conflicts.push(format!("{} ({why})", w.path));
                continue;
            }
        };
        let theirs = w.theirs.as_ref().map(Side::version);
        let merged = match &w.base {
            Base::Absent => merge(None, ours.as_ref().map(Side::version), theirs),
            Base::Known(b) => merge(Some(b.version()), ours.as_ref().map(Side::version), theirs),
            Base::WithoutMode(bytes) => match &ours {
                Some(o) if o.bytes == *bytes => merge(Some(Version::new(bytes, o.mode)), Some(o.version()), theirs),
                _ => merge_unknown_base(ours.as_ref().map(Side::version), theirs),
            },
            Base::Unknown => merge_unknown_base(ours.as_ref().map(Side::version), theirs),
        };
        match merged {
            Ok(merged) => steps.push(Step { path: w.path.clone(), merged }),
            Err(why) => conflicts.push(format!("{} ({why})", w.path)),
        }
    }
    if conflicts.is_empty() { Ok(steps) } else { Err(ApplyError::Conflicts(conflicts)) }
}

/// What the folder holds at `rel` now, for the merge: a file or symlink,
/// or nothing (a folder holding only files the change removes counts as
/// nothing). `Err`: what stands there (or on its way) cannot be merged.
fn ours(dir: &Path, rel: &str, writes: bool, removed: &HashSet<&str>, file_size: u64) -> Result<Option<Side>, String> {
    // Nothing on the way may be a symlink (a write would leave the folder
    // through it), nor a file, unless the change removes it.
    let mut on_the_way = Path::new(rel).ancestors().skip(1).filter(|a| !a.as_os_str().is_empty()).collect::<Vec<_>>();
    on_the_way.reverse();
    for a in on_the_way {
        match std::fs::symlink_metadata(dir.join(a)) {
            Ok(m) if m.file_type().is_symlink() => return Err(SYMLINK_ON_THE_WAY.to_owned()),
            Ok(m) if m.is_dir() => {}
            Ok(_) if writes && !removed.contains(a.to_str().unwrap_or_default()) => {
                return Err(FILE_ON_THE_WAY.to_owned());
            }
            // A file the change removes, or nothing: nothing below it.
            _ => return Ok(None),
        }
    }
    let path = dir.join(rel);
    let meta = match std::fs::symlink_metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let ft = meta.file_type();
    if ft.is_symlink() {
        let target = std::fs::read_link(&path).map_err(|e| e.to_string())?;
        return Ok(Some(Side { bytes: target.into_os_string().into_encoded_bytes(), mode: meta.mode() }));
    }
    if ft.is_dir() {
        return if writes && only_removed_below(dir, rel, removed) {
            Ok(None)
        } else {
            Err(FOLDER_IN_THE_WAY.to_owned())
        };
    }
    if !ft.is_file() {
        return Err(SPECIAL_IN_THE_WAY.to_owned());
    }
    if meta.len() > file_size {
        return Err(format!("the file there is larger than the file-size limit ({} bytes)", meta.len()));
    }
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
        .map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    (&mut f).take(file_size + 1).read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    if bytes.len() as u64 > file_size {
        return Err(format!("the file there is larger than the file-size limit ({} bytes)", bytes.len()));
    }
    Ok(Some(Side { bytes, mode: meta.mode() }))
}

/// Whether every entry below the folder `rel` that is not a folder is one
/// the change removes.
fn only_removed_below(dir: &Path, rel: &str, removed: &HashSet<&str>) -> bool {
    walkdir::WalkDir::new(dir.join(rel)).follow_links(false).into_iter().all(|e| match e {
        Ok(e) if e.file_type().is_dir() => true,
        Ok(e) => e.path().strip_prefix(dir).ok().and_then(Path::to_str).is_some_and(|p| removed.contains(p)),
        Err(_) => false,
    })
}

/// Writes what the merges decided: removals first (folders left empty go
/// too: a folder may give way to a file), then the files.
fn write(dir: &Path, steps: &[Step]) -> Result<(), ApplyError> {
    for s in steps.iter().filter(|s| s.merged == Merged::Delete) {
        match std::fs::remove_file(dir.join(&s.path)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(ApplyError::Io(format!("cannot delete {}", s.path), e)),
        }
        let mut parent = Path::new(&s.path).parent();
        while let Some(d) = parent.filter(|d| !d.as_os_str().is_empty()) {
            if std::fs::remove_dir(dir.join(d)).is_err() {
                break;
            }
            parent = d.parent();
        }
    }
    for s in steps {
        let Merged::Write { bytes, mode } = &s.merged else { continue };
        let path: PathBuf = dir.join(&s.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(ApplyError::Os)?;
        }
        // Never write through what is there now (a symlink would lead the
        // write elsewhere): replace it. A folder there holds only what the
        // change removed (decided above).
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(&path)
                .map_err(|e| ApplyError::Io(format!("cannot replace the folder {}", s.path), e))?,
            Ok(_) => {
                std::fs::remove_file(&path).map_err(|e| ApplyError::Io(format!("cannot replace {}", s.path), e))?
            }
            Err(_) => {}
        }
        if mode & S_IFMT == S_IFLNK {
            std::os::unix::fs::symlink(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(bytes), &path)
                .map_err(ApplyError::Os)?;
        } else {
            std::fs::write(&path, bytes).map_err(|e| ApplyError::Io(format!("cannot write {}", s.path), e))?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode & 0o777)).map_err(ApplyError::Os)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cassist_core::changes::S_IFREG;

    const F: u32 = S_IFREG | 0o644;
    const X: u32 = S_IFREG | 0o755;

    /// A folder with a store beside it (`root/.cassist/store`) and the
    /// workspace to merge into (`ws`).
    struct Fixture {
        _dir: tempfile::TempDir,
        store: Store,
        ws: PathBuf,
    }

    impl Fixture {
        fn new() -> Fixture {
            let dir = tempfile::tempdir().unwrap();
            let store = Store::open(&dir.path().join("root"));
            let ws = dir.path().join("ws");
            std::fs::create_dir_all(&ws).unwrap();
            Fixture { _dir: dir, store, ws }
        }

        fn file(&self, rel: &str, text: &str) {
            let p = self.ws.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }

        fn read(&self, rel: &str) -> String {
            std::fs::read_to_string(self.ws.join(rel)).unwrap()
        }

        fn put(&self, text: &str) -> String {
            self.store.put_object(text.as_bytes()).unwrap()
        }

        /// A change of `path` from `old` to `new` (`None`: absent).
        fn change(&self, path: &str, old: Option<&str>, new: Option<&str>) -> StoredChange {
            let kind = match (old, new) {
                (None, _) => ChangeKind::Added,
                (_, None) => ChangeKind::Deleted,
                _ => ChangeKind::Modified,
            };
            StoredChange {
                path: path.into(),
                kind,
                old: old.map(|t| self.put(t)),
                new: new.map(|t| self.put(t)),
                mode: F,
                old_mode: old.map(|_| F),
            }
        }

        fn apply(&self, changes: &[StoredChange]) -> Result<(), ApplyError> {
            apply_in(&self.ws, &self.store, changes, 1 << 20)
        }
    }

    const BASE: &str = "one\ntwo\nthree\nfour\nfive\n";

    #[test]
    fn an_untouched_file_takes_the_stored_result() {
        let f = Fixture::new();
        f.file("notes.txt", BASE);
        f.file("gone.txt", "old\n");
        let changes = [
            f.change("notes.txt", Some(BASE), Some("ONE\ntwo\nthree\nfour\nfive\n")),
            f.change("new/added.txt", None, Some("added\n")),
            f.change("gone.txt", Some("old\n"), None),
        ];
        f.apply(&changes).unwrap();
        assert_eq!(f.read("notes.txt"), "ONE\ntwo\nthree\nfour\nfive\n");
        assert_eq!(f.read("new/added.txt"), "added\n");
        assert!(!f.ws.join("gone.txt").exists());
    }

    #[test]
    fn an_edit_of_another_line_is_merged_and_the_same_line_conflicts() {
        let f = Fixture::new();
        let changes = [f.change("notes.txt", Some(BASE), Some("ONE\ntwo\nthree\nfour\nfive\n"))];
        f.file("notes.txt", "one\ntwo\nthree\nfour\nFIVE by hand\n");
        f.apply(&changes).unwrap();
        assert_eq!(f.read("notes.txt"), "ONE\ntwo\nthree\nfour\nFIVE by hand\n");

        // The same line: nothing is written, the path is named.
        let f = Fixture::new();
        let other = f.change("other.txt", None, Some("other\n"));
        let changes = [f.change("notes.txt", Some(BASE), Some("ONE\ntwo\nthree\nfour\nfive\n")), other];
        f.file("notes.txt", "one by hand\ntwo\nthree\nfour\nfive\n");
        let err = f.apply(&changes).unwrap_err();
        assert_eq!(err.to_string(), "replay would conflict: notes.txt (both sides changed the same or adjacent lines)");
        assert_eq!(f.read("notes.txt"), "one by hand\ntwo\nthree\nfour\nfive\n");
        assert!(!f.ws.join("other.txt").exists(), "a conflict writes nothing");
    }

    #[test]
    fn a_result_already_there_is_kept_and_an_added_file_with_other_content_conflicts() {
        let f = Fixture::new();
        f.file("a.txt", "done\n");
        f.apply(&[f.change("a.txt", None, Some("done\n"))]).unwrap();
        assert_eq!(f.read("a.txt"), "done\n");
        f.file("b.txt", "mine\n");
        let err = f.apply(&[f.change("b.txt", None, Some("theirs\n"))]).unwrap_err();
        assert!(err.to_string().contains("b.txt (added on both sides with different content)"), "{err}");
        // Deleted meanwhile, while the change edits it.
        let err = f.apply(&[f.change("c.txt", Some(BASE), Some("x\n"))]).unwrap_err();
        assert!(err.to_string().contains("c.txt (the task changed a file that was deleted meanwhile)"), "{err}");
    }

    #[test]
    fn a_base_without_its_mode_is_the_folders_when_the_content_is_the_same() {
        let f = Fixture::new();
        f.file("run.sh", BASE);
        std::fs::set_permissions(f.ws.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut c = f.change("run.sh", Some(BASE), Some("ONE\ntwo\nthree\nfour\nfive\n"));
        (c.old_mode, c.mode) = (None, X);
        f.apply(std::slice::from_ref(&c)).unwrap();
        assert_eq!(f.read("run.sh"), "ONE\ntwo\nthree\nfour\nfive\n");
        assert_eq!(std::fs::metadata(f.ws.join("run.sh")).unwrap().mode() & 0o777, 0o755);

        // Another content there: the base is not known, a conflict even
        // where the lines would merge.
        f.file("run.sh", "one\ntwo\nthree\nfour\nFIVE\n");
        let err = f.apply(&[c]).unwrap_err();
        assert!(err.to_string().contains("content the task started from is not known"), "{err}");
        assert_eq!(f.read("run.sh"), "one\ntwo\nthree\nfour\nFIVE\n");
    }

    #[test]
    fn a_missing_base_object_is_an_unknown_base() {
        let f = Fixture::new();
        let mut c = f.change("notes.txt", Some(BASE), Some("ONE\ntwo\nthree\nfour\nfive\n"));
        c.old = Some("0".repeat(64));
        f.file("notes.txt", BASE);
        let err = f.apply(std::slice::from_ref(&c)).unwrap_err();
        assert!(matches!(err, ApplyError::Conflicts(_)), "{err}");
        // The result already there: fine.
        f.file("notes.txt", "ONE\ntwo\nthree\nfour\nfive\n");
        f.apply(&[c]).unwrap();
    }

    #[test]
    fn a_rename_of_an_edited_file_conflicts() {
        let f = Fixture::new();
        let h = f.put(BASE);
        let rename = StoredChange {
            path: "b.txt".into(),
            kind: ChangeKind::Renamed { from: "a.txt".into() },
            old: Some(h.clone()),
            new: Some(h),
            mode: F,
            old_mode: Some(F),
        };
        f.file("a.txt", BASE);
        f.apply(std::slice::from_ref(&rename)).unwrap();
        assert_eq!((f.ws.join("a.txt").exists(), f.read("b.txt").as_str()), (false, BASE));
        std::fs::remove_file(f.ws.join("b.txt")).unwrap();
        f.file("a.txt", "edited\n");
        let err = f.apply(&[rename]).unwrap_err();
        assert!(err.to_string().contains("a.txt (the task deleted or renamed a file that was edited meanwhile)"));
        assert!(!f.ws.join("b.txt").exists());
    }

    #[test]
    fn nothing_is_written_through_a_symlink() {
        let f = Fixture::new();
        let outside = f.ws.parent().unwrap().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, f.ws.join("docs")).unwrap();
        let err = f.apply(&[f.change("docs/x.txt", None, Some("x\n"))]).unwrap_err();
        assert!(err.to_string().contains("docs/x.txt (a symlink stands on its way)"), "{err}");
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
        // A symlink at the path itself, as the base had it: replaced.
        std::os::unix::fs::symlink("target", f.ws.join("link")).unwrap();
        let link = StoredChange {
            old: Some(f.put("target")),
            old_mode: Some(S_IFLNK | 0o777),
            ..f.change("link", Some("target"), Some("a file now\n"))
        };
        f.apply(&[link]).unwrap();
        assert!(std::fs::symlink_metadata(f.ws.join("link")).unwrap().is_file());
        assert_eq!(f.read("link"), "a file now\n");
    }

    #[test]
    fn a_folder_gives_way_to_a_file_only_when_the_change_empties_it() {
        let f = Fixture::new();
        f.file("x/a.txt", "a\n");
        let changes = [f.change("x/a.txt", Some("a\n"), None), f.change("x", None, Some("x is a file\n"))];
        f.apply(&changes).unwrap();
        assert_eq!(f.read("x"), "x is a file\n");

        let f = Fixture::new();
        f.file("x/a.txt", "a\n");
        f.file("x/mine.txt", "the user's\n");
        let changes = [f.change("x/a.txt", Some("a\n"), None), f.change("x", None, Some("x is a file\n"))];
        let err = f.apply(&changes).unwrap_err();
        assert!(err.to_string().contains(FOLDER_IN_THE_WAY), "{err}");
        assert_eq!(f.read("x/mine.txt"), "the user's\n");
        assert_eq!(f.read("x/a.txt"), "a\n");
    }
}
