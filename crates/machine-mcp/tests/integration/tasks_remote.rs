//! Tasks (SEP-2663) through the relay: a task lives in the daemon with its work, so a dropped
//! link and a relay restart while it runs do not lose it, and it belongs to its principal.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::{
    relay::{mcp_url, setup},
    stateless::Up,
    util::Tree,
};

/// A 2026-07-28 request (per-request `_meta` with the tasks extension, the mirrored headers)
/// POSTed to `url` with `token`; the JSON-RPC response.
fn post(url: &str, token: &str, id: i64, method: &str, mut params: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "tasks-remote", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities":
            {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    });
    let name = params
        .get("name")
        .or_else(|| params.get("taskId"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let mut r = ureq::post(url)
        .timeout(Duration::from_secs(60))
        .set("Authorization", &format!("Bearer {token}"))
        .set("Content-Type", "application/json")
        .set("Accept", "application/json")
        .set("MCP-Protocol-Version", "2026-07-28")
        .set("Mcp-Method", method);
    if let Some(n) = &name {
        r = r.set("Mcp-Name", n);
    }
    let resp = match r.send_string(&body.to_string()) {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("POST failed: {e}"),
    };
    let text = resp.into_string().unwrap_or_default();
    serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"))
}

/// Polls `tasks/get` of `task` at `url` until it is no longer `working` (at most 40 s).
fn wait_task(url: &str, token: &str, task: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let g = post(url, token, 3, "tasks/get", json!({"taskId": task}));
        let status = g["result"]["status"].as_str().unwrap_or("").to_owned();
        if status != "working" || Instant::now() > deadline {
            return g;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn tasks_reach_a_carried_server_with_the_capabilities_the_client_declared() {
    let ws = Tree::new();
    let inner = Tree::new();
    let up = Up::start(
        &ws,
        json!({"mcpServers": {"inner": {"command": crate::util::bin(),
            "args": ["stdio", "--workspace", inner.path(), "--profile", "agent"]}}}),
    );
    let url = up.servers["inner"].as_str().unwrap().to_owned();
    // Its discover (from the catalog) is the child's own: the tasks extension is advertised.
    let d = post(&url, &up.token, 9, "server/discover", json!({}));
    assert!(
        d.pointer("/result/capabilities/extensions/io.modelcontextprotocol~1tasks")
            .is_some(),
        "{d}"
    );
    // The carried server itself answers: no such task (-32602), not a missing capability.
    let g = post(
        &url,
        &up.token,
        1,
        "tasks/get",
        json!({"taskId": "no-such-task"}),
    );
    assert_eq!(g["error"]["code"], -32602, "{g}");
    // A long call becomes a task there, and tasks/get follows it to its result.
    let r = post(
        &url,
        &up.token,
        2,
        "tools/call",
        json!({"name": "run_process",
               "arguments": {"argv": ["sh", "-c", "sleep 5; echo carried"]}}),
    );
    assert_eq!(r["result"]["resultType"], "task", "{r}");
    let task = r["result"]["taskId"].as_str().expect("taskId").to_owned();
    let done = wait_task(&url, &up.token, &task);
    assert_eq!(done["result"]["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["result"]["structuredContent"]["stdout"],
        "carried\n"
    );
}

#[test]
fn a_task_survives_a_link_drop_and_a_relay_restart_and_belongs_to_its_principal() {
    let mut s = setup();
    let url = mcp_url(&s.relay, "b1");
    let r = post(
        &url,
        &s.token,
        1,
        "tools/call",
        json!({"name": "run_process",
               "arguments": {"argv": ["sh", "-c", "sleep 8; echo survived"]}}),
    );
    assert_eq!(r["result"]["resultType"], "task", "{r}");
    let task = r["result"]["taskId"].as_str().expect("taskId").to_owned();

    // The link drops, then the relay itself is replaced by a new process on the same store.
    s.relay.proxy.cut();
    s.relay.restart();
    s.relay.wait_ready(1);
    let url = mcp_url(&s.relay, "b1");

    // Another principal of the same bridge cannot see it.
    let other = s.relay.token("b1", "owner");
    let foreign = post(
        &url,
        &other,
        2,
        "tasks/get",
        json!({"taskId": task.clone()}),
    );
    assert_eq!(foreign["error"]["code"], -32602, "{foreign}");

    let deadline = Instant::now() + Duration::from_secs(40);
    let done = loop {
        let g = post(
            &url,
            &s.token,
            3,
            "tasks/get",
            json!({"taskId": task.clone()}),
        );
        let status = g["result"]["status"].as_str().unwrap_or("").to_owned();
        if status == "completed" || Instant::now() > deadline {
            break g;
        }
        assert!(
            status == "working" || g.get("error").is_some(),
            "unexpected state: {g}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(done["result"]["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["result"]["structuredContent"]["stdout"],
        "survived\n"
    );
}

/// Opens a 2026-07-28 POST of `method` and drops it before reading any of its answer: the
/// client's response stream is gone (transport loss, not cancellation).
fn post_and_drop(url: &str, token: &str, id: i64, method: &str, name: &str, mut params: Value) {
    use std::io::Write;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "tasks-remote", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities":
            {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    });
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
    let rest = url.strip_prefix("http://").expect("http URL");
    let (authority, path) = rest.split_at(rest.find('/').expect("a path"));
    let mut s = std::net::TcpStream::connect(authority).expect("connect");
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {authority}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nAccept: text/event-stream, application/json\r\n\
         MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: {method}\r\nMcp-Name: {name}\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    s.flush().expect("flush");
    std::thread::sleep(Duration::from_millis(300));
    drop(s);
}

/// Issue 15: a 2026-07-28 client whose response stream drops re-issues its request (the era has
/// no resumable streams). A read-only call is simply served again; a call that had become a
/// task is found by its task id and never runs twice; nothing stays pending on the relay.
#[test]
fn a_2026_client_whose_stream_drops_reissues_and_a_task_never_runs_twice() {
    let s = setup();
    let url = mcp_url(&s.relay, "b1");
    post_and_drop(
        &url,
        &s.token,
        1,
        "tools/call",
        "read_file",
        json!({"name": "read_file", "arguments": {"path": "hello.txt"}}),
    );
    let again = post(
        &url,
        &s.token,
        1,
        "tools/call",
        json!({"name": "read_file", "arguments": {"path": "hello.txt"}}),
    );
    assert_eq!(
        again["result"]["structuredContent"]["content"], "hello from the workspace\n",
        "{again}"
    );

    let r = post(
        &url,
        &s.token,
        2,
        "tools/call",
        json!({"name": "run_process",
               "arguments": {"argv": ["sh", "-c", "echo ran >> runs.txt; sleep 4; echo done"]}}),
    );
    assert_eq!(r["result"]["resultType"], "task", "{r}");
    let task = r["result"]["taskId"].as_str().expect("taskId").to_owned();
    // The stream of a `tasks/get` drops; the client asks again by the task id.
    post_and_drop(
        &url,
        &s.token,
        3,
        "tasks/get",
        &task,
        json!({"taskId": task.clone()}),
    );
    let done = wait_task(&url, &s.token, &task);
    assert_eq!(done["result"]["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["result"]["structuredContent"]["stdout"],
        "done\n"
    );
    let runs = std::fs::read_to_string(s.ws.path().join("runs.txt")).expect("runs.txt");
    assert_eq!(runs, "ran\n", "the task ran exactly once");
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.relay.metric("machine_mcp_relay_inflight_requests") != 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(s.relay.metric("machine_mcp_relay_inflight_requests"), 0);
}
