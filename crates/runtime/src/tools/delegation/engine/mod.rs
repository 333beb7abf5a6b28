//! Delegations: receipts, limits and runs of agent CLIs (issue 19).
//!
//! The [`Manager`] (one per runtime with a state directory) accepts a request, records its
//! receipt ([`store`]) and runs the agent ([`agents`]) when a slot is free (`run`); workers
//! that delegate further reach it through the family's worker socket, which it sees as
//! [`Workers`]. Not a managed job: a job is recovered and
//! its finally steps re-run, while a delegation is never re-run — a receipt whose server died
//! becomes `unknown` ([`store::settle`]).
//!
//! Rules (`protocol::limits`, section "Delegation"): a request id is idempotent (same
//! [`store::fingerprint`] → the same receipt, another → `conflict`); at most
//! [`DELEGATIONS_RUNNING_MAX`] run, [`DELEGATIONS_RUNNING_PER_AGENT_MAX`] per agent, counted
//! over every live server of the state directory under the store's lock; at most
//! [`DELEGATIONS_QUEUED_MAX`] wait; a tree is at most [`DELEGATION_DEPTH_MAX`] deep and
//! [`DELEGATIONS_PER_ROOT_MAX`] requests large; a worker's request that cannot start at once is
//! refused (`capacity`), never queued behind its own parent.

pub mod agents;
mod run;
pub mod store;
pub mod workers;

use std::{
    collections::HashMap,
    ffi::OsString,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, OnceLock, Weak},
    time::Duration,
};

use schemars::JsonSchema;
use serde::Serialize;
use tokio::sync::{Notify, watch};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use protocol::limits::{
    DELEGATION_DEPTH_MAX, DELEGATION_INSPECTION_CACHE, DELEGATION_PROMPT_MAX_BYTES,
    DELEGATION_READ_WAIT_MAX, DELEGATION_RUN_LIMIT, DELEGATIONS_PER_ROOT_MAX,
    DELEGATIONS_QUEUED_MAX, DELEGATIONS_RUNNING_MAX, DELEGATIONS_RUNNING_PER_AGENT_MAX,
    TERMINATION_GRACE,
};

use agents::{Agent, AgentStatus};
use store::{
    DelegationStatus, DeliveryState, Entry, Receipt, Store, StoredReceipt, fingerprint,
    now_rfc3339, server_alive, valid_request_id,
};
pub use workers::{Grant, Workers};

use crate::{
    call::error::{ToolError, ToolErrorCode, ToolResult},
    config::{DelegationConfig, UserConfig},
    policy::Principal,
};

/// Prefixes of the server's environment variables an agent does not inherit: this bridge's
/// own (`MACHINE_MCP_`, the worker variables are added after) and other bridges' and hosts'
/// (a nested agent must not think it runs inside its parent's bridge or app).
pub const DROPPED_ENV_PREFIXES: &[&str] = &[
    "MACHINE_MCP_",
    "MCP_",
    "AGENT_RELAY_",
    "CODEX_MCP_BRIDGE",
    "CODEX_BRIDGE_",
    "CLAUDE_BRIDGE_",
    "CODEX_APP_",
    "CODEX_THREAD_ID",
    "CLAUDECODE",
    "CLAUDE_CODE_ENTRYPOINT",
    "ELECTRON_",
];

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
    /// The task, given to the agent on stdin (at most [`DELEGATION_PROMPT_MAX_BYTES`]).
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

/// The state of a receipt in a list: its status, or `unreadable`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ListedStatus {
    /// Waiting for a slot.
    Queued,
    /// The agent runs.
    Running,
    /// Finished with an answer.
    Completed,
    /// Did not complete (see the diagnostic).
    Failed,
    /// Its server stopped while it ran: it may have finished; never re-run.
    Unknown,
    /// The receipt file cannot be read or parsed; it is kept as it is.
    Unreadable,
}

impl ListedStatus {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Unknown => "unknown",
            Self::Unreadable => "unreadable",
        }
    }
}

impl From<DelegationStatus> for ListedStatus {
    fn from(s: DelegationStatus) -> Self {
        match s {
            DelegationStatus::Queued => Self::Queued,
            DelegationStatus::Running => Self::Running,
            DelegationStatus::Completed => Self::Completed,
            DelegationStatus::Failed => Self::Failed,
            DelegationStatus::Unknown => Self::Unknown,
        }
    }
}

/// One receipt in a list (no output).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ReceiptSummary {
    /// The request id.
    pub request_id: String,
    /// The agent (none for an unreadable receipt).
    pub agent: Option<Agent>,
    /// Its status, or `unreadable`.
    pub status: ListedStatus,
    /// Whether the prompt reached the agent (none for an unreadable receipt).
    pub delivery_state: Option<DeliveryState>,
    /// The agent's session id, once reported.
    pub session_id: Option<String>,
    /// RFC 3339 UTC acceptance time.
    pub created_at: Option<String>,
    /// RFC 3339 UTC end time.
    pub ended_at: Option<String>,
    /// Why it failed or is unknown; for an unreadable receipt `unreadable`.
    pub diagnostic_code: Option<String>,
    /// What happened (for an unreadable receipt, the parse error).
    pub diagnostic_message: Option<String>,
    /// The directory the agent runs in (absolute; the tools show it in the caller's form).
    pub directory: Option<String>,
    /// The parent request (a worker's child).
    pub parent_request_id: Option<String>,
    /// The root request of its tree.
    pub root_request_id: Option<String>,
    /// Its depth in the tree.
    pub depth: Option<u32>,
}

