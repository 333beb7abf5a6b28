//! The daemon end of the relay link (DESIGN §5): connect, authenticate, become ready, serve,
//! and reconnect.
//!
//! One attempt walks `connect → handshake → probe/resume → ready → serve`, each step bounded by
//! its deadline. Losing the link detaches the hosted sessions, which keep running and keep their
//! unacknowledged output for the reconnect grace; a verified reconnect of this same instance gets
//! `resume` naming what the relay still awaits. Reconnects back off `min(1 s·2^n, 15 s)` with
//! jitter; an outage is reported after 10 s and then at growing intervals, and its end once.
//! Errors a retry cannot fix (the relay refused the key, speaks another protocol version, or
//! another daemon instance took over the bridge) stop the daemon with an actionable message.

use std::{sync::Arc, time::Duration};

use futures_util::{SinkExt, StreamExt};
use tokio::{net::TcpStream, sync::mpsc, time::Instant};
use tokio_tungstenite::{
    MaybeTlsStream, WebSocketStream,
    tungstenite::{
        Message, protocol::WebSocketConfig, protocol::frame::coding::CloseCode as WsCloseCode,
    },
};
use tokio_util::sync::CancellationToken;

use protocol::{
    frame::{
        CONNECT_PATH, CloseCode, DaemonFrame, PROTOCOL_VERSION, RelayFrame, ServerInfo,
        hello_transcript, now_unix_ms,
    },
    head::Head,
    ids::{BridgeId, InstanceId, SessionId},
    jsonrpc::RequestId,
    limits,
};
mod probe;
mod writer;

pub use probe::{HandshakeError, TlsSummary, probe_handshake, tls_handshake};

use crate::{
    backoff::{self, Warnings},
    identity::DeviceKey,
    sessions::HostedSessions,
    status::LinkStatus,
};

/// Timing of the link; production uses the contract (DESIGN §7), tests may shorten it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkTiming {
    /// Interval of application heartbeats; one unanswered by the next means the link is dead.
    pub heartbeat: Duration,
    /// Silence after which the link is dead.
    pub silence: Duration,
    /// Time allowed for TCP, TLS and the WebSocket upgrade.
    pub connect: Duration,
    /// Time allowed for `welcome` and `hello_ack`.
    pub hello: Duration,
    /// Time allowed from `hello_ack` to `ready`.
    pub readiness: Duration,
    /// How long hosted sessions wait for a reconnect before they are ended.
    pub grace: Duration,
}

impl Default for LinkTiming {
    fn default() -> Self {
        Self {
            heartbeat: crate::limits::HEARTBEAT_INTERVAL,
            silence: crate::limits::HEARTBEAT_SILENCE_TIMEOUT,
            connect: crate::limits::CONNECT_ATTEMPT_TIMEOUT,
            hello: limits::HELLO_DEADLINE,
            readiness: limits::READINESS_DEADLINE,
            grace: limits::RECONNECT_GRACE,
        }
    }
}

/// What the link needs.
#[derive(Debug)]
pub struct LinkConfig {
    /// Relay base URL (its public URL: the origin is signed into every hello).
    pub relay: url::Url,
    /// Where to open the WebSocket when that is not `relay` (`machine-mcp up` published through
    /// a tunnel connects to its own loopback listener and still signs the public origin).
    pub connect: Option<url::Url>,
    /// The bridge this daemon enrolled as.
    pub bridge: BridgeId,
    /// The registered key's id.
    pub key_id: String,
    /// The device key.
    pub key: Arc<DeviceKey>,
    /// The catalog sent in every hello.
    pub servers: Vec<ServerInfo>,
    /// Timing.
    pub timing: LinkTiming,
    /// Set to true while the link is ready, false while it is not.
    pub ready: Option<tokio::sync::watch::Sender<bool>>,
    /// The link's state for the status endpoint, kept up to date.
    pub status: Arc<LinkStatus>,
}

/// Why the link stopped for good.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// Retrying cannot help; the message says what to do.
    #[error("{0}")]
    Fatal(String),
}

