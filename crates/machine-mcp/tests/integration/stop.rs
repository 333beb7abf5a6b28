//! Stopping the long-lived commands with their long-lived connections open: `relay serve`, `up`,
//! `connect` and `stdio` (supervised and `--no-supervisor`). A stop signal (SIGTERM or SIGINT)
//! ends each within its documented drain, frees its port and leaves behind no process its calls
//! started; a second signal during the drain ends it at once (exit status 130).

use std::{
    io::BufRead,
    net::TcpStream,
    path::Path,
    time::{Duration, Instant},
};

use nix::sys::signal::Signal;
use protocol::limits::STOP_SIGNAL_REPEAT_WINDOW;
use serde_json::{Value, json};

use crate::{
    net::{Client, Proc, SseReader, wait_metric_at},
    relay::{Setup, mcp_url, setup},
    stateless::{Modern, SSE_OR_JSON, raw_post, read_some},
    util::{Server, Tree, bin, exit_within, logs_code_1006, wait_file, wait_gone},
};

/// What a stopping process may take beyond its documented drain: the shutdown after the drain
/// (process sessions get their termination grace) on a loaded test machine.
const MARGIN: Duration = Duration::from_secs(10);

/// How soon a second stop signal must end a process: far below every drain it cuts short.
const AT_ONCE: Duration = Duration::from_secs(3);

/// How long after a stop signal its repetition comes in the tests of one stop delivered twice:
/// well within the repeat window, well after the process took the first.
const REPEATED_AFTER: Duration = Duration::from_millis(50);

/// How long the processes a stopped server started may take to be gone: the watchdog's
/// termination grace and its polling.
const CHILDREN_GONE: Duration = Duration::from_secs(10);

/// Sends `signal` to `pid`.
fn signal(pid: u32, signal: Signal) {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap());
    nix::sys::signal::kill(pid, signal).unwrap();
}

/// Sends the stop signal `sig` to `proc` (the command `what`) and asserts that it exits with
/// status 0 within `within`.
fn stops_within(proc: &mut Proc, sig: Signal, within: Duration, what: &str) {
    let t0 = Instant::now();
    signal(proc.child.id(), sig);
    let status = exit_within(&mut proc.child, within);
    eprintln!("{what} stopped on {sig:?} in {:?}", t0.elapsed());
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "{what} did not stop on {sig:?} within {within:?}\n{}",
        proc.log()
    );
}

/// Sends `sig` to `proc` (the command `what`), which took a first stop signal and drains, and
/// asserts that it ends at once with exit status 130. Waits out the repeat window first (a
/// signal within it is the first one delivered twice).
fn second_signal_ends_at_once(proc: &mut Proc, sig: Signal, what: &str) {
    std::thread::sleep(STOP_SIGNAL_REPEAT_WINDOW);
    let t0 = Instant::now();
    signal(proc.child.id(), sig);
    let status = exit_within(&mut proc.child, AT_ONCE);
    eprintln!("{what} ended on a second signal in {:?}", t0.elapsed());
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(130),
        "the second signal did not stop {what}\n{}",
        proc.log()
    );
}

/// Waits until nothing accepts connections on `port` of loopback (a stopping relay closed its
/// listener).
fn wait_listener_closed(port: u16) {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let end = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok() {
        assert!(Instant::now() < end, "the listener is still open");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Asserts that every process of `pids` is gone within [`CHILDREN_GONE`].
fn assert_gone(pids: &[u32], what: &str) {
    for &pid in pids {
        assert!(
            wait_gone(pid.into(), CHILDREN_GONE),
            "{what}: process {pid} was left behind"
        );
    }
}

/// `argv` of `sh -c SCRIPT` after it wrote its pid to `file` (in the workspace).
fn recorded(file: &str, script: &str) -> Value {
    json!(["sh", "-c", format!("echo $$ > {file}; {script}")])
}

/// `argv` of a process that writes its pid to `file`, then sleeps a minute.
fn sleeper(file: &str) -> Value {
    recorded(file, "exec sleep 60")
}

/// The pid a [`recorded`] process wrote to `file`.
fn pid_in(file: &Path) -> u32 {
    wait_file(file, Duration::from_secs(30))
        .trim()
        .parse()
        .unwrap()
}

/// Starts `run_process` of `argv` (a [`recorded`] one writing `file` in `ws`) in the session of
/// `c`, answered on an SSE stream: the stream, its priming event read, and the process's pid.
fn running_call(c: &mut Client, ws: &Path, file: &str, argv: Value) -> (SseReader, u32) {
    let id = c.id();
    let mut post = c.post_stream(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "run_process", "arguments": {"argv": argv, "yield_after_seconds": 60}}}));
    post.next_message(Duration::from_secs(10))
        .expect("the POST stream's priming event");
    (post, pid_in(&ws.join(file)))
}

