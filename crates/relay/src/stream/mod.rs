//! SSE streams: what the relay collects for a client ([`SseStream`]) and the resumable ones of
//! this node ([`SseStreams`]). How a stream is written to an HTTP response is the HTTP layer's
//! (`crate::streamable::sse`): this module is data, with no HTTP in it.
//!
//! Session era (MCP 2025-11-25 Streamable HTTP § Resumability and Redelivery): every POST
//! answered with SSE, and every session's standalone GET stream, is an [`SseStream`]: an
//! append-only list of events numbered from 0 (0 is the priming event with empty data). An HTTP
//! response is just a reader from some event on; when the client disconnects the stream goes on
//! collecting, and `GET` + `Last-Event-ID: <stream>-<n>` by the same principal and session reads
//! from event `n + 1`. A closed HTTP stream is transport loss, never cancellation (invariant 5).
//! Finished streams are kept for [`crate::limits::RESUMABLE_RETENTION`], at most
//! [`crate::limits::RESUMABLE_STREAMS_PER_BRIDGE`] per bridge ([`SseStreams`], `registry`); a
//! terminal message over [`RESUMABLE_TERMINAL_MAX_BYTES`] is delivered live but replaced by an
//! error once read, so replay cannot hold it.
//!
//! MCP 2026-07-28 answers use the same type for their SSE (or held JSON) answer, unregistered
//! and written without event ids (`crate::streamable::sse::Framing::Plain`).

use std::{
    collections::VecDeque,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use serde_json::Value;
use tokio::{sync::watch, time::Instant};

use crate::limits::{
    RESUMABLE_TERMINAL_MAX_BYTES, STANDALONE_BUFFER_MAX_BYTES,
    STANDALONE_BUFFER_PER_BRIDGE_MAX_BYTES,
};
use protocol::{head::Head, ids::SessionId, jsonrpc, jsonrpc::code};

mod registry;

pub(crate) use registry::{Resume, SseStreams};

use crate::storage::{
    StoreWrite, StoreWriter,
    durable::{NOT_KEPT, STORED_EVENT_MAX_BYTES},
    now as unix_now,
};
use lock::Lock;

/// How the id of a session's standalone stream starts (other streams' ids start with `st`): a
/// cursor of a standalone stream from before a relay restart is recognised by it.
const STANDALONE_PREFIX: &str = "sa";

/// Most events an open stream holds; older ones are dropped (and counted) beyond it.
const STREAM_EVENTS_MAX: usize = 10_000;

/// One event as sent: its number and its JSON text.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Event {
    /// Position in the stream (0 = priming event).
    pub(crate) seq: u64,
    /// JSON-RPC message text; empty for the priming event.
    pub(crate) data: String,
}

/// The byte budget of a session's standalone stream: [`STANDALONE_BUFFER_MAX_BYTES`] of its own
/// and [`STANDALONE_BUFFER_PER_BRIDGE_MAX_BYTES`] shared by the standalone streams of its bridge
/// (`shared` counts the bytes they hold; each stream gives its share back when dropped).
#[derive(Debug, Clone)]
pub(crate) struct Budget {
    shared: Arc<AtomicUsize>,
    own_max: usize,
    shared_max: usize,
}

impl Budget {
    /// The budget of a standalone stream of the bridge whose counter is `shared`.
    pub(crate) fn standalone(shared: Arc<AtomicUsize>) -> Self {
        Self {
            shared,
            own_max: STANDALONE_BUFFER_MAX_BYTES,
            shared_max: STANDALONE_BUFFER_PER_BRIDGE_MAX_BYTES,
        }
    }
}

#[derive(Debug)]
struct Inner {
    /// Events from `first_seq` on. Events are only ever dropped from the front, so the dropped
    /// ones are exactly those below `first_seq`.
    events: VecDeque<Event>,
    first_seq: u64,
    /// For a stream restored after a restart, the first event the store held (0: none missing):
    /// how many were missing before it is not known (the store keeps the last rows by count,
    /// and numbers can jump), so a reader from before it is told only that some may be.
    restored_from: u64,
    next_seq: u64,
    done: bool,
    done_at: Option<Instant>,
    /// Bytes of `data` held in `events`.
    bytes: usize,
}

