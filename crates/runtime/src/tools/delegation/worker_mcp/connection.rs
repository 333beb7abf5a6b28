//! The worker MCP server's end of the worker socket: the challenge answered with the run's
//! capability, then requests multiplexed by id over one connection (the protocol of
//! [`crate::tools::delegation::worker`]).

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use lock::Lock;
use protocol::head::Head;

use serde_json::{Map, Value, json};
use tokio::{
    io::BufReader,
    net::{UnixStream, unix::OwnedReadHalf},
    sync::{mpsc, oneshot},
    task::AbortHandle,
};

use crate::limits::{DELEGATION_SOCKET_AUTH_TIMEOUT, DELEGATION_SOCKET_REQUESTS_IN_FLIGHT_MAX};

use super::WorkerMcpError;
use crate::{
    call::error::{ToolError, ToolErrorCode},
    tools::delegation::worker::{FrameError, challenge_mac, read_frame, write_frame},
};

/// The requests waiting for their answers, and why the connection closed once it did.
#[derive(Debug, Default)]
struct Pending {
    waiting: HashMap<u64, oneshot::Sender<Result<Value, ToolError>>>,
    closed: Option<String>,
}

/// An authenticated connection to the worker socket; requests are multiplexed by id.
#[derive(Debug)]
pub(super) struct Connection {
    outgoing: mpsc::Sender<Value>,
    pending: Arc<Lock<Pending>>,
    next_id: AtomicU64,
    tasks: Vec<AbortHandle>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.tasks.iter().for_each(AbortHandle::abort);
    }
}

/// Locks `pending` (a poisoned lock is recovered and logged: the map stays consistent).
fn lock(pending: &Lock<Pending>) -> std::sync::MutexGuard<'_, Pending> {
    pending.lock()
}

impl Connection {
    /// Connects to `socket` and answers its challenge for `request_id` with `capability`.
    pub(super) async fn open(
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

        let pending = Arc::new(Lock::new(Pending::default()));
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
    pub(super) async fn call(
        &self,
        op: &str,
        mut args: Map<String, Value>,
    ) -> Result<Value, ToolError> {
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
async fn dispatch(mut read: BufReader<OwnedReadHalf>, pending: Arc<Lock<Pending>>) {
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
        let Some(id) = Head::of(&v).id().and_then(Value::as_u64) else {
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
