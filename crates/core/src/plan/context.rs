//! Resolving context, scope and reference globs against the project: paths
//! relative to the root; no absolute paths, no `..` escapes, no symlinks
//! out of the project; a context entry must match something.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::paths::{Stamp, build_glob, is_literal, normalize, project_walker, project_walker_of};

/// A file found by a pattern, relative to the root with `/` separators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedFile {
    pub path: String,
    pub stamp: Stamp,
}

/// Why a pattern could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// A file (or a folder on the way to it) is a symlink leading out of
    /// the project.
    #[error("`{path}` leads outside the project (to {target})")]
    Escapes { path: String, target: String },
}

/// Sorts `files` by path and keeps each path once.
pub fn sort_unique(files: &mut Vec<ResolvedFile>) {
    files.sort_by(|a, b| a.path.cmp(&b.path));
    files.dedup_by(|a, b| a.path == b.path);
}

/// Resolves patterns under one root, caching folder listings and symlink
/// checks across tasks (a plan resolves thousands of patterns).
pub struct Resolver {
    root: PathBuf,
    listings: HashMap<String, Arc<Vec<(String, bool)>>>,
    dir_inside: HashMap<PathBuf, Option<PathBuf>>,
    /// Compiled globs by what follows their literal folders: a monorepo's
    /// thousand `packages/*/src/*.ts` patterns compile `*.ts` once (a
    /// glob's regex costs more to build than to match a folder's files).
    matchers: HashMap<String, Option<Arc<globset::GlobMatcher>>>,
    /// The last folder [`stamp`](Self::stamp) opened (relative), and its
    /// `O_PATH` descriptor.
    dir_fd: Option<(String, std::os::fd::OwnedFd)>,
}

impl Resolver {
    /// `root` must be canonical.
    pub fn new(root: &Path) -> Resolver {
        Resolver {
            root: root.to_path_buf(),
            listings: HashMap::new(),
            dir_inside: HashMap::new(),
            matchers: HashMap::new(),
            dir_fd: None,
        }
    }

    /// The files `pattern` names, sorted. A literal path naming a folder
    /// means every file below it.
    pub fn resolve(&mut self, pattern: &str) -> Result<Vec<ResolvedFile>, ResolveError> {
        let pattern = normalize(pattern);
        if is_literal(&pattern) {
            let full = self.root.join(&pattern);
            match std::fs::symlink_metadata(&full) {
                Ok(m) if m.is_dir() => {
                    self.check_dir(&full, &pattern)?;
                    return self.resolve(&format!("{pattern}/**"));
                }
                Ok(m) if m.is_file() => {
                    if let Some(parent) = full.parent() {
                        self.check_dir(parent, &pattern)?;
                    }
                    return Ok(vec![ResolvedFile { path: pattern, stamp: Stamp::of(&m) }]);
                }
                Ok(_) => return Ok(self.check_file(&pattern)?.into_iter().collect()),
                Err(_) => {
                    // A broken path, or one through a symlink: check the
                    // folders for escapes before saying "nothing".
                    if let Some(parent) = full.parent()
                        && parent.exists()
                    {
                        self.check_dir(parent, &pattern)?;
                    }
                    return Ok(Vec::new());
                }
            }
        }
        // The literal folders match themselves: the rest of the pattern is
        // matched against the rest of each path below them.
        let prefix = literal_prefix(&pattern);
        let skip = if prefix.is_empty() { 0 } else { prefix.len() + 1 };
        let Some(glob) = self.matcher(&pattern[skip..]) else {
            return Ok(Vec::new()); // reported when the spec was read
        };
        let listing = self.listing(&prefix);
        let mut out = Vec::new();
        for (path, is_link) in listing.iter() {
            if path.get(skip..).is_some_and(|rest| glob.is_match(rest)) {
                if *is_link {
                    out.extend(self.check_file(path)?);
                } else if let Some(stamp) = self.stamp(path) {
                    out.push(ResolvedFile { path: path.clone(), stamp });
                }
            }
        }
        Ok(out)
    }