/// A stream of server messages for one client: resumable in the session era.
#[derive(Debug)]
pub(crate) struct SseStream {
    id: String,
    /// The session it belongs to.
    pub(crate) sid: SessionId,
    /// The principal that may read it.
    pub(crate) principal: String,
    /// The bridge (for retention accounting).
    pub(crate) bridge: String,
    inner: Lock<Inner>,
    /// The byte bound, for standalone streams; others are bounded by [`STREAM_EVENTS_MAX`] and
    /// by the request they answer.
    budget: Option<Budget>,
    changed: watch::Sender<u64>,
    /// Highest event number written to any HTTP response so far (0 = none yet).
    sent_upto: std::sync::atomic::AtomicU64,
    /// Where its events are persisted, once it is ([`Self::stored`]).
    durable: std::sync::OnceLock<Durable>,
    /// What persisting it takes, while a durable stream is not persisted yet
    /// ([`SseStreams::insert_durable`]).
    armed: Lock<Option<(StoreWriter, Value)>>,
}

/// What a durable stream needs to persist its events: the write-behind queue and the id of the
/// request it answers (for the error that stands in for a terminal message too large to keep).
#[derive(Debug)]
struct Durable {
    writer: StoreWriter,
    request_id: Value,
    /// The ticket of the write that stores the stream's row, while this relay has yet to wait
    /// for it ([`SseStream::stored`]); `None` for a stream restored from the store.
    opened: Option<u64>,
}

impl Durable {
    /// Queues event `seq` (`data`) for the store. A terminal message is queued reliably, and
    /// one over [`RESUMABLE_TERMINAL_MAX_BYTES`] as the "too large to replay" error. Another
    /// event over [`STORED_EVENT_MAX_BYTES`], or one the queue refuses, is queued reliably as a
    /// "not kept" marker ([`NOT_KEPT`]) instead: every event number reaches the store.
    fn event(&self, stream: &str, seq: u64, data: &str, terminal: bool) {
        let w = |data: String| StoreWrite::Event {
            stream: stream.to_owned(),
            seq,
            data,
            terminal,
            at: unix_now(),
        };
        if terminal {
            let data = if data.len() > RESUMABLE_TERMINAL_MAX_BYTES {
                too_large(&self.request_id).to_string()
            } else {
                data.to_owned()
            };
            self.writer.send_reliable(w(data));
        } else if data.len() > STORED_EVENT_MAX_BYTES || !self.writer.send(w(data.to_owned())) {
            self.writer.send_reliable(w(NOT_KEPT.to_owned()));
        }
    }
}

/// The error a replay gets in place of a terminal message too large to keep.
fn too_large(id: &Value) -> Value {
    jsonrpc::error(
        id,
        code::NOT_REPLAYABLE,
        "the result is larger than the relay keeps for replay (1.5 MB): it was only sent live, on the original response; if you did not receive it, its outcome is unknown to you (check before calling again)",
        None,
    )
}

/// What a restarted relay restores of a stream ([`SseStream::restored`]).
#[derive(Debug)]
pub(crate) struct Restored {
    /// The stream id.
    pub(crate) id: String,
    /// Its events after the priming event, oldest first (maybe with gaps at the front).
    pub(crate) events: Vec<Event>,
    /// The number of the first event held: those before it (after the priming event) are
    /// missing, and a reader from before them is told so.
    pub(crate) first_seq: u64,
    /// The next event's number.
    pub(crate) next_seq: u64,
    /// When it finished, if it did.
    pub(crate) done_at: Option<Instant>,
}

/// The stream was finished already: the message was not added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the stream is finished")]
pub(crate) struct Finished;

impl SseStream {
    /// A new stream holding its priming event.
    pub(crate) fn new(sid: &SessionId, principal: &str, bridge: &str) -> Arc<Self> {
        Self::with_budget(sid, principal, bridge, None)
    }

