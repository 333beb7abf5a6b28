//! Fetching what a client publishes: client ID metadata documents
//! (draft-ietf-oauth-client-id-metadata-document §4) and JWK Sets named by `jwks_uri`.
//!
//! The relay fetches a URL the client chose, so every fetch is guarded against server-side
//! request forgery (the draft's §8.1, MCP authorization security considerations): `https`
//! only; the host's addresses are resolved by the relay and any loopback, private, link-local,
//! shared or otherwise non-public address refuses the fetch (so a DNS name cannot point the relay
//! at itself or its network), every IPv6 spelling of an IPv4 address judged by the IPv4 address
//! it reaches ([`is_public`]); a failed connection reads the same to the caller whatever the
//! cause (the log keeps the detail); redirects are not followed; the body is capped
//! ([`CLIENT_METADATA_DOCUMENT_MAX_BYTES`]) and the whole fetch timed out
//! ([`CLIENT_METADATA_FETCH_TIMEOUT`]); no cookies, no proxy. A document is cached as its
//! `Cache-Control: max-age` says (no caching for `no-store`/`no-cache`, one hour without a
//! header), never longer than [`CLIENT_METADATA_CACHE_MAX`].
//!
//! Tests serve documents on loopback over plain HTTP: [`Fetcher::new`] with `insecure` allows
//! both. It is off unless a relay is started with the hidden, documented test switch.

use std::{
    collections::HashMap,
    net::{IpAddr, SocketAddr},
    sync::Arc,
    time::Duration,
};

use lock::Lock;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use serde_json::Value;
use tokio::time::Instant;

use crate::limits::{
    CLIENT_METADATA_CACHE_ENTRIES, CLIENT_METADATA_CACHE_MAX, CLIENT_METADATA_DOCUMENT_MAX_BYTES,
    CLIENT_METADATA_FETCH_TIMEOUT, OAUTH_PARAM_MAX_BYTES,
};

/// Why a fetch failed; the message names the URL's problem for the client's developer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FetchError(pub String);

/// Whether `ip` is an address of the public internet, classified by what it reaches.
///
/// IPv4: not loopback, private (RFC 1918), link-local, shared (RFC 6598), IETF protocol
/// assignments (192.0.0.0/24), the 6to4 relay anycast (192.88.99.0/24), documentation,
/// benchmarking, multicast, broadcast, reserved or unspecified.
///
/// IPv6: only global unicast (2000::/3) can be public, minus the IETF protocol assignments
/// (2001::/23: Teredo, benchmarking, ORCHID), documentation (2001:db8::/32, 3fff::/20) and 6to4
/// (2002::/16, judged by the IPv4 address it embeds). Every spelling of an IPv4 address is judged
/// by that IPv4 address: IPv4-mapped (`::ffff:a.b.c.d`) and NAT64 (64:ff9b::/96, RFC 6052);
/// IPv4-compatible (`::a.b.c.d`, deprecated), the local-use NAT64 prefix (64:ff9b:1::/48) and
/// everything outside 2000::/3 (loopback, unspecified, ULA, link-local, site-local, multicast,
/// discard-only, SRv6) are never public.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_broadcast()
                || v4.is_documentation()
                || v4.is_unspecified()
                || v4.is_multicast()
                || o[0] == 0
                || (o[0] == 100 && (o[1] & 0xC0) == 64)
                || (o[0] == 192 && o[1] == 0 && o[2] == 0)
                || (o[0] == 192 && o[1] == 88 && o[2] == 99)
                || (o[0] == 198 && (o[1] & 0xFE) == 18)
                || o[0] >= 240)
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            let embedded = |hi: u16, lo: u16| {
                let [a, b] = hi.to_be_bytes();
                let [c, d] = lo.to_be_bytes();
                IpAddr::V4(std::net::Ipv4Addr::new(a, b, c, d))
            };
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            if s[..6] == [0x64, 0xFF9B, 0, 0, 0, 0] {
                return is_public(embedded(s[6], s[7]));
            }
            if s[0] == 0x2002 {
                return is_public(embedded(s[1], s[2]));
            }
            // IETF protocol assignments (2001::/23) and documentation (2001:db8::/32).
            let ietf = s[0] == 0x2001 && (s[1] < 0x0200 || s[1] == 0x0DB8);
            let documentation = s[0] == 0x3FFF && s[1] < 0x1000;
            (s[0] & 0xE000) == 0x2000 && !ietf && !documentation
        }
    }
}

