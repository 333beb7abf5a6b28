//! Delegation to agent CLIs (issue 19), driving the real binary over stdio with the stub CLIs of
//! `tests/fixtures/agents` first on `PATH`, a config enabling them, and a temporary state
//! directory.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use crate::util::{Reply, Server, bin};

/// How long a test waits for a stub's run to reach a state.
const WAIT: Duration = Duration::from_secs(30);

/// A workspace, a state directory, a config home enabling every agent, and the stubs' files.
struct Setup {
    _root: tempfile::TempDir,
    workspace: PathBuf,
    state: PathBuf,
    config_home: PathBuf,
    run_log: PathBuf,
    pid_file: PathBuf,
    path: String,
}

impl Setup {
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        let workspace = root.path().join("ws");
        std::fs::create_dir_all(workspace.join("sub")).unwrap();
        let config_home = root.path().join("config");
        std::fs::create_dir_all(config_home.join("machine-mcp")).unwrap();
        std::fs::write(
            config_home.join("machine-mcp/config.toml"),
            "[delegation.agents.codex]\nenabled = true\n\
             [delegation.agents.claude]\nenabled = true\n\
             [delegation.agents.gemini]\nenabled = true\n",
        )
        .unwrap();
        let stubs = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/agents");
        let path = format!(
            "{}:{}",
            stubs.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Self {
            workspace,
            state: root.path().join("state"),
            config_home,
            run_log: root.path().join("runs.log"),
            pid_file: root.path().join("stub.pid"),
            path,
            _root: root,
        }
    }

    fn env(&self) -> Vec<(&str, String)> {
        vec![
            ("PATH", self.path.clone()),
            ("XDG_CONFIG_HOME", self.config_home.display().to_string()),
            ("STUB_RUN_LOG", self.run_log.display().to_string()),
            ("STUB_PID_FILE", self.pid_file.display().to_string()),
            ("GEMINI_API_KEY", "stub-key".to_owned()),
        ]
    }

    /// A server on this setup, with `extra` environment variables.
    fn server(&self, extra: &[(&str, &str)]) -> Server {
        self.server_with(&[], extra)
    }

    /// [`Setup::server`] with extra arguments.
    fn server_with(&self, args: &[&str], extra: &[(&str, &str)]) -> Server {
        let mut env = self.env();
        env.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let state = self.state.display().to_string();
        let mut all = vec!["--state-dir", &state, "--no-supervisor"];
        all.extend_from_slice(args);
        Server::start_with_env(&self.workspace, &all, &env)
    }

    fn runs(&self) -> Vec<String> {
        std::fs::read_to_string(&self.run_log)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// `machine-mcp delegation ARGS... --state-dir STATE`.
    fn cli(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new(bin())
            .arg("delegation")
            .args(args)
            .arg("--state-dir")
            .arg(&self.state)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }
}

/// A request id for test `n`.
fn rid(n: u32) -> String {
    format!("{:08x}-0000-4000-8000-{n:012x}", std::process::id())
}

fn delegate(s: &mut Server, agent: &str, prompt: &str, id: &str) -> Reply {
    s.call(
        "delegate",
        json!({"agent": agent, "prompt": prompt, "request_id": id}),
    )
}

/// Reads `id` until it is terminal (waiting up to [`WAIT`]).
fn until_terminal(s: &mut Server, id: &str) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let r = s.call(
            "read_delegation",
            json!({"request_id": id, "wait_ms": 5000}),
        );
        let v = r.ok().clone();
        if ["completed", "failed", "unknown"].contains(&v["status"].as_str().unwrap_or("")) {
            return v;
        }
        assert!(Instant::now() < deadline, "not terminal: {v}");
    }
}

/// Waits for `path` to hold a pid.
fn pid_in(path: &Path) -> i32 {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(pid) = std::fs::read_to_string(path)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "{} never written",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether `pid` is a live process (a zombie is not).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

fn sigkill(pid: u32) {
    let st = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success(), "kill -KILL {pid}");
}

