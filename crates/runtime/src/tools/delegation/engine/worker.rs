//! Workers that delegate (issue 19 item 4): the capability a running delegation gets, and the
//! protocol of the owner-only Unix socket through which its worker MCP server (`machine-mcp
//! delegation worker-mcp`, started by the agent) calls back into the [`Manager`]. The socket
//! itself (bind, peer uid, connection bound) is `crate::owner_socket`'s: an engine knows no
//! transport.
//!
//! One socket per server process: `DIR/sockets/PID.sock` (`DIR` is `STATE_DIR/delegations`;
//! the directory 0700, the socket 0600; sockets of dead PIDs are removed at start). The socket
//! protocol, one JSON object per line, each at most [`DELEGATION_SOCKET_FRAME_MAX_BYTES`]
//! (a longer line is answered `{"error":"frame_too_large"}` and the connection closed):
//!
//! 1. The server checks the peer's uid (`SO_PEERCRED`) before anything else: another user gets
//!    `{"error":"not_owner"}` and the connection is closed. Past
//!    [`DELEGATION_SOCKET_CONNECTIONS_MAX`] connections at once: `{"error":"busy"}`, closed.
//! 2. Server: `{"challenge":"<64 hex>"}` (32 random bytes). Client, within
//!    [`DELEGATION_SOCKET_AUTH_TIMEOUT`]: `{"request_id":"…","mac":"<64 hex>"}`, the
//!    HMAC-SHA256 ([`challenge_mac`]) keyed with the capability's 32 bytes. Unknown request,
//!    revoked capability or wrong MAC: `{"error":"invalid_capability"}`, closed; a malformed
//!    answer `{"error":"invalid_request"}`, no answer in time `{"error":"timeout"}`, closed.
//!    Success: `{"authenticated":true,"request_id":"…"}`.
//! 3. Requests `{"id":N,"op":"delegate","agent","prompt","path"?,"request_id"}` (`path`
//!    defaults to `.`, the project directory),
//!    `{"id":N,"op":"read","request_id","wait_ms"}`, `{"id":N,"op":"list"}`, answered (in any
//!    order, at most [`DELEGATION_SOCKET_REQUESTS_IN_FLIGHT_MAX`] in flight) by
//!    `{"id":N,"result":…}` (a receipt; for `list` `{"delegations":[…]}`) or
//!    `{"id":N,"error":{"code","message","retryable","side_effects_started",…details}}`
//!    ([`ToolError::to_json`]). Each request re-checks the capability: once the run ended
//!    ([`WorkerAccess::revoke`]) the answer is `{"id":N,"error":{"code":"invalid_capability"…}}`
//!    and the connection is closed.
//!
//! A worker's `delegate` is confined to its grant's project directory (symlinks resolved;
//! outside → `path_boundary`) and made with [`Origin::Worker`]; `read` and `list` see the
//! worker's own tree only ([`Scope::Tree`]).

use std::{
    collections::HashMap,
    fmt, fs, io,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, PoisonError, Weak},
    time::Duration,
};

use hmac::{Hmac, Mac};
use rand::{RngCore, rngs::OsRng};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::Sha256;
use tokio::{
    io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    sync::{Semaphore, mpsc},
    task::JoinSet,
};

use protocol::limits::{
    DELEGATION_READ_WAIT_MAX, DELEGATION_SOCKET_AUTH_TIMEOUT, DELEGATION_SOCKET_CONNECTIONS_MAX,
    DELEGATION_SOCKET_FRAME_MAX_BYTES, DELEGATION_SOCKET_REQUESTS_IN_FLIGHT_MAX,
};

use super::{
    DelegateRequest, Manager, Origin, Scope,
    agents::{Agent, WorkerMcp},
};
use crate::{
    call::error::{ToolError, ToolErrorCode},
    owner_socket::{Handler, OwnerSocket, Reader, Writer},
    policy::Principal,
    primitives::private,
};

