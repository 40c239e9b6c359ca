//! The three-way rule of every write into the user's tree: a task's result
//! (`theirs`) is merged into what the tree holds now (`ours`) against the
//! file as the task's view had it (`base`), one path at a time.
//!
//! - `ours` = `base`: the task's result is written; `ours` = `theirs`:
//!   nothing to do (the task's side is already there).
//! - Otherwise both sides changed the path. Two text files are merged line
//!   by line as `git merge-file` does (git's diff3 rules: edits of
//!   different lines merge, edits of the same or of adjacent lines
//!   conflict, identical edits merge); a file added on both sides with
//!   different content, a file one side deleted and the other changed (a
//!   task renaming a user-edited file deletes its old path), symlinks and
//!   binary files (a NUL byte in the first 8 KB of any side) are
//!   equal-or-conflict. Permission bits follow the same rule: a side that
//!   left them as they were takes the other's.
//! - Where the base is not known, anything but `ours` = `theirs` is a
//!   conflict ([`merge_unknown_base`]): never a guess.
//!
//! A conflict writes nothing: the caller leaves the task's whole change
//! out and the tree as the user left it.

use crate::changes::{S_IFLNK, S_IFMT};

/// How many leading bytes are looked at for a NUL (git's rule for
/// telling a binary file).
const BINARY_SNIFF: usize = 8000;

/// One side of a path: a file (or a symlink, whose bytes are its target)
/// with its mode (type and permission bits; special bits are ignored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Version<'a> {
    pub bytes: &'a [u8],
    pub mode: u32,
}

impl<'a> Version<'a> {
    pub fn new(bytes: &'a [u8], mode: u32) -> Version<'a> {
        Version { bytes, mode }
    }

    fn is_symlink(&self) -> bool {
        self.mode & S_IFMT == S_IFLNK
    }

    fn is_binary(&self) -> bool {
        self.bytes[..self.bytes.len().min(BINARY_SNIFF)].contains(&0)
    }

    /// File type and permission bits: what a write keeps.
    fn kept_mode(&self) -> u32 {
        self.mode & (S_IFMT | 0o777)
    }

    fn same(a: Option<&Version<'_>>, b: Option<&Version<'_>>) -> bool {
        match (a, b) {
            (None, None) => true,
            (Some(a), Some(b)) => a.bytes == b.bytes && a.kept_mode() == b.kept_mode(),
            _ => false,
        }
    }
}

/// What the merge leaves at the path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Merged {
    /// The tree already holds the result: nothing to write.
    Keep,
    /// Write these bytes with this mode (a file's type and permissions).
    Write { bytes: Vec<u8>, mode: u32 },
    /// Remove the path.
    Delete,
}

/// Why a path cannot be merged: both sides changed it in ways that do
/// not combine. The words finish "PATH: ...".
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Conflict {
    #[error("both sides changed the same or adjacent lines")]
    Lines,
    #[error("added on both sides with different content")]
    AddedBoth,
    #[error("the task changed a file that was deleted meanwhile")]
    DeletedMeanwhile,
    #[error("the task deleted or renamed a file that was edited meanwhile")]
    EditedMeanwhile,
    #[error("a symlink changed on both sides")]
    Symlink,
    #[error("a binary file changed on both sides")]
    Binary,
    #[error("permissions changed differently on both sides")]
    Mode,
    #[error("changed meanwhile, and the content the task started from is not known")]
    UnknownBase,
}

/// Merges `theirs` (the task's result at a path) into `ours` (the tree
/// now) against `base` (the path as the task's view had it); `None` is an
/// absent path.
pub fn merge(
    base: Option<Version<'_>>,
    ours: Option<Version<'_>>,
    theirs: Option<Version<'_>>,
) -> Result<Merged, Conflict> {
    if Version::same(ours.as_ref(), theirs.as_ref()) {
        return Ok(Merged::Keep);
    }
    if Version::same(ours.as_ref(), base.as_ref()) {
        return Ok(match theirs {
            Some(t) => Merged::Write { bytes: t.bytes.to_vec(), mode: t.kept_mode() },
            None => Merged::Delete,
        });
    }
    if Version::same(theirs.as_ref(), base.as_ref()) {
        return Ok(Merged::Keep);
    }
    // Both sides changed the path, differently.
    let (base, ours, theirs) = match (base, ours, theirs) {
        (None, Some(_), Some(_)) => return Err(Conflict::AddedBoth),
        (Some(_), None, Some(_)) => return Err(Conflict::DeletedMeanwhile),
        (Some(_), Some(_), None) => return Err(Conflict::EditedMeanwhile),
        (Some(b), Some(o), Some(t)) => (b, o, t),
        // Two of three absent and not equal: covered above.
        _ => return Err(Conflict::AddedBoth),
    };
    if base.is_symlink() || ours.is_symlink() || theirs.is_symlink() {
        return Err(Conflict::Symlink);
    }
    let mode = pick(base.kept_mode(), ours.kept_mode(), theirs.kept_mode()).ok_or(Conflict::Mode)?;
    let bytes = if ours.bytes == theirs.bytes || theirs.bytes == base.bytes {
        ours.bytes.to_vec()
    } else if ours.bytes == base.bytes {
        theirs.bytes.to_vec()
    } else if base.is_binary() || ours.is_binary() || theirs.is_binary() {
        return Err(Conflict::Binary);
    } else {
        diffy::merge_bytes(base.bytes, ours.bytes, theirs.bytes).map_err(|_| Conflict::Lines)?
    };
    if bytes == ours.bytes && mode == ours.kept_mode() {
        return Ok(Merged::Keep);
    }
    Ok(Merged::Write { bytes, mode })
}

