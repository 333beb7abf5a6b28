//! The SQLite implementation of the store's traits ([`super::traits`]): each method is the
//! [`SqliteStorage`] query of the same name (in `mod.rs`, `accounts.rs`, `oauth.rs`,
//! `durable.rs` and `revocation.rs`), boxed.

use super::{
    DeviceKey, SqliteStorage, TokenRecord,
    accounts::{Account, AccountChange},
    durable::{SessionRecord, StoreWrite, StreamRecord},
    oauth::{
        AccessGrant, ClientRecord, ClientSummary, Grant, NewCode, NewTokens, Redemption, Rotation,
        RotationRules,
    },
    revocation::DeviceKeyRecord,
    revocation_mark::RevocationMark,
    traits::{AccountStore, BridgeStore, OAuthStore, RevocationStore, SessionStore, StoreFuture},
};
use crate::auth::Role;

impl BridgeStore for SqliteStorage {
    fn add_bridge<'a>(&'a self, bridge: &'a str, ttl_secs: i64) -> StoreFuture<'a, String> {
        Box::pin(SqliteStorage::add_bridge(self, bridge, ttl_secs))
    }

    fn add_bridge_code<'a>(
        &'a self,
        bridge: &'a str,
        ttl_secs: i64,
        keep_existing: bool,
    ) -> StoreFuture<'a, String> {
        Box::pin(SqliteStorage::add_bridge_code(
            self,
            bridge,
            ttl_secs,
            keep_existing,
        ))
    }

    fn bridges(&self) -> StoreFuture<'_, Vec<String>> {
        Box::pin(SqliteStorage::bridges(self))
    }

    fn bridge_exists<'a>(&'a self, bridge: &'a str) -> StoreFuture<'a, bool> {
        Box::pin(SqliteStorage::bridge_exists(self, bridge))
    }

    fn remove_bridge<'a>(&'a self, name: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(SqliteStorage::remove_bridge(self, name))
    }

    fn enroll<'a>(
        &'a self,
        code: &'a str,
        public_key: &'a str,
    ) -> StoreFuture<'a, (String, String)> {
        Box::pin(SqliteStorage::enroll(self, code, public_key))
    }

    fn register_key<'a>(&'a self, bridge: &'a str, public_key: &'a str) -> StoreFuture<'a, String> {
        Box::pin(SqliteStorage::register_key(self, bridge, public_key))
    }

    fn device_key<'a>(&'a self, key_id: &'a str) -> StoreFuture<'a, Option<DeviceKey>> {
        Box::pin(SqliteStorage::device_key(self, key_id))
    }

    fn device_keys<'a>(&'a self, bridge: Option<&'a str>) -> StoreFuture<'a, Vec<DeviceKeyRecord>> {
        Box::pin(SqliteStorage::device_keys(self, bridge))
    }

    fn revoke_device_key<'a>(&'a self, key_id: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(SqliteStorage::revoke_device_key(self, key_id))
    }

    fn set_catalog<'a>(&'a self, bridge: &'a str, catalog: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(SqliteStorage::set_catalog(self, bridge, catalog))
    }

    fn catalog<'a>(&'a self, bridge: &'a str) -> StoreFuture<'a, Option<String>> {
        Box::pin(SqliteStorage::catalog(self, bridge))
    }
}

impl AccountStore for SqliteStorage {
    fn create_account<'a>(
        &'a self,
        bridge: &'a str,
        name: &'a str,
        role: Role,
        password_hash: &'a str,
    ) -> StoreFuture<'a, Account> {
        Box::pin(SqliteStorage::create_account(
            self,
            bridge,
            name,
            role,
            password_hash,
        ))
    }

    fn account_with_password<'a>(
        &'a self,
        bridge: &'a str,
        name: &'a str,
    ) -> StoreFuture<'a, Option<(Account, String)>> {
        Box::pin(SqliteStorage::account_with_password(self, bridge, name))
    }

    fn account<'a>(&'a self, bridge: &'a str, name: &'a str) -> StoreFuture<'a, Option<Account>> {
        Box::pin(SqliteStorage::account(self, bridge, name))
    }

    fn accounts<'a>(&'a self, bridge: Option<&'a str>) -> StoreFuture<'a, Vec<Account>> {
        Box::pin(SqliteStorage::accounts(self, bridge))
    }

    fn update_account<'a>(
        &'a self,
        bridge: &'a str,
        name: &'a str,
        change: AccountChange,
    ) -> StoreFuture<'a, Account> {
        Box::pin(SqliteStorage::update_account(self, bridge, name, change))
    }

    fn remove_account<'a>(&'a self, bridge: &'a str, name: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(SqliteStorage::remove_account(self, bridge, name))
    }

    fn account_count<'a>(&'a self, bridge: &'a str) -> StoreFuture<'a, i64> {
        Box::pin(SqliteStorage::account_count(self, bridge))
    }

    fn create_token<'a>(
        &'a self,
        bridge: &'a str,
        role: Role,
        label: Option<&'a str>,
    ) -> StoreFuture<'a, (TokenRecord, String)> {
        Box::pin(SqliteStorage::create_token(self, bridge, role, label))
    }

    fn token_by_hash<'a>(&'a self, token_hash: &'a str) -> StoreFuture<'a, Option<TokenRecord>> {
        Box::pin(SqliteStorage::token_by_hash(self, token_hash))
    }

    fn tokens<'a>(&'a self, bridge: Option<&'a str>) -> StoreFuture<'a, Vec<TokenRecord>> {
        Box::pin(SqliteStorage::tokens(self, bridge))
    }

    fn revoke_token<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(SqliteStorage::revoke_token(self, id))
    }
}

