//! The contract shared by every part of machine-bridge.
//!
//! This crate owns what two independently deployed programs (the relay and the daemon) must agree
//! on, and what the local runtime promises its callers:
//!
//! - [`limits`]: every timing and size constant of the contract (DESIGN §7). Logic elsewhere names
//!   these constants instead of writing literals.
//! - [`error_code`]: the stable machine codes of tool errors (DESIGN §3 "Results").
//! - [`frame`]: the relay ⇄ daemon link frames (DESIGN §5).
//! - [`role`]: the roles a remote caller holds on a bridge (DESIGN §3 "Authority").
//!
//! It depends on `serde` (and `serde_json` for opaque JSON-RPC payloads) only, so any crate may
//! use it.
//!
//! ```
//! use machine_bridge_protocol::{error_code::ToolErrorCode, limits};
//!
//! assert_eq!(limits::STDIO_LINE_MAX_BYTES, 8 * 1024 * 1024);
//! assert_eq!(ToolErrorCode::PathBoundary.as_str(), "path_boundary");
//! ```

pub mod error_code;
pub mod frame;
pub mod limits;
pub mod role;

pub use role::Role;
