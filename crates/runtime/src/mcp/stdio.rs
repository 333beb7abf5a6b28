//! MCP over stdio: newline-delimited JSON-RPC (MCP 2025-11-25 Transports §stdio).
//!
//! Framing rules, checked here before a message reaches the server:
//! - A line longer than [`STDIO_LINE_MAX_BYTES`] is skipped and answered with -32600.
//! - Invalid JSON is answered with -32700 (Parse error), `id: null` (JSON-RPC 2.0 §5).
//! - A batch (a JSON array) is answered with -32600: MCP since 2025-06-18 has no batches.
//! - A message that is not a JSON-RPC 2.0 request, notification or response is answered with
//!   -32600, with its `id` when it had a usable one.
//! - Both MCP eras, per request (MCP 2026-07-28 Basic › Transports › stdio): `server/discover` and
//!   any request whose `params._meta` names `io.modelcontextprotocol/protocolVersion` go to the
//!   server without `initialize` (rmcp checks the rest of the per-request fields); a client may
//!   probe with `server/discover` and then `initialize` on the same connection.
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
use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader},
    sync::mpsc,
};
use tokio_util::sync::CancellationToken;

use protocol::limits::STDIO_LINE_MAX_BYTES;

use crate::{
    Runtime,
    mcp::{context::Principal, server::McpServer},
};

/// The per-request protocol version field of MCP 2026-07-28 (Basic §Per-request protocol
/// fields), in a request's `params._meta`.
const PROTOCOL_VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";

fn is_discover(msg: &ClientJsonRpcMessage) -> bool {
    matches!(
        msg,
        rmcp::model::JsonRpcMessage::Request(r)
            if matches!(r.request, rmcp::model::ClientRequest::DiscoverRequest(_))
    )
}

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
    widen_stdout_pipe();
    let (transport, writer) = StdioTransport::blocking(tokio::io::stdin(), raw_stdout()?);
    let served = serve_transport(runtime, transport).await;
    // The session is over and every sender is gone: let the writer finish the lines still
    // queued (a result that was running when stdin ended), unless the client stopped reading.
    let drained = tokio::task::spawn_blocking(move || writer.join());
    if tokio::time::timeout(STDOUT_DRAIN_WAIT, drained)
        .await
        .is_err()
    {
        tracing::warn!("stdout is not being read; exiting with answers unwritten");
    }
    served
}

/// How long [`serve_process_stdio`] waits, after stdin ended, for queued answers to be written.
pub const STDOUT_DRAIN_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A writer to file descriptor 1 without `std::io::Stdout`'s line buffering, which scans every
/// write for its last newline (a megabyte per result); the writer thread buffers by itself.
/// Nothing else writes to stdout in a stdio session (module docs).
fn raw_stdout() -> io::Result<std::fs::File> {
    use std::os::fd::AsFd;
    Ok(std::fs::File::from(
        io::stdout().as_fd().try_clone_to_owned()?,
    ))
}

fn widen_stdout_pipe() {
    use std::os::fd::AsFd;
    crate::process::widen_pipe(io::stdout().as_fd());
}

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

enum Outgoing {
    Message(Box<ServerJsonRpcMessage>),
    Raw(String),
}

/// The queue to the line writer: a Tokio task (async output) or a thread (blocking output).
#[derive(Clone)]
enum OutQueue {
    Task(mpsc::Sender<Outgoing>),
    Thread(std::sync::mpsc::SyncSender<Outgoing>),
}

