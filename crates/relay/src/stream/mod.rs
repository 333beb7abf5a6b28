//! SSE streams: what the relay collects for a client ([`SseStream`]) and how it is written
//! ([`sse`]).
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
//! and written without event ids ([`sse::Framing::Plain`]).

pub(crate) mod sse;

use std::{
    collections::{HashMap, VecDeque},
    sync::Arc,
};

use serde_json::Value;
use tokio::{sync::watch, time::Instant};

use protocol::{
    ids::SessionId,
    jsonrpc::{self, code},
    limits::{RESUMABLE_RETENTION, RESUMABLE_STREAMS_PER_BRIDGE, RESUMABLE_TERMINAL_MAX_BYTES},
};

use crate::lock::Lock;

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

#[derive(Debug)]
struct Inner {
    /// Events from `first_seq` on.
    events: VecDeque<Event>,
    first_seq: u64,
    next_seq: u64,
    done: bool,
    done_at: Option<Instant>,
    dropped: u64,
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
    changed: watch::Sender<u64>,
    /// Highest event number written to any HTTP response so far (0 = none yet).
    sent_upto: std::sync::atomic::AtomicU64,
}

/// The stream was finished already: the message was not added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the stream is finished")]
pub(crate) struct Finished;

impl SseStream {
    /// A new stream holding its priming event.
    pub(crate) fn new(sid: &SessionId, principal: &str, bridge: &str) -> Arc<Self> {
        let mut events = VecDeque::new();
        events.push_back(Event {
            seq: 0,
            data: String::new(),
        });
        Arc::new(Self {
            id: crate::auth::random_id("st"),
            sid: sid.clone(),
            principal: principal.to_owned(),
            bridge: bridge.to_owned(),
            inner: Lock::new(Inner {
                events,
                first_seq: 0,
                next_seq: 1,
                done: false,
                done_at: None,
                dropped: 0,
            }),
            changed: watch::channel(0).0,
            sent_upto: std::sync::atomic::AtomicU64::new(0),
        })
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

    /// Appends a message; with `terminal` the stream is finished after it.
    ///
    /// # Errors
    /// [`Finished`] when the stream was finished already (the message is not added).
    pub(crate) fn push(&self, message: &Value, terminal: bool) -> Result<(), Finished> {
        let data = message.to_string();
        let mut g = self.inner.lock();
        if g.done {
            return Err(Finished);
        }
        let seq = g.next_seq;
        g.next_seq += 1;
        g.events.push_back(Event { seq, data });
        while g.events.len() > STREAM_EVENTS_MAX {
            g.events.pop_front();
            g.first_seq += 1;
            g.dropped += 1;
        }
        if terminal {
            g.done = true;
            g.done_at = Some(Instant::now());
        }
        drop(g);
        self.changed.send_replace(seq);
        Ok(())
    }

    /// Finishes the stream without a further message (a cancelled request).
    pub(crate) fn finish(&self) {
        {
            let mut g = self.inner.lock();
            if !g.done {
                g.done = true;
                g.done_at = Some(Instant::now());
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
    /// An oversized terminal message is handed out once, then replaced by an error.
    pub(crate) fn read_after(&self, after: Option<u64>) -> (Vec<Event>, bool) {
        let mut g = self.inner.lock();
        let from = after.map_or(0, |a| a + 1);
        let out: Vec<Event> = g.events.iter().filter(|e| e.seq >= from).cloned().collect();
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
            last.data = jsonrpc::error(
                &id,
                code::NOT_REPLAYABLE,
                "the result was delivered once and is too large to replay",
                None,
            )
            .to_string();
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

/// All resumable streams of this relay node, for `Last-Event-ID` lookups and retention.
#[derive(Debug, Default)]
pub(crate) struct SseStreams {
    map: Lock<HashMap<String, Arc<SseStream>>>,
}

impl SseStreams {
    /// Registers a stream.
    pub(crate) fn insert(&self, s: Arc<SseStream>) {
        self.map.lock().insert(s.id.clone(), s);
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
        m.retain(|_, s| {
            s.finished_at()
                .is_none_or(|t| now.duration_since(t) < RESUMABLE_RETENTION)
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
                    m.remove(id);
                }
            }
        }
        before - m.len()
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
}
