//! Link revision 4: delivery confirmation (`deliver_by`, `accepted`), retraction of requests the
//! daemon did not take, and what `resume` names.

use super::*;

/// A hub whose bridge `b1` has an active link of instance `i1` of link revision 4, and one
/// session on it.
async fn connected_rev4() -> Connected {
    let (hub, b) = hub().await;
    let (l, rx) = link_of_revision(&hub, "i1", protocol::frame::REVISION_DELIVERY);
    assert!(hub.promote(&b, l.clone()).is_none());
    let s = session(&hub, &b);
    Connected { hub, b, l, rx, s }
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
    hub.register_call(&c, &json!(5), &m, ReplySink::json(tx))
        .unwrap();
    hub.send_call(&c, &l, m).unwrap();
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
    hub.register_request(&s, &json!(2), &m, ReplySink::json(tx))
        .unwrap();
    hub.send_session(&s, &b.active().unwrap(), m).unwrap();
    assert!(frames(&mut rx).is_empty(), "nothing more on the old socket");
    assert_eq!(deliver(&hub, &s.sid, 1, None, result(1)), Delivery::Routed);
    assert_eq!(answer.await.unwrap(), result(1));
    // A replay of the same message (the daemon had not seen the ack) is dropped.
    assert_eq!(
        deliver(&hub, &s.sid, 1, None, result(1)),
        Delivery::Duplicate
    );
}
