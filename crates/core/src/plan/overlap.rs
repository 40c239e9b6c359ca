//! Which tasks may change the same files, and so must not run at the same
//! time: two tasks overlap when one scope pattern's literal prefix (its
//! folders and name up to the first component holding a wildcard) is an
//! ancestor of, or equal to, one of the other's. A `code` task without a
//! scope overlaps every task that may change files; `explore`, `review`
//! and `test` tasks, and tasks whose sandbox is `read-only`, change no file
//! and overlap nothing.
//!
//! Overlapping tasks run one after the other in run order (which breaks
//! ties by name): the later one starts from a view that holds the earlier
//! one's change, so two tasks editing one file both land, and the result
//! is the same whatever the number of jobs. [`waits`] says, per task,
//! which earlier tasks it waits for, without comparing every pair.

use std::collections::BTreeMap;
use std::ops::Bound;

use super::PlannedTask;
use crate::paths::{is_literal, normalize};
use crate::spec::diag::SpecDiagnostic;
use crate::spec::{Kind, SandboxLevel};

/// What a task may change, as far as ordering goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Footprint {
    /// No file: an `explore`, `review` or `test` task, or a read-only
    /// sandbox.
    Nothing,
    /// Any file: a `code` task without a scope.
    Unscoped,
    /// The files below the literal prefixes of its scope patterns (`""`:
    /// the whole project, as `**/x.rs` may match anywhere).
    Under(Vec<String>),
}

impl Footprint {
    /// The footprint of a task of `kind` with `sandbox` (its effective
    /// level) and `scope` (its patterns as written).
    pub fn new(kind: Kind, sandbox: SandboxLevel, scope: &[String]) -> Footprint {
        if kind != Kind::Code || sandbox == SandboxLevel::ReadOnly {
            Footprint::Nothing
        } else if scope.is_empty() {
            Footprint::Unscoped
        } else {
            let mut prefixes: Vec<String> = scope.iter().map(|p| literal_prefix(p)).collect();
            prefixes.sort();
            prefixes.dedup();
            Footprint::Under(prefixes)
        }
    }

    /// The footprint of a planned task.
    pub fn of(t: &PlannedTask) -> Footprint {
        Footprint::new(t.task.kind, t.sandbox, &t.key.spec.scope)
    }

    /// Whether it may change files.
    pub fn writes(&self) -> bool {
        !matches!(self, Footprint::Nothing)
    }

    /// Whether it overlaps every task that may change files.
    fn everything(&self) -> bool {
        match self {
            Footprint::Nothing => false,
            Footprint::Unscoped => true,
            Footprint::Under(prefixes) => prefixes.iter().any(String::is_empty),
        }
    }
}

/// The components of `pattern` (normalized) up to the first one that holds
/// a wildcard, joined: `src/a/**` → `src/a`, `src/a.rs` → `src/a.rs`,
/// `**/x.rs` → `` (nothing: it may match anywhere).
pub fn literal_prefix(pattern: &str) -> String {
    let pattern = normalize(pattern);
    let literal: Vec<&str> = pattern.split('/').take_while(|c| is_literal(c)).collect();
    literal.join("/")
}

/// Whether one of two literal prefixes is an ancestor of, or equal to, the
/// other, component by component (`src` and `src/a.rs`, not `src` and
/// `srcs`).
fn nested(a: &str, b: &str) -> bool {
    let below = |long: &str, short: &str| long.strip_prefix(short).is_some_and(|rest| rest.starts_with('/'));
    a.is_empty() || b.is_empty() || a == b || below(a, b) || below(b, a)
}

/// Whether two tasks may change the same file.
pub fn overlap(a: &Footprint, b: &Footprint) -> bool {
    match (a, b) {
        (Footprint::Nothing, _) | (_, Footprint::Nothing) => false,
        (Footprint::Unscoped, _) | (_, Footprint::Unscoped) => true,
        (Footprint::Under(a), Footprint::Under(b)) => a.iter().any(|p| b.iter().any(|q| nested(p, q))),
    }
}

