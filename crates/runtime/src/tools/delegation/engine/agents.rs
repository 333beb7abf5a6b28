//! The agent CLIs a delegation runs: Codex (`codex exec`), Claude Code (`claude -p`)
//! and Gemini CLI (`gemini -p`).
//!
//! Per agent this module knows, from each CLI's documentation:
//! - where the executable is ([`inspect`]: the configured `path`, else a search of `PATH`);
//! - whether it can take work ([`inspect`]: `--version` answers, and it is authenticated, told by
//!   the CLI's own status command or, for Gemini, by its credentials being present; never a
//!   model call; each probe bounded by [`DELEGATION_PROBE_TIMEOUT`]);
//! - the argv of one non-interactive run ([`command`]; the prompt goes on stdin, and the agent's
//!   own permission settings are left as the user set them);
//! - how to read its JSON-lines stdout ([`OutputParser`]: session id, final answer, error).

use std::{
    ffi::{OsStr, OsString},
    fmt,
    io::Read,
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Command, ExitStatus, Stdio},
    sync::{Arc, mpsc},
    time::Duration,
};

use lock::Lock;

use crate::limits::{
    DELEGATION_OUTPUT_MAX_BYTES, DELEGATION_PROBE_OUTPUT_MAX_BYTES, DELEGATION_PROBE_TIMEOUT,
};
use nix::{
    sys::signal::{Signal, killpg},
    unistd::Pid,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::time::Instant;

use crate::config::{AgentConfig, DelegationConfig, home};

/// The agent CLIs we can delegate to. Names: "codex", "claude", "gemini".
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Agent {
    /// OpenAI Codex CLI: `codex exec --json`.
    Codex,
    /// Anthropic Claude Code: `claude -p --output-format stream-json`.
    Claude,
    /// Google Gemini CLI: `gemini --output-format stream-json -p`.
    Gemini,
}

impl Agent {
    /// Every agent, in the order `agents_status` lists them.
    pub const ALL: [Agent; 3] = [Agent::Codex, Agent::Claude, Agent::Gemini];

    /// The agent's name: its executable's name and its key in `[delegation.agents]`.
    pub fn name(self) -> &'static str {
        match self {
            Agent::Codex => "codex",
            Agent::Claude => "claude",
            Agent::Gemini => "gemini",
        }
    }

    /// The agent named `s` (exactly one of [`Agent::name`]'s lowercase names), else `None`.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.name() == s)
    }
}

impl fmt::Display for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What `agents_status` reports per agent; also what `delegate` checks before it accepts work.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AgentStatus {
    /// The agent.
    pub agent: Agent,
    /// Whether the user enabled it (`[delegation.agents.<name>] enabled = true`).
    pub enabled: bool,
    /// Whether its executable was found and `--version` answered (exit 0).
    pub available: bool,
    /// The executable found (absolute path), shown even when it does not work.
    pub executable: Option<String>,
    /// The first line `--version` printed (stdout, else stderr), control characters removed,
    /// at most [`VERSION_MAX_CHARS`] characters. Output that is not text (not UTF-8, or with a
    /// NUL) is no version: the agent is then not available.
    pub version: Option<String>,
    /// Whether it is signed in: `None` when that could not be told (the probe timed out or
    /// could not run, or the agent is disabled and was not asked).
    pub authenticated: Option<bool>,
    /// Why `authenticated` is `None` although the agent was asked: its status command failed to
    /// run or did not answer within [`DELEGATION_PROBE_TIMEOUT`]. The agent may still accept
    /// work (a failed probe does not prove it is signed out), but a run may fail to sign in.
    pub auth_detail: Option<String>,
    /// `enabled && available && authenticated != Some(false)`.
    pub can_accept_work: bool,
    /// Why it cannot accept work, in a sentence that says what to do (`None` when it can).
    pub not_ready: Option<String>,
    /// The executable found, for [`command`] (not serialized: [`AgentStatus::executable`] is
    /// its shown form).
    #[serde(skip)]
    pub program: Option<PathBuf>,
}

