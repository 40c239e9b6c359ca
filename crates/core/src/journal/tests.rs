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
        recipe: None,
        dependencies: None,
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
    assert!(backward(root, &open.store, &journal.steps, &made, UNDO).all().is_empty());
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

/// The lines of `text.txt` before a change.
const TEXT: &str = "1\n2\n3\n4\n5\n";
/// The change's `text.txt`: its first line changed.
const TEXT_NEW: &str = "ONE\n2\n3\n4\n5\n";

/// A change that edits one line of a text file: `text.txt` (added to the
/// project first, at the path's old content), a deletion and a file in a
/// new folder.
fn text_change(root: &Path) -> Transaction {
    if !root.join("text.txt").exists() {
        write(root, "text.txt", TEXT);
    }
    let mut t = Transaction::new(root);
    t.delete("gone.txt");
    t.write("text.txt", TEXT_NEW.as_bytes(), 0o100644).unwrap();
    t.write("new/file.txt", b"fresh\n", 0o100644).unwrap();
    t
}

/// The project with `text.txt` at its old content.
fn text_project() -> tempfile::TempDir {
    let dir = project();
    write(dir.path(), "text.txt", TEXT);
    std::fs::set_permissions(dir.path().join("text.txt"), std::fs::Permissions::from_mode(0o644)).unwrap();
    dir
}

/// The user's save: line `n` (from 1) of `rel`, as the file is now,
/// becomes `text`.
fn edit_line(root: &Path, rel: &str, n: usize, text: &str) {
    let now = std::fs::read_to_string(root.join(rel)).unwrap();
    let mut lines: Vec<&str> = now.lines().collect();
    lines[n - 1] = text;
    std::fs::write(root.join(rel), lines.join("\n") + "\n").unwrap();
}

fn text(root: &Path, rel: &str) -> String {
    std::fs::read_to_string(root.join(rel)).unwrap()
}

#[test]
fn a_roll_forward_merges_a_user_edit_on_another_line() {
    let steps = killed_after_with(text_project().path(), true, 0, text_change).steps.len();
    for k in 0..=steps {
        let dir = text_project();
        let root = dir.path();
        killed_after_with(root, true, k, text_change);
        // Saved between the kill and the next command: the last line of a
        // file the change edits (before or after the change reached it),
        // a file of its own, and a file of the user's removed.
        edit_line(root, "text.txt", 5, "FIVE");
        write(root, "mine.txt", "mine\n");
        std::fs::remove_file(root.join("keep")).unwrap();
        let r = recover(root).expect("something to recover");
        assert_eq!(r.outcome, Outcome::Completed, "after {k} step(s): {r}");
        assert!(r.problems.is_empty(), "{r}");
        assert_eq!(text(root, "text.txt"), "ONE\n2\n3\n4\nFIVE\n", "after {k} step(s): both edits");
        assert_eq!(text(root, "mine.txt"), "mine\n");
        assert!(!root.join("keep").exists(), "a file the user removed came back");
        assert!(!root.join("gone.txt").exists());
        assert_eq!(text(root, "new/file.txt"), "fresh\n");
        assert!(Lock::load(root).unwrap().tasks.contains_key("t"), "completed: the lock line is written");
        assert!(!journal_left(root));
        no_temps(root);
        assert_eq!(recover(root), None, "twice is the same as once");
    }
}

#[test]
fn a_roll_forward_that_conflicts_rolls_the_whole_transaction_back_and_keeps_the_users_text() {
    let steps = killed_after_with(text_project().path(), true, 0, text_change).steps.len();
    for k in 0..=steps {
        let dir = text_project();
        let root = dir.path();
        let mut before = tree(root);
        killed_after_with(root, true, k, text_change);
        // The very line the change edits, whichever it holds now.
        edit_line(root, "text.txt", 1, "the user's line");
        let users = text(root, "text.txt");
        let r = recover(root).expect("something to recover");
        let Outcome::Conflicted(paths) = &r.outcome else { panic!("after {k} step(s): {r}") };
        assert_eq!(paths, &["text.txt: both sides changed the same or adjacent lines"], "{r}");
        let said = r.to_string();
        assert!(said.contains("your edits were kept") && said.contains("replayed"), "{said}");
        assert_eq!(text(root, "text.txt"), users, "after {k} step(s): the user's text, byte for byte");
        before.insert("text.txt".into(), (users.into_bytes(), 0o644));
        assert_eq!(tree(root), before, "after {k} step(s): nothing else of the change is left");
        assert_eq!(r.lock_lines, 0);
        assert!(Lock::load(root).unwrap().tasks.is_empty(), "no lock line for a change that did not land");
        assert!(!journal_left(root));
        no_temps(root);
        assert_eq!(recover(root), None);
    }
}

