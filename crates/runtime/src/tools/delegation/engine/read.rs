//! Reading receipts: one (waiting for its end when asked), or a listing of the ones a scope
//! sees, newest first; what a listing shows of a receipt ([`ReceiptSummary`]).

use std::time::Duration;

use schemars::JsonSchema;
use serde::Serialize;

use crate::limits::DELEGATION_READ_WAIT_MAX;

use super::{
    Manager, READ_POLL, Scope,
    agents::Agent,
    check_id, not_found, off_thread,
    store::{DelegationStatus, DeliveryState, Entry, Receipt, Store, server_alive},
    store_error, unreadable,
};
use crate::call::error::{ToolError, ToolResult};

/// The state of a receipt in a list: its status, or `unreadable`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ListedStatus {
    /// Waiting for a slot.
    Queued,
    /// The agent runs.
    Running,
    /// Finished with an answer.
    Completed,
    /// Did not complete (see the diagnostic).
    Failed,
    /// Its server stopped while it ran: it may have finished; never re-run.
    Unknown,
    /// The receipt file cannot be read or parsed; it is kept as it is.
    Unreadable,
}

impl ListedStatus {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Unknown => "unknown",
            Self::Unreadable => "unreadable",
        }
    }
}

impl From<DelegationStatus> for ListedStatus {
    fn from(s: DelegationStatus) -> Self {
        match s {
            DelegationStatus::Queued => Self::Queued,
            DelegationStatus::Running => Self::Running,
            DelegationStatus::Completed => Self::Completed,
            DelegationStatus::Failed => Self::Failed,
            DelegationStatus::Unknown => Self::Unknown,
        }
    }
}

/// One receipt in a list (no output).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ReceiptSummary {
    /// The request id.
    pub request_id: String,
    /// The agent (none for an unreadable receipt).
    pub agent: Option<Agent>,
    /// Its status, or `unreadable`.
    pub status: ListedStatus,
    /// Whether the prompt reached the agent (none for an unreadable receipt).
    pub delivery_state: Option<DeliveryState>,
    /// The agent's session id, once reported.
    pub session_id: Option<String>,
    /// RFC 3339 UTC acceptance time.
    pub created_at: Option<String>,
    /// RFC 3339 UTC end time.
    pub ended_at: Option<String>,
    /// Why it failed or is unknown; for an unreadable receipt `unreadable`.
    pub diagnostic_code: Option<String>,
    /// What happened (for an unreadable receipt, the parse error).
    pub diagnostic_message: Option<String>,
    /// The directory the agent runs in (absolute; the tools show it in the caller's form).
    pub directory: Option<String>,
    /// The parent request (a worker's child).
    pub parent_request_id: Option<String>,
    /// The root request of its tree.
    pub root_request_id: Option<String>,
    /// Its depth in the tree.
    pub depth: Option<u32>,
}

impl ReceiptSummary {
    pub(super) fn of(entry: &Entry) -> Self {
        match entry {
            Entry::Ok(s) => {
                let r = &s.receipt;
                Self {
                    request_id: r.request_id.clone(),
                    agent: Some(r.agent),
                    status: r.status.into(),
                    delivery_state: Some(r.delivery_state),
                    session_id: r.session_id.clone(),
                    created_at: Some(r.created_at.clone()),
                    ended_at: r.ended_at.clone(),
                    diagnostic_code: r.diagnostic_code.clone(),
                    diagnostic_message: r.diagnostic_message.clone(),
                    directory: Some(r.directory.clone()),
                    parent_request_id: r.parent_request_id.clone(),
                    root_request_id: Some(r.root_request_id.clone()),
                    depth: Some(r.depth),
                }
            }
            Entry::Unreadable { request_id, why } => Self {
                request_id: request_id.clone(),
                agent: None,
                status: ListedStatus::Unreadable,
                delivery_state: None,
                session_id: None,
                created_at: None,
                ended_at: None,
                diagnostic_code: Some("unreadable".into()),
                diagnostic_message: Some(why.clone()),
                directory: None,
                parent_request_id: None,
                root_request_id: None,
                depth: None,
            },
        }
    }
}

