//! MCP over stdio: newline-delimited JSON-RPC (MCP 2025-11-25 Transports §stdio).
//!
//! Framing rules, checked here before a message reaches the server:
//! - A line longer than [`STDIO_LINE_MAX_BYTES`] is skipped and answered with -32600.
//! - Invalid JSON is answered with -32700 (Parse error), `id: null` (JSON-RPC 2.0 §5).
//! - A batch (a JSON array) is answered with -32600: MCP since 2025-06-18 has no batches.
//! - A message that is not a JSON-RPC 2.0 request, notification or response is answered with
//!   -32600, with its `id` when it had a usable one.
//! - Both MCP eras, per request (MCP 2026-07-28 Basic › Transports › stdio; the era rules of
//!   `protocol::head::era`): `server/discover` and any request whose `params._meta` names
//!   `io.modelcontextprotocol/protocolVersion` go to the server without `initialize` — inside
//!   an initialized session, a `_meta` naming a handshake-era version belongs to the session. A
//!   client may probe with `server/discover` and then `initialize` on the same connection.
//! - A 2026-07-28 request (other than `initialize` and `ping`, which the handshake gate serves)
//!   whose per-request `_meta` breaks the rules of
//!   `protocol::head::meta::check_meta` is answered with its error (-32602 for a missing or
//!   malformed field, -32022 for a version not served, the versions served in its `data`) and
//!   not run: the relay and the daemon's era bridge answer such a request alike.
//! - A request whose id is the id of a request still in flight is answered with -32600 and not
//!   run (JSON-RPC 2.0 §4: ids identify requests; MCP 2025-11-25 Basic §Requests: an id MUST NOT
//!   have been used before by the requestor in the same session). An id is free again once its
//!   answer is written or the request is cancelled.
//! - A second `initialize` is answered with -32600; the session keeps what it negotiated
//!   (Lifecycle §Initialization happens once).
//! - Before `initialize`, any other request but `ping` is answered with -32600 "not
//!   initialized"; notifications and responses are dropped until `initialize` or a 2026-07-28
//!   request was delivered (a 2026-07-28 client cancels with `notifications/cancelled`).
//!
//! Only JSON-RPC goes to stdout; each message is one line, flushed as it is written.

use std::{io, sync::Arc};

use rmcp::{
    RoleServer, ServiceExt,
    model::{ClientJsonRpcMessage, ServerJsonRpcMessage},
    transport::Transport,
};
use serde_json::Value;
use tokio::{
    io::{AsyncBufRead, AsyncRead, AsyncWrite, BufReader},
    sync::mpsc,
};
use tokio_util::sync::CancellationToken;

use protocol::{jsonrpc::IdKey, limits::STDIO_LINE_MAX_BYTES};

use crate::{
    Runtime,
    call::tool_set::ToolSet,
    mcp::{server::McpServer, tool_set::ToolSetServer},
    policy::Principal,
};

mod framing;
mod writer;

pub use framing::LineAssembly;
pub use writer::{
    OutputClosed, STDOUT_CHECK_INTERVAL, raw_stdout, stdout_closed, stdout_reader_gone,
};

use framing::{
    Frame, Kind, cancelled_request, classify, error_line, is_discover, read_bounded_line,
    request_id,
};
use writer::{OutQueue, Outgoing, widen_stdout_pipe, write_loop, write_thread};

/// Outgoing messages queued for the writer.
const OUTGOING_QUEUE: usize = 256;

/// Serves one MCP session for the local principal over `input`/`output` until `input` ends.
///
/// # Errors
/// Reading or writing the streams failed before the session started.
pub async fn serve<R, W>(runtime: Arc<Runtime>, input: R, output: W) -> io::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    serve_transport(runtime, StdioTransport::new(input, output)).await
}

/// Serves one MCP session for the local principal over this process's stdin and stdout until
/// stdin ends.
///
/// Unlike [`serve`] with `tokio::io::stdout()`, a dedicated thread serializes each message
/// straight into file descriptor 1 (see [`StdioTransport::with_blocking_output`]): Tokio's
/// stdout copies every write into its own buffer and hands it to a blocking-pool thread, and
/// `std::io::Stdout` scans every write for its last newline. When stdout is a pipe, its capacity is
/// raised to 1 MiB where the system allows it (Linux `F_SETPIPE_SZ`, best effort), so a
/// megabyte line leaves in a few writes instead of one per 64 KiB the client has read.
///
/// # Errors
/// Reading or writing the streams failed before the session started.
pub async fn serve_process_stdio(runtime: Arc<Runtime>) -> io::Result<()> {
    let (transport, writer) = process_transport()?;
    let served = serve_transport(runtime, transport).await;
    finish_process_stdout(writer).await;
    served
}

