//! Messages from the client: routed to the worker that has what they name, answered by the
//! supervisor (a duplicate id, `ping` and `server_info` while no worker is up), or held while
//! none is up.

use serde_json::{Value, json};

use crate::{limits::SUPERVISOR_QUEUE_MAX, limits::SUPERVISOR_QUEUE_MAX_BYTES};
use protocol::{
    error_code::ToolErrorCode,
    jsonrpc::{IdKey, code},
    limits::CONCURRENT_TOOL_CALLS,
    tool_error::ToolError,
};

use super::{Forwarded, Queued, Service, State, ended_handle};
use crate::{
    message::{self, ClientHead},
    shared::Out,
};

impl State {
    /// Routes one client line; `from_queue` when it waited in the queue (it is not queued
    /// behind the others again).
    pub(crate) fn client_message(&mut self, line: Vec<u8>, from_queue: bool) -> Vec<Out> {
        let mut outs = Vec::new();
        // A cancellation is never held behind others: it may cancel one of them.
        let head = ClientHead::parse(&line);
        let cancels = head.as_ref().is_some_and(|h| h.cancels().is_some());
        if !from_queue && !cancels && !self.queue.is_empty() {
            // Others wait for their turn: this one goes behind them.
            let id = head
                .as_ref()
                .filter(|h| h.is_request())
                .and_then(|h| h.id().cloned());
            self.enqueue(line, id, &mut outs);
            return outs;
        }
        let Some(head) = head else {
            // Not a JSON object: the worker answers it as it answers every malformed line.
            self.forward_or_hold(line, None, &mut outs);
            return outs;
        };
        if head.is_request() {
            self.request(line, head, &mut outs);
        } else if let Some(target) = head.cancels() {
            let key = IdKey::of(target);
            self.listens.remove(&key);
            if let Some(f) = self.in_flight.get(&key) {
                outs.extend(self.to_worker(f.generation, line, None));
            } else if let Some(at) = self
                .queue
                .iter()
                .position(|q| q.id.as_ref().is_some_and(|id| IdKey::of(id) == key))
            {
                // It never reached a worker: dropped, and, cancelled, it is not answered
                // (MCP Basic › Utilities › Cancellation).
                if let Some(q) = self.queue.remove(at) {
                    self.queued_bytes -= q.line.len();
                }
            }
        } else if head.method() == Some("notifications/initialized") && self.handshake {
            // The handshake is complete: the tool list can be read on the session.
            self.client_initialized = true;
            self.forward_or_hold(line, None, &mut outs);
            self.record_catalog(&mut outs);
        } else {
            self.forward_or_hold(line, None, &mut outs);
        }
        outs
    }

    pub(crate) fn request(&mut self, line: Vec<u8>, head: ClientHead, outs: &mut Vec<Out>) {
        let id = head.id().cloned().unwrap_or(Value::Null);
        let key = IdKey::of(&id);
        if self.in_flight.contains(&key) {
            outs.push(Out::Client(
                message::error_line(
                    &id,
                    code::INVALID_REQUEST,
                    "a request with this id is still in flight",
                )
                .into_bytes(),
            ));
            return;
        }
        let method = head.method().unwrap_or_default().to_owned();
        let tool = head.tool().map(str::to_owned);
        if head.is_modern() {
            self.modern_client = true;
        }
        if method == "subscriptions/listen" {
            let tools = head.wants_tools_list_changed();
            self.listens.insert(key.clone(), (id.clone(), tools));
            if tools && self.catalog.is_none() {
                self.record_catalog(outs);
            }
        }
        if method == "initialize" && self.client_init.is_none() {
            self.client_init = serde_json::from_slice::<Value>(&line)
                .ok()
                .and_then(|v| v.get("params").cloned());
        }
        // A request for a process session or task goes to the worker that holds it.
        if let Some(handle) = head.handle()
            && let Some(&owner) = self.handles.get(&handle)
        {
            if self.workers.contains_key(&owner) && self.active() != Some(owner) {
                self.dispatch(owner, line, id, method, tool, outs);
                return;
            }
            if let Some(how) = self.ended.get(&owner) {
                outs.push(Out::Client(ended_handle(&id, &handle, how, tool.is_some())));
                return;
            }
        }
        match &self.service {
            Service::Serving(g) => {
                let g = *g;
                self.dispatch(g, line, id, method, tool, outs);
            }
            Service::Waiting | Service::Failed(_) if method == "ping" => {
                outs.push(Out::Client(message::result(&id, json!({}))));
            }
            Service::Waiting | Service::Failed(_) if tool.as_deref() == Some("server_info") => {
                let mut e = ToolError::new(
                    ToolErrorCode::Unavailable,
                    format!("no server worker is running: {}", self.state_line()),
                )
                .detail("supervisor", self.status_value());
                if matches!(self.service, Service::Waiting) {
                    e = e.retryable();
                }
                outs.push(Out::Client(message::tool_error(&id, &e)));
            }
            Service::Waiting => self.enqueue(line, Some(id), outs),
            Service::Failed(reason) => {
                let why = format!(
                    "the server worker could not be restarted ({reason}); `machine-mcp reload` \
                     starts it again"
                );
                outs.push(Out::Client(message::not_sent(&id, &why, false)));
            }
        }
    }

