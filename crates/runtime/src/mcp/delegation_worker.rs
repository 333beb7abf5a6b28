//! The MCP server a delegation worker connects to (`machine-mcp delegation worker-mcp`, issue 19
//! item 4; its entry point is `tools::delegation::worker_mcp`): the agent that runs a delegation starts it as its `machine_bridge` MCP server, with
//! the variables `tools::delegation::engine::worker::WorkerAccess::grant` gave the run
//! ([`SOCKET_VAR`], [`REQUEST_VAR`], [`CAPABILITY_VAR`]).
//!
//! It authenticates over the server's owner-only worker socket (the HMAC challenge of
//! `tools::delegation::engine::worker`) before it serves anything, then serves MCP over stdio (the project's
//! stdio transport) with three tools that forward to the socket: `delegate` (a child request
//! inside the worker's project), `read_delegation` and `list_delegations` (the worker's own
//! tree). An error the socket answers becomes a tool error with its code; the capability
//! expires when the worker's run ends, and calls then fail with `policy_denied` (detail
//! `socket_error: "invalid_capability"`).

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
};

use rmcp::{
    ErrorData, RoleServer, ServerHandler, ServiceExt,
    model::{
        CallToolRequestParams, CallToolResponse, Implementation, JsonObject, ListToolsResult,
        PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig, Tool,
        ToolAnnotations,
    },
    service::RequestContext,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use serde_json::{Map, Value, json};
use tokio::{
    io::BufReader,
    net::{UnixStream, unix::OwnedReadHalf},
    sync::{mpsc, oneshot},
    task::AbortHandle,
};

use protocol::limits::{
    DELEGATION_PROMPT_MAX_BYTES, DELEGATION_SOCKET_AUTH_TIMEOUT,
    DELEGATION_SOCKET_REQUESTS_IN_FLIGHT_MAX, RESULT_TEXT_DEFAULT_CHARS,
};

use crate::tools::delegation::engine::{
    ReceiptSummary,
    agents::Agent,
    store::Receipt,
    worker::{
        CAPABILITY_VAR, FrameError, REQUEST_VAR, SOCKET_VAR, challenge_mac, read_frame, write_frame,
    },
};
use crate::{
    call::{
        catalog,
        error::{ToolError, ToolErrorCode},
        result::{error_result, structured_result},
        text::{self, TextView},
    },
    mcp::stdio,
};

/// Why the worker MCP server could not serve.
#[derive(Debug, thiserror::Error)]
pub enum WorkerMcpError {
    /// A variable the run gives its worker is missing: the command was not started by an agent
    /// that machine-mcp runs as a delegation worker.
    #[error(
        "{0} is not set: `machine-mcp delegation worker-mcp` is the MCP server of an agent that \
         machine-mcp runs as a delegation worker, started with the variables that run was given \
         ({SOCKET_VAR}, {REQUEST_VAR}, {CAPABILITY_VAR})"
    )]
    MissingVar(&'static str),
    /// The capability variable is not 64 hex digits.
    #[error("{CAPABILITY_VAR} is not 64 hex digits")]
    BadCapability,
    /// The socket cannot be reached.
    #[error("cannot connect to the delegation socket {path}: {source}")]
    Connect {
        /// The socket's path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The socket refused this worker (`not_owner`, `invalid_capability`, `busy`, ...).
    #[error("the delegation socket refused this worker: {0}")]
    Refused(String),
    /// The socket answered something this program does not understand.
    #[error("the delegation socket: {0}")]
    Protocol(String),
}

impl WorkerMcpError {
    /// The process exit status for this error: 2 when the environment is not a worker's (a
    /// usage error), 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::MissingVar(_) | Self::BadCapability => 2,
            _ => 1,
        }
    }
}