    /// The compiled glob `rest`, `None` when it is not a glob.
    fn matcher(&mut self, rest: &str) -> Option<Arc<globset::GlobMatcher>> {
        self.matchers
            .entry(rest.to_owned())
            .or_insert_with(|| build_glob(rest).ok().map(|g| Arc::new(g.compile_matcher())))
            .clone()
    }

    /// A file git ignores that the glob `pattern` matches, for a glob
    /// that matched nothing else: the user meant a file that globs leave
    /// out, not a typo. `None` for a literal path (those name ignored
    /// files too).
    pub fn ignored_match(&self, pattern: &str) -> Option<String> {
        let pattern = normalize(pattern);
        if is_literal(&pattern) {
            return None;
        }
        let glob = build_glob(&pattern).ok()?.compile_matcher();
        let prefix = literal_prefix(&pattern);
        let start = if prefix.is_empty() { self.root.clone() } else { self.root.join(&prefix) };
        if !start.is_dir() {
            return None;
        }
        crate::paths::ignored_files(&start).take(100_000).find_map(|e| {
            let rel = e.path().strip_prefix(&self.root).ok()?.to_str()?.to_owned();
            glob.is_match(&rel).then_some(rel)
        })
    }

    /// The existing file closest to a pattern that matched nothing, for a
    /// "did you mean".
    pub fn nearest(&mut self, pattern: &str) -> Option<String> {
        let pattern = normalize(pattern);
        // Look from the deepest existing folder of the pattern's prefix.
        let mut prefix = literal_prefix(&pattern);
        while !prefix.is_empty() && !self.root.join(&prefix).is_dir() {
            prefix = prefix.rsplit_once('/').map_or(String::new(), |(p, _)| p.to_owned());
        }
        let listing = self.listing(&prefix);
        let mut best: Option<(f64, &str)> = None;
        for (path, _) in listing.iter().take(50_000) {
            let score = if is_literal(&pattern) {
                strsim::jaro_winkler(&pattern, path)
            } else {
                // Compare file names against the glob's last part with
                // its wildcards removed.
                let last = pattern.rsplit('/').next().unwrap_or("").replace(['*', '?'], "");
                let name = path.rsplit('/').next().unwrap_or("");
                if last.is_empty() { 0.0 } else { strsim::jaro_winkler(&last, name) * 0.95 }
            };
            if score >= 0.85 && best.is_none_or(|(s, _)| score > s) {
                best = Some((score, path));
            }
        }
        best.map(|(_, p)| p.to_owned())
    }

