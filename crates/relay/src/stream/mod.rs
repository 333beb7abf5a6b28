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
//! Finished streams are kept for [`RESUMABLE_RETENTION`], at most [`RESUMABLE_STREAMS_PER_BRIDGE`]
//! per bridge; a terminal message over [`RESUMABLE_TERMINAL_MAX_BYTES`] is delivered live but
//! replaced by an error once read, so replay cannot hold it.
//!
//! MCP 2026-07-28 answers use the same type for their SSE (or held JSON) answer, unregistered
//! and written without event ids (`crate::streamable::sse::Framing::Plain`).

use std::{
    collections::{HashMap, VecDeque},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use serde_json::Value;
use tokio::{sync::watch, time::Instant};

use protocol::{
    ids::SessionId,
    jsonrpc::{self, code},
    limits::{
        RESUMABLE_RETENTION, RESUMABLE_STREAMS_PER_BRIDGE, RESUMABLE_TERMINAL_MAX_BYTES,
        STANDALONE_BUFFER_MAX_BYTES, STANDALONE_BUFFER_PER_BRIDGE_MAX_BYTES,
    },
};

use crate::{
    lock::Lock,
    storage::{
        StoreWrite, StoreWriter,
        durable::{NOT_KEPT, STORED_EVENT_MAX_BYTES},
        now as unix_now,
    },
};

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
    /// Where its events are persisted, for a durable stream (a session's POST stream).
    durable: std::sync::OnceLock<Durable>,
}

