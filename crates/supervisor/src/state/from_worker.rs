//! Lines from the workers: answers to the client (rewritten where the supervisor adds to
//! them), notifications, and the answers to the supervisor's own requests (a candidate's
//! initialization and tool list, a retired worker's activity). A line that is not a JSON-RPC
//! message (no `"jsonrpc": "2.0"` member) is dropped and logged: the client's stdout carries
//! JSON-RPC only.

use serde_json::Value;
use tokio::time::Instant;

use crate::limits::SUPERVISOR_OWNED_IDS_MAX;
use protocol::jsonrpc::IdKey;

use super::{
    HANDLE_TOOLS, OWN_ID, Purpose, Role, Service, Slot, State, Step, now_utc, tools_list_request,
};
use crate::{
    message::{self, WorkerHead},
    shared::Out,
};

impl State {
    pub(crate) fn worker_line(&mut self, generation: u64, line: Vec<u8>) -> Vec<Out> {
        let mut outs = Vec::new();
        let head = WorkerHead::parse(&line);
        if !head.json_rpc {
            // Never the client's: stdout carries JSON-RPC messages only.
            tracing::warn!(
                generation,
                bytes = line.len(),
                "a worker wrote a line that is not a JSON-RPC message; dropped"
            );
            return outs;
        }
        let starting = matches!(
            self.workers.get(&generation).map(|s| &s.role),
            Some(Role::Starting(_))
        );
        if head.has_method {
            // The worker's notifications (progress, logging); a starting worker has no client.
            if starting {
                return outs;
            }
            let mut line = line;
            if let Some(sub) = &head.acknowledged
                && self
                    .listens
                    .get(&IdKey::of(sub))
                    .is_some_and(|(_, tools)| *tools)
                && let Some(l) = message::acknowledging_tools(&line)
            {
                line = l;
            }
            outs.push(Out::Client(line));
            return outs;
        }
        let Some(id) = head.id else {
            outs.push(Out::Client(line));
            return outs;
        };
        if let Some(own) = id.as_str().filter(|s| s.starts_with(OWN_ID)) {
            let own = own.to_owned();
            self.own_answer(generation, &own, &line, &mut outs);
            return outs;
        }
        let Some(f) = self.in_flight.end(&IdKey::of(&id)) else {
            outs.push(Out::Client(line));
            return outs;
        };
        let mut line = line;
        if f.method == "subscriptions/listen" {
            // The subscription ended (its final result).
            self.listens.remove(&IdKey::of(&id));
        }
        if f.method == "initialize" || f.method == "server/discover" {
            if f.method == "initialize" {
                self.handshake = true;
            }
            if let Some(l) = message::with_list_changed(&line) {
                line = l;
            }
        } else if f.tool.as_deref() == Some("server_info") {
            if let Some(l) =
                message::with_supervisor(&line, &self.status_value(), &self.status_text())
            {
                line = l;
            }
        } else if f.tool.as_deref().is_some_and(|t| HANDLE_TOOLS.contains(&t))
            && let Some(h) = message::created_handle(&line)
        {
            self.remember_handle(h, f.generation);
        }
        outs.push(Out::Client(line));
        if !self.queue.is_empty() {
            self.drain_queue(&mut outs);
        }
        outs
    }

    pub(crate) fn remember_handle(&mut self, handle: String, generation: u64) {
        if self.handles.insert(handle.clone(), generation).is_none() {
            self.handle_order.push_back(handle);
            if self.handle_order.len() > SUPERVISOR_OWNED_IDS_MAX
                && let Some(old) = self.handle_order.pop_front()
            {
                self.handles.remove(&old);
            }
        }
    }

