//! MCP sessions hosted for the relay: one per `sid`, each the built-in runtime (an rmcp
//! [`McpServer`] over a channel transport) or an upstream child process.
//!
//! Outbound messages get a per-session sequence number and are retained until the relay
//! acknowledges them (`ack`), so a same-instance reconnect can replay what the relay may not have
//! committed (DESIGN §5 steps 5 and 8). A message is sent on the current link only when its
//! session has been attached to that link's epoch — after replaying its older messages — so
//! sequence numbers reach the relay in order. The response to the `initialize` a session was
//! opened with is swallowed: the relay already answered it.
//!
//! A `call` (link revision 2) is one MCP 2026-07-28 request without a session (MCP 2026-07-28
//! Basic › Transports: every request carries its version and capabilities in `_meta`). It is
//! hosted like a session under its relay-assigned `sid` — same sequence numbers, retention,
//! acknowledgement and replay on `resume` — and ends with its response: the server behind it
//! stops at once, the retained response is dropped when the relay acknowledges it (or closes the
//! sid). The runtime serves it through rmcp's inline lifecycle (no `initialize`); an upstream
//! server of the old era serves it through the era bridge ([`crate::bridge`]).

use std::{
    collections::{HashMap, HashSet, VecDeque},
    sync::{Arc, Mutex},
};

use rmcp::{
    RoleServer, ServiceExt,
    model::{ClientJsonRpcMessage, GetExtensions, JsonRpcMessage, ServerJsonRpcMessage},
    service::OriginatingRequestId,
    transport::Transport,
};
use runtime::{McpServer, Principal, Runtime};
use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    sync::mpsc,
};
use tokio_util::sync::CancellationToken;

use protocol::{
    Role,
    error_code::ToolErrorCode,
    frame::{DaemonFrame, RUNTIME_SERVER, ResumeRequest},
    ids::SessionId,
    jsonrpc::{self, IdKey, code},
    limits::RELAY_FRAME_MAX_BYTES,
    tool_error::ToolError,
};

use crate::{
    bridge,
    servers::{self, UpstreamSpec},
};

/// Bytes of unacknowledged output kept per session; beyond it the oldest is dropped (and logged).
const RETAINED_MAX_BYTES: usize = 64 * 1024 * 1024;
/// Client messages queued for one session's server.
const INBOUND_QUEUE: usize = 256;
/// Sessions (and calls) one daemon hosts at once; an `open` beyond it is answered with `closed`,
/// a `call` with a retryable JSON-RPC error.
const MAX_SESSIONS: usize = 256;

#[derive(Debug, Default)]
struct Retention {
    next_seq: u64,
    unacked: VecDeque<(u64, Option<Value>, Value, usize)>,
    bytes: usize,
    /// Link epoch this session's output is being sent on (0 = none).
    epoch: u64,
    swallow: Option<IdKey>,
    /// A call's output is complete (its response was emitted, or it was cancelled): nothing more
    /// is emitted.
    ended: bool,
    /// The sequence number of a call's response.
    done_seq: Option<u64>,
}

enum Input {
    Runtime(mpsc::Sender<ClientJsonRpcMessage>),
    Upstream(mpsc::Sender<String>),
    /// A call answered by the daemon or bridged to a pooled upstream session: it takes no
    /// further client messages (its cancellation ends it through `stop`).
    None,
}

/// The request a call host serves.
struct CallOf {
    id: Value,
    key: IdKey,
}

/// One hosted session.
pub(crate) struct Host {
    sid: SessionId,
    role: Role,
    upstream_tools: Option<Arc<HashSet<String>>>,
    input: Input,
    out: Mutex<Retention>,
    /// Client requests forwarded and not yet answered: key → (id, method).
    inflight: Mutex<HashMap<IdKey, (Value, String)>>,
    stop: CancellationToken,
    /// Set when this host serves one `call` instead of a session.
    call: Option<CallOf>,
}

impl Host {
    /// The session or call id.
    pub(crate) fn sid_str(&self) -> &str {
        self.sid.as_str()
    }

    /// Resolves once this session or call has ended (for a call: answered or cancelled).
    pub(crate) async fn stopped(&self) {
        self.stop.cancelled().await;
    }
}

/// Current link: its epoch and frame sender.
#[derive(Default)]
struct LinkSlot {
    epoch: u64,
    tx: Option<mpsc::Sender<DaemonFrame>>,
    /// Cancelled when a session message could not be queued on the link ([`HostedSessions::
    /// link_broken`]).
    broken: CancellationToken,
}

/// All sessions (and calls) this daemon instance hosts for the relay.
pub struct HostedSessions {
    hosts: Mutex<HashMap<SessionId, Arc<Host>>>,
    link: Mutex<LinkSlot>,
    runtime: Arc<Runtime>,
    upstreams: HashMap<String, (UpstreamSpec, Arc<HashSet<String>>)>,
    pool: bridge::Pool,
}

impl std::fmt::Debug for HostedSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostedSessions").finish_non_exhaustive()
    }
}

impl HostedSessions {
    /// Hosts sessions of `runtime` and of `upstreams` (with the names of their read-only tools).
    pub fn new(
        runtime: Arc<Runtime>,
        upstreams: Vec<(UpstreamSpec, HashSet<String>)>,
    ) -> Arc<Self> {
        Self::with_pool(runtime, upstreams, bridge::Pool::default())
    }

    fn with_pool(
        runtime: Arc<Runtime>,
        upstreams: Vec<(UpstreamSpec, HashSet<String>)>,
        pool: bridge::Pool,
    ) -> Arc<Self> {
        Arc::new(Self {
            hosts: Mutex::new(HashMap::new()),
            link: Mutex::new(LinkSlot::default()),
            runtime,
            upstreams: upstreams
                .into_iter()
                .map(|(s, t)| (s.name.clone(), (s, Arc::new(t))))
                .collect(),
            pool,
        })
    }

    /// Opens session `sid` (a second open of the same sid is ignored).
    pub fn open(
        self: &Arc<Self>,
        sid: &SessionId,
        server: &str,
        principal: &str,
        role: &str,
        initialize: Value,
    ) {
        match self.hosts.lock() {
            Ok(h) if h.contains_key(sid) => return,
            Ok(h) if h.len() >= MAX_SESSIONS => {
                drop(h);
                self.send_closed(
                    sid,
                    &format!("this daemon already hosts {MAX_SESSIONS} sessions"),
                );
                return;
            }
            Ok(_) => {}
            Err(_) => return,
        }
        let stop = CancellationToken::new();
        let swallow = initialize.get("id").map(IdKey::of);
        let host = if server == RUNTIME_SERVER {
            let (tx, rx) = mpsc::channel(INBOUND_QUEUE);
            let host = Arc::new(Host {
                sid: sid.clone(),
                role: crate::role_named(role),
                upstream_tools: None,
                input: Input::Runtime(tx),
                out: Mutex::new(Retention {
                    swallow,
                    ..Default::default()
                }),
                inflight: Mutex::new(HashMap::new()),
                stop: stop.clone(),
                call: None,
            });
            let access = self.runtime.access(Some(crate::role_profile(host.role)));
            let server = McpServer::new(access, Principal::named(principal));
            let transport = ChannelTransport {
                rx,
                host: host.clone(),
                sessions: self.clone(),
            };
            let sessions = self.clone();
            let h = host.clone();
            tokio::spawn(async move {
                tokio::select! {
                    r = server.serve(transport) => {
                        if let Ok(running) = r {
                            tokio::select! {
                                _ = running.waiting() => {}
                                _ = h.stop.cancelled() => {}
                            }
                        }
                    }
                    _ = h.stop.cancelled() => {}
                }
                sessions.ended(&h.sid, "the session ended");
            });
            host
        } else {
            let Some((spec, read_only)) = self.upstreams.get(server) else {
                self.send_closed(sid, &format!("no server {server:?} on this daemon"));
                return;
            };
            let child = match servers::spawn(spec) {
                Ok(c) => c,
                Err(e) => {
                    self.send_closed(sid, &format!("cannot start {}: {e}", spec.command));
                    return;
                }
            };
            let (tx, rx) = mpsc::channel(INBOUND_QUEUE);
            let host = Arc::new(Host {
                sid: sid.clone(),
                role: crate::role_named(role),
                upstream_tools: Some(read_only.clone()),
                input: Input::Upstream(tx),
                out: Mutex::new(Retention {
                    swallow,
                    ..Default::default()
                }),
                inflight: Mutex::new(HashMap::new()),
                stop: stop.clone(),
                call: None,
            });
            tokio::spawn(run_upstream(
                self.clone(),
                host.clone(),
                child,
                rx,
                spec.name.clone(),
            ));
            host
        };
        if let Ok(mut h) = self.hosts.lock() {
            h.insert(sid.clone(), host.clone());
        }
        self.attach_host(&host);
        self.rpc(sid, initialize);
    }

