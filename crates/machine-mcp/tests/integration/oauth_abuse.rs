//! OAuth under abuse: regression tests for what a fresh tester broke (issue 10's tester report):
//! parallel sign-in guesses, slow bodies on the OAuth endpoints, a lockout the owner could not
//! lift, refresh retries that killed the grant, client proxies, hostile client metadata.

use std::{
    io::{Read, Write},
    net::TcpStream,
    process::Command,
    sync::Arc,
    time::{Duration, Instant},
};

use serde_json::json;

use crate::{
    oauth::{Flow, Setup, account, agent, form, post_form, send},
    util::bin,
};

/// The consent form of `f` for `s`'s runtime: the sealed request and the cookie.
fn consent(s: &Setup, f: &mut Flow) -> (String, String) {
    let url = f.authorize_url(s, Some(&s.resource()), &[], &[]);
    let page = f.page(&url);
    (page.request.unwrap(), f.cookie.clone().unwrap())
}

fn sign_in(
    s: &Setup,
    request: &str,
    cookie: &str,
    account: &str,
    password: &str,
    extra: &[(&str, &str)],
) -> u16 {
    let body = form(&[
        ("request", request),
        ("account", account),
        ("password", password),
        ("action", "approve"),
    ]);
    let mut headers = vec![("Cookie", cookie)];
    headers.extend_from_slice(extra);
    post_form(&s.url("/oauth/authorize"), &body, &headers).0
}

#[test]
fn guesses_sent_in_parallel_are_throttled_like_sequential_ones() {
    let s = Arc::new(Setup::start(&[]));
    let mut f = Flow::new(&s);
    let (request, cookie) = consent(&s, &mut f);
    let threads: Vec<_> = (0..12)
        .map(|i| {
            let (s, request, cookie) = (s.clone(), request.clone(), cookie.clone());
            std::thread::spawn(move || {
                sign_in(
                    &s,
                    &request,
                    &cookie,
                    "ann",
                    &format!("wrong password {i}"),
                    &[],
                )
            })
        })
        .collect();
    let statuses: Vec<u16> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let checked = statuses.iter().filter(|&&c| c == 401).count();
    assert!(
        checked <= 5,
        "{checked} of 12 parallel guesses were checked: {statuses:?}"
    );
    assert!(
        statuses.iter().all(|&c| c == 401 || c == 429),
        "{statuses:?}"
    );
    assert_eq!(sign_in(&s, &request, &cookie, "ann", &s.password, &[]), 429);
}

#[test]
fn a_new_password_lifts_the_accounts_sign_in_lock() {
    let s = Setup::start(&[]);
    let mut f = Flow::new(&s);
    let (request, cookie) = consent(&s, &mut f);
    for _ in 0..5 {
        assert_eq!(
            sign_in(&s, &request, &cookie, "ann", "wrong password!!", &[]),
            401
        );
    }
    assert_eq!(sign_in(&s, &request, &cookie, "ann", &s.password, &[]), 429);
    let fresh = s.cli(&["account", "rotate-password", "ann", "--bridge", "b"]);
    assert_eq!(sign_in(&s, &request, &cookie, "ann", &fresh, &[]), 303);
}

#[test]
fn behind_a_proxy_on_this_host_the_forwarded_address_is_throttled_not_the_proxy() {
    let s = Setup::start(&["--trusted-proxy", "127.0.0.1"]);
    let pw = account(
        &s.relay,
        &["add", "bob", "--bridge", "b", "--role", "reviewer"],
    );
    let mut f = Flow::new(&s);
    let (request, cookie) = consent(&s, &mut f);
    // Twenty failures from one client (spread over accounts so no account locks first)...
    for i in 0..20 {
        let name = format!("nobody{i}");
        let status = sign_in(
            &s,
            &request,
            &cookie,
            &name,
            "wrong password!!",
            &[("X-Forwarded-For", "203.0.113.7")],
        );
        assert_eq!(status, 401);
    }
    assert_eq!(
        sign_in(
            &s,
            &request,
            &cookie,
            "bob",
            &pw,
            &[("X-Forwarded-For", "203.0.113.7")]
        ),
        429
    );
    // ...do not lock out another client of the same proxy.
    assert_eq!(
        sign_in(
            &s,
            &request,
            &cookie,
            "bob",
            &pw,
            &[("X-Forwarded-For", "198.51.100.9")]
        ),
        303
    );
}

