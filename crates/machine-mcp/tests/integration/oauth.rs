//! OAuth 2.1 on the relay (issue 10): discovery, registration and client ID metadata documents,
//! the consent page, codes, tokens, refresh rotation, revocation, DPoP, accounts — against a
//! real `relay serve` with a daemon, over real HTTP, as a headless client would do it.

use std::{
    collections::HashMap,
    io::{BufRead, BufReader, Read, Write},
    net::TcpListener,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::{
    net::{Client, Proc, Relay, run_cli},
    util::Tree,
};

/// A relay with bridge `b` (and `other`), a daemon serving a tree on `b`, and an account.
pub(crate) struct Setup {
    pub(crate) relay: Relay,
    _daemon: Proc,
    _state: tempfile::TempDir,
    _tree: Tree,
    pub(crate) password: String,
}

impl Setup {
    pub(crate) fn start(extra: &[&str]) -> Self {
        let relay = Relay::start(extra);
        let code = relay.add_bridge("b");
        relay.add_bridge("other");
        let tree = Tree::new();
        tree.write("hello.txt", "hello\n");
        let state = tempfile::tempdir().unwrap();
        let daemon = relay.daemon(state.path(), tree.path(), Some(&code), &[]);
        relay.wait_ready(1);
        let password = account(&relay, &["add", "ann", "--bridge", "b", "--role", "editor"]);
        Self {
            relay,
            _daemon: daemon,
            _state: state,
            _tree: tree,
            password,
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.relay.direct())
    }

    /// The resource (MCP URL) of the runtime of bridge `b` as the relay names it.
    pub(crate) fn resource(&self) -> String {
        format!("{}/b/b/mcp", self.relay.public())
    }

    /// Runs `relay ARGS... --store S`; returns stdout.
    pub(crate) fn cli(&self, args: &[&str]) -> String {
        let mut a: Vec<&str> = vec!["relay"];
        a.extend_from_slice(args);
        let s = self.relay.store_args();
        a.extend(s.iter().map(String::as_str));
        run_cli(&a)
    }
}

pub(crate) fn account(relay: &Relay, args: &[&str]) -> String {
    let mut a = vec!["relay", "account"];
    a.extend_from_slice(args);
    let s = relay.store_args();
    a.extend(s.iter().map(String::as_str));
    run_cli(&a)
}

pub(crate) fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .redirects(0)
        .timeout(Duration::from_secs(30))
        .build()
}

/// Status and body (text) of a request, whatever the status.
pub(crate) fn send(
    r: Result<ureq::Response, ureq::Error>,
) -> (u16, HashMap<String, String>, String) {
    let resp = match r {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("request failed: {e}"),
    };
    let status = resp.status();
    let headers = resp
        .headers_names()
        .into_iter()
        .filter_map(|n| resp.header(&n).map(|v| (n.to_lowercase(), v.to_owned())))
        .collect();
    (status, headers, resp.into_string().unwrap_or_default())
}

pub(crate) fn form(pairs: &[(&str, &str)]) -> String {
    let mut s = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        s.append_pair(k, v);
    }
    s.finish()
}

pub(crate) fn post_form(
    url: &str,
    body: &str,
    extra: &[(&str, &str)],
) -> (u16, HashMap<String, String>, String) {
    let mut r = agent()
        .post(url)
        .set("Content-Type", "application/x-www-form-urlencoded");
    for (k, v) in extra {
        r = r.set(k, v);
    }
    send(r.send_string(body))
}

