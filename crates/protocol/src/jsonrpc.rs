//! JSON-RPC 2.0 as MCP uses it: request ids, the error codes relay and daemon answer with, and
//! the messages they build. Reading a message (its kind, method, id, envelope) is
//! [`crate::head`]'s.
//!
//! MCP Basic § Messages: a message is one JSON object with `"jsonrpc": "2.0"`; a request has a
//! `method` and an `id` that is a string or an integer (never null); a notification has a
//! `method` and no `id`; a response has an `id` and a `result` or an `error`. Batches were
//! removed in 2025-06-18.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The `jsonrpc` member of every message.
pub const VERSION: &str = "2.0";

/// JSON-RPC error codes: the spec's own (JSON-RPC 2.0 § 5.1), the relay's in the
/// implementation-defined server range, and those MCP 2026-07-28 defines.
pub mod code {
    /// Invalid JSON was received.
    pub const PARSE_ERROR: i64 = -32700;
    /// The JSON is not a valid request object (or a batch, which MCP does not have).
    pub const INVALID_REQUEST: i64 = -32600;
    /// The method does not exist or is not available.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Invalid method parameters (in 2026-07-28 also: required `_meta` fields missing).
    pub const INVALID_PARAMS: i64 = -32602;
    /// Internal error (the daemon also uses it for a message too large for the link).
    pub const INTERNAL_ERROR: i64 = -32603;

    /// Relay: the daemon is offline or the link failed; retrying may succeed.
    pub const UNAVAILABLE: i64 = -32000;
    /// Relay: the MCP session is unknown or ended (with HTTP 404: initialize again).
    pub const SESSION_NOT_FOUND: i64 = -32001;
    /// Relay: a final message too large to replay was delivered once and is gone.
    pub const NOT_REPLAYABLE: i64 = -32002;
    /// Relay: the outcome of a request is unknown (its daemon restarted or never came back), so
    /// it may have had side effects (invariant 7).
    pub const OUTCOME_UNKNOWN: i64 = -32003;
    /// Relay: the relay restarted while the request was in flight, so its outcome is unknown
    /// (it may have had side effects) and it was not retried (invariant 7); delivered as the
    /// last event of the request's SSE stream to a client that resumes it after the restart.
    pub const RELAY_RESTARTED: i64 = -32004;

    /// MCP 2026-07-28 `HeaderMismatch` (Streamable HTTP § Server Validation).
    pub const HEADER_MISMATCH: i64 = -32020;
    /// MCP 2026-07-28 `MissingRequiredClientCapabilityError` (Basic § `_meta`).
    pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i64 = -32021;
    /// MCP 2026-07-28 `UnsupportedProtocolVersionError` (Basic › Versioning).
    pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
}

/// A JSON-RPC id as it came on the wire (MCP: a string or an integer), kept as the exact JSON
/// value so it is echoed unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RequestId(Value);

impl RequestId {
    /// The id `value` (not checked: check the envelope with [`crate::head::Head::check_envelope`]
    /// first).
    pub fn new(value: Value) -> Self {
        Self(value)
    }

    /// The JSON value.
    pub fn as_value(&self) -> &Value {
        &self.0
    }

    /// The JSON value, owned.
    pub fn into_value(self) -> Value {
        self.0
    }

    /// The id as a map key.
    pub fn key(&self) -> IdKey {
        IdKey::of(&self.0)
    }
}

impl From<Value> for RequestId {
    fn from(v: Value) -> Self {
        Self(v)
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A JSON-RPC id, or a progress token (same shape), as a map key: the string `"1"` and the
/// number `1` are different ids and never collide.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdKey(String);

impl IdKey {
    /// The key of `id` (any JSON value: keys of values that differ differ).
    pub fn of(id: &Value) -> Self {
        match id {
            Value::String(s) => Self(format!("s:{s}")),
            other => Self(format!("n:{other}")),
        }
    }
}

/// Bytes `v` takes as compact JSON text (what `serde_json::to_string` writes), counted without
/// building the text; `usize::MAX` when it cannot be serialized (a `Value` or a derived type
/// always can), so that a size limit refuses it.
pub fn encoded_len<T: Serialize + ?Sized>(v: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    match serde_json::to_writer(&mut c, v) {
        Ok(()) => c.0,
        Err(_) => usize::MAX,
    }
}

/// An error response to `id` with `code`, `message` and, when given, `data`.
pub fn error(id: &Value, code: i64, message: &str, data: Option<Value>) -> Value {
    let mut e = json!({"code": code, "message": message});
    if let Some(d) = data {
        e["data"] = d;
    }
    json!({"jsonrpc": VERSION, "id": id, "error": e})
}

/// A success response to `id`.
pub fn result(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": VERSION, "id": id, "result": result})
}

/// A notification of `method` with `params`.
pub fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": VERSION, "method": method, "params": params})
}

/// The `notifications/cancelled` for request `id` (MCP Basic › Utilities › Cancellation).
pub fn cancelled(id: &Value, reason: &str) -> Value {
    notification(
        "notifications/cancelled",
        json!({"requestId": id, "reason": reason}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_strings_and_numbers_never_collide() {
        assert_ne!(IdKey::of(&json!(1)), IdKey::of(&json!("1")));
        assert_eq!(IdKey::of(&json!(1)), RequestId::new(json!(1)).key());
        assert_ne!(IdKey::of(&json!(1)), IdKey::of(&json!(1.0)));
    }

    #[test]
    fn built_messages_are_json_rpc() {
        assert_eq!(
            error(&json!(1), code::UNAVAILABLE, "x", Some(json!({"a": 1}))),
            json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32000, "message": "x", "data": {"a": 1}}})
        );
        assert_eq!(
            cancelled(&json!("r"), "why"),
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "r", "reason": "why"}})
        );
    }
}
