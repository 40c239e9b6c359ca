//! Recovery of oversized tasks: a task whose agent was killed (SIGKILL,
//! exit status 137, an out-of-memory kill) or timed out is split into
//! smaller parts instead of being retried as is.
//!
//! Round 1 gives one part per file ("one file per prompt"): the files of
//! the scope, or without a scope the context files. Where that is not
//! possible (a single file) or a part is killed again, the part becomes
//! `header` / `impl` / `test` parts. A part that is already that small is
//! run again with the longer timeout of the next round. Each round
//! multiplies the timeout by 1.5; after [`MAX_ROUNDS`] the task is blocked.
//!
//! Parts run in order in the task's one workspace, so each sees the work of
//! the previous ones. This module knows what the parts are, what they are
//! called and what their prompts say; the runner runs them.

use std::path::Path;
use std::time::Duration;

use crate::review::Scope;
use cassist_core::event::{PartState, SubtaskReport};
use cassist_core::part::{Part, Piece};
use cassist_core::plan::PlannedTask;
use cassist_core::spec::Kind;

/// Rounds of splitting a task gets before it is blocked.
pub const MAX_ROUNDS: u32 = 3;

/// What replaces `part` when its agent was killed: one part per file for
/// the whole task (with two files or more), else header / impl / test (code
/// tasks only), else the same part again, with the next round's timeout.
pub fn children(part: &Part, files: &[String], kind: Kind) -> Vec<Part> {
    let round = part.round + 1;
    let pieces = |file: Option<&String>| {
        Piece::ALL.iter().map(|&p| Part { file: file.cloned(), piece: Some(p), round }).collect::<Vec<_>>()
    };
    match (&part.file, part.piece) {
        (None, None) if files.len() >= 2 => {
            files.iter().map(|f| Part { file: Some(f.clone()), piece: None, round }).collect()
        }
        (None, None) if kind == Kind::Code => pieces(files.first()),
        (Some(f), None) if kind == Kind::Code => pieces(Some(f)),
        _ => vec![Part { round, ..part.clone() }],
    }
}

/// The files a task is split into, one prompt each: the files its scope
/// names, and its context files inside the scope; when that is nothing, the
/// project's files the scope matches; without a scope, its context files.
pub fn files(t: &PlannedTask, root: &Path) -> Vec<String> {
    let patterns = &t.key.spec.scope;
    if t.task.kind.is_read_only() || patterns.is_empty() {
        return t.context_files.clone();
    }
    let scope = Scope::new(patterns);
    if scope.is_everything() {
        return t.context_files.clone();
    }
    let mut out: Vec<String> = Vec::new();
    let push = |f: String, out: &mut Vec<String>| {
        if !out.contains(&f) {
            out.push(f);
        }
    };
    for l in scope.literals() {
        // A literal folder stands for what is below it: not a file.
        if !root.join(l).is_dir() {
            push(l.clone(), &mut out);
        }
    }
    for f in &t.context_files {
        if scope.contains(f) {
            push(f.clone(), &mut out);
        }
    }
    if out.is_empty() {
        let mut found: Vec<String> = cassist_core::paths::project_walker(root, false)
            .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
            .filter_map(|e| e.path().strip_prefix(root).ok().and_then(|p| p.to_str()).map(str::to_owned))
            .filter(|p| scope.contains(p))
            .collect();
        found.sort();
        out = found;
    }
    out
}

/// The first parts of a task that needed splitting before (`recorded`, the
/// parts it last passed with), on today's files: one part per file, and
/// header / impl / test for each file that needed them; the parts keep
/// their rounds (so their timeouts). `None` when nothing was recorded.
pub fn from_recorded(recorded: &[Part], files: &[String], kind: Kind) -> Option<Vec<(Part, Vec<Part>)>> {
    if recorded.is_empty() {
        return None;
    }
    let round_of = |pred: &dyn Fn(&Part) -> bool| recorded.iter().filter(|p| pred(p)).map(|p| p.round).max();
    let first = children(&Part::whole(), files, kind);
    let mut out = Vec::new();
    for mut part in first {
        if kind == Kind::Code
            && part.piece.is_none()
            && let Some(f) = part.file.clone()
            && recorded.iter().any(|p| p.file.as_deref() == Some(f.as_str()) && p.piece.is_some())
        {
            // This file needed header / impl / test: it starts that way.
            let round = round_of(&|p: &Part| p.file.as_deref() == Some(f.as_str())).unwrap_or(2).max(2);
            let pieces = Piece::ALL.iter().map(|&pc| Part { file: Some(f.clone()), piece: Some(pc), round }).collect();
            out.push((part, pieces));
            continue;
        }
        // Otherwise the part keeps the longest timeout the same part needed.
        let same = |p: &Part| p.file == part.file && p.piece == part.piece;
        part.round = round_of(&same).unwrap_or(1).max(1);
        out.push((part, Vec::new()));
    }
    Some(out)
}

