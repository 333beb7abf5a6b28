//! Durable relay state: bridges, enrollment codes, device keys, bearer tokens, and (in
//! [`accounts`] and [`oauth`]) the accounts, clients, codes and tokens of OAuth 2.1, the durable
//! MCP sessions and stream events ([`durable`]), revocations ([`revocation`]).
//!
//! This module is the storage seam (DESIGN §6: an embedded SQLite implementation now, PostgreSQL
//! later). Callers hold a [`Store`] ([`open`], [`memory`]) and reach each aggregate through its
//! trait ([`traits`]: [`BridgeStore`], [`AccountStore`], [`OAuthStore`], [`SessionStore`],
//! [`RevocationStore`], [`GuardStore`]); no SQLite or `sqlx` type is named outside this module. The SQLite
//! implementation keeps everything in one database file in WAL mode, so the CLI (`relay token
//! create`, `relay bridge add`) and a running relay can use it at once. Secrets — enrollment codes
//! and tokens — are stored only as SHA-256 hashes. Unreadable or corrupt state is an error, never
//! silently replaced (invariant 9).

use std::{path::Path, str::FromStr};

use sqlx::{
    ConnectOptions, Row, SqlitePool,
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous},
};

use crate::auth::Role;

pub mod accounts;
mod credentials;
pub mod durable;
pub mod guards;
pub mod oauth;
pub mod revocation;
pub mod revocation_mark;
mod secrets;
mod sqlite;
mod store;
pub mod traits;
pub mod writer;

pub use accounts::Account;
pub use durable::{Payload, SessionRecord, StoreWrite, StoredEvent, StreamRecord};
pub use guards::{MemoryGuards, Seen};
pub use revocation::DeviceKeyRecord;
pub use store::{Store, memory, open};
pub use traits::{
    AccountStore, BridgeStore, GuardFuture, GuardStore, OAuthStore, RevocationStore, SessionStore,
    StoreFuture,
};
pub use writer::StoreWriter;

/// A storage failure.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The database could not be opened, read or written.
    #[error("relay store: {0}")]
    Db(#[from] sqlx::Error),
    /// Applying the schema failed.
    #[error("relay store migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A named object does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The request conflicts with stored state.
    #[error("{0}")]
    Conflict(String),
    /// Stored data is not what this build can read.
    #[error("relay store holds unreadable data: {0}")]
    Corrupt(String),
}

/// A bearer token record (never the token itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRecord {
    /// Public id, e.g. `tok_3f9a…`.
    pub id: String,
    /// The bridge it grants access to.
    pub bridge: String,
    /// Its role.
    pub role: Role,
    /// Free-form label.
    pub label: Option<String>,
    /// Creation time (Unix seconds).
    pub created_at: i64,
    /// Revocation time (Unix seconds), if revoked.
    pub revoked_at: Option<i64>,
}

/// A registered device key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceKey {
    /// Key id named in `hello`.
    pub key_id: String,
    /// Its bridge.
    pub bridge: String,
    /// SEC1 public key, base64url.
    pub public_key: String,
}

/// The SQLite implementation of the store: one database file (or memory), a pool of four
/// connections.
#[derive(Debug, Clone)]
pub(crate) struct SqliteStorage {
    pool: SqlitePool,
    /// The revocation mark beside the database file ([`revocation_mark`]).
    mark: std::sync::Arc<revocation_mark::MarkFile>,
}

/// Wall-clock time in Unix seconds (what the store records).
pub(crate) fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

