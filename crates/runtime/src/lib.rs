//! The machine-bridge runtime: everything that happens on the user's machine.
//!
//! This crate owns the tool catalog ([`catalog`]), the policy ([`policy`]), path confinement
//! ([`path`]), the tool handlers (`tools::*`, one module per tool family) and the one MCP server
//! type every transport uses ([`server::McpServer`], built on the official Rust SDK `rmcp`). It
//! knows no socket, HTTP or WebSocket: the stdio transport ([`stdio`]) and, later, the daemon's
//! relay link feed JSON-RPC messages to the same server.
//!
//! Main types: [`Runtime`] (configuration + shared state, one per process), [`McpServer`] (one per
//! MCP session), [`CallContext`] (cancellation, progress and caller of one tool call),
//! [`ToolError`] (a failed call, rendered as an `isError` result with a stable code).
//!
//! ```no_run
//! use machine_bridge_runtime::{Runtime, RuntimeConfig, policy::{Policy, Profile}};
//!
//! # async fn run() -> std::io::Result<()> {
//! let runtime = Runtime::new(RuntimeConfig {
//!     workspace: "/path/to/repo".into(),
//!     policy: Policy::profile(Profile::Agent),
//! })?;
//! machine_bridge_runtime::stdio::serve(runtime.into(), tokio::io::stdin(), tokio::io::stdout()).await?;
//! # Ok(()) }
//! ```

use std::{io, path::PathBuf, sync::Arc};

use tokio::sync::Semaphore;

pub mod catalog;
pub mod context;
pub mod error;
pub mod path;
pub mod policy;
pub mod server;
pub mod stdio;

mod diff;
mod edit;
mod patch;
mod read;
mod search;
mod text;
mod tools;
mod write;

pub use context::{CallContext, Principal, ProgressSink, ProgressUpdate};
pub use error::{ToolError, ToolErrorCode};
pub use server::McpServer;
pub use text::LineEnding;

use crate::{path::Workspace, policy::Policy};

/// The name this server reports in `initialize` (`serverInfo.name`).
pub const SERVER_NAME: &str = "machine-mcp";
/// This build's version (`serverInfo.version`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// What a runtime is built from.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// The workspace directory (canonicalized by [`Runtime::new`]).
    pub workspace: PathBuf,
    /// The effective policy (the daemon ceiling).
    pub policy: Policy,
}

/// One runtime per process: the workspace, the policy and the shared limits. Every MCP session
/// ([`McpServer`]) holds an `Arc` of it.
#[derive(Debug)]
pub struct Runtime {
    workspace: Workspace,
    policy: Policy,
    calls: Arc<Semaphore>,
}

impl Runtime {
    /// Builds a runtime.
    ///
    /// # Errors
    /// The workspace does not exist, is not a directory, or cannot be canonicalized.
    pub fn new(config: RuntimeConfig) -> io::Result<Self> {
        let workspace = Workspace::new(
            &config.workspace,
            !config.policy.unrestricted_paths(),
            config.policy.absolute_paths(),
        )?;
        Ok(Self {
            workspace,
            policy: config.policy,
            calls: Arc::new(Semaphore::new(protocol::limits::CONCURRENT_TOOL_CALLS)),
        })
    }

    /// The workspace and its path rules.
    pub fn workspace(&self) -> &Workspace {
        &self.workspace
    }

    /// The effective policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    pub(crate) fn call_slots(&self) -> &Arc<Semaphore> {
        &self.calls
    }
}
