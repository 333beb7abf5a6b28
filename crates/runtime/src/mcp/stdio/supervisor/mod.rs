//! The stdio supervisor (issue 20): `machine-mcp stdio` owns the host's stdin and stdout and runs
//! the MCP server as a worker process (`machine-mcp stdio --worker`, the in-process server of
//! [`super::serve_process_stdio`]) that it can replace without the host noticing.
//!
//! - **Forwarding.** Client lines go to the active worker as they came; worker lines go to the
//!   client as they came. The supervisor reads only what routing needs (`message.rs`): ids, the
//!   method, the tool, and the process session or task a request names. It answers a duplicate
//!   id of a request still in flight with -32600 itself (ids are per connection, workers come
//!   and go). The thread that read a line routes it and writes it on: the client's `stdin-reader`
//!   thread writes to the worker's pipe, each worker's reader thread to stdout, under one lock
//!   of the routing state (`State`) that is never held during I/O. So a round trip costs the two
//!   pipe crossings and two thread wake-ups, not a chain of task hand-offs; the async control
//!   task only runs timers, signals and version probes.
//! - **Upgrade.** Every [`UPGRADE_CHECK_INTERVAL`] it looks at the binary the host started (by
//!   path: device, inode, size, mtime, `binary.rs`); when it changed and `BINARY --version`
//!   answers — or on SIGHUP (`machine-mcp reload`) — it starts a candidate worker, initializes it
//!   with the client's saved `initialize` parameters, lists its tools and makes it active: new
//!   requests go to it. The old worker is retired: it finishes its calls in flight and keeps
//!   serving its process sessions and tasks by id until it has no more work (asked every
//!   [`RETIRED_WORKER_POLL`] through `server_info`'s `activity`), or for at most
//!   [`RETIRED_WORKER_GRACE`]; a request for one of its handles after that is answered as ended
//!   by the upgrade. A candidate that fails to start is discarded and the old worker stays;
//!   the failure is in `server_info` and the log. When the tool list changed, a client that
//!   initialized (handshake era) gets `notifications/tools/list_changed` — the supervisor says
//!   `tools.listChanged` in the `initialize` result it forwards — and nobody else.
//! - **Crash recovery.** A worker that exits unexpectedly is restarted after
//!   [`WORKER_RESTART_BACKOFF_MIN`], doubling to [`WORKER_RESTART_BACKOFF_MAX`], at most
//!   [`WORKER_RESTARTS_MAX`] times. Its requests in flight are answered -32003 with
//!   `delivery_state: "unknown"` (they may have run; never retried, invariant 7); requests
//!   arriving meanwhile wait, at most [`SUPERVISOR_QUEUE_MAX`] of them and
//!   [`SUPERVISOR_QUEUE_MAX_BYTES`], the rest answered -32000 with `delivery_state: "not_sent"`;
//!   the waiting ones are sent on at most [`CONCURRENT_TOOL_CALLS`] tool calls at a time, so that
//!   having waited never makes them run into the worker's call limit.
//!   `ping` and `server_info` are answered by the supervisor itself while no worker is up.
//! - **Status.** `server_info` answers gain `supervisor` ([`SupervisorInfo`]).

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    ffi::OsString,
    io,
    path::PathBuf,
    sync::{Arc, Mutex, MutexGuard, PoisonError, Weak},
    time::Duration,
};

use serde_json::{Value, json};
use tokio::time::Instant;

use protocol::{
    error_code::ToolErrorCode,
    jsonrpc::{IdKey, code},
    limits::{
        CONCURRENT_TOOL_CALLS, RETIRED_WORKER_GRACE, RETIRED_WORKER_POLL, STDIO_LINE_MAX_BYTES,
        SUPERVISOR_OWNED_IDS_MAX, SUPERVISOR_QUEUE_MAX, SUPERVISOR_QUEUE_MAX_BYTES,
        UPGRADE_CHECK_INTERVAL, WORKER_HEALTHY_AFTER, WORKER_RESTART_BACKOFF_MAX,
        WORKER_RESTART_BACKOFF_MIN, WORKER_RESTARTS_MAX, WORKER_START_TIMEOUT,
    },
    tool_error::ToolError,
};

