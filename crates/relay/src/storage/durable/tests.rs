//! Unit tests of the durable sessions and streams: keys, round trips, markers, retention,
//! deletion that leaves nothing readable. `session` is a record other tests of the store use.

use super::*;

pub(crate) fn session(sid: &str) -> SessionRecord {
    SessionRecord {
        sid: sid.into(),
        bridge: "b".into(),
        server: "runtime".into(),
        principal: "tok_1".into(),
        credential: "tok_1".into(),
        role: "owner".into(),
        initialize: "{}".into(),
        initialized: false,
        opened_on: None,
        last_active: 1000,
    }
}

fn opened(id: &str, sid: &str, at: i64) -> StoreWrite {
    StoreWrite::StreamOpened {
        id: id.into(),
        sid: sid.into(),
        principal: "tok_1".into(),
        bridge: "b".into(),
        request_id: "7".into(),
        at,
    }
}

fn event(stream: &str, seq: u64, terminal: bool, at: i64) -> StoreWrite {
    StoreWrite::Event {
        stream: stream.into(),
        seq,
        data: format!("{{\"n\":{seq}}}"),
        terminal,
        at,
    }
}

#[tokio::test]
async fn the_session_key_is_generated_once_and_a_damaged_one_is_refused() {
    let s = SqliteStorage::memory().await.unwrap();
    let k = s.session_key().await.unwrap();
    assert_eq!(s.session_key().await.unwrap(), k, "generated once");
    sqlx::query("UPDATE relay_secrets SET value = x'0102'")
        .execute(&s.pool)
        .await
        .unwrap();
    assert!(matches!(
        s.session_key().await,
        Err(StorageError::Corrupt(_))
    ));
}

#[tokio::test]
async fn sessions_and_streams_round_trip_and_in_flight_markers_stay_unfinished() {
    let s = SqliteStorage::memory().await.unwrap();
    let mut rec = session("s1");
    s.apply(&[
        StoreWrite::SessionOpened(rec.clone()),
        StoreWrite::SessionBound {
            sid: "s1".into(),
            opened_on: Some("inst".into()),
            initialized: true,
        },
        StoreWrite::SessionTouched {
            sid: "s1".into(),
            at: 1010,
        },
        opened("st1", "s1", 1000),
        event("st1", 1, false, 1000),
        event("st1", 2, true, 1001),
        opened("st2", "s1", 1002),
        event("st2", 1, false, 1002),
        // A stream of a session that is not stored is not kept.
        opened("st3", "nope", 1002),
        event("st3", 1, false, 1002),
    ])
    .await
    .unwrap();
    let (sessions, streams) = s.load_durable(1020, 3600).await.unwrap();
    rec.opened_on = Some("inst".into());
    rec.initialized = true;
    rec.last_active = 1010;
    assert_eq!(sessions, vec![rec]);
    assert_eq!(streams.len(), 2, "{streams:?}");
    assert_eq!(streams[0].id, "st1");
    assert_eq!(streams[0].finished_at, Some(1001));
    assert_eq!(streams[0].last_seq, Some(2));
    assert_eq!(
        streams[0].events,
        vec![
            StoredEvent {
                seq: 1,
                payload: Payload::Intact("{\"n\":1}".into())
            },
            StoredEvent {
                seq: 2,
                payload: Payload::Intact("{\"n\":2}".into())
            },
        ]
    );
    assert_eq!(streams[1].id, "st2");
    assert_eq!(streams[1].finished_at, None, "still in flight");
    assert_eq!(streams[1].request_id, "7");
    // Ending the session deletes it and its streams.
    s.apply(&[StoreWrite::SessionEnded { sid: "s1".into() }])
        .await
        .unwrap();
    let (sessions, streams) = s.load_durable(1020, 3600).await.unwrap();
    assert!(sessions.is_empty() && streams.is_empty());
    assert_eq!(count(&s, "sse_events").await, 0);
}

