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
//! hosted like a session under its relay-assigned `sid` — same sequence numbers, retention,
//! acknowledgement and replay on `resume` — and ends with its response: the server behind it
//! stops at once, the retained response is dropped when the relay acknowledges it (or closes the
//! sid). The runtime serves it through rmcp's inline lifecycle (no `initialize`); an upstream
//! server of the old era serves it through the era bridge ([`crate::bridge`]).
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
    sync::Arc,
};

use lock::Lock;

use rmcp::model::ClientJsonRpcMessage;
use runtime::Runtime;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use protocol::{Role, ids::SessionId, jsonrpc::IdKey};

use crate::{bridge, servers::UpstreamSpec};
use retention::{LinkSlot, Retention};

/// Client messages queued for one session's server.
const INBOUND_QUEUE: usize = 256;
/// Sessions (and calls) one daemon hosts at once; an `open` beyond it is answered with `closed`,
/// a `call` with a retryable JSON-RPC error.
const MAX_SESSIONS: usize = 256;

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
    out: Lock<Retention>,
    /// Client requests forwarded and not yet answered: key → (id, method).
    inflight: Lock<HashMap<IdKey, (Value, String)>>,
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
/// All sessions (and calls) this daemon instance hosts for the relay.
pub struct HostedSessions {
    hosts: Lock<HashMap<SessionId, Arc<Host>>>,
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
            self.end_call(&h);
            h.stop.cancel();
        }
    }

    /// Ends every session.
    pub fn close_all(&self) {
        let all: Vec<Arc<Host>> = self.hosts.lock().drain().map(|(_, h)| h).collect();
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
    fn host_list(&self) -> Vec<Arc<Host>> {
        self.hosts.lock().values().cloned().collect()
    }

    /// Hosted sessions and single calls: `(sessions, calls)`.
    pub fn counts(&self) -> (usize, usize) {
        let m = self.hosts.lock();
        let calls = m.values().filter(|h| h.call.is_some()).count();
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

    pub(super) fn host(&self, sid: &SessionId) -> Option<Arc<Host>> {
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
