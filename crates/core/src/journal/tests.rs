use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use super::file::INVALID;
use super::*;
use crate::fsx::TMP_PREFIX;
use crate::lock::LockEntry;

/// Every path under `root` but `.cassist/` and `cassist.lock`: its content (a symlink's
/// target, `<dir>` for a folder) and permission bits.
fn tree(root: &Path) -> BTreeMap<String, (Vec<u8>, u32)> {
    walkdir::WalkDir::new(root)
        .min_depth(1)
        .into_iter()
        .filter_entry(|e| e.file_name() != ".cassist" && e.file_name() != crate::lock::LOCK_FILE)
        .map(|e| {
            let e = e.unwrap();
            let rel = e.path().strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let meta = e.path().symlink_metadata().unwrap();
            let bytes = if meta.is_symlink() {
                std::fs::read_link(e.path()).unwrap().into_os_string().into_encoded_bytes()
            } else if meta.is_dir() {
                b"<dir>".to_vec()
            } else {
                std::fs::read(e.path()).unwrap()
            };
            (rel, (bytes, meta.mode() & 0o7777))
        })
        .collect()
}

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A project: `keep`, `edit.txt` (mode 644), `gone.txt`, `folder/only`
/// (a folder a file replaces), `empty/` (an empty folder of the
/// user's), `link` → `keep`.
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(root, "keep", "keep\n");
    write(root, "edit.txt", "old\n");
    std::fs::set_permissions(root.join("edit.txt"), std::fs::Permissions::from_mode(0o644)).unwrap();
    write(root, "gone.txt", "gone\n");
    write(root, "folder/only", "only\n");
    std::fs::create_dir(root.join("empty")).unwrap();
    std::os::unix::fs::symlink("keep", root.join("link")).unwrap();
    dir
}

fn line(task: &str) -> LockLine {
    let entry = LockEntry {
        before: format!("{task}-before"),
        after: format!("{task}-after"),
        outputs: None,
        output_files: Default::default(),
        patch: "p".into(),
        agent: "demo".into(),
        agent_version: None,
        date: "2026-01-01T00:00:00Z".into(),
    };
    LockLine { task: task.into(), entry: Some(entry) }
}

/// The change: an edit (made executable), a deletion, a new file in
/// new folders, a file replacing a folder, a file in the user's empty
/// folder, the symlink retargeted, a symlink added.
fn change(root: &Path) -> Transaction {
    let mut t = Transaction::new(root);
    t.write("edit.txt", b"new\n", 0o100755).unwrap();
    t.delete("gone.txt");
    t.write("new/deep/file.txt", b"fresh\n", 0o100644).unwrap();
    t.delete("folder/only");
    t.write("folder", b"a file now\n", 0o104755).unwrap();
    t.write("empty/inside", b"in\n", 0o100600).unwrap();
    t.write("link", b"edit.txt", S_IFLNK | 0o777).unwrap();
    t.write("new/link", b"../keep", S_IFLNK | 0o777).unwrap();
    t
}

/// The tree the change makes.
fn changed(root: &Path) -> BTreeMap<String, (Vec<u8>, u32)> {
    let other = project();
    change(other.path()).apply(Vec::new()).unwrap();
    let t = tree(other.path());
    let _ = root;
    t
}

fn journal_left(root: &Path) -> bool {
    state_dir(root).join(JOURNAL).exists()
}

fn no_temps(root: &Path) {
    for e in walkdir::WalkDir::new(root).into_iter().flatten() {
        let name = e.file_name().to_string_lossy();
        assert!(!name.starts_with(TMP_PREFIX), "temp file left: {}", e.path().display());
    }
}

#[test]
fn apply_writes_the_change_and_its_lock_lines() {
    let dir = project();
    let root = dir.path();
    change(root).apply(vec![line("t")]).unwrap();
    let t = tree(root);
    assert_eq!(t["edit.txt"], (b"new\n".to_vec(), 0o755));
    assert!(!t.contains_key("gone.txt"));
    assert_eq!(t["new/deep/file.txt"].0, b"fresh\n");
    // Never a setuid bit, whatever was asked.
    assert_eq!(t["folder"], (b"a file now\n".to_vec(), 0o755));
    assert_eq!(t["empty/inside"], (b"in\n".to_vec(), 0o600));
    assert_eq!(t["link"].0, b"edit.txt");
    assert_eq!(t["new/link"].0, b"../keep");
    assert_eq!(t["keep"].0, b"keep\n");
    assert_eq!(Lock::load(root).unwrap().tasks["t"], line("t").entry.unwrap());
    assert!(!journal_left(root));
    no_temps(root);
    assert_eq!(recover(root), None, "nothing left to recover");
}

