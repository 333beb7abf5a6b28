//! MCP sessions ([`Session`]): an [`Exchange`] opened with the client's `initialize`, with a
//! standalone stream for server messages related to no request, kept in the store so that a
//! restarted relay takes it back, and bounded per bridge and per principal.

use std::{
    collections::VecDeque,
    ops::Deref,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicI64, Ordering},
    },
};

use serde_json::Value;

use protocol::{head, ids::SessionId};

use super::{
    Bridge, Hub,
    exchange::{Exchange, ExchangeState, Held},
};
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

/// One MCP session (DESIGN §4): an [`Exchange`] opened with an `initialize`, which the relay
/// keeps to open it again on a new daemon instance, with a standalone stream and a durable record.
#[derive(Debug)]
pub(crate) struct Session {
    /// Its `sid`, bridge, principal, server and requests in flight.
    pub(crate) exchange: Exchange,
    pub(super) initialize: Value,
    /// `notifications/initialized` was seen (sent again after a reopen); set only under the
    /// exchange's lock, never cleared.
    pub(super) initialized: AtomicBool,
    /// Client notifications and responses queued while the daemon is away.
    pub(super) outbox: Lock<VecDeque<Value>>,
    /// Server messages related to no request, until (and while) the client's GET stream reads
    /// them.
    pub(crate) standalone: Arc<SseStream>,
    /// When its activity was last written to the store (Unix seconds).
    pub(super) touched: AtomicI64,
}

impl Deref for Session {
    type Target = Exchange;

    fn deref(&self) -> &Exchange {
        &self.exchange
    }
}

impl Session {
    /// A session of `exchange` opened with `initialize` (what [`kept_initialize`] kept), its
    /// standalone stream bounded by the bridge's budget, last written to the store at `touched`
    /// (Unix seconds).
    pub(super) fn new(
        exchange: Exchange,
        initialize: Value,
        initialized: bool,
        touched: i64,
    ) -> Self {
        let standalone = SseStream::with_budget(
            &exchange.sid,
            &exchange.principal.id,
            &exchange.bridge.name,
            Some(Budget::standalone(exchange.bridge.standalone_bytes.clone())),
        );
        Self {
            exchange,
            initialize,
            initialized: AtomicBool::new(initialized),
            outbox: Lock::new(VecDeque::new()),
            standalone,
            touched: AtomicI64::new(touched),
        }
    }

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

    /// Whether `notifications/initialized` was seen.
    pub(super) fn initialized(&self) -> bool {
        self.initialized.load(Ordering::Relaxed)
    }

    /// The record the store keeps of this session (`g`: its exchange's state, locked by the
    /// caller).
    pub(super) fn record(&self, g: &ExchangeState) -> SessionRecord {
        SessionRecord {
            sid: self.sid.as_str().to_owned(),
            bridge: self.bridge.name.clone(),
            server: self.server.clone(),
            principal: self.principal.id.clone(),
            credential: self.principal.credential.clone(),
            role: self.principal.role.as_str().to_owned(),
            initialize: self.initialize.to_string(),
            initialized: self.initialized(),
            opened_on: g.opened_on.as_ref().map(|i| i.as_str().to_owned()),
            last_active: unix_now(),
        }
    }
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
        "id": head::peek::id_member(message).cloned().unwrap_or(Value::Null),
        "method": "initialize",
        "params": kept_params,
    });
    let size = protocol::jsonrpc::encoded_len(&kept);
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
    /// fewer than [`OWNER_RESERVED_SESSIONS`] to owners (calls are not counted). `initialize` is
    /// what [`kept_initialize`] kept of the client's request. Nothing is registered when it is
    /// refused.
    pub(super) fn create_session(
        &self,
        bridge: Arc<Bridge>,
        server: &str,
        principal: BridgePrincipal,
        initialize: Value,
    ) -> Option<Arc<Session>> {
        let sid = SessionId::new(self.keys.issue(&principal.id));
        let s = Arc::new(Session::new(
            Exchange::new(sid.clone(), bridge, server, principal),
            initialize,
            false,
            unix_now(),
        ));
        let mut m = self.exchanges.lock();
        let (mut on_bridge, mut guests, mut mine) = (0, 0, 0);
        let sessions = m.values().filter_map(|h| match h {
            Held::Session(x) if x.bridge.name == s.bridge.name => Some(x),
            _ => None,
        });
        for x in sessions {
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
        m.insert(sid, Held::Session(s.clone()));
        drop(m);
        if let Some(w) = &self.durable {
            w.send_reliable(StoreWrite::SessionOpened(s.record(&s.state.lock())));
        }
        self.streams.insert(s.standalone.clone());
        Metrics::add(&self.metrics.sessions, 1);
        Some(s)
    }

    /// Persists where session `s` is open and whether it saw `notifications/initialized` (after
    /// either changed; `g` is its exchange's state, locked by the caller).
    pub(super) fn persist_bound(&self, s: &Session, g: &ExchangeState) {
        if let Some(w) = &self.durable {
            w.send_reliable(StoreWrite::SessionBound {
                sid: s.sid.as_str().to_owned(),
                opened_on: g.opened_on.as_ref().map(|i| i.as_str().to_owned()),
                initialized: s.initialized(),
            });
        }
    }

    /// Persists that session `s` is in use, at most every [`TOUCH_INTERVAL_SECS`] (a restarted
    /// relay ends sessions idle longer than the idle timeout by this time).
    pub(super) fn persist_touch(&self, s: &Session) {
        let Some(w) = &self.durable else {
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

    /// The session `sid` if it exists and was issued to `principal` (a call is never one).
    pub(super) fn session(&self, sid: &str, principal: &BridgePrincipal) -> Option<Arc<Session>> {
        if !self.keys.verify(sid, &principal.id) {
            return None;
        }
        match self.exchanges.lock().get(sid) {
            Some(Held::Session(s)) if s.principal == *principal => Some(s.clone()),
            _ => None,
        }
    }

    /// The live sessions of the bridge named `bridge`, without its calls (a snapshot; the map
    /// lock is released).
    pub(super) fn bridge_sessions(&self, bridge: &str) -> Vec<Arc<Session>> {
        self.exchanges
            .lock()
            .values()
            .filter_map(|h| match h {
                Held::Session(s) if s.bridge.name == bridge => Some(s.clone()),
                _ => None,
            })
            .collect()
    }
}
