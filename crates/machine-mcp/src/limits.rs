//! The binary's own bounds: sizes, counts and durations only its commands enforce.
//!
//! Sizes are in bytes, durations are [`Duration`]s, counts are plain integers. A bound
//! that crosses a process boundary lives in `protocol::limits` instead.

use daemon::limits::DAEMON_STOP_DRAIN;
use protocol::limits::RECONNECT_GRACE;
use relay::limits::RELAY_STOP_DRAIN;
use std::time::Duration;

// === Stopping ===

/// How long `up`, asked to stop, waits for its two halves: its daemon lets the calls in flight
/// finish ([`DAEMON_STOP_DRAIN`]) while its relay drains its connections ([`RELAY_STOP_DRAIN`]),
/// side by side; each closes what is still open at the end of its drain. The bound adds a moment
/// for the relay's store to be flushed; then process sessions end (SIGTERM, then SIGKILL after
/// `runtime::limits::TERMINATION_GRACE`) and `up` exits.
pub(crate) const UP_STOP_WAIT: Duration = RELAY_STOP_DRAIN.saturating_add(STORE_FLUSH_WAIT);
/// What [`UP_STOP_WAIT`] adds to the relay's drain for the store's last writes.
const STORE_FLUSH_WAIT: Duration = Duration::from_secs(2);
// The daemon's drain ends within the relay's, so that calls answered late in it still reach
// their clients.
const _: () = assert!(DAEMON_STOP_DRAIN.as_nanos() <= RELAY_STOP_DRAIN.as_nanos());

// === Daemon upgrades ===

/// How long, from when it noticed a new binary, a daemon waits for ended work to be collected
/// before its restart drops it: process sessions that exited and tasks that finished (still
/// readable), and results the relay has not acknowledged (a link that is down: the relay keeps
/// waiting for them as long, [`RECONNECT_GRACE`]).
pub(crate) const UPGRADE_ENDED_GRACE: Duration = RECONNECT_GRACE;
