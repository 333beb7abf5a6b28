//! The MCP handler: tools, resources, prompts, completion and logging of the conformance fixture.
//!
//! One process serves one session (stdio), so the per-session state (log level, subscriptions)
//! lives in the handler itself.
//!
//! Logging, sampling and `resources/subscribe` are deprecated in rmcp (SEP-2577, protocol
//! 2026-07-28) but are exactly what the 2025-06-18/2025-11-25 scenarios exercise; this module
//! therefore allows `deprecated`. `initialize` negotiates at most 2025-11-25; unless started with
//! `--legacy-only`, the fixture also speaks 2026-07-28 (spec 2026-07-28 server/discover,
//! basic/index "per-request metadata"): `server/discover` is answered, requests with complete
//! `_meta` are served without `initialize`, and `subscriptions/listen` streams
//! (basic/patterns/subscriptions) receive the list-changed notifications of
//! [`fx::TOOL_LIST_CHANGED`].
#![allow(
    deprecated,
    reason = "the conformance scenarios test logging, sampling and resources/subscribe"
)]

use std::{
    borrow::Cow,
    collections::{BTreeMap, BTreeSet},
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams,
        CompleteResult, CompletionInfo, ContentBlock, CreateMessageRequestParams, DiscoverResult,
        ElicitRequestParams, ElicitResult, ElicitationSchema, GetPromptRequestParams,
        GetPromptResponse, GetPromptResult, Implementation, ListPromptsResult,
        ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, LoggingLevel,
        LoggingMessageNotificationParam, PaginatedRequestParams, ProgressNotificationParam,
        PromptMessage, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
        ReadResourceResult, Reference, Resource, ResourceContents, ResourceTemplate,
        ResourceUpdatedNotificationParam, Role, SamplingMessage, SamplingMessageContentBlock,
        ServerCapabilities, ServerConfig, SetLevelRequestParams, SubscribeRequestParams,
        SubscriptionFilter, Tool, UnsubscribeRequestParams,
    },
    service::{Peer, RequestContext, SubscriptionContext, SubscriptionSink},
};
use serde_json::{Map, Value, json};

use crate::fixtures as fx;

/// The newest protocol version `initialize` negotiates: the suite's handshake scenarios are
/// written for 2025-06-18 and 2025-11-25 (2026-07-28 has no `initialize`).
const NEWEST_VERSION: ProtocolVersion = ProtocolVersion::V_2025_11_25;
/// The newest protocol version served through the 2026-07-28 per-request lifecycle (not with
/// `--legacy-only`).
const NEWEST_MODERN_VERSION: ProtocolVersion = ProtocolVersion::V_2026_07_28;

/// The conformance fixture server (one instance per stdio session).
#[derive(Debug, Clone)]
pub(crate) struct ConformanceServer {
    state: Arc<SessionState>,
}

/// Mutable per-session state.
#[derive(Debug)]
struct SessionState {
    /// Lowest level forwarded as `notifications/message` (`logging/setLevel`).
    min_level: Mutex<LoggingLevel>,
    /// URIs the client subscribed to.
    subscriptions: Mutex<BTreeSet<String>>,
    /// Bumped on every simulated change of the watched resource.
    watched_revision: AtomicU64,
    /// Whether the watcher task has been started.
    watcher_started: AtomicBool,
    /// Interval of simulated changes of the watched resource; `None` disables them.
    watch_interval: Option<Duration>,
    /// `--legacy-only`: no `server/discover`, no 2026-07-28 requests.
    legacy_only: bool,
    /// Open `subscriptions/listen` streams, by a local sequence number.
    listeners: Mutex<BTreeMap<u64, SubscriptionSink>>,
    /// Next key of [`Self::listeners`].
    next_listener: AtomicU64,
    /// Streams accepted by `accepted_subscription_filter` whose `listen` has not registered yet.
    unregistered_listeners: AtomicU64,
}