/// Serves the worker MCP server on this process's stdin and stdout until stdin ends (module
/// docs). Reads [`SOCKET_VAR`], [`REQUEST_VAR`] and [`CAPABILITY_VAR`], connects to the socket
/// and authenticates before it reads stdin. At the end of input, calls still running are
/// answered before it returns (rmcp waits up to 5 s for them; their answers are then written
/// out, as `machine-mcp stdio` does).
///
/// # Errors
/// [`WorkerMcpError::MissingVar`] / [`WorkerMcpError::BadCapability`] for the environment
/// (exit status 2: [`WorkerMcpError::exit_code`]); [`WorkerMcpError::Connect`],
/// [`WorkerMcpError::Refused`] or [`WorkerMcpError::Protocol`] when the socket cannot be used.
pub async fn serve_worker_mcp() -> Result<(), WorkerMcpError> {
    let var = |name: &'static str| {
        std::env::var(name)
            .ok()
            .filter(|v| !v.is_empty())
            .ok_or(WorkerMcpError::MissingVar(name))
    };
    let socket = PathBuf::from(var(SOCKET_VAR)?);
    let request_id = var(REQUEST_VAR)?;
    let capability = hex::decode(var(CAPABILITY_VAR)?)
        .ok()
        .filter(|c| c.len() == 32)
        .ok_or(WorkerMcpError::BadCapability)?;
    let connection = Connection::open(socket, &request_id, &capability).await?;
    let server = WorkerServer {
        connection: Arc::new(connection),
        tools: Arc::new(tools()),
    };
    // The process exits when this returns: the answers of calls still running at the end of
    // input (rmcp drains them for a few seconds) are written before it does.
    let (transport, writer) = stdio::process_transport()
        .map_err(|e| WorkerMcpError::Protocol(format!("cannot write to stdout: {e}")))?;
    match server.serve(transport).await {
        Ok(running) => {
            let _ = running.waiting().await;
        }
        Err(e) => tracing::info!(error = %e, "the worker MCP session ended before it started"),
    }
    stdio::finish_process_stdout(writer).await;
    Ok(())
}

/// `delegate` as a worker calls it.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct DelegateArgs {
    /// The agent CLI that does the work: codex, claude or gemini.
    agent: Agent,
    /// The task, as the agent should read it (UTF-8, at most 256 KiB).
    prompt: String,
    /// The directory the agent works in: relative to this worker's project directory, or
    /// absolute inside it (default: the project directory itself).
    #[serde(default = "project_dir")]
    path: String,
    /// A new UUID you choose (e.g. `0e5bd5c2-7a1e-4c1b-9a0f-3c8d2b6f4e11`); calling again with
    /// the same id and arguments returns the same receipt instead of starting a second run.
    request_id: String,
}

/// The default `path` of a worker's `delegate`: its own project directory (the main server's
/// `delegate` defaults to its workspace root in the same way).
fn project_dir() -> String {
    ".".to_owned()
}

/// `read_delegation` as a worker calls it.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    /// The request id given to `delegate`.
    request_id: String,
    /// Milliseconds to wait for the delegation to end before answering (0 to 60000; default 0).
    #[serde(default)]
    #[schemars(range(max = 60_000))]
    wait_ms: u64,
}

/// `list_delegations` as a worker calls it (no arguments).
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListArgs {}

/// `list_delegations`' result.
#[derive(Debug, Serialize, JsonSchema)]
struct WorkerList {
    /// The requests of this worker's tree, its own included.
    delegations: Vec<ReceiptSummary>,
}

/// The three tools' names.
const TOOL_NAMES: [&str; 3] = ["delegate", "read_delegation", "list_delegations"];

fn tool<A: JsonSchema + 'static, O: JsonSchema + 'static>(
    name: &'static str,
    title: &'static str,
    description: &'static str,
    annotations: ToolAnnotations,
) -> Tool {
    Tool::new(name, description, catalog::input_schema::<A>(name))
        .with_title(title)
        .with_annotations(annotations)
        .with_raw_output_schema(catalog::output_schema::<O>())
}

fn tools() -> Vec<Tool> {
    vec![
        tool::<DelegateArgs, Receipt>(
            "delegate",
            "Delegate a task to another agent",
            "Hand a task to another agent CLI (codex, claude or gemini) on this machine, as a \
             child of your own run, in a directory inside your project. Returns a receipt at \
             once (status queued or running); follow it with read_delegation. Refused with \
             limit_exceeded when the tree is too deep (depth 4) or large (16 requests), or \
             when no slot is free now (reason capacity: it would wait behind your own run).",
            ToolAnnotations::with_title("Delegate a task to another agent")
                .read_only(false)
                .destructive(false)
                .idempotent(true)
                .open_world(true),
        ),
        tool::<ReadArgs, Receipt>(
            "read_delegation",
            "Read a delegation's receipt",
            "The receipt of a request in your delegation tree: status (queued, running, \
             completed, failed, unknown), delivery_state, and the agent's final answer once it \
             ended. wait_ms (up to 60000) waits for the end first.",
            ToolAnnotations::with_title("Read a delegation's receipt")
                .read_only(true)
                .destructive(false)
                .idempotent(true)
                .open_world(false),
        ),
        tool::<ListArgs, WorkerList>(
            "list_delegations",
            "List your delegation tree",
            "The requests of your delegation tree (your own run and what it delegated), each \
             with its agent, status and depth.",
            ToolAnnotations::with_title("List your delegation tree")
                .read_only(true)
                .destructive(false)
                .idempotent(true)
                .open_world(false),
        ),
    ]
}

