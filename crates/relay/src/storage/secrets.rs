//! Key material generated once per store and read from it from then on (`relay_secrets`): the
//! keys every relay process and node on one store must agree on — the session id key
//! ([`super::SessionStore::session_key`]) and the consent form key
//! ([`super::OAuthStore::form_key`]). A key is never generated per process, and a damaged one
//! is refused, never replaced (invariant 9).

use sqlx::Row;

use super::{SqliteStorage, StorageError};

impl SqliteStorage {
    /// The 32-byte secret `name` (`what` names it in an error): generated the first time, read
    /// from the store from then on. Concurrent first calls agree: the first insert wins.
    ///
    /// # Errors
    /// Database failure; a stored value that is not 32 bytes (`Corrupt`).
    pub(crate) async fn secret(&self, name: &str, what: &str) -> Result<[u8; 32], StorageError> {
        let mut fresh = [0u8; 32];
        rand::RngCore::fill_bytes(&mut rand::thread_rng(), &mut fresh);
        sqlx::query("INSERT OR IGNORE INTO relay_secrets (name, value) VALUES (?, ?)")
            .bind(name)
            .bind(&fresh[..])
            .execute(&self.pool)
            .await?;
        let stored: Vec<u8> = sqlx::query("SELECT value FROM relay_secrets WHERE name = ?")
            .bind(name)
            .fetch_one(&self.pool)
            .await?
            .get(0);
        stored.try_into().map_err(|v: Vec<u8>| {
            StorageError::Corrupt(format!("the stored {what} has {} bytes, not 32", v.len()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The consent form key is the store's, like the session id key: the same for every
    /// process that opens the store (so a form rendered by one is accepted by another), apart
    /// from the session id key, and a damaged one is refused.
    #[tokio::test]
    async fn the_form_key_is_kept_in_the_store_apart_from_the_session_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("relay.db");
        let a = SqliteStorage::open(&path).await.unwrap();
        let key = a.form_key().await.unwrap();
        let b = SqliteStorage::open(&path).await.unwrap();
        assert_eq!(
            b.form_key().await.unwrap(),
            key,
            "another process, the same key"
        );
        assert_ne!(b.session_key().await.unwrap(), key);
        sqlx::query("UPDATE relay_secrets SET value = x'0102' WHERE name = 'consent_form_key'")
            .execute(&b.pool)
            .await
            .unwrap();
        assert!(matches!(b.form_key().await, Err(StorageError::Corrupt(_))));
        assert!(b.session_key().await.is_ok(), "the other key is untouched");
    }
}