/// The rule where the content a task started from is not known: the tree
/// already holding the task's result is fine, anything else conflicts.
pub fn merge_unknown_base(ours: Option<Version<'_>>, theirs: Option<Version<'_>>) -> Result<Merged, Conflict> {
    if Version::same(ours.as_ref(), theirs.as_ref()) { Ok(Merged::Keep) } else { Err(Conflict::UnknownBase) }
}

/// A side that left a value as it was takes the other's; two different
/// changes: `None`.
fn pick(base: u32, ours: u32, theirs: u32) -> Option<u32> {
    if ours == theirs || theirs == base {
        Some(ours)
    } else if ours == base {
        Some(theirs)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::changes::S_IFREG;

    const F: u32 = S_IFREG | 0o644;
    const X: u32 = S_IFREG | 0o755;
    const L: u32 = S_IFLNK | 0o777;

    fn v(s: &str) -> Option<Version<'_>> {
        Some(Version::new(s.as_bytes(), F))
    }

    fn written(m: Result<Merged, Conflict>) -> String {
        match m {
            Ok(Merged::Write { bytes, .. }) => String::from_utf8(bytes).unwrap(),
            other => panic!("expected a write, got {other:?}"),
        }
    }

    const BASE: &str = "a\nb\nc\nd\ne\n";

    #[test]
    fn unchanged_since_base_takes_the_task_result() {
        assert_eq!(written(merge(v(BASE), v(BASE), v("a\nB\nc\nd\ne\n"))), "a\nB\nc\nd\ne\n");
        assert_eq!(merge(v(BASE), v(BASE), None), Ok(Merged::Delete));
        assert_eq!(written(merge(None, None, v("new\n"))), "new\n");
    }

    #[test]
    fn already_equal_is_nothing_to_do() {
        assert_eq!(merge(v(BASE), v("x\n"), v("x\n")), Ok(Merged::Keep));
        assert_eq!(merge(None, v("x\n"), v("x\n")), Ok(Merged::Keep));
        assert_eq!(merge(v(BASE), None, None), Ok(Merged::Keep));
        // The task left it as it was: the user's edit stays.
        assert_eq!(merge(v(BASE), v("user\n"), v(BASE)), Ok(Merged::Keep));
    }

    #[test]
    fn edits_of_different_lines_merge_once() {
        let ours = "a\nb\nc\nd\nE\n";
        let theirs = "A\nb\nc\nd\ne\n";
        assert_eq!(written(merge(v(BASE), v(ours), v(theirs))), "A\nb\nc\nd\nE\n");
        // An appended line and a changed first line.
        assert_eq!(written(merge(v(BASE), v("a\nb\nc\nd\ne\nf\n"), v(theirs))), "A\nb\nc\nd\ne\nf\n");
    }

    #[test]
    fn edits_of_the_same_or_adjacent_lines_conflict_as_in_git() {
        assert_eq!(merge(v(BASE), v("a\nX\nc\nd\ne\n"), v("a\nY\nc\nd\ne\n")), Err(Conflict::Lines));
        // Adjacent: line 1 and line 2.
        assert_eq!(merge(v(BASE), v("A\nb\nc\nd\ne\n"), v("a\nB\nc\nd\ne\n")), Err(Conflict::Lines));
        // Both appended different lines at the end.
        assert_eq!(merge(v(BASE), v("a\nb\nc\nd\ne\nX\n"), v("a\nb\nc\nd\ne\nY\n")), Err(Conflict::Lines));
    }

    #[test]
    fn identical_edits_merge() {
        let both = "A\nb\nc\nd\ne\n";
        assert_eq!(merge(v(BASE), v(both), v(both)), Ok(Merged::Keep));
        // The same edit on both sides, one more on the task's.
        assert_eq!(written(merge(v(BASE), v(both), v("A\nb\nc\nd\nE\n"))), "A\nb\nc\nd\nE\n");
    }

    #[test]
    fn add_add_with_different_content_conflicts() {
        assert_eq!(merge(None, v("mine\n"), v("theirs\n")), Err(Conflict::AddedBoth));
        // Even when one would fit into the other line by line.
        assert_eq!(merge(None, v("a\n"), v("a\nb\n")), Err(Conflict::AddedBoth));
    }

    #[test]
    fn a_rename_or_deletion_of_a_user_edited_file_conflicts() {
        // A rename deletes its old path: the user's edit there conflicts.
        assert_eq!(merge(v(BASE), v("a\nb\nc\nd\nE\n"), None), Err(Conflict::EditedMeanwhile));
        // The user deleted what the task changed.
        assert_eq!(merge(v(BASE), None, v("A\nb\nc\nd\ne\n")), Err(Conflict::DeletedMeanwhile));
    }

    #[test]
    fn symlinks_are_equal_or_conflict() {
        let link = |t: &'static str| Some(Version::new(t.as_bytes(), L));
        assert_eq!(merge(link("a"), link("b"), link("c")), Err(Conflict::Symlink));
        assert_eq!(merge(link("a"), link("c"), link("c")), Ok(Merged::Keep));
        assert_eq!(merge(link("a"), link("a"), link("c")), Ok(Merged::Write { bytes: b"c".to_vec(), mode: L }));
        // A file the user turned into a symlink, changed by the task.
        assert_eq!(merge(v("a\nb\n"), link("x"), v("a\nB\n")), Err(Conflict::Symlink));
    }

    #[test]
    fn binary_files_are_equal_or_conflict() {
        let bin = |s: &'static [u8]| Some(Version::new(s, F));
        // Different parts changed, which lines of text would merge.
        let (base, ours, theirs) = (b"\0\na\nb\nc\nd\n", b"\0\nA\nb\nc\nd\n", b"\0\na\nb\nc\nD\n");
        assert_eq!(merge(bin(base), bin(ours), bin(theirs)), Err(Conflict::Binary));
        assert_eq!(merge(bin(base), bin(base), bin(theirs)), Ok(Merged::Write { bytes: theirs.to_vec(), mode: F }));
        // A NUL past the first 8 KB is text.
        let big = |tail: &str| format!("{}\n{tail}\n\0\n", "x\n".repeat(5000));
        let (b, o, t) = (big("a\nb\nc"), big("A\nb\nc"), big("a\nb\nC"));
        assert!(matches!(merge(v(&b), v(&o), v(&t)), Ok(Merged::Write { .. })));
    }

    #[test]
    fn modes_follow_the_same_rule() {
        let with = |s: &'static str, m: u32| Some(Version::new(s.as_bytes(), m));
        // The task made it executable, the user edited a line.
        assert_eq!(
            merge(with(BASE, F), with("a\nb\nc\nd\nE\n", F), with(BASE, X)),
            Ok(Merged::Write { bytes: b"a\nb\nc\nd\nE\n".to_vec(), mode: X })
        );
        // The user made it executable, the task edited a line.
        assert_eq!(
            merge(with(BASE, F), with(BASE, X), with("A\nb\nc\nd\ne\n", F)),
            Ok(Merged::Write { bytes: b"A\nb\nc\nd\ne\n".to_vec(), mode: X })
        );
        // Both changed the mode differently.
        assert_eq!(
            merge(with(BASE, F), with("a\nb\nc\nd\nE\n", S_IFREG | 0o600), with("A\nb\nc\nd\ne\n", X)),
            Err(Conflict::Mode)
        );
        // Special bits are never part of what is compared or written.
        assert_eq!(merge(with(BASE, F), with(BASE, F | 0o4000), with("z\n", F)).map(|_| ()), Ok(()));
    }

    #[test]
    fn an_unknown_base_is_equal_or_conflict() {
        assert_eq!(merge_unknown_base(v("x\n"), v("x\n")), Ok(Merged::Keep));
        assert_eq!(merge_unknown_base(None, None), Ok(Merged::Keep));
        assert_eq!(merge_unknown_base(v("x\n"), v("y\n")), Err(Conflict::UnknownBase));
        assert_eq!(merge_unknown_base(None, v("y\n")), Err(Conflict::UnknownBase));
    }

    #[test]
    fn files_without_a_final_newline_merge() {
        assert_eq!(written(merge(v("a\nb\nc\nd"), v("A\nb\nc\nd"), v("a\nb\nc\nD"))), "A\nb\nc\nD");
    }
}
