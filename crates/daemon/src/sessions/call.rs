//! Calls (`call`, link revision 2): one MCP 2026-07-28 request served without a session
//! ([`HostedCall`]), hosted under its `sid` beside the sessions, sharing their retention, and
//! ended by its response (or its cancellation).

use std::sync::{
    Arc, OnceLock,
    atomic::{AtomicBool, Ordering},
};

use rmcp::model::ClientJsonRpcMessage;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use protocol::{
    delivery::InFlight,
    frame::RUNTIME_SERVER,
    head::{
        Head,
        result::{Completion, complete},
    },
    ids::SessionId,
    jsonrpc::{IdKey, code},
};

use super::{Host, Hosted, HostedCall, HostedSessions, INBOUND_QUEUE, MAX_SESSIONS, guard::denial};
use crate::bridge;

impl HostedSessions {
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
        let head = Head::of(&message);
        let (Some(id), Some(method)) =
            (head.id_member().cloned(), head.method().map(str::to_owned))
        else {
            tracing::warn!(sid = %sid.log_tag(), "a call frame without a request; ignored");
            return;
        };
        let full = {
            let h = self.hosts.lock();
            if h.contains_key(sid) {
                return;
            }
            h.len() >= MAX_SESSIONS
        };
        let runtime = server == RUNTIME_SERVER;
        let upstream = (!runtime)
            .then(|| self.upstreams.get(server).cloned())
            .flatten();
        let (input, rx) = if runtime && !full {
            let (tx, rx) = mpsc::channel(INBOUND_QUEUE);
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let key = IdKey::of(&id);
        let host = Arc::new(HostedCall {
            hosted: Hosted::new(
                sid,
                role,
                upstream.as_ref().map(|(_, ro)| ro.clone()),
                in_flight_of(&key, &id, &method),
            ),
            id: id.clone(),
            key,
            input,
            ended: AtomicBool::new(false),
            answered_at: OnceLock::new(),
        });
        self.hosts
            .lock()
            .insert(sid.clone(), Host::Call(host.clone()));
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
            self.serve_runtime_call(&host, rx, principal, &head, message);
            return;
        }
        let Some((spec, _)) = upstream else { return };
        if let Err(e) = bridge::check_meta(&head) {
            self.emit(&host, e, None);
            return;
        }
        if let Some(mut denied) = denial(&host, &head) {
            if let Some(r) = denied.get_mut("result") {
                complete(r, &Completion::live(&method));
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
                Ok(l) => l.submit(&sessions, &host, &head, message),
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
        host: &Arc<HostedCall>,
        rx: mpsc::Receiver<ClientJsonRpcMessage>,
        principal: &str,
        head: &Head,
        message: Value,
    ) {
        let serve = self.serve_runtime(&Host::Call(host.clone()), rx, principal);
        let sessions = self.clone();
        let h = host.clone();
        tokio::spawn(async move {
            serve.await;
            if h.ended.load(Ordering::Relaxed) {
                return;
            }
            sessions.emit(
                &h,
                bridge::error(
                    &h.id,
                    code::INTERNAL_ERROR,
                    "the server ended before answering",
                    None,
                ),
                None,
            );
        });
        match (
            runtime::mcp::client_message::client_message(head, message),
            &host.input,
        ) {
            (Ok(m), Some(tx)) => {
                let _ = tx.try_send(m);
            }
            (Err(e), _) => self.emit(
                host,
                bridge::error(
                    &host.id,
                    code::INVALID_REQUEST,
                    &format!("invalid message: {e}"),
                    None,
                ),
                None,
            ),
            _ => {}
        }
    }

    /// A client message for call `c`: it takes none but the cancellation of its request, which
    /// ends it.
    pub(super) fn call_message(&self, c: &HostedCall, head: &Head) {
        if head.cancelled_request().map(IdKey::of).as_ref() == Some(&c.key) {
            tracing::debug!(sid = %c.sid, "call cancelled by the client");
            Self::end_call(c);
            self.hosts.lock().remove(&c.sid);
        } else {
            tracing::debug!(sid = %c.sid, method = ?head.method(), "ignoring a client message for a call");
        }
    }

    /// Marks call `c`'s output complete (nothing more is emitted) and stops what serves it.
    pub(super) fn end_call(c: &HostedCall) {
        {
            let _out = c.out.lock();
            c.ended.store(true, Ordering::Relaxed);
        }
        c.stop.cancel();
    }
}

/// A call's in-flight table: its one request.
fn in_flight_of(key: &IdKey, id: &Value, method: &str) -> InFlight<(Value, String)> {
    let mut t = InFlight::new();
    let _ = t.begin(key.clone(), None, (id.clone(), method.to_owned()));
    t
}
