//! The relay's HTTP server: accepting connections within bounds, and serving each with hyper.
//!
//! `axum::serve` has no connection limits and no read timeouts, so a client that opens
//! connections and sends nothing, half a header, or a slow body would hold them forever (20,000
//! idle connections exhaust the open-file limit). Here:
//! - at most [`ConnectionLimits::total`] connections at once, and at most
//!   [`ConnectionLimits::per_address`] from one client address (loopback peers, typically a
//!   reverse proxy on the same host, count only against the total); a connection past a cap is
//!   closed at once, before anything is read;
//! - HTTP/1.1 (what reverse proxies and MCP clients speak); request headers must arrive within
//!   [`REQUEST_HEADER_READ_TIMEOUT`] of the connection or of the previous response, which also
//!   bounds how long an idle keep-alive connection is kept (hyper's header timer runs while it
//!   waits for the next request); bodies are read with their own timeout by the handlers that read them
//!   (the MCP endpoints and the OAuth endpoints, through [`read_body`]), after the request was authenticated from its headers;
//! - `TCP_NODELAY` on every connection (a small response written in two pieces otherwise waits
//!   for the client's delayed ACK, 40 ms per call; BENCHMARKS.md relay section);
//! - each request carries its peer address as `ConnectInfo<SocketAddr>` (throttles).

use std::{collections::HashMap, net::IpAddr, sync::Arc, time::Duration};

use lock::Lock;

use axum::{Router, extract::ConnectInfo};
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    service::TowerToHyperService,
};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::metrics::Metrics;
use protocol::limits::{REQUEST_BODY_READ_TIMEOUT, REQUEST_HEADER_READ_TIMEOUT};

pub use crate::config::ConnectionLimits;

/// Open connections, in all and per address.
#[derive(Debug, Default)]
struct Connections {
    total: usize,
    by_address: HashMap<IpAddr, usize>,
}

/// A connection's place, given back when dropped.
#[derive(Debug)]
pub struct Place {
    table: Arc<Lock<Connections>>,
    address: IpAddr,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut t = self.table.lock();
        t.total = t.total.saturating_sub(1);
        if let Some(n) = t.by_address.get_mut(&self.address) {
            *n -= 1;
            if *n == 0 {
                t.by_address.remove(&self.address);
            }
        }
    }
}

/// The connections one listener (or the daemon sockets still authenticating) may hold at once:
/// the table of open ones and its bounds. Clones share the table.
#[derive(Debug, Clone)]
pub struct ConnectionCaps {
    table: Arc<Lock<Connections>>,
    limits: ConnectionLimits,
}

impl ConnectionCaps {
    /// An empty table bounded by `limits`.
    pub fn new(limits: ConnectionLimits) -> Self {
        Self {
            table: Arc::default(),
            limits,
        }
    }

    /// Takes a place for a connection from `address`, or `None` when a cap is reached (in all,
    /// or per non-loopback address).
    pub fn admit(&self, address: IpAddr) -> Option<Place> {
        let mut t = self.table.lock();
        if t.total >= self.limits.total {
            return None;
        }
        let from = t.by_address.get(&address).copied().unwrap_or(0);
        if !address.is_loopback() && from >= self.limits.per_address {
            return None;
        }
        t.total += 1;
        *t.by_address.entry(address).or_insert(0) += 1;
        Some(Place {
            table: self.table.clone(),
            address,
        })
    }
}

