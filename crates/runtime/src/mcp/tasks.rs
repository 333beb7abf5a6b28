//! Tasks: long tool calls that outlive their request (MCP extension
//! `io.modelcontextprotocol/tasks`, SEP-2663; defined for protocol 2026-07-28).
//!
//! Rules this module keeps (SEP-2663 §Task Creation, §Getting Tasks, §Cancelling Tasks,
//! §Security Considerations):
//! - A task is visible to `tasks/get` before its `CreateTaskResult` is sent ([`Tasks::insert`]
//!   runs first).
//! - A task belongs to the principal that created it; every other principal gets the same
//!   "task not found" error (-32602) as for an id that never existed.
//! - Task ids are 122 random bits (UUID v4): not guessable, not enumerable.
//! - A tool result, `isError: true` included, makes the task `completed`; only a JSON-RPC error
//!   makes it `failed`; `tasks/cancel` makes a still-working task `cancelled` once its work has
//!   stopped (the process tree is killed first).
//! - Bounded: at most [`TASKS_MAX`] tasks per runtime; a finished task is kept for
//!   [`TASK_RETENTION_AFTER_END`] after it ended, then discarded, and never before: the `ttlMs`
//!   a client was given holds (SEP-2663 § Task: "the server may discard the task after the TTL
//!   elapses"). While the table is full, a long call is not offered as a task.
//!
//! The store lives in the [`crate::Runtime`], not in an MCP session: a task created through one
//! connection (or one relayed 2026-07-28 request) is read through any later one of the same
//! principal, so a relay restart or a link drop does not lose it.

use std::{
    collections::HashMap,
    sync::{Arc, MutexGuard},
};

use lock::Lock;

use rmcp::model::{
    CallToolResult, DetailedTask, ErrorData, JsonObject, Task, TaskPayload, TaskStatus,
};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::limits::{
    OWNER_RESERVED_TASKS, TASK_POLL_INTERVAL, TASK_RETENTION_AFTER_END, TASKS_MAX,
    TASKS_PER_PRINCIPAL,
};

use crate::policy::Principal;

/// Tools whose calls may become tasks: the ones whose work can outlive any host's patience.
/// `start_job` follows its job to the end when it runs as a task (`tools::jobs`); `run_command`
/// runs a registered command as `run_process` runs an argv (`tools::project`).
pub const TASK_TOOLS: &[&str] = &["run_process", "exec_command", "run_command", "start_job"];

/// The error for an unknown task id, or one that belongs to another principal (SEP-2663
/// §Error Handling: -32602).
pub fn not_found() -> ErrorData {
    ErrorData::invalid_params("Failed to retrieve task: Task not found", None)
}

/// Where a task is. The only way to change it is [`TaskEntry::finish`] (and the status line of
/// a working task); a terminal state never changes again.
#[derive(Debug, Clone)]
enum State {
    Working { status_message: Option<String> },
    Completed { result: JsonObject },
    Failed { error: JsonObject },
    Cancelled,
}

#[derive(Debug)]
struct Inner {
    state: State,
    updated_at: chrono::DateTime<chrono::Utc>,
    /// When the task reached a terminal state (monotonic), for retention.
    ended: Option<Instant>,
}

/// One task: its owner, its cancellation token and its state.
#[derive(Debug)]
pub struct TaskEntry {
    id: String,
    owner: Principal,
    /// Whether the owner is the runtime's owner ([`crate::Access::is_owner`]), for the shares.
    owner_class: bool,
    created_at: chrono::DateTime<chrono::Utc>,
    created: Instant,
    cancel: CancellationToken,
    inner: Lock<Inner>,
}

impl TaskEntry {
    /// A working task of the runtime's owner `owner` whose work stops when `cancel` fires.
    pub fn new(owner: Principal, cancel: CancellationToken) -> Arc<Self> {
        Self::with_owner_class(owner, true, cancel)
    }

    /// A working task for `owner`, who is the runtime's owner or not (`is_owner`, which decides
    /// the share of the table it counts against).
    pub fn with_owner_class(
        owner: Principal,
        is_owner: bool,
        cancel: CancellationToken,
    ) -> Arc<Self> {
        let now = chrono::Utc::now();
        Arc::new(Self {
            id: uuid::Uuid::new_v4().to_string(),
            owner,
            owner_class: is_owner,
            created_at: now,
            created: Instant::now(),
            cancel,
            inner: Lock::new(Inner {
                state: State::Working {
                    status_message: None,
                },
                updated_at: now,
                ended: None,
            }),
        })
    }

    /// The task id.
    pub fn id(&self) -> &str {
        &self.id
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A poisoned lock (recovered and logged by `Lock`) means a panic while holding it, which
        // only assignments do: the state is still whole.
        self.inner.lock()
    }

