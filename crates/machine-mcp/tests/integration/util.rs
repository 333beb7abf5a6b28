//! Test fixtures: a real `machine-mcp stdio` process driven over its stdin/stdout.

use std::{
    collections::{HashMap, VecDeque},
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, Command, Stdio},
    sync::mpsc::{self, Receiver, RecvTimeoutError},
    time::{Duration, Instant},
};

use serde_json::{Value, json};

/// How long a test waits for any single response before failing.
pub(crate) const RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);

/// Path of the built binary.
pub(crate) fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_machine-mcp"))
}

/// A fresh 0711 directory in the first of TMPDIR, `/tmp`, `/var/tmp` and `/dev/shm` whose
/// every ancestor other users can traverse: what a test that runs a program as another user
/// needs, wherever the clone lies and whatever the modes above it or TMPDIR.
pub(crate) fn reachable_by_others() -> tempfile::TempDir {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let bases = [
        std::env::temp_dir(),
        "/tmp".into(),
        "/var/tmp".into(),
        "/dev/shm".into(),
    ];
    let base = bases
        .iter()
        .find(|b| {
            b.ancestors()
                .all(|a| std::fs::metadata(a).is_ok_and(|m| m.mode() & 0o001 != 0))
        })
        .expect("a temporary directory other users can traverse");
    let d = tempfile::tempdir_in(base).unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    d
}

/// `to`, a hard link to the program `from` (a copy across file systems), so the program can be
/// run from a directory of [`reachable_by_others`].
pub(crate) fn link_or_copy(from: &Path, to: &Path) -> PathBuf {
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to).unwrap();
    }
    to.to_owned()
}

/// A running `machine-mcp stdio`.
pub(crate) struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    pending: VecDeque<Value>,
    next_id: i64,
    output_schemas: HashMap<String, Value>,
    pub(crate) init: Value,
}

/// A `tools/call` result.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    pub(crate) is_error: bool,
    pub(crate) structured: Value,
    pub(crate) content: Vec<Value>,
    /// For an error result: the JSON object of its text content.
    pub(crate) error: Value,
    /// The text block (a summary line, then plain text); empty for content without text.
    pub(crate) text: String,
}

impl Reply {
    /// The first line of the text block: the summary.
    pub(crate) fn summary(&self) -> &str {
        self.text.split('\n').next().unwrap_or("")
    }

    /// The text block after its summary line.
    pub(crate) fn body(&self) -> &str {
        self.text.split_once('\n').map_or("", |(_, b)| b)
    }
}

impl Reply {
    /// The error code of an error result (panics on success, showing the result).
    pub(crate) fn code(&self) -> &str {
        assert!(
            self.is_error,
            "expected an error, got {:?}",
            self.structured
        );
        self.error["code"].as_str().unwrap_or("")
    }

    /// The structured result (panics on an error result, showing it).
    pub(crate) fn ok(&self) -> &Value {
        assert!(!self.is_error, "tool error: {}", self.error);
        &self.structured
    }
}

impl Server {
    /// Starts the server on `workspace` with extra args and runs the initialize handshake.
    pub(crate) fn start(workspace: &Path, args: &[&str]) -> Self {
        let mut s = Self::spawn(workspace, args);
        s.handshake();
        s
    }

