//! The checks an MCP request passes before a handler sees it, as axum extractors: a handler that
//! receives an [`McpPost`], [`McpGet`] or [`McpDelete`] has a request that passed every check of
//! its method, in this order (the order is part of the contract: `docs/relay-protocol.md`, "The
//! relay's MCP endpoints"):
//!
//! - POST: the path ([`Endpoint`]), `Host` (403), `Origin` (403), credentials (401 / 403), the
//!   bridge (404), the body budget (past the credential's → 429, past the relay's → 503, both
//!   with `Retry-After`, before the body is read: [`crate::budget`]), then the body (over 8 MiB →
//!   413, not complete within 30 s → 408),
//!   `Content-Type` (415), an `initialize` over 64 KiB (400, -32602), JSON (400, -32700), the
//!   JSON-RPC envelope (400, -32600) (`body.rs`). The era and what follows from it are the
//!   handler's.
//! - GET: the path, `Host`, `Origin`, credentials, the bridge, a 2026-07-28 version (405), an
//!   unsupported session-era version (400, -32022), `Accept` without SSE (406), the session (400
//!   without `MCP-Session-Id`, 404 unknown).
//! - DELETE: as GET, without the `Accept` check.
//!
//! Each refusal is the same status, code and message as before the checks were extractors.

use std::sync::Arc;

use axum::{
    body::Bytes,
    extract::{FromRef, FromRequest, FromRequestParts, Path, Request, rejection::PathRejection},
    http::{HeaderMap, Method, StatusCode, header, request::Parts},
    response::{IntoResponse, Response},
};
use serde::Deserialize;
use serde_json::{Value, json};

use protocol::{
    frame::RUNTIME_SERVER,
    head::Head,
    jsonrpc::code,
    mcp::{ALL_VERSIONS, is_session_era},
};

use super::plain;
use crate::{
    admission::Admission,
    auth::BridgePrincipal,
    error::HttpError,
    hub::{BridgeRef, Router, SessionRef},
    stateless,
    streamable::{SESSION_HEADER, VERSION_HEADER, wants_sse},
};

/// The endpoint a request is for: `/b/{bridge}/mcp` (the built-in runtime, [`RUNTIME_SERVER`])
/// or `/b/{bridge}/s/{server}/mcp` (an upstream server).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    /// The `{bridge}` of the path.
    pub(crate) bridge: String,
    /// The `{server}` of the path, or [`RUNTIME_SERVER`].
    pub(crate) server: String,
}

impl<S: Send + Sync> FromRequestParts<S> for Endpoint {
    type Rejection = PathRejection;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        #[derive(Deserialize)]
        struct Params {
            bridge: String,
            server: Option<String>,
        }
        let Path(p) = Path::<Params>::from_request_parts(parts, state).await?;
        Ok(Self {
            bridge: p.bridge,
            server: p.server.unwrap_or_else(|| RUNTIME_SERVER.to_owned()),
        })
    }
}

/// A request that passed the checks every method and both eras share: `Host`, `Origin`,
/// credentials, the bridge.
#[derive(Debug)]
pub(crate) struct Admitted {
    /// Who is calling.
    pub(crate) principal: BridgePrincipal,
    /// The bridge, as the router knows it.
    pub(crate) bridge: BridgeRef,
    /// The served server.
    pub(crate) server: String,
}

impl Admitted {
    /// Runs the shared checks for a request of `method` to `endpoint` ([`Admission::admit`]),
    /// then takes the bridge from the router. `method` is the route's (a `HEAD` served by the
    /// GET route is checked as GET, as before).
    async fn check(
        admission: &Admission,
        router: &dyn Router,
        endpoint: Endpoint,
        method: &Method,
        headers: &HeaderMap,
    ) -> Result<Self, Response> {
        let principal = admission
            .admit(&endpoint.bridge, &endpoint.server, method, headers)
            .await
            .map_err(IntoResponse::into_response)?;
        let bridge = router.bridge(&endpoint.bridge).await;
        Ok(Self {
            principal,
            bridge,
            server: endpoint.server,
        })
    }
}

/// A POST that passed its checks (module docs): who, and the one JSON-RPC message it carries.
#[derive(Debug)]
pub(crate) struct McpPost {
    /// The shared checks' outcome.
    pub(crate) admitted: Admitted,
    /// The request's headers.
    pub(crate) headers: HeaderMap,
    /// The message's head, read once when the body was parsed: the handlers route by it and
    /// never probe the message again.
    pub(crate) head: Head,
    /// The message: a JSON object with `"jsonrpc": "2.0"` and, for a request, a string or
    /// integer id ([`Head::check_envelope`]).
    pub(crate) message: Value,
}

