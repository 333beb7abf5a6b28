//! `server_info`: what this server is and what it allows.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use protocol::limits;

use crate::tools::family::Family;
use crate::{
    Access, SERVER_NAME, SUPPORTED_PROTOCOL_VERSIONS,
    call::{
        catalog::{Hints, ToolMeta, ToolSpec},
        context::CallContext,
        error::ToolResult,
        text::TextView,
    },
    policy::{Capability, PolicyView},
};

/// The family's entry in the registry: its catalog entries.
pub(crate) const FAMILY: Family = Family::tools(specs);

pub(crate) fn specs() -> Vec<ToolSpec> {
    vec![ToolSpec::structured(
        ToolMeta {
            name: "server_info",
            title: "Server information",
            description: "Describe this server: version, negotiated MCP protocol version, the \
                          workspace root, the effective policy (profile, write, exec mode, path \
                          rules), the tools it allows, its limits, what it is doing (activity) \
                          and, under machine-mcp stdio, its supervisor (worker pid and version, \
                          reloads, recoveries, last failure). Takes no arguments.",
            capability: Capability::Read,
            hints: Hints::READ,
        },
        server_info,
    )]
}

/// `server_info` takes no arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NoArgs {}

/// Result of `server_info`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ServerInfo {
    /// Server name (`machine-mcp`).
    name: String,
    /// Server version.
    version: String,
    /// Protocol version negotiated for this session, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    protocol_version: Option<String>,
    /// Protocol versions this server can negotiate.
    supported_protocol_versions: Vec<String>,
    /// Absolute path of the workspace root.
    workspace: String,
    /// The effective policy.
    policy: PolicyView,
    /// Names of the tools the policy allows.
    tools: Vec<String>,
    /// Bounds enforced by the tools.
    limits: Limits,
    /// What the server is doing now.
    activity: Activity,
    /// The stdio supervisor this server runs under (`machine-mcp stdio`, not with
    /// `--no-supervisor`, nor through the relay): added by the supervisor to the answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    supervisor: Option<SupervisorInfo>,
}

/// What the server is doing now, and what it holds for its client.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Activity {
    /// Tool calls running, this one included.
    calls_in_flight: usize,
    /// Process sessions whose process is running.
    running_process_sessions: usize,
    /// Process sessions kept: running, or exited and still readable by read_process.
    kept_process_sessions: usize,
    /// Tasks still working.
    working_tasks: usize,
    /// Tasks kept: working, or finished and still readable by tasks/get.
    kept_tasks: usize,
    /// Delegations this server has queued or running (`delegate`).
    active_delegations: usize,
}

/// The stdio supervisor of `machine-mcp stdio`: the process that owns the host's
/// connection and runs the server as a worker it can replace (an upgrade) or restart (a crash).
#[derive(Debug, Clone, Serialize, serde::Deserialize, JsonSchema)]
pub struct SupervisorInfo {
    /// The supervisor's process id.
    pub pid: u32,
    /// The active worker's process id; absent while none is running.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_pid: Option<u32>,
    /// The active worker's generation: 1 for the first, one more for each replacement.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_generation: Option<u64>,
    /// The binary workers are started from (the path the host started; watched for upgrades).
    pub binary: String,
    /// Whether a changed binary is swapped in without the user asking, and why not.
    pub automatic_swap: AutomaticSwap,
    /// The version the active worker runs (its binary's `--version`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub binary_version: Option<String>,
    /// `serving`, `restarting the worker (...)`, `starting a worker` or `failed: REASON`.
    pub state: String,
    /// Upgrades or reloads that replaced the worker.
    pub reloads: u64,
    /// Restarts after a worker exited unexpectedly.
    pub recoveries: u64,
    /// When and what the last reload was (`TIME: OLD → NEW (worker pid N)`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_reload: Option<String>,
    /// The last failure: a candidate that did not start, a probe that failed, a worker that
    /// exited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<String>,
    /// Replaced workers still finishing their work (process ids).
    pub replaced_workers: Vec<u32>,
}

