//! Cancellation: a queued request never starts, a running one's tree is terminated (here, or
//! through a marker by the server that runs it), and a cancelled request's descendants — what
//! its worker delegated — are cancelled with it.

use super::{
    CANCEL_ACK_WAIT, CANCEL_WAIT, DESCENDANT_CANCELLED, Manager, READ_POLL, Scope, check_id,
    off_thread,
    store::{DelegationStatus, DeliveryState, Entry, Receipt},
    store_error,
};
use crate::call::error::ToolResult;

impl Manager {
    /// Cancels `request_id` and its whole tree of descendants (the requests its worker
    /// delegated, and theirs: `Manager::cancel_descendants`): a queued one ends
    /// `failed`/`not_sent`; a running one's process tree is terminated and it ends
    /// `failed`/`sent`, diagnostic `cancelled` (a descendant's message names the ancestor). A terminal one
    /// is returned as it is. A request of another live server is asked to stop through a
    /// marker file that server takes up; the receipt is returned as it stands when that server
    /// has not taken it up within `CANCEL_ACK_WAIT`, or has not recorded the end within
    /// `CANCEL_WAIT` ([`Manager::cancel_pending`] then says which).
    ///
    /// # Errors
    /// As [`Manager::read`].
    pub async fn cancel(&self, request_id: &str, scope: &Scope) -> ToolResult<Receipt> {
        check_id(request_id)?;
        let r = self.load_visible(request_id, scope).await?;
        if r.status.is_terminal() {
            return Ok(r);
        }
        let local_run = self.lock_local().running.get(request_id).cloned();
        if let Some(token) = local_run {
            token.cancel();
        } else {
            let s = self.store.clone();
            let local = self.local.clone();
            let id = request_id.to_owned();
            off_thread(move || {
                let _lock = s.lock().map_err(|e| store_error(&e))?;
                let Some(Entry::Ok(mut r)) = s.load_settled(&id) else {
                    return Ok(());
                };
                let mut l = local.lock();
                let queued_here = l.queue.iter().position(|p| p.request_id == id);
                match (r.receipt.status, queued_here) {
                    (DelegationStatus::Queued, Some(i)) => {
                        l.queue.remove(i);
                        r.receipt.end(
                            DelegationStatus::Failed,
                            DeliveryState::NotSent,
                            Some((
                                "cancelled",
                                "cancelled before it started; nothing ran".into(),
                            )),
                        );
                        s.write(&r).map_err(|e| store_error(&e))
                    }
                    (s_, _) if s_.is_terminal() => Ok(()),
                    // Another server's: it looks for the marker.
                    _ => crate::primitives::private::write_atomic(&s.cancel_marker(&id), b"")
                        .map_err(|e| store_error(&e)),
                }
            })
            .await?;
            self.bump();
        }
        self.cancel_descendants(request_id).await;
        self.wait_cancelled(request_id, scope).await
    }

    /// After a cancellation was asked: the receipt once it is terminal, or as it stands when
    /// `CANCEL_WAIT` passed, or when the marker another server should take up is still there
    /// after `CANCEL_ACK_WAIT` (that server does not act: stopped, busy, or no server).
    pub(super) async fn wait_cancelled(&self, id: &str, scope: &Scope) -> ToolResult<Receipt> {
        let marker = self.store.cancel_marker(id);
        let ack_deadline = tokio::time::Instant::now() + CANCEL_ACK_WAIT;
        while marker.exists() && tokio::time::Instant::now() < ack_deadline {
            let r = self.load_visible(id, scope).await?;
            if r.status.is_terminal() {
                return Ok(r);
            }
            tokio::time::sleep(READ_POLL).await;
        }
        if marker.exists() {
            return self.load_visible(id, scope).await;
        }
        self.wait_terminal(id, CANCEL_WAIT, scope).await
    }