enum Attempt {
    /// Lost after having been ready (or never got there): retry.
    Retry(String),
    /// Stop (shutdown requested).
    Stop,
    Fatal(String),
}

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// The relay's WebSocket URL for `base` (`http` → `ws`, `https` → `wss`).
pub fn connect_url(base: &url::Url) -> Result<url::Url, String> {
    let mut u = base.clone();
    let scheme = match base.scheme() {
        "http" | "ws" => "ws",
        "https" | "wss" => "wss",
        s => return Err(format!("relay URL scheme {s:?} is not http(s)")),
    };
    u.set_scheme(scheme)
        .map_err(|_| "bad relay URL".to_owned())?;
    u.set_path(CONNECT_PATH);
    u.set_query(None);
    Ok(u)
}

/// Keeps the daemon connected until `shutdown` fires or a fatal error.
///
/// # Errors
/// [`LinkError::Fatal`] when the relay refuses this daemon for a reason a retry cannot fix.
pub async fn run(
    config: LinkConfig,
    sessions: Arc<HostedSessions>,
    shutdown: CancellationToken,
) -> Result<(), LinkError> {
    let instance_id = InstanceId::new(format!("inst_{}", uuid::Uuid::new_v4().simple()));
    tracing::info!(relay = %config.relay, bridge = %config.bridge, instance = %instance_id, "connecting to the relay");
    let mut attempt: u32 = 0;
    let mut outage: Option<(Instant, Warnings, bool)> = None;
    let mut lost_at: Option<Instant> = None;
    loop {
        let ready_flag = config.ready.clone();
        let mut on_ready = || {
            if let Some(r) = &ready_flag {
                r.send_replace(true);
            }
            config.status.ready();
            attempt = 0;
            lost_at = None;
            if let Some((start, _, warned)) = outage.take() {
                let secs = start.elapsed().as_secs();
                if warned {
                    tracing::warn!(
                        after_s = secs,
                        "reconnected to the relay; the outage is over"
                    );
                } else {
                    tracing::info!(after_s = secs, "reconnected to the relay");
                }
            } else {
                tracing::info!("connected to the relay and ready");
            }
        };
        let why =
            match attempt_once(&config, &instance_id, &sessions, &shutdown, &mut on_ready).await {
                Attempt::Stop => {
                    sessions.close_all();
                    return Ok(());
                }
                Attempt::Fatal(m) => {
                    sessions.close_all();
                    return Err(LinkError::Fatal(m));
                }
                Attempt::Retry(why) => why,
            };
        sessions.detach();
        if let Some(r) = &config.ready {
            r.send_replace(false);
        }
        let now = Instant::now();
        let lost = *lost_at.get_or_insert(now);
        let (start, warnings, warned) =
            outage.get_or_insert_with(|| (now, Warnings::default(), false));
        if warnings.due(now.duration_since(*start)) {
            *warned = true;
            tracing::warn!(relay = %config.relay, down_s = now.duration_since(*start).as_secs(), reason = %why, "the relay is unreachable; retrying");
        } else {
            tracing::debug!(reason = %why, "relay link attempt failed");
        }
        let delay = backoff::delay(attempt, rand::random::<f64>());
        config
            .status
            .backing_off(&why, u64::try_from(delay.as_millis()).unwrap_or(u64::MAX));
        attempt = attempt.saturating_add(1);
        let grace_end = lost + config.timing.grace;
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = shutdown.cancelled() => {
                sessions.close_all();
                return Ok(());
            }
        }
        if Instant::now() >= grace_end && !sessions.is_empty() {
            tracing::warn!(
                "the relay did not come back within the reconnect grace; ending the sessions it carried"
            );
            sessions.close_all();
        }
    }
}

