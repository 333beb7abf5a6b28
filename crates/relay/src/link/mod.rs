//! `/daemon/v1/connect`: the relay end of the daemon link (DESIGN §5), and `/daemon/v1/enroll`.
//!
//! A socket is a candidate until it has: sent a `hello` within the hello deadline whose
//! signature verifies against a device key registered for its bridge (over the transcript of
//! scheme, relay origin, challenge, bridge, instance and time); answered a `probe` through its
//! real send path; and received `resume` and `ready` within the readiness deadline. Only then does
//! it become the bridge's active daemon and is the incumbent closed (invariant 3). A socket silent
//! for the liveness timeout is dead; its sessions wait for the same instance (invariant 4).
//!
//! The route drives the [`Hub`] of this node directly: a daemon's socket is local to the node
//! that holds it. This file holds the route and the socket's life (handshake, steady state);
//! `socket` the reading of frames and the unverified read budget, `writer` the writing of them,
//! `hello` the hello check and enrollment, `revoked` what a revocation ends.

mod hello;
mod revoked;
mod socket;
mod writer;

use std::{net::SocketAddr, sync::Arc, time::Duration};

use axum::{
    extract::{ConnectInfo, FromRef, Request, State},
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use futures_util::StreamExt;
use hyper_util::rt::TokioIo;
use tokio::{sync::mpsc, time::Instant};
use tokio_tungstenite::{
    WebSocketStream,
    tungstenite::{
        handshake::derive_accept_key,
        protocol::{Role, WebSocketConfig},
    },
};

use crate::limits::{DAEMON_SOCKET_READ_BUFFER_BYTES, UNVERIFIED_DAEMON_SOCKET_MAX_BYTES};
use protocol::{
    frame::{
        CloseCode, DaemonFrame, PROTOCOL_VERSION, REVISION_CATALOG_FRAME, RelayFrame, now_unix_ms,
    },
    limits::{DAEMON_SEQ_WINDOW, RELAY_FRAME_MAX_BYTES},
};

pub(crate) use hello::HELLO_REFUSED;
use hello::{enroll, verify_hello};
pub(crate) use revoked::close_revoked;
use socket::{
    Budget, Incoming, STOPPED_BY_DAEMON, Unlock, Ws, frame_name, next_frame, sends_close_frame,
};

use crate::{
    admission::Admission,
    config::RelayConfig,
    hub::{Delivery, Held, Hub, Link, LinkOrigin, LinkTx, Outbound},
    metrics::Metrics,
    storage::Store,
};

/// Frames queued per socket before the link counts as congested.
const LINK_QUEUE: usize = 4096;

/// What the daemon socket route uses of the application state: the bridges' routing state on
/// this node (whose daemons it serves), admission (Host and Origin, the places of unverified
/// sockets), the store (device keys, enrollment), the configuration and the metrics.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    hub: Arc<Hub>,
    admission: Arc<Admission>,
    store: Store,
    config: Arc<RelayConfig>,
    metrics: Arc<Metrics>,
}

impl<S> FromRef<S> for Node
where
    Arc<Hub>: FromRef<S>,
    Arc<Admission>: FromRef<S>,
    Store: FromRef<S>,
    Arc<RelayConfig>: FromRef<S>,
    Arc<Metrics>: FromRef<S>,
{
    fn from_ref(state: &S) -> Self {
        Self {
            hub: FromRef::from_ref(state),
            admission: FromRef::from_ref(state),
            store: FromRef::from_ref(state),
            config: FromRef::from_ref(state),
            metrics: FromRef::from_ref(state),
        }
    }
}

