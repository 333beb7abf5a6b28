//! The stdio supervisor: `machine-mcp stdio` owns the host's stdin and stdout and runs
//! the MCP server as a worker process (`machine-mcp stdio --worker`, the in-process server of
//! `runtime::mcp::stdio::serve_process_stdio`) that it can replace without the host noticing.
//! A process manager, not MCP plumbing: it depends on `protocol` and on the runtime's public
//! items only (its version, heap trimming, `/proc` facts, pipe widening, the stdio line
//! bound), never on a tool family.
//!
//! - **Forwarding.** Client lines go to the active worker as they came; worker lines go to the
//!   client as they came. The supervisor reads only what routing needs (`message.rs`): ids, the
//!   method, the tool, and the process session or task a request names. It answers a duplicate
//!   id of a request still in flight with -32600 itself (ids are per connection, workers come
//!   and go). The thread that read a line routes it and writes it on: the client's `stdin-reader`
//!   thread writes to the worker's pipe, each worker's reader thread to stdout, under one lock
//!   of the routing state (`State`, `state/`) that is never held during I/O. So a round trip costs the two
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
//! - **Automatic swap off.** When the binary lies in a workspace a caller may write without
//!   exec ([`SupervisorConfig::automatic_swap_off`]), a changed file is never noticed, workers
//!   start from the supervisor's own running file, and only the user's reload takes the file
//!   at the path; `server_info` says so and why.
//! - **Early first worker.** `main` starts the first worker of a plain `machine-mcp stdio`
//!   before the supervisor parses its arguments ([`prestart::prestart`]); it waits at a gate
//!   until [`supervise`] adopts it, or ends silently (`prestart.rs` states the rules).
//! - **Status.** `server_info` answers gain `supervisor` ([`SupervisorInfo`]).
//! - **Stop.** At end of input the workers finish what they run and answer it; on Ctrl-C or
//!   SIGTERM they get SIGTERM, as the host's signal would stop a server without a supervisor.
//!   Either way a worker still there after [`WORKER_STOP_WAIT`] is killed. A stop signal while
//!   they stop escalates: after end of input the workers get SIGTERM, after a signal they are
//!   killed at once and [`supervise`] returns [`Ended::AtOnce`]. A signal within
//!   [`STOP_SIGNAL_REPEAT_WINDOW`] of the one that stopped it is that one delivered twice.
//!
//! Files: this one the entry points and the client's reader; `shared.rs` what routing decided
//! and who does it (`Out`, `Shared`); `state/` the routing state (`mod.rs` its types and
//! workers, `from_client.rs`, `from_worker.rs`, `lifecycle.rs` starts, exits, reloads and
//! timers, `status.rs`); `message.rs` the message heads; `worker.rs` a worker process;
//! `binary.rs` the watched binary; `prestart.rs` the early first worker; `output.rs` stdout;
//! `registry.rs` the running supervisors.
//!
//! [`UPGRADE_CHECK_INTERVAL`]: protocol::limits::UPGRADE_CHECK_INTERVAL
//! [`STOP_SIGNAL_REPEAT_WINDOW`]: protocol::limits::STOP_SIGNAL_REPEAT_WINDOW
//! [`RETIRED_WORKER_POLL`]: crate::limits::RETIRED_WORKER_POLL
//! [`RETIRED_WORKER_GRACE`]: crate::limits::RETIRED_WORKER_GRACE
//! [`WORKER_RESTART_BACKOFF_MIN`]: crate::limits::WORKER_RESTART_BACKOFF_MIN
//! [`WORKER_RESTART_BACKOFF_MAX`]: crate::limits::WORKER_RESTART_BACKOFF_MAX
//! [`WORKER_RESTARTS_MAX`]: crate::limits::WORKER_RESTARTS_MAX
//! [`SUPERVISOR_QUEUE_MAX`]: crate::limits::SUPERVISOR_QUEUE_MAX
//! [`SUPERVISOR_QUEUE_MAX_BYTES`]: crate::limits::SUPERVISOR_QUEUE_MAX_BYTES
//! [`CONCURRENT_TOOL_CALLS`]: protocol::limits::CONCURRENT_TOOL_CALLS
//! [`SupervisorInfo`]: runtime::tools::info::SupervisorInfo
//! [`WORKER_STOP_WAIT`]: crate::limits::WORKER_STOP_WAIT

use std::{
    ffi::OsString,
    io,
    path::PathBuf,
    sync::{Arc, Weak},
    time::Duration,
};

use lock::Lock;
use tokio::time::Instant;

use protocol::{jsonrpc::code, limits::STDIO_LINE_MAX_BYTES};

pub mod binary;
pub mod limits;
mod message;
mod output;
pub mod prestart;
mod registry;
mod shared;
mod state;
mod worker;

