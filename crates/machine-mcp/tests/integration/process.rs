//! Processes and process sessions: trees, timeouts, cancellation, yield, PTY, concurrency.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::util::{RESPONSE_TIMEOUT, Server, Tree, alive, parse_reply, wait_file, wait_gone};

const STUBBORN_TREE: &str =
    "trap '' TERM; sleep 1000 & echo $! > grandchild.pid; echo $$ > child.pid; wait";

#[test]
fn a_timeout_kills_the_whole_tree_including_a_grandchild_that_ignores_sigterm() {
    let t = Tree::new();
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let r = s.call(
        "run_process",
        json!({"argv": ["sh", "-c", STUBBORN_TREE], "timeout_seconds": 1}),
    );
    let out = r.ok();
    assert_eq!(out["timed_out"], true);
    assert_eq!(
        out["signal"], "SIGKILL",
        "SIGTERM was ignored, so SIGKILL ended it"
    );
    let grandchild: u64 = String::from_utf8(t.read("grandchild.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let child: u64 = String::from_utf8(t.read("child.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!alive(child), "the shell is gone");
    assert!(!alive(grandchild), "the grandchild {grandchild} is gone");
}

#[test]
fn cancellation_kills_the_tree_and_sends_no_response() {
    let t = Tree::new();
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let id = s.send_request(
        "tools/call",
        json!({"name": "run_process", "arguments": {"argv": ["sh", "-c", STUBBORN_TREE]}}),
    );
    let grandchild: u64 = wait_file(&t.path().join("grandchild.pid"), Duration::from_secs(20))
        .trim()
        .parse()
        .unwrap();
    assert!(alive(grandchild));
    s.notify(
        "notifications/cancelled",
        json!({"requestId": id, "reason": "test"}),
    );
    assert!(
        wait_gone(grandchild, Duration::from_secs(10)),
        "grandchild {grandchild} survived cancellation"
    );
    assert!(
        s.wait_for(&json!(id), Duration::from_secs(1)).is_none(),
        "a cancelled request gets no response"
    );
    assert_eq!(s.request("ping", json!({}))["result"], json!({}));
}

#[test]
fn output_so_far_is_returned_on_timeout() {
    let t = Tree::new();
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let r = s.call(
        "run_process",
        json!({"argv": ["sh", "-c", "i=0; while true; do i=$((i+1)); echo line $i; sleep 1; done"], "timeout_seconds": 3}),
    );
    let out = r.ok();
    assert_eq!(out["timed_out"], true);
    let stdout = out["stdout"].as_str().unwrap();
    assert!(stdout.starts_with("line 1\nline 2\n"), "{stdout:?}");
    assert!(
        stdout.lines().count() >= 2 && stdout.lines().count() <= 4,
        "{stdout:?}"
    );
    assert!(out["duration_ms"].as_u64().unwrap() >= 3000);
}

#[test]
fn argv_is_never_interpreted_by_a_shell() {
    let t = Tree::new();
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let r = s.call("run_process", json!({"argv": ["echo", "$HOME; rm -rf x"]}));
    assert_eq!(r.ok()["stdout"], "$HOME; rm -rf x\n");
    assert_eq!(r.ok()["exit_code"], 0);
    let r = s.call(
        "run_process",
        json!({"argv": ["cat"], "stdin": "from stdin\n"}),
    );
    assert_eq!(r.ok()["stdout"], "from stdin\n");
    let r = s.call(
        "run_process",
        json!({"argv": ["sh", "-c", "echo out; echo err >&2; exit 7"]}),
    );
    assert_eq!(r.ok()["exit_code"], 7);
    assert_eq!(r.ok()["stderr"], "err\n");
    let r = s.call(
        "run_process",
        json!({"argv": ["definitely-not-a-program-xyz"]}),
    );
    assert_eq!(r.code(), "not_found");
    let r = s.call(
        "run_process",
        json!({"argv": ["true"], "timeout_seconds": 0}),
    );
    assert_eq!(r.code(), "invalid_request");
    let r = s.call("run_process", json!({"argv": ["pwd"], "cwd": "../"}));
    assert_eq!(r.code(), "path_boundary");
}

#[test]
fn long_output_keeps_head_and_tail_with_a_marker() {
    let t = Tree::new();
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let r = s.call("run_process", json!({"argv": ["sh", "-c", "seq 1 400000"]}));
    let out = r.ok();
    let stdout = out["stdout"].as_str().unwrap();
    assert_eq!(out["stdout_truncated"], true);
    let total: u64 = (1..=400_000u64)
        .map(|i| i.to_string().len() as u64 + 1)
        .sum();
    assert_eq!(out["stdout_bytes"], total);
    assert!(stdout.starts_with("1\n2\n3\n"));
    assert!(stdout.ends_with("399999\n400000\n"));
    assert!(stdout.contains("bytes omitted"));
    assert!(stdout.len() <= 512 * 1024 + 200);
}

#[test]
fn a_yielded_process_becomes_a_session_that_reports_its_exit_and_full_output() {
    let t = Tree::new();
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let started = Instant::now();
    let r = s.call(
        "run_process",
        json!({"argv": ["sh", "-c", "for i in 1 2 3 4 5; do echo tick $i; sleep 1; done"], "yield_after_seconds": 1}),
    );
    let out = r.ok().clone();
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "returned at the budget, not at the end"
    );
    assert_eq!(out["still_running"], true);
    let id = out["session_id"].as_str().unwrap().to_owned();
    let list = s.call("list_processes", json!({})).ok().clone();
    assert_eq!(list["sessions"][0]["session_id"], id.as_str());
    assert_eq!(list["sessions"][0]["running"], true);
    let r = s.call(
        "read_process",
        json!({"session_id": id, "wait_ms": 15000, "wait_for_exit": true}),
    );
    let st = r.ok();
    assert_eq!(st["running"], false);
    assert_eq!(st["exit_code"], 0);
    assert_eq!(
        st["stdout"]["data"],
        "tick 1\ntick 2\ntick 3\ntick 4\ntick 5\n"
    );
    assert_eq!(st["stdout"]["offset"], 0);
    assert_eq!(st["stdout"]["next_offset"], 35);
}

