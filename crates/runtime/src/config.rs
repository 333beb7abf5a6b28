//! The user's own configuration of `machine-mcp` on this machine:
//! `$XDG_CONFIG_HOME/machine-mcp/config.toml` (else `~/.config/machine-mcp/config.toml`).
//!
//! It holds what belongs to the user rather than to a workspace, so it is never served to a
//! caller confined to the workspace: a remote reviewer never receives the owner's private
//! instructions. It is read on every use (it is small), so an edit takes effect
//! without a restart. Unknown keys fail closed: a misspelt key is an error naming it, never a
//! setting silently ignored.
//!
//! ```toml
//! [context]
//! # The user-level instructions file: the lowest-precedence source of the instruction chain.
//! # Absolute, `~/`-relative, or relative to this file's directory.
//! instructions = "~/notes/AGENTS.md"
//!
//! [delegation]
//! # The agent CLIs `delegate` may run; each is off until enabled here. Names:
//! # codex, claude, gemini (any other name is an error).
//! [delegation.agents.codex]
//! enabled = true
//! # Optional: absolute or `~/`-relative; default: `codex` found on the server's PATH.
//! path = "~/.local/bin/codex"
//! [delegation.agents.claude]
//! enabled = true
//! ```

use std::{
    collections::BTreeMap,
    io::Read,
    path::{Path, PathBuf},
};

use crate::limits::USER_CONFIG_MAX_BYTES;
use serde::Deserialize;

use crate::tools::delegation::engine::agents::Agent;

/// The parsed configuration file. Every section is optional.
#[derive(Debug, Default, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    /// `[context]`: the agent context tools.
    #[serde(default)]
    pub context: ContextConfig,
    /// `[delegation]`: the agent CLIs `delegate` may run.
    #[serde(default)]
    pub delegation: DelegationConfig,
}

/// `[context]` of the user configuration.
#[derive(Debug, Default, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ContextConfig {
    /// The user-level instructions file, as written (resolved by [`UserConfig::instructions`]).
    pub instructions: Option<String>,
}

/// `[delegation]` of the user configuration: which agent CLIs may be delegated to.
#[derive(Debug, Default, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DelegationConfig {
    /// `[delegation.agents.<name>]`, by agent. A name other than `codex`, `claude` or `gemini`
    /// makes the whole file invalid (fail closed, like an unknown key). An agent absent here is
    /// disabled.
    #[serde(default)]
    pub agents: BTreeMap<Agent, AgentConfig>,
}

impl DelegationConfig {
    /// The settings of `agent`: the configured ones, else the default (disabled, found on
    /// `PATH`).
    pub fn agent(&self, agent: Agent) -> AgentConfig {
        self.agents.get(&agent).cloned().unwrap_or_default()
    }
}

/// `[delegation.agents.<name>]` of the user configuration.
#[derive(Debug, Default, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// Whether `delegate` may run this agent (default `false`).
    #[serde(default)]
    pub enabled: bool,
    /// The agent's executable, as written (resolved by [`AgentConfig::executable`]); `None`:
    /// searched on the server's `PATH`.
    pub path: Option<String>,
}

impl AgentConfig {
    /// The configured executable: `~/` expanded against `$HOME`, anything else as written
    /// (the caller refuses a relative path). `None` when no path is configured, the path is
    /// blank, or `~/` is used without a `HOME`.
    pub fn executable(&self) -> Option<PathBuf> {
        let raw = self.path.as_deref()?.trim();
        if raw.is_empty() {
            return None;
        }
        match raw.strip_prefix("~/") {
            Some(rest) => home().map(|h| h.join(rest)),
            None => Some(PathBuf::from(raw)),
        }
    }
}

/// Why the configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists but could not be read.
    #[error("{path}: cannot be read: {source}")]
    Read {
        /// The configuration file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is larger than [`USER_CONFIG_MAX_BYTES`].
    #[error("{path}: larger than {USER_CONFIG_MAX_BYTES} bytes; it is not read")]
    TooLarge {
        /// The configuration file.
        path: PathBuf,
    },
    /// The file is not valid TOML, not UTF-8, or has a key this version does not know.
    #[error("{path}: {message}")]
    Invalid {
        /// The configuration file.
        path: PathBuf,
        /// The parser's message (line, column and the offending key).
        message: String,
    },
}

