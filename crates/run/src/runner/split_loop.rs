//! The parts of a split task, one after another in the task's workspace:
//! an agent killed or timed out is not retried as it is, its task is split
//! into parts with smaller prompts and longer timeouts. Each part's agent
//! run is judged on its own; a part killed or timed out again is split
//! further, for at most [`split::MAX_ROUNDS`] rounds; once every part
//! passed, the whole task's acceptance decides, and a failure sends every
//! part round again. `crate::split` says what the parts are; this loop
//! runs them and keeps their reports.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::split::{self, Tree};
use cassist_core::changes::ChangeSet;
use cassist_core::event::{PartState, SubtaskReport, TaskState};
use cassist_core::part::Part;

use super::acceptance::{acceptance, acceptance_failed};
use super::attempt::{Oversized, Ran, Request, Step, attempt};
use super::judge::{Judged, judge};
use super::whole_loop::with_feedback;
use super::{Failure, TaskContext};

/// Each changed path with a hash of what it holds now (or of its removal).
type Fingerprint = BTreeMap<String, blake3::Hash>;

/// A split task's parts while they run.
pub struct Parts<'f> {
    tree: Tree,
    /// What the task is split into, file by file.
    files: &'f [String],
    /// The position in the queue of the part that runs next.
    pos: usize,
    /// Feedback for the part at `pos` only.
    feedback: Option<String>,
}

/// The part that runs now.
struct Current {
    /// Its node in the tree.
    idx: usize,
    part: Part,
    /// The task's attempt number of this run.
    attempt: u32,
    /// The workspace's change before it ran.
    before: Fingerprint,
}

/// Runs the parts, then acceptance, until the task passes: the change, and
/// the parts it passed with. The report's `subtasks` say what happened to
/// each part, however the loop ends.
pub fn run_split(
    task: &mut TaskContext<'_>,
    mut parts: Parts<'_>,
    summaries: &[(String, String)],
) -> Result<(ChangeSet, Vec<Part>), Failure> {
    let outcome = split_iterations(task, &mut parts, summaries);
    task.set_subtasks(parts.close(outcome.as_ref().err()));
    outcome.map(|changes| (changes, parts.tree.leaves()))
}

fn split_iterations(
    task: &mut TaskContext<'_>,
    parts: &mut Parts<'_>,
    summaries: &[(String, String)],
) -> Result<ChangeSet, Failure> {
    loop {
        task.check_cancel()?;
        if parts.pos < parts.tree.queue.len() {
            run_part(task, parts, summaries)?;
            continue;
        }
        // Every part is done: the whole task's acceptance.
        task.set_summary(parts.summary());
        let changes = task.read_changes()?;
        let attempt = task.facts().attempts;
        match acceptance(task, attempt)? {
            None => return Ok(changes),
            Some(f) => {
                // Every part again, each told what failed.
                let feedback = acceptance_failed(task, &f)?;
                task.set_feedback(feedback);
                parts.feedback = None;
                parts.pos = 0;
            }
        }
    }
}

/// One agent run of the part at the current position.
fn run_part(task: &mut TaskContext<'_>, parts: &mut Parts<'_>, summaries: &[(String, String)]) -> Result<(), Failure> {
    let idx = parts.tree.queue[parts.pos];
    let part = parts.tree.nodes[idx].part.clone();
    let prompt = part_prompt(task, parts, &part, summaries);
    let before = task.workspace_mut().changes().map(|c| fingerprint(&c)).unwrap_or_default();
    let req = Request {
        prompt: &prompt,
        part: &part,
        part_attempt: parts.tree.nodes[idx].next_attempt(),
        timeout: part.timeout(task.task().timeout),
    };
    let current = Current { idx, part: part.clone(), attempt: task.facts().attempts + 1, before };
    parts.tree.current = Some(idx);
    let started = Instant::now();
    let step = attempt(task, &req);
    parts.tree.nodes[idx].report.duration_ms += started.elapsed().as_millis() as u64;
    match step? {
        Step::Again => Ok(()),
        Step::Oversized(o) => split_part(task, parts, &current, o),
        Step::Ran(ran) => part_ran(task, parts, current, ran),
    }
}

