//! The MCP server a delegation worker connects to (`machine-mcp delegation worker-mcp`): the
//! agent that runs a delegation starts it as its `machine_bridge` MCP server, with the variables
//! [`WorkerAccess::grant`](super::worker::WorkerAccess::grant) gave the run ([`SOCKET_VAR`],
//! [`REQUEST_VAR`], [`CAPABILITY_VAR`]).
//!
//! [`connect`] authenticates over the server's owner-only worker socket (the HMAC challenge of
//! [`super::worker`]) before anything is served; the [`WorkerTools`] it returns are three tools
//! that forward to the socket: `delegate` (a child request inside the worker's project),
//! `read_delegation` and `list_delegations` (the worker's own tree), which the MCP plumbing
//! serves over stdio (`mcp::stdio::serve_tool_set`, a [`ToolSet`]). An error the socket
//! answers becomes a tool error with its code; the capability expires when the worker's run
//! ends, and calls then fail with `policy_denied` (detail `socket_error: "invalid_capability"`).

mod connection;

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use serde_json::{Map, Value};

use crate::{limits::DELEGATION_PROMPT_MAX_BYTES, limits::RESULT_TEXT_DEFAULT_CHARS};

use super::{
    engine::{ReceiptSummary, agents::Agent, store::Receipt},
    worker::{CAPABILITY_VAR, REQUEST_VAR, SOCKET_VAR},
};
use crate::call::{
    catalog::{Hints, Reply},
    error::ToolError,
    text::{self, TextView},
    tool_set::{About, CallFuture, ToolDef, ToolSet},
};
use connection::Connection;

/// Why the worker MCP server could not serve.
#[derive(Debug, thiserror::Error)]
pub enum WorkerMcpError {
    /// A variable the run gives its worker is missing: the command was not started by an agent
    /// that machine-mcp runs as a delegation worker.
    #[error(
        "{0} is not set: `machine-mcp delegation worker-mcp` is the MCP server of an agent that \
         machine-mcp runs as a delegation worker, started with the variables that run was given \
         ({SOCKET_VAR}, {REQUEST_VAR}, {CAPABILITY_VAR})"
    )]
    MissingVar(&'static str),
    /// The capability variable is not 64 hex digits.
    #[error("{CAPABILITY_VAR} is not 64 hex digits")]
    BadCapability,
    /// The socket cannot be reached.
    #[error("cannot connect to the delegation socket {path}: {source}")]
    Connect {
        /// The socket's path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The socket refused this worker (`not_owner`, `invalid_capability`, `busy`, ...).
    #[error("the delegation socket refused this worker: {0}")]
    Refused(String),
    /// The socket answered something this program does not understand.
    #[error("the delegation socket: {0}")]
    Protocol(String),
}

impl WorkerMcpError {
    /// The process exit status for this error: 2 when the environment is not a worker's (a
    /// usage error), 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::MissingVar(_) | Self::BadCapability => 2,
            _ => 1,
        }
    }
}

/// Connects to the worker socket the run's variables name (`MACHINE_MCP_DELEGATION_SOCKET`,
/// `MACHINE_MCP_DELEGATION_REQUEST`, `MACHINE_MCP_DELEGATION_CAPABILITY`) and authenticates (module docs): the worker's tools, to serve on stdio.
///
/// # Errors
/// [`WorkerMcpError::MissingVar`] / [`WorkerMcpError::BadCapability`] for the environment
/// (exit status 2: [`WorkerMcpError::exit_code`]); [`WorkerMcpError::Connect`],
/// [`WorkerMcpError::Refused`] or [`WorkerMcpError::Protocol`] when the socket cannot be used.
pub async fn connect() -> Result<WorkerTools, WorkerMcpError> {
    let var = |name: &'static str| {
        std::env::var(name)
            .ok()
            .filter(|v| !v.is_empty())
            .ok_or(WorkerMcpError::MissingVar(name))
    };
    let socket = PathBuf::from(var(SOCKET_VAR)?);
    let request_id = var(REQUEST_VAR)?;
    let capability = hex::decode(var(CAPABILITY_VAR)?)
        .ok()
        .filter(|c| c.len() == 32)
        .ok_or(WorkerMcpError::BadCapability)?;
    let connection = Connection::open(socket, &request_id, &capability).await?;
    Ok(WorkerTools {
        connection,
        tools: tools(),
    })
}

