//! MCP Streamable HTTP endpoints (MCP 2025-11-25 Transports §Streamable HTTP):
//! `/b/{bridge}/mcp` (the built-in runtime) and `/b/{bridge}/s/{server}/mcp` (upstream servers).
//!
//! Both eras are served on these URLs, decided per POSTed message by [`stateless::era`]: MCP
//! 2026-07-28 requests (per-request `_meta`, no session) go to [`crate::stateless`]; `initialize`
//! and the session traffic of 2025-11-25, 2025-06-18 and 2025-03-26 stay here.
//!
//! Checks, in order: `Host` (loopback listeners only accept loopback names and the public host;
//! §Security Warning, DNS rebinding), `Origin` (a present, foreign origin → 403), credentials
//! (401 / 403), the bridge, then for the session era `MCP-Protocol-Version` (unsupported → 400
//! with the 2026-07-28 `UnsupportedProtocolVersionError`, which lists every served version) and
//! the session (`MCP-Session-Id` missing → 400, unknown or ended → 404, the client's cue to
//! re-initialize).
//! `POST` carries one JSON-RPC message: a request is answered as SSE when `Accept` allows it
//! (priming event at once, keepalive comments, the response last) else as JSON; notifications and
//! responses get 202. `GET` opens the standalone stream or, with `Last-Event-ID`, replays and
//! continues a stream. `DELETE` ends the session. While the bridge's daemon is offline,
//! `initialize` and `tools/list` are answered from the catalog it sent at hello, and other calls
//! fail within the offline wait with a retryable error.

use std::sync::Arc;

