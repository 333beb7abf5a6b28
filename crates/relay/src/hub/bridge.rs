//! Bridges and their daemon links: the socket writer's queue ([`LinkTx`]), a verified link
//! ([`Link`]), a bridge's live state ([`Bridge`]), and the hub's link transitions: promotion of a
//! verified link, loss of a socket, what `resume` names.

use std::sync::{Arc, atomic::Ordering};

use tokio::{
    sync::{mpsc, watch},
    time::Instant,
};
use tokio_util::sync::CancellationToken;

use protocol::{
    frame::{CloseCode, RelayFrame, ResumeRequest, ServerInfo},
    ids::{InstanceId, SessionId},
    jsonrpc::{RequestId, code},
    limits::RELAY_FRAME_MAX_BYTES,
};

use super::{Catalog, Hub, exchange::Held, link_state::LinkState};
use crate::metrics::Metrics;
use lock::Lock;

/// What the socket writer sends.
#[derive(Debug)]
pub(crate) enum Outbound {
    /// A frame.
    Frame(RelayFrame),
    /// A close frame with a code and reason; the socket ends after it.
    Close(CloseCode, String),
}

/// Why a frame could not be queued for a daemon socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LinkSendError {
    /// The writer's queue is full: the link is congested.
    #[error("the daemon link's queue is full")]
    Full,
    /// The socket's writer is gone.
    #[error("the daemon link is closed")]
    Closed,
    /// The frame would be this many bytes of JSON, over [`RELAY_FRAME_MAX_BYTES`]: the daemon
    /// would close its socket on it, so it is not sent.
    #[error(
        "the message is {0} bytes as a relay frame; the relay link carries at most \
         {RELAY_FRAME_MAX_BYTES} bytes: send less at once (a smaller write or edit, or split it)"
    )]
    TooLarge(usize),
}

/// Queue of one socket's writer, and the signal that the socket is closing.
#[derive(Debug, Clone)]
pub(crate) struct LinkTx {
    tx: mpsc::Sender<Outbound>,
    closing: CancellationToken,
}

impl LinkTx {
    /// The sending side of a socket writer's queue.
    pub(crate) fn new(tx: mpsc::Sender<Outbound>) -> Self {
        Self {
            tx,
            closing: CancellationToken::new(),
        }
    }

    /// Whether frames can still go out on this socket: its writer runs and it is not closing.
    pub(crate) fn is_open(&self) -> bool {
        !self.tx.is_closed() && !self.closing.is_cancelled()
    }

    /// Completes once [`LinkTx::close`] was called: the socket's reader stops reading then (a
    /// replaced socket's frames are not routed, and cannot keep it alive).
    pub(crate) async fn closing(&self) {
        self.closing.cancelled().await;
    }

    /// Queues `frame` without waiting.
    ///
    /// # Errors
    /// [`LinkSendError::TooLarge`] when its JSON text is over [`RELAY_FRAME_MAX_BYTES`] (a
    /// request body under the 8 MiB body limit can be, with its envelope: such a frame made the
    /// daemon close its socket, and the request was never answered);
    /// [`LinkSendError::Full`] when the queue is full, [`LinkSendError::Closed`] when the socket
    /// is gone.
    pub(crate) fn try_send(&self, frame: RelayFrame) -> Result<(), LinkSendError> {
        let len = protocol::jsonrpc::encoded_len(&frame);
        if len > RELAY_FRAME_MAX_BYTES {
            return Err(LinkSendError::TooLarge(len));
        }
        self.tx
            .try_send(Outbound::Frame(frame))
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => LinkSendError::Full,
                mpsc::error::TrySendError::Closed(_) => LinkSendError::Closed,
            })
    }

    /// Asks the writer to close the socket with `code` and `reason`, and the reader to stop:
    /// nothing the socket sends afterwards is routed. Best effort for the Close frame: a writer
    /// that is gone or congested ends the socket without one.
    pub(crate) fn close(&self, code: CloseCode, reason: &str) {
        let _ = self.tx.try_send(Outbound::Close(code, reason.to_owned()));
        self.closing.cancel();
    }
}

/// A verified daemon socket: where to send frames.
#[derive(Debug, Clone)]
pub(crate) struct Link {
    /// Node-unique socket id.
    pub(crate) id: u64,
    /// The daemon process's instance id.
    pub(crate) instance_id: InstanceId,
    /// The link protocol revision its `hello` announced (1 = before `call`).
    pub(crate) revision: u32,
    /// The device key its hello was verified with (a revoked key closes the link).
    pub(crate) key_id: String,
    /// The daemon's clock minus the relay's, in ms, as its hello showed: `hello.timestamp` − the
    /// relay's clock when the hello arrived. Lower than the true skew by the hello's one-way
    /// latency, which makes `deliver_by` earlier, never later (see `hub::delivery`).
    pub(crate) clock_skew_ms: i64,
    /// Frames to the daemon.
    pub(crate) tx: LinkTx,
}

