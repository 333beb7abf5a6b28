//! MCP vocabulary that the relay and the daemon both speak: the protocol versions served, and the
//! per-request `_meta` keys of MCP 2026-07-28 (Basic § `_meta`).
//!
//! Two eras share every endpoint, decided per request (DESIGN §4): the stateless revision
//! [`MODERN_VERSION`] and the handshake era of [`SESSION_VERSIONS`], negotiated at `initialize`.
//! Lists are newest first, the order `server/discover` and `UnsupportedProtocolVersionError`
//! report them in.

/// The stateless revision: per-request `_meta`, `server/discover`, no `initialize`, no session.
pub const MODERN_VERSION: &str = "2026-07-28";

/// Versions served without a session (MCP 2026-07-28 Basic › Versioning: "modern").
pub const MODERN_VERSIONS: [&str; 1] = [MODERN_VERSION];

/// Versions negotiated with `initialize` and served in an MCP session (the handshake era),
/// newest first.
pub const SESSION_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];

/// The newest handshake-era version: what `initialize` falls back to when the client asks for
/// one that is not served, and what the daemon initializes carried servers with.
pub const LATEST_SESSION_VERSION: &str = SESSION_VERSIONS[0];

/// Every version served, newest first: [`MODERN_VERSIONS`], then [`SESSION_VERSIONS`].
pub const ALL_VERSIONS: [&str; 4] = [
    MODERN_VERSION,
    SESSION_VERSIONS[0],
    SESSION_VERSIONS[1],
    SESSION_VERSIONS[2],
];

/// Whether `version` is served without a session ([`MODERN_VERSIONS`]).
pub fn is_modern(version: &str) -> bool {
    MODERN_VERSIONS.contains(&version)
}

/// Whether `version` is negotiated at `initialize` ([`SESSION_VERSIONS`]).
pub fn is_session_era(version: &str) -> bool {
    SESSION_VERSIONS.contains(&version)
}

/// The handshake-era version a session runs when its client's `initialize` asks for `asked`:
/// `asked` when it is one of [`SESSION_VERSIONS`], else [`LATEST_SESSION_VERSION`] (MCP
/// 2025-11-25 Lifecycle § Version Negotiation).
pub fn negotiate_session_version(asked: &str) -> &'static str {
    SESSION_VERSIONS
        .into_iter()
        .find(|v| *v == asked)
        .unwrap_or(LATEST_SESSION_VERSION)
}

/// Prefix of the protocol's own `_meta` keys (MCP 2026-07-28 Basic § `_meta`).
pub const META_PREFIX: &str = "io.modelcontextprotocol/";
/// `_meta` key of a request's protocol version (required in 2026-07-28).
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key of a request's client capabilities (required in 2026-07-28).
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key of a request's client identity (optional).
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// `_meta` key of a result's server identity (Basic § `_meta`, per-response fields).
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// `_meta` key naming the `subscriptions/listen` request a notification belongs to (Basic ›
/// Patterns › Subscriptions).
pub const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// The MCP 2026-07-28 long-lived request (Basic › Patterns › Subscriptions).
pub const SUBSCRIPTIONS_LISTEN: &str = "subscriptions/listen";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lists_are_newest_first_and_all_is_their_union() {
        let mut sorted = ALL_VERSIONS;
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        assert_eq!(sorted, ALL_VERSIONS);
        assert!(
            ALL_VERSIONS
                .iter()
                .all(|v| is_modern(v) != is_session_era(v))
        );
        assert_eq!(
            ALL_VERSIONS.len(),
            MODERN_VERSIONS.len() + SESSION_VERSIONS.len()
        );
    }

    #[test]
    fn a_session_runs_the_version_asked_for_when_served_else_the_newest() {
        for v in SESSION_VERSIONS {
            assert_eq!(negotiate_session_version(v), v);
        }
        for asked in ["2024-11-05", MODERN_VERSION, "", "2099-01-01"] {
            assert_eq!(negotiate_session_version(asked), LATEST_SESSION_VERSION);
        }
    }
}
