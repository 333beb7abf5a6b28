//! The relay's node-local state: bridges and their daemon links, MCP sessions, pending requests,
//! and the routing of every message between an HTTP client and a daemon.
//!
//! Rules this module keeps (DESIGN §4, §5, §8):
//! - A session is opened on a daemon lazily, with the client's original `initialize` (and
//!   `notifications/initialized` when it was seen), before the first message that needs it; the
//!   open and the message go out in order under the session's lock.
//! - Every daemon message goes to exactly one place: a response to the request it answers (its
//!   POST stream or JSON waiter); progress by its progress token; other messages to the request
//!   the daemon names as related, else the only request in flight, else the session's standalone
//!   stream, which buffers until the client opens it.
//! - Daemon messages carry a per-session sequence number; duplicates from a replay are dropped
//!   and every message is acknowledged once it is stored.
//! - Losing a daemon socket detaches its sessions and requests; only a verified socket of the
//!   same instance rebinds them, within the reconnect grace. A new instance, or the grace running
//!   out, ends them: their requests get an error saying their outcome is unknown.
//! - Deadlines are never extended by reconnecting.

use std::{
    collections::{BTreeMap, HashMap, HashSet, VecDeque},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

use serde_json::{Value, json};
use tokio::{
    sync::{mpsc, oneshot, watch},
    time::Instant,
};

use protocol::{
    frame::{CloseCode, RelayFrame, ResumeRequest, ServerInfo},
    ids::{InstanceId, SessionId},
    jsonrpc::{self, IdKey, RequestId, code},
    limits::{CALL_BUDGET_MAX, RELAY_OVERHEAD, SUBSCRIPTION_MAX, SUBSCRIPTIONS_PER_BRIDGE},
    mcp::SUBSCRIPTIONS_LISTEN,
};

use crate::{
    auth::{Principal, SessionKeys},
    config::RelayConfig,
    metrics::Metrics,
    storage::SqliteStorage,
    stream::{Stream, Streams},
};

/// Sessions per bridge.
const SESSIONS_PER_BRIDGE: usize = 1_000;
/// Client messages queued for a daemon that is away.
const OUTBOX_MAX: usize = 256;
/// A session without requests in flight and unused this long is ended (its daemon side, possibly
/// an upstream child process, with it); a client that comes back gets 404 and initializes again.
const SESSION_IDLE: std::time::Duration = std::time::Duration::from_secs(3600);

/// What the socket writer sends.
#[derive(Debug)]
pub enum Outbound {
    /// A frame.
    Frame(RelayFrame),
    /// A close frame with a code and reason; the socket ends after it.
    Close(CloseCode, String),
}

/// Queue of one socket's writer.
#[derive(Debug, Clone)]
pub struct LinkTx(pub mpsc::Sender<Outbound>);

impl LinkTx {
    /// Queues `frame` without waiting; false when the queue is full or the socket is gone.
    pub fn try_send(&self, frame: RelayFrame) -> bool {
        self.0.try_send(Outbound::Frame(frame)).is_ok()
    }

    /// Asks the writer to close the socket.
    pub fn close(&self, code: CloseCode, reason: &str) {
        let _ = self.0.try_send(Outbound::Close(code, reason.to_owned()));
    }
}

/// A verified daemon socket: where to send frames.
#[derive(Debug, Clone)]
pub struct Link {
    /// Node-unique socket id.
    pub id: u64,
    /// The daemon process's instance id.
    pub instance_id: InstanceId,
    /// The link protocol revision its `hello` announced (1 = before `call`).
    pub revision: u32,
    /// Frames to the daemon.
    pub tx: LinkTx,
}

impl Link {
    /// Whether the daemon serves `call` frames (MCP 2026-07-28 requests without a session).
    pub fn serves_calls(&self) -> bool {
        self.revision >= protocol::frame::REVISION_STATELESS
    }
}

/// The catalog a daemon announced: its servers by name.
pub type Catalog = HashMap<String, CachedServer>;

/// One server of a catalog as the relay keeps it: compact JSON text, not a parsed tree (a parsed
/// catalog of the built-in runtime, four role views with their schemas, takes about 0.9 MiB per
/// bridge), and shared between bridges that announced the same text (see [`TextCache`]).
#[derive(Debug, Clone)]
pub struct CachedServer {
    /// The server's `initialize` result (a JSON object).
    pub initialize: Arc<str>,
    /// The server's `server/discover` result, when the daemon announced one (link revision 2).
    pub discover: Option<Arc<str>>,
    /// `tools/list` results (JSON objects) by role name.
    pub tools: BTreeMap<String, Arc<str>>,
    /// The `x-mcp-header` annotations of its tools, by tool name (checked against the
    /// `Mcp-Param-*` headers of MCP 2026-07-28 `tools/call` requests).
    pub param_headers: Arc<HashMap<String, Vec<crate::stateless::ParamHeader>>>,
}

impl CachedServer {
    /// The `initialize` result, parsed.
    pub fn initialize(&self) -> Value {
        serde_json::from_str(&self.initialize).unwrap_or(Value::Null)
    }

    /// The announced `server/discover` result, parsed.
    pub fn discover(&self) -> Option<Value> {
        self.discover
            .as_deref()
            .and_then(|d| serde_json::from_str(d).ok())
    }

    /// The `tools/list` result `role` may see, parsed.
    pub fn tools_for(&self, role: &str) -> Option<Value> {
        self.tools
            .get(role)
            .and_then(|t| serde_json::from_str(t).ok())
    }
}

/// Interned JSON texts: identical catalog parts (every daemon of one version announces the same
/// tool list) are kept once. An entry goes when no bridge uses it any more.
#[derive(Debug, Default)]
pub struct TextCache(Mutex<HashSet<Arc<str>>>);

impl TextCache {
    /// The shared copy of `value`'s compact JSON text.
    pub fn intern(&self, value: &Value) -> Arc<str> {
        let text = value.to_string();
        let Ok(mut set) = self.0.lock() else {
            return Arc::from(text);
        };
        if let Some(hit) = set.get(text.as_str()) {
            return hit.clone();
        }
        // Drop texts only the cache still holds, then keep the new one.
        set.retain(|t| Arc::strong_count(t) > 1);
        let text: Arc<str> = Arc::from(text);
        set.insert(text.clone());
        text
    }

    /// A catalog from a daemon's announced servers, its texts interned.
    pub fn catalog(&self, servers: Vec<ServerInfo>) -> Catalog {
        servers
            .into_iter()
            .map(|s| {
                let cached = CachedServer {
                    initialize: self.intern(&s.initialize),
                    discover: s.discover.as_ref().map(|d| self.intern(d)),
                    tools: s
                        .tools
                        .iter()
                        .map(|(role, t)| (role.clone(), self.intern(t)))
                        .collect(),
                    param_headers: Arc::new(crate::stateless::param_headers(s.tools.values())),
                };
                (s.name, cached)
            })
            .collect()
    }
}

#[derive(Debug, Default)]
struct BridgeInner {
    catalog: Option<Arc<Catalog>>,
    active: Option<Link>,
    /// The instance whose sessions are bound here (active, or detached within the grace).
    bound_instance: Option<InstanceId>,
    detached_at: Option<Instant>,
    inflight: usize,
    /// Open `subscriptions/listen` calls (bounded apart from `inflight`).
    listens: usize,
}

/// One bridge's live state on this node.
#[derive(Debug)]
pub struct Bridge {
    /// Bridge name.
    pub name: String,
    inner: Mutex<BridgeInner>,
    ready: watch::Sender<Option<Link>>,
}

impl Bridge {
    /// The active daemon link, if any.
    pub fn active(&self) -> Option<Link> {
        self.inner.lock().ok().and_then(|g| g.active.clone())
    }

    /// The last catalog the daemon announced.
    pub fn catalog(&self) -> Option<Arc<Catalog>> {
        self.inner.lock().ok().and_then(|g| g.catalog.clone())
    }

    /// Waits up to `max` for an active daemon.
    pub async fn wait_ready(&self, max: std::time::Duration) -> Option<Link> {
        let mut rx = self.ready.subscribe();
        let wait = async {
            loop {
                if let Some(l) = rx.borrow_and_update().clone() {
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

/// Where the answer to one client request goes.
#[derive(Debug)]
pub enum Sink {
    /// An SSE stream (the POST's, resumable).
    Stream(Arc<Stream>),
    /// A plain JSON response waiting for the terminal message.
    Json(oneshot::Sender<Value>),
}

#[derive(Debug)]
struct Pending {
    id: Value,
    sink: Sink,
    deadline: Instant,
    progress_token: Option<IdKey>,
    /// A `subscriptions/listen` of a call: ended gracefully at its deadline.
    listen: bool,
}

#[derive(Debug)]
struct SessionInner {
    opened_on: Option<InstanceId>,
    initialized: bool,
    pending: HashMap<IdKey, Pending>,
    progress: HashMap<IdKey, IdKey>,
    last_seq: u64,
    outbox: VecDeque<Value>,
    last_active: Instant,
    /// The session was ended; nothing may be registered or sent any more.
    ended: bool,
}

/// One MCP session (DESIGN §4): bound to its principal, its bridge and one served server.
#[derive(Debug)]
pub struct Session {
    /// The `MCP-Session-Id` (or a call's id).
    pub sid: SessionId,
    /// Its bridge.
    pub bridge: Arc<Bridge>,
    /// The served server (`runtime` or an upstream name).
    pub server: String,
    /// Who opened it.
    pub principal: Principal,
    /// The negotiated protocol version.
    pub protocol_version: String,
    /// A call (link revision 2): one MCP 2026-07-28 request served without an MCP session,
    /// opened on the daemon with a `call` frame carrying the request itself and ended once it is
    /// answered. Not visible to clients, not counted as a session.
    pub call: bool,
    initialize: Value,
    /// Server messages related to no request, until (and while) the client's GET stream reads them.
    pub standalone: Arc<Stream>,
    inner: Mutex<SessionInner>,
}

/// Why a message could not go to the daemon.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// No daemon is connected.
    #[error("the daemon of bridge {0} is offline")]
    Offline(String),
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
}

/// The node-local relay state.
#[derive(Debug)]
pub struct Hub {
    /// Durable state.
    pub storage: SqliteStorage,
    /// Configuration.
    pub config: Arc<RelayConfig>,
    /// Session id keys.
    pub keys: SessionKeys,
    /// Resumable streams.
    pub streams: Streams,
    /// Metrics.
    pub metrics: Metrics,
    /// The OAuth authorization server's in-memory state.
    pub oauth: crate::oauth::OAuth,
    bridges: Mutex<HashMap<String, Arc<Bridge>>>,
    sessions: Mutex<HashMap<SessionId, Arc<Session>>>,
    next_link: AtomicU64,
    texts: TextCache,
}

impl Hub {
    /// A hub over `storage`.
    pub fn new(storage: SqliteStorage, config: RelayConfig) -> Arc<Self> {
        Arc::new(Self {
            storage,
            oauth: crate::oauth::OAuth::new(config.oauth),
            config: Arc::new(config),
            keys: SessionKeys::new(),
            streams: Streams::default(),
            metrics: Metrics::default(),
            bridges: Mutex::new(HashMap::new()),
            texts: TextCache::default(),
            sessions: Mutex::new(HashMap::new()),
            next_link: AtomicU64::new(1),
        })
    }

    /// A fresh socket id.
    pub fn next_link_id(&self) -> u64 {
        self.next_link.fetch_add(1, Ordering::Relaxed)
    }

    /// The live state of bridge `name` (created on first use, with its stored catalog).
    pub async fn bridge(&self, name: &str) -> Arc<Bridge> {
        if let Some(b) = self.bridges.lock().ok().and_then(|m| m.get(name).cloned()) {
            return b;
        }
        let catalog = match self.storage.catalog(name).await {
            Ok(Some(text)) => serde_json::from_str::<Vec<ServerInfo>>(&text)
                .ok()
                .map(|v| Arc::new(self.texts.catalog(v))),
            _ => None,
        };
        let Ok(mut m) = self.bridges.lock() else {
            return Arc::new(Bridge {
                name: name.to_owned(),
                inner: Mutex::new(BridgeInner::default()),
                ready: watch::channel(None).0,
            });
        };
        m.entry(name.to_owned())
            .or_insert_with(|| {
                Arc::new(Bridge {
                    name: name.to_owned(),
                    inner: Mutex::new(BridgeInner {
                        catalog,
                        ..Default::default()
                    }),
                    ready: watch::channel(None).0,
                })
            })
            .clone()
    }

    // === sessions ===

    /// Creates a session; `None` when the bridge has too many.
    pub fn create_session(
        &self,
        bridge: Arc<Bridge>,
        server: &str,
        principal: Principal,
        protocol_version: &str,
        initialize: Value,
    ) -> Option<Arc<Session>> {
        let sid = SessionId::new(self.keys.issue(&principal.id));
        let standalone = Stream::new(&sid, &principal.id, &bridge.name);
        self.streams.insert(standalone.clone());
        let s = Arc::new(Session {
            sid: sid.clone(),
            server: server.to_owned(),
            principal,
            protocol_version: protocol_version.to_owned(),
            call: false,
            initialize,
            standalone,
            inner: Mutex::new(SessionInner {
                opened_on: None,
                initialized: false,
                pending: HashMap::new(),
                progress: HashMap::new(),
                last_seq: 0,
                outbox: VecDeque::new(),
                last_active: Instant::now(),
                ended: false,
            }),
            bridge,
        });
        let mut m = self.sessions.lock().ok()?;
        let on_bridge = m
            .values()
            .filter(|x| !x.call && x.bridge.name == s.bridge.name)
            .count();
        if on_bridge >= SESSIONS_PER_BRIDGE {
            return None;
        }
        m.insert(sid, s.clone());
        Metrics::add(&self.metrics.sessions, 1);
        Some(s)
    }

    /// Creates the call that carries one MCP 2026-07-28 request (`version` is its
    /// `io.modelcontextprotocol/protocolVersion`) to `server` on `bridge` for `principal`. Its id
    /// is `c` + 256 random bits (session ids always hold a `.`, so the two never meet). Calls are
    /// bounded by the bridge's in-flight limit when their request is registered, not by
    /// [`SESSIONS_PER_BRIDGE`].
    pub fn create_call(
        &self,
        bridge: Arc<Bridge>,
        server: &str,
        principal: Principal,
        version: &str,
    ) -> Option<Arc<Session>> {
        let sid = SessionId::new(crate::auth::random_secret("c"));
        let standalone = Stream::new(&sid, &principal.id, &bridge.name);
        let s = Arc::new(Session {
            sid: sid.clone(),
            server: server.to_owned(),
            principal,
            protocol_version: version.to_owned(),
            call: true,
            initialize: Value::Null,
            standalone,
            inner: Mutex::new(SessionInner {
                opened_on: None,
                initialized: true,
                pending: HashMap::new(),
                progress: HashMap::new(),
                last_seq: 0,
                outbox: VecDeque::new(),
                last_active: Instant::now(),
                ended: false,
            }),
            bridge,
        });
        self.sessions.lock().ok()?.insert(sid, s.clone());
        Some(s)
    }

    /// The live call of `principal` on `bridge`/`server` whose request has id `id`, if exactly
    /// one matches (for a `notifications/cancelled` a 2026-07-28 client POSTs).
    pub fn find_call(
        &self,
        bridge: &str,
        server: &str,
        principal: &Principal,
        id: &Value,
    ) -> Option<Arc<Session>> {
        let key = IdKey::of(id);
        let mut found = self.bridge_sessions(bridge).into_iter().filter(|s| {
            s.call
                && s.server == server
                && s.principal == *principal
                && s.inner
                    .lock()
                    .map(|g| g.pending.contains_key(&key))
                    .unwrap_or(false)
        });
        let first = found.next()?;
        found.next().is_none().then_some(first)
    }

    /// The client of call `s` is gone before its answer (MCP 2026-07-28 Basic › Transports ›
    /// Streamable HTTP § Cancellation: closing the response stream cancels the request): the
    /// daemon gets `notifications/cancelled` for the request and `close` for the call. Nothing
    /// happens when the call was already answered.
    pub fn cancel_call(&self, s: &Session, id: &Value, reason: &str) {
        let p = s
            .inner
            .lock()
            .ok()
            .and_then(|mut g| g.pending.remove(&IdKey::of(id)));
        let Some(p) = p else {
            return;
        };
        tracing::debug!(bridge = %s.bridge.name, reason, "cancelling a call");
        self.finish_pending(s, p, None);
        if let Some(link) = s.bridge.active() {
            let _ = self.send(
                s,
                &link,
                json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                       "params": {"requestId": id, "reason": reason}}),
            );
        }
        self.end_session(&s.sid, code::UNAVAILABLE, reason, true);
    }

    /// Ends call `sid` once its request is answered (after the answer was acknowledged), telling
    /// the daemon with `close`. Sessions and calls still awaited are left alone.
    pub fn close_if_answered(&self, sid: &SessionId) {
        let Some(s) = self.session_by_sid(sid) else {
            return;
        };
        if !s.call {
            return;
        }
        let answered = s
            .inner
            .lock()
            .map(|g| g.pending.is_empty() && g.opened_on.is_some())
            .unwrap_or(false);
        if answered {
            self.end_session(sid, code::UNAVAILABLE, "the call was answered", true);
        }
    }

    /// The session `sid` if it exists and was issued to `principal`.
    pub fn session(&self, sid: &str, principal: &Principal) -> Option<Arc<Session>> {
        if !self.keys.verify(sid, &principal.id) {
            return None;
        }
        let s = self.sessions.lock().ok()?.get(sid).cloned()?;
        (s.principal == *principal).then_some(s)
    }

    fn session_by_sid(&self, sid: &SessionId) -> Option<Arc<Session>> {
        self.sessions.lock().ok()?.get(sid).cloned()
    }

    /// Ends a session: in-flight requests get `error`, streams finish, the daemon is told to
    /// close it if it has it open. Later requests for it get 404.
    pub fn end_session(&self, sid: &SessionId, code: i64, message: &str, tell_daemon: bool) {
        let Some(s) = self.sessions.lock().ok().and_then(|mut m| m.remove(sid)) else {
            return;
        };
        tracing::debug!(bridge = %s.bridge.name, code, call = s.call, "ending a session");
        if !s.call {
            Metrics::add(&self.metrics.sessions, -1);
        }
        let (pending, opened) = match s.inner.lock() {
            Ok(mut g) => {
                g.ended = true;
                g.outbox.clear();
                (
                    g.pending.drain().map(|(_, p)| p).collect::<Vec<_>>(),
                    g.opened_on.take(),
                )
            }
            Err(_) => (Vec::new(), None),
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
            let _ = link.tx.try_send(RelayFrame::Close { sid: s.sid.clone() });
        }
    }

    fn settle_all(&self, s: &Session, pending: Vec<Pending>, code: i64, message: &str) {
        for p in pending {
            let err =
                json!({"jsonrpc": "2.0", "id": p.id, "error": {"code": code, "message": message}});
            self.finish_pending(s, p, Some(err));
        }
    }

    fn finish_pending(&self, s: &Session, p: Pending, terminal: Option<Value>) {
        self.release(s, p.listen);
        match (p.sink, terminal) {
            (Sink::Stream(st), Some(msg)) => {
                st.push(&msg, true);
            }
            (Sink::Stream(st), None) => st.finish(),
            (Sink::Json(tx), Some(msg)) => {
                let _ = tx.send(msg);
            }
            (Sink::Json(_), None) => {}
        }
    }

    // === client → daemon ===

    /// Registers request `message` (with id `id`) as in flight, answered to `sink`.
    ///
    /// A `subscriptions/listen` call counts against [`SUBSCRIPTIONS_PER_BRIDGE`] instead of the
    /// in-flight limit, and its deadline is [`SUBSCRIPTION_MAX`].
    ///
    /// # Errors
    /// [`SendError::TooMany`] over the bridge's in-flight (or subscription) limit;
    /// [`SendError::DuplicateId`].
    pub fn register(
        &self,
        s: &Session,
        id: &Value,
        message: &Value,
        sink: Sink,
    ) -> Result<(), SendError> {
        let key = IdKey::of(id);
        let listen =
            s.call && message.get("method").and_then(Value::as_str) == Some(SUBSCRIPTIONS_LISTEN);
        let max = if listen {
            SUBSCRIPTIONS_PER_BRIDGE
        } else {
            self.config.max_inflight_per_bridge
        };
        {
            let mut b = s
                .bridge
                .inner
                .lock()
                .map_err(|_| SendError::Busy(s.bridge.name.clone()))?;
            if (if listen { b.listens } else { b.inflight }) >= max {
                return Err(SendError::TooMany(max));
            }
            let mut g = s
                .inner
                .lock()
                .map_err(|_| SendError::Busy(s.bridge.name.clone()))?;
            if g.ended {
                return Err(SendError::Ended);
            }
            if g.pending.contains_key(&key) {
                return Err(SendError::DuplicateId);
            }
            let token = message
                .pointer("/params/_meta/progressToken")
                .filter(|t| t.is_string() || t.is_number())
                .map(IdKey::of);
            if let Some(t) = &token {
                g.progress.insert(t.clone(), key.clone());
            }
            let budget = if listen {
                SUBSCRIPTION_MAX
            } else {
                CALL_BUDGET_MAX + RELAY_OVERHEAD
            };
            g.pending.insert(
                key,
                Pending {
                    id: id.clone(),
                    sink,
                    deadline: Instant::now() + budget,
                    progress_token: token,
                    listen,
                },
            );
            g.last_active = Instant::now();
            if listen {
                b.listens += 1;
            } else {
                b.inflight += 1;
            }
        }
        if listen {
            Metrics::add(&self.metrics.subscriptions, 1);
        } else {
            Metrics::add(&self.metrics.inflight, 1);
        }
        Ok(())
    }

    /// Withdraws a registered request without an answer (it could not be sent).
    pub fn unregister(&self, s: &Session, id: &Value) -> Option<Sink> {
        let p = s.inner.lock().ok()?.pending.remove(&IdKey::of(id))?;
        self.release(s, p.listen);
        Some(p.sink)
    }

    /// Gives back the bridge slot of a request that is no longer pending.
    fn release(&self, s: &Session, listen: bool) {
        if listen {
            if let Ok(mut b) = s.bridge.inner.lock() {
                b.listens = b.listens.saturating_sub(1);
            }
            Metrics::add(&self.metrics.subscriptions, -1);
            return;
        }
        if let Ok(mut b) = s.bridge.inner.lock() {
            b.inflight = b.inflight.saturating_sub(1);
            if b.active.is_none() {
                Metrics::add(&self.metrics.detached, -1);
            }
        }
        Metrics::add(&self.metrics.inflight, -1);
    }

    /// Sends a client message of session `s` to `link`, opening the session there first if
    /// needed. Open and message are queued in order under the session's lock.
    ///
    /// # Errors
    /// [`SendError::Busy`] when the link's queue is full or closed.
    pub fn send(&self, s: &Session, link: &Link, message: Value) -> Result<(), SendError> {
        let busy = || SendError::Busy(s.bridge.name.clone());
        let mut g = s.inner.lock().map_err(|_| busy())?;
        if g.ended {
            return Err(SendError::Ended);
        }
        g.last_active = Instant::now();
        if message.get("method").and_then(Value::as_str) == Some("notifications/initialized") {
            g.initialized = true;
            if g.opened_on.is_none() {
                // Sent with the open, whenever that happens.
                return Ok(());
            }
        }
        if s.call && g.opened_on.as_ref() != Some(&link.instance_id) {
            // A call is opened by its request and lives on that daemon instance only.
            if g.opened_on.is_some() {
                return Err(SendError::Ended);
            }
            link.tx
                .try_send(RelayFrame::Call {
                    sid: s.sid.clone(),
                    server: s.server.clone(),
                    principal: s.principal.id.clone(),
                    role: s.principal.role.as_str().to_owned(),
                    message,
                })
                .then_some(())
                .ok_or_else(busy)?;
            g.opened_on = Some(link.instance_id.clone());
            return Ok(());
        }
        if g.opened_on.as_ref() != Some(&link.instance_id) {
            link.tx
                .try_send(RelayFrame::Open {
                    sid: s.sid.clone(),
                    server: s.server.clone(),
                    principal: s.principal.id.clone(),
                    role: s.principal.role.as_str().to_owned(),
                    initialize: s.initialize.clone(),
                })
                .then_some(())
                .ok_or_else(busy)?;
            if g.initialized {
                link.tx
                    .try_send(RelayFrame::Rpc {
                        sid: s.sid.clone(),
                        message: json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
                    })
                    .then_some(())
                    .ok_or_else(busy)?;
            }
            g.opened_on = Some(link.instance_id.clone());
        }
        link.tx
            .try_send(RelayFrame::Rpc {
                sid: s.sid.clone(),
                message,
            })
            .then_some(())
            .ok_or_else(busy)
    }

    /// Queues a client notification or response for when the daemon is back.
    pub fn queue(&self, s: &Session, message: Value) -> bool {
        let Ok(mut g) = s.inner.lock() else {
            return false;
        };
        if g.outbox.len() >= OUTBOX_MAX {
            return false;
        }
        if message.get("method").and_then(Value::as_str) == Some("notifications/initialized") {
            g.initialized = true;
            return true;
        }
        g.outbox.push_back(message);
        true
    }

    /// The client cancelled request `id`: its stream ends without a response (the server sends
    /// none for a cancelled request).
    pub fn cancelled(&self, s: &Session, id: &Value) {
        let p = s
            .inner
            .lock()
            .ok()
            .and_then(|mut g| g.pending.remove(&IdKey::of(id)));
        if let Some(p) = p {
            self.finish_pending(s, p, None);
        }
    }

    // === daemon → client ===

    /// Routes daemon message `seq` of session `sid`. Returns false when the session is unknown.
    pub fn deliver(
        &self,
        sid: &SessionId,
        seq: u64,
        related: Option<&Value>,
        message: Value,
    ) -> bool {
        let Some(s) = self.session_by_sid(sid) else {
            self.metrics.unmatched.fetch_add(1, Ordering::Relaxed);
            return false;
        };
        let is_response = message.get("method").is_none()
            && (message.get("result").is_some() || message.get("error").is_some());
        let target = {
            let Ok(mut g) = s.inner.lock() else {
                return true;
            };
            if seq <= g.last_seq {
                return true; // a replayed duplicate
            }
            g.last_seq = seq;
            let is_request = !is_response
                && message.get("method").is_some()
                && message.get("id").is_some_and(|i| !i.is_null());
            if s.call && is_request {
                // MCP 2026-07-28 removed server → client requests (Basic › Transports ›
                // Streamable HTTP § Receiving Messages: input requests travel inside results).
                Target::Refuse(message.get("id").cloned().unwrap_or(Value::Null))
            } else if is_response {
                let key = message.get("id").map(IdKey::of);
                match key.and_then(|k| g.pending.remove(&k)) {
                    Some(p) => {
                        if let Some(t) = &p.progress_token {
                            g.progress.remove(t);
                        }
                        Target::Finish(p)
                    }
                    None => Target::Unmatched,
                }
            } else {
                let by_token = (message.get("method").and_then(Value::as_str)
                    == Some("notifications/progress"))
                .then(|| message.pointer("/params/progressToken").map(IdKey::of))
                .flatten()
                .and_then(|t| g.progress.get(&t).cloned());
                let key = by_token
                    .or_else(|| related.map(IdKey::of).filter(|k| g.pending.contains_key(k)))
                    .or_else(|| {
                        (g.pending.len() == 1)
                            .then(|| g.pending.keys().next().cloned())
                            .flatten()
                    });
                match key.and_then(|k| g.pending.get(&k)) {
                    Some(Pending {
                        sink: Sink::Stream(st),
                        ..
                    }) => Target::Stream(st.clone()),
                    // A call's client reads only its request's response (no standalone stream).
                    _ if s.call => Target::Unmatched,
                    _ => Target::Standalone,
                }
            }
        };
        match target {
            Target::Finish(p) => self.finish_pending(&s, p, Some(message)),
            Target::Stream(st) => {
                if !st.push(&message, false) {
                    s.standalone.push(&message, false);
                }
            }
            Target::Standalone => {
                s.standalone.push(&message, false);
            }
            Target::Unmatched => {
                self.metrics.unmatched.fetch_add(1, Ordering::Relaxed);
            }
            Target::Refuse(id) => {
                let method = message.get("method").and_then(Value::as_str).unwrap_or("");
                tracing::warn!(bridge = %s.bridge.name, method, "refused a server-to-client request to an MCP 2026-07-28 client");
                if let Some(link) = s.bridge.active() {
                    let _ = self.send(
                        &s,
                        &link,
                        jsonrpc::error(
                            &id,
                            code::METHOD_NOT_FOUND,
                            &format!("{method}: the client speaks MCP 2026-07-28, which has no server-to-client requests"),
                            None,
                        ),
                    );
                }
            }
        }
        true
    }

    // === daemon links ===

    /// Stores a verified daemon's catalog.
    pub async fn set_catalog(&self, bridge: &Bridge, servers: Vec<ServerInfo>) {
        if let Ok(text) = serde_json::to_string(&servers)
            && let Err(e) = self.storage.set_catalog(&bridge.name, &text).await
        {
            tracing::warn!(bridge = %bridge.name, error = %e, "could not store the daemon catalog");
        }
        let cat = self.texts.catalog(servers);
        if let Ok(mut g) = bridge.inner.lock() {
            g.catalog = Some(Arc::new(cat));
        }
    }

    /// What the `resume` frame names for `instance`: the sessions opened on it and their
    /// in-flight requests, if this bridge's sessions are bound to that instance.
    pub fn resume_set(
        &self,
        bridge: &Bridge,
        instance: &InstanceId,
    ) -> (Vec<SessionId>, Vec<ResumeRequest>) {
        let bound = bridge
            .inner
            .lock()
            .ok()
            .and_then(|g| g.bound_instance.clone());
        if bound.as_ref() != Some(instance) {
            return (Vec::new(), Vec::new());
        }
        let mut sessions = Vec::new();
        let mut requests = Vec::new();
        let all = self.bridge_sessions(&bridge.name);
        for s in all {
            if let Ok(g) = s.inner.lock()
                && g.opened_on.as_ref() == Some(instance)
            {
                sessions.push(s.sid.clone());
                for p in g.pending.values() {
                    requests.push(ResumeRequest {
                        sid: s.sid.clone(),
                        id: RequestId::new(p.id.clone()),
                    });
                }
            }
        }
        (sessions, requests)
    }

    /// Makes `link` the bridge's active daemon (after `ready`): closes the incumbent, rebinds
    /// the bound sessions when it is the same instance or ends them when it is a new one, and
    /// flushes client messages queued while the daemon was away. Returns the replaced link.
    pub fn promote(&self, bridge: &Arc<Bridge>, link: Link) -> Option<Link> {
        // A new instance inherits nothing: end the previous instance's sessions before the new
        // link is visible, so no request can slip onto it in between.
        let restarted = bridge.inner.lock().ok().and_then(|g| {
            g.bound_instance
                .as_ref()
                .filter(|b| **b != link.instance_id)
                .cloned()
        });
        if let Some(old_instance) = restarted {
            self.end_bound(
                &bridge.name,
                &old_instance,
                "the machine's daemon restarted; the outcome of this request is unknown (it may have had effects): check before retrying",
            );
        }
        let (old, rebound) = {
            let Ok(mut g) = bridge.inner.lock() else {
                return None;
            };
            let rebound = g.bound_instance.is_some();
            let old = g.active.replace(link.clone());
            if g.detached_at.take().is_some() {
                Metrics::add(&self.metrics.detached, -(g.inflight as i64));
            }
            g.bound_instance = Some(link.instance_id.clone());
            (old, rebound)
        };
        if old.is_some() || rebound {
            self.metrics.reconnects.fetch_add(1, Ordering::Relaxed);
        }
        bridge.ready.send_replace(Some(link.clone()));
        self.flush_outboxes(bridge, &link);
        old
    }

    fn flush_outboxes(&self, bridge: &Bridge, link: &Link) {
        let all = self.bridge_sessions(&bridge.name);
        for s in all {
            let queued: Vec<Value> = s
                .inner
                .lock()
                .map(|mut g| g.outbox.drain(..).collect())
                .unwrap_or_default();
            for m in queued {
                if self.send(&s, link, m).is_err() {
                    tracing::warn!(bridge = %bridge.name, "a queued client message could not be sent");
                }
            }
        }
    }

    /// The socket `link_id` of `bridge` is gone: detach its sessions for the reconnect grace.
    pub fn link_lost(&self, bridge: &Bridge, link_id: u64) {
        if let Ok(mut g) = bridge.inner.lock()
            && g.active.as_ref().is_some_and(|l| l.id == link_id)
        {
            g.active = None;
            g.detached_at = Some(Instant::now());
            Metrics::add(&self.metrics.detached, g.inflight as i64);
            bridge.ready.send_replace(None);
        }
    }

    /// The daemon ended session `sid`.
    pub fn daemon_closed(&self, sid: &SessionId, reason: &str) {
        self.end_session(
            sid,
            code::UNAVAILABLE,
            &format!("the server ended the session: {reason}"),
            false,
        );
    }

    /// The live sessions of the bridge named `bridge` (a snapshot; the map lock is released).
    fn bridge_sessions(&self, bridge: &str) -> Vec<Arc<Session>> {
        self.sessions
            .lock()
            .map(|m| {
                m.values()
                    .filter(|s| s.bridge.name == bridge)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    fn end_bound(&self, bridge: &str, instance: &InstanceId, message: &str) {
        tracing::debug!(bridge, %instance, "ending the sessions of a daemon instance");
        let victims: Vec<SessionId> = self
            .bridge_sessions(bridge)
            .into_iter()
            .filter(|s| {
                s.inner
                    .lock()
                    .map(|g| g.opened_on.as_ref() == Some(instance))
                    .unwrap_or(false)
            })
            .map(|s| s.sid.clone())
            .collect();
        for sid in victims {
            self.end_session(&sid, code::OUTCOME_UNKNOWN, message, false);
        }
    }

    /// Periodic work: grace expiry, request deadlines, idle sessions, stream retention.
    pub fn sweep(&self) {
        let now = Instant::now();
        let grace = self.config.timing.reconnect_grace;
        let bridges: Vec<Arc<Bridge>> = self
            .bridges
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        for b in bridges {
            let expired = b.inner.lock().ok().and_then(|mut g| {
                let over = g
                    .detached_at
                    .is_some_and(|t| now.duration_since(t) >= grace);
                if over {
                    g.detached_at = None;
                    Metrics::add(&self.metrics.detached, -(g.inflight as i64));
                    g.bound_instance.take()
                } else {
                    None
                }
            });
            if let Some(instance) = expired {
                tracing::warn!(bridge = %b.name, "the daemon did not come back within the reconnect grace; ending its sessions");
                self.end_bound(
                    &b.name,
                    &instance,
                    "the machine's daemon did not reconnect in time; the outcome of this request is unknown (it may have had effects)",
                );
            }
        }
        let sessions: Vec<Arc<Session>> = self
            .sessions
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        for s in sessions {
            let (late, idle) = match s.inner.lock() {
                Ok(mut g) => {
                    let keys: Vec<IdKey> = g
                        .pending
                        .iter()
                        .filter(|(_, p)| p.deadline <= now)
                        .map(|(k, _)| k.clone())
                        .collect();
                    let late: Vec<Pending> =
                        keys.iter().filter_map(|k| g.pending.remove(k)).collect();
                    (
                        late,
                        g.pending.is_empty() && now.duration_since(g.last_active) > SESSION_IDLE,
                    )
                }
                Err(_) => continue,
            };
            let (ended_listens, late): (Vec<Pending>, Vec<Pending>) =
                late.into_iter().partition(|p| p.listen);
            for p in ended_listens {
                // Graceful closure (MCP 2026-07-28 Basic › Patterns › Subscriptions).
                let done = json!({"jsonrpc": "2.0", "id": p.id, "result": {"resultType": "complete",
                    "_meta": {"io.modelcontextprotocol/subscriptionId": p.id}}});
                if let Some(link) = s.bridge.active() {
                    let _ = self.send(
                        &s,
                        &link,
                        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                               "params": {"requestId": p.id, "reason": "the subscription reached its longest lifetime"}}),
                    );
                }
                self.finish_pending(&s, p, Some(done));
            }
            for p in &late {
                if let Some(link) = s.bridge.active() {
                    let _ = self.send(
                        &s,
                        &link,
                        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                               "params": {"requestId": p.id, "reason": "the relay's deadline passed"}}),
                    );
                }
            }
            self.settle_all(
                &s,
                late,
                code::UNAVAILABLE,
                "the request ran past the longest allowed execution time (600 s)",
            );
            if idle {
                self.end_session(&s.sid, code::UNAVAILABLE, "idle session", true);
            } else if s.call {
                self.close_if_answered(&s.sid);
            }
        }
        self.streams.sweep();
    }
}

enum Target {
    Finish(Pending),
    Stream(Arc<Stream>),
    Standalone,
    Unmatched,
    /// A server → client request to a call: answered with an error, never delivered.
    Refuse(Value),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(tools: Value) -> ServerInfo {
        ServerInfo {
            name: "machine".into(),
            initialize: json!({"protocolVersion": "2025-11-25"}),
            discover: None,
            tools: [
                ("owner".to_owned(), tools.clone()),
                ("reviewer".to_owned(), tools),
            ]
            .into_iter()
            .collect(),
        }
    }

    #[test]
    fn identical_catalogs_share_their_text_and_unused_text_is_dropped() {
        let cache = TextCache::default();
        let tools = json!({"tools": [{"name": "read_file", "inputSchema": {"type": "object"}}]});
        let a = cache.catalog(vec![server(tools.clone())]);
        let b = cache.catalog(vec![server(tools.clone())]);
        assert!(Arc::ptr_eq(
            &a["machine"].tools["owner"],
            &b["machine"].tools["owner"]
        ));
        assert!(Arc::ptr_eq(
            &a["machine"].tools["owner"],
            &a["machine"].tools["reviewer"]
        ));
        assert_eq!(a["machine"].tools_for("reviewer"), Some(tools));
        assert_eq!(a["machine"].initialize()["protocolVersion"], "2025-11-25");
        drop((a, b));
        cache.intern(&json!("something else"));
        assert_eq!(
            cache.0.lock().unwrap().len(),
            1,
            "only the new text is left"
        );
    }
}
