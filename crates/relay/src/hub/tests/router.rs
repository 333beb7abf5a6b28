//! The routing trait as the HTTP layer drives it, on the local implementation and tokio's paused
//! clock: open a session, send a request and read its reply, notify, cancel, resume from an
//! event id, end; calls; grace expiry; a deadline a reconnect does not extend; the answers that
//! must not wait or allocate when nothing is to be waited for.

use futures_util::future::Either;
use protocol::limits::RELAY_FRAME_MAX_BYTES;

use super::*;
use crate::hub::{BridgeRef, Reply, Route, Router, SendError, SessionRef};

fn init() -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}})
}

/// A hub with bridge `b1` on an active link of instance `i1` (frames readable from `rx`), seen
/// through the router: the bridge, its route and a session opened for alice.
struct Routed {
    hub: Arc<Hub>,
    b: Arc<Bridge>,
    l: Link,
    rx: mpsc::Receiver<Outbound>,
    bridge: BridgeRef,
    route: Route,
    s: SessionRef,
}

async fn routed() -> Routed {
    let (hub, b) = hub().await;
    let (l, rx) = link(&hub, "i1");
    assert!(hub.promote(&b, l.clone()).is_none());
    let r: &dyn Router = &*hub;
    let bridge = r.bridge("b1").await;
    let route = r.route(&bridge, Duration::ZERO).await.expect("connected");
    let s = r
        .open_session(&bridge, "runtime", alice(), init())
        .expect("within the bounds");
    Routed {
        hub,
        b,
        l,
        rx,
        bridge,
        route,
        s,
    }
}

/// Sends request `id` of `s` through the router, answered as `stream` says.
fn send(r: &dyn Router, s: &SessionRef, route: &Route, id: i64, stream: bool) -> Reply {
    let (sink, reply) = s.reply(stream);
    r.request(s, route, &json!(id), request(id, "tools/call"), sink)
        .expect("sent");
    reply
}

fn json_reply(reply: Reply) -> oneshot::Receiver<Value> {
    match reply {
        Reply::Json(rx) => rx,
        Reply::Stream(_) => panic!("a JSON reply was asked for"),
    }
}

fn stream_reply(reply: Reply) -> Arc<SseStream> {
    match reply {
        Reply::Stream(st) => st,
        Reply::Json(_) => panic!("a stream reply was asked for"),
    }
}

/// A link whose writer is gone (its socket is ending, not yet deregistered) is no route: a
/// request waits for the next link, as for an offline daemon, instead of being refused on the
/// dead one; and with no next link within the wait, there is no route.
#[tokio::test]
async fn a_link_whose_writer_is_gone_is_not_a_route_and_the_next_one_is() {
    let Routed { hub, b, rx, .. } = routed().await;
    drop(rx);
    let next_route = |hub: Arc<Hub>| {
        tokio::spawn(async move {
            let r: &dyn Router = &*hub;
            let bridge = r.bridge("b1").await;
            r.route(&bridge, Duration::from_secs(5))
                .await
                .map(|r| r.0.id)
        })
    };
    assert_eq!(next_route(hub.clone()).await.unwrap(), None, "no link came");
    let waiting = next_route(hub.clone());
    advance(Duration::from_secs(1)).await;
    let (l2, _rx2) = link(&hub, "i1");
    let id = l2.id;
    assert!(hub.promote(&b, l2).is_some(), "it replaces the dead link");
    assert_eq!(waiting.await.unwrap(), Some(id));
}

