//! `command()`: each agent's argv and how it names the worker MCP server, and the stub CLIs run
//! with that argv.

use super::*;

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