/// The last message of `stream` before it ends (at most `within`); `Null` if none came.
fn last_message(stream: &mut SseReader, within: Duration) -> Value {
    let end = Instant::now() + within;
    let mut last = Value::Null;
    while let Some((_, m)) = stream.next_message(end.saturating_duration_since(Instant::now())) {
        last = m;
    }
    last
}

/// The long-lived connections of one MCP URL, held open, and the processes its calls run.
struct Held {
    _session: Client,
    _streams: [SseReader; 2],
    _listen: TcpStream,
    /// The process of the call whose POST stream is open, then that of a process session.
    pids: [u32; 2],
}

/// Opens on the MCP URL `url` with `token`: a handshake-era session with its GET stream and a
/// process session, the POST stream of a `run_process` call that keeps running, and a 2026-07-28
/// `subscriptions/listen` stream. `ws` is the workspace the processes run in; `log` the relay's
/// log, shown when something does not open.
fn hold(url: &str, token: &str, ws: &Path, log: &dyn Fn() -> String) -> Held {
    let mut c = Client::new(url, Some(token));
    c.initialize();
    let get = c.get_stream(None).unwrap();
    let started = c.call("start_process", json!({"argv": sleeper("session.pid")}));
    assert_ne!(started["result"]["isError"], true, "{started}");
    // A POST whose SSE answer stays open: a call that runs for a minute.
    let (mut post, call) = running_call(&mut c, ws, "call.pid", sleeper("call.pid"));
    let pids = [call, pid_in(&ws.join("session.pid"))];
    let mut m = Modern::new(url, token);
    let body = m.body(
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": true}}),
    );
    let mut listen = raw_post(url, token, &body, SSE_OR_JSON);
    let mut got = String::new();
    let end = Instant::now() + Duration::from_secs(10);
    while !got.contains("notifications/subscriptions/acknowledged") {
        assert!(Instant::now() < end, "no acknowledgment: {got:?}");
        got.push_str(&read_some(&mut listen));
    }
    let base = url.split("/b/").next().unwrap();
    wait_metric_at(base, "machine_mcp_relay_subscriptions", 1, log);
    assert!(
        post.next_message(Duration::ZERO).is_none(),
        "the POST stream's call is still running"
    );
    Held {
        _session: c,
        _streams: [get, post],
        _listen: listen,
        pids,
    }
}

/// A relay (and its `agent` daemon) with every kind of long-lived connection open on it.
fn relay_with_open_streams() -> (Setup, Held) {
    let s = setup();
    let held = hold(&mcp_url(&s.relay, "b1"), &s.token, s.ws.path(), &|| {
        s.relay.proc.log()
    });
    (s, held)
}

/// Regression: `relay serve` did not stop on SIGTERM or SIGINT while a client held
/// its SSE GET stream (every real client does): it ran on with its port bound and a second
/// signal was ignored. Now it closes its listener at once, drains for at most
/// `RELAY_STOP_DRAIN`, closes what is still open (a GET stream, a POST stream of a running
/// call, a 2026-07-28 listen stream, the daemon's socket) and exits; the port is free
/// afterwards.
#[test]
fn a_stop_signal_ends_the_relay_within_its_drain_while_streams_and_daemon_sockets_are_open() {
    for sig in [Signal::SIGTERM, Signal::SIGINT] {
        let (mut s, _held) = relay_with_open_streams();
        let within = relay::limits::RELAY_STOP_DRAIN + MARGIN;
        stops_within(&mut s.relay.proc, sig, within, "relay serve");
        std::net::TcpListener::bind(("127.0.0.1", s.relay.port)).expect("the port is free again");
    }
}