/// Serves `app` on `listener` until `shutdown` fires, then stops accepting, asks every
/// connection to finish (graceful shutdown) and waits for them. Connections take a place in
/// `caps` (one past a cap is closed at once) and are counted in `metrics`.
///
/// # Errors
/// An accept error that is not about one connection (the listener itself failed).
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    caps: ConnectionCaps,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let tracker = tokio_util::task::TaskTracker::new();
    loop {
        let (tcp, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    // EMFILE and the like: wait a moment rather than spin (the caps keep us
                    // below the open-file limit, which `main` raises at start).
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        let Some(place) = caps.admit(peer.ip()) else {
            Metrics::add(&metrics.connections_refused, 1);
            drop(tcp);
            continue;
        };
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY on a client connection");
        }
        let app = app.clone();
        let stop = shutdown.clone();
        let metrics = metrics.clone();
        tracker.spawn(async move {
            let _place = place;
            Metrics::add(&metrics.connections_open, 1);
            let service =
                tower::service_fn(move |mut req: axum::http::Request<hyper::body::Incoming>| {
                    req.extensions_mut().insert(ConnectInfo(peer));
                    app.clone().oneshot(req.map(axum::body::Body::new))
                });
            // HTTP/1.1 only: the protocol sniffing of an HTTP/1-or-2 server waits for the first
            // bytes without any timeout, so a silent connection was held forever.
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(REQUEST_HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(tcp), TowerToHyperService::new(service))
                .with_upgrades();
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::trace!(error = %e, "connection ended with an error");
                    }
                }
                _ = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
            Metrics::add(&metrics.connections_open, -1);
        });
    }
    tracker.close();
    tracker.wait().await;
    Ok(())
}

/// Why a request body could not be read ([`read_body`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// Longer than the limit (bytes).
    TooLarge(usize),
    /// Not complete within [`REQUEST_BODY_READ_TIMEOUT`].
    Timeout,
    /// The connection failed or the body was malformed (the message says how).
    Broken(String),
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyError::TooLarge(n) => write!(f, "the request body is larger than {n} bytes"),
            BodyError::Timeout => write!(
                f,
                "the request body did not arrive within {} s",
                REQUEST_BODY_READ_TIMEOUT.as_secs()
            ),
            BodyError::Broken(e) => write!(f, "the request body could not be read: {e}"),
        }
    }
}

/// Reads a request body of at most `limit` bytes within [`REQUEST_BODY_READ_TIMEOUT`]: every
/// endpoint that reads a body reads it with this, after checking the request's headers (so an
/// unauthenticated or slow client holds neither memory nor a connection for long).
///
/// # Errors
/// [`BodyError`].
pub async fn read_body(
    body: axum::body::Body,
    limit: usize,
) -> Result<axum::body::Bytes, BodyError> {
    match tokio::time::timeout(REQUEST_BODY_READ_TIMEOUT, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(b)) => Ok(b),
        Ok(Err(e)) => {
            let mut src: Option<&(dyn std::error::Error + 'static)> = Some(&e);
            while let Some(s) = src {
                if s.is::<http_body_util::LengthLimitError>() {
                    return Err(BodyError::TooLarge(limit));
                }
                src = s.source();
            }
            Err(BodyError::Broken(e.to_string()))
        }
        Err(_) => Err(BodyError::Timeout),
    }
}

/// Accept errors that concern one connection only (RFC-less, per `std::io` kinds); the
/// listener goes on.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_capped_in_all_and_per_address_and_given_back() {
        let limits = ConnectionLimits {
            total: 3,
            per_address: 2,
        };
        let caps = ConnectionCaps::new(limits);
        let a: IpAddr = "203.0.113.1".parse().unwrap();
        let b: IpAddr = "203.0.113.2".parse().unwrap();
        let p1 = caps.admit(a).unwrap();
        let _p2 = caps.admit(a).unwrap();
        assert!(caps.admit(a).is_none(), "per address");
        let _p3 = caps.admit(b).unwrap();
        assert!(caps.admit(b).is_none(), "in all");
        drop(p1);
        assert!(caps.admit(b).is_some(), "a place was given back");
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let caps = ConnectionCaps::new(limits);
        let places: Vec<_> = (0..3).filter_map(|_| caps.admit(lo)).collect();
        assert_eq!(
            places.len(),
            3,
            "loopback peers count only against the total"
        );
    }
}
