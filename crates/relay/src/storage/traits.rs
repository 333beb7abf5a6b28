//! The store's seams: one trait per aggregate, each a contract any backend keeps (the embedded
//! SQLite one today, private to [`super`]; PostgreSQL later, DESIGN §6).
//!
//! - [`BridgeStore`]: bridges, their enrollment codes and device keys, the catalog each daemon
//!   last announced;
//! - [`AccountStore`]: who may call a bridge — accounts (with roles and password hashes) and
//!   static bearer tokens;
//! - [`OAuthStore`]: OAuth clients, authorization codes, grants (token families) and their
//!   tokens, and the consent form key;
//! - [`SessionStore`]: the durable MCP sessions and stream events a restarted relay restores, and
//!   the session id key;
//! - [`RevocationStore`]: the revocation counter the relay polls, and whether a credential still
//!   authenticates;
//! - [`GuardStore`]: replay guards and throttles (in memory today, [`super::guards`]).
//!
//! Rules every backend keeps: secrets (codes, tokens, client secrets) arrive and are kept as
//! hashes only; a change that revokes a credential (a token, client, grant, account change,
//! device key or bridge) increments the revocation counter in the same transaction; unreadable
//! or corrupt state is [`StorageError::Corrupt`], never silently replaced (invariant 9); keys
//! that every relay node must agree on (the session id key, the consent form key) are generated
//! once per store and read from it, never per process. Times are Unix seconds.
//!
//! Each method of a durable aggregate returns a boxed future (what a trait object's `async`
//! method costs: one allocation per query, beside the query's own trip to the database); a
//! guard answers at once when it is kept in memory ([`GuardFuture`]).

use std::{fmt, future::Ready, time::Duration};

use futures_util::future::{BoxFuture, Either};

use super::{
    DeviceKey, StorageError, TokenRecord,
    accounts::{Account, AccountChange},
    durable::{SessionRecord, StoreWrite, StreamRecord},
    guards::Seen,
    oauth::{
        AccessGrant, ClientRecord, ClientSummary, Grant, NewCode, NewTokens, Redemption, Rotation,
        RotationRules,
    },
    revocation::DeviceKeyRecord,
    revocation_mark::RevocationMark,
};
use crate::auth::Role;

/// What a store method returns: a future of its result.
pub type StoreFuture<'a, T> = BoxFuture<'a, Result<T, StorageError>>;

/// What a guard method returns: the answer at once (`Left`, no allocation) from a guard kept in
/// memory, or a boxed future (`Right`) from one that must ask elsewhere.
pub type GuardFuture<'a, T> = Either<Ready<T>, BoxFuture<'a, T>>;

/// Bridges, their one-time enrollment codes (kept as SHA-256), the device keys daemons sign
/// their hello with, and the catalog each bridge's daemon last announced.
pub trait BridgeStore: Send + Sync + fmt::Debug {
    /// Creates `bridge` if it does not exist and issues a one-time enrollment code valid for
    /// `ttl_secs`. Returns the code (shown once; only its hash is kept). Redeeming it revokes
    /// the bridge's other device keys.
    ///
    /// # Errors
    /// The store fails.
    fn add_bridge<'a>(&'a self, bridge: &'a str, ttl_secs: i64) -> StoreFuture<'a, String>;