use crate::tools::info::SupervisorInfo;

pub mod binary;
mod message;
mod output;
mod registry;
mod worker;

pub use registry::running as running_supervisors;

use binary::FileId;
use message::{ClientHead, WorkerHead};
use output::ClientOut;
use worker::{Sink, Worker};

/// The prefix of the ids of the supervisor's own requests to a worker.
const OWN_ID: &str = "machine-mcp-supervisor:";

/// Tools whose answers may name a process session or a task the answering worker holds.
const HANDLE_TOOLS: &[&str] = &[
    "run_process",
    "exec_command",
    "start_process",
    "run_command",
    "start_job",
];

/// How the supervisor was started.
#[derive(Debug, Clone)]
pub struct SupervisorConfig {
    /// The binary workers are started from, as the host started it ([`invoked_path`]): watched
    /// for upgrades.
    pub binary: PathBuf,
    /// This process's arguments without argv0; a worker gets them with `--worker` after
    /// `stdio`.
    pub args: Vec<OsString>,
}

/// The path the host started this binary by (argv0 made absolute, or found in `PATH`).
pub fn invoked_path(argv0: &std::ffi::OsStr) -> PathBuf {
    binary::invoked_path(argv0)
}

/// Runs the supervisor on this process's stdin and stdout until stdin ends or SIGINT/SIGTERM;
/// SIGHUP reloads (a new worker from the binary now at the path).
///
/// # Errors
/// The first worker could not be started, or stdout, the signal handlers or the stdin thread
/// could not be set up.
pub async fn supervise(config: SupervisorConfig) -> io::Result<()> {
    let (probe_tx, mut probes) = tokio::sync::mpsc::unbounded_channel::<Probe>();
    let out = ClientOut::stdout()?;
    let shared = Arc::new_cyclic(|me: &Weak<Shared>| Shared {
        state: Mutex::new(State::new(config, me.clone())),
        out,
        lines: std::sync::atomic::AtomicU64::new(0),
        probes: probe_tx,
        runtime: tokio::runtime::Handle::current(),
    });
    let first = shared.lock().start_first();
    shared.run(first?);
    let _announced = registry::Registration::announce();
    let (eof_tx, mut eof) = tokio::sync::oneshot::channel::<()>();
    read_client(shared.clone(), eof_tx)?;
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut idle = IdleTrim::default();
    // Signalled: the workers are stopped as the signal would stop a server; at end of input
    // they finish what they run and answer it.
    let signalled = loop {
        tokio::select! {
            _ = &mut eof => break false,
            Some(p) = probes.recv() => { let o = shared.lock().probed(p); shared.run(o); }
            _ = hup.recv() => { let o = shared.lock().reload("SIGHUP"); shared.run(o); }
            _ = tick.tick() => {
                let o = shared.lock().on_tick();
                shared.run(o);
                if idle.due(shared.lines.load(std::sync::atomic::Ordering::Relaxed)) {
                    let _ = tokio::task::spawn_blocking(crate::memory::trim).await;
                }
            }
            _ = tokio::signal::ctrl_c() => { tracing::info!("interrupted; stopping the worker"); break true; }
            _ = term.recv() => { tracing::info!("terminated; stopping the worker"); break true; }
        }
        if shared.closed() {
            tracing::info!("stdout closed; stopping the worker");
            break false;
        }
    };
    shared.shutdown(signalled).await;
    Ok(())
}

