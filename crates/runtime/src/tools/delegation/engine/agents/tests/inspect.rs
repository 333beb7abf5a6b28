//! `inspect()`: discovery, version and sign-in of each agent on the stubs, and what an
//! inspection must survive.

use super::*;

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

// ---- regressions: what an agent's inspection must survive ----

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
    use crate::tools::delegation::engine::{AgentEnvironment, env::agent_env_from};
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