use axum::{
    body::Bytes,
    extract::{Path, State},
    http::{HeaderMap, HeaderValue, Method, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};

use protocol::{
    error_code::ToolErrorCode,
    jsonrpc::{self, code},
    mcp::{ALL_VERSIONS, LATEST_SESSION_VERSION, is_session_era},
    tool_error::ToolError,
};

use crate::{
    auth::{BridgePrincipal, Role},
    config::AuthMode,
    error::HttpError,
    hub::{Bridge, Hub, SendError, Session, Sink},
    stateless::{self, Era},
    stream::{
        SseStream,
        sse::{self, Framing},
    },
};
/// Header carrying the session id.
pub(crate) const SESSION_HEADER: &str = "mcp-session-id";
/// Header carrying the negotiated protocol version.
pub(crate) const VERSION_HEADER: &str = "mcp-protocol-version";

/// The server a route serves.
fn runtime() -> String {
    protocol::frame::RUNTIME_SERVER.to_owned()
}

fn rpc_error(status: StatusCode, id: Value, code: i64, message: &str) -> Response {
    HttpError::rpc(status, id, code, message).into_response()
}

fn plain(status: StatusCode, message: &str) -> Response {
    HttpError::new(status, message).into_response()
}

/// POST on the runtime endpoint.
pub(crate) async fn post_runtime(
    State(hub): State<Arc<Hub>>,
    Path(bridge): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    post(hub, bridge, runtime(), headers, body).await
}

/// POST on an upstream server's endpoint.
pub(crate) async fn post_server(
    State(hub): State<Arc<Hub>>,
    Path((bridge, server)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    post(hub, bridge, server, headers, body).await
}

/// GET on the runtime endpoint.
pub(crate) async fn get_runtime(
    State(hub): State<Arc<Hub>>,
    Path(bridge): Path<String>,
    headers: HeaderMap,
) -> Response {
    get(hub, bridge, runtime(), headers).await
}

/// GET on an upstream server's endpoint.
pub(crate) async fn get_server(
    State(hub): State<Arc<Hub>>,
    Path((bridge, server)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    get(hub, bridge, server, headers).await
}

/// DELETE on the runtime endpoint.
pub(crate) async fn delete_runtime(
    State(hub): State<Arc<Hub>>,
    Path(bridge): Path<String>,
    headers: HeaderMap,
) -> Response {
    delete(hub, bridge, runtime(), headers).await
}

/// DELETE on an upstream server's endpoint.
pub(crate) async fn delete_server(
    State(hub): State<Arc<Hub>>,
    Path((bridge, server)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    delete(hub, bridge, server, headers).await
}

/// Host, Origin, credentials and bridge checks shared by every method and both eras.
async fn admit(
    hub: &Hub,
    bridge: &str,
    server: &str,
    method: &Method,
    headers: &HeaderMap,
) -> Result<(BridgePrincipal, Arc<Bridge>), HttpError> {
    hub.metrics
        .http_requests
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if !host_allowed(hub, headers) {
        return Err(HttpError::new(
            StatusCode::FORBIDDEN,
            "Host header not allowed on this listener",
        ));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let ok = origin.to_str().is_ok_and(|o| origin_allowed(hub, o));
        if !ok {
            return Err(HttpError::new(StatusCode::FORBIDDEN, "Origin not allowed"));
        }
    }
    let principal = match hub.config.auth {
        AuthMode::None => BridgePrincipal {
            id: "anonymous".into(),
            bridge: bridge.to_owned(),
            role: Role::Owner,
        },
        AuthMode::Token | AuthMode::OAuth => {
            let server = (server != protocol::frame::RUNTIME_SERVER).then_some(server);
            crate::oauth::bearer::principal(hub, bridge, server, method, headers).await?
        }
    };
    if !hub.storage.bridge_exists(bridge).await.unwrap_or(false) {
        return Err(HttpError::new(StatusCode::NOT_FOUND, "no such bridge"));
    }
    Ok((principal, hub.bridge(bridge).await))
}

/// The session era's `MCP-Protocol-Version` check (MCP 2025-11-25 Transports § Protocol Version
/// Header: an unsupported version → 400). The refusal is the 2026-07-28
/// `UnsupportedProtocolVersionError` naming every served version, so a client of either era
/// learns what to retry with.
fn legacy_version(headers: &HeaderMap) -> Result<(), HttpError> {
    let Some(v) = headers.get(VERSION_HEADER) else {
        return Ok(());
    };
    match v.to_str() {
        Ok(v) if is_session_era(v) => Ok(()),
        other => {
            let requested = other.unwrap_or("");
            Err(HttpError::rpc(
                StatusCode::BAD_REQUEST,
                Value::Null,
                code::UNSUPPORTED_PROTOCOL_VERSION,
                format!("unsupported MCP-Protocol-Version {requested:?}"),
            )
            .with_data(json!({"supported": ALL_VERSIONS, "requested": requested})))
        }
    }
}

/// Whether the `Host` is acceptable: on a loopback listener only loopback names and the public
/// URL's host (MCP 2025-11-25 Transports › Security Warning: DNS rebinding); anything elsewhere.
pub(crate) fn host_allowed(hub: &Hub, headers: &HeaderMap) -> bool {
    if !crate::config::is_loopback(&hub.config.listen) {
        return true;
    }
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let name = match host.rsplit_once(':') {
        Some((n, p)) if p.chars().all(|c| c.is_ascii_digit()) => n,
        _ => host,
    };
    let public = hub.config.public_url.host_str().unwrap_or("");
    matches!(name, "localhost" | "127.0.0.1" | "[::1]") || name.eq_ignore_ascii_case(public)
}

/// Browser origins of the hosted assistants whose web apps call MCP servers and the OAuth
/// endpoints directly (DESIGN §6, issue 10 "Browsers").
pub(crate) const HOST_ORIGINS: [&str; 3] = [
    "https://chatgpt.com",
    "https://claude.ai",
    "https://claude.com",
];

/// Whether `origin` is the relay's own: its public origin, or on a loopback listener a loopback
/// name with the listener's port.
pub(crate) fn own_origin(hub: &Hub, origin: &str) -> bool {
    if origin.eq_ignore_ascii_case(&hub.config.origin()) {
        return true;
    }
    if crate::config::is_loopback(&hub.config.listen)
        && let Ok(u) = url::Url::parse(origin)
    {
        let port = hub.config.listen.port();
        return matches!(u.host_str(), Some("localhost" | "127.0.0.1" | "[::1]"))
            && u.port_or_known_default() == Some(port);
    }
    false
}

/// Whether a request with `Origin: origin` may reach the MCP and OAuth endpoints: the relay's
/// own origin, the hosted assistants' ([`HOST_ORIGINS`]) and `--allowed-origin`s; never any
/// origin (MCP 2025-11-25 Transports › Security Warning).
pub(crate) fn origin_allowed(hub: &Hub, origin: &str) -> bool {
    own_origin(hub, origin)
        || HOST_ORIGINS.iter().any(|o| o.eq_ignore_ascii_case(origin))
        || hub.config.allowed_origins.iter().any(|o| o == origin)
}

/// Whether the client's `Accept` admits `text/event-stream` (not with `q=0`).
pub(crate) fn wants_sse(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|part| {
            let mut it = part.split(';');
            let mime = it.next().unwrap_or("").trim();
            let q_zero = it.any(|p| matches!(p.trim().strip_prefix("q="), Some(q) if q.trim().parse::<f32>().is_ok_and(|q| q == 0.0)));
            mime.eq_ignore_ascii_case("text/event-stream") && !q_zero
        })
}

fn session_of(
    hub: &Hub,
    headers: &HeaderMap,
    principal: &BridgePrincipal,
    server: &str,
) -> Result<Arc<Session>, HttpError> {
    let Some(sid) = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()) else {
        return Err(HttpError::new(
            StatusCode::BAD_REQUEST,
            "MCP-Session-Id header is required (send initialize first)",
        ));
    };
    match hub.session(sid, principal) {
        Some(s) if s.server == server && s.bridge.name == principal.bridge => Ok(s),
        _ => Err(HttpError::rpc(
            StatusCode::NOT_FOUND,
            Value::Null,
            code::SESSION_NOT_FOUND,
            "MCP session not found: initialize again",
        )),
    }
}

async fn post(
    hub: Arc<Hub>,
    bridge: String,
    server: String,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (principal, b) = match admit(&hub, &bridge, &server, &Method::POST, &headers).await {
        Ok(x) => x,
        Err(r) => return r.into_response(),
    };
    let ct_ok = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case("application/json")
        });
    if !ct_ok {
        return plain(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type must be application/json",
        );
    }
    let message: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return rpc_error(
                StatusCode::BAD_REQUEST,
                Value::Null,
                code::PARSE_ERROR,
                &format!("parse error: {e}"),
            );
        }
    };
    // MCP Basic § Requests: "Requests MUST include a string or integer ID", which "MUST NOT be
    // null"; a request with another id would otherwise pass for a notification.
    if let Err(e) = jsonrpc::check_envelope(&message) {
        return rpc_error(
            StatusCode::BAD_REQUEST,
            Value::Null,
            code::INVALID_REQUEST,
            &e.to_string(),
        );
    }
    if stateless::era(&headers, &message) == Era::Modern {
        return stateless::post(&hub, b, &server, principal, &headers, message).await;
    }
    if let Err(e) = legacy_version(&headers) {
        return e.into_response();
    }
    let method = message
        .get("method")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let id = message.get("id").cloned().filter(|i| !i.is_null());
    if method.as_deref() == Some("initialize") && id.is_some() {
        return initialize(&hub, b, &server, principal, &headers, message).await;
    }
    let session = match session_of(&hub, &headers, &principal, &server) {
        Ok(s) => s,
        Err(r) => return r.into_response(),
    };
    match (method, id) {
        (Some(m), Some(id)) => request(&hub, &session, &m, id, message, wants_sse(&headers)).await,
        (Some(m), None) => {
            if m == "notifications/cancelled"
                && let Some(rid) = message.pointer("/params/requestId")
            {
                hub.cancelled(&session, rid);
            }
            forward_or_queue(&hub, &session, message);
            StatusCode::ACCEPTED.into_response()
        }
        (None, Some(_)) => {
            forward_or_queue(&hub, &session, message);
            StatusCode::ACCEPTED.into_response()
        }
        (None, None) => rpc_error(
            StatusCode::BAD_REQUEST,
            Value::Null,
            code::INVALID_REQUEST,
            "not a JSON-RPC request, notification or response",
        ),
    }
}

