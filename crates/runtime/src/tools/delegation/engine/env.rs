//! The environment an agent starts with ([`AgentEnvironment`]): the server's, or the
//! isolated one of `run_process`, minus [`DROPPED_ENV_PREFIXES`], plus the worker variables.

use std::ffi::OsString;

use super::{
    AgentEnvironment,
    agents::{self, Agent},
};

/// Prefixes of the server's environment variables an agent does not inherit: this bridge's
/// own (`MACHINE_MCP_`, the worker variables are added after) and other bridges' and hosts'
/// (a nested agent must not think it runs inside its parent's bridge or app).
pub const DROPPED_ENV_PREFIXES: &[&str] = &[
    "MACHINE_MCP_",
    "MCP_",
    "AGENT_RELAY_",
    "CODEX_MCP_BRIDGE",
    "CODEX_BRIDGE_",
    "CLAUDE_BRIDGE_",
    "CODEX_APP_",
    "CODEX_THREAD_ID",
    "CLAUDECODE",
    "CLAUDE_CODE_ENTRYPOINT",
    "ELECTRON_",
];

/// The environment of `agent` under `environment` ([`AgentEnvironment`]) from this server's,
/// plus `extra` (the worker variables, added last).
///
/// # Errors
/// The private directories of an isolated environment cannot be created.
pub(super) fn agent_env(
    agent: Agent,
    environment: &AgentEnvironment,
    extra: Vec<(String, String)>,
) -> std::io::Result<Vec<(OsString, OsString)>> {
    agent_env_from(std::env::vars_os().collect(), agent, environment, extra)
}

/// [`agent_env`] from the environment `inherited` instead of this process's.
///
/// The rule for [`DROPPED_ENV_PREFIXES`] is by prefix only: a variable is dropped when its
/// name starts with one of them (`CODEX_MCP_BRIDGE_X` is; `SOME_BRIDGE_TOKEN` is not, and
/// reaches an agent of a `full_env` policy).
pub(super) fn agent_env_from(
    inherited: Vec<(OsString, OsString)>,
    agent: Agent,
    environment: &AgentEnvironment,
    extra: Vec<(String, String)>,
) -> std::io::Result<Vec<(OsString, OsString)>> {
    let dropped = |k: &OsString| {
        let k = k.to_string_lossy();
        DROPPED_ENV_PREFIXES.iter().any(|p| k.starts_with(p))
    };
    let mut env: Vec<(OsString, OsString)> = match environment {
        AgentEnvironment::Full => inherited.into_iter().filter(|(k, _)| !dropped(k)).collect(),
        AgentEnvironment::Isolated { scratch } => {
            let scratch = crate::tools::process::engine::env::Scratch::new(scratch.clone());
            let base = crate::tools::process::engine::env::child_env_from(
                inherited.clone(),
                false,
                &scratch,
                false,
                &std::collections::BTreeMap::new(),
            )?;
            let mut env: std::collections::BTreeMap<OsString, OsString> =
                base.into_iter().collect();
            let is_set = |name: &str| {
                inherited
                    .iter()
                    .any(|(k, v)| k.as_os_str() == name && !v.is_empty())
            };
            for (k, v) in &inherited {
                let own = k
                    .to_str()
                    .is_some_and(|name| name == "HOME" || agents::keeps_env(agent, name, &is_set));
                if own {
                    env.insert(k.clone(), v.clone());
                }
            }
            env.into_iter().filter(|(k, _)| !dropped(k)).collect()
        }
    };
    env.extend(extra.into_iter().map(|(k, v)| (k.into(), v.into())));
    Ok(env)
}
