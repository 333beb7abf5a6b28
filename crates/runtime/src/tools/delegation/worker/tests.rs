//! Unit tests of the worker protocol (over in-memory pipes: the socket is
//! [`super::socket`]'s, tested there): the HMAC challenge, revocation, frames, the project
//! boundary, the socket's files. What a worker does with a real `Manager` over the real socket
//! is in the integration tests (`crates/machine-mcp/tests/integration/delegation_workers.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;

use serde_json::{Value, json};
use tokio::io::{AsyncWriteExt, BufReader, DuplexStream, ReadHalf, WriteHalf};

use crate::limits::DELEGATION_SOCKET_FRAME_MAX_BYTES;

use super::{
    serve::{serve_connection, within_project},
    *,
};
use crate::{call::error::ToolErrorCode, policy::Principal};

const REQUEST: &str = "0e5bd5c2-7a1e-4c1b-9a0f-3c8d2b6f4e11";
const OTHER: &str = "7c9e6679-7425-40de-944b-e07fc1f90ae7";
/// Bytes an in-memory pipe buffers each way.
const PIPE_BYTES: usize = 64 * 1024;

fn grant(project: &Path, request_id: &str) -> Grant {
    Grant {
        request_id: request_id.to_owned(),
        root_request_id: request_id.to_owned(),
        depth: 0,
        project_dir: project.to_owned(),
        owner: Principal::local(),
        environment: crate::tools::delegation::engine::AgentEnvironment::Full,
    }
}

/// A socket with no manager behind it (operations answer `unavailable`).
fn start() -> (tempfile::TempDir, Arc<WorkerAccess>) {
    let t = tempfile::tempdir().unwrap();
    let w = WorkerAccess::start(&t.path().join("delegations"), Weak::new()).unwrap();
    (t, w)
}

fn var(vars: &[(String, String)], name: &str) -> String {
    vars.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
        .unwrap()
}

/// The capability bytes of a grant.
fn capability(vars: &[(String, String)]) -> Vec<u8> {
    hex::decode(var(vars, CAPABILITY_VAR)).unwrap()
}

struct Peer {
    read: BufReader<ReadHalf<DuplexStream>>,
    write: WriteHalf<DuplexStream>,
}

impl Peer {
    /// A connection served by `w`'s protocol, as the socket would serve it.
    fn connect(w: &WorkerAccess) -> Self {
        let (client, server) = tokio::io::duplex(PIPE_BYTES);
        let (read, write) = tokio::io::split(server);
        tokio::spawn(serve_connection(
            Box::new(BufReader::new(read)),
            Box::new(write),
            w.shared.clone(),
        ));
        let (read, write) = tokio::io::split(client);
        Self {
            read: BufReader::new(read),
            write,
        }
    }

    /// The next line as JSON; `None` once the server closed.
    async fn next(&mut self) -> Option<Value> {
        read_frame(&mut self.read)
            .await
            .unwrap()
            .map(|f| serde_json::from_slice(&f).unwrap())
    }

    async fn send(&mut self, v: Value) {
        write_frame(&mut self.write, &v).await.unwrap();
    }

    /// Answers the challenge as `request_id` with `key`; the server's answer.
    async fn answer(&mut self, request_id: &str, key: &[u8]) -> Option<Value> {
        let challenge = self.next().await.unwrap();
        let challenge = challenge["challenge"].as_str().unwrap().to_owned();
        assert_eq!(challenge.len(), 64, "{challenge}");
        let mac = hex::encode(challenge_mac(key, &challenge, request_id));
        self.send(json!({ "request_id": request_id, "mac": mac }))
            .await;
        self.next().await
    }
}

#[tokio::test]
async fn a_worker_with_its_capability_is_authenticated_and_served() {
    let (t, w) = start();
    let vars = w.grant(grant(t.path(), REQUEST));
    assert_eq!(var(&vars, REQUEST_VAR), REQUEST);
    let key = capability(&vars);
    assert_eq!(var(&vars, SOCKET_VAR), w.socket().to_str().unwrap());
    assert_eq!(key.len(), 32);

    let mut peer = Peer::connect(&w);
    assert_eq!(
        peer.answer(REQUEST, &key).await,
        Some(json!({ "authenticated": true, "request_id": REQUEST }))
    );
    // Requests are answered by id; a bad one does not end the connection.
    peer.send(json!({ "id": 7, "op": "nope" })).await;
    let a = peer.next().await.unwrap();
    assert_eq!(a["id"], 7);
    assert_eq!(a["error"]["code"], "invalid_request");
    peer.send(json!({ "id": 8, "op": "list" })).await;
    let a = peer.next().await.unwrap();
    assert_eq!(a["id"], 8);
    // No manager behind this socket: the operation reached it and found it gone.
    assert_eq!(a["error"]["code"], "unavailable", "{a}");
}

