//! The hello a daemon authenticates with (DESIGN §5 step 2) and the enrollment that registers
//! its key: the signature over the hello transcript against a device key of the bridge, the
//! clock skew allowed, one close reason for every refusal, and redeeming an enrollment code.

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use p256::ecdsa::{Signature, VerifyingKey, signature::Verifier};

use protocol::frame::{CloseCode, RelayFrame, hello_transcript, now_unix_ms};

use super::Node;
use crate::{hub::LinkTx, storage::StorageError};

/// Largest clock difference accepted in a hello's timestamp.
const HELLO_CLOCK_SKEW_MS: u64 = 5 * 60 * 1000;
/// The one close reason of every refused hello, whatever the cause (a reason per cause would tell
/// whether a key id exists); the cause is logged by the relay.
pub(crate) const HELLO_REFUSED: &str =
    "hello refused: the device key, bridge or signature is not valid here (enroll again)";

/// Redeems an enrollment code for a device public key, answers `enrolled` and ends the socket.
pub(super) async fn enroll(
    node: &Node,
    tx: &LinkTx,
    code: &str,
    public_key: &str,
) -> Result<(), (CloseCode, String)> {
    let key_ok = URL_SAFE_NO_PAD
        .decode(public_key)
        .ok()
        .and_then(|b| VerifyingKey::from_sec1_bytes(&b).ok())
        .is_some();
    if !key_ok {
        return Err((
            CloseCode::Protocol,
            "public_key is not a P-256 public key (SEC1, base64url)".into(),
        ));
    }
    match node.store.bridges().enroll(code, public_key).await {
        Ok((bridge, key_id)) => {
            tracing::info!(%bridge, %key_id, "daemon enrolled");
            let told = tx.try_send(RelayFrame::Enrolled {
                bridge: bridge.clone().into(),
                key_id,
            });
            if let Err(e) = told {
                // The code is spent; the daemon, not told, redeems it again with the same key.
                tracing::warn!(%bridge, error = %e, "a daemon enrolled but its socket could not be told");
            }
            tx.close(CloseCode::Normal, "enrolled");
            Ok(())
        }
        Err(StorageError::NotFound(m)) => Err((CloseCode::Unauthenticated, m)),
        Err(e) => {
            tracing::error!(error = %e, "enrollment failed");
            Err((CloseCode::Internal, "enrollment failed".into()))
        }
    }
}

pub(super) async fn verify_hello(
    node: &Node,
    challenge: &str,
    bridge: &str,
    instance_id: &str,
    key_id: &str,
    timestamp: u64,
    signature: &str,
) -> Result<(), (CloseCode, String)> {
    let deny = |why: &str| (CloseCode::Unauthenticated, why.to_owned());
    if instance_id.is_empty() || instance_id.len() > 128 {
        return Err(deny("bad instance id"));
    }
    if now_unix_ms().abs_diff(timestamp) > HELLO_CLOCK_SKEW_MS {
        return Err(deny("hello timestamp is too far from the relay's clock"));
    }
    let key = node
        .store
        .bridges()
        .device_key(key_id)
        .await
        .map_err(|_| deny("key lookup failed"))?
        .filter(|k| k.bridge == bridge)
        .ok_or_else(|| deny("unknown device key for this bridge (enroll again)"))?;
    let pk = URL_SAFE_NO_PAD
        .decode(&key.public_key)
        .ok()
        .and_then(|b| VerifyingKey::from_sec1_bytes(&b).ok())
        .ok_or_else(|| deny("stored device key is unreadable"))?;
    let sig = URL_SAFE_NO_PAD
        .decode(signature)
        .ok()
        .and_then(|b| Signature::from_slice(&b).ok())
        .ok_or_else(|| deny("malformed signature"))?;
    let transcript = hello_transcript(
        &node.config.origin(),
        challenge,
        bridge,
        instance_id,
        timestamp,
    );
    pk.verify(&transcript, &sig)
        .map_err(|_| deny("hello signature does not verify"))
}