    /// A new stream holding its priming event, its messages held within `budget` when given.
    pub(crate) fn with_budget(
        sid: &SessionId,
        principal: &str,
        bridge: &str,
        budget: Option<Budget>,
    ) -> Arc<Self> {
        let mut events = VecDeque::new();
        events.push_back(Event {
            seq: 0,
            data: String::new(),
        });
        Arc::new(Self {
            id: crate::auth::random_id(if budget.is_some() {
                STANDALONE_PREFIX
            } else {
                "st"
            }),
            sid: sid.clone(),
            principal: principal.to_owned(),
            bridge: bridge.to_owned(),
            inner: Lock::new(Inner {
                events,
                first_seq: 0,
                restored_from: 0,
                next_seq: 1,
                done: false,
                done_at: None,
                bytes: 0,
            }),
            budget,
            changed: watch::channel(0).0,
            sent_upto: std::sync::atomic::AtomicU64::new(0),
            durable: std::sync::OnceLock::new(),
            armed: Lock::default(),
        })
    }

    /// A stream as a restarted relay restores it from the store: its id, its stored events
    /// (the first event kept is where a reader from before it is told of a gap), finished at
    /// `done_at` if it did. Not durable until [`SseStreams::insert_restored`].
    pub(crate) fn restored(
        sid: &SessionId,
        principal: &str,
        bridge: &str,
        r: Restored,
    ) -> Arc<Self> {
        let mut events = VecDeque::from([Event {
            seq: 0,
            data: String::new(),
        }]);
        let first_seq = r.first_seq;
        let bytes = r.events.iter().map(|e| e.data.len()).sum();
        if first_seq > 1 {
            // The priming event is not kept before a gap: `first_seq` marks the gap.
            events.clear();
        }
        events.extend(r.events);
        Arc::new(Self {
            id: r.id,
            sid: sid.clone(),
            principal: principal.to_owned(),
            bridge: bridge.to_owned(),
            inner: Lock::new(Inner {
                events,
                first_seq: if first_seq > 1 { first_seq } else { 0 },
                restored_from: if first_seq > 1 { first_seq } else { 0 },
                next_seq: r.next_seq,
                done: r.done_at.is_some(),
                done_at: r.done_at,
                bytes,
            }),
            budget: None,
            changed: watch::channel(0).0,
            sent_upto: std::sync::atomic::AtomicU64::new(0),
            durable: std::sync::OnceLock::new(),
            armed: Lock::default(),
        })
    }

    /// The stream id (the part of its event ids before the last `-`).
    #[cfg(test)]
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// Persists a durable stream that is not persisted yet (its row and the events it holds,
    /// then each event as it comes), and waits until the store holds its row, at most `limit`,
    /// so that a relay that dies after the stream's first event left restores the stream (its
    /// replay ends with the relay-restart error if the request's outcome was not stored)
    /// instead of not knowing the event id it gave. Called before the first event of a running
    /// stream leaves: a stream no client has an event id of is never written to the store.
    /// Returns at once for a stream that is not durable or restored; `false` when the store did
    /// not get to the row within `limit` (the stream is then served anyway, as resumable as the
    /// store lets it be).
    pub(crate) async fn stored(&self, limit: std::time::Duration) -> bool {
        self.persist();
        match self.durable.get() {
            Some(Durable {
                writer,
                opened: Some(ticket),
                ..
            }) => writer.applied(*ticket, limit).await,
            _ => true,
        }
    }

    /// Makes the stream persist itself through `writer` when it is first needed
    /// ([`Self::stored`]), `request_id` being the request it answers.
    pub(crate) fn arm(&self, writer: StoreWriter, request_id: Value) {
        *self.armed.lock() = Some((writer, request_id));
    }

    /// Persists the stream if it is armed: queues its row (the ticket [`Self::stored`] awaits),
    /// the events it holds and, when it finished without a message, its end; from then on
    /// [`Self::push`] queues each event. Under the stream's lock, so the store sees its events
    /// once each and in order.
    fn persist(&self) {
        let Some((writer, request_id)) = self.armed.lock().take() else {
            return;
        };
        let g = self.inner.lock();
        let opened = writer.send_reliable_ticket(StoreWrite::StreamOpened {
            id: self.id.clone(),
            sid: self.sid.as_str().to_owned(),
            principal: self.principal.clone(),
            bridge: self.bridge.clone(),
            request_id: request_id.to_string(),
            at: unix_now(),
        });
        let d = Durable {
            writer: writer.clone(),
            request_id,
            opened,
        };
        let last = g.events.back().map(|e| e.seq);
        for e in g.events.iter().filter(|e| e.seq > 0) {
            d.event(&self.id, e.seq, &e.data, g.done && Some(e.seq) == last);
        }
        if g.done && last.is_none_or(|l| l == 0) {
            writer.send_reliable(StoreWrite::StreamFinished {
                stream: self.id.clone(),
                last_seq: g.next_seq - 1,
                at: unix_now(),
            });
        }
        let _ = self.durable.set(d);
    }