async fn attempt_once(
    config: &LinkConfig,
    instance_id: &InstanceId,
    sessions: &Arc<HostedSessions>,
    shutdown: &CancellationToken,
    on_ready: &mut impl FnMut(),
) -> Attempt {
    config.status.connecting();
    let url = match connect_url(config.connect.as_ref().unwrap_or(&config.relay)) {
        Ok(u) => u,
        Err(e) => return Attempt::Fatal(e),
    };
    let ws_config = WebSocketConfig::default()
        .max_message_size(Some(limits::RELAY_FRAME_MAX_BYTES))
        .max_frame_size(Some(limits::RELAY_FRAME_MAX_BYTES));
    // disable_nagle: relayed messages are small and latency-bound; with Nagle each waits for
    // the relay's delayed ACK (40 ms per call, BENCHMARKS.md relay section).
    let connect = tokio_tungstenite::connect_async_with_config(url.as_str(), Some(ws_config), true);
    let ws = tokio::select! {
        r = tokio::time::timeout(config.timing.connect, connect) => match r {
            Err(_) => return Attempt::Retry("connect timed out".into()),
            Ok(Err(e)) => return Attempt::Retry(format!("connect failed: {e}")),
            Ok(Ok((ws, _))) => ws,
        },
        _ = shutdown.cancelled() => return Attempt::Stop,
    };
    let (sink, mut stream) = ws.split();
    // Two lanes to one writer: the sessions' messages, and the link's own frames (handshake,
    // `accepted`, heartbeats), written first whenever both wait, so that an `accepted` or a
    // heartbeat waits behind at most the one frame being written, never behind a backlog of
    // results (the relay retracts a request not accepted within 4 s).
    let (out_tx, out_rx) = mpsc::channel::<DaemonFrame>(4096);
    let (urgent_tx, urgent_rx) = mpsc::channel::<DaemonFrame>(URGENT_QUEUE);
    let close = CancellationToken::new();
    let mut writer = tokio::spawn(writer::write_frames(sink, urgent_rx, out_rx, close.clone()));
    let r = handshake_and_serve(
        config,
        instance_id,
        sessions,
        shutdown,
        on_ready,
        &mut stream,
        &Lanes {
            urgent: urgent_tx,
            frames: out_tx,
        },
    )
    .await;
    if matches!(r, Attempt::Stop) {
        // A clean stop: what is queued is written, then a Close frame (1000), so the relay
        // sees a daemon that left, not a connection lost (1006).
        close.cancel();
        if tokio::time::timeout(CLOSE_FLUSH, &mut writer)
            .await
            .is_err()
        {
            writer.abort();
        }
    } else {
        writer.abort();
    }
    r
}

/// How long a stopping link may take to write what is queued and its Close frame.
const CLOSE_FLUSH: Duration = Duration::from_secs(2);

/// Reads the next relay frame within `within`.
async fn next(
    stream: &mut futures_util::stream::SplitStream<Ws>,
    within: Duration,
) -> Result<RelayFrame, Attempt> {
    loop {
        let msg = match tokio::time::timeout(within, stream.next()).await {
            Err(_) => return Err(Attempt::Retry("the relay went silent".into())),
            Ok(None) => return Err(Attempt::Retry("the relay closed the connection".into())),
            Ok(Some(Err(e))) => return Err(Attempt::Retry(format!("connection error: {e}"))),
            Ok(Some(Ok(m))) => m,
        };
        match msg {
            Message::Text(t) => {
                return serde_json::from_str(t.as_str())
                    .map_err(|e| Attempt::Retry(format!("unreadable frame from the relay: {e}")));
            }
            Message::Close(frame) => {
                return Err(classify_close(
                    frame.map(|f| (u16::from(f.code), f.reason.to_string())),
                ));
            }
            Message::Binary(_) => {
                return Err(Attempt::Retry("the relay sent a binary frame".into()));
            }
            _ => {}
        }
    }
}

fn classify_close(close: Option<(u16, String)>) -> Attempt {
    match close.map(|(code, reason)| (code, CloseCode::from_code(code), reason)) {
        Some((_, Some(CloseCode::Unauthenticated), reason)) => Attempt::Fatal(format!(
            "the relay refused this daemon: {reason}. Enroll again with `machine-mcp connect --enroll CODE` (get a code with `machine-mcp relay bridge add NAME`)"
        )),
        Some((_, Some(CloseCode::Replaced), _)) => Attempt::Fatal(
            "another daemon instance took over this bridge (the relay replaced this connection); stopping so the two do not fight".into(),
        ),
        Some((_, Some(CloseCode::Protocol), reason)) => Attempt::Fatal(format!("the relay reported a protocol error: {reason}")),
        Some((code, _, reason)) => Attempt::Retry(format!("the relay closed the connection ({code} {reason})")),
        None => Attempt::Retry("the relay closed the connection".into()),
    }
}

/// The two lanes of a link's writer ([`writer::write_frames`]).
struct Lanes {
    /// The link's own frames: handshake, `accepted`, heartbeats.
    urgent: mpsc::Sender<DaemonFrame>,
    /// The hosted sessions' messages.
    frames: mpsc::Sender<DaemonFrame>,
}

