//! The user's secrets and the sandbox's extra host paths: a setup command,
//! a read-only agent, a workspace-write agent and an acceptance command
//! (`fixtures/agents/attacks/secrets.py`) each try to read the secrets of
//! a HOME and connect to a socket of the user's runtime folder; nothing
//! of them reaches any output, record, change or file a command could
//! write, in both workspace modes. `sandbox { hide … }` hides more,
//! `sandbox { read … }` shows a folder under the private `/tmp`, and an
//! acceptance command whose program is hidden says so. The config's
//! `network` and `sandbox` blocks are checked and part of each task's
//! recipe.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::{
    Project, Sandbox, Test, contains_bytes, in_both_modes, outside_temp_dir, sandbox_or_skip, sh_agent_block, strings,
    unique_marker, write, write_executable,
};
use crate::support::{copy_mode, sandboxed};

type Env<'a> = &'a [(&'a str, &'a str)];

/// The secrets of the test's HOME, each holding `marker`.
const SECRETS: &[&str] = &[
    ".ssh/id_rsa",
    ".aws/credentials",
    ".netrc",
    ".config/gh/hosts.yml",
    ".git-credentials",
    ".npmrc",
    "work-secrets/token",
    // In the agents' state folder, which they may write: hidden all the
    // same.
    ".cache/notes/token",
];