/// Resolves names for the fetcher and drops every address that is not public (unless
/// `insecure`): a name with no public address fails to resolve.
#[derive(Debug, Clone, Copy)]
struct PublicOnly {
    insecure: bool,
}

impl Resolve for PublicOnly {
    fn resolve(&self, name: Name) -> Resolving {
        let insecure = self.insecure;
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .filter(|a| insecure || is_public(a.ip()))
                .collect();
            if addrs.is_empty() {
                return Err(format!(
                    "{host} resolves to no public address (loopback, private and link-local addresses are refused)"
                )
                .into());
            }
            let addrs: Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

/// A fetched, parsed JSON document and until when it may be used.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The JSON body.
    pub json: Value,
    /// How long it may be cached.
    pub max_age: Duration,
}

/// The relay's fetcher of client documents, with its cache of client ID metadata documents.
#[derive(Debug)]
pub struct Fetcher {
    http: Option<reqwest::Client>,
    insecure: bool,
    cache: Lock<HashMap<String, (Arc<Value>, Instant)>>,
}

impl Fetcher {
    /// A fetcher. With `insecure` (tests only), `http` URLs and non-public addresses are allowed.
    pub fn new(insecure: bool) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .dns_resolver(Arc::new(PublicOnly { insecure }))
            .redirect(reqwest::redirect::Policy::none())
            .timeout(CLIENT_METADATA_FETCH_TIMEOUT)
            .connect_timeout(CLIENT_METADATA_FETCH_TIMEOUT)
            .no_proxy()
            .https_only(!insecure)
            .user_agent(concat!("machine-mcp-relay/", env!("CARGO_PKG_VERSION")))
            .build();
        let http = match http {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::error!(error = %e, "cannot build the HTTP client for client metadata documents; they will be refused");
                None
            }
        };
        Self {
            http,
            insecure,
            cache: Lock::new(HashMap::new()),
        }
    }

    /// Whether `client_id` has the shape of a client ID metadata document URL: `https` (or, when
    /// insecure, `http`) with a path other than `/`, no fragment, no credentials, at most
    /// [`OAUTH_PARAM_MAX_BYTES`] long, and already in normal form (draft §3).
    pub fn is_document_url(&self, client_id: &str) -> bool {
        if client_id.len() > OAUTH_PARAM_MAX_BYTES {
            return false;
        }
        let Ok(u) = url::Url::parse(client_id) else {
            return false;
        };
        let scheme_ok = u.scheme() == "https" || (self.insecure && u.scheme() == "http");
        scheme_ok
            && u.host().is_some()
            && u.path() != "/"
            && u.fragment().is_none()
            && u.username().is_empty()
            && u.password().is_none()
            && u.as_str() == client_id
    }

    /// The metadata document at `url`: from the cache while it is fresh, else fetched, checked to
    /// be an object whose `client_id` is exactly `url`, and cached.
    ///
    /// # Errors
    /// [`FetchError`] when the URL is refused, the fetch fails or times out, the answer is not
    /// 200, too large, not a JSON object, or names another `client_id`.
    pub async fn document(&self, url: &str) -> Result<Arc<Value>, FetchError> {
        let now = Instant::now();
        if let Some((doc, until)) = self.lock().get(url)
            && *until > now
        {
            return Ok(doc.clone());
        }
        let fetched = self.fetch(url, CLIENT_METADATA_DOCUMENT_MAX_BYTES).await?;
        if fetched.json.get("client_id").and_then(Value::as_str) != Some(url) {
            return Err(FetchError(format!(
                "the client ID metadata document at {url} must have \"client_id\": {url:?}"
            )));
        }
        let doc = Arc::new(fetched.json);
        if !fetched.max_age.is_zero() {
            let mut cache = self.lock();
            if cache.len() >= CLIENT_METADATA_CACHE_ENTRIES {
                cache.retain(|_, (_, until)| *until > now);
                if cache.len() >= CLIENT_METADATA_CACHE_ENTRIES
                    && let Some(k) = cache
                        .iter()
                        .min_by_key(|(_, (_, until))| *until)
                        .map(|(k, _)| k.clone())
                {
                    cache.remove(&k);
                }
            }
            cache.insert(url.to_owned(), (doc.clone(), now + fetched.max_age));
        }
        Ok(doc)
    }

    /// How long the cached document of `url` stays fresh (zero when it is not cached).
    pub fn fresh_for(&self, url: &str) -> Duration {
        let now = Instant::now();
        self.lock()
            .get(url)
            .map(|(_, until)| until.saturating_duration_since(now))
            .unwrap_or_default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Arc<Value>, Instant)>> {
        self.cache.lock()
    }

    /// Fetches `url` as JSON of at most `max_bytes`.
    ///
    /// # Errors
    /// As [`Fetcher::document`].
    pub async fn fetch(&self, url: &str, max_bytes: usize) -> Result<Fetched, FetchError> {
        let parsed =
            url::Url::parse(url).map_err(|e| FetchError(format!("{url:?} is not a URL: {e}")))?;
        if parsed.scheme() != "https" && !(self.insecure && parsed.scheme() == "http") {
            return Err(FetchError(format!("{url} is not an https URL")));
        }
        let literal = match parsed.host() {
            Some(url::Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
            _ => None,
        };
        if let Some(ip) = literal
            && !self.insecure
            && !is_public(ip)
        {
            return Err(FetchError(format!(
                "{url} names a non-public address; the relay does not fetch from loopback, private or link-local addresses"
            )));
        }
        let http = self
            .http
            .as_ref()
            .ok_or_else(|| FetchError("the relay cannot fetch client documents".into()))?;
        // The caller learns only that the fetch failed: connection detail (refused, reset,
        // unresolvable, which address) would make the relay a port scanner. The log keeps it.
        let fail = |e: reqwest::Error| {
            let mut detail = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                detail.push_str(&format!(": {s}"));
                src = s.source();
            }
            tracing::info!(url, %detail, "fetching a client document failed");
            FetchError(format!(
                "{url} could not be fetched: no public address answered over https"
            ))
        };
        let fetch = async {
            let mut resp = http
                .get(parsed.clone())
                .header(reqwest::header::ACCEPT, "application/json")
                .send()
                .await
                .map_err(fail)?;
            if resp.status() != reqwest::StatusCode::OK {
                return Err(FetchError(format!(
                    "{url} answered {} (redirects are not followed)",
                    resp.status()
                )));
            }
            if resp.content_length().is_some_and(|n| n > max_bytes as u64) {
                return Err(FetchError(format!(
                    "{url} is larger than {max_bytes} bytes"
                )));
            }
            let max_age = max_age(resp.headers());
            let mut body = Vec::new();
            while let Some(chunk) = resp.chunk().await.map_err(fail)? {
                body.extend_from_slice(&chunk);
                if body.len() > max_bytes {
                    return Err(FetchError(format!(
                        "{url} is larger than {max_bytes} bytes"
                    )));
                }
            }
            Ok((body, max_age))
        };
        let (body, max_age) = tokio::time::timeout(CLIENT_METADATA_FETCH_TIMEOUT, fetch)
            .await
            .map_err(|_| {
                FetchError(format!(
                    "{url} did not answer within {} s",
                    CLIENT_METADATA_FETCH_TIMEOUT.as_secs()
                ))
            })??;
        let json: Value = serde_json::from_slice(&body)
            .map_err(|e| FetchError(format!("{url} is not JSON: {e}")))?;
        if !json.is_object() {
            return Err(FetchError(format!("{url} is not a JSON object")));
        }
        Ok(Fetched { json, max_age })
    }
}