impl ConformanceServer {
    /// A fresh session; `watch_interval` paces `notifications/resources/updated` for a
    /// subscribed `test://watched-resource` (`None`: never sent); `legacy_only` turns the
    /// 2026-07-28 era off (`server/discover` is then -32601, as from an old server).
    pub(crate) fn new(watch_interval: Option<Duration>, legacy_only: bool) -> Self {
        Self {
            state: Arc::new(SessionState {
                min_level: Mutex::new(LoggingLevel::Debug),
                subscriptions: Mutex::new(BTreeSet::new()),
                watched_revision: AtomicU64::new(0),
                watcher_started: AtomicBool::new(false),
                watch_interval,
                legacy_only,
                listeners: Mutex::new(BTreeMap::new()),
                next_listener: AtomicU64::new(0),
                unregistered_listeners: AtomicU64::new(0),
            }),
        }
    }
}

// ----- helpers -----

/// Numeric severity of an MCP log level (RFC 5424 order, `debug` lowest).
fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// A tool result with `isError: true` and one text block.
fn tool_error(text: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

/// A tool result with one text block.
fn tool_text(text: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}

/// A text resource's contents with an explicit MIME type.
fn text_contents(uri: &str, mime: &str, text: impl Into<String>) -> ResourceContents {
    ResourceContents::text(text, uri).with_mime_type(mime)
}

/// Waits `ms` milliseconds, or returns an error as soon as the request is cancelled
/// (rmcp drops the response of a cancelled request anyway).
async fn pause(context: &RequestContext<RoleServer>, ms: u64) -> Result<(), ErrorData> {
    tokio::select! {
        () = context.ct.cancelled() => Err(ErrorData::internal_error("request cancelled", None)),
        () = tokio::time::sleep(Duration::from_millis(ms)) => Ok(()),
    }
}

/// The string argument `name`, or `None` if absent or not a string.
fn string_arg<'a>(args: &'a Map<String, Value>, name: &str) -> Option<&'a str> {
    args.get(name).and_then(Value::as_str)
}

/// Renders an elicitation outcome as `action=<action>, content=<json>`.
fn describe_elicitation(result: &ElicitResult) -> String {
    let action = serde_json::to_value(&result.action)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{:?}", result.action));
    let content = result.content.clone().unwrap_or_else(|| json!({}));
    format!("action={action}, content={content}")
}

/// Whether the client declared `capability` (`sampling` or `elicitation`) at initialize.
fn client_declared(context: &RequestContext<RoleServer>, capability: &str) -> bool {
    context
        .peer
        .peer_info()
        .is_some_and(|info| match capability {
            "sampling" => info.capabilities.sampling.is_some(),
            "elicitation" => info.capabilities.elicitation.is_some(),
            _ => false,
        })
}

// ----- tool implementations -----

impl ConformanceServer {
    /// Sends `notifications/message` if `level` passes the session's `logging/setLevel` filter.
    async fn log(&self, peer: &Peer<RoleServer>, level: LoggingLevel, message: &str) {
        let min = *self
            .state
            .min_level
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if severity(level) < severity(min) {
            return;
        }
        let param =
            LoggingMessageNotificationParam::new(level, json!(message)).with_logger(fx::LOGGER);
        if let Err(e) = peer.notify_logging_message(param).await {
            tracing::warn!(error = %e, "could not send a log notification");
        }
    }

    async fn tool_with_logging(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        for (i, line) in fx::LOG_LINES.iter().enumerate() {
            if i > 0 {
                pause(context, fx::STEP_DELAY_MS).await?;
            }
            self.log(&context.peer, LoggingLevel::Info, line).await;
        }
        Ok(tool_text("Tool with logging executed successfully"))
    }

    async fn tool_with_progress(
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let token = context.meta.get_progress_token();
        for (i, step) in fx::PROGRESS_STEPS.iter().copied().enumerate() {
            if i > 0 {
                pause(context, fx::STEP_DELAY_MS).await?;
            }
            if let Some(token) = &token {
                let param = ProgressNotificationParam::new(token.clone(), step)
                    .with_total(fx::PROGRESS_TOTAL)
                    .with_message(format!("Completed step {step} of {}", fx::PROGRESS_TOTAL));
                if let Err(e) = context.peer.notify_progress(param).await {
                    tracing::warn!(error = %e, "could not send a progress notification");
                }
            }
        }
        let token = token.map_or_else(|| "none".to_owned(), |t| format!("{}", json!(t.0)));
        Ok(tool_text(format!(
            "Progress tool completed (progressToken: {token})"
        )))
    }

