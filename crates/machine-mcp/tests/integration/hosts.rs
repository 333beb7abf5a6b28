//! What a host of each handshake-era version (2025-11-25, 2025-06-18, 2025-03-26) gets from
//! `machine-mcp stdio` and from `machine-mcp up` (relay and daemon) over Streamable HTTP.
//!
//! - SSE is framed as the negotiated version defines it: the priming event (an event id, a
//!   `retry` field and an empty `data:`) exists from 2025-11-25 (Streamable HTTP §
//!   Resumability); a client of an earlier version may parse every `data:` line as a JSON-RPC
//!   message (the TypeScript SDK that Gemini CLI bundles does, and drops the server when one does
//!   not parse), so its streams carry nothing else. Checked on every stream a session has: the
//!   `initialize` answer, the POST streams of requests, a `Last-Event-ID` replay and the
//!   standalone GET stream.
//! - The `initialize` answer for a version is one answer, whatever the transport: the same
//!   capabilities and server info over stdio and through the relay.

use std::{
    io::{BufRead, BufReader, Read},
    path::Path,
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use serde_json::{Value, json};

use crate::util::{Server, Tree, bin};

/// The handshake-era versions, newest first.
const VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];

/// The first version whose SSE streams open with a priming event.
const PRIMING_SINCE: &str = "2025-11-25";

/// How long any one HTTP exchange of these tests may take.
const HTTP_TIMEOUT: Duration = Duration::from_secs(60);

/// `machine-mcp up --json` on a free loopback port, killed on drop.
struct Up {
    child: Child,
    url: String,
    token: String,
    _state: tempfile::TempDir,
}

impl Up {
    fn start(ws: &Path) -> Self {
        let state = tempfile::tempdir().unwrap();
        let mut child = Command::new(bin())
            .args(["up", "--json", "--listen", "127.0.0.1:0", "--workspace"])
            .arg(ws)
            .arg("--state-dir")
            .arg(state.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(Duration::from_secs(60)).unwrap_or_default();
        let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        let (Some(url), Some(token)) = (v["mcp_url"].as_str(), v["token"].as_str()) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("up printed no JSON line with mcp_url and token: {line:?}");
        };
        Self {
            url: url.to_owned(),
            token: token.to_owned(),
            child,
            _state: state,
        }
    }

    /// A request to the MCP URL with the token, the session and, from 2025-06-18 (Streamable
    /// HTTP § Protocol Version Header), the `MCP-Protocol-Version` header.
    fn request(&self, method: &str, version: &str, session: Option<&str>) -> ureq::Request {
        let mut r = ureq::request(method, &self.url)
            .timeout(HTTP_TIMEOUT)
            .set("Authorization", &format!("Bearer {}", self.token));
        if version != "2025-03-26" {
            r = r.set("MCP-Protocol-Version", version);
        }
        if let Some(s) = session {
            r = r.set("Mcp-Session-Id", s);
        }
        r
    }

