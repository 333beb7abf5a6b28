//! A `server/discover` result (MCP 2026-07-28 Server › Discover, schema `DiscoverResult`)
//! derived from a server's `initialize` result, for a server that cannot answer one itself.
//!
//! Two places derive one, and [`DiscoverFrom`] names what differs between them, and why:
//! - the relay, answering from the catalog a daemon announced without a discover result (a
//!   daemon older than link revision 2): the relay serves the endpoint in every version, so
//!   all are listed, and one catalog answers every caller of the bridge (`public`);
//! - the daemon's era bridge, for an upstream child that speaks only the handshake era: it is
//!   reachable in 2026-07-28 through the bridge and in the version it negotiated at its own
//!   `initialize`, and each principal has its own child whose lists depend on the caller's role
//!   (`private`).
//!
//! The rest is the same for both: `resultType: "complete"`; the capabilities of 2026-07-28's
//! `ServerCapabilities` that the server advertised, less `resources.subscribe` (2026-07-28
//! subscribes through `subscriptions/listen`) — the 2025-11-25 core `tasks` and anything
//! unknown are left out; `serverInfo` in `_meta` (Basic § `_meta`, per-response fields);
//! `instructions`; and `ttlMs: 0` (Server › Utilities › Caching § Time-to-Live: the derived
//! answer is of unknown freshness, so immediately stale).

use serde_json::{Map, Value, json};

use crate::mcp::{ALL_VERSIONS, META_SERVER_INFO, MODERN_VERSION};

/// Members of MCP 2026-07-28 `ServerCapabilities` (schema).
pub const MODERN_CAPABILITIES: [&str; 7] = [
    "experimental",
    "logging",
    "completions",
    "prompts",
    "resources",
    "tools",
    "extensions",
];

/// Who derives a discover result (module docs: what differs, and why).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiscoverFrom {
    /// The relay, from a daemon's cached catalog: every version the relay serves
    /// ([`ALL_VERSIONS`]), `cacheScope: "public"`.
    RelayCache,
    /// The daemon's era bridge to a handshake-era child: 2026-07-28 and the version the child
    /// negotiated, `cacheScope: "private"`.
    EraBridge,
}

/// The `server/discover` result derived from `init`, a server's `initialize` result (module
/// docs). A member of `init` of the wrong type is left out (an `initialize` result that is not
/// an object gives no capabilities, no `serverInfo`, no instructions).
pub fn discover_from_initialize(init: &Value, from: DiscoverFrom) -> Value {
    let versions: Vec<Value> = match from {
        DiscoverFrom::RelayCache => ALL_VERSIONS.iter().map(|v| json!(v)).collect(),
        DiscoverFrom::EraBridge => {
            let mut v = vec![json!(MODERN_VERSION)];
            if let Some(own) = init.get("protocolVersion").and_then(Value::as_str)
                && own != MODERN_VERSION
            {
                v.push(json!(own));
            }
            v
        }
    };
    let scope = match from {
        DiscoverFrom::RelayCache => "public",
        DiscoverFrom::EraBridge => "private",
    };
    let mut caps: Map<String, Value> = init
        .get("capabilities")
        .and_then(Value::as_object)
        .map(|c| {
            c.iter()
                .filter(|(k, _)| MODERN_CAPABILITIES.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    if let Some(r) = caps.get_mut("resources").and_then(Value::as_object_mut) {
        r.remove("subscribe");
    }
    let mut out = json!({
        "resultType": "complete",
        "supportedVersions": versions,
        "capabilities": caps,
        "ttlMs": 0,
        "cacheScope": scope,
    });
    if let Some(info) = init.get("serverInfo").filter(|i| i.is_object()) {
        out["_meta"] = json!({ META_SERVER_INFO: info });
    }
    if let Some(text) = init.get("instructions").filter(|i| i.is_string()) {
        out["instructions"] = text.clone();
    }
    out
}

/// Whether a `server/discover` *result* lists 2026-07-28 among its `supportedVersions`: the
/// server answers that era itself.
pub fn lists_modern(result: &Value) -> bool {
    result
        .get("supportedVersions")
        .and_then(Value::as_array)
        .is_some_and(|v| v.iter().any(|v| v == MODERN_VERSION))
}