/// Inspects one agent (blocking; runs `--version` and the auth probe, each bounded by
/// [`DELEGATION_PROBE_TIMEOUT`]; never spends a model call). `config` is the user's
/// `[delegation]` section; `path_var` the `PATH` to search (the server's own).
///
/// Steps, in order: find the executable (the configured `path`, `~/` expanded, which must be
/// absolute; else the first executable regular file named after the agent in an absolute
/// directory of `path_var`); run `<exe> --version`; if the agent is enabled, tell whether it is
/// signed in: `codex login status` and `claude auth status` (exit 0, and for Claude its JSON
/// `loggedIn`), for Gemini (which has no status command) any of `GEMINI_API_KEY`,
/// `GOOGLE_API_KEY`, `GOOGLE_GENAI_USE_VERTEXAI`, `GOOGLE_GENAI_USE_GCA` set or
/// `~/.gemini/oauth_creds.json` a JSON object with an `access_token` or `refresh_token`. A
/// status command that fails or hangs leaves `authenticated` unknown, with
/// [`AgentStatus::auth_detail`] saying so. A disabled agent is still found and asked its
/// version (so the status shows what enabling it would give) but not asked to authenticate.
///
/// Never fails: every problem becomes [`AgentStatus::not_ready`] (the first that applies:
/// disabled, not found, `--version` failed, not signed in).
pub fn inspect(agent: Agent, config: &DelegationConfig, path_var: Option<&OsStr>) -> AgentStatus {
    let var = |name: &str| std::env::var_os(name);
    // The probes get the isolated environment an agent of a policy without `full_env` gets
    // (the agent's own variables and the real HOME, no other credential of the server); the
    // scratch directory is the process family's, removed at shutdown.
    let scratch = std::env::temp_dir().join(format!("machine-mcp-{}", std::process::id()));
    let base = super::env::agent_env(
        agent,
        &super::AgentEnvironment::Isolated { scratch },
        Vec::new(),
    )
    .unwrap_or_default();
    inspect_on(
        agent,
        config,
        &Host {
            path_var,
            var: &var,
            home: home(),
            probe_env: &[],
            probe_base: Some(&base),
            probe_timeout: DELEGATION_PROBE_TIMEOUT,
        },
    )
}

/// What [`inspect`] reads of the machine; tests substitute their own.
struct Host<'a> {
    path_var: Option<&'a OsStr>,
    /// A variable of the server's environment.
    var: &'a dyn Fn(&str) -> Option<OsString>,
    home: Option<PathBuf>,
    /// Set on the probes' processes in addition to the inherited environment.
    probe_env: &'a [(&'a str, &'a str)],
    /// The probes' whole environment (`None`: inherited, for tests).
    probe_base: Option<&'a [(OsString, OsString)]>,
    probe_timeout: Duration,
}

fn inspect_on(agent: Agent, config: &DelegationConfig, host: &Host<'_>) -> AgentStatus {
    let settings = config.agent(agent);
    let name = agent.name();
    let mut status = AgentStatus {
        agent,
        enabled: settings.enabled,
        available: false,
        executable: None,
        version: None,
        authenticated: None,
        auth_detail: None,
        can_accept_work: false,
        not_ready: None,
        program: None,
    };
    let mut reasons = Vec::new();
    if !settings.enabled {
        reasons.push(format!(
            "disabled in config.toml ([delegation.agents.{name}] enabled = true to enable)"
        ));
    }
    match locate(agent, &settings, host.path_var) {
        Err(why) => reasons.push(why),
        Ok(program) => {
            status.executable = Some(program.display().to_string());
            match probe(&program, &["--version"], host) {
                Ok(out) if out.status.success() => match version_line(&out) {
                    Ok(version) => {
                        status.available = true;
                        status.version = version;
                    }
                    Err(why) => reasons.push(format!(
                        "{name} --version printed {why}: is {} the {name} CLI?",
                        program.display()
                    )),
                },
                Ok(out) => reasons.push(format!("{name} --version failed: {}", exit_problem(&out))),
                Err(why) => reasons.push(format!("{name} --version failed: {why}")),
            }
            if status.available && settings.enabled {
                let auth = authentication(agent, &program, host);
                status.authenticated = auth.authenticated;
                status.auth_detail = auth.detail;
                reasons.extend(auth.not_ready);
            }
            status.program = Some(program);
        }
    }
    status.can_accept_work =
        status.enabled && status.available && status.authenticated != Some(false);
    status.not_ready = if status.can_accept_work {
        None
    } else {
        reasons.into_iter().next()
    };
    status
}

/// The agent's executable: the configured path or a `PATH` search; the error is a sentence.
fn locate(
    agent: Agent,
    settings: &AgentConfig,
    path_var: Option<&OsStr>,
) -> Result<PathBuf, String> {
    let name = agent.name();
    let configured = settings
        .path
        .as_deref()
        .map(str::trim)
        .filter(|p| !p.is_empty());
    if let Some(raw) = configured {
        let Some(path) = settings.executable() else {
            return Err(format!(
                "[delegation.agents.{name}] path {raw:?} starts with ~/ but HOME is not set"
            ));
        };
        if !path.is_absolute() {
            return Err(format!(
                "[delegation.agents.{name}] path {raw:?} must be absolute or start with ~/"
            ));
        }
        if let Some(why) = crate::programs::refusal(&path) {
            return Err(format!("[delegation.agents.{name}] path: {why}"));
        }
        return if crate::programs::is_executable_file(&path) {
            Ok(path)
        } else {
            Err(format!(
                "{} (the [delegation.agents.{name}] path) is not an executable file",
                path.display()
            ))
        };
    }
    // Relative PATH entries and entries in a writable workspace are skipped
    // (`crate::programs`).
    crate::programs::find(OsStr::new(name), path_var)
}

