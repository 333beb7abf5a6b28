//! The stdio supervisor's own bounds: sizes, counts and durations only it enforces.
//!
//! Sizes are in bytes, durations are [`Duration`]s, counts are plain integers. A bound
//! that crosses a process boundary lives in `protocol::limits` instead.

use std::time::Duration;

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

// === Workers ===

/// Requests a supervisor holds while no worker can take them (one starting or restarting);
/// one more is answered at once with a `not_sent` error.
pub const SUPERVISOR_QUEUE_MAX: usize = 256;
/// Bytes of the requests a supervisor holds (see [`SUPERVISOR_QUEUE_MAX`]).
pub const SUPERVISOR_QUEUE_MAX_BYTES: usize = 16 * MIB;
/// Restarts of a worker that exited unexpectedly before the supervisor gives up; the count
/// starts again once a restarted worker has served for [`WORKER_HEALTHY_AFTER`].
pub const WORKER_RESTARTS_MAX: u32 = 5;
/// Wait before the first restart of a worker that exited; it doubles for each further attempt.
pub const WORKER_RESTART_BACKOFF_MIN: Duration = Duration::from_secs(1);
/// Longest wait between two restarts of a worker.
pub const WORKER_RESTART_BACKOFF_MAX: Duration = Duration::from_secs(30);
/// How long a restarted worker must serve before its restarts count from zero again.
pub const WORKER_HEALTHY_AFTER: Duration = Duration::from_secs(60);
/// How long a new worker has to start and answer its `initialize` and `tools/list`.
pub const WORKER_START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a worker replaced by an upgrade keeps serving its calls in flight, process sessions
/// and tasks (by id) before it is stopped; they are then reported as ended by the upgrade.
pub const RETIRED_WORKER_GRACE: Duration = Duration::from_secs(15 * 60);
/// How often the supervisor asks a replaced worker whether it still has work.
pub const RETIRED_WORKER_POLL: Duration = Duration::from_secs(5);
/// Longest line a supervisor takes from its worker: a worker's answer is one line, and an
/// explicit large read is larger than a request may be (a 5 MiB `read_file` is twice that in
/// JSON, more with escapes); a longer one is answered as lost (`outcome_unknown`).
pub const WORKER_LINE_MAX_BYTES: usize = 128 * MIB;
/// Process session and task ids the supervisor remembers the worker of (oldest forgotten first).
pub const SUPERVISOR_OWNED_IDS_MAX: usize = 4096;
/// How long a stopping supervisor (end of input, Ctrl-C, SIGTERM) waits for its workers to
/// exit before it kills them: as long as a server gives its stdout to take the answers still
/// queued at end of input (`runtime::mcp::stdio::STDOUT_DRAIN_WAIT`), which the supervisor
/// forwards meanwhile.
pub const WORKER_STOP_WAIT: Duration = runtime::mcp::stdio::STDOUT_DRAIN_WAIT;