impl ReceiptSummary {
    fn of(entry: &Entry) -> Self {
        match entry {
            Entry::Ok(s) => {
                let r = &s.receipt;
                Self {
                    request_id: r.request_id.clone(),
                    agent: Some(r.agent),
                    status: r.status.into(),
                    delivery_state: Some(r.delivery_state),
                    session_id: r.session_id.clone(),
                    created_at: Some(r.created_at.clone()),
                    ended_at: r.ended_at.clone(),
                    diagnostic_code: r.diagnostic_code.clone(),
                    diagnostic_message: r.diagnostic_message.clone(),
                    directory: Some(r.directory.clone()),
                    parent_request_id: r.parent_request_id.clone(),
                    root_request_id: Some(r.root_request_id.clone()),
                    depth: Some(r.depth),
                }
            }
            Entry::Unreadable { request_id, why } => Self {
                request_id: request_id.clone(),
                agent: None,
                status: ListedStatus::Unreadable,
                delivery_state: None,
                session_id: None,
                created_at: None,
                ended_at: None,
                diagnostic_code: Some("unreadable".into()),
                diagnostic_message: Some(why.clone()),
                directory: None,
                parent_request_id: None,
                root_request_id: None,
                depth: None,
            },
        }
    }
}

/// What `agents_status` reports per agent: the inspection and the last success.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AgentReport {
    /// The inspection (cached up to 30 s).
    #[serde(flatten)]
    pub status: AgentStatus,
    /// RFC 3339 UTC end of its newest `completed` delegation among the receipts kept.
    pub last_success: Option<String>,
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
    local: Arc<Mutex<Local>>,
    inspections: Mutex<HashMap<Agent, (tokio::time::Instant, DelegationConfig, AgentStatus)>>,
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

/// What admission decided.
enum Admitted {
    /// The same request was accepted before: its receipt.
    Existing(Receipt),
    /// Recorded: queued, or (a worker's) running at once.
    New(Receipt),
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
            inspections: Mutex::default(),
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
        self.local
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn bump(&self) {
        self.changed.send_modify(|v| *v += 1);
    }

