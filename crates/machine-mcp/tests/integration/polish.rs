//! Paper cuts a newcomer met in the first hour (issue 17 item 7): each message says what to do.

use std::process::Command;

use serde_json::Value;

use crate::{
    net::{Relay, run_cli},
    util::{bin, logs_code_1006},
};

fn stderr_of(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(bin()).args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_relay_url_without_a_scheme_suggests_https() {
    for given in ["relay.example.com", "localhost:8750"] {
        let (code, err) = stderr_of(&["connect", "--relay", given]);
        assert_eq!(code, Some(2), "{err}");
        assert!(
            err.contains(&format!("did you mean https://{given}?")),
            "{given}: {err}"
        );
    }
    let (code, err) = stderr_of(&["connect", "--relay", "ftp://relay.example.com"]);
    assert_eq!(code, Some(2), "{err}");
}

#[test]
fn a_port_in_use_suggests_listen() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let state = tempfile::tempdir().unwrap();
    let (code, err) = stderr_of(&[
        "relay",
        "serve",
        "--listen",
        &addr,
        "--store",
        state.path().join("relay.db").to_str().unwrap(),
        "--public-url",
        "https://relay.example.com",
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("the port is in use"), "{err}");
    assert!(err.contains("--listen"), "{err}");
}

/// The repository's root (the quick-start script lives under it).
fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `scripts/quickstart.sh --help` says, without building anything, that it exposes the
/// workspace read-only unless told otherwise (`machine-mcp up` defaults to `full`), and lists
/// its options.
#[test]
fn quickstart_help_names_its_default_profile_and_options() {
    let out = Command::new("bash")
        .arg(repo_root().join("scripts/quickstart.sh"))
        .arg("--help")
        .env("PATH", "/usr/bin:/bin") // no cargo needed: nothing is built
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for needle in [
        "--profile review (read-only)",
        "`machine-mcp up` itself defaults to --profile full",
        "--profile full",
        "--listen ADDR",
        "--state-dir DIR",
        "WORKSPACE",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
}

/// One HTTP exchange with the relay: status, Content-Type, `WWW-Authenticate` and body.
fn exchange(
    method: &str,
    url: &str,
    authorization: Option<&str>,
    body: Option<&str>,
) -> (u16, String, String, String) {
    let mut r = ureq::request(method, url)
        .set("Accept", "application/json, text/event-stream")
        .set("Content-Type", "application/json")
        .set("MCP-Protocol-Version", "2025-06-18");
    if let Some(a) = authorization {
        r = r.set("Authorization", a);
    }
    let sent = match body {
        Some(b) => r.send_string(b),
        None => r.call(),
    };
    let resp = match sent {
        Ok(r) | Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{method} {url}: {e}"),
    };
    let header = |name: &str| resp.header(name).unwrap_or_default().to_owned();
    let (status, ct, auth) = (
        resp.status(),
        header("Content-Type"),
        header("WWW-Authenticate"),
    );
    (status, ct, auth, resp.into_string().unwrap_or_default())
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"polish","version":"1"}}}"#;