    /// A client message for session `sid`.
    pub fn rpc(self: &Arc<Self>, sid: &SessionId, message: Value) {
        let Some(host) = self.host(sid) else {
            self.send_closed(
                sid,
                "unknown session (the daemon restarted or the session ended)",
            );
            return;
        };
        let method = message
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let id = message.get("id").cloned();
        if let Some(c) = &host.call {
            // A call takes no client message but the cancellation of its request.
            if method.as_deref() == Some("notifications/cancelled")
                && message.pointer("/params/requestId").map(IdKey::of).as_ref() == Some(&c.key)
            {
                tracing::debug!(%sid, "call cancelled by the client");
                self.end_call(&host);
                if let Ok(mut m) = self.hosts.lock() {
                    m.remove(sid);
                }
            } else {
                tracing::debug!(%sid, ?method, "ignoring a client message for a call");
            }
            return;
        }
        if let (Some(m), Some(id)) = (&method, &id) {
            if let Some(denied) = denial(&host, &message) {
                self.emit(&host, denied, None);
                return;
            }
            if let Ok(mut f) = host.inflight.lock() {
                f.insert(IdKey::of(id), (id.clone(), m.clone()));
            }
        }
        if method.as_deref() == Some("notifications/cancelled")
            && let Some(rid) = message.pointer("/params/requestId")
            && let Ok(mut f) = host.inflight.lock()
        {
            f.remove(&IdKey::of(rid));
        }
        match &host.input {
            Input::Runtime(tx) => match serde_json::from_value::<ClientJsonRpcMessage>(message) {
                Ok(m) => {
                    if tx.try_send(m).is_err() {
                        tracing::warn!(sid = %sid.log_tag(), "session input queue full; message dropped");
                    }
                }
                Err(e) => {
                    if let Some(id) = id {
                        self.emit(
                            &host,
                            jsonrpc::error(
                                &id,
                                code::INVALID_REQUEST,
                                &format!("invalid message: {e}"),
                                None,
                            ),
                            None,
                        );
                    }
                }
            },
            Input::Upstream(tx) => {
                if tx.try_send(message.to_string()).is_err() {
                    tracing::warn!(sid = %sid.log_tag(), "upstream input queue full; message dropped");
                }
            }
            Input::None => {}
        }
    }

    /// The relay committed session `sid`'s messages up to `seq`.
    pub fn ack(&self, sid: &SessionId, seq: u64) {
        if let Some(h) = self.host(sid)
            && let Ok(mut r) = h.out.lock()
        {
            while r.unacked.front().is_some_and(|(s, ..)| *s <= seq) {
                if let Some((.., n)) = r.unacked.pop_front() {
                    r.bytes -= n;
                }
            }
            if r.done_seq.is_some_and(|d| d <= seq) {
                drop(r);
                if let Ok(mut m) = self.hosts.lock() {
                    m.remove(sid);
                }
            }
        }
    }

    /// Ends session or call `sid` (its server is stopped; an unanswered call is cancelled, and
    /// for an answered one this only drops its retained response).
    pub fn close(&self, sid: &SessionId) {
        if let Some(h) = self.hosts.lock().ok().and_then(|mut m| m.remove(sid)) {
            self.end_call(&h);
            h.stop.cancel();
        }
    }

    /// Serves call `sid`: one MCP 2026-07-28 request `message` to `server` for `principal` with
    /// `role` (link revision 2, `call` frame). Its output goes out as `rpc` frames of `sid`,
    /// the response last. The runtime gets the same authority as a session of `open` (the
    /// role's profile intersected with the daemon policy); an upstream is reached through a
    /// pooled legacy session of (`server`, `principal`) with the role filtering of sessions.
    /// A second call with the same sid is ignored.
    pub fn call(
        self: &Arc<Self>,
        sid: &SessionId,
        server: &str,
        principal: &str,
        role: &str,
        message: Value,
    ) {
        let (Some(id), Some(method)) = (
            message.get("id").cloned(),
            message
                .get("method")
                .and_then(Value::as_str)
                .map(str::to_owned),
        ) else {
            tracing::warn!(sid = %sid.log_tag(), "a call frame without a request; ignored");
            return;
        };
        let full = match self.hosts.lock() {
            Ok(h) if h.contains_key(sid) => return,
            Ok(h) => h.len() >= MAX_SESSIONS,
            Err(_) => return,
        };
        let runtime = server == RUNTIME_SERVER;
        let upstream = (!runtime)
            .then(|| self.upstreams.get(server).cloned())
            .flatten();
        let (input, rx) = if runtime && !full {
            let (tx, rx) = mpsc::channel(INBOUND_QUEUE);
            (Input::Runtime(tx), Some(rx))
        } else {
            (Input::None, None)
        };
        let host = Arc::new(Host {
            sid: sid.clone(),
            role: crate::role_named(role),
            upstream_tools: upstream.as_ref().map(|(_, ro)| ro.clone()),
            input,
            out: Mutex::new(Retention::default()),
            inflight: Mutex::new(HashMap::from([(
                IdKey::of(&id),
                (id.clone(), method.clone()),
            )])),
            stop: CancellationToken::new(),
            call: Some(CallOf {
                key: IdKey::of(&id),
                id: id.clone(),
            }),
        });
        if let Ok(mut h) = self.hosts.lock() {
            h.insert(sid.clone(), host.clone());
        }
        self.attach_host(&host);
        let immediate = if full {
            Some(bridge::error(
                &id,
                code::INTERNAL_ERROR,
                &format!(
                    "this daemon already serves {MAX_SESSIONS} sessions and calls; retry later"
                ),
                Some(json!({"retryable": true})),
            ))
        } else if method == "initialize" {
            Some(bridge::error(
                &id,
                code::INVALID_REQUEST,
                "initialize opens a session; it cannot be sent as a single 2026-07-28 request",
                None,
            ))
        } else if !runtime && upstream.is_none() {
            Some(bridge::error(
                &id,
                code::INVALID_PARAMS,
                &format!("no server {server:?} on this daemon"),
                None,
            ))
        } else {
            None
        };
        if let Some(e) = immediate {
            self.emit(&host, e, None);
            return;
        }
        if let Some(rx) = rx {
            self.serve_runtime_call(&host, rx, principal, message);
            return;
        }
        let Some((spec, _)) = upstream else { return };
        if let Err(e) = bridge::check_meta(&message) {
            self.emit(&host, e, None);
            return;
        }
        if let Some(mut denied) = denial(&host, &message) {
            if let Some(r) = denied.get_mut("result") {
                bridge::complete_result(&method, r);
            }
            self.emit(&host, denied, None);
            return;
        }
        let sessions = self.clone();
        let principal = principal.to_owned();
        tokio::spawn(async move {
            let legacy = tokio::select! {
                l = sessions.pool.get(&sessions, &spec, &principal) => l,
                _ = host.stop.cancelled() => return,
            };
            match legacy {
                Ok(l) => l.submit(&sessions, &host, message),
                Err(e) => sessions.emit(
                    &host,
                    bridge::error(
                        &id,
                        code::INTERNAL_ERROR,
                        &e,
                        Some(json!({"retryable": true})),
                    ),
                    None,
                ),
            }
        });
    }

    /// Serves a runtime call through an [`McpServer`] over a [`ChannelTransport`], with no
    /// `initialize`: rmcp's inline lifecycle answers `server/discover`, rejects a request whose
    /// `_meta` lacks the required fields, and otherwise serves the request in the 2026-07-28 era.
    fn serve_runtime_call(
        self: &Arc<Self>,
        host: &Arc<Host>,
        rx: mpsc::Receiver<ClientJsonRpcMessage>,
        principal: &str,
        message: Value,
    ) {
        let access = self.runtime.access(Some(crate::role_profile(host.role)));
        let server = McpServer::new(access, Principal::named(principal));
        let transport = ChannelTransport {
            rx,
            host: host.clone(),
            sessions: self.clone(),
        };
        let sessions = self.clone();
        let h = host.clone();
        tokio::spawn(async move {
            tokio::select! {
                r = server.serve(transport) => {
                    if let Ok(running) = r {
                        tokio::select! {
                            _ = running.waiting() => {}
                            _ = h.stop.cancelled() => {}
                        }
                    }
                }
                _ = h.stop.cancelled() => {}
            }
            let id = h.call.as_ref().map(|c| c.id.clone()).unwrap_or(Value::Null);
            sessions.emit(
                &h,
                bridge::error(
                    &id,
                    code::INTERNAL_ERROR,
                    "the server ended before answering",
                    None,
                ),
                None,
            );
        });
        let id = host
            .call
            .as_ref()
            .map(|c| c.id.clone())
            .unwrap_or(Value::Null);
        match (
            serde_json::from_value::<ClientJsonRpcMessage>(message),
            &host.input,
        ) {
            (Ok(m), Input::Runtime(tx)) => {
                let _ = tx.try_send(m);
            }
            (Err(e), _) => self.emit(
                host,
                bridge::error(
                    &id,
                    code::INVALID_REQUEST,
                    &format!("invalid message: {e}"),
                    None,
                ),
                None,
            ),
            _ => {}
        }
    }

