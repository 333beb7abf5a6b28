//! MCP over stdio: version negotiation, framing errors, ping, cancellation, progress (the
//! 2026-07-28 era and `server/discover` are in `era.rs`).

use std::time::Duration;

use serde_json::{Value, json};

use crate::util::{RESPONSE_TIMEOUT, Server, Tree, rchar};

fn initialize(s: &mut Server, version: &str) -> Value {
    s.request(
        "initialize",
        json!({"protocolVersion": version, "capabilities": {},
               "clientInfo": {"name": "t", "version": "0"}}),
    )
}

#[test]
fn each_supported_version_is_echoed_and_others_get_the_newest() {
    let t = Tree::new();
    for (asked, answered) in [
        ("2025-11-25", "2025-11-25"),
        ("2025-06-18", "2025-06-18"),
        ("2025-03-26", "2025-03-26"),
        ("2024-11-05", "2025-11-25"),
        ("2099-01-01", "2025-11-25"),
    ] {
        let mut s = Server::spawn(t.path(), &[]);
        let r = initialize(&mut s, asked);
        assert_eq!(
            r["result"]["protocolVersion"], answered,
            "asked {asked}: {r}"
        );
        assert_eq!(r["result"]["serverInfo"]["name"], "machine-mcp");
        assert!(r["result"]["capabilities"]["tools"].is_object());
        s.notify("notifications/initialized", json!({}));
        let info = s.call("server_info", json!({}));
        assert_eq!(info.ok()["protocol_version"], answered);
    }
}

#[test]
fn ping_is_answered_before_and_after_initialize() {
    let t = Tree::new();
    let mut s = Server::spawn(t.path(), &[]);
    assert_eq!(s.request("ping", json!({}))["result"], json!({}));
    initialize(&mut s, "2025-11-25");
    assert_eq!(s.request("ping", json!({}))["result"], json!({}));
}

