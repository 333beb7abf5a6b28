//! Accounts: the people who sign in on a bridge's consent page (DESIGN §6), one role each.
//!
//! Passwords arrive here already hashed (argon2id PHC strings, [`crate::oauth::password`]).
//! Every change that must end an account's tokens at once — a role change, disabling it, a new
//! password — increments its `version`; tokens record the version they were issued under and
//! stop working when it differs ([`super::oauth`]).

use sqlx::Row;

use super::{SqliteStorage, StorageError, now};
use crate::auth::{Role, random_id};

/// An account of one bridge (never its password hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    /// Stable id, `acct_` + 12 hex digits.
    pub id: String,
    /// The bridge it signs in to.
    pub bridge: String,
    /// Its sign-in name, unique within the bridge.
    pub name: String,
    /// Its role on the bridge.
    pub role: Role,
    /// Grows with every change that ends its tokens (role, disable, password).
    pub version: i64,
    /// Disabled accounts cannot sign in and their tokens are refused.
    pub disabled: bool,
    /// Creation time (Unix seconds).
    pub created_at: i64,
}

/// How an account changes ([`super::AccountStore::update_account`]).
#[derive(Debug, Clone)]
pub enum AccountChange {
    /// A new role; ends its tokens.
    Role(Role),
    /// Disable; ends its tokens.
    Disable,
    /// Enable again (tokens ended by the disable stay ended).
    Enable,
    /// A new password hash; ends its tokens.
    Password(String),
}

const COLUMNS: &str = "id, bridge, name, role, version, disabled_at, created_at";

fn account_row(r: &sqlx::sqlite::SqliteRow) -> Result<Account, StorageError> {
    let role: String = r.get(3);
    Ok(Account {
        id: r.get(0),
        bridge: r.get(1),
        name: r.get(2),
        role: Role::parse(&role).map_err(StorageError::Corrupt)?,
        version: r.get(4),
        disabled: r.get::<Option<i64>, _>(5).is_some(),
        created_at: r.get(6),
    })
}

/// Checks an account name: 1–64 letters, digits, `.`, `_`, `-` or `@`.
///
/// # Errors
/// A message saying what is allowed.
pub fn check_account_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "account name {name:?} must be 1-64 letters, digits, '.', '_', '-' or '@'"
        ))
    }
}

impl SqliteStorage {
    /// Creates account `name` on `bridge` with `role` and the argon2id `password_hash`.
    ///
    /// # Errors
    /// `NotFound` for an unknown bridge, `Conflict` when the name is taken on that bridge, a
    /// malformed name (`Conflict` with the rule), database failure.
    pub(crate) async fn create_account(
        &self,
        bridge: &str,
        name: &str,
        role: Role,
        password_hash: &str,
    ) -> Result<Account, StorageError> {
        check_account_name(name).map_err(StorageError::Conflict)?;
        if !self.bridge_exists(bridge).await? {
            return Err(StorageError::NotFound(format!(
                "no bridge {bridge}; create it with `machine-mcp relay bridge add {bridge}`"
            )));
        }
        let account = Account {
            id: random_id("acct_"),
            bridge: bridge.to_owned(),
            name: name.to_owned(),
            role,
            version: 1,
            disabled: false,
            created_at: now(),
        };
        let r = sqlx::query(
            "INSERT INTO accounts (id, bridge, name, role, password_hash, version, created_at) \
             VALUES (?, ?, ?, ?, ?, 1, ?) ON CONFLICT DO NOTHING",
        )
        .bind(&account.id)
        .bind(bridge)
        .bind(name)
        .bind(role.as_str())
        .bind(password_hash)
        .bind(account.created_at)
        .execute(&self.pool)
        .await?;
        if r.rows_affected() == 0 {
            return Err(StorageError::Conflict(format!(
                "bridge {bridge} already has an account {name}"
            )));
        }
        Ok(account)
    }

