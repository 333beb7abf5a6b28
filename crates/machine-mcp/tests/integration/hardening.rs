//! Relay hardening (issue 12): what an unauthenticated peer on the network can hold — idle and
//! half-sent requests, bodies before authentication, connections past the caps, daemon sockets
//! that never authenticate — and what a public listener must not serve.

use std::{
    io::{Read, Write},
    net::TcpStream,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use crate::{
    net::Relay,
    relay::{fake_socket, read_frame},
    util::bin,
};

/// Whether the relay closes `s` within `within` (an answer before the close is read and
/// returned).
fn closed_within(s: &mut TcpStream, within: Duration) -> (bool, String) {
    let end = Instant::now() + within;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return (false, String::from_utf8_lossy(&got).into_owned());
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => return (true, String::from_utf8_lossy(&got).into_owned()),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return (false, String::from_utf8_lossy(&got).into_owned());
            }
            Err(_) => return (true, String::from_utf8_lossy(&got).into_owned()),
        }
    }
}

fn connect(relay: &Relay) -> TcpStream {
    TcpStream::connect(("127.0.0.1", relay.port)).unwrap()
}

#[test]
fn silent_and_half_sent_requests_are_closed_and_a_body_waits_for_authentication() {
    let relay = Relay::start(&[]);
    relay.add_bridge("b1");
    let mut silent = connect(&relay);
    let mut half = connect(&relay);
    half.write_all(b"POST /b/b1/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
        .unwrap();
    // A body that never completes, without credentials: refused from its headers at once.
    let mut body = connect(&relay);
    body.write_all(
        b"POST /b/b1/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"jsonrpc\":",
    )
    .unwrap();
    let started = Instant::now();
    let (_, answer) = closed_within(&mut body, Duration::from_secs(3));
    assert!(
        answer.starts_with("HTTP/1.1 401"),
        "an unauthenticated body is refused before it is read: {answer:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    // Nothing and half a header are closed after the header timeout (10 s).
    let (closed, _) = closed_within(&mut silent, Duration::from_secs(20));
    assert!(closed, "a silent connection stays open");
    let (closed, answer) = closed_within(&mut half, Duration::from_secs(5));
    assert!(closed, "a half-sent header stays open: {answer:?}");
}

/// Sends `GET /healthz` on `s` (kept alive) and returns the head of the answer.
fn healthz_on(s: &mut TcpStream) -> String {
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    let end = Instant::now() + Duration::from_secs(5);
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") && Instant::now() < end {
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

fn wait_for_recovery(relay: &Relay) {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        match ureq::get(&format!("{}/healthz", relay.direct())).call() {
            Ok(r) if r.status() == 200 => break,
            _ if Instant::now() < end => std::thread::sleep(Duration::from_millis(100)),
            other => panic!("no recovery: {other:?}"),
        }
    }
}

/// At the connection cap, a connection that never completed a request head gives way to a new
/// one, oldest first; connections that completed one are not shed, so past the cap with only
/// those a new connection is closed at once; and the relay serves again once they close.
#[test]
fn at_the_cap_the_oldest_headless_connection_gives_way_and_otherwise_the_next_is_closed() {
    let relay = Relay::start(&["--max-connections", "6"]);
    let mut idle: Vec<TcpStream> = (0..6).map(|_| connect(&relay)).collect();
    let mut newcomer = connect(&relay);
    let (shed, _) = closed_within(&mut idle[0], Duration::from_secs(3));
    assert!(
        shed,
        "the oldest connection without a request head is kept at the cap"
    );
    let answer = healthz_on(&mut newcomer);
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "the newcomer is served: {answer:?}"
    );
    drop(idle);
    drop(newcomer);
    wait_for_recovery(&relay);

    let mut busy = Vec::new();
    let end = Instant::now() + Duration::from_secs(10);
    while busy.len() < 6 && Instant::now() < end {
        let mut s = connect(&relay);
        if healthz_on(&mut s).starts_with("HTTP/1.1 200") {
            busy.push(s);
        }
    }
    assert_eq!(
        busy.len(),
        6,
        "six kept-alive connections that completed a request"
    );
    let mut extra = connect(&relay);
    let (closed, _) = closed_within(&mut extra, Duration::from_secs(3));
    assert!(
        closed,
        "a seventh connection is kept while six completed a request"
    );
    drop(busy);
    wait_for_recovery(&relay);
    assert!(
        relay.metric("machine_mcp_relay_connections_refused_total") >= 1,
        "{}",
        relay.metrics()
    );
}

#[test]
fn the_open_file_limit_is_raised_to_the_hard_limit() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("relay.db");
    let script = format!(
        "ulimit -Sn 256 && exec '{}' relay serve --listen 127.0.0.1:0 --store '{}'",
        bin().display(),
        store.display()
    );
    let mut child = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // The limit is raised before anything else; wait until the relay listens.
    let err = child.stderr.take().unwrap();
    let lines = std::io::BufRead::lines(std::io::BufReader::new(err));
    for line in lines.map_while(Result::ok) {
        if line.contains("listening on") {
            break;
        }
    }
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let line = text
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let f: Vec<&str> = line.split_whitespace().collect();
    let (soft, hard) = (f[3], f[4]);
    let want = match hard {
        "unlimited" => "1048576".to_owned(),
        h => h.parse::<u64>().unwrap().min(1 << 20).to_string(),
    };
    assert_eq!(
        soft, want,
        "the soft limit was not raised to the hard limit ({line})"
    );
}

