//! What an MCP session and a call share ([`Exchange`]): a `sid` on a bridge's daemon link,
//! through which a principal's requests to one server go and their answers come back. The
//! requests in flight on it ([`Pending`], answered to a [`ReplySink`]), the daemon messages
//! taken from it (`inbox`), and the daemon instance it is open on live here; how it ends is
//! here too, for both.
//!
//! The hub holds every exchange under its `sid` as a [`Held`]: a [`Session`] (an MCP session of
//! the handshake era, DESIGN §4) or a [`Call`] (one MCP 2026-07-28 request without a session).
//! Code that serves both takes the [`Exchange`]; code that differs between them matches on
//! [`Held`] (sending: a session is opened with `open`, a call with `call`); code for one of them
//! takes that type. Each of the three dereferences to its [`Exchange`].

use std::{ops::Deref, sync::Arc};

use serde_json::Value;
use tokio::time::Instant;

use protocol::{
    delivery::InFlight,
    frame::RelayFrame,
    ids::{InstanceId, SessionId},
    jsonrpc,
};

use super::{Bridge, Call, Hub, LinkSendError, ReplySink, Session, delivery::Acceptance};
use crate::{auth::BridgePrincipal, metrics::Metrics, storage::StoreWrite};
use lock::Lock;

/// A client request in flight.
#[derive(Debug)]
pub(super) struct Pending {
    pub(super) id: Value,
    pub(super) sink: ReplySink,
    /// Past it the sweep cancels the request; never extended by reconnecting (invariant 4).
    pub(super) deadline: Instant,
    /// A `subscriptions/listen` of a call: ended gracefully at its deadline.
    pub(super) listen: bool,
    /// Whether the daemon confirmed it (link revision 4).
    pub(super) acceptance: Acceptance,
}

/// What an exchange's lock guards.
#[derive(Debug)]
pub(super) struct ExchangeState {
    /// The daemon instance the exchange is open on (`open` or `call` sent), if any.
    pub(super) opened_on: Option<InstanceId>,
    /// Client requests in flight, and the progress tokens they carry.
    pub(super) pending: InFlight<Pending>,
    /// The daemon's messages taken: the highest `seq` routed (lower ones are replays).
    pub(super) inbox: protocol::delivery::Inbox,
    pub(super) last_active: Instant,
    /// The exchange was ended; nothing may be registered or sent any more.
    pub(super) ended: bool,
}

impl ExchangeState {
    pub(super) fn new() -> Self {
        Self {
            opened_on: None,
            pending: InFlight::new(),
            inbox: protocol::delivery::Inbox::new(),
            last_active: Instant::now(),
            ended: false,
        }
    }
}

/// A `sid` on a bridge's link, bound to its principal, its bridge and one served server: what a
/// [`Session`] and a [`Call`] have in common.
#[derive(Debug)]
pub(crate) struct Exchange {
    /// The `MCP-Session-Id` of a session, or a call's id (`c` + random; never a session id).
    pub(crate) sid: SessionId,
    /// Its bridge.
    pub(crate) bridge: Arc<Bridge>,
    /// The served server (`runtime` or an upstream name).
    pub(crate) server: String,
    /// Who opened it.
    pub(crate) principal: BridgePrincipal,
    pub(super) state: Lock<ExchangeState>,
}

impl Exchange {
    pub(super) fn new(
        sid: SessionId,
        bridge: Arc<Bridge>,
        server: &str,
        principal: BridgePrincipal,
    ) -> Self {
        Self {
            sid,
            bridge,
            server: server.to_owned(),
            principal,
            state: Lock::new(ExchangeState::new()),
        }
    }
}

/// What the hub holds under a `sid`: a session or a call.
#[derive(Debug, Clone)]
pub(crate) enum Held {
    /// An MCP session (handshake era).
    Session(Arc<Session>),
    /// One MCP 2026-07-28 request served without a session.
    Call(Arc<Call>),
}

impl Deref for Held {
    type Target = Exchange;

    fn deref(&self) -> &Exchange {
        match self {
            Self::Session(s) => s,
            Self::Call(c) => c,
        }
    }
}

/// Why a message could not go to the daemon.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SendError {
    /// The daemon link is congested or closing.
    #[error("the daemon link of bridge {0} is not accepting messages")]
    Busy(String),
    /// Too many requests in flight on the bridge.
    #[error("{0} requests are already in flight on this bridge")]
    TooMany(usize),
    /// A request with this id is already in flight in the session.
    #[error("a request with this id is already in flight in this session")]
    DuplicateId,
    /// The session was ended meanwhile.
    #[error("the session has ended")]
    Ended,
    /// The message does not fit one relay frame (the text says how large it is and the limit).
    #[error("{0}")]
    TooLarge(LinkSendError),
}

impl SendError {
    /// What a link's refusal of a frame for `bridge` means to the sender.
    pub(super) fn of_link(bridge: &Bridge, e: LinkSendError) -> Self {
        match e {
            LinkSendError::TooLarge(_) => Self::TooLarge(e),
            _ => Self::Busy(bridge.name.clone()),
        }
    }
}

