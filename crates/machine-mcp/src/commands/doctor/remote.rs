//! The checks of the relay and the link: DNS, TCP, TLS, `/healthz`, the relay's clock, the
//! enrollment (a real handshake, or the running daemon's ready link) and a tool call through
//! the relay.

use std::{net::SocketAddr, time::Duration};

use daemon::{
    identity::DeviceKey,
    link::{self, HandshakeError},
};
use protocol::head::Head;
use serde_json::{Value, json};
use tokio::time::Instant;
use url::Host;

use super::{Check, Setup, Status};

/// Bound of the DNS lookup.
const DNS_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound of one TCP connect.
const TCP_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound of the TLS handshake.
const TLS_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound of the `/healthz` request.
const HTTP_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound of the link handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound of each request of the round trip (a tool call crosses the relay and the daemon).
const ROUND_TRIP_TIMEOUT: Duration = Duration::from_secs(30);
/// Clock skew (seconds) beyond which the clock check warns.
pub(super) const CLOCK_WARN_S: i64 = 5;
/// Clock skew (seconds) beyond which the clock check fails: OAuth tokens (their `exp`/`iat`)
/// and link handshakes compare the two clocks.
pub(super) const CLOCK_FAIL_S: i64 = 60;
/// The MCP protocol version the round trip's `initialize` asks for.
const MCP_VERSION: &str = "2025-11-25";

/// `e` with its sources, `: `-separated (reqwest's own message names only the URL).
pub(super) fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let s_text = s.to_string();
        if !out.contains(&s_text) {
            out.push_str(": ");
            out.push_str(&s_text);
        }
        cur = s.source();
    }
    out
}

/// `skew_s` (this clock minus the relay's, seconds) as ok, warn or fail.
pub(super) fn classify_skew(skew_s: i64) -> Status {
    match skew_s.unsigned_abs() {
        s if s > CLOCK_FAIL_S.unsigned_abs() => Status::Fail,
        s if s > CLOCK_WARN_S.unsigned_abs() => Status::Warn,
        _ => Status::Ok,
    }
}

/// The clock check's line for `skew_s`.
pub(super) fn clock_check(skew_s: i64) -> Check {
    const NAME: &str = "relay-clock";
    let how = match skew_s {
        0 => "this machine's clock agrees with the relay's (within 1 s)".to_owned(),
        s if s > 0 => format!("this machine's clock is {s} s ahead of the relay's"),
        s => format!("this machine's clock is {} s behind the relay's", -s),
    };
    let fix =
        "turn on time synchronisation (NTP) here and on the relay: `timedatectl set-ntp true`";
    match classify_skew(skew_s) {
        Status::Ok => Check::ok(NAME, how),
        Status::Warn => Check::warn(NAME, format!("{how} (more than {CLOCK_WARN_S} s)"), fix),
        _ => Check::fail(
            NAME,
            format!(
                "{how} (more than {CLOCK_FAIL_S} s): OAuth tokens and link handshakes may be refused"
            ),
            fix,
        ),
    }
}

/// The five relay checks: `relay-dns`, `relay-tcp`, `relay-tls`, `relay-healthz`, `relay-clock`.
pub(super) async fn relay(setup: &Setup) -> Vec<Check> {
    let Some(relay) = &setup.relay else {
        let why = "skipped: no relay known (not enrolled, no daemon running): pass --relay URL";
        return [
            "relay-dns",
            "relay-tcp",
            "relay-tls",
            "relay-healthz",
            "relay-clock",
        ]
        .into_iter()
        .map(|n| Check::skip(n, why))
        .collect();
    };
    let (dns, addrs) = dns_check(relay).await;
    let (tcp, addr) = match Check::gate("relay-tcp", &[&dns]) {
        Some(skip) => (skip, None),
        None => tcp_check(relay, &addrs).await,
    };
    let tls = match (Check::gate("relay-tls", &[&tcp]), addr) {
        (Some(skip), _) => skip,
        (None, None) => Check::skip("relay-tls", "skipped: relay-tcp failed"),
        (None, Some(a)) => tls_check(relay, a, &addrs).await,
    };
    let (healthz, date) = match Check::gate("relay-healthz", &[&tcp, &tls]) {
        Some(skip) => (skip, None),
        None => healthz_check(relay).await,
    };
    let clock = match Check::gate("relay-clock", &[&healthz]) {
        Some(skip) => skip,
        None => match date {
            Some(skew) => clock_check(skew),
            None => Check::warn(
                "relay-clock",
                "the relay's answer has no usable Date header",
                "a reverse proxy in front of the relay may strip it; compare the clocks by hand (`date -u` on both)",
            ),
        },
    };
    vec![dns, tcp, tls, healthz, clock]
}