/// Per task (in run order), the earlier tasks it must wait for: every
/// earlier task it overlaps ends before it starts, either directly or
/// because a task it waits for waited for it. A waiter must count a task
/// as ended only once what that task waits for has ended too (a task
/// settled without running, skipped say, may end before them).
///
/// Tasks that depend on one another are ordered anyway; the edges
/// between them are kept (they cost nothing). Only overlapping pairs are
/// ever joined, and the cost is about the number of edges: the tasks
/// are indexed by literal prefix, and a task waits only for the last
/// earlier task holding one of its prefixes or an ancestor of it and for
/// the overlapping ones after that (that task waited for those before),
/// and for the last task that overlaps everything (which waited for all
/// before it).
pub fn waits(footprints: &[Footprint]) -> Vec<Vec<usize>> {
    let mut out = vec![Vec::new(); footprints.len()];
    // The last task that overlaps every writer, and the writers since.
    let mut barrier: Option<usize> = None;
    let mut since: Vec<usize> = Vec::new();
    // The writers since the barrier, by literal prefix, in run order.
    let mut index: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, f) in footprints.iter().enumerate() {
        let mut w: Vec<usize> = match f {
            Footprint::Nothing => continue,
            _ => barrier.into_iter().collect(),
        };
        match f {
            Footprint::Under(prefixes) if !f.everything() => {
                for p in prefixes {
                    w.extend(overlapping(&index, p));
                }
                for p in prefixes {
                    index.entry(p.as_str()).or_default().push(i);
                }
                since.push(i);
            }
            _ => {
                w.append(&mut since);
                index.clear();
                barrier = Some(i);
            }
        }
        w.sort_unstable();
        w.dedup();
        out[i] = w;
    }
    out
}

/// The tasks of `index` a task holding prefix `p` must wait for: those
/// whose prefix is an ancestor of `p`, `p` itself or below it, from the
/// last one whose prefix is `p` or an ancestor of it on (that one
/// overlaps all of them, so it waited for those before it).
fn overlapping<'a>(index: &'a BTreeMap<&str, Vec<usize>>, p: &'a str) -> impl Iterator<Item = usize> + 'a {
    // `p`'s ancestors and `p`: each prefix of it that ends a component.
    let ancestors: Vec<&Vec<usize>> =
        p.match_indices('/').map(|(at, _)| &p[..at]).chain(std::iter::once(p)).filter_map(|a| index.get(a)).collect();
    let from = ancestors.iter().filter_map(|l| l.last()).copied().max().unwrap_or(0);
    // Below `p`: the keys `p/...`, which sort between `p/` and `p0`.
    let (lo, hi) = (format!("{p}/"), format!("{p}0"));
    let below = index.range::<str, _>((Bound::Included(lo.as_str()), Bound::Excluded(hi.as_str()))).map(|(_, l)| l);
    let lists: Vec<&Vec<usize>> = ancestors.into_iter().chain(below).collect();
    lists.into_iter().flat_map(move |l| l[l.partition_point(|&k| k < from)..].iter().copied())
}

/// How many code tasks without a scope get a warning of their own; the
/// rest are named in one more (a plan of hundreds of them would otherwise
/// print pages).
const UNSCOPED_SHOWN: usize = 3;

