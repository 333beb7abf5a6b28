//! The relay's HTTP server: accepting connections within bounds, and serving each with hyper.
//!
//! `axum::serve` has no connection limits and no read timeouts, so a client that opens
//! connections and sends nothing, half a header, or a slow body would hold them forever (20,000
//! idle connections exhaust the open-file limit). Here:
//! - at most [`ConnectionLimits::total`] connections at once, and at most
//!   [`ConnectionLimits::per_address`] from one client address (loopback peers, typically a
//!   reverse proxy on the same host, count only against the total; an IPv6 peer counts per /64);
//!   at the cap in all, the oldest connection that has not completed a request head is closed to
//!   admit the new one (idle sockets cannot starve real clients); otherwise a connection past a
//!   cap is closed at once, before anything is read;
//! - HTTP/1.1 (what reverse proxies and MCP clients speak); request headers must arrive within
//!   [`REQUEST_HEADER_READ_TIMEOUT`] of the connection or of the previous response, which also
//!   bounds how long an idle keep-alive connection is kept (hyper's header timer runs while it
//!   waits for the next request); bodies are read with their own timeout by the handlers that read them
//!   (the OAuth endpoints through [`read_body`], the MCP endpoints through the relay's body
//!   receiver, which spills large bodies to disk), after the request was authenticated from its headers;
//! - `TCP_NODELAY` on every connection (a small response written in two pieces otherwise waits
//!   for the client's delayed ACK, 40 ms per call; BENCHMARKS.md relay section);
//! - each request carries its peer address as `ConnectInfo<SocketAddr>` (throttles).

use std::{
    collections::{BTreeMap, HashMap},
    net::{IpAddr, Ipv6Addr},
    sync::Arc,
    time::Duration,
};

use lock::Lock;

use axum::{Router, extract::ConnectInfo};
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    service::TowerToHyperService,
};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::limits::RELAY_STOP_DRAIN;
use crate::metrics::Metrics;
use crate::{limits::REQUEST_BODY_READ_TIMEOUT, limits::REQUEST_HEADER_READ_TIMEOUT};

pub use crate::config::ConnectionLimits;

/// Open connections, in all and per address, and those still waiting for a request head.
#[derive(Debug, Default)]
struct Connections {
    total: usize,
    by_address: HashMap<IpAddr, usize>,
    /// Sheddable connections that have not completed a request head, oldest first (by place
    /// id), each with the signal that closes it.
    headless: BTreeMap<u64, CancellationToken>,
    next_id: u64,
}

/// The key a peer is counted under for the per-address cap: an IPv4 address (IPv4-mapped IPv6
/// peers as their IPv4 address), or an IPv6 peer's /64 (one host commonly holds a whole /64).
fn address_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !u128::from(u64::MAX))),
        },
    }
}

/// A connection's place, given back when dropped.
#[derive(Debug)]
pub struct Place {
    table: Arc<Lock<Connections>>,
    address: IpAddr,
    id: u64,
    shed: CancellationToken,
}

impl Place {
    /// Fires when the connection is shed to admit a newer one (only for places taken with
    /// [`ConnectionCaps::admit_sheddable`] that have not completed a request head).
    pub fn shed(&self) -> &CancellationToken {
        &self.shed
    }

