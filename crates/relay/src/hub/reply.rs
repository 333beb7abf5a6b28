//! The reply path of one client request: [`ReplySink`], where the router delivers what answers
//! it, and [`Reply`], what the HTTP handler reads the answer from (see [`super::Router`] for the
//! contract every router keeps with the sink).
//!
//! Today both ends are on this node: an SSE stream the response reads, or a one-shot channel a
//! JSON response awaits. The sink is a concrete type, not a trait object: delivering a message
//! costs no allocation or dynamic call beyond the push itself.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::oneshot;

use protocol::ids::SessionId;

use crate::stream::SseStream;

/// Where the router delivers the messages that answer one client request: the messages related
/// to it, in order, then its terminal response at most once ([`ReplySink::finish`] consumes
/// the sink).
#[derive(Debug)]
pub(crate) struct ReplySink(Sink);

#[derive(Debug)]
enum Sink {
    /// An SSE stream (the POST's; resumable in the session era).
    Stream(Arc<SseStream>),
    /// A JSON response waiting for the terminal message.
    Json(oneshot::Sender<Value>),
}

/// What an HTTP handler reads the answer to its request from.
#[derive(Debug)]
pub(crate) enum Reply {
    /// The stream of the related messages and the response, the response last.
    Stream(Arc<SseStream>),
    /// The response alone; the sender dropped without one when the request was cancelled (no
    /// response is owed) or withdrawn.
    Json(oneshot::Receiver<Value>),
}

impl ReplySink {
    /// A sink and its reply: an SSE stream of session `sid` readable by `principal` on `bridge`
    /// when `stream`, else a JSON waiter.
    pub(crate) fn pair(
        sid: &SessionId,
        principal: &str,
        bridge: &str,
        stream: bool,
    ) -> (Self, Reply) {
        if stream {
            let st = SseStream::new(sid, principal, bridge);
            (Self::stream(st.clone()), Reply::Stream(st))
        } else {
            let (tx, rx) = oneshot::channel();
            (Self::json(tx), Reply::Json(rx))
        }
    }

    /// A sink that writes to stream `st`.
    pub(crate) fn stream(st: Arc<SseStream>) -> Self {
        Self(Sink::Stream(st))
    }

    /// A sink that answers a JSON response through `tx` (the terminal message only).
    pub(crate) fn json(tx: oneshot::Sender<Value>) -> Self {
        Self(Sink::Json(tx))
    }

    /// The stream a related message of the request goes to, when the reply is a stream (a JSON
    /// reply carries the terminal message only).
    pub(crate) fn related(&self) -> Option<&Arc<SseStream>> {
        match &self.0 {
            Sink::Stream(st) => Some(st),
            Sink::Json(_) => None,
        }
    }

    /// Ends the sink: with `terminal` as its last message, or without one (a cancelled request
    /// gets no response). A reader that is gone is not an error: a stream keeps the message for
    /// a resuming reader, a JSON answer nobody waits for is owed to no one.
    pub(crate) fn finish(self, terminal: Option<Value>) {
        match (self.0, terminal) {
            (Sink::Stream(st), Some(msg)) => {
                let _ = st.push(&msg, true);
            }
            (Sink::Stream(st), None) => st.finish(),
            (Sink::Json(tx), Some(msg)) => {
                let _ = tx.send(msg);
            }
            (Sink::Json(_), None) => {}
        }
    }
}
