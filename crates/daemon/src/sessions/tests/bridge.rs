//! The era bridge, against a scripted old-era stdio server (this test binary in fixture mode)
//! and against the conformance fixture in legacy-only mode; the pool of legacy sessions.

use std::{
    collections::{HashMap, HashSet},
    io::{BufRead, Write},
    time::Duration,
};

use serde_json::json;

use super::*;
use crate::{bridge, servers::UpstreamSpec};

const FIXTURE_ENV: &str = "MB_LEGACY_FIXTURE";

/// Not a test: when the test binary is started with `MB_LEGACY_FIXTURE=1` this function is
/// a stdio MCP server of the old era (2025-11-25, no `server/discover`). Its tools answer
/// with the request id and `_meta` they received, so tests can see what the bridge forwards.
#[test]
fn legacy_fixture_server() {
    if std::env::var(FIXTURE_ENV).as_deref() != Ok("1") {
        return;
    }
    // End the harness's "test ... " line so the first message starts a line of its own.
    let _ = writeln!(std::io::stdout().lock());
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut cancelled: Vec<Value> = Vec::new();
    let send = |v: Value| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{v}");
        let _ = out.flush();
    };
    while let Some(Ok(line)) = lines.next() {
        let Ok(m) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let id = m.get("id").cloned().unwrap_or(Value::Null);
        let method = m["method"].as_str().unwrap_or("").to_owned();
        let reply = |result: Value| json!({"jsonrpc": "2.0", "id": id, "result": result});
        match method.as_str() {
            "initialize" => send(reply(json!({
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {"listChanged": true}},
                "serverInfo": {"name": "legacy-fixture", "version": "1.0"},
                "instructions": "a fixture"}))),
            "notifications/cancelled" => cancelled.push(m["params"]["requestId"].clone()),
            "tools/list" => send(reply(json!({"tools": [
                {"name": "read", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}},
                {"name": "write", "inputSchema": {"type": "object"}}
            ]}))),
            "tools/call" => {
                let args = m["params"]["arguments"].clone();
                if let Some(ms) = args.get("sleep_ms").and_then(Value::as_u64) {
                    std::thread::sleep(Duration::from_millis(ms));
                }
                let mut extra = json!(null);
                if args.get("sample") == Some(&json!(true)) {
                    send(
                        json!({"jsonrpc": "2.0", "id": "srv-1", "method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 1}}),
                    );
                    for l in lines.by_ref() {
                        let Ok(v) = serde_json::from_str::<Value>(&l.unwrap_or_default()) else {
                            continue;
                        };
                        if v["id"] == "srv-1" {
                            extra = v;
                            break;
                        }
                    }
                }
                if args.get("change") == Some(&json!(true)) {
                    send(json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));
                }
                if let Some(t) = m.pointer("/params/_meta/progressToken") {
                    send(
                        json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": t, "progress": 1}}),
                    );
                }
                let seen = json!({"id": id, "meta": m["params"].get("_meta"), "args": args,
                    "pid": std::process::id(),
                    "cancelled": cancelled, "sampling": extra});
                send(reply(
                    json!({"content": [{"type": "text", "text": seen.to_string()}]}),
                ));
            }
            "" => {}
            other if m.get("id").is_some() && !other.starts_with("notifications/") => send(
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "Method not found"}}),
            ),
            _ => {}
        }
    }
    std::process::exit(0);
}

fn fixture_spec(dir: &std::path::Path) -> UpstreamSpec {
    UpstreamSpec {
        name: "legacy".into(),
        command: std::env::current_exe().unwrap().display().to_string(),
        args: vec![
            "sessions::tests::bridge::legacy_fixture_server".into(),
            "--exact".into(),
            "--test-threads=1".into(),
        ],
        env: [(FIXTURE_ENV.to_owned(), "1".to_owned())].into(),
        cwd: dir.into(),
    }
}

/// What a fixture tool saw (its text content, parsed).
fn seen(answer: &Value) -> Value {
    serde_json::from_str(answer["result"]["content"][0]["text"].as_str().unwrap()).unwrap()
}

fn bridged() -> (tempfile::TempDir, Arc<HostedSessions>) {
    let (dir, rt) = runtime();
    let spec = fixture_spec(dir.path());
    let s = HostedSessions::new(rt, vec![(spec, HashSet::from(["read".to_owned()]))]);
    (dir, s)
}

