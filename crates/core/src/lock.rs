//! `cassist.lock`: the recorded result of each task, meant to be committed
//! with the project (a clone then knows which tasks are done and replays
//! them from the store). KDL, sorted by task name, one block per task, so
//! diffs stay small and stable:
//!
//! ```kdl
//! // cassist.lock: what cassist run recorded. Commit this file.
//! version 1
//! task "add-slugify" {
//!     before "<input hash before the run>"
//!     after "<input hash of the project the run left>"
//!     recipe "<hash of what the task asks, its files' contents aside>"
//!     dependencies "<hash of its dependencies' outputs it ran with>"
//!     outputs "<hash of the task's outputs in the project the run left>"
//!     output "src/new.py" "<content hash>" created=#true
//!     output "src/old.py" "<content hash>"
//!     output "src/gone.py" #null
//!     patch "<hash of the integrated change>"
//!     agent "claude" version="2.1.197 (Claude Code)"
//!     date "2026-11-30T12:00:00Z"
//! }
//! ```
//!
//! `before` and `after` are input hashes ([`crate::plan::hash`]): the
//! task's inputs before its recorded run, and as the run left the project
//! (a later task of the same run may have changed them). `recipe` is the
//! hash of what the task asks, without what the tree and the machine
//! bring: everything of the input hash but the contents of the files it
//! reads (context, reference, standing instructions), its dependencies'
//! outputs, the agent's version and the limits that bound a run (timeout,
//! max-iterations, max-cost). `dependencies` (only for a task that has
//! some) is the hash of the outputs of its dependencies it ran with. When
//! both are as recorded but its files changed, the task is re-verified by
//! its acceptance commands rather than run again
//! ([`crate::plan::state`]). `outputs` is the
//! rest of the after-state: blake3 over the sorted paths the task's patch
//! wrote or deleted, each with its content hash as the run left the tree
//! (absent for a deleted path; see [`crate::plan::state::outputs_hash`]).
//! Each `output` names one of them with its content hash as the run left
//! it (`#null`: the task deleted it) and whether the task created it
//! (`created=#true`), sorted by path: a clone with no `.cassist/` knows from
//! the lock alone which outputs exist and what they hold (see
//! [`crate::plan::state`] for what an edited, deleted or missing output
//! means). A line without `output` nodes (an older cassist's) is checked
//! against `outputs` through the store, one without `outputs` either on
//! its inputs only.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kdl::{KdlDocument, KdlValue};

pub const LOCK_FILE: &str = "cassist.lock";
const VERSION: i128 = 1;

/// One task's record.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LockEntry {
    pub before: String,
    pub after: String,
    /// What the task asks, its files' contents, dependencies' outputs,
    /// agent version and run limits aside (`None`: a line of an older
    /// cassist, which is never re-verified).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recipe: Option<String>,
    /// The outputs of its dependencies it ran with (`None`: it has none,
    /// or an older cassist wrote the line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependencies: Option<String>,
    /// The task's outputs as the run left them (`None`: a line written by
    /// an older cassist, checked on inputs only).
    pub outputs: Option<String>,
    /// Each output: path → its content hash as the run left it and
    /// whether the task created it (empty: a line of an older cassist,
    /// whose outputs are known from the store only). Their hashes are
    /// what `outputs` is the hash of.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub output_files: BTreeMap<String, LockedOutput>,
    pub patch: String,
    pub agent: String,
    pub agent_version: Option<String>,
    pub date: String,
}

/// One output of a task's recorded run.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct LockedOutput {
    /// Its content hash as the run left the tree; `None`: absent (the task
    /// deleted it).
    pub hash: Option<String>,
    /// The task's change added it (a new file, or a rename's destination).
    pub created: bool,
}

/// The whole lock file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lock {
    pub tasks: BTreeMap<String, LockEntry>,
}

/// A change of one task's record: its new line, or `None` to remove it
/// (an older record that no longer describes the task). What
/// [`Lock::update`] writes, and what a journaled integration carries
/// ([`crate::journal`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LockLine {
    pub task: String,
    pub entry: Option<LockEntry>,
}

