//! The relay's node-local state: bridges and their daemon links, MCP sessions, pending requests,
//! and the routing of every message between an HTTP client and a daemon.
//!
//! The HTTP layer reaches it only through the routing seam, [`Router`] (`router`: the trait, its
//! contract and the handles it deals in; `reply`: the reply sink of one request), which [`Hub`]
//! implements for the daemons connected to this node (`local`). The daemon socket route
//! (`crate::link`) drives the hub's own transitions. This module imports neither the HTTP layer
//! nor OAuth (the tidy test checks it).
//!
//! One file per concern: `bridge` (bridges, daemon links, promotion and loss of a link, what
//! `resume` names), `link_state` (the link state machine), `exchange` (what a session and a call
//! share: a sid on a bridge's link, its requests in flight, how it ends; the hub holds each as a
//! `Held`, a session or a call), `session` (MCP sessions: the kept `initialize`, the standalone
//! stream, the store record, the bounds), `call` (MCP 2026-07-28 requests served without a
//! session), `routing` (client → daemon and daemon → client),
//! `sweep` (grace expiry, deadlines, idle sessions), `catalog` (daemon catalogs), `delivery`
//! (link revision 4: `deliver_by`, `accepted`, retraction of requests the daemon did not take),
//! `restore` (what a restarted relay takes back from its store).
//!
//! Rules this module keeps (DESIGN §4, §5, §8):
//! - A session is opened on a daemon lazily, with the client's original `initialize` (and
//!   `notifications/initialized` when it was seen), before the first message that needs it; the
//!   open and the message go out in order under the session's lock.
//! - Every daemon message goes to exactly one place: a response to the request it answers (its
//!   POST stream or JSON waiter); progress by its progress token; other messages to the request
//!   the daemon names as related, else the only request in flight, else the session's standalone
//!   stream, which buffers until the client opens it.
//! - Daemon messages carry a per-session sequence number; duplicates from a replay are dropped
//!   and every message is acknowledged once it is stored.
//! - A bridge's link is a `LinkState` (unbound, active, detached), changed only by
//!   its transitions. Losing a daemon socket detaches its sessions and requests; only a verified
//!   socket of the same instance rebinds them, within the reconnect grace. A new instance, or the
//!   grace running out, ends them: their requests get an error saying their outcome is unknown.
//! - Deadlines are never extended by reconnecting.
//!
//! # Locks
//!
//! Every lock is a `lock::Lock` (the workspace's one poisoning policy): a poisoned one is
//! recovered and logged at `error`, never skipped. No lock is held across `.await`. The order,
//! for code that holds two:
//!
//! 1. the hub's maps (`bridges`, `exchanges`) are never held while another lock is taken: callers
//!    take a snapshot of the `Arc`s and release the map first;
//! 2. a bridge's state before a session's state (only `Hub::register` holds both, to count the
//!    request against the bridge and insert it into the session in one step);
//! 3. the streams map (`SseStreams`) before a stream's own lock (its sweep);
//! 4. leaves, under which nothing else is locked: a stream's lock, the `TextCache`, a session's
//!    outbox, a bridge's readiness `watch` (sent under the bridge's lock in `Hub::link_lost`).
//!
//! A session's lock is never held while a stream is written or a bridge is locked: routing
//! decides under it and writes after it is released.

mod bridge;
mod call;
mod catalog;
mod delivery;
mod exchange;
mod link_state;
mod local;
mod reply;
mod restore;
mod router;
mod routing;
mod session;
mod sweep;
#[cfg(test)]
mod tests;

use std::{
    collections::HashMap,
    sync::{
        Arc, Weak,
        atomic::{AtomicU64, Ordering},
    },
};

use protocol::{frame::ServerInfo, ids::SessionId};

pub(crate) use bridge::{Bridge, Link, LinkSendError, LinkTx, Outbound};
pub(crate) use call::Call;
#[cfg(test)]
pub(crate) use catalog::param_headers;
pub(crate) use catalog::{CachedServer, Catalog, ParamHeader, all_versions};
pub(crate) use exchange::{Held, SendError};
pub(crate) use reply::{Reply, ReplySink};
pub(crate) use router::{BridgeRef, CallRef, Route, Router, SessionRef};
pub(crate) use routing::{Delivery, LinkOrigin};
pub(crate) use session::{Session, kept_initialize};

use crate::{
    auth::SessionKeys,
    config::RelayConfig,
    metrics::Metrics,
    storage::{StorageError, Store, StoreWriter},
    stream::SseStreams,
};
use catalog::TextCache;
use lock::Lock;

