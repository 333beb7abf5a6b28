//! Tests of the hosted sessions, by concern: `calls` (runtime calls), `retention` (resume,
//! replay, what the relay awaits), `bridge` (the era bridge against a scripted old-era server
//! and the conformance fixture). The helpers here drive a [`HostedSessions`] over a fake link.

mod bridge;
mod calls;
mod retention;

use std::{sync::Arc, time::Duration};

use runtime::Runtime;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use protocol::{
    frame::{DaemonFrame, RUNTIME_SERVER, ResumeRequest},
    ids::SessionId,
};

use super::HostedSessions;

/// A session or call id for the tests.
fn sid(s: &str) -> SessionId {
    SessionId::from(s)
}

/// The per-request `_meta` of an MCP 2026-07-28 request (Basic § Request metadata).
fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}
    })
}

fn request(id: Value, method: &str, mut params: Value) -> Value {
    params["_meta"] = meta();
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn runtime() -> (tempfile::TempDir, Arc<Runtime>) {
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::new(runtime::RuntimeConfig {
        workspace: dir.path().into(),
        policy: runtime::policy::Policy::profile(runtime::Profile::Full),
        default_yield_after: None,
        remote: false,
        state_dir: None,
        own_files: Vec::new(),
    })
    .unwrap();
    (dir, Arc::new(rt))
}

/// Attaches a fresh link (as after `resume` listing `keep`/`requests`) and returns its frames.
fn link(
    s: &Arc<HostedSessions>,
    keep: &[&str],
    requests: &[(&str, Value)],
) -> mpsc::Receiver<DaemonFrame> {
    let (tx, rx) = mpsc::channel(1024);
    let keep: Vec<SessionId> = keep.iter().map(|k| SessionId::from(*k)).collect();
    let reqs: Vec<ResumeRequest> = requests
        .iter()
        .map(|(s, id)| ResumeRequest {
            sid: SessionId::from(*s),
            id: id.clone().into(),
        })
        .collect();
    s.resume(&keep, &reqs, tx);
    rx
}

/// The next `rpc` frame of `sid` (others are skipped): (seq, related, message).
async fn next_rpc(rx: &mut mpsc::Receiver<DaemonFrame>, sid: &str) -> (u64, Option<Value>, Value) {
    loop {
        let f = tokio::time::timeout(Duration::from_secs(20), rx.recv())
            .await
            .unwrap_or_else(|_| panic!("no frame of {sid} in time"))
            .expect("link open");
        if let DaemonFrame::Rpc {
            sid: s,
            seq,
            related,
            message,
        } = f
            && s == sid
        {
            return (seq, related, Arc::unwrap_or_clone(message));
        }
    }
}

/// The response of call `sid` (its related messages skipped); acknowledges it.
async fn answer(s: &Arc<HostedSessions>, rx: &mut mpsc::Receiver<DaemonFrame>, sid: &str) -> Value {
    loop {
        let (seq, _, m) = next_rpc(rx, sid).await;
        if m.get("method").is_none() {
            s.ack(&SessionId::from(sid), seq);
            return m;
        }
    }
}

fn names(list: &Value) -> Vec<String> {
    list["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

fn sleep_call(id: Value, seconds: u32) -> Value {
    request(
        id,
        "tools/call",
        json!({"name": "run_process", "arguments": {"argv": ["sleep", seconds.to_string()]}}),
    )
}

/// Opens session `id` on the runtime and sends `notifications/initialized`.
fn open_initialized(s: &Arc<HostedSessions>, id: &str) {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}});
    s.open(&sid(id), RUNTIME_SERVER, "tok", "owner", init);
    s.rpc(
        &sid(id),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
}
