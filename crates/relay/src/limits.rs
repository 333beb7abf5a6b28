//! Bounds the relay alone enforces (the ones that cross a process boundary are in
//! `protocol::limits`): the budget of MCP request body bytes in flight (`budget`), the drain
//! of a stop (the accept loop of `server`) and the wait for a stream's row before its first
//! event (`mcp`).

use std::time::Duration;

use protocol::limits::MCP_REQUEST_BODY_MAX_BYTES;

/// MCP request body bytes the relay holds in flight (being read or parsed) for one credential:
/// four bodies of the largest size. A body counts from its headers (`Content-Length`, or
/// [`MCP_REQUEST_BODY_MAX_BYTES`] without one) until it is parsed; past the budget the request
/// is answered 429 with `Retry-After` before its body is read.
pub const REQUEST_BODY_BYTES_PER_CREDENTIAL: usize = 4 * MCP_REQUEST_BODY_MAX_BYTES;
/// MCP request body bytes the relay holds in flight in all, counted as for
/// [`REQUEST_BODY_BYTES_PER_CREDENTIAL`]; past it a request is answered 503 with `Retry-After`
/// before its body is read.
pub const REQUEST_BODY_BYTES_IN_FLIGHT: usize = 16 * MCP_REQUEST_BODY_MAX_BYTES;
/// The `Retry-After` (seconds) of a request refused by the body budget.
pub const REQUEST_BODY_RETRY_AFTER_SECS: u64 = 1;
/// How long a relay (`relay serve`, `up`) that was asked to stop lets its connections finish:
/// its listener closes at once, requests in progress may complete within this drain, and what
/// is still open after it (SSE streams, listen streams, daemon sockets) is closed; clients resume
/// or reconnect as after a relay restart. A second stop signal ends the process at once.
pub const RELAY_STOP_DRAIN: Duration = Duration::from_secs(10);
/// How long a session's POST answered with SSE waits for the store to hold its stream's row
/// before the stream's first event (the priming event, whose id a client resumes from) leaves:
/// one store transaction normally; past this bound (the store has stalled) the stream is served
/// anyway and a relay crash before the row is written forgets it.
pub const STREAM_STORED_WAIT: Duration = Duration::from_secs(2);