impl<S> FromRequest<S> for McpPost
where
    S: Send + Sync,
    Arc<Admission>: FromRef<S>,
    Arc<dyn Router>: FromRef<S>,
{
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Response> {
        let admission = Arc::<Admission>::from_ref(state);
        let router = Arc::<dyn Router>::from_ref(state);
        let (mut parts, body) = request.into_parts();
        let endpoint = Endpoint::from_request_parts(&mut parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let headers = parts.headers.clone();
        // The headers authenticate the request before its body is read (no unauthenticated body
        // is buffered), and the body has its own time.
        let admitted =
            Admitted::check(&admission, &*router, endpoint, &Method::POST, &headers).await?;
        // The body is reserved in the budget before a byte of it is read, and held until parsed.
        let _permit =
            reserve_body(&admission, &admitted.principal.credential, &headers).map_err(|r| *r)?;
        let body = read_body(body).await.map_err(IntoResponse::into_response)?;
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
            return Err(plain(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "Content-Type must be application/json",
            ));
        }
        // Parsed here when small; a large body on the blocking pool, a bounded number at once,
        // and an oversized `initialize` refused from its head (`body.rs`).
        let (head, message) = super::body::message(body).await.map_err(|r| *r)?;
        Ok(Self {
            admitted,
            headers,
            head,
            message,
        })
    }
}

/// A session-era GET that passed its checks (module docs).
#[derive(Debug)]
pub(crate) struct McpGet {
    /// The request's headers (`Last-Event-ID`).
    pub(crate) headers: HeaderMap,
    /// The session named by `MCP-Session-Id`, of the caller.
    pub(crate) session: SessionRef,
}

impl<S> FromRequestParts<S> for McpGet
where
    S: Send + Sync,
    Arc<Admission>: FromRef<S>,
    Arc<dyn Router>: FromRef<S>,
{
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        let admission = Arc::<Admission>::from_ref(state);
        let router = Arc::<dyn Router>::from_ref(state);
        let endpoint = Endpoint::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let a =
            Admitted::check(&admission, &*router, endpoint, &Method::GET, &parts.headers).await?;
        if let Some(refused) = outside_session_era(&parts.headers) {
            return Err(refused);
        }
        if !wants_sse(&parts.headers) {
            return Err(plain(
                StatusCode::NOT_ACCEPTABLE,
                "GET needs Accept: text/event-stream",
            ));
        }
        let session = session_of(&*router, &parts.headers, &a.principal, &a.server)
            .map_err(IntoResponse::into_response)?;
        Ok(Self {
            headers: parts.headers.clone(),
            session,
        })
    }
}

/// A session-era DELETE that passed its checks (module docs).
#[derive(Debug)]
pub(crate) struct McpDelete {
    /// The session named by `MCP-Session-Id`, of the caller.
    pub(crate) session: SessionRef,
}

impl<S> FromRequestParts<S> for McpDelete
where
    S: Send + Sync,
    Arc<Admission>: FromRef<S>,
    Arc<dyn Router>: FromRef<S>,
{
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        let admission = Arc::<Admission>::from_ref(state);
        let router = Arc::<dyn Router>::from_ref(state);
        let endpoint = Endpoint::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let a = Admitted::check(
            &admission,
            &*router,
            endpoint,
            &Method::DELETE,
            &parts.headers,
        )
        .await?;
        if let Some(refused) = outside_session_era(&parts.headers) {
            return Err(refused);
        }
        let session = session_of(&*router, &parts.headers, &a.principal, &a.server)
            .map_err(IntoResponse::into_response)?;
        Ok(Self { session })
    }
}

/// The refusal of a GET or DELETE outside the session era, which alone has them: a 2026-07-28
/// version gets 405, an unsupported version 400 ([`legacy_version`]).
fn outside_session_era(headers: &HeaderMap) -> Option<Response> {
    stateless::method_not_allowed(headers).or_else(|| {
        legacy_version(headers)
            .err()
            .map(IntoResponse::into_response)
    })
}