/// The context files a part's prompt lists: its own file, and the context
/// files that are no other part's (shared material such as a spec).
pub fn context_for(part: &Part, t: &PlannedTask, files: &[String]) -> Vec<String> {
    let Some(own) = &part.file else { return t.context_files.clone() };
    let mut out = vec![own.clone()];
    out.extend(t.context_files.iter().filter(|f| *f != own && !files.contains(f)).cloned());
    out
}

/// The `# Part` section: what this part must do and must not do.
/// `index` (0-based) and `parts` place it among the parts it runs with.
pub fn section(part: &Part, task: &str, kind: Kind, index: usize, parts: &[Part]) -> String {
    let total = parts.len();
    let others: Vec<String> =
        parts.iter().enumerate().filter(|(i, _)| *i != index).map(|(_, p)| format!("`{}`", p.label())).collect();
    let mut s = format!(
        "This prompt is part {} of {total} of task `{task}`: the whole task was too large for one agent run, so it was split. \
         Parts run one after another in the same working tree; what earlier parts did is already there.",
        index + 1
    );
    if !others.is_empty() {
        s.push_str(&format!(" The other parts are {}.", others.join(", ")));
    }
    s.push_str("\n\n");
    let target = match &part.file {
        Some(f) => format!("`{f}`"),
        None => "what the goal asks for".to_owned(),
    };
    let read_only = kind.is_read_only() || kind == Kind::Test;
    match (part.piece, &part.file) {
        (None, Some(f)) if read_only => s.push_str(&format!(
            "Do: the goal, for `{f}` only.\nDo not: go through the other files; other parts cover them."
        )),
        (None, Some(f)) => s.push_str(&format!(
            "Do: everything the goal asks of `{f}`, and nothing else.\n\
             Do not: create, change or delete any other file; each other file is another part's."
        )),
        (None, None) => s.push_str("Do: the goal, with the longer time this run gets."),
        (Some(Piece::Header), _) => s.push_str(&format!(
            "Do: write only the interface of {target}: types, function and method signatures, and stubs \
             (bodies that do nothing or raise \"not implemented\"), with their doc comments.\n\
             Do not: write the implementation behind them, nor tests; the next parts do."
        )),
        (Some(Piece::Impl), _) => s.push_str(&format!(
            "Do: implement the interface that is already written in {target}: fill in the stubs so the goal is met.\n\
             Do not: change the signatures or types, nor write tests; the next part writes the tests."
        )),
        (Some(Piece::Test), _) => s.push_str(&format!(
            "Do: write the tests of {target}: what the goal asks for, through the interface as it is.\n\
             Do not: change the interface or the implementation, unless a test shows a real bug; then fix only that."
        )),
    }
    if part.piece.is_some() && part.file.is_some() {
        s.push_str("\nChange no file but the one named above and the tests of it.");
    }
    s.push('\n');
    s
}

/// The prompt of a part: the task's prompt with a `# Part` section right
/// after the goal (before `# Context`), or at the end for templates without
/// that heading.
pub fn with_section(prompt: &str, section: &str) -> String {
    let block = format!("# Part\n{section}\n");
    match prompt.find("\n# Context\n") {
        Some(at) => format!("{}{block}{}", &prompt[..at + 1], &prompt[at + 1..]),
        None => {
            let sep = if prompt.ends_with('\n') { "\n" } else { "\n\n" };
            format!("{prompt}{sep}{block}")
        }
    }
}

/// The split tree of one task while it runs: every part ever made, the
/// order the leaves run in, and what happened to each.
#[derive(Debug, Default)]
pub struct Tree {
    pub nodes: Vec<Node>,
    /// The parts to run, in order (indices into `nodes`).
    pub queue: Vec<usize>,
    /// The part running now, until it passes.
    pub current: Option<usize>,
    roots: Vec<usize>,
}

#[derive(Debug)]
pub struct Node {
    pub part: Part,
    pub children: Vec<usize>,
    pub report: SubtaskReport,
    /// Attempts the same part made in earlier rounds.
    pub earlier_attempts: u32,
}

impl Node {
    /// `CASSIST_ATTEMPT` of this part's next run: a part run again in a
    /// later round counts on.
    pub fn next_attempt(&self) -> u32 {
        self.earlier_attempts + self.report.attempts + 1
    }
}

