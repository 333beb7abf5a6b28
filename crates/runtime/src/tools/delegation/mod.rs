//! Background delegation to CLI agents (issue 19): `delegate`, `read_delegation`,
//! `list_delegations`, `cancel_delegation`, `agents_status`.
//!
//! A delegation hands a task to Codex, Claude Code or Gemini CLI on this machine, in a
//! directory of the workspace, and returns a receipt at once; the [`engine`]'s `Manager` runs
//! it and keeps the receipt honest (never re-run; `unknown` when its server died while it
//! ran). The tools that start or touch runs need an exec mode, like `run_process`;
//! `agents_status` only reads. A caller sees and cancels its own receipts; the owner sees all.

pub mod engine;
pub mod worker_mcp;

use std::{
    panic::AssertUnwindSafe,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use protocol::limits::{
    DELEGATION_PROMPT_MAX_BYTES, DELEGATION_RECORDS_MAX, RESULT_TEXT_DEFAULT_CHARS,
};

use crate::{
    Access,
    call::{
        catalog::{Hints, ToolMeta, ToolSpec},
        context::CallContext,
        error::{ToolError, ToolErrorCode, ToolResult},
        text::{Budget, TextView, body_limit, cut},
    },
    config::UserConfig,
    policy::Capability,
    tools::{
        blocking::blocking,
        family::{Family, FamilyState, Hook},
        info::NoArgs,
        process::Processes,
    },
};

use engine::{
    AgentEnvironment, AgentReport, DelegateRequest, ListedStatus, Manager, Origin, ReceiptSummary,
    Scope,
    agents::{self, Agent},
    store::Receipt,
};

/// The family's entry in the registry: the five delegation tools and the delegation manager
/// ([`DelegationState`]).
pub(crate) const FAMILY: Family = Family {
    specs,
    state: Some(DelegationState::make),
    resources: None,
    prompts: None,
};

/// What a runtime keeps for delegations: the state directory
/// ([`RuntimeConfig::state_dir`](crate::RuntimeConfig::state_dir); without one the tools
/// answer `unavailable`) and its [`Manager`], started on first use inside the Tokio runtime.
///
/// At shutdown the delegations this process runs end with it (their trees are terminated) and
/// their receipts say so honestly: a running one becomes `failed`, delivery `sent`, diagnostic
/// `server_stopped` (the agent got the prompt and was stopped before it answered; what it
/// changed so far stays; nothing is re-run), a queued one `failed`/`not_sent`.
#[derive(Debug)]
pub(crate) struct DelegationState {
    /// Unwind-safe as asserted: a panic while the manager is started leaves the cell empty, and
    /// the manager keeps no invariant a panic breaks.
    manager: Option<(
        PathBuf,
        AssertUnwindSafe<tokio::sync::OnceCell<Arc<Manager>>>,
    )>,
}

impl DelegationState {
    fn make(config: &crate::RuntimeConfig) -> Box<dyn FamilyState> {
        Box::new(Self {
            manager: config
                .state_dir
                .clone()
                .map(|d| (d, AssertUnwindSafe(tokio::sync::OnceCell::new()))),
        })
    }

    /// The manager of the state directory, started on first use (it must be called inside a
    /// Tokio runtime); `None` without a state directory.
    async fn manager(&self) -> Option<Arc<Manager>> {
        let (dir, cell) = self.manager.as_ref()?;
        let m = cell
            .get_or_init(|| Manager::start(dir, Default::default()))
            .await;
        Some(m.clone())
    }

    /// The manager, when it was started.
    fn started(&self) -> Option<&Arc<Manager>> {
        self.manager.as_ref().and_then(|(_, cell)| cell.get())
    }
}

impl FamilyState for DelegationState {
    fn shutdown(&self) -> Hook<'_> {
        Box::pin(async move {
            if let Some(m) = self.started() {
                m.shutdown().await;
            }
        })
    }

    fn activity(&self, activity: &mut crate::RuntimeActivity) {
        activity.active_delegations = self.started().map_or(0, |m| m.active());
    }
}

