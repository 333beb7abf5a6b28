//! The job store: one owner-only directory per job under `STATE_DIR/jobs`, acceptance with
//! idempotency and bounds, reads that report corrupt state as `unreadable`, cancellation,
//! retention, and the detection of runners that died.
//!
//! Locks (`flock`, released by the kernel when the holder dies): `jobs/.lock` serializes
//! acceptance and pruning; `jobs/<id>/lock` is held by the job's runner for its whole life, and
//! by whoever changes a job that has no runner (starting, cancelling or expiring a staged one,
//! spawning a runner). A runner is recorded by its [`RunnerId`] before its lock is released to
//! it, so a job whose recorded runner is not alive has none.

use std::{
    collections::BTreeMap,
    fs, io,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use serde::{Deserialize, Serialize};

use crate::limits::{
    JOB_RETENTION, JOB_STAGED_EXPIRY, JOBS_RETAINED_MAX, JOBS_RETAINED_OTHERS_MAX,
    JOBS_RETAINED_PER_PRINCIPAL, JOBS_UNFINISHED_PER_PRINCIPAL,
};

use super::{
    plan::Plan,
    state::{JobError, JobState, Phase, RunnerId, Status},
};
use crate::{
    call::error::{ToolError, ToolErrorCode, ToolResult},
    policy::ExecMode,
    primitives::{private, text::sha256_hex},
    tools::{process::engine::tree, resources::engine::Entry},
};

/// The hidden subcommand of this executable that runs one job (`machine-mcp job-runner`).
pub const RUNNER_SUBCOMMAND: &str = "job-runner";

/// Most bytes read of a plan or status file (a status holds at most 256 KiB of output).
const FILE_MAX: usize = 8 << 20;

/// The authority a job was accepted with; it keeps it for its whole life (DESIGN §3).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Authority {
    /// The caller's effective profile name.
    pub profile: String,
    /// The caller's exec mode.
    pub exec_mode: ExecMode,
    /// Children inherit the whole environment (else an isolated one).
    pub full_env: bool,
    /// The workspace root.
    pub workspace: PathBuf,
    /// Paths are confined to the workspace.
    pub restricted: bool,
}

/// An accepted plan (`plan.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredPlan {
    /// The job id.
    pub job_id: String,
    /// The principal that submitted it.
    pub owner: String,
    /// The plan (its secrets replaced by their SHA-256 once the job ended).
    pub plan: Plan,
    /// The canonical hash of the plan as submitted (idempotency).
    pub plan_sha256: String,
    /// The submitter's authority.
    pub authority: Authority,
    /// Each step's resolved working directory: main steps, then finally steps.
    pub cwds: Vec<PathBuf>,
    /// The resources the plan uses, as registered when it was accepted.
    pub resources: BTreeMap<String, Entry>,
    /// RFC 3339 acceptance time.
    pub created_at: String,
    /// Unix seconds of acceptance (staged expiry).
    pub created_unix: u64,
    /// Whether the plan's secrets were scrubbed.
    #[serde(default)]
    pub scrubbed: bool,
}

/// A job as read from the store.
#[derive(Debug, Clone)]
pub enum Loaded {
    /// Its plan and status.
    Ok(Box<StoredPlan>, Box<Status>),
    /// Its state cannot be read: why, and its owner when the plan could be read.
    Unreadable {
        /// What is wrong (the file and the parse error).
        why: String,
        /// The owner, when the plan was readable.
        owner: Option<String>,
    },
}

/// Who submitted a job (`submitter.json`, small so that counting by principal reads little).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Submitter {
    principal: String,
    owner_role: bool,
}

/// What an acceptance returns.
#[derive(Debug)]
pub struct Accepted {
    /// The job id.
    pub job_id: String,
    /// Its status now.
    pub status: Status,
    /// The same key and plan were accepted before: this is that job.
    pub replay: bool,
}

/// The job id of `key` submitted by `owner`: `job_` and 24 hex digits of SHA-256.
pub fn job_id(owner: &str, key: &str) -> String {
    let h = sha256_hex(format!("{owner}\0{key}").as_bytes());
    format!("job_{}", &h[..24])
}

