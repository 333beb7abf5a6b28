//! [`McpServer`]: the one MCP server type every transport serves (rmcp `ServerHandler`).
//!
//! Protocol rules it implements (MCP 2025-11-25 unless noted). Both eras are served, decided per
//! request by rmcp (`_meta["io.modelcontextprotocol/protocolVersion"]`), never per connection:
//! - Handshake era: `2025-11-25`, `2025-06-18`, `2025-03-26` are negotiated at `initialize`: the
//!   client's version when supported, else the newest (Lifecycle §Version Negotiation). The
//!   answer depends on the negotiated version alone and is built in one place
//!   ([`McpServer::initialize_value`]), which a relay's answers come from too, so a version gets
//!   one answer whatever the transport: the capabilities without the tasks extension (SEP-2663
//!   defines it for 2026-07-28 only) and with `tools.listChanged`. A session never keeps a
//!   stale tool list: where the list can change within a session (the stdio supervisor swaps
//!   in a build with other tools) the notification is sent; elsewhere it cannot (a daemon with
//!   another build or policy is a new instance, whose sessions end).
//! - Stateless era: `server/discover` (MCP 2026-07-28 Server › Discover) answers the supported
//!   versions, capabilities, `serverInfo` and instructions; a request carrying the per-request
//!   `_meta` fields (2026-07-28 Basic §Per-request protocol fields) is served without
//!   `initialize`; its result carries `resultType`, list results `ttlMs`/`cacheScope` (Server ›
//!   Utilities › Caching; rmcp fills `0`/`private`: a tool list depends on the caller's
//!   authority). A probe with `server/discover` followed by `initialize` on one connection works.
//! - `subscriptions/listen` (2026-07-28 Basic › Patterns › Subscriptions) is acknowledged with
//!   an empty filter: the runtime's tool list is fixed for the life of the process, so its
//!   `server/discover` advertises no `listChanged` and it sends no notification (the stdio
//!   supervisor, which can change the list, adds both). (Carried upstreams whose lists do
//!   change are bridged by the daemon.) No server→client request is ever sent, in either era.
//! - Tasks (extension `io.modelcontextprotocol/tasks`, SEP-2663; 2026-07-28 only): a call of a
//!   [`tasks::TASK_TOOLS`] tool from a client that declared the extension in the request's
//!   `clientCapabilities` runs in the foreground for [`TASK_FOREGROUND_BUDGET`]; if it is still
//!   running then, it becomes a task (`CreateTaskResult`) read with `tasks/get` and stopped with
//!   `tasks/cancel` (which kills its process tree). Tasks live in the [`crate::Runtime`] and belong
//!   to the principal (see [`crate::mcp::tasks`]).
//! - Resources and prompts: `resources/list`, `resources/templates/list` and
//!   `resources/read` serve what the tool families serve as resources (the instruction files,
//!   `machine://context/...`), `prompts/list` and `prompts/get` what they serve as prompts (the
//!   skills), through the registry (`tools::resource_list`, `tools::prompt_list`, ...), off
//!   the async threads. Both are read-only and follow the caller's path rules. Their lists can
//!   change with the files but advertise no `listChanged` (no notification is sent).
//! - `tools/list` returns what the effective policy allows; `tools/call` on an unknown tool is a
//!   JSON-RPC error (-32602), a disallowed one a `policy_denied` tool error, bad arguments an
//!   `invalid_request` tool error (Tools §Error Handling).
//! - At most [`CONCURRENT_TOOL_CALLS`] calls run at once; a principal other than the owner runs
//!   at most [`CALLS_PER_PRINCIPAL`], and those principals together leave
//!   [`OWNER_RESERVED_CALLS`] slots free for the owner (who may use every slot: it is their
//!   machine). One more gets `limit_exceeded` at once, its message naming the limit.
//!   A call that becomes a task gives its slot back (working tasks are bounded by
//!   [`crate::limits::TASKS_MAX`] instead), so tasks never lock other callers out.
//! - A call whose request carries a progress token gets `notifications/progress` from its handler.
//! - `notifications/cancelled` fires the call's cancellation token; rmcp then drops its response.

