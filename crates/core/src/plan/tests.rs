//! The planner's pieces: a task's settings, the checks of loading, the
//! input key, the state of each task, and hashing again during a run.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use super::hashing::HashError;
use super::load::{check_agents_and_sandboxes, drop_duplicate_names, overrides};
use super::settings::{agent_key, planned_task, spec_key};
use super::*;
use crate::spec::Diagnostics;
use crate::spec::config::{ProjectConfig, parse_config};
use crate::spec::task::parse_task_file;

/// Task `t` of goal `g` with these more lines.
fn task(lines: &str) -> Task {
    tasks(&format!("task \"t\" {{\n    goal \"g\"\n{lines}\n}}\n")).remove(0)
}

/// The tasks of a task file of this text (`t.kdl`), which must parse.
fn tasks(text: &str) -> Vec<Task> {
    let src = SourceFile::new("t.kdl", text);
    let mut diags = Diagnostics::default();
    let tasks = parse_task_file(&src, &mut diags).expect("the task file parses");
    assert!(!diags.has_errors(), "{:?}", diags.sorted());
    tasks
}

/// `cassist.kdl` of this text, which must be valid.
fn config(text: &str) -> ProjectConfig {
    let mut diags = Diagnostics::default();
    let config = parse_config(Path::new("/nonexistent"), Some(&SourceFile::new("cassist.kdl", text)), &mut diags);
    assert!(!diags.has_errors(), "{:?}", diags.sorted());
    config
}

/// The codes of `diags`, sorted.
fn codes(diags: Diagnostics) -> Vec<&'static str> {
    diags.sorted().into_iter().map(|d| d.code).collect()
}