/// Why a lock file could not be read, or written back.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("cannot read {LOCK_FILE}: {0}")]
    Read(#[source] std::io::Error),
    #[error("{LOCK_FILE} is nested too deeply to be a lock file; restore it from version control or delete it")]
    TooDeep,
    /// Not KDL; `line`: where the parser stopped.
    #[error("{LOCK_FILE} is not valid KDL (line {line}); restore it from version control or delete it")]
    NotKdl { line: usize },
    /// A `version` other than the one this cassist reads (`found`: its
    /// value, `None` when the node has none).
    #[error("{LOCK_FILE} has version {found:?}, this cassist reads version {VERSION}; upgrade cassist")]
    Version { found: Option<KdlValue> },
    #[error("{LOCK_FILE}: a task without a name")]
    Unnamed,
    #[error("{LOCK_FILE}: task `{task}` has no `{field}`")]
    MissingField { task: String, field: &'static str },
    /// An `output` node that is not a path and a hash (or `#null`).
    #[error("{LOCK_FILE}: task `{task}` has an `output` that is not a path and a content hash")]
    BadOutput { task: String },
    /// Writing the changed file ([`Lock::update`]).
    #[error(transparent)]
    Write(std::io::Error),
}

impl Lock {
    pub fn path(root: &Path) -> PathBuf {
        root.join(LOCK_FILE)
    }

    /// Reads `cassist.lock`; a missing file is an empty lock.
    pub fn load(root: &Path) -> Result<Lock, LockError> {
        let path = Lock::path(root);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Lock::default()),
            Err(e) => return Err(LockError::Read(e)),
        };
        Lock::parse(&text)
    }

    pub fn parse(text: &str) -> Result<Lock, LockError> {
        // The file as cassist writes it is read directly (the KDL parser
        // takes ~50 ms for 1,000 tasks); anything else goes through KDL.
        if let Some(lock) = parse_own_format(text) {
            return Ok(lock);
        }
        if crate::spec::diag::too_deep(text, crate::spec::diag::MAX_KDL_DEPTH).is_some() {
            return Err(LockError::TooDeep);
        }
        let doc = KdlDocument::parse_v2(text).map_err(|e| {
            let at = e.diagnostics.first().map(|d| d.span.offset()).unwrap_or(0);
            let line = text[..at.min(text.len())].matches('\n').count() + 1;
            LockError::NotKdl { line }
        })?;
        let mut lock = Lock::default();
        for node in doc.nodes() {
            match node.name().value() {
                "version" => match node.get(0) {
                    Some(KdlValue::Integer(VERSION)) => {}
                    other => return Err(LockError::Version { found: other.cloned() }),
                },
                "task" => {
                    let Some(KdlValue::String(name)) = node.get(0) else {
                        return Err(LockError::Unnamed);
                    };
                    let get = |key: &str| -> Option<String> {
                        node.children()?.get(key)?.get(0).and_then(|v| v.as_string()).map(str::to_owned)
                    };
                    let field = |key: &'static str| {
                        get(key).ok_or_else(|| LockError::MissingField { task: name.clone(), field: key })
                    };
                    let agent_node = node.children().and_then(|c| c.get("agent"));
                    let mut output_files = BTreeMap::new();
                    for o in node.children().into_iter().flat_map(|c| c.nodes()) {
                        if o.name().value() != "output" {
                            continue;
                        }
                        let (path, output) = locked_output(o).ok_or(LockError::BadOutput { task: name.clone() })?;
                        output_files.insert(path, output);
                    }
                    lock.tasks.insert(
                        name.clone(),
                        LockEntry {
                            before: field("before")?,
                            after: field("after")?,
                            recipe: get("recipe"),
                            dependencies: get("dependencies"),
                            outputs: get("outputs"),
                            output_files,
                            patch: field("patch")?,
                            agent: field("agent")?,
                            agent_version: agent_node
                                .and_then(|n| n.get("version"))
                                .and_then(|v| v.as_string())
                                .map(str::to_owned),
                            date: get("date").unwrap_or_default(),
                        },
                    );
                }
                _ => {} // Unknown nodes from a newer cassist are ignored.
            }
        }
        Ok(lock)
    }

    /// The file's text: sorted, stable.
    pub fn render(&self) -> String {
        const HEAD: &str = "// cassist.lock: what `cassist run` recorded for each task. Commit this file.\nversion 1\n";
        // Written in place, one push per piece: a lock of a thousand
        // tasks is rewritten after each of them.
        let mut out = String::with_capacity(HEAD.len() + self.tasks.len() * 400);
        out.push_str(HEAD);
        let field = |out: &mut String, key: &str, value: &str| {
            out.push_str("    ");
            out.push_str(key);
            out.push(' ');
            push_quoted(out, value);
            out.push('\n');
        };
        for (name, e) in &self.tasks {
            out.push_str("\ntask ");
            push_quoted(&mut out, name);
            out.push_str(" {\n");
            field(&mut out, "before", &e.before);
            field(&mut out, "after", &e.after);
            if let Some(r) = &e.recipe {
                field(&mut out, "recipe", r);
            }
            if let Some(d) = &e.dependencies {
                field(&mut out, "dependencies", d);
            }
            if let Some(o) = &e.outputs {
                field(&mut out, "outputs", o);
            }
            for (path, o) in &e.output_files {
                out.push_str("    output ");
                push_quoted(&mut out, path);
                out.push(' ');
                match &o.hash {
                    Some(h) => push_quoted(&mut out, h),
                    None => out.push_str("#null"),
                }
                if o.created {
                    out.push_str(" created=#true");
                }
                out.push('\n');
            }
            field(&mut out, "patch", &e.patch);
            out.push_str("    agent ");
            push_quoted(&mut out, &e.agent);
            if let Some(v) = &e.agent_version {
                out.push_str(" version=");
                push_quoted(&mut out, v);
            }
            out.push('\n');
            field(&mut out, "date", &e.date);
            out.push_str("}\n");
        }
        out
    }

    /// Writes the file atomically.
    pub fn save(&self, root: &Path) -> std::io::Result<()> {
        crate::fsx::write_atomic(&Lock::path(root), self.render().as_bytes())
    }

    /// Applies `lines`; whether anything changed.
    pub fn apply(&mut self, lines: &[LockLine]) -> bool {
        let mut changed = false;
        for l in lines {
            changed |= match &l.entry {
                Some(e) => self.tasks.insert(l.task.clone(), e.clone()).as_ref() != Some(e),
                None => self.tasks.remove(&l.task).is_some(),
            };
        }
        changed
    }

    /// Changes `lines` in the file on disk and nothing else: the file is
    /// read, changed and written again as one step of this process (the
    /// project lock keeps other processes out), so writers that each know
    /// only their own tasks never undo each other's lines. Nothing is
    /// written when nothing changes.
    pub fn update(root: &Path, lines: &[LockLine]) -> Result<(), LockError> {
        static ONE_WRITER: std::sync::Mutex<()> = std::sync::Mutex::new(());
        if lines.is_empty() {
            return Ok(());
        }
        let _one = ONE_WRITER.lock().unwrap_or_else(|e| e.into_inner());
        let mut lock = Lock::load(root)?;
        if lock.apply(lines) {
            lock.save(root).map_err(LockError::Write)?;
        }
        Ok(())
    }
}