/// Decodes a tool's arguments into `A` and back to the socket's argument object (so unknown
/// fields and wrong types are refused here, with the tool's name).
fn checked<A: DeserializeOwned + Serialize>(
    tool: &str,
    args: JsonObject,
) -> Result<Map<String, Value>, ToolError> {
    let a: A = serde_json::from_value(Value::Object(args))
        .map_err(|e| ToolError::invalid(format!("invalid arguments for {tool}: {e}")))?;
    match serde_json::to_value(a) {
        Ok(Value::Object(o)) => Ok(o),
        _ => Err(ToolError::internal("arguments are an object")),
    }
}

/// The rmcp handler: the three tools over one authenticated connection.
#[derive(Clone)]
struct WorkerServer {
    connection: Arc<Connection>,
    tools: Arc<Vec<Tool>>,
}

impl WorkerServer {
    async fn call(&self, name: &str, args: JsonObject) -> Result<(Value, String), ToolError> {
        let (op, args) = match name {
            "delegate" => {
                let args = checked::<DelegateArgs>(name, args)?;
                let prompt_len = args
                    .get("prompt")
                    .and_then(Value::as_str)
                    .map_or(0, str::len);
                if prompt_len > DELEGATION_PROMPT_MAX_BYTES {
                    return Err(ToolError::invalid(format!(
                        "the prompt has {prompt_len} bytes; at most {DELEGATION_PROMPT_MAX_BYTES}"
                    )));
                }
                ("delegate", args)
            }
            "read_delegation" => ("read", checked::<ReadArgs>(name, args)?),
            _ => ("list", checked::<ListArgs>(name, args)?),
        };
        let value = self.connection.call(op, args).await?;
        let text = text::render(&View { op, value: &value });
        Ok((value, text))
    }
}

impl ServerHandler for WorkerServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new(crate::SERVER_NAME, crate::version())
                    .with_title("machine-bridge delegation worker")
                    .with_description("Delegate to other agent CLIs from a delegation worker"),
            )
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
            .with_instructions(
                "You run as a delegated worker. delegate hands a sub-task to another agent CLI \
                 inside your project; read_delegation (with wait_ms) returns its receipt and \
                 answer; list_delegations shows your tree.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.to_vec()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        if !TOOL_NAMES.contains(&name.as_str()) {
            return Err(ErrorData::invalid_params(
                format!("unknown tool {name}: delegate, read_delegation or list_delegations"),
                None,
            ));
        }
        let result = match self
            .call(&name, request.arguments.unwrap_or_default())
            .await
        {
            Ok((value, text)) => structured_result(value, text),
            Err(e) => error_result(&e),
        };
        Ok(result.into())
    }
}

/// The readable text of a forwarded result.
struct View<'a> {
    op: &'a str,
    value: &'a Value,
}

impl TextView for View<'_> {
    fn summary(&self) -> String {
        let v = self.value;
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("-").to_owned();
        if self.op == "list" {
            let n = v["delegations"].as_array().map_or(0, Vec::len);
            return format!(
                "{} in this worker's tree",
                text::count(n as u64, "delegation", "delegations")
            );
        }
        let status = s("status");
        let mut line = format!(
            "delegation {} to {}: {status}, delivery {}",
            s("request_id"),
            s("agent"),
            s("delivery_state")
        );
        if let Some(code) = v.get("diagnostic_code").and_then(Value::as_str) {
            line.push_str(&format!("; {code}: {}", s("diagnostic_message")));
        }
        if matches!(status.as_str(), "queued" | "running") {
            line.push_str(&format!(
                "; wait for it: read_delegation with \"request_id\": {} and \"wait_ms\": 60000",
                text::arg(&s("request_id"))
            ));
        } else if v.get("output_truncated").and_then(Value::as_bool) == Some(true) {
            line.push_str("; the answer was cut at its bound");
        }
        line
    }

    fn body(&self, out: &mut String) {
        let limit = text::body_limit(RESULT_TEXT_DEFAULT_CHARS);
        let mut budget = text::Budget::new(limit);
        if self.op == "list" {
            for d in self.value["delegations"].as_array().into_iter().flatten() {
                let s = |k: &str| {
                    d.get(k).map_or("-".to_owned(), |v| match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    })
                };
                let line = format!(
                    "{} {} {} depth {}\n",
                    s("request_id"),
                    s("agent"),
                    s("status"),
                    s("depth")
                );
                if !budget.take(line.len()) {
                    out.push_str("… more in structuredContent\n");
                    break;
                }
                out.push_str(&line);
            }
            return;
        }
        if let Some(answer) = self.value.get("output").and_then(Value::as_str) {
            let marker = "\n[cut here; structuredContent has the whole answer]\n";
            if answer.len() <= limit {
                out.push_str(answer);
            } else {
                out.push_str(&text::cut(answer.to_owned(), limit - marker.len(), marker));
            }
        }
    }
}