/// A unix socket that answers every connection with `text` and counts
/// them, until dropped.
struct Bus {
    connections: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Bus {
    fn start(path: PathBuf, text: String) -> Bus {
        let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind the socket");
        listener.set_nonblocking(true).unwrap();
        let (connections, stop) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
        let (count, done) = (connections.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((mut s, _)) => {
                        count.fetch_add(1, Ordering::SeqCst);
                        let _ = s.write_all(text.as_bytes());
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        Bus { connections, stop, thread: Some(thread) }
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Every file under `dir` holding `needle`, but those of `skip`.
fn files_holding(dir: &Path, needle: &str, skip: &[PathBuf]) -> Vec<PathBuf> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file() && !skip.iter().any(|s| e.path().starts_with(s)))
        .filter(|e| std::fs::read(e.path()).is_ok_and(|b| contains_bytes(&b, needle.as_bytes())))
        .map(|e| e.path().to_path_buf())
        .collect()
}

/// Every `.log` of `task`'s records, joined.
fn logs(p: &Project, task: &str) -> String {
    let mut files: Vec<PathBuf> = std::fs::read_dir(p.records(task))
        .map(|d| d.flatten().map(|e| e.path()).filter(|f| f.extension().is_some_and(|x| x == "log")).collect())
        .unwrap_or_default();
    files.sort();
    files
        .iter()
        .map(|f| format!("--- {}\n{}\n", f.display(), String::from_utf8_lossy(&std::fs::read(f).unwrap_or_default())))
        .collect()
}

const TASKS: &str = r#"// A read-only task and a code task (workspace-write), both of the thief.
task "peek" {
    goal "Look around."
    kind "explore"
    agent "thief-ro"
}

task "grab" {
    goal "Write src/loot-grab.txt."
    agent "thief-rw"
    max-iterations 1
    scope {
        path "src/**"
    }
    acceptance {
        run "ACCEPTANCE"
    }
}
"#;

/// A setup command, two agents (a read-only task's, a code task's) and an
/// acceptance command try every secret of HOME, the `sandbox { hide }`
/// folder, and the socket in the runtime folder: they find them empty or
/// unreadable, HOME itself stays visible (`~/.gitconfig`), both tasks
/// pass, and no secret text is anywhere a command could leave it.
fn secrets_are_hidden_from_every_command(env: Env) {
    if !sandboxed(env) {
        return;
    }
    let marker = unique_marker("secret");
    let runtime = tempfile::Builder::new().prefix("rt-").tempdir_in(outside_temp_dir()).unwrap();
    let sock = runtime.path().join("bus");
    let bus = Bus::start(sock.clone(), format!("SOCKET-{marker}\n"));
    // An ssh agent, outside the runtime folder (hidden as SSH_AUTH_SOCK
    // names it): a real one, which `ssh-add -l` asks.
    let agent_dir = tempfile::Builder::new().prefix("ssh-").tempdir_in(outside_temp_dir()).unwrap();
    let agent_sock = agent_dir.path().join("agent.ssh-agent");
    let started = std::process::Command::new("ssh-agent").arg("-a").arg(&agent_sock).output().expect("ssh-agent");
    let agent_pid: Option<i32> = String::from_utf8_lossy(&started.stdout)
        .split(';')
        .find_map(|part| part.trim().strip_prefix("SSH_AGENT_PID=").and_then(|p| p.parse().ok()));
    struct Kill(Option<i32>);
    impl Drop for Kill {
        fn drop(&mut self) {
            if let Some(pid) = self.0 {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM);
            }
        }
    }
    let _ssh_agent = Kill(agent_pid);
    assert!(agent_pid.is_some(), "ssh-agent did not start: {started:?}");
    let reachable = std::process::Command::new("ssh-add").arg("-l").env("SSH_AUTH_SOCK", &agent_sock).output().unwrap();
    assert_eq!(reachable.status.code(), Some(1), "the test's own ssh-add reaches the agent (no identities)");
    let sock_str = sock.to_str().unwrap().to_owned();
    let sockets = format!("{sock_str},{}", agent_sock.display());
    let pass = ["ATTACK_OUT", "SSH_AUTH_SOCK", "DBUS_SESSION_BUS_ADDRESS", "DOCKER_HOST"];
    let p = Test::trusted()
        .agent("thief-ro", "attacks/secrets.py", &["peek", &sockets], &pass)
        .agent("thief-rw", "attacks/secrets.py", &["grab", &sockets, "write"], &pass)
        .file("src/a.txt", "a\n")
        .build();
    let script = p.fixture_copy("agents/attacks/secrets.py").display().to_string();
    let acceptance = format!("python3 {script} acceptance {sockets}");
    p.file("tasks/t.kdl", TASKS.replace("ACCEPTANCE", &acceptance.replace('"', "\\\"")));
    p.edit(
        "cassist.kdl",
        "test #false\n",
        &format!(
            "test #false\nsetup \"python3 {script} setup {sockets}\"\nsandbox {{\n    hide \"~/work-secrets\" \"~/.cache/notes\"\n}}\n"
        ),
    );
    p.commit_all();
    for s in SECRETS {
        write(&p.home().join(s), format!("SECRET-{marker}-{s}\n"));
    }
    write(&p.home().join(".gitconfig"), "[user]\n    name = visible\n");

    let done = p
        .run(&[])
        .envs(env)
        .env("XDG_RUNTIME_DIR", runtime.path())
        .env("SSH_AUTH_SOCK", &agent_sock)
        .env("DBUS_SESSION_BUS_ADDRESS", format!("unix:path={sock_str}"))
        .env("DOCKER_HOST", format!("unix://{sock_str}"))
        .env("ATTACK_OUT", p.out_str())
        .exec();
    let log = format!("{}{}", logs(&p, "peek"), logs(&p, "grab"));
    assert_eq!(
        done.states(),
        crate::support::map(&[("peek", "passed"), ("grab", "passed")]),
        "{}\n{log}",
        done.transcript()
    );
    for phase in ["setup", "peek", "grab", "acceptance"] {
        assert!(log.contains(&format!("secrets {phase}: finished: yes")), "{phase} did not run its attacks:\n{log}");
        assert!(
            log.contains(&format!("secrets {phase}: .gitconfig: visible")),
            "{phase} does not see HOME's own files:\n{log}"
        );
    }
    let leaks: Vec<&str> = log.lines().filter(|l| l.contains(": GOT ")).collect();
    // Copy mode cannot keep a command from connecting to a unix socket
    // where Landlock lacks the rule for it (ABI < 9): there only the
    // socket's folder is unreadable.
    let socket_hidden = !copy_mode(env) || cassist_sandbox::sandbox::landlock_abi() >= 9;
    let leaks: Vec<&&str> =
        leaks.iter().filter(|l| socket_hidden || !(l.contains(": socket ") || l.contains(": ssh-add "))).collect();
    if socket_hidden {
        for phase in ["setup", "peek", "grab", "acceptance"] {
            // (The socket's path is redacted: SSH_AUTH_SOCK names it.)
            let asked = format!("secrets {phase}: ssh-add ");
            let refused =
                log.lines().any(|l| l.trim_start().starts_with(&asked) && l.contains(": refused (Error connecting"));
            assert!(refused, "{phase}'s ssh-add was not refused:\n{log}");
        }
    }
    assert!(leaks.is_empty(), "secrets read: {leaks:#?}\n{log}");
    if copy_mode(env) {
        assert!(log.contains("secrets grab: .netrc: refused (Permission denied)"), "{log}");
        assert!(log.contains("secrets grab: list work-secrets: refused (Permission denied)"), "{log}");
    } else {
        assert!(log.contains("secrets grab: .netrc: empty"), "{log}");
        assert!(log.contains("secrets setup: list .ssh: empty"), "{log}");
        assert!(log.contains("secrets acceptance: list work-secrets: empty"), "{log}");
    }
    if socket_hidden {
        assert_eq!(bus.connections.load(Ordering::SeqCst), 0, "a command reached the session bus:\n{log}");
    } else {
        eprintln!("note: Landlock ABI < 9: copy mode cannot refuse connections to the runtime folder's sockets here");
    }

    // The change holds what the agent found: nothing (but the socket's
    // answer where it cannot be refused).
    assert_eq!(strings(&done.task("grab")["changed_files"]), ["src/loot-grab.txt"]);
    let loot = p.read("src/loot-grab.txt");
    assert!(if socket_hidden { loot == "nothing\n" } else { !loot.contains("SECRET-") }, "{loot}");
    // No secret text anywhere: cassist's output, the project (records,
    // store, tree), HOME (the agents' state folders, the out folder) and
    // the temp folder of the run.
    let needles: Vec<String> = if socket_hidden {
        vec![format!("SECRET-{marker}"), format!("SOCKET-{marker}")]
    } else {
        vec![format!("SECRET-{marker}")]
    };
    let secrets: Vec<PathBuf> = SECRETS.iter().map(|s| p.home().join(s)).collect();
    for needle in &needles {
        assert!(!done.transcript().contains(needle.as_str()), "{}", done.transcript());
        for dir in [p.path(), p.home(), p.tmp()] {
            let found = files_holding(dir, needle, &secrets);
            assert!(found.is_empty(), "{needle} leaked into {found:#?}\n{log}");
        }
    }
}

in_both_modes!(secrets_are_hidden_from_every_command: no_command_reads_the_users_secrets, no_command_reads_the_users_secrets_in_copy_mode);

/// A folder under `/tmp` (a venv) holding `bin/tool`, a script that
/// prints `ran from the venv` and tries to write beside itself.
fn venv() -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix("cassist-venv-").tempdir_in("/tmp").unwrap();
    write_executable(
        &dir.path().join("bin/tool"),
        "#!/bin/sh\necho ran from the venv\nif touch \"$(dirname \"$0\")/written\" 2>/dev/null; then echo venv written; else echo venv read-only; fi\n",
    );
    dir
}

/// An acceptance command whose program lives under the private `/tmp`
/// fails saying it is not visible and what to add to cassist.kdl; with
/// `sandbox { read }` of that folder it runs, read-only.
#[test]
fn a_program_under_the_private_tmp_runs_once_read_and_is_named_when_not() {
    if !sandboxed(&[]) {
        return;
    }
    let venv = venv();
    let tool = venv.path().join("bin/tool");
    let task = format!(
        "task \"t\" {{\n    goal \"Change src.\"\n    agent \"edit\"\n    max-iterations 1\n    acceptance {{\n        run \"{}\"\n    }}\n}}\n",
        tool.display()
    );
    let p = Test::trusted()
        .kdl(&sh_agent_block("edit", "cat > /dev/null; echo b > src/b.txt"))
        .tasks(&task)
        .file("src/a.txt", "a\n")
        .build();
    let done = p.run(&[]).status(1).exec();
    let t = done.task("t");
    let reason = t["reason"].as_str().unwrap_or_default();
    let read = format!("add `sandbox {{ read \"{}\" }}` to cassist.kdl", venv.path().display());
    assert!(
        reason.contains("exit code 127")
            && reason.contains(&format!("{} is not visible in the sandbox", tool.display()))
            && reason.contains(&read),
        "{}",
        done.transcript()
    );

    p.edit("cassist.kdl", "test #false\n", &format!("test #false\nsandbox {{\n    read {:?}\n}}\n", venv.path()));
    let done = p.run(&[]).exec();
    assert_eq!(done.task("t")["state"], "passed", "{}", done.transcript());
    let log = std::fs::read_dir(p.path().join(".cassist/runs"))
        .unwrap()
        .flatten()
        .flat_map(|run| std::fs::read_dir(run.path().join("t")).into_iter().flatten().flatten())
        .filter(|f| f.file_name().to_string_lossy().starts_with("acceptance-"))
        .map(|f| std::fs::read_to_string(f.path()).unwrap_or_default())
        .collect::<String>();
    assert!(log.contains("ran from the venv") && log.contains("venv read-only"), "{log}");
    assert!(!venv.path().join("bin/written").exists());
}

/// `hide` wins over `read`: a folder named by both is hidden, and a
/// program in it is named as hidden.
#[test]
fn a_hidden_folder_stays_hidden_though_read_names_it() {
    if !sandboxed(&[]) {
        return;
    }
    let outside = tempfile::Builder::new().prefix("tools-").tempdir_in(outside_temp_dir()).unwrap();
    let tool = outside.path().join("bin/tool");
    write_executable(&tool, "#!/bin/sh\necho ran the hidden tool\n");
    let dir = outside.path().display();
    let task = format!(
        "task \"t\" {{\n    goal \"Change src.\"\n    agent \"edit\"\n    max-iterations 1\n    acceptance {{\n        run \"{}\"\n    }}\n}}\n",
        tool.display()
    );
    let p = Test::trusted()
        .kdl(&format!("sandbox {{\n    read \"{dir}\"\n    hide \"{dir}\"\n}}\n"))
        .kdl(&sh_agent_block("edit", "cat > /dev/null; echo b > src/b.txt"))
        .tasks(&task)
        .file("src/a.txt", "a\n")
        .build();
    let done = p.run(&[]).status(1).exec();
    let reason = done.task("t")["reason"].as_str().unwrap_or_default().to_owned();
    assert!(
        reason.contains(&format!("{} is not visible in the sandbox", tool.display()))
            && reason.contains("is hidden from every command"),
        "{}",
        done.transcript()
    );
    assert!(!done.transcript().contains("ran the hidden tool"));
}

/// A project's `network` and agents' `allow` may not name local,
/// private, link-local or metadata addresses, and sandbox paths must be
/// absolute: exit 2, each with its help, nothing written.
#[test]
fn local_hosts_and_relative_sandbox_paths_are_refused() {
    let task = "task \"t\" {\n    goal \"g\"\n}\n";
    for host in ["127.0.0.1", "169.254.169.254", "localhost", "10.0.0.5"] {
        for config in [
            format!("network {{\n    allow \"ok.example.com\" \"{host}\"\n}}\n"),
            format!("agent \"a\" {{\n    command \"a\"\n    allow \"{host}\"\n}}\n"),
        ] {
            let p = Test::new().config(&config).tasks(task).build();
            let out = p.cassist(&["check"]).status(2).stderr_has(&format!("`{host}` is a")).exec();
            // The help as one line, however the terminal wraps it.
            let said = out.stderr.split_whitespace().collect::<Vec<_>>().join(" ");
            for part in [
                "a project's files cannot allow it",
                "can only be allowed by the user, through the environment variable CASSIST_NETWORK_ALLOW, never by the project's files",
            ] {
                assert!(said.contains(part), "{config}: no {part:?} in\n{}", out.stderr);
            }
            assert!(!p.exists(".cassist"), "{config}");
        }
    }
    let p = Test::new().config("sandbox {\n    read \"venv\"\n}\n").tasks(task).build();
    let out = p.cassist(&["check"]).status(2).stderr_has("`venv` is not an absolute path").exec();
    let said = out.stderr.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        said.contains("write an absolute path") && said.contains("or one under your home folder (`read \"~/sdk\"`)"),
        "{}",
        out.stderr
    );
    assert!(!p.exists(".cassist"));
}

