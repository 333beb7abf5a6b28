//! Fault injection between real processes (issue 15): a TCP [`Proxy`] drops, resets, stalls or
//! delays the client's SSE stream or the daemon link while calls run, and each scenario checks
//! what a user relies on (DESIGN §4 SSE, §5.8, invariants 4–7): a resumed stream loses and
//! repeats no event, every call completes exactly once or fails with an explicit error (never
//! hangs, never runs twice), and afterwards the relay's pending-call gauges, daemon sockets, open
//! file descriptors, threads and memory are back to their baseline.
//!
//! Timing flags (hidden: `--reconnect-grace-ms`, `--heartbeat-ms`, `--liveness-ms`) keep the link
//! timers short; the bounds asserted are contract bounds (the grace, the call timeout) with
//! generous slack, not performance figures.

use std::{
    collections::BTreeMap,
    path::Path,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use crate::{
    net::{Client, Fault, Proc, Proxy, Relay},
    relay::mcp_url,
    util::Tree,
};

/// Reconnect grace of these tests' relays and daemons (ms).
const GRACE_MS: u64 = 6000;
/// Relay-side liveness timeout (ms): a half-open link is noticed from the relay side too.
const LIVENESS_MS: u64 = 3000;

/// What the relay process holds, to compare before and after a scenario.
#[derive(Debug, Clone, Copy)]
struct Footprint {
    sockets: usize,
    threads: usize,
    rss_kib: u64,
}

impl Footprint {
    fn of(pid: u32) -> Self {
        let sockets = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| {
                std::fs::read_link(e.path())
                    .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
            })
            .count();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let field = |name: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap()
        };
        Self {
            sockets,
            threads: field("Threads:") as usize,
            rss_kib: field("VmRSS:"),
        }
    }
}

/// The relay's gauges of pending work and links, plus its process footprint.
#[derive(Debug, Clone)]
struct Baseline {
    gauges: BTreeMap<&'static str, i64>,
    footprint: Footprint,
}

const GAUGES: [&str; 6] = [
    "machine_mcp_relay_sessions",
    "machine_mcp_relay_inflight_requests",
    "machine_mcp_relay_detached_requests",
    "machine_mcp_relay_subscriptions",
    "machine_mcp_relay_daemon_sockets{state=\"candidate\"}",
    "machine_mcp_relay_daemon_sockets{state=\"ready\"}",
];

/// Most SSE streams a bridge keeps (DESIGN §7: 64 per bridge), open or kept for replay.
const STREAMS_PER_BRIDGE: i64 = 64;
/// How much more resident memory than at the baseline the relay may keep after a scenario: a
/// generous bound that catches per-call leaks (hundreds of calls) but not allocator noise.
const RSS_SLACK_KIB: u64 = 48 * 1024;
/// Threads the relay may have beyond the baseline (tokio's blocking pool winds down lazily).
const THREADS_SLACK: usize = 4;

impl Baseline {
    fn take(relay: &Relay) -> Self {
        Self {
            gauges: GAUGES.iter().map(|g| (*g, relay.metric(g))).collect(),
            footprint: Footprint::of(relay.proc.child.id()),
        }
    }

