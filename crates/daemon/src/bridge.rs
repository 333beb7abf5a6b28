//! The era bridge: MCP 2026-07-28 requests (relay `call` frames) served by upstream stdio servers
//! that speak only the handshake era (MCP 2025-11-25 and older).
//!
//! Per (server, principal) the daemon keeps one pooled legacy session (`Legacy`): a child
//! process started like the upstream sessions of `open`, initialized by the daemon itself
//! (`protocolVersion` 2025-11-25, client `machine-mcp`), reused by every call of that principal,
//! stopped after [`UPSTREAM_POOLED_SESSION_IDLE`] without work, and bounded in number by
//! [`UPSTREAM_POOLED_SESSIONS_MAX`].
//!
//! Translation, per request:
//! - the request id is rewritten to a number unique within the pooled session (concurrent calls
//!   may use the same id) and restored on the answer; a progress token likewise (the message's
//!   head is read and its members rewritten by `protocol::head`, never by hand);
//! - the per-request `_meta` keys of 2026-07-28 (`io.modelcontextprotocol/*`, MCP 2026-07-28
//!   Basic § Request metadata) are removed before forwarding, except to a dual-era child (one
//!   whose `server/discover`, asked after `initialize`, lists 2026-07-28): it gets them as the
//!   client sent them, so it serves the request in that era with the client's declared
//!   capabilities (the tasks extension, SEP-2663, exists only there);
//! - results get `resultType: "complete"` (2026-07-28 Basic § Result types; [`Completion::live`])
//!   and, for the cacheable
//!   operations, `ttlMs: 0` and `cacheScope: "private"` (Server › Utilities › Caching): the
//!   daemon cannot know how long an old-era server's lists stay valid, and what a caller sees
//!   depends on its role and on the principal's own child process, so nothing may be shared
//!   between callers and every use re-fetches;
//! - `server/discover` is answered with the child's own answer when it serves 2026-07-28, else
//!   from its `initialize` result ([`discover_from_initialize`], [`DiscoverFrom::EraBridge`]);
//! - `subscriptions/listen` is acknowledged (Basic › Patterns › Subscriptions § Acknowledgment)
//!   with the list-changed kinds the child advertises, and the child's `list_changed`
//!   notifications are forwarded to each listening call until it is cancelled;
//! - requests of the child (sampling, elicitation, roots) never reach a 2026-07-28 client, which
//!   has no way to answer them: the daemon answers them with a JSON-RPC error (`ping` with `{}`);
//! - a cancelled call becomes `notifications/cancelled` for the rewritten id.

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use crate::{limits::UPSTREAM_POOLED_SESSION_IDLE, limits::UPSTREAM_POOLED_SESSIONS_MAX};
use lock::Lock;
use protocol::{
    head::{
        Head,
        discover::{DiscoverFrom, discover_from_initialize, lists_modern},
        meta,
        result::{Completion, complete},
        rewrite::{replace_progress_token, set_progress_of, strip_modern_meta},
        set_id,
    },
    jsonrpc::code,
    mcp::{
        self, META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_PROTOCOL_VERSION,
        META_SUBSCRIPTION_ID,
    },
};
use serde_json::{Map, Value, json};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    sync::mpsc,
    time::Instant,
};
use tokio_util::sync::CancellationToken;

use crate::{
    servers::{self, UpstreamSpec},
    sessions::{HostedCall, HostedSessions},
};

/// The protocol version of the 2026 era the bridge serves.
pub const MODERN_VERSION: &str = mcp::MODERN_VERSION;
/// The protocol version the daemon initializes pooled legacy sessions with.
pub const LEGACY_VERSION: &str = mcp::LATEST_SESSION_VERSION;
/// Client messages queued for one pooled child.
const CHILD_INPUT_QUEUE: usize = 256;
/// How long a freshly initialized child has to answer the `server/discover` that tells whether
/// it also serves 2026-07-28; silence counts as "no" (a handshake-era server may ignore it).
pub(crate) const DISCOVER_PROBE_TIMEOUT: Duration = Duration::from_secs(5);

