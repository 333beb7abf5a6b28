//! MCP sessions and calls ([`Session`]), the requests in flight in them ([`Pending`], answered to
//! a [`ReplySink`]), and how a session ends: every request still in flight gets an error, its
//! streams finish, and the daemon is told to close it.

use std::{
    collections::{HashMap, VecDeque},
    sync::{
        Arc,
        atomic::{AtomicI64, Ordering},
    },
};

use serde_json::Value;
use tokio::time::Instant;

use protocol::{
    frame::RelayFrame,
    ids::{InstanceId, SessionId},
    jsonrpc::{self, IdKey, code},
};

use super::{Bridge, Hub, ReplySink, delivery::Acceptance, routing::LinkOrigin};
use crate::{
    auth::BridgePrincipal,
    metrics::Metrics,
    storage::{SessionRecord, StoreWrite, now as unix_now},
    stream::{Budget, SseStream},
};
use lock::Lock;

/// How often at most a session's last activity is written to the store, in seconds.
const TOUCH_INTERVAL_SECS: i64 = 60;

/// Sessions per bridge.
pub(super) use crate::limits::SESSIONS_PER_BRIDGE;
use crate::limits::{
    OWNER_RESERVED_SESSIONS, SESSION_INITIALIZE_MAX_BYTES, SESSIONS_PER_PRINCIPAL,
};

/// A client request in flight.
#[derive(Debug)]
pub(super) struct Pending {
    pub(super) id: Value,
    pub(super) sink: ReplySink,
    /// Past it the sweep cancels the request; never extended by reconnecting (invariant 4).
    pub(super) deadline: Instant,
    pub(super) progress_token: Option<IdKey>,
    /// A `subscriptions/listen` of a call: ended gracefully at its deadline.
    pub(super) listen: bool,
    /// Whether the daemon confirmed it (link revision 4).
    pub(super) acceptance: Acceptance,
}

/// What a session's lock guards.
#[derive(Debug)]
pub(super) struct SessionState {
    /// The daemon instance the session is open on (`open` or `call` sent), if any.
    pub(super) opened_on: Option<InstanceId>,
    /// `notifications/initialized` was seen (sent again after a reopen).
    pub(super) initialized: bool,
    pub(super) pending: HashMap<IdKey, Pending>,
    /// Progress token → the request that carries it.
    pub(super) progress: HashMap<IdKey, IdKey>,
    /// The daemon's messages taken: the highest `seq` routed (lower ones are replays).
    pub(super) inbox: protocol::delivery::Inbox,
    /// Client notifications and responses queued while the daemon is away.
    pub(super) outbox: VecDeque<Value>,
    pub(super) last_active: Instant,
    /// The session was ended; nothing may be registered or sent any more.
    pub(super) ended: bool,
}

impl SessionState {
    pub(super) fn new(initialized: bool) -> Self {
        Self {
            opened_on: None,
            initialized,
            pending: HashMap::new(),
            progress: HashMap::new(),
            inbox: protocol::delivery::Inbox::new(),
            outbox: VecDeque::new(),
            last_active: Instant::now(),
            ended: false,
        }
    }
}

/// One MCP session (DESIGN §4): bound to its principal, its bridge and one served server.
#[derive(Debug)]
pub(crate) struct Session {
    /// The `MCP-Session-Id` (or a call's id).
    pub(crate) sid: SessionId,
    /// Its bridge.
    pub(crate) bridge: Arc<Bridge>,
    /// The served server (`runtime` or an upstream name).
    pub(crate) server: String,
    /// Who opened it.
    pub(crate) principal: BridgePrincipal,
    /// A call (link revision 2): one MCP 2026-07-28 request served without an MCP session,
    /// opened on the daemon with a `call` frame carrying the request itself and ended once it is
    /// answered. Not visible to clients, not counted as a session.
    pub(crate) call: bool,
    pub(super) initialize: Value,
    /// Server messages related to no request, until (and while) the client's GET stream reads
    /// them.
    pub(crate) standalone: Arc<SseStream>,
    pub(super) state: Lock<SessionState>,
    /// When its activity was last written to the store (Unix seconds).
    pub(super) touched: AtomicI64,
}