    /// Waits (30 s) until every gauge is back to its baseline value and the relay holds no more
    /// sockets than then; then checks threads, memory and the SSE stream bound.
    fn wait_back(&self, relay: &Relay, what: &str) {
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            let now = Baseline::take(relay);
            let gauges_back = now.gauges == self.gauges;
            let sockets_back = now.footprint.sockets <= self.footprint.sockets;
            let threads_back = now.footprint.threads <= self.footprint.threads + THREADS_SLACK;
            if gauges_back && sockets_back && threads_back {
                assert!(
                    now.footprint.rss_kib <= self.footprint.rss_kib + RSS_SLACK_KIB,
                    "{what}: relay RSS {} KiB, baseline {} KiB",
                    now.footprint.rss_kib,
                    self.footprint.rss_kib
                );
                let streams = relay.metric("machine_mcp_relay_streams");
                assert!(
                    (0..=STREAMS_PER_BRIDGE).contains(&streams),
                    "{what}: {streams} SSE streams kept for one bridge"
                );
                return;
            }
            assert!(
                Instant::now() < end,
                "{what}: the relay did not return to its baseline within 30 s\n\
                 baseline {self:?}\nnow      {now:?}\nrelay log:\n{}",
                tail(&relay.proc.log(), 60)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

fn tail(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A relay with short link timers, bridge `b1`, an owner token and an `agent` daemon that
/// reaches the relay through the relay's proxy.
struct Faulty {
    relay: Relay,
    daemon: Proc,
    state: tempfile::TempDir,
    ws: Tree,
    token: String,
    daemon_extra: Vec<String>,
}

impl Faulty {
    fn start() -> Self {
        Self::start_with(&[])
    }

    fn start_with(daemon_extra: &[&str]) -> Self {
        let grace = GRACE_MS.to_string();
        let liveness = LIVENESS_MS.to_string();
        let relay = Relay::start(&["--reconnect-grace-ms", &grace, "--liveness-ms", &liveness]);
        let code = relay.add_bridge("b1");
        let token = relay.token("b1", "owner");
        let state = tempfile::tempdir().unwrap();
        let ws = Tree::new();
        ws.write("hello.txt", "hello\n");
        let mut extra: Vec<String> = ["--profile", "agent", "--reconnect-grace-ms", &grace]
            .iter()
            .map(|a| (*a).to_owned())
            .collect();
        extra.extend(daemon_extra.iter().map(|a| (*a).to_owned()));
        let args: Vec<&str> = extra.iter().map(String::as_str).collect();
        let daemon = relay.daemon(state.path(), ws.path(), Some(&code), &args);
        relay.wait_ready(1);
        daemon.wait_log("connected to the relay and ready", Duration::from_secs(30));
        Self {
            relay,
            daemon,
            state,
            ws,
            token,
            daemon_extra: extra,
        }
    }

    fn client(&self) -> Client {
        let mut c = Client::new(&mcp_url(&self.relay, "b1"), Some(&self.token));
        c.timeout = Duration::from_secs(60);
        c
    }

    fn logs(&self) -> String {
        format!(
            "relay log:\n{}\ndaemon log:\n{}",
            tail(&self.relay.proc.log(), 80),
            tail(&self.daemon.log(), 80)
        )
    }
}

/// `<stream>-<n>` → (stream, n).
fn event_seq(id: &str) -> (String, u64) {
    let (stream, n) = id.rsplit_once('-').expect("event id <stream>-<n>");
    (stream.to_owned(), n.parse().expect("event sequence number"))
}

#[test]
fn a_client_stream_dropped_mid_call_resumes_with_last_event_id_and_loses_and_repeats_nothing() {
    let f = Faulty::start();
    let base = Baseline::take(&f.relay);
    let front = Proxy::to(f.relay.port);
    let url = format!("http://127.0.0.1:{}/b/b1/mcp", front.port);
    let mut c = Client::new(&url, Some(&f.token));
    c.initialize();
    let script = "echo run >> runs.log; for i in $(seq 1 16); do echo line$i; sleep 0.25; done";
    let mut first = c.post_stream(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "run_process", "arguments": {"argv": ["sh", "-c", script]},
                   "_meta": {"progressToken": "p7"}}}));
    let mut events: Vec<(String, Value)> = Vec::new();
    // A few progress notifications arrive, then the client's connection drops.
    while events
        .iter()
        .filter(|(_, m)| m["method"] == "notifications/progress")
        .count()
        < 3
    {
        let (id, m) = first
            .next_message(Duration::from_secs(20))
            .unwrap_or_else(|| panic!("progress before the drop\n{}", f.logs()));
        assert_ne!(m["id"], 7, "the call ended before the drop: lengthen it");
        events.push((id.expect("every event has an id"), m));
    }
    // Each request of the client opens its own connection: the newest carries the stream.
    let stream_conn = *front
        .connections()
        .last()
        .expect("the POST stream's connection");
    assert!(
        stream_conn.down > 0,
        "the stream's connection carried the events"
    );
    assert!(front.fault_conn(stream_conn.id, Fault::Drop));
    // What was in flight may still arrive; then the stream ends.
    while let Some((id, m)) = first.next_message(Duration::from_secs(20)) {
        events.push((id.expect("every event has an id"), m));
    }
    let before = events.len();
    let last = events.last().unwrap().0.clone();
    let mut replay = c.get_stream(Some(&last)).expect("GET with Last-Event-ID");
    while let Some((id, m)) = replay.next_message(Duration::from_secs(30)) {
        events.push((id.expect("every replayed event has an id"), m));
    }
    assert!(
        events.len() > before,
        "the replay delivered nothing\n{}",
        f.logs()
    );
    // One stream, events 0..=n each exactly once and in order, the response once and last.
    let seqs: Vec<(String, u64)> = events.iter().map(|(id, _)| event_seq(id)).collect();
    assert!(seqs.iter().all(|(s, _)| *s == seqs[0].0), "{seqs:?}");
    let ns: Vec<u64> = seqs.iter().map(|(_, n)| *n).collect();
    assert_eq!(
        ns,
        (0..ns.len() as u64).collect::<Vec<_>>(),
        "lost or repeated events"
    );
    let responses: Vec<&Value> = events
        .iter()
        .map(|(_, m)| m)
        .filter(|m| m["id"] == 7)
        .collect();
    assert_eq!(responses.len(), 1, "{events:?}");
    let result = &events.last().unwrap().1;
    assert_eq!(result["id"], 7, "the response is the last event");
    let out = &result["result"]["structuredContent"];
    assert_eq!(out["exit_code"], 0, "{result}");
    assert!(
        out["stdout"].as_str().unwrap().ends_with("line16\n"),
        "{result}"
    );
    assert_eq!(
        std::fs::read_to_string(f.ws.path().join("runs.log")).unwrap(),
        "run\n",
        "the replay did not re-run the call"
    );
    assert_eq!(c.delete(), 200);
    base.wait_back(&f.relay, "after the client stream drop");
}

/// How one call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// The process ran and its result arrived.
    Done,
    /// An explicit error: a JSON-RPC error or a tool error, with its code.
    Failed(String),
}

