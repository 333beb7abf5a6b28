//! Daemon catalogs as the relay keeps them: compact JSON text, interned across bridges, parsed
//! only for the answers the relay makes itself (offline, or for a daemon older than revision 2),
//! and the `x-mcp-header` annotations of their tools ([`param_headers`]), derived once per
//! catalog.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::Arc,
};

use serde::Deserialize;
use serde_json::Value;

use protocol::frame::ServerInfo;

use lock::Lock;

/// The catalog a daemon announced: its servers by name.
pub(crate) type Catalog = HashMap<String, CachedServer>;

/// One server of a catalog as the relay keeps it: compact JSON text, not a parsed tree (a parsed
/// catalog of the built-in runtime, four role views with their schemas, takes about 0.9 MiB per
/// bridge), and shared between bridges that announced the same text (see [`TextCache`]).
#[derive(Debug, Clone)]
pub(crate) struct CachedServer {
    /// The server's `initialize` result (a JSON object).
    pub(crate) initialize: Arc<str>,
    /// Its `initialize` result per handshake-era version, when the daemon announced them (the
    /// built-in runtime's).
    pub(crate) initialize_by_version: BTreeMap<String, Arc<str>>,
    /// The server's `server/discover` result, when the daemon announced one (link revision 2).
    pub(crate) discover: Option<Arc<str>>,
    /// `tools/list` results (JSON objects) by role name.
    pub(crate) tools: BTreeMap<String, Arc<str>>,
    /// The `x-mcp-header` annotations of its tools, by tool name (checked against the
    /// `Mcp-Param-*` headers of MCP 2026-07-28 `tools/call` requests).
    pub(crate) param_headers: Arc<HashMap<String, Vec<ParamHeader>>>,
    /// The protocol versions its endpoint serves: the `supportedVersions` of its
    /// `server/discover` result, or [`all_versions`] when it announced none (what the relay's
    /// own discover answer then lists); checked against every MCP 2026-07-28 request.
    pub(crate) supported_versions: Arc<[String]>,
}

/// Every protocol version the relay speaks ([`protocol::mcp::ALL_VERSIONS`]).
pub(crate) fn all_versions() -> Arc<[String]> {
    static ALL: std::sync::LazyLock<Arc<[String]>> = std::sync::LazyLock::new(|| {
        protocol::mcp::ALL_VERSIONS
            .iter()
            .map(|v| (*v).to_owned())
            .collect()
    });
    ALL.clone()
}

/// The `supportedVersions` of a `server/discover` result, when it lists any.
fn supported_versions(discover: Option<&Value>) -> Arc<[String]> {
    discover
        .and_then(|d| d.get("supportedVersions"))
        .and_then(|v| Vec::<String>::deserialize(v).ok())
        .filter(|v| !v.is_empty())
        .map_or_else(all_versions, Arc::from)
}

impl CachedServer {
    /// The `initialize` result, parsed.
    pub(crate) fn initialize(&self) -> Value {
        serde_json::from_str(&self.initialize).unwrap_or(Value::Null)
    }

    /// The `initialize` result for a client that negotiated `version`: the daemon's own for that
    /// version when it announced one (what a stdio client of the version gets), else
    /// [`Self::initialize`] naming `version`.
    pub(crate) fn initialize_for(&self, version: &str) -> Value {
        if let Some(v) = self
            .initialize_by_version
            .get(version)
            .and_then(|t| serde_json::from_str::<Value>(t).ok())
            .filter(Value::is_object)
        {
            return v;
        }
        let mut v = self.initialize();
        if v.is_object() {
            v["protocolVersion"] = Value::from(version);
        }
        v
    }

    /// The announced `server/discover` result, parsed.
    pub(crate) fn discover(&self) -> Option<Value> {
        self.discover
            .as_deref()
            .and_then(|d| serde_json::from_str(d).ok())
    }

    /// The `tools/list` result `role` may see, parsed.
    pub(crate) fn tools_for(&self, role: &str) -> Option<Value> {
        self.tools
            .get(role)
            .and_then(|t| serde_json::from_str(t).ok())
    }
}

/// Interned JSON texts: identical catalog parts (every daemon of one version announces the same
/// tool list) are kept once. An entry goes when no bridge uses it any more.
#[derive(Debug, Default)]
pub(crate) struct TextCache(Lock<HashSet<Arc<str>>>);

