//! Workers that delegate (issue 19 item 4): stub agent CLIs first on `PATH` run as workers of
//! a real `machine-mcp stdio`; a worker calls our worker MCP server (`machine-mcp delegation
//! worker-mcp`), which authenticates over the server's owner-only socket. The limits, forged and
//! expired capabilities and another project are also checked on the socket directly, with the
//! capability read from a hanging worker's environment (`/proc/PID/environ`).

use std::{
    collections::HashMap,
    io::{BufRead, BufReader, Write},
    os::unix::{fs::PermissionsExt, net::UnixStream, process::CommandExt},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::util::{
    RESPONSE_TIMEOUT, Server, Tree, bin, link_or_copy, parse_reply, reachable_by_others,
};

const SOCKET_VAR: &str = "MACHINE_MCP_DELEGATION_SOCKET";
const REQUEST_VAR: &str = "MACHINE_MCP_DELEGATION_REQUEST";
const CAPABILITY_VAR: &str = "MACHINE_MCP_DELEGATION_CAPABILITY";
const TERMINAL: [&str; 3] = ["completed", "failed", "unknown"];

fn stubs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/agents")
}

fn new_id() -> String {
    let b: [u8; 16] = rand::random();
    let h = hex::encode(b);
    // A version 4 UUID, lowercase, hyphenated.
    format!(
        "{}-{}-4{}-a{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

/// A workspace with `proj/` (and `proj/sub/`, `proj/out` → `../other`) and `other/`, a
/// state directory, a config enabling the three agents, and the server.
struct Setup {
    ws: Tree,
    state: tempfile::TempDir,
    _config: tempfile::TempDir,
    files: tempfile::TempDir,
    server: Server,
}

impl Setup {
    fn new() -> Self {
        Self::with_state(tempfile::tempdir().unwrap())
    }

    /// [`Setup::new`] with the state directory `state`.
    fn with_state(state: tempfile::TempDir) -> Self {
        let ws = Tree::new();
        ws.write("proj/sub/README", "sub");
        ws.write("other/README", "elsewhere");
        std::os::unix::fs::symlink("../other", ws.path().join("proj/out")).unwrap();
        let config = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(config.path().join("machine-mcp")).unwrap();
        std::fs::write(
            config.path().join("machine-mcp/config.toml"),
            "[delegation.agents.codex]\nenabled = true\n\
             [delegation.agents.claude]\nenabled = true\n\
             [delegation.agents.gemini]\nenabled = true\n",
        )
        .unwrap();
        let files = tempfile::tempdir().unwrap();
        let path = format!(
            "{}:{}",
            stubs().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let run_log = files.path().join("runs.log");
        let pid_file = files.path().join("hang.pid");
        let server = Server::start_with_env(
            ws.path(),
            &["--state-dir", state.path().to_str().unwrap()],
            &[
                ("PATH", &path),
                ("XDG_CONFIG_HOME", config.path().to_str().unwrap()),
                ("STUB_RUN_LOG", run_log.to_str().unwrap()),
                ("STUB_PID_FILE", pid_file.to_str().unwrap()),
                // Gemini has no status command: a key in the environment counts as signed in.
                ("GEMINI_API_KEY", "stub-key"),
            ],
        );
        Self {
            ws,
            state,
            _config: config,
            files,
            server,
        }
    }

    /// `delegate` as the caller; the reply and the request id.
    fn delegate(&mut self, agent: &str, prompt: &str, path: &str) -> (String, Value) {
        let id = new_id();
        let r = self.server.call(
            "delegate",
            json!({"agent": agent, "prompt": prompt, "path": path, "request_id": id}),
        );
        let receipt = r.ok().clone();
        (id, receipt)
    }

    /// Reads `id` until it is terminal.
    fn finish(&mut self, id: &str) -> Value {
        let deadline = Instant::now() + RESPONSE_TIMEOUT;
        loop {
            let r = self.server.call(
                "read_delegation",
                json!({"request_id": id, "wait_ms": 60000}),
            );
            let receipt = r.ok().clone();
            if TERMINAL.contains(&receipt["status"].as_str().unwrap_or("")) {
                return receipt;
            }
            assert!(Instant::now() < deadline, "{id} did not end: {receipt}");
        }
    }

    /// The worker variables of the process that wrote `$STUB_PID_FILE` (a `HANG` run), read
    /// from `/proc/PID/environ` once it is written.
    fn hanging_worker(&self) -> Worker {
        let pid_file = self.files.path().join("hang.pid");
        let deadline = Instant::now() + RESPONSE_TIMEOUT;
        let pid = loop {
            if let Ok(s) = std::fs::read_to_string(&pid_file)
                && let Ok(pid) = s.trim().parse::<u32>()
            {
                break pid;
            }
            assert!(Instant::now() < deadline, "no HANG worker wrote its pid");
            std::thread::sleep(Duration::from_millis(20));
        };
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        let env: HashMap<String, String> = environ
            .split(|b| *b == 0)
            .filter_map(|kv| {
                let kv = String::from_utf8_lossy(kv);
                kv.split_once('=')
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
            })
            .collect();
        let get = |k: &str| {
            env.get(k)
                .cloned()
                .unwrap_or_else(|| panic!("the worker has no {k}"))
        };
        Worker {
            socket: get(SOCKET_VAR),
            request_id: get(REQUEST_VAR),
            capability: get(CAPABILITY_VAR),
        }
    }

    fn cancel(&mut self, id: &str) -> Value {
        self.server
            .call("cancel_delegation", json!({"request_id": id}))
            .ok()
            .clone()
    }
}

/// What a running worker was given.
#[derive(Debug, Clone)]
struct Worker {
    socket: String,
    request_id: String,
    capability: String,
}

impl Worker {
    fn key(&self) -> Vec<u8> {
        hex::decode(&self.capability).unwrap()
    }

    fn env(&self) -> [(&'static str, String); 3] {
        [
            (SOCKET_VAR, self.socket.clone()),
            (REQUEST_VAR, self.request_id.clone()),
            (CAPABILITY_VAR, self.capability.clone()),
        ]
    }
}

/// HMAC-SHA256 of the socket's challenge transcript (`engine::worker::challenge_mac`).
fn mac(key: &[u8], challenge: &str, request_id: &str) -> String {
    let mut m = Hmac::<Sha256>::new_from_slice(key).unwrap();
    m.update(format!("machine-mcp delegation v1\n{challenge}\n{request_id}").as_bytes());
    hex::encode(m.finalize().into_bytes())
}

/// A raw connection to the worker socket.
struct Peer {
    read: BufReader<UnixStream>,
    write: UnixStream,
    next_id: u64,
}

impl Peer {
    fn connect(socket: &str) -> Self {
        let s = UnixStream::connect(socket).unwrap();
        s.set_read_timeout(Some(RESPONSE_TIMEOUT)).unwrap();
        Self {
            read: BufReader::new(s.try_clone().unwrap()),
            write: s,
            next_id: 1,
        }
    }

    /// The next line; `None` once the server closed.
    fn next(&mut self) -> Option<Value> {
        let mut line = String::new();
        match self.read.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(serde_json::from_str(&line).unwrap()),
        }
    }

    fn send(&mut self, v: &Value) {
        self.write.write_all(format!("{v}\n").as_bytes()).unwrap();
    }

    /// Answers the challenge as `request_id` with `key`; the server's answer.
    fn answer(&mut self, request_id: &str, key: &[u8]) -> Option<Value> {
        let challenge = self.next().unwrap();
        let challenge = challenge["challenge"].as_str().unwrap().to_owned();
        self.send(&json!({"request_id": request_id, "mac": mac(key, &challenge, request_id)}));
        self.next()
    }

    /// A connection authenticated as `w`.
    fn worker(w: &Worker) -> Self {
        let mut p = Self::connect(&w.socket);
        let a = p.answer(&w.request_id, &w.key()).unwrap();
        assert_eq!(a["authenticated"], true, "{a}");
        p
    }

    /// One request; `Ok(result)` or `Err(error object)`.
    fn call(&mut self, op: &str, args: Value) -> Result<Value, Value> {
        let id = self.next_id;
        self.next_id += 1;
        let mut req = args.as_object().cloned().unwrap_or_default();
        req.insert("id".into(), id.into());
        req.insert("op".into(), op.into());
        self.send(&Value::Object(req));
        let a = self.next().expect("an answer");
        assert_eq!(a["id"], id, "{a}");
        match (a.get("result"), a.get("error")) {
            (Some(r), None) => Ok(r.clone()),
            (_, Some(e)) => Err(e.clone()),
            _ => panic!("neither result nor error: {a}"),
        }
    }

    fn delegate(&mut self, agent: &str, prompt: &str, path: &str) -> Result<Value, Value> {
        self.call(
            "delegate",
            json!({"agent": agent, "prompt": prompt, "path": path, "request_id": new_id()}),
        )
    }

    /// Reads `id` until it is terminal.
    fn finish(&mut self, id: &str) -> Value {
        loop {
            let r = self
                .call("read", json!({"request_id": id, "wait_ms": 60000}))
                .unwrap();
            if TERMINAL.contains(&r["status"].as_str().unwrap_or("")) {
                return r;
            }
        }
    }
}

#[test]
fn a_worker_delegates_to_another_agent_and_answers_with_its_answer() {
    let mut s = Setup::new();
    let (root, receipt) = s.delegate("codex", "DELEGATE:claude:hello", "proj");
    assert_eq!(receipt["depth"], 0);
    let done = s.finish(&root);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["output"], "stub claude answer: hello", "{done}");

    let list = s.server.call("list_delegations", json!({}));
    let items = list.ok()["delegations"].as_array().unwrap().clone();
    assert_eq!(items.len(), 2, "{items:?}");
    let child = items
        .iter()
        .find(|d| d["request_id"] != root.as_str())
        .unwrap();
    assert_eq!(child["agent"], "claude");
    assert_eq!(child["status"], "completed");
    assert_eq!(child["parent_request_id"], root.as_str());
    assert_eq!(child["root_request_id"], root.as_str());
    assert_eq!(child["depth"], 1);

    let runs = std::fs::read_to_string(s.files.path().join("runs.log")).unwrap();
    let agents: Vec<&str> = runs
        .lines()
        .map(|l| l.split('\t').next().unwrap())
        .collect();
    assert_eq!(agents, ["codex", "claude"], "{runs}");
    let proj = std::fs::canonicalize(s.ws.path().join("proj")).unwrap();
    assert!(
        runs.lines()
            .all(|l| l.split('\t').nth(1) == Some(proj.to_str().unwrap())),
        "both ran in the project: {runs}"
    );
}

#[test]
fn a_request_five_deep_is_refused() {
    let mut s = Setup::new();
    // codex(0) → claude(1) → codex(2) → claude(3) → gemini(4), which hangs: with two runs per
    // agent, a chain of running workers reaches depth 4 only through a third agent, and gemini
    // takes no worker MCP server, so its request for depth 5 is made on the socket directly.
    let (root, _) = s.delegate(
        "codex",
        "DELEGATE:claude:DELEGATE:codex:DELEGATE:claude:DELEGATE:gemini:HANG",
        "proj",
    );
    let deepest = s.hanging_worker();
    let mut peer = Peer::worker(&deepest);
    let tree = peer.call("list", json!({})).unwrap();
    let mut depths: Vec<u64> = tree["delegations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["depth"].as_u64().unwrap())
        .collect();
    depths.sort_unstable();
    assert_eq!(depths, [0, 1, 2, 3, 4], "{tree}");

    let e = peer.delegate("claude", "one level more", ".").unwrap_err();
    assert_eq!(e["code"], "limit_exceeded", "{e}");
    assert_eq!(e["reason"], "depth", "{e}");

    // The chain unwinds once the deepest run is cancelled.
    let cancelled = s.cancel(&deepest.request_id);
    assert_eq!(cancelled["status"], "failed");
    let done = s.finish(&root);
    assert_eq!(done["status"], "completed", "{done}");
    assert!(
        done["output"].as_str().unwrap().contains("cancelled"),
        "{done}"
    );
}

#[test]
fn the_seventeenth_request_of_a_root_is_refused() {
    let mut s = Setup::new();
    let (root, _) = s.delegate("codex", "HANG", "proj");
    let w = s.hanging_worker();
    assert_eq!(w.request_id, root);
    let mut peer = Peer::worker(&w);
    // The root and 15 children: 16 requests in the tree. One at a time: a worker's request
    // that cannot start at once is refused, never queued.
    for i in 1..=15 {
        let r = peer
            .delegate("claude", &format!("child {i}"), ".")
            .unwrap_or_else(|e| panic!("child {i}: {e}"));
        assert_eq!(r["depth"], 1);
        let done = peer.finish(r["request_id"].as_str().unwrap());
        assert_eq!(done["output"], format!("stub claude answer: child {i}"));
    }
    let e = peer.delegate("claude", "child 16", ".").unwrap_err();
    assert_eq!(e["code"], "limit_exceeded", "{e}");
    assert_eq!(e["reason"], "tree", "{e}");
    let tree = peer.call("list", json!({})).unwrap();
    assert_eq!(tree["delegations"].as_array().unwrap().len(), 16);
    let runs = std::fs::read_to_string(s.files.path().join("runs.log")).unwrap();
    assert_eq!(
        runs.lines().count(),
        16,
        "the refused request never ran: {runs}"
    );
    s.cancel(&root);
}

#[test]
fn forged_expired_and_out_of_project_requests_are_refused() {
    let mut s = Setup::new();
    let (root, _) = s.delegate("codex", "HANG", "proj");
    let w = s.hanging_worker();

    // A capability of our own making.
    let mut forged = Peer::connect(&w.socket);
    assert_eq!(
        forged.answer(&w.request_id, &[0x5a; 32]),
        Some(json!({"error": "invalid_capability"}))
    );
    assert_eq!(forged.next(), None);

    // Another project: a sibling, a symlink out, an absolute path, the workspace root.
    let mut peer = Peer::worker(&w);
    let other = std::fs::canonicalize(s.ws.path().join("other")).unwrap();
    for path in [
        "../other",
        "out",
        other.to_str().unwrap(),
        s.ws.path().to_str().unwrap(),
    ] {
        let e = peer.delegate("claude", "escape", path).unwrap_err();
        assert_eq!(e["code"], "path_boundary", "{path}: {e}");
    }
    // Inside the project it works.
    let inside = peer.delegate("claude", "inside", "sub").unwrap();
    let done = peer.finish(inside["request_id"].as_str().unwrap());
    assert_eq!(done["status"], "completed", "{done}");
    let sub = std::fs::canonicalize(s.ws.path().join("proj/sub")).unwrap();
    assert_eq!(done["directory"], sub.to_str().unwrap());

    // Another tree's receipt is not this worker's to read.
    let (stranger, _) = s.delegate("claude", "a stranger", "other");
    let e = peer
        .call("read", json!({"request_id": stranger, "wait_ms": 0}))
        .unwrap_err();
    assert_eq!(e["code"], "not_found", "{e}");

    // The run ends: its capability expires at once, on the open connection too.
    let cancelled = s.cancel(&root);
    assert_eq!(cancelled["status"], "failed");
    let e = peer.call("list", json!({})).unwrap_err();
    assert_eq!(e["code"], "invalid_capability", "{e}");
    assert_eq!(peer.next(), None, "the connection is closed");
    let mut expired = Peer::connect(&w.socket);
    assert_eq!(
        expired.answer(&w.request_id, &w.key()),
        Some(json!({"error": "invalid_capability"}))
    );
    // The worker MCP server refuses to start with it.
    let out = worker_mcp_command(&w).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("invalid_capability"), "{stderr}");
}

/// `machine-mcp delegation worker-mcp` with `w`'s variables only (and a PATH).
fn worker_mcp_command(w: &Worker) -> Command {
    worker_mcp_command_of(&bin(), w)
}

/// [`worker_mcp_command`] with the binary at `program`.
fn worker_mcp_command_of(program: &Path, w: &Worker) -> Command {
    let mut c = Command::new(program);
    c.args(["delegation", "worker-mcp"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(w.env())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// A running `machine-mcp delegation worker-mcp`, driven over its stdio.
struct WorkerMcpChild {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
    next_id: u64,
    output_schemas: HashMap<String, Value>,
}

impl WorkerMcpChild {
    fn start(w: &Worker) -> Self {
        let mut child = worker_mcp_command(w).spawn().unwrap();
        Self {
            stdin: child.stdin.take().unwrap(),
            stdout: BufReader::new(child.stdout.take().unwrap()),
            child,
            next_id: 1,
            output_schemas: HashMap::new(),
        }
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .unwrap();
        self.stdin.flush().unwrap();
        let mut answer = String::new();
        self.stdout.read_line(&mut answer).unwrap();
        let answer: Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(answer["id"], id, "{answer}");
        answer
    }

    /// A tool call, checked like `Server::call` (an error's shape, the output schema).
    fn call(&mut self, tool: &str, args: Value) -> crate::util::Reply {
        let resp = self.request("tools/call", json!({"name": tool, "arguments": args}));
        parse_reply(&resp, self.output_schemas.get(tool))
    }
}

impl Drop for WorkerMcpChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_worker_mcp_server_serves_the_three_tools_over_the_socket() {
    let mut s = Setup::new();
    let (root, _) = s.delegate("codex", "HANG", "proj");
    let w = s.hanging_worker();
    let mut mcp = WorkerMcpChild::start(&w);
    let init = mcp.request(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {},
               "clientInfo": {"name": "test", "version": "0"}}),
    );
    assert!(
        init["result"]["capabilities"]["tools"].is_object(),
        "{init}"
    );
    let tools = mcp.request("tools/list", json!({}));
    let tools = tools["result"]["tools"].as_array().unwrap().clone();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["delegate", "read_delegation", "list_delegations"]);
    for t in &tools {
        assert!(t["annotations"].is_object(), "{t}");
        assert_eq!(t["inputSchema"]["type"], "object", "{t}");
        assert_eq!(t["outputSchema"]["type"], "object", "{t}");
        mcp.output_schemas.insert(
            t["name"].as_str().unwrap().to_owned(),
            t["outputSchema"].clone(),
        );
    }

    let outside = mcp.call(
        "delegate",
        json!({"agent": "claude", "prompt": "escape", "path": "../other", "request_id": new_id()}),
    );
    assert_eq!(outside.code(), "path_boundary");
    let bad = mcp.call(
        "delegate",
        json!({"agent": "nobody", "prompt": "x", "path": ".", "request_id": new_id()}),
    );
    assert_eq!(bad.code(), "invalid_request");
    let child_id = new_id();
    let started = mcp.call(
        "delegate",
        json!({"agent": "claude", "prompt": "from the worker", "path": ".", "request_id": child_id}),
    );
    assert_eq!(started.ok()["parent_request_id"], root.as_str());
    assert!(started.summary().contains(&child_id), "{}", started.text);
    let done = loop {
        let r = mcp.call(
            "read_delegation",
            json!({"request_id": child_id, "wait_ms": 60000}),
        );
        if TERMINAL.contains(&r.ok()["status"].as_str().unwrap_or("")) {
            break r;
        }
    };
    assert_eq!(done.ok()["output"], "stub claude answer: from the worker");
    assert!(
        done.body().contains("stub claude answer: from the worker"),
        "{}",
        done.text
    );
    let list = mcp.call("list_delegations", json!({}));
    assert_eq!(list.ok()["delegations"].as_array().unwrap().len(), 2);
    drop(mcp);
    s.cancel(&root);
}

#[test]
fn the_worker_mcp_server_needs_its_variables() {
    let out = Command::new(bin())
        .args(["delegation", "worker-mcp"])
        .env_remove(SOCKET_VAR)
        .env_remove(REQUEST_VAR)
        .env_remove(CAPABILITY_VAR)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(SOCKET_VAR), "{stderr}");
    assert!(out.stdout.is_empty());
}

#[test]
fn a_connection_of_another_user_is_refused() {
    // SO_PEERCRED's uid is checked: only root can connect as another user. CI runs the tests as
    // root; elsewhere this test fails rather than pass without checking.
    let root_uid = Command::new("id").arg("-u").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&root_uid.stdout).trim(),
        "0",
        "this test must run as root: it connects to the socket as uid 65534"
    );
    // The state directory (the socket's) and the program run as uid 65534 sit in a directory
    // it can reach whatever the modes above the clone or TMPDIR (a 0700 directory there made
    // this test fail), so that only the uid check stands in its way.
    let shared = reachable_by_others();
    let mut s = Setup::with_state(tempfile::tempdir_in(shared.path()).unwrap());
    let (root, _) = s.delegate("codex", "HANG", "proj");
    let w = s.hanging_worker();
    let socket = PathBuf::from(&w.socket);
    let mut dir = socket.parent().unwrap().to_owned();
    while dir.starts_with(s.state.path()) {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711)).unwrap();
        dir = dir.parent().unwrap().to_owned();
    }
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let program = link_or_copy(&bin(), &shared.path().join("machine-mcp"));

    let out = worker_mcp_command_of(&program, &w)
        .uid(65534)
        .gid(65534)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("not_owner"), "{stderr}");
    // The owner still gets in.
    let mut peer = Peer::worker(&w);
    assert!(peer.call("list", json!({})).is_ok());
    s.cancel(&root);
}

