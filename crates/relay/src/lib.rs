//! The machine-bridge relay: where remote MCP clients meet the daemons of users' machines.
//!
//! The relay authenticates MCP clients (OAuth 2.1, static bearer tokens, or none on a loopback
//! listener), serves MCP Streamable HTTP per bridge and server, keeps MCP sessions and resumable
//! SSE streams, and forwards JSON-RPC over one WebSocket per daemon after verifying the daemon's
//! device-key signature and an end-to-end probe. It never touches files or processes and knows
//! nothing of tool semantics (invariant 1): every effect happens in the daemon, which re-checks
//! authority on each call.
//!
//! # The map
//!
//! The modules import each other without a cycle (the tidy test checks it), from the leaves up:
//!
//! - leaves: [`config`], [`auth`] (principals, ids, session id keys), [`error`], [`limits`]
//!   (the bounds the relay alone enforces), `lock`, `metrics`, `origin` (the `Host`/`Origin`
//!   rules); `budget` (request body bytes in flight) over `limits`;
//! - [`storage`]: the store behind one trait per aggregate ([`storage::Store`]);
//! - `stream`: SSE streams as data (events, replay, retention);
//! - `hub`: the bridges' routing state on this node behind the routing seam (`hub::Router`):
//!   daemon links, sessions, calls, requests in flight, the reply sink of each; it imports
//!   neither the HTTP layer nor OAuth;
//! - [`server`] (the accept loop, connection caps, body reading), `spill` (MCP request bodies
//!   received in memory or, past a threshold, in anonymous files) over it and `metrics`,
//!   `streamable` (the header names, `Accept` negotiation and SSE framing both eras share);
//! - [`oauth`] (the authorization server and the resource-server check), `admission` (what a
//!   request passes before anything is routed for it);
//! - the endpoints: `stateless` (MCP 2026-07-28), `mcp` (the session era, and the era decision),
//!   `link` (the daemon socket route), `ops` (`/healthz`, `/metrics`);
//! - [`state`] ([`AppState`]: the substates handlers extract), and this root: [`router`] (the
//!   axum app) and [`serve`].
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use machine_bridge_relay::{RelayConfig, storage};
//! let store = storage::open(std::path::Path::new("/tmp/relay.db")).await?;
//! let config = RelayConfig::new("127.0.0.1:8750".parse()?, "http://127.0.0.1:8750".parse()?);
//! machine_bridge_relay::serve(config, store, tokio_util::sync::CancellationToken::new()).await?;
//! # Ok(()) }
//! ```

pub(crate) mod admission;
pub mod auth;
pub(crate) mod budget;
pub mod config;
pub mod error;
pub(crate) mod hub;
pub mod limits;
pub(crate) mod link;
pub(crate) mod mcp;
pub(crate) mod metrics;
pub mod oauth;
pub(crate) mod ops;
pub(crate) mod origin;
pub mod server;
pub(crate) mod spill;
pub mod state;
pub(crate) mod stateless;
pub mod storage;
pub(crate) mod stream;
pub(crate) mod streamable;

#[cfg(test)]
mod http_fuzz;

use std::{sync::Arc, time::Duration};

use axum::{Router, extract::DefaultBodyLimit, routing::get};
use tokio_util::sync::CancellationToken;

pub use config::RelayConfig;
pub use state::AppState;

use crate::limits::MCP_REQUEST_BODY_MAX_BYTES;
use protocol::frame::CONNECT_PATH;

/// The relay's HTTP application over `state`: the MCP endpoints, the daemon socket, the
/// operational endpoints and, in [`config::AuthMode::OAuth`], the authorization server
/// ([`oauth::routes`]); CORS for the origins `origin::origin_allowed` admits.
pub fn router(state: AppState) -> Router {
    let mut app = Router::new()
        .route(
            "/b/{bridge}/mcp",
            get(mcp::get).post(mcp::post).delete(mcp::delete),
        )
        .route(
            "/b/{bridge}/s/{server}/mcp",
            get(mcp::get).post(mcp::post).delete(mcp::delete),
        )
        .route(CONNECT_PATH, get(link::connect))
        .route("/healthz", get(ops::healthz))
        .route("/metrics", get(ops::metrics_main));
    if state.config.auth == config::AuthMode::OAuth {
        app = app.merge(oauth::routes(state.config.clone()));
    }
    app.fallback(not_found)
        .layer(DefaultBodyLimit::max(MCP_REQUEST_BODY_MAX_BYTES))
        .layer(axum::middleware::from_fn(refuse_declared_oversize))
        .layer(cors(&state.admission))
        .with_state(state)
}