impl SqliteStorage {
    /// Opens (creating if needed) the database at `path` and applies the schema.
    ///
    /// # Errors
    /// The file cannot be opened or created, or the schema cannot be applied.
    pub(crate) async fn open(path: &Path) -> Result<Self, StorageError> {
        if let Some(dir) = path.parent() {
            // Owner-only, for the directories created here (an existing one is left as it is).
            use std::os::unix::fs::DirBuilderExt;
            let _ = std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir);
        }
        // `secure_delete`: deleted rows (stored tool results among them) are overwritten, not
        // left in free pages; the WAL is truncated after each store sweep
        // ([`SqliteStorage::apply`]). Statements are not logged, even at debug. WAL with
        // `synchronous = NORMAL`: a commit has reached the operating system when it returns, so
        // it survives a crash or kill of the relay; it reaches the disk at the next checkpoint,
        // so a power loss may roll back the last commits but never corrupts the file (SQLite,
        // "Write-Ahead Logging" and `PRAGMA synchronous`). A commit then costs no fsync, which
        // matters because a POST's stream waits for its row (`StoreWriter::applied`).
        let opts = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .pragma("secure_delete", "ON")
            .busy_timeout(std::time::Duration::from_secs(5))
            .disable_statement_logging();
        // No ping before each acquire: a connection to a local file does not go stale as a
        // network one does (a dead worker fails the query itself), and the ping is one more
        // round trip to the connection's worker thread for every query.
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .test_before_acquire(false)
            .connect_with(opts)
            .await?;
        sqlx::migrate!("./migrations").run(&pool).await?;
        restrict_permissions(path);
        let mark = std::sync::Arc::new(revocation_mark::MarkFile::open(path));
        Ok(Self { pool, mark })
    }

    /// The connection pool (tests that corrupt rows on purpose).
    #[cfg(test)]
    pub(crate) fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// An in-memory database (tests).
    ///
    /// # Errors
    /// As [`SqliteStorage::open`].
    pub(crate) async fn memory() -> Result<Self, StorageError> {
        let opts = SqliteConnectOptions::from_str("sqlite::memory:")?.foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(opts)
            .await?;
        sqlx::migrate!("./migrations").run(&pool).await?;
        let mark = std::sync::Arc::new(revocation_mark::MarkFile::memory());
        Ok(Self { pool, mark })
    }

    /// Creates `bridge` if it does not exist and issues a one-time enrollment code valid for
    /// `ttl_secs`. Returns the code (shown once; only its hash is stored).
    ///
    /// # Errors
    /// Database failure.
    pub(crate) async fn add_bridge(
        &self,
        bridge: &str,
        ttl_secs: i64,
    ) -> Result<String, StorageError> {
        self.add_bridge_code(bridge, ttl_secs, false).await
    }

    /// Like [`SqliteStorage::add_bridge`]; the code, when redeemed, revokes the bridge's other
    /// device keys unless `keep_existing` (a second machine for the same bridge).
    ///
    /// # Errors
    /// Database failure.
    pub(crate) async fn add_bridge_code(
        &self,
        bridge: &str,
        ttl_secs: i64,
        keep_existing: bool,
    ) -> Result<String, StorageError> {
        sqlx::query("INSERT OR IGNORE INTO bridges (name, created_at) VALUES (?, ?)")
            .bind(bridge)
            .bind(now())
            .execute(&self.pool)
            .await?;
        let code = crate::auth::random_secret("mbe_");
        sqlx::query(
            "INSERT INTO enrollments (code_hash, bridge, expires_at, keep_existing) VALUES (?, ?, ?, ?)",
        )
        .bind(crate::auth::sha256_hex(&code))
        .bind(bridge)
        .bind(now() + ttl_secs)
        .bind(keep_existing)
        .execute(&self.pool)
        .await?;
        Ok(code)
    }

    /// Bridge names, sorted.
    ///
    /// # Errors
    /// Database failure.
    pub(crate) async fn bridges(&self) -> Result<Vec<String>, StorageError> {
        let rows = sqlx::query("SELECT name FROM bridges ORDER BY name")
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.iter().map(|r| r.get::<String, _>(0)).collect())
    }

    /// Whether `bridge` exists.
    ///
    /// # Errors
    /// Database failure.
    pub(crate) async fn bridge_exists(&self, bridge: &str) -> Result<bool, StorageError> {
        Ok(sqlx::query("SELECT 1 FROM bridges WHERE name = ?")
            .bind(bridge)
            .fetch_optional(&self.pool)
            .await?
            .is_some())
    }

    /// Redeems an enrollment code: registers `public_key` for its bridge and returns
    /// `(bridge, key_id)`. Unless the code was issued to keep them, the bridge's other device keys
    /// are revoked (re-enrollment replaces a lost or stolen key; connected daemons holding them
    /// are closed by the relay, which watches [`SqliteStorage::revocation_epoch`]).
    ///
    /// Redeeming is idempotent for the key that redeemed it: a used code presented again with
    /// the same `public_key`, before the code expires and while that key is not revoked, returns
    /// the same `(bridge, key_id)` and changes nothing. A daemon whose `enrolled` answer was lost
    /// (its enrollment timed out, its socket dropped) can therefore enroll again with the same
    /// code; whoever else holds the code learns only the bridge's name and a key id that needs
    /// the daemon's private key to be used.
    ///
    /// # Errors
    /// `NotFound` for an unknown or expired code, or one used by another key or by a key since
    /// revoked; database failure.
    pub(crate) async fn enroll(
        &self,
        code: &str,
        public_key: &str,
    ) -> Result<(String, String), StorageError> {
        let mut tx = self.pool.begin().await?;
        // Write first: a deferred transaction that read first could not wait for the write lock
        // (SQLITE_BUSY at once under concurrent enrollments); a first write waits up to the
        // busy timeout.
        let code_hash = crate::auth::sha256_hex(code);
        let key_id = crate::auth::random_id("key_");
        let row = sqlx::query(
            "UPDATE enrollments SET used_at = ?, key_id = ? \
             WHERE code_hash = ? AND used_at IS NULL AND expires_at > ? RETURNING bridge, keep_existing",
        )
        .bind(now())
        .bind(&key_id)
        .bind(&code_hash)
        .bind(now())
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            let again = sqlx::query(
                "SELECT e.bridge, e.key_id FROM enrollments e JOIN device_keys k ON k.key_id = e.key_id \
                 WHERE e.code_hash = ? AND e.expires_at > ? AND k.public_key = ? AND k.revoked_at IS NULL",
            )
            .bind(&code_hash)
            .bind(now())
            .bind(public_key)
            .fetch_optional(&mut *tx)
            .await?;
            return match again {
                Some(r) => Ok((r.get(0), r.get(1))),
                None => Err(StorageError::NotFound(
                    "the enrollment code is unknown, expired, or used by another device key or by one \
                     since revoked: make a new code"
                        .into(),
                )),
            };
        };
        let bridge: String = row.get(0);
        let keep_existing: bool = row.get(1);
        let mut revoked = false;
        if !keep_existing {
            let replaced = sqlx::query(
                "UPDATE device_keys SET revoked_at = ? WHERE bridge = ? AND revoked_at IS NULL",
            )
            .bind(now())
            .bind(&bridge)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if replaced > 0 {
                revocation::bump_in(&mut tx).await?;
                revoked = true;
            }
        }
        sqlx::query(
            "INSERT INTO device_keys (key_id, bridge, public_key, created_at) VALUES (?, ?, ?, ?)",
        )
        .bind(&key_id)
        .bind(&bridge)
        .bind(public_key)
        .bind(now())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        if revoked {
            self.mark.announce();
        }
        Ok((bridge, key_id))
    }

    /// Registers a device key directly (used by `machine-mcp up`, which enrolls itself).
    ///
    /// # Errors
    /// Unknown bridge; database failure.
    pub(crate) async fn register_key(
        &self,
        bridge: &str,
        public_key: &str,
    ) -> Result<String, StorageError> {
        if !self.bridge_exists(bridge).await? {
            return Err(StorageError::NotFound(format!("no bridge {bridge}")));
        }
        let key_id = crate::auth::random_id("key_");
        sqlx::query(
            "INSERT INTO device_keys (key_id, bridge, public_key, created_at) VALUES (?, ?, ?, ?)",
        )
        .bind(&key_id)
        .bind(bridge)
        .bind(public_key)
        .bind(now())
        .execute(&self.pool)
        .await?;
        Ok(key_id)
    }

    /// The unrevoked device key `key_id`.
    ///
    /// # Errors
    /// Database failure.
    pub(crate) async fn device_key(&self, key_id: &str) -> Result<Option<DeviceKey>, StorageError> {
        let row = sqlx::query(
            "SELECT key_id, bridge, public_key FROM device_keys WHERE key_id = ? AND revoked_at IS NULL",
        )
        .bind(key_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| DeviceKey {
            key_id: r.get(0),
            bridge: r.get(1),
            public_key: r.get(2),
        }))
    }

    /// Creates a token for `bridge` with `role`; returns the record and the token (shown once).
    ///
    /// # Errors
    /// Unknown bridge; database failure.
    pub(crate) async fn create_token(
        &self,
        bridge: &str,
        role: Role,
        label: Option<&str>,
    ) -> Result<(TokenRecord, String), StorageError> {
        if !self.bridge_exists(bridge).await? {
            return Err(StorageError::NotFound(format!(
                "no bridge {bridge}; create it with `machine-mcp relay bridge add {bridge}`"
            )));
        }
        let token = crate::auth::random_secret("mbt_");
        let rec = TokenRecord {
            id: crate::auth::random_id("tok_"),
            bridge: bridge.to_owned(),
            role,
            label: label.map(str::to_owned),
            created_at: now(),
            revoked_at: None,
        };
        sqlx::query(
            "INSERT INTO tokens (id, bridge, role, token_hash, label, created_at) VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind(&rec.id)
        .bind(&rec.bridge)
        .bind(rec.role.as_str())
        .bind(crate::auth::sha256_hex(&token))
        .bind(&rec.label)
        .bind(rec.created_at)
        .execute(&self.pool)
        .await?;
        Ok((rec, token))
    }

    /// The unrevoked token whose hash is `token_hash`.
    ///
    /// # Errors
    /// Database failure; a stored role this build does not know (`Corrupt`).
    pub(crate) async fn token_by_hash(
        &self,
        token_hash: &str,
    ) -> Result<Option<TokenRecord>, StorageError> {
        let row = sqlx::query(
            "SELECT id, bridge, role, label, created_at, revoked_at FROM tokens WHERE token_hash = ? AND revoked_at IS NULL",
        )
        .bind(token_hash)
        .fetch_optional(&self.pool)
        .await?;
        row.map(token_row).transpose()
    }

    /// Tokens, optionally of one bridge, oldest first.
    ///
    /// # Errors
    /// Database failure; unreadable rows.
    pub(crate) async fn tokens(
        &self,
        bridge: Option<&str>,
    ) -> Result<Vec<TokenRecord>, StorageError> {
        let rows = sqlx::query(
            "SELECT id, bridge, role, label, created_at, revoked_at FROM tokens WHERE ?1 IS NULL OR bridge = ?1 ORDER BY created_at, id",
        )
        .bind(bridge)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(token_row).collect()
    }

    /// Revokes token `id`.
    ///
    /// # Errors
    /// `NotFound` for an unknown or already revoked id; database failure.
    pub(crate) async fn revoke_token(&self, id: &str) -> Result<(), StorageError> {
        let r = sqlx::query("UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL")
            .bind(now())
            .bind(id)
            .execute(&self.pool)
            .await?;
        if r.rows_affected() == 0 {
            return Err(StorageError::NotFound(format!("no active token {id}")));
        }
        self.bump_revocations().await
    }

    /// Stores the catalog (servers of the last hello, JSON) of `bridge`.
    ///
    /// # Errors
    /// Database failure.
    pub(crate) async fn set_catalog(
        &self,
        bridge: &str,
        catalog: &str,
    ) -> Result<(), StorageError> {
        sqlx::query("UPDATE bridges SET catalog = ? WHERE name = ?")
            .bind(catalog)
            .bind(bridge)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The stored catalog of `bridge`, if any.
    ///
    /// # Errors
    /// Database failure.
    pub(crate) async fn catalog(&self, bridge: &str) -> Result<Option<String>, StorageError> {
        let row = sqlx::query("SELECT catalog FROM bridges WHERE name = ?")
            .bind(bridge)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.and_then(|r| r.get::<Option<String>, _>(0)))
    }
}