#[tokio::test]
async fn the_bridge_rewrites_ids_strips_meta_and_completes_results() {
    let (_dir, s) = bridged();
    let mut rx = link(&s, &[], &[]);
    let call = |sid: &str, args: Value| {
        let mut r = request(
            json!(1),
            "tools/call",
            json!({"name": "read", "arguments": args}),
        );
        r["params"]["_meta"]["progressToken"] = json!("p");
        s.call(&self::sid(sid), "legacy", "tok", "owner", r);
    };
    // Two concurrent calls with the same id (and progress token) on one pooled session.
    call("c1", json!({"sleep_ms": 300, "n": 1}));
    call("c2", json!({"n": 2}));
    let mut answers = HashMap::new();
    let mut progress = Vec::new();
    while answers.len() < 2 {
        let f = tokio::time::timeout(Duration::from_secs(20), rx.recv())
            .await
            .unwrap()
            .unwrap();
        let DaemonFrame::Rpc {
            sid,
            seq,
            related,
            message,
        } = f
        else {
            continue;
        };
        if message.get("method").is_some() {
            assert_eq!(message["method"], "notifications/progress");
            assert_eq!(message["params"]["progressToken"], "p", "{message}");
            assert_eq!(related, Some(json!(1)));
            progress.push(sid);
            continue;
        }
        s.ack(&sid, seq);
        answers.insert(sid, message);
    }
    assert_eq!(progress.len(), 2);
    let (a1, a2) = (&answers["c1"], &answers["c2"]);
    assert_eq!((&a1["id"], &a2["id"]), (&json!(1), &json!(1)));
    assert_eq!(a1["result"]["resultType"], "complete");
    let (s1, s2) = (seen(a1), seen(a2));
    assert_eq!(
        (s1["args"]["n"].as_i64(), s2["args"]["n"].as_i64()),
        (Some(1), Some(2))
    );
    assert_ne!(s1["id"], s2["id"], "the child saw the same id twice");
    let m1 = s1["meta"].as_object().unwrap();
    assert!(
        m1.keys()
            .all(|k| !k.starts_with("io.modelcontextprotocol/")),
        "{m1:?}"
    );
    assert_ne!(s1["meta"]["progressToken"], s2["meta"]["progressToken"]);
    assert_eq!(
        s.pool.len(),
        1,
        "one pooled session per server and principal"
    );

    s.call(
        &sid("c3"),
        "legacy",
        "tok",
        "owner",
        request(json!(3), "tools/list", json!({})),
    );
    let list = answer(&s, &mut rx, "c3").await;
    assert_eq!(list["result"]["resultType"], "complete");
    assert_eq!(list["result"]["ttlMs"], 0);
    assert_eq!(list["result"]["cacheScope"], "private");
    assert_eq!(names(&list["result"]), ["read", "write"]);

    s.call(
        &sid("c4"),
        "legacy",
        "tok",
        "owner",
        request(json!(4), "server/discover", json!({})),
    );
    let d = answer(&s, &mut rx, "c4").await;
    assert_eq!(
        d["result"]["supportedVersions"],
        json!(["2026-07-28", "2025-11-25"])
    );
    assert_eq!(
        d["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "legacy-fixture"
    );
    assert_eq!(d["result"]["instructions"], "a fixture");
    assert_eq!(d["result"]["capabilities"]["tools"]["listChanged"], true);

    s.call(
        &sid("c5"),
        "legacy",
        "tok",
        "owner",
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}),
    );
    assert_eq!(answer(&s, &mut rx, "c5").await["error"]["code"], -32602);
    assert!(s.is_empty());
}