/// A project of `cassist.kdl` (`config`), `tasks/tasks.kdl` (`tasks`) and
/// these files.
fn project(config: &str, tasks: &str, files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::write(root.join("cassist.kdl"), config).unwrap();
    std::fs::create_dir(root.join("tasks")).unwrap();
    std::fs::write(root.join("tasks/tasks.kdl"), tasks).unwrap();
    for (path, text) in files {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}

#[test]
fn the_agent_is_the_tasks_then_the_command_lines_then_the_defaults_then_claude() {
    let with_default = config("defaults { agent \"codex\" }");
    let none = config("");
    let own = task("    agent \"gemini\"");
    let plain = task("");
    assert_eq!(resolve_agent(&own, Some("codex"), &with_default), "gemini");
    assert_eq!(resolve_agent(&plain, Some("gemini"), &with_default), "gemini");
    assert_eq!(resolve_agent(&plain, None, &with_default), "codex");
    assert_eq!(resolve_agent(&plain, None, &none), DEFAULT_AGENT);
}

#[test]
fn the_model_is_the_tasks_then_the_command_lines_then_the_defaults_else_none() {
    let with_default = config("defaults { model \"big\" }");
    let own = task("    model \"small\"");
    let plain = task("");
    assert_eq!(resolve_model(&own, Some("cli"), &with_default).as_deref(), Some("small"));
    assert_eq!(resolve_model(&plain, Some("cli"), &with_default).as_deref(), Some("cli"));
    assert_eq!(resolve_model(&plain, None, &with_default).as_deref(), Some("big"));
    assert_eq!(resolve_model(&plain, None, &config("")), None, "the CLI's own default");
}

#[test]
fn the_sandbox_never_goes_above_the_trust_and_full_only_when_asked() {
    use SandboxLevel::{Full, ReadOnly, WorkspaceWrite};
    let plain = task("");
    let full = task("    sandbox \"full\"");
    let read = task("    sandbox \"read-only\"");
    let explore = task("    kind \"explore\"\n    sandbox \"full\"");
    // No trust: read-only, whatever is asked.
    assert_eq!(effective_sandbox(&full, None), ReadOnly);
    // A read-only kind is read-only, whatever the trust.
    assert_eq!(effective_sandbox(&explore, Some(Full)), ReadOnly);
    // The task's level, capped at the trust.
    assert_eq!(effective_sandbox(&full, Some(WorkspaceWrite)), WorkspaceWrite);
    assert_eq!(effective_sandbox(&full, Some(Full)), Full);
    assert_eq!(effective_sandbox(&read, Some(Full)), ReadOnly);
    // None asked: the trust, but never `full`.
    assert_eq!(effective_sandbox(&plain, Some(Full)), WorkspaceWrite);
    assert_eq!(effective_sandbox(&plain, Some(WorkspaceWrite)), WorkspaceWrite);
    assert_eq!(effective_sandbox(&plain, Some(ReadOnly)), ReadOnly);
}

#[test]
fn the_spec_key_sorts_and_dedups_its_lists_and_counts_milliseconds() {
    let t = task(
        "    context {\n        file \"b\"\n        file \"a\"\n        file \"b\"\n    }\n    scope {\n        path \"z\"\n        path \"y\"\n    }\n    acceptance {\n        run \"true\" timeout=\"2s\"\n        run \"false\"\n    }",
    );
    let key = spec_key(&t, Duration::from_secs(90), 4, Some(1.5));
    assert_eq!(key.context, ["a", "b"]);
    assert_eq!(key.scope, ["y", "z"]);
    assert_eq!((key.timeout_ms, key.max_iterations, key.max_cost), (90_000, 4, Some(1.5)));
    assert_eq!(key.acceptance.len(), 2);
    assert_eq!((key.acceptance[0].run.as_str(), key.acceptance[0].timeout_ms), ("true", Some(2_000)));
    assert_eq!(key.acceptance[1].timeout_ms, None);
    assert_eq!((key.name.as_str(), key.goal.as_str(), key.kind.as_str()), ("t", "g", "code"));
}

#[test]
fn the_agent_key_holds_the_version_and_a_custom_agents_definition() {
    let config = config(
        "agent \"mine\" {\n    command \"mine\" \"{prompt_file}\"\n    pass-env \"MINE_KEY\"\n}\nagent \"chain\" {\n    try \"mine\" \"claude\"\n}",
    );
    let versions: HashMap<String, Option<String>> = [("claude".to_owned(), Some("2.0".to_owned()))].into();
    let claude = agent_key(&config, "claude", &versions);
    assert_eq!((claude.version.as_deref(), claude.command.len(), claude.try_agents.len()), (Some("2.0"), 0, 0));
    let mine = agent_key(&config, "mine", &versions);
    assert_eq!(
        (mine.version, mine.command, mine.pass_env),
        (None, vec!["mine".into(), "{prompt_file}".into()], vec!["MINE_KEY".into()])
    );
    assert_eq!(agent_key(&config, "chain", &versions).try_agents, ["mine", "claude"]);
}

#[test]
fn a_task_gets_the_config_defaults_then_the_built_in_ones() {
    let with = config("defaults {\n    timeout \"90s\"\n    max-iterations 5\n    max-cost 2.5\n}");
    let t = planned_task(task(""), &[], &[], None, None, &with);
    assert_eq!((t.timeout, t.max_iterations, t.max_cost), (Duration::from_secs(90), 5, Some(2.5)));
    assert_eq!(t.key.spec.timeout_ms, 90_000, "the key holds the effective settings");
    let own = planned_task(task("    timeout \"1m\"\n    max-iterations 1"), &[], &[], None, None, &with);
    assert_eq!((own.timeout, own.max_iterations), (Duration::from_secs(60), 1));
    let t = planned_task(task(""), &[], &[], None, None, &config(""));
    assert_eq!((t.timeout, t.max_iterations, t.max_cost), (DEFAULT_TIMEOUT, DEFAULT_MAX_ITERATIONS, None));
    assert_eq!((t.agent.as_str(), t.sandbox, t.state), (DEFAULT_AGENT, SandboxLevel::ReadOnly, State::Run));
    assert!(t.hash.is_empty() && t.key.inputs.is_empty(), "not hashed yet");
}

#[test]
fn a_name_given_twice_is_an_error_and_the_first_task_stays() {
    let mut ts = tasks("task \"a\" { goal \"1\"; }\ntask \"b\" { goal \"2\"; }\ntask \"a\" { goal \"3\"; }");
    let mut diags = Diagnostics::default();
    drop_duplicate_names(&mut ts, &mut diags);
    assert_eq!(ts.iter().map(|t| (t.name.as_str(), t.goal.as_str())).collect::<Vec<_>>(), [("a", "1"), ("b", "2")]);
    let d = diags.sorted();
    assert_eq!(d.len(), 1);
    assert_eq!((d[0].code, d[0].message.as_str()), ("duplicate-task", "task `a` is defined twice"));
    let mut unique = tasks("task \"a\" { goal \"1\"; }\ntask \"b\" { goal \"2\"; }");
    let mut diags = Diagnostics::default();
    drop_duplicate_names(&mut unique, &mut diags);
    assert_eq!((unique.len(), diags.len()), (2, 0));
}

#[test]
fn the_command_line_agent_wins_and_an_unknown_one_or_a_bad_model_is_an_error() {
    let cfg = config("");
    let opts = |agent: Option<&str>, model: Option<&str>| LoadOptions {
        agent: agent.map(str::to_owned),
        model: model.map(str::to_owned),
        ..LoadOptions::default()
    };
    let mut diags = Diagnostics::default();
    let got = overrides(&opts(Some("codex"), Some("m-1")), Some("gemini".into()), &cfg, &mut diags);
    assert_eq!(got, (Some("codex".into()), Some("m-1".into())));
    assert!(diags.is_empty());
    let mut diags = Diagnostics::default();
    assert_eq!(overrides(&opts(None, None), Some("gemini".into()), &cfg, &mut diags).0.as_deref(), Some("gemini"));
    assert!(diags.is_empty());
    // Each unknown agent says where it came from.
    let mut diags = Diagnostics::default();
    overrides(&opts(Some("nope"), None), None, &cfg, &mut diags);
    assert!(diags.sorted()[0].message.ends_with("given by --agent"));
    let mut diags = Diagnostics::default();
    overrides(&opts(None, None), Some("nope".into()), &cfg, &mut diags);
    assert!(diags.sorted()[0].message.ends_with("given by CASSIST_AGENT"));
    for bad in ["", " ", "two words", "tab\tbed"] {
        let mut diags = Diagnostics::default();
        overrides(&opts(None, Some(bad)), None, &cfg, &mut diags);
        assert_eq!(codes(diags), ["bad-model"], "{bad:?}");
    }
}

#[test]
fn agents_and_sandboxes_are_checked_against_the_config_and_its_trust() {
    let trusted = config("trust \"workspace-write\"");
    let check = |config: &ProjectConfig, text: &str| {
        let mut diags = Diagnostics::default();
        let warnings = check_agents_and_sandboxes(config, &tasks(text), &mut diags);
        (codes(diags), warnings.into_iter().map(|d| d.code).collect::<Vec<_>>())
    };
    assert_eq!(check(&trusted, "task \"a\" { goal \"g\"; agent \"nope\"; }").0, ["unknown-agent"]);
    assert_eq!(check(&trusted, "task \"a\" { goal \"g\"; sandbox \"full\"; }").0, ["sandbox-above-trust"]);
    assert_eq!(check(&trusted, "task \"a\" { goal \"g\"; sandbox \"workspace-write\"; }"), (vec![], vec![]));
    assert_eq!(
        check(&trusted, "task \"a\" { goal \"g\"; kind \"explore\"; sandbox \"workspace-write\"; }"),
        (vec![], vec!["sandbox-ignored"])
    );
    // No trust: a task that would change files, or asks to, is warned of.
    let untrusted = config("");
    assert_eq!(check(&untrusted, "task \"a\" { goal \"g\"; }").1, ["untrusted-project"]);
    assert_eq!(check(&untrusted, "task \"a\" { goal \"g\"; kind \"review\"; }"), (vec![], vec![]));
    assert_eq!(
        check(&untrusted, "task \"a\" { goal \"g\"; kind \"explore\"; sandbox \"workspace-write\"; }").1,
        ["sandbox-ignored", "untrusted-project"]
    );
    assert_eq!(check(&untrusted, "").1, Vec::<&str>::new(), "no task, no warning");
}

#[test]
fn loading_orders_the_tasks_by_their_dependencies_and_resolves_their_files() {
    let dir = project(
        "trust \"workspace-write\"",
        "task \"second\" {\n    goal \"g\"\n    depends-on \"first\"\n    context {\n        file \"b.txt\"\n        file \"a.txt\"\n    }\n}\ntask \"first\" {\n    goal \"g\"\n    kind \"explore\"\n}\n",
        &[("a.txt", "a"), ("b.txt", "b")],
    );
    let loaded = load(dir.path(), &LoadOptions::default()).unwrap();
    assert_eq!(loaded.tasks.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["first", "second"]);
    let context: Vec<&str> = loaded.files[1].0.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(context, ["a.txt", "b.txt"]);
    assert!(loaded.files[0].0.is_empty());
    assert_eq!(loaded.template.0, "default");
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
}

#[test]
fn an_error_anywhere_fails_the_load_without_its_warnings() {
    let dir = project("", "task \"a\" {\n    goal \"g\"\n    context {\n        file \"missing.txt\"\n    }\n}\n", &[]);
    let diags = load(dir.path(), &LoadOptions::default()).err().expect("a context file that matches nothing");
    // The untrusted-project warning is left out: nothing runs.
    assert_eq!(diags.iter().map(|d| d.code).collect::<Vec<_>>(), ["no-match"]);
    // No `tasks/` folder: an error, unless tasks are optional.
    let empty = tempfile::tempdir().unwrap();
    std::fs::write(empty.path().join("cassist.kdl"), "").unwrap();
    assert!(load(empty.path(), &LoadOptions::default()).is_err());
    let opts = LoadOptions { tasks_optional: true, ..LoadOptions::default() };
    assert!(load(empty.path(), &opts).unwrap().tasks.is_empty());
}

#[test]
fn an_unknown_placeholder_in_the_template_is_an_error() {
    let dir = project(
        "trust \"workspace-write\"\nprompt-template \"prompt.md\"",
        "task \"a\" { goal \"g\"; }",
        &[("prompt.md", "{goal} and {nonsense}")],
    );
    let diags = load(dir.path(), &LoadOptions::default()).err().expect("an unknown placeholder");
    assert_eq!(diags.iter().map(|d| d.code).collect::<Vec<_>>(), ["unknown-placeholder"]);
}

#[test]
fn the_builtin_agents_are_those_the_tasks_may_use_in_first_use_order() {
    let dir = project(
        "trust \"workspace-write\"\nagent \"mine\" {\n    command \"mine\" \"{prompt_file}\"\n}\nagent \"chain\" {\n    try \"mine\" \"gemini\" \"codex\"\n}",
        "task \"a\" { goal \"g\"; agent \"codex\"; }\ntask \"b\" { goal \"g\"; agent \"chain\"; }\ntask \"c\" { goal \"g\"; }\n",
        &[],
    );
    let loaded = load(dir.path(), &LoadOptions::default()).unwrap();
    assert_eq!(loaded.builtin_agents(), ["codex", "gemini", "claude"]);
}

/// The plan of a trusted project with tasks `a` (code, context `a.txt`)
/// and `b` (explore, depending on `a`).
fn two_tasks() -> (tempfile::TempDir, Plan) {
    let dir = project(
        "trust \"workspace-write\"\ntest \"true\"",
        "task \"a\" {\n    goal \"g\"\n    context {\n        file \"a.txt\"\n    }\n}\ntask \"b\" {\n    goal \"g\"\n    kind \"explore\"\n    depends-on \"a\"\n}\n",
        &[("a.txt", "one")],
    );
    let plan = load_and_plan(dir.path(), &LoadOptions::default()).unwrap();
    (dir, plan)
}

#[test]
fn a_planned_task_is_keyed_by_its_inputs_and_its_dependencies_outputs() {
    let (_dir, plan) = two_tasks();
    let (a, b) = (plan.get("a").unwrap(), plan.get("b").unwrap());
    assert_eq!((a.state, b.state), (State::Run, State::Run), "nothing recorded");
    let kinds = |t: &PlannedTask| t.key.inputs.iter().map(|i| (i.kind, i.name.clone())).collect::<Vec<_>>();
    assert!(kinds(a).contains(&("context", "a.txt".into())));
    // `b` depends on what `a` hands on: its input hash while it runs.
    let dep = b.key.inputs.iter().find(|i| i.kind == "dependency").unwrap();
    assert_eq!((dep.name.as_str(), dep.hash.as_str()), ("a", a.hash.as_str()));
    assert_eq!(a.hash, a.key.hash());
    // No model asked for: no model input.
    assert!(!kinds(a).iter().any(|(k, _)| *k == "model"));
    // Only a task that may change files runs the project's checks, and
    // only its key holds them.
    let project = |t: &PlannedTask| t.key.inputs.iter().find(|i| i.kind == "project").unwrap().hash.clone();
    assert!(a.runs_project_checks() && !b.runs_project_checks());
    assert_eq!(project(a), plan.hashing.project_hash);
    assert_eq!(project(b), plan.hashing.project_hash_without_checks);
    assert_ne!(plan.hashing.project_hash, plan.hashing.project_hash_without_checks);
}

#[test]
fn a_model_is_an_input_only_when_one_is_asked_for() {
    let (_dir, plan) = two_tasks();
    let mut t = plan.get("a").unwrap().clone();
    let before = t.hash.clone();
    t.model = Some("m-1".into());
    plan.hashing.fill_key(&plan.project.config, &mut t, &[], Vec::new(), Vec::new(), &HashMap::new());
    let model = t.key.inputs.iter().find(|i| i.kind == "model").expect("a model input");
    assert_eq!(model.name, "m-1");
    assert_ne!(t.hash, before);
}

#[test]
fn rehashing_sees_the_tree_as_it_is_now() {
    let (dir, plan) = two_tasks();
    let mut a = plan.get("a").unwrap().clone();
    let planned = a.hash.clone();
    plan.rehash(&mut a, &HashMap::new()).unwrap();
    assert_eq!(a.hash, planned, "nothing changed");
    std::fs::write(dir.path().join("a.txt"), "two").unwrap();
    plan.rehash(&mut a, &HashMap::new()).unwrap();
    assert_ne!(a.hash, planned, "a context file changed");
    // A context file that now leads outside the project.
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("x"), "x").unwrap();
    std::fs::remove_file(dir.path().join("a.txt")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("x"), dir.path().join("a.txt")).unwrap();
    let e = plan.rehash(&mut a, &HashMap::new()).unwrap_err();
    assert!(matches!(e, HashError::Escapes(_)), "{e:?}");
    assert!(e.to_string().starts_with("`a.txt` leads outside the project (to "), "{e}");
}

