//! The relay's OAuth 2.1 authorization server (DESIGN §6; MCP 2025-06-18, 2025-11-25 and
//! 2026-07-28 Basic › Authorization) and the resource-server side of its MCP endpoints.
//!
//! - Discovery ([`metadata`]): RFC 9728 protected-resource metadata for every MCP URL (path-
//!   inserted and root), RFC 8414 authorization-server metadata and the OpenID discovery
//!   document.
//! - Clients ([`clients`], [`register`], [`document`]): client ID metadata documents, fetched with
//!   SSRF protection, and RFC 7591 dynamic registration; client authentication with `none`,
//!   a secret, or `private_key_jwt` ([`jwt`]).
//! - Authorization ([`authorize`], [`consent`]): a consent page where a bridge account signs in
//!   and approves with one form POST; PKCE S256, exact redirect URIs (any port on loopback), a
//!   resource indicator (RFC 8707) per grant, `iss` in the response (RFC 9207); failed sign-ins
//!   throttled (the store's guards, [`crate::storage::GuardStore`]), passwords as argon2id
//!   hashes ([`password`]).
//! - Tokens ([`token`]): single-use codes, opaque access tokens and rotating refresh tokens with
//!   a retry grace and family revocation, RFC 7009 revocation, optional DPoP (RFC 9449).
//! - The resource server ([`bearer`]): every MCP request's token checked against the grant, its
//!   account, client, resource and DPoP key.
//!
//! Everything durable is in the relay store ([`crate::storage::oauth`]), and so are the replay
//! guards and sign-in throttles ([`crate::storage::GuardStore`]) and the consent form key
//! ([`crate::storage::OAuthStore::form_key`]: a form rendered by one relay process is accepted
//! by another on the same store); what is here in memory (the document cache) is bounded and may
//! be lost on restart without losing a grant.

pub mod authorize;
pub mod bearer;
pub mod clients;
pub mod consent;
pub mod document;
pub mod error;
pub mod form;
pub mod jwt;
pub mod metadata;
pub mod password;
pub mod register;
pub mod resource;
pub mod token;

use std::{net::SocketAddr, sync::Arc};

use axum::{
    Router,
    extract::{ConnectInfo, FromRef},
    http::{HeaderMap, header},
    routing::{get, post},
};

pub use crate::config::OAuthSettings;
pub use error::OAuthError;

use crate::limits::PASSWORD_CHECKS_CONCURRENT;
use crate::{
    config::RelayConfig,
    storage::{StorageError, Store},
};

/// The authorization server: its settings and in-memory state, over the relay's configuration
/// (its URLs) and store. The OAuth endpoints extract it (and nothing of the bridges).
#[derive(Debug)]
pub struct OAuth {
    /// Settings.
    pub settings: OAuthSettings,
    /// HMAC key of consent forms: the store's ([`crate::storage::OAuthStore::form_key`]), so
    /// every relay process on the store accepts a form another rendered.
    form_key: [u8; 32],
    /// Client documents and JWK Sets.
    pub fetcher: document::Fetcher,
    /// Bounds concurrent argon2id checks.
    pub password_checks: tokio::sync::Semaphore,
    /// The relay's configuration.
    pub(crate) config: Arc<RelayConfig>,
    /// The relay's store.
    pub(crate) store: Store,
}

impl OAuth {
    /// The authorization server of a relay with `config` over `store`, signing consent forms
    /// with `form_key` (the store's: [`OAuth::open`]).
    pub fn new(config: Arc<RelayConfig>, store: Store, form_key: [u8; 32]) -> Self {
        let settings = config.oauth;
        Self {
            settings,
            form_key,
            fetcher: document::Fetcher::new(settings.insecure_client_documents),
            password_checks: tokio::sync::Semaphore::new(PASSWORD_CHECKS_CONCURRENT),
            config,
            store,
        }
    }

    /// The authorization server of a relay with `config` over `store`, with the store's consent
    /// form key ([`crate::storage::OAuthStore::form_key`]).
    ///
    /// # Errors
    /// The store fails, or holds a damaged key (`Corrupt`).
    pub async fn open(config: Arc<RelayConfig>, store: Store) -> Result<Self, StorageError> {
        let form_key = store.oauth().form_key().await?;
        Ok(Self::new(config, store, form_key))
    }
}

/// The authorization server's routes (mounted only in `--auth oauth` mode), behind the same
/// `Host` check as the MCP endpoints (a page on a rebound DNS name cannot reach them on a
/// loopback listener). Their handlers extract the [`OAuth`] state and the configuration from
/// the application state `S`.
pub fn routes<S>(config: Arc<RelayConfig>) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    Arc<OAuth>: FromRef<S>,
    Arc<RelayConfig>: FromRef<S>,
{
    Router::new()
        .route(
            resource::PRM_WELL_KNOWN,
            get(metadata::protected_resource_root),
        )
        .route(
            "/.well-known/oauth-protected-resource/{*path}",
            get(metadata::protected_resource),
        )
        .route(
            "/.well-known/oauth-authorization-server",
            get(metadata::authorization_server),
        )
        .route(
            "/.well-known/openid-configuration",
            get(metadata::openid_configuration),
        )
        .route(resource::JWKS_PATH, get(metadata::jwks))
        .route(resource::REGISTER_PATH, post(register::register))
        .route(
            resource::AUTHORIZE_PATH,
            get(authorize::show).post(authorize::approve),
        )
        .route(resource::TOKEN_PATH, post(token::token))
        .route(resource::REVOKE_PATH, post(token::revoke))
        .route_layer(axum::middleware::from_fn_with_state(config, check_host))
}

async fn check_host(
    axum::extract::State(config): axum::extract::State<Arc<RelayConfig>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if !crate::origin::host_allowed(&config, request.headers()) {
        return OAuthError::invalid_request("Host header not allowed on this listener")
            .with_status(axum::http::StatusCode::FORBIDDEN)
            .into_response();
    }
    next.run(request).await
}

/// The client address a request came from, for throttling: the TCP peer, except that a peer
/// that is a configured `--trusted-proxy` (a reverse proxy in front of the relay) is taken at its
/// word and the last entry of its `X-Forwarded-For` is the client (the entry the proxy itself
/// appended; earlier ones may be forged). Any other peer's forwarded header is ignored, so a
/// client behind a tunnel that passes its own header through cannot pick its address.
pub fn client_address(
    trusted: &[crate::config::TrustedProxy],
    connect: Option<&ConnectInfo<SocketAddr>>,
    headers: &HeaderMap,
) -> String {
    let peer = connect.map(|c| c.0.ip());
    if peer.is_some_and(|p| trusted.iter().any(|t| t.contains(p)))
        && let Some(forwarded) = headers
            .get_all("x-forwarded-for")
            .iter()
            .next_back()
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.rsplit(',').next())
            .and_then(|v| v.trim().parse::<std::net::IpAddr>().ok())
    {
        return forwarded.to_string();
    }
    peer.map_or_else(|| "unknown".into(), |p| p.to_string())
}

/// Whether a request's media type is `expected` (parameters such as `charset` ignored).
pub fn content_type_is(headers: &HeaderMap, expected: &str) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(expected))
}
