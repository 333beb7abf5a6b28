//! The machine-bridge runtime: everything that happens on the user's machine.
//!
//! It knows no socket, HTTP or WebSocket: the stdio transport and the daemon's relay link feed
//! JSON-RPC messages to the same MCP server. The source tree:
//!
//! - [`mcp`] — MCP plumbing: [`McpServer`] (the rmcp `ServerHandler` every transport serves),
//!   tasks, the stdio transport ([`mcp::stdio`]) and the server of a tool set without a runtime.
//! - [`call`] — what a tool call is to both sides: the catalog machinery, [`CallContext`],
//!   [`ToolError`], the result and its text, JSON text, tool sets.
//! - [`tools`] — the tool registry (the one list of families) and one folder per tool family
//!   holding its handlers, its pure `engine`, its state and their unit tests (`info` is one
//!   file). The only import direction is `mcp → tools`; this file and `mcp` name no family
//!   (the tidy test checks both).
//! - `primitives` — shared pure building blocks of the families: text facts, complete-before-
//!   visible writes and write locks, diffs, ignore files, skipped paths.
//! - [`policy`] (profiles, capabilities, [`Principal`]), [`path`] (confinement), [`memory`]
//!   (heap hygiene), [`pipe`] (pipe capacity), [`procs`] (facts about processes), [`config`]
//!   (the user's configuration); [`Runtime`] and [`Access`] (the runtime as one caller may use
//!   it) are here.
//!
//! [`Runtime`] keeps what every family shares (workspace, policy, call slots, tasks, write
//! locks, the ignore cache) as fields, and what a family keeps (process sessions, the job store,
//! the delegation manager, ...) by type, made by the family itself; its shutdown and its
//! [`RuntimeActivity`] go through each family's hooks.
//!
//! Main types: [`Runtime`] (configuration + shared state, one per process), [`McpServer`] (one per
//! MCP session), [`CallContext`] (cancellation, progress and caller of one tool call),
//! [`ToolError`] (a failed call, rendered as an `isError` result with a stable code).
//!
//! ```
//! use machine_bridge_runtime::{
//!     CallContext, McpServer, Principal, Runtime, RuntimeConfig,
//!     policy::{Policy, Profile},
//! };
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! std::fs::write(dir.path().join("notes.txt"), "one\ntwo\n")?;
//! let runtime = std::sync::Arc::new(Runtime::new(RuntimeConfig {
//!     workspace: dir.path().into(),
//!     policy: Policy::profile(Profile::Review),
//!     default_yield_after: None,
//!     remote: false,
//!     state_dir: None,
//!     own_files: Vec::new(),
//! })?);
//! // `machine-mcp stdio` serves this process's stdin and stdout with it:
//! // machine_bridge_runtime::mcp::stdio::serve_process_stdio(runtime).await?;
//! let server = McpServer::new(runtime.access(None), Principal::local());
//! let args = serde_json::json!({"path": "notes.txt", "start_line": 2});
//! let args = args.as_object().cloned().unwrap_or_default();
//! let result = server.call("read_file", args, CallContext::local()).await?;
//! assert_eq!(result.structured_content.unwrap()["content"], "two\n");
//! # Ok(()) }
//! ```

use std::{io, path::PathBuf, sync::Arc, time::Duration};

use tokio::sync::Semaphore;

pub mod call;
pub mod config;
pub mod limits;
pub mod mcp;
pub mod memory;
pub mod path;
pub mod pipe;
pub mod policy;
mod primitives;
pub mod procs;
pub mod programs;
pub mod tools;

pub use call::{
    context::{CallContext, ProgressSink, ProgressUpdate},
    error::{ToolError, ToolErrorCode},
};
pub use mcp::server::McpServer;
pub use policy::{Principal, Profile};
pub use primitives::text::LineEnding;

use crate::{
    call::error::ToolResult,
    path::Workspace,
    policy::Policy,
    tools::family::{FamilyState, States},
};

/// The name this server reports in `initialize` (`serverInfo.name`).
pub const SERVER_NAME: &str = "machine-mcp";
/// This build's package version; [`version`] is what it reports.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Protocol versions served, oldest first: the handshake era and the stateless 2026-07-28
/// ([`McpServer`] negotiates them; `server_info` reports them).
pub const SUPPORTED_PROTOCOL_VERSIONS: [rmcp::model::ProtocolVersion; 4] = [
    rmcp::model::ProtocolVersion::V_2025_03_26,
    rmcp::model::ProtocolVersion::V_2025_06_18,
    rmcp::model::ProtocolVersion::V_2025_11_25,
    rmcp::model::ProtocolVersion::V_2026_07_28,
];