/// Whether `id` has the shape of a job id (so it can name a directory safely).
pub fn valid_job_id(id: &str) -> bool {
    id.len() == 28
        && id.starts_with("job_")
        && id[4..]
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn now_unix() -> u64 {
    u64::try_from(chrono::Utc::now().timestamp()).unwrap_or(0)
}

fn boot_id() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// The identity of process `pid` now, when it is alive.
pub fn identity_of(pid: u32) -> Option<RunnerId> {
    let stat = tree::read_stat(i32::try_from(pid).ok()?)?;
    (!stat.zombie).then(|| RunnerId {
        pid,
        start_ticks: stat.started,
        boot_id: boot_id(),
    })
}

/// Whether the runner `id` is still alive (same PID, start time and boot).
pub fn runner_alive(id: &RunnerId) -> bool {
    identity_of(id.pid).is_some_and(|now| now == *id)
}

/// The store of one state directory.
#[derive(Debug, Clone)]
pub struct JobStore {
    root: PathBuf,
    runner_exe: PathBuf,
}

/// Maps an I/O error of the store to a tool error.
fn store_error(what: &str, e: &io::Error) -> ToolError {
    ToolError::new(
        ToolErrorCode::ExecutionFailed,
        format!("the job store: {what}: {e}"),
    )
}

impl JobStore {
    /// The store under `state_dir` (made absolute: steps run elsewhere and name its files);
    /// runners are started as `runner_exe job-runner`.
    pub fn new(state_dir: &Path, runner_exe: PathBuf) -> Self {
        let state_dir = std::path::absolute(state_dir).unwrap_or_else(|_| state_dir.to_owned());
        Self {
            root: state_dir.join("jobs"),
            runner_exe,
        }
    }

    /// `STATE_DIR/jobs`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of job `id`.
    ///
    /// # Errors
    /// `id` is not a job id (`not_found`: it names no job).
    pub fn dir(&self, id: &str) -> ToolResult<PathBuf> {
        if !valid_job_id(id) {
            return Err(ToolError::new(
                ToolErrorCode::NotFound,
                format!("{id:?} is not a job id (job_ and 24 hex digits)"),
            ));
        }
        Ok(self.root.join(id))
    }

    pub(crate) fn cancel_marker(&self, id: &str) -> PathBuf {
        self.root.join(id).join("cancel")
    }

    pub(crate) fn slots_dir(&self) -> PathBuf {
        self.root.join("slots")
    }

    /// Reads job `id`; `None` when there is no such job.
    pub fn load(&self, id: &str) -> Option<Loaded> {
        let dir = self.dir(id).ok()?;
        if !dir.is_dir() {
            return None;
        }
        let plan = read_json::<StoredPlan>(&dir.join("plan.json"));
        let status = read_json::<Status>(&dir.join("status.json"));
        Some(match (plan, status) {
            (Ok(p), Ok(s)) => Loaded::Ok(Box::new(p), Box::new(s)),
            (Ok(p), Err(why)) => Loaded::Unreadable {
                why,
                owner: Some(p.owner),
            },
            (Err(why), _) => Loaded::Unreadable { why, owner: None },
        })
    }

    /// The identity of job `id`'s status file now (inode, size, modification time), or `None`
    /// when it cannot be read; it changes with every write, which renames a new file over it.
    pub fn status_identity(&self, id: &str) -> Option<(u64, u64, i64, i64)> {
        use std::os::unix::fs::MetadataExt;
        let m = fs::metadata(self.root.join(id).join("status.json")).ok()?;
        Some((m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
    }

    /// Writes `status` of job `id`, bumping its version.
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn write_status(&self, id: &str, status: &mut Status) -> io::Result<()> {
        status.version += 1;
        let bytes = serde_json::to_vec(status).map_err(io::Error::other)?;
        private::write_atomic(&self.root.join(id).join("status.json"), &bytes)
    }

    /// Writes the plan file of a job (scrubbing).
    pub(crate) fn write_plan(&self, plan: &StoredPlan) -> io::Result<()> {
        let bytes = serde_json::to_vec(plan).map_err(io::Error::other)?;
        private::write_atomic(&self.root.join(&plan.job_id).join("plan.json"), &bytes)
    }

    /// Ends job `plan` in `state`, in this order: `result.json`, then the terminal status,
    /// then the plan's secrets (`stdin`, `env` values, temporary file contents) replaced by
    /// their SHA-256, and the cancellation marker removed. The caller holds the job's lock.
    ///
    /// # Errors
    /// The transition is not allowed, or the result or status cannot be written.
    pub(crate) fn end(
        &self,
        plan: &mut StoredPlan,
        status: &mut Status,
        state: JobState,
        error: Option<JobError>,
    ) -> Result<(), String> {
        let id = plan.job_id.clone();
        let mut end = status.clone();
        end.advance(state, None, error.clone())?;
        let result = serde_json::json!({
            "job_id": id,
            "state": state.as_str(),
            "error": error,
            "finished_at": end.finished_at,
            "steps": end.steps,
        });
        private::write_atomic(
            &self.root.join(&id).join("result.json"),
            &serde_json::to_vec(&result).map_err(|e| e.to_string())?,
        )
        .map_err(|e| format!("writing the result of {id}: {e}"))?;
        *status = end;
        self.write_status(&id, status)
            .map_err(|e| format!("writing the status of {id}: {e}"))?;
        scrub(plan);
        if let Err(e) = self.write_plan(plan) {
            tracing::warn!(error = %e, "cannot scrub a finished job's plan");
        }
        let _ = fs::remove_file(self.cancel_marker(&id));
        // Temporary files of writes a killed runner never finished (old statuses).
        if let Ok(rd) = fs::read_dir(self.root.join(&id)) {
            for e in rd.flatten() {
                if e.file_name().to_string_lossy().starts_with(".tmp-") {
                    let _ = fs::remove_file(e.path());
                }
            }
        }
        Ok(())
    }

    fn lock_store(&self) -> ToolResult<private::Lock> {
        private::create_dir(&self.root).map_err(|e| store_error("creating it", &e))?;
        private::lock(&self.root.join(".lock"), true)
            .map_err(|e| store_error("locking it", &e))?
            .ok_or_else(|| ToolError::internal("a waiting lock returned none"))
    }

    /// Takes the lock of job `id`: waits for it when `wait`, else `None` while held.
    pub(crate) fn lock_job(&self, id: &str, wait: bool) -> io::Result<Option<private::Lock>> {
        private::lock(&self.root.join(id).join("lock"), wait)
    }

    /// Accepts `plan` (validated by the caller): a new job, staged or started, or the existing
    /// job of the same key and plan.
    ///
    /// # Errors
    /// `conflict`: the key names a job with a different plan, or an unreadable one;
    /// `limit_exceeded` (retryable): the store holds [`JOBS_RETAINED_MAX`] jobs, or, for a
    /// caller that is not the owner (`owner_role` false), its principal has
    /// [`JOBS_UNFINISHED_PER_PRINCIPAL`] unfinished jobs or such callers hold
    /// [`JOBS_RETAINED_OTHERS_MAX`];
    /// `execution_failed`: the store cannot be written or the runner cannot start.
    pub fn accept(&self, plan: StoredPlan, staged: bool, owner_role: bool) -> ToolResult<Accepted> {
        let _store = self.lock_store()?;
        self.prune_if_due();
        let id = plan.job_id.clone();
        let dir = self.dir(&id)?;
        match self.load(&id) {
            Some(Loaded::Ok(old, status)) => {
                if old.plan_sha256 == plan.plan_sha256 && old.owner == plan.owner {
                    return Ok(Accepted {
                        job_id: id,
                        status: *status,
                        replay: true,
                    });
                }
                return Err(ToolError::conflict(format!(
                    "idempotency_key {:?} was used for a different plan, or from another \
                     workspace or policy (job {id}); use another key",
                    plan.plan.idempotency_key
                )));
            }
            Some(Loaded::Unreadable { why, .. }) => {
                return Err(ToolError::conflict(format!(
                    "idempotency_key {:?} names job {id}, whose state cannot be read ({why})",
                    plan.plan.idempotency_key
                )));
            }
            None => {}
        }
        if !owner_role {
            self.make_room_for(&plan.owner)?;
        }
        let ids = self.job_ids();
        let count = ids.len();
        if count >= JOBS_RETAINED_MAX {
            return Err(ToolError::limit(format!(
                "the job store holds {count} jobs, the most it keeps; terminal jobs are pruned \
                 after 7 days (or now: machine-mcp job prune --all)"
            ))
            .retryable());
        }
        // Complete before visible: the job directory appears with both files, or not at all.
        let tmp = tempfile::Builder::new()
            .prefix(".new-")
            .tempdir_in(&self.root)
            .map_err(|e| store_error("creating a job", &e))?;
        private::create_dir(tmp.path()).map_err(|e| store_error("creating a job", &e))?;
        let mut status = Status::new(staged, plan.created_at.clone());
        let write = || -> io::Result<()> {
            let p = serde_json::to_vec(&plan).map_err(io::Error::other)?;
            private::write_atomic(&tmp.path().join("plan.json"), &p)?;
            let s = serde_json::to_vec(&status).map_err(io::Error::other)?;
            private::write_atomic(&tmp.path().join("status.json"), &s)?;
            let who = serde_json::to_vec(&Submitter {
                principal: plan.owner.clone(),
                owner_role,
            })
            .map_err(io::Error::other)?;
            private::write_atomic(&tmp.path().join("submitter.json"), &who)?;
            fs::rename(tmp.path(), &dir)
        };
        write().map_err(|e| store_error("writing the job", &e))?;
        let _ = tmp.keep();
        if !staged {
            let lock = self
                .lock_job(&id, true)
                .map_err(|e| store_error("locking the job", &e))?
                .ok_or_else(|| ToolError::internal("a waiting lock returned none"))?;
            self.start_runner(&id, &mut status, lock)?;
        }
        Ok(Accepted {
            job_id: id,
            status,
            replay: false,
        })
    }

    /// Starts a runner for job `id` and records it in `status`, while the caller holds the
    /// job's `lock`: the runner waits for it, so it reads the status with its own identity in
    /// it. The lock is released on return.
    fn start_runner(&self, id: &str, status: &mut Status, lock: private::Lock) -> ToolResult<()> {
        let pid = self
            .spawn_runner(id)
            .map_err(|e| store_error("starting its runner", &e))?;
        status.runner = identity_of(pid);
        self.write_status(id, status)
            .map_err(|e| store_error("writing the job's status", &e))?;
        drop(lock);
        Ok(())
    }

    /// Starts `runner_exe job-runner --state-dir STATE_DIR ID` detached: stdio on /dev/null,
    /// without this process's tree tag (the watchdog of this server must not end it); the
    /// runner then leaves this process's session and group itself (`setsid`). Returns its PID.
    fn spawn_runner(&self, id: &str) -> io::Result<u32> {
        let state_dir = self.root.parent().unwrap_or(&self.root);
        let mut child = Command::new(&self.runner_exe)
            .arg(RUNNER_SUBCOMMAND)
            .arg("--state-dir")
            .arg(state_dir)
            .arg(id)
            .env_remove(tree::TREE_ENV)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let pid = child.id();
        // Reap it when it ends, so it never lingers as a zombie of this process.
        std::thread::Builder::new()
            .name("job-runner-reaper".into())
            .spawn(move || {
                let _ = child.wait();
            })?;
        Ok(pid)
    }

    /// Checks and makes room for one more job of `principal`, a caller other than the owner:
    /// at most [`JOBS_UNFINISHED_PER_PRINCIPAL`] unfinished jobs; past
    /// [`JOBS_RETAINED_PER_PRINCIPAL`] of its own, or [`JOBS_RETAINED_OTHERS_MAX`] of all such
    /// callers, the oldest finished job of the caller holding the most goes (this caller's own
    /// first). A running, staged or unreadable job is never removed.
    ///
    /// # Errors
    /// `limit_exceeded` (retryable) when no finished job can make room.
    fn make_room_for(&self, principal: &str) -> ToolResult<()> {
        let mut jobs: Vec<(String, Submitter, bool, std::time::SystemTime)> = self
            .job_ids()
            .into_iter()
            .filter_map(|i| {
                let s = self.submitter(&i)?;
                let dir = self.root.join(&i);
                let done = dir.join("result.json").exists();
                let born = fs::metadata(dir.join("submitter.json"))
                    .and_then(|m| m.modified())
                    .unwrap_or(std::time::UNIX_EPOCH);
                Some((i, s, done, born))
            })
            .filter(|(_, s, _, _)| !s.owner_role)
            .collect();
        jobs.sort_by_key(|j| j.3);
        let unfinished = jobs
            .iter()
            .filter(|(_, s, done, _)| s.principal == principal && !done)
            .count();
        if unfinished >= JOBS_UNFINISHED_PER_PRINCIPAL {
            return Err(ToolError::limit(format!(
                "you have {unfinished} unfinished jobs (staged, queued or running), the most one \
                 caller may have; wait for some to end or cancel_job drafts"
            ))
            .retryable());
        }
        let mine = jobs.iter().filter(|j| j.1.principal == principal).count();
        let victim_owner = if mine >= JOBS_RETAINED_PER_PRINCIPAL {
            Some(principal.to_owned())
        } else if jobs.len() >= JOBS_RETAINED_OTHERS_MAX {
            let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
            for j in &jobs {
                *counts.entry(j.1.principal.as_str()).or_default() += 1;
            }
            counts
                .into_iter()
                .max_by_key(|(_, n)| *n)
                .map(|(p, _)| p.to_owned())
        } else {
            None
        };
        let Some(victim_owner) = victim_owner else {
            return Ok(());
        };
        for (id, s, done, _) in &jobs {
            if s.principal == victim_owner
                && *done
                && let Ok(Some(_lock)) = self.lock_job(id, false)
                && fs::remove_dir_all(self.root.join(id)).is_ok()
            {
                return Ok(());
            }
        }
        Err(ToolError::limit(format!(
            "the store keeps no more jobs for callers other than the owner ({} held, none of \
             the largest holder's finished); retry when jobs have ended",
            jobs.len()
        ))
        .retryable())
    }

    fn submitter(&self, id: &str) -> Option<Submitter> {
        read_json(&self.root.join(id).join("submitter.json")).ok()
    }

    /// Every job directory's id, in no order.
    fn job_ids(&self) -> Vec<String> {
        let Ok(rd) = fs::read_dir(&self.root) else {
            return Vec::new();
        };
        rd.filter_map(Result::ok)
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| valid_job_id(n))
            .collect()
    }

    /// Every job, newest first (unreadable ones last).
    pub fn list(&self) -> Vec<(String, Loaded)> {
        let mut v: Vec<(String, Loaded)> = self
            .job_ids()
            .into_iter()
            .filter_map(|id| self.load(&id).map(|l| (id, l)))
            .collect();
        v.sort_by(|(a_id, a), (b_id, b)| {
            let key = |l: &Loaded| match l {
                Loaded::Ok(p, _) => Some(p.created_at.clone()),
                Loaded::Unreadable { .. } => None,
            };
            key(b).cmp(&key(a)).then_with(|| a_id.cmp(b_id))
        });
        v
    }

    /// Starts the staged job `id` (`machine-mcp job start`).
    ///
    /// # Errors
    /// No such job, not staged (`conflict`), expired, or the runner cannot start.
    pub fn start_staged(&self, id: &str) -> ToolResult<Status> {
        let lock = self.lock_existing(id)?;
        let (mut plan, mut status) = self.load_ok(id)?;
        if expired(&status, now_unix()) {
            let _ = self.expire(&mut plan, &mut status);
            return Err(ToolError::conflict(format!(
                "job {id} was staged more than 24 h ago and has expired; submit it again"
            )));
        }
        status
            .advance(JobState::Queued, None, None)
            .map_err(ToolError::conflict)?;
        self.start_runner(id, &mut status, lock)?;
        Ok(status)
    }

    fn lock_existing(&self, id: &str) -> ToolResult<private::Lock> {
        let dir = self.dir(id)?;
        if !dir.is_dir() {
            return Err(ToolError::new(
                ToolErrorCode::NotFound,
                format!("no job {id}"),
            ));
        }
        self.lock_job(id, true)
            .map_err(|e| store_error("locking the job", &e))?
            .ok_or_else(|| ToolError::internal("a waiting lock returned none"))
    }

    fn load_ok(&self, id: &str) -> ToolResult<(StoredPlan, Status)> {
        match self.load(id) {
            Some(Loaded::Ok(p, s)) => Ok((*p, *s)),
            Some(Loaded::Unreadable { why, .. }) => Err(ToolError::new(
                ToolErrorCode::ExecutionFailed,
                format!("job {id} is unreadable: {why}"),
            )),
            None => Err(ToolError::new(
                ToolErrorCode::NotFound,
                format!("no job {id}"),
            )),
        }
    }

    /// Ends a staged job as `expired` (the caller holds its lock).
    fn expire(&self, plan: &mut StoredPlan, status: &mut Status) -> Result<(), String> {
        let err = JobError {
            code: "expired".into(),
            message: "staged more than 24 h ago and never started".into(),
        };
        self.end(plan, status, JobState::Expired, Some(err))
    }

    /// Ends job `id` as `expired` when it is a draft older than 24 h.
    fn expire_if_due(&self, id: &str) {
        let due =
            |l: &Option<Loaded>| matches!(l, Some(Loaded::Ok(_, s)) if expired(s, now_unix()));
        if !due(&self.load(id)) {
            return;
        }
        if let Ok(Some(_lock)) = self.lock_job(id, false)
            && let Some(Loaded::Ok(mut plan, mut status)) = self.load(id)
            && expired(&status, now_unix())
        {
            let _ = self.expire(&mut plan, &mut status);
        }
    }

    /// Cancels job `id`: a staged job becomes `cancelled` at once; a queued or running one gets
    /// the marker its runner checks before every spawn and while steps run. A terminal job is
    /// left as it is. Returns the status after.
    ///
    /// # Errors
    /// No such job, unreadable, or the marker cannot be written.
    pub fn cancel(&self, id: &str) -> ToolResult<Status> {
        let (_, status) = self.load_ok(id)?;
        if status.is_terminal() {
            return Ok(status);
        }
        if status.state() == JobState::Staged {
            let _lock = self.lock_existing(id)?;
            let (mut plan, mut status) = self.load_ok(id)?;
            let err = JobError {
                code: "cancelled".into(),
                message: "cancelled before it was started".into(),
            };
            if status.state() == JobState::Staged {
                self.end(&mut plan, &mut status, JobState::Cancelled, Some(err))
                    .map_err(ToolError::internal)?;
            }
            return Ok(status);
        }
        private::write_atomic(&self.cancel_marker(id), b"cancel\n")
            .map_err(|e| store_error("writing the cancellation marker", &e))?;
        Ok(status)
    }

    /// Expires staged jobs older than 24 h and removes terminal jobs older than 7 days (every
    /// terminal job with `all`). Never touches running, queued, staged or unreadable jobs.
    /// Returns how many were removed.
    pub fn prune(&self, all: bool) -> usize {
        match self.lock_store() {
            Ok(_lock) => self.prune_locked(all),
            Err(_) => 0,
        }
    }

    /// [`JobStore::prune_locked`] at most once a minute (the mtime of `jobs/.pruned`), so an
    /// acceptance does not read every job's files.
    fn prune_if_due(&self) {
        let mark = self.root.join(".pruned");
        let due = fs::metadata(&mark)
            .and_then(|m| m.modified())
            .map_or(true, |t| t.elapsed().map_or(true, |e| e >= PRUNE_EVERY));
        if due {
            let _ = private::write_atomic(&mark, b"");
            self.prune_locked(false);
        }
    }

    fn prune_locked(&self, all: bool) -> usize {
        let now = now_unix();
        let mut removed = 0;
        for id in self.job_ids() {
            let Some(Loaded::Ok(_, status)) = self.load(&id) else {
                continue;
            };
            if expired(&status, now) {
                self.expire_if_due(&id);
                continue;
            }
            let old = status
                .finished_unix
                .is_some_and(|f| now.saturating_sub(f) >= JOB_RETENTION.as_secs());
            if status.is_terminal() && (all || old) {
                // A terminal job has no runner; its lock is free unless a reader holds it.
                if let Ok(Some(_lock)) = self.lock_job(&id, false)
                    && fs::remove_dir_all(self.root.join(&id)).is_ok()
                {
                    removed += 1;
                }
            }
        }
        removed
    }

    /// Finds jobs whose runner died (or never started) and starts a runner for each
    /// ([`JobStore::recover_one`]). Returns how many runners were started.
    pub fn recover(&self) -> usize {
        self.job_ids()
            .iter()
            .filter(|id| self.recover_one(id))
            .count()
    }

    /// Starts a runner for job `id` when it is neither staged nor terminal and its recorded
    /// runner is not alive: the new runner starts a job no step of which ever ran, and
    /// recovers the others. Returns whether one was started.
    pub fn recover_one(&self, id: &str) -> bool {
        self.expire_if_due(id);
        let needs = |l: &Option<Loaded>| match l {
            Some(Loaded::Ok(_, s)) => {
                !s.is_terminal()
                    && s.state() != JobState::Staged
                    && !s.runner.as_ref().is_some_and(runner_alive)
            }
            _ => false,
        };
        if !needs(&self.load(id)) {
            return false;
        }
        // A free lock means no runner holds the job; a busy one is a runner being started.
        let Ok(Some(lock)) = self.lock_job(id, false) else {
            return false;
        };
        let loaded = self.load(id);
        if !needs(&loaded) {
            return false;
        }
        let Some(Loaded::Ok(_, mut status)) = loaded else {
            return false;
        };
        if status.main_started && status.state() != JobState::Interrupted {
            // Readers see at once what the new runner will do: the job was interrupted, and
            // its recovery (or its end as interrupted, without finally steps) follows.
            let err = JobError {
                code: "interrupted".into(),
                message: "its runner died (killed, or the machine restarted); main steps are \
                          never run again"
                    .into(),
            };
            let _ = status.advance(JobState::Interrupted, Some(Phase::Recovery), Some(err));
        }
        match self.start_runner(id, &mut status, lock) {
            Ok(()) => {
                tracing::info!(job = %id, "started a runner for a job whose runner had died");
                true
            }
            Err(e) => {
                tracing::warn!(job = %id, error = %e, "cannot start a runner for a job whose runner died");
                false
            }
        }
    }
}

/// Replaces the plan's secrets (`stdin` texts, `env` values, temporary file contents) by their
/// SHA-256.
fn scrub(p: &mut StoredPlan) {
    let hide = |s: &mut String| *s = format!("[scrubbed sha256:{}]", sha256_hex(s.as_bytes()));
    for step in p
        .plan
        .steps
        .iter_mut()
        .chain(p.plan.finally_steps.iter_mut())
    {
        if let Some(s) = step.stdin.as_mut() {
            hide(s);
        }
        step.env.values_mut().for_each(hide);
    }
    p.plan.temporary_files.values_mut().for_each(hide);
    p.scrubbed = true;
}

/// The hash that decides replay against `conflict`: the canonical plan and the authority it
/// runs with (the same key from another workspace or profile is another plan).
pub(crate) fn plan_hash(plan: &Plan, authority: &Authority) -> String {
    let mut bytes = super::plan::canonical_sha256(plan).into_bytes();
    bytes.push(0);
    bytes.extend(serde_json::to_vec(authority).unwrap_or_default());
    sha256_hex(&bytes)
}

fn expired(status: &Status, now: u64) -> bool {
    status.state() == JobState::Staged
        && chrono::DateTime::parse_from_rfc3339(&status.created_at).is_ok_and(|t| {
            now.saturating_sub(u64::try_from(t.timestamp()).unwrap_or(0))
                >= JOB_STAGED_EXPIRY.as_secs()
        })
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, String> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let bytes = private::read_capped(path, FILE_MAX).map_err(|e| format!("{name}: {e}"))?;
    serde_json::from_slice(&bytes).map_err(|e| format!("{name}: not valid ({e})"))
}

/// How often acceptance prunes the store.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

/// How long `read_job` sleeps between reads of a job it waits for.
pub(crate) const POLL: Duration = Duration::from_millis(25);

/// A new acceptance's timestamps.
pub(crate) fn accepted_now() -> (String, u64) {
    (now_rfc3339(), now_unix())
}
