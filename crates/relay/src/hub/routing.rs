//! Routing between HTTP clients and daemons: a client request is registered on its session or
//! call (bounded per bridge, answered to its [`ReplySink`]) and sent, opening the session on the
//! daemon first when it is not open there (a call is opened by its request, `call.rs`); a daemon
//! message goes to exactly one place (see [`Hub::deliver`]).

use std::sync::{Arc, atomic::Ordering};

use serde_json::{Value, json};
use tokio::time::Instant;

use crate::limits::{CALL_BUDGET_MAX, RELAY_OVERHEAD, SUBSCRIPTION_MAX, SUBSCRIPTIONS_PER_BRIDGE};
use protocol::{
    delivery::Arrival,
    frame::RelayFrame,
    head::{self, Head},
    ids::{InstanceId, SessionId},
    jsonrpc::{self, IdKey, code},
};

use super::{
    Call, Hub, Link, ReplySink, SendError, Session,
    delivery::Acceptance,
    exchange::{Exchange, ExchangeState, Held, Pending},
};
use crate::{metrics::Metrics, stream::SseStream};

/// The notification a client sends once it has its `initialize` result.
const INITIALIZED: &str = "notifications/initialized";

/// Client messages queued for a daemon that is away.
const OUTBOX_MAX: usize = 256;

/// What became of a daemon message ([`Hub::deliver`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a message for an unknown session is worth noticing"]
pub(crate) enum Delivery {
    /// Routed to its one place (or refused, for a server → client request to a call).
    Routed,
    /// A replay of a `seq` already routed: dropped.
    Duplicate,
    /// It matched no request and no stream (counted in the metrics).
    Unmatched,
    /// No such session (counted in the metrics): it ended, it never existed, or it is not one
    /// of the sending socket's (another bridge's, or open on another daemon instance).
    UnknownSession,
    /// Its `seq` is more than [`DAEMON_SEQ_WINDOW`](protocol::limits::DAEMON_SEQ_WINDOW) past the session's last one: a protocol
    /// error, nothing routed.
    OutOfWindow,
}

/// The verified daemon socket a frame came from: its bridge and daemon instance. A daemon's
/// frames reach only the sessions of its own bridge that are open on its own instance (a daemon
/// of bridge B can neither answer nor close bridge A's sessions).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LinkOrigin<'a> {
    /// The bridge the socket's hello was verified for.
    pub(crate) bridge: &'a str,
    /// The daemon instance the hello named.
    pub(crate) instance: &'a InstanceId,
}

/// Why a client message could not be queued for an absent daemon ([`Hub::queue`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{OUTBOX_MAX} client messages are already queued for the daemon")]
pub(crate) struct OutboxFull;

/// Where a daemon message goes.
enum Target {
    /// The response to a pending request: its sink gets it as its last message.
    Finish(Pending),
    /// A message related to a pending request with an SSE stream.
    Stream(Arc<SseStream>),
    /// The session's standalone stream.
    Standalone(Arc<Session>),
    /// Nowhere: counted.
    Unmatched,
    /// A server → client request to a call: answered with an error, never delivered.
    Refuse(Arc<Call>, Value),
}

