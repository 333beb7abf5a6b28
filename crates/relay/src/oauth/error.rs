//! OAuth error responses: `{"error", "error_description"}` JSON (RFC 6749 §5.2, RFC 7591 §3.2.2,
//! RFC 7009 §2.2.1), never cached.

use axum::{
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::json;

/// An OAuth error answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthError {
    /// HTTP status: 400 for most, 401 for `invalid_client`, 413/429 for bounds.
    pub status: StatusCode,
    /// The registered error code (`invalid_request`, `invalid_client`, `invalid_grant`, …).
    pub error: &'static str,
    /// What went wrong, for people.
    pub description: String,
    /// A `WWW-Authenticate` value (401 `invalid_client` after HTTP Basic, RFC 6749 §5.2).
    pub challenge: Option<String>,
}

impl OAuthError {
    /// A 400 with `error`.
    pub fn bad(error: &'static str, description: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            error,
            description: description.into(),
            challenge: None,
        }
    }

    /// `invalid_request` (400).
    pub fn invalid_request(description: impl Into<String>) -> Self {
        Self::bad("invalid_request", description)
    }

    /// `invalid_grant` (400): a code or refresh token that is invalid, expired, revoked or
    /// issued to another client (RFC 6749 §5.2).
    pub fn invalid_grant(description: impl Into<String>) -> Self {
        Self::bad("invalid_grant", description)
    }

    /// `invalid_client` (401): the client is unknown, revoked, or failed to authenticate.
    pub fn invalid_client(description: impl Into<String>) -> Self {
        Self {
            status: StatusCode::UNAUTHORIZED,
            ..Self::bad("invalid_client", description)
        }
    }

    /// The same error with another status.
    pub fn with_status(self, status: StatusCode) -> Self {
        Self { status, ..self }
    }

    /// A 503 for a store that cannot be read or written.
    pub fn unavailable() -> Self {
        Self {
            status: StatusCode::SERVICE_UNAVAILABLE,
            ..Self::bad(
                "temporarily_unavailable",
                "the relay store is unavailable; try again",
            )
        }
    }
}

impl From<crate::server::BodyError> for OAuthError {
    fn from(e: crate::server::BodyError) -> Self {
        use crate::server::BodyError;
        let status = match e {
            BodyError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            BodyError::Timeout => StatusCode::REQUEST_TIMEOUT,
            BodyError::Broken(_) => StatusCode::BAD_REQUEST,
        };
        Self::invalid_request(e.to_string()).with_status(status)
    }
}

impl From<crate::storage::StorageError> for OAuthError {
    fn from(e: crate::storage::StorageError) -> Self {
        tracing::warn!(error = %e, "relay store error in an OAuth request");
        Self::unavailable()
    }
}

impl IntoResponse for OAuthError {
    fn into_response(self) -> Response {
        let body = json!({"error": self.error, "error_description": self.description});
        let mut r = (self.status, no_store(), axum::Json(body)).into_response();
        if let Some(c) = self.challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, c);
        }
        r
    }
}

/// `Cache-Control: no-store` and `Pragma: no-cache`, required on responses carrying tokens or
/// credentials (RFC 6749 §5.1).
pub fn no_store() -> [(header::HeaderName, HeaderValue); 2] {
    [
        (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        (header::PRAGMA, HeaderValue::from_static("no-cache")),
    ]
}
