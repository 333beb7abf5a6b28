//! MCP 2026-07-28 on the relay's MCP endpoints (`/b/{bridge}/mcp`, `/b/{bridge}/s/{server}/mcp`):
//! requests served without an MCP session, next to the session era of [`crate::mcp`] on the same
//! URLs, the era decided per request (MCP 2026-07-28 Basic › Versioning § Backward Compatibility
//! with Initialization-Based Versions: "a request carrying modern per-request `_meta` is served
//! statelessly"; "an `initialize` request selects legacy semantics").
//!
//! A modern request passes the same Host, Origin, credential and bridge checks as any other
//! (`crate::mcp`'s), then:
//! 0. a method 2026-07-28 removed (`initialize`, `ping`, `logging/setLevel`; changelog, SEP-2575)
//!    → 404 with `-32601` and the request's id ([`removed_method`]; Streamable HTTP § Protocol
//!    Version Header);
//! 1. its per-request `_meta` (Basic § `_meta`, Per-request protocol fields): a missing
//!    `io.modelcontextprotocol/protocolVersion` or `io.modelcontextprotocol/clientCapabilities` →
//!    400 with `-32602`; a version the relay does not serve → 400 with `-32022`
//!    (`UnsupportedProtocolVersionError`, `data.supported` lists what the endpoint's
//!    `server/discover` reports, [`endpoint_versions`]);
//! 2. its headers (Basic › Transports › Streamable HTTP § Request Metadata, § Server Validation):
//!    `MCP-Protocol-Version` must be present and equal the `_meta` version, `Mcp-Method` must equal
//!    the body's method, `Mcp-Name` must equal `params.name` (`tools/call`, `prompts/get`) or
//!    `params.uri` (`resources/read`) after Base64-sentinel decoding, or `params.taskId`
//!    (`tasks/get`, `tasks/update`, `tasks/cancel`; SEP-2663 § Streamable HTTP: Routing Headers),
//!    and the `Mcp-Param-*` headers of a `tools/call` must match the
//!    arguments its tool's `x-mcp-header` annotations name → otherwise 400 with `-32020`
//!    (`HeaderMismatch`);
//! 3. a stray `MCP-Session-Id` is ignored and none is issued (§ Backward Compatibility).
//!
//! It then goes to the bridge's daemon as one `call` frame (link revision 2,
//! `docs/relay-protocol.md`) and is answered on its own POST: as one JSON body when the response
//! arrives within [`STATELESS_RESPONSE_HOLD`] with nothing before it (its HTTP status from its
//! error code: 400 for `-32020`/`-32021`/`-32022`, 404 for `-32601`), else as an SSE stream of
//! the related notifications and the response, without event ids (streams are not resumable in
//! 2026-07-28). Closing that stream (or dropping a JSON request) cancels the request (§
//! Cancellation; Basic › Patterns › Cancellation § Transport-Specific Cancellation): the daemon
//! gets `notifications/cancelled` and `close`. A daemon that is offline (after the offline wait)
//! or older than link revision 2 gets `server/discover` and `tools/list` answered from the
//! catalog it announced, everything else a clear error.

use std::{sync::Arc, time::Duration};

use axum::{
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
};
use base64::{Engine, engine::general_purpose::STANDARD};
use serde_json::{Value, json};

use protocol::{
    error_code::ToolErrorCode,
    jsonrpc::{
        self, Kind,
        code::{
            HEADER_MISMATCH, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND,
            MISSING_REQUIRED_CLIENT_CAPABILITY, UNAVAILABLE, UNSUPPORTED_PROTOCOL_VERSION,
        },
    },
    limits::STATELESS_RESPONSE_HOLD,
    mcp::{
        ALL_VERSIONS, META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_PROTOCOL_VERSION,
        META_SERVER_INFO, SUBSCRIPTIONS_LISTEN, is_modern, is_session_era,
    },
    tool_error::ToolError,
};

use crate::{
    auth::BridgePrincipal,
    config::RelayTiming,
    error::HttpError,
    hub::{BridgeRef, CachedServer, ParamHeader, Reply, Route, Router, SendError, SessionRef},
    stream::SseStream,
    streamable::{
        SESSION_HEADER, VERSION_HEADER, accepts_json,
        sse::{self, Framing},
        wants_sse,
    },
};

/// Header mirroring the JSON-RPC method (§ Standard Request Headers).
pub(crate) const METHOD_HEADER: &str = "mcp-method";
/// Header mirroring `params.name` / `params.uri` (§ Standard Request Headers).
pub(crate) const NAME_HEADER: &str = "mcp-name";
/// Prefix of the headers mirroring annotated tool arguments (§ Custom Headers from Tool
/// Parameters).
pub(crate) const PARAM_HEADER_PREFIX: &str = "mcp-param-";

/// `ttlMs` of answers made from the cached catalog while the daemon is away: a snapshot of
/// unknown age, so immediately stale (Server › Utilities › Caching § Time-to-Live).
pub(crate) const CATALOG_TTL_MS: u64 = 0;

/// The error of a 2026-07-28 request the daemon cannot serve because it predates link revision 2.
pub(crate) const TOO_OLD: &str = "the daemon for this bridge is too old for MCP 2026-07-28; upgrade machine-mcp there, or use a client in 2025-11-25 mode";

/// Which era serves a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Era {
    /// `initialize` and MCP sessions (2025-11-25, 2025-06-18, 2025-03-26).
    Legacy,
    /// Per-request metadata, no session (2026-07-28).
    Modern,
}

