//! The link's writer: one task that writes the frames of two lanes to the socket — the link's own
//! frames (handshake, `accepted`, heartbeats) and the hosted sessions' messages.
//!
//! Rules:
//! - The link's own lane goes first whenever both lanes hold a frame, so an `accepted` or a
//!   heartbeat waits behind at most the one frame being written, never behind a backlog of results
//!   (the relay retracts a request not accepted within 4 s).
//! - A frame goes out with those already queued behind it, at most
//!   [`limits::LINK_WRITE_BATCH`], in one flush (one write to the socket).
//! - A batch of the link's own frames that holds an `accepted` lingers up to
//!   [`limits::ACCEPTED_LINGER`] for the sessions' next message; the first one to arrive ends the
//!   wait. An `accepted` whose request's response is in the same batch, with no other message of
//!   its session before that response, is not written: the response stands for it (the relay
//!   takes a response as its request's answer with or without an `accepted`), and a request
//!   answered that fast costs one frame back instead of two.
//! - After `close` what is queued is written, then a Close frame 1000 "daemon stopping".
//! - A frame whose JSON text is longer than [`crate::limits::LINK_FRAGMENT_MAX_BYTES`] is
//!   written as a fragmented WebSocket message (RFC 6455 §5.4), so no reader's buffer grows past
//!   that size.

use futures_util::SinkExt;
use tokio::{sync::mpsc, time::Instant};
use tokio_tungstenite::tungstenite::{
    Bytes, Message,
    protocol::frame::{
        Frame,
        coding::{CloseCode as WsCloseCode, Data, OpCode},
    },
};
use tokio_util::sync::CancellationToken;

use protocol::{frame::DaemonFrame, head::peek, limits};

/// Writes the frames of `urgent` (the link's own lane) and `frames` (the sessions' lane) to
/// `sink` as JSON text by the module's rules, until both lanes are closed, the sink fails, or
/// `close` is cancelled and both lanes are empty; then closes the sink.
pub(super) async fn write_frames<S>(
    mut sink: S,
    mut urgent: mpsc::Receiver<DaemonFrame>,
    mut frames: mpsc::Receiver<DaemonFrame>,
    close: CancellationToken,
) where
    S: futures_util::Sink<Message> + Unpin,
{
    let (mut urgent_open, mut frames_open) = (true, true);
    'write: while urgent_open || frames_open {
        let f = tokio::select! {
            biased;
            f = urgent.recv(), if urgent_open => match f {
                Some(f) => f,
                None => { urgent_open = false; continue; }
            },
            f = frames.recv(), if frames_open => match f {
                Some(f) => f,
                None => { frames_open = false; continue; }
            },
            () = close.cancelled() => {
                let frame = tokio_tungstenite::tungstenite::protocol::CloseFrame {
                    code: WsCloseCode::Normal,
                    reason: "daemon stopping".into(),
                };
                let _ = sink.send(Message::Close(Some(frame))).await;
                break;
            }
        };
        let mut batch = vec![f];
        queued(&mut batch, &mut urgent, &mut frames);
        if lingers(&batch) {
            let until = Instant::now() + limits::ACCEPTED_LINGER;
            while batch.len() < limits::LINK_WRITE_BATCH {
                tokio::select! {
                    biased;
                    f = urgent.recv(), if urgent_open => match f {
                        Some(f) => batch.push(f),
                        None => urgent_open = false,
                    },
                    f = frames.recv(), if frames_open => {
                        match f {
                            Some(f) => batch.push(f),
                            None => frames_open = false,
                        }
                        queued(&mut batch, &mut urgent, &mut frames);
                        break;
                    }
                    () = tokio::time::sleep_until(until) => break,
                    () = close.cancelled() => break,
                }
            }
        }
        drop_answered(&mut batch);
        for f in batch {
            let Ok(text) = serde_json::to_string(&f) else {
                continue;
            };
            if text.len() <= crate::limits::LINK_FRAGMENT_MAX_BYTES {
                if sink.feed(Message::Text(text.into())).await.is_err() {
                    break 'write;
                }
                continue;
            }
            for m in fragments(text, crate::limits::LINK_FRAGMENT_MAX_BYTES) {
                if sink.feed(m).await.is_err() {
                    break 'write;
                }
            }
        }
        if sink.flush().await.is_err() {
            break;
        }
    }
    let _ = sink.close().await;
}

