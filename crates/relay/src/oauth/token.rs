//! `POST /oauth/token` (OAuth 2.1 §3.2) and `POST /oauth/revoke` (RFC 7009).
//!
//! Grants: `authorization_code` with PKCE (RFC 7636 §4.6) and `refresh_token`. Tokens are opaque
//! random strings (`mba_…` access, `mbr_…` refresh) stored only as SHA-256 hashes; an access
//! token lives [`super::OAuthSettings::access_token_lifetime`], a refresh token
//! [`REFRESH_TOKEN_LIFETIME`] from its issue and rotates on every use, with the retry grace and
//! family revocation of [`crate::storage::oauth`]. A request with a DPoP proof (RFC 9449 §5)
//! gets tokens bound to the proof's key (`token_type: DPoP`); later refreshes and every MCP
//! request must then prove the same key.

use std::{net::SocketAddr, sync::Arc};

use axum::{
    Json,
    body::Body,
    extract::{ConnectInfo, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
};
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{
    OAuth, OAuthError, client_address,
    clients::{self, AuthMethod, Client, Presented},
    content_type_is,
    error::no_store,
    form::Form,
    jwt, resource,
};
use crate::limits::{
    CLIENT_JWKS_MAX_BYTES, OAUTH_FORM_MAX_BYTES, OAUTH_PARAM_MAX_BYTES, REFRESH_REISSUES_MAX,
    REFRESH_TOKEN_LIFETIME,
};
use crate::{
    auth::{random_secret, sha256_hex},
    config::RelayConfig,
    storage::{
        now,
        oauth::{Grant, NewTokens, Redemption, Rotation, RotationRules},
    },
};

/// Reads the form of a token or revocation request (its body within its size and time).
async fn read_form(headers: &HeaderMap, body: Body) -> Result<Form, OAuthError> {
    if !content_type_is(headers, "application/x-www-form-urlencoded") {
        return Err(OAuthError::invalid_request(
            "send the request as Content-Type: application/x-www-form-urlencoded",
        ));
    }
    let body = crate::server::read_body(body, OAUTH_FORM_MAX_BYTES).await?;
    Form::parse(
        &body,
        OAUTH_PARAM_MAX_BYTES,
        &["client_assertion"],
        OAUTH_FORM_MAX_BYTES,
    )
    .map_err(|e| OAuthError::invalid_request(e.to_string()))
}

/// Authenticates the client of a token or revocation request (RFC 6749 §2.3, RFC 7523 §2.2)
/// and returns it with the verified assertion to consume when the request succeeds.
///
/// # Errors
/// 401 `invalid_client` for an unknown or revoked client, a method the client did not
/// register, a wrong secret or an assertion that does not verify; 400 `invalid_request` for a
/// malformed authentication.
async fn authenticate(
    oauth: &OAuth,
    headers: &HeaderMap,
    form: &Form,
    address: &str,
) -> Result<(Client, Option<jwt::Verified>), OAuthError> {
    let presented = Presented::read(headers, form)?;
    let basic = matches!(presented, Presented::SecretBasic(..));
    let fail = |m: &str| {
        let mut e = OAuthError::invalid_client(m.to_owned());
        if basic {
            e.challenge = Some("Basic realm=\"machine-mcp\"".into());
        }
        e
    };
    let assertion_issuer = match &presented {
        Presented::Assertion(None, a) => assertion_subject(a),
        _ => None,
    };
    let Some(client_id) = presented
        .client_id()
        .map(str::to_owned)
        .or(assertion_issuer)
    else {
        return Err(fail("client_id is required"));
    };
    let client = clients::find(oauth, &client_id, address)
        .await
        .map_err(|e| {
            if e.error == "invalid_client" && basic {
                fail(&e.description)
            } else {
                e
            }
        })?;
    let method = presented.method();
    if !client.metadata.allows(method) {
        return Err(fail(&format!(
            "this client authenticates with {}, not {}",
            client.metadata.token_endpoint_auth_method.as_str(),
            method.as_str()
        )));
    }
    let verified = match (&presented, method) {
        (_, AuthMethod::None) => None,
        (p, AuthMethod::ClientSecretPost | AuthMethod::ClientSecretBasic) => {
            if !p.secret_matches(&client) {
                return Err(fail("the client secret is wrong"));
            }
            None
        }
        (Presented::Assertion(_, a), AuthMethod::PrivateKeyJwt) => {
            let set = match (&client.metadata.jwks, &client.metadata.jwks_uri) {
                (Some(set), _) => set.clone(),
                (None, Some(uri)) => {
                    oauth
                        .fetcher
                        .fetch(uri, CLIENT_JWKS_MAX_BYTES)
                        .await
                        .map_err(|e| fail(&format!("cannot read the client's JWK Set: {e}")))?
                        .json
                }
                (None, None) => return Err(fail("the client has no JWK Set")),
            };
            let audiences = vec![
                resource::url(&oauth.config, resource::TOKEN_PATH),
                resource::issuer(&oauth.config),
                resource::url(&oauth.config, resource::REVOKE_PATH),
            ];
            Some(
                jwt::verify_assertion(a, &client.id, &jwt::usable_keys(&set), &audiences)
                    .map_err(|e| fail(&e))?,
            )
        }
        _ => return Err(fail("the client authentication does not match its method")),
    };
    Ok((client, verified))
}

/// The `iss` of an assertion, read without verifying (only to find the client whose keys will
/// verify it).
fn assertion_subject(assertion: &str) -> Option<String> {
    let payload = assertion.split('.').nth(1)?;
    let v: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()?;
    v.get("iss")?.as_str().map(str::to_owned)
}

/// Whether a DPoP proof's `htu` names `path` of this relay (its public URL; on a loopback
/// listener a loopback alias of it too).
pub fn htu_is(config: &RelayConfig, htu: &str, path: &str) -> bool {
    let Ok(u) = url::Url::parse(htu) else {
        return false;
    };
    let origin = u.origin().ascii_serialization();
    let expected_path = format!("{}{path}", config.public_url.path().trim_end_matches('/'));
    u.path() == expected_path && crate::origin::own_origin(config, &origin)
}

fn new_tokens(oauth: &OAuth) -> (String, String, NewTokens) {
    let access = random_secret("mba_");
    let refresh = random_secret("mbr_");
    let t = now();
    let hashes = NewTokens {
        access_hash: sha256_hex(&access),
        access_expires_at: t + oauth.settings.access_token_lifetime.as_secs() as i64,
        refresh_hash: sha256_hex(&refresh),
        refresh_expires_at: t + REFRESH_TOKEN_LIFETIME.as_secs() as i64,
    };
    (access, refresh, hashes)
}

fn token_answer(oauth: &OAuth, grant: &Grant, access: &str, refresh: Option<&str>) -> Response {
    let mut v = json!({
        "access_token": access,
        "token_type": if grant.dpop_jkt.is_some() { "DPoP" } else { "Bearer" },
        "expires_in": oauth.settings.access_token_lifetime.as_secs(),
        "scope": grant.scope,
    });
    if let Some(r) = refresh {
        v["refresh_token"] = json!(r);
    }
    (StatusCode::OK, no_store(), Json(v)).into_response()
}

/// The DPoP proof of a token request, verified (RFC 9449 §5), if the request carries one.
fn dpop_proof(oauth: &OAuth, headers: &HeaderMap) -> Result<Option<jwt::Verified>, OAuthError> {
    let mut proofs = headers.get_all("dpop").iter();
    let Some(proof) = proofs.next() else {
        return Ok(None);
    };
    if proofs.next().is_some() {
        return Err(OAuthError::bad(
            "invalid_dpop_proof",
            "send one DPoP header",
        ));
    }
    let proof = proof
        .to_str()
        .map_err(|_| OAuthError::bad("invalid_dpop_proof", "the DPoP header is not ASCII"))?;
    jwt::verify_dpop(
        proof,
        "POST",
        |htu| htu_is(&oauth.config, htu, resource::TOKEN_PATH),
        None,
    )
    .map(Some)
    .map_err(|e| OAuthError::bad("invalid_dpop_proof", e))
}

async fn consume_all(oauth: &OAuth, proofs: &[&Option<jwt::Verified>]) -> Result<(), OAuthError> {
    for v in proofs.iter().filter_map(|p| p.as_ref()) {
        jwt::consume(v, oauth.store.guards())
            .await
            .map_err(OAuthError::invalid_client)?;
    }
    Ok(())
}

/// `POST /oauth/token`.
///
/// Answers 200 with `access_token`, `token_type` (`Bearer`, or `DPoP` when bound), `expires_in`
/// (seconds), `scope` and, for clients that registered the `refresh_token` grant,
/// `refresh_token`. Errors (RFC 6749 §5.2): `invalid_request` (malformed, a duplicated or
/// non-UTF-8 parameter, missing `code_verifier`…), `invalid_client` (401), `invalid_grant` (a
/// code unknown, expired, used, of another client or redirect URI, a PKCE mismatch, a refresh
/// token unknown, expired, replayed after the grace, of another client or DPoP key, an account
/// that changed), `invalid_target` (another resource), `unsupported_grant_type`,
/// `invalid_dpop_proof`. Nothing is issued or stored on an error, except that a replayed code
/// or refresh token revokes the grant it belongs to.
pub async fn token(
    State(oauth): State<Arc<OAuth>>,
    connect: Option<axum::Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let address = client_address(
        &oauth.config.trusted_proxies,
        connect.as_ref().map(|c| &c.0),
        &headers,
    );
    match token_inner(&oauth, &headers, body, &address).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn token_inner(
    oauth: &OAuth,
    headers: &HeaderMap,
    body: Body,
    address: &str,
) -> Result<Response, OAuthError> {
    let form = read_form(headers, body).await?;
    let (client, assertion) = authenticate(oauth, headers, &form, address).await?;
    let dpop = dpop_proof(oauth, headers)?;
    let jkt = dpop.as_ref().map(|d| d.jkt.clone());
    match form.get("grant_type") {
        Some("authorization_code") => {
            let code = form
                .get("code")
                .ok_or_else(|| OAuthError::invalid_request("code is required"))?;
            let verifier = form
                .get("code_verifier")
                .ok_or_else(|| OAuthError::invalid_request("code_verifier is required (PKCE)"))?;
            if !(43..=128).contains(&verifier.len())
                || !verifier
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
            {
                return Err(OAuthError::invalid_request(
                    "code_verifier must be 43-128 unreserved characters (RFC 7636 §4.1)",
                ));
            }
            let redeemed = match oauth.store.oauth().redeem_code(&sha256_hex(code)).await? {
                Redemption::Redeemed(c) => *c,
                Redemption::Replayed => {
                    tracing::warn!(client = %client.id, "an authorization code was presented twice; its grant is revoked");
                    return Err(OAuthError::invalid_grant(
                        "the authorization code was already used",
                    ));
                }
                Redemption::Invalid => {
                    return Err(OAuthError::invalid_grant(
                        "the authorization code is unknown or expired",
                    ));
                }
            };
            if redeemed.client_id != client.id {
                return Err(OAuthError::invalid_grant(
                    "the authorization code was issued to another client",
                ));
            }
            match form.get("redirect_uri") {
                Some(r) if r == redeemed.redirect_uri => {}
                Some(_) => {
                    return Err(OAuthError::invalid_grant(
                        "redirect_uri differs from the authorization request",
                    ));
                }
                None => return Err(OAuthError::invalid_request("redirect_uri is required")),
            }
            let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
            if !bool::from(subtle::ConstantTimeEq::ct_eq(
                challenge.as_bytes(),
                redeemed.code_challenge.as_bytes(),
            )) {
                return Err(OAuthError::invalid_grant(
                    "the code_verifier does not match the code_challenge (PKCE)",
                ));
            }
            if let Some(r) = form.get("resource")
                && resource::parse(&oauth.config, r).map(|t| resource::resource(&oauth.config, &t))
                    != Some(redeemed.resource.clone())
            {
                return Err(OAuthError::bad(
                    "invalid_target",
                    "resource differs from the authorization request",
                ));
            }
            if let Some(bound) = &redeemed.dpop_jkt
                && jkt.as_ref() != Some(bound)
            {
                return Err(OAuthError::bad(
                    "invalid_dpop_proof",
                    "the code is bound to a DPoP key: send a proof signed with it",
                ));
            }
            consume_all(oauth, &[&assertion, &dpop]).await?;
            let (access, refresh, hashes) = new_tokens(oauth);
            let Some(grant) = oauth
                .store
                .oauth()
                .create_grant(&redeemed, jkt.as_deref(), &hashes)
                .await?
            else {
                return Err(OAuthError::invalid_grant(
                    "the account changed or was disabled since the code was issued; sign in again",
                ));
            };
            let _ = oauth.store.oauth().touch_client(&client.id).await;
            let refresh = client
                .metadata
                .wants_refresh_tokens()
                .then_some(refresh.as_str());
            Ok(token_answer(oauth, &grant, &access, refresh))
        }
        Some("refresh_token") => {
            if !client.metadata.wants_refresh_tokens() {
                return Err(OAuthError::bad(
                    "unauthorized_client",
                    "this client did not register the refresh_token grant",
                ));
            }
            let token = form
                .get("refresh_token")
                .ok_or_else(|| OAuthError::invalid_request("refresh_token is required"))?;
            let (access, refresh, hashes) = new_tokens(oauth);
            let rules = RotationRules {
                client_id: &client.id,
                dpop_jkt: jkt.as_deref(),
                grace_secs: oauth.settings.refresh_reuse_grace.as_secs() as i64,
                max_reissues: REFRESH_REISSUES_MAX,
            };
            let grant = match oauth
                .store
                .oauth()
                .rotate_refresh(&sha256_hex(token), rules, &hashes)
                .await?
            {
                Rotation::Rotated(g) => *g,
                Rotation::Replayed => {
                    tracing::warn!(client = %client.id, "a rotated refresh token was presented after the grace; its grant is revoked");
                    return Err(OAuthError::invalid_grant(
                        "the refresh token was already used; the grant is revoked, sign in again",
                    ));
                }
                Rotation::Invalid(why) => return Err(OAuthError::invalid_grant(why)),
            };
            if let Some(r) = form.get("resource")
                && resource::parse(&oauth.config, r).map(|t| resource::resource(&oauth.config, &t))
                    != Some(grant.resource.clone())
            {
                return Err(OAuthError::bad(
                    "invalid_target",
                    "resource differs from the grant's",
                ));
            }
            consume_all(oauth, &[&assertion, &dpop]).await?;
            let _ = oauth.store.oauth().touch_client(&client.id).await;
            Ok(token_answer(oauth, &grant, &access, Some(&refresh)))
        }
        Some(other) => Err(OAuthError::bad(
            "unsupported_grant_type",
            format!("grant_type {other:?} is not supported (authorization_code, refresh_token)"),
        )),
        None => Err(OAuthError::invalid_request("grant_type is required")),
    }
}

/// `POST /oauth/revoke` (RFC 7009 §2): the authenticated client revokes one of its access or
/// refresh tokens; its grant ends, with the client's other grants for the same account and
/// redirect URI. Answers 200 with an empty body whether or not the token was known (§2.2);
/// `invalid_client` (401) and `invalid_request` as at the token endpoint.
pub async fn revoke(
    State(oauth): State<Arc<OAuth>>,
    connect: Option<axum::Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let address = client_address(
        &oauth.config.trusted_proxies,
        connect.as_ref().map(|c| &c.0),
        &headers,
    );
    let run = async {
        let form = read_form(&headers, body).await?;
        let (client, assertion) = authenticate(&oauth, &headers, &form, &address).await?;
        let token = form
            .get("token")
            .ok_or_else(|| OAuthError::invalid_request("token is required"))?;
        consume_all(&oauth, &[&assertion]).await?;
        let ended = oauth
            .store
            .oauth()
            .revoke_by_token(&sha256_hex(token), &client.id)
            .await?;
        if ended > 0 {
            tracing::info!(client = %client.id, grants = ended, "a client revoked its grant");
        }
        Ok::<_, OAuthError>((StatusCode::OK, no_store()).into_response())
    };
    match run.await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}
