//! The routing state ([`State`]): the workers and their roles, the requests in flight, the
//! handles (process sessions, tasks) each worker holds, the queue while none is up, and the
//! recovery and reload bookkeeping. Its methods decide and return [`Out`]s; they never do I/O
//! but spawning a worker. By concern: messages from the client (`from_client.rs`), lines from
//! the workers (`from_worker.rs`), starts, exits, reloads and timers (`lifecycle.rs`), the
//! status `server_info` shows (`status.rs`).

mod from_client;
mod from_worker;
mod lifecycle;
mod status;

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    ffi::OsString,
    io,
    sync::{Arc, Weak},
};

use serde_json::{Value, json};
use tokio::time::Instant;

use crate::limits::RETIRED_WORKER_GRACE;
use protocol::{
    delivery::InFlight,
    error_code::ToolErrorCode,
    jsonrpc::{IdKey, code},
    tool_error::ToolError,
};

use crate::{
    SupervisorConfig,
    binary::{self, FileId},
    message,
    shared::{Out, Shared},
    worker::Worker,
};

/// The prefix of the ids of the supervisor's own requests to a worker.
pub(crate) const OWN_ID: &str = "machine-mcp-supervisor:";

/// Tools whose answers may name a process session or a task the answering worker holds.
pub(crate) const HANDLE_TOOLS: &[&str] = &[
    "run_process",
    "exec_command",
    "start_process",
    "run_command",
    "start_job",
];

/// What a worker is to the supervisor.
#[derive(Debug)]
pub(crate) enum Role {
    /// Started by the supervisor and being initialized (not serving yet).
    Starting(Start),
    /// Where new requests go.
    Active,
    /// Replaced by an upgrade: serves what it holds until it has no work.
    Retired { since: Instant, last_poll: Instant },
}

/// Why a worker is being started, and how far.
#[derive(Debug)]
pub(crate) struct Start {
    pub(crate) purpose: Purpose,
    pub(crate) step: Step,
    pub(crate) deadline: Instant,
    pub(crate) file: Option<FileId>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    Upgrade,
    Recovery,
}

#[derive(Debug)]
pub(crate) enum Step {
    /// Its `initialize` (own id) is out.
    Initializing(String),
    /// Its `tools/list` (own id) is out.
    Listing(String),
}

/// A worker and what the supervisor knows of it.
#[derive(Debug)]
pub(crate) struct Slot {
    pub(crate) worker: Arc<Worker>,
    pub(crate) role: Role,
    /// The binary file it was started from.
    pub(crate) file: Option<FileId>,
}

/// A client request a worker has.
#[derive(Debug)]
pub(crate) struct Forwarded {
    pub(crate) generation: u64,
    pub(crate) id: Value,
    pub(crate) method: String,
    pub(crate) tool: Option<String>,
}

/// Whether requests have a worker to go to.
#[derive(Debug)]
pub(crate) enum Service {
    /// The active worker.
    Serving(u64),
    /// None is up; one is being (re)started. Requests wait in the queue.
    Waiting,
    /// The restarts ran out: requests are answered `not_sent` with the reason.
    Failed(String),
}

/// Restarts of workers that exited unexpectedly.
#[derive(Debug, Default)]
pub(crate) struct Recovery {
    /// Restart attempts since the last healthy worker.
    pub(crate) attempts: u32,
    /// When the next attempt starts, when one is due.
    pub(crate) next_at: Option<Instant>,
}

/// A message held in the queue, with the id when it is a request.
#[derive(Debug)]
pub(crate) struct Queued {
    pub(crate) line: Vec<u8>,
    pub(crate) id: Option<Value>,
}

/// A worker that held handles ended after an upgrade replaced it ([`ended_handle`]).
pub(crate) const ENDED_BY_UPGRADE: &str = "upgrade";
/// A worker that held handles exited unexpectedly ([`ended_handle`]).
pub(crate) const ENDED_BY_EXIT: &str = "exit";

/// The routing state. Its methods decide and return [`Out`]s; they never do I/O but spawning a
/// worker.
pub(crate) struct State {
    pub(crate) config: SupervisorConfig,
    pub(crate) worker_args: Vec<OsString>,
    /// Where workers' lines go (the [`Shared`] this state is in).
    pub(crate) sink: Weak<Shared>,
    pub(crate) workers: BTreeMap<u64, Slot>,
    pub(crate) service: Service,
    pub(crate) recovery: Recovery,
    pub(crate) stopping: bool,
    pub(crate) next_generation: u64,
    pub(crate) next_own_id: u64,
    pub(crate) in_flight: InFlight<Forwarded>,
    /// Process sessions and tasks by id, and the worker that holds them (oldest first).
    pub(crate) handles: HashMap<String, u64>,
    pub(crate) handle_order: VecDeque<String>,
    /// Workers that ended, and how ([`ENDED_BY_UPGRADE`], [`ENDED_BY_EXIT`]): their handles are
    /// gone.
    pub(crate) ended: HashMap<u64, &'static str>,
    /// Messages waiting for a worker (restart) or for their turn (after one).
    pub(crate) queue: VecDeque<Queued>,
    pub(crate) queued_bytes: usize,
    /// The client's `initialize` parameters, replayed to every new worker.
    pub(crate) client_init: Option<Value>,
    /// The client sent `notifications/initialized` after its `initialize` was answered.
    pub(crate) client_initialized: bool,
    /// A worker answered the client's `initialize`: a handshake-era session.
    pub(crate) handshake: bool,
    /// The client sent a request of the 2026-07-28 era (it needs no `initialize`).
    pub(crate) modern_client: bool,
    /// The client's open `subscriptions/listen` requests (2026-07-28), and whether each asked
    /// for `toolsListChanged`. One whose worker ended stays open here: the supervisor sends its
    /// list notifications itself.
    pub(crate) listens: HashMap<IdKey, (Value, bool)>,
    /// The binary was found missing (said once until it is back).
    pub(crate) binary_missing: bool,
    /// The last tool list seen (`tools/list` result's `tools`).
    pub(crate) catalog: Option<Value>,
    /// The id of the own `tools/list` that records the first worker's catalog.
    pub(crate) catalog_probe: Option<String>,
    /// When the binary was last looked at, and the file a failed candidate came from (not
    /// tried again until the file changes once more).
    pub(crate) last_check: Instant,
    pub(crate) rejected_file: Option<FileId>,
    pub(crate) probing: bool,
    pub(crate) reloads: u64,
    pub(crate) recoveries: u64,
    pub(crate) last_reload: Option<String>,
    pub(crate) last_failure: Option<String>,
    pub(crate) active_since: Instant,
}