#[test]
fn a_task_shows_its_state_and_what_it_may_change() {
    let (_dir, plan) = two_tasks();
    let mut b = plan.get("b").unwrap().clone();
    assert!(b.read_only() && b.kind() == Kind::Explore && !b.inline());
    assert_eq!(plan.summary_dependencies(&b).len(), 0, "`a` is a code task: no findings");
    let a = plan.get("a").unwrap();
    assert!(!a.read_only());
    b.state = State::Replay;
    assert_eq!(b.shown_state(), "replay");
    b.cached.remote = true;
    assert_eq!(b.shown_state(), "replay (remote)");
    for (s, text) in [(State::UpToDate, "up-to-date"), (State::Replay, "replay"), (State::Run, "run")] {
        assert_eq!(s.as_str(), text);
    }
    assert_eq!(plan.unknown_task("b2").help.as_deref(), Some("did you mean `b`?"));
}

/// A project with a code task `c` (with an acceptance command), a code
/// task `n` without one, and an explore task `e`, all reading `ctx.txt`;
/// `c` depends on `e`. `edit` changes the task file's text before it is
/// planned.
fn recipe_project(edit: impl Fn(&str) -> String) -> tempfile::TempDir {
    let tasks = r#"task "e" {
    kind "explore"
    goal "look"
    context { file "ctx.txt"; }
}
task "c" {
    goal "change"
    timeout "5m"
    depends-on "e"
    context { file "ctx.txt"; }
    acceptance { run "true"; }
}
task "n" {
    goal "change too"
    context { file "ctx.txt"; }
}
"#;
    project(
        "trust \"workspace-write\"\nagent \"x\" { command \"true\"; }\ndefaults { agent \"claude\"; }\n",
        &edit(tasks),
        &[("ctx.txt", "one\n")],
    )
}

