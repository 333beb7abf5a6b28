//! Unit tests of SSE streams: replay after a cursor, bounds and gaps, retention, durable events.

use serde_json::json;

use crate::limits::RESUMABLE_RETENTION;

use super::*;

#[test]
fn events_replay_after_a_cursor_and_foreign_cursors_fail() {
    let s = SseStream::new(&SessionId::new("sid"), "p1", "b");
    s.push(
        &json!({"jsonrpc": "2.0", "method": "notifications/progress"}),
        false,
    )
    .unwrap();
    s.push(&json!({"jsonrpc": "2.0", "id": 1, "result": {}}), true)
        .unwrap();
    let (all, done) = s.read_after(None);
    assert_eq!(all.iter().map(|e| e.seq).collect::<Vec<_>>(), [0, 1, 2]);
    assert!(done);
    let (tail, _) = s.read_after(Some(1));
    assert_eq!(tail.len(), 1);
    assert!(tail[0].data.contains("\"result\""));
    assert!(
        s.push(&json!({}), false).is_err(),
        "a finished stream takes nothing"
    );
    let streams = SseStreams::default();
    streams.insert(s.clone());
    let cursor = s.event_id(1);
    assert!(
        streams
            .lookup(&cursor, &SessionId::new("sid"), "p1")
            .is_some()
    );
    assert!(
        streams
            .lookup(&cursor, &SessionId::new("sid"), "p2")
            .is_none()
    );
    assert!(
        streams
            .lookup(&cursor, &SessionId::new("other"), "p1")
            .is_none()
    );
    assert!(
        streams
            .lookup("nonsense", &SessionId::new("sid"), "p1")
            .is_none()
    );
}

#[test]
fn oversized_terminal_messages_are_handed_out_once() {
    let s = SseStream::new(&SessionId::new("sid"), "p", "b");
    let big = "x".repeat(RESUMABLE_TERMINAL_MAX_BYTES + 10);
    s.push(
        &json!({"jsonrpc": "2.0", "id": 7, "result": {"big": big}}),
        true,
    )
    .unwrap();
    let (first, _) = s.read_after(Some(0));
    assert!(first[0].data.len() > RESUMABLE_TERMINAL_MAX_BYTES);
    let (again, _) = s.read_after(Some(0));
    assert!(again[0].data.contains("-32002"));
    assert!(again[0].data.contains("\"id\":7"));
}

fn budget(shared: &Arc<AtomicUsize>, own_max: usize, shared_max: usize) -> Option<Budget> {
    Some(Budget {
        shared: shared.clone(),
        own_max,
        shared_max,
    })
}

fn note(n: u64) -> Value {
    json!({"jsonrpc": "2.0", "method": "m", "params": {"n": n}})
}

#[test]
fn a_full_stream_drops_its_oldest_and_a_reader_past_the_gap_is_told() {
    let shared = Arc::new(AtomicUsize::new(0));
    let size = note(1).to_string().len();
    let s = SseStream::with_budget(
        &SessionId::new("sid"),
        "p",
        "b",
        budget(&shared, 3 * size, 100 * size),
    );
    for n in 1..=5 {
        let lost = s.push(&note(n), false).unwrap();
        assert_eq!(lost, u64::from(n > 3), "push {n}");
    }
    assert_eq!(shared.load(Ordering::Relaxed), 3 * size);
    let (events, _) = s.read_after(None);
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [2, 3, 4, 5]
    );
    assert!(
        events[0].data.contains("\"dropped\":2"),
        "{}",
        events[0].data
    );
    // Resuming after the notice (or after any event past the gap) repeats nothing.
    let (events, _) = s.read_after(Some(2));
    assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), [3, 4, 5]);
    // Events a response carried are not lost when dropped later.
    s.note_sent(5);
    assert_eq!(s.push(&note(6), false), Ok(0));
    drop(events);
    drop(s);
    assert_eq!(
        shared.load(Ordering::Relaxed),
        0,
        "a dropped stream gives its bytes back"
    );
}