    /// Marks a call's output complete (nothing more is emitted) and stops what serves it.
    fn end_call(&self, h: &Host) {
        if h.call.is_some() {
            if let Ok(mut r) = h.out.lock() {
                r.ended = true;
            }
            h.stop.cancel();
        }
    }

    /// Ends every session.
    pub fn close_all(&self) {
        let all: Vec<Arc<Host>> = self
            .hosts
            .lock()
            .map(|mut m| m.drain().map(|(_, h)| h).collect())
            .unwrap_or_default();
        for h in all {
            self.end_call(&h);
            h.stop.cancel();
        }
        self.pool.close_all();
    }

    /// Client requests forwarded to hosted sessions and calls and not yet answered.
    pub fn requests_in_flight(&self) -> usize {
        self.host_list()
            .iter()
            .map(|h| h.inflight.lock().map(|f| f.len()).unwrap_or(0))
            .sum()
    }

    /// Messages sent to the relay and not yet acknowledged (results among them), summed over
    /// the hosted sessions and calls: what a new process could not replay.
    pub fn unacknowledged(&self) -> usize {
        self.host_list()
            .iter()
            .map(|h| h.out.lock().map(|r| r.unacked.len()).unwrap_or(0))
            .sum()
    }

    /// The hosted sessions and calls now (a snapshot, so no lock is held while each is read).
    fn host_list(&self) -> Vec<Arc<Host>> {
        self.hosts
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Hosted sessions and single calls: `(sessions, calls)`.
    pub fn counts(&self) -> (usize, usize) {
        self.hosts
            .lock()
            .map(|m| {
                let calls = m.values().filter(|h| h.call.is_some()).count();
                (m.len() - calls, calls)
            })
            .unwrap_or((0, 0))
    }

    /// Sessions hosted.
    pub fn len(&self) -> usize {
        self.hosts.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// Whether no session is hosted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Cancelled once a session message could not be queued on the current link (its queue was
    /// full): acknowledgement is cumulative, so the relay acknowledging a later message would
    /// make the daemon forget the one that did not fit. That session sends nothing more on the
    /// link; the link owner lets the queue drain (so what was queued is written and
    /// acknowledged: each reconnect makes progress) and then reconnects, and the next `resume`
    /// sends every unacknowledged message again.
    pub fn link_broken(&self) -> CancellationToken {
        self.link
            .lock()
            .map(|l| l.broken.clone())
            .unwrap_or_default()
    }

    /// Queues `frame` on the current link (`tx`). Returns false when it does not fit: the
    /// link is then marked broken ([`Self::link_broken`]), and the caller stops sending that
    /// session's messages on it (they stay unacknowledged, for the next link).
    fn send_on(&self, tx: &mpsc::Sender<DaemonFrame>, frame: DaemonFrame) -> bool {
        match tx.try_send(frame) {
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!(
                    "the relay link's send queue is full; reconnecting once it drains, to send the rest again"
                );
                if let Ok(l) = self.link.lock() {
                    l.broken.cancel();
                }
                false
            }
            _ => true,
        }
    }

    /// The link is gone: keep everything, send nothing until a link is resumed.
    pub fn detach(&self) {
        if let Ok(mut l) = self.link.lock() {
            l.tx = None;
        }
    }

    /// A new link is ready after `resume`: sessions not in `keep` are ended, in-flight requests
    /// of kept sessions not in `keep_requests` are cancelled, and each kept session's unacknowledged
    /// output is replayed on `tx` before anything new. A call is kept when its sid is in `keep`
    /// or its request in `keep_requests`; otherwise it is cancelled (or, answered, forgotten).
    pub fn resume(
        self: &Arc<Self>,
        keep: &[SessionId],
        keep_requests: &[ResumeRequest],
        tx: mpsc::Sender<DaemonFrame>,
    ) {
        let keep: HashSet<&SessionId> = keep.iter().collect();
        let keep_req: HashSet<(SessionId, IdKey)> = keep_requests
            .iter()
            .map(|r| (r.sid.clone(), r.id.key()))
            .collect();
        if let Ok(mut l) = self.link.lock() {
            l.epoch += 1;
            l.tx = Some(tx);
            l.broken = CancellationToken::new();
        }
        for h in self.host_list() {
            if let Some(c) = &h.call {
                if keep.contains(&h.sid) || keep_req.contains(&(h.sid.clone(), c.key.clone())) {
                    self.attach_host(&h);
                } else {
                    tracing::info!(sid = %h.sid.log_tag(), "ending a call the relay no longer awaits");
                    self.close(&h.sid);
                }
                continue;
            }
            if !keep.contains(&h.sid) {
                tracing::info!(sid = %h.sid.log_tag(), "ending a session the relay no longer awaits");
                self.close(&h.sid);
                continue;
            }
            let stale: Vec<Value> = h
                .inflight
                .lock()
                .map(|f| {
                    f.iter()
                        .filter(|(k, _)| !keep_req.contains(&(h.sid.clone(), (*k).clone())))
                        .map(|(_, (id, _))| id.clone())
                        .collect()
                })
                .unwrap_or_default();
            for id in stale {
                self.rpc(
                    &h.sid,
                    jsonrpc::cancelled(&id, "the relay no longer awaits this request"),
                );
            }
            self.attach_host(&h);
        }
        self.answer_unheld(&keep, keep_requests);
    }

    /// Answers each request of `listed` this daemon does not hold — not in flight, and no
    /// retained response for it — so that the relay never waits out its deadline for an answer
    /// that cannot come. A listed request of a kept session gets JSON-RPC
    /// [`code::OUTCOME_UNKNOWN`] (the daemon cannot tell "never arrived" from "its record is
    /// gone", so it claims neither); a listed session or call this daemon does not host is
    /// reported with a `closed` frame, which the relay turns into an error for its requests (and
    /// a 404 for the session's next request), as is a listed session (`sessions`) it does not
    /// host.
    fn answer_unheld(&self, sessions: &HashSet<&SessionId>, listed: &[ResumeRequest]) {
        let mut closed: HashSet<&SessionId> = HashSet::new();
        for sid in sessions {
            if self.host(sid).is_none() && closed.insert(sid) {
                tracing::info!(sid = %sid.log_tag(), "the relay keeps a session this daemon does not host");
                self.send_closed(
                    sid,
                    "this daemon holds no session with this id (it ended while the relay was away)",
                );
            }
        }
        for r in listed {
            let Some(h) = self.host(&r.sid) else {
                if closed.insert(&r.sid) {
                    tracing::info!(sid = %r.sid.log_tag(), "the relay awaits a session or call this daemon does not host");
                    self.send_closed(
                        &r.sid,
                        "this daemon holds no session or call with this id (it ended, or never arrived)",
                    );
                }
                continue;
            };
            if h.call.is_some() {
                // A call host holds its one request until its response is acknowledged.
                continue;
            }
            let key = r.id.key();
            // Under `out`, as `emit` moves a request from `inflight` to `unacked`.
            let held = h.out.lock().is_ok_and(|o| {
                h.inflight.lock().is_ok_and(|f| f.contains_key(&key))
                    || o.unacked.iter().any(|(_, _, m, _)| {
                        m.get("method").is_none()
                            && m.get("id").is_some_and(|id| IdKey::of(id) == key)
                    })
            });
            if held {
                continue;
            }
            tracing::info!(sid = %h.sid.log_tag(), "the relay awaits a request this daemon does not hold; answering it with an error");
            let id = r.id.as_value().clone();
            let message = jsonrpc::error(
                &id,
                code::OUTCOME_UNKNOWN,
                "the daemon holds no record of this request: it never arrived, or its record was \
                 lost; its outcome is unknown, so check its effects before retrying",
                Some(json!({"retryable": false, "delivered": "unknown"})),
            );
            self.emit(&h, message, Some(id));
        }
    }

    /// Replays `h`'s unacknowledged output on the current link and attaches it to its epoch.
    fn attach_host(&self, h: &Host) {
        let (epoch, tx) = match self.link.lock() {
            Ok(l) => (l.epoch, l.tx.clone()),
            Err(_) => return,
        };
        let Some(tx) = tx else { return };
        let Ok(mut r) = h.out.lock() else { return };
        for (seq, related, message, _) in &r.unacked {
            let sent = self.send_on(
                &tx,
                DaemonFrame::Rpc {
                    sid: h.sid.clone(),
                    seq: *seq,
                    related: related.clone(),
                    message: message.clone(),
                },
            );
            if !sent {
                // Not attached: nothing more of it goes on this link, so nothing later can be
                // acknowledged past what did not fit; the next link replays the rest.
                return;
            }
        }
        r.epoch = epoch;
    }

    fn host(&self, sid: &SessionId) -> Option<Arc<Host>> {
        self.hosts.lock().ok()?.get(sid).cloned()
    }

    /// A server message of session or call `h`.
    pub(crate) fn emit(&self, h: &Host, mut message: Value, mut related: Option<Value>) {
        let is_response = message.get("method").is_none();
        if let Some(c) = &h.call
            && !is_response
            && related.is_none()
        {
            // Everything a call's server sends belongs to its one request.
            related = Some(c.id.clone());
        }
        // The request leaves `inflight` and its response enters `unacked` under the one `out`
        // lock (order: `out`, then `inflight`), so a `resume` (`answer_unheld`) always finds it
        // in one of them.
        let Ok(mut r) = h.out.lock() else { return };
        let mut method = None;
        if is_response && let Some(id) = message.get("id") {
            let key = IdKey::of(id);
            method = h
                .inflight
                .lock()
                .ok()
                .and_then(|mut f| f.remove(&key))
                .map(|(_, m)| m);
            if h.upstream_tools.is_some()
                && method.as_deref() == Some("tools/list")
                && let Some(result) = message.get("result")
            {
                message["result"] = servers::filter_tools(h.role, result);
            }
        }
        let size = message.to_string().len();
        if size > RELAY_FRAME_MAX_BYTES - 1024 {
            tracing::warn!(sid = %h.sid.log_tag(), size, "a server message is too large for the relay link; replaced by an error");
            message = too_large(&message, method.as_deref(), size);
        }
        if r.ended {
            return;
        }
        if is_response && r.swallow.is_some() && message.get("id").map(IdKey::of) == r.swallow {
            r.swallow = None;
            return;
        }
        r.next_seq += 1;
        let seq = r.next_seq;
        let answered = is_response
            && h.call
                .as_ref()
                .is_some_and(|c| message.get("id").map(IdKey::of).as_ref() == Some(&c.key));
        if answered {
            r.ended = true;
            r.done_seq = Some(seq);
        }
        r.unacked
            .push_back((seq, related.clone(), message.clone(), size));
        r.bytes += size;
        while r.bytes > RETAINED_MAX_BYTES {
            if let Some((s, .., n)) = r.unacked.pop_front() {
                r.bytes -= n;
                tracing::error!(sid = %h.sid.log_tag(), seq = s, "dropped an unacknowledged message: retention full while the relay is unreachable");
            }
        }
        let tx = self
            .link
            .lock()
            .ok()
            .and_then(|l| (l.epoch == r.epoch).then(|| l.tx.clone()).flatten());
        if let Some(tx) = tx {
            let sent = self.send_on(
                &tx,
                DaemonFrame::Rpc {
                    sid: h.sid.clone(),
                    seq,
                    related,
                    message,
                },
            );
            if !sent {
                // Detached from this link, as in `attach_host`.
                r.epoch = 0;
            }
        }
        drop(r);
        if answered {
            // The call's state ends with its response; only the retained copy stays until acked.
            h.stop.cancel();
        }
    }

    fn send_closed(&self, sid: &SessionId, reason: &str) {
        let tx = self.link.lock().ok().and_then(|l| l.tx.clone());
        if let Some(tx) = tx {
            let _ = tx.try_send(DaemonFrame::Closed {
                sid: sid.clone(),
                reason: reason.to_owned(),
            });
        }
    }

    /// A session's server stopped on its own.
    fn ended(&self, sid: &SessionId, reason: &str) {
        if self
            .hosts
            .lock()
            .ok()
            .and_then(|mut m| m.remove(sid))
            .is_some()
        {
            self.send_closed(sid, reason);
        }
    }
}

/// An rmcp transport feeding one runtime session.
struct ChannelTransport {
    rx: mpsc::Receiver<ClientJsonRpcMessage>,
    host: Arc<Host>,
    sessions: Arc<HostedSessions>,
}

/// The session's output cannot fail; this type only satisfies the transport trait.
#[derive(Debug, thiserror::Error)]
#[error("session closed")]
struct Closed;

impl Transport<RoleServer> for ChannelTransport {
    type Error = Closed;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let related = match &item {
            JsonRpcMessage::Request(r) => r
                .request
                .extensions()
                .get::<OriginatingRequestId>()
                .map(|o| o.0.clone().into_json_value()),
            _ => None,
        };
        if let Ok(v) = serde_json::to_value(&item) {
            self.sessions.emit(&self.host, v, related);
        }
        std::future::ready(Ok(()))
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        tokio::select! {
            m = self.rx.recv() => m,
            _ = self.host.stop.cancelled() => None,
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

async fn run_upstream(
    sessions: Arc<HostedSessions>,
    host: Arc<Host>,
    mut child: tokio::process::Child,
    mut rx: mpsc::Receiver<String>,
    name: String,
) {
    let pid = child.id();
    let mut stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    if let Some(err) = stderr {
        let name = name.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(err).lines();
            while let Ok(Some(l)) = lines.next_line().await {
                tracing::debug!(server = %name, "{l}");
            }
        });
    }
    let reader = async {
        let Some(out) = stdout else { return };
        let mut lines = BufReader::new(out).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            match serde_json::from_str::<Value>(&line) {
                Ok(v) if v.is_object() => sessions.emit(&host, v, None),
                _ => tracing::debug!(server = %name, "ignoring a non-JSON-RPC line on stdout"),
            }
        }
    };
    let writer = async {
        while let Some(line) = rx.recv().await {
            let Some(w) = stdin.as_mut() else { break };
            if w.write_all(line.as_bytes()).await.is_err()
                || w.write_all(b"\n").await.is_err()
                || w.flush().await.is_err()
            {
                break;
            }
        }
    };
    tokio::select! {
        _ = reader => {}
        _ = writer => {}
        _ = host.stop.cancelled() => {}
        _ = child.wait() => {}
    }
    drop(stdin);
    if let Some(pid) = pid {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _ = child.start_kill();
    let _ = child.wait().await;
    sessions.ended(&host.sid, &format!("upstream server {name} exited"));
}

/// The answer to a client request `message` of `host` that its role may not make: restricted
/// roles may only call read-only tools of an upstream server (a tool error `policy_denied`).
fn denial(host: &Host, message: &Value) -> Option<Value> {
    let ro = host.upstream_tools.as_ref()?;
    if message.get("method").and_then(Value::as_str) != Some("tools/call")
        || servers::calls_every_upstream_tool(host.role)
    {
        return None;
    }
    let tool = message
        .pointer("/params/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    if ro.contains(tool) {
        return None;
    }
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    let err = ToolError::new(
        ToolErrorCode::PolicyDenied,
        format!(
            "{tool} is not read-only and role {} may only call read-only tools of this server",
            host.role
        ),
    );
    Some(jsonrpc::result(&id, err.call_result()))
}

/// What replaces a server message of `size` bytes that no relay frame can carry: for a
/// `tools/call` result, a tool error (`limit_exceeded`; the call did complete, so its side
/// effects happened) the model can act on by asking for less (MCP 2025-11-25, Tools §Error
/// Handling); for anything else a JSON-RPC internal error (-32603) with the same advice.
fn too_large(message: &Value, method: Option<&str>, size: usize) -> Value {
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    let advice = format!(
        "the result ({size} bytes) is larger than the relay link carries ({RELAY_FRAME_MAX_BYTES} bytes); \
         ask for less (a smaller max_bytes, a narrower range or path)"
    );
    if method == Some("tools/call") && message.get("result").is_some() {
        let e = ToolError::limit(format!("the call completed, but {advice}")).with_side_effects();
        // Rendered as the runtime renders its own tool errors (rmcp adds `resultType`).
        let result =
            serde_json::to_value(runtime::call::result::error_result(&e)).unwrap_or(Value::Null);
        return jsonrpc::result(&id, result);
    }
    jsonrpc::error(&id, code::INTERNAL_ERROR, &advice, None)
}

#[cfg(test)]
mod tests {
    use std::{
        io::{BufRead, Write},
        time::Duration,
    };

