//! Project paths as every stage sees them: task-file globs, the walker over
//! a project's files, the one rule for git's and cassist's own folders, and
//! file stamps. A leaf: imports nothing of the crate.
//!
//! Paths are relative to the project root with `/` separators.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use globset::{Glob, GlobBuilder};

/// Builds a glob the way task files mean it: `*` stays within one folder,
/// `**` crosses folders.
pub fn build_glob(pattern: &str) -> Result<Glob, globset::Error> {
    GlobBuilder::new(pattern).literal_separator(true).backslash_escape(true).build()
}

/// Whether a pattern holds no glob character: a path, naming a file or
/// everything below a folder.
pub fn is_literal(pattern: &str) -> bool {
    !pattern.contains(['*', '?', '[', ']', '{', '}', '\\'])
}

/// `./a//b/` → `a/b`; `a/../b` → `b` (escapes were rejected earlier).
pub fn normalize(p: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in p.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    parts.join("/")
}

/// Git's and cassist's own folders.
const RESERVED: [&str; 2] = [".git", ".cassist"];

/// The one rule for git's and cassist's own state: a folder named `.git`
/// or `.cassist` (at any depth: a submodule's too) is not part of the
/// project. The project walker does not enter it and nothing below it is
/// in a task's scope; a change below it is rejected by the review as a
/// change to cassist's own files (see [`is_reserved`]).
pub fn is_reserved_name(name: &OsStr) -> bool {
    RESERVED.iter().any(|r| name == *r)
}

/// Whether `rel` is `.git` or `.cassist`, or lies below one (the rule of
/// [`is_reserved_name`] applied to a relative path).
pub fn is_reserved(rel: &str) -> bool {
    rel.split('/').any(|c| is_reserved_name(OsStr::new(c)))
}

/// Walks the files a project shows: what git does not ignore (`.gitignore`
/// files, `.git/info/exclude`; `parents`: those of the folders above
/// `start` too), hidden files included, `.git/` and `.cassist/` folders
/// left out, symlinks not followed.
pub fn project_walker(start: &Path, parents: bool) -> impl Iterator<Item = ignore::DirEntry> + use<> {
    walker(std::slice::from_ref(&start.to_path_buf()), parents, true)
}

/// [`project_walker`] of several folders, one after the other, as one
/// walk: the ignore files of the folders above them are read once.
/// Each folder's entries begin with the folder itself (depth 0).
pub fn project_walker_of(starts: &[PathBuf], parents: bool) -> impl Iterator<Item = ignore::DirEntry> + use<> {
    walker(starts, parents, true)
}

/// The files below `start` that the [`project_walker`] leaves out because
/// git ignores them (`.git/` and `.cassist/` stay out): what a glob that
/// matched nothing may have meant.
pub fn ignored_files(start: &Path) -> impl Iterator<Item = ignore::DirEntry> {
    let shown: std::collections::HashSet<PathBuf> = project_walker(start, true).map(|e| e.into_path()).collect();
    ignore::WalkBuilder::new(start)
        .standard_filters(false)
        .hidden(false)
        .follow_links(false)
        .filter_entry(|e| !(e.file_type().is_some_and(|t| t.is_dir()) && is_reserved_name(e.file_name())))
        .build()
        .flatten()
        .filter(move |e| !e.file_type().is_some_and(|t| t.is_dir()) && !shown.contains(e.path()))
}

/// What a workspace holds, to be judged rather than hashed: the
/// [`project_walker`] of `start` that enters `.git/` and `.cassist/`
/// folders too.
pub fn workspace_walker(start: &Path) -> impl Iterator<Item = ignore::DirEntry> + use<> {
    walker(std::slice::from_ref(&start.to_path_buf()), false, false)
}

fn walker(starts: &[PathBuf], parents: bool, skip_reserved: bool) -> impl Iterator<Item = ignore::DirEntry> + use<> {
    let (first, rest) = starts.split_first().map_or((Path::new(""), &[][..]), |(f, r)| (f.as_path(), r));
    let mut builder = ignore::WalkBuilder::new(first);
    for start in rest {
        builder.add(start);
    }
    builder
        .hidden(false)
        .parents(parents)
        .git_ignore(true)
        .git_global(false)
        .git_exclude(true)
        .require_git(false)
        .ignore(false)
        .follow_links(false)
        .filter_entry(move |e| {
            !(skip_reserved && e.file_type().is_some_and(|t| t.is_dir()) && is_reserved_name(e.file_name()))
        })
        .build()
        .flatten()
}

