//! Revoking what the relay holds for a credential, and telling a running relay about it.
//!
//! The CLI and the relay are different processes over one store, so a revocation made with the
//! CLI reaches the relay through the store: every change that revokes something (a token, a
//! client or grant, an account change, a device key, a bridge) increments one counter,
//! [`super::RevocationStore::revocation_epoch`], which the relay polls every second and, when it moved,
//! re-checks the daemon sockets and sessions it holds.

use sqlx::Row;

use super::{SqliteStorage, StorageError, now};

/// A device key as `relay device list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceKeyRecord {
    /// Its id (`key_…`).
    pub key_id: String,
    /// Its bridge.
    pub bridge: String,
    /// Registration time (Unix seconds).
    pub created_at: i64,
    /// Revocation time (Unix seconds), if revoked.
    pub revoked_at: Option<i64>,
}

/// Increments the revocation counter inside `tx`; the caller announces the revocation on the
/// mark ([`super::revocation_mark`]) once `tx` has committed.
///
/// # Errors
/// Database failure.
pub(crate) async fn bump_in(tx: &mut sqlx::SqliteConnection) -> Result<(), StorageError> {
    sqlx::query("UPDATE relay_state SET value = value + 1 WHERE name = 'revocations'")
        .execute(&mut *tx)
        .await?;
    Ok(())
}

impl SqliteStorage {
    /// The revocation counter: it grows with every revocation (see the module).
    ///
    /// # Errors
    /// Database failure.
    pub(crate) async fn revocation_epoch(&self) -> Result<i64, StorageError> {
        Ok(
            sqlx::query("SELECT value FROM relay_state WHERE name = 'revocations'")
                .fetch_one(&self.pool)
                .await?
                .get(0),
        )
    }

    /// Increments the revocation counter.
    ///
    /// # Errors
    /// Database failure.
    pub(crate) async fn bump_revocations(&self) -> Result<(), StorageError> {
        let mut c = self.pool.acquire().await?;
        bump_in(&mut c).await?;
        self.mark.announce();
        Ok(())
    }

    /// Whether `credential` (a [`crate::auth::BridgePrincipal::credential`]) still authenticates:
    /// a static token not revoked; an OAuth grant not revoked, whose account is enabled at the
    /// grant's version and whose client is not revoked (its access tokens may have expired: the
    /// grant lives while it can be refreshed); `anonymous` always.
    ///
    /// # Errors
    /// Database failure.
    pub(crate) async fn credential_live(&self, credential: &str) -> Result<bool, StorageError> {
        if credential == "anonymous" {
            return Ok(true);
        }
        let sql = if credential.starts_with("fam_") {
            "SELECT 1 FROM oauth_families f \
             JOIN accounts a ON a.id = f.account_id AND a.version = f.account_version AND a.disabled_at IS NULL \
             JOIN oauth_clients c ON c.client_id = f.client_id AND c.revoked_at IS NULL \
             WHERE f.id = ? AND f.revoked_at IS NULL"
        } else {
            "SELECT 1 FROM tokens t JOIN bridges b ON b.name = t.bridge WHERE t.id = ? AND t.revoked_at IS NULL"
        };
        Ok(sqlx::query(sql)
            .bind(credential)
            .fetch_optional(&self.pool)
            .await?
            .is_some())
    }