/// The environment variable naming the server's worker socket (absolute path).
pub const SOCKET_VAR: &str = "MACHINE_MCP_DELEGATION_SOCKET";
/// The environment variable naming the worker's own request id.
pub const REQUEST_VAR: &str = "MACHINE_MCP_DELEGATION_REQUEST";
/// The environment variable holding the worker's capability: 64 lowercase hex digits (32 bytes).
pub const CAPABILITY_VAR: &str = "MACHINE_MCP_DELEGATION_CAPABILITY";
/// The first line of the HMAC transcript ([`challenge_mac`]); the version names this protocol.
pub const MAC_CONTEXT: &str = "machine-mcp delegation v1\n";
/// Bytes of a capability token and of a challenge.
const TOKEN_BYTES: usize = 32;
/// The subcommand of this binary that serves a worker's MCP (`machine-mcp delegation worker-mcp`).
const WORKER_MCP_ARGS: [&str; 2] = ["delegation", "worker-mcp"];

type HmacSha256 = Hmac<Sha256>;

/// What a running delegation's capability allows: delegate within `project_dir` as a child of
/// `request_id` (depth `depth + 1`, same root and owner), and read its own tree.
#[derive(Debug, Clone)]
pub struct Grant {
    /// The running request the worker is (its children's parent).
    pub request_id: String,
    /// The root of its tree (the caller's request at depth 0).
    pub root_request_id: String,
    /// The running request's depth (0 for a caller's request).
    pub depth: u32,
    /// The directory the worker may delegate in (absolute, symlinks resolved).
    pub project_dir: PathBuf,
    /// The principal that owns the tree (the caller of the root request).
    pub owner: Principal,
    /// The environment of the tree's agents (the root caller's policy decides): the worker's
    /// children get it too.
    pub environment: super::AgentEnvironment,
}

/// A capability token; `Debug` does not show it.
struct Token([u8; TOKEN_BYTES]);

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(…)")
    }
}

/// A live capability: its token, a serial telling it apart from any later grant of the same
/// request id, and what it allows.
#[derive(Debug)]
struct Live {
    token: Token,
    serial: u64,
    grant: Grant,
}

/// The state the socket's tasks share with [`WorkerAccess`].
#[derive(Debug)]
struct Shared {
    live: Mutex<Capabilities>,
    manager: Weak<Manager>,
}

/// The live capabilities by request id, and the next serial.
#[derive(Debug, Default)]
struct Capabilities {
    by_request: HashMap<String, Live>,
    next_serial: u64,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Capabilities> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The grant of `request_id` when its capability is still the one of `serial`.
    fn still_live(&self, request_id: &str, serial: u64) -> Option<Grant> {
        self.lock()
            .by_request
            .get(request_id)
            .filter(|l| l.serial == serial)
            .map(|l| l.grant.clone())
    }
}

/// The worker side of a server's delegations: capabilities and the socket that honours them.
/// Dropping it stops the socket (connections included) and removes its file.
#[derive(Debug)]
pub struct WorkerAccess {
    socket: OwnerSocket,
    /// The socket's path as a string (checked UTF-8 at start: it goes into an env var).
    socket_text: String,
    program: PathBuf,
    shared: Arc<Shared>,
}

