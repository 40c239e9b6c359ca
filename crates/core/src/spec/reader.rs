//! Small typed accessors over KDL nodes that report every misuse as a
//! diagnostic instead of failing: the building blocks of the task and config
//! parsers.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kdl::{KdlEntry, KdlNode, KdlValue};
use miette::SourceSpan;

use super::diag::{Diagnostics, SourceFile, Spanned, SpecDiagnostic, suggestion};
use super::duration::{DurationError, parse_duration};
use crate::limits::{SizeError, UNITS, parse_size, unit_hint};

/// Reads nodes of one file, collecting diagnostics.
pub struct Reader<'a> {
    pub src: &'a Arc<SourceFile>,
    pub diags: &'a mut Diagnostics,
}

/// What a KDL value is, for messages.
pub fn type_name(v: &KdlValue) -> &'static str {
    match v {
        KdlValue::String(_) => "a string",
        KdlValue::Integer(_) => "an integer",
        KdlValue::Float(_) => "a number",
        KdlValue::Bool(_) => "a boolean",
        KdlValue::Null => "#null",
    }
}

impl<'a> Reader<'a> {
    pub fn new(src: &'a Arc<SourceFile>, diags: &'a mut Diagnostics) -> Self {
        Reader { src, diags }
    }

    pub fn error(
        &mut self,
        code: &'static str,
        message: impl Into<String>,
        span: SourceSpan,
        label: impl Into<String>,
    ) -> &mut SpecDiagnostic {
        self.push(SpecDiagnostic::error(code, message), span, label)
    }

    pub fn warn(
        &mut self,
        code: &'static str,
        message: impl Into<String>,
        span: SourceSpan,
        label: impl Into<String>,
    ) -> &mut SpecDiagnostic {
        self.push(SpecDiagnostic::warning(code, message), span, label)
    }

    fn push(&mut self, d: SpecDiagnostic, span: SourceSpan, label: impl Into<String>) -> &mut SpecDiagnostic {
        self.diags.push(d.at(self.src, span, label));
        self.diags.last_mut()
    }

    pub fn name(node: &KdlNode) -> &str {
        node.name().value()
    }

    pub fn name_span(node: &KdlNode) -> SourceSpan {
        node.name().span()
    }

    /// Reports properties of `node` not in `allowed`.
    pub fn check_props(&mut self, node: &KdlNode, allowed: &[&str]) {
        for e in node.entries() {
            if let Some(key) = e.name() {
                let key = key.value();
                if !allowed.contains(&key) {
                    let node_name = Self::name(node);
                    let help = if allowed.is_empty() {
                        format!("`{node_name}` takes no properties")
                    } else {
                        suggestion(key, allowed)
                    };
                    self.error(
                        "unknown-property",
                        format!("unknown property `{key}` on `{node_name}`"),
                        e.span(),
                        "unknown property",
                    )
                    .set_help(help);
                }
            }
        }
    }

    /// Reports a children block on a node that takes none.
    pub fn check_no_children(&mut self, node: &KdlNode) {
        if let Some(children) = node.children() {
            let name = Self::name(node);
            self.error(
                "unexpected-children",
                format!("`{name}` takes a value, not a `{{ … }}` block"),
                block_span(&self.src.text, children.span()),
                "unexpected block",
            )
            .set_help(format!("write `{name}` with its value only, e.g. `{name} \"...\"`"));
        }
    }

    pub fn positional(node: &KdlNode) -> Vec<&KdlEntry> {
        node.entries().iter().filter(|e| e.name().is_none()).collect()
    }