/// `delegate` as a worker calls it.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct DelegateArgs {
    /// The agent CLI that does the work: codex, claude or gemini.
    agent: Agent,
    /// The task, as the agent should read it (UTF-8, at most 256 KiB).
    prompt: String,
    /// The directory the agent works in: relative to this worker's project directory, or
    /// absolute inside it (default: the project directory itself).
    #[serde(default = "project_dir")]
    path: String,
    /// A new UUID you choose (e.g. `0e5bd5c2-7a1e-4c1b-9a0f-3c8d2b6f4e11`); calling again with
    /// the same id and arguments returns the same receipt instead of starting a second run.
    request_id: String,
}

/// The default `path` of a worker's `delegate`: its own project directory (the main server's
/// `delegate` defaults to its workspace root in the same way).
fn project_dir() -> String {
    ".".to_owned()
}

/// `read_delegation` as a worker calls it.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    /// The request id given to `delegate`.
    request_id: String,
    /// Milliseconds to wait for the delegation to end before answering (0 to 60000; default 0).
    #[serde(default)]
    #[schemars(range(max = 60_000))]
    wait_ms: u64,
}

/// `list_delegations` as a worker calls it (no arguments).
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListArgs {}

/// `list_delegations`' result.
#[derive(Debug, Serialize, JsonSchema)]
struct WorkerList {
    /// The requests of this worker's tree, its own included.
    delegations: Vec<ReceiptSummary>,
}

fn tools() -> Vec<ToolDef> {
    vec![
        ToolDef::structured::<DelegateArgs, Receipt>(
            "delegate",
            "Delegate a task to another agent",
            "Hand a task to another agent CLI (codex, claude or gemini) on this machine, as a \
             child of your own run, in a directory inside your project. Returns a receipt at \
             once (status queued or running); follow it with read_delegation. Refused with \
             limit_exceeded when the tree is too deep (depth 4) or large (16 requests), or \
             when no slot is free now (reason capacity: it would wait behind your own run).",
            Hints {
                read_only: false,
                destructive: false,
                idempotent: true,
                open_world: true,
            },
        ),
        ToolDef::structured::<ReadArgs, Receipt>(
            "read_delegation",
            "Read a delegation's receipt",
            "The receipt of a request in your delegation tree: status (queued, running, \
             completed, failed, unknown), delivery_state, and the agent's final answer once it \
             ended. wait_ms (up to 60000) waits for the end first.",
            Hints::READ,
        ),
        ToolDef::structured::<ListArgs, WorkerList>(
            "list_delegations",
            "List your delegation tree",
            "The requests of your delegation tree (your own run and what it delegated), each \
             with its agent, status and depth.",
            Hints::READ,
        ),
    ]
}

/// Decodes a tool's arguments into `A` and back to the socket's argument object (so unknown
/// fields and wrong types are refused here, with the tool's name).
fn checked<A: DeserializeOwned + Serialize>(
    tool: &str,
    args: Map<String, Value>,
) -> Result<Map<String, Value>, ToolError> {
    let a: A = serde_json::from_value(Value::Object(args))
        .map_err(|e| ToolError::invalid(format!("invalid arguments for {tool}: {e}")))?;
    match serde_json::to_value(a) {
        Ok(Value::Object(o)) => Ok(o),
        _ => Err(ToolError::internal("arguments are an object")),
    }
}

/// The worker's three tools over one authenticated connection ([`connect`]).
#[derive(Debug)]
pub struct WorkerTools {
    connection: Connection,
    tools: Vec<ToolDef>,
}

