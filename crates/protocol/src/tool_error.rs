//! [`ToolError`]: a failed tool call, the one shape every part renders tool errors in (DESIGN §3
//! "Results"): the runtime's handlers, the daemon (role denials, results too large for the link)
//! and the relay (answers while the daemon is offline).

use std::{fmt, io};

use serde_json::{Map, Value, json};

use crate::error_code::ToolErrorCode;

/// A failed tool call (DESIGN §3 "Results").
///
/// Rendered to the client as a `tools/call` result with `isError: true` whose single text content
/// is a JSON object `{"code", "message", "retryable", "side_effects_started", ...details}`; error
/// results carry no `structuredContent`. The code is stable ([`ToolErrorCode`]); the message is
/// for people and has no trailing period.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolError {
    code: ToolErrorCode,
    message: String,
    retryable: bool,
    side_effects_started: bool,
    details: Map<String, Value>,
}

impl ToolError {
    /// An error with `code` and a human `message`; not retryable, no side effects.
    pub fn new(code: ToolErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            retryable: false,
            side_effects_started: false,
            details: Map::new(),
        }
    }

    /// `invalid_request`: the arguments are wrong.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ToolErrorCode::InvalidRequest, message)
    }

    /// `conflict`: a precondition about the current state failed.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(ToolErrorCode::Conflict, message)
    }

    /// `limit_exceeded`: a bound of the contract was hit.
    pub fn limit(message: impl Into<String>) -> Self {
        Self::new(ToolErrorCode::LimitExceeded, message)
    }

    /// `internal_error`: something that should not happen did.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ToolErrorCode::InternalError, message)
    }

    /// `cancelled`: the caller cancelled the call.
    pub fn cancelled() -> Self {
        Self::new(ToolErrorCode::Cancelled, "the call was cancelled")
    }

    /// Maps an I/O error on `what` (a workspace-relative path or a short description) to the
    /// matching code: `not_found`, `permission_denied`, or `execution_failed`.
    pub fn io(what: &str, err: &io::Error) -> Self {
        let code = match err.kind() {
            io::ErrorKind::NotFound => ToolErrorCode::NotFound,
            io::ErrorKind::PermissionDenied => ToolErrorCode::PermissionDenied,
            io::ErrorKind::InvalidInput | io::ErrorKind::InvalidFilename => {
                ToolErrorCode::InvalidRequest
            }
            io::ErrorKind::AlreadyExists => ToolErrorCode::Conflict,
            io::ErrorKind::IsADirectory | io::ErrorKind::NotADirectory => {
                ToolErrorCode::InvalidRequest
            }
            _ => ToolErrorCode::ExecutionFailed,
        };
        let message = match err.kind() {
            io::ErrorKind::NotFound => format!("{what}: no such file or directory"),
            _ => format!("{what}: {err}"),
        };
        Self::new(code, message)
    }

    /// Marks the error as worth retrying unchanged.
    #[must_use = "returns the changed error"]
    pub fn retryable(mut self) -> Self {
        self.retryable = true;
        self
    }

    /// Records that the operation may already have changed something.
    #[must_use = "returns the changed error"]
    pub fn with_side_effects(mut self) -> Self {
        self.side_effects_started = true;
        self
    }

    /// Adds a detail field (for example `"path"` or `"match_lines"`).
    #[must_use = "returns the changed error"]
    pub fn detail(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.details.insert(key.to_owned(), value.into());
        self
    }

    /// The stable code.
    pub fn code(&self) -> ToolErrorCode {
        self.code
    }

    /// The human message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether calling again unchanged may succeed.
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }

    /// Whether the operation may have changed state before failing.
    pub fn side_effects_started(&self) -> bool {
        self.side_effects_started
    }

    /// The JSON object rendered as the error result's text content.
    pub fn to_json(&self) -> Value {
        let mut obj = Map::new();
        obj.insert("code".into(), Value::from(self.code.as_str()));
        obj.insert("message".into(), Value::from(self.message.clone()));
        obj.insert("retryable".into(), Value::from(self.retryable));
        obj.insert(
            "side_effects_started".into(),
            Value::from(self.side_effects_started),
        );
        for (k, v) in &self.details {
            obj.entry(k.clone()).or_insert_with(|| v.clone());
        }
        Value::Object(obj)
    }
}

impl ToolError {
    /// The `tools/call` result of this error (MCP 2025-11-25 Server › Tools § Error Handling):
    /// `{"content": [{"type": "text", "text": <to_json() as text>}], "isError": true}`, no
    /// `structuredContent`.
    pub fn call_result(&self) -> Value {
        json!({"content": [{"type": "text", "text": self.to_json().to_string()}], "isError": true})
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ToolError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_renders_as_one_json_text_content() {
        let e = ToolError::new(ToolErrorCode::Unavailable, "offline")
            .retryable()
            .detail("bridge", "b1");
        assert_eq!(e.to_string(), "unavailable: offline");
        let r = e.call_result();
        assert_eq!(r["isError"], true);
        assert!(r.get("structuredContent").is_none());
        let text = r["content"][0]["text"].as_str().unwrap();
        assert_eq!(
            text,
            r#"{"bridge":"b1","code":"unavailable","message":"offline","retryable":true,"side_effects_started":false}"#
        );
    }
}
