//! Relay ⇄ daemon link frames, protocol version 1 (DESIGN §5; written up in
//! `docs/relay-protocol.md`).
//!
//! One WebSocket per daemon, opened by the daemon to `/daemon/v1/connect`; every frame is one JSON
//! text message `{"type": "...", ...}` of at most [`crate::limits::RELAY_FRAME_MAX_BYTES`].
//! Handshake: relay `welcome` → daemon `hello` → relay `hello_ack` → relay `probe` → daemon
//! `probe_result` → relay `resume` → relay `ready`. Enrollment uses the same endpoint: relay
//! `welcome` → daemon `enroll` → relay `enrolled`, then the socket closes. Then `open`/`rpc`/`close` carry MCP sessions
//! keyed by a relay-assigned `sid`, daemon `rpc` frames carry a per-session `seq` that the relay
//! acknowledges with `ack`, and both sides exchange `heartbeat`/`heartbeat_ack`.
//!
//! Unknown fields are ignored (a newer peer may add some); an unknown `type` is a protocol error.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{
    ids::{BridgeId, InstanceId, SessionId},
    jsonrpc::RequestId,
};

/// The link protocol version this build speaks.
pub const PROTOCOL_VERSION: u32 = 1;

/// The compatible revision of link protocol 1 this build speaks, announced in `welcome` and
/// `hello` (absent means 1). Revision 2 adds [`RelayFrame::Call`]: one MCP 2026-07-28 request
/// without an MCP session. A relay sends `call` only to a daemon whose `hello` announced
/// revision 2 or later; older daemons keep serving the handshake era unchanged. Revision 3
/// moves the catalog out of `hello` into [`DaemonFrame::Catalog`], sent once the hello is
/// acknowledged, so that what a socket sends before it is authenticated stays small; a daemon
/// does so only when the relay's `welcome` announced revision 3 or later. Revision 4 adds
/// delivery confirmation: relay request frames carry `deliver_by` and the daemon answers each
/// request it takes with [`DaemonFrame::Accepted`] before running it; a relay retracts a request
/// not accepted in time ([`crate::limits::DELIVERY_WINDOW`], [`crate::limits::DELIVERY_MARGIN`]).
/// A relay does so only with a daemon whose `hello` announced 4, and a daemon sends `accepted`
/// only to a relay whose `welcome` announced 4.
pub const LINK_REVISION: u32 = 4;

/// The first revision with [`RelayFrame::Call`].
pub const REVISION_STATELESS: u32 = 2;

/// The first revision with [`DaemonFrame::Catalog`].
pub const REVISION_CATALOG_FRAME: u32 = 3;

/// The first revision with delivery confirmation: `deliver_by` on relay request frames and
/// [`DaemonFrame::Accepted`].
pub const REVISION_DELIVERY: u32 = 4;

fn revision_1() -> u32 {
    1
}

/// Path of the daemon WebSocket endpoint on the relay.
pub const CONNECT_PATH: &str = "/daemon/v1/connect";

/// Name of the built-in runtime among a daemon's servers.
pub const RUNTIME_SERVER: &str = "runtime";

/// Domain-separation prefix of the hello signature transcript.
pub const HELLO_SIGNATURE_SCHEME: &str = "machine-bridge-hello-v1";

