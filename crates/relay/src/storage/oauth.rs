//! OAuth 2.1 state (DESIGN §6): clients, authorization codes, token families, refresh and access
//! tokens. Only hashes of codes, tokens and client secrets are stored.
//!
//! A *family* is one grant: a client, an account at a version, a redirect URI, a resource and a
//! scope. Its refresh tokens rotate (each use marks the token used and issues a child); a used
//! one presented again within the retry grace gets another valid pair, after it the whole family
//! is revoked (OAuth 2.1 §4.3.1; RFC 9700 §4.14.2). Every token check joins the family, its
//! account and its client, so revoking any of them, or changing the account's version, ends the
//! tokens at once.

use sqlx::Row;

use super::{Account, SqliteStorage, StorageError, now};
use crate::auth::{Role, random_id};

/// How a client came to be known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientKind {
    /// RFC 7591 dynamic registration (`client_id` `mbc_…`).
    Registered,
    /// A client ID metadata document: the `client_id` is the document's HTTPS URL.
    Document,
}

impl ClientKind {
    /// The name stored and shown (`registered`, `document`).
    pub fn as_str(self) -> &'static str {
        match self {
            ClientKind::Registered => "registered",
            ClientKind::Document => "document",
        }
    }

    fn parse(s: &str) -> Result<Self, StorageError> {
        match s {
            "registered" => Ok(ClientKind::Registered),
            "document" => Ok(ClientKind::Document),
            other => Err(StorageError::Corrupt(format!("client kind {other:?}"))),
        }
    }
}

/// A stored OAuth client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientRecord {
    /// The client id.
    pub client_id: String,
    /// Registered or metadata document.
    pub kind: ClientKind,
    /// The client metadata the relay kept (JSON text, RFC 7591 §2 member names).
    pub metadata: String,
    /// SHA-256 of the client secret, for clients that authenticate with one.
    pub secret_hash: Option<String>,
    /// Registration (or first grant) time, Unix seconds.
    pub created_at: i64,
    /// Last authorization or token request, Unix seconds.
    pub last_used_at: i64,
    /// For a metadata document: until when the stored document may be used unfetched.
    pub document_expires_at: Option<i64>,
    /// Revoked clients are refused everywhere (`invalid_client`).
    pub revoked: bool,
}

/// A stored client with what it holds, for `relay client list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSummary {
    /// The client.
    pub record: ClientRecord,
    /// Grants not revoked.
    pub active_grants: i64,
    /// Bridges of the accounts holding those grants, sorted.
    pub bridges: Vec<String>,
}

/// An authorization code about to be stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewCode {
    /// SHA-256 of the code.
    pub code_hash: String,
    /// The client it was issued to.
    pub client_id: String,
    /// The account that approved it, and the account's version then.
    pub account_id: String,
    /// See `account_id`.
    pub account_version: i64,
    /// The redirect URI of the authorization request (the token request must repeat it).
    pub redirect_uri: String,
    /// The PKCE S256 challenge (RFC 7636 §4.2).
    pub code_challenge: String,
    /// The resource (RFC 8707) the grant is bound to.
    pub resource: String,
    /// The granted scope (space separated).
    pub scope: String,
    /// A DPoP key thumbprint the code is bound to (RFC 9449 §10), if the client sent one.
    pub dpop_jkt: Option<String>,
    /// Expiry, Unix seconds.
    pub expires_at: i64,
}

/// What redeeming an authorization code found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Redemption {
    /// The code was valid and is now used.
    Redeemed(Box<NewCode>),
    /// The code was used before: the grant it produced (if any) is now revoked (OAuth 2.1
    /// §4.1.3).
    Replayed,
    /// No such code, or it expired.
    Invalid,
}

/// One live grant, as a token check sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The family id (`fam_…`).
    pub family_id: String,
    /// The client.
    pub client_id: String,
    /// The account (its current role; the token's version equals its current version).
    pub account: Account,
    /// The redirect URI the grant was made for.
    pub redirect_uri: String,
    /// The resource the tokens are for.
    pub resource: String,
    /// The granted scope.
    pub scope: String,
    /// The DPoP key thumbprint the tokens are bound to, if any.
    pub dpop_jkt: Option<String>,
}

