//! Tests of the agent adapters: parsers on documented event sequences, argv, and `inspect`
//! and `command` against the stub CLIs in `crates/machine-mcp/tests/fixtures/agents`.

use std::{collections::BTreeMap, io::Write};

use super::*;

fn stubs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../machine-mcp/tests/fixtures/agents")
}

fn enabled(agents: &[Agent]) -> DelegationConfig {
    DelegationConfig {
        agents: agents
            .iter()
            .map(|a| {
                (
                    *a,
                    AgentConfig {
                        enabled: true,
                        path: None,
                    },
                )
            })
            .collect(),
    }
}

/// Inspects `agent` on the stub directory (or `path_var`), with `vars` as the server's
/// environment and `home` as its HOME.
fn inspect_with(
    agent: Agent,
    config: &DelegationConfig,
    path_var: &OsStr,
    vars: &[(&str, &str)],
    probe_env: &[(&str, &str)],
    home: Option<PathBuf>,
) -> AgentStatus {
    let vars: BTreeMap<String, OsString> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), OsString::from(v)))
        .collect();
    let var = move |name: &str| vars.get(name).cloned();
    inspect_on(
        agent,
        config,
        &Host {
            path_var: Some(path_var),
            var: &var,
            home,
            probe_env,
            probe_timeout: DELEGATION_PROBE_TIMEOUT,
        },
    )
}

fn parse(agent: Agent, lines: &[&str]) -> Parsed {
    let mut p = OutputParser::new(agent);
    for l in lines {
        p.line(l.as_bytes());
    }
    p.finish()
}

fn write_script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
fn agents_are_named_as_in_the_config_and_the_tools() {
    for a in Agent::ALL {
        assert_eq!(Agent::parse(a.name()), Some(a));
        assert_eq!(
            serde_json::to_value(a).unwrap(),
            Value::String(a.name().into())
        );
    }
    assert_eq!(Agent::parse("Codex"), None);
    assert_eq!(Agent::parse("cursor"), None);
}

// ---- parsers ----

#[test]
fn codex_events_give_the_thread_and_the_last_agent_message() {
    let p = parse(
        Agent::Codex,
        &[
            r#"{"type":"thread.started","thread_id":"0199a213-81c0-7800-8aa1-bbab2a035a53"}"#,
            r#"{"type":"turn.started"}"#,
            "not json at all",
            r#"{"type":"error","message":"Reconnecting... 1/5"}"#,
            r#"{"type":"item.completed","item":{"id":"item_0","type":"reasoning","text":"thinking"}}"#,
            r#"{"type":"item.completed","item":{"id":"item_1","type":"agent_message","text":"first"}}"#,
            r#"{"type":"item.started","item":{"id":"item_2","type":"command_execution","command":"ls"}}"#,
            r#"{"type":"some.future.event","x":1}"#,
            r#"[1,2,3]"#,
            r#"{"type":"item.completed","item":{"id":"item_3","type":"agent_message","text":"final answer"}}"#,
            r#"{"type":"turn.completed","usage":{"input_tokens":1,"cached_input_tokens":0,"output_tokens":1}}"#,
        ],
    );
    assert_eq!(
        p,
        Parsed {
            session_id: Some("0199a213-81c0-7800-8aa1-bbab2a035a53".into()),
            answer: Some("final answer".into()),
            answer_truncated: false,
            // The transient error is cleared by the completed turn.
            error: None,
        }
    );
}

