//! Background delegation to CLI agents: `delegate`, `read_delegation`,
//! `list_delegations`, `cancel_delegation`, `agents_status`.
//!
//! A delegation hands a task to Codex, Claude Code or Gemini CLI on this machine, in a
//! directory of the workspace, and returns a receipt at once; the [`engine`]'s `Manager` runs
//! it and keeps the receipt honest (never re-run; `unknown` when its server died while it
//! ran). The tools that start or touch runs need an exec mode, like `run_process`;
//! `agents_status` only reads. A caller sees and cancels its own receipts; the owner sees all.
//!
//! Everything about delegation is here:
//! - this module: the family's entry and what the runtime keeps (`DelegationState`: the
//!   manager, started on first use, stopped at shutdown, counted in the runtime's activity);
//! - the tools: `receipt` (`delegate`, `read_delegation`, `cancel_delegation`), `list`
//!   (`list_delegations`), `status` (`agents_status`);
//! - [`engine`]: the manager, receipts, limits, runs and agent adapters (no MCP, no transport);
//! - `worker`: the owner-only socket through which a running agent's worker delegates further
//!   (capabilities, the socket and its protocol);
//! - `worker_mcp`: the MCP server that worker runs (`machine-mcp delegation worker-mcp`), a
//!   [`ToolSet`](crate::call::tool_set::ToolSet) the MCP plumbing serves on stdio;
//! - [`admin`]: the one entry point from outside the runtime — the owner's commands
//!   (`machine-mcp delegation list|drain|resume|worker-mcp`) and `service stop`'s drain.

pub mod admin;
pub mod engine;
mod list;
mod receipt;
mod status;
pub(crate) mod worker;
mod worker_mcp;

use std::{panic::AssertUnwindSafe, path::PathBuf, sync::Arc};

use crate::{
    Access,
    call::{
        catalog::{Hints, ToolMeta, ToolSpec},
        error::{ToolError, ToolErrorCode, ToolResult},
    },
    policy::Capability,
    tools::family::{Family, FamilyState, Hook},
};

use engine::Manager;

/// The family's entry in the registry: the five delegation tools and the delegation manager
/// ([`DelegationState`]).
pub(crate) const FAMILY: Family = Family {
    specs,
    state: Some(DelegationState::make),
    resources: None,
    prompts: None,
};

/// What a runtime keeps for delegations: the state directory
/// ([`RuntimeConfig::state_dir`](crate::RuntimeConfig::state_dir); without one the tools
/// answer `unavailable`) and its [`Manager`], started on first use inside the Tokio runtime.
///
/// At shutdown the delegations this process runs end with it (their trees are terminated) and
/// their receipts say so honestly: a running one becomes `failed`, delivery `sent`, diagnostic
/// `server_stopped` (the agent got the prompt and was stopped before it answered; what it
/// changed so far stays; nothing is re-run), a queued one `failed`/`not_sent`.
#[derive(Debug)]
pub(crate) struct DelegationState {
    /// Unwind-safe as asserted: a panic while the manager is started leaves the cell empty, and
    /// the manager keeps no invariant a panic breaks.
    manager: Option<(
        PathBuf,
        AssertUnwindSafe<tokio::sync::OnceCell<Arc<Manager>>>,
    )>,
}

impl DelegationState {
    fn make(config: &crate::RuntimeConfig) -> Box<dyn FamilyState> {
        Box::new(Self {
            manager: config
                .state_dir
                .clone()
                .map(|d| (d, AssertUnwindSafe(tokio::sync::OnceCell::new()))),
        })
    }

    /// The manager of the state directory, started on first use (it must be called inside a
    /// Tokio runtime); `None` without a state directory.
    async fn manager(&self) -> Option<Arc<Manager>> {
        let (dir, cell) = self.manager.as_ref()?;
        let m = cell
            .get_or_init(|| async {
                let m = Manager::start(dir, Default::default()).await;
                // Before anyone gets the manager: every run then gets a capability.
                match worker::WorkerAccess::start(m.store().root(), Arc::downgrade(&m)) {
                    Ok(w) => m.attach_workers(w),
                    Err(e) => tracing::warn!(
                        error = %e,
                        "no worker socket: workers cannot delegate further"
                    ),
                }
                m
            })
            .await;
        Some(m.clone())
    }