/// The delegation manager of `rt`'s runtime, started on first use.
///
/// # Errors
/// `unavailable` without a state directory.
async fn manager(rt: &Access) -> ToolResult<Arc<Manager>> {
    rt.state::<DelegationState>()?
        .manager()
        .await
        .ok_or_else(|| {
            ToolError::new(
                ToolErrorCode::Unavailable,
                "delegation needs a state directory, and this server has none",
            )
        })
}

pub(crate) fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec::structured(
            ToolMeta {
                name: "delegate",
                title: "Delegate a task to a CLI agent",
                description: "Hand a task to a coding agent CLI on this machine (agent: codex, \
                              claude or gemini; see agents_status) to run in the background in \
                              path (a directory of the workspace, default the root). prompt: the \
                              whole task, at most 256 KiB. request_id: a UUID you choose; calling \
                              again with the same request_id and arguments returns the same \
                              receipt and never runs it twice. Returns the receipt at once \
                              (queued or running); follow it with read_delegation. At most 6 run \
                              at once (2 per agent), 64 wait.",
                capability: Capability::ExecDirect,
                hints: Hints {
                    read_only: false,
                    destructive: true,
                    idempotent: true,
                    open_world: true,
                },
            },
            delegate,
        ),
        ToolSpec::structured(
            ToolMeta {
                name: "read_delegation",
                title: "Read a delegation's receipt",
                description: "Read a delegation's receipt: status (queued, running, completed, \
                              failed, unknown), delivery_state (not_sent, sent, unknown), the \
                              agent's session_id, times, diagnostic, and once completed the \
                              agent's final answer (output, at most 256 KiB). wait_ms (at most \
                              60000) waits until it has ended. unknown: the server that ran it \
                              stopped; the agent may have finished; it is never re-run.",
                capability: Capability::ExecDirect,
                hints: Hints::READ,
            },
            read_delegation,
        ),
        ToolSpec::structured(
            ToolMeta {
                name: "list_delegations",
                title: "List delegations",
                description: "List your delegations, newest first: request_id, agent, status, \
                              delivery_state, session_id, times and diagnostic (no output; \
                              read_delegation has it). A receipt file that cannot be read is \
                              listed as unreadable. A long list comes in pages: pass the \
                              answer's next_cursor as cursor for the next one.",
                capability: Capability::ExecDirect,
                hints: Hints::READ,
            },
            list_delegations,
        ),
        ToolSpec::structured(
            ToolMeta {
                name: "cancel_delegation",
                title: "Cancel a delegation",
                description: "Cancel a delegation: a queued one never starts; a running one's \
                              agent and every process it started are terminated (what it \
                              changed so far stays); the delegations its worker started are \
                              cancelled too. All end failed with diagnostic cancelled. \
                              A finished one is returned as it is. If it has not ended when this \
                              answers (another server runs it and has not acted yet), \
                              cancel_pending says so.",
                capability: Capability::ExecDirect,
                hints: Hints {
                    read_only: false,
                    destructive: true,
                    idempotent: true,
                    open_world: false,
                },
            },
            cancel_delegation,
        ),
        ToolSpec::structured(
            ToolMeta {
                name: "agents_status",
                title: "Status of the delegation agents",
                description: "Which agent CLIs delegate can use now: per agent (codex, claude, \
                              gemini) whether it is enabled in the user's config, found, its \
                              version, whether it is signed in, whether it can accept work and \
                              why not, and its last successful delegation. Never spends a model \
                              call.",
                capability: Capability::Read,
                hints: Hints::READ,
            },
            agents_status,
        ),
    ]
}