/// The frames of a fragmented text message carrying `text` (RFC 6455 §5.4): a text frame
/// without FIN, then continuation frames, each at most `max` bytes (`max` > 0), the last with
/// FIN. A fragment may end inside a UTF-8 sequence; readers validate the reassembled text.
fn fragments(text: String, max: usize) -> impl Iterator<Item = Message> {
    let bytes = Bytes::from(text.into_bytes());
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= bytes.len() {
            return None;
        }
        let end = (at + max).min(bytes.len());
        let opcode = OpCode::Data(if at == 0 { Data::Text } else { Data::Continue });
        let frame = Frame::message(bytes.slice(at..end), opcode, end == bytes.len());
        at = end;
        Some(Message::Frame(frame))
    })
}

/// Appends the frames already queued (the link's own lane first, frame by frame) until `batch`
/// holds [`limits::LINK_WRITE_BATCH`].
fn queued(
    batch: &mut Vec<DaemonFrame>,
    urgent: &mut mpsc::Receiver<DaemonFrame>,
    frames: &mut mpsc::Receiver<DaemonFrame>,
) {
    while batch.len() < limits::LINK_WRITE_BATCH {
        match urgent.try_recv().or_else(|_| frames.try_recv()) {
            Ok(f) => batch.push(f),
            Err(_) => break,
        }
    }
}

/// Whether `batch` waits for the sessions' next message: it holds an `accepted` and no session
/// message yet.
fn lingers(batch: &[DaemonFrame]) -> bool {
    batch
        .iter()
        .any(|f| matches!(f, DaemonFrame::Accepted { .. }))
        && !batch.iter().any(is_session_message)
}

fn is_session_message(f: &DaemonFrame) -> bool {
    matches!(f, DaemonFrame::Rpc { .. } | DaemonFrame::Closed { .. })
}

