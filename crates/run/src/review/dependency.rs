//! The dependency rule: a change may not add a dependency to a manifest
//! (`Cargo.toml`, `package.json`, `pyproject.toml`, `requirements*.txt`,
//! `go.mod`) unless the task's constraints allow new dependencies
//! ([`constraints_allow_dependencies`]).

use std::collections::BTreeSet;
use std::sync::LazyLock;

use regex::Regex;

use super::{Finding, Rule, Severity, text};
use cassist_core::changes::{ChangeKind, ChangeSet};

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

/// A rejection for each manifest a change adds dependencies to, naming
/// them; a manifest that does not parse is left to acceptance.
pub(super) fn check(changes: &ChangeSet) -> Vec<Finding> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::review::Rule;
    use crate::review::test_support::*;

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
}
