//! MCP plumbing: everything between a transport's JSON-RPC messages and a tool handler.
//!
//! - [`client_message`]: a client message read into rmcp's types by what its head says.
//! - [`server`]: [`McpServer`](server::McpServer), the rmcp `ServerHandler` every transport
//!   serves (both MCP eras, call slots, tasks, progress forwarding).
//! - [`tasks`]: the runtime's task store (SEP-2663).
//! - [`stdio`]: the stdio transport.
//! - `tool_set`: the MCP server of a [`ToolSet`](crate::call::tool_set::ToolSet), tools served
//!   without a runtime (the delegation worker's).
//!
//! What a call is (its catalog entry, context, error and result text) is [`crate::call`]'s. This
//! module reaches the tools through the registry ([`crate::tools`]) only; nothing under `tools/`
//! imports from here (the tidy test in `crates/machine-mcp/tests/tidy.rs` checks it).

pub mod client_message;
pub mod server;
pub mod stdio;
pub mod tasks;
mod tool_set;
