//! Property tests: whatever the input, the task-file and config parsers
//! never panic, and every diagnostic they produce renders through miette.
//!
//! The number of cases per property comes from `CASSIST_FUZZ_CASES`
//! (default 256); the property that writes projects to disk and runs
//! `load_and_plan` runs a quarter of that. For a long run:
//!
//! ```text
//! CASSIST_FUZZ_CASES=200000 cargo test --release --test it fuzz::
//! ```

use std::path::{Path, PathBuf};

use cassist::report::Output;
use cassist_core::plan::{LoadOptions, load_and_plan};
use cassist_core::spec::config::parse_config;
use cassist_core::spec::task::parse_task_file;
use cassist_core::spec::{Diagnostics, SourceFile, SpecDiagnostic};
use proptest::prelude::*;
use proptest::sample::Index;

// ---------------------------------------------------------------------------
// Configuration and the checks every property shares.

/// Cases per in-memory property.
fn cases() -> u32 {
    std::env::var("CASSIST_FUZZ_CASES").ok().and_then(|s| s.trim().parse().ok()).filter(|&n| n > 0).unwrap_or(256)
}

fn config(cases: u32) -> ProptestConfig {
    // No regression files: minimized failures become unit tests below.
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

const OUT: Output = Output { color_out: false, color_err: false, quiet: false, verbose: 0 };

/// A root with nothing in it, so `parse_config` finds no `.agents/config.toml`
/// and no template files.
fn no_root() -> PathBuf {
    PathBuf::from("/nonexistent/cassist-fuzz-root")
}

/// Renders a diagnostic, checking it went through miette's graphical
/// handler (not `Output::render`'s one-line fallback, which is what a span
/// out of range would give) and that its labels point inside the file.
fn render(d: &SpecDiagnostic) {
    let text = OUT.render(d);
    assert!(
        text.contains(&format!("cassist::{}", d.code)),
        "diagnostic `{}` did not render through miette:\n{text}\nlabels: {:?}",
        d.message,
        d.labels
    );
    let _ = d.location();
    let _ = d.to_string();
    if let Some(src) = &d.source {
        for (span, label) in &d.labels {
            let (start, end) = (span.offset(), span.offset() + span.len());
            assert!(
                end <= src.text.len() && src.text.is_char_boundary(start) && src.text.is_char_boundary(end),
                "label `{label}` of `{}` has span {start}..{end} outside the text or inside a character \
                 (text is {} bytes)",
                d.message,
                src.text.len()
            );
        }
    }
}

fn render_all(diags: Diagnostics) {
    for d in diags.sorted() {
        render(&d);
    }
}

/// Feeds `text` to both parsers as a task file and as `cassist.kdl`, and
/// renders every diagnostic.
fn parse_both(text: &str) {
    let src = SourceFile::new("tasks/fuzz.kdl", text);
    let mut diags = Diagnostics::default();
    let tasks = parse_task_file(&src, &mut diags);
    if tasks.is_none() {
        assert!(diags.has_errors(), "a file that is not KDL must have an error");
    }
    render_all(diags);

    let src = SourceFile::new("cassist.kdl", text);
    let mut diags = Diagnostics::default();
    let _ = parse_config(&no_root(), Some(&src), &mut diags);
    render_all(diags);
}

// ---------------------------------------------------------------------------
// A model of KDL documents, rendered in v2 or v1 syntax.

/// Every node name the task and config formats know.
const VOCAB: &[&str] = &[
    "task",
    "goal",
    "agent",
    "kind",
    "sandbox",
    "timeout",
    "max-cost",
    "max-iterations",
    "depends-on",
    "context",
    "scope",
    "constraints",
    "acceptance",
    "reference",
    "file",
    "path",
    "run",
    "-",
    "trust",
    "defaults",
    "setup",
    "test",
    "build",
    "prompt-template",
    "instructions",
    "command",
    "pass-env",
    "try",
];

const TASK_CHILDREN: &[&str] = &[
    "goal",
    "agent",
    "kind",
    "sandbox",
    "timeout",
    "max-cost",
    "max-iterations",
    "depends-on",
    "context",
    "scope",
    "constraints",
    "acceptance",
    "reference",
];
const CONFIG_TOP: &[&str] =
    &["trust", "defaults", "setup", "test", "build", "prompt-template", "instructions", "agent"];
/// Task and config nodes, tasks being the most frequent.
const ANY_TOP: &[&str] = &[
    "task",
    "task",
    "task",
    "task",
    "task",
    "task",
    "trust",
    "defaults",
    "setup",
    "test",
    "build",
    "prompt-template",
    "instructions",
    "agent",
];

/// Where a node sits, to bias its name towards what is valid there.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Place {
    TaskFile,
    ConfigFile,
    AnyFile,
    In(&'static str),
}

fn expected_names(place: Place) -> &'static [&'static str] {
    match place {
        Place::TaskFile => &["task"],
        Place::ConfigFile => CONFIG_TOP,
        Place::AnyFile => ANY_TOP,
        Place::In("task") => TASK_CHILDREN,
        Place::In("context" | "reference") => &["file"],
        Place::In("scope") => &["path"],
        Place::In("constraints") => &["-"],
        Place::In("acceptance") => &["run"],
        Place::In("defaults") => &["agent", "timeout", "max-iterations", "max-cost"],
        Place::In("agent") => &["command", "pass-env", "try"],
        Place::In(_) => VOCAB,
    }
}