    /// Sets the status line of a working task (its latest progress); ignored once finished.
    /// Control characters other than tab (a process's raw output may hold NULs or escape
    /// sequences) become U+FFFD: the line is shown to people and models as text.
    pub fn set_status_message(&self, message: String) {
        let message = if message.chars().any(|c| c.is_control() && c != '\t') {
            message
                .chars()
                .map(|c| {
                    if c.is_control() && c != '\t' {
                        char::REPLACEMENT_CHARACTER
                    } else {
                        c
                    }
                })
                .collect()
        } else {
            message
        };
        let mut inner = self.lock();
        if let State::Working { status_message } = &mut inner.state {
            *status_message = Some(message);
            inner.updated_at = chrono::Utc::now();
        }
    }

    /// Records the outcome of the task's work. A cancelled-by-`tasks/cancel` task whose work
    /// ended with the `cancelled` tool error becomes `cancelled`; any other tool result
    /// `completed`; a JSON-RPC error `failed`. Ignored when the task already finished.
    pub fn finish(&self, outcome: &Result<CallToolResult, ErrorData>) {
        let state = match outcome {
            Ok(_) if self.cancel.is_cancelled() => State::Cancelled,
            Ok(result) => match serde_json::to_value(result) {
                Ok(serde_json::Value::Object(mut result)) => {
                    // What the request would have returned synchronously (SEP-2663 §Task
                    // Status): a 2026-07-28 result, so it names its type.
                    result
                        .entry("resultType")
                        .or_insert_with(|| serde_json::Value::from("complete"));
                    State::Completed { result }
                }
                _ => State::Failed {
                    error: error_object(&ErrorData::internal_error(
                        "the task's result could not be serialized",
                        None,
                    )),
                },
            },
            Err(e) => State::Failed {
                error: error_object(e),
            },
        };
        let mut inner = self.lock();
        if matches!(inner.state, State::Working { .. }) {
            inner.state = state;
            inner.updated_at = chrono::Utc::now();
            inner.ended = Some(Instant::now());
        }
    }

    /// Asks the task's work to stop (`tasks/cancel`); its state follows when the work has
    /// stopped ([`TaskEntry::finish`]). Cooperative, as SEP-2663 §Cancelling Tasks allows.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// The task as `CreateTaskResult` and `tasks/get` show it.
    pub fn detailed(&self) -> DetailedTask {
        let inner = self.lock();
        let (payload, status_message) = match &inner.state {
            State::Working { status_message } => (TaskPayload::Working, status_message.clone()),
            State::Completed { result } => (
                TaskPayload::Completed {
                    result: result.clone(),
                },
                None,
            ),
            State::Failed { error } => (
                TaskPayload::Failed {
                    error: error.clone(),
                },
                error
                    .get("message")
                    .and_then(serde_json::Value::as_str)
                    .map(str::to_owned),
            ),
            State::Cancelled => (TaskPayload::Cancelled, Some("cancelled".to_owned())),
        };
        // Time to live from creation: the time it has lived so far (or lived until it ended)
        // plus the retention after its end.
        let lived = inner
            .ended
            .unwrap_or_else(Instant::now)
            .duration_since(self.created);
        let ttl = lived + TASK_RETENTION_AFTER_END;
        let mut task = Task::new(
            self.id.clone(),
            payload.status(),
            self.created_at.to_rfc3339(),
            inner.updated_at.to_rfc3339(),
        )
        .with_ttl_ms(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX))
        .with_poll_interval_ms(TASK_POLL_INTERVAL.as_millis() as u64);
        if let Some(m) = status_message {
            task = task.with_status_message(m);
        }
        DetailedTask::new(task, payload)
    }

    fn status(&self) -> TaskStatus {
        match self.lock().state {
            State::Working { .. } => TaskStatus::Working,
            State::Completed { .. } => TaskStatus::Completed,
            State::Failed { .. } => TaskStatus::Failed,
            State::Cancelled => TaskStatus::Cancelled,
        }
    }

    fn ended(&self) -> Option<Instant> {
        self.lock().ended
    }
}

/// Whether `t` is still kept at `now`: working, or finished less than
/// [`TASK_RETENTION_AFTER_END`] ago.
/// The share rule of [`Tasks::has_room`] over the kept tasks.
fn room<'a>(
    kept: impl Iterator<Item = &'a Arc<TaskEntry>>,
    principal: &Principal,
    is_owner: bool,
) -> bool {
    let (mut all, mut guests, mut mine) = (0, 0, 0);
    for t in kept {
        all += 1;
        if !t.owner_class {
            guests += 1;
            if &t.owner == principal {
                mine += 1;
            }
        }
    }
    all < TASKS_MAX
        && (is_owner || (mine < TASKS_PER_PRINCIPAL && guests < TASKS_MAX - OWNER_RESERVED_TASKS))
}

