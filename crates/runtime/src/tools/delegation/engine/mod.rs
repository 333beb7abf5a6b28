//! Delegations: receipts, limits and runs of agent CLIs.
//!
//! The [`Manager`] (one per runtime with a state directory) accepts a request (`admit`),
//! records its receipt ([`store`]) and runs the agent ([`agents`]) when a slot is free
//! (`queue`, `run`); it reads and lists receipts (`read`), cancels (`cancel`), inspects the
//! agents (`inspect`) and builds their environment (`env`). Workers that delegate further
//! reach it through the family's worker socket, which it sees as [`Workers`]. Not a managed
//! job: a job is recovered and its finally steps re-run, while a delegation is never re-run —
//! a receipt whose server died becomes `unknown` ([`store::settle`]).
//!
//! Rules (`protocol::limits`, section "Delegation"): a request id is idempotent (same
//! [`store::fingerprint`] → the same receipt, another → `conflict`); at most
//! [`DELEGATIONS_RUNNING_MAX`] run, [`DELEGATIONS_RUNNING_PER_AGENT_MAX`] per agent, counted
//! over every live server of the state directory under the store's lock; at most
//! [`DELEGATIONS_QUEUED_MAX`] wait; a tree is at most [`DELEGATION_DEPTH_MAX`] deep and
//! [`DELEGATIONS_PER_ROOT_MAX`] requests large; a worker's request that cannot start at once is
//! refused (`capacity`), never queued behind its own parent.
//!
//! [`DELEGATIONS_RUNNING_MAX`]: crate::limits::DELEGATIONS_RUNNING_MAX
//! [`DELEGATIONS_RUNNING_PER_AGENT_MAX`]: crate::limits::DELEGATIONS_RUNNING_PER_AGENT_MAX
//! [`DELEGATIONS_QUEUED_MAX`]: crate::limits::DELEGATIONS_QUEUED_MAX
//! [`DELEGATION_DEPTH_MAX`]: crate::limits::DELEGATION_DEPTH_MAX
//! [`DELEGATIONS_PER_ROOT_MAX`]: crate::limits::DELEGATIONS_PER_ROOT_MAX

mod admit;
pub mod agents;
mod cancel;
mod env;
mod inspect;
mod queue;
mod read;
mod run;
pub mod store;
pub mod workers;

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{Arc, OnceLock, Weak},
    time::Duration,
};

use lock::Lock;

use tokio::sync::{Notify, watch};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::{limits::DELEGATION_RUN_LIMIT, limits::TERMINATION_GRACE};

use agents::{Agent, AgentStatus};
pub use env::DROPPED_ENV_PREFIXES;
use env::agent_env;
pub use inspect::{AgentReport, unusable};
pub use read::{ListedStatus, ReceiptSummary, list_store, unfinished};
use store::{Store, StoredReceipt, valid_request_id};
pub use workers::{Grant, Workers};

use crate::{
    call::error::{ToolError, ToolErrorCode, ToolResult},
    config::DelegationConfig,
    policy::Principal,
};

/// The end of the diagnostic of a delegation cancelled because an ancestor was (after
/// "cancelled with its ancestor `<id>`: ").
pub const DESCENDANT_CANCELLED: &str = "the agent's process tree was terminated; what it changed \
                                        so far stays";

/// What `delegate` says while `machine-mcp delegation drain` is in effect.
pub const DRAINING_MESSAGE: &str = "draining: machine-mcp delegation drain was run; remove it with \
                                    `machine-mcp delegation resume`";

/// How often the queue is looked at without a local event (a slot freed by another server, a
/// cancellation asked by another server).
const PUMP_TICK: Duration = Duration::from_secs(1);
/// How often a waiting read looks at the receipt without a local event (another server's
/// write).
const READ_POLL: Duration = Duration::from_millis(250);
/// How long `delegate` waits for a run it started to record whether the agent was started
/// (spawning takes milliseconds; a loaded machine may take longer: the receipt then says
/// `unknown` delivery, which is honest).
const START_SETTLE_WAIT: Duration = Duration::from_secs(5);
/// How long `cancel` waits for a cancelled run to be recorded: the tree's grace and a margin.
const CANCEL_WAIT: Duration = Duration::from_secs(TERMINATION_GRACE.as_secs() + 8);
/// How long `cancel` waits for the server that runs (or queued) a request to take up a
/// cancellation marker (it looks every 0.5 s while running, every [`PUMP_TICK`] while queued);
/// one that has not by then is reported as not having acted ([`Manager::cancel_pending`]).
const CANCEL_ACK_WAIT: Duration = Duration::from_secs(3);