/// A warning per code task without a scope (the first few; one more
/// names the rest), when the plan has more than one task that may change
/// files: such a task overlaps every other one, so it runs alone, after
/// every earlier one.
pub fn unscoped_warnings(tasks: &[PlannedTask]) -> Vec<SpecDiagnostic> {
    let footprints: Vec<Footprint> = tasks.iter().map(Footprint::of).collect();
    if footprints.iter().filter(|f| f.writes()).count() < 2 {
        return Vec::new();
    }
    let unscoped: Vec<&PlannedTask> =
        tasks.iter().zip(&footprints).filter(|(_, f)| **f == Footprint::Unscoped).map(|(t, _)| t).collect();
    let mut out: Vec<SpecDiagnostic> = unscoped
        .iter()
        .take(UNSCOPED_SHOWN)
        .map(|t| {
            SpecDiagnostic::warning(
                "unscoped-task",
                format!(
                    "task `{}` has no scope: it may change any file, so it runs alone, after every code task before it and before every one after it",
                    t.task.name
                ),
            )
            .at(&t.task.source, t.task.name_span, "no scope")
            .help("add a `scope` naming the files it may change, so that it can run beside other tasks")
        })
        .collect();
    if unscoped.len() > UNSCOPED_SHOWN {
        let rest: Vec<&str> = unscoped[UNSCOPED_SHOWN..].iter().map(|t| t.task.name.as_str()).collect();
        let mut names = rest.iter().take(10).map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
        if rest.len() > 10 {
            names.push_str(&format!(" (and {} more)", rest.len() - 10));
        }
        out.push(
            SpecDiagnostic::warning(
                "unscoped-task",
                format!("{} more code tasks have no scope and run alone too: {names}", rest.len()),
            )
            .help("add a `scope` naming the files each may change, so that they can run beside other tasks"),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn under(patterns: &[&str]) -> Footprint {
        let scope: Vec<String> = patterns.iter().map(|p| (*p).to_owned()).collect();
        Footprint::new(Kind::Code, SandboxLevel::WorkspaceWrite, &scope)
    }

    #[test]
    fn the_literal_prefix_stops_at_the_first_wildcard_component() {
        assert_eq!(literal_prefix("src/a.rs"), "src/a.rs");
        assert_eq!(literal_prefix("src/**"), "src");
        assert_eq!(literal_prefix("src/a/*.rs"), "src/a");
        assert_eq!(literal_prefix("src/{a,b}.rs"), "src");
        assert_eq!(literal_prefix("src/a?/b.rs"), "src");
        assert_eq!(literal_prefix("**/x.rs"), "");
        assert_eq!(literal_prefix("**"), "");
        assert_eq!(literal_prefix("./docs//guide/"), "docs/guide");
    }

    #[test]
    fn scopes_overlap_when_one_prefix_holds_the_other() {
        assert!(overlap(&under(&["src/**"]), &under(&["src/a.rs"])));
        assert!(overlap(&under(&["src/a.rs"]), &under(&["src/**"])));
        assert!(overlap(&under(&["notes.txt"]), &under(&["notes.txt"])));
        assert!(overlap(&under(&["src"]), &under(&["src/a/b.rs"])));
        assert!(!overlap(&under(&["src/a/**"]), &under(&["src/b.rs"])));
        assert!(!overlap(&under(&["src/a.rs"]), &under(&["src/a.rs.bak"])));
        assert!(!overlap(&under(&["src/**"]), &under(&["srcs/a.rs"])));
        // Any pair of patterns will do.
        assert!(overlap(&under(&["docs/**", "src/a.rs"]), &under(&["tests/**", "src/*.rs"])));
        assert!(!overlap(&under(&["docs/**", "src/a.rs"]), &under(&["tests/**", "src/b/*.rs"])));
        // An empty prefix may match anywhere.
        assert!(overlap(&under(&["**/x.rs"]), &under(&["src/a.rs"])));
        assert!(overlap(&under(&["tests/a.py"]), &under(&["*.md"])));
    }

    #[test]
    fn a_code_task_without_a_scope_overlaps_every_writer_and_nothing_else() {
        let unscoped = under(&[]);
        assert_eq!(unscoped, Footprint::Unscoped);
        assert!(overlap(&unscoped, &under(&["src/a.rs"])));
        assert!(overlap(&under(&["src/a.rs"]), &unscoped));
        assert!(overlap(&unscoped, &Footprint::Unscoped));
        for kind in [Kind::Explore, Kind::Review, Kind::Test] {
            let f = Footprint::new(kind, SandboxLevel::WorkspaceWrite, &[]);
            assert_eq!(f, Footprint::Nothing, "{kind}");
            assert!(!overlap(&unscoped, &f) && !overlap(&f, &unscoped) && !overlap(&f, &f), "{kind}");
        }
        let read_only = Footprint::new(Kind::Code, SandboxLevel::ReadOnly, &["src/**".to_owned()]);
        assert_eq!(read_only, Footprint::Nothing);
        assert!(!overlap(&read_only, &under(&["src/a.rs"])) && !overlap(&unscoped, &read_only));
    }

    #[test]
    fn waits_names_the_earlier_overlapping_tasks() {
        let fs = [
            under(&["notes.txt"]),                                      // 0
            Footprint::new(Kind::Explore, SandboxLevel::ReadOnly, &[]), // 1
            under(&["notes.txt"]),                                      // 2
            under(&["src/a/**"]),                                       // 3
            under(&["src/b.rs"]),                                       // 4
            under(&["src/**"]),                                         // 5
            under(&["src/a/x.rs"]),                                     // 6
        ];
        let w = waits(&fs);
        assert_eq!(w, [vec![], vec![], vec![0], vec![], vec![], vec![3, 4], vec![5]]);
        // `src/a/**` after them: `src/**` waited for the first `src/a/**`.
        let mut fs = fs.to_vec();
        fs.push(under(&["src/a/**"]));
        assert_eq!(waits(&fs)[7], [5, 6]);
        // An unscoped task waits for every writer before it, and every
        // writer after it waits for it (and for nothing before it).
        let fs = [under(&["a"]), under(&["b"]), under(&[]), under(&["a"]), under(&["c"]), under(&["**/z"])];
        assert_eq!(waits(&fs), [vec![], vec![], vec![0, 1], vec![2], vec![2], vec![2, 3, 4]]);
    }

    #[test]
    fn a_thousand_disjoint_tasks_wait_for_nothing() {
        let fs: Vec<Footprint> = (0..1000).map(|i| under(&[&format!("packages/p{i:04}/out.txt")])).collect();
        assert!(waits(&fs).iter().all(Vec::is_empty));
        // A thousand tasks on one file wait each for the one before.
        let fs: Vec<Footprint> = (0..1000).map(|_| under(&["src/**"])).collect();
        let w = waits(&fs);
        assert!(w.iter().enumerate().skip(1).all(|(i, w)| *w == [i - 1]), "{w:?}");
    }

    fn footprint() -> impl Strategy<Value = Footprint> {
        let pattern = prop::sample::select(vec![
            "a", "a/x", "a/x/1", "a/y", "a/*", "a/x/**", "ab", "ab/x", "b/**", "b/x", "**/x", "*.md", "a/{x,y}",
        ]);
        prop_oneof![
            1 => Just(Footprint::Nothing),
            1 => Just(Footprint::Unscoped),
            8 => prop::collection::vec(pattern, 1..3).prop_map(|ps| under(&ps)),
        ]
    }

    proptest! {
        /// Every earlier overlapping task is reached through the waits,
        /// and only overlapping, earlier tasks are waited for.
        #[test]
        fn the_waits_order_every_overlapping_pair(fs in prop::collection::vec(footprint(), 0..40)) {
            let w = waits(&fs);
            for (i, ws) in w.iter().enumerate() {
                for &j in ws {
                    prop_assert!(j < i && overlap(&fs[i], &fs[j]), "{i} waits for {j}: {fs:?}");
                }
                // What `i` reaches through the waits.
                let mut reached = vec![false; fs.len()];
                let mut todo = ws.clone();
                while let Some(j) = todo.pop() {
                    if !std::mem::replace(&mut reached[j], true) {
                        todo.extend(&w[j]);
                    }
                }
                for j in 0..i {
                    prop_assert!(!overlap(&fs[i], &fs[j]) || reached[j], "{i} does not wait for {j}: {fs:?} {w:?}");
                }
            }
        }
    }
}
