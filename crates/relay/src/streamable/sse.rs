//! Writing an [`SseStream`] to an HTTP response (`text/event-stream`), in the framing the
//! client's protocol version defines, and nothing newer. A response is one reader of the stream:
//! the stream goes on collecting when it ends.
//!
//! - 2025-11-25: event ids, and the stream opens with the priming event: its id, a `retry`
//!   hint and an empty `data:` field (Streamable HTTP § Resumability and Redelivery, which
//!   introduced it).
//! - 2025-06-18 and 2025-03-26: event ids (§ Resumability and Redelivery: servers MAY attach
//!   an id), no priming event and no `retry`: those revisions define no event without a
//!   message, and their clients may parse every `data:` line as a JSON-RPC message (the
//!   TypeScript SDK bundled by Gemini CLI 0.61 does, and then drops the server).
//! - 2026-07-28: `data:` lines only (streams are not resumable).
//!
//! An event id leaves only once a client can resume after it. A resumable stream's first event
//! waits up to [`FIRST_EVENT_LINGER`] for the stream to finish; one that finishes by then (a
//! quick call) is written whole, in one chunk, and never stored: its ids reach the client
//! together with its final message, after which no client resumes. Otherwise the stream is
//! written to the relay's store and its first event waits until the store holds it
//! ([`SseStream::stored`], at most [`STREAM_STORED_WAIT`]; it goes whole at once if it
//! finishes first), so a relay killed after that event still knows the id. The response to a
//! POST (read from its start, with the priming event) holds its headers until that first chunk
//! is ready, so a quick answer costs one write.
//!
//! Written by hand rather than with axum's `Sse` so that the priming event carries an id, an
//! empty `data:` field and a `retry` hint, and so a keepalive comment follows every quiet
//! interval.

use std::{collections::VecDeque, convert::Infallible, sync::Arc, time::Duration};

use axum::{
    body::{Body, Bytes},
    http::header,
    response::{IntoResponse, Response},
};
use futures_util::{Stream as FuturesStream, StreamExt};
use tokio::sync::watch;

use crate::{
    limits::{FIRST_EVENT_LINGER, STREAM_STORED_WAIT},
    stream::{Event, SseStream},
};

/// Reconnection delay suggested to clients in the priming event (SSE `retry`, ms).
const SSE_RETRY_MS: u64 = 1000;

/// The first protocol version whose streams open with the priming event (MCP 2025-11-25
/// Streamable HTTP § Resumability and Redelivery). Versions are dated `YYYY-MM-DD`, so they
/// order as strings.
const PRIMING_SINCE: &str = "2025-11-25";

/// How events are framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// The session era (Streamable HTTP § Resumability and Redelivery): every event has an
    /// `id: <stream>-<n>` a client may resume after with `Last-Event-ID`, keepalives are
    /// `: keepalive` comments, and what was written is recorded ([`SseStream::note_sent`]).
    /// With `priming` (2025-11-25 on) a stream read from its start opens with the priming event
    /// (event 0: its id, `retry`, an empty `data:`); without it event 0 is never written.
    Resumable {
        /// Whether the priming event is written.
        priming: bool,
    },
    /// MCP 2026-07-28 (Streamable HTTP § Receiving Messages: streams are not resumable): `data:`
    /// lines only, no priming event, keepalives are empty `:` comments.
    Plain,
}

impl Framing {
    /// The framing of the streams of a session that negotiated `version` (a handshake-era
    /// version): the priming event only from [`PRIMING_SINCE`].
    pub(crate) fn session(version: &str) -> Self {
        Self::Resumable {
            priming: version >= PRIMING_SINCE,
        }
    }

    fn keepalive(self) -> &'static [u8] {
        match self {
            Self::Resumable { .. } => b": keepalive\n\n",
            Self::Plain => b":\n\n",
        }
    }

    fn resumable(self) -> bool {
        matches!(self, Self::Resumable { .. })
    }

    /// Where a reader asked to start after `after` starts: from event 1 (past the priming
    /// event) when the priming event is not written.
    fn start(self, after: Option<u64>) -> Option<u64> {
        match self {
            Self::Resumable { priming: true } => after,
            _ => Some(after.unwrap_or(0)),
        }
    }
}

