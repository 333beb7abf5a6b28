//! The writer of one daemon socket: the task that writes the frames the hub queues for the
//! daemon ([`Outbound`]).
//!
//! Rules:
//! - A frame goes out with those already queued behind it, at most
//!   [`protocol::limits::LINK_WRITE_BATCH`], in one flush (one write to the socket).
//! - A batch of nothing but `ack` and `close {sid}` frames lingers up to
//!   [`ACK_LINGER`] for the next frame (the first to arrive ends the wait), so
//!   that acknowledging a response does not cost a write of its own while requests follow each
//!   other; within a batch only the last `ack` of each session is written, in its place (an `ack`
//!   is cumulative: it covers every message of its session up to its `seq`). The daemon only holds
//!   acknowledged messages that much longer.
//! - A Close frame ([`Outbound::Close`]) goes out after what was queued before it and ends the
//!   writer. Its reason is cut to [`CLOSE_REASON_MAX_BYTES`] at a character boundary: a
//!   control frame carries at most 125 bytes, the status code two of them (RFC 6455 §5.5,
//!   §5.5.1), and a longer one is a protocol error to the daemon, which then sees no reason.

use futures_util::SinkExt;
use tokio::{sync::mpsc, time::Instant};
use tokio_tungstenite::tungstenite::{
    Message,
    protocol::{CloseFrame, frame::coding::CloseCode as WsCloseCode},
};

use crate::{hub::Outbound, limits::ACK_LINGER};
use protocol::{frame::RelayFrame, limits};

/// The longest reason a Close frame carries, in bytes (RFC 6455 §5.5: 125 bytes of payload,
/// two of them the status code).
const CLOSE_REASON_MAX_BYTES: usize = 123;

/// `reason`, cut to [`CLOSE_REASON_MAX_BYTES`] at a character boundary.
fn close_reason(reason: &str) -> &str {
    let mut end = reason.len().min(CLOSE_REASON_MAX_BYTES);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    &reason[..end]
}

/// Writes what `rx` carries to `sink` by the module's rules, until `rx` closes, the sink fails,
/// or a Close frame was written.
pub(super) async fn write_frames<S>(mut sink: S, mut rx: mpsc::Receiver<Outbound>)
where
    S: futures_util::Sink<Message> + Unpin,
{
    'write: while let Some(out) = rx.recv().await {
        let mut batch = vec![out];
        queued(&mut batch, &mut rx);
        if lingers(&batch) {
            let until = Instant::now() + ACK_LINGER;
            tokio::select! {
                out = rx.recv() => if let Some(out) = out {
                    batch.push(out);
                    queued(&mut batch, &mut rx);
                },
                () = tokio::time::sleep_until(until) => {}
            }
        }
        coalesce_acks(&mut batch);
        for out in batch {
            match out {
                Outbound::Frame(f) => {
                    if let Ok(t) = serde_json::to_string(&f)
                        && sink.feed(Message::Text(t.into())).await.is_err()
                    {
                        break 'write;
                    }
                }
                Outbound::Close(code, reason) => {
                    let _ = sink
                        .send(Message::Close(Some(CloseFrame {
                            code: WsCloseCode::from(code.code()),
                            reason: close_reason(&reason).into(),
                        })))
                        .await;
                    break 'write;
                }
            }
        }
        if sink.flush().await.is_err() {
            break;
        }
    }
}

/// Appends what is already queued until `batch` holds [`limits::LINK_WRITE_BATCH`].
fn queued(batch: &mut Vec<Outbound>, rx: &mut mpsc::Receiver<Outbound>) {
    while batch.len() < limits::LINK_WRITE_BATCH {
        match rx.try_recv() {
            Ok(out) => batch.push(out),
            Err(_) => break,
        }
    }
}

/// Whether `batch` is nothing but `ack` and `close {sid}` frames, and has room for more.
fn lingers(batch: &[Outbound]) -> bool {
    batch.len() < limits::LINK_WRITE_BATCH
        && batch.iter().all(|o| {
            matches!(
                o,
                Outbound::Frame(RelayFrame::Ack { .. } | RelayFrame::Close { .. })
            )
        })
}