impl Hub {
    /// Registers request `message` (with id `id`) of exchange `e` as in flight, answered to
    /// `sink`.
    ///
    /// A `listen` request (a call's `subscriptions/listen`) counts against
    /// [`SUBSCRIPTIONS_PER_BRIDGE`] instead of the in-flight limit, and its deadline is
    /// [`SUBSCRIPTION_MAX`] instead of [`CALL_BUDGET_MAX`] + [`RELAY_OVERHEAD`].
    ///
    /// # Errors
    /// [`SendError::TooMany`] over the bridge's in-flight (or subscription) limit;
    /// [`SendError::Ended`] for an ended session or call; [`SendError::DuplicateId`].
    pub(super) fn register(
        &self,
        e: &Exchange,
        listen: bool,
        id: &Value,
        message: &Value,
        sink: ReplySink,
    ) -> Result<(), SendError> {
        let key = IdKey::of(id);
        let max = if listen {
            SUBSCRIPTIONS_PER_BRIDGE
        } else {
            self.config.max_inflight_per_bridge
        };
        {
            // Lock order: bridge, then session (see the hub's module docs).
            let mut b = e.bridge.state.lock();
            if (if listen { b.listens } else { b.inflight }) >= max {
                return Err(SendError::TooMany(max));
            }
            let mut g = e.state.lock();
            if g.ended {
                return Err(SendError::Ended);
            }
            let token = message
                .pointer("/params/_meta/progressToken")
                .filter(|t| t.is_string() || t.is_number())
                .map(IdKey::of);
            let budget = if listen {
                SUBSCRIPTION_MAX
            } else {
                CALL_BUDGET_MAX + RELAY_OVERHEAD
            };
            let pending = Pending {
                id: id.clone(),
                sink,
                deadline: Instant::now() + budget,
                listen,
                acceptance: Acceptance::NotAsked,
            };
            if g.pending.begin(key, token, pending).is_err() {
                return Err(SendError::DuplicateId);
            }
            g.last_active = Instant::now();
            if listen {
                b.listens += 1;
            } else {
                b.inflight += 1;
                if b.link.is_detached() {
                    // The link went between the caller's look and now: the request waits with
                    // the others (released with them).
                    Metrics::add(&self.metrics.detached, 1);
                }
            }
        }
        if listen {
            Metrics::add(&self.metrics.subscriptions, 1);
        } else {
            Metrics::add(&self.metrics.inflight, 1);
        }
        Ok(())
    }

    /// Registers request `message` (id `id`) of session `s`, answered to `sink`, after settling
    /// what of `s` is overdue; counts as activity of the session.
    ///
    /// # Errors
    /// As [`Hub::register`].
    pub(super) fn register_request(
        &self,
        s: &Arc<Session>,
        id: &Value,
        message: &Value,
        sink: ReplySink,
    ) -> Result<(), SendError> {
        self.settle_overdue(&Held::Session(s.clone()), Instant::now());
        self.register(s, false, id, message, sink)?;
        self.persist_touch(s);
        Ok(())
    }

    /// Withdraws a registered request without an answer (it could not be sent): its sink is
    /// finished without a message (a stream ends; a JSON waiter learns from the dropped sender).
    pub(super) fn unregister(&self, e: &Exchange, id: &Value) {
        let p = e.state.lock().pending.end(&IdKey::of(id));
        if let Some(p) = p {
            self.finish_pending(e, p, None);
        }
    }

    /// Sends a client message of session or call `to` to `link` ([`Hub::send_session`],
    /// [`Hub::send_call`]).
    ///
    /// # Errors
    /// As those.
    pub(super) fn send(&self, to: &Held, link: &Link, message: Value) -> Result<(), SendError> {
        match to {
            Held::Session(s) => self.send_session(s, link, message),
            Held::Call(c) => self.send_call(c, link, message),
        }
    }

    /// Sends a client message of session `s` to `link`, opening the session there first if
    /// needed (`open` with the kept `initialize`, then `notifications/initialized` when the
    /// client sent it). Open and message are queued in order under the exchange's lock.
    ///
    /// # Errors
    /// [`SendError::TooLarge`] when a frame would be over the relay frame limit (nothing of it
    /// is sent); [`SendError::Busy`] when the link's queue is full or closed; [`SendError::Ended`]
    /// for an ended session.
    pub(super) fn send_session(
        &self,
        s: &Session,
        link: &Link,
        message: Value,
    ) -> Result<(), SendError> {
        let busy = |e| SendError::of_link(&s.bridge, e);
        let mut g = s.state.lock();
        if g.ended {
            return Err(SendError::Ended);
        }
        g.last_active = Instant::now();
        if head::peek::method(&message) == Some(INITIALIZED) {
            if !s.initialized() {
                s.initialized.store(true, Ordering::Relaxed);
                self.persist_bound(s, &g);
            }
            if g.opened_on.is_none() {
                // Sent with the open, whenever that happens.
                return Ok(());
            }
        }
        if g.opened_on.as_ref() != Some(&link.instance_id) {
            link.tx
                .try_send(RelayFrame::Open {
                    sid: s.sid.clone(),
                    server: s.server.clone(),
                    principal: s.principal.id.clone(),
                    role: s.principal.role.as_str().to_owned(),
                    initialize: s.initialize.clone(),
                })
                .map_err(busy)?;
            if s.initialized() {
                link.tx
                    .try_send(RelayFrame::Rpc {
                        sid: s.sid.clone(),
                        message: json!({"jsonrpc": jsonrpc::VERSION, "method": INITIALIZED}),
                        deliver_by: None,
                    })
                    .map_err(busy)?;
            }
            g.opened_on = Some(link.instance_id.clone());
            self.persist_bound(s, &g);
        }
        self.send_rpc(s, &mut g, link, message)
    }