/// The build stamp: [`BUILD_STAMP_MARKER`] and 24 ASCII digits, all `0` in a plain build. The
/// digits may be overwritten in a built binary (a packager's build number; the tests make a
/// "newer build" of the same version this way) to tell two builds of one version apart, which
/// the stdio supervisor's upgrade check relies on (it compares `--version`).
#[used]
static BUILD_STAMP: [u8; 48] = *b"machine-mcp build stamp:000000000000000000000000";

/// What precedes the digits of the build stamp in the binary.
pub const BUILD_STAMP_MARKER: &[u8] = b"machine-mcp build stamp:";

/// This build's version as it reports it (`--version`, `serverInfo.version`, `server_info`):
/// [`VERSION`], then `+` and the build stamp's digits without leading zeros when the stamp is
/// not all zeros (`0.1.0+2`).
pub fn version() -> &'static str {
    static SHOWN: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        // Read the bytes as they are in the binary, not as the compiler knows them: the
        // reference is opaque to the optimizer, so the load happens at run time.
        let stamp: [u8; 48] = *std::hint::black_box(&BUILD_STAMP);
        let digits = &stamp[BUILD_STAMP_MARKER.len()..];
        let number = std::str::from_utf8(digits)
            .ok()
            .map(|d| d.trim_start_matches('0'))
            .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
        match number {
            Some(n) => format!("{VERSION}+{n}"),
            None => VERSION.to_owned(),
        }
    });
    &SHOWN
}

/// One running call of a principal, counted until dropped ([`Runtime::principal_call`]); the
/// table keeps no entry for a principal with no running call.
#[derive(Debug)]
#[must_use = "the call is counted only while the guard lives"]
pub(crate) struct PrincipalCall {
    table: Arc<lock::Lock<std::collections::HashMap<String, usize>>>,
    principal: String,
}

impl Drop for PrincipalCall {
    fn drop(&mut self) {
        let mut m = self.table.lock();
        if let Some(n) = m.get_mut(&self.principal) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(&self.principal);
            }
        }
    }
}

/// The runtime as one caller may use it (DESIGN §3 "Authority" = daemon policy ∩ caller role):
/// the effective policy and path rules, over the shared runtime (sessions, limits). Built by
/// [`Runtime::access`]; handlers only ever see this.
#[derive(Debug)]
pub struct Access {
    runtime: Arc<Runtime>,
    policy: Policy,
    workspace: Workspace,
    owner: bool,
}

impl Access {
    /// The effective policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The workspace with this caller's path rules.
    pub fn workspace(&self) -> &Workspace {
        &self.workspace
    }

    /// The shared runtime, for the MCP server's call accounting (call slots, tasks). Its
    /// [`Runtime::policy`] and [`Runtime::workspace`] are the daemon's ceiling, not this caller's:
    /// tool handlers use [`Access::policy`] and [`Access::workspace`], and never this (the tidy
    /// test checks that no file under `tools/` calls it).
    pub(crate) fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// Whether the caller is the runtime's owner (the local user, or a remote principal whose
    /// role is `owner`, i.e. the `full` profile): only the owner may take the call slots kept
    /// by [`crate::limits::OWNER_RESERVED_CALLS`].
    pub fn is_owner(&self) -> bool {
        self.owner
    }

    /// The state a tool family keeps in this runtime (see [`tools::family`]): one lookup by
    /// type, no lock.
    ///
    /// # Errors
    /// `internal_error` when no family keeps a state of type `S` (it is not registered).
    pub(crate) fn state<S: FamilyState>(&self) -> ToolResult<&S> {
        self.runtime.state::<S>().ok_or_else(|| {
            ToolError::internal(format!(
                "this runtime keeps no {}",
                std::any::type_name::<S>()
            ))
        })
    }

    pub(crate) fn default_yield_after(&self) -> Option<Duration> {
        self.runtime.default_yield_after()
    }

    /// Largest `max_bytes` of `read_file` for this runtime's callers: what fits in a relay frame
    /// for a daemon's ([`RuntimeConfig::remote`]), the local cap otherwise.
    pub(crate) fn read_max_bytes(&self) -> usize {
        if self.runtime.remote {
            crate::limits::READ_REMOTE_MAX_BYTES
        } else {
            crate::limits::READ_HARD_MAX_BYTES
        }
    }

    /// Largest JSON-RPC message that reaches this runtime's callers: a relay frame for a
    /// daemon's, a stdio line otherwise.
    pub(crate) fn message_max_bytes(&self) -> usize {
        if self.runtime.remote {
            protocol::limits::RELAY_FRAME_MAX_BYTES
        } else {
            protocol::limits::STDIO_LINE_MAX_BYTES
        }
    }