fn kept(t: &TaskEntry, now: Instant) -> bool {
    t.ended()
        .is_none_or(|e| now.duration_since(e) < TASK_RETENTION_AFTER_END)
}

fn error_object(e: &ErrorData) -> JsonObject {
    match serde_json::to_value(e) {
        Ok(serde_json::Value::Object(o)) => o,
        _ => JsonObject::new(),
    }
}

/// The runtime's tasks (module docs).
#[derive(Debug, Default)]
pub struct Tasks {
    tasks: Lock<HashMap<String, Arc<TaskEntry>>>,
}

impl Tasks {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<TaskEntry>>> {
        self.tasks.lock()
    }

    /// Whether [`Self::insert`] would take a new task of `principal` now (finished tasks past
    /// their retention do not count): fewer than [`TASKS_MAX`] are kept, and for a principal
    /// other than the owner (`is_owner` false) it has fewer than [`TASKS_PER_PRINCIPAL`] and such
    /// principals together fewer than [`TASKS_MAX`] − [`OWNER_RESERVED_TASKS`]. A call is
    /// offered as a task only then, so that one that cannot become a task behaves as for a
    /// client without tasks (it may yield to a process session) instead of being held for its
    /// whole run.
    pub fn has_room(&self, principal: &Principal, is_owner: bool) -> bool {
        let now = Instant::now();
        let tasks = self.lock();
        room(tasks.values().filter(|t| kept(t, now)), principal, is_owner)
    }

    /// Makes `entry` visible to `tasks/get`. Finished tasks past their retention are discarded
    /// first; no other task is.
    ///
    /// # Errors
    /// There is no room for it ([`Self::has_room`]): the caller keeps the call in the
    /// foreground instead, holding its call slot.
    pub fn insert(&self, entry: Arc<TaskEntry>) -> Result<(), Arc<TaskEntry>> {
        let mut tasks = self.lock();
        let now = Instant::now();
        tasks.retain(|_, t| kept(t, now));
        if !room(tasks.values(), &entry.owner, entry.owner_class) {
            return Err(entry);
        }
        tasks.insert(entry.id.clone(), entry);
        Ok(())
    }

    /// The task `id` if `principal` owns it and it is still kept.
    pub fn get(&self, id: &str, principal: &Principal) -> Option<Arc<TaskEntry>> {
        let tasks = self.lock();
        let t = tasks.get(id)?;
        if &t.owner != principal {
            return None;
        }
        if t.ended()
            .is_some_and(|e| e.elapsed() >= TASK_RETENTION_AFTER_END)
        {
            return None;
        }
        Some(t.clone())
    }

    /// Tasks kept: working, or finished and still within their retention (readable by
    /// `tasks/get`).
    pub fn kept(&self) -> usize {
        let now = Instant::now();
        self.lock().values().filter(|t| kept(t, now)).count()
    }

    /// Tasks still working (for status and tests).
    pub fn working(&self) -> usize {
        self.lock()
            .values()
            .filter(|t| t.status() == TaskStatus::Working)
            .count()
    }

