//! The harness of the real remote-cache servers works (issue 15): each
//! server starts on loopback, stores and serves bytes through its own
//! protocol, refuses bad credentials, dies when killed, and leaves no
//! process or file behind. The cassist scenarios against them live in the
//! remote-cache areas.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::{S3Server, SilentServer, TurboServer, curl, curl_with_body};

/// Whether process `pid` is gone (or only a zombie left to reap).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

/// curl arguments signing a request as `user` (`KEY:SECRET`).
fn as_user<'a>(user: &'a str, args: &[&'a str]) -> Vec<&'a str> {
    let mut all = vec!["--aws-sigv4", "aws:amz:us-east-1:s3", "--user", user];
    all.extend_from_slice(args);
    all
}

#[track_caller]
fn assert_refuses(port: u16) {
    let (code, _) = curl(&["--max-time", "2", &format!("http://127.0.0.1:{port}/")]);
    assert_eq!(code, 0, "port {port} still answers");
}

#[test]
fn s3_server_stores_serves_and_checks_credentials() {
    let Some(mut s3) = S3Server::start() else { return };
    let key = "smoke/objects/abc";
    assert_eq!(s3.get(key), None);
    s3.put(key, b"hello\0bytes");
    assert_eq!(s3.get(key).as_deref(), Some(&b"hello\0bytes"[..]));
    s3.put("smoke/entries/e1", b"{}");
    assert_eq!(s3.keys("smoke/"), ["smoke/entries/e1", "smoke/objects/abc"]);
    assert_eq!(s3.keys("smoke/objects/"), ["smoke/objects/abc"]);
    s3.delete("smoke/entries/e1");
    assert_eq!(s3.keys("smoke/entries/"), Vec::<String>::new());

    // The read-only identity reads and may not write; a wrong secret and
    // no signature are refused.
    let url = format!("{}/{}/{key}", s3.endpoint(), S3Server::BUCKET);
    let reader = format!("{}:{}", S3Server::READER_ACCESS_KEY, S3Server::READER_SECRET_KEY);
    assert_eq!(curl(&as_user(&reader, &[&url])), (200, b"hello\0bytes".to_vec()));
    assert_eq!(curl_with_body(&as_user(&reader, &[&url]), b"evil").0, 403);
    let wrong = format!("{}:wrong", S3Server::ACCESS_KEY);
    assert_eq!(curl(&as_user(&wrong, &[&url])).0, 403);
    assert_eq!(curl(&[&url]).0, 403);
    assert_eq!(s3.get(key).as_deref(), Some(&b"hello\0bytes"[..]), "the reader's write changed nothing");

    // What a cassist command under test is given.
    let env = s3.env();
    assert!(env.contains(&("AWS_ENDPOINT_URL", s3.endpoint())), "{env:?}");
    assert!(s3.reader_env().contains(&("AWS_ACCESS_KEY_ID", S3Server::READER_ACCESS_KEY.to_owned())));
    assert_eq!(
        s3.remote_kdl("team"),
        format!(r#"remote "s3://cassist/team" endpoint="http://127.0.0.1:{}" region="us-east-1""#, s3.port)
    );
    assert!(s3.folder().join("data").is_dir(), "log:\n{}", s3.log());

    // Killed: its ports refuse at once.
    let pid = s3.pid();
    s3.kill();
    assert!(gone(pid), "weed still runs");
    for &port in s3.ports() {
        assert_refuses(port);
    }
}

#[test]
fn turbo_server_stores_serves_and_checks_the_token() {
    let Some(mut turbo) = TurboServer::start() else { return };
    assert_eq!(turbo.get("objects--abc"), None);
    turbo.put("objects--abc", b"hello\0bytes");
    assert_eq!(turbo.get("objects--abc").as_deref(), Some(&b"hello\0bytes"[..]));
    assert_eq!(turbo.ids(), ["objects--abc"]);

    let url = format!("{}/v8/artifacts/objects--abc?slug={}", turbo.http(), TurboServer::TEAM);
    assert_eq!(curl(&["-I", "-H", &format!("Authorization: Bearer {}", TurboServer::TOKEN), &url]).0, 200);
    assert_eq!(curl(&["-H", "Authorization: Bearer wrong", &url]).0, 401);
    assert!(matches!(curl(&[&url]).0, 400 | 401), "no token accepted");
    // The server needs the team on every artifact request.
    let no_team = format!("{}/v8/artifacts/objects--abc", turbo.http());
    assert_eq!(curl(&["-H", &format!("Authorization: Bearer {}", TurboServer::TOKEN), &no_team]).0, 400);
    assert_eq!(turbo.url(), format!("turbo+http://127.0.0.1:{}", turbo.port));
    assert_eq!(turbo.remote_kdl(), format!(r#"remote "{}" team="cassist""#, turbo.url()));
    assert_eq!(turbo.env(), [("TURBO_TOKEN", TurboServer::TOKEN.to_owned())]);
    assert!(!turbo.log().contains("ERROR"), "{}", turbo.log());

    let pid = turbo.pid();
    turbo.kill();
    assert!(gone(pid), "turborepo-remote-cache still runs");
    assert_refuses(turbo.port);
}

#[test]
fn silent_server_accepts_and_never_answers() {
    let silent = SilentServer::start();
    let started = Instant::now();
    let (code, body) = curl(&["--max-time", "1", &silent.http()]);
    assert_eq!((code, body.len()), (0, 0), "it answered");
    assert!(started.elapsed() >= Duration::from_millis(900), "curl gave up before its timeout");
    assert_eq!(silent.connections(), 1);
}

/// Dropping a server kills it and removes its folder and the sockets it
/// left in /tmp; a server whose starting thread ends dies with it (its
/// parent-death signal), so a test that panics leaves none behind.
#[test]
fn servers_leave_nothing_behind() {
    let Some(s3) = S3Server::start() else { return };
    let pid = s3.pid();
    let sockets: Vec<String> = std::fs::read_dir("/tmp")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("seaweedfs-") && s3.ports().iter().any(|p| n.ends_with(&format!("-{p}.sock"))))
        .collect();
    assert!(!sockets.is_empty(), "weed made no gRPC sockets in /tmp: the cleanup list is out of date");
    drop(s3);
    assert!(gone(pid));
    for s in &sockets {
        assert!(!Path::new("/tmp").join(s).exists(), "/tmp/{s} left behind");
    }

    // Started by a thread that ends without dropping it (as a panicking
    // test's thread may leak it).
    let Some((pid, folder)) = std::thread::spawn(|| {
        let turbo = TurboServer::start()?;
        let found = (turbo.pid(), turbo.folder().to_path_buf());
        std::mem::forget(turbo);
        Some(found)
    })
    .join()
    .unwrap() else {
        return;
    };
    crate::support::wait_until(Duration::from_secs(10), "the orphaned server dies", || gone(pid));
    std::fs::remove_dir_all(folder).unwrap();
}
