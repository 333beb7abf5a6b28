//! Credentials the store has vouched for, kept in memory so that a request presenting a token
//! seen before costs no store query ([`Store::static_token`], [`Store::access_grant`]).
//!
//! Rules:
//! - Only what the store vouched for is kept: a static token by its hash, an OAuth access token
//!   by its hash with its grant and expiry. An unknown, expired or revoked token is asked of the
//!   store every time it is presented; a kept access token past its expiry is dropped when
//!   presented.
//! - Everything kept was read under one revocation mark ([`super::revocation_mark`]). A lookup
//!   that reads another mark forgets everything before it answers, so a revocation committed by
//!   any process (the CLI too) is honoured at the next request. An answer is kept only if nothing
//!   was forgotten while the store was asked (by a lookup that saw the mark move, or by
//!   [`Store::forget_credentials`]); while the mark cannot be read, nothing is kept or trusted.
//! - [`Store::forget_credentials`] forgets everything too: the relay calls it when the store's
//!   revocation counter moves (its one-second poll), for a revocation whose writer could not
//!   move the mark.
//! - At most [`crate::limits::CREDENTIAL_CACHE_ENTRIES`] entries of each kind; a full map is
//!   emptied rather than evicted entry by entry (a relay with that many live tokens re-reads them
//!   once).
//! - [`Store::credential_lookups`] counts the store queries made for presented credentials (the
//!   `machine_mcp_relay_credential_lookups_total` counter): a relay serving requests with tokens
//!   it has seen makes none.

use std::{
    collections::HashMap,
    future::Future,
    sync::atomic::{AtomicU64, Ordering},
};

use lock::Lock;

use super::{
    StorageError, Store, TokenRecord, oauth::AccessGrant, revocation_mark::RevocationMark,
};
use crate::limits::CREDENTIAL_CACHE_ENTRIES;

/// The credentials one relay process keeps (one per [`Store`] and its clones).
#[derive(Debug, Default)]
pub(crate) struct CredentialCache {
    kept: Lock<Kept>,
    lookups: AtomicU64,
}

#[derive(Debug, Default)]
struct Kept {
    /// The mark everything below was read under; `None`: nothing is kept.
    mark: Option<RevocationMark>,
    /// How many times everything was forgotten: an answer asked before the last time is stale.
    forgotten: u64,
    tokens: HashMap<String, TokenRecord>,
    grants: HashMap<String, AccessGrant>,
}

impl Kept {
    fn forget(&mut self) {
        self.tokens.clear();
        self.grants.clear();
        self.mark = None;
        self.forgotten += 1;
    }
}

impl Store {
    /// The unrevoked static token whose hash is `token_hash` (the module's rules).
    ///
    /// # Errors
    /// The store fails; unreadable rows.
    pub async fn static_token(
        &self,
        token_hash: &str,
    ) -> Result<Option<TokenRecord>, StorageError> {
        self.kept(
            |k| &mut k.tokens,
            token_hash,
            |_| true,
            self.accounts().token_by_hash(token_hash),
        )
        .await
    }

    /// The live grant of the unexpired access token whose hash is `access_hash`, with its expiry
    /// (the module's rules).
    ///
    /// # Errors
    /// The store fails; unreadable rows.
    pub async fn access_grant(
        &self,
        access_hash: &str,
    ) -> Result<Option<AccessGrant>, StorageError> {
        let now = super::now();
        self.kept(
            |k| &mut k.grants,
            access_hash,
            |g| g.expires_at > now,
            self.oauth().access_grant(access_hash),
        )
        .await
    }

    /// Forgets every credential kept: the next request of each is asked of the store.
    pub fn forget_credentials(&self) {
        self.credentials.kept.lock().forget();
    }

    /// Store queries made so far for presented credentials (a kept one costs none).
    pub fn credential_lookups(&self) -> u64 {
        self.credentials.lookups.load(Ordering::Relaxed)
    }

