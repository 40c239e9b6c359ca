//! Review of a change set before acceptance (SPEC 3.5): what an agent
//! changed is checked for what must never land (cassist's own files,
//! special files and mode bits, symlinks leaving the project, names that
//! are not UTF-8, files and changes over the limits), against the task's
//! scope, its read-only kind or sandbox, new dependencies in manifests,
//! secrets in added lines, and whether tests were touched. Pure logic: the
//! change set comes in, the findings go out, each with a message an agent
//! can act on.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;
use std::time::Duration;

use globset::{GlobSet, GlobSetBuilder};
use regex::Regex;
use serde::{Deserialize, Serialize};

use cassist_core::changes::{Change, ChangeKind, ChangeSet, Hazard};
use cassist_core::limits::{Limits, format_size};
use cassist_core::paths::{build_glob, is_literal, is_reserved, is_reserved_name, normalize};
use cassist_core::spec::{Kind, SandboxLevel};

/// How serious a finding is: a rejection sends the change back to the
/// agent; a warning is recorded and shown but does not block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    Reject,
    Warning,
}

/// The review rule a finding comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rule {
    /// cassist's own files, `.git/` and `.cassist/`.
    OwnFiles,
    /// A name that is not valid UTF-8.
    PathName,
    /// A fifo, socket or device file.
    SpecialFile,
    /// setuid, setgid or sticky bits.
    SpecialBits,
    /// A symlink leading out of the project.
    Symlink,
    /// A file or change over `limits`.
    Limits,
    Scope,
    ReadOnly,
    Dependency,
    Secret,
    Tests,
}

impl Rule {
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::OwnFiles => "own-files",
            Rule::PathName => "path-name",
            Rule::SpecialFile => "special-file",
            Rule::SpecialBits => "special-bits",
            Rule::Symlink => "symlink",
            Rule::Limits => "limits",
            Rule::Scope => "scope",
            Rule::ReadOnly => "read-only",
            Rule::Dependency => "dependency",
            Rule::Secret => "secret",
            Rule::Tests => "tests",
        }
    }

    /// Whether a rejection by this rule is a security issue (SPEC 3.5):
    /// reported as such, and its message never holds a secret.
    pub fn is_security(self) -> bool {
        !matches!(self, Rule::Scope | Rule::ReadOnly | Rule::Dependency | Rule::Tests)
    }
}

/// One thing the review found. `message` never holds a secret's value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub rule: Rule,
    pub severity: Severity,
    pub path: Option<String>,
    pub message: String,
}

/// What the review needs to know about the task.
pub struct ReviewInput<'a> {
    /// Scope globs; empty means anything but `.git/` and `.cassist/`.
    pub scope: &'a [String],
    pub sandbox: SandboxLevel,
    pub kind: Kind,
    pub constraints: &'a [String],
    pub project_has_tests: bool,
    /// cassist's own files in this run.
    pub own_files: &'a OwnFiles,
    pub limits: Limits,
}

/// cassist's own files (SPEC 3.5), which a change may touch only when the
/// task's scope names the file literally: `cassist.kdl`, `cassist.lock`,
/// `.agents/config.toml`, the prompt template and instructions file, the
/// run's task files, and any other `.kdl` file (a task file of a later
/// run). Below `.git/` and `.cassist/` nothing may change at all.
#[derive(Debug, Clone, Default)]
pub struct OwnFiles {
    /// The run's task files, relative to the root.
    pub task_files: Vec<String>,
    pub template: Option<String>,
    pub instructions: Option<String>,
}

impl OwnFiles {
    /// What `path` is to cassist, when it is one of its own files (not
    /// counting `.git/` and `.cassist/`).
    pub fn what(&self, path: &str) -> Option<&'static str> {
        let is = |p: &Option<String>| p.as_deref().is_some_and(|p| normalize(p) == path);
        Some(match path {
            "cassist.kdl" => "the project config",
            "cassist.lock" => "the lock file",
            ".agents/config.toml" => "the trust setting",
            _ if is(&self.template) => "the prompt template",
            _ if is(&self.instructions) => "the agents' standing instructions",
            _ if self.task_files.iter().any(|t| normalize(t) == path) => "a task file of this run",
            _ if path.ends_with(".kdl") => "a KDL file, which cassist reads as task file when given its folder",
            _ => return None,
        })
    }
}

/// The findings of one review, in rule order (what must never land:
/// own files, names, special files and bits, symlinks, limits; then
/// read-only or scope, dependencies, secrets, tests), paths sorted within
/// a rule.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Review {
    pub findings: Vec<Finding>,
}

/// Most bytes of findings [`Review::feedback`] puts into a prompt (SPEC 3.7).
pub const FEEDBACK_LIMIT: usize = 4096;

impl Review {
    /// Whether any finding rejects the change.
    pub fn rejected(&self) -> bool {
        self.findings.iter().any(|f| f.severity == Severity::Reject)
    }

    /// Whether a rejection is a security issue (a secret, cassist's own
    /// files, what must never land), reported as such.
    pub fn security_issue(&self) -> bool {
        self.first_security_issue().is_some()
    }

    /// The first rejection that is a security issue.
    pub fn first_security_issue(&self) -> Option<&Finding> {
        self.findings.iter().find(|f| f.severity == Severity::Reject && f.rule.is_security())
    }

    /// A one-line reason for a rejected review (the first rejection, and
    /// how many more there are), for reports and the last failure reason.
    pub fn reason(&self) -> Option<String> {
        let rejects: Vec<&Finding> = self.findings.iter().filter(|f| f.severity == Severity::Reject).collect();
        let first = rejects.first()?;
        Some(match rejects.len() {
            1 => first.message.clone(),
            n => format!("{} (and {} more finding{})", first.message, n - 1, if n == 2 { "" } else { "s" }),
        })
    }

    /// The findings as markdown bullets for the agent's next prompt, at
    /// most about [`FEEDBACK_LIMIT`] bytes. Built from the messages only,
    /// which never hold a secret's value.
    pub fn feedback(&self) -> String {
        let mut out = String::new();
        for (i, f) in self.findings.iter().enumerate() {
            let label = match f.severity {
                Severity::Reject => "rejected",
                Severity::Warning => "warning",
            };
            let line = format!("- [{label}] {}\n", f.message);
            if !out.is_empty() && out.len() + line.len() > FEEDBACK_LIMIT {
                let rest = self.findings.len() - i;
                out.push_str(&format!("- … and {rest} more finding{} like these\n", if rest == 1 { "" } else { "s" }));
                break;
            }
            out.push_str(&line);
        }
        out
    }
}

/// Reviews `changes` against the task described by `input`.
pub fn review(changes: &ChangeSet, input: &ReviewInput) -> Review {
    let mut findings = check_never_lands(changes, input);
    // A path already rejected as cassist's own is not also out of scope.
    let own: BTreeSet<&str> =
        findings.iter().filter(|f| f.rule == Rule::OwnFiles).filter_map(|f| f.path.as_deref()).collect();
    let changes = &ChangeSet {
        changes: changes
            .changes
            .iter()
            .filter(|c| !touched_paths(c).any(|p| own.contains(p) || own.iter().any(|o| reserved_root(p) == Some(*o))))
            .cloned()
            .collect(),
    };
    let read_only =
        input.sandbox == SandboxLevel::ReadOnly || matches!(input.kind, Kind::Explore | Kind::Review | Kind::Test);
    if read_only {
        let why = match input.kind {
            Kind::Explore => "kind explore",
            Kind::Review => "kind review",
            Kind::Test => "kind test",
            Kind::Code => "sandbox read-only",
        };
        for c in &changes.changes {
            findings.push(Finding {
                rule: Rule::ReadOnly,
                severity: Severity::Reject,
                path: Some(c.path.clone()),
                message: format!(
                    "this task is read-only ({why}) but {} {}; make no changes to project files",
                    verb(&c.kind),
                    describe_path(c)
                ),
            });
        }
    } else {
        findings.extend(check_scope(changes, input.scope));
        if !constraints_allow_dependencies(input.constraints) {
            findings.extend(check_dependencies(changes));
        }
    }
    findings.extend(check_secrets(changes));
    if !read_only && input.kind == Kind::Code && input.project_has_tests && !touches_tests(changes) {
        findings.push(Finding {
            rule: Rule::Tests,
            severity: Severity::Warning,
            path: None,
            message: "no test was added or changed; add or update a test that covers this change".into(),
        });
    }
    Review { findings }
}

// ------------------------------------------------------- never lands

/// The paths a change touches: its own, and where a rename came from.
fn touched_paths(c: &Change) -> impl Iterator<Item = &str> {
    let from = match &c.kind {
        ChangeKind::Renamed { from } => Some(from.as_str()),
        _ => None,
    };
    std::iter::once(c.path.as_str()).chain(from)
}

/// `a/.git/` for `a/.git/hooks/x`: the first `.git` or `.cassist` folder
/// on the way, with its slash.
fn reserved_root(path: &str) -> Option<&str> {
    let mut end = 0;
    for part in path.split('/') {
        end += part.len();
        if is_reserved_name(std::ffi::OsStr::new(part)) {
            return Some(&path[..(end + 1).min(path.len())]);
        }
        end += 1;
    }
    None
}