impl Hub {
    /// Ends session or call `sid`: in-flight requests get `error`, streams finish, the daemon is
    /// told to close it if it has it open. Later requests for a session get 404.
    pub(crate) fn end_session(&self, sid: &SessionId, code: i64, message: &str, tell_daemon: bool) {
        let Some(held) = self.exchanges.lock().remove(sid) else {
            return;
        };
        let call = matches!(held, Held::Call(_));
        tracing::debug!(bridge = %held.bridge.name, code, call, "ending a session");
        if let Held::Session(s) = &held {
            Metrics::add(&self.metrics.sessions, -1);
            if let Some(w) = &self.durable {
                w.send_reliable(StoreWrite::SessionEnded {
                    sid: s.sid.as_str().to_owned(),
                });
            }
        }
        let (pending, opened) = {
            let mut g = held.state.lock();
            g.ended = true;
            (
                g.pending
                    .drain()
                    .into_iter()
                    .map(|(_, p)| p)
                    .collect::<Vec<_>>(),
                g.opened_on.take(),
            )
        };
        if let Held::Session(s) = &held {
            s.outbox.lock().clear();
        }
        tracing::debug!(
            pending = pending.len(),
            "settling the requests of an ended session"
        );
        self.settle_all(&held, pending, code, message);
        if let Held::Session(s) = &held {
            s.standalone.finish();
        }
        if tell_daemon
            && opened.is_some()
            && let Some(link) = held.bridge.active()
        {
            // Best effort: a daemon that does not get it ends the session at `resume`.
            let _ = link.tx.try_send(RelayFrame::Close {
                sid: held.sid.clone(),
            });
        }
    }

    /// Answers every request of `pending` with the error `code`/`message`.
    pub(super) fn settle_all(&self, e: &Exchange, pending: Vec<Pending>, code: i64, message: &str) {
        for p in pending {
            let err = jsonrpc::error(&p.id, code, message, None);
            self.finish_pending(e, p, Some(err));
        }
    }

    /// Gives `p`'s slot back and ends its sink: with `terminal` as its last message, or without
    /// one (a cancelled request gets no response).
    pub(super) fn finish_pending(&self, e: &Exchange, p: Pending, terminal: Option<Value>) {
        self.release(e, &p);
        p.sink.finish(terminal);
    }

    /// Gives back the bridge slot of request `p`, no longer pending, and takes it off the
    /// gauges it was on.
    pub(super) fn release(&self, e: &Exchange, p: &Pending) {
        if p.acceptance.is_awaiting() {
            Metrics::add(&self.metrics.awaiting_acceptance, -1);
        }
        if p.listen {
            {
                let mut b = e.bridge.state.lock();
                b.listens = b.listens.saturating_sub(1);
            }
            Metrics::add(&self.metrics.subscriptions, -1);
            return;
        }
        {
            let mut b = e.bridge.state.lock();
            b.inflight = b.inflight.saturating_sub(1);
            // Counted as detached only while the bridge is: once the grace ran out (unbound)
            // the sweep has taken the bridge's requests off the gauge already.
            if b.link.is_detached() {
                Metrics::add(&self.metrics.detached, -1);
            }
        }
        Metrics::add(&self.metrics.inflight, -1);
    }

    /// Every session and call, for checks that walk them all (revocation).
    pub(crate) fn all_exchanges(&self) -> Vec<Held> {
        self.exchanges.lock().values().cloned().collect()
    }

    /// The session or call `sid`, whoever holds it.
    pub(super) fn exchange_by_sid(&self, sid: &SessionId) -> Option<Held> {
        self.exchanges.lock().get(sid).cloned()
    }

    /// Session or call `sid` when it is one of `from`'s: of its bridge and open on its daemon
    /// instance. Another bridge's, or one the socket's instance never opened, is `None`, like
    /// one that does not exist (the daemon learns nothing of it).
    pub(crate) fn exchange_from(
        &self,
        from: super::LinkOrigin<'_>,
        sid: &SessionId,
    ) -> Option<Held> {
        let h = self.exchange_by_sid(sid)?;
        (h.bridge.name == from.bridge && h.state.lock().opened_on.as_ref() == Some(from.instance))
            .then_some(h)
    }

    /// The live sessions and calls of the bridge named `bridge` (a snapshot; the map lock is
    /// released).
    pub(super) fn bridge_exchanges(&self, bridge: &str) -> Vec<Held> {
        self.exchanges
            .lock()
            .values()
            .filter(|h| h.bridge.name == bridge)
            .cloned()
            .collect()
    }

    /// The daemon of `from` ended its session or call `sid` (one not of `from` is left alone).
    pub(crate) fn daemon_closed(&self, from: super::LinkOrigin<'_>, sid: &SessionId, reason: &str) {
        if self.exchange_from(from, sid).is_none() {
            return;
        }
        self.end_session(
            sid,
            protocol::jsonrpc::code::UNAVAILABLE,
            &format!("the server ended the session: {reason}"),
            false,
        );
    }
}
