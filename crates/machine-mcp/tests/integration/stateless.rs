//! MCP 2026-07-28 through the relay: requests without a session on the same URLs as the session
//! era (`server/discover`, `tools/list`, `tools/call`), the header and `_meta` checks, offline
//! answers from the catalog, a link drop during a call, and cancellation by closing the stream.

use std::{
    io::{BufRead, BufReader, Read, Write},
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use crate::{
    net::{Client, Relay, SseReader, tool_error},
    relay::{fake_socket, mcp_url, read_frame, setup, spawn_up},
    util::Tree,
};

const MODERN: &str = "2026-07-28";

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "stateless-tests", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

/// An HTTP answer to a modern POST.
#[derive(Debug)]
struct Reply {
    status: u16,
    content_type: String,
    session: Option<String>,
    messages: Vec<Value>,
}

impl Reply {
    /// The last message (the response).
    fn last(&self) -> &Value {
        self.messages
            .last()
            .unwrap_or_else(|| panic!("no message: {self:?}"))
    }
}

/// A 2026-07-28 client: every request carries `_meta` and the mirrored headers; no session.
pub(crate) struct Modern {
    url: String,
    token: String,
    next: i64,
}

impl Modern {
    pub(crate) fn new(url: &str, token: &str) -> Self {
        Self {
            url: url.to_owned(),
            token: token.to_owned(),
            next: 100,
        }
    }

    /// A request body with `_meta` merged into `params`.
    pub(crate) fn body(&mut self, method: &str, mut params: Value) -> Value {
        self.next += 1;
        params["_meta"] = meta();
        json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params})
    }

    /// The headers a conforming client sends for `body`.
    fn headers_for(body: &Value) -> Vec<(String, String)> {
        let method = body["method"].as_str().unwrap().to_owned();
        let mut h = vec![
            ("MCP-Protocol-Version".to_owned(), MODERN.to_owned()),
            ("Mcp-Method".to_owned(), method.clone()),
        ];
        let name = match method.as_str() {
            "tools/call" => body["params"]["name"].as_str(),
            "tasks/get" | "tasks/update" | "tasks/cancel" => body["params"]["taskId"].as_str(),
            _ => None,
        };
        if let Some(n) = name {
            h.push(("Mcp-Name".to_owned(), n.to_owned()));
        }
        h
    }

    fn request(&self, headers: &[(String, String)], accept: &str) -> ureq::Request {
        let mut r = ureq::post(&self.url)
            .timeout(Duration::from_secs(120))
            .set("Authorization", &format!("Bearer {}", self.token))
            .set("Content-Type", "application/json")
            .set("Accept", accept);
        for (k, v) in headers {
            r = r.set(k, v);
        }
        r
    }

    /// POSTs `body` with `headers` and reads the whole answer.
    fn send(&self, body: &Value, headers: &[(String, String)], accept: &str) -> Reply {
        let resp = match self.request(headers, accept).send_string(&body.to_string()) {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("POST failed: {e}"),
        };
        let status = resp.status();
        let content_type = resp.content_type().to_owned();
        let session = resp.header("mcp-session-id").map(str::to_owned);
        let messages = if content_type == "text/event-stream" {
            let mut r = SseReader::new(resp);
            let mut v = Vec::new();
            while let Some((id, m)) = r.next_message(Duration::from_secs(120)) {
                assert!(id.is_none(), "2026-07-28 streams carry no event ids");
                assert!(!m.is_null(), "2026-07-28 streams have no priming event");
                v.push(m);
            }
            v
        } else {
            let text = resp.into_string().unwrap_or_default();
            serde_json::from_str(&text).into_iter().collect()
        };
        Reply {
            status,
            content_type,
            session,
            messages,
        }
    }

    /// A conforming request accepting JSON and SSE.
    fn rpc(&mut self, method: &str, params: Value) -> Reply {
        let body = self.body(method, params);
        let h = Self::headers_for(&body);
        self.send(&body, &h, "application/json, text/event-stream")
    }

    /// A conforming request whose SSE answer is read as it arrives.
    fn stream(&mut self, method: &str, params: Value) -> SseReader {
        let body = self.body(method, params);
        let h = Self::headers_for(&body);
        let resp = self
            .request(&h, "text/event-stream, application/json")
            .send_string(&body.to_string())
            .expect("POST");
        assert_eq!(resp.content_type(), "text/event-stream");
        SseReader::new(resp)
    }
}

