//! [`HttpError`]: an MCP endpoint's refusal, rendered as a status code with a JSON-RPC error body.

use axum::{
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use protocol::jsonrpc::{self, code};
use serde_json::Value;

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
    /// A `WWW-Authenticate` value for a 401 (RFC 6750 §3; RFC 9728 §5.1 in OAuth mode).
    pub challenge: Option<Box<str>>,
    /// The error's `data` member, when it has one (e.g. the `supported` versions of an MCP
    /// 2026-07-28 `UnsupportedProtocolVersionError`).
    pub data: Option<Value>,
}

impl HttpError {
    /// A refusal with no request id and code -32600 (invalid request).
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self::rpc(status, Value::Null, code::INVALID_REQUEST, message)
    }

    /// A refusal answering request `id` with `code`.
    pub fn rpc(status: StatusCode, id: Value, code: i64, message: impl Into<String>) -> Self {
        Self {
            status,
            id,
            code,
            message: message.into(),
            challenge: None,
            data: None,
        }
    }

    /// The same refusal with an error `data` member.
    pub fn with_data(self, data: Value) -> Self {
        Self {
            data: Some(data),
            ..self
        }
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let body = jsonrpc::error(&self.id, self.code, &self.message, self.data);
        let mut r = (
            self.status,
            [(header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response();
        if let Some(c) = self.challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, c);
        }
        r
    }
}