/// Serves `set` ([`ToolSet`]: tools without a runtime, the delegation worker's) on this
/// process's stdin and stdout until stdin ends, written as [`serve_process_stdio`] writes. At
/// the end of input, calls still running are answered before it returns (rmcp waits up to 5 s
/// for them; their answers are then written out).
///
/// # Errors
/// Stdout cannot be duplicated.
pub async fn serve_tool_set(set: Arc<dyn ToolSet>) -> io::Result<()> {
    let (transport, writer) = process_transport()?;
    // The process exits when this returns: the answers of calls still running at the end of
    // input (rmcp drains them for a few seconds) are written before it does.
    match ToolSetServer::new(set).serve(transport).await {
        Ok(running) => {
            let _ = running.waiting().await;
        }
        Err(e) => tracing::info!(error = %e, "the MCP session ended before it started"),
    }
    finish_process_stdout(writer).await;
    Ok(())
}

/// This process's stdin and stdout as a [`StdioTransport`] (each answer written straight into
/// file descriptor 1 by a thread; the pipe widened), and that writer thread, for
/// [`finish_process_stdout`] once the session is over.
///
/// # Errors
/// Stdout cannot be duplicated.
fn process_transport() -> io::Result<(StdioTransport, std::thread::JoinHandle<()>)> {
    widen_stdout_pipe();
    Ok(StdioTransport::blocking(tokio::io::stdin(), raw_stdout()?))
}

/// After the session over [`process_transport`]'s transport ended (and the transport was
/// dropped): waits, at most [`STDOUT_DRAIN_WAIT`], for its writer thread to write the lines
/// still queued (a result that was running when stdin ended), unless the client stopped
/// reading. Without it a process that exits right after its session can lose those answers.
async fn finish_process_stdout(writer: std::thread::JoinHandle<()>) {
    let drained = tokio::task::spawn_blocking(move || writer.join());
    if tokio::time::timeout(STDOUT_DRAIN_WAIT, drained)
        .await
        .is_err()
    {
        tracing::warn!("stdout is not being read; exiting with answers unwritten");
    }
}

/// How long [`serve_process_stdio`] waits, after stdin ended, for queued answers to be written.
pub const STDOUT_DRAIN_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

async fn serve_transport(runtime: Arc<Runtime>, transport: StdioTransport) -> io::Result<()> {
    let server = McpServer::new(runtime.access(None), Principal::local());
    match server.serve(transport).await {
        Ok(running) => {
            let _ = running.waiting().await;
            Ok(())
        }
        // The input ended without an initialize: the client spoke MCP 2026-07-28 only (requests
        // without a session are answered while rmcp waits for one), or sent nothing.
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => {
            tracing::info!("stdio input ended (no initialize: a 2026-07-28 client or none)");
            Ok(())
        }
        Err(e) => {
            // The handshake failed: nothing left to serve.
            tracing::info!(error = %e, "stdio session ended before it started");
            Ok(())
        }
    }
}

/// An rmcp [`Transport`] over a byte stream pair, with the framing rules of the module docs.
/// The session ends when the input ends or the output can no longer be written.
pub struct StdioTransport {
    incoming: mpsc::Receiver<ClientJsonRpcMessage>,
    outgoing: OutQueue,
    in_flight: InFlight,
    /// Cancelled by the writer when a write fails: nothing can be answered any more.
    output_closed: CancellationToken,
}

impl std::fmt::Debug for StdioTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StdioTransport").finish_non_exhaustive()
    }
}

impl StdioTransport {
    /// Starts the reader and writer tasks; both end when `input` ends and the transport is dropped.
    pub fn new<R, W>(input: R, output: W) -> Self
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (out_tx, out_rx) = mpsc::channel(OUTGOING_QUEUE);
        let closed = CancellationToken::new();
        tokio::spawn(write_loop(output, out_rx, closed.clone()));
        Self::with_queue(input, OutQueue::Task(out_tx), closed)
    }

    /// Like [`StdioTransport::new`], but lines are written to a blocking `output` by a dedicated
    /// thread, without the copy an async adapter of a blocking stream makes. The thread ends
    /// when the transport and its reader are gone and every queued line is written, or when a
    /// write fails.
    ///
    /// # Panics
    /// The operating system refused to start a thread.
    pub fn with_blocking_output<R, W>(input: R, output: W) -> Self
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: io::Write + Send + 'static,
    {
        Self::blocking(input, output).0
    }

    /// [`StdioTransport::with_blocking_output`] and its writer thread, which ends once every
    /// line queued before the transport was dropped is written.
    fn blocking<R, W>(input: R, output: W) -> (Self, std::thread::JoinHandle<()>)
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: io::Write + Send + 'static,
    {
        let (out_tx, out_rx) = std::sync::mpsc::sync_channel(OUTGOING_QUEUE);
        let closed = CancellationToken::new();
        let on_failure = closed.clone();
        #[allow(clippy::expect_used)]
        let writer = std::thread::Builder::new()
            .name("stdout-writer".into())
            .spawn(move || {
                write_thread(output, out_rx);
                on_failure.cancel();
            })
            .expect("starting the stdout writer thread");
        let transport = Self::with_queue(input, OutQueue::Thread(out_tx), closed);
        (transport, writer)
    }

    fn with_queue<R>(input: R, outgoing: OutQueue, output_closed: CancellationToken) -> Self
    where
        R: AsyncRead + Unpin + Send + 'static,
    {
        let (in_tx, in_rx) = mpsc::channel(64);
        let in_flight = InFlight::default();
        tokio::spawn(read_loop(
            BufReader::new(input),
            in_tx,
            outgoing.clone(),
            in_flight.clone(),
        ));
        Self {
            incoming: in_rx,
            outgoing,
            in_flight,
            output_closed,
        }
    }
}