    /// POSTs `body` accepting JSON or SSE: the status, the session header and the raw body.
    fn post(
        &self,
        version: &str,
        session: Option<&str>,
        body: &Value,
    ) -> (u16, Option<String>, String) {
        let r = self
            .request("POST", version, session)
            .set("Content-Type", "application/json")
            .set("Accept", "application/json, text/event-stream")
            .send_string(&body.to_string());
        let resp = match r {
            Ok(r) | Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("POST failed: {e}"),
        };
        let status = resp.status();
        let sid = resp.header("mcp-session-id").map(str::to_owned);
        (status, sid, resp.into_string().unwrap_or_default())
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One SSE event: its field lines in order, as (field, value) pairs.
type SseEvent = Vec<(String, String)>;

/// The events of a raw SSE body (comments skipped; an event ends at an empty line).
fn sse_events(body: &str) -> Vec<SseEvent> {
    let mut out = Vec::new();
    let mut cur = Vec::new();
    for line in body.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            continue;
        }
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        cur.push((
            field.to_owned(),
            value.strip_prefix(' ').unwrap_or(value).to_owned(),
        ));
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Whether `e` is a priming event: an id, a `retry` and one empty `data:` (2025-11-25).
fn is_priming(e: &SseEvent) -> bool {
    let field = |name: &str| e.iter().filter(|(f, _)| f == name).count();
    field("id") == 1
        && field("retry") == 1
        && e.iter()
            .filter(|(f, _)| f == "data")
            .all(|(_, v)| v.is_empty())
        && field("data") == 1
}

/// The JSON-RPC messages of the SSE stream `what` as a strict client of `version` reads it:
/// every `data:` line must parse as JSON, except in the priming event that opens a stream of
/// 2025-11-25 (and only there); no `retry` field before 2025-11-25. With `opens`, a stream of
/// 2025-11-25 must open with its priming event.
fn strict_read(version: &str, what: &str, body: &str, opens: bool) -> Vec<Value> {
    let primed = version >= PRIMING_SINCE;
    let events = sse_events(body);
    let mut out = Vec::new();
    for (n, e) in events.iter().enumerate() {
        if primed && n == 0 && is_priming(e) {
            continue;
        }
        for (_, v) in e.iter().filter(|(f, _)| f == "data") {
            let parsed = serde_json::from_str::<Value>(v);
            assert!(
                parsed.is_ok(),
                "{version}, {what}: a data: line that is not JSON ({v:?}); a strict client of \
                 {version} drops the server\n{body}"
            );
            out.extend(parsed);
        }
        assert!(
            primed || !e.iter().any(|(f, _)| f == "retry"),
            "{version}, {what}: a retry field, which {version} does not define: {e:?}\n{body}"
        );
    }
    if primed && opens {
        assert!(
            events.first().is_some_and(is_priming),
            "{version}, {what}: the stream does not open with the priming event\n{body}"
        );
    }
    out
}

/// The event id of the last event of a raw SSE body.
fn last_event_id(body: &str) -> Option<String> {
    sse_events(body)
        .iter()
        .rev()
        .find_map(|e| e.iter().find(|(f, _)| f == "id").map(|(_, v)| v.to_owned()))
}

fn initialize_request(version: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": {},
        "clientInfo": {"name": "hosts-test", "version": "0"}}})
}

/// Opens the standalone GET stream of `session` on a thread: returns once its headers came,
/// with a receiver of its whole raw body (sent when the stream ends).
fn open_standalone(up: &Up, version: &str, session: &str) -> mpsc::Receiver<String> {
    let req = up
        .request("GET", version, Some(session))
        .set("Accept", "text/event-stream");
    let (opened_tx, opened_rx) = mpsc::channel();
    let (body_tx, body_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let resp = match req.call() {
            Ok(r) => r,
            Err(e) => {
                let _ = opened_tx.send(Err(e.to_string()));
                return;
            }
        };
        let _ = opened_tx.send(Ok(resp.status()));
        let mut body = String::new();
        let _ = resp.into_reader().read_to_string(&mut body);
        let _ = body_tx.send(body);
    });
    match opened_rx.recv_timeout(HTTP_TIMEOUT) {
        Ok(Ok(200)) => body_rx,
        other => panic!("{version}: GET of the standalone stream: {other:?}"),
    }
}

