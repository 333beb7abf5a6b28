//! Calls ([`Call`], link revision 2): one MCP 2026-07-28 request served without an MCP session.
//! A call is an [`Exchange`] opened on the daemon by a `call` frame that carries its request,
//! living on that daemon instance only, and ended once its request is answered (after the
//! answer was acknowledged) or its client is gone. It is not visible to clients as a session,
//! not counted as one, not kept in the store, and has no standalone stream: a daemon message
//! related to no request of it is unmatched, and a server → client request to it is refused.

use std::{ops::Deref, sync::Arc};

use serde_json::Value;
use tokio::time::Instant;

use protocol::{
    frame::RelayFrame,
    head,
    ids::SessionId,
    jsonrpc::{self, IdKey, code},
    mcp::SUBSCRIPTIONS_LISTEN,
};

use super::{
    Bridge, Hub, Link, ReplySink, SendError,
    exchange::{Exchange, Held},
};
use crate::auth::BridgePrincipal;

/// One MCP 2026-07-28 request served without a session (module docs).
#[derive(Debug)]
pub(crate) struct Call {
    /// Its `sid` (`c` + random), bridge, principal, server and its one request in flight.
    pub(crate) exchange: Exchange,
}

impl Deref for Call {
    type Target = Exchange;

    fn deref(&self) -> &Exchange {
        &self.exchange
    }
}

impl Hub {
    /// Creates the call that carries one MCP 2026-07-28 request to `server` on `bridge` for
    /// `principal`. Its id is `c` + 256 random bits (session ids always hold a `.`, so the two
    /// never meet). Calls are bounded by the bridge's in-flight limit when their request is
    /// registered, not by the bound on sessions.
    pub(super) fn create_call(
        &self,
        bridge: Arc<Bridge>,
        server: &str,
        principal: BridgePrincipal,
    ) -> Arc<Call> {
        let sid = SessionId::new(crate::auth::random_secret("c"));
        let c = Arc::new(Call {
            exchange: Exchange::new(sid.clone(), bridge, server, principal),
        });
        self.exchanges.lock().insert(sid, Held::Call(c.clone()));
        c
    }

    /// Registers the request `message` (id `id`) of call `c`, answered to `sink`: a
    /// `subscriptions/listen` counts as a subscription, anything else as a request in flight
    /// ([`Hub::register`]).
    ///
    /// # Errors
    /// As [`Hub::register`].
    pub(super) fn register_call(
        &self,
        c: &Call,
        id: &Value,
        message: &Value,
        sink: ReplySink,
    ) -> Result<(), SendError> {
        let listen = head::peek::method(message) == Some(SUBSCRIPTIONS_LISTEN);
        self.register(c, listen, id, message, sink)
    }

    /// Sends a client message of call `c` to `link`: its request as the `call` frame that opens
    /// it, anything after (a cancellation, an answer to a refused request) as `rpc`.
    ///
    /// # Errors
    /// [`SendError::Ended`] for an ended call or one opened on another daemon instance (a call
    /// lives on the instance its request went to); otherwise as [`Hub::send_session`].
    pub(super) fn send_call(&self, c: &Call, link: &Link, message: Value) -> Result<(), SendError> {
        let mut g = c.state.lock();
        if g.ended {
            return Err(SendError::Ended);
        }
        g.last_active = Instant::now();
        if g.opened_on.as_ref() == Some(&link.instance_id) {
            return self.send_rpc(c, &mut g, link, message);
        }
        if g.opened_on.is_some() {
            return Err(SendError::Ended);
        }
        let deliver_by = self.await_acceptance(c, &mut g, link, &message);
        link.tx
            .try_send(RelayFrame::Call {
                sid: c.sid.clone(),
                server: c.server.clone(),
                principal: c.principal.id.clone(),
                role: c.principal.role.as_str().to_owned(),
                message,
                deliver_by,
            })
            .map_err(|e| SendError::of_link(&c.bridge, e))?;
        g.opened_on = Some(link.instance_id.clone());
        Ok(())
    }

    /// The live call of `principal` on `bridge`/`server` whose request has id `id`, if exactly
    /// one matches (for a `notifications/cancelled` a 2026-07-28 client POSTs).
    pub(super) fn find_call(
        &self,
        bridge: &str,
        server: &str,
        principal: &BridgePrincipal,
        id: &Value,
    ) -> Option<Arc<Call>> {
        let key = IdKey::of(id);
        let mut found = self
            .bridge_exchanges(bridge)
            .into_iter()
            .filter_map(|h| match h {
                Held::Call(c)
                    if c.server == server
                        && c.principal == *principal
                        && c.state.lock().pending.contains(&key) =>
                {
                    Some(c)
                }
                _ => None,
            });
        let first = found.next()?;
        found.next().is_none().then_some(first)
    }

    /// The client of call `c` is gone before its answer (MCP 2026-07-28 Basic › Transports ›
    /// Streamable HTTP § Cancellation: closing the response stream cancels the request): the
    /// daemon gets `notifications/cancelled` for the request and `close` for the call. Nothing
    /// happens when the call was already answered.
    pub(super) fn cancel_call(&self, c: &Call, id: &Value, reason: &str) {
        let Some(p) = c.state.lock().pending.end(&IdKey::of(id)) else {
            return;
        };
        tracing::debug!(bridge = %c.bridge.name, reason, "cancelling a call");
        self.finish_pending(c, p, None);
        if let Some(link) = c.bridge.active() {
            let _ = self.send_call(c, &link, jsonrpc::cancelled(id, reason));
        }
        self.end_session(&c.sid, code::UNAVAILABLE, reason, true);
    }

    /// Ends call `c` once its request is answered (after the answer was acknowledged), telling
    /// the daemon with `close`. A call still awaited is left alone.
    pub(crate) fn close_if_answered(&self, c: &Call) {
        let answered = {
            let g = c.state.lock();
            g.pending.is_empty() && g.opened_on.is_some()
        };
        if answered {
            self.end_session(&c.sid, code::UNAVAILABLE, "the call was answered", true);
        }
    }
}