/// Calls run by `workers` clients in a loop while `faults` runs; each call appends its tag to
/// `calls.log` first. Checks exactly-once (a result means one run, an error at most one run,
/// nothing ever twice), that no call hangs (each client's HTTP timeout is 60 s, far above the
/// grace), and that a call after the faults succeeds. Returns the outcomes.
fn calls_under(f: &Faulty, workers: usize, faults: impl FnOnce()) -> Vec<(String, Outcome)> {
    let stop = Arc::new(AtomicBool::new(false));
    let outcomes: Arc<Mutex<Vec<(String, Outcome)>>> = Arc::default();
    let next = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for w in 0..workers {
        let (stop, outcomes, next) = (stop.clone(), outcomes.clone(), next.clone());
        let mut c = f.client();
        handles.push(std::thread::spawn(move || {
            c.initialize();
            while !stop.load(Ordering::SeqCst) {
                let tag = format!("w{w}-{}", next.fetch_add(1, Ordering::SeqCst));
                let (status, o) = one_call(&c, &tag);
                if status == 404 {
                    // The session ended with its instance (grace expired): re-initialize.
                    c.session = None;
                    c.initialize();
                }
                outcomes.lock().unwrap().push((tag, o));
            }
            c.delete();
        }));
    }
    faults();
    f.relay.wait_ready(1);
    stop.store(true, Ordering::SeqCst);
    for h in handles {
        h.join()
            .expect("a worker panicked (a call hung or broke the protocol)");
    }
    // The link is back: a call now succeeds.
    let mut c = f.client();
    c.initialize();
    let (_, o) = one_call(&c, "after");
    assert_eq!(o, Outcome::Done, "a call after the faults\n{}", f.logs());
    c.delete();
    let outcomes = outcomes.lock().unwrap().clone();
    let log = std::fs::read_to_string(f.ws.path().join("calls.log")).unwrap_or_default();
    let mut runs: BTreeMap<&str, usize> = BTreeMap::new();
    for l in log.lines() {
        *runs.entry(l).or_default() += 1;
    }
    for (tag, o) in &outcomes {
        let n = runs.get(tag.as_str()).copied().unwrap_or(0);
        match o {
            Outcome::Done => assert_eq!(n, 1, "{tag} returned a result but ran {n} times"),
            Outcome::Failed(_) => assert!(n <= 1, "{tag} failed and ran {n} times"),
        }
    }
    assert!(runs.values().all(|n| *n == 1), "a call ran twice: {runs:?}");
    assert!(
        runs.keys()
            .all(|t| *t == "after" || outcomes.iter().any(|(o, _)| o == t)),
        "a run nobody asked for"
    );
    eprintln!("faults: {} calls: {}", outcomes.len(), summarize(&outcomes));
    outcomes
}