/// The plan of the project at `dir`, the agents' versions as given.
fn plan_with(dir: &Path, versions: &[(&str, &str)]) -> Plan {
    let loaded = load(dir, &LoadOptions::default()).unwrap();
    let versions = versions.iter().map(|(a, v)| (a.to_string(), Some(v.to_string()))).collect();
    plan(loaded, versions).unwrap()
}

/// Records each task of the project at `dir` in `cassist.lock` as run on
/// the tree as it is (an empty change, no outputs), with `versions`: what
/// `run` leaves (planned twice: a dependent's key holds its dependency's
/// recorded output).
fn record(dir: &Path, versions: &[(&str, &str)]) -> Plan {
    for _ in 0..2 {
        let p = plan_with(dir, versions);
        record_all(dir, &p);
    }
    plan_with(dir, versions)
}

/// Records each task of `p` in `cassist.lock` as run on the tree as it
/// is.
fn record_all(dir: &Path, p: &Plan) {
    let mut lock = crate::lock::Lock::default();
    for t in &p.tasks {
        let mut t = t.clone();
        p.hashing.fill_recipe(&p.project.config, &mut t);
        let line = crate::lock::LockEntry {
            before: "0".repeat(64),
            after: t.hash.clone(),
            recipe: Some(t.recipe.clone()),
            dependencies: t.dependencies.clone(),
            outputs: Some(state::outputs_hash(&Default::default())),
            patch: format!("{}-patch", t.task.name),
            agent: t.agent.clone(),
            ..Default::default()
        };
        lock.tasks.insert(t.task.name.clone(), line);
    }
    lock.save(dir).unwrap();
}