    async fn tool_sampling(
        args: &Map<String, Value>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let Some(prompt) = string_arg(args, "prompt") else {
            return tool_error("missing required string argument 'prompt'");
        };
        if !client_declared(context, "sampling") {
            return tool_error("the client did not declare the sampling capability");
        }
        let params = CreateMessageRequestParams::new(
            vec![SamplingMessage::user_text(prompt)],
            fx::SAMPLING_MAX_TOKENS,
        );
        match context.peer.create_message(params).await {
            Ok(result) => {
                let text = result
                    .message
                    .content
                    .into_vec()
                    .into_iter()
                    .find_map(|block| match block {
                        SamplingMessageContentBlock::Text(t) => Some(t.text),
                        _ => None,
                    })
                    .unwrap_or_else(|| "(no text content)".to_owned());
                tool_text(format!("LLM response: {text}"))
            }
            Err(e) => tool_error(format!("sampling/createMessage failed: {e}")),
        }
    }

    async fn elicit(
        context: &RequestContext<RoleServer>,
        message: &str,
        schema: Map<String, Value>,
    ) -> Result<ElicitResult, String> {
        if !client_declared(context, "elicitation") {
            return Err("the client did not declare the elicitation capability".to_owned());
        }
        let requested_schema = ElicitationSchema::from_json_schema(schema)
            .map_err(|e| format!("fixture schema rejected by rmcp: {e}"))?;
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: message.to_owned(),
            requested_schema,
        };
        context
            .peer
            .create_elicitation(params)
            .await
            .map_err(|e| format!("elicitation/create failed: {e}"))
    }

    async fn tool_elicitation(
        args: &Map<String, Value>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let Some(message) = string_arg(args, "message") else {
            return tool_error("missing required string argument 'message'");
        };
        match Self::elicit(context, message, fx::elicitation_requested_schema()).await {
            Ok(result) => tool_text(format!("User response: {}", describe_elicitation(&result))),
            Err(e) => tool_error(e),
        }
    }

    async fn tool_elicitation_schema(
        context: &RequestContext<RoleServer>,
        message: &str,
        schema: Map<String, Value>,
    ) -> CallToolResult {
        match Self::elicit(context, message, schema).await {
            Ok(result) => tool_text(format!(
                "Elicitation completed: {}",
                describe_elicitation(&result)
            )),
            Err(e) => tool_error(e),
        }
    }

    async fn tool_reconnection(
        args: &Map<String, Value>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let delay = match args.get("delayMs") {
            None => fx::RECONNECTION_DELAY_MS,
            Some(v) => match v.as_u64() {
                Some(ms) if ms <= fx::RECONNECTION_DELAY_MAX_MS => ms,
                _ => {
                    return Ok(tool_error(format!(
                        "delayMs must be an integer from 0 to {}",
                        fx::RECONNECTION_DELAY_MAX_MS
                    )));
                }
            },
        };
        pause(context, delay).await?;
        Ok(tool_text(
            "Reconnection test completed successfully. If you received this, the client properly \
             reconnected after stream closure.",
        ))
    }

    /// Starts (once per session) the task that simulates changes of the watched resource.
    /// [`fx::TOOL_LIST_CHANGED`]: `notifications/tools/list_changed` to the legacy session (if
    /// this request belongs to one) and to every open `subscriptions/listen` stream that
    /// accepted it; reports where it went.
    async fn tool_list_changed(&self, context: &RequestContext<RoleServer>) -> CallToolResult {
        let legacy = context.peer.peer_info().is_some();
        // a stream acknowledged just now may not be registered yet: give it a moment
        let settle = tokio::time::Instant::now() + Duration::from_millis(fx::LISTEN_SETTLE_MS);
        while self.state.unregistered_listeners.load(Ordering::Acquire) > 0
            && tokio::time::Instant::now() < settle
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if legacy && let Err(e) = context.peer.notify_tool_list_changed().await {
            return tool_error(format!("notifications/tools/list_changed not sent: {e}"));
        }
        let sinks: Vec<SubscriptionSink> = self
            .state
            .listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        let mut listeners = 0_usize;
        for sink in sinks {
            match sink.notify_tool_list_changed().await {
                Ok(()) => listeners += 1,
                Err(e) => tracing::info!(error = %e, "listener skipped"),
            }
        }
        tool_text(format!(
            "notifications/tools/list_changed sent (initialize session: {legacy}, listeners: {listeners})"
        ))
    }

    fn start_watcher(&self, peer: Peer<RoleServer>) {
        let Some(interval) = self.state.watch_interval else {
            return;
        };
        if self.state.watcher_started.swap(true, Ordering::SeqCst) {
            return;
        }
        let state = Arc::clone(&self.state);
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticker.tick().await; // the first tick is immediate
            loop {
                ticker.tick().await;
                if peer.is_transport_closed() {
                    break;
                }
                let subscribed = state
                    .subscriptions
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .contains(fx::RES_WATCHED);
                if !subscribed {
                    continue;
                }
                state.watched_revision.fetch_add(1, Ordering::SeqCst);
                let param = ResourceUpdatedNotificationParam::new(fx::RES_WATCHED);
                if let Err(e) = peer.notify_resource_updated(param).await {
                    tracing::debug!(error = %e, "watcher stops: the session is gone");
                    break;
                }
            }
        });
    }

    /// Whether `uri` names a resource this server can read.
    fn is_known_resource(uri: &str) -> bool {
        matches!(
            uri,
            fx::RES_STATIC_TEXT | fx::RES_STATIC_BINARY | fx::RES_WATCHED
        ) || fx::template_id(uri).is_some()
    }
}