/// A relay → daemon frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RelayFrame {
    /// First frame: who the relay is and the challenge to sign.
    Welcome {
        /// Link protocol version ([`PROTOCOL_VERSION`]).
        protocol: u32,
        /// Relay software name.
        server: String,
        /// Relay software version.
        version: String,
        /// Random challenge (base64url), signed in `hello`.
        challenge: String,
        /// When the challenge expires (Unix ms).
        expires_at: u64,
        /// Compatible protocol revision ([`LINK_REVISION`]); 1 when absent.
        #[serde(default = "revision_1")]
        revision: u32,
    },
    /// The enrollment code was redeemed; the socket closes after this frame.
    Enrolled {
        /// The bridge enrolled.
        bridge: BridgeId,
        /// The id of the registered key, named in every `hello`.
        key_id: String,
    },
    /// The hello was verified.
    HelloAck {
        /// The bridge the daemon serves.
        bridge: BridgeId,
    },
    /// End-to-end readiness probe; answer with `probe_result` through the normal send path.
    Probe {
        /// Probe id to echo.
        id: String,
    },
    /// The sessions and in-flight requests of this same instance still awaited remotely.
    /// Anything else the daemon holds is cancelled; unacknowledged output of these is replayed.
    Resume {
        /// Session ids to keep.
        sessions: Vec<SessionId>,
        /// In-flight client requests to keep.
        requests: Vec<ResumeRequest>,
    },
    /// The socket is now the bridge's active daemon.
    Ready {},
    /// Open an MCP session.
    Open {
        /// Relay-assigned session id.
        sid: SessionId,
        /// Which server: [`RUNTIME_SERVER`] or an upstream's name.
        server: String,
        /// The caller (token or account id).
        principal: String,
        /// The caller's role: a [`crate::Role`] name (`owner`, `operator`, `editor`,
        /// `reviewer`), kept as text so a frame with a role this build does not know still
        /// parses; the daemon gives such a role the least authority.
        role: String,
        /// The client's `initialize` request (a JSON-RPC message).
        initialize: Value,
    },
    /// Revision 2: a call, one MCP 2026-07-28 request served without an MCP session (MCP
    /// 2026-07-28 Basic › Transports: every request carries its version, client info and
    /// capabilities in `_meta`). `sid` is relay-assigned, unique among the bridge's session ids, and names this
    /// call in every later frame exactly like a session: the daemon answers with `rpc {sid, seq,
    /// related, message}` (messages related to the request, then its response), the relay
    /// acknowledges them with `ack`, forwards `notifications/cancelled` as `rpc {sid, message}`,
    /// lists the call in `resume` while it is awaited, and sends `close {sid}` once it has the
    /// response. Principal and role are the caller's, as in `open`.
    Call {
        /// Relay-assigned id of this call (same namespace as session ids).
        sid: SessionId,
        /// Which server: [`RUNTIME_SERVER`] or an upstream's name.
        server: String,
        /// The caller (token or account id).
        principal: String,
        /// The caller's role: a [`crate::Role`] name (`owner`, `operator`, `editor`,
        /// `reviewer`), kept as text so a frame with a role this build does not know still
        /// parses; the daemon gives such a role the least authority.
        role: String,
        /// The client's JSON-RPC request, `_meta` included.
        message: Value,
        /// Revision 4: see [`RelayFrame::Rpc`]'s `deliver_by`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deliver_by: Option<u64>,
    },
    /// A client → server JSON-RPC message for session `sid`.
    Rpc {
        /// Session id.
        sid: SessionId,
        /// The JSON-RPC message.
        message: Value,
        /// Revision 4, on requests only: Unix ms **in the daemon's clock** (the relay's clock
        /// corrected by the skew its `hello` showed) after which the daemon must not start the
        /// request. A daemon that reads the frame later drops it without `accepted` (the relay
        /// has answered or will answer it as not delivered). Absent: no limit (older relays, and
        /// every frame that is not a request).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deliver_by: Option<u64>,
    },
    /// The daemon's messages of `sid` up to `seq` are committed on the relay.
    Ack {
        /// Session id.
        sid: SessionId,
        /// Highest sequence number committed.
        seq: u64,
    },
    /// End session `sid`.
    Close {
        /// Session id.
        sid: SessionId,
    },
    /// Liveness.
    Heartbeat {
        /// Echoed in the reply.
        seq: u64,
    },
    /// Reply to the daemon's heartbeat.
    HeartbeatAck {
        /// The daemon's heartbeat `seq`.
        seq: u64,
    },
}

/// A daemon → relay frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum DaemonFrame {
    /// Instead of `hello`: redeem a one-time enrollment code (printed by `relay bridge add`) and
    /// register this device's public key. The relay answers `enrolled` and closes.
    Enroll {
        /// The one-time code.
        code: String,
        /// The device public key, SEC1 uncompressed point, base64url.
        public_key: String,
    },
    /// The daemon's identity and signed challenge.
    Hello {
        /// Link protocol version.
        protocol: u32,
        /// The bridge this daemon enrolled as.
        bridge: BridgeId,
        /// This process's random id; a restarted daemon has a new one.
        instance_id: InstanceId,
        /// Id of the registered device key.
        key_id: String,
        /// Unix ms the signature was made.
        timestamp: u64,
        /// ECDSA P-256 SHA-256 signature (base64url, fixed 64 bytes r‖s) over
        /// [`hello_transcript`].
        signature: String,
        /// Daemon software version.
        version: String,
        /// What this daemon serves, with cached catalogs (empty from revision 3, where
        /// [`DaemonFrame::Catalog`] carries them).
        #[serde(default)]
        servers: Vec<ServerInfo>,
        /// Compatible protocol revision ([`LINK_REVISION`]); 1 when absent (older daemons).
        #[serde(default = "revision_1")]
        revision: u32,
    },
    /// What this daemon serves, with cached catalogs (revision 3: sent once after `hello_ack`,
    /// before `probe_result`; its `hello` then carries no servers).
    Catalog {
        /// As `hello.servers` in earlier revisions.
        servers: Vec<ServerInfo>,
    },
    /// Revision 4: the daemon took client request `id` of session or call `sid` (from an `rpc`
    /// carrying a request, or a `call`) within its `deliver_by` and will run it. Queued as soon
    /// as the frame is read, before the request is dispatched (so it precedes every message the
    /// request causes), and written within [`crate::limits::ACCEPTED_LINGER`]; a response written
    /// with it, before any other message of its session, stands for it and it is not sent. The
    /// relay awaits the request's response from then on; a request without `accepted` (or its
    /// response) in time is retracted.
    Accepted {
        /// Session or call id.
        sid: SessionId,
        /// The JSON-RPC id of the request.
        id: RequestId,
    },
    /// Answer to `probe`.
    ProbeResult {
        /// The probe id.
        id: String,
    },
    /// A server → client JSON-RPC message for session `sid`.
    Rpc {
        /// Session id.
        sid: SessionId,
        /// Per-session sequence number, from 1.
        seq: u64,
        /// Id of the client request this message belongs to, when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        related: Option<Value>,
        /// The JSON-RPC message (shared with the daemon's retained copy; on the wire, the
        /// message itself).
        message: Arc<Value>,
    },
    /// The daemon ended session `sid` (its server exited, or it was not resumed).
    Closed {
        /// Session id.
        sid: SessionId,
        /// Why.
        reason: String,
    },
    /// Liveness.
    Heartbeat {
        /// Echoed in the reply.
        seq: u64,
    },
    /// Reply to the relay's heartbeat.
    HeartbeatAck {
        /// The relay's heartbeat `seq`.
        seq: u64,
    },
}