/// A request to delegate.
#[derive(Debug, Clone)]
pub struct DelegateRequest {
    /// The agent to run.
    pub agent: Agent,
    /// The task, given to the agent on stdin (at most
    /// [`DELEGATION_PROMPT_MAX_BYTES`](crate::limits::DELEGATION_PROMPT_MAX_BYTES)).
    pub prompt: String,
    /// The directory the agent runs in: absolute, resolved (the caller confined it).
    pub directory: PathBuf,
    /// The caller-chosen request id: a UUID, lowercase, hyphenated.
    pub request_id: String,
    /// The environment the agent gets: the caller's policy decides, as for `run_process`. A
    /// worker's request takes its tree's (its grant's), whatever this says.
    pub environment: AgentEnvironment,
}

/// The environment an agent is started with (`agent_env`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentEnvironment {
    /// The server's environment, minus [`DROPPED_ENV_PREFIXES`] (a policy whose programs get
    /// the whole environment, `full_env`).
    Full,
    /// `run_process`'s isolated environment (its short allow-list of harmless variables,
    /// private `TMPDIR` and XDG directories under `scratch`, `TERM=dumb`), plus the real `HOME`
    /// (where the agent keeps its sign-in and settings) and the agent's own variables
    /// ([`agents::keeps_env`]), minus [`DROPPED_ENV_PREFIXES`]. Any other variable of the
    /// server (`GITHUB_TOKEN`, `AWS_SECRET_ACCESS_KEY`, ...) does not reach the agent.
    Isolated {
        /// The runtime's scratch directory for isolated children.
        scratch: PathBuf,
    },
}

/// Who asks.
#[derive(Debug, Clone)]
pub enum Origin {
    /// An MCP caller: the request is the root of its tree, depth 0.
    Caller(Principal),
    /// A running worker, with its capability's grant: the request is its child.
    Worker(Grant),
}

/// Which receipts a reader may see.
#[derive(Debug, Clone)]
pub enum Scope {
    /// Every receipt (the machine's owner).
    Owner,
    /// The receipts of this principal (its workers' requests included).
    Principal(Principal),
    /// The receipts of one tree (a worker).
    Tree {
        /// The root request of the tree.
        root_request_id: String,
    },
    /// The receipts whose directory is inside `root` (a caller whose paths are confined to its
    /// workspace: receipts other servers of the state directory made elsewhere are not its to
    /// see), of `principal` when one is given (else every principal's). Unreadable receipts
    /// are not seen (their directory is unknown).
    Within {
        /// The workspace root (absolute, symlinks resolved, as receipts' directories are).
        root: PathBuf,
        /// Only this principal's receipts (`None`: the owner, any principal's).
        principal: Option<Principal>,
    },
}

impl Scope {
    fn sees(&self, r: &StoredReceipt) -> bool {
        match self {
            Scope::Owner => true,
            Scope::Principal(p) => r.owner == p.id(),
            Scope::Tree { root_request_id } => &r.receipt.root_request_id == root_request_id,
            Scope::Within { root, principal } => {
                Path::new(&r.receipt.directory).starts_with(root)
                    && principal.as_ref().is_none_or(|p| r.owner == p.id())
            }
        }
    }
}

/// How a [`Manager`] is built (tests shorten the run limit and give the configuration).
#[derive(Debug, Clone)]
pub struct ManagerOptions {
    /// How long one run may take ([`DELEGATION_RUN_LIMIT`] by default).
    pub run_limit: Duration,
    /// The `[delegation]` configuration; `None`: the user's file, read on every inspection.
    pub config: Option<DelegationConfig>,
}

impl Default for ManagerOptions {
    fn default() -> Self {
        Self {
            run_limit: DELEGATION_RUN_LIMIT,
            config: None,
        }
    }
}

/// A request of this server that waits for a slot (its prompt lives only here: a queued
/// request of a server that died is never started).
#[derive(Debug)]
struct Pending {
    request_id: String,
    agent: Agent,
    prompt: String,
    directory: PathBuf,
    executable: PathBuf,
    root_request_id: String,
    depth: u32,
    owner: Principal,
    environment: AgentEnvironment,
}

/// This server's queue and runs.
#[derive(Debug, Default)]
struct Local {
    queue: Vec<Pending>,
    /// Cancellation of each run of this server, by request id.
    running: HashMap<String, CancellationToken>,
}