type Ws = tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<TcpStream>>;

/// Whether the relay ends `ws` within `within` (a close frame, an error or EOF).
fn ends_within(ws: &mut Ws, within: Duration) -> bool {
    if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_mut() {
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
    }
    let end = Instant::now() + within;
    while Instant::now() < end {
        match ws.read() {
            Ok(tungstenite::Message::Close(_)) => return true,
            Ok(_) => {}
            Err(tungstenite::Error::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                // Keep the socket busy the way the attack does.
                if ws.send(tungstenite::Message::Ping(vec![1].into())).is_err() {
                    return true;
                }
            }
            Err(_) => return true,
        }
    }
    false
}

#[test]
fn unverified_daemon_sockets_are_bounded_in_time_bytes_and_number() {
    let relay = Relay::start(&["--hello-deadline-ms", "1500"]);
    // Pings do not extend the hello deadline.
    let mut pinging = fake_socket(&relay);
    assert_eq!(read_frame(&mut pinging).unwrap()["type"], "welcome");
    let started = Instant::now();
    assert!(
        ends_within(&mut pinging, Duration::from_secs(6)),
        "a socket that only pings stays"
    );
    assert!(started.elapsed() < Duration::from_secs(6));
    // An unfinished multi-megabyte message before the hello ends the socket at once.
    let relay = Relay::start(&[]);
    let mut big = fake_socket(&relay);
    let _ = read_frame(&mut big).unwrap();
    let frame = tungstenite::protocol::frame::Frame::message(
        vec![b'x'; 2 << 20],
        tungstenite::protocol::frame::coding::OpCode::Data(
            tungstenite::protocol::frame::coding::Data::Text,
        ),
        false,
    );
    let _ = big.send(tungstenite::Message::Frame(frame));
    let started = Instant::now();
    assert!(
        ends_within(&mut big, Duration::from_secs(5)),
        "2 MiB before the hello is held"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "ended by the hello deadline, not the byte budget"
    );
    // At most 64 unverified sockets at once: the next upgrade is refused with 503.
    let held: Vec<Ws> = (0..64).map(|_| fake_socket(&relay)).collect();
    let url = format!("ws://127.0.0.1:{}/daemon/v1/connect", relay.port);
    match tungstenite::connect(url) {
        Err(tungstenite::Error::Http(r)) => assert_eq!(r.status().as_u16(), 503),
        other => panic!(
            "a 65th unverified socket was accepted: {:?}",
            other.map(|_| ())
        ),
    }
    drop(held);
}

