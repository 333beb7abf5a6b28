//! One-shot checks of the link for `machine-mcp doctor`: a TLS handshake with the roots the link
//! trusts ([`tls_handshake`]) and an authentication handshake that proves the device key is
//! accepted ([`probe_handshake`]).
//!
//! The probe stops after `hello_ack`, before the readiness probe: the relay promotes a daemon
//! socket (and closes the bridge's current one with `replaced`) only once `probe_result` arrives,
//! so a probe never displaces the link of a daemon that runs with the same key.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use futures_util::{SinkExt, StreamExt};
use protocol::{
    frame::{CloseCode, DaemonFrame, PROTOCOL_VERSION, RelayFrame, hello_transcript, now_unix_ms},
    ids::InstanceId,
};
use tokio_tungstenite::tungstenite::{
    Message,
    protocol::{CloseFrame, frame::coding::CloseCode as WsCloseCode},
};

use crate::identity::DeviceKey;

/// Why [`probe_handshake`] did not end with the relay accepting the key.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    /// TCP, TLS or the WebSocket upgrade failed.
    #[error("cannot open the link WebSocket at {url}: {why}")]
    Connect {
        /// The WebSocket URL.
        url: String,
        /// Why.
        why: String,
    },
    /// The relay refused the hello (close code `unauthenticated`): the key is revoked or
    /// unknown for the bridge, the bridge was removed, or the clocks differ by more than the
    /// relay allows.
    #[error("the relay refused the device key: {0}")]
    Refused(String),
    /// The relay answered something else than the handshake (another link protocol version, a
    /// close, an unexpected frame).
    #[error("{0}")]
    Protocol(String),
    /// No `hello_ack` within the time given.
    #[error("the relay did not complete the handshake within {} s", .0.as_secs())]
    TimedOut(Duration),
}

/// Connects to `relay`'s link endpoint and authenticates as device key `key_id` of `bridge`
/// (`welcome` → `hello` signed by `key` → `hello_ack`), then closes the WebSocket with 1000.
/// A fresh instance id is used and no readiness probe is answered, so the relay never promotes
/// this socket (see the module docs). The whole exchange is bounded by `timeout`.
///
/// # Errors
/// [`HandshakeError`]: the link endpoint cannot be reached, the relay refused the key, broke
/// the protocol, or did not answer within `timeout`.
pub async fn probe_handshake(
    relay: &url::Url,
    bridge: &str,
    key_id: &str,
    key: &DeviceKey,
    timeout: Duration,
) -> Result<(), HandshakeError> {
    let url = super::connect_url(relay).map_err(HandshakeError::Protocol)?;
    let work = async {
        let (mut ws, _) = tokio_tungstenite::connect_async(url.as_str())
            .await
            .map_err(|e| HandshakeError::Connect {
                url: url.to_string(),
                why: e.to_string(),
            })?;
        let mut hello_sent = false;
        while let Some(msg) = ws.next().await {
            let msg = msg.map_err(|e| HandshakeError::Protocol(format!("link error: {e}")))?;
            let frame = match msg {
                Message::Text(t) => {
                    serde_json::from_str::<RelayFrame>(t.as_str()).map_err(|e| {
                        HandshakeError::Protocol(format!("unreadable frame from the relay: {e}"))
                    })?
                }
                Message::Close(frame) => return Err(closed(frame)),
                _ => continue,
            };
            match frame {
                RelayFrame::Welcome {
                    protocol,
                    challenge,
                    ..
                } if !hello_sent => {
                    if protocol != PROTOCOL_VERSION {
                        return Err(HandshakeError::Protocol(format!(
                            "the relay speaks link protocol {protocol}; this build speaks {PROTOCOL_VERSION}: upgrade the older side"
                        )));
                    }
                    let hello = hello(relay, &challenge, bridge, key_id, key);
                    let text = serde_json::to_string(&hello)
                        .map_err(|e| HandshakeError::Protocol(e.to_string()))?;
                    ws.send(Message::Text(text.into()))
                        .await
                        .map_err(|e| HandshakeError::Protocol(format!("link error: {e}")))?;
                    hello_sent = true;
                }
                RelayFrame::HelloAck { .. } if hello_sent => {
                    let _ = ws
                        .close(Some(CloseFrame {
                            code: WsCloseCode::Normal,
                            reason: "doctor probe done".into(),
                        }))
                        .await;
                    return Ok(());
                }
                other => {
                    return Err(HandshakeError::Protocol(format!(
                        "unexpected frame during the handshake: {other:?}"
                    )));
                }
            }
        }
        Err::<(), _>(HandshakeError::Protocol(
            "the relay closed the connection during the handshake".into(),
        ))
    };
    tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| HandshakeError::TimedOut(timeout))?
}