    /// An answer to one of the supervisor's own requests.
    pub(crate) fn own_answer(
        &mut self,
        generation: u64,
        id: &str,
        line: &[u8],
        outs: &mut Vec<Out>,
    ) {
        let v: Value = serde_json::from_slice(line).unwrap_or(Value::Null);
        if self.catalog_probe.as_deref() == Some(id) {
            self.catalog_probe = None;
            if let Some(tools) = v.pointer("/result/tools") {
                self.catalog = Some(tools.clone());
            }
            return;
        }
        enum Next {
            Nothing,
            Initialized,
            Listed,
            Failed(String),
            Poll,
        }
        let next = match self.workers.get(&generation).map(|s| &s.role) {
            Some(Role::Starting(start)) => {
                let ours = match &start.step {
                    Step::Initializing(want) => (want == id).then_some(Next::Initialized),
                    Step::Listing(want) => (want == id).then_some(Next::Listed),
                };
                match (ours, v.get("error")) {
                    (Some(_), Some(e)) => Next::Failed(format!("it answered {e}")),
                    (Some(n), None) => n,
                    (None, _) => Next::Nothing,
                }
            }
            Some(Role::Retired { .. }) => Next::Poll,
            _ => Next::Nothing,
        };
        match next {
            Next::Nothing => {}
            Next::Failed(why) => outs.extend(self.start_failed(generation, &why)),
            Next::Initialized => {
                if self.client_initialized {
                    let note = br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
                    outs.extend(self.to_worker(generation, note.to_vec(), None));
                }
                let list = self.own_id();
                let req = tools_list_request(&list, self.handshake);
                if let Some(Slot {
                    role: Role::Starting(start),
                    ..
                }) = self.workers.get_mut(&generation)
                {
                    start.step = Step::Listing(list);
                }
                outs.extend(self.to_worker(generation, req, None));
            }
            Next::Listed => {
                let tools = v.pointer("/result/tools").cloned();
                self.activate(generation, tools, outs);
            }
            Next::Poll => {
                // A retired worker's activity: it stops once it has no work.
                // It keeps what its client can still read: exited process sessions and
                // finished tasks, until they expire or the grace ends; and the delegations it
                // runs (their receipts are read from the shared store by any worker).
                let idle = v
                    .pointer("/result/structuredContent/activity")
                    .is_some_and(|a| {
                        a["kept_process_sessions"].as_u64() == Some(0)
                            && a["kept_tasks"].as_u64() == Some(0)
                            && a["active_delegations"].as_u64().unwrap_or(0) == 0
                            && a["calls_in_flight"].as_u64().unwrap_or(u64::MAX) <= 1
                    });
                // An open subscription does not keep it: the supervisor serves those itself.
                let busy_here = self
                    .in_flight
                    .values()
                    .any(|f| f.generation == generation && f.method != "subscriptions/listen");
                if idle
                    && !busy_here
                    && let Some(s) = self.workers.get(&generation)
                {
                    tracing::info!(
                        generation,
                        "the replaced worker has no more work; stopping it"
                    );
                    s.worker.close_input();
                }
            }
        }
    }

    /// Makes the started worker `generation` the active one.
    pub(crate) fn activate(&mut self, generation: u64, tools: Option<Value>, outs: &mut Vec<Out>) {
        let Some(slot) = self.workers.get_mut(&generation) else {
            return;
        };
        let Role::Starting(start) = std::mem::replace(&mut slot.role, Role::Active) else {
            return;
        };
        slot.file = start.file;
        let version = slot.worker.version.clone();
        let pid = slot.worker.pid;
        let previous = self.active();
        let from = previous
            .and_then(|g| self.workers.get(&g))
            .map(|s| s.worker.version.clone());
        if let Some(old) = previous
            && let Some(s) = self.workers.get_mut(&old)
        {
            s.role = Role::Retired {
                since: Instant::now(),
                last_poll: Instant::now(),
            };
        }
        self.service = Service::Serving(generation);
        self.active_since = Instant::now();
        match start.purpose {
            Purpose::Upgrade => {
                self.reloads += 1;
                let line = format!(
                    "{}: {} → {version} (worker pid {pid})",
                    now_utc(),
                    from.as_deref().unwrap_or("?")
                );
                tracing::info!(
                    generation,
                    "reloaded: {line}; the previous worker finishes its work"
                );
                self.last_reload = Some(line);
                self.last_failure = None;
            }
            Purpose::Recovery => {
                self.recoveries += 1;
                self.recovery.next_at = None;
                tracing::info!(
                    generation,
                    pid,
                    "the server worker was restarted; no request was sent again"
                );
            }
        }
        let changed = match (&self.catalog, &tools) {
            (Some(old), Some(new)) => old != new,
            _ => false,
        };
        if tools.is_some() {
            self.catalog = tools;
        }
        if changed {
            if self.handshake && self.client_initialized {
                outs.push(Out::Client(message::list_changed()));
            }
            for (id, tools) in self.listens.values() {
                if *tools {
                    outs.push(Out::Client(message::list_changed_for(id)));
                }
            }
        }
        self.drain_queue(outs);
    }
}
