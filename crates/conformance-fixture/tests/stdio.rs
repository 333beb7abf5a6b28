//! End-to-end checks of the fixture over real stdio: the binary is spawned and driven with raw
//! newline-delimited JSON-RPC, the way an HTTP front (supergateway, our relay) drives it.

use std::{process::Stdio, time::Duration};

use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines},
    process::{Child, ChildStdin, ChildStdout, Command},
    time::timeout,
};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// How long any single message may take to arrive.
const WAIT: Duration = Duration::from_secs(10);

/// A running fixture with a JSON-RPC line reader and writer.
struct Fixture {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    next_id: i64,
}

impl Fixture {
    /// Spawns the binary (with `env` added) and completes the initialize handshake.
    async fn start(env: &[(&str, &str)]) -> Result<(Self, Value), Box<dyn std::error::Error>> {
        let mut fixture = Self::spawn(&[], env)?;
        let init = fixture
            .request(
                "initialize",
                json!({
                    "protocolVersion": "2025-11-25",
                    "capabilities": { "sampling": {}, "elicitation": {} },
                    "clientInfo": { "name": "fixture-test", "version": "0" }
                }),
            )
            .await?;
        fixture
            .send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))
            .await?;
        Ok((fixture, init))
    }

    /// Spawns the binary with `args` (and `env` added), without any handshake.
    fn spawn(args: &[&str], env: &[(&str, &str)]) -> Result<Self, Box<dyn std::error::Error>> {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_conformance-fixture"));
        cmd.args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn()?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        Ok(Self {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            next_id: 0,
        })
    }

    async fn send(&mut self, message: &Value) -> TestResult {
        let mut line = serde_json::to_vec(message)?;
        line.push(b'\n');
        self.stdin.write_all(&line).await?;
        self.stdin.flush().await?;
        Ok(())
    }

    async fn recv(&mut self) -> Result<Value, Box<dyn std::error::Error>> {
        let line = timeout(WAIT, self.lines.next_line())
            .await?
            .map_err(|e| format!("read: {e}"))?
            .ok_or("fixture closed stdout")?;
        Ok(serde_json::from_str(&line)?)
    }

    /// Sends a request and collects every message until its response (returned last).
    async fn exchange(
        &mut self,
        method: &str,
        params: Value,
    ) -> Result<(Vec<Value>, Value), Box<dyn std::error::Error>> {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
            .await?;
        let mut before = Vec::new();
        loop {
            let msg = self.recv().await?;
            if msg.get("id") == Some(&json!(id)) && msg.get("method").is_none() {
                return Ok((before, msg));
            }
            before.push(msg);
        }
    }

    /// Sends a request and returns its `result` (failing on an error response or any other
    /// message in between).
    async fn request(
        &mut self,
        method: &str,
        params: Value,
    ) -> Result<Value, Box<dyn std::error::Error>> {
        let (before, response) = self.exchange(method, params).await?;
        assert!(before.is_empty(), "unexpected messages: {before:?}");
        response
            .get("result")
            .cloned()
            .ok_or_else(|| format!("error response: {response}").into())
    }

    /// Sends a request expected to fail and returns the error `code`.
    async fn error_code(
        &mut self,
        method: &str,
        params: Value,
    ) -> Result<i64, Box<dyn std::error::Error>> {
        let (_, response) = self.exchange(method, params).await?;
        response["error"]["code"]
            .as_i64()
            .ok_or_else(|| format!("not an error: {response}").into())
    }

    /// Closes stdin and waits for a clean exit.
    async fn finish(mut self) -> TestResult {
        drop(self.stdin);
        let status = timeout(WAIT, self.child.wait()).await??;
        assert!(status.success(), "exit status {status}");
        Ok(())
    }
}