/// The session era's `MCP-Protocol-Version` check (MCP 2025-11-25 Transports § Protocol Version
/// Header: an unsupported version → 400). The refusal is the 2026-07-28
/// `UnsupportedProtocolVersionError` naming every served version, so a client of either era
/// learns what to retry with.
pub(crate) fn legacy_version(headers: &HeaderMap) -> Result<(), HttpError> {
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

/// The session `MCP-Session-Id` names, if it was issued to `principal` for `server` (MCP
/// 2025-11-25 Streamable HTTP § Session Management: missing → 400, unknown or ended → 404).
pub(crate) fn session_of(
    router: &dyn Router,
    headers: &HeaderMap,
    principal: &BridgePrincipal,
    server: &str,
) -> Result<SessionRef, HttpError> {
    let Some(sid) = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()) else {
        return Err(HttpError::new(
            StatusCode::BAD_REQUEST,
            "MCP-Session-Id header is required (send initialize first)",
        ));
    };
    match router.session(sid, principal, server) {
        Some(s) => Ok(s),
        None => Err(HttpError::rpc(
            StatusCode::NOT_FOUND,
            Value::Null,
            code::SESSION_NOT_FOUND,
            "MCP session not found: initialize again",
        )),
    }
}

/// Reserves the body a POST announces in the budget of bytes in flight ([`crate::budget`]).
///
/// # Errors
/// 429 past the credential's budget, 503 past the relay's total, both with `Retry-After`
/// ([`REQUEST_BODY_RETRY_AFTER_SECS`](crate::limits::REQUEST_BODY_RETRY_AFTER_SECS)).
fn reserve_body(
    admission: &Admission,
    credential: &str,
    headers: &HeaderMap,
) -> Result<crate::budget::BodyPermit, Box<Response>> {
    use crate::budget::Refusal;
    use crate::limits::REQUEST_BODY_RETRY_AFTER_SECS;
    let length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    admission.bodies.reserve(credential, length).map_err(|r| {
        let (status, message) = match r {
            Refusal::Credential => (
                StatusCode::TOO_MANY_REQUESTS,
                "too many request bodies in flight for this credential; retry later",
            ),
            Refusal::Total => (
                StatusCode::SERVICE_UNAVAILABLE,
                "the relay holds too many request bodies; retry later",
            ),
        };
        let mut response = plain(status, message);
        response.headers_mut().insert(
            header::RETRY_AFTER,
            axum::http::HeaderValue::from(REQUEST_BODY_RETRY_AFTER_SECS),
        );
        Box::new(response)
    })
}

/// Reads a POST body ([`crate::server::read_body`], at most [`MCP_REQUEST_BODY_MAX_BYTES`]).
///
/// # Errors
/// 413 (a JSON-RPC error, id null) past the size, 408 past the time, 400 when the body breaks
/// off.
async fn read_body(body: axum::body::Body) -> Result<Bytes, HttpError> {
    use crate::limits::MCP_REQUEST_BODY_MAX_BYTES;
    use crate::server::BodyError;
    crate::server::read_body(body, MCP_REQUEST_BODY_MAX_BYTES)
        .await
        .map_err(|e| {
            let status = match e {
                BodyError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
                BodyError::Timeout => StatusCode::REQUEST_TIMEOUT,
                BodyError::Broken(_) => StatusCode::BAD_REQUEST,
            };
            HttpError::new(status, e.to_string())
        })
}

#[cfg(test)]
mod tests {
    use axum::{Router, body::Body, routing::get};
    use tower::ServiceExt;

    use super::*;

    async fn answer(router: Router, uri: &str) -> (StatusCode, String) {
        let r = router
            .oneshot(Request::get(uri).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = r.status();
        let body = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// The endpoint extractor reads both routes and refuses a path exactly as the `Path<String>`
    /// and `Path<(String, String)>` extractors it replaced.
    #[tokio::test]
    async fn the_endpoint_is_read_from_either_route_and_bad_paths_are_refused_as_before() {
        async fn show(e: Endpoint) -> String {
            format!("{} {}", e.bridge, e.server)
        }
        async fn one(Path(b): Path<String>) -> String {
            b
        }
        async fn two(Path((b, s)): Path<(String, String)>) -> String {
            format!("{b} {s}")
        }
        let new = Router::new()
            .route("/b/{bridge}/mcp", get(show))
            .route("/b/{bridge}/s/{server}/mcp", get(show));
        let old = Router::new()
            .route("/b/{bridge}/mcp", get(one))
            .route("/b/{bridge}/s/{server}/mcp", get(two));
        assert_eq!(
            answer(new.clone(), "/b/b1/mcp").await,
            (StatusCode::OK, format!("b1 {RUNTIME_SERVER}"))
        );
        assert_eq!(
            answer(new.clone(), "/b/b1/s/db/mcp").await,
            (StatusCode::OK, "b1 db".to_owned())
        );
        for uri in ["/b/%ff/mcp", "/b/b1/s/%c3%28/mcp"] {
            let refused = answer(new.clone(), uri).await;
            assert_eq!(refused.0, StatusCode::BAD_REQUEST, "{uri}");
            assert_eq!(refused, answer(old.clone(), uri).await, "{uri}");
        }
    }
}
