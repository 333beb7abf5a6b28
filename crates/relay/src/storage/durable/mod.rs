//! Durable MCP sessions and resumable streams: what a relay restart
//! keeps of the session era.
//!
//! - the session id key ([`super::SessionStore::session_key`]), generated once per store;
//! - one [`SessionRecord`] per live session, deleted when the session ends;
//! - one row per POST SSE stream of a session ([`StreamRecord`]): while it is not finished its
//!   request is in flight (the in-flight marker a restarted relay answers with an error saying
//!   the relay restarted), and the last [`STORED_EVENTS_PER_STREAM`] events of the stream, each
//!   with its SHA-256 (a mismatch on read is [`Payload::Corrupt`], reported and never served).
//!
//! Stream rows are deleted when the stream is acknowledged (a `GET` whose `Last-Event-ID` is its
//! last event), dropped from the relay's memory (its retention or the per-bridge cap), its
//! session ends, or, by [`StoreWrite::Sweep`] and at startup, once [`RESUMABLE_RETENTION`] has
//! passed since it finished (or [`IN_FLIGHT_MAX`] since it opened, for a marker whose end was
//! never written). Writes come in batches from the relay's write-behind task
//! ([`crate::storage::writer`]), never from a request's path.

use sqlx::Row;

use crate::limits::{CALL_BUDGET_MAX, RELAY_OVERHEAD, RESUMABLE_RETENTION};

use super::{SqliteStorage, StorageError};

/// Most events of one stream kept in the store: older ones are deleted as new ones arrive (a
/// reader resuming from before them after a restart is told how many it missed).
pub const STORED_EVENTS_PER_STREAM: u64 = 16;

/// Largest non-terminal event stored, in bytes of JSON text; a larger one is delivered live
/// only. Terminal messages are bounded by
/// [`crate::limits::RESUMABLE_TERMINAL_MAX_BYTES`] instead (a larger one is stored as the
/// "too large to replay" error).
pub const STORED_EVENT_MAX_BYTES: usize = 16 * 1024;

/// How long an unfinished stream's row is kept at most, in seconds: the longest a request may
/// run, then the retention.
pub const IN_FLIGHT_MAX: i64 =
    (CALL_BUDGET_MAX.as_secs() + RELAY_OVERHEAD.as_secs() + RESUMABLE_RETENTION.as_secs()) as i64;

/// The stored text of a "not kept" marker ([`StoreWrite::Event`]).
pub const NOT_KEPT: &str = "";

const SESSION_KEY: &str = "session_key";

/// A stored MCP session: what a restarted relay needs to serve it again and to re-check it
/// against the credential that opened it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    /// The `MCP-Session-Id`.
    pub sid: String,
    /// Its bridge.
    pub bridge: String,
    /// The served server (`runtime` or an upstream name).
    pub server: String,
    /// The principal id it is bound to.
    pub principal: String,
    /// The credential that authenticated the principal (`tok_…`, `fam_…`, `anonymous`).
    pub credential: String,
    /// The principal's role (`Role::as_str`).
    pub role: String,
    /// What the relay kept of the client's `initialize` (JSON text, at most
    /// [`crate::limits::SESSION_INITIALIZE_MAX_BYTES`]).
    pub initialize: String,
    /// `notifications/initialized` was seen.
    pub initialized: bool,
    /// The daemon instance the session is open on, if any.
    pub opened_on: Option<String>,
    /// Last activity, Unix seconds (updated at most every minute).
    pub last_active: i64,
}

/// A stored event's payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// The JSON-RPC message text, as stored.
    Intact(String),
    /// The stored text does not match its SHA-256: never served.
    Corrupt,
}

/// A stored event of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    /// Its number in the stream (1 = the first message after the priming event).
    pub seq: u64,
    /// What was stored.
    pub payload: Payload,
}

/// A stored POST SSE stream of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamRecord {
    /// The stream id (the part of an SSE event id before the last `-`).
    pub id: String,
    /// Its session.
    pub sid: String,
    /// The principal that may read it.
    pub principal: String,
    /// Its bridge.
    pub bridge: String,
    /// The JSON-RPC id of the request it answers (JSON text).
    pub request_id: String,
    /// When it was opened, Unix seconds.
    pub opened_at: i64,
    /// When it finished, Unix seconds; `None` while its request is in flight.
    pub finished_at: Option<i64>,
    /// Its last event's number, once finished.
    pub last_seq: Option<u64>,
    /// The stored events, oldest first.
    pub events: Vec<StoredEvent>,
}