/// How long a link whose send queue overflowed waits at most for the queue to drain before it
/// reconnects anyway.
const DRAIN_MAX: Duration = Duration::from_secs(10);

/// Frames the link's own lane (handshake, `accepted`, heartbeats) holds at most.
const URGENT_QUEUE: usize = 1024;

async fn handshake_and_serve(
    config: &LinkConfig,
    instance_id: &InstanceId,
    sessions: &Arc<HostedSessions>,
    shutdown: &CancellationToken,
    on_ready: &mut impl FnMut(),
    stream: &mut futures_util::stream::SplitStream<Ws>,
    lanes: &Lanes,
) -> Attempt {
    let t = config.timing;
    let out = &lanes.urgent;
    // welcome → hello → hello_ack
    let welcome = match next(stream, t.hello).await {
        Ok(f) => f,
        Err(a) => return a,
    };
    let RelayFrame::Welcome {
        protocol,
        challenge,
        revision: relay_revision,
        ..
    } = welcome
    else {
        return Attempt::Retry("the relay did not start with welcome".into());
    };
    if protocol != PROTOCOL_VERSION {
        return Attempt::Fatal(format!(
            "the relay speaks link protocol {protocol}; this daemon speaks {PROTOCOL_VERSION}: upgrade the older side"
        ));
    }
    let catalog_frame = relay_revision >= protocol::frame::REVISION_CATALOG_FRAME;
    // Revision 4: the relay awaits an `accepted` for every request this daemon takes.
    let confirm = relay_revision >= protocol::frame::REVISION_DELIVERY;
    let origin = config.relay.origin().ascii_serialization();
    let timestamp = now_unix_ms();
    let transcript = hello_transcript(
        &origin,
        &challenge,
        config.bridge.as_str(),
        instance_id.as_str(),
        timestamp,
    );
    let hello = DaemonFrame::Hello {
        protocol: PROTOCOL_VERSION,
        bridge: config.bridge.clone(),
        instance_id: instance_id.clone(),
        key_id: config.key_id.clone(),
        timestamp,
        signature: config.key.sign(&transcript),
        version: runtime::version().into(),
        // A relay of revision 3 takes the catalog after the hello is verified, so that the
        // hello stays within what it reads from an unauthenticated socket.
        servers: if catalog_frame {
            Vec::new()
        } else {
            config.servers.clone()
        },
        revision: protocol::frame::LINK_REVISION,
    };
    if out.send(hello).await.is_err() {
        return Attempt::Retry("the connection closed".into());
    }
    match next(stream, t.hello).await {
        Ok(RelayFrame::HelloAck { .. }) => config.status.probing(),
        Ok(_) => return Attempt::Retry("expected hello_ack".into()),
        Err(a) => return a,
    }
    if catalog_frame
        && out
            .send(DaemonFrame::Catalog {
                servers: config.servers.clone(),
            })
            .await
            .is_err()
    {
        return Attempt::Retry("the connection closed".into());
    }
    // probe → probe_result (through the normal send path), resume, ready
    let deadline = Instant::now() + t.readiness;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match next(stream, left).await {
            Ok(RelayFrame::Probe { id }) => {
                if out.send(DaemonFrame::ProbeResult { id }).await.is_err() {
                    return Attempt::Retry("the connection closed".into());
                }
            }
            Ok(RelayFrame::Resume {
                sessions: keep,
                requests,
            }) => {
                sessions.resume(&keep, &requests, lanes.frames.clone());
            }
            Ok(RelayFrame::Ready {}) => break,
            Ok(RelayFrame::HeartbeatAck { .. }) => {}
            Ok(other) => {
                return Attempt::Retry(format!("unexpected frame before ready: {other:?}"));
            }
            Err(a) => return a,
        }
    }
    on_ready();
    serve(
        t,
        sessions,
        shutdown,
        stream,
        lanes,
        confirm,
        &config.status,
    )
    .await
}

