//! A change set: what an agent changed in its workspace, relative to the
//! project as it was when the workspace was made.

use serde::{Deserialize, Serialize};

/// How one path changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
    /// Deleted at `from` and added here with the same content.
    Renamed {
        from: String,
    },
}

/// One changed file (paths relative to the project root, `/`-separated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The path; when it is not UTF-8, its bytes escaped (see
    /// [`Hazard::NonUtf8Name`]).
    pub path: String,
    pub kind: ChangeKind,
    /// Content before: the file as the task's view had it when the view
    /// was fixed, its base for the three-way merge into the tree (`None`
    /// for added files, and for a file too large to be read).
    pub old: Option<Vec<u8>>,
    /// Mode before (type and permission bits), beside `old`; `None` for
    /// added files.
    pub old_mode: Option<u32>,
    /// `old` is not known to be what the task started from: the tree
    /// changed at this path after the task started and no copy of the
    /// start was kept. Writing the change there is then a conflict unless
    /// the tree already holds the result: never a guess.
    pub base_unknown: bool,
    /// Content after (`None` for deleted files, and for a changed entry
    /// with a [`hazard`](Change::hazard), whose content is never read).
    pub new: Option<Vec<u8>>,
    /// Unix mode after the change (or before, for deletions): file type
    /// and every permission bit, setuid, setgid and sticky included.
    pub mode: u32,
    /// Why this change cannot be taken as it is, found while reading it.
    /// Such a change is rejected by the review and never integrated.
    pub hazard: Option<Hazard>,
}

/// What makes a changed entry unfit to be integrated, found from its
/// metadata and name before any content is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hazard {
    /// The path is not valid UTF-8: these are its raw bytes (relative to
    /// the root), never renamed to a lossy form.
    NonUtf8Name(Vec<u8>),
    /// Not a file, folder or symlink: never opened.
    Special(Special),
    /// A file whose `size` bytes were not read: it is over the
    /// `file-size` limit, or it would take the change past `change-size`.
    Unread { size: u64 },
}

/// A file type that has no place in a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Special {
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

impl Special {
    /// The special type of a file mode, if it is one.
    pub fn of_mode(mode: u32) -> Option<Special> {
        match mode & S_IFMT {
            S_IFIFO => Some(Special::Fifo),
            S_IFSOCK => Some(Special::Socket),
            S_IFCHR => Some(Special::CharDevice),
            S_IFBLK => Some(Special::BlockDevice),
            _ => None,
        }
    }

    /// `a fifo`, `a socket`, `a character device`, `a block device`.
    pub fn describe(self) -> &'static str {
        match self {
            Special::Fifo => "a fifo",
            Special::Socket => "a socket",
            Special::CharDevice => "a character device",
            Special::BlockDevice => "a block device",
        }
    }
}

/// Whether `p` is relative, `/`-separated, and has no empty, `.` or `..`
/// part: a path that stays inside the folder it is joined to.
fn plain_relative(p: &str) -> bool {
    !p.is_empty() && p.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
}

