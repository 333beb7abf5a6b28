//! Process sessions: processes that outlive the call that started them, addressed by id.
//!
//! At most [`PROCESS_SESSIONS_MAX`] sessions run at once. An exited session stays readable for
//! [`SESSION_RETENTION_AFTER_EXIT`], but at most [`EXITED_SESSIONS_MAX`] exited sessions holding
//! at most [`EXITED_SESSIONS_OUTPUT_MAX_BYTES`] of output are kept: when a session exits, the
//! exited sessions that ended first — of the principal holding the most of them, so that one
//! caller's flood pushes out its own — are discarded until the rest fit (running ones never are),
//! so memory stays bounded however many short sessions are started. The ids of the last
//! [`DISCARDED_SESSIONS_REMEMBERED`] discarded sessions are remembered, so their owner is told
//! why one is gone. A session belongs to the principal that started it: another principal gets
//! `not_found` for it, exactly as for an id that never existed. A session made from a call that
//! outlived its foreground budget keeps that call's deadline. [`Sessions::shutdown`] (runtime
//! shutdown) terminates every session.

use std::{
    collections::{HashMap, VecDeque},
    sync::{
        Arc, Weak,
        atomic::{AtomicBool, Ordering},
    },
};

use lock::Lock;

use tokio::time::Instant;

use crate::limits::{
    DISCARDED_SESSIONS_REMEMBERED, EXITED_SESSIONS_MAX, EXITED_SESSIONS_OUTPUT_MAX_BYTES,
    PROCESS_OUTPUT_MAX_BYTES, PROCESS_SESSIONS_MAX, SESSION_OUTPUT_RETAINED_BYTES,
    SESSION_RETENTION_AFTER_EXIT,
};

use crate::{policy::Principal, tools::process::engine::Proc};

// One session with full output always fits, so the newest exited session is never discarded.
const _: () = assert!(
    2 * (SESSION_OUTPUT_RETAINED_BYTES + PROCESS_OUTPUT_MAX_BYTES / 2)
        <= EXITED_SESSIONS_OUTPUT_MAX_BYTES
);

/// One session.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) id: String,
    pub(crate) owner: Principal,
    pub(crate) proc: Arc<Proc>,
    /// The command as started, for listings.
    pub(crate) command: Vec<String>,
    /// Wall-clock start, RFC 3339.
    pub(crate) started_at: String,
    /// The inherited deadline passed and the tree was terminated.
    pub(crate) timed_out: AtomicBool,
    finished: Lock<Option<Finished>>,
}

/// When a session's process and tree finished, and the output bytes it still holds.
#[derive(Debug, Clone, Copy)]
struct Finished {
    at: Instant,
    bytes: usize,
}

impl Session {
    fn finished(&self) -> Option<Finished> {
        *self.finished.lock()
    }
}

/// The session table of one runtime.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    /// Shared with each session's exit watcher, which enforces the bounds when it exits.
    table: Arc<Lock<Table>>,
}

#[derive(Debug, Default)]
struct Table {
    map: HashMap<String, Arc<Session>>,
    /// Sessions discarded (expired or evicted), oldest first, at most
    /// [`DISCARDED_SESSIONS_REMEMBERED`].
    discarded: VecDeque<Discarded>,
}

#[derive(Debug)]
struct Discarded {
    id: String,
    owner: Principal,
    why: Missing,
}

/// The table is full.
#[derive(Debug)]
pub(crate) struct Full;

/// Why [`Sessions::get`] found no session for a caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Missing {
    /// No such id, one of another principal, or one discarded too long ago to be remembered.
    Unknown,
    /// It exited more than [`SESSION_RETENTION_AFTER_EXIT`] ago and was discarded.
    Expired,
    /// It had exited and was discarded to keep exited sessions within [`EXITED_SESSIONS_MAX`]
    /// and [`EXITED_SESSIONS_OUTPUT_MAX_BYTES`].
    Evicted,
}