    /// `delegate`: validates, applies idempotency, admits (limits), persists the receipt
    /// `queued`, starts it when a slot is free; returns the receipt at once: `queued`/`not_sent`,
    /// or `running`/`sent` once the agent was started (a run reserves its slot with delivery
    /// `unknown` and this waits, at most `START_SETTLE_WAIT`, for the start to be recorded;
    /// a failure to start returns `failed`).
    ///
    /// # Errors
    /// - `invalid_request`: the request id is not a lowercase hyphenated UUID, the prompt is
    ///   empty, the directory is not an absolute directory.
    /// - `limit_exceeded` (detail `reason`): `prompt` over [`DELEGATION_PROMPT_MAX_BYTES`];
    ///   `depth` over [`DELEGATION_DEPTH_MAX`]; `tree`: the root has
    ///   [`DELEGATIONS_PER_ROOT_MAX`] requests; `queue`: [`DELEGATIONS_QUEUED_MAX`] wait;
    ///   `capacity`: a worker's request finds no free slot; `records`: the store holds
    ///   [`protocol::limits::DELEGATION_RECORDS_MAX`] receipts and too few of them are
    ///   terminal to prune (the message counts the queued or running, unreadable and finished
    ///   ones; nothing is pruned then).
    /// - `conflict`: the request id names a receipt with another fingerprint, or an
    ///   unreadable one.
    /// - `unavailable`: draining ([`DRAINING_MESSAGE`]), or the agent cannot accept work (its
    ///   `not_ready` reason).
    /// - `execution_failed`: the store cannot be written.
    pub async fn delegate(&self, req: DelegateRequest, origin: Origin) -> ToolResult<Receipt> {
        check_id(&req.request_id)?;
        if req.prompt.len() > DELEGATION_PROMPT_MAX_BYTES {
            return Err(limit(
                "prompt",
                format!(
                    "the prompt is {} bytes; at most {DELEGATION_PROMPT_MAX_BYTES}",
                    req.prompt.len()
                ),
            ));
        }
        if req.prompt.trim().is_empty() {
            return Err(ToolError::invalid("the prompt is empty"));
        }
        if !req.directory.is_absolute() || !req.directory.is_dir() {
            return Err(ToolError::invalid(format!(
                "{} is not a directory",
                req.directory.display()
            )));
        }
        let (owner, parent, root, depth) = match &origin {
            Origin::Caller(p) => (p.clone(), None, req.request_id.clone(), 0),
            Origin::Worker(g) => (
                g.owner.clone(),
                Some(g.request_id.clone()),
                g.root_request_id.clone(),
                g.depth + 1,
            ),
        };
        if depth > DELEGATION_DEPTH_MAX {
            return Err(limit(
                "depth",
                format!(
                    "this request would be at depth {depth}; delegations nest at most \
                     {DELEGATION_DEPTH_MAX} deep"
                ),
            ));
        }
        let fp = fingerprint(req.agent, &req.directory, &req.prompt, owner.id());
        if let Some(existing) = self.existing(&req.request_id, &fp).await? {
            return Ok(existing);
        }
        if self.store.draining() {
            return Err(ToolError::new(ToolErrorCode::Unavailable, DRAINING_MESSAGE));
        }
        let status = self.inspect(req.agent).await;
        let executable = match (&status.program, status.can_accept_work) {
            (Some(exe), true) => exe.clone(),
            _ => {
                return Err(ToolError::new(
                    ToolErrorCode::Unavailable,
                    format!(
                        "{} cannot accept work: {}",
                        req.agent.name(),
                        status
                            .not_ready
                            .as_deref()
                            .unwrap_or("it was not found or did not answer")
                    ),
                )
                .detail("agent", req.agent.name()));
            }
        };
        let worker = matches!(origin, Origin::Worker(_));
        let now = now_rfc3339();
        let stored = StoredReceipt {
            receipt: Receipt {
                request_id: req.request_id.clone(),
                agent: req.agent,
                status: if worker {
                    DelegationStatus::Running
                } else {
                    DelegationStatus::Queued
                },
                // A worker's request starts at once: `unknown` until the run records whether
                // the agent was started.
                delivery_state: if worker {
                    DeliveryState::Unknown
                } else {
                    DeliveryState::NotSent
                },
                session_id: None,
                created_at: now.clone(),
                started_at: worker.then_some(now),
                ended_at: None,
                output: None,
                output_truncated: false,
                exit_code: None,
                diagnostic_code: None,
                diagnostic_message: None,
                directory: req.directory.to_string_lossy().into_owned(),
                parent_request_id: parent,
                root_request_id: root.clone(),
                depth,
            },
            fingerprint: fp,
            owner: owner.id().to_owned(),
            server: store::this_server(),
        };
        let s = self.store.clone();
        let admitted = off_thread(move || admit(&s, stored, worker)).await?;
        let receipt = match admitted {
            Admitted::Existing(r) => return Ok(r),
            Admitted::New(r) => r,
        };
        self.bump();
        let pending = Pending {
            request_id: req.request_id.clone(),
            agent: req.agent,
            prompt: req.prompt,
            directory: req.directory,
            executable,
            root_request_id: root,
            depth,
            owner,
            environment: match &origin {
                Origin::Worker(g) => g.environment.clone(),
                Origin::Caller(_) => req.environment,
            },
        };
        if worker {
            if let Origin::Worker(g) = &origin
                && self.being_cancelled(&g.request_id)
            {
                // Its parent was cancelled while this request was admitted: it never starts
                // (the run finds the marker), as the tree's cancellation would have done.
                let reason = format!(
                    "cancelled with its ancestor {}: {DESCENDANT_CANCELLED}",
                    g.request_id
                );
                let marker = self.store.cancel_marker(&pending.request_id);
                if let Err(e) = crate::primitives::private::write_atomic(&marker, reason.as_bytes())
                {
                    tracing::warn!(error = %e, "cannot mark a delegation cancelled");
                }
            }
            let token = self.closing.child_token();
            self.lock_local()
                .running
                .insert(pending.request_id.clone(), token.clone());
            self.spawn_run(pending, token);
        } else {
            self.lock_local().queue.push(pending);
            self.pump_queue().await;
        }
        Ok(self.start_settled(&req.request_id).await.unwrap_or(receipt))
    }

