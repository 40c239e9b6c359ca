//! One `cassist` command: its arguments and environment, what it must end
//! with (exit code, stdout and stderr, files), and how it is run: to its
//! end ([`Cmd::exec`]), in the background ([`Cmd::spawn`]), on a
//! pseudo-terminal ([`Cmd::on_tty`]), or handed over as a
//! [`std::process::Command`] ([`Cmd::command`]) when a test needs more.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::CASSIST;

/// How long any command may take before the test fails as hung.
const HANG: Duration = Duration::from_secs(600);

/// What a stream must (not) hold.
#[derive(Clone)]
enum Check {
    Is(String),
    Has(String),
    Lacks(String),
}

#[derive(Clone, Copy)]
enum Stream {
    Stdout,
    Stderr,
}

/// A `cassist` command and its expectations.
#[must_use]
pub struct Cmd {
    cwd: PathBuf,
    args: Vec<OsString>,
    env: BTreeMap<OsString, Option<OsString>>,
    /// Started as the leader of a process group of its own.
    own_group: bool,
    /// The cassist binary to run, when not the one cargo built.
    program: Option<PathBuf>,
    expect: Expect,
}

impl Cmd {
    /// `cassist ARGS` in `root`, with PATH (this process's) and
    /// NO_COLOR=1 only, expecting exit 0.
    pub(super) fn new(root: &Path, args: &[&str]) -> Cmd {
        let expect = Expect {
            root: root.to_path_buf(),
            report: None,
            status: Some(0),
            streams: Vec::new(),
            files: Vec::new(),
            label: String::new(),
        };
        let mut cmd = Cmd {
            cwd: root.to_path_buf(),
            args: Vec::new(),
            env: BTreeMap::new(),
            own_group: false,
            program: None,
            expect,
        };
        cmd.args(args).env("PATH", std::env::var_os("PATH").unwrap_or_default()).env("NO_COLOR", "1");
        cmd
    }

    pub fn args(&mut self, args: &[&str]) -> &mut Cmd {
        self.args.extend(args.iter().map(OsString::from));
        self
    }

    /// `--report-json PATH` (the file is removed now, and read into
    /// [`Output::report`] after the command).
    pub fn report(&mut self, path: &Path) -> &mut Cmd {
        let _ = std::fs::remove_file(path);
        self.args.extend(["--report-json".into(), path.into()]);
        self.expect.report = Some(path.to_path_buf());
        self
    }

    pub fn env(&mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> &mut Cmd {
        self.env.insert(key.as_ref().to_owned(), Some(value.as_ref().to_owned()));
        self
    }

    pub fn envs<K: AsRef<OsStr>, V: AsRef<OsStr>>(&mut self, vars: &[(K, V)]) -> &mut Cmd {
        for (k, v) in vars {
            self.env(k, v);
        }
        self
    }

    /// Leaves `key` out of the environment.
    pub fn unset(&mut self, key: &str) -> &mut Cmd {
        self.env.insert(key.into(), None);
        self
    }

    /// Puts `dirs` first on PATH.
    pub fn path_first(&mut self, dirs: &[&Path]) -> &mut Cmd {
        let mut path: Vec<PathBuf> = dirs.iter().map(|d| d.to_path_buf()).collect();
        path.extend(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()));
        self.env("PATH", std::env::join_paths(path).unwrap())
    }

    /// Starts it as the leader of a process group of its own (not in the
    /// test's), for a test whose agents signal cassist's group.
    pub fn own_process_group(&mut self) -> &mut Cmd {
        self.own_group = true;
        self
    }

    /// Runs the cassist binary at `path` (a copy installed elsewhere)
    /// instead of the one cargo built.
    pub fn program(&mut self, path: &Path) -> &mut Cmd {
        self.program = Some(path.to_path_buf());
        self
    }

    /// Runs in `dir` instead of the project folder.
    pub fn current_dir(&mut self, dir: &Path) -> &mut Cmd {
        self.cwd = dir.to_path_buf();
        self
    }

    /// The exit code it must end with (0 unless said).
    pub fn status(&mut self, code: i32) -> &mut Cmd {
        self.expect.status = Some(code);
        self
    }

    /// Whatever it exits with (the test looks at it itself).
    pub fn any_status(&mut self) -> &mut Cmd {
        self.expect.status = None;
        self
    }

    /// Names the case in failure messages (for tests that loop over cases).
    pub fn label(&mut self, what: &str) -> &mut Cmd {
        self.expect.label = format!("{what}: ");
        self
    }

    fn check(&mut self, stream: Stream, check: Check) -> &mut Cmd {
        self.expect.streams.push((stream, check));
        self
    }