/// Every SSE stream of a session of each handshake-era version through `up` reads cleanly in a
/// strict client: `initialize`, `tools/list`, a `tools/call`, a replay with `Last-Event-ID`
/// and the standalone GET stream (which the session's end closes). Before 2025-11-25, no stream
/// carries a priming event (an empty `data:` line) or a `retry` field; 2025-11-25 streams open
/// with one. (The relay opened every stream of every version with the priming event, and Gemini
/// CLI, a 2025-06-18 client, loaded no tools.)
#[test]
fn every_sse_data_line_parses_as_json_in_a_session_of_each_version() {
    let t = Tree::new();
    t.write("notes.txt", "a marker line\n");
    let up = Up::start(t.path());
    for version in VERSIONS {
        let (status, sid, body) = up.post(version, None, &initialize_request(version));
        assert_eq!(status, 200, "{version}: initialize: {body}");
        let sid = sid.unwrap_or_else(|| panic!("{version}: no session id: {body}"));
        let init = strict_read(version, "initialize", &body, true);
        assert_eq!(
            init.last().map(|m| &m["result"]["protocolVersion"]),
            Some(&json!(version)),
            "{version}: {body}"
        );
        let (status, _, body) = up.post(
            version,
            Some(&sid),
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        );
        assert_eq!(status, 202, "{version}: notifications/initialized: {body}");

        let standalone = open_standalone(&up, version, &sid);

        let (status, _, body) = up.post(
            version,
            Some(&sid),
            &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        );
        assert_eq!(status, 200, "{version}: tools/list: {body}");
        let list = strict_read(version, "tools/list", &body, true);
        assert!(
            list.last().is_some_and(|m| m["result"]["tools"]
                .as_array()
                .is_some_and(|a| a.iter().any(|t| t["name"] == "read_file"))),
            "{version}: tools/list: {body}"
        );

        let (status, _, call_body) = up.post(
            version,
            Some(&sid),
            &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
                "name": "read_file", "arguments": {"path": "notes.txt"},
                "_meta": {"progressToken": "p3"}}}),
        );
        assert_eq!(status, 200, "{version}: tools/call: {call_body}");
        let call = strict_read(version, "tools/call", &call_body, true);
        assert!(
            call.last()
                .is_some_and(|m| m["result"]["structuredContent"]["content"]
                    .as_str()
                    .is_some_and(|c| c.contains("a marker line"))),
            "{version}: tools/call: {call_body}"
        );

        // A replay from the start of the call's stream (event 0 of the stream its last id names).
        let last = last_event_id(&call_body)
            .unwrap_or_else(|| panic!("{version}: no event id on the call's stream: {call_body}"));
        let stream = last.rsplit_once('-').map_or(last.as_str(), |(s, _)| s);
        let replay = up
            .request("GET", version, Some(&sid))
            .set("Accept", "text/event-stream")
            .set("Last-Event-ID", &format!("{stream}-0"))
            .call()
            .unwrap_or_else(|e| panic!("{version}: GET with Last-Event-ID: {e}"))
            .into_string()
            .unwrap_or_default();
        let replayed = strict_read(version, "a Last-Event-ID replay", &replay, false);
        assert_eq!(
            replayed.last().map(|m| &m["id"]),
            Some(&json!(3)),
            "{version}: the replay ends with the call's response: {replay}"
        );

        // The session's end closes the standalone stream.
        let deleted = up
            .request("DELETE", version, Some(&sid))
            .call()
            .map(|r| r.status());
        assert!(matches!(deleted, Ok(200)), "{version}: DELETE: {deleted:?}");
        let body = standalone
            .recv_timeout(HTTP_TIMEOUT)
            .unwrap_or_else(|_| panic!("{version}: the standalone stream did not end"));
        strict_read(version, "the standalone GET stream", &body, true);
    }
}

/// `initialize` over stdio and through `up` gives one answer per version: the same
/// capabilities, server info and protocol version. (Through the relay a 2025-06-18 client was
/// offered the tasks extension, which SEP-2663 defines for 2026-07-28 only, and no
/// `tools.listChanged`, which `machine-mcp stdio` announces.)
#[test]
fn initialize_answers_one_version_alike_over_stdio_and_http() {
    let t = Tree::new();
    let up = Up::start(t.path());
    for version in VERSIONS {
        let mut s = Server::spawn(t.path(), &[]);
        let stdio = s.request("initialize", initialize_request(version)["params"].clone());
        let stdio = &stdio["result"];
        let (status, _, body) = up.post(version, None, &initialize_request(version));
        assert_eq!(status, 200, "{version}: {body}");
        let http = strict_read(version, "initialize", &body, true);
        let http = &http.last().expect("the initialize answer")["result"];
        for field in ["protocolVersion", "capabilities", "serverInfo"] {
            assert_eq!(
                stdio[field], http[field],
                "{version}: {field} over stdio (left) and http (right)"
            );
        }
        assert_eq!(http["protocolVersion"], version);
        assert!(
            http["capabilities"]
                .pointer("/extensions/io.modelcontextprotocol~1tasks")
                .is_none(),
            "{version}: the tasks extension is 2026-07-28's: {}",
            http["capabilities"]
        );
    }
}
