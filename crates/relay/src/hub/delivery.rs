//! Delivery confirmation (link revision 4): a request sent to a daemon of
//! revision 4 carries `deliver_by` and waits for the daemon's `accepted`; one not accepted within
//! [`DELIVERY_WINDOW`] + [`DELIVERY_MARGIN`] of being sent is retracted — taken off the pending
//! requests and answered with a retryable "not delivered" error — so that a frozen or sleeping
//! daemon (its TCP connection up, nothing read) costs a caller seconds, not the liveness timeout
//! plus the reconnect grace.
//!
//! Why a retracted request cannot have run: the daemon refuses a request it reads after
//! `deliver_by` (in its own clock), and `deliver_by` is the relay's send time + the window + the
//! skew estimated from the hello, an estimate lower than the true skew by the hello's one-way
//! latency, so the daemon's limit falls at or before the relay's send time + the window. An
//! `accepted` it sent in time has the margin to arrive. The residual cases (an `accepted` lost
//! with a dropped socket, a daemon clock stepped backwards) are in `docs/relay-protocol.md`; a
//! late `accepted` is logged and counted, never acted on.

use std::{collections::VecDeque, sync::atomic::Ordering};

use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

use protocol::{
    frame::{REVISION_DELIVERY, now_unix_ms},
    head,
    ids::SessionId,
    jsonrpc::{self, IdKey, RequestId, code},
    limits::{DELIVERY_MARGIN, DELIVERY_WINDOW},
};

use super::{
    Hub, Link,
    exchange::{Exchange, ExchangeState, Held},
    routing::LinkOrigin,
};
use crate::metrics::Metrics;

/// Retracted requests remembered to tell a late `accepted` from a stray one (bounded; the
/// oldest is forgotten first).
const RETRACTED_REMEMBERED: usize = 1024;

/// The error a retracted request is answered with (JSON-RPC -32000, [`code::UNAVAILABLE`]).
pub(crate) const NOT_DELIVERED: &str = "the request was NOT delivered to the machine's daemon: it did not take it within 4 s (the machine may be asleep, frozen or overloaded). It had no effects; it is safe to retry";

/// Whether the daemon confirmed a pending request.
#[derive(Debug)]
pub(crate) enum Acceptance {
    /// Sent to a daemon older than revision 4 (or not sent yet): nothing to confirm.
    NotAsked,
    /// Sent with `deliver_by`; retracted at `retract_at` unless accepted before.
    Awaiting {
        /// When the request is retracted.
        retract_at: Instant,
        /// Stops the retraction timer when the request is accepted or leaves the pending ones.
        _timer: Option<DropGuard>,
    },
    /// The daemon took it: it waits for its response like a request to an older daemon.
    Accepted,
}

impl Acceptance {
    /// Sent and not confirmed yet.
    pub(crate) fn is_awaiting(&self) -> bool {
        matches!(self, Self::Awaiting { .. })
    }
}

/// The hub's memory of retracted requests: a hash of each one's bridge, session (or call) and
/// id, so that it stays small whatever the ids (a collision only makes a stray `accepted` be
/// counted as late).
#[derive(Debug, Default)]
pub(crate) struct RetractedLog(VecDeque<u64>);

impl RetractedLog {
    fn hash(bridge: &str, sid: &SessionId, key: &IdKey) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (bridge, sid, key).hash(&mut h);
        h.finish()
    }

    fn push(&mut self, bridge: &str, sid: &SessionId, key: &IdKey) {
        if self.0.len() >= RETRACTED_REMEMBERED {
            self.0.pop_front();
        }
        self.0.push_back(Self::hash(bridge, sid, key));
    }

    fn contains(&self, bridge: &str, sid: &SessionId, key: &IdKey) -> bool {
        let h = Self::hash(bridge, sid, key);
        self.0.contains(&h)
    }
}

/// `deliver_by` for a request sent now on `link`: the relay's wall clock + [`DELIVERY_WINDOW`],
/// moved into the daemon's clock by the skew the link's hello showed (Unix ms).
pub(super) fn deliver_by(link: &Link) -> u64 {
    let at = now_unix_ms() as i64 + DELIVERY_WINDOW.as_millis() as i64 + link.clock_skew_ms;
    at.max(0) as u64
}

impl Hub {
    /// For a frame about to carry `message` of `e` to `link`: when `link` is of revision 4 and
    /// `message` is a pending request not sent before, marks it awaiting acceptance (starting
    /// its retraction timer) and returns its `deliver_by`; otherwise `None` (no limit). `g` is
    /// the state of `e`, locked by the caller.
    pub(super) fn await_acceptance(
        &self,
        e: &Exchange,
        g: &mut ExchangeState,
        link: &Link,
        message: &Value,
    ) -> Option<u64> {
        if link.revision < REVISION_DELIVERY || !head::peek::has_method(message) {
            return None;
        }
        let key = IdKey::of(head::peek::id(message)?);
        let p = g.pending.get_mut(&key)?;
        if !matches!(p.acceptance, Acceptance::NotAsked) {
            return None;
        }
        let retract_at = Instant::now() + DELIVERY_WINDOW + DELIVERY_MARGIN;
        p.acceptance = Acceptance::Awaiting {
            retract_at,
            _timer: self.retraction_timer(e.sid.clone(), key, retract_at),
        };
        Metrics::add(&self.metrics.awaiting_acceptance, 1);
        Some(deliver_by(link))
    }