impl Sessions {
    /// Registers `proc` as a session of `owner`; with `deadline`, the tree is terminated then.
    /// When the process has finished, its output buffers give back spare capacity and the
    /// exited-session bounds are enforced (which may discard older exited sessions).
    ///
    /// # Errors
    /// [`Full`] when [`PROCESS_SESSIONS_MAX`] sessions are running and `proc` still runs.
    pub(crate) fn insert(
        &self,
        owner: Principal,
        proc: Arc<Proc>,
        command: Vec<String>,
        deadline: Option<Instant>,
    ) -> Result<Arc<Session>, Full> {
        let session = {
            let mut table = self.table.lock();
            table.trim();
            let running = table
                .map
                .values()
                .filter(|s| s.proc.exit().is_none())
                .count();
            // A finished process (a one-shot result's output kept readable) takes no slot.
            if running >= PROCESS_SESSIONS_MAX && proc.exit().is_none() {
                return Err(Full);
            }
            let id = format!("proc-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
            let session = Arc::new(Session {
                id: id.clone(),
                owner,
                proc,
                command,
                started_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                timed_out: AtomicBool::new(false),
                finished: Lock::new(None),
            });
            table.map.insert(id, session.clone());
            session
        };
        let weak = Arc::downgrade(&session);
        let table: Weak<Lock<Table>> = Arc::downgrade(&self.table);
        let proc = session.proc.clone();
        tokio::spawn(async move {
            match deadline {
                Some(d) => {
                    tokio::select! {
                        _ = proc.wait() => {}
                        _ = tokio::time::sleep_until(d) => {
                            if let Some(s) = weak.upgrade() {
                                s.timed_out.store(true, Ordering::Relaxed);
                            }
                            proc.terminate(false).await;
                        }
                    }
                }
                None => {
                    proc.wait().await;
                }
            }
            // The pumps are done once the exit is published: the output is final.
            let bytes = proc.stdout.shrink() + proc.stderr.shrink();
            if let Some(s) = weak.upgrade() {
                let mut f = s.finished.lock();
                *f = Some(Finished {
                    at: Instant::now(),
                    bytes,
                });
            }
            if let Some(table) = table.upgrade() {
                let mut t = table.lock();
                t.trim();
            }
        });
        Ok(session)
    }

    /// The session `id` if `owner` started it and it is still kept.
    ///
    /// # Errors
    /// Why there is none for `owner`: [`Missing::Expired`] or [`Missing::Evicted`] when `owner`'s
    /// session was discarded recently enough to be remembered, else [`Missing::Unknown`] (also
    /// for another principal's session, kept or not).
    pub(crate) fn get(&self, id: &str, owner: &Principal) -> Result<Arc<Session>, Missing> {
        let mut table = self.table.lock();
        table.trim();
        if let Some(s) = table.map.get(id).filter(|s| &s.owner == owner) {
            return Ok(s.clone());
        }
        Err(table
            .discarded
            .iter()
            .rev()
            .find(|d| d.id == id && &d.owner == owner)
            .map_or(Missing::Unknown, |d| d.why))
    }

    /// `owner`'s sessions, oldest first.
    pub(crate) fn list(&self, owner: &Principal) -> Vec<Arc<Session>> {
        let mut table = self.table.lock();
        table.trim();
        let mut v: Vec<_> = table
            .map
            .values()
            .filter(|s| &s.owner == owner)
            .cloned()
            .collect();
        v.sort_by_key(|s| s.proc.started());
        v
    }

    /// Sessions kept: running, or exited and still readable.
    pub(crate) fn kept(&self) -> usize {
        let mut t = self.table.lock();
        t.trim();
        t.map.len()
    }

    /// Sessions still running.
    pub(crate) fn running(&self) -> usize {
        let t = self.table.lock();
        t.map.values().filter(|s| s.proc.exit().is_none()).count()
    }

    /// Terminates every session (SIGTERM, grace, SIGKILL) and forgets them.
    pub(crate) async fn shutdown(&self) {
        let all: Vec<Arc<Session>> = self.table.lock().map.drain().map(|(_, s)| s).collect();
        let mut tasks = Vec::new();
        for s in all {
            tasks.push(tokio::spawn(async move {
                s.proc.terminate(false).await;
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
    }
}

impl Table {
    /// Discards exited sessions past their retention, then, from the principal holding the most,
    /// those that ended first, until at most [`EXITED_SESSIONS_MAX`] holding at most
    /// [`EXITED_SESSIONS_OUTPUT_MAX_BYTES`] remain.
    fn trim(&mut self) {
        let now = Instant::now();
        let mut exited: Vec<(Instant, Instant, String, usize)> = Vec::new();
        let mut expired = Vec::new();
        for s in self.map.values() {
            if let Some(f) = s.finished() {
                if now.duration_since(f.at) >= SESSION_RETENTION_AFTER_EXIT {
                    expired.push(s.id.clone());
                } else {
                    exited.push((f.at, s.proc.started(), s.id.clone(), f.bytes));
                }
            }
        }
        for id in expired {
            self.discard(&id, Missing::Expired);
        }
        let mut count = exited.len();
        let mut bytes: usize = exited.iter().map(|e| e.3).sum();
        if count <= EXITED_SESSIONS_MAX && bytes <= EXITED_SESSIONS_OUTPUT_MAX_BYTES {
            return;
        }
        // From the principal holding the most exited sessions (so one that floods them pushes
        // out its own, not another's), the one that ended first goes first; the start breaks
        // ties between equal exit instants.
        exited.sort_unstable_by_key(|e| (e.0, e.1));
        while count > EXITED_SESSIONS_MAX || bytes > EXITED_SESSIONS_OUTPUT_MAX_BYTES {
            let mut held_by: HashMap<&Principal, usize> = HashMap::new();
            for (_, _, id, _) in &exited {
                if let Some(s) = self.map.get(id) {
                    *held_by.entry(&s.owner).or_insert(0) += 1;
                }
            }
            let Some(most) = held_by.values().copied().max() else {
                break;
            };
            let Some(pos) = exited.iter().position(|(_, _, id, _)| {
                self.map
                    .get(id)
                    .is_some_and(|s| held_by.get(&s.owner) == Some(&most))
            }) else {
                break;
            };
            let (_, _, id, held) = exited.remove(pos);
            self.discard(&id, Missing::Evicted);
            count -= 1;
            bytes -= held;
        }
    }

    fn discard(&mut self, id: &str, why: Missing) {
        let Some(s) = self.map.remove(id) else {
            return;
        };
        if self.discarded.len() >= DISCARDED_SESSIONS_REMEMBERED {
            self.discarded.pop_front();
        }
        self.discarded.push_back(Discarded {
            id: s.id.clone(),
            owner: s.owner.clone(),
            why,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::process::engine::{Proc, Spawn};

    #[tokio::test]
    async fn a_session_is_invisible_to_other_principals() {
        let spec = Spawn {
            argv: vec!["sleep".into(), "30".into()],
            cwd: std::env::temp_dir(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            pty: None,
        };
        let proc = Proc::spawn(&spec, None, false).unwrap();
        let sessions = Sessions::default();
        let alice = Principal::named("alice");
        let s = sessions
            .insert(alice.clone(), proc, vec!["sleep".into()], None)
            .unwrap();
        assert!(sessions.get(&s.id, &alice).is_ok());
        assert_eq!(
            sessions.get(&s.id, &Principal::named("bob")).err(),
            Some(Missing::Unknown)
        );
        assert!(sessions.list(&Principal::named("bob")).is_empty());
        sessions.shutdown().await;
        assert_eq!(sessions.running(), 0);
    }

    /// Starts `true` as a session of `owner` and waits until the table has seen it exit.
    async fn exited(sessions: &Sessions, owner: &Principal) -> String {
        let spec = Spawn {
            argv: vec!["true".into()],
            cwd: std::env::temp_dir(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            pty: None,
        };
        let proc = Proc::spawn(&spec, None, false).unwrap();
        let s = sessions
            .insert(owner.clone(), proc, vec!["true".into()], None)
            .unwrap();
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        while s.finished().is_none() {
            assert!(Instant::now() < deadline, "{} never exited", s.id);
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        s.id.clone()
    }

    /// The exited sessions one principal floods in push out its own first, not another
    /// principal's.
    #[tokio::test]
    async fn a_principal_flooding_exited_sessions_pushes_out_its_own() {
        let sessions = Sessions::default();
        let alice = Principal::named("alice");
        let bob = Principal::named("bob");
        let kept: Vec<String> = vec![
            exited(&sessions, &alice).await,
            exited(&sessions, &alice).await,
        ];
        for _ in 0..EXITED_SESSIONS_MAX + 8 {
            exited(&sessions, &bob).await;
        }
        for id in &kept {
            assert!(
                sessions.get(id, &alice).is_ok(),
                "{id} of alice was pushed out by bob's"
            );
        }
        assert_eq!(sessions.list(&bob).len(), EXITED_SESSIONS_MAX - 2);
    }

    #[tokio::test]
    async fn the_exited_session_that_ended_first_is_discarded_and_only_its_owner_is_told() {
        let sessions = Sessions::default();
        let alice = Principal::named("alice");
        let bob = Principal::named("bob");
        let first = exited(&sessions, &alice).await;
        let mut ids = vec![first.clone()];
        for i in 0..EXITED_SESSIONS_MAX {
            let owner = if i % 2 == 0 { &bob } else { &alice };
            ids.push(exited(&sessions, owner).await);
        }
        assert_eq!(sessions.get(&first, &alice).err(), Some(Missing::Evicted));
        assert_eq!(sessions.get(&first, &bob).err(), Some(Missing::Unknown));
        assert_eq!(
            sessions.list(&alice).len() + sessions.list(&bob).len(),
            EXITED_SESSIONS_MAX
        );
        assert!(sessions.get(&ids[1], &bob).is_ok());
        assert_eq!(
            sessions.get("proc-never", &alice).err(),
            Some(Missing::Unknown)
        );
    }
}
