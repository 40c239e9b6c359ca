//! An S3-compatible bucket through Apache OpenDAL (its `services-s3`):
//! `s3://bucket/prefix`, credentials from the usual `AWS_*` variables
//! (nothing is read from `~/.aws`).

use opendal::layers::HttpClientLayer;
use opendal::raw::HttpClient;
use opendal::{ErrorKind, Operator};

use super::Fault;

pub struct S3 {
    op: Operator,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

impl S3 {
    pub fn new(
        bucket: &str,
        prefix: &str,
        endpoint: Option<&str>,
        region: Option<&str>,
        client: reqwest::Client,
    ) -> Result<S3, opendal::Error> {
        let mut b = opendal::services::S3::default()
            .bucket(bucket)
            .root(&format!("/{prefix}"))
            // The variables below only: no ~/.aws, no instance metadata
            // probing that would stall a laptop off the cloud.
            .disable_config_load()
            .region(&region.map(str::to_owned).or_else(|| env("AWS_REGION")).unwrap_or_else(|| "us-east-1".into()));
        if let Some(e) = endpoint.map(str::to_owned).or_else(|| env("AWS_ENDPOINT_URL")) {
            b = b.endpoint(&e);
        }
        match (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
            (Some(id), Some(secret)) => {
                b = b.access_key_id(&id).secret_access_key(&secret);
                if let Some(t) = env("AWS_SESSION_TOKEN") {
                    b = b.session_token(&t);
                }
            }
            _ => b = b.skip_signature(),
        }
        let op = Operator::new(b)?.layer(HttpClientLayer::new(HttpClient::with(client))).finish();
        Ok(S3 { op })
    }

    /// The object `name`, refused when the server says it is larger than
    /// `cap` bytes, and never read past its stated length.
    pub async fn get(&self, name: &str, cap: u64, large: &tokio::sync::Semaphore) -> Result<Option<Vec<u8>>, Fault> {
        let len = match self.op.stat(name).await {
            Ok(meta) => meta.content_length(),
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(fault(e)),
        };
        if len > cap {
            return Err(super::too_large(name, cap));
        }
        if len == 0 {
            return Ok(Some(Vec::new()));
        }
        let _turn = match len > super::LARGE_READ {
            true => Some(large.acquire().await.map_err(|_| Fault::Item("the remote is closing".into()))?),
            false => None,
        };
        match self.op.read_with(name).range(0..len).await {
            Ok(buf) if buf.len() as u64 <= cap => Ok(Some(buf.to_vec())),
            Ok(_) => Err(super::too_large(name, cap)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(fault(e)),
        }
    }

    pub async fn has(&self, name: &str) -> Result<bool, Fault> {
        match self.op.stat(name).await {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
            Err(e) => Err(fault(e)),
        }
    }

    pub async fn put(&self, name: &str, bytes: Vec<u8>) -> Result<(), Fault> {
        self.op.write(name, bytes).await.map(|_| ()).map_err(fault)
    }
}

/// The HTTP client's error behind an OpenDAL error, if the request never
/// got an answer.
fn transport(e: &opendal::Error) -> Option<&reqwest::Error> {
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        if let Some(r) = c.downcast_ref::<reqwest::Error>() {
            return Some(r);
        }
        cause = c.source();
    }
    None
}

/// Any error but "not found" says the remote cannot serve us: refused
/// credentials, a server that is down or answers garbage.
fn fault(e: opendal::Error) -> Fault {
    let why = match e.kind() {
        ErrorKind::PermissionDenied => "access denied: check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY".to_owned(),
        _ if transport(&e).is_some_and(reqwest::Error::is_timeout) => "timed out".to_owned(),
        _ if transport(&e).is_some_and(reqwest::Error::is_connect) => {
            // The innermost cause says why (refused, no route, DNS).
            let mut cause: &dyn std::error::Error = &e;
            while let Some(c) = cause.source() {
                cause = c;
            }
            format!("cannot connect: {cause}")
        }
        _ => {
            // OpenDAL's message carries the request context and the
            // cause: one line of it.
            let mut text = format!("{e}");
            let mut cause = std::error::Error::source(&e);
            while let Some(c) = cause {
                text.push_str(&format!(": {c}"));
                cause = c.source();
            }
            let text: Vec<char> = text.split_whitespace().collect::<Vec<_>>().join(" ").chars().collect();
            match text.len() {
                n if n > 500 => format!(
                    "{} … {}",
                    text[..150].iter().collect::<String>(),
                    text[n - 300..].iter().collect::<String>()
                ),
                _ => text.into_iter().collect(),
            }
        }
    };
    Fault::Down(why)
}
