//! What a tool call is, to the MCP plumbing ([`crate::mcp`]) that delivers it and to the tool
//! families ([`crate::tools`]) that answer it: the vocabulary both sides share, so that the only
//! import between them runs `mcp → tools` and neither reaches into the other for it.
//!
//! - [`catalog`]: what one catalog entry is ([`ToolSpec`](catalog::ToolSpec): schemas generated
//!   from the handler's types, annotations, the capability it needs) and what a handler returns
//!   ([`Reply`](catalog::Reply)). The entries themselves are listed by the tool registry.
//! - [`context`]: [`CallContext`](context::CallContext), what a handler knows about its call.
//! - [`error`]: [`ToolError`](error::ToolError), a failed call with a stable code; the only part
//!   of this module a family's engine or a primitive may import (the tidy test checks it).
//! - `text`: the readable, bounded text block of a result (`TextView`).
//! - [`result`]: a handler's answer as an MCP `CallToolResult`.
//! - [`tool_set`]: tools served on their own, without a runtime (the delegation worker's).
//! - [`json`]: JSON text of everything written.
//!
//! Nothing here knows a transport, a session or a particular tool.

pub mod catalog;
pub mod context;
pub mod error;
pub mod json;
pub mod result;
pub(crate) mod text;
pub mod tool_set;
