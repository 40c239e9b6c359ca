use std::path::Path;

use super::*;

fn input(model: Option<&str>) -> AdapterInput<'_> {
    let d = Path::new("/w");
    AdapterInput {
        sandbox: SandboxLevel::WorkspaceWrite,
        read_only_kind: false,
        max_turns: None,
        max_cost: None,
        model,
        prompt_file: d,
        workdir: d,
        io_dir: d,
        userns: true,
    }
}

#[test]
fn the_registry_names_the_agents_the_task_format_accepts() {
    let registered: Vec<&str> = BUILTINS.iter().map(|a| a.name()).collect();
    assert_eq!(registered, cassist_core::spec::BUILTIN_AGENTS, "add the agent to both lists, in the same order");
    assert!(builtin(cassist_core::plan::DEFAULT_AGENT).is_some(), "the default agent is a built-in one");
}

#[test]
fn every_registered_agent_answers_for_itself() {
    for a in BUILTINS {
        let name = a.name();
        assert!(std::ptr::addr_eq(builtin(name).unwrap(), *a), "{name}: found by its name");
        assert!(!a.program().is_empty() && !a.program().contains('/'), "{name}: a program looked up on PATH");
        assert!(a.install_line().is_some_and(|l| l.starts_with("npm install -g ")), "{name}");
        assert!(a.makes_state_dirs(), "{name}");
        assert_eq!(a.home_state().len(), 1, "{name}: its own state folder");
        assert!(state_dirs(*a).ends_with(SHARED_HOME_STATE), "{name}");
        assert!(a.instructions_file().ends_with(".md"), "{name}");
        for v in NETWORK_ENV {
            assert!(a.pass_env().contains(v), "{name}: {v}");
        }
        // It reads its own output.
        assert!(a.parse("", process::Outcome::Exited(0), Path::new("/nonexistent")).is_some(), "{name}");
        assert_eq!(a.argv(&input(None))[0], a.program(), "{name}: the command line starts its program");
    }
    // Name, program, state folders, state files, instructions file.
    type Facts<'a> = (&'a str, &'a str, Vec<&'a str>, &'a [&'a str], &'a str);
    let facts: Vec<Facts<'_>> = BUILTINS
        .iter()
        .map(|a| (a.name(), a.program(), state_dirs(*a), a.home_state_files(), a.instructions_file()))
        .collect();
    assert_eq!(
        facts,
        [
            ("claude", "claude", vec![".claude", ".cache"], &[".claude.json"][..], "CLAUDE.md"),
            ("codex", "codex", vec![".codex", ".cache"], &[][..], "AGENTS.md"),
            ("droid", "droid", vec![".factory", ".cache"], &[][..], "AGENTS.md"),
            ("gemini", "gemini", vec![".gemini", ".cache"], &[][..], "GEMINI.md"),
        ]
    );
    assert_eq!(all_state_vars().collect::<Vec<_>>(), ["CLAUDE_CONFIG_DIR", "CODEX_HOME"]);
    for v in all_state_vars() {
        let own = BUILTINS.iter().find(|a| a.state_vars().contains(&v)).unwrap();
        assert!(own.pass_env().contains(&v), "{v} is passed to the agent it belongs to");
    }
}

