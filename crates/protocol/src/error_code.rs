//! Stable machine codes carried by tool error results (DESIGN §3 "Results").
//!
//! A code is part of the wire contract: clients branch on it, so a code is never renamed or
//! reused for another meaning. The human message beside it may change freely.

use serde::{Deserialize, Serialize};

/// The stable code of a failed tool call.
///
/// Serialized in `snake_case` (for example `"path_boundary"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolErrorCode {
    /// The arguments are malformed or contradict each other; fix them and call again.
    InvalidRequest,
    /// The named file, directory, session or object does not exist.
    NotFound,
    /// A precondition about current state failed: `expected_sha256` mismatch, `create_only` on an
    /// existing file, an edit whose `old_text` matches zero or several times.
    Conflict,
    /// A size, count or concurrency bound of the contract was exceeded.
    LimitExceeded,
    /// The operating system refused access.
    PermissionDenied,
    /// A path resolves outside the workspace while paths are restricted.
    PathBoundary,
    /// The effective policy does not allow this tool or option.
    PolicyDenied,
    /// The operation ran past its time budget.
    Timeout,
    /// The operation was cancelled by the caller.
    Cancelled,
    /// A dependency (daemon, upstream server, external program) is not available right now.
    Unavailable,
    /// The operation started but failed (for example an I/O error in the middle of a write).
    ExecutionFailed,
    /// A bug: something that should not happen did.
    InternalError,
}

impl ToolErrorCode {
    /// Every code, in declaration order.
    pub const ALL: [ToolErrorCode; 12] = [
        Self::InvalidRequest,
        Self::NotFound,
        Self::Conflict,
        Self::LimitExceeded,
        Self::PermissionDenied,
        Self::PathBoundary,
        Self::PolicyDenied,
        Self::Timeout,
        Self::Cancelled,
        Self::Unavailable,
        Self::ExecutionFailed,
        Self::InternalError,
    ];

    /// The wire spelling of the code, identical to its serde form.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::InvalidRequest => "invalid_request",
            Self::NotFound => "not_found",
            Self::Conflict => "conflict",
            Self::LimitExceeded => "limit_exceeded",
            Self::PermissionDenied => "permission_denied",
            Self::PathBoundary => "path_boundary",
            Self::PolicyDenied => "policy_denied",
            Self::Timeout => "timeout",
            Self::Cancelled => "cancelled",
            Self::Unavailable => "unavailable",
            Self::ExecutionFailed => "execution_failed",
            Self::InternalError => "internal_error",
        }
    }
}

impl std::fmt::Display for ToolErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
