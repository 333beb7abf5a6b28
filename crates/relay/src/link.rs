//! `/daemon/v1/connect`: the relay end of the daemon link (DESIGN §5), and `/daemon/v1/enroll`.
//!
//! A socket is a candidate until it has: sent a `hello` within the hello deadline whose
//! signature verifies against a device key registered for its bridge (over the transcript of
//! scheme, relay origin, challenge, bridge, instance and time); answered a `probe` through its
//! real send path; and received `resume` and `ready` within the readiness deadline. Only then does
//! it become the bridge's active daemon and is the incumbent closed (invariant 3). A socket silent
//! for the liveness timeout is dead; its sessions wait for the same instance (invariant 4).

use std::{sync::Arc, time::Duration};

use axum::{
    extract::{
        State,
        ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade},
    },
    response::Response,
};
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use futures_util::{SinkExt, StreamExt};
use p256::ecdsa::{Signature, VerifyingKey, signature::Verifier};
use tokio::sync::mpsc;

use protocol::{
    frame::{CloseCode, DaemonFrame, PROTOCOL_VERSION, RelayFrame, hello_transcript, now_unix_ms},
    limits::RELAY_FRAME_MAX_BYTES,
};

use crate::{
    hub::{Hub, Link, LinkTx, Outbound},
    metrics::Metrics,
    storage::StorageError,
};

/// Frames queued per socket before the link counts as congested.
const LINK_QUEUE: usize = 4096;
/// Largest clock difference accepted in a hello's timestamp.
const HELLO_CLOCK_SKEW_MS: u64 = 5 * 60 * 1000;

/// Upgrades a daemon's connection.
pub async fn connect(State(hub): State<Arc<Hub>>, ws: WebSocketUpgrade) -> Response {
    ws.max_message_size(RELAY_FRAME_MAX_BYTES)
        .max_frame_size(RELAY_FRAME_MAX_BYTES)
        .on_upgrade(move |socket| run(hub, socket))
}