/// Reads the client's lines from stdin on a thread of its own and routes each one there (a
/// blocking read wakes it at once; Tokio's stdin would hand every read to the blocking pool);
/// signals `eof` at end of input.
fn read_client(shared: Arc<Shared>, eof: tokio::sync::oneshot::Sender<()>) -> io::Result<()> {
    std::thread::Builder::new()
        .name("stdin-reader".into())
        .spawn(move || {
            let mut stdin = std::io::BufReader::with_capacity(64 * 1024, std::io::stdin().lock());
            loop {
                let mut buf = Vec::new();
                match read_line_blocking(&mut stdin, &mut buf, STDIO_LINE_MAX_BYTES) {
                    Ok(Some(false)) => {
                        let o = shared.lock().client_message(buf, false);
                        shared.run_here(o);
                    }
                    Ok(Some(true)) => shared.send_client(
                        super::framing::error_line(
                            &Value::Null,
                            code::INVALID_REQUEST,
                            &format!("message longer than {STDIO_LINE_MAX_BYTES} bytes"),
                        )
                        .as_bytes(),
                    ),
                    Ok(None) | Err(_) => break,
                }
            }
            let _ = eof.send(());
        })
        .map(drop)
}

/// One `\n`-terminated line of a blocking reader into `buf` (without the `\n`); `None` at end of
/// input, `Some(true)` when the line was longer than `max` (its bytes are discarded).
fn read_line_blocking<R: std::io::BufRead>(
    input: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> io::Result<Option<bool>> {
    let mut line = super::framing::LineAssembly::default();
    loop {
        let chunk = match input.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let (take, result) = line.take(chunk, buf, max);
        input.consume(take);
        if let Some(r) = result {
            return Ok(r);
        }
    }
}

/// What routing decided; done by [`Shared::run`] after the state's lock is released.
#[derive(Debug)]
enum Out {
    /// A line to the client.
    Client(Vec<u8>),
    /// A line to a worker. When it cannot be written, the request `key` names (still in flight)
    /// is answered `not_sent`.
    Worker {
        worker: Arc<Worker>,
        line: Vec<u8>,
        key: Option<IdKey>,
    },
    /// A `--version` probe of the binary, for a candidate of `Purpose`.
    Probe(Purpose, &'static str),
}

/// The routing state, and the client's stdout, shared by the stdin thread, the workers' reader
/// threads and the control task.
struct Shared {
    state: Mutex<State>,
    out: ClientOut,
    /// Lines forwarded so far (either way): the control task trims the heap once it stops
    /// changing ([`IdleTrim`]).
    lines: std::sync::atomic::AtomicU64,
    probes: tokio::sync::mpsc::UnboundedSender<Probe>,
    runtime: tokio::runtime::Handle,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn send_client(&self, line: &[u8]) {
        self.out.send(line);
    }

    fn closed(&self) -> bool {
        self.out.closed()
    }

    /// Does what routing decided, in order, on a thread that must not block on a worker's
    /// stdin (a worker's reader, the control task): lines to workers go to their writer threads.
    fn run(&self, outs: Vec<Out>) {
        self.run_on(outs, false);
    }

    /// [`Shared::run`] on the client's reader thread, which writes to workers itself.
    fn run_here(&self, outs: Vec<Out>) {
        self.run_on(outs, true);
    }

    fn run_on(&self, outs: Vec<Out>, direct: bool) {
        self.lines
            .fetch_add(outs.len() as u64, std::sync::atomic::Ordering::Relaxed);
        for o in outs {
            match o {
                Out::Client(line) => self.send_client(&line),
                Out::Worker { worker, line, .. } if !direct => worker.send_later(line),
                Out::Worker { worker, line, key } => {
                    if !worker.send(&line)
                        && let Some(k) = key
                    {
                        // Answered once: by this, unless the worker's exit already answered it.
                        let lost = self.lock().in_flight.remove(&k);
                        if let Some(f) = lost {
                            self.send_client(&message::not_sent(
                                &f.id,
                                "the server worker exited before it took this request",
                                true,
                            ));
                        }
                    }
                }
                Out::Probe(purpose, why) => {
                    let tx = self.probes.clone();
                    let binary = self.lock().config.binary.clone();
                    self.runtime.spawn(async move {
                        let file = FileId::of(&binary);
                        let result = binary::probe_version(&binary).await;
                        let _ = tx.send(Probe {
                            file,
                            result,
                            purpose,
                            why,
                        });
                    });
                }
            }
        }
    }

    /// Closes every worker's input — and when `signalled` (Ctrl-C, SIGTERM) sends it SIGTERM,
    /// as the host's signal would stop a server without a supervisor — lets them answer for up
    /// to [`super::STDOUT_DRAIN_WAIT`] (their reader threads forward what they write), then
    /// kills what is left. At end of input a worker finishes the calls it runs and answers
    /// them, as the in-process server does.
    async fn shutdown(&self, signalled: bool) {
        let workers: Vec<Arc<Worker>> = {
            let mut st = self.lock();
            st.stopping = true;
            st.workers.values().map(|s| s.worker.clone()).collect()
        };
        for w in &workers {
            if signalled {
                w.terminate();
            } else {
                w.close_input();
            }
        }
        let deadline = Instant::now() + super::STDOUT_DRAIN_WAIT;
        while !self.lock().workers.is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for s in self.lock().workers.values() {
            s.worker.kill();
        }
    }
}

impl Sink for Shared {
    fn line(&self, generation: u64, line: Vec<u8>) {
        let o = self.lock().worker_line(generation, line);
        self.run(o);
    }

    fn exited(&self, generation: u64, how: String) {
        let o = self.lock().exited(generation, &how);
        self.run(o);
    }
}

/// When to give freed heap back to the system: once no line was forwarded for
/// `crate::memory::IDLE_DELAY` after some were (the buffers of a megabyte answer stay in glibc's
/// arenas otherwise), as the server does after its calls.
#[derive(Debug, Default)]
struct IdleTrim {
    seen: u64,
    since: Option<Instant>,
}

impl IdleTrim {
    /// Whether to trim now, given the count of lines forwarded so far.
    fn due(&mut self, lines: u64) -> bool {
        if lines != self.seen {
            self.seen = lines;
            self.since = Some(Instant::now());
            return false;
        }
        match self.since {
            Some(t) if t.elapsed() >= crate::memory::IDLE_DELAY => {
                self.since = None;
                true
            }
            _ => false,
        }
    }
}

/// The result of a version probe of the binary.
#[derive(Debug)]
struct Probe {
    file: Option<FileId>,
    result: Result<String, String>,
    purpose: Purpose,
    why: &'static str,
}

/// What a worker is to the supervisor.
#[derive(Debug)]
enum Role {
    /// Started by the supervisor and being initialized (not serving yet).
    Starting(Start),
    /// Where new requests go.
    Active,
    /// Replaced by an upgrade: serves what it holds until it has no work.
    Retired { since: Instant, last_poll: Instant },
}

/// Why a worker is being started, and how far.
#[derive(Debug)]
struct Start {
    purpose: Purpose,
    step: Step,
    deadline: Instant,
    file: Option<FileId>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    Upgrade,
    Recovery,
}

#[derive(Debug)]
enum Step {
    /// Its `initialize` (own id) is out.
    Initializing(String),
    /// Its `tools/list` (own id) is out.
    Listing(String),
}

/// A worker and what the supervisor knows of it.
#[derive(Debug)]
struct Slot {
    worker: Arc<Worker>,
    role: Role,
    /// The binary file it was started from.
    file: Option<FileId>,
}

/// A client request a worker has.
#[derive(Debug)]
struct InFlight {
    generation: u64,
    id: Value,
    method: String,
    tool: Option<String>,
}

/// Whether requests have a worker to go to.
#[derive(Debug)]
enum Service {
    /// The active worker.
    Serving(u64),
    /// None is up; one is being (re)started. Requests wait in the queue.
    Waiting,
    /// The restarts ran out: requests are answered `not_sent` with the reason.
    Failed(String),
}

/// Restarts of workers that exited unexpectedly.
#[derive(Debug, Default)]
struct Recovery {
    /// Restart attempts since the last healthy worker.
    attempts: u32,
    /// When the next attempt starts, when one is due.
    next_at: Option<Instant>,
}

/// A message held in the queue, with the id when it is a request.
#[derive(Debug)]
struct Queued {
    line: Vec<u8>,
    id: Option<Value>,
}

/// A worker that held handles ended after an upgrade replaced it ([`ended_handle`]).
const ENDED_BY_UPGRADE: &str = "upgrade";
/// A worker that held handles exited unexpectedly ([`ended_handle`]).
const ENDED_BY_EXIT: &str = "exit";

/// The routing state. Its methods decide and return [`Out`]s; they never do I/O but spawning a
/// worker.
struct State {
    config: SupervisorConfig,
    worker_args: Vec<OsString>,
    /// Where workers' lines go (the [`Shared`] this state is in).
    sink: Weak<Shared>,
    workers: BTreeMap<u64, Slot>,
    service: Service,
    recovery: Recovery,
    stopping: bool,
    next_generation: u64,
    next_own_id: u64,
    in_flight: HashMap<IdKey, InFlight>,
    /// Process sessions and tasks by id, and the worker that holds them (oldest first).
    handles: HashMap<String, u64>,
    handle_order: VecDeque<String>,
    /// Workers that ended, and how ([`ENDED_BY_UPGRADE`], [`ENDED_BY_EXIT`]): their handles are
    /// gone.
    ended: HashMap<u64, &'static str>,
    /// Messages waiting for a worker (restart) or for their turn (after one).
    queue: VecDeque<Queued>,
    queued_bytes: usize,
    /// The client's `initialize` parameters, replayed to every new worker.
    client_init: Option<Value>,
    /// The client sent `notifications/initialized` after its `initialize` was answered.
    client_initialized: bool,
    /// A worker answered the client's `initialize`: a handshake-era session.
    handshake: bool,
    /// The client sent a request of the 2026-07-28 era (it needs no `initialize`).
    modern_client: bool,
    /// The client's open `subscriptions/listen` requests (2026-07-28), and whether each asked
    /// for `toolsListChanged`. One whose worker ended stays open here: the supervisor sends its
    /// list notifications itself.
    listens: HashMap<IdKey, (Value, bool)>,
    /// The binary was found missing (said once until it is back).
    binary_missing: bool,
    /// The last tool list seen (`tools/list` result's `tools`).
    catalog: Option<Value>,
    /// The id of the own `tools/list` that records the first worker's catalog.
    catalog_probe: Option<String>,
    /// When the binary was last looked at, and the file a failed candidate came from (not
    /// tried again until the file changes once more).
    last_check: Instant,
    rejected_file: Option<FileId>,
    probing: bool,
    reloads: u64,
    recoveries: u64,
    last_reload: Option<String>,
    last_failure: Option<String>,
    active_since: Instant,
}

impl State {
    fn new(config: SupervisorConfig, sink: Weak<Shared>) -> Self {
        Self {
            worker_args: binary::worker_args(&config.args),
            config,
            sink,
            workers: BTreeMap::new(),
            service: Service::Waiting,
            recovery: Recovery::default(),
            stopping: false,
            next_generation: 1,
            next_own_id: 1,
            in_flight: HashMap::new(),
            handles: HashMap::new(),
            handle_order: VecDeque::new(),
            ended: HashMap::new(),
            queue: VecDeque::new(),
            queued_bytes: 0,
            client_init: None,
            client_initialized: false,
            handshake: false,
            modern_client: false,
            listens: HashMap::new(),
            binary_missing: false,
            catalog: None,
            catalog_probe: None,
            last_check: Instant::now(),
            rejected_file: None,
            probing: false,
            reloads: 0,
            recoveries: 0,
            last_reload: None,
            last_failure: None,
            active_since: Instant::now(),
        }
    }

    /// Starts the first worker and makes it active at once (the client's own handshake
    /// initializes it).
    fn start_first(&mut self) -> io::Result<Vec<Out>> {
        let file = FileId::of(&self.config.binary);
        let generation = self.spawn(crate::version().to_owned())?;
        tracing::info!(
            generation,
            binary = %self.config.binary.display(),
            "supervising the stdio server (reload: SIGHUP or `machine-mcp reload`)"
        );
        if let Some(slot) = self.workers.get_mut(&generation) {
            slot.file = file;
        }
        self.service = Service::Serving(generation);
        self.active_since = Instant::now();
        Ok(Vec::new())
    }

    /// Spawns a worker of the next generation (role `Active` until the caller says otherwise).
    fn spawn(&mut self, version: String) -> io::Result<u64> {
        let Some(sink) = self.sink.upgrade() else {
            return Err(io::Error::other("the supervisor is stopping"));
        };
        let generation = self.next_generation;
        let worker = Worker::spawn(
            &self.config.binary,
            &self.worker_args,
            generation,
            version,
            sink,
        )?;
        self.next_generation += 1;
        self.workers.insert(
            generation,
            Slot {
                worker,
                role: Role::Active,
                file: None,
            },
        );
        Ok(generation)
    }

    fn own_id(&mut self) -> String {
        let id = format!("{OWN_ID}{}", self.next_own_id);
        self.next_own_id += 1;
        id
    }

    fn active(&self) -> Option<u64> {
        match self.service {
            Service::Serving(g) => Some(g),
            _ => None,
        }
    }

    /// A line for worker `generation` (nothing when it is gone).
    fn to_worker(&self, generation: u64, line: Vec<u8>, key: Option<IdKey>) -> Option<Out> {
        self.workers.get(&generation).map(|s| Out::Worker {
            worker: s.worker.clone(),
            line,
            key,
        })
    }

    // === client → worker ===

    /// Routes one client line; `from_queue` when it waited in the queue (it is not queued
    /// behind the others again).
    fn client_message(&mut self, line: Vec<u8>, from_queue: bool) -> Vec<Out> {
        let mut outs = Vec::new();
        // A cancellation is never held behind others: it may cancel one of them.
        let cancels = ClientHead::parse(&line).is_some_and(|h| h.cancels().is_some());
        if !from_queue && !cancels && !self.queue.is_empty() {
            // Others wait for their turn: this one goes behind them.
            let id =
                ClientHead::parse(&line).and_then(|h| h.is_request().then_some(h.id).flatten());
            self.enqueue(line, id, &mut outs);
            return outs;
        }
        let Some(head) = ClientHead::parse(&line) else {
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
        } else if head.method.as_deref() == Some("notifications/initialized") && self.handshake {
            // The handshake is complete: the tool list can be read on the session.
            self.client_initialized = true;
            self.forward_or_hold(line, None, &mut outs);
            self.record_catalog(&mut outs);
        } else {
            self.forward_or_hold(line, None, &mut outs);
        }
        outs
    }

    fn request(&mut self, line: Vec<u8>, head: ClientHead, outs: &mut Vec<Out>) {
        let id = head.id.clone().unwrap_or(Value::Null);
        let key = IdKey::of(&id);
        if self.in_flight.contains_key(&key) {
            outs.push(Out::Client(
                super::framing::error_line(
                    &id,
                    code::INVALID_REQUEST,
                    "a request with this id is still in flight",
                )
                .into_bytes(),
            ));
            return;
        }
        let method = head.method.clone().unwrap_or_default();
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
    fn dispatch(
        &mut self,
        generation: u64,
        line: Vec<u8>,
        id: Value,
        method: String,
        tool: Option<String>,
        outs: &mut Vec<Out>,
    ) {
        let key = IdKey::of(&id);
        match self.to_worker(generation, line, Some(key.clone())) {
            Some(o) => {
                self.in_flight.insert(
                    key,
                    InFlight {
                        generation,
                        id,
                        method,
                        tool,
                    },
                );
                outs.push(o);
            }
            None => outs.push(Out::Client(message::not_sent(
                &id,
                "the server worker exited before it took this request",
                true,
            ))),
        }
    }

    /// A message that is not a routed request: to the active worker, or held while none is up.
    fn forward_or_hold(&mut self, line: Vec<u8>, id: Option<Value>, outs: &mut Vec<Out>) {
        match self.service {
            Service::Serving(g) => outs.extend(self.to_worker(g, line, None)),
            Service::Waiting => self.enqueue(line, id, outs),
            Service::Failed(_) => {}
        }
    }

    /// Holds `line` until a worker is up or its turn comes; answers `not_sent` past the queue's
    /// bounds.
    fn enqueue(&mut self, line: Vec<u8>, id: Option<Value>, outs: &mut Vec<Out>) {
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
    fn calls_on(&self, generation: u64) -> usize {
        self.in_flight
            .values()
            .filter(|f| f.generation == generation && f.tool.is_some())
            .count()
    }

    /// Sends held messages on to the active worker, at most [`CONCURRENT_TOOL_CALLS`] tool calls
    /// in flight on it: the rest go as answers come back.
    fn drain_queue(&mut self, outs: &mut Vec<Out>) {
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

    // === worker → client ===

    fn worker_line(&mut self, generation: u64, line: Vec<u8>) -> Vec<Out> {
        let mut outs = Vec::new();
        let head = WorkerHead::parse(&line);
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
            if let Some(sub) = message::acknowledged_subscription(&line)
                && self
                    .listens
                    .get(&IdKey::of(&sub))
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
        let Some(f) = self.in_flight.remove(&IdKey::of(&id)) else {
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

    fn remember_handle(&mut self, handle: String, generation: u64) {
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
    fn own_answer(&mut self, generation: u64, id: &str, line: &[u8], outs: &mut Vec<Out>) {
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
    fn activate(&mut self, generation: u64, tools: Option<Value>, outs: &mut Vec<Out>) {
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

    /// A worker exited: answers its requests in flight, and restarts it when it was the active
    /// one.
    fn exited(&mut self, generation: u64, how: &str) -> Vec<Out> {
        let mut outs = Vec::new();
        let Some(slot) = self.workers.remove(&generation) else {
            return outs;
        };
        let lost: Vec<IdKey> = self
            .in_flight
            .iter()
            .filter(|(_, f)| f.generation == generation)
            .map(|(k, _)| k.clone())
            .collect();
        for k in lost {
            if let Some(f) = self.in_flight.remove(&k) {
                // An open subscription stays open: the supervisor serves it from now on.
                if f.method == "subscriptions/listen" && self.listens.contains_key(&k) {
                    continue;
                }
                outs.push(Out::Client(message::outcome_unknown(&f.id, how)));
            }
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

    fn schedule_recovery(&mut self, outs: &mut Vec<Out>) {
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
    fn start_failed(&mut self, generation: u64, why: &str) -> Vec<Out> {
        let mut outs = Vec::new();
        if let Some(slot) = self.workers.remove(&generation) {
            slot.worker.kill();
            if let Role::Starting(start) = slot.role {
                self.after_start_failure(start.purpose, start.file, why, &mut outs);
            }
        }
        outs
    }

    fn after_start_failure(
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
    fn start_candidate(
        &mut self,
        purpose: Purpose,
        version: String,
        file: Option<FileId>,
    ) -> Vec<Out> {
        let mut outs = Vec::new();
        let generation = match self.spawn(version) {
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
    fn record_catalog(&mut self, outs: &mut Vec<Out>) {
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
    fn reload(&mut self, why: &'static str) -> Vec<Out> {
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
    fn probe(&mut self, purpose: Purpose, why: &'static str) -> Vec<Out> {
        if self.probing || self.starting() {
            return Vec::new();
        }
        self.probing = true;
        vec![Out::Probe(purpose, why)]
    }

    fn probed(&mut self, p: Probe) -> Vec<Out> {
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

    fn starting(&self) -> bool {
        self.workers
            .values()
            .any(|s| matches!(s.role, Role::Starting(_)))
    }

    fn on_tick(&mut self) -> Vec<Out> {
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
        // The binary changed.
        if now.duration_since(self.last_check) >= UPGRADE_CHECK_INTERVAL {
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

    // === status ===

    fn state_line(&self) -> String {
        match &self.service {
            Service::Serving(_) if self.starting() => {
                "serving; a new worker is starting (a reload)".to_owned()
            }
            Service::Serving(_) => "serving".to_owned(),
            Service::Waiting => match self.recovery.next_at {
                Some(at) => format!(
                    "restarting the worker (attempt {} of {WORKER_RESTARTS_MAX} in {} ms)",
                    self.recovery.attempts + 1,
                    at.saturating_duration_since(Instant::now()).as_millis()
                ),
                None => "starting a worker".to_owned(),
            },
            Service::Failed(reason) => format!("failed: {reason}"),
        }
    }

    fn info(&self) -> SupervisorInfo {
        let active = self.active().and_then(|g| self.workers.get(&g));
        SupervisorInfo {
            pid: std::process::id(),
            worker_pid: active.map(|s| s.worker.pid),
            worker_generation: active.map(|s| s.worker.generation),
            binary: self.config.binary.display().to_string(),
            binary_version: active.map(|s| s.worker.version.clone()),
            state: self.state_line(),
            reloads: self.reloads,
            recoveries: self.recoveries,
            last_reload: self.last_reload.clone(),
            last_failure: self.last_failure.clone(),
            replaced_workers: self
                .workers
                .values()
                .filter(|s| matches!(s.role, Role::Retired { .. }))
                .map(|s| s.worker.pid)
                .collect(),
        }
    }

    fn status_value(&self) -> Value {
        serde_json::to_value(self.info()).unwrap_or(Value::Null)
    }

    fn status_text(&self) -> String {
        let i = self.info();
        let mut t = format!(
            "supervisor: pid {}, worker pid {}, {} {}, {}, {} reloads, {} recoveries\n",
            i.pid,
            i.worker_pid.map_or("none".to_owned(), |p| p.to_string()),
            i.binary,
            i.binary_version.as_deref().unwrap_or("-"),
            i.state,
            i.reloads,
            i.recoveries
        );
        if let Some(r) = &i.last_reload {
            t.push_str(&format!("last reload: {r}\n"));
        }
        if let Some(f) = &i.last_failure {
            t.push_str(&format!("last failure: {f}\n"));
        }
        t
    }
}

/// The answer to a request for `handle`, held by a worker that ended (`how`: one of
/// [`ENDED_BY_UPGRADE`], [`ENDED_BY_EXIT`]).
fn ended_handle(id: &Value, handle: &str, how: &str, tool: bool) -> Vec<u8> {
    let how = if how == ENDED_BY_UPGRADE {
        format!(
            "which an upgrade replaced (a replaced worker serves its process sessions and tasks \
             until their work ends, or for at most {} min)",
            RETIRED_WORKER_GRACE.as_secs() / 60
        )
    } else {
        "which exited unexpectedly (a new worker was started in its place)".to_owned()
    };
    let why = format!("{handle} ended with the server worker that held it, {how}");
    if tool {
        message::tool_error(id, &ToolError::new(ToolErrorCode::NotFound, why))
    } else {
        protocol::jsonrpc::error(id, code::INVALID_PARAMS, &why, None)
            .to_string()
            .into_bytes()
    }
}

/// The per-request fields of MCP 2026-07-28 for the supervisor's own requests.
fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "machine-mcp-supervisor", "version": crate::version()},
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

/// A `tools/list` request with id `id`, of the handshake era (on an initialized session) or of
/// 2026-07-28 (with the per-request fields).
fn tools_list_request(id: &str, handshake: bool) -> Vec<u8> {
    let params = if handshake {
        json!({})
    } else {
        json!({"_meta": modern_meta()})
    };
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": params})
        .to_string()
        .into_bytes()
}

/// The time now in UTC, for status lines.
fn now_utc() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}