use std::{
    borrow::Cow,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use lock::Lock;

/// The call slot a running call holds; a call that becomes a task takes it out and drops it.
type CallSlot = Arc<Lock<Option<CallPermit>>>;

/// What a running call holds: a slot of [`CONCURRENT_TOOL_CALLS`] and, for a caller other than
/// the owner, one of the slots the others share and its principal's count (module docs).
#[derive(Debug)]
struct CallPermit {
    _slot: OwnedSemaphorePermit,
    _others: Option<OwnedSemaphorePermit>,
    _principal: Option<crate::PrincipalCall>,
}

use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams,
        CreateTaskResult, CustomRequest, CustomResult, DiscoverResult, ErrorCode,
        GetPromptRequestParams, GetPromptResponse, GetPromptResult, GetTaskParams, GetTaskResult,
        Implementation, InitializeRequestParams, InitializeResult, ListPromptsResult,
        ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
        ProgressNotificationParam, Prompt, PromptMessage, ProtocolVersion,
        ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
        ResourceContents, ResourceTemplate, Role, ServerCapabilities, ServerConfig,
        SubscriptionFilter, TASKS_EXTENSION_ID, UpdateTaskParams,
    },
    service::RequestContext,
};
use tokio::sync::{OwnedSemaphorePermit, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::limits::{
    CALLS_PER_PRINCIPAL, JSONRPC_ERROR_MESSAGE_MAX_CHARS, OWNER_RESERVED_CALLS,
    TASK_FOREGROUND_BUDGET,
};
use protocol::limits::CONCURRENT_TOOL_CALLS;

use crate::{
    Access, SERVER_NAME, SUPPORTED_PROTOCOL_VERSIONS,
    call::{
        context::{CallContext, ProgressSink, ProgressUpdate},
        error::{ToolError, ToolErrorCode},
        result::{error_result, reply_result},
    },
    mcp::tasks::{self, TaskEntry},
    policy::Principal,
    tools,
};

/// Queued progress reports per call; more are dropped (progress is advisory).
const PROGRESS_QUEUE: usize = 16;

/// Methods this server knows; a request for one of them whose params do not parse is answered
/// with -32602 instead of -32601.
const KNOWN_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "server/discover",
    "subscriptions/listen",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "prompts/list",
    "prompts/get",
];

/// One MCP session's server: the runtime as its caller may use it ([`Access`]), and the caller.
#[derive(Debug, Clone)]
pub struct McpServer {
    access: Arc<Access>,
    principal: Principal,
}

impl McpServer {
    /// A server for `principal` with `access`.
    pub fn new(access: Arc<Access>, principal: Principal) -> Self {
        Self { access, principal }
    }

    /// What this session may do.
    pub fn access(&self) -> &Arc<Access> {
        &self.access
    }

    /// This server's `server/discover` result (MCP 2026-07-28 Server › Discover) as JSON: what a
    /// relay answers while the daemon is away.
    pub fn discover_value(&self) -> serde_json::Value {
        serde_json::to_value(DiscoverResult::from_server_info(
            SUPPORTED_PROTOCOL_VERSIONS.to_vec(),
            self.get_info(),
        ))
        .unwrap_or(serde_json::Value::Null)
    }

    /// The `initialize` result (MCP 2025-11-25 Lifecycle § Initialization) this server gives a
    /// client whose handshake negotiated `version`, as JSON; `None` when `version` is not a
    /// handshake-era version this server supports. The one place the answer is built: the
    /// handshake itself ([`ServerHandler::initialize`]) and a relay (through the daemon's
    /// catalog) answer with it.
    pub fn initialize_value(&self, version: &str) -> Option<serde_json::Value> {
        let version = SUPPORTED_PROTOCOL_VERSIONS
            .iter()
            .find(|v| v.as_str() == version && v.has_initialize())?;
        let mut info = self.get_info();
        info.protocol_version = version.clone();
        serde_json::to_value(handshake_answer(info)).ok()
    }