    /// A task that retracts request `key` of `sid` at `at`, stopped when the returned guard is
    /// dropped (the request was accepted or left the pending ones). `None` outside a tokio
    /// runtime; the sweep retracts then, within its one-second tick.
    fn retraction_timer(&self, sid: SessionId, key: IdKey, at: Instant) -> Option<DropGuard> {
        let rt = tokio::runtime::Handle::try_current().ok()?;
        let hub = self.me.clone();
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        rt.spawn(async move {
            tokio::select! {
                () = stopped.cancelled() => {}
                () = tokio::time::sleep_until(at) => {
                    if let Some(hub) = hub.upgrade() {
                        hub.retract(&sid, &key, Instant::now());
                    }
                }
            }
        });
        Some(stop.drop_guard())
    }

    /// Retracts request `key` of session `sid` if it still awaits acceptance and its time is up
    /// at `now`: it leaves the pending requests and its client gets [`NOT_DELIVERED`] (-32000,
    /// `data.retryable`), the daemon gets `notifications/cancelled` for it (a call: `close`),
    /// in case it took it after all.
    pub(super) fn retract(&self, sid: &SessionId, key: &IdKey, now: Instant) {
        let Some(held) = self.exchange_by_sid(sid) else {
            return;
        };
        let p = {
            let mut g = held.state.lock();
            match g.pending.get(key) {
                Some(p) if matches!(p.acceptance, Acceptance::Awaiting { retract_at, .. } if retract_at <= now) =>
                    {}
                _ => return,
            }
            let Some(p) = g.pending.end(key) else {
                return;
            };
            p
        };
        self.retracted
            .lock()
            .push(&held.bridge.name, &held.sid, key);
        self.metrics.retracted.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(bridge = %held.bridge.name, sid = %held.sid.log_tag(), "the daemon did not take a request in time; answered it as not delivered");
        if let Held::Session(s) = &held
            && let Some(link) = s.bridge.active()
        {
            let _ = self.send_session(
                s,
                &link,
                jsonrpc::cancelled(&p.id, "the relay retracted it: not taken in time"),
            );
        }
        let err = jsonrpc::error(
            &p.id,
            code::UNAVAILABLE,
            NOT_DELIVERED,
            Some(
                json!({"code": "unavailable", "retryable": true, "delivered": false, "side_effects_started": false}),
            ),
        );
        self.finish_pending(&held, p, Some(err));
        if let Held::Call(c) = &held {
            self.close_if_answered(c);
        }
    }

    /// Retracts every request of `s` whose retraction time passed at `now` (the backstop for
    /// the timers); returns whether there was one.
    pub(super) fn retract_due(&self, e: &Exchange, now: Instant) -> bool {
        let due: Vec<IdKey> = e
            .state
            .lock()
            .pending
            .iter()
            .filter(|(_, p)| {
                matches!(p.acceptance, Acceptance::Awaiting { retract_at, .. } if retract_at <= now)
            })
            .map(|(k, _)| k.clone())
            .collect();
        let any = !due.is_empty();
        for k in due {
            self.retract(&e.sid, &k, now);
        }
        any
    }

    /// The daemon of `from` took request `id` of `sid` (`accepted`): it now waits for its
    /// response. An `accepted` for a request already retracted is logged at `warn` and counted
    /// (the clock estimate failed, or the link was slower than the margin) and changes nothing;
    /// one for a request that is not pending (cancelled meanwhile) or already accepted is
    /// ignored.
    pub(crate) fn accepted(&self, from: LinkOrigin<'_>, sid: &SessionId, id: &RequestId) {
        let key = id.key();
        let known = self.exchange_from(from, sid).is_some_and(|h| {
            let mut g = h.state.lock();
            match g.pending.get_mut(&key) {
                Some(p) if p.acceptance.is_awaiting() => {
                    p.acceptance = Acceptance::Accepted;
                    Metrics::add(&self.metrics.awaiting_acceptance, -1);
                    true
                }
                Some(_) => true,
                None => false,
            }
        });
        if known {
            return;
        }
        if self.retracted.lock().contains(from.bridge, sid, &key) {
            self.metrics.late_accepted.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(bridge = from.bridge, sid = %sid.log_tag(), "the daemon took a request after the relay had retracted it as not delivered (its clock or the link is slower than the delivery margin); the client was told it had no effects");
        } else {
            tracing::debug!(
                bridge = from.bridge,
                "accepted for a request no longer pending"
            );
        }
    }
}