pub use registry::running as running_supervisors;

use output::ClientOut;
use shared::{IdleTrim, Probe, Shared};
use state::State;

/// How the supervisor was started.
#[derive(Debug, Clone)]
pub struct SupervisorConfig {
    /// The binary workers are started from, as the host started it ([`invoked_path`]): watched
    /// for upgrades.
    pub binary: PathBuf,
    /// This process's arguments without argv0; a worker gets them with `--worker` after
    /// `stdio`.
    pub args: Vec<OsString>,
    /// Why the binary at [`Self::binary`] is not swapped in automatically (it lies where a
    /// caller that may write but not run programs could replace it); `None`: it is. While off,
    /// the path is not watched, and the first worker and every restart run the supervisor's own
    /// file (`runtime::programs::OWN_EXE`); a reload by the user (SIGHUP, `machine-mcp
    /// reload`) still starts the binary at the path.
    pub automatic_swap_off: Option<String>,
}

/// The path the host started this binary by (argv0 made absolute, or found in `PATH`).
pub fn invoked_path(argv0: &std::ffi::OsStr) -> PathBuf {
    binary::invoked_path(argv0)
}

/// How [`supervise`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Its input or stdout ended, or a stop signal came: the workers stopped, or were killed
    /// after [`WORKER_STOP_WAIT`](crate::limits::WORKER_STOP_WAIT).
    Stopped,
    /// A second stop signal came while the workers stopped: they were killed at once. The
    /// process is expected to exit at once too (`machine-mcp` exits with status 130).
    AtOnce,
}

/// Runs the supervisor on this process's stdin and stdout until stdin ends or SIGINT/SIGTERM;
/// SIGHUP reloads (a new worker from the binary now at the path). Then stops the workers (the
/// module's **Stop**) and says how it ended.
///
/// # Errors
/// The first worker could not be started, or stdout, the signal handlers or the stdin thread
/// could not be set up.
pub async fn supervise(config: SupervisorConfig) -> io::Result<Ended> {
    let (probe_tx, mut probes) = tokio::sync::mpsc::unbounded_channel::<Probe>();
    let out = ClientOut::stdout()?;
    let shared = Arc::new_cyclic(|me: &Weak<Shared>| Shared {
        state: Lock::new(State::new(config, me.clone())),
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
    let mut stops = StopSignals::new()?;
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
                    let _ = tokio::task::spawn_blocking(runtime::memory::trim).await;
                }
            }
            how = stops.next() => { tracing::info!("{how}; stopping the worker"); break true; }
        }
        if shared.stdout_gone() {
            tracing::info!("stdout closed; stopping the worker");
            break false;
        }
    };
    Ok(stop(&shared, signalled, &mut stops).await)
}

/// SIGINT (Ctrl-C) and SIGTERM, listened to from the start, so that none that comes while the
/// supervisor stops is missed.
struct StopSignals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn new() -> io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }

    /// The next stop signal, as the log says it: `interrupted` or `terminated`.
    async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.interrupt.recv() => "interrupted",
            _ = self.terminate.recv() => "terminated",
        }
    }
}

/// Stops the workers: closes their input, and when `signalled` sends them SIGTERM; waits for
/// them at most [`WORKER_STOP_WAIT`](crate::limits::WORKER_STOP_WAIT), then kills what is left.
/// A stop signal meanwhile escalates (the module's **Stop**).
async fn stop(shared: &Shared, signalled: bool, stops: &mut StopSignals) -> Ended {
    shared.stop_workers(signalled);
    // When the stop signal came: one within the repeat window of it is the same stop.
    let mut signalled_at = signalled.then(Instant::now);
    let gone = shared.workers_gone(Instant::now() + crate::limits::WORKER_STOP_WAIT);
    tokio::pin!(gone);
    let ended = loop {
        tokio::select! {
            () = &mut gone => break Ended::Stopped,
            _ = stops.next() => {}
        }
        match signalled_at {
            Some(at) if at.elapsed() < protocol::limits::STOP_SIGNAL_REPEAT_WINDOW => {
                tracing::debug!("the stop signal delivered again; still stopping");
            }
            Some(_) => {
                tracing::info!("a second stop signal; killing the worker at once");
                break Ended::AtOnce;
            }
            None => {
                tracing::info!("a stop signal while the worker finishes; stopping it");
                signalled_at = Some(Instant::now());
                shared.stop_workers(true);
            }
        }
    };
    shared.kill_workers();
    ended
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
                        message::error_line(
                            &serde_json::Value::Null,
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
pub(crate) fn read_line_blocking<R: std::io::BufRead>(
    input: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> io::Result<Option<bool>> {
    let mut line = runtime::mcp::stdio::LineAssembly::default();
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
