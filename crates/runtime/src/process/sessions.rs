//! Process sessions: processes that outlive the call that started them, addressed by id.
//!
//! At most [`PROCESS_SESSIONS_MAX`] sessions run at once; an exited session stays readable for
//! [`SESSION_RETENTION_AFTER_EXIT`]. A session belongs to the principal that started it: another
//! principal gets `not_found` for it, exactly as for an id that never existed. A session made from
//! a call that outlived its foreground budget keeps that call's deadline. [`Sessions::shutdown`]
//! (runtime shutdown) terminates every session.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use tokio::time::Instant;

use protocol::limits::{PROCESS_SESSIONS_MAX, SESSION_RETENTION_AFTER_EXIT};

use crate::{context::Principal, process::Proc};

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
    finished_at: Mutex<Option<Instant>>,
}

/// The session table of one runtime.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    map: Mutex<HashMap<String, Arc<Session>>>,
}

/// The table is full.
#[derive(Debug)]
pub(crate) struct Full;

impl Sessions {
    /// Registers `proc` as a session of `owner`; with `deadline`, the tree is terminated then.
    ///
    /// # Errors
    /// [`Full`] when [`PROCESS_SESSIONS_MAX`] sessions are running.
    pub(crate) fn insert(
        &self,
        owner: Principal,
        proc: Arc<Proc>,
        command: Vec<String>,
        deadline: Option<Instant>,
    ) -> Result<Arc<Session>, Full> {
        let session = {
            let mut map = self.map.lock().map_err(|_| Full)?;
            purge(&mut map);
            let running = map.values().filter(|s| s.proc.exit().is_none()).count();
            if running >= PROCESS_SESSIONS_MAX {
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
                finished_at: Mutex::new(None),
            });
            map.insert(id, session.clone());
            session
        };
        let weak = Arc::downgrade(&session);
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
            if let Some(s) = weak.upgrade()
                && let Ok(mut f) = s.finished_at.lock()
            {
                *f = Some(Instant::now());
            }
        });
        Ok(session)
    }

    /// The session `id` if `owner` started it and it has not expired.
    pub(crate) fn get(&self, id: &str, owner: &Principal) -> Option<Arc<Session>> {
        let mut map = self.map.lock().ok()?;
        purge(&mut map);
        map.get(id).filter(|s| &s.owner == owner).cloned()
    }

    /// `owner`'s sessions, oldest first.
    pub(crate) fn list(&self, owner: &Principal) -> Vec<Arc<Session>> {
        let Ok(mut map) = self.map.lock() else {
            return Vec::new();
        };
        purge(&mut map);
        let mut v: Vec<_> = map
            .values()
            .filter(|s| &s.owner == owner)
            .cloned()
            .collect();
        v.sort_by_key(|s| s.proc.started());
        v
    }

    /// Sessions still running.
    pub(crate) fn running(&self) -> usize {
        self.map
            .lock()
            .map(|m| m.values().filter(|s| s.proc.exit().is_none()).count())
            .unwrap_or(0)
    }

    /// Terminates every session (SIGTERM, grace, SIGKILL) and forgets them.
    pub(crate) async fn shutdown(&self) {
        let all: Vec<Arc<Session>> = match self.map.lock() {
            Ok(mut m) => m.drain().map(|(_, s)| s).collect(),
            Err(_) => return,
        };
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

fn purge(map: &mut HashMap<String, Arc<Session>>) {
    let now = Instant::now();
    map.retain(|_, s| {
        s.finished_at
            .lock()
            .ok()
            .and_then(|f| *f)
            .is_none_or(|t| now.duration_since(t) < SESSION_RETENTION_AFTER_EXIT)
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::{Proc, Spawn};

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
        assert!(sessions.get(&s.id, &alice).is_some());
        assert!(sessions.get(&s.id, &Principal::named("bob")).is_none());
        assert!(sessions.list(&Principal::named("bob")).is_empty());
        sessions.shutdown().await;
        assert_eq!(sessions.running(), 0);
    }
}