fn states(p: &Plan) -> Vec<(&str, State)> {
    p.tasks.iter().map(|t| (t.task.name.as_str(), t.state)).collect()
}

#[test]
fn a_changed_file_a_task_reads_is_verified_or_stale_when_its_recipe_is_the_same() {
    let dir = recipe_project(|t| t.to_owned());
    let recorded = record(dir.path(), &[("claude", "1.0")]);
    assert_eq!(states(&recorded), [("e", State::UpToDate), ("c", State::UpToDate), ("n", State::UpToDate)]);

    // A file they read changed: the explore task is stale, the code task
    // with acceptance commands verify, the one without run.
    std::fs::write(dir.path().join("ctx.txt"), "two\n").unwrap();
    let edited = plan_with(dir.path(), &[("claude", "1.0")]);
    assert_eq!(states(&edited), [("e", State::Stale), ("c", State::Verify), ("n", State::Run)]);
    let c = edited.get("c").unwrap();
    assert_eq!(c.cached.patch.as_deref(), Some("c-patch"), "it hands on its recorded output");
    assert!(super::why::why(&edited, c).last().unwrap().contains("acceptance commands decide"));
    std::fs::write(dir.path().join("ctx.txt"), "one\n").unwrap();

    // A new agent version, or another timeout: the same.
    let upgraded = plan_with(dir.path(), &[("claude", "2.0")]);
    assert_eq!(states(&upgraded), [("e", State::Stale), ("c", State::Verify), ("n", State::Run)]);
    let tasks = dir.path().join("tasks/tasks.kdl");
    let text = std::fs::read_to_string(&tasks).unwrap();
    std::fs::write(&tasks, text.replace("timeout \"5m\"", "timeout \"9m\"")).unwrap();
    assert_eq!(plan_with(dir.path(), &[("claude", "1.0")]).get("c").unwrap().state, State::Verify);

    // A changed goal, acceptance command or model is a run.
    for (from, to) in [
        ("goal \"change\"", "goal \"change more\""),
        ("run \"true\"", "run \"true && true\""),
        ("timeout \"5m\"", "timeout \"5m\"\n    model \"big\""),
        ("timeout \"5m\"", "timeout \"5m\"\n    agent \"x\""),
    ] {
        std::fs::write(&tasks, text.replace(from, to)).unwrap();
        std::fs::write(dir.path().join("ctx.txt"), "two\n").unwrap();
        let p = plan_with(dir.path(), &[("claude", "1.0")]);
        assert_eq!(p.get("c").unwrap().state, State::Run, "{to}");
    }
}