    /// Like [`BridgeStore::add_bridge`]; the code, when redeemed, revokes the bridge's other
    /// device keys unless `keep_existing` (a second machine for the same bridge).
    ///
    /// # Errors
    /// The store fails.
    fn add_bridge_code<'a>(
        &'a self,
        bridge: &'a str,
        ttl_secs: i64,
        keep_existing: bool,
    ) -> StoreFuture<'a, String>;

    /// Bridge names, sorted.
    ///
    /// # Errors
    /// The store fails.
    fn bridges(&self) -> StoreFuture<'_, Vec<String>>;

    /// Whether `bridge` exists.
    ///
    /// # Errors
    /// The store fails.
    fn bridge_exists<'a>(&'a self, bridge: &'a str) -> StoreFuture<'a, bool>;

    /// Removes bridge `name` with everything that belongs to it: enrollment codes, device keys,
    /// tokens, accounts and their grants (a revocation: running relays end its daemon and
    /// sessions).
    ///
    /// # Errors
    /// `NotFound` for an unknown bridge; the store fails.
    fn remove_bridge<'a>(&'a self, name: &'a str) -> StoreFuture<'a, ()>;

    /// Redeems an enrollment code: registers `public_key` (SEC1, base64url) for its bridge and
    /// returns `(bridge, key_id)`. Unless the code was issued to keep them, the bridge's other
    /// device keys are revoked (a revocation: running relays close the daemons holding them).
    /// Idempotent for the key that redeemed the code: presented again with the same
    /// `public_key`, while the code is valid and that key unrevoked, a used code returns the same
    /// `(bridge, key_id)` and changes nothing.
    ///
    /// # Errors
    /// `NotFound` for an unknown or expired code, or one used by another key or by a key since
    /// revoked; the store fails.
    fn enroll<'a>(
        &'a self,
        code: &'a str,
        public_key: &'a str,
    ) -> StoreFuture<'a, (String, String)>;

    /// Registers device key `public_key` for `bridge` directly (`machine-mcp up`, which enrolls
    /// itself); returns its key id.
    ///
    /// # Errors
    /// `NotFound` for an unknown bridge; the store fails.
    fn register_key<'a>(&'a self, bridge: &'a str, public_key: &'a str) -> StoreFuture<'a, String>;

    /// The unrevoked device key `key_id`.
    ///
    /// # Errors
    /// The store fails.
    fn device_key<'a>(&'a self, key_id: &'a str) -> StoreFuture<'a, Option<DeviceKey>>;

    /// Device keys, revoked or not, optionally of one bridge, oldest first.
    ///
    /// # Errors
    /// The store fails.
    fn device_keys<'a>(&'a self, bridge: Option<&'a str>) -> StoreFuture<'a, Vec<DeviceKeyRecord>>;

    /// Revokes device key `key_id`: its daemon can no longer connect, and running relays close
    /// a connected one.
    ///
    /// # Errors
    /// `NotFound` for an unknown or already revoked key; the store fails.
    fn revoke_device_key<'a>(&'a self, key_id: &'a str) -> StoreFuture<'a, ()>;

    /// Keeps `catalog` (the servers a verified daemon announced, JSON text) as `bridge`'s.
    ///
    /// # Errors
    /// The store fails.
    fn set_catalog<'a>(&'a self, bridge: &'a str, catalog: &'a str) -> StoreFuture<'a, ()>;

    /// The catalog kept for `bridge`, if any.
    ///
    /// # Errors
    /// The store fails.
    fn catalog<'a>(&'a self, bridge: &'a str) -> StoreFuture<'a, Option<String>>;
}

