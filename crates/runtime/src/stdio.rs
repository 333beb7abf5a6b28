//! MCP over stdio: newline-delimited JSON-RPC (MCP 2025-11-25 Transports §stdio).
//!
//! Framing rules, checked here before a message reaches the server:
//! - A line longer than [`STDIO_LINE_MAX_BYTES`] is skipped and answered with -32600.
//! - Invalid JSON is answered with -32700 (Parse error), `id: null` (JSON-RPC 2.0 §5).
//! - A batch (a JSON array) is answered with -32600: MCP since 2025-06-18 has no batches.
//! - A message that is not a JSON-RPC 2.0 request, notification or response is answered with
//!   -32600, with its `id` when it had a usable one.
//! - `server/discover` (the 2026-07-28 stateless probe) is answered with -32601 so the client falls
//!   back to `initialize`; this server does not serve that revision.
//! - Before `initialize`, a request other than `initialize` and `ping` is answered with -32600
//!   "not initialized"; notifications and responses are dropped.
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

use protocol::limits::STDIO_LINE_MAX_BYTES;

use crate::{Runtime, context::Principal, server::McpServer};

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
    let transport = StdioTransport::new(input, output);
    let server = McpServer::new(runtime.access(None), Principal::local());
    match server.serve(transport).await {
        Ok(running) => {
            let _ = running.waiting().await;
            Ok(())
        }
        Err(e) => {
            // The input ended before initialize, or the handshake failed: nothing left to serve.
            tracing::info!(error = %e, "stdio session ended before it started");
            Ok(())
        }
    }
}

enum Outgoing {
    Message(Box<ServerJsonRpcMessage>),
    Raw(String),
}

/// An rmcp [`Transport`] over a byte stream pair, with the framing rules of the module docs.
pub struct StdioTransport {
    incoming: mpsc::Receiver<ClientJsonRpcMessage>,
    outgoing: mpsc::Sender<Outgoing>,
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
        let (in_tx, in_rx) = mpsc::channel(64);
        tokio::spawn(write_loop(output, out_rx));
        tokio::spawn(read_loop(BufReader::new(input), in_tx, out_tx.clone()));
        Self {
            incoming: in_rx,
            outgoing: out_tx,
        }
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
        let tx = self.outgoing.clone();
        async move {
            tx.send(Outgoing::Message(Box::new(item)))
                .await
                .map_err(|_| OutputClosed)
        }
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        self.incoming.recv().await
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.incoming.close();
        Ok(())
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(mut output: W, mut rx: mpsc::Receiver<Outgoing>) {
    while let Some(msg) = rx.recv().await {
        let mut line = match msg {
            Outgoing::Raw(s) => s,
            Outgoing::Message(m) => match serde_json::to_string(&m) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(error = %e, "could not serialize an outgoing message");
                    continue;
                }
            },
        };
        line.push('\n');
        if output.write_all(line.as_bytes()).await.is_err() {
            return;
        }
        if rx.is_empty() && output.flush().await.is_err() {
            return;
        }
    }
    let _ = output.flush().await;
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
    Request,
    Other,
}

async fn read_loop<R: AsyncBufRead + Unpin>(
    mut input: R,
    deliver: mpsc::Sender<ClientJsonRpcMessage>,
    reply: mpsc::Sender<Outgoing>,
) {
    let mut line = Vec::with_capacity(8 * 1024);
    let mut initialized = false;
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
                if !initialized {
                    match kind {
                        Kind::Initialize => initialized = true,
                        Kind::PreInitRequest => {}
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
    if method.as_deref() == Some("server/discover") && !id.is_null() {
        // The 2026-07-28 probe: an error makes clients fall back to initialize.
        return Frame::Reject(error_line(
            &id,
            -32601,
            "server/discover is not supported: negotiate 2025-11-25, 2025-06-18 or 2025-03-26 with initialize",
        ));
    }
    let kind = match (method.as_deref(), id.is_null()) {
        (Some("initialize"), false) => Kind::Initialize,
        (Some("ping"), false) => Kind::PreInitRequest,
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

fn error_line(id: &Value, code: i64, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string()
}

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