    /// The account `name` of `bridge` and its password hash.
    ///
    /// # Errors
    /// Database failure; a stored role this build does not know (`Corrupt`).
    pub(crate) async fn account_with_password(
        &self,
        bridge: &str,
        name: &str,
    ) -> Result<Option<(Account, String)>, StorageError> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS}, password_hash FROM accounts WHERE bridge = ? AND name = ? COLLATE NOCASE"
        ))
        .bind(bridge)
        .bind(name)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| Ok((account_row(&r)?, r.get(7)))).transpose()
    }

    /// The account `name` of `bridge`.
    ///
    /// # Errors
    /// As [`SqliteStorage::account_with_password`].
    pub(crate) async fn account(
        &self,
        bridge: &str,
        name: &str,
    ) -> Result<Option<Account>, StorageError> {
        Ok(self
            .account_with_password(bridge, name)
            .await?
            .map(|(a, _)| a))
    }

    /// Accounts, optionally of one bridge, by bridge and name.
    ///
    /// # Errors
    /// Database failure; unreadable rows.
    pub(crate) async fn accounts(
        &self,
        bridge: Option<&str>,
    ) -> Result<Vec<Account>, StorageError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM accounts WHERE ?1 IS NULL OR bridge = ?1 ORDER BY bridge, name"
        ))
        .bind(bridge)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(account_row).collect()
    }

    /// Applies `change` to account `name` of `bridge` and returns it as it is now.
    ///
    /// # Errors
    /// `NotFound` for an unknown account; database failure.
    pub(crate) async fn update_account(
        &self,
        bridge: &str,
        name: &str,
        change: AccountChange,
    ) -> Result<Account, StorageError> {
        let q = match &change {
            AccountChange::Role(role) => {
                sqlx::query("UPDATE accounts SET role = ?, version = version + 1 WHERE bridge = ? AND name = ? COLLATE NOCASE")
                    .bind(role.as_str())
            }
            AccountChange::Disable => sqlx::query(
                "UPDATE accounts SET disabled_at = COALESCE(disabled_at, ?), version = version + 1 \
                 WHERE bridge = ? AND name = ? COLLATE NOCASE",
            )
            .bind(now()),
            AccountChange::Enable => {
                sqlx::query("UPDATE accounts SET disabled_at = NULL WHERE bridge = ? AND name = ? COLLATE NOCASE")
            }
            AccountChange::Password(hash) => sqlx::query(
                "UPDATE accounts SET password_hash = ?, version = version + 1 WHERE bridge = ? AND name = ? COLLATE NOCASE",
            )
            .bind(hash),
        };
        let r = q.bind(bridge).bind(name).execute(&self.pool).await?;
        if r.rows_affected() == 0 {
            return Err(no_account(bridge, name));
        }
        if !matches!(change, AccountChange::Enable) {
            self.bump_revocations().await?;
        }
        self.account(bridge, name)
            .await?
            .ok_or_else(|| no_account(bridge, name))
    }

    /// Removes account `name` of `bridge`, with its codes and grants.
    ///
    /// # Errors
    /// `NotFound` for an unknown account; database failure.
    pub(crate) async fn remove_account(
        &self,
        bridge: &str,
        name: &str,
    ) -> Result<(), StorageError> {
        let r = sqlx::query("DELETE FROM accounts WHERE bridge = ? AND name = ? COLLATE NOCASE")
            .bind(bridge)
            .bind(name)
            .execute(&self.pool)
            .await?;
        if r.rows_affected() == 0 {
            return Err(no_account(bridge, name));
        }
        self.bump_revocations().await
    }

    /// How many accounts `bridge` has.
    ///
    /// # Errors
    /// Database failure.
    pub(crate) async fn account_count(&self, bridge: &str) -> Result<i64, StorageError> {
        Ok(
            sqlx::query("SELECT COUNT(*) FROM accounts WHERE bridge = ?")
                .bind(bridge)
                .fetch_one(&self.pool)
                .await?
                .get(0),
        )
    }
}

fn no_account(bridge: &str, name: &str) -> StorageError {
    StorageError::NotFound(format!("bridge {bridge} has no account {name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_change_that_must_end_tokens_increments_the_version() {
        let s = SqliteStorage::memory().await.unwrap();
        s.add_bridge("b", 60).await.unwrap();
        let a = s
            .create_account("b", "ann", Role::Editor, "hash1")
            .await
            .unwrap();
        assert_eq!(a.version, 1);
        assert!(matches!(
            s.create_account("b", "ann", Role::Owner, "h").await,
            Err(StorageError::Conflict(_))
        ));
        assert!(matches!(
            s.create_account("nope", "ann", Role::Owner, "h").await,
            Err(StorageError::NotFound(_))
        ));
        let a = s
            .update_account("b", "ann", AccountChange::Role(Role::Reviewer))
            .await
            .unwrap();
        assert_eq!((a.role, a.version), (Role::Reviewer, 2));
        let a = s
            .update_account("b", "ann", AccountChange::Disable)
            .await
            .unwrap();
        assert!(a.disabled);
        assert_eq!(a.version, 3);
        let a = s
            .update_account("b", "ann", AccountChange::Enable)
            .await
            .unwrap();
        assert!(!a.disabled);
        assert_eq!(a.version, 3, "enabling does not revive ended tokens");
        let a = s
            .update_account("b", "ann", AccountChange::Password("hash2".into()))
            .await
            .unwrap();
        assert_eq!(a.version, 4);
        let (_, hash) = s.account_with_password("b", "ann").await.unwrap().unwrap();
        assert_eq!(hash, "hash2");
        s.remove_account("b", "ann").await.unwrap();
        assert!(s.account("b", "ann").await.unwrap().is_none());
        assert!(matches!(
            s.remove_account("b", "ann").await,
            Err(StorageError::NotFound(_))
        ));
    }
}
