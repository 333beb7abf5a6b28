//! A daemon socket as the link reads it: the read budget of a socket that has not authenticated
//! ([`Budget`], opened by [`Unlock`] once its hello verifies), the next frame within a deadline
//! ([`next_frame`]: pings and pongs do not move it; a Close of 1000 means the daemon stopped),
//! and which close codes are sent as a frame.

use std::{
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll},
};

use futures_util::StreamExt;
use hyper_util::rt::TokioIo;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    time::Instant,
};
use tokio_tungstenite::{WebSocketStream, tungstenite::Message};

use protocol::frame::{CloseCode, DaemonFrame};

use crate::server::Place;

/// An I/O stream whose reads fail once more than a budget of bytes arrived, until opened.
pub(super) struct Budget<T> {
    inner: T,
    left: usize,
    open: Arc<AtomicBool>,
}

impl<T> Budget<T> {
    pub(super) fn new(inner: T, budget: usize) -> (Self, Arc<AtomicBool>) {
        let open = Arc::new(AtomicBool::new(false));
        (
            Self {
                inner,
                left: budget,
                open: open.clone(),
            },
            open,
        )
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Budget<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r
            && !self.open.load(Ordering::Relaxed)
        {
            let n = buf.filled().len() - before;
            if n > self.left {
                return Poll::Ready(Err(std::io::Error::other(
                    "an unauthenticated daemon socket sent more than its budget",
                )));
            }
            self.left -= n;
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Budget<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        b: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, b)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// What a socket gives up once its hello is verified: the read budget and its place among the
/// unverified sockets.
pub(super) struct Unlock {
    pub(super) gate: Arc<AtomicBool>,
    pub(super) place: Option<Place>,
}

impl Unlock {
    pub(super) fn verified(&mut self) {
        self.gate.store(true, Ordering::Relaxed);
        self.place = None;
    }
}

pub(super) type Ws = WebSocketStream<Budget<TokioIo<hyper::upgrade::Upgraded>>>;

pub(super) type Incoming = futures_util::stream::SplitStream<Ws>;

/// The end of a socket the daemon closed with 1000: it stopped, and its instance is over.
pub(super) const STOPPED_BY_DAEMON: &str = "the daemon stopped (close 1000)";

/// Whether a socket ended with `code` gets a Close frame: not 1006, which reports a connection
/// lost without one and must never be sent (RFC 6455 §7.4.1).
pub(super) fn sends_close_frame(code: CloseCode) -> bool {
    code != CloseCode::Abnormal
}

/// Reads the next daemon frame before `deadline` (pings and pongs do not move it).
pub(super) async fn next_frame(
    stream: &mut Incoming,
    deadline: Instant,
) -> Result<DaemonFrame, (CloseCode, String)> {
    loop {
        let msg = match tokio::time::timeout_at(deadline, stream.next()).await {
            Err(_) => {
                return Err((
                    CloseCode::NotReady,
                    "timed out waiting for the daemon".into(),
                ));
            }
            Ok(None) => return Err((CloseCode::Normal, "socket closed".into())),
            Ok(Some(Err(e))) => return Err((CloseCode::Abnormal, format!("socket error: {e}"))),
            Ok(Some(Ok(m))) => m,
        };
        match msg {
            Message::Text(t) => {
                return serde_json::from_str(t.as_str())
                    .map_err(|e| (CloseCode::Protocol, format!("unreadable frame: {e}")));
            }
            Message::Binary(_) => {
                return Err((
                    CloseCode::Protocol,
                    "binary frames are not part of the protocol".into(),
                ));
            }
            // 1000 is what a daemon sends when it stops (or reopens its link with new
            // settings): that instance does not come back.
            Message::Close(Some(f)) if u16::from(f.code) == 1000 => {
                return Err((CloseCode::Normal, STOPPED_BY_DAEMON.into()));
            }
            Message::Close(_) => return Err((CloseCode::Normal, "closed by the daemon".into())),
            Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
        }
    }
}

pub(super) fn frame_name(f: &DaemonFrame) -> &'static str {
    match f {
        DaemonFrame::Hello { .. } => "hello",
        DaemonFrame::Enroll { .. } => "enroll",
        DaemonFrame::Catalog { .. } => "catalog",
        DaemonFrame::ProbeResult { .. } => "probe_result",
        DaemonFrame::Rpc { .. } => "rpc",
        DaemonFrame::Closed { .. } => "closed",
        DaemonFrame::Accepted { .. } => "accepted",
        DaemonFrame::Heartbeat { .. } => "heartbeat",
        DaemonFrame::HeartbeatAck { .. } => "heartbeat_ack",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_connection_is_not_answered_with_close_code_1006() {
        assert!(!sends_close_frame(CloseCode::Abnormal));
        for code in CloseCode::ALL
            .into_iter()
            .filter(|c| *c != CloseCode::Abnormal)
        {
            assert!(sends_close_frame(code), "{code:?}");
        }
    }
}
