//! Who is calling: bearer tokens, roles, principals, and MCP session ids bound to a principal.

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

pub use protocol::Role;

/// An authenticated caller of one bridge: the principal id a request carries to the daemon (a
/// static token's id, `acct_….v<version>` for an OAuth account, `anonymous` without auth), the
/// bridge its credential grants and its role there. Not the runtime's `Principal`, which is the
/// id alone, as the daemon passes it to the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgePrincipal {
    /// Stable id (a token id, or `anonymous` without auth).
    pub id: String,
    /// The bridge the credential grants.
    pub bridge: String,
    /// The role.
    pub role: Role,
    /// The credential that authenticated it: a static token id (`tok_…`), an OAuth grant
    /// (`fam_…`), or `anonymous`. Sessions end when it is revoked.
    pub credential: String,
}

/// A secret the relay shows once: `prefix` + 32 random bytes, base64url.
pub fn random_secret(prefix: &str) -> String {
    let mut b = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut b);
    format!("{prefix}{}", URL_SAFE_NO_PAD.encode(b))
}

/// A public id: `prefix` + 12 random hex digits.
pub fn random_id(prefix: &str) -> String {
    let mut b = [0u8; 6];
    rand::thread_rng().fill_bytes(&mut b);
    format!("{prefix}{}", hex::encode(b))
}

/// Lowercase hex SHA-256 (how tokens and enrollment codes are stored).
pub fn sha256_hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

/// The bearer token of an `Authorization` header value (RFC 6750 §2.1), if it is one.
pub fn bearer(header: &str) -> Option<&str> {
    let (scheme, token) = header.split_once(' ')?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty()).then(|| token.trim())
}

/// Issues and checks MCP session ids bound to a principal: `<random>.<mac>` where `mac` is an
/// HMAC-SHA256 over the random part and the principal id (DESIGN §4). A session id presented by
/// another principal does not verify, so it is as unknown as a made-up one.
#[derive(Clone)]
pub struct SessionKeys {
    key: [u8; 32],
}

impl std::fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionKeys(<redacted>)")
    }
}

impl Default for SessionKeys {
    fn default() -> Self {
        Self::new()
    }
}

impl SessionKeys {
    /// A fresh random key (a hub without a store: tests).
    pub fn new() -> Self {
        let mut key = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut key);
        Self { key }
    }

    /// The keys over `key` (32 bytes kept in the relay store, so that session ids outlive a
    /// restart: [`crate::storage::SessionStore::session_key`]).
    pub fn from_key(key: [u8; 32]) -> Self {
        Self { key }
    }

    fn mac(&self, random: &str, principal: &str) -> String {
        // An HMAC key of any length is valid, so this cannot fail.
        let Ok(mut m) = Hmac::<Sha256>::new_from_slice(&self.key) else {
            return String::new();
        };
        m.update(random.as_bytes());
        m.update(b"\n");
        m.update(principal.as_bytes());
        URL_SAFE_NO_PAD.encode(&m.finalize().into_bytes()[..16])
    }

    /// A new session id for `principal`.
    pub fn issue(&self, principal: &str) -> String {
        let mut b = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut b);
        let random = URL_SAFE_NO_PAD.encode(b);
        let mac = self.mac(&random, principal);
        format!("{random}.{mac}")
    }

    /// Whether `sid` was issued for `principal` (constant-time comparison of the MAC).
    pub fn verify(&self, sid: &str, principal: &str) -> bool {
        let Some((random, mac)) = sid.split_once('.') else {
            return false;
        };
        let expected = self.mac(random, principal);
        expected.as_bytes().ct_eq(mac.as_bytes()).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_bound_to_their_principal() {
        let k = SessionKeys::new();
        let sid = k.issue("tok_a");
        assert!(k.verify(&sid, "tok_a"));
        assert!(!k.verify(&sid, "tok_b"));
        assert!(!k.verify("made.up", "tok_a"));
        assert!(
            !SessionKeys::new().verify(&sid, "tok_a"),
            "another relay's key"
        );
    }

    #[test]
    fn bearer_parsing() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer  abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearer "), None);
    }
}
