//! One command's connections to the proxy: `CONNECT host:port` (a
//! tunnel, for HTTPS), a plain HTTP request in absolute form (`GET
//! http://host/path`), or, for an agent whose key the broker holds, a
//! request to the proxy itself as the agent's API (`POST /v1/messages`),
//! forwarded to the real API with the real key ([`crate::broker`]).
//!
//! Every host is checked against the command's [`Policy`] before it is
//! resolved, and every address it resolves to before it is connected
//! (the proxy resolves names itself: the command has no DNS). A refusal
//! answers `403` with the reason and is counted in the lease's
//! [`Refused`].

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::Refused;
use crate::broker::Broker;
use crate::policy::{Opened, Policy, split_host_port};

/// Largest request head read (request line and headers).
const HEAD_LIMIT: usize = 64 << 10;
/// How long a client has to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a name lookup or a connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// What one command's connections are served with.
pub(crate) struct Served {
    pub policy: Policy,
    pub broker: Option<Arc<Broker>>,
    pub refused: Arc<Refused>,
}

/// A request head: its bytes' parsed parts, and what came after it.
pub(crate) struct Head {
    pub method: String,
    pub target: String,
    /// Name and value, in order.
    pub headers: Vec<(String, Vec<u8>)>,
    /// Bytes read past the head (the start of a body).
    pub rest: Vec<u8>,
}

impl Head {
    /// The head as sent upstream: `target` in the request line, the
    /// headers but `drop` (and the hop-by-hop ones), `add` after them,
    /// and `Connection: close` (one request per connection: the next one
    /// is checked again).
    pub fn rewrite(&self, target: &str, drop: &[&str], add: &[(&str, &[u8])]) -> Vec<u8> {
        const HOP: [&str; 5] = ["connection", "proxy-connection", "proxy-authorization", "keep-alive", "upgrade"];
        let mut out = format!("{} {target} HTTP/1.1\r\n", self.method).into_bytes();
        for (name, value) in &self.headers {
            let lower = name.to_ascii_lowercase();
            if HOP.contains(&lower.as_str()) || drop.contains(&lower.as_str()) {
                continue;
            }
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
        for (name, value) in add {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"Connection: close\r\n\r\n");
        out
    }
}

/// Serves one connection of a command.
pub(crate) async fn serve(mut client: TcpStream, served: Arc<Served>) {
    let head = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client)).await {
        Ok(Ok(Some(head))) => head,
        Ok(Ok(None)) | Err(_) => return,
        Ok(Err(message)) => {
            let _ = respond(&mut client, 400, &message).await;
            return;
        }
    };
    if head.method.eq_ignore_ascii_case("CONNECT") {
        let Some((host, Some(port))) = split_host_port(&head.target) else {
            let _ = respond(&mut client, 400, "CONNECT needs host:port").await;
            return;
        };
        let mut upstream = match open(&served, host, port).await {
            Ok(s) => s,
            Err(e) => return e.answer(&mut client).await,
        };
        if client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.is_err() {
            return;
        }
        if !head.rest.is_empty() && upstream.write_all(&head.rest).await.is_err() {
            return;
        }
        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
        return;
    }
    if let Some(rest) = head.target.clone().strip_prefix("http://") {
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let Some((host, port)) = split_host_port(authority) else {
            let _ = respond(&mut client, 400, "the request names no host").await;
            return;
        };
        let port = port.unwrap_or(80);
        if let Some(broker) = served.broker.as_ref().filter(|_| is_proxy_itself(host, port)) {
            return broker.forward(client, head, path.to_owned()).await;
        }
        let mut upstream = match open(&served, host, port).await {
            Ok(s) => s,
            Err(e) => return e.answer(&mut client).await,
        };
        let out = head.rewrite(path, &[], &[]);
        if upstream.write_all(&out).await.is_err() || upstream.write_all(&head.rest).await.is_err() {
            return;
        }
        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
        return;
    }
    if head.target.starts_with('/') {
        if let Some(broker) = &served.broker {
            let path = head.target.clone();
            return broker.forward(client, head, path).await;
        }
        let _ = respond(&mut client, 400, "this is cassist's egress proxy: use it as an HTTP proxy").await;
        return;
    }
    let _ = respond(&mut client, 400, "unsupported request").await;
}