/// Nodes that are written with a children block.
fn is_block(name: &str) -> bool {
    matches!(name, "task" | "context" | "scope" | "constraints" | "acceptance" | "reference" | "defaults" | "agent")
}

/// Strings that mean something somewhere in the formats, or are nasty.
const WORDS: &[&str] = &[
    "a",
    "b",
    "c",
    "x",
    "add-slugify",
    "Bad Name",
    "claude",
    "codex",
    "droid",
    "gemini",
    "my-agent",
    "fast",
    "code",
    "explore",
    "review",
    "test",
    "read-only",
    "workspace-write",
    "full",
    "90s",
    "3m",
    "1h30m",
    "500ms",
    "0s",
    "1s1s",
    "3d",
    "9999999999999999999h",
    "99999999999999999999999s",
    "200h",
    "1m1h",
    "",
    " ",
    "src/**",
    "src/*.py",
    "src/a.py",
    "src",
    "docs/api.md",
    "docs",
    "*",
    "**",
    "**/*",
    "/abs",
    "\\abs",
    "..",
    "../x",
    "a/../../b",
    "a/..",
    "C:x",
    "~/x",
    "[",
    "[!]",
    "{a,b",
    "{a,{b,c}}",
    "a\\",
    "\\",
    "prompt.md",
    "outside",
    "outside/x",
    "outside/**",
    "broken",
    "{prompt}",
    "{prompt_file}",
    "{workdir}",
    "{task}",
    "{bogus}",
    "{é}",
    "x{prompt}y{nope}z",
    "{{",
    "}}",
    "{",
    "}",
    "{prompt",
    "{}",
    "cargo test",
    "aider --message-file {prompt_file}",
    "OPENAI_API_KEY",
    "A=B",
    "\0",
    "é",
    "日本語",
    "🦀",
    "e\u{301}",
    "\u{FEFF}",
    "\u{200E}",
    "\u{2028}",
    "a\r\nb",
    "\t",
    "line one\nline two",
    "\"quoted\"",
    "#",
    "\"#",
];

#[derive(Debug, Clone, Copy)]
enum StrStyle {
    Quoted,
    Bare,
    Raw,
    Multi,
}

