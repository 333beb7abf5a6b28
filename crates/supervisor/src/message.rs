//! What the supervisor reads of the messages it forwards — only what routing needs — and the
//! messages it writes itself. A forwarded message is passed on as the bytes it came as; only
//! `initialize` and `server_info` answers are rewritten (the supervisor adds what it knows).

use serde_json::{Value, json};

use protocol::{
    head::{Captures, Head},
    jsonrpc::{self, code},
    tool_error::ToolError,
};

/// What a client message says about where it goes: its head ([`Head::parse`], read once per
/// line), with the two `params` members routing needs beside it (a process session's id, a
/// subscription's `toolsListChanged`). Everything else (a tool's arguments but a session id, a
/// file's content) is skipped while parsing, not kept.
#[derive(Debug)]
pub(super) struct ClientHead {
    head: Head,
    /// `params.arguments.session_id`.
    session_id: Option<Value>,
    /// `params.notifications.toolsListChanged`.
    tools_list_changed: Option<Value>,
}

/// The `params` members [`ClientHead`] captures besides the head, in its fields' order.
const CAPTURES: Captures<'static> = &[
    &["arguments", "session_id"],
    &["notifications", "toolsListChanged"],
];

impl ClientHead {
    /// Reads `line`; `None` when it is not a JSON object (the worker answers it).
    pub(super) fn parse(line: &[u8]) -> Option<Self> {
        let (head, captured) = Head::parse_capturing(line, CAPTURES).ok()?;
        let mut captured = captured.into_iter();
        Some(Self {
            head,
            session_id: captured.next().flatten(),
            tools_list_changed: captured.next().flatten(),
        })
    }

    /// Whether this is a request (a method and an id).
    pub(super) fn is_request(&self) -> bool {
        self.head.is_request()
    }

    /// Its id, when present and not null.
    pub(super) fn id(&self) -> Option<&Value> {
        self.head.id()
    }

    /// Its method.
    pub(super) fn method(&self) -> Option<&str> {
        self.head.method()
    }

    /// The tool a `tools/call` names.
    pub(super) fn tool(&self) -> Option<&str> {
        self.head.tool()
    }

    /// The process session (`arguments.session_id` of a `tools/call`) or task (`taskId` of a
    /// `tasks/*` request) this message names: the handle that belongs to one worker.
    pub(super) fn handle(&self) -> Option<String> {
        let v = if self.tool().is_some() {
            self.session_id.as_ref()?
        } else if self.method().is_some_and(|m| m.starts_with("tasks/")) {
            self.head.task_id()?
        } else {
            return None;
        };
        v.as_str().map(str::to_owned)
    }

    /// Whether this is a request of the MCP 2026-07-28 era other than `server/discover`
    /// ([`Head::commits_to_modern`]): after one, the client speaks that era.
    pub(super) fn is_modern(&self) -> bool {
        self.head.commits_to_modern()
    }

    /// Whether a `subscriptions/listen` asks for `toolsListChanged`.
    pub(super) fn wants_tools_list_changed(&self) -> bool {
        self.head.is("subscriptions/listen") && self.tools_list_changed == Some(Value::Bool(true))
    }

    /// The request a `notifications/cancelled` cancels.
    pub(super) fn cancels(&self) -> Option<&Value> {
        self.head.cancelled_request()
    }
}

/// The fields of a worker message the supervisor needs: its id, whether it has a method (a
/// request or notification of the worker, rather than an answer), and the subscription a
/// `notifications/subscriptions/acknowledged` acknowledges (`_meta`
/// `io.modelcontextprotocol/subscriptionId`, MCP 2026-07-28 Basic › Patterns › Subscriptions).
#[derive(Debug, Default)]
pub(super) struct WorkerHead {
    /// Whether the line is a JSON-RPC message (`"jsonrpc": "2.0"` among its members).
    pub(super) json_rpc: bool,
    pub(super) id: Option<Value>,
    pub(super) has_method: bool,
    pub(super) acknowledged: Option<Value>,
}

impl WorkerHead {
    /// Reads the top-level members of `line` lazily ([`Head::scan`]): the values it does not
    /// need are skipped, not parsed (an answer may carry megabytes of output).
    pub(super) fn parse(line: &[u8]) -> Self {
        let head = Head::scan(line);
        let acknowledged = head
            .is("notifications/subscriptions/acknowledged")
            .then(|| head.meta().subscription_id().cloned())
            .flatten();
        Self {
            json_rpc: head.is_json_rpc(),
            id: head.id_member().cloned(),
            has_method: head.has_method(),
            acknowledged,
        }
    }
}