#[tokio::test]
async fn what_needs_no_wait_is_answered_at_once_and_what_does_waits() {
    let Routed {
        hub, b, l, rx: _rx, ..
    } = routed().await;
    let r: &dyn Router = &*hub;
    assert!(matches!(r.bridge("b1"), Either::Left(_)), "a loaded bridge");
    assert!(
        matches!(r.bridge("b2"), Either::Right(_)),
        "read from the store"
    );
    let bridge = r.bridge("b1").await;
    assert!(matches!(
        r.route(&bridge, Duration::from_secs(2)),
        Either::Left(_)
    ));
    hub.link_lost(&b, l.id);
    let waited = r.route(&bridge, Duration::from_secs(2));
    assert!(matches!(waited, Either::Right(_)), "the daemon is away");
    assert!(waited.await.is_none(), "not back within the wait");
    // The daemon coming back within the wait is the route.
    let (l2, _rx2) = link(&hub, "i1");
    let waiting = tokio::spawn({
        let hub = hub.clone();
        let bridge = bridge.clone();
        async move {
            let r: &dyn Router = &*hub;
            r.route(&bridge, Duration::from_secs(2)).await
        }
    });
    settle().await;
    assert!(hub.promote(&b, l2.clone()).is_none());
    let route = waiting.await.unwrap().expect("the daemon came back");
    assert_eq!(route.instance().as_str(), "i1");
}

#[tokio::test]
async fn a_request_is_sent_with_its_session_opened_first_and_its_stream_carries_the_answer() {
    let Routed {
        hub,
        mut rx,
        route,
        s,
        ..
    } = routed().await;
    let r: &dyn Router = &*hub;
    let other = BridgePrincipal {
        id: "tok_bob".into(),
        ..alice()
    };
    assert!(r.session(s.sid().as_str(), &alice(), "runtime").is_some());
    assert!(r.session(s.sid().as_str(), &other, "runtime").is_none());
    assert!(r.session(s.sid().as_str(), &alice(), "db").is_none());
    let st = stream_reply(send(r, &s, &route, 1, true));
    assert!(matches!(
        frames(&mut rx).as_slice(),
        [RelayFrame::Open { .. }, RelayFrame::Rpc { message, .. }] if message["id"] == 1
    ));
    let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress",
        "params": {"progressToken": "p", "progress": 1}});
    assert_eq!(
        deliver(&hub, s.sid(), 1, Some(&json!(1)), progress.clone()),
        Delivery::Routed
    );
    assert_eq!(deliver(&hub, s.sid(), 2, None, result(1)), Delivery::Routed);
    assert_eq!(
        messages(&st),
        [progress, result(1)],
        "in order, the answer last"
    );
    assert!(st.summary().1, "finished by its answer");
    // A JSON reply gets the answer alone.
    let answer = json_reply(send(r, &s, &route, 2, false));
    assert_eq!(deliver(&hub, s.sid(), 3, None, result(2)), Delivery::Routed);
    assert_eq!(answer.await.unwrap(), result(2));
    assert_eq!(gauge(&hub.metrics.inflight), 0);
}

#[tokio::test]
async fn a_stream_resumes_after_an_event_id_and_is_forgotten_once_all_of_it_is_acknowledged() {
    let Routed {
        hub,
        route,
        s,
        rx: _rx,
        ..
    } = routed().await;
    let r: &dyn Router = &*hub;
    let st = stream_reply(send(r, &s, &route, 1, true));
    let note = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {}});
    assert_eq!(
        deliver(&hub, s.sid(), 1, Some(&json!(1)), note),
        Delivery::Routed
    );
    assert_eq!(deliver(&hub, s.sid(), 2, None, result(1)), Delivery::Routed);
    // The client lost the response after event 1: it reads event 2 again, never a re-run.
    let (again, after) = r.resume(&s, Some(&st.event_id(1))).expect("known");
    assert!(Arc::ptr_eq(&again, &st));
    assert_eq!(after, Some(1));
    let (events, done) = again.read_after(after);
    assert!(done);
    assert_eq!(events.len(), 1);
    assert!(events[0].data.contains("\"result\""));
    // Resuming after the last event acknowledges the whole stream: it is forgotten.
    assert!(r.resume(&s, Some(&st.event_id(2))).is_some());
    assert!(r.resume(&s, Some(&st.event_id(0))).is_none());
    // Without a cursor, and with one the relay never issued, the answers differ.
    let (standalone, _) = r.resume(&s, None).expect("the session's stream");
    assert!(!Arc::ptr_eq(&standalone, &st));
    assert!(r.resume(&s, Some("st000000000000-1")).is_none());
    // Another session's stream is not this one's to resume.
    let r2 = r.open_session(&r.bridge("b1").await, "runtime", alice(), init());
    let s2 = r2.expect("a second session");
    let st2 = stream_reply(send(r, &s2, &route, 1, true));
    assert!(r.resume(&s, Some(&st2.event_id(0))).is_none());
    r.refresh_gauges();
    assert_eq!(
        gauge(&hub.metrics.streams),
        3,
        "the two sessions' standalone streams and the second POST stream: the first is forgotten"
    );
}