#[test]
fn each_agent_completes_with_the_stubs_answer_and_session() {
    let setup = Setup::new();
    let mut s = setup.server(&[]);
    for (n, agent) in ["codex", "claude", "gemini"].into_iter().enumerate() {
        let id = rid(n as u32);
        let r = delegate(&mut s, agent, &format!("say hello {agent}\nmore"), &id);
        let v = r.ok();
        assert_eq!(v["request_id"], id);
        assert!(
            ["queued", "running"].contains(&v["status"].as_str().unwrap()),
            "{v}"
        );
        assert!(r.summary().contains("read_delegation"), "{}", r.summary());
        let done = until_terminal(&mut s, &id);
        assert_eq!(done["status"], "completed", "{done}");
        assert_eq!(done["delivery_state"], "sent");
        assert_eq!(
            done["output"],
            format!("stub {agent} answer: say hello {agent}")
        );
        assert!(
            done["session_id"].as_str().is_some_and(|s| !s.is_empty()),
            "{done}"
        );
        // The full profile shows absolute paths.
        assert_eq!(
            Path::new(done["directory"].as_str().unwrap()),
            setup.workspace.canonicalize().unwrap()
        );
        assert_eq!(done["depth"], 0);
        assert_eq!(done["root_request_id"], id);
    }
    assert_eq!(setup.runs().len(), 3);
    let status = s.call("agents_status", json!({}));
    let agents = status.ok()["agents"].as_array().unwrap().clone();
    assert_eq!(agents.len(), 3);
    for a in &agents {
        assert_eq!(a["can_accept_work"], true, "{a}");
        assert!(a["last_success"].is_string(), "{a}");
    }
    let list = s.call("list_delegations", json!({}));
    assert_eq!(list.ok()["delegations"].as_array().unwrap().len(), 3);
}

#[test]
fn a_hanging_agent_is_cancelled_and_its_tree_is_gone() {
    let setup = Setup::new();
    let mut s = setup.server(&[]);
    let id = rid(1);
    delegate(&mut s, "codex", "HANG please", &id).ok();
    let leader = pid_in(&setup.pid_file);
    let child = pid_in(&setup.pid_file.with_extension("pid.child"));
    assert!(alive(leader) && alive(child));
    let r = s.call("cancel_delegation", json!({"request_id": id}));
    let v = r.ok();
    assert_eq!(v["status"], "failed", "{v}");
    assert_eq!(v["diagnostic_code"], "cancelled");
    assert_eq!(v["delivery_state"], "sent");
    assert!(
        !alive(leader),
        "the agent {leader} survived its cancellation"
    );
    assert!(!alive(child), "the agent's child {child} survived");
    // Cancelling again changes nothing.
    let again = s.call("cancel_delegation", json!({"request_id": id}));
    assert_eq!(again.ok()["ended_at"], v["ended_at"]);
}

#[test]
fn a_failing_agent_is_failed_with_its_message() {
    let setup = Setup::new();
    let mut s = setup.server(&[]);
    for (n, agent) in ["codex", "claude", "gemini"].into_iter().enumerate() {
        let id = rid(n as u32);
        delegate(&mut s, agent, "FAIL now", &id).ok();
        let v = until_terminal(&mut s, &id);
        assert_eq!(v["status"], "failed", "{v}");
        assert_eq!(v["diagnostic_code"], "agent_failed");
        assert_eq!(v["delivery_state"], "sent");
        let msg = v["diagnostic_message"].as_str().unwrap();
        assert!(
            msg.contains(&format!("stub {agent} failure")),
            "{agent}: {msg}"
        );
        assert!(v["exit_code"].as_i64().is_some_and(|c| c != 0), "{v}");
    }
}

#[test]
fn a_request_id_runs_once_and_conflicting_reuse_is_refused() {
    let setup = Setup::new();
    let mut s = setup.server(&[]);
    let id = rid(7);
    let first = delegate(&mut s, "claude", "once only", &id);
    first.ok();
    let second = delegate(&mut s, "claude", "once only", &id);
    assert_eq!(second.ok()["created_at"], first.ok()["created_at"]);
    let done = until_terminal(&mut s, &id);
    assert_eq!(done["status"], "completed");
    let third = delegate(&mut s, "claude", "once only", &id);
    assert_eq!(third.ok()["status"], "completed", "a replay after the end");
    assert_eq!(setup.runs().len(), 1, "{:?}", setup.runs());
    let other = delegate(&mut s, "claude", "another prompt", &id);
    assert_eq!(other.code(), "conflict");
    let other_agent = delegate(&mut s, "codex", "once only", &id);
    assert_eq!(other_agent.code(), "conflict");
    assert_eq!(setup.runs().len(), 1);
}