fn hello(
    relay: &url::Url,
    challenge: &str,
    bridge: &str,
    key_id: &str,
    key: &DeviceKey,
) -> DaemonFrame {
    let instance_id = InstanceId::new(format!("inst_probe_{}", uuid::Uuid::new_v4().simple()));
    let timestamp = now_unix_ms();
    let transcript = hello_transcript(
        &relay.origin().ascii_serialization(),
        challenge,
        bridge,
        instance_id.as_str(),
        timestamp,
    );
    DaemonFrame::Hello {
        protocol: PROTOCOL_VERSION,
        bridge: bridge.into(),
        instance_id,
        key_id: key_id.to_owned(),
        timestamp,
        signature: key.sign(&transcript),
        version: runtime::version().into(),
        servers: Vec::new(),
        revision: protocol::frame::LINK_REVISION,
    }
}

fn closed(frame: Option<CloseFrame>) -> HandshakeError {
    let Some(f) = frame else {
        return HandshakeError::Protocol("the relay closed the connection".into());
    };
    let code = u16::from(f.code);
    match CloseCode::from_code(code) {
        Some(CloseCode::Unauthenticated) => HandshakeError::Refused(f.reason.to_string()),
        _ => HandshakeError::Protocol(format!(
            "the relay closed the connection ({code} {})",
            f.reason
        )),
    }
}

/// What a successful [`tls_handshake`] negotiated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSummary {
    /// The protocol version, e.g. `TLSv1_3`.
    pub version: String,
    /// The cipher suite, e.g. `TLS13_AES_128_GCM_SHA256`.
    pub cipher_suite: String,
}

/// A TLS handshake with `addr` for the server name `host`, verified against the roots the link
/// trusts (the Mozilla roots of `webpki-roots`, as `tokio-tungstenite`'s
/// `rustls-tls-webpki-roots` uses), bounded by `timeout`. Needs a rustls crypto provider
/// ([`crate::init_tls`]).
///
/// # Errors
/// A message saying why: `host` is not a valid server name, TCP failed, the certificate does
/// not verify (expired, wrong name, unknown issuer), or the time ran out.
pub async fn tls_handshake(
    host: &str,
    addr: SocketAddr,
    timeout: Duration,
) -> Result<TlsSummary, String> {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(host.to_owned())
        .map_err(|e| format!("{host:?} is not a valid TLS server name: {e}"))?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let work = async {
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
        let tls = connector
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS handshake with {host} ({addr}) failed: {e}"))?;
        let (_, conn) = tls.get_ref();
        Ok::<_, String>(TlsSummary {
            version: conn
                .protocol_version()
                .map_or_else(|| "unknown".to_owned(), |v| format!("{v:?}")),
            cipher_suite: conn
                .negotiated_cipher_suite()
                .map_or_else(|| "unknown".to_owned(), |s| format!("{:?}", s.suite())),
        })
    };
    tokio::time::timeout(timeout, work).await.map_err(|_| {
        format!(
            "TLS handshake with {host} ({addr}) timed out after {} s",
            timeout.as_secs()
        )
    })?
}
