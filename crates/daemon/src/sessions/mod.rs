//! MCP sessions hosted for the relay: one per `sid`, each the built-in runtime (an rmcp
//! [`McpServer`](runtime::McpServer) over a channel transport) or an upstream child process.
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
//! hosted beside the sessions under its relay-assigned `sid` — same sequence numbers, retention,
//! acknowledgement and replay on `resume` — and ends with its response: the server behind it
//! stops at once, the retained response is dropped when the relay acknowledges it (or closes the
//! sid). The runtime serves it through rmcp's inline lifecycle (no `initialize`); an upstream
//! server of the old era serves it through the era bridge ([`crate::bridge`]).
//!
//! A hosted session (`HostedSession`) and a hosted call (`HostedCall`) are two types that share
//! their transport and retention core (`Hosted`); the registry holds each under its `sid` as a
//! `Host`, and what a server emits names either (`HostRef`). Code for one of them takes its
//! type; code for both takes the core, or matches on the `Host` where they differ.
//!
//! One file per concern: this one is the host registry (the hosted sessions and calls by `sid`,
//! their bounds, how they end); `session` opens a session and takes its client messages; `call`
//! serves one `call`; `retention` numbers, retains, acknowledges and replays what each sends
//! (the link's delivery contract on this side); `transport` is the rmcp channel transport that
//! feeds the runtime; `upstream` runs an upstream child process; `guard` holds the role filter
//! and the size guard.

mod call;
mod guard;
mod retention;
mod session;
#[cfg(test)]
mod tests;
mod transport;
mod upstream;

use std::{
    collections::{HashMap, HashSet},
    ops::Deref,
    sync::{Arc, OnceLock, atomic::AtomicBool},
};

use lock::Lock;

use rmcp::model::ClientJsonRpcMessage;
use runtime::Runtime;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use protocol::{Role, delivery::InFlight, ids::SessionId, jsonrpc::IdKey};

use crate::{bridge, servers::UpstreamSpec};
use retention::{LinkSlot, Retention};

/// Client messages queued for one session's server.
const INBOUND_QUEUE: usize = 256;
/// Sessions (and calls) one daemon hosts at once; an `open` beyond it is answered with `closed`,
/// a `call` with a retryable JSON-RPC error.
const MAX_SESSIONS: usize = 256;

/// What a hosted session and a hosted call share: the `sid` the relay names it by, the authority
/// its principal has (role, and the read-only tools of an upstream), what it sent and the relay
/// has not acknowledged ([`Retention`]), the client requests it took and has not answered, and
/// what stops the server behind it.
pub(crate) struct Hosted {
    sid: SessionId,
    role: Role,
    upstream_tools: Option<Arc<HashSet<String>>>,
    out: Lock<Retention>,
    /// Client requests forwarded and not yet answered: key → (id, method).
    inflight: Lock<InFlight<(Value, String)>>,
    stop: CancellationToken,
}

impl Hosted {
    fn new(
        sid: &SessionId,
        role: &str,
        upstream_tools: Option<Arc<HashSet<String>>>,
        inflight: InFlight<(Value, String)>,
    ) -> Self {
        Self {
            sid: sid.clone(),
            role: crate::role_named(role),
            upstream_tools,
            out: Lock::new(Retention::default()),
            inflight: Lock::new(inflight),
            stop: CancellationToken::new(),
        }
    }

    /// The session or call id.
    pub(crate) fn sid_str(&self) -> &str {
        self.sid.as_str()
    }

    /// Resolves once this session or call has ended (for a call: answered or cancelled).
    pub(crate) async fn stopped(&self) {
        self.stop.cancelled().await;
    }
}

/// Where a hosted session's client messages go.
enum SessionInput {
    Runtime(mpsc::Sender<ClientJsonRpcMessage>),
    Upstream(mpsc::Sender<String>),
}

/// A session the relay opened (`open`): the built-in runtime or an upstream child, taking client
/// messages until it ends.
pub(crate) struct HostedSession {
    hosted: Hosted,
    input: SessionInput,
    /// The id of the `initialize` it was opened with: the relay answered it already, so its
    /// response is swallowed once (read and cleared under the retention lock, `out`).
    swallow: Lock<Option<IdKey>>,
}

impl Deref for HostedSession {
    type Target = Hosted;

    fn deref(&self) -> &Hosted {
        &self.hosted
    }
}

/// One MCP 2026-07-28 request the relay sent as a `call` (module docs): it takes no client
/// message but the cancellation of its request, and its output ends with its response.
pub(crate) struct HostedCall {
    hosted: Hosted,
    /// The id of its one request, and its key.
    id: Value,
    key: IdKey,
    /// The runtime's input; `None` for a call answered by the daemon or bridged to a pooled
    /// upstream session (its cancellation ends it through `stop`).
    input: Option<mpsc::Sender<ClientJsonRpcMessage>>,
    /// Its output is complete (its response was emitted, or it was cancelled): nothing more is
    /// emitted. Set under the retention lock (`out`).
    ended: AtomicBool,
    /// The sequence number of its response, once emitted (set under `out`).
    answered_at: OnceLock<u64>,
}

