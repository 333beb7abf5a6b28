//! Fixtures for relay tests: relay and daemon processes, a controllable TCP proxy between them,
//! and a small MCP Streamable HTTP client.

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{Shutdown, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use crate::util::bin;

/// A child process killed on drop, with its stderr collected.
pub(crate) struct Proc {
    pub(crate) child: Child,
    pub(crate) stderr: Arc<Mutex<Vec<String>>>,
}

impl Proc {
    pub(crate) fn spawn(args: &[&str], stderr_tx: Option<mpsc::Sender<String>>) -> Self {
        Self::spawn_with_env(args, &[], stderr_tx)
    }

    /// Like [`Proc::spawn`], with extra environment variables for the process.
    pub(crate) fn spawn_with_env(
        args: &[&str],
        env: &[(&str, &str)],
        stderr_tx: Option<mpsc::Sender<String>>,
    ) -> Self {
        Self::spawn_program(&bin(), args, env, stderr_tx)
    }

    /// Like [`Proc::spawn_with_env`], running `program` instead of the built binary.
    pub(crate) fn spawn_program(
        program: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        stderr_tx: Option<mpsc::Sender<String>>,
    ) -> Self {
        let mut child = Command::new(program)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn machine-mcp");
        let err = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let keep = lines.clone();
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                if let Some(tx) = &stderr_tx {
                    let _ = tx.send(l.clone());
                }
                keep.lock().unwrap().push(l);
            }
        });
        Self {
            child,
            stderr: lines,
        }
    }

    /// Waits until a stderr line contains `needle`.
    pub(crate) fn wait_log(&self, needle: &str, within: Duration) {
        let end = Instant::now() + within;
        while !self
            .stderr
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains(needle))
        {
            assert!(
                Instant::now() < end,
                "no log line with {needle:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn log(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }

    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `machine-mcp ARGS` to completion and returns stdout (trimmed); panics on failure.
pub(crate) fn run_cli(args: &[&str]) -> String {
    let out = Command::new(bin()).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "machine-mcp {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// What a [`Proxy`] does to a connection's traffic. Set for every connection with
/// [`Proxy::fault`] (new connections too) or for one with [`Proxy::fault_conn`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Forward both directions (resumes a stalled or delayed connection).
    Normal,
    /// Close both sides (each peer sees a FIN); a new connection is closed at once.
    Drop,
    /// Reset both sides (SO_LINGER 0, then close: each peer sees an RST); a new connection is
    /// reset at once.
    Reset,
    /// Stop forwarding both directions, including a close, without closing anything: a
    /// half-open link. Data read meanwhile is held and delivered on [`Fault::Normal`]; the TCP
    /// buffers fill and push back on the peers.
    Stall,
    /// Forward with this latency added to every chunk read.
    Delay(Duration),
}

/// A TCP proxy on loopback whose connections can be dropped, reset, stalled, delayed and resumed,
/// all at once or one by one. Put it between a client and the relay, or between a daemon and the
/// relay ([`Relay`] has one there).
pub(crate) struct Proxy {
    pub(crate) port: u16,
    state: Arc<ProxyState>,
}

#[derive(Default)]
struct ProxyState {
    /// The mode of new connections.
    global: Mutex<Option<Fault>>,
    conns: Mutex<Vec<Arc<Conn>>>,
    next_id: std::sync::atomic::AtomicU64,
}

/// One proxied connection: `a` the accepted side, `b` the side toward the upstream.
struct Conn {
    id: u64,
    a: TcpStream,
    b: TcpStream,
    mode: Mutex<Fault>,
    changed: std::sync::Condvar,
    /// Whether it has been closed or reset (by a fault or by both pumps ending).
    closed: AtomicBool,
    /// Bytes forwarded from upstream to the accepted side.
    down: std::sync::atomic::AtomicU64,
    /// Pumps that have ended (at 2 the connection is closed and forgotten).
    pumps_done: std::sync::atomic::AtomicU8,
}

impl Conn {
    fn set(&self, f: Fault) {
        *self.mode.lock().unwrap() = f;
        self.changed.notify_all();
        match f {
            Fault::Drop => self.close(false),
            Fault::Reset => self.close(true),
            _ => {}
        }
    }

    /// Ends both sides: with `reset`, SO_LINGER 0 so that the last close sends an RST. Shutting
    /// down the read side wakes the pumps without sending anything; they then drop their copies.
    fn close(&self, reset: bool) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        for s in [&self.a, &self.b] {
            if reset {
                set_linger_zero(s);
                let _ = s.shutdown(Shutdown::Read);
            } else {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
    }

    /// Waits while stalled; then the mode to apply to a chunk.
    fn wait_unstalled(&self) -> Fault {
        let mut m = self.mode.lock().unwrap();
        while *m == Fault::Stall {
            m = self.changed.wait(m).unwrap();
        }
        *m
    }
}

/// SO_LINGER with a zero timeout: `close` then resets the connection.
fn set_linger_zero(s: &TcpStream) {
    socket2::SockRef::from(s)
        .set_linger(Some(Duration::ZERO))
        .expect("setsockopt SO_LINGER");
}

/// A snapshot of one proxied connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnInfo {
    pub(crate) id: u64,
    /// Bytes forwarded from the upstream so far.
    pub(crate) down: u64,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `127.0.0.1:upstream` (settable later).
    pub(crate) fn start(upstream: Arc<Mutex<u16>>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state: Arc<ProxyState> = Arc::default();
        let st = state.clone();
        std::thread::spawn(move || {
            for inbound in listener.incoming() {
                let Ok(inbound) = inbound else { continue };
                let global = st.global.lock().unwrap().unwrap_or(Fault::Normal);
                match global {
                    Fault::Drop => continue, // dropping `inbound` closes it
                    Fault::Reset => {
                        set_linger_zero(&inbound);
                        continue;
                    }
                    _ => {}
                }
                let target = *upstream.lock().unwrap();
                let Ok(outbound) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let conn = Arc::new(Conn {
                    id: st.next_id.fetch_add(1, Ordering::SeqCst),
                    a: inbound,
                    b: outbound,
                    mode: Mutex::new(global),
                    changed: std::sync::Condvar::new(),
                    closed: AtomicBool::new(false),
                    down: Default::default(),
                    pumps_done: Default::default(),
                });
                pump(conn.clone(), true);
                pump(conn.clone(), false);
                let mut conns = st.conns.lock().unwrap();
                conns.retain(|c| !c.closed.load(Ordering::SeqCst));
                conns.push(conn);
            }
        });
        Self { port, state }
    }

    /// A proxy to a fixed upstream port.
    pub(crate) fn to(upstream: u16) -> Self {
        Self::start(Arc::new(Mutex::new(upstream)))
    }

    /// Sets the mode of every current connection and of new ones ([`Fault::Normal`] resumes).
    pub(crate) fn fault(&self, f: Fault) {
        *self.state.global.lock().unwrap() = Some(f);
        for c in self.live() {
            c.set(f);
        }
    }

    /// Back to forwarding: every current connection and new ones.
    pub(crate) fn resume(&self) {
        self.fault(Fault::Normal);
    }

    /// Sets the mode of one connection (by [`ConnInfo::id`]); false if it is gone.
    pub(crate) fn fault_conn(&self, id: u64, f: Fault) -> bool {
        let Some(c) = self.live().into_iter().find(|c| c.id == id) else {
            return false;
        };
        c.set(f);
        true
    }

    /// The connections not closed yet, oldest first.
    pub(crate) fn connections(&self) -> Vec<ConnInfo> {
        self.live()
            .iter()
            .map(|c| ConnInfo {
                id: c.id,
                down: c.down.load(Ordering::SeqCst),
            })
            .collect()
    }

    fn live(&self) -> Vec<Arc<Conn>> {
        let mut conns = self.state.conns.lock().unwrap();
        conns.retain(|c| !c.closed.load(Ordering::SeqCst));
        conns.clone()
    }

    /// Closes every current connection (both sides see the TCP connection end); new
    /// connections forward normally.
    pub(crate) fn cut(&self) {
        for c in self.live() {
            c.set(Fault::Drop);
        }
    }

    /// Stops forwarding on every current connection while keeping it open (half-open link);
    /// new connections forward normally.
    pub(crate) fn silence(&self) {
        for c in self.live() {
            c.set(Fault::Stall);
        }
    }
}

/// Forwards one direction of `c` (`down`: upstream → accepted side) until either side ends, the
/// connection is closed, or a fault says otherwise. A stalled connection forwards nothing, not
/// even the end of the stream, until resumed.
fn pump(c: Arc<Conn>, down: bool) {
    std::thread::spawn(move || {
        let (mut from, mut to) = if down {
            (c.b.try_clone().unwrap(), c.a.try_clone().unwrap())
        } else {
            (c.a.try_clone().unwrap(), c.b.try_clone().unwrap())
        };
        let mut buf = [0u8; 64 * 1024];
        let ended = loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break true,
                Ok(n) => n,
            };
            match c.wait_unstalled() {
                Fault::Drop | Fault::Reset => break false,
                Fault::Delay(d) => std::thread::sleep(d),
                Fault::Normal | Fault::Stall => {}
            }
            if c.closed.load(Ordering::SeqCst) || to.write_all(&buf[..n]).is_err() {
                break false;
            }
            if down {
                c.down.fetch_add(n as u64, Ordering::SeqCst);
            }
        };
        // The end of the stream goes through once the connection is not stalled; a connection
        // closed by a fault is not half-closed politely.
        if ended
            && matches!(c.wait_unstalled(), Fault::Normal | Fault::Delay(_))
            && !c.closed.load(Ordering::SeqCst)
        {
            let _ = to.shutdown(Shutdown::Write);
        }
        if c.pumps_done.fetch_add(1, Ordering::SeqCst) == 1 {
            c.closed.store(true, Ordering::SeqCst);
        }
    });
}

