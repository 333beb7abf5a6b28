//! Which `Host` and `Origin` values the relay admits: the checks against DNS rebinding and
//! cross-site requests (MCP 2025-11-25 Transports › Security Warning) that the MCP endpoints,
//! the OAuth endpoints and the daemon socket route share.
//!
//! Rules: on a loopback listener the `Host` must be a loopback name or the public URL's host
//! (anything goes elsewhere: a proxy in front decides); an origin is admitted when it is the
//! relay's own (on a loopback listener, a loopback name with the listener's port too), a hosted
//! assistant's ([`HOST_ORIGINS`]) or an `--allowed-origin`, never any origin. Pure functions of
//! the configuration: this module imports nothing else of the relay.

use axum::http::{HeaderMap, header};

use crate::config::{RelayConfig, is_loopback};

/// Whether the `Host` is acceptable: on a loopback listener only loopback names and the public
/// URL's host (MCP 2025-11-25 Transports › Security Warning: DNS rebinding); anything elsewhere.
pub(crate) fn host_allowed(config: &RelayConfig, headers: &HeaderMap) -> bool {
    if !is_loopback(&config.listen) {
        return true;
    }
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let name = match host.rsplit_once(':') {
        Some((n, p)) if p.chars().all(|c| c.is_ascii_digit()) => n,
        _ => host,
    };
    let public = config.public_url.host_str().unwrap_or("");
    matches!(name, "localhost" | "127.0.0.1" | "[::1]") || name.eq_ignore_ascii_case(public)
}

/// Browser origins of the hosted assistants whose web apps call MCP servers and the OAuth
/// endpoints directly (DESIGN §6: browser-based hosts).
pub(crate) const HOST_ORIGINS: [&str; 3] = [
    "https://chatgpt.com",
    "https://claude.ai",
    "https://claude.com",
];

/// Whether `origin` is the relay's own: its public origin, or on a loopback listener a loopback
/// name with the listener's port.
pub(crate) fn own_origin(config: &RelayConfig, origin: &str) -> bool {
    if origin.eq_ignore_ascii_case(&config.origin()) {
        return true;
    }
    if is_loopback(&config.listen)
        && let Ok(u) = url::Url::parse(origin)
    {
        let port = config.listen.port();
        return matches!(u.host_str(), Some("localhost" | "127.0.0.1" | "[::1]"))
            && u.port_or_known_default() == Some(port);
    }
    false
}

/// Whether a request with `Origin: origin` may reach the MCP and OAuth endpoints: the relay's
/// own origin, the hosted assistants' ([`HOST_ORIGINS`]) and `--allowed-origin`s; never any
/// origin (MCP 2025-11-25 Transports › Security Warning).
pub(crate) fn origin_allowed(config: &RelayConfig, origin: &str) -> bool {
    own_origin(config, origin)
        || HOST_ORIGINS.iter().any(|o| o.eq_ignore_ascii_case(origin))
        || config.allowed_origins.iter().any(|o| o == origin)
}