    fn handshake(&mut self) {
        let s = self;
        let init = s.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "integration-tests", "version": "0"}}),
        );
        assert!(init.get("result").is_some(), "initialize failed: {init}");
        s.init = init["result"].clone();
        s.notify("notifications/initialized", json!({}));
        let list = s.request("tools/list", json!({}));
        for t in list["result"]["tools"].as_array().expect("tools") {
            if let Some(schema) = t.get("outputSchema") {
                s.output_schemas
                    .insert(t["name"].as_str().unwrap().to_owned(), schema.clone());
            }
        }
    }

    /// Like [`Server::start`] with extra environment variables for the server process.
    pub(crate) fn start_with_env(workspace: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut s = Self::spawn_with_env(workspace, args, env);
        s.handshake();
        s
    }

    /// Starts the server without any handshake.
    pub(crate) fn spawn(workspace: &Path, args: &[&str]) -> Self {
        Self::spawn_with_env(workspace, args, &[])
    }

    fn spawn_with_env(workspace: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::spawn_program(&bin(), workspace, args, env, Stdio::null())
    }

    /// Like [`Server::start_with_env`] with the binary at `program` (a copy a test may replace
    /// while it runs) and the server's stderr (its log) appended to the file `log`.
    pub(crate) fn start_binary(
        program: &Path,
        workspace: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        log: &Path,
    ) -> Self {
        let mut s = Self::spawn_binary(program, workspace, args, env, log);
        s.handshake();
        s
    }

    /// Like [`Server::start_binary`] without any handshake.
    pub(crate) fn spawn_binary(
        program: &Path,
        workspace: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        log: &Path,
    ) -> Self {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("open the server's log");
        Self::spawn_program(program, workspace, args, env, Stdio::from(log))
    }

    fn spawn_program(
        program: &Path,
        workspace: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        stderr: Stdio,
    ) -> Self {
        let mut child = Command::new(program)
            .arg("stdio")
            .arg("--workspace")
            .arg(workspace)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn machine-mcp");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            stdin: child.stdin.take(),
            child,
            lines: rx,
            pending: VecDeque::new(),
            next_id: 1,
            output_schemas: HashMap::new(),
            init: Value::Null,
        }
    }

    /// The server's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits up to `within` for the server process to exit → its exit status, `None` if it
    /// still runs.
    pub(crate) fn exit_within(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        exit_within(&mut self.child, within)
    }

    /// Writes one raw line (a newline is added).
    pub(crate) fn send_line(&mut self, raw: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(raw.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// Writes raw bytes as they are.
    pub(crate) fn send_bytes(&mut self, raw: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(raw).unwrap();
        stdin.flush().unwrap();
    }

    /// Closes stdin (end of the session).
    pub(crate) fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Sends a notification.
    pub(crate) fn notify(&mut self, method: &str, params: Value) {
        self.send_line(&json!({"jsonrpc": "2.0", "method": method, "params": params}).to_string());
    }

    /// Sends a request and returns its id without waiting.
    pub(crate) fn send_request(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send_line(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string(),
        );
        id
    }

    /// Next message from the server, or `None` after `timeout`.
    pub(crate) fn recv(&mut self, timeout: Duration) -> Option<Value> {
        if let Some(v) = self.pending.pop_front() {
            return Some(v);
        }
        self.recv_wire(timeout)
    }

    fn recv_wire(&mut self, timeout: Duration) -> Option<Value> {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => Some(
                serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("stdout carried a non-JSON line ({e}): {line:?}")),
            ),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => None,
        }
    }

    /// Waits for the response with `id`, keeping other messages for later.
    pub(crate) fn wait_for(&mut self, id: &Value, timeout: Duration) -> Option<Value> {
        if let Some(pos) = self
            .pending
            .iter()
            .position(|m| m.get("id") == Some(id) && m.get("method").is_none())
        {
            return self.pending.remove(pos);
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let m = self.recv_wire(left)?;
            if m.get("id") == Some(id) && m.get("method").is_none() {
                return Some(m);
            }
            self.pending.push_back(m);
        }
    }

    /// Takes the messages of the server with `method` (its notifications and requests) that
    /// arrived so far, without waiting for more; keeps the others for later.
    pub(crate) fn take_method(&mut self, method: &str) -> Vec<Value> {
        while let Some(m) = self.recv_wire(Duration::ZERO) {
            self.pending.push_back(m);
        }
        let (taken, kept): (VecDeque<Value>, VecDeque<Value>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|m| m.get("method").and_then(Value::as_str) == Some(method));
        self.pending = kept;
        taken.into()
    }

    /// Sends a request and waits for its response.
    pub(crate) fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params);
        self.wait_for(&json!(id), RESPONSE_TIMEOUT)
            .unwrap_or_else(|| panic!("no response to {method}"))
    }

    /// Calls a tool and checks the result's shape: an error result has no structuredContent and a
    /// JSON text; a success result with an output schema validates against it.
    pub(crate) fn call(&mut self, tool: &str, args: Value) -> Reply {
        let resp = self.request("tools/call", json!({"name": tool, "arguments": args}));
        parse_reply(&resp, self.output_schemas.get(tool))
    }

    /// Sends one `tools/call` of `tool` per element of `calls`, all before reading any answer (so
    /// they run concurrently), then returns the replies in the order of `calls`, each checked
    /// like [`Server::call`]'s.
    pub(crate) fn call_all(&mut self, tool: &str, calls: Vec<Value>) -> Vec<Reply> {
        let ids: Vec<i64> = calls
            .into_iter()
            .map(|args| self.send_request("tools/call", json!({"name": tool, "arguments": args})))
            .collect();
        ids.iter()
            .map(|id| {
                let resp = self
                    .wait_for(&json!(id), RESPONSE_TIMEOUT)
                    .unwrap_or_else(|| panic!("no response to {tool} call {id}"));
                parse_reply(&resp, self.output_schemas.get(tool))
            })
            .collect()
    }
}

