//! MCP load generator for bench/run.sh: one client for every target (stdio and Streamable HTTP),
//! standard library only, so that it builds with plain `rustc -O` in a few seconds and costs the
//! measured servers as little CPU as possible (the machine has 2 cores; a Node or Python client
//! spends 10–300x more CPU per call than this one, see BENCHMARKS.md).
//!
//! ```text
//! loadgen (--stdio -- CMD ARGS... | --http URL [--header 'K: V']...)
//!         [--tool NAME] [--args JSON] [--warmup N] [--phase C:N]... [--protocol VERSION]
//!         [--era legacy|2026] [--quickack]
//! ```
//!
//! `--era legacy` (the default) is the session era: `initialize` (protocolVersion `--protocol`,
//! default 2025-11-25) + `notifications/initialized`, and over HTTP every request carries the
//! `Mcp-Session-Id` the server assigned. `--era 2026` is MCP 2026-07-28 without a session: no
//! `initialize`; a `server/discover` first (checked: its `supportedVersions` must name
//! 2026-07-28), then every request carries `_meta` with `io.modelcontextprotocol/protocolVersion`
//! "2026-07-28", `io.modelcontextprotocol/clientInfo` and `io.modelcontextprotocol/clientCapabilities`
//! `{}` (spec 2026-07-28 basic/index.mdx), and over HTTP the headers `MCP-Protocol-Version:
//! 2026-07-28`, `Mcp-Method` and, for `tools/call`, `Mcp-Name` (basic/transports/streamable-http.mdx,
//! "Standard headers"); no `Mcp-Session-Id`, no `DELETE` at the end.
//!
//! `--quickack` (HTTP only, a diagnostic, not what real clients do): sets TCP_QUICKACK on the
//! client's sockets before every request and after reading the response headers, so the client
//! acknowledges every segment at once instead of delaying its ACKs (up to 40 ms on Linux). A
//! server that writes a response in several small writes without TCP_NODELAY is held by Nagle's
//! algorithm until that ACK; with `--quickack` the stall disappears, which tells such a server
//! apart from one that is slow.
//!
//! One MCP session (legacy era; in the 2026 era the same without the session): `initialize` + `notifications/initialized`, then `--warmup` calls at the
//! first phase's concurrency (not measured), then each phase: C closed-loop workers issue N
//! `tools/call` requests in all. Over stdio the C workers share the child's pipes (requests are
//! matched to responses by id); over HTTP each worker has its own keep-alive connection (TCP
//! no-delay set on the client side, as Node and browsers do), all on the same MCP session. A
//! response is a JSON body or an SSE stream; a call is done when the message with its id has
//! been read (and, for SSE, the stream has ended, so the connection can be reused).
//!
//! Prints one JSON object: `{"phases": [{"concurrency", "requests", "errors", "elapsed_s",
//! "latencies_ns": [...], "client_cpu_s"}], "total_cpu_s", "first_result": "..."}` (client CPU
//! from /proc/self/stat, 10 ms resolution; total_cpu_s: the whole run, warm-up included). At
//! the end the session is closed (stdin closed, or HTTP `DELETE`). Any transport failure aborts with exit status 1 and a message on stderr.

mod clientutil;

use clientutil::{json_escape, self_cpu, spawn_piped};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, ChildStdin};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

const PROTOCOL: &str = "2025-11-25";
/// The sessionless protocol revision of `--era 2026`.
const PROTOCOL_2026: &str = "2026-07-28";
/// `_meta` of every 2026-07-28 request (spec 2026-07-28 basic/index.mdx, "_meta"): version,
/// client info and (empty) client capabilities, repeated on each request since there is no session.
const META_2026: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"machine-bridge-loadgen","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}"#;

fn die(msg: impl AsRef<str>) -> ! {
    eprintln!("loadgen: {}", msg.as_ref());
    std::process::exit(1);
}