/// What the sign-in check found.
#[derive(Debug, Default)]
struct Auth {
    /// Signed in (`None`: could not tell).
    authenticated: Option<bool>,
    /// Why it cannot accept work (signed out).
    not_ready: Option<String>,
    /// Why it could not tell ([`AgentStatus::auth_detail`]).
    detail: Option<String>,
}

/// Whether the agent is signed in and, when it is not or that cannot be told, why.
fn authentication(agent: Agent, program: &Path, host: &Host<'_>) -> Auth {
    let signed_out = |hint: &str| Auth {
        authenticated: Some(false),
        not_ready: Some(format!("not logged in: run `{hint}`")),
        detail: None,
    };
    let signed_in = Auth {
        authenticated: Some(true),
        ..Auth::default()
    };
    let unknown = |command: &str, why: String| Auth {
        detail: Some(format!(
            "`{command}` failed: {why}; whether it is signed in is unknown"
        )),
        ..Auth::default()
    };
    match agent {
        Agent::Codex => match probe(program, &["login", "status"], host) {
            Ok(out) if out.status.success() => signed_in,
            Ok(_) => signed_out("codex login"),
            Err(why) => unknown("codex login status", why),
        },
        Agent::Claude => match probe(program, &["auth", "status"], host) {
            Ok(out) => {
                let logged_in = serde_json::from_slice::<Value>(&out.stdout)
                    .ok()
                    .and_then(|v| v.get("loggedIn").and_then(Value::as_bool));
                if logged_in.unwrap_or(out.status.success()) && out.status.success() {
                    signed_in
                } else {
                    signed_out("claude auth login")
                }
            }
            Err(why) => unknown("claude auth status", why),
        },
        Agent::Gemini => {
            let by_env = GEMINI_AUTH_VARS
                .iter()
                .any(|v| (host.var)(v).is_some_and(|value| !value.is_empty()));
            let login = host
                .home
                .as_deref()
                .map(|h| gemini_login(&h.join(GEMINI_CREDENTIALS)));
            match login {
                _ if by_env => signed_in,
                Some(Ok(())) => signed_in,
                Some(Err(Some(why))) => Auth {
                    authenticated: Some(false),
                    not_ready: Some(format!(
                        "not authenticated: ~/{GEMINI_CREDENTIALS} {why}; run `gemini` and sign \
                         in with Google again, or set {} in the server's environment",
                        GEMINI_AUTH_VARS.join(" or ")
                    )),
                    detail: None,
                },
                Some(Err(None)) | None => Auth {
                    authenticated: Some(false),
                    not_ready: Some(format!(
                        "not authenticated: set {} in the server's environment, or run `gemini` \
                         once and sign in with Google (~/{GEMINI_CREDENTIALS})",
                        GEMINI_AUTH_VARS.join(" or ")
                    )),
                    detail: None,
                },
            }
        }
    }
}

/// Where Gemini CLI keeps its Google sign-in, under the home directory.
const GEMINI_CREDENTIALS: &str = ".gemini/oauth_creds.json";
/// Most bytes read of Gemini's credentials file (a real one is about 2 KB).
const GEMINI_CREDENTIALS_MAX_BYTES: u64 = 64 * 1024;

/// Whether `path` is a Gemini sign-in: a JSON object with a non-empty `access_token` or
/// `refresh_token` string (the Google OAuth credentials Gemini CLI writes). `Err(None)`: no
/// such file; `Err(Some(why))`: a file that is not one, why.
fn gemini_login(path: &Path) -> Result<(), Option<String>> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(None),
        Err(e) => return Err(Some(format!("cannot be read ({e})"))),
    };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return Err(Some("is not a file".into()));
    }
    let mut bytes = Vec::new();
    if let Err(e) = file
        .take(GEMINI_CREDENTIALS_MAX_BYTES + 1)
        .read_to_end(&mut bytes)
    {
        return Err(Some(format!("cannot be read ({e})")));
    }
    if bytes.len() as u64 > GEMINI_CREDENTIALS_MAX_BYTES {
        return Err(Some(format!(
            "is over {GEMINI_CREDENTIALS_MAX_BYTES} bytes: not a sign-in"
        )));
    }
    let token = |v: &Value, key: &str| {
        v.get(key)
            .and_then(Value::as_str)
            .is_some_and(|t| !t.trim().is_empty())
    };
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(v) if v.is_object() && (token(&v, "access_token") || token(&v, "refresh_token")) => {
            Ok(())
        }
        Ok(_) => Err(Some(
            "holds no sign-in (no access_token or refresh_token)".into(),
        )),
        Err(_) => Err(Some("is not JSON (an empty or damaged sign-in)".into())),
    }
}