/// The task's prompt for one part: its own context files, the `# Part`
/// section, and the feedback for it (or for the whole task).
fn part_prompt(task: &TaskContext<'_>, parts: &Parts<'_>, part: &Part, summaries: &[(String, String)]) -> String {
    let t = task.task();
    let context = split::context_for(part, t, parts.files);
    let prompt = split::with_section(
        &task.runner().plan.render_prompt_with(t, summaries, &context),
        &split::section(part, task.name(), t.task.kind, parts.pos, &parts.tree.leaves()),
    );
    with_feedback(&prompt, parts.feedback.as_deref().or(task.feedback()))
}

/// A part killed or timed out: smaller parts (or the same with more time)
/// replace it, or, after the last round, the task is blocked.
fn split_part(task: &TaskContext<'_>, parts: &mut Parts<'_>, current: &Current, o: Oversized) -> Result<(), Failure> {
    let part = &current.part;
    if !parts.oversized(current.idx, &o) {
        return Err(Failure::blocked(format!(
            "split {} times; agent still {} on {} after {}",
            split::MAX_ROUNDS,
            o.what,
            part.describe(),
            cassist_core::text::duration(o.elapsed)
        ))
        .with_tail(o.tail)
        .keeping_workspace());
    }
    let t = task.task();
    let children = crate::split::children(part, parts.files, t.task.kind);
    let n = children.len();
    let next = children[0].timeout(t.timeout);
    parts.tree.split(parts.pos, children, task.name(), t.timeout);
    parts.feedback = None;
    task.phase(
        "split",
        current.attempt,
        format!(
            "{} {} ({}): {n} part(s), round {} of {}, timeout {}",
            part.describe(),
            o.what,
            o.detail,
            part.round + 1,
            split::MAX_ROUNDS,
            cassist_core::text::duration(next)
        ),
    );
    Ok(())
}

/// A part's agent ran to its end: judged; it passes, goes again with
/// feedback, or, in the last iteration, fails the task.
fn part_ran(task: &mut TaskContext<'_>, parts: &mut Parts<'_>, current: Current, ran: Ran) -> Result<(), Failure> {
    parts.ran(current.idx, ran.summary.clone(), ran.cost_usd);
    let (changes, problem) = match judge(task, current.attempt, &ran)? {
        Judged::Fine(changes) => (Some(changes), None),
        Judged::Problem { reason, feedback, changes } => (changes, Some((reason, feedback))),
    };
    if let Some(c) = &changes {
        parts.changed(current.idx, &current.before, &fingerprint(c));
    }
    let Some((reason, feedback)) = problem else {
        parts.passed(current.idx);
        return Ok(());
    };
    parts.failed(current.idx, &reason);
    let name = current.part.name(task.name());
    task.next_iteration(|| Failure::failed(format!("{name}: {reason}")).with_tail(ran.finished.tail))?;
    parts.feedback = Some(feedback);
    Ok(())
}

