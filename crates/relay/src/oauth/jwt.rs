//! Signed JWTs the relay verifies: DPoP proofs (RFC 9449 §4) and `private_key_jwt` client
//! assertions (RFC 7523 §3), with `jsonwebtoken` doing the signature checks.
//!
//! Both are single-use: their `jti` is remembered ([`GuardStore::first_use`]) for as long as
//! they could be accepted. Callers verify first and [`consume`] the id once everything else about the request
//! held, so refused requests cannot fill the set.

use std::collections::HashSet;

use crate::storage::{GuardStore, Seen};
use crate::{limits::PROOF_CLOCK_SKEW, limits::PROOF_MAX_AGE};
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use jsonwebtoken::{
    Algorithm, DecodingKey, Validation, decode, decode_header,
    jwk::{AlgorithmParameters, EllipticCurve, Jwk, ThumbprintHash},
};
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// A verified JWT whose id still has to be recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// For a DPoP proof: the JWK SHA-256 thumbprint of its key (RFC 7638, base64url).
    pub jkt: String,
    key: String,
    until_secs: u64,
}

/// Records the id of a verified proof or assertion.
///
/// # Errors
/// A message when the id was used before (a replay) or too many recent ids are remembered.
pub async fn consume(v: &Verified, guards: &dyn GuardStore) -> Result<(), String> {
    let ttl = std::time::Duration::from_secs(v.until_secs);
    match guards.first_use(&v.key, ttl).await {
        Seen::First => Ok(()),
        Seen::Again => Err("this proof was used before (jti replay)".into()),
        Seen::Full => Err("the relay cannot take more proofs right now; retry in a minute".into()),
    }
}

fn now_secs() -> i64 {
    crate::storage::now()
}

/// The `alg` names the relay verifies for client assertions.
pub const ASSERTION_ALGORITHMS: [&str; 8] = [
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384",
];

#[derive(Debug, Deserialize)]
struct DpopClaims {
    jti: String,
    htm: String,
    htu: String,
    iat: i64,
    #[serde(default)]
    ath: Option<String>,
}

/// The raw JOSE header of `token`, for members `jsonwebtoken` does not expose.
fn raw_header(token: &str) -> Option<Value> {
    let first = token.split('.').next()?;
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(first).ok()?).ok()
}

/// base64url(SHA-256(`access_token`)), the `ath` claim (RFC 9449 §4.2).
pub fn access_token_hash(access_token: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(access_token.as_bytes()))
}

/// Verifies a DPoP proof (RFC 9449 §4.3): `typ` `dpop+jwt`, ES256 over the public P-256 JWK in
/// its header, `htm` = `method`, `htu` accepted by `htu_ok` (target URI without query and
/// fragment), `iat` within [`PROOF_MAX_AGE`] in the past and [`PROOF_CLOCK_SKEW`] in the future,
/// and, when `access_token` is given, `ath` its hash.
///
/// # Errors
/// A message naming the first check that failed.
pub fn verify_dpop(
    proof: &str,
    method: &str,
    htu_ok: impl Fn(&str) -> bool,
    access_token: Option<&str>,
) -> Result<Verified, String> {
    let raw = raw_header(proof).ok_or("the DPoP proof is not a JWT")?;
    if raw.get("typ").and_then(Value::as_str) != Some("dpop+jwt") {
        return Err("the DPoP proof's typ must be dpop+jwt".into());
    }
    if raw.pointer("/jwk/d").is_some() {
        return Err("the DPoP proof's jwk must be a public key".into());
    }
    let header = decode_header(proof).map_err(|e| format!("the DPoP proof header: {e}"))?;
    if header.alg != Algorithm::ES256 {
        return Err("the relay accepts DPoP proofs signed with ES256 only".into());
    }
    let jwk = header.jwk.ok_or("the DPoP proof has no jwk header")?;
    match &jwk.algorithm {
        AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P256 => {}
        _ => return Err("the DPoP proof's jwk must be an EC P-256 key".into()),
    }
    let key = DecodingKey::from_jwk(&jwk).map_err(|e| format!("the DPoP proof's jwk: {e}"))?;
    let mut v = Validation::new(Algorithm::ES256);
    v.validate_exp = false;
    v.validate_aud = false;
    v.required_spec_claims = HashSet::new();
    let claims = decode::<DpopClaims>(proof, &key, &v)
        .map_err(|e| format!("the DPoP proof does not verify: {e}"))?
        .claims;
    if claims.jti.is_empty() || claims.jti.len() > 256 {
        return Err("the DPoP proof needs a jti of 1-256 characters".into());
    }
    if claims.htm != method {
        return Err(format!("the DPoP proof's htm must be {method}"));
    }
    if !htu_ok(&claims.htu) {
        return Err("the DPoP proof's htu is not this URL".into());
    }
    let now = now_secs();
    if claims.iat > now + PROOF_CLOCK_SKEW.as_secs() as i64
        || claims.iat < now - PROOF_MAX_AGE.as_secs() as i64
    {
        return Err("the DPoP proof's iat is too far from the relay's clock".into());
    }
    if let Some(token) = access_token
        && claims.ath.as_deref() != Some(access_token_hash(token).as_str())
    {
        return Err("the DPoP proof's ath does not match the access token".into());
    }
    let jkt = jwk.thumbprint(ThumbprintHash::SHA256);
    Ok(Verified {
        key: format!("dpop {jkt} {}", claims.jti),
        jkt,
        until_secs: (PROOF_MAX_AGE + PROOF_CLOCK_SKEW).as_secs(),
    })
}