    /// The connection completed a request head: it is no longer sheddable.
    pub fn head_completed(&self) {
        let mut t = self.table.lock();
        t.headless.remove(&self.id);
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut t = self.table.lock();
        t.headless.remove(&self.id);
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

    /// How many places are taken.
    pub fn open(&self) -> usize {
        self.table.lock().total
    }

    /// Takes a place for a connection from `address`, or `None` when a cap is reached (in all,
    /// or per non-loopback address: per IPv4 address, per IPv6 /64).
    pub fn admit(&self, address: IpAddr) -> Option<Place> {
        self.take(address, false)
    }

    /// As [`ConnectionCaps::admit`], for a connection that may be shed until it completes a
    /// request head ([`Place::head_completed`]); its owner closes it when [`Place::shed`] fires.
    /// At the cap in all, the oldest such connection is shed to admit this one (the shed one
    /// keeps its place until it is dropped, so the table may pass the cap by the connections
    /// being closed at that moment).
    pub fn admit_sheddable(&self, address: IpAddr) -> Option<Place> {
        self.take(address, true)
    }

    fn take(&self, address: IpAddr, sheddable: bool) -> Option<Place> {
        let key = address_key(address);
        let mut t = self.table.lock();
        let from = t.by_address.get(&key).copied().unwrap_or(0);
        if !address.is_loopback() && from >= self.limits.per_address {
            return None;
        }
        if t.total >= self.limits.total {
            let oldest = if sheddable {
                t.headless.pop_first()
            } else {
                None
            };
            let (_, victim) = oldest?;
            victim.cancel();
        }
        t.total += 1;
        *t.by_address.entry(key).or_insert(0) += 1;
        let id = t.next_id;
        t.next_id += 1;
        let shed = CancellationToken::new();
        if sheddable {
            t.headless.insert(id, shed.clone());
        }
        Some(Place {
            table: self.table.clone(),
            address: key,
            id,
            shed,
        })
    }
}

/// Serves `app` on `listener` until `shutdown` fires, then closes the listener at once (the port
/// is free), asks every connection to finish (graceful shutdown) and waits for them at most
/// [`RELAY_STOP_DRAIN`]; what is still open then (an SSE stream, a listen stream) is closed.
/// Upgraded connections (daemon sockets) are their handlers' and end with the process.
/// Connections take a place in `caps` (one past a cap is closed at once) and are counted in
/// `metrics`.
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
    // Fires when the drain is over: every connection still open is closed.
    let drained = CancellationToken::new();
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
        let Some(place) = caps.admit_sheddable(peer.ip()) else {
            Metrics::add(&metrics.connections_refused, 1);
            drop(tcp);
            continue;
        };
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY on a client connection");
        }
        let app = app.clone();
        let stop = shutdown.clone();
        let drained = drained.clone();
        let metrics = metrics.clone();
        tracker.spawn(async move {
            let place = Arc::new(place);
            let shed = place.shed().clone();
            Metrics::add(&metrics.connections_open, 1);
            let service =
                tower::service_fn(move |mut req: axum::http::Request<hyper::body::Incoming>| {
                    place.head_completed();
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
                    tokio::select! {
                        _ = conn.as_mut() => {}
                        _ = drained.cancelled() => {}
                    }
                }
                // Shed before it completed a request head: nothing of it was served.
                _ = shed.cancelled() => {}
            }
            Metrics::add(&metrics.connections_open, -1);
        });
    }
    drop(listener);
    tracker.close();
    if tokio::time::timeout(RELAY_STOP_DRAIN, tracker.wait())
        .await
        .is_err()
    {
        tracing::info!(
            open = tracker.len(),
            drain_secs = RELAY_STOP_DRAIN.as_secs(),
            "closing the connections still open after the stop drain"
        );
        drained.cancel();
        tracker.wait().await;
    }
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

/// Reads a request body of at most `limit` bytes within [`REQUEST_BODY_READ_TIMEOUT`], in
/// memory: the OAuth endpoints read theirs with this (the MCP endpoints with the same bounds
/// through a receiver that spills large bodies to disk), after checking the request's headers
/// (so an unauthenticated or slow client holds neither memory nor a connection for long).
///
/// # Errors
/// [`BodyError`].
pub async fn read_body(
    body: axum::body::Body,
    limit: usize,
) -> Result<axum::body::Bytes, BodyError> {
    match tokio::time::timeout(REQUEST_BODY_READ_TIMEOUT, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(b)) => Ok(b),
        Ok(Err(e)) => Err(BodyError::of(&e, limit)),
        Err(_) => Err(BodyError::Timeout),
    }
}