#[test]
fn codex_turn_failed_and_error_events_are_the_error() {
    let p = parse(
        Agent::Codex,
        &[
            r#"{"type":"thread.started","thread_id":"t1"}"#,
            r#"{"type":"turn.failed","error":{"message":"stream disconnected"}}"#,
            r#"{"type":"error","message":"later noise"}"#,
        ],
    );
    assert_eq!(p.session_id.as_deref(), Some("t1"));
    assert_eq!(p.answer, None);
    assert_eq!(p.error.as_deref(), Some("stream disconnected"));

    let p = parse(
        Agent::Codex,
        &[r#"{"type":"error","message":"unexpected status 401 Unauthorized"}"#],
    );
    assert_eq!(
        p.error.as_deref(),
        Some("unexpected status 401 Unauthorized")
    );
    assert_eq!(p.session_id, None);
}

#[test]
fn claude_result_is_the_answer_and_is_error_is_an_error() {
    let ok = parse(
        Agent::Claude,
        &[
            r#"{"type":"system","subtype":"init","session_id":"s-1","tools":[],"model":"m"}"#,
            r#"{"type":"assistant","message":{"role":"assistant","content":[{"type":"tool_use","id":"x","name":"Read","input":{}}]},"session_id":"s-1"}"#,
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":"..."}]}}"#,
            r#"{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"Done: "},{"type":"text","text":"42"}]},"session_id":"s-1"}"#,
            r#"{"type":"result","subtype":"success","is_error":false,"result":"Done: 42","session_id":"s-1","num_turns":2}"#,
        ],
    );
    assert_eq!(ok.session_id.as_deref(), Some("s-1"));
    assert_eq!(ok.answer.as_deref(), Some("Done: 42"));
    assert_eq!(ok.error, None);

    // An API error is a `success` result with is_error: its text is the error, no answer.
    let api = parse(
        Agent::Claude,
        &[
            r#"{"type":"system","subtype":"init","session_id":"s-2"}"#,
            r#"{"type":"assistant","message":{"content":[{"type":"text","text":"partial"}]}}"#,
            r#"{"type":"result","subtype":"success","is_error":true,"result":"Invalid API key · Please run /login","session_id":"s-2"}"#,
        ],
    );
    assert_eq!(api.answer, None);
    assert_eq!(
        api.error.as_deref(),
        Some("Invalid API key · Please run /login")
    );

    let turns = parse(
        Agent::Claude,
        &[
            r#"{"type":"result","subtype":"error_max_turns","is_error":true,"session_id":"s-3","num_turns":9}"#,
        ],
    );
    assert_eq!(turns.session_id.as_deref(), Some("s-3"));
    assert_eq!(
        turns.error.as_deref(),
        Some("claude ended with error_max_turns")
    );
    let listed = parse(
        Agent::Claude,
        &[
            r#"{"type":"result","subtype":"error_during_execution","is_error":true,"errors":["tool crashed","then gave up"]}"#,
        ],
    );
    assert_eq!(listed.error.as_deref(), Some("tool crashed; then gave up"));

    // No result event (killed mid-way): the last assistant text is what there is.
    let cut = parse(
        Agent::Claude,
        &[r#"{"type":"assistant","message":{"content":[{"type":"text","text":"so far"}]}}"#],
    );
    assert_eq!(cut.answer.as_deref(), Some("so far"));
}

#[test]
fn gemini_deltas_join_after_the_last_tool_call() {
    let p = parse(
        Agent::Gemini,
        &[
            r#"{"type":"init","timestamp":"2025-10-10T12:00:00.000Z","session_id":"g-1","model":"gemini-2.5-pro"}"#,
            r#"{"type":"message","role":"user","content":"the task"}"#,
            r#"{"type":"message","role":"assistant","content":"Let me ","delta":true}"#,
            r#"{"type":"message","role":"assistant","content":"look.","delta":true}"#,
            r#"{"type":"tool_use","tool_name":"read_file","tool_id":"t1","parameters":{}}"#,
            r#"{"type":"tool_result","tool_id":"t1","status":"success","output":"x"}"#,
            r#"{"type":"error","severity":"warning","message":"loop detected?"}"#,
            r#"{"type":"message","role":"assistant","content":"The answer ","delta":true}"#,
            r#"{"type":"message","role":"assistant","content":"is 42.","delta":true}"#,
            r#"{"type":"result","status":"success","stats":{"total_tokens":10}}"#,
        ],
    );
    assert_eq!(
        p,
        Parsed {
            session_id: Some("g-1".into()),
            answer: Some("The answer is 42.".into()),
            answer_truncated: false,
            error: None,
        }
    );

    let failed = parse(
        Agent::Gemini,
        &[
            r#"{"type":"init","session_id":"g-2"}"#,
            r#"{"type":"error","severity":"error","message":"quota exceeded"}"#,
            r#"{"type":"result","status":"error","error":{"type":"FatalError","message":"API error: quota"}}"#,
        ],
    );
    assert_eq!(failed.error.as_deref(), Some("API error: quota"));
    assert_eq!(failed.answer, None);
    let bare = parse(Agent::Gemini, &[r#"{"type":"result","status":"error"}"#]);
    assert_eq!(
        bare.error.as_deref(),
        Some("gemini ended with status error")
    );
}

#[test]
fn an_answer_longer_than_the_bound_is_kept_up_to_it_on_a_char_boundary() {
    // 'é' is two bytes: an odd bound falls inside one.
    let long = "é".repeat(DELEGATION_OUTPUT_MAX_BYTES);
    let line =
        serde_json::json!({"type":"item.completed","item":{"type":"agent_message","text":long}});
    let p = parse(Agent::Codex, &[&line.to_string()]);
    let answer = p.answer.unwrap();
    assert!(p.answer_truncated);
    assert_eq!(answer.len(), DELEGATION_OUTPUT_MAX_BYTES);
    assert!(long.starts_with(&answer));

    // Gemini deltas stop growing at the bound.
    let chunk = "x".repeat(DELEGATION_OUTPUT_MAX_BYTES / 3 + 1);
    let delta =
        serde_json::json!({"type":"message","role":"assistant","content":chunk,"delta":true})
            .to_string();
    let p = parse(Agent::Gemini, &[&delta, &delta, &delta, &delta]);
    assert!(p.answer_truncated);
    assert_eq!(p.answer.unwrap().len(), DELEGATION_OUTPUT_MAX_BYTES);

    let short = parse(
        Agent::Claude,
        &[r#"{"type":"result","subtype":"success","result":"ok"}"#],
    );
    assert!(!short.answer_truncated);
}

// ---- command() ----

fn worker() -> WorkerMcp {
    WorkerMcp {
        program: PathBuf::from("/opt/my tools/machine-mcp \"v2\"\\bin"),
        args: vec![
            "delegation".into(),
            "worker-mcp".into(),
            "it's \"x\"\n".into(),
        ],
        env_names: vec![
            "MACHINE_MCP_DELEGATION_SOCKET".into(),
            "MACHINE_MCP_DELEGATION_REQUEST".into(),
            "MACHINE_MCP_DELEGATION_CAPABILITY".into(),
        ],
    }
}

fn strings(argv: &[OsString]) -> Vec<String> {
    argv.iter()
        .map(|a| a.to_str().unwrap().to_owned())
        .collect()
}

#[test]
fn argv_of_each_agent_without_a_worker_server() {
    let exe = Path::new("/bin/agent");
    assert_eq!(
        strings(&command(Agent::Codex, exe, None)),
        ["/bin/agent", "exec", "--json", "--skip-git-repo-check", "-"]
    );
    assert_eq!(
        strings(&command(Agent::Claude, exe, None)),
        [
            "/bin/agent",
            "-p",
            "--output-format",
            "stream-json",
            "--verbose"
        ]
    );
    assert_eq!(
        strings(&command(Agent::Gemini, exe, None)),
        [
            "/bin/agent",
            "--output-format",
            "stream-json",
            "-p",
            GEMINI_STDIN_PROMPT
        ]
    );
    // Gemini takes no worker server from flags: the argv is the same.
    assert_eq!(
        command(Agent::Gemini, exe, Some(&worker())),
        command(Agent::Gemini, exe, None)
    );
}

#[test]
fn codex_worker_server_flags_are_toml_values_that_parse_back() {
    let w = worker();
    let argv = strings(&command(Agent::Codex, Path::new("/bin/codex"), Some(&w)));
    assert_eq!(
        argv[..4],
        ["/bin/codex", "exec", "--json", "--skip-git-repo-check"]
    );
    assert_eq!(argv.last().map(String::as_str), Some("-"));
    let overrides: Vec<&str> = argv[4..argv.len() - 1]
        .chunks(2)
        .map(|pair| {
            assert_eq!(pair[0], "-c");
            pair[1].as_str()
        })
        .collect();
    let mut parsed = BTreeMap::new();
    for o in overrides {
        let (key, value) = o.split_once('=').unwrap();
        let key = key.strip_prefix("mcp_servers.machine_bridge.").unwrap();
        let doc: toml::Table = toml::from_str(&format!("v = {value}")).unwrap();
        parsed.insert(key.to_owned(), doc["v"].clone());
    }
    assert_eq!(
        parsed["command"],
        toml::Value::String(w.program.to_str().unwrap().into())
    );
    let list =
        |v: &[String]| toml::Value::Array(v.iter().cloned().map(toml::Value::String).collect());
    assert_eq!(parsed["args"], list(&w.args));
    assert_eq!(parsed["env_vars"], list(&w.env_names));
    assert_eq!(parsed.len(), 3);
}

#[test]
fn claude_worker_server_is_an_mcp_config_json() {
    let w = worker();
    let argv = strings(&command(Agent::Claude, Path::new("/bin/claude"), Some(&w)));
    assert_eq!(
        argv[..6],
        [
            "/bin/claude",
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--mcp-config"
        ]
    );
    assert_eq!(argv.len(), 7);
    let config: Value = serde_json::from_str(&argv[6]).unwrap();
    assert_eq!(
        config,
        serde_json::json!({"mcpServers": {"machine_bridge": {
            "command": w.program.to_str().unwrap(),
            "args": w.args,
        }}})
    );
}

// ---- the stubs run with command()'s argv ----

/// Runs `argv` with `prompt` on stdin in `cwd`; the parsed stdout and the exit code.
fn run(argv: &[OsString], prompt: &str, cwd: &Path, env: &[(&str, &str)]) -> (Parsed, i32, String) {
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .current_dir(cwd)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(prompt.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let agent = Agent::ALL
        .into_iter()
        .find(|a| argv[0].to_str().unwrap().ends_with(a.name()))
        .unwrap();
    let mut p = OutputParser::new(agent);
    for line in out.stdout.split(|b| *b == b'\n') {
        p.line(line);
    }
    (
        p.finish(),
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn each_stub_accepts_its_argv_and_answers_through_the_parser() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("runs.log");
    let log_s = log.to_str().unwrap();
    for agent in Agent::ALL {
        let argv = command(agent, &stubs().join(agent.name()), None);
        let (p, code, stderr) = run(
            &argv,
            "hello there\nmore",
            dir.path(),
            &[("STUB_RUN_LOG", log_s)],
        );
        assert_eq!(code, 0, "{agent}: {stderr}");
        assert_eq!(
            p.answer.as_deref(),
            Some(format!("stub {agent} answer: hello there").as_str())
        );
        assert!(p.session_id.is_some(), "{agent}");
        assert_eq!(p.error, None, "{agent}");

        let (p, code, stderr) = run(&argv, "please FAIL", dir.path(), &[]);
        assert_eq!(code, 1, "{agent}");
        assert_eq!(p.answer, None, "{agent}");
        assert_eq!(
            p.error.as_deref(),
            Some(format!("stub {agent} failure: FAIL requested").as_str())
        );
        assert!(stderr.contains("FAIL requested"), "{agent}: {stderr}");
    }
    let runs = std::fs::read_to_string(&log).unwrap();
    let cwd = dir.path().to_str().unwrap();
    assert_eq!(
        runs,
        format!(
            "codex\t{cwd}\thello there\nclaude\t{cwd}\thello there\ngemini\t{cwd}\thello there\n"
        )
    );
}

#[test]
fn the_stubs_read_the_worker_server_command_argv_gives_them() {
    let dir = tempfile::tempdir().unwrap();
    let w = worker();
    for agent in [Agent::Codex, Agent::Claude] {
        let argv = command(agent, &stubs().join(agent.name()), Some(&w));
        let (p, code, stderr) = run(&argv, "SHOW_MCP", dir.path(), &[]);
        assert_eq!(code, 0, "{agent}: {stderr}");
        let shown: Value = serde_json::from_str(p.answer.as_deref().unwrap()).unwrap();
        assert_eq!(shown["command"], w.program.to_str().unwrap(), "{agent}");
        assert_eq!(shown["args"], serde_json::json!(w.args), "{agent}");
        if agent == Agent::Codex {
            assert_eq!(shown["env_vars"], serde_json::json!(w.env_names));
        }
    }
    // A flag the stub does not know is a usage error: a wrong argv cannot pass unnoticed.
    let mut argv = command(Agent::Codex, &stubs().join("codex"), None);
    argv.insert(1, "--full-auto".into());
    let (_, code, stderr) = run(&argv, "x", dir.path(), &[]);
    assert_eq!(code, 2, "{stderr}");
}

/// A fake `machine_bridge` worker server (Python, like the stubs) that answers `delegate`
/// and `read_delegation` as `FAKE_MODE` says; it proves a stub speaks MCP to the server
/// its argv names and passes its environment on.
const FAKE_SERVER: &str = r#"
import json, os, sys
mode = os.environ["FAKE_MODE"]
reads = 0
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method, params = msg["method"], msg.get("params", {})
    if method == "initialize":
        assert params["protocolVersion"] == "2025-11-25"
        result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}, "serverInfo": {"name": "fake", "version": "0"}}
    elif method == "tools/call" and mode == "refuse":
        result = {"isError": True, "content": [{"type": "text", "text": "limit_exceeded: depth 5 is deeper than 4"}]}
    elif method == "tools/call" and params["name"] == "delegate":
        args = params["arguments"]
        assert args["path"] == "." and len(args["request_id"]) == 36, args
        receipt = {"request_id": args["request_id"], "status": "queued", "prompt_seen": args["prompt"], "agent": args["agent"]}
        result = {"structuredContent": receipt, "content": [{"type": "text", "text": json.dumps(receipt)}]}
        last = receipt
    elif method == "tools/call" and params["name"] == "read_delegation":
        assert params["arguments"]["wait_ms"] == 60000
        reads += 1
        status = "running" if reads < 2 else "completed"
        receipt = {"request_id": params["arguments"]["request_id"], "status": status,
                   "output": f"{last['agent']} did: {last['prompt_seen']}" if status == "completed" else None}
        result = {"structuredContent": receipt, "content": [{"type": "text", "text": json.dumps(receipt)}]}
    else:
        result = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) + "\n")
    sys.stdout.flush()
"#;

#[test]
fn a_stub_delegates_through_its_worker_server_and_shows_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let server = dir.path().join("fake_server.py");
    std::fs::write(&server, FAKE_SERVER).unwrap();
    let w = WorkerMcp {
        program: PathBuf::from("python3"),
        args: vec![server.to_str().unwrap().to_owned()],
        env_names: vec!["FAKE_MODE".into()],
    };
    for agent in [Agent::Codex, Agent::Claude] {
        let argv = command(agent, &stubs().join(agent.name()), Some(&w));
        let (p, code, stderr) = run(
            &argv,
            "DELEGATE:gemini:summarize the log\n",
            dir.path(),
            &[("FAKE_MODE", "complete")],
        );
        assert_eq!(code, 0, "{agent}: {stderr}");
        assert_eq!(
            p.answer.as_deref(),
            Some("gemini did: summarize the log"),
            "{agent}"
        );

        let (p, code, _) = run(
            &argv,
            "DELEGATE:codex:x",
            dir.path(),
            &[("FAKE_MODE", "refuse")],
        );
        assert_eq!(code, 0);
        assert_eq!(
            p.answer.as_deref(),
            Some("limit_exceeded: depth 5 is deeper than 4"),
            "{agent}"
        );
    }
}

// ---- inspect() ----

#[test]
fn inspect_finds_each_stub_on_path_and_reads_version_and_login() {
    let path = stubs().into_os_string();
    let config = enabled(&Agent::ALL);
    let home = tempfile::tempdir().unwrap();
    for agent in Agent::ALL {
        let s = inspect_with(
            agent,
            &config,
            &path,
            &[("GEMINI_API_KEY", "k")],
            &[],
            Some(home.path().into()),
        );
        assert!(s.enabled && s.available && s.can_accept_work, "{s:?}");
        assert_eq!(s.authenticated, Some(true), "{agent}");
        assert_eq!(s.not_ready, None);
        assert_eq!(
            s.program.as_deref(),
            Some(stubs().join(agent.name()).as_path())
        );
        assert_eq!(
            s.executable,
            Some(stubs().join(agent.name()).display().to_string())
        );
        let want = match agent {
            Agent::Codex => "codex-cli 0.99.0-stub",
            Agent::Claude => "2.0.99-stub (Claude Code)",
            Agent::Gemini => "0.99.0-stub",
        };
        assert_eq!(s.version.as_deref(), Some(want));
    }
}

#[test]
fn inspect_says_how_to_log_in_when_auth_is_missing() {
    let path = stubs().into_os_string();
    let config = enabled(&Agent::ALL);
    let home = tempfile::tempdir().unwrap();
    let missing = [("STUB_AUTH_MISSING", "1")];
    for (agent, reason) in [
        (Agent::Codex, "not logged in: run `codex login`"),
        (Agent::Claude, "not logged in: run `claude auth login`"),
    ] {
        let s = inspect_with(
            agent,
            &config,
            &path,
            &[],
            &missing,
            Some(home.path().into()),
        );
        assert!(s.available, "{s:?}");
        assert_eq!(s.authenticated, Some(false));
        assert!(!s.can_accept_work);
        assert_eq!(s.not_ready.as_deref(), Some(reason));
    }

    // Gemini: no key, no sign-in file → not authenticated; the file alone is enough.
    let s = inspect_with(
        Agent::Gemini,
        &config,
        &path,
        &[("GEMINI_API_KEY", "")],
        &[],
        Some(home.path().into()),
    );
    assert_eq!(s.authenticated, Some(false));
    assert!(!s.can_accept_work);
    let why = s.not_ready.unwrap();
    assert!(
        why.starts_with("not authenticated: set GEMINI_API_KEY"),
        "{why}"
    );
    std::fs::create_dir(home.path().join(".gemini")).unwrap();
    std::fs::write(
        home.path().join(".gemini/oauth_creds.json"),
        r#"{"access_token": "ya29.stub", "refresh_token": "1//stub"}"#,
    )
    .unwrap();
    let s = inspect_with(
        Agent::Gemini,
        &config,
        &path,
        &[],
        &[],
        Some(home.path().into()),
    );
    assert_eq!(s.authenticated, Some(true));
    assert!(s.can_accept_work);
}

#[test]
fn a_disabled_agent_is_found_but_cannot_accept_work() {
    let path = stubs().into_os_string();
    let s = inspect_with(
        Agent::Codex,
        &DelegationConfig::default(),
        &path,
        &[],
        &[],
        None,
    );
    assert!(!s.enabled && s.available && !s.can_accept_work);
    assert_eq!(s.version.as_deref(), Some("codex-cli 0.99.0-stub"));
    // Not asked whether it is signed in.
    assert_eq!(s.authenticated, None);
    assert_eq!(
        s.not_ready.as_deref(),
        Some("disabled in config.toml ([delegation.agents.codex] enabled = true to enable)")
    );
}

#[test]
fn inspect_reports_a_missing_or_broken_executable() {
    let dir = tempfile::tempdir().unwrap();
    let config = enabled(&Agent::ALL);
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let s = inspect_with(Agent::Claude, &config, empty.as_os_str(), &[], &[], None);
    assert!(!s.available && !s.can_accept_work);
    assert_eq!(s.executable, None);
    assert_eq!(s.not_ready.as_deref(), Some("claude not found on PATH"));

    // A non-executable file and a relative entry earlier on PATH are skipped.
    let first = dir.path().join("first");
    std::fs::create_dir(&first).unwrap();
    std::fs::write(first.join("codex"), "not a program").unwrap();
    let path =
        std::env::join_paths([PathBuf::from("relative/dir"), first.clone(), stubs()]).unwrap();
    let s = inspect_with(Agent::Codex, &config, &path, &[], &[], None);
    assert_eq!(s.program, Some(stubs().join("codex")));
    assert!(s.can_accept_work, "{s:?}");

    // A configured path wins over PATH; a wrong one is named.
    let broken = write_script(dir.path(), "codex", "echo 'codex: bad install' >&2; exit 3");
    let mut configured = enabled(&Agent::ALL);
    configured.agents.insert(
        Agent::Codex,
        AgentConfig {
            enabled: true,
            path: Some(broken.to_str().unwrap().into()),
        },
    );
    let s = inspect_with(
        Agent::Codex,
        &configured,
        &stubs().into_os_string(),
        &[],
        &[],
        None,
    );
    assert_eq!(s.program, Some(broken.clone()));
    assert!(!s.available && !s.can_accept_work);
    assert_eq!(
        s.not_ready.as_deref(),
        Some("codex --version failed: exit code 3 (codex: bad install)")
    );

    for (raw, want) in [
        (
            "/nonexistent/codex",
            "/nonexistent/codex (the [delegation.agents.codex] path) is not an executable file"
                .to_owned(),
        ),
        (
            "bin/codex",
            "[delegation.agents.codex] path \"bin/codex\" must be absolute or start with ~/"
                .to_owned(),
        ),
    ] {
        configured.agents.insert(
            Agent::Codex,
            AgentConfig {
                enabled: true,
                path: Some(raw.into()),
            },
        );
        let s = inspect_with(
            Agent::Codex,
            &configured,
            &stubs().into_os_string(),
            &[],
            &[],
            None,
        );
        assert_eq!(s.not_ready, Some(want));
        assert!(!s.can_accept_work);
    }
}

#[test]
fn a_probe_that_hangs_is_killed_at_its_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    write_script(
        dir.path(),
        "claude",
        &format!("echo $$ > {}; exec sleep 1000", pid_file.display()),
    );
    let config = enabled(&Agent::ALL);
    let var = |_: &str| None;
    let s = inspect_on(
        Agent::Claude,
        &config,
        &Host {
            path_var: Some(dir.path().as_os_str()),
            var: &var,
            home: None,
            probe_env: &[],
            probe_timeout: Duration::from_millis(300),
        },
    );
    assert!(!s.available && !s.can_accept_work);
    assert_eq!(
        s.not_ready.as_deref(),
        Some("claude --version failed: no answer within 0.3 s")
    );
    // The probe's process is gone (killed; reaped by the waiter thread).
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{pid}")).exists() {
        assert!(
            Instant::now() < deadline,
            "probe process {pid} still exists"
        );
        std::thread::yield_now();
    }
}

