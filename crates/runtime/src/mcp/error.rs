//! [`ToolError`]: the one error type of tool handlers, rendered as an `isError: true` result.

use std::io;

pub use protocol::error_code::ToolErrorCode;
use serde_json::{Map, Value};

/// A failed tool call (DESIGN §3 "Results").
///
/// Rendered to the client as a `tools/call` result with `isError: true` whose single text content
/// is a JSON object `{"code", "message", "retryable", "side_effects_started", ...details}`; error
/// results carry no `structuredContent`. The code is stable ([`ToolErrorCode`]); the message is
/// for people and has no trailing period.
#[derive(Debug, thiserror::Error)]
#[error("{code}: {message}")]
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

/// Shorthand for handler results.
pub type ToolResult<T> = Result<T, ToolError>;
