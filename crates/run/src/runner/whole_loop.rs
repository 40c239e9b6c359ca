//! A task from setup to integration: the iterations of the whole task in
//! one prompt (agent → judge → acceptance, with feedback), until it passes;
//! a killed or timed-out agent hands the task over to the split loop.

use crate::split;
use cassist_core::changes::ChangeSet;
use cassist_core::event::TaskState;
use cassist_core::part::Part;
use cassist_core::spec::Kind;

use super::acceptance::{acceptance, acceptance_failed};
use super::attempt::{self, Oversized, Request, Step};
use super::integrate::{Origin, integrate_and_build};
use super::judge::{Judged, judge};
use super::split_loop::{Parts, run_split};
use super::{Done, Failure, TaskContext, setup};

/// What the agent is told when it stopped without a change or a report.
const RESUME: &str = "You stopped without changing any file and without a report. Continue the task: make the change, or report why it cannot be done.";
/// The same, when the agent wrote only files `.gitignore` ignores (after
/// naming them).
const RESUME_IGNORED: &str = "Continue the task: write the files it asks for where .gitignore does not ignore them (or the ones its scope names), or report why it cannot be done.";

/// Runs the task in its workspace, up to its integrated change. `summaries`
/// are the findings of its explore/review dependencies; `recorded_split`
/// the parts it last passed with, if it was split.
pub fn run(
    task: &mut TaskContext<'_>,
    summaries: &[(String, String)],
    recorded_split: &[Part],
) -> Result<Done, Failure> {
    setup::setup(task)?;
    setup::place_instructions(task);
    let plan = &task.runner().plan;
    let base_prompt = plan.render_prompt(task.task(), summaries);
    // What a split makes parts of, and the split this task needed last
    // time, if any: it starts split instead of being killed again.
    let files = split::files(task.task(), &plan.project.root);
    let (changes, split) = match recorded_split_tree(task, recorded_split, &files) {
        Some(tree) => run_split(task, Parts::new(tree, &files), summaries)?,
        None => run_whole(task, &base_prompt, &files, summaries)?,
    };
    let recorded = integrate_and_build(task, &changes, Origin::Passed { split: &split })?;
    Ok(Done { state: TaskState::Passed, changes, split, recorded })
}

/// The split this task starts with, when it needed one last time.
fn recorded_split_tree(task: &TaskContext<'_>, recorded: &[Part], files: &[String]) -> Option<split::Tree> {
    let t = task.task();
    let first = split::from_recorded(recorded, files, t.task.kind)?;
    let tree = split::Tree::new(first, task.name(), t.timeout);
    task.note(format!("this task needed splitting last time: it starts split into {} part(s)", tree.queue.len()));
    Some(tree)
}

/// The iterations of the whole task; the change that passed acceptance,
/// and the parts it passed with if it had to be split.
fn run_whole(
    task: &mut TaskContext<'_>,
    base_prompt: &str,
    files: &[String],
    summaries: &[(String, String)],
) -> Result<(ChangeSet, Vec<Part>), Failure> {
    let t = task.task();
    let mut resumed = false;
    loop {
        task.check_cancel()?;
        let attempt = task.facts().attempts + 1;
        let prompt = with_feedback(base_prompt, task.feedback());
        let whole = Part::whole();
        let req = Request { prompt: &prompt, part: &whole, part_attempt: attempt, timeout: t.timeout };
        let ran = match attempt::attempt(task, &req)? {
            Step::Again => continue,
            Step::Oversized(o) => {
                // Not retried as is: split.
                let parts = split_whole(task, &o, attempt, files);
                return run_split(task, parts, summaries);
            }
            Step::Ran(r) => r,
        };
        task.set_summary(ran.summary.clone());
        let changes = match judge(task, attempt, &ran)? {
            Judged::Fine(changes) => changes,
            Judged::Problem { reason, feedback, .. } => {
                task.next_iteration(|| Failure::failed(reason).with_tail(ran.finished.tail))?;
                task.set_feedback(feedback);
                continue;
            }
        };
        if changes.is_empty() && !ran.reported && t.task.kind == Kind::Code && !resumed {
            // The goal may be met already: acceptance commands that pass on
            // the unchanged tree spare a second paid call.
            let unmet = match goal_already_met(task, attempt)? {
                Met::Yes => return Ok((changes, Vec::new())),
                Met::No(why) => Some(why),
                Met::Unknown => None,
            };
            resumed = true;
            let mut feedback = match task.workspace().ignored() {
                [] => RESUME.to_owned(),
                // Paths are the agent's choice: redacted.
                ignored => task.runner().redactor.redact(&format!(
                    "The files you wrote are ignored by .gitignore, so they are not part of the change: {}. {RESUME_IGNORED}",
                    super::integrate::some_paths(ignored)
                )),
            };
            if let Some(unmet) = unmet {
                feedback.push_str("\n\n");
                feedback.push_str(&unmet);
            }
            task.set_feedback(feedback);
            task.note("the agent changed nothing; resuming it once");
            continue;
        }
        // Acceptance, then the project tests.
        if let Some(f) = acceptance(task, attempt)? {
            let feedback = acceptance_failed(task, &f)?;
            task.set_feedback(feedback);
            continue;
        }
        return Ok((changes, Vec::new()));
    }
}

