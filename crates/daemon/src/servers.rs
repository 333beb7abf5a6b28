//! Upstream MCP servers: the `--servers FILE` format and their catalogs.
//!
//! The file is the `mcpServers` JSON users already have from Claude Desktop:
//! `{"mcpServers": {"NAME": {"command": "...", "args": [...], "env": {...}}}}`. Each entry is a
//! stdio server the daemon carries to remote clients as `/b/{bridge}/s/{NAME}/mcp`, one child
//! process per MCP session. Entries with a `url` (remote servers) or `"disabled": true` are
//! skipped with a warning.

use std::{collections::BTreeMap, path::Path, process::Stdio, time::Duration};

use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use protocol::{
    Role,
    frame::{RUNTIME_SERVER, ServerInfo},
    head::{
        Head,
        discover::{DiscoverFrom, discover_from_initialize, lists_modern},
    },
    mcp::LATEST_SESSION_VERSION,
};

/// Longest time a server may take to start and answer `initialize` and `tools/list`.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// One upstream server from the servers file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamSpec {
    /// Its name (the `{server}` of its URL).
    pub name: String,
    /// Program to run.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment variables.
    pub env: BTreeMap<String, String>,
    /// Working directory (the workspace).
    pub cwd: std::path::PathBuf,
}

#[derive(Debug, Deserialize)]
struct File {
    #[serde(rename = "mcpServers")]
    mcp_servers: BTreeMap<String, Entry>,
}

#[derive(Debug, Deserialize)]
struct Entry {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    url: Option<String>,
    #[serde(default)]
    disabled: bool,
}

/// Parses a servers file; `cwd` is where the servers run.
///
/// # Errors
/// A message naming the file and the problem: unreadable, not JSON of that shape, a bad name.
pub fn load(path: &Path, cwd: &Path) -> Result<Vec<UpstreamSpec>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse(&text, cwd).map_err(|e| format!("{}: {e}", path.display()))
}

fn parse(text: &str, cwd: &Path) -> Result<Vec<UpstreamSpec>, String> {
    let file: File = serde_json::from_str(text)
        .map_err(|e| format!("not a {{\"mcpServers\": {{...}}}} servers file: {e}"))?;
    let mut out = Vec::new();
    for (name, e) in file.mcp_servers {
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !valid || name == RUNTIME_SERVER {
            return Err(format!(
                "server name {name:?} must be 1-64 letters, digits, '-' or '_' and not {RUNTIME_SERVER:?}"
            ));
        }
        if e.disabled {
            tracing::warn!(server = %name, "skipping a disabled server");
            continue;
        }
        let Some(command) = e.command else {
            if e.url.is_some() {
                tracing::warn!(server = %name, "skipping a remote (url) server: only stdio servers can be carried");
                continue;
            }
            return Err(format!("server {name:?} has no command"));
        };
        out.push(UpstreamSpec {
            name,
            command,
            args: e.args,
            env: e.env,
            cwd: cwd.to_owned(),
        });
    }
    Ok(out)
}

/// Whether `role` may call every tool of an upstream server, not only the read-only ones: owners
/// and operators may; editors and reviewers may not (the daemon cannot know what an upstream
/// tool does beyond its `readOnlyHint`).
pub fn calls_every_upstream_tool(role: Role) -> bool {
    match role {
        Role::Owner | Role::Operator => true,
        Role::Editor | Role::Reviewer => false,
    }
}

/// Whether `role` may call `tool` of an upstream server: owners and operators may call every
/// tool; editors and reviewers only tools annotated `readOnlyHint: true`.
pub fn role_allows(role: Role, tool: &Value) -> bool {
    calls_every_upstream_tool(role)
        || tool.pointer("/annotations/readOnlyHint") == Some(&Value::Bool(true))
}

/// A `tools/list` result with only the tools `role` may call.
pub fn filter_tools(role: Role, result: &Value) -> Value {
    let mut r = result.clone();
    if let Some(tools) = r.get_mut("tools").and_then(Value::as_array_mut) {
        tools.retain(|t| role_allows(role, t));
    }
    r
}

/// Starts `spec` once, runs `initialize`, `tools/list` and `server/discover`, and returns its
/// catalog: the child's own `server/discover` result when it serves 2026-07-28, otherwise the one
/// the era bridge derives from `initialize` ([`discover_from_initialize`], [`DiscoverFrom::EraBridge`]).
///
/// # Errors
/// A message saying why the server could not be probed.
pub async fn probe(spec: &UpstreamSpec) -> Result<ServerInfo, String> {
    tokio::time::timeout(PROBE_TIMEOUT, probe_inner(spec))
        .await
        .map_err(|_| {
            format!(
                "did not answer initialize and tools/list within {} s",
                PROBE_TIMEOUT.as_secs()
            )
        })?
}