#[test]
fn framing_errors_get_json_rpc_errors_and_serving_continues() {
    let t = Tree::new();
    let mut s = Server::start(t.path(), &[]);
    let cases: [(&str, i64); 5] = [
        ("{this is not json", -32700),
        (r#"[{"jsonrpc":"2.0","id":900,"method":"ping"}]"#, -32600),
        (r#"{"id":901,"method":"ping"}"#, -32600),
        (r#""just a string""#, -32600),
        (
            r#"{"jsonrpc":"2.0","id":902,"method":"tools/call","params":{"name":7}}"#,
            -32602,
        ),
    ];
    for (line, code) in cases {
        s.send_line(line);
        let m = s.recv(RESPONSE_TIMEOUT).expect("an error response");
        assert_eq!(m["error"]["code"], code, "{line} -> {m}");
        assert_eq!(m["jsonrpc"], "2.0");
        assert_eq!(
            s.request("ping", json!({}))["result"],
            json!({}),
            "still serving after {line}"
        );
    }
}

#[test]
fn a_line_over_8_mib_is_rejected_and_the_next_line_is_served() {
    let t = Tree::new();
    let mut s = Server::start(t.path(), &[]);
    let mut huge = Vec::with_capacity(9 << 20);
    huge.extend_from_slice(br#"{"jsonrpc":"2.0","id":77,"method":"ping","params":{"pad":""#);
    huge.resize((8 << 20) + 100, b'x');
    huge.extend_from_slice(b"\"}}\n");
    s.send_bytes(&huge);
    let m = s
        .recv(RESPONSE_TIMEOUT)
        .expect("an error for the long line");
    assert_eq!(m["error"]["code"], -32600, "{m}");
    assert!(
        m["error"]["message"]
            .as_str()
            .unwrap()
            .contains("longer than")
    );
    assert_eq!(s.request("ping", json!({}))["result"], json!({}));
    // A line just under the limit is still accepted.
    let mut big = br#"{"jsonrpc":"2.0","id":78,"method":"ping","params":{"pad":""#.to_vec();
    big.resize((8 << 20) - 10, b'y');
    big.extend_from_slice(b"\"}}\n");
    s.send_bytes(&big);
    let m = s.wait_for(&json!(78), RESPONSE_TIMEOUT).expect("response");
    assert_eq!(m["result"], json!({}));
}

#[test]
fn requests_before_initialize_are_refused_clearly() {
    let t = Tree::new();
    let mut s = Server::spawn(t.path(), &[]);
    s.notify("notifications/initialized", json!({}));
    let r = s.request("tools/list", json!({}));
    assert_eq!(r["error"]["code"], -32600, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("initialize")
    );
    initialize(&mut s, "2025-11-25");
    assert!(s.request("tools/list", json!({}))["result"]["tools"].is_array());
}

#[test]
fn unknown_methods_and_tools_are_json_rpc_errors() {
    let t = Tree::new();
    let mut s = Server::start(t.path(), &[]);
    assert_eq!(
        s.request("no/such/method", json!({}))["error"]["code"],
        -32601
    );
    assert_eq!(
        s.request(
            "tools/call",
            json!({"name": "no_such_tool", "arguments": {}})
        )["error"]["code"],
        -32602
    );
}

#[test]
fn bad_arguments_are_tool_errors() {
    let t = Tree::new();
    let mut s = Server::start(t.path(), &[]);
    let r = s.call("read_file", json!({"path": "x", "bogus": 1}));
    assert_eq!(r.code(), "invalid_request");
    assert!(r.error["message"].as_str().unwrap().contains("bogus"));
    let r = s.call("read_file", json!({}));
    assert_eq!(r.code(), "invalid_request");
}

#[test]
fn end_of_input_ends_the_process() {
    let t = Tree::new();
    let mut s = Server::start(t.path(), &[]);
    s.close_stdin();
    assert!(s.recv(Duration::from_secs(10)).is_none());
}

/// A tree whose search takes many seconds yet costs 1 MiB of disk: one file hard-linked `links`
/// times (the page cache serves every read).
fn big_tree(t: &Tree, links: usize) {
    let line = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor\n";
    let first = t.write("d0/f0.txt", line.repeat((1 << 20) / line.len()));
    for i in 1..links {
        let p = t.path().join(format!("d{}/f{i}.txt", i % 50));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::hard_link(&first, p).unwrap();
    }
}

#[test]
fn progress_notifications_carry_the_token_and_cancellation_stops_the_work() {
    let t = Tree::new();
    big_tree(&t, 5000); // 5 GiB of text to scan
    let mut s = Server::start(t.path(), &[]);
    let id = s.send_request(
        "tools/call",
        json!({"name": "search_text",
               "arguments": {"pattern": "[a-z]{1,60}[0-9]{1,60}[A-Z]", "max_matches": 10},
               "_meta": {"progressToken": "tok-1"}}),
    );
    // Wait for progress, which proves the search is under way.
    let progress = loop {
        let m = s
            .recv(RESPONSE_TIMEOUT)
            .expect("progress before the result");
        assert_ne!(
            m.get("id"),
            Some(&json!(id)),
            "the search finished too fast to cancel: {m}"
        );
        if m["method"] == "notifications/progress" {
            break m;
        }
    };
    assert_eq!(progress["params"]["progressToken"], "tok-1");
    assert!(progress["params"]["total"].as_f64().unwrap() > 0.0);
    s.notify(
        "notifications/cancelled",
        json!({"requestId": id, "reason": "test"}),
    );
    // The server stays responsive, never answers the cancelled request, and stops reading files.
    assert_eq!(s.request("ping", json!({}))["result"], json!({}));
    let settle = std::time::Instant::now() + Duration::from_secs(2);
    let mut before = rchar(s.pid());
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = rchar(s.pid());
        if now == before {
            break;
        }
        before = now;
        assert!(
            std::time::Instant::now() < settle,
            "the cancelled search kept reading files"
        );
    }
    assert!(
        s.wait_for(&json!(id), Duration::from_secs(1)).is_none(),
        "no response for a cancelled request"
    );
}

fn handshake_lines() -> String {
    format!(
        "{}\n{}\n",
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
    )
}

/// `printf REQUESTS | machine-mcp stdio > out`: input ends right after a call whose result is
/// megabytes long. The answer must still be written, whole, before the process exits (it was
/// lost or cut mid-line).
#[test]
fn a_result_still_running_at_end_of_input_is_written_whole() {
    use std::io::Write;
    let t = Tree::new();
    let line = format!("{}\n", "b".repeat(99));
    std::fs::write(t.path().join("big.txt"), line.repeat(40_000)).unwrap();
    let out_path = t.path().join("out.jsonl");
    let out = std::fs::File::create(&out_path).unwrap();
    let mut child = std::process::Command::new(crate::util::bin())
        .args(["stdio", "--workspace"])
        .arg(t.path())
        .stdin(std::process::Stdio::piped())
        .stdout(out)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "read_file", "arguments": {"path": "big.txt", "max_bytes": 5_000_000}}});
    stdin
        .write_all(format!("{}{call}\n", handshake_lines()).as_bytes())
        .unwrap();
    drop(stdin);
    assert!(child.wait().unwrap().success());
    let text = std::fs::read_to_string(&out_path).unwrap();
    assert!(text.ends_with('\n'), "the output ends mid-line");
    let replies: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let read = replies
        .iter()
        .find(|r| r["id"] == 1)
        .expect("no answer to the read_file call");
    assert_eq!(
        read["result"]["structuredContent"]["content"]
            .as_str()
            .unwrap()
            .len(),
        4_000_000
    );
}