/// Regression: a second signal during the drain was ignored. Now it stops the relay
/// at once, well before the drain ends.
#[test]
fn a_second_stop_signal_ends_the_relay_at_once() {
    let (mut s, _held) = relay_with_open_streams();
    signal(s.relay.proc.child.id(), Signal::SIGTERM);
    // The first signal was taken: the listener is closed.
    wait_listener_closed(s.relay.port);
    second_signal_ends_at_once(&mut s.relay.proc, Signal::SIGTERM, "relay serve");
}

/// `machine-mcp up` on a free loopback port with its log kept, and what it printed.
struct UpRun {
    proc: Proc,
    url: String,
    token: String,
    port: u16,
    ws: Tree,
    _state: tempfile::TempDir,
}

impl UpRun {
    fn start() -> Self {
        let state = tempfile::tempdir().unwrap();
        let ws = Tree::new();
        let mut proc = crate::ops::up(state.path(), ws.path(), &[]);
        let mut line = String::new();
        std::io::BufReader::new(proc.child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let v: Value = serde_json::from_str(&line)
            .unwrap_or_else(|_| panic!("up printed {line:?}\n{}", proc.log()));
        let url = v["mcp_url"].as_str().unwrap().to_owned();
        let port = url
            .strip_prefix("http://127.0.0.1:")
            .and_then(|r| r.split('/').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("not a loopback URL: {url}"));
        Self {
            proc,
            url,
            token: v["token"].as_str().unwrap().to_owned(),
            port,
            ws,
            _state: state,
        }
    }

    /// Every kind of long-lived connection open on its relay.
    fn hold(&self) -> Held {
        hold(&self.url, &self.token, self.ws.path(), &|| self.proc.log())
    }
}

/// `up` with a session's GET stream, the POST stream of a running call, a process session and
/// a 2026-07-28 listen stream open: SIGTERM and SIGINT each end it within the relay's drain,
/// with exit status 0, its port free and the processes of its calls gone.
#[test]
fn a_stop_signal_ends_up_within_its_drain_with_every_connection_open_and_leaves_no_process() {
    for sig in [Signal::SIGTERM, Signal::SIGINT] {
        let mut up = UpRun::start();
        let held = up.hold();
        let within = relay::limits::RELAY_STOP_DRAIN + MARGIN;
        stops_within(&mut up.proc, sig, within, "up");
        std::net::TcpListener::bind(("127.0.0.1", up.port)).expect("the port is free again");
        assert_gone(&held.pids, &format!("up ({sig:?})"));
    }
}

/// A second stop signal during `up`'s drain ends it at once (exit status 130), and the
/// processes of its calls go with it.
#[test]
fn a_second_stop_signal_ends_up_at_once() {
    let mut up = UpRun::start();
    let held = up.hold();
    signal(up.proc.child.id(), Signal::SIGTERM);
    wait_listener_closed(up.port);
    second_signal_ends_at_once(&mut up.proc, Signal::SIGINT, "up");
    assert_gone(&held.pids, "up (second signal)");
}

/// Regression: `up` logged that it let calls in flight finish for up to 10 s, then exited
/// after 5 s whatever still ran, closing the call's stream without its answer. A call that ends
/// within the drain is answered, then `up` exits.
#[test]
fn a_call_that_ends_within_the_drain_of_up_is_answered_before_it_exits() {
    let mut up = UpRun::start();
    let mut c = Client::new(&up.url, Some(&up.token));
    c.initialize();
    // Past the 5 s `up` gave, within the drain.
    let secs = daemon::limits::DAEMON_STOP_DRAIN.as_secs() - 3;
    let argv = recorded("call.pid", &format!("sleep {secs}; echo finished"));
    let (mut call, _) = running_call(&mut c, up.ws.path(), "call.pid", argv);
    let t0 = Instant::now();
    signal(up.proc.child.id(), Signal::SIGTERM);
    let r = last_message(&mut call, relay::limits::RELAY_STOP_DRAIN + MARGIN);
    assert_eq!(
        r["result"]["structuredContent"]["stdout"],
        "finished\n",
        "the call was cut after {:?}: {r}\n{}",
        t0.elapsed(),
        up.proc.log()
    );
    let status = exit_within(&mut up.proc.child, relay::limits::RELAY_STOP_DRAIN + MARGIN);
    eprintln!("up stopped after its call in {:?}", t0.elapsed());
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{}", up.proc.log());
}

/// A relay and its `connect` daemon with a `run_process` call running through it: the call's
/// session, its answer's stream and its process.
fn connect_with_a_call_running() -> (Setup, Client, SseReader, u32) {
    let s = setup();
    let mut c = Client::new(&mcp_url(&s.relay, "b1"), Some(&s.token));
    c.initialize();
    let (post, pid) = running_call(&mut c, s.ws.path(), "call.pid", sleeper("call.pid"));
    (s, c, post, pid)
}

/// SIGTERM to `connect` with a call running: it ends within its drain with exit status 0,
/// closes its socket with a close frame (the relay logs the daemon stopped, not a lost socket),
/// the client of the running call gets the documented answer (-32003, outcome unknown) by then,
/// and the call's process is gone.
#[test]
fn a_stop_signal_ends_connect_within_its_drain_with_a_call_running_and_a_close_frame() {
    let (mut s, _c, mut call, pid) = connect_with_a_call_running();
    let within = daemon::limits::DAEMON_STOP_DRAIN + MARGIN;
    stops_within(&mut s.daemon, Signal::SIGTERM, within, "connect");
    // Answered by the time the daemon is gone (plus the relay's turn), not after the reconnect
    // grace.
    let r = last_message(&mut call, Duration::from_secs(5));
    assert_eq!(r["error"]["code"], -32003, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("daemon stopped")),
        "{r}"
    );
    s.relay
        .proc
        .wait_log("the daemon stopped; its requests", Duration::from_secs(10));
    let log = s.relay.proc.log();
    assert!(
        !log.contains("daemon socket lost") && !logs_code_1006(&log),
        "the relay saw the socket lost, not closed:\n{log}"
    );
    assert_gone(&[pid], "connect");
}

