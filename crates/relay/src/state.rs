//! [`AppState`]: the relay's application state, made of substates that handlers extract one by
//! one through axum's `FromRef` (axum `extract::State`, "Substates"), so that each handler names
//! only what it needs.
//!
//! - the configuration ([`RelayConfig`]) and the store ([`Store`]);
//! - the metrics (`Metrics`);
//! - admission (`Admission`): Host/Origin checks, credentials, connection caps, the daemon
//!   sockets still authenticating;
//! - the OAuth authorization server ([`OAuth`]), which sees neither the bridges nor the daemons;
//! - the router (`Router`, the routing seam): the only thing the MCP endpoints call after
//!   admission;
//! - the bridges' routing state on this node (`Hub`, the local router): the daemon socket
//!   route serves its daemons.
//!
//! Rules: the substates are built once per relay process ([`AppState::open`]) and shared
//! (`Arc`); extracting one clones a pointer. Nothing else holds the whole application.

use std::sync::Arc;

use axum::extract::FromRef;

use crate::{
    admission::Admission,
    config::RelayConfig,
    hub::{Hub, Router},
    metrics::Metrics,
    oauth::OAuth,
    storage::{StorageError, Store},
};

/// The relay's application state: its substates (see the module docs).
#[derive(Debug, Clone)]
pub struct AppState {
    pub(crate) config: Arc<RelayConfig>,
    pub(crate) store: Store,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) admission: Arc<Admission>,
    pub(crate) oauth: Arc<OAuth>,
    pub(crate) router: Arc<dyn Router>,
    pub(crate) hub: Arc<Hub>,
}

impl AppState {
    /// The state of a serving relay over `store`: the bridges' routing state with what a
    /// previous process left restored (`Hub::open`, which also starts the write-behind task of
    /// durable sessions and streams), and the OAuth server with the store's consent form key.
    ///
    /// # Errors
    /// The store cannot be read, or holds unreadable state (`Corrupt`: the relay does not start,
    /// invariant 9).
    pub async fn open(store: Store, config: RelayConfig) -> Result<Self, StorageError> {
        let config = Arc::new(config);
        let metrics = Arc::<Metrics>::default();
        let hub = Hub::open(store.clone(), config.clone(), metrics.clone()).await?;
        Self::with_hub(store, config, metrics, hub).await
    }

    /// The state of a relay whose sessions and streams live in memory only (tests).
    #[cfg(test)]
    pub(crate) async fn in_memory(store: Store, config: RelayConfig) -> Self {
        let config = Arc::new(config);
        let metrics = Arc::<Metrics>::default();
        let hub = Hub::new(store.clone(), config.clone(), metrics.clone());
        Self::with_hub(store, config, metrics, hub)
            .await
            .expect("a store in memory")
    }

    async fn with_hub(
        store: Store,
        config: Arc<RelayConfig>,
        metrics: Arc<Metrics>,
        hub: Arc<Hub>,
    ) -> Result<Self, StorageError> {
        let oauth = Arc::new(OAuth::open(config.clone(), store.clone()).await?);
        let admission = Arc::new(Admission::new(
            config.clone(),
            store.clone(),
            metrics.clone(),
        ));
        Ok(Self {
            config,
            store,
            metrics,
            admission,
            oauth,
            router: hub.clone(),
            hub,
        })
    }
}

impl FromRef<AppState> for Arc<RelayConfig> {
    fn from_ref(state: &AppState) -> Self {
        state.config.clone()
    }
}

impl FromRef<AppState> for Store {
    fn from_ref(state: &AppState) -> Self {
        state.store.clone()
    }
}

impl FromRef<AppState> for Arc<Metrics> {
    fn from_ref(state: &AppState) -> Self {
        state.metrics.clone()
    }
}

impl FromRef<AppState> for Arc<Admission> {
    fn from_ref(state: &AppState) -> Self {
        state.admission.clone()
    }
}

impl FromRef<AppState> for Arc<OAuth> {
    fn from_ref(state: &AppState) -> Self {
        state.oauth.clone()
    }
}

impl FromRef<AppState> for Arc<dyn Router> {
    fn from_ref(state: &AppState) -> Self {
        state.router.clone()
    }
}

impl FromRef<AppState> for Arc<Hub> {
    fn from_ref(state: &AppState) -> Self {
        state.hub.clone()
    }
}
