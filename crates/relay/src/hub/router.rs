//! The routing seam: [`Router`], the one interface the HTTP layer calls once a request is
//! admitted, and the handles it deals in ([`BridgeRef`], [`SessionRef`], [`CallRef`], [`Route`]). The hub of
//! this process is its local implementation (`local.rs`); a router that reaches daemons held by
//! other relay nodes (over a message bus, DESIGN §6) implements the same trait.
//!
//! Rules: HTTP handlers reach bridges, sessions, calls and streams only through this trait;
//! handles are valid for the request that obtained them; answers come back through a
//! [`ReplySink`] (see the contract on [`Router`]). Hot-path methods do not wait and do not
//! allocate beyond what they route; those that may wait return a [`Wait`], which is ready at once
//! (no allocation) when nothing has to be waited for.

use std::{fmt, future::Ready, sync::Arc, time::Duration};

use futures_util::future::{BoxFuture, Either};
use serde_json::Value;

use protocol::ids::{InstanceId, SessionId};

use super::{Bridge, Call, Catalog, Link, SendError, Session, reply::ReplySink};
use crate::{auth::BridgePrincipal, stream::SseStream};

pub(crate) use super::reply::Reply;

/// A router's answer that may have to wait: ready at once (`Left`, no allocation) or a boxed
/// future (`Right`) when it waits for a daemon or the store.
pub(crate) type Wait<'a, T> = Either<Ready<T>, BoxFuture<'a, T>>;

/// A bridge as the router knows it, for the request that obtained it ([`Router::bridge`]).
#[derive(Debug, Clone)]
pub(crate) struct BridgeRef(pub(super) Arc<Bridge>);

impl BridgeRef {
    /// The bridge's name.
    pub(crate) fn name(&self) -> &str {
        &self.0.name
    }
}

/// An MCP session, for the request that obtained it ([`Router::session`],
/// [`Router::open_session`]).
#[derive(Debug, Clone)]
pub(crate) struct SessionRef(pub(super) Arc<Session>);

/// The call that carries one MCP 2026-07-28 request, for the request that made it
/// ([`Router::call`]).
#[derive(Debug, Clone)]
pub(crate) struct CallRef(pub(super) Arc<Call>);

impl CallRef {
    /// The call's id (the `sid` of its link frames; never a session id).
    #[cfg(test)]
    pub(crate) fn sid(&self) -> &SessionId {
        &self.0.sid
    }
}

impl SessionRef {
    /// The `MCP-Session-Id`.
    pub(crate) fn sid(&self) -> &SessionId {
        &self.0.sid
    }

    /// The handshake-era version the session negotiated (how its SSE streams are framed).
    pub(crate) fn protocol_version(&self) -> &'static str {
        self.0.protocol_version()
    }

    /// A reply sink for a request of this session and the reply its handler reads: an SSE
    /// stream of the session (readable by its principal) when `stream`, else a JSON waiter.
    pub(crate) fn reply(&self, stream: bool) -> (ReplySink, Reply) {
        let s = &self.0;
        ReplySink::pair(&s.sid, &s.principal.id, &s.bridge.name, stream)
    }
}

/// Where a bridge's messages go at one moment: the daemon instance that takes them (on this
/// node, its verified socket), as [`Router::route`] found it.
#[derive(Debug, Clone)]
pub(crate) struct Route(pub(super) Link);

impl Route {
    /// Whether the daemon serves `call` frames (link revision 2: MCP 2026-07-28 requests without
    /// a session).
    pub(crate) fn serves_calls(&self) -> bool {
        self.0.serves_calls()
    }

    /// The daemon instance (for logs).
    pub(crate) fn instance(&self) -> &InstanceId {
        &self.0.instance_id
    }
}

/// How a client request reaches its bridge's daemon and how its answer comes back.
///
/// # The reply sink
///
/// Every request the router takes ([`Router::request`], [`Router::call`]) is answered through
/// its [`ReplySink`]. An implementation, local or remote, guarantees:
///
/// - **Order.** The messages related to the request (progress, logs, related notifications)
///   reach the sink in the order the daemon sent them (its per-session sequence), each at most
///   once (a daemon's replay after a reconnect is dropped); the terminal response comes after
///   all of them.
/// - **At most one terminal message.** The sink is finished exactly once with the response, an
///   error, or nothing (a cancelled request gets no response): whichever of the daemon's
///   response, the deadline ([`crate::limits::CALL_BUDGET_MAX`] + relay overhead, never
///   extended by a reconnect), the reconnect grace running out, the session ending or a
///   retraction comes first takes the request out of the pending set and finishes the sink; the
///   others find nothing to finish.
/// - **A gone reader.** A reader that went away is not an error and not a cancellation
///   (invariant 5): a session's stream keeps what arrives for a client that resumes with
///   `Last-Event-ID`; a JSON answer nobody waits for is dropped. Only an explicit
///   `notifications/cancelled` ([`Router::cancelled`]) or, for a call, the client closing its
///   response ([`Router::cancel_call`]) cancels.
///
/// A router whose daemon is on another node keeps the sink on the node that holds the HTTP
/// response and feeds it from its subscription to the owner node, keeping the same order and
/// the same single terminal message; when that subscription is lost before the terminal
/// message, the sink is finished with an error saying the outcome is unknown, as when a daemon
/// does not come back within the grace.
pub(crate) trait Router: Send + Sync + fmt::Debug {
    /// Bridge `name`'s routing state, made on first use with the catalog its daemon last
    /// announced (read from the store). Admission has checked that the bridge exists.
    fn bridge<'a>(&'a self, name: &'a str) -> Wait<'a, BridgeRef>;

