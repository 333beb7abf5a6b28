//! MCP sessions hosted for the relay: one per `sid`, each the built-in runtime (an rmcp
//! [`McpServer`] over a channel transport) or an upstream child process.
//!
//! Outbound messages get a per-session sequence number and are retained until the relay
//! acknowledges them (`ack`), so a same-instance reconnect can replay what the relay may not have
//! committed (DESIGN §5 steps 5 and 8). A message is sent on the current link only when its
//! session has been attached to that link's epoch — after replaying its older messages — so
//! sequence numbers reach the relay in order. The response to the `initialize` a session was
//! opened with is swallowed: the relay already answered it.

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
use runtime::{McpServer, Principal, Profile, Runtime};
use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    sync::mpsc,
};
use tokio_util::sync::CancellationToken;

use protocol::{
    frame::{DaemonFrame, RUNTIME_SERVER},
    limits::RELAY_FRAME_MAX_BYTES,
};

use crate::servers::{self, UpstreamSpec};

/// Bytes of unacknowledged output kept per session; beyond it the oldest is dropped (and logged).
const RETAINED_MAX_BYTES: usize = 64 * 1024 * 1024;
/// Client messages queued for one session's server.
const INBOUND_QUEUE: usize = 256;
/// Sessions one daemon hosts at once; an `open` beyond it is answered with `closed`.
const MAX_SESSIONS: usize = 256;

/// JSON-RPC id → key (numbers and strings never collide).
fn id_key(id: &Value) -> String {
    match id {
        Value::String(s) => format!("s:{s}"),
        other => format!("n:{other}"),
    }
}

#[derive(Debug, Default)]
struct Retention {
    next_seq: u64,
    unacked: VecDeque<(u64, Option<Value>, Value, usize)>,
    bytes: usize,
    /// Link epoch this session's output is being sent on (0 = none).
    epoch: u64,
    swallow: Option<String>,
}

enum Input {
    Runtime(mpsc::Sender<ClientJsonRpcMessage>),
    Upstream(mpsc::Sender<String>),
}

/// One hosted session.
pub(crate) struct Host {
    sid: String,
    role: String,
    upstream_tools: Option<Arc<HashSet<String>>>,
    input: Input,
    out: Mutex<Retention>,
    /// Client requests forwarded and not yet answered: key → (id, method).
    inflight: Mutex<HashMap<String, (Value, String)>>,
    stop: CancellationToken,
}

/// Current link: its epoch and frame sender.
#[derive(Default)]
struct LinkSlot {
    epoch: u64,
    tx: Option<mpsc::Sender<DaemonFrame>>,
}

/// All hosted sessions of this daemon instance.
pub struct Sessions {
    hosts: Mutex<HashMap<String, Arc<Host>>>,
    link: Mutex<LinkSlot>,
    runtime: Arc<Runtime>,
    upstreams: HashMap<String, (UpstreamSpec, Arc<HashSet<String>>)>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions").finish_non_exhaustive()
    }
}

/// Maps a relay role to the runtime profile it may use at most.
fn role_profile(role: &str) -> Profile {
    match role {
        "owner" => Profile::Full,
        "operator" => Profile::Agent,
        "editor" => Profile::Edit,
        _ => Profile::Review,
    }
}

impl Sessions {
    /// Hosts sessions of `runtime` and of `upstreams` (with the names of their read-only tools).
    pub fn new(
        runtime: Arc<Runtime>,
        upstreams: Vec<(UpstreamSpec, HashSet<String>)>,
    ) -> Arc<Self> {
        Arc::new(Self {
            hosts: Mutex::new(HashMap::new()),
            link: Mutex::new(LinkSlot::default()),
            runtime,
            upstreams: upstreams
                .into_iter()
                .map(|(s, t)| (s.name.clone(), (s, Arc::new(t))))
                .collect(),
        })
    }