/// The era of one POSTed message (MCP 2026-07-28 Basic › Versioning § Backward Compatibility):
/// `initialize` is legacy unless its `MCP-Protocol-Version` header or its `_meta` protocol
/// version names a 2026-07-28 version (then it is a modern request for a method that era does
/// not have, answered by [`removed_method`]); `server/discover` is modern; so is a message whose
/// `_meta` names a protocol version (unless it names a legacy version inside a session) or whose
/// `MCP-Protocol-Version` header names a version that is not a legacy one (an unknown one is then
/// refused with the modern `UnsupportedProtocolVersionError`). Everything else — session traffic,
/// notifications and responses of legacy clients — is legacy.
pub(crate) fn era(headers: &HeaderMap, message: &Value) -> Era {
    let method = message.get("method").and_then(Value::as_str);
    match method {
        Some("initialize") => {
            return if names_modern(headers, message) {
                Era::Modern
            } else {
                Era::Legacy
            };
        }
        Some("server/discover") => return Era::Modern,
        _ => {}
    }
    if let Some(v) = message
        .get("params")
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(META_PROTOCOL_VERSION))
    {
        let legacy = v.as_str().is_some_and(is_session_era);
        if !legacy || !headers.contains_key(SESSION_HEADER) {
            return Era::Modern;
        }
    }
    match headers.get(VERSION_HEADER) {
        Some(h) => match h.to_str() {
            Ok(v) if is_session_era(v) => Era::Legacy,
            _ => Era::Modern,
        },
        None => Era::Legacy,
    }
}

/// Methods of the handshake era that MCP 2026-07-28 removed (changelog items 2 and 5, SEP-2575),
/// with what a client does instead.
pub(crate) const REMOVED_METHODS: [(&str, &str); 3] = [
    (
        "initialize",
        "use server/discover, or send initialize without the 2026-07-28 header for the 2025-11-25 era",
    ),
    (
        "ping",
        "any request shows the server is reachable (server/discover is the cheapest)",
    ),
    (
        "logging/setLevel",
        "set _meta[\"io.modelcontextprotocol/logLevel\"] on each request instead",
    ),
];

/// The refusal of a 2026-07-28 request for a method that era does not have ([`REMOVED_METHODS`]):
/// HTTP 404 with JSON-RPC `-32601` (Method not found) and the request's `id` (MCP 2026-07-28
/// Basic › Transports › Streamable HTTP § Protocol Version Header: "If the server does not
/// implement the requested RPC method, it MUST respond with `404 Not Found` and a JSON-RPC error
/// with code `-32601`"). `None` for any other method.
pub(crate) fn removed_method(method: &str, id: &Value) -> Option<HttpError> {
    let (_, instead) = REMOVED_METHODS.iter().find(|(m, _)| *m == method)?;
    Some(HttpError::rpc(
        StatusCode::NOT_FOUND,
        id.clone(),
        METHOD_NOT_FOUND,
        format!("{method} is not part of MCP 2026-07-28; {instead}"),
    ))
}

/// The protocol versions an endpoint serves, as its `server/discover` reports them
/// (`supportedVersions` of the cached catalog's discover result, [`cached_discover`]): what its
/// `UnsupportedProtocolVersionError` lists. [`ALL_VERSIONS`] when the bridge has no catalog entry
/// for the server, or the entry names no versions.
pub(crate) fn endpoint_versions(info: Option<&CachedServer>) -> Vec<String> {
    let listed: Vec<String> = info
        .map(cached_discover)
        .and_then(|d| d.get("supportedVersions").cloned())
        .and_then(|v| serde_json::from_value::<Vec<String>>(v).ok())
        .unwrap_or_default();
    if listed.is_empty() {
        ALL_VERSIONS.iter().map(|v| (*v).to_owned()).collect()
    } else {
        listed
    }
}

/// Whether a message names a 2026-07-28 version ([`protocol::mcp::MODERN_VERSIONS`]) in its
/// `MCP-Protocol-Version` header or its `_meta` protocol version.
fn names_modern(headers: &HeaderMap, message: &Value) -> bool {
    let modern = |v: Option<&str>| v.is_some_and(is_modern);
    modern(headers.get(VERSION_HEADER).and_then(|h| h.to_str().ok()))
        || modern(
            message
                .pointer("/params/_meta")
                .and_then(|m| m.get(META_PROTOCOL_VERSION))
                .and_then(Value::as_str),
        )
}

/// The sole value of header `name`: `Ok(None)` when absent; an error when repeated (these
/// headers are singletons: an intermediary could route on the other copy) or not visible ASCII.
fn single_header<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, String> {
    let mut all = headers.get_all(name).iter();
    let Some(first) = all.next() else {
        return Ok(None);
    };
    if all.next().is_some() {
        return Err(format!("{name} is sent more than once"));
    }
    first
        .to_str()
        .map(Some)
        .map_err(|_| format!("{name} holds characters a header value may not carry"))
}

/// A header value with the Base64 sentinel `=?base64?…?=` decoded (§ Value Encoding); `None`
/// when the sentinel wraps something that is not Base64 of UTF-8.
pub(crate) fn decode_header_value(raw: &str) -> Option<String> {
    match raw
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    {
        Some(inner) => String::from_utf8(STANDARD.decode(inner).ok()?).ok(),
        None => Some(raw.to_owned()),
    }
}

/// Whether a header's decoded text equals a body value: strings as they are, booleans as
/// `true`/`false`, numbers numerically (`42.0` equals `42`, § Server Validation).
fn header_matches(decoded: &str, body: &Value) -> bool {
    match body {
        Value::String(s) => decoded == s,
        Value::Bool(b) => decoded == if *b { "true" } else { "false" },
        Value::Number(n) => decoded
            .trim()
            .parse::<f64>()
            .ok()
            .zip(n.as_f64())
            .is_some_and(|(a, b)| a == b),
        _ => false,
    }
}

