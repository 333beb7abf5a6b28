//! The stdio supervisor (issue 20): `machine-mcp stdio` keeps the client's connection while it
//! swaps in a new binary (on SIGHUP, `machine-mcp reload`, or when the file at its path
//! changes), restarts a worker that died, and bounds what waits meanwhile. Each test starts the
//! supervisor from a link to the built binary in a directory of its own, so it can put another
//! file at that path the way an upgrade does (a rename over it).

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use protocol::{jsonrpc::code, limits::UPGRADE_CHECK_INTERVAL};
use serde_json::{Value, json};
use supervisor::limits::{
    RETIRED_WORKER_POLL, SUPERVISOR_QUEUE_MAX, WORKER_RESTART_BACKOFF_MAX,
    WORKER_RESTART_BACKOFF_MIN, WORKER_RESTARTS_MAX,
};

use crate::util::{
    NEWER_STAMP, RESPONSE_TIMEOUT, Reply, Server, Tree, alive, bin, newer_build, parse_reply,
    wait_file, wait_gone,
};

/// How long a test waits for the supervisor to switch to a new worker or restart one.
const SWITCH_WAIT: Duration = Duration::from_secs(30);

/// A shell command that says it started (the file `started` in its working directory, the
/// workspace) and then runs until the test creates the file `go`, then prints `done`.
const GATED: &str = "echo started > started; while [ ! -e go ]; do sleep 0.05; done; echo done";

const LIST_CHANGED: &str = "notifications/tools/list_changed";

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
    // may still go to the dying worker and come back -32003, or fail to be written to it and
    // come back -32000 `not_sent`).
    let end = Instant::now() + SWITCH_WAIT;
    loop {
        let m = s.request(
            "tools/call",
            json!({"name": "server_info", "arguments": {}}),
        );
        if m["result"]["isError"] == true {
            break;
        }
        let not_sent = m["error"]["code"] == code::UNAVAILABLE
            && m["error"]["data"]["delivery_state"] == "not_sent";
        assert!(
            m["error"]["code"] == code::OUTCOME_UNKNOWN || not_sent,
            "{m}"
        );
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

    // The exited session stays readable on the old worker (it keeps what its client can still
    // read, up to its grace); once that worker is gone, the session is reported as ended by the
    // upgrade. (Its end is forced here: the grace is 15 minutes.)
    let again = s.call("read_process", json!({"session_id": session}));
    assert_eq!(again.ok()["exit_code"], 0, "{}", again.structured);
    signal(old_worker, "KILL");
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
        err.contains("process 1 is not a running `machine-mcp stdio` supervisor"),
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

// === The fresh tester's findings on the supervisor (issue 20) ===

/// The per-request `_meta` of an MCP 2026-07-28 request, declaring the tasks extension when
/// `tasks`.
fn meta(tasks: bool) -> Value {
    let caps = if tasks {
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
    } else {
        json!({})
    };
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "supervisor-test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": caps,
    })
}

/// The params of a 2026-07-28 `tools/call` of `tool` by a client with the tasks extension.
fn modern_call(tool: &str, args: Value) -> Value {
    json!({"name": tool, "arguments": args, "_meta": meta(true)})
}

impl Install {
    /// Starts the supervisor like [`Install::start`] without any handshake.
    fn spawn(&self, workspace: &Path, args: &[&str]) -> Server {
        Server::spawn_binary(&self.binary(), workspace, args, &[], &self.log_path())
    }

