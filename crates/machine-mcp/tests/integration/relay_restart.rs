//! A relay killed (SIGKILL) and restarted on the same store: MCP sessions, the results of
//! finished requests and the fate of requests in flight survive it (issue 15 items 1 and 2).

use std::time::{Duration, Instant};

use serde_json::json;

use crate::{
    net::Client,
    net::Relay,
    relay::{mcp_url, setup, setup_on},
};

/// Waits until the relay has written every queued store write (its write-behind queue is empty).
fn wait_store_flushed(relay: &crate::net::Relay) {
    let end = Instant::now() + Duration::from_secs(10);
    while relay.metric("machine_mcp_relay_store_queued_writes") != 0 {
        assert!(
            Instant::now() < end,
            "the store writes were not flushed; relay log:\n{}",
            relay.proc.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_relay_killed_mid_call_keeps_its_sessions_and_replays_results_and_the_fate_of_calls() {
    let mut s = setup();
    let mut c = Client::new(&mcp_url(&s.relay, "b1"), Some(&s.token));
    c.initialize();
    // A call that completes before the kill, after its priming event reached the client (a
    // call that finishes within the relay's first-event linger goes whole and is not stored).
    let mut done = c.post_stream(&json!({"jsonrpc": "2.0", "id": 10, "method": "tools/call",
        "params": {"name": "run_process", "arguments": {"argv": ["sh", "-c", "sleep 0.3; cat hello.txt"]}}}));
    let (done_prime, _) = done
        .next_message(Duration::from_secs(10))
        .expect("priming event");
    let (_, r) = done.next_message(Duration::from_secs(10)).expect("result");
    assert_eq!(
        r["result"]["structuredContent"]["stdout"],
        "hello from the workspace\n"
    );
    drop(done);
    // A call still running when the relay dies.
    let mut slow = c.post_stream(&json!({"jsonrpc": "2.0", "id": 11, "method": "tools/call",
        "params": {"name": "run_process", "arguments": {"argv": ["sh", "-c", "echo run >> runs.log; sleep 8; echo finished"]}}}));
    let (slow_prime, _) = slow
        .next_message(Duration::from_secs(10))
        .expect("priming event");
    let log = s.ws.path().join("runs.log");
    let end = Instant::now() + Duration::from_secs(10);
    while !log.exists() {
        assert!(Instant::now() < end, "the slow call never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    wait_store_flushed(&s.relay);
    drop(slow);
    s.relay.restart(); // SIGKILL, then a new process on the same store
    c.url = mcp_url(&s.relay, "b1");
    s.relay.wait_ready(1);

    // The call in flight at the kill ends with the relay-restart error, on replay only.
    let mut replay = c
        .get_stream(Some(&slow_prime.expect("the priming event has an id")))
        .expect("replay of the in-flight call after the restart");
    let (_, m) = replay
        .next_message(Duration::from_secs(10))
        .expect("its terminal event");
    assert_eq!(m["id"], 11, "{m}");
    assert_eq!(m["error"]["code"], -32004, "{m}");
    let text = m["error"]["message"].as_str().unwrap_or_default();
    assert!(
        text.contains("relay restarted") && text.contains("not retried"),
        "{text}"
    );
    // The finished call replays its result.
    let mut replay = c
        .get_stream(Some(&done_prime.expect("the priming event has an id")))
        .expect("replay of the finished call after the restart");
    let (_, m) = replay
        .next_message(Duration::from_secs(10))
        .expect("its result");
    assert_eq!(m["id"], 10);
    assert_eq!(
        m["result"]["structuredContent"]["stdout"],
        "hello from the workspace\n"
    );

    // The session and the token still work.
    assert!(c.tool_names().contains(&"read_file".to_owned()));
    let r = c.call("read_file", json!({"path": "hello.txt"}));
    assert_eq!(
        r["result"]["structuredContent"]["content"],
        "hello from the workspace\n"
    );
    // The interrupted call was never run again, and its process was cancelled by the daemon.
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "run\n",
        "ran exactly once"
    );
    // The session is gone for good once deleted, also from the store across a restart.
    assert_eq!(c.delete(), 200);
    wait_store_flushed(&s.relay);
    s.relay.restart();
    c.url = mcp_url(&s.relay, "b1");
    s.relay.wait_ready(1);
    let a = c.post(&json!({"jsonrpc": "2.0", "id": 99, "method": "tools/list"}));
    assert_eq!(a.status, 404, "{a:?}");
}

/// A relay killed right after a running call's stream sent its priming event, with a store
/// that lags a second behind: the client's resume from that event id gets the call's outcome
/// after the restart (a stream still running gives its first event id only once it is stored),
/// never 404.
#[test]
fn a_resume_from_the_priming_event_after_a_kill_at_that_moment_gets_the_calls_outcome() {
    // Every store batch lags a second: a stream stored only behind its first event is not
    // stored yet when the relay dies just after that event.
    let mut s = setup_on(Relay::start_with_env(
        &[],
        &[("MACHINE_MCP_TEST_STORE_LAG_MS", "1000")],
    ));
    let mut c = Client::new(&mcp_url(&s.relay, "b1"), Some(&s.token));
    c.initialize();
    wait_store_flushed(&s.relay);
    let mut call = c.post_stream(&json!({"jsonrpc": "2.0", "id": 21, "method": "tools/call",
        "params": {"name": "run_process", "arguments": {"argv": ["sh", "-c", "sleep 3; echo finished"]}}}));
    let (prime, _) = call
        .next_message(Duration::from_secs(10))
        .expect("priming event");
    let prime = prime.expect("the priming event has an id");
    s.relay.restart(); // SIGKILL at once, then a new process on the same store
    drop(call);
    c.url = mcp_url(&s.relay, "b1");
    s.relay.wait_ready(1);

    let mut replay = c
        .get_stream(Some(&prime))
        .expect("the priming event id resumes after the restart");
    let (_, m) = replay
        .next_message(Duration::from_secs(10))
        .expect("the call's outcome");
    assert_eq!(m["id"], 21, "{m}");
    // Its result if the store kept it, else the error that says the relay restarted with the
    // call in flight (never run again).
    let outcome =
        m["result"]["structuredContent"]["stdout"] == "finished\n" || m["error"]["code"] == -32004;
    assert!(outcome, "{m}");
}

/// A handshake-era session outlives a restart of its daemon (a new instance on the same state):
/// the relay opens it again on the new instance with the `initialize` it kept, and the client's
/// next request on the same `MCP-Session-Id` is answered, without a new `initialize`.
#[test]
fn a_handshake_session_answers_its_next_request_after_a_daemon_restart() {
    let mut s = setup();
    let mut c = Client::new(&mcp_url(&s.relay, "b1"), Some(&s.token));
    c.initialize();
    assert!(c.tool_names().contains(&"read_file".to_owned()));
    s.daemon.kill(); // SIGKILL; a new process on the same state is a new instance
    s.daemon = s
        .relay
        .daemon(s.state.path(), s.ws.path(), None, &["--profile", "agent"]);
    s.daemon
        .wait_log("connected to the relay and ready", Duration::from_secs(30));
    s.relay.wait_ready(1);
    let a = c.post_timeout(
        &json!({"jsonrpc": "2.0", "id": 30, "method": "tools/list"}),
        Duration::from_secs(30),
    );
    assert_eq!(a.status, 200, "{a:?}");
    let tools = a.messages.last().cloned().unwrap_or_default();
    assert!(tools["result"]["tools"].as_array().is_some(), "{a:?}");
    let r = c.call("read_file", json!({"path": "hello.txt"}));
    assert_eq!(
        r["result"]["structuredContent"]["content"], "hello from the workspace\n",
        "{r}"
    );
}