/// What must never land, whatever the task's scope and level (SPEC 3.5):
/// changes to cassist's own files (unless the scope names the file),
/// below `.git/` and `.cassist/`, names that are not UTF-8, special files
/// and mode bits, symlinks leaving the project, files and changes over
/// the limits.
fn check_never_lands(changes: &ChangeSet, input: &ReviewInput) -> Vec<Finding> {
    let reject = |rule, path: &str, message: String| Finding {
        rule,
        severity: Severity::Reject,
        path: Some(path.to_owned()),
        message,
    };
    let scope = Scope::new(input.scope);
    let mut own = Vec::new();
    let mut reserved: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut entries = Vec::new();
    let mut total: u64 = 0;
    for c in &changes.changes {
        for path in touched_paths(c) {
            if let Some(root) = reserved_root(path) {
                reserved.entry(root).or_default().push(path);
            } else if let Some(what) = input.own_files.what(path)
                && !scope.names_literally(path)
            {
                own.push(reject(
                    Rule::OwnFiles,
                    path,
                    format!(
                        "{} {path}, {what}: one of cassist's own files, which a task may change only when its scope names the file; restore it",
                        verb(&c.kind)
                    ),
                ));
            }
        }
        if let Some(Hazard::NonUtf8Name(_)) = &c.hazard {
            entries.push(reject(
                Rule::PathName,
                &c.path,
                format!(
                    "the name {} is not valid UTF-8 (shown with its bytes escaped); cassist never renames a file: give it a UTF-8 name",
                    c.path
                ),
            ));
            continue;
        }
        if !c.writes() {
            continue;
        }
        if let Some(Hazard::Special(s)) = &c.hazard {
            entries.push(reject(
                Rule::SpecialFile,
                &c.path,
                format!("{} is {}: a change holds files, folders and symlinks only; remove it", c.path, s.describe()),
            ));
        }
        let bits = c.special_bits();
        if bits != 0 {
            let names: Vec<&str> = [(0o4000, "setuid"), (0o2000, "setgid"), (0o1000, "sticky")]
                .iter()
                .filter(|(b, _)| bits & b != 0)
                .map(|(_, n)| *n)
                .collect();
            entries.push(reject(
                Rule::SpecialBits,
                &c.path,
                format!(
                    "{} has the {} bit{} (mode {:o}): remove {} (`chmod ug-s,-t {}`)",
                    c.path,
                    names.join(" and "),
                    if names.len() == 1 { "" } else { "s" },
                    c.mode & 0o7777,
                    if names.len() == 1 { "it" } else { "them" },
                    c.path
                ),
            ));
        }
        if let Some(target) = c.symlink_leaving() {
            entries.push(reject(
                Rule::Symlink,
                &c.path,
                format!(
                    "{} is a symlink to {target}, which leads outside the project; remove it, or point it with a relative path at a file inside the project",
                    c.path
                ),
            ));
        }
        let size = c.new_size();
        if size > input.limits.file_size {
            entries.push(reject(
                Rule::Limits,
                &c.path,
                format!(
                    "{} is {}, over the file-size limit of {}; remove it or make it smaller",
                    c.path,
                    format_size(size),
                    format_size(input.limits.file_size)
                ),
            ));
        } else {
            total = total.saturating_add(size);
        }
    }
    let mut out = own;
    for (root, paths) in reserved {
        let n = paths.len();
        let shown: Vec<&str> = paths.iter().take(3).copied().collect();
        out.push(reject(
            Rule::OwnFiles,
            root,
            format!(
                "changed {n} file{} under {root} ({}{}): git's and cassist's own folders are never part of a change; remove them, and do not run `git init`, `git add` or `git commit`",
                if n == 1 { "" } else { "s" },
                shown.join(", "),
                if n > shown.len() { ", …" } else { "" }
            ),
        ));
    }
    out.extend(entries);
    if total > input.limits.change_size {
        out.push(Finding {
            rule: Rule::Limits,
            severity: Severity::Reject,
            path: None,
            message: format!(
                "the change is {}, over the change-size limit of {}; make a smaller change",
                format_size(total),
                format_size(input.limits.change_size)
            ),
        });
    }
    out
}

fn verb(kind: &ChangeKind) -> &'static str {
    match kind {
        ChangeKind::Added => "created",
        ChangeKind::Modified => "changed",
        ChangeKind::Deleted => "deleted",
        ChangeKind::Renamed { .. } => "moved",
    }
}

fn describe_path(c: &Change) -> String {
    match &c.kind {
        ChangeKind::Renamed { from } => format!("{from} to {}", c.path),
        _ => c.path.clone(),
    }
}

// ---------------------------------------------------------------- scope

/// A task's scope: literal paths (a folder means everything below it) and
/// globs (`*` within a folder, `**` across), as task files mean them.
pub struct Scope {
    literals: Vec<String>,
    globs: GlobSet,
    everything: bool,
}

impl Scope {
    pub fn new(patterns: &[String]) -> Scope {
        let mut literals = Vec::new();
        let mut builder = GlobSetBuilder::new();
        let mut everything = patterns.is_empty();
        for p in patterns {
            let p = normalize(p);
            if p.is_empty() || p == "**" {
                everything = true;
            } else if is_literal(&p) {
                literals.push(p);
            } else if let Ok(g) = build_glob(&p) {
                builder.add(g);
            }
            // A bad glob was reported when the spec was read; it matches nothing.
        }
        let globs = builder.build().unwrap_or_else(|_| GlobSet::empty());
        Scope { literals, globs, everything }
    }

    /// Whether the scope names no path (everything is in it).
    pub fn is_everything(&self) -> bool {
        self.everything
    }

    /// The literal paths of the scope (files or folders).
    pub fn literals(&self) -> &[String] {
        &self.literals
    }

    /// Whether the scope names `path` itself literally (not a folder
    /// above it, not a glob).
    pub fn names_literally(&self, path: &str) -> bool {
        self.literals.iter().any(|l| l == path)
    }

    /// Whether `path` is in the scope; `.git/` and `.cassist/` never are,
    /// whatever the scope says.
    pub fn contains(&self, path: &str) -> bool {
        if is_reserved(path) {
            return false;
        }
        self.everything
            || self.globs.is_match(path)
            || self
                .literals
                .iter()
                .any(|l| path == l || path.strip_prefix(l.as_str()).is_some_and(|r| r.starts_with('/')))
    }
}

fn check_scope(changes: &ChangeSet, patterns: &[String]) -> Vec<Finding> {
    let scope = Scope::new(patterns);
    let shown =
        if patterns.is_empty() { "the whole project but .git/ and .cassist/".to_owned() } else { patterns.join(", ") };
    let mut out = Vec::new();
    for c in &changes.changes {
        let mut outside: Vec<(&str, &str, &str)> = Vec::new();
        if let ChangeKind::Renamed { from } = &c.kind {
            if !scope.contains(from) {
                outside.push((from, "moved away", "move it back"));
            }
            if !scope.contains(&c.path) {
                outside.push((&c.path, "created", "remove it"));
            }
        } else if !scope.contains(&c.path) {
            outside.push(match c.kind {
                ChangeKind::Added => (&c.path, "created", "remove it"),
                ChangeKind::Deleted => (&c.path, "deleted", "restore it"),
                _ => (&c.path, "changed", "revert it"),
            });
        }
        for (path, what, fix) in outside {
            let never = if is_reserved(path) { "; .git/ and .cassist/ are never in scope" } else { "" };
            out.push(Finding {
                rule: Rule::Scope,
                severity: Severity::Reject,
                path: Some(path.to_owned()),
                message: format!(
                    "modified unrelated files: {what} {path}, outside the scope ({shown}{never}); {fix} and change only files in the scope"
                ),
            });
        }
    }
    out
}

// --------------------------------------------------------- dependencies

static NEGATION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:not|no|never|nor|avoid\w*|forbid\w*|prohibit\w*|disallow\w*|refrain)\b|n't\b|\bcannot\b")
        .unwrap()
});
static DEPENDENCY_WORD: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)dependenc|\bdeps\b|\b(?:new|third[- ]party|external|extra|additional)\s+(?:crates?|packages?|librar(?:y|ies)|modules?)\b",
    )
    .unwrap()
});
static ALLOW_WORD: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(?:may|can|could|allow\w*|permit\w*|free\s+to|ok|okay|fine|welcome|acceptable)\b|\b(?:add|use|install)\s+(?:any|whatever)\b",
    )
    .unwrap()
});
static CLAUSE_BREAK: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"[.;,:!?()\n]|\s(?:but|however|although)\s").unwrap());

/// Whether the task's constraints allow new dependencies: some clause
/// names dependencies and allows them, without a negation ("You may add
/// dependencies", "New dependencies allowed"; not "Do not add
/// dependencies", "no new dependencies are allowed").
pub fn constraints_allow_dependencies(constraints: &[String]) -> bool {
    constraints.iter().any(|c| {
        CLAUSE_BREAK
            .split(c)
            .any(|clause| DEPENDENCY_WORD.is_match(clause) && ALLOW_WORD.is_match(clause) && !NEGATION.is_match(clause))
    })
}

/// The manifests whose dependencies are reviewed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Manifest {
    Cargo,
    Npm,
    PyProject,
    Requirements,
    GoMod,
}

fn manifest_kind(path: &str) -> Option<Manifest> {
    if path.split('/').any(|p| p == "node_modules" || p == "vendor" || p == "target") {
        return None;
    }
    let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
    let parent = dir.rsplit('/').next().unwrap_or("");
    match name {
        "Cargo.toml" => Some(Manifest::Cargo),
        "package.json" => Some(Manifest::Npm),
        "pyproject.toml" => Some(Manifest::PyProject),
        "go.mod" => Some(Manifest::GoMod),
        _ if name.ends_with(".txt") && (name.starts_with("requirements") || parent == "requirements") => {
            Some(Manifest::Requirements)
        }
        _ => None,
    }
}