struct Opts {
    stdio: Option<Vec<String>>,
    url: Option<String>,
    headers: Vec<String>,
    tool: String,
    args: String,
    warmup: u64,
    phases: Vec<(usize, u64)>,
    protocol: String,
    era2026: bool,
    quickack: bool,
}

fn parse_opts() -> Opts {
    let mut o = Opts {
        stdio: None,
        url: None,
        headers: Vec::new(),
        tool: "test_simple_text".into(),
        args: "{}".into(),
        warmup: 200,
        phases: Vec::new(),
        protocol: String::new(),
        era2026: false,
        quickack: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| die(format!("{a} needs a value")));
        match a.as_str() {
            "--http" => o.url = Some(val()),
            "--header" => o.headers.push(val()),
            "--tool" => o.tool = val(),
            "--args" => o.args = val(),
            "--protocol" => o.protocol = val(),
            "--quickack" => o.quickack = true,
            "--era" => {
                o.era2026 = match val().as_str() {
                    "legacy" => false,
                    "2026" | "2026-07-28" => true,
                    e => die(format!("--era wants legacy or 2026, not {e}")),
                }
            }
            "--warmup" => o.warmup = val().parse().unwrap_or_else(|_| die("bad --warmup")),
            "--phase" => {
                let v = val();
                let (c, n) = v.split_once(':').unwrap_or_else(|| die("--phase wants C:N"));
                let c: usize = c.parse().unwrap_or_else(|_| die("bad --phase"));
                let n: u64 = n.parse().unwrap_or_else(|_| die("bad --phase"));
                if c == 0 || n == 0 {
                    die("--phase wants C >= 1 and N >= 1");
                }
                o.phases.push((c, n));
            }
            "--stdio" => {
                let rest: Vec<String> = it.by_ref().collect();
                let rest = match rest.first().map(String::as_str) {
                    Some("--") => rest[1..].to_vec(),
                    _ => rest,
                };
                if rest.is_empty() {
                    die("--stdio wants a command");
                }
                o.stdio = Some(rest);
            }
            _ => die(format!("unknown argument {a}")),
        }
    }
    if o.stdio.is_some() == o.url.is_some() {
        die("give exactly one of --stdio -- CMD... and --http URL");
    }
    if o.phases.is_empty() {
        o.phases.push((1, 1000));
    }
    if o.protocol.is_empty() {
        o.protocol = if o.era2026 { PROTOCOL_2026 } else { PROTOCOL }.into();
    }
    if o.era2026 && !o.tool.bytes().all(|b| b.is_ascii_graphic()) {
        die("--era 2026: the tool name must be plain visible ASCII (Mcp-Name is sent unencoded)");
    }
    o
}

/// The `tools/call` request of the era under test: the JSON-RPC body for an id, and (2026 era)
/// the per-request HTTP headers `Mcp-Method` and `Mcp-Name`.
struct CallShape {
    /// `"name":…,"arguments":…` plus, in the 2026 era, `,"_meta":{…}`.
    params: String,
    /// Header lines (each ending in CRLF) added to the HTTP request; empty in the legacy era.
    headers: String,
}

impl CallShape {
    fn new(tool: &str, args: &str, era2026: bool) -> Self {
        let mut params = format!(r#""name":{},"arguments":{args}"#, json_escape(tool));
        let mut headers = String::new();
        if era2026 {
            params.push(',');
            params.push_str(META_2026);
            headers = format!("Mcp-Method: tools/call\r\nMcp-Name: {tool}\r\n");
        }
        CallShape { params, headers }
    }

    fn body(&self, id: u64) -> String {
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{{}}}}}"#, self.params)
    }
}

/// `server/discover` with the 2026-07-28 `_meta` (spec 2026-07-28 server/discover.mdx).
fn discover_body(id: u64) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"server/discover","params":{{{META_2026}}}}}"#)
}

