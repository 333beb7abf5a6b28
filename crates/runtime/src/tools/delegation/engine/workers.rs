//! What the [`Manager`](super::Manager) needs of the worker side of its delegations: a running
//! delegation's agent may delegate further through its worker MCP server, which reaches this
//! server over an owner-only socket with a capability bound to a [`Grant`]. The socket, its
//! protocol and the capabilities are the family's (`tools::delegation::worker`, which knows the
//! transport; an engine does not): the manager sees them as [`Workers`], attached once it is
//! started ([`Manager::attach_workers`](super::Manager::attach_workers)).

use std::{fmt, path::PathBuf};

use super::{AgentEnvironment, agents::WorkerMcp};
use crate::policy::Principal;

/// What a running delegation's capability allows: delegate within `project_dir` as a child of
/// `request_id` (depth `depth + 1`, same root and owner), and read its own tree.
#[derive(Debug, Clone)]
pub struct Grant {
    /// The running request the worker is (its children's parent).
    pub request_id: String,
    /// The root of its tree (the caller's request at depth 0).
    pub root_request_id: String,
    /// The running request's depth (0 for a caller's request).
    pub depth: u32,
    /// The directory the worker may delegate in (absolute, symlinks resolved).
    pub project_dir: PathBuf,
    /// The principal that owns the tree (the caller of the root request).
    pub owner: Principal,
    /// The environment of the tree's agents (the root caller's policy decides): the worker's
    /// children get it too.
    pub environment: AgentEnvironment,
}

/// The worker side, as the manager uses it for each run.
pub trait Workers: Send + Sync + fmt::Debug {
    /// A capability for a run that starts, bound to `grant` (a grant already live for the same
    /// request is replaced): the variables the agent (and through it the worker MCP server)
    /// gets. Empty when no capability can be made (the worker then cannot delegate, and says
    /// so when asked).
    fn grant(&self, grant: Grant) -> Vec<(String, String)>;

    /// The run of `request_id` ended: its capability stops working at once. Unknown ids are
    /// ignored.
    fn revoke(&self, request_id: &str);

    /// The MCP server an agent starts for its worker, inheriting the variables of
    /// [`Workers::grant`].
    fn worker_mcp(&self) -> WorkerMcp;
}
