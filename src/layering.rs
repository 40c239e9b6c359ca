//! The module graph, drawn from the code, and the rules that keep it a
//! layering (DESIGN.md, "Rules that keep the house easy to change"):
//! imports follow the data, spec → plan → scheduler → runner → report.
//!
//! An edge `a -> b` is a path from the crate root into module `b` (written
//! with `crate`, or with `super` climbing out of `a`) in a file of
//! top-level module `a`, outside comments,
//! string literals and `#[cfg(test)]` items. `lib.rs` (the command entry
//! and the output macros) and `main.rs` are not modules.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

/// What many stages share; a leaf imports nothing of the crate.
const LEAVES: &[&str] =
    &["changes", "event", "exit", "failpoint", "fsx", "limits", "part", "paths", "template", "text"];
/// The report layer receives events and finished reports: it must not
/// import these.
const NOT_FOR_REPORT: &[&str] = &["runner", "scheduler", "split"];
/// Modules that start processes (or hold code that does): planning and
/// the spec layer reach none of them.
const RUNS_THINGS: &[&str] = &["agent", "process", "sandbox", "workspace"];
/// Layers that run nothing.
const RUN_NOTHING: &[&str] = &["spec", "plan"];
/// The network (the remote cache): only the command layer uses it, so no
/// agent, task command, planner or runner reaches it (plan15 decision 1).
const NETWORK: &str = "remote";
const USES_NETWORK: &[&str] = &["cmd"];

/// The first place an edge is seen.
#[derive(Debug, Clone)]
struct Use {
    file: String,
    line: usize,
    path: String,
}

impl std::fmt::Display for Use {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.path)
    }
}

/// `from -> to -> first use`, between top-level modules.
type Graph = BTreeMap<String, BTreeMap<String, Use>>;

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// `src` with comments and the insides of string and char literals blanked
/// (same length, newlines kept, so offsets and lines still match).
fn code_only(src: &str) -> Vec<u8> {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                let end = b[i..].iter().position(|&c| c == b'\n').map_or(b.len(), |p| i + p);
                blank(&mut out, i, end);
                i = end;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let (mut depth, mut j) = (1, i + 2);
                while j < b.len() && depth > 0 {
                    if b[j] == b'/' && b.get(j + 1) == Some(&b'*') {
                        depth += 1;
                        j += 2;
                    } else if b[j] == b'*' && b.get(j + 1) == Some(&b'/') {
                        depth -= 1;
                        j += 2;
                    } else {
                        j += 1;
                    }
                }
                blank(&mut out, i, j);
                i = j;
            }
            b'r' if (i == 0 || !is_ident(b[i - 1]) || (b[i - 1] == b'b' && (i < 2 || !is_ident(b[i - 2]))))
                && b[i + 1..].iter().position(|&c| c != b'#').is_some_and(|n| b.get(i + 1 + n) == Some(&b'"')) =>
            {
                // A raw string: r"..", r#".."#, br"..".
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                let body = i + 2 + hashes;
                let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
                let end =
                    b[body..].windows(close.len()).position(|w| w == close.as_slice()).map_or(b.len(), |p| body + p);
                blank(&mut out, body, end);
                i = end + close.len();
            }
            b'"' => {
                let mut j = i + 1;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                blank(&mut out, i + 1, j);
                i = j + 1;
            }
            b'\'' => {
                // A char literal ('a', '\n', 'é'), else a lifetime.
                if b.get(i + 1) == Some(&b'\\') {
                    // The escaped character is skipped: '\'', '\\'.
                    let end =
                        b.get(i + 3..).and_then(|r| r.iter().position(|&c| c == b'\'')).map_or(b.len(), |p| i + 3 + p);
                    blank(&mut out, i + 1, end);
                    i = end + 1;
                } else {
                    let len = src[i + 1..].chars().next().map_or(1, char::len_utf8);
                    if b.get(i + 1 + len) == Some(&b'\'') {
                        blank(&mut out, i + 1, i + 1 + len);
                        i += len + 2;
                    } else {
                        i += 1;
                    }
                }
            }
            _ => i += 1,
        }
    }
    out
}

/// Blanks every item under `#[cfg(test)]` (a `mod tests { .. }`, a `use`,
/// a function).
fn without_test_items(code: &mut [u8]) {
    const ATTR: &[u8] = b"#[cfg(test)]";
    let mut from = 0;
    while let Some(p) = code[from..].windows(ATTR.len()).position(|w| w == ATTR) {
        let start = from + p;
        let mut j = start + ATTR.len();
        let mut depth = 0i32;
        // The item ends at its first `;` or at the brace that closes its
        // first `{`, outside parentheses and brackets.
        while j < code.len() {
            match code[j] {
                b'(' | b'[' => depth += 1,
                b')' | b']' => depth -= 1,
                b';' if depth == 0 => break,
                b'{' if depth == 0 => {
                    let mut braces = 0;
                    while j < code.len() {
                        match code[j] {
                            b'{' => braces += 1,
                            b'}' => {
                                braces -= 1;
                                if braces == 0 {
                                    break;
                                }
                            }
                            _ => {}
                        }
                        j += 1;
                    }
                    break;
                }
                _ => {}
            }
            j += 1;
        }
        let end = (j + 1).min(code.len());
        for c in &mut code[start..end] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
        from = end;
    }
}

