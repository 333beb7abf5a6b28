//! [`CallContext`]: what a tool handler knows about the call besides its arguments.

use lock::Lock;

use tokio::{sync::mpsc, time::Instant};
use tokio_util::sync::CancellationToken;

use crate::limits::PROGRESS_MIN_INTERVAL;

use crate::policy::Principal;

/// One progress report (MCP `notifications/progress` params without the token).
#[derive(Debug, Clone, PartialEq)]
pub struct ProgressUpdate {
    /// Work done so far; increases with every report of a call.
    pub progress: f64,
    /// Total work when known.
    pub total: Option<f64>,
    /// A short human-readable status line.
    pub message: Option<String>,
}

/// Sends progress for one call, at most once per [`PROGRESS_MIN_INTERVAL`]; a no-op when the
/// request carried no progress token. Never blocks: a report is dropped if the queue is full.
#[derive(Debug, Default)]
pub struct ProgressSink {
    tx: Option<mpsc::Sender<ProgressUpdate>>,
    last: Lock<Option<Instant>>,
}

impl ProgressSink {
    /// A sink feeding `tx`.
    pub fn new(tx: mpsc::Sender<ProgressUpdate>) -> Self {
        Self {
            tx: Some(tx),
            last: Lock::new(None),
        }
    }

    /// A sink that drops everything.
    pub fn none() -> Self {
        Self::default()
    }

    /// Whether the caller asked for progress.
    pub fn is_enabled(&self) -> bool {
        self.tx.is_some()
    }

    /// Reports progress unless the previous report was less than the minimum interval ago.
    pub fn report(&self, progress: f64, total: Option<f64>, message: impl FnOnce() -> String) {
        let Some(tx) = &self.tx else { return };
        let now = Instant::now();
        {
            let mut last = self.last.lock();
            if last.is_some_and(|t| now.duration_since(t) < PROGRESS_MIN_INTERVAL) {
                return;
            }
            *last = Some(now);
        }
        let _ = tx.try_send(ProgressUpdate {
            progress,
            total,
            message: Some(message()),
        });
    }
}

/// The context of one tool call (DESIGN §3 "Call context").
#[derive(Debug)]
pub struct CallContext {
    /// Fired by `notifications/cancelled` (or a relay cancel); handlers stop work when it fires.
    pub cancel: CancellationToken,
    /// Progress notifications for this call.
    pub progress: ProgressSink,
    /// The caller.
    pub principal: Principal,
    /// The MCP protocol version negotiated for the session, when known.
    pub protocol_version: Option<String>,
    /// The call may become a task (SEP-2663): its work may outlive the request, so a process
    /// does not yield to a process session after the server's default foreground budget (the
    /// task is the durable handle); an explicit `yield_after_seconds` is still honoured.
    pub in_task: bool,
}

impl CallContext {
    /// A context with no progress and a fresh cancellation token, for the local principal.
    pub fn local() -> Self {
        Self {
            cancel: CancellationToken::new(),
            progress: ProgressSink::none(),
            principal: Principal::local(),
            protocol_version: None,
            in_task: false,
        }
    }
}