impl WorkerAccess {
    /// Binds `dir/sockets/<pid>.sock` (the directory created 0700, the socket 0600; sockets of
    /// dead PIDs in it are removed first) and serves it on the current tokio runtime, calling
    /// back into `manager` for the three operations (module docs). The worker MCP program is
    /// this process's executable.
    ///
    /// # Errors
    /// No tokio runtime is current; the directory cannot be created or is not owned by this
    /// user; the socket path is not UTF-8 or too long for a Unix socket (108 bytes on Linux);
    /// binding fails.
    pub fn start(dir: &Path, manager: Weak<Manager>) -> io::Result<Arc<Self>> {
        let sockets = dir.join("sockets");
        private::create_dir(&sockets)?;
        let meta = fs::symlink_metadata(&sockets)?;
        if !meta.is_dir() || meta.uid() != nix::unistd::geteuid().as_raw() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "{} is not a directory of this user; remove it",
                    sockets.display()
                ),
            ));
        }
        remove_stale_sockets(&sockets);
        // Ours by PID: a file there is left by an earlier process with the same PID.
        let path = sockets.join(format!("{}.sock", std::process::id()));
        let socket_text = path
            .to_str()
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("the worker socket path {} is not UTF-8", path.display()),
                )
            })?
            .to_owned();
        let shared = Arc::new(Shared {
            live: Mutex::new(Capabilities::default()),
            manager,
        });
        let served = shared.clone();
        let handler: Handler = Arc::new(move |read: Reader, write: Writer| {
            Box::pin(serve_connection(read, write, served.clone()))
        });
        let socket = OwnerSocket::bind(&path, DELEGATION_SOCKET_CONNECTIONS_MAX, handler)?;
        Ok(Arc::new(Self {
            socket,
            socket_text,
            program: this_program(),
            shared,
        }))
    }

    /// The socket's path.
    pub fn socket(&self) -> &Path {
        self.socket.path()
    }

    /// A capability for a run that starts: a random 256-bit token bound to `grant` (a grant
    /// already live for the same request is replaced). Returns the variables the agent (and
    /// through it the worker MCP server) gets: [`SOCKET_VAR`], [`REQUEST_VAR`],
    /// [`CAPABILITY_VAR`]. Empty (the worker cannot delegate, and says so when asked) when the
    /// system's random source fails.
    pub fn grant(&self, grant: Grant) -> Vec<(String, String)> {
        let mut token = [0u8; TOKEN_BYTES];
        if let Err(e) = OsRng.try_fill_bytes(&mut token) {
            tracing::error!(error = %e, "no random source for a delegation capability");
            return Vec::new();
        }
        let capability = hex::encode(token);
        let request_id = grant.request_id.clone();
        {
            let mut live = self.shared.lock();
            live.next_serial += 1;
            let serial = live.next_serial;
            live.by_request.insert(
                request_id.clone(),
                Live {
                    token: Token(token),
                    serial,
                    grant,
                },
            );
        }
        vec![
            (SOCKET_VAR.to_owned(), self.socket_text.clone()),
            (REQUEST_VAR.to_owned(), request_id),
            (CAPABILITY_VAR.to_owned(), capability),
        ]
    }

    /// The run of `request_id` ended: its capability stops working at once (a connection
    /// authenticated with it gets `invalid_capability` on its next request). Unknown ids are
    /// ignored.
    pub fn revoke(&self, request_id: &str) {
        self.shared.lock().by_request.remove(request_id);
    }

    /// Capabilities live now (running delegations that got one).
    pub fn live(&self) -> usize {
        self.shared.lock().by_request.len()
    }

    /// The MCP server an agent starts for its worker: this binary with
    /// `delegation worker-mcp`, inheriting the three variables of [`WorkerAccess::grant`].
    pub fn worker_mcp(&self) -> WorkerMcp {
        WorkerMcp {
            program: self.program.clone(),
            args: WORKER_MCP_ARGS.iter().map(|s| (*s).to_owned()).collect(),
            env_names: [SOCKET_VAR, REQUEST_VAR, CAPABILITY_VAR]
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
        }
    }
}

/// This process's executable; after an upgrade replaced it, the path where the new one is.
fn this_program() -> PathBuf {
    match std::env::current_exe() {
        Ok(p) => {
            let s = p.to_string_lossy();
            match s.strip_suffix(" (deleted)") {
                Some(live) => PathBuf::from(live),
                None => p,
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot tell this executable; workers will look for machine-mcp on PATH");
            PathBuf::from("machine-mcp")
        }
    }
}

/// Removes `PID.sock` files in `sockets` whose process is gone.
fn remove_stale_sockets(sockets: &Path) {
    let Ok(entries) = fs::read_dir(sockets) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".sock"))
            .and_then(|p| p.parse::<i32>().ok())
            .filter(|p| *p > 0)
        else {
            continue;
        };
        let gone = matches!(
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
            Err(nix::errno::Errno::ESRCH)
        );
        if gone {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// The MAC a worker answers a challenge with: HMAC-SHA256 keyed with the capability's 32
/// bytes over `MAC_CONTEXT + challenge + "\n" + request_id` (the challenge as its 64 hex
/// digits).
pub fn challenge_mac(capability: &[u8], challenge: &str, request_id: &str) -> Vec<u8> {
    transcript(capability, challenge, request_id)
        .map(|m| m.finalize().into_bytes().to_vec())
        .unwrap_or_default()
}

fn transcript(capability: &[u8], challenge: &str, request_id: &str) -> Option<HmacSha256> {
    // HMAC takes a key of any length: this never fails.
    let mut mac = HmacSha256::new_from_slice(capability).ok()?;
    mac.update(MAC_CONTEXT.as_bytes());
    mac.update(challenge.as_bytes());
    mac.update(b"\n");
    mac.update(request_id.as_bytes());
    Some(mac)
}

/// Why [`read_frame`] returned no frame.
#[derive(Debug)]
pub enum FrameError {
    /// A line longer than [`DELEGATION_SOCKET_FRAME_MAX_BYTES`].
    TooLarge,
    /// Reading failed.
    Io(io::Error),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLarge => write!(
                f,
                "a line longer than {DELEGATION_SOCKET_FRAME_MAX_BYTES} bytes"
            ),
            Self::Io(e) => e.fmt(f),
        }
    }
}

