//! Operational endpoints: `GET /healthz` and `GET /metrics`.
//!
//! Metrics name every bridge's counts together, so they are not for the public: with
//! `--metrics-listen ADDR` they are served on that listener only (the main listener answers 404);
//! without it the main listener answers them only to a loopback peer that names a loopback host
//! (local monitoring; a request forwarded by a reverse proxy for a public name is refused).

use std::{net::SocketAddr, sync::Arc};

use axum::{
    extract::{ConnectInfo, State},
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
};

use crate::{config::RelayConfig, hub::Router, metrics::Metrics, storage::Store};

/// Liveness: 200 with `ok` while the relay serves.
pub(crate) async fn healthz() -> &'static str {
    "ok\n"
}

/// `GET /metrics` on the metrics listener: always answered.
pub(crate) async fn metrics(
    State(router): State<Arc<dyn Router>>,
    State(metrics): State<Arc<Metrics>>,
    State(store): State<Store>,
) -> Response {
    router.refresh_gauges();
    metrics.credential_lookups.store(
        store.credential_lookups(),
        std::sync::atomic::Ordering::Relaxed,
    );
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        metrics.render(),
    )
        .into_response()
}

/// `GET /metrics` on the main listener: 404 when a metrics listener is configured, else
/// answered only to a loopback peer naming a loopback host.
pub(crate) async fn metrics_main(
    State(config): State<Arc<RelayConfig>>,
    router: State<Arc<dyn Router>>,
    metrics_state: State<Arc<Metrics>>,
    store: State<Store>,
    connect: Option<axum::Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
) -> Response {
    let local = connect.as_ref().is_some_and(|c| c.0.0.ip().is_loopback())
        && headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(|h| h.rsplit_once(':').map_or(h, |(n, _)| n))
            .is_some_and(|n| matches!(n, "localhost" | "127.0.0.1" | "[::1]"));
    if config.metrics_listen.is_some() || !local {
        return (StatusCode::NOT_FOUND, "not found\n").into_response();
    }
    metrics(router, metrics_state, store).await
}