/// A second stop signal during `connect`'s drain (a call still running) ends it at once (exit
/// status 130), and the call's process goes with it.
#[test]
fn a_second_stop_signal_ends_connect_at_once() {
    let (mut s, _c, _call, pid) = connect_with_a_call_running();
    signal(s.daemon.child.id(), Signal::SIGTERM);
    s.daemon.wait_log(
        "stopping: letting calls in flight finish",
        Duration::from_secs(10),
    );
    second_signal_ends_at_once(&mut s.daemon, Signal::SIGINT, "connect");
    assert_gone(&[pid], "connect (second signal)");
}

/// `machine-mcp stdio` with `args` on `ws`, a process session open and a `run_process` call
/// running: the server and the processes it started (its worker's first when supervised).
fn stdio_busy(ws: &Tree, args: &[&str]) -> (Server, Vec<u32>) {
    let mut s = Server::start(ws.path(), args);
    let mut pids = Vec::new();
    let worker = s.call("server_info", json!({})).ok()["supervisor"]["worker_pid"].as_u64();
    pids.extend(worker.map(|w| u32::try_from(w).unwrap()));
    s.call("start_process", json!({"argv": sleeper("session.pid")}))
        .ok();
    s.send_request(
        "tools/call",
        json!({"name": "run_process", "arguments": {"argv": sleeper("call.pid")}}),
    );
    pids.push(pid_in(&ws.path().join("call.pid")));
    pids.push(pid_in(&ws.path().join("session.pid")));
    (s, pids)
}

/// SIGTERM and SIGINT end `stdio`, supervised and not, with a call running and a process
/// session open, within its bound (the calls are cut, the process sessions get their termination
/// grace) with exit status 0; nothing it started is left.
#[test]
fn a_stop_signal_ends_stdio_promptly_with_a_call_running_and_leaves_no_process() {
    let within = runtime::limits::TERMINATION_GRACE + MARGIN;
    for args in [&[][..], &["--no-supervisor"][..]] {
        for sig in [Signal::SIGTERM, Signal::SIGINT] {
            let ws = Tree::new();
            let (mut s, pids) = stdio_busy(&ws, args);
            let t0 = Instant::now();
            signal(s.pid(), sig);
            let status = s.exit_within(within);
            eprintln!("stdio {args:?} stopped on {sig:?} in {:?}", t0.elapsed());
            assert_eq!(
                status.and_then(|s| s.code()),
                Some(0),
                "stdio {args:?} did not stop on {sig:?}"
            );
            assert_gone(&pids, &format!("stdio {args:?} ({sig:?})"));
        }
    }
}