async fn probe_inner(spec: &UpstreamSpec) -> Result<ServerInfo, String> {
    let mut child = spawn(spec).map_err(|e| format!("cannot start {}: {e}", spec.command))?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let send = |v: Value| format!("{v}\n");
    stdin
        .write_all(
            send(
                json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": LATEST_SESSION_VERSION, "capabilities": {},
                "clientInfo": {"name": "machine-mcp", "version": env!("CARGO_PKG_VERSION")}}}),
            )
            .as_bytes(),
        )
        .await
        .map_err(|e| e.to_string())?;
    let init = read_response(&mut lines, 1).await?;
    stdin
        .write_all(
            send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).as_bytes(),
        )
        .await
        .map_err(|e| e.to_string())?;
    let mut tools: Vec<Value> = Vec::new();
    let mut cursor: Option<String> = None;
    for page in 0..20 {
        let mut params = json!({});
        if let Some(c) = &cursor {
            params["cursor"] = json!(c);
        }
        let id = 2 + page;
        stdin
            .write_all(
                send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": params}))
                    .as_bytes(),
            )
            .await
            .map_err(|e| e.to_string())?;
        let r = read_response(&mut lines, id).await?;
        tools.extend(
            r.get("tools")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
        );
        cursor = r
            .get("nextCursor")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if cursor.is_none() {
            break;
        }
    }
    // A dual-era child describes itself (MCP 2026-07-28 Server › Discover): its own answer, with
    // the capabilities only that era has (the tasks extension), is what the relay serves for it.
    // A handshake-era child answers -32601 or nothing; its discover is derived from initialize.
    let discover_id = 2 + 20;
    let own = async {
        stdin
            .write_all(send(crate::bridge::discover_probe(json!(discover_id))).as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        read_response(&mut lines, discover_id).await
    };
    let own = tokio::time::timeout(crate::bridge::DISCOVER_PROBE_TIMEOUT, own)
        .await
        .ok()
        .and_then(Result::ok)
        .filter(lists_modern);
    let _ = child.start_kill();
    let all = json!({ "tools": tools });
    Ok(ServerInfo {
        name: spec.name.clone(),
        discover: Some(
            own.unwrap_or_else(|| discover_from_initialize(&init, DiscoverFrom::EraBridge)),
        ),
        initialize: init,
        initialize_by_version: BTreeMap::new(),
        tools: Role::ALL
            .into_iter()
            .map(|r| (r.as_str().to_owned(), filter_tools(r, &all)))
            .collect(),
    })
}

async fn read_response<R: tokio::io::AsyncBufRead + Unpin>(
    lines: &mut tokio::io::Lines<R>,
    id: i64,
) -> Result<Value, String> {
    match read_answer(lines, &json!(id)).await? {
        Some(Ok(result)) => Ok(result),
        Some(Err(e)) => Err(format!("answered with an error: {e}")),
        None => Err("exited before answering".into()),
    }
}

/// Reads a child's output `lines` until the answer to the daemon's request `id` (a message
/// without a `method` whose id is `id`), skipping every other line (what is not JSON, the
/// child's notifications and requests, answers to other ids). Returns the answer: `Ok` with its
/// `result` (null when it has none) or, when it has an `error` member, `Err` with that error;
/// `None` when the output ended before it.
///
/// # Errors
/// Reading the output failed (the I/O error's text).
pub(crate) async fn read_answer<R: tokio::io::AsyncBufRead + Unpin>(
    lines: &mut tokio::io::Lines<R>,
    id: &Value,
) -> Result<Option<Result<Value, Value>>, String> {
    while let Some(line) = lines.next_line().await.map_err(|e| e.to_string())? {
        let Ok(mut v) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let head = Head::of(&v);
        if head.id_member() == Some(id) && !head.has_method() {
            let Some(answer) = v.as_object_mut() else {
                continue;
            };
            if let Some(e) = answer.remove("error") {
                return Ok(Some(Err(e)));
            }
            return Ok(Some(Ok(answer.remove("result").unwrap_or(Value::Null))));
        }
    }
    Ok(None)
}

/// Starts an upstream server with piped stdio in its own process group, tagged so that the
/// runtime's watchdog ends it (and what it started) if the daemon is killed.
///
/// The command is resolved by `runtime::programs::find` (never from a writable workspace).
pub(crate) fn spawn(spec: &UpstreamSpec) -> std::io::Result<tokio::process::Child> {
    let (tree_key, tree_value) = runtime::tools::process::watchdog::tag_env();
    let named = std::path::Path::new(&spec.command);
    let command = if named.is_relative() && named.components().count() > 1 {
        spec.cwd.join(named).into_os_string()
    } else {
        named.as_os_str().to_owned()
    };
    let program = runtime::programs::find(&command, std::env::var_os("PATH").as_deref())
        .map_err(|why| std::io::Error::new(std::io::ErrorKind::PermissionDenied, why))?;
    tokio::process::Command::new(program)
        .args(&spec.args)
        .envs(&spec.env)
        .env(tree_key, tree_value)
        .current_dir(&spec.cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_desktop_format_is_read() {
        let text = r#"{"mcpServers": {
            "db": {"command": "db-mcp", "args": ["--ro"], "env": {"K": "V"}},
            "remote": {"url": "https://example.com/mcp"},
            "off": {"command": "x", "disabled": true}
        }}"#;
        let v = parse(text, Path::new("/w")).unwrap();
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].name, "db");
        assert_eq!(v[0].args, ["--ro"]);
        assert_eq!(v[0].env["K"], "V");
        assert!(
            parse(
                r#"{"mcpServers": {"runtime": {"command": "x"}}}"#,
                Path::new("/")
            )
            .is_err()
        );
        assert!(
            parse(
                r#"{"mcpServers": {"a b": {"command": "x"}}}"#,
                Path::new("/")
            )
            .is_err()
        );
        assert!(parse("[]", Path::new("/")).is_err());
    }

    #[test]
    fn restricted_roles_see_only_read_only_tools() {
        let list = json!({"tools": [
            {"name": "read", "annotations": {"readOnlyHint": true}},
            {"name": "write", "annotations": {"readOnlyHint": false}},
            {"name": "unknown"}
        ]});
        let names = |role: &str| -> Vec<String> {
            filter_tools(crate::role_named(role), &list)["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["name"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(names("owner"), ["read", "write", "unknown"]);
        assert_eq!(names("reviewer"), ["read"]);
        assert_eq!(names("editor"), ["read"]);
        assert_eq!(names("nobody"), ["read"]);
    }
}