    use super::*;

    /// A session or call id for the tests.
    fn sid(s: &str) -> SessionId {
        SessionId::from(s)
    }

    /// The per-request `_meta` of an MCP 2026-07-28 request (Basic § Request metadata).
    fn meta() -> Value {
        json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}
        })
    }

    fn request(id: Value, method: &str, mut params: Value) -> Value {
        params["_meta"] = meta();
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
    }

    fn runtime() -> (tempfile::TempDir, Arc<Runtime>) {
        let dir = tempfile::tempdir().unwrap();
        let rt = Runtime::new(runtime::RuntimeConfig {
            workspace: dir.path().into(),
            policy: runtime::policy::Policy::profile(runtime::Profile::Full),
            default_yield_after: None,
            remote: false,
            state_dir: None,
        })
        .unwrap();
        (dir, Arc::new(rt))
    }

    /// Attaches a fresh link (as after `resume` listing `keep`/`requests`) and returns its frames.
    #[test]
    fn a_result_too_large_for_the_link_is_the_runtimes_tool_error_result() {
        let big = json!({"jsonrpc": "2.0", "id": 4, "result": {}});
        let m = too_large(&big, Some("tools/call"), RELAY_FRAME_MAX_BYTES + 1);
        let e = ToolError::limit(format!(
            "the call completed, but the result ({} bytes) is larger than the relay link carries \
             ({RELAY_FRAME_MAX_BYTES} bytes); ask for less (a smaller max_bytes, a narrower range or path)",
            RELAY_FRAME_MAX_BYTES + 1
        ))
        .with_side_effects();
        // The shape rmcp gives the runtime's own tool errors: the tool error's JSON text, and
        // `resultType` besides `isError`.
        let mut expected = e.call_result();
        expected["resultType"] = json!("complete");
        assert_eq!(m["result"], expected);
        let other = too_large(&big, Some("tools/list"), 9);
        assert_eq!(other["error"]["code"], code::INTERNAL_ERROR);
    }

    fn link(
        s: &Arc<HostedSessions>,
        keep: &[&str],
        requests: &[(&str, Value)],
    ) -> mpsc::Receiver<DaemonFrame> {
        let (tx, rx) = mpsc::channel(1024);
        let keep: Vec<SessionId> = keep.iter().map(|k| SessionId::from(*k)).collect();
        let reqs: Vec<ResumeRequest> = requests
            .iter()
            .map(|(s, id)| ResumeRequest {
                sid: SessionId::from(*s),
                id: id.clone().into(),
            })
            .collect();
        s.resume(&keep, &reqs, tx);
        rx
    }

    /// The next `rpc` frame of `sid` (others are skipped): (seq, related, message).
    async fn next_rpc(
        rx: &mut mpsc::Receiver<DaemonFrame>,
        sid: &str,
    ) -> (u64, Option<Value>, Value) {
        loop {
            let f = tokio::time::timeout(Duration::from_secs(20), rx.recv())
                .await
                .unwrap_or_else(|_| panic!("no frame of {sid} in time"))
                .expect("link open");
            if let DaemonFrame::Rpc {
                sid: s,
                seq,
                related,
                message,
            } = f
                && s == sid
            {
                return (seq, related, message);
            }
        }
    }

    /// The response of call `sid` (its related messages skipped); acknowledges it.
    async fn answer(
        s: &Arc<HostedSessions>,
        rx: &mut mpsc::Receiver<DaemonFrame>,
        sid: &str,
    ) -> Value {
        loop {
            let (seq, _, m) = next_rpc(rx, sid).await;
            if m.get("method").is_none() {
                s.ack(&SessionId::from(sid), seq);
                return m;
            }
        }
    }

    fn names(list: &Value) -> Vec<String> {
        list["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    }

    #[tokio::test]
    async fn runtime_calls_answer_tools_list_and_discover_without_initialize() {
        let (_dir, rt) = runtime();
        let s = HostedSessions::new(rt, Vec::new());
        let mut rx = link(&s, &[], &[]);
        s.call(
            &sid("c1"),
            RUNTIME_SERVER,
            "tok",
            "owner",
            request(json!(1), "tools/list", json!({})),
        );
        let owner = answer(&s, &mut rx, "c1").await;
        assert_eq!(owner["id"], 1);
        assert_eq!(owner["result"]["resultType"], "complete", "{owner}");
        assert!(names(&owner["result"]).contains(&"run_process".to_owned()));
        s.call(
            &sid("c2"),
            RUNTIME_SERVER,
            "tok",
            "reviewer",
            request(json!("a"), "tools/list", json!({})),
        );
        let reviewer = answer(&s, &mut rx, "c2").await;
        assert_eq!(reviewer["id"], "a");
        assert!(!names(&reviewer["result"]).contains(&"run_process".to_owned()));
        s.call(
            &sid("c3"),
            RUNTIME_SERVER,
            "tok",
            "owner",
            request(json!(2), "server/discover", json!({})),
        );
        let d = answer(&s, &mut rx, "c3").await;
        assert_eq!(d["result"]["resultType"], "complete", "{d}");
        assert!(
            d["result"]["supportedVersions"]
                .as_array()
                .unwrap()
                .contains(&json!("2026-07-28"))
        );
        // Acknowledged answers end the calls; a later close is harmless.
        assert!(s.is_empty(), "{} hosts left", s.len());
        s.close(&sid("c1"));
    }

    #[tokio::test]
    async fn a_call_without_its_meta_fields_gets_the_json_rpc_error() {
        let (_dir, rt) = runtime();
        let s = HostedSessions::new(rt, Vec::new());
        let mut rx = link(&s, &[], &[]);
        s.call(
            &sid("c1"),
            RUNTIME_SERVER,
            "tok",
            "owner",
            json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {}}),
        );
        let e = answer(&s, &mut rx, "c1").await;
        assert_eq!(e["id"], 5);
        assert_eq!(e["error"]["code"], -32602, "{e}");
        assert!(
            e["error"]["message"]
                .as_str()
                .unwrap()
                .contains("io.modelcontextprotocol/protocolVersion")
        );
        assert!(s.is_empty());
    }

    fn sleep_call(id: Value, seconds: u32) -> Value {
        request(
            id,
            "tools/call",
            json!({"name": "run_process", "arguments": {"argv": ["sleep", seconds.to_string()]}}),
        )
    }

    #[tokio::test]
    async fn a_cancelled_call_is_not_answered_and_ends() {
        let (_dir, rt) = runtime();
        let s = HostedSessions::new(rt, Vec::new());
        let mut rx = link(&s, &[], &[]);
        s.call(
            &sid("c1"),
            RUNTIME_SERVER,
            "tok",
            "owner",
            sleep_call(json!(9), 2),
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        s.rpc(
            &sid("c1"),
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 9}}),
        );
        assert!(s.is_empty());
        // The sleep would have ended after 2 s; nothing of c1 may come.
        let late = tokio::time::timeout(Duration::from_secs(3), next_rpc(&mut rx, "c1")).await;
        assert!(late.is_err(), "a cancelled call was answered: {late:?}");
    }

    #[tokio::test]
    async fn resume_replays_an_unacknowledged_answer_and_cancels_calls_not_listed() {
        let (_dir, rt) = runtime();
        let s = HostedSessions::new(rt, Vec::new());
        let mut first = link(&s, &[], &[]);
        s.call(
            &sid("c1"),
            RUNTIME_SERVER,
            "tok",
            "owner",
            request(json!(1), "tools/list", json!({})),
        );
        // Sent on the first link, which drops before the relay acknowledges it.
        let (seq, _, sent) = next_rpc(&mut first, "c1").await;
        assert_eq!(sent["result"]["resultType"], "complete");
        s.detach();
        // Answered while no link is up.
        s.call(
            &sid("c2"),
            RUNTIME_SERVER,
            "tok",
            "owner",
            request(json!(2), "server/discover", json!({})),
        );
        // Still running, and not awaited by the relay after the reconnect.
        s.call(
            &sid("c3"),
            RUNTIME_SERVER,
            "tok",
            "owner",
            sleep_call(json!(3), 2),
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut second = link(&s, &[], &[("c1", json!(1)), ("c2", json!(2))]);
        // Replayed in any order (sessions are not ordered among each other).
        let mut replayed = HashMap::new();
        while replayed.len() < 2 {
            let f = tokio::time::timeout(Duration::from_secs(20), second.recv())
                .await
                .expect("the replay in time")
                .expect("link open");
            if let DaemonFrame::Rpc {
                sid, seq, message, ..
            } = f
            {
                replayed.insert(sid, (seq, message));
            }
        }
        assert_eq!(replayed["c1"], (seq, sent));
        let late = &replayed["c2"].1;
        assert_eq!(late["id"], 2);
        assert!(late["result"]["supportedVersions"].is_array(), "{late}");
        assert!(
            s.host(&sid("c3")).is_none(),
            "the call not listed was not cancelled"
        );
        let none = tokio::time::timeout(Duration::from_secs(3), next_rpc(&mut second, "c3")).await;
        assert!(none.is_err(), "a cancelled call was answered");
    }

    /// Opens session `id` on the runtime and sends `notifications/initialized`.
    fn open_initialized(s: &Arc<HostedSessions>, id: &str) {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"}}});
        s.open(&sid(id), RUNTIME_SERVER, "tok", "owner", init);
        s.rpc(
            &sid(id),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        );
    }

    /// A request the relay lists in `resume` that this daemon does not hold (it never arrived,
    /// or its record is gone) is answered at once with an explicit error, never left to the
    /// relay's deadline; a listed call or session the daemon does not host is reported closed.
    #[tokio::test]
    async fn a_listed_request_the_daemon_does_not_hold_is_answered_with_an_error() {
        let (_dir, rt) = runtime();
        let s = HostedSessions::new(rt, Vec::new());
        let mut first = link(&s, &[], &[]);
        open_initialized(&s, "s1");
        // A request the session really has, answered and acknowledged on the first link.
        s.rpc(
            &sid("s1"),
            json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}),
        );
        let (seq, _, listed) = next_rpc(&mut first, "s1").await;
        assert_eq!(listed["id"], 5, "{listed}");
        s.ack(&sid("s1"), seq);
        s.detach();
        let mut second = link(&s, &["s1"], &[("s1", json!(7)), ("gone", json!(1))]);
        let (_, related, m) = next_rpc(&mut second, "s1").await;
        assert_eq!(m["id"], 7, "{m}");
        assert_eq!(m["error"]["code"], code::OUTCOME_UNKNOWN, "{m}");
        assert_eq!(related, Some(json!(7)));
        let closed = loop {
            let f = tokio::time::timeout(Duration::from_secs(20), second.recv())
                .await
                .expect("a closed frame in time")
                .expect("link open");
            if let DaemonFrame::Closed { sid, reason } = f {
                break (sid, reason);
            }
        };
        assert_eq!(closed.0, sid("gone"));
        assert!(closed.1.contains("no session or call"), "{}", closed.1);
        assert!(s.host(&sid("s1")).is_some(), "the kept session was ended");
    }

    /// Regression (review of stop 27): a message the link's queue could not take was dropped,
    /// and once the relay acknowledged a later one (acknowledgement is cumulative) it was gone
    /// for good, its request left to the relay's deadline. Now the link is marked broken, and
    /// the next link gets every unacknowledged message again.
    #[tokio::test]
    async fn a_message_the_link_cannot_take_breaks_the_link_and_is_sent_again() {
        let (_dir, rt) = runtime();
        let s = HostedSessions::new(rt, Vec::new());
        let (tx, _full) = mpsc::channel(1);
        s.resume(&[], &[], tx);
        let broken = s.link_broken();
        open_initialized(&s, "s1");
        for id in [5, 6] {
            s.rpc(
                &sid("s1"),
                json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}),
            );
        }
        tokio::time::timeout(Duration::from_secs(20), broken.cancelled())
            .await
            .expect("the link is marked broken");
        let mut second = link(&s, &["s1"], &[]);
        let mut ids = Vec::new();
        while ids.len() < 2 {
            let (_, _, m) = next_rpc(&mut second, "s1").await;
            ids.push(m["id"].clone());
        }
        assert_eq!(ids, [json!(5), json!(6)]);
    }

    /// Regression (review of stop 27): a session the relay keeps in `resume` with no request
    /// listed, which this daemon does not host (it ended while the relay was away for longer
    /// than the grace), is reported closed, so its client gets 404 and initializes again
    /// instead of an error on each request.
    #[tokio::test]
    async fn a_listed_session_without_requests_the_daemon_does_not_host_is_reported_closed() {
        let (_dir, rt) = runtime();
        let s = HostedSessions::new(rt, Vec::new());
        let mut rx = link(&s, &["ghost"], &[]);
        let f = tokio::time::timeout(Duration::from_secs(20), rx.recv())
            .await
            .expect("a closed frame in time")
            .expect("link open");
        assert!(
            matches!(&f, DaemonFrame::Closed { sid: got, .. } if *got == sid("ghost")),
            "{f:?}"
        );
    }

    /// A call that becomes a task (SEP-2663) ends with its `CreateTaskResult`; the task lives on
    /// in the runtime and a later call of the same principal reads it.
    #[tokio::test]
    async fn a_task_outlives_the_call_that_created_it() {
        let (_dir, rt) = runtime();
        let s = HostedSessions::new(rt, Vec::new());
        let mut rx = link(&s, &[], &[]);
        let with_tasks = |mut r: Value| {
            r["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
                json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
            r
        };
        s.call(
            &sid("c1"),
            RUNTIME_SERVER,
            "tok",
            "owner",
            with_tasks(sleep_call(json!(1), 4)),
        );
        let created = answer(&s, &mut rx, "c1").await;
        assert_eq!(created["result"]["resultType"], "task", "{created}");
        let task = created["result"]["taskId"]
            .as_str()
            .unwrap_or_else(|| panic!("no task: {created}"))
            .to_owned();
        assert!(
            s.is_empty(),
            "the call's state did not end with its response"
        );
        for n in 0.. {
            let sid = format!("g{n}");
            s.call(
                &self::sid(&sid),
                RUNTIME_SERVER,
                "tok",
                "owner",
                with_tasks(request(json!(n), "tasks/get", json!({"taskId": task}))),
            );
            let got = answer(&s, &mut rx, &sid).await;
            let status = got["result"]["status"]
                .as_str()
                .unwrap_or_else(|| panic!("{got}"))
                .to_owned();
            if status == "completed" {
                break;
            }
            assert_eq!(status, "working", "{got}");
            assert!(n < 40, "the task did not complete");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// A runtime `subscriptions/listen` call is acknowledged and stays open until cancelled
    /// (MCP 2026-07-28 Basic › Patterns › Subscriptions).
    #[tokio::test]
    async fn a_runtime_listen_stays_open_until_cancelled() {
        let (_dir, rt) = runtime();
        let s = HostedSessions::new(rt, Vec::new());
        let mut rx = link(&s, &[], &[]);
        s.call(
            &sid("l"),
            RUNTIME_SERVER,
            "tok",
            "owner",
            request(
                json!(1),
                "subscriptions/listen",
                json!({"notifications": {"toolsListChanged": true}}),
            ),
        );
        let (_, _, ack) = next_rpc(&mut rx, "l").await;
        assert_eq!(
            ack["method"], "notifications/subscriptions/acknowledged",
            "{ack}"
        );
        let more = tokio::time::timeout(Duration::from_secs(2), next_rpc(&mut rx, "l")).await;
        assert!(more.is_err(), "the listen ended: {more:?}");
        assert!(s.host(&sid("l")).is_some());
        s.rpc(&sid("l"), json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}));
        assert!(s.is_empty());
    }

    // === The era bridge, against a scripted old-era stdio server ===

    const FIXTURE_ENV: &str = "MB_LEGACY_FIXTURE";

    /// Not a test: when the test binary is started with `MB_LEGACY_FIXTURE=1` this function is
    /// a stdio MCP server of the old era (2025-11-25, no `server/discover`). Its tools answer
    /// with the request id and `_meta` they received, so tests can see what the bridge forwards.
    #[test]
    fn legacy_fixture_server() {
        if std::env::var(FIXTURE_ENV).as_deref() != Ok("1") {
            return;
        }
        // End the harness's "test ... " line so the first message starts a line of its own.
        let _ = writeln!(std::io::stdout().lock());
        let stdin = std::io::stdin();
        let mut lines = stdin.lock().lines();
        let mut cancelled: Vec<Value> = Vec::new();
        let send = |v: Value| {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{v}");
            let _ = out.flush();
        };
        while let Some(Ok(line)) = lines.next() {
            let Ok(m) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            let id = m.get("id").cloned().unwrap_or(Value::Null);
            let method = m["method"].as_str().unwrap_or("").to_owned();
            let reply = |result: Value| json!({"jsonrpc": "2.0", "id": id, "result": result});
            match method.as_str() {
                "initialize" => send(reply(json!({
                    "protocolVersion": "2025-11-25",
                    "capabilities": {"tools": {"listChanged": true}},
                    "serverInfo": {"name": "legacy-fixture", "version": "1.0"},
                    "instructions": "a fixture"}))),
                "notifications/cancelled" => cancelled.push(m["params"]["requestId"].clone()),
                "tools/list" => send(reply(json!({"tools": [
                    {"name": "read", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}},
                    {"name": "write", "inputSchema": {"type": "object"}}
                ]}))),
                "tools/call" => {
                    let args = m["params"]["arguments"].clone();
                    if let Some(ms) = args.get("sleep_ms").and_then(Value::as_u64) {
                        std::thread::sleep(Duration::from_millis(ms));
                    }
                    let mut extra = json!(null);
                    if args.get("sample") == Some(&json!(true)) {
                        send(
                            json!({"jsonrpc": "2.0", "id": "srv-1", "method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 1}}),
                        );
                        for l in lines.by_ref() {
                            let Ok(v) = serde_json::from_str::<Value>(&l.unwrap_or_default())
                            else {
                                continue;
                            };
                            if v["id"] == "srv-1" {
                                extra = v;
                                break;
                            }
                        }
                    }
                    if args.get("change") == Some(&json!(true)) {
                        send(
                            json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}),
                        );
                    }
                    if let Some(t) = m.pointer("/params/_meta/progressToken") {
                        send(
                            json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": t, "progress": 1}}),
                        );
                    }
                    let seen = json!({"id": id, "meta": m["params"].get("_meta"), "args": args,
                        "pid": std::process::id(),
                        "cancelled": cancelled, "sampling": extra});
                    send(reply(
                        json!({"content": [{"type": "text", "text": seen.to_string()}]}),
                    ));
                }
                "" => {}
                other if m.get("id").is_some() && !other.starts_with("notifications/") => send(
                    json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "Method not found"}}),
                ),
                _ => {}
            }
        }
        std::process::exit(0);
    }

    fn fixture_spec(dir: &std::path::Path) -> UpstreamSpec {
        UpstreamSpec {
            name: "legacy".into(),
            command: std::env::current_exe().unwrap().display().to_string(),
            args: vec![
                "sessions::tests::legacy_fixture_server".into(),
                "--exact".into(),
                "--test-threads=1".into(),
            ],
            env: [(FIXTURE_ENV.to_owned(), "1".to_owned())].into(),
            cwd: dir.into(),
        }
    }

    /// What a fixture tool saw (its text content, parsed).
    fn seen(answer: &Value) -> Value {
        serde_json::from_str(answer["result"]["content"][0]["text"].as_str().unwrap()).unwrap()
    }

    fn bridged() -> (tempfile::TempDir, Arc<HostedSessions>) {
        let (dir, rt) = runtime();
        let spec = fixture_spec(dir.path());
        let s = HostedSessions::new(rt, vec![(spec, HashSet::from(["read".to_owned()]))]);
        (dir, s)
    }

    #[tokio::test]
    async fn the_bridge_rewrites_ids_strips_meta_and_completes_results() {
        let (_dir, s) = bridged();
        let mut rx = link(&s, &[], &[]);
        let call = |sid: &str, args: Value| {
            let mut r = request(
                json!(1),
                "tools/call",
                json!({"name": "read", "arguments": args}),
            );
            r["params"]["_meta"]["progressToken"] = json!("p");
            s.call(&self::sid(sid), "legacy", "tok", "owner", r);
        };
        // Two concurrent calls with the same id (and progress token) on one pooled session.
        call("c1", json!({"sleep_ms": 300, "n": 1}));
        call("c2", json!({"n": 2}));
        let mut answers = HashMap::new();
        let mut progress = Vec::new();
        while answers.len() < 2 {
            let f = tokio::time::timeout(Duration::from_secs(20), rx.recv())
                .await
                .unwrap()
                .unwrap();
            let DaemonFrame::Rpc {
                sid,
                seq,
                related,
                message,
            } = f
            else {
                continue;
            };
            if message.get("method").is_some() {
                assert_eq!(message["method"], "notifications/progress");
                assert_eq!(message["params"]["progressToken"], "p", "{message}");
                assert_eq!(related, Some(json!(1)));
                progress.push(sid);
                continue;
            }
            s.ack(&sid, seq);
            answers.insert(sid, message);
        }
        assert_eq!(progress.len(), 2);
        let (a1, a2) = (&answers["c1"], &answers["c2"]);
        assert_eq!((&a1["id"], &a2["id"]), (&json!(1), &json!(1)));
        assert_eq!(a1["result"]["resultType"], "complete");
        let (s1, s2) = (seen(a1), seen(a2));
        assert_eq!(
            (s1["args"]["n"].as_i64(), s2["args"]["n"].as_i64()),
            (Some(1), Some(2))
        );
        assert_ne!(s1["id"], s2["id"], "the child saw the same id twice");
        let m1 = s1["meta"].as_object().unwrap();
        assert!(
            m1.keys()
                .all(|k| !k.starts_with("io.modelcontextprotocol/")),
            "{m1:?}"
        );
        assert_ne!(s1["meta"]["progressToken"], s2["meta"]["progressToken"]);
        assert_eq!(
            s.pool.len(),
            1,
            "one pooled session per server and principal"
        );

        s.call(
            &sid("c3"),
            "legacy",
            "tok",
            "owner",
            request(json!(3), "tools/list", json!({})),
        );
        let list = answer(&s, &mut rx, "c3").await;
        assert_eq!(list["result"]["resultType"], "complete");
        assert_eq!(list["result"]["ttlMs"], 0);
        assert_eq!(list["result"]["cacheScope"], "private");
        assert_eq!(names(&list["result"]), ["read", "write"]);

        s.call(
            &sid("c4"),
            "legacy",
            "tok",
            "owner",
            request(json!(4), "server/discover", json!({})),
        );
        let d = answer(&s, &mut rx, "c4").await;
        assert_eq!(
            d["result"]["supportedVersions"],
            json!(["2026-07-28", "2025-11-25"])
        );
        assert_eq!(
            d["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
            "legacy-fixture"
        );
        assert_eq!(d["result"]["instructions"], "a fixture");
        assert_eq!(d["result"]["capabilities"]["tools"]["listChanged"], true);

        s.call(
            &sid("c5"),
            "legacy",
            "tok",
            "owner",
            json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}),
        );
        assert_eq!(answer(&s, &mut rx, "c5").await["error"]["code"], -32602);
        assert!(s.is_empty());
    }

    #[tokio::test]
    async fn the_bridge_keeps_role_filtering_and_answers_child_requests_itself() {
        let (_dir, s) = bridged();
        let mut rx = link(&s, &[], &[]);
        s.call(
            &sid("c1"),
            "legacy",
            "tok",
            "reviewer",
            request(json!(1), "tools/list", json!({})),
        );
        let list = answer(&s, &mut rx, "c1").await;
        assert_eq!(names(&list["result"]), ["read"]);
        assert_eq!(list["result"]["cacheScope"], "private");
        s.call(
            &sid("c2"),
            "legacy",
            "tok",
            "reviewer",
            request(
                json!(2),
                "tools/call",
                json!({"name": "write", "arguments": {}}),
            ),
        );
        let denied = answer(&s, &mut rx, "c2").await;
        assert_eq!(denied["result"]["isError"], true);
        assert_eq!(denied["result"]["resultType"], "complete");
        assert!(
            denied["result"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains("policy_denied")
        );
        // A sampling request of the child is answered by the daemon, never forwarded.
        s.call(
            &sid("c3"),
            "legacy",
            "tok",
            "reviewer",
            request(
                json!(3),
                "tools/call",
                json!({"name": "read", "arguments": {"sample": true}}),
            ),
        );
        let a = answer(&s, &mut rx, "c3").await;
        assert_eq!(seen(&a)["sampling"]["error"]["code"], -32601, "{a}");
    }

    #[tokio::test]
    async fn the_bridge_acknowledges_listen_forwards_list_changes_and_cancels_at_the_child() {
        let (_dir, s) = bridged();
        let mut rx = link(&s, &[], &[]);
        s.call(
            &sid("l1"),
            "legacy",
            "tok",
            "owner",
            request(
                json!(7),
                "subscriptions/listen",
                json!({"notifications": {"toolsListChanged": true, "promptsListChanged": true}}),
            ),
        );
        let (_, _, ack) = next_rpc(&mut rx, "l1").await;
        assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
        assert_eq!(
            ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            7
        );
        assert_eq!(
            ack["params"]["notifications"],
            json!({"toolsListChanged": true})
        );
        s.call(
            &sid("c1"),
            "legacy",
            "tok",
            "owner",
            request(
                json!(1),
                "tools/call",
                json!({"name": "write", "arguments": {"change": true}}),
            ),
        );
        let (_, related, changed) = next_rpc(&mut rx, "l1").await;
        assert_eq!(changed["method"], "notifications/tools/list_changed");
        assert_eq!(
            changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            7
        );
        assert_eq!(related, Some(json!(7)));
        answer(&s, &mut rx, "c1").await;
        // Cancelling the listen ends it; cancelling a forwarded call reaches the child.
        s.rpc(&sid("l1"), json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}}));
        s.call(
            &sid("c2"),
            "legacy",
            "tok",
            "owner",
            request(
                json!(2),
                "tools/call",
                json!({"name": "write", "arguments": {"sleep_ms": 500}}),
            ),
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        s.close(&sid("c2"));
        s.call(
            &sid("c3"),
            "legacy",
            "tok",
            "owner",
            request(
                json!(3),
                "tools/call",
                json!({"name": "write", "arguments": {"change": true}}),
            ),
        );
        let a = answer(&s, &mut rx, "c3").await;
        assert_eq!(
            seen(&a)["cancelled"].as_array().map(Vec::len),
            Some(1),
            "{a}"
        );
        // The listen is gone: the list change of c3 reached no one.
        assert!(
            tokio::time::timeout(Duration::from_millis(300), next_rpc(&mut rx, "l1"))
                .await
                .is_err()
        );
        assert!(
            tokio::time::timeout(Duration::from_millis(10), next_rpc(&mut rx, "c2"))
                .await
                .is_err()
        );
        assert!(s.is_empty());
    }

    /// The workspace's `conformance-fixture` binary next to this test binary, when it was built
    /// (`cargo build -p conformance-fixture`).
    fn conformance_fixture() -> Option<std::path::PathBuf> {
        let exe = std::env::current_exe().ok()?;
        let bin = exe.parent()?.parent()?.join("conformance-fixture");
        bin.is_file().then_some(bin)
    }

    /// The bridge against a real rmcp server of the old era: the conformance fixture started
    /// with `--legacy-only` (its `server/discover` is -32601, it serves only after `initialize`).
    /// Skipped with a message when the fixture binary was not built.
    #[tokio::test]
    async fn the_conformance_fixture_in_legacy_only_mode_is_bridged() {
        let Some(bin) = conformance_fixture() else {
            eprintln!("skipped: build the fixture first (cargo build -p conformance-fixture)");
            return;
        };
        let (dir, rt) = runtime();
        let spec = UpstreamSpec {
            name: "fixture".into(),
            command: bin.display().to_string(),
            args: vec!["--legacy-only".into()],
            env: Default::default(),
            cwd: dir.path().into(),
        };
        let s = HostedSessions::new(rt, vec![(spec, HashSet::new())]);
        let mut rx = link(&s, &[], &[]);
        s.call(
            &sid("d"),
            "fixture",
            "tok",
            "owner",
            request(json!(1), "server/discover", json!({})),
        );
        let d = answer(&s, &mut rx, "d").await;
        assert_eq!(d["result"]["supportedVersions"][0], "2026-07-28", "{d}");
        assert!(d["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"].is_string());
        s.call(
            &sid("l"),
            "fixture",
            "tok",
            "owner",
            request(json!(2), "tools/list", json!({})),
        );
        let l = answer(&s, &mut rx, "l").await;
        assert_eq!(l["result"]["resultType"], "complete", "{l}");
        assert_eq!(l["result"]["cacheScope"], "private");
        assert!(names(&l["result"]).contains(&"test_simple_text".to_owned()));
        s.call(
            &sid("t"),
            "fixture",
            "tok",
            "owner",
            request(
                json!(3),
                "tools/call",
                json!({"name": "test_simple_text", "arguments": {}}),
            ),
        );
        let t = answer(&s, &mut rx, "t").await;
        assert_eq!(
            t["result"]["content"][0]["text"], "This is a simple text response for testing.",
            "{t}"
        );
        let mut p = request(
            json!(4),
            "tools/call",
            json!({"name": "test_tool_with_progress", "arguments": {}}),
        );
        p["params"]["_meta"]["progressToken"] = json!("mine");
        s.call(&sid("p"), "fixture", "tok", "owner", p);
        let mut steps = 0;
        loop {
            let (seq, _, m) = next_rpc(&mut rx, "p").await;
            if m["method"] == "notifications/progress" {
                assert_eq!(m["params"]["progressToken"], "mine", "{m}");
                steps += 1;
                continue;
            }
            s.ack(&sid("p"), seq);
            assert_eq!(m["result"]["resultType"], "complete", "{m}");
            break;
        }
        assert_eq!(steps, 3);
        // Sampling cannot reach a 2026-07-28 client: the tool fails, the call is answered.
        s.call(
            &sid("x"),
            "fixture",
            "tok",
            "owner",
            request(
                json!(5),
                "tools/call",
                json!({"name": "test_sampling", "arguments": {"prompt": "hi"}}),
            ),
        );
        let x = answer(&s, &mut rx, "x").await;
        // (The daemon initializes with no client capabilities, so the fixture does not even ask.)
        assert_eq!(x["result"]["isError"], true, "{x}");
        assert_eq!(x["result"]["resultType"], "complete");
        assert!(s.is_empty());
    }

    /// One pooled session per (server, principal), at most the pool's bound: a new one closes the
    /// least recently used idle one, with none idle the call gets a retryable error; a session
    /// without work closes after the idle time.
    #[tokio::test]
    async fn the_pool_is_bounded_and_idle_sessions_close() {
        let (dir, rt) = runtime();
        let spec = fixture_spec(dir.path());
        let s = HostedSessions::with_pool(
            rt,
            vec![(spec, HashSet::from(["read".to_owned()]))],
            bridge::Pool::new(1, Duration::from_millis(800)),
        );
        let mut rx = link(&s, &[], &[]);
        let read = |id: i64| {
            request(
                json!(id),
                "tools/call",
                json!({"name": "read", "arguments": {}}),
            )
        };
        s.call(&sid("a1"), "legacy", "alice", "owner", read(1));
        let pid_a = seen(&answer(&s, &mut rx, "a1").await)["pid"].clone();
        s.call(&sid("a2"), "legacy", "alice", "owner", read(2));
        assert_eq!(
            seen(&answer(&s, &mut rx, "a2").await)["pid"],
            pid_a,
            "not reused"
        );
        // Bob's session takes the only place: Alice's idle one is closed.
        s.call(&sid("b1"), "legacy", "bob", "owner", read(3));
        let pid_b = seen(&answer(&s, &mut rx, "b1").await)["pid"].clone();
        assert_ne!(pid_b, pid_a);
        assert_eq!(s.pool.len(), 1);
        // A listen keeps Bob's session busy: Alice cannot get one now.
        s.call(
            &sid("bl"),
            "legacy",
            "bob",
            "owner",
            request(
                json!(4),
                "subscriptions/listen",
                json!({"notifications": {"toolsListChanged": true}}),
            ),
        );
        let (_, _, ack) = next_rpc(&mut rx, "bl").await;
        assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
        s.call(&sid("a3"), "legacy", "alice", "owner", read(5));
        let full = answer(&s, &mut rx, "a3").await;
        assert_eq!(full["error"]["data"]["retryable"], true, "{full}");
        // Busy sessions are not idle-closed; once the listen ends, the session closes.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert_eq!(s.pool.len(), 1, "a busy session was closed");
        s.rpc(&sid("bl"), json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 4}}));
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(s.pool.len(), 0, "an idle session was kept");
        s.call(&sid("a4"), "legacy", "alice", "owner", read(6));
        let pid_a2 = seen(&answer(&s, &mut rx, "a4").await)["pid"].clone();
        assert_ne!(pid_a2, pid_a);
        assert!(s.is_empty());
    }
}