impl OAuthStore for SqliteStorage {
    fn register_client<'a>(
        &'a self,
        client_id: &'a str,
        metadata: &'a str,
        secret_hash: Option<&'a str>,
        max_clients: i64,
    ) -> StoreFuture<'a, ()> {
        Box::pin(SqliteStorage::register_client(
            self,
            client_id,
            metadata,
            secret_hash,
            max_clients,
        ))
    }

    fn store_document_client<'a>(
        &'a self,
        client_id: &'a str,
        metadata: &'a str,
        expires_at: i64,
    ) -> StoreFuture<'a, ()> {
        Box::pin(SqliteStorage::store_document_client(
            self, client_id, metadata, expires_at,
        ))
    }

    fn client<'a>(&'a self, client_id: &'a str) -> StoreFuture<'a, Option<ClientRecord>> {
        Box::pin(SqliteStorage::client(self, client_id))
    }

    fn touch_client<'a>(&'a self, client_id: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(SqliteStorage::touch_client(self, client_id))
    }

    fn revoke_client<'a>(&'a self, client_id: &'a str) -> StoreFuture<'a, u64> {
        Box::pin(SqliteStorage::revoke_client(self, client_id))
    }

    fn clients<'a>(&'a self, bridge: Option<&'a str>) -> StoreFuture<'a, Vec<ClientSummary>> {
        Box::pin(SqliteStorage::clients(self, bridge))
    }

    fn insert_code<'a>(&'a self, code: &'a NewCode) -> StoreFuture<'a, ()> {
        Box::pin(SqliteStorage::insert_code(self, code))
    }

    fn redeem_code<'a>(&'a self, code_hash: &'a str) -> StoreFuture<'a, Redemption> {
        Box::pin(SqliteStorage::redeem_code(self, code_hash))
    }

    fn create_grant<'a>(
        &'a self,
        code: &'a NewCode,
        dpop_jkt: Option<&'a str>,
        tokens: &'a NewTokens,
    ) -> StoreFuture<'a, Option<Grant>> {
        Box::pin(SqliteStorage::create_grant(self, code, dpop_jkt, tokens))
    }

    fn rotate_refresh<'a>(
        &'a self,
        refresh_hash: &'a str,
        rules: RotationRules<'a>,
        tokens: &'a NewTokens,
    ) -> StoreFuture<'a, Rotation> {
        Box::pin(SqliteStorage::rotate_refresh(
            self,
            refresh_hash,
            rules,
            tokens,
        ))
    }

    fn access_grant<'a>(&'a self, access_hash: &'a str) -> StoreFuture<'a, Option<AccessGrant>> {
        Box::pin(SqliteStorage::access_grant(self, access_hash))
    }

    fn revoke_by_token<'a>(
        &'a self,
        token_hash: &'a str,
        client_id: &'a str,
    ) -> StoreFuture<'a, u64> {
        Box::pin(SqliteStorage::revoke_by_token(self, token_hash, client_id))
    }

    fn sweep_oauth(&self, unused_expiry_secs: i64, idle_expiry_secs: i64) -> StoreFuture<'_, u64> {
        Box::pin(SqliteStorage::sweep_oauth(
            self,
            unused_expiry_secs,
            idle_expiry_secs,
        ))
    }

    fn form_key(&self) -> StoreFuture<'_, [u8; 32]> {
        Box::pin(SqliteStorage::form_key(self))
    }
}

impl SessionStore for SqliteStorage {
    fn session_key(&self) -> StoreFuture<'_, [u8; 32]> {
        Box::pin(SqliteStorage::session_key(self))
    }

    fn apply<'a>(&'a self, batch: &'a [StoreWrite]) -> StoreFuture<'a, ()> {
        Box::pin(SqliteStorage::apply(self, batch))
    }

    fn load_durable(
        &self,
        now: i64,
        idle_secs: i64,
    ) -> StoreFuture<'_, (Vec<SessionRecord>, Vec<StreamRecord>)> {
        Box::pin(SqliteStorage::load_durable(self, now, idle_secs))
    }
}

impl RevocationStore for SqliteStorage {
    fn revocation_epoch(&self) -> StoreFuture<'_, i64> {
        Box::pin(SqliteStorage::revocation_epoch(self))
    }

    fn revocation_mark(&self) -> Option<RevocationMark> {
        self.mark.read()
    }

    fn refresh_revocation_mark(&self) {
        self.mark.refresh();
    }

    fn bump_revocations(&self) -> StoreFuture<'_, ()> {
        Box::pin(SqliteStorage::bump_revocations(self))
    }

    fn credential_live<'a>(&'a self, credential: &'a str) -> StoreFuture<'a, bool> {
        Box::pin(SqliteStorage::credential_live(self, credential))
    }
}
