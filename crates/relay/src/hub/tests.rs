//! The hub's transitions on tokio's paused clock: promotion, loss, rebind within the grace,
//! grace expiry, a new instance, routing of daemon messages, deadlines and sweeps.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::{
    sync::{mpsc, oneshot},
    time::{Duration, advance},
};

use protocol::{
    frame::RelayFrame,
    ids::{InstanceId, SessionId},
    jsonrpc::code,
    limits::{
        CALL_BUDGET_MAX, DAEMON_SEQ_WINDOW, DELIVERY_MARGIN, DELIVERY_WINDOW, RELAY_OVERHEAD,
    },
};

use super::{Bridge, Delivery, Hub, Link, LinkOrigin, LinkTx, Outbound, ReplySink, Session};
use crate::{
    RelayConfig,
    auth::{BridgePrincipal, Role},
    storage,
    stream::SseStream,
};

/// A hub with bridge `b1`, its storage opened before the clock is paused (SQLite's worker
/// thread would otherwise race the auto-advancing clock).
async fn hub() -> (Arc<Hub>, Arc<Bridge>) {
    let hub = Hub::new(
        storage::memory().await.unwrap(),
        Arc::new(RelayConfig::for_tests()),
        Arc::default(),
    );
    let b = hub.bridge("b1").await;
    tokio::time::pause();
    (hub, b)
}

fn link(hub: &Hub, instance: &str) -> (Link, mpsc::Receiver<Outbound>) {
    link_of_revision(hub, instance, 2)
}

fn link_of_revision(hub: &Hub, instance: &str, revision: u32) -> (Link, mpsc::Receiver<Outbound>) {
    let (tx, rx) = mpsc::channel(64);
    let l = Link {
        id: hub.next_link_id(),
        instance_id: InstanceId::new(instance),
        revision,
        key_id: "key_test".into(),
        clock_skew_ms: 0,
        tx: LinkTx::new(tx),
    };
    (l, rx)
}

fn alice() -> BridgePrincipal {
    BridgePrincipal {
        id: "tok_alice".into(),
        bridge: "b1".into(),
        credential: "tok_alice".into(),
        role: Role::Owner,
    }
}

fn session(hub: &Hub, b: &Arc<Bridge>) -> Arc<Session> {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}});
    hub.create_session(b.clone(), "runtime", alice(), init)
        .unwrap()
}

/// A hub whose bridge `b1` has an active link of instance `i1` (frames readable from `rx`) and
/// one session on it.
struct Connected {
    hub: Arc<Hub>,
    b: Arc<Bridge>,
    l: Link,
    rx: mpsc::Receiver<Outbound>,
    s: Arc<Session>,
}

async fn connected() -> Connected {
    let (hub, b) = hub().await;
    let (l, rx) = link(&hub, "i1");
    assert!(hub.promote(&b, l.clone()).is_none());
    let s = session(&hub, &b);
    Connected { hub, b, l, rx, s }
}

/// Delivers daemon message `seq` as the socket of `b1`'s instance `i1` sends it.
fn deliver(
    hub: &Hub,
    sid: &SessionId,
    seq: u64,
    related: Option<&Value>,
    message: Value,
) -> Delivery {
    let i1 = InstanceId::new("i1");
    let from = LinkOrigin {
        bridge: "b1",
        instance: &i1,
    };
    hub.deliver(from, sid, seq, related, message)
}

fn request(id: i64, method: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {}})
}

/// Registers and sends request `id`, answered to a JSON waiter.
fn json_request(hub: &Hub, s: &Session, link: &Link, id: i64) -> oneshot::Receiver<Value> {
    let (tx, rx) = oneshot::channel();
    let m = request(id, "tools/call");
    hub.register(s, &json!(id), &m, ReplySink::json(tx))
        .unwrap();
    hub.send(s, link, m).unwrap();
    rx
}

/// Registers and sends request `id`, answered to an SSE stream.
fn sse_request(
    hub: &Hub,
    s: &Session,
    link: &Link,
    id: i64,
    token: Option<&str>,
) -> Arc<SseStream> {
    let st = SseStream::new(&s.sid, &s.principal.id, &s.bridge.name);
    let mut m = request(id, "tools/call");
    if let Some(t) = token {
        m["params"]["_meta"] = json!({"progressToken": t});
    }
    hub.register(s, &json!(id), &m, ReplySink::stream(st.clone()))
        .unwrap();
    hub.send(s, link, m).unwrap();
    st
}