/// Reads exactly what [`Lock::render`] writes; `None` on any other shape.
fn parse_own_format(text: &str) -> Option<Lock> {
    let mut lines = text.lines();
    if !lines.next()?.starts_with("//") || lines.next()? != "version 1" {
        return None;
    }
    let mut lock = Lock::default();
    loop {
        match lines.next() {
            None => return Some(lock),
            Some("") => {}
            Some(line) => {
                let name = unquote(line.strip_prefix("task ")?.strip_suffix(" {")?)?;
                let mut field = |key: &str| -> Option<String> {
                    unquote(lines.next()?.strip_prefix("    ")?.strip_prefix(key)?.strip_prefix(' ')?)
                };
                let before = field("before")?;
                let after = field("after")?;
                // `recipe`, `dependencies` and `outputs` are optional
                // (older lines have none).
                let mut next = lines.next()?;
                let mut optional = |key: &str| -> Option<Option<String>> {
                    match next.strip_prefix("    ").and_then(|r| r.strip_prefix(key)).and_then(|r| r.strip_prefix(' '))
                    {
                        Some(v) => {
                            let v = unquote(v)?;
                            next = lines.next()?;
                            Some(Some(v))
                        }
                        None => Some(None),
                    }
                };
                let recipe = optional("recipe")?;
                let dependencies = optional("dependencies")?;
                let outputs = optional("outputs")?;
                // Then each output, sorted (none in older lines).
                let mut output_files = BTreeMap::new();
                while let Some(rest) = next.strip_prefix("    output ") {
                    let (path, output) = own_output(rest)?;
                    if output_files.last_key_value().is_some_and(|(last, _)| *last >= path) {
                        return None;
                    }
                    output_files.insert(path, output);
                    next = lines.next()?;
                }
                let patch = unquote(next.strip_prefix("    patch ")?)?;
                let agent_line = lines.next()?.strip_prefix("    agent ")?;
                let (agent, agent_version) = match agent_line.find("\" version=\"") {
                    Some(i) => (unquote(&agent_line[..=i])?, Some(unquote(&agent_line[i + 10..])?)),
                    None => (unquote(agent_line)?, None),
                };
                let date = unquote(lines.next()?.strip_prefix("    date ")?)?;
                if lines.next()? != "}" {
                    return None;
                }
                lock.tasks.insert(
                    name,
                    LockEntry {
                        before,
                        after,
                        recipe,
                        dependencies,
                        outputs,
                        output_files,
                        patch,
                        agent,
                        agent_version,
                        date,
                    },
                );
            }
        }
    }
}