#[tokio::test]
async fn the_bridge_keeps_role_filtering_and_answers_child_requests_itself() {
    let (_dir, s) = bridged();
    let mut rx = link(&s, &[], &[]);
    s.call(
        &sid("c1"),
        "legacy",
        "tok",
        "reviewer",
        request(json!(1), "tools/list", json!({})),
    );
    let list = answer(&s, &mut rx, "c1").await;
    assert_eq!(names(&list["result"]), ["read"]);
    assert_eq!(list["result"]["cacheScope"], "private");
    s.call(
        &sid("c2"),
        "legacy",
        "tok",
        "reviewer",
        request(
            json!(2),
            "tools/call",
            json!({"name": "write", "arguments": {}}),
        ),
    );
    let denied = answer(&s, &mut rx, "c2").await;
    assert_eq!(denied["result"]["isError"], true);
    assert_eq!(denied["result"]["resultType"], "complete");
    assert!(
        denied["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("policy_denied")
    );
    // A sampling request of the child is answered by the daemon, never forwarded.
    s.call(
        &sid("c3"),
        "legacy",
        "tok",
        "reviewer",
        request(
            json!(3),
            "tools/call",
            json!({"name": "read", "arguments": {"sample": true}}),
        ),
    );
    let a = answer(&s, &mut rx, "c3").await;
    assert_eq!(seen(&a)["sampling"]["error"]["code"], -32601, "{a}");
}

#[tokio::test]
async fn the_bridge_acknowledges_listen_forwards_list_changes_and_cancels_at_the_child() {
    let (_dir, s) = bridged();
    let mut rx = link(&s, &[], &[]);
    s.call(
        &sid("l1"),
        "legacy",
        "tok",
        "owner",
        request(
            json!(7),
            "subscriptions/listen",
            json!({"notifications": {"toolsListChanged": true, "promptsListChanged": true}}),
        ),
    );
    let (_, _, ack) = next_rpc(&mut rx, "l1").await;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        7
    );
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true})
    );
    s.call(
        &sid("c1"),
        "legacy",
        "tok",
        "owner",
        request(
            json!(1),
            "tools/call",
            json!({"name": "write", "arguments": {"change": true}}),
        ),
    );
    let (_, related, changed) = next_rpc(&mut rx, "l1").await;
    assert_eq!(changed["method"], "notifications/tools/list_changed");
    assert_eq!(
        changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        7
    );
    assert_eq!(related, Some(json!(7)));
    answer(&s, &mut rx, "c1").await;
    // Cancelling the listen ends it; cancelling a forwarded call reaches the child.
    s.rpc(
        &sid("l1"),
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}}),
    );
    s.call(
        &sid("c2"),
        "legacy",
        "tok",
        "owner",
        request(
            json!(2),
            "tools/call",
            json!({"name": "write", "arguments": {"sleep_ms": 500}}),
        ),
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    s.close(&sid("c2"));
    s.call(
        &sid("c3"),
        "legacy",
        "tok",
        "owner",
        request(
            json!(3),
            "tools/call",
            json!({"name": "write", "arguments": {"change": true}}),
        ),
    );
    let a = answer(&s, &mut rx, "c3").await;
    assert_eq!(
        seen(&a)["cancelled"].as_array().map(Vec::len),
        Some(1),
        "{a}"
    );
    // The listen is gone: the list change of c3 reached no one.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), next_rpc(&mut rx, "l1"))
            .await
            .is_err()
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(10), next_rpc(&mut rx, "c2"))
            .await
            .is_err()
    );
    assert!(s.is_empty());
}

/// The workspace's `conformance-fixture` binary next to this test binary, when it was built
/// (`cargo build -p conformance-fixture`).
fn conformance_fixture() -> Option<std::path::PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let bin = exe.parent()?.parent()?.join("conformance-fixture");
    bin.is_file().then_some(bin)
}

/// The bridge against a real rmcp server of the old era: the conformance fixture started
/// with `--legacy-only` (its `server/discover` is -32601, it serves only after `initialize`).
/// Skipped with a message when the fixture binary was not built.
#[tokio::test]
async fn the_conformance_fixture_in_legacy_only_mode_is_bridged() {
    let Some(bin) = conformance_fixture() else {
        eprintln!("skipped: build the fixture first (cargo build -p conformance-fixture)");
        return;
    };
    let (dir, rt) = runtime();
    let spec = UpstreamSpec {
        name: "fixture".into(),
        command: bin.display().to_string(),
        args: vec!["--legacy-only".into()],
        env: Default::default(),
        cwd: dir.path().into(),
    };
    let s = HostedSessions::new(rt, vec![(spec, HashSet::new())]);
    let mut rx = link(&s, &[], &[]);
    s.call(
        &sid("d"),
        "fixture",
        "tok",
        "owner",
        request(json!(1), "server/discover", json!({})),
    );
    let d = answer(&s, &mut rx, "d").await;
    assert_eq!(d["result"]["supportedVersions"][0], "2026-07-28", "{d}");
    assert!(d["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"].is_string());
    s.call(
        &sid("l"),
        "fixture",
        "tok",
        "owner",
        request(json!(2), "tools/list", json!({})),
    );
    let l = answer(&s, &mut rx, "l").await;
    assert_eq!(l["result"]["resultType"], "complete", "{l}");
    assert_eq!(l["result"]["cacheScope"], "private");
    assert!(names(&l["result"]).contains(&"test_simple_text".to_owned()));
    s.call(
        &sid("t"),
        "fixture",
        "tok",
        "owner",
        request(
            json!(3),
            "tools/call",
            json!({"name": "test_simple_text", "arguments": {}}),
        ),
    );
    let t = answer(&s, &mut rx, "t").await;
    assert_eq!(
        t["result"]["content"][0]["text"], "This is a simple text response for testing.",
        "{t}"
    );
    let mut p = request(
        json!(4),
        "tools/call",
        json!({"name": "test_tool_with_progress", "arguments": {}}),
    );
    p["params"]["_meta"]["progressToken"] = json!("mine");
    s.call(&sid("p"), "fixture", "tok", "owner", p);
    let mut steps = 0;
    loop {
        let (seq, _, m) = next_rpc(&mut rx, "p").await;
        if m["method"] == "notifications/progress" {
            assert_eq!(m["params"]["progressToken"], "mine", "{m}");
            steps += 1;
            continue;
        }
        s.ack(&sid("p"), seq);
        assert_eq!(m["result"]["resultType"], "complete", "{m}");
        break;
    }
    assert_eq!(steps, 3);
    // Sampling cannot reach a 2026-07-28 client: the tool fails, the call is answered.
    s.call(
        &sid("x"),
        "fixture",
        "tok",
        "owner",
        request(
            json!(5),
            "tools/call",
            json!({"name": "test_sampling", "arguments": {"prompt": "hi"}}),
        ),
    );
    let x = answer(&s, &mut rx, "x").await;
    // (The daemon initializes with no client capabilities, so the fixture does not even ask.)
    assert_eq!(x["result"]["isError"], true, "{x}");
    assert_eq!(x["result"]["resultType"], "complete");
    assert!(s.is_empty());
}