async fn run(hub: Arc<Hub>, socket: WebSocket) {
    Metrics::add(&hub.metrics.sockets_candidate, 1);
    let (mut sink, mut stream) = socket.split();
    let (tx, mut rx) = mpsc::channel::<Outbound>(LINK_QUEUE);
    let writer = tokio::spawn(async move {
        while let Some(out) = rx.recv().await {
            let msg = match out {
                Outbound::Frame(f) => match serde_json::to_string(&f) {
                    Ok(t) => Message::Text(t.into()),
                    Err(_) => continue,
                },
                Outbound::Close(code, reason) => {
                    let _ = sink
                        .send(Message::Close(Some(CloseFrame {
                            code: code.code(),
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
    let outcome = session(&hub, &link_tx, &mut stream, &mut promoted).await;
    if !promoted {
        Metrics::add(&hub.metrics.sockets_candidate, -1);
    }
    if let Err((code, reason)) = &outcome {
        tracing::info!(code = code.code(), %reason, "daemon socket closed");
        link_tx.close(*code, reason);
    }
    drop(link_tx);
    let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
}

type Incoming = futures_util::stream::SplitStream<WebSocket>;

/// Reads the next daemon frame within `within`.
async fn next_frame(
    stream: &mut Incoming,
    within: Duration,
) -> Result<DaemonFrame, (CloseCode, String)> {
    loop {
        let msg = match tokio::time::timeout(within, stream.next()).await {
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
            Message::Close(_) => return Err((CloseCode::Normal, "closed by the daemon".into())),
            Message::Ping(_) | Message::Pong(_) => {}
        }
    }
}

async fn session(
    hub: &Arc<Hub>,
    tx: &LinkTx,
    stream: &mut Incoming,
    promoted: &mut bool,
) -> Result<(), (CloseCode, String)> {
    let timing = hub.config.timing;
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
    let hello = next_frame(stream, timing.hello_deadline)
        .await
        .map_err(|(c, r)| {
            if c == CloseCode::NotReady {
                (
                    CloseCode::Unauthenticated,
                    "daemon hello timeout".to_owned(),
                )
            } else {
                (c, r)
            }
        })?;
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
                return enroll(hub, tx, &code, &public_key).await;
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
        hub,
        &challenge,
        bridge.as_str(),
        instance_id.as_str(),
        &key_id,
        timestamp,
        &signature,
    )
    .await?;
    tracing::info!(%bridge, instance = %instance_id, daemon_version = %version, revision, "daemon authenticated");
    let _ = tx.try_send(RelayFrame::HelloAck {
        bridge: bridge.clone(),
    });
    let b = hub.bridge(bridge.as_str()).await;
    // 3-5. probe, resume, ready, within the readiness deadline.
    let deadline = tokio::time::Instant::now() + timing.readiness_deadline;
    let probe_id = crate::auth::random_id("probe_");
    let _ = tx.try_send(RelayFrame::Probe {
        id: probe_id.clone(),
    });
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match next_frame(stream, left).await? {
            DaemonFrame::ProbeResult { id } if id == probe_id => break,
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
    hub.set_catalog(&b, servers).await;
    let (sessions, requests) = hub.resume_set(&b, &instance_id);
    let resumed = sessions.len();
    let _ = tx.try_send(RelayFrame::Resume { sessions, requests });
    let _ = tx.try_send(RelayFrame::Ready {});
    let link = Link {
        id: hub.next_link_id(),
        instance_id: instance_id.clone(),
        revision,
        tx: tx.clone(),
    };
    let link_id = link.id;
    if let Some(old) = hub.promote(&b, link) {
        old.tx
            .close(CloseCode::Replaced, "replaced by verified daemon");
    }
    *promoted = true;
    Metrics::add(&hub.metrics.sockets_candidate, -1);
    Metrics::add(&hub.metrics.sockets_ready, 1);
    tracing::info!(bridge = %b.name, instance = %instance_id, resumed, "daemon ready");
    let result = serve(hub, tx, stream, timing.liveness_timeout).await;
    hub.link_lost(&b, link_id);
    Metrics::add(&hub.metrics.sockets_ready, -1);
    tracing::info!(bridge = %b.name, instance = %instance_id, "daemon socket lost; its sessions wait for the same instance");
    result
}

/// Redeems an enrollment code for a device public key, answers `enrolled` and ends the socket.
async fn enroll(
    hub: &Hub,
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
    match hub.storage.enroll(code, public_key).await {
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

async fn serve(
    hub: &Arc<Hub>,
    tx: &LinkTx,
    stream: &mut Incoming,
    liveness: Duration,
) -> Result<(), (CloseCode, String)> {
    loop {
        let frame = next_frame(stream, liveness).await.map_err(|(c, r)| {
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
                let _ = hub.deliver(&sid, seq, related.as_ref(), message);
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
                hub.close_if_answered(&sid);
            }
            DaemonFrame::Closed { sid, reason } => hub.daemon_closed(&sid, &reason),
            DaemonFrame::Heartbeat { seq } => {
                let _ = tx.try_send(RelayFrame::HeartbeatAck { seq });
            }
            DaemonFrame::HeartbeatAck { .. } | DaemonFrame::ProbeResult { .. } => {}
            DaemonFrame::Hello { .. } | DaemonFrame::Enroll { .. } => {
                return Err((CloseCode::Protocol, "duplicate hello".into()));
            }
        }
    }
}

async fn verify_hello(
    hub: &Hub,
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
    let key = hub
        .storage
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
        &hub.config.origin(),
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
        DaemonFrame::ProbeResult { .. } => "probe_result",
        DaemonFrame::Rpc { .. } => "rpc",
        DaemonFrame::Closed { .. } => "closed",
        DaemonFrame::Heartbeat { .. } => "heartbeat",
        DaemonFrame::HeartbeatAck { .. } => "heartbeat_ack",
    }
}