    /// Sends request `line` (`id`) to worker `generation`, recording it in flight.
    pub(crate) fn dispatch(
        &mut self,
        generation: u64,
        line: Vec<u8>,
        id: Value,
        method: String,
        tool: Option<String>,
        outs: &mut Vec<Out>,
    ) {
        let key = IdKey::of(&id);
        let forwarded = Forwarded {
            generation,
            id: id.clone(),
            method,
            tool,
        };
        if let Err(e) = self.in_flight.begin(key.clone(), None, forwarded) {
            // Held in the queue while a request with its id went in flight.
            outs.push(Out::Client(
                message::error_line(&id, code::INVALID_REQUEST, &e.to_string()).into_bytes(),
            ));
            return;
        }
        match self.to_worker(generation, line, Some(key.clone())) {
            Some(o) => outs.push(o),
            None => {
                self.in_flight.end(&key);
                outs.push(Out::Client(message::not_sent(
                    &id,
                    "the server worker exited before it took this request",
                    true,
                )));
            }
        }
    }

    /// A message that is not a routed request: to the active worker, or held while none is up.
    pub(crate) fn forward_or_hold(
        &mut self,
        line: Vec<u8>,
        id: Option<Value>,
        outs: &mut Vec<Out>,
    ) {
        match self.service {
            Service::Serving(g) => outs.extend(self.to_worker(g, line, None)),
            Service::Waiting => self.enqueue(line, id, outs),
            Service::Failed(_) => {}
        }
    }

    /// Holds `line` until a worker is up or its turn comes; answers `not_sent` past the queue's
    /// bounds.
    pub(crate) fn enqueue(&mut self, line: Vec<u8>, id: Option<Value>, outs: &mut Vec<Out>) {
        if self.queue.len() >= SUPERVISOR_QUEUE_MAX
            || self.queued_bytes + line.len() > SUPERVISOR_QUEUE_MAX_BYTES
        {
            if let Some(id) = id {
                outs.push(Out::Client(message::not_sent(
                    &id,
                    &format!(
                        "the waiting room is full: {} requests ({} bytes) already wait for the \
                         server worker, at most {SUPERVISOR_QUEUE_MAX} requests and {} MiB",
                        self.queue.len(),
                        self.queued_bytes,
                        SUPERVISOR_QUEUE_MAX_BYTES >> 20
                    ),
                    true,
                )));
            }
            return;
        }
        self.queued_bytes += line.len();
        self.queue.push_back(Queued { line, id });
    }

    /// Tool calls worker `generation` is running for the client.
    pub(crate) fn calls_on(&self, generation: u64) -> usize {
        self.in_flight
            .values()
            .filter(|f| f.generation == generation && f.tool.is_some())
            .count()
    }

    /// Sends held messages on to the active worker, at most [`CONCURRENT_TOOL_CALLS`] tool calls
    /// in flight on it: the rest go as answers come back.
    pub(crate) fn drain_queue(&mut self, outs: &mut Vec<Out>) {
        let Some(active) = self.active() else { return };
        let mut calls = self.calls_on(active);
        while let Some(front) = self.queue.front() {
            let is_call = ClientHead::parse(&front.line).is_some_and(|h| h.tool().is_some());
            if is_call && calls >= CONCURRENT_TOOL_CALLS {
                break;
            }
            let Some(q) = self.queue.pop_front() else {
                break;
            };
            self.queued_bytes -= q.line.len();
            calls += usize::from(is_call);
            outs.extend(self.client_message(q.line, true));
        }
    }
}
