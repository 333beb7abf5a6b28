//! The write-behind task: every durable write of sessions and streams ([`StoreWrite`]) goes
//! through one bounded queue to one task that applies them in batches, one transaction each, so
//! that no request ever waits on SQLite.
//!
//! [`StoreWriter::send`] never waits: a write that does not fit the queue ([`STORE_QUEUE`]) is
//! dropped and counted (a non-terminal stream event then misses from a replay after a restart).
//! [`StoreWriter::send_reliable`] is for the writes a restarted relay needs to be right (session
//! records, in-flight markers, terminal events): when the queue is full it is handed to a task
//! that waits for room, in order with nothing but itself.

use std::sync::{
    Arc,
    atomic::{AtomicI64, AtomicU64, Ordering},
};

use tokio::sync::mpsc;

use super::{SqliteStorage, durable::StoreWrite};

/// Writes queued at most for the write-behind task.
pub const STORE_QUEUE: usize = 4096;

/// Most writes applied in one transaction.
pub const STORE_BATCH_MAX: usize = 256;

/// The sending side of the write-behind task; cheap to clone. The task ends once every clone is
/// dropped and the queue is drained.
#[derive(Debug, Clone)]
pub struct StoreWriter {
    tx: mpsc::Sender<StoreWrite>,
    /// Writes queued or being applied (the `machine_mcp_relay_store_queued_writes` gauge).
    pub(crate) queued: Arc<AtomicI64>,
    /// Writes dropped because the queue was full, or lost with a failed batch.
    pub(crate) dropped: Arc<AtomicU64>,
}

impl StoreWriter {
    /// Starts the write-behind task over `storage`.
    pub fn spawn(storage: SqliteStorage) -> Self {
        let (tx, mut rx) = mpsc::channel::<StoreWrite>(STORE_QUEUE);
        let queued = Arc::new(AtomicI64::new(0));
        let dropped = Arc::new(AtomicU64::new(0));
        let w = Self {
            tx,
            queued: queued.clone(),
            dropped: dropped.clone(),
        };
        tokio::spawn(async move {
            let mut batch = Vec::with_capacity(STORE_BATCH_MAX);
            while rx.recv_many(&mut batch, STORE_BATCH_MAX).await > 0 {
                let n = batch.len();
                if let Err(e) = storage.apply(&batch).await {
                    // Never retried blindly: the batch may hold deletions and insertions whose
                    // order matters. What it held is lost for a restart, and counted.
                    tracing::error!(error = %e, writes = n, "could not write session and stream state to the relay store");
                    dropped.fetch_add(n as u64, Ordering::Relaxed);
                }
                batch.clear();
                queued.fetch_sub(n as i64, Ordering::Relaxed);
            }
        });
        w
    }

    /// Queues `w` without waiting; when the queue is full it is dropped and counted.
    pub fn send(&self, w: StoreWrite) {
        self.queued.fetch_add(1, Ordering::Relaxed);
        if self.tx.try_send(w).is_err() {
            self.queued.fetch_sub(1, Ordering::Relaxed);
            let before = self.dropped.fetch_add(1, Ordering::Relaxed);
            if before.is_multiple_of(1000) {
                tracing::warn!(
                    dropped = before + 1,
                    "the relay store's write queue is full: stream events are not kept for a restart"
                );
            }
        }
    }

    /// Queues `w` without waiting; when the queue is full a task waits for room for it.
    pub fn send_reliable(&self, w: StoreWrite) {
        self.queued.fetch_add(1, Ordering::Relaxed);
        match self.tx.try_send(w) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(w)) => {
                let tx = self.tx.clone();
                let queued = self.queued.clone();
                tokio::spawn(async move {
                    if tx.send(w).await.is_err() {
                        queued.fetch_sub(1, Ordering::Relaxed);
                    }
                });
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.queued.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}