    /// A progress sink for one call: `notifications/progress` to the client while `foreground`
    /// holds (the request carried a progress token), and the latest line as the task's status
    /// message when the call runs as `task`.
    fn progress_sink(
        &self,
        context: &RequestContext<RoleServer>,
        task: Option<(Arc<TaskEntry>, Arc<AtomicBool>)>,
    ) -> ProgressSink {
        let token = context.meta.get_progress_token();
        if token.is_none() && task.is_none() {
            return ProgressSink::none();
        }
        let (tx, mut rx) = mpsc::channel::<ProgressUpdate>(PROGRESS_QUEUE);
        let peer = context.peer.clone();
        // Ends when the call drops its sink (the sender).
        tokio::spawn(async move {
            while let Some(u) = rx.recv().await {
                if let (Some((entry, _)), Some(m)) = (&task, &u.message) {
                    entry.set_status_message(m.clone());
                }
                let foreground = task
                    .as_ref()
                    .is_none_or(|(_, detached)| !detached.load(Ordering::Acquire));
                let Some(token) = token.clone().filter(|_| foreground) else {
                    continue;
                };
                let mut p = ProgressNotificationParam::new(token, u.progress);
                if let Some(t) = u.total {
                    p = p.with_total(t);
                }
                if let Some(m) = u.message {
                    p = p.with_message(m);
                }
                if peer.notify_progress(p).await.is_err() && task.is_none() {
                    break;
                }
            }
        });
        ProgressSink::new(tx)
    }

    /// `tools/call` of a [`tasks::TASK_TOOLS`] tool for a client that declared tasks: the result
    /// if the call ends within [`TASK_FOREGROUND_BUDGET`], else a task (module docs). The task's
    /// work is cancelled by `notifications/cancelled` only while it is in the foreground; after
    /// that only by `tasks/cancel` (SEP-2663 §Cancelling Tasks: `notifications/cancelled` MUST
    /// NOT cancel a task).
    async fn call_as_task(
        &self,
        name: String,
        arguments: rmcp::model::JsonObject,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let cancel = CancellationToken::new();
        let entry = TaskEntry::with_owner_class(
            self.principal.clone(),
            self.access.is_owner(),
            cancel.clone(),
        );
        let detached = Arc::new(AtomicBool::new(false));
        let cx = CallContext {
            cancel: cancel.clone(),
            progress: self.progress_sink(&context, Some((entry.clone(), detached.clone()))),
            principal: self.principal.clone(),
            protocol_version: context.protocol_version().map(|v| v.to_string()),
            in_task: true,
        };
        let (tx, mut rx) = oneshot::channel();
        let server = self.clone();
        let work = entry.clone();
        let slot = CallSlot::default();
        let held = slot.clone();
        tokio::spawn(async move {
            let outcome = server.call_in_slot(&name, arguments, cx, held).await;
            work.finish(&outcome);
            let _ = tx.send(outcome);
        });
        tokio::select! {
            outcome = &mut rx => return finished(outcome),
            () = context.ct.cancelled() => {
                // rmcp sends no response to a cancelled request; stop the work.
                cancel.cancel();
                return Ok(error_result(&ToolError::cancelled()).into());
            }
            () = tokio::time::sleep(TASK_FOREGROUND_BUDGET) => {}
        }
        detached.store(true, Ordering::Release);
        match self.access.runtime().tasks().insert(entry.clone()) {
            Ok(()) => {
                // The task is bounded by TASKS_MAX from now on, not by the call slots.
                drop(slot.lock().take());
                Ok(CallToolResponse::Task(CreateTaskResult::new(
                    entry.detailed().task,
                )))
            }
            Err(_) => {
                tracing::info!("the task table is full; the call stays in the foreground");
                finished(rx.await)
            }
        }
    }