fn forward_or_queue(hub: &Hub, s: &Session, message: Value) {
    match s.bridge.active() {
        Some(link) => {
            if hub.send(s, &link, message.clone()).is_err() && hub.queue(s, message).is_err() {
                tracing::warn!(bridge = %s.bridge.name, "dropped a client message: the daemon link is congested");
            }
        }
        None => {
            if hub.queue(s, message).is_err() {
                tracing::warn!(bridge = %s.bridge.name, "dropped a client message: too many queued while the daemon is away");
            }
        }
    }
}

async fn initialize(
    hub: &Arc<Hub>,
    b: Arc<Bridge>,
    server: &str,
    principal: BridgePrincipal,
    headers: &HeaderMap,
    message: Value,
) -> Response {
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    if headers.contains_key(SESSION_HEADER) {
        return rpc_error(
            StatusCode::BAD_REQUEST,
            id,
            code::INVALID_REQUEST,
            "initialize must not carry MCP-Session-Id",
        );
    }
    let mut catalog = b.catalog();
    if catalog.is_none() {
        b.wait_ready(hub.config.timing.offline_wait).await;
        catalog = b.catalog();
    }
    let Some(catalog) = catalog else {
        return rpc_error(
            StatusCode::SERVICE_UNAVAILABLE,
            id,
            code::UNAVAILABLE,
            "this bridge's daemon has never connected; start `machine-mcp connect`",
        );
    };
    let Some(info) = catalog.get(server) else {
        return rpc_error(
            StatusCode::NOT_FOUND,
            id,
            code::METHOD_NOT_FOUND,
            &format!("bridge {} serves no server {server:?}", b.name),
        );
    };
    let asked = message
        .pointer("/params/protocolVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let version = if is_session_era(asked) {
        asked.to_owned()
    } else {
        LATEST_SESSION_VERSION.to_owned()
    };
    let mut result = info.initialize();
    result["protocolVersion"] = json!(version);
    let Some(session) = hub.create_session(b, server, principal, message) else {
        return rpc_error(
            StatusCode::SERVICE_UNAVAILABLE,
            id,
            code::UNAVAILABLE,
            "too many sessions on this bridge",
        );
    };
    let reply = json!({"jsonrpc": "2.0", "id": id, "result": result});
    let mut resp = if wants_sse(headers) {
        let st = SseStream::new(&session.sid, &session.principal.id, &session.bridge.name);
        let _ = st.push(&reply, true); // a new stream is not finished
        hub.streams.insert(st.clone());
        sse_response(hub, st, None)
    } else {
        (
            [(header::CONTENT_TYPE, "application/json")],
            reply.to_string(),
        )
            .into_response()
    };
    if let Ok(v) = HeaderValue::from_str(session.sid.as_str()) {
        resp.headers_mut().insert(SESSION_HEADER, v);
    }
    resp
}