async fn count(s: &SqliteStorage, table: &str) -> i64 {
    sqlx::query(&format!("SELECT count(*) FROM {table}"))
        .fetch_one(&s.pool)
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn a_stored_event_that_does_not_match_its_hash_is_reported_corrupt() {
    let s = SqliteStorage::memory().await.unwrap();
    s.apply(&[
        StoreWrite::SessionOpened(session("s1")),
        opened("st1", "s1", 1000),
        event("st1", 1, true, 1000),
    ])
    .await
    .unwrap();
    sqlx::query("UPDATE sse_events SET data = '{\"n\":666}'")
        .execute(&s.pool)
        .await
        .unwrap();
    let (_, streams) = s.load_durable(1001, 3600).await.unwrap();
    assert_eq!(
        streams[0].events,
        vec![StoredEvent {
            seq: 1,
            payload: Payload::Corrupt
        }]
    );
}

#[tokio::test]
async fn expired_acknowledged_and_dropped_streams_are_deleted_and_events_are_bounded() {
    let s = SqliteStorage::memory().await.unwrap();
    let retention = RESUMABLE_RETENTION.as_secs() as i64;
    let mut w = vec![
        StoreWrite::SessionOpened(session("s1")),
        opened("old", "s1", 1000),
        event("old", 1, true, 1000),
        opened("acked", "s1", 1000),
        event("acked", 1, false, 1000),
        event("acked", 2, true, 1000),
        opened("dropped", "s1", 1000),
        opened("stuck", "s1", 1000),
        opened("long", "s1", 1000 + retention),
    ];
    for seq in 1..=40 {
        w.push(event("long", seq, false, 1000 + retention));
    }
    w.push(StoreWrite::Acknowledged {
        stream: "acked".into(),
        seq: 2,
    });
    w.push(StoreWrite::StreamsDropped {
        ids: vec!["dropped".into()],
    });
    s.apply(&w).await.unwrap();
    assert_eq!(
        count(&s, "sse_events").await,
        1 + STORED_EVENTS_PER_STREAM as i64,
        "an acknowledged stream's events are gone; a long one keeps its last events"
    );
    // Past the retention of `old`, before the in-flight bound of `stuck`.
    s.apply(&[StoreWrite::Sweep {
        now: 1000 + retention,
    }])
    .await
    .unwrap();
    let ids =
        |streams: Vec<StreamRecord>| -> Vec<String> { streams.into_iter().map(|s| s.id).collect() };
    let (_, streams) = s.load_durable(1000 + retention, 1_000_000).await.unwrap();
    let long = streams.iter().find(|s| s.id == "long").unwrap();
    assert_eq!(
        long.events.first().map(|e| e.seq),
        Some(40 - STORED_EVENTS_PER_STREAM + 1)
    );
    assert_eq!(ids(streams), ["stuck", "long"]);
    // At startup, an unfinished marker older than any request can run is deleted too, and
    // sessions idle past the idle timeout with their streams.
    let (_, streams) = s
        .load_durable(1000 + IN_FLIGHT_MAX, 1_000_000)
        .await
        .unwrap();
    assert_eq!(ids(streams), ["long"]);
    let (sessions, streams) = s.load_durable(1000 + IN_FLIGHT_MAX, 60).await.unwrap();
    assert!(sessions.is_empty() && streams.is_empty());
    assert_eq!(count(&s, "sse_events").await, 0);
}

/// Regression: deleted payloads stayed readable in the database
/// file's free pages and in the WAL.
#[tokio::test]
async fn deleted_payloads_leave_the_disk_after_a_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("relay.db");
    let s = SqliteStorage::open(&path).await.unwrap();
    let secret = "PAYLOAD-7d1f0c-never-kept";
    s.apply(&[
        StoreWrite::SessionOpened(session("s1")),
        opened("st1", "s1", 1000),
        StoreWrite::Event {
            stream: "st1".into(),
            seq: 1,
            data: format!("{{\"result\":\"{secret}\"}}"),
            terminal: true,
            at: 1000,
        },
    ])
    .await
    .unwrap();
    s.apply(&[
        StoreWrite::Acknowledged {
            stream: "st1".into(),
            seq: 1,
        },
        StoreWrite::Sweep { now: 1001 },
    ])
    .await
    .unwrap();
    for file in ["relay.db", "relay.db-wal"] {
        let bytes = std::fs::read(dir.path().join(file)).unwrap_or_default();
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "{file} still holds the payload"
        );
    }
}