/// Whether to run the client message of `sid` whose head is `head`, which the relay sent with
/// `deliver_by` (link revision 4), read at `now_ms` (Unix ms, this machine's clock). Anything
/// but a request (a message with a `method` and a non-null `id`) runs. While the daemon is
/// `stopping` no request is admitted (the relay retracts it and tells its client that it was
/// not delivered). A request read after its `deliver_by` is dropped unanswered: the relay has
/// retracted it, or will, and told its client that it was not delivered. Otherwise, when
/// `confirm` (the relay is of revision 4), `accepted` is queued before the request is
/// dispatched, so it precedes everything the request causes; a request whose `accepted` cannot
/// be queued (the link's queue is full) is dropped too, since the relay would retract it.
fn admit(
    sid: &SessionId,
    head: &Head,
    deliver_by: Option<u64>,
    confirm: bool,
    stopping: bool,
    out: &mpsc::Sender<DaemonFrame>,
    now_ms: u64,
) -> bool {
    let Some(id) = head.id().filter(|_| head.has_method()) else {
        return true;
    };
    if stopping {
        tracing::debug!("not admitting a request: the daemon is stopping");
        return false;
    }
    if let Some(by) = deliver_by
        && now_ms > by
    {
        tracing::warn!(sid = %sid.log_tag(), late_ms = now_ms - by, "dropped a request read after its delivery deadline (this machine was asleep, frozen or busy); the relay told its client it was not delivered");
        return false;
    }
    if confirm
        && out
            .try_send(DaemonFrame::Accepted {
                sid: sid.clone(),
                id: RequestId::new(id.clone()),
            })
            .is_err()
    {
        tracing::warn!(sid = %sid.log_tag(), "dropped a request: the link's send queue is full");
        return false;
    }
    true
}

/// Hands a steady-state frame for the hosted sessions to them, admitting requests first
/// ([`admit`], at `now_ms`, none while `stopping`). Returns the frames that are not for the
/// sessions.
fn dispatch(
    sessions: &Arc<HostedSessions>,
    out: &mpsc::Sender<DaemonFrame>,
    confirm: bool,
    stopping: bool,
    frame: RelayFrame,
    now_ms: u64,
) -> Option<RelayFrame> {
    match frame {
        RelayFrame::Open {
            sid,
            server,
            principal,
            role,
            initialize,
        } => sessions.open(&sid, &server, &principal, &role, initialize),
        RelayFrame::Rpc {
            sid,
            message,
            deliver_by,
        } => {
            let head = Head::of(&message);
            if admit(&sid, &head, deliver_by, confirm, stopping, out, now_ms) {
                sessions.rpc(&sid, message);
            }
        }
        RelayFrame::Ack { sid, seq } => sessions.ack(&sid, seq),
        RelayFrame::Close { sid } => sessions.close(&sid),
        RelayFrame::Call {
            sid,
            server,
            principal,
            role,
            message,
            deliver_by,
        } => {
            let head = Head::of(&message);
            if admit(&sid, &head, deliver_by, confirm, stopping, out, now_ms) {
                sessions.call(&sid, &server, &principal, &role, message);
            }
        }
        other => return Some(other),
    }
    None
}