    /// Its whole stdout.
    pub fn stdout(&mut self, text: &str) -> &mut Cmd {
        self.check(Stream::Stdout, Check::Is(text.into()))
    }

    pub fn stdout_has(&mut self, text: &str) -> &mut Cmd {
        self.check(Stream::Stdout, Check::Has(text.into()))
    }

    pub fn stdout_lacks(&mut self, text: &str) -> &mut Cmd {
        self.check(Stream::Stdout, Check::Lacks(text.into()))
    }

    /// Its whole stderr.
    pub fn stderr(&mut self, text: &str) -> &mut Cmd {
        self.check(Stream::Stderr, Check::Is(text.into()))
    }

    pub fn stderr_has(&mut self, text: &str) -> &mut Cmd {
        self.check(Stream::Stderr, Check::Has(text.into()))
    }

    pub fn stderr_lacks(&mut self, text: &str) -> &mut Cmd {
        self.check(Stream::Stderr, Check::Lacks(text.into()))
    }

    /// The project file `rel` must hold `text` afterwards.
    pub fn file(&mut self, rel: &str, text: &str) -> &mut Cmd {
        self.expect.files.push((rel.to_owned(), Some(text.to_owned())));
        self
    }

    /// The project file `rel` must not exist afterwards.
    pub fn no_file(&mut self, rel: &str) -> &mut Cmd {
        self.expect.files.push((rel.to_owned(), None));
        self
    }

    /// The process to run, for a test that needs more than this type
    /// offers: stdin null, stdout and stderr as the caller sets them.
    pub fn command(&self) -> Command {
        self.command_with(&[])
    }

    /// `PREFIX... cassist ARGS` with the command's folder and environment.
    fn command_with(&self, prefix: &[&OsStr]) -> Command {
        let (program, first): (&OsStr, &[&OsStr]) = match prefix.split_first() {
            Some((p, rest)) => (p, rest),
            None => (self.program.as_deref().map_or(OsStr::new(CASSIST), Path::as_os_str), &[]),
        };
        let mut cmd = Command::new(program);
        cmd.args(first);
        if !prefix.is_empty() {
            cmd.arg(self.program.as_deref().map_or(OsStr::new(CASSIST), Path::as_os_str));
        }
        cmd.args(&self.args).current_dir(&self.cwd).env_clear().stdin(Stdio::null());
        if self.own_group {
            std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        }
        for (k, v) in &self.env {
            if let Some(v) = v {
                cmd.env(k, v);
            }
        }
        cmd
    }

    /// Runs it to its end and checks what it must end with.
    #[track_caller]
    pub fn exec(&self) -> Output {
        self.spawn().finish()
    }

    /// Starts it with stdout and stderr read as they come.
    pub fn spawn(&self) -> Running {
        let started = Instant::now();
        let mut child = self.command().stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start cassist");
        let stdout = Lines::read(child.stdout.take().unwrap());
        let stderr = Lines::read(child.stderr.take().unwrap());
        let pid = child.id();
        let (tx, exited) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        Running { expect: self.expect.clone(), pid, exited, stdout, stderr, started }
    }

    /// Runs it on a pseudo-terminal (Python's `pty`, which the fake agents
    /// need anyway); stdout is everything written to the terminal.
    #[track_caller]
    pub fn on_tty(&self) -> Output {
        self.run_python(PTY, &["exec"])
    }

    /// Runs it from a user's interactive shell on a pseudo-terminal: the
    /// terminal's session leader runs cassist, then, as a shell reading its
    /// next command line would, runs every line typed on the terminal
    /// within a second after cassist ended (saying `[shell runs: LINE]`).
    /// Exits like cassist; stdout is everything written to the terminal.
    #[track_caller]
    pub fn on_tty_in_shell(&self) -> Output {
        self.run_python(PTY, &["shell"])
    }