    /// The task `id` of this session's principal (SEP-2663: -32602 when unknown or not theirs).
    fn task(&self, id: &str) -> Result<Arc<TaskEntry>, ErrorData> {
        self.access
            .runtime()
            .tasks()
            .get(id, &self.principal)
            .ok_or_else(tasks::not_found)
    }

    /// Runs one tool call to completion and renders its result; the transport-independent core of
    /// `tools/call`.
    ///
    /// # Errors
    /// A JSON-RPC error (-32602) only for an unknown tool; every other failure is an `isError`
    /// result.
    pub async fn call(
        &self,
        name: &str,
        arguments: rmcp::model::JsonObject,
        cx: CallContext,
    ) -> Result<CallToolResult, ErrorData> {
        self.call_in_slot(name, arguments, cx, CallSlot::default())
            .await
    }

    /// [`Self::call`], with the call's slot permit kept in `slot` while the call runs, so that the
    /// caller may release it early (a call that became a task).
    async fn call_in_slot(
        &self,
        name: &str,
        arguments: rmcp::model::JsonObject,
        cx: CallContext,
        slot: CallSlot,
    ) -> Result<CallToolResult, ErrorData> {
        let Some(spec) = tools::find(name) else {
            return Err(ErrorData::invalid_params(
                format!("unknown tool: {name}"),
                None,
            ));
        };
        if !self.access.policy().allows(spec.meta().capability) {
            return Ok(error_result(&ToolError::new(
                ToolErrorCode::PolicyDenied,
                format!(
                    "{name} is not allowed by the {} policy",
                    self.access.policy().name()
                ),
            )));
        }
        let busy = |why: String| Ok(error_result(&ToolError::limit(why).retryable()));
        let rt = self.access.runtime();
        // The owner may use every slot; any other principal gets a share.
        let (principal, others) = if self.access.is_owner() {
            (None, None)
        } else {
            let Some(principal) = rt.principal_call(cx.principal.id()) else {
                return busy(format!(
                    "{CALLS_PER_PRINCIPAL} tool calls of this caller are already running (the per-caller limit); try again when one finishes"
                ));
            };
            let Ok(p) = rt.others_call_slots().clone().try_acquire_owned() else {
                return busy(format!(
                    "{} tool calls of other callers are running and the last {OWNER_RESERVED_CALLS} slots are kept for the owner; try again when one finishes",
                    CONCURRENT_TOOL_CALLS - OWNER_RESERVED_CALLS
                ));
            };
            (Some(principal), Some(p))
        };
        let Ok(permit) = rt.call_slots().clone().try_acquire_owned() else {
            return busy(format!(
                "{CONCURRENT_TOOL_CALLS} tool calls are already running (the server's limit); try again when one finishes"
            ));
        };
        *slot.lock() = Some(CallPermit {
            _slot: permit,
            _others: others,
            _principal: principal,
        });
        let runtime = self.access.runtime().clone();
        runtime.call_started();
        let fut = spec.invoke(self.access.clone(), arguments, cx);
        // Each call runs in its own task so a panic is contained to this call (internal_error).
        let outcome = tokio::spawn(async move {
            let r = fut.await;
            drop(slot.lock().take());
            r
        })
        .await;
        runtime.call_ended();
        Ok(match outcome {
            Ok(reply) => reply_result(reply),
            Err(join) => {
                tracing::error!(tool = name, error = %join, "tool handler panicked");
                error_result(&ToolError::internal(format!("{name} failed unexpectedly")))
            }
        })
    }
}

/// The message of `e` for a JSON-RPC error, cut to [`JSONRPC_ERROR_MESSAGE_MAX_CHARS`] (it may
/// echo a long URI or prompt name).
fn short_message(e: &ToolError) -> String {
    crate::call::text::cut(e.message().to_owned(), JSONRPC_ERROR_MESSAGE_MAX_CHARS, "…")
}

