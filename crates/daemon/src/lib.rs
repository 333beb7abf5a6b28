//! The machine-bridge daemon: the user's machine end of the relay.
//!
//! It keeps one outbound WebSocket to the relay ([`link`]), authenticated by a P-256 device key
//! created once and registered at enrollment ([`identity`]), and hosts the MCP sessions the relay
//! opens ([`sessions`]): the built-in runtime, with the caller's role intersected with the local
//! policy on every call, or an upstream stdio server from a Claude Desktop-style servers file
//! ([`servers`]), one child process per session.
//!
//! Main entry points: [`catalog`] (what the daemon announces), [`link::run`], [`link::enroll`].
//!
//! Files: [`link`] (+ `link/probe.rs`, the handshake check of `doctor`), [`sessions`] (one file
//! per concern), [`bridge`] (2026-07-28 calls to upstreams of the handshake era), [`servers`],
//! [`identity`], [`instance`] (one daemon per state directory), [`status`] (the loopback status
//! endpoint), [`state_io`], [`backoff`]; here, [`role_profile`] and [`role_named`]: a role name
//! this build does not know gets reviewer, the least authority.

pub mod backoff;
pub mod bridge;
pub mod identity;
pub mod instance;
pub mod limits;
pub mod link;
pub mod servers;
pub mod sessions;
pub mod state_io;
pub mod status;

use std::{
    collections::{BTreeMap, HashSet},
    sync::Arc,
};

use protocol::{
    Role,
    frame::{RUNTIME_SERVER, ServerInfo},
    mcp::{LATEST_SESSION_VERSION, SESSION_VERSIONS},
};
use rmcp::model::ListToolsResult;
use runtime::{McpServer, Principal, Profile, Runtime};
use serde_json::Value;

use crate::servers::UpstreamSpec;

/// Installs rustls's ring crypto provider (for `wss://` relays); safe to call more than once.
pub fn init_tls() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The most a caller with `role` may do on the built-in runtime: the role's profile (DESIGN §3
/// "Authority": `owner` → `full`, `operator` → `agent`, `editor` → `edit`, `reviewer` →
/// `review`), intersected with the daemon's policy by [`Runtime::access`].
pub fn role_profile(role: Role) -> Profile {
    match role {
        Role::Owner => Profile::Full,
        Role::Operator => Profile::Agent,
        Role::Editor => Profile::Edit,
        Role::Reviewer => Profile::Review,
    }
}

/// The role a relay frame names (`open`, `call`): a role this build does not know gets the least
/// authority, [`Role::Reviewer`] (a newer relay may name roles an older daemon lacks).
pub fn role_named(name: &str) -> Role {
    Role::parse(name).unwrap_or(Role::Reviewer)
}

/// The runtime's catalog entry: its `initialize` results (one per handshake-era version, built
/// by [`McpServer::initialize_value`] as the handshake itself builds them, so the relay answers
/// a version as stdio does; `initialize` is the newest's), its `server/discover` (MCP
/// 2026-07-28 Server › Discover) result and the tools each role may see.
pub fn runtime_catalog(runtime: &Arc<Runtime>) -> ServerInfo {
    let server = McpServer::new(runtime.access(None), Principal::local());
    let initialize_by_version: BTreeMap<String, Value> = SESSION_VERSIONS
        .into_iter()
        .filter_map(|v| Some((v.to_owned(), server.initialize_value(v)?)))
        .collect();
    let initialize = initialize_by_version
        .get(LATEST_SESSION_VERSION)
        .cloned()
        .unwrap_or(Value::Null);
    let discover = Some(server.discover_value());
    let tools: BTreeMap<String, Value> = Role::ALL
        .into_iter()
        .map(|role| {
            let access = runtime.access(Some(role_profile(role)));
            let list = ListToolsResult::with_all_items(
                runtime::tools::allowed(access.policy())
                    .map(|t| t.to_tool())
                    .collect(),
            );
            (
                role.as_str().to_owned(),
                serde_json::to_value(list).unwrap_or(Value::Null),
            )
        })
        .collect();
    ServerInfo {
        name: RUNTIME_SERVER.to_owned(),
        initialize,
        initialize_by_version,
        discover,
        tools,
    }
}

/// The upstream servers that answered a probe: their catalog entries, and each spec with the
/// names of its read-only tools.
pub type ProbedUpstreams = (Vec<ServerInfo>, Vec<(UpstreamSpec, HashSet<String>)>);

/// Probes every upstream server (concurrently) and returns the full catalog plus the upstreams
/// that answered, each with the names of its read-only tools. A server that fails to start is
/// left out with an error logged.
pub async fn catalog(
    runtime: &Arc<Runtime>,
    upstreams: Vec<UpstreamSpec>,
) -> (Vec<ServerInfo>, Vec<(UpstreamSpec, HashSet<String>)>) {
    let (infos, ok) = probe_upstreams(upstreams).await;
    let mut servers = vec![runtime_catalog(runtime)];
    servers.extend(infos);
    (servers, ok)
}

/// Probes every upstream server concurrently (each within the probe bound of
/// [`servers::probe`]); a server that fails to start or answer is left out with an error logged.
pub async fn probe_upstreams(upstreams: Vec<UpstreamSpec>) -> ProbedUpstreams {
    let mut servers = Vec::new();
    let probes = upstreams.into_iter().map(|spec| async move {
        let r = servers::probe(&spec).await;
        (spec, r)
    });
    let mut ok = Vec::new();
    for (spec, r) in futures_util::future::join_all(probes).await {
        match r {
            Ok(info) => {
                let read_only: HashSet<String> = info
                    .tools
                    .get(Role::Reviewer.as_str())
                    .and_then(|v| v.get("tools"))
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|t| {
                                t.get("name").and_then(Value::as_str).map(str::to_owned)
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                tracing::info!(server = %spec.name, "upstream server ready");
                servers.push(info);
                ok.push((spec, read_only));
            }
            Err(e) => tracing::error!(server = %spec.name, error = %e, "upstream server left out"),
        }
    }
    (servers, ok)
}