    /// The kept answer for `key` in the map `map` picks, if it is still `valid`; otherwise the
    /// store's answer `ask`, kept when the rules allow.
    async fn kept<T: Clone>(
        &self,
        map: fn(&mut Kept) -> &mut HashMap<String, T>,
        key: &str,
        valid: impl Fn(&T) -> bool,
        ask: impl Future<Output = Result<Option<T>, StorageError>>,
    ) -> Result<Option<T>, StorageError> {
        let cache = &self.credentials;
        let lock = || cache.kept.lock();
        let mark = self.revocations().revocation_mark();
        let mut asked_after = None;
        if let Some(mark) = mark {
            let mut kept = lock();
            if kept.mark != Some(mark) {
                kept.forget();
                kept.mark = Some(mark);
            }
            asked_after = Some(kept.forgotten);
            let entries = map(&mut kept);
            match entries.get(key) {
                Some(v) if valid(v) => return Ok(Some(v.clone())),
                Some(_) => {
                    entries.remove(key);
                }
                None => {}
            }
        }
        cache.lookups.fetch_add(1, Ordering::Relaxed);
        let found = ask.await?;
        if let (Some(mark), Some(v)) = (mark, &found) {
            let mut kept = lock();
            if kept.mark == Some(mark) && Some(kept.forgotten) == asked_after && valid(v) {
                let entries = map(&mut kept);
                if entries.len() >= CREDENTIAL_CACHE_ENTRIES {
                    entries.clear();
                }
                entries.insert(key.to_owned(), v.clone());
            }
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use crate::{auth::Role, storage};

    /// A store on `dir`'s database, as a relay or the CLI (another process) opens it.
    async fn open(dir: &std::path::Path) -> storage::Store {
        storage::open(&dir.join("relay.db")).await.unwrap()
    }

    #[tokio::test]
    async fn a_token_seen_before_costs_no_query_and_a_revocation_elsewhere_ends_it_at_once() {
        let d = tempfile::tempdir().unwrap();
        let (relay, cli) = (open(d.path()).await, open(d.path()).await);
        relay.bridges().add_bridge("b", 60).await.unwrap();
        let (rec, token) = cli
            .accounts()
            .create_token("b", Role::Owner, None)
            .await
            .unwrap();
        let hash = crate::auth::sha256_hex(&token);
        for _ in 0..10 {
            assert_eq!(relay.static_token(&hash).await.unwrap().unwrap().id, rec.id);
        }
        assert_eq!(relay.credential_lookups(), 1, "one query for ten requests");
        cli.accounts().revoke_token(&rec.id).await.unwrap();
        assert_eq!(
            relay.static_token(&hash).await.unwrap(),
            None,
            "revoked by another process: refused at the next request"
        );
        assert_eq!(relay.static_token(&hash).await.unwrap(), None);
        assert_eq!(
            relay.credential_lookups(),
            3,
            "a refused token is asked every time"
        );
    }

    /// An answer the store gave before everything was forgotten is not kept, even when a later
    /// lookup saw the same mark (a revocation whose writer could not move the mark, found by the
    /// relay's poll while the answer was on its way).
    #[tokio::test]
    async fn an_answer_asked_before_a_forget_is_not_kept() {
        let relay = storage::memory().await.unwrap();
        relay.bridges().add_bridge("b", 60).await.unwrap();
        let mut tokens = Vec::new();
        for _ in 0..2 {
            let (rec, token) = relay
                .accounts()
                .create_token("b", Role::Owner, None)
                .await
                .unwrap();
            tokens.push((rec, crate::auth::sha256_hex(&token)));
        }
        let [(rec, hash), (_, other)] = [tokens.remove(0), tokens.remove(0)];
        let (release, held) = tokio::sync::oneshot::channel::<()>();
        let stale = rec.clone();
        let slow = relay.kept(|k| &mut k.tokens, &hash, |_| true, async move {
            let _ = held.await;
            Ok(Some(stale))
        });
        let meanwhile = async {
            tokio::task::yield_now().await;
            relay.forget_credentials();
            // Another token's lookup after the forget sees the same mark again.
            relay.static_token(&other).await.unwrap().unwrap();
            let _ = release.send(());
        };
        let (answer, ()) = tokio::join!(slow, meanwhile);
        assert_eq!(answer.unwrap().unwrap().id, rec.id);
        let before = relay.credential_lookups();
        relay.static_token(&hash).await.unwrap();
        assert_eq!(
            relay.credential_lookups(),
            before + 1,
            "the answer from before the forget was not kept"
        );
    }

    #[tokio::test]
    async fn forgetting_makes_the_next_request_ask_the_store() {
        let relay = storage::memory().await.unwrap();
        relay.bridges().add_bridge("b", 60).await.unwrap();
        let (_, token) = relay
            .accounts()
            .create_token("b", Role::Owner, None)
            .await
            .unwrap();
        let hash = crate::auth::sha256_hex(&token);
        relay.static_token(&hash).await.unwrap().unwrap();
        relay.static_token(&hash).await.unwrap().unwrap();
        assert_eq!(relay.credential_lookups(), 1);
        relay.forget_credentials();
        relay.static_token(&hash).await.unwrap().unwrap();
        assert_eq!(relay.credential_lookups(), 2);
    }
}
