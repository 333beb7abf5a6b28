//! The engine of local resources: the registry of secret files the user registers by alias
//! (`STATE_DIR/resources.json`, 0600), their validation, and reading them for a job.
//!
//! The registry holds each alias's absolute path, SHA-256 and size — never the bytes. A
//! resource is valid when its file is a regular file of at most
//! `crate::limits::RESOURCE_MAX_BYTES`, readable, unchanged since it
//! was registered (same SHA-256) and not readable by group or others (unless it was registered
//! with `allow_insecure_permissions`).

use std::{
    collections::BTreeMap,
    fs, io,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

use crate::limits::RESOURCE_MAX_BYTES;

use crate::primitives::{private, text::sha256_hex};

/// Smallest resource, without its trailing newline: shorter secrets cannot be told from
/// ordinary text, so they could not be redacted.
pub const RESOURCE_MIN_BYTES: usize = 4;

/// File name of the registry in the state directory.
pub const REGISTRY_FILE: &str = "resources.json";

/// Whether `alias` matches `^[a-z][a-z0-9._-]{0,63}$`.
pub fn valid_alias(alias: &str) -> bool {
    let b = alias.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && b[0].is_ascii_lowercase()
        && b[1..]
            .iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"._-".contains(c))
}

/// One registered resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Absolute path of the file.
    pub path: PathBuf,
    /// SHA-256 (hex) of its bytes when registered.
    pub sha256: String,
    /// Its size in bytes when registered.
    pub bytes: u64,
    /// RFC 3339 time of registration.
    pub added_at: String,
    /// Registered with `--allow-insecure-permissions`.
    #[serde(default)]
    pub allow_insecure: bool,
}

/// The state of a registered resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Validity {
    /// Usable by jobs.
    Ok,
    /// The file is gone.
    Missing,
    /// Its bytes differ from what was registered (re-register it).
    Changed,
    /// Group or others can read it.
    InsecurePermissions,
    /// It cannot be read, is not a regular file, or is too large.
    Unreadable,
}

impl Validity {
    /// The wire spelling (`ok`, `missing`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Validity::Ok => "ok",
            Validity::Missing => "missing",
            Validity::Changed => "changed",
            Validity::InsecurePermissions => "insecure_permissions",
            Validity::Unreadable => "unreadable",
        }
    }
}

/// Why a registry operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ResourceError {
    /// The alias does not match the pattern.
    #[error("alias {0:?} must match ^[a-z][a-z0-9._-]{{0,63}}$")]
    BadAlias(String),
    /// The file is not usable (named in the message).
    #[error("{path}: {why}")]
    BadFile {
        /// The file.
        path: String,
        /// What is wrong with it, and the fix.
        why: String,
    },
    /// The registry file cannot be read, parsed or written.
    #[error("the resource registry {path}: {why}")]
    Registry {
        /// The registry file.
        path: String,
        /// What went wrong.
        why: String,
    },
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct RegistryFile {
    version: u32,
    resources: BTreeMap<String, Entry>,
}

/// The registry of one state directory.
#[derive(Debug, Clone)]
pub struct Registry {
    file: PathBuf,
}

impl Registry {
    /// The registry of `state_dir` (not read until used).
    pub fn new(state_dir: &Path) -> Self {
        Self {
            file: state_dir.join(REGISTRY_FILE),
        }
    }

    fn registry_error(&self, why: impl std::fmt::Display) -> ResourceError {
        ResourceError::Registry {
            path: self.file.display().to_string(),
            why: why.to_string(),
        }
    }