/// Interprets a `tools/call` response (see [`Server::call`]).
pub(crate) fn parse_reply(resp: &Value, schema: Option<&Value>) -> Reply {
    let result = resp
        .get("result")
        .unwrap_or_else(|| panic!("JSON-RPC error instead of a result: {resp}"));
    let is_error = result["isError"].as_bool().unwrap_or(false);
    let content = result["content"].as_array().cloned().unwrap_or_default();
    if is_error {
        assert!(
            result.get("structuredContent").is_none(),
            "error results carry no structuredContent"
        );
        let text = content[0]["text"].as_str().expect("error text");
        assert!(
            text.len() < runtime::limits::ERROR_TEXT_MAX_CHARS,
            "error text of {} characters",
            text.len()
        );
        assert!(
            text.starts_with("{\"code\":"),
            "the code comes first: {text}"
        );
        let error: Value = serde_json::from_str(text).expect("error text is JSON");
        for k in ["code", "message", "retryable", "side_effects_started"] {
            assert!(error.get(k).is_some(), "error lacks {k}: {error}");
        }
        return Reply {
            is_error,
            structured: Value::Null,
            text: text.to_owned(),
            content,
            error,
        };
    }
    let structured = result
        .get("structuredContent")
        .cloned()
        .unwrap_or(Value::Null);
    if let Some(schema) = schema {
        let validator = jsonschema::validator_for(schema).expect("output schema compiles");
        let errors: Vec<String> = validator
            .iter_errors(&structured)
            .map(|e| e.to_string())
            .collect();
        assert!(
            errors.is_empty(),
            "structuredContent violates the output schema: {errors:?}\n{structured}"
        );
        let text = content[0]["text"].as_str().expect("a text block");
        let summary = text.split('\n').next().unwrap_or("");
        assert!(
            !summary.is_empty()
                && summary.len() <= runtime::limits::RESULT_SUMMARY_MAX_CHARS
                && text.contains('\n'),
            "the text starts with a summary line: {}",
            &text[..text.len().min(300)]
        );
    }
    let text = content
        .first()
        .and_then(|c| c["text"].as_str())
        .unwrap_or("")
        .to_owned();
    Reply {
        is_error,
        structured,
        content,
        error: Value::Null,
        text,
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Bytes this process has read through read(2)-like calls (`rchar` in /proc/PID/io).
pub(crate) fn rchar(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).expect("/proc/PID/io");
    io.lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .and_then(|v| v.trim().parse().ok())
        .expect("rchar")
}

/// Linux PATH_MAX: the longest path a system call takes, terminating NUL included.
pub(crate) const PATH_MAX: usize = 4096;

/// Paths made by [`Tree::too_long_paths`], relative to the workspace.
pub(crate) struct TooLong {
    /// A file whose own path is too long, in a directory that can still be listed.
    pub(crate) file: String,
    /// A directory whose path is too long (it cannot be listed).
    pub(crate) dir: String,
}

/// A temporary workspace directory with helpers.
pub(crate) struct Tree {
    pub(crate) dir: tempfile::TempDir,
}

impl Tree {
    pub(crate) fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// The workspace root.
    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a file (creating directories).
    pub(crate) fn write(&self, rel: &str, content: impl AsRef<[u8]>) -> PathBuf {
        let p = self.dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, content).unwrap();
        p
    }

    /// Reads a file's bytes.
    pub(crate) fn read(&self, rel: &str) -> Vec<u8> {
        std::fs::read(self.dir.path().join(rel)).unwrap()
    }

    /// Builds, under `deep/`, a chain of 200-byte directory names down to the last directory
    /// whose absolute path still fits PATH_MAX, and in it a file and a directory (holding
    /// `needle.txt`) whose paths do not. The kernel refuses those paths with ENAMETOOLONG for
    /// every user, root included (root ignores permission bits), so they are a read failure a
    /// test can make anywhere. A child process creates them with paths relative to that last
    /// directory; both hold the line `needle`.
    pub(crate) fn too_long_paths(&self) -> TooLong {
        let root = std::fs::canonicalize(self.path()).unwrap();
        let abs_len = |rel: &str| root.as_os_str().len() + 1 + rel.len();
        let name = |i: usize| format!("{i:03}{}", "d".repeat(197));
        let mut rel = String::from("deep");
        let mut i = 0;
        // Go on while one more 200-byte name still fits: PATH_MAX counts the terminating NUL.
        while abs_len(&rel) + 1 + 200 < PATH_MAX {
            rel = format!("{rel}/{}", name(i));
            i += 1;
        }
        std::fs::create_dir_all(root.join(&rel)).unwrap();
        let file = format!("f{}", "f".repeat(199));
        let dir = name(i);
        let status = Command::new("sh")
            .args([
                "-c",
                r#"printf 'needle\n' > "$1" && mkdir "$2" && printf 'needle\n' > "$2/needle.txt""#,
                "sh",
                &file,
                &dir,
            ])
            .current_dir(root.join(&rel))
            .status()
            .expect("sh");
        assert!(status.success(), "creating the too-long paths failed");
        TooLong {
            file: format!("{rel}/{file}"),
            dir: format!("{rel}/{dir}"),
        }
    }

    /// Whether this process is root (its files belong to uid 0), for which permission bits
    /// deny nothing.
    pub(crate) fn owned_by_root(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(self.path()).unwrap().uid() == 0
    }
}