pub(crate) fn json_of(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

pub(crate) fn pkce() -> (String, String) {
    let verifier = crate::util::random_token(48);
    let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
    (verifier, challenge)
}

/// One client's view of the flow.
pub(crate) struct Flow {
    pub(crate) client_id: String,
    pub(crate) secret: Option<String>,
    pub(crate) redirect_uri: String,
    pub(crate) verifier: String,
    pub(crate) challenge: String,
    pub(crate) cookie: Option<String>,
}

/// What the consent page gave back.
pub(crate) struct Page {
    pub(crate) status: u16,
    pub(crate) body: String,
    pub(crate) request: Option<String>,
}

impl Flow {
    /// Registers a public client (RFC 7591) with `body` (redirect URIs and the rest).
    pub(crate) fn register(s: &Setup, body: Value) -> (u16, Value) {
        let (status, _, text) = send(
            agent()
                .post(&s.url("/oauth/register"))
                .set("Content-Type", "application/json")
                .send_string(&body.to_string()),
        );
        (status, json_of(&text))
    }

    pub(crate) fn new(s: &Setup) -> Self {
        let (status, reg) = Self::register(
            s,
            json!({"client_name": "Test Client", "redirect_uris": ["http://127.0.0.1/callback"],
                   "grant_types": ["authorization_code", "refresh_token"], "token_endpoint_auth_method": "none"}),
        );
        assert_eq!(status, 201, "{reg}");
        Self::with_client(
            reg["client_id"].as_str().unwrap(),
            None,
            "http://127.0.0.1:4567/callback",
        )
    }

    pub(crate) fn with_client(client_id: &str, secret: Option<&str>, redirect_uri: &str) -> Self {
        let (verifier, challenge) = pkce();
        Self {
            client_id: client_id.to_owned(),
            secret: secret.map(str::to_owned),
            redirect_uri: redirect_uri.to_owned(),
            verifier,
            challenge,
            cookie: None,
        }
    }

    /// The authorization request URL with `extra` parameters (and without those named in `omit`).
    pub(crate) fn authorize_url(
        &self,
        s: &Setup,
        resource: Option<&str>,
        extra: &[(&str, &str)],
        omit: &[&str],
    ) -> String {
        let mut p: Vec<(&str, &str)> = vec![
            ("response_type", "code"),
            ("client_id", &self.client_id),
            ("redirect_uri", &self.redirect_uri),
            ("code_challenge", &self.challenge),
            ("code_challenge_method", "S256"),
            ("state", "st4te"),
            ("scope", "mcp"),
        ];
        if let Some(r) = resource {
            p.push(("resource", r));
        }
        p.retain(|(k, _)| !omit.contains(k));
        p.extend_from_slice(extra);
        format!("{}?{}", s.url("/oauth/authorize"), form(&p))
    }

    /// GET the consent page.
    pub(crate) fn page(&mut self, url: &str) -> Page {
        let mut r = agent().get(url);
        if let Some(c) = &self.cookie {
            r = r.set("Cookie", c);
        }
        let (status, headers, body) = send(r.call());
        if let Some(c) = headers.get("set-cookie") {
            self.cookie = Some(c.split(';').next().unwrap().to_owned());
        }
        let request = body
            .split("name=\"request\" value=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .map(str::to_owned);
        Page {
            status,
            body,
            request,
        }
    }

    /// POST the consent form; returns status, Location and the body.
    pub(crate) fn submit(
        &self,
        s: &Setup,
        request: &str,
        account: &str,
        password: &str,
        action: &str,
    ) -> (u16, Option<String>, String) {
        let body = form(&[
            ("request", request),
            ("account", account),
            ("password", password),
            ("action", action),
        ]);
        let mut extra = vec![];
        let cookie = self.cookie.clone().unwrap_or_default();
        if self.cookie.is_some() {
            extra.push(("Cookie", cookie.as_str()));
        }
        let (status, headers, text) = post_form(&s.url("/oauth/authorize"), &body, &extra);
        (status, headers.get("location").cloned(), text)
    }

    /// Consent page + sign-in: the redirect's query parameters.
    pub(crate) fn approve(
        &mut self,
        s: &Setup,
        resource: Option<&str>,
        account: &str,
        password: &str,
    ) -> HashMap<String, String> {
        let page = self.page(&self.authorize_url(s, resource, &[], &[]));
        assert_eq!(page.status, 200, "{}", page.body);
        let (status, location, body) =
            self.submit(s, &page.request.unwrap(), account, password, "approve");
        assert_eq!(status, 303, "{body}");
        query(&location.unwrap())
    }

    pub(crate) fn token_request(
        &self,
        s: &Setup,
        pairs: &[(&str, &str)],
        extra: &[(&str, &str)],
    ) -> (u16, Value) {
        let mut p: Vec<(&str, &str)> = vec![("client_id", &self.client_id)];
        if let Some(sec) = &self.secret {
            p.push(("client_secret", sec));
        }
        p.extend_from_slice(pairs);
        let (status, _, text) = post_form(&s.url("/oauth/token"), &form(&p), extra);
        (status, json_of(&text))
    }

    pub(crate) fn exchange(&self, s: &Setup, code: &str) -> (u16, Value) {
        self.token_request(
            s,
            &[
                ("grant_type", "authorization_code"),
                ("code", code),
                ("redirect_uri", &self.redirect_uri),
                ("code_verifier", &self.verifier),
                ("resource", &s.resource()),
            ],
            &[],
        )
    }

    pub(crate) fn refresh(&self, s: &Setup, refresh: &str) -> (u16, Value) {
        self.token_request(
            s,
            &[("grant_type", "refresh_token"), ("refresh_token", refresh)],
            &[],
        )
    }

    /// The whole flow for the runtime of bridge `b`: tokens.
    pub(crate) fn tokens(&mut self, s: &Setup) -> Value {
        let q = self.approve(s, Some(&s.resource()), "ann", &s.password);
        let (status, t) = self.exchange(s, &q["code"]);
        assert_eq!(status, 200, "{t}");
        t
    }
}

pub(crate) fn query(location: &str) -> HashMap<String, String> {
    url::Url::parse(location)
        .unwrap()
        .query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// A tools/call through the relay's runtime of bridge `b` with `token` (legacy era).
pub(crate) fn call_status(s: &Setup, token: &str) -> (u16, Option<String>) {
    let (status, headers, _) = send(
        agent()
            .post(&s.url("/b/b/mcp"))
            .set("Authorization", &format!("Bearer {token}"))
            .set("Content-Type", "application/json")
            .set("Accept", "application/json, text/event-stream")
            .send_string(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}).to_string()),
    );
    (status, headers.get("www-authenticate").cloned())
}

pub(crate) fn read_hello(s: &Setup, token: &str) -> Value {
    let mut c = Client::new(&s.url("/b/b/mcp"), Some(token));
    c.initialize();
    c.call("read_file", json!({"path": "hello.txt"}))
}

pub(crate) fn wait_until(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    f()
}

#[test]
fn discovery_documents_and_challenges_point_clients_to_the_authorization_server() {
    let s = Setup::start(&[]);
    let public = s.relay.public();
    let (status, _, prm) = send(
        agent()
            .get(&s.url("/.well-known/oauth-protected-resource/b/b/mcp"))
            .call(),
    );
    assert_eq!(status, 200);
    let prm = json_of(&prm);
    assert_eq!(prm["resource"], format!("{public}/b/b/mcp"));
    assert_eq!(prm["authorization_servers"], json!([public]));
    assert_eq!(prm["scopes_supported"], json!(["mcp"]));
    let prm = json_of(
        &send(
            agent()
                .get(&s.url("/.well-known/oauth-protected-resource/b/b/s/db/mcp"))
                .call(),
        )
        .2,
    );
    assert_eq!(prm["resource"], format!("{public}/b/b/s/db/mcp"));
    let root = json_of(
        &send(
            agent()
                .get(&s.url("/.well-known/oauth-protected-resource"))
                .call(),
        )
        .2,
    );
    assert_eq!(root["resource"], public);
    assert_eq!(
        send(
            agent()
                .get(&s.url("/.well-known/oauth-protected-resource/etc/passwd"))
                .call()
        )
        .0,
        404
    );
    // A rebound DNS name cannot reach the authorization server on a loopback listener.
    let (status, _, _) = send(
        agent()
            .get(&s.url("/.well-known/oauth-authorization-server"))
            .set("Host", "evil.example")
            .call(),
    );
    assert_eq!(status, 403);
    let (status, _, _) = send(
        agent()
            .post(&s.url("/oauth/register"))
            .set("Host", "evil.example")
            .set("Content-Type", "application/json")
            .send_string("{}"),
    );
    assert_eq!(status, 403);
    for path in [
        "/.well-known/oauth-authorization-server",
        "/.well-known/openid-configuration",
    ] {
        let md = json_of(&send(agent().get(&s.url(path)).call()).2);
        assert_eq!(md["issuer"], public, "{path}");
        assert_eq!(md["response_types_supported"], json!(["code"]));
        assert_eq!(md["code_challenge_methods_supported"], json!(["S256"]));
        assert_eq!(md["client_id_metadata_document_supported"], true);
        assert_eq!(md["authorization_response_iss_parameter_supported"], true);
        assert_eq!(
            md["token_endpoint_auth_methods_supported"],
            json!([
                "none",
                "client_secret_post",
                "client_secret_basic",
                "private_key_jwt"
            ])
        );
        assert_eq!(md["token_endpoint"], format!("{public}/oauth/token"));
    }
    // 401 on every method, with the metadata URL and scope; invalid_token once a token is shown.
    let expected = format!(
        "Bearer resource_metadata=\"{public}/.well-known/oauth-protected-resource/b/b/mcp\", scope=\"mcp\""
    );
    for method in ["POST", "GET", "DELETE"] {
        let (status, headers, _) = send(
            agent()
                .request(method, &s.url("/b/b/mcp"))
                .set("Content-Type", "application/json")
                .set("Accept", "text/event-stream")
                .send_string("{}"),
        );
        assert_eq!(status, 401, "{method}");
        assert_eq!(headers["www-authenticate"], expected, "{method}");
    }
    let (status, challenge) = call_status(&s, "mba_not-a-token");
    assert_eq!(status, 401);
    assert!(challenge.unwrap().contains("error=\"invalid_token\""));
    let (_, headers, _) = send(
        agent()
            .get(&s.url("/b/b/s/db/mcp"))
            .set("Accept", "text/event-stream")
            .call(),
    );
    assert!(
        headers["www-authenticate"].contains("/.well-known/oauth-protected-resource/b/b/s/db/mcp")
    );
}

#[test]
fn with_auth_token_the_oauth_endpoints_are_off() {
    let relay = Relay::start(&["--auth", "token"]);
    relay.add_bridge("b");
    let direct = relay.direct();
    for path in [
        "/.well-known/oauth-authorization-server",
        "/.well-known/oauth-protected-resource/b/b/mcp",
    ] {
        assert_eq!(
            send(agent().get(&format!("{direct}{path}")).call()).0,
            404,
            "{path}"
        );
    }
    let (status, headers, _) = send(
        agent()
            .post(&format!("{direct}/oauth/token"))
            .send_string(""),
    );
    assert!(status == 404 || status == 405, "{status}");
    let (status, headers2, _) = send(
        agent()
            .post(&format!("{direct}/b/b/mcp"))
            .set("Content-Type", "application/json")
            .send_string("{}"),
    );
    assert_eq!(status, 401);
    assert_eq!(headers2["www-authenticate"], "Bearer realm=\"machine-mcp\"");
    drop(headers);
}

#[test]
fn a_client_signs_in_once_calls_tools_in_both_eras_and_refreshes_after_expiry() {
    let s = Setup::start(&["--oauth-access-token-ttl-secs", "2"]);
    let mut f = Flow::new(&s);
    // The consent page names the client, where it goes back to, the resource and the roles.
    let page = f.page(&f.authorize_url(&s, Some(&s.resource()), &[], &[]));
    assert_eq!(page.status, 200);
    for needle in [
        "Test Client",
        "127.0.0.1",
        &s.resource(),
        "reviewer",
        "name=\"password\"",
    ] {
        assert!(
            page.body.contains(needle),
            "{needle} missing: {}",
            page.body
        );
    }
    let request = page.request.clone().unwrap();
    let (status, location, body) = f.submit(&s, &request, "ann", "wrong password!!", "approve");
    assert_eq!((status, location), (401, None));
    assert!(body.contains("Wrong account name or password"));
    let (status, location, _) = f.submit(&s, &request, "ann", &s.password, "approve");
    assert_eq!(status, 303);
    let q = query(&location.unwrap());
    assert_eq!(q["state"], "st4te");
    assert_eq!(q["iss"], s.relay.public());
    assert!(location_is(&f.redirect_uri, &q));
    let (status, t) = f.exchange(&s, &q["code"]);
    assert_eq!(status, 200, "{t}");
    assert_eq!(t["token_type"], "Bearer");
    assert_eq!(t["scope"], "mcp");
    assert_eq!(t["expires_in"], 2);
    let access = t["access_token"].as_str().unwrap();
    let refresh = t["refresh_token"].as_str().unwrap();
    // Legacy era: a session and a tool call.
    let r = read_hello(&s, access);
    assert_eq!(
        r["result"]["structuredContent"]["content"], "hello\n",
        "{r}"
    );
    // MCP 2026-07-28: no session, the same token.
    let (status, _, body) = send(
        agent()
            .post(&s.url("/b/b/mcp"))
            .set("Authorization", &format!("Bearer {access}"))
            .set("Content-Type", "application/json")
            .set("Accept", "application/json, text/event-stream")
            .set("MCP-Protocol-Version", "2026-07-28")
            .set("Mcp-Method", "tools/call")
            .set("Mcp-Name", "read_file")
            .send_string(
                &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
                "name": "read_file", "arguments": {"path": "hello.txt"},
                "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                          "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"},
                          "io.modelcontextprotocol/clientCapabilities": {}}}})
                .to_string(),
            ),
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("hello\\n"), "{body}");
    // The access token expires: 401 with invalid_token; the refresh token gives a working pair.
    assert!(wait_until(Duration::from_secs(10), || call_status(
        &s, access
    )
    .0 == 401));
    let (_, challenge) = call_status(&s, access);
    assert!(challenge.unwrap().contains("error=\"invalid_token\""));
    let (status, t2) = f.refresh(&s, refresh);
    assert_eq!(status, 200, "{t2}");
    assert_ne!(
        t2["refresh_token"], t["refresh_token"],
        "refresh tokens rotate"
    );
    assert_eq!(
        read_hello(&s, t2["access_token"].as_str().unwrap())["result"]["structuredContent"]["content"],
        "hello\n"
    );
}

