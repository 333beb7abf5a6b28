//! Relay configuration, validated once before serving: what the relay listens on and calls
//! itself, how clients authenticate, its timing, its OAuth settings and its connection bounds.
//!
//! A leaf: the configuration names nothing else of the relay, so every module may read it.

use std::{net::SocketAddr, time::Duration};

use protocol::limits;

/// How MCP clients authenticate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMode {
    /// OAuth 2.1 (the relay is the authorization server, [`crate::oauth`]), and static bearer
    /// tokens beside it.
    OAuth,
    /// Static bearer tokens (`relay token create`) only; the OAuth endpoints are off.
    Token,
    /// No authentication: every caller is the bridge's owner. Only on a loopback listener.
    None,
}

/// The relay's timing: the daemon link's deadlines and grace, SSE keepalives and the offline
/// wait; production uses the contract (DESIGN §7), tests may shorten it. (The daemon's own link
/// timing is `daemon::link::LinkTiming`.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelayTiming {
    /// How long detached sessions and calls wait for the same daemon instance.
    pub reconnect_grace: Duration,
    /// Time a daemon has to send `hello`.
    pub hello_deadline: Duration,
    /// Time from `hello_ack` to `ready`.
    pub readiness_deadline: Duration,
    /// Silence after which a daemon socket is dead.
    pub liveness_timeout: Duration,
    /// Interval of SSE keepalive comments.
    pub sse_keepalive: Duration,
    /// How long a call waits for an offline daemon before failing.
    pub offline_wait: Duration,
}

impl Default for RelayTiming {
    fn default() -> Self {
        Self {
            reconnect_grace: limits::RECONNECT_GRACE,
            hello_deadline: limits::HELLO_DEADLINE,
            readiness_deadline: limits::READINESS_DEADLINE,
            liveness_timeout: crate::limits::RELAY_LIVENESS_TIMEOUT,
            sse_keepalive: crate::limits::SSE_KEEPALIVE,
            offline_wait: Duration::from_secs(2),
        }
    }
}

/// OAuth settings of one relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OAuthSettings {
    /// Lifetime of access tokens ([`crate::limits::ACCESS_TOKEN_LIFETIME`]; shorter in tests).
    pub access_token_lifetime: Duration,
    /// How long a rotated refresh token may be presented again ([`crate::limits::REFRESH_REUSE_GRACE`];
    /// shorter in tests).
    pub refresh_reuse_grace: Duration,
    /// Test switch: fetch client ID metadata documents and JWK Sets over plain `http` and from
    /// loopback and private addresses. Never on in production: it opens the SSRF protection.
    pub insecure_client_documents: bool,
}

impl Default for OAuthSettings {
    fn default() -> Self {
        Self {
            access_token_lifetime: crate::limits::ACCESS_TOKEN_LIFETIME,
            refresh_reuse_grace: crate::limits::REFRESH_REUSE_GRACE,
            insecure_client_documents: false,
        }
    }
}

/// Bounds on client connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections open at once ([`protocol::limits::RELAY_CONNECTIONS_MAX`] by default).
    pub total: usize,
    /// Connections open at once from one non-loopback address
    /// ([`protocol::limits::RELAY_CONNECTIONS_PER_ADDRESS`] by default).
    pub per_address: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            total: limits::RELAY_CONNECTIONS_MAX,
            per_address: limits::RELAY_CONNECTIONS_PER_ADDRESS,
        }
    }
}

/// Everything the relay needs to serve.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// Socket address to listen on.
    pub listen: SocketAddr,
    /// The public base URL clients and daemons use (scheme + host + port); its origin is allowed
    /// in `Origin` headers and signed into daemon hellos.
    pub public_url: url::Url,
    /// Client authentication.
    pub auth: AuthMode,
    /// Extra origins allowed to call the MCP endpoints from a browser.
    pub allowed_origins: Vec<String>,
    /// In-flight relayed requests per bridge.
    pub max_inflight_per_bridge: usize,
    /// Link timing.
    pub timing: RelayTiming,
    /// OAuth settings (used in [`AuthMode::OAuth`]).
    pub oauth: OAuthSettings,
    /// Bounds on client connections.
    pub connections: ConnectionLimits,
    /// A separate listener for `GET /metrics` (none: metrics on the main listener, answered only
    /// to loopback peers that name a loopback host).
    pub metrics_listen: Option<SocketAddr>,
    /// Peers whose `X-Forwarded-For` is believed (`--trusted-proxy`): a reverse proxy that
    /// appends the client's address. Empty: the TCP peer is the client, whatever it claims.
    pub trusted_proxies: Vec<TrustedProxy>,
    /// Where MCP request bodies larger than
    /// [`REQUEST_BODY_SPILL_THRESHOLD`](crate::limits::REQUEST_BODY_SPILL_THRESHOLD) are
    /// written as they arrive, as anonymous files (the `spill` module); created owner-only (0700)
    /// when missing. The CLI names `spill/` beside the store (`STATE_DIR/relay/spill`,
    /// `STATE_DIR/up/spill`). `None` (the default of [`RelayConfig::new`]): bodies are held in
    /// memory whole.
    pub spill_dir: Option<std::path::PathBuf>,
}

