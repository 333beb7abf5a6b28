//! `machine-mcp doctor` (issue 17 item 4) against a real `up`, and against a relay and a daemon
//! run apart: green when all is well; the relay stopped, a revoked device key, a bad workspace
//! and a state file others can read each turn the right line red with its fix, and exit 1.

use std::{
    os::unix::fs::PermissionsExt,
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use serde_json::Value;

use crate::{
    net::{Proc, Relay, run_cli},
    util::{Tree, bin},
};

const READY: &str = "connected to the relay and ready";

/// The checks, in the order doctor prints them.
const NAMES: [&str; 12] = [
    "workspace",
    "state-dir",
    "git",
    "relay-dns",
    "relay-tcp",
    "relay-tls",
    "relay-healthz",
    "relay-clock",
    "enrollment",
    "round-trip",
    "service",
    "lock",
];

/// `machine-mcp doctor --state-dir STATE EXTRA...` → (exit code, stdout, stderr).
fn doctor(state: &Path, extra: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin())
        .arg("doctor")
        .arg("--state-dir")
        .arg(state)
        .args(extra)
        .env_remove("MACHINE_MCP_TOKEN")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `doctor --json` → (exit code, the report), checking its shape: the twelve checks in order.
fn doctor_json(state: &Path, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["--json"];
    args.extend_from_slice(extra);
    let (code, out, err) = doctor(state, &args);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    let names: Vec<&str> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, NAMES, "{v:#}");
    assert_eq!(v["ok"], code == 0, "{v:#}");
    (code, v)
}

fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap()
}

/// The names of the checks with `status`.
fn with_status<'a>(report: &'a Value, status: &str) -> Vec<&'a str> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == status)
        .map(|c| c["name"].as_str().unwrap())
        .collect()
}

/// A state directory as the default one is made: owner-only.
fn state_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    d
}

/// `up` on a free port, ready.
fn up(state: &Path, ws: &Path) -> Proc {
    let p = Proc::spawn(
        &[
            "up",
            "--listen",
            "127.0.0.1:0",
            "--state-dir",
            state.to_str().unwrap(),
            "--workspace",
            ws.to_str().unwrap(),
            "--json",
        ],
        None,
    );
    p.wait_log(READY, Duration::from_secs(30));
    p
}

/// A relay and an enrolled `connect` daemon on `state`, ready.
fn enrolled(state: &Path, ws: &Path) -> (Relay, Proc) {
    let relay = Relay::start(&[]);
    let code = relay.add_bridge("b1");
    let daemon = relay.daemon(state, ws, Some(&code), &[]);
    daemon.wait_log(READY, Duration::from_secs(30));
    relay.wait_ready(1);
    (relay, daemon)
}

#[test]
fn status_and_doctor_are_green_against_a_running_up() {
    let state = state_dir();
    let ws = Tree::new();
    let _up = up(state.path(), ws.path());
    let status = Command::new(bin())
        .args(["status", "--state-dir"])
        .arg(state.path())
        .output()
        .unwrap();
    assert!(status.status.success(), "{status:?}");

    let (code, v) = doctor_json(state.path(), &[]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["ok"], true);
    assert!(with_status(&v, "fail").is_empty(), "{v:#}");
    // git may be missing on the machine (a warning); everything else is green, the enrollment
    // and the round trip included (a real tool call through the relay with up's token).
    let not_ok: Vec<&str> = with_status(&v, "warn")
        .into_iter()
        .chain(with_status(&v, "skip"))
        .filter(|n| *n != "git")
        .collect();
    assert!(not_ok.is_empty(), "{v:#}");
    let enrollment = check(&v, "enrollment")["detail"].as_str().unwrap();
    assert!(
        enrollment.contains("the running daemon's link is ready"),
        "{enrollment}"
    );
    let trip = check(&v, "round-trip")["detail"].as_str().unwrap();
    assert!(trip.contains("server_info"), "{trip}");
    assert_eq!(check(&v, "relay-tls")["detail"], "plain HTTP (loopback)");
    assert!(
        check(&v, "service")["detail"]
            .as_str()
            .unwrap()
            .starts_with("not installed")
    );

    let (code, out, _) = doctor(state.path(), &[]);
    assert_eq!(code, 0, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), NAMES.len(), "{out}");
    assert!(lines[0].starts_with("ok   workspace      "), "{out}");
    assert!(
        !out.contains('\x1b'),
        "no colors when stdout is not a terminal: {out:?}"
    );
}

