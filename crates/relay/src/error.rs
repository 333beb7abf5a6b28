//! [`HttpError`]: an MCP endpoint's refusal, rendered as a status code with a JSON-RPC error body.

use axum::{
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};

/// A refused MCP HTTP request (MCP 2025-11-25 Streamable HTTP: errors are JSON-RPC error objects;
/// the status says what kind of refusal it is).
#[derive(Debug, Clone, PartialEq)]
pub struct HttpError {
    /// HTTP status.
    pub status: StatusCode,
    /// The request id, when known.
    pub id: Value,
    /// JSON-RPC error code.
    pub code: i64,
    /// Human message.
    pub message: String,
    /// Add `WWW-Authenticate: Bearer` (RFC 6750 §3) to a 401.
    pub challenge: bool,
}

impl HttpError {
    /// A refusal with no request id and code -32600.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self::rpc(status, Value::Null, -32600, message)
    }

    /// A refusal answering request `id` with `code`.
    pub fn rpc(status: StatusCode, id: Value, code: i64, message: impl Into<String>) -> Self {
        Self {
            status,
            id,
            code,
            message: message.into(),
            challenge: false,
        }
    }

    /// 401 with a bearer challenge.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self {
            challenge: true,
            ..Self::new(StatusCode::UNAUTHORIZED, message)
        }
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let body = json!({"jsonrpc": "2.0", "id": self.id, "error": {"code": self.code, "message": self.message}});
        let mut r = (
            self.status,
            [(header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response();
        if self.challenge {
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"machine-mcp\""),
            );
        }
        r
    }
}