#[tokio::test]
async fn notifications_go_to_the_daemon_or_wait_for_it_and_a_cancelled_request_gets_no_answer() {
    let Routed {
        hub,
        b,
        l,
        mut rx,
        route,
        s,
        ..
    } = routed().await;
    let r: &dyn Router = &*hub;
    let note =
        |n: i64| json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"n": n}});
    r.notify(&s, note(1));
    assert!(matches!(
        frames(&mut rx).as_slice(),
        [RelayFrame::Open { .. }, RelayFrame::Rpc { message, .. }] if message["params"]["n"] == 1
    ));
    let answer = json_reply(send(r, &s, &route, 7, false));
    frames(&mut rx);
    r.cancelled(&s, &json!(7));
    assert!(answer.await.is_err(), "no response is owed");
    assert_eq!(gauge(&hub.metrics.inflight), 0);
    // While the daemon is away a notification waits, and goes when the same instance is back.
    hub.link_lost(&b, l.id);
    r.notify(&s, note(2));
    let (l2, mut rx2) = link(&hub, "i1");
    assert!(hub.promote(&b, l2).is_none());
    assert!(matches!(
        frames(&mut rx2).as_slice(),
        [RelayFrame::Rpc { message, .. }] if message["params"]["n"] == 2
    ));
}

#[tokio::test]
async fn ending_a_session_answers_its_requests_closes_it_on_the_daemon_and_refuses_more() {
    let Routed {
        hub,
        mut rx,
        route,
        s,
        ..
    } = routed().await;
    let r: &dyn Router = &*hub;
    let answer = json_reply(send(r, &s, &route, 1, false));
    frames(&mut rx);
    r.end(&s);
    let e = answer.await.unwrap();
    assert_eq!(e["error"]["code"], code::UNAVAILABLE);
    assert!(matches!(
        frames(&mut rx).as_slice(),
        [RelayFrame::Close { sid }] if sid == s.sid()
    ));
    assert!(r.session(s.sid().as_str(), &alice(), "runtime").is_none());
    let (sink, _reply) = s.reply(false);
    assert!(matches!(
        r.request(&s, &route, &json!(2), request(2, "tools/call"), sink),
        Err(SendError::Ended)
    ));
    assert_eq!(gauge(&hub.metrics.sessions), 0);
}

#[tokio::test]
async fn a_refused_request_leaves_nothing_pending_and_its_stream_ends() {
    let Routed {
        hub,
        route,
        s,
        rx: _rx,
        ..
    } = routed().await;
    let r: &dyn Router = &*hub;
    let _first = send(r, &s, &route, 1, false);
    let (sink, _reply) = s.reply(false);
    assert!(matches!(
        r.request(&s, &route, &json!(1), request(1, "tools/call"), sink),
        Err(SendError::DuplicateId)
    ));
    let mut huge = request(2, "tools/call");
    huge["params"]["pad"] = json!("x".repeat(RELAY_FRAME_MAX_BYTES));
    let (sink, reply) = s.reply(true);
    assert!(matches!(
        r.request(&s, &route, &json!(2), huge, sink),
        Err(SendError::TooLarge(_))
    ));
    assert!(stream_reply(reply).summary().1, "its stream ended");
    assert_eq!(gauge(&hub.metrics.inflight), 1, "the first request only");
}