/// The top-level modules a file's code names, with the offset and text of
/// each path. `module` is the file's module path (`["plan", "context"]`
/// for `src/plan/context.rs`, `["plan"]` for `src/plan/mod.rs`).
fn named_modules(code: &[u8], module: &[String]) -> Vec<(String, usize, String)> {
    let ident_at = |mut j: usize| -> (String, usize) {
        while j < code.len() && code[j].is_ascii_whitespace() {
            j += 1;
        }
        let start = j;
        while j < code.len() && is_ident(code[j]) {
            j += 1;
        }
        (String::from_utf8_lossy(&code[start..j]).into_owned(), j)
    };
    let shown = |start: usize| -> String {
        let mut j = start;
        let mut braces = 0;
        while j < code.len() {
            match code[j] {
                b'{' => braces += 1,
                b'}' if braces > 0 => braces -= 1,
                c if braces == 0 && !is_ident(c) && c != b':' => break,
                _ => {}
            }
            j += 1;
            if braces == 0 && code[j - 1] == b'}' {
                break;
            }
        }
        let text = String::from_utf8_lossy(&code[start..j]);
        let text: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
        if text.chars().count() > 80 { format!("{}...", text.chars().take(80).collect::<String>()) } else { text }
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < code.len() {
        let at_word = i == 0 || !(is_ident(code[i - 1]) || code[i - 1] == b'$' || code[i - 1] == b':');
        let root_end = if at_word && code[i..].starts_with(b"crate::") {
            Some(i + "crate::".len())
        } else if at_word && code[i..].starts_with(b"super::") {
            let mut j = i;
            let mut ups = 0;
            while code[j..].starts_with(b"super::") {
                ups += 1;
                j += "super::".len();
            }
            (ups == module.len()).then_some(j)
        } else {
            None
        };
        let Some(after) = root_end else {
            i += 1;
            continue;
        };
        let rest = after + code[after..].iter().take_while(|c| c.is_ascii_whitespace()).count();
        if code.get(rest) == Some(&b'{') {
            // `crate::{a, b::c, d::{e, f}}`: the first name of each item.
            let (mut j, mut depth, mut item_start) = (rest + 1, 1, true);
            while j < code.len() && depth > 0 {
                match code[j] {
                    b'{' => depth += 1,
                    b'}' => depth -= 1,
                    b',' if depth == 1 => item_start = true,
                    c if depth == 1 && item_start && is_ident(c) => {
                        let (name, end) = ident_at(j);
                        out.push((name, i, shown(i)));
                        item_start = false;
                        j = end;
                        continue;
                    }
                    _ => {}
                }
                j += 1;
            }
            i = j;
        } else {
            let (name, end) = ident_at(rest);
            out.push((name, i, shown(i)));
            i = end;
        }
    }
    out
}

/// The module graph of the crate whose sources are under `src`.
fn graph_of(src: &Path) -> (BTreeSet<String>, Graph) {
    fn files(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> =
            std::fs::read_dir(dir).expect("src is readable").flatten().map(|e| e.path()).collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                files(&p, out);
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push(p);
            }
        }
    }
    let mut paths = Vec::new();
    files(src, &mut paths);
    let mut sources = Vec::new();
    for p in paths {
        let rel = p.strip_prefix(src).expect("below src").to_string_lossy().into_owned();
        if matches!(rel.as_str(), "lib.rs" | "main.rs" | "layering.rs") {
            continue;
        }
        let mut module: Vec<String> = rel.trim_end_matches(".rs").split('/').map(str::to_owned).collect();
        if module.len() > 1 && module.last().is_some_and(|m| m == "mod") {
            module.pop();
        }
        sources.push((rel, module, std::fs::read_to_string(&p).expect("source is readable")));
    }
    let modules: BTreeSet<String> = sources.iter().map(|(_, m, _)| m[0].clone()).collect();
    let mut graph = Graph::new();
    for (rel, module, text) in &sources {
        let mut code = code_only(text);
        without_test_items(&mut code);
        for (to, offset, path) in named_modules(&code, module) {
            if to == module[0] || !modules.contains(&to) {
                continue;
            }
            let line = code[..offset].iter().filter(|&&c| c == b'\n').count() + 1;
            graph.entry(module[0].clone()).or_default().entry(to).or_insert(Use {
                file: format!("src/{rel}"),
                line,
                path,
            });
        }
    }
    (modules, graph)
}

