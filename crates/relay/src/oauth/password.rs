//! Account passwords: argon2id hashes in PHC string form (RFC 9106; the argon2 crate's defaults,
//! m = 19 MiB, t = 2, p = 1, as OWASP recommends), random generated passwords, and a
//! constant-work check for unknown accounts.

use argon2::{
    Argon2, PasswordHash, PasswordHasher, PasswordVerifier,
    password_hash::{SaltString, rand_core::OsRng},
};
use rand::Rng;

/// Characters of generated passwords: no look-alikes (0/O, 1/l/I).
const ALPHABET: &[u8] = b"23456789abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ";
/// Length of a generated password (~139 bits).
const GENERATED_LEN: usize = 24;

/// Why a password cannot be set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PasswordError {
    /// Fewer than [`protocol::limits::PASSWORD_MIN_CHARS`] characters other than spaces.
    #[error("a password needs at least {0} characters that are not spaces")]
    TooShort(usize),
    /// Hashing failed (should not happen with valid parameters).
    #[error("cannot hash the password: {0}")]
    Hash(String),
}

/// A new random password.
pub fn generate() -> String {
    let mut rng = rand::thread_rng();
    (0..GENERATED_LEN)
        .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char)
        .collect()
}

/// The argon2id PHC string of `password` with a fresh salt. CPU-heavy (tens of ms): call it
/// off the async threads.
///
/// # Errors
/// [`PasswordError::TooShort`] under the minimum length; [`PasswordError::Hash`].
pub fn hash(password: &str) -> Result<String, PasswordError> {
    let min = protocol::limits::PASSWORD_MIN_CHARS;
    if password.chars().filter(|c| !c.is_whitespace()).count() < min {
        return Err(PasswordError::TooShort(min));
    }
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| PasswordError::Hash(e.to_string()))
}

/// Whether `password` matches the PHC string `stored` (any argon2 variant the string names).
/// With `stored` none, does the same work against a fixed hash and returns false, so an unknown
/// account takes as long as a wrong password. CPU-heavy: call it off the async threads.
pub fn verify(password: &str, stored: Option<&str>) -> bool {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let dummy = DUMMY.get_or_init(|| hash(&generate()).unwrap_or_default());
    let (phc, real) = match stored {
        Some(s) => (s, true),
        None => (dummy.as_str(), false),
    };
    let Ok(parsed) = PasswordHash::new(phc) else {
        return false;
    };
    let ok = Argon2::default()
        .verify_password(password.as_bytes(), &parsed)
        .is_ok();
    ok && real
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_verify_only_their_password_and_short_ones_are_refused() {
        let p = generate();
        assert_eq!(p.len(), GENERATED_LEN);
        let h = hash(&p).unwrap();
        assert!(h.starts_with("$argon2id$"), "{h}");
        assert!(verify(&p, Some(&h)));
        assert!(!verify("wrong password!", Some(&h)));
        assert!(!verify(&p, None), "unknown accounts never verify");
        assert!(!verify(&p, Some("not a phc string")));
        assert_eq!(hash("short"), Err(PasswordError::TooShort(12)));
        assert_eq!(hash("             "), Err(PasswordError::TooShort(12)));
    }
}