#[derive(Debug, Deserialize)]
struct AssertionClaims {
    jti: String,
    exp: i64,
}

/// The public keys of a JWK Set (`{"keys": [...]}`) the relay can use (RSA, EC, OKP);
/// symmetric and private keys, and keys it cannot read, are skipped.
pub fn usable_keys(set: &Value) -> Vec<Jwk> {
    set.get("keys")
        .and_then(Value::as_array)
        .map(|keys| {
            keys.iter()
                .filter(|k| k.get("d").is_none())
                .filter_map(|k| serde_json::from_value::<Jwk>(k.clone()).ok())
                .filter(|k| !matches!(k.algorithm, AlgorithmParameters::OctetKey(_)))
                .collect()
        })
        .unwrap_or_default()
}

/// Verifies a client assertion (RFC 7523 §3) of `client_id` against the client's `keys`: a
/// supported asymmetric `alg`, the key named by `kid` (or any key when none is named), `iss`
/// and `sub` = `client_id`, `aud` one of `audiences`, an `exp` in the future and at most
/// [`PROOF_MAX_AGE`] away, and a `jti`.
///
/// # Errors
/// A message naming the first check that failed.
pub fn verify_assertion(
    assertion: &str,
    client_id: &str,
    keys: &[Jwk],
    audiences: &[String],
) -> Result<Verified, String> {
    let header =
        decode_header(assertion).map_err(|e| format!("the client assertion header: {e}"))?;
    let alg_name = format!("{:?}", header.alg);
    if !ASSERTION_ALGORITHMS.contains(&alg_name.as_str()) {
        return Err(format!(
            "client assertions signed with {alg_name} are not accepted"
        ));
    }
    let candidates: Vec<&Jwk> = keys
        .iter()
        .filter(|k| header.kid.is_none() || k.common.key_id == header.kid)
        .collect();
    if candidates.is_empty() {
        return Err("no key of the client's JWK Set matches the assertion's kid".into());
    }
    let mut v = Validation::new(header.alg);
    v.set_audience(audiences);
    v.set_issuer(&[client_id]);
    v.sub = Some(client_id.to_owned());
    v.leeway = PROOF_CLOCK_SKEW.as_secs();
    v.set_required_spec_claims(&["exp", "iss", "sub", "aud"]);
    let mut last = String::from("the client assertion does not verify");
    for jwk in candidates {
        let Ok(key) = DecodingKey::from_jwk(jwk) else {
            continue;
        };
        match decode::<AssertionClaims>(assertion, &key, &v) {
            Ok(data) => {
                let c = data.claims;
                let now = now_secs();
                if c.exp > now + (PROOF_MAX_AGE + PROOF_CLOCK_SKEW).as_secs() as i64 {
                    return Err(
                        "the client assertion lives too long (exp more than 5 minutes ahead)"
                            .into(),
                    );
                }
                if c.jti.is_empty() || c.jti.len() > 256 {
                    return Err("the client assertion needs a jti".into());
                }
                return Ok(Verified {
                    jkt: String::new(),
                    key: format!("assertion {client_id} {}", c.jti),
                    until_secs: (c.exp - now).max(0) as u64 + PROOF_CLOCK_SKEW.as_secs(),
                });
            }
            Err(e) => last = format!("the client assertion does not verify: {e}"),
        }
    }
    Err(last)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use jsonwebtoken::{EncodingKey, Header, encode};
    use p256::{ecdsa::SigningKey, pkcs8::EncodePrivateKey};
    use serde_json::json;

    /// A P-256 key as a signing key and its public JWK.
    pub(crate) fn es256_key() -> (EncodingKey, Value) {
        let sk = SigningKey::random(&mut rand::rngs::OsRng);
        let point = sk.verifying_key().to_encoded_point(false);
        let jwk = json!({"kty": "EC", "crv": "P-256",
            "x": URL_SAFE_NO_PAD.encode(point.x().unwrap()),
            "y": URL_SAFE_NO_PAD.encode(point.y().unwrap())});
        let der = sk.to_pkcs8_der().unwrap();
        (EncodingKey::from_ec_der(der.as_bytes()), jwk)
    }

    /// A DPoP proof for `method` `htu` signed with `key` (whose public JWK is `jwk`).
    pub(crate) fn proof(
        key: &EncodingKey,
        jwk: &Value,
        method: &str,
        htu: &str,
        ath: Option<&str>,
    ) -> String {
        let mut h = Header::new(Algorithm::ES256);
        h.typ = Some("dpop+jwt".into());
        h.jwk = Some(serde_json::from_value(jwk.clone()).unwrap());
        let mut claims = json!({"jti": crate::auth::random_id("j"), "htm": method, "htu": htu, "iat": now_secs()});
        if let Some(t) = ath {
            claims["ath"] = json!(access_token_hash(t));
        }
        encode(&h, &claims, key).unwrap()
    }

    #[tokio::test]
    async fn a_dpop_proof_verifies_once_and_binds_its_key() {
        let (key, jwk) = es256_key();
        let p = proof(&key, &jwk, "POST", "https://r.example/oauth/token", None);
        let ok = |u: &str| u == "https://r.example/oauth/token";
        let v = verify_dpop(&p, "POST", ok, None).unwrap();
        assert_eq!(v.jkt.len(), 43);
        let guards = crate::storage::MemoryGuards::default();
        consume(&v, &guards).await.unwrap();
        assert!(consume(&v, &guards).await.unwrap_err().contains("replay"));
        assert!(
            verify_dpop(&p, "GET", ok, None)
                .unwrap_err()
                .contains("htm")
        );
        assert!(
            verify_dpop(&p, "POST", |_| false, None)
                .unwrap_err()
                .contains("htu")
        );
        let bound = proof(&key, &jwk, "GET", "https://r.example/b/x/mcp", Some("tok"));
        assert!(verify_dpop(&bound, "GET", |_| true, Some("tok")).is_ok());
        assert!(
            verify_dpop(&bound, "GET", |_| true, Some("other"))
                .unwrap_err()
                .contains("ath")
        );
        let (other, _) = es256_key();
        let forged = proof(&other, &jwk, "POST", "https://r.example/oauth/token", None);
        assert!(
            verify_dpop(&forged, "POST", ok, None)
                .unwrap_err()
                .contains("does not verify")
        );
        assert!(verify_dpop("a.b.c", "POST", ok, None).is_err());
    }

    #[test]
    fn a_client_assertion_verifies_against_the_clients_keys() {
        let (key, mut jwk) = es256_key();
        jwk["kid"] = json!("k1");
        let keys = usable_keys(&json!({"keys": [{"kty": "oct", "k": "AAAA"}, jwk]}));
        assert_eq!(keys.len(), 1, "symmetric keys are not client keys here");
        let mut h = Header::new(Algorithm::ES256);
        h.kid = Some("k1".into());
        let client = "https://c.example/meta.json";
        let aud = vec!["https://r.example/oauth/token".to_owned()];
        let claims = |iss: &str, exp: i64| json!({"iss": iss, "sub": iss, "aud": aud[0], "exp": exp, "jti": crate::auth::random_id("a")});
        let good = encode(&h, &claims(client, now_secs() + 60), &key).unwrap();
        assert!(verify_assertion(&good, client, &keys, &aud).is_ok());
        let wrong_iss = encode(&h, &claims("https://x.example/m", now_secs() + 60), &key).unwrap();
        assert!(verify_assertion(&wrong_iss, client, &keys, &aud).is_err());
        let expired = encode(&h, &claims(client, now_secs() - 600), &key).unwrap();
        assert!(verify_assertion(&expired, client, &keys, &aud).is_err());
        let long = encode(&h, &claims(client, now_secs() + 3600), &key).unwrap();
        assert!(
            verify_assertion(&long, client, &keys, &aud)
                .unwrap_err()
                .contains("too long")
        );
        assert!(verify_assertion(&good, client, &keys, &["https://other/".into()]).is_err());
    }
}