/// Whether `pid` is a live process (a zombie is not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

#[test]
fn cancelling_a_root_cancels_the_delegations_its_worker_started() {
    // M2: the whole tree ends, and each descendant's receipt says why.
    let mut s = Setup::new();
    let (root, _) = s.delegate("codex", "DELEGATE:claude:HANG", "proj");
    let child = s.hanging_worker();
    assert_ne!(child.request_id, root);
    let pid_file = s.files.path().join("hang.pid");
    let leader: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let grandchild: u32 = std::fs::read_to_string(pid_file.with_extension("pid.child"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let cancelled = s.cancel(&root);
    assert_eq!(cancelled["status"], "failed", "{cancelled}");
    assert_eq!(cancelled["diagnostic_code"], "cancelled");
    let done = s.finish(&child.request_id);
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["diagnostic_code"], "cancelled", "{done}");
    let why = done["diagnostic_message"].as_str().unwrap();
    assert!(why.contains(&root), "names the cancelled ancestor: {why}");
    let deadline = Instant::now() + RESPONSE_TIMEOUT;
    while alive(leader) || alive(grandchild) {
        assert!(
            Instant::now() < deadline,
            "the child's agent {leader} or its process {grandchild} survived"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let running = s
        .server
        .call("list_delegations", json!({"status": "running"}));
    assert_eq!(running.ok()["delegations"], json!([]), "{}", running.text);
}

#[test]
fn the_worker_mcp_server_answers_a_call_in_flight_when_its_input_ends() {
    // M6: the requests are written and stdin closed at once; every call is answered.
    let mut s = Setup::new();
    let (root, _) = s.delegate("codex", "HANG", "proj");
    let w = s.hanging_worker();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "test", "version": "0"}}});
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    for (n, (tool, args)) in [
        ("list_delegations", json!({})),
        (
            "read_delegation",
            json!({"request_id": root, "wait_ms": 300}),
        ),
    ]
    .into_iter()
    .cycle()
    .take(6)
    .enumerate()
    {
        let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": tool, "arguments": args}});
        let mut child = worker_mcp_command(&w).spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all(format!("{init}\n{initialized}\n{call}\n").as_bytes())
            .unwrap();
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        let ids: Vec<Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["id"].clone())
            .collect();
        assert_eq!(ids, [json!(1), json!(2)], "run {n}, {tool}: {out:?}");
        assert!(out.status.success(), "run {n}: {out:?}");
    }
    s.cancel(&root);
}

