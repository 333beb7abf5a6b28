//! `delegate`, `read_delegation` and `cancel_delegation`: a delegation's receipt, and which
//! receipts a caller may see ([`scope`]).

use std::{path::Path, sync::Arc, time::Duration};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{limits::DELEGATION_PROMPT_MAX_BYTES, limits::RESULT_TEXT_DEFAULT_CHARS};

use super::{
    engine::{AgentEnvironment, DelegateRequest, Origin, Scope, agents::Agent, store::Receipt},
    manager,
};
use crate::{
    Access,
    call::{
        context::CallContext,
        error::{ToolError, ToolResult},
        text::{Budget, TextView, body_limit, cut},
    },
    tools::process::Processes,
};

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

pub(super) async fn delegate(
    rt: Arc<Access>,
    args: DelegateArgs,
    cx: CallContext,
) -> ToolResult<ReceiptView> {
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
pub(super) fn scope(rt: &Access, cx: &CallContext) -> Scope {
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

pub(super) async fn read_delegation(
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

pub(super) async fn cancel_delegation(
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