    /// Persists the stream now, as when its first event is about to leave (tests of what the
    /// store holds).
    #[cfg(test)]
    pub(crate) fn persist_now(&self) {
        self.persist();
    }

    /// Records that event `seq` was written to a response.
    pub(crate) fn note_sent(&self, seq: u64) {
        self.sent_upto
            .fetch_max(seq, std::sync::atomic::Ordering::Relaxed);
    }

    /// Where a new reader that wants only unsent events starts: after the last event written to
    /// any response, or from the beginning when none was.
    pub(crate) fn unsent_cursor(&self) -> Option<u64> {
        match self.sent_upto.load(std::sync::atomic::Ordering::Relaxed) {
            0 => None,
            n => Some(n),
        }
    }

    /// The SSE event id of event `seq`.
    pub(crate) fn event_id(&self, seq: u64) -> String {
        format!("{}-{seq}", self.id)
    }

    /// Appends a message; with `terminal` the stream is finished after it. To stay within
    /// [`STREAM_EVENTS_MAX`] events and the stream's byte budget, the oldest events are dropped
    /// first; a message that does not fit even then (its bridge's shared budget is held by other
    /// sessions) is dropped itself. A reader that resumes from before a dropped event is told
    /// how many it missed ([`Self::read_after`]).
    ///
    /// Returns how many of the dropped events no response had carried yet (lost for the client).
    ///
    /// # Errors
    /// [`Finished`] when the stream was finished already (the message is not added).
    pub(crate) fn push(&self, message: &Value, terminal: bool) -> Result<u64, Finished> {
        let data = message.to_string();
        let size = data.len();
        let mut g = self.inner.lock();
        if g.done {
            return Err(Finished);
        }
        let seq = g.next_seq;
        g.next_seq += 1;
        let sent = self.sent_upto.load(Ordering::Relaxed);
        let mut lost = 0;
        let mut drop_front = |g: &mut Inner| {
            if let Some(e) = g.events.pop_front() {
                g.bytes -= e.data.len();
                if let Some(b) = &self.budget {
                    b.shared.fetch_sub(e.data.len(), Ordering::Relaxed);
                }
                g.first_seq = e.seq + 1;
                if e.seq > sent {
                    lost += 1;
                }
            }
        };
        let fits = |g: &Inner| {
            self.budget.as_ref().is_none_or(|b| {
                g.bytes + size <= b.own_max
                    && b.shared.load(Ordering::Relaxed) + size <= b.shared_max
            })
        };
        while !g.events.is_empty() && (g.events.len() >= STREAM_EVENTS_MAX || !fits(&g)) {
            drop_front(&mut g);
        }
        if let Some(d) = self.durable.get() {
            // Under the stream's lock, so the store sees its events in order.
            d.event(&self.id, seq, &data, terminal);
        }
        if fits(&g) {
            g.bytes += size;
            if let Some(b) = &self.budget {
                b.shared.fetch_add(size, Ordering::Relaxed);
            }
            g.events.push_back(Event { seq, data });
        } else {
            // Nothing of its own left to drop: the message itself is the loss.
            g.first_seq = seq + 1;
            lost += 1;
        }
        if terminal {
            g.done = true;
            g.done_at = Some(Instant::now());
        }
        drop(g);
        self.changed.send_replace(seq);
        Ok(lost)
    }

    /// Finishes the stream without a further message (a cancelled request).
    pub(crate) fn finish(&self) {
        {
            let mut g = self.inner.lock();
            if !g.done {
                g.done = true;
                g.done_at = Some(Instant::now());
                if let Some(d) = self.durable.get() {
                    d.writer.send_reliable(StoreWrite::StreamFinished {
                        stream: self.id.clone(),
                        last_seq: g.next_seq - 1,
                        at: unix_now(),
                    });
                }
            }
        }
        self.changed.send_modify(|v| *v += 0);
    }