fn location_is(redirect_uri: &str, _q: &HashMap<String, String>) -> bool {
    redirect_uri.starts_with("http://127.0.0.1:4567/callback")
}

#[test]
fn codes_are_single_use_bound_to_pkce_redirect_and_client() {
    let s = Setup::start(&[]);
    // PKCE mismatch.
    let mut f = Flow::new(&s);
    let q = f.approve(&s, Some(&s.resource()), "ann", &s.password);
    let good_verifier = f.verifier.clone();
    f.verifier = pkce().0;
    let (status, e) = f.exchange(&s, &q["code"]);
    assert_eq!(
        (status, e["error"].as_str()),
        (400, Some("invalid_grant")),
        "{e}"
    );
    assert!(e["error_description"].as_str().unwrap().contains("PKCE"));
    f.verifier = good_verifier;
    // Replay: the first exchange works, the second fails and revokes what the first gave.
    let mut f = Flow::new(&s);
    let q = f.approve(&s, Some(&s.resource()), "ann", &s.password);
    let (status, t) = f.exchange(&s, &q["code"]);
    assert_eq!(status, 200);
    let access = t["access_token"].as_str().unwrap();
    assert_eq!(call_status(&s, access).0, 200);
    let (status, e) = f.exchange(&s, &q["code"]);
    assert_eq!((status, e["error"].as_str()), (400, Some("invalid_grant")));
    assert_eq!(
        call_status(&s, access).0,
        401,
        "a replayed code revokes its grant"
    );
    // Redirect mismatch at the token endpoint, and at authorize (an error page, no redirect).
    let mut f = Flow::new(&s);
    let q = f.approve(&s, Some(&s.resource()), "ann", &s.password);
    let (status, e) = f.token_request(
        &s,
        &[
            ("grant_type", "authorization_code"),
            ("code", &q["code"]),
            ("redirect_uri", "http://127.0.0.1:4567/other"),
            ("code_verifier", &f.verifier),
        ],
        &[],
    );
    assert_eq!((status, e["error"].as_str()), (400, Some("invalid_grant")));
    let page = f.page(&f.authorize_url(
        &s,
        Some(&s.resource()),
        &[("redirect_uri", "https://evil.example/cb")],
        &["redirect_uri"],
    ));
    assert_eq!(page.status, 400);
    assert!(
        page.body.contains("not one that Test Client registered"),
        "{}",
        page.body
    );
    // Another client cannot redeem the code.
    let mut f = Flow::new(&s);
    let q = f.approve(&s, Some(&s.resource()), "ann", &s.password);
    let other = Flow {
        verifier: f.verifier.clone(),
        ..Flow::new(&s)
    };
    let (status, e) = other.exchange(&s, &q["code"]);
    assert_eq!(
        (status, e["error"].as_str()),
        (400, Some("invalid_grant")),
        "{e}"
    );
    // S256 is required.
    let mut f = Flow::new(&s);
    let page = f.page(&f.authorize_url(
        &s,
        Some(&s.resource()),
        &[("code_challenge_method", "plain")],
        &["code_challenge_method"],
    ));
    assert_eq!(page.status, 303);
    let page = f.page(&f.authorize_url(&s, Some(&s.resource()), &[], &["code_challenge"]));
    assert_eq!(
        page.status, 303,
        "errors after the redirect URI is trusted are redirected"
    );
}

