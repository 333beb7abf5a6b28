//! `list_delegations`: the receipts a caller may see, newest first, in pages continued by a
//! cursor; and one receipt as a line of a listing ([`summary_line`], also the shell's).

use std::{path::Path, sync::Arc};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{limits::DELEGATION_RECORDS_MAX, limits::RESULT_TEXT_DEFAULT_CHARS};

use super::{
    engine::{self, ListedStatus, ReceiptSummary},
    manager,
    receipt::scope,
};
use crate::{
    Access,
    call::{
        context::CallContext,
        error::{ToolError, ToolResult},
        text::{Budget, TextView, body_limit, cut},
    },
    tools::blocking::blocking,
};

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

pub(super) async fn list_delegations(
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