    /// The receipt of `id` once its start attempt has settled: a `running` receipt whose
    /// delivery is still `unknown` (the agent being started) is waited for, at most
    /// `START_SETTLE_WAIT`, so `delegate` answers `running`/`sent` (or the failure to start),
    /// never `not_sent` for an agent that may have been started.
    async fn start_settled(&self, id: &str) -> ToolResult<Receipt> {
        let deadline = tokio::time::Instant::now() + START_SETTLE_WAIT;
        let mut changed = self.changed.subscribe();
        loop {
            changed.borrow_and_update();
            let r = self.load_visible(id, &Scope::Owner).await?;
            let starting =
                r.status == DelegationStatus::Running && r.delivery_state == DeliveryState::Unknown;
            if !starting || tokio::time::Instant::now() >= deadline {
                return Ok(r);
            }
            tokio::select! {
                _ = changed.changed() => {}
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// The receipt of `id` when one exists: the same fingerprint → it (idempotent), another →
    /// `conflict`.
    async fn existing(&self, id: &str, fp: &str) -> ToolResult<Option<Receipt>> {
        let s = self.store.clone();
        let (id, fp) = (id.to_owned(), fp.to_owned());
        off_thread(move || {
            let _lock = s.lock().map_err(|e| store_error(&e))?;
            replay(s.load_settled(&id), &fp)
        })
        .await
    }

    /// Inspects `agent`, reusing an inspection younger than [`DELEGATION_INSPECTION_CACHE`]
    /// made with the same configuration.
    pub async fn inspect(&self, agent: Agent) -> AgentStatus {
        let config = match &self.options.config {
            Some(c) => c.clone(),
            None => match off_thread(|| Ok(UserConfig::load())).await {
                Ok(Ok(c)) => c.delegation,
                Ok(Err(e)) => return unusable(agent, &e.to_string()),
                Err(e) => return unusable(agent, e.message()),
            },
        };
        let cached = self
            .inspections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&agent)
            .filter(|(at, c, _)| at.elapsed() < DELEGATION_INSPECTION_CACHE && *c == config)
            .map(|(_, _, s)| s.clone());
        if let Some(s) = cached {
            return s;
        }
        let c = config.clone();
        let status = match tokio::task::spawn_blocking(move || {
            let path = std::env::var_os("PATH");
            agents::inspect(agent, &c, path.as_deref())
        })
        .await
        {
            Ok(s) => s,
            Err(e) => return unusable(agent, &format!("the inspection failed: {e}")),
        };
        self.inspections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(agent, (tokio::time::Instant::now(), config, status.clone()));
        status
    }

    /// Every agent's status (`agents_status`): its inspection and its last success. While
    /// draining no agent can accept work (`not_ready` is [`DRAINING_MESSAGE`]), as `delegate`
    /// refuses.
    pub async fn status(&self) -> Vec<AgentReport> {
        let s = self.store.clone();
        let entries = off_thread(move || {
            let _lock = s.lock().map_err(|e| store_error(&e))?;
            Ok(s.all_settled())
        })
        .await
        .unwrap_or_default();
        let mut out = Vec::new();
        for agent in Agent::ALL {
            let last_success = entries
                .iter()
                .filter_map(|e| match e {
                    Entry::Ok(r)
                        if r.receipt.agent == agent
                            && r.receipt.status == DelegationStatus::Completed =>
                    {
                        r.receipt.ended_at.clone()
                    }
                    _ => None,
                })
                .max();
            let mut status = self.inspect(agent).await;
            if self.store.draining() {
                status.can_accept_work = false;
                status.not_ready = Some(DRAINING_MESSAGE.to_owned());
            }
            out.push(AgentReport {
                status,
                last_success,
            });
        }
        out
    }

    /// The receipt of `id` if `scope` sees it.
    async fn load_visible(&self, id: &str, scope: &Scope) -> ToolResult<Receipt> {
        let s = self.store.clone();
        let i = id.to_owned();
        let entry = off_thread(move || {
            let _lock = s.lock().map_err(|e| store_error(&e))?;
            Ok(s.load_settled(&i))
        })
        .await?;
        match entry {
            Some(Entry::Ok(r)) if scope.sees(&r) => Ok(r.receipt),
            Some(Entry::Unreadable { why, .. }) if matches!(scope, Scope::Owner) => {
                Err(unreadable(id, &why))
            }
            _ => Err(not_found(id)),
        }
    }

    /// The receipt; with `wait` > 0 waits (at most [`DELEGATION_READ_WAIT_MAX`]) until it is
    /// terminal or the wait ends.
    ///
    /// # Errors
    /// `invalid_request`: not a request id, or `wait` over the bound; `not_found`: no receipt
    /// `scope` sees; `execution_failed`: the receipt cannot be read (owner only).
    pub async fn read(
        &self,
        request_id: &str,
        wait: Duration,
        scope: &Scope,
    ) -> ToolResult<Receipt> {
        check_id(request_id)?;
        if wait > DELEGATION_READ_WAIT_MAX {
            return Err(ToolError::invalid(format!(
                "wait_ms must be at most {}",
                DELEGATION_READ_WAIT_MAX.as_millis()
            )));
        }
        self.wait_terminal(request_id, wait, scope).await
    }

    async fn wait_terminal(&self, id: &str, wait: Duration, scope: &Scope) -> ToolResult<Receipt> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut changed = self.changed.subscribe();
        loop {
            changed.borrow_and_update();
            let r = self.load_visible(id, scope).await?;
            if r.status.is_terminal() || tokio::time::Instant::now() >= deadline {
                return Ok(r);
            }
            tokio::select! {
                _ = changed.changed() => {}
                () = tokio::time::sleep(READ_POLL) => {}
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// The receipts `scope` sees, newest first (unreadable ones to the owner only).
    ///
    /// # Errors
    /// `execution_failed`: the store cannot be locked.
    pub fn list(&self, scope: &Scope) -> ToolResult<Vec<ReceiptSummary>> {
        let _lock = self.store.lock().map_err(|e| store_error(&e))?;
        Ok(summaries(self.store.all_settled(), scope))
    }

    /// Cancels `request_id` and its whole tree of descendants (the requests its worker
    /// delegated, and theirs: `Manager::cancel_descendants`): a queued one ends
    /// `failed`/`not_sent`; a running one's process tree is terminated and it ends
    /// `failed`/`sent`, diagnostic `cancelled` (a descendant's message names the ancestor). A terminal one
    /// is returned as it is. A request of another live server is asked to stop through a
    /// marker file that server takes up; the receipt is returned as it stands when that server
    /// has not taken it up within `CANCEL_ACK_WAIT`, or has not recorded the end within
    /// `CANCEL_WAIT` ([`Manager::cancel_pending`] then says which).
    ///
    /// # Errors
    /// As [`Manager::read`].
    pub async fn cancel(&self, request_id: &str, scope: &Scope) -> ToolResult<Receipt> {
        check_id(request_id)?;
        let r = self.load_visible(request_id, scope).await?;
        if r.status.is_terminal() {
            return Ok(r);
        }
        let local_run = self.lock_local().running.get(request_id).cloned();
        if let Some(token) = local_run {
            token.cancel();
        } else {
            let s = self.store.clone();
            let local = self.local.clone();
            let id = request_id.to_owned();
            off_thread(move || {
                let _lock = s.lock().map_err(|e| store_error(&e))?;
                let Some(Entry::Ok(mut r)) = s.load_settled(&id) else {
                    return Ok(());
                };
                let mut l = local
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let queued_here = l.queue.iter().position(|p| p.request_id == id);
                match (r.receipt.status, queued_here) {
                    (DelegationStatus::Queued, Some(i)) => {
                        l.queue.remove(i);
                        r.receipt.end(
                            DelegationStatus::Failed,
                            DeliveryState::NotSent,
                            Some((
                                "cancelled",
                                "cancelled before it started; nothing ran".into(),
                            )),
                        );
                        s.write(&r).map_err(|e| store_error(&e))
                    }
                    (s_, _) if s_.is_terminal() => Ok(()),
                    // Another server's: it looks for the marker.
                    _ => crate::primitives::private::write_atomic(&s.cancel_marker(&id), b"")
                        .map_err(|e| store_error(&e)),
                }
            })
            .await?;
            self.bump();
        }
        self.cancel_descendants(request_id).await;
        self.wait_cancelled(request_id, scope).await
    }

    /// After a cancellation was asked: the receipt once it is terminal, or as it stands when
    /// `CANCEL_WAIT` passed, or when the marker another server should take up is still there
    /// after `CANCEL_ACK_WAIT` (that server does not act: stopped, busy, or no server).
    async fn wait_cancelled(&self, id: &str, scope: &Scope) -> ToolResult<Receipt> {
        let marker = self.store.cancel_marker(id);
        let ack_deadline = tokio::time::Instant::now() + CANCEL_ACK_WAIT;
        while marker.exists() && tokio::time::Instant::now() < ack_deadline {
            let r = self.load_visible(id, scope).await?;
            if r.status.is_terminal() {
                return Ok(r);
            }
            tokio::time::sleep(READ_POLL).await;
        }
        if marker.exists() {
            return self.load_visible(id, scope).await;
        }
        self.wait_terminal(id, CANCEL_WAIT, scope).await
    }

    /// For a cancelled request that has not ended yet: who is to carry the cancellation out
    /// and whether it has taken it up, for people (`cancel_delegation`'s `cancel_pending`).
    /// `None` when the request has ended (or there is no such receipt).
    pub async fn cancel_pending(&self, id: &str) -> Option<String> {
        let local = self.lock_local().running.contains_key(id);
        let s = self.store.clone();
        let i = id.to_owned();
        let entry = off_thread(move || {
            let _lock = s.lock().map_err(|e| store_error(&e))?;
            Ok((s.load_settled(&i), s.cancel_marker(&i).exists()))
        })
        .await
        .ok()?;
        let (Some(Entry::Ok(r)), marker) = entry else {
            return None;
        };
        if r.receipt.status.is_terminal() {
            return None;
        }
        let runner = match &r.server {
            Some(server) => format!("the server process {} that runs it", server.pid),
            None => "the server that runs it".to_owned(),
        };
        Some(if local {
            "cancellation in progress: this server is terminating the agent's process tree; \
             read_delegation shows when it has ended"
                .to_owned()
        } else if marker {
            format!(
                "cancellation requested, not carried out yet: {runner} has not taken up the \
                 request within {} s (it may be stopped or busy, or not a machine-mcp server); \
                 it ends the run when it does; read_delegation shows the outcome (unknown if \
                 that process dies first)",
                CANCEL_ACK_WAIT.as_secs()
            )
        } else {
            format!(
                "cancellation taken up by {runner}, not recorded yet: the agent's process tree \
                 is being terminated; read_delegation shows when it has ended"
            )
        })
    }

    /// Delegations of this server that are queued or running (what a restart of this
    /// process would end; the stdio supervisor and the daemon's upgrade wait for none).
    pub fn active(&self) -> usize {
        self.local
            .lock()
            .map(|l| l.queue.len() + l.running.len())
            .unwrap_or(0)
    }

    /// Ends this server's delegations because the process ends: queued ones become
    /// `failed`/`not_sent`, running ones have their trees terminated and become
    /// `failed`/`sent` with diagnostic `server_stopped` (the agent was stopped before it
    /// answered; what it changed so far stays). Waits for the runs to be recorded (bounded).
    pub async fn shutdown(&self) {
        self.closing.cancel();
        let queued: Vec<Pending> = std::mem::take(&mut self.lock_local().queue);
        if !queued.is_empty() {
            let s = self.store.clone();
            let _ = off_thread(move || {
                let _lock = s.lock().map_err(|e| store_error(&e))?;
                for p in queued {
                    if let Some(Entry::Ok(mut r)) = s.load(&p.request_id)
                        && r.receipt.status == DelegationStatus::Queued
                    {
                        r.receipt.end(
                            DelegationStatus::Failed,
                            DeliveryState::NotSent,
                            Some((
                                "server_stopped",
                                "the server stopped before it started; nothing ran".into(),
                            )),
                        );
                        let _ = s.write(&r);
                    }
                }
                Ok(())
            })
            .await;
        }
        self.tasks.close();
        let _ = tokio::time::timeout(CANCEL_WAIT, self.tasks.wait()).await;
    }

    /// Starts queued requests of this server while slots are free (counted over every live
    /// server), oldest first; a request cancelled through another server's marker ends here.
    async fn pump_queue(&self) {
        if self.closing.is_cancelled() || self.lock_local().queue.is_empty() {
            return;
        }
        let s = self.store.clone();
        let local = self.local.clone();
        let closing = self.closing.clone();
        let started = off_thread(move || {
            let _lock = s.lock().map_err(|e| store_error(&e))?;
            let entries = s.all_settled();
            let mut running = 0;
            let mut per_agent: HashMap<Agent, usize> = HashMap::new();
            for e in &entries {
                if let Entry::Ok(r) = e
                    && r.receipt.status == DelegationStatus::Running
                {
                    running += 1;
                    *per_agent.entry(r.receipt.agent).or_default() += 1;
                }
            }
            let mut l = local
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let mut started = Vec::new();
            let mut i = 0;
            while i < l.queue.len() {
                let id = l.queue[i].request_id.clone();
                let agent = l.queue[i].agent;
                let Some(Entry::Ok(mut r)) = s.load(&id) else {
                    l.queue.remove(i);
                    continue;
                };
                if r.receipt.status != DelegationStatus::Queued {
                    l.queue.remove(i);
                    continue;
                }
                if s.cancel_marker(&id).exists() {
                    let _ = std::fs::remove_file(s.cancel_marker(&id));
                    r.receipt.end(
                        DelegationStatus::Failed,
                        DeliveryState::NotSent,
                        Some((
                            "cancelled",
                            "cancelled before it started; nothing ran".into(),
                        )),
                    );
                    let _ = s.write(&r);
                    l.queue.remove(i);
                    continue;
                }
                let agent_running = per_agent.get(&agent).copied().unwrap_or(0);
                if running >= DELEGATIONS_RUNNING_MAX {
                    break;
                }
                if agent_running >= DELEGATIONS_RUNNING_PER_AGENT_MAX {
                    i += 1;
                    continue;
                }
                r.receipt.status = DelegationStatus::Running;
                // Until the run records whether the agent was started (M1: never `not_sent`
                // once it may have been).
                r.receipt.delivery_state = DeliveryState::Unknown;
                r.receipt.started_at = Some(now_rfc3339());
                r.server = store::this_server();
                if let Err(e) = s.write(&r) {
                    tracing::warn!(error = %e, "cannot start a queued delegation");
                    i += 1;
                    continue;
                }
                running += 1;
                *per_agent.entry(agent).or_default() += 1;
                let p = l.queue.remove(i);
                let token = closing.child_token();
                l.running.insert(p.request_id.clone(), token.clone());
                started.push((p, token));
            }
            Ok(started)
        })
        .await;
        match started {
            Ok(started) => {
                if !started.is_empty() {
                    self.bump();
                }
                for (p, token) in started {
                    self.spawn_run(p, token);
                }
            }
            Err(e) => tracing::warn!(error = %e.message(), "the delegation queue cannot move"),
        }
    }

    fn spawn_run(&self, p: Pending, token: CancellationToken) {
        let Some(me) = self.me.upgrade() else { return };
        self.tasks.spawn(async move {
            let id = p.request_id.clone();
            run::run(&me, p, token).await;
            me.lock_local().running.remove(&id);
            me.bump();
            me.pump.notify_one();
        });
    }

    /// Writes `f`'s change of receipt `id` under the lock (a receipt already terminal is left
    /// as it is: a run never overwrites the restart rule or a cancellation recorded first).
    async fn update(&self, id: &str, f: impl FnOnce(&mut Receipt) + Send + 'static) {
        let s = self.store.clone();
        let i = id.to_owned();
        let r = off_thread(move || {
            let _lock = s.lock().map_err(|e| store_error(&e))?;
            if let Some(Entry::Ok(mut r)) = s.load(&i)
                && !r.receipt.status.is_terminal()
            {
                f(&mut r.receipt);
                s.write(&r).map_err(|e| store_error(&e))?;
            }
            Ok(())
        })
        .await;
        if let Err(e) = r {
            tracing::warn!(error = %e.message(), "cannot record a delegation's progress");
        }
        self.bump();
    }

    /// Whether the run of `id` (of this server) is being cancelled: its token fired, or a
    /// cancellation marker waits for it.
    fn being_cancelled(&self, id: &str) -> bool {
        let token = self.lock_local().running.get(id).cloned();
        token.is_some_and(|t| t.is_cancelled()) || self.store.cancel_marker(id).exists()
    }

    /// Cancels the whole tree below `id` (the requests its worker delegated, theirs, and so
    /// on), which is being cancelled: `id`'s worker capability is revoked at once (it delegates
    /// nothing more); a queued descendant of this server never starts; a running one gets a
    /// cancellation marker whose text its run records (`cancelled with its ancestor <id>: …`)
    /// — the server that runs it takes it up, this one at once through its token. Each ends
    /// `failed`, diagnostic `cancelled`. Best effort: a store that cannot be read is logged.
    async fn cancel_descendants(&self, id: &str) {
        if let Some(w) = self.worker() {
            w.revoke(id);
        }
        let s = self.store.clone();
        let local = self.local.clone();
        let ancestor = id.to_owned();
        let found = off_thread(move || {
            let _lock = s.lock().map_err(|e| store_error(&e))?;
            let entries = s.all_settled();
            let mut below: Vec<(String, DelegationStatus)> = Vec::new();
            let mut parents = vec![ancestor.clone()];
            let mut seen = std::collections::HashSet::new();
            while let Some(parent) = parents.pop() {
                for e in &entries {
                    let Entry::Ok(r) = e else { continue };
                    let r = &r.receipt;
                    if r.parent_request_id.as_deref() == Some(parent.as_str())
                        && seen.insert(r.request_id.clone())
                    {
                        parents.push(r.request_id.clone());
                        if !r.status.is_terminal() {
                            below.push((r.request_id.clone(), r.status));
                        }
                    }
                }
            }
            let mut l = local
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let mut tokens = Vec::new();
            for (child, status) in below {
                let queued_here = l.queue.iter().position(|p| p.request_id == child);
                match (status, queued_here) {
                    (DelegationStatus::Queued, Some(i)) => {
                        l.queue.remove(i);
                        if let Some(Entry::Ok(mut r)) = s.load(&child) {
                            r.receipt.end(
                                DelegationStatus::Failed,
                                DeliveryState::NotSent,
                                Some((
                                    "cancelled",
                                    format!(
                                        "cancelled with its ancestor {ancestor} before it \
                                         started; nothing ran"
                                    ),
                                )),
                            );
                            let _ = s.write(&r);
                        }
                    }
                    _ => {
                        let reason = format!(
                            "cancelled with its ancestor {ancestor}: {DESCENDANT_CANCELLED}"
                        );
                        if let Err(e) = crate::primitives::private::write_atomic(
                            &s.cancel_marker(&child),
                            reason.as_bytes(),
                        ) {
                            tracing::warn!(error = %e, "cannot mark a delegation cancelled");
                        }
                        if let Some(t) = l.running.get(&child) {
                            tokens.push((child, t.clone()));
                        }
                    }
                }
            }
            Ok(tokens)
        })
        .await;
        match found {
            Ok(tokens) => {
                for (child, token) in tokens {
                    if let Some(w) = self.worker() {
                        w.revoke(&child);
                    }
                    token.cancel();
                }
            }
            Err(e) => tracing::warn!(error = %e.message(), "cannot cancel a delegation's tree"),
        }
        self.bump();
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

/// The status of an agent that cannot even be inspected: the user configuration (why) is
/// unusable, so no agent can accept work.
pub fn unusable(agent: Agent, why: &str) -> AgentStatus {
    AgentStatus {
        agent,
        enabled: false,
        available: false,
        executable: None,
        version: None,
        authenticated: None,
        auth_detail: None,
        can_accept_work: false,
        not_ready: Some(format!("the user configuration cannot be used: {why}")),
        program: None,
    }
}

/// The idempotency rule over what the store holds for the id.
fn replay(entry: Option<Entry>, fp: &str) -> ToolResult<Option<Receipt>> {
    match entry {
        None => Ok(None),
        Some(Entry::Ok(r)) if r.fingerprint == fp => Ok(Some(r.receipt)),
        Some(Entry::Ok(r)) => Err(ToolError::conflict(format!(
            "request_id {} was used for another request (another agent, directory, prompt or \
             caller); choose a new request_id",
            r.receipt.request_id
        ))),
        Some(Entry::Unreadable { request_id, why }) => Err(ToolError::conflict(format!(
            "request_id {request_id} names a receipt that cannot be read ({why}); it is kept as \
             it is: choose a new request_id"
        ))),
    }
}

/// Admission under the store's lock: idempotency again (another server may have raced), the
/// bounds, room, then the receipt written.
fn admit(s: &Store, new: StoredReceipt, worker: bool) -> ToolResult<Admitted> {
    let _lock = s.lock().map_err(|e| store_error(&e))?;
    let id = new.receipt.request_id.clone();
    if let Some(r) = replay(s.load_settled(&id), &new.fingerprint)? {
        return Ok(Admitted::Existing(r));
    }
    if s.draining() {
        return Err(ToolError::new(ToolErrorCode::Unavailable, DRAINING_MESSAGE));
    }
    let mut entries = s.all_settled();
    let (mut running, mut agent_running, mut queued, mut tree) = (0, 0, 0, 0);
    for e in &entries {
        let Entry::Ok(r) = e else { continue };
        let r = &r.receipt;
        if r.root_request_id == new.receipt.root_request_id {
            tree += 1;
        }
        match r.status {
            DelegationStatus::Running => {
                running += 1;
                if r.agent == new.receipt.agent {
                    agent_running += 1;
                }
            }
            DelegationStatus::Queued => queued += 1,
            _ => {}
        }
    }
    if tree >= DELEGATIONS_PER_ROOT_MAX {
        return Err(limit(
            "tree",
            format!(
                "the tree of {} has {tree} requests; at most {DELEGATIONS_PER_ROOT_MAX}",
                new.receipt.root_request_id
            ),
        ));
    }
    if worker
        && (running >= DELEGATIONS_RUNNING_MAX
            || agent_running >= DELEGATIONS_RUNNING_PER_AGENT_MAX)
    {
        return Err(limit(
            "capacity",
            format!(
                "no free slot for {} ({running} of {DELEGATIONS_RUNNING_MAX} running, \
                 {agent_running} of {DELEGATIONS_RUNNING_PER_AGENT_MAX} of this agent); a \
                 worker's request is not queued behind its own parent: try later or do it \
                 yourself",
                new.receipt.agent.name()
            ),
        )
        .retryable());
    }
    if !worker && queued >= DELEGATIONS_QUEUED_MAX {
        return Err(limit(
            "queue",
            format!("{queued} delegations wait already; at most {DELEGATIONS_QUEUED_MAX}"),
        )
        .retryable());
    }
    if !s.make_room(&mut entries) {
        return Err(limit("records", store_full(&entries)).retryable());
    }
    s.write(&new).map_err(|e| store_error(&e))?;
    Ok(Admitted::New(new.receipt))
}

/// Why a full store (`entries`, none pruned) refuses a new receipt, by what fills it:
/// unfinished receipts wait for their runs; unreadable ones stay until someone removes them.
fn store_full(entries: &[Entry]) -> String {
    let (mut unfinished, mut finished, mut unreadable) = (0, 0, 0);
    for e in entries {
        match e {
            Entry::Ok(r) if r.receipt.status.is_terminal() => finished += 1,
            Entry::Ok(_) => unfinished += 1,
            Entry::Unreadable { .. } => unreadable += 1,
        }
    }
    let mut why = format!(
        "the store holds {} receipts, at most {}: {unfinished} queued or running, {unreadable} \
         unreadable, {finished} finished (only finished ones are pruned, and too few are)",
        entries.len(),
        protocol::limits::DELEGATION_RECORDS_MAX
    );
    if unreadable > 0 {
        why.push_str(
            "; unreadable receipts are kept for inspection (list_delegations with status \
             unreadable names them) until the machine's owner removes them from \
             STATE_DIR/delegations",
        );
    }
    if unfinished > 0 {
        why.push_str("; try again when some delegations have ended");
    }
    why
}

/// The summaries of `entries` that `scope` sees, newest first.
fn summaries(entries: Vec<Entry>, scope: &Scope) -> Vec<ReceiptSummary> {
    let mut out: Vec<ReceiptSummary> = entries
        .iter()
        .filter(|e| match e {
            Entry::Ok(r) => scope.sees(r),
            Entry::Unreadable { .. } => matches!(scope, Scope::Owner),
        })
        .map(ReceiptSummary::of)
        .collect();
    out.sort_by(|a, b| {
        b.created_at
            .cmp(&a.created_at)
            .then_with(|| a.request_id.cmp(&b.request_id))
    });
    out
}

/// Every receipt of `store`, settled, as the owner sees them (`machine-mcp delegation list`).
///
/// # Errors
/// The store cannot be locked (its directory cannot be created or written).
pub fn list_store(store: &Store) -> std::io::Result<Vec<ReceiptSummary>> {
    let _lock = store.lock()?;
    Ok(summaries(store.all_settled(), &Scope::Owner))
}

/// The queued and running receipts of live servers (what a drain waits for).
pub fn unfinished(store: &Store) -> Vec<ReceiptSummary> {
    let Ok(_lock) = store.lock() else {
        return Vec::new();
    };
    let entries = store
        .all_settled()
        .into_iter()
        .filter(|e| {
            matches!(e, Entry::Ok(r) if !r.receipt.status.is_terminal()
                && server_alive(r.server.as_ref()))
        })
        .collect();
    summaries(entries, &Scope::Owner)
}

/// The environment of `agent` under `environment` ([`AgentEnvironment`]) from this server's,
/// plus `extra` (the worker variables, added last).
///
/// # Errors
/// The private directories of an isolated environment cannot be created.
fn agent_env(
    agent: Agent,
    environment: &AgentEnvironment,
    extra: Vec<(String, String)>,
) -> std::io::Result<Vec<(OsString, OsString)>> {
    agent_env_from(std::env::vars_os().collect(), agent, environment, extra)
}

/// [`agent_env`] from the environment `inherited` instead of this process's.
///
/// The rule for [`DROPPED_ENV_PREFIXES`] is by prefix only: a variable is dropped when its
/// name starts with one of them (`CODEX_MCP_BRIDGE_X` is; `SOME_BRIDGE_TOKEN` is not, and
/// reaches an agent of a `full_env` policy).
fn agent_env_from(
    inherited: Vec<(OsString, OsString)>,
    agent: Agent,
    environment: &AgentEnvironment,
    extra: Vec<(String, String)>,
) -> std::io::Result<Vec<(OsString, OsString)>> {
    let dropped = |k: &OsString| {
        let k = k.to_string_lossy();
        DROPPED_ENV_PREFIXES.iter().any(|p| k.starts_with(p))
    };
    let mut env: Vec<(OsString, OsString)> = match environment {
        AgentEnvironment::Full => inherited.into_iter().filter(|(k, _)| !dropped(k)).collect(),
        AgentEnvironment::Isolated { scratch } => {
            let scratch = crate::tools::process::engine::env::Scratch::new(scratch.clone());
            let base = crate::tools::process::engine::env::child_env_from(
                inherited.clone(),
                false,
                &scratch,
                false,
                &std::collections::BTreeMap::new(),
            )?;
            let mut env: std::collections::BTreeMap<OsString, OsString> =
                base.into_iter().collect();
            let is_set = |name: &str| {
                inherited
                    .iter()
                    .any(|(k, v)| k.as_os_str() == name && !v.is_empty())
            };
            for (k, v) in &inherited {
                let own = k
                    .to_str()
                    .is_some_and(|name| name == "HOME" || agents::keeps_env(agent, name, &is_set));
                if own {
                    env.insert(k.clone(), v.clone());
                }
            }
            env.into_iter().filter(|(k, _)| !dropped(k)).collect()
        }
    };
    env.extend(extra.into_iter().map(|(k, v)| (k.into(), v.into())));
    Ok(env)
}