#[test]
fn metrics_and_the_daemon_endpoint_refuse_what_a_public_listener_should_not_serve() {
    let relay = Relay::start(&[]);
    let code = relay.add_bridge("b1");
    // Metrics: local monitoring only (a request a reverse proxy forwards for a public name: 404).
    let url = format!("{}/metrics", relay.direct());
    assert_eq!(ureq::get(&url).call().unwrap().status(), 200);
    match ureq::get(&url).set("Host", "relay.example.com").call() {
        Err(ureq::Error::Status(404, _)) => {}
        other => panic!(
            "metrics served for a public host: {:?}",
            other.map(|r| r.status())
        ),
    }
    // The daemon endpoint refuses a browser page's socket (a foreign Origin) and a foreign Host.
    for (name, value) in [("Origin", "https://evil.example"), ("Host", "evil.example")] {
        let host = match name {
            "Host" => value.to_owned(),
            _ => format!("127.0.0.1:{}", relay.port),
        };
        let mut req = tungstenite::http::Request::builder()
            .uri(format!("ws://127.0.0.1:{}/daemon/v1/connect", relay.port))
            .header("Host", host);
        if name != "Host" {
            req = req.header(name, value);
        }
        let req = req
            .header("Connection", "Upgrade")
            .header("Upgrade", "websocket")
            .header("Sec-WebSocket-Version", "13")
            .header(
                "Sec-WebSocket-Key",
                tungstenite::handshake::client::generate_key(),
            )
            .body(())
            .unwrap();
        match tungstenite::connect(req) {
            Err(tungstenite::Error::Http(r)) => assert_eq!(r.status().as_u16(), 403, "{name}"),
            other => panic!("{name} {value}: {:?}", other.map(|_| ())),
        }
    }
    // One close reason for every refused hello: an unknown key and a bad signature look alike.
    let dir = tempfile::tempdir().unwrap();
    let key = daemon::identity::DeviceKey::load_or_create(&dir.path().join("k")).unwrap();
    let mut enroll = fake_socket(&relay);
    let _ = read_frame(&mut enroll).unwrap();
    enroll
        .send(tungstenite::Message::Text(
            json!({"type": "enroll", "code": code, "public_key": key.public_key()})
                .to_string()
                .into(),
        ))
        .unwrap();
    let key_id = read_frame(&mut enroll).unwrap()["key_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let reason = |key_id: &str, sign: bool| -> String {
        let mut ws = fake_socket(&relay);
        let welcome: Value = read_frame(&mut ws).unwrap();
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let t = protocol::frame::hello_transcript(
            &relay.public(),
            welcome["challenge"].as_str().unwrap(),
            "b1",
            "inst_x",
            ts,
        );
        let signature = if sign {
            key.sign(&t)
        } else {
            key.sign(b"other")
        };
        ws.send(tungstenite::Message::Text(
            json!({"type": "hello", "protocol": 1, "bridge": "b1", "instance_id": "inst_x", "key_id": key_id,
                   "timestamp": ts, "signature": signature, "version": "test", "revision": 3})
            .to_string()
            .into(),
        ))
        .unwrap();
        loop {
            match ws.read() {
                Ok(tungstenite::Message::Close(Some(f))) => {
                    return format!("{} {}", u16::from(f.code), f.reason);
                }
                Ok(_) => {}
                Err(e) => return format!("error {e}"),
            }
        }
    };
    let unknown = reason("key_000000000000", true);
    let forged = reason(&key_id, false);
    assert!(unknown.starts_with("4001 "), "{unknown}");
    assert_eq!(
        unknown, forged,
        "the close reason tells a known key from an unknown one"
    );
}