/// Checks a modern request's `_meta` and headers (see the module docs for the order and the
/// errors). `supported` is what the endpoint's `server/discover` reports ([`endpoint_versions`]),
/// listed in an `UnsupportedProtocolVersionError`; `annotations` gives the `x-mcp-header`
/// annotations of a called tool.
///
/// # Errors
/// The refusal to send, with the request's id.
pub(crate) fn validate<S: AsRef<str> + serde::Serialize + std::fmt::Debug>(
    headers: &HeaderMap,
    message: &Value,
    supported: &[S],
    annotations: impl Fn(&str) -> Option<Vec<ParamHeader>>,
) -> Result<(), HttpError> {
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    let method = message.get("method").and_then(Value::as_str).unwrap_or("");
    let bad =
        |status: StatusCode, code: i64, msg: String| HttpError::rpc(status, id.clone(), code, msg);
    let unsupported = |requested: &str| {
        // A handshake-era version is served, but only inside a session.
        let why = if is_session_era(requested) {
            format!(
                "Protocol version {requested:?} needs a session: send initialize first (without \
                 _meta), or name 2026-07-28 to be served without one; this server supports \
                 {supported:?}"
            )
        } else {
            format!(
                "Unsupported protocol version {requested:?}; this server supports {supported:?}"
            )
        };
        bad(StatusCode::BAD_REQUEST, UNSUPPORTED_PROTOCOL_VERSION, why)
            .with_data(json!({"supported": supported, "requested": requested}))
    };
    let mismatch = |why: String| {
        bad(
            StatusCode::BAD_REQUEST,
            HEADER_MISMATCH,
            format!("Header mismatch: {why}"),
        )
    };
    let params = message.get("params");
    let meta = params.and_then(|p| p.get("_meta"));
    let header_version = single_header(headers, VERSION_HEADER).map_err(mismatch)?;
    // 1. The version: named in `_meta`, served, and mirrored by the header.
    let Some(meta_version) = meta.and_then(|m| m.get(META_PROTOCOL_VERSION)) else {
        if let Some(h) = header_version
            && !ALL_VERSIONS.contains(&h)
        {
            return Err(unsupported(h));
        }
        return Err(bad(
            StatusCode::BAD_REQUEST,
            INVALID_PARAMS,
            format!(
                "Invalid params: an MCP 2026-07-28 request carries params._meta[{META_PROTOCOL_VERSION:?}] and params._meta[{META_CLIENT_CAPABILITIES:?}]"
            ),
        ));
    };
    let Some(meta_version) = meta_version.as_str() else {
        return Err(bad(
            StatusCode::BAD_REQUEST,
            INVALID_PARAMS,
            format!("Invalid params: _meta[{META_PROTOCOL_VERSION:?}] must be a string"),
        ));
    };
    match header_version {
        None => {
            return Err(mismatch(format!(
                "the MCP-Protocol-Version header is required (the request's _meta names {meta_version})"
            )));
        }
        Some(h) if h != meta_version => {
            return Err(mismatch(format!(
                "MCP-Protocol-Version header {h:?} does not match _meta protocolVersion {meta_version:?}"
            )));
        }
        Some(_) => {}
    }
    if !is_modern(meta_version) {
        return Err(unsupported(meta_version));
    }
    // 2. The rest of the required `_meta`.
    if !meta
        .and_then(|m| m.get(META_CLIENT_CAPABILITIES))
        .is_some_and(Value::is_object)
    {
        return Err(bad(
            StatusCode::BAD_REQUEST,
            INVALID_PARAMS,
            format!("Invalid params: _meta[{META_CLIENT_CAPABILITIES:?}] (an object) is required"),
        ));
    }
    if meta
        .and_then(|m| m.get(META_CLIENT_INFO))
        .is_some_and(|i| !i.is_object())
    {
        return Err(bad(
            StatusCode::BAD_REQUEST,
            INVALID_PARAMS,
            format!("Invalid params: _meta[{META_CLIENT_INFO:?}] must be an object"),
        ));
    }
    // 3. The standard headers.
    match single_header(headers, METHOD_HEADER).map_err(mismatch)? {
        None => return Err(mismatch("the Mcp-Method header is required".into())),
        Some(h) if h != method => {
            return Err(mismatch(format!(
                "Mcp-Method header value {h:?} does not match body value {method:?}"
            )));
        }
        Some(_) => {}
    }
    let (name_key, required) = match method {
        "tools/call" | "prompts/get" => (Some("name"), true),
        "resources/read" => (Some("uri"), true),
        // SEP-2663 § Streamable HTTP: Routing Headers: the client MUST set Mcp-Name to the
        // taskId, so intermediaries can route to the instance holding the task.
        "tasks/get" | "tasks/update" | "tasks/cancel" => (Some("taskId"), true),
        _ => (None, false),
    };
    if let Some(key) = name_key {
        let body = params.and_then(|p| p.get(key));
        match (single_header(headers, NAME_HEADER).map_err(mismatch)?, body) {
            (None, Some(_)) if required => {
                return Err(mismatch(format!(
                    "the Mcp-Name header is required for {method}"
                )));
            }
            (None, _) => {}
            (Some(raw), body) => {
                let decoded = decode_header_value(raw)
                    .ok_or_else(|| mismatch("Mcp-Name header is not valid Base64".into()))?;
                if !body.is_some_and(|b| header_matches(&decoded, b)) {
                    return Err(mismatch(format!(
                        "Mcp-Name header value {decoded:?} does not match body value {}",
                        body.map_or("(absent)".to_owned(), Value::to_string)
                    )));
                }
            }
        }
    }
    if method == "tools/call"
        && let Some(tool) = params.and_then(|p| p.get("name")).and_then(Value::as_str)
        && let Some(list) = annotations(tool)
    {
        let args = params.and_then(|p| p.get("arguments"));
        for a in list {
            let name = format!("{PARAM_HEADER_PREFIX}{}", a.header.to_ascii_lowercase());
            let body = args
                .and_then(|args| a.path.iter().try_fold(args, |v, k| v.get(k)))
                .filter(|v| !v.is_null());
            let shown = format!("Mcp-Param-{}", a.header);
            match (single_header(headers, &name).map_err(mismatch)?, body) {
                (None, None) => {}
                (Some(_), None) => {
                    return Err(mismatch(format!(
                        "{shown} is sent but arguments.{} is absent",
                        a.path.join(".")
                    )));
                }
                (None, Some(_)) => {
                    return Err(mismatch(format!(
                        "{shown} is required: arguments.{} is present",
                        a.path.join(".")
                    )));
                }
                (Some(raw), Some(body)) => {
                    let decoded = decode_header_value(raw)
                        .ok_or_else(|| mismatch(format!("{shown} is not valid Base64")))?;
                    if !header_matches(&decoded, body) {
                        return Err(mismatch(format!(
                            "{shown} header value {decoded:?} does not match body value {body}"
                        )));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Capabilities of MCP 2026-07-28 `ServerCapabilities` (schema); others (the 2025-11-25 core
/// `tasks`) are left out of a derived discover result.
const MODERN_CAPABILITIES: [&str; 7] = [
    "experimental",
    "logging",
    "completions",
    "prompts",
    "resources",
    "tools",
    "extensions",
];

/// A `server/discover` result (MCP 2026-07-28 Server › Discover § DiscoverResult) derived from a
/// server's `initialize` result, for daemons that announced none: the versions the relay serves,
/// the modern capabilities, `serverInfo` in `_meta`, `instructions`, and cache hints.
pub(crate) fn discover_from_initialize(init: &Value) -> Value {
    let caps: serde_json::Map<String, Value> = init
        .get("capabilities")
        .and_then(Value::as_object)
        .map(|c| {
            c.iter()
                .filter(|(k, _)| MODERN_CAPABILITIES.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    let mut out = json!({
        "resultType": "complete",
        "supportedVersions": ALL_VERSIONS,
        "capabilities": caps,
        "ttlMs": CATALOG_TTL_MS,
        "cacheScope": "public",
    });
    if let Some(info) = init.get("serverInfo").filter(|i| i.is_object()) {
        out["_meta"] = json!({ META_SERVER_INFO: info });
    }
    if let Some(text) = init.get("instructions").filter(|i| i.is_string()) {
        out["instructions"] = text.clone();
    }
    out
}

/// The `server/discover` answer from a cached server: the daemon's own result when it announced
/// one (its cache hints replaced: the copy is of unknown age), else one derived from `initialize`.
pub(crate) fn cached_discover(info: &CachedServer) -> Value {
    match info.discover() {
        Some(mut d) if d.is_object() => {
            d["resultType"] = json!("complete");
            d["ttlMs"] = json!(CATALOG_TTL_MS);
            if d.get("cacheScope").is_none() {
                d["cacheScope"] = json!("public");
            }
            d
        }
        _ => discover_from_initialize(&info.initialize()),
    }
}

/// `result` with the modern result fields: `resultType`, and `serverInfo` in `_meta` from `init`.
fn modern_result(mut result: Value, init: &Value) -> Value {
    if !result.is_object() {
        return result;
    }
    result["resultType"] = json!("complete");
    if let Some(info) = init.get("serverInfo").filter(|i| i.is_object()) {
        if !result.get("_meta").is_some_and(Value::is_object) {
            result["_meta"] = json!({});
        }
        result["_meta"][META_SERVER_INFO] = info.clone();
    }
    result
}

/// The `tools/list` answer `role` gets from a cached server: its list with `resultType` and the
/// cache hints (`private`: lists are filtered per role, Server › Utilities › Caching § Choosing a
/// Cache Scope).
pub(crate) fn cached_tools(info: &CachedServer, role: &str) -> Option<Value> {
    let mut list = info.tools_for(role)?;
    list["ttlMs"] = json!(CATALOG_TTL_MS);
    list["cacheScope"] = json!("private");
    Some(modern_result(list, &info.initialize()))
}

/// The HTTP status of a JSON-RPC answer sent as one JSON body (Streamable HTTP § Protocol
/// Version Header, § Server Validation; Basic § `_meta`): 400 for the modern request errors, 404
/// for an unknown method, 200 otherwise.
pub(crate) fn status_of(message: &Value) -> StatusCode {
    match message.pointer("/error/code").and_then(Value::as_i64) {
        Some(
            HEADER_MISMATCH | MISSING_REQUIRED_CLIENT_CAPABILITY | UNSUPPORTED_PROTOCOL_VERSION,
        ) => StatusCode::BAD_REQUEST,
        Some(METHOD_NOT_FOUND) => StatusCode::NOT_FOUND,
        _ => StatusCode::OK,
    }
}

fn json_body(status: StatusCode, v: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        v.to_string(),
    )
        .into_response()
}

fn rpc_error(status: StatusCode, id: Value, code: i64, message: &str) -> Response {
    HttpError::rpc(status, id, code, message).into_response()
}

/// Why the daemon does not serve a request itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Away {
    /// No daemon connected within the offline wait.
    Offline,
    /// The daemon predates link revision 2.
    TooOld,
}

/// Serves one POSTed modern message (already admitted, `Content-Type` checked, parsed) to
/// `server` on bridge `b`, through `router`.
pub(crate) async fn post(
    router: &Arc<dyn Router>,
    timing: &RelayTiming,
    b: &BridgeRef,
    server: &str,
    principal: BridgePrincipal,
    headers: &HeaderMap,
    message: Value,
) -> Response {
    let answers_nothing = |id: Value| {
        rpc_error(
            StatusCode::BAD_REQUEST,
            id,
            INVALID_REQUEST,
            "MCP 2026-07-28 clients send requests only: there are no server requests to answer",
        )
    };
    let (method, id) = match jsonrpc::kind(&message) {
        Kind::Request { method, id } => (method, id.into_value()),
        Kind::Notification { method } => {
            return notification(&**router, b, server, &principal, &method, &message);
        }
        Kind::Response { id } => return answers_nothing(id.into_value()),
        Kind::Neither => return answers_nothing(Value::Null),
    };
    // Only for a request of 2026-07-28: another version gets its version error from `validate`.
    if names_modern(headers, &message)
        && let Some(e) = removed_method(&method, &id)
    {
        tracing::debug!(bridge = %b.name(), method, "refused a method MCP 2026-07-28 does not have");
        return e.into_response();
    }
    let catalog = router.catalog(b);
    let cached = catalog.as_ref().and_then(|c| c.get(server));
    let supported = endpoint_versions(cached);
    let annotations = |tool: &str| cached.and_then(|i| i.param_headers.get(tool).cloned());
    if let Err(e) = validate(headers, &message, &supported, annotations) {
        tracing::debug!(bridge = %b.name(), method, error = %e.message, "refused an MCP 2026-07-28 request");
        return e.into_response();
    }
    let route = router.route(b, timing.offline_wait).await;
    let Some(catalog) = router.catalog(b) else {
        return rpc_error(
            StatusCode::SERVICE_UNAVAILABLE,
            id,
            UNAVAILABLE,
            "this bridge's daemon has never connected; start `machine-mcp connect`",
        );
    };
    let Some(info) = catalog.get(server) else {
        return rpc_error(
            StatusCode::NOT_FOUND,
            id,
            METHOD_NOT_FOUND,
            &format!("bridge {} serves no server {server:?}", b.name()),
        );
    };
    match route {
        Some(route) if route.serves_calls() => {
            let to = CallTarget {
                bridge: b,
                server,
                route: &route,
            };
            call(router, timing, to, principal, &method, id, message, headers).await
        }
        Some(_) => catalog_answer(b, info, &principal, &method, id, Away::TooOld),
        None => catalog_answer(b, info, &principal, &method, id, Away::Offline),
    }
}

/// A modern notification: `notifications/cancelled` cancels the principal's matching call (HTTP
/// clients cancel by closing the stream; this serves clients that send the notification anyway),
/// every notification gets 202 (Streamable HTTP § Sending Messages).
fn notification(
    router: &dyn Router,
    b: &BridgeRef,
    server: &str,
    principal: &BridgePrincipal,
    method: &str,
    message: &Value,
) -> Response {
    if method == "notifications/cancelled"
        && let Some(rid) = message.pointer("/params/requestId")
    {
        let reason = message
            .pointer("/params/reason")
            .and_then(Value::as_str)
            .unwrap_or("cancelled by the client");
        router.cancel_matching_call(b, server, principal, rid, reason);
    }
    StatusCode::ACCEPTED.into_response()
}

/// Answers from the cached catalog (see the module docs).
fn catalog_answer(
    b: &BridgeRef,
    info: &CachedServer,
    principal: &BridgePrincipal,
    method: &str,
    id: Value,
    away: Away,
) -> Response {
    let reply = |result: Value| json!({"jsonrpc": "2.0", "id": id, "result": result});
    let offline = format!(
        "the machine behind bridge {} is offline (its daemon is not connected); retry when it reconnects",
        b.name()
    );
    match (method, away) {
        ("server/discover", _) => json_body(StatusCode::OK, &reply(cached_discover(info))),
        ("tools/list", _) => match cached_tools(info, principal.role.as_str()) {
            Some(t) => json_body(StatusCode::OK, &reply(t)),
            None => rpc_error(StatusCode::SERVICE_UNAVAILABLE, id, UNAVAILABLE, &offline),
        },
        ("tools/call", Away::Offline) => {
            let err = ToolError::new(ToolErrorCode::Unavailable, offline).retryable();
            let result = modern_result(err.call_result(), &info.initialize());
            json_body(StatusCode::OK, &reply(result))
        }
        (_, Away::Offline) => rpc_error(StatusCode::SERVICE_UNAVAILABLE, id, UNAVAILABLE, &offline),
        (_, Away::TooOld) => rpc_error(StatusCode::NOT_IMPLEMENTED, id, UNAVAILABLE, TOO_OLD),
    }
}

/// Cancels its call when dropped before the call was answered: the POST's response (stream or
/// JSON wait) is gone, which is the client's cancellation (Streamable HTTP § Cancellation).
struct CallGuard {
    router: Arc<dyn Router>,
    call: SessionRef,
    id: Value,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.router.cancel_call(
            &self.call,
            &self.id,
            "the client closed the request's response",
        );
    }
}

/// Where a call goes: the server on the bridge, over the route the daemon was found on.
#[derive(Clone, Copy)]
struct CallTarget<'a> {
    bridge: &'a BridgeRef,
    server: &'a str,
    route: &'a Route,
}

/// Sends the request to the daemon as a `call` and answers the POST with its outcome.
#[allow(clippy::too_many_arguments)]
async fn call(
    router: &Arc<dyn Router>,
    timing: &RelayTiming,
    to: CallTarget<'_>,
    principal: BridgePrincipal,
    method: &str,
    id: Value,
    message: Value,
    headers: &HeaderMap,
) -> Response {
    let listen = method == SUBSCRIPTIONS_LISTEN;
    // A subscription is a stream by nature; clients accept both forms (§ Sending Messages).
    let streamed = listen || wants_sse(headers);
    tracing::debug!(method, instance = %to.route.instance(), "relaying an MCP 2026-07-28 request as a call");
    let called = router.call(
        to.bridge, to.server, principal, to.route, &id, message, streamed,
    );
    let (call, reply) = match called {
        Ok(x) => x,
        Err(SendError::TooMany(n)) => {
            return rpc_error(
                StatusCode::TOO_MANY_REQUESTS,
                id,
                UNAVAILABLE,
                &format!("{n} requests are already in flight on this bridge; retry shortly"),
            );
        }
        Err(e @ SendError::TooLarge(_)) => {
            return rpc_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                id,
                jsonrpc::code::INVALID_REQUEST,
                &e.to_string(),
            );
        }
        Err(e) => {
            return rpc_error(
                StatusCode::SERVICE_UNAVAILABLE,
                id,
                UNAVAILABLE,
                &format!("{e}; retry shortly"),
            );
        }
    };
    let guard = CallGuard {
        router: router.clone(),
        call,
        id: id.clone(),
    };
    match reply {
        Reply::Stream(st) => {
            if !listen
                && accepts_json(headers)
                && let Some(reply) = hold(&st, STATELESS_RESPONSE_HOLD).await
            {
                drop(guard);
                return json_body(status_of(&reply), &reply);
            }
            sse_response(st, timing.sse_keepalive, guard)
        }
        Reply::Json(rx) => {
            let reply = rx.await;
            drop(guard);
            match reply {
                Ok(reply) => json_body(status_of(&reply), &reply),
                Err(_) => rpc_error(StatusCode::OK, id, UNAVAILABLE, "the request was cancelled"),
            }
        }
    }
}

/// `GET` or `DELETE` by a client naming a 2026-07-28 version: that revision has neither (MCP
/// 2026-07-28 Streamable HTTP § Backward Compatibility, Earlier Streamable HTTP Revisions: 405).
pub(crate) fn method_not_allowed(headers: &HeaderMap) -> Option<Response> {
    let v = headers.get(VERSION_HEADER)?.to_str().ok()?;
    is_modern(v).then(|| {
        (
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::ALLOW, "POST")],
            "MCP 2026-07-28 has no GET or DELETE on the MCP endpoint",
        )
            .into_response()
    })
}

/// Waits up to `max` for `st` to finish with its response as its only message, and returns that
/// response; `None` as soon as anything else arrives first, or when `max` passes.
async fn hold(st: &SseStream, max: Duration) -> Option<Value> {
    let mut rx = st.subscribe();
    let deadline = tokio::time::Instant::now() + max;
    loop {
        rx.borrow_and_update();
        match st.summary() {
            (1, true) => {
                let (events, _) = st.read_after(Some(0));
                return events
                    .first()
                    .and_then(|e| serde_json::from_str(&e.data).ok());
            }
            (0, false) => {}
            _ => return None,
        }
        match tokio::time::timeout_at(deadline, rx.changed()).await {
            Ok(Ok(())) => {}
            _ => return None,
        }
    }
}

/// An SSE response of `st`'s messages in the 2026-07-28 framing ([`Framing::Plain`]: no event
/// ids, streams are not resumable, Streamable HTTP § Receiving Messages). The guard goes with
/// the body: a client that closes the stream before the response cancels the call.
fn sse_response(st: Arc<SseStream>, keepalive: Duration, guard: CallGuard) -> Response {
    sse::response(st, None, keepalive, Framing::Plain, guard)
}

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::param_headers;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    fn meta() -> Value {
        json!({META_PROTOCOL_VERSION: "2026-07-28", META_CLIENT_CAPABILITIES: {},
               META_CLIENT_INFO: {"name": "t", "version": "0"}})
    }

    fn modern_headers(method: &str) -> Vec<(&'static str, String)> {
        vec![
            ("mcp-protocol-version", "2026-07-28".to_owned()),
            ("mcp-method", method.to_owned()),
        ]
    }

    fn h(pairs: &[(&'static str, String)]) -> HeaderMap {
        let v: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        headers(&v)
    }

    fn none(_: &str) -> Option<Vec<ParamHeader>> {
        None
    }

    #[test]
    fn the_era_is_decided_per_request() {
        let legacy_call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
        assert_eq!(era(&HeaderMap::new(), &legacy_call), Era::Legacy);
        assert_eq!(
            era(
                &headers(&[
                    ("mcp-protocol-version", "2025-11-25"),
                    ("mcp-session-id", "a.b")
                ]),
                &legacy_call
            ),
            Era::Legacy
        );
        // `initialize` naming 2026-07-28 (header or `_meta`) is a modern request for a method
        // that era does not have; without either it opens a session as always.
        let init =
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"_meta": meta()}});
        assert_eq!(
            era(&headers(&[("mcp-protocol-version", "2026-07-28")]), &init),
            Era::Modern
        );
        assert_eq!(era(&HeaderMap::new(), &init), Era::Modern);
        let legacy_init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}}});
        assert_eq!(era(&HeaderMap::new(), &legacy_init), Era::Legacy);
        assert_eq!(
            era(
                &headers(&[("mcp-protocol-version", "2025-11-25")]),
                &legacy_init
            ),
            Era::Legacy
        );
        assert_eq!(
            era(
                &headers(&[("mcp-protocol-version", "2026-07-28")]),
                &legacy_init
            ),
            Era::Modern
        );
        // An unknown version on `initialize` stays the session era's negotiation.
        assert_eq!(
            era(
                &headers(&[("mcp-protocol-version", "1999-01-01")]),
                &legacy_init
            ),
            Era::Legacy
        );
        let discover = json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover"});
        assert_eq!(era(&HeaderMap::new(), &discover), Era::Modern);
        let modern =
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta()}});
        assert_eq!(era(&HeaderMap::new(), &modern), Era::Modern);
        // A stray session id does not make a modern request legacy.
        assert_eq!(
            era(&headers(&[("mcp-session-id", "a.b")]), &modern),
            Era::Modern
        );
        assert_eq!(
            era(
                &headers(&[("mcp-protocol-version", "2026-07-28")]),
                &legacy_call
            ),
            Era::Modern
        );
        assert_eq!(
            era(
                &headers(&[("mcp-protocol-version", "1999-01-01")]),
                &legacy_call
            ),
            Era::Modern
        );
        // Legacy notifications and responses stay legacy.
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        assert_eq!(
            era(&headers(&[("mcp-protocol-version", "2025-06-18")]), &note),
            Era::Legacy
        );
    }

    #[test]
    fn headers_must_mirror_the_body() {
        let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "read_file", "arguments": {"path": "a"}, "_meta": meta()}});
        let mut hs = modern_headers("tools/call");
        hs.push(("mcp-name", "read_file".into()));
        assert!(validate(&h(&hs), &call, &ALL_VERSIONS, none).is_ok());
        // Base64-sentinel names are decoded before comparing.
        let mut enc = modern_headers("tools/call");
        enc.push((
            "mcp-name",
            format!("=?base64?{}?=", STANDARD.encode("read_file")),
        ));
        assert!(validate(&h(&enc), &call, &ALL_VERSIONS, none).is_ok());
        // Mcp-Method differs from the body.
        let mut wrong = modern_headers("tools/list");
        wrong.push(("mcp-name", "read_file".into()));
        let e = validate(&h(&wrong), &call, &ALL_VERSIONS, none).unwrap_err();
        assert_eq!(
            (e.status, e.code, e.id.clone()),
            (StatusCode::BAD_REQUEST, HEADER_MISMATCH, json!(3))
        );
        // Mcp-Name missing, or naming another tool.
        let e = validate(
            &h(&modern_headers("tools/call")),
            &call,
            &ALL_VERSIONS,
            none,
        )
        .unwrap_err();
        assert_eq!(e.code, HEADER_MISMATCH);
        let mut other = modern_headers("tools/call");
        other.push(("mcp-name", "write_file".into()));
        assert_eq!(
            validate(&h(&other), &call, &ALL_VERSIONS, none)
                .unwrap_err()
                .code,
            HEADER_MISMATCH
        );
        // Mcp-Method missing; duplicated.
        let bare = vec![
            ("mcp-protocol-version", "2026-07-28".to_owned()),
            ("mcp-name", "read_file".to_owned()),
        ];
        assert_eq!(
            validate(&h(&bare), &call, &ALL_VERSIONS, none)
                .unwrap_err()
                .code,
            HEADER_MISMATCH
        );
        let mut dup = hs.clone();
        dup.push(("mcp-method", "tools/call".into()));
        assert_eq!(
            validate(&h(&dup), &call, &ALL_VERSIONS, none)
                .unwrap_err()
                .code,
            HEADER_MISMATCH
        );
        // The version header must be there and equal the _meta version.
        let list =
            json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {"_meta": meta()}});
        let e = validate(
            &headers(&[("mcp-method", "tools/list")]),
            &list,
            &ALL_VERSIONS,
            none,
        )
        .unwrap_err();
        assert_eq!(
            (e.status, e.code),
            (StatusCode::BAD_REQUEST, HEADER_MISMATCH)
        );
        let e = validate(
            &headers(&[
                ("mcp-method", "tools/list"),
                ("mcp-protocol-version", "2025-11-25"),
            ]),
            &list,
            &ALL_VERSIONS,
            none,
        )
        .unwrap_err();
        assert_eq!(e.code, HEADER_MISMATCH);
    }

    #[test]
    fn task_requests_must_name_their_task_in_mcp_name() {
        for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
            let body = json!({"jsonrpc": "2.0", "id": 9, "method": method,
                "params": {"taskId": "t-1", "_meta": meta()}});
            let mut ok = modern_headers(method);
            ok.push(("mcp-name", "t-1".into()));
            assert!(
                validate(&h(&ok), &body, &ALL_VERSIONS, none).is_ok(),
                "{method}"
            );
            let e = validate(&h(&modern_headers(method)), &body, &ALL_VERSIONS, none).unwrap_err();
            assert_eq!(
                (e.status, e.code, e.id.clone()),
                (StatusCode::BAD_REQUEST, HEADER_MISMATCH, json!(9)),
                "{method} without Mcp-Name"
            );
            let mut other = modern_headers(method);
            other.push(("mcp-name", "t-2".into()));
            let e = validate(&h(&other), &body, &ALL_VERSIONS, none).unwrap_err();
            assert_eq!(e.code, HEADER_MISMATCH, "{method} naming another task");
        }
    }

    #[test]
    fn removed_methods_are_refused_as_unknown_in_2026_07_28() {
        for method in ["initialize", "ping"] {
            let e = removed_method(method, &json!(7)).expect(method);
            assert_eq!(
                (e.status, e.code, e.id.clone()),
                (StatusCode::NOT_FOUND, METHOD_NOT_FOUND, json!(7))
            );
            assert!(
                e.message
                    .starts_with(&format!("{method} is not part of MCP 2026-07-28")),
                "{}",
                e.message
            );
        }
        assert!(removed_method("tools/list", &json!(1)).is_none());
    }

    #[test]
    fn annotated_arguments_must_be_mirrored_in_param_headers() {
        let list = json!({"tools": [{"name": "deploy", "inputSchema": {"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "opts": {"type": "object", "properties": {"n": {"type": "integer", "x-mcp-header": "N"}}}}}}]});
        let map = param_headers([&list]);
        let ann = |t: &str| map.get(t).cloned();
        assert_eq!(map["deploy"].len(), 2);
        let call = |args: Value| {
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "deploy", "arguments": args, "_meta": meta()}})
        };
        let mut base = modern_headers("tools/call");
        base.push(("mcp-name", "deploy".into()));
        let with = |extra: &[(&'static str, &str)]| {
            let mut v = base.clone();
            v.extend(extra.iter().map(|(k, x)| (*k, (*x).to_owned())));
            h(&v)
        };
        let args = json!({"region": "us-west1", "opts": {"n": 42}});
        assert!(
            validate(
                &with(&[("mcp-param-region", "us-west1"), ("mcp-param-n", "42.0")]),
                &call(args.clone()),
                &ALL_VERSIONS,
                ann
            )
            .is_ok()
        );
        assert_eq!(
            validate(
                &with(&[("mcp-param-region", "eu")]),
                &call(args.clone()),
                &ALL_VERSIONS,
                ann
            )
            .unwrap_err()
            .code,
            HEADER_MISMATCH,
            "a missing Mcp-Param-N and a wrong region"
        );
        assert_eq!(
            validate(
                &with(&[("mcp-param-region", "us-west1")]),
                &call(args),
                &ALL_VERSIONS,
                ann
            )
            .unwrap_err()
            .code,
            HEADER_MISMATCH
        );
        assert!(
            validate(&with(&[]), &call(json!({})), &ALL_VERSIONS, ann).is_ok(),
            "absent arguments need no header"
        );
    }

    #[test]
    fn required_meta_and_versions_are_checked() {
        let no_meta = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
        let e = validate(
            &h(&modern_headers("tools/list")),
            &no_meta,
            &ALL_VERSIONS,
            none,
        )
        .unwrap_err();
        assert_eq!(
            (e.status, e.code),
            (StatusCode::BAD_REQUEST, INVALID_PARAMS)
        );
        let no_caps = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
            "params": {"_meta": {META_PROTOCOL_VERSION: "2026-07-28"}}});
        let e = validate(
            &h(&modern_headers("tools/list")),
            &no_caps,
            &ALL_VERSIONS,
            none,
        )
        .unwrap_err();
        assert_eq!(
            (e.status, e.code),
            (StatusCode::BAD_REQUEST, INVALID_PARAMS)
        );
        let future = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
            "params": {"_meta": {META_PROTOCOL_VERSION: "2099-01-01", META_CLIENT_CAPABILITIES: {}}}});
        let hs = headers(&[
            ("mcp-protocol-version", "2099-01-01"),
            ("mcp-method", "tools/list"),
        ]);
        let e = validate(&hs, &future, &ALL_VERSIONS, none).unwrap_err();
        assert_eq!(
            (e.status, e.code),
            (StatusCode::BAD_REQUEST, UNSUPPORTED_PROTOCOL_VERSION)
        );
        let data = e.data.unwrap();
        assert_eq!(data["requested"], "2099-01-01");
        assert_eq!(data["supported"], json!(ALL_VERSIONS));
        // An unknown version header without _meta is the same modern error.
        let e = validate(&hs, &no_meta, &ALL_VERSIONS, none).unwrap_err();
        assert_eq!(e.code, UNSUPPORTED_PROTOCOL_VERSION);
        // The versions listed are the endpoint's own (what its server/discover reports).
        let e = validate(&hs, &future, &["2026-07-28", "2025-11-25"], none).unwrap_err();
        assert_eq!(
            e.data.unwrap()["supported"],
            json!(["2026-07-28", "2025-11-25"])
        );
    }

    #[test]
    fn a_discover_result_is_derived_from_an_initialize_result() {
        let init = json!({"protocolVersion": "2025-11-25",
            "capabilities": {"tools": {"listChanged": true}, "tasks": {"list": {}}, "logging": {}},
            "serverInfo": {"name": "machine-mcp", "version": "1.2.3"}, "instructions": "Use it well."});
        let d = discover_from_initialize(&init);
        assert_eq!(d["resultType"], "complete");
        assert_eq!(d["supportedVersions"], json!(ALL_VERSIONS));
        assert_eq!(
            d["capabilities"],
            json!({"tools": {"listChanged": true}, "logging": {}})
        );
        assert_eq!(d["_meta"][META_SERVER_INFO]["name"], "machine-mcp");
        assert_eq!(d["instructions"], "Use it well.");
        assert_eq!(d["ttlMs"], 0);
        assert_eq!(d["cacheScope"], "public");
    }

    #[test]
    fn accept_headers_decide_whether_a_json_body_may_be_sent() {
        assert!(accepts_json(&HeaderMap::new()));
        assert!(accepts_json(&headers(&[(
            "accept",
            "application/json, text/event-stream"
        )])));
        assert!(accepts_json(&headers(&[("accept", "*/*")])));
        assert!(!accepts_json(&headers(&[("accept", "text/event-stream")])));
        assert!(!accepts_json(&headers(&[(
            "accept",
            "text/event-stream, application/json;q=0"
        )])));
        assert!(method_not_allowed(&headers(&[("mcp-protocol-version", "2026-07-28")])).is_some());
        assert!(method_not_allowed(&headers(&[("mcp-protocol-version", "2025-11-25")])).is_none());
    }

    #[test]
    fn answer_statuses_follow_the_error_codes() {
        let err = |c: i64| json!({"jsonrpc": "2.0", "id": 1, "error": {"code": c, "message": "x"}});
        assert_eq!(status_of(&err(HEADER_MISMATCH)), StatusCode::BAD_REQUEST);
        assert_eq!(
            status_of(&err(UNSUPPORTED_PROTOCOL_VERSION)),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(status_of(&err(METHOD_NOT_FOUND)), StatusCode::NOT_FOUND);
        assert_eq!(status_of(&err(-32000)), StatusCode::OK);
        assert_eq!(
            status_of(&json!({"jsonrpc": "2.0", "id": 1, "result": {}})),
            StatusCode::OK
        );
    }
}