#[test]
fn a_roll_back_takes_the_change_out_of_a_user_edit_and_keeps_the_edit() {
    let steps = killed_after_with(text_project().path(), false, 0, text_change).steps.len();
    for k in 0..=steps {
        let dir = text_project();
        let root = dir.path();
        let mut before = tree(root);
        killed_after_with(root, false, k, text_change);
        edit_line(root, "text.txt", 5, "FIVE");
        write(root, "mine.txt", "mine\n");
        let r = recover(root).expect("something to recover");
        assert_eq!(r.outcome, Outcome::RolledBack, "after {k} step(s): {r}");
        assert!(r.problems.is_empty(), "{r}");
        before.insert("text.txt".into(), (b"1\n2\n3\n4\nFIVE\n".to_vec(), 0o644));
        before.insert("mine.txt".into(), (b"mine\n".to_vec(), 0o644 & !umask()));
        assert_eq!(tree(root), before, "after {k} step(s): the change out, the user's edit in");
        assert!(Lock::load(root).unwrap().tasks.is_empty());
        assert!(!journal_left(root));
        no_temps(root);
    }
}

/// The process's file mode creation mask.
fn umask() -> u32 {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f"), "").unwrap();
    0o666 & !(dir.path().join("f").metadata().unwrap().mode() & 0o777)
}

#[test]
fn a_roll_back_leaves_a_user_edit_it_cannot_take_the_change_out_of_and_says_so() {
    let steps = killed_after_with(text_project().path(), false, 0, text_change).steps.len();
    let dir = text_project();
    let root = dir.path();
    killed_after_with(root, false, steps, text_change);
    // The line the change wrote, edited; the file it made, edited; a file
    // of the user's in the folder it made.
    edit_line(root, "text.txt", 1, "ONE and more");
    write(root, "new/file.txt", "fresh, and the user's\n");
    write(root, "new/mine.txt", "mine\n");
    let r = recover(root).unwrap();
    assert_eq!(r.outcome, Outcome::RolledBack, "{r}");
    assert_eq!(text(root, "text.txt"), "ONE and more\n2\n3\n4\n5\n");
    assert_eq!(text(root, "new/file.txt"), "fresh, and the user's\n");
    assert_eq!(text(root, "new/mine.txt"), "mine\n");
    assert_eq!(text(root, "gone.txt"), "gone\n", "the rest is rolled back");
    let named: Vec<&str> = r.problems.iter().map(|p| p.split(':').next().unwrap()).collect();
    assert_eq!(named, ["new/file.txt", "text.txt"], "{r}");
    assert!(r.problems[1].starts_with("text.txt: left as it is"), "{r}");
    assert!(!journal_left(root));
    no_temps(root);
    assert_eq!(recover(root), None, "nothing is tried again: the user's files are theirs");
}

#[test]
fn an_open_transaction_rolled_back_keeps_the_edits_made_meanwhile() {
    let dir = text_project();
    let root = dir.path();
    let open = text_change(root).begin().unwrap();
    edit_line(root, "text.txt", 5, "FIVE");
    open.roll_back().unwrap();
    assert_eq!(text(root, "text.txt"), "1\n2\n3\n4\nFIVE\n");
    assert!(!root.join("new").exists());
    // Where the change cannot be taken out, the user's file stays, named;
    // the journal goes (there is nothing to try again).
    write(root, "text.txt", TEXT);
    let open = text_change(root).begin().unwrap();
    edit_line(root, "text.txt", 1, "mine");
    let e = open.roll_back().unwrap_err();
    let JournalError::NotRestored(paths) = &e else { panic!("{e:?}") };
    assert!(paths.len() == 1 && paths[0].starts_with("text.txt: left as it is"), "{e}");
    assert_eq!(text(root, "text.txt"), "mine\n2\n3\n4\n5\n");
    assert!(!journal_left(root));
    no_temps(root);
}

/// Runs `f` at each check before a rename or unlink of this thread's
/// transactions, until the guard goes.
fn before_rename(f: impl FnMut(&str) + 'static) -> impl Drop {
    struct Unhook;
    impl Drop for Unhook {
        fn drop(&mut self) {
            steps::BEFORE_RENAME.with(|h| *h.borrow_mut() = None);
        }
    }
    steps::BEFORE_RENAME.with(|h| *h.borrow_mut() = Some(Box::new(f)));
    Unhook
}

#[test]
fn a_file_saved_right_before_its_rename_stops_the_transaction_and_nothing_is_lost() {
    let dir = text_project();
    let root = dir.path();
    let mut before = tree(root);
    // The user saves `text.txt` while the change is being written: after
    // its old content was kept, before its rename.
    let r = root.to_path_buf();
    let _hook = before_rename(move |path| {
        if path == "text.txt" {
            edit_line(&r, "text.txt", 5, "saved meanwhile");
        }
    });
    let e = text_change(root).apply(vec![line("t")]).unwrap_err();
    assert!(
        matches!(&e, JournalError::Changed { path, problems } if path == "text.txt" && problems.is_empty()),
        "{e:?}"
    );
    assert_eq!(e.to_string(), "text.txt changed while being written");
    before.insert("text.txt".into(), (b"1\n2\n3\n4\nsaved meanwhile\n".to_vec(), 0o644));
    assert_eq!(tree(root), before, "stopped and rolled back: the deletion is undone, the user's save kept");
    assert!(Lock::load(root).unwrap().tasks.is_empty());
    assert!(!journal_left(root));
    no_temps(root);
}