/// Regression: `X-Forwarded-For` was believed from any peer on this host, so a
/// client behind a tunnel that passes its header through picked a fresh address per guess. Only a
/// `--trusted-proxy` is believed now.
#[test]
fn forwarded_addresses_from_a_peer_that_is_no_trusted_proxy_are_ignored() {
    let s = Setup::start(&[]);
    let mut f = Flow::new(&s);
    let (request, cookie) = consent(&s, &mut f);
    for i in 0..20 {
        let spoofed = format!("203.0.113.{i}");
        let status = sign_in(
            &s,
            &request,
            &cookie,
            &format!("nobody{i}"),
            "wrong password!!",
            &[("X-Forwarded-For", spoofed.as_str())],
        );
        assert_eq!(status, 401);
    }
    assert_eq!(
        sign_in(
            &s,
            &request,
            &cookie,
            "ann",
            &s.password,
            &[("X-Forwarded-For", "198.51.100.9")]
        ),
        429,
        "the peer's own address was throttled, whatever it claimed"
    );
}

#[test]
fn slow_bodies_on_the_oauth_endpoints_time_out() {
    let s = Setup::start(&[]);
    let started = Instant::now();
    let mut socks: Vec<TcpStream> = ["/oauth/token", "/oauth/register", "/oauth/authorize", "/oauth/revoke"]
        .iter()
        .map(|path| {
            let mut t = TcpStream::connect(("127.0.0.1", s.relay.port)).unwrap();
            let ct = if *path == "/oauth/register" { "application/json" } else { "application/x-www-form-urlencoded" };
            write!(t, "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {ct}\r\nContent-Length: 100\r\n\r\nabc").unwrap();
            t
        })
        .collect();
    for t in &mut socks {
        t.set_read_timeout(Some(Duration::from_secs(45))).unwrap();
        let mut buf = [0u8; 64];
        let n = t.read(&mut buf).unwrap_or(0);
        let head = String::from_utf8_lossy(&buf[..n]).into_owned();
        assert!(head.starts_with("HTTP/1.1 408"), "no timeout: {head:?}");
    }
    assert!(started.elapsed() < Duration::from_secs(45));
}

#[test]
fn refresh_retries_past_the_limit_are_refused_without_ending_the_grant() {
    let s = Setup::start(&[]);
    let mut f = Flow::new(&s);
    let t = f.tokens(&s);
    let r0 = t["refresh_token"].as_str().unwrap().to_owned();
    let mut last = None;
    let mut refused = 0;
    for _ in 0..40 {
        match f.refresh(&s, &r0) {
            (200, pair) => last = Some(pair),
            (400, e) => {
                assert_eq!(e["error"], "invalid_grant", "{e}");
                refused += 1;
            }
            other => panic!("{other:?}"),
        }
    }
    let last = last.expect("some retries within the grace get a pair");
    assert!(refused > 0, "the retries are bounded");
    let (status, _) = f.refresh(&s, last["refresh_token"].as_str().unwrap());
    assert_eq!(status, 200, "the grant lives on");
}