/// Reads one line (without its `\n`) of at most [`DELEGATION_SOCKET_FRAME_MAX_BYTES`] bytes;
/// `None` at the end of the stream. A last line without `\n` counts.
///
/// # Errors
/// [`FrameError::TooLarge`] for a longer line (the stream is then out of step: close it);
/// [`FrameError::Io`] when reading fails.
pub async fn read_frame<R: AsyncBufRead + Unpin>(
    reader: &mut R,
) -> Result<Option<Vec<u8>>, FrameError> {
    let mut line = Vec::new();
    let n = (&mut *reader)
        .take(DELEGATION_SOCKET_FRAME_MAX_BYTES as u64 + 1)
        .read_until(b'\n', &mut line)
        .await
        .map_err(FrameError::Io)?;
    if n == 0 {
        return Ok(None);
    }
    if line.last() == Some(&b'\n') {
        line.pop();
    } else if line.len() > DELEGATION_SOCKET_FRAME_MAX_BYTES {
        return Err(FrameError::TooLarge);
    }
    Ok(Some(line))
}

/// Writes `value` as one line.
///
/// # Errors
/// The line would be longer than [`DELEGATION_SOCKET_FRAME_MAX_BYTES`] (`InvalidData`), or
/// writing fails.
pub async fn write_frame<W: AsyncWrite + Unpin>(writer: &mut W, value: &Value) -> io::Result<()> {
    let mut line = serde_json::to_vec(value).map_err(io::Error::other)?;
    if line.len() > DELEGATION_SOCKET_FRAME_MAX_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame longer than {DELEGATION_SOCKET_FRAME_MAX_BYTES} bytes"),
        ));
    }
    line.push(b'\n');
    writer.write_all(&line).await?;
    writer.flush().await
}

/// Serves one connection of the owner (the transport checked the peer's uid and the
/// connection bound): the challenge, then requests (module docs).
async fn serve_connection(mut read: Reader, mut write: Writer, shared: Arc<Shared>) {
    let authenticated = tokio::time::timeout(
        DELEGATION_SOCKET_AUTH_TIMEOUT,
        authenticate(&mut read, &mut write, &shared),
    )
    .await;
    let (request_id, serial) = match authenticated {
        Ok(Ok(who)) => who,
        Ok(Err(code)) => {
            let _ = write_frame(&mut write, &json!({ "error": code })).await;
            return;
        }
        Err(_) => {
            let _ = write_frame(&mut write, &json!({ "error": "timeout" })).await;
            return;
        }
    };
    if write_frame(
        &mut write,
        &json!({ "authenticated": true, "request_id": request_id }),
    )
    .await
    .is_err()
    {
        return;
    }
    // Answers go through one writer; requests run concurrently, bounded.
    let (tx, mut rx) = mpsc::channel::<Value>(DELEGATION_SOCKET_REQUESTS_IN_FLIGHT_MAX + 1);
    let writer = async move {
        while let Some(v) = rx.recv().await {
            let v = match write_frame(&mut write, &v).await {
                Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                    let e = ToolError::limit(format!(
                        "the answer is longer than the socket's {DELEGATION_SOCKET_FRAME_MAX_BYTES}-byte frames"
                    ));
                    write_frame(&mut write, &json!({ "id": v["id"], "error": e.to_json() })).await
                }
                other => other,
            };
            if v.is_err() {
                break;
            }
        }
        let _ = write.shutdown().await;
    };
    let in_flight = Arc::new(Semaphore::new(DELEGATION_SOCKET_REQUESTS_IN_FLIGHT_MAX));
    let reader = async move {
        let mut requests = JoinSet::new();
        loop {
            let frame = match read_frame(&mut read).await {
                Ok(Some(f)) => f,
                Ok(None) | Err(FrameError::Io(_)) => break,
                Err(FrameError::TooLarge) => {
                    let _ = tx.send(json!({ "error": "frame_too_large" })).await;
                    break;
                }
            };
            let Some(grant) = shared.still_live(&request_id, serial) else {
                let id = serde_json::from_slice::<Value>(&frame)
                    .ok()
                    .and_then(|v| v.get("id").cloned())
                    .unwrap_or(Value::Null);
                let e = json!({
                    "code": "invalid_capability",
                    "message": "this worker's capability has expired: its run ended",
                });
                let _ = tx.send(json!({ "id": id, "error": e })).await;
                break;
            };
            let (id, op) = match parse_request(&frame) {
                Ok(r) => r,
                Err((id, e)) => {
                    if tx
                        .send(json!({ "id": id, "error": e.to_json() }))
                        .await
                        .is_err()
                    {
                        break;
                    }
                    continue;
                }
            };
            let Ok(permit) = in_flight.clone().try_acquire_owned() else {
                let e = ToolError::limit(format!(
                    "more than {DELEGATION_SOCKET_REQUESTS_IN_FLIGHT_MAX} requests in flight on one worker connection"
                ))
                .retryable();
                if tx
                    .send(json!({ "id": id, "error": e.to_json() }))
                    .await
                    .is_err()
                {
                    break;
                }
                continue;
            };
            let manager = shared.manager.clone();
            let tx = tx.clone();
            requests.spawn(async move {
                let answer = match handle(op, grant, manager).await {
                    Ok(result) => json!({ "id": id, "result": result }),
                    Err(e) => json!({ "id": id, "error": e.to_json() }),
                };
                let _ = tx.send(answer).await;
                drop(permit);
            });
            while requests.try_join_next().is_some() {}
        }
        // The connection's end: requests still waiting for an answer have no one to get it.
        requests.abort_all();
    };
    tokio::join!(reader, writer);
}

