//! The relay's OAuth URLs: its issuer and endpoints, the resource identifier of every MCP URL,
//! where their protected-resource metadata lives, and the `WWW-Authenticate` challenge that
//! points a client there.
//!
//! Everything is derived from `--public-url` (`RelayConfig::public_url`), so the URLs are right
//! behind a tunnel or reverse proxy, where the listener's own address is not what clients see.

use crate::config::RelayConfig;

/// The scope every grant carries unless the client asked for less: use of the MCP endpoints with
/// the account's role.
pub const SCOPE_MCP: &str = "mcp";
/// The scope a client may add to ask for refresh tokens (granted, never required; the MCP
/// authorization spec §Refresh Tokens).
pub const SCOPE_OFFLINE: &str = "offline_access";
/// Path of the authorization endpoint.
pub const AUTHORIZE_PATH: &str = "/oauth/authorize";
/// Path of the token endpoint.
pub const TOKEN_PATH: &str = "/oauth/token";
/// Path of the registration endpoint (RFC 7591).
pub const REGISTER_PATH: &str = "/oauth/register";
/// Path of the revocation endpoint (RFC 7009).
pub const REVOKE_PATH: &str = "/oauth/revoke";
/// Path of the (empty) JWK Set named by the OpenID discovery document.
pub const JWKS_PATH: &str = "/oauth/jwks";
/// RFC 9728 §3's well-known suffix.
pub const PRM_WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// What a resource indicator (RFC 8707) names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One MCP URL: `/b/{bridge}/mcp` (`server` none) or `/b/{bridge}/s/{server}/mcp`.
    Endpoint {
        /// The bridge.
        bridge: String,
        /// The upstream server, or none for the built-in runtime.
        server: Option<String>,
    },
    /// The relay itself (its issuer URL): every MCP URL of the signing-in account's bridge.
    Relay,
}

/// The issuer identifier (RFC 8414 §2): the public URL without a trailing slash.
pub fn issuer(config: &RelayConfig) -> String {
    config.public_url.as_str().trim_end_matches('/').to_owned()
}

/// An absolute URL of the relay for `path` (which starts with `/`).
pub fn url(config: &RelayConfig, path: &str) -> String {
    format!("{}{path}", issuer(config))
}

/// The MCP path of `bridge` and `server` (none = the built-in runtime).
pub fn mcp_path(bridge: &str, server: Option<&str>) -> String {
    match server {
        None => format!("/b/{bridge}/mcp"),
        Some(s) => format!("/b/{bridge}/s/{s}/mcp"),
    }
}

/// The canonical resource identifier of a target (MCP authorization spec §Canonical Server
/// URI: no trailing slash, no fragment).
pub fn resource(config: &RelayConfig, target: &Target) -> String {
    match target {
        Target::Relay => issuer(config),
        Target::Endpoint { bridge, server } => url(config, &mcp_path(bridge, server.as_deref())),
    }
}

/// The protected-resource metadata URL of `mcp_path` (RFC 9728 §3.1: the well-known suffix
/// inserted between the host and the path).
pub fn metadata_url(config: &RelayConfig, mcp_path: &str) -> String {
    let base = config.public_url.origin().ascii_serialization();
    let prefix = config.public_url.path().trim_end_matches('/');
    format!("{base}{PRM_WELL_KNOWN}{prefix}{mcp_path}")
}

/// Reads a resource indicator: an absolute URL of this relay (scheme and host compared without
/// case, a trailing slash ignored, no fragment) naming one MCP URL or the relay itself.
pub fn parse(config: &RelayConfig, value: &str) -> Option<Target> {
    let u = url::Url::parse(value).ok()?;
    if u.fragment().is_some() || u.query().is_some() {
        return None;
    }
    let ours = &config.public_url;
    if u.origin() != ours.origin() {
        return None;
    }
    let prefix = ours.path().trim_end_matches('/');
    let path = u.path().strip_prefix(prefix)?;
    let path = path.trim_end_matches('/');
    if path.is_empty() {
        return Some(Target::Relay);
    }
    let parts: Vec<&str> = path.split('/').collect();
    match parts.as_slice() {
        ["", "b", bridge, "mcp"] if !bridge.is_empty() => Some(Target::Endpoint {
            bridge: (*bridge).to_owned(),
            server: None,
        }),
        ["", "b", bridge, "s", server, "mcp"] if !bridge.is_empty() && !server.is_empty() => {
            Some(Target::Endpoint {
                bridge: (*bridge).to_owned(),
                server: Some((*server).to_owned()),
            })
        }
        _ => None,
    }
}