/// A path the relay does not serve gets a JSON 404 with the endpoint patterns, never the
/// bridges the relay holds; the MCP endpoint's own 404 (an unknown bridge) is unchanged.
#[test]
fn an_unknown_path_says_where_the_mcp_endpoints_are() {
    let relay = Relay::start(&[]);
    relay.add_bridge("secretbridge");
    let public = relay.public();
    for (method, path) in [
        ("GET", "/foo"),
        ("POST", "/mcp"),
        ("GET", "/b/"),
        ("POST", "/b/secretbridge"),
        ("DELETE", "/"),
    ] {
        let body = (method == "POST").then_some(INITIALIZE);
        let (status, ct, _, text) =
            exchange(method, &format!("{}{path}", relay.direct()), None, body);
        assert_eq!(status, 404, "{method} {path}: {text}");
        assert!(ct.starts_with("application/json"), "{method} {path}: {ct}");
        let v: Value = serde_json::from_str(&text).unwrap();
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with(&format!("no MCP endpoint at {path}: ")),
            "{method} {path}: {v}"
        );
        assert_eq!(v["jsonrpc"], "2.0", "{v}");
        assert_eq!(v["error"]["data"]["error"], "not_found", "{v}");
        assert_eq!(
            v["error"]["data"]["mcp_endpoint"],
            format!("{public}/b/<bridge>/mcp"),
            "{v}"
        );
        assert_eq!(
            v["error"]["data"]["server_endpoint"],
            format!("{public}/b/<bridge>/s/<server>/mcp"),
            "{v}"
        );
        if !path.contains("secretbridge") {
            assert!(
                !text.contains("secretbridge"),
                "a bridge name leaked: {text}"
            );
        }
    }
    // The MCP endpoint of a bridge that does not exist keeps its own answer (authorization
    // first, so that a caller cannot probe for bridges).
    let (status, _, _, text) = exchange(
        "POST",
        &format!("{}/b/nosuch/mcp", relay.direct()),
        None,
        Some(INITIALIZE),
    );
    assert_eq!(status, 401, "{text}");
    assert!(!text.contains("no MCP endpoint at"), "{text}");
}

/// A token sent without the `Bearer ` scheme is refused with how to send it, the challenge
/// intact; the scheme's name is case-insensitive (RFC 9110 §11.1).
#[test]
fn a_token_without_the_bearer_scheme_is_told_how_to_send_it() {
    let relay = Relay::start(&[]);
    let code = relay.add_bridge("b1");
    let token = relay.token("b1", "operator");
    let (state, ws) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let _daemon = relay.daemon(state.path(), ws.path(), Some(&code), &[]);
    relay.wait_ready(1);
    let url = format!("{}/b/b1/mcp", relay.direct());
    for header in [token.clone(), format!("Token {token}")] {
        let (status, _, challenge, text) = exchange("POST", &url, Some(&header), Some(INITIALIZE));
        assert_eq!(status, 401, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("use `Authorization: Bearer <token>`"),
            "{v}"
        );
        assert!(challenge.starts_with("Bearer "), "{challenge}");
        assert!(challenge.contains("resource_metadata=\""), "{challenge}");
    }
    let (status, _, _, text) = exchange(
        "POST",
        &url,
        Some(&format!("bearer {token}")),
        Some(INITIALIZE),
    );
    assert_eq!(status, 200, "{text}");
}

/// The stderr of `machine-mcp ARGS` (exit status, stdout, stderr).
fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(bin()).args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The commands `relay bridge add --up` suggests reach the same store: they carry `--up` (and
/// the `--state-dir` given), and pasted as printed they work.
#[test]
fn bridge_add_up_suggests_commands_for_the_same_store() {
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().to_str().unwrap();
    let (code, _, err) = run(&["relay", "bridge", "add", "b2", "--up", "--state-dir", dir]);
    assert_eq!(code, Some(0), "{err}");
    let again = format!("--up --state-dir {dir} --bridge b2");
    for needle in [
        format!("machine-mcp relay token create {again} --role operator"),
        format!("machine-mcp relay account rotate-password {again} owner"),
        "machine-mcp connect --relay <the URL of `machine-mcp up`".to_owned(),
    ] {
        assert!(err.contains(&needle), "{needle:?} missing from:\n{err}");
    }
    let line = err
        .lines()
        .find_map(|l| l.split_once("instead: machine-mcp ").map(|(_, c)| c))
        .unwrap();
    let args: Vec<&str> = line.split_whitespace().collect();
    let (code, out, err) = run(&args);
    assert_eq!(code, Some(0), "{line}: {err}");
    assert!(out.trim().starts_with("mbt_"), "{out}");
    // With --store the hints name that store.
    let store = state.path().join("other.db");
    let store = store.to_str().unwrap();
    let (code, _, err) = run(&["relay", "bridge", "add", "b3", "--store", store]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains(&format!("relay token create --store {store} --bridge b3")),
        "{err}"
    );
}

/// Every `relay … list` prints a header row above its tab-separated rows.
#[test]
fn relay_list_commands_print_a_header_row() {
    let state = tempfile::tempdir().unwrap();
    let store = state.path().join("relay.db");
    let store = store.to_str().unwrap();
    let code = run_cli(&["relay", "bridge", "add", "b1", "--store", store]);
    assert!(!code.is_empty());
    run_cli(&[
        "relay", "token", "create", "--bridge", "b1", "--label", "ci", "--store", store,
    ]);
    for (what, header, rows) in [
        ("bridge", "BRIDGE", 1),
        ("token", "ID\tBRIDGE\tROLE\tSTATE\tLABEL", 1),
        ("account", "NAME\tBRIDGE\tROLE\tSTATE", 1),
        ("device", "KEY_ID\tBRIDGE\tREGISTERED\tSTATE", 0),
        ("client", "CLIENT_ID\tKIND\tSTATE\tGRANTS\tBRIDGES\tNAME", 0),
    ] {
        let out = run_cli(&["relay", what, "list", "--store", store]);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.first().copied(), Some(header), "{what}: {out}");
        assert_eq!(lines.len(), 1 + rows, "{what}: {out}");
        if let Some(row) = lines.get(1) {
            assert_eq!(
                row.split('\t').count(),
                header.split('\t').count(),
                "{what}: {out}"
            );
        }
    }
}