impl<'f> Parts<'f> {
    pub fn new(tree: Tree, files: &'f [String]) -> Parts<'f> {
        Parts { tree, files, pos: 0, feedback: None }
    }

    /// A run of part `idx` ended: counted, with its summary and cost.
    fn ran(&mut self, idx: usize, summary: Option<String>, cost_usd: Option<f64>) {
        let node = &mut self.tree.nodes[idx].report;
        node.attempts += 1;
        node.summary = summary;
        add_cost(node, cost_usd);
    }

    /// Part `idx` was killed or timed out: counted, and marked split;
    /// `false` (and blocked) when it was already in the last round.
    fn oversized(&mut self, idx: usize, o: &Oversized) -> bool {
        let round = self.tree.nodes[idx].part.round;
        let node = &mut self.tree.nodes[idx].report;
        node.attempts += 1;
        add_cost(node, o.cost_usd);
        node.state = PartState::Split;
        node.reason = Some(format!("agent {} after {}", o.what, cassist_core::text::duration(o.elapsed)));
        if round >= split::MAX_ROUNDS {
            node.state = PartState::Blocked;
            return false;
        }
        true
    }

    /// What part `idx` changed: the paths whose content differs between
    /// the workspace's change `before` it ran and `after`.
    fn changed(&mut self, idx: usize, before: &Fingerprint, after: &Fingerprint) {
        self.tree.nodes[idx].report.changed_files = changed_between(before, after);
    }

    fn failed(&mut self, idx: usize, reason: &str) {
        let node = &mut self.tree.nodes[idx].report;
        node.state = PartState::Failed;
        node.reason = Some(reason.to_owned());
    }

    /// Part `idx` passed: on to the next.
    fn passed(&mut self, idx: usize) {
        let node = &mut self.tree.nodes[idx].report;
        node.state = PartState::Passed;
        node.reason = None;
        self.tree.current = None;
        self.feedback = None;
        self.pos += 1;
    }

    /// The task's summary: each part's, labelled.
    fn summary(&self) -> Option<String> {
        let lines: Vec<String> = self
            .tree
            .queue
            .iter()
            .filter_map(|&i| {
                let n = &self.tree.nodes[i];
                n.report.summary.as_ref().map(|s| format!("{}: {}", n.part.label(), s.trim()))
            })
            .collect();
        Some(lines.join("\n")).filter(|s| !s.is_empty())
    }

    /// The report's `subtasks`, once the loop ended; a part that ended the
    /// task (a reported failure, Ctrl-C, --max-cost, an agent error) says
    /// so.
    fn close(&mut self, failure: Option<&Failure>) -> Vec<SubtaskReport> {
        if let Some(i) = self.tree.current.take()
            && let Some(f) = failure
        {
            let node = &mut self.tree.nodes[i].report;
            if !matches!(node.state, PartState::Blocked | PartState::Split) {
                node.state = if f.state == TaskState::Blocked { PartState::Blocked } else { PartState::Failed };
                node.reason = Some(f.reason.clone());
            }
        }
        self.tree.reports()
    }
}

fn add_cost(node: &mut SubtaskReport, cost_usd: Option<f64>) {
    if let Some(c) = cost_usd {
        node.cost_usd = Some(node.cost_usd.unwrap_or(0.0) + c);
    }
}

/// Each changed path with a hash of what it holds now (or of its removal),
/// to tell what one part of a split task changed.
fn fingerprint(changes: &ChangeSet) -> Fingerprint {
    changes
        .changes
        .iter()
        .map(|c| {
            let mut h = blake3::Hasher::new();
            h.update(format!("{:?}{:?}", c.kind, c.mode).as_bytes());
            if let Some(b) = &c.new {
                h.update(b);
            }
            (c.path.clone(), h.finalize())
        })
        .collect()
}

/// The paths changed between two fingerprints, sorted.
fn changed_between(before: &Fingerprint, after: &Fingerprint) -> Vec<String> {
    let mut changed: Vec<String> = after
        .iter()
        .filter(|(p, h)| before.get(*p) != Some(*h))
        .map(|(p, _)| p.clone())
        .chain(before.keys().filter(|p| !after.contains_key(*p)).cloned())
        .collect();
    changed.sort();
    changed
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use cassist_core::spec::Kind;

    const BASE: Duration = Duration::from_secs(10);

    fn files() -> Vec<String> {
        vec!["a.py".to_owned(), "b.py".to_owned()]
    }

    fn parts(files: &[String]) -> Parts<'_> {
        let first =
            crate::split::children(&Part::whole(), files, Kind::Code).into_iter().map(|p| (p, Vec::new())).collect();
        Parts::new(Tree::new(first, "two", BASE), files)
    }

