//! The `cache { remote …; trusted-key … }` block of `cassist.kdl`: where
//! the team's remote cache is (a store shared by the team, looked up when
//! the local one has no run of a task's inputs) and whose signed entries
//! are believed. Also the text forms of the keys (`cassist-ed25519:<base64>`),
//! read here so that a bad key in the config is a diagnostic at its spot;
//! signing and verifying are the `cassist-remote` crate's.

use base64::Engine as _;
use kdl::KdlNode;

use super::diag::Spanned;
use super::reader::{DiagExt, Once, Reader};

/// The prefix of a public key's text.
pub const PUBLIC_PREFIX: &str = "cassist-ed25519:";
/// The prefix of a secret key's text (its 32-byte seed).
pub const SECRET_PREFIX: &str = "cassist-ed25519-secret:";

const CACHE_NODES: &[&str] = &["remote", "trusted-key"];
const REMOTE_PROPS: &[&str] = &["endpoint", "region", "team"];

/// The `cache` block.
#[derive(Debug, Clone, Default)]
pub struct CacheConfig {
    pub remote: Option<RemoteConfig>,
    /// `trusted-key`, each decoded (a bad one is a diagnostic, not here).
    pub trusted_keys: Vec<Spanned<[u8; 32]>>,
}

/// `remote "URL" endpoint=… region=… team=…`.
#[derive(Debug, Clone)]
pub struct RemoteConfig {
    pub url: Spanned<String>,
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub team: Option<String>,
}

/// The kinds of remote a URL names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteUrl {
    /// `s3://bucket/prefix`.
    S3 { bucket: String, prefix: String },
    /// `turbo+http(s)://host[:port][/base]`: the base URL of the server.
    Turbo { base: String },
}

/// Why a text is no remote cache URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("`{0}` names no bucket")]
    NoBucket(String),
    #[error("`{0}` names no host")]
    NoHost(String),
    #[error("`{0}` is not a remote cache URL: use `s3://bucket/prefix` or `turbo+https://host`")]
    Scheme(String),
}

/// Why a key's text does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// It does not start with the prefix of its kind of key.
    #[error("a key starts with `{0}`")]
    Prefix(String),
    #[error("its base64 does not read ({0})")]
    Base64(#[source] base64::DecodeError),
    /// Not 32 bytes: how many.
    #[error("it holds {0} bytes, not 32")]
    Length(usize),
}

/// Reads a remote's URL, or says what is wrong with it.
pub fn parse_url(url: &str) -> Result<RemoteUrl, UrlError> {
    if let Some(rest) = url.strip_prefix("s3://") {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(UrlError::NoBucket(url.to_owned()));
        }
        return Ok(RemoteUrl::S3 { bucket: bucket.to_owned(), prefix: prefix.trim_matches('/').to_owned() });
    }
    for scheme in ["turbo+http://", "turbo+https://"] {
        if let Some(rest) = url.strip_prefix(scheme) {
            if rest.trim_matches('/').is_empty() {
                return Err(UrlError::NoHost(url.to_owned()));
            }
            let base = format!("{}{}", &scheme["turbo+".len()..], rest.trim_end_matches('/'));
            return Ok(RemoteUrl::Turbo { base });
        }
    }
    Err(UrlError::Scheme(url.to_owned()))
}

/// The 32 bytes of a key written `<prefix><base64>`, or why not.
pub fn decode_key(text: &str, prefix: &str) -> Result<[u8; 32], KeyError> {
    let Some(b64) = text.trim().strip_prefix(prefix) else {
        return Err(KeyError::Prefix(prefix.to_owned()));
    };
    let bytes = base64::engine::general_purpose::STANDARD.decode(b64).map_err(KeyError::Base64)?;
    bytes.try_into().map_err(|b: Vec<u8>| KeyError::Length(b.len()))
}