fn host_name(relay: &url::Url) -> Option<String> {
    Some(match relay.host()? {
        Host::Domain(d) => d.to_owned(),
        Host::Ipv4(ip) => ip.to_string(),
        Host::Ipv6(ip) => ip.to_string(),
    })
}

async fn dns_check(relay: &url::Url) -> (Check, Vec<SocketAddr>) {
    const NAME: &str = "relay-dns";
    let port = relay.port_or_known_default().unwrap_or(443);
    match relay.host() {
        None => (
            Check::fail(
                NAME,
                format!("{relay} has no host"),
                "pass --relay https://HOST",
            ),
            Vec::new(),
        ),
        Some(Host::Ipv4(ip)) => (
            Check::ok(NAME, format!("{ip} is an address (no lookup)")),
            vec![SocketAddr::from((ip, port))],
        ),
        Some(Host::Ipv6(ip)) => (
            Check::ok(NAME, format!("{ip} is an address (no lookup)")),
            vec![SocketAddr::from((ip, port))],
        ),
        Some(Host::Domain(host)) => {
            let fix = format!(
                "check the host name in the relay URL and this machine's DNS (`getent hosts {host}`)"
            );
            match tokio::time::timeout(DNS_TIMEOUT, tokio::net::lookup_host((host, port))).await {
                Err(_) => (
                    Check::fail(
                        NAME,
                        format!(
                            "resolving {host} timed out after {} s",
                            DNS_TIMEOUT.as_secs()
                        ),
                        fix,
                    ),
                    Vec::new(),
                ),
                Ok(Err(e)) => (
                    Check::fail(NAME, format!("cannot resolve {host}: {e}"), fix),
                    Vec::new(),
                ),
                Ok(Ok(found)) => {
                    let addrs: Vec<SocketAddr> = found.collect();
                    if addrs.is_empty() {
                        return (
                            Check::fail(NAME, format!("{host} resolves to no address"), fix),
                            addrs,
                        );
                    }
                    let shown: Vec<String> = addrs.iter().map(|a| a.ip().to_string()).collect();
                    (
                        Check::ok(NAME, format!("{host} → {}", shown.join(", "))),
                        addrs,
                    )
                }
            }
        }
    }
}

/// Connects to each address in turn; the first that answers is the one used next.
async fn tcp_check(relay: &url::Url, addrs: &[SocketAddr]) -> (Check, Option<SocketAddr>) {
    const NAME: &str = "relay-tcp";
    let mut errors = Vec::new();
    for a in addrs {
        let started = Instant::now();
        match tokio::time::timeout(TCP_TIMEOUT, tokio::net::TcpStream::connect(*a)).await {
            Ok(Ok(_)) => {
                return (
                    Check::ok(
                        NAME,
                        format!("connected to {a} in {} ms", started.elapsed().as_millis()),
                    ),
                    Some(*a),
                );
            }
            Ok(Err(e)) => errors.push(format!("{a}: {e}")),
            Err(_) => errors.push(format!("{a}: no answer within {} s", TCP_TIMEOUT.as_secs())),
        }
    }
    let port = relay.port_or_known_default().unwrap_or(443);
    (
        Check::fail(
            NAME,
            format!("cannot connect to the relay: {}", errors.join("; ")),
            format!(
                "is the relay running and listening on port {port}? Start it (`machine-mcp relay serve`, or `machine-mcp up` for a local one); check the URL and any firewall"
            ),
        ),
        None,
    )
}

fn is_loopback(relay: &url::Url, addrs: &[SocketAddr]) -> bool {
    relay.host_str() == Some("localhost")
        || (!addrs.is_empty() && addrs.iter().all(|a| a.ip().is_loopback()))
}

