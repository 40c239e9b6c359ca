//! The network attack suite: every command of a task below `full` has a
//! network namespace of its own whose only way out is cassist's egress
//! proxy. A malicious fixture (`fixtures/agents/attacks/network.py`) run as
//! setup, as the agent of a read-only and of a workspace-write task, and as
//! an acceptance command tries to reach a server of the test on the
//! machine's loopback (directly, through the proxy, through a CONNECT
//! tunnel, by name) and the cloud metadata address; the server must receive
//! nothing. The same server opened by the user (`CASSIST_NETWORK_ALLOW`) is
//! reached, the metadata address never; a command that fails on a refusal
//! fails its task at once, naming the host, and is never fed back to the
//! agent. Out of scope, by design: what an allowed host is sent (its path,
//! its body) and DNS, which a command cannot use at all (it has no
//! resolver).
//!
//! Copy mode has no network namespace: cassist says so once, and the
//! suite checks that it does.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::{Project, Sandbox, Test, sandbox_or_skip, unique_marker};

/// A server on the machine's loopback that keeps every byte it receives.
struct Server {
    port: u16,
    received: Arc<Mutex<Vec<u8>>>,
}

impl Server {
    fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let keep = received.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
                let mut buf = [0u8; 4096];
                if let Ok(n) = conn.read(&mut buf) {
                    keep.lock().unwrap().extend_from_slice(&buf[..n]);
                }
                let _ = conn.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nok\n");
            }
        });
        Server { port, received }
    }

    fn received(&self) -> String {
        String::from_utf8_lossy(&self.received.lock().unwrap()).into_owned()
    }
}

/// The probe's verdicts in `text`: "ROLE PROBE" → "ALLOWED" or
/// "refused (...)".
fn verdicts(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("network: "))
        .filter(|l| !l.ends_with(" finished"))
        .filter_map(|l| {
            let mut words = l.splitn(3, ' ');
            let (role, probe, verdict) = (words.next()?, words.next()?, words.next()?);
            Some((format!("{role} {probe}"), verdict.to_owned()))
        })
        .collect()
}

/// A trusted project whose agent `probe` runs the network fixture as
/// `agent`; `config` goes into `cassist.kdl`, `tasks` into `tasks/t.kdl`.
fn project(config: &str, tasks: &str) -> (Project, String) {
    let p = Test::new().outside_tmp().file("README.md", "a project\n").build();
    let probe = p.fixture_copy("agents/attacks/network.py").display().to_string();
    let config = config.replace("PROBE", &probe);
    p.file("cassist.kdl", format!("trust \"workspace-write\"\ntest #false\n{config}"));
    p.file("tasks/t.kdl", tasks.replace("PROBE", &probe));
    (p, probe)
}

fn agent_block(probe: &str, port: u16, extra: &str) -> String {
    format!(
        "agent \"probe\" {{\n    command \"python3\" {probe:?} \"agent\" \"{port}\" {extra}\n    pass-env \"NETWORK_MARKER\"\n}}\n"
    )
}

#[test]
fn no_command_reaches_the_machines_loopback_or_the_metadata_service() {
    if !sandbox_or_skip(Sandbox::Overlay) {
        return;
    }
    let server = Server::start();
    let port = server.port;
    let marker = unique_marker("network");
    let tasks = format!(
        "task \"look\" {{\n    kind \"explore\"\n    agent \"probe\"\n    max-iterations 1\n    goal \"Look.\"\n}}\n\
         task \"write\" {{\n    agent \"probe\"\n    max-iterations 1\n    goal \"Write.\"\n    scope {{\n        path \"out.txt\"\n    }}\n    \
         acceptance {{\n        run \"python3 PROBE acceptance {port}\"\n    }}\n}}\n"
    );
    let (p, probe) = project("", "");
    let config =
        format!("setup \"python3 {probe} setup {port}\"\n{}", agent_block(&probe, port, "\"--write\" \"out.txt\""));
    p.file("cassist.kdl", format!("trust \"workspace-write\"\ntest #false\n{config}"));
    p.file("tasks/t.kdl", tasks.replace("PROBE", &probe));
    p.commit_all();
    let out = p.run(&[]).env("NETWORK_MARKER", &marker).exec();
    let mut text = out.transcript();
    for t in ["look", "write"] {
        for f in std::fs::read_dir(p.records(t)).unwrap() {
            let f = f.unwrap().path();
            if f.extension().is_some_and(|e| e == "log") {
                text.push_str(&std::fs::read_to_string(&f).unwrap());
            }
        }
    }
    let v = verdicts(&text);
    for role in ["setup", "agent", "acceptance"] {
        for probe in ["direct", "proxied", "tunnel", "host-name", "metadata", "metadata-direct", "dns"] {
            let what = format!("{role} {probe}");
            assert!(v.iter().any(|(w, _)| *w == what), "{what} was not tried:\n{text}");
        }
    }
    let allowed: Vec<&(String, String)> = v.iter().filter(|(_, verdict)| verdict == "ALLOWED").collect();
    assert!(allowed.is_empty(), "these got out: {allowed:?}\n{text}");
    // The proxy said why: the loopback is the user's to open, the
    // metadata service nobody's.
    assert!(text.contains("HTTP 403"), "{text}");
    assert_eq!(server.received(), "", "the server received something");
    assert!(!server.received().contains(&marker));
    // Both tasks passed (their commands do not need the network), and
    // what was refused is named in their records.
    for t in ["look", "write"] {
        assert_eq!(out.task(t)["state"], "passed", "{text}");
    }
    let record = p.record("write", "network.json");
    assert!(record.contains("\"127.0.0.1\"") && record.contains("169.254.169.254"), "{record}");
    assert_eq!(p.read("out.txt"), "written by agent\n");
}

