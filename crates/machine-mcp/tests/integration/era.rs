//! MCP 2026-07-28 on stdio beside the handshake era, per request; tasks (SEP-2663).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::util::{RESPONSE_TIMEOUT, Server, Tree, alive, wait_file, wait_gone};

/// The per-request `_meta` of a 2026-07-28 request (MCP 2026-07-28 Basic §Per-request protocol
/// fields), with the tasks extension declared when `tasks`.
fn meta(tasks: bool) -> Value {
    let caps = if tasks {
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
    } else {
        json!({})
    };
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "era-test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": caps,
    })
}

fn call_params(tool: &str, args: Value, tasks: bool) -> Value {
    json!({"name": tool, "arguments": args, "_meta": meta(tasks)})
}

fn initialize(s: &mut Server, version: &str, capabilities: Value) -> Value {
    let r = s.request(
        "initialize",
        json!({"protocolVersion": version, "capabilities": capabilities,
               "clientInfo": {"name": "era-test", "version": "1"}}),
    );
    s.notify("notifications/initialized", json!({}));
    r
}

/// Polls `tasks/get` until the task leaves `working` (or 30 s pass).
fn wait_task(s: &mut Server, task_id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = s.request("tasks/get", json!({"taskId": task_id, "_meta": meta(true)}));
        let status = r["result"]["status"].as_str().unwrap_or("").to_owned();
        if status != "working" || Instant::now() > deadline {
            return r;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn server_discover_answers_and_initialize_may_follow_on_one_connection() {
    let t = Tree::new();
    let mut s = Server::spawn(t.path(), &[]);
    let r = s.request("server/discover", json!({"_meta": meta(false)}));
    let d = &r["result"];
    assert_eq!(d["resultType"], "complete", "{r}");
    let versions: Vec<&str> = d["supportedVersions"]
        .as_array()
        .expect("supportedVersions")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for v in ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"] {
        assert!(versions.contains(&v), "{v} missing from {versions:?}");
    }
    assert!(d["capabilities"]["tools"].is_object(), "{d}");
    assert!(
        d["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"].is_object(),
        "{d}"
    );
    assert_eq!(
        d["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "machine-mcp"
    );
    assert!(d["instructions"].as_str().is_some_and(|i| !i.is_empty()));
    // Copilot CLI's sequence: the probe, then the handshake, on the same connection.
    let init = initialize(&mut s, "2025-11-25", json!({}));
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    let list = s.request("tools/list", json!({}));
    assert!(list["result"]["tools"].is_array(), "{list}");
    assert!(
        list["result"].get("resultType").is_none(),
        "a handshake-era result keeps the legacy shape: {}",
        list["result"]["resultType"]
    );
}

#[test]
fn requests_with_per_request_metadata_are_served_without_initialize() {
    let t = Tree::new();
    t.write("a.txt", "alpha\nbeta\n");
    let mut s = Server::spawn(t.path(), &[]);
    let list = s.request("tools/list", json!({"_meta": meta(false)}));
    let r = &list["result"];
    assert_eq!(r["resultType"], "complete", "{list}");
    assert!(r["ttlMs"].is_u64(), "{r}");
    assert_eq!(r["cacheScope"], "private", "the list depends on the caller");
    let names: Vec<String> = r["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(names.contains(&"read_file".to_owned()), "{names:?}");
    let again = s.request("tools/list", json!({"_meta": meta(false)}));
    let names_again: Vec<String> = again["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(names, names_again, "tool order is deterministic");

    let read = s.request(
        "tools/call",
        call_params("read_file", json!({"path": "a.txt"}), false),
    );
    assert_eq!(read["result"]["resultType"], "complete", "{read}");
    assert_eq!(
        read["result"]["structuredContent"]["content"],
        "alpha\nbeta\n"
    );

    // Missing required per-request fields: the request is refused, nothing runs.
    let bad = s.request(
        "tools/call",
        json!({"name": "write_file", "arguments": {"path": "b.txt", "content": "x"},
               "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}),
    );
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    assert!(!t.path().join("b.txt").exists());

    // A version the server does not serve is refused.
    let mut m = meta(false);
    m["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let unsupported = s.request("tools/list", json!({"_meta": m}));
    assert!(unsupported["error"]["code"].is_i64(), "{unsupported}");
}

#[test]
fn a_long_run_process_becomes_a_task_and_tasks_get_returns_its_result() {
    let t = Tree::new();
    let mut s = Server::spawn(t.path(), &[]);
    let r = s.request(
        "tools/call",
        call_params(
            "run_process",
            json!({"argv": ["sh", "-c", "sleep 4; echo done"]}),
            true,
        ),
    );
    let task = &r["result"];
    assert_eq!(task["resultType"], "task", "{r}");
    assert_eq!(task["status"], "working");
    assert!(
        task["pollIntervalMs"].is_u64() && task["ttlMs"].is_u64(),
        "{task}"
    );
    let id = task["taskId"].as_str().expect("taskId").to_owned();

    let done = wait_task(&mut s, &id);
    let d = &done["result"];
    assert_eq!(d["resultType"], "complete", "{done}");
    assert_eq!(d["status"], "completed", "{done}");
    assert_eq!(d["result"]["structuredContent"]["stdout"], "done\n");
    assert_eq!(d["result"]["structuredContent"]["exit_code"], 0);
    assert_eq!(d["result"]["resultType"], "complete");

    let unknown = s.request(
        "tasks/get",
        json!({"taskId": "no-such-task", "_meta": meta(true)}),
    );
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
}

#[test]
fn a_short_call_or_a_client_without_tasks_gets_the_result_directly() {
    let t = Tree::new();
    let mut s = Server::spawn(t.path(), &[]);
    let quick = s.request(
        "tools/call",
        call_params("run_process", json!({"argv": ["echo", "hi"]}), true),
    );
    assert_eq!(quick["result"]["resultType"], "complete", "{quick}");
    assert_eq!(quick["result"]["structuredContent"]["stdout"], "hi\n");
    // Past the foreground budget, but the client did not declare the tasks extension.
    let id = s.send_request(
        "tools/call",
        call_params(
            "run_process",
            json!({"argv": ["sh", "-c", "sleep 4; echo late"]}),
            false,
        ),
    );
    let slow = s.wait_for(&json!(id), RESPONSE_TIMEOUT).expect("response");
    assert_eq!(slow["result"]["resultType"], "complete", "{slow}");
    assert_eq!(slow["result"]["structuredContent"]["stdout"], "late\n");
}

#[test]
fn tasks_are_not_offered_to_handshake_era_clients() {
    let t = Tree::new();
    let mut s = Server::spawn(t.path(), &[]);
    // Declaring the extension at initialize does not enable it: SEP-2663 defines it for
    // 2026-07-28 only, so the handshake's capabilities do not offer it either.
    let init = initialize(
        &mut s,
        "2025-11-25",
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}),
    );
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    assert!(
        init["result"]["capabilities"]["tools"].is_object(),
        "{init}"
    );
    assert!(
        init["result"]["capabilities"]
            .pointer("/extensions/io.modelcontextprotocol~1tasks")
            .is_none(),
        "{init}"
    );
    let id = s.send_request(
        "tools/call",
        json!({"name": "run_process", "arguments": {"argv": ["sh", "-c", "sleep 4; echo x"]}}),
    );
    let r = s.wait_for(&json!(id), RESPONSE_TIMEOUT).expect("response");
    assert!(r["result"].get("taskId").is_none(), "{r}");
    assert_eq!(r["result"]["structuredContent"]["stdout"], "x\n", "{r}");
}

#[test]
fn tasks_cancel_kills_the_process_tree() {
    let t = Tree::new();
    let mut s = Server::spawn(t.path(), &[]);
    let r = s.request(
        "tools/call",
        call_params(
            "run_process",
            json!({"argv": ["sh", "-c", "sleep 300 & echo $! > child.pid; wait"]}),
            true,
        ),
    );
    assert_eq!(r["result"]["resultType"], "task", "{r}");
    let id = r["result"]["taskId"].as_str().expect("taskId").to_owned();
    let child: u64 = wait_file(&t.path().join("child.pid"), Duration::from_secs(10))
        .trim()
        .parse()
        .expect("pid");
    assert!(alive(child));
    let ack = s.request("tasks/cancel", json!({"taskId": id, "_meta": meta(true)}));
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    let end = wait_task(&mut s, &id);
    assert_eq!(end["result"]["status"], "cancelled", "{end}");
    assert!(
        wait_gone(child, Duration::from_secs(10)),
        "the task's grandchild survived tasks/cancel"
    );
}

#[test]
fn subscriptions_listen_is_acknowledged_and_ends_on_cancel() {
    // The supervisor swaps in a new build whose tool list may differ, so it agrees to report
    // changes (issue 20); the in-process server's list never changes, so it does not.
    let ack = listen_then_cancel(&[]);
    assert_eq!(
        ack["params"]["notifications"]["toolsListChanged"], true,
        "{ack}"
    );
    let ack = listen_then_cancel(&["--no-supervisor"]);
    assert!(
        ack["params"]["notifications"]
            .get("toolsListChanged")
            .is_none()
            || ack["params"]["notifications"]["toolsListChanged"] == false,
        "{ack}"
    );
}

/// Opens a 2026-07-28 `subscriptions/listen` for tool list changes on a server started with
/// `args`, checks its acknowledgement names the request, cancels it, checks the server still
/// serves, and returns the acknowledgement.
fn listen_then_cancel(args: &[&str]) -> Value {
    let t = Tree::new();
    let mut s = Server::spawn(t.path(), args);
    let id = s.send_request(
        "subscriptions/listen",
        json!({"_meta": meta(false), "notifications": {"toolsListChanged": true}}),
    );
    let deadline = Instant::now() + RESPONSE_TIMEOUT;
    let ack = loop {
        let m = s
            .recv(deadline.saturating_duration_since(Instant::now()))
            .expect("acknowledgement");
        if m["method"] == "notifications/subscriptions/acknowledged" {
            break m;
        }
    };
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        json!(id),
        "{ack}"
    );
    s.notify(
        "notifications/cancelled",
        json!({"requestId": id, "_meta": meta(false)}),
    );
    // Still serving afterwards.
    let list = s.request("tools/list", json!({"_meta": meta(false)}));
    assert!(list["result"]["tools"].is_array(), "{list}");
    ack
}

/// A call that became a task gives its call slot back: as many tasks as there are call slots
/// still leave room for other calls (tasks are bounded by `TASKS_MAX` instead).
#[test]
fn tasks_do_not_hold_call_slots() {
    let t = Tree::new();
    let mut s = Server::spawn(t.path(), &[]);
    let ids: Vec<i64> = (0..protocol::limits::CONCURRENT_TOOL_CALLS)
        .map(|_| {
            s.send_request(
                "tools/call",
                call_params("run_process", json!({"argv": ["sleep", "60"]}), true),
            )
        })
        .collect();
    let mut tasks = Vec::new();
    for id in ids {
        let r = s.wait_for(&json!(id), RESPONSE_TIMEOUT).expect("response");
        assert_eq!(r["result"]["resultType"], "task", "{r}");
        tasks.push(r["result"]["taskId"].as_str().expect("taskId").to_owned());
    }
    std::fs::write(t.path().join("a.txt"), "hello\n").expect("write");
    let r = s.request(
        "tools/call",
        call_params("read_file", json!({"path": "a.txt"}), true),
    );
    assert_ne!(r["result"]["isError"], true, "{r}");
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    for id in tasks {
        s.request("tasks/cancel", json!({"taskId": id, "_meta": meta(true)}));
    }
}

#[test]
fn start_job_as_a_task_follows_the_job_to_its_end() {
    let t = Tree::new();
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().to_str().unwrap().to_owned();
    let mut s = Server::spawn(t.path(), &["--state-dir", &dir]);
    let plan = json!({"name": "t", "idempotency_key": "task-1",
                      "steps": [{"argv": ["sh", "-c", "sleep 3; echo fin"]}]});
    let r = s.request("tools/call", call_params("start_job", plan, true));
    let task = &r["result"];
    assert_eq!(task["resultType"], "task", "{r}");
    let id = task["taskId"].as_str().expect("taskId").to_owned();
    let done = wait_task(&mut s, &id);
    let d = &done["result"];
    assert_eq!(d["status"], "completed", "{done}");
    let sc = &d["result"]["structuredContent"];
    assert_eq!(sc["state"], "succeeded", "{done}");
    assert_eq!(sc["job"]["steps"][0]["stdout"], "fin\n", "{done}");
    // The job itself is in the store, readable by id like any other.
    let job = sc["job_id"].as_str().unwrap();
    let read = s.request(
        "tools/call",
        call_params("read_job", json!({"job_id": job}), false),
    );
    assert_eq!(
        read["result"]["structuredContent"]["state"], "succeeded",
        "{read}"
    );
}

/// Fresh tester finding 4: `tasks/cancel` of a `start_job` task said cancelled while the job
/// ran on.
#[test]
fn tasks_cancel_of_a_start_job_task_cancels_the_job_and_its_finally_steps_run() {
    let t = Tree::new();
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().to_str().unwrap().to_owned();
    let mut s = Server::spawn(t.path(), &["--state-dir", &dir]);
    let plan = json!({"name": "long", "idempotency_key": "task-cancel",
                      "steps": [{"argv": ["sleep", "60"]}],
                      "finally_steps": [{"argv": ["sh", "-c", "echo cleaned > cleaned.txt"]}]});
    let r = s.request("tools/call", call_params("start_job", plan, true));
    assert_eq!(r["result"]["resultType"], "task", "{r}");
    let id = r["result"]["taskId"].as_str().unwrap().to_owned();
    let ack = s.request("tasks/cancel", json!({"taskId": id, "_meta": meta(true)}));
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    let cleaned = t.path().join("cleaned.txt");
    // The job's finally step runs after tasks/cancel.
    assert_eq!(
        wait_file(&cleaned, Duration::from_secs(20)),
        "cleaned
"
    );
    let jobs = s.request("tools/call", call_params("list_jobs", json!({}), false));
    let listed = &jobs["result"]["structuredContent"]["jobs"][0];
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut state_now = listed["state"].clone();
    while state_now != "cancelled" && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        let jobs = s.request("tools/call", call_params("list_jobs", json!({}), false));
        state_now = jobs["result"]["structuredContent"]["jobs"][0]["state"].clone();
    }
    assert_eq!(state_now, "cancelled", "{jobs}");
}
