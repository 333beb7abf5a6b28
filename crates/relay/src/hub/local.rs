//! The local router: [`Router`] for this process's [`Hub`], whose bridges' daemons are connected
//! to this node. Each method is the hub's own transition (`session.rs`, `routing.rs`) under the
//! trait's contract; nothing here waits unless the trait says it may ([`Wait`]).

use std::{future::ready, sync::Arc, time::Duration};

use futures_util::future::Either;
use serde_json::Value;

use protocol::jsonrpc::code;

use super::{
    Catalog, Hub, SendError,
    reply::{Reply, ReplySink},
    router::{BridgeRef, CallRef, Route, Router, SessionRef, Wait},
};
use crate::{
    auth::BridgePrincipal,
    stream::{Resume, SseStream},
};

impl Router for Hub {
    fn bridge<'a>(&'a self, name: &'a str) -> Wait<'a, BridgeRef> {
        match self.loaded(name) {
            Some(b) => Either::Left(ready(BridgeRef(b))),
            None => Either::Right(Box::pin(
                async move { BridgeRef(Hub::bridge(self, name).await) },
            )),
        }
    }

    fn catalog(&self, bridge: &BridgeRef) -> Option<Arc<Catalog>> {
        bridge.0.catalog()
    }

    fn route<'a>(&'a self, bridge: &'a BridgeRef, max: Duration) -> Wait<'a, Option<Route>> {
        match bridge.0.active().filter(|l| l.tx.is_open()) {
            Some(link) => Either::Left(ready(Some(Route(link)))),
            None => Either::Right(Box::pin(async move {
                bridge.0.wait_ready(max).await.map(Route)
            })),
        }
    }

    fn open_session(
        &self,
        bridge: &BridgeRef,
        server: &str,
        principal: BridgePrincipal,
        initialize: Value,
    ) -> Option<SessionRef> {
        self.create_session(bridge.0.clone(), server, principal, initialize)
            .map(SessionRef)
    }

    fn session(&self, sid: &str, principal: &BridgePrincipal, server: &str) -> Option<SessionRef> {
        Hub::session(self, sid, principal)
            .filter(|s| s.server == server && s.bridge.name == principal.bridge)
            .map(SessionRef)
    }

    fn answer(&self, session: &SessionRef, id: &Value, answer: &Value) -> Arc<SseStream> {
        let s = &session.0;
        let st = SseStream::new(&s.sid, &s.principal.id, &s.bridge.name);
        let _ = st.push(answer, true); // a new stream is not finished
        self.streams.insert_durable(st.clone(), id);
        st
    }

    fn request(
        &self,
        session: &SessionRef,
        route: &Route,
        id: &Value,
        message: Value,
        sink: ReplySink,
    ) -> Result<(), SendError> {
        let s = &session.0;
        // The stream is made replayable only once the request is admitted: a refused request
        // would leave it registered for good.
        let replayable = sink.related().cloned();
        self.register_request(s, id, &message, sink)?;
        if let Some(st) = replayable {
            self.streams.insert_durable(st, id);
        }
        self.send_session(s, &route.0, message).inspect_err(|_| {
            self.unregister(s, id);
        })
    }

    fn notify(&self, session: &SessionRef, message: Value) {
        let s = &session.0;
        match s.bridge.active() {
            Some(link) => {
                if self.send_session(s, &link, message.clone()).is_err()
                    && self.queue(s, message).is_err()
                {
                    tracing::warn!(bridge = %s.bridge.name, "dropped a client message: the daemon link is congested");
                }
            }
            None => {
                if self.queue(s, message).is_err() {
                    tracing::warn!(bridge = %s.bridge.name, "dropped a client message: too many queued while the daemon is away");
                }
            }
        }
    }

    fn cancelled(&self, session: &SessionRef, id: &Value) {
        Hub::cancelled(self, &session.0, id);
    }

    fn resume(
        &self,
        session: &SessionRef,
        last_event_id: Option<&str>,
    ) -> Option<(Arc<SseStream>, Option<u64>)> {
        let s = &session.0;
        let standalone = || Some((s.standalone.clone(), s.standalone.unsent_cursor()));
        let Some(last) = last_event_id else {
            return standalone();
        };
        match self
            .streams
            .resume(last, &s.sid, &s.principal.id, &s.standalone)
        {
            Resume::Replay(st, seq) => {
                // The client has every event up to its cursor: the store forgets them.
                self.streams.acknowledge(&st, seq);
                Some((st, Some(seq)))
            }
            Resume::Standalone => standalone(),
            Resume::Unknown => None,
        }
    }

    fn end(&self, session: &SessionRef) {
        self.end_session(
            &session.0.sid,
            code::UNAVAILABLE,
            "the session was deleted",
            true,
        );
    }

    fn call(
        &self,
        bridge: &BridgeRef,
        server: &str,
        principal: BridgePrincipal,
        route: &Route,
        id: &Value,
        message: Value,
        stream: bool,
    ) -> Result<(CallRef, Reply), SendError> {
        let c = self.create_call(bridge.0.clone(), server, principal);
        let (sink, reply) = ReplySink::pair(&c.sid, &c.principal.id, &c.bridge.name, stream);
        let sent = self.register_call(&c, id, &message, sink).and_then(|()| {
            self.send_call(&c, &route.0, message).inspect_err(|_| {
                self.unregister(&c, id);
            })
        });
        match sent {
            Ok(()) => Ok((CallRef(c), reply)),
            Err(e) => {
                // Nothing is pending on it: the message is no one's.
                self.end_session(&c.sid, code::UNAVAILABLE, &e.to_string(), false);
                Err(e)
            }
        }
    }

    fn cancel_call(&self, call: &CallRef, id: &Value, reason: &str) {
        Hub::cancel_call(self, &call.0, id, reason);
    }

    fn cancel_matching_call(
        &self,
        bridge: &BridgeRef,
        server: &str,
        principal: &BridgePrincipal,
        id: &Value,
        reason: &str,
    ) {
        if let Some(c) = self.find_call(&bridge.0.name, server, principal, id) {
            Hub::cancel_call(self, &c, id, reason);
        }
    }

    fn refresh_gauges(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        self.streams.sweep();
        self.metrics
            .streams
            .store(self.streams.len() as i64, Relaxed);
        if let Some(w) = &self.durable {
            self.metrics
                .store_queued
                .store(w.queued.load(Relaxed), Relaxed);
            self.metrics
                .store_dropped
                .store(w.dropped.load(Relaxed), Relaxed);
        }
    }
}