impl UserConfig {
    /// Where the configuration file is: `$XDG_CONFIG_HOME/machine-mcp/config.toml` when
    /// `XDG_CONFIG_HOME` is set to an absolute path (XDG Base Directory Specification), else
    /// `$HOME/.config/machine-mcp/config.toml`; `None` when neither variable is usable.
    pub fn path() -> Option<PathBuf> {
        let xdg = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute());
        let base = xdg.or_else(|| home().map(|h| h.join(".config")))?;
        Some(base.join("machine-mcp").join("config.toml"))
    }

    /// Loads the configuration from [`UserConfig::path`]: the default (every section empty)
    /// when there is no such file.
    ///
    /// # Errors
    /// As [`UserConfig::load_from`].
    pub fn load() -> Result<Self, ConfigError> {
        match Self::path() {
            Some(p) => Self::load_from(&p),
            None => Ok(Self::default()),
        }
    }

    /// Loads the configuration file at `path`; a missing file is the default configuration.
    ///
    /// # Errors
    /// - [`ConfigError::Read`]: the file exists but cannot be read (permissions, a directory).
    /// - [`ConfigError::TooLarge`]: over [`USER_CONFIG_MAX_BYTES`].
    /// - [`ConfigError::Invalid`]: not UTF-8, not TOML, or an unknown key (named).
    pub fn load_from(path: &Path) -> Result<Self, ConfigError> {
        let read_err = |source| ConfigError::Read {
            path: path.to_owned(),
            source,
        };
        let file = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => return Err(read_err(e)),
        };
        let mut bytes = Vec::new();
        file.take(USER_CONFIG_MAX_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(read_err)?;
        if bytes.len() > USER_CONFIG_MAX_BYTES {
            return Err(ConfigError::TooLarge {
                path: path.to_owned(),
            });
        }
        let invalid = |message: String| ConfigError::Invalid {
            path: path.to_owned(),
            message,
        };
        let text = String::from_utf8(bytes).map_err(|_| invalid("not UTF-8".to_owned()))?;
        toml::from_str(&text).map_err(|e| invalid(e.to_string().trim_end().replace('\n', " ")))
    }

    /// The user-level instructions file, resolved: `~/` against `$HOME`, a relative path
    /// against the directory of `config_path`. `None` when none is configured (or `~/` is used
    /// without a `HOME`).
    pub fn instructions(&self, config_path: &Path) -> Option<PathBuf> {
        let raw = self.context.instructions.as_deref()?.trim();
        if raw.is_empty() {
            return None;
        }
        if let Some(rest) = raw.strip_prefix("~/") {
            return home().map(|h| h.join(rest));
        }
        let p = Path::new(raw);
        if p.is_absolute() {
            Some(p.to_owned())
        } else {
            Some(config_path.parent().unwrap_or(Path::new("/")).join(p))
        }
    }
}

/// The user's home directory from `HOME` (absolute only).
pub fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_file_is_the_default_and_unknown_keys_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        assert_eq!(UserConfig::load_from(&path).unwrap(), UserConfig::default());

        std::fs::write(&path, "[context]\ninstructions = \"notes/AGENTS.md\"\n").unwrap();
        let c = UserConfig::load_from(&path).unwrap();
        assert_eq!(
            c.instructions(&path),
            Some(dir.path().join("notes/AGENTS.md"))
        );

        std::fs::write(&path, "[context]\ninstructoins = \"x\"\n").unwrap();
        let e = UserConfig::load_from(&path).unwrap_err().to_string();
        assert!(e.contains("instructoins"), "{e}");

        std::fs::write(&path, vec![b'#'; USER_CONFIG_MAX_BYTES + 1]).unwrap();
        assert!(matches!(
            UserConfig::load_from(&path),
            Err(ConfigError::TooLarge { .. })
        ));
    }

    #[test]
    fn the_delegation_section_names_agents_and_fails_closed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(
            &path,
            "[delegation.agents.codex]\nenabled = true\npath = \"/opt/codex/bin/codex\"\n\
             [delegation.agents.gemini]\nenabled = false\n",
        )
        .unwrap();
        let c = UserConfig::load_from(&path).unwrap();
        let codex = c.delegation.agent(Agent::Codex);
        assert!(codex.enabled);
        assert_eq!(
            codex.executable(),
            Some(PathBuf::from("/opt/codex/bin/codex"))
        );
        assert!(!c.delegation.agent(Agent::Gemini).enabled);
        // Absent: disabled, searched on PATH.
        assert_eq!(c.delegation.agent(Agent::Claude), AgentConfig::default());
        assert_eq!(c.delegation.agent(Agent::Claude).executable(), None);

        std::fs::write(&path, "[delegation.agents.cursor]\nenabled = true\n").unwrap();
        let e = UserConfig::load_from(&path).unwrap_err().to_string();
        assert!(e.contains("cursor") && e.contains("codex"), "{e}");

        std::fs::write(&path, "[delegation.agents.codex]\nenable = true\n").unwrap();
        let e = UserConfig::load_from(&path).unwrap_err().to_string();
        assert!(e.contains("enable"), "{e}");

        std::fs::write(&path, "[delegation]\nagent = {}\n").unwrap();
        let e = UserConfig::load_from(&path).unwrap_err().to_string();
        assert!(e.contains("agent"), "{e}");
    }
}