impl State {
    pub(crate) fn new(config: SupervisorConfig, sink: Weak<Shared>) -> Self {
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
            in_flight: InFlight::new(),
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
    pub(crate) fn start_first(&mut self) -> io::Result<Vec<Out>> {
        let file = FileId::of(&self.config.binary);
        let early = crate::prestart::take()
            .filter(|e| e.adoptable(&self.worker_args, &self.program(Purpose::Recovery)))
            .and_then(crate::prestart::Prestarted::open);
        let generation = match early {
            Some(child) => self.adopt(child)?,
            None => self.spawn(runtime::version().to_owned(), Purpose::Recovery)?,
        };
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

    /// The file a worker started for `purpose` runs (and its version probe asks): the binary
    /// at the path, or, while automatic swap is off, the supervisor's own running file for
    /// anything but a reload the user asked for (an `Upgrade` is only asked for then).
    pub(crate) fn program(&self, purpose: Purpose) -> std::path::PathBuf {
        if self.config.automatic_swap_off.is_some() && purpose == Purpose::Recovery {
            runtime::programs::OWN_EXE.into()
        } else {
            self.config.binary.clone()
        }
    }

    /// Makes `child`, the early worker at its gate (`prestart.rs`), the worker of the next
    /// generation (role `Active`) and opens its gate.
    fn adopt(&mut self, child: std::process::Child) -> io::Result<u64> {
        self.install(|generation, sink| {
            let worker = Worker::run(child, generation, runtime::version().to_owned(), sink)?;
            if worker.send(crate::prestart::WORKER_GATE_LINE) {
                Ok(worker)
            } else {
                worker.kill();
                Err(io::Error::other("the early worker's input is closed"))
            }
        })
    }

    /// Spawns a worker of the next generation (role `Active` until the caller says otherwise)
    /// from [`Self::program`] of `purpose`.
    pub(crate) fn spawn(&mut self, version: String, purpose: Purpose) -> io::Result<u64> {
        let program = self.program(purpose);
        let args = self.worker_args.clone();
        let named = self.config.binary.clone();
        self.install(|generation, sink| {
            Worker::spawn(&program, &named, &args, generation, version, sink)
        })
    }

    /// Registers the worker `make` starts for the next generation, role `Active`.
    fn install(
        &mut self,
        make: impl FnOnce(u64, Arc<Shared>) -> io::Result<Arc<Worker>>,
    ) -> io::Result<u64> {
        let Some(sink) = self.sink.upgrade() else {
            return Err(io::Error::other("the supervisor is stopping"));
        };
        let generation = self.next_generation;
        let worker = make(generation, sink)?;
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

    pub(crate) fn own_id(&mut self) -> String {
        let id = format!("{OWN_ID}{}", self.next_own_id);
        self.next_own_id += 1;
        id
    }

    pub(crate) fn active(&self) -> Option<u64> {
        match self.service {
            Service::Serving(g) => Some(g),
            _ => None,
        }
    }

    /// A line for worker `generation` (nothing when it is gone).
    pub(crate) fn to_worker(
        &self,
        generation: u64,
        line: Vec<u8>,
        key: Option<IdKey>,
    ) -> Option<Out> {
        self.workers.get(&generation).map(|s| Out::Worker {
            worker: s.worker.clone(),
            line,
            key,
        })
    }
}

/// The answer to a request for `handle`, held by a worker that ended (`how`: one of
/// [`ENDED_BY_UPGRADE`], [`ENDED_BY_EXIT`]).
pub(crate) fn ended_handle(id: &Value, handle: &str, how: &str, tool: bool) -> Vec<u8> {
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
pub(crate) fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "machine-mcp-supervisor", "version": runtime::version()},
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

/// A `tools/list` request with id `id`, of the handshake era (on an initialized session) or of
/// 2026-07-28 (with the per-request fields).
pub(crate) fn tools_list_request(id: &str, handshake: bool) -> Vec<u8> {
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
pub(crate) fn now_utc() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}