/// The delegations of one runtime; see the module docs.
pub struct Manager {
    me: Weak<Manager>,
    store: Store,
    options: ManagerOptions,
    local: Arc<Lock<Local>>,
    inspections: Lock<HashMap<Agent, (tokio::time::Instant, DelegationConfig, AgentStatus)>>,
    /// Wakes the queue pump.
    pump: Notify,
    /// Bumped on every receipt this server writes; waiting reads watch it.
    changed: watch::Sender<u64>,
    /// Fired by [`Manager::shutdown`]: the pump stops and every run ends.
    closing: CancellationToken,
    tasks: TaskTracker,
    /// The worker side, once attached ([`Manager::attach_workers`]); without it workers cannot
    /// delegate further.
    worker: OnceLock<Arc<dyn Workers>>,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

/// Runs blocking store work off the async threads.
async fn off_thread<T: Send + 'static>(
    f: impl FnOnce() -> ToolResult<T> + Send + 'static,
) -> ToolResult<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Err(ToolError::cancelled()),
    }
}

fn store_error(e: &std::io::Error) -> ToolError {
    ToolError::new(
        ToolErrorCode::ExecutionFailed,
        format!("the delegation store: {e}"),
    )
}

fn not_found(id: &str) -> ToolError {
    ToolError::new(ToolErrorCode::NotFound, format!("no delegation {id}"))
}

fn unreadable(id: &str, why: &str) -> ToolError {
    ToolError::new(
        ToolErrorCode::ExecutionFailed,
        format!("the receipt of {id} cannot be read ({why}); it is kept as it is"),
    )
}

fn check_id(id: &str) -> ToolResult<()> {
    if valid_request_id(id) {
        Ok(())
    } else {
        Err(ToolError::invalid(format!(
            "request_id {id:?} is not a UUID in lowercase hyphenated form \
             (e.g. 0f8fad5b-d9cb-469f-a165-70867728950e)"
        )))
    }
}

/// A refusal by a bound: `limit_exceeded` with `reason`.
fn limit(reason: &str, message: String) -> ToolError {
    ToolError::limit(message).detail("reason", reason)
}

impl Manager {
    /// Starts the delegations of `state_dir`: settles the receipts of servers that died
    /// ([`store::settle`]) and starts the queue pump. Call inside a Tokio runtime; attach the
    /// worker side ([`Manager::attach_workers`]) before the manager is handed to anyone, so that
    /// every run gets a capability.
    pub async fn start(state_dir: &Path, options: ManagerOptions) -> Arc<Self> {
        let store = Store::new(state_dir);
        let m = Arc::new_cyclic(|me| Manager {
            me: me.clone(),
            store: store.clone(),
            options,
            local: Arc::default(),
            inspections: Lock::default(),
            pump: Notify::new(),
            changed: watch::channel(0).0,
            closing: CancellationToken::new(),
            tasks: TaskTracker::new(),
            worker: OnceLock::new(),
        });
        let s = store.clone();
        let settled = off_thread(move || {
            let _lock = s.lock().map_err(|e| store_error(&e))?;
            Ok(s.all_settled().len())
        })
        .await;
        if let Err(e) = settled {
            tracing::warn!(error = %e.message(), "cannot read the delegation receipts");
        }
        let weak = Arc::downgrade(&m);
        let closing = m.closing.clone();
        m.tasks.spawn(async move {
            loop {
                let Some(m) = weak.upgrade() else { return };
                let idle = m.lock_local().queue.is_empty();
                tokio::select! {
                    () = m.pump.notified() => {}
                    () = tokio::time::sleep(PUMP_TICK), if !idle => {}
                    () = closing.cancelled() => return,
                }
                m.pump_queue().await;
            }
        });
        m
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    fn lock_local(&self) -> std::sync::MutexGuard<'_, Local> {
        self.local.lock()
    }

    fn bump(&self) {
        self.changed.send_modify(|v| *v += 1);
    }

    /// Delegations of this server that are queued or running (what a restart of this
    /// process would end; the stdio supervisor and the daemon's upgrade wait for none).
    pub fn active(&self) -> usize {
        let l = self.local.lock();
        l.queue.len() + l.running.len()
    }

    /// Attaches the worker side (the family's worker socket); the first one stays.
    pub fn attach_workers(&self, workers: Arc<dyn Workers>) {
        let _ = self.worker.set(workers);
    }

    /// The worker side, when it is attached.
    fn worker(&self) -> Option<&Arc<dyn Workers>> {
        self.worker.get()
    }

    fn run_limit(&self) -> Duration {
        self.options.run_limit
    }
}
