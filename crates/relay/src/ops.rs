//! Operational endpoints: `GET /healthz` and `GET /metrics`.

use std::sync::Arc;

use axum::{
    extract::State,
    http::header,
    response::{IntoResponse, Response},
};

use crate::hub::Hub;

/// Liveness: 200 with `ok` while the relay serves.
pub(crate) async fn healthz() -> &'static str {
    "ok\n"
}

/// Prometheus metrics.
pub(crate) async fn metrics(State(hub): State<Arc<Hub>>) -> Response {
    hub.streams.sweep();
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        hub.metrics.render(),
    )
        .into_response()
}
