//! The contract shared by every part of machine-bridge.
//!
//! This crate owns what two independently deployed programs (the relay and the daemon) must agree
//! on, and what the local runtime promises its callers:
//!
//! - [`limits`]: every timing and size constant of the contract (DESIGN §7). Logic elsewhere names
//!   these constants instead of writing literals.
//! - [`error_code`] and [`tool_error`]: the stable machine codes of tool errors and the one type
//!   that renders a failed tool call (DESIGN §3 "Results").
//! - [`frame`]: the relay ⇄ daemon link frames and close codes (DESIGN §5).
//! - [`delivery`]: the link's delivery contract (sequence numbers, retention, cumulative
//!   acknowledgement, replay, duplicates) as a sans-IO state machine both ends hold.
//! - [`head`]: message heads and the MCP era, sans I/O: the one reader of a message's kind,
//!   method, id and `_meta`, the era decision, the `_meta` and mirrored-header checks, the
//!   derived `server/discover` result and result completion. Outside it, no code probes a raw
//!   message for its method or id (the tidy test checks it).
//! - [`ids`]: bridge, session and instance ids as types that cannot be mixed up.
//! - [`jsonrpc`]: JSON-RPC 2.0 request ids, error codes and message builders.
//! - [`mcp`]: the MCP protocol versions served and the per-request `_meta` keys.
//! - [`role`]: the roles a remote caller holds on a bridge (DESIGN §3 "Authority").
//!
//! It depends on `serde` (and `serde_json` for opaque JSON-RPC payloads, `sonic-rs` for the
//! lazy head scan) only, so any crate may use it.
//!
//! ```
//! use machine_bridge_protocol::{error_code::ToolErrorCode, limits};
//!
//! assert_eq!(limits::STDIO_LINE_MAX_BYTES, 8 * 1024 * 1024);
//! assert_eq!(ToolErrorCode::PathBoundary.as_str(), "path_boundary");
//! ```

pub mod delivery;
pub mod error_code;
pub mod frame;
pub mod head;
pub mod ids;
pub mod jsonrpc;
pub mod limits;
pub mod mcp;
pub mod role;
pub mod tool_error;

pub use role::Role;