async fn tls_check(relay: &url::Url, addr: SocketAddr, addrs: &[SocketAddr]) -> Check {
    const NAME: &str = "relay-tls";
    let host = host_name(relay).unwrap_or_default();
    if relay.scheme() != "https" {
        return if is_loopback(relay, addrs) {
            Check::ok(NAME, "plain HTTP (loopback)")
        } else {
            Check::warn(
                NAME,
                format!(
                    "plain HTTP to {host}, which is not loopback: tokens and tool traffic cross the network unencrypted"
                ),
                "serve the relay over TLS (e.g. behind a reverse proxy with a certificate) and use its https:// URL",
            )
        };
    }
    match link::tls_handshake(&host, addr, TLS_TIMEOUT).await {
        Ok(s) => Check::ok(
            NAME,
            format!(
                "{} {}; the certificate for {host} verifies against the roots the daemon trusts",
                s.version, s.cipher_suite
            ),
        ),
        Err(e) if e.contains("InvalidContentType") || e.contains("corrupt message") => Check::fail(
            NAME,
            format!("{e}: the port does not speak TLS"),
            format!(
                "the relay at {host} answers plain HTTP on that port: use its http:// URL (loopback only), or put TLS in front and use that port"
            ),
        ),
        Err(e) => Check::fail(
            NAME,
            e,
            format!(
                "the relay's certificate must be valid now, name {host}, and chain to a public CA (the daemon trusts the Mozilla roots, not the system store): renew it or fix the TLS setup of the proxy in front"
            ),
        ),
    }
}

/// `GET /healthz`; with it, the clock skew from the answer's `Date` header.
async fn healthz_check(relay: &url::Url) -> (Check, Option<i64>) {
    const NAME: &str = "relay-healthz";
    let mut url = relay.clone();
    url.set_path("/healthz");
    url.set_query(None);
    let fix_url = format!(
        "is {relay} the relay's base URL? A reverse proxy in front must forward every path (/healthz, /daemon/v1/connect, /b/...) to it"
    );
    let client = match reqwest::Client::builder().timeout(HTTP_TIMEOUT).build() {
        Ok(c) => c,
        Err(e) => return (Check::fail(NAME, chain(&e), "report this as a bug"), None),
    };
    let started = Instant::now();
    let resp = match client.get(url.as_str()).send().await {
        Ok(r) => r,
        Err(e) => {
            return (
                Check::fail(NAME, format!("GET {url}: {}", chain(&e)), fix_url),
                None,
            );
        }
    };
    let local_ms = i128::from(protocol::frame::now_unix_ms());
    let skew = resp
        .headers()
        .get(reqwest::header::DATE)
        .and_then(|d| d.to_str().ok())
        .and_then(|d| httpdate::parse_http_date(d).ok())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        // The Date header is truncated to the second: its middle is the best estimate.
        .map(|d| (local_ms - (i128::from(d.as_secs()) * 1000 + 500)) as f64 / 1000.0)
        .map(|s| s.round() as i64);
    let status = resp.status();
    let elapsed = started.elapsed().as_millis();
    // The relay answers `ok`: another server's 200 (a web page) is not a relay.
    let body = resp.text().await.unwrap_or_default();
    let check = if status == reqwest::StatusCode::OK && body.trim() == "ok" {
        Check::ok(NAME, format!("GET {url} → 200 in {elapsed} ms"))
    } else if status == reqwest::StatusCode::OK {
        let shown: String = body.trim().chars().take(60).collect();
        Check::fail(
            NAME,
            format!(
                "GET {url} → 200, but not the relay's answer `ok` (got {shown:?}): something else serves that URL"
            ),
            fix_url,
        )
    } else {
        Check::fail(NAME, format!("GET {url} → {status}"), fix_url)
    };
    (check, skew)
}

