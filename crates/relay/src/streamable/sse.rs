//! Writing an [`SseStream`] to an HTTP response (`text/event-stream`), in the framing of either
//! era. A response is one reader of the stream: the stream goes on collecting when it ends.
//!
//! Written by hand rather than with axum's `Sse` so that the session era's priming event carries
//! an id, an empty `data:` field and a `retry` hint (MCP 2025-11-25 Streamable HTTP
//! § Resumability), and so a keepalive comment follows every quiet interval.

use std::{collections::VecDeque, convert::Infallible, sync::Arc, time::Duration};

use axum::{
    body::{Body, Bytes},
    http::header,
    response::{IntoResponse, Response},
};
use futures_util::Stream as FuturesStream;
use tokio::sync::watch;

use crate::stream::{Event, SseStream};

/// Reconnection delay suggested to clients in the priming event (SSE `retry`, ms).
const SSE_RETRY_MS: u64 = 1000;

/// How events are framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// The session era (MCP 2025-11-25 Streamable HTTP § Resumability): every event has an
    /// `id: <stream>-<n>` a client may resume after with `Last-Event-ID`, the first is the
    /// priming event (`retry`, empty `data:`), keepalives are `: keepalive` comments, and what
    /// was written is recorded ([`SseStream::note_sent`]).
    Resumable,
    /// MCP 2026-07-28 (Streamable HTTP § Receiving Messages: streams are not resumable): `data:`
    /// lines only, no priming event, keepalives are empty `:` comments.
    Plain,
}

impl Framing {
    fn keepalive(self) -> &'static [u8] {
        match self {
            Self::Resumable => b": keepalive\n\n",
            Self::Plain => b":\n\n",
        }
    }
}

/// An SSE response reading `st` after event `after` (from the first event when `None`; the
/// priming event, event 0, is written only in [`Framing::Resumable`]), with a keepalive comment
/// after every quiet `keepalive`. `guard` goes with the body and is dropped when the client
/// closes the stream or the stream ends (a 2026-07-28 call is cancelled by it).
pub(crate) fn response<G: Send + 'static>(
    st: Arc<SseStream>,
    after: Option<u64>,
    keepalive: Duration,
    framing: Framing,
    guard: G,
) -> Response {
    let after = match framing {
        Framing::Resumable => after,
        Framing::Plain => Some(after.unwrap_or(0)),
    };
    let body = Body::from_stream(events(st, after, keepalive, framing, guard));
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
    if framing == Framing::Resumable {
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
        _guard: G,
    }
    let rx = st.subscribe();
    let state = State {
        st,
        cursor: after,
        rx,
        buf: VecDeque::new(),
        done: false,
        keepalive,
        framing,
        _guard: guard,
    };
    futures_util::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(e) = s.buf.pop_front() {
                s.cursor = Some(e.seq);
                if s.framing == Framing::Resumable {
                    s.st.note_sent(e.seq);
                }
                let bytes = encode(&s.st, &e, s.framing);
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

    async fn written(framing: Framing, after: Option<u64>) -> Vec<String> {
        let st = SseStream::new(&SessionId::new("s.x"), "p", "b");
        st.push(&json!({"a": "x\ny"}), false).unwrap();
        st.push(&json!({"id": 1, "result": {}}), true).unwrap();
        let after = match framing {
            Framing::Resumable => after,
            Framing::Plain => Some(after.unwrap_or(0)),
        };
        events(st, after, Duration::from_secs(10), framing, ())
            .map(|b| String::from_utf8(b.unwrap().to_vec()).unwrap())
            .collect()
            .await
    }

    #[tokio::test]
    async fn the_session_era_writes_ids_and_a_priming_event_and_2026_writes_data_only() {
        let r = written(Framing::Resumable, None).await;
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
        let resumed = written(Framing::Resumable, Some(1)).await;
        assert_eq!(resumed.len(), 1);
        assert!(resumed[0].contains("\"result\""));
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_stream_gets_keepalive_comments() {
        for (framing, comment) in [
            (Framing::Resumable, ": keepalive\n\n"),
            (Framing::Plain, ":\n\n"),
        ] {
            let st = SseStream::new(&SessionId::new("s.x"), "p", "b");
            let after = (framing == Framing::Plain).then_some(0);
            let mut ev = Box::pin(events(st, after, Duration::from_secs(10), framing, ()));
            if framing == Framing::Resumable {
                ev.next().await; // the priming event
            }
            let b = ev.next().await.unwrap().unwrap();
            assert_eq!(&b[..], comment.as_bytes());
        }
    }
}