fn frames(rx: &mut mpsc::Receiver<Outbound>) -> Vec<RelayFrame> {
    let mut out = Vec::new();
    while let Ok(o) = rx.try_recv() {
        if let Outbound::Frame(f) = o {
            out.push(f);
        }
    }
    out
}

/// The messages of a stream after its priming event.
fn messages(st: &SseStream) -> Vec<Value> {
    st.read_after(Some(0))
        .0
        .into_iter()
        .map(|e| serde_json::from_str(&e.data).unwrap())
        .collect()
}

fn result(id: i64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": {"content": []}})
}

#[tokio::test]
async fn promotion_makes_a_verified_link_active_and_hands_back_the_incumbent() {
    let (hub, b) = hub().await;
    assert!(b.active().is_none());
    let (l1, _rx1) = link(&hub, "i1");
    assert!(hub.promote(&b, l1.clone()).is_none());
    assert_eq!(b.active().map(|l| l.id), Some(l1.id));
    assert!(b.wait_ready(Duration::from_millis(1)).await.is_some());
    let (l2, _rx2) = link(&hub, "i1");
    let replaced = hub.promote(&b, l2.clone());
    assert_eq!(replaced.map(|l| l.id), Some(l1.id), "the caller closes it");
    assert_eq!(b.active().map(|l| l.id), Some(l2.id));
    assert_eq!(
        hub.metrics
            .reconnects
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

#[tokio::test]
async fn a_candidate_never_displaces_the_incumbent_before_it_is_promoted() {
    let (hub, b) = hub().await;
    let (incumbent, mut rx) = link(&hub, "i1");
    let _ = hub.promote(&b, incumbent.clone());
    let s = session(&hub, &b);
    let answer = json_request(&hub, &s, &incumbent, 1);
    // A candidate of another instance got as far as resume (which names nothing of i1's) and
    // then failed: the incumbent keeps the bridge and its sessions.
    let (candidate, _crx) = link(&hub, "i2");
    assert_eq!(
        hub.resume_set(&b, &candidate.instance_id),
        (Vec::new(), Vec::new())
    );
    hub.link_lost(&b, candidate.id);
    assert_eq!(b.active().map(|l| l.id), Some(incumbent.id));
    assert!(matches!(
        frames(&mut rx).as_slice(),
        [RelayFrame::Open { .. }, RelayFrame::Rpc { .. }]
    ));
    assert_eq!(deliver(&hub, &s.sid, 1, None, result(1)), Delivery::Routed);
    assert_eq!(answer.await.unwrap(), result(1));
}

#[tokio::test]
async fn losing_the_link_detaches_and_the_same_instance_rebinds_within_the_grace() {
    let Connected {
        hub,
        b,
        l: l1,
        rx: mut rx1,
        s,
    } = connected().await;
    let answer = json_request(&hub, &s, &l1, 7);
    frames(&mut rx1);
    hub.link_lost(&b, l1.id);
    assert!(b.active().is_none());
    assert_eq!(
        hub.metrics
            .detached
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    // A notification while away is queued, not lost.
    hub.queue(
        &s,
        json!({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}),
    )
    .unwrap();
    advance(hub.config.timing.reconnect_grace - Duration::from_secs(1)).await;
    hub.sweep();
    let (sessions, requests) = hub.resume_set(&b, &InstanceId::new("i1"));
    assert_eq!(sessions, std::slice::from_ref(&s.sid));
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].id.as_value(), &json!(7));
    let (l2, mut rx2) = link(&hub, "i1");
    assert!(hub.promote(&b, l2.clone()).is_none());
    assert_eq!(
        hub.metrics
            .detached
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    // The same instance has the session open already: only the queued message goes.
    let sent = frames(&mut rx2);
    assert!(
        matches!(sent.as_slice(), [RelayFrame::Rpc { message, .. }] if message["method"] == "notifications/roots/list_changed"),
        "{sent:?}"
    );
    assert_eq!(deliver(&hub, &s.sid, 1, None, result(7)), Delivery::Routed);
    assert_eq!(answer.await.unwrap(), result(7));
}

#[tokio::test]
async fn grace_expiry_ends_the_sessions_and_their_requests_get_outcome_unknown() {
    let Connected {
        hub,
        b,
        l: l1,
        s,
        rx: _rx,
    } = connected().await;
    let answer = json_request(&hub, &s, &l1, 1);
    hub.link_lost(&b, l1.id);
    advance(hub.config.timing.reconnect_grace).await;
    hub.sweep();
    let e = answer.await.unwrap();
    assert_eq!(e["error"]["code"], code::OUTCOME_UNKNOWN);
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("did not reconnect in time"),
        "{e}"
    );
    assert!(
        hub.session(s.sid.as_str(), &alice()).is_none(),
        "404 from now on"
    );
    assert_eq!(
        hub.resume_set(&b, &InstanceId::new("i1")),
        (Vec::new(), Vec::new()),
        "the instance is no longer bound"
    );
}

#[tokio::test]
async fn a_new_instance_inherits_nothing() {
    let Connected {
        hub,
        b,
        l: l1,
        s,
        rx: _rx,
    } = connected().await;
    let answer = json_request(&hub, &s, &l1, 1);
    hub.link_lost(&b, l1.id);
    let (l2, mut rx2) = link(&hub, "i2");
    assert!(
        hub.resume_set(&b, &l2.instance_id).0.is_empty(),
        "nothing to resume"
    );
    let _ = hub.promote(&b, l2);
    let e = answer.await.unwrap();
    assert_eq!(e["error"]["code"], code::OUTCOME_UNKNOWN);
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("daemon restarted")
    );
    assert!(hub.session(s.sid.as_str(), &alice()).is_none());
    assert!(
        frames(&mut rx2).is_empty(),
        "the new instance is told nothing"
    );
}