fn text_of(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn handshake_catalogue_and_static_fixtures() -> TestResult {
    let (mut fx, init) = Fixture::start(&[]).await?;
    assert_eq!(init["protocolVersion"], "2025-11-25");
    assert_eq!(init["serverInfo"]["name"], "conformance-fixture");
    let caps = &init["capabilities"];
    for cap in ["tools", "resources", "prompts", "logging", "completions"] {
        assert!(caps[cap].is_object(), "capability {cap} missing: {caps}");
    }
    assert_eq!(caps["resources"]["subscribe"], true);

    let tools = fx.request("tools/list", json!({})).await?;
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .ok_or("no tools")?
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for name in [
        "test_simple_text",
        "test_image_content",
        "test_audio_content",
        "test_embedded_resource",
        "test_multiple_content_types",
        "test_tool_with_logging",
        "test_error_handling",
        "test_tool_with_progress",
        "test_sampling",
        "test_elicitation",
        "test_elicitation_sep1034_defaults",
        "test_elicitation_sep1330_enums",
        "json_schema_2020_12_tool",
        "test_reconnection",
        "test_tool_list_changed",
    ] {
        assert!(names.contains(&name), "{name} not listed");
    }

    let r = fx
        .request("tools/call", json!({ "name": "test_simple_text" }))
        .await?;
    assert_eq!(text_of(&r), "This is a simple text response for testing.");
    let r = fx
        .request(
            "tools/call",
            json!({ "name": "test_error_handling", "arguments": {} }),
        )
        .await?;
    assert_eq!(r["isError"], true);
    let r = fx
        .request(
            "tools/call",
            json!({ "name": "test_multiple_content_types" }),
        )
        .await?;
    let kinds: Vec<&str> = r["content"]
        .as_array()
        .ok_or("no content")?
        .iter()
        .filter_map(|c| c["type"].as_str())
        .collect();
    assert_eq!(kinds, ["text", "image", "resource"]);
    assert_eq!(
        fx.error_code("tools/call", json!({ "name": "no_such_tool" }))
            .await?,
        -32602
    );

    let r = fx
        .request(
            "resources/read",
            json!({ "uri": "test://template/123/data" }),
        )
        .await?;
    let body: Value = serde_json::from_str(r["contents"][0]["text"].as_str().ok_or("no text")?)?;
    assert_eq!(
        body,
        json!({ "id": "123", "templateTest": true, "data": "Data for ID: 123" })
    );
    let r = fx
        .request("resources/read", json!({ "uri": "test://static-binary" }))
        .await?;
    assert_eq!(r["contents"][0]["mimeType"], "image/png");
    assert!(r["contents"][0]["blob"].is_string());
    assert_eq!(
        fx.error_code("resources/read", json!({ "uri": "test://nope" }))
            .await?,
        -32002
    );

    let r = fx
        .request(
            "prompts/get",
            json!({ "name": "test_prompt_with_arguments", "arguments": { "arg1": "a", "arg2": "b" } }),
        )
        .await?;
    assert_eq!(
        r["messages"][0]["content"]["text"],
        "Prompt with arguments: arg1='a', arg2='b'"
    );
    assert_eq!(
        fx.error_code(
            "prompts/get",
            json!({ "name": "test_prompt_with_arguments", "arguments": { "arg1": "a" } })
        )
        .await?,
        -32602
    );
    let r = fx
        .request(
            "completion/complete",
            json!({
                "ref": { "type": "ref/prompt", "name": "test_prompt_with_arguments" },
                "argument": { "name": "arg1", "value": "test" }
            }),
        )
        .await?;
    assert_eq!(
        r["completion"]["values"],
        json!(["testValue1", "testValue2"])
    );
    assert_eq!(fx.request("ping", json!({})).await?, json!({}));
    fx.finish().await
}

#[tokio::test]
async fn logging_progress_and_level_filter() -> TestResult {
    let (mut fx, _) = Fixture::start(&[]).await?;
    assert_eq!(
        fx.request("logging/setLevel", json!({ "level": "debug" }))
            .await?,
        json!({})
    );
    let (before, response) = fx
        .exchange("tools/call", json!({ "name": "test_tool_with_logging" }))
        .await?;
    let logs: Vec<&Value> = before
        .iter()
        .filter(|m| m["method"] == "notifications/message")
        .map(|m| &m["params"]["data"])
        .collect();
    assert_eq!(
        logs,
        [
            "Tool execution started",
            "Tool processing data",
            "Tool execution completed"
        ]
    );
    assert!(response["result"].is_object());

    // Above the tool's level: the log lines are filtered out.
    fx.request("logging/setLevel", json!({ "level": "warning" }))
        .await?;
    fx.request("tools/call", json!({ "name": "test_tool_with_logging" }))
        .await?;

    let (before, _) = fx
        .exchange(
            "tools/call",
            json!({ "name": "test_tool_with_progress", "_meta": { "progressToken": "tok" } }),
        )
        .await?;
    let progress: Vec<(f64, &Value)> = before
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .filter_map(|m| {
            Some((
                m["params"]["progress"].as_f64()?,
                &m["params"]["progressToken"],
            ))
        })
        .collect();
    assert_eq!(
        progress,
        [
            (0.0, &json!("tok")),
            (50.0, &json!("tok")),
            (100.0, &json!("tok"))
        ]
    );
    fx.finish().await
}

#[tokio::test]
async fn sampling_and_elicitation_round_trips() -> TestResult {
    let (mut fx, _) = Fixture::start(&[]).await?;

    fx.send(&json!({
        "jsonrpc": "2.0", "id": "s1", "method": "tools/call",
        "params": { "name": "test_sampling", "arguments": { "prompt": "hi" } }
    }))
    .await?;
    let req = fx.recv().await?;
    assert_eq!(req["method"], "sampling/createMessage");
    assert_eq!(req["params"]["messages"][0]["content"]["text"], "hi");
    assert_eq!(req["params"]["maxTokens"], 100);
    fx.send(&json!({
        "jsonrpc": "2.0", "id": req["id"],
        "result": { "role": "assistant", "content": { "type": "text", "text": "pong" },
                    "model": "m", "stopReason": "endTurn" }
    }))
    .await?;
    let resp = fx.recv().await?;
    assert_eq!(resp["id"], "s1");
    assert_eq!(text_of(&resp["result"]), "LLM response: pong");

    fx.send(&json!({
        "jsonrpc": "2.0", "id": "e1", "method": "tools/call",
        "params": { "name": "test_elicitation_sep1330_enums", "arguments": {} }
    }))
    .await?;
    let req = fx.recv().await?;
    assert_eq!(req["method"], "elicitation/create");
    let props = &req["params"]["requestedSchema"]["properties"];
    assert_eq!(props["legacyEnum"]["enumNames"][0], "Option One");
    assert_eq!(props["titledMulti"]["items"]["anyOf"][1]["const"], "value2");
    fx.send(&json!({
        "jsonrpc": "2.0", "id": req["id"],
        "result": { "action": "accept", "content": { "untitledSingle": "option1" } }
    }))
    .await?;
    let resp = fx.recv().await?;
    assert_eq!(resp["id"], "e1");
    assert_eq!(
        text_of(&resp["result"]),
        r#"Elicitation completed: action=accept, content={"untitledSingle":"option1"}"#
    );
    fx.finish().await
}

#[tokio::test]
async fn subscription_sends_updates_until_unsubscribed() -> TestResult {
    let (mut fx, _) = Fixture::start(&[("CONFORMANCE_FIXTURE_WATCH_INTERVAL_MS", "50")]).await?;
    let (_, response) = fx
        .exchange(
            "resources/subscribe",
            json!({ "uri": "test://watched-resource" }),
        )
        .await?;
    assert_eq!(response["result"], json!({}));
    let update = fx.recv().await?;
    assert_eq!(update["method"], "notifications/resources/updated");
    assert_eq!(update["params"]["uri"], "test://watched-resource");
    let (_, response) = fx
        .exchange(
            "resources/unsubscribe",
            json!({ "uri": "test://watched-resource" }),
        )
        .await?;
    assert_eq!(response["result"], json!({}));
    // An update already on its way may still arrive; after that, nothing more.
    tokio::time::sleep(Duration::from_millis(100)).await;
    fx.exchange("ping", json!({})).await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(fx.request("ping", json!({})).await?, json!({}));
    assert_eq!(
        fx.error_code("resources/subscribe", json!({ "uri": "test://nope" }))
            .await?,
        -32002
    );
    fx.finish().await
}

#[tokio::test]
async fn eof_before_initialize_exits_cleanly() -> TestResult {
    let mut child = Command::new(env!("CARGO_BIN_EXE_conformance-fixture"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let status = timeout(WAIT, child.wait()).await??;
    assert!(status.success(), "exit status {status}");
    Ok(())
}

/// The complete per-request `_meta` of a 2026-07-28 request (spec 2026-07-28 basic/index).
fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": { "name": "fixture-test", "version": "0" },
        "io.modelcontextprotocol/clientCapabilities": {}
    })
}