/// A port with nothing listening on it.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A failed enrollment (wrong code; relay down) leaves a new state directory as it was: not
/// there, nor its missing parents; an existing one keeps what it held and stays usable.
#[test]
fn a_failed_enrollment_leaves_no_state_directory() {
    let relay = Relay::start(&[]);
    relay.add_bridge("b1");
    let ws = tempfile::tempdir().unwrap();
    let parent = tempfile::tempdir().unwrap();
    let down = format!("http://127.0.0.1:{}", free_port());
    for url in [relay.public(), down] {
        let new = parent.path().join("new");
        let state = new.join("state");
        let (code, _, err) = run(&[
            "connect",
            "--relay",
            &url,
            "--enroll",
            "mbe_wrong",
            "--workspace",
            ws.path().to_str().unwrap(),
            "--state-dir",
            state.to_str().unwrap(),
        ]);
        assert_ne!(code, Some(0), "{err}");
        assert!(
            !new.exists(),
            "{url}: {} was left behind: {err}",
            new.display()
        );
    }
    // An existing state directory is left with what it held.
    let existing = tempfile::tempdir().unwrap();
    std::fs::write(existing.path().join("keep"), "x").unwrap();
    let (code, _, err) = run(&[
        "connect",
        "--relay",
        &relay.public(),
        "--enroll",
        "mbe_wrong",
        "--workspace",
        ws.path().to_str().unwrap(),
        "--state-dir",
        existing.path().to_str().unwrap(),
    ]);
    assert_ne!(code, Some(0), "{err}");
    assert!(existing.path().join("keep").exists());
    // `up` that cannot listen (a busy port) leaves no new state directory either.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let new = parent.path().join("up-state");
    let (code, _, err) = run(&[
        "up",
        "--listen",
        &addr,
        "--workspace",
        ws.path().to_str().unwrap(),
        "--state-dir",
        new.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("the port is in use"), "{err}");
    assert!(!new.exists(), "{} was left behind", new.display());
}

/// A child whose stderr lines are collected until EOF.
struct Logged {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    log: Vec<String>,
}

impl Logged {
    fn spawn(args: &[&str]) -> Self {
        let mut child = Command::new(bin())
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let err = child.stderr.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in std::io::BufRead::lines(std::io::BufReader::new(err)).map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            lines,
            log: Vec::new(),
        }
    }

    /// Waits (60 s at most) for a stderr line containing `needle`.
    fn wait_for(&mut self, needle: &str) {
        let end = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let left = end.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    let found = l.contains(needle);
                    self.log.push(l);
                    if found {
                        return;
                    }
                }
                Err(_) => panic!("no {needle:?} in:\n{}", self.log.join("\n")),
            }
        }
    }

    /// Sends `signal`, then reads stderr to EOF and waits for the exit status.
    fn stop(mut self, signal: nix::sys::signal::Signal) -> (std::process::ExitStatus, String) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, signal).unwrap();
        self.log.extend(self.lines.iter());
        let status = self.child.wait().unwrap();
        (status, self.log.join("\n"))
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a clean stop must not log: a lost connection (close code 1006) or an ERROR line.
fn assert_clean(what: &str, status: std::process::ExitStatus, log: &str) {
    assert_eq!(status.code(), Some(0), "{what}: {status}\n{log}");
    assert!(!logs_code_1006(log), "{what} logged 1006:\n{log}");
    assert!(
        !log.lines().any(|l| l.contains(" ERROR ")),
        "{what} logged an ERROR:\n{log}"
    );
}

