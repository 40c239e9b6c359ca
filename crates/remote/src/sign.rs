//! Signed entries: the envelope a remote holds under
//! `entries/<before-input-hash>`, its ed25519 signature, and the checks a
//! fetched entry passes before anything of it is used. A remote is shared
//! storage anyone with write access can fill, so an entry is believed only
//! when a key the project trusts (`trusted-key` in `cassist.kdl`) signed
//! it; objects are checked against their hashes besides.
//!
//! The signature covers `"cassist-remote-entry-v1\n" + before + "\n" +
//! entry bytes`: it binds the entry to its name, so a valid entry cannot
//! be moved to another input hash.

use base64::Engine as _;
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};

use cassist_core::spec::remote::{KeyError, PUBLIC_PREFIX, SECRET_PREFIX, decode_key, encode_key};

const DOMAIN: &str = "cassist-remote-entry-v1\n";
const ENVELOPE_FORMAT: u32 = 1;

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// The envelope as it travels.
#[derive(serde::Serialize, serde::Deserialize)]
struct Envelope {
    format: u32,
    entry: String,
    key: String,
    sig: String,
}

/// What is signed for the entry named `before`.
fn message(before: &str, entry: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(DOMAIN.len() + before.len() + 1 + entry.len());
    m.extend_from_slice(DOMAIN.as_bytes());
    m.extend_from_slice(before.as_bytes());
    m.push(b'\n');
    m.extend_from_slice(entry);
    m
}

/// A public key as `cassist-ed25519:<base64>`.
pub fn public_text(key: &VerifyingKey) -> String {
    encode_key(key.as_bytes(), PUBLIC_PREFIX)
}