impl Deref for HostedCall {
    type Target = Hosted;

    fn deref(&self) -> &Hosted {
        &self.hosted
    }
}

/// What this daemon hosts under a `sid`: a session or a call.
#[derive(Clone)]
enum Host {
    Session(Arc<HostedSession>),
    Call(Arc<HostedCall>),
}

impl Deref for Host {
    type Target = Hosted;

    fn deref(&self) -> &Hosted {
        match self {
            Self::Session(s) => s,
            Self::Call(c) => c,
        }
    }
}

/// A hosted session or call, borrowed: what a server message is emitted for
/// ([`HostedSessions::emit`]).
#[derive(Clone, Copy)]
pub(crate) enum HostRef<'a> {
    /// A session.
    Session(&'a HostedSession),
    /// A call.
    Call(&'a HostedCall),
}

impl Deref for HostRef<'_> {
    type Target = Hosted;

    fn deref(&self) -> &Hosted {
        match self {
            Self::Session(s) => s,
            Self::Call(c) => c,
        }
    }
}

impl<'a> From<&'a Host> for HostRef<'a> {
    fn from(h: &'a Host) -> Self {
        match h {
            Host::Session(s) => Self::Session(s),
            Host::Call(c) => Self::Call(c),
        }
    }
}

impl<'a> From<&'a Arc<HostedSession>> for HostRef<'a> {
    fn from(s: &'a Arc<HostedSession>) -> Self {
        Self::Session(s)
    }
}

impl<'a> From<&'a Arc<HostedCall>> for HostRef<'a> {
    fn from(c: &'a Arc<HostedCall>) -> Self {
        Self::Call(c)
    }
}

/// All sessions (and calls) this daemon instance hosts for the relay.
pub struct HostedSessions {
    hosts: Lock<HashMap<SessionId, Host>>,
    link: Lock<LinkSlot>,
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
            hosts: Lock::new(HashMap::new()),
            link: Lock::new(LinkSlot::default()),
            runtime,
            upstreams: upstreams
                .into_iter()
                .map(|(s, t)| (s.name.clone(), (s, Arc::new(t))))
                .collect(),
            pool,
        })
    }

    /// Ends session or call `sid` (its server is stopped; an unanswered call is cancelled, and
    /// for an answered one this only drops its retained response).
    pub fn close(&self, sid: &SessionId) {
        let removed = self.hosts.lock().remove(sid);
        if let Some(h) = removed {
            Self::stop(&h);
        }
    }

    /// Ends every session.
    pub fn close_all(&self) {
        let all: Vec<Host> = self.hosts.lock().drain().map(|(_, h)| h).collect();
        for h in all {
            Self::stop(&h);
        }
        self.pool.close_all();
    }

    /// Stops what serves `h`; a call's output is complete first ([`Self::end_call`]).
    fn stop(h: &Host) {
        if let Host::Call(c) = h {
            Self::end_call(c);
        }
        h.stop.cancel();
    }

    /// Client requests forwarded to hosted sessions and calls and not yet answered.
    pub fn requests_in_flight(&self) -> usize {
        self.host_list()
            .iter()
            .map(|h| h.inflight.lock().len())
            .sum()
    }

    /// Messages sent to the relay and not yet acknowledged (results among them), summed over
    /// the hosted sessions and calls: what a new process could not replay.
    pub fn unacknowledged(&self) -> usize {
        self.host_list()
            .iter()
            .map(|h| h.out.lock().outbox.len())
            .sum()
    }

    /// The hosted sessions and calls now (a snapshot, so no lock is held while each is read).
    fn host_list(&self) -> Vec<Host> {
        self.hosts.lock().values().cloned().collect()
    }

    /// Hosted sessions and single calls: `(sessions, calls)`.
    pub fn counts(&self) -> (usize, usize) {
        let m = self.hosts.lock();
        let calls = m.values().filter(|h| matches!(h, Host::Call(_))).count();
        (m.len() - calls, calls)
    }

    /// Sessions hosted.
    pub fn len(&self) -> usize {
        self.hosts.lock().len()
    }

    /// Whether no session is hosted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn host(&self, sid: &SessionId) -> Option<Host> {
        self.hosts.lock().get(sid).cloned()
    }

    /// A session's server stopped on its own.
    pub(super) fn ended(&self, sid: &SessionId, reason: &str) {
        let removed = self.hosts.lock().remove(sid);
        if removed.is_some() {
            self.send_closed(sid, reason);
        }
    }
}