/// Whether `pid` is still a running process (a zombie awaiting its reaper counts as gone).
pub(crate) fn alive(pid: u64) -> bool {
    // Bytes: a command name need not be UTF-8.
    match std::fs::read(format!("/proc/{pid}/stat")) {
        Ok(s) => {
            let after = s
                .iter()
                .rposition(|b| *b == b')')
                .map_or(&s[..0], |i| &s[i + 1..]);
            let state = String::from_utf8_lossy(after);
            let state = state.split_whitespace().next().unwrap_or("");
            state != "Z" && state != "X"
        }
        Err(_) => false,
    }
}

/// Waits up to `within` for `child` to exit → its exit status, `None` if it still runs.
pub(crate) fn exit_within(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let end = Instant::now() + within;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        if Instant::now() >= end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits up to `within` for `pid` to be gone ([`alive`] false); whether it went.
pub(crate) fn wait_gone(pid: u64, within: Duration) -> bool {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if !alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    !alive(pid)
}

/// Waits up to `within` for `path` to hold a whole line and returns its text; panics if not.
pub(crate) fn wait_file(path: &std::path::Path, within: Duration) -> String {
    let end = Instant::now() + within;
    loop {
        if let Ok(s) = std::fs::read_to_string(path)
            && s.ends_with('\n')
        {
            return s;
        }
        assert!(Instant::now() < end, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `n` random characters of the base64url alphabet (PKCE verifiers, nonces).
pub(crate) fn random_token(n: usize) -> String {
    use rand::Rng;
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut rng = rand::thread_rng();
    (0..n)
        .map(|_| A[rng.gen_range(0..A.len())] as char)
        .collect()
}

/// Processes whose command line contains `needle` (for finding upstream children).
pub(crate) fn processes_with(needle: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .chars()
                .all(|c| c.is_ascii_digit())
        })
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(needle))
                .unwrap_or(false)
        })
        .count()
}