/// Removes each `accepted` whose request's response follows it in `batch` with no other message
/// of its session in between.
fn drop_answered(batch: &mut Vec<DaemonFrame>) {
    let mut answered = vec![false; batch.len()];
    for (i, f) in batch.iter().enumerate() {
        let DaemonFrame::Accepted { sid, id } = f else {
            continue;
        };
        let first_of_session = batch[i + 1..].iter().find(|g| match g {
            DaemonFrame::Rpc { sid: s, .. } | DaemonFrame::Closed { sid: s, .. } => s == sid,
            _ => false,
        });
        answered[i] = matches!(first_of_session, Some(DaemonFrame::Rpc { message, .. })
            if peek::is_response(message) && peek::id(message) == Some(id.as_value()));
    }
    let mut i = 0;
    batch.retain(|_| {
        i += 1;
        !answered[i - 1]
    });
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::{Value, json};

    use super::*;
    use protocol::jsonrpc::RequestId;

    fn accepted(sid: &str, id: u64) -> DaemonFrame {
        DaemonFrame::Accepted {
            sid: sid.into(),
            id: RequestId::new(json!(id)),
        }
    }

    fn rpc(sid: &str, seq: u64, message: Value) -> DaemonFrame {
        DaemonFrame::Rpc {
            sid: sid.into(),
            seq,
            related: None,
            message: message.into(),
        }
    }

    /// `(type, id)` of each frame written.
    fn kinds(written: &[Message]) -> Vec<(String, Value)> {
        written
            .iter()
            .map(|m| {
                let v: Value = serde_json::from_str(m.to_text().unwrap()).unwrap();
                let id = v
                    .get("id")
                    .or_else(|| v["message"].get("id"))
                    .or_else(|| v["message"].get("method"))
                    .cloned()
                    .unwrap_or(Value::Null);
                (v["type"].as_str().unwrap_or_default().to_owned(), id)
            })
            .collect()
    }

    /// Queues the results of requests 1..=`n` of session `s1` on `lane`.
    fn queue_results(lane: &mpsc::Sender<DaemonFrame>, n: u64) {
        for seq in 1..=n {
            lane.try_send(rpc(
                "s1",
                seq,
                json!({"jsonrpc": "2.0", "id": seq, "result": {}}),
            ))
            .unwrap();
        }
    }

    /// The link's own frames are written first: an `accepted` queued behind a backlog of results
    /// could reach the relay after its 4 s retraction, and a request that ran would be reported
    /// "not delivered".
    #[tokio::test]
    async fn accepted_and_heartbeats_are_written_before_queued_results() {
        let (frames_tx, frames) = mpsc::channel(16);
        let (urgent_tx, urgent) = mpsc::channel(16);
        queue_results(&frames_tx, 3);
        urgent_tx.try_send(accepted("s1", 9)).unwrap();
        drop((frames_tx, urgent_tx));
        let mut written: Vec<Message> = Vec::new();
        write_frames(&mut written, urgent, frames, CancellationToken::new()).await;
        let types: Vec<String> = kinds(&written).into_iter().map(|(t, _)| t).collect();
        assert_eq!(types, ["accepted", "rpc", "rpc", "rpc"]);
    }

    /// A request answered within the linger costs one frame: its response stands for its
    /// `accepted`. One whose session sent something else first keeps its `accepted`, written
    /// before that message, and so does one not answered in the batch.
    #[tokio::test(start_paused = true)]
    async fn a_response_within_the_linger_stands_for_its_accepted() {
        let (frames_tx, frames) = mpsc::channel(16);
        let (urgent_tx, urgent) = mpsc::channel(16);
        let mut sink = CountingSink::default();
        let lanes = (frames_tx.clone(), urgent_tx.clone());
        let writer = tokio::spawn(async move {
            write_frames(&mut sink, urgent, frames, CancellationToken::new()).await;
            sink
        });
        // Request 1 of call c1 is answered within the linger.
        lanes.1.send(accepted("c1", 1)).await.unwrap();
        tokio::time::sleep(limits::ACCEPTED_LINGER / 2).await;
        lanes
            .0
            .send(rpc(
                "c1",
                1,
                json!({"jsonrpc": "2.0", "id": 1, "result": {}}),
            ))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Request 2 of s2 sends progress before its response; request 3 of s3 is not answered in
        // time.
        lanes.1.send(accepted("s2", 2)).await.unwrap();
        lanes.1.send(accepted("s3", 3)).await.unwrap();
        lanes
            .0
            .send(rpc(
                "s2",
                1,
                json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}),
            ))
            .await
            .unwrap();
        lanes
            .0
            .send(rpc(
                "s2",
                2,
                json!({"jsonrpc": "2.0", "id": 2, "result": {}}),
            ))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(lanes);
        drop((frames_tx, urgent_tx));
        let sink = writer.await.unwrap();
        let expected = [
            ("rpc", json!(1)),
            ("accepted", json!(2)),
            ("accepted", json!(3)),
            ("rpc", json!("notifications/progress")),
            ("rpc", json!(2)),
        ];
        let expected: Vec<(String, Value)> = expected
            .into_iter()
            .map(|(t, id)| (t.to_owned(), id))
            .collect();
        assert_eq!(kinds(&sink.written), expected);
        assert_eq!(sink.flushes, 2, "one flush per answered request");
    }

    /// An `accepted` nothing answers is written once the linger is over, not held longer.
    #[tokio::test(start_paused = true)]
    async fn an_accepted_not_answered_is_written_after_the_linger() {
        let (frames_tx, frames) = mpsc::channel(16);
        let (urgent_tx, urgent) = mpsc::channel(16);
        let start = Instant::now();
        urgent_tx.try_send(accepted("s1", 7)).unwrap();
        let mut sink = CountingSink::default();
        let writer = tokio::spawn(async move {
            write_frames(&mut sink, urgent, frames, CancellationToken::new()).await;
            sink
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        drop((frames_tx, urgent_tx));
        let sink = writer.await.unwrap();
        assert_eq!(kinds(&sink.written), [("accepted".to_owned(), json!(7))]);
        assert_eq!(sink.flushed_at, vec![start + limits::ACCEPTED_LINGER]);
    }

    /// A sink that counts its flushes (each one a write to the socket) and when they happened.
    #[derive(Default)]
    struct CountingSink {
        written: Vec<Message>,
        flushes: usize,
        flushed_at: Vec<Instant>,
    }

    impl futures_util::Sink<Message> for CountingSink {
        type Error = std::convert::Infallible;
        fn poll_ready(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), Self::Error>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn start_send(mut self: std::pin::Pin<&mut Self>, m: Message) -> Result<(), Self::Error> {
            self.written.push(m);
            Ok(())
        }
        fn poll_flush(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), Self::Error>> {
            self.flushes += 1;
            self.flushed_at.push(Instant::now());
            std::task::Poll::Ready(Ok(()))
        }
        fn poll_close(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), Self::Error>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    /// Frames already queued when the writer writes go out in one flush, at most
    /// `LINK_WRITE_BATCH` of them: 70 queued frames cost two writes to the socket, not 70.
    #[tokio::test]
    async fn queued_frames_go_out_in_one_flush_per_batch() {
        let (frames_tx, frames) = mpsc::channel(128);
        let (urgent_tx, urgent) = mpsc::channel(16);
        queue_results(&frames_tx, 70);
        drop((frames_tx, urgent_tx));
        let mut sink = CountingSink::default();
        write_frames(&mut sink, urgent, frames, CancellationToken::new()).await;
        assert_eq!(sink.written.len(), 70);
        assert_eq!(
            sink.flushes,
            70usize.div_ceil(limits::LINK_WRITE_BATCH),
            "flushes for 70 frames"
        );
    }

    /// A frame longer than the fragment bound reaches a WebSocket reader as the one text
    /// message it was, in fragments no longer than the bound, also when a fragment ends inside
    /// a UTF-8 sequence; a shorter one is one frame.
    #[tokio::test]
    async fn a_long_frame_is_fragmented_and_read_back_whole() {
        use futures_util::StreamExt;
        use tokio_tungstenite::{WebSocketStream, tungstenite::protocol::Role};

        let (frames_tx, frames) = mpsc::channel(16);
        let (urgent_tx, urgent) = mpsc::channel(16);
        // "é" is two bytes: after one byte of "x", fragment bounds fall inside it.
        let long = format!(
            "x{}",
            "é".repeat(3 * crate::limits::LINK_FRAGMENT_MAX_BYTES)
        );
        let big = json!({"jsonrpc": "2.0", "id": 1, "result": {"text": long}});
        let small = json!({"jsonrpc": "2.0", "id": 2, "result": {}});
        frames_tx.try_send(rpc("s1", 1, big)).unwrap();
        frames_tx.try_send(rpc("s1", 2, small)).unwrap();
        drop((frames_tx, urgent_tx));
        let mut written: Vec<Message> = Vec::new();
        write_frames(&mut written, urgent, frames, CancellationToken::new()).await;

        let max = crate::limits::LINK_FRAGMENT_MAX_BYTES;
        let (last, fragments) = written.split_last().unwrap();
        assert!(fragments.len() >= 6, "{} fragments", fragments.len());
        for m in fragments {
            let Message::Frame(f) = m else {
                panic!("not a fragment: {m:?}")
            };
            assert!(f.payload().len() <= max);
        }
        assert!(matches!(last, Message::Text(t) if t.len() <= max));

        let (client, server) = tokio::io::duplex(1 << 20);
        let mut sink = WebSocketStream::from_raw_socket(client, Role::Client, None).await;
        let mut reader = WebSocketStream::from_raw_socket(server, Role::Server, None).await;
        let send = tokio::spawn(async move {
            for m in written {
                sink.feed(m).await.unwrap();
            }
            sink.flush().await.unwrap();
            sink
        });
        let mut read = Vec::new();
        for _ in 0..2 {
            let m = reader.next().await.unwrap().unwrap();
            let frame: Value = serde_json::from_str(m.to_text().unwrap()).unwrap();
            read.push(frame["message"].clone());
        }
        send.await.unwrap();
        assert_eq!(read[0]["result"]["text"], json!(long));
        assert_eq!(read[1]["id"], json!(2));
    }
}