#[test]
fn a_server_killed_while_an_agent_runs_leaves_an_unknown_receipt_never_rerun() {
    let setup = Setup::new();
    let mut s = setup.server(&[]);
    let id = rid(3);
    delegate(&mut s, "gemini", "HANG until the server dies", &id).ok();
    let leader = pid_in(&setup.pid_file);
    // The receipt says sent once the agent was started.
    let deadline = Instant::now() + WAIT;
    loop {
        let v = s
            .call("read_delegation", json!({"request_id": id}))
            .ok()
            .clone();
        if v["delivery_state"] == "sent" {
            assert_eq!(v["status"], "running");
            break;
        }
        assert!(Instant::now() < deadline, "{v}");
    }
    sigkill(s.pid());
    drop(s);
    let mut s = setup.server(&[]);
    let v = s.call("read_delegation", json!({"request_id": id}));
    let v = v.ok();
    assert_eq!(v["status"], "unknown", "{v}");
    assert_eq!(v["delivery_state"], "sent");
    assert_eq!(v["diagnostic_code"], "server_restarted");
    assert!(
        v["diagnostic_message"]
            .as_str()
            .unwrap()
            .contains("not re-run")
    );
    // The same request again is the same receipt, not a new run.
    let again = delegate(&mut s, "gemini", "HANG until the server dies", &id);
    assert_eq!(again.ok()["status"], "unknown");
    // The old agent was ended with its server (the watchdog), and nothing ran again.
    let deadline = Instant::now() + WAIT;
    while alive(leader) {
        assert!(Instant::now() < deadline, "the agent outlived its server");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(setup.runs().len(), 1, "{:?}", setup.runs());
}

#[test]
fn an_unauthenticated_agent_is_reported_and_refused() {
    let setup = Setup::new();
    // Codex's own variable: the status probe runs in the isolated environment, which keeps
    // what an agent signs in with and nothing else of the server's.
    let mut s = setup.server(&[("CODEX_STUB_AUTH_MISSING", "1")]);
    let status = s.call("agents_status", json!({}));
    let agents = status.ok()["agents"].as_array().unwrap().clone();
    let codex = agents.iter().find(|a| a["agent"] == "codex").unwrap();
    assert_eq!(codex["authenticated"], false, "{codex}");
    assert_eq!(codex["can_accept_work"], false);
    let reason = codex["not_ready"].as_str().unwrap().to_owned();
    let r = delegate(&mut s, "codex", "hello", &rid(1));
    assert_eq!(r.code(), "unavailable");
    assert!(
        r.error["message"].as_str().unwrap().contains(&reason),
        "{} vs {reason}",
        r.error
    );
    assert!(setup.runs().is_empty());
}

#[test]
fn drain_refuses_new_work_and_lists_what_runs() {
    let setup = Setup::new();
    let mut s = setup.server(&[]);
    let running = rid(1);
    delegate(&mut s, "claude", "HANG during the drain", &running).ok();
    pid_in(&setup.pid_file);
    let (ok, out) = setup.cli(&["drain"]);
    assert!(ok, "{out}");
    assert!(out.contains(&running), "drain lists the running one: {out}");
    let (ok, json_out) = setup.cli(&["drain", "--json"]);
    assert!(ok);
    let v: Value = serde_json::from_str(json_out.trim()).unwrap();
    assert_eq!(v["unfinished"][0]["request_id"], running);
    assert_eq!(v["unfinished"][0]["status"], "running");

    let refused = delegate(&mut s, "codex", "new work", &rid(2));
    assert_eq!(refused.code(), "unavailable");
    assert!(
        refused.error["message"]
            .as_str()
            .unwrap()
            .contains("delegation resume")
    );
    let list = s.call("list_delegations", json!({"status": "running"}));
    assert_eq!(list.ok()["delegations"][0]["request_id"], running);

    let (ok, _) = setup.cli(&["resume"]);
    assert!(ok);
    delegate(&mut s, "codex", "new work", &rid(2)).ok();
    let done = until_terminal(&mut s, &rid(2));
    assert_eq!(done["status"], "completed");
    s.call("cancel_delegation", json!({"request_id": running}))
        .ok();
}

#[test]
fn a_corrupt_receipt_is_listed_unreadable_and_never_overwritten() {
    let setup = Setup::new();
    let mut s = setup.server(&[]);
    // The store exists once a delegation was made.
    delegate(&mut s, "codex", "first", &rid(1)).ok();
    until_terminal(&mut s, &rid(1));
    let bad = rid(2);
    let file = setup.state.join(format!("delegations/{bad}.json"));
    std::fs::write(&file, b"{\"request_id\": broken").unwrap();
    let list = s.call("list_delegations", json!({}));
    let items = list.ok()["delegations"].as_array().unwrap().clone();
    let item = items.iter().find(|d| d["request_id"] == bad).unwrap();
    assert_eq!(item["status"], "unreadable", "{item}");
    let r = delegate(&mut s, "codex", "reuse the broken id", &bad);
    assert_eq!(r.code(), "conflict");
    assert!(r.error["message"].as_str().unwrap().contains(&bad));
    assert_eq!(
        std::fs::read(&file).unwrap(),
        b"{\"request_id\": broken",
        "never overwritten"
    );
    let (ok, out) = setup.cli(&["list"]);
    assert!(ok);
    assert!(out.contains(&format!("{bad} - unreadable")), "{out}");
    assert_eq!(setup.runs().len(), 1);
}

#[test]
fn a_prompt_over_256_kib_is_refused_and_bad_ids_are_invalid() {
    let setup = Setup::new();
    let mut s = setup.server(&[]);
    let big = "x".repeat(256 * 1024 + 1);
    let r = delegate(&mut s, "codex", &big, &rid(1));
    assert_eq!(r.code(), "limit_exceeded", "{}", r.error);
    assert_eq!(r.error["reason"], "prompt", "{}", r.error);
    let r = delegate(&mut s, "codex", "hi", "not-a-uuid");
    assert_eq!(r.code(), "invalid_request");
    // A confined caller (the agent profile) delegates inside the workspace only.
    let mut confined = setup.server_with(&["--profile", "agent"], &[]);
    let r = confined.call(
        "delegate",
        json!({"agent": "codex", "prompt": "hi", "request_id": rid(2), "path": "../.."}),
    );
    assert_eq!(r.code(), "path_boundary");
    let r = s.call("read_delegation", json!({"request_id": rid(3)}));
    assert_eq!(r.code(), "not_found");
    assert!(setup.runs().is_empty());
}

#[test]
fn a_delegation_runs_in_the_directory_it_names() {
    let setup = Setup::new();
    // `--full-env`: the stub's run log variable reaches it (the agent profile's isolated
    // environment keeps only the agent's own variables).
    let mut s = setup.server_with(&["--profile", "agent", "--full-env"], &[]);
    let id = rid(1);
    s.call(
        "delegate",
        json!({"agent": "codex", "prompt": "where", "request_id": id, "path": "sub"}),
    )
    .ok();
    let v = until_terminal(&mut s, &id);
    assert_eq!(v["directory"], "sub");
    let runs = setup.runs();
    let cwd = runs[0].split('\t').nth(1).unwrap();
    assert_eq!(
        Path::new(cwd),
        setup.workspace.join("sub").canonicalize().unwrap()
    );
}

#[test]
fn a_third_run_of_one_agent_waits_queued_until_a_slot_frees() {
    let setup = Setup::new();
    let mut s = setup.server(&[]);
    let ids: Vec<String> = (1..=3).map(rid).collect();
    let mut statuses = Vec::new();
    for id in &ids {
        let r = delegate(&mut s, "codex", &format!("HANG {id}"), id);
        statuses.push(r.ok()["status"].as_str().unwrap().to_owned());
    }
    assert_eq!(statuses, ["running", "running", "queued"]);
    // Another agent has its own two slots.
    let other = delegate(&mut s, "claude", "not waiting", &rid(4));
    assert_eq!(other.ok()["status"], "running");
    let cancelled = s.call("cancel_delegation", json!({"request_id": ids[0]}));
    assert_eq!(cancelled.ok()["status"], "failed");
    let deadline = Instant::now() + WAIT;
    loop {
        let v = s
            .call("read_delegation", json!({"request_id": ids[2]}))
            .ok()
            .clone();
        if v["status"] == "running" {
            break;
        }
        assert_eq!(v["status"], "queued", "{v}");
        assert!(Instant::now() < deadline, "the queued run never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    for id in &ids[1..] {
        s.call("cancel_delegation", json!({"request_id": id})).ok();
    }
}

#[test]
fn a_server_that_stops_records_its_runs_as_stopped() {
    let setup = Setup::new();
    let mut s = setup.server(&[]);
    let id = rid(1);
    delegate(&mut s, "codex", "HANG until stdin closes", &id).ok();
    let leader = pid_in(&setup.pid_file);
    s.close_stdin();
    let deadline = Instant::now() + WAIT;
    while alive(leader) {
        assert!(Instant::now() < deadline, "the agent outlived its server");
        std::thread::sleep(Duration::from_millis(20));
    }
    let deadline = Instant::now() + WAIT;
    loop {
        let (ok, out) = setup.cli(&["list", "--json"]);
        assert!(ok);
        let v: Value = serde_json::from_str(out.trim()).unwrap();
        let d = &v["delegations"][0];
        if d["status"] != "running" {
            assert_eq!(d["status"], "failed", "{d}");
            assert_eq!(d["delivery_state"], "sent");
            assert_eq!(d["diagnostic_code"], "server_stopped");
            break;
        }
        assert!(Instant::now() < deadline, "{d}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(setup.runs().len(), 1);
}

/// Whether `output` is `n` bytes or fewer of 'é' only (a cut on a character boundary).
fn cut_e(output: &str, max: usize) -> bool {
    output.len() <= max && output.len() + 2 > max && output.chars().all(|c| c == 'é')
}

#[test]
fn an_answer_over_256_kib_is_cut_and_flagged_truncated() {
    let setup = Setup::new();
    let mut s = setup.server(&[]);
    // 140,000 'é' (280,003 bytes) in one event line of about 840 KB.
    let id = rid(1);
    delegate(&mut s, "codex", "BIGANSWER 140000", &id).ok();
    let v = until_terminal(&mut s, &id);
    assert_eq!(v["status"], "completed", "{}", v["diagnostic_message"]);
    assert_eq!(v["output_truncated"], true);
    assert!(cut_e(v["output"].as_str().unwrap(), 256 * 1024));
}

#[test]
fn an_answer_in_a_multi_megabyte_event_line_completes_cut_at_256_kib() {
    let setup = Setup::new();
    let mut s = setup.server(&[]);
    // 2,000,000 'é': one event line of 12 MB, over the 4 MiB a line may take whole.
    let id = rid(1);
    delegate(&mut s, "codex", "BIGANSWER 2000000", &id).ok();
    let v = until_terminal(&mut s, &id);
    assert_eq!(v["status"], "completed", "{}", v["diagnostic_message"]);
    assert_eq!(v["output_truncated"], true);
    assert!(cut_e(v["output"].as_str().unwrap(), 256 * 1024));
}

#[test]
fn an_event_line_too_long_to_read_is_named_in_the_diagnostic() {
    let setup = Setup::new();
    let mut s = setup.server(&[]);
    let id = rid(1);
    delegate(&mut s, "codex", "HUGELINE", &id).ok();
    let v = until_terminal(&mut s, &id);
    assert_eq!(v["status"], "failed", "{v}");
    assert_eq!(v["diagnostic_code"], "agent_failed");
    let msg = v["diagnostic_message"].as_str().unwrap();
    assert!(
        msg.contains("too long") && msg.contains("not read") && !msg.contains("no final answer"),
        "{msg}"
    );
}

#[test]
fn a_running_receipt_never_says_not_sent() {
    let setup = Setup::new();
    let mut s = setup.server(&[]);
    for (n, agent) in ["codex", "claude", "gemini", "codex"]
        .into_iter()
        .enumerate()
    {
        let id = rid(n as u32);
        let v = delegate(&mut s, agent, "hello", &id).ok().clone();
        match v["status"].as_str().unwrap() {
            "queued" => assert_eq!(v["delivery_state"], "not_sent", "{v}"),
            "running" | "completed" => assert_eq!(v["delivery_state"], "sent", "{v}"),
            _ => panic!("{v}"),
        }
        until_terminal(&mut s, &id);
    }
}

/// `/proc/PID/stat` field 22 (the start time in ticks).
fn start_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let (_, rest) = stat.rsplit_once(')').unwrap();
    rest.split_whitespace().nth(19).unwrap().parse().unwrap()
}

#[test]
fn a_cancel_that_the_running_server_does_not_carry_out_says_so() {
    let setup = Setup::new();
    let mut s = setup.server(&[]);
    let done = rid(1);
    delegate(&mut s, "gemini", "first", &done).ok();
    until_terminal(&mut s, &done);
    // A receipt "running" on a live process that is no server: it never acts on the marker.
    let mut other = Command::new("sleep").arg("60").spawn().unwrap();
    let dir = setup.state.join("delegations");
    let mut r: Value =
        serde_json::from_slice(&std::fs::read(dir.join(format!("{done}.json"))).unwrap()).unwrap();
    let id = rid(2);
    r["request_id"] = json!(id);
    r["root_request_id"] = json!(id);
    r["status"] = json!("running");
    r["delivery_state"] = json!("sent");
    r["ended_at"] = Value::Null;
    r["output"] = Value::Null;
    r["server"]["pid"] = json!(other.id());
    r["server"]["start_ticks"] = json!(start_ticks(other.id()));
    std::fs::write(dir.join(format!("{id}.json")), r.to_string()).unwrap();
    let t = Instant::now();
    let c = s.call("cancel_delegation", json!({"request_id": id}));
    let elapsed = t.elapsed();
    let v = c.ok();
    assert_eq!(v["status"], "running", "{v}");
    let pending = v["cancel_pending"].as_str().unwrap_or_default();
    assert!(
        pending.contains(&other.id().to_string()) && pending.contains("not"),
        "{v}"
    );
    assert!(c.summary().contains("cancel"), "{}", c.summary());
    assert!(elapsed < Duration::from_secs(6), "{elapsed:?}");
    other.kill().unwrap();
    other.wait().unwrap();
}

#[test]
fn list_delegations_pages_through_every_receipt() {
    let setup = Setup::new();
    let mut s = setup.server(&[]);
    let first = rid(0);
    delegate(&mut s, "codex", "first", &first).ok();
    until_terminal(&mut s, &first);
    let dir = setup.state.join("delegations");
    let r: Value =
        serde_json::from_slice(&std::fs::read(dir.join(format!("{first}.json"))).unwrap()).unwrap();
    let mut all = vec![first.clone()];
    for n in 1..=700 {
        let id = rid(n);
        let mut c = r.clone();
        c["request_id"] = json!(id);
        c["root_request_id"] = json!(id);
        // Some share a creation time: the order still is total.
        c["created_at"] = json!(format!("2020-01-01T00:00:{:02}.000Z", n % 50));
        std::fs::write(dir.join(format!("{id}.json")), c.to_string()).unwrap();
        all.push(id);
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..20 {
        let mut args = json!({"limit": 1024});
        if let Some(c) = &cursor {
            args["cursor"] = json!(c);
        }
        let page = s.call("list_delegations", args);
        let v = page.ok();
        seen.extend(
            v["delegations"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d["request_id"].as_str().unwrap().to_owned()),
        );
        assert!(
            !page.summary().contains("raise limit"),
            "{}",
            page.summary()
        );
        match v["next_cursor"].as_str() {
            Some(c) => {
                assert_eq!(v["truncated"], true);
                assert!(page.summary().contains("cursor"), "{}", page.summary());
                cursor = Some(c.to_owned());
            }
            None => break,
        }
    }
    assert_eq!(seen.len(), all.len(), "each once");
    seen.sort();
    all.sort();
    assert_eq!(seen, all);
    // A small limit pages too.
    let page = s.call("list_delegations", json!({"limit": 2}));
    let c = page.ok()["next_cursor"].as_str().unwrap().to_owned();
    let next = s.call("list_delegations", json!({"limit": 2, "cursor": c}));
    assert_eq!(next.ok()["delegations"].as_array().unwrap().len(), 2);
    assert_ne!(
        next.ok()["delegations"][0]["request_id"],
        page.ok()["delegations"][1]["request_id"]
    );
    let bad = s.call("list_delegations", json!({"cursor": "nonsense"}));
    assert_eq!(bad.code(), "invalid_request");
}

#[test]
fn delegation_list_names_a_missing_store_and_refuses_a_file_as_state_dir() {
    let setup = Setup::new();
    let list = |state: &Path| {
        let out = Command::new(bin())
            .args(["delegation", "list", "--state-dir"])
            .arg(state)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, out, _) = list(&setup.state);
    assert!(ok);
    assert!(
        out.contains("no delegations") && out.contains("does not exist"),
        "{out}"
    );
    let file = setup.workspace.join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let (ok, out, err) = list(&file);
    assert!(!ok, "{out}");
    assert!(err.contains("not a directory"), "{err}");
}

#[test]
fn a_store_full_of_unreadable_receipts_refuses_by_what_fills_it_and_prunes_nothing() {
    let setup = Setup::new();
    let mut s = setup.server(&[]);
    let done = rid(0);
    delegate(&mut s, "codex", "first", &done).ok();
    until_terminal(&mut s, &done);
    let dir = setup.state.join("delegations");
    for n in 1..=1030 {
        std::fs::write(dir.join(format!("{}.json", rid(n))), b"{broken").unwrap();
    }
    let r = delegate(&mut s, "codex", "one more", &rid(5000));
    assert_eq!(r.code(), "limit_exceeded", "{}", r.error);
    assert_eq!(r.error["reason"], "records");
    let msg = r.error["message"].as_str().unwrap();
    assert!(
        msg.contains("1030 unreadable") && !msg.contains("none is finished"),
        "{msg}"
    );
    assert!(
        dir.join(format!("{done}.json")).exists(),
        "the finished receipt was pruned although nothing was admitted"
    );
}

#[test]
fn agents_status_says_no_agent_accepts_work_while_draining() {
    // M3: after `machine-mcp delegation drain`, agents_status agrees with delegate.
    let setup = Setup::new();
    let mut s = setup.server(&[]);
    let before = s.call("agents_status", json!({}));
    assert!(
        before.ok()["agents"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["can_accept_work"] == true)
    );
    let (ok, out) = setup.cli(&["drain"]);
    assert!(ok, "{out}");
    let during = s.call("agents_status", json!({}));
    for a in during.ok()["agents"].as_array().unwrap() {
        assert_eq!(a["can_accept_work"], false, "{a}");
        let why = a["not_ready"].as_str().unwrap_or_default();
        assert!(
            why.contains("draining") && why.contains("delegation resume"),
            "{a}"
        );
    }
    assert!(
        during.summary().contains("no agent can accept work"),
        "{}",
        during.text
    );
    let (ok, _) = setup.cli(&["resume"]);
    assert!(ok);
    let after = s.call("agents_status", json!({}));
    assert_eq!(after.ok()["agents"][0]["can_accept_work"], true);
}

#[test]
fn an_isolated_environment_gives_the_agent_only_its_own_variables() {
    // M7: under a policy whose programs get an isolated environment, the agent gets it plus
    // HOME and its own documented variables; other secrets stay with the server.
    let setup = Setup::new();
    let secrets = [
        ("GITHUB_TOKEN", "gh"),
        ("AWS_SECRET_ACCESS_KEY", "aws"),
        ("OPENAI_API_KEY", "sk"),
        ("CODEX_HOME", "/nonexistent/codex-home"),
        ("ANTHROPIC_API_KEY", "ak"),
        ("SOME_BRIDGE_TOKEN", "b"),
    ];
    let names = |s: &mut Server, agent: &str, id: &str| -> Vec<String> {
        delegate(s, agent, "SHOW_ENV", id).ok();
        let v = until_terminal(s, id);
        assert_eq!(v["status"], "completed", "{v}");
        v["output"]
            .as_str()
            .unwrap()
            .split(' ')
            .map(str::to_owned)
            .collect()
    };
    let mut confined = setup.server_with(&["--profile", "agent"], &secrets);
    let codex = names(&mut confined, "codex", &rid(1));
    for want in ["PATH", "HOME", "OPENAI_API_KEY", "CODEX_HOME"] {
        assert!(codex.iter().any(|n| n == want), "{want} missing: {codex:?}");
    }
    for gone in [
        "GITHUB_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "ANTHROPIC_API_KEY",
        "GEMINI_API_KEY",
        "SOME_BRIDGE_TOKEN",
        "STUB_RUN_LOG",
    ] {
        assert!(
            !codex.iter().any(|n| n == gone),
            "{gone} reached codex: {codex:?}"
        );
    }
    let claude = names(&mut confined, "claude", &rid(2));
    assert!(
        claude.iter().any(|n| n == "ANTHROPIC_API_KEY"),
        "{claude:?}"
    );
    assert!(!claude.iter().any(|n| n == "OPENAI_API_KEY"), "{claude:?}");
    let gemini = names(&mut confined, "gemini", &rid(3));
    assert!(gemini.iter().any(|n| n == "GEMINI_API_KEY"), "{gemini:?}");
    assert!(!gemini.iter().any(|n| n == "GITHUB_TOKEN"), "{gemini:?}");
    drop(confined);

    // The full profile passes the server's environment, minus other bridges' variables.
    let mut full = setup.server(&secrets);
    let all = names(&mut full, "codex", &rid(4));
    for want in ["GITHUB_TOKEN", "SOME_BRIDGE_TOKEN", "STUB_RUN_LOG"] {
        assert!(all.iter().any(|n| n == want), "{want} missing: {all:?}");
    }
}

#[test]
fn a_confined_caller_sees_only_receipts_inside_its_workspace() {
    // L2: receipts another server of the state directory made for directories outside this
    // caller's workspace are not listed, read or cancelled.
    let setup = Setup::new();
    let outside = setup.workspace.parent().unwrap().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let mut full = setup.server(&[]);
    let out_id = rid(1);
    full.call(
        "delegate",
        json!({"agent": "codex", "prompt": "outside secret", "request_id": out_id,
               "path": outside.to_str().unwrap()}),
    )
    .ok();
    assert_eq!(until_terminal(&mut full, &out_id)["status"], "completed");
    let in_id = rid(2);
    delegate(&mut full, "codex", "inside", &in_id).ok();
    until_terminal(&mut full, &in_id);

    let mut confined = setup.server_with(&["--profile", "agent"], &[]);
    let list = confined.call("list_delegations", json!({"limit": 1024}));
    let ids: Vec<&str> = list.ok()["delegations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["request_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [in_id.as_str()], "{}", list.text);
    assert!(!list.text.contains("outside"), "{}", list.text);
    for tool in ["read_delegation", "cancel_delegation"] {
        let r = confined.call(tool, json!({"request_id": out_id}));
        assert_eq!(r.code(), "not_found", "{tool}: {}", r.error);
    }
    let r = confined.call("read_delegation", json!({"request_id": in_id}));
    assert_eq!(r.ok()["directory"], ".");
}

/// Issue 19 "What must be shown": a *daemon* SIGKILLed while a delegation runs leaves the
/// receipt `unknown` after its restart, and nothing runs again (the stub counts its runs) —
/// through the relay, as a hosted assistant sees it.
#[test]
fn a_daemon_killed_while_an_agent_runs_leaves_an_unknown_receipt_never_rerun() {
    use crate::net::{Client, Relay};
    let setup = Setup::new();
    std::fs::create_dir_all(&setup.workspace).unwrap();
    let env = setup.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let relay = Relay::start(&[]);
    let code = relay.add_bridge("b1");
    let token = relay.token("b1", "owner");
    let policy = ["--profile", "agent", "--full-env"];
    let mut daemon =
        relay.daemon_with_env(&setup.state, &setup.workspace, Some(&code), &policy, &env);
    daemon.wait_log("connected to the relay and ready", WAIT);
    relay.wait_ready(1);
    let url = format!("{}/b/b1/mcp", relay.direct());
    let mut c = Client::new(&url, Some(&token));
    c.initialize();
    let id = rid(40);
    let r = c.call(
        "delegate",
        json!({"agent": "gemini", "prompt": "HANG until the daemon dies", "path": ".", "request_id": id}),
    );
    assert_eq!(r["result"]["isError"], false, "{r}");
    let deadline = Instant::now() + WAIT;
    loop {
        let r = c.call("read_delegation", json!({"request_id": id}));
        let v = &r["result"]["structuredContent"];
        if v["delivery_state"] == "sent" {
            assert_eq!(v["status"], "running", "{v}");
            break;
        }
        assert!(Instant::now() < deadline, "{r}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The stub is running (it wrote its pid after logging its run).
    let leader = pid_in(&setup.pid_file);
    daemon.kill();
    let daemon2 = relay.daemon_with_env(&setup.state, &setup.workspace, None, &policy, &env);
    daemon2.wait_log("connected to the relay and ready", WAIT);
    relay.wait_ready(1);
    let mut c = Client::new(&url, Some(&token));
    c.initialize();
    let r = c.call("read_delegation", json!({"request_id": id}));
    let v = &r["result"]["structuredContent"];
    assert_eq!(v["status"], "unknown", "{r}");
    assert_eq!(v["delivery_state"], "sent", "{r}");
    assert_eq!(v["diagnostic_code"], "server_restarted", "{r}");
    // The same request again is that receipt, not a second run.
    let r = c.call(
        "delegate",
        json!({"agent": "gemini", "prompt": "HANG until the daemon dies", "path": ".", "request_id": id}),
    );
    assert_eq!(r["result"]["structuredContent"]["status"], "unknown", "{r}");
    // The agent ended with its daemon (the watchdog), and nothing ran again.
    let deadline = Instant::now() + WAIT;
    while alive(leader) {
        assert!(Instant::now() < deadline, "the agent outlived its daemon");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(setup.runs().len(), 1, "{:?}", setup.runs());
}