/// Dies unless `msg` is a `server/discover` result whose supportedVersions name 2026-07-28.
fn check_discover(msg: &str) {
    let ok = msg.contains("\"result\"")
        && msg
            .split_once("\"supportedVersions\"")
            .is_some_and(|(_, rest)| rest.split(']').next().unwrap_or("").contains(&format!("\"{PROTOCOL_2026}\"")));
    if !ok {
        die(format!("server/discover: no result naming {PROTOCOL_2026}: {}", &msg[..msg.len().min(500)]));
    }
}

fn init_body(protocol: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"{protocol}","capabilities":{{}},"clientInfo":{{"name":"machine-bridge-loadgen","version":"1"}}}}}}"#
    )
}

const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

/// The id of a JSON-RPC response (a message with "id" and "result" or "error"), by a light scan:
/// the servers measured put `"id":N` with a numeric id in every response.
fn response_id(msg: &str) -> Option<u64> {
    if !(msg.contains("\"result\"") || msg.contains("\"error\"")) {
        return None;
    }
    let mut search = msg;
    while let Some(p) = search.find("\"id\"") {
        let after = search[p + 4..].trim_start();
        if let Some(after) = after.strip_prefix(':') {
            let digits: String = after.trim_start().chars().take_while(char::is_ascii_digit).collect();
            if let Ok(id) = digits.parse() {
                return Some(id);
            }
        }
        search = &search[p + 4..];
    }
    None
}

/// A response counts as an error if it is a JSON-RPC error or a tool result with isError: true.
fn is_error(msg: &str) -> bool {
    msg.contains("\"error\":{") || msg.contains("\"isError\":true")
}

struct PhaseResult {
    concurrency: usize,
    requests: u64,
    errors: u64,
    elapsed: Duration,
    latencies: Vec<u64>,
    cpu: f64,
}

// ---------------------------------------------------------------------------------------------
// stdio

struct StdioTarget {
    child: Child,
    stdin: Arc<Mutex<ChildStdin>>,
    /// Per-worker channels: the reader thread sends (id, arrival, error, message) to worker id % C.
    routes: Arc<Mutex<HashMap<u64, Sender<(Instant, bool, String)>>>>,
}

impl StdioTarget {
    fn start(argv: &[String], era2026: bool) -> (Self, String) {
        let mut child = spawn_piped(argv).unwrap_or_else(|e| die(format!("cannot start {}: {e}", argv[0])));
        let stdin = Arc::new(Mutex::new(child.stdin.take().unwrap_or_else(|| die("no stdin"))));
        let stdout = child.stdout.take().unwrap_or_else(|| die("no stdout"));
        let routes: Arc<Mutex<HashMap<u64, Sender<(Instant, bool, String)>>>> =
            Arc::new(Mutex::new(HashMap::new()));
        let r2 = routes.clone();
        thread::spawn(move || {
            let mut rd = BufReader::with_capacity(1 << 16, stdout);
            let mut line = String::new();
            loop {
                line.clear();
                match rd.read_line(&mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                let now = Instant::now();
                if let Some(id) = response_id(&line) {
                    let tx = r2.lock().unwrap().remove(&id);
                    if let Some(tx) = tx {
                        let _ = tx.send((now, is_error(&line), line.clone()));
                    }
                }
            }
        });
        let t = StdioTarget { child, stdin, routes };
        if era2026 {
            let (_, _, disc) = t.request(0, &discover_body(0));
            check_discover(&disc);
            return (t, disc);
        }
        let (_, _, init) = t.request(0, &init_body(&PROTOCOL_OVERRIDE.lock().unwrap()));
        if !init.contains("\"result\"") {
            die(format!("initialize failed: {init}"));
        }
        t.send(INITIALIZED);
        (t, init)
    }

    fn send(&self, line: &str) {
        let mut w = self.stdin.lock().unwrap();
        let mut buf = Vec::with_capacity(line.len() + 1);
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
        w.write_all(&buf).and_then(|_| w.flush()).unwrap_or_else(|e| die(format!("write to the server: {e}")));
    }

    /// Sends a request and waits for its response: (latency ns, error, message).
    fn request(&self, id: u64, body: &str) -> (u64, bool, String) {
        let (tx, rx): (Sender<_>, Receiver<_>) = channel();
        self.routes.lock().unwrap().insert(id, tx);
        let t0 = Instant::now();
        self.send(body);
        let (t1, err, msg) = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| die(format!("no response to request {id} within 60 s")));
        ((t1 - t0).as_nanos() as u64, err, msg)
    }

