//! Workers coming and going: an exit (requests in flight answered as unknown, a restart with
//! backoff), a candidate started for an upgrade or a recovery, reloads and version probes, and
//! the 250 ms tick (late starts, due restarts, a changed binary, retired workers).

use serde_json::json;
use tokio::time::Instant;

use crate::limits::{
    RETIRED_WORKER_GRACE, RETIRED_WORKER_POLL, WORKER_HEALTHY_AFTER, WORKER_RESTART_BACKOFF_MAX,
    WORKER_RESTART_BACKOFF_MIN, WORKER_RESTARTS_MAX, WORKER_START_TIMEOUT,
};
use protocol::limits::UPGRADE_CHECK_INTERVAL;

use super::{
    ENDED_BY_EXIT, ENDED_BY_UPGRADE, Purpose, Recovery, Role, Service, Start, State, Step,
    modern_meta, now_utc, tools_list_request,
};
use crate::{
    binary::FileId,
    message::{self},
    shared::{Out, Probe},
};

impl State {
    /// A worker exited: answers its requests in flight, and restarts it when it was the active
    /// one.
    pub(crate) fn exited(&mut self, generation: u64, how: &str) -> Vec<Out> {
        let mut outs = Vec::new();
        let Some(slot) = self.workers.remove(&generation) else {
            return outs;
        };
        for (k, f) in self.in_flight.end_where(|_, f| f.generation == generation) {
            // An open subscription stays open: the supervisor serves it from now on.
            if f.method == "subscriptions/listen" && self.listens.contains_key(&k) {
                continue;
            }
            outs.push(Out::Client(message::outcome_unknown(&f.id, how)));
        }
        if self.stopping {
            return outs;
        }
        match slot.role {
            Role::Retired { .. } => {
                tracing::info!(
                    generation,
                    pid = slot.worker.pid,
                    "the replaced worker ended ({how})"
                );
                self.ended.insert(generation, ENDED_BY_UPGRADE);
            }
            Role::Starting(start) => {
                let why = format!("it exited ({how}) before it was ready");
                self.after_start_failure(start.purpose, start.file, &why, &mut outs);
            }
            Role::Active => {
                tracing::warn!(
                    generation,
                    pid = slot.worker.pid,
                    "the server worker exited unexpectedly ({how}); restarting it"
                );
                self.ended.insert(generation, ENDED_BY_EXIT);
                self.last_failure = Some(format!("{}: the worker exited ({how})", now_utc()));
                // Restarts count since the last healthy worker (one that served long enough).
                if self.active_since.elapsed() >= WORKER_HEALTHY_AFTER {
                    self.recovery.attempts = 0;
                }
                self.service = Service::Waiting;
                self.schedule_recovery(&mut outs);
            }
        }
        outs
    }

    pub(crate) fn schedule_recovery(&mut self, outs: &mut Vec<Out>) {
        if self.recovery.attempts >= WORKER_RESTARTS_MAX {
            let reason = format!(
                "{WORKER_RESTARTS_MAX} restarts failed; last: {}",
                self.last_failure.as_deref().unwrap_or("unknown")
            );
            tracing::error!("{reason}; requests are refused until `machine-mcp reload`");
            self.service = Service::Failed(reason.clone());
            while let Some(q) = self.queue.pop_front() {
                if let Some(id) = q.id {
                    outs.push(Out::Client(message::not_sent(
                        &id,
                        &format!(
                            "the server worker could not be restarted ({reason}); `machine-mcp \
                             reload` starts it again"
                        ),
                        false,
                    )));
                }
            }
            self.queued_bytes = 0;
            return;
        }
        let backoff = WORKER_RESTART_BACKOFF_MIN
            .saturating_mul(1 << self.recovery.attempts.min(16))
            .min(WORKER_RESTART_BACKOFF_MAX);
        self.recovery.next_at = Some(Instant::now() + backoff);
    }

    /// A starting worker that is still running failed a step: stop it and go on as
    /// [`Self::after_start_failure`] says.
    pub(crate) fn start_failed(&mut self, generation: u64, why: &str) -> Vec<Out> {
        let mut outs = Vec::new();
        if let Some(slot) = self.workers.remove(&generation) {
            slot.worker.kill();
            if let Role::Starting(start) = slot.role {
                self.after_start_failure(start.purpose, start.file, why, &mut outs);
            }
        }
        outs
    }

