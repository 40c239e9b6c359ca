//! Tasks that run their agent again though the cache would spare them.
//!
//! A `stale` task (an explore or review task of which only files it reads
//! changed) keeps its recorded findings, until either it is named
//! explicitly, or a task depending on it directly is about to run its
//! agent for a reason of its own (state `run`): then it runs first, and its
//! fresh findings go into that task's prompt. A refreshed task runs its
//! agent too, so its own stale dependencies are refreshed in turn.
//!
//! `--force` runs tasks again whatever their state, but not what they
//! depend on: a task that runs only because it is forced refreshes none of
//! its stale dependencies.
//!
//! Both are decided before anything runs, on the tasks of a run (or of the
//! whole plan, for `cassist plan`), and the state of each task concerned
//! becomes `run`; [`PlannedTask::again`] says why.

use std::collections::HashMap;

use super::{PlannedTask, State};

/// Why a task runs its agent though its cache would spare it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Again {
    /// `--force`: its cache is ignored. The state it was planned in.
    Forced(State),
    /// A stale task named explicitly (a `--filter` or a run of named
    /// tasks): its findings are made afresh.
    Named,
    /// A stale task a task depending on it (named) runs its agent: its
    /// findings are made afresh first, for that task's prompt.
    Refresh(String),
}

impl Again {
    /// In words, for `cassist explain` and `cassist plan`.
    pub fn reason(&self) -> String {
        match self {
            Again::Forced(_) => "--force: its cache is ignored, its agent runs again".to_owned(),
            Again::Named => "named explicitly: its agent runs again, its findings made afresh".to_owned(),
            Again::Refresh(by) => format!("refreshed: `{by}`, which depends on it, runs its agent"),
        }
    }

    /// Whether a task of state `state`, found when it is hashed again
    /// during a run, still runs its agent: a forced task always does; a
    /// stale task to refresh does while it is stale (an earlier task of the
    /// run may have brought it back to what was recorded).
    pub fn still_runs(&self, state: State) -> bool {
        match self {
            Again::Forced(_) => true,
            Again::Named | Again::Refresh(_) => matches!(state, State::Stale | State::Run),
        }
    }
}

/// Marks the stale tasks of `tasks` named in `names` to run again (state
/// `run`), those an earlier [`refresh`] marked included.
pub fn name(tasks: &mut [PlannedTask], names: &[String]) {
    let stale = |t: &PlannedTask| t.state == State::Stale || matches!(t.again, Some(Again::Refresh(_)));
    for t in tasks.iter_mut().filter(|t| stale(t) && names.contains(&t.task.name)) {
        t.state = State::Run;
        t.again = Some(Again::Named);
    }
}

/// Decides which stale tasks of `tasks` (in run order: the tasks of a
/// run, or the whole plan) are refreshed: each that a task of `tasks`
/// depending on it directly runs its agent (its state is `run`, named or
/// refreshed included, not only forced: call this before [`force`]). Their
/// state becomes `run`. What an earlier call refreshed is decided afresh
/// (a run's tasks are a part of the plan: a dependent outside them
/// refreshes nothing); what [`name`] marked stays.
pub fn refresh(tasks: &mut [PlannedTask]) {
    for t in tasks.iter_mut() {
        if let Some(Again::Refresh(_)) = t.again {
            t.state = State::Stale;
            t.again = None;
        }
    }
    let index: HashMap<String, usize> = tasks.iter().enumerate().map(|(i, t)| (t.task.name.clone(), i)).collect();
    // Dependents come after what they depend on: from the last, a task
    // refreshed here is seen as running when its own turn comes.
    for i in (0..tasks.len()).rev() {
        let runs = tasks[i].state == State::Run && !matches!(tasks[i].again, Some(Again::Forced(_)));
        if !runs {
            continue;
        }
        let by = tasks[i].task.name.clone();
        let deps: Vec<usize> = tasks[i].key.spec.depends_on.iter().filter_map(|d| index.get(d).copied()).collect();
        for d in deps {
            if tasks[d].state == State::Stale {
                tasks[d].state = State::Run;
                tasks[d].again = Some(Again::Refresh(by.clone()));
            }
        }
    }
}

/// Marks each task of `tasks` named in `forced` to run its agent again,
/// whatever its state (state `run`); what it depends on is left as it is.
pub fn force(tasks: &mut [PlannedTask], forced: &[String]) {
    for t in tasks.iter_mut().filter(|t| forced.contains(&t.task.name)) {
        let was = match t.again {
            Some(Again::Forced(was)) => was,
            _ => t.state,
        };
        t.again = Some(Again::Forced(was));
        t.state = State::Run;
    }
}