    fn close(mut self) {
        drop(self.stdin);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

static PROTOCOL_OVERRIDE: Mutex<String> = Mutex::new(String::new());
static QUICKACK: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

unsafe extern "C" {
    fn setsockopt(fd: i32, level: i32, name: i32, value: *const std::ffi::c_void, len: u32) -> i32;
}

/// TCP_QUICKACK (Linux: level IPPROTO_TCP = 6, option 12) when --quickack was given.
fn quickack(s: &TcpStream) {
    if QUICKACK.load(Ordering::Relaxed) {
        use std::os::fd::AsRawFd;
        let one: i32 = 1;
        // SAFETY: a valid socket descriptor and a pointer to a live i32 of the stated length.
        unsafe { setsockopt(s.as_raw_fd(), 6, 12, (&one as *const i32).cast(), 4) };
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP

struct Url {
    host: String,
    port: u16,
    path: String,
}

fn parse_url(u: &str) -> Url {
    let rest = u.strip_prefix("http://").unwrap_or_else(|| die("only http:// URLs"));
    let (hostport, path) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].to_string()),
        None => (rest, "/".to_string()),
    };
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) => (h.to_string(), p.parse().unwrap_or_else(|_| die("bad port"))),
        None => (hostport.to_string(), 80),
    };
    Url { host, port, path }
}

struct HttpConn {
    url: Arc<Url>,
    extra: Arc<Vec<String>>,
    stream: Option<(TcpStream, BufReader<TcpStream>)>,
}

struct HttpResponse {
    status: u16,
    session: Option<String>,
    /// The JSON-RPC message answering our id (or the whole body when no id was awaited).
    message: String,
}

impl HttpConn {
    fn new(url: Arc<Url>, extra: Arc<Vec<String>>) -> Self {
        HttpConn { url, extra, stream: None }
    }

    fn connect(&mut self) {
        let s = TcpStream::connect((self.url.host.as_str(), self.url.port))
            .unwrap_or_else(|e| die(format!("connect {}:{}: {e}", self.url.host, self.url.port)));
        s.set_nodelay(true).ok();
        let r = BufReader::with_capacity(1 << 16, s.try_clone().unwrap_or_else(|e| die(format!("clone: {e}"))));
        self.stream = Some((s, r));
    }

    /// One request on this keep-alive connection; `want` is the JSON-RPC id to wait for.
    /// `headers`: extra header lines for this request (each ending in CRLF).
    fn roundtrip(
        &mut self,
        method: &str,
        session: Option<&str>,
        headers: &str,
        body: &str,
        want: Option<u64>,
    ) -> HttpResponse {
        for attempt in 0..2 {
            if self.stream.is_none() {
                self.connect();
            }
            match self.try_roundtrip(method, session, headers, body, want) {
                Ok(r) => return r,
                // A keep-alive connection the server closed while idle: reconnect once.
                Err(e) if attempt == 0 => {
                    self.stream = None;
                    let _ = e;
                }
                Err(e) => die(format!("HTTP {method} {}: {e}", self.url.path)),
            }
        }
        unreachable!()
    }