#[test]
fn a_file_saved_before_its_unlink_is_not_deleted() {
    let dir = text_project();
    let root = dir.path();
    let r = root.to_path_buf();
    let _hook = before_rename(move |path| {
        if path == "gone.txt" {
            write(&r, "gone.txt", "kept, as the user saved it\n");
        }
    });
    let e = text_change(root).apply(vec![line("t")]).unwrap_err();
    assert!(matches!(&e, JournalError::Changed { path, .. } if path == "gone.txt"), "{e:?}");
    assert_eq!(text(root, "gone.txt"), "kept, as the user saved it\n");
    assert_eq!(text(root, "text.txt"), TEXT);
    assert!(!root.join("new").exists());
    assert!(!journal_left(root));
}

#[test]
fn a_stop_rolls_back_three_way_the_files_already_written_and_edited() {
    let dir = text_project();
    let root = dir.path();
    let r = root.to_path_buf();
    // At the last path: `text.txt`, written already, gets a save on
    // another line, and the last path gets one of its own.
    let _hook = before_rename(move |path| {
        if path == "new/file.txt" {
            edit_line(&r, "text.txt", 5, "FIVE");
            write(&r, "new/file.txt", "the user's\n");
        }
    });
    let e = text_change(root).apply(vec![line("t")]).unwrap_err();
    assert!(
        matches!(&e, JournalError::Changed { path, problems } if path == "new/file.txt" && problems.is_empty()),
        "{e:?}"
    );
    assert_eq!(text(root, "text.txt"), "1\n2\n3\n4\nFIVE\n", "the change out, the save in");
    assert_eq!(text(root, "new/file.txt"), "the user's\n");
    assert_eq!(text(root, "gone.txt"), "gone\n");
    assert!(!journal_left(root));
    no_temps(root);
}

#[test]
fn a_transaction_expecting_what_the_caller_saw_refuses_a_tree_that_moved_on() {
    let dir = text_project();
    let root = dir.path();
    let before = tree(root);
    let mut t = text_change(root);
    t.expect("text.txt", Some(crate::merge::Version::new(b"1\n2\n3\n4\nother\n", 0o100644)));
    let e = t.apply(vec![line("t")]).unwrap_err();
    assert!(matches!(&e, JournalError::Changed { path, .. } if path == "text.txt"), "{e:?}");
    assert_eq!(tree(root), before, "nothing is written");
    assert!(!journal_left(root));
    // A path expected absent that is there, too.
    let mut t = text_change(root);
    t.expect("text.txt", None);
    assert!(matches!(t.apply(Vec::new()), Err(JournalError::Changed { .. })));
    // As seen: written.
    let mut t = text_change(root);
    t.expect("text.txt", Some(crate::merge::Version::new(TEXT.as_bytes(), 0o100644)));
    t.expect("new/file.txt", None);
    t.apply(vec![line("t")]).unwrap();
    assert_eq!(text(root, "text.txt"), TEXT_NEW);
}

#[test]
fn a_conflict_found_once_the_lock_lines_were_written_puts_the_lock_back() {
    let dir = text_project();
    let root = dir.path();
    // The lock's line for `t` before, and one for `u`, which the
    // transaction adds.
    let mut earlier = line("t");
    earlier.entry.as_mut().unwrap().before = "t-earlier".into();
    Lock::update(root, std::slice::from_ref(&earlier)).unwrap();
    let open = text_change(root).start(Some(vec![line("t"), line("u")])).unwrap();
    // Killed once the files and the lock lines were written.
    Lock::update(root, &open.journal.lock).unwrap();
    std::mem::forget(open);
    edit_line(root, "text.txt", 1, "the user's line");
    let r = recover(root).unwrap();
    assert!(matches!(r.outcome, Outcome::Conflicted(_)), "{r}");
    let lock = Lock::load(root).unwrap();
    assert_eq!(lock.tasks.keys().collect::<Vec<_>>(), ["t"], "the line the transaction added is gone");
    assert_eq!(lock.tasks["t"], earlier.entry.unwrap(), "the earlier line is back");
    assert_eq!(text(root, "text.txt"), "the user's line\n2\n3\n4\n5\n");
    assert_eq!(text(root, "gone.txt"), "gone\n");
}

#[test]
fn a_journal_without_the_lock_before_reads_as_one_with_nothing_to_put_back() {
    // Journals written before the field existed still parse.
    let dir = text_project();
    let root = dir.path();
    let open = text_change(root).start(Some(Vec::new())).unwrap();
    let json = serde_json::to_string(&open.journal).unwrap();
    std::mem::forget(open);
    assert!(!json.contains("lock_before"), "{json}");
    let back: Journal = serde_json::from_str(&json).unwrap();
    assert!(back.lock_before.is_empty());
    assert_eq!(recover(root).unwrap().outcome, Outcome::Completed);
}