/// One write of the write-behind task; a batch of them is applied in one transaction
/// ([`super::SessionStore::apply`]). Times are Unix seconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreWrite {
    /// A session was created (or its record replaced).
    SessionOpened(SessionRecord),
    /// A session was opened on a daemon instance, or saw `notifications/initialized`.
    SessionBound {
        /// The session.
        sid: String,
        /// The instance it is open on.
        opened_on: Option<String>,
        /// `notifications/initialized` was seen.
        initialized: bool,
    },
    /// A session was used at `at`.
    SessionTouched {
        /// The session.
        sid: String,
        /// When.
        at: i64,
    },
    /// A session ended: its record and all its streams are deleted.
    SessionEnded {
        /// The session.
        sid: String,
    },
    /// A stream was opened for the request `request_id` (JSON text): the in-flight marker.
    StreamOpened {
        /// The stream id.
        id: String,
        /// Its session.
        sid: String,
        /// The principal that may read it.
        principal: String,
        /// Its bridge.
        bridge: String,
        /// The request's JSON-RPC id, JSON text.
        request_id: String,
        /// When.
        at: i64,
    },
    /// An event of a stream; with `terminal` the stream finished with it. Ignored when the
    /// stream has no row (its session ended, or it was dropped). Empty `data` is a "not kept"
    /// marker: the event was sent live but is not stored (too large, or the queue was full), so
    /// that a restarted relay still knows the stream's last event number and says what is
    /// missing ([`NOT_KEPT`]).
    Event {
        /// The stream id.
        stream: String,
        /// The event's number.
        seq: u64,
        /// Its JSON text.
        data: String,
        /// The stream finished with it.
        terminal: bool,
        /// When.
        at: i64,
    },
    /// A stream finished without a further message (a cancelled request); `last_seq` is its
    /// last event.
    StreamFinished {
        /// The stream id.
        stream: String,
        /// Its last event's number.
        last_seq: u64,
        /// When.
        at: i64,
    },
    /// A client resumed after event `seq`: it has every event up to it; those before it are
    /// deleted (`seq` itself is kept, it numbers what follows), and the whole stream when `seq`
    /// is its last event.
    Acknowledged {
        /// The stream id.
        stream: String,
        /// The `Last-Event-ID`'s event number.
        seq: u64,
    },
    /// Streams the relay dropped from memory (retention, per-bridge cap).
    StreamsDropped {
        /// Their ids.
        ids: Vec<String>,
    },
    /// Deletes streams past retention at `now`.
    Sweep {
        /// Now.
        now: i64,
    },
}

impl StoreWrite {
    /// What the write holds while queued for the write-behind task, in bytes: the text it
    /// carries plus 64 for the rest (the queue's byte bounds, [`crate::storage::writer`]).
    pub fn weight(&self) -> usize {
        64 + match self {
            Self::SessionOpened(r) => r.initialize.len(),
            Self::Event { data, .. } => data.len(),
            Self::StreamsDropped { ids } => ids.iter().map(String::len).sum(),
            _ => 0,
        }
    }
}

fn seq_of(v: i64) -> Result<u64, StorageError> {
    u64::try_from(v).map_err(|_| StorageError::Corrupt(format!("negative event number {v}")))
}

impl SqliteStorage {
    /// The key that binds MCP session ids to their principal ([`crate::auth::SessionKeys`]):
    /// 32 random bytes generated the first time and kept in the store from then on.
    ///
    /// # Errors
    /// Database failure; a stored key that is not 32 bytes (`Corrupt`: refused, never
    /// replaced, invariant 9).
    pub(crate) async fn session_key(&self) -> Result<[u8; 32], StorageError> {
        self.secret(SESSION_KEY, "session key").await
    }