    /// Sends `message` of exchange `e`, open on `link`'s instance, as an `rpc` frame (`g`: its
    /// state, locked by the caller), with `deliver_by` when it is a request the daemon is to
    /// confirm ([`Hub::await_acceptance`]).
    ///
    /// # Errors
    /// As [`Hub::send_session`].
    pub(super) fn send_rpc(
        &self,
        e: &Exchange,
        g: &mut ExchangeState,
        link: &Link,
        message: Value,
    ) -> Result<(), SendError> {
        let deliver_by = self.await_acceptance(e, g, link, &message);
        link.tx
            .try_send(RelayFrame::Rpc {
                sid: e.sid.clone(),
                message,
                deliver_by,
            })
            .map_err(|err| SendError::of_link(&e.bridge, err))
    }

    /// Queues a client notification or response of session `s` for when the daemon is back.
    ///
    /// # Errors
    /// [`OutboxFull`] when [`OUTBOX_MAX`] messages are queued already.
    pub(super) fn queue(&self, s: &Session, message: Value) -> Result<(), OutboxFull> {
        if s.outbox.lock().len() >= OUTBOX_MAX {
            return Err(OutboxFull);
        }
        if head::peek::method(&message) == Some(INITIALIZED) {
            let g = s.state.lock();
            if !s.initialized() {
                s.initialized.store(true, Ordering::Relaxed);
                self.persist_bound(s, &g);
            }
            return Ok(());
        }
        let mut q = s.outbox.lock();
        if q.len() >= OUTBOX_MAX {
            return Err(OutboxFull);
        }
        q.push_back(message);
        Ok(())
    }

    /// The client cancelled request `id`: its stream ends without a response (the server sends
    /// none for a cancelled request).
    pub(super) fn cancelled(&self, e: &Exchange, id: &Value) {
        let p = e.state.lock().pending.end(&IdKey::of(id));
        if let Some(p) = p {
            self.finish_pending(e, p, None);
        }
    }