/// Whether `host:port` is the proxy's own address in the command's
/// namespace (an agent whose HTTP client sends even its base URL through
/// the proxy).
fn is_proxy_itself(host: &str, port: u16) -> bool {
    let addr = cassist_sandbox::sandbox::PROXY_ADDR;
    port == addr.port() && (host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip == *addr.ip()))
}

/// Reads a request head; `None` when the client closed first.
async fn read_head<S: AsyncRead + Unpin>(client: &mut S) -> Result<Option<Head>, String> {
    let mut buf = Vec::with_capacity(2048);
    let mut chunk = [0u8; 4096];
    loop {
        let n = client.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 128];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => {
                let head = Head {
                    method: req.method.unwrap_or("").to_owned(),
                    target: req.path.unwrap_or("").to_owned(),
                    headers: req.headers.iter().map(|h| (h.name.to_owned(), h.value.to_vec())).collect(),
                    rest: buf[len..].to_vec(),
                };
                return Ok(Some(head));
            }
            Ok(httparse::Status::Partial) if buf.len() < HEAD_LIMIT => continue,
            Ok(httparse::Status::Partial) => return Err("the request head is too large".into()),
            Err(e) => return Err(format!("not an HTTP request: {e}")),
        }
    }
}

/// Why a connection was not made.
pub(crate) enum OpenError {
    /// The policy refused it: counted, `403`.
    Refused(String),
    /// It was allowed, but failed: `502`.
    Failed(String),
}

impl OpenError {
    async fn answer(self, client: &mut TcpStream) {
        let _ = match self {
            OpenError::Refused(m) => respond(client, 403, &m).await,
            OpenError::Failed(m) => respond(client, 502, &m).await,
        };
    }
}

/// A connection to `host:port` if the policy allows it and every check of
/// the addresses it resolves to passes.
pub(crate) async fn open(served: &Served, host: &str, port: u16) -> Result<TcpStream, OpenError> {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let refuse = |why: String| {
        served.refused.note(&host);
        OpenError::Refused(format!("cassist refused {host}: {why}"))
    };
    let Some(by) = served.policy.opened(&host, port) else {
        return Err(refuse(format!(
            "{} may not reach it (allow it in cassist.kdl: network {{ allow \"{host}\" }})",
            served.policy.role
        )));
    };
    let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => match tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::lookup_host((host.as_str(), port))).await {
            Ok(Ok(a)) => a.collect(),
            Ok(Err(e)) => return Err(OpenError::Failed(format!("cannot resolve {host}: {e}"))),
            Err(_) => return Err(OpenError::Failed(format!("cannot resolve {host}: timed out"))),
        },
    };
    let allowed: Vec<SocketAddr> =
        addrs.iter().copied().filter(|a| served.policy.address_allowed(a.ip(), by)).collect();
    if allowed.is_empty() {
        let why = match by {
            Opened::Project => {
                "it is a loopback, private or link-local address, which only the user may open \
                                (CASSIST_NETWORK_ALLOW), never the project's files"
            }
            Opened::User => "it is a link-local address (cloud metadata), which nothing opens",
        };
        let shown = addrs.first().map(|a| a.ip().to_string()).unwrap_or_default();
        return Err(refuse(format!("{shown}: {why}")));
    }
    let mut last = String::new();
    for a in allowed {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(a)).await {
            Ok(Ok(s)) => return Ok(s),
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => last = "timed out".into(),
        }
    }
    Err(OpenError::Failed(format!("cannot connect to {host}:{port}: {last}")))
}

/// Answers with `status` and `message` as text, then closes.
pub(crate) async fn respond<S: AsyncWrite + Unpin>(client: &mut S, status: u16, message: &str) -> std::io::Result<()> {
    let reason = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        _ => "Bad Gateway",
    };
    let body = format!("{message}\n");
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\
         Connection: close\r\nX-Cassist-Egress: {}\r\n\r\n",
        body.len(),
        if status == 403 { "refused" } else { "error" }
    );
    client.write_all(head.as_bytes()).await?;
    client.write_all(body.as_bytes()).await?;
    client.shutdown().await
}