/// An `output` node read through KDL: its path, its hash (a string, or
/// `#null`) and its `created` flag; `None` for any other shape.
fn locked_output(node: &kdl::KdlNode) -> Option<(String, LockedOutput)> {
    let mut args = node.entries().iter().filter(|e| e.name().is_none()).map(|e| e.value());
    let path = args.next()?.as_string()?.to_owned();
    let hash = match args.next()? {
        KdlValue::String(h) => Some(h.clone()),
        KdlValue::Null => None,
        _ => return None,
    };
    if args.next().is_some() {
        return None;
    }
    let created = match node.get("created") {
        None => false,
        Some(v) => v.as_bool()?,
    };
    Some((path, LockedOutput { hash, created }))
}

/// The rest of an `output` line as [`Lock::render`] writes it
/// (`"path" "hash"`, or `"path" #null`, then perhaps ` created=#true`).
fn own_output(rest: &str) -> Option<(String, LockedOutput)> {
    let (path, rest) = take_quoted(rest)?;
    let rest = rest.strip_prefix(' ')?;
    let (hash, rest) = match rest.strip_prefix("#null") {
        Some(rest) => (None, rest),
        None => {
            let (h, rest) = take_quoted(rest)?;
            (Some(h), rest)
        }
    };
    let created = match rest {
        "" => false,
        " created=#true" => true,
        _ => return None,
    };
    Some((path, LockedOutput { hash, created }))
}

/// The string literal at the start of `s` (as [`push_quoted`] writes it)
/// and what follows it.
fn take_quoted(s: &str) -> Option<(String, &str)> {
    let body = s.strip_prefix('"')?;
    let mut escaped = false;
    for (i, c) in body.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => return Some((unquote(&s[..i + 2])?, &body[i + 1..])),
            _ => {}
        }
    }
    None
}

/// The value of a string literal written by [`push_quoted`]; `None` if it is
/// not exactly one.
fn unquote(s: &str) -> Option<String> {
    let inner = s.strip_prefix('"')?.strip_suffix('"')?;
    if !inner.contains(['"', '\\']) {
        return Some(inner.to_owned());
    }
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return None,
            '\\' => match chars.next()? {
                '"' => out.push('"'),
                '\\' => out.push('\\'),
                'n' => out.push('\n'),
                'r' => out.push('\r'),
                't' => out.push('\t'),
                'u' => {
                    if chars.next()? != '{' {
                        return None;
                    }
                    let hex: String = chars.by_ref().take_while(|&c| c != '}').collect();
                    out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                }
                _ => return None,
            },
            c => out.push(c),
        }
    }
    Some(out)
}