/// The project's files (symlinks included, folders not) with their lstat:
/// tracked and untracked files not ignored by `.gitignore`, without `.git/`
/// and `.cassist/`.
pub fn project_files(root: &Path) -> Vec<(String, std::fs::Metadata)> {
    let mut out = Vec::new();
    for entry in project_walker(root, false) {
        if entry.file_type().is_some_and(|t| t.is_dir()) {
            continue;
        }
        let Ok(rel) = entry.path().strip_prefix(root) else { continue };
        let Some(rel) = rel.to_str() else { continue };
        if let Ok(meta) = std::fs::symlink_metadata(entry.path()) {
            out.push((rel.to_owned(), meta));
        }
    }
    out
}

/// What a stat says about a file: enough to tell, without reading it,
/// whether it changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stamp {
    pub size: u64,
    pub mtime_ns: i128,
    /// Nothing sets the ctime back: an edit that keeps size and mtime
    /// (`cp -p`, `touch -r`) still changes it.
    pub ctime_ns: i128,
    pub ino: u64,
    pub mode: u32,
}

impl Stamp {
    pub fn of(m: &std::fs::Metadata) -> Stamp {
        use std::os::unix::fs::MetadataExt;
        let ns = |s: i64, ns: i64| s as i128 * 1_000_000_000 + ns as i128;
        Stamp {
            size: m.size(),
            mtime_ns: ns(m.mtime(), m.mtime_nsec()),
            ctime_ns: ns(m.ctime(), m.ctime_nsec()),
            ino: m.ino(),
            mode: m.mode(),
        }
    }

    /// [`Stamp::of`] from a raw `stat` (an `fstatat`).
    pub fn of_stat(st: &nix::sys::stat::FileStat) -> Stamp {
        let ns = |s: i64, ns: i64| s as i128 * 1_000_000_000 + ns as i128;
        Stamp {
            size: st.st_size as u64,
            mtime_ns: ns(st.st_mtime, st.st_mtime_nsec),
            ctime_ns: ns(st.st_ctime, st.st_ctime_nsec),
            ino: st.st_ino,
            mode: st.st_mode,
        }
    }

    /// The same size, mtime and inode: the content may be taken as
    /// unchanged (what a hash cache keys on).
    pub fn same_content(&self, other: &Stamp) -> bool {
        self.size == other.size && self.mtime_ns == other.mtime_ns && self.ino == other.ino
    }

    /// [`same_content`](Self::same_content) and the same ctime: nothing
    /// touched the file, not even an edit that put its mtime back.
    pub fn untouched(&self, other: &Stamp) -> bool {
        self.same_content(other) && self.ctime_ns == other.ctime_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes() {
        assert_eq!(normalize("./src//a/../b.py"), "src/b.py");
    }

    #[test]
    fn star_stays_in_folder() {
        let g = build_glob("src/*.py").unwrap().compile_matcher();
        assert!(g.is_match("src/a.py"));
        assert!(!g.is_match("src/sub/a.py"));
        let g = build_glob("tests/**/*.py").unwrap().compile_matcher();
        assert!(g.is_match("tests/a.py"));
        assert!(g.is_match("tests/x/y/a.py"));
    }

    #[test]
    fn git_and_cassist_folders_are_reserved_at_any_depth() {
        for p in [".git", ".git/config", ".cassist/store/x", "vendor/lib/.git/HEAD", "sub/.cassist/lock"] {
            assert!(is_reserved(p), "{p}");
        }
        for p in ["src/a.rs", ".gitignore", ".github/workflows/ci.yml", "x.git/y", "my.cassist"] {
            assert!(!is_reserved(p), "{p}");
        }
    }

    #[test]
    fn a_ctime_change_alone_is_a_touch_not_a_content_change() {
        let a = Stamp { size: 1, mtime_ns: 2, ctime_ns: 3, ino: 4, mode: 0o100644 };
        let b = Stamp { ctime_ns: 5, ..a };
        assert!(a.same_content(&b) && !a.untouched(&b));
        assert!(!a.same_content(&Stamp { size: 2, ..a }));
    }
}
