//! Operations (issue 17): one daemon per state directory, `--takeover`, and `status`.

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use crate::{
    net::{Proc, Relay},
    util::{Tree, alive, bin, wait_gone},
};

const READY: &str = "connected to the relay and ready";

/// A relay, an enrolled daemon on `state`, and its workspace.
fn enrolled(extra: &[&str]) -> (Relay, tempfile::TempDir, Tree, Proc) {
    let relay = Relay::start(&[]);
    let code = relay.add_bridge("b1");
    let state = tempfile::tempdir().unwrap();
    let ws = Tree::new();
    let daemon = relay.daemon(state.path(), ws.path(), Some(&code), extra);
    daemon.wait_log(READY, Duration::from_secs(30));
    relay.wait_ready(1);
    (relay, state, ws, daemon)
}

/// `machine-mcp status [--json] --state-dir STATE` → (exit code, stdout, stderr).
fn status(state: &std::path::Path, json: bool) -> (i32, String, String) {
    let mut c = Command::new(bin());
    c.arg("status").arg("--state-dir").arg(state);
    if json {
        c.arg("--json");
    }
    let out = c.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs a second daemon on `state` until it exits (at most 30 s) → (exit code, stderr).
fn second_daemon(relay: &Relay, state: &std::path::Path, ws: &std::path::Path) -> (i32, String) {
    let mut p = relay.daemon(state, ws, None, &[]);
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(s) = p.child.try_wait().unwrap() {
            // Let the stderr reader catch up.
            std::thread::sleep(Duration::from_millis(200));
            return (s.code().unwrap_or(-1), p.log());
        }
        assert!(
            Instant::now() < end,
            "the second daemon kept running:\n{}",
            p.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_second_daemon_on_one_state_directory_refuses_and_names_the_first() {
    let (relay, state, ws, first) = enrolled(&[]);
    let (code, log) = second_daemon(&relay, state.path(), ws.path());
    assert_eq!(code, 1, "{log}");
    let pid = first.child.id();
    assert!(
        log.contains("another machine-mcp daemon is running"),
        "{log}"
    );
    assert!(log.contains(&format!("PID {pid} ")), "{log}");
    assert!(log.contains("--takeover"), "{log}");
    assert!(alive(u64::from(pid)));
    relay.wait_ready(1);
}

#[test]
fn takeover_replaces_the_daemon_and_status_shows_the_new_one_ready() {
    let (relay, state, ws, first) = enrolled(&[]);
    let old = first.child.id();
    let (code, out, _) = status(state.path(), true);
    assert_eq!(code, 0, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["pid"], json!(old));
    assert_eq!(v["link"]["state"], "ready");
    assert_eq!(v["bridge"], "b1");

    let new = relay.daemon(state.path(), ws.path(), None, &["--takeover"]);
    new.wait_log(READY, Duration::from_secs(30));
    assert!(
        wait_gone(u64::from(old), Duration::from_secs(5)),
        "the old daemon still runs"
    );
    assert!(
        new.log()
            .contains("took over from the daemon that was running (it stopped)"),
        "{}",
        new.log()
    );
    relay.wait_ready(1);
    // The old one stopped cleanly: it drained and closed its link, no error.
    assert!(
        first.log().contains("daemon stopped: asked to stop"),
        "{}",
        first.log()
    );
    let (code, out, _) = status(state.path(), false);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!("pid                  {}", new.child.id())),
        "{out}"
    );
    assert!(out.contains("link                 ready"), "{out}");
}

#[test]
fn a_holder_that_ignores_sigterm_is_killed_after_the_escalation_delay() {
    let (relay, state, ws, first) = enrolled(&["--ignore-sigterm-for-tests"]);
    let old = first.child.id();
    let t0 = Instant::now();
    let new = relay.daemon(state.path(), ws.path(), None, &["--takeover"]);
    new.wait_log("took over", Duration::from_secs(30));
    let took = t0.elapsed();
    assert!(!alive(u64::from(old)), "the old daemon still runs");
    assert!(
        new.log().contains("did not stop on SIGTERM and was killed"),
        "{}",
        new.log()
    );
    // It waited for progress before killing: at least the 2 s escalation delay.
    assert!(took >= Duration::from_secs(2), "killed after {took:?}");
    new.wait_log(READY, Duration::from_secs(30));
    relay.wait_ready(1);
}

// Regression (fresh tester, stop 30 #1): a takeover SIGKILLed a daemon that was inside its
// documented 10 s drain, because a call still running counted as "no progress".
#[test]
fn a_takeover_lets_the_running_daemon_drain_its_calls_in_flight() {
    let (relay, state, ws, _first) = enrolled(&["--profile", "agent"]);
    let token = relay.token("b1", "owner");
    let url = format!("{}/b/b1/mcp", relay.direct());
    let call = crate::net::call_in_flight(&url, &token, ws.path(), "sleep 5; echo finished");
    let new = relay.daemon(state.path(), ws.path(), None, &["--takeover"]);
    new.wait_log(READY, Duration::from_secs(30));
    let (r, _) = call.join().unwrap();
    assert_eq!(
        r["result"]["structuredContent"]["stdout"],
        "finished\n",
        "the call in flight was cut: {r}\nnew daemon:\n{}",
        new.log()
    );
    assert!(
        new.log()
            .contains("took over from the daemon that was running (it stopped)"),
        "{}",
        new.log()
    );
}

// Regression (fresh tester, stop 30 #2): a call still running when a stopping daemon's drain
// ended waited out the relay's 120 s reconnect grace, although the daemon had closed its link
// with 1000 (it is gone, not lost): its client now hears at once.
#[test]
fn a_call_cut_by_a_daemon_stop_is_answered_at_once_not_after_the_reconnect_grace() {
    let (relay, _state, ws, first) = enrolled(&["--profile", "agent"]);
    let token = relay.token("b1", "owner");
    let url = format!("{}/b/b1/mcp", relay.direct());
    let call = crate::net::call_in_flight(&url, &token, ws.path(), "sleep 40");
    let ok = Command::new("kill")
        .arg(first.child.id().to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let t0 = Instant::now();
    let (r, at) = call.join().unwrap();
    let waited = at.duration_since(t0);
    assert!(
        r["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("daemon stopped")),
        "{r}\ndaemon:\n{}\nrelay:\n{}",
        first.log(),
        relay.proc.log()
    );
    // The drain bound (10 s) and the close, far below the 120 s grace.
    assert!(
        waited < Duration::from_secs(60),
        "answered after {waited:?}"
    );
}

/// A live process that is not a daemon (`sleep`), killed on drop.
struct Sleeper(std::process::Child);

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A record in `state` naming `pid` as a `connect` daemon, with its real start time.
fn forged_record(state: &std::path::Path, pid: u32) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let start: u64 = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .nth(19)
        .unwrap()
        .parse()
        .unwrap();
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let record = json!({
        "pid": pid, "start_ticks": start, "boot_id": boot.trim(), "exe": bin(),
        "argv": [bin(), "connect"], "command": "connect", "version": "0.1.0",
        "started_at_unix_ms": 0, "status_addr": null, "stopping_in_flight": null,
    });
    std::fs::write(state.join("daemon.json"), record.to_string()).unwrap();
}

#[test]
fn a_lock_naming_a_live_process_that_is_not_a_daemon_is_never_signalled() {
    let relay = Relay::start(&[]);
    let code = relay.add_bridge("b1");
    let state = tempfile::tempdir().unwrap();
    let ws = Tree::new();
    // Enroll once, then stop, so the state directory is a real one.
    let first = relay.daemon(state.path(), ws.path(), Some(&code), &[]);
    first.wait_log(READY, Duration::from_secs(30));
    drop(first);
    // A reused PID: the lock is held (flock) by `sleep`, and the record names it.
    let lock = state.path().join("daemon.lock");
    let holder = Sleeper(
        Command::new("flock")
            .arg(&lock)
            .args(["sleep", "60"])
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(Duration::from_millis(300));
    forged_record(state.path(), holder.0.id());
    let mut p = relay.daemon(state.path(), ws.path(), None, &["--takeover"]);
    let code = p.child.wait().unwrap().code();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(code, Some(1), "{}", p.log());
    assert!(
        p.log()
            .contains("could not be verified as a machine-mcp daemon"),
        "{}",
        p.log()
    );
    assert!(p.log().contains("it was not signalled"), "{}", p.log());
    assert!(
        alive(u64::from(holder.0.id())),
        "the unrelated process was signalled"
    );
}

#[test]
fn a_stale_lock_is_taken_at_once_and_its_live_pid_is_not_signalled() {
    let relay = Relay::start(&[]);
    let code = relay.add_bridge("b1");
    let state = tempfile::tempdir().unwrap();
    let ws = Tree::new();
    let first = relay.daemon(state.path(), ws.path(), Some(&code), &[]);
    first.wait_log(READY, Duration::from_secs(30));
    drop(first);
    // The record names a live unrelated process, but nobody holds the lock: stale.
    let other = Sleeper(Command::new("sleep").arg("60").spawn().unwrap());
    forged_record(state.path(), other.0.id());
    let t0 = Instant::now();
    let p = relay.daemon(state.path(), ws.path(), None, &[]);
    p.wait_log(READY, Duration::from_secs(30));
    assert!(p.log().contains("no longer running"), "{}", p.log());
    // At once: no takeover wait (the escalation delay alone is 2 s).
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    assert!(!p.log().contains("took over from"), "{}", p.log());
    assert!(alive(u64::from(other.0.id())));
}

#[test]
fn status_is_red_with_exit_1_when_the_relay_is_gone_or_no_daemon_runs() {
    let state = tempfile::tempdir().unwrap();
    let (code, out, err) = status(state.path(), false);
    assert_eq!(code, 1);
    assert!(out.contains("running              no"), "{out}");
    assert!(err.contains("no daemon is running"), "{err}");

    let (mut relay, state, _ws, daemon) = enrolled(&[]);
    relay.proc.kill();
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let (code, out, _) = status(state.path(), true);
        let v: Value = serde_json::from_str(&out).unwrap();
        if code == 1 && v["link"]["state"] == "backing_off" {
            assert!(v["link"]["outage_since_unix_ms"].is_u64(), "{v}");
            assert!(v["link"]["next_attempt_unix_ms"].is_u64(), "{v}");
            break;
        }
        assert!(
            Instant::now() < end,
            "status stayed {code} {v}\n{}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (_, out, err) = status(state.path(), false);
    assert!(out.contains("backing off (next attempt"), "{out}");
    assert!(err.contains("not ready"), "{err}");
}

/// `up` on `state` and `ws`, any free port, plus `extra`.
pub(crate) fn up(state: &std::path::Path, ws: &std::path::Path, extra: &[&str]) -> Proc {
    let mut args = vec![
        "up",
        "--listen",
        "127.0.0.1:0",
        "--state-dir",
        state.to_str().unwrap(),
        "--workspace",
        ws.to_str().unwrap(),
        "--json",
    ];
    args.extend_from_slice(extra);
    Proc::spawn(&args, None)
}

/// Waits up to `within` for `p` to exit → its exit code.
fn exit_code(p: &mut Proc, within: Duration) -> Option<i32> {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if let Some(s) = p.child.try_wait().unwrap() {
            std::thread::sleep(Duration::from_millis(200));
            return s.code();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

// Regression (fresh tester, stop 29 #1): the loser of two simultaneous takeovers waited for a
// lock the winner held, forever, and ignored SIGTERM while it did.
#[test]
fn of_two_simultaneous_takeovers_one_wins_and_the_other_ends() {
    let state = tempfile::tempdir().unwrap();
    let ws = Tree::new();
    let first = up(state.path(), ws.path(), &[]);
    first.wait_log(READY, Duration::from_secs(30));
    let mut a = up(state.path(), ws.path(), &["--takeover"]);
    let mut b = up(state.path(), ws.path(), &["--takeover"]);
    let end = Instant::now() + Duration::from_secs(40);
    let (mut ended, mut running) = (0, 0);
    while Instant::now() < end && ended + running < 2 {
        (ended, running) = (0, 0);
        for p in [&mut a, &mut b] {
            if p.child.try_wait().unwrap().is_some() {
                ended += 1;
            } else if p.log().contains(READY) {
                running += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // Either the second replaced the first winner or it refused naming it; never stuck.
    assert_eq!((ended, running), (1, 1), "a:\n{}\nb:\n{}", a.log(), b.log());
    let (code, _, _) = status(state.path(), false);
    assert_eq!(code, 0);
}

// Regression (fresh tester, stop 29 #2): `--takeover` with a workspace that cannot work, or
// without an enrollment, stopped the running daemon and then failed, leaving none.
#[test]
fn a_takeover_that_cannot_start_leaves_the_running_daemon_alone() {
    let state = tempfile::tempdir().unwrap();
    let ws = Tree::new();
    let first = up(state.path(), ws.path(), &[]);
    first.wait_log(READY, Duration::from_secs(30));
    let missing = ws.path().join("no-such-dir");
    let mut bad = up(state.path(), &missing, &["--takeover"]);
    assert_eq!(
        exit_code(&mut bad, Duration::from_secs(30)),
        Some(1),
        "{}",
        bad.log()
    );
    assert!(
        bad.log().contains("is not a usable directory"),
        "{}",
        bad.log()
    );
    // `connect` on a state directory that is not enrolled (up's daemon lives elsewhere in it).
    let mut unenrolled = Proc::spawn(
        &[
            "connect",
            "--relay",
            "http://127.0.0.1:9",
            "--state-dir",
            state.path().to_str().unwrap(),
            "--workspace",
            ws.path().to_str().unwrap(),
            "--takeover",
        ],
        None,
    );
    assert_eq!(exit_code(&mut unenrolled, Duration::from_secs(30)), Some(1));
    assert!(
        unenrolled.log().contains("not enrolled"),
        "{}",
        unenrolled.log()
    );
    assert!(
        alive(u64::from(first.child.id())),
        "the running daemon was stopped"
    );
    let (code, _, _) = status(state.path(), false);
    assert_eq!(code, 0);
}

// Regression (fresh tester, stop 30 #9): SIGHUP (a closed terminal) made `up` vanish with no
// drain, no log, and its record left behind.
#[test]
fn a_sighup_stops_up_gracefully() {
    let state = tempfile::tempdir().unwrap();
    let ws = Tree::new();
    let mut p = up(state.path(), ws.path(), &[]);
    p.wait_log(READY, Duration::from_secs(30));
    let ok = Command::new("kill")
        .args(["-HUP", &p.child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    assert_eq!(
        exit_code(&mut p, Duration::from_secs(30)),
        Some(0),
        "{}",
        p.log()
    );
    assert!(p.log().contains("SIGHUP"), "{}", p.log());
    assert!(
        !state.path().join("daemon.json").exists(),
        "the record was left behind"
    );
}

/// `machine-mcp ARGS` to completion → (exit code, stdout, stderr).
fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin())
        .args(args)
        .env_remove("MACHINE_MCP_STATE_DIR")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

// Regression (fresh tester, issue 17 follow-up 6): a state directory that is a file gave a
// message that repeated the OS error and said "Fix its permissions".
#[test]
fn a_state_dir_that_is_a_file_is_one_message_naming_it_and_the_fix() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("state");
    std::fs::write(&file, "").unwrap();
    let ws = Tree::new();
    let (s, w) = (file.to_str().unwrap(), ws.path().to_str().unwrap());
    let relay = "http://127.0.0.1:9";
    for args in [
        vec![
            "connect",
            "--relay",
            relay,
            "--state-dir",
            s,
            "--workspace",
            w,
        ],
        vec![
            "connect",
            "--relay",
            relay,
            "--state-dir",
            s,
            "--workspace",
            w,
            "--enroll",
            "X",
        ],
        vec![
            "up",
            "--listen",
            "127.0.0.1:0",
            "--state-dir",
            s,
            "--workspace",
            w,
        ],
        vec!["job", "list", "--state-dir", s],
    ] {
        let (code, _, err) = run(&args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(
            err.contains(&format!("{} is a file, not a directory", file.display())),
            "{args:?}: {err}"
        );
        assert!(
            err.contains("choose another --state-dir"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("permissions"), "{args:?}: {err}");
        assert!(err.matches("os error").count() <= 1, "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
}

// Regression (fresh tester, issue 17 follow-up 5): `status` said "no daemon is running" when
// the state directory could not be read.
#[test]
fn status_on_a_state_dir_it_cannot_read_says_so_with_its_own_exit_status() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("state");
    std::fs::write(&file, "").unwrap();
    let (code, out, err) = status(&file, false);
    assert_eq!(code, 3, "{out}{err}");
    assert!(out.contains("running              unknown"), "{out}");
    assert!(!err.contains("no daemon is running"), "{err}");
    assert!(
        err.contains(&format!("{} is a file, not a directory", file.display())),
        "{err}"
    );
    assert!(err.contains("--state-dir"), "{err}");
    let (code, out, _) = status(&file, true);
    assert_eq!(code, 3);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["running"], "unknown");
    assert!(v["error"].as_str().unwrap().contains("is a file"), "{v}");
    // A state directory inside a file.
    let (code, _, err) = status(&file.join("sub"), false);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("is a file, not a directory"), "{err}");
}

// Regression (fresh tester, issue 17 follow-up 7): with the lock held and `daemon.json`
// corrupt, the table said `running no` while --json said `running: null`, and a takeover
// called the unreadable record "missing".
#[test]
fn a_corrupt_record_under_a_held_lock_is_running_unknown_in_both_forms() {
    let state = tempfile::tempdir().unwrap();
    let lock = state.path().join("daemon.lock");
    let _holder = Sleeper(
        Command::new("flock")
            .arg(&lock)
            .args(["sleep", "60"])
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Held once a non-blocking `flock` fails.
    let end = Instant::now() + Duration::from_secs(10);
    while Command::new("flock")
        .args(["-n".as_ref(), lock.as_os_str(), "true".as_ref()])
        .status()
        .unwrap()
        .success()
    {
        assert!(
            Instant::now() < end,
            "flock did not take {}",
            lock.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::write(state.path().join("daemon.json"), "{not json").unwrap();
    let (code, out, err) = status(state.path(), false);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("running              unknown"), "{out}");
    assert!(out.contains("is unreadable"), "{out}");
    let (_, out, _) = status(state.path(), true);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["running"], "unknown", "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("is unreadable"),
        "{v}"
    );
    let ws = Tree::new();
    let mut p = up(state.path(), ws.path(), &["--takeover"]);
    assert_eq!(
        exit_code(&mut p, Duration::from_secs(30)),
        Some(1),
        "{}",
        p.log()
    );
    assert!(p.log().contains("daemon.json is unreadable"), "{}", p.log());
    assert!(!p.log().contains("missing"), "{}", p.log());
}

// Regression (fresh tester, issue 17 follow-up 7): a stopped daemon's status error repeated
// "Network Error" instead of saying what happened.
#[test]
fn status_of_a_stopped_daemon_says_it_timed_out_once() {
    let state = tempfile::tempdir().unwrap();
    let ws = Tree::new();
    let daemon = up(state.path(), ws.path(), &[]);
    daemon.wait_log(READY, Duration::from_secs(30));
    let pid = daemon.child.id();
    let signal = |s: &str| {
        Command::new("kill")
            .args([s, &pid.to_string()])
            .status()
            .unwrap()
    };
    assert!(signal("-STOP").success());
    let (code, out, err) = status(state.path(), false);
    assert!(signal("-CONT").success());
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains(&format!(
            "timed out talking to PID {pid}'s status endpoint at 127.0.0.1:"
        )),
        "{err}"
    );
    assert!(
        err.contains("it may be stopped (SIGSTOP) or overloaded"),
        "{err}"
    );
    assert!(!err.contains("Network Error"), "{err}");
}

// Regression (fresh tester, issue 17 follow-up 14): `up --takeover --listen ADDR` with ADDR held
// by an unrelated program stopped the running daemon first and then failed to bind.
#[test]
fn a_takeover_onto_a_port_another_program_holds_fails_first_and_leaves_the_daemon() {
    let state = tempfile::tempdir().unwrap();
    let ws = Tree::new();
    let first = up(state.path(), ws.path(), &[]);
    first.wait_log(READY, Duration::from_secs(30));
    let squatter = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = squatter.local_addr().unwrap().to_string();
    let mut p = Proc::spawn(
        &[
            "up",
            "--listen",
            &addr,
            "--state-dir",
            state.path().to_str().unwrap(),
            "--workspace",
            ws.path().to_str().unwrap(),
            "--takeover",
        ],
        None,
    );
    assert_eq!(
        exit_code(&mut p, Duration::from_secs(30)),
        Some(1),
        "{}",
        p.log()
    );
    let port = squatter.local_addr().unwrap().port();
    assert!(
        p.log()
            .contains(&format!("port {port} is held by another program")),
        "{}",
        p.log()
    );
    assert!(p.log().contains("was left running"), "{}", p.log());
    assert!(
        alive(u64::from(first.child.id())),
        "the running daemon was stopped"
    );
    let (code, _, _) = status(state.path(), false);
    assert_eq!(code, 0);
}

// Regression (fresh tester, stop 30 #7): the table said `calls in flight 0` during a call (it
// showed the count of 2026-era single calls; a session's call is a request in flight).
#[test]
fn status_counts_a_sessions_call_in_flight() {
    let (relay, state, ws, _daemon) = enrolled(&["--profile", "agent"]);
    let token = relay.token("b1", "owner");
    let url = format!("{}/b/b1/mcp", relay.direct());
    let call = crate::net::call_in_flight(&url, &token, ws.path(), "sleep 3");
    let (code, out, _) = status(state.path(), false);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("calls in flight      1"), "{out}");
    call.join().unwrap();
}

// Regression (fresh tester, stop 30 round 2 #1): `connect` on a state directory `up` holds said
// "not enrolled" instead of naming the daemon that runs there (with --takeover too).
#[test]
fn connect_on_a_state_directory_up_holds_names_it() {
    let state = tempfile::tempdir().unwrap();
    let ws = Tree::new();
    let first = up(state.path(), ws.path(), &[]);
    first.wait_log(READY, Duration::from_secs(30));
    let pid = first.child.id();
    for extra in [&[][..], &["--takeover"][..]] {
        let mut args = vec![
            "connect",
            "--relay",
            "http://127.0.0.1:9",
            "--state-dir",
            state.path().to_str().unwrap(),
            "--workspace",
            ws.path().to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let (code, _, err) = run(&args);
        assert_eq!(code, 1, "{extra:?}: {err}");
        assert!(err.contains(&format!("PID {pid} ")), "{extra:?}: {err}");
        assert!(err.contains(" up "), "{extra:?}: {err}");
    }
    assert!(alive(u64::from(pid)), "up was stopped");
}