#[derive(Debug, Clone)]
enum Scalar {
    Str(String, StrStyle),
    /// An integer or float literal, written as is.
    Number(String),
    Bool(bool),
    Null,
    /// `#inf`, `#-inf`, `#nan` (v2 only).
    Keyword(&'static str),
}

#[derive(Debug, Clone)]
struct Entry {
    key: Option<(String, StrStyle)>,
    ty: Option<String>,
    value: Scalar,
    slashdash: bool,
    /// Whitespace, comment or line continuation before the entry.
    sep: &'static str,
    /// Written in the other KDL version than the document.
    other_version: bool,
}

#[derive(Debug, Clone)]
struct Node {
    ty: Option<String>,
    name: (String, StrStyle),
    entries: Vec<Entry>,
    children: Option<Vec<Node>>,
    slashdash: bool,
    /// `;` instead of a newline after the node.
    semicolon: bool,
    /// Text inserted verbatim before the node: comments or garbage.
    before: String,
}

#[derive(Debug, Clone)]
struct Doc {
    v1: bool,
    nodes: Vec<Node>,
}

/// Whether `s` can be written as a bare identifier (conservatively).
fn bare_ok(s: &str) -> bool {
    const RESERVED: &[char] = &['\\', '/', '(', ')', '{', '}', '[', ']', ';', '=', '"', '#', '<', '>', ','];
    let mut chars = s.chars();
    let Some(first) = chars.next() else { return false };
    let second = chars.next();
    let number_like = first.is_ascii_digit()
        || (matches!(first, '-' | '+' | '.') && second.is_some_and(|c| c.is_ascii_digit() || c == '.'));
    let keyword = matches!(s, "true" | "false" | "null" | "inf" | "-inf" | "nan");
    let plain = s.chars().all(|c| !c.is_whitespace() && !needs_escape(c) && !RESERVED.contains(&c));
    plain && !number_like && !keyword
}

/// Characters KDL forbids literally, or treats as newlines.
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{200E}' | '\u{200F}' | '\u{FEFF}')
        || ('\u{202A}'..='\u{202E}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
}

fn escape(s: &str, keep_newlines: bool) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' if keep_newlines => out.push('\n'),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if needs_escape(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// Hashes needed around `s` as a raw string.
fn raw_hashes(s: &str) -> usize {
    let mut most = 0;
    let b = s.as_bytes();
    for (i, _) in s.match_indices('"') {
        let run = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
        most = most.max(run);
    }
    most + 1
}

fn write_string(out: &mut String, s: &str, style: StrStyle, v1: bool, indent: &str) {
    match style {
        StrStyle::Bare if !v1 && bare_ok(s) => out.push_str(s),
        StrStyle::Raw if v1 => {
            let h = "#".repeat(raw_hashes(s));
            out.push_str(&format!("r{h}\"{s}\"{h}"));
        }
        StrStyle::Raw if !s.contains(['\n', '\r']) && !s.chars().any(needs_escape) => {
            let h = "#".repeat(raw_hashes(s));
            out.push_str(&format!("{h}\"{s}\"{h}"));
        }
        StrStyle::Multi if v1 => {
            out.push('"');
            out.push_str(&escape(s, true));
            out.push('"');
        }
        StrStyle::Multi => {
            out.push_str("\"\"\"\n");
            for line in s.split('\n') {
                if !line.is_empty() {
                    out.push_str(indent);
                }
                out.push_str(&escape(line, false));
                out.push('\n');
            }
            out.push_str(indent);
            out.push_str("\"\"\"");
        }
        _ => {
            out.push('"');
            out.push_str(&escape(s, false));
            out.push('"');
        }
    }
}

fn write_scalar(out: &mut String, v: &Scalar, v1: bool, indent: &str) {
    match v {
        Scalar::Str(s, style) => write_string(out, s, *style, v1, indent),
        Scalar::Number(n) => out.push_str(n),
        Scalar::Bool(b) => out.push_str(match (b, v1) {
            (true, true) => "true",
            (true, false) => "#true",
            (false, true) => "false",
            (false, false) => "#false",
        }),
        Scalar::Null => out.push_str(if v1 { "null" } else { "#null" }),
        Scalar::Keyword(k) => out.push_str(if v1 { "1.0e999" } else { k }),
    }
}

fn write_node(out: &mut String, n: &Node, v1: bool, depth: usize) {
    let indent = "    ".repeat(depth);
    out.push_str(&n.before);
    out.push_str(&indent);
    if n.slashdash {
        out.push_str("/-");
    }
    if let Some(ty) = &n.ty {
        out.push('(');
        write_string(out, ty, StrStyle::Bare, v1, &indent);
        out.push(')');
    }
    write_string(out, &n.name.0, n.name.1, v1, &indent);
    for e in &n.entries {
        let v1 = v1 ^ e.other_version;
        out.push_str(e.sep);
        if e.slashdash {
            out.push_str("/-");
        }
        if let Some((key, style)) = &e.key {
            write_string(out, key, *style, v1, &indent);
            out.push('=');
        }
        if let Some(ty) = &e.ty {
            out.push('(');
            write_string(out, ty, StrStyle::Bare, v1, &indent);
            out.push(')');
        }
        write_scalar(out, &e.value, v1, &indent);
    }
    if let Some(children) = &n.children {
        out.push_str(" {\n");
        for c in children {
            write_node(out, c, v1, depth + 1);
        }
        out.push_str(&indent);
        out.push('}');
    }
    out.push_str(if n.semicolon { ";\n" } else { "\n" });
}

impl Doc {
    fn render(&self) -> String {
        let mut out = String::new();
        if self.v1 && self.nodes.len().is_multiple_of(3) {
            out.push_str("// KDL v1\n");
        }
        for n in &self.nodes {
            write_node(&mut out, n, self.v1, 0);
        }
        out
    }
}

// ---------------------------------------------------------------------------
// Strategies.

fn ident() -> BoxedStrategy<String> {
    prop_oneof![
        4 => "[a-z][a-z0-9_.-]{0,8}",
        1 => "[A-Za-z_][A-Za-z0-9_-]{0,3}",
        1 => "\\PC{1,6}",
    ]
    .boxed()
}

fn str_style() -> BoxedStrategy<StrStyle> {
    prop_oneof![
        6 => Just(StrStyle::Quoted),
        3 => Just(StrStyle::Bare),
        1 => Just(StrStyle::Raw),
        1 => Just(StrStyle::Multi),
    ]
    .boxed()
}

fn text() -> BoxedStrategy<String> {
    prop_oneof![
        8 => prop::sample::select(WORDS).prop_map(str::to_owned),
        2 => ident(),
        2 => any::<String>(),
        1 => "[ -~]{0,30}",
        1 => prop::collection::vec(any::<String>(), 0..4).prop_map(|l| l.join("\n")),
        1 => prop::collection::vec("[ -~é日🦀]{0,12}", 1..5).prop_map(|l| l.join("\n")),
    ]
    .boxed()
}

fn integer() -> BoxedStrategy<String> {
    prop_oneof![
        4 => (-5i64..1100).prop_map(|i| i.to_string()),
        2 => any::<i64>().prop_map(|i| i.to_string()),
        1 => prop::sample::select(vec![
            "0", "-0", "+5", "1_000", "1000", "1001", "4294967296", "9223372036854775807",
            "9223372036854775808", "-9223372036854775809", "340282366920938463463374607431768211456",
        ]).prop_map(str::to_owned),
        1 => "-?[1-9][0-9]{18,45}",
        1 => "-?0x[0-9a-fA-F][0-9a-fA-F_]{0,24}",
        1 => "0o[0-7][0-7_]{0,30}",
        1 => "0b[01][01_]{0,80}",
    ]
    .boxed()
}

fn float() -> BoxedStrategy<String> {
    prop_oneof![
        3 => any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| {
            let s = format!("{f:?}");
            if s.contains(['.', 'e']) { s } else { format!("{s}.0") }
        }),
        2 => "-?[0-9]{1,3}\\.[0-9]{1,3}([eE][+-]?[0-9]{1,4})?",
        1 => prop::sample::select(vec![
            "2.50", "0.0", "-0.0", "1e999", "-1e999", "1.0e-400", "1E10", "1_0.5_0", "0.000001",
            "179769313486231570000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000.0",
        ]).prop_map(str::to_owned),
    ]
    .boxed()
}