/// Arguments of `delegate`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DelegateArgs {
    /// The agent CLI: codex, claude or gemini.
    agent: Agent,
    /// The task, given to the agent on stdin (at most 262144 bytes of UTF-8).
    #[schemars(length(min = 1, max = DELEGATION_PROMPT_MAX_BYTES))]
    prompt: String,
    /// The directory the agent works in, inside the workspace (default: the workspace root).
    #[serde(default)]
    path: Option<String>,
    /// A UUID you choose (lowercase, hyphenated): the same request_id with the same agent,
    /// path and prompt returns the existing receipt; with others it is a conflict.
    request_id: String,
}

/// A delegation's receipt (the structured output of `delegate`, `read_delegation` and
/// `cancel_delegation`).
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ReceiptView {
    #[serde(flatten)]
    receipt: Receipt,
    /// cancel_delegation only, when the delegation had not ended when it answered: who is
    /// to carry the cancellation out and whether it has taken it up (the server running it
    /// may be stopped, or another process); read_delegation shows the outcome.
    #[serde(skip_serializing_if = "Option::is_none")]
    cancel_pending: Option<String>,
}

impl ReceiptView {
    /// The receipt with its directory in the caller's form.
    fn new(access: &Access, mut r: Receipt) -> Self {
        r.directory = access.workspace().display(Path::new(&r.directory));
        Self {
            receipt: r,
            cancel_pending: None,
        }
    }
}

impl TextView for ReceiptView {
    fn summary(&self) -> String {
        let r = &self.receipt;
        let follow = if r.status.is_terminal() {
            String::new()
        } else if self.cancel_pending.is_some() {
            format!(
                "; the cancel is not carried out yet (see cancel_pending): follow it with \
                 read_delegation {{\"request_id\": \"{}\", \"wait_ms\": 60000}}",
                r.request_id
            )
        } else {
            format!(
                "; follow it with read_delegation {{\"request_id\": \"{}\", \"wait_ms\": 60000}}",
                r.request_id
            )
        };
        let diag = r
            .diagnostic_code
            .as_deref()
            .map(|c| format!(" ({c})"))
            .unwrap_or_default();
        format!(
            "delegation {} to {}: {}{diag}, delivery {}{follow}",
            r.request_id,
            r.agent.name(),
            r.status.as_str(),
            r.delivery_state.as_str(),
        )
    }

    fn body(&self, out: &mut String) {
        let r = &self.receipt;
        let mut head = format!("directory: {}\n", r.directory);
        if let Some(s) = &r.session_id {
            head.push_str(&format!("session_id: {s}\n"));
        }
        head.push_str(&format!("created_at: {}\n", r.created_at));
        for (k, v) in [("started_at", &r.started_at), ("ended_at", &r.ended_at)] {
            if let Some(v) = v {
                head.push_str(&format!("{k}: {v}\n"));
            }
        }
        if let Some(c) = r.exit_code {
            head.push_str(&format!("exit_code: {c}\n"));
        }
        if let Some(p) = &r.parent_request_id {
            head.push_str(&format!(
                "parent: {p} (root {}, depth {})\n",
                r.root_request_id, r.depth
            ));
        }
        if let Some(m) = &r.diagnostic_message {
            head.push_str(&format!("diagnostic: {}\n", cut(m.clone(), 4_000, " […]")));
        }
        if let Some(p) = &self.cancel_pending {
            head.push_str(&format!("cancel_pending: {p}\n"));
        }
        let mut budget = Budget::new(body_limit(RESULT_TEXT_DEFAULT_CHARS));
        if budget.take(head.len()) {
            out.push_str(&head);
        }
        if let Some(o) = &r.output {
            let marker = "\n[output cut for this text: structuredContent.output has all of it]\n";
            let room =
                body_limit(RESULT_TEXT_DEFAULT_CHARS).saturating_sub(out.len() + 40 + marker.len());
            let cut_note = if r.output_truncated {
                " (cut at 256 KiB by the server)"
            } else {
                ""
            };
            out.push_str(&format!("output{cut_note}:\n"));
            out.push_str(&cut(o.clone(), room, marker));
        }
    }
}