#[tokio::test]
async fn daemon_messages_go_to_exactly_one_stream() {
    let Connected {
        hub, l, s, rx: _rx, ..
    } = connected().await;
    let one = sse_request(&hub, &s, &l, 1, Some("p1"));
    let two = sse_request(&hub, &s, &l, 2, None);
    let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress",
        "params": {"progressToken": "p1", "progress": 1}});
    let log = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {}});
    let related = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"r": 2}});
    assert_eq!(
        deliver(&hub, &s.sid, 1, None, progress.clone()),
        Delivery::Routed
    );
    assert_eq!(
        deliver(&hub, &s.sid, 2, Some(&json!(2)), related.clone()),
        Delivery::Routed
    );
    // Related to nothing with two requests in flight: the standalone stream.
    assert_eq!(
        deliver(&hub, &s.sid, 3, None, log.clone()),
        Delivery::Routed
    );
    assert_eq!(deliver(&hub, &s.sid, 4, None, result(1)), Delivery::Routed);
    // With one request left, an unrelated message goes to it.
    assert_eq!(
        deliver(&hub, &s.sid, 5, None, log.clone()),
        Delivery::Routed
    );
    assert_eq!(deliver(&hub, &s.sid, 6, None, result(2)), Delivery::Routed);
    assert_eq!(messages(&one), [progress, result(1)]);
    assert_eq!(messages(&two), [related, log.clone(), result(2)]);
    assert_eq!(messages(&s.standalone), [log]);
    assert!(
        one.summary().1 && two.summary().1,
        "responses finish their streams"
    );
    // A response nobody waits for, and a replayed seq.
    assert_eq!(
        deliver(&hub, &s.sid, 7, None, result(9)),
        Delivery::Unmatched
    );
    assert_eq!(
        deliver(&hub, &s.sid, 7, None, result(9)),
        Delivery::Duplicate
    );
    assert_eq!(
        deliver(&hub, &SessionId::new("gone.x"), 1, None, result(1)),
        Delivery::UnknownSession
    );
    assert_eq!(
        hub.metrics
            .unmatched
            .load(std::sync::atomic::Ordering::Relaxed),
        2
    );
}