/// The shortest path of edges from `from` to `to` (`from == to`: a cycle),
/// as `a -> b` steps, through `allowed` modules only.
fn path_between(graph: &Graph, from: &str, to: &str, allowed: &dyn Fn(&str) -> bool) -> Option<Vec<(String, String)>> {
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let mut queue = VecDeque::from([from.to_owned()]);
    while let Some(m) = queue.pop_front() {
        for next in graph.get(&m).map(|e| e.keys()).into_iter().flatten() {
            if next == to {
                let mut steps = vec![(m.clone(), next.clone())];
                let mut cur = m.clone();
                while cur != from {
                    let prev = seen[&cur].clone();
                    steps.push((prev.clone(), cur));
                    cur = prev;
                }
                steps.reverse();
                return Some(steps);
            }
            if allowed(next) && next != from && !seen.contains_key(next) {
                seen.insert(next.clone(), m.clone());
                queue.push_back(next.clone());
            }
        }
    }
    None
}

/// The strongly connected components with more than one module (Tarjan).
fn cycles(graph: &Graph, modules: &BTreeSet<String>) -> Vec<BTreeSet<String>> {
    struct Tarjan<'a> {
        graph: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        out: Vec<BTreeSet<String>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            for w in self.graph.get(v).map(|e| e.keys()).into_iter().flatten() {
                if !self.index.contains_key(w.as_str()) {
                    self.visit(w);
                    let l = self.low[w.as_str()].min(self.low[v]);
                    self.low.insert(v, l);
                } else if self.stack.contains(&w.as_str()) {
                    let l = self.index[w.as_str()].min(self.low[v]);
                    self.low.insert(v, l);
                }
            }
            if self.low[v] == self.index[v] {
                let mut scc = BTreeSet::new();
                while let Some(w) = self.stack.pop() {
                    scc.insert(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if scc.len() > 1 {
                    self.out.push(scc);
                }
            }
        }
    }
    let mut t = Tarjan { graph, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), out: Vec::new() };
    for m in modules {
        if !t.index.contains_key(m.as_str()) {
            t.visit(m);
        }
    }
    t.out
}

/// Every broken rule, one readable line (and its edges) each.
fn violations(modules: &BTreeSet<String>, graph: &Graph) -> Vec<String> {
    let edge = |a: &str, b: &str| format!("    {a} -> {b}: {}", graph[a][b]);
    let steps = |p: &[(String, String)]| p.iter().map(|(a, b)| edge(a, b)).collect::<Vec<_>>().join("\n");
    let mut out = Vec::new();
    for name in LEAVES.iter().chain(NOT_FOR_REPORT).chain(RUNS_THINGS).chain(RUN_NOTHING).chain(&["report", NETWORK]) {
        if !modules.contains(*name) {
            out.push(format!("a rule names module `{name}`, which is gone: update src/layering.rs"));
        }
    }
    for scc in cycles(graph, modules) {
        let start = scc.iter().next().expect("a cycle has modules").clone();
        let cycle = path_between(graph, &start, &start, &|m| scc.contains(m)).unwrap_or_default();
        let names: Vec<&str> = cycle.iter().map(|(a, _)| a.as_str()).chain([start.as_str()]).collect();
        out.push(format!(
            "import cycle {} (modules in it: {}):\n{}",
            names.join(" -> "),
            scc.iter().cloned().collect::<Vec<_>>().join(", "),
            steps(&cycle)
        ));
    }
    for leaf in LEAVES {
        for to in graph.get(*leaf).map(|e| e.keys()).into_iter().flatten() {
            out.push(format!(
                "leaf `{leaf}` imports `{to}` (a leaf imports nothing of the crate):\n{}",
                edge(leaf, to)
            ));
        }
    }
    for to in graph.get("spec").map(|e| e.keys()).into_iter().flatten() {
        if !LEAVES.contains(&to.as_str()) {
            out.push(format!(
                "the spec layer imports `{to}`, which is not a leaf ({}):\n{}",
                LEAVES.join(", "),
                edge("spec", to)
            ));
        }
    }
    for to in NOT_FOR_REPORT {
        if graph.get("report").is_some_and(|e| e.contains_key(*to)) {
            out.push(format!("`report` imports `{to}` (it receives events and reports):\n{}", edge("report", to)));
        }
    }
    for (from, edges) in graph {
        if edges.contains_key(NETWORK) && !USES_NETWORK.contains(&from.as_str()) {
            out.push(format!(
                "`{from}` imports `{NETWORK}` (the remote cache is the command layer's: {}):\n{}",
                USES_NETWORK.join(", "),
                edge(from, NETWORK)
            ));
        }
    }
    for from in RUN_NOTHING {
        for to in RUNS_THINGS {
            if let Some(p) = path_between(graph, from, to, &|_| true) {
                out.push(format!(
                    "`{from}` reaches `{to}`, which starts processes (planning runs nothing):\n{}",
                    steps(&p)
                ));
            }
        }
    }
    out
}