/// Variables any of which makes Gemini CLI authenticated without a sign-in (its documented
/// API-key, Vertex AI and Code Assist modes).
const GEMINI_AUTH_VARS: [&str; 4] = [
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GOOGLE_GENAI_USE_VERTEXAI",
    "GOOGLE_GENAI_USE_GCA",
];

/// What a probe printed (each stream cut to [`DELEGATION_PROBE_OUTPUT_MAX_BYTES`]) and how it
/// exited.
struct ProbeOutput {
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

enum ProbeEvent {
    Exited(std::io::Result<ExitStatus>),
    StreamClosed,
}

/// Runs `program args…` (stdin empty, in its own process group) for at most
/// `host.probe_timeout`; past it the group is killed. The error is a short sentence (cannot
/// start, no answer in time).
fn probe(program: &Path, args: &[&str], host: &Host<'_>) -> Result<ProbeOutput, String> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(base) = host.probe_base {
        cmd.env_clear().envs(base.iter().map(|(k, v)| (k, v)));
    }
    for (k, v) in host.probe_env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().map_err(|e| format!("cannot start: {e}"))?;
    let group = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
    let kill = || {
        let _ = killpg(group, Signal::SIGKILL);
    };
    let (tx, rx) = mpsc::channel();
    let stdout = Arc::new(Lock::new(Vec::new()));
    let stderr = Arc::new(Lock::new(Vec::new()));
    let started = (|| -> std::io::Result<()> {
        if let Some(s) = child.stdout.take() {
            collect(s, stdout.clone(), tx.clone())?;
        }
        if let Some(s) = child.stderr.take() {
            collect(s, stderr.clone(), tx.clone())?;
        }
        Ok(())
    })();
    if let Err(e) = started {
        kill();
        let _ = child.wait();
        return Err(format!("cannot read its output: {e}"));
    }
    let waiter_tx = tx;
    let waiter = std::thread::Builder::new()
        .name("agent-probe-wait".into())
        .spawn(move || {
            let _ = waiter_tx.send(ProbeEvent::Exited(child.wait()));
        });
    if let Err(e) = waiter {
        kill();
        return Err(format!("cannot wait for it: {e}"));
    }

    let deadline = Instant::now() + host.probe_timeout;
    let (mut exited, mut closed) = (None, 0);
    while exited.is_none() || closed < 2 {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(ProbeEvent::Exited(r)) => exited = Some(r),
            Ok(ProbeEvent::StreamClosed) => closed += 1,
            Err(_) => break,
        }
    }
    let status = match exited {
        // The waiter thread reaps it once the kill lands; nothing waits for that here.
        None => {
            kill();
            return Err(format!(
                "no answer within {} s",
                host.probe_timeout.as_secs_f32()
            ));
        }
        Some(Err(e)) => return Err(format!("cannot wait for it: {e}")),
        Some(Ok(status)) => status,
    };
    if closed < 2 {
        // It exited but something it started still holds its output open: end the group.
        kill();
    }
    let take = |buf: &Arc<Lock<Vec<u8>>>| std::mem::take(&mut *buf.lock());
    Ok(ProbeOutput {
        status,
        stdout: take(&stdout),
        stderr: take(&stderr),
    })
}