/// One in-flight request named in `resume`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumeRequest {
    /// Session id.
    pub sid: SessionId,
    /// The JSON-RPC request id.
    pub id: RequestId,
}

/// A server the daemon serves, as announced in `hello`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerInfo {
    /// [`RUNTIME_SERVER`] or the upstream's name from the servers file.
    pub name: String,
    /// The server's `initialize` result (JSON), answered while the daemon is offline.
    pub initialize: Value,
    /// The server's `initialize` result per handshake-era version, by version (the built-in
    /// runtime's, one for each of [`crate::mcp::SESSION_VERSIONS`]): a client that negotiated
    /// one of them gets its own, any other [`Self::initialize`] with its `protocolVersion`
    /// replaced. Absent from older daemons and for upstream servers.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub initialize_by_version: std::collections::BTreeMap<String, Value>,
    /// Revision 2: the server's `server/discover` result (MCP 2026-07-28 Server › Discover),
    /// answered while the daemon is offline; absent from older daemons (the relay then derives
    /// one from `initialize`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discover: Option<Value>,
    /// `tools/list` results per role (`owner`, `operator`, `editor`, `reviewer`): the tools that
    /// role may see.
    pub tools: std::collections::BTreeMap<String, Value>,
}

/// The bytes signed in `hello` (DESIGN §5 step 2): scheme, relay origin, challenge, bridge,
/// instance and time, one per line.
pub fn hello_transcript(
    relay_origin: &str,
    challenge: &str,
    bridge: &str,
    instance_id: &str,
    timestamp: u64,
) -> Vec<u8> {
    format!(
        "{HELLO_SIGNATURE_SCHEME}\n{relay_origin}\n{challenge}\n{bridge}\n{instance_id}\n{timestamp}"
    )
    .into_bytes()
}

/// The WebSocket close codes of the link (RFC 6455 § 7.4; `docs/relay-protocol.md`, "Close
/// codes"): the registered ones the relay uses, and the private-use ones of this protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CloseCode {
    /// 1000: normal closure (enrolled; the peer closed).
    Normal,
    /// 1001: going away; the relay uses it for a daemon silent past the liveness timeout.
    GoingAway,
    /// 1006: the connection was lost without a close frame (reported, never sent by a
    /// conforming endpoint).
    Abnormal,
    /// 1011: an internal error on the relay (link queue full, store failure).
    Internal,
    /// 4001: the hello was missing, late, or did not verify; an enrollment code was refused.
    /// The daemon stops: enroll again.
    Unauthenticated,
    /// 4002: the peer broke the protocol. The daemon stops.
    Protocol,
    /// 4008: readiness (probe, resume, ready) did not complete in time. The daemon retries.
    NotReady,
    /// 4012: replaced by another verified socket of the bridge. The daemon stops (another
    /// instance took over).
    Replaced,
}

impl CloseCode {
    /// Every code.
    pub const ALL: [CloseCode; 8] = [
        Self::Normal,
        Self::GoingAway,
        Self::Abnormal,
        Self::Internal,
        Self::Unauthenticated,
        Self::Protocol,
        Self::NotReady,
        Self::Replaced,
    ];