/// Who may call a bridge: accounts (a role and an argon2id password hash each, and a version
/// that every change ending their tokens increments) and static bearer tokens (kept as
/// SHA-256).
pub trait AccountStore: Send + Sync + fmt::Debug {
    /// Creates account `name` on `bridge` with `role` and the argon2id `password_hash`.
    ///
    /// # Errors
    /// `NotFound` for an unknown bridge; `Conflict` when the name is taken on that bridge or
    /// malformed (with the rule); the store fails.
    fn create_account<'a>(
        &'a self,
        bridge: &'a str,
        name: &'a str,
        role: Role,
        password_hash: &'a str,
    ) -> StoreFuture<'a, Account>;

    /// The account `name` of `bridge` (names compare without case) and its password hash.
    ///
    /// # Errors
    /// The store fails; a stored role this build does not know (`Corrupt`).
    fn account_with_password<'a>(
        &'a self,
        bridge: &'a str,
        name: &'a str,
    ) -> StoreFuture<'a, Option<(Account, String)>>;

    /// The account `name` of `bridge`.
    ///
    /// # Errors
    /// As [`AccountStore::account_with_password`].
    fn account<'a>(&'a self, bridge: &'a str, name: &'a str) -> StoreFuture<'a, Option<Account>>;

    /// Accounts, optionally of one bridge, by bridge and name.
    ///
    /// # Errors
    /// The store fails; unreadable rows.
    fn accounts<'a>(&'a self, bridge: Option<&'a str>) -> StoreFuture<'a, Vec<Account>>;

    /// Applies `change` to account `name` of `bridge` and returns it as it is now (a role
    /// change, disabling it or a new password is a revocation of its tokens).
    ///
    /// # Errors
    /// `NotFound` for an unknown account; the store fails.
    fn update_account<'a>(
        &'a self,
        bridge: &'a str,
        name: &'a str,
        change: AccountChange,
    ) -> StoreFuture<'a, Account>;

    /// Removes account `name` of `bridge`, with its codes and grants (a revocation).
    ///
    /// # Errors
    /// `NotFound` for an unknown account; the store fails.
    fn remove_account<'a>(&'a self, bridge: &'a str, name: &'a str) -> StoreFuture<'a, ()>;

    /// How many accounts `bridge` has.
    ///
    /// # Errors
    /// The store fails.
    fn account_count<'a>(&'a self, bridge: &'a str) -> StoreFuture<'a, i64>;

    /// Creates a static token for `bridge` with `role`; returns its record and the token (shown
    /// once; only its hash is kept).
    ///
    /// # Errors
    /// `NotFound` for an unknown bridge; the store fails.
    fn create_token<'a>(
        &'a self,
        bridge: &'a str,
        role: Role,
        label: Option<&'a str>,
    ) -> StoreFuture<'a, (TokenRecord, String)>;

    /// The unrevoked token whose SHA-256 (lowercase hex) is `token_hash`.
    ///
    /// # Errors
    /// The store fails; a stored role this build does not know (`Corrupt`).
    fn token_by_hash<'a>(&'a self, token_hash: &'a str) -> StoreFuture<'a, Option<TokenRecord>>;

    /// Tokens, revoked or not, optionally of one bridge, oldest first.
    ///
    /// # Errors
    /// The store fails; unreadable rows.
    fn tokens<'a>(&'a self, bridge: Option<&'a str>) -> StoreFuture<'a, Vec<TokenRecord>>;

    /// Revokes token `id` (a revocation).
    ///
    /// # Errors
    /// `NotFound` for an unknown or already revoked id; the store fails.
    fn revoke_token<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()>;
}

