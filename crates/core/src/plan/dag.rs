//! The dependency graph: unknown names and cycles are diagnostics; the run
//! order is a stable topological order, ties broken by task name.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::spec::diag::{SpecDiagnostic, did_you_mean};
use crate::spec::{Diagnostics, Task};

/// Indices of `tasks` in run order, or diagnostics.
///
/// `partial` says some task file could not be parsed at all: a dependency
/// on an unknown name may then be a task of that file, so it is not
/// reported.
pub fn order(tasks: &[Task], partial: bool, diags: &mut Diagnostics) -> Option<Vec<usize>> {
    let index: HashMap<&str, usize> = tasks.iter().enumerate().map(|(i, t)| (t.name.as_str(), i)).collect();
    let mut ok = true;
    let mut deps: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); tasks.len()];
    for (i, t) in tasks.iter().enumerate() {
        for d in &t.depends_on {
            match index.get(d.value.as_str()) {
                Some(&j) if j == i => {
                    diags.push(
                        SpecDiagnostic::error("self-dependency", format!("task `{}` depends on itself", t.name))
                            .at(&t.source, d.span, "itself")
                            .help("remove this name from `depends-on`"),
                    );
                    ok = false;
                }
                Some(&j) => {
                    deps[i].insert(j);
                }
                None => {
                    ok = false;
                    if partial {
                        continue;
                    }
                    let hint = match did_you_mean(&d.value, tasks.iter().map(|t| t.name.as_str())) {
                        Some(s) => format!("did you mean `{s}`?"),
                        None => {
                            "`depends-on` names tasks of this run; check the name, or pass the folder that defines it"
                                .to_owned()
                        }
                    };
                    diags.push(
                        SpecDiagnostic::error(
                            "unknown-dependency",
                            format!("task `{}` depends on unknown task `{}`", t.name, d.value),
                        )
                        .at(&t.source, d.span, "no such task")
                        .help(hint),
                    );
                }
            }
        }
    }
    // Cycles among the known dependencies are found (and reported) even
    // when some names are unknown: every error at once.
    // Kahn's algorithm; the ready set is ordered by name.
    let mut indegree: Vec<usize> = deps.iter().map(BTreeSet::len).collect();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); tasks.len()];
    for (i, ds) in deps.iter().enumerate() {
        for &d in ds {
            dependents[d].push(i);
        }
    }
    let mut ready: BTreeMap<&str, usize> =
        (0..tasks.len()).filter(|&i| indegree[i] == 0).map(|i| (tasks[i].name.as_str(), i)).collect();
    let mut out = Vec::with_capacity(tasks.len());
    while let Some((_, i)) = ready.pop_first() {
        out.push(i);
        for &j in &dependents[i] {
            indegree[j] -= 1;
            if indegree[j] == 0 {
                ready.insert(tasks[j].name.as_str(), j);
            }
        }
    }
    if out.len() == tasks.len() {
        return ok.then_some(out);
    }
    report_cycles(tasks, &deps, &indegree, diags);
    None
}

/// Names each cycle among the tasks left over by Kahn's algorithm once,
/// starting from its smallest name: `a -> b -> a`.
fn report_cycles(tasks: &[Task], deps: &[BTreeSet<usize>], indegree: &[usize], diags: &mut Diagnostics) {
    let mut left: Vec<usize> = (0..tasks.len()).filter(|&i| indegree[i] > 0).collect();
    left.sort_by(|a, b| tasks[*a].name.cmp(&tasks[*b].name));
    let mut reported: BTreeSet<usize> = BTreeSet::new();
    for &start in &left {
        if reported.contains(&start) {
            continue;
        }
        // Follow dependencies (smallest name first) until a task repeats.
        let mut path = vec![start];
        let mut pos: HashMap<usize, usize> = HashMap::from([(start, 0)]);
        let mut cur = start;
        let cycle = loop {
            let next = deps[cur]
                .iter()
                .copied()
                .filter(|d| indegree[*d] > 0)
                .min_by(|a, b| tasks[*a].name.cmp(&tasks[*b].name));
            let Some(next) = next else { break None };
            if let Some(&p) = pos.get(&next) {
                break Some(path[p..].to_vec());
            }
            pos.insert(next, path.len());
            path.push(next);
            cur = next;
        };
        let Some(mut cycle) = cycle else { continue };
        if cycle.iter().any(|i| reported.contains(i)) {
            continue;
        }
        // Rotate so the smallest name comes first.
        let min = (0..cycle.len()).min_by(|a, b| tasks[cycle[*a]].name.cmp(&tasks[cycle[*b]].name)).unwrap_or(0);
        cycle.rotate_left(min);
        reported.extend(cycle.iter().copied());
        let names: Vec<&str> = cycle.iter().chain(cycle.first()).map(|&i| tasks[i].name.as_str()).collect();
        // Every edge of the cycle: labelled where it is in the first task's
        // file, listed with its location in the help otherwise.
        let first = &tasks[cycle[0]];
        let mut d = SpecDiagnostic::error("dependency-cycle", format!("dependency cycle: {}", names.join(" -> ")));
        let mut elsewhere = Vec::new();
        for (k, &i) in cycle.iter().enumerate() {
            let t = &tasks[i];
            let next = names[k + 1];
            let span = t.depends_on.iter().find(|d| d.value == next).map_or(t.name_span, |d| d.span);
            let label = format!("`{}` depends on `{next}`", t.name);
            if k == 0 {
                d = d.at(&t.source, span, label);
            } else if std::sync::Arc::ptr_eq(&t.source, &first.source) {
                d = d.also(span, label);
            } else {
                let (line, col) = t.source.line_col(span.offset());
                elsewhere.push(format!("{label} at {}:{line}:{col}", t.source.name));
            }
        }
        let mut help =
            "tasks run after what they depend on, so a cycle can never start: remove one `depends-on` of it".to_owned();
        if !elsewhere.is_empty() {
            help = format!("{}; {help}", elsewhere.join("; "));
        }
        diags.push(d.help(help));
    }
}
