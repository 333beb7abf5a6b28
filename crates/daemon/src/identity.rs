//! The daemon's identity: a P-256 device key created once, and the enrollment record.
//!
//! Both live in the state directory, owner-only (0600 files in a 0700 directory): `device-key.pem`
//! (PKCS#8 PEM) and `enrollment.json` (`{"relay": URL, "bridge": NAME, "key_id": ID}`). An
//! unreadable or corrupt file is an error naming the file; it is never silently replaced
//! (invariant 9).

use std::{
    fs,
    io::Write,
    os::unix::fs::{OpenOptionsExt, PermissionsExt},
    path::{Path, PathBuf},
};

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use p256::{
    ecdsa::{Signature, SigningKey, signature::Signer},
    pkcs8::{DecodePrivateKey, EncodePrivateKey, LineEnding},
};
use serde::{Deserialize, Serialize};

/// A problem with the state directory.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// A file could not be read or written: the message names the path at fault and the fix
    /// ([`crate::state_io::describe`]) and holds the OS error once (`error` is not a `source`).
    #[error("{}", crate::state_io::describe(path, error))]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// A file exists but is not what it should be.
    #[error(
        "{path} is unreadable ({why}); move it aside to start over (the daemon must then enroll again)"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
}

/// This daemon's device key.
pub struct DeviceKey {
    key: SigningKey,
}

impl std::fmt::Debug for DeviceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DeviceKey(<secret>)")
    }
}

impl DeviceKey {
    /// Loads `dir/device-key.pem`, creating it (and `dir`, 0700) the first time.
    ///
    /// # Errors
    /// The directory or file cannot be created or read; the file is not a P-256 PKCS#8 key.
    pub fn load_or_create(dir: &Path) -> Result<Self, IdentityError> {
        let path = dir.join("device-key.pem");
        match fs::read_to_string(&path) {
            Ok(pem) => {
                let key = SigningKey::from_pkcs8_pem(&pem).map_err(|e| IdentityError::Corrupt {
                    path: path.clone(),
                    why: e.to_string(),
                })?;
                Ok(Self { key })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                ensure_private_dir(dir)?;
                let key = SigningKey::random(&mut rand::rngs::OsRng);
                let pem = key
                    .to_pkcs8_pem(LineEnding::LF)
                    .map_err(|e| IdentityError::Corrupt {
                        path: path.clone(),
                        why: e.to_string(),
                    })?;
                write_private(&path, pem.as_bytes())?;
                Ok(Self { key })
            }
            Err(error) => Err(IdentityError::Io { path, error }),
        }
    }

    /// The public key as sent at enrollment: SEC1 uncompressed point, base64url.
    pub fn public_key(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.key.verifying_key().to_encoded_point(false).as_bytes())
    }

    /// ECDSA P-256 SHA-256 signature of `message`, fixed 64 bytes r‖s, base64url.
    pub fn sign(&self, message: &[u8]) -> String {
        let sig: Signature = self.key.sign(message);
        URL_SAFE_NO_PAD.encode(sig.to_bytes())
    }
}

/// Where a daemon enrolled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enrollment {
    /// The relay's base URL.
    pub relay: String,
    /// The bridge.
    pub bridge: String,
    /// The registered key's id.
    pub key_id: String,
}

impl Enrollment {
    /// Reads `dir/enrollment.json`; `None` when the daemon never enrolled.
    ///
    /// # Errors
    /// The file exists but cannot be read or parsed.
    pub fn load(dir: &Path) -> Result<Option<Self>, IdentityError> {
        let path = dir.join("enrollment.json");
        match fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text)
                .map(Some)
                .map_err(|e| IdentityError::Corrupt {
                    path,
                    why: e.to_string(),
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(IdentityError::Io { path, error }),
        }
    }

    /// Writes `dir/enrollment.json` (0600).
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn save(&self, dir: &Path) -> Result<(), IdentityError> {
        ensure_private_dir(dir)?;
        let text = serde_json::to_string_pretty(self).unwrap_or_default();
        write_private(&dir.join("enrollment.json"), text.as_bytes())
    }
}

fn ensure_private_dir(dir: &Path) -> Result<(), IdentityError> {
    fs::create_dir_all(dir).map_err(|error| IdentityError::Io {
        path: dir.to_owned(),
        error,
    })?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(|error| IdentityError::Io {
        path: dir.to_owned(),
        error,
    })
}

/// Writes `bytes` to `path` owner-only, replacing it atomically.
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), IdentityError> {
    let io = |error| IdentityError::Io {
        path: path.to_owned(),
        error,
    };
    let tmp = path.with_extension("tmp");
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io)?;
    f.write_all(bytes).map_err(io)?;
    f.sync_all().map_err(io)?;
    fs::rename(&tmp, path).map_err(io)
}

#[cfg(test)]
mod tests {
    use p256::ecdsa::{VerifyingKey, signature::Verifier};

    use super::*;

    #[test]
    fn the_key_is_created_once_owner_only_and_signs_verifiably() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("state");
        let k1 = DeviceKey::load_or_create(&dir).unwrap();
        let k2 = DeviceKey::load_or_create(&dir).unwrap();
        assert_eq!(k1.public_key(), k2.public_key());
        let mode = fs::metadata(dir.join("device-key.pem"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        let pk = VerifyingKey::from_sec1_bytes(&URL_SAFE_NO_PAD.decode(k1.public_key()).unwrap())
            .unwrap();
        let sig =
            Signature::from_slice(&URL_SAFE_NO_PAD.decode(k1.sign(b"hello")).unwrap()).unwrap();
        assert!(pk.verify(b"hello", &sig).is_ok());
        assert!(pk.verify(b"other", &sig).is_err());
    }

    #[test]
    fn a_corrupt_key_is_reported_not_replaced() {
        let d = tempfile::tempdir().unwrap();
        fs::write(d.path().join("device-key.pem"), "garbage").unwrap();
        let e = DeviceKey::load_or_create(d.path()).unwrap_err();
        assert!(e.to_string().contains("device-key.pem"));
        assert_eq!(
            fs::read_to_string(d.path().join("device-key.pem")).unwrap(),
            "garbage"
        );
    }
}