    /// Whether the runtime is shutting down ([`Runtime::shutdown`] has begun).
    pub(crate) fn shutting_down(&self) -> bool {
        self.runtime
            .shutting_down
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// What the runtime is doing and holding (`server_info`'s `activity`).
    pub(crate) fn activity(&self) -> RuntimeActivity {
        self.runtime.activity()
    }

    pub(crate) fn ignore_cache(&self) -> &Arc<primitives::ignores::IgnoreCache> {
        &self.runtime.ignore_cache
    }

    pub(crate) fn write_locks(&self) -> &Arc<primitives::write_lock::WriteLocks> {
        &self.runtime.write_locks
    }
}

/// What a runtime is doing and holding ([`Runtime::activity`]): its calls and tasks, and what
/// the tool families report (their `FamilyState::activity`). Counts at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuntimeActivity {
    /// Tool calls running (an asking call included).
    pub calls_in_flight: usize,
    /// Process sessions whose process runs.
    pub running_process_sessions: usize,
    /// Process sessions kept: running, or exited and still readable (for the retention after
    /// exit, DESIGN §7).
    pub kept_process_sessions: usize,
    /// Tasks still working.
    pub working_tasks: usize,
    /// Tasks kept: working, or finished and still readable.
    pub kept_tasks: usize,
    /// Delegations of this process queued or running.
    pub active_delegations: usize,
}

/// What a runtime is built from.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// The workspace directory (canonicalized by [`Runtime::new`]).
    pub workspace: PathBuf,
    /// The effective policy (the daemon ceiling).
    pub policy: Policy,
    /// Foreground budget of process calls that name none (`yield_after_seconds`): past it a
    /// still-running process becomes a session and the call returns. `None`: no budget (stdio);
    /// the relay sets one for remote callers whose hosts cut long calls.
    pub default_yield_after: Option<Duration>,
    /// Results travel to the callers in relay frames (a daemon: `connect`, `up`): `read_file`
    /// keeps to [`crate::limits::READ_REMOTE_MAX_BYTES`] and `server_info` reports it, and
    /// the frame size as the largest message. `false`: stdio.
    pub remote: bool,
    /// The state directory of managed jobs, local resources and delegations (`STATE_DIR/jobs`,
    /// `STATE_DIR/resources.json`, `STATE_DIR/delegations`). `None`: the job, resource and
    /// delegation tools answer `unavailable`.
    pub state_dir: Option<PathBuf>,
    /// The server's own paths the builder knows beyond the two the runtime adds itself (the
    /// state directory above and the user configuration directory of [`config::UserConfig`]):
    /// a daemon's servers file, the service definitions of its state directory. While paths
    /// are restricted, the tools never reach them nor anything below them ([`path::own`]).
    pub own_files: Vec<path::OwnPath>,
}

/// One runtime per process: the workspace, the policy and the shared limits. Every MCP session
/// ([`McpServer`]) holds an `Arc` of it.
#[derive(Debug)]
pub struct Runtime {
    workspace: Workspace,
    policy: Policy,
    calls: Arc<Semaphore>,
    others_calls: Arc<Semaphore>,
    principal_calls: Arc<lock::Lock<std::collections::HashMap<String, usize>>>,
    idle_trim: Arc<memory::IdleTrim>,
    /// Compiled ignore files, shared by concurrent walks (see [`primitives::ignores`]).
    ignore_cache: Arc<primitives::ignores::IgnoreCache>,
    default_yield_after: Option<Duration>,
    remote: bool,
    tasks: mcp::tasks::Tasks,
    /// Per-file write locks shared by every session (see [`primitives::write_lock`]).
    write_locks: Arc<primitives::write_lock::WriteLocks>,
    /// Set by [`Runtime::shutdown`] before it cancels the tasks: a task cancelled then is not
    /// cancelled by its client (a `start_job` task then leaves its job running).
    shutting_down: std::sync::atomic::AtomicBool,
    /// What each tool family keeps (process sessions, the job store, delegations, ...), made
    /// by the families themselves from the configuration ([`tools::family`]).
    families: States,
}

impl Runtime {
    /// Builds a runtime.
    ///
    /// # Errors
    /// The workspace does not exist, is not a directory, or cannot be canonicalized.
    pub fn new(config: RuntimeConfig) -> io::Result<Self> {
        let mut own = config.own_files.clone();
        own.extend(
            config
                .state_dir
                .iter()
                .map(|d| path::OwnPath::new(path::OwnKind::State, d)),
        );
        own.extend(
            config::UserConfig::path()
                .and_then(|f| f.parent().map(|d| d.to_owned()))
                .map(|d| path::OwnPath::new(path::OwnKind::Configuration, d)),
        );
        let workspace = Workspace::new(
            &config.workspace,
            !config.policy.unrestricted_paths(),
            config.policy.absolute_paths(),
        )?
        .with_own_files(&own);
        if programs::guards(&config.policy, config.remote) {
            programs::guard_workspace(workspace.root());
        }
        let families = States::new(&tools::FAMILIES, &config);
        Ok(Self {
            workspace,
            policy: config.policy,
            calls: Arc::new(Semaphore::new(protocol::limits::CONCURRENT_TOOL_CALLS)),
            others_calls: Arc::new(Semaphore::new(
                protocol::limits::CONCURRENT_TOOL_CALLS - crate::limits::OWNER_RESERVED_CALLS,
            )),
            principal_calls: Arc::default(),
            idle_trim: Arc::default(),
            ignore_cache: Arc::default(),
            default_yield_after: config.default_yield_after,
            remote: config.remote,
            tasks: mcp::tasks::Tasks::default(),
            write_locks: Arc::default(),
            shutting_down: std::sync::atomic::AtomicBool::new(false),
            families,
        })
    }