/// A second stop signal while `stdio`, supervised and not, stops (a process session that
/// ignores SIGTERM holds it for the termination grace) ends it at once, with exit status 130,
/// and the processes it started go with it.
#[test]
fn a_second_stop_signal_ends_stdio_at_once() {
    let grace = runtime::limits::TERMINATION_GRACE;
    for (args, stopping) in [
        (&[][..], "terminated; stopping the worker"),
        (&["--no-supervisor"][..], "interrupted; exiting"),
    ] {
        let ws = Tree::new();
        let logs = tempfile::tempdir().unwrap();
        let log = logs.path().join("stderr.log");
        let mut s = Server::start_binary(&bin(), ws.path(), args, &[], &log);
        let argv = json!([
            "sh",
            "-c",
            "trap '' TERM; echo $$ > session.pid; exec sleep 60"
        ]);
        s.call("start_process", json!({"argv": argv})).ok();
        let pid = pid_in(&ws.path().join("session.pid"));
        let first = Instant::now();
        signal(s.pid(), Signal::SIGTERM);
        let end = Instant::now() + Duration::from_secs(10);
        while !std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains(stopping)
        {
            assert!(
                Instant::now() < end,
                "stdio {args:?} did not take the first signal"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(STOP_SIGNAL_REPEAT_WINDOW);
        signal(s.pid(), Signal::SIGINT);
        let status = s.exit_within(grace + MARGIN);
        let took = first.elapsed();
        eprintln!("stdio {args:?} ended on a second signal {took:?} after the first");
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(130),
            "stdio {args:?}: {status:?}\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        // Before the grace of the first stop could have run out.
        assert!(took < grace, "stdio {args:?} took {took:?}");
        assert_gone(&[pid], &format!("stdio {args:?} (second signal)"));
    }
}

/// Sends `sig` to `pid` twice, [`REPEATED_AFTER`] apart: one stop delivered twice, as GNU
/// `timeout` delivers it (to the command, then to its process group).
fn signal_twice(pid: u32, sig: Signal) {
    signal(pid, sig);
    std::thread::sleep(REPEATED_AFTER);
    signal(pid, sig);
}

/// A stop signal delivered twice within the repeat window is one stop: `up` drains and exits
/// with status 0, not 130.
#[test]
fn a_stop_signal_delivered_twice_is_one_stop_of_up() {
    let mut up = UpRun::start();
    // Open connections keep it draining when the repetition comes.
    let held = up.hold();
    let t0 = Instant::now();
    signal_twice(up.proc.child.id(), Signal::SIGINT);
    let within = relay::limits::RELAY_STOP_DRAIN + MARGIN;
    let status = exit_within(&mut up.proc.child, within);
    eprintln!("up stopped on SIGINT delivered twice in {:?}", t0.elapsed());
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "up on SIGINT delivered twice\n{}",
        up.proc.log()
    );
    assert_gone(&held.pids, "up (SIGINT delivered twice)");
}

/// A stop signal delivered twice within the repeat window is one stop of `stdio`, supervised
/// and not: exit status 0, not 130.
#[test]
fn a_stop_signal_delivered_twice_is_one_stop_of_stdio() {
    for args in [&[][..], &["--no-supervisor"][..]] {
        let ws = Tree::new();
        let mut s = Server::start(ws.path(), args);
        // A process session that ignores SIGTERM keeps it stopping (for the termination grace)
        // when the repetition comes.
        let argv = json!([
            "sh",
            "-c",
            "trap '' TERM; echo $$ > session.pid; exec sleep 60"
        ]);
        s.call("start_process", json!({"argv": argv})).ok();
        let pids = [pid_in(&ws.path().join("session.pid"))];
        signal_twice(s.pid(), Signal::SIGTERM);
        let status = s.exit_within(runtime::limits::TERMINATION_GRACE + MARGIN);
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(0),
            "stdio {args:?} on SIGTERM delivered twice"
        );
        assert_gone(&pids, &format!("stdio {args:?} (SIGTERM delivered twice)"));
    }
}