    /// Runs it on a pseudo-terminal of `rows` × `cols` driven by `steps`,
    /// as a user at the keyboard: each step waits for text, types, sleeps
    /// or marks the moment ([`Key`]). Exits like cassist; what it wrote,
    /// and where the output stood after each step, come back in a [`Tty`]
    /// whose screens a terminal emulator (vt100) renders.
    #[track_caller]
    pub fn on_tty_keys(&self, rows: u16, cols: u16, steps: &[Key<'_>]) -> Tty {
        let steps: Vec<serde_json::Value> = steps
            .iter()
            .map(|s| match s {
                Key::WaitFor(t) => serde_json::json!(["wait", t]),
                Key::Type(t) => serde_json::json!(["send", t]),
                Key::Sleep(d) => serde_json::json!(["sleep", d.as_secs_f64()]),
            })
            .collect();
        let size = [rows.to_string(), cols.to_string(), serde_json::Value::from(steps).to_string()];
        let mut prefix = vec![OsStr::new("python3"), OsStr::new("-c"), OsStr::new(PTY_KEYS)];
        prefix.extend(size.iter().map(OsStr::new));
        let out = self.command_with(&prefix).output().expect("run python3");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let marks: Vec<(usize, f64)> = stderr
            .lines()
            .last()
            .and_then(|l| serde_json::from_str(l).ok())
            .unwrap_or_else(|| panic!("no marks from the pty driver:\n{stderr}"));
        let tty = Tty { status: out.status, output: out.stdout, marks, rows, cols };
        if let Some(code) = self.expect.status {
            assert_eq!(tty.status.code(), Some(code), "exit code; the screen:\n{}", tty.screen().join("\n"));
        }
        tty
    }

    /// `python3 -c SCRIPT ARGS... cassist ARGS`, checked as the command.
    #[track_caller]
    fn run_python(&self, script: &str, args: &[&str]) -> Output {
        let started = Instant::now();
        let mut prefix = vec![OsStr::new("python3"), OsStr::new("-c"), OsStr::new(script)];
        prefix.extend(args.iter().map(OsStr::new));
        let out = self.command_with(&prefix).output().expect("run python3");
        let output = Output {
            status: out.status,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            report: self.expect.read_report(),
            elapsed: started.elapsed(),
        };
        self.expect.check(&output);
        output
    }

    /// Runs it to its end with stdout and stderr discarded; its exit status
    /// and peak RSS in KiB (its own, or that of a descendant it reaped,
    /// whichever is larger). Python forks the process that execs cassist:
    /// a process forked from this test binary would start with the test's
    /// own peak, which `ru_maxrss` keeps across exec.
    pub fn peak_rss(&self) -> (ExitStatus, i64) {
        const MEASURE: &str = r#"
import os, sys
pid = os.fork()
if pid == 0:
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(usage.ru_maxrss, flush=True)
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
"#;
        let prefix = [OsStr::new("python3"), OsStr::new("-c"), OsStr::new(MEASURE)];
        let out = self.command_with(&prefix).output().expect("run python3");
        let text = String::from_utf8_lossy(&out.stdout);
        let kib = text.trim().parse().unwrap_or_else(|_| panic!("no peak RSS from python3: {text:?}"));
        (out.status, kib)
    }
}

/// Python's `pty` running `MODE PROGRAM ARGS...` on a new terminal and
/// printing all it wrote there: `exec` runs the program as the terminal's
/// session leader; `shell` runs it from a session leader that then, like a
/// shell, runs each line typed on the terminal within a second.
const PTY: &str = r#"
import os, pty, select, subprocess, sys
mode, argv = sys.argv[1], sys.argv[2:]
pid, fd = pty.fork()
if pid == 0:
    if mode == "exec":
        os.execv(argv[0], argv)
    code = subprocess.call(argv)
    print("[cassist exited %d]" % code, flush=True)
    while select.select([0], [], [], 1.0)[0]:
        line = os.read(0, 4096).decode(errors="replace").strip()
        if not line:
            break
        print("[shell runs: %s]" % line, flush=True)
        subprocess.call(["sh", "-c", line])
    os._exit(code if code >= 0 else 128 - code)
out = b""
while True:
    try:
        chunk = os.read(fd, 65536)
    except OSError:
        break
    if not chunk:
        break
    out += chunk
_, status = os.waitpid(pid, 0)
sys.stdout.buffer.write(out)
sys.exit(os.waitstatus_to_exitcode(status))
"#;

/// One step of a user at a terminal ([`Cmd::on_tty_keys`]).
pub enum Key<'a> {
    /// Waits (at most a minute) until the terminal shows this text, since
    /// the last key typed.
    WaitFor(&'a str),
    /// Types these characters (`"\x03"`: Ctrl-C).
    Type(&'a str),
    Sleep(Duration),
}

/// A command run on a pseudo-terminal by [`Cmd::on_tty_keys`].
pub struct Tty {
    pub status: ExitStatus,
    /// Everything written to the terminal.
    pub output: Vec<u8>,
    /// After each step, then at the end: how many bytes had been written,
    /// and the seconds since the start.
    pub marks: Vec<(usize, f64)>,
    rows: u16,
    cols: u16,
}

impl Tty {
    /// The screen's rows (right-trimmed) once `len` bytes were written.
    pub fn screen_after(&self, len: usize) -> Vec<String> {
        let size = |n: u16| std::num::NonZeroU16::new(n).expect("a terminal size");
        let mut parser = vt100::Parser::new(size(self.rows), size(self.cols), 0);
        parser.process(&self.output[..len]);
        parser.screen().rows(0, self.cols).map(|r| r.trim_end().to_owned()).collect()
    }

    /// The screen after step `i` (0-based).
    pub fn screen_at(&self, i: usize) -> Vec<String> {
        self.screen_after(self.marks[i].0)
    }

    /// The screen at the end.
    pub fn screen(&self) -> Vec<String> {
        self.screen_after(self.output.len())
    }

    /// Seconds from step `i` to the end of the command.
    pub fn seconds_after(&self, i: usize) -> f64 {
        self.marks[self.marks.len() - 1].1 - self.marks[i].1
    }
}

/// The driver of [`Cmd::on_tty_keys`]: `ROWS COLS STEPS PROGRAM ARGS...`.
/// The program runs as the session leader of a new terminal of that size
/// (with its line discipline: typed characters are echoed, Ctrl-C is a
/// SIGINT to its foreground group). Prints all the terminal showed, and on
/// stderr the marks as JSON.
const PTY_KEYS: &str = r#"
import fcntl, json, os, pty, select, struct, sys, termios, time
rows, cols, steps, argv = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4:]
pid, fd = pty.fork()
if pid == 0:
    fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    os.execv(argv[0], argv)
t0 = time.monotonic()
out = bytearray()
alive = True
def read(timeout):
    global alive
    if select.select([fd], [], [], timeout)[0]:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            chunk = b""
        if not chunk:
            alive = False
        out.extend(chunk)
since, marks = 0, []
for op, arg in steps:
    if op == "wait":
        deadline = time.monotonic() + 60
        while alive and arg.encode() not in out[since:] and time.monotonic() < deadline:
            read(0.05)
    elif op == "sleep":
        end = time.monotonic() + arg
        while alive and time.monotonic() < end:
            read(max(0, end - time.monotonic()))
    elif op == "send":
        os.write(fd, arg.encode())
        since = len(out)
    marks.append((len(out), time.monotonic() - t0))
while alive:
    read(None)
marks.append((len(out), time.monotonic() - t0))
_, status = os.waitpid(pid, 0)
sys.stdout.buffer.write(out)
print(json.dumps(marks), file=sys.stderr)
sys.exit(os.waitstatus_to_exitcode(status))
"#;

/// What a command must end with.
#[derive(Clone)]
struct Expect {
    root: PathBuf,
    report: Option<PathBuf>,
    status: Option<i32>,
    streams: Vec<(Stream, Check)>,
    files: Vec<(String, Option<String>)>,
    label: String,
}

impl Expect {
    fn read_report(&self) -> String {
        self.report.as_ref().and_then(|p| std::fs::read_to_string(p).ok()).unwrap_or_default()
    }