#[test]
fn a_custom_command_is_what_its_definition_says() {
    let c = custom::Command {
        allow: Vec::new(),
        name: "mine".into(),
        argv: vec!["/opt/mine/run".into(), "--task={task}".into(), "/tmp/notes".into()],
        pass_env: vec!["MINE_KEY".into()],
    };
    let a: &dyn Agent = &c;
    assert_eq!((a.name(), a.program(), a.install_line()), ("mine", "/opt/mine/run", None));
    assert_eq!(a.pass_env(), ["MINE_KEY"]);
    assert_eq!(state_dirs(a), [".cache"]);
    assert!(a.home_state_files().is_empty() && a.state_vars().is_empty() && !a.makes_state_dirs());
    assert_eq!(a.instructions_file(), "AGENTS.md");
    assert_eq!(a.argv(&input(Some("m"))), c.argv, "the placeholders are filled by the runner");
    assert_eq!(a.named_paths(), [Path::new("/opt/mine/run"), Path::new("/tmp/notes")]);
    assert!(a.parse("{\"type\":\"result\"}\n", process::Outcome::Exited(0), Path::new("/")).is_none());
    assert!(a.version(Path::new("/bin/true")).is_none());
    assert!(a.sandbox_note(&["danger-full-access".into()], SandboxLevel::WorkspaceWrite, true).is_none());
    assert!(invoke::locate(&custom::Command { argv: Vec::new(), ..c }, Path::new("/"), None).is_none());
}

#[test]
fn built_in_agents_pass_their_own_and_network_variables_only() {
    let claude = builtin("claude").unwrap().pass_env();
    for v in ["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "HTTPS_PROXY", "NO_PROXY", "NODE_EXTRA_CA_CERTS"] {
        assert!(claude.contains(&v), "{v}");
    }
    assert!(!claude.contains(&"OPENAI_API_KEY"), "another agent's key");
    let codex = builtin("codex").unwrap().pass_env();
    assert!(codex.contains(&"CODEX_HOME"));
    assert!(!codex.contains(&"ANTHROPIC_API_KEY"));
}

#[test]
fn every_built_in_cli_is_told_the_model_asked_for_and_none_else() {
    for a in BUILTINS {
        let name = a.name();
        let argv = a.argv(&input(Some("m-1")));
        let at = argv.iter().position(|a| a == "--model").unwrap_or_else(|| panic!("{name}: {argv:?}"));
        assert_eq!(argv[at + 1], "m-1", "{name}");
        assert_eq!(argv.iter().filter(|a| *a == "--model" || *a == "-m").count(), 1, "{name}: {argv:?}");
        if name != "droid" {
            // Droid falls back to a custom model of its settings.
            let argv = a.argv(&input(None));
            assert!(!argv.iter().any(|a| a == "--model" || a == "-m"), "{name}: the CLI's default: {argv:?}");
        }
    }
    assert_eq!(droid::extra_env(Some("custom:local")), [("FACTORY_AIRGAP_ENABLED".to_owned(), "1".to_owned())]);
    assert!(droid::extra_env(Some("gpt-5")).is_empty());
    let claude = builtin("claude").unwrap().extra_env(None);
    assert_eq!(claude, [("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".to_owned(), "1".to_owned())]);
    for name in ["codex", "gemini"] {
        assert!(builtin(name).unwrap().extra_env(Some("m")).is_empty(), "{name}");
    }
}

#[test]
fn only_codex_says_when_its_own_sandbox_was_left_off() {
    let full_access: Vec<String> = vec!["codex".into(), "--sandbox".into(), "danger-full-access".into()];
    let codex = builtin("codex").unwrap();
    let note = codex.sandbox_note(&full_access, SandboxLevel::WorkspaceWrite, true).unwrap();
    assert!(note.contains("Landlock enforces `workspace-write`"), "{note}");
    let note = codex.sandbox_note(&full_access, SandboxLevel::ReadOnly, false).unwrap();
    assert!(note.contains("`read-only` rests on the review"), "{note}");
    // Asked for: nothing to say.
    assert!(codex.sandbox_note(&full_access, SandboxLevel::Full, true).is_none());
    let own_sandbox = codex.argv(&input(None));
    assert!(codex.sandbox_note(&own_sandbox, SandboxLevel::WorkspaceWrite, false).is_none());
    for a in BUILTINS.iter().filter(|a| a.name() != "codex") {
        assert!(a.sandbox_note(&full_access, SandboxLevel::WorkspaceWrite, true).is_none(), "{}", a.name());
    }
}
