//! What a revocation made anywhere (the CLI, another relay process) does to this node's daemon
//! links and sessions, found through the store's revocation counter.

use std::collections::HashMap;

use protocol::frame::CloseCode;

use super::hello::HELLO_REFUSED;
use crate::{hub::Hub, storage::Store};

/// Closes every daemon link whose device key was revoked (or whose bridge was removed), and ends
/// every session whose credential was revoked (a token, an OAuth client or grant, an account
/// changed or removed), since the last check; `last` is the
/// [`crate::storage::RevocationStore::revocation_epoch`] seen then. Called by the relay's sweeper
/// every second; one query while nothing changed. When the counter moved, the credentials the
/// store keeps are forgotten too ([`Store::forget_credentials`]); first, the store's revocation
/// mark is opened again if it was replaced.
pub(crate) async fn close_revoked(hub: &Hub, store: &Store, last: &mut Option<i64>) {
    store.revocations().refresh_revocation_mark();
    let Ok(epoch) = store.revocations().revocation_epoch().await else {
        return;
    };
    if *last == Some(epoch) {
        return;
    }
    let first = last.is_none();
    *last = Some(epoch);
    if first {
        return;
    }
    store.forget_credentials();
    for (bridge, link) in hub.active_links() {
        let valid = match store.bridges().device_key(&link.key_id).await {
            Ok(k) => k.is_some_and(|k| k.bridge == bridge.name),
            Err(_) => continue,
        };
        if !valid {
            tracing::warn!(bridge = %bridge.name, key_id = %link.key_id, "closing a daemon whose device key was revoked");
            link.tx.close(CloseCode::Unauthenticated, HELLO_REFUSED);
        }
    }
    let mut live: HashMap<String, bool> = HashMap::new();
    for s in hub.all_exchanges() {
        let credential = s.principal.credential.clone();
        let ok = match live.get(&credential) {
            Some(ok) => *ok,
            None => match store.revocations().credential_live(&credential).await {
                Ok(ok) => *live.entry(credential).or_insert(ok),
                Err(_) => continue,
            },
        };
        if !ok {
            tracing::info!(bridge = %s.bridge.name, "ending a session whose credential was revoked");
            hub.end_session(
                &s.sid,
                protocol::jsonrpc::code::SESSION_NOT_FOUND,
                "the credential of this session was revoked",
                true,
            );
        }
    }
}
