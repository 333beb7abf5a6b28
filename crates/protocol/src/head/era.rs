//! The era of a message, decided per message (DESIGN §4; MCP 2026-07-28 Basic › Versioning §
//! Backward Compatibility with Initialization-Based Versions: "a request carrying modern
//! per-request `_meta` is served statelessly"; "an `initialize` request selects legacy
//! semantics"), and the methods the 2026-07-28 era removed.
//!
//! The rule, in order ([`Head::era`]):
//! 1. `initialize` opens a session unless its `MCP-Protocol-Version` header or its `_meta`
//!    protocol version names a 2026-07-28 version (then it is a modern request for a method
//!    that era does not have, [`removed`]);
//! 2. `server/discover` is modern;
//! 3. a message whose `_meta` names a protocol version is modern, unless it names a
//!    handshake-era version inside a session;
//! 4. a message whose `MCP-Protocol-Version` header names a version that is not a handshake-era
//!    one is modern (an unknown one is then refused with the modern
//!    `UnsupportedProtocolVersionError`);
//! 5. everything else (session traffic, notifications and responses of handshake-era clients)
//!    belongs to the session era.
//!
//! Transports without headers (stdio, the link) give no version header: there a message is
//! modern exactly when it is `server/discover` or its `_meta` names a protocol version — except,
//! on stdio once `initialize` was served ([`Carrier::in_session`]), a handshake-era one.

use serde_json::{Value, json};

use super::{Head, Refusal};
use crate::{
    jsonrpc::code::METHOD_NOT_FOUND,
    mcp::{SESSION_VERSIONS, is_modern, is_session_era, negotiate_session_version},
};

/// What a transport says about a message beside its body.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Carrier<'a> {
    /// The `MCP-Protocol-Version` header (Streamable HTTP), when present; a value that is not
    /// text is given as `""` (it names no version).
    pub version_header: Option<&'a str>,
    /// The message names an MCP session (an `MCP-Session-Id` header).
    pub in_session: bool,
}

/// Which era serves a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// MCP 2026-07-28: per-request `_meta`, no session.
    Modern,
    /// The handshake era (2025-11-25, 2025-06-18, 2025-03-26): `initialize` and an MCP session.
    Session {
        /// The version the message names: for `initialize`, the version its session will run
        /// ([`negotiate_session_version`] of what it asks); else the `MCP-Protocol-Version`
        /// header when it is a handshake-era version; else `None`.
        version: Option<&'static str>,
    },
}

impl Head {
    /// The era of this message carried as `carrier` says (module docs).
    pub fn era(&self, carrier: Carrier<'_>) -> Era {
        let header = carrier
            .version_header
            .and_then(|h| SESSION_VERSIONS.into_iter().find(|v| *v == h));
        match self.method() {
            Some("initialize") => {
                return if self.names_modern(carrier) {
                    Era::Modern
                } else {
                    Era::Session {
                        version: Some(negotiate_session_version(
                            self.asked_version().unwrap_or(""),
                        )),
                    }
                };
            }
            Some("server/discover") => return Era::Modern,
            _ => {}
        }
        if let Some(v) = self.meta().protocol_version() {
            let legacy = v.as_str().is_some_and(is_session_era);
            if !legacy || !carrier.in_session {
                return Era::Modern;
            }
        }
        match carrier.version_header {
            Some(v) if is_session_era(v) => Era::Session { version: header },
            Some(_) => Era::Modern,
            None => Era::Session { version: None },
        }
    }

    /// Whether this message names a 2026-07-28 version ([`crate::mcp::MODERN_VERSIONS`]) in its
    /// `MCP-Protocol-Version` header or its `_meta` protocol version.
    pub fn names_modern(&self, carrier: Carrier<'_>) -> bool {
        carrier.version_header.is_some_and(is_modern)
            || self
                .meta()
                .protocol_version()
                .and_then(Value::as_str)
                .is_some_and(is_modern)
    }

    /// Whether this is a request of the 2026-07-28 era other than `server/discover` on a
    /// transport without headers (one whose `_meta` names a protocol version): after one, the
    /// client speaks that era. `server/discover` alone says nothing: a client may probe with it
    /// and then `initialize` on the same connection.
    pub fn commits_to_modern(&self) -> bool {
        !self.is("server/discover") && self.meta().protocol_version().is_some()
    }
}

/// Methods of the handshake era that MCP 2026-07-28 removed (changelog items 2 and 5,
/// SEP-2575), with what a client does instead.
pub const REMOVED_METHODS: [(&str, &str); 3] = [
    (
        "initialize",
        "use server/discover, or send initialize without the 2026-07-28 header for the 2025-11-25 era",
    ),
    (
        "ping",
        "any request shows the server is reachable (server/discover is the cheapest)",
    ),
    (
        "logging/setLevel",
        "set _meta[\"io.modelcontextprotocol/logLevel\"] on each request instead",
    ),
];

/// What a client does instead of `method`, when MCP 2026-07-28 removed it ([`REMOVED_METHODS`]).
pub fn removed(method: &str) -> Option<&'static str> {
    REMOVED_METHODS
        .iter()
        .find(|(m, _)| *m == method)
        .map(|(_, instead)| *instead)
}

/// The refusal of a 2026-07-28 request for a method that era does not have: JSON-RPC `-32601`
/// (Method not found), naming what to do instead (MCP 2026-07-28 Basic › Transports ›
/// Streamable HTTP § Protocol Version Header: "If the server does not implement the requested
/// RPC method, it MUST respond with `404 Not Found` and a JSON-RPC error with code `-32601`";
/// the HTTP status is the transport's). `None` for any other method.
pub fn removed_method(method: &str) -> Option<Refusal> {
    let instead = removed(method)?;
    Some(Refusal::new(
        METHOD_NOT_FOUND,
        format!("{method} is not part of MCP 2026-07-28; {instead}"),
    ))
}

/// The result that ends a `subscriptions/listen` request `id` gracefully (MCP 2026-07-28 Basic
/// › Patterns › Subscriptions § Graceful Closure): complete, naming the subscription.
pub fn subscription_closed(id: &Value) -> Value {
    json!({"resultType": "complete", "_meta": {crate::mcp::META_SUBSCRIPTION_ID: id}})
}
