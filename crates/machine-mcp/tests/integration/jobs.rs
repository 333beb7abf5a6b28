//! Managed jobs and local resources (issue 16, docs/jobs.md): detached runners that outlive the
//! server, the daemon and the runner itself, cancellation, dependencies, idempotency, the run
//! slots, redaction of secrets, validation, unreadable status files, and the relay.

use std::{
    io::{BufRead, BufReader, Write},
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::{Child, ChildStdin, Command, Output, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use base64::Engine as _;
use serde_json::{Value, json};
use sha2::Digest as _;

use runtime::limits::{
    JOB_DEPENDS_MAX, JOB_FINALLY_STEPS_MAX, JOB_STDIN_MAX_BYTES, JOB_STEP_TIMEOUT_MAX,
    JOB_STEPS_MAX, JOB_TEMP_FILES_MAX, JOB_TEMP_FILES_MAX_BYTES, JOBS_RUNNING_MAX,
};

use crate::{
    net::Client,
    relay::{mcp_url, setup},
    util::{
        RESPONSE_TIMEOUT, Reply, Server, Tree, alive, bin, parse_reply, random_token, wait_file,
        wait_gone,
    },
};

/// How long a test waits for a job to reach a state.
const DEADLINE: Duration = Duration::from_secs(60);

/// How long a test waits for something that follows at once (a process gone, a file removed).
const SHORT: Duration = Duration::from_secs(10);

/// States a job does not leave (`interrupted` only while no recovery is running).
const TERMINAL: [&str; 8] = [
    "succeeded",
    "failed",
    "cancelled",
    "interrupted",
    "recovered",
    "recovery_failed",
    "dependency_failed",
    "expired",
];

/// Whatever carries a tool call: the stdio fixture, a logged stdio server, a relay client.
trait Caller {
    fn tool(&mut self, name: &str, args: Value) -> Reply;
}

impl Caller for Server {
    fn tool(&mut self, name: &str, args: Value) -> Reply {
        self.call(name, args)
    }
}

impl Caller for Client {
    fn tool(&mut self, name: &str, args: Value) -> Reply {
        parse_reply(&self.call(name, args), None)
    }
}

/// A `machine-mcp stdio` whose stderr (at log level trace) goes to a file, which the [`Server`]
/// fixture discards: for the checks that no secret reaches a log.
struct Logged {
    child: Child,
    stdin: ChildStdin,
    responses: mpsc::Receiver<Value>,
    next_id: i64,
}

impl Logged {
    fn start(e: &Env, log: &Path) -> Self {
        let mut child = Command::new(bin())
            .args(["--log-level", "trace", "stdio", "--workspace"])
            .arg(e.ws.path())
            .arg("--state-dir")
            .arg(e.state.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .expect("spawn machine-mcp stdio");
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, responses) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                let m: Value = serde_json::from_str(&line).expect("stdout carries JSON-RPC only");
                if m.get("method").is_none() && tx.send(m).is_err() {
                    break;
                }
            }
        });
        let mut s = Self {
            stdin: child.stdin.take().unwrap(),
            child,
            responses,
            next_id: 0,
        };
        let init = s.rpc(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "jobs-tests", "version": "0"}}),
        );
        assert!(init.get("result").is_some(), "initialize: {init}");
        writeln!(
            s.stdin,
            "{}",
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
        )
        .unwrap();
        s
    }

    fn rpc(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(self.stdin, "{line}").unwrap();
        loop {
            let m = self
                .responses
                .recv_timeout(RESPONSE_TIMEOUT)
                .unwrap_or_else(|_| panic!("no response to {method}"));
            if m["id"] == id {
                return m;
            }
        }
    }
}

impl Caller for Logged {
    fn tool(&mut self, name: &str, args: Value) -> Reply {
        parse_reply(
            &self.rpc("tools/call", json!({"name": name, "arguments": args})),
            None,
        )
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A workspace and a state directory of one test.
struct Env {
    ws: Tree,
    state: tempfile::TempDir,
}

impl Env {
    fn new() -> Self {
        Self {
            ws: Tree::new(),
            state: tempfile::tempdir().unwrap(),
        }
    }

    fn state_arg(&self) -> &str {
        self.state.path().to_str().unwrap()
    }

    /// `machine-mcp stdio` on this workspace and state directory.
    fn server(&self, extra: &[&str]) -> Server {
        let mut args = vec!["--state-dir", self.state_arg()];
        args.extend_from_slice(extra);
        Server::start(self.ws.path(), &args)
    }

    fn job_dir(&self, id: &str) -> PathBuf {
        self.state.path().join("jobs").join(id)
    }

    /// `machine-mcp ARGS --state-dir DIR`, run to its end.
    fn cli_output(&self, args: &[&str]) -> Output {
        Command::new(bin())
            .args(args)
            .args(["--state-dir", self.state_arg()])
            .output()
            .unwrap()
    }

    /// [`Env::cli_output`] that must succeed: its stdout and stderr.
    fn cli(&self, args: &[&str]) -> (String, String) {
        let out = self.cli_output(args);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "machine-mcp {args:?}: {stderr}");
        (String::from_utf8(out.stdout).unwrap(), stderr)
    }

    /// [`Env::cli`] whose stdout is one JSON document.
    fn cli_json(&self, args: &[&str]) -> Value {
        let (out, _) = self.cli(args);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("machine-mcp {args:?} ({e}): {out}"))
    }

    /// The job ids that have a directory in the store.
    fn job_dirs(&self) -> Vec<String> {
        match std::fs::read_dir(self.state.path().join("jobs")) {
            Ok(d) => d
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("job_"))
                .collect(),
            Err(_) => Vec::new(),
        }
    }
}

/// A step running `script` with `sh -c` (an argv, not shell mode).
fn sh(script: &str) -> Value {
    json!({"argv": ["sh", "-c", script]})
}

/// A plan named `name` with a fresh idempotency key (job ids derive from the caller and the
/// key, so parallel tests must not share one).
fn plan(name: &str, steps: Value) -> Value {
    let key = format!(
        "{}-{}",
        name.replace(' ', "-"),
        hex::encode(random_token(8))
    );
    json!({"name": name, "idempotency_key": key, "steps": steps})
}

/// A [`plan`] of one `sh -c` step and one `sh -c` finally step.
fn plan_with_finally(name: &str, main: &str, finally: &str) -> Value {
    let mut p = plan(name, json!([sh(main)]));
    p["finally_steps"] = json!([sh(finally)]);
    p
}

/// Starts `plan` and returns its job id.
fn start(c: &mut impl Caller, plan: &Value) -> String {
    let r = c.tool("start_job", plan.clone());
    let out = r.ok();
    assert_eq!(out["idempotency_replay"], false, "{out}");
    assert!(
        matches!(out["state"].as_str(), Some("queued" | "running")),
        "{out}"
    );
    out["job_id"].as_str().expect("job_id").to_owned()
}