    #[track_caller]
    fn check(&self, out: &Output) {
        let what = &self.label;
        if let Some(code) = self.status {
            assert_eq!(out.code(), code, "{what}expected exit {code}:\n{}", out.transcript());
        }
        for (stream, check) in &self.streams {
            let (name, text) = match stream {
                Stream::Stdout => ("stdout", &out.stdout),
                Stream::Stderr => ("stderr", &out.stderr),
            };
            match check {
                Check::Is(want) => assert_eq!(text, want, "{what}{name}:\n{}", out.transcript()),
                Check::Has(want) => assert!(text.contains(want), "{what}no {want:?} in {name}:\n{}", out.transcript()),
                Check::Lacks(not) => assert!(!text.contains(not), "{what}{not:?} in {name}:\n{}", out.transcript()),
            }
        }
        for (rel, want) in &self.files {
            let got = std::fs::read_to_string(self.root.join(rel)).ok();
            assert_eq!(got.as_ref(), want.as_ref(), "{what}{rel} afterwards:\n{}", out.transcript());
        }
    }
}

/// A stream read line by line by a thread of its own.
struct Lines {
    rx: mpsc::Receiver<String>,
    seen: String,
}

impl Lines {
    fn read(stream: impl std::io::Read + Send + 'static) -> Lines {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = std::io::BufReader::new(stream);
            let mut line = Vec::new();
            while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
                if tx.send(String::from_utf8_lossy(&line).into_owned()).is_err() {
                    break;
                }
                line.clear();
            }
        });
        Lines { rx, seen: String::new() }
    }

    /// Reads until a line holds `text`; false when the stream ended or
    /// `limit` passed first.
    fn until(&mut self, text: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push_str(&line);
                    if line.contains(text) {
                        return true;
                    }
                }
                Err(_) => return false,
            }
        }
    }

    /// What came so far.
    fn rest_now(&mut self) -> &str {
        while let Ok(line) = self.rx.try_recv() {
            self.seen.push_str(&line);
        }
        &self.seen
    }

    /// Everything, once the stream ended.
    fn rest(mut self) -> String {
        for line in self.rx.iter() {
            self.seen.push_str(&line);
        }
        self.seen
    }
}