/// Whether the supervisor swaps in a changed binary by itself ([`SupervisorInfo`]).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct AutomaticSwap {
    /// `true`: a changed binary at the path is started when it answers `--version`.
    pub enabled: bool,
    /// Why it is off: the binary lies in a workspace a caller may write without exec; a
    /// reload by the user (`machine-mcp reload`) still takes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Bounds enforced by the tools (bytes, counts, characters and seconds; characters are counted
/// as UTF-8 bytes).
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Limits {
    /// Most characters of a result's text block by default (a summary line, then plain text);
    /// every tool's default result fits and its summary line says how to continue.
    result_text_default_chars: usize,
    /// Longest summary line (the first line of a result's text).
    result_summary_max_chars: usize,
    /// Most characters of a page whose caller explicitly asked for more entries; also the
    /// `anthropic/maxResultSizeChars` tools that accept larger requests declare in tools/list.
    result_text_raised_max_chars: usize,
    /// Error texts are shorter than this.
    error_text_max_chars: usize,
    /// Tool descriptions are shorter than this.
    tool_description_max_chars: usize,
    /// Default `max_bytes` of `git_diff` and `git_show` (one page of the patch).
    git_diff_default_bytes: usize,
    /// Largest `max_bytes` of `git_diff` and `git_show`.
    git_diff_max_bytes: usize,
    /// Largest `max_bytes` of `read_process` (per stream).
    session_read_max_bytes: usize,
    /// Largest `max_output_bytes` of `run_process` and `exec_command` (per stream).
    process_output_max_bytes: usize,
    /// Default `max_bytes` of `read_file`.
    read_default_max_bytes: usize,
    /// Largest `max_bytes` of `read_file` (smaller through the relay: what fits in one frame).
    read_hard_max_bytes: usize,
    /// Largest image `view_image` returns.
    image_max_bytes: usize,
    /// Largest file the edit tools rewrite.
    edit_file_max_bytes: usize,
    /// Largest `max_matches` of `search_text`.
    search_max_matches: usize,
    /// Largest `max_files` of `list_files`.
    list_files_max: usize,
    /// Bytes of one ignore file (`.gitignore`, `.ignore`, git excludes) that `search_text` and
    /// `list_files` apply; the rest is named in the result's `notes`.
    ignore_file_max_bytes: usize,
    /// Patterns of one ignore file that `search_text` and `list_files` apply; later patterns
    /// are named in the result's `notes`.
    ignore_file_max_patterns: usize,
    /// Largest JSON-RPC message carried (a stdio line, or a relay frame through the relay).
    message_max_bytes: usize,
    /// Tool calls running at once.
    concurrent_tool_calls: usize,
    /// Tool calls one caller other than the owner runs at once.
    calls_per_principal: usize,
    /// Slots of `concurrent_tool_calls` only the owner may take.
    owner_reserved_calls: usize,
    /// Tasks one principal other than the owner may have kept at once.
    tasks_per_principal: usize,
    /// Of the kept tasks, those principals other than the owner leave to the owner.
    owner_reserved_tasks: usize,
    /// Process sessions running at once; one more `start_process` gets `limit_exceeded`.
    process_sessions_max: usize,
    /// Seconds an exited process session stays readable, unless discarded earlier by the two
    /// bounds below.
    exited_session_retention_secs: u64,
    /// Exited process sessions kept (across callers); beyond it the one that exited first is
    /// discarded. Running sessions are never discarded.
    exited_sessions_max: usize,
    /// Output bytes held for exited process sessions in total (across callers); beyond it the
    /// exited sessions that ended first are discarded until the rest fit.
    exited_sessions_output_max_bytes: usize,
}