/// How long a response may be cached: `Cache-Control` `no-store`/`no-cache` → 0, `max-age=N`
/// → N s, none → one hour; never more than [`CLIENT_METADATA_CACHE_MAX`].
fn max_age(headers: &reqwest::header::HeaderMap) -> Duration {
    let mut age = Duration::from_secs(3600);
    for v in headers
        .get_all(reqwest::header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
    {
        for d in v.split(',').map(str::trim) {
            let d = d.to_ascii_lowercase();
            if d == "no-store" || d == "no-cache" {
                return Duration::ZERO;
            }
            if let Some(n) = d
                .strip_prefix("max-age=")
                .and_then(|n| n.trim_matches('"').parse::<u64>().ok())
            {
                age = Duration::from_secs(n);
            }
        }
    }
    age.min(CLIENT_METADATA_CACHE_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_addresses_are_public() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
            "198.18.0.1",
            "224.0.0.1",
        ] {
            assert!(!is_public(private.parse().unwrap()), "{private}");
        }
        for public in ["93.184.216.34", "8.8.8.8", "2606:4700::1111"] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
    }

    /// Regression: the IPv4-compatible, NAT64 and 6to4 spellings of private
    /// addresses were taken as public, and the NAT64 form of a public address as private; every
    /// IPv6 address is now classified by what it reaches.
    #[test]
    fn ipv6_forms_of_ipv4_addresses_are_classified_by_what_they_reach() {
        for private in [
            "::7f00:1",           // IPv4-compatible 127.0.0.1
            "::a00:1",            // IPv4-compatible 10.0.0.1
            "::808:808",          // IPv4-compatible: a deprecated form that reaches nothing
            "::ffff:7f00:1",      // IPv4-mapped 127.0.0.1
            "::ffff:a9fe:a9fe",   // IPv4-mapped 169.254.169.254
            "64:ff9b::7f00:1",    // NAT64 of 127.0.0.1
            "64:ff9b::c0a8:101",  // NAT64 of 192.168.1.1
            "64:ff9b:1::808:808", // local-use NAT64 prefix
            "2002:7f00:1::1",     // 6to4 of 127.0.0.1
            "2002:a00:1::1",      // 6to4 of 10.0.0.1
            "2002:a9fe:a9fe::1",  // 6to4 of 169.254.169.254
            "2001::1",            // Teredo
            "2001:2::1",          // benchmarking
            "2001:10::1",         // ORCHID
            "3fff::1",            // documentation (RFC 9637)
            "fec0::1",            // site-local
            "100::1",             // discard-only
            "5f00::1",            // SRv6 SIDs
            "192.88.99.1",        // 6to4 relay anycast
        ] {
            assert!(!is_public(private.parse().unwrap()), "{private}");
        }
        for public in [
            "::ffff:808:808",   // IPv4-mapped 8.8.8.8
            "64:ff9b::808:808", // NAT64 of 8.8.8.8 (DNS64 on an IPv6-only host)
            "2002:808:808::1",  // 6to4 of 8.8.8.8
            "2a00:1450:4001::1",
        ] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
    }

    /// Regression: a failed fetch showed the caller the raw connection error (a
    /// port scan through the relay); now every failure reads the same and the log says why.
    #[tokio::test]
    async fn a_failed_fetch_shows_the_caller_no_connection_detail() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let insecure = Fetcher::new(true);
        let refused = insecure
            .fetch(&format!("http://127.0.0.1:{port}/c.json"), 1024)
            .await
            .unwrap_err();
        let unresolved = insecure
            .fetch("http://name.invalid/c.json", 1024)
            .await
            .unwrap_err();
        for e in [&refused, &unresolved] {
            let lower = e.0.to_ascii_lowercase();
            for detail in ["refused", "os error", "dns", "connect", "resolve", "tcp"] {
                assert!(!lower.contains(detail), "{detail} in {e}");
            }
            assert!(e.0.contains("could not be fetched"), "{e}");
        }
    }

    #[test]
    fn document_urls_need_https_a_path_and_normal_form() {
        let f = Fetcher::new(false);
        assert!(f.is_document_url("https://app.example/oauth/client.json"));
        for bad in [
            "http://app.example/client.json",
            "https://app.example/",
            "https://app.example",
            "https://app.example/c.json#x",
            "https://user@app.example/c.json",
            "https://APP.example/c.json",
            "https://app.example/a/../c.json",
            "mbc_1234",
        ] {
            assert!(!f.is_document_url(bad), "{bad}");
        }
        assert!(Fetcher::new(true).is_document_url("http://127.0.0.1:9/c.json"));
    }

    #[tokio::test]
    async fn loopback_and_private_documents_are_refused_before_any_connection() {
        let f = Fetcher::new(false);
        for url in [
            "https://127.0.0.1/client.json",
            "https://[::1]/client.json",
            "https://169.254.169.254/latest/meta-data",
            "https://localhost/client.json",
        ] {
            let e = f.document(url).await.unwrap_err();
            assert!(
                e.0.contains("non-public") || e.0.contains("no public address"),
                "{url}: {e}"
            );
        }
    }

    #[test]
    fn cache_lifetime_follows_cache_control_within_the_cap() {
        let mut h = reqwest::header::HeaderMap::new();
        assert_eq!(max_age(&h), Duration::from_secs(3600));
        h.insert("cache-control", "public, max-age=60".parse().unwrap());
        assert_eq!(max_age(&h), Duration::from_secs(60));
        h.insert("cache-control", "max-age=99999999".parse().unwrap());
        assert_eq!(max_age(&h), CLIENT_METADATA_CACHE_MAX);
        h.insert("cache-control", "no-store".parse().unwrap());
        assert_eq!(max_age(&h), Duration::ZERO);
    }
}