    /// Waits (at most [`SWITCH_WAIT`]) until the log holds `needle` at least `times` times.
    fn wait_log(&self, needle: &str, times: usize) {
        let end = Instant::now() + SWITCH_WAIT;
        while self.log().matches(needle).count() < times {
            assert!(
                Instant::now() < end,
                "the log did not say {needle:?} {times} times within {SWITCH_WAIT:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// [`wait_info`] for a client of MCP 2026-07-28 (no handshake: `_meta` on each call).
fn wait_modern_info(
    s: &mut Server,
    inst: &Install,
    what: &str,
    done: impl Fn(&Reply) -> bool,
) -> Reply {
    let end = Instant::now() + SWITCH_WAIT;
    loop {
        let m = s.request("tools/call", modern_call("server_info", json!({})));
        let r = parse_reply(&m, None);
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

/// `tasks/get` of `task` until its status is no longer `working` (at most [`SWITCH_WAIT`]).
fn wait_task_end(s: &mut Server, task: &str) -> Value {
    let end = Instant::now() + SWITCH_WAIT;
    loop {
        let r = s.request("tasks/get", json!({"taskId": task, "_meta": meta(true)}));
        if r["result"]["status"] != "working" {
            return r;
        }
        assert!(Instant::now() < end, "task {task} still works: {r}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits (at most [`SWITCH_WAIT`]) for the first message of the server with `method`.
fn wait_method(s: &mut Server, method: &str) -> Value {
    let end = Instant::now() + SWITCH_WAIT;
    loop {
        if let Some(m) = s.take_method(method).into_iter().next() {
            return m;
        }
        assert!(Instant::now() < end, "no {method} within {SWITCH_WAIT:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// After the active worker was killed: `server_info` until the supervisor answers it itself
/// (before, a request may still reach the dying worker and come back -32003, or the worker
/// answers); returns that error result.
fn wait_restarting(s: &mut Server, inst: &Install) -> Reply {
    let end = Instant::now() + SWITCH_WAIT;
    loop {
        let m = s.request(
            "tools/call",
            json!({"name": "server_info", "arguments": {}}),
        );
        if m["result"]["isError"] == true {
            return parse_reply(&m, None);
        }
        assert!(
            Instant::now() < end,
            "the worker's exit was not noticed: {m}\nlog:\n{}",
            inst.log()
        );
    }
}

/// A fresh tester of issue 20 (t32): a worker swap before the client's `initialize` (a
/// reload, a crash, or a `server/discover` then a reload) left the session unusable —
/// `tools/list` and `tools/call` after `initialize` failed with -32602 "request _meta is
/// missing".
#[test]
fn a_worker_swapped_before_initialize_serves_the_handshake_that_follows() {
    for how in ["SIGHUP", "SIGKILL", "server/discover, then SIGHUP"] {
        let t = Tree::new();
        let inst = Install::new();
        let mut s = inst.spawn(t.path(), &[]);
        // The first worker is up (the supervisor handles signals by then).
        inst.wait_log("serving MCP over stdio", 1);
        let sup = u64::from(s.pid());
        match how {
            "SIGKILL" => {
                let first = workers_of(sup);
                assert_eq!(first.len(), 1, "{first:?}");
                signal(first[0], "KILL");
                inst.wait_log("the server worker was restarted", 1);
            }
            _ => {
                if how.starts_with("server/discover") {
                    let d = s.request("server/discover", json!({"_meta": meta(false)}));
                    assert_eq!(d["result"]["resultType"], "complete", "{d}");
                }
                signal(sup, "HUP");
                inst.wait_log("reloaded:", 1);
            }
        }
        let init = s.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "integration-tests", "version": "0"}}),
        );
        assert_eq!(
            init["result"]["protocolVersion"], "2025-11-25",
            "{how}: {init}"
        );
        s.notify("notifications/initialized", json!({}));
        let list = s.request("tools/list", json!({}));
        assert!(
            list["result"]["tools"]
                .as_array()
                .is_some_and(|t| !t.is_empty()),
            "{how}: tools/list after initialize: {list}"
        );
        let call = s.request(
            "tools/call",
            json!({"name": "list_dir", "arguments": {"path": "."}}),
        );
        assert!(
            call.get("result").is_some() && call["result"]["isError"] != true,
            "{how}: tools/call after initialize: {call}"
        );
        assert_eq!(info(&mut s)["supervisor"]["worker_generation"], 2, "{how}");
    }
}

/// A fresh tester of issue 20 (t5c, t26): the tasks a worker held were "not found" after a
/// reload — `tasks/get` and `tasks/cancel` went to the new worker. The replaced worker serves
/// them, and keeps a finished task readable.
#[test]
fn tasks_of_the_replaced_worker_are_read_and_cancelled_there_after_a_reload() {
    let t = Tree::new();
    let inst = Install::new();
    let mut s = inst.spawn(t.path(), &[]);
    // Two calls that outlast the foreground budget and become tasks: one runs until the test
    // lets it end, one the test cancels.
    let gated = s.send_request(
        "tools/call",
        modern_call("run_process", json!({"argv": ["sh", "-c", GATED]})),
    );
    let doomed = s.send_request(
        "tools/call",
        modern_call(
            "run_process",
            json!({"argv": ["sh", "-c", "echo $$ > doomed.pid; exec sleep 60"]}),
        ),
    );
    let mut task = |id: i64| {
        let r = s.wait_for(&json!(id), RESPONSE_TIMEOUT).expect("an answer");
        assert_eq!(r["result"]["resultType"], "task", "{r}");
        r["result"]["taskId"].as_str().unwrap().to_owned()
    };
    let (gated, doomed) = (task(gated), task(doomed));
    let doomed_pid: u64 = wait_file(&t.path().join("doomed.pid"), RESPONSE_TIMEOUT)
        .trim()
        .parse()
        .unwrap();
    let old_worker = workers_of(u64::from(s.pid()))[0];

    signal(u64::from(s.pid()), "HUP");
    wait_modern_info(&mut s, &inst, "worker generation 2", |r| {
        r.structured["supervisor"]["worker_generation"] == 2
    });

    let get = s.request("tasks/get", json!({"taskId": gated, "_meta": meta(true)}));
    assert_eq!(get["result"]["status"], "working", "{get}");
    let cancel = s.request(
        "tasks/cancel",
        json!({"taskId": doomed, "_meta": meta(true)}),
    );
    assert_eq!(cancel["result"]["resultType"], "complete", "{cancel}");
    let end = wait_task_end(&mut s, &doomed);
    assert_eq!(end["result"]["status"], "cancelled", "{end}");
    assert!(
        wait_gone(doomed_pid, RESPONSE_TIMEOUT),
        "the cancelled task's process still runs"
    );

    std::fs::write(t.path().join("go"), "").unwrap();
    let done = wait_task_end(&mut s, &gated);
    assert_eq!(done["result"]["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["result"]["structuredContent"]["stdout"], "done\n",
        "{done}"
    );
    // The finished task stays readable: the replaced worker is not stopped for having no
    // work left (it is asked every RETIRED_WORKER_POLL).
    let until = Instant::now() + RETIRED_WORKER_POLL + Duration::from_secs(3);
    while Instant::now() < until {
        let again = s.request("tasks/get", json!({"taskId": gated, "_meta": meta(true)}));
        assert_eq!(again["result"]["status"], "completed", "{again}");
        assert!(alive(old_worker), "the replaced worker was stopped");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// A fresh tester of issue 20 (t35): after a crash, `tasks/get` of the dead worker's task went
/// to the restarted worker ("not found"); it must say the task ended with its worker.
#[test]
fn a_task_of_a_crashed_worker_is_reported_as_ended_with_it() {
    let t = Tree::new();
    let inst = Install::new();
    let mut s = inst.spawn(t.path(), &[]);
    let r = s.request(
        "tools/call",
        modern_call("run_process", json!({"argv": ["sleep", "60"]})),
    );
    assert_eq!(r["result"]["resultType"], "task", "{r}");
    let task = r["result"]["taskId"].as_str().unwrap().to_owned();
    signal(workers_of(u64::from(s.pid()))[0], "KILL");
    inst.wait_log("exited unexpectedly", 1);

    let get = s.request("tasks/get", json!({"taskId": task, "_meta": meta(true)}));
    let message = get["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("ended with the server worker") && message.contains("unexpectedly"),
        "{get}"
    );
}

/// A fresh tester of issue 20 (t36): a request waiting for a restarted worker and then
/// cancelled by the client was sent anyway (the file was written).
#[test]
fn a_request_cancelled_while_it_waits_for_a_restart_is_dropped() {
    let t = Tree::new();
    let inst = Install::new();
    let mut s = inst.start(t.path(), &[]);
    let (_, worker) = first_info(&mut s, &inst);
    signal(worker, "KILL");
    wait_restarting(&mut s, &inst);

    s.send_line(
        &json!({"jsonrpc": "2.0", "id": "cq", "method": "tools/call",
                "params": {"name": "write_file", "arguments": {"path": "cq.txt", "content": "x"}}})
        .to_string(),
    );
    s.notify("notifications/cancelled", json!({"requestId": "cq"}));
    wait_generation(&mut s, &inst, 2);
    // A request the restarted worker got would have been answered by now, or soon after.
    assert_eq!(
        s.wait_for(&json!("cq"), Duration::from_secs(2)),
        None,
        "the cancelled request was answered"
    );
    assert!(!t.path().join("cq.txt").exists(), "the cancelled write ran");
}

/// A fresh tester of issue 20 (t34): a process session that ended on the replaced worker was
/// unreadable about 5 s after the reload (the worker was stopped for having no work).
#[test]
fn an_exited_process_session_of_the_replaced_worker_stays_readable() {
    let t = Tree::new();
    let inst = Install::new();
    let mut s = inst.start(t.path(), &[]);
    let (_, old_worker) = first_info(&mut s, &inst);
    let started = s.call(
        "start_process",
        json!({"argv": ["sh", "-c", "sleep 0.2; echo out"]}),
    );
    let session = started.ok()["session_id"].as_str().unwrap().to_owned();
    let exited = s.call(
        "read_process",
        json!({"session_id": session, "wait_ms": 30000, "wait_for_exit": true}),
    );
    assert_eq!(exited.ok()["running"], false, "{}", exited.structured);

    signal(u64::from(s.pid()), "HUP");
    wait_generation(&mut s, &inst, 2);
    let until = Instant::now() + RETIRED_WORKER_POLL + Duration::from_secs(3);
    while Instant::now() < until {
        let read = s.call("read_process", json!({"session_id": session}));
        let st = read.ok();
        assert_eq!(st["stdout"]["data"], "out\n", "{st}");
        assert_eq!(st["exit_code"], 0, "{st}");
        assert!(alive(old_worker), "the replaced worker was stopped");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// A fresh tester of issue 20 (t25, t25b): a 2026-07-28 client listening for
/// `toolsListChanged` got no `notifications/tools/list_changed` when a reload changed the
/// tools, and its open `subscriptions/listen` kept the replaced worker running.
#[test]
fn a_listening_client_gets_list_changed_once_and_its_subscription_pins_no_worker() {
    let t = Tree::new();
    let inst = Install::new();
    let mut s = inst.spawn(t.path(), &[]);
    let listen = s.send_request(
        "subscriptions/listen",
        json!({"_meta": meta(false), "notifications": {"toolsListChanged": true}}),
    );
    let ack = wait_method(&mut s, "notifications/subscriptions/acknowledged");
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        json!(listen),
        "{ack}"
    );
    assert_eq!(
        ack["params"]["notifications"]["toolsListChanged"], true,
        "the supervisor reports tool list changes: {ack}"
    );
    let modern_tools = |s: &mut Server| {
        let list = s.request("tools/list", json!({"_meta": meta(false)}));
        list["result"]["tools"].as_array().expect("tools").len()
    };
    let full = modern_tools(&mut s);
    let old_worker = workers_of(u64::from(s.pid()))[0];

    // A new build that lists fewer tools (see a_new_build_with_another_tool_list_...).
    let real = inst.dir.path().join("real-machine-mcp");
    std::fs::hard_link(newer_build(), &real).unwrap();
    let wrapper = inst.script(
        "wrapper",
        &format!(
            "if [ \"$1\" = --version ]; then exec {0} --version; fi\nexec {0} \"$@\" --profile review",
            real.display()
        ),
    );
    inst.replace_with(&wrapper);
    signal(u64::from(s.pid()), "HUP");
    wait_modern_info(&mut s, &inst, "worker generation 2", |r| {
        r.structured["supervisor"]["worker_generation"] == 2
    });
    let notes = s.take_method(LIST_CHANGED);
    assert_eq!(notes.len(), 1, "one list_changed: {notes:?}");
    assert_eq!(
        notes[0]["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        json!(listen),
        "{}",
        notes[0]
    );
    assert!(modern_tools(&mut s) < full);

    // The subscription does not keep the replaced worker, which has no other work.
    let r = wait_modern_info(&mut s, &inst, "the replaced worker's end", |r| {
        r.structured["supervisor"]["replaced_workers"] == json!([])
    });
    assert_eq!(r.structured["supervisor"]["worker_generation"], 2);
    assert!(wait_gone(old_worker, RESPONSE_TIMEOUT));
    assert_eq!(
        s.wait_for(&json!(listen), Duration::ZERO),
        None,
        "the client's subscription was ended"
    );
    assert_eq!(s.take_method(LIST_CHANGED), Vec::<Value>::new(), "only one");
}

/// A fresh tester of issue 20 (t6): a worker that started and then crashed, again and again,
/// was restarted forever at "attempt 1" after 1 s. The backoff doubles and the supervisor
/// gives up after [`WORKER_RESTARTS_MAX`] restarts without a healthy worker; requests are then
/// refused as not retryable (until a reload, which starts over).
#[test]
fn a_worker_that_keeps_crashing_is_restarted_with_growing_backoff_then_given_up() {
    let t = Tree::new();
    let inst = Install::new();
    let mut s = inst.start(t.path(), &[]);
    let (_, mut worker) = first_info(&mut s, &inst);
    for attempt in 1..=WORKER_RESTARTS_MAX {
        signal(worker, "KILL");
        let down = wait_restarting(&mut s, &inst);
        let state = down.error["supervisor"]["state"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let prefix =
            format!("restarting the worker (attempt {attempt} of {WORKER_RESTARTS_MAX} in ");
        let ms: u128 = state
            .strip_prefix(&prefix)
            .and_then(|rest| rest.strip_suffix(" ms)"))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("after crash {attempt}: {state:?}"));
        let backoff = (WORKER_RESTART_BACKOFF_MIN * (1 << (attempt - 1)))
            .min(WORKER_RESTART_BACKOFF_MAX)
            .as_millis();
        assert!(
            ms <= backoff && ms > backoff / 2,
            "after crash {attempt}: {state:?}, want about {backoff} ms"
        );
        let up = wait_generation(&mut s, &inst, u64::from(attempt) + 1);
        worker = up["supervisor"]["worker_pid"].as_u64().unwrap();
    }
    signal(worker, "KILL");
    let down = wait_restarting(&mut s, &inst);
    let state = down.error["supervisor"]["state"]
        .as_str()
        .unwrap_or_default();
    assert!(state.starts_with("failed: "), "{}", down.error);
    let refused = s.request(
        "tools/call",
        json!({"name": "list_dir", "arguments": {"path": "."}}),
    );
    assert_eq!(
        refused["error"]["data"]["delivery_state"], "not_sent",
        "{refused}"
    );
    assert_eq!(refused["error"]["data"]["retryable"], false, "{refused}");

    signal(u64::from(s.pid()), "HUP");
    let back = wait_generation(&mut s, &inst, u64::from(WORKER_RESTARTS_MAX) + 2);
    assert_eq!(back["supervisor"]["state"], "serving");
}

/// A fresh tester of issue 20 (t37): a new binary that could not run (mode 644) was never
/// tried again once `chmod +x` fixed it, only after a SIGHUP.
#[test]
fn a_rejected_binary_made_executable_is_picked_up_without_a_signal() {
    use std::os::unix::fs::PermissionsExt;
    let t = Tree::new();
    let inst = Install::new();
    let mut s = inst.start(t.path(), &[]);
    let (before, _) = first_info(&mut s, &inst);
    // A copy of the newer build without execute permission (a child process writes it, see
    // newer_build).
    let next = inst.dir.path().join("bin/.machine-mcp.next");
    let ok = Command::new("sh")
        .args(["-c", r#"cp "$1" "$2" && chmod 644 "$2""#, "sh"])
        .arg(newer_build())
        .arg(&next)
        .status()
        .unwrap()
        .success();
    assert!(ok);
    std::fs::rename(&next, inst.binary()).unwrap();
    let r = wait_info(&mut s, &inst, "the rejected binary", |r| {
        r.structured["supervisor"]["last_failure"].is_string()
    });
    assert_eq!(r.structured["supervisor"]["worker_generation"], 1);

    std::fs::set_permissions(inst.binary(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let after = wait_generation(&mut s, &inst, 2);
    assert_eq!(
        after["version"],
        format!("{}+{NEWER_STAMP}", before["version"].as_str().unwrap())
    );
}

/// A fresh tester of issue 20 (t18): SIGTERM with a call running ended the supervisor after
/// about 5 s (0.2 s with --no-supervisor).
#[test]
fn sigterm_with_a_call_running_ends_the_supervisor_promptly() {
    let t = Tree::new();
    let inst = Install::new();
    let mut s = inst.start(t.path(), &[]);
    let (_, worker) = first_info(&mut s, &inst);
    s.call("start_process", json!({"argv": ["sleep", "60"]}))
        .ok();
    s.send_request(
        "tools/call",
        json!({"name": "run_process",
               "arguments": {"argv": ["sh", "-c", "echo started > started; exec sleep 60"]}}),
    );
    wait_file(&t.path().join("started"), RESPONSE_TIMEOUT);

    let sent = Instant::now();
    signal(u64::from(s.pid()), "TERM");
    assert!(wait_gone(u64::from(s.pid()), Duration::from_secs(20)));
    let took = sent.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "the supervisor took {took:?} to end; log:\n{}",
        inst.log()
    );
    assert!(
        wait_gone(worker, Duration::from_secs(3)),
        "the worker survived"
    );
}

/// A fresh tester of issue 20 (t15): a request refused by the queue's byte bound said "256
/// requests (16 MiB) already wait" when 2 did; and `server_info` answered during a restart,
/// which is temporary, said `retryable: false`.
#[test]
fn while_a_worker_restarts_refusals_state_the_count_waiting_and_server_info_is_retryable() {
    let t = Tree::new();
    let inst = Install::new();
    let mut s = inst.start(t.path(), &[]);
    let (_, worker) = first_info(&mut s, &inst);
    signal(worker, "KILL");
    let down = wait_restarting(&mut s, &inst);
    assert_eq!(down.error["retryable"], true, "{}", down.error);

    // Three requests of 7 MiB: the third is past the queue's bytes.
    let pad = "p".repeat(7 << 20);
    let mut burst = String::new();
    for id in ["big0", "big1", "big2"] {
        burst.push_str(
            &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                    "params": {"name": "list_dir", "arguments": {"path": ".", "pad": pad}}})
            .to_string(),
        );
        burst.push('\n');
    }
    s.send_bytes(burst.as_bytes());
    let refused = s.wait_for(&json!("big2"), RESPONSE_TIMEOUT).expect("big2");
    assert_eq!(
        refused["error"]["data"]["delivery_state"], "not_sent",
        "{refused}"
    );
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(" 2 requests (") && !message.contains("256 requests ("),
        "{message}"
    );
    for id in ["big0", "big1"] {
        let m = s.wait_for(&json!(id), RESPONSE_TIMEOUT).expect(id);
        assert!(m.get("result").is_some(), "{id} was served: {m}");
    }
}

/// A fresh tester of issue 20 (t20): `machine-mcp reload` did not find a supervisor started
/// through a link of another name; `--pid` of a worker or of a `--no-supervisor` server said
/// only "not a `machine-mcp stdio` of yours".
#[test]
fn the_reload_command_finds_a_supervisor_started_by_another_name_and_says_what_others_are() {
    let t = Tree::new();
    let inst = Install::new();
    let link = inst.dir.path().join("bin/current");
    std::os::unix::fs::symlink("machine-mcp", &link).unwrap();
    let mut s = Server::start_binary(&link, t.path(), &[], &[], &inst.log_path());
    let reload = |pid: u64| {
        Command::new(bin())
            .args(["reload", "--pid", &pid.to_string()])
            .output()
            .unwrap()
    };
    let out = reload(u64::from(s.pid()));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = wait_generation(&mut s, &inst, 2);
    let worker = after["supervisor"]["worker_pid"].as_u64().unwrap();

    let out = reload(worker);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("worker") && err.contains("supervisor"),
        "{err}"
    );
    let alone = inst.start(t.path(), &["--no-supervisor"]);
    let out = reload(u64::from(alone.pid()));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--no-supervisor"), "{err}");
}

#[test]
fn a_binary_an_edit_caller_overwrote_in_the_workspace_is_not_swapped_in() {
    // The binary lies in the workspace (as `cargo install` puts it in a home's ~/.cargo/bin);
    // a write replaces the file by a rename, so the built binary it links stays as it is.
    let inst = Install::new();
    let marker = inst.dir.path().join("ran");
    let mut s = inst.start(inst.dir.path(), &["--profile", "edit"]);
    let (_, old_worker) = first_info(&mut s, &inst);
    let body = format!(
        "#!/bin/sh\necho written > '{}'\nexec '{}' \"$@\"\n",
        marker.display(),
        bin().display()
    );
    s.call(
        "write_file",
        json!({"path": "bin/machine-mcp", "content": body}),
    )
    .ok();
    // Two checks of the binary and a probe's time pass without a swap.
    let end = Instant::now() + UPGRADE_CHECK_INTERVAL * 2 + Duration::from_secs(3);
    while Instant::now() < end {
        let i = info(&mut s);
        assert_eq!(
            i["supervisor"]["worker_pid"], old_worker,
            "{}",
            i["supervisor"]
        );
        assert!(!marker.exists(), "the written binary ran");
        std::thread::sleep(Duration::from_millis(200));
    }
    // server_info says automatic swap is off and why.
    let after = info(&mut s);
    let swap = &after["supervisor"]["automatic_swap"];
    assert_eq!(swap["enabled"], false, "{}", after["supervisor"]);
    assert!(
        swap["reason"]
            .as_str()
            .is_some_and(|r| r.contains("writable workspace") && r.contains("machine-mcp reload")),
        "{}",
        after["supervisor"]
    );
    // The user's reload still takes the binary at the path.
    signal(u64::from(s.pid()), "HUP");
    wait_generation(&mut s, &inst, 2);
    assert!(marker.exists());
}

/// The first worker is started before the supervisor parsed its arguments, so that both load
/// the binary at once (`supervisor::prestart`): it is the worker that serves, and it is named
/// as every worker is (argv0 the path the host used, `comm` its file name), though it runs the
/// supervisor's own running file.
#[test]
fn the_first_worker_is_the_one_started_early_and_serves() {
    let t = Tree::new();
    let inst = Install::new();
    let mut s = inst.start(t.path(), &[]);
    let (_, worker) = first_info(&mut s, &inst);
    let comm = std::fs::read_to_string(format!("/proc/{worker}/comm")).unwrap();
    assert_eq!(comm.trim_end(), "machine-mcp");
    let cmdline = std::fs::read(format!("/proc/{worker}/cmdline")).unwrap();
    assert_eq!(
        cmdline.split(|b| *b == 0).next(),
        Some(inst.binary().to_str().unwrap().as_bytes()),
        "{}",
        String::from_utf8_lossy(&cmdline)
    );
    assert!(
        cmdline
            .split(|b| *b == 0)
            .any(|a| a == supervisor::prestart::WORKER_GATE_FLAG.as_bytes()),
        "{}",
        String::from_utf8_lossy(&cmdline)
    );
}

/// A supervised start the supervisor refuses reports its error once: the early worker, waiting
/// at its gate, ends without a word when the supervisor exits.
#[test]
fn a_refused_start_says_why_once_and_leaves_no_worker() {
    let t = Tree::new();
    let missing = t.path().join("no-such-workspace-7f3a");
    let out = Command::new(bin())
        .args(["stdio", "--workspace", missing.to_str().unwrap()])
        .stdin(std::process::Stdio::piped())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("machine-mcp:").count(), 1, "{err}");
    assert!(out.stdout.is_empty());
    let end = Instant::now() + Duration::from_secs(10);
    while crate::util::processes_with("no-such-workspace-7f3a") > 0 {
        assert!(Instant::now() < end, "the early worker is still running");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A gated worker whose gate is closed, or that reads another line first, exits at once with
/// status 0 and writes nothing.
#[test]
fn a_gated_worker_not_let_through_exits_silently() {
    let t = Tree::new();
    for input in [&b""[..], b"nope\n", b"go-on\n"] {
        let mut child = Command::new(bin())
            .args([
                "stdio",
                "--worker",
                supervisor::prestart::WORKER_GATE_FLAG,
                "--workspace",
            ])
            .arg(t.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(child.stdin.as_mut().unwrap(), input).unwrap();
        drop(child.stdin.take());
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{input:?}: {out:?}");
        assert!(
            out.stdout.is_empty() && out.stderr.is_empty(),
            "{input:?}: {out:?}"
        );
    }
}

/// A worker's stdout line that is not a JSON-RPC message (here a wrapper script that prints
/// before it starts the server) never reaches the client: the supervisor drops and logs it.
#[test]
fn a_worker_line_that_is_not_json_rpc_never_reaches_the_client() {
    let t = Tree::new();
    let inst = Install::new();
    let mut s = inst.start(t.path(), &[]);
    first_info(&mut s, &inst);
    let real = bin();
    let noisy = inst.script(
        "noisy",
        &format!(
            "if [ \"$1\" = --version ]; then exec '{0}' \"$@\"; fi\n\
             echo 'not JSON-RPC'\necho '{{\"note\": \"JSON without jsonrpc\"}}'\nexec '{0}' \"$@\"",
            real.display()
        ),
    );
    inst.replace_with(&noisy);
    signal(u64::from(s.pid()), "HUP");
    // Every message the client reads is parsed as JSON (a non-JSON line fails the test).
    wait_generation(&mut s, &inst, 2);
    let r = s.call("server_info", json!({}));
    assert!(!r.is_error, "{}", r.error);
    let log = inst.log();
    assert_eq!(
        log.matches("a worker wrote a line that is not a JSON-RPC message")
            .count(),
        2,
        "{log}"
    );
}