/// `module -> a b c` lines, like `/work/notes/graph.py`.
fn render(graph: &Graph) -> String {
    graph.iter().map(|(m, e)| format!("{m} -> {}\n", e.keys().cloned().collect::<Vec<_>>().join(" "))).collect()
}

#[test]
fn imports_follow_the_layers() {
    let (modules, graph) = graph_of(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(
        graph.get("runner").is_some_and(|e| e.contains_key("plan")),
        "the graph reader found no edges:\n{}",
        render(&graph)
    );
    let broken = violations(&modules, &graph);
    assert!(
        broken.is_empty(),
        "the module layering is broken:\n- {}\n\nthe module graph:\n{}",
        broken.join("\n- "),
        render(&graph)
    );
}

mod reader {
    use super::*;

    fn names(src: &str, module: &[&str]) -> Vec<String> {
        let mut code = code_only(src);
        without_test_items(&mut code);
        let module: Vec<String> = module.iter().map(|s| (*s).to_owned()).collect();
        named_modules(&code, &module).into_iter().map(|(n, _, _)| n).collect()
    }

    #[test]
    fn reads_paths_and_groups() {
        let src = "use crate::plan::context::build_glob;\nuse crate::{event::Event, text, report::{a, b}};\nfn f() { crate::fsx::write_atomic(p, b) }";
        assert_eq!(names(src, &["spec", "task"]), ["plan", "event", "text", "report", "fsx"]);
    }

    #[test]
    fn super_counts_only_when_it_leaves_the_crate_root() {
        assert_eq!(names("use super::load_options;", &["cmd", "run"]), Vec::<String>::new());
        assert_eq!(names("use super::plan::Plan;", &["review"]), ["plan"]);
        assert_eq!(names("use super::super::store;", &["plan", "filehash"]), ["store"]);
    }

    #[test]
    fn comments_strings_macros_and_tests_do_not_count() {
        let src = r##"
//! See [`crate::sandbox`].
/* crate::runner /* nested crate::scheduler */ */
const S: &str = "crate::split";
const R: &str = r#"crate::agent "quoted""#;
const C: char = '"';
fn f<'a>(x: &'a str) { let _ = $crate::report::x; let q = '\''; }
#[cfg(test)]
mod tests { use crate::process; fn g() { crate::workspace::x(); } }
#[cfg(test)]
use crate::cache;
use crate::exit;
"##;
        assert_eq!(names(src, &["x"]), ["exit"]);
    }

    #[test]
    fn main_had_the_cycle_the_issue_names() {
        // Two files of an older tree: spec/task.rs used the planner's glob
        // builder while the planner read task files.
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path();
        std::fs::create_dir_all(src.join("spec")).unwrap();
        std::fs::create_dir_all(src.join("plan")).unwrap();
        std::fs::write(src.join("spec/mod.rs"), "pub mod task;\n").unwrap();
        std::fs::write(src.join("spec/task.rs"), "fn f() { crate::plan::context::build_glob(p); }\n").unwrap();
        std::fs::write(src.join("plan/mod.rs"), "\nuse crate::spec::Task;\n").unwrap();
        let (modules, graph) = graph_of(src);
        let cycle = cycles(&graph, &modules);
        assert_eq!(cycle.len(), 1);
        let steps = path_between(&graph, "plan", "plan", &|_| true).unwrap();
        assert_eq!(steps, [("plan".to_owned(), "spec".to_owned()), ("spec".to_owned(), "plan".to_owned())]);
        assert_eq!(graph["spec"]["plan"].to_string(), "src/spec/task.rs:1: crate::plan::context::build_glob");
        assert_eq!(graph["plan"]["spec"].line, 2);
    }

    #[test]
    fn only_the_command_layer_reaches_the_network() {
        let used = |file: &str| Use { file: file.to_owned(), line: 1, path: "crate::remote::Remote".to_owned() };
        let mut graph = Graph::new();
        graph.entry("runner".to_owned()).or_default().insert("remote".to_owned(), used("src/runner/x.rs"));
        graph.entry("cmd".to_owned()).or_default().insert("remote".to_owned(), used("src/cmd/run.rs"));
        let modules: BTreeSet<String> = ["runner", "cmd", "remote"].iter().map(|m| m.to_string()).collect();
        let network: Vec<String> =
            violations(&modules, &graph).into_iter().filter(|v| v.contains("imports `remote`")).collect();
        assert_eq!(network.len(), 1, "{network:?}");
        assert!(network[0].starts_with("`runner` imports `remote`"), "{network:?}");
    }
}