/// A task whose network allow-list or sandbox paths changed runs again,
/// saying why; with neither block, nothing changes.
#[test]
fn a_changed_allow_list_or_sandbox_path_reruns_with_the_reason() {
    let p = Test::trusted()
        .kdl(&sh_agent_block("edit", "cat > /dev/null; echo b >> src/b.txt"))
        .tasks("task \"t\" {\n    goal \"Change src.\"\n    agent \"edit\"\n    acceptance {\n        run \"true\"\n    }\n}\n")
        .file("src/a.txt", "a\n")
        .build();
    p.run(&[]).exec();
    assert_eq!(p.plan_states(), crate::support::map(&[("t", "up-to-date")]));
    for (block, reason) in [
        ("network {\n    allow \"packages.example.com\"\n}\n", "network allow-list changed"),
        ("network {\n    allow \"mirror.example.org\"\n}\n", "network allow-list changed"),
        ("sandbox {\n    read \"/opt/toolchains\"\n}\n", "sandbox paths changed"),
    ] {
        let config = p.read("cassist.kdl");
        let base = config.split("network {").next().unwrap().split("sandbox {").next().unwrap().to_owned();
        p.file("cassist.kdl", format!("{base}{block}"));
        assert_eq!(p.plan_states(), crate::support::map(&[("t", "run")]), "{block}");
        let why = p.explain("t");
        assert!(why.contains(reason), "{block}: {why}");
        p.run(&[]).exec();
        assert_eq!(p.plan_states(), crate::support::map(&[("t", "up-to-date")]), "{block}");
    }
}