/// The build stamp of "a newer build": it reports version `VERSION+2`.
pub(crate) const NEWER_STAMP: u64 = 2;

/// What precedes the 24 digits of the build stamp in the binary.
const STAMP_MARKER: &str = "machine-mcp build stamp:";

/// A copy of the built binary whose build stamp says [`NEWER_STAMP`], made once per test run
/// (in Cargo's temporary directory, next to the binary, so tests can hard-link it).
pub(crate) fn newer_build() -> &'static Path {
    static NEWER: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    NEWER.get_or_init(|| {
        let src = bin();
        let dst = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("supervisor-machine-mcp+{NEWER_STAMP}"));
        let found = Command::new("grep")
            .arg("-obaE")
            .arg(format!("{STAMP_MARKER}[0-9]{{24}}"))
            .arg(&src)
            .output()
            .expect("grep");
        let hits = String::from_utf8_lossy(&found.stdout).into_owned();
        let offsets: Vec<u64> = hits
            .lines()
            .map(|l| l.split(':').next().unwrap().parse().unwrap())
            .collect();
        assert_eq!(offsets.len(), 1, "one build stamp in the binary: {hits}");
        let digits_at = offsets[0] + STAMP_MARKER.len() as u64;
        // A child process writes the file: the test process never holds it open for writing
        // (a fork of another test thread could inherit that descriptor and make exec fail
        // with ETXTBSY).
        let ok = Command::new("sh")
            .args([
                "-c",
                r#"cp "$1" "$2.$$" && printf %s "$3" | dd of="$2.$$" bs=1 seek="$4" conv=notrunc status=none && mv "$2.$$" "$2""#,
                "sh",
            ])
            .arg(&src)
            .arg(&dst)
            .arg(format!("{NEWER_STAMP:024}"))
            .arg(digits_at.to_string())
            .status()
            .expect("sh")
            .success();
        assert!(ok, "stamping a copy of the binary failed");
        dst
    })
}

/// Whether `log` names WebSocket close code 1006 (a connection lost without a Close frame): the
/// number standing alone, not inside a longer one such as a timestamp's microseconds
/// (`…38.981006Z`).
pub(crate) fn logs_code_1006(log: &str) -> bool {
    log.match_indices("1006").any(|(i, _)| {
        let before = log[..i].chars().next_back();
        let after = log[i + 4..].chars().next();
        !before.is_some_and(|c| c.is_ascii_digit()) && !after.is_some_and(|c| c.is_ascii_digit())
    })
}

#[test]
fn code_1006_is_found_alone_and_not_inside_a_timestamp() {
    assert!(logs_code_1006("daemon socket closed code=1006 reason=x"));
    assert!(logs_code_1006("(close 1006)"));
    assert!(!logs_code_1006(
        "2026-12-07T02:20:38.981006Z DEBUG Replying to close"
    ));
    assert!(!logs_code_1006("port 10065"));
}