/// A handle a worker's answer created: the `session_id` of a result (a process session) or
/// the `taskId` of the task the call became (a `CreateTaskResult`, SEP-2663: `resultType`
/// `"task"` with the task's fields at the top of the result).
pub(super) fn created_handle(line: &[u8]) -> Option<String> {
    let text = |path: &[&str]| {
        sonic_rs::get_from_slice(line, path)
            .ok()
            .and_then(|v| serde_json::from_str::<String>(v.as_raw_str()).ok())
    };
    if text(&["result", "resultType"]).as_deref() == Some("task") {
        return text(&["result", "taskId"]);
    }
    text(&["result", "structuredContent", "session_id"])
}

/// `line`, a subscription's acknowledgement, accepting `toolsListChanged` too (the supervisor
/// sends it after an upgrade that changed the tools).
pub(super) fn acknowledging_tools(line: &[u8]) -> Option<Vec<u8>> {
    let mut v: Value = serde_json::from_slice(line).ok()?;
    let filter = v
        .get_mut("params")?
        .as_object_mut()?
        .entry("notifications")
        .or_insert_with(|| json!({}));
    filter
        .as_object_mut()?
        .insert("toolsListChanged".into(), json!(true));
    serde_json::to_vec(&v).ok()
}

/// `notifications/tools/list_changed` for the 2026-07-28 subscription `subscription`.
pub(super) fn list_changed_for(subscription: &Value) -> Vec<u8> {
    jsonrpc::notification(
        "notifications/tools/list_changed",
        json!({"_meta": {"io.modelcontextprotocol/subscriptionId": subscription}}),
    )
    .to_string()
    .into_bytes()
}

/// The answer to request `id` that a worker took and then exited without answering: it may
/// have run (invariant 7), so it is not sent again.
pub(super) fn outcome_unknown(id: &Value, why: &str) -> Vec<u8> {
    jsonrpc::error(
        id,
        code::OUTCOME_UNKNOWN,
        &format!(
            "the server worker exited while it handled this request ({why}); it may have had \
             effects, so it is not retried — check before you repeat it"
        ),
        Some(
            json!({"delivery_state": "unknown", "side_effects_started": true, "retryable": false}),
        ),
    )
    .to_string()
    .into_bytes()
}

/// The answer to request `id` that no worker received. `retryable` says whether trying again
/// may succeed (a restart is under way) or not (the restarts ran out: only `machine-mcp
/// reload` helps).
pub(super) fn not_sent(id: &Value, why: &str, retryable: bool) -> Vec<u8> {
    jsonrpc::error(
        id,
        code::UNAVAILABLE,
        &format!("{why}; the request was not sent to a server worker and had no effects"),
        Some(json!({
            "delivery_state": "not_sent",
            "side_effects_started": false,
            "retryable": retryable,
        })),
    )
    .to_string()
    .into_bytes()
}

/// The answer to a request the supervisor answers itself: `result` for request `id`.
pub(super) fn result(id: &Value, result: Value) -> Vec<u8> {
    jsonrpc::result(id, result).to_string().into_bytes()
}

/// A `tools/call` answer that is the tool error `e` (what a handler returns: an `isError`
/// result whose one text content is the error's JSON).
pub(super) fn tool_error(id: &Value, e: &ToolError) -> Vec<u8> {
    result(
        id,
        json!({"content": [{"type": "text", "text": e.to_json().to_string()}], "isError": true}),
    )
}

/// `line`, a worker's `initialize` or `server/discover` result, saying that the server sends
/// `notifications/tools/list_changed` (the supervisor does, after an upgrade that changed the
/// tools); `None` when it is not such a successful result.
pub(super) fn with_list_changed(line: &[u8]) -> Option<Vec<u8>> {
    let mut v: Value = serde_json::from_slice(line).ok()?;
    let caps = v.get_mut("result")?.get_mut("capabilities")?;
    let tools = caps
        .as_object_mut()?
        .entry("tools")
        .or_insert_with(|| json!({}));
    tools
        .as_object_mut()?
        .insert("listChanged".into(), json!(true));
    serde_json::to_vec(&v).ok()
}