#[test]
fn doctor_is_red_for_a_bad_workspace_and_for_a_state_file_others_can_read() {
    let state = state_dir();
    let ws = Tree::new();
    let _up = up(state.path(), ws.path());

    let missing = ws.path().join("no-such-dir");
    let (code, v) = doctor_json(state.path(), &["--workspace", missing.to_str().unwrap()]);
    assert_eq!(code, 1, "{v:#}");
    assert_eq!(with_status(&v, "fail"), ["workspace"], "{v:#}");
    let w = check(&v, "workspace");
    assert!(
        w["detail"].as_str().unwrap().contains("does not exist"),
        "{w}"
    );
    assert!(
        w["fix"].as_str().unwrap().contains("--workspace DIR"),
        "{w}"
    );

    let file = ws.write("a-file.txt", "x");
    let (code, out, err) = doctor(state.path(), &["--workspace", file.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    let line = out.lines().find(|l| l.contains(" workspace ")).unwrap();
    assert!(line.starts_with("FAIL workspace      "), "{line}");
    assert!(line.contains("is not a directory — fix: "), "{line}");
    assert!(err.contains("1 check failed"), "{err}");

    let token = state.path().join("up/token");
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, v) = doctor_json(state.path(), &[]);
    assert_eq!(code, 1, "{v:#}");
    assert_eq!(with_status(&v, "fail"), ["state-dir"], "{v:#}");
    let s = check(&v, "state-dir");
    assert!(s["detail"].as_str().unwrap().contains("mode 0644"), "{s}");
    let fix = format!("chmod 600 {}", token.display());
    assert!(s["fix"].as_str().unwrap().contains(&fix), "{s}");
}

#[test]
fn with_the_relay_stopped_the_relay_line_is_red_and_what_needs_it_is_skipped() {
    let state = state_dir();
    let ws = Tree::new();
    let (mut relay, daemon) = enrolled(state.path(), ws.path());
    let (code, v) = doctor_json(state.path(), &[]);
    assert_eq!(code, 0, "{v:#}\n{}", daemon.log());
    assert_eq!(check(&v, "enrollment")["status"], "ok", "{v:#}");
    // `connect` keeps no token: the round trip says how to give one.
    let trip = check(&v, "round-trip");
    assert_eq!(trip["status"], "skip", "{trip}");
    assert!(
        trip["detail"].as_str().unwrap().contains("--token"),
        "{trip}"
    );

    relay.proc.kill();
    let (code, v) = doctor_json(state.path(), &[]);
    assert_eq!(code, 1, "{v:#}");
    // The daemon reaches the relay through a proxy, which still accepts TCP: the relay's
    // /healthz (or TCP when the proxy is gone) is the one red line.
    let failed = with_status(&v, "fail");
    assert_eq!(failed.len(), 1, "{v:#}");
    let red = check(&v, failed[0]);
    assert!(matches!(failed[0], "relay-tcp" | "relay-healthz"), "{v:#}");
    assert!(!red["fix"].as_str().unwrap().is_empty(), "{red}");
    let because = format!("skipped: {} failed", failed[0]);
    for name in ["relay-clock", "enrollment", "round-trip"] {
        let c = check(&v, name);
        assert_eq!(c["status"], "skip", "{c}");
        assert_eq!(c["detail"], because.as_str(), "{c}");
    }
    assert_eq!(
        check(&v, "lock")["status"],
        "ok",
        "the daemon still runs: {v:#}"
    );
}

#[test]
fn a_revoked_device_key_turns_the_enrollment_line_red_with_the_re_enroll_fix() {
    let state = state_dir();
    let ws = Tree::new();
    let (relay, mut daemon) = enrolled(state.path(), ws.path());
    let mut list = vec!["relay", "device", "list", "--bridge", "b1"];
    let store = relay.store_args();
    list.extend(store.iter().map(String::as_str));
    let keys = run_cli(&list);
    let key = keys
        .lines()
        .find(|l| l.ends_with("active"))
        .and_then(|l| l.split('\t').next())
        .unwrap_or_else(|| panic!("no active key: {keys}"))
        .to_owned();
    let mut revoke = vec!["relay", "device", "revoke", key.as_str()];
    revoke.extend(store.iter().map(String::as_str));
    run_cli(&revoke);
    // The relay closes the daemon's link; the daemon cannot go on and stops.
    let end = Instant::now() + Duration::from_secs(30);
    while daemon.child.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < end,
            "the daemon kept running:\n{}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let (code, v) = doctor_json(state.path(), &[]);
    assert_eq!(code, 1, "{v:#}");
    assert_eq!(with_status(&v, "fail"), ["enrollment"], "{v:#}");
    let e = check(&v, "enrollment");
    let detail = e["detail"].as_str().unwrap();
    assert!(detail.contains(&key) && detail.contains("refused"), "{e}");
    let fix = e["fix"].as_str().unwrap();
    assert!(fix.starts_with("re-enroll"), "{e}");
    assert!(
        fix.contains("machine-mcp connect --relay") && fix.contains("--enroll CODE"),
        "{e}"
    );
    assert_eq!(
        check(&v, "round-trip")["detail"],
        "skipped: enrollment failed"
    );
    assert_eq!(check(&v, "relay-healthz")["status"], "ok", "{v:#}");
    assert_eq!(
        check(&v, "lock")["status"],
        "warn",
        "no daemon runs any more: {v:#}"
    );
}

// Regression (fresh tester, stop 30 round 2 #3, #4, #7): a state directory that is a file was
// "does not exist"; the fixes named commands without the non-default --state-dir, so copying
// them acted on another state directory; a `git` that hangs hung doctor.
#[test]
fn doctor_names_a_file_as_state_dir_passes_the_state_dir_on_and_survives_a_hung_git() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = crate::util::Tree::new();
    let file = tmp.path().join("sfile");
    std::fs::write(&file, "x").unwrap();
    let (code, v) = doctor_json(&file, &["--workspace", ws.path().to_str().unwrap()]);
    assert_eq!(code, 1);
    let c = check(&v, "state-dir");
    assert_eq!(c["status"], "fail", "{c}");
    assert!(
        c["detail"]
            .as_str()
            .unwrap()
            .contains("is a file, not a directory"),
        "{c}"
    );

    // A fresh (non-default) state directory: every command a fix names carries it.
    let state = tmp.path().join("st");
    let (_, v) = doctor_json(&state, &["--workspace", ws.path().to_str().unwrap()]);
    let shown = format!("--state-dir {}", state.display());
    for c in v["checks"].as_array().unwrap() {
        if let Some(fix) = c["fix"].as_str() {
            for cmd in fix.split('`').skip(1).step_by(2) {
                if cmd.starts_with("machine-mcp ") && !cmd.starts_with("machine-mcp relay ") {
                    assert!(cmd.contains(&shown), "{}: {cmd}", c["name"]);
                }
            }
        }
    }

    // A `git` on PATH that never answers.
    let bin_dir = tmp.path().join("bin");
    std::fs::create_dir(&bin_dir).unwrap();
    let git = bin_dir.join("git");
    std::fs::write(&git, "#!/bin/sh\nexec sleep 100\n").unwrap();
    std::fs::set_permissions(&git, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap());
    let out = Command::new(bin())
        .args([
            "doctor",
            "--json",
            "--workspace",
            ws.path().to_str().unwrap(),
            "--state-dir",
        ])
        .arg(&state)
        .env("PATH", path)
        .env_remove("MACHINE_MCP_TOKEN")
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let c = check(&v, "git");
    assert_eq!(c["status"], "warn", "{c}");
    assert!(
        c["detail"].as_str().unwrap().contains("did not answer"),
        "{c}"
    );
}

// Regression (fresh tester, stop 30 round 2 #9): any 200 on /healthz (a web page) passed, and
// the failure surfaced later on the enrollment line for the wrong reason.
#[test]
fn a_web_page_on_healthz_is_not_a_relay() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            use std::io::{Read, Write};
            let mut s = s;
            let mut buf = [0u8; 2048];
            let _ = s.read(&mut buf);
            let _ = s.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 17\r\nConnection: close\r\n\r\n<html>SPA</html>\n",
            );
        }
    });
    let tmp = tempfile::tempdir().unwrap();
    let ws = crate::util::Tree::new();
    let relay = format!("http://127.0.0.1:{port}");
    let (code, v) = doctor_json(
        &tmp.path().join("st"),
        &[
            "--workspace",
            ws.path().to_str().unwrap(),
            "--relay",
            &relay,
        ],
    );
    assert_eq!(code, 1);
    let c = check(&v, "relay-healthz");
    assert_eq!(c["status"], "fail", "{v:#}");
    assert!(
        c["detail"]
            .as_str()
            .unwrap()
            .contains("not the relay's answer"),
        "{c}"
    );
}
