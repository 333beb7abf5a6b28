//! Retention and replay: every message a session or call sends gets the next sequence number of
//! its session and is retained until the relay acknowledges it (`ack`, cumulative), in the
//! session's [`Outbox`] (the link's delivery contract, `protocol::delivery`); a `resume`
//! ends what the relay no longer awaits, answers what it awaits but this daemon does not hold,
//! and replays each kept session's unacknowledged messages, in order, before anything new.

use std::{
    collections::HashSet,
    sync::{Arc, atomic::Ordering},
};

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use protocol::{
    delivery::Outbox,
    frame::{DaemonFrame, ResumeRequest},
    head,
    ids::SessionId,
    jsonrpc::{self, IdKey, code},
    limits::RELAY_FRAME_MAX_BYTES,
};

use super::{Host, HostRef, Hosted, HostedSessions, guard::too_large};
use crate::servers;

/// Bytes of unacknowledged output kept per session; beyond it the oldest is dropped (and logged).
const RETAINED_MAX_BYTES: usize = 64 * 1024 * 1024;

/// What a session or call sent and the relay has not acknowledged, and the link epoch it is
/// sent on (under a host's `out` lock).
#[derive(Debug)]
pub(super) struct Retention {
    /// Numbered, unacknowledged messages: (related request id, message), sized as serialized.
    pub(super) outbox: Outbox<(Option<Value>, Arc<Value>)>,
    /// Link epoch this session's output is being sent on (0 = none).
    pub(super) epoch: u64,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            outbox: Outbox::new(RETAINED_MAX_BYTES),
            epoch: 0,
        }
    }
}

/// Current link: its epoch and frame sender.
#[derive(Default)]
pub(super) struct LinkSlot {
    pub(super) epoch: u64,
    pub(super) tx: Option<mpsc::Sender<DaemonFrame>>,
    /// Cancelled when a session message could not be queued on the link ([`HostedSessions::
    /// link_broken`]).
    pub(super) broken: CancellationToken,
}

impl HostedSessions {
    /// The relay committed session `sid`'s messages up to `seq`.
    /// A call whose response is acknowledged is forgotten.
    pub fn ack(&self, sid: &SessionId, seq: u64) {
        if let Some(h) = self.host(sid) {
            let mut r = h.out.lock();
            r.outbox.ack(seq);
            let done = match &h {
                Host::Call(c) => c.answered_at.get().is_some_and(|d| *d <= seq),
                Host::Session(_) => false,
            };
            if done {
                drop(r);
                self.hosts.lock().remove(sid);
            }
        }
    }

    /// Cancelled once a session message could not be queued on the current link (its queue was
    /// full): acknowledgement is cumulative, so the relay acknowledging a later message would
    /// make the daemon forget the one that did not fit. That session sends nothing more on the
    /// link; the link owner lets the queue drain (so what was queued is written and
    /// acknowledged: each reconnect makes progress) and then reconnects, and the next `resume`
    /// sends every unacknowledged message again.
    pub fn link_broken(&self) -> CancellationToken {
        self.link.lock().broken.clone()
    }

