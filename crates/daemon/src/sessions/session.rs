//! Sessions (`open`): a session's server — the runtime over the channel transport, or an
//! upstream child — started for the relay's `open`, and the client messages (`rpc`) it takes,
//! recorded in flight and filtered by role before they reach the server.

use std::{collections::HashMap, sync::Arc};

use lock::Lock;

use rmcp::model::ClientJsonRpcMessage;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use protocol::{
    frame::RUNTIME_SERVER,
    ids::SessionId,
    jsonrpc::{self, IdKey, code},
};

use super::{
    Host, HostedSessions, INBOUND_QUEUE, Input, MAX_SESSIONS, guard::denial, retention::Retention,
    upstream::run_upstream,
};
use crate::servers;

impl HostedSessions {
    /// Opens session `sid` (a second open of the same sid is ignored).
    pub fn open(
        self: &Arc<Self>,
        sid: &SessionId,
        server: &str,
        principal: &str,
        role: &str,
        initialize: Value,
    ) {
        let hosts = self.hosts.lock();
        if hosts.contains_key(sid) {
            return;
        }
        if hosts.len() >= MAX_SESSIONS {
            drop(hosts);
            self.send_closed(
                sid,
                &format!("this daemon already hosts {MAX_SESSIONS} sessions"),
            );
            return;
        }
        drop(hosts);
        let stop = CancellationToken::new();
        let swallow = initialize.get("id").map(IdKey::of);
        let host = if server == RUNTIME_SERVER {
            let (tx, rx) = mpsc::channel(INBOUND_QUEUE);
            let host = Arc::new(Host {
                sid: sid.clone(),
                role: crate::role_named(role),
                upstream_tools: None,
                input: Input::Runtime(tx),
                out: Lock::new(Retention {
                    swallow,
                    ..Default::default()
                }),
                inflight: Lock::new(HashMap::new()),
                stop: stop.clone(),
                call: None,
            });
            let serve = self.serve_runtime(&host, rx, principal);
            let sessions = self.clone();
            let h = host.clone();
            tokio::spawn(async move {
                serve.await;
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
                out: Lock::new(Retention {
                    swallow,
                    ..Default::default()
                }),
                inflight: Lock::new(HashMap::new()),
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
        self.hosts.lock().insert(sid.clone(), host.clone());
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
                self.hosts.lock().remove(sid);
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
            host.inflight
                .lock()
                .insert(IdKey::of(id), (id.clone(), m.clone()));
        }
        if method.as_deref() == Some("notifications/cancelled")
            && let Some(rid) = message.pointer("/params/requestId")
        {
            host.inflight.lock().remove(&IdKey::of(rid));
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
}