/// `<prefix><base64>` of 32 bytes.
pub fn encode_key(bytes: &[u8; 32], prefix: &str) -> String {
    format!("{prefix}{}", base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// Reads a `cache { … }` block.
pub fn read_cache(r: &mut Reader<'_>, node: &KdlNode, cache: &mut CacheConfig) {
    let mut once = Once::default();
    for child in r.block(node, "cache { remote \"s3://bucket/prefix\" }") {
        let name = Reader::name(child);
        if name == "remote" && !once.first(r, child) {
            continue;
        }
        match name {
            "remote" => cache.remote = read_remote(r, child),
            "trusted-key" => {
                let example = "trusted-key \"cassist-ed25519:…\"";
                let Some(key) = r.single_string(child, example) else { continue };
                match decode_key(&key.value, PUBLIC_PREFIX) {
                    Ok(bytes) => cache.trusted_keys.push(Spanned::new(bytes, key.span)),
                    Err(why) => {
                        r.error("bad-key", format!("this trusted key does not read: {why}"), key.span, "bad key")
                            .set_help(
                                "give the `public` line of `cassist cache keygen`, e.g. `trusted-key \"cassist-ed25519:…\"`",
                            );
                    }
                }
            }
            _ => r.unknown_node(child, "in `cache`", CACHE_NODES),
        }
    }
}

fn read_remote(r: &mut Reader<'_>, node: &KdlNode) -> Option<RemoteConfig> {
    const EXAMPLE: &str = "remote \"s3://bucket/prefix\" endpoint=\"http://127.0.0.1:8333\" region=\"us-east-1\"";
    r.check_props(node, REMOTE_PROPS);
    r.check_no_children(node);
    let args = Reader::positional(node);
    let [url] = args.as_slice() else {
        r.error("missing-value", "`remote` needs one URL", Reader::name_span(node), "expected one URL")
            .set_help(format!("write it as `{EXAMPLE}`"));
        return None;
    };
    let url = r.string(node, url, EXAMPLE)?;
    if let Err(why) = parse_url(&url.value) {
        r.error("bad-remote", why.to_string(), url.span, "unknown remote").set_help(format!("write it as `{EXAMPLE}`"));
        return None;
    }
    let mut prop = |key: &str| r.string_prop(node, key, EXAMPLE).map(|s| s.value);
    Some(RemoteConfig { endpoint: prop("endpoint"), region: prop("region"), team: prop("team"), url })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_their_backend() {
        assert_eq!(
            parse_url("s3://team-bucket/cassist/"),
            Ok(RemoteUrl::S3 { bucket: "team-bucket".into(), prefix: "cassist".into() })
        );
        assert_eq!(parse_url("s3://b"), Ok(RemoteUrl::S3 { bucket: "b".into(), prefix: String::new() }));
        assert_eq!(
            parse_url("turbo+http://127.0.0.1:3000/"),
            Ok(RemoteUrl::Turbo { base: "http://127.0.0.1:3000".into() })
        );
        assert_eq!(
            parse_url("turbo+https://cache.example"),
            Ok(RemoteUrl::Turbo { base: "https://cache.example".into() })
        );
        for bad in ["s3://", "http://x", "turbo+http://", "gs://b"] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_url("s3:///p").unwrap_err().to_string(), "`s3:///p` names no bucket");
        assert_eq!(parse_url("turbo+https:///").unwrap_err().to_string(), "`turbo+https:///` names no host");
        assert_eq!(
            parse_url("gs://b").unwrap_err().to_string(),
            "`gs://b` is not a remote cache URL: use `s3://bucket/prefix` or `turbo+https://host`"
        );
    }

    #[test]
    fn keys_round_trip_and_bad_ones_say_why() {
        let k = [7u8; 32];
        let text = encode_key(&k, PUBLIC_PREFIX);
        assert_eq!(decode_key(&text, PUBLIC_PREFIX), Ok(k));
        let why = |text: &str, prefix: &str| decode_key(text, prefix).unwrap_err().to_string();
        assert_eq!(why(&text, SECRET_PREFIX), "a key starts with `cassist-ed25519-secret:`");
        assert_eq!(why("cassist-ed25519:AAAA", PUBLIC_PREFIX), "it holds 3 bytes, not 32");
        assert!(why("cassist-ed25519:!!", PUBLIC_PREFIX).starts_with("its base64 does not read ("));
    }
}
