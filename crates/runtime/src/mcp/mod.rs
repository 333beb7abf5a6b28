//! MCP plumbing: everything between a transport's JSON-RPC messages and a tool handler.
//!
//! - [`server`]: [`McpServer`](server::McpServer), the rmcp `ServerHandler` every transport
//!   serves (both MCP eras, call slots, tasks, progress forwarding).
//! - [`catalog`]: the machinery of a catalog entry ([`ToolSpec`](catalog::ToolSpec): schemas
//!   generated from the handler's types, annotations, the capability it needs). The entries
//!   themselves are listed by the tool registry, [`crate::tools`].
//! - [`context`]: [`CallContext`](context::CallContext), what a handler knows about its call.
//! - [`error`]: [`ToolError`](error::ToolError), a failed call with a stable code.
//! - [`json`]: JSON text of everything written.
//! - [`tasks`]: the runtime's task store (SEP-2663).
//! - `text`: the readable, bounded text block of a result (`TextView`).
//! - [`stdio`]: the stdio transport.
//! - [`delegation_worker`]: the MCP server of a delegation worker (`machine-mcp delegation
//!   worker-mcp`), which forwards three tools over the owner-only delegation socket.
//!
//! Nothing here knows what a tool does; nothing in a tool family's engine imports from here
//! except [`error`] (the tidy test in `crates/machine-mcp/tests/tidy.rs` checks it).

pub mod catalog;
pub mod context;
pub mod delegation_worker;
pub mod error;
pub mod json;
pub mod server;
pub mod stdio;
pub mod tasks;
pub(crate) mod text;