#[test]
fn a_pty_session_sees_a_terminal_and_a_pipe_session_does_not() {
    let t = Tree::new();
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let probe = "if test -t 0; then echo IS-A-TTY; else echo NOT-A-TTY; fi";
    let pty = s.call(
        "start_process",
        json!({"argv": ["sh", "-c", probe], "pty": true, "rows": 30, "cols": 100}),
    );
    assert_eq!(pty.ok()["pty"], true);
    let id = pty.ok()["session_id"].as_str().unwrap().to_owned();
    let st = s.call(
        "read_process",
        json!({"session_id": id, "wait_ms": 10000, "wait_for_exit": true}),
    );
    assert!(
        st.ok()["stdout"]["data"]
            .as_str()
            .unwrap()
            .contains("IS-A-TTY"),
        "{}",
        st.ok()
    );
    assert_eq!(st.ok()["exit_code"], 0);
    let pipe = s.call("start_process", json!({"argv": ["sh", "-c", probe]}));
    let id = pipe.ok()["session_id"].as_str().unwrap().to_owned();
    let st = s.call(
        "read_process",
        json!({"session_id": id, "wait_ms": 10000, "wait_for_exit": true}),
    );
    assert_eq!(st.ok()["stdout"]["data"], "NOT-A-TTY\n");
}

