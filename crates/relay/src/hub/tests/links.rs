//! A bridge's link: promotion of a verified socket, loss and rebind within the grace, grace
//! expiry, a new instance, and the detached gauge.

use super::*;

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

/// What the daemon replays after a rebind (everything the relay had not acknowledged when the
/// link dropped) reaches the request's stream once: the messages routed before the loss are
/// duplicates and dropped, the rest routed in order.
#[tokio::test]
async fn a_replay_after_a_rebind_within_the_grace_reaches_the_stream_once_in_order() {
    let Connected {
        hub,
        b,
        l: l1,
        rx: _rx1,
        s,
    } = connected().await;
    let st = sse_request(&hub, &s, &l1, 1, Some("p1"));
    let progress = |n: i64| {
        json!({"jsonrpc": "2.0", "method": "notifications/progress",
            "params": {"progressToken": "p1", "progress": n}})
    };
    assert_eq!(
        deliver(&hub, &s.sid, 1, None, progress(1)),
        Delivery::Routed
    );
    assert_eq!(
        deliver(&hub, &s.sid, 2, None, progress(2)),
        Delivery::Routed
    );
    hub.link_lost(&b, l1.id);
    advance(hub.config.timing.reconnect_grace - Duration::from_secs(1)).await;
    hub.sweep();
    let (l2, _rx2) = link(&hub, "i1");
    assert!(hub.promote(&b, l2).is_none());
    // The daemon replays from 1: two duplicates, then what is new.
    assert_eq!(
        deliver(&hub, &s.sid, 1, None, progress(1)),
        Delivery::Duplicate
    );
    assert_eq!(
        deliver(&hub, &s.sid, 2, None, progress(2)),
        Delivery::Duplicate
    );
    assert_eq!(
        deliver(&hub, &s.sid, 3, None, progress(3)),
        Delivery::Routed
    );
    assert_eq!(deliver(&hub, &s.sid, 4, None, result(1)), Delivery::Routed);
    assert_eq!(
        deliver(&hub, &s.sid, 4, None, result(1)),
        Delivery::Duplicate
    );
    assert_eq!(
        messages(&st),
        [progress(1), progress(2), progress(3), result(1)]
    );
    assert!(st.summary().1, "the response finished the stream");
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

/// A new instance inherits no request and no open session: the old instance's requests end
/// with "outcome unknown", the new instance is told nothing, and the session stays, opened again
/// on the new instance (with the kept `initialize`) by its next request.
#[tokio::test]
async fn a_new_instance_inherits_no_request_and_the_session_opens_again_on_it() {
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
    let _ = hub.promote(&b, l2.clone());
    let e = answer.await.unwrap();
    assert_eq!(e["error"]["code"], code::OUTCOME_UNKNOWN);
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("daemon restarted")
    );
    assert!(
        frames(&mut rx2).is_empty(),
        "the new instance is told nothing"
    );
    let kept = hub
        .session(s.sid.as_str(), &alice())
        .expect("the session outlives its daemon instance");
    let _next = json_request(&hub, &kept, &l2, 2);
    assert!(
        matches!(
            frames(&mut rx2).as_slice(),
            [RelayFrame::Open { .. }, .., RelayFrame::Rpc { .. }]
        ),
        "opened again on the new instance, then the request"
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
    hub.register_request(
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