async fn delegate(rt: Arc<Access>, args: DelegateArgs, cx: CallContext) -> ToolResult<ReceiptView> {
    let manager = manager(&rt).await?;
    let path = args.path.unwrap_or_else(|| ".".to_owned());
    let resolved = rt.workspace().resolve(&path)?;
    if !resolved.real().is_dir() {
        return Err(ToolError::invalid(format!("{path} is not a directory")));
    }
    let req = DelegateRequest {
        agent: args.agent,
        prompt: args.prompt,
        directory: resolved.real().to_owned(),
        request_id: args.request_id,
        environment: if rt.policy().full_env() {
            AgentEnvironment::Full
        } else {
            AgentEnvironment::Isolated {
                scratch: Processes::of(&rt)?.scratch().root().to_owned(),
            }
        },
    };
    let r = manager
        .delegate(req, Origin::Caller(cx.principal.clone()))
        .await?;
    Ok(ReceiptView::new(&rt, r))
}

/// The receipts this caller may see: the owner all, another principal its own; a caller whose
/// paths are confined to the workspace only those whose directory is inside it.
fn scope(rt: &Access, cx: &CallContext) -> Scope {
    let principal = (!rt.is_owner()).then(|| cx.principal.clone());
    if rt.workspace().restricted() {
        return Scope::Within {
            root: rt.workspace().root().to_owned(),
            principal,
        };
    }
    match principal {
        None => Scope::Owner,
        Some(p) => Scope::Principal(p),
    }
}

/// Arguments of `read_delegation`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadArgs {
    /// The request_id given to delegate.
    request_id: String,
    /// Wait up to this many milliseconds (at most 60000) for the delegation to end.
    #[serde(default)]
    #[schemars(range(max = 60000))]
    wait_ms: Option<u64>,
}

async fn read_delegation(
    rt: Arc<Access>,
    args: ReadArgs,
    cx: CallContext,
) -> ToolResult<ReceiptView> {
    let manager = manager(&rt).await?;
    let wait = Duration::from_millis(args.wait_ms.unwrap_or(0));
    let scope = scope(&rt, &cx);
    let r = tokio::select! {
        r = manager.read(&args.request_id, wait, &scope) => r?,
        () = cx.cancel.cancelled() => return Err(ToolError::cancelled()),
    };
    Ok(ReceiptView::new(&rt, r))
}

/// Arguments of `cancel_delegation`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CancelArgs {
    /// The request_id given to delegate.
    request_id: String,
}

async fn cancel_delegation(
    rt: Arc<Access>,
    args: CancelArgs,
    cx: CallContext,
) -> ToolResult<ReceiptView> {
    let manager = manager(&rt).await?;
    let r = manager.cancel(&args.request_id, &scope(&rt, &cx)).await?;
    let pending = if r.status.is_terminal() {
        None
    } else {
        manager.cancel_pending(&r.request_id).await
    };
    let mut view = ReceiptView::new(&rt, r);
    view.cancel_pending = pending;
    Ok(view)
}

/// Arguments of `list_delegations`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListArgs {
    /// Only receipts in this state: queued, running, completed, failed, unknown or unreadable.
    #[serde(default)]
    status: Option<String>,
    /// Most receipts listed (1-1024, default 100).
    #[serde(default)]
    #[schemars(range(min = 1, max = DELEGATION_RECORDS_MAX))]
    limit: Option<usize>,
    /// Continue a listing: the next_cursor of the previous answer (the receipts after it,
    /// in the same order; receipts made since then are not repeated).
    #[serde(default)]
    cursor: Option<String>,
}

/// Where a listing stopped: the sort key (creation time, request id) of its last receipt,
/// as `CREATED_AT~REQUEST_ID` (`CREATED_AT` empty for an unreadable receipt).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Cursor {
    created_at: Option<String>,
    request_id: String,
}

impl Cursor {
    fn of(d: &ReceiptSummary) -> Self {
        Self {
            created_at: d.created_at.clone(),
            request_id: d.request_id.clone(),
        }
    }