    /// The stamp of `rel` (a file a listing found), from an `lstat`
    /// relative to its folder, opened once for the folder's files in a
    /// row: the kernel looks up one name per file instead of every folder
    /// of the path from `/` (which was most of what resolving a
    /// monorepo's thousand globs cost).
    fn stamp(&mut self, rel: &str) -> Option<Stamp> {
        use nix::fcntl::OFlag;
        let (dir, name) = rel.rsplit_once('/').unwrap_or(("", rel));
        if self.dir_fd.as_ref().is_none_or(|(d, _)| d != dir) {
            let path = if dir.is_empty() { self.root.clone() } else { self.root.join(dir) };
            let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
            let fd = nix::fcntl::open(&path, flags, nix::sys::stat::Mode::empty()).ok();
            self.dir_fd = fd.map(|fd| (dir.to_owned(), fd));
        }
        match &self.dir_fd {
            Some((_, fd)) => nix::sys::stat::fstatat(fd, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
                .ok()
                .map(|st| Stamp::of_stat(&st)),
            None => std::fs::symlink_metadata(self.root.join(rel)).ok().map(|m| Stamp::of(&m)),
        }
    }

    /// A single named file: its folder must be inside the root; a symlink
    /// must point inside the root.
    fn check_file(&mut self, rel: &str) -> Result<Option<ResolvedFile>, ResolveError> {
        let full = self.root.join(rel);
        if let Some(parent) = full.parent() {
            self.check_dir(parent, rel)?;
        }
        let Ok(lmeta) = std::fs::symlink_metadata(&full) else { return Ok(None) };
        if lmeta.file_type().is_symlink() {
            // Shown as written in the link, not canonicalized: stable and
            // what the user sees with `ls -l`.
            let written = std::fs::read_link(&full).unwrap_or_default().display().to_string();
            let target = match std::fs::canonicalize(&full) {
                Ok(t) => t,
                Err(_) => {
                    // Broken link: judge its target as written.
                    let link = std::fs::read_link(&full).unwrap_or_default();
                    let target = full.parent().unwrap_or(&self.root).join(&link);
                    if !lexically_inside(&target, &self.root) {
                        return Err(ResolveError::Escapes { path: rel.to_owned(), target: link.display().to_string() });
                    }
                    return Ok(None);
                }
            };
            if !target.starts_with(&self.root) {
                return Err(ResolveError::Escapes { path: rel.to_owned(), target: written });
            }
            let Ok(meta) = std::fs::metadata(&full) else { return Ok(None) };
            if !meta.is_file() {
                return Ok(None);
            }
            return Ok(Some(ResolvedFile { path: rel.to_owned(), stamp: Stamp::of(&meta) }));
        }
        if !lmeta.is_file() {
            return Ok(None);
        }
        Ok(Some(ResolvedFile { path: rel.to_owned(), stamp: Stamp::of(&lmeta) }))
    }

    /// A folder on the way to `rel` must resolve inside the root.
    fn check_dir(&mut self, dir: &Path, rel: &str) -> Result<(), ResolveError> {
        match self.escapes(dir) {
            Some(target) => Err(ResolveError::Escapes { path: rel.to_owned(), target: target.display().to_string() }),
            None => Ok(()),
        }
    }

    /// Where folder `dir` really is, when that is outside the root. Checked
    /// one folder at a time from the root down, each remembered: a folder
    /// below one that stays inside stays inside unless it is a symlink
    /// itself, so a new folder costs one `lstat`, not a `realpath` of
    /// every folder above it.
    fn escapes(&mut self, dir: &Path) -> Option<PathBuf> {
        if let Some(v) = self.dir_inside.get(dir) {
            return v.clone();
        }
        let root = self.root.clone();
        let outside = |d: &Path| std::fs::canonicalize(d).ok().filter(|c| !c.starts_with(&root));
        let v = match dir.parent() {
            _ if dir == self.root => None,
            Some(parent) if dir.starts_with(&self.root) => match self.escapes(parent) {
                // Below a folder that leads out: out too (where to, said
                // as the kernel resolves it).
                Some(_) => outside(dir).or_else(|| Some(dir.to_path_buf())),
                None => match std::fs::symlink_metadata(dir) {
                    Ok(m) if m.file_type().is_symlink() => outside(dir),
                    _ => None,
                },
            },
            _ => outside(dir),
        };
        self.dir_inside.insert(dir.to_path_buf(), v.clone());
        v
    }

    /// Lists, in one walk, the folders the glob patterns among `patterns`
    /// will list: the ignore files of the folders above them are read once
    /// for all of them instead of once per folder (a monorepo's thousand
    /// `packages/p*/src/*.ts` patterns would read the root's `.gitignore` a
    /// thousand times). Only a cache: [`resolve`](Self::resolve) lists
    /// what is missing, the same way.
    pub fn prefetch<'a>(&mut self, patterns: impl IntoIterator<Item = &'a str>) {
        let mut prefixes: Vec<String> = patterns
            .into_iter()
            .map(normalize)
            .filter(|p| !is_literal(p) && build_glob(p).is_ok())
            .map(|p| literal_prefix(&p))
            .filter(|p| !self.listings.contains_key(p))
            .collect();
        prefixes.sort();
        prefixes.dedup();
        let mut starts: Vec<(String, PathBuf)> = Vec::new();
        for prefix in prefixes {
            let start = if prefix.is_empty() { self.root.clone() } else { self.root.join(&prefix) };
            if !start.is_dir() || self.check_dir(&start, &prefix).is_err() {
                // Listed (as empty) by `listing` when asked.
                continue;
            }
            starts.push((prefix, start));
        }
        if starts.is_empty() {
            return;
        }
        let paths: Vec<PathBuf> = starts.iter().map(|(_, s)| s.clone()).collect();
        let mut lists: Vec<Vec<(String, bool)>> = vec![Vec::new(); starts.len()];
        let mut current = 0;
        for entry in project_walker_of(&paths, true) {
            if entry.depth() == 0 {
                // The walk goes through its starting folders in order.
                if let Some(i) = paths[current..].iter().position(|p| p == entry.path()) {
                    current += i;
                }
                continue;
            }
            if let Some(file) = listed(&self.root, &entry) {
                lists[current].push(file);
            }
        }
        for ((prefix, _), mut files) in starts.into_iter().zip(lists) {
            files.sort();
            self.listings.insert(prefix, Arc::new(files));
        }
    }

