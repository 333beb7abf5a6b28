//! Routing: daemon messages to exactly one place, within the sending socket's sessions and the
//! sequence window; deadlines (at the sweep and at the session's next event); idle sessions;
//! calls; the in-flight bound.

use super::*;

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
        assert!(hub.exchange_from(from, &s.sid).is_none());
    }
    assert!(
        hub.exchange_by_sid(&s.sid).is_some(),
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

/// A deadline is re-checked on every event of its session, not only by the
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
    advance(crate::hub::sweep::SESSION_IDLE).await;
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
    hub.register_call(&c, &json!(5), &m, ReplySink::json(tx))
        .unwrap();
    hub.send_call(&c, &l, m).unwrap();
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
        hub.register_request(&s, &json!("one more"), &request(0, "tools/call"), ReplySink::json(tx)),
        Err(crate::hub::SendError::TooMany(n)) if n == max
    ));
    assert_eq!(deliver(&hub, &s.sid, 1, None, result(0)), Delivery::Routed);
    let (tx, _rx2) = oneshot::channel();
    assert!(matches!(
        hub.register_request(
            &s,
            &json!(1),
            &request(1, "tools/call"),
            ReplySink::json(tx)
        ),
        Err(crate::hub::SendError::DuplicateId)
    ));
    let (tx, _rx3) = oneshot::channel();
    hub.register_request(
        &s,
        &json!("1"),
        &request(1, "tools/call"),
        ReplySink::json(tx),
    )
    .expect("the string \"1\" is another id than the number 1");
    hub.end_session(&s.sid, code::UNAVAILABLE, "ended", false);
    let (tx, _rx4) = oneshot::channel();
    assert!(matches!(
        hub.register_request(
            &s,
            &json!("late"),
            &request(2, "tools/call"),
            ReplySink::json(tx)
        ),
        Err(crate::hub::SendError::Ended)
    ));
    assert_eq!(
        hub.metrics
            .inflight
            .load(std::sync::atomic::Ordering::Relaxed),
        0,
        "ending the session gave every slot back"
    );
}
