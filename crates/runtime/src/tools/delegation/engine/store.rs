//! The receipts of delegations: one owner-only JSON file per request,
//! `STATE_DIR/delegations/<request_id>.json` (0600, the directory 0700), each written
//! complete-before-visible (a temporary file renamed over it).
//!
//! Every change is made under `delegations/.lock` (`flock`, released by the kernel when the
//! holder dies), which serializes admission and counting across every server sharing the state
//! directory. A receipt records the [`RunnerId`] of the server that accepted (and runs) it; a
//! non-terminal receipt whose server is no longer alive is settled by whoever reads it
//! ([`settle`]): nothing is ever re-run. A file that cannot be parsed is reported as
//! unreadable and never overwritten or pruned. Beside the receipts: `draining` (the marker of
//! `machine-mcp delegation drain`) and `<request_id>.cancel` (a cancellation asked by another
//! server than the one that runs the request).

use std::{
    fs, io,
    path::{Path, PathBuf},
    sync::OnceLock,
};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{limits::DELEGATION_OUTPUT_MAX_BYTES, limits::DELEGATION_RECORDS_MAX};

use super::agents::Agent;
use crate::{
    primitives::{private, text::sha256_hex},
    tools::jobs::engine::{
        state::RunnerId,
        store::{identity_of, runner_alive},
    },
};

/// The directory of the receipts under the state directory.
pub const DIR: &str = "delegations";
/// The file whose presence makes every server refuse new delegations
/// (`machine-mcp delegation drain`; removed by `machine-mcp delegation resume`).
pub const DRAINING_MARKER: &str = "draining";

/// Most bytes read of one receipt file (the output is at most
/// [`DELEGATION_OUTPUT_MAX_BYTES`], escaped in JSON at most six bytes per byte).
const FILE_MAX: usize = 8 * DELEGATION_OUTPUT_MAX_BYTES;

/// Where a delegation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DelegationStatus {
    /// Accepted; waiting for a free run slot.
    Queued,
    /// The agent runs.
    Running,
    /// The agent exited successfully with a final answer (`output`).
    Completed,
    /// It did not complete: see `diagnostic_code` (`agent_failed`, `cancelled`, `timeout`,
    /// `spawn_failed`, `server_restarted` for a queued one, `server_stopped`).
    Failed,
    /// The server that ran it stopped while it ran: the agent may have continued or finished;
    /// it is never re-run.
    Unknown,
}

impl DelegationStatus {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Unknown => "unknown",
        }
    }

    /// Whether nothing more will happen to it.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Unknown)
    }
}

/// Whether the prompt reached the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    /// The agent was never started: nothing ran.
    NotSent,
    /// The agent was started with the prompt on its stdin.
    Sent,
    /// The agent is being started (a `running` receipt, for the moment between reserving the
    /// run and recording the start), or the server stopped in that moment: the agent may or
    /// may not have been started. Never `not_sent` once it may have been.
    Unknown,
}

impl DeliveryState {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotSent => "not_sent",
            Self::Sent => "sent",
            Self::Unknown => "unknown",
        }
    }
}

/// A delegation's receipt as callers see it (the tools' structured output).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Receipt {
    /// The caller-chosen request id (a UUID, lowercase, hyphenated).
    pub request_id: String,
    /// The agent it was delegated to.
    pub agent: Agent,
    /// queued, running, completed, failed or unknown.
    pub status: DelegationStatus,
    /// not_sent, sent or unknown: whether the prompt reached the agent.
    pub delivery_state: DeliveryState,
    /// The agent's own session id (to resume it with the agent's CLI), once it reported one.
    pub session_id: Option<String>,
    /// RFC 3339 UTC time it was accepted.
    pub created_at: String,
    /// RFC 3339 UTC time the agent was started.
    pub started_at: Option<String>,
    /// RFC 3339 UTC time it became terminal.
    pub ended_at: Option<String>,
    /// The agent's final answer, once completed (or what it answered before it failed); at
    /// most 256 KiB, cut on a character boundary.
    pub output: Option<String>,
    /// `output` was cut.
    pub output_truncated: bool,
    /// The agent's exit code, once it exited.
    pub exit_code: Option<i32>,
    /// Why it is failed or unknown: `agent_failed`, `cancelled`, `timeout`, `spawn_failed`,
    /// `server_restarted`, `server_stopped`.
    pub diagnostic_code: Option<String>,
    /// What happened, for people (an agent's error message, or stderr's last lines).
    pub diagnostic_message: Option<String>,
    /// The directory the agent runs in.
    pub directory: String,
    /// The request of the worker that delegated this one; none for a caller's request.
    pub parent_request_id: Option<String>,
    /// The first request of its tree (itself for a caller's request).
    pub root_request_id: String,
    /// 0 for a caller's request, the parent's depth + 1 for a worker's.
    pub depth: u32,
}