/// A daemon that spent its code but never saw the relay's answer (killed, timed out) enrolls
/// again with the same code and its own key, and gets the same device key; another machine
/// presenting the spent code is refused.
#[test]
fn a_spent_code_enrolls_again_only_the_key_that_spent_it() {
    let relay = Relay::start(&[]);
    let code = relay.add_bridge("b1");
    let ws = crate::util::Tree::new();
    let state = tempfile::tempdir().unwrap();
    let mut first = relay.daemon(state.path(), ws.path(), Some(&code), &[]);
    first.wait_log("connected to the relay and ready", Duration::from_secs(20));
    first.kill();
    // The key stays in the state directory; the answer is as good as lost.
    std::fs::remove_file(state.path().join("daemon/enrollment.json")).unwrap();
    let again = relay.daemon(state.path(), ws.path(), Some(&code), &[]);
    again.wait_log("connected to the relay and ready", Duration::from_secs(20));
    let mut a: Vec<String> = ["relay", "device", "list", "--bridge", "b1"]
        .map(String::from)
        .to_vec();
    a.extend(relay.store_args());
    let listed = crate::net::run_cli(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(
        listed.lines().skip(1).count(),
        1,
        "one device key: {listed}"
    );
    assert!(listed.contains("active"), "{listed}");

    let other = tempfile::tempdir().unwrap();
    let mut stranger = relay.daemon(other.path(), ws.path(), Some(&code), &[]);
    let status = crate::util::exit_within(&mut stranger.child, Duration::from_secs(20));
    assert!(status.is_some_and(|s| !s.success()), "{}", stranger.log());
    assert!(
        stranger.log().contains("used by another device key"),
        "{}",
        stranger.log()
    );
}

/// An enrollment code lives the minutes asked for: a lifetime that is no lifetime (or that
/// would overflow) is refused, not turned into another one.
#[test]
fn an_enrollment_code_lifetime_outside_a_minute_to_a_year_is_refused() {
    let state = tempfile::tempdir().unwrap();
    for ttl in ["0", "525601", "9223372036854775807"] {
        let out = std::process::Command::new(crate::util::bin())
            .args([
                "relay",
                "bridge",
                "add",
                "b1",
                "--code-ttl-minutes",
                ttl,
                "--state-dir",
            ])
            .arg(state.path())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{ttl}: {out:?}");
        assert!(out.stdout.is_empty(), "{ttl}: no code printed");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--code-ttl-minutes"), "{ttl}: {err}");
    }
}

/// Issue 12 item 8: a stolen device key can be revoked, a bridge removed, and re-enrolling
/// replaces the bridge's key (unless kept for a second machine) — each at once on a connected
/// daemon.
#[test]
fn device_keys_can_be_revoked_and_re_enrollment_replaces_them_at_once() {
    let relay = Relay::start(&[]);
    let code = relay.add_bridge("b1");
    let ws = crate::util::Tree::new();
    let state = tempfile::tempdir().unwrap();
    let cli = |args: &[&str]| {
        let mut a: Vec<&str> = vec!["relay"];
        a.extend_from_slice(args);
        let s = relay.store_args();
        a.extend(s.iter().map(String::as_str));
        crate::net::run_cli(&a)
    };
    let daemon = relay.daemon(state.path(), ws.path(), Some(&code), &[]);
    relay.wait_ready(1);
    let listed = cli(&["device", "list", "--bridge", "b1"]);
    // The first line is the header.
    let key_id = listed
        .lines()
        .nth(1)
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .to_owned();
    assert!(listed.contains("active"), "{listed}");
    // A second machine keeps the first one's key.
    let second = relay.add_bridge_with("b1", &["--keep-existing"]);
    let state2 = tempfile::tempdir().unwrap();
    let _d2 = relay.daemon(state2.path(), ws.path(), Some(&second), &[]);
    daemon.wait_log("connected to the relay and ready", Duration::from_secs(20));
    _d2.wait_log("connected to the relay and ready", Duration::from_secs(20));
    assert!(
        cli(&["device", "list", "--bridge", "b1"])
            .lines()
            .skip(1)
            .all(|l| l.contains("active")),
        "--keep-existing kept the first key"
    );
    // Revoking the key of the daemon that holds the bridge now disconnects it at once.
    let active = cli(&["device", "list", "--bridge", "b1"]);
    let second_key = active
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().next().unwrap())
        .find(|k| *k != key_id)
        .unwrap()
        .to_owned();
    cli(&["device", "revoke", &second_key]);
    _d2.wait_log("refused", Duration::from_secs(10));
    // Re-enrolling without --keep-existing replaces the remaining (first) key.
    let third = relay.add_bridge("b1");
    let state3 = tempfile::tempdir().unwrap();
    let d3 = relay.daemon(state3.path(), ws.path(), Some(&third), &[]);
    d3.wait_log("connected to the relay and ready", Duration::from_secs(20));
    let keys = cli(&["device", "list", "--bridge", "b1"]);
    assert!(
        keys.lines()
            .filter(|l| l.starts_with(&key_id))
            .all(|l| l.contains("revoked")),
        "{keys}"
    );
    // Removing the bridge disconnects its daemon and the bridge is gone.
    cli(&["bridge", "remove", "b1"]);
    d3.wait_log("refused", Duration::from_secs(10));
    assert!(!cli(&["bridge", "list"]).contains("b1"));
}