#[test]
fn an_interactive_session_reads_writes_and_is_killed() {
    let t = Tree::new();
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let r = s.call(
        "start_process",
        json!({"argv": ["sh", "-c", "while read l; do echo got:$l; done; echo bye"]}),
    );
    let id = r.ok()["session_id"].as_str().unwrap().to_owned();
    let w = s.call(
        "write_process",
        json!({"session_id": id, "data": "hello\n"}),
    );
    assert_eq!(w.ok()["bytes_written"], 6);
    let st = s.call("read_process", json!({"session_id": id, "wait_ms": 10000}));
    assert_eq!(st.ok()["stdout"]["data"], "got:hello\n");
    let next = st.ok()["stdout"]["next_offset"].clone();
    let w = s.call(
        "write_process",
        json!({"session_id": id, "data": "last\n", "close_stdin": true}),
    );
    assert_eq!(w.ok()["stdin_open"], false);
    let st = s.call(
        "read_process",
        json!({"session_id": id, "stdout_offset": next, "wait_ms": 10000, "wait_for_exit": true}),
    );
    assert_eq!(st.ok()["stdout"]["data"], "got:last\nbye\n");
    assert_eq!(st.ok()["exit_code"], 0);
    // A long-running one is stopped with its tree.
    let r = s.call(
        "start_process",
        json!({"argv": ["sh", "-c", "sleep 1000 & echo $!; wait"]}),
    );
    let id = r.ok()["session_id"].as_str().unwrap().to_owned();
    let st = s.call("read_process", json!({"session_id": id, "wait_ms": 10000}));
    let grandchild: u64 = st.ok()["stdout"]["data"]
        .as_str()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let k = s.call("kill_process", json!({"session_id": id}));
    assert_eq!(k.ok()["running"], false);
    assert_eq!(k.ok()["signal"], "SIGTERM");
    assert!(wait_gone(grandchild, Duration::from_secs(5)));
    let r = s.call("read_process", json!({"session_id": "proc-nope"}));
    assert_eq!(r.code(), "not_found");
}

#[test]
fn sessions_are_bounded_and_die_with_the_server() {
    let t = Tree::new();
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let mut pids = Vec::new();
    for _ in 0..8 {
        let r = s.call("start_process", json!({"argv": ["sleep", "1000"]}));
        pids.push(r.ok()["pid"].as_u64().unwrap());
    }
    let r = s.call("start_process", json!({"argv": ["sleep", "1000"]}));
    assert_eq!(r.code(), "limit_exceeded");
    assert_eq!(r.error["retryable"], true);
    s.close_stdin();
    for pid in pids {
        assert!(
            wait_gone(pid, Duration::from_secs(10)),
            "session process {pid} outlived the server"
        );
    }
}

/// Starts `argv` as a session and waits for it to exit; returns its id.
fn run_session_to_exit(s: &mut Server, argv: Value) -> String {
    let r = s.call("start_process", json!({ "argv": argv }));
    let id = r.ok()["session_id"].as_str().unwrap().to_owned();
    let st = s.call(
        "read_process",
        json!({"session_id": id, "max_bytes": 1, "wait_ms": 10000, "wait_for_exit": true}),
    );
    assert_eq!(st.ok()["running"], false, "{id} did not exit");
    id
}

