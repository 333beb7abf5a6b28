//! MCP Streamable HTTP endpoints (MCP 2025-11-25 Transports §Streamable HTTP):
//! `/b/{bridge}/mcp` (the built-in runtime) and `/b/{bridge}/s/{server}/mcp` (upstream servers).
//!
//! Both eras are served on these URLs, decided per POSTed message by [`stateless::era`]: MCP
//! 2026-07-28 requests (per-request `_meta`, no session) go to [`crate::stateless`]; `initialize`
//! and the session traffic of 2025-11-25, 2025-06-18 and 2025-03-26 stay here.
//!
//! Checks, in order, as extractors ([`checks`]): `Host` (loopback listeners only accept loopback
//! names and the public host; §Security Warning, DNS rebinding), `Origin` (a present, foreign
//! origin → 403), credentials (401 / 403), the bridge, then for the session era
//! `MCP-Protocol-Version` (unsupported → 400 with the 2026-07-28 `UnsupportedProtocolVersionError`,
//! which lists every served version) and the session (`MCP-Session-Id` missing → 400, unknown or
//! ended → 404, the client's cue to re-initialize).
//! `POST` carries one JSON-RPC message: a request is answered as SSE when `Accept` allows it
//! (framed as the session's version defines, [`Framing::session`]: from 2025-11-25 a priming
//! event first; keepalive comments, the response last) else as JSON; notifications and
//! responses get 202. A durable relay sends an SSE answer's event ids only once its store holds
//! the stream, or with the stream's final message ([`crate::streamable::sse`]), so every event id
//! a client may resume after survives a relay crash. The `initialize` answer is the daemon's for the negotiated version
//! ([`crate::hub::CachedServer::initialize_for`]), the one a stdio client of that version
//! gets. `GET` opens the standalone stream or, with `Last-Event-ID`, replays and continues a
//! stream. `DELETE` ends the session. While the bridge's daemon is offline,
//! `initialize` and `tools/list` are answered from the catalog it sent at hello, and other calls
//! fail within the offline wait with a retryable error.
//!
//! After admission, the handlers reach bridges, sessions and streams only through the router
//! ([`Router`]): they never hold the routing state itself.

use std::sync::Arc;

use axum::{
    extract::State,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};

use protocol::{
    error_code::ToolErrorCode,
    head::{Era, Head, Kind},
    jsonrpc::{self, code},
    mcp::negotiate_session_version,
    tool_error::ToolError,
};

use crate::{
    auth::BridgePrincipal,
    config::{RelayConfig, RelayTiming},
    error::HttpError,
    hub::{BridgeRef, Reply, Router, SendError, SessionRef},
    stateless,
    stream::SseStream,
    streamable::{
        SESSION_HEADER,
        sse::{self, Framing},
        wants_sse,
    },
};
mod body;
mod checks;

use checks::{Admitted, McpDelete, McpGet, McpPost, legacy_version, session_of};

fn rpc_error(status: StatusCode, id: Value, code: i64, message: &str) -> Response {
    HttpError::rpc(status, id, code, message).into_response()
}

fn plain(status: StatusCode, message: &str) -> Response {
    HttpError::new(status, message).into_response()
}

/// A refusal of a request body the client may send again after
/// [`REQUEST_BODY_RETRY_AFTER_SECS`](crate::limits::REQUEST_BODY_RETRY_AFTER_SECS): `status`
/// (429 or 503) with `Retry-After`.
fn retry_later(status: StatusCode, message: &str) -> Response {
    let mut response = plain(status, message);
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(crate::limits::REQUEST_BODY_RETRY_AFTER_SECS),
    );
    response
}

/// The answer to a body that could not be held on disk: 503 with `Retry-After` (the cause, with
/// the directory, is in the relay's log, not in the answer).
fn spill_failed() -> Response {
    retry_later(
        StatusCode::SERVICE_UNAVAILABLE,
        "the relay could not store this request body on disk (its spill directory is full or not writable); retry later",
    )
}