fn read(c: &mut impl Caller, id: &str) -> Value {
    c.tool("read_job", json!({"job_id": id})).ok().clone()
}

fn list(c: &mut impl Caller) -> Vec<Value> {
    let r = c.tool("list_jobs", json!({}));
    r.ok()["jobs"].as_array().expect("jobs").clone()
}

/// The row of `id` in a job list.
fn row<'a>(jobs: &'a [Value], id: &str) -> &'a Value {
    jobs.iter()
        .find(|j| j["job_id"] == id)
        .unwrap_or_else(|| panic!("{id} not listed: {jobs:?}"))
}

/// The jobs of `machine-mcp job list --json`.
fn cli_jobs(e: &Env) -> Vec<Value> {
    let v = e.cli_json(&["job", "list", "--json"]);
    v.get("jobs")
        .unwrap_or(&v)
        .as_array()
        .unwrap_or_else(|| panic!("job list --json: {v}"))
        .clone()
}

/// Polls `read_job` (waiting on its version) until `done` holds; panics after [`DEADLINE`].
fn wait_until(c: &mut impl Caller, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    let end = Instant::now() + DEADLINE;
    let mut st = read(c, id);
    loop {
        if done(&st) {
            return st;
        }
        assert!(Instant::now() < end, "job {id} never got there: {st}");
        st = c
            .tool(
                "read_job",
                json!({"job_id": id, "wait_ms": 5000, "after_version": st["version"]}),
            )
            .ok()
            .clone();
    }
}

fn state_of(st: &Value) -> &str {
    st["state"].as_str().unwrap_or("")
}

/// Waits until the job is in a state it does not leave.
fn wait_terminal(c: &mut impl Caller, id: &str) -> Value {
    wait_until(c, id, |st| {
        TERMINAL.contains(&state_of(st))
            && !(state_of(st) == "interrupted" && st["phase"] == "recovery")
    })
}

/// The steps of a job status in one phase.
fn steps<'a>(st: &'a Value, phase: &str) -> Vec<&'a Value> {
    st["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .filter(|s| s["phase"] == phase)
        .collect()
}

/// SIGKILL, as a crash would.
fn sigkill(pid: u32) {
    let st = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success(), "kill -KILL {pid}");
}

/// The live `job-runner` processes whose command line names `id`, and the command lines of
/// every runner seen (for a failure message).
fn runners(id: &str) -> (Vec<u32>, Vec<String>) {
    let mut mine = Vec::new();
    let mut seen = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&raw).replace('\0', " ");
        if cmd.contains("job-runner") && alive(pid.into()) {
            if cmd.contains(id) {
                mine.push(pid);
            }
            seen.push(cmd);
        }
    }
    (mine, seen)
}