// ---- regressions of the fresh-tester findings (issue 19) ----

/// Inspects `agent` found in `dir` (scripts written there), with a short probe timeout.
fn inspect_in(agent: Agent, dir: &Path, home: Option<PathBuf>, timeout: Duration) -> AgentStatus {
    let var = |_: &str| None;
    inspect_on(
        agent,
        &enabled(&Agent::ALL),
        &Host {
            path_var: Some(dir.as_os_str()),
            var: &var,
            home,
            probe_env: &[],
            probe_timeout: timeout,
        },
    )
}

#[test]
fn a_version_is_one_line_of_text_without_control_characters_and_bounded() {
    // L5: binary output is not a version; ESC is removed; a long line is cut.
    let dir = tempfile::tempdir().unwrap();
    write_script(
        dir.path(),
        "codex",
        r#"case "$1" in --version) head -c 4096 /dev/zero | tr '\0' '\377';; *) exit 0;; esac"#,
    );
    let s = inspect_in(Agent::Codex, dir.path(), None, DELEGATION_PROBE_TIMEOUT);
    assert!(!s.available && !s.can_accept_work, "{s:?}");
    assert_eq!(s.version, None);
    let why = s.not_ready.unwrap();
    assert!(why.contains("not text"), "{why}");

    write_script(
        dir.path(),
        "claude",
        r#"case "$1" in --version) printf '\033[1m2.0.1\033[0m (Claude\001 Code)\nsecond line\n';; *) echo '{"loggedIn":true}';; esac"#,
    );
    let s = inspect_in(Agent::Claude, dir.path(), None, DELEGATION_PROBE_TIMEOUT);
    assert_eq!(
        s.version.as_deref(),
        Some("[1m2.0.1[0m (Claude Code)"),
        "{s:?}"
    );
    assert!(s.can_accept_work);

    let long = "v".repeat(5000);
    write_script(
        dir.path(),
        "claude",
        &format!(r#"case "$1" in --version) echo {long};; *) echo '{{"loggedIn":true}}';; esac"#),
    );
    let s = inspect_in(Agent::Claude, dir.path(), None, DELEGATION_PROBE_TIMEOUT);
    let v = s.version.unwrap();
    assert!(v.chars().count() <= 200, "{} chars", v.chars().count());
    assert!(v.starts_with("vvvv"));
}

#[test]
fn a_session_id_with_control_characters_is_not_taken() {
    // L5: an id is shown to people and passed to the agent's CLI to resume: no ESC, no NUL.
    for bad in ["\u{1b}[31mred", "a\u{0}b", "line\nbreak"] {
        let line = serde_json::json!({"type": "thread.started", "thread_id": bad}).to_string();
        let p = parse(Agent::Codex, &[&line]);
        assert_eq!(p.session_id, None, "{bad:?}");
        let line = serde_json::json!({"type": "init", "session_id": bad}).to_string();
        assert_eq!(parse(Agent::Gemini, &[&line]).session_id, None, "{bad:?}");
    }
    let p = parse(
        Agent::Claude,
        &[r#"{"type":"system","subtype":"init","session_id":"s-1"}"#],
    );
    assert_eq!(p.session_id.as_deref(), Some("s-1"));
}

#[test]
fn gemini_sign_in_needs_a_credentials_file_with_a_token() {
    // L6: an empty or garbage oauth_creds.json is not a sign-in.
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir(home.path().join(".gemini")).unwrap();
    let creds = home.path().join(".gemini/oauth_creds.json");
    let path = stubs().into_os_string();
    for (content, signed_in) in [
        ("", false),
        ("\u{0}\u{1}garbage", false),
        ("[1, 2]", false),
        (r#"{"scope": "x"}"#, false),
        (r#"{"access_token": ""}"#, false),
        (
            r#"{"access_token": "ya29.x", "token_type": "Bearer"}"#,
            true,
        ),
        (r#"{"refresh_token": "1//x", "expiry_date": 1}"#, true),
    ] {
        std::fs::write(&creds, content).unwrap();
        let s = inspect_with(
            Agent::Gemini,
            &enabled(&Agent::ALL),
            &path,
            &[],
            &[],
            Some(home.path().into()),
        );
        assert_eq!(s.authenticated, Some(signed_in), "{content:?}: {s:?}");
        assert_eq!(s.can_accept_work, signed_in, "{content:?}");
        if !signed_in {
            let why = s.not_ready.unwrap();
            assert!(why.contains("oauth_creds.json"), "{why}");
        }
    }
}

#[test]
fn an_auth_probe_that_hangs_is_reported() {
    // L7: the status command did not answer: `authenticated` is unknown, and the status says
    // why.
    let dir = tempfile::tempdir().unwrap();
    write_script(
        dir.path(),
        "codex",
        r#"case "$1" in --version) echo codex-cli 1;; *) exec sleep 1000;; esac"#,
    );
    let s = inspect_in(Agent::Codex, dir.path(), None, Duration::from_millis(300));
    assert!(s.available, "{s:?}");
    assert_eq!(s.authenticated, None);
    let v = serde_json::to_value(&s).unwrap();
    let detail = v["auth_detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("codex login status") && detail.contains("no answer within 0.3 s"),
        "{v}"
    );
}

#[test]
fn an_isolated_agent_environment_keeps_home_and_the_agents_own_variables_only() {
    // M7: run_process's isolation, plus the real HOME and the agent's documented variables.
    use crate::tools::delegation::engine::{AgentEnvironment, agent_env_from};
    let scratch = tempfile::tempdir().unwrap();
    let inherited: Vec<(OsString, OsString)> = [
        ("HOME", "/home/someone"),
        ("PATH", "/usr/bin"),
        ("GITHUB_TOKEN", "gh"),
        ("AWS_SECRET_ACCESS_KEY", "aws"),
        ("OPENAI_API_KEY", "sk"),
        ("ANTHROPIC_API_KEY", "ak"),
        ("HTTPS_PROXY", "http://proxy:3128"),
        ("CLAUDE_CODE_ENTRYPOINT", "cli"),
        ("MACHINE_MCP_TREE", "x"),
        ("SOME_BRIDGE_TOKEN", "b"),
    ]
    .iter()
    .map(|(k, v)| (OsString::from(k), OsString::from(v)))
    .collect();
    let env = |agent, environment: &AgentEnvironment| -> BTreeMap<String, String> {
        agent_env_from(
            inherited.clone(),
            agent,
            environment,
            vec![("MACHINE_MCP_DELEGATION_REQUEST".into(), "r".into())],
        )
        .unwrap()
        .into_iter()
        .map(|(k, v)| (k.into_string().unwrap(), v.into_string().unwrap()))
        .collect()
    };
    let isolated = AgentEnvironment::Isolated {
        scratch: scratch.path().to_owned(),
    };
    let codex = env(Agent::Codex, &isolated);
    assert_eq!(codex["HOME"], "/home/someone");
    assert_eq!(codex["OPENAI_API_KEY"], "sk");
    assert_eq!(codex["HTTPS_PROXY"], "http://proxy:3128");
    assert_eq!(codex["PATH"], "/usr/bin");
    assert_eq!(codex["MACHINE_MCP_DELEGATION_REQUEST"], "r");
    assert!(Path::new(&codex["TMPDIR"]).starts_with(scratch.path()));
    for gone in [
        "GITHUB_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "ANTHROPIC_API_KEY",
        "MACHINE_MCP_TREE",
        "SOME_BRIDGE_TOKEN",
    ] {
        assert!(!codex.contains_key(gone), "{gone}: {codex:?}");
    }
    let claude = env(Agent::Claude, &isolated);
    assert_eq!(claude["ANTHROPIC_API_KEY"], "ak");
    // Dropped for every agent, although it is one of Claude Code's names.
    assert!(!claude.contains_key("CLAUDE_CODE_ENTRYPOINT"));
    assert!(!claude.contains_key("AWS_SECRET_ACCESS_KEY"));

    // The full environment drops by prefix only.
    let full = env(Agent::Codex, &AgentEnvironment::Full);
    assert_eq!(full["GITHUB_TOKEN"], "gh");
    assert_eq!(full["SOME_BRIDGE_TOKEN"], "b");
    assert!(!full.contains_key("MACHINE_MCP_TREE"));
    assert!(!full.contains_key("CLAUDE_CODE_ENTRYPOINT"));
}

#[test]
fn claude_keeps_cloud_credentials_only_for_the_provider_it_is_told_to_use() {
    let set = |names: &'static [&'static str]| move |n: &str| names.contains(&n);
    let plain = set(&[]);
    assert!(!keeps_env(Agent::Claude, "AWS_SECRET_ACCESS_KEY", &plain));
    let bedrock = set(&["CLAUDE_CODE_USE_BEDROCK"]);
    assert!(keeps_env(Agent::Claude, "AWS_SECRET_ACCESS_KEY", &bedrock));
    assert!(!keeps_env(Agent::Codex, "AWS_SECRET_ACCESS_KEY", &bedrock));
    let vertex = set(&["CLAUDE_CODE_USE_VERTEX"]);
    assert!(keeps_env(Agent::Claude, "CLOUD_ML_REGION", &vertex));
    assert!(!keeps_env(Agent::Claude, "CLOUD_ML_REGION", &plain));
    assert!(keeps_env(
        Agent::Gemini,
        "GOOGLE_GENAI_USE_VERTEXAI",
        &plain
    ));
    assert!(!keeps_env(Agent::Gemini, "OPENAI_API_KEY", &plain));
}