/// POST on either endpoint: one JSON-RPC message that passed the checks of [`McpPost`]; the era
/// decides the rest ([`stateless::era`]).
pub(crate) async fn post(
    State(router): State<Arc<dyn Router>>,
    State(config): State<Arc<RelayConfig>>,
    McpPost {
        admitted:
            Admitted {
                principal,
                bridge: b,
                server,
            },
        headers,
        head,
        message,
    }: McpPost,
) -> Response {
    let timing = &config.timing;
    if stateless::era(&headers, &head) == Era::Modern {
        return stateless::post(
            &router, timing, &b, &server, principal, &headers, &head, message,
        )
        .await;
    }
    if let Err(e) = legacy_version(&headers) {
        return e.into_response();
    }
    let kind = head.kind();
    if kind == Kind::Request && head.is("initialize") {
        return initialize(
            &*router, timing, &b, &server, principal, &headers, &head, message,
        )
        .await;
    }
    let session = match session_of(&*router, &headers, &principal, &server) {
        Ok(s) => s,
        Err(r) => return r.into_response(),
    };
    match kind {
        Kind::Request => {
            let sse = wants_sse(&headers);
            let to = Target {
                bridge: &b,
                server: &server,
                principal: &principal,
                session: &session,
            };
            let method = head.method().unwrap_or_default();
            request(&*router, timing, to, method, head.reply_id(), message, sse).await
        }
        Kind::Notification => {
            if let Some(rid) = head.cancelled_request() {
                router.cancelled(&session, rid);
            }
            router.notify(&session, message);
            StatusCode::ACCEPTED.into_response()
        }
        Kind::Response | Kind::Error => {
            router.notify(&session, message);
            StatusCode::ACCEPTED.into_response()
        }
        Kind::Neither => rpc_error(
            StatusCode::BAD_REQUEST,
            Value::Null,
            code::INVALID_REQUEST,
            "not a JSON-RPC request, notification or response",
        ),
    }
}

#[allow(clippy::too_many_arguments)]
async fn initialize(
    router: &dyn Router,
    timing: &RelayTiming,
    b: &BridgeRef,
    server: &str,
    principal: BridgePrincipal,
    headers: &HeaderMap,
    head: &Head,
    message: Value,
) -> Response {
    let id = head.reply_id();
    if headers.contains_key(SESSION_HEADER) {
        return rpc_error(
            StatusCode::BAD_REQUEST,
            id,
            code::INVALID_REQUEST,
            "initialize must not carry MCP-Session-Id",
        );
    }
    let mut catalog = router.catalog(b);
    if catalog.is_none() {
        router.route(b, timing.offline_wait).await;
        catalog = router.catalog(b);
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
            &format!("bridge {} serves no server {server:?}", b.name()),
        );
    };
    let version = negotiate_session_version(head.asked_version().unwrap_or(""));
    let result = info.initialize_for(version);
    let kept = match crate::hub::kept_initialize(&message) {
        Ok(k) => k,
        Err(why) => return rpc_error(StatusCode::BAD_REQUEST, id, code::INVALID_PARAMS, &why),
    };
    drop(message);
    let Some(session) = router.open_session(b, server, principal, kept) else {
        return rpc_error(
            StatusCode::SERVICE_UNAVAILABLE,
            id,
            code::UNAVAILABLE,
            "too many sessions on this bridge, or for this credential; close unused ones (DELETE) or retry later",
        );
    };
    let reply = json!({"jsonrpc": "2.0", "id": id, "result": result});
    let mut resp = if wants_sse(headers) {
        let st = router.answer(&session, &id, &reply);
        sse_response(timing, st, None, version).await
    } else {
        (
            [(header::CONTENT_TYPE, "application/json")],
            reply.to_string(),
        )
            .into_response()
    };
    if let Ok(v) = HeaderValue::from_str(session.sid().as_str()) {
        resp.headers_mut().insert(SESSION_HEADER, v);
    }
    resp
}