#[test]
fn a_token_works_only_for_its_resource_and_bridge_and_an_omitted_scope_gets_the_default() {
    let s = Setup::start(&[]);
    let mut f = Flow::new(&s);
    let q = f.approve(&s, Some(&s.resource()), "ann", &s.password);
    let access = f.exchange(&s, &q["code"]).1["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(call_status(&s, &access).0, 200);
    for other in ["/b/b/s/db/mcp", "/b/other/mcp"] {
        let (status, headers, _) = send(
            agent()
                .post(&s.url(other))
                .set("Authorization", &format!("Bearer {access}"))
                .set("Content-Type", "application/json")
                .send_string("{}"),
        );
        assert_eq!(status, 401, "{other}");
        assert!(headers["www-authenticate"].contains("invalid_token"));
    }
    // A resource that is not one of the relay's is refused at authorize (redirected error).
    let mut f = Flow::new(&s);
    let page = f.page(&f.authorize_url(&s, Some("https://elsewhere.example/mcp"), &[], &[]));
    assert_eq!(page.status, 303);
    // No scope: the default is granted.
    let mut f = Flow::new(&s);
    let page = f.page(&f.authorize_url(&s, Some(&s.resource()), &[], &["scope"]));
    let (status, location, _) = f.submit(&s, &page.request.unwrap(), "ann", &s.password, "approve");
    assert_eq!(status, 303);
    let (_, t) = f.exchange(&s, &query(&location.unwrap())["code"]);
    assert_eq!(t["scope"], "mcp");
    // A token for the relay itself covers every MCP URL of the account's bridge only.
    let mut f = Flow::new(&s);
    let page = f.page(&f.authorize_url(&s, None, &[], &[]));
    assert!(
        page.body.contains("name=\"bridge\""),
        "the page asks for the bridge"
    );
    let body = form(&[
        ("request", &page.request.unwrap()),
        ("bridge", "b"),
        ("account", "ann"),
        ("password", &s.password),
        ("action", "approve"),
    ]);
    let cookie = f.cookie.clone().unwrap();
    let (status, headers, _) = post_form(&s.url("/oauth/authorize"), &body, &[("Cookie", &cookie)]);
    assert_eq!(status, 303);
    let code = query(&headers["location"])["code"].clone();
    let (_, t) = f.token_request(
        &s,
        &[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("redirect_uri", &f.redirect_uri),
            ("code_verifier", &f.verifier),
        ],
        &[],
    );
    let relay_token = t["access_token"].as_str().unwrap();
    assert_eq!(call_status(&s, relay_token).0, 200);
    let (status, _, _) = send(
        agent()
            .post(&s.url("/b/other/mcp"))
            .set("Authorization", &format!("Bearer {relay_token}"))
            .set("Content-Type", "application/json")
            .send_string("{}"),
    );
    assert_eq!(status, 401);
}

#[test]
fn refresh_reuse_inside_the_grace_keeps_the_family_and_after_it_revokes_it() {
    let s = Setup::start(&["--oauth-refresh-grace-secs", "3"]);
    let mut f = Flow::new(&s);
    let t = f.tokens(&s);
    let r0 = t["refresh_token"].as_str().unwrap();
    // Another client cannot use it, and trying does not use it up.
    let (status, e) = Flow::new(&s).refresh(&s, r0);
    assert_eq!(
        (status, e["error"].as_str()),
        (400, Some("invalid_grant")),
        "{e}"
    );
    let (status, a) = f.refresh(&s, r0);
    assert_eq!(status, 200, "{a}");
    // Another node of the host refreshes with the same token at once: a valid pair too.
    let (status, b) = f.refresh(&s, r0);
    assert_eq!(status, 200, "inside the grace: {b}");
    for pair in [&a, &b] {
        assert_eq!(
            call_status(&s, pair["access_token"].as_str().unwrap()).0,
            200
        );
    }
    let (status, c) = f.refresh(&s, a["refresh_token"].as_str().unwrap());
    assert_eq!(status, 200, "the family is intact: {c}");
    // After the grace, presenting r0 again is a replay: the whole family is revoked.
    std::thread::sleep(Duration::from_millis(4100));
    let (status, e) = f.refresh(&s, r0);
    assert_eq!(
        (status, e["error"].as_str()),
        (400, Some("invalid_grant")),
        "{e}"
    );
    for pair in [&a, &b, &c] {
        assert_eq!(
            call_status(&s, pair["access_token"].as_str().unwrap()).0,
            401
        );
    }
    let (status, _) = f.refresh(&s, c["refresh_token"].as_str().unwrap());
    assert_eq!(status, 400, "every refresh token of the family is dead");
}

#[test]
fn account_changes_and_revocations_end_tokens_at_once() {
    let s = Setup::start(&[]);
    // Disabled account: tokens dead, sign-in refused.
    let mut f = Flow::new(&s);
    let t = f.tokens(&s);
    let access = t["access_token"].as_str().unwrap();
    assert_eq!(call_status(&s, access).0, 200);
    s.cli(&["account", "disable", "ann", "--bridge", "b"]);
    assert_eq!(call_status(&s, access).0, 401);
    assert_eq!(f.refresh(&s, t["refresh_token"].as_str().unwrap()).0, 400);
    let mut g = Flow::new(&s);
    let page = g.page(&g.authorize_url(&s, Some(&s.resource()), &[], &[]));
    let (status, _, body) = g.submit(&s, &page.request.unwrap(), "ann", &s.password, "approve");
    assert_eq!(status, 403);
    assert!(body.contains("disabled"));
    s.cli(&["account", "enable", "ann", "--bridge", "b"]);
    // A role change: the old token dies, a new sign-in carries the new role.
    let mut f = Flow::new(&s);
    let t = f.tokens(&s);
    let access = t["access_token"].as_str().unwrap();
    assert_eq!(call_status(&s, access).0, 200);
    s.cli(&["account", "role", "ann", "reviewer", "--bridge", "b"]);
    assert_eq!(call_status(&s, access).0, 401);
    let mut f = Flow::new(&s);
    let reviewer = f.tokens(&s);
    let mut c = Client::new(&s.url("/b/b/mcp"), reviewer["access_token"].as_str());
    c.initialize();
    let names = c.tool_names();
    assert!(
        names.contains(&"read_file".to_owned()) && !names.contains(&"write_file".to_owned()),
        "{names:?}"
    );
    // RFC 7009: revoking the refresh token ends the grant.
    let (status, _, body) = post_form(
        &s.url("/oauth/revoke"),
        &form(&[
            ("client_id", &f.client_id),
            ("token", reviewer["refresh_token"].as_str().unwrap()),
        ]),
        &[],
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        call_status(&s, reviewer["access_token"].as_str().unwrap()).0,
        401
    );
    let (status, _, _) = post_form(
        &s.url("/oauth/revoke"),
        &form(&[("client_id", &f.client_id), ("token", "unknown")]),
        &[],
    );
    assert_eq!(
        status, 200,
        "unknown tokens are answered the same way (RFC 7009 §2.2)"
    );
    // A revoked client: its tokens die and token requests get 401 invalid_client.
    let mut f = Flow::new(&s);
    let t = f.tokens(&s);
    let listed = s.cli(&["client", "list"]);
    assert!(
        listed.contains(&f.client_id) && listed.contains("Test Client"),
        "{listed}"
    );
    s.cli(&["client", "revoke", &f.client_id]);
    assert_eq!(call_status(&s, t["access_token"].as_str().unwrap()).0, 401);
    let (status, e) = f.refresh(&s, t["refresh_token"].as_str().unwrap());
    assert_eq!(
        (status, e["error"].as_str()),
        (401, Some("invalid_client")),
        "{e}"
    );
    // An unknown client too (Claude registers again on this answer).
    let ghost = Flow::with_client("mbc_000000000000", None, "http://127.0.0.1/callback");
    let (status, e) = ghost.refresh(&s, "mbr_x");
    assert_eq!((status, e["error"].as_str()), (401, Some("invalid_client")));
}

#[test]
fn registration_takes_what_real_clients_send_and_refuses_bad_bodies_storing_nothing() {
    let s = Setup::start(&[]);
    let (status, vscode) = Flow::register(
        &s,
        json!({
        "client_name": "Visual Studio Code", "client_uri": "https://code.visualstudio.com",
        "grant_types": ["authorization_code", "refresh_token", "urn:ietf:params:oauth:grant-type:device_code"],
        "response_types": ["code"], "token_endpoint_auth_method": "none", "application_type": "native",
        "redirect_uris": ["https://insiders.vscode.dev/redirect", "https://vscode.dev/redirect", "http://127.0.0.1/", "http://127.0.0.1:33418/"]}),
    );
    assert_eq!(status, 201, "{vscode}");
    assert_eq!(
        vscode["grant_types"],
        json!(["authorization_code", "refresh_token"])
    );
    assert!(vscode.get("client_secret").is_none());
    for (k, v) in vscode.as_object().unwrap() {
        assert!(!v.is_null() && v != "", "{k} is empty");
    }
    let (status, claude) = Flow::register(
        &s,
        json!({
        "client_name": "Claude", "redirect_uris": ["https://claude.ai/api/mcp/auth_callback"],
        "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
        "token_endpoint_auth_method": "client_secret_post", "scope": "mcp"}),
    );
    assert_eq!(status, 201, "{claude}");
    let secret = claude["client_secret"]
        .as_str()
        .expect("a secret for client_secret_post");
    assert_eq!(claude["client_secret_expires_at"], 0);
    // The secret works at the token endpoint (a code flow with a loopback-less redirect).
    let mut f = Flow::with_client(
        claude["client_id"].as_str().unwrap(),
        Some(secret),
        "https://claude.ai/api/mcp/auth_callback",
    );
    let t = f.tokens(&s);
    assert!(t["access_token"].as_str().unwrap().starts_with("mba_"));
    let mut wrong = Flow::with_client(
        claude["client_id"].as_str().unwrap(),
        Some("mbs_wrong"),
        "https://claude.ai/api/mcp/auth_callback",
    );
    wrong.verifier = f.verifier.clone();
    assert_eq!(
        wrong.refresh(&s, t["refresh_token"].as_str().unwrap()).0,
        401
    );
    // client_secret_basic: the secret in HTTP Basic.
    let (_, basic) = Flow::register(
        &s,
        json!({"client_name": "Basic", "redirect_uris": ["http://localhost:9999/cb"]}),
    );
    assert_eq!(basic["token_endpoint_auth_method"], "client_secret_basic");
    let before = s.cli(&["client", "list"]).lines().count();
    // Bad bodies: clear errors, nothing stored.
    let big = json!({"redirect_uris": ["http://127.0.0.1/cb"], "client_name": "x".repeat(20_000)});
    for (body, ct, status, error) in [
        (
            big.to_string(),
            "application/json",
            413,
            "invalid_client_metadata",
        ),
        (
            "{not json".to_owned(),
            "application/json",
            400,
            "invalid_client_metadata",
        ),
        (
            json!({"redirect_uris": ["http://evil.example/cb"]}).to_string(),
            "application/json",
            400,
            "invalid_redirect_uri",
        ),
        (
            json!({"redirect_uris": ["http://127.0.0.1/cb"]}).to_string(),
            "text/plain",
            400,
            "invalid_client_metadata",
        ),
    ] {
        let (st, _, text) = send(
            agent()
                .post(&s.url("/oauth/register"))
                .set("Content-Type", ct)
                .send_string(&body),
        );
        assert_eq!(st, status, "{text}");
        assert_eq!(json_of(&text)["error"], error);
    }
    assert_eq!(
        s.cli(&["client", "list"]).lines().count(),
        before,
        "nothing stored"
    );
}

#[test]
fn malformed_token_and_consent_requests_get_clear_errors() {
    let s = Setup::start(&[]);
    let f = Flow::new(&s);
    let token = s.url("/oauth/token");
    for (body, ct, needle) in [
        (
            "grant_type=refresh_token&grant_type=authorization_code",
            "application/x-www-form-urlencoded",
            "more than once",
        ),
        (
            "grant_type=%FF%FE",
            "application/x-www-form-urlencoded",
            "not UTF-8",
        ),
        (
            "{\"grant_type\": \"x\"}",
            "application/json",
            "x-www-form-urlencoded",
        ),
    ] {
        let body = format!("client_id={}&{body}", f.client_id);
        let (status, _, text) = send(
            agent()
                .post(&token)
                .set("Content-Type", ct)
                .send_string(&body),
        );
        assert_eq!(status, 400, "{text}");
        let e = json_of(&text);
        assert_eq!(e["error"], "invalid_request");
        assert!(
            e["error_description"].as_str().unwrap().contains(needle),
            "{e}"
        );
    }
    let (status, e) = f.token_request(&s, &[("grant_type", "password")], &[]);
    assert_eq!(
        (status, e["error"].as_str()),
        (400, Some("unsupported_grant_type"))
    );
    // The consent form: duplicated or non-UTF-8 parameters, a forged or missing request.
    for body in [
        "request=a&request=b",
        "account=%C3%28",
        "request=forged.sig&account=ann&password=x&action=approve",
    ] {
        let (status, _, text) = post_form(&s.url("/oauth/authorize"), body, &[]);
        assert_eq!(status, 400, "{body}: {text}");
    }
    let mut g = Flow::new(&s);
    let page = g.page(&g.authorize_url(&s, Some(&s.resource()), &[], &[]));
    // The right request but from another browser (no cookie), or from another site.
    let body = form(&[
        ("request", page.request.as_deref().unwrap()),
        ("account", "ann"),
        ("password", &s.password),
        ("action", "approve"),
    ]);
    assert_eq!(post_form(&s.url("/oauth/authorize"), &body, &[]).0, 400);
    let cookie = g.cookie.clone().unwrap();
    assert_eq!(
        post_form(
            &s.url("/oauth/authorize"),
            &body,
            &[("Cookie", &cookie), ("Origin", "https://evil.example")]
        )
        .0,
        403
    );
    assert_eq!(
        post_form(&s.url("/oauth/authorize"), &body, &[("Cookie", &cookie)]).0,
        303
    );
    // Authorization requests with duplicated parameters get a page, not a redirect.
    let url = format!(
        "{}&client_id=again",
        g.authorize_url(&s, Some(&s.resource()), &[], &[])
    );
    assert_eq!(g.page(&url).status, 400);
}

/// Regression: the consent page kept a consent cookie the browser already carried,
/// so a cookie planted by another site (fixation) bound the form to a value the planter knew.
/// Every new consent form now sets a fresh value, and a form opens only with it.
#[test]
fn every_consent_form_sets_a_fresh_cookie_even_when_the_browser_brings_one() {
    let s = Setup::start(&[]);
    let planted = format!("mb_consent={}", "A".repeat(43));
    let mut f = Flow::new(&s);
    f.cookie = Some(planted.clone());
    let page = f.page(&f.authorize_url(&s, Some(&s.resource()), &[], &[]));
    assert_eq!(page.status, 200, "{}", page.body);
    let fresh = f.cookie.clone().unwrap();
    assert_ne!(fresh, planted, "a fresh cookie replaces the planted one");
    let request = page.request.unwrap();
    let body = form(&[
        ("request", request.as_str()),
        ("account", "ann"),
        ("password", &s.password),
        ("action", "approve"),
    ]);
    let url = s.url("/oauth/authorize");
    assert_eq!(post_form(&url, &body, &[("Cookie", &planted)]).0, 400);
    // A second form in the same browser gets another value again.
    f.page(&f.authorize_url(&s, Some(&s.resource()), &[], &[]));
    assert_ne!(f.cookie.clone().unwrap(), fresh);
}

#[test]
fn repeated_wrong_passwords_are_throttled_per_account() {
    let s = Setup::start(&[]);
    let mut f = Flow::new(&s);
    let page = f.page(&f.authorize_url(&s, Some(&s.resource()), &[], &[]));
    let request = page.request.unwrap();
    for _ in 0..5 {
        assert_eq!(
            f.submit(&s, &request, "ann", "wrong password!!", "approve")
                .0,
            401
        );
    }
    let (status, location, body) = f.submit(&s, &request, "ann", &s.password, "approve");
    assert_eq!(
        (status, location),
        (429, None),
        "even the right password waits"
    );
    assert!(body.contains("Too many failed sign-ins"), "{body}");
    // Another account of the bridge is not locked out.
    let pw = account(
        &s.relay,
        &["add", "bob", "--bridge", "b", "--role", "reviewer"],
    );
    assert_eq!(f.submit(&s, &request, "bob", &pw, "approve").0, 303);
    // Denying redirects with access_denied.
    let (status, location, _) = f.submit(&s, &request, "", "", "deny");
    assert_eq!(status, 303);
    assert_eq!(query(&location.unwrap())["error"], "access_denied");
}

#[test]
fn registrations_and_tokens_survive_a_relay_restart() {
    let mut s = Setup::start(&[]);
    let mut f = Flow::new(&s);
    let t = f.tokens(&s);
    s.relay.restart();
    s.relay.wait_ready(1);
    let access = t["access_token"].as_str().unwrap();
    assert!(wait_until(Duration::from_secs(20), || call_status(
        &s, access
    )
    .0 == 200));
    let (status, t2) = f.refresh(&s, t["refresh_token"].as_str().unwrap());
    assert_eq!(status, 200, "{t2}");
    // The registration too: a new authorization with the same client id.
    let mut g = Flow::with_client(&f.client_id, None, "http://127.0.0.1:9/callback");
    assert_eq!(g.tokens(&s)["token_type"], "Bearer");
}

/// A tiny HTTP server on loopback answering every GET with `body` (a client ID metadata
/// document, a JWK Set).
fn serve_json(bodies: Arc<Mutex<HashMap<String, String>>>) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in l.incoming().map_while(Result::ok) {
            let bodies = bodies.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(conn.try_clone().unwrap());
                let mut first = String::new();
                let _ = r.read_line(&mut first);
                loop {
                    let mut l = String::new();
                    if r.read_line(&mut l).unwrap_or(0) == 0 || l == "\r\n" {
                        break;
                    }
                }
                let path = first.split_whitespace().nth(1).unwrap_or("/").to_owned();
                let body = bodies
                    .lock()
                    .unwrap()
                    .get(&path)
                    .cloned()
                    .unwrap_or_default();
                let mut conn = conn;
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let mut sink = [0u8; 1];
                let _ = conn.read(&mut sink);
            });
        }
    });
    port
}