/// 32 bytes that are no ed25519 public key.
#[derive(Debug, thiserror::Error)]
#[error("it is not an ed25519 public key")]
pub struct NotAPublicKey(#[source] ed25519_dalek::SignatureError);

/// The system gave no random bytes for a new key.
#[derive(Debug, thiserror::Error)]
#[error("no randomness from the system: {0}")]
pub struct NoRandomness(getrandom::Error);

/// Why a fetched envelope is not used, in the words of the warning.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("truncated or unreadable entry ({0})")]
    Unreadable(#[source] serde_json::Error),
    #[error("truncated or unreadable entry ({0})")]
    Encoding(#[source] base64::DecodeError),
    #[error("entry envelope format {0} is not one this cassist reads")]
    Format(u32),
    #[error("bad signing key: {0}")]
    Key(#[source] KeyError),
    /// Signed by a key the project does not trust (its text).
    #[error("untrusted key {}", cassist_core::text::printable(.0))]
    Untrusted(String),
    #[error("bad signature (unreadable)")]
    SignatureUnreadable,
    /// The signature does not verify: the entry, its name or its key was
    /// changed after signing.
    #[error("bad signature")]
    BadSignature,
}

/// A secret key from its text (`CASSIST_CACHE_SIGNING_KEY`).
pub fn secret_from_text(text: &str) -> Result<SigningKey, KeyError> {
    decode_key(text, SECRET_PREFIX).map(|seed| SigningKey::from_bytes(&seed))
}

/// A public key from its 32 bytes, or why they are not one.
pub fn public_from_bytes(bytes: &[u8; 32]) -> Result<VerifyingKey, NotAPublicKey> {
    VerifyingKey::from_bytes(bytes).map_err(NotAPublicKey)
}

/// A new key pair: (`public …`, `secret …`) texts.
pub fn keygen() -> Result<(String, String), NoRandomness> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(NoRandomness)?;
    let key = SigningKey::from_bytes(&seed);
    Ok((public_text(&key.verifying_key()), encode_key(&seed, SECRET_PREFIX)))
}

/// The envelope of `entry` (the local entry file's bytes) named `before`,
/// signed with `key`.
pub fn seal(key: &SigningKey, before: &str, entry: &[u8]) -> Vec<u8> {
    let sig = key.sign(&message(before, entry));
    let env = Envelope {
        format: ENVELOPE_FORMAT,
        entry: b64().encode(entry),
        key: public_text(&key.verifying_key()),
        sig: b64().encode(sig.to_bytes()),
    };
    serde_json::to_vec(&env).expect("an envelope serializes")
}

/// The entry bytes of an envelope fetched under `before`, and its signer's
/// key (text), if it reads, is signed by one of `trusted` and its
/// signature verifies; else why not, in the words of the warning.
pub fn open(envelope: &[u8], before: &str, trusted: &[VerifyingKey]) -> Result<(Vec<u8>, String), OpenError> {
    let env: Envelope = serde_json::from_slice(envelope).map_err(OpenError::Unreadable)?;
    if env.format != ENVELOPE_FORMAT {
        return Err(OpenError::Format(env.format));
    }
    let key_bytes = decode_key(&env.key, PUBLIC_PREFIX).map_err(OpenError::Key)?;
    let Some(key) = trusted.iter().find(|k| k.as_bytes() == &key_bytes) else {
        return Err(OpenError::Untrusted(env.key));
    };
    let entry = b64().decode(&env.entry).map_err(OpenError::Encoding)?;
    let sig = b64()
        .decode(&env.sig)
        .ok()
        .and_then(|s| Signature::from_slice(&s).ok())
        .ok_or(OpenError::SignatureUnreadable)?;
    key.verify_strict(&message(before, &entry), &sig).map_err(|_| OpenError::BadSignature)?;
    Ok((entry, env.key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (SigningKey, VerifyingKey) {
        let (_, secret) = keygen().unwrap();
        let k = secret_from_text(&secret).unwrap();
        let v = k.verifying_key();
        (k, v)
    }

    #[test]
    fn keygen_prints_a_pair_that_signs_and_verifies() {
        let (public, secret) = keygen().unwrap();
        assert!(public.starts_with("cassist-ed25519:") && secret.starts_with("cassist-ed25519-secret:"));
        let k = secret_from_text(&secret).unwrap();
        assert_eq!(public_text(&k.verifying_key()), public);
        let env = seal(&k, "abc", b"{\"x\":1}");
        assert_eq!(open(&env, "abc", &[k.verifying_key()]).unwrap(), (b"{\"x\":1}".to_vec(), public));
        assert_ne!(keygen().unwrap().1, secret, "two keys are two keys");
    }

    #[test]
    fn a_moved_tampered_untrusted_or_truncated_entry_is_refused() {
        let (k, v) = pair();
        let (_, other) = pair();
        let env = seal(&k, "hash-a", b"entry bytes");
        // Moved to another name: the signature binds the name.
        assert_eq!(open(&env, "hash-b", &[v]).unwrap_err().to_string(), "bad signature");
        // Signed by a key nobody trusts.
        assert!(open(&env, "hash-a", &[other]).unwrap_err().to_string().starts_with("untrusted key cassist-ed25519:"));
        // The entry changed after signing.
        let mut doc: serde_json::Value = serde_json::from_slice(&env).unwrap();
        doc["entry"] = b64().encode(b"entry bytez").into();
        assert_eq!(open(&serde_json::to_vec(&doc).unwrap(), "hash-a", &[v]).unwrap_err().to_string(), "bad signature");
        // Another key's signature under this key's name.
        let mut doc: serde_json::Value = serde_json::from_slice(&env).unwrap();
        doc["key"] = public_text(&other).into();
        let moved_key = open(&serde_json::to_vec(&doc).unwrap(), "hash-a", &[v, other]).unwrap_err();
        assert!(moved_key.to_string().contains("bad signature"));
        // Cut short.
        assert!(open(&env[..env.len() / 2], "hash-a", &[v]).unwrap_err().to_string().starts_with("truncated"));
        // Unsigned (no sig field).
        let unsigned = format!("{{\"format\":1,\"entry\":\"{}\"}}", b64().encode(b"x"));
        assert!(open(unsigned.as_bytes(), "hash-a", &[v]).is_err());
    }

    #[test]
    fn bad_secret_keys_say_why() {
        assert!(secret_from_text("cassist-ed25519:AAAA").unwrap_err().to_string().contains("starts with"));
        assert!(secret_from_text("cassist-ed25519-secret:AAAA").unwrap_err().to_string().contains("bytes"));
    }
}