#[test]
fn auth_none_and_wildcard_origins_are_refused_at_start() {
    for args in [
        vec![
            "relay",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--auth",
            "none",
            "--public-url",
            "https://relay.example.com",
        ],
        vec![
            "up",
            "--listen",
            "127.0.0.1:0",
            "--auth",
            "none",
            "--public-url",
            "https://machine.example.com",
        ],
        vec![
            "relay",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--allowed-origin",
            "*",
        ],
        vec![
            "relay",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--allowed-origin",
            "null",
        ],
        vec![
            "relay",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--allowed-origin",
            "https://my.app/path",
        ],
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new(bin())
            .args(&args)
            .args(["--state-dir", dir.path().to_str().unwrap()])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} started");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--auth none") || err.contains("--allowed-origin"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn hostile_client_metadata_is_refused_or_defused() {
    let s = Setup::start(&[]);
    for (body, error) in [
        (
            json!({"redirect_uris": ["https://a.example/cb"], "token_endpoint_auth_method": "private_key_jwt", "jwks_uri": "https://169.254.169.254/keys"}),
            "invalid_client_metadata",
        ),
        (
            json!({"redirect_uris": ["https://a.example/cb"], "token_endpoint_auth_method": "private_key_jwt", "jwks_uri": "http://example.com/keys"}),
            "invalid_client_metadata",
        ),
        (
            json!({"redirect_uris": ["https://user:pw@a.example/cb"]}),
            "invalid_redirect_uri",
        ),
        (
            json!({"redirect_uris": ["https://*.example.com/cb"]}),
            "invalid_redirect_uri",
        ),
    ] {
        let (status, answer) = Flow::register(&s, body.clone());
        assert_eq!(
            (status, answer["error"].as_str()),
            (400, Some(error)),
            "{body}: {answer}"
        );
    }
    // A right-to-left override in the name cannot rewrite the consent page around it.
    let (status, reg) = Flow::register(
        &s,
        json!({"client_name": "Evil\u{202e}Client", "redirect_uris": ["http://127.0.0.1/cb"], "token_endpoint_auth_method": "none"}),
    );
    assert_eq!(status, 201);
    assert_eq!(reg["client_name"], "EvilClient");
    let mut f = Flow::with_client(
        reg["client_id"].as_str().unwrap(),
        None,
        "http://127.0.0.1:9/cb",
    );
    let page = f.page(&f.authorize_url(&s, Some(&s.resource()), &[], &[]));
    assert!(!page.body.contains('\u{202e}'));
}

#[test]
fn account_names_are_unique_without_case_and_blank_passwords_are_refused() {
    let s = Setup::start(&[]);
    let mut a = vec!["relay", "account", "add", "Ann", "--bridge", "b"];
    let store = s.relay.store_args();
    a.extend(store.iter().map(String::as_str));
    let out = Command::new(bin()).args(&a).output().unwrap();
    assert!(!out.status.success(), "Ann beside ann");
    let mut a = vec![
        "relay",
        "account",
        "add",
        "carl",
        "--bridge",
        "b",
        "--password-stdin",
    ];
    a.extend(store.iter().map(String::as_str));
    let mut child = Command::new(bin())
        .args(&a)
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"              \n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success(), "a blank password was taken");
    // Sign-in takes the name in any case.
    let mut f = Flow::new(&s);
    let (request, cookie) = consent(&s, &mut f);
    assert_eq!(sign_in(&s, &request, &cookie, "ANN", &s.password, &[]), 303);
}

#[test]
fn a_dpop_bound_token_is_challenged_with_the_dpop_scheme() {
    let s = Setup::start(&[]);
    let mut f = Flow::new(&s);
    let q = f.approve(&s, Some(&s.resource()), "ann", &s.password);
    let proof =
        crate::oauth::dpop_proof("POST", &format!("{}/oauth/token", s.relay.public()), None);
    let (status, t) = f.token_request(
        &s,
        &[
            ("grant_type", "authorization_code"),
            ("code", &q["code"]),
            ("redirect_uri", &f.redirect_uri),
            ("code_verifier", &f.verifier),
        ],
        &[("DPoP", &proof)],
    );
    assert_eq!(
        (status, t["token_type"].as_str()),
        (200, Some("DPoP")),
        "{t}"
    );
    let access = t["access_token"].as_str().unwrap();
    let (status, headers, _) = send(
        agent()
            .post(&s.url("/b/b/mcp"))
            .set("Authorization", &format!("DPoP {access}"))
            .set("Content-Type", "application/json")
            .send_string("{}"),
    );
    assert_eq!(status, 401);
    let challenge = &headers["www-authenticate"];
    assert!(challenge.starts_with("DPoP "), "{challenge}");
    assert!(
        challenge.contains("algs=\"ES256\"") && challenge.contains("invalid_token"),
        "{challenge}"
    );
}
