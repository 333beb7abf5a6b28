//! The timing and size contract (DESIGN §7) that crosses a process or crate boundary: what the
//! relay, the daemon, the supervisor and the runtime must agree on. A bound one crate enforces
//! alone lives in that crate's `limits` module (the tidy test keeps it so).
//!
//! Sizes are in bytes, durations are [`Duration`]s, counts are plain integers. Every bound that
//! logic enforces is a named constant; tests refer to them by name too.

use std::time::Duration;

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

// === Transport ===

/// Client connections a relay keeps open at once; past it a new connection is closed at once
/// (`relay serve --max-connections`).
pub const RELAY_CONNECTIONS_MAX: usize = 4096;
/// Client connections a relay keeps open at once from one (non-loopback) address
/// (`relay serve --max-connections-per-address`).
pub const RELAY_CONNECTIONS_PER_ADDRESS: usize = 128;

/// Longest JSON-RPC line accepted on stdio (8 MiB, newline excluded). A longer line is answered
/// with a JSON-RPC error and skipped.
pub const STDIO_LINE_MAX_BYTES: usize = 8 * MIB;
/// Largest relay ⇄ daemon WebSocket frame.
pub const RELAY_FRAME_MAX_BYTES: usize = 8 * MIB;
/// Frames a link's writer (relay or daemon) sends in one flush at most: the ones already queued
/// when it writes go out together, one write to the socket instead of one each.
pub const LINK_WRITE_BATCH: usize = 64;

// === Concurrency ===

/// Tool calls one runtime executes at once; a call beyond this gets `limit_exceeded` at once.
pub const CONCURRENT_TOOL_CALLS: usize = 16;
/// Default bound on relayed requests in flight per bridge.
pub const RELAYED_REQUESTS_PER_BRIDGE: usize = 32;

// === Relay link timing ===

/// How long detached calls and sessions wait for the same daemon instance to come back.
pub const RECONNECT_GRACE: Duration = Duration::from_secs(120);

/// Time a daemon has to send `hello` after `welcome`.
pub const HELLO_DEADLINE: Duration = Duration::from_secs(10);
/// Time from `hello_ack` to `ready` (probe and resume).
pub const READINESS_DEADLINE: Duration = Duration::from_secs(15);
/// Link revision 4: how long after the relay sends a client request to a daemon the daemon may
/// still start it. The relay puts `deliver_by` = its wall clock + this + the daemon's clock skew
/// (as the hello estimated it) on every request frame; a daemon that reads the frame later does
/// not run it. Short, so that a frozen or sleeping daemon (TCP up, nothing read) costs a caller a
/// few seconds, not the liveness timeout and the reconnect grace; long enough
/// for a busy link to carry the frame.
pub const DELIVERY_WINDOW: Duration = Duration::from_millis(2500);
/// Link revision 4: how long past [`DELIVERY_WINDOW`] the relay waits for the daemon's
/// `accepted` before it retracts the request and answers it with a retryable "not delivered"
/// error: the time an `accepted` sent just before `deliver_by` needs to come back. The request
/// is thus answered at most `DELIVERY_WINDOW + DELIVERY_MARGIN` (4 s) after it was sent, well
/// within the ~60 s hosted assistants wait.
pub const DELIVERY_MARGIN: Duration = Duration::from_millis(1500);
/// Link revision 4: how long a daemon may hold an `accepted` before writing it, so that a
/// request answered within it costs one frame back instead of two: a response written in the
/// same flush as its `accepted` and before any other message of its session stands for the
/// `accepted`, which is then not sent (the relay takes a response as the request's answer with
/// or without one). Tiny beside [`DELIVERY_MARGIN`], whose slack it takes from.
pub const ACCEPTED_LINGER: Duration = Duration::from_millis(2);

// === Tasks (MCP extension `io.modelcontextprotocol/tasks`, SEP-2663) ===

/// How far past the last sequence number a daemon's message of a session may be; farther is a
/// protocol error that closes the socket (else a `seq` of 2^64-2 would make every later message
/// look like a replay). A gap is tolerated because the daemon drops its oldest
/// unacknowledged messages past 64 MiB while the relay is away; 2^32 is more than it can drop
/// within a reconnect grace, so a resuming daemon is never refused for its gap.
pub const DAEMON_SEQ_WINDOW: u64 = 1 << 32;

// === OAuth 2.1 on the relay (DESIGN §6) ===

/// Shortest password an operator may set for an account (generated ones are longer).
pub const PASSWORD_MIN_CHARS: usize = 12;

// Stopping the long-lived commands (`stdio`, `up`, `connect`, `relay serve`).

/// A stop signal (SIGINT, SIGTERM) that comes within this time of the one that started a stop is
/// that stop delivered twice, not a second stop: GNU `timeout` sends its signal to the command and
/// then to its own process group, and a terminal's Ctrl-C reaches every process of the
/// foreground group, one of which may forward it. A later one ends the process at once.
pub const STOP_SIGNAL_REPEAT_WINDOW: Duration = Duration::from_millis(200);

// The stdio supervisor: `machine-mcp stdio` keeps the client's connection and runs
// the server as a replaceable worker process.

/// How often the supervisor checks whether the installed binary changed.
pub const UPGRADE_CHECK_INTERVAL: Duration = Duration::from_secs(2);
/// How long `BINARY --version` of a changed binary may take.
pub const VERSION_PROBE_TIMEOUT: Duration = Duration::from_secs(10);