/// The dependency names a manifest declares; `None` when it cannot be read.
fn dependency_names(kind: Manifest, text: &str) -> Option<BTreeSet<String>> {
    match kind {
        Manifest::Cargo => cargo_dependencies(text),
        Manifest::Npm => npm_dependencies(text),
        Manifest::PyProject => pyproject_dependencies(text),
        Manifest::Requirements => Some(requirements_dependencies(text)),
        Manifest::GoMod => Some(go_dependencies(text)),
    }
}

fn cargo_dependencies(text: &str) -> Option<BTreeSet<String>> {
    let root: toml::Table = toml::from_str(text).ok()?;
    let mut out = BTreeSet::new();
    const TABLES: [&str; 5] =
        ["dependencies", "dev-dependencies", "dev_dependencies", "build-dependencies", "build_dependencies"];
    let mut add = |t: &toml::Table| {
        for name in TABLES {
            if let Some(deps) = t.get(name).and_then(|d| d.as_table()) {
                for (key, spec) in deps {
                    // `alias = { package = "real-name" }` depends on real-name.
                    let real = spec.get("package").and_then(|p| p.as_str()).unwrap_or(key);
                    out.insert(real.to_owned());
                }
            }
        }
    };
    add(&root);
    if let Some(ws) = root.get("workspace").and_then(|w| w.as_table()) {
        add(ws);
    }
    if let Some(targets) = root.get("target").and_then(|t| t.as_table()) {
        for t in targets.values().filter_map(|t| t.as_table()) {
            add(t);
        }
    }
    Some(out)
}

fn npm_dependencies(text: &str) -> Option<BTreeSet<String>> {
    let root: serde_json::Value = serde_json::from_str(text).ok()?;
    let mut out = BTreeSet::new();
    for table in ["dependencies", "devDependencies", "peerDependencies", "optionalDependencies"] {
        if let Some(deps) = root.get(table).and_then(|d| d.as_object()) {
            out.extend(deps.keys().cloned());
        }
    }
    Some(out)
}

/// A Python distribution name as PEP 503 compares them: lowercase, runs of
/// `-`, `_` and `.` as one `-`.
fn normalize_python_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut sep = false;
    for ch in name.chars() {
        if matches!(ch, '-' | '_' | '.') {
            sep = true;
        } else {
            if sep && !out.is_empty() {
                out.push('-');
            }
            sep = false;
            out.push(ch.to_ascii_lowercase());
        }
    }
    out
}

static PEP508_NAME: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)").unwrap());

/// The name of a PEP 508 requirement (`requests[socks]>=2; python_version>"3"`).
fn pep508_name(req: &str) -> Option<String> {
    PEP508_NAME.captures(req).map(|c| normalize_python_name(&c[1]))
}

fn pyproject_dependencies(text: &str) -> Option<BTreeSet<String>> {
    let root: toml::Table = toml::from_str(text).ok()?;
    let mut out = BTreeSet::new();
    let strings = |v: Option<&toml::Value>, out: &mut BTreeSet<String>| {
        for s in v.and_then(|v| v.as_array()).into_iter().flatten().filter_map(|s| s.as_str()) {
            out.extend(pep508_name(s));
        }
    };
    let keys = |v: Option<&toml::Value>, out: &mut BTreeSet<String>| {
        for k in v.and_then(|v| v.as_table()).into_iter().flat_map(|t| t.keys()) {
            if k != "python" {
                out.insert(normalize_python_name(k));
            }
        }
    };
    let get = |path: &[&str]| -> Option<&toml::Value> {
        let mut v = root.get(path[0])?;
        for p in &path[1..] {
            v = v.get(p)?;
        }
        Some(v)
    };
    strings(get(&["project", "dependencies"]), &mut out);
    for groups in [get(&["project", "optional-dependencies"]), get(&["dependency-groups"])] {
        for list in groups.and_then(|g| g.as_table()).into_iter().flat_map(|t| t.values()) {
            strings(Some(list), &mut out);
        }
    }
    keys(get(&["tool", "poetry", "dependencies"]), &mut out);
    keys(get(&["tool", "poetry", "dev-dependencies"]), &mut out);
    for group in get(&["tool", "poetry", "group"]).and_then(|g| g.as_table()).into_iter().flat_map(|t| t.values()) {
        keys(group.get("dependencies"), &mut out);
    }
    strings(get(&["tool", "uv", "dev-dependencies"]), &mut out);
    for list in
        get(&["tool", "pdm", "dev-dependencies"]).and_then(|g| g.as_table()).into_iter().flat_map(|t| t.values())
    {
        strings(Some(list), &mut out);
    }
    Some(out)
}

static EGG: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"#egg=([A-Za-z0-9][A-Za-z0-9._-]*)").unwrap());
static DIRECT_REF: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*@").unwrap());

fn requirements_dependencies(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(egg) = EGG.captures(line) {
            out.insert(normalize_python_name(&egg[1]));
            continue;
        }
        // Comments start with whitespace and `#` (a URL may hold `#`).
        let line = match line.find(" #").or_else(|| line.find("\t#")) {
            Some(i) => line[..i].trim(),
            None => line,
        };
        if line.starts_with('-') {
            continue; // -r other.txt, -e ., --index-url ..., --hash=...
        }
        if let Some(c) = DIRECT_REF.captures(line) {
            out.insert(normalize_python_name(&c[1]));
        } else if line.contains("://") || line.starts_with(['.', '/', '~']) {
            continue; // a bare URL or path, no name to compare
        } else if let Some(name) = pep508_name(line) {
            out.insert(name);
        }
    }
    out
}

/// The modules a go.mod requires directly (`// indirect` ones follow from
/// those and from version changes, so they are not counted).
fn go_dependencies(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_block = false;
    for line in text.lines() {
        let (code, comment) = match line.find("//") {
            Some(i) => (&line[..i], &line[i..]),
            None => (line, ""),
        };
        let code = code.trim();
        let indirect = comment.contains("indirect");
        if in_block {
            if code.starts_with(')') {
                in_block = false;
            } else if let Some(module) = code.split_whitespace().next()
                && !indirect
            {
                out.insert(module.trim_matches('"').to_owned());
            }
            continue;
        }
        let Some(rest) = code.strip_prefix("require") else { continue };
        if !rest.starts_with([' ', '\t', '(']) {
            continue;
        }
        let rest = rest.trim();
        if rest.starts_with('(') {
            in_block = !rest.contains(')');
        } else if let Some(module) = rest.split_whitespace().next()
            && !indirect
        {
            out.insert(module.trim_matches('"').to_owned());
        }
    }
    out
}

fn text(bytes: Option<&Vec<u8>>) -> Option<&str> {
    bytes.and_then(|b| std::str::from_utf8(b).ok())
}

fn check_dependencies(changes: &ChangeSet) -> Vec<Finding> {
    let mut out = Vec::new();
    for c in &changes.changes {
        let Some(kind) = manifest_kind(&c.path) else { continue };
        let Some(new) = text(c.new.as_ref()) else { continue };
        // A renamed file is compared with its old self only when that was
        // the same kind of manifest.
        let old_kind = match &c.kind {
            ChangeKind::Added => None,
            ChangeKind::Renamed { from } => manifest_kind(from).filter(|k| *k == kind),
            _ => Some(kind),
        };
        let old = match old_kind {
            None => BTreeSet::new(),
            Some(k) => match text(c.old.as_ref()).map(|t| dependency_names(k, t)) {
                Some(Some(names)) => names,
                Some(None) => continue, // the old manifest did not parse: nothing to compare with
                None => BTreeSet::new(),
            },
        };
        // A manifest that no longer parses fails on its own at acceptance.
        let Some(new) = dependency_names(kind, new) else { continue };
        let added: Vec<&String> = new.difference(&old).collect();
        if added.is_empty() {
            continue;
        }
        let names = added.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ");
        let (noun, them) = if added.len() == 1 { ("dependency", "it") } else { ("dependencies", "them") };
        out.push(Finding {
            rule: Rule::Dependency,
            severity: Severity::Reject,
            path: Some(c.path.clone()),
            message: format!(
                "new {noun} added to {}: {names}; the task's constraints do not allow new dependencies — remove {them} and use what the project already depends on",
                c.path
            ),
        });
    }
    out
}

// -------------------------------------------------------------- secrets

static PRIVATE_KEY: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----").unwrap());
static BASE64_RUN: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"[A-Za-z0-9+/]{40,}").unwrap());

/// Token formats with a recognizable prefix, and what they are called.
static TOKENS: LazyLock<Vec<(Regex, &'static str)>> = LazyLock::new(|| {
    [
        (r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b", "AWS access key id"),
        (r"\bgh[pousr]_[A-Za-z0-9]{30,}\b", "GitHub token"),
        (r"\bgithub_pat_[A-Za-z0-9_]{40,}", "GitHub token"),
        (r"\bglpat-[A-Za-z0-9_-]{20,}", "GitLab token"),
        (r"\bxox[abprs]-[A-Za-z0-9-]{10,}", "Slack token"),
        (r"\bAIza[0-9A-Za-z_-]{35}", "Google API key"),
        (r"\bsk-ant-[A-Za-z0-9_-]{20,}", "Anthropic API key"),
        (r"\bsk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,}|\bsk-[A-Za-z0-9]{32,}", "OpenAI API key"),
        (r"\b[sr]k_live_[0-9A-Za-z]{20,}", "Stripe live key"),
    ]
    .into_iter()
    .map(|(re, kind)| (Regex::new(re).unwrap(), kind))
    .collect()
});

/// What every match of [`PRIVATE_KEY`] contains.
const PRIVATE_KEY_LITERAL: &str = "-----BEGIN ";
/// What every match of one of the [`TOKENS`] contains (its fixed prefix).
const TOKEN_LITERALS: &[&str] =
    &["AKIA", "ASIA", "gh", "github_pat_", "glpat-", "xox", "AIza", "sk-ant-", "sk-", "sk_live_", "rk_live_"];