/// Reads `src` to its end on a thread, keeping the first [`DELEGATION_PROBE_OUTPUT_MAX_BYTES`]
/// in `buf`, then reports [`ProbeEvent::StreamClosed`].
fn collect(
    mut src: impl Read + Send + 'static,
    buf: Arc<Lock<Vec<u8>>>,
    tx: mpsc::Sender<ProbeEvent>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("agent-probe-read".into())
        .spawn(move || {
            let mut chunk = [0u8; 4096];
            loop {
                match src.read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => {
                        let mut b = buf.lock();
                        let room = DELEGATION_PROBE_OUTPUT_MAX_BYTES.saturating_sub(b.len());
                        b.extend_from_slice(&chunk[..n.min(room)]);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            let _ = tx.send(ProbeEvent::StreamClosed);
        })
        .map(drop)
}

/// Most characters of [`AgentStatus::version`] (a real version line is under 100).
pub const VERSION_MAX_CHARS: usize = 200;

/// The version `--version` printed: the first non-empty line of stdout, else of stderr, its
/// control characters removed, cut to [`VERSION_MAX_CHARS`]; `Ok(None)` when it printed
/// nothing. The error (a phrase) when that line is not text: not UTF-8, or with a NUL.
fn version_line(out: &ProbeOutput) -> Result<Option<String>, &'static str> {
    let first = |bytes: &[u8]| -> Option<Vec<u8>> {
        bytes
            .split(|&b| b == b'\n')
            .map(<[u8]>::trim_ascii)
            .find(|l| !l.is_empty())
            .map(<[u8]>::to_vec)
    };
    let Some(line) = first(&out.stdout).or_else(|| first(&out.stderr)) else {
        return Ok(None);
    };
    let text = match std::str::from_utf8(&line) {
        Ok(t) if !t.contains('\0') => t,
        _ => return Err("something that is not text"),
    };
    let clean: String = text
        .chars()
        .filter(|c| !c.is_control())
        .take(VERSION_MAX_CHARS)
        .collect();
    let clean = clean.trim();
    Ok((!clean.is_empty()).then(|| clean.to_owned()))
}

fn last_line(bytes: &[u8]) -> Option<String> {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .map(str::to_owned)
}

/// "exit code 3 (<the last line of stderr, else of stdout>)".
fn exit_problem(out: &ProbeOutput) -> String {
    use std::os::unix::process::ExitStatusExt;
    let how = match (out.status.code(), out.status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => out.status.to_string(),
    };
    match last_line(&out.stderr).or_else(|| last_line(&out.stdout)) {
        Some(line) => format!("{how} ({line})"),
        None => how,
    }
}

/// The MCP server a worker agent is told to start (see [`command`]): this binary in its worker
/// mode, which reaches the daemon through the variables named in `env_names`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerMcp {
    /// The server's executable (absolute).
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Environment variables the agent must pass on to the server (names only: their values,
    /// a capability among them, never go in an argv, which other users can read).
    pub env_names: Vec<String>,
}

/// The name the worker MCP server has in the agent's configuration (its tools are
/// `machine_bridge`'s to the agent).
const WORKER_MCP_NAME: &str = "machine_bridge";

/// Gemini's `-p` text: Gemini appends it to what it reads on stdin, where the task is.
pub const GEMINI_STDIN_PROMPT: &str = "Do the task given on standard input.";

/// The command that runs one delegation: `argv[0]` is the executable; the prompt goes on stdin
/// (a 256 KiB prompt does not fit one argv string: Linux `MAX_ARG_STRLEN` is 128 KiB); the cwd
/// (the project directory) is the caller's to set.
///
/// - Codex: `codex exec --json --skip-git-repo-check [-c mcp_servers.machine_bridge.command=…
///   -c mcp_servers.machine_bridge.args=[…] -c mcp_servers.machine_bridge.env_vars=[…]] -`
///   (the `-c` values are TOML, encoded by the `toml` crate; `env_vars` makes Codex pass those
///   variables to the server).
/// - Claude: `claude -p --output-format stream-json --verbose [--mcp-config
///   {"mcpServers":{"machine_bridge":{"command":…,"args":[…]}}}]` (Claude Code starts stdio
///   servers with its own environment, so `env_names` needs no flag).
/// - Gemini: `gemini --output-format stream-json -p "`[`GEMINI_STDIN_PROMPT`]`"`. Gemini takes
///   MCP servers only from its settings files, which are the user's and are not edited:
///   `worker_mcp` is ignored, so a Gemini worker cannot delegate further.
///
/// `worker_mcp`: when `Some`, the agent is told (by its own config flags, not by editing files)
/// to start `program args…` as an MCP server named `machine_bridge` that inherits the variables
/// named in `env_names`. Non-interactive; the agent's own permission settings are untouched (no
/// sandbox, approval or allowed-tools flag is added). A non-UTF-8 `program` path is passed to
/// Codex and Claude lossily (their configuration is text).
pub fn command(agent: Agent, executable: &Path, worker_mcp: Option<&WorkerMcp>) -> Vec<OsString> {
    let mut argv: Vec<OsString> = vec![executable.as_os_str().to_owned()];
    let mut push = |args: &[&str]| argv.extend(args.iter().map(OsString::from));
    match agent {
        Agent::Codex => {
            push(&["exec", "--json", "--skip-git-repo-check"]);
            if let Some(w) = worker_mcp {
                let strings = |v: &[String]| {
                    toml::Value::Array(v.iter().cloned().map(toml::Value::String).collect())
                };
                let settings = [
                    (
                        "command",
                        toml::Value::String(w.program.to_string_lossy().into_owned()),
                    ),
                    ("args", strings(&w.args)),
                    ("env_vars", strings(&w.env_names)),
                ];
                for (key, value) in settings {
                    argv.push("-c".into());
                    argv.push(format!("mcp_servers.{WORKER_MCP_NAME}.{key}={value}").into());
                }
            }
            argv.push("-".into());
        }
        Agent::Claude => {
            push(&["-p", "--output-format", "stream-json", "--verbose"]);
            if let Some(w) = worker_mcp {
                let config = serde_json::json!({
                    "mcpServers": {
                        WORKER_MCP_NAME: {
                            "command": w.program.to_string_lossy(),
                            "args": w.args,
                        }
                    }
                });
                argv.push("--mcp-config".into());
                argv.push(config.to_string().into());
            }
        }
        Agent::Gemini => push(&["--output-format", "stream-json", "-p", GEMINI_STDIN_PROMPT]),
    }
    argv
}

/// Variables of the server's environment every agent keeps in an isolated environment: the
/// network settings a CLI needs to reach its service behind a proxy or a corporate CA (Claude
/// Code documents them; Codex and Gemini CLI, a Rust and a Node program, honour the same).
const NETWORK_ENV: &[&str] = &[
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "https_proxy",
    "http_proxy",
    "no_proxy",
    "all_proxy",
    "NODE_EXTRA_CA_CERTS",
];

/// Whether `agent` keeps the server's variable `name` in an isolated environment: its own
/// documented variables (authentication, its home, its endpoints), and `NETWORK_ENV`.
/// `is_set` tells whether a variable is set and not empty (a provider switch opens its
/// group). From each CLI's documentation:
/// - Codex ("Environment variables" of the Codex docs, developers.openai.com/codex):
///   `CODEX_*` (`CODEX_HOME`, `CODEX_SQLITE_HOME`, `CODEX_API_KEY`, `CODEX_ACCESS_TOKEN`, ...)
///   and `OPENAI_*` (`OPENAI_API_KEY`, `OPENAI_BASE_URL`, workload identity). A key a user
///   named with a model provider's `env_key` in `~/.codex/config.toml` is not known here: it
///   does not pass.
/// - Claude Code (code.claude.com/docs/en/env-vars): `ANTHROPIC_*`, `CLAUDE_CODE_*`,
///   `CLAUDE_CONFIG_DIR`; with `CLAUDE_CODE_USE_BEDROCK` set also `AWS_*` (Bedrock's
///   credentials and region); with `CLAUDE_CODE_USE_VERTEX` set also `CLOUD_ML_REGION`,
///   `VERTEX_REGION_*`, `GOOGLE_CLOUD_*` and `GOOGLE_APPLICATION_CREDENTIALS`.
/// - Gemini CLI (its authentication and configuration docs, google-gemini/gemini-cli):
///   `GEMINI_*` (`GEMINI_API_KEY`, `GEMINI_MODEL`, ...), `GOOGLE_API_KEY`, `GOOGLE_GENAI_*`
///   (`GOOGLE_GENAI_USE_VERTEXAI`, `GOOGLE_GENAI_USE_GCA`), `GOOGLE_CLOUD_*` (project and
///   location) and `GOOGLE_APPLICATION_CREDENTIALS`.
///
/// The variables the server drops for every agent (`DROPPED_ENV_PREFIXES` of the engine, such
/// as `CLAUDE_CODE_ENTRYPOINT`) are dropped even when they match.
pub fn keeps_env(agent: Agent, name: &str, is_set: &dyn Fn(&str) -> bool) -> bool {
    if NETWORK_ENV.contains(&name) {
        return true;
    }
    let prefixed = |prefixes: &[&str]| prefixes.iter().any(|p| name.starts_with(p));
    match agent {
        Agent::Codex => prefixed(&["CODEX_", "OPENAI_"]),
        Agent::Claude => {
            prefixed(&["ANTHROPIC_", "CLAUDE_CODE_"])
                || name == "CLAUDE_CONFIG_DIR"
                || (is_set("CLAUDE_CODE_USE_BEDROCK") && prefixed(&["AWS_"]))
                || (is_set("CLAUDE_CODE_USE_VERTEX")
                    && (prefixed(&["VERTEX_REGION_", "GOOGLE_CLOUD_"])
                        || name == "CLOUD_ML_REGION"
                        || name == "GOOGLE_APPLICATION_CREDENTIALS"))
        }
        Agent::Gemini => {
            prefixed(&["GEMINI_", "GOOGLE_GENAI_", "GOOGLE_CLOUD_"])
                || name == "GOOGLE_API_KEY"
                || name == "GOOGLE_APPLICATION_CREDENTIALS"
        }
    }
}

/// What an agent's output said, once it ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    /// The agent's session (Codex: thread) id, to resume it by hand.
    pub session_id: Option<String>,
    /// The final answer (Codex: the last agent message; Claude: the `result`, else the last
    /// assistant text; Gemini: the assistant text after the last tool call, deltas joined), at
    /// most [`DELEGATION_OUTPUT_MAX_BYTES`], cut on a character boundary. `None` when the
    /// agent gave none or reported an error as its result.
    pub answer: Option<String>,
    /// Whether `answer` was cut to [`DELEGATION_OUTPUT_MAX_BYTES`].
    pub answer_truncated: bool,
    /// The error the agent reported (Codex `turn.failed`/`error`; Claude an error `result`;
    /// Gemini a `result` with status error or an `error` event of severity error), at most
    /// [`DELEGATION_OUTPUT_MAX_BYTES`]. It may be set beside an answer (a transient error the
    /// agent recovered from): the exit status decides.
    pub error: Option<String>,
}