#[test]
fn client_id_metadata_documents_on_private_addresses_are_refused() {
    let s = Setup::start(&[]);
    let bodies = Arc::new(Mutex::new(HashMap::new()));
    let port = serve_json(bodies.clone());
    for id in [
        format!("https://127.0.0.1:{port}/client.json"),
        "https://localhost/client.json".to_owned(),
        format!("http://127.0.0.1:{port}/client.json"),
    ] {
        let mut f = Flow::with_client(&id, None, "http://127.0.0.1/cb");
        let page = f.page(&f.authorize_url(&s, Some(&s.resource()), &[], &[]));
        assert_eq!(page.status, 401, "{id}: {}", page.body);
    }
}

#[test]
fn a_client_id_metadata_document_client_signs_in_with_none_and_private_key_jwt_and_dpop_binds_tokens()
 {
    use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
    let s = Setup::start(&["--oauth-insecure-client-documents"]);
    let bodies = Arc::new(Mutex::new(HashMap::new()));
    let port = serve_json(bodies.clone());
    let base = format!("http://127.0.0.1:{port}");
    // A public document client.
    let id = format!("{base}/public.json");
    bodies.lock().unwrap().insert("/public.json".into(), json!({"client_id": id, "client_name": "Doc Client",
        "redirect_uris": ["https://doc.example/cb"], "grant_types": ["authorization_code", "refresh_token"],
        "token_endpoint_auth_method": "none"}).to_string());
    let mut f = Flow::with_client(&id, None, "https://doc.example/cb");
    let page = f.page(&f.authorize_url(&s, Some(&s.resource()), &[], &[]));
    assert!(
        page.body.contains("Doc Client (127.0.0.1)"),
        "{}",
        page.body
    );
    assert!(page.body.contains("doc.example"));
    let t = f.tokens(&s);
    assert_eq!(call_status(&s, t["access_token"].as_str().unwrap()).0, 200);
    // A document whose client_id is not its URL is refused.
    bodies.lock().unwrap().insert("/liar.json".into(), json!({"client_id": "https://other.example/x.json", "redirect_uris": ["https://doc.example/cb"]}).to_string());
    let mut liar = Flow::with_client(&format!("{base}/liar.json"), None, "https://doc.example/cb");
    assert_eq!(
        liar.page(&liar.authorize_url(&s, Some(&s.resource()), &[], &[]))
            .status,
        401
    );
    // private_key_jwt with an ES256 key in the document's jwks.
    let sk = p256::ecdsa::SigningKey::random(&mut rand::rngs::OsRng);
    let point = sk.verifying_key().to_encoded_point(false);
    let jwk = json!({"kty": "EC", "crv": "P-256", "kid": "k1", "alg": "ES256",
        "x": URL_SAFE_NO_PAD.encode(point.x().unwrap()), "y": URL_SAFE_NO_PAD.encode(point.y().unwrap())});
    let der = p256::pkcs8::EncodePrivateKey::to_pkcs8_der(&sk).unwrap();
    let key = EncodingKey::from_ec_der(der.as_bytes());
    let jwt_id = format!("{base}/jwt.json");
    bodies.lock().unwrap().insert("/jwt.json".into(), json!({"client_id": jwt_id, "client_name": "JWT Client",
        "redirect_uris": ["https://doc.example/cb"], "grant_types": ["authorization_code", "refresh_token"],
        "token_endpoint_auth_method": "private_key_jwt", "token_endpoint_auth_methods_supported": ["private_key_jwt", "none"],
        "jwks": {"keys": [jwk.clone()]}}).to_string());
    let mut f = Flow::with_client(&jwt_id, None, "https://doc.example/cb");
    let q = f.approve(&s, Some(&s.resource()), "ann", &s.password);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut h = Header::new(Algorithm::ES256);
    h.kid = Some("k1".into());
    let assertion = |jti: &str| {
        encode(&h, &json!({"iss": jwt_id, "sub": jwt_id, "aud": format!("{}/oauth/token", s.relay.public()),
        "exp": now + 60, "jti": jti}), &key).unwrap()
    };
    let a1 = assertion("one");
    let exchange = [
        ("grant_type", "authorization_code"),
        ("code", q["code"].as_str()),
        ("redirect_uri", "https://doc.example/cb"),
        ("code_verifier", f.verifier.as_str()),
        (
            "client_assertion_type",
            "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
        ),
        ("client_assertion", a1.as_str()),
    ];
    let (status, _, text) = post_form(&s.url("/oauth/token"), &form(&exchange), &[]);
    assert_eq!(status, 200, "{text}");
    let t = json_of(&text);
    // The same assertion again is a replay; a fresh one refreshes; `none` is allowed too.
    let refresh = t["refresh_token"].as_str().unwrap();
    let replay = [
        ("grant_type", "refresh_token"),
        ("refresh_token", refresh),
        (
            "client_assertion_type",
            "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
        ),
        ("client_assertion", a1.as_str()),
    ];
    assert_eq!(
        post_form(&s.url("/oauth/token"), &form(&replay), &[]).0,
        401
    );
    let a2 = assertion("two");
    let fresh = [
        ("grant_type", "refresh_token"),
        ("refresh_token", refresh),
        (
            "client_assertion_type",
            "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
        ),
        ("client_assertion", a2.as_str()),
    ];
    let (status, _, text) = post_form(&s.url("/oauth/token"), &form(&fresh), &[]);
    assert_eq!(status, 200, "{text}");
    // DPoP: a proof at the token endpoint binds the tokens to its key.
    let dpop_key = p256::ecdsa::SigningKey::random(&mut rand::rngs::OsRng);
    let dp = dpop_key.verifying_key().to_encoded_point(false);
    let dpop_jwk = json!({"kty": "EC", "crv": "P-256", "x": URL_SAFE_NO_PAD.encode(dp.x().unwrap()), "y": URL_SAFE_NO_PAD.encode(dp.y().unwrap())});
    let dpop_der = p256::pkcs8::EncodePrivateKey::to_pkcs8_der(&dpop_key).unwrap();
    let dpop_enc = EncodingKey::from_ec_der(dpop_der.as_bytes());
    let proof = |method: &str, htu: &str, ath: Option<&str>| {
        let mut h = Header::new(Algorithm::ES256);
        h.typ = Some("dpop+jwt".into());
        h.jwk = Some(serde_json::from_value(dpop_jwk.clone()).unwrap());
        let mut c =
            json!({"jti": crate::util::random_token(16), "htm": method, "htu": htu, "iat": now});
        if let Some(t) = ath {
            c["ath"] = json!(URL_SAFE_NO_PAD.encode(Sha256::digest(t.as_bytes())));
        }
        encode(&h, &c, &dpop_enc).unwrap()
    };
    let mut f = Flow::new(&s);
    let q = f.approve(&s, Some(&s.resource()), "ann", &s.password);
    let p = proof("POST", &format!("{}/oauth/token", s.relay.public()), None);
    let (status, t) = f.token_request(
        &s,
        &[
            ("grant_type", "authorization_code"),
            ("code", &q["code"]),
            ("redirect_uri", &f.redirect_uri),
            ("code_verifier", &f.verifier),
        ],
        &[("DPoP", &p)],
    );
    assert_eq!(status, 200, "{t}");
    assert_eq!(t["token_type"], "DPoP");
    let access = t["access_token"].as_str().unwrap();
    assert_eq!(
        call_status(&s, access).0,
        401,
        "a DPoP-bound token is not a bearer token"
    );
    let mcp = format!("{}/b/b/mcp", s.relay.public());
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}).to_string();
    let dpop_call = |p: &str| {
        send(
            agent()
                .post(&s.url("/b/b/mcp"))
                .set("Authorization", &format!("DPoP {access}"))
                .set("DPoP", p)
                .set("Content-Type", "application/json")
                .set("Accept", "application/json, text/event-stream")
                .send_string(&init),
        )
        .0
    };
    let good = proof("POST", &mcp, Some(access));
    assert_eq!(dpop_call(&good), 200);
    assert_eq!(dpop_call(&good), 401, "a proof is single use");
    assert_eq!(
        dpop_call(&proof("POST", &mcp, None)),
        401,
        "ath is required"
    );
    // Refreshing a DPoP-bound grant needs a proof of the same key.
    let (status, _) = f.refresh(&s, t["refresh_token"].as_str().unwrap());
    assert_eq!(status, 400);
    let p = proof("POST", &format!("{}/oauth/token", s.relay.public()), None);
    let (status, t2) = f.token_request(
        &s,
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", t["refresh_token"].as_str().unwrap()),
        ],
        &[("DPoP", &p)],
    );
    assert_eq!(
        (status, t2["token_type"].as_str()),
        (200, Some("DPoP")),
        "{t2}"
    );
}

