//! `/daemon/v1/connect`: the relay end of the daemon link (DESIGN §5), and `/daemon/v1/enroll`.
//!
//! A socket is a candidate until it has: sent a `hello` within the hello deadline whose
//! signature verifies against a device key registered for its bridge (over the transcript of
//! scheme, relay origin, challenge, bridge, instance and time); answered a `probe` through its
//! real send path; and received `resume` and `ready` within the readiness deadline. Only then does
//! it become the bridge's active daemon and is the incumbent closed (invariant 3). A socket silent
//! for the liveness timeout is dead; its sessions wait for the same instance (invariant 4).

use std::{
    net::SocketAddr,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use axum::{
    extract::{ConnectInfo, FromRef, Request, State},
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use futures_util::{SinkExt, StreamExt};
use hyper_util::rt::TokioIo;
use p256::ecdsa::{Signature, VerifyingKey, signature::Verifier};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    sync::mpsc,
    time::Instant,
};
use tokio_tungstenite::{
    WebSocketStream,
    tungstenite::{
        Message,
        handshake::derive_accept_key,
        protocol::{CloseFrame, Role, WebSocketConfig, frame::coding::CloseCode as WsCloseCode},
    },
};

use protocol::{
    frame::{
        CloseCode, DaemonFrame, PROTOCOL_VERSION, REVISION_CATALOG_FRAME, RelayFrame,
        hello_transcript, now_unix_ms,
    },
    limits::{DAEMON_SEQ_WINDOW, RELAY_FRAME_MAX_BYTES, UNVERIFIED_DAEMON_SOCKET_MAX_BYTES},
};

use crate::{
    admission::Admission,
    config::RelayConfig,
    hub::{Delivery, Hub, Link, LinkOrigin, LinkTx, Outbound},
    metrics::Metrics,
    server::Place,
    storage::{StorageError, Store},
};

/// Frames queued per socket before the link counts as congested.
const LINK_QUEUE: usize = 4096;
/// Largest clock difference accepted in a hello's timestamp.
const HELLO_CLOCK_SKEW_MS: u64 = 5 * 60 * 1000;
/// The one close reason of every refused hello, whatever the cause (a reason per cause would tell
/// whether a key id exists); the cause is logged by the relay.
pub(crate) const HELLO_REFUSED: &str =
    "hello refused: the device key, bridge or signature is not valid here (enroll again)";

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
/// ([`protocol::limits::UNVERIFIED_DAEMON_SOCKETS_MAX`],
/// [`protocol::limits::UNVERIFIED_DAEMON_SOCKETS_PER_ADDRESS`]; 503 when none
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

/// An I/O stream whose reads fail once more than a budget of bytes arrived, until opened.
struct Budget<T> {
    inner: T,
    left: usize,
    open: Arc<AtomicBool>,
}

impl<T> Budget<T> {
    fn new(inner: T, budget: usize) -> (Self, Arc<AtomicBool>) {
        let open = Arc::new(AtomicBool::new(false));
        (
            Self {
                inner,
                left: budget,
                open: open.clone(),
            },
            open,
        )
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Budget<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r
            && !self.open.load(Ordering::Relaxed)
        {
            let n = buf.filled().len() - before;
            if n > self.left {
                return Poll::Ready(Err(std::io::Error::other(
                    "an unauthenticated daemon socket sent more than its budget",
                )));
            }
            self.left -= n;
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Budget<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        b: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, b)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// What a socket gives up once its hello is verified: the read budget and its place among the
/// unverified sockets.
struct Unlock {
    gate: Arc<AtomicBool>,
    place: Option<Place>,
}

impl Unlock {
    fn verified(&mut self) {
        self.gate.store(true, Ordering::Relaxed);
        self.place = None;
    }
}

type Ws = WebSocketStream<Budget<TokioIo<hyper::upgrade::Upgraded>>>;

async fn run(node: Node, socket: Ws, mut unlock: Unlock) {
    Metrics::add(&node.metrics.sockets_candidate, 1);
    let (mut sink, mut stream) = socket.split();
    let (tx, mut rx) = mpsc::channel::<Outbound>(LINK_QUEUE);
    let mut writer = tokio::spawn(async move {
        while let Some(out) = rx.recv().await {
            let msg = match out {
                Outbound::Frame(f) => match serde_json::to_string(&f) {
                    Ok(t) => Message::Text(t.into()),
                    Err(_) => continue,
                },
                Outbound::Close(code, reason) => {
                    let _ = sink
                        .send(Message::Close(Some(CloseFrame {
                            code: WsCloseCode::from(code.code()),
                            reason: reason.into(),
                        })))
                        .await;
                    break;
                }
            };
            if sink.send(msg).await.is_err() {
                break;
            }
        }
    });
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

type Incoming = futures_util::stream::SplitStream<Ws>;

/// The end of a socket the daemon closed with 1000: it stopped, and its instance is over.
const STOPPED_BY_DAEMON: &str = "the daemon stopped (close 1000)";

/// Whether a socket ended with `code` gets a Close frame: not 1006, which reports a connection
/// lost without one and must never be sent (RFC 6455 §7.4.1).
fn sends_close_frame(code: CloseCode) -> bool {
    code != CloseCode::Abnormal
}

/// Reads the next daemon frame before `deadline` (pings and pongs do not move it).
async fn next_frame(
    stream: &mut Incoming,
    deadline: Instant,
) -> Result<DaemonFrame, (CloseCode, String)> {
    loop {
        let msg = match tokio::time::timeout_at(deadline, stream.next()).await {
            Err(_) => {
                return Err((
                    CloseCode::NotReady,
                    "timed out waiting for the daemon".into(),
                ));
            }
            Ok(None) => return Err((CloseCode::Normal, "socket closed".into())),
            Ok(Some(Err(e))) => return Err((CloseCode::Abnormal, format!("socket error: {e}"))),
            Ok(Some(Ok(m))) => m,
        };
        match msg {
            Message::Text(t) => {
                return serde_json::from_str(t.as_str())
                    .map_err(|e| (CloseCode::Protocol, format!("unreadable frame: {e}")));
            }
            Message::Binary(_) => {
                return Err((
                    CloseCode::Protocol,
                    "binary frames are not part of the protocol".into(),
                ));
            }
            // 1000 is what a daemon sends when it stops (or reopens its link with new
            // settings): that instance does not come back.
            Message::Close(Some(f)) if u16::from(f.code) == 1000 => {
                return Err((CloseCode::Normal, STOPPED_BY_DAEMON.into()));
            }
            Message::Close(_) => return Err((CloseCode::Normal, "closed by the daemon".into())),
            Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
        }
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
        tracing::info!(bridge = %b.name, instance = %instance_id, "the daemon stopped; its sessions ended");
    } else {
        node.hub.link_lost(&b, link_id);
        tracing::info!(bridge = %b.name, instance = %instance_id, "daemon socket lost; its sessions wait for the same instance");
    }
    result
}

/// Redeems an enrollment code for a device public key, answers `enrolled` and ends the socket.
async fn enroll(
    node: &Node,
    tx: &LinkTx,
    code: &str,
    public_key: &str,
) -> Result<(), (CloseCode, String)> {
    let key_ok = URL_SAFE_NO_PAD
        .decode(public_key)
        .ok()
        .and_then(|b| VerifyingKey::from_sec1_bytes(&b).ok())
        .is_some();
    if !key_ok {
        return Err((
            CloseCode::Protocol,
            "public_key is not a P-256 public key (SEC1, base64url)".into(),
        ));
    }
    match node.store.bridges().enroll(code, public_key).await {
        Ok((bridge, key_id)) => {
            tracing::info!(%bridge, %key_id, "daemon enrolled");
            let told = tx.try_send(RelayFrame::Enrolled {
                bridge: bridge.clone().into(),
                key_id,
            });
            if let Err(e) = told {
                // The code is used up; the daemon learns nothing and must enroll again.
                tracing::warn!(%bridge, error = %e, "a daemon enrolled but its socket could not be told");
            }
            tx.close(CloseCode::Normal, "enrolled");
            Ok(())
        }
        Err(StorageError::NotFound(m)) => Err((CloseCode::Unauthenticated, m)),
        Err(e) => {
            tracing::error!(error = %e, "enrollment failed");
            Err((CloseCode::Internal, "enrollment failed".into()))
        }
    }
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
                if node.hub.deliver(from, &sid, seq, related.as_ref(), message)
                    == Delivery::OutOfWindow
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
                if let Some(s) = node.hub.session_from(from, &sid) {
                    node.hub.close_if_answered(&s);
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

async fn verify_hello(
    node: &Node,
    challenge: &str,
    bridge: &str,
    instance_id: &str,
    key_id: &str,
    timestamp: u64,
    signature: &str,
) -> Result<(), (CloseCode, String)> {
    let deny = |why: &str| (CloseCode::Unauthenticated, why.to_owned());
    if instance_id.is_empty() || instance_id.len() > 128 {
        return Err(deny("bad instance id"));
    }
    if now_unix_ms().abs_diff(timestamp) > HELLO_CLOCK_SKEW_MS {
        return Err(deny("hello timestamp is too far from the relay's clock"));
    }
    let key = node
        .store
        .bridges()
        .device_key(key_id)
        .await
        .map_err(|_| deny("key lookup failed"))?
        .filter(|k| k.bridge == bridge)
        .ok_or_else(|| deny("unknown device key for this bridge (enroll again)"))?;
    let pk = URL_SAFE_NO_PAD
        .decode(&key.public_key)
        .ok()
        .and_then(|b| VerifyingKey::from_sec1_bytes(&b).ok())
        .ok_or_else(|| deny("stored device key is unreadable"))?;
    let sig = URL_SAFE_NO_PAD
        .decode(signature)
        .ok()
        .and_then(|b| Signature::from_slice(&b).ok())
        .ok_or_else(|| deny("malformed signature"))?;
    let transcript = hello_transcript(
        &node.config.origin(),
        challenge,
        bridge,
        instance_id,
        timestamp,
    );
    pk.verify(&transcript, &sig)
        .map_err(|_| deny("hello signature does not verify"))
}

fn frame_name(f: &DaemonFrame) -> &'static str {
    match f {
        DaemonFrame::Hello { .. } => "hello",
        DaemonFrame::Enroll { .. } => "enroll",
        DaemonFrame::Catalog { .. } => "catalog",
        DaemonFrame::ProbeResult { .. } => "probe_result",
        DaemonFrame::Rpc { .. } => "rpc",
        DaemonFrame::Closed { .. } => "closed",
        DaemonFrame::Accepted { .. } => "accepted",
        DaemonFrame::Heartbeat { .. } => "heartbeat",
        DaemonFrame::HeartbeatAck { .. } => "heartbeat_ack",
    }
}

/// Closes every daemon link whose device key was revoked (or whose bridge was removed), and ends
/// every session whose credential was revoked (a token, an OAuth client or grant, an account
/// changed or removed), since the last check; `last` is the
/// [`crate::storage::RevocationStore::revocation_epoch`] seen then. Called by the relay's sweeper
/// every second; one query while nothing changed.
pub(crate) async fn close_revoked(hub: &Hub, store: &Store, last: &mut Option<i64>) {
    let Ok(epoch) = store.revocations().revocation_epoch().await else {
        return;
    };
    if *last == Some(epoch) {
        return;
    }
    let first = last.is_none();
    *last = Some(epoch);
    if first {
        return;
    }
    for (bridge, link) in hub.active_links() {
        let valid = match store.bridges().device_key(&link.key_id).await {
            Ok(k) => k.is_some_and(|k| k.bridge == bridge.name),
            Err(_) => continue,
        };
        if !valid {
            tracing::warn!(bridge = %bridge.name, key_id = %link.key_id, "closing a daemon whose device key was revoked");
            link.tx.close(CloseCode::Unauthenticated, HELLO_REFUSED);
        }
    }
    let mut live: std::collections::HashMap<String, bool> = std::collections::HashMap::new();
    for s in hub.all_sessions() {
        let credential = s.principal.credential.clone();
        let ok = match live.get(&credential) {
            Some(ok) => *ok,
            None => match store.revocations().credential_live(&credential).await {
                Ok(ok) => *live.entry(credential).or_insert(ok),
                Err(_) => continue,
            },
        };
        if !ok {
            tracing::info!(bridge = %s.bridge.name, "ending a session whose credential was revoked");
            hub.end_session(
                &s.sid,
                protocol::jsonrpc::code::SESSION_NOT_FOUND,
                "the credential of this session was revoked",
                true,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_connection_is_not_answered_with_close_code_1006() {
        assert!(!sends_close_frame(CloseCode::Abnormal));
        for code in CloseCode::ALL
            .into_iter()
            .filter(|c| *c != CloseCode::Abnormal)
        {
            assert!(sends_close_frame(code), "{code:?}");
        }
    }
}
