//! The server's standard streams. Only protocol messages reach the real
//! stdout: it is moved to a descriptor of its own at start, and descriptor
//! 1 becomes stderr, so that nothing else (a stray `outln!`, a child that
//! inherits stdout) can ever write into the protocol. Each line read is
//! checked first: one that is not JSON gets a JSON-RPC parse error (the
//! SDK would drop it silently); the end of stdin is told at once (the
//! calls in progress are cancelled, as the client is gone).

use std::io::Write as _;
use std::os::fd::{FromRawFd as _, OwnedFd};

use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, DuplexStream};

/// Longest line read (a request holds at most a few task specs).
const MAX_LINE: usize = 16 << 20;

/// The real stdout, moved to a descriptor of its own (close-on-exec);
/// descriptor 1 now writes to stderr.
pub fn protocol_stdout() -> std::io::Result<std::fs::File> {
    // SAFETY: fcntl and dup2 on descriptors this process owns; the new
    // descriptor is owned by the returned file alone.
    unsafe {
        let fd = libc::fcntl(1, libc::F_DUPFD_CLOEXEC, 3);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let file = std::fs::File::from(OwnedFd::from_raw_fd(fd));
        if libc::dup2(2, 1) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(file)
    }
}

/// Writes whole lines to the protocol stdout, from a thread of its own (a
/// slow reader never blocks the runtime); ends when every sender is gone.
pub fn writer(mut out: std::fs::File) -> (std::sync::mpsc::Sender<Vec<u8>>, std::thread::JoinHandle<()>) {
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    let handle = std::thread::spawn(move || {
        for line in rx {
            if out.write_all(&line).and_then(|()| out.flush()).is_err() {
                // The client is gone; what is left is dropped.
                break;
            }
        }
    });
    (tx, handle)
}

/// Copies the SDK's output, line by line, to the writer.
pub async fn pump_out(from_server: DuplexStream, to: std::sync::mpsc::Sender<Vec<u8>>) {
    let mut reader = tokio::io::BufReader::new(from_server);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                if !line.ends_with(b"\n") {
                    line.push(b'\n');
                }
                if to.send(line.clone()).is_err() {
                    break;
                }
            }
        }
    }
}

/// Copies stdin to the SDK, line by line: a line that is not JSON is
/// answered with a parse error (`-32700`, id null) and not passed on.
/// Calls `on_end` when stdin ends (or fails), then closes the SDK's input.
pub async fn pump_in(mut to_server: DuplexStream, errors: std::sync::mpsc::Sender<Vec<u8>>, on_end: impl FnOnce()) {
    let mut reader = tokio::io::BufReader::new(tokio::io::stdin());
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = (&mut reader).take(MAX_LINE as u64).read_until(b'\n', &mut line).await;
        match read {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        if text.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(text) {
            let _ = errors.send(parse_error(&e.to_string()));
            if !line.ends_with(b"\n") {
                // Longer than MAX_LINE: the rest of it is skipped.
                let mut rest = Vec::new();
                if reader.read_until(b'\n', &mut rest).await.unwrap_or(0) == 0 {
                    break;
                }
            }
            continue;
        }
        if to_server.write_all(text).await.is_err() || to_server.write_all(b"\n").await.is_err() {
            break;
        }
    }
    on_end();
    let _ = to_server.shutdown().await;
}

/// A JSON-RPC parse error (`id` null: there is no request to answer).
pub fn parse_error(why: &str) -> Vec<u8> {
    let doc = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": -32700, "message": format!("Parse error: {why}")},
    });
    let mut line = serde_json::to_vec(&doc).unwrap_or_default();
    line.push(b'\n');
    line
}
