//! [`McpServer`]: the one MCP server type every transport serves (rmcp `ServerHandler`).
//!
//! Protocol rules it implements (MCP 2025-11-25 unless noted):
//! - Versions `2025-11-25`, `2025-06-18`, `2025-03-26` are negotiated at `initialize`: the client's
//!   version when supported, else the newest (Lifecycle §Version Negotiation).
//! - `server/discover` (the 2026-07-28 probe) gets a JSON-RPC error so clients fall back to
//!   `initialize`: this server does not serve the stateless revision.
//! - `tools/list` returns what the effective policy allows; `tools/call` on an unknown tool is a
//!   JSON-RPC error (-32602), a disallowed one a `policy_denied` tool error, bad arguments an
//!   `invalid_request` tool error (Tools §Error Handling).
//! - At most [`CONCURRENT_TOOL_CALLS`] calls run at once; one more gets `limit_exceeded` at once.
//! - A call whose request carries a progress token gets `notifications/progress` from its handler.
//! - `notifications/cancelled` fires the call's cancellation token; rmcp then drops its response.

use std::{borrow::Cow, sync::Arc};

use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, CustomRequest,
        CustomResult, DiscoverResult, ErrorCode, Implementation, ListToolsResult,
        PaginatedRequestParams, ProgressNotificationParam, ProtocolVersion, ServerCapabilities,
        ServerConfig,
    },
    service::RequestContext,
};
use tokio::sync::mpsc;

use protocol::limits::CONCURRENT_TOOL_CALLS;

use crate::{
    Access, SERVER_NAME, VERSION,
    catalog::{self, Reply},
    context::{CallContext, Principal, ProgressSink, ProgressUpdate},
    error::{ToolError, ToolErrorCode},
};

/// Protocol versions served, oldest first.
pub const SUPPORTED_PROTOCOL_VERSIONS: [ProtocolVersion; 3] = [
    ProtocolVersion::V_2025_03_26,
    ProtocolVersion::V_2025_06_18,
    ProtocolVersion::V_2025_11_25,
];

/// Queued progress reports per call; more are dropped (progress is advisory).
const PROGRESS_QUEUE: usize = 16;

/// Methods this server knows; a request for one of them whose params do not parse is answered
/// with -32602 instead of -32601.
const KNOWN_METHODS: &[&str] = &["initialize", "ping", "tools/list", "tools/call"];

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
        let Some(spec) = catalog::find(name) else {
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
        let Ok(permit) = self
            .access
            .runtime()
            .call_slots()
            .clone()
            .try_acquire_owned()
        else {
            return Ok(error_result(
                &ToolError::limit(format!(
                    "{CONCURRENT_TOOL_CALLS} tool calls are already running; try again when one finishes"
                ))
                .retryable(),
            ));
        };
        let runtime = self.access.runtime().clone();
        runtime.call_started();
        let fut = spec.invoke(self.access.clone(), arguments, cx);
        // Each call runs in its own task so a panic is contained to this call (internal_error).
        let outcome = tokio::spawn(async move {
            let r = fut.await;
            drop(permit);
            r
        })
        .await;
        runtime.call_ended();
        Ok(match outcome {
            Ok(Ok(Reply::Structured(value))) => structured_result(value),
            Ok(Ok(Reply::Content(blocks))) => CallToolResult::success(blocks),
            Ok(Err(e)) => error_result(&e),
            Err(join) => {
                tracing::error!(tool = name, error = %join, "tool handler panicked");
                error_result(&ToolError::internal(format!("{name} failed unexpectedly")))
            }
        })
    }
}

/// A successful structured result: `structuredContent` plus its serialized JSON as the one text
/// block, which MCP 2025-11-25 (Server Features › Tools › Structured Content) says a server SHOULD
/// send for clients without structured content support. Like rmcp's `CallToolResult::structured`,
/// but the mirror is written by [`crate::json`] (a `read_process` result carries up to 2 MiB of
/// output, and serializing it was most of the call's cost).
pub(crate) fn structured_result(value: serde_json::Value) -> CallToolResult {
    let mirror = crate::json::to_string(&value).unwrap_or_else(|e| {
        // Unreachable for a `Value` (its keys are strings); the mirror is a courtesy, not the data.
        tracing::error!(error = %e, "could not mirror a structured result as text");
        String::new()
    });
    let mut result = CallToolResult::success(vec![ContentBlock::text(mirror)]);
    result.structured_content = Some(value);
    result
}

/// Renders a [`ToolError`] as an `isError: true` result (no `structuredContent`).
pub fn error_result(e: &ToolError) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(e.to_json().to_string())])
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new(SERVER_NAME, VERSION)
                    .with_title("machine-bridge")
                    .with_description(
                        "A workspace on this machine: files, search, edits and patches",
                    ),
            )
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
            .with_instructions(format!(
                "Tools act on the workspace {}. Paths are relative to it{}. Call server_info for \
                 the policy and limits.",
                self.access.workspace().root().display(),
                if self.access.workspace().restricted() {
                    " and may not leave it"
                } else {
                    " (absolute paths are accepted)"
                }
            ))
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(&SUPPORTED_PROTOCOL_VERSIONS)
    }

    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, ErrorData> {
        Err(ErrorData::new(
            ErrorCode::METHOD_NOT_FOUND,
            "server/discover is not supported: use initialize",
            None,
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(
            catalog::allowed(self.access.policy())
                .map(|t| t.to_tool())
                .collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let progress = match context.meta.get_progress_token() {
            Some(token) => {
                let (tx, mut rx) = mpsc::channel::<ProgressUpdate>(PROGRESS_QUEUE);
                let peer = context.peer.clone();
                // Ends when the call drops its sink (the sender).
                tokio::spawn(async move {
                    while let Some(u) = rx.recv().await {
                        let mut p = ProgressNotificationParam::new(token.clone(), u.progress);
                        if let Some(t) = u.total {
                            p = p.with_total(t);
                        }
                        if let Some(m) = u.message {
                            p = p.with_message(m);
                        }
                        if peer.notify_progress(p).await.is_err() {
                            break;
                        }
                    }
                });
                ProgressSink::new(tx)
            }
            None => ProgressSink::none(),
        };
        let cx = CallContext {
            cancel: context.ct.clone(),
            progress,
            principal: self.principal.clone(),
            protocol_version: context.protocol_version().map(|v| v.to_string()),
        };
        let name = request.name.to_string();
        tracing::debug!(tool = %name, "tool call");
        let result = self
            .call(&name, request.arguments.unwrap_or_default(), cx)
            .await?;
        Ok(result.into())
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