    /// For a cancelled request that has not ended yet: who is to carry the cancellation out
    /// and whether it has taken it up, for people (`cancel_delegation`'s `cancel_pending`).
    /// `None` when the request has ended (or there is no such receipt).
    pub async fn cancel_pending(&self, id: &str) -> Option<String> {
        let local = self.lock_local().running.contains_key(id);
        let s = self.store.clone();
        let i = id.to_owned();
        let entry = off_thread(move || {
            let _lock = s.lock().map_err(|e| store_error(&e))?;
            Ok((s.load_settled(&i), s.cancel_marker(&i).exists()))
        })
        .await
        .ok()?;
        let (Some(Entry::Ok(r)), marker) = entry else {
            return None;
        };
        if r.receipt.status.is_terminal() {
            return None;
        }
        let runner = match &r.server {
            Some(server) => format!("the server process {} that runs it", server.pid),
            None => "the server that runs it".to_owned(),
        };
        Some(if local {
            "cancellation in progress: this server is terminating the agent's process tree; \
             read_delegation shows when it has ended"
                .to_owned()
        } else if marker {
            format!(
                "cancellation requested, not carried out yet: {runner} has not taken up the \
                 request within {} s (it may be stopped or busy, or not a machine-mcp server); \
                 it ends the run when it does; read_delegation shows the outcome (unknown if \
                 that process dies first)",
                CANCEL_ACK_WAIT.as_secs()
            )
        } else {
            format!(
                "cancellation taken up by {runner}, not recorded yet: the agent's process tree \
                 is being terminated; read_delegation shows when it has ended"
            )
        })
    }

    /// Whether the run of `id` (of this server) is being cancelled: its token fired, or a
    /// cancellation marker waits for it.
    pub(super) fn being_cancelled(&self, id: &str) -> bool {
        let token = self.lock_local().running.get(id).cloned();
        token.is_some_and(|t| t.is_cancelled()) || self.store.cancel_marker(id).exists()
    }

    /// Cancels the whole tree below `id` (the requests its worker delegated, theirs, and so
    /// on), which is being cancelled: `id`'s worker capability is revoked at once (it delegates
    /// nothing more); a queued descendant of this server never starts; a running one gets a
    /// cancellation marker whose text its run records (`cancelled with its ancestor <id>: …`)
    /// — the server that runs it takes it up, this one at once through its token. Each ends
    /// `failed`, diagnostic `cancelled`. Best effort: a store that cannot be read is logged.
    pub(super) async fn cancel_descendants(&self, id: &str) {
        if let Some(w) = self.worker() {
            w.revoke(id);
        }
        let s = self.store.clone();
        let local = self.local.clone();
        let ancestor = id.to_owned();
        let found = off_thread(move || {
            let _lock = s.lock().map_err(|e| store_error(&e))?;
            let entries = s.all_settled();
            let mut below: Vec<(String, DelegationStatus)> = Vec::new();
            let mut parents = vec![ancestor.clone()];
            let mut seen = std::collections::HashSet::new();
            while let Some(parent) = parents.pop() {
                for e in &entries {
                    let Entry::Ok(r) = e else { continue };
                    let r = &r.receipt;
                    if r.parent_request_id.as_deref() == Some(parent.as_str())
                        && seen.insert(r.request_id.clone())
                    {
                        parents.push(r.request_id.clone());
                        if !r.status.is_terminal() {
                            below.push((r.request_id.clone(), r.status));
                        }
                    }
                }
            }
            let mut l = local.lock();
            let mut tokens = Vec::new();
            for (child, status) in below {
                let queued_here = l.queue.iter().position(|p| p.request_id == child);
                match (status, queued_here) {
                    (DelegationStatus::Queued, Some(i)) => {
                        l.queue.remove(i);
                        if let Some(Entry::Ok(mut r)) = s.load(&child) {
                            r.receipt.end(
                                DelegationStatus::Failed,
                                DeliveryState::NotSent,
                                Some((
                                    "cancelled",
                                    format!(
                                        "cancelled with its ancestor {ancestor} before it \
                                         started; nothing ran"
                                    ),
                                )),
                            );
                            let _ = s.write(&r);
                        }
                    }
                    _ => {
                        let reason = format!(
                            "cancelled with its ancestor {ancestor}: {DESCENDANT_CANCELLED}"
                        );
                        if let Err(e) = crate::primitives::private::write_atomic(
                            &s.cancel_marker(&child),
                            reason.as_bytes(),
                        ) {
                            tracing::warn!(error = %e, "cannot mark a delegation cancelled");
                        }
                        if let Some(t) = l.running.get(&child) {
                            tokens.push((child, t.clone()));
                        }
                    }
                }
            }
            Ok(tokens)
        })
        .await;
        match found {
            Ok(tokens) => {
                for (child, token) in tokens {
                    if let Some(w) = self.worker() {
                        w.revoke(&child);
                    }
                    token.cancel();
                }
            }
            Err(e) => tracing::warn!(error = %e.message(), "cannot cancel a delegation's tree"),
        }
        self.bump();
    }
}