async fn request(
    hub: &Arc<Hub>,
    s: &Arc<Session>,
    method: &str,
    id: Value,
    message: Value,
    sse: bool,
) -> Response {
    let link = match s.bridge.active() {
        Some(l) => Some(l),
        None => s.bridge.wait_ready(hub.config.timing.offline_wait).await,
    };
    let Some(link) = link else {
        return offline_answer(s, method, id);
    };
    tracing::debug!(method, instance = %link.instance_id, "relaying a request");
    let (sink, stream, waiter) = if sse {
        let st = SseStream::new(&s.sid, &s.principal.id, &s.bridge.name);
        hub.streams.insert(st.clone());
        (Sink::Stream(st.clone()), Some(st), None)
    } else {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (Sink::Json(tx), None, Some(rx))
    };
    match hub.register(s, &id, &message, sink) {
        Ok(()) => {}
        Err(SendError::TooMany(n)) => {
            return rpc_error(
                StatusCode::TOO_MANY_REQUESTS,
                id,
                code::UNAVAILABLE,
                &format!("{n} requests are already in flight on this bridge; retry shortly"),
            );
        }
        Err(SendError::Ended) => {
            return rpc_error(
                StatusCode::NOT_FOUND,
                id,
                code::SESSION_NOT_FOUND,
                "MCP session not found: initialize again",
            );
        }
        Err(e) => {
            return rpc_error(
                StatusCode::CONFLICT,
                id,
                code::INVALID_REQUEST,
                &e.to_string(),
            );
        }
    }
    if let Err(e) = hub.send(s, &link, message) {
        hub.unregister(s, &id);
        if matches!(e, SendError::Ended) {
            return rpc_error(
                StatusCode::NOT_FOUND,
                id,
                code::SESSION_NOT_FOUND,
                "MCP session not found: initialize again",
            );
        }
        return rpc_error(
            StatusCode::SERVICE_UNAVAILABLE,
            id,
            code::UNAVAILABLE,
            &format!("{e}; retry shortly"),
        );
    }
    match (stream, waiter) {
        (Some(st), _) => sse_response(hub, st, None),
        (None, Some(rx)) => match rx.await {
            Ok(reply) => (
                [(header::CONTENT_TYPE, "application/json")],
                reply.to_string(),
            )
                .into_response(),
            // Cancelled by the client: no response is owed.
            Err(_) => StatusCode::ACCEPTED.into_response(),
        },
        (None, None) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

fn offline_answer(s: &Session, method: &str, id: Value) -> Response {
    let json_reply =
        |v: Value| ([(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response();
    let offline = format!(
        "the machine behind bridge {} is offline (its daemon is not connected); retry when it reconnects",
        s.bridge.name
    );
    match method {
        "ping" => json_reply(json!({"jsonrpc": "2.0", "id": id, "result": {}})),
        "tools/list" => {
            let tools = s.bridge.catalog().and_then(|c| {
                c.get(&s.server)
                    .and_then(|i| i.tools_for(s.principal.role.as_str()))
            });
            match tools {
                Some(t) => json_reply(json!({"jsonrpc": "2.0", "id": id, "result": t})),
                None => rpc_error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    id,
                    code::UNAVAILABLE,
                    &offline,
                ),
            }
        }
        "tools/call" => {
            let err = ToolError::new(ToolErrorCode::Unavailable, offline).retryable();
            json_reply(jsonrpc::result(&id, err.call_result()))
        }
        _ => rpc_error(
            StatusCode::SERVICE_UNAVAILABLE,
            id,
            code::UNAVAILABLE,
            &offline,
        ),
    }
}

async fn get(hub: Arc<Hub>, bridge: String, server: String, headers: HeaderMap) -> Response {
    let (principal, _) = match admit(&hub, &bridge, &server, &Method::GET, &headers).await {
        Ok(x) => x,
        Err(r) => return r.into_response(),
    };
    if let Some(r) = stateless::method_not_allowed(&headers) {
        return r;
    }
    if let Err(e) = legacy_version(&headers) {
        return e.into_response();
    }
    if !wants_sse(&headers) {
        return plain(
            StatusCode::NOT_ACCEPTABLE,
            "GET needs Accept: text/event-stream",
        );
    }
    let session = match session_of(&hub, &headers, &principal, &server) {
        Ok(s) => s,
        Err(r) => return r.into_response(),
    };
    if let Some(last) = headers.get("last-event-id").and_then(|v| v.to_str().ok()) {
        return match hub.streams.lookup(last, &session.sid, &principal.id) {
            Some((st, seq)) => sse_response(&hub, st, Some(seq)),
            None => plain(StatusCode::NOT_FOUND, "unknown or expired Last-Event-ID"),
        };
    }
    let after = session.standalone.unsent_cursor();
    sse_response(&hub, session.standalone.clone(), after)
}

async fn delete(hub: Arc<Hub>, bridge: String, server: String, headers: HeaderMap) -> Response {
    let (principal, _) = match admit(&hub, &bridge, &server, &Method::DELETE, &headers).await {
        Ok(x) => x,
        Err(r) => return r.into_response(),
    };
    if let Some(r) = stateless::method_not_allowed(&headers) {
        return r;
    }
    if let Err(e) = legacy_version(&headers) {
        return e.into_response();
    }
    let session = match session_of(&hub, &headers, &principal, &server) {
        Ok(s) => s,
        Err(r) => return r.into_response(),
    };
    hub.end_session(
        &session.sid,
        code::UNAVAILABLE,
        "the session was deleted",
        true,
    );
    StatusCode::OK.into_response()
}

/// An SSE response reading `st` after event `after` (from the priming event when `None`).
fn sse_response(hub: &Hub, st: Arc<SseStream>, after: Option<u64>) -> Response {
    sse::response(
        st,
        after,
        hub.config.timing.sse_keepalive,
        Framing::Resumable,
        (),
    )
}
