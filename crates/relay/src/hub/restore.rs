//! What a restarted relay takes back from its store: the session-era
//! MCP sessions of the previous process and their POST streams.
//!
//! A session is restored when its credential is still live and its id still verifies for its
//! principal; one opened on a daemon instance other than its bridge's latest is ended (a new
//! instance inherits nothing). A bridge with restored sessions bound to an instance starts
//! detached from it, as if its socket had just been lost: the same instance reconnecting within
//! the grace gets them in `resume` and keeps them, another instance opens them again on their
//! next request (`Hub::reopen_bound`), the grace running out ends them (404 → re-initialize). Requests in flight are not restored: their stream ends with
//! [`code::RELAY_RESTARTED`], delivered on replay, and `resume` does not name them, so the
//! daemon cancels them; nothing is ever re-executed (invariants 6 and 7).

use std::{collections::HashMap, sync::Arc};

use serde_json::{Value, json};
use tokio::time::{Duration, Instant};

use protocol::{
    Role,
    ids::{InstanceId, SessionId},
    jsonrpc::{self, code},
};

use super::{
    Hub, Session,
    exchange::{Exchange, Held},
    link_state::LinkState,
    sweep::SESSION_IDLE,
};
use crate::{
    auth::BridgePrincipal,
    metrics::Metrics,
    storage::{
        Payload, StorageError, StoreWrite,
        durable::NOT_KEPT,
        now as unix_now,
        writer::{STORE_BATCH_MAX, STORE_QUEUE_HARD},
    },
    stream::{Event, Restored, SseStream, not_kept_notice},
};

/// Most events of one stream that can have been sent but not stored when the relay died: all
/// that the write-behind queue holds at most, and the batch being applied. The error that ends
/// an interrupted stream is numbered this far past its last stored event.
const UNSTORED_EVENTS_MAX: u64 = (STORE_QUEUE_HARD + STORE_BATCH_MAX) as u64;

/// The error a request in flight when the relay died ends with.
pub(crate) const RELAY_RESTARTED_MESSAGE: &str = "the relay restarted while this request was in flight: its outcome is unknown (it may have had effects) and it was not retried; check before retrying";

/// The instant `secs_ago` seconds before now (now when the monotonic clock does not reach back).
fn instant_ago(secs_ago: i64) -> Instant {
    let now = Instant::now();
    now.checked_sub(Duration::from_secs(secs_ago.max(0) as u64))
        .unwrap_or(now)
}

/// What a replay gets in place of a stored event whose text does not match its hash.
fn corrupt_event(request_id: &Value, terminal: bool) -> Value {
    if terminal {
        jsonrpc::error(
            request_id,
            code::INTERNAL_ERROR,
            "the relay's stored copy of this request's result is corrupt (its SHA-256 does not match) and is not served: the outcome of the request is unknown",
            None,
        )
    } else {
        json!({
            "jsonrpc": jsonrpc::VERSION,
            "method": "notifications/message",
            "params": {
                "level": "error",
                "logger": "machine-mcp-relay",
                "data": {"message": "a stored server message of this request is corrupt (its SHA-256 does not match) and is not served"},
            },
        })
    }
}