/// Waits until no runner of `id` is left (it writes nothing after it exits).
fn wait_runner_gone(id: &str) {
    let end = Instant::now() + SHORT;
    while !runners(id).0.is_empty() {
        assert!(Instant::now() < end, "the runner of {id} did not exit");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until `path` holds `n` lines; returns them.
fn wait_lines(path: &Path, n: usize) -> Vec<String> {
    let end = Instant::now() + DEADLINE;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.ends_with('\n') && text.lines().count() >= n {
            return text.lines().map(str::to_owned).collect();
        }
        assert!(
            Instant::now() < end,
            "{} never held {n} lines: {text:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn line_count(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .count()
}

#[test]
fn a_job_outlives_the_sigkilled_server_that_started_it() {
    let e = Env::new();
    let mut s = e.server(&[]);
    let id = start(
        &mut s,
        &plan(
            "survivor",
            json!([sh(
                "echo up > started.txt; sleep 2; echo done > survived.txt; echo out-of-job"
            )]),
        ),
    );
    wait_file(&e.ws.path().join("started.txt"), DEADLINE);
    assert_eq!(read(&mut s, &id)["state"], "running");
    sigkill(s.pid());
    drop(s);
    assert!(
        !e.ws.path().join("survived.txt").exists(),
        "the step was still running when the server died"
    );
    let mut s = e.server(&[]);
    let st = wait_terminal(&mut s, &id);
    assert_eq!(st["state"], "succeeded", "{st}");
    let step = steps(&st, "steps")[0];
    assert_eq!(step["state"], "exited", "{st}");
    assert_eq!(step["exit_code"], 0, "{st}");
    assert_eq!(step["stdout"], "out-of-job\n", "{st}");
    assert_eq!(e.ws.read("survived.txt"), b"done\n");
    assert!(
        st["finished_at"].is_string() || st["finished_at"].is_number(),
        "{st}"
    );
}

#[test]
fn a_sigkilled_runner_is_detected_and_only_its_finally_steps_run_again() {
    let e = Env::new();
    let mut s = e.server(&[]);
    let p = plan_with_finally(
        "recoverable",
        "echo $$ > step.pid; echo run >> main.log; exec sleep 30",
        "echo cleaned >> finally.log",
    );
    let id = start(&mut s, &p);
    let step_pid: u64 = wait_file(&e.ws.path().join("step.pid"), DEADLINE)
        .trim()
        .parse()
        .unwrap();
    wait_file(&e.ws.path().join("main.log"), DEADLINE);
    let (pids, seen) = runners(&id);
    assert!(
        !pids.is_empty(),
        "no job-runner names {id}; runners: {seen:?}"
    );
    for pid in &pids {
        sigkill(*pid);
    }
    for pid in &pids {
        assert!(
            wait_gone((*pid).into(), SHORT),
            "runner {pid} survived SIGKILL"
        );
    }
    drop(s);
    // A `job` command notices the dead runner (what it then shows is checked last).
    let listed = cli_jobs(&e);
    let first = row(&listed, &id).clone();
    let mut s = e.server(&[]);
    let st = wait_until(&mut s, &id, |st| {
        matches!(state_of(st), "recovered" | "recovery_failed")
    });
    assert_eq!(st["state"], "recovered", "{st}");
    assert!(st["recovery_attempts"].as_u64().unwrap_or(0) >= 1, "{st}");
    let recovery = steps(&st, "recovery");
    assert!(
        !recovery.is_empty() && recovery.iter().all(|r| r["exit_code"] == 0),
        "the finally step ran in phase recovery: {st}"
    );
    assert_eq!(
        std::fs::read_to_string(e.ws.path().join("main.log")).unwrap(),
        "run\n",
        "the main step never runs again"
    );
    assert_eq!(
        std::fs::read_to_string(e.ws.path().join("finally.log")).unwrap(),
        "cleaned\n"
    );
    assert!(
        wait_gone(step_pid, SHORT),
        "the interrupted step's sleep {step_pid} is still running"
    );
    assert!(
        matches!(state_of(&first), "interrupted" | "recovered"),
        "the `job list` that found the runner dead still showed it {}: {first}",
        state_of(&first)
    );
}

#[test]
fn a_cancelled_job_loses_its_whole_tree_and_runs_its_finally_steps() {
    let e = Env::new();
    let mut s = e.server(&[]);
    let p = plan_with_finally(
        "to cancel",
        "sleep 300 & echo $! > pids; sleep 300 & echo $! >> pids; echo $$ >> pids; wait",
        "echo fin > finally.txt",
    );
    let id = start(&mut s, &p);
    let pids: Vec<u64> = wait_lines(&e.ws.path().join("pids"), 3)
        .iter()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert!(pids.iter().all(|p| alive(*p)), "{pids:?}");
    let r = s.tool("cancel_job", json!({"job_id": id}));
    assert_eq!(r.ok()["job_id"], id.as_str());
    assert_eq!(r.ok()["cancel_requested"], true, "{}", r.ok());
    let st = wait_terminal(&mut s, &id);
    assert_eq!(st["state"], "cancelled", "{st}");
    assert_eq!(steps(&st, "steps")[0]["state"], "cancelled", "{st}");
    let fin = steps(&st, "finally_steps");
    assert_eq!(fin.len(), 1, "{st}");
    assert_eq!(fin[0]["exit_code"], 0, "{st}");
    assert_eq!(e.ws.read("finally.txt"), b"fin\n");
    for pid in &pids {
        assert!(
            wait_gone(*pid, SHORT),
            "process {pid} of the cancelled tree lives on (all: {pids:?})"
        );
    }
    // Unknown ids are not found.
    let nobody = "job_000000000000000000000000";
    assert_eq!(
        s.tool("read_job", json!({"job_id": nobody})).code(),
        "not_found"
    );
    assert_eq!(
        s.tool("cancel_job", json!({"job_id": nobody})).code(),
        "not_found"
    );
}

#[test]
fn a_job_waits_for_its_dependencies_and_fails_when_one_fails() {
    let e = Env::new();
    let mut s = e.server(&[]);
    let a = start(
        &mut s,
        &plan(
            "a",
            json!([sh(
                "while [ ! -e go ]; do sleep 0.05; done; echo a >> order.log"
            )]),
        ),
    );
    let mut pb = plan("b", json!([sh("echo b >> order.log")]));
    pb["depends_on"] = json!([a]);
    let b = start(&mut s, &pb);
    assert_eq!(read(&mut s, &b)["state"], "queued");
    e.ws.write("go", "");
    let st = wait_terminal(&mut s, &b);
    assert_eq!(st["state"], "succeeded", "{st}");
    assert_eq!(read(&mut s, &a)["state"], "succeeded");
    assert_eq!(e.ws.read("order.log"), b"a\nb\n", "b ran after a");

    let c = start(&mut s, &plan("c", json!([sh("exit 3")])));
    let mut pd = plan_with_finally("d", "echo d > d.marker", "echo f > d-finally.marker");
    pd["depends_on"] = json!([c]);
    let d = start(&mut s, &pd);
    let st = wait_terminal(&mut s, &d);
    assert_eq!(st["state"], "dependency_failed", "{st}");
    assert!(!st["error"].is_null(), "{st}");
    for step in st["steps"].as_array().unwrap() {
        assert!(
            matches!(step["state"].as_str(), Some("pending" | "skipped")),
            "{st}"
        );
    }
    let cst = wait_terminal(&mut s, &c);
    assert_eq!(cst["state"], "failed", "{cst}");
    assert_eq!(steps(&cst, "steps")[0]["exit_code"], 3, "{cst}");
    assert!(!e.ws.path().join("d.marker").exists(), "d's step ran");
    assert!(
        !e.ws.path().join("d-finally.marker").exists(),
        "no main step started, so no finally step runs"
    );
}

#[test]
fn the_same_idempotency_key_returns_the_same_job_and_a_changed_plan_conflicts() {
    let e = Env::new();
    let mut s = e.server(&[]);
    let key = format!("nightly-{}", hex::encode(random_token(6)));
    let p = json!({"name": "once", "idempotency_key": key, "steps": [sh("echo once >> once.log")]});
    let id = start(&mut s, &p);
    assert!(
        id.len() == 28 && id.starts_with("job_") && id[4..].bytes().all(|b| b.is_ascii_hexdigit()),
        "{id}"
    );
    let again = s.tool("start_job", p.clone());
    assert_eq!(again.ok()["job_id"], id.as_str());
    assert_eq!(again.ok()["idempotency_replay"], true, "{}", again.ok());
    let st = wait_terminal(&mut s, &id);
    assert_eq!(st["state"], "succeeded", "{st}");
    // Replayed after its end too, and it never ran twice.
    let late = s.tool("start_job", p.clone());
    assert_eq!(late.ok()["job_id"], id.as_str());
    assert_eq!(late.ok()["idempotency_replay"], true);
    assert_eq!(late.ok()["state"], "succeeded");
    let mut changed = p.clone();
    changed["steps"] = json!([sh("echo twice >> once.log")]);
    let r = s.tool("start_job", changed);
    assert_eq!(r.code(), "conflict", "{}", r.error);
    assert_eq!(e.ws.read("once.log"), b"once\n");
    // Another key is another job.
    let other = start(
        &mut s,
        &json!({"name": "other", "idempotency_key": format!("{key}.2"), "steps": [sh("true")]}),
    );
    assert_ne!(other, id);
    wait_terminal(&mut s, &other);
    assert_eq!(list(&mut s).len(), 2);
}

#[test]
fn at_most_eight_jobs_run_at_once_and_the_ninth_waits_queued() {
    let e = Env::new();
    let mut s = e.server(&[]);
    let n = JOBS_RUNNING_MAX + 1;
    let plans: Vec<Value> = (0..n)
        .map(|i| {
            plan(
                &format!("slot {i}"),
                json!([{"argv": ["sh", "-c", "echo $$ >> started.log; while [ ! -e go ]; do sleep 0.05; done"],
                        "timeout_seconds": 120}]),
            )
        })
        .collect();
    let ids: Vec<String> = s
        .call_all("start_job", plans)
        .iter()
        .map(|r| r.ok()["job_id"].as_str().unwrap().to_owned())
        .collect();
    let started = e.ws.path().join("started.log");
    let end = Instant::now() + DEADLINE;
    loop {
        let jobs = list(&mut s);
        let count = |state: &str| {
            ids.iter()
                .filter(|id| row(&jobs, id)["state"] == state)
                .count()
        };
        let (running, queued) = (count("running"), count("queued"));
        assert!(running <= JOBS_RUNNING_MAX, "{running} running: {jobs:?}");
        if running == JOBS_RUNNING_MAX && queued == 1 && line_count(&started) == JOBS_RUNNING_MAX {
            break;
        }
        assert!(
            Instant::now() < end,
            "never {JOBS_RUNNING_MAX} running and 1 queued ({} steps started): {jobs:?}",
            line_count(&started)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    e.ws.write("go", "");
    for id in &ids {
        let st = wait_terminal(&mut s, id);
        assert_eq!(st["state"], "succeeded", "{st}");
    }
    assert_eq!(line_count(&started), n, "each job's step ran once");
}

/// Every file under `dir` (symbolic links not followed) with its bytes.
fn files_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(ft) = entry.file_type() else { continue };
            if ft.is_dir() {
                todo.push(entry.path());
            } else if ft.is_file() {
                out.push((
                    entry.path(),
                    std::fs::read(entry.path()).unwrap_or_default(),
                ));
            }
        }
    }
    out
}

fn write_secret(path: &Path, content: &str, mode: u32) {
    std::fs::write(path, content).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn sha256_hex(s: &str) -> String {
    hex::encode(sha2::Sha256::digest(s.as_bytes()))
}

#[test]
fn a_resource_reaches_its_job_and_never_a_result_a_log_or_the_store() {
    let e = Env::new();
    let secrets = tempfile::tempdir().unwrap();
    let secrets_dir = std::fs::canonicalize(secrets.path()).unwrap();
    let token = random_token(40);
    let key = secrets_dir.join("a.key");
    write_secret(&key, &format!("{token}\n"), 0o600);
    let key_str = key.to_str().unwrap();
    e.cli(&["resource", "add", "tok", key_str]);
    // A file group or others can read is refused unless allowed.
    let loose = secrets_dir.join("b.key");
    let loose_value = format!("loose-{}", hex::encode(random_token(12)));
    write_secret(&loose, &format!("{loose_value}\n"), 0o644);
    let insecure = e.cli_output(&["resource", "add", "loose", loose.to_str().unwrap()]);
    assert!(!insecure.status.success(), "a 0644 resource was registered");
    let why = String::from_utf8_lossy(&insecure.stderr);
    assert!(
        why.contains("chmod") || why.contains("allow-insecure-permissions"),
        "{why}"
    );
    let (registered, _) = e.cli(&["resource", "list", "--json"]);
    assert!(
        registered.contains("\"tok\"") && !registered.contains("\"loose\""),
        "{registered}"
    );
    e.cli(&[
        "resource",
        "add",
        "loose",
        loose.to_str().unwrap(),
        "--allow-insecure-permissions",
    ]);

    let env_value = format!("env-{}", hex::encode(random_token(12)));
    let stdin_value = format!("stdin-{}", hex::encode(random_token(12)));
    let temp_value = format!("temp-{}", hex::encode(random_token(12)));
    let with_token = |argv: Value| json!({"argv": argv, "env_resources": {"TOKEN": "tok"}});
    let mut p = plan(
        "uses a secret",
        json!([
            {"argv": ["cat", "{{resource:tok}}"]},
            with_token(json!(["sh", "-c", "echo $TOKEN"])),
            {"argv": ["cat"], "stdin_resource": "tok"},
            with_token(json!(["sh", "-c", "printf %s \"$TOKEN\" | base64"])),
            with_token(json!(["sh", "-c", "printf %s \"$TOKEN\" | od -An -tx1 | tr -d ' \\n'"])),
            {"argv": ["echo", "{{resource:tok}}", key_str]},
            {"argv": ["sh", "-c", "printf %s \"$PLAIN\" | sha256sum; sha256sum < \"$1\"; sha256sum", "sh", "{{temp:note.txt}}"],
             "env": {"PLAIN": env_value}, "stdin": stdin_value},
        ]),
    );
    p["temporary_files"] = json!({"note.txt": temp_value});
    let log = secrets_dir.join("server.log");
    let mut s = Logged::start(&e, &log);
    let id = start(&mut s, &p);
    let st = wait_terminal(&mut s, &id);
    assert_eq!(st["state"], "succeeded", "{st}");
    let out: Vec<&str> = steps(&st, "steps")
        .iter()
        .map(|x| x["stdout"].as_str().unwrap())
        .collect();
    for (i, o) in out.iter().enumerate().take(5) {
        assert!(o.contains("[resource:tok]"), "step {i}: {o:?}");
    }
    assert_eq!(
        out[5].trim_end(),
        "[resource:tok] [resource:tok]",
        "the copy's path and the file's path are redacted"
    );
    assert_eq!(
        out[6],
        format!(
            "{}  -\n{}  -\n{}  -\n",
            sha256_hex(&env_value),
            sha256_hex(&temp_value),
            sha256_hex(&stdin_value)
        ),
        "env, the temporary file and stdin reached the step"
    );
    // The runner removes the private directory (resource copies, temporary files) at the end.
    let private = e.job_dir(&id).join("private");
    let end = Instant::now() + SHORT;
    while private.exists() {
        assert!(
            Instant::now() < end,
            "{} was not removed",
            private.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_runner_gone(&id);

    let again = s.tool("read_job", json!({"job_id": id}));
    let listed = s.tool("list_jobs", json!({}));
    let resources = s.tool("list_local_resources", json!({}));
    drop(s);
    let (cli_read, cli_read_err) = e.cli(&["job", "read", &id, "--json"]);
    let cli_read_json: Value = serde_json::from_str(&cli_read).unwrap();
    assert_eq!(cli_read_json["job_id"], id.as_str());
    assert_eq!(cli_read_json["state"], "succeeded");
    let (cli_list, cli_list_err) = e.cli(&["job", "list", "--json"]);

    let server_log = std::fs::read(&log).unwrap();
    assert!(!server_log.is_empty(), "the server logged nothing at trace");
    let b64 = base64::engine::general_purpose::STANDARD;
    let forbidden = [
        token.clone(),
        b64.encode(&token),
        b64.encode(format!("{token}\n")),
        hex::encode(&token),
        env_value.clone(),
        stdin_value.clone(),
        temp_value.clone(),
        loose_value,
    ];
    let mut places: Vec<(String, Vec<u8>)> = vec![
        (
            "read_job".into(),
            format!("{} {}", again.ok(), again.text).into_bytes(),
        ),
        (
            "list_jobs".into(),
            format!("{} {}", listed.ok(), listed.text).into_bytes(),
        ),
        (
            "list_local_resources".into(),
            format!("{} {}", resources.ok(), resources.text).into_bytes(),
        ),
        (
            "job read --json".into(),
            format!("{cli_read}{cli_read_err}").into_bytes(),
        ),
        (
            "job list --json".into(),
            format!("{cli_list}{cli_list_err}").into_bytes(),
        ),
        ("the server's stderr".into(), server_log),
        ("resource list --json".into(), registered.into_bytes()),
    ];
    let stored = files_under(e.state.path());
    for f in ["plan.json", "status.json", "result.json"] {
        assert!(
            stored.iter().any(|(p, _)| p == &e.job_dir(&id).join(f)),
            "the job's {f} is not in the store"
        );
    }
    for (path, bytes) in stored {
        places.push((path.display().to_string(), bytes));
    }
    for (place, bytes) in &places {
        let text = String::from_utf8_lossy(bytes);
        for (k, f) in forbidden.iter().enumerate() {
            assert!(
                !text.contains(f.as_str()),
                "secret form {k} appears in {place}"
            );
        }
    }
    assert!(
        cli_read.contains("[resource:tok]"),
        "job read --json shows the redacted output: {cli_read}"
    );

    let res = resources.ok()["resources"].as_array().unwrap();
    let tok = res
        .iter()
        .find(|r| r["alias"] == "tok")
        .expect("tok listed");
    assert_eq!(tok["state"], "ok", "{res:?}");
    assert!(res.iter().any(|r| r["alias"] == "loose"), "{res:?}");
    let shown = format!("{} {}", resources.ok(), resources.text);
    for path in [
        key_str,
        loose.to_str().unwrap(),
        secrets_dir.to_str().unwrap(),
    ] {
        assert!(
            !shown.contains(path),
            "list_local_resources shows {path}: {shown}"
        );
    }
}

/// The error of a refused plan, with a message naming one of `names` (`|`-separated; compared
/// without case, spaces read as underscores).
fn refused(r: &Reply, codes: &[&str], names: &str, what: &str) {
    assert!(r.is_error, "{what} was accepted: {}", r.structured);
    assert!(codes.contains(&r.code()), "{what}: {}", r.error);
    let msg = r.error["message"]
        .as_str()
        .unwrap_or("")
        .to_lowercase()
        .replace(' ', "_");
    assert!(
        names.split('|').any(|n| msg.contains(&n.to_lowercase())),
        "{what}: the message names none of {names}: {}",
        r.error
    );
}

#[test]
fn a_plan_over_a_bound_or_naming_what_does_not_exist_is_refused_whole_and_nothing_starts() {
    const INVALID: &[&str] = &["invalid_request"];
    const BOUND: &[&str] = &["invalid_request", "limit_exceeded"];
    const UNKNOWN: &[&str] = &["invalid_request", "not_found"];
    const BOUNDARY: &[&str] = &["path_boundary"];
    const DENIED: &[&str] = &["policy_denied"];
    let e = Env::new();
    let secrets = tempfile::tempdir().unwrap();
    let key = secrets.path().join("k");
    write_secret(&key, "abcdef-secret\n", 0o600);
    e.cli(&["resource", "add", "tok", key.to_str().unwrap()]);
    let touch = json!({"argv": ["touch", "started.marker"]});
    let many = |n: usize| Value::Array(vec![touch.clone(); n]);
    let with = |field: &str, v: Value| {
        let mut p = plan("bad", json!([touch.clone()]));
        p[field] = v;
        p
    };
    let step = |s: Value| plan("bad", json!([s]));
    let files = |n: usize, each: usize| -> Value {
        (0..n)
            .map(|i| (format!("f{i:02}"), json!("x".repeat(each))))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    let big_stdin = "a".repeat(JOB_STDIN_MAX_BYTES + 1);
    let over_timeout = JOB_STEP_TIMEOUT_MAX.as_secs() + 1;
    let fake_ids: Vec<String> = (0..=JOB_DEPENDS_MAX)
        .map(|i| format!("job_{i:024x}"))
        .collect();
    let nobody = "job_00000000000000000000abcd";
    let cases: Vec<(&str, Value, &[&str], &str)> = vec![
        (
            "17 steps",
            with("steps", many(JOB_STEPS_MAX + 1)),
            BOUND,
            "steps",
        ),
        ("no steps", with("steps", json!([])), INVALID, "steps"),
        (
            "17 finally steps",
            with("finally_steps", many(JOB_FINALLY_STEPS_MAX + 1)),
            BOUND,
            "finally_steps",
        ),
        (
            "stdin over 256 KiB",
            step(json!({"argv": ["cat"], "stdin": big_stdin})),
            BOUND,
            "stdin",
        ),
        (
            "timeout 0",
            step(json!({"argv": ["true"], "timeout_seconds": 0})),
            INVALID,
            "timeout_seconds",
        ),
        (
            "timeout over the bound",
            step(json!({"argv": ["true"], "timeout_seconds": over_timeout})),
            BOUND,
            "timeout_seconds",
        ),
        (
            "17 temporary files",
            with("temporary_files", files(JOB_TEMP_FILES_MAX + 1, 1)),
            BOUND,
            "temporary_files|temporary_file",
        ),
        (
            "temporary files over 512 KiB",
            with(
                "temporary_files",
                files(2, JOB_TEMP_FILES_MAX_BYTES / 2 + 1),
            ),
            BOUND,
            "temporary_files|temporary_file",
        ),
        (
            "a temporary file name with a slash",
            with("temporary_files", json!({"../x": "y"})),
            INVALID,
            "temporary_file",
        ),
        (
            "key starting with a dash",
            with("idempotency_key", json!("-k")),
            INVALID,
            "idempotency_key",
        ),
        (
            "key with a space",
            with("idempotency_key", json!("a b")),
            INVALID,
            "idempotency_key",
        ),
        (
            "key of 129 characters",
            with("idempotency_key", json!("k".repeat(129))),
            INVALID,
            "idempotency_key",
        ),
        ("empty name", with("name", json!("")), INVALID, "name"),
        (
            "name of 129 characters",
            with("name", json!("n".repeat(129))),
            INVALID,
            "name",
        ),
        (
            "an unknown placeholder",
            step(json!({"argv": ["echo", "{{nope:x}}"]})),
            INVALID,
            "nope",
        ),
        (
            "an unknown placeholder in env",
            step(json!({"argv": ["true"], "env": {"X": "{{nope:y}}"}})),
            INVALID,
            "nope",
        ),
        (
            "a temporary file not in the plan",
            step(json!({"argv": ["cat", "{{temp:missing}}"]})),
            UNKNOWN,
            "missing",
        ),
        (
            "an unregistered resource in env_resources",
            step(json!({"argv": ["true"], "env_resources": {"T": "ghost"}})),
            UNKNOWN,
            "ghost",
        ),
        (
            "an unregistered resource placeholder",
            step(json!({"argv": ["cat", "{{resource:ghost}}"]})),
            UNKNOWN,
            "ghost",
        ),
        (
            "an unregistered stdin_resource",
            step(json!({"argv": ["cat"], "stdin_resource": "ghost"})),
            UNKNOWN,
            "ghost",
        ),
        (
            "stdin and stdin_resource",
            step(json!({"argv": ["cat"], "stdin": "x", "stdin_resource": "tok"})),
            INVALID,
            "stdin",
        ),
        (
            "a shell step of two entries",
            step(json!({"argv": ["echo", "x"], "shell": true})),
            INVALID,
            "shell|argv",
        ),
        (
            "17 dependencies",
            with("depends_on", json!(fake_ids)),
            BOUND,
            "depends_on",
        ),
        (
            "an unknown dependency",
            with("depends_on", json!([nobody])),
            UNKNOWN,
            "depends_on|job_00000000000000000000abcd",
        ),
    ];
    let mut s = e.server(&[]);
    for (what, p, codes, names) in &cases {
        for tool in ["start_job", "stage_job"] {
            let r = s.tool(tool, p.clone());
            refused(&r, codes, names, &format!("{tool}: {what}"));
        }
    }
    // Under the agent profile: paths confined to the workspace, exec mode direct.
    let mut agent = e.server(&["--profile", "agent"]);
    let mut outside = plan("bad", json!([touch.clone()]));
    outside["finally_steps"] = json!([{"argv": ["true"], "cwd": "../"}]);
    let agent_cases: Vec<(&str, Value, &[&str], &str)> = vec![
        (
            "a cwd above the workspace",
            step(json!({"argv": ["true"], "cwd": "../"})),
            BOUNDARY,
            "cwd|workspace|..",
        ),
        (
            "an absolute cwd outside",
            step(json!({"argv": ["true"], "cwd": "/"})),
            BOUNDARY,
            "cwd|workspace|/",
        ),
        (
            "a finally step's cwd outside",
            outside,
            BOUNDARY,
            "cwd|workspace|..",
        ),
        (
            "a shell step under exec mode direct",
            step(json!({"argv": ["touch started.marker"], "shell": true})),
            DENIED,
            "shell",
        ),
    ];
    for (what, p, codes, names) in &agent_cases {
        for tool in ["start_job", "stage_job"] {
            let r = agent.tool(tool, p.clone());
            refused(&r, codes, names, &format!("agent {tool}: {what}"));
        }
    }
    assert_eq!(list(&mut s), Vec::<Value>::new());
    assert_eq!(list(&mut agent), Vec::<Value>::new());
    assert_eq!(
        e.job_dirs(),
        Vec::<String>::new(),
        "a refused plan left a job"
    );
    assert!(!e.ws.path().join("started.marker").exists());

    // Every bound itself is accepted.
    let mut at_bounds = plan(
        &"n".repeat(120),
        Value::Array(vec![json!({"argv": ["true"]}); JOB_STEPS_MAX]),
    );
    at_bounds["idempotency_key"] = json!(format!("K{}", "k".repeat(127)));
    at_bounds["steps"][0] = json!({"argv": ["cat"], "stdin": "a".repeat(JOB_STDIN_MAX_BYTES),
                                   "timeout_seconds": JOB_STEP_TIMEOUT_MAX.as_secs()});
    at_bounds["steps"][1] = json!({"argv": ["true"], "timeout_seconds": 1});
    at_bounds["finally_steps"] =
        Value::Array(vec![json!({"argv": ["true"]}); JOB_FINALLY_STEPS_MAX]);
    at_bounds["temporary_files"] = files(
        JOB_TEMP_FILES_MAX,
        JOB_TEMP_FILES_MAX_BYTES / JOB_TEMP_FILES_MAX,
    );
    let r = s.tool("stage_job", at_bounds);
    assert_eq!(r.ok()["state"], "staged", "{}", r.ok());
    assert_eq!(e.job_dirs().len(), 1);
}

#[test]
fn an_unreadable_status_file_is_reported_as_such_and_left_alone() {
    let e = Env::new();
    let mut s = e.server(&[]);
    let good = start(&mut s, &plan("good", json!([sh("echo good")])));
    let bad = start(&mut s, &plan("to corrupt", json!([sh("echo fine")])));
    for id in [&good, &bad] {
        assert_eq!(wait_terminal(&mut s, id)["state"], "succeeded");
        wait_runner_gone(id);
    }
    let status = e.job_dir(&bad).join("status.json");
    assert!(status.is_file(), "{} is not there", status.display());
    let garbage: &[u8] = b"{\"state\": \"succ\x00\xff not a status at all";
    std::fs::write(&status, garbage).unwrap();
    let check = |jobs: &[Value], from: &str| {
        assert_eq!(row(jobs, &good)["state"], "succeeded", "{from}: {jobs:?}");
        let b = row(jobs, &bad);
        assert_eq!(b["state"], "unreadable", "{from}: {jobs:?}");
        assert!(
            !b["error"].is_null() && b["error"] != "",
            "{from}: no error said why: {b}"
        );
    };
    check(&list(&mut s), "list_jobs");
    let r = s.tool("read_job", json!({"job_id": bad}));
    if r.is_error {
        let msg = r.error["message"].as_str().unwrap_or("");
        assert!(
            msg.contains("unreadable") || msg.contains("status"),
            "read_job of a corrupt job: {}",
            r.error
        );
    } else {
        assert_eq!(r.ok()["state"], "unreadable", "{}", r.ok());
        assert!(!r.ok()["error"].is_null(), "{}", r.ok());
    }
    assert_eq!(
        std::fs::read(&status).unwrap(),
        garbage,
        "read_job changed it"
    );
    // A new server and the CLI find it the same and leave it alone too.
    drop(s);
    let mut s = e.server(&[]);
    check(&list(&mut s), "list_jobs after a restart");
    check(&cli_jobs(&e), "job list --json");
    assert_eq!(
        std::fs::read(&status).unwrap(),
        garbage,
        "the file was replaced"
    );
}

#[test]
fn a_staged_job_runs_only_once_started_and_a_submitted_plan_runs_from_the_cli() {
    let e = Env::new();
    let mut s = e.server(&[]);
    let r = s.tool(
        "stage_job",
        plan("draft", json!([sh("echo ran >> draft.log; echo drafted")])),
    );
    assert_eq!(r.ok()["state"], "staged", "{}", r.ok());
    let draft = r.ok()["job_id"].as_str().unwrap().to_owned();
    let st = read(&mut s, &draft);
    assert_eq!(st["state"], "staged");
    assert!(
        st["steps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|x| x["state"] == "pending"),
        "{st}"
    );
    assert_eq!(row(&list(&mut s), &draft)["state"], "staged");
    assert!(!e.ws.path().join("draft.log").exists());
    e.cli(&["job", "start", &draft]);
    let st = wait_terminal(&mut s, &draft);
    assert_eq!(st["state"], "succeeded", "{st}");
    assert_eq!(steps(&st, "steps")[0]["stdout"], "drafted\n");
    assert_eq!(e.ws.read("draft.log"), b"ran\n");

    // A cancelled draft is cancelled at once and can no longer start.
    let p = plan_with_finally("never", "touch never.txt", "touch never-finally.txt");
    let r = s.tool("stage_job", p);
    let never = r.ok()["job_id"].as_str().unwrap().to_owned();
    let c = s.tool("cancel_job", json!({"job_id": never}));
    assert_eq!(c.ok()["state"], "cancelled", "{}", c.ok());
    let st = read(&mut s, &never);
    assert_eq!(st["state"], "cancelled");
    let out = e.cli_output(&["job", "start", &never]);
    assert!(!out.status.success(), "a cancelled draft started");
    assert_eq!(read(&mut s, &never)["state"], "cancelled");
    assert!(!e.ws.path().join("never.txt").exists());
    assert!(!e.ws.path().join("never-finally.txt").exists());

    // `job submit` starts a plan file, `job read` shows it.
    let file = e.ws.write(
        "plan.json",
        plan("submitted", json!([sh("echo submitted")])).to_string(),
    );
    let sub = e.cli_json(&[
        "job",
        "submit",
        file.to_str().unwrap(),
        "-w",
        e.ws.path().to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(sub["idempotency_replay"], false, "{sub}");
    let id = sub["job_id"].as_str().expect("job_id").to_owned();
    assert_eq!(wait_terminal(&mut s, &id)["state"], "succeeded");
    let shown = e.cli_json(&["job", "read", &id, "--json"]);
    assert_eq!(shown["state"], "succeeded", "{shown}");
    assert_eq!(shown["steps"][0]["stdout"], "submitted\n", "{shown}");
}

#[test]
fn a_job_started_through_the_relay_outlives_a_daemon_restart() {
    let mut s = setup();
    let mut c = Client::new(&mcp_url(&s.relay, "b1"), Some(&s.token));
    c.initialize();
    let id = start(
        &mut c,
        &plan(
            "through the relay",
            json!([sh(
                "echo up > started.txt; sleep 4; echo done > done.txt; echo relayed"
            )]),
        ),
    );
    wait_file(&s.ws.path().join("started.txt"), DEADLINE);
    s.daemon.kill();
    assert!(
        !s.ws.path().join("done.txt").exists(),
        "the step was still running when the daemon died"
    );
    let state = s.state.path().to_owned();
    s.daemon = s
        .relay
        .daemon(&state, s.ws.path(), None, &["--profile", "agent"]);
    s.daemon
        .wait_log("connected to the relay and ready", Duration::from_secs(30));
    // The old session belonged to the old instance: a new one reads the job.
    c.session = None;
    c.initialize();
    let st = wait_terminal(&mut c, &id);
    assert_eq!(st["state"], "succeeded", "{st}");
    assert_eq!(steps(&st, "steps")[0]["stdout"], "relayed\n", "{st}");
    assert_eq!(s.ws.read("done.txt"), b"done\n");
    assert!(list(&mut c).iter().any(|j| j["job_id"] == id.as_str()));
}

/// Fresh tester findings 9, 15 and 16: `job submit` lost the reason of a refusal, the CLI
/// panicked on a closed pipe, `job read` passed a job's terminal escapes through, and
/// `job read --wait` exited 0 for a failed job.
#[test]
fn the_job_cli_names_refusals_survives_a_closed_pipe_and_never_drives_the_terminal() {
    let e = Env::new();
    let ws = e.ws.path().to_str().unwrap().to_owned();
    let bad = e.ws.write(
        "bad.json",
        json!({"name": "x", "idempotency_key": "bad", "steps": []}).to_string(),
    );
    let out = e.cli_output(&["job", "submit", bad.to_str().unwrap(), "-w", &ws]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("steps has 0 entries") && stderr.contains("invalid_request"),
        "{stderr}"
    );

    let file = e.ws.write(
        "esc.json",
        plan("esc", json!([sh("printf 'a\\033[2Jb\\n'; exit 3")])).to_string(),
    );
    let sub = e.cli_json(&["job", "submit", file.to_str().unwrap(), "-w", &ws, "--json"]);
    let id = sub["job_id"].as_str().unwrap().to_owned();
    let out = e.cli_output(&["job", "read", &id, "--wait"]);
    assert!(
        !out.status.success(),
        "a failed job waited for exits non-zero"
    );
    assert!(
        !out.stdout.contains(&0x1b),
        "{:?}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("a\\x1b[2Jb"));

    // stdout closed before the command writes: it ends quietly.
    let mut child = Command::new(bin())
        .args(["job", "list", "--state-dir", e.state_arg()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// Fresh tester finding 14: a resource removed mid-job was still used from the job's copy.
#[test]
fn a_resource_removed_while_its_job_runs_fails_the_next_step_that_names_it() {
    let e = Env::new();
    let secrets = tempfile::tempdir().unwrap();
    let key = std::fs::canonicalize(secrets.path()).unwrap().join("k");
    write_secret(&key, "gone-soon-secret\n", 0o600);
    e.cli(&["resource", "add", "gone", key.to_str().unwrap()]);
    let mut s = e.server(&[]);
    let rm = json!({"argv": ["rm", key.to_str().unwrap()]});
    let use_it = json!({"argv": ["cat", "{{resource:gone}}"]});
    let id = start(&mut s, &plan("gone", json!([rm, use_it])));
    let st = wait_terminal(&mut s, &id);
    assert_eq!(st["state"], "failed", "{st}");
    let second = steps(&st, "steps")[1];
    assert_eq!(second["state"], "failed_to_start", "{st}");
    assert!(
        second["error"].as_str().unwrap().contains("gone"),
        "{second}"
    );
    assert!(!st.to_string().contains("gone-soon-secret"), "{st}");
}

/// Fresh tester finding 7: recovery ran the finally steps in the environment of whoever
/// noticed the dead runner, not the one the job was accepted with.
#[test]
fn recovery_runs_the_finally_steps_in_the_environment_the_job_was_accepted_with() {
    let e = Env::new();
    let mut args = vec!["--state-dir", e.state_arg()];
    args.push("--log-level");
    args.push("warn");
    let mut s = Server::start_with_env(e.ws.path(), &args, &[("JOB_ENV_PROBE", "accepted")]);
    let p = plan_with_finally(
        "env",
        "echo started > started.txt; exec sleep 30",
        "echo \"$JOB_ENV_PROBE\" > finally.txt",
    );
    let id = start(&mut s, &p);
    wait_file(&e.ws.path().join("started.txt"), DEADLINE);
    for pid in runners(&id).0 {
        sigkill(pid);
    }
    wait_runner_gone(&id);
    let out = Command::new(bin())
        .args(["job", "list", "--state-dir", e.state_arg()])
        .env("JOB_ENV_PROBE", "noticer")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        wait_file(&e.ws.path().join("finally.txt"), DEADLINE),
        "accepted\n"
    );
    assert_eq!(wait_terminal(&mut s, &id)["state"], "recovered");
    // The scrub follows the terminal status (result, status, then scrub): wait for its end.
    wait_runner_gone(&id);
    let left: Vec<_> = files_under(e.state.path())
        .into_iter()
        .filter(|(p, _)| p.ends_with("environment.json"))
        .collect();
    assert!(left.is_empty(), "the environment snapshot outlived the job");
}

/// Second fresh tester, findings 1 and 7: a job's error line and a refusal passed terminal
/// escapes through; a failed write to stdout exited 0.
#[test]
fn job_errors_and_refusals_are_escaped_and_a_failed_write_is_an_error() {
    let e = Env::new();
    let ws = e.ws.path().to_str().unwrap().to_owned();
    let evil = "no-such-prog\u{1b}]0;PWNED\u{7}\u{1b}[2J\u{9b}\u{202e}";
    let mut p = plan("evil", json!([{"argv": [evil]}]));
    p["name"] = json!("evil\u{202e}name");
    let file = e.ws.write("evil.json", p.to_string());
    let sub = e.cli_json(&["job", "submit", file.to_str().unwrap(), "-w", &ws, "--json"]);
    let id = sub["job_id"].as_str().unwrap().to_owned();
    let out = e.cli_output(&["job", "read", &id, "--wait"]);
    let listed = e.cli_output(&["job", "list"]);
    let json = e.cli_output(&["job", "read", &id, "--json"]);
    for (what, bytes) in [
        ("read", &out.stdout),
        ("list", &listed.stdout),
        ("read --json", &json.stdout),
    ] {
        let text = String::from_utf8_lossy(bytes);
        assert!(
            !text.contains('\u{1b}')
                && !text.contains('\u{7}')
                && !text.contains('\u{9b}')
                && !text.contains('\u{202e}'),
            "{what}: {text:?}"
        );
    }
    let parsed: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(
        parsed["name"], "evil\u{202e}name",
        "escaped JSON means the same"
    );

    let bad = e.ws.write(
        "bad.json",
        json!({"name": "x", "idempotency_key": "b", "steps": [{"argv": ["true"], "cwd": evil}]})
            .to_string(),
    );
    let refused = e.cli_output(&["job", "submit", bad.to_str().unwrap(), "-w", &ws]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");

    let full = Command::new(bin())
        .args(["job", "list", "--state-dir", e.state_arg()])
        .stdout(std::fs::File::create("/dev/full").unwrap())
        .output()
        .unwrap();
    assert!(!full.status.success(), "a write to /dev/full exited 0");
}

/// Second fresh tester, findings 3, 5 and 6: a registered resource the plan does not name,
/// the real path of the copy under a symlinked state directory, and the temporary files of a
/// killed runner's writes.
#[test]
fn every_registered_resource_and_every_path_of_its_copy_is_redacted_and_nothing_stale_stays() {
    let e = Env::new();
    let real = e.state.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = e.state.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let state = link.to_str().unwrap().to_owned();
    let secrets = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(secrets.path()).unwrap();
    let (named, unnamed) = (dir.join("named"), dir.join("unnamed"));
    write_secret(&named, "Named-secret-0123456789\n", 0o600);
    write_secret(&unnamed, "UnnamedButRegistered-0123456789\n", 0o600);
    for (alias, path) in [("a", &named), ("b", &unnamed)] {
        let out = Command::new(bin())
            .args([
                "resource",
                "add",
                alias,
                path.to_str().unwrap(),
                "--state-dir",
                &state,
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut s = Server::start(e.ws.path(), &["--state-dir", &state]);
    let steps = json!([
        {"argv": ["sh", "-c", "echo {{resource:a}}; realpath {{resource:a}}; sleep 1"]},
        {"argv": ["cat", unnamed.to_str().unwrap()]},
    ]);
    let id = start(&mut s, &plan("paths", steps));
    // A write the runner never finished, as a SIGKILL leaves it.
    let job_dir = real.join("jobs").join(&id);
    std::fs::write(job_dir.join(".tmp-stale"), b"left by a killed runner").unwrap();
    let st = wait_terminal(&mut s, &id);
    assert_eq!(st["state"], "succeeded", "{st}");
    let text = st.to_string();
    assert!(!text.contains("UnnamedButRegistered"), "{text}");
    assert!(!text.contains("/private/resources/"), "{text}");
    assert!(text.contains("[resource:b]"), "{text}");
    wait_runner_gone(&id);
    let stale: Vec<_> = std::fs::read_dir(&job_dir)
        .unwrap()
        .flatten()
        .filter(|f| f.file_name().to_string_lossy().starts_with(".tmp-"))
        .collect();
    assert!(stale.is_empty(), "{stale:?}");
}

/// Issue 17 item 6: a daemon that stops ends its process sessions and leaves its jobs running;
/// so does one that ignores SIGTERM and is SIGKILLed with its process tree by a `--takeover`
/// (job runners are not part of the tree it kills).
#[test]
fn a_stopped_or_taken_over_daemon_ends_its_process_sessions_and_leaves_its_jobs_running() {
    let marker = format!("PS-{}", hex::encode(random_token(6)));
    let running = |m: &str| crate::util::processes_with(m);
    let relay = crate::net::Relay::start(&[]);
    let code = relay.add_bridge("b1");
    let token = relay.token("b1", "owner");
    let state = tempfile::tempdir().unwrap();
    let ws = Tree::new();
    let mut daemon = relay.daemon(
        state.path(),
        ws.path(),
        Some(&code),
        &["--profile", "agent", "--ignore-sigterm-for-tests"],
    );
    daemon.wait_log("connected to the relay and ready", Duration::from_secs(30));
    relay.wait_ready(1);
    let mut c = Client::new(&mcp_url(&relay, "b1"), Some(&token));
    c.initialize();
    let session = |c: &mut Client, tag: &str| {
        let script = format!("sleep 300; : {marker}-{tag}");
        let out = c.tool("start_process", json!({"argv": ["sh", "-c", script]}));
        assert!(out.ok()["session_id"].is_string(), "{:?}", out.ok());
    };
    session(&mut c, "killed");
    let id = start(
        &mut c,
        &plan(
            "outlives its daemon",
            json!([sh("echo up > started.txt; sleep 4; echo done > done.txt")]),
        ),
    );
    wait_file(&ws.path().join("started.txt"), DEADLINE);
    assert_eq!(running(&format!("{marker}-killed")), 1);

    // A takeover of a daemon that ignores SIGTERM: SIGKILL of its tree, the job runner spared.
    let mut second = relay.daemon(
        state.path(),
        ws.path(),
        None,
        &["--profile", "agent", "--takeover"],
    );
    second.wait_log("connected to the relay and ready", Duration::from_secs(30));
    assert!(
        second.log().contains("was killed with its process tree"),
        "{}",
        second.log()
    );
    let end = Instant::now() + SHORT;
    while running(&format!("{marker}-killed")) > 0 {
        assert!(
            Instant::now() < end,
            "the process session outlived its daemon"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    daemon.kill();
    relay.wait_ready(1);
    let mut c = Client::new(&mcp_url(&relay, "b1"), Some(&token));
    c.initialize();
    let st = wait_terminal(&mut c, &id);
    assert_eq!(st["state"], "succeeded", "{st}");
    assert_eq!(ws.read("done.txt"), b"done\n");

    // A graceful stop (SIGTERM) ends the new daemon's process session too.
    session(&mut c, "stopped");
    assert_eq!(running(&format!("{marker}-stopped")), 1);
    let ok = std::process::Command::new("kill")
        .arg(second.child.id().to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let end = Instant::now() + SHORT;
    while second.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < end, "the daemon did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
    let end = Instant::now() + SHORT;
    while running(&format!("{marker}-stopped")) > 0 {
        assert!(
            Instant::now() < end,
            "the process session outlived its daemon's stop"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        second.log().contains("daemon stopped: asked to stop"),
        "{}",
        second.log()
    );
}