fn scalar() -> BoxedStrategy<Scalar> {
    prop_oneof![
        10 => (text(), str_style()).prop_map(|(s, st)| Scalar::Str(s, st)),
        3 => integer().prop_map(Scalar::Number),
        2 => float().prop_map(Scalar::Number),
        1 => any::<bool>().prop_map(Scalar::Bool),
        1 => Just(Scalar::Null),
        1 => prop::sample::select(vec!["#inf", "#-inf", "#nan"]).prop_map(Scalar::Keyword),
    ]
    .boxed()
}

/// A value of the type the node usually takes, to get past type checks.
fn typical_scalar(name: &str) -> BoxedStrategy<Scalar> {
    match name {
        "max-cost" => prop_oneof![float(), integer()].prop_map(Scalar::Number).boxed(),
        "max-iterations" => integer().prop_map(Scalar::Number).boxed(),
        "test" => prop_oneof![Just(Scalar::Bool(false)), (text(), str_style()).prop_map(|(s, st)| Scalar::Str(s, st)),]
            .boxed(),
        _ => prop_oneof![
            (prop::sample::select(WORDS).prop_map(str::to_owned), str_style()),
            valid_scalar(name).prop_map(|v| match v {
                Scalar::Str(s, st) => (s, st),
                _ => ("x".to_owned(), StrStyle::Quoted),
            }),
        ]
        .prop_map(|(s, st)| Scalar::Str(s, st))
        .boxed(),
    }
}

/// Strings that are valid for the node `name` in a project written by
/// `run_project` (most of the time: task names may clash, globs may match
/// nothing, `depends-on` may loop).
fn valid_words(name: &str) -> &'static [&'static str] {
    match name {
        "task" => &["a", "b", "c", "d", "e", "add-slugify"],
        "depends-on" => &["a", "b", "c"],
        "agent-def" => &["my-agent", "fast", "aider"],
        "goal" => &["Add slugify(title) to src/text.py", "Explain {prompt} in\nplain words", "é 🦀", "x"],
        "agent" => &["claude", "codex", "gemini", "droid", "claude", "my-agent"],
        "kind" => &["code", "explore", "review", "test"],
        "sandbox" | "trust" => &["read-only", "workspace-write", "full"],
        "timeout" => &["90s", "3m", "1h30m", "500ms", "1m500ms"],
        "file" | "path" => &["src/a.py", "src/**", "src/*.py", "docs", "docs/api.md", "**/*.md", "{src,docs}/*"],
        "run" | "setup" | "build" | "test" => &["cargo test", "true", "echo 'hi \"there\"'", "pytest -q"],
        "-" => &["Keep the public API", "Do not add dependencies"],
        "prompt-template" => &["prompt.md", "prompt.md", "bad-prompt.md"],
        "instructions" => &["AGENTS.md"],
        "command" => &["aider", "--message-file", "{prompt_file}", "{prompt}", "{workdir}", "{task}", "{{x}}"],
        "try" => &["claude", "codex", "my-agent"],
        "pass-env" => &["OPENAI_API_KEY", "HOME"],
        _ => &["x"],
    }
}

fn valid_scalar(name: &str) -> BoxedStrategy<Scalar> {
    let style = prop_oneof![4 => Just(StrStyle::Quoted), 2 => Just(StrStyle::Bare), 1 => Just(StrStyle::Raw)];
    match name {
        "max-cost" => prop_oneof![
            (1u32..10_000).prop_map(|c| format!("{}.{:02}", c / 100, c % 100)),
            (1u32..50).prop_map(|c| c.to_string()),
        ]
        .prop_map(Scalar::Number)
        .boxed(),
        "max-iterations" => (1u32..=12).prop_map(|n| Scalar::Number(n.to_string())).boxed(),
        _ => (prop::sample::select(valid_words(name)), style)
            .prop_map(|(s, st)| Scalar::Str(s.replace("\\n", "\n"), st))
            .boxed(),
    }
}
fn sep() -> BoxedStrategy<&'static str> {
    prop_oneof![
        12 => Just(" "),
        1 => Just("\t"),
        1 => Just(" /* c */ "),
        1 => Just(" /* a /* nested */ b */ "),
        1 => Just(" \\\n        "),
        1 => Just(" \\ // continued\n        "),
    ]
    .boxed()
}

fn type_annotation() -> BoxedStrategy<Option<String>> {
    prop_oneof![
        12 => Just(None),
        1 => prop::sample::select(vec!["type", "u8", "i64", "f32", "date-time", "string", "\u{e9}"])
            .prop_map(|s| Some(s.to_owned())),
        1 => ident().prop_map(Some),
    ]
    .boxed()
}