    /// Every file below `prefix` (relative, `""` for the root), honouring
    /// `.gitignore` and skipping `.git/` and `.cassist/`; `(path, is_symlink)`.
    fn listing(&mut self, prefix: &str) -> Arc<Vec<(String, bool)>> {
        if let Some(l) = self.listings.get(prefix) {
            return Arc::clone(l);
        }
        let start = if prefix.is_empty() { self.root.clone() } else { self.root.join(prefix) };
        let mut files = Vec::new();
        if start.is_dir() && self.check_dir(&start, prefix).is_ok() {
            files.extend(project_walker(&start, true).filter_map(|e| listed(&self.root, &e)));
        }
        files.sort();
        let files = Arc::new(files);
        self.listings.insert(prefix.to_owned(), Arc::clone(&files));
        files
    }
}

/// A walked entry as a listing holds it: a file or symlink (not a folder),
/// relative to the root; `(path, is_symlink)`.
fn listed(root: &Path, entry: &ignore::DirEntry) -> Option<(String, bool)> {
    let ft = entry.file_type()?;
    if ft.is_dir() {
        return None;
    }
    Some((relative(root, entry.path())?.to_owned(), ft.is_symlink()))
}

/// `path` relative to `root` (`""` for the root itself), when it lies below
/// it as written: a comparison of bytes, not of components (a walk's paths
/// are the root joined with what it found).
fn relative<'a>(root: &Path, path: &'a Path) -> Option<&'a str> {
    let root = root.as_os_str().as_encoded_bytes();
    let rest = path.as_os_str().as_encoded_bytes().strip_prefix(root)?;
    let rest = match rest {
        [] => rest,
        _ if root.ends_with(b"/") => rest,
        [b'/', rest @ ..] => rest,
        _ => return None,
    };
    std::str::from_utf8(rest).ok()
}

/// The folders before the first glob character.
fn literal_prefix(pattern: &str) -> String {
    let mut parts = Vec::new();
    let segments: Vec<&str> = pattern.split('/').collect();
    for seg in &segments[..segments.len().saturating_sub(1)] {
        if is_literal(seg) {
            parts.push(*seg);
        } else {
            break;
        }
    }
    parts.join("/")
}