#[test]
fn a_line_without_a_recipe_or_with_other_dependencies_is_run() {
    let dir = recipe_project(|t| t.to_owned());
    let first = record(dir.path(), &[]);
    std::fs::write(dir.path().join("ctx.txt"), "two\n").unwrap();
    // The dependency's recorded output is another than `c` ran with.
    let mut lock = crate::lock::Lock::load(dir.path()).unwrap();
    lock.tasks.get_mut("e").unwrap().patch = "another-patch".into();
    lock.save(dir.path()).unwrap();
    let p = plan_with(dir.path(), &[]);
    // (`e`, stale, is refreshed first: `c`, which depends on it, runs.)
    assert_eq!(states(&p), [("e", State::Run), ("c", State::Run), ("n", State::Run)]);
    assert_eq!(p.get("e").unwrap().again, Some(again::Again::Refresh("c".into())));
    // A line of an older cassist (no recipe) is never re-verified.
    record_all(dir.path(), &first);
    let mut lock = crate::lock::Lock::load(dir.path()).unwrap();
    for l in lock.tasks.values_mut() {
        (l.recipe, l.dependencies) = (None, None);
    }
    lock.save(dir.path()).unwrap();
    assert_eq!(states(&plan_with(dir.path(), &[])), [("e", State::Run), ("c", State::Run), ("n", State::Run)]);
    // Yet it stays up to date where it was.
    std::fs::write(dir.path().join("ctx.txt"), "one\n").unwrap();
    assert_eq!(
        states(&plan_with(dir.path(), &[])),
        [("e", State::UpToDate), ("c", State::UpToDate), ("n", State::UpToDate)]
    );
}