    /// Parses a `next_cursor`.
    ///
    /// # Errors
    /// `invalid_request`: not a cursor this tool gave.
    fn parse(s: &str) -> ToolResult<Self> {
        let bad = || {
            ToolError::invalid(format!(
                "cursor {s:?} is not a next_cursor of list_delegations"
            ))
        };
        let (created, id) = s.rsplit_once('~').ok_or_else(bad)?;
        if !engine::store::valid_request_id(id) || created.len() > 64 {
            return Err(bad());
        }
        Ok(Self {
            created_at: (!created.is_empty()).then(|| created.to_owned()),
            request_id: id.to_owned(),
        })
    }

    fn encode(&self) -> String {
        format!(
            "{}~{}",
            self.created_at.as_deref().unwrap_or(""),
            self.request_id
        )
    }

    /// Whether `d` comes after this cursor in a listing's order (newest first, then by
    /// request id).
    fn precedes(&self, d: &ReceiptSummary) -> bool {
        match self.created_at.cmp(&d.created_at) {
            std::cmp::Ordering::Greater => true,
            std::cmp::Ordering::Equal => self.request_id < d.request_id,
            std::cmp::Ordering::Less => false,
        }
    }
}

/// Result of `list_delegations`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ListDelegations {
    /// The receipts, newest first.
    delegations: Vec<ReceiptSummary>,
    /// More matched than `limit` (or than the text could show): `next_cursor` lists them.
    truncated: bool,
    /// When truncated: pass it as `cursor` to list the receipts after these.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
}

impl TextView for ListDelegations {
    fn summary(&self) -> String {
        let count = |s: ListedStatus| self.delegations.iter().filter(|d| d.status == s).count();
        format!(
            "{} delegations ({} running, {} queued){}",
            self.delegations.len(),
            count(ListedStatus::Running),
            count(ListedStatus::Queued),
            match &self.next_cursor {
                Some(c) => format!(
                    "; more not listed: call list_delegations again with cursor \"{c}\" (and \
                     the same status)"
                ),
                None => String::new(),
            }
        )
    }

    fn body(&self, out: &mut String) {
        for d in &self.delegations {
            out.push_str(&summary_line(d));
        }
    }
}

/// One line of a listing: id, agent, status, delivery, creation time, diagnostic.
pub fn summary_line(d: &ReceiptSummary) -> String {
    format!(
        "{} {} {}{} {}{}\n",
        d.request_id,
        d.agent.map_or("-", |a| a.name()),
        d.status.as_str(),
        d.delivery_state
            .map(|s| format!(" ({})", s.as_str()))
            .unwrap_or_default(),
        d.created_at.as_deref().unwrap_or("-"),
        d.diagnostic_code
            .as_deref()
            .map(|c| format!(
                " {c}: {}",
                cut(d.diagnostic_message.clone().unwrap_or_default(), 200, "…")
            ))
            .unwrap_or_default(),
    )
}

