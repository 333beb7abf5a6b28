//! The stdio supervisor (issue 20): `machine-mcp stdio` keeps the client's connection while it
//! swaps in a new binary (on SIGHUP, `machine-mcp reload`, or when the file at its path
//! changes), restarts a worker that died, and bounds what waits meanwhile. Each test starts the
//! supervisor from a link to the built binary in a directory of its own, so it can put another
//! file at that path the way an upgrade does (a rename over it).

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
    time::{Duration, Instant},
};

use protocol::{
    jsonrpc::code,
    limits::{SUPERVISOR_QUEUE_MAX, UPGRADE_CHECK_INTERVAL},
};
use serde_json::{Value, json};

use crate::util::{
    RESPONSE_TIMEOUT, Reply, Server, Tree, alive, bin, parse_reply, wait_file, wait_gone,
};

/// The build stamp of "a newer build": it reports version `VERSION+2`.
const NEWER_STAMP: u64 = 2;

/// How long a test waits for the supervisor to switch to a new worker or restart one.
const SWITCH_WAIT: Duration = Duration::from_secs(30);

/// What precedes the 24 digits of the build stamp in the binary.
const STAMP_MARKER: &str = "machine-mcp build stamp:";

/// A shell command that says it started (the file `started` in its working directory, the
/// workspace) and then runs until the test creates the file `go`, then prints `done`.
const GATED: &str = "echo started > started; while [ ! -e go ]; do sleep 0.05; done; echo done";

const LIST_CHANGED: &str = "notifications/tools/list_changed";

/// A copy of the built binary whose build stamp says [`NEWER_STAMP`], made once per test run
/// (in Cargo's temporary directory, next to the binary, so tests can hard-link it).
fn newer_build() -> &'static Path {
    static NEWER: OnceLock<PathBuf> = OnceLock::new();
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

/// A directory with the binary a supervisor runs from (`bin/machine-mcp`) and its log.
struct Install {
    dir: tempfile::TempDir,
}

impl Install {
    /// `bin/machine-mcp` is a hard link to the built binary (the same file system as Cargo's
    /// temporary directory).
    fn new() -> Self {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        std::fs::create_dir(dir.path().join("bin")).unwrap();
        std::fs::hard_link(bin(), dir.path().join("bin/machine-mcp")).unwrap();
        Self { dir }
    }

    /// The path the supervisor is started by (and watches).
    fn binary(&self) -> PathBuf {
        self.dir.path().join("bin/machine-mcp")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("stderr.log")
    }

    /// What the supervisor and its workers logged so far.
    fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Starts `machine-mcp stdio` (the supervisor) from [`Self::binary`] on `workspace`.
    fn start(&self, workspace: &Path, args: &[&str]) -> Server {
        Server::start_binary(&self.binary(), workspace, args, &[], &self.log_path())
    }

    /// Puts `file` at the binary's path the way an upgrade does: a new name renamed over it.
    fn replace_with(&self, file: &Path) {
        let next = self.dir.path().join("bin/.machine-mcp.next");
        std::fs::hard_link(file, &next).unwrap();
        std::fs::rename(&next, self.binary()).unwrap();
    }

    /// Writes the executable shell script `body` (after `#!/bin/sh`) as `name` in the
    /// directory and returns its path. A child process writes it (see [`newer_build`]).
    fn script(&self, name: &str, body: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        let ok = Command::new("sh")
            .args([
                "-c",
                r#"printf '#!/bin/sh\n%s\n' "$1" > "$2" && chmod 755 "$2""#,
                "sh",
                body,
            ])
            .arg(&path)
            .status()
            .unwrap()
            .success();
        assert!(ok, "writing the script {name} failed");
        path
    }
}

/// Sends `signal` (`HUP`, `KILL`) to `pid`.
fn signal(pid: u64, signal: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{signal} {pid} failed");
}

/// `server_info`'s structured result (panics on an error result).
fn info(s: &mut Server) -> Value {
    s.call("server_info", json!({})).ok().clone()
}

