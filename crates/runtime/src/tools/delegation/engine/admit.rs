//! Admission: a request checked and recorded under the store's lock (idempotency by
//! fingerprint, the limits counted over every live server), then queued or, for a worker,
//! started at once.

use crate::limits::{
    DELEGATION_DEPTH_MAX, DELEGATION_PROMPT_MAX_BYTES, DELEGATIONS_PER_ROOT_MAX,
    DELEGATIONS_QUEUED_MAX, DELEGATIONS_RUNNING_MAX, DELEGATIONS_RUNNING_PER_AGENT_MAX,
};

use super::{
    DESCENDANT_CANCELLED, DRAINING_MESSAGE, DelegateRequest, Manager, Origin, Pending,
    START_SETTLE_WAIT, Scope, check_id, limit, off_thread,
    store::{
        self, DelegationStatus, DeliveryState, Entry, Receipt, Store, StoredReceipt, fingerprint,
        now_rfc3339,
    },
    store_error,
};
use crate::call::error::{ToolError, ToolErrorCode, ToolResult};

/// What admission decided.
enum Admitted {
    /// The same request was accepted before: its receipt.
    Existing(Receipt),
    /// Recorded: queued, or (a worker's) running at once.
    New(Receipt),
}

impl Manager {
    /// `delegate`: validates, applies idempotency, admits (limits), persists the receipt
    /// `queued`, starts it when a slot is free; returns the receipt at once: `queued`/`not_sent`,
    /// or `running`/`sent` once the agent was started (a run reserves its slot with delivery
    /// `unknown` and this waits, at most `START_SETTLE_WAIT`, for the start to be recorded;
    /// a failure to start returns `failed`).
    ///
    /// # Errors
    /// - `invalid_request`: the request id is not a lowercase hyphenated UUID, the prompt is
    ///   empty, the directory is not an absolute directory.
    /// - `limit_exceeded` (detail `reason`): `prompt` over [`DELEGATION_PROMPT_MAX_BYTES`];
    ///   `depth` over [`DELEGATION_DEPTH_MAX`]; `tree`: the root has
    ///   [`DELEGATIONS_PER_ROOT_MAX`] requests; `queue`: [`DELEGATIONS_QUEUED_MAX`] wait;
    ///   `capacity`: a worker's request finds no free slot; `records`: the store holds
    ///   [`crate::limits::DELEGATION_RECORDS_MAX`] receipts and too few of them are
    ///   terminal to prune (the message counts the queued or running, unreadable and finished
    ///   ones; nothing is pruned then).
    /// - `conflict`: the request id names a receipt with another fingerprint, or an
    ///   unreadable one.
    /// - `unavailable`: draining ([`DRAINING_MESSAGE`]), or the agent cannot accept work (its
    ///   `not_ready` reason).
    /// - `execution_failed`: the store cannot be written.
    pub async fn delegate(&self, req: DelegateRequest, origin: Origin) -> ToolResult<Receipt> {
        check_id(&req.request_id)?;
        if req.prompt.len() > DELEGATION_PROMPT_MAX_BYTES {
            return Err(limit(
                "prompt",
                format!(
                    "the prompt is {} bytes; at most {DELEGATION_PROMPT_MAX_BYTES}",
                    req.prompt.len()
                ),
            ));
        }
        if req.prompt.trim().is_empty() {
            return Err(ToolError::invalid("the prompt is empty"));
        }
        if !req.directory.is_absolute() || !req.directory.is_dir() {
            return Err(ToolError::invalid(format!(
                "{} is not a directory",
                req.directory.display()
            )));
        }
        let (owner, parent, root, depth) = match &origin {
            Origin::Caller(p) => (p.clone(), None, req.request_id.clone(), 0),
            Origin::Worker(g) => (
                g.owner.clone(),
                Some(g.request_id.clone()),
                g.root_request_id.clone(),
                g.depth + 1,
            ),
        };
        if depth > DELEGATION_DEPTH_MAX {
            return Err(limit(
                "depth",
                format!(
                    "this request would be at depth {depth}; delegations nest at most \
                     {DELEGATION_DEPTH_MAX} deep"
                ),
            ));
        }
        let fp = fingerprint(req.agent, &req.directory, &req.prompt, owner.id());
        if let Some(existing) = self.existing(&req.request_id, &fp).await? {
            return Ok(existing);
        }
        if self.store.draining() {
            return Err(ToolError::new(ToolErrorCode::Unavailable, DRAINING_MESSAGE));
        }
        let status = self.inspect(req.agent).await;
        let executable = match (&status.program, status.can_accept_work) {
            (Some(exe), true) => exe.clone(),
            _ => {
                return Err(ToolError::new(
                    ToolErrorCode::Unavailable,
                    format!(
                        "{} cannot accept work: {}",
                        req.agent.name(),
                        status
                            .not_ready
                            .as_deref()
                            .unwrap_or("it was not found or did not answer")
                    ),
                )
                .detail("agent", req.agent.name()));
            }
        };
        let worker = matches!(origin, Origin::Worker(_));
        let now = now_rfc3339();
        let stored = StoredReceipt {
            receipt: Receipt {
                request_id: req.request_id.clone(),
                agent: req.agent,
                status: if worker {
                    DelegationStatus::Running
                } else {
                    DelegationStatus::Queued
                },
                // A worker's request starts at once: `unknown` until the run records whether
                // the agent was started.
                delivery_state: if worker {
                    DeliveryState::Unknown
                } else {
                    DeliveryState::NotSent
                },
                session_id: None,
                created_at: now.clone(),
                started_at: worker.then_some(now),
                ended_at: None,
                output: None,
                output_truncated: false,
                exit_code: None,
                diagnostic_code: None,
                diagnostic_message: None,
                directory: req.directory.to_string_lossy().into_owned(),
                parent_request_id: parent,
                root_request_id: root.clone(),
                depth,
            },
            fingerprint: fp,
            owner: owner.id().to_owned(),
            server: store::this_server(),
        };
        let s = self.store.clone();
        let admitted = off_thread(move || admit(&s, stored, worker)).await?;
        let receipt = match admitted {
            Admitted::Existing(r) => return Ok(r),
            Admitted::New(r) => r,
        };
        self.bump();
        let pending = Pending {
            request_id: req.request_id.clone(),
            agent: req.agent,
            prompt: req.prompt,
            directory: req.directory,
            executable,
            root_request_id: root,
            depth,
            owner,
            environment: match &origin {
                Origin::Worker(g) => g.environment.clone(),
                Origin::Caller(_) => req.environment,
            },
        };
        if worker {
            if let Origin::Worker(g) = &origin
                && self.being_cancelled(&g.request_id)
            {
                // Its parent was cancelled while this request was admitted: it never starts
                // (the run finds the marker), as the tree's cancellation would have done.
                let reason = format!(
                    "cancelled with its ancestor {}: {DESCENDANT_CANCELLED}",
                    g.request_id
                );
                let marker = self.store.cancel_marker(&pending.request_id);
                if let Err(e) = crate::primitives::private::write_atomic(&marker, reason.as_bytes())
                {
                    tracing::warn!(error = %e, "cannot mark a delegation cancelled");
                }
            }
            let token = self.closing.child_token();
            self.lock_local()
                .running
                .insert(pending.request_id.clone(), token.clone());
            self.spawn_run(pending, token);
        } else {
            self.lock_local().queue.push(pending);
            self.pump_queue().await;
        }
        Ok(self.start_settled(&req.request_id).await.unwrap_or(receipt))
    }