    /// Cancels every working task (shutdown): their process trees are killed by their calls.
    pub fn cancel_all(&self) {
        for t in self.lock().values() {
            t.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use rmcp::model::ContentBlock;

    fn entry(owner: &str) -> Arc<TaskEntry> {
        TaskEntry::new(Principal::named(owner), CancellationToken::new())
    }

    #[tokio::test(start_paused = true)]
    async fn room_for_a_task_while_fewer_than_the_maximum_are_kept() {
        let tasks = Tasks::default();
        let kept: Vec<_> = (0..TASKS_MAX).map(|_| entry("a")).collect();
        for t in &kept {
            assert!(tasks.has_room(&Principal::named("a"), true));
            tasks.insert(t.clone()).unwrap();
        }
        assert!(
            !tasks.has_room(&Principal::named("a"), true),
            "every kept task is working"
        );
        kept[5].finish(&Ok(CallToolResult::success(vec![])));
        assert!(
            !tasks.has_room(&Principal::named("a"), true),
            "a finished task is kept for its retention"
        );
        tokio::time::advance(TASK_RETENTION_AFTER_END).await;
        assert!(tasks.has_room(&Principal::named("a"), true));
        tasks.insert(entry("b")).unwrap();
        assert!(!tasks.has_room(&Principal::named("a"), true));
    }

    #[test]
    fn a_status_message_carries_no_control_characters() {
        let t = entry("a");
        t.set_status_message("a\0b\x1b[31mc\td\r".into());
        assert_eq!(
            t.detailed().task.status_message.as_deref(),
            Some("a\u{fffd}b\u{fffd}[31mc\td\u{fffd}")
        );
    }

    #[test]
    fn a_task_is_visible_only_to_its_owner() {
        let tasks = Tasks::default();
        let t = entry("alice");
        let id = t.id().to_owned();
        tasks.insert(t).unwrap();
        assert!(tasks.get(&id, &Principal::named("alice")).is_some());
        assert!(tasks.get(&id, &Principal::named("bob")).is_none());
        assert!(
            tasks
                .get("no-such-id", &Principal::named("alice"))
                .is_none()
        );
    }

    #[test]
    fn outcomes_map_to_completed_failed_and_cancelled_and_stay_final() {
        let ok = entry("a");
        ok.set_status_message("halfway".into());
        assert_eq!(
            ok.detailed().task.status_message.as_deref(),
            Some("halfway")
        );
        let tool_error = CallToolResult::error(vec![ContentBlock::text("no")]);
        ok.finish(&Ok(tool_error));
        let d = ok.detailed();
        assert_eq!(
            d.status(),
            TaskStatus::Completed,
            "isError results complete"
        );
        // A later outcome does not change a finished task.
        ok.finish(&Err(ErrorData::internal_error("late", None)));
        assert_eq!(ok.detailed().status(), TaskStatus::Completed);

        let failed = entry("a");
        failed.finish(&Err(ErrorData::internal_error("boom", None)));
        let d = serde_json::to_value(failed.detailed()).unwrap();
        assert_eq!(d["status"], "failed");
        assert_eq!(d["error"]["code"], -32603);

        let cancelled = entry("a");
        cancelled.cancel();
        cancelled.finish(&Ok(CallToolResult::error(vec![ContentBlock::text("x")])));
        assert_eq!(cancelled.detailed().status(), TaskStatus::Cancelled);
    }

    #[test]
    fn a_full_store_keeps_finished_tasks_for_their_whole_retention() {
        let tasks = Tasks::default();
        let mut ids = Vec::new();
        for _ in 0..TASKS_MAX {
            let t = entry("a");
            t.finish(&Ok(CallToolResult::success(vec![])));
            ids.push(t.id().to_owned());
            tasks.insert(t).unwrap();
        }
        assert!(!tasks.has_room(&Principal::named("a"), true));
        assert!(
            tasks.insert(entry("b")).is_err(),
            "no finished task is discarded before its ttl"
        );
        let a = Principal::named("a");
        assert!(ids.iter().all(|id| tasks.get(id, &a).is_some()));
    }

    /// One principal cannot fill the table (its unread results are kept 30 min), which would
    /// leave no other principal's long call a task.
    #[test]
    fn principals_other_than_the_owner_have_shares_of_the_table_and_the_owner_keeps_room() {
        let tasks = Tasks::default();
        let guest = |name: &str| {
            TaskEntry::with_owner_class(Principal::named(name), false, CancellationToken::new())
        };
        let b = Principal::named("b");
        for _ in 0..TASKS_PER_PRINCIPAL {
            assert!(tasks.has_room(&b, false));
            tasks.insert(guest("b")).unwrap();
        }
        assert!(!tasks.has_room(&b, false), "b has its share");
        assert!(tasks.insert(guest("b")).is_err());
        assert!(
            tasks.has_room(&Principal::named("c"), false),
            "c still has room"
        );
        let mut n = TASKS_PER_PRINCIPAL;
        let mut i = 0;
        while n < TASKS_MAX - OWNER_RESERVED_TASKS {
            let name = format!("g{}", i / TASKS_PER_PRINCIPAL);
            tasks.insert(guest(&name)).unwrap();
            n += 1;
            i += 1;
        }
        assert!(
            !tasks.has_room(&Principal::named("z"), false),
            "guests leave the owner's reserve"
        );
        assert!(tasks.insert(guest("z")).is_err());
        let owner = Principal::named("owner");
        for _ in 0..OWNER_RESERVED_TASKS {
            assert!(tasks.has_room(&owner, true));
            tasks.insert(entry("owner")).unwrap();
        }
        assert!(!tasks.has_room(&owner, true), "the table is full");
    }

    #[test]
    fn a_store_full_of_working_tasks_refuses_a_new_one() {
        let tasks = Tasks::default();
        for _ in 0..TASKS_MAX {
            tasks.insert(entry("a")).unwrap();
        }
        assert!(tasks.insert(entry("a")).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn finished_tasks_expire_after_the_retention() {
        let tasks = Tasks::default();
        let t = entry("a");
        let id = t.id().to_owned();
        tasks.insert(t.clone()).unwrap();
        t.finish(&Ok(CallToolResult::success(vec![])));
        let a = Principal::named("a");
        tokio::time::advance(TASK_RETENTION_AFTER_END - std::time::Duration::from_secs(1)).await;
        assert!(tasks.get(&id, &a).is_some());
        tokio::time::advance(std::time::Duration::from_secs(2)).await;
        assert!(tasks.get(&id, &a).is_none());
    }
}
