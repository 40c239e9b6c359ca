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
    pub path: String,
    pub kind: ChangeKind,
    /// Content before (`None` for added files).
    pub old: Option<Vec<u8>>,
    /// Content after (`None` for deleted files).
    pub new: Option<Vec<u8>>,
    /// Unix mode bits after the change (or before, for deletions).
    pub mode: u32,
}

impl Change {
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