impl TextView for ServerInfo {
    fn summary(&self) -> String {
        format!(
            "server_info: {} {}, workspace {}, {} tools allowed; the policy, tools and limits follow (JSON)",
            self.name,
            self.version,
            self.workspace,
            self.tools.len()
        )
    }

    fn body(&self, out: &mut String) {
        // Small and read by people and models alike: the structure as indented JSON.
        if let Ok(v) = serde_json::to_string_pretty(self) {
            out.push_str(&v);
            out.push('\n');
        }
    }
}

async fn server_info(rt: Arc<Access>, _args: NoArgs, cx: CallContext) -> ToolResult<ServerInfo> {
    let a = rt.activity();
    Ok(ServerInfo {
        activity: Activity {
            calls_in_flight: a.calls_in_flight,
            running_process_sessions: a.running_process_sessions,
            kept_process_sessions: a.kept_process_sessions,
            working_tasks: a.working_tasks,
            kept_tasks: a.kept_tasks,
            active_delegations: a.active_delegations,
        },
        supervisor: None,
        name: SERVER_NAME.to_owned(),
        version: crate::version().to_owned(),
        protocol_version: cx.protocol_version,
        supported_protocol_versions: SUPPORTED_PROTOCOL_VERSIONS
            .iter()
            .map(|v| v.to_string())
            .collect(),
        workspace: rt.workspace().root().to_string_lossy().into_owned(),
        policy: rt.policy().view(),
        tools: super::allowed(rt.policy())
            .map(|t| t.meta().name.to_owned())
            .collect(),
        limits: Limits {
            result_text_default_chars: crate::limits::RESULT_TEXT_DEFAULT_CHARS,
            result_summary_max_chars: crate::limits::RESULT_SUMMARY_MAX_CHARS,
            result_text_raised_max_chars: crate::limits::RESULT_TEXT_RAISED_MAX_CHARS,
            error_text_max_chars: crate::limits::ERROR_TEXT_MAX_CHARS,
            tool_description_max_chars: crate::limits::TOOL_DESCRIPTION_MAX_CHARS,
            git_diff_default_bytes: crate::limits::GIT_DIFF_DEFAULT_BYTES,
            git_diff_max_bytes: crate::limits::GIT_DIFF_MAX_BYTES,
            session_read_max_bytes: crate::limits::SESSION_READ_MAX_BYTES,
            process_output_max_bytes: crate::limits::PROCESS_OUTPUT_MAX_BYTES,
            read_default_max_bytes: crate::limits::READ_DEFAULT_MAX_BYTES,
            read_hard_max_bytes: rt.read_max_bytes(),
            image_max_bytes: crate::limits::IMAGE_MAX_BYTES,
            edit_file_max_bytes: crate::limits::EDIT_FILE_MAX_BYTES,
            search_max_matches: crate::limits::SEARCH_MAX_MATCHES,
            list_files_max: crate::limits::LIST_FILES_MAX,
            ignore_file_max_bytes: crate::limits::IGNORE_FILE_MAX_BYTES,
            ignore_file_max_patterns: crate::limits::IGNORE_FILE_MAX_PATTERNS,
            message_max_bytes: rt.message_max_bytes(),
            concurrent_tool_calls: limits::CONCURRENT_TOOL_CALLS,
            calls_per_principal: crate::limits::CALLS_PER_PRINCIPAL,
            owner_reserved_calls: crate::limits::OWNER_RESERVED_CALLS,
            tasks_per_principal: crate::limits::TASKS_PER_PRINCIPAL,
            owner_reserved_tasks: crate::limits::OWNER_RESERVED_TASKS,
            process_sessions_max: crate::limits::PROCESS_SESSIONS_MAX,
            exited_session_retention_secs: crate::limits::SESSION_RETENTION_AFTER_EXIT.as_secs(),
            exited_sessions_max: crate::limits::EXITED_SESSIONS_MAX,
            exited_sessions_output_max_bytes: crate::limits::EXITED_SESSIONS_OUTPUT_MAX_BYTES,
        },
    })
}