impl OutQueue {
    /// Queues `msg`; waits while the queue is full (the client is not reading).
    async fn send(&self, msg: Outgoing) -> Result<(), OutputClosed> {
        match self {
            OutQueue::Task(tx) => tx.send(msg).await.map_err(|_| OutputClosed),
            OutQueue::Thread(tx) => match tx.try_send(msg) {
                Ok(()) => Ok(()),
                Err(std::sync::mpsc::TrySendError::Disconnected(_)) => Err(OutputClosed),
                Err(std::sync::mpsc::TrySendError::Full(msg)) => {
                    // Wait for room off the async workers.
                    let tx = tx.clone();
                    tokio::task::spawn_blocking(move || tx.send(msg))
                        .await
                        .map_err(|_| OutputClosed)?
                        .map_err(|_| OutputClosed)
                }
            },
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
struct InFlight(Arc<std::sync::Mutex<std::collections::HashSet<String>>>);

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records `id` as in flight; `false` when it already is.
    fn begin(&self, id: &Value) -> bool {
        self.lock().insert(id.to_string())
    }

    fn end(&self, id: &Value) {
        self.lock().remove(&id.to_string());
    }
}

/// The transport's writer is gone (stdout closed).
#[derive(Debug, thiserror::Error)]
#[error("stdout is closed")]
pub struct OutputClosed;

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

/// How long a writer keeps its line buffer after the last message (see [`Lines`]).
const KEEP_LINE_BUFFER: std::time::Duration = std::time::Duration::from_secs(1);

/// The writers' line buffer. Messages are serialized into one buffer that is reused while
/// messages keep coming (a stream of megabyte `read_process` results would otherwise fault in
/// fresh pages for every line) and released after [`KEEP_LINE_BUFFER`] without messages, so an
/// idle server does not keep a megabyte line alive.
#[derive(Default)]
struct Lines(Vec<u8>);

impl Lines {
    /// `msg` as one `\n`-terminated line, or `None` if it cannot be serialized (logged).
    fn encode(&mut self, msg: Outgoing) -> Option<&[u8]> {
        self.0.clear();
        match msg {
            Outgoing::Raw(s) => self.0.extend_from_slice(s.as_bytes()),
            Outgoing::Message(m) => {
                if let Err(e) = crate::mcp::json::to_writer(&mut self.0, &m) {
                    tracing::error!(error = %e, "could not serialize an outgoing message");
                    return None;
                }
            }
        }
        self.0.push(b'\n');
        Some(&self.0)
    }

    fn release(&mut self) {
        self.0 = Vec::new();
    }
}

/// Writes each outgoing message as one line to an async `output`.
async fn write_loop<W: AsyncWrite + Unpin>(
    mut output: W,
    mut rx: mpsc::Receiver<Outgoing>,
    closed: CancellationToken,
) {
    let mut lines = Lines::default();
    loop {
        let msg = match tokio::time::timeout(KEEP_LINE_BUFFER, rx.recv()).await {
            Ok(Some(msg)) => msg,
            Ok(None) => break,
            Err(_idle) => {
                lines.release();
                continue;
            }
        };
        let Some(line) = lines.encode(msg) else {
            continue;
        };
        if output.write_all(line).await.is_err() || (rx.is_empty() && output.flush().await.is_err())
        {
            closed.cancel();
            return;
        }
    }
    let _ = output.flush().await;
}

/// Writes each outgoing message as one line to a blocking `output`, on its own thread.
fn write_thread<W: io::Write>(output: W, rx: std::sync::mpsc::Receiver<Outgoing>) {
    use std::sync::mpsc::RecvTimeoutError;
    let mut out = io::BufWriter::with_capacity(WRITE_CHUNK, output);
    let mut next = rx.recv().ok();
    while let Some(mut msg) = next.take() {
        // The serializer's scratch buffer (as large as the longest string escaped so far) lives
        // while messages keep coming, and is freed after KEEP_LINE_BUFFER without any.
        let mut json = sonic_rs::writer::BufferedWriter::new(&mut out);
        loop {
            if write_line(&mut json, msg).is_err() {
                return;
            }
            match rx.recv_timeout(KEEP_LINE_BUFFER) {
                Ok(m) => msg = m,
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
        drop(json);
        // The answers of a burst are freed only as they are written, which can be after the
        // runtime's idle trim ran: give the memory back now that the writer is idle too.
        crate::memory::trim();
        next = rx.recv().ok();
    }
}

/// Buffer size of [`write_thread`]: small parts of a message are gathered up to this size;
/// a longer string goes to the output in one write.
const WRITE_CHUNK: usize = 64 * 1024;

/// Serializes `msg` straight into `out` and ends the line. A megabyte result leaves as it is
/// serialized (a few writes: one per long string), so the client reads its first part while
/// the rest is being escaped, and no line-sized buffer is built first (measured on a paced
/// 100 MB `read_process` stream, median of 5 runs: about 155 → 200 MB/s).
///
/// # Errors
/// Writing failed. A serialization error (impossible for the rmcp message types, whose maps
/// have string keys) is logged and ends the line where it stopped, so the next message still
/// starts on a line of its own.
fn write_line<J: sonic_rs::writer::WriteExt>(out: &mut J, msg: Outgoing) -> io::Result<()> {
    match msg {
        Outgoing::Raw(s) => out.write_all(s.as_bytes())?,
        Outgoing::Message(m) => {
            if let Err(e) = sonic_rs::to_writer(&mut *out, &m) {
                if e.is_io() {
                    return Err(io::Error::other(e));
                }
                tracing::error!(error = %e, "could not serialize an outgoing message");
            }
        }
    }
    out.write_all(b"\n")?;
    out.flush()
}

/// What one input line turned out to be.
#[derive(Debug)]
enum Frame {
    Skip,
    Deliver(Box<ClientJsonRpcMessage>, Kind),
    Reject(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Initialize,
    PreInitRequest,
    /// A 2026-07-28 request: `server/discover`, or one carrying the per-request `_meta` fields.
    Stateless,
    Request,
    Other,
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
            classify(&line)
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

/// Reads one `\n`-terminated line into `buf` (without the `\n`). Returns `None` at end of input,
/// `Some(true)` when the line was longer than `max` (its bytes are discarded).
async fn read_bounded_line<R: AsyncBufRead + Unpin>(
    input: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> io::Result<Option<bool>> {
    let mut over = false;
    let mut read_any = false;
    loop {
        let chunk = input.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(if read_any { Some(over) } else { None });
        }
        read_any = true;
        let (take, done) = match memchr::memchr(b'\n', chunk) {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        let data = if done {
            &chunk[..take - 1]
        } else {
            &chunk[..take]
        };
        if !over {
            if buf.len() + data.len() > max {
                over = true;
                buf.clear();
            } else {
                buf.extend_from_slice(data);
            }
        }
        input.consume(take);
        if done {
            return Ok(Some(over));
        }
    }
}

fn classify(line: &[u8]) -> Frame {
    let trimmed = line.strip_suffix(b"\r").unwrap_or(line);
    if trimmed.iter().all(u8::is_ascii_whitespace) {
        return Frame::Skip;
    }
    let value: Value = match serde_json::from_slice(trimmed) {
        Ok(v) => v,
        Err(e) => {
            return Frame::Reject(error_line(
                &Value::Null,
                -32700,
                &format!("parse error: {e}"),
            ));
        }
    };
    let obj = match &value {
        Value::Object(o) => o,
        Value::Array(_) => {
            return Frame::Reject(error_line(
                &Value::Null,
                -32600,
                "JSON-RPC batches are not supported: send one message per line",
            ));
        }
        _ => {
            return Frame::Reject(error_line(
                &Value::Null,
                -32600,
                "a JSON-RPC message must be an object",
            ));
        }
    };
    let id = match obj.get("id") {
        Some(v @ Value::String(_)) => v.clone(),
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Value::Number(n.clone()),
        Some(_) => {
            return Frame::Reject(error_line(
                &Value::Null,
                -32600,
                "id must be a string or an integer",
            ));
        }
        None => Value::Null,
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Frame::Reject(error_line(&id, -32600, "jsonrpc must be \"2.0\""));
    }
    let method = obj.get("method").and_then(Value::as_str).map(str::to_owned);
    if let Some(params) = obj.get("params")
        && !params.is_object()
    {
        if id.is_null() {
            return Frame::Skip;
        }
        return Frame::Reject(error_line(&id, -32602, "params must be an object"));
    }
    let per_request_version = obj
        .get("params")
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(PROTOCOL_VERSION_META))
        .is_some();
    let kind = match (method.as_deref(), id.is_null()) {
        (Some("initialize"), false) => Kind::Initialize,
        (Some("ping"), false) => Kind::PreInitRequest,
        (Some("server/discover"), false) => Kind::Stateless,
        (Some(_), false) if per_request_version => Kind::Stateless,
        (Some(_), false) => Kind::Request,
        _ => Kind::Other,
    };
    match serde_json::from_value::<ClientJsonRpcMessage>(value) {
        Ok(msg) => Frame::Deliver(Box::new(msg), kind),
        Err(e) if !id.is_null() => Frame::Reject(error_line(
            &id,
            -32600,
            &format!("not a valid JSON-RPC message: {e}"),
        )),
        Err(e) => {
            tracing::debug!(error = %e, "dropping an invalid notification");
            Frame::Skip
        }
    }
}

fn request_id(msg: &ClientJsonRpcMessage) -> Value {
    match msg {
        rmcp::model::JsonRpcMessage::Request(r) => r.id.clone().into_json_value(),
        _ => Value::Null,
    }
}

/// The id a `notifications/cancelled` names, if `msg` is one.
fn cancelled_request(msg: &ClientJsonRpcMessage) -> Option<Value> {
    match msg {
        rmcp::model::JsonRpcMessage::Notification(n) => match &n.notification {
            rmcp::model::ClientNotification::CancelledNotification(c) => c
                .params
                .request_id
                .clone()
                .map(rmcp::model::NumberOrString::into_json_value),
            _ => None,
        },
        _ => None,
    }
}

fn error_line(id: &Value, code: i64, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string()
}

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;

    fn reject_code(line: &str) -> (i64, Value) {
        match classify(line.as_bytes()) {
            Frame::Reject(raw) => {
                let v: Value = serde_json::from_str(&raw).unwrap();
                (v["error"]["code"].as_i64().unwrap(), v["id"].clone())
            }
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn framing_errors_get_json_rpc_errors() {
        assert_eq!(reject_code("{not json"), (-32700, Value::Null));
        assert_eq!(reject_code("[1,2]"), (-32600, Value::Null));
        assert_eq!(reject_code("42"), (-32600, Value::Null));
        assert_eq!(
            reject_code(r#"{"id":7,"method":"ping"}"#),
            (-32600, json!(7))
        );
        assert_eq!(
            reject_code(r#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":[1]}"#),
            (-32602, json!("a"))
        );
        assert_eq!(
            reject_code(r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#),
            (-32600, Value::Null)
        );
    }

    #[test]
    fn valid_messages_are_delivered() {
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#),
            Frame::Deliver(_, Kind::Initialize)
        ));
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Frame::Deliver(_, Kind::Other)
        ));
        assert!(matches!(classify(b"   "), Frame::Skip));
    }

    /// The writer thread serializes straight into the pipe, a few writes per message: a
    /// megabyte result must still arrive as one intact line, its mirror equal to its
    /// structured content, with every character class that JSON escapes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn blocking_output_streams_megabyte_results_intact() {
        use std::io::BufRead;
        use tokio::io::AsyncWriteExt;

        let dir = tempfile::tempdir().unwrap();
        let mut text = String::new();
        while text.len() < 1_500_000 {
            text.push_str("line \"quoted\" \\ tab\t \u{e9} \u{1f600} \u{1} \u{2028}\r\n");
        }
        std::fs::write(dir.path().join("big.txt"), &text).unwrap();
        let runtime = Arc::new(
            Runtime::new(crate::RuntimeConfig {
                workspace: dir.path().into(),
                policy: crate::policy::Policy::profile(crate::policy::Profile::Full),
                default_yield_after: None,
            })
            .unwrap(),
        );
        let (input, mut client) = tokio::io::duplex(1 << 16);
        let (reader, writer) = std::io::pipe().unwrap();
        let session = tokio::spawn(serve_transport(
            runtime,
            StdioTransport::with_blocking_output(input, writer),
        ));
        let lines = tokio::task::spawn_blocking(move || {
            let mut r = std::io::BufReader::new(reader);
            (0..3)
                .map(|_| {
                    let mut l = String::new();
                    r.read_line(&mut l).unwrap();
                    l
                })
                .collect::<Vec<_>>()
        });
        let requests = [
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"}}}),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                "name": "read_file", "arguments": {"path": "big.txt", "max_bytes": 4_000_000}}}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}),
        ];
        for r in requests {
            client.write_all(format!("{r}\n").as_bytes()).await.unwrap();
        }
        // Every line parses; the ping may be answered while read_file runs.
        let mut by_id: Vec<Value> = lines
            .await
            .unwrap()
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        by_id.sort_by_key(|v| v["id"].as_i64());
        let read = &by_id[1];
        assert_eq!(read["id"], 1);
        let structured = &read["result"]["structuredContent"];
        assert_eq!(structured["content"], text);
        let mirror = read["result"]["content"][0]["text"].as_str().unwrap();
        assert_eq!(&serde_json::from_str::<Value>(mirror).unwrap(), structured);
        assert_eq!(by_id[2], json!({"jsonrpc": "2.0", "id": 2, "result": {}}));
        drop(client);
        session.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn long_lines_are_skipped_whole() {
        let data = format!("{}\n{{\"a\":1}}\n", "x".repeat(100));
        let mut r = BufReader::with_capacity(16, data.as_bytes());
        let mut buf = Vec::new();
        assert_eq!(
            read_bounded_line(&mut r, &mut buf, 50).await.unwrap(),
            Some(true)
        );
        buf.clear();
        assert_eq!(
            read_bounded_line(&mut r, &mut buf, 50).await.unwrap(),
            Some(false)
        );
        assert_eq!(buf, b"{\"a\":1}");
        buf.clear();
        assert_eq!(read_bounded_line(&mut r, &mut buf, 50).await.unwrap(), None);
    }
}
