//! The checks an MCP request passes before a handler sees it, as axum extractors: a handler that
//! receives an [`McpPost`], [`McpGet`] or [`McpDelete`] has a request that passed every check of
//! its method, in this order (the order is part of the contract: `docs/relay-protocol.md`, "The
//! relay's MCP endpoints"):
//!
//! - POST: the path ([`Endpoint`]), `Host` (403), `Origin` (403), credentials (401 / 403), the
//!   bridge (404), the body budget (past the holder's → 429, past a relay-wide total → 503, both
//!   with `Retry-After`, before the body is read: [`crate::budget`]), then the body, received
//!   in memory or, past 256 KiB, spilled to an anonymous file ([`crate::spill`]: over 8 MiB →
//!   413, not complete within 30 s → 408, broken off → 400, not writable to disk → 503 with
//!   `Retry-After`), `Content-Type` (415), an `initialize` over 64 KiB (400, -32602), JSON (400, -32700), the
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
    body::Body,
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

use super::{plain, retry_later, spill_failed};
use crate::{
    admission::Admission,
    auth::BridgePrincipal,
    error::HttpError,
    hub::{BridgeRef, Router, SessionRef},
    limits::MCP_REQUEST_BODY_MAX_BYTES,
    spill::{ReceiveError, Received},
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
        let _permit = reserve_body(&admission, &admitted.principal.id, &headers).map_err(|r| *r)?;
        let body = receive_body(&admission, body).await.map_err(|r| *r)?;
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
        // Parsed here when small; a large body (read back first when it was spilled) on the
        // blocking pool, a bounded number at once, and an oversized `initialize` refused from
        // its head (`body.rs`).
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
/// 429 past the budget of `holder` (the principal's id), 503 past a relay-wide total, both with
/// `Retry-After` ([`REQUEST_BODY_RETRY_AFTER_SECS`](crate::limits::REQUEST_BODY_RETRY_AFTER_SECS)).
fn reserve_body(
    admission: &Admission,
    holder: &str,
    headers: &HeaderMap,
) -> Result<crate::budget::BodyPermit, Box<Response>> {
    use crate::budget::Refusal;
    let length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    admission.bodies.reserve(holder, length).map_err(|r| {
        let (status, message) = match r {
            Refusal::Credential => (
                StatusCode::TOO_MANY_REQUESTS,
                "too many request bodies in flight for this account or token; retry later",
            ),
            Refusal::Total => (
                StatusCode::SERVICE_UNAVAILABLE,
                "the relay holds too many request bodies; retry later",
            ),
        };
        Box::new(retry_later(status, message))
    })
}

/// Receives a POST body of at most [`MCP_REQUEST_BODY_MAX_BYTES`], in memory or, past the
/// spill threshold, in an anonymous file ([`crate::spill`]).
///
/// # Errors
/// 413 (a JSON-RPC error, id null) past the size, 408 past the time, 400 when the body breaks
/// off; 503 with `Retry-After` when the body could not be written to disk (the log says why).
async fn receive_body(admission: &Admission, body: Body) -> Result<Received, Box<Response>> {
    use crate::server::BodyError;
    match admission
        .spill
        .receive(body, MCP_REQUEST_BODY_MAX_BYTES)
        .await
    {
        Ok(received) => Ok(received),
        Err(ReceiveError::Body(e)) => {
            let status = match e {
                BodyError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
                BodyError::Timeout => StatusCode::REQUEST_TIMEOUT,
                BodyError::Broken(_) => StatusCode::BAD_REQUEST,
            };
            Err(Box::new(
                HttpError::new(status, e.to_string()).into_response(),
            ))
        }
        Err(ReceiveError::Spill(_)) => Err(Box::new(spill_failed())),
    }
}

#[cfg(test)]
mod tests {
    use axum::{
        Router,
        body::{Body, Bytes},
        routing::get,
    };
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

    /// The MCP POST route of a relay on loopback without authentication, with bridge `b1`,
    /// that spills into `spill_dir` (none: holds bodies in memory whole, as before spilling
    /// existed).
    async fn relay(spill_dir: Option<std::path::PathBuf>) -> (Router, crate::AppState) {
        let store = crate::storage::memory().await.unwrap();
        store.bridges().add_bridge("b1", 3600).await.unwrap();
        let config = crate::RelayConfig {
            auth: crate::config::AuthMode::None,
            spill_dir,
            ..crate::RelayConfig::for_tests()
        };
        let state = crate::AppState::in_memory(store, config).await;
        let route = Router::new()
            .route("/b/{bridge}/mcp", axum::routing::post(super::super::post))
            .with_state(state.clone());
        (route, state)
    }

    /// A body that sends `bytes` in 16 KiB chunks, without a `Content-Length`, then `end`
    /// (`None`: ends cleanly).
    fn streamed(bytes: &[u8], end: Option<std::io::Error>) -> Body {
        let mut chunks: Vec<Result<Bytes, std::io::Error>> = bytes
            .chunks(16 * 1024)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        chunks.extend(end.map(Err));
        Body::from_stream(futures_util::stream::iter(chunks))
    }

    async fn post(router: &Router, body: Body) -> (StatusCode, HeaderMap, Value) {
        let request = Request::post("/b/b1/mcp")
            .header(header::HOST, "127.0.0.1:8750")
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream")
            .body(body)
            .unwrap();
        let r = router.clone().oneshot(request).await.unwrap();
        let (status, headers) = (r.status(), r.headers().clone());
        let body = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
        (
            status,
            headers,
            serde_json::from_slice(&body).unwrap_or(Value::Null),
        )
    }

    /// A `tools/call` of about `len` bytes: `pad` in its arguments.
    fn call_of(len: usize) -> Vec<u8> {
        let pad = "p".repeat(len);
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
               "params": {"name": "write_file", "arguments": {"content": pad}}})
        .to_string()
        .into_bytes()
    }

    fn spilled(state: &crate::AppState) -> u64 {
        state
            .metrics
            .bodies_spilled
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Through the whole POST path, a body past the spill threshold is spilled and gets the
    /// answer it got when every body was held in memory: parsed and handed to the handler (a
    /// `tools/call` without a session: 400 from the handler), 413 past 8 MiB, 400 when it breaks
    /// off, an oversized `initialize` refused with its id. Its budget is given back each time.
    #[tokio::test]
    async fn spilled_bodies_get_the_answers_bodies_held_in_memory_get() {
        use crate::limits::{
            MCP_REQUEST_BODY_MAX_BYTES, REQUEST_BODY_BYTES_PER_CREDENTIAL,
            REQUEST_BODY_SPILL_THRESHOLD,
        };
        let dir = tempfile::tempdir().unwrap();
        let (spilling, spilling_state) = relay(Some(dir.path().join("spill"))).await;
        let (in_memory, in_memory_state) = relay(None).await;
        let over = REQUEST_BODY_SPILL_THRESHOLD + 1;
        let init = format!(
            r#"{{"jsonrpc":"2.0","id":"i9","method":"initialize","params":{{"protocolVersion":"2025-11-25","_pad":"{}"}}}}"#,
            "p".repeat(over)
        );
        let cases: [(&str, Vec<u8>, Option<std::io::Error>, StatusCode); 4] = [
            ("parsed", call_of(over), None, StatusCode::BAD_REQUEST),
            (
                "too large",
                vec![b' '; MCP_REQUEST_BODY_MAX_BYTES + 1],
                None,
                StatusCode::PAYLOAD_TOO_LARGE,
            ),
            (
                "broken",
                call_of(over),
                Some(std::io::Error::other("reset")),
                StatusCode::BAD_REQUEST,
            ),
            (
                "initialize",
                init.into_bytes(),
                None,
                StatusCode::BAD_REQUEST,
            ),
        ];
        for (n, (case, bytes, end, status)) in cases.into_iter().enumerate() {
            let again = end.as_ref().map(|e| std::io::Error::other(e.to_string()));
            let from_file = post(&spilling, streamed(&bytes, end)).await;
            let from_memory = post(&in_memory, streamed(&bytes, again)).await;
            assert_eq!(from_file.0, status, "{case}: {:?}", from_file.2);
            assert_eq!(
                (from_file.0, &from_file.2),
                (from_memory.0, &from_memory.2),
                "{case}"
            );
            assert_eq!(spilled(&spilling_state), n as u64 + 1, "{case}");
            assert!(
                spilling_state
                    .admission
                    .bodies
                    .reserve("anonymous", Some(REQUEST_BODY_BYTES_PER_CREDENTIAL as u64))
                    .is_ok(),
                "{case}: the body's budget was given back"
            );
        }
        assert_eq!(spilled(&in_memory_state), 0);
        let parsed = post(&spilling, streamed(&call_of(over), None)).await.2;
        assert!(
            parsed["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("MCP-Session-Id")),
            "{parsed}"
        );
    }

    /// A spill directory the relay cannot make answers a large body 503 with `Retry-After`
    /// and a message that says what happened (not where); the relay goes on answering, small
    /// bodies as before.
    #[tokio::test]
    async fn a_spill_directory_that_cannot_be_written_is_answered_503_with_retry_after() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("not-a-directory");
        std::fs::write(&file, b"").unwrap();
        let (router, state) = relay(Some(file.join("spill"))).await;
        let big = call_of(crate::limits::REQUEST_BODY_SPILL_THRESHOLD + 1);
        let (status, headers, body) = post(&router, streamed(&big, None)).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_eq!(headers.get(header::RETRY_AFTER).unwrap(), "1");
        let why = body["error"]["message"].as_str().unwrap_or_default();
        assert!(why.contains("spill directory"), "{why}");
        assert!(!why.contains("not-a-directory"), "{why}");
        assert!(
            state.admission.bodies.reserve("anonymous", None).is_ok(),
            "the budget was given back"
        );
        let (status, _, body) = post(&router, streamed(&call_of(100), None)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("MCP-Session-Id")
        );
    }

    /// A spilled body that stops coming is answered 408 once the body's time is up (paused
    /// clock), as a body in memory is.
    #[tokio::test]
    async fn a_spilled_body_that_stops_coming_is_answered_408() {
        use futures_util::StreamExt;
        let dir = tempfile::tempdir().unwrap();
        let (_, state) = relay(Some(dir.path().join("spill"))).await;
        tokio::time::pause();
        let first = Bytes::from(call_of(crate::limits::REQUEST_BODY_SPILL_THRESHOLD + 1));
        let body = futures_util::stream::iter([Ok::<_, std::io::Error>(first)])
            .chain(futures_util::stream::pending());
        let refused = receive_body(&state.admission, Body::from_stream(body))
            .await
            .unwrap_err();
        assert_eq!(refused.status(), StatusCode::REQUEST_TIMEOUT);
        assert_eq!(spilled(&state), 1);
    }
}