    /// Every registered resource by alias; none when the registry does not exist yet.
    ///
    /// # Errors
    /// The registry cannot be read or is not valid JSON of this shape.
    pub fn load(&self) -> Result<BTreeMap<String, Entry>, ResourceError> {
        match private::read_capped(&self.file, 16 << 20) {
            Ok(bytes) => serde_json::from_slice::<RegistryFile>(&bytes)
                .map(|f| f.resources)
                .map_err(|e| self.registry_error(format!("not a valid registry ({e})"))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(BTreeMap::new()),
            Err(e) => Err(self.registry_error(e)),
        }
    }

    fn store(&self, resources: BTreeMap<String, Entry>) -> Result<(), ResourceError> {
        let bytes = serde_json::to_vec_pretty(&RegistryFile {
            version: 1,
            resources,
        })
        .map_err(|e| self.registry_error(e))?;
        if let Some(dir) = self.file.parent() {
            private::create_dir(dir).map_err(|e| self.registry_error(e))?;
        }
        private::write_atomic(&self.file, &bytes).map_err(|e| self.registry_error(e))
    }

    /// Registers (or re-registers) `alias` for the file `path`, recording its SHA-256.
    ///
    /// # Errors
    /// A bad alias; the file is missing, not a regular file, larger than
    /// [`RESOURCE_MAX_BYTES`], unreadable, or readable by group or others without
    /// `allow_insecure`; the registry cannot be read or written.
    pub fn add(
        &self,
        alias: &str,
        path: &Path,
        allow_insecure: bool,
    ) -> Result<Entry, ResourceError> {
        if !valid_alias(alias) {
            return Err(ResourceError::BadAlias(alias.to_owned()));
        }
        let bad = |why: String| ResourceError::BadFile {
            path: path.display().to_string(),
            why,
        };
        let abs = fs::canonicalize(path).map_err(|e| bad(e.to_string()))?;
        let meta = fs::metadata(&abs).map_err(|e| bad(e.to_string()))?;
        if !meta.is_file() {
            return Err(bad("not a regular file".into()));
        }
        if meta.permissions().mode() & 0o077 != 0 && !allow_insecure {
            return Err(bad(format!(
                "mode {:04o} lets group or others read it; run `chmod 600 {}` (or pass \
                 --allow-insecure-permissions)",
                meta.permissions().mode() & 0o7777,
                abs.display()
            )));
        }
        let bytes =
            private::read_capped(&abs, RESOURCE_MAX_BYTES).map_err(|e| bad(e.to_string()))?;
        let trimmed = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
        let trimmed = trimmed.strip_suffix(b"\r").unwrap_or(trimmed);
        if trimmed.len() < RESOURCE_MIN_BYTES {
            return Err(bad(format!(
                "{} bytes; a resource has at least {RESOURCE_MIN_BYTES} (a shorter secret cannot \
                 be told from ordinary output, so it could not be redacted)",
                trimmed.len()
            )));
        }
        let entry = Entry {
            path: abs,
            sha256: sha256_hex(&bytes),
            bytes: bytes.len() as u64,
            added_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            allow_insecure,
        };
        let mut all = self.load()?;
        all.insert(alias.to_owned(), entry.clone());
        self.store(all)?;
        Ok(entry)
    }

    /// Removes `alias`; `false` when it was not registered. The file itself is untouched.
    ///
    /// # Errors
    /// The registry cannot be read or written.
    pub fn remove(&self, alias: &str) -> Result<bool, ResourceError> {
        let mut all = self.load()?;
        let had = all.remove(alias).is_some();
        if had {
            self.store(all)?;
        }
        Ok(had)
    }
}

/// The state of `entry`'s file now.
pub fn check(entry: &Entry) -> Validity {
    read_verified(entry).map_or_else(|(v, _)| v, |_| Validity::Ok)
}

/// The bytes of `entry`'s file, when it is still valid.
///
/// # Errors
/// Its [`Validity`] when not `Ok`, with a message that names the fix (the message names the
/// alias's file only by "the registered file", so it can reach a caller).
pub fn read_verified(entry: &Entry) -> Result<Vec<u8>, (Validity, String)> {
    let meta = match fs::metadata(&entry.path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err((Validity::Missing, "the registered file is gone".into()));
        }
        Err(_) => {
            return Err((
                Validity::Unreadable,
                "the registered file cannot be read".into(),
            ));
        }
    };
    if !meta.is_file() {
        return Err((
            Validity::Unreadable,
            "the registered file is not a regular file".into(),
        ));
    }
    if meta.permissions().mode() & 0o077 != 0 && !entry.allow_insecure {
        return Err((
            Validity::InsecurePermissions,
            "the registered file is readable by group or others (chmod 600 it)".into(),
        ));
    }
    let bytes = private::read_capped(&entry.path, RESOURCE_MAX_BYTES).map_err(|_| {
        (
            Validity::Unreadable,
            "the registered file cannot be read".into(),
        )
    })?;
    if sha256_hex(&bytes) != entry.sha256 {
        return Err((
            Validity::Changed,
            "the registered file changed since it was registered (run `machine-mcp resource \
             add` again)"
                .into(),
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(dir: &Path, mode: u32) -> PathBuf {
        let p = dir.join("key");
        fs::write(&p, b"s3cret\n").unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    #[test]
    fn aliases_follow_the_pattern() {
        for ok in ["a", "deploy-token", "k8s.prod_1", &"a".repeat(64)] {
            assert!(valid_alias(ok), "{ok}");
        }
        for bad in ["", "A", "1a", "-a", "a b", "a/b", &"a".repeat(65)] {
            assert!(!valid_alias(bad), "{bad}");
        }
    }

    #[test]
    fn a_file_others_can_read_is_refused_unless_allowed() {
        let t = tempfile::tempdir().unwrap();
        let reg = Registry::new(t.path());
        let short = t.path().join("short");
        fs::write(&short, b"ab\n").unwrap();
        fs::set_permissions(&short, fs::Permissions::from_mode(0o600)).unwrap();
        let e = reg.add("s", &short, false).unwrap_err().to_string();
        assert!(e.contains("at least 4"), "{e}");
        let p = secret(t.path(), 0o644);
        let e = reg.add("k", &p, false).unwrap_err().to_string();
        assert!(e.contains("chmod 600"), "{e}");
        assert!(reg.load().unwrap().is_empty());
        let entry = reg.add("k", &p, true).unwrap();
        assert_eq!(check(&entry), Validity::Ok);
    }

    #[test]
    fn a_changed_or_removed_file_is_reported_and_never_read() {
        let t = tempfile::tempdir().unwrap();
        let reg = Registry::new(t.path());
        let p = secret(t.path(), 0o600);
        let entry = reg.add("k", &p, false).unwrap();
        assert_eq!(read_verified(&entry).unwrap(), b"s3cret\n");
        let registry = fs::read_to_string(t.path().join(REGISTRY_FILE)).unwrap();
        assert!(!registry.contains("s3cret"), "the registry holds no bytes");
        fs::write(&p, b"other\n").unwrap();
        assert_eq!(check(&entry), Validity::Changed);
        fs::set_permissions(&p, fs::Permissions::from_mode(0o640)).unwrap();
        assert_eq!(check(&entry), Validity::InsecurePermissions);
        fs::remove_file(&p).unwrap();
        assert_eq!(check(&entry), Validity::Missing);
        assert!(reg.remove("k").unwrap());
        assert!(!reg.remove("k").unwrap());
    }
}