    fn killed(cost_usd: Option<f64>) -> Oversized {
        Oversized {
            what: "killed",
            elapsed: Duration::from_millis(2500),
            detail: "killed by signal 9 (SIGKILL)".into(),
            tail: "Killed\n".into(),
            cost_usd,
        }
    }

    fn fp(entries: &[(&str, &str)]) -> Fingerprint {
        entries.iter().map(|(p, c)| ((*p).to_owned(), blake3::hash(c.as_bytes()))).collect()
    }

    #[test]
    fn a_part_that_passes_moves_the_loop_on() {
        let files = files();
        let mut p = parts(&files);
        let a = p.tree.queue[0];
        p.tree.current = Some(a);
        p.feedback = Some("fix a".into());
        p.ran(a, Some(" did a \n".into()), Some(0.5));
        p.ran(a, None, Some(0.25));
        p.changed(a, &fp(&[("x", "1"), ("gone", "g")]), &fp(&[("x", "2"), ("a.py", "new")]));
        p.passed(a);
        assert_eq!((p.pos, p.tree.current, p.feedback.as_deref()), (1, None, None));
        let node = &p.tree.nodes[a].report;
        assert_eq!((node.state, node.attempts, node.cost_usd), (PartState::Passed, 2, Some(0.75)));
        assert_eq!(node.changed_files, ["a.py", "gone", "x"]);
        assert_eq!(p.summary(), None);

        let b = p.tree.queue[1];
        p.ran(b, Some("did b".into()), None);
        p.tree.nodes[a].report.summary = Some(" did a \n".into());
        assert_eq!(p.summary().as_deref(), Some("a.py: did a\nb.py: did b"));
    }

    #[test]
    fn a_killed_part_is_split_until_the_last_round() {
        let files = files();
        let mut p = parts(&files);
        let b = p.tree.queue[1];
        assert!(p.oversized(b, &killed(Some(1.0))));
        let node = &p.tree.nodes[b].report;
        assert_eq!((node.state, node.attempts, node.cost_usd), (PartState::Split, 1, Some(1.0)));
        assert_eq!(node.reason.as_deref(), Some("agent killed after 2.5s"));

        let last =
            p.tree.split(1, vec![Part { round: split::MAX_ROUNDS, ..p.tree.nodes[b].part.clone() }], "two", BASE);
        assert!(!p.oversized(last[0], &killed(None)));
        assert_eq!(p.tree.nodes[last[0]].report.state, PartState::Blocked);
    }

    #[test]
    fn the_part_that_ended_the_task_says_why() {
        let files = files();
        let mut p = parts(&files);
        let (a, b) = (p.tree.queue[0], p.tree.queue[1]);
        p.failed(a, "rejected by review");
        p.tree.current = Some(a);
        let reports = p.close(Some(&Failure::failed("two/a.py: rejected by review")));
        assert_eq!(reports[0].state, PartState::Failed);
        assert_eq!(reports[0].reason.as_deref(), Some("two/a.py: rejected by review"));
        assert_eq!(reports[1].state, PartState::Skipped);

        // A part that was split or blocked keeps its own state and reason.
        p.tree.current = Some(b);
        assert!(p.oversized(b, &killed(None)));
        let reports = p.close(Some(&Failure::interrupted()));
        assert_eq!(
            (reports[1].state, reports[1].reason.as_deref()),
            (PartState::Split, Some("agent killed after 2.5s"))
        );
        // A blocked task blocks the part it was on; a task that passed
        // changes nothing.
        p.tree.current = Some(a);
        p.tree.nodes[a].report.state = PartState::Skipped;
        assert_eq!(p.close(Some(&Failure::blocked("no")))[0].state, PartState::Blocked);
        p.tree.current = Some(a);
        p.tree.nodes[a].report.state = PartState::Passed;
        assert_eq!(p.close(None)[0].state, PartState::Passed);
        assert_eq!(p.tree.current, None);
    }
}
