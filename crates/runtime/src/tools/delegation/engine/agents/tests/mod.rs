//! Tests of the agent adapters: parsers on documented event sequences (here), argv and the
//! stub CLIs run with it (`argv`), and `inspect` (`inspect`), against the stub CLIs in
//! `crates/machine-mcp/tests/fixtures/agents`.

mod argv;
mod inspect;

use std::{collections::BTreeMap, io::Write, os::unix::fs::PermissionsExt};

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
            probe_base: None,
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
