//! Completing a result for the 2026-07-28 era: `resultType` (Basic § Result types) and the
//! caching hints of the cacheable operations (Server › Utilities › Caching), set in one place
//! for every answer the relay or the daemon makes or carries on a server's behalf.
//!
//! A result that already says what it is keeps its `resultType` (a `CreateTaskResult` is
//! `"task"`); each hint is kept, filled when absent, or set, as the [`Completion`] says:
//! - a live answer of a handshake-era server (the era bridge) fills what the server did not
//!   give: [`Completion::live`];
//! - a stored copy (the relay's catalog answers) is of unknown age: its `ttlMs` is set to 0
//!   whatever it said.

use serde_json::{Value, json};

use crate::mcp::META_SERVER_INFO;

/// Operations whose complete results carry caching hints (MCP 2026-07-28 Server › Utilities ›
/// Caching § Cacheable Results).
pub const CACHEABLE: [&str; 6] = [
    "server/discover",
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
];

/// Whether results of `method` carry caching hints ([`CACHEABLE`]).
pub fn is_cacheable(method: &str) -> bool {
    CACHEABLE.contains(&method)
}

/// `cacheScope` (§ Choosing a Cache Scope).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheScope {
    /// Any caller may reuse the result.
    Public,
    /// Only the caller that got it (what it sees depends on who it is).
    Private,
}

impl CacheScope {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Public => "public",
            Self::Private => "private",
        }
    }
}

/// What becomes of one hint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hint<T> {
    /// Left as the result has it (or without it).
    Keep,
    /// Set to this when the result has none.
    Fill(T),
    /// Set to this whatever the result has.
    Set(T),
}

/// How [`complete`] completes one result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Completion<'a> {
    /// `ttlMs`, in milliseconds.
    pub ttl_ms: Hint<u64>,
    /// `cacheScope`.
    pub scope: Hint<CacheScope>,
    /// A `serverInfo` to name in the result's `_meta` (Basic § `_meta`, per-response fields).
    pub server_info: Option<&'a Value>,
}

impl Completion<'_> {
    /// `resultType` only.
    pub const PLAIN: Completion<'static> = Completion {
        ttl_ms: Hint::Keep,
        scope: Hint::Keep,
        server_info: None,
    };

    /// A live answer of a handshake-era server to `method`, carried into 2026-07-28: for a
    /// cacheable operation, `ttlMs: 0` and `cacheScope: "private"` where the server gave none
    /// (the carrier cannot know how long the server's lists stay valid, and what a caller sees
    /// depends on its role and on its own child process).
    pub fn live(method: &str) -> Self {
        if is_cacheable(method) {
            Completion {
                ttl_ms: Hint::Fill(0),
                scope: Hint::Fill(CacheScope::Private),
                server_info: None,
            }
        } else {
            Self::PLAIN
        }
    }
}

/// Completes `result` (a result object; anything else is left alone) as `how` says (module
/// docs).
pub fn complete(result: &mut Value, how: &Completion<'_>) {
    let Some(r) = result.as_object_mut() else {
        return;
    };
    r.entry("resultType").or_insert_with(|| json!("complete"));
    match how.ttl_ms {
        Hint::Keep => {}
        Hint::Fill(t) => {
            r.entry("ttlMs").or_insert_with(|| json!(t));
        }
        Hint::Set(t) => {
            r.insert("ttlMs".into(), json!(t));
        }
    }
    match how.scope {
        Hint::Keep => {}
        Hint::Fill(s) => {
            r.entry("cacheScope").or_insert_with(|| json!(s.as_str()));
        }
        Hint::Set(s) => {
            r.insert("cacheScope".into(), json!(s.as_str()));
        }
    }
    if let Some(info) = how.server_info.filter(|i| i.is_object()) {
        let meta = r.entry("_meta").or_insert_with(|| json!({}));
        if !meta.is_object() {
            *meta = json!({});
        }
        if let Some(m) = meta.as_object_mut() {
            m.insert(META_SERVER_INFO.into(), info.clone());
        }
    }
}