    /// A node of the form `name VALUE`: exactly one argument, no properties,
    /// no children. `example` shows the expected form in help texts.
    pub fn single<'n>(&mut self, node: &'n KdlNode, example: &str) -> Option<&'n KdlEntry> {
        self.check_props(node, &[]);
        self.check_no_children(node);
        let args = Self::positional(node);
        let name = Self::name(node);
        match args.as_slice() {
            [one] => Some(one),
            [] => {
                self.error("missing-value", format!("`{name}` needs a value"), Self::name_span(node), "no value given")
                    .set_help(format!("write it as `{example}`"));
                None
            }
            [_, extra @ ..] => {
                let span = join(extra.iter().map(|e| e.span()));
                self.error(
                    "too-many-values",
                    format!("`{name}` takes one value, found {}", args.len()),
                    span,
                    "extra value",
                )
                .set_help(format!("write it as `{example}`"));
                None
            }
        }
    }

    /// The entry as a string, or a diagnostic.
    pub fn string(&mut self, node: &KdlNode, entry: &KdlEntry, example: &str) -> Option<Spanned<String>> {
        self.string_named(Self::name(node), entry, example)
    }

    /// The property `key=` of `node` as a string (`None`: absent, or a
    /// diagnostic when it is not a string).
    pub fn string_prop(&mut self, node: &KdlNode, key: &str, example: &str) -> Option<Spanned<String>> {
        let entry = node.entries().iter().find(|e| e.name().is_some_and(|n| n.value() == key))?;
        self.string_named(key, entry, example)
    }

    /// `entry` (of node or property `name`) as a string, or a diagnostic.
    fn string_named(&mut self, name: &str, entry: &KdlEntry, example: &str) -> Option<Spanned<String>> {
        match entry.value() {
            KdlValue::String(s) => Some(Spanned::new(s.clone(), entry.span())),
            other => {
                self.error(
                    "wrong-type",
                    format!("`{name}` expects a string, found {}", type_name(other)),
                    entry.span(),
                    "expected a string",
                )
                .set_help(format!("write it as `{example}`"));
                None
            }
        }
    }

    /// `name "value"`.
    pub fn single_string(&mut self, node: &KdlNode, example: &str) -> Option<Spanned<String>> {
        let entry = self.single(node, example)?;
        self.string(node, entry, example)
    }

    /// `name "a" "b" ...` with at least one argument, no properties.
    pub fn string_list(&mut self, node: &KdlNode, example: &str) -> Vec<Spanned<String>> {
        self.check_props(node, &[]);
        self.check_no_children(node);
        let args = Self::positional(node);
        if args.is_empty() {
            let name = Self::name(node);
            self.error(
                "missing-value",
                format!("`{name}` needs at least one value"),
                Self::name_span(node),
                "no value given",
            )
            .set_help(format!("write it as `{example}`"));
        }
        args.into_iter().filter_map(|e| self.string(node, e, example)).collect()
    }

    /// A duration value (`"90s"`, `"3m"`, `"1h30m"`).
    pub fn duration(&mut self, node_name: &str, entry: &KdlEntry) -> Option<Spanned<Duration>> {
        match entry.value() {
            KdlValue::String(s) => match parse_duration(s) {
                Ok(d) => Some(Spanned::new(d, entry.span())),
                Err(why) => {
                    self.error(
                        "bad-duration",
                        format!("invalid duration `{s}` for `{node_name}`: {why}"),
                        entry.span(),
                        match why {
                            DurationError::Fraction(_) => "not a whole number",
                            DurationError::Zero => "must be longer than zero",
                            _ => "not a duration",
                        },
                    )
                    .set_help("write a duration like \"90s\", \"3m\" or \"1h30m\" (units: h, m, s, ms)");
                    None
                }
            },
            KdlValue::Integer(n) => {
                self.error(
                    "bad-duration",
                    format!("`{node_name}` expects a duration string, found the number {n}"),
                    entry.span(),
                    "missing unit",
                )
                .set_help(format!("write the unit: \"{n}s\" or \"{n}m\""));
                None
            }
            other => {
                self.error(
                    "bad-duration",
                    format!("`{node_name}` expects a duration string, found {}", type_name(other)),
                    entry.span(),
                    "not a duration",
                )
                .set_help("write a duration like \"90s\", \"3m\" or \"1h30m\"");
                None
            }
        }
    }

    /// A size value (`"16MiB"`, `"500KB"`), or a diagnostic pointing at it.
    pub fn size(&mut self, node_name: &str, entry: &KdlEntry) -> Option<u64> {
        const HELP: &str = "write a size like \"16MiB\" or \"500KB\" (units: B, KiB, MiB, GiB, KB, MB, GB)";
        let text = match entry.value() {
            KdlValue::String(s) => s,
            KdlValue::Integer(n) => {
                self.error(
                    "bad-size",
                    format!("`{node_name}` expects a size string, found the number {n}"),
                    entry.span(),
                    "missing unit",
                )
                .set_help(format!("write the unit: \"{n}MiB\" or \"{n}KiB\""));
                return None;
            }
            other => {
                self.error(
                    "bad-size",
                    format!("`{node_name}` expects a size string, found {}", type_name(other)),
                    entry.span(),
                    "not a size",
                )
                .set_help(HELP);
                return None;
            }
        };
        match parse_size(text) {
            Ok(size) => Some(size),
            Err(e) => {
                let help = match &e {
                    SizeError::UnknownUnit(unit) => {
                        let units: Vec<&str> = UNITS.iter().map(|(u, _)| *u).collect();
                        unit_hint(unit).unwrap_or_else(|| suggestion(unit, &units))
                    }
                    _ => HELP.to_owned(),
                };
                let label = match e {
                    SizeError::UnknownUnit(_) => "unknown unit",
                    SizeError::Zero => "must be larger than zero",
                    _ => "not a size",
                };
                self.error("bad-size", format!("invalid size `{text}` for `{node_name}`: {e}"), entry.span(), label)
                    .set_help(help);
                None
            }
        }
    }

    /// Children of a block node, reporting the form `name { ... }` when given
    /// arguments instead.
    pub fn block<'n>(&mut self, node: &'n KdlNode, example: &str) -> &'n [KdlNode] {
        self.check_props(node, &[]);
        let name = Self::name(node);
        if let Some(first) = Self::positional(node).first() {
            self.error(
                "unexpected-value",
                format!("`{name}` takes a block, not a value"),
                first.span(),
                "unexpected value",
            )
            .set_help(format!("write it as `{example}`"));
        }
        node.children().map(|d| d.nodes()).unwrap_or(&[])
    }

    /// Reports a node name not in `known`, with a suggestion.
    pub fn unknown_node(&mut self, node: &KdlNode, context: &str, known: &[&str]) {
        let name = Self::name(node);
        self.error("unknown-node", format!("unknown node `{name}` {context}"), Self::name_span(node), "unknown node")
            .set_help(suggestion(name, known));
    }
}