impl Tree {
    fn node(&mut self, part: Part, task: &str, base: Duration) -> usize {
        let report = SubtaskReport {
            name: part.name(task),
            part: part.env(),
            round: part.round,
            state: PartState::Skipped,
            attempts: 0,
            duration_ms: 0,
            timeout_ms: part.timeout(base).as_millis() as u64,
            changed_files: Vec::new(),
            reason: None,
            summary: None,
            cost_usd: None,
            subtasks: Vec::new(),
        };
        self.nodes.push(Node { part, children: Vec::new(), report, earlier_attempts: 0 });
        self.nodes.len() - 1
    }

    /// A tree of first parts (each with the parts it is already split
    /// into, for a task that needed that before).
    pub fn new(first: Vec<(Part, Vec<Part>)>, task: &str, base: Duration) -> Tree {
        let mut tree = Tree::default();
        for (part, pre_split) in first {
            let i = tree.node(part, task, base);
            tree.roots.push(i);
            if pre_split.is_empty() {
                tree.queue.push(i);
            } else {
                tree.nodes[i].report.state = PartState::Split;
                tree.nodes[i].report.reason = Some("split in an earlier run".into());
                for c in pre_split {
                    let j = tree.node(c, task, base);
                    tree.nodes[i].children.push(j);
                    tree.queue.push(j);
                }
            }
        }
        tree
    }

    /// Replaces the queued part at `pos` by `children`; returns them.
    pub fn split(&mut self, pos: usize, children: Vec<Part>, task: &str, base: Duration) -> Vec<usize> {
        let i = self.queue[pos];
        let ids: Vec<usize> = children.into_iter().map(|c| self.node(c, task, base)).collect();
        let (file, piece) = (self.nodes[i].part.file.clone(), self.nodes[i].part.piece);
        let before = self.nodes[i].earlier_attempts + self.nodes[i].report.attempts;
        for &j in &ids {
            if self.nodes[j].part.file == file && self.nodes[j].part.piece == piece {
                self.nodes[j].earlier_attempts = before;
            }
        }
        self.nodes[i].children.extend(ids.iter().copied());
        self.queue.splice(pos..=pos, ids.iter().copied());
        ids
    }

    /// The parts that run, in order.
    pub fn leaves(&self) -> Vec<Part> {
        self.queue.iter().map(|&i| self.nodes[i].part.clone()).collect()
    }