fn summarize(outcomes: &[(String, Outcome)]) -> String {
    let mut by: BTreeMap<String, usize> = BTreeMap::new();
    for (_, o) in outcomes {
        let k = match o {
            Outcome::Done => "done".to_owned(),
            Outcome::Failed(code) => code.clone(),
        };
        *by.entry(k).or_default() += 1;
    }
    format!("{by:?}")
}

/// One `run_process` that records `tag` in `calls.log`, then takes half a second. Returns the
/// HTTP status and the outcome; panics on anything that is neither a result nor an explicit
/// error (a hang ends in the client's timeout, which panics).
fn one_call(c: &Client, tag: &str) -> (u16, Outcome) {
    let script = format!("echo {tag} >> calls.log; sleep 0.5; echo ok");
    let started = Instant::now();
    let a = c.post(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "run_process", "arguments": {"argv": ["sh", "-c", script]}}}));
    if a.status == 404 {
        return (404, Outcome::Failed("http 404".into()));
    }
    if a.status == 503 {
        // Refused before it was sent (the link it was routed to was closing): a JSON-RPC error
        // the caller can retry.
        let e = &a.messages.first().unwrap_or_else(|| panic!("{tag}: {a:?}"))["error"];
        assert_eq!(e["code"], -32000, "{tag}: {a:?}");
        assert!(
            e["message"]
                .as_str()
                .is_some_and(|m| m.ends_with("retry shortly")),
            "{tag}: {a:?}"
        );
        return (503, Outcome::Failed("http 503".into()));
    }
    assert_eq!(a.status, 200, "{tag}: {a:?}");
    let last = a
        .messages
        .iter()
        .rfind(|m| m.get("id").is_some())
        .unwrap_or_else(|| {
            panic!(
                "{tag}: the stream ended without a response after {:?} (the client gives up \
                 at {:?}): {a:?}",
                started.elapsed(),
                c.timeout
            )
        });
    if let Some(e) = last.get("error") {
        return (200, Outcome::Failed(format!("rpc {}", e["code"])));
    }
    if last["result"]["isError"] == true {
        let text = last["result"]["content"][0]["text"].as_str().unwrap_or("");
        let code = serde_json::from_str::<Value>(text)
            .ok()
            .and_then(|e| e["code"].as_str().map(str::to_owned))
            .unwrap_or_else(|| panic!("{tag}: a tool error without a code: {last}"));
        return (200, Outcome::Failed(format!("tool {code}")));
    }
    let out = &last["result"]["structuredContent"];
    assert_eq!(out["stdout"], "ok\n", "{tag}: {last}");
    (200, Outcome::Done)
}