    /// Opens session `sid` (a second open of the same sid is ignored).
    pub fn open(
        self: &Arc<Self>,
        sid: &str,
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
        let swallow = initialize.get("id").map(id_key);
        let host = if server == RUNTIME_SERVER {
            let (tx, rx) = mpsc::channel(INBOUND_QUEUE);
            let host = Arc::new(Host {
                sid: sid.to_owned(),
                role: role.to_owned(),
                upstream_tools: None,
                input: Input::Runtime(tx),
                out: Mutex::new(Retention {
                    swallow,
                    ..Default::default()
                }),
                inflight: Mutex::new(HashMap::new()),
                stop: stop.clone(),
            });
            let access = self.runtime.access(Some(role_profile(role)));
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
                sid: sid.to_owned(),
                role: role.to_owned(),
                upstream_tools: Some(read_only.clone()),
                input: Input::Upstream(tx),
                out: Mutex::new(Retention {
                    swallow,
                    ..Default::default()
                }),
                inflight: Mutex::new(HashMap::new()),
                stop: stop.clone(),
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
            h.insert(sid.to_owned(), host.clone());
        }
        self.attach_host(&host);
        self.rpc(sid, initialize);
    }

    /// A client message for session `sid`.
    pub fn rpc(self: &Arc<Self>, sid: &str, message: Value) {
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
        if let (Some(m), Some(id)) = (&method, &id) {
            // Upstream authority: restricted roles may only call read-only tools.
            if m == "tools/call"
                && let Some(ro) = &host.upstream_tools
                && !servers::ROLES
                    .iter()
                    .any(|(r, all)| *r == host.role && *all)
            {
                let tool = message
                    .pointer("/params/name")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if !ro.contains(tool) {
                    let err = json!({"code": "policy_denied", "message": format!("{tool} is not read-only and role {} may only call read-only tools of this server", host.role), "retryable": false, "side_effects_started": false});
                    self.emit(&host, json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": err.to_string()}], "isError": true}}), None);
                    return;
                }
            }
            if let Ok(mut f) = host.inflight.lock() {
                f.insert(id_key(id), (id.clone(), m.clone()));
            }
        }
        if method.as_deref() == Some("notifications/cancelled")
            && let Some(rid) = message.pointer("/params/requestId")
            && let Ok(mut f) = host.inflight.lock()
        {
            f.remove(&id_key(rid));
        }
        match &host.input {
            Input::Runtime(tx) => match serde_json::from_value::<ClientJsonRpcMessage>(message) {
                Ok(m) => {
                    if tx.try_send(m).is_err() {
                        tracing::warn!(sid, "session input queue full; message dropped");
                    }
                }
                Err(e) => {
                    if let Some(id) = id {
                        self.emit(&host, json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32600, "message": format!("invalid message: {e}")}}), None);
                    }
                }
            },
            Input::Upstream(tx) => {
                if tx.try_send(message.to_string()).is_err() {
                    tracing::warn!(sid, "upstream input queue full; message dropped");
                }
            }
        }
    }

    /// The relay committed session `sid`'s messages up to `seq`.
    pub fn ack(&self, sid: &str, seq: u64) {
        if let Some(h) = self.host(sid)
            && let Ok(mut r) = h.out.lock()
        {
            while r.unacked.front().is_some_and(|(s, ..)| *s <= seq) {
                if let Some((.., n)) = r.unacked.pop_front() {
                    r.bytes -= n;
                }
            }
        }
    }

    /// Ends session `sid` (its server is stopped).
    pub fn close(&self, sid: &str) {
        if let Some(h) = self.hosts.lock().ok().and_then(|mut m| m.remove(sid)) {
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
            h.stop.cancel();
        }
    }

    /// Sessions hosted.
    pub fn len(&self) -> usize {
        self.hosts.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// Whether no session is hosted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The link is gone: keep everything, send nothing until a link is resumed.
    pub fn detach(&self) {
        if let Ok(mut l) = self.link.lock() {
            l.tx = None;
        }
    }

    /// A new link is ready after `resume`: sessions not in `keep` are ended, in-flight requests
    /// of kept sessions not in `keep_requests` are cancelled, and each kept session's unacknowledged
    /// output is replayed on `tx` before anything new.
    pub fn resume(
        self: &Arc<Self>,
        keep: &[String],
        keep_requests: &[(String, Value)],
        tx: mpsc::Sender<DaemonFrame>,
    ) {
        let keep: HashSet<&String> = keep.iter().collect();
        let keep_req: HashSet<(String, String)> = keep_requests
            .iter()
            .map(|(s, id)| (s.clone(), id_key(id)))
            .collect();
        if let Ok(mut l) = self.link.lock() {
            l.epoch += 1;
            l.tx = Some(tx);
        }
        let all: Vec<Arc<Host>> = self
            .hosts
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        for h in all {
            if !keep.contains(&h.sid) {
                tracing::info!(sid = %h.sid, "ending a session the relay no longer awaits");
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
                self.rpc(&h.sid, json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id, "reason": "the relay no longer awaits this request"}}));
            }
            self.attach_host(&h);
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
            let _ = tx.try_send(DaemonFrame::Rpc {
                sid: h.sid.clone(),
                seq: *seq,
                related: related.clone(),
                message: message.clone(),
            });
        }
        r.epoch = epoch;
    }

    fn host(&self, sid: &str) -> Option<Arc<Host>> {
        self.hosts.lock().ok()?.get(sid).cloned()
    }

    /// A server message of session `h`.
    fn emit(&self, h: &Host, mut message: Value, related: Option<Value>) {
        let is_response = message.get("method").is_none();
        let mut method = None;
        if is_response && let Some(id) = message.get("id") {
            let key = id_key(id);
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
                message["result"] = servers::filter_tools(&h.role, result);
            }
        }
        let size = message.to_string().len();
        if size > RELAY_FRAME_MAX_BYTES - 1024 {
            tracing::warn!(sid = %h.sid, size, "a server message is too large for the relay link; replaced by an error");
            message = too_large(&message, method.as_deref(), size);
        }
        let Ok(mut r) = h.out.lock() else { return };
        if is_response && r.swallow.is_some() && message.get("id").map(id_key) == r.swallow {
            r.swallow = None;
            return;
        }
        r.next_seq += 1;
        let seq = r.next_seq;
        r.unacked
            .push_back((seq, related.clone(), message.clone(), size));
        r.bytes += size;
        while r.bytes > RETAINED_MAX_BYTES {
            if let Some((s, .., n)) = r.unacked.pop_front() {
                r.bytes -= n;
                tracing::error!(sid = %h.sid, seq = s, "dropped an unacknowledged message: retention full while the relay is unreachable");
            }
        }
        let tx = self
            .link
            .lock()
            .ok()
            .and_then(|l| (l.epoch == r.epoch).then(|| l.tx.clone()).flatten());
        if let Some(tx) = tx {
            let _ = tx.try_send(DaemonFrame::Rpc {
                sid: h.sid.clone(),
                seq,
                related,
                message,
            });
        }
    }

    fn send_closed(&self, sid: &str, reason: &str) {
        let tx = self.link.lock().ok().and_then(|l| l.tx.clone());
        if let Some(tx) = tx {
            let _ = tx.try_send(DaemonFrame::Closed {
                sid: sid.to_owned(),
                reason: reason.to_owned(),
            });
        }
    }

    /// A session's server stopped on its own.
    fn ended(&self, sid: &str, reason: &str) {
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
    sessions: Arc<Sessions>,
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
    sessions: Arc<Sessions>,
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
        let e = runtime::ToolError::limit(format!("the call completed, but {advice}"))
            .with_side_effects();
        return json!({"jsonrpc": "2.0", "id": id, "result": runtime::server::error_result(&e)});
    }
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603, "message": advice}})
}