/// Calls `server_info` until `done` holds for its reply (every 100 ms, for at most
/// [`SWITCH_WAIT`]) and returns that reply; panics naming `what` with the last reply and the
/// log.
fn wait_info(s: &mut Server, inst: &Install, what: &str, done: impl Fn(&Reply) -> bool) -> Reply {
    let end = Instant::now() + SWITCH_WAIT;
    loop {
        let r = s.call("server_info", json!({}));
        if done(&r) {
            return r;
        }
        assert!(
            Instant::now() < end,
            "{what} did not happen within {SWITCH_WAIT:?}; last server_info: {} {}\nlog:\n{}",
            r.structured["supervisor"],
            r.error,
            inst.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The structured `server_info` once the worker of `generation` serves.
fn wait_generation(s: &mut Server, inst: &Install, generation: u64) -> Value {
    wait_info(s, inst, &format!("worker generation {generation}"), |r| {
        !r.is_error && r.structured["supervisor"]["worker_generation"] == generation
    })
    .structured
}

/// The names in a `tools/list` answer.
fn tool_names(s: &mut Server) -> Vec<String> {
    let list = s.request("tools/list", json!({}));
    list["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// The first `server_info` of a fresh supervisor: worker generation 1 serving, nothing
/// reloaded. Returns (the structured result, the worker's pid).
fn first_info(s: &mut Server, inst: &Install) -> (Value, u64) {
    let i = info(s);
    let sup = &i["supervisor"];
    assert_eq!(sup["pid"], s.pid(), "{sup}");
    assert_eq!(sup["binary"], inst.binary().to_str().unwrap(), "{sup}");
    assert_eq!(sup["worker_generation"], 1, "{sup}");
    assert_eq!(sup["state"], "serving", "{sup}");
    assert_eq!(sup["reloads"], 0, "{sup}");
    assert_eq!(sup["recoveries"], 0, "{sup}");
    assert_eq!(sup["binary_version"], i["version"], "{sup}");
    let worker = sup["worker_pid"].as_u64().expect("a worker pid");
    assert_eq!(
        workers_of(u64::from(s.pid())),
        vec![worker],
        "the worker is the supervisor's child"
    );
    assert!(alive(worker));
    (i, worker)
}

#[test]
fn a_reload_swaps_in_the_new_build_while_a_running_call_finishes_on_the_old_worker() {
    let t = Tree::new();
    let inst = Install::new();
    let mut s = inst.start(t.path(), &[]);
    let (before, old_worker) = first_info(&mut s, &inst);
    let base = before["version"].as_str().unwrap().to_owned();
    assert!(!base.contains('+'), "a plain build has no stamp: {base}");
    let catalog = tool_names(&mut s);

    // A call that runs on the first worker until the test lets it end.
    let run = s.send_request(
        "tools/call",
        json!({"name": "run_process", "arguments": {"argv": ["sh", "-c", GATED]}}),
    );
    wait_file(&t.path().join("started"), RESPONSE_TIMEOUT);

    inst.replace_with(newer_build());
    signal(u64::from(s.pid()), "HUP");
    let after = wait_generation(&mut s, &inst, 2);
    let sup = &after["supervisor"];
    let newer = format!("{base}+{NEWER_STAMP}");
    assert_eq!(
        after["version"],
        newer.as_str(),
        "the new worker runs the new build"
    );
    assert_eq!(sup["binary_version"], newer.as_str(), "{sup}");
    assert_eq!(sup["reloads"], 1, "{sup}");
    assert_eq!(sup["recoveries"], 0, "{sup}");
    assert_eq!(sup["state"], "serving", "{sup}");
    assert_eq!(sup["pid"], s.pid(), "the same supervisor: {sup}");
    let new_worker = sup["worker_pid"].as_u64().unwrap();
    assert_ne!(new_worker, old_worker, "a new worker process: {sup}");
    assert_eq!(
        sup["replaced_workers"],
        json!([old_worker]),
        "the old worker still runs the call: {sup}"
    );
    assert!(
        sup["last_reload"].as_str().unwrap().contains(&newer),
        "{sup}"
    );
    assert!(
        inst.log().contains("starting a new worker (SIGHUP)"),
        "the reload came from the signal:\n{}",
        inst.log()
    );
    // Any list_changed would have been written before the new worker's first answer.
    assert_eq!(
        s.take_method(LIST_CHANGED),
        Vec::<Value>::new(),
        "the catalog did not change"
    );

    // The call is still running (it cannot end before `go`), and ends on the old worker.
    assert!(
        s.wait_for(&json!(run), Duration::ZERO).is_none(),
        "the gated call answered before it was let go"
    );
    std::fs::write(t.path().join("go"), "").unwrap();
    let done = s
        .wait_for(&json!(run), RESPONSE_TIMEOUT)
        .expect("the running call's answer");
    let done = parse_reply(&done, None);
    assert_eq!(done.ok()["stdout"], "done\n", "{}", done.structured);
    assert_eq!(done.ok()["exit_code"], 0);

    // The same connection goes on: same catalog, requests answered by the new worker.
    assert_eq!(tool_names(&mut s), catalog);
    assert_eq!(s.request("ping", json!({}))["result"], json!({}));
    t.write("a.txt", "after the upgrade\n");
    let read = s.call("read_file", json!({"path": "a.txt"}));
    assert!(read.text.contains("after the upgrade"), "{}", read.text);
    assert_eq!(info(&mut s)["supervisor"]["worker_pid"], new_worker);
    assert_eq!(s.take_method(LIST_CHANGED), Vec::<Value>::new());
}

#[test]
fn a_replaced_binary_is_noticed_without_a_signal() {
    let t = Tree::new();
    let inst = Install::new();
    let mut s = inst.start(t.path(), &[]);
    let (before, old_worker) = first_info(&mut s, &inst);
    let base = before["version"].as_str().unwrap().to_owned();

    inst.replace_with(newer_build());
    let replaced = Instant::now();
    let after = wait_generation(&mut s, &inst, 2);
    // The check runs every UPGRADE_CHECK_INTERVAL; the new worker then starts and initializes.
    assert!(
        replaced.elapsed() < UPGRADE_CHECK_INTERVAL + Duration::from_secs(20),
        "took {:?}",
        replaced.elapsed()
    );
    let sup = &after["supervisor"];
    assert_eq!(after["version"], format!("{base}+{NEWER_STAMP}"));
    assert_eq!(sup["reloads"], 1, "{sup}");
    assert_ne!(sup["worker_pid"], old_worker, "{sup}");
    assert!(
        inst.log()
            .contains("starting a new worker (the binary changed)"),
        "{}",
        inst.log()
    );
    assert_eq!(s.take_method(LIST_CHANGED), Vec::<Value>::new());
}

#[test]
fn a_new_build_with_another_tool_list_sends_list_changed_once() {
    let t = Tree::new();
    let inst = Install::new();
    let mut s = inst.start(t.path(), &[]);
    let (before, _) = first_info(&mut s, &inst);
    let base = before["version"].as_str().unwrap().to_owned();
    let full = tool_names(&mut s);
    assert_eq!(
        s.init["capabilities"]["tools"]["listChanged"], true,
        "the supervisor announces list_changed: {}",
        s.init
    );

    // The "new build": a wrapper that runs the newer binary with the read-only profile.
    let real = inst.dir.path().join("real-machine-mcp");
    std::fs::hard_link(newer_build(), &real).unwrap();
    let real = real.to_str().unwrap();
    let wrapper = inst.script(
        "wrapper",
        &format!(
            "if [ \"$1\" = --version ]; then exec {real} --version; fi\n\
             exec {real} \"$@\" --profile review"
        ),
    );
    let v = Command::new(&wrapper).arg("--version").output().unwrap();
    assert!(v.status.success());
    assert_eq!(
        String::from_utf8_lossy(&v.stdout).trim(),
        format!("machine-mcp {base}+{NEWER_STAMP}")
    );
    inst.replace_with(&wrapper);
    signal(u64::from(s.pid()), "HUP");
    let after = wait_generation(&mut s, &inst, 2);
    assert_eq!(after["policy"]["profile"], "review", "{}", after["policy"]);

    let notes = s.take_method(LIST_CHANGED);
    assert_eq!(notes.len(), 1, "one list_changed: {notes:?}");
    let reduced = tool_names(&mut s);
    assert!(reduced.len() < full.len(), "{reduced:?}");
    assert!(reduced.iter().all(|n| full.contains(n)), "{reduced:?}");
    for gone in ["write_file", "run_process"] {
        assert!(full.iter().any(|n| n == gone) && !reduced.iter().any(|n| n == gone));
    }
    assert_eq!(s.request("ping", json!({}))["result"], json!({}));
    assert_eq!(s.take_method(LIST_CHANGED), Vec::<Value>::new(), "only one");
}

#[test]
fn a_candidate_that_exits_at_once_leaves_the_old_worker_serving() {
    let t = Tree::new();
    t.write("a.txt", "still here\n");
    let inst = Install::new();
    let mut s = inst.start(t.path(), &[]);
    let (before, old_worker) = first_info(&mut s, &inst);

    let broken = inst.script(
        "broken",
        "if [ \"$1\" = --version ]; then echo 'machine-mcp 9.9.9'; exit 0; fi\nexit 3",
    );
    inst.replace_with(&broken);
    signal(u64::from(s.pid()), "HUP");
    let r = wait_info(&mut s, &inst, "the failed candidate", |r| {
        r.structured["supervisor"]["last_failure"].is_string()
    });
    let sup = &r.structured["supervisor"];
    let failure = sup["last_failure"].as_str().unwrap();
    assert!(
        failure.contains("a new worker failed") && failure.contains("exit status 3"),
        "{failure}"
    );
    assert_eq!(sup["worker_pid"], old_worker, "{sup}");
    assert_eq!(sup["worker_generation"], 1, "{sup}");
    assert_eq!(sup["reloads"], 0, "{sup}");
    assert_eq!(sup["state"], "serving", "{sup}");
    assert_eq!(r.structured["version"], before["version"]);
    assert!(
        inst.log()
            .contains("reload failed, the current worker keeps serving"),
        "{}",
        inst.log()
    );
    let read = s.call("read_file", json!({"path": "a.txt"}));
    assert!(read.text.contains("still here"), "{}", read.text);
    assert_eq!(s.take_method(LIST_CHANGED), Vec::<Value>::new());
}

#[test]
fn a_binary_whose_version_fails_is_not_started() {
    let t = Tree::new();
    let inst = Install::new();
    let mut s = inst.start(t.path(), &[]);
    let (_, old_worker) = first_info(&mut s, &inst);

    let calls = inst.dir.path().join("calls");
    let bad = inst.script(
        "bad",
        &format!("echo \"$*\" >> {}\nexit 1", calls.display()),
    );
    inst.replace_with(&bad);
    signal(u64::from(s.pid()), "HUP");
    let r = wait_info(&mut s, &inst, "the failed probe", |r| {
        r.structured["supervisor"]["last_failure"].is_string()
    });
    let sup = &r.structured["supervisor"];
    let failure = sup["last_failure"].as_str().unwrap();
    assert!(failure.contains("--version failed"), "{failure}");
    assert_eq!(sup["worker_pid"], old_worker, "{sup}");
    assert_eq!(sup["reloads"], 0, "{sup}");
    assert_eq!(sup["state"], "serving", "{sup}");
    let runs = std::fs::read_to_string(&calls).unwrap();
    assert!(
        !runs.is_empty() && runs.lines().all(|l| l == "--version"),
        "the file was only asked its version: {runs:?}"
    );
    assert!(s.call("list_dir", json!({"path": "."})).ok().is_object());
}

#[test]
fn a_worker_killed_mid_call_fails_that_call_as_unknown_and_is_restarted() {
    let t = Tree::new();
    let inst = Install::new();
    let mut s = inst.start(t.path(), &[]);
    let (_, old_worker) = first_info(&mut s, &inst);

    let run = s.send_request(
        "tools/call",
        json!({"name": "run_process",
               "arguments": {"argv": ["sh", "-c", "echo started > started; sleep 5"]}}),
    );
    wait_file(&t.path().join("started"), RESPONSE_TIMEOUT);
    signal(old_worker, "KILL");
    let lost = s
        .wait_for(&json!(run), RESPONSE_TIMEOUT)
        .expect("an answer for the call in flight");
    assert_eq!(lost["error"]["code"], code::OUTCOME_UNKNOWN, "{lost}");
    assert_eq!(lost["error"]["data"]["delivery_state"], "unknown", "{lost}");

    // While the worker restarts, the supervisor answers ping and server_info itself.
    assert_eq!(s.request("ping", json!({}))["result"], json!({}));
    let down = s.call("server_info", json!({}));
    assert_eq!(down.code(), "unavailable", "{}", down.error);
    assert!(
        down.error["message"]
            .as_str()
            .unwrap()
            .contains("restarting the worker"),
        "{}",
        down.error
    );
    let state = down.error["supervisor"]["state"]
        .as_str()
        .unwrap_or_default();
    assert!(state.starts_with("restarting the worker"), "{}", down.error);
    assert!(
        down.error["supervisor"].get("worker_pid").is_none(),
        "{}",
        down.error
    );

    // The next call waits for the restarted worker and succeeds there.
    assert!(s.call("list_dir", json!({"path": "."})).ok().is_object());
    let after = wait_generation(&mut s, &inst, 2);
    let sup = &after["supervisor"];
    assert_eq!(sup["recoveries"], 1, "{sup}");
    assert_eq!(sup["reloads"], 0, "{sup}");
    assert_eq!(sup["state"], "serving", "{sup}");
    assert_ne!(sup["worker_pid"], old_worker, "{sup}");
    assert!(
        sup["last_failure"].as_str().unwrap().contains("SIGKILL"),
        "{sup}"
    );
}

#[test]
fn requests_beyond_the_queue_bound_are_not_sent_and_the_rest_answered_once() {
    let t = Tree::new();
    let inst = Install::new();
    let mut s = inst.start(t.path(), &[]);
    let (_, old_worker) = first_info(&mut s, &inst);

    signal(old_worker, "KILL");
    // The supervisor has seen the exit once it answers server_info itself (before, a request
    // may still go to the dying worker and come back -32003).
    let end = Instant::now() + SWITCH_WAIT;
    loop {
        let m = s.request(
            "tools/call",
            json!({"name": "server_info", "arguments": {}}),
        );
        if m["result"]["isError"] == true {
            break;
        }
        assert_eq!(m["error"]["code"], code::OUTCOME_UNKNOWN, "{m}");
        assert!(Instant::now() < end, "the exit was not noticed: {m}");
    }
    let n = SUPERVISOR_QUEUE_MAX + 44;
    let ids: Vec<String> = (0..n).map(|i| format!("q{i}")).collect();
    let mut burst = String::new();
    for id in &ids {
        burst.push_str(
            &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                    "params": {"name": "list_dir", "arguments": {"path": "."}}})
            .to_string(),
        );
        burst.push('\n');
    }
    s.send_bytes(burst.as_bytes());

    let mut refused = Vec::new();
    // The queued calls reach the restarted worker at most its limit of concurrent calls at a
    // time, so none of them is answered `limit_exceeded` for having waited (fresh tester of
    // issue 20: 10, 78 and 83 of the 256 were, when the queue was sent on at once).
    let (mut served, mut busy) = (0, 0);
    for (i, id) in ids.iter().enumerate() {
        let m = s
            .wait_for(&json!(id), RESPONSE_TIMEOUT)
            .unwrap_or_else(|| panic!("no answer to {id}; log:\n{}", inst.log()));
        if let Some(e) = m.get("error") {
            assert_eq!(e["code"], code::UNAVAILABLE, "{m}");
            assert_eq!(e["data"]["delivery_state"], "not_sent", "{m}");
            refused.push(i);
        } else if parse_reply(&m, None).is_error {
            assert_eq!(parse_reply(&m, None).code(), "limit_exceeded", "{m}");
            busy += 1;
        } else {
            served += 1;
        }
    }
    assert_eq!(
        (served, busy),
        (SUPERVISOR_QUEUE_MAX, 0),
        "every queued call is served by the restarted worker"
    );
    assert_eq!(
        refused,
        (SUPERVISOR_QUEUE_MAX..n).collect::<Vec<_>>(),
        "the requests past the bound are refused, the first {SUPERVISOR_QUEUE_MAX} served"
    );
    // Exactly one answer each: after another round trip nothing more came for those ids.
    assert_eq!(s.request("ping", json!({}))["result"], json!({}));
    assert!(s.call("list_dir", json!({"path": "."})).ok().is_object());
    while let Some(m) = s.recv(Duration::ZERO) {
        assert!(
            !m["id"].as_str().is_some_and(|id| id.starts_with('q')),
            "a second answer: {m}"
        );
    }
    let sup = &info(&mut s)["supervisor"];
    assert_eq!(sup["recoveries"], 1, "{sup}");
}

#[test]
fn a_process_session_of_the_replaced_worker_is_still_served_by_it() {
    let t = Tree::new();
    let inst = Install::new();
    let mut s = inst.start(t.path(), &[]);
    let (_, old_worker) = first_info(&mut s, &inst);

    let started = s.call(
        "start_process",
        json!({"argv": ["sh", "-c", "echo begun; while [ ! -e go ]; do sleep 0.05; done; echo finished"]}),
    );
    let session = started.ok()["session_id"].as_str().unwrap().to_owned();

    inst.replace_with(newer_build());
    signal(u64::from(s.pid()), "HUP");
    let after = wait_generation(&mut s, &inst, 2);
    assert_eq!(after["supervisor"]["replaced_workers"], json!([old_worker]));
    // The new worker holds no session; the old one does.
    let listed = s.call("list_processes", json!({}));
    assert_eq!(listed.ok()["sessions"], json!([]), "{}", listed.structured);

    let read = s.send_request(
        "tools/call",
        json!({"name": "read_process",
               "arguments": {"session_id": session, "wait_ms": 30000, "wait_for_exit": true}}),
    );
    std::fs::write(t.path().join("go"), "").unwrap();
    let got = s
        .wait_for(&json!(read), RESPONSE_TIMEOUT)
        .expect("read_process");
    let got = parse_reply(&got, None);
    let st = got.ok();
    assert_eq!(st["stdout"]["data"], "begun\nfinished\n", "{st}");
    assert_eq!(st["running"], false, "{st}");
    assert_eq!(st["exit_code"], 0, "{st}");

    // With no work left the old worker is stopped (its activity is asked every 5 s).
    assert!(
        wait_gone(old_worker, Duration::from_secs(30)),
        "the replaced worker still runs; log:\n{}",
        inst.log()
    );
    let i = wait_info(&mut s, &inst, "the replaced worker's end", |r| {
        r.structured["supervisor"]["replaced_workers"] == json!([])
    });
    assert_eq!(i.structured["supervisor"]["worker_generation"], 2);
    let ended = s.call("read_process", json!({"session_id": session}));
    assert_eq!(ended.code(), "not_found", "{}", ended.error);
    assert!(
        ended.error["message"].as_str().unwrap().contains("upgrade"),
        "{}",
        ended.error
    );
}

#[test]
fn the_reload_command_reloads_the_supervisor_it_names() {
    let t = Tree::new();
    let inst = Install::new();
    let mut s = inst.start(t.path(), &[]);
    let (before, old_worker) = first_info(&mut s, &inst);

    let out = Command::new(bin())
        .args(["reload", "--pid", &s.pid().to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains(&format!("reloading machine-mcp stdio (pid {})", s.pid())),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let after = wait_generation(&mut s, &inst, 2);
    let sup = &after["supervisor"];
    assert_eq!(sup["reloads"], 1, "{sup}");
    assert_ne!(sup["worker_pid"], old_worker, "{sup}");
    assert_eq!(after["version"], before["version"], "the same binary");
    assert_eq!(s.take_method(LIST_CHANGED), Vec::<Value>::new());

    let out = Command::new(bin())
        .args(["reload", "--pid", "1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("process 1 is not a `machine-mcp stdio` of yours"),
        "{err}"
    );
    assert_eq!(info(&mut s)["supervisor"]["reloads"], 1);
}

#[test]
fn without_the_supervisor_the_server_runs_in_process() {
    let t = Tree::new();
    let inst = Install::new();
    let mut s = inst.start(t.path(), &["--no-supervisor"]);
    let i = info(&mut s);
    assert!(i.get("supervisor").is_none(), "{i}");
    assert_eq!(i["activity"]["calls_in_flight"], 1, "{}", i["activity"]);
    assert_eq!(
        workers_of(u64::from(s.pid())),
        Vec::<u64>::new(),
        "no worker process"
    );
}

/// The processes whose parent is `pid` and whose command line has `--worker`.
fn workers_of(pid: u64) -> Vec<u64> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(child) = e.file_name().to_str().and_then(|n| n.parse::<u64>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // The fields after the command's name: state, then the parent's pid.
        let parent = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u64>().ok());
        let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        if parent == Some(pid) && cmdline.split(|b| *b == 0).any(|a| a == b"--worker") {
            found.push(child);
        }
    }
    found
}