/// Puts back every state this module changed: `--locked` runs no agent,
/// and keeps every stale task's findings.
pub fn undo(tasks: &mut [PlannedTask]) {
    for t in tasks.iter_mut() {
        match t.again.take() {
            Some(Again::Forced(was)) => t.state = was,
            Some(Again::Refresh(_) | Again::Named) => t.state = State::Stale,
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Diagnostics, SourceFile};

    /// Tasks in run order, each `(name, depends-on, state)`.
    fn tasks(specs: &[(&str, &[&str], State)]) -> Vec<PlannedTask> {
        let mut text = String::new();
        for (name, deps, _) in specs {
            text.push_str(&format!("task {name:?} {{\n    goal \"g\"\n"));
            for d in *deps {
                text.push_str(&format!("    depends-on {d:?}\n"));
            }
            text.push_str("}\n");
        }
        let mut diags = Diagnostics::default();
        let parsed = crate::spec::task::parse_task_file(&SourceFile::new("t.kdl", &text), &mut diags).unwrap();
        assert!(!diags.has_errors(), "{:?}", diags.sorted());
        let config = crate::spec::ProjectConfig::default();
        parsed
            .into_iter()
            .zip(specs)
            .map(|(task, (_, _, state))| {
                let mut t = super::super::settings::planned_task(task, &[], &[], None, None, &config);
                t.state = *state;
                t
            })
            .collect()
    }

    fn states(tasks: &[PlannedTask]) -> Vec<(&str, State, Option<Again>)> {
        tasks.iter().map(|t| (t.task.name.as_str(), t.state, t.again.clone())).collect()
    }

    use State::{Run, Stale, UpToDate, Verify};

    #[test]
    fn a_stale_task_is_refreshed_when_a_task_depending_on_it_runs_and_so_on_down() {
        let mut t = tasks(&[
            ("deep", &[], Stale),
            ("survey", &["deep"], Stale),
            ("other", &[], Stale),
            ("code", &["survey"], Run),
            ("later", &["other"], UpToDate),
        ]);
        refresh(&mut t);
        assert_eq!(
            states(&t),
            [
                ("deep", Run, Some(Again::Refresh("survey".into()))),
                ("survey", Run, Some(Again::Refresh("code".into()))),
                ("other", Stale, None),
                ("code", Run, None),
                ("later", UpToDate, None),
            ]
        );
        // Decided again on a part of them (a run of `survey` alone, named):
        // `code` is not in it, and `survey` runs because it is named.
        let mut part: Vec<PlannedTask> = t[..2].to_vec();
        name(&mut part, &["survey".into()]);
        refresh(&mut part);
        assert_eq!(
            states(&part),
            [("deep", Run, Some(Again::Refresh("survey".into()))), ("survey", Run, Some(Again::Named))]
        );
        // Without the name, nothing depending on them runs: both stale.
        let mut part: Vec<PlannedTask> = t[..2].to_vec();
        refresh(&mut part);
        assert_eq!(states(&part), [("deep", Stale, None), ("survey", Stale, None)]);
    }

    #[test]
    fn a_forced_task_runs_whatever_its_state_and_refreshes_nothing_it_depends_on() {
        let specs: &[(&str, &[&str], State)] = &[
            ("survey", &[], Stale),
            ("code", &["survey"], UpToDate),
            ("check", &["survey"], Verify),
            ("review", &[], Stale),
        ];
        let mut t = tasks(specs);
        refresh(&mut t);
        force(&mut t, &["code".into(), "check".into(), "review".into()]);
        assert_eq!(
            states(&t),
            [
                ("survey", Stale, None),
                ("code", Run, Some(Again::Forced(UpToDate))),
                ("check", Run, Some(Again::Forced(Verify))),
                ("review", Run, Some(Again::Forced(Stale))),
            ]
        );
        // Deciding the refreshes again: a forced task is not a reason.
        refresh(&mut t);
        assert_eq!(t[0].state, Stale);
        // A forced task that runs anyway (its goal changed) is one.
        let mut t = tasks(&[("survey", &[], Stale), ("code", &["survey"], Run)]);
        refresh(&mut t);
        force(&mut t, &["code".into()]);
        assert_eq!(
            states(&t),
            [("survey", Run, Some(Again::Refresh("code".into()))), ("code", Run, Some(Again::Forced(Run)))]
        );
        // `--locked`: every state back as planned.
        undo(&mut t);
        assert_eq!(states(&t), [("survey", Stale, None), ("code", Run, None)]);
    }

    #[test]
    fn named_is_only_for_stale_tasks_and_undone_by_undo() {
        let mut t = tasks(&[("survey", &[], Stale), ("code", &[], UpToDate)]);
        name(&mut t, &["survey".into(), "code".into()]);
        assert_eq!(states(&t), [("survey", Run, Some(Again::Named)), ("code", UpToDate, None)]);
        undo(&mut t);
        assert_eq!(states(&t), [("survey", Stale, None), ("code", UpToDate, None)]);
    }

    #[test]
    fn hashed_again_a_forced_task_still_runs_and_a_refreshed_one_while_stale() {
        for s in [UpToDate, State::Replay, Verify, Stale, Run] {
            assert!(Again::Forced(UpToDate).still_runs(s));
        }
        for again in [Again::Named, Again::Refresh("d".into())] {
            assert!(again.still_runs(Stale) && again.still_runs(Run));
            assert!(!again.still_runs(UpToDate) && !again.still_runs(State::Replay));
        }
        assert_eq!(
            Again::Refresh("add-slugify".into()).reason(),
            "refreshed: `add-slugify`, which depends on it, runs its agent"
        );
    }
}