    /// Queues `frame` on the current link (`tx`). Returns false when it does not fit: the
    /// link is then marked broken ([`Self::link_broken`]), and the caller stops sending that
    /// session's messages on it (they stay unacknowledged, for the next link).
    fn send_on(&self, tx: &mpsc::Sender<DaemonFrame>, frame: DaemonFrame) -> bool {
        match tx.try_send(frame) {
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!(
                    "the relay link's send queue is full; reconnecting once it drains, to send the rest again"
                );
                self.link.lock().broken.cancel();
                false
            }
            _ => true,
        }
    }

    /// The link is gone: keep everything, send nothing until a link is resumed.
    pub fn detach(&self) {
        self.link.lock().tx = None;
    }

    /// A new link is ready after `resume`: sessions not in `keep` are ended, in-flight requests
    /// of kept sessions not in `keep_requests` are cancelled, and each kept session's unacknowledged
    /// output is replayed on `tx` before anything new. A call is kept when its sid is in `keep`
    /// or its request in `keep_requests`; otherwise it is cancelled (or, answered, forgotten).
    pub fn resume(
        self: &Arc<Self>,
        keep: &[SessionId],
        keep_requests: &[ResumeRequest],
        tx: mpsc::Sender<DaemonFrame>,
    ) {
        let keep: HashSet<&SessionId> = keep.iter().collect();
        let keep_req: HashSet<(SessionId, IdKey)> = keep_requests
            .iter()
            .map(|r| (r.sid.clone(), r.id.key()))
            .collect();
        {
            let mut l = self.link.lock();
            l.epoch += 1;
            l.tx = Some(tx);
            l.broken = CancellationToken::new();
        }
        for h in self.host_list() {
            let h = match h {
                Host::Call(c) => {
                    if keep.contains(&c.sid) || keep_req.contains(&(c.sid.clone(), c.key.clone())) {
                        self.attach_host(&c);
                    } else {
                        tracing::info!(sid = %c.sid.log_tag(), "ending a call the relay no longer awaits");
                        self.close(&c.sid);
                    }
                    continue;
                }
                Host::Session(s) => s,
            };
            if !keep.contains(&h.sid) {
                tracing::info!(sid = %h.sid.log_tag(), "ending a session the relay no longer awaits");
                self.close(&h.sid);
                continue;
            }
            let stale: Vec<Value> = h
                .inflight
                .lock()
                .iter()
                .filter(|(k, _)| !keep_req.contains(&(h.sid.clone(), (*k).clone())))
                .map(|(_, (id, _))| id.clone())
                .collect();
            for id in stale {
                self.rpc(
                    &h.sid,
                    jsonrpc::cancelled(&id, "the relay no longer awaits this request"),
                );
            }
            self.attach_host(&h);
        }
        self.answer_unheld(&keep, keep_requests);
    }

    /// Answers each request of `listed` this daemon does not hold — not in flight, and no
    /// retained response for it — so that the relay never waits out its deadline for an answer
    /// that cannot come. A listed request of a kept session gets JSON-RPC
    /// [`code::OUTCOME_UNKNOWN`] (the daemon cannot tell "never arrived" from "its record is
    /// gone", so it claims neither); a listed session or call this daemon does not host is
    /// reported with a `closed` frame, which the relay turns into an error for its requests (and
    /// a 404 for the session's next request), as is a listed session (`sessions`) it does not
    /// host.
    fn answer_unheld(&self, sessions: &HashSet<&SessionId>, listed: &[ResumeRequest]) {
        let mut closed: HashSet<&SessionId> = HashSet::new();
        for sid in sessions {
            if self.host(sid).is_none() && closed.insert(sid) {
                tracing::info!(sid = %sid.log_tag(), "the relay keeps a session this daemon does not host");
                self.send_closed(
                    sid,
                    "this daemon holds no session with this id (it ended while the relay was away)",
                );
            }
        }
        for r in listed {
            let h = match self.host(&r.sid) {
                // A call host holds its one request until its response is acknowledged.
                Some(Host::Call(_)) => continue,
                Some(Host::Session(s)) => s,
                None => {
                    if closed.insert(&r.sid) {
                        tracing::info!(sid = %r.sid.log_tag(), "the relay awaits a session or call this daemon does not host");
                        self.send_closed(
                            &r.sid,
                            "this daemon holds no session or call with this id (it ended, or never arrived)",
                        );
                    }
                    continue;
                }
            };
            let key = r.id.key();
            // Under `out`, as `emit` moves a request from `inflight` to the outbox.
            let held = {
                let o = h.out.lock();
                h.inflight.lock().contains(&key)
                    || o.outbox.unacked().any(|(_, (_, m))| {
                        !head::peek::has_method(m)
                            && head::peek::id_member(m).is_some_and(|id| IdKey::of(id) == key)
                    })
            };
            if held {
                continue;
            }
            tracing::info!(sid = %h.sid.log_tag(), "the relay awaits a request this daemon does not hold; answering it with an error");
            let id = r.id.as_value().clone();
            let message = jsonrpc::error(
                &id,
                code::OUTCOME_UNKNOWN,
                "the daemon holds no record of this request: it never arrived, or its record was \
                 lost; its outcome is unknown, so check its effects before retrying",
                Some(json!({"retryable": false, "delivered": "unknown"})),
            );
            self.emit(&h, message, Some(id));
        }
    }

    /// Replays `h`'s unacknowledged output on the current link and attaches it to its epoch.
    pub(super) fn attach_host(&self, h: &Hosted) {
        let (epoch, tx) = {
            let l = self.link.lock();
            (l.epoch, l.tx.clone())
        };
        let Some(tx) = tx else { return };
        let mut r = h.out.lock();
        for (seq, (related, message)) in r.outbox.unacked() {
            let sent = self.send_on(
                &tx,
                DaemonFrame::Rpc {
                    sid: h.sid.clone(),
                    seq,
                    related: related.clone(),
                    message: message.clone(),
                },
            );
            if !sent {
                // Not attached: nothing more of it goes on this link, so nothing later can be
                // acknowledged past what did not fit; the next link replays the rest.
                return;
            }
        }
        r.epoch = epoch;
    }
    /// A server message of session or call `h`, `related` to the request it belongs to (a
    /// call's messages all belong to its one request). The response to a session's `initialize`
    /// is swallowed (the relay answered it); a call's response completes its output.
    pub(crate) fn emit<'a>(
        &self,
        h: impl Into<HostRef<'a>>,
        mut message: Value,
        mut related: Option<Value>,
    ) {
        let h = h.into();
        let is_response = !head::peek::has_method(&message);
        if let HostRef::Call(c) = h
            && !is_response
            && related.is_none()
        {
            related = Some(c.id.clone());
        }
        // The request leaves `inflight` and its response enters the outbox under the one `out`
        // lock (order: `out`, then `inflight`), so a `resume` (`answer_unheld`) always finds it
        // in one of them.
        let mut r = h.out.lock();
        let mut method = None;
        if is_response && let Some(id) = head::peek::id_member(&message) {
            let key = IdKey::of(id);
            method = h.inflight.lock().end(&key).map(|(_, m)| m);
            if h.upstream_tools.is_some()
                && method.as_deref() == Some("tools/list")
                && let Some(result) = message.get("result")
            {
                message["result"] = servers::filter_tools(h.role, result);
            }
        }
        let size = protocol::jsonrpc::encoded_len(&message);
        if size > RELAY_FRAME_MAX_BYTES - 1024 {
            tracing::warn!(sid = %h.sid.log_tag(), size, "a server message is too large for the relay link; replaced by an error");
            message = too_large(&message, method.as_deref(), size);
        }
        let id = is_response
            .then(|| head::peek::id_member(&message).map(IdKey::of))
            .flatten();
        let answered = match h {
            HostRef::Call(c) => {
                if c.ended.load(Ordering::Relaxed) {
                    return;
                }
                id.as_ref() == Some(&c.key)
            }
            HostRef::Session(s) => {
                let mut swallow = s.swallow.lock();
                if id.is_some() && *swallow == id {
                    *swallow = None;
                    return;
                }
                false
            }
        };
        let message = Arc::new(message);
        let pushed = r.outbox.push((related.clone(), message.clone()), size);
        let seq = pushed.seq;
        if answered && let HostRef::Call(c) = h {
            c.ended.store(true, Ordering::Relaxed);
            let _ = c.answered_at.set(seq);
        }
        for s in pushed.dropped {
            tracing::error!(sid = %h.sid.log_tag(), seq = s, "dropped an unacknowledged message: retention full while the relay is unreachable");
        }
        let tx = {
            let l = self.link.lock();
            (l.epoch == r.epoch).then(|| l.tx.clone()).flatten()
        };
        if let Some(tx) = tx {
            let sent = self.send_on(
                &tx,
                DaemonFrame::Rpc {
                    sid: h.sid.clone(),
                    seq,
                    related,
                    message,
                },
            );
            if !sent {
                // Detached from this link, as in `attach_host`.
                r.epoch = 0;
            }
        }
        drop(r);
        if answered {
            // The call's state ends with its response; only the retained copy stays until acked.
            h.stop.cancel();
        }
    }

    pub(super) fn send_closed(&self, sid: &SessionId, reason: &str) {
        let tx = self.link.lock().tx.clone();
        if let Some(tx) = tx {
            let _ = tx.try_send(DaemonFrame::Closed {
                sid: sid.clone(),
                reason: reason.to_owned(),
            });
        }
    }
}