/// Issue 11 item 5: exited sessions were kept for 30 minutes without a count or byte bound
/// (300 short sessions took the server from 13 MB to 787 MB).
#[test]
fn exited_sessions_are_bounded_in_count_and_bytes_and_the_oldest_goes_first() {
    use runtime::limits::{
        EXITED_SESSIONS_MAX, EXITED_SESSIONS_OUTPUT_MAX_BYTES, SESSION_OUTPUT_RETAINED_BYTES,
    };
    let t = Tree::new();
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    // Count: more short sessions than are kept.
    let ids: Vec<String> = (0..EXITED_SESSIONS_MAX + 5)
        .map(|i| run_session_to_exit(&mut s, json!(["echo", format!("run {i}")])))
        .collect();
    let listed = s.call("list_processes", json!({}));
    let kept: Vec<&str> = listed.ok()["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(kept.len(), EXITED_SESSIONS_MAX, "{kept:?}");
    assert_eq!(
        kept,
        ids[5..].iter().map(String::as_str).collect::<Vec<_>>()
    );
    let r = s.call("read_process", json!({"session_id": ids[0]}));
    assert_eq!(r.code(), "not_found");
    let msg = r.error["message"].as_str().unwrap();
    assert!(msg.contains("discarded") && msg.contains("memory"), "{msg}");
    let newest = s.call("read_process", json!({"session_id": ids.last().unwrap()}));
    assert_eq!(
        newest.ok()["stdout"]["data"],
        format!("run {}\n", EXITED_SESSIONS_MAX + 4)
    );
    // Bytes: each of these keeps at least its newest window of output, so fewer fit.
    let big = SESSION_OUTPUT_RETAINED_BYTES + 100_000;
    let fit = EXITED_SESSIONS_OUTPUT_MAX_BYTES / SESSION_OUTPUT_RETAINED_BYTES;
    let big_ids: Vec<String> = (0..fit + 3)
        .map(|_| run_session_to_exit(&mut s, json!(["head", "-c", big.to_string(), "/dev/zero"])))
        .collect();
    let listed = s.call("list_processes", json!({}));
    let kept: Vec<&Value> = listed.ok()["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["stdout_bytes"] == json!(big))
        .collect();
    assert!(
        kept.len() <= fit,
        "{} sessions of {big} bytes kept",
        kept.len()
    );
    let kept_ids: Vec<&str> = kept
        .iter()
        .map(|x| x["session_id"].as_str().unwrap())
        .collect();
    assert!(kept_ids.contains(&big_ids.last().unwrap().as_str()));
    assert!(!kept_ids.contains(&big_ids[0].as_str()));
    let r = s.call("read_process", json!({"session_id": big_ids[0]}));
    assert_eq!(r.code(), "not_found");
    // The newest keeps its output: the head (first 256 KiB, read from offset 0) and the newest
    // window, which here overlap, so nothing of it was dropped.
    let r = s.call(
        "read_process",
        json!({"session_id": big_ids.last().unwrap(), "stdout_offset": 0, "max_bytes": 1}),
    );
    assert_eq!(r.ok()["stdout"]["dropped_bytes"], json!(0));
    assert_eq!(r.ok()["stdout"]["offset"], json!(0));
    let r = s.call(
        "read_process",
        json!({"session_id": big_ids.last().unwrap(), "stdout_offset": big - SESSION_OUTPUT_RETAINED_BYTES, "max_bytes": 1}),
    );
    assert_eq!(r.ok()["stdout"]["dropped_bytes"], json!(0));
    // A running session is never discarded to make room.
    let r = s.call("start_process", json!({"argv": ["sleep", "1000"]}));
    let sleeper = r.ok()["session_id"].as_str().unwrap().to_owned();
    for _ in 0..EXITED_SESSIONS_MAX + 1 {
        run_session_to_exit(&mut s, json!(["true"]));
    }
    let r = s.call("read_process", json!({"session_id": sleeper}));
    assert_eq!(r.ok()["running"], true);
    // Another caller's ids stay unknown; the one id never issued is plain not_found.
    let r = s.call("read_process", json!({"session_id": "proc-nope"}));
    assert_eq!(r.code(), "not_found");
    assert!(!r.error["message"].as_str().unwrap().contains("discarded"));
}

#[test]
fn ping_stays_fast_while_16_calls_run_and_a_17th_is_refused_at_once() {
    let t = Tree::new();
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let ids: Vec<i64> = (0..16)
        .map(|_| {
            s.send_request(
                "tools/call",
                json!({"name": "run_process", "arguments": {"argv": ["sleep", "3"]}}),
            )
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300)); // let all 16 start
    let mut rtts = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        let r = s.request("ping", json!({}));
        rtts.push(start.elapsed());
        assert_eq!(r["result"], json!({}));
    }
    rtts.sort();
    assert!(
        rtts[2] < Duration::from_millis(100),
        "median ping {:?} while 16 calls run",
        rtts[2]
    );
    let start = Instant::now();
    let extra = s.request(
        "tools/call",
        json!({"name": "run_process", "arguments": {"argv": ["true"]}}),
    );
    assert!(start.elapsed() < Duration::from_secs(2), "refused promptly");
    assert_eq!(parse_reply(&extra, None).code(), "limit_exceeded");
    for id in ids {
        let r = s
            .wait_for(&json!(id), RESPONSE_TIMEOUT)
            .expect("each sleep completes");
        assert_eq!(parse_reply(&r, None).ok()["exit_code"], 0);
    }
}

#[test]
fn progress_carries_the_latest_output_line() {
    let t = Tree::new();
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let id = s.send_request(
        "tools/call",
        json!({"name": "run_process",
               "arguments": {"argv": ["sh", "-c", "echo first; sleep 1.5; echo second; sleep 1.5"]},
               "_meta": {"progressToken": 99}}),
    );
    let mut messages: Vec<Value> = Vec::new();
    loop {
        let m = s.recv(RESPONSE_TIMEOUT).expect("message");
        if m.get("id") == Some(&json!(id)) {
            break;
        }
        if m["method"] == "notifications/progress" {
            assert_eq!(m["params"]["progressToken"], 99);
            messages.push(m["params"]["message"].clone());
        }
    }
    assert!(
        messages.iter().any(|m| m == "first" || m == "second"),
        "{messages:?}"
    );
}

#[test]
fn isolated_environments_hide_the_servers_variables() {
    let t = Tree::new();
    let mut agent = Server::start_with_env(
        t.path(),
        &["--profile", "agent"],
        &[("SECRET_TOKEN", "s3cr3t")],
    );
    let out = agent
        .call(
            "run_process",
            json!({"argv": ["env"], "env": {"EXTRA": "yes"}}),
        )
        .ok()
        .clone();
    let env = out["stdout"].as_str().unwrap();
    assert!(!env.contains("s3cr3t"), "{env}");
    assert!(env.contains("EXTRA=yes"));
    let home = env.lines().find_map(|l| l.strip_prefix("HOME=")).unwrap();
    assert!(home.contains("machine-mcp-"), "private HOME {home}");
    let mut full = Server::start_with_env(t.path(), &[], &[("SECRET_TOKEN", "s3cr3t")]);
    let out = full
        .call("run_process", json!({"argv": ["env"]}))
        .ok()
        .clone();
    assert!(
        out["stdout"]
            .as_str()
            .unwrap()
            .contains("SECRET_TOKEN=s3cr3t")
    );
}

/// Regression (adversarial report F9): a write to a process that does not read its stdin
/// blocked the call until the process exited, holding a call slot. It now gives up after a
/// bounded wait with a `timeout` that says how much was written, and the session stays usable.
#[test]
fn a_write_the_process_never_reads_times_out_and_says_how_much_went_in() {
    let t = Tree::new();
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let r = s.call("start_process", json!({"argv": ["sleep", "60"]}));
    let id = r.ok()["session_id"].as_str().unwrap().to_owned();
    let chunk = "x".repeat(64 * 1024);
    let mut timed_out = None;
    // A pipe holds 64 KiB by default (up to 1 MiB when raised): a few writes fill it.
    for _ in 0..20 {
        let w = s.call("write_process", json!({"session_id": id, "data": chunk}));
        if w.is_error {
            timed_out = Some(w);
            break;
        }
    }
    let w = timed_out.expect("writes to a process that never reads stdin kept succeeding");
    assert_eq!(w.code(), "timeout", "{:?}", w.error);
    assert!(w.error["bytes_written"].is_u64(), "{:?}", w.error);
    // Bytes that went in are an effect on the process.
    assert_eq!(
        w.error["side_effects_started"],
        w.error["bytes_written"].as_u64() != Some(0),
        "{:?}",
        w.error
    );
    let k = s.call("kill_process", json!({"session_id": id, "force": true}));
    assert!(!k.is_error, "{:?}", k.error);
}

/// Regression (adversarial report F8): a descendant that calls `setsid()` leaves the process
/// group and session and, once its parent exits, every parent link — it escaped the timeout, the
/// normal end of the call and the server's shutdown. Descendants are now also found by a marker
/// variable they inherit.
#[test]
fn descendants_that_call_setsid_are_killed_with_the_tree() {
    let t = Tree::new();
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let spawn_escapee = |file: &str| {
        format!("setsid sh -c 'echo $$ > {file}; exec sleep 300' </dev/null >/dev/null 2>&1 &")
    };
    // Timeout: the leader is still running when the tree is terminated.
    let r = s.call(
        "run_process",
        json!({"argv": ["sh", "-c", format!("{} sleep 30", spawn_escapee("a.pid"))], "timeout_seconds": 1}),
    );
    assert_eq!(r.ok()["timed_out"], true);
    let a: u64 = String::from_utf8(t.read("a.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        wait_gone(a, Duration::from_secs(5)),
        "setsid descendant {a} survived a timeout"
    );
    // Normal exit: the leader is gone before its descendant.
    let r = s.call(
        "run_process",
        json!({"argv": ["sh", "-c", format!("{} sleep 0.5", spawn_escapee("b.pid"))]}),
    );
    assert_eq!(r.ok()["exit_code"], 0);
    let b: u64 = String::from_utf8(t.read("b.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        wait_gone(b, Duration::from_secs(5)),
        "setsid descendant {b} survived the call"
    );
    // Shutdown: a session's escaped descendant dies with the server.
    let r = s.call(
        "start_process",
        json!({"argv": ["sh", "-c", format!("{} sleep 300", spawn_escapee("c.pid"))]}),
    );
    assert!(!r.is_error);
    let c: u64 = wait_file(&t.path().join("c.pid"), Duration::from_secs(5))
        .trim()
        .parse()
        .unwrap();
    s.close_stdin();
    assert!(
        wait_gone(c, Duration::from_secs(10)),
        "setsid descendant {c} outlived the server"
    );
}

/// A descendant without the tree's tag (it cleared its environment) that moved to a group or
/// session of its own is a member by its parent link while its parent runs; the signal to the
/// group ended the parent first and hid it, so it outlived a timeout.
#[test]
fn a_descendant_without_the_tag_in_its_own_group_is_killed_while_its_parent_runs() {
    let t = Tree::new();
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let escapes = [
        // Job control: a background job in a process group of its own.
        "set -m; env -i sh -c 'echo $$ > e.pid; exec sleep 300' & sleep 100",
        // A session of its own, in the foreground.
        "setsid env -i sh -c 'echo $$ > e.pid; exec sleep 300'; sleep 100",
    ];
    for script in escapes {
        let _ = std::fs::remove_file(t.path().join("e.pid"));
        let r = s.call(
            "run_process",
            json!({"argv": ["bash", "-c", script], "timeout_seconds": 2}),
        );
        assert_eq!(r.ok()["timed_out"], true, "{script}: {:?}", r.ok());
        let pid: u64 = wait_file(&t.path().join("e.pid"), Duration::from_secs(5))
            .trim()
            .parse()
            .unwrap();
        assert!(
            wait_gone(pid, Duration::from_secs(5)),
            "{script}: the descendant {pid} outlived the timeout"
        );
    }
}

/// A `setsid()` descendant whose command name is not UTF-8 (the kernel takes it from the file
/// name it was started by) was invisible to the scan of `/proc` and outlived the call.
#[test]
fn a_setsid_descendant_with_a_name_that_is_not_utf8_is_killed_with_the_tree() {
    let t = Tree::new();
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let r = s.call(
        "run_process",
        json!({"argv": ["sh", "-c", "ln -s \"$(command -v sleep)\" \"$(printf 'z\\377\\376')\" && \
            setsid sh -c \"echo \\$\\$ > d.pid; exec ./\\$(printf 'z\\377\\376') 300\" </dev/null >/dev/null 2>&1 & \
            sleep 0.5"]}),
    );
    assert_eq!(r.ok()["exit_code"], 0, "{:?}", r.ok());
    let d: u64 = String::from_utf8(t.read("d.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let comm = std::fs::read(format!("/proc/{d}/comm")).unwrap_or_default();
    assert!(
        comm.is_empty() || std::str::from_utf8(&comm).is_err(),
        "the descendant's name is UTF-8: {comm:?}"
    );
    assert!(
        wait_gone(d, Duration::from_secs(5)),
        "the setsid descendant {d} named {comm:?} survived the call"
    );
}

/// Regression (issue 11 item 7): a SIGKILLed server runs no shutdown, so before, everything it
/// had started — pipe and PTY sessions, their children and a grandchild that called `setsid()`
/// — lived on, reparented to init. Now a watchdog process that outlives the server kills every
/// process carrying the server's tree tag once the server is gone.
#[test]
fn nothing_the_server_started_outlives_a_sigkilled_server() {
    let t = Tree::new();
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    // Three generations: the session leader, a child, and a grandchild in a new session.
    let script = |dir: &str| {
        format!(
            "mkdir -p {dir}; sleep 300 & echo $! > {dir}/c.pid; \
             setsid sh -c 'sleep 300 & echo $! > {dir}/gc.pid; wait' </dev/null >/dev/null 2>&1 & \
             echo $$ > {dir}/leader.pid; wait"
        )
    };
    let mut pids = Vec::new();
    for (dir, pty) in [("pipes", false), ("pty", true)] {
        let r = s.call(
            "start_process",
            json!({"argv": ["sh", "-c", script(dir)], "pty": pty}),
        );
        assert!(!r.is_error, "{:?}", r.error);
        for f in ["leader.pid", "c.pid", "gc.pid"] {
            let pid: u64 = wait_file(&t.path().join(dir).join(f), Duration::from_secs(5))
                .trim()
                .parse()
                .unwrap();
            assert!(alive(pid), "{dir}/{f} {pid} is not running");
            pids.push(pid);
        }
    }
    // A run_process call that yielded to a session holds its tree too.
    let r = s.call(
        "run_process",
        json!({"argv": ["sh", "-c", script("yielded")], "yield_after_seconds": 1}),
    );
    assert!(!r.is_error, "{:?}", r.error);
    for f in ["leader.pid", "c.pid", "gc.pid"] {
        let pid: u64 = wait_file(&t.path().join("yielded").join(f), Duration::from_secs(5))
            .trim()
            .parse()
            .unwrap();
        pids.push(pid);
    }
    let server = s.pid().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &server])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    for pid in &pids {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            wait_gone(*pid, left),
            "process {pid} outlived the SIGKILLed server (all: {pids:?})"
        );
    }
}

/// Regression (fresh tester of issue 14): output that is not UTF-8 was counted in the summary as
/// the length of its lossy text (15 bytes for 10) and the substitution went unsaid.
#[test]
fn the_summary_counts_the_bytes_a_process_wrote_even_when_they_are_not_utf8() {
    let ws = Tree::new();
    let mut s = Server::start(ws.path(), &[]);
    let r = s.call(
        "run_process",
        json!({"argv": ["printf", "a\\r\\nb\\000c\\377\\376\\342\\234"]}),
    );
    assert_eq!(r.ok()["stdout_bytes"], 10);
    assert!(
        r.summary().contains("stdout 10 bytes (not UTF-8"),
        "{}",
        r.summary()
    );
}

/// Closing a terminal session's stdin ends its input where the data ended: a partial line is
/// handed over as it is, then end-of-input; nothing is added to it.
#[test]
fn closing_a_terminal_sessions_stdin_adds_nothing_to_its_input() {
    let t = Tree::new();
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let r = s.call(
        "start_process",
        json!({"argv": ["sh", "-c", "stty -echo; echo ready; wc -c"], "pty": true}),
    );
    let id = r.ok()["session_id"].as_str().unwrap().to_owned();
    // Written only once `stty -echo` took effect, so the terminal echoes nothing of it.
    let mut seen = String::new();
    for _ in 0..50 {
        let r = s.call("read_process", json!({"session_id": id, "wait_ms": 200}));
        seen.push_str(r.ok()["stdout"]["data"].as_str().unwrap_or(""));
        if seen.contains("ready") {
            break;
        }
    }
    assert!(seen.contains("ready"), "{seen:?}");
    let w = s.call(
        "write_process",
        json!({"session_id": id, "data": "abc", "close_stdin": true}),
    );
    w.ok();
    let st = s.call(
        "read_process",
        json!({"session_id": id, "wait_ms": 10000, "wait_for_exit": true}),
    );
    let out = st.ok()["stdout"]["data"].as_str().unwrap().to_owned();
    let count = out.rsplit("ready").next().unwrap_or("").trim();
    assert_eq!(count, "3", "{out:?}");
    assert_eq!(st.ok()["exit_code"], 0);
}

/// A terminal size outside the advertised bounds (`rows` 2–1000, `cols` 10–1000) is refused,
/// not silently changed.
#[test]
fn a_terminal_size_outside_its_bounds_is_refused() {
    let t = Tree::new();
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    for (rows, cols) in [(1, 80), (0, 0), (24, 9), (24, 5000), (1001, 80)] {
        let r = s.call(
            "start_process",
            json!({"argv": ["true"], "pty": true, "rows": rows, "cols": cols}),
        );
        assert_eq!(r.code(), "invalid_request", "{rows}x{cols}");
    }
    let edge = s.call(
        "start_process",
        json!({"argv": ["sh", "-c", "stty size"], "pty": true, "rows": 2, "cols": 1000}),
    );
    let id = edge.ok()["session_id"].as_str().unwrap().to_owned();
    let st = s.call(
        "read_process",
        json!({"session_id": id, "wait_ms": 10000, "wait_for_exit": true}),
    );
    assert_eq!(st.ok()["stdout"]["data"].as_str().unwrap().trim(), "2 1000");
}
