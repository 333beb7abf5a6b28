//! Serving one connection of the worker socket (the module docs of [`super`]): the challenge,
//! then the worker's requests, each re-checked against its capability and run on the
//! [`Manager`] within its grant.

use std::{
    fs, io,
    path::{Path, PathBuf},
    sync::{Arc, Weak},
    time::Duration,
};

use hmac::Mac;
use protocol::head::Head;
use rand::{RngCore, rngs::OsRng};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufRead, AsyncWrite, AsyncWriteExt},
    sync::{Semaphore, mpsc},
    task::JoinSet,
};

use crate::limits::{
    DELEGATION_READ_WAIT_MAX, DELEGATION_SOCKET_AUTH_TIMEOUT, DELEGATION_SOCKET_FRAME_MAX_BYTES,
    DELEGATION_SOCKET_REQUESTS_IN_FLIGHT_MAX,
};

use super::{
    Shared, TOKEN_BYTES,
    socket::{Reader, Writer},
    wire::{FrameError, read_frame, transcript, write_frame},
};
use crate::{
    call::error::{ToolError, ToolErrorCode},
    tools::delegation::engine::{
        DelegateRequest, Manager, Origin, Scope, agents::Agent, workers::Grant,
    },
};

/// Serves one connection of the owner (the transport checked the peer's uid and the
/// connection bound): the challenge, then requests (module docs).
pub(super) async fn serve_connection(mut read: Reader, mut write: Writer, shared: Arc<Shared>) {
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
                    let id = Head::of(&v).reply_id();
                    write_frame(&mut write, &json!({ "id": id, "error": e.to_json() })).await
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
                let id = Head::parse(&frame)
                    .ok()
                    .and_then(|h| h.id_member().cloned())
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
pub(super) fn within_project(project: &Path, path: &str) -> Result<PathBuf, ToolError> {
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