pub(crate) use protocol::jsonrpc::error;

/// Checks the per-request `_meta` of a 2026-07-28 request by the rules of
/// [`protocol::head::meta::check_meta`] (MCP 2026-07-28 Basic § `_meta`, Per-request protocol
/// fields; the relay applies the same before it sends the call): `protocolVersion` and
/// `clientCapabilities` are required, and the version must be [`MODERN_VERSION`], the one
/// version the bridge serves calls in. Returns the error response to send otherwise.
pub fn check_meta(head: &Head) -> Result<(), Value> {
    meta::check_meta(head, &mcp::MODERN_VERSIONS).map_err(|r| r.answer(&head.reply_id()))
}

/// Whether a `server/discover` answer (its result, or its error) lists [`MODERN_VERSION`]
/// among its `supportedVersions`.
fn serves_modern(answer: &Result<Value, Value>) -> bool {
    answer.as_ref().is_ok_and(lists_modern)
}

/// The `server/discover` request (2026-07-28, per-request `_meta`, no capabilities) the daemon
/// sends a carried child to learn whether it serves that era too.
pub(crate) fn discover_probe(id: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "server/discover",
        "params": {"_meta": {META_PROTOCOL_VERSION: MODERN_VERSION,
            META_CLIENT_CAPABILITIES: {},
            META_CLIENT_INFO:
                {"name": "machine-mcp", "version": env!("CARGO_PKG_VERSION")}}}})
}

/// Which list-changed notifications a `subscriptions/listen` asked for and the child offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Filter {
    tools: bool,
    prompts: bool,
    resources: bool,
}

impl Filter {
    /// What the bridge honours of `requested` (the listen request's `notifications`) given the
    /// child's `capabilities`: each list-changed kind the child advertises with `listChanged`.
    /// Resource subscriptions are not bridged (the acknowledgment omits them, as Subscriptions §
    /// Acknowledgment requires for unsupported kinds).
    fn accept(requested: &Value, capabilities: &Value) -> Self {
        let asked = |k: &str| requested.get(k) == Some(&Value::Bool(true));
        let offers = |c: &str| {
            capabilities.pointer(&format!("/{c}/listChanged")) == Some(&Value::Bool(true))
        };
        Self {
            tools: asked("toolsListChanged") && offers("tools"),
            prompts: asked("promptsListChanged") && offers("prompts"),
            resources: asked("resourcesListChanged") && offers("resources"),
        }
    }

    fn to_json(self) -> Value {
        let mut m = Map::new();
        for (on, k) in [
            (self.tools, "toolsListChanged"),
            (self.prompts, "promptsListChanged"),
            (self.resources, "resourcesListChanged"),
        ] {
            if on {
                m.insert(k.into(), Value::Bool(true));
            }
        }
        Value::Object(m)
    }

    fn wants(self, method: &str) -> bool {
        match method {
            "notifications/tools/list_changed" => self.tools,
            "notifications/prompts/list_changed" => self.prompts,
            "notifications/resources/list_changed" => self.resources,
            _ => false,
        }
    }
}

/// A forwarded request awaiting the child's answer.
struct Route {
    host: Arc<HostedCall>,
    id: Value,
    method: String,
    token: Option<(String, Value)>,
}

/// An open `subscriptions/listen` call.
struct Listener {
    host: Arc<HostedCall>,
    id: Value,
    filter: Filter,
}

/// One pooled legacy session: an upstream child initialized by the daemon.
pub(crate) struct Legacy {
    server: String,
    tx: mpsc::Sender<String>,
    init: Value,
    /// The `server/discover` result answered for the child: its own when it serves 2026-07-28,
    /// else derived from its `initialize` result.
    discover: Value,
    /// The child serves 2026-07-28 requests too: per-request `_meta` goes to it unchanged.
    modern: bool,
    next_id: AtomicU64,
    routes: Lock<HashMap<u64, Route>>,
    listeners: Lock<HashMap<String, Listener>>,
    last_used: Lock<Instant>,
    idle: Duration,
    stop: CancellationToken,
}