    /// Applies `batch` in one transaction, in order.
    ///
    /// # Errors
    /// Database failure (nothing of the batch is applied).
    pub(crate) async fn apply(&self, batch: &[StoreWrite]) -> Result<(), StorageError> {
        let mut tx = self.pool.begin().await?;
        for w in batch {
            match w {
                StoreWrite::SessionOpened(r) => {
                    sqlx::query(
                        "INSERT OR REPLACE INTO mcp_sessions (sid, bridge, server, principal, credential, role, \
                         initialize, initialized, opened_on, last_active) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    )
                    .bind(&r.sid)
                    .bind(&r.bridge)
                    .bind(&r.server)
                    .bind(&r.principal)
                    .bind(&r.credential)
                    .bind(&r.role)
                    .bind(&r.initialize)
                    .bind(r.initialized)
                    .bind(&r.opened_on)
                    .bind(r.last_active)
                    .execute(&mut *tx)
                    .await?;
                }
                StoreWrite::SessionBound {
                    sid,
                    opened_on,
                    initialized,
                } => {
                    sqlx::query(
                        "UPDATE mcp_sessions SET opened_on = ?, initialized = ? WHERE sid = ?",
                    )
                    .bind(opened_on)
                    .bind(initialized)
                    .bind(sid)
                    .execute(&mut *tx)
                    .await?;
                }
                StoreWrite::SessionTouched { sid, at } => {
                    sqlx::query(
                        "UPDATE mcp_sessions SET last_active = max(last_active, ?) WHERE sid = ?",
                    )
                    .bind(at)
                    .bind(sid)
                    .execute(&mut *tx)
                    .await?;
                }
                StoreWrite::SessionEnded { sid } => {
                    sqlx::query(
                        "DELETE FROM sse_events WHERE stream IN (SELECT id FROM sse_streams WHERE sid = ?)",
                    )
                    .bind(sid)
                    .execute(&mut *tx)
                    .await?;
                    sqlx::query("DELETE FROM sse_streams WHERE sid = ?")
                        .bind(sid)
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query("DELETE FROM mcp_sessions WHERE sid = ?")
                        .bind(sid)
                        .execute(&mut *tx)
                        .await?;
                }
                StoreWrite::StreamOpened {
                    id,
                    sid,
                    principal,
                    bridge,
                    request_id,
                    at,
                } => {
                    sqlx::query(
                        "INSERT OR IGNORE INTO sse_streams (id, sid, principal, bridge, request_id, opened_at) \
                         SELECT ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM mcp_sessions WHERE sid = ?)",
                    )
                    .bind(id)
                    .bind(sid)
                    .bind(principal)
                    .bind(bridge)
                    .bind(request_id)
                    .bind(at)
                    .bind(sid)
                    .execute(&mut *tx)
                    .await?;
                }
                StoreWrite::Event {
                    stream,
                    seq,
                    data,
                    terminal,
                    at,
                } => {
                    let seq = *seq as i64;
                    sqlx::query(
                        "INSERT OR REPLACE INTO sse_events (stream, seq, data, sha256) \
                         SELECT ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM sse_streams WHERE id = ?)",
                    )
                    .bind(stream)
                    .bind(seq)
                    .bind(data)
                    .bind(crate::auth::sha256_hex(data))
                    .bind(stream)
                    .execute(&mut *tx)
                    .await?;
                    // The last rows by count, not by number: event numbers can jump (the error
                    // that ends a stream interrupted by a restart). Numbers start at 1, so up
                    // to the window's size there is nothing to delete (one statement less for
                    // the common short stream).
                    if seq > STORED_EVENTS_PER_STREAM as i64 {
                        sqlx::query(
                        "DELETE FROM sse_events WHERE stream = ?1 AND seq < (SELECT min(seq) FROM \
                         (SELECT seq FROM sse_events WHERE stream = ?1 ORDER BY seq DESC LIMIT ?2))",
                    )
                    .bind(stream)
                    .bind(STORED_EVENTS_PER_STREAM as i64)
                    .execute(&mut *tx)
                    .await?;
                    }
                    if *terminal {
                        finish(&mut tx, stream, seq, *at).await?;
                    }
                }
                StoreWrite::StreamFinished {
                    stream,
                    last_seq,
                    at,
                } => finish(&mut tx, stream, *last_seq as i64, *at).await?,
                StoreWrite::Acknowledged { stream, seq } => {
                    let seq = *seq as i64;
                    sqlx::query("DELETE FROM sse_events WHERE stream = ? AND seq < ?")
                        .bind(stream)
                        .bind(seq)
                        .execute(&mut *tx)
                        .await?;
                    let done = sqlx::query(
                        "DELETE FROM sse_streams WHERE id = ? AND last_seq IS NOT NULL AND last_seq <= ?",
                    )
                    .bind(stream)
                    .bind(seq)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                    if done > 0 {
                        delete_events(&mut tx, stream).await?;
                    }
                }
                StoreWrite::StreamsDropped { ids } => {
                    for id in ids {
                        sqlx::query("DELETE FROM sse_streams WHERE id = ?")
                            .bind(id)
                            .execute(&mut *tx)
                            .await?;
                        delete_events(&mut tx, id).await?;
                    }
                }
                StoreWrite::Sweep { now } => sweep(&mut tx, *now).await?,
            }
        }
        tx.commit().await?;
        if batch.iter().any(|w| matches!(w, StoreWrite::Sweep { .. })) {
            // What was deleted leaves the disk: with `secure_delete` the pages are overwritten,
            // and the WAL, which still holds their older copies, is emptied (best effort: a
            // reader in the way leaves it for the next sweep).
            if let Err(e) = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
                .execute(&self.pool)
                .await
            {
                tracing::debug!(error = %e, "could not truncate the relay store's WAL");
            }
        }
        Ok(())
    }

    /// What a starting relay restores: the sessions active within `idle_secs` of `now` and
    /// their streams with their events (oldest first). Deleted first: streams past retention
    /// (as [`StoreWrite::Sweep`]), sessions idle longer than `idle_secs`, and the streams of
    /// sessions that are not stored.
    ///
    /// # Errors
    /// Database failure; unreadable rows (`Corrupt`). An event whose text does not match its
    /// hash is not an error: it is returned as [`Payload::Corrupt`].
    pub(crate) async fn load_durable(
        &self,
        now: i64,
        idle_secs: i64,
    ) -> Result<(Vec<SessionRecord>, Vec<StreamRecord>), StorageError> {
        let mut tx = self.pool.begin().await?;
        sweep(&mut tx, now).await?;
        sqlx::query("DELETE FROM mcp_sessions WHERE last_active <= ?")
            .bind(now - idle_secs)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM sse_streams WHERE sid NOT IN (SELECT sid FROM mcp_sessions)")
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM sse_events WHERE stream NOT IN (SELECT id FROM sse_streams)")
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        let sessions = sqlx::query(
            "SELECT sid, bridge, server, principal, credential, role, initialize, initialized, opened_on, \
             last_active FROM mcp_sessions ORDER BY last_active, sid",
        )
        .fetch_all(&self.pool)
        .await?
        .into_iter()
        .map(|r| SessionRecord {
            sid: r.get(0),
            bridge: r.get(1),
            server: r.get(2),
            principal: r.get(3),
            credential: r.get(4),
            role: r.get(5),
            initialize: r.get(6),
            initialized: r.get(7),
            opened_on: r.get(8),
            last_active: r.get(9),
        })
        .collect();
        let mut streams: Vec<StreamRecord> = Vec::new();
        for r in sqlx::query(
            "SELECT id, sid, principal, bridge, request_id, opened_at, finished_at, last_seq \
             FROM sse_streams ORDER BY opened_at, id",
        )
        .fetch_all(&self.pool)
        .await?
        {
            streams.push(StreamRecord {
                id: r.get(0),
                sid: r.get(1),
                principal: r.get(2),
                bridge: r.get(3),
                request_id: r.get(4),
                opened_at: r.get(5),
                finished_at: r.get(6),
                last_seq: r.get::<Option<i64>, _>(7).map(seq_of).transpose()?,
                events: Vec::new(),
            });
        }
        let index: std::collections::HashMap<String, usize> = streams
            .iter()
            .enumerate()
            .map(|(i, s)| (s.id.clone(), i))
            .collect();
        for r in
            sqlx::query("SELECT stream, seq, data, sha256 FROM sse_events ORDER BY stream, seq")
                .fetch_all(&self.pool)
                .await?
        {
            let stream: String = r.get(0);
            let data: String = r.get(2);
            let hash: String = r.get(3);
            let intact: bool = subtle::ConstantTimeEq::ct_eq(
                crate::auth::sha256_hex(&data).as_bytes(),
                hash.as_bytes(),
            )
            .into();
            if let Some(&i) = index.get(&stream) {
                streams[i].events.push(StoredEvent {
                    seq: seq_of(r.get(1))?,
                    payload: if intact {
                        Payload::Intact(data)
                    } else {
                        Payload::Corrupt
                    },
                });
            }
        }
        Ok((sessions, streams))
    }
}

async fn finish(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    stream: &str,
    last_seq: i64,
    at: i64,
) -> Result<(), StorageError> {
    sqlx::query(
        "UPDATE sse_streams SET finished_at = ?, last_seq = ? WHERE id = ? AND finished_at IS NULL",
    )
    .bind(at)
    .bind(last_seq)
    .bind(stream)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

async fn delete_events(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    stream: &str,
) -> Result<(), StorageError> {
    sqlx::query("DELETE FROM sse_events WHERE stream = ?")
        .bind(stream)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

async fn sweep(tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>, now: i64) -> Result<(), StorageError> {
    let expired = "SELECT id FROM sse_streams WHERE finished_at <= ?1 OR (finished_at IS NULL AND opened_at <= ?2)";
    let retention = RESUMABLE_RETENTION.as_secs() as i64;
    let events = format!("DELETE FROM sse_events WHERE stream IN ({expired})");
    let streams = format!("DELETE FROM sse_streams WHERE id IN ({expired})");
    sqlx::query(&events)
        .bind(now - retention)
        .bind(now - IN_FLIGHT_MAX)
        .execute(&mut **tx)
        .await?;
    sqlx::query(&streams)
        .bind(now - retention)
        .bind(now - IN_FLIGHT_MAX)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests;
