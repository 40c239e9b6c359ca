//! A Turborepo remote-cache server (`turbo+http(s)://host`): GET, PUT and
//! HEAD on `/v8/artifacts/:id`, `Authorization: Bearer $TURBO_TOKEN`, the
//! team from `team=` (`teamId=` when it starts with `team_`, as the turbo
//! CLI sends it, else `slug=`).
//!
//! A name (`objects/<hash>`) becomes the artifact id `cassist-objects-<hash>`:
//! servers take letters, digits and dashes in an id, not `/`.

use reqwest::StatusCode;

use super::Fault;

pub struct Turbo {
    base: String,
    token: Option<String>,
    team: Option<(&'static str, String)>,
    client: reqwest::Client,
}

impl Turbo {
    pub fn new(base: &str, team: Option<&str>, client: reqwest::Client) -> Turbo {
        let token = std::env::var("TURBO_TOKEN").ok().filter(|t| !t.is_empty());
        let team = team.map(|t| (if t.starts_with("team_") { "teamId" } else { "slug" }, t.to_owned()));
        Turbo { base: base.trim_end_matches('/').to_owned(), token, team, client }
    }

    fn request(&self, method: reqwest::Method, name: &str) -> reqwest::RequestBuilder {
        let mut url = format!("{}/v8/artifacts/{}", self.base, artifact_id(name));
        if let Some((key, team)) = &self.team {
            url.push_str(&format!("?{key}={}", percent_encoded(team)));
        }
        let r = self.client.request(method, url);
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    /// The artifact `name`, read as it comes and given up past `cap`
    /// bytes (whatever length the server announces).
    pub async fn get(&self, name: &str, cap: u64, large: &tokio::sync::Semaphore) -> Result<Option<Vec<u8>>, Fault> {
        let mut resp = self.request(reqwest::Method::GET, name).send().await.map_err(down)?;
        if !status(resp.status())? {
            return Ok(None);
        }
        if let Some(len) = resp.content_length()
            && len > cap
        {
            return Err(super::too_large(name, cap));
        }
        let mut turn = None;
        let mut bytes = Vec::new();
        loop {
            match resp.chunk().await {
                Ok(Some(chunk)) => {
                    let len = (bytes.len() + chunk.len()) as u64;
                    if len > cap {
                        return Err(super::too_large(name, cap));
                    }
                    if len > super::LARGE_READ && turn.is_none() {
                        turn = Some(large.acquire().await.map_err(|_| Fault::Item("the remote is closing".into()))?);
                        // Grown once, not doubled copy by copy: what a
                        // large read holds is what it read.
                        let announced = resp.content_length().unwrap_or(cap);
                        bytes.reserve_exact(
                            usize::try_from(announced.min(cap)).unwrap_or(0).saturating_sub(bytes.len()),
                        );
                    }
                    bytes.extend_from_slice(&chunk);
                }
                Ok(None) => return Ok(Some(bytes)),
                Err(e) => return Err(Fault::Item(format!("truncated ({e})"))),
            }
        }
    }

    pub async fn has(&self, name: &str) -> Result<bool, Fault> {
        let resp = self.request(reqwest::Method::HEAD, name).send().await.map_err(down)?;
        status(resp.status())
    }

    pub async fn put(&self, name: &str, bytes: Vec<u8>) -> Result<(), Fault> {
        let resp = self
            .request(reqwest::Method::PUT, name)
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .body(bytes)
            .send()
            .await
            .map_err(down)?;
        status(resp.status()).map(|_| ())
    }
}

/// The artifact id of a name.
pub fn artifact_id(name: &str) -> String {
    format!("cassist-{}", name.replace('/', "-"))
}

/// `text` fit for a query string.
fn percent_encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            b => format!("%{b:02X}"),
        })
        .collect()
}

/// `true` for a success, `false` for "not found"; a refusal or a server
/// error makes the remote unavailable.
fn status(s: StatusCode) -> Result<bool, Fault> {
    match s {
        s if s.is_success() => Ok(true),
        StatusCode::NOT_FOUND => Ok(false),
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
            Err(Fault::Down(format!("refused: {s}; check TURBO_TOKEN and team=")))
        }
        s => Err(Fault::Down(format!("answered {s}"))),
    }
}

fn down(e: reqwest::Error) -> Fault {
    let why = if e.is_timeout() {
        "timed out".to_owned()
    } else if e.is_connect() {
        "cannot connect".to_owned()
    } else {
        e.to_string()
    };
    Fault::Down(why)
}