/// Waits until the relay has counted more daemon reconnects than `before`.
fn wait_reconnect(f: &Faulty, before: i64) {
    let end = Instant::now() + Duration::from_secs(30);
    while f.relay.metric("machine_mcp_relay_daemon_reconnects_total") <= before {
        assert!(
            Instant::now() < end,
            "the daemon never came back\n{}",
            f.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn calls_over_a_dropped_and_a_reset_daemon_link_complete_exactly_once() {
    let f = Faulty::start();
    let base = Baseline::take(&f.relay);
    let proxy = &f.relay.proxy;
    calls_under(&f, 4, || {
        for fault in [Fault::Drop, Fault::Reset, Fault::Drop] {
            std::thread::sleep(Duration::from_millis(1500));
            let r = f.relay.metric("machine_mcp_relay_daemon_reconnects_total");
            // One fault on the live link; the daemon's reconnect goes through.
            for c in proxy.connections() {
                proxy.fault_conn(c.id, fault);
            }
            wait_reconnect(&f, r);
        }
        std::thread::sleep(Duration::from_millis(1500));
    });
    base.wait_back(&f.relay, "after drops and resets");
}

#[test]
fn calls_over_a_stalled_half_open_daemon_link_complete_exactly_once_or_fail_explicitly() {
    let f = Faulty::start();
    let base = Baseline::take(&f.relay);
    calls_under(&f, 4, || {
        std::thread::sleep(Duration::from_millis(1500));
        let r = f.relay.metric("machine_mcp_relay_daemon_reconnects_total");
        // Everything stalls, the daemon's next attempts too, for longer than both sides'
        // silence timeouts; then traffic flows again.
        f.relay.proxy.fault(Fault::Stall);
        std::thread::sleep(Duration::from_millis(LIVENESS_MS + 2000));
        f.relay.proxy.resume();
        wait_reconnect(&f, r);
        std::thread::sleep(Duration::from_millis(1500));
    });
    base.wait_back(&f.relay, "after a half-open link");
}

#[test]
fn calls_over_a_daemon_link_flapping_for_two_minutes_complete_exactly_once_or_fail_explicitly() {
    let f = Faulty::start();
    let base = Baseline::take(&f.relay);
    let proxy = &f.relay.proxy;
    let outcomes = calls_under(&f, 4, || {
        let end = Instant::now() + Duration::from_secs(120);
        let cycle = [
            Fault::Drop,
            Fault::Delay(Duration::from_millis(200)),
            Fault::Reset,
            Fault::Stall,
        ];
        let mut i = 0;
        while Instant::now() < end {
            // 2.5 s up, then 1.5 s of one fault on the link and on every attempt to reconnect.
            std::thread::sleep(Duration::from_millis(2500));
            proxy.fault(cycle[i % cycle.len()]);
            std::thread::sleep(Duration::from_millis(1500));
            proxy.resume();
            i += 1;
        }
    });
    assert!(
        outcomes.iter().any(|(_, o)| *o == Outcome::Done),
        "no call completed in two minutes of flapping"
    );
    base.wait_back(&f.relay, "after two minutes of flapping");
}

#[test]
fn a_daemon_killed_mid_call_fails_the_call_within_the_grace_and_a_new_process_serves_new_sessions()
{
    let mut f = Faulty::start();
    let base = Baseline::take(&f.relay);
    let mut c = f.client();
    c.initialize();
    let mut stream = c.post_stream(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "run_process", "arguments": {"argv": ["sh", "-c", "echo started > started; sleep 30"]}}}));
    wait_file(&f.ws.path().join("started"));
    f.daemon.kill(); // SIGKILL
    let killed = Instant::now();
    let mut last = Value::Null;
    while let Some((_, m)) = stream.next_message(Duration::from_secs(60)) {
        last = m;
    }
    let took = killed.elapsed();
    assert_eq!(last["id"], 3, "{last}\n{}", f.logs());
    assert_eq!(
        last["error"]["code"], -32003,
        "an explicit 'outcome unknown': {last}"
    );
    let bound = Duration::from_millis(GRACE_MS) + Duration::from_secs(10);
    assert!(took < bound, "failed after {took:?}, grace {GRACE_MS} ms");
    // The instance's sessions are gone: 404, the cue to re-initialize.
    let a = c.post(&json!({"jsonrpc": "2.0", "id": 4, "method": "ping"}));
    assert_eq!(a.status, 404, "{a:?}");
    // A new daemon process on the same state: a clean initialize works and calls are served.
    let args: Vec<&str> = f.daemon_extra.iter().map(String::as_str).collect();
    f.daemon = f.relay.daemon(f.state.path(), f.ws.path(), None, &args);
    f.relay.wait_ready(1);
    c.session = None;
    c.initialize();
    let r = c.call("read_file", json!({"path": "hello.txt"}));
    assert_eq!(
        r["result"]["structuredContent"]["content"], "hello\n",
        "{r}"
    );
    assert_eq!(c.delete(), 200);
    base.wait_back(&f.relay, "after a killed daemon and a new one");
}

fn wait_file(p: &Path) {
    let end = Instant::now() + Duration::from_secs(20);
    while !p.exists() {
        assert!(Instant::now() < end, "{} never appeared", p.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}
