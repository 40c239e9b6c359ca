//! Resolving context, scope and reference globs against the project
//! (SPEC 1: paths relative to the root; no absolute paths, no `..` escapes,
//! no symlinks out of the project; a context entry must match something).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::paths::{Stamp, build_glob, is_literal, normalize, project_walker};

/// A file found by a pattern, relative to the root with `/` separators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedFile {
    pub path: String,
    pub stamp: Stamp,
}

/// Why a pattern could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolveError {
    /// A file (or a folder on the way to it) is a symlink leading out of
    /// the project.
    Escapes { path: String, target: String },
}

/// Resolves patterns under one root, caching folder listings and symlink
/// checks across tasks (a plan resolves thousands of patterns).
pub struct Resolver {
    root: PathBuf,
    listings: HashMap<String, Arc<Vec<(String, bool)>>>,
    dir_inside: HashMap<PathBuf, Option<PathBuf>>,
}

impl Resolver {
    /// `root` must be canonical.
    pub fn new(root: &Path) -> Resolver {
        Resolver { root: root.to_path_buf(), listings: HashMap::new(), dir_inside: HashMap::new() }
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
        let glob = match build_glob(&pattern) {
            Ok(g) => g.compile_matcher(),
            Err(_) => return Ok(Vec::new()), // reported when the spec was read
        };
        let prefix = literal_prefix(&pattern);
        let listing = self.listing(&prefix);
        let mut out = Vec::new();
        for (path, is_link) in listing.iter() {
            if glob.is_match(path) {
                if *is_link {
                    out.extend(self.check_file(path)?);
                } else if let Some(stamp) = self.stamp(path) {
                    out.push(ResolvedFile { path: path.clone(), stamp });
                }
            }
        }
        Ok(out)
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

    fn stamp(&self, rel: &str) -> Option<Stamp> {
        std::fs::symlink_metadata(self.root.join(rel)).ok().map(|m| Stamp::of(&m))
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
        let escaped = match self.dir_inside.get(dir) {
            Some(v) => v.clone(),
            None => {
                let v = match std::fs::canonicalize(dir) {
                    Ok(c) if !c.starts_with(&self.root) => Some(c),
                    _ => None,
                };
                self.dir_inside.insert(dir.to_path_buf(), v.clone());
                v
            }
        };
        match escaped {
            Some(target) => Err(ResolveError::Escapes { path: rel.to_owned(), target: target.display().to_string() }),
            None => Ok(()),
        }
    }

    /// Every file below `prefix` (relative, `""` for the root), honouring
    /// `.gitignore` and skipping `.git/` and `.cassist/`; `(path, is_symlink)`.
    fn listing(&mut self, prefix: &str) -> Arc<Vec<(String, bool)>> {
        if let Some(l) = self.listings.get(prefix) {
            return Arc::clone(l);
        }
        // A listing of a parent folder already holds this one's files.
        let mut parent = prefix;
        while let Some(pos) = parent.rfind('/') {
            parent = &parent[..pos];
            if let Some(l) = self.listings.get(parent) {
                let want = format!("{prefix}/");
                let sub: Vec<_> = l.iter().filter(|(p, _)| p.starts_with(&want)).cloned().collect();
                let sub = Arc::new(sub);
                self.listings.insert(prefix.to_owned(), Arc::clone(&sub));
                return sub;
            }
        }
        let start = if prefix.is_empty() { self.root.clone() } else { self.root.join(prefix) };
        let mut files = Vec::new();
        if start.is_dir() && self.check_dir(&start, prefix).is_ok() {
            for entry in project_walker(&start, true) {
                let Some(ft) = entry.file_type() else { continue };
                if ft.is_dir() {
                    continue;
                }
                let Ok(rel) = entry.path().strip_prefix(&self.root) else { continue };
                let Some(rel) = rel.to_str() else { continue };
                files.push((rel.to_owned(), ft.is_symlink()));
            }
        }
        files.sort();
        let files = Arc::new(files);
        self.listings.insert(prefix.to_owned(), Arc::clone(&files));
        files
    }
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

    #[test]
    fn literal_prefixes() {
        assert_eq!(literal_prefix("src/a/*.py"), "src/a");
        assert_eq!(literal_prefix("**/*.py"), "");
        assert_eq!(literal_prefix("src/*/x.py"), "src");
        assert_eq!(literal_prefix("x.py"), "");
    }
}