/// `line`, a worker's `server_info` answer, with `status` as its `supervisor` (in
/// `structuredContent`, and as lines at the end of the text).
pub(super) fn with_supervisor(line: &[u8], status: &Value, text: &str) -> Option<Vec<u8>> {
    let mut v: Value = serde_json::from_slice(line).ok()?;
    let result = v.get_mut("result")?;
    if result.get("isError") == Some(&Value::Bool(true)) {
        return None;
    }
    result
        .get_mut("structuredContent")?
        .as_object_mut()?
        .insert("supervisor".into(), status.clone());
    if let Some(Value::String(t)) = result
        .get_mut("content")
        .and_then(|c| c.get_mut(0))
        .and_then(|c| c.get_mut("text"))
    {
        t.push_str(text);
    }
    serde_json::to_vec(&v).ok()
}

/// The `notifications/tools/list_changed` line.
pub(super) fn list_changed() -> Vec<u8> {
    jsonrpc::notification("notifications/tools/list_changed", json!({}))
        .to_string()
        .into_bytes()
}

/// A JSON-RPC error answer to `id` (no `data`), as the text of one line.
pub(super) fn error_line(id: &Value, code: i64, message: &str) -> String {
    jsonrpc::error(id, code, message, None).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_of_a_message_names_its_route() {
        let call = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"read_process","arguments":{"session_id":"proc-1","max_bytes":9}}}"#;
        let h = ClientHead::parse(call).unwrap();
        assert!(h.is_request());
        assert_eq!(h.tool(), Some("read_process"));
        assert_eq!(h.handle().as_deref(), Some("proc-1"));
        let task = br#"{"jsonrpc":"2.0","id":"a","method":"tasks/get","params":{"taskId":"t-9"}}"#;
        assert_eq!(
            ClientHead::parse(task).unwrap().handle().as_deref(),
            Some("t-9")
        );
        let cancel =
            br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}"#;
        let c = ClientHead::parse(cancel).unwrap();
        assert!(!c.is_request());
        assert_eq!(c.cancels(), Some(&json!(7)));
        assert!(ClientHead::parse(b"[1,2]").is_none());
    }

    #[test]
    fn a_worker_answer_is_read_by_its_keys_only() {
        let line = br#"{"jsonrpc":"2.0","id":"x","result":{"structuredContent":{"session_id":"proc-2","stdout":"..."},"content":[]}}"#;
        let h = WorkerHead::parse(line);
        assert_eq!(h.id, Some(json!("x")));
        assert!(!h.has_method);
        assert_eq!(created_handle(line).as_deref(), Some("proc-2"));
        let note = br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#;
        assert!(WorkerHead::parse(note).has_method);
        // A CreateTaskResult (SEP-2663): the task's fields at the top of the result.
        let task = br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"task","taskId":"t1","status":"working"}}"#;
        assert_eq!(created_handle(task).as_deref(), Some("t1"));
        let sub = br#"{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"notifications":{},"_meta":{"io.modelcontextprotocol/subscriptionId":"s1"}}}"#;
        assert_eq!(WorkerHead::parse(sub).acknowledged, Some(json!("s1")));
        assert_eq!(WorkerHead::parse(note).acknowledged, None);
        let v: Value = serde_json::from_slice(&acknowledging_tools(sub).unwrap()).unwrap();
        assert_eq!(v["params"]["notifications"]["toolsListChanged"], true);
    }

    #[test]
    fn initialize_results_announce_list_changed_and_server_info_gains_the_supervisor() {
        let init = br#"{"jsonrpc":"2.0","id":0,"result":{"capabilities":{"tools":{}},"protocolVersion":"2025-11-25"}}"#;
        let v: Value = serde_json::from_slice(&with_list_changed(init).unwrap()).unwrap();
        assert_eq!(v["result"]["capabilities"]["tools"]["listChanged"], true);
        let info = br#"{"jsonrpc":"2.0","id":3,"result":{"structuredContent":{"name":"machine-mcp"},"content":[{"type":"text","text":"server_info: ...\n"}]}}"#;
        let out = with_supervisor(info, &json!({"pid": 1}), "supervisor: pid 1\n").unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["result"]["structuredContent"]["supervisor"]["pid"], 1);
        assert!(
            v["result"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .ends_with("pid 1\n")
        );
    }
}
