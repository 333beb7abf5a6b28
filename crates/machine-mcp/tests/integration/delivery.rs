//! Link revision 4 end to end (issue 15 item 3): a daemon that is frozen (SIGSTOP: its TCP
//! connection stays up, nothing reads it, as in laptop sleep) makes a new call fail within 5 s
//! as "not delivered", while a call it took before the freeze finishes after it thaws.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::{
    net::Client,
    relay::{mcp_url, setup},
};

/// Sends `signal` (`STOP`, `CONT`) to process `pid`.
fn signal(pid: u32, signal: &str) {
    let st = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success(), "kill -{signal} {pid}");
}

/// Thaws the daemon however the test ends (a stopped process would outlive a failed test).
struct Thaw(u32);

impl Drop for Thaw {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &self.0.to_string()])
            .status();
    }
}

#[test]
fn a_frozen_daemon_fails_new_calls_within_5_s_and_finishes_the_calls_it_took() {
    let s = setup();
    let mut c = Client::new(&mcp_url(&s.relay, "b1"), Some(&s.token));
    c.initialize();
    // A call the daemon takes (its `accepted` reaches the relay) before it freezes.
    let mut running = c.post_stream(&json!({"jsonrpc": "2.0", "id": 40, "method": "tools/call",
        "params": {"name": "run_process", "arguments": {"argv": ["sh", "-c", "sleep 3; echo survived"], "yield_after_seconds": 60}}}));
    s.relay
        .wait_metric("machine_mcp_relay_inflight_requests", 1);
    s.relay
        .wait_metric("machine_mcp_relay_requests_awaiting_acceptance", 0);
    let pid = s.daemon.child.id();
    signal(pid, "STOP");
    let thaw = Thaw(pid);
    // A new call: the relay's socket is up (its liveness timeout is 90 s), the daemon reads
    // nothing. It fails with the not-delivered error, within the contract's 5 s.
    let start = Instant::now();
    let a = c.post(&json!({"jsonrpc": "2.0", "id": 41, "method": "tools/call",
        "params": {"name": "read_file", "arguments": {"path": "hello.txt"}}}));
    let took = start.elapsed();
    let last = a.messages.last().cloned().unwrap_or(Value::Null);
    assert_eq!(last["id"], 41, "{a:?}");
    assert_eq!(last["error"]["code"], -32000, "{last}");
    let message = last["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("NOT delivered") && message.contains("safe to retry"),
        "{message}"
    );
    assert_eq!(last["error"]["data"]["retryable"], true, "{last}");
    assert!(
        took < Duration::from_secs(5),
        "answered after {took:?}\nrelay:\n{}",
        s.relay.proc.log()
    );
    eprintln!("the frozen daemon's call failed after {took:?}");
    assert_eq!(
        s.relay
            .metric("machine_mcp_relay_requests_not_delivered_total"),
        1
    );
    // Thawed, the daemon refuses the stale request (past its deliver_by) and answers the one
    // it took.
    signal(pid, "CONT");
    drop(thaw);
    let mut end = Value::Null;
    while let Some((_, m)) = running.next_message(Duration::from_secs(40)) {
        end = m;
    }
    assert_eq!(end["id"], 40, "relay:\n{}", s.relay.proc.log());
    assert_eq!(end["result"]["structuredContent"]["stdout"], "survived\n");
    s.relay
        .wait_metric("machine_mcp_relay_inflight_requests", 0);
    s.relay
        .wait_metric("machine_mcp_relay_requests_awaiting_acceptance", 0);
    // The daemon read the stale request and refused it, unless it gave up the socket first (a
    // heartbeat sent just before the freeze and answered during it, or its read deadline passed
    // during the freeze, makes it reconnect at once; the request then never reaches it).
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let log = s.daemon.log();
        if log.contains("dropped a request read after its delivery deadline") {
            break;
        }
        if log.contains("a heartbeat went unanswered") || log.contains("the relay went silent") {
            break;
        }
        assert!(Instant::now() < end, "daemon log:\n{log}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        s.relay.metric("machine_mcp_relay_late_accepted_total"),
        0,
        "the daemon never took the retracted request"
    );
    // The link still serves.
    let r = c.call("read_file", json!({"path": "hello.txt"}));
    assert_eq!(
        r["result"]["structuredContent"]["content"],
        "hello from the workspace\n"
    );
}