/// A script that connects to the Docker socket and says whether it got in.
const DOCKER: &str = r#"import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect("/run/docker.sock")
    print(f"docker {sys.argv[1]}: GOT in", flush=True)
except OSError as e:
    print(f"docker {sys.argv[1]}: refused ({e.strerror or e})", flush=True)
"#;

/// The Docker socket (root's door to the machine) is out of reach of
/// setup, the agent and acceptance, in both modes. Where the machine has
/// none and the test runs as root, the test listens there itself for its
/// length, counting connections.
#[test]
fn the_docker_socket_is_out_of_reach() {
    if !sandbox_or_skip(Sandbox::Landlock) {
        return;
    }
    let path = Path::new("/run/docker.sock");
    let _own = if path.exists() {
        None
    } else if nix::unistd::getuid().is_root() && Path::new("/run").is_dir() {
        Some(Bus::start(path.to_path_buf(), "docker\n".into()))
    } else {
        eprintln!("SKIPPED: no /run/docker.sock here, and only root may make one");
        return;
    };
    struct Remove(bool);
    impl Drop for Remove {
        fn drop(&mut self) {
            if self.0 {
                let _ = std::fs::remove_file("/run/docker.sock");
            }
        }
    }
    let _remove = Remove(_own.is_some());
    let p = Test::trusted().file("src/a.txt", "a\n").build();
    let script = p.fixture_copy("agents/attacks/secrets.py").with_file_name("docker.py");
    std::fs::write(&script, DOCKER).unwrap();
    let script = script.display().to_string();
    p.file(
        "cassist.kdl",
        format!(
            "trust \"workspace-write\"\ntest #false\nsetup \"python3 {script} setup\"\n\
             agent \"door\" {{\n    command \"sh\" \"-c\" \"python3 {script} agent; echo x > src/a.txt\"\n}}\n"
        ),
    );
    p.file(
        "tasks/t.kdl",
        format!(
            "task \"t\" {{\n    agent \"door\"\n    goal \"Knock.\"\n    max-iterations 1\n    scope {{\n        path \"src/**\"\n    }}\n    \
             acceptance {{\n        run \"python3 {script} acceptance\"\n    }}\n}}\n"
        ),
    );
    p.commit_all();
    // With namespaces first: no connection may reach the test's socket.
    let mut modes: Vec<Env> = Vec::new();
    if sandbox_or_skip(Sandbox::Overlay) {
        modes.push(&[]);
    }
    modes.push(crate::support::COPY);
    for env in modes {
        let done = p.run(&["--no-cache"]).envs(env).exec();
        assert_eq!(done.task("t")["state"], "passed", "{}", done.transcript());
        let log = logs(&p, "t");
        for phase in ["setup", "agent", "acceptance"] {
            let said: Vec<&str> =
                log.lines().filter(|l| l.trim_start().starts_with(&format!("docker {phase}:"))).collect();
            assert!(!said.is_empty(), "{phase} did not knock:\n{log}");
            // Copy mode refuses a socket's connection only where Landlock
            // has the rule for it (ABI >= 9).
            if copy_mode(env) && cassist_sandbox::sandbox::landlock_abi() < 9 {
                eprintln!("note: Landlock ABI < 9: copy mode cannot refuse connections to the Docker socket here");
                continue;
            }
            assert!(said.iter().all(|l| l.contains("refused")), "{phase} got in ({env:?}):\n{log}");
        }
        std::fs::remove_dir_all(p.path().join(".cassist/runs")).unwrap();
        let refusable = !copy_mode(env) || cassist_sandbox::sandbox::landlock_abi() >= 9;
        if let Some(bus) = _own.as_ref().filter(|_| refusable) {
            assert_eq!(bus.connections.load(Ordering::SeqCst), 0, "a command reached the Docker socket ({env:?})");
        }
    }
}