/// One pooled session per (server, principal), at most the pool's bound: a new one closes the
/// least recently used idle one, with none idle the call gets a retryable error; a session
/// without work closes after the idle time.
#[tokio::test]
async fn the_pool_is_bounded_and_idle_sessions_close() {
    let (dir, rt) = runtime();
    let spec = fixture_spec(dir.path());
    let s = HostedSessions::with_pool(
        rt,
        vec![(spec, HashSet::from(["read".to_owned()]))],
        bridge::Pool::new(1, Duration::from_millis(800)),
    );
    let mut rx = link(&s, &[], &[]);
    let read = |id: i64| {
        request(
            json!(id),
            "tools/call",
            json!({"name": "read", "arguments": {}}),
        )
    };
    s.call(&sid("a1"), "legacy", "alice", "owner", read(1));
    let pid_a = seen(&answer(&s, &mut rx, "a1").await)["pid"].clone();
    s.call(&sid("a2"), "legacy", "alice", "owner", read(2));
    assert_eq!(
        seen(&answer(&s, &mut rx, "a2").await)["pid"],
        pid_a,
        "not reused"
    );
    // Bob's session takes the only place: Alice's idle one is closed.
    s.call(&sid("b1"), "legacy", "bob", "owner", read(3));
    let pid_b = seen(&answer(&s, &mut rx, "b1").await)["pid"].clone();
    assert_ne!(pid_b, pid_a);
    assert_eq!(s.pool.len(), 1);
    // A listen keeps Bob's session busy: Alice cannot get one now.
    s.call(
        &sid("bl"),
        "legacy",
        "bob",
        "owner",
        request(
            json!(4),
            "subscriptions/listen",
            json!({"notifications": {"toolsListChanged": true}}),
        ),
    );
    let (_, _, ack) = next_rpc(&mut rx, "bl").await;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    s.call(&sid("a3"), "legacy", "alice", "owner", read(5));
    let full = answer(&s, &mut rx, "a3").await;
    assert_eq!(full["error"]["data"]["retryable"], true, "{full}");
    // Busy sessions are not idle-closed; once the listen ends, the session closes.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(s.pool.len(), 1, "a busy session was closed");
    s.rpc(
        &sid("bl"),
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 4}}),
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(s.pool.len(), 0, "an idle session was kept");
    s.call(&sid("a4"), "legacy", "alice", "owner", read(6));
    let pid_a2 = seen(&answer(&s, &mut rx, "a4").await)["pid"].clone();
    assert_ne!(pid_a2, pid_a);
    assert!(s.is_empty());
}

/// A call bridged to a pooled legacy session reads its message's head once on arrival; the
/// `_meta` check and the pooled session's submit take that head. Pinned as a count of this
/// thread's head reads for one warm call (the child's answer and the rewriting included).
#[tokio::test]
async fn a_bridged_call_reads_heads_a_pinned_number_of_times() {
    let (_dir, s) = bridged();
    let mut rx = link(&s, &[], &[]);
    let call = |sid: &str| {
        let r = request(
            json!(1),
            "tools/call",
            json!({"name": "read", "arguments": {"n": 1}}),
        );
        s.call(&self::sid(sid), "legacy", "tok", "owner", r);
    };
    call("warm");
    let warm = answer(&s, &mut rx, "warm").await;
    assert_eq!(warm["result"]["resultType"], "complete", "{warm}");
    let before = protocol::head::count::reads();
    call("c1");
    let a = answer(&s, &mut rx, "c1").await;
    let reads = protocol::head::count::reads() - before;
    assert_eq!(a["result"]["resultType"], "complete", "{a}");
    assert_eq!(
        reads, READS_PER_BRIDGED_CALL,
        "head reads for one bridged call"
    );
}

/// Head reads of one warm bridged call through the daemon today (see the test above).
const READS_PER_BRIDGED_CALL: u64 = 2;