/// Incremental parser of the agent's stdout (JSON lines): session id, final answer, error.
/// Tolerant: a line that is not a JSON object, an unknown event type and unknown fields are
/// ignored. Memory is bounded by [`DELEGATION_OUTPUT_MAX_BYTES`] per kept text (the caller
/// bounds the length of one line).
#[derive(Debug)]
pub struct OutputParser {
    agent: Agent,
    session_id: Option<String>,
    answer: Bounded,
    has_answer: bool,
    /// Claude: a `result` event was seen (its answer, or lack of one, is final).
    result_seen: bool,
    /// Codex: `turn.failed` was seen (its message outranks `error` events).
    turn_failed: bool,
    /// Gemini: the next assistant text starts a new answer (a tool ran since the last one).
    fresh_message: bool,
    error: Option<String>,
}

impl OutputParser {
    /// A parser for `agent`'s output format.
    pub fn new(agent: Agent) -> Self {
        Self {
            agent,
            session_id: None,
            answer: Bounded::default(),
            has_answer: false,
            result_seen: false,
            turn_failed: false,
            fresh_message: true,
            error: None,
        }
    }

    /// Takes one stdout line (without its `\n`; a trailing `\r` is ignored). A line that is not
    /// a JSON object is ignored.
    pub fn line(&mut self, line: &[u8]) {
        let Ok(event) = serde_json::from_slice::<Value>(line.trim_ascii()) else {
            return;
        };
        if !event.is_object() {
            return;
        }
        let kind = event.get("type").and_then(Value::as_str).unwrap_or("");
        match self.agent {
            Agent::Codex => self.codex_event(kind, &event),
            Agent::Claude => self.claude_event(kind, &event),
            Agent::Gemini => self.gemini_event(kind, &event),
        }
    }