/// Keeps only the last `ack` of each session in `batch`, in its place.
fn coalesce_acks(batch: &mut Vec<Outbound>) {
    let mut keep = vec![true; batch.len()];
    for (i, o) in batch.iter().enumerate() {
        let Outbound::Frame(RelayFrame::Ack { sid, .. }) = o else {
            continue;
        };
        keep[i] = !batch[i + 1..].iter().any(
            |later| matches!(later, Outbound::Frame(RelayFrame::Ack { sid: s, .. }) if s == sid),
        );
    }
    let mut i = 0;
    batch.retain(|_| {
        i += 1;
        keep[i - 1]
    });
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::{Value, json};

    use super::*;

    #[test]
    fn a_close_reason_fits_a_control_frame_and_is_cut_between_characters() {
        let short = "enrolled";
        assert_eq!(close_reason(short), short);
        let long = format!("{}é{}", "a".repeat(122), "b".repeat(40));
        let cut = close_reason(&long);
        assert_eq!(cut, "a".repeat(122), "é spans bytes 123 and 124");
        let exact = "c".repeat(123);
        assert_eq!(close_reason(&exact), exact);
    }

    fn ack(sid: &str, seq: u64) -> Outbound {
        Outbound::Frame(RelayFrame::Ack {
            sid: sid.into(),
            seq,
        })
    }

    fn rpc(sid: &str, id: u64) -> Outbound {
        Outbound::Frame(RelayFrame::Rpc {
            sid: sid.into(),
            message: json!({"jsonrpc": "2.0", "id": id, "method": "tools/call"}),
            deliver_by: None,
        })
    }

    /// A sink that keeps what was written and when each flush happened.
    #[derive(Default)]
    struct Recorder {
        written: Vec<Value>,
        flushed_at: Vec<(Instant, usize)>,
    }

    impl futures_util::Sink<Message> for Recorder {
        type Error = std::convert::Infallible;
        fn poll_ready(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), Self::Error>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn start_send(mut self: std::pin::Pin<&mut Self>, m: Message) -> Result<(), Self::Error> {
            let v = match m {
                Message::Text(t) => serde_json::from_str(t.as_str()).unwrap(),
                other => json!({"type": "ws", "what": format!("{other:?}")}),
            };
            self.written.push(v);
            Ok(())
        }
        fn poll_flush(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), Self::Error>> {
            let n = self.written.len();
            self.flushed_at.push((Instant::now(), n));
            std::task::Poll::Ready(Ok(()))
        }
        fn poll_close(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), Self::Error>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    /// An `ack` goes out with the next request when one follows within the linger (one write
    /// for both), only the last `ack` of a session is written, and an `ack` nothing follows
    /// goes out once the linger is over.
    #[tokio::test(start_paused = true)]
    async fn acks_wait_for_the_next_frame_within_the_linger_and_coalesce_per_session() {
        let (tx, rx) = mpsc::channel(16);
        let start = Instant::now();
        let writer = tokio::spawn(async move {
            let mut sink = Recorder::default();
            write_frames(&mut sink, rx).await;
            sink
        });
        tx.send(ack("s1", 1)).await.unwrap();
        tx.send(ack("s2", 4)).await.unwrap();
        tx.send(ack("s1", 2)).await.unwrap();
        tokio::time::sleep(ACK_LINGER / 2).await;
        tx.send(rpc("s1", 3)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        tx.send(ack("s1", 3)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(tx);
        let sink = writer.await.unwrap();
        let shape: Vec<(String, Value)> = sink
            .written
            .iter()
            .map(|v| {
                (
                    v["type"].as_str().unwrap().to_owned(),
                    v.get("seq").cloned().unwrap_or(v["message"]["id"].clone()),
                )
            })
            .collect();
        let expected: Vec<(String, Value)> = [
            ("ack", json!(4)),
            ("ack", json!(2)),
            ("rpc", json!(3)),
            ("ack", json!(3)),
        ]
        .into_iter()
        .map(|(t, v)| (t.to_owned(), v))
        .collect();
        assert_eq!(shape, expected);
        let t0 = start + ACK_LINGER / 2;
        let t1 = t0 + Duration::from_millis(50) + ACK_LINGER;
        assert_eq!(sink.flushed_at, vec![(t0, 3), (t1, 4)]);
    }

    /// Frames already queued go out in one flush, at most `LINK_WRITE_BATCH` of them; a Close
    /// frame ends the writer after what was queued before it.
    #[tokio::test]
    async fn queued_frames_go_out_in_one_flush_per_batch_and_close_ends_the_writer() {
        let (tx, rx) = mpsc::channel(128);
        for id in 0..70 {
            tx.try_send(rpc("s1", id)).unwrap();
        }
        tx.try_send(Outbound::Close(
            protocol::frame::CloseCode::Replaced,
            "replaced".into(),
        ))
        .unwrap();
        tx.try_send(rpc("s1", 99)).unwrap();
        let mut sink = Recorder::default();
        write_frames(&mut sink, rx).await;
        assert_eq!(
            sink.written.len(),
            71,
            "70 frames and the Close frame, nothing after it"
        );
        assert_eq!(sink.written[70]["type"], "ws");
        let flushed: Vec<usize> = sink.flushed_at.iter().map(|(_, n)| *n).collect();
        assert_eq!(flushed, [limits::LINK_WRITE_BATCH, 71]);
    }
}