    /// The receipt of `id` once its start attempt has settled: a `running` receipt whose
    /// delivery is still `unknown` (the agent being started) is waited for, at most
    /// `START_SETTLE_WAIT`, so `delegate` answers `running`/`sent` (or the failure to start),
    /// never `not_sent` for an agent that may have been started.
    pub(super) async fn start_settled(&self, id: &str) -> ToolResult<Receipt> {
        let deadline = tokio::time::Instant::now() + START_SETTLE_WAIT;
        let mut changed = self.changed.subscribe();
        loop {
            changed.borrow_and_update();
            let r = self.load_visible(id, &Scope::Owner).await?;
            let starting =
                r.status == DelegationStatus::Running && r.delivery_state == DeliveryState::Unknown;
            if !starting || tokio::time::Instant::now() >= deadline {
                return Ok(r);
            }
            tokio::select! {
                _ = changed.changed() => {}
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// The receipt of `id` when one exists: the same fingerprint → it (idempotent), another →
    /// `conflict`.
    pub(super) async fn existing(&self, id: &str, fp: &str) -> ToolResult<Option<Receipt>> {
        let s = self.store.clone();
        let (id, fp) = (id.to_owned(), fp.to_owned());
        off_thread(move || {
            let _lock = s.lock().map_err(|e| store_error(&e))?;
            replay(s.load_settled(&id), &fp)
        })
        .await
    }
}

/// The idempotency rule over what the store holds for the id.
fn replay(entry: Option<Entry>, fp: &str) -> ToolResult<Option<Receipt>> {
    match entry {
        None => Ok(None),
        Some(Entry::Ok(r)) if r.fingerprint == fp => Ok(Some(r.receipt)),
        Some(Entry::Ok(r)) => Err(ToolError::conflict(format!(
            "request_id {} was used for another request (another agent, directory, prompt or \
             caller); choose a new request_id",
            r.receipt.request_id
        ))),
        Some(Entry::Unreadable { request_id, why }) => Err(ToolError::conflict(format!(
            "request_id {request_id} names a receipt that cannot be read ({why}); it is kept as \
             it is: choose a new request_id"
        ))),
    }
}

/// Admission under the store's lock: idempotency again (another server may have raced), the
/// bounds, room, then the receipt written.
fn admit(s: &Store, new: StoredReceipt, worker: bool) -> ToolResult<Admitted> {
    let _lock = s.lock().map_err(|e| store_error(&e))?;
    let id = new.receipt.request_id.clone();
    if let Some(r) = replay(s.load_settled(&id), &new.fingerprint)? {
        return Ok(Admitted::Existing(r));
    }
    if s.draining() {
        return Err(ToolError::new(ToolErrorCode::Unavailable, DRAINING_MESSAGE));
    }
    let mut entries = s.all_settled();
    let (mut running, mut agent_running, mut queued, mut tree) = (0, 0, 0, 0);
    for e in &entries {
        let Entry::Ok(r) = e else { continue };
        let r = &r.receipt;
        if r.root_request_id == new.receipt.root_request_id {
            tree += 1;
        }
        match r.status {
            DelegationStatus::Running => {
                running += 1;
                if r.agent == new.receipt.agent {
                    agent_running += 1;
                }
            }
            DelegationStatus::Queued => queued += 1,
            _ => {}
        }
    }
    if tree >= DELEGATIONS_PER_ROOT_MAX {
        return Err(limit(
            "tree",
            format!(
                "the tree of {} has {tree} requests; at most {DELEGATIONS_PER_ROOT_MAX}",
                new.receipt.root_request_id
            ),
        ));
    }
    if worker
        && (running >= DELEGATIONS_RUNNING_MAX
            || agent_running >= DELEGATIONS_RUNNING_PER_AGENT_MAX)
    {
        return Err(limit(
            "capacity",
            format!(
                "no free slot for {} ({running} of {DELEGATIONS_RUNNING_MAX} running, \
                 {agent_running} of {DELEGATIONS_RUNNING_PER_AGENT_MAX} of this agent); a \
                 worker's request is not queued behind its own parent: try later or do it \
                 yourself",
                new.receipt.agent.name()
            ),
        )
        .retryable());
    }
    if !worker && queued >= DELEGATIONS_QUEUED_MAX {
        return Err(limit(
            "queue",
            format!("{queued} delegations wait already; at most {DELEGATIONS_QUEUED_MAX}"),
        )
        .retryable());
    }
    if !s.make_room(&mut entries) {
        return Err(limit("records", store_full(&entries)).retryable());
    }
    s.write(&new).map_err(|e| store_error(&e))?;
    Ok(Admitted::New(new.receipt))
}

/// Why a full store (`entries`, none pruned) refuses a new receipt, by what fills it:
/// unfinished receipts wait for their runs; unreadable ones stay until someone removes them.
fn store_full(entries: &[Entry]) -> String {
    let (mut unfinished, mut finished, mut unreadable) = (0, 0, 0);
    for e in entries {
        match e {
            Entry::Ok(r) if r.receipt.status.is_terminal() => finished += 1,
            Entry::Ok(_) => unfinished += 1,
            Entry::Unreadable { .. } => unreadable += 1,
        }
    }
    let mut why = format!(
        "the store holds {} receipts, at most {}: {unfinished} queued or running, {unreadable} \
         unreadable, {finished} finished (only finished ones are pruned, and too few are)",
        entries.len(),
        crate::limits::DELEGATION_RECORDS_MAX
    );
    if unreadable > 0 {
        why.push_str(
            "; unreadable receipts are kept for inspection (list_delegations with status \
             unreadable names them) until the machine's owner removes them from \
             STATE_DIR/delegations",
        );
    }
    if unfinished > 0 {
        why.push_str("; try again when some delegations have ended");
    }
    why
}