    /// The numeric code on the wire.
    pub const fn code(self) -> u16 {
        match self {
            Self::Normal => 1000,
            Self::GoingAway => 1001,
            Self::Abnormal => 1006,
            Self::Internal => 1011,
            Self::Unauthenticated => 4001,
            Self::Protocol => 4002,
            Self::NotReady => 4008,
            Self::Replaced => 4012,
        }
    }

    /// The code numbered `code`, if it is one of these.
    pub fn from_code(code: u16) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.code() == code)
    }
}

impl std::fmt::Display for CloseCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.code().fmt(f)
    }
}

/// Wall-clock time in Unix milliseconds: what `hello` signs as its `timestamp` and `welcome`
/// names as `expires_at` (0 for a clock before 1970).
pub fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_with_snake_case_tags() {
        let f = RelayFrame::Open {
            sid: "s1".into(),
            server: RUNTIME_SERVER.into(),
            principal: "tok_1".into(),
            role: "owner".into(),
            initialize: serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize"}),
        };
        let text = serde_json::to_string(&f).unwrap();
        assert!(text.starts_with(r#"{"type":"open""#), "{text}");
        assert_eq!(serde_json::from_str::<RelayFrame>(&text).unwrap(), f);
        let d: DaemonFrame =
            serde_json::from_str(r#"{"type":"rpc","sid":"s","seq":3,"message":{},"extra":1}"#)
                .unwrap();
        assert!(matches!(
            d,
            DaemonFrame::Rpc {
                seq: 3,
                related: None,
                ..
            }
        ));
        assert!(serde_json::from_str::<DaemonFrame>(r#"{"type":"bogus"}"#).is_err());
    }

    #[test]
    fn deliver_by_is_optional_and_accepted_names_sid_and_id() {
        let old: RelayFrame =
            serde_json::from_str(r#"{"type":"rpc","sid":"s","message":{"id":1}}"#).unwrap();
        assert!(matches!(
            old,
            RelayFrame::Rpc {
                deliver_by: None,
                ..
            }
        ));
        let f = RelayFrame::Rpc {
            sid: "s".into(),
            message: serde_json::json!({"jsonrpc": "2.0", "method": "notifications/x"}),
            deliver_by: None,
        };
        let text = serde_json::to_string(&f).unwrap();
        assert!(!text.contains("deliver_by"), "{text}");
        let f = RelayFrame::Rpc {
            sid: "s".into(),
            message: serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
            deliver_by: Some(1_700_000_000_000),
        };
        let text = serde_json::to_string(&f).unwrap();
        assert!(text.contains(r#""deliver_by":1700000000000"#), "{text}");
        let a: DaemonFrame =
            serde_json::from_str(r#"{"type":"accepted","sid":"s","id":"r-1"}"#).unwrap();
        assert_eq!(
            a,
            DaemonFrame::Accepted {
                sid: "s".into(),
                id: RequestId::new(serde_json::json!("r-1")),
            }
        );
    }

    #[test]
    fn frames_without_a_revision_are_revision_1() {
        let w: RelayFrame = serde_json::from_str(
            r#"{"type":"welcome","protocol":1,"server":"r","version":"0","challenge":"c","expires_at":1}"#,
        )
        .unwrap();
        assert!(matches!(w, RelayFrame::Welcome { revision: 1, .. }));
        let h: DaemonFrame = serde_json::from_str(
            r#"{"type":"hello","protocol":1,"bridge":"b","instance_id":"i","key_id":"k","timestamp":1,"signature":"s","version":"0","servers":[]}"#,
        )
        .unwrap();
        assert!(matches!(h, DaemonFrame::Hello { revision: 1, .. }));
        let c = RelayFrame::Call {
            sid: "c1".into(),
            server: RUNTIME_SERVER.into(),
            principal: "tok_1".into(),
            role: "owner".into(),
            message: serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
            deliver_by: None,
        };
        let text = serde_json::to_string(&c).unwrap();
        assert!(text.starts_with(r#"{"type":"call""#), "{text}");
        assert_eq!(serde_json::from_str::<RelayFrame>(&text).unwrap(), c);
    }

    #[test]
    fn close_codes_round_trip() {
        for c in CloseCode::ALL {
            assert_eq!(CloseCode::from_code(c.code()), Some(c));
        }
        assert_eq!(CloseCode::Replaced.code(), 4012);
        assert_eq!(CloseCode::from_code(4999), None);
    }

    #[test]
    fn transcript_names_every_field() {
        let t = String::from_utf8(hello_transcript("https://r.example", "c", "b", "i", 5)).unwrap();
        assert_eq!(t, "machine-bridge-hello-v1\nhttps://r.example\nc\nb\ni\n5");
    }
}