impl Link {
    /// Whether the daemon serves `call` frames (MCP 2026-07-28 requests without a session).
    pub(crate) fn serves_calls(&self) -> bool {
        self.revision >= protocol::frame::REVISION_STATELESS
    }
}

/// What a bridge's lock guards.
#[derive(Debug, Default)]
pub(super) struct BridgeState {
    pub(super) catalog: Option<Arc<Catalog>>,
    pub(super) link: LinkState,
    /// Requests in flight on the bridge (sessions' and calls' together).
    pub(super) inflight: usize,
    /// Open `subscriptions/listen` calls (bounded apart from `inflight`).
    pub(super) listens: usize,
}

/// One bridge's live state on this node.
#[derive(Debug)]
pub(crate) struct Bridge {
    /// Bridge name.
    pub(crate) name: String,
    pub(super) state: Lock<BridgeState>,
    ready: watch::Sender<Option<Link>>,
    /// Bytes the standalone streams of this bridge's sessions hold
    /// ([`crate::stream::Budget`]).
    pub(crate) standalone_bytes: Arc<std::sync::atomic::AtomicUsize>,
}

impl Bridge {
    pub(super) fn new(name: &str, catalog: Option<Arc<Catalog>>) -> Self {
        Self {
            name: name.to_owned(),
            state: Lock::new(BridgeState {
                catalog,
                ..Default::default()
            }),
            ready: watch::channel(None).0,
            standalone_bytes: Arc::default(),
        }
    }

    /// The active daemon link, if any.
    pub(crate) fn active(&self) -> Option<Link> {
        self.state.lock().link.active().cloned()
    }

    /// The last catalog the daemon announced.
    pub(crate) fn catalog(&self) -> Option<Arc<Catalog>> {
        self.state.lock().catalog.clone()
    }

    /// Waits up to `max` for an active daemon link that is open ([`LinkTx::is_open`]): a link
    /// whose socket is ending is passed over until the next one is promoted.
    pub(crate) async fn wait_ready(&self, max: std::time::Duration) -> Option<Link> {
        let mut rx = self.ready.subscribe();
        let wait = async {
            loop {
                if let Some(l) = rx.borrow_and_update().clone()
                    && l.tx.is_open()
                {
                    return Some(l);
                }
                if rx.changed().await.is_err() {
                    return None;
                }
            }
        };
        tokio::time::timeout(max, wait).await.ok().flatten()
    }
}

impl Hub {
    /// Stores a verified daemon's catalog.
    pub(crate) async fn set_catalog(&self, bridge: &Bridge, servers: Vec<ServerInfo>) {
        if let Ok(text) = serde_json::to_string(&servers)
            && let Err(e) = self.store.bridges().set_catalog(&bridge.name, &text).await
        {
            tracing::warn!(bridge = %bridge.name, error = %e, "could not store the daemon catalog");
        }
        let cat = self.texts.catalog(servers);
        bridge.state.lock().catalog = Some(Arc::new(cat));
    }

    /// What the `resume` frame names for `instance`: the sessions opened on it and their
    /// in-flight requests that the daemon took (all of them for a daemon older than revision 4,
    /// the accepted ones for revision 4), if this bridge's sessions are bound to that instance.
    pub(crate) fn resume_set(
        &self,
        bridge: &Bridge,
        instance: &InstanceId,
    ) -> (Vec<SessionId>, Vec<ResumeRequest>) {
        let bound = bridge.state.lock().link.bound_instance().cloned();
        if bound.as_ref() != Some(instance) {
            return (Vec::new(), Vec::new());
        }
        let mut sessions = Vec::new();
        let mut requests = Vec::new();
        for s in self.bridge_exchanges(&bridge.name) {
            let g = s.state.lock();
            if g.opened_on.as_ref() == Some(instance) {
                sessions.push(s.sid.clone());
                // A request still awaiting `accepted` is not listed: the daemon cancels it if it
                // has it, and the relay retracts it as not delivered.
                for p in g.pending.values().filter(|p| !p.acceptance.is_awaiting()) {
                    requests.push(ResumeRequest {
                        sid: s.sid.clone(),
                        id: RequestId::new(p.id.clone()),
                    });
                }
            }
        }
        (sessions, requests)
    }

    /// Makes `link` the bridge's active daemon (after `ready`): rebinds the bound sessions when
    /// it is the same instance or releases them when it is a new one ([`Hub::reopen_bound`]), and flushes client messages
    /// queued while the daemon was away. Returns the replaced incumbent, which the caller closes
    /// (invariant 3: only now, after the candidate was verified).
    #[must_use = "the replaced incumbent must be closed"]
    pub(crate) fn promote(&self, bridge: &Arc<Bridge>, link: Link) -> Option<Link> {
        // A new instance inherits no open session: release the previous instance's sessions
        // before the new link is visible, so no request can slip onto it in between.
        let restarted = bridge
            .state
            .lock()
            .link
            .bound_instance()
            .filter(|b| **b != link.instance_id)
            .cloned();
        if let Some(old_instance) = restarted {
            self.reopen_bound(
                &bridge.name,
                &old_instance,
                "the machine's daemon restarted; the outcome of this request is unknown (it may have had effects): check before retrying",
            );
        }
        let promoted = {
            let mut g = bridge.state.lock();
            let p = g.link.promote(link.clone());
            if p.was_detached {
                Metrics::add(&self.metrics.detached, -(g.inflight as i64));
            }
            p
        };
        if promoted.replaced.is_some() || promoted.was_bound {
            self.metrics.reconnects.fetch_add(1, Ordering::Relaxed);
        }
        bridge.ready.send_replace(Some(link.clone()));
        self.flush_outboxes(bridge, &link);
        promoted.replaced
    }

