//! A small MCP client over the stdio of `cassist mcp`: it writes JSON-RPC
//! lines and reads every line the server writes, checking that each is a
//! JSON-RPC message (nothing else may reach stdout).

use std::io::{BufRead as _, Write as _};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How long one answer may take (a run with fake agents takes seconds).
const ANSWER: Duration = Duration::from_secs(120);

/// `cassist mcp` running, with its stdin and what it wrote so far.
pub struct Mcp {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    stderr: mpsc::Receiver<String>,
    /// Every stdout line so far, in order.
    pub seen: Vec<Value>,
    next_id: u64,
}

impl Mcp {
    /// Starts `cmd` (a `cassist mcp` command) with piped stdio.
    pub fn start(mut cmd: Command) -> Mcp {
        let mut child =
            cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start cassist mcp");
        let (tx, lines) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let (etx, stderr) = mpsc::channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                if etx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Mcp { child, stdin, lines, stderr, seen: Vec::new(), next_id: 1 }
    }

    /// Started and initialized (the `initialize` result).
    pub fn initialized(cmd: Command) -> (Mcp, Value) {
        let mut m = Mcp::start(cmd);
        let init = m.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "it", "version": "1"}}),
        );
        m.notify("notifications/initialized", json!({}));
        (m, init)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Writes one line as it is.
    pub fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line.as_bytes()).and_then(|()| stdin.write_all(b"\n")).and_then(|()| stdin.flush()).unwrap();
    }

    pub fn notify(&mut self, method: &str, params: Value) {
        self.send_raw(&json!({"jsonrpc": "2.0", "method": method, "params": params}).to_string());
    }

    /// Sends a request; its id.
    pub fn send(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send_raw(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string());
        id
    }

    /// The next stdout line, checked to be a JSON-RPC message.
    #[track_caller]
    pub fn next(&mut self, limit: Duration) -> Option<Value> {
        let line = self.lines.recv_timeout(limit).ok()?;
        let v: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("not JSON on stdout ({e}): {line:?}\nstderr:\n{}", self.stderr_now()));
        assert_eq!(v["jsonrpc"], "2.0", "not a JSON-RPC message on stdout: {line}");
        self.seen.push(v.clone());
        Some(v)
    }

    /// Reads until the message `pick` chooses; fails after [`ANSWER`].
    #[track_caller]
    pub fn until(&mut self, what: &str, pick: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + ANSWER;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next(left) {
                Some(v) if pick(&v) => return v,
                Some(_) => {}
                None => panic!("no {what} within {ANSWER:?}; seen: {:#?}\nstderr:\n{}", self.seen, self.stderr_now()),
            }
        }
    }

    /// The answer to request `id` (a result or an error).
    #[track_caller]
    pub fn answer(&mut self, id: u64) -> Value {
        // It may have come while another answer was awaited.
        if let Some(v) = self.seen.iter().find(|v| v["id"] == id && v.get("method").is_none()) {
            return v.clone();
        }
        self.until(&format!("answer to request {id}"), |v| v["id"] == id && v.get("method").is_none())
    }

    /// A request and its answer.
    #[track_caller]
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params);
        self.answer(id)
    }

    /// Calls a tool; the JSON-RPC answer. With `progress`, the request
    /// asks for progress notifications with that token.
    #[track_caller]
    pub fn call(&mut self, tool: &str, args: Value, progress: Option<u64>) -> Value {
        let id = self.call_start(tool, args, progress);
        self.answer(id)
    }

    /// Starts a tool call; its request id.
    pub fn call_start(&mut self, tool: &str, args: Value, progress: Option<u64>) -> u64 {
        let mut params = json!({"name": tool, "arguments": args});
        if let Some(token) = progress {
            params["_meta"] = json!({"progressToken": token});
        }
        self.send("tools/call", params)
    }

    /// The progress notifications seen for `token`: their messages.
    pub fn progress(&self, token: u64) -> Vec<String> {
        self.seen
            .iter()
            .filter(|v| v["method"] == "notifications/progress" && v["params"]["progressToken"] == token)
            .map(|v| v["params"]["message"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// What stderr said so far.
    pub fn stderr_now(&self) -> String {
        let mut s = String::new();
        while let Ok(line) = self.stderr.try_recv() {
            s.push_str(&line);
            s.push('\n');
        }
        s
    }

    /// Closes stdin and waits (at most `limit`) for the end: the status,
    /// with every remaining stdout line checked.
    #[track_caller]
    pub fn close(mut self, limit: Duration) -> ExitStatus {
        drop(self.stdin.take());
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                while self.next(Duration::from_millis(200)).is_some() {}
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("cassist mcp did not end within {limit:?} after stdin closed:\n{}", self.stderr_now());
            }
            while self.next(Duration::from_millis(20)).is_some() {}
        }
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The structured content of a tool result (asserting it is no error).
#[track_caller]
pub fn ok(answer: &Value) -> &Value {
    assert_eq!(answer["result"]["isError"], false, "a tool error: {answer:#}");
    &answer["result"]["structuredContent"]
}

/// The text of a tool error result.
#[track_caller]
pub fn tool_error(answer: &Value) -> String {
    assert_eq!(answer["result"]["isError"], true, "not a tool error: {answer:#}");
    answer["result"]["content"][0]["text"].as_str().unwrap().to_owned()
}