#[tokio::test]
async fn a_daemon_reaches_only_the_sessions_of_its_bridge_and_instance_within_the_seq_window() {
    let Connected {
        hub,
        b,
        l,
        s,
        rx: _rx,
        ..
    } = connected().await;
    let answer = json_request(&hub, &s, &l, 1);
    let other = hub.bridge("b2").await;
    let i1 = InstanceId::new("i1");
    let i2 = InstanceId::new("i2");
    // Another bridge's socket (even with the same instance id), and another instance of b1.
    for from in [
        LinkOrigin {
            bridge: &other.name,
            instance: &i1,
        },
        LinkOrigin {
            bridge: &b.name,
            instance: &i2,
        },
    ] {
        assert_eq!(
            hub.deliver(from, &s.sid, 1, None, result(1)),
            Delivery::UnknownSession
        );
        hub.daemon_closed(from, &s.sid, "forged");
        assert!(hub.session_from(from, &s.sid).is_none());
    }
    assert!(
        hub.session_by_sid(&s.sid).is_some(),
        "a forged close ended the session"
    );
    // A seq far ahead is refused and moves nothing: the next real one is still routed.
    assert_eq!(
        deliver(&hub, &s.sid, DAEMON_SEQ_WINDOW + 1, None, result(1)),
        Delivery::OutOfWindow
    );
    assert_eq!(
        deliver(&hub, &s.sid, DAEMON_SEQ_WINDOW, None, result(1)),
        Delivery::Routed
    );
    assert_eq!(answer.await.unwrap(), result(1));
}

#[tokio::test]
async fn a_request_past_its_deadline_is_cancelled_on_the_daemon_and_answered() {
    let Connected {
        hub, l, mut rx, s, ..
    } = connected().await;
    let answer = json_request(&hub, &s, &l, 3);
    frames(&mut rx);
    advance(CALL_BUDGET_MAX + RELAY_OVERHEAD - Duration::from_secs(1)).await;
    hub.sweep();
    assert!(frames(&mut rx).is_empty(), "not yet");
    advance(Duration::from_secs(1)).await;
    hub.sweep();
    let sent = frames(&mut rx);
    assert!(
        matches!(sent.as_slice(), [RelayFrame::Rpc { message, .. }]
            if message["method"] == "notifications/cancelled" && message["params"]["requestId"] == 3),
        "{sent:?}"
    );
    let e = answer.await.unwrap();
    assert_eq!(e["error"]["code"], code::UNAVAILABLE);
    assert!(
        hub.session(s.sid.as_str(), &alice()).is_some(),
        "the session lives on"
    );
}

/// Issue 15 item 4: a deadline is re-checked on every event of its session, not only by the
/// 1 s sweep: a daemon message or a new request of the session settles what is overdue first.
#[tokio::test]
async fn an_overdue_request_is_settled_by_the_next_event_of_its_session_before_any_sweep() {
    let Connected {
        hub, l, mut rx, s, ..
    } = connected().await;
    let mut answer = json_request(&hub, &s, &l, 3);
    frames(&mut rx);
    advance(CALL_BUDGET_MAX + RELAY_OVERHEAD).await;
    assert!(answer.try_recv().is_err(), "nothing has looked yet");
    let log = json!({"jsonrpc": "2.0", "method": "notifications/message",
                     "params": {"level": "info", "data": "still here"}});
    assert!(matches!(
        deliver(&hub, &s.sid, 1, None, log),
        Delivery::Routed
    ));
    let e = answer.try_recv().expect("settled by the daemon's message");
    assert_eq!(e["error"]["code"], code::UNAVAILABLE);
    let sent = frames(&mut rx);
    assert!(
        sent.iter().any(|f| matches!(f, RelayFrame::Rpc { message, .. }
            if message["method"] == "notifications/cancelled" && message["params"]["requestId"] == 3)),
        "{sent:?}"
    );
    // A new request of the session settles an overdue one the same way.
    let mut second = json_request(&hub, &s, &l, 4);
    advance(CALL_BUDGET_MAX + RELAY_OVERHEAD).await;
    let _third = json_request(&hub, &s, &l, 5);
    let e = second.try_recv().expect("settled by the next request");
    assert_eq!(e["error"]["code"], code::UNAVAILABLE);
}