    /// How many messages the stream holds after its priming event, and whether it is finished,
    /// without handing any out.
    pub(crate) fn summary(&self) -> (usize, bool) {
        let g = self.inner.lock();
        (g.events.iter().filter(|e| e.seq > 0).count(), g.done)
    }

    /// Events after `after` (all when `None`), and whether the stream is finished after them.
    /// An oversized terminal message is handed out once, then replaced by an error. When events
    /// after `after` were dropped ([`Self::push`]), the first event is a `notifications/message`
    /// warning (MCP 2025-11-25 Server Utilities / Logging) that says how many, numbered as the
    /// last dropped event so that resuming after it does not repeat it.
    pub(crate) fn read_after(&self, after: Option<u64>) -> (Vec<Event>, bool) {
        let mut g = self.inner.lock();
        let from = after.map_or(0, |a| a.saturating_add(1));
        let mut out = Vec::new();
        // Event 0 is the priming event, not a message: it is not counted as missed.
        let missed = g.first_seq.saturating_sub(from.max(1));
        if missed > 0 {
            let notice = if from < g.restored_from {
                restart_gap_notice()
            } else {
                gap_notice(missed)
            };
            out.push(Event {
                seq: g.first_seq - 1,
                data: notice.to_string(),
            });
        }
        out.extend(g.events.iter().filter(|e| e.seq >= from).cloned());
        let done = g.done;
        if done
            && let Some(last) = g.events.back_mut()
            && last.data.len() > RESUMABLE_TERMINAL_MAX_BYTES
            && out.last().is_some_and(|e| e.seq == last.seq)
        {
            // Its head only: the result it carries (over the bound) is skipped, not built.
            let id = Head::parse(last.data.as_bytes())
                .ok()
                .and_then(|h| h.id_member().cloned())
                .unwrap_or(Value::Null);
            last.data = too_large(&id).to_string();
        }
        (out, done)
    }

    /// A receiver that changes whenever events are added or the stream finishes.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    fn finished_at(&self) -> Option<Instant> {
        self.inner.lock().done_at
    }
}

impl Drop for SseStream {
    fn drop(&mut self) {
        if let Some(b) = &self.budget {
            b.shared
                .fetch_sub(self.inner.lock().bytes, Ordering::Relaxed);
        }
    }
}

/// The warning a reader gets in place of `missed` messages that were dropped before it read them.
fn gap_notice(missed: u64) -> Value {
    warning(
        format!(
            "{missed} server message(s) for this session were dropped: they were not read in time and exceeded the relay's buffer"
        ),
        Some(missed),
    )
}

/// The warning a reader of a stream restored after a restart gets in place of the events
/// before the first one the store held.
fn restart_gap_notice() -> Value {
    warning(
        "earlier server messages of this request are not held by the relay since it restarted (its store keeps the last 16 of a stream): any you did not receive are lost".to_owned(),
        None,
    )
}

/// The warning a replay after a relay restart gets in place of an event the store did not keep
/// (larger than [`STORED_EVENT_MAX_BYTES`], or the store fell behind): numbered as that event,
/// so a reader that had it live never sees the warning.
pub(crate) fn not_kept_notice() -> Value {
    warning(
        format!(
            "a server message of this request was not kept across the relay's restart (larger than {STORED_EVENT_MAX_BYTES} bytes, or the relay's store fell behind): if you did not receive it before, it is lost"
        ),
        Some(1),
    )
}

/// The warning a client resuming a standalone stream the relay no longer holds gets first.
fn stream_lost_notice() -> Value {
    warning(
        "the relay no longer holds the stream this GET resumed (it restarted since): this is the session's stream from now on, and server messages sent on the old one after the last one you received may have been lost".to_owned(),
        None,
    )
}

/// A `notifications/message` warning (MCP 2025-11-25 Server Utilities / Logging) that `dropped`
/// messages are missing (`null`: an unknown number).
fn warning(message: String, dropped: Option<u64>) -> Value {
    serde_json::json!({
        "jsonrpc": "2.0",
        "method": "notifications/message",
        "params": {
            "level": "warning",
            "logger": "machine-mcp-relay",
            "data": {"message": message, "dropped": dropped},
        },
    })
}

#[cfg(test)]
mod tests;