/// CORS (Fetch standard) for browser-based clients: only the origins the MCP endpoints admit
/// (never `*`), the MCP and OAuth headers, and the response headers a client must read.
fn cors(admission: &Arc<admission::Admission>) -> tower_http::cors::CorsLayer {
    use axum::http::{HeaderName, Method};
    use tower_http::cors::{AllowHeaders, AllowOrigin, CorsLayer};
    let admission = admission.clone();
    CorsLayer::new()
        .allow_origin(AllowOrigin::predicate(move |origin, _| {
            origin.to_str().is_ok_and(|o| admission.origin_allowed(o))
        }))
        .allow_methods([Method::GET, Method::POST, Method::DELETE])
        .allow_headers(AllowHeaders::mirror_request())
        .expose_headers([
            HeaderName::from_static(streamable::SESSION_HEADER),
            HeaderName::from_static(streamable::VERSION_HEADER),
            axum::http::header::WWW_AUTHENTICATE,
        ])
        .max_age(Duration::from_secs(600))
}

/// The longest part of an unknown path that `not_found` repeats back (characters).
const NOT_FOUND_PATH_SHOWN_CHARS: usize = 200;

/// The answer to a path the relay does not serve (a client configured with `/mcp`, `/b/` or a
/// typo): 404 with a JSON-RPC error (-32600, id null) that says where the MCP endpoints are. It
/// gives the URL patterns only, never the bridges the relay holds (the caller is not
/// authenticated). The 404s of the MCP endpoints themselves (an unknown bridge, or session per
/// MCP 2025-11-25 Streamable HTTP §Session Management) are theirs and unchanged.
async fn not_found(
    axum::extract::State(config): axum::extract::State<Arc<RelayConfig>>,
    uri: axum::http::Uri,
) -> error::HttpError {
    let base = config.public_url.as_str().trim_end_matches('/');
    let mut path: String = uri
        .path()
        .chars()
        .take(NOT_FOUND_PATH_SHOWN_CHARS)
        .collect();
    if path.len() < uri.path().len() {
        path.push('…');
    }
    let endpoint = format!("{base}/b/<bridge>/mcp");
    let server_endpoint = format!("{base}/b/<bridge>/s/<server>/mcp");
    error::HttpError::new(
        axum::http::StatusCode::NOT_FOUND,
        format!(
            "no MCP endpoint at {path}: MCP clients use {endpoint}, with the name of a bridge \
             (`machine-mcp relay bridge list` on the relay; `machine-mcp up` serves `local`), or \
             {server_endpoint} for an upstream server the daemon carries"
        ),
    )
    .with_data(serde_json::json!({
        "error": "not_found",
        "mcp_endpoint": endpoint,
        "server_endpoint": server_endpoint,
    }))
}

/// Refuses a request whose `Content-Length` declares more than [`MCP_REQUEST_BODY_MAX_BYTES`]
/// with 413 (RFC 9110 § 15.5.14) and a JSON-RPC error (-32600, id null) before any of the body is
/// read: nothing is buffered for it, and a client that waits for the answer before sending the
/// body (`Expect: 100-continue`, or reading first) gets it instead of a closed connection. A body
/// without a declared length is still cut at the limit while it is read (`DefaultBodyLimit`).
async fn refuse_declared_oversize(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let declared = request
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    match declared {
        Some(n) if n > MCP_REQUEST_BODY_MAX_BYTES as u64 => (
            axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            axum::Json(serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {
                "code": -32600,
                "message": format!(
                    "the request body declares {n} bytes; at most {MCP_REQUEST_BODY_MAX_BYTES} are accepted"
                )}})),
        )
            .into_response(),
        _ => next.run(request).await,
    }
}

/// How often expired OAuth codes, tokens, grants and unused registrations are deleted.
const OAUTH_SWEEP_INTERVAL: Duration = Duration::from_secs(600);
/// How often expired stream rows are deleted from the store (their retention is 120 s).
const STORE_SWEEP_INTERVAL: Duration = Duration::from_secs(30);

/// How long a stopping relay waits for its store to take the session and stream writes still
/// queued.
const STORE_FLUSH_ON_STOP: Duration = Duration::from_secs(5);

async fn sweep_oauth(store: &storage::Store) {
    use crate::{limits::REGISTRATION_IDLE_EXPIRY, limits::REGISTRATION_UNUSED_EXPIRY};
    match store
        .oauth()
        .sweep_oauth(
            REGISTRATION_UNUSED_EXPIRY.as_secs() as i64,
            REGISTRATION_IDLE_EXPIRY.as_secs() as i64,
        )
        .await
    {
        Ok(0) => {}
        Ok(n) => tracing::debug!(rows = n, "deleted expired OAuth state"),
        Err(e) => tracing::warn!(error = %e, "cannot delete expired OAuth state"),
    }
}