#[tokio::test]
async fn the_socket_and_its_directory_are_owner_only() {
    let (t, w) = start();
    let sockets = t.path().join("delegations/sockets");
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&sockets), 0o700);
    assert_eq!(mode(w.socket()), 0o600);
    assert_eq!(
        w.socket(),
        sockets.join(format!("{}.sock", std::process::id()))
    );
    let mcp = w.worker_mcp();
    assert_eq!(mcp.args, ["delegation", "worker-mcp"]);
    assert_eq!(mcp.env_names, [SOCKET_VAR, REQUEST_VAR, CAPABILITY_VAR]);
    // Stopping removes the socket.
    let socket = w.socket().to_owned();
    drop(w);
    assert!(!socket.exists());
}

#[tokio::test]
async fn a_forged_capability_is_refused() {
    let (t, w) = start();
    let key = capability(&w.grant(grant(t.path(), REQUEST)));
    let other_key = capability(&w.grant(grant(t.path(), OTHER)));
    let refused = Some(json!({ "error": "invalid_capability" }));

    // A key of our own making.
    let mut peer = Peer::connect(&w);
    assert_eq!(peer.answer(REQUEST, &[7u8; 32]).await, refused);
    assert_eq!(peer.next().await, None, "the connection is closed");
    // Another run's capability for this request.
    let mut peer = Peer::connect(&w);
    assert_eq!(peer.answer(REQUEST, &other_key).await, refused);
    // A request that was never granted.
    let mut peer = Peer::connect(&w);
    assert_eq!(
        peer.answer("11111111-2222-4333-8444-555555555555", &key)
            .await,
        refused
    );
    // A MAC of an earlier challenge (a replay).
    let mut first = Peer::connect(&w);
    let challenge = first.next().await.unwrap()["challenge"]
        .as_str()
        .unwrap()
        .to_owned();
    let replayed = hex::encode(challenge_mac(&key, &challenge, REQUEST));
    let mut peer = Peer::connect(&w);
    peer.next().await.unwrap();
    peer.send(json!({ "request_id": REQUEST, "mac": replayed }))
        .await;
    assert_eq!(peer.next().await, refused);
    // Not hex at all.
    let mut peer = Peer::connect(&w);
    peer.next().await.unwrap();
    peer.send(json!({ "request_id": REQUEST, "mac": "zz" }))
        .await;
    assert_eq!(peer.next().await, refused);
    // The real one still works.
    let mut peer = Peer::connect(&w);
    assert_eq!(
        peer.answer(REQUEST, &key).await.unwrap()["authenticated"],
        true
    );
}

#[tokio::test]
async fn a_revoked_capability_stops_working_at_once() {
    let (t, w) = start();
    let key = capability(&w.grant(grant(t.path(), REQUEST)));
    let mut peer = Peer::connect(&w);
    assert_eq!(
        peer.answer(REQUEST, &key).await.unwrap()["authenticated"],
        true
    );
    w.revoke(REQUEST);
    assert_eq!(w.live(), 0);
    // The open connection: its next request is refused and the connection closed.
    peer.send(json!({ "id": 1, "op": "list" })).await;
    let a = peer.next().await.unwrap();
    assert_eq!(a["id"], 1);
    assert_eq!(a["error"]["code"], "invalid_capability", "{a}");
    assert_eq!(peer.next().await, None);
    // A new connection with the expired capability.
    let mut peer = Peer::connect(&w);
    assert_eq!(
        peer.answer(REQUEST, &key).await,
        Some(json!({ "error": "invalid_capability" }))
    );
}