/// A daemon driven by hand: enrolled with `code`, its hello signed, ready on the relay.
struct FakeDaemon {
    ws: Ws,
}

impl FakeDaemon {
    fn connect(relay: &Relay, bridge: &str, code: &str, dir: &std::path::Path) -> Self {
        let key = daemon::identity::DeviceKey::load_or_create(dir).unwrap();
        let mut enroll = fake_socket(relay);
        let _ = read_frame(&mut enroll).unwrap();
        enroll
            .send(tungstenite::Message::Text(
                json!({"type": "enroll", "code": code, "public_key": key.public_key()})
                    .to_string()
                    .into(),
            ))
            .unwrap();
        let key_id = read_frame(&mut enroll).unwrap()["key_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let mut ws = fake_socket(relay);
        let welcome = read_frame(&mut ws).unwrap();
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let instance = format!("inst_{bridge}_fake");
        let t = protocol::frame::hello_transcript(
            &relay.public(),
            welcome["challenge"].as_str().unwrap(),
            bridge,
            &instance,
            ts,
        );
        let send = |ws: &mut Ws, v: Value| {
            ws.send(tungstenite::Message::Text(v.to_string().into()))
                .unwrap()
        };
        send(
            &mut ws,
            json!({"type": "hello", "protocol": 1, "bridge": bridge, "instance_id": instance, "key_id": key_id,
            "timestamp": ts, "signature": key.sign(&t), "version": "test", "revision": 3}),
        );
        assert_eq!(read_frame(&mut ws).unwrap()["type"], "hello_ack");
        send(
            &mut ws,
            json!({"type": "catalog", "servers": [{"name": "runtime",
            "initialize": {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                "serverInfo": {"name": "fake", "version": "0"}},
            "tools": {"owner": {"tools": []}}}]}),
        );
        loop {
            let f = read_frame(&mut ws).unwrap();
            match f["type"].as_str().unwrap() {
                "probe" => send(&mut ws, json!({"type": "probe_result", "id": f["id"]})),
                "ready" => break,
                _ => {}
            }
        }
        Self { ws }
    }

    fn rpc(&mut self, sid: &str, seq: u64, message: Value) {
        let _ = self.ws.send(tungstenite::Message::Text(
            json!({"type": "rpc", "sid": sid, "seq": seq, "message": message})
                .to_string()
                .into(),
        ));
    }

    fn closed(&mut self, sid: &str) {
        let _ = self.ws.send(tungstenite::Message::Text(
            json!({"type": "closed", "sid": sid, "reason": "forged"})
                .to_string()
                .into(),
        ));
    }

    /// The frames the relay sends until the socket ends or `within` passes; whether it ended.
    fn drain(&mut self, within: Duration) -> (Vec<Value>, bool) {
        if let tungstenite::stream::MaybeTlsStream::Plain(s) = self.ws.get_mut() {
            s.set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
        }
        let end = Instant::now() + within;
        let mut frames = Vec::new();
        while Instant::now() < end {
            match self.ws.read() {
                Ok(tungstenite::Message::Text(t)) => {
                    frames.push(serde_json::from_str(t.as_str()).unwrap())
                }
                Ok(tungstenite::Message::Close(_)) => return (frames, true),
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => return (frames, true),
            }
        }
        (frames, false)
    }
}

/// Issue 12 items 3 and 4: a daemon of bridge B answered, closed and jammed bridge A's sessions
/// (the relay looked a session up across all bridges), and a replaced socket kept being routed.
#[test]
fn a_daemon_reaches_only_its_own_bridge_and_a_bad_seq_or_a_replaced_socket_is_closed() {
    let relay = Relay::start(&[]);
    let code_a = relay.add_bridge("a");
    let code_b = relay.add_bridge("b");
    let token_a = relay.token("a", "owner");
    let dirs = tempfile::tempdir().unwrap();
    let ws = crate::util::Tree::new();
    let _real = relay.daemon(&dirs.path().join("real"), ws.path(), Some(&code_a), &[]);
    relay.wait_ready(1);
    let mut evil = FakeDaemon::connect(&relay, "b", &code_b, &dirs.path().join("evil"));
    relay.wait_ready(2);
    let mut c = crate::net::Client::new(&format!("{}/b/a/mcp", relay.direct()), Some(&token_a));
    c.initialize();
    let sid = c.session.clone().unwrap();
    let mut stream = c.post_stream(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "run_process", "arguments": {"argv": ["sh", "-c", "sleep 1; echo real"]}}}));
    evil.rpc(&sid, 1, json!({"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "FORGED BY BRIDGE b"}]}}));
    evil.rpc(&sid, u64::MAX - 1, json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x"}}));
    evil.closed(&sid);
    let mut last = Value::Null;
    while let Some((_, m)) = stream.next_message(Duration::from_secs(20)) {
        if m.get("id").is_some() {
            last = m;
            break;
        }
    }
    let text = last.to_string();
    assert!(text.contains("real") && !text.contains("FORGED"), "{text}");
    // A's session is still A's: the forged `closed` did not end it.
    let r = c.call("read_file", json!({"path": "."}));
    assert!(r.get("result").is_some() || r.get("error").is_some(), "{r}");
    assert_ne!(
        c.post(&json!({"jsonrpc": "2.0", "id": 99, "method": "tools/list"}))
            .status,
        404
    );
    // A sequence number far past the next one is a protocol error that closes the socket.
    let mut own = crate::net::Client::new(
        &format!("{}/b/b/mcp", relay.direct()),
        Some(&relay.token("b", "owner")),
    );
    own.initialize();
    // The session opens on the fake daemon with its first request (`open`, then the `rpc`).
    let _ping =
        std::thread::spawn(move || own.post(&json!({"jsonrpc": "2.0", "id": 2, "method": "ping"})));
    let own_sid = loop {
        let (frames, ended) = evil.drain(Duration::from_millis(300));
        assert!(!ended, "the fake daemon's socket ended");
        if let Some(f) = frames.iter().find(|f| f["type"] == "open") {
            break f["sid"].as_str().unwrap().to_owned();
        }
    };
    evil.rpc(&own_sid, 1 << 40, json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x"}}));
    let (_, ended) = evil.drain(Duration::from_secs(5));
    assert!(ended, "a jump of 2^40 in seq is accepted");
    // A replaced socket is closed and its frames are not routed.
    let code_b2 = relay.add_bridge_with("b", &["--keep-existing"]);
    let mut first = FakeDaemon::connect(&relay, "b", &code_b2, &dirs.path().join("b1"));
    let code_b3 = relay.add_bridge_with("b", &["--keep-existing"]);
    let _second = FakeDaemon::connect(&relay, "b", &code_b3, &dirs.path().join("b2"));
    let (_, ended) = first.drain(Duration::from_secs(5));
    assert!(ended, "the replaced socket stays open");
}

/// Issue 12 item 5: each session kept the client's whole initialize (8 MB → 1.35 GB for ten);
/// what is kept is bounded and an oversized initialize is refused.
#[test]
fn an_oversized_initialize_is_refused_and_nothing_is_kept_of_it() {
    let s = crate::relay::setup();
    let url = format!("{}/b/b1/mcp", s.relay.direct());
    let huge = "x".repeat(2 << 20);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"experimental": {"blob": huge}},
        "clientInfo": {"name": "t", "version": "0"}}});
    let r = ureq::post(&url)
        .set("Authorization", &format!("Bearer {}", s.token))
        .set("Content-Type", "application/json")
        .set("Accept", "application/json, text/event-stream")
        .send_string(&body.to_string());
    match r {
        Err(ureq::Error::Status(code, resp)) => {
            assert_eq!(code, 400);
            assert!(
                resp.into_string().unwrap().contains("initialize"),
                "names what is too large"
            );
        }
        other => panic!(
            "an oversized initialize was taken: {:?}",
            other.map(|r| r.status())
        ),
    }
    assert_eq!(s.relay.metric("machine_mcp_relay_sessions"), 0);
}

