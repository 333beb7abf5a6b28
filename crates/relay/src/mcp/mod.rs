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
//! (priming event at once, keepalive comments, the response last) else as JSON; notifications and
//! responses get 202. `GET` opens the standalone stream or, with `Last-Event-ID`, replays and
//! continues a stream. `DELETE` ends the session. While the bridge's daemon is offline,
//! `initialize` and `tools/list` are answered from the catalog it sent at hello, and other calls
//! fail within the offline wait with a retryable error.

use std::sync::Arc;

use axum::{
    extract::State,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};

use protocol::{
    error_code::ToolErrorCode,
    jsonrpc::{self, Kind, code},
    mcp::{LATEST_SESSION_VERSION, is_session_era},
    tool_error::ToolError,
};

use crate::{
    auth::BridgePrincipal,
    error::HttpError,
    hub::{Bridge, Hub, SendError, Session, Sink},
    stateless::{self, Era},
    stream::{Resume, SseStream},
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

/// POST on either endpoint: one JSON-RPC message that passed the checks of [`McpPost`]; the era
/// decides the rest ([`stateless::era`]).
pub(crate) async fn post(
    State(hub): State<Arc<Hub>>,
    McpPost {
        admitted:
            Admitted {
                principal,
                bridge: b,
                server,
            },
        headers,
        message,
    }: McpPost,
) -> Response {
    if stateless::era(&headers, &message) == Era::Modern {
        return stateless::post(&hub, b, &server, principal, &headers, message).await;
    }
    if let Err(e) = legacy_version(&headers) {
        return e.into_response();
    }
    let kind = jsonrpc::kind(&message);
    if matches!(&kind, Kind::Request { method, .. } if method == "initialize") {
        return initialize(&hub, b, &server, principal, &headers, message).await;
    }
    let session = match session_of(&hub, &headers, &principal, &server) {
        Ok(s) => s,
        Err(r) => return r.into_response(),
    };
    match kind {
        Kind::Request { method, id } => {
            let sse = wants_sse(&headers);
            request(&hub, &session, &method, id.into_value(), message, sse).await
        }
        Kind::Notification { method } => {
            if method == "notifications/cancelled"
                && let Some(rid) = message.pointer("/params/requestId")
            {
                hub.cancelled(&session, rid);
            }
            forward_or_queue(&hub, &session, message);
            StatusCode::ACCEPTED.into_response()
        }
        Kind::Response { .. } => {
            forward_or_queue(&hub, &session, message);
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
    let kept = match crate::hub::kept_initialize(&message) {
        Ok(k) => k,
        Err(why) => return rpc_error(StatusCode::BAD_REQUEST, id, code::INVALID_PARAMS, &why),
    };
    drop(message);
    let Some(session) = hub.create_session(b, server, principal, kept) else {
        return rpc_error(
            StatusCode::SERVICE_UNAVAILABLE,
            id,
            code::UNAVAILABLE,
            "too many sessions on this bridge, or for this credential; close unused ones (DELETE) or retry later",
        );
    };
    let reply = json!({"jsonrpc": "2.0", "id": id, "result": result});
    let mut resp = if wants_sse(headers) {
        let st = SseStream::new(&session.sid, &session.principal.id, &session.bridge.name);
        let _ = st.push(&reply, true); // a new stream is not finished
        hub.streams.insert_durable(st.clone(), &id);
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
    // The stream is registered (made replayable) only once the request is admitted: a refused
    // request left its stream registered forever (issue 12 item 7).
    let (sink, stream, waiter) = if sse {
        let st = SseStream::new(&s.sid, &s.principal.id, &s.bridge.name);
        (Sink::Stream(st.clone()), Some(st), None)
    } else {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (Sink::Json(tx), None, Some(rx))
    };
    match hub.register(s, &id, &message, sink) {
        Ok(()) => {
            if let Some(st) = &stream {
                hub.streams.insert_durable(st.clone(), &id);
            }
        }
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
        if let Some(st) = &stream {
            st.finish();
        }
        if matches!(e, SendError::Ended) {
            return rpc_error(
                StatusCode::NOT_FOUND,
                id,
                code::SESSION_NOT_FOUND,
                "MCP session not found: initialize again",
            );
        }
        if matches!(e, SendError::TooLarge(_)) {
            return rpc_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                id,
                code::INVALID_REQUEST,
                &e.to_string(),
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

/// GET on either endpoint: the session's standalone stream or, with `Last-Event-ID`, a replay
/// that continues a stream (never a re-execution, invariant 6).
pub(crate) async fn get(
    State(hub): State<Arc<Hub>>,
    McpGet {
        principal,
        headers,
        session,
    }: McpGet,
) -> Response {
    if let Some(last) = headers.get("last-event-id") {
        // Event ids the relay issues are ASCII: any other value names no stream.
        let last = last.to_str().unwrap_or("");
        return match hub
            .streams
            .resume(last, &session.sid, &principal.id, &session.standalone)
        {
            Resume::Replay(st, seq) => {
                // The client has every event up to its cursor: the store forgets them.
                hub.streams.acknowledge(&st, seq);
                sse_response(&hub, st, Some(seq))
            }
            Resume::Standalone => {
                let after = session.standalone.unsent_cursor();
                sse_response(&hub, session.standalone.clone(), after)
            }
            Resume::Unknown => plain(StatusCode::NOT_FOUND, "unknown or expired Last-Event-ID"),
        };
    }
    let after = session.standalone.unsent_cursor();
    sse_response(&hub, session.standalone.clone(), after)
}

/// DELETE on either endpoint: ends the session.
pub(crate) async fn delete(
    State(hub): State<Arc<Hub>>,
    McpDelete { session }: McpDelete,
) -> Response {
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