impl Session {
    /// The handshake-era version this session negotiated at `initialize` (from the kept
    /// request, so a session restored after a relay restart has it too).
    pub(crate) fn protocol_version(&self) -> &'static str {
        protocol::mcp::negotiate_session_version(
            self.initialize
                .pointer("/params/protocolVersion")
                .and_then(Value::as_str)
                .unwrap_or(""),
        )
    }

    /// The record the store keeps of this session.
    pub(super) fn record(&self, g: &SessionState) -> SessionRecord {
        SessionRecord {
            sid: self.sid.as_str().to_owned(),
            bridge: self.bridge.name.clone(),
            server: self.server.clone(),
            principal: self.principal.id.clone(),
            credential: self.principal.credential.clone(),
            role: self.principal.role.as_str().to_owned(),
            initialize: self.initialize.to_string(),
            initialized: g.initialized,
            opened_on: g.opened_on.as_ref().map(|i| i.as_str().to_owned()),
            last_active: unix_now(),
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
    TooLarge(super::bridge::LinkSendError),
}

/// What a session keeps of a client's `initialize` (to open it on the daemon, again after a
/// daemon restart): the envelope and `protocolVersion`, `capabilities` and `clientInfo` of its
/// params, nothing else.
///
/// # Errors
/// A message naming the limit when what would be kept serializes to more than
/// [`SESSION_INITIALIZE_MAX_BYTES`].
pub(crate) fn kept_initialize(message: &Value) -> Result<Value, String> {
    let params = message.get("params");
    let mut kept_params = serde_json::Map::new();
    for key in ["protocolVersion", "capabilities", "clientInfo"] {
        if let Some(v) = params.and_then(|p| p.get(key)) {
            kept_params.insert(key.to_owned(), v.clone());
        }
    }
    let kept = serde_json::json!({
        "jsonrpc": protocol::jsonrpc::VERSION,
        "id": message.get("id").cloned().unwrap_or(Value::Null),
        "method": "initialize",
        "params": kept_params,
    });
    let size = kept.to_string().len();
    if size > SESSION_INITIALIZE_MAX_BYTES {
        return Err(format!(
            "initialize: the protocolVersion, capabilities and clientInfo take {size} bytes; at most {SESSION_INITIALIZE_MAX_BYTES} are kept for a session"
        ));
    }
    Ok(kept)
}

impl Hub {
    /// Creates a session; `None` when the bridge has [`SESSIONS_PER_BRIDGE`] already, or the
    /// principal, not an owner, has [`SESSIONS_PER_PRINCIPAL`], or such principals together leave
    /// fewer than [`OWNER_RESERVED_SESSIONS`] to owners. `initialize` is what
    /// [`kept_initialize`] kept of the client's request. Nothing is registered when it is
    /// refused.
    pub(super) fn create_session(
        &self,
        bridge: Arc<Bridge>,
        server: &str,
        principal: BridgePrincipal,
        initialize: Value,
    ) -> Option<Arc<Session>> {
        let sid = SessionId::new(self.keys.issue(&principal.id));
        let standalone = SseStream::with_budget(
            &sid,
            &principal.id,
            &bridge.name,
            Some(Budget::standalone(bridge.standalone_bytes.clone())),
        );
        let s = Arc::new(Session {
            sid: sid.clone(),
            server: server.to_owned(),
            principal,
            call: false,
            initialize,
            standalone,
            state: Lock::new(SessionState::new(false)),
            bridge,
            touched: AtomicI64::new(unix_now()),
        });
        let mut m = self.sessions.lock();
        let (mut on_bridge, mut guests, mut mine) = (0, 0, 0);
        for x in m
            .values()
            .filter(|x| !x.call && x.bridge.name == s.bridge.name)
        {
            on_bridge += 1;
            if x.principal.role != protocol::Role::Owner {
                guests += 1;
                if x.principal.id == s.principal.id {
                    mine += 1;
                }
            }
        }
        let guest = s.principal.role != protocol::Role::Owner;
        if on_bridge >= SESSIONS_PER_BRIDGE
            || (guest
                && (mine >= SESSIONS_PER_PRINCIPAL
                    || guests >= SESSIONS_PER_BRIDGE - OWNER_RESERVED_SESSIONS))
        {
            return None;
        }
        m.insert(sid, s.clone());
        drop(m);
        if let Some(w) = &self.durable {
            w.send_reliable(StoreWrite::SessionOpened(s.record(&s.state.lock())));
        }
        self.streams.insert(s.standalone.clone());
        Metrics::add(&self.metrics.sessions, 1);
        Some(s)
    }

    /// Persists where session `s` is open and whether it saw `notifications/initialized` (after
    /// either changed; `g` is its state, locked by the caller).
    pub(super) fn persist_bound(&self, s: &Session, g: &SessionState) {
        if let Some(w) = self.durable.as_ref().filter(|_| !s.call) {
            w.send_reliable(StoreWrite::SessionBound {
                sid: s.sid.as_str().to_owned(),
                opened_on: g.opened_on.as_ref().map(|i| i.as_str().to_owned()),
                initialized: g.initialized,
            });
        }
    }

    /// Persists that session `s` is in use, at most every [`TOUCH_INTERVAL_SECS`] (a restarted
    /// relay ends sessions idle longer than the idle timeout by this time).
    pub(super) fn persist_touch(&self, s: &Session) {
        let Some(w) = self.durable.as_ref().filter(|_| !s.call) else {
            return;
        };
        let now = unix_now();
        let last = s.touched.load(Ordering::Relaxed);
        if now - last >= TOUCH_INTERVAL_SECS
            && s.touched
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let _ = w.send(StoreWrite::SessionTouched {
                sid: s.sid.as_str().to_owned(),
                at: now,
            });
        }
    }

    /// Every session and call, for checks that walk them all (revocation).
    pub(crate) fn all_sessions(&self) -> Vec<Arc<Session>> {
        self.sessions.lock().values().cloned().collect()
    }

    /// Creates the call that carries one MCP 2026-07-28 request to `server` on `bridge` for
    /// `principal`. Its id
    /// is `c` + 256 random bits (session ids always hold a `.`, so the two never meet). Calls are
    /// bounded by the bridge's in-flight limit when their request is registered, not by
    /// [`SESSIONS_PER_BRIDGE`].
    pub(super) fn create_call(
        &self,
        bridge: Arc<Bridge>,
        server: &str,
        principal: BridgePrincipal,
    ) -> Arc<Session> {
        let sid = SessionId::new(crate::auth::random_secret("c"));
        let standalone = SseStream::new(&sid, &principal.id, &bridge.name);
        let s = Arc::new(Session {
            sid: sid.clone(),
            server: server.to_owned(),
            principal,
            call: true,
            initialize: Value::Null,
            standalone,
            state: Lock::new(SessionState::new(true)),
            bridge,
            touched: AtomicI64::new(0),
        });
        self.sessions.lock().insert(sid, s.clone());
        s
    }

    /// The session `sid` if it exists and was issued to `principal`.
    pub(super) fn session(&self, sid: &str, principal: &BridgePrincipal) -> Option<Arc<Session>> {
        if !self.keys.verify(sid, &principal.id) {
            return None;
        }
        let s = self.sessions.lock().get(sid).cloned()?;
        (s.principal == *principal).then_some(s)
    }

    pub(super) fn session_by_sid(&self, sid: &SessionId) -> Option<Arc<Session>> {
        self.sessions.lock().get(sid).cloned()
    }

    /// Session `sid` when it is one of `from`'s: of its bridge and open on its daemon instance.
    /// Another bridge's session, or one the socket's instance never opened,
    /// is `None`, like a session that does not exist (the daemon learns nothing of it).
    pub(crate) fn session_from(
        &self,
        from: LinkOrigin<'_>,
        sid: &SessionId,
    ) -> Option<Arc<Session>> {
        let s = self.session_by_sid(sid)?;
        (s.bridge.name == from.bridge && s.state.lock().opened_on.as_ref() == Some(from.instance))
            .then_some(s)
    }

    /// The live call of `principal` on `bridge`/`server` whose request has id `id`, if exactly
    /// one matches (for a `notifications/cancelled` a 2026-07-28 client POSTs).
    pub(super) fn find_call(
        &self,
        bridge: &str,
        server: &str,
        principal: &BridgePrincipal,
        id: &Value,
    ) -> Option<Arc<Session>> {
        let key = IdKey::of(id);
        let mut found = self.bridge_sessions(bridge).into_iter().filter(|s| {
            s.call
                && s.server == server
                && s.principal == *principal
                && s.state.lock().pending.contains_key(&key)
        });
        let first = found.next()?;
        found.next().is_none().then_some(first)
    }

    /// The client of call `s` is gone before its answer (MCP 2026-07-28 Basic › Transports ›
    /// Streamable HTTP § Cancellation: closing the response stream cancels the request): the
    /// daemon gets `notifications/cancelled` for the request and `close` for the call. Nothing
    /// happens when the call was already answered.
    pub(super) fn cancel_call(&self, s: &Session, id: &Value, reason: &str) {
        let Some(p) = s.state.lock().pending.remove(&IdKey::of(id)) else {
            return;
        };
        tracing::debug!(bridge = %s.bridge.name, reason, "cancelling a call");
        self.finish_pending(s, p, None);
        if let Some(link) = s.bridge.active() {
            let _ = self.send(s, &link, jsonrpc::cancelled(id, reason));
        }
        self.end_session(&s.sid, code::UNAVAILABLE, reason, true);
    }

    /// Ends call `sid` once its request is answered (after the answer was acknowledged), telling
    /// the daemon with `close`. Sessions and calls still awaited are left alone.
    pub(crate) fn close_if_answered(&self, s: &Session) {
        if !s.call {
            return;
        }
        let answered = {
            let g = s.state.lock();
            g.pending.is_empty() && g.opened_on.is_some()
        };
        if answered {
            self.end_session(&s.sid, code::UNAVAILABLE, "the call was answered", true);
        }
    }

    /// The daemon of `from` ended its session `sid` (a session not of `from` is left alone).
    pub(crate) fn daemon_closed(&self, from: LinkOrigin<'_>, sid: &SessionId, reason: &str) {
        if self.session_from(from, sid).is_none() {
            return;
        }
        self.end_session(
            sid,
            code::UNAVAILABLE,
            &format!("the server ended the session: {reason}"),
            false,
        );
    }

    /// Ends a session: in-flight requests get `error`, streams finish, the daemon is told to
    /// close it if it has it open. Later requests for it get 404.
    pub(crate) fn end_session(&self, sid: &SessionId, code: i64, message: &str, tell_daemon: bool) {
        let Some(s) = self.sessions.lock().remove(sid) else {
            return;
        };
        tracing::debug!(bridge = %s.bridge.name, code, call = s.call, "ending a session");
        if !s.call {
            Metrics::add(&self.metrics.sessions, -1);
            if let Some(w) = &self.durable {
                w.send_reliable(StoreWrite::SessionEnded {
                    sid: s.sid.as_str().to_owned(),
                });
            }
        }
        let (pending, opened) = {
            let mut g = s.state.lock();
            g.ended = true;
            g.outbox.clear();
            (
                g.pending.drain().map(|(_, p)| p).collect::<Vec<_>>(),
                g.opened_on.take(),
            )
        };
        tracing::debug!(
            pending = pending.len(),
            "settling the requests of an ended session"
        );
        self.settle_all(&s, pending, code, message);
        s.standalone.finish();
        if tell_daemon
            && opened.is_some()
            && let Some(link) = s.bridge.active()
        {
            // Best effort: a daemon that does not get it ends the session at `resume`.
            let _ = link.tx.try_send(RelayFrame::Close { sid: s.sid.clone() });
        }
    }

    /// Answers every request of `pending` with the error `code`/`message`.
    pub(super) fn settle_all(&self, s: &Session, pending: Vec<Pending>, code: i64, message: &str) {
        for p in pending {
            let err = jsonrpc::error(&p.id, code, message, None);
            self.finish_pending(s, p, Some(err));
        }
    }

    /// Gives `p`'s slot back and ends its sink: with `terminal` as its last message, or without
    /// one (a cancelled request gets no response).
    pub(super) fn finish_pending(&self, s: &Session, p: Pending, terminal: Option<Value>) {
        self.release(s, &p);
        p.sink.finish(terminal);
    }

    /// Gives back the bridge slot of request `p`, no longer pending, and takes it off the
    /// gauges it was on.
    pub(super) fn release(&self, s: &Session, p: &Pending) {
        if p.acceptance.is_awaiting() {
            Metrics::add(&self.metrics.awaiting_acceptance, -1);
        }
        if p.listen {
            {
                let mut b = s.bridge.state.lock();
                b.listens = b.listens.saturating_sub(1);
            }
            Metrics::add(&self.metrics.subscriptions, -1);
            return;
        }
        {
            let mut b = s.bridge.state.lock();
            b.inflight = b.inflight.saturating_sub(1);
            // Counted as detached only while the bridge is: once the grace ran out (unbound)
            // the sweep has taken the bridge's requests off the gauge already.
            if b.link.is_detached() {
                Metrics::add(&self.metrics.detached, -1);
            }
        }
        Metrics::add(&self.metrics.inflight, -1);
    }
}