fn entry(node_name: &str, clean: bool) -> BoxedStrategy<Entry> {
    if clean {
        return valid_scalar(node_name)
            .prop_map(|value| Entry { key: None, ty: None, value, slashdash: false, sep: " ", other_version: false })
            .boxed();
    }
    let value = prop_oneof![2 => scalar(), 3 => typical_scalar(node_name)];
    (value, type_annotation(), prop::bool::weighted(0.05), sep(), prop::bool::weighted(0.03))
        .prop_map(|(value, ty, slashdash, sep, other_version)| Entry {
            key: None,
            ty,
            value,
            slashdash,
            sep,
            other_version,
        })
        .boxed()
}
fn property(node_name: &str, clean: bool) -> BoxedStrategy<Entry> {
    if clean {
        return valid_scalar("timeout")
            .prop_map(|value| Entry {
                key: Some(("timeout".to_owned(), StrStyle::Bare)),
                ty: None,
                value,
                slashdash: false,
                sep: " ",
                other_version: false,
            })
            .boxed();
    }
    let key = prop_oneof![
        3 => Just("timeout".to_owned()),
        1 => prop::sample::select(VOCAB).prop_map(str::to_owned),
        1 => ident(),
    ];
    let duration =
        (prop::sample::select(WORDS).prop_map(str::to_owned), str_style()).prop_map(|(s, st)| Scalar::Str(s, st));
    let value = prop_oneof![3 => duration, 2 => scalar(), 1 => typical_scalar(node_name)];
    (key, str_style(), value, type_annotation(), prop::bool::weighted(0.05), sep())
        .prop_map(|(key, style, value, ty, slashdash, sep)| Entry {
            key: Some((key, style)),
            ty,
            value,
            slashdash,
            sep,
            other_version: false,
        })
        .boxed()
}
/// Comments and garbage put before a node.
fn before() -> BoxedStrategy<String> {
    prop_oneof![
        80 => Just(String::new()),
        2 => Just("// a comment\n".to_owned()),
        1 => Just("/* block\n comment */\n".to_owned()),
        1 => Just("\n\n".to_owned()),
        1 => Just("/-node \"skipped\" { goal \"x\" }\n".to_owned()),
        1 => prop::sample::select(vec![
            "{", "}", "\"", "\"\"\"", "#", "r#\"", "/*", "\\", "=", "(", ")", ";", "\u{FEFF}", "\u{200E}",
            "\0", "#\"", "(u8", "a=", "=b", "#true", "1a", "-1x", "\r", "\u{2028}", "é\u{301}",
        ]).prop_map(str::to_owned),
        1 => any::<String>(),
    ]
    .boxed()
}

fn node(place: Place, depth: usize, clean: bool) -> BoxedStrategy<Node> {
    let expected = prop::sample::select(expected_names(place)).prop_map(str::to_owned);
    let name = if clean {
        expected.boxed()
    } else {
        prop_oneof![
            12 => expected,
            2 => prop::sample::select(VOCAB).prop_map(str::to_owned),
            1 => ident(),
        ]
        .boxed()
    };
    let name_style = prop_oneof![8 => Just(StrStyle::Bare), 2 => Just(StrStyle::Quoted), 1 => Just(StrStyle::Raw)];
    (name, name_style).prop_flat_map(move |name| named_node(name, depth, clean, place)).boxed()
}
/// A node called `name` at `depth` (0 at the top); children up to depth 3.
fn named_node((name, name_style): (String, StrStyle), depth: usize, clean: bool, parent: Place) -> BoxedStrategy<Node> {
    // `agent` at the top of the config defines one; elsewhere it names one.
    let defines_agent = name == "agent" && matches!(parent, Place::ConfigFile | Place::AnyFile);
    let block = is_block(&name) && (name != "agent" || defines_agent);
    let value_key = if defines_agent { "agent-def".to_owned() } else { name.clone() };
    let list = matches!(name.as_str(), "depends-on" | "command" | "try" | "pass-env" | "setup" | "build" | "test");
    let args = match (clean, list) {
        (true, _) if block && name != "task" && !defines_agent => Just(0usize..1).boxed(),
        (true, false) => Just(1usize..2).boxed(),
        (true, true) => Just(1usize..4).boxed(),
        (false, _) => prop_oneof![
            1 => Just(0usize..1),
            8 => Just(1usize..2),
            2 => Just(2usize..5),
        ]
        .boxed(),
    }
    .prop_flat_map({
        let key = value_key.clone();
        move |n| prop::collection::vec(entry(&key, clean), n)
    });
    let props = match (clean, name.as_str()) {
        (true, "run") => prop_oneof![Just(0usize..1), Just(1usize..2)].boxed(),
        (true, _) => Just(0usize..1).boxed(),
        (false, _) => prop_oneof![8 => Just(0usize..1), 1 => Just(1usize..3)].boxed(),
    }
    .prop_flat_map({
        let key = value_key.clone();
        move |n| prop::collection::vec(property(&key, clean), n)
    });
    let known = VOCAB.iter().copied().find(|v| *v == name);
    let child_place = Place::In(known.unwrap_or("?"));
    let children: BoxedStrategy<Option<Vec<Node>>> = if depth >= 3 || (clean && !block) {
        Just(None).boxed()
    } else if clean {
        clean_children(known.unwrap_or("?"), depth).prop_map(Some).boxed()
    } else if name == "task" {
        // Most tasks get a goal, so that the other checks run.
        let goal =
            prop::option::weighted(0.8, named_node(("goal".to_owned(), StrStyle::Bare), depth + 1, false, child_place));
        let rest = prop::collection::vec(node(child_place, depth + 1, false), 0..8);
        prop_oneof![
            12 => (goal, rest).prop_map(|(goal, rest)| Some(goal.into_iter().chain(rest).collect())),
            1 => Just(None),
        ]
        .boxed()
    } else {
        let kids = prop::collection::vec(node(child_place, depth + 1, false), 0..5).prop_map(Some);
        if block {
            prop_oneof![6 => kids, 1 => Just(None)].boxed()
        } else {
            prop_oneof![1 => kids, 12 => Just(None)].boxed()
        }
    };
    let noise = if clean {
        Just((None, false, String::new())).boxed()
    } else {
        (type_annotation(), prop::bool::weighted(0.03), before()).boxed()
    };
    (Just((name, name_style)), args, props, children, noise, prop::bool::weighted(0.1))
        .prop_map(|(name, args, props, children, (ty, slashdash, before), semicolon)| {
            let mut entries = args;
            entries.extend(props);
            Node { ty, name, entries, children, slashdash, semicolon, before }
        })
        .boxed()
}