/// What the name of every [`ASSIGNMENT`] contains, in any case.
const SECRET_NAME_WORDS: &[&str] = &["key", "token", "secret", "password", "passwd", "auth", "credential"];

/// Whether [`ASSIGNMENT`] may match `line`. Lines are searched only when
/// they may: most changes then compile none of these patterns, which
/// costs a task more than reading its change (about a millisecond).
fn may_assign_a_secret(line: &str) -> bool {
    // `(?i)` folds a few other letters onto ASCII ones (the Kelvin sign
    // onto `k`): a line with any non-ASCII character is always searched.
    if !line.is_ascii() {
        return true;
    }
    let lower = line.to_ascii_lowercase();
    SECRET_NAME_WORDS.iter().any(|w| lower.contains(w))
}

/// `NAME = "value"`, `NAME: value`, `export NAME=value`, `const NAME: &str = "value"`,
/// `"name": "value"`, `Authorization: Bearer value` where NAME names a secret.
static ASSIGNMENT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?i)(?P<name>[a-z0-9_.-]*(?:key|token|secret|password|passwd|auth|credential)[a-z0-9_.-]*)["']?\s*(?::\s*[a-z&'<>\[\]_ ]{1,40}?\s*)?(?:=|:=|=>|\?=|:)\s*(?:(?:bearer|basic|token)\s+)?(?P<value>"[^"]*"|'[^']*'|`[^`]*`|[^\s"'`,;)}\]]+)"#,
    )
    .unwrap()
});
static CODE_REFERENCE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z_$][\w$]*(?:(?:\.|::|->)[A-Za-z_$][\w$]*)*[(\[]?$").unwrap());
static URL_WITH_CREDENTIALS: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"://[^/\s:@]+:[^/\s@]+@").unwrap());

/// Words that mark a value as a placeholder or a lookup, not a secret.
const PLACEHOLDER_WORDS: &[&str] = &[
    "${",
    "$(",
    "{{",
    "%(",
    "<",
    ">",
    "xxxx",
    "****",
    "...",
    "changeme",
    "change_me",
    "change-me",
    "your",
    "example",
    "placeholder",
    "dummy",
    "fake",
    "redacted",
    "replace",
    "todo",
    "environ",
    "getenv",
    "process.env",
    "env::var",
    "env(",
    "secrets.",
];

fn looks_like_placeholder(value: &str) -> bool {
    let lower = value.to_ascii_lowercase();
    if lower.starts_with('$') || PLACEHOLDER_WORDS.iter().any(|w| lower.contains(w)) {
        return true;
    }
    // A run of six of the same character: "aaaaaa", "000000".
    let bytes = lower.as_bytes();
    bytes.windows(6).any(|w| w.iter().all(|b| *b == w[0]))
}

/// Shannon entropy of `s`, in bits per character.
pub fn shannon_entropy(s: &str) -> f64 {
    let mut counts = std::collections::HashMap::new();
    let mut n = 0usize;
    for ch in s.chars() {
        *counts.entry(ch).or_insert(0usize) += 1;
        n += 1;
    }
    if n == 0 {
        return 0.0;
    }
    counts.values().map(|&c| c as f64 / n as f64).map(|p| -p * p.log2()).sum()
}

/// Whether a value assigned to a secret-looking name looks like a real secret.
fn secret_value(raw: &str) -> bool {
    let quoted = raw.starts_with(['"', '\'', '`']);
    let value = if quoted { &raw[1..raw.len().saturating_sub(1).max(1)] } else { raw };
    if value.chars().count() < 16 || value.contains(char::is_whitespace) || looks_like_placeholder(value) {
        return false;
    }
    if value.starts_with('/') || value.starts_with("./") {
        return false; // a path
    }
    if value.contains("://") && !URL_WITH_CREDENTIALS.is_match(value) {
        return false; // a URL without credentials
    }
    if !quoted && !value.starts_with("eyJ") && CODE_REFERENCE.is_match(value) {
        // `os.environ[`, `settings.API_KEY`, `get_token(`: code, unless it
        // is a single word with digits and no underscore (an .env value).
        let single_word = !value.contains(['.', ':', '-', '(', '[', '$']);
        if !single_word || value.contains('_') || !value.contains(|c: char| c.is_ascii_digit()) {
            return false;
        }
    }
    // An environment variable's name: `API_KEY_NAME = "OPENAI_API_KEY"`.
    if value.chars().all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit()) && value.contains('_') {
        return false;
    }
    // Random secrets mix digits and letters, or both cases; words joined
    // by dashes (`user-profile-settings`) do not.
    let lower = value.contains(|c: char| c.is_ascii_lowercase());
    let upper = value.contains(|c: char| c.is_ascii_uppercase());
    let digit = value.contains(|c: char| c.is_ascii_digit());
    ((digit && (lower || upper)) || (lower && upper)) && shannon_entropy(value) >= 3.5
}

/// Added lines of a text change with their 1-based line numbers in the new file.
fn numbered_added_lines(c: &Change) -> Vec<(usize, String)> {
    let Some(new) = text(c.new.as_ref()) else { return Vec::new() };
    let old = text(c.old.as_ref()).unwrap_or("");
    if old.is_empty() {
        return new.lines().enumerate().map(|(i, l)| (i + 1, l.to_owned())).collect();
    }
    let diff = similar::TextDiff::configure().timeout(Duration::from_secs(2)).diff_lines(old, new);
    diff.iter_all_changes()
        .filter(|ch| ch.tag() == similar::ChangeTag::Insert)
        .filter_map(|ch| Some((ch.new_index()? + 1, ch.value().trim_end_matches(['\n', '\r']).to_owned())))
        .collect()
}

/// The secrets in a list of numbered lines: (line, kind), at most one per
/// kind and line, in line order.
fn find_secrets(lines: &[(usize, String)]) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut push = |line: usize, kind: String| {
        if !out.iter().any(|(l, k)| *l == line && *k == kind) {
            out.push((line, kind));
        }
    };
    for (i, (line_no, line)) in lines.iter().enumerate() {
        // A private key header counts when key material follows: on the
        // same line (an escaped PEM) or in the next few added lines. A
        // lone header in code that looks for keys is not a key.
        if let Some(m) = line.contains(PRIVATE_KEY_LITERAL).then(|| PRIVATE_KEY.find(line)).flatten() {
            let after = &line[m.end()..];
            let following = lines[i + 1..].iter().take(5).map(|(_, l)| l.as_str());
            if BASE64_RUN.is_match(after) || following.into_iter().any(|l| BASE64_RUN.is_match(l)) {
                push(*line_no, "private key".into());
            }
        }
        let mut token = false;
        let tokens: &[(Regex, &str)] = if TOKEN_LITERALS.iter().any(|l| line.contains(l)) { &TOKENS } else { &[] };
        for (re, kind) in tokens {
            if re.find_iter(line).any(|m| !looks_like_placeholder(m.as_str())) {
                push(*line_no, (*kind).into());
                token = true;
            }
        }
        // A known token format says more than "a value assigned to a name".
        if token || !may_assign_a_secret(line) {
            continue;
        }
        for caps in ASSIGNMENT.captures_iter(line) {
            if secret_value(&caps["value"]) {
                push(*line_no, format!("secret value assigned to `{}`", &caps["name"]));
            }
        }
    }
    out
}

fn check_secrets(changes: &ChangeSet) -> Vec<Finding> {
    let mut out = Vec::new();
    for c in &changes.changes {
        if c.new.is_none() || c.is_binary() {
            continue;
        }
        for (line, kind) in find_secrets(&numbered_added_lines(c)) {
            out.push(Finding {
                rule: Rule::Secret,
                severity: Severity::Reject,
                path: Some(c.path.clone()),
                message: format!(
                    "possible {kind} added in {}:{line} — remove it and read the value from the environment instead",
                    c.path
                ),
            });
        }
    }
    out
}

// ---------------------------------------------------------------- tests

/// Whether `path` (relative, `/`-separated) follows a common test layout:
/// a `tests/`, `test/`, `__tests__/`, `testdata/` folder (or a top-level
/// `spec/`), `*_test.go`, `test_*.py`, `*_test.py`, `conftest.py`,
/// `*.test.ts`/`.js`, `*.spec.ts`/`.js`, `tests.rs`, `*_test.rs`,
/// `*Test.java`, `*_spec.rb`, ...
pub fn looks_like_test_path(path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let Some((name, dirs)) = parts.split_last() else { return false };
    if dirs.iter().any(|d| matches!(*d, "tests" | "test" | "__tests__" | "testdata" | "testing"))
        || dirs.first().is_some_and(|d| *d == "spec")
    {
        return true;
    }
    let (stem, ext) = name.rsplit_once('.').unwrap_or((name, ""));
    match ext {
        "py" => stem.starts_with("test_") || stem.ends_with("_test") || matches!(stem, "tests" | "conftest"),
        "go" | "rs" | "rb" | "exs" | "ex" | "cc" | "cpp" | "c" => {
            stem.ends_with("_test") || stem.ends_with("_tests") || stem.ends_with("_spec") || stem == "tests"
        }
        "ts" | "tsx" | "js" | "jsx" | "mjs" | "cjs" | "mts" | "cts" => {
            stem.ends_with(".test") || stem.ends_with(".spec") || stem.ends_with("_test") || stem.ends_with(".e2e")
        }
        "java" | "kt" | "scala" | "cs" | "swift" | "php" => {
            stem.ends_with("Test") || stem.ends_with("Tests") || stem.ends_with("Spec") || stem.ends_with("IT")
        }
        _ => false,
    }
}