/// The `WWW-Authenticate` value of a 401 from MCP URL `mcp_path` (RFC 6750 §3, RFC 9728 §5.1,
/// MCP authorization spec §Scope Selection Strategy): where the metadata is, the scope to ask
/// for, and `invalid_token` with a description when a token was presented (a DPoP challenge
/// follows for clients of RFC 9449 §7.1).
pub fn challenge(config: &RelayConfig, mcp_path: &str, invalid: Option<&str>) -> String {
    let mut v = format!(
        "Bearer resource_metadata=\"{}\", scope=\"{SCOPE_MCP}\"",
        metadata_url(config, mcp_path)
    );
    if let Some(why) = invalid {
        let why: String = why.chars().filter(|c| *c != '"' && *c != '\\').collect();
        v.push_str(&format!(
            ", error=\"invalid_token\", error_description=\"{why}\""
        ));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(public: &str) -> RelayConfig {
        RelayConfig {
            public_url: public.parse().unwrap(),
            ..RelayConfig::for_tests()
        }
    }

    #[test]
    fn resources_and_metadata_urls_follow_the_public_url() {
        let c = config("https://relay.example.com");
        let t = Target::Endpoint {
            bridge: "laptop".into(),
            server: None,
        };
        assert_eq!(resource(&c, &t), "https://relay.example.com/b/laptop/mcp");
        assert_eq!(
            metadata_url(&c, "/b/laptop/mcp"),
            "https://relay.example.com/.well-known/oauth-protected-resource/b/laptop/mcp"
        );
        assert_eq!(issuer(&c), "https://relay.example.com");
        let p = config("https://example.com/relay/");
        assert_eq!(
            metadata_url(&p, "/b/x/mcp"),
            "https://example.com/.well-known/oauth-protected-resource/relay/b/x/mcp"
        );
        assert_eq!(
            parse(&p, "https://EXAMPLE.com/relay/b/x/s/db/mcp/"),
            Some(Target::Endpoint {
                bridge: "x".into(),
                server: Some("db".into())
            })
        );
    }

    #[test]
    fn foreign_or_malformed_resources_are_not_ours() {
        let c = config("https://relay.example.com");
        assert_eq!(parse(&c, "https://relay.example.com"), Some(Target::Relay));
        assert_eq!(parse(&c, "https://relay.example.com/"), Some(Target::Relay));
        for bad in [
            "https://other.example.com/b/x/mcp",
            "http://relay.example.com/b/x/mcp",
            "https://relay.example.com:444/b/x/mcp",
            "https://relay.example.com/b/x/mcp#f",
            "https://relay.example.com/b/x/mcp?q=1",
            "https://relay.example.com/b//mcp",
            "https://relay.example.com/b/x",
            "relay.example.com/b/x/mcp",
        ] {
            assert_eq!(parse(&c, bad), None, "{bad}");
        }
    }

    #[test]
    fn the_challenge_names_metadata_scope_and_the_error() {
        let c = config("https://r.example");
        let v = challenge(&c, "/b/x/mcp", Some("expired \"now\""));
        assert!(v.starts_with("Bearer resource_metadata=\"https://r.example/.well-known/oauth-protected-resource/b/x/mcp\", scope=\"mcp\""));
        assert!(v.contains("error=\"invalid_token\", error_description=\"expired now\""));
        assert!(!challenge(&c, "/b/x/mcp", None).contains("error="));
    }
}
