//! The environment of child processes.
//!
//! With `full_env` a child inherits this process's environment. Otherwise it gets an isolated
//! one: a small allowlist of harmless variables (locale, time zone, user name, `PATH`), and a
//! private `HOME`, `TMPDIR` and XDG cache/config/data directories under the runtime's scratch
//! directory, so credentials in the user's environment and dotfiles are not handed to programs
//! the model runs. Toolchain homes (`CARGO_HOME`, `RUSTUP_HOME`, ...) are kept — pointing at the
//! real home's defaults when unset — so build tools keep working. Caller additions come last.

use std::{
    collections::BTreeMap,
    ffi::OsString,
    path::{Path, PathBuf},
};

/// Variables passed through unchanged in an isolated environment.
const ALLOWLIST: &[&str] = &[
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "LC_COLLATE",
    "LC_NUMERIC",
    "LC_TIME",
    "TZ",
    "USER",
    "LOGNAME",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "GOROOT",
    "GOPATH",
    "JAVA_HOME",
    "PYENV_ROOT",
    "NVM_DIR",
    "VIRTUAL_ENV",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
];

/// Toolchain homes that default to a directory under `$HOME`; kept at the real location.
const HOME_DEFAULTS: &[(&str, &str)] = &[("CARGO_HOME", ".cargo"), ("RUSTUP_HOME", ".rustup")];

/// Where a runtime keeps the private directories of isolated children.
#[derive(Debug, Clone)]
pub(crate) struct Scratch {
    root: PathBuf,
}

impl Scratch {
    /// Scratch space under `root` (created on first use).
    pub(crate) fn new(root: PathBuf) -> Self {
        Self { root }
    }

    /// The scratch root.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    fn dir(&self, name: &str) -> std::io::Result<PathBuf> {
        let p = self.root.join(name);
        std::fs::create_dir_all(&p)?;
        Ok(p)
    }
}

/// The complete environment for a child.
///
/// # Errors
/// The private directories could not be created.
pub(crate) fn child_env(
    full: bool,
    scratch: &Scratch,
    pty: bool,
    additions: &BTreeMap<String, String>,
) -> std::io::Result<Vec<(OsString, OsString)>> {
    child_env_from(std::env::vars_os().collect(), full, scratch, pty, additions)
}

/// [`child_env`] from the environment `inherited` instead of this process's (a job's runner
/// recovering a job uses the environment the job was accepted with).
///
/// # Errors
/// The private directories could not be created.
pub(crate) fn child_env_from(
    inherited: Vec<(OsString, OsString)>,
    full: bool,
    scratch: &Scratch,
    pty: bool,
    additions: &BTreeMap<String, String>,
) -> std::io::Result<Vec<(OsString, OsString)>> {
    let mut env: BTreeMap<OsString, OsString> = BTreeMap::new();
    let home_of = inherited
        .iter()
        .find(|(k, _)| k == "HOME")
        .map(|(_, v)| v.clone());
    if full {
        env.extend(inherited);
    } else {
        for (k, v) in inherited {
            if k.to_str().is_some_and(|k| ALLOWLIST.contains(&k)) {
                env.insert(k, v);
            }
        }
        if let Some(real_home) = home_of {
            for (var, sub) in HOME_DEFAULTS {
                let default = Path::new(&real_home).join(sub);
                if !env.contains_key(&OsString::from(var)) && default.is_dir() {
                    env.insert((*var).into(), default.into_os_string());
                }
            }
        }
        let home = scratch.dir("home")?;
        let tmp = scratch.dir("tmp")?;
        env.insert("HOME".into(), home.clone().into_os_string());
        env.insert("TMPDIR".into(), tmp.into_os_string());
        env.insert(
            "XDG_CACHE_HOME".into(),
            scratch.dir("home/.cache")?.into_os_string(),
        );
        env.insert(
            "XDG_CONFIG_HOME".into(),
            scratch.dir("home/.config")?.into_os_string(),
        );
        env.insert(
            "XDG_DATA_HOME".into(),
            scratch.dir("home/.local/share")?.into_os_string(),
        );
        env.entry("PATH".into())
            .or_insert_with(|| "/usr/local/bin:/usr/bin:/bin".into());
    }
    if pty {
        env.insert("TERM".into(), "xterm-256color".into());
    } else if !full {
        env.insert("TERM".into(), "dumb".into());
    }
    for (k, v) in additions {
        env.insert(k.into(), v.into());
    }
    Ok(env.into_iter().collect())
}

/// Checks caller-supplied variables: names non-empty without `=` or NUL, values without NUL.
///
/// # Errors
/// A message naming the bad variable.
pub(crate) fn validate(additions: &BTreeMap<String, String>) -> Result<(), String> {
    for (k, v) in additions {
        if k.is_empty() || k.contains('=') || k.contains('\0') {
            return Err(format!("bad environment variable name {k:?}"));
        }
        if v.contains('\0') {
            return Err(format!("environment variable {k} contains a NUL byte"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn isolated_env_has_private_home_and_no_secrets() {
        let d = tempfile::tempdir().unwrap();
        let scratch = Scratch::new(d.path().to_owned());
        let mut add = BTreeMap::new();
        add.insert("MY_VAR".to_owned(), "1".to_owned());
        let env = child_env(false, &scratch, false, &add).unwrap();
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert!(Path::new(&get("HOME").unwrap()).starts_with(d.path()));
        assert!(Path::new(&get("TMPDIR").unwrap()).is_dir());
        assert_eq!(get("MY_VAR").unwrap(), "1");
        assert!(get("PATH").is_some());
        for (k, _) in &env {
            let k = k.to_str().unwrap();
            assert!(
                ALLOWLIST.contains(&k)
                    || ["HOME", "TMPDIR", "TERM", "MY_VAR"].contains(&k)
                    || k.starts_with("XDG_"),
                "unexpected {k}"
            );
        }
    }

    #[test]
    fn bad_names_are_refused() {
        let mut add = BTreeMap::new();
        add.insert("A=B".to_owned(), "x".to_owned());
        assert!(validate(&add).is_err());
    }
}