/// Valid children of a `parent` block: each single node at most once, a
/// goal in every task, a command or a `try` in every custom agent.
fn clean_children(parent: &'static str, depth: usize) -> BoxedStrategy<Vec<Node>> {
    let place = Place::In(parent);
    let names = expected_names(place);
    let picks: BoxedStrategy<Vec<&'static str>> = match parent {
        "agent" => (prop::sample::select(vec!["command", "try"]), any::<bool>())
            .prop_map(|(run, env)| if env { vec![run, "pass-env"] } else { vec![run] })
            .boxed(),
        _ if names.len() == 1 => (1usize..3).prop_map(move |n| vec![names[0]; n]).boxed(),
        _ => {
            let pool: Vec<&'static str> = names.iter().copied().filter(|n| *n != "goal").collect();
            let most = pool.len().min(5);
            let goal = parent == "task";
            prop::sample::subsequence(pool, 0..=most)
                .prop_map(move |mut v| {
                    if goal {
                        v.insert(0, "goal");
                    }
                    v
                })
                .boxed()
        }
    };
    picks
        .prop_flat_map(move |names| {
            names
                .into_iter()
                .map(|n| named_node((n.to_owned(), StrStyle::Bare), depth + 1, true, place))
                .collect::<Vec<_>>()
        })
        .boxed()
}
fn doc(place: Place) -> BoxedStrategy<Doc> {
    doc_with(place, false)
}

/// A document; `clean` ones are made of expected nodes with valid values.
fn doc_with(place: Place, clean: bool) -> BoxedStrategy<Doc> {
    let nodes = if clean {
        let names: BoxedStrategy<Vec<&'static str>> = match place {
            Place::ConfigFile => prop::sample::subsequence(CONFIG_TOP.to_vec(), 0..=6).boxed(),
            _ => (1usize..4).prop_map(|n| vec!["task"; n]).boxed(),
        };
        names
            .prop_flat_map(move |names| {
                names
                    .into_iter()
                    .map(|n| named_node((n.to_owned(), StrStyle::Bare), 0, true, place))
                    .collect::<Vec<_>>()
            })
            .boxed()
    } else {
        let count = prop_oneof![1 => Just(0usize..1), 8 => Just(1usize..6)];
        count.prop_flat_map(move |n| prop::collection::vec(node(place, 0, false), n)).boxed()
    };
    (prop::bool::weighted(0.2), nodes).prop_map(|(v1, nodes)| Doc { v1, nodes }).boxed()
}
/// Byte-level edits of a rendered document: insert, delete or overwrite.
#[derive(Debug, Clone)]
enum Edit {
    Insert(Index, Vec<u8>),
    Delete(Index, usize),
    Replace(Index, u8),
}