fn token_row(r: sqlx::sqlite::SqliteRow) -> Result<TokenRecord, StorageError> {
    let role: String = r.get(2);
    Ok(TokenRecord {
        id: r.get(0),
        bridge: r.get(1),
        role: Role::parse(&role).map_err(StorageError::Corrupt)?,
        label: r.get(3),
        created_at: r.get(4),
        revoked_at: r.get(5),
    })
}

/// Keeps the database owner-only; it holds key material and token hashes.
fn restrict_permissions(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    for p in [
        path.to_owned(),
        path.with_extension("db-wal"),
        path.with_extension("db-shm"),
    ] {
        if p.exists() {
            let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A query on the relay's store costs one round trip to a connection's worker thread, not
    /// two: the pool does not ping a connection before handing it out.
    #[tokio::test]
    async fn the_store_hands_out_connections_without_a_ping() {
        let dir = tempfile::tempdir().unwrap();
        let s = SqliteStorage::open(&dir.path().join("relay.db"))
            .await
            .unwrap();
        assert!(!s.pool.options().get_test_before_acquire());
    }

    #[tokio::test]
    async fn tokens_and_enrollment() {
        let s = SqliteStorage::memory().await.unwrap();
        let code = s.add_bridge("laptop", 3600).await.unwrap();
        let (bridge, key_id) = s.enroll(&code, "pk").await.unwrap();
        assert_eq!(bridge, "laptop");
        assert!(s.enroll(&code, "pk2").await.is_err(), "a code works once");
        assert_eq!(
            s.device_key(&key_id).await.unwrap().unwrap().public_key,
            "pk"
        );
        let (rec, token) = s
            .create_token("laptop", Role::Reviewer, Some("ci"))
            .await
            .unwrap();
        let found = s
            .token_by_hash(&crate::auth::sha256_hex(&token))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(found, rec);
        s.revoke_token(&rec.id).await.unwrap();
        assert!(
            s.token_by_hash(&crate::auth::sha256_hex(&token))
                .await
                .unwrap()
                .is_none()
        );
        assert!(s.create_token("nope", Role::Owner, None).await.is_err());
    }

    /// A daemon whose `enrolled` answer was lost (its enrollment timed out while the relay was
    /// saturated, or its socket dropped) redeems the same code again with the same key: it gets
    /// the key id the first redemption registered, and nothing is revoked or registered twice.
    /// Another key, a revoked key or an expired code still gets nothing.
    #[tokio::test]
    async fn a_code_redeemed_again_with_the_same_key_answers_as_the_first_time() {
        let s = SqliteStorage::memory().await.unwrap();
        let code = s.add_bridge("laptop", 3600).await.unwrap();
        let first = s.enroll(&code, "pk").await.unwrap();
        let epoch = s.revocation_epoch().await.unwrap();
        assert_eq!(s.enroll(&code, "pk").await.unwrap(), first);
        assert_eq!(
            s.revocation_epoch().await.unwrap(),
            epoch,
            "nothing revoked"
        );
        let keys: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM device_keys")
            .fetch_one(&s.pool)
            .await
            .unwrap();
        assert_eq!(keys, 1, "one key registered");
        assert!(s.enroll(&code, "other").await.is_err(), "another key");

        let second = s.add_bridge("laptop", 3600).await.unwrap();
        s.enroll(&second, "pk2").await.unwrap();
        assert!(
            s.enroll(&code, "pk").await.is_err(),
            "the first key was replaced by a later enrollment"
        );

        let gone = s.add_bridge("old", 3600).await.unwrap();
        s.enroll(&gone, "pk3").await.unwrap();
        sqlx::query("UPDATE enrollments SET expires_at = 0")
            .execute(&s.pool)
            .await
            .unwrap();
        assert!(s.enroll(&gone, "pk3").await.is_err(), "an expired code");
    }

    /// Regression (benchmark with 100 daemons enrolling at once): the enrollment transaction
    /// read first and wrote second, so concurrent ones failed with SQLITE_BUSY (a deferred
    /// transaction cannot wait to upgrade its read lock) and daemons saw "enrollment failed".
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_enrollments_all_succeed() {
        let dir = tempfile::tempdir().unwrap();
        let s = SqliteStorage::open(&dir.path().join("relay.db"))
            .await
            .unwrap();
        let mut codes = Vec::new();
        for i in 0..64 {
            codes.push(s.add_bridge(&format!("b{i}"), 3600).await.unwrap());
        }
        let tasks: Vec<_> = codes
            .into_iter()
            .map(|code| {
                let s = s.clone();
                tokio::spawn(async move { s.enroll(&code, "pk").await })
            })
            .collect();
        for t in tasks {
            let r = t.await.unwrap();
            assert!(r.is_ok(), "{r:?}");
        }
    }
}