#[tokio::test]
async fn list_changed_tool_notifies_the_initialize_session() -> TestResult {
    let (mut fx, _) = Fixture::start(&[]).await?;
    let (before, response) = fx
        .exchange(
            "tools/call",
            json!({ "name": "test_tool_list_changed", "arguments": {} }),
        )
        .await?;
    let methods: Vec<&str> = before.iter().filter_map(|m| m["method"].as_str()).collect();
    assert_eq!(methods, ["notifications/tools/list_changed"]);
    assert!(
        text_of(&response["result"]).contains("initialize session: true"),
        "{response}"
    );
    fx.finish().await
}

#[tokio::test]
async fn modern_era_discover_and_listen_receive_list_changed() -> TestResult {
    let mut fx = Fixture::spawn(&[], &[])?;
    let discover = fx
        .request("server/discover", json!({ "_meta": modern_meta() }))
        .await?;
    let versions = discover["supportedVersions"]
        .as_array()
        .ok_or("no supportedVersions")?;
    assert!(versions.contains(&json!("2026-07-28")), "{discover}");
    assert!(versions.contains(&json!("2025-11-25")), "{discover}");
    assert_eq!(discover["capabilities"]["tools"]["listChanged"], true);

    // subscriptions/listen stays open: its acknowledgement arrives as a notification
    fx.next_id += 1;
    let listen_id = fx.next_id;
    fx.send(&json!({
        "jsonrpc": "2.0", "id": listen_id, "method": "subscriptions/listen",
        "params": { "_meta": modern_meta(), "notifications": { "toolsListChanged": true } }
    }))
    .await?;
    let ack = fx.recv().await?;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(ack["params"]["notifications"]["toolsListChanged"], true);
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        listen_id
    );

    let (before, response) = fx
        .exchange(
            "tools/call",
            json!({ "_meta": modern_meta(), "name": "test_tool_list_changed", "arguments": {} }),
        )
        .await?;
    // on the listen stream, not tied to the call: it may come before or after the response
    let changed = match before.as_slice() {
        [] => fx.recv().await?,
        [one] => one.clone(),
        more => return Err(format!("unexpected messages: {more:?}").into()),
    };
    assert_eq!(changed["method"], "notifications/tools/list_changed");
    assert_eq!(
        changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        listen_id
    );
    assert!(
        text_of(&response["result"]).contains("initialize session: false, listeners: 1"),
        "{response}"
    );
    fx.finish().await
}

#[tokio::test]
async fn legacy_only_refuses_discover_and_modern_requests() -> TestResult {
    // As a server of the old era: every 2026-07-28 request is refused (rmcp checks the
    // requested version first: -32022 unsupported protocol version), and initialize works.
    let mut fx = Fixture::spawn(&["--legacy-only"], &[])?;
    for method in ["server/discover", "tools/list"] {
        let code = fx
            .error_code(method, json!({ "_meta": modern_meta() }))
            .await?;
        assert!(code == -32022 || code == -32601, "{method}: code {code}");
    }
    let init = fx
        .request(
            "initialize",
            json!({
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": { "name": "fixture-test", "version": "0" }
            }),
        )
        .await?;
    assert_eq!(init["protocolVersion"], "2025-11-25");
    fx.finish().await
}