/// A project whose agent `probe` runs the network fixture, with one code
/// task `t` (acceptance `acceptance`, if any).
fn probe_project(port: u16, agent_extra: &str, acceptance: Option<&str>) -> (Project, String) {
    let (p, probe) = project("", "");
    let acceptance = acceptance
        .map(|a| format!("    acceptance {{\n        run {:?}\n    }}\n", a.replace("PROBE", &probe)))
        .unwrap_or_default();
    p.file(
        "cassist.kdl",
        format!("trust \"workspace-write\"\ntest #false\n{}", agent_block(&probe, port, agent_extra)),
    );
    p.file(
        "tasks/t.kdl",
        format!(
            "task \"t\" {{\n    agent \"probe\"\n    max-iterations 3\n    goal \"Write.\"\n    scope {{\n        path \"out.txt\"\n    }}\n{acceptance}}}\n"
        ),
    );
    p.commit_all();
    (p, probe)
}

#[test]
fn a_loopback_server_the_user_opens_is_reached_through_the_proxy_and_the_metadata_service_never() {
    if !sandbox_or_skip(Sandbox::Overlay) {
        return;
    }
    let server = Server::start();
    let marker = unique_marker("network");
    let (p, _) = probe_project(server.port, "\"--write\" \"out.txt\"", None);
    let allow = format!("127.0.0.1:{},169.254.169.254", server.port);
    let out = p.run(&[]).env("NETWORK_MARKER", &marker).env("CASSIST_NETWORK_ALLOW", &allow).exec();
    let text = format!("{}{}", out.transcript(), p.record("t", "transcript-1.log"));
    let v: std::collections::BTreeMap<String, String> = verdicts(&text).into_iter().collect();
    assert_eq!(v["agent proxied"], "ALLOWED", "{text}");
    assert_eq!(v["agent tunnel"], "ALLOWED", "{text}");
    // Its own loopback is not the machine's.
    assert!(v["agent direct"].starts_with("refused"), "{text}");
    // `localhost` was not named.
    assert!(v["agent host-name"].starts_with("refused"), "{text}");
    // Not even the user opens the metadata service.
    assert!(v["agent metadata"].starts_with("refused (HTTP 403"), "{text}");
    let got = server.received();
    assert!(got.contains(&format!("/{marker}/agent/proxied")), "{got}");
    assert!(got.contains(&format!("/{marker}/agent/tunnel")), "{got}");
    assert!(!got.contains("/direct") && !got.contains("/host-name"), "{got}");
    assert_eq!(out.task("t")["state"], "passed");
}

#[test]
fn a_command_that_fails_on_a_refusal_fails_its_task_at_once_naming_the_host() {
    if !sandbox_or_skip(Sandbox::Overlay) {
        return;
    }
    let server = Server::start();
    let marker = unique_marker("network");
    let (p, _) = probe_project(
        server.port,
        "\"--write\" \"out.txt\"",
        Some(&format!("python3 PROBE acceptance {} --must-reach", server.port)),
    );
    let out = p.run(&[]).env("NETWORK_MARKER", &marker).status(1).exec();
    let t = out.task("t");
    assert_eq!(t["state"], "failed", "{}", out.transcript());
    // Not fed back to the agent: one attempt of three.
    assert_eq!(t["attempts"], 1, "{t}");
    let reason = t["reason"].as_str().unwrap();
    assert!(
        reason.contains("network refused: 127.0.0.1")
            && reason.contains("network { allow \"127.0.0.1\" }")
            && reason.contains("CASSIST_NETWORK_ALLOW"),
        "{reason}"
    );
    assert!(!p.exists("out.txt"), "nothing integrated");
    assert_eq!(server.received(), "");
    let record: serde_json::Value = serde_json::from_str(&p.record("t", "network.json")).unwrap();
    assert!(record["refused"]["127.0.0.1"].as_u64().unwrap() >= 2, "{record}");
}

#[test]
fn an_up_to_date_run_starts_no_proxy() {
    if !sandbox_or_skip(Sandbox::Overlay) {
        return;
    }
    let (p, _) = probe_project(9, "\"--write\" \"out.txt\"", None);
    p.run(&[]).env("CASSIST_TIMINGS", "1").stderr_has("egress proxy started").exec();
    p.run(&[]).env("CASSIST_TIMINGS", "1").stderr_lacks("egress proxy started").stdout_has("up-to-date").exec();
}