    /// The session id seen so far (Codex `thread.started`, Claude `session_id`, Gemini `init`).
    pub fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    /// What the output said.
    pub fn finish(self) -> Parsed {
        Parsed {
            session_id: self.session_id,
            answer: self.has_answer.then_some(self.answer.text),
            answer_truncated: self.has_answer && self.answer.truncated,
            error: self.error,
        }
    }

    /// `codex exec --json`: `thread.started`, `item.completed`, `turn.completed`,
    /// `turn.failed`, `error`.
    fn codex_event(&mut self, kind: &str, event: &Value) {
        match kind {
            "thread.started" => self.set_session(str_at(event, "thread_id")),
            "item.completed" => {
                let item = event.get("item").unwrap_or(&Value::Null);
                let item_type = str_at(item, "type").or_else(|| str_at(item, "item_type"));
                if matches!(
                    item_type.as_deref(),
                    Some("agent_message" | "assistant_message")
                ) && let Some(text) = item.get("text").and_then(Value::as_str)
                {
                    self.replace_answer(text);
                }
            }
            "turn.completed" if !self.turn_failed => self.error = None,
            "turn.failed" => {
                self.turn_failed = true;
                let message = event.get("error").and_then(|e| str_at(e, "message"));
                self.set_error(message.unwrap_or_else(|| "codex: the turn failed".into()));
            }
            "error" if !self.turn_failed => {
                let message = str_at(event, "message");
                self.set_error(message.unwrap_or_else(|| "codex reported an error".into()));
            }
            _ => {}
        }
    }