#[tokio::test]
async fn grace_expiry_answers_a_routed_request_with_outcome_unknown() {
    let Routed {
        hub,
        b,
        l,
        bridge,
        route,
        s,
        rx: _rx,
    } = routed().await;
    let r: &dyn Router = &*hub;
    let answer = json_reply(send(r, &s, &route, 1, false));
    hub.link_lost(&b, l.id);
    advance(hub.config.timing.reconnect_grace).await;
    hub.sweep();
    let e = answer.await.unwrap();
    assert_eq!(e["error"]["code"], code::OUTCOME_UNKNOWN);
    assert!(r.session(s.sid().as_str(), &alice(), "runtime").is_none());
    assert!(r.route(&bridge, Duration::ZERO).await.is_none());
}

/// Invariant 4: a request's deadline runs from when it was sent; the same instance coming back
/// rebinds the request but does not give it more time.
#[tokio::test]
async fn a_reconnect_does_not_extend_a_routed_requests_deadline() {
    let Routed {
        hub,
        b,
        l,
        route,
        s,
        rx: _rx,
        ..
    } = routed().await;
    let r: &dyn Router = &*hub;
    let mut answer = json_reply(send(r, &s, &route, 1, false));
    advance(Duration::from_secs(100)).await;
    hub.link_lost(&b, l.id);
    advance(Duration::from_secs(10)).await;
    let (l2, mut rx2) = link(&hub, "i1");
    assert!(hub.promote(&b, l2).is_none());
    advance(CALL_BUDGET_MAX + RELAY_OVERHEAD - Duration::from_secs(111)).await;
    hub.sweep();
    assert!(answer.try_recv().is_err(), "not yet");
    advance(Duration::from_secs(1)).await;
    hub.sweep();
    let e = answer.try_recv().expect("settled at the original deadline");
    assert_eq!(e["error"]["code"], code::UNAVAILABLE);
    assert!(
        frames(&mut rx2)
            .iter()
            .any(|f| matches!(f, RelayFrame::Rpc { message, .. }
            if message["method"] == "notifications/cancelled")),
        "the daemon is told on the new socket"
    );
}

#[tokio::test]
async fn a_call_is_answered_and_a_call_whose_client_left_is_cancelled_and_closed() {
    let Routed {
        hub,
        mut rx,
        bridge,
        route,
        ..
    } = routed().await;
    let r: &dyn Router = &*hub;
    frames(&mut rx);
    let call = |id: i64| {
        r.call(
            &bridge,
            "runtime",
            alice(),
            &route,
            &json!(id),
            request(id, "tools/call"),
            false,
        )
        .expect("sent")
    };
    let (c, reply) = call(5);
    assert!(matches!(frames(&mut rx).as_slice(), [RelayFrame::Call { sid, .. }] if sid == c.sid()));
    assert_eq!(deliver(&hub, c.sid(), 1, None, result(5)), Delivery::Routed);
    assert_eq!(json_reply(reply).await.unwrap(), result(5));
    // Its client closed the response: the daemon cancels the request and closes the call.
    let (c2, _reply2) = call(6);
    frames(&mut rx);
    r.cancel_call(&c2, &json!(6), "the client closed the request's response");
    let sent = frames(&mut rx);
    assert!(
        matches!(sent.as_slice(), [RelayFrame::Rpc { message, .. }, RelayFrame::Close { sid }]
            if message["method"] == "notifications/cancelled" && sid == c2.sid()),
        "{sent:?}"
    );
    // A 2026-07-28 `notifications/cancelled` names the call by its request id.
    let (c3, _reply3) = call(7);
    frames(&mut rx);
    let bob = BridgePrincipal {
        id: "tok_bob".into(),
        ..alice()
    };
    r.cancel_matching_call(&bridge, "runtime", &bob, &json!(7), "not his");
    assert!(
        frames(&mut rx).is_empty(),
        "another principal's call is left alone"
    );
    r.cancel_matching_call(&bridge, "runtime", &alice(), &json!(7), "cancelled");
    assert!(matches!(
        frames(&mut rx).as_slice(),
        [RelayFrame::Rpc { .. }, RelayFrame::Close { sid }] if sid == c3.sid()
    ));
    assert_eq!(gauge(&hub.metrics.inflight), 0);
    assert_eq!(gauge(&hub.metrics.sessions), 1, "calls are not sessions");
}