impl Manager {
    /// The receipt of `id` if `scope` sees it.
    pub(super) async fn load_visible(&self, id: &str, scope: &Scope) -> ToolResult<Receipt> {
        let s = self.store.clone();
        let i = id.to_owned();
        let entry = off_thread(move || {
            let _lock = s.lock().map_err(|e| store_error(&e))?;
            Ok(s.load_settled(&i))
        })
        .await?;
        match entry {
            Some(Entry::Ok(r)) if scope.sees(&r) => Ok(r.receipt),
            Some(Entry::Unreadable { why, .. }) if matches!(scope, Scope::Owner) => {
                Err(unreadable(id, &why))
            }
            _ => Err(not_found(id)),
        }
    }

    /// The receipt; with `wait` > 0 waits (at most [`DELEGATION_READ_WAIT_MAX`]) until it is
    /// terminal or the wait ends.
    ///
    /// # Errors
    /// `invalid_request`: not a request id, or `wait` over the bound; `not_found`: no receipt
    /// `scope` sees; `execution_failed`: the receipt cannot be read (owner only).
    pub async fn read(
        &self,
        request_id: &str,
        wait: Duration,
        scope: &Scope,
    ) -> ToolResult<Receipt> {
        check_id(request_id)?;
        if wait > DELEGATION_READ_WAIT_MAX {
            return Err(ToolError::invalid(format!(
                "wait_ms must be at most {}",
                DELEGATION_READ_WAIT_MAX.as_millis()
            )));
        }
        self.wait_terminal(request_id, wait, scope).await
    }

    pub(super) async fn wait_terminal(
        &self,
        id: &str,
        wait: Duration,
        scope: &Scope,
    ) -> ToolResult<Receipt> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut changed = self.changed.subscribe();
        loop {
            changed.borrow_and_update();
            let r = self.load_visible(id, scope).await?;
            if r.status.is_terminal() || tokio::time::Instant::now() >= deadline {
                return Ok(r);
            }
            tokio::select! {
                _ = changed.changed() => {}
                () = tokio::time::sleep(READ_POLL) => {}
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// The receipts `scope` sees, newest first (unreadable ones to the owner only).
    ///
    /// # Errors
    /// `execution_failed`: the store cannot be locked.
    pub fn list(&self, scope: &Scope) -> ToolResult<Vec<ReceiptSummary>> {
        let _lock = self.store.lock().map_err(|e| store_error(&e))?;
        Ok(summaries(self.store.all_settled(), scope))
    }
}

/// The summaries of `entries` that `scope` sees, newest first.
pub(super) fn summaries(entries: Vec<Entry>, scope: &Scope) -> Vec<ReceiptSummary> {
    let mut out: Vec<ReceiptSummary> = entries
        .iter()
        .filter(|e| match e {
            Entry::Ok(r) => scope.sees(r),
            Entry::Unreadable { .. } => matches!(scope, Scope::Owner),
        })
        .map(ReceiptSummary::of)
        .collect();
    out.sort_by(|a, b| {
        b.created_at
            .cmp(&a.created_at)
            .then_with(|| a.request_id.cmp(&b.request_id))
    });
    out
}

/// Every receipt of `store`, settled, as the owner sees them (`machine-mcp delegation list`).
///
/// # Errors
/// The store cannot be locked (its directory cannot be created or written).
pub fn list_store(store: &Store) -> std::io::Result<Vec<ReceiptSummary>> {
    let _lock = store.lock()?;
    Ok(summaries(store.all_settled(), &Scope::Owner))
}

/// The queued and running receipts of live servers (what a drain waits for).
pub fn unfinished(store: &Store) -> Vec<ReceiptSummary> {
    // The store's lock file (not a mutex): unlockable, there is nothing to list.
    let Ok(_lock) = store.lock() else {
        return Vec::new();
    };
    let entries = store
        .all_settled()
        .into_iter()
        .filter(|e| {
            matches!(e, Entry::Ok(r) if !r.receipt.status.is_terminal()
                && server_alive(r.server.as_ref()))
        })
        .collect();
    summaries(entries, &Scope::Owner)
}