impl std::fmt::Debug for Legacy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Legacy")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

/// Where the pooled session of one (server, principal) is started and kept; its lock makes
/// concurrent first calls share one start.
type Slot = Arc<tokio::sync::Mutex<Option<Arc<Legacy>>>>;

/// The pooled legacy sessions of one daemon.
pub(crate) struct Pool {
    /// Per (server, principal): the slot its session is started in (one start at a time).
    slots: Lock<HashMap<(String, String), Slot>>,
    /// Every running pooled session, and how many are being started.
    live: Lock<(Vec<Arc<Legacy>>, usize)>,
    /// Most sessions at once ([`UPSTREAM_POOLED_SESSIONS_MAX`]).
    max: usize,
    /// Idle time after which a session is stopped ([`UPSTREAM_POOLED_SESSION_IDLE`]).
    idle: Duration,
}

impl Default for Pool {
    fn default() -> Self {
        Self::new(UPSTREAM_POOLED_SESSIONS_MAX, UPSTREAM_POOLED_SESSION_IDLE)
    }
}

/// A place in the pool for a session being started; given back when the start ends, however it
/// ends (a failed start, or a start abandoned because its call was cancelled).
struct Reservation<'a>(&'a Pool);

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.0.live.lock().1 -= 1;
    }
}

impl Pool {
    /// A pool of at most `max` sessions, each stopped after `idle` without work.
    pub(crate) fn new(max: usize, idle: Duration) -> Self {
        Self {
            slots: Lock::new(HashMap::new()),
            live: Lock::new((Vec::new(), 0)),
            max,
            idle,
        }
    }

    /// The running pooled sessions.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        let live = self.live.lock();
        live.0.iter().filter(|x| !x.stop.is_cancelled()).count()
    }

    /// The pooled session of (`spec`, `principal`), started (and initialized) when there is none.
    ///
    /// # Errors
    /// A message for a retryable JSON-RPC error: the pool is full of busy sessions, or the child
    /// could not be started or initialized.
    pub(crate) async fn get(
        &self,
        sessions: &Arc<HostedSessions>,
        spec: &UpstreamSpec,
        principal: &str,
    ) -> Result<Arc<Legacy>, String> {
        let slot = {
            let mut m = self.slots.lock();
            m.entry((spec.name.clone(), principal.to_owned()))
                .or_default()
                .clone()
        };
        let mut g = slot.lock().await;
        if let Some(l) = g.as_ref()
            && !l.stop.is_cancelled()
        {
            l.touch();
            return Ok(l.clone());
        }
        let reservation = self.reserve()?;
        let l = Legacy::start(sessions, spec, self.idle).await?;
        self.live.lock().0.push(l.clone());
        drop(reservation);
        *g = Some(l.clone());
        Ok(l)
    }

    /// Makes room for one more session: closes the least recently used idle one when the pool
    /// is full.
    fn reserve(&self) -> Result<Reservation<'_>, String> {
        let mut live = self.live.lock();
        live.0.retain(|l| !l.stop.is_cancelled());
        if live.0.len() + live.1 >= self.max {
            let oldest = live
                .0
                .iter()
                .enumerate()
                .filter(|(_, l)| !l.busy())
                .min_by_key(|(_, l)| l.last_used())
                .map(|(i, _)| i);
            let Some(i) = oldest else {
                return Err(format!(
                    "this daemon already runs {} busy upstream sessions; retry later",
                    self.max
                ));
            };
            let l = live.0.remove(i);
            tracing::info!(server = %l.server, "closing the least recently used idle upstream session to make room");
            l.stop.cancel();
        }
        live.1 += 1;
        Ok(Reservation(self))
    }

    /// Stops every pooled session.
    pub(crate) fn close_all(&self) {
        for l in self.live.lock().0.drain(..) {
            l.stop.cancel();
        }
    }
}

