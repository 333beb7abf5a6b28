//! The hub's periodic work ([`Hub::sweep`], every second from `serve_on`): the reconnect grace,
//! request deadlines, idle sessions, finished calls and stream retention.

use std::sync::Arc;

use serde_json::json;
use tokio::time::{Duration, Instant};

use protocol::{
    jsonrpc::{self, code},
    mcp::META_SUBSCRIPTION_ID,
};

use super::{
    Bridge, Hub,
    exchange::{Held, Pending},
};
use crate::metrics::Metrics;

/// A session without requests in flight and unused this long is ended (its daemon side, possibly
/// an upstream child process, with it); a client that comes back gets 404 and initializes again.
pub(super) const SESSION_IDLE: Duration = Duration::from_secs(3600);

impl Hub {
    /// Periodic work: grace expiry, request deadlines, idle sessions, stream retention.
    pub(crate) fn sweep(&self) {
        let now = Instant::now();
        let grace = self.config.timing.reconnect_grace;
        let bridges: Vec<Arc<Bridge>> = self.bridges.lock().values().cloned().collect();
        for b in bridges {
            let expired = {
                let mut g = b.state.lock();
                let expired = g.link.expire(now, grace);
                if expired.is_some() {
                    Metrics::add(&self.metrics.detached, -(g.inflight as i64));
                }
                expired
            };
            if let Some(instance) = expired {
                tracing::warn!(bridge = %b.name, "the daemon did not come back within the reconnect grace; ending its sessions");
                self.end_bound(
                    &b.name,
                    &instance,
                    "the machine's daemon did not reconnect in time; the outcome of this request is unknown (it may have had effects)",
                );
            }
        }
        for h in self.all_exchanges() {
            self.settle_overdue(&h, now);
            let idle = {
                let g = h.state.lock();
                g.pending.is_empty() && now.duration_since(g.last_active) > SESSION_IDLE
            };
            if idle {
                self.end_session(&h.sid, code::UNAVAILABLE, "idle session", true);
            } else if let Held::Call(c) = &h {
                self.close_if_answered(c);
            }
        }
        self.streams.sweep();
    }

    /// Settles the requests of `s` whose time is up at `now`: those awaiting acceptance past
    /// their retraction time ([`Hub::retract_due`]), subscriptions past their longest lifetime
    /// (closed gracefully) and requests past their deadline (cancelled on the daemon, answered
    /// with -32000). Called by the sweep every second and on every event of the session (a
    /// daemon message, a new request), so nothing stays pending past its
    /// bound. Returns whether anything was settled.
    pub(super) fn settle_overdue(&self, s: &Held, now: Instant) -> bool {
        let retracting = self.retract_due(s, now);
        let late: Vec<Pending> = {
            let mut g = s.state.lock();
            g.pending
                .end_where(|_, p| p.deadline <= now)
                .into_iter()
                .map(|(_, p)| p)
                .collect()
        };
        if late.is_empty() {
            return retracting;
        }
        let (ended_listens, late): (Vec<Pending>, Vec<Pending>) =
            late.into_iter().partition(|p| p.listen);
        for p in ended_listens {
            // Graceful closure (MCP 2026-07-28 Basic › Patterns › Subscriptions).
            let done = jsonrpc::result(
                &p.id,
                json!({"resultType": "complete", "_meta": {META_SUBSCRIPTION_ID: p.id}}),
            );
            if let Some(link) = s.bridge.active() {
                let _ = self.send(
                    s,
                    &link,
                    jsonrpc::cancelled(&p.id, "the subscription reached its longest lifetime"),
                );
            }
            self.finish_pending(s, p, Some(done));
        }
        for p in &late {
            if let Some(link) = s.bridge.active() {
                let _ = self.send(
                    s,
                    &link,
                    jsonrpc::cancelled(&p.id, "the relay's deadline passed"),
                );
            }
        }
        self.settle_all(
            s,
            late,
            code::UNAVAILABLE,
            "the request ran past the longest allowed execution time (600 s)",
        );
        true
    }
}
