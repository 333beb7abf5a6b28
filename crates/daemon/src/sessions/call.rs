//! Calls (`call`, link revision 2): one MCP 2026-07-28 request served without a session,
//! hosted under its `sid` like a session and ended by its response (or its cancellation).

use std::{collections::HashMap, sync::Arc};

use lock::Lock;

use rmcp::model::ClientJsonRpcMessage;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use protocol::{
    frame::RUNTIME_SERVER,
    head::result::{Completion, complete},
    ids::SessionId,
    jsonrpc::{IdKey, code},
};

use super::{
    CallOf, Host, HostedSessions, INBOUND_QUEUE, Input, MAX_SESSIONS, guard::denial,
    retention::Retention,
};
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
            (Input::Runtime(tx), Some(rx))
        } else {
            (Input::None, None)
        };
        let host = Arc::new(Host {
            sid: sid.clone(),
            role: crate::role_named(role),
            upstream_tools: upstream.as_ref().map(|(_, ro)| ro.clone()),
            input,
            out: Lock::new(Retention::default()),
            inflight: Lock::new(HashMap::from([(
                IdKey::of(&id),
                (id.clone(), method.clone()),
            )])),
            stop: CancellationToken::new(),
            call: Some(CallOf {
                key: IdKey::of(&id),
                id: id.clone(),
            }),
        });
        self.hosts.lock().insert(sid.clone(), host.clone());
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
    pub(super) fn serve_runtime_call(
        self: &Arc<Self>,
        host: &Arc<Host>,
        rx: mpsc::Receiver<ClientJsonRpcMessage>,
        principal: &str,
        message: Value,
    ) {
        let serve = self.serve_runtime(host, rx, principal);
        let sessions = self.clone();
        let h = host.clone();
        tokio::spawn(async move {
            serve.await;
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
    pub(super) fn end_call(&self, h: &Host) {
        if h.call.is_some() {
            h.out.lock().ended = true;
            h.stop.cancel();
        }
    }
}
