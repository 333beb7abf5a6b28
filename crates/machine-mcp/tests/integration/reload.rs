//! SIGHUP (issue 17 item 6): the daemon re-reads the servers file and the policy flags of its
//! service definition; nothing changed → the link and its sessions are kept; a change → the link
//! is reopened with the new settings; a setting that does not load → the daemon keeps serving
//! what it served.

use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use serde_json::json;

use crate::{
    net::{Client, Proc, Relay},
    util::{NEWER_STAMP, Tree, bin, newer_build},
};

const READY: &str = "connected to the relay and ready";

fn hangup(p: &Proc) {
    let ok = Command::new("kill")
        .args(["-HUP", &p.child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -HUP failed");
}

/// How many times `needle` occurs in the log of `p`.
fn count(p: &Proc, needle: &str) -> usize {
    p.log().matches(needle).count()
}

/// Waits until `needle` occurs `n` times in the log of `p`.
fn wait_count(p: &Proc, needle: &str, n: usize) {
    let end = Instant::now() + Duration::from_secs(30);
    while count(p, needle) < n {
        assert!(
            Instant::now() < end,
            "{needle:?} not seen {n} times:\n{}",
            p.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A servers file carrying `machine-mcp stdio` on `inner` as the upstream `name`.
fn servers_file(ws: &Tree, inner: &Path, names: &[&str]) -> std::path::PathBuf {
    let mut servers = serde_json::Map::new();
    for n in names {
        servers.insert(
            (*n).to_owned(),
            json!({"command": bin(), "args": ["stdio", "--workspace", inner, "--profile", "review"]}),
        );
    }
    ws.write("servers.json", json!({ "mcpServers": servers }).to_string())
}

#[test]
fn a_sighup_with_nothing_changed_keeps_the_link_and_its_sessions() {
    let relay = Relay::start(&[]);
    let code = relay.add_bridge("b1");
    let token = relay.token("b1", "owner");
    let state = tempfile::tempdir().unwrap();
    let ws = Tree::new();
    ws.write("hello.txt", "hello\n");
    let inner = Tree::new();
    let servers = servers_file(&ws, inner.path(), &["inner"]);
    let daemon = relay.daemon(
        state.path(),
        ws.path(),
        Some(&code),
        &["--servers", servers.to_str().unwrap()],
    );
    daemon.wait_log(READY, Duration::from_secs(30));
    relay.wait_ready(1);
    let mut c = Client::new(&format!("{}/b/b1/mcp", relay.direct()), Some(&token));
    c.initialize();
    // The servers file is rewritten with the same content, differently formatted.
    std::fs::write(
        &servers,
        serde_json::to_string_pretty(
            &serde_json::from_slice::<serde_json::Value>(&std::fs::read(&servers).unwrap())
                .unwrap(),
        )
        .unwrap(),
    )
    .unwrap();
    hangup(&daemon);
    daemon.wait_log(
        "SIGHUP: nothing changed; nothing is restarted",
        Duration::from_secs(10),
    );
    // Still alive after a second one, and the session opened before still answers.
    hangup(&daemon);
    wait_count(&daemon, "SIGHUP: nothing changed", 2);
    let r = c.call("read_file", json!({"path": "hello.txt"}));
    assert_eq!(
        r["result"]["structuredContent"]["content"], "hello\n",
        "{r}"
    );
    assert_eq!(
        count(&daemon, READY),
        1,
        "the link was reopened:\n{}",
        daemon.log()
    );
}

#[test]
fn a_sighup_after_the_servers_file_changed_reopens_the_link_with_the_new_servers() {
    let relay = Relay::start(&[]);
    let code = relay.add_bridge("b1");
    let token = relay.token("b1", "owner");
    let state = tempfile::tempdir().unwrap();
    let ws = Tree::new();
    let inner = Tree::new();
    inner.write("inner.txt", "from the upstream\n");
    let servers = servers_file(&ws, inner.path(), &["one"]);
    let daemon = relay.daemon(
        state.path(),
        ws.path(),
        Some(&code),
        &["--servers", servers.to_str().unwrap()],
    );
    daemon.wait_log(READY, Duration::from_secs(30));
    relay.wait_ready(1);
    let two = format!("{}/b/b1/s/two/mcp", relay.direct());
    let c = Client::new(&two, Some(&token));
    let a = c.post(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}));
    assert_eq!(a.status, 404, "no server `two` yet: {a:?}");

    // A file that does not load is refused and the daemon keeps serving.
    std::fs::write(&servers, "{ not json").unwrap();
    hangup(&daemon);
    daemon.wait_log("SIGHUP: cannot reload", Duration::from_secs(10));
    assert!(daemon.log().contains("servers.json"), "{}", daemon.log());
    let mut one = Client::new(&format!("{}/b/b1/s/one/mcp", relay.direct()), Some(&token));
    one.initialize();
    assert_eq!(count(&daemon, READY), 1, "{}", daemon.log());

    servers_file(&ws, inner.path(), &["one", "two"]);
    hangup(&daemon);
    daemon.wait_log("changed=servers", Duration::from_secs(10));
    wait_count(&daemon, READY, 2);
    relay.wait_ready(1);
    let mut c = Client::new(&two, Some(&token));
    c.initialize();
    let r = c.call("read_file", json!({"path": "inner.txt"}));
    assert_eq!(
        r["result"]["structuredContent"]["content"], "from the upstream\n",
        "{r}"
    );
    // The link was closed cleanly, not lost (a lost link is a warning).
    assert_eq!(count(&daemon, " WARN "), 0, "{}", daemon.log());
    // The only error is the refused file's.
    assert_eq!(count(&daemon, " ERROR "), 1, "{}", daemon.log());
}

/// `service install` records the daemon's command line; the service runs it. After a new
/// `install` with another profile, a SIGHUP applies it: new sessions get the new policy. A daemon
/// started by hand on the same state directory keeps its own flags.
#[test]
fn a_sighup_applies_the_policy_of_the_reinstalled_service_definition() {
    let relay = Relay::start(&[]);
    let code = relay.add_bridge("b1");
    let token = relay.token("b1", "owner");
    let state = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let ws = Tree::new();
    let install = |profile: &str| {
        let out = Command::new(bin())
            .args([
                "service",
                "install",
                "--relay",
                &relay.public(),
                "--workspace",
            ])
            .arg(ws.path())
            .arg("--state-dir")
            .arg(state.path())
            .args(["--profile", profile])
            .env("HOME", home.path())
            .env("XDG_CONFIG_HOME", home.path().join("config"))
            .env("MACHINE_MCP_SYSTEMCTL", "true")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    // Enrolled by hand first, as the README says; this daemon is not the service's.
    install("agent");
    let by_hand = relay.daemon(
        state.path(),
        ws.path(),
        Some(&code),
        &["--profile", "review"],
    );
    by_hand.wait_log(READY, Duration::from_secs(30));
    hangup(&by_hand);
    by_hand.wait_log(
        "this daemon was not started by `machine-mcp service`",
        Duration::from_secs(10),
    );
    by_hand.wait_log("SIGHUP: nothing to re-read", Duration::from_secs(10));
    stop(by_hand);

    // The service's daemon: the recorded command line, logging to the recorded file.
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state.path().join("service.json")).unwrap()).unwrap();
    let argv: Vec<String> = serde_json::from_value(manifest["daemon_args"].clone()).unwrap();
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let mut daemon = Proc::spawn(&argv, None);
    let log = state.path().join("logs/daemon.log");
    let logged = |needle: &str, n: usize| {
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.matches(needle).count() >= n {
                return text;
            }
            assert!(Instant::now() < end, "{needle:?} ×{n} not logged:\n{text}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    logged(READY, 1);
    relay.wait_ready(1);
    let url = format!("{}/b/b1/mcp", relay.direct());
    let mut c = Client::new(&url, Some(&token));
    c.initialize();
    assert!(c.tool_names().contains(&"write_file".to_owned()));
    // The same definition: nothing to do.
    hangup(&daemon);
    logged("SIGHUP: nothing changed", 1);

    install("review");
    hangup(&daemon);
    logged("changed=policy", 1);
    let text = logged(READY, 2);
    assert!(text.contains("policy=\"review\""), "{text}");
    relay.wait_ready(1);
    let mut c = Client::new(&url, Some(&token));
    c.initialize();
    let names = c.tool_names();
    assert!(
        names.contains(&"read_file".to_owned()) && !names.contains(&"write_file".to_owned()),
        "{names:?}"
    );
    daemon.kill();
}

/// SIGTERM, then the exit (at most 30 s).
fn stop(mut p: Proc) {
    let ok = Command::new("kill")
        .arg(p.child.id().to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let end = Instant::now() + Duration::from_secs(30);
    while p.child.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < end,
            "the daemon did not stop:\n{}",
            p.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

// Regression (fresh tester, stop 30 #5 and #6): a reload closed the link at once, so a new
// upstream that was slow to start left the daemon offline meanwhile, and a call in flight on the
// built-in server was cut after the 10 s drain. Now the new servers start and calls in flight
// finish while the old link serves on.
#[test]
fn a_reload_starts_the_new_servers_and_lets_calls_finish_before_it_closes_the_link() {
    let relay = Relay::start(&[]);
    let code = relay.add_bridge("b1");
    let token = relay.token("b1", "owner");
    let state = tempfile::tempdir().unwrap();
    let ws = Tree::new();
    let servers = ws.write("servers.json", r#"{"mcpServers": {}}"#);
    let daemon = relay.daemon(
        state.path(),
        ws.path(),
        Some(&code),
        &["--servers", servers.to_str().unwrap(), "--profile", "agent"],
    );
    daemon.wait_log(READY, Duration::from_secs(30));
    relay.wait_ready(1);
    let url = format!("{}/b/b1/mcp", relay.direct());
    let call = crate::net::call_in_flight(&url, &token, ws.path(), "sleep 4; echo finished");
    // An upstream that takes 2 s to start, and one that cannot start at all.
    let slow = format!(
        "sleep 2; exec {} stdio --workspace {} --profile review",
        bin().display(),
        ws.path().display()
    );
    ws.write(
        "servers.json",
        json!({"mcpServers": {
            "slow": {"command": "sh", "args": ["-c", slow]},
            "broken": {"command": "/nonexistent/server"}
        }})
        .to_string(),
    );
    hangup(&daemon);
    daemon.wait_log("changed=servers", Duration::from_secs(10));
    // Meanwhile the link serves: a new session works before the servers are up.
    let mut c = Client::new(&url, Some(&token));
    c.initialize();
    let r = c.call("server_info", json!({}));
    assert!(r["result"].is_object(), "{r}");
    assert_eq!(count(&daemon, READY), 1, "{}", daemon.log());
    // The call in flight finishes on the old link.
    let (r, _) = call.join().unwrap();
    assert_eq!(
        r["result"]["structuredContent"]["stdout"],
        "finished\n",
        "{r}\n{}",
        daemon.log()
    );
    wait_count(&daemon, READY, 2);
    relay.wait_ready(1);
    let mut s = Client::new(&format!("{}/b/b1/s/slow/mcp", relay.direct()), Some(&token));
    s.initialize();
    assert!(s.tool_names().contains(&"read_file".to_owned()));
    assert!(
        daemon
            .log()
            .contains("upstream server left out server=broken"),
        "{}",
        daemon.log()
    );
    assert!(
        !daemon.log().contains("after the drain bound"),
        "{}",
        daemon.log()
    );
}

/// A new binary installed at the path `connect` was started by is swapped in once nothing
/// running would be lost. A call in flight holds the swap back and finishes; then the daemon
/// restarts into the new build as the same process (a service manager keeps tracking it), the
/// session opened before is served by the new version without a new `initialize`, and so is a
/// new session. The one-time `--enroll` code is not passed on.
#[test]
fn a_new_binary_is_swapped_in_once_no_call_is_running() {
    let install = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = install.path().join("machine-mcp");
    std::fs::hard_link(bin(), &path).unwrap();
    let relay = Relay::start(&[]);
    let code = relay.add_bridge("b1");
    let token = relay.token("b1", "owner");
    let state = tempfile::tempdir().unwrap();
    let ws = Tree::new();
    let daemon = relay.daemon_from(
        &path,
        state.path(),
        ws.path(),
        Some(&code),
        &["--profile", "agent"],
        &[],
    );
    daemon.wait_log(READY, Duration::from_secs(30));
    relay.wait_ready(1);
    let url = format!("{}/b/b1/mcp", relay.direct());
    let mut old = Client::new(&url, Some(&token));
    old.initialize();
    let before = old.call("server_info", json!({}));
    let base = before["result"]["structuredContent"]["version"]
        .as_str()
        .unwrap()
        .to_owned();
    let call = crate::net::call_in_flight(&url, &token, ws.path(), "sleep 5; echo finished");
    // An upgrade puts the new file under a new name and renames it over the old one.
    let next = install.path().join(".machine-mcp.next");
    std::fs::hard_link(newer_build(), &next).unwrap();
    std::fs::rename(&next, &path).unwrap();
    daemon.wait_log("a new binary is installed", Duration::from_secs(30));
    daemon.wait_log("upgrade pending", Duration::from_secs(10));
    assert_eq!(count(&daemon, READY), 1, "{}", daemon.log());
    let (r, _) = call.join().unwrap();
    assert_eq!(
        r["result"]["structuredContent"]["stdout"],
        "finished\n",
        "the running call finished on the old build: {r}\n{}",
        daemon.log()
    );
    wait_count(&daemon, READY, 2);
    assert!(
        daemon
            .log()
            .contains("upgrade: restarting into the new binary"),
        "{}",
        daemon.log()
    );
    assert_eq!(
        count(&daemon, "enrolled as bridge"),
        1,
        "the code was not redeemed again:\n{}",
        daemon.log()
    );
    relay.wait_ready(1);
    // The session opened before the upgrade is served by the new build, without a new
    // `initialize`: the relay opens it again on the new instance with the kept one.
    let end = Instant::now() + Duration::from_secs(30);
    let mut id = 100;
    loop {
        id += 1;
        let a = old.post(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "server_info", "arguments": {}}}));
        assert_ne!(a.status, 404, "the session was lost in the upgrade: {a:?}");
        let last = a
            .messages
            .last()
            .cloned()
            .unwrap_or(serde_json::Value::Null);
        if last["result"]["structuredContent"]["version"] == format!("{base}+{NEWER_STAMP}") {
            break;
        }
        assert!(
            Instant::now() < end,
            "the old session is not served by the new build: {last}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut new = Client::new(&url, Some(&token));
    new.initialize();
    let after = new.call("server_info", json!({}));
    assert_eq!(
        after["result"]["structuredContent"]["version"],
        format!("{base}+{NEWER_STAMP}"),
        "{after}"
    );
    let mut daemon = daemon;
    assert!(
        daemon.child.try_wait().unwrap().is_none(),
        "the daemon process (the one the service manager started) still runs"
    );
    // `status` names the build that runs (fresh tester: it said the old one), and the old
    // image left no zombie children behind (its process-tree watchdog was one).
    let status: serde_json::Value = serde_json::from_str(&crate::net::run_cli(&[
        "status",
        "--json",
        "--state-dir",
        state.path().to_str().unwrap(),
    ]))
    .unwrap();
    assert_eq!(
        status["version"],
        format!("{base}+{NEWER_STAMP}"),
        "{status}"
    );
    let pid = daemon.child.id();
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let zombies = zombie_children(pid);
        if zombies.is_empty() {
            break;
        }
        assert!(
            Instant::now() < end,
            "zombie children of the daemon: {zombies:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    stop(daemon);
}

/// The pids of the zombie children of `parent` (Linux `/proc`).
fn zombie_children(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut f = rest.split_whitespace();
        let state = f.next();
        let ppid = f.next().and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent) && state == Some("Z") {
            out.push(pid);
        }
    }
    out
}

/// Starts `machine-mcp connect` running `running` while its argv0 names `path` (as after an
/// install that raced with its start: the file at its path is not the one it runs), enrolling
/// with `code` on `relay`.
fn daemon_named(
    relay: &Relay,
    path: &Path,
    running: &Path,
    state: &Path,
    ws: &Path,
    code: &str,
) -> Proc {
    let public = relay.public();
    let args = [
        "-c",
        r#"exec -a "$0" "$@""#,
        path.to_str().unwrap(),
        running.to_str().unwrap(),
        "connect",
        "--relay",
        &public,
        "--workspace",
        ws.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
        "--heartbeat-ms",
        "1000",
        "--log-level",
        "debug",
        "--enroll",
        code,
        "--profile",
        "agent",
    ];
    Proc::spawn_program(Path::new("/bin/bash"), &args, &[], None)
}

/// The version `server_info` reports through the relay for a new session.
fn served_version(relay: &Relay, token: &str) -> String {
    let mut c = Client::new(&format!("{}/b/b1/mcp", relay.direct()), Some(token));
    c.initialize();
    let r = c.call("server_info", json!({}));
    r["result"]["structuredContent"]["version"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_owned()
}

/// An install directory in Cargo's temporary directory (hard links to the built binaries work
/// there) with `machine-mcp` linked to `file`.
fn install(file: &Path) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("machine-mcp");
    std::fs::hard_link(file, &path).unwrap();
    (dir, path)
}

/// Puts `file` at `path` the way package managers do: a new name renamed over it.
fn replace(path: &Path, file: &Path) {
    let next = path.with_file_name(".machine-mcp.next");
    std::fs::hard_link(file, &next).unwrap();
    std::fs::rename(&next, path).unwrap();
}

// Regression (fresh tester of the daemon swap, H1): a build installed while the daemon was
// being started (there: while it exec'd the build before) was never picked up — the watcher
// took the file at its path for the one it ran. Now it compares with the running executable.
#[test]
fn a_build_installed_while_the_daemon_starts_is_swapped_in() {
    let (_dir, path) = install(newer_build());
    let relay = Relay::start(&[]);
    let code = relay.add_bridge("b1");
    let token = relay.token("b1", "owner");
    let state = tempfile::tempdir().unwrap();
    let ws = Tree::new();
    let daemon = daemon_named(&relay, &path, &bin(), state.path(), ws.path(), &code);
    daemon.wait_log("a new binary is installed", Duration::from_secs(30));
    wait_count(&daemon, READY, 2);
    relay.wait_ready(1);
    let base = runtime_version_of(&bin());
    assert_eq!(
        served_version(&relay, &token),
        format!("{base}+{NEWER_STAMP}")
    );
    assert!(
        daemon
            .log()
            .contains("restarted into the new binary (the same process)"),
        "{}",
        daemon.log()
    );
    stop(daemon);
}

/// `BINARY --version` without the program name.
fn runtime_version_of(binary: &Path) -> String {
    let out = Command::new(binary).arg("--version").output().unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .strip_prefix("machine-mcp ")
        .unwrap()
        .to_owned()
}

// Regression (fresh tester of the daemon swap, H2): a SIGHUP in the moment of the exec ended
// the daemon (the new image had not handled SIGHUP yet, and its default action is to end the
// process). Now SIGHUP is blocked across the exec and handled once the new image can.
#[test]
fn sighups_during_the_swap_do_not_end_the_daemon() {
    let (dir, path) = install(&bin());
    let relay = Relay::start(&[]);
    let code = relay.add_bridge("b1");
    let token = relay.token("b1", "owner");
    let state = tempfile::tempdir().unwrap();
    let ws = Tree::new();
    let mut daemon = relay.daemon_from(
        &path,
        state.path(),
        ws.path(),
        Some(&code),
        &["--profile", "agent"],
        &[],
    );
    daemon.wait_log(READY, Duration::from_secs(30));
    let pid = daemon.child.id().to_string();
    replace(&path, newer_build());
    // SIGHUP every 2 ms from before the swap until the new image is ready.
    let stop_burst = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let burst = {
        let stop_burst = stop_burst.clone();
        std::thread::spawn(move || {
            let mut sent = 0;
            while !stop_burst.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = Command::new("kill").args(["-HUP", &pid]).status();
                sent += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            sent
        })
    };
    let end = Instant::now() + Duration::from_secs(60);
    while count(&daemon, READY) < 2 {
        assert!(
            daemon.child.try_wait().unwrap().is_none(),
            "the daemon ended during the swap:\n{}",
            daemon.log()
        );
        assert!(Instant::now() < end, "no swap:\n{}", daemon.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    stop_burst.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(burst.join().unwrap() > 10);
    assert!(
        daemon.child.try_wait().unwrap().is_none(),
        "{}",
        daemon.log()
    );
    relay.wait_ready(1);
    let base = runtime_version_of(&bin());
    assert_eq!(
        served_version(&relay, &token),
        format!("{base}+{NEWER_STAMP}")
    );
    drop(dir);
    stop(daemon);
}

// Regression (fresh tester of the daemon swap, M2 and L2): a file that answered `--version` but
// could not run the daemon was exec'd and the daemon was gone; a `touch` of the binary (the
// same build) restarted the daemon and ended every session. Now the first is refused after a
// last check and the second restarts nothing.
#[test]
fn a_file_that_cannot_run_the_daemon_or_the_same_build_restarts_nothing() {
    let (dir, path) = install(&bin());
    let relay = Relay::start(&[]);
    let code = relay.add_bridge("b1");
    let token = relay.token("b1", "owner");
    let state = tempfile::tempdir().unwrap();
    let ws = Tree::new();
    let daemon = relay.daemon_from(
        &path,
        state.path(),
        ws.path(),
        Some(&code),
        &["--profile", "agent"],
        &[],
    );
    daemon.wait_log(READY, Duration::from_secs(30));
    let base = runtime_version_of(&bin());
    // The same build again, as a reinstall or a touch leaves it.
    let copy = dir.path().join("copy");
    assert!(
        Command::new("cp")
            .arg(bin())
            .arg(&copy)
            .status()
            .unwrap()
            .success()
    );
    std::fs::rename(&copy, &path).unwrap();
    hangup(&daemon);
    daemon.wait_log("is the version this daemon runs", Duration::from_secs(30));
    // A script that says it is a newer machine-mcp and fails at anything else.
    let script = dir.path().join("script");
    let ok = Command::new("sh")
        .args([
            "-c",
            r#"printf '#!/bin/sh\nif [ "$1" = --version ]; then echo "machine-mcp 9.9.9"; exit 0; fi\nexit 2\n' > "$1" && chmod 755 "$1" && mv "$1" "$2""#,
            "sh",
        ])
        .arg(&script)
        .arg(&path)
        .status()
        .unwrap()
        .success();
    assert!(ok);
    hangup(&daemon);
    daemon.wait_log(
        "upgrade: the new binary cannot be used",
        Duration::from_secs(30),
    );
    assert!(
        daemon.log().contains("connect --help failed"),
        "{}",
        daemon.log()
    );
    let mut daemon = daemon;
    assert!(
        daemon.child.try_wait().unwrap().is_none(),
        "{}",
        daemon.log()
    );
    assert_eq!(count(&daemon, READY), 1, "{}", daemon.log());
    assert_eq!(served_version(&relay, &token), base);
    stop(daemon);
}