    /// The catalog the bridge's daemon last announced (servers, their `initialize` and
    /// `tools/list` results), if it ever connected.
    fn catalog(&self, bridge: &BridgeRef) -> Option<Arc<Catalog>>;

    /// The route to the bridge's daemon: at once when it is connected over an open link, else
    /// as soon as one is within `max` (a link whose socket is ending is passed over); `None`
    /// when none came.
    fn route<'a>(&'a self, bridge: &'a BridgeRef, max: Duration) -> Wait<'a, Option<Route>>;

    /// Opens an MCP session (`initialize`, session era) of `principal` with `server` on
    /// `bridge`; `initialize` is what [`super::kept_initialize`] kept of the client's request.
    /// The session is opened on the daemon lazily, before its first message. `None` when the
    /// bridge or the principal is at its session bound (nothing is opened).
    fn open_session(
        &self,
        bridge: &BridgeRef,
        server: &str,
        principal: BridgePrincipal,
        initialize: Value,
    ) -> Option<SessionRef>;

    /// The session `sid` if it exists, was issued to `principal` (the id's HMAC and the
    /// session's principal) and serves `server` on the principal's bridge.
    fn session(&self, sid: &str, principal: &BridgePrincipal, server: &str) -> Option<SessionRef>;

    /// A replayable stream of `session` holding `answer` to request `id` as its only and
    /// terminal message (the `initialize` result, answered by the relay itself).
    fn answer(&self, session: &SessionRef, id: &Value, answer: &Value) -> Arc<SseStream>;

    /// Sends request `message` (id `id`) of `session` over `route`, answered through `sink`:
    /// counted against the bridge's in-flight bound, with its deadline; a stream sink is made
    /// replayable. When it fails nothing is pending: the sink is finished without a message, or
    /// dropped when it was refused before it was taken.
    ///
    /// # Errors
    /// [`SendError::TooMany`] at the bridge's in-flight bound; [`SendError::DuplicateId`] for
    /// an id already in flight in the session; [`SendError::Ended`] for a session that ended;
    /// [`SendError::TooLarge`] for a message over the relay frame limit;
    /// [`SendError::Busy`] when the daemon's link does not take it.
    fn request(
        &self,
        session: &SessionRef,
        route: &Route,
        id: &Value,
        message: Value,
        sink: ReplySink,
    ) -> Result<(), SendError>;

    /// A client notification or response of `session`: sent to the daemon when it is connected
    /// and takes it, else queued (bounded) until it is back; one that cannot be queued either is
    /// dropped and logged.
    fn notify(&self, session: &SessionRef, message: Value);

    /// The client cancelled request `id` of `session` (`notifications/cancelled`): its reply
    /// ends without a response (the notification itself is sent with [`Router::notify`]).
    fn cancelled(&self, session: &SessionRef, id: &Value);

    /// What a `GET` of `session` reads, resuming after event id `last_event_id` when given (a
    /// replay, never a re-execution: invariant 6; the events up to the cursor are acknowledged
    /// and forgotten), else the session's standalone stream from what no response carried yet.
    /// The stream and the event to read after; `None` for an unknown, expired or foreign cursor.
    fn resume(
        &self,
        session: &SessionRef,
        last_event_id: Option<&str>,
    ) -> Option<(Arc<SseStream>, Option<u64>)>;

    /// Ends `session` (`DELETE`): its requests in flight get an error, its streams finish, the
    /// daemon is told to close it. Later requests for it get 404.
    fn end(&self, session: &SessionRef);

    /// Sends one MCP 2026-07-28 request (id `id`) of `principal` to `server` on `bridge` over
    /// `route` as a call (no MCP session; link revision 2), answered as a stream when `stream`,
    /// else as one JSON message. The call ends once its answer is delivered and acknowledged;
    /// nothing is left of it when this fails.
    ///
    /// # Errors
    /// As [`Router::request`].
    #[allow(clippy::too_many_arguments)]
    fn call(
        &self,
        bridge: &BridgeRef,
        server: &str,
        principal: BridgePrincipal,
        route: &Route,
        id: &Value,
        message: Value,
        stream: bool,
    ) -> Result<(CallRef, Reply), SendError>;

    /// The client of `call` is gone before its answer (its response was closed: MCP 2026-07-28
    /// Streamable HTTP § Cancellation): the daemon is told to cancel request `id` and close the
    /// call. Nothing happens when it was answered already.
    fn cancel_call(&self, call: &CallRef, id: &Value, reason: &str);

    /// Cancels the live call of `principal` to `server` on `bridge` whose request has id `id`,
    /// if exactly one matches (a `notifications/cancelled` a 2026-07-28 client POSTs).
    fn cancel_matching_call(
        &self,
        bridge: &BridgeRef,
        server: &str,
        principal: &BridgePrincipal,
        id: &Value,
        reason: &str,
    );

    /// Brings the gauges sampled when the metrics are rendered up to date (streams held, store
    /// writes queued and lost).
    fn refresh_gauges(&self);
}