async fn serve(
    t: LinkTiming,
    sessions: &Arc<HostedSessions>,
    shutdown: &CancellationToken,
    stream: &mut futures_util::stream::SplitStream<Ws>,
    lanes: &Lanes,
    confirm: bool,
    status: &LinkStatus,
) -> Attempt {
    let (out, frames) = (&lanes.urgent, &lanes.frames);
    // Set once a stop is asked for: no request is admitted any more (the relay retracts it and
    // tells its client it was not delivered), calls in flight get up to DAEMON_STOP_DRAIN to
    // answer, then the link closes cleanly.
    let mut stopping_since: Option<Instant> = None;
    let mut beat = tokio::time::interval(t.heartbeat);
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    beat.tick().await;
    let mut seq: u64 = 0;
    let mut unanswered: Option<u64> = None;
    let broken = sessions.link_broken();
    let mut drain = tokio::time::interval(Duration::from_millis(20));
    let mut draining_since: Option<Instant> = None;
    loop {
        tokio::select! {
            () = broken.cancelled(), if draining_since.is_none() => {
                draining_since = Some(Instant::now());
            }
            _ = drain.tick(), if draining_since.is_some() || stopping_since.is_some() => {
                let written = frames.capacity() == frames.max_capacity();
                if let Some(since) = stopping_since {
                    let n = sessions.requests_in_flight();
                    status.draining(n);
                    if n == 0 && written {
                        return Attempt::Stop;
                    }
                    if since.elapsed() >= crate::limits::DAEMON_STOP_DRAIN {
                        tracing::warn!(in_flight = n, "stopping: calls still in flight after the drain bound; their clients get an error");
                        return Attempt::Stop;
                    }
                } else if written || draining_since.is_some_and(|t| t.elapsed() > DRAIN_MAX) {
                    // Reconnect once what was queued is written (its acknowledgements then
                    // come before the replay), or after a bound.
                    return Attempt::Retry("the link's send queue was full: reconnecting so that what did not fit is sent again".into());
                }
            }
            frame = next(stream, t.silence) => {
                let frame = match frame {
                    Ok(f) => f,
                    Err(a) => return a,
                };
                let stopping = stopping_since.is_some();
                let Some(frame) = dispatch(sessions, out, confirm, stopping, frame, now_unix_ms()) else {
                    continue;
                };
                match frame {
                    RelayFrame::Heartbeat { seq } => { let _ = out.try_send(DaemonFrame::HeartbeatAck { seq }); }
                    RelayFrame::HeartbeatAck { seq: s } => if unanswered == Some(s) {
                        unanswered = None;
                        status.heartbeat();
                    },
                    RelayFrame::Probe { id } => { let _ = out.try_send(DaemonFrame::ProbeResult { id }); }
                    other => tracing::debug!(?other, "ignoring an unexpected frame"),
                }
            }
            _ = beat.tick() => {
                if unanswered.is_some() {
                    return Attempt::Retry("a heartbeat went unanswered (half-open connection)".into());
                }
                seq += 1;
                unanswered = Some(seq);
                if out.try_send(DaemonFrame::Heartbeat { seq }).is_err() {
                    return Attempt::Retry("the link's send queue is full".into());
                }
            }
            () = shutdown.cancelled(), if stopping_since.is_none() => {
                stopping_since = Some(Instant::now());
                status.stopping();
                let n = sessions.requests_in_flight();
                status.draining(n);
                if n > 0 {
                    tracing::info!(in_flight = n, "stopping: letting calls in flight finish (up to {} s)", crate::limits::DAEMON_STOP_DRAIN.as_secs());
                }
            }
        }
    }
}