/// A relay process with one bridge, its enrollment code, and a proxy in front.
pub(crate) struct Relay {
    pub(crate) proc: Proc,
    pub(crate) port: u16,
    pub(crate) proxy: Proxy,
    pub(crate) store: PathBuf,
    upstream: Arc<Mutex<u16>>,
    extra: Vec<String>,
    env: Vec<(String, String)>,
    _dir: tempfile::TempDir,
}

impl Relay {
    /// Starts `relay serve` behind a proxy whose address is the public URL.
    pub(crate) fn start(extra: &[&str]) -> Self {
        Self::start_with_env(extra, &[])
    }

    /// Like [`Relay::start`], with extra environment variables for every relay process
    /// (restarts included).
    pub(crate) fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("relay.db");
        let upstream = Arc::new(Mutex::new(0u16));
        let proxy = Proxy::start(upstream.clone());
        let extra: Vec<String> = extra.iter().map(|a| (*a).to_owned()).collect();
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let (proc, port) = spawn_relay(proxy.port, &store, &extra, &env);
        *upstream.lock().unwrap() = port;
        Self {
            proc,
            port,
            proxy,
            store,
            upstream,
            extra,
            env,
            _dir: dir,
        }
    }

    /// Replaces the relay process with a new one on the same store (and a new port behind the
    /// same proxy).
    pub(crate) fn restart(&mut self) {
        self.proc.kill();
        let (proc, port) = spawn_relay(self.proxy.port, &self.store, &self.extra, &self.env);
        *self.upstream.lock().unwrap() = port;
        self.proc = proc;
        self.port = port;
    }

    /// Points the public URL's proxy at another port (e.g. a reverse proxy that forwards to
    /// [`Relay::port`]); `restart` points it back at the relay.
    pub(crate) fn route_public_to(&self, port: u16) {
        *self.upstream.lock().unwrap() = port;
    }

    pub(crate) fn store_args(&self) -> Vec<String> {
        vec!["--store".into(), self.store.to_str().unwrap().into()]
    }

    /// `relay bridge add NAME` → enrollment code.
    pub(crate) fn add_bridge(&self, name: &str) -> String {
        self.add_bridge_with(name, &[])
    }

    /// `relay bridge add NAME EXTRA...` → enrollment code.
    pub(crate) fn add_bridge_with(&self, name: &str, extra: &[&str]) -> String {
        let mut a = vec!["relay", "bridge", "add", name];
        a.extend_from_slice(extra);
        let s = self.store_args();
        a.extend(s.iter().map(String::as_str));
        run_cli(&a)
    }

    /// `relay token create` → token.
    pub(crate) fn token(&self, bridge: &str, role: &str) -> String {
        let mut a = vec![
            "relay", "token", "create", "--bridge", bridge, "--role", role,
        ];
        let s = self.store_args();
        a.extend(s.iter().map(String::as_str));
        run_cli(&a)
    }

    /// The public URL (through the proxy).
    pub(crate) fn public(&self) -> String {
        format!("http://127.0.0.1:{}", self.proxy.port)
    }

    /// The direct URL of the relay (clients use this; daemons go through the proxy).
    pub(crate) fn direct(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Prometheus text.
    pub(crate) fn metrics(&self) -> String {
        metrics_at(&self.direct())
    }

    /// The value of one metric line.
    pub(crate) fn metric(&self, name_and_labels: &str) -> i64 {
        metric_at(&self.direct(), name_and_labels)
    }

    /// Polls the metric `name_and_labels` until it is `want` (within 30 s); panics with the
    /// relay's log if it is not.
    pub(crate) fn wait_metric(&self, name_and_labels: &str, want: i64) {
        wait_metric_at(&self.direct(), name_and_labels, want, &|| self.proc.log());
    }

    /// Starts a daemon for `bridge` (enrolling with `code` if given) in `state`.
    pub(crate) fn daemon(
        &self,
        state: &Path,
        workspace: &Path,
        code: Option<&str>,
        extra: &[&str],
    ) -> Proc {
        self.daemon_with_env(state, workspace, code, extra, &[])
    }

    /// Like [`Relay::daemon`], with extra environment variables for the daemon.
    pub(crate) fn daemon_with_env(
        &self,
        state: &Path,
        workspace: &Path,
        code: Option<&str>,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Proc {
        self.daemon_from(&bin(), state, workspace, code, extra, env)
    }

    /// Like [`Relay::daemon_with_env`], started by `program` instead of the built binary.
    pub(crate) fn daemon_from(
        &self,
        program: &Path,
        state: &Path,
        workspace: &Path,
        code: Option<&str>,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Proc {
        let public = self.public();
        let mut args = vec![
            "connect",
            "--relay",
            &public,
            "--workspace",
            workspace.to_str().unwrap(),
            "--state-dir",
            state.to_str().unwrap(),
            "--heartbeat-ms",
            "1000",
            "--log-level",
            "debug",
        ];
        if let Some(c) = code {
            args.extend(["--enroll", c]);
        }
        args.extend_from_slice(extra);
        Proc::spawn_program(program, &args, env, None)
    }

    /// Waits until the relay has `n` ready daemon sockets.
    pub(crate) fn wait_ready(&self, n: i64) {
        let end = Instant::now() + Duration::from_secs(30);
        while self.metric("machine_mcp_relay_daemon_sockets{state=\"ready\"}") != n {
            assert!(
                Instant::now() < end,
                "no {n} ready daemon(s); relay log:\n{}",
                self.proc.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The Prometheus text of the relay at `base` (`http://HOST:PORT`: `relay serve` or `up`).
pub(crate) fn metrics_at(base: &str) -> String {
    ureq::get(&format!("{base}/metrics"))
        .call()
        .unwrap()
        .into_string()
        .unwrap()
}

/// The value of one metric line of the relay at `base`; -1 when it has none.
pub(crate) fn metric_at(base: &str, name_and_labels: &str) -> i64 {
    metrics_at(base)
        .lines()
        .find_map(|l| {
            l.strip_prefix(name_and_labels)
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(-1)
}

/// Polls the metric `name_and_labels` of the relay at `base` until it is `want` (within 30 s);
/// panics with `log()` (the relay's log) if it is not.
pub(crate) fn wait_metric_at(
    base: &str,
    name_and_labels: &str,
    want: i64,
    log: &dyn Fn() -> String,
) {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let v = metric_at(base, name_and_labels);
        if v == want {
            return;
        }
        assert!(
            Instant::now() < end,
            "{name_and_labels} is {v}, not {want}\nrelay:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn spawn_relay(
    proxy_port: u16,
    store: &Path,
    extra: &[String],
    env: &[(String, String)],
) -> (Proc, u16) {
    let public = format!("http://127.0.0.1:{proxy_port}");
    let (tx, rx) = mpsc::channel();
    let mut args = vec![
        "relay",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--public-url",
        &public,
        "--store",
        store.to_str().unwrap(),
        "--log-level",
        "debug",
    ];
    args.extend(extra.iter().map(String::as_str));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let proc = Proc::spawn_with_env(&args, &env, Some(tx));
    let port = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("relay starts");
        if let Some(rest) = line.split("listening on 127.0.0.1:").nth(1) {
            break rest
                .split_whitespace()
                .next()
                .unwrap()
                .parse::<u16>()
                .unwrap();
        }
    };
    (proc, port)
}

/// A minimal MCP Streamable HTTP client.
pub(crate) struct Client {
    pub(crate) url: String,
    pub(crate) token: Option<String>,
    pub(crate) session: Option<String>,
    /// Bound of one whole HTTP exchange, body included (default 120 s).
    pub(crate) timeout: Duration,
    next_id: i64,
}

/// An HTTP answer: status, the session header, and the JSON-RPC messages of its body.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) session: Option<String>,
    pub(crate) messages: Vec<Value>,
}

impl Client {
    pub(crate) fn new(url: &str, token: Option<&str>) -> Self {
        Self {
            url: url.to_owned(),
            token: token.map(str::to_owned),
            session: None,
            timeout: Duration::from_secs(120),
            next_id: 1,
        }
    }

    pub(crate) fn id(&mut self) -> i64 {
        self.next_id += 1;
        self.next_id
    }

    fn request(&self, method: &str) -> ureq::Request {
        let mut r = ureq::request(method, &self.url).timeout(self.timeout);
        if let Some(t) = &self.token {
            r = r.set("Authorization", &format!("Bearer {t}"));
        }
        if let Some(s) = &self.session {
            r = r.set("Mcp-Session-Id", s);
        }
        r
    }

    /// POSTs `body` and reads the whole answer (JSON or SSE until it ends).
    pub(crate) fn post(&self, body: &Value) -> Answer {
        self.post_timeout(body, Duration::from_secs(120))
    }

    /// [`Client::post`] that panics when no answer came within `within`.
    pub(crate) fn post_timeout(&self, body: &Value, within: Duration) -> Answer {
        let r = self
            .request("POST")
            .timeout(within)
            .set("Content-Type", "application/json")
            .set("Accept", "application/json, text/event-stream")
            .send_string(&body.to_string());
        let resp = match r {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("POST failed: {e}"),
        };
        answer(resp)
    }

    /// POSTs `body` and returns a reader of its SSE events as they arrive.
    pub(crate) fn post_stream(&self, body: &Value) -> SseReader {
        let resp = self
            .request("POST")
            .set("Content-Type", "application/json")
            .set("Accept", "text/event-stream, application/json")
            .send_string(&body.to_string())
            .expect("POST");
        SseReader::new(resp)
    }

    /// GET the standalone stream or, with `last_event_id`, a replay.
    pub(crate) fn get_stream(&self, last_event_id: Option<&str>) -> Result<SseReader, u16> {
        let mut r = self.request("GET").set("Accept", "text/event-stream");
        if let Some(l) = last_event_id {
            r = r.set("Last-Event-ID", l);
        }
        match r.call() {
            Ok(resp) => Ok(SseReader::new(resp)),
            Err(ureq::Error::Status(code, _)) => Err(code),
            Err(e) => panic!("GET failed: {e}"),
        }
    }

    pub(crate) fn delete(&self) -> u16 {
        match self.request("DELETE").call() {
            Ok(r) => r.status(),
            Err(ureq::Error::Status(c, _)) => c,
            Err(e) => panic!("DELETE failed: {e}"),
        }
    }

    /// `initialize` + `notifications/initialized`; remembers the session.
    pub(crate) fn initialize(&mut self) -> Value {
        let a = self.post(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "relay-tests", "version": "0"}}}));
        assert_eq!(a.status, 200, "initialize: {a:?}");
        self.session = a.session.clone();
        let n = self.post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        assert_eq!(n.status, 202);
        a.messages.into_iter().last().expect("initialize result")
    }

    /// `tools/call` and its final message.
    pub(crate) fn call(&mut self, tool: &str, args: Value) -> Value {
        let id = self.id();
        let a = self.post(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": args}}));
        assert_eq!(a.status, 200, "{tool}: {a:?}");
        a.messages.into_iter().last().expect("a response")
    }

    /// `tools/list` tool names.
    pub(crate) fn tool_names(&mut self) -> Vec<String> {
        let id = self.id();
        let a = self.post(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}));
        let last = a.messages.last().cloned().unwrap_or(Value::Null);
        last["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("tools/list: {a:?}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    }
}

fn answer(resp: ureq::Response) -> Answer {
    let status = resp.status();
    let session = resp.header("mcp-session-id").map(str::to_owned);
    let sse = resp.content_type() == "text/event-stream";
    let messages = if sse {
        let mut r = SseReader::new(resp);
        let mut v = Vec::new();
        while let Some((_, m)) = r.next_message(Duration::from_secs(120)) {
            if !m.is_null() {
                v.push(m);
            }
        }
        v
    } else {
        let text = resp.into_string().unwrap_or_default();
        serde_json::from_str(&text).into_iter().collect()
    };
    Answer {
        status,
        session,
        messages,
    }
}

/// Reads SSE events from a response body on a background thread.
pub(crate) struct SseReader {
    rx: mpsc::Receiver<(Option<String>, String)>,
}

impl SseReader {
    pub(crate) fn new(resp: ureq::Response) -> Self {
        let (tx, rx) = mpsc::channel();
        let reader = resp.into_reader();
        std::thread::spawn(move || {
            let mut id = None;
            let mut data: Option<Vec<String>> = None;
            for line in BufReader::new(reader).lines() {
                let Ok(line) = line else { break };
                if line.is_empty() {
                    if let Some(d) = data.take() {
                        let _ = tx.send((id.take(), d.join("\n")));
                    }
                    continue;
                }
                if let Some(v) = line.strip_prefix("id: ") {
                    id = Some(v.to_owned());
                } else if let Some(v) = line
                    .strip_prefix("data: ")
                    .or_else(|| line.strip_prefix("data:"))
                {
                    data.get_or_insert_with(Vec::new).push(v.to_owned());
                }
            }
        });
        Self { rx }
    }

    /// The next event with its id: a JSON-RPC message, or `Value::Null` for the priming event
    /// (empty data); `None` at the end of the stream or after `timeout`.
    pub(crate) fn next_message(&mut self, timeout: Duration) -> Option<(Option<String>, Value)> {
        let (id, data) = self.rx.recv_timeout(timeout).ok()?;
        if data.trim().is_empty() {
            return Some((id, Value::Null));
        }
        Some((id, serde_json::from_str(&data).expect("SSE data is JSON")))
    }
}

/// The error object of a tool error result.
pub(crate) fn tool_error(response: &Value) -> Value {
    assert_eq!(
        response["result"]["isError"], true,
        "expected a tool error: {response}"
    );
    serde_json::from_str(response["result"]["content"][0]["text"].as_str().unwrap()).unwrap()
}

/// Calls `run_process` of `sh -c "touch started; SCRIPT"` (in the workspace `ws`) through the MCP
/// endpoint `url` on a thread, and returns once the process runs (`started` exists): the call's
/// answer and when it came. Panics when the call ends or has not started within 30 s.
pub(crate) fn call_in_flight(
    url: &str,
    token: &str,
    ws: &Path,
    script: &str,
) -> std::thread::JoinHandle<(Value, Instant)> {
    let (url, token) = (url.to_owned(), token.to_owned());
    let script = format!("touch started; {script}");
    let call = std::thread::spawn(move || {
        let mut c = Client::new(&url, Some(&token));
        c.initialize();
        c.timeout = Duration::from_secs(90);
        let r = c.call("run_process", json!({"argv": ["sh", "-c", script]}));
        (r, Instant::now())
    });
    let end = Instant::now() + Duration::from_secs(30);
    while !ws.join("started").exists() {
        assert!(
            !call.is_finished(),
            "the call ended early: {:?}",
            call.join()
        );
        assert!(Instant::now() < end, "the call did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    call
}