    /// Device keys, optionally of one bridge, oldest first.
    ///
    /// # Errors
    /// Database failure.
    pub(crate) async fn device_keys(
        &self,
        bridge: Option<&str>,
    ) -> Result<Vec<DeviceKeyRecord>, StorageError> {
        let rows = sqlx::query(
            "SELECT key_id, bridge, created_at, revoked_at FROM device_keys \
             WHERE ?1 IS NULL OR bridge = ?1 ORDER BY created_at, key_id",
        )
        .bind(bridge)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| DeviceKeyRecord {
                key_id: r.get(0),
                bridge: r.get(1),
                created_at: r.get(2),
                revoked_at: r.get(3),
            })
            .collect())
    }

    /// Revokes device key `key_id`: its daemon can no longer connect, and a connected one is
    /// closed.
    ///
    /// # Errors
    /// `NotFound` for an unknown or already revoked key; database failure.
    pub(crate) async fn revoke_device_key(&self, key_id: &str) -> Result<(), StorageError> {
        let mut tx = self.pool.begin().await?;
        let r = sqlx::query(
            "UPDATE device_keys SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL",
        )
        .bind(now())
        .bind(key_id)
        .execute(&mut *tx)
        .await?;
        if r.rows_affected() == 0 {
            return Err(StorageError::NotFound(format!(
                "no active device key {key_id} (see `machine-mcp relay device list`)"
            )));
        }
        bump_in(&mut tx).await?;
        tx.commit().await?;
        self.mark.announce();
        Ok(())
    }

    /// Removes bridge `name` with everything that belongs to it: enrollment codes, device keys,
    /// tokens, accounts and their grants. Its daemon and sessions are ended by the relay.
    ///
    /// # Errors
    /// `NotFound` for an unknown bridge; database failure.
    pub(crate) async fn remove_bridge(&self, name: &str) -> Result<(), StorageError> {
        let mut tx = self.pool.begin().await?;
        let r = sqlx::query("DELETE FROM bridges WHERE name = ?")
            .bind(name)
            .execute(&mut *tx)
            .await?;
        if r.rows_affected() == 0 {
            return Err(StorageError::NotFound(format!("no bridge {name}")));
        }
        bump_in(&mut tx).await?;
        tx.commit().await?;
        self.mark.announce();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn re_enrollment_replaces_keys_unless_kept_and_every_revocation_moves_the_epoch() {
        let s = SqliteStorage::memory().await.unwrap();
        let e0 = s.revocation_epoch().await.unwrap();
        let first = s.add_bridge("b", 60).await.unwrap();
        let (_, k1) = s.enroll(&first, "pk1").await.unwrap();
        assert_eq!(s.revocation_epoch().await.unwrap(), e0, "nothing replaced");
        let second = s.add_bridge_code("b", 60, true).await.unwrap();
        let (_, k2) = s.enroll(&second, "pk2").await.unwrap();
        assert!(s.device_key(&k1).await.unwrap().is_some(), "kept");
        let third = s.add_bridge("b", 60).await.unwrap();
        let (_, k3) = s.enroll(&third, "pk3").await.unwrap();
        assert!(s.device_key(&k1).await.unwrap().is_none());
        assert!(s.device_key(&k2).await.unwrap().is_none());
        assert!(s.device_key(&k3).await.unwrap().is_some());
        let e1 = s.revocation_epoch().await.unwrap();
        assert!(e1 > e0);
        s.revoke_device_key(&k3).await.unwrap();
        assert!(s.revoke_device_key(&k3).await.is_err());
        let e2 = s.revocation_epoch().await.unwrap();
        assert!(e2 > e1);
        assert_eq!(s.device_keys(Some("b")).await.unwrap().len(), 3);
        s.remove_bridge("b").await.unwrap();
        assert!(
            s.device_keys(Some("b")).await.unwrap().is_empty(),
            "keys go with the bridge"
        );
        assert!(s.revocation_epoch().await.unwrap() > e2);
        assert!(s.remove_bridge("b").await.is_err());
    }

    /// The admission reads a credential and not its bridge: a credential must not outlive its
    /// bridge (foreign keys with `ON DELETE CASCADE`).
    #[tokio::test]
    async fn a_bridge_removed_takes_its_tokens_and_accounts_with_it() {
        let s = SqliteStorage::memory().await.unwrap();
        s.add_bridge("b", 60).await.unwrap();
        let (_, token) = s
            .create_token("b", crate::auth::Role::Operator, None)
            .await
            .unwrap();
        let hash = crate::auth::sha256_hex(&token);
        s.create_account("b", "ann", crate::auth::Role::Owner, "x")
            .await
            .unwrap();
        assert!(s.token_by_hash(&hash).await.unwrap().is_some());
        assert_eq!(s.accounts(Some("b")).await.unwrap().len(), 1);
        s.remove_bridge("b").await.unwrap();
        assert!(s.token_by_hash(&hash).await.unwrap().is_none());
        assert!(s.accounts(Some("b")).await.unwrap().is_empty());
    }
}