async fn list_delegations(
    rt: Arc<Access>,
    args: ListArgs,
    cx: CallContext,
) -> ToolResult<ListDelegations> {
    let manager = manager(&rt).await?;
    let limit = args.limit.unwrap_or(100);
    if limit == 0 || limit > DELEGATION_RECORDS_MAX {
        return Err(ToolError::invalid(format!(
            "limit must be 1-{DELEGATION_RECORDS_MAX}"
        )));
    }
    let wanted = match args.status.as_deref() {
        None => None,
        Some(s) => Some(
            [
                ListedStatus::Queued,
                ListedStatus::Running,
                ListedStatus::Completed,
                ListedStatus::Failed,
                ListedStatus::Unknown,
                ListedStatus::Unreadable,
            ]
            .into_iter()
            .find(|l| l.as_str() == s)
            .ok_or_else(|| {
                ToolError::invalid(format!(
                    "status {s:?} is not one of queued, running, completed, failed, unknown, \
                     unreadable"
                ))
            })?,
        ),
    };
    let after = args.cursor.as_deref().map(Cursor::parse).transpose()?;
    let scope = scope(&rt, &cx);
    let all = blocking(move || manager.list(&scope)).await?;
    let mut delegations: Vec<ReceiptSummary> = all
        .into_iter()
        .filter(|d| wanted.is_none_or(|w| d.status == w))
        .filter(|d| after.as_ref().is_none_or(|c| c.precedes(d)))
        .collect();
    let mut truncated = delegations.len() > limit;
    delegations.truncate(limit);
    let mut budget = Budget::new(body_limit(RESULT_TEXT_DEFAULT_CHARS));
    let mut shown = 0;
    for d in &mut delegations {
        if let Some(dir) = &d.directory {
            d.directory = Some(rt.workspace().display(Path::new(dir)));
        }
        if !budget.take(summary_line(d).len()) {
            truncated = true;
            break;
        }
        shown += 1;
    }
    delegations.truncate(shown);
    let next_cursor = truncated
        .then(|| delegations.last().map(|d| Cursor::of(d).encode()))
        .flatten();
    Ok(ListDelegations {
        delegations,
        truncated,
        next_cursor,
    })
}

/// Result of `agents_status`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct AgentsStatus {
    /// Every agent: codex, claude, gemini.
    agents: Vec<AgentReport>,
}

impl TextView for AgentsStatus {
    fn summary(&self) -> String {
        let ready: Vec<&str> = self
            .agents
            .iter()
            .filter(|a| a.status.can_accept_work)
            .map(|a| a.status.agent.name())
            .collect();
        if ready.is_empty() {
            "no agent can accept work now (see each one's reason; agents are enabled in \
             ~/.config/machine-mcp/config.toml [delegation.agents.NAME])"
                .to_owned()
        } else {
            format!("agents that can accept work: {}", ready.join(", "))
        }
    }

    fn body(&self, out: &mut String) {
        for a in &self.agents {
            let s = &a.status;
            out.push_str(&format!(
                "{}: {}{}{}{}{}\n",
                s.agent.name(),
                if s.can_accept_work {
                    "ready"
                } else {
                    "not ready"
                },
                s.version
                    .as_deref()
                    .map(|v| format!(", version {}", cut(v.to_owned(), 200, "…")))
                    .unwrap_or_default(),
                match (s.authenticated, &s.auth_detail) {
                    (Some(true), _) => ", signed in".to_owned(),
                    (Some(false), _) => ", not signed in".to_owned(),
                    (None, Some(d)) => format!(", sign-in unknown ({})", cut(d.clone(), 300, "…")),
                    (None, None) => String::new(),
                },
                a.last_success
                    .as_deref()
                    .map(|t| format!(", last success {t}"))
                    .unwrap_or_default(),
                s.not_ready
                    .as_deref()
                    .map(|r| format!(": {}", cut(r.to_owned(), 1_000, "…")))
                    .unwrap_or_default(),
            ));
        }
    }
}

async fn agents_status(
    rt: Arc<Access>,
    _args: NoArgs,
    _cx: CallContext,
) -> ToolResult<AgentsStatus> {
    if let Ok(manager) = manager(&rt).await {
        return Ok(AgentsStatus {
            agents: manager.status().await,
        });
    }
    // Without a state directory: the inspections alone (nothing can be delegated anyway).
    let agents = blocking(|| {
        let config = UserConfig::load().map(|c| c.delegation);
        let path = std::env::var_os("PATH");
        Ok(Agent::ALL
            .into_iter()
            .map(|agent| {
                let mut status = match &config {
                    Ok(c) => agents::inspect(agent, c, path.as_deref()),
                    Err(e) => engine::unusable(agent, &e.to_string()),
                };
                status.can_accept_work = false;
                status.not_ready =
                    Some("delegation needs a state directory, and this server has none".to_owned());
                AgentReport {
                    status,
                    last_success: None,
                }
            })
            .collect())
    })
    .await?;
    Ok(AgentsStatus { agents })
}