/// `GET /daemon/v1/connect`: checks `Host` (loopback listeners: loopback names and the public
/// host) and `Origin` (a browser's page may not open daemon sockets: only the relay's own origin
/// is allowed when one is sent), takes one of the places of unverified sockets
/// ([`crate::limits::UNVERIFIED_DAEMON_SOCKETS_MAX`],
/// [`crate::limits::UNVERIFIED_DAEMON_SOCKETS_PER_ADDRESS`]; 503 when none
/// is free) and upgrades to a WebSocket (RFC 6455 §4.2.2) whose reads are capped at
/// [`UNVERIFIED_DAEMON_SOCKET_MAX_BYTES`] until its hello is verified.
pub(crate) async fn connect(
    State(node): State<Node>,
    peer: Option<axum::Extension<ConnectInfo<SocketAddr>>>,
    mut request: Request,
) -> Response {
    let refuse = |status: StatusCode, why: &str| (status, format!("{why}\n")).into_response();
    let headers = request.headers();
    if !node.admission.host_allowed(headers) {
        return refuse(
            StatusCode::FORBIDDEN,
            "Host header not allowed on this listener",
        );
    }
    if let Some(o) = headers.get(header::ORIGIN)
        && !o.to_str().is_ok_and(|o| node.admission.own_origin(o))
    {
        return refuse(
            StatusCode::FORBIDDEN,
            "Origin not allowed for daemon sockets",
        );
    }
    let has = |name: header::HeaderName, want: &str| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|v| v.trim().eq_ignore_ascii_case(want))
    };
    if !has(header::UPGRADE, "websocket") || !has(header::CONNECTION, "upgrade") {
        return refuse(
            StatusCode::UPGRADE_REQUIRED,
            "this endpoint takes a WebSocket upgrade",
        );
    }
    if !has(header::SEC_WEBSOCKET_VERSION, "13") {
        let mut r = refuse(
            StatusCode::UPGRADE_REQUIRED,
            "WebSocket version 13 is required",
        );
        r.headers_mut().insert(
            header::SEC_WEBSOCKET_VERSION,
            HeaderValue::from_static("13"),
        );
        return r;
    }
    let Some(key) = headers
        .get(header::SEC_WEBSOCKET_KEY)
        .map(|k| k.as_bytes().to_vec())
    else {
        return refuse(StatusCode::BAD_REQUEST, "Sec-WebSocket-Key is required");
    };
    let address = peer
        .as_ref()
        .map_or(std::net::IpAddr::from([127, 0, 0, 1]), |p| p.0.0.ip());
    let Some(place) = node.admission.daemons.admit(address) else {
        Metrics::add(&node.metrics.sockets_refused, 1);
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many daemon sockets are authenticating; retry shortly",
        );
    };
    let upgrade = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        let upgraded = match upgrade.await {
            Ok(u) => u,
            Err(e) => {
                tracing::debug!(error = %e, "a daemon socket upgrade failed");
                return;
            }
        };
        let (io, gate) = Budget::new(TokioIo::new(upgraded), UNVERIFIED_DAEMON_SOCKET_MAX_BYTES);
        let config = WebSocketConfig::default()
            .read_buffer_size(DAEMON_SOCKET_READ_BUFFER_BYTES)
            .max_message_size(Some(RELAY_FRAME_MAX_BYTES))
            .max_frame_size(Some(RELAY_FRAME_MAX_BYTES));
        let ws = WebSocketStream::from_raw_socket(io, Role::Server, Some(config)).await;
        run(
            node,
            ws,
            Unlock {
                gate,
                place: Some(place),
            },
        )
        .await;
    });
    let mut r = StatusCode::SWITCHING_PROTOCOLS.into_response();
    let h = r.headers_mut();
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    if let Ok(v) = HeaderValue::from_str(&derive_accept_key(&key)) {
        h.insert(header::SEC_WEBSOCKET_ACCEPT, v);
    }
    r
}

async fn run(node: Node, socket: Ws, mut unlock: Unlock) {
    Metrics::add(&node.metrics.sockets_candidate, 1);
    let (sink, mut stream) = socket.split();
    let (tx, rx) = mpsc::channel::<Outbound>(LINK_QUEUE);
    let mut writer = tokio::spawn(writer::write_frames(sink, rx));
    let link_tx = LinkTx::new(tx);
    let mut promoted = false;
    let outcome = session(&node, &link_tx, &mut stream, &mut promoted, &mut unlock).await;
    if !promoted {
        Metrics::add(&node.metrics.sockets_candidate, -1);
    }
    if let Err((code, reason)) = &outcome {
        tracing::info!(code = code.code(), %reason, "daemon socket closed");
        if sends_close_frame(*code) {
            link_tx.close(*code, reason);
        }
    }
    drop(link_tx);
    // The writer ends after its Close frame; one stuck on a peer that reads nothing is stopped,
    // which drops the socket (a closed socket is gone within a bounded time).
    if tokio::time::timeout(Duration::from_secs(2), &mut writer)
        .await
        .is_err()
    {
        writer.abort();
    }
}