fn tool_names(reply: &Reply) -> Vec<String> {
    reply.last()["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("tools/list: {reply:?}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// `up` for a workspace, killed on drop.
pub(crate) struct Up {
    child: std::process::Child,
    mcp_url: String,
    pub(crate) servers: Value,
    pub(crate) token: String,
    _state: tempfile::TempDir,
}

impl Up {
    pub(crate) fn start(ws: &Tree, servers: Value) -> Self {
        let state = tempfile::tempdir().unwrap();
        let file = ws.write("servers.json", servers.to_string());
        let (mut child, _) = spawn_up(ws.path(), state.path(), &file, std::process::Stdio::piped());
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let v: Value = serde_json::from_str(&line).expect("up prints one JSON object");
        Self {
            child,
            mcp_url: v["mcp_url"].as_str().unwrap().to_owned(),
            servers: v["servers"].clone(),
            token: v["token"].as_str().unwrap().to_owned(),
            _state: state,
        }
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn assert_discover(reply: &Reply) {
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(reply.session.is_none(), "no session is issued: {reply:?}");
    let r = &reply.last()["result"];
    assert_eq!(r["resultType"], "complete", "{r}");
    let versions = r["supportedVersions"]
        .as_array()
        .expect("supportedVersions");
    assert!(versions.contains(&json!(MODERN)), "{r}");
    assert!(r["capabilities"]["tools"].is_object(), "{r}");
    assert!(
        r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"].is_string(),
        "{r}"
    );
    assert!(r["ttlMs"].as_u64().is_some(), "{r}");
    assert!(
        matches!(r["cacheScope"].as_str(), Some("public" | "private")),
        "{r}"
    );
}

#[test]
fn discover_through_up_answers_the_probe_of_2026_07_28_hosts() {
    let ws = Tree::new();
    let up = Up::start(&ws, json!({"mcpServers": {}}));
    let mut c = Modern::new(&up.mcp_url, &up.token);
    let d = c.rpc("server/discover", json!({}));
    assert_discover(&d);
    assert_eq!(
        d.last()["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "machine-mcp"
    );
    let r = c.rpc(
        "tools/call",
        json!({"name": "list_dir", "arguments": {"path": "."}}),
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_ne!(r.last()["result"]["isError"], true, "{r:?}");
}

#[test]
fn a_carried_upstream_is_served_to_2026_clients_through_up() {
    let ws = Tree::new();
    let inner = Tree::new();
    inner.write("inner.txt", "from the upstream server\n");
    let up = Up::start(
        &ws,
        json!({"mcpServers": {"inner": {"command": crate::util::bin(),
            "args": ["stdio", "--workspace", inner.path()]}}}),
    );
    let url = up.servers["inner"].as_str().unwrap().to_owned();
    let mut c = Modern::new(&url, &up.token);
    assert_discover(&c.rpc("server/discover", json!({})));
    let list = c.rpc("tools/list", json!({}));
    assert!(
        tool_names(&list).contains(&"read_file".to_owned()),
        "{list:?}"
    );
    let r = c.rpc(
        "tools/call",
        json!({"name": "read_file", "arguments": {"path": "inner.txt"}}),
    );
    assert_eq!(
        r.last()["result"]["structuredContent"]["content"],
        "from the upstream server\n",
        "{r:?}"
    );
}

#[test]
fn tools_are_listed_and_called_without_a_session() {
    let s = setup();
    let mut c = Modern::new(&mcp_url(&s.relay, "b1"), &s.token);
    let list = c.rpc("tools/list", json!({}));
    assert_eq!(list.status, 200, "{list:?}");
    assert!(list.session.is_none());
    let names = tool_names(&list);
    assert!(names.contains(&"read_file".to_owned()), "{names:?}");
    let result = &list.last()["result"];
    assert_eq!(result["resultType"], "complete", "{result}");
    assert!(result["ttlMs"].as_u64().is_some(), "{result}");
    assert!(result["cacheScope"].is_string(), "{result}");
    // A quick answer with nothing before it comes back as one JSON body.
    let r = c.rpc(
        "tools/call",
        json!({"name": "read_file", "arguments": {"path": "hello.txt"}}),
    );
    assert_eq!(
        (r.status, r.content_type.as_str()),
        (200, "application/json"),
        "{r:?}"
    );
    assert_eq!(
        r.last()["result"]["structuredContent"]["content"],
        "hello from the workspace\n",
        "{r:?}"
    );
    assert_eq!(r.last()["result"]["resultType"], "complete");
    // A client that accepts only JSON, and a stray session id, which is ignored.
    let body = c.body(
        "tools/call",
        json!({"name": "read_file", "arguments": {"path": "hello.txt"}}),
    );
    let mut h = Modern::headers_for(&body);
    h.push(("Mcp-Session-Id".into(), "made.up".into()));
    let r = c.send(&body, &h, "application/json");
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.session.is_none(), "no session id is echoed");
    assert_eq!(
        r.last()["result"]["structuredContent"]["content"],
        "hello from the workspace\n"
    );
    assert_eq!(
        s.relay.metric("machine_mcp_relay_sessions"),
        0,
        "no session was created"
    );
    // Calls end with their answer: nothing stays in flight.
    assert_eq!(s.relay.metric("machine_mcp_relay_inflight_requests"), 0);
}

#[test]
fn headers_that_contradict_the_body_are_refused_before_anything_runs() {
    let s = setup();
    let mut c = Modern::new(&mcp_url(&s.relay, "b1"), &s.token);
    let body = c.body(
        "tools/call",
        json!({"name": "write_file", "arguments": {"path": "pwned.txt", "content": "x"}}),
    );
    // Mcp-Method says tools/list, the body says tools/call.
    let mut h = Modern::headers_for(&body);
    h[1].1 = "tools/list".into();
    let r = c.send(&body, &h, "application/json, text/event-stream");
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.last()["error"]["code"], -32020, "{r:?}");
    assert_eq!(r.last()["id"], body["id"]);
    // Mcp-Name names another tool.
    let mut h = Modern::headers_for(&body);
    h[2].1 = "read_file".into();
    let r = c.send(&body, &h, "application/json");
    assert_eq!(
        (r.status, r.last()["error"]["code"].clone()),
        (400, json!(-32020))
    );
    // No Mcp-Method at all.
    let h = vec![("MCP-Protocol-Version".to_owned(), MODERN.to_owned())];
    let r = c.send(&body, &h, "application/json");
    assert_eq!(
        (r.status, r.last()["error"]["code"].clone()),
        (400, json!(-32020))
    );
    // The version header differs from _meta.
    let mut h = Modern::headers_for(&body);
    h[0].1 = "2025-11-25".into();
    let r = c.send(&body, &h, "application/json");
    assert_eq!(
        (r.status, r.last()["error"]["code"].clone()),
        (400, json!(-32020))
    );
    assert!(
        !s.ws.path().join("pwned.txt").exists(),
        "a refused call ran"
    );
}

#[test]
fn requests_missing_required_meta_or_naming_an_unknown_version_are_refused() {
    let s = setup();
    let mut c = Modern::new(&mcp_url(&s.relay, "b1"), &s.token);
    // No clientCapabilities.
    let mut body = c.body("tools/list", json!({}));
    body["params"]["_meta"]
        .as_object_mut()
        .unwrap()
        .remove("io.modelcontextprotocol/clientCapabilities");
    let h = Modern::headers_for(&body);
    let r = c.send(&body, &h, "application/json");
    assert_eq!(
        (r.status, r.last()["error"]["code"].clone()),
        (400, json!(-32602)),
        "{r:?}"
    );
    // No _meta at all, with the 2026-07-28 header.
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"});
    let r = c.send(&body, &h, "application/json");
    assert_eq!(
        (r.status, r.last()["error"]["code"].clone()),
        (400, json!(-32602)),
        "{r:?}"
    );
    // server/discover needs its _meta too.
    let body = json!({"jsonrpc": "2.0", "id": 6, "method": "server/discover", "params": {}});
    let h = vec![
        ("MCP-Protocol-Version".to_owned(), MODERN.to_owned()),
        ("Mcp-Method".to_owned(), "server/discover".to_owned()),
    ];
    let r = c.send(&body, &h, "application/json");
    assert_eq!(
        (r.status, r.last()["error"]["code"].clone()),
        (400, json!(-32602)),
        "{r:?}"
    );
    // A version nobody serves: the error lists the supported ones.
    let mut body = c.body("tools/list", json!({}));
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let mut h = Modern::headers_for(&body);
    h[0].1 = "2099-01-01".into();
    let r = c.send(&body, &h, "application/json");
    assert_eq!(r.status, 400, "{r:?}");
    let e = &r.last()["error"];
    assert_eq!(e["code"], -32022, "{e}");
    assert_eq!(e["data"]["requested"], "2099-01-01");
    let supported = e["data"]["supported"].as_array().unwrap();
    assert!(
        supported.contains(&json!(MODERN)) && supported.contains(&json!("2025-11-25")),
        "{e}"
    );
}

/// A handshake-era version in `_meta` without a session is not "unsupported" (discover lists it):
/// the refusal says what to do instead of sending the client round in circles.
#[test]
fn a_handshake_era_version_without_a_session_is_told_to_initialize() {
    let s = setup();
    let mut c = Modern::new(&mcp_url(&s.relay, "b1"), &s.token);
    let mut body = c.body("tools/list", json!({}));
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2025-11-25");
    let mut h = Modern::headers_for(&body);
    h[0].1 = "2025-11-25".into();
    let r = c.send(&body, &h, "application/json");
    assert_eq!(r.status, 400, "{r:?}");
    let e = &r.last()["error"];
    assert_eq!(e["code"], -32022, "{e}");
    let text = e["message"].as_str().unwrap_or("");
    assert!(
        text.contains("initialize") && text.contains("2026-07-28"),
        "{text}"
    );
}

/// MCP Basic § Requests: a request id is a string or an integer, never null. A request with
/// any other id is refused, not taken for a notification.
#[test]
fn request_ids_that_are_not_strings_or_integers_are_refused() {
    let s = setup();
    let mut c = Modern::new(&mcp_url(&s.relay, "b1"), &s.token);
    for id in [json!(null), json!(1.5), json!({}), json!(1e30), json!(true)] {
        let mut body = c.body("tools/list", json!({}));
        body["id"] = id.clone();
        let h = Modern::headers_for(&body);
        let r = c.send(&body, &h, "application/json");
        assert_eq!(
            (
                r.status,
                r.last()["error"]["code"].clone(),
                r.last()["id"].clone()
            ),
            (400, json!(-32600), json!(null)),
            "id {id}: {r:?}"
        );
    }
    // The same in the session era, before any session exists.
    let body = json!({"jsonrpc": "2.0", "id": null, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "stateless-tests", "version": "0"}}});
    let r = c.send(&body, &[], "application/json, text/event-stream");
    assert_eq!(
        (r.status, r.last()["error"]["code"].clone()),
        (400, json!(-32600)),
        "{r:?}"
    );
}

#[test]
fn initialize_and_ping_naming_2026_07_28_are_methods_that_do_not_exist() {
    let s = setup();
    let url = mcp_url(&s.relay, "b1");
    let mut c = Modern::new(&url, &s.token);
    for method in ["initialize", "ping"] {
        let r = c.rpc(method, json!({}));
        assert_eq!(r.status, 404, "{method}: {r:?}");
        let m = r.last();
        assert_eq!(m["id"], c.next, "{method}: the id is echoed: {m}");
        assert_eq!(m["error"]["code"], -32601, "{method}: {m}");
        let text = m["error"]["message"].as_str().unwrap_or("");
        assert!(
            text.starts_with(&format!("{method} is not part of MCP 2026-07-28")),
            "{text}"
        );
    }
    // A handshake-era initialize sent with the 2026-07-28 header alone is the same request.
    let body = json!({"jsonrpc": "2.0", "id": "init-1", "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "stateless-tests", "version": "0"}}});
    let h = vec![
        ("MCP-Protocol-Version".to_owned(), MODERN.to_owned()),
        ("Mcp-Method".to_owned(), "initialize".to_owned()),
    ];
    let r = c.send(&body, &h, "application/json, text/event-stream");
    assert_eq!(
        (
            r.status,
            r.last()["error"]["code"].clone(),
            r.last()["id"].clone()
        ),
        (404, json!(-32601), json!("init-1")),
        "{r:?}"
    );
    assert!(r.session.is_none());
    // Without the 2026-07-28 header, initialize opens a session as always, and ping works in it.
    let mut legacy = Client::new(&url, Some(&s.token));
    let init = legacy.initialize();
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    assert!(legacy.session.is_some());
    let pong = legacy.post(&json!({"jsonrpc": "2.0", "id": 9, "method": "ping"}));
    assert_eq!(pong.status, 200, "{pong:?}");
    assert_eq!(pong.messages.last().unwrap()["result"], json!({}));
}

#[test]
fn task_requests_without_their_task_in_mcp_name_are_refused() {
    let s = setup();
    let mut c = Modern::new(&mcp_url(&s.relay, "b1"), &s.token);
    for method in ["tasks/get", "tasks/cancel"] {
        let mut body = c.body(method, json!({"taskId": "task-1"}));
        body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
            json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
        let mut h = Modern::headers_for(&body);
        assert_eq!(h[2], ("Mcp-Name".to_owned(), "task-1".to_owned()));
        // Named: it reaches the server (which knows no such task: -32602, not a header error).
        let r = c.send(&body, &h, "application/json");
        assert_eq!(r.last()["error"]["code"], -32602, "{method}: {r:?}");
        // Naming another task.
        h[2].1 = "task-2".into();
        let r = c.send(&body, &h, "application/json");
        assert_eq!(
            (
                r.status,
                r.last()["error"]["code"].clone(),
                r.last()["id"].clone()
            ),
            (400, json!(-32020), body["id"].clone()),
            "{method}: {r:?}"
        );
        // Not naming one.
        h.truncate(2);
        let r = c.send(&body, &h, "application/json");
        assert_eq!(
            (r.status, r.last()["error"]["code"].clone()),
            (400, json!(-32020)),
            "{method}: {r:?}"
        );
    }
}

#[test]
fn a_carried_servers_unsupported_version_error_lists_what_its_discover_reports() {
    let ws = Tree::new();
    let inner = Tree::new();
    let up = Up::start(
        &ws,
        json!({"mcpServers": {"inner": {"command": crate::util::bin(),
            "args": ["stdio", "--workspace", inner.path()]}}}),
    );
    let url = up.servers["inner"].as_str().unwrap().to_owned();
    let mut c = Modern::new(&url, &up.token);
    let d = c.rpc("server/discover", json!({}));
    assert_discover(&d);
    let offered = d.last()["result"]["supportedVersions"].clone();
    let mut body = c.body("tools/list", json!({}));
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let mut h = Modern::headers_for(&body);
    h[0].1 = "2099-01-01".into();
    let r = c.send(&body, &h, "application/json");
    assert_eq!(r.status, 400, "{r:?}");
    let e = &r.last()["error"];
    assert_eq!(e["code"], -32022, "{e}");
    assert_eq!(e["data"]["supported"], offered, "{e}");
}

#[test]
fn discover_then_initialize_on_the_same_url_serves_both_eras() {
    let s = setup();
    let url = mcp_url(&s.relay, "b1");
    let mut m = Modern::new(&url, &s.token);
    assert_discover(&m.rpc("server/discover", json!({})));
    // The same URL, now in the session era.
    let mut c = Client::new(&url, Some(&s.token));
    let init = c.initialize();
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    assert!(c.session.is_some());
    assert!(c.tool_names().contains(&"read_file".to_owned()));
    let r = c.call("read_file", json!({"path": "hello.txt"}));
    assert_eq!(
        r["result"]["structuredContent"]["content"],
        "hello from the workspace\n"
    );
    // And both keep working side by side.
    let list = m.rpc("tools/list", json!({}));
    assert!(tool_names(&list).contains(&"read_file".to_owned()));
    assert_eq!(s.relay.metric("machine_mcp_relay_sessions"), 1);
}

#[test]
fn while_the_daemon_is_offline_discover_and_tools_list_come_from_the_catalog() {
    let mut s = setup();
    s.daemon.kill();
    s.relay.wait_ready(0);
    let mut c = Modern::new(&mcp_url(&s.relay, "b1"), &s.token);
    let d = c.rpc("server/discover", json!({}));
    assert_discover(&d);
    assert_eq!(
        d.last()["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "machine-mcp"
    );
    let list = c.rpc("tools/list", json!({}));
    assert_eq!(list.status, 200, "{list:?}");
    assert!(tool_names(&list).contains(&"read_file".to_owned()));
    let result = &list.last()["result"];
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["ttlMs"], 0, "a cached copy is immediately stale");
    assert_eq!(
        result["cacheScope"], "private",
        "lists are filtered per role"
    );
    // A reviewer's offline list is the reviewer's.
    let reviewer = s.relay.token("b1", "reviewer");
    let mut rc = Modern::new(&mcp_url(&s.relay, "b1"), &reviewer);
    let names = tool_names(&rc.rpc("tools/list", json!({})));
    assert!(!names.contains(&"write_file".to_owned()), "{names:?}");
    let start = Instant::now();
    let r = c.rpc(
        "tools/call",
        json!({"name": "read_file", "arguments": {"path": "hello.txt"}}),
    );
    let e = tool_error(r.last());
    assert_eq!(e["code"], "unavailable");
    assert_eq!(e["retryable"], true);
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn the_link_dropped_mid_call_reconnects_and_the_2026_result_arrives() {
    let s = setup();
    let mut c = Modern::new(&mcp_url(&s.relay, "b1"), &s.token);
    let mut stream = c.stream(
        "tools/call",
        json!({"name": "run_process", "arguments": {"argv": ["sh", "-c", "sleep 10; echo survived"], "yield_after_seconds": 60}}),
    );
    std::thread::sleep(Duration::from_secs(2));
    let reconnects = s.relay.metric("machine_mcp_relay_daemon_reconnects_total");
    s.relay.proxy.cut();
    let mut last = Value::Null;
    while let Some((_, m)) = stream.next_message(Duration::from_secs(40)) {
        last = m;
    }
    assert_eq!(last["id"], c.next, "relay log:\n{}", s.relay.proc.log());
    assert_eq!(
        last["result"]["structuredContent"]["stdout"], "survived\n",
        "{last}"
    );
    assert!(s.relay.metric("machine_mcp_relay_daemon_reconnects_total") > reconnects);
    assert_eq!(s.relay.metric("machine_mcp_relay_detached_requests"), 0);
    assert_eq!(s.relay.metric("machine_mcp_relay_inflight_requests"), 0);
}

#[test]
fn closing_the_response_stream_cancels_the_call() {
    closing_the_response_cancels(false, SSE_OR_JSON);
}

/// A call that may become a task is still in the foreground for its first seconds: closing its
/// response then cancels it like any call (it has no task id the client could cancel).
#[test]
fn closing_the_response_in_the_foreground_window_cancels_a_task_capable_call() {
    closing_the_response_cancels(true, SSE_OR_JSON);
}

/// The same for a client that takes only a JSON response (nothing is sent before the answer).
#[test]
fn closing_a_held_json_response_in_the_foreground_window_cancels_a_task_capable_call() {
    closing_the_response_cancels(true, "application/json");
}

pub(crate) const SSE_OR_JSON: &str = "text/event-stream, application/json";

/// Closes the response of a `run_process` call as soon as its process runs, and checks that the
/// process is gone and nothing is left in flight; `tasks`: the client declared the tasks extension;
/// `accept`: the request's `Accept`.
fn closing_the_response_cancels(tasks: bool, accept: &str) {
    let s = setup();
    let mut c = Modern::new(&mcp_url(&s.relay, "b1"), &s.token);
    let mut body = c.body(
        "tools/call",
        json!({"name": "run_process", "arguments": {"argv": ["sh", "-c", "echo $$ > call.pid; exec sleep 100"], "yield_after_seconds": 60}}),
    );
    if tasks {
        body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
            json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    }
    let mut sock = raw_post(&mcp_url(&s.relay, "b1"), &s.token, &body, accept);
    let pidfile = s.ws.path().join("call.pid");
    let end = Instant::now() + Duration::from_secs(20);
    let pid: u32 = loop {
        if let Some(p) = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            break p;
        }
        assert!(Instant::now() < end, "the process never started");
        std::thread::sleep(Duration::from_millis(20));
    };
    if accept.contains("text/event-stream") {
        // The stream is open (its headers came); then the client goes away.
        let head = read_some(&mut sock);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    }
    drop(sock);
    assert!(
        crate::util::wait_gone(pid.into(), Duration::from_secs(30)),
        "the cancelled call's process {pid} survived\nrelay:\n{}",
        s.relay.proc.log()
    );
    let end = Instant::now() + Duration::from_secs(10);
    while s.relay.metric("machine_mcp_relay_inflight_requests") != 0 {
        assert!(
            Instant::now() < end,
            "the cancelled call is still in flight"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// POSTs `body` (with the headers of a conforming client and `accept`) to the MCP URL `url`
/// (`http://HOST:PORT/PATH`) over a raw connection, so that dropping it really closes the TCP
/// stream.
pub(crate) fn raw_post(url: &str, token: &str, body: &Value, accept: &str) -> std::net::TcpStream {
    let (host, path) = url
        .strip_prefix("http://")
        .and_then(|r| r.split_once('/'))
        .unwrap_or_else(|| panic!("not an http://HOST/PATH URL: {url}"));
    let text = body.to_string();
    let mut head = format!(
        "POST /{path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nAccept: {accept}\r\nContent-Length: {}\r\n",
        text.len()
    );
    for (k, v) in Modern::headers_for(body) {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let mut sock = std::net::TcpStream::connect(host).unwrap();
    sock.write_all(head.as_bytes()).unwrap();
    sock.write_all(text.as_bytes()).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    sock
}

/// What arrives on `sock` within its read timeout (at least one read).
pub(crate) fn read_some(sock: &mut std::net::TcpStream) -> String {
    let mut buf = vec![0u8; 64 * 1024];
    let n = sock.read(&mut buf).unwrap_or(0);
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn subscriptions_listen_stays_open_until_the_client_closes_it() {
    let s = setup();
    let mut c = Modern::new(&mcp_url(&s.relay, "b1"), &s.token);
    let body = c.body(
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": true}}),
    );
    let mut sock = raw_post(&mcp_url(&s.relay, "b1"), &s.token, &body, SSE_OR_JSON);
    // Headers and the acknowledgment arrive at once (a subscription is never held back as JSON).
    let mut got = String::new();
    let end = Instant::now() + Duration::from_secs(10);
    while !got.contains("notifications/subscriptions/acknowledged") {
        assert!(Instant::now() < end, "no acknowledgment: {got:?}");
        got.push_str(&read_some(&mut sock));
    }
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(
        got.to_ascii_lowercase()
            .contains("content-type: text/event-stream"),
        "{got}"
    );
    assert!(
        !got.to_ascii_lowercase().contains("\nmcp-session-id:"),
        "no session header: {got}"
    );
    // Longer than the response hold: still open, counted as a subscription and not against the
    // bridge's in-flight requests (idle subscriptions never starve calls).
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(s.relay.metric("machine_mcp_relay_subscriptions"), 1);
    assert_eq!(s.relay.metric("machine_mcp_relay_inflight_requests"), 0);
    drop(sock);
    s.relay.wait_metric("machine_mcp_relay_subscriptions", 0);
}

#[test]
fn a_daemon_older_than_revision_2_gets_no_call_and_2026_clients_get_the_catalog_or_a_clear_error() {
    let relay = Relay::start(&[]);
    let code = relay.add_bridge("b1");
    let token = relay.token("b1", "owner");
    let state = tempfile::tempdir().unwrap();
    let key = daemon::identity::DeviceKey::load_or_create(&state.path().join("old")).unwrap();
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
    // A revision-1 daemon: its hello names no revision and its catalog no discover result.
    let mut ws = fake_socket(&relay);
    let welcome = read_frame(&mut ws).unwrap();
    assert_eq!(
        welcome["revision"],
        protocol::frame::LINK_REVISION,
        "{welcome}"
    );
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let transcript = protocol::frame::hello_transcript(
        &relay.public(),
        welcome["challenge"].as_str().unwrap(),
        "b1",
        "inst_old",
        ts,
    );
    let init = json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {"listChanged": false}},
        "serverInfo": {"name": "old-daemon", "version": "0.9"}, "instructions": "An old one."});
    let tools = json!({"tools": [{"name": "read_file", "inputSchema": {"type": "object"}}]});
    let hello = json!({"type": "hello", "protocol": 1, "bridge": "b1", "instance_id": "inst_old",
        "key_id": key_id, "timestamp": ts, "signature": key.sign(&transcript), "version": "0.9",
        "servers": [{"name": "runtime", "initialize": init, "tools": {"owner": tools}}]});
    ws.send(tungstenite::Message::Text(hello.to_string().into()))
        .unwrap();
    assert_eq!(read_frame(&mut ws).unwrap()["type"], "hello_ack");
    let probe = read_frame(&mut ws).unwrap();
    ws.send(tungstenite::Message::Text(
        json!({"type": "probe_result", "id": probe["id"]})
            .to_string()
            .into(),
    ))
    .unwrap();
    assert_eq!(read_frame(&mut ws).unwrap()["type"], "resume");
    assert_eq!(read_frame(&mut ws).unwrap()["type"], "ready");
    relay.wait_ready(1);
    let mut c = Modern::new(&mcp_url(&relay, "b1"), &token);
    let d = c.rpc("server/discover", json!({}));
    assert_discover(&d);
    let r = &d.last()["result"];
    assert_eq!(
        r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "old-daemon"
    );
    assert_eq!(r["instructions"], "An old one.");
    assert_eq!(r["capabilities"], json!({"tools": {"listChanged": false}}));
    let list = c.rpc("tools/list", json!({}));
    assert_eq!(tool_names(&list), vec!["read_file".to_owned()]);
    let start = Instant::now();
    let r = c.rpc(
        "tools/call",
        json!({"name": "read_file", "arguments": {"path": "x"}}),
    );
    assert!(start.elapsed() < Duration::from_secs(2), "answered at once");
    assert_eq!(r.status, 501, "{r:?}");
    let msg = r.last()["error"]["message"].as_str().unwrap_or("");
    assert!(msg.contains("too old for MCP 2026-07-28"), "{msg}");
    // Nothing was sent to the old daemon: no `call` frame (it would not understand it).
    if let tungstenite::stream::MaybeTlsStream::Plain(t) = ws.get_mut() {
        t.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
    }
    while let Ok(f) = read_frame(&mut ws) {
        assert_ne!(f["type"], "call", "{f}");
    }
}