/// The answer to a call whose work ended while the request still waited.
fn finished(
    outcome: Result<Result<CallToolResult, ErrorData>, oneshot::error::RecvError>,
) -> Result<CallToolResponse, ErrorData> {
    match outcome {
        Ok(r) => r.map(Into::into),
        Err(_) => Err(ErrorData::internal_error(
            "the call ended unexpectedly",
            None,
        )),
    }
}

/// Whether a request may be answered with a task: protocol 2026-07-28 or later and the tasks
/// extension in the request's client capabilities (SEP-2663 §Capability Negotiation; the
/// extension is not defined for the handshake era).
fn declares_tasks(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
        && context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks())
}

/// `info` (this server's [`ServerHandler::get_info`] with the negotiated version) as that
/// version's `initialize` answer; for a handshake-era version: without the tasks extension
/// (SEP-2663 defines it for 2026-07-28 only, so a session is never offered what it cannot use;
/// `server/discover` still lists it), and with `tools.listChanged` (module docs: a session
/// never keeps a stale list).
fn handshake_answer(mut info: InitializeResult) -> InitializeResult {
    if !info.protocol_version.has_initialize() {
        return info;
    }
    if let Some(extensions) = info.capabilities.extensions.as_mut() {
        extensions.remove(TASKS_EXTENSION_ID);
        if extensions.is_empty() {
            info.capabilities.extensions = None;
        }
    }
    info.capabilities
        .tools
        .get_or_insert_with(Default::default)
        .list_changed = Some(true);
    info
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .enable_resources()
                .enable_prompts()
                .build(),
        )
        .with_server_info(
            Implementation::new(SERVER_NAME, crate::version())
                .with_title("machine-bridge")
                .with_description("A workspace on this machine: files, search, edits and patches"),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
        .with_instructions(format!(
            "Tools act on the workspace {}. Paths are relative to it{}. Call session_bootstrap \
                 first for the project's instructions and facts, server_info for \
                 the policy and limits.",
            self.access.workspace().root().display(),
            if self.access.workspace().restricted() {
                " and may not leave it"
            } else {
                " (absolute paths are accepted)"
            }
        ))
    }

    /// The handshake (2025-11-25 Lifecycle § Initialization): the version as rmcp negotiates
    /// it, the answer for that version (built as [`McpServer::initialize_value`] builds it).
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        context.peer.set_peer_info(request.clone());
        Ok(handshake_answer(self.negotiate_initialize(&request)?))
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(&SUPPORTED_PROTOCOL_VERSIONS)
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        // rmcp intersects this with what the capabilities advertise: nothing, since the tool
        // list never changes (module docs). The stream is acknowledged and stays open.
        Some(requested.clone())
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        Ok(GetTaskResult::new(self.task(&request.task_id)?.detailed()))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        // No task of this server asks for input; responses for unknown keys are ignored
        // (SEP-2663 §Updating Tasks).
        self.task(&request.task_id).map(drop)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.task(&request.task_id)?.cancel();
        Ok(())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(
            tools::allowed(self.access.policy())
                .map(|t| t.to_tool())
                .collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        tracing::debug!(tool = %name, "tool call");
        if tasks::TASK_TOOLS.contains(&name.as_str())
            && declares_tasks(&context)
            && self
                .access
                .runtime()
                .tasks()
                .has_room(&self.principal, self.access.is_owner())
        {
            return self
                .call_as_task(name, request.arguments.unwrap_or_default(), context)
                .await;
        }
        let cx = CallContext {
            cancel: context.ct.clone(),
            progress: self.progress_sink(&context, None),
            principal: self.principal.clone(),
            protocol_version: context.protocol_version().map(|v| v.to_string()),
            in_task: false,
        };
        let result = self
            .call(&name, request.arguments.unwrap_or_default(), cx)
            .await?;
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let access = self.access.clone();
        let list = tools::blocking::blocking(move || Ok(tools::resource_list(&access)))
            .await
            .unwrap_or_default();
        Ok(ListResourcesResult::with_all_items(
            list.into_iter()
                .map(|r| {
                    let mut res = Resource::new(r.uri, r.name)
                        .with_description(r.description)
                        .with_mime_type(r.mime_type);
                    if let Some(size) = r.size {
                        res = res.with_size(size);
                    }
                    res
                })
                .collect(),
        ))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(
            tools::resource_templates()
                .map(|t| {
                    ResourceTemplate::new(t.uri_template, t.name)
                        .with_description(t.description)
                        .with_mime_type(t.mime_type)
                })
                .collect(),
        ))
    }

    /// `resources/read` of a resource a tool family serves (`machine://context/...`). A URI that
    /// is not one this caller may read is -32002 (MCP 2025-11-25 Resources § Error Handling),
    /// which rmcp turns into -32602 for 2026-07-28 requests.
    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let access = self.access.clone();
        let uri = request.uri.clone();
        let read = tools::blocking::blocking(move || tools::resource_read(&access, &uri))
            .await
            .map_err(|e| ErrorData::resource_not_found(short_message(&e), None))?;
        Ok(ReadResourceResult::new(vec![
            ResourceContents::text(read.text, read.uri).with_mime_type(read.mime_type),
        ])
        .into())
    }

    /// `prompts/list`: what the tool families serve as prompts (each skill of the workspace
    /// root), no arguments.
    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let access = self.access.clone();
        let list = tools::blocking::blocking(move || Ok(tools::prompt_list(&access)))
            .await
            .unwrap_or_default();
        Ok(ListPromptsResult::with_all_items(
            list.into_iter()
                .map(|p| {
                    let mut prompt = Prompt::new(p.name, Some(p.description), None);
                    prompt.title = p.title;
                    prompt
                })
                .collect(),
        ))
    }

    /// `prompts/get` of a prompt (a skill): one user message with its text. An unknown name is
    /// -32602 (MCP 2025-11-25 Prompts § Error Handling).
    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let access = self.access.clone();
        let name = request.name.clone();
        let got = tools::blocking::blocking(move || tools::prompt_get(&access, &name))
            .await
            .map_err(|e| ErrorData::invalid_params(short_message(&e), None))?;
        Ok(
            GetPromptResult::new(vec![PromptMessage::new_text(Role::User, got.text)])
                .with_description(got.description)
                .into(),
        )
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        if KNOWN_METHODS.contains(&request.method.as_str()) {
            return Err(ErrorData::invalid_params(
                format!("invalid params for {}", request.method),
                None,
            ));
        }
        Err(ErrorData::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!("method not found: {}", request.method),
            None,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_handshake_version_has_one_initialize_answer_without_the_tasks_extension() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = Arc::new(
            crate::Runtime::new(crate::RuntimeConfig {
                workspace: dir.path().into(),
                policy: crate::policy::Policy::profile(crate::policy::Profile::Review),
                default_yield_after: None,
                remote: false,
                state_dir: None,
                own_files: Vec::new(),
            })
            .unwrap(),
        );
        let server = McpServer::new(runtime.access(None), Principal::local());
        for version in ["2025-11-25", "2025-06-18", "2025-03-26"] {
            let v = server.initialize_value(version).unwrap();
            assert_eq!(v["protocolVersion"], version);
            assert_eq!(v["capabilities"]["tools"]["listChanged"], true, "{v}");
            assert!(v["capabilities"].get("extensions").is_none(), "{v}");
            assert_eq!(v["serverInfo"]["name"], SERVER_NAME);
        }
        // 2026-07-28 has no handshake; 2024-11-05 is not served.
        assert!(server.initialize_value("2026-07-28").is_none());
        assert!(server.initialize_value("2024-11-05").is_none());
        // The tasks extension stays in what `server/discover` derives from.
        assert!(server.get_info().capabilities.supports_tasks());
    }
}