    /// The manager, when it was started.
    fn started(&self) -> Option<&Arc<Manager>> {
        self.manager.as_ref().and_then(|(_, cell)| cell.get())
    }
}

impl FamilyState for DelegationState {
    fn shutdown(&self) -> Hook<'_> {
        Box::pin(async move {
            if let Some(m) = self.started() {
                m.shutdown().await;
            }
        })
    }

    fn activity(&self, activity: &mut crate::RuntimeActivity) {
        activity.active_delegations = self.started().map_or(0, |m| m.active());
    }
}

/// The delegation manager of `rt`'s runtime, started on first use.
///
/// # Errors
/// `unavailable` without a state directory.
async fn manager(rt: &Access) -> ToolResult<Arc<Manager>> {
    rt.state::<DelegationState>()?
        .manager()
        .await
        .ok_or_else(|| {
            ToolError::new(
                ToolErrorCode::Unavailable,
                "delegation needs a state directory, and this server has none",
            )
        })
}

pub(crate) fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec::structured(
            ToolMeta {
                name: "delegate",
                title: "Delegate a task to a CLI agent",
                description: "Hand a task to a coding agent CLI on this machine (agent: codex, \
                              claude or gemini; see agents_status) to run in the background in \
                              path (a directory of the workspace, default the root). prompt: the \
                              whole task, at most 256 KiB. request_id: a UUID you choose; calling \
                              again with the same request_id and arguments returns the same \
                              receipt and never runs it twice. Returns the receipt at once \
                              (queued or running); follow it with read_delegation. At most 6 run \
                              at once (2 per agent), 64 wait.",
                capability: Capability::ExecDirect,
                hints: Hints {
                    read_only: false,
                    destructive: true,
                    idempotent: true,
                    open_world: true,
                },
            },
            receipt::delegate,
        ),
        ToolSpec::structured(
            ToolMeta {
                name: "read_delegation",
                title: "Read a delegation's receipt",
                description: "Read a delegation's receipt: status (queued, running, completed, \
                              failed, unknown), delivery_state (not_sent, sent, unknown), the \
                              agent's session_id, times, diagnostic, and once completed the \
                              agent's final answer (output, at most 256 KiB). wait_ms (at most \
                              60000) waits until it has ended. unknown: the server that ran it \
                              stopped; the agent may have finished; it is never re-run.",
                capability: Capability::ExecDirect,
                hints: Hints::READ,
            },
            receipt::read_delegation,
        ),
        ToolSpec::structured(
            ToolMeta {
                name: "list_delegations",
                title: "List delegations",
                description: "List your delegations, newest first: request_id, agent, status, \
                              delivery_state, session_id, times and diagnostic (no output; \
                              read_delegation has it). A receipt file that cannot be read is \
                              listed as unreadable. A long list comes in pages: pass the \
                              answer's next_cursor as cursor for the next one.",
                capability: Capability::ExecDirect,
                hints: Hints::READ,
            },
            list::list_delegations,
        ),
        ToolSpec::structured(
            ToolMeta {
                name: "cancel_delegation",
                title: "Cancel a delegation",
                description: "Cancel a delegation: a queued one never starts; a running one's \
                              agent and every process it started are terminated (what it \
                              changed so far stays); the delegations its worker started are \
                              cancelled too. All end failed with diagnostic cancelled. \
                              A finished one is returned as it is. If it has not ended when this \
                              answers (another server runs it and has not acted yet), \
                              cancel_pending says so.",
                capability: Capability::ExecDirect,
                hints: Hints {
                    read_only: false,
                    destructive: true,
                    idempotent: true,
                    open_world: false,
                },
            },
            receipt::cancel_delegation,
        ),
        ToolSpec::structured(
            ToolMeta {
                name: "agents_status",
                title: "Status of the delegation agents",
                description: "Which agent CLIs delegate can use now: per agent (codex, claude, \
                              gemini) whether it is enabled in the user's config, found, its \
                              version, whether it is signed in, whether it can accept work and \
                              why not, and its last successful delegation. Never spends a model \
                              call.",
                capability: Capability::Read,
                hints: Hints::READ,
            },
            status::agents_status,
        ),
    ]
}