#[test]
fn an_open_transaction_rolls_back_to_the_same_tree() {
    let dir = project();
    let root = dir.path();
    let before = tree(root);
    let open = change(root).begin().unwrap();
    assert!(journal_left(root));
    assert_eq!(tree(root), changed(root), "the files are written while it is open");
    assert_eq!(open.written().count(), 6);
    assert_eq!(open.deleted().collect::<Vec<_>>(), ["gone.txt", "folder/only"]);
    open.roll_back().unwrap();
    assert_eq!(tree(root), before, "rolled back: the user's empty folder stays, made folders go");
    assert!(!journal_left(root));
    // Dropped without a decision: rolled back too.
    drop(change(root).begin().unwrap());
    assert_eq!(tree(root), before);
    no_temps(root);
}

#[test]
fn a_commit_writes_the_lock_lines_and_ends_the_journal() {
    let dir = project();
    let root = dir.path();
    let open = change(root).begin().unwrap();
    open.commit(vec![line("a"), line("b")]).unwrap();
    assert!(!journal_left(root));
    assert_eq!(Lock::load(root).unwrap().tasks.len(), 2);
    assert_eq!(tree(root), changed(root));
    // A removal line takes an older record out.
    Transaction::new(root).apply(vec![LockLine { task: "a".into(), entry: None }]).unwrap();
    assert_eq!(Lock::load(root).unwrap().tasks.keys().collect::<Vec<_>>(), ["b"]);
}

/// The states a killed cassist may leave: the journal (open or
/// committed) with the first `k` steps applied and a temp file beside
/// the next one.
fn killed_after(root: &Path, committed: bool, k: usize) -> Journal {
    killed_after_with(root, committed, k, change)
}

fn killed_after_with(root: &Path, committed: bool, k: usize, change: fn(&Path) -> Transaction) -> Journal {
    let open = change(root).start(committed.then(|| vec![line("t")])).unwrap();
    let journal = open.journal.clone();
    // Back to the tree before, without ending the journal, then the
    // first k steps again.
    let made = journal.made.clone();
    assert!(backward(root, &open.store, &journal.steps, &made, UNDO).is_empty());
    std::mem::forget(open);
    forward(root, &Store::open(root), &journal.steps[..k], FLUSH).unwrap();
    if let Some(next) = journal.steps.get(k) {
        let dir = root.join(&next.path);
        let dir = dir.parent().unwrap();
        if dir.is_dir() {
            std::fs::write(dir.join(crate::fsx::temp_name()), "half").unwrap();
        }
    }
    journal
}

#[test]
fn recovery_completes_a_committed_journal_from_any_step() {
    let steps = killed_after(project().path(), true, 0).steps.len();
    for k in 0..=steps {
        let dir = project();
        let root = dir.path();
        killed_after(root, true, k);
        let r = recover(root).expect("something to recover");
        assert_eq!(r.outcome, Outcome::Completed, "after {k} step(s): {r}");
        assert!(r.problems.is_empty(), "{r}");
        assert_eq!(r.lock_lines, 1);
        assert_eq!(tree(root), changed(root), "after {k} step(s)");
        assert!(Lock::load(root).unwrap().tasks.contains_key("t"));
        assert!(!journal_left(root));
        no_temps(root);
    }
}

#[test]
fn recovery_rolls_an_open_journal_back_from_any_step() {
    let steps = killed_after(project().path(), false, 0).steps.len();
    for k in 0..=steps {
        let dir = project();
        let root = dir.path();
        let before = tree(root);
        killed_after(root, false, k);
        let r = recover(root).expect("something to recover");
        assert_eq!(r.outcome, Outcome::RolledBack, "after {k} step(s): {r}");
        assert!(r.problems.is_empty(), "{r}");
        assert_eq!(tree(root), before, "after {k} step(s)");
        assert!(Lock::load(root).unwrap().tasks.is_empty(), "an open journal writes no lock line");
        assert!(!journal_left(root));
        no_temps(root);
        // Twice is the same as once.
        assert_eq!(recover(root), None);
    }
}