/// The challenge exchange: `Ok((request_id, serial))` of the live capability, or the error
/// code to answer.
async fn authenticate<R, W>(
    read: &mut R,
    write: &mut W,
    shared: &Shared,
) -> Result<(String, u64), &'static str>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut challenge = [0u8; TOKEN_BYTES];
    OsRng
        .try_fill_bytes(&mut challenge)
        .map_err(|_| "unavailable")?;
    let challenge = hex::encode(challenge);
    write_frame(write, &json!({ "challenge": challenge }))
        .await
        .map_err(|_| "closed")?;
    let frame = match read_frame(read).await {
        Ok(Some(f)) => f,
        Ok(None) | Err(FrameError::Io(_)) => return Err("closed"),
        Err(FrameError::TooLarge) => return Err("frame_too_large"),
    };
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Answer {
        request_id: String,
        mac: String,
    }
    let answer: Answer = serde_json::from_slice(&frame).map_err(|_| "invalid_request")?;
    let mac = hex::decode(&answer.mac).map_err(|_| "invalid_capability")?;
    let live = shared.lock();
    let entry = live
        .by_request
        .get(&answer.request_id)
        .ok_or("invalid_capability")?;
    let verifier =
        transcript(&entry.token.0, &challenge, &answer.request_id).ok_or("invalid_capability")?;
    verifier
        .verify_slice(&mac)
        .map_err(|_| "invalid_capability")?;
    Ok((answer.request_id, entry.serial))
}

/// One operation of an authenticated worker.
#[derive(Debug)]
enum Op {
    Delegate(DelegateArgs),
    Read(ReadArgs),
    List,
}

/// `delegate` over the socket.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DelegateArgs {
    agent: String,
    prompt: String,
    /// Relative to the worker's project directory, or absolute inside it; default `.` (the
    /// project directory).
    #[serde(default = "project_dir")]
    path: String,
    request_id: String,
}

/// The default `path` of `delegate` over the socket.
fn project_dir() -> String {
    ".".to_owned()
}

/// `read` over the socket.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    request_id: String,
    #[serde(default)]
    wait_ms: u64,
}

/// `list` over the socket (no arguments).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListArgs {}