impl Hub {
    /// Restores what the previous relay process stored (see the module docs). Does nothing for a
    /// hub without a store writer.
    ///
    /// # Errors
    /// The store cannot be read; a stored session or stream row is unreadable (`Corrupt`: the
    /// relay does not start, invariant 9). Stream events that fail their hash check are not an
    /// error: they are replaced by an error event and logged.
    pub(super) async fn restore(&self) -> Result<(), StorageError> {
        let Some(w) = self.durable.clone() else {
            return Ok(());
        };
        let now = unix_now();
        let (records, streams) = self
            .store
            .sessions()
            .load_durable(now, SESSION_IDLE.as_secs() as i64)
            .await?;
        // Records come least recently active first: a bridge is bound to the instance of its
        // most recently active session.
        let mut bound: HashMap<String, String> = HashMap::new();
        for r in &records {
            if let Some(i) = &r.opened_on {
                bound.insert(r.bridge.clone(), i.clone());
            }
        }
        let mut live: HashMap<String, bool> = HashMap::new();
        let mut restored: HashMap<String, Arc<Session>> = HashMap::new();
        for r in records {
            let role = Role::parse(&r.role).map_err(StorageError::Corrupt)?;
            let initialize: Value = serde_json::from_str(&r.initialize).map_err(|e| {
                StorageError::Corrupt(format!("a stored MCP session's initialize: {e}"))
            })?;
            let alive = match live.get(&r.credential) {
                Some(ok) => *ok,
                None => {
                    let ok = self
                        .store
                        .revocations()
                        .credential_live(&r.credential)
                        .await?;
                    live.insert(r.credential.clone(), ok);
                    ok
                }
            };
            let stale = r.opened_on.is_some() && r.opened_on.as_ref() != bound.get(&r.bridge);
            if !alive || stale || !self.keys.verify(&r.sid, &r.principal) {
                w.send_reliable(StoreWrite::SessionEnded { sid: r.sid });
                continue;
            }
            let bridge = self.bridge(&r.bridge).await;
            let sid = SessionId::new(r.sid.clone());
            let principal = BridgePrincipal {
                id: r.principal,
                bridge: r.bridge,
                role,
                credential: r.credential,
            };
            let exchange = Exchange::new(sid.clone(), bridge, &r.server, principal);
            {
                let mut g = exchange.state.lock();
                g.opened_on = r.opened_on.map(InstanceId::new);
                g.last_active = instant_ago(now - r.last_active);
            }
            let s = Arc::new(Session::new(
                exchange,
                initialize,
                r.initialized,
                r.last_active,
            ));
            self.streams.insert(s.standalone.clone());
            self.exchanges.lock().insert(sid, Held::Session(s.clone()));
            Metrics::add(&self.metrics.sessions, 1);
            restored.insert(r.sid, s);
        }
        for (name, instance) in bound {
            let instance = InstanceId::new(instance);
            let kept = restored.values().any(|s| {
                s.bridge.name == name && s.state.lock().opened_on.as_ref() == Some(&instance)
            });
            if kept {
                let b = self.bridge(&name).await;
                b.state.lock().link = LinkState::restored(instance, Instant::now());
            }
        }
        let (mut replayable, mut interrupted, mut corrupt) = (0usize, 0usize, 0usize);
        for r in streams {
            let Some(s) = restored.get(&r.sid) else {
                continue; // deleted with its session
            };
            let request_id: Value = serde_json::from_str(&r.request_id)
                .map_err(|e| StorageError::Corrupt(format!("a stored stream's request id: {e}")))?;
            let last = r.events.last().map(|e| e.seq);
            let mut events = Vec::with_capacity(r.events.len());
            for e in r.events {
                let data = match e.payload {
                    Payload::Intact(d) if d == NOT_KEPT => not_kept_notice().to_string(),
                    Payload::Intact(d) => d,
                    Payload::Corrupt => {
                        corrupt += 1;
                        tracing::error!(bridge = %s.bridge.name, stream = %r.id, seq = e.seq, "a stored stream event does not match its SHA-256: it is reported to the client, not served");
                        corrupt_event(&request_id, r.last_seq == Some(e.seq)).to_string()
                    }
                };
                events.push(Event { seq: e.seq, data });
            }
            // Every event sent has a row (its text or a "not kept" marker) once the write-behind
            // queue has applied it; those still queued when the process died are not there. So
            // the error that ends an interrupted stream is numbered past every event that
            // queue can have held, and a client that had such events live still gets it.
            let next_seq = match (r.last_seq, last) {
                (Some(l), _) => l + 1,
                (None, l) => l.unwrap_or(0) + 1 + UNSTORED_EVENTS_MAX,
            };
            let done_at = r.finished_at.map(|t| instant_ago(now - t));
            let st = SseStream::restored(
                &s.sid,
                &r.principal,
                &r.bridge,
                Restored {
                    id: r.id,
                    // With no row kept, a finished stream's events up to its last are missing;
                    // an interrupted one had none stored (its end is numbered past any
                    // unstored ones, which a reader from before them may have missed).
                    first_seq: events
                        .first()
                        .map_or(r.last_seq.map_or(1, |l| l + 1), |e: &Event| e.seq),
                    events,
                    next_seq,
                    done_at,
                },
            );
            self.streams.insert_restored(st.clone(), &request_id);
            if done_at.is_none() {
                interrupted += 1;
                let err = jsonrpc::error(
                    &request_id,
                    code::RELAY_RESTARTED,
                    RELAY_RESTARTED_MESSAGE,
                    None,
                );
                let _ = st.push(&err, true);
            } else {
                replayable += 1;
            }
        }
        tracing::info!(
            sessions = restored.len(),
            streams = replayable,
            interrupted,
            corrupt,
            "restored MCP sessions and streams from the relay store"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{
        RelayConfig,
        storage::{self, Store},
    };

    async fn flushed(hub: &Hub) {
        let q = &hub.durable.as_ref().unwrap().queued;
        while q.load(std::sync::atomic::Ordering::Relaxed) != 0 {
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    fn read(hub: &Hub, st: &SseStream, after: u64, s: &Session) -> (Vec<Event>, bool) {
        let (found, seq) = hub
            .streams
            .lookup(&st.event_id(after), &s.sid, &s.principal.id)
            .expect("the stream is known after the restart");
        found.read_after(Some(seq))
    }

    /// The next relay process on the same store.
    async fn reopen(storage: &Store) -> Arc<Hub> {
        Hub::open(
            storage.clone(),
            Arc::new(RelayConfig::for_tests()),
            Arc::default(),
        )
        .await
        .unwrap()
    }

    /// A hub on a store in `dir` with one bridge `b1`, an owner token and an initialized session
    /// opened on instance `i1`.
    async fn hub_with_session(
        dir: &std::path::Path,
    ) -> (Store, Arc<Hub>, Arc<Session>, BridgePrincipal, Value) {
        let storage = storage::open(&dir.join("relay.db")).await.unwrap();
        storage.bridges().add_bridge("b1", 60).await.unwrap();
        let (tok, _) = storage
            .accounts()
            .create_token("b1", Role::Owner, None)
            .await
            .unwrap();
        let principal = BridgePrincipal {
            id: tok.id.clone(),
            bridge: "b1".into(),
            role: Role::Owner,
            credential: tok.id.clone(),
        };
        let hub = reopen(&storage).await;
        let b = hub.bridge("b1").await;
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}});
        let s = hub
            .create_session(b, "runtime", principal.clone(), init.clone())
            .unwrap();
        {
            let mut g = s.state.lock();
            g.opened_on = Some(InstanceId::new("i1"));
            s.initialized
                .store(true, std::sync::atomic::Ordering::Relaxed);
            hub.persist_bound(&s, &g);
        }
        (storage, hub, s, principal, init)
    }

    #[tokio::test]
    async fn a_restarted_hub_keeps_sessions_and_results_and_ends_requests_in_flight() {
        let dir = tempfile::tempdir().unwrap();
        let (storage, hub, s, principal, init) = hub_with_session(dir.path()).await;
        let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}});
        let stream = |id: i64| {
            let st = SseStream::new(&s.sid, &principal.id, "b1");
            hub.streams.insert_durable(st.clone(), &json!(id));
            // Its priming event went to the client: the stream is stored.
            st.persist_now();
            st
        };
        let done = stream(1);
        done.push(&progress, false).unwrap();
        done.push(
            &json!({"jsonrpc": "2.0", "id": 1, "result": {"ok": 1}}),
            true,
        )
        .unwrap();
        let cut = stream(2);
        cut.push(&progress, false).unwrap();
        let damaged = stream(3);
        damaged
            .push(
                &json!({"jsonrpc": "2.0", "id": 3, "result": {"secret": "original"}}),
                true,
            )
            .unwrap();
        let big = stream(4);
        let huge = "x".repeat(crate::limits::RESUMABLE_TERMINAL_MAX_BYTES);
        big.push(
            &json!({"jsonrpc": "2.0", "id": 4, "result": {"huge": huge}}),
            true,
        )
        .unwrap();
        flushed(&hub).await;
        storage
            .execute_sql(
                "UPDATE sse_events SET data = replace(data, 'original', 'tampered') WHERE stream = ?",
                &[damaged.id()],
            )
            .await;

        // The next process on the same store.
        let hub2 = reopen(&storage).await;
        let s2 = hub2
            .session(s.sid.as_str(), &principal)
            .expect("the session survives the restart");
        assert_eq!(s2.initialize, init);
        let mut other = principal.clone();
        other.id = "tok_other".into();
        assert!(hub2.session(s.sid.as_str(), &other).is_none());
        let b2 = hub2.bridge("b1").await;
        let (sessions, requests) = hub2.resume_set(&b2, &InstanceId::new("i1"));
        assert_eq!(
            sessions,
            std::slice::from_ref(&s.sid),
            "the same instance keeps it"
        );
        assert!(requests.is_empty(), "nothing in flight is resumed");
        assert!(hub2.resume_set(&b2, &InstanceId::new("i2")).0.is_empty());

        let (events, finished) = read(&hub2, &done, 0, &s);
        assert!(finished);
        assert_eq!(
            events.iter().map(|e| e.data.clone()).collect::<Vec<_>>(),
            done.read_after(Some(0))
                .0
                .into_iter()
                .map(|e| e.data)
                .collect::<Vec<_>>(),
            "exactly the missed events"
        );
        let (events, finished) = read(&hub2, &cut, 1, &s);
        assert!(finished);
        assert_eq!(events.len(), 1);
        let m: Value = serde_json::from_str(&events[0].data).unwrap();
        assert_eq!(m["id"], 2);
        assert_eq!(m["error"]["code"], code::RELAY_RESTARTED);
        let (events, _) = read(&hub2, &damaged, 0, &s);
        assert_eq!(events.len(), 1);
        assert!(!events[0].data.contains("tampered") && !events[0].data.contains("original"));
        let m: Value = serde_json::from_str(&events[0].data).unwrap();
        assert_eq!(
            (m["id"].clone(), m["error"]["code"].clone()),
            (json!(3), json!(code::INTERNAL_ERROR))
        );
        let (events, _) = read(&hub2, &big, 0, &s);
        let m: Value = serde_json::from_str(&events[0].data).unwrap();
        assert_eq!(
            (m["id"].clone(), m["error"]["code"].clone()),
            (json!(4), json!(code::NOT_REPLAYABLE))
        );

        // The interrupted request's end is stored too: a second restart replays the same error.
        flushed(&hub2).await;
        let hub3 = reopen(&storage).await;
        let (events, _) = read(&hub3, &cut, 1, &s);
        assert_eq!(events.len(), 1);
        assert!(events[0].data.contains(&code::RELAY_RESTARTED.to_string()));
        // Acknowledging the last event forgets the stream; ending the session forgets it all.
        hub3.streams.acknowledge(
            &hub3
                .streams
                .lookup(&done.event_id(2), &s.sid, &principal.id)
                .unwrap()
                .0,
            2,
        );
        hub3.end_session(&s.sid, code::UNAVAILABLE, "deleted", false);
        flushed(&hub3).await;
        let hub4 = reopen(&storage).await;
        assert!(hub4.session(s.sid.as_str(), &principal).is_none());
        assert!(
            hub4.streams
                .lookup(&done.event_id(0), &s.sid, &principal.id)
                .is_none()
        );
        for table in ["mcp_sessions", "sse_streams", "sse_events"] {
            let n = storage.count_rows(table).await;
            assert_eq!(n, 0, "{table}");
        }
    }

    /// Regression: events that are not stored (a progress message over
    /// `STORED_EVENT_MAX_BYTES`) still count. A client that received them live and resumes
    /// after the last one must get the restart error, numbered after it, not an empty end.
    #[tokio::test]
    async fn an_interrupted_stream_ends_after_every_event_sent_even_those_not_stored() {
        let dir = tempfile::tempdir().unwrap();
        let (storage, hub, s, principal, _) = hub_with_session(dir.path()).await;
        let st = SseStream::new(&s.sid, &principal.id, "b1");
        hub.streams.insert_durable(st.clone(), &json!(9));
        // Its priming event went to the client: the stream is stored.
        st.persist_now();
        let progress = |n: usize, pad: usize| {
            json!({"jsonrpc": "2.0", "method": "notifications/progress",
                   "params": {"progress": n, "message": "x".repeat(pad)}})
        };
        st.push(&progress(1, 0), false).unwrap();
        let big = crate::storage::durable::STORED_EVENT_MAX_BYTES + 4096;
        st.push(&progress(2, big), false).unwrap();
        flushed(&hub).await;

        let hub2 = reopen(&storage).await;
        // The client had events 1 and 2 live.
        let (events, finished) = read(&hub2, &st, 2, &s);
        assert!(finished);
        assert_eq!(events.len(), 1, "{events:?}");
        assert!(events[0].seq > 2, "numbered after the last event sent");
        let m: Value = serde_json::from_str(&events[0].data).unwrap();
        assert_eq!(m["error"]["code"], code::RELAY_RESTARTED);
        // A client that had only event 1 is told that event 2 is not kept, then gets the error.
        let (events, _) = read(&hub2, &st, 1, &s);
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].seq, 2);
        let m: Value = serde_json::from_str(&events[0].data).unwrap();
        assert_eq!(
            (m["method"].clone(), m["params"]["level"].clone()),
            (json!("notifications/message"), json!("warning"))
        );
    }

    /// Regression: the standalone stream is not stored, so a client that
    /// resumed its `GET` after a restart named a stream the relay did not know and got 404 —
    /// which tells a client its session is gone. It gets the session's standalone stream,
    /// told that messages may have been lost.
    #[tokio::test]
    async fn a_standalone_stream_resumed_after_a_restart_continues_with_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        let (storage, hub, s, principal, _) = hub_with_session(dir.path()).await;
        let note = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
        s.standalone.push(&note, false).unwrap();
        let cursor = s.standalone.event_id(1);
        flushed(&hub).await;
        let hub2 = reopen(&storage).await;
        let s2 = hub2.session(s.sid.as_str(), &principal).unwrap();
        match hub2
            .streams
            .resume(&cursor, &s2.sid, &principal.id, &s2.standalone)
        {
            crate::stream::Resume::Standalone => {}
            other => panic!("{other:?}"),
        }
        let (events, _) = s2.standalone.read_after(s2.standalone.unsent_cursor());
        let m: Value = serde_json::from_str(&events.last().unwrap().data).unwrap();
        assert_eq!(m["params"]["level"], "warning", "{events:?}");
        // A POST stream's cursor the relay does not know is still unknown.
        let post = SseStream::new(&s.sid, &principal.id, "b1");
        assert!(matches!(
            hub2.streams
                .resume(&post.event_id(1), &s2.sid, &principal.id, &s2.standalone),
            crate::stream::Resume::Unknown
        ));
    }

    /// Regression: events still in the write-behind queue when the relay
    /// died are not stored, yet a client may have had them live.
    #[tokio::test]
    async fn an_interrupted_stream_ends_after_events_the_store_never_got() {
        let dir = tempfile::tempdir().unwrap();
        let (storage, hub, s, principal, _) = hub_with_session(dir.path()).await;
        let st = SseStream::new(&s.sid, &principal.id, "b1");
        hub.streams.insert_durable(st.clone(), &json!(9));
        // Its priming event went to the client: the stream is stored.
        st.persist_now();
        let silent = SseStream::new(&s.sid, &principal.id, "b1");
        hub.streams.insert_durable(silent.clone(), &json!(10));
        silent.persist_now();
        for n in 1..=3 {
            st.push(
                &json!({"jsonrpc": "2.0", "method": "notifications/progress",
                            "params": {"progress": n}}),
                false,
            )
            .unwrap();
        }
        flushed(&hub).await;
        // Event 3's write was still queued when the process was killed.
        storage
            .execute_sql("DELETE FROM sse_events WHERE seq = 3", &[])
            .await;
        let hub2 = reopen(&storage).await;
        let (events, finished) = read(&hub2, &st, 3, &s);
        assert!(finished);
        assert_eq!(events.len(), 1, "{events:?}");
        let m: Value = serde_json::from_str(&events[0].data).unwrap();
        assert_eq!(m["error"]["code"], code::RELAY_RESTARTED);
        // It is stored under its number: a second restart replays it the same way.
        flushed(&hub2).await;
        let hub3 = reopen(&storage).await;
        let (again, _) = read(&hub3, &st, 3, &s);
        assert_eq!(again, events);
        // A stream that had sent nothing ends with just the error after one restart; after a
        // second, the store cannot tell whether events came before it, and says so.
        let (events, _) = read(&hub2, &silent, 0, &s);
        assert_eq!(events.len(), 1, "{events:?}");
        assert!(events[0].data.contains(&code::RELAY_RESTARTED.to_string()));
        let (events, _) = read(&hub3, &silent, 0, &s);
        assert!(
            events
                .last()
                .unwrap()
                .data
                .contains(&code::RELAY_RESTARTED.to_string())
        );
        assert!(
            events[..events.len() - 1]
                .iter()
                .all(|e| e.data.contains("not held by the relay since it restarted")),
            "{events:?}"
        );
    }
}
