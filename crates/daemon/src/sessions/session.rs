//! Sessions (`open`): a session's server — the runtime over the channel transport, or an
//! upstream child — started for the relay's `open`, and the client messages (`rpc`) it takes,
//! recorded in flight and filtered by role before they reach the server.

use std::sync::Arc;

use lock::Lock;

use serde_json::Value;
use tokio::sync::mpsc;

use protocol::{
    delivery::InFlight,
    frame::RUNTIME_SERVER,
    head::{self, Head},
    ids::SessionId,
    jsonrpc::{self, IdKey, code},
};

use super::{
    Host, Hosted, HostedSession, HostedSessions, INBOUND_QUEUE, MAX_SESSIONS, SessionInput,
    guard::denial, upstream::run_upstream,
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
        let swallow = head::peek::id_member(&initialize).map(IdKey::of);
        let host = if server == RUNTIME_SERVER {
            let (tx, rx) = mpsc::channel(INBOUND_QUEUE);
            let host = Arc::new(HostedSession {
                hosted: Hosted::new(sid, role, None, InFlight::new()),
                input: SessionInput::Runtime(tx),
                swallow: Lock::new(swallow),
            });
            let serve = self.serve_runtime(&Host::Session(host.clone()), rx, principal);
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
            let host = Arc::new(HostedSession {
                hosted: Hosted::new(sid, role, Some(read_only.clone()), InFlight::new()),
                input: SessionInput::Upstream(tx),
                swallow: Lock::new(swallow),
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
        self.hosts
            .lock()
            .insert(sid.clone(), Host::Session(host.clone()));
        self.attach_host(&host);
        self.rpc(sid, initialize);
    }

    /// A client message for session or call `sid` (a call takes only the cancellation of its
    /// request).
    pub fn rpc(self: &Arc<Self>, sid: &SessionId, message: Value) {
        let host = match self.host(sid) {
            Some(Host::Session(s)) => s,
            Some(Host::Call(c)) => return self.call_message(&c, &Head::of(&message)),
            None => {
                self.send_closed(
                    sid,
                    "unknown session (the daemon restarted or the session ended)",
                );
                return;
            }
        };
        let head = Head::of(&message);
        if let (Some(m), Some(id)) = (head.method(), head.id_member()) {
            if let Some(denied) = denial(&host, &head) {
                self.emit(&host, denied, None);
                return;
            }
            // The relay refuses a duplicate id before it sends one, so a refusal here is a replay.
            let _ = host
                .inflight
                .lock()
                .begin(IdKey::of(id), None, (id.clone(), m.to_owned()));
        }
        if let Some(rid) = head.cancelled_request() {
            host.inflight.lock().end(&IdKey::of(rid));
        }
        match &host.input {
            SessionInput::Runtime(tx) => {
                match runtime::mcp::client_message::client_message(&head, message) {
                    Ok(m) => {
                        if tx.try_send(m).is_err() {
                            tracing::warn!(sid = %sid.log_tag(), "session input queue full; message dropped");
                        }
                    }
                    Err(e) => {
                        if let Some(id) = head.id_member() {
                            self.emit(
                                &host,
                                jsonrpc::error(
                                    id,
                                    code::INVALID_REQUEST,
                                    &format!("invalid message: {e}"),
                                    None,
                                ),
                                None,
                            );
                        }
                    }
                }
            }
            SessionInput::Upstream(tx) => {
                if tx.try_send(message.to_string()).is_err() {
                    tracing::warn!(sid = %sid.log_tag(), "upstream input queue full; message dropped");
                }
            }
        }
    }
}