/// What a durable stream needs to persist its events: the write-behind queue and the id of the
/// request it answers (for the error that stands in for a terminal message too large to keep).
#[derive(Debug)]
struct Durable {
    writer: StoreWriter,
    request_id: Value,
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
        })
    }

    /// The stream id (the part of its event ids before the last `-`).
    #[cfg(test)]
    pub(crate) fn id(&self) -> &str {
        &self.id
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
            let id = serde_json::from_str::<Value>(&last.data)
                .ok()
                .and_then(|v| v.get("id").cloned())
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

/// What a `GET` with `Last-Event-ID` reads ([`SseStreams::resume`]).
#[derive(Debug)]
pub(crate) enum Resume {
    /// The stream, after the event numbered by the cursor.
    Replay(Arc<SseStream>, u64),
    /// The session's standalone stream, after what was sent of it: the cursor named a standalone
    /// stream this relay does not hold (it restarted since), so a warning that messages may
    /// have been lost was added to it first.
    Standalone,
    /// No stream of the session and principal holds that event (unknown, expired or foreign).
    Unknown,
}

/// All resumable streams of this relay node, for `Last-Event-ID` lookups and retention; with a
/// [`StoreWriter`], durable ones are also persisted (a restarted relay replays them).
#[derive(Debug, Default)]
pub(crate) struct SseStreams {
    map: Lock<HashMap<String, Arc<SseStream>>>,
    writer: Option<StoreWriter>,
}

impl SseStreams {
    /// Streams persisted through `writer`.
    pub(crate) fn durable(writer: StoreWriter) -> Self {
        Self {
            map: Lock::default(),
            writer: Some(writer),
        }
    }

    /// Registers a stream.
    pub(crate) fn insert(&self, s: Arc<SseStream>) {
        self.map.lock().insert(s.id.clone(), s);
    }

    /// Registers a session's POST stream answering request `request_id`, and persists it from
    /// now on (with the events it holds already) when this node keeps streams durable: a
    /// restarted relay replays its events, or, when it never finished, ends it with the error
    /// saying the relay restarted while its request was in flight.
    pub(crate) fn insert_durable(&self, s: Arc<SseStream>, request_id: &Value) {
        if let Some(writer) = &self.writer {
            let g = s.inner.lock();
            writer.send_reliable(StoreWrite::StreamOpened {
                id: s.id.clone(),
                sid: s.sid.as_str().to_owned(),
                principal: s.principal.clone(),
                bridge: s.bridge.clone(),
                request_id: request_id.to_string(),
                at: unix_now(),
            });
            let d = Durable {
                writer: writer.clone(),
                request_id: request_id.clone(),
            };
            let last = g.events.back().map(|e| e.seq);
            for e in g.events.iter().filter(|e| e.seq > 0) {
                d.event(&s.id, e.seq, &e.data, g.done && Some(e.seq) == last);
            }
            if g.done && last.is_none_or(|l| l == 0) {
                writer.send_reliable(StoreWrite::StreamFinished {
                    stream: s.id.clone(),
                    last_seq: g.next_seq - 1,
                    at: unix_now(),
                });
            }
            let _ = s.durable.set(d);
        }
        self.insert(s);
    }

    /// Registers a stream restored from the store, persisted from now on like the one it was.
    pub(crate) fn insert_restored(&self, s: Arc<SseStream>, request_id: &Value) {
        if let Some(writer) = &self.writer {
            let _ = s.durable.set(Durable {
                writer: writer.clone(),
                request_id: request_id.clone(),
            });
        }
        self.insert(s);
    }

    /// A client resumed stream `s` after event `seq`: it has the events up to it, and the store
    /// forgets them; when `seq` is the last event of a finished stream, the whole stream is
    /// forgotten, in memory too (a later `GET` naming it gets 404), so a result is never held
    /// past its acknowledgement.
    pub(crate) fn acknowledge(&self, s: &SseStream, seq: u64) {
        let complete = {
            let g = s.inner.lock();
            g.done && seq + 1 >= g.next_seq
        };
        if complete {
            self.map.lock().remove(&s.id);
        }
        if let Some(d) = s.durable.get() {
            d.writer.send_reliable(StoreWrite::Acknowledged {
                stream: s.id.clone(),
                seq,
            });
        }
    }

    /// How many streams are registered (the `machine_mcp_relay_streams` gauge).
    pub(crate) fn len(&self) -> usize {
        self.map.lock().len()
    }

    /// Where a `GET` of session `sid` by `principal` with `Last-Event-ID: last_event_id` reads
    /// (MCP 2025-11-25 Streamable HTTP § Resumability and Redelivery); `standalone` is the
    /// session's standalone stream.
    pub(crate) fn resume(
        &self,
        last_event_id: &str,
        sid: &SessionId,
        principal: &str,
        standalone: &Arc<SseStream>,
    ) -> Resume {
        match self.lookup(last_event_id, sid, principal) {
            Some((st, seq)) if seq < st.inner.lock().next_seq => Resume::Replay(st, seq),
            // An event the stream never sent is no cursor.
            Some(_) => Resume::Unknown,
            None if last_event_id.starts_with(STANDALONE_PREFIX) => {
                let _ = standalone.push(&stream_lost_notice(), false);
                Resume::Standalone
            }
            None => Resume::Unknown,
        }
    }

    /// The stream named by a `Last-Event-ID`, with the event number, if it exists and belongs to
    /// `sid` and `principal` (a foreign cursor is as unknown as a made-up one).
    pub(crate) fn lookup(
        &self,
        last_event_id: &str,
        sid: &SessionId,
        principal: &str,
    ) -> Option<(Arc<SseStream>, u64)> {
        let (id, seq) = last_event_id.rsplit_once('-')?;
        let seq: u64 = seq.parse().ok()?;
        let m = self.map.lock();
        let s = m.get(id)?;
        (s.sid == *sid && s.principal == principal).then(|| (s.clone(), seq))
    }

    /// Drops finished streams past their retention, and the oldest finished ones of a bridge
    /// beyond the per-bridge cap. Returns how many were dropped.
    pub(crate) fn sweep(&self) -> usize {
        let mut m = self.map.lock();
        let now = Instant::now();
        let before = m.len();
        let mut gone = Vec::new();
        m.retain(|_, s| {
            let keep = s
                .finished_at()
                .is_none_or(|t| now.duration_since(t) < RESUMABLE_RETENTION);
            if !keep {
                gone.push(s.clone());
            }
            keep
        });
        let mut finished: HashMap<String, Vec<(Instant, String)>> = HashMap::new();
        for (id, s) in m.iter() {
            if let Some(t) = s.finished_at() {
                finished
                    .entry(s.bridge.clone())
                    .or_default()
                    .push((t, id.clone()));
            }
        }
        for (_, mut v) in finished {
            if v.len() > RESUMABLE_STREAMS_PER_BRIDGE {
                v.sort();
                for (_, id) in v.iter().take(v.len() - RESUMABLE_STREAMS_PER_BRIDGE) {
                    if let Some(s) = m.remove(id) {
                        gone.push(s);
                    }
                }
            }
        }
        let n = before - m.len();
        drop(m);
        if let Some(w) = &self.writer {
            let ids: Vec<String> = gone
                .into_iter()
                .filter(|s| s.durable.get().is_some())
                .map(|s| s.id.clone())
                .collect();
            if !ids.is_empty() {
                w.send_reliable(StoreWrite::StreamsDropped { ids });
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn events_replay_after_a_cursor_and_foreign_cursors_fail() {
        let s = SseStream::new(&SessionId::new("sid"), "p1", "b");
        s.push(
            &json!({"jsonrpc": "2.0", "method": "notifications/progress"}),
            false,
        )
        .unwrap();
        s.push(&json!({"jsonrpc": "2.0", "id": 1, "result": {}}), true)
            .unwrap();
        let (all, done) = s.read_after(None);
        assert_eq!(all.iter().map(|e| e.seq).collect::<Vec<_>>(), [0, 1, 2]);
        assert!(done);
        let (tail, _) = s.read_after(Some(1));
        assert_eq!(tail.len(), 1);
        assert!(tail[0].data.contains("\"result\""));
        assert!(
            s.push(&json!({}), false).is_err(),
            "a finished stream takes nothing"
        );
        let streams = SseStreams::default();
        streams.insert(s.clone());
        let cursor = s.event_id(1);
        assert!(
            streams
                .lookup(&cursor, &SessionId::new("sid"), "p1")
                .is_some()
        );
        assert!(
            streams
                .lookup(&cursor, &SessionId::new("sid"), "p2")
                .is_none()
        );
        assert!(
            streams
                .lookup(&cursor, &SessionId::new("other"), "p1")
                .is_none()
        );
        assert!(
            streams
                .lookup("nonsense", &SessionId::new("sid"), "p1")
                .is_none()
        );
    }

    #[test]
    fn oversized_terminal_messages_are_handed_out_once() {
        let s = SseStream::new(&SessionId::new("sid"), "p", "b");
        let big = "x".repeat(RESUMABLE_TERMINAL_MAX_BYTES + 10);
        s.push(
            &json!({"jsonrpc": "2.0", "id": 7, "result": {"big": big}}),
            true,
        )
        .unwrap();
        let (first, _) = s.read_after(Some(0));
        assert!(first[0].data.len() > RESUMABLE_TERMINAL_MAX_BYTES);
        let (again, _) = s.read_after(Some(0));
        assert!(again[0].data.contains("-32002"));
        assert!(again[0].data.contains("\"id\":7"));
    }

    fn budget(shared: &Arc<AtomicUsize>, own_max: usize, shared_max: usize) -> Option<Budget> {
        Some(Budget {
            shared: shared.clone(),
            own_max,
            shared_max,
        })
    }

    fn note(n: u64) -> Value {
        json!({"jsonrpc": "2.0", "method": "m", "params": {"n": n}})
    }

    #[test]
    fn a_full_stream_drops_its_oldest_and_a_reader_past_the_gap_is_told() {
        let shared = Arc::new(AtomicUsize::new(0));
        let size = note(1).to_string().len();
        let s = SseStream::with_budget(
            &SessionId::new("sid"),
            "p",
            "b",
            budget(&shared, 3 * size, 100 * size),
        );
        for n in 1..=5 {
            let lost = s.push(&note(n), false).unwrap();
            assert_eq!(lost, u64::from(n > 3), "push {n}");
        }
        assert_eq!(shared.load(Ordering::Relaxed), 3 * size);
        let (events, _) = s.read_after(None);
        assert_eq!(
            events.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [2, 3, 4, 5]
        );
        assert!(
            events[0].data.contains("\"dropped\":2"),
            "{}",
            events[0].data
        );
        // Resuming after the notice (or after any event past the gap) repeats nothing.
        let (events, _) = s.read_after(Some(2));
        assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), [3, 4, 5]);
        // Events a response carried are not lost when dropped later.
        s.note_sent(5);
        assert_eq!(s.push(&note(6), false), Ok(0));
        drop(events);
        drop(s);
        assert_eq!(
            shared.load(Ordering::Relaxed),
            0,
            "a dropped stream gives its bytes back"
        );
    }

    #[test]
    fn the_shared_budget_of_a_bridge_bounds_all_its_streams() {
        let shared = Arc::new(AtomicUsize::new(0));
        let size = note(1).to_string().len();
        let mk = || {
            SseStream::with_budget(
                &SessionId::new("sid"),
                "p",
                "b",
                budget(&shared, 10 * size, 4 * size),
            )
        };
        let (a, b) = (mk(), mk());
        for n in 1..=4 {
            assert_eq!(a.push(&note(n), false), Ok(0));
        }
        // `b` holds nothing it could drop: its message is the loss.
        assert_eq!(b.push(&note(9), false), Ok(1));
        assert_eq!(shared.load(Ordering::Relaxed), 4 * size);
        let (events, _) = b.read_after(None);
        assert_eq!(events.len(), 1, "only the notice");
        assert!(events[0].data.contains("\"dropped\":1"));
        // `a` makes room by dropping its own oldest.
        assert_eq!(a.push(&note(5), false), Ok(1));
        assert_eq!(shared.load(Ordering::Relaxed), 4 * size);
    }

    #[tokio::test(start_paused = true)]
    async fn finished_streams_expire_after_retention() {
        let streams = SseStreams::default();
        let s = SseStream::new(&SessionId::new("sid"), "p", "b");
        streams.insert(s.clone());
        s.push(&json!({"id": 1, "result": {}}), true).unwrap();
        assert_eq!(streams.sweep(), 0);
        tokio::time::advance(RESUMABLE_RETENTION + std::time::Duration::from_secs(1)).await;
        assert_eq!(streams.sweep(), 1);
    }

    /// Every event number reaches the store: an event the write queue refuses, or one too large
    /// to keep, is queued as a "not kept" marker, in order with the others.
    #[tokio::test]
    async fn events_the_store_cannot_keep_are_queued_as_markers_in_order() {
        let (w, mut rx) = StoreWriter::channel();
        let streams = SseStreams::durable(w.clone());
        let s = SseStream::new(&SessionId::new("sid"), "p", "b");
        streams.insert_durable(s.clone(), &json!(1));
        let note = |pad: usize| json!({"method": "notifications/progress", "params": {"m": "x".repeat(pad)}});
        s.push(&note(0), false).unwrap();
        s.push(&note(STORED_EVENT_MAX_BYTES), false).unwrap();
        let filler = || StoreWrite::Sweep { now: 0 };
        while w.send(filler()) {}
        s.push(&note(0), false).unwrap();
        s.push(&json!({"id": 1, "result": {}}), true).unwrap();
        let mut events = Vec::new();
        while let Ok(m) = rx.try_recv() {
            if let StoreWrite::Event {
                seq,
                data,
                terminal,
                ..
            } = m
            {
                events.push((seq, data == NOT_KEPT, terminal));
            }
        }
        assert_eq!(
            events,
            [
                (1, false, false),
                (2, true, false),
                (3, true, false),
                (4, false, true)
            ]
        );
    }

    /// Regression: a cursor at the largest event number overflowed.
    #[test]
    fn a_cursor_at_the_largest_event_number_reads_nothing() {
        let s = SseStream::new(&SessionId::new("sid"), "p", "b");
        s.push(&json!({"method": "notifications/progress"}), false)
            .unwrap();
        let (events, done) = s.read_after(Some(u64::MAX));
        assert!(events.is_empty() && !done);
        let streams = SseStreams::default();
        streams.insert(s.clone());
        let standalone = SseStream::new(&SessionId::new("sid"), "p", "b");
        assert!(
            matches!(
                streams.resume(
                    &s.event_id(u64::MAX),
                    &SessionId::new("sid"),
                    "p",
                    &standalone
                ),
                Resume::Unknown
            ),
            "an event the stream never sent is not a cursor"
        );
    }

    /// Regression: a result acknowledged by a `GET` naming its event was
    /// still served from memory until the retention ran out.
    #[test]
    fn acknowledging_the_last_event_of_a_finished_stream_forgets_it() {
        let streams = SseStreams::default();
        let sid = SessionId::new("sid");
        let s = SseStream::new(&sid, "p", "b");
        streams.insert(s.clone());
        s.push(&json!({"method": "notifications/progress"}), false)
            .unwrap();
        streams.acknowledge(&s, 1);
        assert!(
            streams.lookup(&s.event_id(1), &sid, "p").is_some(),
            "running"
        );
        s.push(&json!({"id": 1, "result": {}}), true).unwrap();
        streams.acknowledge(&s, 1);
        assert!(
            streams.lookup(&s.event_id(1), &sid, "p").is_some(),
            "not past the result"
        );
        streams.acknowledge(&s, 2);
        assert!(streams.lookup(&s.event_id(0), &sid, "p").is_none());
    }
}