async fn session(
    node: &Node,
    tx: &LinkTx,
    stream: &mut Incoming,
    promoted: &mut bool,
    unlock: &mut Unlock,
) -> Result<(), (CloseCode, String)> {
    let timing = node.config.timing;
    // The hello deadline runs from the upgrade, whatever the socket sends meanwhile.
    let hello_by = Instant::now() + timing.hello_deadline;
    // 1. welcome
    let challenge = crate::auth::random_secret("");
    let _ = tx.try_send(RelayFrame::Welcome {
        protocol: PROTOCOL_VERSION,
        server: "machine-mcp-relay".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        challenge: challenge.clone(),
        expires_at: now_unix_ms() + timing.hello_deadline.as_millis() as u64,
        revision: protocol::frame::LINK_REVISION,
    });
    // 2. hello
    let hello = next_frame(stream, hello_by).await.map_err(|(c, r)| {
        if c == CloseCode::NotReady {
            (
                CloseCode::Unauthenticated,
                "daemon hello timeout".to_owned(),
            )
        } else {
            (c, r)
        }
    })?;
    // The daemon's clock minus ours, low by the hello's one-way latency (see `hub::delivery`).
    let hello_at = now_unix_ms() as i64;
    let (protocol, bridge, instance_id, key_id, timestamp, signature, version, servers, revision) =
        match hello {
            DaemonFrame::Hello {
                protocol,
                bridge,
                instance_id,
                key_id,
                timestamp,
                signature,
                version,
                servers,
                revision,
            } => (
                protocol,
                bridge,
                instance_id,
                key_id,
                timestamp,
                signature,
                version,
                servers,
                revision,
            ),
            DaemonFrame::Enroll { code, public_key } => {
                return enroll(node, tx, &code, &public_key).await;
            }
            _ => return Err((CloseCode::Protocol, "expected hello".into())),
        };
    if protocol != PROTOCOL_VERSION {
        return Err((
            CloseCode::Protocol,
            format!("unsupported link protocol {protocol} (this relay speaks {PROTOCOL_VERSION})"),
        ));
    }
    verify_hello(
        node,
        &challenge,
        bridge.as_str(),
        instance_id.as_str(),
        &key_id,
        timestamp,
        &signature,
    )
    .await
    .map_err(|(code, why)| {
        tracing::info!(%bridge, %key_id, reason = %why, "refused a daemon hello");
        (code, HELLO_REFUSED.to_owned())
    })?;
    unlock.verified();
    tracing::info!(%bridge, instance = %instance_id, daemon_version = %version, revision, "daemon authenticated");
    let _ = tx.try_send(RelayFrame::HelloAck {
        bridge: bridge.clone(),
    });
    let b = node.hub.bridge(bridge.as_str()).await;
    // 3-5. probe, resume, ready, within the readiness deadline.
    let deadline = Instant::now() + timing.readiness_deadline;
    let probe_id = crate::auth::random_id("probe_");
    let _ = tx.try_send(RelayFrame::Probe {
        id: probe_id.clone(),
    });
    // From revision 3 the catalog comes in its own frame, before the probe result.
    let mut servers = (revision < REVISION_CATALOG_FRAME).then_some(servers);
    loop {
        match next_frame(stream, deadline).await? {
            DaemonFrame::Catalog { servers: s } if servers.is_none() => servers = Some(s),
            DaemonFrame::ProbeResult { id } if id == probe_id => {
                if servers.is_none() {
                    return Err((CloseCode::Protocol, "probe_result before catalog".into()));
                }
                break;
            }
            DaemonFrame::Heartbeat { seq } => {
                let _ = tx.try_send(RelayFrame::HeartbeatAck { seq });
            }
            DaemonFrame::HeartbeatAck { .. } => {}
            other => {
                return Err((
                    CloseCode::Protocol,
                    format!("unexpected frame before ready: {}", frame_name(&other)),
                ));
            }
        }
    }
    node.hub.set_catalog(&b, servers.unwrap_or_default()).await;
    let (sessions, requests) = node.hub.resume_set(&b, &instance_id);
    let resumed = sessions.len();
    let _ = tx.try_send(RelayFrame::Resume { sessions, requests });
    let _ = tx.try_send(RelayFrame::Ready {});
    let link = Link {
        id: node.hub.next_link_id(),
        instance_id: instance_id.clone(),
        revision,
        key_id: key_id.clone(),
        clock_skew_ms: timestamp as i64 - hello_at,
        tx: tx.clone(),
    };
    let link_id = link.id;
    if let Some(old) = node.hub.promote(&b, link) {
        old.tx
            .close(CloseCode::Replaced, "replaced by verified daemon");
    }
    *promoted = true;
    Metrics::add(&node.metrics.sockets_candidate, -1);
    Metrics::add(&node.metrics.sockets_ready, 1);
    tracing::info!(bridge = %b.name, instance = %instance_id, resumed, "daemon ready");
    let from = LinkOrigin {
        bridge: &b.name,
        instance: &instance_id,
    };
    let result = serve(node, &b, from, tx, stream, timing.liveness_timeout).await;
    Metrics::add(&node.metrics.sockets_ready, -1);
    if matches!(&result, Err((_, r)) if r == STOPPED_BY_DAEMON) {
        // Nothing to wait for: the requests still open get their answer now, not after the
        // reconnect grace.
        node.hub.link_stopped(&b, link_id);
        tracing::info!(bridge = %b.name, instance = %instance_id, "the daemon stopped; its requests in flight are answered, its handshake-era sessions reopen on its next instance");
    } else {
        node.hub.link_lost(&b, link_id);
        tracing::info!(bridge = %b.name, instance = %instance_id, "daemon socket lost; its sessions wait for the same instance");
    }
    result
}