    /// The report's `subtasks`.
    pub fn reports(&self) -> Vec<SubtaskReport> {
        fn build(tree: &Tree, i: usize) -> SubtaskReport {
            let mut r = tree.nodes[i].report.clone();
            r.subtasks = tree.nodes[i].children.iter().map(|&c| build(tree, c)).collect();
            r
        }
        self.roots.iter().map(|&i| build(self, i)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn rounds_go_files_then_pieces_then_longer_time() {
        let two = files(&["a.py", "b.py"]);
        let first = children(&Part::whole(), &two, Kind::Code);
        assert_eq!(first.iter().map(Part::label).collect::<Vec<_>>(), ["a.py", "b.py"]);
        assert!(first.iter().all(|p| p.round == 1));
        let second = children(&first[1], &two, Kind::Code);
        assert_eq!(second.iter().map(Part::label).collect::<Vec<_>>(), ["b.py:header", "b.py:impl", "b.py:test"]);
        assert!(second.iter().all(|p| p.round == 2));
        let third = children(&second[1], &two, Kind::Code);
        assert_eq!(third, [Part { round: 3, ..second[1].clone() }]);

        // One file: pieces of it at once; no file: pieces of the task.
        let one = children(&Part::whole(), &files(&["big.rs"]), Kind::Code);
        assert_eq!(one.iter().map(Part::label).collect::<Vec<_>>(), ["big.rs:header", "big.rs:impl", "big.rs:test"]);
        let none = children(&Part::whole(), &[], Kind::Code);
        assert_eq!(none.iter().map(Part::label).collect::<Vec<_>>(), ["header", "impl", "test"]);
        // Read-only kinds are split by file only, then given more time.
        let explore = children(&Part::whole(), &files(&["big.rs"]), Kind::Explore);
        assert_eq!(explore, [Part { round: 1, ..Part::whole() }]);
        let f = children(&Part::whole(), &two, Kind::Explore);
        assert_eq!(children(&f[0], &two, Kind::Explore), [Part { round: 2, ..f[0].clone() }]);
    }

    #[test]
    fn a_recorded_split_is_rebuilt_on_todays_files() {
        let recorded = vec![
            Part { file: Some("a.py".into()), piece: None, round: 1 },
            Part { file: Some("b.py".into()), piece: Some(Piece::Header), round: 2 },
            Part { file: Some("b.py".into()), piece: Some(Piece::Impl), round: 3 },
            Part { file: Some("b.py".into()), piece: Some(Piece::Test), round: 2 },
        ];
        let first = from_recorded(&recorded, &files(&["a.py", "b.py", "c.py"]), Kind::Code).unwrap();
        let labels: Vec<(String, Vec<String>)> =
            first.iter().map(|(p, c)| (p.label(), c.iter().map(Part::label).collect())).collect();
        assert_eq!(
            labels,
            [
                ("a.py".to_owned(), vec![]),
                ("b.py".to_owned(), vec!["b.py:header".to_owned(), "b.py:impl".to_owned(), "b.py:test".to_owned()]),
                ("c.py".to_owned(), vec![]),
            ]
        );
        // The longest timeout a file needed is where its parts start.
        assert!(first[1].1.iter().all(|p| p.round == 3));
        assert_eq!(first[2].0.round, 1);
        assert!(from_recorded(&[], &files(&["a.py"]), Kind::Code).is_none());
        // Read-only kinds keep the timeout their parts needed.
        let explore = [Part { file: Some("a.py".into()), piece: None, round: 3 }];
        let first = from_recorded(&explore, &files(&["a.py", "b.py"]), Kind::Explore).unwrap();
        assert_eq!(first.iter().map(|(p, _)| p.round).collect::<Vec<_>>(), [3, 1]);
        let whole = [Part { round: 2, ..Part::whole() }];
        let first = from_recorded(&whole, &files(&["a.py"]), Kind::Review).unwrap();
        assert_eq!(first, [(Part { round: 2, ..Part::whole() }, vec![])]);
    }

    #[test]
    fn part_section_goes_after_the_goal() {
        let prompt = "# Goal\nDo it.\n\n# Context\n- a\n";
        let out = with_section(prompt, "only a.py\n");
        assert_eq!(out, "# Goal\nDo it.\n\n# Part\nonly a.py\n\n# Context\n- a\n");
        assert_eq!(with_section("custom", "x\n"), "custom\n\n# Part\nx\n\n");
    }

    #[test]
    fn sections_say_what_to_do_and_not_to_do() {
        let parts = children(&Part::whole(), &files(&["a.py", "b.py"]), Kind::Code);
        let s = section(&parts[0], "two", Kind::Code, 0, &parts);
        assert!(s.contains("part 1 of 2 of task `two`"), "{s}");
        assert!(s.contains("everything the goal asks of `a.py`"), "{s}");
        assert!(s.contains("`b.py`"), "{s}");
        let pieces = children(&parts[0], &files(&["a.py", "b.py"]), Kind::Code);
        let h = section(&pieces[0], "two", Kind::Code, 0, &pieces);
        assert!(h.contains("only the interface of `a.py`") && h.contains("Do not: write the implementation"), "{h}");
        let i = section(&pieces[1], "two", Kind::Code, 1, &pieces);
        assert!(i.contains("implement the interface") && i.contains("change the signatures"), "{i}");
        let t = section(&pieces[2], "two", Kind::Code, 2, &pieces);
        assert!(t.contains("write the tests of `a.py`"), "{t}");
    }

    #[test]
    fn the_tree_reports_what_was_split_into_what() {
        let base = Duration::from_secs(10);
        let two = files(&["a.py", "b.py"]);
        let first: Vec<(Part, Vec<Part>)> =
            children(&Part::whole(), &two, Kind::Code).into_iter().map(|p| (p, Vec::new())).collect();
        let mut tree = Tree::new(first, "two", base);
        assert_eq!(tree.queue.len(), 2);
        let replaced = children(&tree.nodes[tree.queue[1]].part, &two, Kind::Code);
        tree.split(1, replaced, "two", base);
        assert_eq!(
            tree.leaves().iter().map(Part::label).collect::<Vec<_>>(),
            ["a.py", "b.py:header", "b.py:impl", "b.py:test"]
        );
        let reports = tree.reports();
        assert_eq!(reports.len(), 2);
        assert_eq!(reports[1].name, "two/b.py");
        assert_eq!(reports[1].subtasks.len(), 3);
        assert_eq!(reports[1].subtasks[1].name, "two/b.py:impl");
        assert_eq!(reports[1].subtasks[1].timeout_ms, 22_500);
    }
}