#[test]
fn a_worker_delegates_in_its_own_directory_when_it_names_none() {
    // L1: like the main server's `delegate`, `path` is optional; the default is the worker's
    // project directory.
    let mut s = Setup::new();
    let (root, _) = s.delegate("codex", "HANG", "proj");
    let w = s.hanging_worker();
    let mut mcp = WorkerMcpChild::start(&w);
    mcp.request(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {},
               "clientInfo": {"name": "test", "version": "0"}}),
    );
    let tools = mcp.request("tools/list", json!({}));
    let delegate = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "delegate")
        .unwrap()
        .clone();
    let required = delegate["inputSchema"]["required"].as_array().unwrap();
    assert!(!required.contains(&json!("path")), "{delegate}");
    let id = new_id();
    let r = mcp.call(
        "delegate",
        json!({"agent": "claude", "prompt": "no path", "request_id": id}),
    );
    let proj = std::fs::canonicalize(s.ws.path().join("proj")).unwrap();
    assert_eq!(r.ok()["directory"], proj.to_str().unwrap(), "{}", r.text);
    // The socket takes a request without `path` too.
    let mut peer = Peer::worker(&w);
    let r = peer
        .call(
            "delegate",
            json!({"agent": "claude", "prompt": "no path either", "request_id": new_id()}),
        )
        .unwrap();
    assert_eq!(r["directory"], proj.to_str().unwrap());
    drop(mcp);
    s.cancel(&root);
}