/// The OAuth 2.1 authorization server's durable state (DESIGN §6): clients, authorization codes,
/// grants (token families: a client, an account at a version, a redirect URI, a resource and a
/// scope each) with their rotating refresh tokens and access tokens, all secrets as hashes, and
/// the key consent forms are signed with. A token check sees a grant only while its family, its
/// account (at the family's version) and its client are all live.
pub trait OAuthStore: Send + Sync + fmt::Debug {
    /// Keeps a dynamically registered client (RFC 7591 §3.2.1); `metadata` is JSON text,
    /// `secret_hash` the SHA-256 of its secret when it has one.
    ///
    /// # Errors
    /// `Conflict` when `max_clients` registered clients are kept already (new registrations
    /// wait until unused ones expire); the store fails.
    fn register_client<'a>(
        &'a self,
        client_id: &'a str,
        metadata: &'a str,
        secret_hash: Option<&'a str>,
        max_clients: i64,
    ) -> StoreFuture<'a, ()>;

    /// Keeps (or refreshes) the client of a client ID metadata document until `expires_at`;
    /// its revocation state is kept.
    ///
    /// # Errors
    /// The store fails.
    fn store_document_client<'a>(
        &'a self,
        client_id: &'a str,
        metadata: &'a str,
        expires_at: i64,
    ) -> StoreFuture<'a, ()>;

    /// The client `client_id`, revoked or not.
    ///
    /// # Errors
    /// The store fails; unreadable rows.
    fn client<'a>(&'a self, client_id: &'a str) -> StoreFuture<'a, Option<ClientRecord>>;

    /// Records a use of `client_id` (an authorization or token request), which keeps it from
    /// expiring.
    ///
    /// # Errors
    /// The store fails.
    fn touch_client<'a>(&'a self, client_id: &'a str) -> StoreFuture<'a, ()>;

    /// Revokes client `client_id` and every grant it holds (a revocation); returns how many
    /// grants ended.
    ///
    /// # Errors
    /// `NotFound` for an unknown or already revoked client; the store fails.
    fn revoke_client<'a>(&'a self, client_id: &'a str) -> StoreFuture<'a, u64>;

    /// Every client with its live grants, oldest first; with `bridge`, only clients holding a
    /// grant (live or not) of that bridge's accounts.
    ///
    /// # Errors
    /// The store fails; unreadable rows.
    fn clients<'a>(&'a self, bridge: Option<&'a str>) -> StoreFuture<'a, Vec<ClientSummary>>;

    /// Keeps an authorization code (its hash).
    ///
    /// # Errors
    /// The store fails.
    fn insert_code<'a>(&'a self, code: &'a NewCode) -> StoreFuture<'a, ()>;

    /// Redeems the code whose hash is `code_hash`, once: marks it used and returns it. A code
    /// used before revokes the grant it produced (OAuth 2.1 §4.1.3).
    ///
    /// # Errors
    /// The store fails; unreadable rows.
    fn redeem_code<'a>(&'a self, code_hash: &'a str) -> StoreFuture<'a, Redemption>;

    /// Creates the grant of a redeemed `code` with its first token pair, bound to `dpop_jkt`.
    /// `None` (nothing kept) when the account changed since the code was issued (another
    /// version, disabled or removed) or the client was revoked.
    ///
    /// # Errors
    /// The store fails; unreadable rows.
    fn create_grant<'a>(
        &'a self,
        code: &'a NewCode,
        dpop_jkt: Option<&'a str>,
        tokens: &'a NewTokens,
    ) -> StoreFuture<'a, Option<Grant>>;

    /// Presents the refresh token whose hash is `refresh_hash` under `rules`: rotates it (the
    /// pair `tokens` joins its grant), revokes its family when it is a replay past the grace
    /// (OAuth 2.1 §4.3.1; RFC 9700 §4.14.2), or changes nothing when it is invalid. Concurrent
    /// rotations of one token are serialized.
    ///
    /// # Errors
    /// The store fails; unreadable rows.
    fn rotate_refresh<'a>(
        &'a self,
        refresh_hash: &'a str,
        rules: RotationRules<'a>,
        tokens: &'a NewTokens,
    ) -> StoreFuture<'a, Rotation>;

    /// The live grant of the unexpired access token whose hash is `access_hash`, with the
    /// token's expiry.
    ///
    /// # Errors
    /// The store fails; unreadable rows.
    fn access_grant<'a>(&'a self, access_hash: &'a str) -> StoreFuture<'a, Option<AccessGrant>>;

    /// RFC 7009 revocation: when `token_hash` is an access or refresh token of `client_id`,
    /// revokes its grant and every other grant of the same client, account and redirect URI.
    /// Returns how many grants ended; a token of another client, or none, ends nothing (RFC
    /// 7009 §2.2).
    ///
    /// # Errors
    /// The store fails.
    fn revoke_by_token<'a>(
        &'a self,
        token_hash: &'a str,
        client_id: &'a str,
    ) -> StoreFuture<'a, u64>;

    /// Deletes what can no longer be used: expired tokens, codes a day past their expiry (kept
    /// that long so a replay is still recognised), grants without a live refresh token,
    /// registered clients unused for `unused_expiry_secs` (never used) or `idle_expiry_secs`.
    /// Returns how many records were deleted.
    ///
    /// # Errors
    /// The store fails.
    fn sweep_oauth(&self, unused_expiry_secs: i64, idle_expiry_secs: i64) -> StoreFuture<'_, u64>;

    /// The HMAC key consent forms are signed with: 32 random bytes generated the first time and
    /// read from the store from then on, so that a form one relay process (or node) rendered
    /// is accepted by another on the same store.
    ///
    /// # Errors
    /// The store fails; a stored key that is not 32 bytes (`Corrupt`: refused, never replaced,
    /// invariant 9).
    fn form_key(&self) -> StoreFuture<'_, [u8; 32]>;
}

/// What a relay restart keeps of the session era: the session id key, the durable MCP sessions,
/// and the last events of their POST streams (each with its SHA-256), written only through the
/// write-behind queue ([`super::StoreWriter`]).
pub trait SessionStore: Send + Sync + fmt::Debug {
    /// The key that binds MCP session ids to their principal ([`crate::auth::SessionKeys`]):
    /// 32 random bytes generated the first time and read from the store from then on, so every
    /// relay process (and node) on the store verifies the same ids.
    ///
    /// # Errors
    /// The store fails; a stored key that is not 32 bytes (`Corrupt`: refused, never replaced,
    /// invariant 9).
    fn session_key(&self) -> StoreFuture<'_, [u8; 32]>;