#[test]
fn a_committed_journal_whose_new_content_is_gone_is_rolled_back() {
    let dir = project();
    let root = dir.path();
    let before = tree(root);
    let journal = killed_after(root, true, 2);
    let new = journal.steps.iter().rev().find_map(|s| s.new.clone()).unwrap();
    let (a, b) = new.hash.split_at(2);
    std::fs::remove_file(Store::open(root).dir().join("objects").join(a).join(b)).unwrap();
    let r = recover(root).unwrap();
    assert_eq!(r.outcome, Outcome::RolledBack, "{r}");
    assert_eq!(tree(root), before);
    assert!(Lock::load(root).unwrap().tasks.is_empty());
}

/// A smaller change (a journal of a few hundred bytes): an edit, a
/// deletion, a file in a new folder.
fn small_change(root: &Path) -> Transaction {
    let mut t = Transaction::new(root);
    t.delete("gone.txt");
    t.write("edit.txt", b"new\n", 0o100644).unwrap();
    t.write("new/file.txt", b"fresh\n", 0o100644).unwrap();
    t
}

#[test]
fn a_journal_cut_short_at_any_byte_never_makes_things_worse() {
    // The whole journal, as written for the change.
    let dir = project();
    killed_after_with(dir.path(), true, 0, small_change);
    let bytes = std::fs::read(state_dir(dir.path()).join(JOURNAL)).unwrap();
    let whole = {
        let other = project();
        small_change(other.path()).apply(Vec::new()).unwrap();
        tree(other.path())
    };
    for half_applied in [false, true] {
        let dir = project();
        let root = dir.path();
        killed_after_with(root, true, if half_applied { 2 } else { 0 }, small_change);
        let mut as_left = tree(root);
        as_left.retain(|p, _| !p.rsplit('/').next().unwrap().starts_with(TMP_PREFIX));
        for cut in 0..bytes.len() {
            std::fs::write(state_dir(root).join(JOURNAL), &bytes[..cut]).unwrap();
            let r = recover(root).expect("an unreadable journal is said");
            assert!(matches!(r.outcome, Outcome::Unreadable(_)), "cut at {cut}: {r}");
            assert_eq!(tree(root), as_left, "cut at {cut}: the tree is left as it is");
            assert!(!journal_left(root) && state_dir(root).join(INVALID).exists());
            assert!(Lock::load(root).unwrap().tasks.is_empty());
        }
        // Whole, it is completed.
        std::fs::write(state_dir(root).join(JOURNAL), &bytes).unwrap();
        assert_eq!(recover(root).unwrap().outcome, Outcome::Completed);
        assert_eq!(tree(root), whole);
    }
}

#[test]
fn a_damaged_journal_is_not_acted_on() {
    let dir = project();
    let root = dir.path();
    let as_left = {
        killed_after(root, true, 1);
        tree(root)
    };
    let path = state_dir(root).join(JOURNAL);
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 2;
    bytes[last] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    assert!(matches!(recover(root).unwrap().outcome, Outcome::Unreadable(_)));
    assert_eq!(tree(root), as_left);
}

#[test]
fn paths_outside_the_project_or_in_its_own_folders_are_refused() {
    let dir = project();
    let root = dir.path();
    let before = tree(root);
    for bad in ["../escape", "/etc/passwd", ".git/hooks/pre-commit", ".cassist/journal", "a/../../b", ""] {
        let mut t = Transaction::new(root);
        t.write("fine.txt", b"x", 0o100644).unwrap();
        t.write(bad, b"x", 0o100644).unwrap();
        assert!(t.apply(Vec::new()).is_err(), "{bad:?} was accepted");
        assert_eq!(tree(root), before, "{bad:?}: nothing is written");
    }
    // Nor through a folder that leads outside.
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), root.join("out")).unwrap();
    let mut t = Transaction::new(root);
    t.write("out/x", b"x", 0o100644).unwrap();
    assert!(t.apply(Vec::new()).is_err());
    assert!(!outside.path().join("x").exists());
}

#[test]
fn a_failed_write_takes_back_what_was_written() {
    let dir = project();
    let root = dir.path();
    // `keep/x` cannot be written: `keep` is a file that stays.
    let before = tree(root);
    let mut t = Transaction::new(root);
    t.write("edit.txt", b"new\n", 0o100644).unwrap();
    t.delete("gone.txt");
    t.write("keep/x", b"x", 0o100644).unwrap();
    assert!(t.apply(vec![line("t")]).is_err());
    assert_eq!(tree(root), before);
    assert!(!journal_left(root));
    assert!(Lock::load(root).unwrap().tasks.is_empty());
    no_temps(root);
}