// ----- the handler -----

impl ServerHandler for ConformanceServer {
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder()
            .enable_logging()
            .enable_completions()
            .enable_prompts()
            .enable_resources()
            .enable_tools()
            .build();
        if let Some(tools) = capabilities.tools.as_mut() {
            tools.list_changed = Some(true);
        }
        if let Some(prompts) = capabilities.prompts.as_mut() {
            prompts.list_changed = Some(true);
        }
        if let Some(resources) = capabilities.resources.as_mut() {
            resources.subscribe = Some(true);
            resources.list_changed = Some(true);
        }
        ServerConfig::new(capabilities)
            .with_protocol_version(NEWEST_VERSION)
            .with_server_info(
                Implementation::new(fx::SERVER_NAME, env!("CARGO_PKG_VERSION"))
                    .with_title("MCP conformance fixture")
                    .with_description(
                        "Offers the tools, resources and prompts of the MCP conformance suite's \
                         server scenarios",
                    ),
            )
            .with_instructions(
                "Test fixture for the MCP conformance suite: every tool, resource and prompt \
                 exists only to be checked by a scenario.",
            )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        if self.state.legacy_only {
            Cow::Borrowed(ProtocolVersion::known_up_to(&NEWEST_VERSION))
        } else {
            Cow::Borrowed(ProtocolVersion::known_up_to(&NEWEST_MODERN_VERSION))
        }
    }

    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, ErrorData> {
        if self.state.legacy_only {
            // As an old server: -32601, so a client falls back to `initialize`.
            return Err(ErrorData::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                "server/discover",
                None,
            ));
        }
        // Spec 2026-07-28 server/discover: versions, capabilities, server info, instructions.
        Ok(DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            self.get_info(),
        ))
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        // The list-changed categories only (resource updates stay legacy `resources/subscribe`);
        // rmcp intersects this with the request and the advertised capabilities.
        (!self.state.legacy_only).then(|| {
            self.state
                .unregistered_listeners
                .fetch_add(1, Ordering::AcqRel);
            let mut accepted = SubscriptionFilter::new();
            accepted.tools_list_changed = requested.tools_list_changed;
            accepted.prompts_list_changed = requested.prompts_list_changed;
            accepted.resources_list_changed = requested.resources_list_changed;
            accepted
        })
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let key = self.state.next_listener.fetch_add(1, Ordering::Relaxed);
        self.state
            .listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, context.sink().clone());
        // saturating: rmcp calls accepted_subscription_filter first, but never wrap if not
        let _ = self.state.unregistered_listeners.fetch_update(
            Ordering::AcqRel,
            Ordering::Acquire,
            |n| Some(n.saturating_sub(1)),
        );
        context.cancelled().await;
        self.state
            .listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&key);
        Ok(())
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        *self
            .state
            .min_level
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = request.level;
        tracing::info!(level = ?request.level, "log level set");
        Ok(())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let argument = request.argument.name.as_str();
        let candidates: &[&str] = match &request.r#ref {
            Reference::Prompt(prompt) => match (prompt.name.as_str(), argument) {
                (fx::PROMPT_WITH_ARGS, "arg1" | "arg2") => fx::ARG_CANDIDATES,
                (fx::PROMPT_EMBEDDED, "resourceUri") => fx::URI_CANDIDATES,
                (
                    fx::PROMPT_SIMPLE
                    | fx::PROMPT_WITH_ARGS
                    | fx::PROMPT_EMBEDDED
                    | fx::PROMPT_IMAGE,
                    _,
                ) => &[],
                (name, _) => {
                    return Err(ErrorData::invalid_params(
                        format!("unknown prompt: {name}"),
                        None,
                    ));
                }
            },
            Reference::Resource(resource) if resource.uri == fx::RES_TEMPLATE => {
                if argument == "id" {
                    fx::ID_CANDIDATES
                } else {
                    &[]
                }
            }
            Reference::Resource(resource) => {
                return Err(ErrorData::invalid_params(
                    format!("unknown resource template: {}", resource.uri),
                    None,
                ));
            }
            _ => &[],
        };
        let prefix = request.argument.value.as_str();
        let values = candidates
            .iter()
            .filter(|c| c.starts_with(prefix))
            .map(|c| (*c).to_owned())
            .collect();
        let completion = CompletionInfo::with_all_values(values)
            .map_err(|e| ErrorData::internal_error(e, None))?;
        Ok(CompleteResult::new(completion))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools().into_iter().find(|t| t.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let result = match request.name.as_ref() {
            fx::TOOL_SIMPLE_TEXT => tool_text(fx::SIMPLE_TEXT),
            fx::TOOL_IMAGE => {
                CallToolResult::success(vec![ContentBlock::image(fx::PNG_BASE64, "image/png")])
            }
            fx::TOOL_AUDIO => {
                CallToolResult::success(vec![ContentBlock::audio(fx::WAV_BASE64, "audio/wav")])
            }
            fx::TOOL_EMBEDDED_RESOURCE => CallToolResult::success(vec![ContentBlock::resource(
                text_contents(fx::RES_EMBEDDED, "text/plain", fx::EMBEDDED_TEXT),
            )]),
            fx::TOOL_MULTIPLE_CONTENT => CallToolResult::success(vec![
                ContentBlock::text("Multiple content types test:"),
                ContentBlock::image(fx::PNG_BASE64, "image/png"),
                ContentBlock::resource(text_contents(
                    fx::RES_MIXED,
                    "application/json",
                    json!({ "test": "data", "value": 123 }).to_string(),
                )),
            ]),
            fx::TOOL_LOGGING => self.tool_with_logging(&context).await?,
            fx::TOOL_ERROR => tool_error(fx::ERROR_TEXT),
            fx::TOOL_PROGRESS => Self::tool_with_progress(&context).await?,
            fx::TOOL_SAMPLING => Self::tool_sampling(&args, &context).await,
            fx::TOOL_ELICITATION => Self::tool_elicitation(&args, &context).await,
            fx::TOOL_ELICITATION_DEFAULTS => {
                Self::tool_elicitation_schema(
                    &context,
                    "Please review and update the form fields with defaults",
                    fx::elicitation_defaults_schema(),
                )
                .await
            }
            fx::TOOL_ELICITATION_ENUMS => {
                Self::tool_elicitation_schema(
                    &context,
                    "Please select options from the enum fields",
                    fx::elicitation_enums_schema(),
                )
                .await
            }
            fx::TOOL_JSON_SCHEMA_2020_12 => tool_text(format!(
                "JSON Schema 2020-12 tool called with: {}",
                Value::Object(args)
            )),
            fx::TOOL_RECONNECTION => Self::tool_reconnection(&args, &context).await?,
            fx::TOOL_LIST_CHANGED => self.tool_list_changed(&context).await,
            other => {
                return Err(ErrorData::invalid_params(
                    format!("unknown tool: {other}"),
                    None,
                ));
            }
        };
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(vec![
            Resource::new(fx::RES_STATIC_TEXT, "static-text")
                .with_title("Static Text Resource")
                .with_description("A static text resource for testing")
                .with_mime_type("text/plain"),
            Resource::new(fx::RES_STATIC_BINARY, "static-binary")
                .with_title("Static Binary Resource")
                .with_description("A static binary resource (a PNG image) for testing")
                .with_mime_type("image/png"),
            Resource::new(fx::RES_WATCHED, "watched-resource")
                .with_title("Watched Resource")
                .with_description(
                    "A resource that changes periodically while subscribed \
                     (notifications/resources/updated)",
                )
                .with_mime_type("text/plain"),
        ]))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new(fx::RES_TEMPLATE, "template")
                .with_title("Resource Template")
                .with_description("A resource template with parameter substitution")
                .with_mime_type("application/json"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri.as_str();
        let contents = match uri {
            fx::RES_STATIC_TEXT => text_contents(uri, "text/plain", fx::STATIC_TEXT),
            fx::RES_STATIC_BINARY => {
                ResourceContents::blob(fx::PNG_BASE64, uri).with_mime_type("image/png")
            }
            fx::RES_WATCHED => {
                let revision = self.state.watched_revision.load(Ordering::SeqCst);
                text_contents(
                    uri,
                    "text/plain",
                    format!("Watched resource content (revision {revision})"),
                )
            }
            _ => match fx::template_id(uri) {
                Some(id) => text_contents(uri, "application/json", fx::template_body(id)),
                None => {
                    return Err(ErrorData::resource_not_found(
                        format!("resource not found: {uri}"),
                        Some(json!({ "uri": uri })),
                    ));
                }
            },
        };
        Ok(ReadResourceResult::new(vec![contents]).into())
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if !Self::is_known_resource(&request.uri) {
            return Err(ErrorData::resource_not_found(
                format!("resource not found: {}", request.uri),
                Some(json!({ "uri": request.uri })),
            ));
        }
        self.state
            .subscriptions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(request.uri);
        self.start_watcher(context.peer.clone());
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.state
            .subscriptions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&request.uri);
        Ok(())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::with_all_items(prompts()))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let args = request.arguments.as_ref();
        let messages = match request.name.as_str() {
            fx::PROMPT_SIMPLE => vec![PromptMessage::new_text(Role::User, fx::PROMPT_SIMPLE_TEXT)],
            fx::PROMPT_WITH_ARGS => {
                let arg1 = prompt_arg(args, "arg1")?;
                let arg2 = prompt_arg(args, "arg2")?;
                vec![PromptMessage::new_text(
                    Role::User,
                    format!("Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"),
                )]
            }
            fx::PROMPT_EMBEDDED => {
                let uri = prompt_arg(args, "resourceUri")?;
                vec![
                    PromptMessage::new(
                        Role::User,
                        ContentBlock::resource(text_contents(
                            uri,
                            "text/plain",
                            fx::PROMPT_EMBEDDED_TEXT,
                        )),
                    ),
                    PromptMessage::new_text(Role::User, fx::PROMPT_EMBEDDED_FOLLOWUP),
                ]
            }
            fx::PROMPT_IMAGE => vec![
                PromptMessage::new(Role::User, ContentBlock::image(fx::PNG_BASE64, "image/png")),
                PromptMessage::new_text(Role::User, fx::PROMPT_IMAGE_FOLLOWUP),
            ],
            other => {
                return Err(ErrorData::invalid_params(
                    format!("unknown prompt: {other}"),
                    None,
                ));
            }
        };
        Ok(GetPromptResult::new(messages).into())
    }
}

mod catalog;
#[cfg(test)]
mod tests;

use catalog::{prompt_arg, prompts, tools};