    /// Applies `batch` in one transaction, in order (nothing of it when it fails).
    ///
    /// # Errors
    /// The store fails.
    fn apply<'a>(&'a self, batch: &'a [StoreWrite]) -> StoreFuture<'a, ()>;

    /// What a starting relay restores: the sessions active within `idle_secs` of `now` and
    /// their streams with their events (oldest first). Deleted first: streams past their
    /// retention, sessions idle longer than `idle_secs`, streams of sessions not kept.
    ///
    /// # Errors
    /// The store fails; unreadable rows (`Corrupt`). An event whose text does not match its
    /// hash is not an error: it comes as [`super::Payload::Corrupt`].
    fn load_durable(
        &self,
        now: i64,
        idle_secs: i64,
    ) -> StoreFuture<'_, (Vec<SessionRecord>, Vec<StreamRecord>)>;
}

/// How a revocation made anywhere (the CLI, another relay process) reaches a running relay: a
/// counter that every revoking change increments, which the relay polls, and the check of one
/// credential.
pub trait RevocationStore: Send + Sync + fmt::Debug {
    /// The revocation counter: it grows with every revocation.
    ///
    /// # Errors
    /// The store fails.
    fn revocation_epoch(&self) -> StoreFuture<'_, i64>;

    /// The revocation mark, read without a query: it changes once any process has committed a
    /// revocation to this store, at once (see [`super::revocation_mark`]); `None` when it cannot
    /// be read, and then nothing checked before may be trusted.
    fn revocation_mark(&self) -> Option<RevocationMark>;

    /// Makes the mark follow its store again when what carries it was replaced or could not be
    /// opened (for SQLite, the mark's file; see [`super::revocation_mark`]). The relay calls it
    /// every second, before it polls [`Self::revocation_epoch`].
    fn refresh_revocation_mark(&self);

    /// Increments the revocation counter.
    ///
    /// # Errors
    /// The store fails.
    fn bump_revocations(&self) -> StoreFuture<'_, ()>;

    /// Whether `credential` (a [`crate::auth::BridgePrincipal::credential`]) still
    /// authenticates: a static token not revoked; an OAuth grant not revoked, whose account is
    /// enabled at the grant's version and whose client is not revoked (its access tokens may
    /// have expired: the grant lives while it can be refreshed); `anonymous` always.
    ///
    /// # Errors
    /// The store fails.
    fn credential_live<'a>(&'a self, credential: &'a str) -> StoreFuture<'a, bool>;
}

/// Replay guards and throttles: the ids of DPoP proofs and client assertions already used
/// (RFC 9449 §11.1, RFC 7523 §3), and counts of events per key (failed sign-ins per account and
/// per client address, registrations and client document fetches per address) within a fixed
/// window. Bounded: the oldest entries are forgotten past capacity, and what they protect is
/// short-lived, so losing them (a restart) loses no grant. Relay nodes that share a store need
/// guards that count and remember across them; guards that cannot reach their state fail
/// closed (`take` refuses, `first_use` answers [`Seen::Full`]).
pub trait GuardStore: Send + Sync + fmt::Debug {
    /// When `key` has `limit` events in its current window: how long until the window ends.
    fn blocked<'a>(&'a self, key: &'a str, limit: u32) -> GuardFuture<'a, Option<Duration>>;

    /// Counts one event for `key` unless `key` already has `limit` in its window, atomically (so
    /// parallel attempts cannot all pass a check made before any of them counts).
    ///
    /// # Errors
    /// How long until the window ends, when `key` is at its limit (nothing counted).
    fn take<'a>(&'a self, key: &'a str, limit: u32) -> GuardFuture<'a, Result<(), Duration>>;

    /// Takes back one event of `key` (an attempt that turned out well).
    fn forgive<'a>(&'a self, key: &'a str) -> GuardFuture<'a, ()>;

    /// Counts one event for `key`.
    fn record<'a>(&'a self, key: &'a str) -> GuardFuture<'a, ()>;

    /// Forgets `key` (a successful sign-in clears its account's failures).
    fn clear<'a>(&'a self, key: &'a str) -> GuardFuture<'a, ()>;

    /// Records `id` as used for `ttl` from now, unless it was already (a replay).
    fn first_use<'a>(&'a self, id: &'a str, ttl: Duration) -> GuardFuture<'a, Seen>;
}
