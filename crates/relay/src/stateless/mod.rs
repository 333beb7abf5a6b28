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
//!    `server/discover` reports, `answer::endpoint_versions`);
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
//!
//! One file per concern: this one decides the era and serves the POST (through the router,
//! `crate::hub::Router`, as a call); `checks` holds the `_meta` and header checks, `headers` how
//! the mirrored headers are read, `answer` what the relay answers itself from a cached catalog
//! and how an answer's status is chosen.

mod answer;
mod checks;
mod headers;

use std::{sync::Arc, time::Duration};

use axum::{
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::Value;

use crate::limits::STATELESS_RESPONSE_HOLD;
use protocol::{
    head::{self, Carrier, Era, Head, Kind},
    jsonrpc::{
        self,
        code::{INVALID_REQUEST, METHOD_NOT_FOUND, UNAVAILABLE},
    },
    mcp::{SUBSCRIPTIONS_LISTEN, is_modern},
};

use answer::{Away, catalog_answer, endpoint_versions, hold, json_body, rpc_error, status_of};
use checks::validate;

use crate::{
    auth::BridgePrincipal,
    config::RelayTiming,
    error::HttpError,
    hub::{BridgeRef, CallRef, Reply, Route, Router, SendError},
    stream::SseStream,
    streamable::{
        SESSION_HEADER, VERSION_HEADER, accepts_json,
        sse::{self, Framing},
        wants_sse,
    },
};

/// What the request's headers say about its message beside the body, for the era decision
/// (a version header that is not text names no version).
pub(crate) fn carrier(headers: &HeaderMap) -> Carrier<'_> {
    Carrier {
        version_header: headers
            .get(VERSION_HEADER)
            .map(|h| h.to_str().unwrap_or("")),
        in_session: headers.contains_key(SESSION_HEADER),
    }
}

/// The era of one POSTed message ([`Head::era`], MCP 2026-07-28 Basic › Versioning § Backward
/// Compatibility): `initialize` is of the session era unless its `MCP-Protocol-Version` header
/// or its `_meta` protocol version names a 2026-07-28 version (then it is a modern request for a
/// method that era does not have, answered by [`removed_method`]); `server/discover` is modern;
/// so is a message whose `_meta` names a protocol version (unless it names a handshake-era
/// version inside a session) or whose `MCP-Protocol-Version` header names a version that is not
/// a handshake-era one (an unknown one is then refused with the modern
/// `UnsupportedProtocolVersionError`). Everything else — session traffic, notifications and
/// responses of handshake-era clients — is of the session era.
pub(crate) fn era(headers: &HeaderMap, head: &Head) -> Era {
    head.era(carrier(headers))
}

/// The refusal of a 2026-07-28 request for a method that era does not have
/// ([`protocol::head::era::REMOVED_METHODS`]): HTTP 404 with JSON-RPC `-32601` (Method not
/// found) and the request's `id` (MCP 2026-07-28 Basic › Transports › Streamable HTTP §
/// Protocol Version Header: "If the server does not implement the requested RPC method, it MUST
/// respond with `404 Not Found` and a JSON-RPC error with code `-32601`"). `None` for any other
/// method.
pub(crate) fn removed_method(method: &str, id: &Value) -> Option<HttpError> {
    let r = head::era::removed_method(method)?;
    Some(HttpError::rpc(
        StatusCode::NOT_FOUND,
        id.clone(),
        r.code,
        r.message,
    ))
}

/// Serves one POSTed modern message (already admitted, `Content-Type` checked, parsed) to
/// `server` on bridge `b`, through `router`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn post(
    router: &Arc<dyn Router>,
    timing: &RelayTiming,
    b: &BridgeRef,
    server: &str,
    principal: BridgePrincipal,
    headers: &HeaderMap,
    head: &Head,
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
    let (method, id) = match head.kind() {
        Kind::Request => (head.method().unwrap_or_default(), head.reply_id()),
        Kind::Notification => return notification(&**router, b, server, &principal, head),
        Kind::Response | Kind::Error => return answers_nothing(head.reply_id()),
        Kind::Neither => return answers_nothing(Value::Null),
    };
    // Only for a request of 2026-07-28: another version gets its version error from `validate`.
    if head.names_modern(carrier(headers))
        && let Some(e) = removed_method(method, &id)
    {
        tracing::debug!(bridge = %b.name(), method, "refused a method MCP 2026-07-28 does not have");
        return e.into_response();
    }
    let catalog = router.catalog(b);
    let cached = catalog.as_ref().and_then(|c| c.get(server));
    let supported = endpoint_versions(cached);
    let annotations = |tool: &str| cached.and_then(|i| i.param_headers.get(tool).cloned());
    if let Err(e) = validate(headers, head, &message, &supported, annotations) {
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
            call(router, timing, to, principal, method, id, message, headers).await
        }
        Some(_) => catalog_answer(b, info, &principal, method, id, Away::TooOld),
        None => catalog_answer(b, info, &principal, method, id, Away::Offline),
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
    head: &Head,
) -> Response {
    if let Some(rid) = head.cancelled_request() {
        let reason = head.cancel_reason().unwrap_or("cancelled by the client");
        router.cancel_matching_call(b, server, principal, rid, reason);
    }
    StatusCode::ACCEPTED.into_response()
}

/// Cancels its call when dropped before the call was answered: the POST's response (stream or
/// JSON wait) is gone, which is the client's cancellation (Streamable HTTP § Cancellation).
struct CallGuard {
    router: Arc<dyn Router>,
    call: CallRef,
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
            sse_response(st, timing.sse_keepalive, guard).await
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

/// An SSE response of `st`'s messages in the 2026-07-28 framing ([`Framing::Plain`]: no event
/// ids, streams are not resumable, Streamable HTTP § Receiving Messages). The guard goes with
/// the body: a client that closes the stream before the response cancels the call.
async fn sse_response(st: Arc<SseStream>, keepalive: Duration, guard: CallGuard) -> Response {
    sse::response(st, None, keepalive, Framing::Plain, guard).await
}

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests;
