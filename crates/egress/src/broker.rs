//! The credential broker: an agent CLI's API key stays in cassist. The
//! CLI is given a placeholder key and the proxy as its API's base URL;
//! each request it sends there is forwarded to the real API (over TLS
//! when the real one is `https`), its own authentication header
//! replaced by the real key. Only that API's host gets the key, and
//! nothing the CLI can read holds it.

use std::sync::Arc;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::proxy::{Head, respond};

/// Headers that carry an API key, whichever the CLI sends: all dropped
/// from what it sends, the real one added.
const AUTH_HEADERS: [&str; 4] = ["authorization", "x-api-key", "x-goog-api-key", "api-key"];

/// Where an agent's API really is, and the header that carries its key.
pub struct Broker {
    tls: bool,
    host: String,
    port: u16,
    /// The base URL's path, without a trailing `/` (`/v1` or empty).
    base: String,
    header: String,
    value: Vec<u8>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        write!(
            f,
            "Broker({}://{}:{}{}, {})",
            if self.tls { "https" } else { "http" },
            self.host,
            self.port,
            self.base,
            self.header
        )
    }
}

/// Why a base URL cannot be brokered.
#[derive(Debug, thiserror::Error)]
#[error("cannot broker {url}: {why}")]
pub struct BrokerError {
    url: String,
    why: &'static str,
}

impl Broker {
    /// Requests go to `base_url` (`https://api.anthropic.com`, or the
    /// user's own `ANTHROPIC_BASE_URL`), with `header: value` as their
    /// key (`x-api-key`, or `authorization` with `Bearer …`).
    pub fn new(base_url: &str, header: &str, value: &str) -> Result<Broker, BrokerError> {
        let err = |why| BrokerError { url: base_url.to_owned(), why };
        let (tls, rest) = if let Some(r) = base_url.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = base_url.strip_prefix("http://") {
            (false, r)
        } else {
            return Err(err("only http:// and https:// base URLs"));
        };
        let (authority, base) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, ""),
        };
        let (host, port) = crate::policy::split_host_port(authority).ok_or_else(|| err("no host"))?;
        if host.is_empty() {
            return Err(err("no host"));
        }
        Ok(Broker {
            tls,
            host: host.to_owned(),
            port: port.unwrap_or(if tls { 443 } else { 80 }),
            base: base.to_owned(),
            header: header.to_ascii_lowercase(),
            value: value.as_bytes().to_vec(),
        })
    }

    /// The host the key goes to.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Forwards one request the CLI sent to the proxy as its API, at
    /// `path`, and its answer back.
    pub(crate) async fn forward(&self, mut client: TcpStream, head: Head, path: String) {
        let target = format!("{}{}", self.base, if path.starts_with('/') { path } else { format!("/{path}") });
        let host_header = match (self.tls, self.port) {
            (true, 443) | (false, 80) => self.host.clone(),
            _ if self.host.contains(':') => format!("[{}]:{}", self.host, self.port),
            _ => format!("{}:{}", self.host, self.port),
        };
        let mut drop: Vec<&str> = AUTH_HEADERS.to_vec();
        drop.push("host");
        let out = head.rewrite(&target, &drop, &[("Host", host_header.as_bytes()), (&self.header, &self.value)]);
        let tcp = match TcpStream::connect((self.host.as_str(), self.port)).await {
            Ok(s) => s,
            Err(e) => {
                let _ = respond(&mut client, 502, &format!("cannot reach the agent's API at {}: {e}", self.host)).await;
                return;
            }
        };
        if self.tls {
            let mut upstream = match tls_connect(&self.host, tcp).await {
                Ok(s) => s,
                Err(e) => {
                    let _ = respond(&mut client, 502, &format!("TLS with {} failed: {e}", self.host)).await;
                    return;
                }
            };
            if upstream.write_all(&out).await.is_ok() && upstream.write_all(&head.rest).await.is_ok() {
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            }
        } else {
            let mut upstream = tcp;
            if upstream.write_all(&out).await.is_ok() && upstream.write_all(&head.rest).await.is_ok() {
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            }
        }
    }
}

async fn tls_connect(host: &str, tcp: TcpStream) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    use rustls_platform_verifier::ConfigVerifierExt;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = rustls::ClientConfig::with_platform_verifier().map_err(std::io::Error::other)?;
    let name = rustls::pki_types::ServerName::try_from(host.to_owned()).map_err(std::io::Error::other)?;
    tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await
}