/// Tracks nodes that may appear once.
#[derive(Default)]
pub struct Once {
    seen: HashMap<String, SourceSpan>,
}

impl Once {
    /// `true` the first time; a diagnostic on later ones.
    pub fn first(&mut self, r: &mut Reader<'_>, node: &KdlNode) -> bool {
        let name = Reader::name(node).to_owned();
        let span = Reader::name_span(node);
        if let Some(prev) = self.seen.get(&name) {
            let prev = *prev;
            r.error("duplicate-node", format!("`{name}` is given more than once"), span, "given again here")
                .add_label(prev, "first given here")
                .set_help(format!("keep a single `{name}`"));
            return false;
        }
        self.seen.insert(name, span);
        true
    }
}

/// Widens a children span to its braces, when they are next to it.
fn block_span(text: &str, span: SourceSpan) -> SourceSpan {
    let start = text.get(..span.offset()).and_then(|t| t.rfind('{')).unwrap_or(span.offset());
    let end = span.offset() + span.len();
    let end = text.get(end..).and_then(|rest| rest.find('}').map(|p| end + p + 1)).unwrap_or(end);
    SourceSpan::from(start..end.min(text.len()).max(start))
}

/// The smallest span covering all of `spans`.
pub fn join(spans: impl Iterator<Item = SourceSpan>) -> SourceSpan {
    let mut start = usize::MAX;
    let mut end = 0;
    for s in spans {
        start = start.min(s.offset());
        end = end.max(s.offset() + s.len());
    }
    if start == usize::MAX { SourceSpan::from(0..0) } else { SourceSpan::from(start..end) }
}

/// Mutating helpers on a just-pushed diagnostic.
pub trait DiagExt {
    fn set_help(&mut self, help: impl Into<String>) -> &mut Self;
    fn add_label(&mut self, span: SourceSpan, label: impl Into<String>) -> &mut Self;
}

impl DiagExt for SpecDiagnostic {
    fn set_help(&mut self, help: impl Into<String>) -> &mut Self {
        self.help = Some(super::diag::shown(help.into()));
        self
    }
    fn add_label(&mut self, span: SourceSpan, label: impl Into<String>) -> &mut Self {
        self.labels.push((span, super::diag::shown(label.into())));
        self
    }
}