/// Errors that stop the relay from serving.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The configuration is not acceptable.
    #[error("{0}")]
    Config(String),
    /// The listener could not be bound. When the port is taken, the message says to choose
    /// another with `--listen`.
    #[error("cannot listen on {addr}{}", bind_hint(source))]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// Serving failed.
    #[error("relay server failed: {0}")]
    Io(#[from] std::io::Error),
    /// The store's session state could not be read or restored.
    #[error("{0}")]
    Storage(#[from] storage::StorageError),
}

/// Binds the listener and serves until `shutdown` fires. Returns the bound address once bound
/// through `bound` (useful with port 0).
///
/// # Errors
/// [`ServeError`] for a bad configuration, a busy address, or a server failure.
pub async fn serve(
    config: RelayConfig,
    store: storage::Store,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let listener = bind(&config).await?;
    serve_on(listener, config, store, shutdown).await
}

/// Validates `config` and binds its listener.
///
/// # Errors
/// [`ServeError::Config`] or [`ServeError::Bind`].
pub async fn bind(config: &RelayConfig) -> Result<tokio::net::TcpListener, ServeError> {
    config.validate().map_err(ServeError::Config)?;
    tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| ServeError::Bind {
            addr: config.listen,
            source,
        })
}

/// What to do about a bind error the user can fix.
fn bind_hint(e: &std::io::Error) -> &'static str {
    match e.kind() {
        std::io::ErrorKind::AddrInUse => {
            ": the port is in use (another relay or `machine-mcp up` may run there); choose another with --listen, e.g. --listen 127.0.0.1:0 for any free port"
        }
        _ => "",
    }
}

/// Serves on an already bound listener until `shutdown` fires. Beside the router it runs the
/// metrics listener (`--metrics-listen`) and one sweeper task: the hub's sweep and the revoked
/// links every second, expired OAuth state every `OAUTH_SWEEP_INTERVAL` (10 min), stored rows
/// every `STORE_SWEEP_INTERVAL` (30 s). On stop the store's write queue is flushed.
///
/// # Errors
/// [`ServeError::Io`] when serving fails.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    mut config: RelayConfig,
    store: storage::Store,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    if let Ok(addr) = listener.local_addr() {
        config.listen = addr;
    }
    let state = AppState::open(store, config).await?;
    let sweeper = {
        let (hub, store) = (state.hub.clone(), state.store.clone());
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            let mut oauth = tokio::time::interval(OAUTH_SWEEP_INTERVAL);
            let mut rows = tokio::time::interval(STORE_SWEEP_INTERVAL);
            let mut revocations = None;
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        hub.sweep();
                        link::close_revoked(&hub, &store, &mut revocations).await;
                    }
                    _ = oauth.tick() => sweep_oauth(&store).await,
                    _ = rows.tick() => {
                        if let Some(w) = hub.durable() {
                            let _ = w.send(storage::StoreWrite::Sweep { now: storage::now() });
                        }
                    }
                    _ = stop.cancelled() => break,
                }
            }
        })
    };
    let app = router(state.clone());
    let metrics_server = match state.config.metrics_listen {
        Some(addr) => {
            let metrics_listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| ServeError::Bind { addr, source })?;
            let app = Router::new()
                .route("/metrics", get(ops::metrics))
                .route("/healthz", get(ops::healthz))
                .with_state(state.clone());
            let stop = shutdown.clone();
            let caps = server::ConnectionCaps::new(state.config.connections);
            let metrics = state.metrics.clone();
            Some(tokio::spawn(async move {
                server::serve(metrics_listener, app, caps, metrics, stop).await
            }))
        }
        None => None,
    };
    let caps = state.admission.clients.clone();
    let metrics = state.metrics.clone();
    let durable = state.hub.durable().cloned();
    drop(state);
    let result = server::serve(listener, app, caps, metrics, shutdown.clone()).await;
    if let Some(m) = metrics_server {
        let _ = m.await;
    }
    sweeper.abort();
    if let Some(w) = durable
        && !w.flush(STORE_FLUSH_ON_STOP).await
    {
        tracing::warn!(
            "the relay store did not take every queued session and stream write within {} s; a restart may miss the last of them",
            STORE_FLUSH_ON_STOP.as_secs()
        );
    }
    result.map_err(ServeError::Io)
}