fn edit() -> BoxedStrategy<Edit> {
    let snippet = prop_oneof![
        prop::sample::select(vec!["{", "}", "\"", "#", "\n", ";", "=", "(", ")", "/-", "\\", "r#\""])
            .prop_map(|s| s.as_bytes().to_vec()),
        prop::collection::vec(any::<u8>(), 1..4),
    ];
    prop_oneof![
        (any::<Index>(), snippet).prop_map(|(i, s)| Edit::Insert(i, s)),
        (any::<Index>(), 1usize..8).prop_map(|(i, n)| Edit::Delete(i, n)),
        (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Edit::Replace(i, b)),
    ]
    .boxed()
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut bytes = text.as_bytes().to_vec();
    for e in edits {
        match e {
            Edit::Insert(i, s) => {
                let at = i.index(bytes.len() + 1);
                bytes.splice(at..at, s.iter().copied());
            }
            Edit::Delete(i, n) if !bytes.is_empty() => {
                let at = i.index(bytes.len());
                let end = (at + n).min(bytes.len());
                bytes.drain(at..end);
            }
            Edit::Replace(i, b) if !bytes.is_empty() => {
                let at = i.index(bytes.len());
                bytes[at] = *b;
            }
            _ => {}
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// KDL-ish tokens glued together at random.
fn token_soup() -> BoxedStrategy<String> {
    let token = prop_oneof![
        4 => prop::sample::select(VOCAB).prop_map(str::to_owned),
        4 => prop::sample::select(vec![
            " ", "\n", "{", "}", ";", "=", "(", ")", "\"", "\"\"\"", "#", "#\"", "\"#", "r\"", "r#\"", "/-",
            "//", "/*", "*/", "\\", "#true", "#false", "#null", "#inf", "#nan", "true", "null", "0x", "1",
            "-", "+", ".", "e", "_", "\t", "\r\n", "\u{FEFF}", "\u{85}", "\u{2028}", "é", "🦀",
        ]).prop_map(str::to_owned),
        2 => (text(), str_style()).prop_map(|(s, st)| {
            let mut out = String::new();
            write_string(&mut out, &s, st, false, "");
            out
        }),
        1 => integer(),
        1 => float(),
    ];
    prop::collection::vec(token, 0..60).prop_map(|t| t.concat()).boxed()
}

// ---------------------------------------------------------------------------
// Properties.

proptest! {
    #![proptest_config(config(cases()))]

    /// Arbitrary bytes, lossily decoded.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        parse_both(&String::from_utf8_lossy(&bytes));
    }

    /// Arbitrary unicode text.
    #[test]
    fn arbitrary_text_never_panics(text in any::<String>()) {
        parse_both(&text);
    }

    /// Tokens of the KDL grammar and the formats' vocabulary in random order.
    #[test]
    fn token_soup_never_panics(text in token_soup()) {
        parse_both(&text);
    }

    /// Structurally valid-ish KDL documents made of the formats' nodes.
    #[test]
    fn generated_documents_never_panic(doc in doc(Place::AnyFile)) {
        parse_both(&doc.render());
    }

    /// Generated documents with a few bytes inserted, deleted or replaced:
    /// syntax errors in the middle of otherwise good files.
    #[test]
    fn edited_documents_never_panic(
        doc in doc(Place::AnyFile),
        edits in prop::collection::vec(edit(), 1..4),
    ) {
        parse_both(&apply(&doc.render(), &edits));
    }
}

// ---------------------------------------------------------------------------
// A whole project through `load_and_plan`.

#[derive(Debug, Clone)]
struct ProjectCase {
    config: Doc,
    task_file: Doc,
    second_file: Option<Doc>,
    agents_toml: Option<String>,
    paths: Vec<&'static str>,
    agent: Option<&'static str>,
    edits: Vec<Edit>,
    /// Replaces the valid `prompt.md`.
    template: Option<String>,
}

/// A project; most are clean (valid but for clashes between files and
/// agents or tasks that do not exist), some are noisy all over.
fn project_case() -> BoxedStrategy<ProjectCase> {
    prop::bool::weighted(0.6).prop_flat_map(project_case_with).boxed()
}

fn project_case_with(clean: bool) -> BoxedStrategy<ProjectCase> {
    let agents_toml = if clean {
        prop_oneof![3 => Just(None), 1 => Just(Some("trust_level = \"trusted\"\n".to_owned()))].boxed()
    } else {
        prop_oneof![
            3 => Just(None),
            1 => Just(Some("trust_level = \"trusted\"\n".to_owned())),
            1 => Just(Some("trust_level = \n".to_owned())),
            1 => Just(Some("[x]\ntrust_level = \"é\u{301}\" = 1\n".to_owned())),
            1 => any::<String>().prop_map(Some),
        ]
        .boxed()
    };
    let paths = if clean {
        prop::sample::select(vec![vec![], vec![], vec![], vec!["tasks"], vec!["tasks/x.kdl"]]).boxed()
    } else {
        prop::sample::select(vec![
            vec![],
            vec![],
            vec!["tasks/x.kdl"],
            vec!["tasks"],
            vec!["tasks/x.kdl", "tasks/x.kdl"],
            vec!["tasks/x.kdl", "tasks/y.kdl"],
            vec!["nope"],
            vec!["cassist.kdl"],
        ])
        .boxed()
    };
    let agent = if clean {
        prop_oneof![8 => Just(None), 1 => Just(Some("claude"))].boxed()
    } else {
        prop_oneof![
            3 => Just(None),
            1 => Just(Some("claude")),
            1 => Just(Some("my-agent")),
            1 => Just(Some("nope")),
        ]
        .boxed()
    };
    let edits = if clean {
        Just(Vec::new()).boxed()
    } else {
        prop_oneof![2 => Just(Vec::new()), 1 => prop::collection::vec(edit(), 1..3)].boxed()
    };
    let template = if clean {
        Just(None).boxed()
    } else {
        prop::option::weighted(
            0.5,
            prop_oneof![
                text(),
                prop::collection::vec(
                    prop_oneof![
                        prop::sample::select(vec!["{", "}", "{{", "}}", "{goal}", "{task}", "{x}", "{é}", "\n"])
                            .prop_map(str::to_owned),
                        text(),
                    ],
                    0..12,
                )
                .prop_map(|v| v.concat()),
            ],
        )
        .boxed()
    };
    (
        doc_with(Place::ConfigFile, clean),
        doc_with(Place::TaskFile, clean),
        prop::option::weighted(0.3, doc_with(Place::TaskFile, clean)),
        agents_toml,
        paths,
        agent,
        (edits, template),
    )
        .prop_map(move |(config, mut task_file, mut second_file, agents_toml, paths, agent, (edits, template))| {
            if clean {
                // Tasks named a, b, c... in order, so `depends-on` mostly
                // finds them and names do not clash.
                let mut names = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"].iter();
                for doc in std::iter::once(&mut task_file).chain(second_file.as_mut()) {
                    for node in &mut doc.nodes {
                        if let (Some(entry), Some(name)) = (node.entries.first_mut(), names.next()) {
                            entry.value = Scalar::Str((*name).to_owned(), StrStyle::Bare);
                        }
                    }
                }
            }
            ProjectCase { config, task_file, second_file, agents_toml, paths, agent, edits, template }
        })
        .boxed()
}

fn write(root: &Path, rel: &str, text: &str) {
    crate::support::write(&root.join(rel), text);
}

/// Writes the project of `case` to a new temporary folder.
fn write_project(case: &ProjectCase) -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix("cassist-fuzz-").tempdir().unwrap();
    let root = dir.path();
    write(root, "cassist.kdl", &case.config.render());
    write(root, "tasks/x.kdl", &apply(&case.task_file.render(), &case.edits));
    if let Some(second) = &case.second_file {
        write(root, "tasks/y.kdl", &second.render());
    }
    if let Some(toml) = &case.agents_toml {
        write(root, ".agents/config.toml", toml);
    }
    // Files for context globs, a template with an unknown placeholder, and
    // symlinks leading out of the project.
    write(root, "src/a.py", "print('a')\n");
    write(root, "src/lib.rs", "");
    write(root, "docs/api.md", "# API\n");
    write(root, "prompt.md", "{task} ({kind}): {goal}\n{context}{{literal}} é\n");
    write(root, "bad-prompt.md", "{task}: {goal}\n{bogus} {{literal}} {é}\n{unclosed\n");
    if let Some(template) = &case.template {
        write(root, "prompt.md", template);
    }
    write(root, "AGENTS.md", "be nice\n");
    std::os::unix::fs::symlink("..", root.join("outside")).unwrap();
    std::os::unix::fs::symlink("../cassist-fuzz-nowhere", root.join("broken")).unwrap();
    dir
}

fn options(case: &ProjectCase) -> LoadOptions {
    LoadOptions {
        paths: case.paths.iter().map(PathBuf::from).collect(),
        agent: case.agent.map(str::to_owned),
        ..LoadOptions::default()
    }
}

fn run_project(case: &ProjectCase) {
    let dir = write_project(case);
    let root = dir.path();

    match load_and_plan(root, &options(case)) {
        Ok(plan) => {
            for w in &plan.warnings {
                render(w);
            }
            // Again, now through the file-hash cache: the same plan.
            let again = load_and_plan(root, &options(case)).unwrap_or_else(|d| panic!("second plan failed: {d:?}"));
            let hashes = |p: &cassist_core::plan::Plan| -> Vec<(String, String)> {
                p.tasks.iter().map(|t| (t.task.name.clone(), t.hash.clone())).collect()
            };
            assert_eq!(hashes(&plan), hashes(&again), "planning twice gave different hashes");
        }
        Err(diags) => {
            assert!(!diags.is_empty(), "load_and_plan failed without a diagnostic");
            for d in &diags {
                render(d);
            }
        }
    }
}

proptest! {
    #![proptest_config(config((cases() / 4).max(1)))]

    /// A generated project on disk: `load_and_plan` returns, and whatever it
    /// reports renders.
    #[test]
    fn load_and_plan_never_panics(case in project_case()) {
        run_project(&case);
    }
}

// ---------------------------------------------------------------------------
// Sanity checks of the generators themselves.

/// The generator must mostly produce documents that parse, or the
/// properties would only exercise the syntax-error path.
#[test]
fn generated_documents_mostly_parse() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = doc(Place::AnyFile);
    let (mut ok, mut tasks) = (0, 0);
    let total = 200;
    for _ in 0..total {
        let doc = strategy.new_tree(&mut runner).unwrap().current();
        let src = SourceFile::new("t.kdl", doc.render());
        let mut diags = Diagnostics::default();
        if let Some(t) = parse_task_file(&src, &mut diags) {
            ok += 1;
            tasks += t.len();
        }
    }
    assert!(ok * 100 / total >= 50, "only {ok} of {total} generated documents parse");
    assert!(tasks >= total / 5, "only {tasks} tasks in {total} documents");
}