/// Serves a ready socket until it ends: routes its frames within `from` only, until the socket
/// is lost, breaks the protocol, or is closed by the relay ([`LinkTx::close`]: replaced, its
/// key revoked), after which nothing it sends is read.
async fn serve(
    node: &Node,
    bridge: &crate::hub::Bridge,
    from: LinkOrigin<'_>,
    tx: &LinkTx,
    stream: &mut Incoming,
    liveness: Duration,
) -> Result<(), (CloseCode, String)> {
    loop {
        let next = tokio::select! {
            biased;
            () = tx.closing() => return Ok(()),
            f = next_frame(stream, Instant::now() + liveness) => f,
        };
        let frame = next.map_err(|(c, r)| {
            if c == CloseCode::NotReady {
                (
                    CloseCode::GoingAway,
                    "daemon silent past the liveness timeout".to_owned(),
                )
            } else {
                (c, r)
            }
        })?;
        match frame {
            DaemonFrame::Rpc {
                sid,
                seq,
                related,
                message,
            } => {
                // Acknowledged whatever became of it: a replay, or a message for a session that
                // has ended, is as committed as a routed one (unmatched ones are counted).
                if node.hub.deliver(
                    from,
                    &sid,
                    seq,
                    related.as_ref(),
                    Arc::unwrap_or_clone(message),
                ) == Delivery::OutOfWindow
                {
                    return Err((
                        CloseCode::Protocol,
                        format!(
                            "rpc seq {seq} is more than {DAEMON_SEQ_WINDOW} past the session's last"
                        ),
                    ));
                }
                if tx
                    .try_send(RelayFrame::Ack {
                        sid: sid.clone(),
                        seq,
                    })
                    .is_err()
                {
                    return Err((CloseCode::Internal, "link queue full".into()));
                }
                // A call ends with its answer: `close` follows the `ack` of the response.
                if let Some(Held::Call(c)) = node.hub.exchange_from(from, &sid) {
                    node.hub.close_if_answered(&c);
                }
            }
            DaemonFrame::Closed { sid, reason } => node.hub.daemon_closed(from, &sid, &reason),
            DaemonFrame::Accepted { sid, id } => node.hub.accepted(from, &sid, &id),
            DaemonFrame::Heartbeat { seq } => {
                let _ = tx.try_send(RelayFrame::HeartbeatAck { seq });
            }
            DaemonFrame::HeartbeatAck { .. } | DaemonFrame::ProbeResult { .. } => {}
            DaemonFrame::Catalog { servers } => {
                node.hub.set_catalog(bridge, servers).await;
            }
            DaemonFrame::Hello { .. } | DaemonFrame::Enroll { .. } => {
                return Err((CloseCode::Protocol, "duplicate hello".into()));
            }
        }
    }
}
