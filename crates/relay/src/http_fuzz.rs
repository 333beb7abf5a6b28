//! Fuzz target for the relay's whole HTTP surface, in process (bolero; see CONTRIBUTING.md
//! "Fuzzing"): random methods, paths, headers and bodies through [`crate::router`] with
//! `tower::ServiceExt::oneshot`, against a relay with one bridge and no daemon.

use std::time::Duration;

use axum::{
    body::Body,
    http::{Method, Request, StatusCode, header},
};
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::{AppState, RelayConfig, config::AuthMode, router, storage};

/// Time the target gets in the test suite (unless `BOLERO_RANDOM_TEST_TIME_MS` or
/// `BOLERO_RANDOM_ITERATIONS` is set).
const SHORT_RUN: Duration = Duration::from_secs(6);

const PATHS: [&str; 8] = [
    "/b/b1/mcp",
    "/b/b1/s/srv/mcp",
    "/b/missing/mcp",
    "/b/%ff/mcp",
    "/healthz",
    "/metrics",
    "/b/b1/mcp/",
    "/",
];

const HEADERS: [(&str, &str); 11] = [
    ("accept", "application/json, text/event-stream"),
    ("accept", "application/json"),
    ("accept", "text/event-stream"),
    ("content-type", "application/json"),
    ("content-type", "text/plain"),
    ("mcp-protocol-version", "2026-07-28"),
    ("mcp-protocol-version", "2025-11-25"),
    ("mcp-protocol-version", "1999-01-01"),
    ("mcp-method", "tools/list"),
    ("mcp-method", "server/discover"),
    ("mcp-session-id", "abc.def"),
];

/// Headers that end a request early (refused origin or host, oversize, replay): one at most,
/// in a quarter of the requests.
const HOSTILE: [(&str, &str); 5] = [
    ("origin", "http://evil.example"),
    ("origin", "http://127.0.0.1:8750"),
    ("host", "evil.example"),
    ("last-event-id", "x-1"),
    ("content-length", "99999999999"),
];

/// One message of either era, or text that is not one.
fn body(kind: u8, id: u8, extra: &str) -> String {
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientCapabilities": {}});
    let id = [json!(1), json!("a"), Value::Null, json!(1.5)][usize::from(id % 4)].clone();
    match kind % 9 {
        0 => json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "f", "version": "1"}}})
        .to_string(),
        1 => json!({"jsonrpc": "2.0", "id": id, "method": "server/discover", "params": {"_meta": meta}})
            .to_string(),
        2 => json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": {"_meta": meta}})
            .to_string(),
        3 => json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                    "params": {"_meta": meta, "name": extra, "arguments": {}}})
        .to_string(),
        4 => json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string(),
        5 => json!([{"jsonrpc": "2.0", "id": id, "method": "ping"}]).to_string(),
        6 => json!({"jsonrpc": "2.0", "id": id, "result": {}}).to_string(),
        7 => String::new(),
        _ => extra.to_owned(),
    }
}

/// Whatever arrives, the relay answers (no panic, no hang): a status that is not 500, and on an
/// MCP path a JSON body that is a JSON-RPC 2.0 message or errors (or SSE, or nothing).
#[test]
fn fuzz_relay_http_requests() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let app = rt.block_on(async {
        let store = storage::memory().await.unwrap();
        store.bridges().add_bridge("b1", 3600).await.unwrap();
        let config = RelayConfig {
            auth: AuthMode::None,
            ..RelayConfig::for_tests()
        };
        router(AppState::in_memory(store, config).await)
    });
    // A failed check ends the run; nothing is observed across the unwind.
    let app = std::panic::AssertUnwindSafe(app);
    type Input = (u8, u8, Vec<u8>, (u8, u8, u8), String);
    bolero::check!()
        .with_type::<Input>()
        .with_test_time(SHORT_RUN)
        .for_each(|(method, path, headers, (kind, id, hostile), extra)| {
            let method = [
                Method::GET,
                Method::POST,
                Method::DELETE,
                Method::PUT,
                Method::OPTIONS,
            ][usize::from(*method % 5)]
            .clone();
            let path = PATHS
                .get(usize::from(*path % 9))
                .copied()
                .unwrap_or("/b/b1/mcp");
            let mut request = Request::builder()
                .method(method)
                .uri(path)
                .header("host", "127.0.0.1:8750");
            if hostile % 4 == 0 {
                let (name, value) = HOSTILE[usize::from(hostile / 4) % HOSTILE.len()];
                request = request.header(name, value);
            }
            for &h in headers {
                let (name, value) = HEADERS[usize::from(h) % HEADERS.len()];
                request = request.header(name, value);
            }
            let Ok(request) = request.body(Body::from(body(*kind, *id, extra))) else {
                return;
            };
            let app = axum::Router::clone(&app);
            rt.block_on(async move {
                let response = tokio::time::timeout(Duration::from_secs(10), app.oneshot(request))
                    .await
                    .unwrap_or_else(|_| panic!("no answer within 10 s"))
                    .unwrap();
                let status = response.status();
                assert_ne!(status, StatusCode::INTERNAL_SERVER_ERROR);
                let json = response
                    .headers()
                    .get(header::CONTENT_TYPE)
                    .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
                if json && path.starts_with("/b/") {
                    let bytes = tokio::time::timeout(
                        Duration::from_secs(10),
                        axum::body::to_bytes(response.into_body(), 1 << 24),
                    )
                    .await
                    .unwrap_or_else(|_| panic!("a JSON body that does not end"))
                    .unwrap();
                    let v: Value = serde_json::from_slice(&bytes)
                        .unwrap_or_else(|e| panic!("{status}: {e}: {bytes:?}"));
                    assert_eq!(v["jsonrpc"], "2.0", "{status}: {v}");
                }
            });
        });
}
