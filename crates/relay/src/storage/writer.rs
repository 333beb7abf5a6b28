//! The write-behind task: every durable write of sessions and streams ([`StoreWrite`]) goes
//! through one queue, in the order it was sent, to one task that applies them in batches, one
//! transaction each, so that no request ever waits on SQLite.
//!
//! The queue is one FIFO with explicit bounds, counted in writes and in bytes of the payloads
//! they carry ([`StoreWrite::weight`]):
//! - [`StoreWriter::send`] is for writes a restart can do without (stream events, activity
//!   times, sweeps): it is refused past [`STORE_QUEUE`] writes or [`STORE_QUEUE_BYTES`] and
//!   reports it (a stream event is then stored as a "not kept" marker instead, so a
//!   restarted relay still numbers the stream right);
//! - [`StoreWriter::send_reliable`] is for the writes a restarted relay needs to be right
//!   (session records, in-flight markers, terminal events, deletions, "not kept" markers): it is
//!   refused only past the hard bounds [`STORE_QUEUE_HARD`] and [`STORE_QUEUE_HARD_BYTES`]
//!   (SQLite has stalled for minutes), counted and logged as an error.
//!
//! Neither ever waits, and a queued write is never overtaken by a later one. A caller that
//! needs one write applied before it goes on (a stream's row before the stream's first event
//! leaves) takes its ticket (`StoreWriter::send_reliable_ticket`) and awaits it
//! (`StoreWriter::applied`), with a bound.
//!
//! Test switch (hidden, for the integration tests over the real binary): with
//! `MACHINE_MCP_TEST_STORE_LAG_MS` set to a number, the task waits that many milliseconds
//! before applying each batch, standing in for a slow disk.

use std::sync::{
    Arc,
    atomic::{AtomicI64, AtomicU64, Ordering},
};

use tokio::sync::{mpsc, watch};

use super::{durable::StoreWrite, traits::SessionStore};
use lock::Lock;

/// The write-behind task's end of the queue.
pub(crate) type Queue = mpsc::UnboundedReceiver<StoreWrite>;

/// Writes queued at most before [`StoreWriter::send`] refuses one.
pub const STORE_QUEUE: usize = 4096;

/// Bytes queued at most ([`StoreWrite::weight`]) before [`StoreWriter::send`] refuses a write.
pub const STORE_QUEUE_BYTES: usize = 16 * 1024 * 1024;

/// Writes queued at most before even [`StoreWriter::send_reliable`] refuses one.
pub const STORE_QUEUE_HARD: usize = 65_536;

/// Bytes queued at most before even [`StoreWriter::send_reliable`] refuses a write.
pub const STORE_QUEUE_HARD_BYTES: usize = 128 * 1024 * 1024;

/// Most writes applied in one transaction.
pub const STORE_BATCH_MAX: usize = 256;

/// How many times a batch is tried before it is given up (SQLite busy or failing).
const STORE_BATCH_TRIES: u32 = 3;

/// The pause before the first retry of a failed batch; the second waits twice as long.
const STORE_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

/// The sending side of the write-behind task; cheap to clone. The task ends once every clone is
/// dropped and the queue is drained.
#[derive(Debug, Clone)]
pub struct StoreWriter {
    tx: mpsc::UnboundedSender<StoreWrite>,
    /// Writes queued or being applied (the `machine_mcp_relay_store_queued_writes` gauge).
    pub(crate) queued: Arc<AtomicI64>,
    /// Bytes ([`StoreWrite::weight`]) of the writes queued or being applied.
    queued_bytes: Arc<AtomicI64>,
    /// Writes refused because the queue was full, or lost with a failed batch.
    pub(crate) dropped: Arc<AtomicU64>,
    /// Writes handed to the queue so far: a write's ticket is this count after it. Held while
    /// the write is sent, so tickets follow the queue's order.
    sent: Arc<Lock<u64>>,
    /// Writes the task is done with (applied, or lost with a failed batch), in queue order.
    done: Arc<watch::Sender<u64>>,
}

impl StoreWriter {
    /// Starts the write-behind task over `storage` ([`super::Store::spawn_writer`]).
    pub fn spawn(storage: Arc<dyn SessionStore>) -> Self {
        let (w, mut rx) = Self::channel();
        let (queued, bytes, dropped) =
            (w.queued.clone(), w.queued_bytes.clone(), w.dropped.clone());
        let done = w.done.clone();
        let lag = test_lag();
        tokio::spawn(async move {
            let mut batch = Vec::with_capacity(STORE_BATCH_MAX);
            while rx.recv_many(&mut batch, STORE_BATCH_MAX).await > 0 {
                if let Some(lag) = lag {
                    tokio::time::sleep(lag).await;
                }
                let n = batch.len();
                let weight: usize = batch.iter().map(StoreWrite::weight).sum();
                // A failed transaction applied nothing, so applying the same batch again keeps
                // the order; a store that keeps failing loses the batch, counted.
                let mut tries = 0;
                while let Err(e) = storage.apply(&batch).await {
                    tries += 1;
                    if tries == STORE_BATCH_TRIES {
                        tracing::error!(error = %e, writes = n, "could not write session and stream state to the relay store: a restart will not restore them");
                        dropped.fetch_add(n as u64, Ordering::Relaxed);
                        break;
                    }
                    tracing::warn!(error = %e, writes = n, "could not write session and stream state to the relay store; trying again");
                    tokio::time::sleep(STORE_RETRY_PAUSE * tries).await;
                }
                batch.clear();
                done.send_modify(|d| *d += n as u64);
                bytes.fetch_sub(weight as i64, Ordering::Relaxed);
                queued.fetch_sub(n as i64, Ordering::Relaxed);
            }
        });
        w
    }