impl TextCache {
    /// The shared copy of `value`'s compact JSON text.
    pub(crate) fn intern(&self, value: &Value) -> Arc<str> {
        let text = value.to_string();
        let mut set = self.0.lock();
        if let Some(hit) = set.get(text.as_str()) {
            return hit.clone();
        }
        // Drop texts only the cache still holds, then keep the new one.
        set.retain(|t| Arc::strong_count(t) > 1);
        let text: Arc<str> = Arc::from(text);
        set.insert(text.clone());
        text
    }

    /// A catalog from a daemon's announced servers, its texts interned.
    pub(crate) fn catalog(&self, servers: Vec<ServerInfo>) -> Catalog {
        servers
            .into_iter()
            .map(|s| {
                let cached = CachedServer {
                    initialize: self.intern(&s.initialize),
                    initialize_by_version: s
                        .initialize_by_version
                        .iter()
                        .map(|(v, i)| (v.clone(), self.intern(i)))
                        .collect(),
                    discover: s.discover.as_ref().map(|d| self.intern(d)),
                    tools: s
                        .tools
                        .iter()
                        .map(|(role, t)| (role.clone(), self.intern(t)))
                        .collect(),
                    param_headers: Arc::new(param_headers(s.tools.values())),
                    supported_versions: supported_versions(s.discover.as_ref()),
                };
                (s.name, cached)
            })
            .collect()
    }
}

pub(crate) use protocol::head::mirror::{ParamHeader, param_headers};

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn server(tools: Value) -> ServerInfo {
        ServerInfo {
            name: "machine".into(),
            initialize: json!({"protocolVersion": "2025-11-25"}),
            initialize_by_version: BTreeMap::new(),
            discover: None,
            tools: [
                ("owner".to_owned(), tools.clone()),
                ("reviewer".to_owned(), tools),
            ]
            .into_iter()
            .collect(),
        }
    }

    /// The versions an endpoint serves are read once, when its catalog arrives: those its
    /// discover result lists, else every version the relay speaks.
    #[test]
    fn supported_versions_come_from_the_discover_result_or_are_all() {
        let cache = TextCache::default();
        let mut listed = server(json!({"tools": []}));
        listed.discover = Some(json!({"supportedVersions": ["2026-07-28", "2025-11-25"]}));
        let c = cache.catalog(vec![listed]);
        assert_eq!(
            &*c["machine"].supported_versions,
            ["2026-07-28".to_owned(), "2025-11-25".to_owned()]
        );
        for discover in [
            None,
            Some(json!({})),
            Some(json!({"supportedVersions": []})),
        ] {
            let mut s = server(json!({"tools": []}));
            s.discover = discover;
            let c = cache.catalog(vec![s]);
            assert_eq!(c["machine"].supported_versions, all_versions());
        }
    }

    #[test]
    fn identical_catalogs_share_their_text_and_unused_text_is_dropped() {
        let cache = TextCache::default();
        let tools = json!({"tools": [{"name": "read_file", "inputSchema": {"type": "object"}}]});
        let a = cache.catalog(vec![server(tools.clone())]);
        let b = cache.catalog(vec![server(tools.clone())]);
        assert!(Arc::ptr_eq(
            &a["machine"].tools["owner"],
            &b["machine"].tools["owner"]
        ));
        assert!(Arc::ptr_eq(
            &a["machine"].tools["owner"],
            &a["machine"].tools["reviewer"]
        ));
        assert_eq!(a["machine"].tools_for("reviewer"), Some(tools));
        assert_eq!(a["machine"].initialize()["protocolVersion"], "2025-11-25");
        drop((a, b));
        cache.intern(&json!("something else"));
        assert_eq!(cache.0.lock().len(), 1, "only the new text is left");
    }

    #[test]
    fn initialize_is_answered_per_version_when_the_daemon_announced_it() {
        let cache = TextCache::default();
        let mut info = server(json!({"tools": []}));
        info.initialize = json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}});
        let a = cache.catalog(vec![info.clone()]);
        // An older daemon (or an upstream server): its one answer, naming the version.
        assert_eq!(
            a["machine"].initialize_for("2025-06-18"),
            json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}})
        );
        let older = json!({"protocolVersion": "2025-03-26", "capabilities": {"tools": {"listChanged": true}}});
        info.initialize_by_version = [("2025-03-26".to_owned(), older.clone())].into();
        let b = cache.catalog(vec![info]);
        assert_eq!(b["machine"].initialize_for("2025-03-26"), older);
        assert_eq!(
            b["machine"].initialize_for("2025-11-25")["capabilities"],
            json!({"tools": {}})
        );
    }
}