    /// `claude -p --output-format stream-json`: `system`/`init`, `assistant`, `result`.
    fn claude_event(&mut self, kind: &str, event: &Value) {
        if self.session_id.is_none() {
            self.set_session(str_at(event, "session_id"));
        }
        match kind {
            "assistant" if !self.result_seen => {
                let text = assistant_text(event);
                if !text.is_empty() {
                    self.replace_answer(&text);
                }
            }
            "result" => {
                self.result_seen = true;
                let subtype = str_at(event, "subtype").unwrap_or_default();
                let is_error = event.get("is_error").and_then(Value::as_bool) == Some(true);
                let result = str_at(event, "result");
                if is_error || subtype != "success" {
                    self.clear_answer();
                    let errors = event.get("errors").and_then(Value::as_array).map(|list| {
                        list.iter()
                            .filter_map(|e| {
                                e.as_str()
                                    .map(str::to_owned)
                                    .or_else(|| str_at(e, "message"))
                            })
                            .collect::<Vec<_>>()
                            .join("; ")
                    });
                    let message = result
                        .filter(|r| !r.trim().is_empty())
                        .or(errors.filter(|e| !e.is_empty()))
                        .unwrap_or_else(|| format!("claude ended with {subtype}"));
                    self.set_error(message);
                } else {
                    self.error = None;
                    if let Some(r) = result {
                        self.replace_answer(&r);
                    }
                }
            }
            _ => {}
        }
    }

    /// `gemini --output-format stream-json`: `init`, `message`, `tool_use`, `tool_result`,
    /// `error`, `result`.
    fn gemini_event(&mut self, kind: &str, event: &Value) {
        match kind {
            "init" => self.set_session(str_at(event, "session_id")),
            "message" if str_at(event, "role").as_deref() == Some("assistant") => {
                let content = str_at(event, "content").unwrap_or_default();
                let delta = event.get("delta").and_then(Value::as_bool).unwrap_or(false);
                if delta && !self.fresh_message {
                    self.answer.push(&content);
                    self.has_answer = true;
                } else {
                    self.replace_answer(&content);
                }
                self.fresh_message = false;
            }
            "tool_use" | "tool_result" => self.fresh_message = true,
            "error" => {
                let severity = str_at(event, "severity");
                if severity.as_deref() != Some("warning") {
                    let message = str_at(event, "message");
                    self.set_error(message.unwrap_or_else(|| "gemini reported an error".into()));
                }
            }
            "result" => match str_at(event, "status").as_deref() {
                Some("success") => self.error = None,
                status => {
                    let message = event.get("error").and_then(|e| str_at(e, "message"));
                    self.set_error(message.unwrap_or_else(|| {
                        format!("gemini ended with status {}", status.unwrap_or("unknown"))
                    }));
                }
            },
            _ => {}
        }
    }

    /// Takes a session id the agent reported unless it is empty, longer than
    /// [`SESSION_ID_MAX_BYTES`] or holds a control character (an ESC or NUL would reach the
    /// people and the terminals it is shown to, and no agent's CLI could resume it).
    fn set_session(&mut self, id: Option<String>) {
        if let Some(id) = id.filter(|i| {
            !i.is_empty() && i.len() <= SESSION_ID_MAX_BYTES && !i.chars().any(char::is_control)
        }) {
            self.session_id = Some(id);
        }
    }

    fn replace_answer(&mut self, text: &str) {
        self.answer = Bounded::default();
        self.answer.push(text);
        self.has_answer = true;
    }

    fn clear_answer(&mut self) {
        self.answer = Bounded::default();
        self.has_answer = false;
    }

    fn set_error(&mut self, message: String) {
        let mut b = Bounded::default();
        b.push(&message);
        self.error = Some(b.text);
    }
}

/// Most bytes of a session id taken from an agent's output (real ones are UUIDs).
const SESSION_ID_MAX_BYTES: usize = 256;

/// The string at `key` of a JSON object, if it is one.
fn str_at(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// The text blocks of a Claude `assistant` event's message, joined.
fn assistant_text(event: &Value) -> String {
    event
        .pointer("/message/content")
        .and_then(Value::as_array)
        .map(|blocks| {
            blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("")
        })
        .unwrap_or_default()
}

/// Text kept up to [`DELEGATION_OUTPUT_MAX_BYTES`], cut on a character boundary.
#[derive(Debug, Default)]
struct Bounded {
    text: String,
    truncated: bool,
}

impl Bounded {
    fn push(&mut self, s: &str) {
        let room = DELEGATION_OUTPUT_MAX_BYTES.saturating_sub(self.text.len());
        if s.len() <= room {
            self.text.push_str(s);
            return;
        }
        let mut cut = room;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        self.text.push_str(&s[..cut]);
        self.truncated = true;
    }
}

#[cfg(test)]
mod tests;