    fn flush_outboxes(&self, bridge: &Bridge, link: &Link) {
        for s in self.bridge_sessions(&bridge.name) {
            let queued: Vec<serde_json::Value> = s.outbox.lock().drain(..).collect();
            for m in queued {
                if self.send_session(&s, link, m).is_err() {
                    tracing::warn!(bridge = %bridge.name, "a queued client message could not be sent");
                }
            }
        }
    }

    /// The socket `link_id` of `bridge` is gone: detach its sessions for the reconnect grace.
    /// Nothing changes when it is not the active socket (a candidate that failed, or an
    /// incumbent already replaced).
    pub(crate) fn link_lost(&self, bridge: &Bridge, link_id: u64) {
        let mut g = bridge.state.lock();
        if g.link.lose(link_id, Instant::now()) {
            Metrics::add(&self.metrics.detached, g.inflight as i64);
            bridge.ready.send_replace(None);
        }
    }

    /// The socket `link_id` of `bridge` was closed by its daemon, which stopped: like
    /// [`Hub::link_lost`], but the instance's sessions are released at once
    /// ([`Hub::reopen_bound`]: their requests get -32003, outcome unknown) instead of waiting
    /// out the reconnect grace for an instance that is over.
    pub(crate) fn link_stopped(&self, bridge: &Bridge, link_id: u64) {
        let instance = {
            let mut g = bridge.state.lock();
            if !g.link.lose(link_id, Instant::now()) {
                return;
            }
            bridge.ready.send_replace(None);
            // Detached and expired in one step: nothing is left waiting for it.
            g.link.expire(Instant::now(), std::time::Duration::ZERO)
        };
        if let Some(instance) = instance {
            self.reopen_bound(
                &bridge.name,
                &instance,
                "the machine's daemon stopped before this call finished; the outcome of this request is unknown (it may have had effects): check before retrying",
            );
        }
    }

    /// Daemon instance `instance` of `bridge` is over (it stopped, or a new instance replaced
    /// it): its handshake-era sessions stay, no longer open anywhere, so the next request of
    /// each opens it again on the next instance with the `initialize` the relay kept (routing
    /// sends `open` to an instance a session is not open on, then `notifications/initialized`
    /// if the client sent it). Their requests in flight get `message` with -32003 (outcome
    /// unknown) and client messages queued for the old instance are dropped; what lived in the
    /// old instance only (process sessions, cursors) is reported by the daemon on first use.
    /// Per-call sessions (MCP 2026-07-28) end with their instance.
    pub(super) fn reopen_bound(&self, bridge: &str, instance: &InstanceId, message: &str) {
        tracing::debug!(bridge, %instance, "releasing the sessions of a daemon instance that is over");
        for h in self.bridge_exchanges(bridge) {
            let s = match h {
                Held::Call(c) => {
                    if c.state.lock().opened_on.as_ref() == Some(instance) {
                        self.end_session(&c.sid, code::OUTCOME_UNKNOWN, message, false);
                    }
                    continue;
                }
                Held::Session(s) => s,
            };
            let pending = {
                let mut g = s.state.lock();
                if g.ended || g.opened_on.as_ref() != Some(instance) {
                    continue;
                }
                g.opened_on = None;
                // The next instance numbers its messages from the start.
                g.inbox = protocol::delivery::Inbox::new();
                self.persist_bound(&s, &g);
                g.pending
                    .drain()
                    .into_iter()
                    .map(|(_, p)| p)
                    .collect::<Vec<_>>()
            };
            s.outbox.lock().clear();
            self.settle_all(&s, pending, code::OUTCOME_UNKNOWN, message);
        }
    }

    /// Ends every session of `bridge` opened on `instance`; their requests get `message` with
    /// -32003 (outcome unknown).
    pub(super) fn end_bound(&self, bridge: &str, instance: &InstanceId, message: &str) {
        tracing::debug!(bridge, %instance, "ending the sessions of a daemon instance");
        let victims: Vec<SessionId> = self
            .bridge_exchanges(bridge)
            .into_iter()
            .filter(|s| s.state.lock().opened_on.as_ref() == Some(instance))
            .map(|s| s.sid.clone())
            .collect();
        for sid in victims {
            self.end_session(&sid, code::OUTCOME_UNKNOWN, message, false);
        }
    }
}