    pub(crate) fn after_start_failure(
        &mut self,
        purpose: Purpose,
        file: Option<FileId>,
        why: &str,
        outs: &mut Vec<Out>,
    ) {
        let line = format!("{}: a new worker failed: {why}", now_utc());
        match purpose {
            Purpose::Upgrade => {
                tracing::warn!("reload failed, the current worker keeps serving: {why}");
                self.rejected_file = file.or(self.rejected_file);
                self.last_failure = Some(line);
            }
            Purpose::Recovery => {
                tracing::warn!("restart failed: {why}");
                self.last_failure = Some(line);
                self.schedule_recovery(outs);
            }
        }
    }

    /// Starts a worker that replaces the active one (`Upgrade`) or the one that exited
    /// (`Recovery`), and sends it the client's `initialize` (or, for a client that never sent
    /// one, its `tools/list`).
    pub(crate) fn start_candidate(
        &mut self,
        purpose: Purpose,
        version: String,
        file: Option<FileId>,
    ) -> Vec<Out> {
        let mut outs = Vec::new();
        let generation = match self.spawn(version, purpose) {
            Ok(g) => g,
            Err(e) => {
                let why = format!("it could not be started: {e}");
                self.after_start_failure(purpose, file, &why, &mut outs);
                return outs;
            }
        };
        let id = self.own_id();
        let (step, req) = match &self.client_init {
            Some(params) => (
                Step::Initializing(id.clone()),
                json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": params})
                    .to_string()
                    .into_bytes(),
            ),
            // A client that has not initialized yet may still do so: a 2026-07-28 request other
            // than `server/discover` would make the worker serve this connection in that era
            // only. `server/discover` proves the worker answers without that.
            None if self.modern_client => {
                (Step::Listing(id.clone()), tools_list_request(&id, false))
            }
            None => (
                Step::Listing(id.clone()),
                json!({"jsonrpc": "2.0", "id": id, "method": "server/discover",
                    "params": {"_meta": modern_meta()}})
                .to_string()
                .into_bytes(),
            ),
        };
        if let Some(slot) = self.workers.get_mut(&generation) {
            slot.role = Role::Starting(Start {
                purpose,
                step,
                deadline: Instant::now() + WORKER_START_TIMEOUT,
                file,
            });
        }
        outs.extend(self.to_worker(generation, req, None));
        outs
    }

    /// Asks the active worker for its tool list once the client's handshake is done (its
    /// `initialize` answered, then its `notifications/initialized`), so an upgrade can tell
    /// whether the list changed. A client of the 2026-07-28 era gets no list notifications.
    pub(crate) fn record_catalog(&mut self, outs: &mut Vec<Out>) {
        let Some(g) = self.active() else { return };
        if self.catalog.is_some() || self.catalog_probe.is_some() {
            return;
        }
        if !self.handshake && !self.modern_client {
            return;
        }
        let id = self.own_id();
        let req = tools_list_request(&id, self.handshake);
        self.catalog_probe = Some(id);
        outs.extend(self.to_worker(g, req, None));
    }

    // === reloads and timers ===

    /// Reloads on request: a new worker from the binary now at the path, or, after the
    /// restarts ran out, a fresh start of them.
    pub(crate) fn reload(&mut self, why: &'static str) -> Vec<Out> {
        tracing::info!("reload requested ({why})");
        if matches!(self.service, Service::Failed(_)) {
            self.recovery = Recovery {
                attempts: 0,
                next_at: Some(Instant::now()),
            };
            self.service = Service::Waiting;
            return Vec::new();
        }
        self.rejected_file = None;
        self.probe(Purpose::Upgrade, why)
    }

    /// A `--version` probe off the routing threads; [`Self::probed`] goes on with a candidate.
    pub(crate) fn probe(&mut self, purpose: Purpose, why: &'static str) -> Vec<Out> {
        if self.probing || self.starting() {
            return Vec::new();
        }
        self.probing = true;
        vec![Out::Probe(purpose, why)]
    }