/// Ids of the client's requests that are delivered and not yet answered (or cancelled).
#[derive(Debug, Clone, Default)]
struct InFlight(Arc<lock::Lock<::protocol::delivery::InFlight<()>>>);

impl InFlight {
    /// Records `id` as in flight; `false` when it already is.
    fn begin(&self, id: &Value) -> bool {
        self.0.lock().begin(IdKey::of(id), None, ()).is_ok()
    }

    fn end(&self, id: &Value) {
        self.0.lock().end(&IdKey::of(id));
    }
}

impl Transport<RoleServer> for StdioTransport {
    type Error = OutputClosed;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let answered = match &item {
            rmcp::model::JsonRpcMessage::Response(r) => Some(r.id.clone()),
            rmcp::model::JsonRpcMessage::Error(e) => e.id.clone(),
            _ => None,
        };
        if let Some(id) = answered {
            self.in_flight.end(&id.into_json_value());
        }
        let tx = self.outgoing.clone();
        async move { tx.send(Outgoing::Message(Box::new(item))).await }
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        tokio::select! {
            msg = self.incoming.recv() => msg,
            () = self.output_closed.cancelled() => {
                tracing::info!("stdout is closed; ending the session");
                None
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.incoming.close();
        Ok(())
    }
}

async fn read_loop<R: AsyncBufRead + Unpin>(
    mut input: R,
    deliver: mpsc::Sender<ClientJsonRpcMessage>,
    reply: OutQueue,
    in_flight: InFlight,
) {
    let mut line = Vec::with_capacity(8 * 1024);
    let mut initialized = false;
    // A 2026-07-28 request other than discover was delivered: the client uses the stateless
    // lifecycle, and its notifications (cancellation) must reach the server.
    let mut stateless = false;
    loop {
        line.clear();
        let over = match read_bounded_line(&mut input, &mut line, STDIO_LINE_MAX_BYTES).await {
            Ok(None) => break,
            Ok(Some(over)) => over,
            Err(e) => {
                tracing::warn!(error = %e, "reading stdin failed");
                break;
            }
        };
        let frame = if over {
            Frame::Reject(error_line(
                &Value::Null,
                -32600,
                &format!("message longer than {STDIO_LINE_MAX_BYTES} bytes"),
            ))
        } else {
            classify(&line, initialized)
        };
        match frame {
            Frame::Skip => {}
            Frame::Reject(raw) => {
                if reply.send(Outgoing::Raw(raw)).await.is_err() {
                    break;
                }
            }
            Frame::Deliver(msg, kind) => {
                let msg = *msg;
                let refusal = match kind {
                    Kind::Initialize if initialized => {
                        Some("the session is already initialized; initialize happens once")
                    }
                    _ => None,
                };
                if let Some(why) = refusal {
                    if reply
                        .send(Outgoing::Raw(error_line(&request_id(&msg), -32600, why)))
                        .await
                        .is_err()
                    {
                        break;
                    }
                    continue;
                }
                if !initialized {
                    match kind {
                        Kind::Initialize => initialized = true,
                        Kind::PreInitRequest => {}
                        Kind::Stateless => stateless |= !is_discover(&msg),
                        Kind::Other if stateless => {}
                        Kind::Request => {
                            let id = request_id(&msg);
                            let raw = error_line(
                                &id,
                                -32600,
                                "the session is not initialized: send initialize first",
                            );
                            if reply.send(Outgoing::Raw(raw)).await.is_err() {
                                break;
                            }
                            continue;
                        }
                        Kind::Other => {
                            tracing::debug!("dropping a message received before initialize");
                            continue;
                        }
                    }
                }
                let id = request_id(&msg);
                if !id.is_null() && !in_flight.begin(&id) {
                    let raw = error_line(
                        &id,
                        -32600,
                        &format!("request id {id} is already in use by a request in flight"),
                    );
                    if reply.send(Outgoing::Raw(raw)).await.is_err() {
                        break;
                    }
                    continue;
                }
                if let Some(cancelled) = cancelled_request(&msg) {
                    // rmcp sends no answer for a cancelled request: its id is free again.
                    in_flight.end(&cancelled);
                }
                if deliver.send(msg).await.is_err() {
                    break;
                }
            }
        }
    }
    tracing::debug!("stdin closed");
}

#[cfg(test)]
mod fuzz;
