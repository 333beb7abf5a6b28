//! `POST /oauth/register`: RFC 7591 dynamic client registration (deprecated by MCP 2026-07-28 in
//! favour of client ID metadata documents, and still what many hosts send).
//!
//! It accepts what real clients send by keeping what it supports ([`ClientMetadata::validate`]),
//! issues a secret when the client asked for a secret-based method, and answers with the
//! metadata it kept (RFC 7591 §3.2.1; no empty or null members). Registrations are bounded per
//! client address and in all, and unused ones expire ([`crate::storage::oauth`]).

use std::{net::SocketAddr, sync::Arc};

use axum::{
    Json,
    body::Body,
    extract::{ConnectInfo, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};

use super::{
    OAuth, OAuthError, client_address, clients::ClientMetadata, content_type_is, error::no_store,
};
use crate::limits::{
    REGISTERED_CLIENTS_MAX, REGISTRATION_BODY_MAX_BYTES, REGISTRATIONS_PER_ADDRESS,
};
use crate::{
    auth::{random_id, random_secret, sha256_hex},
    storage::{StorageError, oauth::ClientKind},
};

/// Registers a client.
///
/// Answers 201 with `client_id`, `client_id_issued_at`, for secret-based methods `client_secret`
/// and `client_secret_expires_at: 0`, and the kept metadata. Errors (JSON, RFC 7591 §3.2.2):
/// 400 `invalid_client_metadata` / `invalid_redirect_uri` ([`ClientMetadata::validate`], a body
/// that is not JSON or not `application/json`), 413 for a body over
/// [`REGISTRATION_BODY_MAX_BYTES`], 429 past [`REGISTRATIONS_PER_ADDRESS`] per window from one
/// address, 503 when [`REGISTERED_CLIENTS_MAX`] clients are kept. Nothing is stored on an error.
pub async fn register(
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
    match register_inner(&oauth, &address, &headers, body).await {
        Ok(v) => (StatusCode::CREATED, no_store(), Json(v)).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn register_inner(
    oauth: &OAuth,
    address: &str,
    headers: &HeaderMap,
    body: Body,
) -> Result<Value, OAuthError> {
    let key = format!("register {address}");
    if oauth
        .store
        .guards()
        .blocked(&key, REGISTRATIONS_PER_ADDRESS)
        .await
        .is_some()
    {
        return Err(OAuthError::bad(
            "invalid_client_metadata",
            "too many registrations from this address; try again later",
        )
        .with_status(StatusCode::TOO_MANY_REQUESTS));
    }
    if !content_type_is(headers, "application/json") {
        return Err(OAuthError::bad(
            "invalid_client_metadata",
            "send the registration as Content-Type: application/json",
        ));
    }
    let bytes = crate::server::read_body(body, REGISTRATION_BODY_MAX_BYTES)
        .await
        .map_err(|e| {
            let mut err = OAuthError::from(e);
            err.error = "invalid_client_metadata";
            err
        })?;
    let request: Value = serde_json::from_slice(&bytes).map_err(|e| {
        OAuthError::bad(
            "invalid_client_metadata",
            format!("the registration body is not JSON: {e}"),
        )
    })?;
    let metadata = ClientMetadata::validate(&request, ClientKind::Registered)?;
    oauth.store.guards().record(&key).await;
    let client_id = random_id("mbc_");
    let secret = metadata
        .token_endpoint_auth_method
        .uses_secret()
        .then(|| random_secret("mbs_"));
    let stored = serde_json::to_string(&metadata).map_err(|_| OAuthError::unavailable())?;
    match oauth
        .store
        .oauth()
        .register_client(
            &client_id,
            &stored,
            secret.as_deref().map(sha256_hex).as_deref(),
            REGISTERED_CLIENTS_MAX,
        )
        .await
    {
        Ok(()) => {}
        Err(StorageError::Conflict(m)) => {
            return Err(OAuthError::bad("temporarily_unavailable", m)
                .with_status(StatusCode::SERVICE_UNAVAILABLE));
        }
        Err(e) => return Err(e.into()),
    }
    tracing::info!(client = %client_id, name = ?metadata.client_name, "registered an OAuth client");
    let mut answer = serde_json::to_value(&metadata).map_err(|_| OAuthError::unavailable())?;
    answer["client_id"] = json!(client_id);
    answer["client_id_issued_at"] = json!(crate::storage::now());
    if let Some(s) = secret {
        answer["client_secret"] = json!(s);
        answer["client_secret_expires_at"] = json!(0);
    }
    if let Some(o) = answer.as_object_mut() {
        o.remove("other_auth_methods");
    }
    Ok(answer)
}