/// An SSE response reading `st` after event `after` (from the first event when `None`; the
/// priming event, event 0, is written only when `framing` has it), with a keepalive comment
/// after every quiet `keepalive`. `guard` goes with the body and is dropped when the client
/// closes the stream or the stream ends (a 2026-07-28 call is cancelled by it). Read from its
/// start with the priming event, the response is returned once its first chunk is ready (module
/// docs), at most [`FIRST_EVENT_LINGER`] + [`STREAM_STORED_WAIT`] later.
pub(crate) async fn response<G: Send + 'static>(
    st: Arc<SseStream>,
    after: Option<u64>,
    keepalive: Duration,
    framing: Framing,
    guard: G,
) -> Response {
    let leads = framing == Framing::Resumable { priming: true } && after.is_none();
    let mut events = Box::pin(events(st, after, keepalive, framing, guard));
    let body = if leads {
        match tokio::time::timeout(FIRST_EVENT_LINGER + STREAM_STORED_WAIT, events.next()).await {
            Ok(Some(first)) => {
                Body::from_stream(futures_util::stream::once(async { first }).chain(events))
            }
            Ok(None) | Err(_) => Body::from_stream(events),
        }
    } else {
        Body::from_stream(events)
    };
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::HeaderName::from_static("x-accel-buffering"), "no"),
        ],
        body,
    )
        .into_response()
}

/// One event as bytes: in [`Framing::Resumable`] `id: <event id>` first (and for the priming
/// event `retry` and one empty `data:`), then a `data:` line per line of `e.data`.
fn encode(st: &SseStream, e: &Event, framing: Framing) -> Bytes {
    let mut s = String::with_capacity(e.data.len() + 48);
    if framing.resumable() {
        s.push_str("id: ");
        s.push_str(&st.event_id(e.seq));
        s.push('\n');
        if e.seq == 0 {
            s.push_str(&format!("retry: {SSE_RETRY_MS}\ndata: \n\n"));
            return Bytes::from(s);
        }
    }
    for line in e.data.split('\n') {
        s.push_str("data: ");
        s.push_str(line);
        s.push('\n');
    }
    s.push('\n');
    Bytes::from(s)
}