/// SIGTERM and SIGINT stop `up` and `connect` cleanly: exit status 0, no close code 1006 and no
/// ERROR line (the relay's log included), and `connect` says why it stopped.
#[test]
fn a_clean_stop_logs_no_1006_and_no_error() {
    use nix::sys::signal::Signal;
    let ws = tempfile::tempdir().unwrap();
    let workspace = ws.path().to_str().unwrap();
    for signal in [Signal::SIGTERM, Signal::SIGINT] {
        let state = tempfile::tempdir().unwrap();
        let mut up = Logged::spawn(&[
            "up",
            "--listen",
            "127.0.0.1:0",
            "--workspace",
            workspace,
            "--state-dir",
            state.path().to_str().unwrap(),
            "--log-level",
            "debug",
        ]);
        up.wait_for("connected to the relay and ready");
        let (status, log) = up.stop(signal);
        assert_clean(&format!("up ({signal:?})"), status, &log);
    }
    let relay = Relay::start(&[]);
    for signal in [Signal::SIGTERM, Signal::SIGINT] {
        let code = relay.add_bridge("b1");
        let state = tempfile::tempdir().unwrap();
        let mut daemon = Logged::spawn(&[
            "connect",
            "--relay",
            &relay.public(),
            "--enroll",
            &code,
            "--workspace",
            workspace,
            "--state-dir",
            state.path().to_str().unwrap(),
            "--log-level",
            "debug",
        ]);
        daemon.wait_for("connected to the relay and ready");
        relay.wait_ready(1);
        let (status, log) = daemon.stop(signal);
        assert_clean(&format!("connect ({signal:?})"), status, &log);
        assert!(log.contains("asked to stop (signal)"), "{log}");
        // The relay saw the daemon leave, not a connection lost.
        relay.wait_ready(0);
    }
    let log = relay.proc.log();
    assert!(!logs_code_1006(&log), "the relay logged 1006:\n{log}");
    assert!(
        !log.lines().any(|l| l.contains(" ERROR ")),
        "the relay logged an ERROR:\n{log}"
    );
}

// Regression (fresh tester, stop 30 round 2 #8): `doctor | head`, `client-config | head` and
// `relay token list | head` panicked on the closed pipe (exit 101 with a backtrace).
#[test]
fn commands_piped_into_a_reader_that_goes_away_end_quietly() {
    let state = tempfile::tempdir().unwrap();
    let store = state.path().join("relay.db");
    let store = store.to_str().unwrap();
    crate::net::run_cli(&["relay", "bridge", "add", "b1", "--store", store]);
    for _ in 0..3 {
        crate::net::run_cli(&[
            "relay", "token", "create", "--bridge", "b1", "--store", store,
        ]);
    }
    let ws = crate::util::Tree::new();
    for args in [
        vec!["relay", "token", "list", "--store", store],
        vec![
            "client-config",
            "--client",
            "all",
            "--workspace",
            ws.path().to_str().unwrap(),
        ],
        vec![
            "doctor",
            "--state-dir",
            state.path().to_str().unwrap(),
            "--workspace",
            ws.path().to_str().unwrap(),
        ],
    ] {
        let mut child = Command::new(bin())
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_ne!(out.status.code(), Some(101), "{args:?}: {stderr}");
    }
}