/// The grant of a presented access token, with the token's expiry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessGrant {
    /// The live grant.
    pub grant: Grant,
    /// When the access token expires, Unix seconds.
    pub expires_at: i64,
}

/// Hashes and expiries of a new access/refresh token pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTokens {
    /// SHA-256 of the access token.
    pub access_hash: String,
    /// Its expiry, Unix seconds.
    pub access_expires_at: i64,
    /// SHA-256 of the refresh token.
    pub refresh_hash: String,
    /// Its expiry, Unix seconds.
    pub refresh_expires_at: i64,
}

/// What presenting a refresh token did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rotation {
    /// A new pair (the hashes given) now belongs to this grant.
    Rotated(Box<Grant>),
    /// The token was rotated longer ago than the grace allows: the family is revoked, every
    /// token in it dead.
    Replayed,
    /// Unknown, expired, revoked, another client's, the wrong DPoP key, an account that
    /// changed, or presented again within the grace more often than allowed: nothing was
    /// changed.
    Invalid(&'static str),
}

/// Rules of one refresh ([`super::OAuthStore::rotate_refresh`]).
#[derive(Debug, Clone, Copy)]
pub struct RotationRules<'a> {
    /// The authenticated client presenting the token.
    pub client_id: &'a str,
    /// The DPoP key of the request's proof, if it carried one.
    pub dpop_jkt: Option<&'a str>,
    /// Seconds a used token may be presented again.
    pub grace_secs: i64,
    /// Most extra pairs one used token may get within the grace.
    pub max_reissues: i64,
}

const GRANT_COLUMNS: &str = "f.id, f.client_id, f.redirect_uri, f.resource, f.scope, f.dpop_jkt, \
     a.id, a.bridge, a.name, a.role, a.version, a.disabled_at, a.created_at";

/// The join that makes a grant live: family not revoked, account enabled at the family's
/// version, client not revoked.
const LIVE_GRANT: &str = "JOIN accounts a ON a.id = f.account_id AND a.version = f.account_version \
     AND a.disabled_at IS NULL \
     JOIN oauth_clients c ON c.client_id = f.client_id AND c.revoked_at IS NULL";

fn grant_row(r: &sqlx::sqlite::SqliteRow) -> Result<Grant, StorageError> {
    let role: String = r.get(9);
    Ok(Grant {
        family_id: r.get(0),
        client_id: r.get(1),
        redirect_uri: r.get(2),
        resource: r.get(3),
        scope: r.get(4),
        dpop_jkt: r.get(5),
        account: Account {
            id: r.get(6),
            bridge: r.get(7),
            name: r.get(8),
            role: Role::parse(&role).map_err(StorageError::Corrupt)?,
            version: r.get(10),
            disabled: r.get::<Option<i64>, _>(11).is_some(),
            created_at: r.get(12),
        },
    })
}

fn client_row(r: &sqlx::sqlite::SqliteRow) -> Result<ClientRecord, StorageError> {
    let kind: String = r.get(1);
    Ok(ClientRecord {
        client_id: r.get(0),
        kind: ClientKind::parse(&kind)?,
        metadata: r.get(2),
        secret_hash: r.get(3),
        created_at: r.get(4),
        last_used_at: r.get(5),
        document_expires_at: r.get(6),
        revoked: r.get::<Option<i64>, _>(7).is_some(),
    })
}

const CLIENT_COLUMNS: &str = "client_id, kind, metadata, secret_hash, created_at, last_used_at, \
     document_expires_at, revoked_at";

/// The name of the consent form key among the store's secrets.
const FORM_KEY: &str = "consent_form_key";

impl SqliteStorage {
    /// The HMAC key consent forms are signed with ([`super::OAuthStore::form_key`]): 32 random
    /// bytes generated the first time and kept in the store from then on.
    ///
    /// # Errors
    /// Database failure; a stored key that is not 32 bytes (`Corrupt`: refused, never
    /// replaced).
    pub(crate) async fn form_key(&self) -> Result<[u8; 32], StorageError> {
        self.secret(FORM_KEY, "consent form key").await
    }

