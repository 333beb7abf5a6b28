//! [`SseStreams`]: the resumable streams of this relay node, by id — what a `GET` with
//! `Last-Event-ID` reads ([`SseStreams::resume`], only by the stream's own principal and
//! session), what acknowledging a cursor forgets, retention and the per-bridge cap, and for
//! durable streams their rows in the store.

use std::{collections::HashMap, sync::Arc};

use serde_json::Value;
use tokio::time::Instant;

use crate::{limits::RESUMABLE_RETENTION, limits::RESUMABLE_STREAMS_PER_BRIDGE};
use protocol::ids::SessionId;

use super::{Durable, STANDALONE_PREFIX, SseStream, stream_lost_notice};
use crate::storage::{StoreWrite, StoreWriter};
use lock::Lock;

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

    /// Registers a session's POST stream answering request `request_id`, durable when this
    /// node keeps streams durable: the stream is written to the store (with the events it holds
    /// by then) once its first event is about to reach a client while it runs
    /// ([`SseStream::stored`], which the HTTP layer awaits first), so that a restarted relay
    /// replays its events, or, when it never finished, ends it with the error saying the relay
    /// restarted while its request was in flight. A stream that finished before any of it was
    /// sent goes to its client whole, with nothing to resume, and is never written.
    pub(crate) fn insert_durable(&self, s: Arc<SseStream>, request_id: &Value) {
        if let Some(writer) = &self.writer {
            s.arm(writer.clone(), request_id.clone());
        }
        self.insert(s);
    }

    /// Registers a stream restored from the store, persisted from now on like the one it was.
    pub(crate) fn insert_restored(&self, s: Arc<SseStream>, request_id: &Value) {
        if let Some(writer) = &self.writer {
            let _ = s.durable.set(Durable {
                writer: writer.clone(),
                request_id: request_id.clone(),
                opened: None,
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