    fn try_roundtrip(
        &mut self,
        method: &str,
        session: Option<&str>,
        headers: &str,
        body: &str,
        want: Option<u64>,
    ) -> Result<HttpResponse, String> {
        let (s, r) = self.stream.as_mut().unwrap();
        let mut req = format!(
            "{method} {} HTTP/1.1\r\nHost: {}:{}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Protocol-Version: {}\r\nContent-Length: {}\r\n",
            self.url.path,
            self.url.host,
            self.url.port,
            PROTOCOL_OVERRIDE.lock().unwrap(),
            body.len()
        );
        if let Some(sid) = session {
            req.push_str(&format!("Mcp-Session-Id: {sid}\r\n"));
        }
        req.push_str(headers);
        for h in self.extra.iter() {
            req.push_str(h);
            req.push_str("\r\n");
        }
        req.push_str("\r\n");
        req.push_str(body);
        quickack(s);
        s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
        // Status line and headers.
        let mut line = String::new();
        r.read_line(&mut line).map_err(|e| e.to_string())?;
        if line.is_empty() {
            return Err("connection closed".into());
        }
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("bad status line {line:?}"))?;
        let mut clen: Option<usize> = None;
        let mut chunked = false;
        let mut sse = false;
        let mut close = false;
        let mut sid = None;
        loop {
            line.clear();
            r.read_line(&mut line).map_err(|e| e.to_string())?;
            let l = line.trim_end();
            if l.is_empty() {
                quickack(r.get_ref());
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                let k = k.trim().to_ascii_lowercase();
                let v = v.trim();
                match k.as_str() {
                    "content-length" => clen = v.parse().ok(),
                    "transfer-encoding" => chunked = v.to_ascii_lowercase().contains("chunked"),
                    "content-type" => sse = v.starts_with("text/event-stream"),
                    "connection" => close = v.eq_ignore_ascii_case("close"),
                    "mcp-session-id" => sid = Some(v.to_string()),
                    _ => {}
                }
            }
        }
        let mut body_reader = Body { r, chunked, remaining: clen, chunk_left: 0, done: false };
        if !chunked && clen.is_none() && (status == 202 || status == 204 || status == 304) {
            body_reader.done = true;
        }
        let message = if sse {
            // Read SSE events until the one carrying our response, then drain to the end.
            let mut found = String::new();
            let mut data = String::new();
            let mut pending = Vec::new();
            let mut buf = [0u8; 16384];
            loop {
                let n = body_reader.read_some(&mut buf)?;
                if n == 0 {
                    break;
                }
                pending.extend_from_slice(&buf[..n]);
                while let Some(p) = pending.iter().position(|&b| b == b'\n') {
                    let raw: Vec<u8> = pending.drain(..=p).collect();
                    let l = String::from_utf8_lossy(&raw);
                    let l = l.trim_end_matches(['\n', '\r']);
                    if l.is_empty() {
                        if !data.is_empty() {
                            let hit = match want {
                                Some(id) => response_id(&data) == Some(id),
                                None => true,
                            };
                            if hit && found.is_empty() {
                                found = std::mem::take(&mut data);
                            }
                            data.clear();
                        }
                    } else if let Some(d) = l.strip_prefix("data:") {
                        if !data.is_empty() {
                            data.push('\n');
                        }
                        data.push_str(d.strip_prefix(' ').unwrap_or(d));
                    }
                }
            }
            if found.is_empty() && !data.is_empty() {
                found = data;
            }
            found
        } else {
            let mut all = Vec::new();
            let mut buf = [0u8; 16384];
            loop {
                let n = body_reader.read_some(&mut buf)?;
                if n == 0 {
                    break;
                }
                all.extend_from_slice(&buf[..n]);
            }
            String::from_utf8_lossy(&all).into_owned()
        };
        if close || (!chunked && clen.is_none() && !body_reader.done) {
            self.stream = None;
        }
        Ok(HttpResponse { status, session: sid, message })
    }
}

/// A response body: Content-Length, chunked, or (neither) until the connection closes.
struct Body<'a> {
    r: &'a mut BufReader<TcpStream>,
    chunked: bool,
    remaining: Option<usize>,
    chunk_left: usize,
    done: bool,
}