/// The device key is accepted: the running daemon's ready link proves it, else a handshake.
pub(super) async fn enrollment(setup: &Setup, relay_checks: &[Check]) -> Check {
    const NAME: &str = "enrollment";
    let dir = &setup.identity_dir;
    let e = match &setup.enrollment {
        Err(e) => {
            return Check::fail(
                NAME,
                e.clone(),
                "move the file aside and enroll again: `machine-mcp connect --relay URL --enroll CODE`",
            );
        }
        Ok(None) => {
            return Check::fail(
                NAME,
                format!(
                    "not enrolled: there is no {}",
                    dir.join("enrollment.json").display()
                ),
                "on the relay run `machine-mcp relay bridge add NAME`, then here `machine-mcp connect --relay URL --enroll CODE` (`machine-mcp up` enrolls its own daemon)",
            );
        }
        Ok(Some(e)) => e,
    };
    let prerequisites: Vec<&Check> = relay_checks
        .iter()
        .filter(|c| matches!(c.name, "relay-tcp" | "relay-tls" | "relay-healthz"))
        .collect();
    if let Some(skip) = Check::gate(NAME, &prerequisites) {
        return skip;
    }
    if setup.link_ready() {
        let beat = setup
            .link()
            .and_then(|l| l["last_heartbeat_unix_ms"].as_u64())
            .map(|t| protocol::frame::now_unix_ms().saturating_sub(t) / 1000);
        return Check::ok(
            NAME,
            match beat {
                Some(s) => format!(
                    "accepted: the running daemon's link is ready (bridge {}), last heartbeat {s} s ago",
                    e.bridge
                ),
                None => format!(
                    "accepted: the running daemon's link is ready (bridge {})",
                    e.bridge
                ),
            },
        );
    }
    let Some(relay) = &setup.relay else {
        return Check::skip(NAME, "skipped: no relay known");
    };
    let key_file = dir.join("device-key.pem");
    if !key_file.exists() {
        return Check::fail(
            NAME,
            format!("the device key {} is missing", key_file.display()),
            reenroll(&e.bridge, relay),
        );
    }
    let key = match DeviceKey::load_or_create(dir) {
        Ok(k) => k,
        Err(err) => return Check::fail(NAME, err.to_string(), reenroll(&e.bridge, relay)),
    };
    let daemon_state = setup.link().map(|l| {
        let state = l["state"].as_str().unwrap_or("unknown").replace('_', " ");
        match l["last_error"].as_str() {
            Some(why) => format!("{state}: {why}"),
            None => state,
        }
    });
    match link::probe_handshake(relay, &e.bridge, &e.key_id, &key, HANDSHAKE_TIMEOUT).await {
        Ok(()) => match daemon_state {
            Some(state) => Check::warn(
                NAME,
                format!(
                    "device key {} of bridge {} passed a handshake with {relay}, but the running daemon's link is {state}",
                    e.key_id, e.bridge
                ),
                "see `machine-mcp status` and the daemon's log; restart it (`machine-mcp service restart`, or run it again with --takeover)",
            ),
            None => Check::ok(
                NAME,
                format!(
                    "accepted: device key {} of bridge {} passed a handshake with {relay}",
                    e.key_id, e.bridge
                ),
            ),
        },
        Err(HandshakeError::Refused(why)) => Check::fail(
            NAME,
            format!(
                "the relay refused device key {} of bridge {} ({why}): it was revoked, replaced by a newer enrollment, or the bridge was removed",
                e.key_id, e.bridge
            ),
            reenroll(&e.bridge, relay),
        ),
        Err(err) => Check::fail(
            NAME,
            format!("the handshake with {relay} failed: {err}"),
            "check the relay-* lines above and the relay's log",
        ),
    }
}

fn reenroll(bridge: &str, relay: &url::Url) -> String {
    format!(
        "re-enroll: on the relay `machine-mcp relay device list --bridge {bridge}` and `machine-mcp relay bridge add {bridge}` (a new code), then here `machine-mcp connect --relay {relay} --enroll CODE`"
    )
}

/// `initialize` and `tools/call server_info` through the relay with the bearer token.
pub(super) async fn round_trip(setup: &Setup, relay_checks: &[Check], enrollment: &Check) -> Check {
    const NAME: &str = "round-trip";
    let mut prerequisites: Vec<&Check> = relay_checks
        .iter()
        .filter(|c| c.name == "relay-healthz")
        .collect();
    prerequisites.push(enrollment);
    if let Some(skip) = Check::gate(NAME, &prerequisites) {
        return skip;
    }
    if !setup.link_ready() {
        return Check::skip(
            NAME,
            "skipped: no daemon with a ready link runs on this state directory to answer (see the lock line)",
        );
    }
    let Some(url) = &setup.mcp_url else {
        return Check::skip(NAME, "skipped: the bridge's MCP URL is not known");
    };
    let Some((token, from)) = &setup.token else {
        let bridge = match &setup.enrollment {
            Ok(Some(e)) => e.bridge.clone(),
            _ => "NAME".to_owned(),
        };
        return Check::skip(
            NAME,
            format!(
                "skipped: no bearer token; pass --token TOKEN or set MACHINE_MCP_TOKEN (make one on the relay: `machine-mcp relay token create --bridge {bridge} --role reviewer`)"
            ),
        );
    };
    let started = Instant::now();
    match call_server_info(url, token).await {
        Ok(info) => Check::ok(
            NAME,
            format!(
                "initialize + tools/call server_info through {url} answered in {} ms ({info}; token from {from})",
                started.elapsed().as_millis()
            ),
        ),
        Err(Refusal::Token(code)) => Check::fail(
            NAME,
            format!("{url} refused the bearer token from {from} (HTTP {code})"),
            "give a valid token with --token or MACHINE_MCP_TOKEN (`machine-mcp relay token create --bridge BRIDGE --role reviewer`)",
        ),
        Err(Refusal::Other(why)) => Check::fail(
            NAME,
            format!("through {url}: {why}"),
            "see `machine-mcp status` and the daemon's and the relay's logs",
        ),
    }
}