/// Issue 12 item 6: revoking a token left its sessions open (a reviewer that filled the session
/// cap kept the owner out for an hour).
#[test]
fn revoking_a_token_ends_its_sessions_at_once() {
    let s = crate::relay::setup();
    let url = format!("{}/b/b1/mcp", s.relay.direct());
    let out = {
        let mut a = vec![
            "relay", "token", "create", "--bridge", "b1", "--role", "reviewer",
        ];
        let st = s.relay.store_args();
        a.extend(st.iter().map(String::as_str));
        Command::new(bin()).args(&a).output().unwrap()
    };
    let reviewer = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let mut c = crate::net::Client::new(&url, Some(&reviewer));
    c.initialize();
    assert_eq!(s.relay.metric("machine_mcp_relay_sessions"), 1);
    let list = {
        let mut a = vec!["relay", "token", "list", "--bridge", "b1"];
        let st = s.relay.store_args();
        a.extend(st.iter().map(String::as_str));
        String::from_utf8(Command::new(bin()).args(&a).output().unwrap().stdout).unwrap()
    };
    let id = list
        .lines()
        .find(|l| l.contains("reviewer"))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    let mut a = vec!["relay", "token", "revoke", id.as_str()];
    let st = s.relay.store_args();
    a.extend(st.iter().map(String::as_str));
    assert!(Command::new(bin()).args(&a).status().unwrap().success());
    let end = Instant::now() + Duration::from_secs(10);
    while s.relay.metric("machine_mcp_relay_sessions") != 0 {
        assert!(
            Instant::now() < end,
            "the revoked token's session is still open"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Issue 12 item 7: a refused request left an SSE stream registered forever.
#[test]
fn refused_requests_leave_no_stream_behind() {
    let s = crate::relay::setup();
    let mut c = crate::net::Client::new(&format!("{}/b/b1/mcp", s.relay.direct()), Some(&s.token));
    c.initialize();
    let before = s.relay.metric("machine_mcp_relay_streams");
    assert!(before >= 0, "the relay reports no streams gauge");
    let mut long = c.post_stream(&json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "run_process", "arguments": {"argv": ["sleep", "3"]}}}));
    for _ in 0..50 {
        // The same id again: 409, and nothing may stay registered for it.
        let a = c.post(&json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}));
        assert_eq!(a.status, 409);
    }
    while long.next_message(Duration::from_secs(10)).is_some() {}
    assert!(
        s.relay.metric("machine_mcp_relay_streams") <= before + 1,
        "{} streams registered after 50 refusals ({} before)",
        s.relay.metric("machine_mcp_relay_streams"),
        before
    );
}