impl Body<'_> {
    fn read_some(&mut self, buf: &mut [u8]) -> Result<usize, String> {
        if self.done {
            return Ok(0);
        }
        if self.chunked {
            if self.chunk_left == 0 {
                let mut line = String::new();
                self.r.read_line(&mut line).map_err(|e| e.to_string())?;
                let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                    .map_err(|_| format!("bad chunk size {line:?}"))?;
                if size == 0 {
                    // trailers until an empty line
                    loop {
                        line.clear();
                        self.r.read_line(&mut line).map_err(|e| e.to_string())?;
                        if line.trim().is_empty() {
                            break;
                        }
                    }
                    self.done = true;
                    return Ok(0);
                }
                self.chunk_left = size;
            }
            let m = buf.len().min(self.chunk_left);
            let n = self.r.read(&mut buf[..m]).map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("connection closed inside a chunk".into());
            }
            self.chunk_left -= n;
            if self.chunk_left == 0 {
                let mut crlf = [0u8; 2];
                self.r.read_exact(&mut crlf).map_err(|e| e.to_string())?;
            }
            Ok(n)
        } else if let Some(rem) = self.remaining {
            if rem == 0 {
                self.done = true;
                return Ok(0);
            }
            let m = buf.len().min(rem);
            let n = self.r.read(&mut buf[..m]).map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("connection closed inside the body".into());
            }
            self.remaining = Some(rem - n);
            Ok(n)
        } else {
            let n = self.r.read(buf).map_err(|e| e.to_string())?;
            if n == 0 {
                self.done = true;
            }
            Ok(n)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// phases

enum Target {
    Stdio(Arc<StdioTarget>),
    Http { session: Option<String> },
}

fn run_phase(target: &Target, conns: &mut Vec<HttpConn>, c: usize, n: u64, next_id: &AtomicU64, call: &CallShape) -> PhaseResult {
    let issued = Arc::new(AtomicU64::new(0));
    let cpu0 = self_cpu();
    let t0 = Instant::now();
    let mut results: Vec<(Vec<u64>, u64)> = Vec::new();
    thread::scope(|scope| {
        let mut handles = Vec::new();
        let mut conn_iter = conns.iter_mut();
        for _ in 0..c {
            let issued = issued.clone();
            let conn = conn_iter.next();
            handles.push(scope.spawn(move || {
                let mut lat = Vec::new();
                let mut errors = 0u64;
                let mut conn = conn;
                while issued.fetch_add(1, Ordering::Relaxed) < n {
                    let id = next_id.fetch_add(1, Ordering::Relaxed);
                    let body = call.body(id);
                    match target {
                        Target::Stdio(t) => {
                            let (ns, err, _) = t.request(id, &body);
                            lat.push(ns);
                            errors += err as u64;
                        }
                        Target::Http { session, .. } => {
                            let conn = conn.as_mut().unwrap();
                            let t = Instant::now();
                            let r = conn.roundtrip("POST", session.as_deref(), &call.headers, &body, Some(id));
                            lat.push(t.elapsed().as_nanos() as u64);
                            if r.status != 200 || r.message.is_empty() || is_error(&r.message) {
                                errors += 1;
                                if errors <= 3 {
                                    eprintln!("loadgen: call {id}: HTTP {} {}", r.status, &r.message[..r.message.len().min(300)]);
                                }
                            }
                        }
                    }
                }
                (lat, errors)
            }));
        }
        for h in handles {
            results.push(h.join().unwrap_or_else(|_| die("a worker panicked")));
        }
    });
    let elapsed = t0.elapsed();
    let cpu = self_cpu() - cpu0;
    let mut latencies = Vec::new();
    let mut errors = 0;
    for (l, e) in results {
        latencies.extend(l);
        errors += e;
    }
    PhaseResult { concurrency: c, requests: latencies.len() as u64, errors, elapsed, latencies, cpu }
}

fn main() {
    let o = parse_opts();
    *PROTOCOL_OVERRIDE.lock().unwrap() = o.protocol.clone();
    QUICKACK.store(o.quickack, Ordering::Relaxed);
    let max_c = o.phases.iter().map(|p| p.0).max().unwrap_or(1);
    let next_id = AtomicU64::new(1);
    let mut conns: Vec<HttpConn> = Vec::new();
    let call = CallShape::new(&o.tool, &o.args, o.era2026);
    let target = if let Some(argv) = &o.stdio {
        let (t, _) = StdioTarget::start(argv, o.era2026);
        Target::Stdio(Arc::new(t))
    } else {
        let url = Arc::new(parse_url(o.url.as_ref().unwrap()));
        let extra = Arc::new(o.headers.clone());
        let mut c0 = HttpConn::new(url.clone(), extra.clone());
        let session = if o.era2026 {
            // No session in 2026-07-28: a discover to check the era is served, then plain calls.
            let r = c0.roundtrip("POST", None, "Mcp-Method: server/discover\r\n", &discover_body(0), Some(0));
            if r.status != 200 {
                die(format!("server/discover: HTTP {} {}", r.status, r.message));
            }
            check_discover(&r.message);
            None
        } else {
            let r = c0.roundtrip("POST", None, "", &init_body(&o.protocol), Some(0));
            if r.status != 200 || !r.message.contains("\"result\"") {
                die(format!("initialize: HTTP {} {}", r.status, r.message));
            }
            let session = r.session.clone();
            let r2 = c0.roundtrip("POST", session.as_deref(), "", INITIALIZED, None);
            if !(200..300).contains(&r2.status) {
                die(format!("notifications/initialized: HTTP {}", r2.status));
            }
            session
        };
        conns.push(c0);
        for _ in 1..max_c {
            conns.push(HttpConn::new(url.clone(), extra.clone()));
        }
        Target::Http { session }
    };
    // One checked call: its result goes into the output, so the driver can verify it.
    let first_result = {
        let id = next_id.fetch_add(1, Ordering::Relaxed);
        let body = call.body(id);
        match &target {
            Target::Stdio(t) => t.request(id, &body).2,
            Target::Http { session, .. } => conns[0].roundtrip("POST", session.as_deref(), &call.headers, &body, Some(id)).message,
        }
    };
    if o.warmup > 0 {
        run_phase(&target, &mut conns, o.phases[0].0, o.warmup, &next_id, &call);
    }
    let mut out = Vec::new();
    for &(c, n) in &o.phases {
        out.push(run_phase(&target, &mut conns, c, n, &next_id, &call));
    }
    // Close the session.
    match target {
        Target::Stdio(t) => {
            if let Ok(t) = Arc::try_unwrap(t) {
                t.close();
            }
        }
        Target::Http { session: Some(sid), .. } => {
            let _ = conns[0].try_roundtrip("DELETE", Some(&sid), "", "", None);
        }
        Target::Http { .. } => {}
    }
    let mut s = String::from("{\"phases\":[");
    for (i, p) in out.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let lat: Vec<String> = p.latencies.iter().map(u64::to_string).collect();
        s.push_str(&format!(
            "{{\"concurrency\":{},\"requests\":{},\"errors\":{},\"elapsed_s\":{:.6},\"client_cpu_s\":{:.2},\"latencies_ns\":[{}]}}",
            p.concurrency,
            p.requests,
            p.errors,
            p.elapsed.as_secs_f64(),
            p.cpu,
            lat.join(",")
        ));
    }
    s.push_str(&format!(
        "],\"era\":\"{}\",\"total_cpu_s\":{:.2},\"first_result\":",
        if o.era2026 { "2026-07-28" } else { "legacy" },
        self_cpu()
    ));
    s.push_str(&json_escape(&first_result));
    s.push('}');
    println!("{s}");
}