/// A stdio server (with `extra` arguments) after its handshake, whose stdout the client has
/// closed (having read the start of the first answer); its stdin is still open.
fn server_with_stdout_closed(
    t: &Tree,
    extra: &[&str],
) -> (std::process::Child, std::process::ChildStdin) {
    use std::io::{Read, Write};
    let mut child = std::process::Command::new(crate::util::bin())
        .args(["stdio", "--workspace"])
        .arg(t.path())
        .args(extra)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    stdin.write_all(handshake_lines().as_bytes()).unwrap();
    let mut first = [0u8; 16];
    stdout.read_exact(&mut first).unwrap();
    drop(stdout);
    (child, stdin)
}

/// Asserts that `child` exits (not killed by a signal) within `secs` seconds.
fn assert_exits(mut child: std::process::Child, secs: u64, what: &str) {
    match crate::util::exit_within(&mut child, Duration::from_secs(secs)) {
        Some(status) => assert!(status.code().is_some(), "{what}: {status:?}"),
        None => {
            let _ = child.kill();
            panic!("{what}: the server still runs {secs} s after its stdout was closed");
        }
    }
}

/// A client that closes its end of our stdout but keeps stdin open: nothing can be answered any
/// more, so the server must end (it kept running, and kept running new calls, until stdin
/// closed).
#[test]
fn a_closed_stdout_ends_the_process() {
    use std::io::Write;
    let t = Tree::new();
    let (child, mut stdin) = server_with_stdout_closed(&t, &[]);
    // The next answer finds the pipe closed.
    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n")
        .unwrap();
    assert_exits(child, 10, "after a request");
    drop(stdin);
}

/// A client that closes its end of our stdout and then sends nothing: the server ends without
/// waiting for an answer to fail (a write can even succeed while a forked process briefly holds
/// a copy of the closed end), with and without the supervisor.
#[test]
fn a_closed_stdout_ends_the_process_without_a_further_request() {
    for extra in [&[][..], &["--no-supervisor"][..]] {
        let t = Tree::new();
        let (child, stdin) = server_with_stdout_closed(&t, extra);
        assert_exits(child, 5, &format!("{extra:?}"));
        drop(stdin);
    }
}

/// Regression (issue 11 item 8): a second request with the id of one still in flight ran too,
/// and one of the two answers was lost while both side effects happened.
#[test]
fn a_request_reusing_the_id_of_one_in_flight_is_refused_and_does_not_run() {
    let t = Tree::new();
    let mut s = Server::start(t.path(), &[]);
    let first = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "run_process",
        "arguments": {"argv": ["sh", "-c", "sleep 1; echo one >> log"]}}});
    let second = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "run_process",
        "arguments": {"argv": ["sh", "-c", "echo two >> log"]}}});
    s.send_line(&first.to_string());
    s.send_line(&second.to_string());
    let refused = s.wait_for(&json!(5), RESPONSE_TIMEOUT).expect("an answer");
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("in flight"),
        "{refused}"
    );
    let done = s
        .wait_for(&json!(5), RESPONSE_TIMEOUT)
        .expect("the first answer");
    assert_eq!(done["result"]["structuredContent"]["stdout"], "", "{done}");
    assert_eq!(String::from_utf8(t.read("log")).unwrap(), "one\n");
    // Once answered, the id may be used again.
    let again = s.request("ping", json!({}));
    assert_eq!(again["result"], json!({}));
    s.send_line(&json!({"jsonrpc": "2.0", "id": 5, "method": "ping"}).to_string());
    let reused = s.wait_for(&json!(5), RESPONSE_TIMEOUT).expect("ping");
    assert_eq!(reused["result"], json!({}), "{reused}");
}

/// Regression (issue 11 item 8): a second `initialize` renegotiated the session's version.
#[test]
fn a_second_initialize_is_refused_and_the_session_keeps_its_version() {
    let t = Tree::new();
    let mut s = Server::spawn(t.path(), &[]);
    let first = initialize(&mut s, "2025-11-25");
    assert_eq!(first["result"]["protocolVersion"], "2025-11-25");
    let second = initialize(&mut s, "2025-06-18");
    assert_eq!(second["error"]["code"], -32600, "{second}");
    let info = s.call("server_info", json!({}));
    assert_eq!(info.ok()["protocol_version"], "2025-11-25");
}