/// Whether any of `files` follows a test layout (see [`looks_like_test_path`]).
pub fn has_tests<'a>(files: impl IntoIterator<Item = &'a str>) -> bool {
    files.into_iter().any(looks_like_test_path)
}

/// Added lines that write a test inside a source file (Rust's inline test
/// modules, Python test functions).
static TEST_MARKER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"#\[(?:[a-z_]+::)?test\]|#\[cfg\(test\)\]|^\s*(?:async\s+)?def\s+test_|^\s*func\s+Test[A-Z_]").unwrap()
});

fn is_documentation(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    let name = lower.rsplit('/').next().unwrap_or(&lower);
    [".md", ".rst", ".txt", ".adoc"].iter().any(|e| name.ends_with(e))
        || lower.starts_with("docs/")
        || name.starts_with("license")
        || name.starts_with("changelog")
}

/// Whether the change writes tests: a test path, or test code added inline.
/// A change of documentation only needs none.
fn touches_tests(changes: &ChangeSet) -> bool {
    if changes.changes.iter().all(|c| is_documentation(&c.path)) {
        return true;
    }
    changes.changes.iter().any(|c| {
        looks_like_test_path(&c.path)
            || matches!(&c.kind, ChangeKind::Renamed { from } if looks_like_test_path(from))
            || (!c.is_binary() && c.added_lines().iter().any(|l| TEST_MARKER.is_match(l)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cassist_core::changes::{S_IFLNK, S_IFREG};

    fn change(path: &str, kind: ChangeKind, old: Option<&str>, new: Option<&str>) -> Change {
        Change {
            path: path.into(),
            kind,
            old: old.map(|s| s.as_bytes().to_vec()),
            new: new.map(|s| s.as_bytes().to_vec()),
            mode: S_IFREG | 0o644,
            hazard: None,
        }
    }
    fn added(path: &str, new: &str) -> Change {
        change(path, ChangeKind::Added, None, Some(new))
    }
    fn modified(path: &str, old: &str, new: &str) -> Change {
        change(path, ChangeKind::Modified, Some(old), Some(new))
    }
    fn set(changes: Vec<Change>) -> ChangeSet {
        ChangeSet { changes }
    }
    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }
    fn run(changes: Vec<Change>, scope: &[&str], constraints: &[&str]) -> Review {
        run_with(changes, scope, constraints, SandboxLevel::WorkspaceWrite, Kind::Code, false)
    }
    fn run_with(
        changes: Vec<Change>,
        scope: &[&str],
        constraints: &[&str],
        sandbox: SandboxLevel,
        kind: Kind,
        project_has_tests: bool,
    ) -> Review {
        let scope = strings(scope);
        let constraints = strings(constraints);
        let own_files = OwnFiles::default();
        let input = ReviewInput {
            scope: &scope,
            sandbox,
            kind,
            constraints: &constraints,
            project_has_tests,
            own_files: &own_files,
            limits: Limits::DEFAULT,
        };
        review(&set(changes), &input)
    }
    fn rules(r: &Review) -> Vec<Rule> {
        r.findings.iter().map(|f| f.rule).collect()
    }

    // ---- scope

    #[test]
    fn in_scope_changes_pass() {
        let r = run(
            vec![modified("src/text.py", "a\n", "b\n"), added("tests/unit/test_text.py", "def test_a(): pass\n")],
            &["src/text.py", "tests/**"],
            &[],
        );
        assert!(r.findings.is_empty(), "{r:?}");
        assert!(!r.rejected());
    }

    #[test]
    fn out_of_scope_change_is_rejected_with_an_actionable_message() {
        let r = run(vec![modified("src/other.py", "a\n", "b\n")], &["src/text.py", "tests/**"], &[]);
        assert!(r.rejected());
        assert_eq!(rules(&r), [Rule::Scope]);
        let f = &r.findings[0];
        assert_eq!(f.path.as_deref(), Some("src/other.py"));
        assert!(f.message.contains("modified unrelated files"), "{}", f.message);
        assert!(f.message.contains("src/other.py"));
        assert!(f.message.contains("src/text.py, tests/**"));
        assert!(f.message.contains("revert it"));
    }

    #[test]
    fn literal_folder_scope_covers_everything_below() {
        let r = run(vec![added("src/pkg/deep/a.rs", "x\n"), added("srcx/a.rs", "x\n")], &["src/pkg/"], &[]);
        assert_eq!(r.findings.len(), 1);
        assert_eq!(r.findings[0].path.as_deref(), Some("srcx/a.rs"));
        assert!(r.findings[0].message.contains("remove it"));
    }

    #[test]
    fn star_stays_within_a_folder() {
        let r = run(vec![added("src/a.py", ""), added("src/sub/b.py", "")], &["src/*.py"], &[]);
        assert_eq!(r.findings.len(), 1);
        assert_eq!(r.findings[0].path.as_deref(), Some("src/sub/b.py"));
    }

    #[test]
    fn empty_scope_allows_all_but_git_and_cassist() {
        let r = run(
            vec![
                added(".cassist/state.json", "{}"),
                modified(".git/config", "a", "b"),
                added(".github/workflows/ci.yml", "on: push\n"),
                added("anything/else.txt", "x\n"),
            ],
            &[],
            &[],
        );
        // Rejected as cassist's own files, one finding per folder.
        let paths: Vec<_> = r.findings.iter().map(|f| f.path.clone().unwrap()).collect();
        assert_eq!(paths, [".cassist/", ".git/"]);
        assert_eq!(rules(&r), [Rule::OwnFiles, Rule::OwnFiles]);
        assert!(
            r.findings[1].message.contains("changed 1 file under .git/ (.git/config)"),
            "{}",
            r.findings[1].message
        );
        assert!(r.findings[1].message.contains("never part of a change"));
        assert!(r.security_issue());
    }

    #[test]
    fn git_is_rejected_even_under_a_catch_all_glob_or_named_literally() {
        for scope in ["**", ".git/hooks/pre-commit", ".git"] {
            let r = run(vec![added(".git/hooks/pre-commit", "#!/bin/sh\n")], &[scope], &[]);
            assert_eq!(rules(&r), [Rule::OwnFiles], "{scope}");
        }
        // A submodule's repository too, and many files make one finding.
        let many: Vec<Change> = (0..5).map(|i| added(&format!("vendor/lib/.git/objects/{i}"), "x")).collect();
        let r = run(many, &[], &[]);
        assert_eq!(r.findings.len(), 1);
        assert_eq!(r.findings[0].path.as_deref(), Some("vendor/lib/.git/"));
        assert!(
            r.findings[0].message.contains("changed 5 files under vendor/lib/.git/ ("),
            "{}",
            r.findings[0].message
        );
        assert!(r.findings[0].message.contains(", …)"));
    }

    #[test]
    fn rename_checks_both_ends() {
        let c =
            change("src/new.py", ChangeKind::Renamed { from: "lib/old.py".into() }, Some("x = 1\n"), Some("x = 1\n"));
        let r = run(vec![c], &["src/**"], &[]);
        assert_eq!(r.findings.len(), 1);
        assert_eq!(r.findings[0].path.as_deref(), Some("lib/old.py"));
        assert!(r.findings[0].message.contains("move it back"));
    }

    #[test]
    fn deleting_outside_scope_is_rejected() {
        let r = run(vec![change("README.md", ChangeKind::Deleted, Some("# x\n"), None)], &["src/**"], &[]);
        assert_eq!(rules(&r), [Rule::Scope]);
        assert!(r.findings[0].message.contains("restore it"));
    }

    // ---- read-only

    #[test]
    fn read_only_kinds_and_sandbox_reject_any_change() {
        for (sandbox, kind) in [
            (SandboxLevel::ReadOnly, Kind::Code),
            (SandboxLevel::WorkspaceWrite, Kind::Explore),
            (SandboxLevel::WorkspaceWrite, Kind::Review),
            (SandboxLevel::Full, Kind::Test),
        ] {
            let r = run_with(vec![modified("src/a.rs", "a\n", "b\n")], &[], &[], sandbox, kind, true);
            assert_eq!(rules(&r), [Rule::ReadOnly], "{sandbox:?} {kind:?}");
            assert!(r.findings[0].message.contains("read-only"));
            assert!(r.findings[0].message.contains("make no changes"));
        }
    }

    #[test]
    fn read_only_without_changes_is_clean() {
        let r = run_with(vec![], &[], &[], SandboxLevel::ReadOnly, Kind::Explore, true);
        assert!(r.findings.is_empty());
    }

    #[test]
    fn read_only_still_reports_secrets() {
        let r = run_with(
            vec![added("notes.txt", "AKIAQWERTYUIOPASDFGH\n")],
            &[],
            &[],
            SandboxLevel::ReadOnly,
            Kind::Review,
            false,
        );
        assert_eq!(rules(&r), [Rule::ReadOnly, Rule::Secret]);
        assert!(r.security_issue());
    }

    // ---- dependencies

    const CARGO_OLD: &str = r#"
[package]
name = "demo"
version = "0.1.0"

[dependencies]
serde = { version = "1", features = ["derive"] }
regex = "1"

[dev-dependencies]
tempfile = "3"
"#;

    #[test]
    fn cargo_new_dependency_is_rejected_naming_it() {
        let new = CARGO_OLD.replace("regex = \"1\"", "regex = \"1\"\nrand = \"0.8\"");
        let new = new + "\n[target.'cfg(unix)'.dependencies]\nnix = \"0.29\"\n\n[build-dependencies]\ncc = \"1\"\n";
        let r = run(vec![modified("Cargo.toml", CARGO_OLD, &new)], &[], &[]);
        assert_eq!(rules(&r), [Rule::Dependency]);
        let m = &r.findings[0].message;
        assert!(m.contains("cc, nix, rand"), "{m}");
        assert!(!m.contains("serde"));
    }

    #[test]
    fn cargo_version_bump_and_moves_are_not_new() {
        let new = CARGO_OLD
            .replace("regex = \"1\"", "regex = \"1.11\"")
            .replace("[dev-dependencies]\ntempfile = \"3\"", "tempfile = \"3.10\"\n");
        let r = run(vec![modified("Cargo.toml", CARGO_OLD, &new)], &[], &[]);
        assert!(r.findings.is_empty(), "{r:?}");
    }

    #[test]
    fn cargo_renamed_package_and_workspace_tables() {
        let old = "[workspace.dependencies]\nanyhow = \"1\"\n";
        let new = "[workspace.dependencies]\nanyhow = \"1\"\nfoo = { package = \"bar\", version = \"2\" }\n";
        let r = run(vec![modified("Cargo.toml", old, new)], &[], &[]);
        assert!(r.findings[0].message.contains(": bar;"), "{}", r.findings[0].message);
    }

    #[test]
    fn package_json_dependencies() {
        let old = r#"{"name":"x","dependencies":{"react":"^18.0.0"},"devDependencies":{"jest":"^29"}}"#;
        let bump = r#"{"name":"x","dependencies":{"react":"^18.3.1"},"devDependencies":{"jest":"^29.7"}}"#;
        let new = r#"{"name":"x","dependencies":{"react":"^18.0.0","left-pad":"1"},"devDependencies":{"jest":"^29"},"peerDependencies":{"vue":"3"}}"#;
        assert!(run(vec![modified("web/package.json", old, bump)], &[], &[]).findings.is_empty());
        let r = run(vec![modified("web/package.json", old, new)], &[], &[]);
        assert_eq!(r.findings.len(), 1);
        assert!(r.findings[0].message.contains("left-pad, vue"));
        assert_eq!(r.findings[0].path.as_deref(), Some("web/package.json"));
    }

    #[test]
    fn node_modules_manifests_are_ignored() {
        let r = run(vec![added("node_modules/x/package.json", r#"{"dependencies":{"y":"1"}}"#)], &[], &[]);
        assert!(r.findings.is_empty());
    }

    #[test]
    fn pyproject_pep621_and_poetry() {
        let old = r#"
[project]
name = "demo"
dependencies = ["requests>=2.31", "Click[extra]~=8.0; python_version >= '3.8'"]

[project.optional-dependencies]
dev = ["pytest"]

[tool.poetry.dependencies]
python = "^3.11"
httpx = "^0.27"
"#;
        let bump = old.replace("requests>=2.31", "requests>=2.32").replace("httpx = \"^0.27\"", "httpx = \"^0.28\"");
        assert!(run(vec![modified("pyproject.toml", old, &bump)], &[], &[]).findings.is_empty());
        let new =
            old.replace("\"pytest\"]", "\"pytest\", \"ruff\"]").replace("python = \"^3.11\"", "python = \"^3.12\"")
                + "\n[tool.poetry.group.docs.dependencies]\nmkdocs = \"*\"\n";
        let new = new.replace("\"requests>=2.31\"", "\"requests>=2.31\", \"Typing_Extensions\"");
        let r = run(vec![modified("pyproject.toml", old, &new)], &[], &[]);
        assert!(r.findings[0].message.contains("mkdocs, ruff, typing-extensions"), "{}", r.findings[0].message);
    }

    #[test]
    fn requirements_names_ignore_comments_options_and_versions() {
        let old = "# pinned\nrequests==2.31.0  # http\n-r base.txt\n--index-url https://example.org/simple\nflask>=2\n";
        let bump = "# pinned\nrequests==2.32.3\n-r base.txt\nFlask>=3  # upgraded\n";
        assert!(run(vec![modified("requirements.txt", old, bump)], &[], &[]).findings.is_empty());
        let new = format!(
            "{old}numpy==1.26 \\\n    --hash=sha256:abc\npkg @ https://example.org/pkg.whl\ngit+https://github.com/o/r.git#egg=from_git\n"
        );
        let r = run(vec![modified("requirements-dev.txt", old, &new)], &[], &[]);
        assert!(r.findings[0].message.contains("from-git, numpy, pkg"), "{}", r.findings[0].message);
        assert!(run(vec![added("requirements/prod.txt", "django\n")], &[], &[]).rejected());
    }

    #[test]
    fn go_mod_require_lines_and_blocks() {
        let old = "module example.com/m\n\ngo 1.22\n\nrequire github.com/pkg/errors v0.9.1\n\nrequire (\n\tgolang.org/x/text v0.14.0\n\tgithub.com/x/y v1.0.0 // indirect\n)\n";
        let bump = old.replace("v0.14.0", "v0.15.0");
        assert!(run(vec![modified("go.mod", old, &bump)], &[], &[]).findings.is_empty());
        let new = old
            .replace("\tgolang.org/x/text v0.14.0\n", "\tgolang.org/x/text v0.14.0\n\tgithub.com/google/uuid v1.6.0\n")
            + "require github.com/new/indirect v1.0.0 // indirect\n";
        let r = run(vec![modified("go.mod", old, &new)], &[], &[]);
        assert_eq!(r.findings.len(), 1);
        assert!(r.findings[0].message.contains("github.com/google/uuid;"), "{}", r.findings[0].message);
    }

    #[test]
    fn brand_new_manifest_has_all_new_dependencies() {
        let r = run(vec![added("tools/Cargo.toml", "[package]\nname=\"t\"\n[dependencies]\nclap = \"4\"\n")], &[], &[]);
        assert_eq!(rules(&r), [Rule::Dependency]);
        assert!(r.findings[0].message.contains("clap"));
    }

    #[test]
    fn unparsable_manifest_is_left_to_acceptance() {
        let r = run(vec![modified("Cargo.toml", CARGO_OLD, "[dependencies\nrand = ")], &[], &[]);
        assert!(r.findings.is_empty());
    }

    #[test]
    fn constraints_allowing_dependencies() {
        for yes in [
            "You may add dependencies",
            "New dependencies allowed",
            "Dependencies are allowed: keep them small",
            "you can add dependencies if needed",
            "Allow new dependencies",
            "Feel free to add third-party libraries",
            "Adding deps is fine",
            "Don't touch main.rs, but you may add dependencies",
        ] {
            assert!(constraints_allow_dependencies(&strings(&[yes])), "{yes}");
        }
        for no in [
            "Do not add dependencies",
            "do not add dependencies without saying why",
            "No new dependencies are allowed",
            "Dependencies are not allowed",
            "You can't add dependencies",
            "Never add dependencies",
            "Keep the public API unchanged",
            "You may edit the packages/ folder",
            "Avoid new dependencies; you may refactor",
        ] {
            assert!(!constraints_allow_dependencies(&strings(&[no])), "{no}");
        }
    }

    #[test]
    fn allowing_constraint_lets_dependencies_through() {
        let new = CARGO_OLD.replace("regex = \"1\"", "regex = \"1\"\nrand = \"0.8\"");
        let r = run(vec![modified("Cargo.toml", CARGO_OLD, &new)], &[], &["You may add dependencies"]);
        assert!(r.findings.is_empty());
        let r = run(vec![modified("Cargo.toml", CARGO_OLD, &new)], &[], &["Do not add dependencies"]);
        assert!(r.rejected());
    }

    // ---- secrets

    fn secret_kinds(file: &str) -> Vec<(usize, String)> {
        let lines: Vec<(usize, String)> = file.lines().enumerate().map(|(i, l)| (i + 1, l.to_owned())).collect();
        find_secrets(&lines)
    }

    #[test]
    fn token_formats_are_found() {
        let cases = [
            ("aws = 'AKIAIOSFODNN7ABCDEFG'", "AWS access key id"),
            ("ASIAY34FZKBOKMUTVV7A", "AWS access key id"),
            ("t = ghp_1a2B3c4D5e6F7g8H9i0J1k2L3m4N5o6P7q8R", "GitHub token"),
            ("github_pat_11ABCDEFG0abcdefghijkl_mnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUV012345", "GitHub token"),
            ("glpat-xR4nd0mT0k3nV4lu3zz9", "GitLab token"),
            ("SLACK=xoxb-1234567890-0987654321-AbCdEfGhIjKl", "Slack token"),
            ("key: AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q", "Google API key"),
            ("sk-ant-api03-Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9", "Anthropic API key"),
            ("sk-proj-Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0", "OpenAI API key"),
            ("openai.api_key=sk-Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0Uv1Wx2", "OpenAI API key"),
            ("stripe: sk_live_4eC39HqLyjWDarjtT1zdp7dc", "Stripe live key"),
        ];
        for (line, kind) in cases {
            let found = secret_kinds(line);
            assert!(found.iter().any(|(l, k)| *l == 1 && k == kind), "{line}: {found:?}");
        }
    }

    #[test]
    fn token_placeholders_and_near_misses_are_not_secrets() {
        for line in [
            "AKIAIOSFODNN7EXAMPLE",
            "token = ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            "task-queue-worker-sk-abc",
            "const SK = \"sk-short\";",
            "risk-adjusted-return-calculation-module",
            "see https://docs.stripe.com/keys#sk_test",
        ] {
            assert!(secret_kinds(line).is_empty(), "{line}: {:?}", secret_kinds(line));
        }
    }

    #[test]
    fn private_key_needs_key_material() {
        let pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA1c2b3a4d5e6f7g8h9i0jKlMnOpQrStUvWxYz0123456789ab\n-----END RSA PRIVATE KEY-----\n";
        assert_eq!(secret_kinds(pem), [(1, "private key".to_string())]);
        let escaped = r#"{"key": "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"}"#;
        assert!(secret_kinds(escaped).iter().any(|(_, k)| k == "private key"));
        let scanner = "if line.starts_with(\"-----BEGIN OPENSSH PRIVATE KEY-----\") {\n    return true;\n}\n";
        assert!(secret_kinds(scanner).is_empty());
    }

    #[test]
    fn high_entropy_assignments_are_found() {
        for line in [
            r#"API_KEY = "q8Zr2Lx9Vt4Nw7Pb1Hs6""#,
            r#"export DB_PASSWORD=Tr0ub4dor3xKq9Zp2Wm"#,
            r#"  client_secret: 'f3A9c2E7b1D8e4F6a0C5'"#,
            r#""authToken": "aB3dE5gH7jK9mN1pQ3sT5v","#,
            r#"const SIGNING_KEY: &str = "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5";"#,
            r#"Authorization: Bearer a8F3kL0pQ7zX2cV9bN4mW1"#,
            r#"AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYzKq8d3QpLm"#,
        ] {
            let found = secret_kinds(line);
            assert!(found.iter().any(|(_, k)| k.starts_with("secret value assigned to")), "{line}: {found:?}");
        }
    }

    #[test]
    fn lines_that_cannot_hold_a_secret_are_skipped_and_no_other() {
        assert!(!may_assign_a_secret("let total = items.iter().sum::<u32>();"));
        assert!(may_assign_a_secret("MY_ApI_kEy = 1"));
        // Case folding reaches past ASCII: the Kelvin sign is a `k`.
        let kelvin = "\u{212A}EY = \"q8Zr2Lx9Vt4Nw7Pb1Hs6\"";
        assert!(may_assign_a_secret(kelvin));
        assert_eq!(secret_kinds(kelvin), [(1, "secret value assigned to `\u{212A}EY`".to_string())]);
    }

    #[test]
    fn placeholders_and_lookups_are_not_secrets() {
        for line in [
            r#"API_KEY = "${API_KEY}""#,
            r#"api_key: <your-api-key-goes-here>"#,
            r#"PASSWORD=xxxxxxxxxxxxxxxxxxxx"#,
            r#"password = "changeme-changeme-123""#,
            r#"API_KEY = os.environ["OPENAI_API_KEY"]"#,
            r#"token = os.getenv("GITHUB_TOKEN_FOR_CI")"#,
            r#"const apiKey = process.env.OPENAI_API_KEY_PROD;"#,
            r#"let token = std::env::var("CASSIST_TOKEN_VALUE")?;"#,
            r#"auth_message = "Authentication failed for this user, try again""#,
            r#"TOKEN_URL = "https://oauth2.googleapis.com/token/v2""#,
            r#"secret_key = settings.SECRET_KEY_BASE_VALUE"#,
            r#"KEY_NAME = "OPENAI_API_KEY_FOR_PRODUCTION""#,
            r#"token = "short""#,
            r#"cache_key = "user-profile-settings-page""#,
            r#"password_file = "/etc/app/secrets/password.txt""#,
            r#"token: ${{ secrets.GITHUB_TOKEN }}"#,
            r#"primary_key = generate_primary_key_for_table"#,
        ] {
            assert!(secret_kinds(line).is_empty(), "{line}: {:?}", secret_kinds(line));
        }
    }

    #[test]
    fn secret_finding_names_file_line_and_kind_but_never_the_value() {
        let secret = "ghp_Zx8Yw7Vu6Ts5Rq4Po3Nm2Lk1Ji0Hg9Fe8Dc7";
        let value = "q8Zr2Lx9Vt4Nw7Pb1Hs6";
        let old = "import os\n\nHOST = 'x'\n";
        let new = format!("import os\n\nHOST = 'x'\nTOKEN = '{secret}'\nAPI_KEY = \"{value}\"\n");
        let r = run(vec![modified("app/config.py", old, &new)], &[], &[]);
        assert!(r.rejected());
        assert!(r.security_issue());
        assert_eq!(rules(&r), [Rule::Secret, Rule::Secret]);
        assert!(r.findings[0].message.contains("GitHub token added in app/config.py:4"), "{}", r.findings[0].message);
        assert!(r.findings[1].message.contains("app/config.py:5"));
        assert!(r.findings[1].message.contains("read the value from the environment"));
        let fb = r.feedback();
        let json = serde_json::to_string(&r).unwrap();
        for text in [&fb, &json, &r.reason().unwrap()] {
            assert!(!text.contains(secret) && !text.contains(value), "{text}");
            assert!(!text.contains("ghp_Zx8"), "{text}");
        }
    }

    #[test]
    fn new_file_secrets_have_their_line_numbers() {
        let env = "# local settings\r\nDEBUG=1\r\nSTRIPE_KEY=sk_live_51HxQz2eZvKYlo2C8f0A1b2C3\r\n";
        let r = run(vec![added(".env", env)], &[], &[]);
        assert_eq!(r.findings.len(), 1, "{r:?}");
        assert!(
            r.findings[0].message.starts_with("possible Stripe live key added in .env:3 "),
            "{}",
            r.findings[0].message
        );
        assert!(!r.feedback().contains("sk_live_51"));
    }

    #[test]
    fn only_added_lines_are_scanned() {
        let old = "TOKEN = 'ghp_Zx8Yw7Vu6Ts5Rq4Po3Nm2Lk1Ji0Hg9Fe8Dc7'\n";
        let new = format!("{old}print('hello')\n");
        assert!(run(vec![modified("a.py", old, &new)], &[], &[]).findings.is_empty());
        assert!(run(vec![change("a.py", ChangeKind::Deleted, Some(old), None)], &[], &[]).findings.is_empty());
    }

    #[test]
    fn binary_files_are_not_scanned() {
        let mut c = added("img.bin", "");
        c.new = Some(b"\x00\x01AKIAQWERTYUIOPASDFGH\xff".to_vec());
        assert!(run(vec![c], &[], &[]).findings.is_empty());
    }

    #[test]
    fn entropy() {
        assert_eq!(shannon_entropy(""), 0.0);
        assert_eq!(shannon_entropy("aaaa"), 0.0);
        assert!((shannon_entropy("abcd") - 2.0).abs() < 1e-9);
        assert!(shannon_entropy("q8Zr2Lx9Vt4Nw7Pb1Hs6") > 4.0);
    }

    // ---- tests

    #[test]
    fn test_paths() {
        for p in [
            "tests/cli.rs",
            "test/helper.js",
            "src/__tests__/a.tsx",
            "pkg/foo_test.go",
            "test_text.py",
            "pkg/sub/text_test.py",
            "conftest.py",
            "web/button.test.ts",
            "web/button.spec.js",
            "src/plan/tests.rs",
            "core/src/test/java/com/x/FooTest.java",
            "spec/models/user_spec.rb",
            "app/FooTests.cs",
        ] {
            assert!(looks_like_test_path(p), "{p}");
        }
        for p in ["src/text.py", "src/spec/types.rs", "contest.py", "src/testament.rs", "latest/x.go", "README.md"] {
            assert!(!looks_like_test_path(p), "{p}");
        }
        assert!(has_tests(["src/a.rs", "tests/b.rs"]));
        assert!(!has_tests(["src/a.rs"]));
    }

    #[test]
    fn warns_when_project_has_tests_and_none_touched() {
        let code = || vec![modified("src/text.py", "a\n", "b\n")];
        let r = run_with(code(), &[], &[], SandboxLevel::WorkspaceWrite, Kind::Code, true);
        assert_eq!(rules(&r), [Rule::Tests]);
        assert_eq!(r.findings[0].severity, Severity::Warning);
        assert!(!r.rejected());
        assert!(r.findings[0].message.contains("no test was added or changed"));
        // No tests in the project: nothing to say.
        assert!(run_with(code(), &[], &[], SandboxLevel::WorkspaceWrite, Kind::Code, false).findings.is_empty());
    }

    #[test]
    fn touching_tests_or_inline_tests_or_docs_only_needs_no_warning() {
        let cases = vec![
            vec![modified("src/text.py", "a\n", "b\n"), added("tests/test_text.py", "def test_x(): pass\n")],
            vec![modified(
                "src/lib.rs",
                "fn a() {}\n",
                "fn a() {}\n#[cfg(test)]\nmod tests {\n#[test]\nfn t() {}\n}\n",
            )],
            vec![modified("README.md", "a\n", "b\n")],
        ];
        for changes in cases {
            let r = run_with(changes, &[], &[], SandboxLevel::WorkspaceWrite, Kind::Code, true);
            assert!(r.findings.is_empty(), "{r:?}");
        }
    }

    // ---- feedback

    #[test]
    fn feedback_lists_findings_as_bullets() {
        let r = run_with(
            vec![modified("src/other.py", "a\n", "b\n")],
            &["src/text.py"],
            &[],
            SandboxLevel::WorkspaceWrite,
            Kind::Code,
            true,
        );
        let fb = r.feedback();
        assert!(fb.starts_with("- [rejected] modified unrelated files: changed src/other.py"), "{fb}");
        assert!(fb.contains("\n- [warning] no test was added or changed"), "{fb}");
        assert_eq!(r.reason().unwrap(), r.findings[0].message);
        assert_eq!(Review::default().reason(), None);
        assert_eq!(Review::default().feedback(), "");
    }

    #[test]
    fn reason_counts_further_rejections() {
        let r = run(vec![added("a/x.txt", "x\n"), added("b/y.txt", "y\n"), added("c/z.txt", "z\n")], &["src/**"], &[]);
        let reason = r.reason().unwrap();
        assert!(reason.starts_with("modified unrelated files: created a/x.txt"), "{reason}");
        assert!(reason.ends_with("(and 2 more findings)"), "{reason}");
    }

    #[test]
    fn feedback_is_bounded() {
        let changes = (0..500).map(|i| added(&format!("other/file{i:03}.txt"), "x\n")).collect();
        let r = run(changes, &["src/**"], &[]);
        assert_eq!(r.findings.len(), 500);
        let fb = r.feedback();
        assert!(fb.len() <= FEEDBACK_LIMIT + 100, "{}", fb.len());
        assert!(fb.contains("more findings like these"));
    }

    #[test]
    fn serializes_kebab_case() {
        let f = Finding { rule: Rule::ReadOnly, severity: Severity::Warning, path: None, message: "m".into() };
        let json = serde_json::to_string(&f).unwrap();
        assert_eq!(json, r#"{"rule":"read-only","severity":"warning","path":null,"message":"m"}"#);
        for rule in [
            Rule::OwnFiles,
            Rule::PathName,
            Rule::SpecialFile,
            Rule::SpecialBits,
            Rule::Symlink,
            Rule::Limits,
            Rule::Scope,
            Rule::ReadOnly,
            Rule::Dependency,
            Rule::Secret,
            Rule::Tests,
        ] {
            assert_eq!(serde_json::to_string(&rule).unwrap(), format!("\"{}\"", rule.as_str()));
        }
    }

    // ------------------------------------------------- what never lands

    fn own() -> OwnFiles {
        OwnFiles {
            task_files: vec!["tasks/t.kdl".into(), "jobs/run.task".into()],
            template: Some("prompts/task.md".into()),
            instructions: Some("./docs/agents.md".into()),
        }
    }

    fn run_input(changes: Vec<Change>, scope: &[&str], own_files: &OwnFiles, limits: Limits) -> Review {
        let scope = strings(scope);
        let input = ReviewInput {
            scope: &scope,
            sandbox: SandboxLevel::WorkspaceWrite,
            kind: Kind::Code,
            constraints: &[],
            project_has_tests: false,
            own_files,
            limits,
        };
        review(&set(changes), &input)
    }

    #[test]
    fn cassist_own_files_are_rejected_unless_named_literally() {
        let own = own();
        for path in [
            "cassist.kdl",
            "cassist.lock",
            ".agents/config.toml",
            "prompts/task.md",
            "docs/agents.md",
            "tasks/t.kdl",
            "jobs/run.task",
            "tasks/new-evil.kdl",
            "deep/er/other.kdl",
        ] {
            let r = run_input(vec![modified(path, "a", "b")], &[], &own, Limits::DEFAULT);
            assert_eq!(rules(&r), [Rule::OwnFiles], "{path}");
            assert!(r.security_issue(), "{path}");
            let m = &r.findings[0].message;
            assert!(m.contains(&format!("changed {path}, ")) && m.contains("one of cassist's own files"), "{m}");
            assert!(m.contains("only when its scope names the file; restore it"), "{m}");
            // Named literally in the scope, the change is the task's.
            let r = run_input(vec![modified(path, "a", "b")], &[path], &own, Limits::DEFAULT);
            assert!(r.findings.is_empty(), "{path}: {:?}", r.findings);
            // A folder or a glob naming it is not enough.
            let folder = path.rsplit_once('/').map_or("**", |(d, _)| d);
            let r = run_input(vec![modified(path, "a", "b")], &[folder, "**/*.kdl"], &own, Limits::DEFAULT);
            assert_eq!(rules(&r), [Rule::OwnFiles], "{path} under {folder}");
        }
        // What each is, said; a narrow scope adds no second finding.
        let r = run_input(vec![added("cassist.kdl", "trust \"full\"\n")], &["src/**"], &own, Limits::DEFAULT);
        assert_eq!(rules(&r), [Rule::OwnFiles]);
        assert!(r.findings[0].message.contains("created cassist.kdl, the project config"));
        // Deleting or moving one away counts too.
        let r =
            run_input(vec![change("cassist.lock", ChangeKind::Deleted, Some("x"), None)], &[], &own, Limits::DEFAULT);
        assert_eq!(rules(&r), [Rule::OwnFiles]);
        let moved = change("x.txt", ChangeKind::Renamed { from: "tasks/t.kdl".into() }, Some("t"), Some("t"));
        let r = run_input(vec![moved], &[], &own, Limits::DEFAULT);
        assert_eq!(r.findings[0].path.as_deref(), Some("tasks/t.kdl"));
        // Other files are not cassist's.
        for path in ["src/cassist.kdl.md", "README.md", "docs/other.md", "prompts/other.md"] {
            let r = run_input(vec![modified(path, "a", "b")], &[], &own, Limits::DEFAULT);
            assert!(r.findings.is_empty(), "{path}: {:?}", r.findings);
        }
    }

    fn with_mode(mut c: Change, mode: u32) -> Change {
        c.mode = mode;
        c
    }

    #[test]
    fn special_files_bits_links_and_names_are_rejected_as_security_issues() {
        let fifo = Change {
            new: None,
            hazard: Some(Hazard::Special(cassist_core::changes::Special::Fifo)),
            ..added("run/ctl", "")
        };
        let socket = Change {
            new: None,
            hazard: Some(Hazard::Special(cassist_core::changes::Special::Socket)),
            ..added("s", "")
        };
        let r = run(vec![fifo, socket], &[], &[]);
        assert_eq!(rules(&r), [Rule::SpecialFile, Rule::SpecialFile]);
        assert!(
            r.findings[0]
                .message
                .starts_with("run/ctl is a fifo: a change holds files, folders and symlinks only; remove it")
        );
        assert!(r.findings[1].message.contains("is a socket"));
        assert!(r.security_issue());

        let r = run(vec![with_mode(added("bin/sh", "#!"), S_IFREG | 0o4755)], &[], &[]);
        assert_eq!(rules(&r), [Rule::SpecialBits]);
        assert_eq!(r.findings[0].message, "bin/sh has the setuid bit (mode 4755): remove it (`chmod ug-s,-t bin/sh`)");
        let r = run(vec![with_mode(added("d/x", ""), S_IFREG | 0o3775)], &[], &[]);
        assert!(r.findings[0].message.contains("has the setgid and sticky bits (mode 3775): remove them"));
        // A file deleted with its bits is fine.
        let gone = with_mode(change("bin/old", ChangeKind::Deleted, Some("x"), None), S_IFREG | 0o4755);
        assert!(run(vec![gone], &[], &[]).findings.is_empty());

        let link = |path: &str, target: &str| with_mode(added(path, target), S_IFLNK | 0o777);
        let r = run(
            vec![link("passwd", "/etc/passwd"), link("a/b/up", "../../../x"), link("a/ok", "../src/x.py")],
            &[],
            &[],
        );
        assert_eq!(rules(&r), [Rule::Symlink, Rule::Symlink]);
        assert_eq!(
            r.findings[0].message,
            "passwd is a symlink to /etc/passwd, which leads outside the project; remove it, or point it with a relative path at a file inside the project"
        );
        assert_eq!(r.findings[1].path.as_deref(), Some("a/b/up"));

        let bad = Change {
            new: None,
            hazard: Some(Hazard::NonUtf8Name(b"src/bad\xff.py".to_vec())),
            ..added("src/bad\\xff.py", "")
        };
        let r = run(vec![bad], &["src/**"], &[]);
        assert_eq!(rules(&r), [Rule::PathName]);
        assert!(
            r.findings[0]
                .message
                .starts_with("the name src/bad\\xff.py is not valid UTF-8 (shown with its bytes escaped)")
        );
        assert!(r.security_issue());
    }

    #[test]
    fn files_and_changes_over_the_limits_are_rejected_with_their_sizes() {
        let big = Change { new: None, hazard: Some(Hazard::Unread { size: 2 << 30 }), ..added("src/big.bin", "") };
        let r = run(vec![big], &[], &[]);
        assert_eq!(rules(&r), [Rule::Limits]);
        assert_eq!(
            r.findings[0].message,
            "src/big.bin is 2 GiB, over the file-size limit of 16 MiB; remove it or make it smaller"
        );
        assert!(r.security_issue());

        let small = Limits { file_size: 10, change_size: 25, transcript: 1 << 20 };
        let files = vec![
            added("a", "0123456789"),
            added("b", "0123456789"),
            Change { new: None, hazard: Some(Hazard::Unread { size: 9 }), ..added("c", "") },
            added("d", "0123456789x"),
            change("e", ChangeKind::Deleted, Some(&"x".repeat(100)), None),
        ];
        let r = run_input(files, &[], &OwnFiles::default(), small);
        // d is over file-size on its own; a, b and c make 29 bytes.
        assert_eq!(rules(&r), [Rule::Limits, Rule::Limits]);
        assert_eq!(r.findings[0].path.as_deref(), Some("d"));
        assert_eq!(
            r.findings[0].message,
            "d is 11 bytes, over the file-size limit of 10 bytes; remove it or make it smaller"
        );
        assert_eq!(r.findings[1].path, None);
        assert_eq!(
            r.findings[1].message,
            "the change is 29 bytes, over the change-size limit of 25 bytes; make a smaller change"
        );
    }

    #[test]
    fn the_first_security_issue_is_the_reason() {
        let r = run(vec![added("notes/x.txt", "x"), added("cassist.kdl", "trust \"full\"")], &["src/**"], &[]);
        assert_eq!(rules(&r), [Rule::OwnFiles, Rule::Scope]);
        assert_eq!(r.first_security_issue().map(|f| f.rule), Some(Rule::OwnFiles));
        assert!(!run(vec![added("notes/x.txt", "x")], &["src/**"], &[]).security_issue());
    }
}
