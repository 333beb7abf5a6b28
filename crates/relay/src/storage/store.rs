//! [`Store`]: the handle every part of the relay (and the CLI) holds on the store, one trait
//! object per aggregate ([`super::traits`]), and [`open`] / [`memory`], which make one over the
//! embedded SQLite implementation.
//!
//! Callers name `Store` and the aggregate traits only, never the implementation: a backend is
//! chosen where the store is opened, and a second one (PostgreSQL, DESIGN §6) plugs in through
//! [`Store::new`].

use std::{path::Path, sync::Arc};

use super::{
    SqliteStorage, StorageError, StoreWriter,
    guards::MemoryGuards,
    traits::{AccountStore, BridgeStore, GuardStore, OAuthStore, RevocationStore, SessionStore},
};

/// The relay's store: cheap to clone (the clones share the backend).
#[derive(Debug, Clone)]
pub struct Store {
    bridges: Arc<dyn BridgeStore>,
    accounts: Arc<dyn AccountStore>,
    oauth: Arc<dyn OAuthStore>,
    sessions: Arc<dyn SessionStore>,
    revocations: Arc<dyn RevocationStore>,
    guards: Arc<dyn GuardStore>,
    /// Credentials the store vouched for ([`super::credentials`]).
    pub(super) credentials: Arc<super::credentials::CredentialCache>,
    /// The SQLite backend, for tests that damage or count rows on purpose.
    #[cfg(test)]
    pub(super) sqlite: Option<SqliteStorage>,
}

impl Store {
    /// A store whose durable aggregates are kept by `backend`, with `guards` for replay
    /// guards and throttles.
    pub fn new<B, G>(backend: B, guards: G) -> Self
    where
        B: BridgeStore + AccountStore + OAuthStore + SessionStore + RevocationStore + 'static,
        G: GuardStore + 'static,
    {
        let b = Arc::new(backend);
        Self {
            bridges: b.clone(),
            accounts: b.clone(),
            oauth: b.clone(),
            sessions: b.clone(),
            revocations: b,
            guards: Arc::new(guards),
            credentials: Arc::default(),
            #[cfg(test)]
            sqlite: None,
        }
    }

    /// Bridges, enrollment codes, device keys and catalogs.
    pub fn bridges(&self) -> &dyn BridgeStore {
        &*self.bridges
    }

    /// Accounts and static tokens.
    pub fn accounts(&self) -> &dyn AccountStore {
        &*self.accounts
    }

    /// OAuth clients, codes, grants and tokens.
    pub fn oauth(&self) -> &dyn OAuthStore {
        &*self.oauth
    }

    /// Durable MCP sessions and stream events.
    pub fn sessions(&self) -> &dyn SessionStore {
        &*self.sessions
    }

    /// The revocation counter and credential checks.
    pub fn revocations(&self) -> &dyn RevocationStore {
        &*self.revocations
    }

    /// Replay guards and throttles.
    pub fn guards(&self) -> &dyn GuardStore {
        &*self.guards
    }

    /// Starts the write-behind task that applies durable session and stream writes to this
    /// store ([`StoreWriter`]), on the current tokio runtime; it ends once every clone of the
    /// writer is dropped and its queue is drained.
    pub fn spawn_writer(&self) -> StoreWriter {
        StoreWriter::spawn(self.sessions.clone())
    }
}

/// Opens (creating if needed) the SQLite store at `path` and applies its schema: one database
/// file in WAL mode, owner-only, which the CLI and a running relay can use at once; replay
/// guards and throttles in this process's memory ([`MemoryGuards`]).
///
/// # Errors
/// The file cannot be opened or created, or the schema cannot be applied.
pub async fn open(path: &Path) -> Result<Store, StorageError> {
    Ok(over(SqliteStorage::open(path).await?))
}

/// A store in memory (tests), with the same schema.
///
/// # Errors
/// As [`open`].
pub async fn memory() -> Result<Store, StorageError> {
    Ok(over(SqliteStorage::memory().await?))
}

fn over(sqlite: SqliteStorage) -> Store {
    #[cfg(test)]
    {
        let mut store = Store::new(sqlite.clone(), MemoryGuards::default());
        store.sqlite = Some(sqlite);
        store
    }
    #[cfg(not(test))]
    Store::new(sqlite, MemoryGuards::default())
}

#[cfg(test)]
impl Store {
    /// Runs `sql` with `binds` on the SQLite backend and returns how many rows it changed
    /// (tests that damage stored rows on purpose).
    pub(crate) async fn execute_sql(&self, sql: &str, binds: &[&str]) -> u64 {
        let mut q = sqlx::query(sql);
        for b in binds {
            q = q.bind(*b);
        }
        q.execute(self.sqlite().pool())
            .await
            .expect("a test statement")
            .rows_affected()
    }

    /// How many rows `table` of the SQLite backend holds.
    pub(crate) async fn count_rows(&self, table: &str) -> i64 {
        sqlx::Row::get(
            &sqlx::query(&format!("SELECT count(*) FROM {table}"))
                .fetch_one(self.sqlite().pool())
                .await
                .expect("a count"),
            0,
        )
    }

    fn sqlite(&self) -> &SqliteStorage {
        self.sqlite.as_ref().expect("a store opened over SQLite")
    }
}