fn lexically_inside(path: &Path, root: &Path) -> bool {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out.starts_with(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A project with ignore files at several depths, a symlink to a
    /// folder inside and one to a folder outside.
    fn project() -> (tempfile::TempDir, tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let write = |rel: &str, text: &str| {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        write(".gitignore", "*.log\nbuild/\n");
        for p in ["a", "b", "c"] {
            write(&format!("packages/{p}/src/main.rs"), p);
            write(&format!("packages/{p}/src/debug.log"), p);
            write(&format!("packages/{p}/src/deep/x.rs"), p);
            write(&format!("packages/{p}/build/out.rs"), p);
        }
        write("packages/b/.gitignore", "deep/\n");
        write("packages/c/src/.gitignore", "!debug.log\n");
        write("src/lib.rs", "");
        std::fs::write(outside.path().join("secret.rs"), "").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("packages/out")).unwrap();
        std::os::unix::fs::symlink(root.join("packages/a"), root.join("packages/alias")).unwrap();
        (dir, outside, root)
    }

    const PATTERNS: &[&str] = &[
        "packages/a/src/**",
        "packages/b/src/**",
        "packages/c/src/*",
        "packages/*/src/*.rs",
        "packages/a/src/deep/*.rs",
        "packages/out/*.rs",
        "packages/alias/src/*.rs",
        "packages/a/build/*",
        "src/*.rs",
        "**/x.rs",
        "nothing/*.rs",
    ];

    fn resolve_all(r: &mut Resolver) -> Vec<Result<Vec<String>, ResolveError>> {
        PATTERNS.iter().map(|p| r.resolve(p).map(|f| f.into_iter().map(|f| f.path).collect())).collect()
    }

    #[test]
    fn listing_folders_ahead_changes_nothing() {
        let (_dir, _outside, root) = project();
        let lazy = resolve_all(&mut Resolver::new(&root));
        let mut r = Resolver::new(&root);
        r.prefetch(PATTERNS.iter().copied());
        assert!(r.listings.contains_key("packages/a/src") && r.listings.contains_key(""), "{:?}", r.listings.keys());
        assert_eq!(resolve_all(&mut r), lazy);
        // What the ignore files say, at every depth.
        let files = |i: usize| lazy[i].as_ref().unwrap().clone();
        assert_eq!(files(0), ["packages/a/src/deep/x.rs", "packages/a/src/main.rs"]);
        assert_eq!(files(1), ["packages/b/src/main.rs"]);
        assert_eq!(files(2), ["packages/c/src/.gitignore", "packages/c/src/debug.log", "packages/c/src/main.rs"]);
        assert_eq!(files(5), Vec::<String>::new(), "nothing outside the project is listed");
        assert_eq!(files(6), ["packages/alias/src/main.rs"]);
        assert_eq!(files(7), ["packages/a/build/out.rs"], "a folder named directly is listed, ignored or not");
        assert_eq!(files(10), Vec::<String>::new());
    }

    #[test]
    fn a_folder_escapes_through_any_folder_above_it() {
        let (_dir, outside, root) = project();
        std::fs::create_dir(outside.path().join("sub")).unwrap();
        let mut r = Resolver::new(&root);
        let real = outside.path().canonicalize().unwrap();
        assert_eq!(r.escapes(&root.join("packages/out")), Some(real.clone()));
        assert_eq!(r.escapes(&root.join("packages/out/sub")), Some(real.join("sub")));
        assert_eq!(r.escapes(&root.join("packages/alias/src")), None);
        assert_eq!(r.escapes(&root.join("packages/a/src")), None);
        assert_eq!(r.escapes(&root.join("packages/missing")), None);
    }

    #[test]
    fn a_glob_matched_below_its_literal_folders_finds_what_the_whole_glob_finds() {
        let (_dir, _outside, root) = project();
        let mut r = Resolver::new(&root);
        let all = r.listing("");
        for p in [
            "packages/a/src/**",
            "packages/c/src/*",
            "packages/*/src/*.rs",
            "packages/a/**/x.rs",
            "packages/a/src/**/*.rs",
            "packages/a/src/[dm]*",
            "packages/a/src/{main.rs,deep/x.rs}",
            "packages/a/src/*/x.rs",
            "src/*.rs",
            "**/x.rs",
        ] {
            let whole = build_glob(p).unwrap().compile_matcher();
            let expected: Vec<&str> = all.iter().map(|(f, _)| f.as_str()).filter(|f| whole.is_match(f)).collect();
            let found: Vec<String> = r.resolve(p).unwrap().into_iter().map(|f| f.path).collect();
            assert!(!expected.is_empty(), "{p}");
            assert_eq!(found, expected, "{p}");
        }
        assert_eq!(r.matchers.len(), 9, "one compiled glob per distinct rest: {:?}", r.matchers.keys());
    }

    #[test]
    fn paths_relative_to_the_root() {
        assert_eq!(relative(Path::new("/r/p"), Path::new("/r/p/a/b")), Some("a/b"));
        assert_eq!(relative(Path::new("/r/p"), Path::new("/r/p")), Some(""));
        assert_eq!(relative(Path::new("/r/p"), Path::new("/r/pq/a")), None);
        assert_eq!(relative(Path::new("/"), Path::new("/a/b")), Some("a/b"));
    }

    #[test]
    fn literal_prefixes() {
        assert_eq!(literal_prefix("src/a/*.py"), "src/a");
        assert_eq!(literal_prefix("**/*.py"), "");
        assert_eq!(literal_prefix("src/*/x.py"), "src");
        assert_eq!(literal_prefix("x.py"), "");
    }
}