impl WorkerTools {
    async fn call(
        &self,
        name: &str,
        args: Map<String, Value>,
    ) -> Result<(Value, String), ToolError> {
        let (op, args) = match name {
            "delegate" => {
                let args = checked::<DelegateArgs>(name, args)?;
                let prompt_len = args
                    .get("prompt")
                    .and_then(Value::as_str)
                    .map_or(0, str::len);
                if prompt_len > DELEGATION_PROMPT_MAX_BYTES {
                    return Err(ToolError::invalid(format!(
                        "the prompt has {prompt_len} bytes; at most {DELEGATION_PROMPT_MAX_BYTES}"
                    )));
                }
                ("delegate", args)
            }
            "read_delegation" => ("read", checked::<ReadArgs>(name, args)?),
            _ => ("list", checked::<ListArgs>(name, args)?),
        };
        let value = self.connection.call(op, args).await?;
        let text = text::render(&View { op, value: &value });
        Ok((value, text))
    }
}

impl ToolSet for WorkerTools {
    fn about(&self) -> About {
        About {
            title: "machine-bridge delegation worker",
            description: "Delegate to other agent CLIs from a delegation worker",
            instructions: "You run as a delegated worker. delegate hands a sub-task to another \
                           agent CLI inside your project; read_delegation (with wait_ms) returns \
                           its receipt and answer; list_delegations shows your tree.",
        }
    }

    fn tools(&self) -> &[ToolDef] {
        &self.tools
    }

    fn call<'a>(&'a self, name: &'a str, arguments: Map<String, Value>) -> CallFuture<'a> {
        Box::pin(async move {
            let (value, text) = WorkerTools::call(self, name, arguments).await?;
            Ok(Reply::Structured { value, text })
        })
    }
}

/// The readable text of a forwarded result.
struct View<'a> {
    op: &'a str,
    value: &'a Value,
}

impl TextView for View<'_> {
    fn summary(&self) -> String {
        let v = self.value;
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("-").to_owned();
        if self.op == "list" {
            let n = v["delegations"].as_array().map_or(0, Vec::len);
            return format!(
                "{} in this worker's tree",
                text::count(n as u64, "delegation", "delegations")
            );
        }
        let status = s("status");
        let mut line = format!(
            "delegation {} to {}: {status}, delivery {}",
            s("request_id"),
            s("agent"),
            s("delivery_state")
        );
        if let Some(code) = v.get("diagnostic_code").and_then(Value::as_str) {
            line.push_str(&format!("; {code}: {}", s("diagnostic_message")));
        }
        if matches!(status.as_str(), "queued" | "running") {
            line.push_str(&format!(
                "; wait for it: read_delegation with \"request_id\": {} and \"wait_ms\": 60000",
                text::arg(&s("request_id"))
            ));
        } else if v.get("output_truncated").and_then(Value::as_bool) == Some(true) {
            line.push_str("; the answer was cut at its bound");
        }
        line
    }

    fn body(&self, out: &mut String) {
        let limit = text::body_limit(RESULT_TEXT_DEFAULT_CHARS);
        let mut budget = text::Budget::new(limit);
        if self.op == "list" {
            for d in self.value["delegations"].as_array().into_iter().flatten() {
                let s = |k: &str| {
                    d.get(k).map_or("-".to_owned(), |v| match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    })
                };
                let line = format!(
                    "{} {} {} depth {}\n",
                    s("request_id"),
                    s("agent"),
                    s("status"),
                    s("depth")
                );
                if !budget.take(line.len()) {
                    out.push_str("… more in structuredContent\n");
                    break;
                }
                out.push_str(&line);
            }
            return;
        }
        if let Some(answer) = self.value.get("output").and_then(Value::as_str) {
            let marker = "\n[cut here; structuredContent has the whole answer]\n";
            if answer.len() <= limit {
                out.push_str(answer);
            } else {
                out.push_str(&text::cut(answer.to_owned(), limit - marker.len(), marker));
            }
        }
    }
}