    /// Stores a dynamically registered client (RFC 7591 §3.2.1).
    ///
    /// # Errors
    /// `Conflict` when the relay already keeps `max_clients` registered clients (new
    /// registrations wait until unused ones expire); database failure.
    pub(crate) async fn register_client(
        &self,
        client_id: &str,
        metadata: &str,
        secret_hash: Option<&str>,
        max_clients: i64,
    ) -> Result<(), StorageError> {
        let t = now();
        let r = sqlx::query(
            "INSERT INTO oauth_clients (client_id, kind, metadata, secret_hash, created_at, last_used_at) \
             SELECT ?, 'registered', ?, ?, ?, ? \
             WHERE (SELECT COUNT(*) FROM oauth_clients WHERE kind = 'registered') < ?",
        )
        .bind(client_id)
        .bind(metadata)
        .bind(secret_hash)
        .bind(t)
        .bind(t)
        .bind(max_clients)
        .execute(&self.pool)
        .await?;
        if r.rows_affected() == 0 {
            return Err(StorageError::Conflict(format!(
                "the relay keeps {max_clients} registered clients already; try again later"
            )));
        }
        Ok(())
    }

    /// Stores (or refreshes) the client of a client ID metadata document; its revocation state
    /// is kept.
    ///
    /// # Errors
    /// Database failure.
    pub(crate) async fn store_document_client(
        &self,
        client_id: &str,
        metadata: &str,
        expires_at: i64,
    ) -> Result<(), StorageError> {
        let t = now();
        sqlx::query(
            "INSERT INTO oauth_clients (client_id, kind, metadata, created_at, last_used_at, document_expires_at) \
             VALUES (?, 'document', ?, ?, ?, ?) \
             ON CONFLICT (client_id) DO UPDATE SET metadata = excluded.metadata, \
             last_used_at = excluded.last_used_at, document_expires_at = excluded.document_expires_at",
        )
        .bind(client_id)
        .bind(metadata)
        .bind(t)
        .bind(t)
        .bind(expires_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The stored client `client_id`, revoked or not.
    ///
    /// # Errors
    /// Database failure; unreadable rows.
    pub(crate) async fn client(
        &self,
        client_id: &str,
    ) -> Result<Option<ClientRecord>, StorageError> {
        let row = sqlx::query(&format!(
            "SELECT {CLIENT_COLUMNS} FROM oauth_clients WHERE client_id = ?"
        ))
        .bind(client_id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(client_row).transpose()
    }

    /// Records a use of `client_id` (authorization or token request), which keeps it from
    /// expiring.
    ///
    /// # Errors
    /// Database failure.
    pub(crate) async fn touch_client(&self, client_id: &str) -> Result<(), StorageError> {
        sqlx::query("UPDATE oauth_clients SET last_used_at = ? WHERE client_id = ?")
            .bind(now())
            .bind(client_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Revokes client `client_id` and every grant it holds. Returns how many grants ended.
    ///
    /// # Errors
    /// `NotFound` for an unknown or already revoked client; database failure.
    pub(crate) async fn revoke_client(&self, client_id: &str) -> Result<u64, StorageError> {
        let mut tx = self.pool.begin().await?;
        let t = now();
        let r = sqlx::query(
            "UPDATE oauth_clients SET revoked_at = ? WHERE client_id = ? AND revoked_at IS NULL",
        )
        .bind(t)
        .bind(client_id)
        .execute(&mut *tx)
        .await?;
        if r.rows_affected() == 0 {
            return Err(StorageError::NotFound(format!(
                "no active client {client_id} (see `machine-mcp relay client list`)"
            )));
        }
        let ended = sqlx::query(
            "UPDATE oauth_families SET revoked_at = ?, revoked_reason = 'client revoked' \
             WHERE client_id = ? AND revoked_at IS NULL",
        )
        .bind(t)
        .bind(client_id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        super::revocation::bump_in(&mut tx).await?;
        tx.commit().await?;
        self.mark.announce();
        Ok(ended)
    }

    /// Every stored client with its live grants, oldest first; with `bridge`, only clients
    /// holding a grant (live or not) of that bridge's accounts.
    ///
    /// # Errors
    /// Database failure; unreadable rows.
    pub(crate) async fn clients(
        &self,
        bridge: Option<&str>,
    ) -> Result<Vec<ClientSummary>, StorageError> {
        let rows = sqlx::query(&format!(
            "SELECT {CLIENT_COLUMNS}, \
             (SELECT COUNT(*) FROM oauth_families f WHERE f.client_id = c.client_id AND f.revoked_at IS NULL), \
             (SELECT GROUP_CONCAT(DISTINCT a.bridge) FROM oauth_families f JOIN accounts a ON a.id = f.account_id \
              WHERE f.client_id = c.client_id AND f.revoked_at IS NULL) \
             FROM oauth_clients c \
             WHERE ?1 IS NULL OR EXISTS (SELECT 1 FROM oauth_families f JOIN accounts a ON a.id = f.account_id \
                   WHERE f.client_id = c.client_id AND a.bridge = ?1) \
             ORDER BY created_at, client_id"
        ))
        .bind(bridge)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                let mut bridges: Vec<String> = r
                    .get::<Option<String>, _>(9)
                    .map(|s| s.split(',').map(str::to_owned).collect())
                    .unwrap_or_default();
                bridges.sort();
                Ok(ClientSummary {
                    record: client_row(r)?,
                    active_grants: r.get(8),
                    bridges,
                })
            })
            .collect()
    }

    /// Stores an authorization code.
    ///
    /// # Errors
    /// Database failure.
    pub(crate) async fn insert_code(&self, code: &NewCode) -> Result<(), StorageError> {
        sqlx::query(
            "INSERT INTO oauth_codes (code_hash, client_id, account_id, account_version, redirect_uri, \
             code_challenge, resource, scope, dpop_jkt, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&code.code_hash)
        .bind(&code.client_id)
        .bind(&code.account_id)
        .bind(code.account_version)
        .bind(&code.redirect_uri)
        .bind(&code.code_challenge)
        .bind(&code.resource)
        .bind(&code.scope)
        .bind(&code.dpop_jkt)
        .bind(code.expires_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Redeems the code whose hash is `code_hash`: marks it used and returns it. A code used
    /// before revokes the grant it produced.
    ///
    /// # Errors
    /// Database failure; unreadable rows.
    pub(crate) async fn redeem_code(&self, code_hash: &str) -> Result<Redemption, StorageError> {
        let mut tx = self.pool.begin().await?;
        let t = now();
        let row = sqlx::query(
            "UPDATE oauth_codes SET used_at = ? WHERE code_hash = ? AND used_at IS NULL \
             RETURNING client_id, account_id, account_version, redirect_uri, code_challenge, \
             resource, scope, dpop_jkt, expires_at",
        )
        .bind(t)
        .bind(code_hash)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(r) = row {
            tx.commit().await?;
            let code = NewCode {
                code_hash: code_hash.to_owned(),
                client_id: r.get(0),
                account_id: r.get(1),
                account_version: r.get(2),
                redirect_uri: r.get(3),
                code_challenge: r.get(4),
                resource: r.get(5),
                scope: r.get(6),
                dpop_jkt: r.get(7),
                expires_at: r.get(8),
            };
            return Ok(if code.expires_at > t {
                Redemption::Redeemed(Box::new(code))
            } else {
                Redemption::Invalid
            });
        }
        let used = sqlx::query("SELECT family_id FROM oauth_codes WHERE code_hash = ?")
            .bind(code_hash)
            .fetch_optional(&mut *tx)
            .await?;
        let Some(used) = used else {
            return Ok(Redemption::Invalid);
        };
        if let Some(family) = used.get::<Option<String>, _>(0) {
            revoke_family_in(&mut tx, &family, "authorization code replayed", t).await?;
            tx.commit().await?;
            self.mark.announce();
            return Ok(Redemption::Replayed);
        }
        tx.commit().await?;
        Ok(Redemption::Replayed)
    }

    /// Creates the grant of a redeemed `code` with its first token pair, bound to `dpop_jkt`.
    /// Returns `None` (and stores nothing) when the account changed since the code was issued
    /// (another version, disabled or removed) or the client was revoked.
    ///
    /// # Errors
    /// Database failure; unreadable rows.
    pub(crate) async fn create_grant(
        &self,
        code: &NewCode,
        dpop_jkt: Option<&str>,
        tokens: &NewTokens,
    ) -> Result<Option<Grant>, StorageError> {
        let mut tx = self.pool.begin().await?;
        let t = now();
        let family = random_id("fam_");
        let r = sqlx::query(
            "INSERT INTO oauth_families (id, client_id, account_id, account_version, redirect_uri, \
             resource, scope, dpop_jkt, created_at, last_used_at) \
             SELECT ?, ?, a.id, a.version, ?, ?, ?, ?, ?, ? FROM accounts a \
             JOIN oauth_clients c ON c.client_id = ? AND c.revoked_at IS NULL \
             WHERE a.id = ? AND a.version = ? AND a.disabled_at IS NULL",
        )
        .bind(&family)
        .bind(&code.client_id)
        .bind(&code.redirect_uri)
        .bind(&code.resource)
        .bind(&code.scope)
        .bind(dpop_jkt)
        .bind(t)
        .bind(t)
        .bind(&code.client_id)
        .bind(&code.account_id)
        .bind(code.account_version)
        .execute(&mut *tx)
        .await?;
        if r.rows_affected() == 0 {
            return Ok(None);
        }
        sqlx::query("UPDATE oauth_codes SET family_id = ? WHERE code_hash = ?")
            .bind(&family)
            .bind(&code.code_hash)
            .execute(&mut *tx)
            .await?;
        insert_tokens(&mut tx, &family, tokens, t).await?;
        let grant = live_grant_in(&mut tx, &family).await?;
        tx.commit().await?;
        Ok(grant)
    }

    /// Presents the refresh token whose hash is `refresh_hash` under `rules`: rotates it (the
    /// pair `tokens` joins its grant), revokes its family when it is a replay past the grace, or
    /// changes nothing when it is invalid.
    ///
    /// # Errors
    /// Database failure; unreadable rows.
    pub(crate) async fn rotate_refresh(
        &self,
        refresh_hash: &str,
        rules: RotationRules<'_>,
        tokens: &NewTokens,
    ) -> Result<Rotation, StorageError> {
        let mut tx = self.pool.begin().await?;
        // Write first, so that concurrent rotations of one token queue behind each other instead
        // of failing with SQLITE_BUSY (see `enroll`).
        let touched =
            sqlx::query("UPDATE oauth_refresh_tokens SET reissued = reissued WHERE token_hash = ?")
                .bind(refresh_hash)
                .execute(&mut *tx)
                .await?;
        if touched.rows_affected() == 0 {
            return Ok(Rotation::Invalid("the refresh token is unknown"));
        }
        let t = now();
        let row = sqlx::query(
            "SELECT t.family_id, t.expires_at, t.used_at, t.reissued, f.client_id, f.dpop_jkt, \
             f.revoked_at FROM oauth_refresh_tokens t JOIN oauth_families f ON f.id = t.family_id \
             WHERE t.token_hash = ?",
        )
        .bind(refresh_hash)
        .fetch_one(&mut *tx)
        .await?;
        let family: String = row.get(0);
        let expires_at: i64 = row.get(1);
        let used_at: Option<i64> = row.get(2);
        let reissued: i64 = row.get(3);
        let client: String = row.get(4);
        let jkt: Option<String> = row.get(5);
        if row.get::<Option<i64>, _>(6).is_some() {
            return Ok(Rotation::Invalid("the grant was revoked"));
        }
        if client != rules.client_id {
            return Ok(Rotation::Invalid(
                "the refresh token was issued to another client",
            ));
        }
        if jkt.as_deref() != rules.dpop_jkt {
            return Ok(Rotation::Invalid(if jkt.is_some() {
                "the refresh token is bound to a DPoP key: send a proof signed with it"
            } else {
                "the refresh token is not bound to a DPoP key"
            }));
        }
        if expires_at <= t {
            return Ok(Rotation::Invalid("the refresh token expired"));
        }
        let Some(grant) = live_grant_in(&mut tx, &family).await? else {
            return Ok(Rotation::Invalid(
                "the account or client of this grant changed; sign in again",
            ));
        };
        match used_at {
            None => {
                sqlx::query("UPDATE oauth_refresh_tokens SET used_at = ? WHERE token_hash = ?")
                    .bind(t)
                    .bind(refresh_hash)
                    .execute(&mut *tx)
                    .await?;
            }
            Some(used) if t - used <= rules.grace_secs => {
                // Within the grace, more retries than any host makes are refused, but the grant
                // is not revoked for them: only a replay after the grace is a theft signal.
                if reissued >= rules.max_reissues {
                    return Ok(Rotation::Invalid(
                        "this refresh token was presented too often; use the newest refresh token",
                    ));
                }
                sqlx::query(
                    "UPDATE oauth_refresh_tokens SET reissued = reissued + 1 WHERE token_hash = ?",
                )
                .bind(refresh_hash)
                .execute(&mut *tx)
                .await?;
            }
            Some(_) => {
                revoke_family_in(&mut tx, &family, "refresh token replayed", t).await?;
                tx.commit().await?;
                self.mark.announce();
                return Ok(Rotation::Replayed);
            }
        }
        insert_tokens(&mut tx, &family, tokens, t).await?;
        sqlx::query("UPDATE oauth_families SET last_used_at = ? WHERE id = ?")
            .bind(t)
            .bind(&family)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Rotation::Rotated(Box::new(grant)))
    }

    /// The live grant of the unexpired access token whose hash is `access_hash`, with the
    /// token's expiry.
    ///
    /// # Errors
    /// Database failure; unreadable rows.
    pub(crate) async fn access_grant(
        &self,
        access_hash: &str,
    ) -> Result<Option<AccessGrant>, StorageError> {
        let row = sqlx::query(&format!(
            "SELECT {GRANT_COLUMNS}, t.expires_at FROM oauth_access_tokens t \
             JOIN oauth_families f ON f.id = t.family_id AND f.revoked_at IS NULL {LIVE_GRANT} \
             WHERE t.token_hash = ? AND t.expires_at > ?"
        ))
        .bind(access_hash)
        .bind(now())
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref()
            .map(|r| {
                Ok(AccessGrant {
                    grant: grant_row(r)?,
                    expires_at: r.get(13),
                })
            })
            .transpose()
    }

    /// RFC 7009 revocation: when `token_hash` is an access or refresh token of `client_id`,
    /// revokes its grant and every other grant of the same client, account and redirect URI
    /// (what that redirect URI authorised; for a client ID metadata document, which many
    /// installations share, nothing beyond it). Returns how many grants ended; a token of
    /// another client, or none, ends nothing (RFC 7009 §2.2: the answer is the same).
    ///
    /// # Errors
    /// Database failure.
    pub(crate) async fn revoke_by_token(
        &self,
        token_hash: &str,
        client_id: &str,
    ) -> Result<u64, StorageError> {
        let t = now();
        let r = sqlx::query(
            "UPDATE oauth_families SET revoked_at = ?1, revoked_reason = 'revoked by the client' \
             WHERE revoked_at IS NULL AND (client_id, account_id, redirect_uri) IN ( \
               SELECT f.client_id, f.account_id, f.redirect_uri FROM oauth_families f \
               WHERE f.client_id = ?2 AND f.id IN ( \
                 SELECT family_id FROM oauth_access_tokens WHERE token_hash = ?3 \
                 UNION SELECT family_id FROM oauth_refresh_tokens WHERE token_hash = ?3))",
        )
        .bind(t)
        .bind(client_id)
        .bind(token_hash)
        .execute(&self.pool)
        .await?;
        if r.rows_affected() > 0 {
            self.bump_revocations().await?;
        }
        Ok(r.rows_affected())
    }

    /// Deletes what can no longer be used: expired access and refresh tokens, codes a day past
    /// their expiry (kept that long so a replay is still recognised), grants without a live
    /// refresh token, and registered clients unused for their expiry. Returns the number of
    /// rows deleted.
    ///
    /// # Errors
    /// Database failure.
    pub(crate) async fn sweep_oauth(
        &self,
        unused_expiry_secs: i64,
        idle_expiry_secs: i64,
    ) -> Result<u64, StorageError> {
        let t = now();
        let mut n = 0;
        for (sql, arg) in [
            ("DELETE FROM oauth_access_tokens WHERE expires_at <= ?", t),
            ("DELETE FROM oauth_refresh_tokens WHERE expires_at <= ?", t),
            (
                "DELETE FROM oauth_codes WHERE expires_at <= ?",
                t - 24 * 3600,
            ),
            (
                "DELETE FROM oauth_families WHERE last_used_at <= ? AND NOT EXISTS \
                 (SELECT 1 FROM oauth_refresh_tokens r WHERE r.family_id = oauth_families.id) \
                 AND NOT EXISTS (SELECT 1 FROM oauth_access_tokens x WHERE x.family_id = oauth_families.id)",
                t - 24 * 3600,
            ),
        ] {
            n += sqlx::query(sql)
                .bind(arg)
                .execute(&self.pool)
                .await?
                .rows_affected();
        }
        n += sqlx::query(
            "DELETE FROM oauth_clients WHERE kind = 'registered' AND NOT EXISTS \
             (SELECT 1 FROM oauth_families f WHERE f.client_id = oauth_clients.client_id AND f.revoked_at IS NULL) \
             AND ((last_used_at = created_at AND created_at <= ?) OR last_used_at <= ?)",
        )
        .bind(t - unused_expiry_secs)
        .bind(t - idle_expiry_secs)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(n)
    }
}

async fn insert_tokens(
    tx: &mut sqlx::SqliteConnection,
    family: &str,
    tokens: &NewTokens,
    t: i64,
) -> Result<(), StorageError> {
    sqlx::query(
        "INSERT INTO oauth_access_tokens (token_hash, family_id, expires_at) VALUES (?, ?, ?)",
    )
    .bind(&tokens.access_hash)
    .bind(family)
    .bind(tokens.access_expires_at)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "INSERT INTO oauth_refresh_tokens (token_hash, family_id, created_at, expires_at) VALUES (?, ?, ?, ?)",
    )
    .bind(&tokens.refresh_hash)
    .bind(family)
    .bind(t)
    .bind(tokens.refresh_expires_at)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

async fn live_grant_in(
    tx: &mut sqlx::SqliteConnection,
    family: &str,
) -> Result<Option<Grant>, StorageError> {
    let row = sqlx::query(&format!(
        "SELECT {GRANT_COLUMNS} FROM oauth_families f {LIVE_GRANT} \
         WHERE f.id = ? AND f.revoked_at IS NULL"
    ))
    .bind(family)
    .fetch_optional(&mut *tx)
    .await?;
    row.as_ref().map(grant_row).transpose()
}

/// Revokes grant `family` inside `tx` and counts the revocation (the caller announces it on the
/// mark once `tx` has committed).
async fn revoke_family_in(
    tx: &mut sqlx::SqliteConnection,
    family: &str,
    reason: &str,
    t: i64,
) -> Result<(), StorageError> {
    sqlx::query(
        "UPDATE oauth_families SET revoked_at = ?, revoked_reason = ? WHERE id = ? AND revoked_at IS NULL",
    )
    .bind(t)
    .bind(reason)
    .bind(family)
    .execute(&mut *tx)
    .await?;
    super::revocation::bump_in(tx).await
}