/// Issue 12 item 3: session ids are capabilities and stay out of logs at INFO and above. A relay
/// restart makes the daemon end the sessions the new relay does not know, which it logged with
/// the whole id at INFO.
#[test]
fn session_ids_are_not_logged_at_info() {
    let mut s = crate::relay::setup();
    let mut c = crate::net::Client::new(&format!("{}/b/b1/mcp", s.relay.direct()), Some(&s.token));
    c.initialize();
    let sid = c.session.clone().expect("a session id");
    let r = c.call("read_file", json!({"path": "hello.txt"}));
    assert!(r["result"].is_object(), "{r}");
    s.relay.restart();
    // Sessions survive a relay restart (issue 15): the same instance reconnects, is told to
    // keep the session, and the session is used again.
    s.daemon
        .wait_log("reconnected to the relay", Duration::from_secs(30));
    s.relay.wait_ready(1);
    c.url = format!("{}/b/b1/mcp", s.relay.direct());
    let r = c.call("read_file", json!({"path": "hello.txt"}));
    assert!(
        r["result"].is_object(),
        "the session survived the restart: {r}"
    );
    for (who, log) in [("daemon", s.daemon.log()), ("relay", s.relay.proc.log())] {
        let leaked: Vec<&str> = log
            .lines()
            .filter(|l| !l.contains(" DEBUG ") && !l.contains(" TRACE ") && l.contains(&sid))
            .collect();
        assert!(
            leaked.is_empty(),
            "the {who} logged the session id: {leaked:?}"
        );
    }
}