enum Refusal {
    Token(u16),
    Other(String),
}

async fn call_server_info(url: &str, token: &str) -> Result<String, Refusal> {
    let client = reqwest::Client::builder()
        .timeout(ROUND_TRIP_TIMEOUT)
        .build()
        .map_err(|e| Refusal::Other(chain(&e)))?;
    let post = |body: Value, session: Option<String>| {
        let mut r = client
            .post(url)
            .bearer_auth(token)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(
                reqwest::header::ACCEPT,
                "application/json, text/event-stream",
            )
            .body(body.to_string());
        if let Some(s) = session {
            r = r.header("Mcp-Session-Id", s);
        }
        r.send()
    };
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": MCP_VERSION, "capabilities": {},
        "clientInfo": {"name": "machine-mcp-doctor", "version": env!("CARGO_PKG_VERSION")}}});
    let resp = post(init, None)
        .await
        .map_err(|e| Refusal::Other(chain(&e)))?;
    let session = resp
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let init = answer(resp, 1).await?;
    let server = format!(
        "server {} {}",
        init["serverInfo"]["name"].as_str().unwrap_or("?"),
        init["serverInfo"]["version"].as_str().unwrap_or("?")
    );
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    post(note, session.clone())
        .await
        .map_err(|e| Refusal::Other(chain(&e)))?;
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "server_info", "arguments": {}}});
    let resp = post(call, session.clone())
        .await
        .map_err(|e| Refusal::Other(chain(&e)))?;
    let result = answer(resp, 2).await?;
    if let Some(s) = session {
        let _ = client
            .delete(url)
            .bearer_auth(token)
            .header("Mcp-Session-Id", s)
            .send()
            .await;
    }
    if result["isError"] == true {
        return Err(Refusal::Other(format!(
            "server_info returned a tool error: {result}"
        )));
    }
    Ok(server)
}

/// The `result` of the response with `id` in `resp` (a JSON body or an SSE stream).
async fn answer(resp: reqwest::Response, id: u64) -> Result<Value, Refusal> {
    let status = resp.status();
    if matches!(status.as_u16(), 401 | 403) {
        return Err(Refusal::Token(status.as_u16()));
    }
    let text = resp.text().await.map_err(|e| Refusal::Other(chain(&e)))?;
    if !status.is_success() {
        let head: String = text.chars().take(300).collect();
        return Err(Refusal::Other(format!("HTTP {status}: {head}")));
    }
    let messages: Vec<Value> = match serde_json::from_str::<Value>(&text) {
        Ok(v) => vec![v],
        Err(_) => text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str(d.trim_start()).ok())
            .collect(),
    };
    let Some(m) = messages
        .into_iter()
        .find(|m| Head::of(m).id().and_then(Value::as_u64) == Some(id))
    else {
        return Err(Refusal::Other(format!(
            "no response to request {id} in the answer"
        )));
    };
    if !m["error"].is_null() {
        return Err(Refusal::Other(format!("JSON-RPC error: {}", m["error"])));
    }
    Ok(m["result"].clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_skew_is_ok_within_5_s_a_warning_to_60_s_and_a_failure_beyond() {
        for (skew, want) in [
            (0, Status::Ok),
            (5, Status::Ok),
            (-5, Status::Ok),
            (6, Status::Warn),
            (-60, Status::Warn),
            (60, Status::Warn),
            (61, Status::Fail),
            (-3600, Status::Fail),
            (i64::MIN, Status::Fail),
        ] {
            assert_eq!(classify_skew(skew), want, "skew {skew}");
        }
        let ahead = clock_check(90);
        assert_eq!(ahead.status, Status::Fail);
        assert!(ahead.detail.contains("90 s ahead"), "{}", ahead.detail);
        assert!(
            ahead
                .detail
                .contains("OAuth tokens and link handshakes may be refused")
        );
        assert!(ahead.fix.as_deref().unwrap_or_default().contains("NTP"));
        let behind = clock_check(-7);
        assert_eq!(behind.status, Status::Warn);
        assert!(behind.detail.contains("7 s behind"), "{}", behind.detail);
    }
}
