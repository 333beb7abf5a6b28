//! Relay configuration, validated once before serving.

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
            liveness_timeout: limits::RELAY_LIVENESS_TIMEOUT,
            sse_keepalive: limits::SSE_KEEPALIVE,
            offline_wait: Duration::from_secs(2),
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
    pub oauth: crate::oauth::OAuthSettings,
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
        Ok(())
    }

    /// The public origin (`scheme://host[:port]`).
    pub fn origin(&self) -> String {
        self.public_url.origin().ascii_serialization()
    }
}
