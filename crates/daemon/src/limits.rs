//! The daemon's own bounds: sizes, counts and durations that only the daemon enforces.
//!
//! Sizes are in bytes, durations are [`Duration`]s, counts are plain integers. A bound
//! that crosses a process boundary lives in `protocol::limits` instead.

use std::time::Duration;

// === Concurrency ===

/// Pooled legacy sessions a daemon keeps to bridge MCP 2026-07-28 calls to upstream stdio
/// servers of the old era (one child process per server and principal). When a new one would
/// exceed it, the least recently used idle one is closed; with none idle the call is answered
/// with a retryable error.
pub const UPSTREAM_POOLED_SESSIONS_MAX: usize = 32;
/// How long a pooled legacy upstream session stays open with no call in flight and no
/// `subscriptions/listen` open; then its child process is stopped.
pub const UPSTREAM_POOLED_SESSION_IDLE: Duration = Duration::from_secs(300);

// === Relay link timing ===

/// How long a stopping daemon (SIGTERM, Ctrl-C, `service stop`) keeps its link to let calls
/// in flight finish before it closes it: below a takeover's 15 s wait and systemd's
/// `TimeoutStopSec` (30 s in the unit `service install` writes).
pub const DAEMON_STOP_DRAIN: Duration = Duration::from_secs(10);
/// Application heartbeat interval on the daemon link.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(25);
/// Silence after which the daemon declares the link dead.
pub const HEARTBEAT_SILENCE_TIMEOUT: Duration = Duration::from_secs(75);
/// Time allowed for one connect attempt (TCP, TLS, WebSocket upgrade).
pub const CONNECT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(15);
/// Largest WebSocket frame a daemon writes (16 KiB of payload): a link frame whose JSON text is
/// longer goes out as a fragmented message (RFC 6455 §5.4: a text frame without FIN, then
/// continuation frames, each at most this long), which every WebSocket reader reassembles into
/// the one message. A reader's buffer grows to the largest frame it reads and keeps that size;
/// fragments keep a relay's buffer per connected daemon at a few tens of KiB after a catalog or a
/// large result, instead of the largest message's size.
pub const LINK_FRAGMENT_MAX_BYTES: usize = 16 * 1024;