#[test]
fn the_shared_budget_of_a_bridge_bounds_all_its_streams() {
    let shared = Arc::new(AtomicUsize::new(0));
    let size = note(1).to_string().len();
    let mk = || {
        SseStream::with_budget(
            &SessionId::new("sid"),
            "p",
            "b",
            budget(&shared, 10 * size, 4 * size),
        )
    };
    let (a, b) = (mk(), mk());
    for n in 1..=4 {
        assert_eq!(a.push(&note(n), false), Ok(0));
    }
    // `b` holds nothing it could drop: its message is the loss.
    assert_eq!(b.push(&note(9), false), Ok(1));
    assert_eq!(shared.load(Ordering::Relaxed), 4 * size);
    let (events, _) = b.read_after(None);
    assert_eq!(events.len(), 1, "only the notice");
    assert!(events[0].data.contains("\"dropped\":1"));
    // `a` makes room by dropping its own oldest.
    assert_eq!(a.push(&note(5), false), Ok(1));
    assert_eq!(shared.load(Ordering::Relaxed), 4 * size);
}

#[tokio::test(start_paused = true)]
async fn finished_streams_expire_after_retention() {
    let streams = SseStreams::default();
    let s = SseStream::new(&SessionId::new("sid"), "p", "b");
    streams.insert(s.clone());
    s.push(&json!({"id": 1, "result": {}}), true).unwrap();
    assert_eq!(streams.sweep(), 0);
    tokio::time::advance(RESUMABLE_RETENTION + std::time::Duration::from_secs(1)).await;
    assert_eq!(streams.sweep(), 1);
}

/// Every event number reaches the store: an event the write queue refuses, or one too large
/// to keep, is queued as a "not kept" marker, in order with the others.
#[tokio::test]
async fn events_the_store_cannot_keep_are_queued_as_markers_in_order() {
    let (w, mut rx) = StoreWriter::channel();
    let streams = SseStreams::durable(w.clone());
    let s = SseStream::new(&SessionId::new("sid"), "p", "b");
    streams.insert_durable(s.clone(), &json!(1));
    s.persist_now();
    let note =
        |pad: usize| json!({"method": "notifications/progress", "params": {"m": "x".repeat(pad)}});
    s.push(&note(0), false).unwrap();
    s.push(&note(STORED_EVENT_MAX_BYTES), false).unwrap();
    let filler = || StoreWrite::Sweep { now: 0 };
    while w.send(filler()) {}
    s.push(&note(0), false).unwrap();
    s.push(&json!({"id": 1, "result": {}}), true).unwrap();
    let mut events = Vec::new();
    while let Ok(m) = rx.try_recv() {
        if let StoreWrite::Event {
            seq,
            data,
            terminal,
            ..
        } = m
        {
            events.push((seq, data == NOT_KEPT, terminal));
        }
    }
    assert_eq!(
        events,
        [
            (1, false, false),
            (2, true, false),
            (3, true, false),
            (4, false, true)
        ]
    );
}

/// Regression: a cursor at the largest event number overflowed.
#[test]
fn a_cursor_at_the_largest_event_number_reads_nothing() {
    let s = SseStream::new(&SessionId::new("sid"), "p", "b");
    s.push(&json!({"method": "notifications/progress"}), false)
        .unwrap();
    let (events, done) = s.read_after(Some(u64::MAX));
    assert!(events.is_empty() && !done);
    let streams = SseStreams::default();
    streams.insert(s.clone());
    let standalone = SseStream::new(&SessionId::new("sid"), "p", "b");
    assert!(
        matches!(
            streams.resume(
                &s.event_id(u64::MAX),
                &SessionId::new("sid"),
                "p",
                &standalone
            ),
            Resume::Unknown
        ),
        "an event the stream never sent is not a cursor"
    );
}

/// Regression: a result acknowledged by a `GET` naming its event was
/// still served from memory until the retention ran out.
#[test]
fn acknowledging_the_last_event_of_a_finished_stream_forgets_it() {
    let streams = SseStreams::default();
    let sid = SessionId::new("sid");
    let s = SseStream::new(&sid, "p", "b");
    streams.insert(s.clone());
    s.push(&json!({"method": "notifications/progress"}), false)
        .unwrap();
    streams.acknowledge(&s, 1);
    assert!(
        streams.lookup(&s.event_id(1), &sid, "p").is_some(),
        "running"
    );
    s.push(&json!({"id": 1, "result": {}}), true).unwrap();
    streams.acknowledge(&s, 1);
    assert!(
        streams.lookup(&s.event_id(1), &sid, "p").is_some(),
        "not past the result"
    );
    streams.acknowledge(&s, 2);
    assert!(streams.lookup(&s.event_id(0), &sid, "p").is_none());
}