impl Receipt {
    /// Sets the final answer, cut to [`DELEGATION_OUTPUT_MAX_BYTES`] on a character boundary.
    pub fn set_output(&mut self, mut text: String) {
        let truncated = text.len() > DELEGATION_OUTPUT_MAX_BYTES;
        if truncated {
            let mut end = DELEGATION_OUTPUT_MAX_BYTES;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
        }
        self.output = Some(text);
        self.output_truncated = truncated;
    }

    /// Makes it terminal now with `status`, `delivery` and a diagnostic.
    pub fn end(
        &mut self,
        status: DelegationStatus,
        delivery: DeliveryState,
        diagnostic: Option<(&str, String)>,
    ) {
        self.status = status;
        self.delivery_state = delivery;
        if let Some((code, message)) = diagnostic {
            self.diagnostic_code = Some(code.to_owned());
            self.diagnostic_message = Some(message);
        }
        self.ended_at = Some(now_rfc3339());
    }
}

/// The receipt file: the receipt and what only the store needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredReceipt {
    /// What callers see.
    #[serde(flatten)]
    pub receipt: Receipt,
    /// [`fingerprint`] of the request (idempotency).
    pub fingerprint: String,
    /// The principal whose request it is (a worker's requests belong to its root's owner).
    pub owner: String,
    /// The server that accepted it and runs it.
    pub server: Option<RunnerId>,
}

/// One receipt file as read.
#[derive(Debug, Clone)]
pub enum Entry {
    /// A receipt.
    Ok(Box<StoredReceipt>),
    /// A file that cannot be read or parsed: its request id (from the file name) and why.
    Unreadable {
        /// The request id its name gives.
        request_id: String,
        /// The error.
        why: String,
    },
}

impl Entry {
    /// The request id.
    pub fn request_id(&self) -> &str {
        match self {
            Entry::Ok(r) => &r.receipt.request_id,
            Entry::Unreadable { request_id, .. } => request_id,
        }
    }
}

/// Whether `id` is a request id: a UUID in its lowercase hyphenated form (8-4-4-4-12 hex).
pub fn valid_request_id(id: &str) -> bool {
    id.len() == 36
        && id.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_digit() || (b'a'..=b'f').contains(&b),
        })
}

/// The fingerprint of a request: SHA-256 hex over agent, directory, prompt and owner, each
/// length-prefixed so no two requests share one.
pub fn fingerprint(agent: Agent, directory: &Path, prompt: &str, owner: &str) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut bytes = Vec::with_capacity(prompt.len() + 256);
    for part in [
        agent.name().as_bytes(),
        directory.as_os_str().as_bytes(),
        prompt.as_bytes(),
        owner.as_bytes(),
    ] {
        bytes.extend_from_slice(&(part.len() as u64).to_be_bytes());
        bytes.extend_from_slice(part);
    }
    sha256_hex(&bytes)
}

/// RFC 3339 UTC now, in milliseconds.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The identity of this process (the server), read once; `None` without `/proc`.
pub fn this_server() -> Option<RunnerId> {
    static ME: OnceLock<Option<RunnerId>> = OnceLock::new();
    ME.get_or_init(|| identity_of(std::process::id())).clone()
}

/// Whether the server `id` is alive: this process, or a process with the same PID, start time
/// and boot ([`runner_alive`], as jobs tell a dead runner).
pub fn server_alive(id: Option<&RunnerId>) -> bool {
    match id {
        Some(id) => this_server().as_ref() == Some(id) || runner_alive(id),
        None => false,
    }
}

/// The diagnostic of a request whose server died while it ran.
pub const RESTARTED_RUNNING: &str = "the server that ran it stopped; the agent may have continued \
                                     or finished; it is not re-run";
/// The diagnostic of a request whose server died while it was queued.
pub const RESTARTED_QUEUED: &str = "the server that accepted it stopped before it started; never \
                                    started; nothing ran";