    pub(crate) fn probed(&mut self, p: Probe) -> Vec<Out> {
        self.probing = false;
        match (p.purpose, p.result) {
            (Purpose::Upgrade, Ok(version)) if self.active().is_some() => {
                tracing::info!(version, "starting a new worker ({})", p.why);
                self.start_candidate(Purpose::Upgrade, version, p.file)
            }
            (Purpose::Upgrade, Ok(_)) => Vec::new(),
            (Purpose::Upgrade, Err(why)) => {
                tracing::warn!("not reloading ({}): {why}", p.why);
                self.rejected_file = p.file;
                self.last_failure = Some(format!("{}: {why}", now_utc()));
                Vec::new()
            }
            (Purpose::Recovery, Ok(version)) => {
                self.start_candidate(Purpose::Recovery, version, p.file)
            }
            (Purpose::Recovery, Err(why)) => {
                let mut outs = Vec::new();
                self.after_start_failure(Purpose::Recovery, p.file, &why, &mut outs);
                outs
            }
        }
    }

    pub(crate) fn starting(&self) -> bool {
        self.workers
            .values()
            .any(|s| matches!(s.role, Role::Starting(_)))
    }

    pub(crate) fn on_tick(&mut self) -> Vec<Out> {
        let mut outs = Vec::new();
        let now = Instant::now();
        // Starts that take too long.
        let late: Vec<u64> = self
            .workers
            .iter()
            .filter(|(_, s)| matches!(&s.role, Role::Starting(st) if st.deadline <= now))
            .map(|(g, _)| *g)
            .collect();
        for g in late {
            let why = format!(
                "it did not answer within {} s",
                WORKER_START_TIMEOUT.as_secs()
            );
            outs.extend(self.start_failed(g, &why));
        }
        // A restart that is due.
        if let Some(at) = self.recovery.next_at
            && at <= now
            && matches!(self.service, Service::Waiting)
            && !self.starting()
        {
            self.recovery.next_at = None;
            self.recovery.attempts += 1;
            outs.extend(self.probe(Purpose::Recovery, "restart"));
        }
        // The binary changed (not looked at while automatic swap is off).
        if self.config.automatic_swap_off.is_none()
            && now.duration_since(self.last_check) >= UPGRADE_CHECK_INTERVAL
        {
            self.last_check = now;
            let current = self
                .active()
                .and_then(|g| self.workers.get(&g))
                .and_then(|s| s.file);
            let file = FileId::of(&self.config.binary);
            if file.is_none() && !self.binary_missing {
                self.binary_missing = true;
                let why = format!(
                    "the binary {} is gone (deleted, or a link to nothing): no new worker can start \
                     until it is back",
                    self.config.binary.display()
                );
                tracing::warn!("{why}");
                self.last_failure = Some(format!("{}: {why}", now_utc()));
            } else if file.is_some() {
                self.binary_missing = false;
            }
            let changed = match (&file, &current) {
                (Some(f), Some(c)) => !f.same_binary(c),
                _ => false,
            };
            if changed && file != self.rejected_file && !self.starting() {
                outs.extend(self.probe(Purpose::Upgrade, "the binary changed"));
            }
        }
        // Replaced workers: ask whether they still have work; stop them after the grace.
        let retired: Vec<(u64, Instant, Instant)> = self
            .workers
            .iter()
            .filter_map(|(g, s)| match s.role {
                Role::Retired { since, last_poll } => Some((*g, since, last_poll)),
                _ => None,
            })
            .collect();
        for (g, since, last_poll) in retired {
            if since.elapsed() >= RETIRED_WORKER_GRACE {
                tracing::info!(
                    generation = g,
                    "the replaced worker's grace ended; stopping it"
                );
                if let Some(s) = self.workers.get(&g) {
                    s.worker.kill();
                }
                continue;
            }
            if last_poll.elapsed() >= RETIRED_WORKER_POLL {
                let id = self.own_id();
                let req = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                    "params": {"name": "server_info", "arguments": {}, "_meta": modern_meta()}});
                if let Some(s) = self.workers.get_mut(&g) {
                    s.role = Role::Retired {
                        since,
                        last_poll: Instant::now(),
                    };
                }
                outs.extend(self.to_worker(g, req.to_string().into_bytes(), None));
            }
        }
        outs
    }
}