/// The bridges' routing state on this node: the local router (`Router`). Its fields are its own; the
/// HTTP layer reaches it through the router trait, the daemon socket route through the
/// transitions of `bridge.rs`, `routing.rs`, `exchange.rs`, `call.rs` and `delivery.rs`.
#[derive(Debug)]
pub(crate) struct Hub {
    /// Durable state (catalogs, what a restart restores).
    store: Store,
    /// Configuration (the reconnect grace, the in-flight bound).
    config: Arc<RelayConfig>,
    /// Session id keys.
    keys: SessionKeys,
    /// SSE streams (resumable in the session era).
    streams: SseStreams,
    /// Metrics.
    metrics: Arc<Metrics>,
    /// The write-behind queue of durable sessions and streams (`None`: kept in memory only).
    durable: Option<StoreWriter>,
    bridges: Lock<HashMap<String, Arc<Bridge>>>,
    /// Every session and call, by `sid`.
    exchanges: Lock<HashMap<SessionId, Held>>,
    next_link: AtomicU64,
    texts: TextCache,
    /// The hub itself, for the tasks it spawns (retraction timers), which must not keep it
    /// alive.
    me: Weak<Hub>,
    /// Requests retracted as not delivered, to recognize a late `accepted`.
    retracted: Lock<delivery::RetractedLog>,
}

impl Hub {
    /// A hub over `store` whose sessions and streams live in memory only, with a random
    /// session id key (tests), counting in `metrics`.
    #[cfg(test)]
    pub(crate) fn new(store: Store, config: Arc<RelayConfig>, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new_cyclic(|me| {
            Self::build(me.clone(), store, config, metrics, SessionKeys::new(), None)
        })
    }

    /// The hub of a serving relay, counting in `metrics`: the session id key comes from the
    /// store (generated once), session-era sessions and their POST streams are persisted
    /// write-behind, and what a previous process left is restored (`Hub::restore`). Spawns the
    /// write-behind task (on the current tokio runtime), which ends once the hub is dropped.
    ///
    /// # Errors
    /// The store cannot be read, or holds unreadable session state (`Corrupt`, invariant 9:
    /// the relay does not start rather than silently drop or replace it).
    pub(crate) async fn open(
        store: Store,
        config: Arc<RelayConfig>,
        metrics: Arc<Metrics>,
    ) -> Result<Arc<Self>, StorageError> {
        let keys = SessionKeys::from_key(store.sessions().session_key().await?);
        let writer = store.spawn_writer();
        let hub = Arc::new_cyclic(|me| {
            Self::build(me.clone(), store, config, metrics, keys, Some(writer))
        });
        hub.restore().await?;
        Ok(hub)
    }

    fn build(
        me: std::sync::Weak<Self>,
        store: Store,
        config: Arc<RelayConfig>,
        metrics: Arc<Metrics>,
        keys: SessionKeys,
        durable: Option<StoreWriter>,
    ) -> Self {
        Self {
            me,
            retracted: Lock::new(Default::default()),
            store,
            config,
            keys,
            streams: durable.clone().map(SseStreams::durable).unwrap_or_default(),
            durable,
            metrics,
            bridges: Lock::new(HashMap::new()),
            texts: TextCache::default(),
            exchanges: Lock::new(HashMap::new()),
            next_link: AtomicU64::new(1),
        }
    }

    /// Every bridge that has an active daemon link, with the link.
    pub(crate) fn active_links(&self) -> Vec<(Arc<Bridge>, Link)> {
        let bridges: Vec<Arc<Bridge>> = self.bridges.lock().values().cloned().collect();
        bridges
            .into_iter()
            .filter_map(|b| b.active().map(|l| (b, l)))
            .collect()
    }

    /// A fresh socket id.
    pub(crate) fn next_link_id(&self) -> u64 {
        self.next_link.fetch_add(1, Ordering::Relaxed)
    }

    /// The write-behind queue of durable sessions and streams, when this hub keeps them
    /// (`None`: in memory only).
    pub(crate) fn durable(&self) -> Option<&StoreWriter> {
        self.durable.as_ref()
    }

    /// The live state of bridge `name` when it was made already.
    fn loaded(&self, name: &str) -> Option<Arc<Bridge>> {
        self.bridges.lock().get(name).cloned()
    }

    /// The live state of bridge `name` (created on first use, with its stored catalog).
    pub(crate) async fn bridge(&self, name: &str) -> Arc<Bridge> {
        if let Some(b) = self.loaded(name) {
            return b;
        }
        let catalog = match self.store.bridges().catalog(name).await {
            Ok(Some(text)) => serde_json::from_str::<Vec<ServerInfo>>(&text)
                .ok()
                .map(|v| Arc::new(self.texts.catalog(v))),
            _ => None,
        };
        self.bridges
            .lock()
            .entry(name.to_owned())
            .or_insert_with(|| Arc::new(Bridge::new(name, catalog)))
            .clone()
    }
}
