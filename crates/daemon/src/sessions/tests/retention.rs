//! Retention and resume: an unacknowledged answer replayed, calls not listed cancelled, listed
//! requests and sessions the daemon does not hold answered, a full link queue sent again.

use std::{collections::HashMap, time::Duration};

use serde_json::json;

use protocol::{frame::RUNTIME_SERVER, jsonrpc::code};

use super::*;

#[tokio::test]
async fn resume_replays_an_unacknowledged_answer_and_cancels_calls_not_listed() {
    let (_dir, rt) = runtime();
    let s = HostedSessions::new(rt, Vec::new());
    let mut first = link(&s, &[], &[]);
    s.call(
        &sid("c1"),
        RUNTIME_SERVER,
        "tok",
        "owner",
        request(json!(1), "tools/list", json!({})),
    );
    // Sent on the first link, which drops before the relay acknowledges it.
    let (seq, _, sent) = next_rpc(&mut first, "c1").await;
    assert_eq!(sent["result"]["resultType"], "complete");
    s.detach();
    // Answered while no link is up.
    s.call(
        &sid("c2"),
        RUNTIME_SERVER,
        "tok",
        "owner",
        request(json!(2), "server/discover", json!({})),
    );
    // Still running, and not awaited by the relay after the reconnect.
    s.call(
        &sid("c3"),
        RUNTIME_SERVER,
        "tok",
        "owner",
        sleep_call(json!(3), 2),
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut second = link(&s, &[], &[("c1", json!(1)), ("c2", json!(2))]);
    // Replayed in any order (sessions are not ordered among each other).
    let mut replayed = HashMap::new();
    while replayed.len() < 2 {
        let f = tokio::time::timeout(Duration::from_secs(20), second.recv())
            .await
            .expect("the replay in time")
            .expect("link open");
        if let DaemonFrame::Rpc {
            sid, seq, message, ..
        } = f
        {
            replayed.insert(sid, (seq, Arc::unwrap_or_clone(message)));
        }
    }
    assert_eq!(replayed["c1"], (seq, sent));
    let late = &replayed["c2"].1;
    assert_eq!(late["id"], 2);
    assert!(late["result"]["supportedVersions"].is_array(), "{late}");
    assert!(
        s.host(&sid("c3")).is_none(),
        "the call not listed was not cancelled"
    );
    let none = tokio::time::timeout(Duration::from_secs(3), next_rpc(&mut second, "c3")).await;
    assert!(none.is_err(), "a cancelled call was answered");
}

/// A request the relay lists in `resume` that this daemon does not hold (it never arrived,
/// or its record is gone) is answered at once with an explicit error, never left to the
/// relay's deadline; a listed call or session the daemon does not host is reported closed.
#[tokio::test]
async fn a_listed_request_the_daemon_does_not_hold_is_answered_with_an_error() {
    let (_dir, rt) = runtime();
    let s = HostedSessions::new(rt, Vec::new());
    let mut first = link(&s, &[], &[]);
    open_initialized(&s, "s1");
    // A request the session really has, answered and acknowledged on the first link.
    s.rpc(
        &sid("s1"),
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}),
    );
    let (seq, _, listed) = next_rpc(&mut first, "s1").await;
    assert_eq!(listed["id"], 5, "{listed}");
    s.ack(&sid("s1"), seq);
    s.detach();
    let mut second = link(&s, &["s1"], &[("s1", json!(7)), ("gone", json!(1))]);
    let (_, related, m) = next_rpc(&mut second, "s1").await;
    assert_eq!(m["id"], 7, "{m}");
    assert_eq!(m["error"]["code"], code::OUTCOME_UNKNOWN, "{m}");
    assert_eq!(related, Some(json!(7)));
    let closed = loop {
        let f = tokio::time::timeout(Duration::from_secs(20), second.recv())
            .await
            .expect("a closed frame in time")
            .expect("link open");
        if let DaemonFrame::Closed { sid, reason } = f {
            break (sid, reason);
        }
    };
    assert_eq!(closed.0, sid("gone"));
    assert!(closed.1.contains("no session or call"), "{}", closed.1);
    assert!(s.host(&sid("s1")).is_some(), "the kept session was ended");
}

/// A message the link's queue could not take is never dropped: once the relay acknowledged a
/// later one (acknowledgement is cumulative) it would be gone for good, its request left to the
/// relay's deadline. The link is marked broken, and the next link gets every unacknowledged
/// message again.
#[tokio::test]
async fn a_message_the_link_cannot_take_breaks_the_link_and_is_sent_again() {
    let (_dir, rt) = runtime();
    let s = HostedSessions::new(rt, Vec::new());
    let (tx, _full) = mpsc::channel(1);
    s.resume(&[], &[], tx);
    let broken = s.link_broken();
    open_initialized(&s, "s1");
    for id in [5, 6] {
        s.rpc(
            &sid("s1"),
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}),
        );
    }
    tokio::time::timeout(Duration::from_secs(20), broken.cancelled())
        .await
        .expect("the link is marked broken");
    let mut second = link(&s, &["s1"], &[]);
    let mut ids = Vec::new();
    while ids.len() < 2 {
        let (_, _, m) = next_rpc(&mut second, "s1").await;
        ids.push(m["id"].clone());
    }
    assert_eq!(ids, [json!(5), json!(6)]);
}

/// A session the relay keeps in `resume` with no request
/// listed, which this daemon does not host (it ended while the relay was away for longer
/// than the grace), is reported closed, so its client gets 404 and initializes again
/// instead of an error on each request.
#[tokio::test]
async fn a_listed_session_without_requests_the_daemon_does_not_host_is_reported_closed() {
    let (_dir, rt) = runtime();
    let s = HostedSessions::new(rt, Vec::new());
    let mut rx = link(&s, &["ghost"], &[]);
    let f = tokio::time::timeout(Duration::from_secs(20), rx.recv())
        .await
        .expect("a closed frame in time")
        .expect("link open");
    assert!(
        matches!(&f, DaemonFrame::Closed { sid: got, .. } if *got == sid("ghost")),
        "{f:?}"
    );
}
