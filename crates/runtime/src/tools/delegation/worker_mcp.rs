//! `machine-mcp delegation worker-mcp`: the MCP server of a delegation worker (issue 19 item 4).
//! It is MCP plumbing (an rmcp server handler over stdio), so it lives in
//! [`crate::mcp::delegation_worker`]; this is its entry point in the family.

pub use crate::mcp::delegation_worker::{WorkerMcpError, serve_worker_mcp};