    /// Routes daemon message `seq` of session `sid` to exactly one place: a response to the
    /// request it answers (its stream or JSON waiter, as the last message); a progress
    /// notification to the stream of the request that carries its token; another message to the
    /// request the daemon names as `related`, else to the only request in flight, else to the
    /// session's standalone stream (a call has none: such a message is unmatched). A `seq` at
    /// or below the last one routed is a replay and dropped; one more than
    /// [`DAEMON_SEQ_WINDOW`](protocol::limits::DAEMON_SEQ_WINDOW) past it is [`Delivery::OutOfWindow`] (the session's
    /// [`protocol::delivery::Inbox`] classifies it). A server → client request to
    /// a call is answered with -32601 and never delivered (MCP 2026-07-28 has none). Only the
    /// sessions of `from` are reached ([`LinkOrigin`]).
    pub(crate) fn deliver(
        &self,
        from: LinkOrigin<'_>,
        sid: &SessionId,
        seq: u64,
        related: Option<&Value>,
        message: Value,
    ) -> Delivery {
        let Some(held) = self.exchange_from(from, sid) else {
            self.metrics.unmatched.fetch_add(1, Ordering::Relaxed);
            return Delivery::UnknownSession;
        };
        if self.settle_overdue(&held, Instant::now())
            && let Held::Call(c) = &held
        {
            self.close_if_answered(c);
        }
        let head = Head::of(&message);
        let is_response = head.is_response();
        let target = {
            let mut g = held.state.lock();
            match g.inbox.receive(seq) {
                Arrival::Fresh => {}
                Arrival::Duplicate => return Delivery::Duplicate,
                Arrival::OutOfWindow => return Delivery::OutOfWindow,
            }
            let is_request = !is_response && head.has_method() && head.id().is_some();
            if is_request && let Held::Call(c) = &held {
                // MCP 2026-07-28 removed server → client requests (Basic › Transports ›
                // Streamable HTTP § Receiving Messages: input requests travel inside results).
                Target::Refuse(c.clone(), head.reply_id())
            } else if is_response {
                let key = head.id_member().map(IdKey::of);
                match key.and_then(|k| g.pending.end(&k)) {
                    Some(p) => Target::Finish(p),
                    None => Target::Unmatched,
                }
            } else {
                let by_token = head
                    .progress_of()
                    .map(IdKey::of)
                    .and_then(|t| g.pending.by_progress(&t).map(|(k, _)| k.clone()));
                let key = by_token
                    .or_else(|| related.map(IdKey::of).filter(|k| g.pending.contains(k)))
                    .or_else(|| {
                        (g.pending.len() == 1)
                            .then(|| g.pending.iter().next().map(|(k, _)| k.clone()))
                            .flatten()
                    });
                match (
                    key.and_then(|k| g.pending.get(&k))
                        .and_then(|p| p.sink.related()),
                    &held,
                ) {
                    (Some(st), _) => Target::Stream(st.clone()),
                    (None, Held::Session(s)) => Target::Standalone(s.clone()),
                    // A call's client reads only its request's response (no standalone stream).
                    (None, Held::Call(_)) => Target::Unmatched,
                }
            }
        };
        match target {
            Target::Finish(p) => self.finish_pending(&held, p, Some(message)),
            Target::Stream(st) => match st.push(&message, false) {
                Ok(lost) => self.count_lost(&held, lost),
                // Its request finished meanwhile: a session's stream takes it; a call has none.
                Err(_) => {
                    if let Held::Session(s) = &held {
                        self.push_standalone(s, &message);
                    }
                }
            },
            Target::Standalone(s) => self.push_standalone(&s, &message),
            Target::Unmatched => {
                self.metrics.unmatched.fetch_add(1, Ordering::Relaxed);
                return Delivery::Unmatched;
            }
            Target::Refuse(c, id) => {
                let method = head.method().unwrap_or("");
                tracing::warn!(bridge = %c.bridge.name, method, "refused a server-to-client request to an MCP 2026-07-28 client");
                if let Some(link) = c.bridge.active() {
                    let _ = self.send_call(
                        &c,
                        &link,
                        jsonrpc::error(
                            &id,
                            code::METHOD_NOT_FOUND,
                            &format!("{method}: the client speaks MCP 2026-07-28, which has no server-to-client requests"),
                            None,
                        ),
                    );
                }
            }
        }
        Delivery::Routed
    }

    /// Adds `message` to the standalone stream of session `s` (bounded in bytes).
    fn push_standalone(&self, s: &Session, message: &Value) {
        if let Ok(lost) = s.standalone.push(message, false) {
            self.count_lost(s, lost);
        }
    }

    /// Counts and logs `lost` messages a stream of `s` dropped before any client read them (a
    /// warning for the first and then for every thousandth, so a flood does not flood the log).
    fn count_lost(&self, s: &Exchange, lost: u64) {
        if lost == 0 {
            return;
        }
        let before = self
            .metrics
            .stream_dropped
            .fetch_add(lost, Ordering::Relaxed);
        let total = before + lost;
        if before == 0 || before / 1000 != total / 1000 {
            tracing::warn!(
                bridge = %s.bridge.name,
                sid = %s.sid.log_tag(),
                lost,
                total,
                "dropped server messages no client read in time: the session's buffer is full"
            );
        }
    }
}