/// Regression (Chromium, interop): the consent page was served with `Referrer-Policy:
/// no-referrer`, so browsers sent `Origin: null` on its form POST, and the relay refused every
/// sign-in as "sent from another site".
#[test]
fn a_browser_posting_the_consent_form_with_origin_null_from_the_same_site_is_accepted() {
    let s = Setup::start(&[]);
    let mut f = Flow::new(&s);
    let url = f.authorize_url(&s, Some(&s.resource()), &[], &[]);
    let (_, headers, _) = send(agent().get(&url).call());
    assert_eq!(
        headers.get("referrer-policy").map(String::as_str),
        Some("same-origin"),
        "same-origin POSTs then carry the real Origin"
    );
    let page = f.page(&url);
    let body = form(&[
        ("request", page.request.as_deref().unwrap()),
        ("account", "ann"),
        ("password", &s.password),
        ("action", "approve"),
    ]);
    let cookie = f.cookie.clone().unwrap();
    let (status, _, text) = post_form(
        &s.url("/oauth/authorize"),
        &body,
        &[
            ("Cookie", &cookie),
            ("Origin", "null"),
            ("Sec-Fetch-Site", "same-origin"),
        ],
    );
    assert_eq!(status, 303, "{text}");
    // `Origin: null` from another site (or without Fetch metadata) is still refused.
    let page = f.page(&url);
    let body = form(&[
        ("request", page.request.as_deref().unwrap()),
        ("account", "ann"),
        ("password", &s.password),
        ("action", "approve"),
    ]);
    for site in [Some("cross-site"), None] {
        let mut extra = vec![("Cookie", cookie.as_str()), ("Origin", "null")];
        if let Some(v) = site {
            extra.push(("Sec-Fetch-Site", v));
        }
        assert_eq!(
            post_form(&s.url("/oauth/authorize"), &body, &extra).0,
            403,
            "{site:?}"
        );
    }
}