/// Whether an agent that changed nothing and reported nothing left the goal
/// met: the task's acceptance commands (then the project tests) pass on the
/// unchanged tree. Unknown without acceptance commands, or when the agent
/// wrote files .gitignore ignores (the tree it leaves is not the unchanged
/// one); `No` carries the failed command's feedback.
fn goal_already_met(task: &mut TaskContext<'_>, attempt: u32) -> Result<Met, Failure> {
    if task.task().task.acceptance.is_empty() || !task.workspace().ignored().is_empty() {
        return Ok(Met::Unknown);
    }
    Ok(match acceptance(task, attempt)? {
        None => {
            task.note("the agent changed nothing and the acceptance commands pass: the goal is met");
            Met::Yes
        }
        Some(f) => Met::No(crate::accept::feedback(&f, super::FEEDBACK_LIMIT)),
    })
}

/// The whole task's agent was killed or timed out: its first parts.
fn split_whole<'f>(task: &TaskContext<'_>, o: &Oversized, attempt: u32, files: &'f [String]) -> Parts<'f> {
    let t = task.task();
    let first: Vec<(Part, Vec<Part>)> =
        crate::split::children(&Part::whole(), files, t.task.kind).into_iter().map(|p| (p, Vec::new())).collect();
    let next = first[0].0.timeout(t.timeout);
    let tree = split::Tree::new(first, task.name(), t.timeout);
    task.phase(
        "split",
        attempt,
        format!(
            "agent {} ({}): {} part(s), round 1 of {}, timeout {}",
            o.what,
            o.detail,
            tree.queue.len(),
            split::MAX_ROUNDS,
            cassist_core::text::duration(next)
        ),
    );
    Parts::new(tree, files)
}

/// Whether a task's goal is met without a change.
enum Met {
    Yes,
    /// No: the failed acceptance command's feedback.
    No(String),
    Unknown,
}

/// The prompt with the `# Review feedback` section, if there is feedback.
pub fn with_feedback(prompt: &str, feedback: Option<&str>) -> String {
    let mut prompt = prompt.to_owned();
    if let Some(f) = feedback {
        prompt.push_str("\n# Review feedback\n");
        prompt.push_str(f);
        if !prompt.ends_with('\n') {
            prompt.push('\n');
        }
    }
    prompt
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feedback_goes_last_and_ends_the_prompt_with_a_newline() {
        assert_eq!(with_feedback("# Goal\nx\n", None), "# Goal\nx\n");
        assert_eq!(with_feedback("# Goal\nx\n", Some("fix y")), "# Goal\nx\n\n# Review feedback\nfix y\n");
        assert_eq!(with_feedback("p", Some("a\n")), "p\n# Review feedback\na\n");
    }
}