/// The requests waiting for their answers, and why the connection closed once it did.
#[derive(Default)]
struct Pending {
    waiting: HashMap<u64, oneshot::Sender<Result<Value, ToolError>>>,
    closed: Option<String>,
}

/// An authenticated connection to the worker socket; requests are multiplexed by id.
struct Connection {
    outgoing: mpsc::Sender<Value>,
    pending: Arc<Mutex<Pending>>,
    next_id: AtomicU64,
    tasks: Vec<AbortHandle>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.tasks.iter().for_each(AbortHandle::abort);
    }
}

/// Locks `pending` (poison is harmless: the map stays consistent).
fn lock(pending: &Mutex<Pending>) -> std::sync::MutexGuard<'_, Pending> {
    pending.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Connection {
    /// Connects to `socket` and answers its challenge for `request_id` with `capability`.
    async fn open(
        socket: PathBuf,
        request_id: &str,
        capability: &[u8],
    ) -> Result<Self, WorkerMcpError> {
        let stream =
            UnixStream::connect(&socket)
                .await
                .map_err(|source| WorkerMcpError::Connect {
                    path: socket.clone(),
                    source,
                })?;
        let (read, mut write) = stream.into_split();
        let mut read = BufReader::new(read);
        let handshake = async {
            let challenge = next_value(&mut read).await?;
            let challenge = match challenge.get("challenge").and_then(Value::as_str) {
                Some(c) => c.to_owned(),
                None => return Err(refusal(&challenge)),
            };
            let mac = hex::encode(challenge_mac(capability, &challenge, request_id));
            write_frame(&mut write, &json!({ "request_id": request_id, "mac": mac }))
                .await
                .map_err(|e| WorkerMcpError::Protocol(format!("writing the answer: {e}")))?;
            let answer = next_value(&mut read).await?;
            if answer.get("authenticated").and_then(Value::as_bool) == Some(true) {
                Ok(())
            } else {
                Err(refusal(&answer))
            }
        };
        tokio::time::timeout(DELEGATION_SOCKET_AUTH_TIMEOUT, handshake)
            .await
            .map_err(|_| WorkerMcpError::Protocol("no answer to the challenge".into()))??;

        let pending = Arc::new(Mutex::new(Pending::default()));
        let (outgoing, mut rx) = mpsc::channel::<Value>(DELEGATION_SOCKET_REQUESTS_IN_FLIGHT_MAX);
        let writer = tokio::spawn(async move {
            while let Some(v) = rx.recv().await {
                if write_frame(&mut write, &v).await.is_err() {
                    break;
                }
            }
        });
        let reader = tokio::spawn(dispatch(read, pending.clone()));
        Ok(Self {
            outgoing,
            pending,
            next_id: AtomicU64::new(1),
            tasks: vec![writer.abort_handle(), reader.abort_handle()],
        })
    }

    /// Sends `{"id", "op", ...args}` and waits for its answer.
    async fn call(&self, op: &str, mut args: Map<String, Value>) -> Result<Value, ToolError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut p = lock(&self.pending);
            if let Some(why) = &p.closed {
                return Err(unavailable(why));
            }
            p.waiting.insert(id, tx);
        }
        args.insert("id".into(), id.into());
        args.insert("op".into(), op.into());
        if self.outgoing.send(Value::Object(args)).await.is_err() {
            lock(&self.pending).waiting.remove(&id);
            return Err(unavailable(
                "the connection to the delegation socket is gone",
            ));
        }
        match rx.await {
            Ok(answer) => answer,
            Err(_) => Err(unavailable(
                "the connection to the delegation socket is gone",
            )),
        }
    }
}

