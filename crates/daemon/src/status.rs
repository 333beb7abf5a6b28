//! What the daemon reports about itself: the link's state ([`LinkStatus`], kept up to date by
//! [`crate::link::run`]) and a loopback HTTP endpoint ([`serve`]) that answers `GET /healthz`
//! and `GET /status` for `machine-mcp status` and `machine-mcp doctor`.
//!
//! The endpoint binds `127.0.0.1` on an ephemeral port, recorded in the instance record
//! ([`crate::instance`]); it is never reachable beyond loopback. It reads no request body and
//! every response is a small JSON object (at most [`STATUS_MAX_BYTES`]).

use std::{net::SocketAddr, sync::Arc};

use lock::Lock;
use protocol::frame::now_unix_ms;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The largest `/status` answer, in bytes (it holds counts, never lists).
pub const STATUS_MAX_BYTES: usize = 16 * 1024;

/// Where the link is in its life (`link_state` in `/status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum LinkPhase {
    /// Opening TCP, TLS and the WebSocket, or waiting for the relay's `welcome`/`hello_ack`.
    #[default]
    Connecting,
    /// Authenticated; answering the relay's readiness probe (DESIGN §5).
    Probing,
    /// Serving MCP sessions.
    Ready,
    /// The last attempt failed; the next one is at `next_attempt_unix_ms`.
    BackingOff,
    /// Shutting down: draining calls in flight.
    Stopping,
}

/// A snapshot of the link (times are Unix ms of this machine's clock).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct LinkSnapshot {
    /// The phase.
    pub state: LinkPhase,
    /// When the next connection attempt starts, while backing off.
    pub next_attempt_unix_ms: Option<u64>,
    /// When the relay last answered a heartbeat (or the link became ready).
    pub last_heartbeat_unix_ms: Option<u64>,
    /// When the link was lost, while it is down (cleared once ready again).
    pub outage_since_unix_ms: Option<u64>,
    /// Why the last attempt failed, while not ready.
    pub last_error: Option<String>,
    /// When the current link became ready.
    pub ready_since_unix_ms: Option<u64>,
    /// Calls still draining, while stopping.
    pub draining_in_flight: Option<usize>,
}

/// The link's state, shared between the link (which writes it) and the status endpoint.
#[derive(Debug, Default)]
pub struct LinkStatus {
    inner: Lock<LinkSnapshot>,
}

impl LinkStatus {
    /// A copy of the current state.
    pub fn snapshot(&self) -> LinkSnapshot {
        self.inner.lock().clone()
    }

    fn update(&self, f: impl FnOnce(&mut LinkSnapshot)) {
        f(&mut self.inner.lock());
    }

    /// A connection attempt starts.
    pub(crate) fn connecting(&self) {
        self.update(|s| {
            s.state = LinkPhase::Connecting;
            s.next_attempt_unix_ms = None;
        });
    }

    /// The relay accepted the hello; readiness is being probed.
    pub(crate) fn probing(&self) {
        self.update(|s| s.state = LinkPhase::Probing);
    }

    /// The link is ready.
    pub(crate) fn ready(&self) {
        let now = now_unix_ms();
        self.update(|s| {
            s.state = LinkPhase::Ready;
            s.outage_since_unix_ms = None;
            s.last_error = None;
            s.ready_since_unix_ms = Some(now);
            s.last_heartbeat_unix_ms = Some(now);
        });
    }

    /// The relay answered a heartbeat.
    pub(crate) fn heartbeat(&self) {
        let now = now_unix_ms();
        self.update(|s| s.last_heartbeat_unix_ms = Some(now));
    }

    /// An attempt failed (or the link was lost) for `why`; the next starts in `delay_ms`.
    pub(crate) fn backing_off(&self, why: &str, delay_ms: u64) {
        let now = now_unix_ms();
        self.update(|s| {
            s.state = LinkPhase::BackingOff;
            s.next_attempt_unix_ms = Some(now.saturating_add(delay_ms));
            s.outage_since_unix_ms.get_or_insert(now);
            s.last_error = Some(why.to_owned());
            s.ready_since_unix_ms = None;
        });
    }

    /// The daemon is stopping.
    pub(crate) fn stopping(&self) {
        self.update(|s| s.state = LinkPhase::Stopping);
    }

    /// `n` calls are still draining.
    pub(crate) fn draining(&self, n: usize) {
        self.update(|s| s.draining_in_flight = Some(n));
    }
}