impl Legacy {
    /// Starts `spec`'s child and initializes it as a 2025-11-25 client.
    async fn start(
        sessions: &Arc<HostedSessions>,
        spec: &UpstreamSpec,
        idle: Duration,
    ) -> Result<Arc<Self>, String> {
        let mut child =
            servers::spawn(spec).map_err(|e| format!("cannot start {}: {e}", spec.command))?;
        let mut stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        if let Some(err) = child.stderr.take() {
            let name = spec.name.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(err).lines();
                while let Ok(Some(l)) = lines.next_line().await {
                    tracing::debug!(server = %name, "{l}");
                }
            });
        }
        let mut lines = BufReader::new(stdout).lines();
        let handshake = async {
            let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": LEGACY_VERSION, "capabilities": {},
                "clientInfo": {"name": "machine-mcp", "version": env!("CARGO_PKG_VERSION")}}});
            write_line(&mut stdin, &init.to_string()).await?;
            let result = match servers::read_answer(&mut lines, &json!(0)).await? {
                Some(Ok(result)) => result,
                Some(Err(e)) => return Err(format!("answered initialize with an error: {e}")),
                None => return Err("exited before answering initialize".to_owned()),
            };
            write_line(
                &mut stdin,
                &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string(),
            )
            .await?;
            Ok::<Value, String>(result)
        };
        let init = match tokio::time::timeout(servers::PROBE_TIMEOUT, handshake).await {
            Ok(Ok(init)) => init,
            Ok(Err(e)) => {
                kill(&mut child).await;
                return Err(format!("upstream server {}: {e}", spec.name));
            }
            Err(_) => {
                kill(&mut child).await;
                return Err(format!(
                    "upstream server {} did not answer initialize within {} s",
                    spec.name,
                    servers::PROBE_TIMEOUT.as_secs()
                ));
            }
        };
        // Asked after `initialize`: a handshake-era server answers an unknown method with an
        // error, while a dual-era one may serve both eras on one connection (MCP 2026-07-28
        // Basic › Versioning § Backward Compatibility).
        let probe = async {
            let discover = discover_probe(json!("mb-discover"));
            write_line(&mut stdin, &discover.to_string()).await?;
            match servers::read_answer(&mut lines, &json!("mb-discover")).await? {
                // A handshake-era server answers an unknown method with an error: not modern.
                Some(answer) => Ok::<Option<Value>, String>(if serves_modern(&answer) {
                    answer.ok()
                } else {
                    None
                }),
                None => Err("exited before answering server/discover".to_owned()),
            }
        };
        let own = match tokio::time::timeout(DISCOVER_PROBE_TIMEOUT, probe).await {
            Ok(Ok(own)) => own,
            Ok(Err(e)) => {
                kill(&mut child).await;
                return Err(format!("upstream server {}: {e}", spec.name));
            }
            Err(_) => None,
        };
        let modern = own.is_some();
        // A dual-era child's own answer carries what only that era has (the tasks extension).
        let discover =
            own.unwrap_or_else(|| discover_from_initialize(&init, DiscoverFrom::EraBridge));
        let (tx, rx) = mpsc::channel(CHILD_INPUT_QUEUE);
        let legacy = Arc::new(Self {
            server: spec.name.clone(),
            tx,
            init,
            discover,
            modern,
            next_id: AtomicU64::new(1),
            routes: Lock::new(HashMap::new()),
            listeners: Lock::new(HashMap::new()),
            last_used: Lock::new(Instant::now()),
            idle,
            stop: CancellationToken::new(),
        });
        tracing::info!(server = %spec.name, modern, "started a pooled upstream session for 2026-07-28 calls");
        tokio::spawn(
            legacy
                .clone()
                .run(sessions.clone(), child, stdin, lines, rx),
        );
        Ok(legacy)
    }

    fn touch(&self) {
        *self.last_used.lock() = Instant::now();
    }

    fn last_used(&self) -> Instant {
        *self.last_used.lock()
    }

    /// Whether a call is in flight or a listener open.
    fn busy(&self) -> bool {
        !self.routes.lock().is_empty() || !self.listeners.lock().is_empty()
    }

    /// Serves the call `message` of `host`, whose head is `head` (its `_meta` already checked,
    /// its authority already enforced).
    pub(crate) fn submit(
        self: &Arc<Self>,
        sessions: &Arc<HostedSessions>,
        host: &Arc<HostedCall>,
        head: &Head,
        mut message: Value,
    ) {
        self.touch();
        let id = head.reply_id();
        let method = head.method().unwrap_or("").to_owned();
        match method.as_str() {
            "server/discover" => {
                let result = self.discover.clone();
                sessions.emit(
                    host,
                    json!({"jsonrpc": "2.0", "id": id, "result": result}),
                    None,
                );
                return;
            }
            "subscriptions/listen" => {
                let requested = message
                    .pointer("/params/notifications")
                    .cloned()
                    .unwrap_or(Value::Null);
                let caps = self
                    .init
                    .get("capabilities")
                    .cloned()
                    .unwrap_or(Value::Null);
                let filter = Filter::accept(&requested, &caps);
                {
                    self.listeners.lock().insert(
                        host.sid_str().to_owned(),
                        Listener {
                            host: host.clone(),
                            id: id.clone(),
                            filter,
                        },
                    );
                }
                sessions.emit(
                    host,
                    json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                        "params": {"_meta": {META_SUBSCRIPTION_ID: id}, "notifications": filter.to_json()}}),
                    None,
                );
                self.watch(host);
                return;
            }
            _ => {}
        }
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        let token_name = format!("mb-{n}");
        let token = if self.modern {
            replace_progress_token(&mut message, json!(token_name))
        } else {
            strip_modern_meta(&mut message, json!(token_name))
        }
        .map(|t| (token_name, t));
        set_id(&mut message, json!(n));
        {
            self.routes.lock().insert(
                n,
                Route {
                    host: host.clone(),
                    id: id.clone(),
                    method,
                    token,
                },
            );
        }
        if self.tx.try_send(message.to_string()).is_err() {
            self.routes.lock().remove(&n);
            sessions.emit(
                host,
                error(
                    &id,
                    code::INTERNAL_ERROR,
                    "the upstream session is not taking input (busy or ending); retry",
                    Some(json!({"retryable": true})),
                ),
                None,
            );
            return;
        }
        self.watch(host);
    }

    /// Forgets `host`'s call once it ends: an unanswered request is cancelled at the child
    /// (MCP 2025-11-25 Basic › Utilities › Cancellation), a listener removed.
    fn watch(self: &Arc<Self>, host: &Arc<HostedCall>) {
        let me = self.clone();
        let h = host.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = h.stopped() => {}
                _ = me.stop.cancelled() => return,
            }
            let sid = h.sid_str();
            let cancelled: Vec<u64> = {
                let mut r = me.routes.lock();
                let ids: Vec<u64> = r
                    .iter()
                    .filter(|(_, route)| route.host.sid_str() == sid)
                    .map(|(n, _)| *n)
                    .collect();
                for n in &ids {
                    r.remove(n);
                }
                ids
            };
            for n in cancelled {
                let _ = me.tx.try_send(
                    json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": n, "reason": "the client cancelled the request"}})
                    .to_string(),
                );
            }
            me.listeners.lock().remove(sid);
            me.touch();
        });
    }

    /// A message from the child.
    fn on_child_message(&self, sessions: &Arc<HostedSessions>, mut v: Value) {
        let head = Head::of(&v);
        let method = head.method().map(str::to_owned);
        let progress = head
            .progress_of()
            .and_then(Value::as_str)
            .map(str::to_owned);
        match (method, head.id_member().cloned()) {
            (None, Some(id)) => {
                let Some(route) = id.as_u64().and_then(|n| self.routes.lock().remove(&n)) else {
                    return;
                };
                self.touch();
                set_id(&mut v, route.id.clone());
                if let Some(result) = v.get_mut("result") {
                    complete(result, &Completion::live(&route.method));
                }
                sessions.emit(&route.host, v, None);
            }
            (Some(m), Some(id)) => {
                let reply = if m == "ping" {
                    json!({"jsonrpc": "2.0", "id": id, "result": {}})
                } else {
                    error(
                        &id,
                        code::METHOD_NOT_FOUND,
                        &format!(
                            "{m} is not available: the client reached this server through MCP 2026-07-28, which has no server-to-client requests"
                        ),
                        None,
                    )
                };
                let _ = self.tx.try_send(reply.to_string());
            }
            (Some(m), None) if m == "notifications/progress" => {
                let Some(token) = progress else {
                    return;
                };
                let target = self.routes.lock().values().find_map(|route| {
                    route
                        .token
                        .as_ref()
                        .filter(|(name, _)| *name == token)
                        .map(|(_, orig)| (route.host.clone(), route.id.clone(), orig.clone()))
                });
                if let Some((host, rid, orig)) = target {
                    set_progress_of(&mut v, orig);
                    sessions.emit(&host, v, Some(rid));
                }
            }
            (Some(m), None) => {
                let targets: Vec<(Arc<HostedCall>, Value)> = self
                    .listeners
                    .lock()
                    .values()
                    .filter(|x| x.filter.wants(&m))
                    .map(|x| (x.host.clone(), x.id.clone()))
                    .collect();
                for (host, id) in targets {
                    sessions.emit(
                        &host,
                        json!({"jsonrpc": "2.0", "method": m, "params": {"_meta": {META_SUBSCRIPTION_ID: id}}}),
                        None,
                    );
                }
            }
            _ => {}
        }
    }

    async fn run(
        self: Arc<Self>,
        sessions: Arc<HostedSessions>,
        mut child: tokio::process::Child,
        mut stdin: tokio::process::ChildStdin,
        mut lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
        mut rx: mpsc::Receiver<String>,
    ) {
        let reader = async {
            while let Ok(Some(line)) = lines.next_line().await {
                match serde_json::from_str::<Value>(&line) {
                    Ok(v) if v.is_object() => self.on_child_message(&sessions, v),
                    _ => {
                        tracing::debug!(server = %self.server, "ignoring a non-JSON-RPC line on stdout")
                    }
                }
            }
        };
        let writer = async {
            while let Some(line) = rx.recv().await {
                if write_line(&mut stdin, &line).await.is_err() {
                    break;
                }
            }
        };
        let idle = async {
            loop {
                let due = self.last_used() + self.idle;
                tokio::time::sleep_until(due.max(Instant::now() + Duration::from_millis(10))).await;
                if self.busy() {
                    self.touch();
                } else if self.last_used().elapsed() >= self.idle {
                    break;
                }
            }
        };
        let why = tokio::select! {
            _ = reader => "exited",
            _ = writer => "stopped reading its input",
            _ = idle => "was idle",
            _ = self.stop.cancelled() => "was closed",
            _ = child.wait() => "exited",
        };
        self.stop.cancel();
        tracing::info!(server = %self.server, "pooled upstream session ended: the server {why}");
        drop(stdin);
        kill(&mut child).await;
        let routes: Vec<Route> = self.routes.lock().drain().map(|(_, v)| v).collect();
        let listeners: Vec<Listener> = self.listeners.lock().drain().map(|(_, v)| v).collect();
        let msg = format!(
            "upstream server {} {why} before answering; retry",
            self.server
        );
        for r in routes {
            sessions.emit(
                &r.host,
                error(
                    &r.id,
                    code::INTERNAL_ERROR,
                    &msg,
                    Some(json!({"retryable": true})),
                ),
                None,
            );
        }
        for l in listeners {
            // Graceful closure (Subscriptions § Graceful Closure): the stream ends with a result.
            sessions.emit(
                &l.host,
                json!({"jsonrpc": "2.0", "id": l.id, "result": {"resultType": "complete", "_meta": {META_SUBSCRIPTION_ID: l.id}}}),
                None,
            );
        }
    }
}