    /// A writer and the queue it feeds, without the task that applies it.
    pub(crate) fn channel() -> (Self, Queue) {
        let (tx, rx) = mpsc::unbounded_channel();
        let w = Self {
            tx,
            queued: Arc::new(AtomicI64::new(0)),
            queued_bytes: Arc::new(AtomicI64::new(0)),
            dropped: Arc::new(AtomicU64::new(0)),
            sent: Arc::new(Lock::new(0)),
            done: Arc::new(watch::Sender::new(0)),
        };
        (w, rx)
    }

    /// Waits until every write queued so far is applied, or `limit` has passed (a relay that
    /// stops flushes what it queued, so a restart restores it). Returns whether the queue
    /// emptied.
    pub async fn flush(&self, limit: std::time::Duration) -> bool {
        let until = tokio::time::Instant::now() + limit;
        while self.queued.load(Ordering::Relaxed) > 0 {
            if tokio::time::Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        true
    }

    /// Queues `w` unless the queue holds [`STORE_QUEUE`] writes or [`STORE_QUEUE_BYTES`]
    /// already. Returns whether it was queued: a refused write (the queue is that full, or its
    /// task has ended) is dropped and counted in `dropped`.
    pub fn send(&self, w: StoreWrite) -> bool {
        if self.enqueue(w, STORE_QUEUE, STORE_QUEUE_BYTES).is_some() {
            return true;
        }
        let before = self.dropped.fetch_add(1, Ordering::Relaxed);
        if before.is_multiple_of(1000) {
            tracing::warn!(
                dropped = before + 1,
                "the relay store's write queue is full: stream events are not kept for a restart"
            );
        }
        false
    }

    /// Queues `w` unless the queue holds [`STORE_QUEUE_HARD`] writes or
    /// [`STORE_QUEUE_HARD_BYTES`] already; a refused write is counted in `dropped` and logged as
    /// an error (what a restart restores may then be wrong: the store has not kept up for
    /// minutes).
    pub fn send_reliable(&self, w: StoreWrite) {
        self.send_reliable_ticket(w);
    }

    /// [`StoreWriter::send_reliable`], returning the write's ticket for
    /// [`StoreWriter::applied`] (`None` when the write was refused).
    pub(crate) fn send_reliable_ticket(&self, w: StoreWrite) -> Option<u64> {
        let ticket = self.enqueue(w, STORE_QUEUE_HARD, STORE_QUEUE_HARD_BYTES);
        if ticket.is_none() {
            let before = self.dropped.fetch_add(1, Ordering::Relaxed);
            if before.is_multiple_of(1000) {
                tracing::error!(
                    queued = self.queued.load(Ordering::Relaxed),
                    dropped = before + 1,
                    "the relay store's write queue is over its hard bound: a session or stream write was refused, so a restart may restore this relay's state wrongly"
                );
            }
        }
        ticket
    }

    /// Waits until the write with `ticket` (and every one queued before it) is applied, or
    /// lost with a failed batch, or `limit` has passed. Returns whether the task got to it in
    /// time (`false` too when the task has ended without it).
    pub(crate) async fn applied(&self, ticket: u64, limit: std::time::Duration) -> bool {
        let mut done = self.done.subscribe();
        matches!(
            tokio::time::timeout(limit, done.wait_for(|d| *d >= ticket)).await,
            Ok(Ok(_))
        )
    }

    /// Marks every write up to `ticket` as applied, as the task does after a batch (tests that
    /// stand in for the task).
    #[cfg(test)]
    pub(crate) fn mark_applied(&self, ticket: u64) {
        self.done.send_replace(ticket);
    }

    /// Queues `w` when fewer than `max` writes and `max_bytes` are queued; returns its ticket
    /// if it did.
    fn enqueue(&self, w: StoreWrite, max: usize, max_bytes: usize) -> Option<u64> {
        let weight = w.weight() as i64;
        if self.queued.load(Ordering::Relaxed) >= max as i64
            || self.queued_bytes.load(Ordering::Relaxed) + weight > max_bytes as i64
        {
            return None;
        }
        self.queued.fetch_add(1, Ordering::Relaxed);
        self.queued_bytes.fetch_add(weight, Ordering::Relaxed);
        let mut sent = self.sent.lock();
        if self.tx.send(w).is_err() {
            drop(sent);
            self.queued.fetch_sub(1, Ordering::Relaxed);
            self.queued_bytes.fetch_sub(weight, Ordering::Relaxed);
            return None;
        }
        *sent += 1;
        Some(*sent)
    }
}

/// The lag before each batch that `MACHINE_MCP_TEST_STORE_LAG_MS` asks for (module docs).
fn test_lag() -> Option<std::time::Duration> {
    std::env::var("MACHINE_MCP_TEST_STORE_LAG_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(std::time::Duration::from_millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touched(n: usize) -> StoreWrite {
        StoreWrite::SessionTouched {
            sid: "filler".into(),
            at: n as i64,
        }
    }

    /// Drains what `rx` receives until nothing more comes.
    async fn drain(rx: &mut Queue) -> Vec<StoreWrite> {
        let mut out = Vec::new();
        while let Ok(Some(w)) =
            tokio::time::timeout(std::time::Duration::from_millis(200), rx.recv()).await
        {
            out.push(w);
        }
        out
    }

    /// Regression: a reliable write sent when the queue was full must not be
    /// overtaken by a later one (a session's end applied before its start would bring it back
    /// after a restart).
    #[tokio::test(flavor = "current_thread")]
    async fn reliable_writes_keep_their_order_past_a_full_queue() {
        let (w, mut rx) = StoreWriter::channel();
        for n in 0..STORE_QUEUE {
            assert!(w.send(touched(n)));
        }
        let record = crate::storage::durable::tests::session("s1");
        w.send_reliable(StoreWrite::SessionOpened(record));
        // The task takes a write, making room, before the next one is sent.
        assert!(rx.try_recv().is_ok());
        w.send_reliable(StoreWrite::SessionEnded { sid: "s1".into() });
        let got = drain(&mut rx).await;
        let at = |want: fn(&StoreWrite) -> bool| got.iter().position(want);
        let opened = at(|w| matches!(w, StoreWrite::SessionOpened(_))).expect("kept");
        let ended = at(|w| matches!(w, StoreWrite::SessionEnded { .. })).expect("kept");
        assert!(opened < ended, "opened at {opened}, ended at {ended}");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn droppable_writes_are_refused_past_the_bound_and_reliable_ones_are_not() {
        let (w, mut rx) = StoreWriter::channel();
        for n in 0..STORE_QUEUE {
            assert!(w.send(touched(n)));
        }
        assert!(!w.send(touched(STORE_QUEUE)), "past the bound");
        w.send_reliable(StoreWrite::SessionEnded { sid: "s1".into() });
        assert_eq!(w.dropped.load(Ordering::Relaxed), 1);
        assert_eq!(w.queued.load(Ordering::Relaxed), STORE_QUEUE as i64 + 1);
        // A write too large for the byte bound is refused even in an empty queue.
        let (w2, _rx2) = StoreWriter::channel();
        let huge = StoreWrite::Event {
            stream: "st".into(),
            seq: 1,
            data: "x".repeat(STORE_QUEUE_BYTES),
            terminal: false,
            at: 0,
        };
        assert!(!w2.send(huge.clone()));
        w2.send_reliable(huge);
        assert_eq!(
            w2.queued_bytes.load(Ordering::Relaxed) as usize,
            STORE_QUEUE_BYTES + 64
        );
        let got = drain(&mut rx).await;
        assert_eq!(got.len(), STORE_QUEUE + 1);
        assert!(matches!(got.last(), Some(StoreWrite::SessionEnded { .. })));
    }

    /// A write's ticket is awaited until the task has applied it: once `applied` returns, the
    /// store holds the write (a stream's row before its first event leaves).
    #[tokio::test(flavor = "current_thread")]
    async fn a_ticket_is_applied_only_once_the_store_holds_its_write() {
        let store = crate::storage::memory().await.unwrap();
        let w = store.spawn_writer();
        for n in 0..2 * STORE_BATCH_MAX {
            assert!(w.send(touched(n)));
        }
        let record = crate::storage::durable::tests::session("s1");
        let ticket = w
            .send_reliable_ticket(StoreWrite::SessionOpened(record))
            .expect("queued");
        assert_eq!(
            ticket,
            2 * STORE_BATCH_MAX as u64 + 1,
            "tickets follow the queue"
        );
        assert!(w.applied(ticket, std::time::Duration::from_secs(10)).await);
        let (sessions, _) = store.sessions().load_durable(1020, 3600).await.unwrap();
        assert!(sessions.iter().any(|s| s.sid == "s1"), "{sessions:?}");
    }

    /// A ticket the task never gets to (here: no task) is not waited on past the limit.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_ticket_the_task_does_not_reach_ends_the_wait_at_the_limit() {
        let (w, _rx) = StoreWriter::channel();
        let ticket = w
            .send_reliable_ticket(StoreWrite::SessionEnded { sid: "s1".into() })
            .expect("queued");
        assert!(!w.applied(ticket, std::time::Duration::from_secs(2)).await);
        w.done.send_modify(|d| *d += 1);
        assert!(w.applied(ticket, std::time::Duration::from_secs(2)).await);
    }
}