/// Splits a request line into its id and operation; a bad one gives the id (or null) and the
/// `invalid_request` error to answer.
fn parse_request(frame: &[u8]) -> Result<(Value, Op), (Value, ToolError)> {
    let Ok(Value::Object(mut obj)) = serde_json::from_slice::<Value>(frame) else {
        return Err((
            Value::Null,
            ToolError::invalid("a request is one JSON object per line"),
        ));
    };
    let id = obj.remove("id").unwrap_or(Value::Null);
    if !id.is_u64() {
        return Err((
            Value::Null,
            ToolError::invalid("a request needs an `id`: a non-negative integer"),
        ));
    }
    let op = obj.remove("op");
    let args = Value::Object(obj);
    let bad = |e: serde_json::Error| ToolError::invalid(format!("invalid arguments: {e}"));
    let op = match op.as_ref().and_then(Value::as_str) {
        Some("delegate") => serde_json::from_value(args).map(Op::Delegate).map_err(bad),
        Some("read") => serde_json::from_value(args).map(Op::Read).map_err(bad),
        Some("list") => serde_json::from_value::<ListArgs>(args)
            .map(|_| Op::List)
            .map_err(bad),
        _ => Err(ToolError::invalid(
            "`op` must be \"delegate\", \"read\" or \"list\"",
        )),
    };
    match op {
        Ok(op) => Ok((id, op)),
        Err(e) => Err((id, e)),
    }
}

/// Runs one operation for `grant`.
async fn handle(op: Op, grant: Grant, manager: Weak<Manager>) -> Result<Value, ToolError> {
    let manager = manager.upgrade().ok_or_else(|| {
        ToolError::new(ToolErrorCode::Unavailable, "the server is shutting down").retryable()
    })?;
    let to_value = |v: Result<Value, serde_json::Error>| {
        v.map_err(|e| ToolError::internal(format!("serializing the answer: {e}")))
    };
    match op {
        Op::Delegate(args) => {
            let agent = Agent::parse(&args.agent).ok_or_else(|| {
                ToolError::invalid(format!(
                    "unknown agent {:?}: one of codex, claude, gemini",
                    args.agent
                ))
            })?;
            let request_id = args.request_id;
            let project = grant.project_dir.clone();
            let path = args.path;
            let directory = tokio::task::spawn_blocking(move || within_project(&project, &path))
                .await
                .map_err(|_| ToolError::cancelled())??;
            let receipt = manager
                .delegate(
                    DelegateRequest {
                        agent,
                        prompt: args.prompt,
                        directory,
                        request_id,
                        environment: grant.environment.clone(),
                    },
                    Origin::Worker(grant),
                )
                .await?;
            to_value(serde_json::to_value(receipt))
        }
        Op::Read(args) => {
            let wait = Duration::from_millis(args.wait_ms).min(DELEGATION_READ_WAIT_MAX);
            let scope = Scope::Tree {
                root_request_id: grant.root_request_id,
            };
            let receipt = manager.read(&args.request_id, wait, &scope).await?;
            to_value(serde_json::to_value(receipt))
        }
        Op::List => {
            let scope = Scope::Tree {
                root_request_id: grant.root_request_id,
            };
            let list = tokio::task::spawn_blocking(move || manager.list(&scope))
                .await
                .map_err(|_| ToolError::cancelled())??;
            to_value(serde_json::to_value(list)).map(|l| json!({ "delegations": l }))
        }
    }
}

/// Resolves a worker's `path` (relative to `project`, or absolute) to an existing directory
/// inside `project`, symlinks resolved.
///
/// # Errors
/// `not_found` when it does not exist; `invalid_request` when it is not a directory;
/// `path_boundary` when it resolves outside `project`.
fn within_project(project: &Path, path: &str) -> Result<PathBuf, ToolError> {
    let project = fs::canonicalize(project)
        .map_err(|e| ToolError::io("this worker's project directory", &e))?;
    let asked = project.join(path);
    let resolved = fs::canonicalize(&asked).map_err(|e| ToolError::io(path, &e))?;
    if !resolved.starts_with(&project) {
        return Err(ToolError::new(
            ToolErrorCode::PathBoundary,
            format!(
                "{path} is outside this worker's project {}; a worker delegates only inside it",
                project.display()
            ),
        )
        .detail("path", path));
    }
    if !resolved.is_dir() {
        return Err(ToolError::invalid(format!("{path} is not a directory")));
    }
    Ok(resolved)
}

#[cfg(test)]
mod tests;