    /// Stops what must not outlive the process. Call once when the process is about to exit.
    ///
    /// The calls that became tasks are cancelled first (their process trees end with them;
    /// a `start_job` task leaves its job running), then each tool family's shutdown runs, in
    /// reverse listing order: delegations run by this process end and their receipts say so
    /// (a running one `failed`/`server_stopped`, nothing re-run), every process session is
    /// terminated (SIGTERM, 2 s grace, SIGKILL) and the scratch directory of isolated children
    /// removed.
    pub async fn shutdown(&self) {
        self.shutting_down
            .store(true, std::sync::atomic::Ordering::Release);
        self.tasks.cancel_all();
        for state in self.families.iter().rev() {
            state.shutdown().await;
        }
    }

    /// What the runtime is doing and holding now: its calls and tasks, and what each tool
    /// family reports (process sessions, delegations).
    pub fn activity(&self) -> RuntimeActivity {
        let mut activity = RuntimeActivity {
            calls_in_flight: protocol::limits::CONCURRENT_TOOL_CALLS
                - self.calls.available_permits(),
            working_tasks: self.tasks.working(),
            kept_tasks: self.tasks.kept(),
            ..RuntimeActivity::default()
        };
        for state in self.families.iter() {
            state.activity(&mut activity);
        }
        activity
    }

    /// The state of type `S` a tool family keeps in this runtime ([`tools::family`]).
    pub(crate) fn state<S: FamilyState>(&self) -> Option<&S> {
        self.families.get::<S>()
    }

    /// The workspace and its path rules.
    pub fn workspace(&self) -> &Workspace {
        &self.workspace
    }

    /// The effective policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The runtime as a caller with `role` may use it: the policy intersected with the role's
    /// profile (`None`: the policy as it is, for the local user), and the path rules that follow.
    pub fn access(self: &Arc<Self>, role: Option<Profile>) -> Arc<Access> {
        let policy = match role {
            Some(r) => self.policy.intersect(r),
            None => self.policy.clone(),
        };
        let workspace = self
            .workspace
            .with_rules(!policy.unrestricted_paths(), policy.absolute_paths());
        Arc::new(Access {
            runtime: self.clone(),
            policy,
            workspace,
            owner: role.is_none_or(|r| r == Profile::Full),
        })
    }

    pub(crate) fn call_slots(&self) -> &Arc<Semaphore> {
        &self.calls
    }

    /// The slots principals other than the owner share ([`Access::is_owner`]).
    pub(crate) fn others_call_slots(&self) -> &Arc<Semaphore> {
        &self.others_calls
    }

    /// Counts one more running call of `principal`; `None` when it already runs
    /// [`crate::limits::CALLS_PER_PRINCIPAL`]. The count drops with the returned guard.
    pub(crate) fn principal_call(&self, principal: &str) -> Option<PrincipalCall> {
        let mut m = self.principal_calls.lock();
        let n = m.entry(principal.to_owned()).or_insert(0);
        if *n >= crate::limits::CALLS_PER_PRINCIPAL {
            return None;
        }
        *n += 1;
        Some(PrincipalCall {
            table: self.principal_calls.clone(),
            principal: principal.to_owned(),
        })
    }

    /// Records that a tool call starts (see [`memory::IdleTrim`]).
    pub(crate) fn call_started(&self) {
        self.idle_trim.call_started();
    }

    /// Records that a tool call ended, after its permit is released: once the runtime is idle,
    /// freed heap memory goes back to the system (see [`memory::IdleTrim`]).
    pub(crate) fn call_ended(&self) {
        self.idle_trim
            .call_ended(&self.calls, protocol::limits::CONCURRENT_TOOL_CALLS);
    }

    /// The tasks of every session of this runtime (see [`mcp::tasks`]).
    pub fn tasks(&self) -> &mcp::tasks::Tasks {
        &self.tasks
    }

    pub(crate) fn default_yield_after(&self) -> Option<Duration> {
        self.default_yield_after
    }
}