/// A path's bytes as text: UTF-8 as it is, every other byte (and `\\`)
/// escaped as `\\xNN`, so that a name that is not UTF-8 is shown, never
/// renamed.
pub fn escape_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for ch in chunk.valid().chars() {
            if ch == '\\' {
                out.push_str("\\\\");
            } else {
                out.push(ch);
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// File type bits of a mode (`st_mode`), as Linux defines them.
pub const S_IFMT: u32 = 0o170000;
pub const S_IFREG: u32 = 0o100000;
pub const S_IFLNK: u32 = 0o120000;
const S_IFIFO: u32 = 0o010000;
const S_IFSOCK: u32 = 0o140000;
const S_IFCHR: u32 = 0o020000;
const S_IFBLK: u32 = 0o060000;
/// setuid, setgid and sticky.
pub const SPECIAL_BITS: u32 = 0o7000;

impl Change {
    /// Whether the entry (after the change) is a symlink.
    pub fn is_symlink(&self) -> bool {
        self.mode & S_IFMT == S_IFLNK
    }

    /// Whether the change leaves something behind (it is not a deletion).
    pub fn writes(&self) -> bool {
        self.kind != ChangeKind::Deleted
    }

    /// The setuid, setgid and sticky bits the change leaves on its file.
    pub fn special_bits(&self) -> u32 {
        if self.writes() { self.mode & SPECIAL_BITS } else { 0 }
    }

    /// Where a symlink the change leaves behind points, when that is
    /// outside the project: an absolute target, or a relative one whose
    /// `..` climb above the root, read from the link's folder without
    /// following anything.
    pub fn symlink_leaving(&self) -> Option<String> {
        if !self.writes() || !self.is_symlink() {
            return None;
        }
        let target = self.new.as_deref()?;
        let shown = || String::from_utf8_lossy(target).into_owned();
        if target.starts_with(b"/") || target.is_empty() {
            return Some(shown());
        }
        // Folders above the link's, inside the project.
        let mut depth = self.path.split('/').count() as i64 - 1;
        for part in target.split(|b| *b == b'/') {
            match part {
                b"" | b"." => {}
                b".." => depth -= 1,
                _ => depth += 1,
            }
            if depth < 0 {
                return Some(shown());
            }
        }
        None
    }

    /// The size the change leaves its file at (what counts against the
    /// limits): its content's, or, unread, its size on disk.
    pub fn new_size(&self) -> u64 {
        match (&self.hazard, &self.new) {
            (Some(Hazard::Unread { size }), _) => *size,
            (_, Some(bytes)) if self.writes() => bytes.len() as u64,
            _ => 0,
        }
    }

    /// Why integration must never write this change, if it must not: the
    /// review rejects each of these on its own; this is the second line.
    pub fn unsafe_reason(&self) -> Option<String> {
        let from = match &self.kind {
            ChangeKind::Renamed { from } => Some(from.as_str()),
            _ => None,
        };
        if let Some(p) = std::iter::once(self.path.as_str()).chain(from).find(|p| !plain_relative(p)) {
            return Some(format!("`{p}` is not a plain path inside the project"));
        }
        if let Some(h) = &self.hazard {
            return Some(match h {
                Hazard::NonUtf8Name(_) => "its name is not valid UTF-8".to_owned(),
                Hazard::Special(s) => format!("it is {}", s.describe()),
                Hazard::Unread { .. } => "it is over the size limits".to_owned(),
            });
        }
        if !self.writes() {
            return None;
        }
        let kind = self.mode & S_IFMT;
        if kind != S_IFREG && kind != S_IFLNK {
            return Some(format!("its file type ({:o}) is neither a file nor a symlink", kind));
        }
        if self.special_bits() != 0 {
            return Some(format!("it has setuid, setgid or sticky bits (mode {:o})", self.mode & 0o7777));
        }
        if let Some(target) = self.symlink_leaving() {
            return Some(format!("it is a symlink leading out of the project (to {target})"));
        }
        None
    }

    /// Whether either side holds bytes that are not UTF-8 text or hold NUL.
    pub fn is_binary(&self) -> bool {
        let bin = |b: &Option<Vec<u8>>| b.as_ref().is_some_and(|b| b.contains(&0) || std::str::from_utf8(b).is_err());
        bin(&self.old) || bin(&self.new)
    }

    /// Lines added by the change (for text files).
    pub fn added_lines(&self) -> Vec<String> {
        let Some(new) = self.new.as_deref().and_then(|b| std::str::from_utf8(b).ok()) else { return Vec::new() };
        let old = self.old.as_deref().and_then(|b| std::str::from_utf8(b).ok()).unwrap_or("");
        let diff = similar::TextDiff::from_lines(old, new);
        diff.iter_all_changes()
            .filter(|c| c.tag() == similar::ChangeTag::Insert)
            .map(|c| c.value().trim_end_matches('\n').to_owned())
            .collect()
    }
}

/// Every change of one workspace, sorted by path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangeSet {
    pub changes: Vec<Change>,
}

impl ChangeSet {
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    pub fn paths(&self) -> Vec<&str> {
        self.changes.iter().map(|c| c.path.as_str()).collect()
    }
}

/// A unified diff of the change set, git style, for people (the exact
/// bytes are stored separately). Binary files are named, not shown.
pub fn unified_diff(set: &ChangeSet) -> String {
    let mut out = String::new();
    for c in &set.changes {
        let (from, to) = match &c.kind {
            ChangeKind::Renamed { from } => (from.as_str(), c.path.as_str()),
            _ => (c.path.as_str(), c.path.as_str()),
        };
        out.push_str(&format!("diff --git a/{from} b/{to}\n"));
        match &c.kind {
            ChangeKind::Added => out.push_str(&format!("new file mode {:o}\n", c.mode & 0o777 | 0o100000)),
            ChangeKind::Deleted => out.push_str(&format!("deleted file mode {:o}\n", c.mode & 0o777 | 0o100000)),
            ChangeKind::Renamed { from } => out.push_str(&format!("rename from {from}\nrename to {}\n", c.path)),
            ChangeKind::Modified => {}
        }
        let a = if c.old.is_some() { format!("a/{from}") } else { "/dev/null".to_owned() };
        let b = if c.new.is_some() { format!("b/{to}") } else { "/dev/null".to_owned() };
        if c.is_binary() {
            out.push_str(&format!("Binary files {a} and {b} differ\n"));
            continue;
        }
        let old = c.old.as_deref().map(String::from_utf8_lossy).unwrap_or_default();
        let new = c.new.as_deref().map(String::from_utf8_lossy).unwrap_or_default();
        if old == new {
            continue;
        }
        let diff = similar::TextDiff::from_lines(old.as_ref(), new.as_ref());
        out.push_str(&diff.unified_diff().context_radius(3).header(&a, &b).to_string());
        if !out.ends_with('\n') {
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(path: &str, target: &str) -> Change {
        Change {
            path: path.into(),
            kind: ChangeKind::Added,
            old: None,
            new: Some(target.as_bytes().to_vec()),
            mode: S_IFLNK | 0o777,
            hazard: None,
            old_mode: None,
            base_unknown: false,
        }
    }

    #[test]
    fn symlinks_leaving_the_project_are_found_lexically() {
        for (path, target) in
            [("a", "/etc/passwd"), ("a", "../x"), ("d/a", "../../x"), ("d/a", "e/../../../x"), ("a", "")]
        {
            assert!(link(path, target).symlink_leaving().is_some(), "{path} -> {target}");
        }
        for (path, target) in
            [("a", "b"), ("d/a", "../b"), ("d/e/a", "../../b"), ("a", "./d/../b"), ("d/a", "x/../../b")]
        {
            assert_eq!(link(path, target).symlink_leaving(), None, "{path} -> {target}");
        }
        // A file whose content looks like a path is not a link; a deleted
        // link leaves nothing behind.
        let mut c = link("a", "/etc/passwd");
        c.mode = S_IFREG | 0o644;
        assert_eq!(c.symlink_leaving(), None);
        let mut c = link("a", "/etc/passwd");
        c.kind = ChangeKind::Deleted;
        assert_eq!((c.symlink_leaving(), c.unsafe_reason()), (None, None));
    }

    #[test]
    fn unsafe_entries_say_why() {
        let file = |mode: u32| Change { mode, ..link("a", "x") };
        assert_eq!(file(S_IFREG | 0o755).unsafe_reason(), None);
        assert_eq!(link("a", "b").unsafe_reason(), None);
        assert!(file(S_IFREG | 0o4755).unsafe_reason().unwrap().contains("setuid"));
        assert!(file(S_IFREG | 0o1644).unsafe_reason().unwrap().contains("sticky"));
        assert!(file(0o010644).unsafe_reason().unwrap().contains("neither a file nor a symlink"));
        assert!(link("a", "/etc").unsafe_reason().unwrap().contains("leading out of the project (to /etc)"));
        for (hazard, why) in [
            (Hazard::NonUtf8Name(b"a\xff".to_vec()), "not valid UTF-8"),
            (Hazard::Special(Special::Fifo), "a fifo"),
            (Hazard::Unread { size: 1 << 31 }, "over the size limits"),
        ] {
            let c = Change { hazard: Some(hazard), ..file(S_IFREG | 0o644) };
            assert!(c.unsafe_reason().unwrap().contains(why), "{why}");
        }
        for bad in ["../x", "/etc/passwd", "a/../../x", "a//b", "./a", ""] {
            let c = Change { path: bad.into(), ..file(S_IFREG | 0o644) };
            assert!(c.unsafe_reason().unwrap().contains("not a plain path"), "{bad}");
            let c = Change { kind: ChangeKind::Renamed { from: bad.into() }, ..file(S_IFREG | 0o644) };
            assert!(c.unsafe_reason().is_some(), "from {bad}");
        }
        assert_eq!(Special::of_mode(0o060600), Some(Special::BlockDevice));
        assert_eq!(Special::of_mode(S_IFREG | 0o644), None);
    }

    #[test]
    fn sizes_count_what_a_change_leaves() {
        let c = link("a", "abc");
        assert_eq!(c.new_size(), 3);
        let c = Change { hazard: Some(Hazard::Unread { size: 7 << 30 }), new: None, ..link("a", "x") };
        assert_eq!(c.new_size(), 7 << 30);
        let c = Change { kind: ChangeKind::Deleted, new: None, old: Some(b"abc".to_vec()), ..link("a", "x") };
        assert_eq!(c.new_size(), 0);
    }

    #[test]
    fn names_that_are_not_utf8_are_escaped() {
        assert_eq!(escape_bytes(b"src/ok.txt"), "src/ok.txt");
        assert_eq!(escape_bytes(b"src/bad\xff\xfe.txt"), "src/bad\\xff\\xfe.txt");
        assert_eq!(escape_bytes("é\\x".as_bytes()), "é\\\\x");
    }
}
