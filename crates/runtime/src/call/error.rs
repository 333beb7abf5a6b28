//! [`ToolError`]: the one error type of tool handlers, rendered as an `isError: true` result. It
//! lives in `protocol` (the daemon and the relay render tool errors too) and is re-exported here.

pub use protocol::{error_code::ToolErrorCode, tool_error::ToolError};

/// Shorthand for handler results.
pub type ToolResult<T> = Result<T, ToolError>;