/// Redeems an enrollment `code` at `relay` for `key`; returns `(bridge, key_id)`. A relay that
/// answers the upgrade with HTTP 503 or 429 (busy: too many sockets authenticating at once) is
/// asked again after the reconnect backoff ([`backoff::delay`]), within `timeout`; a refused
/// upgrade does not spend the code (the relay spends it when it reads the `enroll` frame). A
/// relay that spent the code but whose answer was lost answers the same `key` and code again
/// with the same enrollment, so a timed-out enrollment is retried by running it again.
///
/// # Errors
/// A message saying why: the relay is unreachable, refused the code, broke the protocol, or
/// stayed busy or silent for `timeout`.
pub async fn enroll(
    relay: &url::Url,
    code: &str,
    key: &DeviceKey,
    timeout: Duration,
) -> Result<(String, String), String> {
    let url = connect_url(relay)?;
    let mut busy = None;
    let work = async {
        let mut attempt = 0;
        let mut ws = loop {
            match tokio_tungstenite::connect_async(url.as_str()).await {
                Ok((ws, _)) => {
                    busy = None;
                    break ws;
                }
                Err(tokio_tungstenite::tungstenite::Error::Http(r))
                    if matches!(r.status().as_u16(), 429 | 503) =>
                {
                    busy = Some(r.status());
                    tokio::time::sleep(backoff::delay(attempt, rand::random::<f64>())).await;
                    attempt += 1;
                }
                Err(e) => return Err(format!("cannot reach the relay at {relay}: {e}")),
            }
        };
        let enroll = DaemonFrame::Enroll {
            code: code.to_owned(),
            public_key: key.public_key(),
        };
        let text = serde_json::to_string(&enroll).map_err(|e| e.to_string())?;
        let mut sent = false;
        while let Some(msg) = ws.next().await {
            match msg.map_err(|e| format!("relay connection error: {e}"))? {
                Message::Text(t) => match serde_json::from_str::<RelayFrame>(t.as_str()) {
                    Ok(RelayFrame::Welcome { .. }) if !sent => {
                        ws.send(Message::Text(text.clone().into()))
                            .await
                            .map_err(|e| e.to_string())?;
                        sent = true;
                    }
                    Ok(RelayFrame::Enrolled { bridge, key_id }) => {
                        return Ok((bridge.as_str().to_owned(), key_id));
                    }
                    _ => return Err("unexpected answer from the relay".to_owned()),
                },
                Message::Close(Some(f)) if f.code != WsCloseCode::Normal => {
                    return Err(format!("the relay refused the enrollment: {}", f.reason));
                }
                Message::Close(_) => break,
                _ => {}
            }
        }
        Err("the relay closed the connection without enrolling".to_owned())
    };
    let outcome = tokio::time::timeout(timeout, work).await;
    outcome.map_err(|_| match busy {
        Some(status) => format!(
            "the relay at {relay} stayed busy ({status}) for {} s: retry the enrollment shortly",
            timeout.as_secs()
        ),
        None => format!(
            "the enrollment timed out after {} s: run the same command again (the code stays valid for this machine's key until it expires)",
            timeout.as_secs()
        ),
    })?
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn hosted() -> (tempfile::TempDir, Arc<HostedSessions>) {
        let dir = tempfile::tempdir().unwrap();
        let rt = runtime::Runtime::new(runtime::RuntimeConfig {
            workspace: dir.path().into(),
            policy: runtime::policy::Policy::profile(runtime::Profile::Full),
            default_yield_after: None,
            remote: false,
            state_dir: None,
            own_files: Vec::new(),
        })
        .unwrap();
        (dir, HostedSessions::new(Arc::new(rt), Vec::new()))
    }

    fn call(sid: &str, id: u64, deliver_by: Option<u64>) -> RelayFrame {
        RelayFrame::Call {
            sid: sid.into(),
            server: protocol::frame::RUNTIME_SERVER.into(),
            principal: "tok_1".into(),
            role: "owner".into(),
            message: json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": {"_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {}
            }}}),
            deliver_by,
        }
    }

    /// The next frame, within a generous bound.
    async fn next_frame(rx: &mut mpsc::Receiver<DaemonFrame>) -> DaemonFrame {
        tokio::time::timeout(Duration::from_secs(20), rx.recv())
            .await
            .expect("a frame in time")
            .expect("link open")
    }

    #[tokio::test]
    async fn a_request_read_after_its_deliver_by_is_not_run_and_not_accepted() {
        let (_dir, sessions) = hosted();
        let (out, mut rx) = mpsc::channel(64);
        sessions.resume(&[], &[], out.clone());
        let now = 1_800_000_000_000;
        // Read 1 ms past its deadline: dropped before anything runs.
        assert!(
            dispatch(
                &sessions,
                &out,
                true,
                false,
                call("c_late", 1, Some(now - 1)),
                now
            )
            .is_none()
        );
        assert!(rx.try_recv().is_err(), "no accepted, no answer");
        assert!(sessions.is_empty(), "the call was never hosted");
        // A session's request is refused the same way: the unknown session would otherwise be
        // answered with `closed`.
        let rpc = RelayFrame::Rpc {
            sid: "s_late".into(),
            message: json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {}}),
            deliver_by: Some(now - 1),
        };
        assert!(dispatch(&sessions, &out, true, false, rpc, now).is_none());
        assert!(rx.try_recv().is_err(), "no accepted, no closed");
        // Read at its deadline: accepted first, then run and answered.
        assert!(
            dispatch(
                &sessions,
                &out,
                true,
                false,
                call("c_now", 3, Some(now)),
                now
            )
            .is_none()
        );
        assert_eq!(
            next_frame(&mut rx).await,
            DaemonFrame::Accepted {
                sid: "c_now".into(),
                id: RequestId::new(json!(3)),
            }
        );
        match next_frame(&mut rx).await {
            DaemonFrame::Rpc { sid, message, .. } => {
                assert_eq!(sid.as_str(), "c_now");
                assert_eq!(message["id"], 3);
                assert!(message["result"]["tools"].is_array(), "{message}");
            }
            other => panic!("expected the answer, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_relay_before_revision_4_gets_no_accepted() {
        let (_dir, sessions) = hosted();
        let (out, mut rx) = mpsc::channel(64);
        sessions.resume(&[], &[], out.clone());
        assert!(
            dispatch(
                &sessions,
                &out,
                false,
                false,
                call("c1", 1, None),
                now_unix_ms()
            )
            .is_none()
        );
        match next_frame(&mut rx).await {
            DaemonFrame::Rpc { sid, message, .. } => {
                assert_eq!(sid.as_str(), "c1");
                assert_eq!(message["id"], 1);
            }
            other => panic!("expected the answer first, got {other:?}"),
        }
        // A notification is never refused nor confirmed, whatever its deliver_by.
        let n = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 9}});
        let n = Head::of(&n);
        assert!(admit(
            &"c1".into(),
            &n,
            Some(0),
            true,
            false,
            &out,
            now_unix_ms()
        ));
        assert!(rx.try_recv().is_err());
    }

    /// A listener standing in for the relay, its URL, and a device key (in the directory kept
    /// with it).
    async fn enrollment_setup() -> (
        tokio::net::TcpListener,
        url::Url,
        DeviceKey,
        tempfile::TempDir,
    ) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let relay = format!("http://{}/", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let key = DeviceKey::load_or_create(dir.path()).unwrap();
        (listener, relay, key, dir)
    }

    /// Answers the next connection to `listener` as a busy relay does: HTTP 503 to its upgrade.
    async fn refuse_as_busy(listener: &tokio::net::TcpListener) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let (mut s, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut b = [0u8; 1];
            if s.read_exact(&mut b).await.is_err() {
                return;
            }
            head.push(b[0]);
        }
        let busy =
            b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
        let _ = s.write_all(busy).await;
    }

    /// A relay busy authenticating other sockets answers the upgrade with HTTP 503; enrolling
    /// asks again after the backoff instead of giving up, and redeems the code once let in.
    #[tokio::test]
    async fn enrolling_waits_out_a_busy_relay() {
        let (listener, relay, key, _dir) = enrollment_setup().await;
        let server = tokio::spawn(async move {
            for _ in 0..2 {
                refuse_as_busy(&listener).await;
            }
            let (s, _) = listener.accept().await.unwrap();
            let mut ws = tokio_tungstenite::accept_async(s).await.unwrap();
            let welcome = json!({"type": "welcome", "protocol": PROTOCOL_VERSION, "server": "test",
                "version": "0", "challenge": "c", "expires_at": 0});
            ws.send(Message::Text(welcome.to_string().into()))
                .await
                .unwrap();
            let enroll = ws.next().await.unwrap().unwrap();
            let enroll: serde_json::Value =
                serde_json::from_str(enroll.to_text().unwrap()).unwrap();
            assert_eq!(enroll["code"], "mbe_code");
            let enrolled = json!({"type": "enrolled", "bridge": "b1", "key_id": "k1"});
            ws.send(Message::Text(enrolled.to_string().into()))
                .await
                .unwrap();
        });
        let got = enroll(&relay, "mbe_code", &key, Duration::from_secs(20)).await;
        assert_eq!(got, Ok(("b1".to_owned(), "k1".to_owned())));
        server.await.unwrap();
    }

    /// A relay that stays busy past the enrollment's time is reported as busy, with what to do.
    #[tokio::test]
    async fn a_relay_busy_for_the_whole_enrollment_is_named_as_busy() {
        let (listener, relay, key, _dir) = enrollment_setup().await;
        tokio::spawn(async move {
            loop {
                refuse_as_busy(&listener).await;
            }
        });
        let err = enroll(&relay, "mbe_code", &key, Duration::from_secs(2))
            .await
            .unwrap_err();
        assert!(err.contains("stayed busy (503"), "{err}");
        assert!(err.contains("retry the enrollment shortly"), "{err}");
    }

    /// A relay that let the daemon in after being busy, then did not answer in time, is not
    /// reported as busy: the code may have been spent.
    #[tokio::test]
    async fn a_relay_silent_after_letting_in_is_not_named_as_busy() {
        let (listener, relay, key, _dir) = enrollment_setup().await;
        tokio::spawn(async move {
            refuse_as_busy(&listener).await;
            let (s, _) = listener.accept().await.unwrap();
            let _ws = tokio_tungstenite::accept_async(s).await.unwrap();
            std::future::pending::<()>().await;
        });
        let err = enroll(&relay, "mbe_code", &key, Duration::from_secs(3))
            .await
            .unwrap_err();
        assert!(
            err.starts_with("the enrollment timed out after 3 s: run the same command again"),
            "{err}"
        );
    }
}