#[test]
fn stray_temp_files_at_the_root_are_pending_and_swept() {
    let dir = project();
    let root = dir.path();
    assert!(!pending(root));
    std::fs::write(root.join(format!("{TMP_PREFIX}lock")), "half").unwrap();
    assert!(pending(root));
    let r = recover(root).unwrap();
    assert_eq!((r.outcome, r.temps), (Outcome::Swept, 1));
    assert!(!pending(root));
}

#[test]
fn leftover_temp_files_of_cassists_own_folders_are_pending_and_swept() {
    let dir = project();
    let root = dir.path();
    let cache = root.join(".cassist/cache");
    std::fs::create_dir_all(&cache).unwrap();
    // A killed cassist's (no process has pid 999999999: pid_max is at
    // most 2^22), one with no pid (an older cassist), and one of a
    // cassist running now (this process), which stays.
    let gone = cache.join(format!("{TMP_PREFIX}999999999-file-hashes"));
    let unnamed = root.join(".cassist").join(format!("{TMP_PREFIX}Xa1b2c"));
    let running = cache.join(format!("{}specs", crate::fsx::temp_prefix()));
    for f in [&gone, &unnamed, &running] {
        std::fs::write(f, "half").unwrap();
    }
    assert!(pending(root));
    let r = recover(root).unwrap();
    assert_eq!((r.outcome, r.temps), (Outcome::Swept, 2));
    assert!(!gone.exists() && !unnamed.exists());
    assert!(running.exists(), "the temp file of a running cassist was removed");
    assert!(!pending(root));
}

#[test]
fn the_message_says_which_way_it_went() {
    let r = Recovered { outcome: Outcome::Completed, files: 3, lock_lines: 1, temps: 1, problems: Vec::new() };
    assert_eq!(
        r.to_string(),
        "completed the integration a killed cassist left unfinished (3 file(s), 1 lock line(s), 1 temporary file(s) removed)"
    );
    let r = Recovered { outcome: Outcome::RolledBack, temps: 0, problems: vec!["a: gone".into()], ..r };
    assert!(r.to_string().starts_with("rolled back") && r.to_string().ends_with("could not put right: a: gone"));
}

#[test]
fn errors_say_which_path_and_why() {
    let dir = project();
    let root = dir.path();
    let refused = |bad: &str| {
        let mut t = Transaction::new(root);
        t.write(bad, b"x", 0o100644).unwrap();
        t.apply(Vec::new()).unwrap_err()
    };
    let e = refused(".git/hooks/pre-commit");
    assert!(matches!(e, JournalError::Refused { why: UnsafePath::OwnFolder, .. }), "{e:?}");
    assert_eq!(e.to_string(), "refused to write `.git/hooks/pre-commit`: it lies in git's or cassist's own folder");
    let e = refused("a/../b");
    assert_eq!(e.to_string(), "refused to write `a/../b`: not a plain path inside the project");
    // A write that fails names its path, and the error it met is its source.
    let mut t = Transaction::new(root);
    t.write("keep/x", b"x", 0o100644).unwrap();
    let e = t.apply(Vec::new()).unwrap_err();
    let JournalError::Write { path, problems, .. } = &e else { panic!("{e:?}") };
    assert_eq!((path.as_str(), problems.len()), ("keep/x", 0));
    let source = std::error::Error::source(&e).expect("the step's error").to_string();
    assert_eq!(e.to_string(), format!("keep/x: {source}"));
    // A journal left by an earlier transaction stops the next one.
    let open = small_change(root).begin().unwrap();
    std::mem::forget(open);
    let e = small_change(root).apply(Vec::new()).unwrap_err();
    assert!(matches!(e, JournalError::Unfinished), "{e:?}");
}

#[test]
fn a_recovery_that_cannot_go_forward_goes_back_and_says_where_it_stopped() {
    let dir = project();
    let root = dir.path();
    let before = tree(root);
    killed_after(root, true, 0);
    // A file where the change makes a folder: `new/deep/file.txt` cannot
    // be written.
    write(root, "new", "in the way\n");
    let r = recover(root).unwrap();
    assert_eq!(r.outcome, Outcome::RolledBack, "{r}");
    assert!(r.problems[0].starts_with("rolling forward failed (new/deep/file.txt: "), "{r}");
    std::fs::remove_file(root.join("new")).unwrap();
    assert_eq!(tree(root), before);
}