/// Issue 12 item 9: a session's standalone stream buffered up to 10,000 messages of up to 8 MiB
/// each until its client read them. Now it holds at most 16 MiB; what it dropped is counted and
/// the client that reads past the gap is told how many messages it missed.
#[test]
fn a_daemon_flooding_an_unread_session_is_bounded_and_the_client_told() {
    let relay = Relay::start(&[]);
    let code = relay.add_bridge("b");
    let dirs = tempfile::tempdir().unwrap();
    let mut fake = FakeDaemon::connect(&relay, "b", &code, dirs.path());
    relay.wait_ready(1);
    let mut c = crate::net::Client::new(
        &format!("{}/b/b/mcp", relay.direct()),
        Some(&relay.token("b", "owner")),
    );
    c.initialize();
    let ping = std::thread::spawn(move || {
        let a = c.post(&json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}));
        (c, a)
    });
    let sid = loop {
        let (frames, ended) = fake.drain(Duration::from_millis(300));
        assert!(!ended, "the fake daemon's socket ended");
        if let Some(f) = frames.iter().find(|f| f["type"] == "open") {
            break f["sid"].as_str().unwrap().to_owned();
        }
    };
    fake.rpc(&sid, 1, json!({"jsonrpc": "2.0", "id": 2, "result": {}}));
    let (c, a) = ping.join().unwrap();
    assert_eq!(a.status, 200);
    // 40 notifications of 1 MiB for a session whose client reads nothing.
    let mib = "x".repeat(1 << 20);
    for seq in 2..42 {
        fake.rpc(
            &sid,
            seq,
            json!({"jsonrpc": "2.0", "method": "notifications/message",
            "params": {"level": "info", "data": format!("{seq} {mib}")}}),
        );
    }
    fake.rpc(
        &sid,
        42,
        json!({"jsonrpc": "2.0", "method": "notifications/message",
        "params": {"level": "info", "data": "last"}}),
    );
    // The relay acknowledges a seq once it routed it: then nothing is still on its way.
    let end = Instant::now() + Duration::from_secs(20);
    'acked: loop {
        assert!(Instant::now() < end, "seq 42 was never acknowledged");
        let (frames, ended) = fake.drain(Duration::from_millis(300));
        assert!(!ended, "the fake daemon's socket ended");
        for f in frames {
            if f["type"] == "ack" && f["seq"] == 42 {
                break 'acked;
            }
        }
    }
    let mut get = c.get_stream(None).expect("the standalone stream");
    let mut got = Vec::new();
    while let Some((_, m)) = get.next_message(Duration::from_secs(5)) {
        let last = m["params"]["data"] == "last";
        got.push(m);
        if last {
            break;
        }
    }
    // Everything was routed once "last" arrived: 15 messages of 1 MiB fit in 16 MiB.
    let dropped = relay.metric("machine_mcp_relay_stream_messages_dropped_total");
    assert_eq!(dropped, 25, "dropped of 40 MiB");
    assert_eq!(got[0]["method"], "notifications/message", "{}", got[0]);
    assert_eq!(got[0]["params"]["level"], "warning");
    assert_eq!(got[0]["params"]["data"]["dropped"], dropped, "{}", got[0]);
    let held: usize = got[1..].iter().map(|m| m.to_string().len()).sum();
    assert!(held <= 16 << 20, "{held} bytes held for one session");
    assert_eq!(
        got.len() as i64 - 1,
        41 - dropped,
        "each message is delivered or counted"
    );
}