async fn write_line(w: &mut tokio::process::ChildStdin, line: &str) -> Result<(), String> {
    w.write_all(line.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    w.write_all(b"\n").await.map_err(|e| e.to_string())?;
    w.flush().await.map_err(|e| e.to_string())
}

async fn kill(child: &mut tokio::process::Child) {
    if let Some(pid) = child.id() {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _ = child.start_kill();
    let _ = child.wait().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::mcp::META_SERVER_INFO;

    #[test]
    fn meta_is_checked_by_the_rules_of_the_head_module() {
        let ok = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
            META_PROTOCOL_VERSION: MODERN_VERSION, META_CLIENT_CAPABILITIES: {}}}});
        assert!(check_meta(&Head::of(&ok)).is_ok());
        let e = check_meta(&Head::of(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        ))
        .unwrap_err();
        assert_eq!(e["error"]["code"], -32602);
        assert!(
            e["error"]["message"]
                .as_str()
                .unwrap()
                .contains(META_CLIENT_CAPABILITIES)
        );
        let old = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": {
            META_PROTOCOL_VERSION: "2025-11-25", META_CLIENT_CAPABILITIES: {}}}});
        let e = check_meta(&Head::of(&old)).unwrap_err();
        assert_eq!(e["id"], 2);
        assert_eq!(e["error"]["code"], code::UNSUPPORTED_PROTOCOL_VERSION);
        assert_eq!(e["error"]["data"]["supported"], json!([MODERN_VERSION]));
    }

    #[test]
    fn a_child_serves_2026_when_its_discover_result_lists_it() {
        assert!(serves_modern(&Ok(
            json!({"supportedVersions": ["2026-07-28", "2025-11-25"]})
        )));
        assert!(!serves_modern(&Ok(
            json!({"supportedVersions": ["2025-11-25"]})
        )));
        assert!(!serves_modern(&Err(
            json!({"code": -32601, "message": "Method not found"})
        )));
    }

    #[test]
    fn results_become_complete_and_lists_cacheable() {
        let mut r = json!({"tools": []});
        complete(&mut r, &Completion::live("tools/list"));
        assert_eq!(
            r,
            json!({"tools": [], "resultType": "complete", "ttlMs": 0, "cacheScope": "private"})
        );
        let mut r = json!({"content": []});
        complete(&mut r, &Completion::live("tools/call"));
        assert_eq!(r, json!({"content": [], "resultType": "complete"}));
    }

    #[test]
    fn discover_is_derived_from_initialize() {
        let init = json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {"listChanged": true},
            "resources": {"subscribe": true, "listChanged": false}, "tasks": {}},
            "serverInfo": {"name": "db", "version": "1"}, "instructions": "use it"});
        let d = discover_from_initialize(&init, DiscoverFrom::EraBridge);
        assert_eq!(
            d["supportedVersions"],
            json!([MODERN_VERSION, "2025-06-18"])
        );
        assert_eq!(
            d["capabilities"],
            json!({"tools": {"listChanged": true}, "resources": {"listChanged": false}})
        );
        assert_eq!(d["_meta"][META_SERVER_INFO]["name"], "db");
        assert_eq!(d["instructions"], "use it");
        assert_eq!(d["resultType"], "complete");
        assert_eq!(d["cacheScope"], "private");
        assert_eq!(d["ttlMs"], 0);
    }

    #[test]
    fn listen_filter_honours_only_advertised_list_changes() {
        let caps = json!({"tools": {"listChanged": true}, "prompts": {}});
        let f = Filter::accept(
            &json!({"toolsListChanged": true, "promptsListChanged": true, "resourceSubscriptions": ["a"]}),
            &caps,
        );
        assert_eq!(f.to_json(), json!({"toolsListChanged": true}));
        assert!(f.wants("notifications/tools/list_changed"));
        assert!(!f.wants("notifications/prompts/list_changed"));
    }
}