/// A command running in the background.
pub struct Running {
    expect: Expect,
    pid: u32,
    exited: mpsc::Receiver<std::io::Result<ExitStatus>>,
    stdout: Lines,
    stderr: Lines,
    started: Instant,
}

impl Running {
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Waits (at most a minute) until a line of stdout holds `text`.
    #[track_caller]
    pub fn wait_for_stdout(&mut self, text: &str) {
        let found = self.stdout.until(text, Duration::from_secs(60));
        assert!(found, "no {text:?} on stdout; so far:\n{}", self.stdout.seen);
    }

    /// Waits (at most a minute) until a line of stderr holds `text`.
    #[track_caller]
    pub fn wait_for_stderr(&mut self, text: &str) {
        let found = self.stderr.until(text, Duration::from_secs(60));
        assert!(found, "no {text:?} on stderr; so far:\n{}", self.stderr.seen);
    }

    /// Waits (at most a minute) until `path` exists; fails at once when
    /// the command ends first.
    #[track_caller]
    pub fn wait_for_file(&mut self, path: &Path) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !path.exists() {
            if let Ok(status) = self.exited.try_recv() {
                panic!(
                    "cassist ended ({status:?}) before {} appeared; stdout:\n{}",
                    path.display(),
                    self.stdout.rest_now()
                );
            }
            assert!(Instant::now() < deadline, "{} did not appear within a minute", path.display());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the end (killing it past [`HANG`]) and checks what it
    /// must end with.
    #[track_caller]
    pub fn finish(self) -> Output {
        self.finish_within(HANG)
    }

    /// [`finish`](Running::finish), failing when it takes over `limit`.
    #[track_caller]
    pub fn finish_within(self, limit: Duration) -> Output {
        let status = match self.exited.recv_timeout(limit) {
            Ok(status) => status.expect("wait for cassist"),
            Err(_) => {
                super::signal(self.pid, nix::sys::signal::Signal::SIGKILL);
                let _ = self.exited.recv();
                panic!("cassist did not end within {limit:?}; stdout so far:\n{}", self.stdout.seen);
            }
        };
        let output = Output {
            status,
            stdout: self.stdout.rest(),
            stderr: self.stderr.rest(),
            report: self.expect.read_report(),
            elapsed: self.started.elapsed(),
        };
        self.expect.check(&output);
        output
    }
}

/// How a command ended.
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    /// The `--report-json` file ("" when not asked for or not written).
    pub report: String,
    pub elapsed: Duration,
}

impl Output {
    /// The exit code; -1 when killed by a signal.
    pub fn code(&self) -> i32 {
        self.status.code().unwrap_or(-1)
    }

    /// Exit code, stdout, stderr (and the report, when there is one) in one
    /// text, for failure messages and snapshots.
    pub fn transcript(&self) -> String {
        let exit = match self.status.code() {
            Some(code) => code.to_string(),
            None => format!("-1 ({})", self.status),
        };
        let mut text = format!("exit: {exit}\n--- stdout\n{}--- stderr\n{}", self.stdout, self.stderr);
        if !self.report.is_empty() {
            text.push_str(&format!("--- report\n{}", self.report));
        }
        text
    }

    /// Fails unless it exited with `code` (for a test that learns the
    /// expected code only later).
    #[track_caller]
    pub fn assert_code(&self, code: i32) -> &Output {
        assert_eq!(self.code(), code, "expected exit {code}:\n{}", self.transcript());
        self
    }

    /// Stdout as JSON.
    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("invalid JSON ({e}):\n{}", self.transcript()))
    }

    /// The `--report-json` document.
    #[track_caller]
    pub fn report_json(&self) -> Value {
        serde_json::from_str(&self.report).unwrap_or_else(|e| panic!("invalid report ({e}):\n{}", self.transcript()))
    }

    /// The report entry of `name`.
    #[track_caller]
    pub fn task(&self, name: &str) -> Value {
        super::task(&self.report_json(), name).clone()
    }

    /// Each task's state in the report, by name.
    #[track_caller]
    pub fn states(&self) -> BTreeMap<String, String> {
        self.report_json()["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["name"].as_str().unwrap().to_owned(), t["state"].as_str().unwrap().to_owned()))
            .collect()
    }
}