/// A `--trusted-proxy`: an address or a network (`ADDR/PREFIX`) whose peers are reverse proxies
/// that append the client's address to `X-Forwarded-For`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrustedProxy {
    network: std::net::IpAddr,
    prefix: u8,
}

impl TrustedProxy {
    /// Whether `peer` is in this network (an IPv4-mapped IPv6 peer counts as its IPv4 address).
    pub fn contains(&self, peer: std::net::IpAddr) -> bool {
        use std::net::IpAddr;
        let peer = match peer {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(peer, IpAddr::V4),
            v4 => v4,
        };
        match (self.network, peer) {
            (IpAddr::V4(n), IpAddr::V4(p)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(n) & mask == u32::from(p) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(p)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(n) & mask == u128::from(p) & mask
            }
            _ => false,
        }
    }
}

impl std::str::FromStr for TrustedProxy {
    type Err = String;

    /// `ADDR` or `ADDR/PREFIX` (IPv4 prefix ≤ 32, IPv6 ≤ 128).
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "--trusted-proxy {s:?}: want an address or ADDR/PREFIX, e.g. 127.0.0.1 or 10.0.0.0/8"
            )
        };
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p.parse::<u8>().map_err(|_| bad())?)),
            None => (s, None),
        };
        let network: std::net::IpAddr = addr.parse().map_err(|_| bad())?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = prefix.unwrap_or(max);
        if prefix > max {
            return Err(bad());
        }
        Ok(Self { network, prefix })
    }
}

/// Checks an `--allowed-origin`: an origin as browsers send it (`scheme://host[:port]`, http or
/// https, no path, query or fragment, in normal form); never `*` or `null`.
///
/// # Errors
/// What is wrong with it.
pub fn check_origin(origin: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("--allowed-origin {origin:?}: {why}"));
    if origin == "*" || origin.eq_ignore_ascii_case("null") {
        return bad("a wildcard or null origin would admit any page; name each origin");
    }
    let Ok(u) = url::Url::parse(origin) else {
        return bad("not an origin (want scheme://host[:port], e.g. https://app.example.com)");
    };
    if !matches!(u.scheme(), "http" | "https") || u.host().is_none() {
        return bad("an origin is http(s)://host[:port]");
    }
    if u.origin().ascii_serialization() != origin {
        return bad(&format!(
            "an origin has no path, query or trailing slash and is lower case: {}",
            u.origin().ascii_serialization()
        ));
    }
    Ok(())
}

/// The listener is loopback-only: `127.0.0.0/8` or `::1`.
pub fn is_loopback(addr: &SocketAddr) -> bool {
    addr.ip().is_loopback()
}

impl RelayConfig {
    /// A configuration listening on `listen` with public URL `public_url` and the defaults:
    /// OAuth with static tokens, no extra origins, [`limits::RELAYED_REQUESTS_PER_BRIDGE`], the
    /// contract's timing.
    pub fn new(listen: SocketAddr, public_url: url::Url) -> Self {
        Self {
            listen,
            public_url,
            auth: AuthMode::OAuth,
            allowed_origins: Vec::new(),
            max_inflight_per_bridge: limits::RELAYED_REQUESTS_PER_BRIDGE,
            timing: RelayTiming::default(),
            oauth: Default::default(),
            connections: Default::default(),
            metrics_listen: None,
            trusted_proxies: Vec::new(),
            spill_dir: None,
        }
    }

    /// A loopback configuration for unit tests.
    #[cfg(test)]
    pub(crate) fn for_tests() -> Self {
        Self::new(
            SocketAddr::from(([127, 0, 0, 1], 8750)),
            url::Url::parse("http://127.0.0.1:8750").expect("a valid URL"),
        )
    }

    /// Checks the configuration.
    ///
    /// # Errors
    /// `--auth none` on a listener that is not loopback-only; a public URL that is not http(s).
    pub fn validate(&self) -> Result<(), String> {
        if self.auth == AuthMode::None && !is_loopback(&self.listen) {
            return Err(format!(
                "--auth none is refused on {}: without authentication the relay may only listen on a loopback address (127.0.0.1 or ::1)",
                self.listen
            ));
        }
        if !matches!(self.public_url.scheme(), "http" | "https") || self.public_url.host().is_none()
        {
            return Err(format!(
                "--public-url {} must be an http(s) URL with a host",
                self.public_url
            ));
        }
        let public_is_loopback = match self.public_url.host() {
            Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            None => false,
        };
        if self.auth == AuthMode::None && !public_is_loopback {
            return Err(format!(
                "--auth none is refused with --public-url {}: a tunnel or proxy would publish the machine without authentication (use --auth oauth or --auth token)",
                self.public_url
            ));
        }
        for origin in &self.allowed_origins {
            check_origin(origin)?;
        }
        Ok(())
    }

    /// The public origin (`scheme://host[:port]`).
    pub fn origin(&self) -> String {
        self.public_url.origin().ascii_serialization()
    }
}