/// The restart rule: a non-terminal receipt whose server is not alive becomes terminal — a
/// running one `unknown` (delivery `sent`, or `unknown` when the server stopped before it
/// recorded the start), a queued one `failed`/`not_sent` — with diagnostic
/// `server_restarted`. Returns whether it changed (the caller writes it back, under the lock).
pub fn settle(r: &mut StoredReceipt) -> bool {
    if r.receipt.status.is_terminal() || server_alive(r.server.as_ref()) {
        return false;
    }
    let running = r.receipt.status == DelegationStatus::Running;
    let (status, delivery, message) = if running {
        let delivery = match r.receipt.delivery_state {
            DeliveryState::Sent => DeliveryState::Sent,
            _ => DeliveryState::Unknown,
        };
        (DelegationStatus::Unknown, delivery, RESTARTED_RUNNING)
    } else {
        (
            DelegationStatus::Failed,
            DeliveryState::NotSent,
            RESTARTED_QUEUED,
        )
    };
    r.receipt.end(
        status,
        delivery,
        Some(("server_restarted", message.to_owned())),
    );
    true
}

/// The receipts of one state directory.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
}

impl Store {
    /// The store under `state_dir` (`STATE_DIR/delegations`, made absolute).
    pub fn new(state_dir: &Path) -> Self {
        let state_dir = std::path::absolute(state_dir).unwrap_or_else(|_| state_dir.to_owned());
        Self {
            root: state_dir.join(DIR),
        }
    }

    /// `STATE_DIR/delegations`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Takes the store's lock (creating the directory 0700), waiting for it.
    ///
    /// # Errors
    /// The directory or the lock file cannot be created, or locking fails.
    pub fn lock(&self) -> io::Result<private::Lock> {
        private::create_dir(&self.root)?;
        private::lock(&self.root.join(".lock"), true)?
            .ok_or_else(|| io::Error::other("a waiting lock returned none"))
    }

    /// The file of request `id` (which must be a [`valid_request_id`]).
    fn path(&self, id: &str) -> PathBuf {
        self.root.join(format!("{id}.json"))
    }

    /// The cancellation marker of request `id`.
    pub fn cancel_marker(&self, id: &str) -> PathBuf {
        self.root.join(format!("{id}.cancel"))
    }