#[test]
fn the_machines_network_is_the_users_choice_and_is_said() {
    if !sandbox_or_skip(Sandbox::Overlay) {
        return;
    }
    let server = Server::start();
    let (p, _) = probe_project(server.port, "\"--write\" \"out.txt\"", None);
    let out = p
        .run(&[])
        .env("NETWORK_MARKER", "host-network")
        .env("CASSIST_NETWORK", "host")
        .stderr_has("CASSIST_NETWORK=host: the commands of tasks have the machine's network")
        .exec();
    let text = p.record("t", "transcript-1.log");
    assert!(text.contains("network: agent direct ALLOWED"), "{text}");
    assert!(server.received().contains("/host-network/agent/direct"));
    assert_eq!(out.task("t")["state"], "passed");
}

#[test]
fn copy_mode_says_that_commands_keep_the_machines_network() {
    let (p, _) = probe_project(9, "\"--write\" \"out.txt\"", None);
    p.run(&[])
        .envs(crate::support::COPY)
        .stderr_has("a network of their own: they reach any host, the machine's loopback services included")
        .exec();
}

#[test]
fn a_bad_allow_variable_is_an_error_before_anything_runs() {
    let (p, _) = probe_project(9, "\"--write\" \"out.txt\"", None);
    let out = p.run(&[]).env("CASSIST_NETWORK_ALLOW", "127.0.0.1:9000,not_a_host").status(2).exec();
    assert!(out.transcript().contains("CASSIST_NETWORK_ALLOW holds entries that are not hosts: not_a_host"));
    let out = p.run(&[]).env("CASSIST_NETWORK", "none").status(2).exec();
    assert!(out.transcript().contains("CASSIST_NETWORK is `none`; the only value it takes is `host`"));
    assert!(!p.exists("out.txt"));
    assert!(
        !p.path().join(".cassist/runs").exists()
            || std::fs::read_dir(p.path().join(".cassist/runs")).unwrap().count() == 0
    );
}

/// A script that asks the proxy for a tunnel to each host of its
/// arguments and prints "tunnel HOST: STATUS LINE".
const ASK: &str = r#"import os, socket, sys, urllib.parse
p = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
for host in sys.argv[1:]:
    with socket.create_connection((p.hostname, p.port), timeout=20) as s:
        s.sendall(f"CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n".encode())
        print(f"tunnel {host}: {s.recv(200).decode().splitlines()[0]}", flush=True)
"#;

#[test]
fn the_projects_hosts_are_let_through_by_role_and_the_others_refused() {
    if !sandbox_or_skip(Sandbox::Overlay) {
        return;
    }
    let p = Test::new().outside_tmp().file("README.md", "a project\n").build();
    let ask = p.fixture_copy("agents/attacks/network.py").with_file_name("ask.py");
    std::fs::write(&ask, ASK).unwrap();
    let ask = ask.display().to_string();
    let hosts = "pkg.example.invalid api.example.invalid other.example.invalid";
    p.file(
        "cassist.kdl",
        format!(
            "trust \"workspace-write\"\ntest #false\nnetwork {{\n    allow \"pkg.example.invalid\"\n}}\n\
             agent \"asker\" {{\n    command \"sh\" \"-c\" \"python3 {ask} {hosts}; echo done > out.txt\"\n    allow \"api.example.invalid\"\n}}\n"
        ),
    );
    p.file(
        "tasks/t.kdl",
        format!(
            "task \"t\" {{\n    agent \"asker\"\n    max-iterations 1\n    goal \"Ask.\"\n    scope {{\n        path \"out.txt\"\n    }}\n    \
             acceptance {{\n        run \"python3 {ask} {hosts}\"\n    }}\n}}\n"
        ),
    );
    p.commit_all();
    let out = p.run(&[]).exec();
    assert_eq!(out.task("t")["state"], "passed", "{}", out.transcript());
    let agent = p.record("t", "transcript-1.log");
    let acceptance = p.record("t", "acceptance-1-1.log");
    // Let through (then unresolvable offline: 502), or refused (403).
    assert!(agent.contains("tunnel pkg.example.invalid: HTTP/1.1 502"), "{agent}");
    assert!(agent.contains("tunnel api.example.invalid: HTTP/1.1 502"), "{agent}");
    assert!(agent.contains("tunnel other.example.invalid: HTTP/1.1 403"), "{agent}");
    assert!(acceptance.contains("tunnel pkg.example.invalid: HTTP/1.1 502"), "{acceptance}");
    // The agent's API is the agent's only.
    assert!(acceptance.contains("tunnel api.example.invalid: HTTP/1.1 403"), "{acceptance}");
    assert!(acceptance.contains("tunnel other.example.invalid: HTTP/1.1 403"), "{acceptance}");
    let record: serde_json::Value = serde_json::from_str(&p.record("t", "network.json")).unwrap();
    let refused: Vec<&String> = record["refused"].as_object().unwrap().keys().collect();
    assert_eq!(refused, ["api.example.invalid", "other.example.invalid"], "{record}");
}
