//! [`Admission`]: what a request must pass before the relay routes anything for it — the `Host`
//! and `Origin` rules ([`crate::origin`]), the caller's credentials (none on a loopback listener
//! without auth, a static token, or an OAuth access token: [`crate::oauth::bearer`]), the
//! bridge's existence — the connection caps (client connections of the main listener, the
//! daemon sockets still authenticating), the budget of request body bytes in flight
//! ([`crate::budget`]) and where the bodies it admits are received ([`crate::spill`]).
//!
//! Rules: the checks run in the documented order (`docs/relay-protocol.md`, "The relay's MCP
//! endpoints": Host, Origin, credentials, bridge), each refusal with its own status; a request's
//! headers are checked before its body is read. Admission knows nothing of the bridges' live
//! state: what comes after it is the router's ([`crate::hub::Router`]).

use axum::http::{HeaderMap, Method, StatusCode, header};
use std::sync::Arc;

use crate::{limits::UNVERIFIED_DAEMON_SOCKETS_MAX, limits::UNVERIFIED_DAEMON_SOCKETS_PER_ADDRESS};

use crate::{
    auth::{BridgePrincipal, Role},
    budget::BodyBudget,
    config::{AuthMode, ConnectionLimits, RelayConfig},
    error::HttpError,
    metrics::Metrics,
    origin,
    server::ConnectionCaps,
    spill::Spill,
    storage::Store,
};

/// Daemon sockets that have not authenticated yet, in all and per address.
const UNVERIFIED_LIMITS: ConnectionLimits = ConnectionLimits {
    total: UNVERIFIED_DAEMON_SOCKETS_MAX,
    per_address: UNVERIFIED_DAEMON_SOCKETS_PER_ADDRESS,
};

/// The admission substate: configuration, the store (credentials, bridges), the metrics it
/// counts in, and the connection caps.
#[derive(Debug)]
pub(crate) struct Admission {
    config: Arc<RelayConfig>,
    store: Store,
    metrics: Arc<Metrics>,
    /// Client connections of the main listener ([`RelayConfig::connections`]).
    pub(crate) clients: ConnectionCaps,
    /// Daemon sockets that have not authenticated yet ([`UNVERIFIED_DAEMON_SOCKETS_MAX`] in all,
    /// [`UNVERIFIED_DAEMON_SOCKETS_PER_ADDRESS`] per address).
    pub(crate) daemons: ConnectionCaps,
    /// MCP request body bytes in flight, per holder and in all.
    pub(crate) bodies: BodyBudget,
    /// Where MCP request bodies are received: in memory, or spilled past the threshold.
    pub(crate) spill: Spill,
}

impl Admission {
    /// The admission of a relay with `config` over `store`, counting in `metrics`.
    pub(crate) fn new(config: Arc<RelayConfig>, store: Store, metrics: Arc<Metrics>) -> Self {
        Self {
            clients: ConnectionCaps::new(config.connections),
            daemons: ConnectionCaps::new(UNVERIFIED_LIMITS),
            bodies: BodyBudget::for_relay(config.spill_dir.is_some()),
            spill: Spill::new(config.spill_dir.clone(), metrics.clone()),
            config,
            store,
            metrics,
        }
    }

    /// Whether the request's `Host` is acceptable ([`origin::host_allowed`]).
    pub(crate) fn host_allowed(&self, headers: &HeaderMap) -> bool {
        origin::host_allowed(&self.config, headers)
    }

    /// Whether `origin` is the relay's own ([`origin::own_origin`]).
    pub(crate) fn own_origin(&self, origin: &str) -> bool {
        origin::own_origin(&self.config, origin)
    }

    /// Whether a request with `Origin: origin` may reach the MCP and OAuth endpoints
    /// ([`origin::origin_allowed`]).
    pub(crate) fn origin_allowed(&self, origin: &str) -> bool {
        origin::origin_allowed(&self.config, origin)
    }

    /// The checks every MCP request passes, for the endpoint of `bridge` and `server` and a
    /// request of `method` (the route's): `Host`, `Origin`, credentials, the bridge. Counts the
    /// request in `machine_mcp_relay_http_requests_total`.
    ///
    /// # Errors
    /// 403 for a `Host` or `Origin` not allowed; 401 or 403 from the credential check
    /// ([`crate::oauth::bearer::principal`]: a credential of a bridge the store does not hold
    /// is unknown); without authentication, 404 for a bridge the store does not hold (or cannot
    /// be asked about).
    pub(crate) async fn admit(
        &self,
        bridge: &str,
        server: &str,
        method: &Method,
        headers: &HeaderMap,
    ) -> Result<BridgePrincipal, HttpError> {
        self.metrics
            .http_requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if !self.host_allowed(headers) {
            return Err(HttpError::new(
                StatusCode::FORBIDDEN,
                "Host header not allowed on this listener",
            ));
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let ok = origin.to_str().is_ok_and(|o| self.origin_allowed(o));
            if !ok {
                return Err(HttpError::new(StatusCode::FORBIDDEN, "Origin not allowed"));
            }
        }
        match self.config.auth {
            AuthMode::None => {
                if !self
                    .store
                    .bridges()
                    .bridge_exists(bridge)
                    .await
                    .unwrap_or(false)
                {
                    return Err(HttpError::new(StatusCode::NOT_FOUND, "no such bridge"));
                }
                Ok(BridgePrincipal {
                    id: "anonymous".into(),
                    bridge: bridge.to_owned(),
                    role: Role::Owner,
                    credential: "anonymous".into(),
                })
            }
            // A credential names its bridge, and the principal check refuses one of another
            // bridge; the store holds a credential only while its bridge exists (foreign keys
            // with `ON DELETE CASCADE`), so an admitted credential's bridge exists: no second read.
            AuthMode::Token | AuthMode::OAuth => {
                let server = (server != protocol::frame::RUNTIME_SERVER).then_some(server);
                crate::oauth::bearer::principal(
                    &self.config,
                    &self.store,
                    bridge,
                    server,
                    method,
                    headers,
                )
                .await
            }
        }
    }
}