/// Who a session-era request is for: the admitted bridge, server and principal, and the session
/// that names them.
#[derive(Clone, Copy)]
struct Target<'a> {
    bridge: &'a BridgeRef,
    server: &'a str,
    principal: &'a BridgePrincipal,
    session: &'a SessionRef,
}

async fn request(
    router: &dyn Router,
    timing: &RelayTiming,
    to: Target<'_>,
    method: &str,
    id: Value,
    message: Value,
    sse: bool,
) -> Response {
    let Some(route) = router.route(to.bridge, timing.offline_wait).await else {
        return offline_answer(router, to, method, id);
    };
    tracing::debug!(method, instance = %route.instance(), "relaying a request");
    let (sink, reply) = to.session.reply(sse);
    match router.request(to.session, &route, &id, message, sink) {
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
        Err(e @ SendError::DuplicateId) => {
            return rpc_error(
                StatusCode::CONFLICT,
                id,
                code::INVALID_REQUEST,
                &e.to_string(),
            );
        }
        Err(e @ SendError::TooLarge(_)) => {
            return rpc_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                id,
                code::INVALID_REQUEST,
                &e.to_string(),
            );
        }
        Err(e @ SendError::Busy(_)) => {
            return rpc_error(
                StatusCode::SERVICE_UNAVAILABLE,
                id,
                code::UNAVAILABLE,
                &format!("{e}; retry shortly"),
            );
        }
    }
    match reply {
        Reply::Stream(st) => sse_response(timing, st, None, to.session.protocol_version()).await,
        Reply::Json(rx) => match rx.await {
            Ok(reply) => (
                [(header::CONTENT_TYPE, "application/json")],
                reply.to_string(),
            )
                .into_response(),
            // Cancelled by the client: no response is owed.
            Err(_) => StatusCode::ACCEPTED.into_response(),
        },
    }
}

fn offline_answer(router: &dyn Router, to: Target<'_>, method: &str, id: Value) -> Response {
    let json_reply =
        |v: Value| ([(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response();
    let offline = format!(
        "the machine behind bridge {} is offline (its daemon is not connected); retry when it reconnects",
        to.bridge.name()
    );
    match method {
        "ping" => json_reply(json!({"jsonrpc": "2.0", "id": id, "result": {}})),
        "tools/list" => {
            let tools = router.catalog(to.bridge).and_then(|c| {
                c.get(to.server)
                    .and_then(|i| i.tools_for(to.principal.role.as_str()))
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

/// GET on either endpoint: the session's standalone stream or, with `Last-Event-ID`, a replay
/// that continues a stream (never a re-execution, invariant 6).
pub(crate) async fn get(
    State(router): State<Arc<dyn Router>>,
    State(config): State<Arc<RelayConfig>>,
    McpGet { headers, session }: McpGet,
) -> Response {
    let version = session.protocol_version();
    // Event ids the relay issues are ASCII: any other value names no stream.
    let last = headers
        .get("last-event-id")
        .map(|v| v.to_str().unwrap_or(""));
    match router.resume(&session, last) {
        Some((st, after)) => sse_response(&config.timing, st, after, version).await,
        None => plain(StatusCode::NOT_FOUND, "unknown or expired Last-Event-ID"),
    }
}

/// DELETE on either endpoint: ends the session.
pub(crate) async fn delete(
    State(router): State<Arc<dyn Router>>,
    McpDelete { session }: McpDelete,
) -> Response {
    router.end(&session);
    StatusCode::OK.into_response()
}

/// An SSE response reading `st` after event `after` (from its start when `None`), framed as
/// the session's `version` defines ([`Framing::session`]: the priming event from 2025-11-25).
async fn sse_response(
    timing: &RelayTiming,
    st: Arc<SseStream>,
    after: Option<u64>,
    version: &str,
) -> Response {
    sse::response(
        st,
        after,
        timing.sse_keepalive,
        Framing::session(version),
        (),
    )
    .await
}
