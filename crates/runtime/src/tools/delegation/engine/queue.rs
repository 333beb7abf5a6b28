//! The queue pump and this server's runs: a queued request starts when the limits counted over
//! every live server allow it; receipts are updated and readers woken; at shutdown queued
//! requests fail unsent and runs end as `server_stopped`.

use std::collections::HashMap;

use tokio_util::sync::CancellationToken;

use crate::{limits::DELEGATIONS_RUNNING_MAX, limits::DELEGATIONS_RUNNING_PER_AGENT_MAX};

use super::{
    CANCEL_WAIT, Manager, Pending,
    agents::Agent,
    off_thread, run,
    store::{self, DelegationStatus, DeliveryState, Entry, Receipt, now_rfc3339},
    store_error,
};

impl Manager {
    /// Ends this server's delegations because the process ends: queued ones become
    /// `failed`/`not_sent`, running ones have their trees terminated and become
    /// `failed`/`sent` with diagnostic `server_stopped` (the agent was stopped before it
    /// answered; what it changed so far stays). Waits for the runs to be recorded (bounded).
    pub async fn shutdown(&self) {
        self.closing.cancel();
        let queued: Vec<Pending> = std::mem::take(&mut self.lock_local().queue);
        if !queued.is_empty() {
            let s = self.store.clone();
            let _ = off_thread(move || {
                let _lock = s.lock().map_err(|e| store_error(&e))?;
                for p in queued {
                    if let Some(Entry::Ok(mut r)) = s.load(&p.request_id)
                        && r.receipt.status == DelegationStatus::Queued
                    {
                        r.receipt.end(
                            DelegationStatus::Failed,
                            DeliveryState::NotSent,
                            Some((
                                "server_stopped",
                                "the server stopped before it started; nothing ran".into(),
                            )),
                        );
                        let _ = s.write(&r);
                    }
                }
                Ok(())
            })
            .await;
        }
        self.tasks.close();
        let _ = tokio::time::timeout(CANCEL_WAIT, self.tasks.wait()).await;
    }

    /// Starts queued requests of this server while slots are free (counted over every live
    /// server), oldest first; a request cancelled through another server's marker ends here.
    pub(super) async fn pump_queue(&self) {
        if self.closing.is_cancelled() || self.lock_local().queue.is_empty() {
            return;
        }
        let s = self.store.clone();
        let local = self.local.clone();
        let closing = self.closing.clone();
        let started = off_thread(move || {
            let _lock = s.lock().map_err(|e| store_error(&e))?;
            let entries = s.all_settled();
            let mut running = 0;
            let mut per_agent: HashMap<Agent, usize> = HashMap::new();
            for e in &entries {
                if let Entry::Ok(r) = e
                    && r.receipt.status == DelegationStatus::Running
                {
                    running += 1;
                    *per_agent.entry(r.receipt.agent).or_default() += 1;
                }
            }
            let mut l = local.lock();
            let mut started = Vec::new();
            let mut i = 0;
            while i < l.queue.len() {
                let id = l.queue[i].request_id.clone();
                let agent = l.queue[i].agent;
                let Some(Entry::Ok(mut r)) = s.load(&id) else {
                    l.queue.remove(i);
                    continue;
                };
                if r.receipt.status != DelegationStatus::Queued {
                    l.queue.remove(i);
                    continue;
                }
                if s.cancel_marker(&id).exists() {
                    let _ = std::fs::remove_file(s.cancel_marker(&id));
                    r.receipt.end(
                        DelegationStatus::Failed,
                        DeliveryState::NotSent,
                        Some((
                            "cancelled",
                            "cancelled before it started; nothing ran".into(),
                        )),
                    );
                    let _ = s.write(&r);
                    l.queue.remove(i);
                    continue;
                }
                let agent_running = per_agent.get(&agent).copied().unwrap_or(0);
                if running >= DELEGATIONS_RUNNING_MAX {
                    break;
                }
                if agent_running >= DELEGATIONS_RUNNING_PER_AGENT_MAX {
                    i += 1;
                    continue;
                }
                r.receipt.status = DelegationStatus::Running;
                // Until the run records whether the agent was started (M1: never `not_sent`
                // once it may have been).
                r.receipt.delivery_state = DeliveryState::Unknown;
                r.receipt.started_at = Some(now_rfc3339());
                r.server = store::this_server();
                if let Err(e) = s.write(&r) {
                    tracing::warn!(error = %e, "cannot start a queued delegation");
                    i += 1;
                    continue;
                }
                running += 1;
                *per_agent.entry(agent).or_default() += 1;
                let p = l.queue.remove(i);
                let token = closing.child_token();
                l.running.insert(p.request_id.clone(), token.clone());
                started.push((p, token));
            }
            Ok(started)
        })
        .await;
        match started {
            Ok(started) => {
                if !started.is_empty() {
                    self.bump();
                }
                for (p, token) in started {
                    self.spawn_run(p, token);
                }
            }
            Err(e) => tracing::warn!(error = %e.message(), "the delegation queue cannot move"),
        }
    }

    pub(super) fn spawn_run(&self, p: Pending, token: CancellationToken) {
        let Some(me) = self.me.upgrade() else { return };
        self.tasks.spawn(async move {
            let id = p.request_id.clone();
            run::run(&me, p, token).await;
            me.lock_local().running.remove(&id);
            me.bump();
            me.pump.notify_one();
        });
    }

    /// Writes `f`'s change of receipt `id` under the lock (a receipt already terminal is left
    /// as it is: a run never overwrites the restart rule or a cancellation recorded first).
    pub(super) async fn update(&self, id: &str, f: impl FnOnce(&mut Receipt) + Send + 'static) {
        let s = self.store.clone();
        let i = id.to_owned();
        let r = off_thread(move || {
            let _lock = s.lock().map_err(|e| store_error(&e))?;
            if let Some(Entry::Ok(mut r)) = s.load(&i)
                && !r.receipt.status.is_terminal()
            {
                f(&mut r.receipt);
                s.write(&r).map_err(|e| store_error(&e))?;
            }
            Ok(())
        })
        .await;
        if let Err(e) = r {
            tracing::warn!(error = %e.message(), "cannot record a delegation's progress");
        }
        self.bump();
    }
}