impl BodyError {
    /// The error of a body of at most `limit` bytes that failed with `e` while it was read:
    /// [`BodyError::TooLarge`] when a length limit cut it, [`BodyError::Broken`] otherwise.
    pub(crate) fn of(e: &axum::Error, limit: usize) -> Self {
        let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(s) = src {
            if s.is::<http_body_util::LengthLimitError>() {
                return BodyError::TooLarge(limit);
            }
            src = s.source();
        }
        BodyError::Broken(e.to_string())
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

    /// Regression: one host holds a whole IPv6 /64, and each of its addresses had its
    /// own per-address quota. IPv6 peers are counted per /64 (IPv4-mapped ones as IPv4).
    #[test]
    fn ipv6_peers_are_counted_per_slash_64() {
        let caps = ConnectionCaps::new(ConnectionLimits {
            total: 10,
            per_address: 2,
        });
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let _a = caps.admit(ip("2001:db8:1:2::1")).unwrap();
        let _b = caps.admit(ip("2001:db8:1:2:ffff:ffff:ffff:ffff")).unwrap();
        assert!(caps.admit(ip("2001:db8:1:2::3")).is_none(), "one /64");
        assert!(caps.admit(ip("2001:db8:1:3::1")).is_some(), "another /64");
        let _c = caps.admit(ip("203.0.113.9")).unwrap();
        let _d = caps.admit(ip("::ffff:203.0.113.9")).unwrap();
        assert!(caps.admit(ip("203.0.113.9")).is_none(), "mapped is IPv4");
    }

    /// Reads from `tcp` until EOF or an error, within a deadline; what arrived.
    async fn read_all(tcp: &mut tokio::net::TcpStream) -> Vec<u8> {
        use tokio::io::AsyncReadExt;
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(20), tcp.read_to_end(&mut out)).await;
        out
    }

    /// Regression: at the connection cap, connections that never sent a request head
    /// kept their places until the header timeout and fresh legitimate connections were closed
    /// at accept. Now the oldest connection without a completed request head is shed to admit
    /// the new one; a connection that completed a head is never shed.
    #[tokio::test]
    async fn at_the_cap_the_oldest_connection_without_a_request_head_is_shed() {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route("/", axum::routing::get(|| async { "ok" }));
        let caps = ConnectionCaps::new(ConnectionLimits {
            total: 2,
            per_address: 2,
        });
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(
            listener,
            app,
            caps.clone(),
            Arc::new(Metrics::default()),
            stop.clone(),
        ));
        let connected = |caps: ConnectionCaps, n: usize| async move {
            let end = tokio::time::Instant::now() + Duration::from_secs(20);
            while caps.open() != n {
                assert!(tokio::time::Instant::now() < end, "{} open", caps.open());
                tokio::task::yield_now().await;
            }
        };
        let mut idle_old = tokio::net::TcpStream::connect(addr).await.unwrap();
        connected(caps.clone(), 1).await;
        let mut served = tokio::net::TcpStream::connect(addr).await.unwrap();
        served
            .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
            .await
            .unwrap();
        let mut first = [0u8; 12];
        tokio::io::AsyncReadExt::read_exact(&mut served, &mut first)
            .await
            .unwrap();
        assert_eq!(&first, b"HTTP/1.1 200");
        let mut fresh = tokio::net::TcpStream::connect(addr).await.unwrap();
        fresh
            .write_all(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let answer = String::from_utf8_lossy(&read_all(&mut fresh).await).into_owned();
        assert!(answer.starts_with("HTTP/1.1 200"), "admitted: {answer:?}");
        assert!(
            read_all(&mut idle_old).await.is_empty(),
            "the idle one was shed"
        );
        // The connection that completed a request head kept its place.
        served
            .write_all(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let again = String::from_utf8_lossy(&read_all(&mut served).await).into_owned();
        assert!(again.contains("HTTP/1.1 200"), "{again:?}");
        stop.cancel();
        server.await.unwrap().unwrap();
    }
}