#[test]
fn the_recipe_leaves_out_what_the_tree_and_the_machine_bring() {
    let dir = recipe_project(|t| t.to_owned());
    let a = plan_with(dir.path(), &[("claude", "1.0")]);
    std::fs::write(dir.path().join("ctx.txt"), "two\n").unwrap();
    std::fs::write(dir.path().join("AGENTS.md"), "standing instructions\n").unwrap();
    let b = plan_with(dir.path(), &[("claude", "1.1")]);
    for name in ["e", "c", "n"] {
        let recipe_of = |p: &Plan| {
            let mut t = p.get(name).unwrap().clone();
            assert_eq!(t.recipe, "", "not made while nothing needs it");
            p.hashing.fill_recipe(&p.project.config, &mut t);
            t
        };
        let (x, y) = (recipe_of(&a), recipe_of(&b));
        assert_ne!(x.hash, y.hash, "{name}: the input hash sees the change");
        assert_eq!(x.recipe, y.recipe, "{name}: the recipe does not");
    }
    let filled = |name: &str| {
        let mut t = a.get(name).unwrap().clone();
        a.hashing.fill_recipe(&a.project.config, &mut t);
        t
    };
    assert_eq!(filled("e").dependencies, None, "no dependencies, no hash");
    assert!(filled("c").dependencies.is_some());
}

#[test]
fn the_network_allow_lists_and_sandbox_paths_are_in_the_key_and_recipe_only_when_given() {
    let dir = recipe_project(|t| t.to_owned());
    let recorded = record(dir.path(), &[("claude", "1.0")]);
    let kinds = |t: &PlannedTask| t.key.inputs.iter().map(|i| i.kind).collect::<Vec<_>>();
    for t in &recorded.tasks {
        assert!(!kinds(t).iter().any(|k| matches!(*k, "network" | "sandbox-paths")), "{:?}", kinds(t));
    }
    let cfg = dir.path().join("cassist.kdl");
    let base = std::fs::read_to_string(&cfg).unwrap();
    let hash_of = |extra: &str| {
        std::fs::write(&cfg, format!("{base}{extra}")).unwrap();
        let p = plan_with(dir.path(), &[("claude", "1.0")]);
        let mut c = p.get("c").unwrap().clone();
        p.hashing.fill_recipe(&p.project.config, &mut c);
        (c.hash.clone(), c.recipe.clone())
    };
    let none = hash_of("");
    let empty = hash_of("network {\n}\n");
    let one = hash_of("network {\n    allow \"a.example.com\"\n}\n");
    let same = hash_of("network {\n    allow \"a.example.com\" \"a.example.com\"\n}\n");
    let agent = hash_of("agent \"y\" {\n    command \"true\"\n    allow \"api.example.com\"\n}\n");
    let read = hash_of("sandbox {\n    read \"/opt/tools\"\n}\n");
    let hide = hash_of("sandbox {\n    hide \"/opt/tools\"\n}\n");
    assert_eq!(one, same, "the same hosts");
    let all = [&none, &empty, &one, &read, &hide];
    for (i, a) in all.iter().enumerate() {
        for b in &all[i + 1..] {
            assert_ne!(a.0, b.0);
            assert_ne!(a.1, b.1, "the recipe sees it too");
        }
    }
    // Another agent's hosts are not this task's.
    assert_eq!(agent, none);

    // A task whose allow-list or sandbox paths changed runs again, though
    // only a file it reads changed besides (which alone is a
    // verification).
    std::fs::write(dir.path().join("ctx.txt"), "two\n").unwrap();
    for extra in ["", "network {\n    allow \"a.example.com\"\n}\n", "sandbox {\n    read \"/opt/tools\"\n}\n"] {
        std::fs::write(&cfg, format!("{base}{extra}")).unwrap();
        let p = plan_with(dir.path(), &[("claude", "1.0")]);
        let want = if extra.is_empty() { State::Verify } else { State::Run };
        assert_eq!(p.get("c").unwrap().state, want, "{extra}");
    }
}
