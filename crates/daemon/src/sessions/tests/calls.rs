//! Runtime calls: answered without `initialize`, refused without their `_meta`, ended by a
//! cancellation, a task outliving its call, a listen open until cancelled.

use std::time::Duration;

use serde_json::json;

use protocol::frame::RUNTIME_SERVER;

use super::*;

#[tokio::test]
async fn runtime_calls_answer_tools_list_and_discover_without_initialize() {
    let (_dir, rt) = runtime();
    let s = HostedSessions::new(rt, Vec::new());
    let mut rx = link(&s, &[], &[]);
    s.call(
        &sid("c1"),
        RUNTIME_SERVER,
        "tok",
        "owner",
        request(json!(1), "tools/list", json!({})),
    );
    let owner = answer(&s, &mut rx, "c1").await;
    assert_eq!(owner["id"], 1);
    assert_eq!(owner["result"]["resultType"], "complete", "{owner}");
    assert!(names(&owner["result"]).contains(&"run_process".to_owned()));
    s.call(
        &sid("c2"),
        RUNTIME_SERVER,
        "tok",
        "reviewer",
        request(json!("a"), "tools/list", json!({})),
    );
    let reviewer = answer(&s, &mut rx, "c2").await;
    assert_eq!(reviewer["id"], "a");
    assert!(!names(&reviewer["result"]).contains(&"run_process".to_owned()));
    s.call(
        &sid("c3"),
        RUNTIME_SERVER,
        "tok",
        "owner",
        request(json!(2), "server/discover", json!({})),
    );
    let d = answer(&s, &mut rx, "c3").await;
    assert_eq!(d["result"]["resultType"], "complete", "{d}");
    assert!(
        d["result"]["supportedVersions"]
            .as_array()
            .unwrap()
            .contains(&json!("2026-07-28"))
    );
    // Acknowledged answers end the calls; a later close is harmless.
    assert!(s.is_empty(), "{} hosts left", s.len());
    s.close(&sid("c1"));
}

/// A hosted call reads its message's head once where it arrives and hands the head on: the
/// `_meta` check and the routing take it rather than reading the message again. Pinned as a
/// count (this thread's head reads for one runtime `tools/list` call, answer included).
#[tokio::test]
async fn a_runtime_call_reads_its_head_a_pinned_number_of_times() {
    let (_dir, rt) = runtime();
    let s = HostedSessions::new(rt, Vec::new());
    let mut rx = link(&s, &[], &[]);
    let before = protocol::head::count::reads();
    s.call(
        &sid("c1"),
        RUNTIME_SERVER,
        "tok",
        "owner",
        request(json!(1), "tools/list", json!({})),
    );
    let answer = answer(&s, &mut rx, "c1").await;
    let reads = protocol::head::count::reads() - before;
    assert_eq!(answer["id"], 1);
    assert_eq!(
        reads, READS_PER_RUNTIME_CALL,
        "head reads for one runtime call"
    );
}

/// Head reads of one runtime call through the daemon today (see the test above).
const READS_PER_RUNTIME_CALL: u64 = 1;

#[tokio::test]
async fn a_call_without_its_meta_fields_gets_the_json_rpc_error() {
    let (_dir, rt) = runtime();
    let s = HostedSessions::new(rt, Vec::new());
    let mut rx = link(&s, &[], &[]);
    s.call(
        &sid("c1"),
        RUNTIME_SERVER,
        "tok",
        "owner",
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {}}),
    );
    let e = answer(&s, &mut rx, "c1").await;
    assert_eq!(e["id"], 5);
    assert_eq!(e["error"]["code"], -32602, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("io.modelcontextprotocol/protocolVersion")
    );
    assert!(s.is_empty());
}

#[tokio::test]
async fn a_cancelled_call_is_not_answered_and_ends() {
    let (_dir, rt) = runtime();
    let s = HostedSessions::new(rt, Vec::new());
    let mut rx = link(&s, &[], &[]);
    s.call(
        &sid("c1"),
        RUNTIME_SERVER,
        "tok",
        "owner",
        sleep_call(json!(9), 2),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    s.rpc(
        &sid("c1"),
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 9}}),
    );
    assert!(s.is_empty());
    // The sleep would have ended after 2 s; nothing of c1 may come.
    let late = tokio::time::timeout(Duration::from_secs(3), next_rpc(&mut rx, "c1")).await;
    assert!(late.is_err(), "a cancelled call was answered: {late:?}");
}

/// A call that becomes a task (SEP-2663) ends with its `CreateTaskResult`; the task lives on
/// in the runtime and a later call of the same principal reads it.
#[tokio::test]
async fn a_task_outlives_the_call_that_created_it() {
    let (_dir, rt) = runtime();
    let s = HostedSessions::new(rt, Vec::new());
    let mut rx = link(&s, &[], &[]);
    let with_tasks = |mut r: Value| {
        r["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
            json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
        r
    };
    s.call(
        &sid("c1"),
        RUNTIME_SERVER,
        "tok",
        "owner",
        with_tasks(sleep_call(json!(1), 4)),
    );
    let created = answer(&s, &mut rx, "c1").await;
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let task = created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task: {created}"))
        .to_owned();
    assert!(
        s.is_empty(),
        "the call's state did not end with its response"
    );
    for n in 0.. {
        let sid = format!("g{n}");
        s.call(
            &self::sid(&sid),
            RUNTIME_SERVER,
            "tok",
            "owner",
            with_tasks(request(json!(n), "tasks/get", json!({"taskId": task}))),
        );
        let got = answer(&s, &mut rx, &sid).await;
        let status = got["result"]["status"]
            .as_str()
            .unwrap_or_else(|| panic!("{got}"))
            .to_owned();
        if status == "completed" {
            break;
        }
        assert_eq!(status, "working", "{got}");
        assert!(n < 40, "the task did not complete");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A runtime `subscriptions/listen` call is acknowledged and stays open until cancelled
/// (MCP 2026-07-28 Basic › Patterns › Subscriptions).
#[tokio::test]
async fn a_runtime_listen_stays_open_until_cancelled() {
    let (_dir, rt) = runtime();
    let s = HostedSessions::new(rt, Vec::new());
    let mut rx = link(&s, &[], &[]);
    s.call(
        &sid("l"),
        RUNTIME_SERVER,
        "tok",
        "owner",
        request(
            json!(1),
            "subscriptions/listen",
            json!({"notifications": {"toolsListChanged": true}}),
        ),
    );
    let (_, _, ack) = next_rpc(&mut rx, "l").await;
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    let more = tokio::time::timeout(Duration::from_secs(2), next_rpc(&mut rx, "l")).await;
    assert!(more.is_err(), "the listen ended: {more:?}");
    assert!(s.host(&sid("l")).is_some());
    s.rpc(
        &sid("l"),
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}),
    );
    assert!(s.is_empty());
}