fn events<G: Send + 'static>(
    st: Arc<SseStream>,
    after: Option<u64>,
    keepalive: Duration,
    framing: Framing,
    guard: G,
) -> impl FuturesStream<Item = Result<Bytes, Infallible>> {
    struct State<G> {
        st: Arc<SseStream>,
        cursor: Option<u64>,
        rx: watch::Receiver<u64>,
        buf: VecDeque<Event>,
        done: bool,
        keepalive: Duration,
        framing: Framing,
        /// No event has been written yet, so the next one waits for the stream to finish or for
        /// the store (module docs).
        first: bool,
        /// Until when the first event waits for the stream to finish.
        linger_until: tokio::time::Instant,
        _guard: G,
    }
    impl<G> State<G> {
        /// Takes in the events that came, and whether the stream finished.
        fn refresh(&mut self) {
            let last = self.buf.back().map(|e| e.seq).or(self.cursor);
            let (evs, done) = self.st.read_after(last);
            self.buf.extend(evs);
            self.done = done;
        }

        /// Before the first event of a running stream: waits until it finishes or
        /// [`FIRST_EVENT_LINGER`] is over; then, while it runs, until the store holds the
        /// stream's row (at most [`STREAM_STORED_WAIT`]) or it finishes, whichever comes first.
        /// A stream that finished is then written whole, in one chunk.
        async fn await_done_or_stored(&mut self) {
            let linger = tokio::time::sleep_until(self.linger_until);
            tokio::pin!(linger);
            while !self.done {
                tokio::select! {
                    r = self.rx.changed() => {
                        if r.is_err() {
                            return;
                        }
                        self.refresh();
                    }
                    () = &mut linger => break,
                }
            }
            if self.done {
                return;
            }
            let st = self.st.clone();
            let stored = st.stored(STREAM_STORED_WAIT);
            tokio::pin!(stored);
            loop {
                tokio::select! {
                    ok = &mut stored => {
                        if !ok {
                            tracing::warn!(
                                "the relay store did not write a stream's row in time; serving it anyway (a relay crash now would forget it)"
                            );
                        }
                        return;
                    }
                    r = self.rx.changed() => {
                        if r.is_err() {
                            return;
                        }
                        self.refresh();
                        if self.done {
                            return;
                        }
                    }
                }
            }
        }
    }
    let rx = st.subscribe();
    let state = State {
        st,
        cursor: framing.start(after),
        rx,
        buf: VecDeque::new(),
        done: false,
        keepalive,
        framing,
        first: true,
        linger_until: tokio::time::Instant::now() + FIRST_EVENT_LINGER,
        _guard: guard,
    };
    futures_util::stream::unfold(state, |mut s| async move {
        loop {
            if !s.buf.is_empty() {
                if std::mem::take(&mut s.first) && s.framing.resumable() && !s.done {
                    s.await_done_or_stored().await;
                }
                // A complete stream goes in one chunk; otherwise each event as it comes.
                let n = if s.done { s.buf.len() } else { 1 };
                let mut chunks = Vec::with_capacity(n);
                for e in s.buf.drain(..n) {
                    s.cursor = Some(e.seq);
                    if s.framing.resumable() {
                        s.st.note_sent(e.seq);
                    }
                    chunks.push(encode(&s.st, &e, s.framing));
                }
                let bytes = match chunks.len() {
                    1 => chunks.swap_remove(0),
                    _ => Bytes::from(chunks.concat()),
                };
                return Some((Ok(bytes), s));
            }
            if s.done {
                return None;
            }
            s.rx.borrow_and_update();
            let (evs, done) = s.st.read_after(s.cursor);
            s.done = done;
            if !evs.is_empty() {
                s.buf.extend(evs);
                continue;
            }
            if done {
                return None;
            }
            tokio::select! {
                r = s.rx.changed() => if r.is_err() { return None },
                _ = tokio::time::sleep(s.keepalive) => {
                    return Some((Ok(Bytes::from_static(s.framing.keepalive())), s));
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;
    use protocol::ids::SessionId;
    use serde_json::json;

    use super::*;

    /// The events written for a complete stream of a notification and a result, one string
    /// each (however they were chunked).
    async fn written(framing: Framing, after: Option<u64>) -> Vec<String> {
        let st = SseStream::new(&SessionId::new("s.x"), "p", "b");
        st.push(&json!({"a": "x\ny"}), false).unwrap();
        st.push(&json!({"id": 1, "result": {}}), true).unwrap();
        let text: String = events(st, after, Duration::from_secs(10), framing, ())
            .map(|b| String::from_utf8(b.unwrap().to_vec()).unwrap())
            .collect()
            .await;
        text.split_inclusive("\n\n").map(str::to_owned).collect()
    }

    /// A durable stream, its store writer and the writes queued for the store (no task applies
    /// them: the store never holds the stream's row unless a test says so).
    fn durable() -> (
        Arc<SseStream>,
        crate::storage::StoreWriter,
        tokio::sync::mpsc::UnboundedReceiver<crate::storage::StoreWrite>,
    ) {
        let (w, rx) = crate::storage::StoreWriter::channel();
        let streams = crate::stream::SseStreams::durable(w.clone());
        let st = SseStream::new(&SessionId::new("s.x"), "p", "b");
        streams.insert_durable(st.clone(), &json!(1));
        (st, w, rx)
    }

    /// A durable stream whose row the store has not written yet.
    fn unstored() -> (Arc<SseStream>, crate::storage::StoreWriter) {
        let (st, w, rx) = durable();
        std::mem::forget(rx);
        (st, w)
    }

    /// A 2025-11-25 session's reader of `st` from its start.
    fn session_events(
        st: Arc<SseStream>,
    ) -> std::pin::Pin<Box<impl FuturesStream<Item = Result<Bytes, Infallible>>>> {
        Box::pin(events(
            st,
            None,
            Duration::from_secs(60),
            Framing::session("2025-11-25"),
            (),
        ))
    }

    #[tokio::test(start_paused = true)]
    async fn a_complete_stream_goes_at_once_in_one_chunk_even_before_the_store_has_it() {
        let (st, _w) = unstored();
        st.push(&json!({"a": 1}), false).unwrap();
        st.push(&json!({"id": 1, "result": {}}), true).unwrap();
        let start = tokio::time::Instant::now();
        let chunks: Vec<Bytes> = events(
            st,
            None,
            Duration::from_secs(10),
            Framing::session("2025-11-25"),
            (),
        )
        .map(Result::unwrap)
        .collect()
        .await;
        assert_eq!(start.elapsed(), Duration::ZERO, "it waited for the store");
        assert_eq!(chunks.len(), 1, "{chunks:?}");
        let text = String::from_utf8(chunks[0].to_vec()).unwrap();
        assert_eq!(
            text.matches("id: ").count(),
            3,
            "priming, notification, result: {text}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_running_stream_gives_its_first_event_id_only_once_the_store_has_it() {
        let (st, w) = unstored();
        let mut ev = session_events(st.clone());
        let early = tokio::time::timeout(Duration::from_millis(500), ev.next()).await;
        assert!(
            early.is_err(),
            "an event left before the store had its stream: {early:?}"
        );
        w.mark_applied(1);
        let prime = ev.next().await.unwrap().unwrap();
        assert!(prime.ends_with(b"retry: 1000\ndata: \n\n"), "{prime:?}");
        st.push(&json!({"id": 1, "result": {}}), true).unwrap();
        let last = ev.next().await.unwrap().unwrap();
        assert!(String::from_utf8_lossy(&last).contains("\"result\""));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_that_completes_while_its_row_waits_for_the_store_goes_at_once() {
        let (st, _w) = unstored();
        let start = tokio::time::Instant::now();
        let mut ev = session_events(st.clone());
        let answer = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            st.push(&json!({"id": 1, "result": {}}), true).unwrap();
        };
        let (first, ()) = tokio::join!(ev.next(), answer);
        let text = String::from_utf8(first.unwrap().unwrap().to_vec()).unwrap();
        assert_eq!(
            start.elapsed(),
            Duration::from_millis(100),
            "it waited for the store after the answer came"
        );
        assert_eq!(
            text.matches("id: ").count(),
            2,
            "priming and result: {text}"
        );
        assert!(text.contains("\"result\""), "{text}");
        assert!(ev.next().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_store_that_never_catches_up_delays_the_first_event_by_the_bound_only() {
        let (st, _w) = unstored();
        let start = tokio::time::Instant::now();
        let mut ev = session_events(st);
        let prime = ev.next().await.unwrap().unwrap();
        assert!(prime.ends_with(b"data: \n\n"), "{prime:?}");
        assert_eq!(start.elapsed(), FIRST_EVENT_LINGER + STREAM_STORED_WAIT);
    }

    /// The writes queued for the store so far.
    fn queued(rx: &mut tokio::sync::mpsc::UnboundedReceiver<crate::storage::StoreWrite>) -> usize {
        std::iter::from_fn(|| rx.try_recv().ok()).count()
    }

    /// A request answered within the linger: its stream goes whole, in one chunk returned with
    /// the response, and nothing of it is written to the store.
    #[tokio::test(start_paused = true)]
    async fn a_stream_that_finishes_within_the_linger_goes_whole_and_is_never_stored() {
        let (st, _w, mut rx) = durable();
        let start = tokio::time::Instant::now();
        let answer = async {
            tokio::time::sleep(FIRST_EVENT_LINGER / 2).await;
            st.push(&json!({"id": 1, "result": {}}), true).unwrap();
        };
        let (resp, ()) = tokio::join!(
            response(
                st.clone(),
                None,
                Duration::from_secs(60),
                Framing::session("2025-11-25"),
                ()
            ),
            answer
        );
        assert_eq!(
            start.elapsed(),
            FIRST_EVENT_LINGER / 2,
            "headers with the answer"
        );
        let mut body = resp.into_body().into_data_stream();
        let whole = body.next().await.unwrap().unwrap();
        let text = String::from_utf8(whole.to_vec()).unwrap();
        assert_eq!(
            text.matches("id: ").count(),
            2,
            "priming and result: {text}"
        );
        assert!(body.next().await.is_none());
        assert_eq!(queued(&mut rx), 0, "nothing of it was written to the store");
    }

    /// A request still running when the linger is over: its stream is written to the store and
    /// its priming event leaves once the store holds it; its later events are stored as they
    /// come.
    #[tokio::test(start_paused = true)]
    async fn a_stream_running_past_the_linger_is_stored_before_its_first_event_leaves() {
        let (st, w, mut rx) = durable();
        let start = tokio::time::Instant::now();
        let mut ev = session_events(st.clone());
        let early = tokio::time::timeout(FIRST_EVENT_LINGER * 2, ev.next()).await;
        assert!(early.is_err(), "the store does not hold it yet: {early:?}");
        assert_eq!(
            queued(&mut rx),
            1,
            "its row was queued once the linger was over"
        );
        w.mark_applied(1);
        let prime = ev.next().await.unwrap().unwrap();
        assert!(prime.ends_with(b"retry: 1000\ndata: \n\n"), "{prime:?}");
        assert!(start.elapsed() >= FIRST_EVENT_LINGER);
        st.push(&json!({"id": 1, "result": {}}), true).unwrap();
        assert_eq!(queued(&mut rx), 1, "the result is stored as it comes");
    }

    #[tokio::test]
    async fn the_session_era_writes_ids_and_a_priming_event_and_2026_writes_data_only() {
        let r = written(Framing::session("2025-11-25"), None).await;
        assert_eq!(r.len(), 3);
        assert!(r[0].starts_with("id: st") && r[0].ends_with("-0\nretry: 1000\ndata: \n\n"));
        assert!(
            r[1].ends_with("-1\ndata: {\"a\":\"x\\ny\"}\n\n"),
            "{}",
            r[1]
        );
        let p = written(Framing::Plain, None).await;
        assert_eq!(
            p,
            [
                "data: {\"a\":\"x\\ny\"}\n\n",
                "data: {\"id\":1,\"result\":{}}\n\n"
            ]
        );
        let resumed = written(Framing::session("2025-11-25"), Some(1)).await;
        assert_eq!(resumed.len(), 1);
        assert!(resumed[0].contains("\"result\""));
    }

    /// A client of a version before 2025-11-25 may parse every `data:` line as JSON: its
    /// streams carry ids but no priming event (empty `data:`) and no `retry`.
    #[tokio::test]
    async fn sessions_before_2025_11_25_get_ids_and_no_priming_event() {
        for version in ["2025-06-18", "2025-03-26"] {
            let r = written(Framing::session(version), None).await;
            assert_eq!(r.len(), 2, "{version}: {r:?}");
            for e in &r {
                assert!(e.starts_with("id: st"), "{version}: {e}");
                assert!(!e.contains("retry:"), "{version}: {e}");
                let data = e.split_once("\ndata: ").map(|(_, d)| d.trim_end());
                assert!(
                    data.is_some_and(|d| serde_json::from_str::<serde_json::Value>(d).is_ok()),
                    "{version}: {e}"
                );
            }
            assert!(
                r[0].ends_with("-1\ndata: {\"a\":\"x\\ny\"}\n\n"),
                "{}",
                r[0]
            );
            let resumed = written(Framing::session(version), Some(1)).await;
            assert_eq!(resumed.len(), 1);
            assert!(resumed[0].contains("\"result\""));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_stream_gets_keepalive_comments() {
        for (framing, comment) in [
            (Framing::session("2025-11-25"), ": keepalive\n\n"),
            (Framing::session("2025-06-18"), ": keepalive\n\n"),
            (Framing::Plain, ":\n\n"),
        ] {
            let st = SseStream::new(&SessionId::new("s.x"), "p", "b");
            let mut ev = Box::pin(events(st, None, Duration::from_secs(10), framing, ()));
            if framing == (Framing::Resumable { priming: true }) {
                ev.next().await; // the priming event
            }
            let b = ev.next().await.unwrap().unwrap();
            assert_eq!(&b[..], comment.as_bytes());
        }
    }
}