/// Binds the status endpoint on `127.0.0.1:0`.
///
/// # Errors
/// The socket cannot be bound.
pub async fn bind() -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).await
}

/// Serves `GET /healthz` (`{"status":"ok","link":PHASE}`, 200 while the link is ready, else
/// 503) and `GET /status` (the object `report` returns, capped at [`STATUS_MAX_BYTES`]) on
/// `listener` until `stop`. Any other path is 404, any other method 405.
pub async fn serve(
    listener: tokio::net::TcpListener,
    link: Arc<LinkStatus>,
    report: Arc<dyn Fn() -> Value + Send + Sync>,
    stop: CancellationToken,
) {
    use axum::{Json, Router, http::StatusCode, response::IntoResponse, routing::get};
    let health_link = link.clone();
    let app = Router::new()
        .route(
            "/healthz",
            get(move || {
                let phase = health_link.snapshot().state;
                async move {
                    let code = if phase == LinkPhase::Ready {
                        StatusCode::OK
                    } else {
                        StatusCode::SERVICE_UNAVAILABLE
                    };
                    (code, Json(json!({"status": "ok", "link": phase}))).into_response()
                }
            }),
        )
        .route(
            "/status",
            get(move || {
                let mut v = report();
                if serde_json::to_vec(&v).map_or(true, |b| b.len() > STATUS_MAX_BYTES) {
                    v = json!({"error": "the status report is too large"});
                }
                async move { Json(v) }
            }),
        );
    // Loopback is not enough: a web page whose name a DNS rebinding points at 127.0.0.1 would
    // reach this port too. Only a Host that names loopback is answered.
    let port = listener.local_addr().map_or(0, |a| a.port());
    let app = app.layer(axum::middleware::from_fn(
        move |req: axum::extract::Request, next: axum::middleware::Next| async move {
            let host = req
                .headers()
                .get(axum::http::header::HOST)
                .and_then(|h| h.to_str().ok())
                .unwrap_or_default();
            if loopback_host(host, port) {
                next.run(req).await
            } else {
                (
                    StatusCode::FORBIDDEN,
                    Json(json!({"error": "the status endpoint answers requests for 127.0.0.1 or localhost only"})),
                )
                    .into_response()
            }
        },
    ));
    let _ = axum::serve(listener, app)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await;
}

/// Whether the `Host` header value `host` names this loopback listener on `port`
/// (`127.0.0.1:PORT`, `localhost:PORT`, `[::1]:PORT`), case-insensitively.
fn loopback_host(host: &str, port: u16) -> bool {
    let host = host.to_ascii_lowercase();
    ["127.0.0.1", "localhost", "[::1]"]
        .iter()
        .any(|h| host == format!("{h}:{port}"))
}

/// The address a status listener got (for the instance record).
pub fn local_addr(listener: &tokio::net::TcpListener) -> Option<SocketAddr> {
    listener.local_addr().ok()
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    async fn get(addr: SocketAddr, host: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(
            format!("GET /status HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    // The status endpoint answers only a Host naming loopback: otherwise a page whose name a DNS
    // rebinding pointed at 127.0.0.1 could read the workspace path.
    #[tokio::test]
    async fn the_status_endpoint_answers_loopback_hosts_only() {
        let listener = bind().await.unwrap();
        let addr = local_addr(&listener).unwrap();
        let stop = CancellationToken::new();
        let report: Arc<dyn Fn() -> Value + Send + Sync> =
            Arc::new(|| json!({"workspace": "/secret/path"}));
        tokio::spawn(serve(
            listener,
            Arc::new(LinkStatus::default()),
            report,
            stop.clone(),
        ));
        let port = addr.port();
        for host in [format!("127.0.0.1:{port}"), format!("LOCALHOST:{port}")] {
            let r = get(addr, &host).await;
            assert!(r.starts_with("HTTP/1.1 200"), "{host}: {r}");
            assert!(r.contains("/secret/path"), "{r}");
        }
        for host in [
            "evil.example",
            &format!("evil.example:{port}"),
            "127.0.0.1:1",
        ] {
            let r = get(addr, host).await;
            assert!(r.starts_with("HTTP/1.1 403"), "{host}: {r}");
            assert!(!r.contains("/secret/path"), "{r}");
        }
        stop.cancel();
    }
}