/// A DPoP proof (RFC 9449 §4) for `method` `htu` (and `ath` of an access token), signed with a
/// fresh P-256 key.
pub(crate) fn dpop_proof(method: &str, htu: &str, ath: Option<&str>) -> String {
    use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
    let key = p256::ecdsa::SigningKey::random(&mut rand::rngs::OsRng);
    let point = key.verifying_key().to_encoded_point(false);
    let jwk = json!({"kty": "EC", "crv": "P-256", "x": URL_SAFE_NO_PAD.encode(point.x().unwrap()),
        "y": URL_SAFE_NO_PAD.encode(point.y().unwrap())});
    let der = p256::pkcs8::EncodePrivateKey::to_pkcs8_der(&key).unwrap();
    let mut h = Header::new(Algorithm::ES256);
    h.typ = Some("dpop+jwt".into());
    h.jwk = Some(serde_json::from_value(jwk).unwrap());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut c =
        json!({"jti": crate::util::random_token(16), "htm": method, "htu": htu, "iat": now});
    if let Some(t) = ath {
        c["ath"] = json!(URL_SAFE_NO_PAD.encode(Sha256::digest(t.as_bytes())));
    }
    encode(&h, &c, &EncodingKey::from_ec_der(der.as_bytes())).unwrap()
}