fn unavailable(why: &str) -> ToolError {
    ToolError::new(ToolErrorCode::Unavailable, why.to_owned())
}

/// Reads the answers and hands each to its caller; at the end, fails every one still waiting.
async fn dispatch(mut read: BufReader<OwnedReadHalf>, pending: Arc<Mutex<Pending>>) {
    let why = loop {
        let frame = match read_frame(&mut read).await {
            Ok(Some(f)) => f,
            Ok(None) => {
                break "the server closed the delegation socket (this worker's run ended, or \
                       the server stopped)"
                    .to_owned();
            }
            Err(e) => break format!("reading the delegation socket: {e}"),
        };
        let Ok(v) = serde_json::from_slice::<Value>(&frame) else {
            break "the delegation socket sent a line that is not JSON".to_owned();
        };
        let Some(id) = v.get("id").and_then(Value::as_u64) else {
            break match v.get("error").and_then(Value::as_str) {
                Some(code) => format!("the delegation socket closed the connection: {code}"),
                None => "the delegation socket sent an answer without an id".to_owned(),
            };
        };
        let answer = match (v.get("result"), v.get("error")) {
            (Some(r), None) => Ok(r.clone()),
            (_, Some(e)) => Err(tool_error(e)),
            (None, None) => Err(ToolError::internal("an answer without result or error")),
        };
        if let Some(tx) = lock(&pending).waiting.remove(&id) {
            let _ = tx.send(answer);
        }
    };
    let mut p = lock(&pending);
    for (_, tx) in p.waiting.drain() {
        let _ = tx.send(Err(unavailable(&why)));
    }
    p.closed = Some(why);
}

/// The tool error of a socket error object (`ToolError::to_json`'s shape). A code that is not
/// a tool error code (`invalid_capability`) becomes `policy_denied` with detail `socket_error`.
fn tool_error(e: &Value) -> ToolError {
    let code_text = e
        .get("code")
        .and_then(Value::as_str)
        .unwrap_or("internal_error");
    let message = e
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("the delegation socket answered an error");
    let code = serde_json::from_value::<ToolErrorCode>(Value::from(code_text));
    let mut err = match code {
        Ok(c) => ToolError::new(c, message),
        Err(_) => {
            ToolError::new(ToolErrorCode::PolicyDenied, message).detail("socket_error", code_text)
        }
    };
    if e.get("retryable").and_then(Value::as_bool) == Some(true) {
        err = err.retryable();
    }
    if e.get("side_effects_started").and_then(Value::as_bool) == Some(true) {
        err = err.with_side_effects();
    }
    for (k, v) in e.as_object().into_iter().flatten() {
        if !matches!(
            k.as_str(),
            "code" | "message" | "retryable" | "side_effects_started"
        ) {
            err = err.detail(k, v.clone());
        }
    }
    err
}

/// The next line of the handshake as JSON.
async fn next_value(read: &mut BufReader<OwnedReadHalf>) -> Result<Value, WorkerMcpError> {
    match read_frame(read).await {
        Ok(Some(f)) => serde_json::from_slice(&f)
            .map_err(|_| WorkerMcpError::Protocol("a line that is not JSON".into())),
        Ok(None) => Err(WorkerMcpError::Protocol(
            "the socket closed during the challenge".into(),
        )),
        Err(FrameError::TooLarge) => Err(WorkerMcpError::Protocol("a line too long".into())),
        Err(FrameError::Io(e)) => Err(WorkerMcpError::Protocol(e.to_string())),
    }
}

/// The error of a refusal line (`{"error": code}`), explained.
fn refusal(v: &Value) -> WorkerMcpError {
    match v.get("error").and_then(Value::as_str) {
        Some("not_owner") => {
            WorkerMcpError::Refused("not_owner: the socket belongs to another user".into())
        }
        Some("invalid_capability") => WorkerMcpError::Refused(
            "invalid_capability: the capability is not valid (its run has ended, or it was \
             never issued)"
                .into(),
        ),
        Some("busy") => WorkerMcpError::Refused(
            "busy: the socket serves as many connections as it may; try again".into(),
        ),
        Some(other) => WorkerMcpError::Refused(other.to_owned()),
        None => WorkerMcpError::Protocol(format!("unexpected answer {v}")),
    }
}
