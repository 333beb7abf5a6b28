//! What the relay answers itself for MCP 2026-07-28: the `server/discover` and `tools/list`
//! results made from a daemon's cached catalog (while it is offline, or older than link
//! revision 2), the versions an endpoint reports, the HTTP status of an answer sent as one JSON
//! body, and the short hold that lets a quick answer go as JSON instead of SSE.

use std::{sync::Arc, time::Duration};

use axum::{
    http::{StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};

use protocol::{
    error_code::ToolErrorCode,
    head::{
        discover::{DiscoverFrom, discover_from_initialize},
        result::{CacheScope, Completion, Hint, complete},
    },
    jsonrpc::code::{
        HEADER_MISMATCH, METHOD_NOT_FOUND, MISSING_REQUIRED_CLIENT_CAPABILITY, UNAVAILABLE,
        UNSUPPORTED_PROTOCOL_VERSION,
    },
    tool_error::ToolError,
};

use crate::{
    auth::BridgePrincipal,
    error::HttpError,
    hub::{BridgeRef, CachedServer},
    stream::SseStream,
};

/// `ttlMs` of answers made from the cached catalog while the daemon is away: a snapshot of
/// unknown age, so immediately stale (Server › Utilities › Caching § Time-to-Live).
pub(crate) const CATALOG_TTL_MS: u64 = 0;

/// The error of a 2026-07-28 request the daemon cannot serve because it predates link revision 2.
pub(crate) const TOO_OLD: &str = "the daemon for this bridge is too old for MCP 2026-07-28; upgrade machine-mcp there, or use a client in 2025-11-25 mode";

/// The protocol versions an endpoint serves, as its `server/discover` reports them
/// ([`cached_discover`]; derived once per catalog, [`CachedServer::supported_versions`]): what
/// its `UnsupportedProtocolVersionError` lists. Every version the relay speaks
/// ([`crate::hub::all_versions`]) when the bridge has no catalog
/// entry for the server.
pub(crate) fn endpoint_versions(info: Option<&CachedServer>) -> Arc<[String]> {
    match info {
        Some(i) => i.supported_versions.clone(),
        None => crate::hub::all_versions(),
    }
}

/// The `server/discover` answer from a cached server: the daemon's own result when it announced
/// one (its `ttlMs` replaced: the copy is of unknown age), else one derived from `initialize`
/// ([`DiscoverFrom::RelayCache`]).
pub(crate) fn cached_discover(info: &CachedServer) -> Value {
    match info.discover() {
        Some(mut d) if d.is_object() => {
            let how = Completion {
                ttl_ms: Hint::Set(CATALOG_TTL_MS),
                scope: Hint::Fill(CacheScope::Public),
                server_info: None,
            };
            complete(&mut d, &how);
            d
        }
        _ => discover_from_initialize(&info.initialize(), DiscoverFrom::RelayCache),
    }
}

/// `result` completed for 2026-07-28 with the cache hints `ttl_ms` and `scope`, and the
/// `serverInfo` of `init` in its `_meta`.
fn modern_result(
    mut result: Value,
    init: &Value,
    ttl_ms: Hint<u64>,
    scope: Hint<CacheScope>,
) -> Value {
    let how = Completion {
        ttl_ms,
        scope,
        server_info: init.get("serverInfo"),
    };
    complete(&mut result, &how);
    result
}

/// The `tools/list` answer `role` gets from a cached server: its list with `resultType` and the
/// cache hints (`private`: lists are filtered per role, Server › Utilities › Caching § Choosing a
/// Cache Scope).
pub(crate) fn cached_tools(info: &CachedServer, role: &str) -> Option<Value> {
    let list = info.tools_for(role)?;
    Some(modern_result(
        list,
        &info.initialize(),
        Hint::Set(CATALOG_TTL_MS),
        Hint::Set(CacheScope::Private),
    ))
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

pub(super) fn json_body(status: StatusCode, v: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        v.to_string(),
    )
        .into_response()
}

pub(super) fn rpc_error(status: StatusCode, id: Value, code: i64, message: &str) -> Response {
    HttpError::rpc(status, id, code, message).into_response()
}

/// Why the daemon does not serve a request itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Away {
    /// No daemon connected within the offline wait.
    Offline,
    /// The daemon predates link revision 2.
    TooOld,
}

/// Answers from the cached catalog (see the module docs).
pub(super) fn catalog_answer(
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
            let result = modern_result(
                err.call_result(),
                &info.initialize(),
                Hint::Keep,
                Hint::Keep,
            );
            json_body(StatusCode::OK, &reply(result))
        }
        (_, Away::Offline) => rpc_error(StatusCode::SERVICE_UNAVAILABLE, id, UNAVAILABLE, &offline),
        (_, Away::TooOld) => rpc_error(StatusCode::NOT_IMPLEMENTED, id, UNAVAILABLE, TOO_OLD),
    }
}

/// Waits up to `max` for `st` to finish with its response as its only message, and returns that
/// response; `None` as soon as anything else arrives first, or when `max` passes.
pub(super) async fn hold(st: &SseStream, max: Duration) -> Option<Value> {
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