    /// Reads request `id`'s receipt; `None` when there is none (or `id` is not a request id).
    pub fn load(&self, id: &str) -> Option<Entry> {
        if !valid_request_id(id) {
            return None;
        }
        let path = self.path(id);
        let bytes = match private::read_capped(&path, FILE_MAX) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
            Err(e) => {
                return Some(Entry::Unreadable {
                    request_id: id.to_owned(),
                    why: format!("{id}.json: {e}"),
                });
            }
        };
        Some(match serde_json::from_slice::<StoredReceipt>(&bytes) {
            Ok(r) if r.receipt.request_id == id => Entry::Ok(Box::new(r)),
            Ok(_) => Entry::Unreadable {
                request_id: id.to_owned(),
                why: format!("{id}.json: names another request"),
            },
            Err(e) => Entry::Unreadable {
                request_id: id.to_owned(),
                why: format!("{id}.json: not a valid receipt ({e})"),
            },
        })
    }

    /// Writes `r` (the caller holds the lock and has read the file as a receipt, or found none:
    /// an unreadable file is never written over).
    ///
    /// # Errors
    /// The file cannot be written (disk full, permissions).
    pub fn write(&self, r: &StoredReceipt) -> io::Result<()> {
        if !valid_request_id(&r.receipt.request_id) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a request id",
            ));
        }
        let bytes = serde_json::to_vec_pretty(r).map_err(io::Error::other)?;
        private::create_dir(&self.root)?;
        private::write_atomic(&self.path(&r.receipt.request_id), &bytes)
    }

    /// The request ids of every receipt file (`<uuid>.json`), in no particular order; other
    /// files (the lock, markers, temporary files) are not receipts.
    pub fn ids(&self) -> Vec<String> {
        let Ok(rd) = fs::read_dir(&self.root) else {
            return Vec::new();
        };
        rd.flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let id = name.strip_suffix(".json")?;
                valid_request_id(id).then(|| id.to_owned())
            })
            .collect()
    }

    /// Every receipt file, settled ([`settle`]: receipts of dead servers are written back as
    /// terminal). The caller holds the lock.
    pub fn all_settled(&self) -> Vec<Entry> {
        self.ids()
            .iter()
            .filter_map(|id| self.load_settled(id))
            .collect()
    }

    /// [`Store::load`] with the restart rule applied and written back. The caller holds the
    /// lock.
    pub fn load_settled(&self, id: &str) -> Option<Entry> {
        let mut entry = self.load(id)?;
        if let Entry::Ok(r) = &mut entry
            && settle(r)
            && let Err(e) = self.write(r)
        {
            tracing::warn!(error = %e, "cannot record a delegation whose server stopped");
        }
        Some(entry)
    }

    /// Removes the oldest terminal receipts until fewer than [`DELEGATION_RECORDS_MAX`]
    /// remain among `entries` (which it updates), so one more fits. Never removes a queued,
    /// running or unreadable one, and removes nothing when removing every terminal one would
    /// still leave no room (a refused request costs no receipt). Returns whether there is room
    /// now. The caller holds the lock.
    pub fn make_room(&self, entries: &mut Vec<Entry>) -> bool {
        if entries.len() < DELEGATION_RECORDS_MAX {
            return true;
        }
        let mut terminal: Vec<(String, String)> = entries
            .iter()
            .filter_map(|e| match e {
                Entry::Ok(r) if r.receipt.status.is_terminal() => Some((
                    r.receipt
                        .ended_at
                        .clone()
                        .unwrap_or_else(|| r.receipt.created_at.clone()),
                    r.receipt.request_id.clone(),
                )),
                _ => None,
            })
            .collect();
        terminal.sort();
        let excess = entries.len() + 1 - DELEGATION_RECORDS_MAX;
        if excess > terminal.len() {
            return false;
        }
        let mut removed = std::collections::HashSet::new();
        for (_, id) in terminal.into_iter().take(excess) {
            if fs::remove_file(self.path(&id)).is_ok() {
                let _ = fs::remove_file(self.cancel_marker(&id));
                removed.insert(id);
            }
        }
        entries.retain(|e| !removed.contains(e.request_id()));
        entries.len() < DELEGATION_RECORDS_MAX
    }

    /// Whether `machine-mcp delegation drain` was run (and not undone by `resume`).
    pub fn draining(&self) -> bool {
        self.root.join(DRAINING_MARKER).exists()
    }

    /// Writes (`on`) or removes the draining marker.
    ///
    /// # Errors
    /// The marker cannot be written or removed.
    pub fn set_draining(&self, on: bool) -> io::Result<()> {
        let marker = self.root.join(DRAINING_MARKER);
        if on {
            private::create_dir(&self.root)?;
            private::write_atomic(&marker, now_rfc3339().as_bytes())
        } else {
            match fs::remove_file(&marker) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    fn receipt(id: &str, status: DelegationStatus, server: Option<RunnerId>) -> StoredReceipt {
        StoredReceipt {
            receipt: Receipt {
                request_id: id.to_owned(),
                agent: Agent::Codex,
                status,
                delivery_state: if status == DelegationStatus::Queued {
                    DeliveryState::NotSent
                } else {
                    DeliveryState::Sent
                },
                session_id: None,
                created_at: now_rfc3339(),
                started_at: None,
                ended_at: status.is_terminal().then(now_rfc3339),
                output: None,
                output_truncated: false,
                exit_code: None,
                diagnostic_code: None,
                diagnostic_message: None,
                directory: "/w".into(),
                parent_request_id: None,
                root_request_id: id.to_owned(),
                depth: 0,
            },
            fingerprint: "f".into(),
            owner: "local".into(),
            server,
        }
    }

    fn id(n: usize) -> String {
        format!("00000000-0000-4000-8000-{n:012x}")
    }

    /// A server identity that is not alive: this process's PID with other start ticks.
    fn dead() -> RunnerId {
        let mut me = this_server().expect("/proc");
        me.start_ticks += 1;
        me
    }

    #[test]
    fn request_ids_are_lowercase_hyphenated_uuids() {
        assert!(valid_request_id("0f8fad5b-d9cb-469f-a165-70867728950e"));
        assert!(!valid_request_id("0F8FAD5B-D9CB-469F-A165-70867728950E"));
        assert!(!valid_request_id("0f8fad5bd9cb469fa16570867728950e"));
        assert!(!valid_request_id("../../../../etc/passwd-aaaaaaaaaaaaaa"));
        assert!(!valid_request_id(""));
    }

    #[test]
    fn receipts_are_owner_only_and_a_corrupt_one_is_reported_not_overwritten() {
        let t = tempfile::tempdir().unwrap();
        let store = Store::new(t.path());
        let _lock = store.lock().unwrap();
        store
            .write(&receipt(&id(1), DelegationStatus::Completed, this_server()))
            .unwrap();
        assert_eq!(fs::metadata(store.root()).unwrap().mode() & 0o777, 0o700);
        let file = store.root().join(format!("{}.json", id(1)));
        assert_eq!(fs::metadata(&file).unwrap().mode() & 0o777, 0o600);
        assert!(matches!(store.load(&id(1)), Some(Entry::Ok(_))));

        fs::write(store.root().join(format!("{}.json", id(2))), b"{not json").unwrap();
        let all = store.all_settled();
        assert_eq!(all.len(), 2);
        let bad = all.iter().find(|e| e.request_id() == id(2)).unwrap();
        assert!(matches!(bad, Entry::Unreadable { why, .. } if why.contains("not a valid")));
        assert_eq!(
            fs::read(store.root().join(format!("{}.json", id(2)))).unwrap(),
            b"{not json",
            "never overwritten"
        );
    }

    #[test]
    fn receipts_of_a_dead_server_are_settled_and_never_requeued() {
        let t = tempfile::tempdir().unwrap();
        let store = Store::new(t.path());
        let _lock = store.lock().unwrap();
        store
            .write(&receipt(&id(1), DelegationStatus::Running, Some(dead())))
            .unwrap();
        store
            .write(&receipt(&id(2), DelegationStatus::Queued, Some(dead())))
            .unwrap();
        store
            .write(&receipt(&id(3), DelegationStatus::Running, this_server()))
            .unwrap();
        store.all_settled();
        let get = |n| match store.load(&id(n)) {
            Some(Entry::Ok(r)) => r.receipt,
            other => panic!("{other:?}"),
        };
        let running = get(1);
        assert_eq!(running.status, DelegationStatus::Unknown);
        assert_eq!(running.delivery_state, DeliveryState::Sent);
        assert_eq!(running.diagnostic_code.as_deref(), Some("server_restarted"));
        let queued = get(2);
        assert_eq!(queued.status, DelegationStatus::Failed);
        assert_eq!(queued.delivery_state, DeliveryState::NotSent);
        assert_eq!(get(3).status, DelegationStatus::Running, "its server lives");
    }

    #[test]
    fn room_is_made_from_the_oldest_terminal_receipts_only() {
        let t = tempfile::tempdir().unwrap();
        let store = Store::new(t.path());
        let _lock = store.lock().unwrap();
        for n in 0..DELEGATION_RECORDS_MAX {
            let status = if n < 2 {
                DelegationStatus::Completed
            } else {
                DelegationStatus::Queued
            };
            store
                .write(&receipt(&id(n), status, this_server()))
                .unwrap();
        }
        fs::write(store.root().join(format!("{}.json", id(5000))), b"x").unwrap();
        let mut all = store.all_settled();
        assert!(store.make_room(&mut all), "two terminal ones to spare");
        assert_eq!(all.len(), DELEGATION_RECORDS_MAX - 1);
        assert!(store.load(&id(0)).is_none() && store.load(&id(1)).is_none());
        assert!(store.load(&id(5000)).is_some(), "the unreadable one stays");
        store
            .write(&receipt(&id(9000), DelegationStatus::Queued, this_server()))
            .unwrap();
        let mut all = store.all_settled();
        assert!(!store.make_room(&mut all), "nothing terminal left");
    }

    #[test]
    fn nothing_is_pruned_when_pruning_cannot_make_room() {
        let t = tempfile::tempdir().unwrap();
        let store = Store::new(t.path());
        let _lock = store.lock().unwrap();
        store
            .write(&receipt(&id(0), DelegationStatus::Completed, this_server()))
            .unwrap();
        for n in 1..=DELEGATION_RECORDS_MAX + 5 {
            fs::write(store.root().join(format!("{}.json", id(n))), b"{").unwrap();
        }
        let mut all = store.all_settled();
        assert!(!store.make_room(&mut all));
        assert!(
            store.load(&id(0)).is_some(),
            "the finished one was pruned for nothing"
        );
        assert_eq!(all.len(), DELEGATION_RECORDS_MAX + 6);
    }

    #[test]
    fn outputs_are_cut_on_a_character_boundary() {
        let mut r = receipt(&id(1), DelegationStatus::Running, None).receipt;
        r.set_output("é".repeat(DELEGATION_OUTPUT_MAX_BYTES));
        let out = r.output.unwrap();
        assert!(r.output_truncated && out.len() <= DELEGATION_OUTPUT_MAX_BYTES);
        assert!(out.chars().all(|c| c == 'é'));
    }
}