#[tokio::test]
async fn idle_sessions_are_swept_and_closed_on_the_daemon() {
    let Connected {
        hub, l, mut rx, s, ..
    } = connected().await;
    let answer = json_request(&hub, &s, &l, 1);
    assert_eq!(deliver(&hub, &s.sid, 1, None, result(1)), Delivery::Routed);
    answer.await.unwrap();
    frames(&mut rx);
    advance(super::sweep::SESSION_IDLE).await;
    hub.sweep();
    assert!(
        hub.session(s.sid.as_str(), &alice()).is_some(),
        "idle for exactly the limit"
    );
    advance(Duration::from_secs(1)).await;
    hub.sweep();
    assert!(hub.session(s.sid.as_str(), &alice()).is_none());
    assert!(matches!(
        frames(&mut rx).as_slice(),
        [RelayFrame::Close { sid }] if *sid == s.sid
    ));
    assert_eq!(
        hub.metrics
            .sessions
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}

#[tokio::test]
async fn a_call_is_opened_by_its_request_and_closed_after_its_answer() {
    let (hub, b) = hub().await;
    let (l, mut rx) = link(&hub, "i1");
    let _ = hub.promote(&b, l.clone());
    let c = hub.create_call(b.clone(), "runtime", alice());
    let (tx, answer) = oneshot::channel();
    let m = request(5, "tools/list");
    hub.register(&c, &json!(5), &m, ReplySink::json(tx))
        .unwrap();
    hub.send(&c, &l, m).unwrap();
    assert!(matches!(frames(&mut rx).as_slice(), [RelayFrame::Call { sid, .. }] if *sid == c.sid));
    // A server → client request to a call is refused, never delivered.
    let sampling =
        json!({"jsonrpc": "2.0", "id": 90, "method": "sampling/createMessage", "params": {}});
    assert_eq!(deliver(&hub, &c.sid, 1, None, sampling), Delivery::Routed);
    let sent = frames(&mut rx);
    assert!(
        matches!(sent.as_slice(), [RelayFrame::Rpc { message, .. }]
            if message["id"] == 90 && message["error"]["code"] == code::METHOD_NOT_FOUND),
        "{sent:?}"
    );
    hub.close_if_answered(&c);
    assert!(frames(&mut rx).is_empty(), "still awaited");
    assert_eq!(deliver(&hub, &c.sid, 2, None, result(5)), Delivery::Routed);
    assert_eq!(answer.await.unwrap(), result(5));
    hub.close_if_answered(&c);
    assert!(matches!(
        frames(&mut rx).as_slice(),
        [RelayFrame::Close { sid }] if *sid == c.sid
    ));
    assert_eq!(
        hub.metrics
            .inflight
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}

/// `machine_mcp_relay_detached_requests` counts in-flight requests whose daemon socket is gone
/// (within the grace); when the grace runs out they are no longer detached but ended, and the
/// gauge is back at 0, not below.
#[tokio::test]
async fn the_detached_gauge_returns_to_zero_when_the_grace_runs_out() {
    let Connected {
        hub,
        b,
        l: l1,
        s,
        rx: _rx,
    } = connected().await;
    let answer = json_request(&hub, &s, &l1, 1);
    hub.link_lost(&b, l1.id);
    let detached = || {
        hub.metrics
            .detached
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    assert_eq!(detached(), 1);
    // A request registered just after the loss (the caller saw the link a moment before) waits
    // with the others.
    let (tx, late) = oneshot::channel();
    hub.register(
        &s,
        &json!(2),
        &request(2, "tools/call"),
        ReplySink::json(tx),
    )
    .unwrap();
    assert_eq!(detached(), 2);
    advance(hub.config.timing.reconnect_grace).await;
    hub.sweep();
    answer.await.unwrap();
    late.await.unwrap();
    assert_eq!(detached(), 0);
    assert_eq!(
        hub.metrics
            .inflight
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}

#[tokio::test]
async fn registration_is_bounded_per_bridge_and_refuses_duplicates_and_ended_sessions() {
    let Connected {
        hub, l, s, rx: _rx, ..
    } = connected().await;
    let max = hub.config.max_inflight_per_bridge;
    let mut waiters = Vec::new();
    for id in 0..max as i64 {
        waiters.push(json_request(&hub, &s, &l, id));
    }
    let (tx, _rx1) = oneshot::channel();
    assert!(matches!(
        hub.register(&s, &json!("one more"), &request(0, "tools/call"), ReplySink::json(tx)),
        Err(super::SendError::TooMany(n)) if n == max
    ));
    assert_eq!(deliver(&hub, &s.sid, 1, None, result(0)), Delivery::Routed);
    let (tx, _rx2) = oneshot::channel();
    assert!(matches!(
        hub.register(
            &s,
            &json!(1),
            &request(1, "tools/call"),
            ReplySink::json(tx)
        ),
        Err(super::SendError::DuplicateId)
    ));
    let (tx, _rx3) = oneshot::channel();
    hub.register(
        &s,
        &json!("1"),
        &request(1, "tools/call"),
        ReplySink::json(tx),
    )
    .expect("the string \"1\" is another id than the number 1");
    hub.end_session(&s.sid, code::UNAVAILABLE, "ended", false);
    let (tx, _rx4) = oneshot::channel();
    assert!(matches!(
        hub.register(
            &s,
            &json!("late"),
            &request(2, "tools/call"),
            ReplySink::json(tx)
        ),
        Err(super::SendError::Ended)
    ));
    assert_eq!(
        hub.metrics
            .inflight
            .load(std::sync::atomic::Ordering::Relaxed),
        0,
        "ending the session gave every slot back"
    );
}

// === Link revision 4: delivery confirmation (issue 15 item 3) ===

/// A hub whose bridge `b1` has an active link of instance `i1` of link revision 4, and one
/// session on it.
async fn connected_rev4() -> Connected {
    let (hub, b) = hub().await;
    let (l, rx) = link_of_revision(&hub, "i1", protocol::frame::REVISION_DELIVERY);
    assert!(hub.promote(&b, l.clone()).is_none());
    let s = session(&hub, &b);
    Connected { hub, b, l, rx, s }
}

fn gauge(a: &std::sync::atomic::AtomicI64) -> i64 {
    a.load(std::sync::atomic::Ordering::Relaxed)
}

fn counter(a: &std::sync::atomic::AtomicU64) -> u64 {
    a.load(std::sync::atomic::Ordering::Relaxed)
}

/// `accepted {sid, id}` as the socket of `b1`'s instance `i1` sends it.
fn accept(hub: &Hub, sid: &SessionId, id: i64) {
    let i1 = InstanceId::new("i1");
    let from = LinkOrigin {
        bridge: "b1",
        instance: &i1,
    };
    hub.accepted(from, sid, &protocol::jsonrpc::RequestId::new(json!(id)));
}

/// Tokio's timer rounds a deadline up to its next millisecond.
const TICK: Duration = Duration::from_millis(1);

/// Lets the spawned timers that are due run (the clock is paused).
async fn settle() {
    for _ in 0..8 {
        tokio::task::yield_now().await;
    }
}

fn assert_not_delivered(e: &Value) {
    assert_eq!(e["error"]["code"], code::UNAVAILABLE, "{e}");
    let m = e["error"]["message"].as_str().unwrap();
    assert!(
        m.contains("NOT delivered") && m.contains("no effects") && m.contains("safe to retry"),
        "{m}"
    );
    assert_eq!(e["error"]["data"]["retryable"], true, "{e}");
    assert_eq!(e["error"]["data"]["delivered"], false, "{e}");
    assert_eq!(e["error"]["data"]["code"], "unavailable", "{e}");
}

#[tokio::test]
async fn a_request_a_revision_4_daemon_does_not_accept_is_retracted_as_not_delivered() {
    let Connected {
        hub, l, mut rx, s, ..
    } = connected_rev4().await;
    let before = protocol::frame::now_unix_ms();
    let mut answer = json_request(&hub, &s, &l, 1);
    let sent = frames(&mut rx);
    let [
        RelayFrame::Open { .. },
        RelayFrame::Rpc {
            deliver_by: Some(by),
            ..
        },
    ] = sent.as_slice()
    else {
        panic!("expected open and a request with deliver_by: {sent:?}");
    };
    let window = DELIVERY_WINDOW.as_millis() as u64;
    assert!(
        (before + window..=protocol::frame::now_unix_ms() + window).contains(by),
        "deliver_by = send time + the window (no skew): {by}"
    );
    assert_eq!(gauge(&hub.metrics.awaiting_acceptance), 1);
    advance(DELIVERY_WINDOW + DELIVERY_MARGIN - Duration::from_millis(1)).await;
    settle().await;
    assert!(answer.try_recv().is_err(), "not retracted before its time");
    advance(Duration::from_millis(1)).await;
    let e = answer.await.unwrap();
    assert_not_delivered(&e);
    assert_eq!(counter(&hub.metrics.retracted), 1);
    assert_eq!(gauge(&hub.metrics.awaiting_acceptance), 0);
    assert_eq!(gauge(&hub.metrics.inflight), 0);
    // The daemon is told to drop it, should it take it after all.
    let sent = frames(&mut rx);
    assert!(
        matches!(sent.as_slice(), [RelayFrame::Rpc { message, deliver_by: None, .. }]
            if message["method"] == "notifications/cancelled" && message["params"]["requestId"] == 1),
        "{sent:?}"
    );
    // A late `accepted` is counted and resurrects nothing: its answer matches no request.
    accept(&hub, &s.sid, 1);
    assert_eq!(counter(&hub.metrics.late_accepted), 1);
    assert_eq!(gauge(&hub.metrics.awaiting_acceptance), 0);
    assert_eq!(gauge(&hub.metrics.inflight), 0);
    assert_eq!(
        deliver(&hub, &s.sid, 1, None, result(1)),
        Delivery::Unmatched
    );
    // The session is still usable.
    let again = json_request(&hub, &s, &l, 2);
    accept(&hub, &s.sid, 2);
    assert_eq!(counter(&hub.metrics.late_accepted), 1, "a timely accepted");
    assert_eq!(deliver(&hub, &s.sid, 2, None, result(2)), Delivery::Routed);
    assert_eq!(again.await.unwrap(), result(2));
}

#[tokio::test]
async fn an_accepted_request_waits_for_its_answer_and_only_it_is_resumed() {
    let Connected {
        hub,
        b,
        l,
        mut rx,
        s,
    } = connected_rev4().await;
    let taken = json_request(&hub, &s, &l, 1);
    let mut lost = json_request(&hub, &s, &l, 2);
    frames(&mut rx);
    accept(&hub, &s.sid, 1);
    assert_eq!(gauge(&hub.metrics.awaiting_acceptance), 1);
    // The socket goes before the daemon took request 2 (a frozen daemon's socket times out):
    // request 2 is retracted within the delivery window, not held for the reconnect grace.
    hub.link_lost(&b, l.id);
    let (sessions, requests) = hub.resume_set(&b, &InstanceId::new("i1"));
    assert_eq!(sessions, std::slice::from_ref(&s.sid));
    assert_eq!(
        requests
            .iter()
            .map(|r| r.id.as_value().clone())
            .collect::<Vec<_>>(),
        [json!(1)],
        "resume lists the accepted request only: the daemon cancels the other if it has it"
    );
    advance(DELIVERY_WINDOW + DELIVERY_MARGIN + TICK).await;
    settle().await;
    assert_not_delivered(&lost.try_recv().expect("retracted while detached"));
    assert_eq!(gauge(&hub.metrics.awaiting_acceptance), 0);
    assert_eq!(gauge(&hub.metrics.detached), 1, "request 1 still waits");
    // The same instance comes back within the grace and answers request 1.
    advance(Duration::from_secs(30)).await;
    hub.sweep();
    let (l2, _rx2) = link_of_revision(&hub, "i1", protocol::frame::REVISION_DELIVERY);
    assert!(hub.promote(&b, l2).is_none());
    assert_eq!(deliver(&hub, &s.sid, 1, None, result(1)), Delivery::Routed);
    assert_eq!(taken.await.unwrap(), result(1));
    assert_eq!(gauge(&hub.metrics.inflight), 0);
    assert_eq!(gauge(&hub.metrics.detached), 0);
}

#[tokio::test]
async fn a_call_a_revision_4_daemon_does_not_accept_is_retracted_and_closed() {
    let (hub, b) = hub().await;
    let (l, mut rx) = link_of_revision(&hub, "i1", protocol::frame::REVISION_DELIVERY);
    let _ = hub.promote(&b, l.clone());
    let c = hub.create_call(b.clone(), "runtime", alice());
    let (tx, answer) = oneshot::channel();
    let m = request(5, "tools/call");
    hub.register(&c, &json!(5), &m, ReplySink::json(tx))
        .unwrap();
    hub.send(&c, &l, m).unwrap();
    assert!(matches!(frames(&mut rx).as_slice(),
        [RelayFrame::Call { sid, deliver_by: Some(_), .. }] if *sid == c.sid));
    advance(DELIVERY_WINDOW + DELIVERY_MARGIN + TICK).await;
    assert_not_delivered(&answer.await.unwrap());
    assert!(matches!(
        frames(&mut rx).as_slice(),
        [RelayFrame::Close { sid }] if *sid == c.sid
    ));
    // Its `accepted`, late, is recognized though the call has ended.
    accept(&hub, &c.sid, 5);
    assert_eq!(counter(&hub.metrics.late_accepted), 1);
    assert_eq!(gauge(&hub.metrics.inflight), 0);
    assert_eq!(gauge(&hub.metrics.awaiting_acceptance), 0);
}

#[tokio::test]
async fn a_daemon_before_revision_4_gets_no_deliver_by_and_nothing_is_retracted() {
    let Connected {
        hub,
        b,
        l,
        mut rx,
        s,
    } = connected().await;
    let mut answer = json_request(&hub, &s, &l, 1);
    assert!(matches!(
        frames(&mut rx).as_slice(),
        [
            RelayFrame::Open { .. },
            RelayFrame::Rpc {
                deliver_by: None,
                ..
            }
        ]
    ));
    assert_eq!(gauge(&hub.metrics.awaiting_acceptance), 0);
    advance(Duration::from_secs(30)).await;
    hub.sweep();
    settle().await;
    assert!(answer.try_recv().is_err(), "still awaited");
    assert_eq!(hub.resume_set(&b, &InstanceId::new("i1")).1.len(), 1);
    assert_eq!(deliver(&hub, &s.sid, 1, None, result(1)), Delivery::Routed);
    assert_eq!(answer.await.unwrap(), result(1));
}

#[tokio::test]
async fn every_way_a_request_leaves_brings_the_awaiting_gauge_back_to_zero() {
    let Connected {
        hub, l, mut rx, s, ..
    } = connected_rev4().await;
    let answered = json_request(&hub, &s, &l, 1);
    let _cancelled = json_request(&hub, &s, &l, 2);
    let ended = json_request(&hub, &s, &l, 3);
    frames(&mut rx);
    assert_eq!(gauge(&hub.metrics.awaiting_acceptance), 3);
    // Answered without an `accepted` (it came first on the same queue, or not at all).
    assert_eq!(deliver(&hub, &s.sid, 1, None, result(1)), Delivery::Routed);
    answered.await.unwrap();
    hub.cancelled(&s, &json!(2));
    assert_eq!(gauge(&hub.metrics.awaiting_acceptance), 1);
    hub.end_session(&s.sid, code::UNAVAILABLE, "ended", false);
    ended.await.unwrap();
    assert_eq!(gauge(&hub.metrics.awaiting_acceptance), 0);
    advance(DELIVERY_WINDOW + DELIVERY_MARGIN + TICK).await;
    settle().await;
    assert_eq!(
        counter(&hub.metrics.retracted),
        0,
        "nothing left to retract"
    );
    assert_eq!(gauge(&hub.metrics.inflight), 0);
}

/// Item 4: a verified socket of the same instance that takes over while the old one is still
/// up gets the accepted in-flight requests in its `resume` before the old one is closed, and
/// their answers on it reach their clients.
#[tokio::test]
async fn a_same_instance_handover_moves_in_flight_requests_to_the_new_socket() {
    let Connected {
        hub,
        b,
        l: l1,
        mut rx,
        s,
    } = connected_rev4().await;
    let answer = json_request(&hub, &s, &l1, 1);
    frames(&mut rx);
    accept(&hub, &s.sid, 1);
    let (l2, _rx2) = link_of_revision(&hub, "i1", protocol::frame::REVISION_DELIVERY);
    // What the relay sends the candidate before `ready`: the incumbent is still active.
    let (_, requests) = hub.resume_set(&b, &l2.instance_id);
    assert_eq!(requests.len(), 1);
    assert_eq!(b.active().map(|l| l.id), Some(l1.id));
    let replaced = hub.promote(&b, l2.clone());
    assert_eq!(
        replaced.map(|l| l.id),
        Some(l1.id),
        "closed only now, by the caller"
    );
    // A new request goes to the new socket.
    let (tx, _next) = oneshot::channel();
    let m = request(2, "tools/call");
    hub.register(&s, &json!(2), &m, ReplySink::json(tx))
        .unwrap();
    hub.send(&s, &b.active().unwrap(), m).unwrap();
    assert!(frames(&mut rx).is_empty(), "nothing more on the old socket");
    assert_eq!(deliver(&hub, &s.sid, 1, None, result(1)), Delivery::Routed);
    assert_eq!(answer.await.unwrap(), result(1));
    // A replay of the same message (the daemon had not seen the ack) is dropped.
    assert_eq!(
        deliver(&hub, &s.sid, 1, None, result(1)),
        Delivery::Duplicate
    );
}
