//! The binary's own bounds: sizes, counts and durations only its commands enforce.
//!
//! Sizes are in bytes, durations are [`Duration`]s, counts are plain integers. A bound
//! that crosses a process boundary lives in `protocol::limits` instead.

use protocol::limits::RECONNECT_GRACE;
use std::time::Duration;

// === OAuth 2.1 on the relay (DESIGN §6) ===

/// How long, from when it noticed a new binary, a daemon waits for ended work to be collected
/// before its restart drops it: process sessions that exited and tasks that finished (still
/// readable), and results the relay has not acknowledged (a link that is down: the relay keeps
/// waiting for them as long, [`RECONNECT_GRACE`]).
pub(crate) const UPGRADE_ENDED_GRACE: Duration = RECONNECT_GRACE;