/// `s` as a KDL string literal, onto the end of `out`.
fn push_quoted(out: &mut String, s: &str) {
    out.push('"');
    if !s.chars().any(|c| c == '"' || c == '\\' || c.is_control()) {
        out.push_str(s);
        out.push('"');
        return;
    }
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The current time, RFC 3339 in UTC, to the second: the `date` of a
/// lock line. A clock set before 1970 reads as 1970-01-01T00:00:00Z.
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    rfc3339(secs)
}

/// `secs` seconds after 1970-01-01T00:00:00Z as `YYYY-MM-DDTHH:MM:SSZ`
/// (UTC, whole seconds, `Z`); a time past what chrono represents reads as
/// 1970-01-01T00:00:00Z.
fn rfc3339(secs: u64) -> String {
    let at = i64::try_from(secs).ok().and_then(|s| chrono::DateTime::from_timestamp(s, 0)).unwrap_or_default();
    at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(n: u8) -> LockEntry {
        LockEntry {
            before: format!("{n}b"),
            after: format!("{n}a"),
            recipe: Some(format!("{n}r")),
            dependencies: n.is_multiple_of(2).then(|| format!("{n}d")),
            outputs: Some(format!("{n}o")),
            output_files: BTreeMap::from([
                (format!("{n}/new.txt"), LockedOutput { hash: Some(format!("{n}h")), created: true }),
                (format!("{n}/old.txt"), LockedOutput { hash: Some(format!("{n}k")), created: false }),
                (format!("{n}/gone.txt"), LockedOutput { hash: None, created: false }),
            ]),
            patch: format!("{n}p"),
            agent: "claude".into(),
            agent_version: Some("2.1.197 (Claude Code)".into()),
            date: "2026-11-30T12:00:00Z".into(),
        }
    }

    #[test]
    fn round_trips_sorted_and_stable() {
        let mut lock = Lock::default();
        lock.tasks.insert("zeta".into(), entry(2));
        lock.tasks.insert("alpha \"q\"".into(), LockEntry { agent_version: None, ..entry(1) });
        let text = lock.render();
        assert!(text.find("alpha").unwrap() < text.find("zeta").unwrap(), "{text}");
        let back = Lock::parse(&text).unwrap();
        assert_eq!(back, lock);
        assert_eq!(back.render(), text, "rendering is stable");
    }

    #[test]
    fn the_fast_reader_agrees_with_kdl() {
        let mut lock = Lock::default();
        lock.tasks.insert("a \"quoted\" \\ name\tx\u{1}".into(), entry(1));
        lock.tasks.insert("b".into(), LockEntry { agent_version: None, ..entry(2) });
        lock.tasks.insert("c".into(), LockEntry { outputs: None, output_files: BTreeMap::new(), ..entry(3) });
        lock.tasks.insert("e".into(), LockEntry { recipe: None, dependencies: None, ..entry(5) });
        // Paths that look like the rest of an `output` line.
        let tricky = BTreeMap::from([
            ("a\" created=#true".to_owned(), LockedOutput { hash: Some("h".into()), created: false }),
            ("b \"x\" #null\\".to_owned(), LockedOutput { hash: None, created: false }),
            ("c\n\u{1}d".to_owned(), LockedOutput { hash: Some("h \"q\"".into()), created: true }),
        ]);
        lock.tasks.insert("d".into(), LockEntry { output_files: tricky, ..entry(4) });
        let text = lock.render();
        assert_eq!(parse_own_format(&text), Some(lock.clone()));
        // The KDL path reads the same file the same way.
        let mut doc_only = Lock::default();
        let kdl = KdlDocument::parse_v2(&text).unwrap();
        assert_eq!(kdl.nodes().len(), 6);
        doc_only.tasks = lock.tasks.clone();
        assert_eq!(Lock::parse(&text).unwrap(), doc_only);
        // A hand-edited file (other spacing) still parses, through KDL.
        let edited = text.replace("    before", "  before");
        assert_eq!(parse_own_format(&edited), None);
        assert_eq!(Lock::parse(&edited).unwrap(), lock);
    }

    #[test]
    fn a_line_of_an_older_cassist_has_no_outputs() {
        let old = "// cassist.lock\nversion 1\n\ntask \"t\" {\n    before \"b\"\n    after \"a\"\n    patch \"p\"\n    agent \"claude\"\n    date \"d\"\n}\n";
        let lock = parse_own_format(old).expect("the fast reader reads lines without outputs");
        assert_eq!(lock.tasks["t"].outputs, None);
        assert_eq!(lock.tasks["t"].patch, "p");
        assert_eq!(Lock::parse(&old.replace("    ", "  ")).unwrap(), lock, "and so does the KDL reader");
        // Written back unchanged: no `outputs` line is made up.
        assert_eq!(Lock::parse(&lock.render()).unwrap(), lock);
        assert!(!lock.render().contains("outputs"));
        assert!(!lock.render().contains("recipe") && !lock.render().contains("dependencies"));
    }

    #[test]
    fn the_recipe_and_dependencies_go_between_after_and_outputs() {
        let mut lock = Lock::default();
        lock.tasks.insert("t".into(), entry(2));
        let text = lock.render();
        assert!(
            text.contains("    after \"2a\"\n    recipe \"2r\"\n    dependencies \"2d\"\n    outputs \"2o\"\n"),
            "{text}"
        );
        assert_eq!(parse_own_format(&text), Some(lock.clone()));
        // A recipe without dependencies (a task that has none).
        lock.tasks.insert("t".into(), entry(1));
        let text = lock.render();
        assert!(text.contains("    recipe \"1r\"\n    outputs \"1o\"\n"), "{text}");
        assert_eq!(parse_own_format(&text), Some(lock));
    }

    #[test]
    fn outputs_are_written_one_a_line_sorted_after_their_hash() {
        let mut lock = Lock::default();
        lock.tasks.insert("t".into(), entry(1));
        let text = lock.render();
        let body = "    outputs \"1o\"\n    output \"1/gone.txt\" #null\n    output \"1/new.txt\" \"1h\" created=#true\n    output \"1/old.txt\" \"1k\"\n    patch \"1p\"\n";
        assert!(text.contains(body), "{text}");
        // Out of order (edited by hand): read through KDL, the same.
        let swapped = text.replace("    output \"1/gone.txt\" #null\n", "").replace(
            "    output \"1/old.txt\" \"1k\"\n",
            "    output \"1/old.txt\" \"1k\"\n    output \"1/gone.txt\" #null\n",
        );
        assert_eq!(parse_own_format(&swapped), None);
        assert_eq!(Lock::parse(&swapped).unwrap(), lock);
    }

    #[test]
    fn a_line_without_output_nodes_reads_as_an_older_cassist_wrote_it() {
        let mut lock = Lock::default();
        lock.tasks.insert("t".into(), entry(1));
        let text = lock.render();
        let old: String = text.lines().filter(|l| !l.starts_with("    output ")).map(|l| format!("{l}\n")).collect();
        let read = parse_own_format(&old).expect("the fast reader reads lines without output nodes");
        assert_eq!(read.tasks["t"], LockEntry { output_files: BTreeMap::new(), ..entry(1) });
        assert_eq!(Lock::parse(&old.replace("    ", "  ")).unwrap(), read);
        assert_eq!(read.render(), old, "nothing is made up when it is written back");
    }

    #[test]
    fn a_malformed_output_is_an_error() {
        let text = |output: &str| {
            format!(
                "version 1\ntask \"t\" {{\n before \"b\"\n after \"a\"\n {output}\n patch \"p\"\n agent \"x\"\n}}\n"
            )
        };
        for bad in [
            "output \"x\"",
            "output 1 \"h\"",
            "output \"x\" 2",
            "output \"x\" \"h\" created=1",
            "output \"x\" \"h\" \"i\"",
        ] {
            let err = Lock::parse(&text(bad)).unwrap_err();
            assert!(matches!(err, LockError::BadOutput { .. }), "{bad}: {err}");
        }
        let ok = Lock::parse(&text("output \"x\" #null created=#false")).unwrap();
        assert_eq!(ok.tasks["t"].output_files["x"], LockedOutput { hash: None, created: false });
    }

    #[test]
    fn rejects_garbage_and_newer_versions() {
        assert!(Lock::parse("task {").is_err());
        assert!(Lock::parse("version 2\n").unwrap_err().to_string().contains("upgrade"));
        assert!(Lock::parse("version 1\ntask \"a\" { before \"x\" }\n").unwrap_err().to_string().contains("after"));
    }

    #[test]
    fn updates_change_only_their_own_lines() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let line = |task: &str, entry: Option<LockEntry>| LockLine { task: task.into(), entry };
        Lock::update(root, &[line("a", Some(entry(1))), line("b", Some(entry(2)))]).unwrap();
        // A writer whose copy is stale (it never saw `b`) changes `a` only.
        let mut stale = Lock::default();
        stale.tasks.insert("a".into(), entry(1));
        Lock::update(root, &[line("a", Some(entry(3)))]).unwrap();
        let on_disk = Lock::load(root).unwrap();
        assert_eq!(on_disk.tasks.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(on_disk.tasks["a"], entry(3));
        Lock::update(root, &[line("b", None), line("gone", None)]).unwrap();
        assert_eq!(Lock::load(root).unwrap().tasks.keys().collect::<Vec<_>>(), ["a"]);
        // Nothing to change: the file is not written again.
        let before = std::fs::metadata(Lock::path(root)).unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        Lock::update(root, &[line("a", Some(entry(3)))]).unwrap();
        assert_eq!(std::fs::metadata(Lock::path(root)).unwrap().modified().unwrap(), before);
        assert!(stale.apply(&[line("a", Some(entry(3)))]) && !stale.apply(&[line("a", Some(entry(3)))]));
    }

    #[test]
    fn formats_dates() {
        let d = now_rfc3339();
        assert_eq!(d.len(), 20, "{d}");
        assert!(d.starts_with("20") && d.ends_with('Z'));
    }

    #[test]
    fn dates_are_utc_to_the_second_with_a_z() {
        // The lines already committed in lock files were written in this
        // format: it never changes (no offset, no fraction, four-digit
        // years, leap days and century years as the calendar has them).
        for (secs, text) in [
            (0, "1970-01-01T00:00:00Z"),
            (59, "1970-01-01T00:00:59Z"),
            (951_782_400, "2000-02-29T00:00:00Z"),
            (1_709_210_096, "2024-02-29T12:34:56Z"),
            (1_767_225_599, "2025-12-31T23:59:59Z"),
            (1_798_675_200, "2026-12-31T00:00:00Z"),
            (4_107_542_400, "2100-03-01T00:00:00Z"),
            (253_402_300_799, "9999-12-31T23:59:59Z"),
        ] {
            assert_eq!(rfc3339(secs), text, "{secs}");
        }
    }

    #[test]
    fn errors_say_what_is_wrong_with_the_file() {
        let msg = |text: &str| Lock::parse(text).unwrap_err().to_string();
        assert_eq!(
            msg("version 2\n"),
            "cassist.lock has version Some(Integer(2)), this cassist reads version 1; upgrade cassist"
        );
        assert_eq!(msg("version\n"), "cassist.lock has version None, this cassist reads version 1; upgrade cassist");
        assert_eq!(
            msg("task {"),
            "cassist.lock is not valid KDL (line 1); restore it from version control or delete it"
        );
        assert_eq!(msg("version 1\ntask 1\n"), "cassist.lock: a task without a name");
        assert_eq!(msg("version 1\ntask \"a\" { before \"x\" }\n"), "cassist.lock: task `a` has no `after`");
        let deep = format!("{}{}", "a {".repeat(200), "}".repeat(200));
        assert!(matches!(Lock::parse(&deep), Err(LockError::TooDeep)));
    }
}