// ---------------------------------------------------------------------------
// Regressions found by the properties above.

/// kdl's v1 parser (kdl 4.7.1, used as the v1 fallback) panicked on a type
/// annotation that is a keyword near the end of the text: it sliced its
/// error span past the end of the text, or inside a character. Found by
/// `token_soup_never_panics` as `(true`.
#[test]
fn keyword_type_annotation_is_a_syntax_error() {
    for text in ["(true", "(true)", "(null)a\n", "a (false)1", "task \"x\" {\n(null", "(true)🦀🦀"] {
        parse_both(text);
        let src = SourceFile::new("tasks/x.kdl", text);
        let mut diags = Diagnostics::default();
        assert!(parse_task_file(&src, &mut diags).is_none(), "{text:?} parsed");
        let diags = diags.sorted();
        assert!(diags.iter().all(|d| d.code == "syntax"), "{text:?}: {diags:?}");
    }
    // Keywords inside strings stay fine in v1 documents.
    let src = SourceFile::new(
        "tasks/x.kdl",
        "task \"x\" {\n    goal \"(true)\"\n    max-iterations 1\n    kind r\"code\"\n}\n",
    );
    let mut diags = Diagnostics::default();
    let tasks = parse_task_file(&src, &mut diags).expect("valid KDL v1");
    assert_eq!(tasks[0].goal, "(true)");
    assert!(diags.is_empty(), "{:?}", diags.sorted());
}