#[tokio::test]
async fn a_line_over_the_frame_bound_closes_the_connection() {
    let (t, w) = start();
    w.grant(grant(t.path(), REQUEST));
    let mut peer = Peer::connect(&w);
    peer.next().await.unwrap();
    let mut write = peer.write;
    // The server stops reading at the bound: the rest of the write may fail.
    let writer = tokio::spawn(async move {
        let line = vec![b'a'; DELEGATION_SOCKET_FRAME_MAX_BYTES + 2];
        let _ = write.write_all(&line).await;
        write
    });
    let answer = read_frame(&mut peer.read).await.unwrap().unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(&answer).unwrap(),
        json!({ "error": "frame_too_large" })
    );
    assert!(matches!(
        read_frame(&mut peer.read).await,
        Ok(None) | Err(_)
    ));
    writer.await.unwrap();
}

#[tokio::test]
async fn frames_are_bounded_in_both_directions() {
    let mut exact = vec![b'x'; DELEGATION_SOCKET_FRAME_MAX_BYTES];
    exact.push(b'\n');
    let mut r = exact.as_slice();
    let f = read_frame(&mut r).await.unwrap().unwrap();
    assert_eq!(f.len(), DELEGATION_SOCKET_FRAME_MAX_BYTES);
    assert!(read_frame(&mut r).await.unwrap().is_none());

    let over = vec![b'x'; DELEGATION_SOCKET_FRAME_MAX_BYTES + 1];
    let mut r = over.as_slice();
    assert!(matches!(
        read_frame(&mut r).await,
        Err(FrameError::TooLarge)
    ));

    let mut out = Vec::new();
    let big = Value::from("y".repeat(DELEGATION_SOCKET_FRAME_MAX_BYTES));
    let e = write_frame(&mut out, &big).await.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    assert!(out.is_empty());
}

#[tokio::test]
async fn sockets_of_dead_processes_are_removed_at_start() {
    let t = tempfile::tempdir().unwrap();
    let sockets = t.path().join("delegations/sockets");
    fs::create_dir_all(&sockets).unwrap();
    // No process has a PID this high (Linux's pid_max is at most 2^22).
    let dead = sockets.join("2147483646.sock");
    // PID 1 is alive.
    let alive = sockets.join("1.sock");
    let other = sockets.join("notes.txt");
    for p in [&dead, &alive, &other] {
        fs::write(p, "").unwrap();
    }
    let _w = WorkerAccess::start(&t.path().join("delegations"), Weak::new()).unwrap();
    assert!(!dead.exists());
    assert!(alive.exists());
    assert!(other.exists());
}

#[test]
fn a_worker_delegates_only_inside_its_project() {
    let t = tempfile::tempdir().unwrap();
    let project = t.path().join("project");
    let outside = t.path().join("elsewhere");
    fs::create_dir_all(project.join("sub")).unwrap();
    fs::create_dir_all(&outside).unwrap();
    fs::write(project.join("file.txt"), "x").unwrap();
    std::os::unix::fs::symlink(&outside, project.join("link")).unwrap();
    std::os::unix::fs::symlink(project.join("sub"), project.join("inner-link")).unwrap();

    let real = fs::canonicalize(&project).unwrap();
    assert_eq!(within_project(&project, ".").unwrap(), real);
    assert_eq!(within_project(&project, "").unwrap(), real);
    assert_eq!(within_project(&project, "sub").unwrap(), real.join("sub"));
    assert_eq!(
        within_project(&project, "inner-link").unwrap(),
        real.join("sub")
    );
    let abs = real.join("sub");
    assert_eq!(
        within_project(&project, abs.to_str().unwrap()).unwrap(),
        abs
    );

    let boundary = |p: &str| within_project(&project, p).unwrap_err().code();
    assert_eq!(boundary(".."), ToolErrorCode::PathBoundary);
    assert_eq!(boundary("../elsewhere"), ToolErrorCode::PathBoundary);
    assert_eq!(
        boundary("link"),
        ToolErrorCode::PathBoundary,
        "a symlink out"
    );
    assert_eq!(
        boundary(outside.to_str().unwrap()),
        ToolErrorCode::PathBoundary
    );
    assert_eq!(boundary("/"), ToolErrorCode::PathBoundary);
    assert_eq!(boundary("missing"), ToolErrorCode::NotFound);
    assert_eq!(boundary("file.txt"), ToolErrorCode::InvalidRequest);
}
