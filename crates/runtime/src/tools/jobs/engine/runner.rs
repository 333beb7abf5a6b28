//! The job runner (`machine-mcp job-runner --state-dir DIR ID`): one detached process per job
//! that runs its plan to the end, whatever happens to the server that started it.
//!
//! It leaves the starting server's session and process group (`setsid`) and takes the job's
//! lock for its whole life. Under the lock the status decides what it does:
//! - `queued` and no main step ever started: a normal run — wait for the dependencies, take one
//!   of the [`JOBS_RUNNING_MAX`] run slots (`jobs/slots/N.lock`), prepare the private directory
//!   (temporary files, verified resource copies), run the main steps in order, then the
//!   finally steps when a main step started;
//! - `running`, `cleaning` or `interrupted` (recovering): the runner before it died. The job
//!   becomes `interrupted` and its finally steps run again in phase `recovery` (main steps are
//!   never replayed), at most [`JOB_RECOVERY_ATTEMPTS_MAX`] attempts;
//! - anything else (staged, terminal): nothing to do.
//!
//! Steps run through the process engine (`Proc`): own process group, bounded capture, the
//! step's timeout, whole-tree termination; the cancellation marker is checked before every
//! main step and every 100 ms while one runs. The end is written in order: `result.json`, then
//! the terminal status, then the plan's secrets are scrubbed and the private directory removed.

use std::{
    collections::BTreeMap,
    ffi::OsString,
    path::{Path, PathBuf},
    time::Duration,
};

use crate::limits::{
    JOB_OUTPUT_MAX_BYTES, JOB_RECOVERY_ATTEMPTS_MAX, JOB_STEP_TIMEOUT_DEFAULT,
    JOB_STREAM_OUTPUT_MAX_BYTES, JOBS_RUNNING_MAX,
};

use super::{
    plan::{Capture, Placeholder, Step, parse_placeholders},
    redact::Redactor,
    state::{JobError, JobState, Phase, Status, StepRecord, StepState},
    store::{JobStore, Loaded, StoredPlan, identity_of},
};
use crate::{
    primitives::{private, text::sha256_hex},
    tools::{
        process::engine::{
            Proc, Spawn, Stream,
            env::{Scratch, child_env_from},
        },
        resources::engine::{Registry, read_verified},
    },
};

/// How often the cancellation marker and dependencies are looked at.
const CHECK_EVERY: Duration = Duration::from_millis(100);

/// Runs job `id` of the store under `state_dir` (the `job-runner` subcommand).
///
/// # Errors
/// The job does not exist or cannot be read, or its status cannot be written; a message for
/// the runner's exit status (nobody reads its stderr: what matters is in the status).
pub async fn run(state_dir: &Path, id: &str) -> Result<(), String> {
    let _ = nix::unistd::setsid();
    let exe = crate::programs::own_binary();
    let store = JobStore::new(state_dir, exe);
    store.dir(id).map_err(|e| e.to_string())?;
    let lock_store = store.clone();
    let lock_id = id.to_owned();
    let _lock = tokio::task::spawn_blocking(move || lock_store.lock_job(&lock_id, true))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("locking job {id}: {e}"))?;
    let (plan, mut status) = match store.load(id) {
        Some(Loaded::Ok(p, s)) => (*p, *s),
        Some(Loaded::Unreadable { why, .. }) => return Err(format!("job {id}: {why}")),
        None => return Err(format!("no job {id}")),
    };
    if status.is_terminal() || status.state() == JobState::Staged {
        return Ok(());
    }
    status.runner = identity_of(std::process::id());
    let mut job = Job {
        store: &store,
        plan,
        status,
        redactor: Redactor::default(),
        private: store.root().join(id).join("private"),
        output_used: 0,
        inherited: std::env::vars_os().collect(),
    };
    job.save()?;
    if job.status.state() == JobState::Queued && !job.status.main_started {
        job.run_fresh().await
    } else {
        job.recover().await
    }
}

/// One job being run.
struct Job<'a> {
    store: &'a JobStore,
    plan: StoredPlan,
    status: Status,
    redactor: Redactor,
    private: PathBuf,
    output_used: usize,
    /// The environment steps inherit from: this runner's own on a normal run (its starter's);
    /// on a recovery, the snapshot the first runner kept ([`ENV_SNAPSHOT`]).
    inherited: Vec<(OsString, OsString)>,
}

/// Where a runner keeps the environment it was started with, for a recovery to run the
/// finally steps in it (removed when the job ends).
const ENV_SNAPSHOT: &str = "environment.json";

/// How the main steps ended.
enum Outcome {
    Succeeded,
    Failed(JobError),
    Cancelled,
}

fn err(code: &str, message: impl Into<String>) -> JobError {
    JobError {
        code: code.into(),
        message: message.into(),
    }
}

impl Job<'_> {
    fn id(&self) -> String {
        self.plan.job_id.clone()
    }

    fn save(&mut self) -> Result<(), String> {
        let id = self.id();
        self.store
            .write_status(&id, &mut self.status)
            .map_err(|e| format!("writing the status of {id}: {e}"))
    }

    fn advance(
        &mut self,
        to: JobState,
        phase: Option<Phase>,
        error: Option<JobError>,
    ) -> Result<(), String> {
        self.status.advance(to, phase, error)?;
        self.save()
    }

    fn cancel_requested(&self) -> bool {
        self.store.cancel_marker(&self.plan.job_id).exists()
    }

    async fn run_fresh(&mut self) -> Result<(), String> {
        match self.wait_for_dependencies().await {
            Ok(()) => {}
            Err(Some(e)) => return self.finish(JobState::DependencyFailed, Some(e)),
            Err(None) => {
                let e = err("cancelled", "cancelled while waiting for its dependencies");
                return self.finish(JobState::Cancelled, Some(e));
            }
        }
        let Some(_slot) = self.take_slot(true).await else {
            let e = err("cancelled", "cancelled while waiting for a run slot");
            return self.finish(JobState::Cancelled, Some(e));
        };
        if let Err(e) = self.prepare() {
            return self.finish(JobState::Failed, Some(e));
        }
        self.keep_environment();
        let mut outcome = Outcome::Succeeded;
        for (i, step) in self.plan.plan.steps.clone().iter().enumerate() {
            if self.cancel_requested() {
                outcome = Outcome::Cancelled;
                break;
            }
            if !self.status.main_started {
                self.status.main_started = true;
                self.status.started_at = Some(now());
                self.advance(JobState::Running, Some(Phase::Steps), None)?;
            }
            let rec = self.run_step(Phase::Steps, i, step, true).await?;
            match (rec.state, rec.exit_code, step.allow_failure) {
                (StepState::Cancelled, ..) => {
                    outcome = Outcome::Cancelled;
                    break;
                }
                (StepState::Exited, Some(0), _) | (_, _, true) => {}
                (StepState::TimedOut, ..) => {
                    outcome = Outcome::Failed(err(
                        "timeout",
                        format!("step {i} timed out after {} s", timeout_of(step).as_secs()),
                    ));
                    break;
                }
                (state, code, _) => {
                    let how = match (state, code, &rec.signal) {
                        (StepState::FailedToStart, ..) => rec
                            .error
                            .clone()
                            .unwrap_or_else(|| "could not start".into()),
                        (_, Some(c), _) => format!("exited with code {c}"),
                        (_, None, Some(sig)) => format!("ended by {sig}"),
                        _ => "ended".into(),
                    };
                    outcome = Outcome::Failed(err("step_failed", format!("step {i} {how}")));
                    break;
                }
            }
        }
        let mut finally_failed = None;
        if self.status.main_started && !self.plan.plan.finally_steps.is_empty() {
            self.advance(JobState::Cleaning, Some(Phase::FinallySteps), None)?;
            finally_failed = self.run_finally(Phase::FinallySteps).await?;
        }
        let (state, error) = match outcome {
            Outcome::Cancelled => (
                JobState::Cancelled,
                Some(err(
                    "cancelled",
                    "cancelled (cancel_job, tasks/cancel or machine-mcp job cancel)",
                )),
            ),
            Outcome::Failed(e) => (JobState::Failed, Some(e)),
            Outcome::Succeeded => match finally_failed {
                Some(e) => (JobState::Failed, Some(e)),
                None => (JobState::Succeeded, None),
            },
        };
        self.finish(state, error)
    }

    async fn recover(&mut self) -> Result<(), String> {
        let interrupted = err(
            "interrupted",
            "its runner died (killed, or the machine restarted); main steps are never run again",
        );
        // `recover_one` may have marked it interrupted already; the recovery is this runner's.
        // The step that was running when the runner died ended with it.
        for rec in &mut self.status.steps {
            if rec.state == StepState::Running {
                rec.state = StepState::Interrupted;
            }
        }
        let attempts = self.status.recovery_attempts + 1;
        let needed = self.status.main_started && !self.plan.plan.finally_steps.is_empty();
        if !needed {
            return self.finish(JobState::Interrupted, Some(interrupted));
        }
        if self.status.state() != JobState::Interrupted {
            self.status.advance(
                JobState::Interrupted,
                Some(Phase::Recovery),
                Some(interrupted),
            )?;
        }
        if attempts > JOB_RECOVERY_ATTEMPTS_MAX {
            let e = err(
                "recovery_failed",
                format!(
                    "its finally steps did not finish in {JOB_RECOVERY_ATTEMPTS_MAX} recovery attempts"
                ),
            );
            return self.finish(JobState::RecoveryFailed, Some(e));
        }
        self.status.recovery_attempts = attempts;
        self.save()?;
        self.load_environment();
        let _slot = self.take_slot(false).await;
        if let Err(e) = self.prepare() {
            return self.finish(JobState::RecoveryFailed, Some(e));
        }
        match self.run_finally(Phase::Recovery).await? {
            None => self.finish(JobState::Recovered, None),
            Some(e) => self.finish(JobState::RecoveryFailed, Some(e)),
        }
    }

    /// Runs every finally step (no cancellation); the first failure not allowed, if any.
    async fn run_finally(&mut self, phase: Phase) -> Result<Option<JobError>, String> {
        let mut failed = None;
        for (i, step) in self.plan.plan.finally_steps.clone().iter().enumerate() {
            let rec = self.run_step(phase, i, step, false).await?;
            let ok = rec.state == StepState::Exited && rec.exit_code == Some(0);
            if !ok && !step.allow_failure && failed.is_none() {
                let how = match (rec.state, rec.exit_code) {
                    (StepState::Exited, Some(c)) => format!("exited with code {c}"),
                    (state, _) => state.as_str().replace('_', " "),
                };
                failed = Some(err("finally_failed", format!("finally step {i} {how}")));
            }
        }
        Ok(failed)
    }

    /// Waits until every dependency is terminal: `Ok` when all succeeded, `Err(Some)` naming
    /// one that did not, `Err(None)` when cancelled meanwhile.
    async fn wait_for_dependencies(&self) -> Result<(), Option<JobError>> {
        let deps = self.plan.plan.depends_on.clone();
        loop {
            if self.cancel_requested() {
                return Err(None);
            }
            let mut waiting = false;
            for dep in &deps {
                match self.store.load(dep) {
                    Some(Loaded::Ok(_, s)) if s.is_terminal() => {
                        if s.state() != JobState::Succeeded {
                            return Err(Some(err(
                                "dependency_failed",
                                format!("job {dep} ended {}", s.state().as_str()),
                            )));
                        }
                    }
                    Some(Loaded::Ok(..)) => waiting = true,
                    Some(Loaded::Unreadable { .. }) | None => {
                        return Err(Some(err(
                            "dependency_failed",
                            format!("job {dep} is gone or unreadable"),
                        )));
                    }
                }
            }
            if !waiting {
                return Ok(());
            }
            tokio::time::sleep(CHECK_EVERY * 2).await;
        }
    }

    /// Takes one of the run slots, waiting for one; `None` when cancelled meanwhile (only
    /// with `cancellable`).
    async fn take_slot(&self, cancellable: bool) -> Option<private::Lock> {
        let dir = self.store.slots_dir();
        let _ = private::create_dir(&dir);
        loop {
            for n in 0..JOBS_RUNNING_MAX {
                if let Ok(Some(l)) = private::lock(&dir.join(format!("{n}.lock")), false) {
                    return Some(l);
                }
            }
            if cancellable && self.cancel_requested() {
                return None;
            }
            tokio::time::sleep(CHECK_EVERY * 2).await;
        }
    }

    /// Writes the temporary files and the verified resource copies (0600 in a 0700
    /// directory) and learns the resources' forms to redact.
    fn prepare(&mut self) -> Result<(), JobError> {
        let setup = |e: std::io::Error| err("setup_failed", format!("the private directory: {e}"));
        let _ = std::fs::remove_dir_all(&self.private);
        private::create_dir(&self.private.join("temp")).map_err(setup)?;
        private::create_dir(&self.private.join("resources")).map_err(setup)?;
        for (name, content) in &self.plan.plan.temporary_files {
            private::write_atomic(&self.private.join("temp").join(name), content.as_bytes())
                .map_err(setup)?;
        }
        self.redactor = Redactor::default();
        for (alias, entry) in &self.plan.resources {
            let bytes = read_verified(entry).map_err(|(_, why)| {
                err("resource_changed", format!("resource {alias:?}: {why}"))
            })?;
            if sha256_hex(&bytes) != entry.sha256 {
                return Err(err(
                    "resource_changed",
                    format!("resource {alias:?} changed"),
                ));
            }
            let copy = self.private.join("resources").join(alias);
            private::write_atomic(&copy, &bytes).map_err(setup)?;
            // The copy by the path the step is given and by its real one (a state directory
            // reached through a symlink), and the registered file.
            let real = std::fs::canonicalize(&copy).unwrap_or_else(|_| copy.clone());
            let paths = [copy, real, entry.path.clone()].map(|p| p.to_string_lossy().into_owned());
            let paths: Vec<&[u8]> = paths.iter().map(|p| p.as_bytes()).collect();
            self.redactor.add(alias, &bytes, &paths);
        }
        // Every other registered resource is redacted too: a program may print one it finds
        // by itself (a tool reading ~/.kube/config by default).
        let state_dir = self.store.root().parent().unwrap_or(self.store.root());
        if let Ok(all) = Registry::new(state_dir).load() {
            for (alias, entry) in all
                .iter()
                .filter(|(a, _)| !self.plan.resources.contains_key(*a))
            {
                if let Ok(bytes) = read_verified(entry) {
                    let path = entry.path.to_string_lossy().into_owned();
                    self.redactor.add(alias, &bytes, &[path.as_bytes()]);
                }
            }
        }
        Ok(())
    }

    fn substitute(&self, text: &str) -> Result<String, String> {
        let mut out = String::new();
        for part in parse_placeholders(text)? {
            match part {
                Ok(lit) => out.push_str(lit),
                Err(Placeholder::Temp(n)) => {
                    out.push_str(&self.private.join("temp").join(n).to_string_lossy());
                }
                Err(Placeholder::Resource(a)) => {
                    // Checked again before every use: a resource changed or removed since the
                    // job started fails the step that names it.
                    self.resource_bytes(&a)?;
                    out.push_str(&self.private.join("resources").join(a).to_string_lossy());
                }
                Err(Placeholder::Workspace) => {
                    out.push_str(&self.plan.authority.workspace.to_string_lossy());
                }
            }
        }
        Ok(out)
    }

    fn resource_bytes(&self, alias: &str) -> Result<Vec<u8>, String> {
        let entry = self
            .plan
            .resources
            .get(alias)
            .ok_or_else(|| format!("resource {alias:?} is not part of the plan"))?;
        read_verified(entry).map_err(|(_, why)| format!("resource {alias:?}: {why}"))
    }

    /// What to start for `step`: substituted argv and environment, stdin, checked cwd.
    fn spawn_spec(
        &self,
        phase: Phase,
        index: usize,
        step: &Step,
    ) -> Result<(Spawn, Option<Vec<u8>>), String> {
        let argv: Vec<String> = step
            .argv
            .iter()
            .map(|a| self.substitute(a))
            .collect::<Result<_, _>>()?;
        let argv: Vec<OsString> = if step.shell {
            vec!["/bin/sh".into(), "-c".into(), argv.concat().into()]
        } else {
            argv.into_iter().map(OsString::from).collect()
        };
        let mut env = BTreeMap::new();
        for (k, v) in &step.env {
            env.insert(k.clone(), self.substitute(v)?);
        }
        for (var, alias) in &step.env_resources {
            let bytes = self.resource_bytes(alias)?;
            let text = String::from_utf8(bytes).map_err(|_| {
                format!(
                    "resource {alias:?} is not UTF-8 text, so it cannot be an environment variable"
                )
            })?;
            let text = text.strip_suffix('\n').unwrap_or(&text);
            let text = text.strip_suffix('\r').unwrap_or(text);
            if text.contains('\0') {
                return Err(format!("resource {alias:?} holds a NUL byte"));
            }
            env.insert(var.clone(), text.to_owned());
        }
        let stdin = match (&step.stdin, &step.stdin_resource) {
            (Some(s), _) => Some(s.clone().into_bytes()),
            (None, Some(alias)) => Some(self.resource_bytes(alias)?),
            (None, None) => None,
        };
        let at = match phase {
            Phase::Steps => index,
            Phase::FinallySteps | Phase::Recovery => self.plan.plan.steps.len() + index,
        };
        let cwd = self
            .plan
            .cwds
            .get(at)
            .cloned()
            .unwrap_or_else(|| self.plan.authority.workspace.clone());
        let real =
            std::fs::canonicalize(&cwd).map_err(|e| format!("cwd {}: {e}", cwd.display()))?;
        if self.plan.authority.restricted && !real.starts_with(&self.plan.authority.workspace) {
            return Err(format!("cwd {} left the workspace", cwd.display()));
        }
        let scratch = Scratch::new(self.private.join("scratch"));
        let env = child_env_from(
            self.inherited.clone(),
            self.plan.authority.full_env,
            &scratch,
            false,
            &env,
        )
        .map_err(|e| format!("the private directories: {e}"))?;
        Ok((
            Spawn {
                argv,
                cwd: real,
                env,
                pty: None,
            },
            stdin,
        ))
    }

    /// Runs one step to its end and records it.
    async fn run_step(
        &mut self,
        phase: Phase,
        index: usize,
        step: &Step,
        cancellable: bool,
    ) -> Result<StepRecord, String> {
        let mut rec = StepRecord {
            phase,
            index,
            argv: step.argv.clone(),
            state: StepState::Running,
            exit_code: None,
            signal: None,
            started_at: now(),
            duration_ms: 0,
            stdout: String::new(),
            stderr: String::new(),
            stdout_bytes: 0,
            stderr_bytes: 0,
            stdout_truncated: false,
            stderr_truncated: false,
            error: None,
        };
        let started = tokio::time::Instant::now();
        let spawned = self
            .spawn_spec(phase, index, step)
            .and_then(|(spec, stdin)| {
                Proc::spawn(&spec, stdin, false).map_err(|e| {
                    let program = spec.argv.first().map(|a| a.to_string_lossy().into_owned());
                    format!("{}: {e}", program.unwrap_or_default())
                })
            });
        let proc = match spawned {
            Ok(p) => p,
            Err(e) => {
                rec.state = StepState::FailedToStart;
                rec.error = Some(self.redactor.redact_str(&e));
                self.status.steps.push(rec.clone());
                self.save()?;
                return Ok(rec);
            }
        };
        self.status.steps.push(rec.clone());
        self.save()?;
        let deadline = started + timeout_of(step);
        let mut tick = tokio::time::interval(CHECK_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let (exit, state) = loop {
            tokio::select! {
                exit = proc.wait() => break (exit, StepState::Exited),
                _ = tokio::time::sleep_until(deadline) => {
                    break (proc.terminate(false).await, StepState::TimedOut);
                }
                _ = tick.tick() => {
                    if cancellable && self.cancel_requested() {
                        break (proc.terminate(false).await, StepState::Cancelled);
                    }
                }
            }
        };
        rec.state = state;
        rec.exit_code = exit.code;
        rec.signal = exit.signal_name();
        rec.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        rec.stdout_bytes = proc.stdout.with(|b| b.total()).unwrap_or(0);
        rec.stderr_bytes = proc.stderr.with(|b| b.total()).unwrap_or(0);
        match step.capture_output {
            Capture::Discard => {
                rec.stdout_truncated = rec.stdout_bytes > 0;
                rec.stderr_truncated = rec.stderr_bytes > 0;
            }
            Capture::Redacted => {
                let room = JOB_OUTPUT_MAX_BYTES.saturating_sub(self.output_used) / 2;
                let max = room.min(JOB_STREAM_OUTPUT_MAX_BYTES);
                (rec.stdout, rec.stdout_truncated) = capture(&proc.stdout, max, &self.redactor);
                (rec.stderr, rec.stderr_truncated) = capture(&proc.stderr, max, &self.redactor);
                self.output_used += rec.stdout.len() + rec.stderr.len();
            }
        }
        if let Some(last) = self.status.steps.last_mut() {
            *last = rec.clone();
        }
        self.save()?;
        Ok(rec)
    }

    /// Ends the job ([`JobStore::end`]) and removes its private directory and environment
    /// snapshot.
    fn finish(&mut self, state: JobState, error: Option<JobError>) -> Result<(), String> {
        let ended = self
            .store
            .end(&mut self.plan, &mut self.status, state, error);
        let _ = std::fs::remove_dir_all(&self.private);
        let _ = std::fs::remove_file(self.store.root().join(self.id()).join(ENV_SNAPSHOT));
        ended
    }

    /// Keeps this runner's environment for a recovery (0600; only for a job that inherits the
    /// whole environment: an isolated one is rebuilt from the allowlist either way).
    fn keep_environment(&self) {
        if !self.plan.authority.full_env {
            return;
        }
        let vars: BTreeMap<String, String> = std::env::vars()
            .filter(|(k, _)| k != crate::tools::process::engine::tree::TREE_ENV)
            .collect();
        if let Ok(bytes) = serde_json::to_vec(&vars) {
            let path = self.store.root().join(self.id()).join(ENV_SNAPSHOT);
            let _ = private::write_atomic(&path, &bytes);
        }
    }

    /// Takes the environment the first runner kept, when there is one.
    fn load_environment(&mut self) {
        let path = self.store.root().join(self.id()).join(ENV_SNAPSHOT);
        if let Ok(bytes) = private::read_capped(&path, 16 << 20)
            && let Ok(vars) = serde_json::from_slice::<BTreeMap<String, String>>(&bytes)
        {
            self.inherited = vars
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect();
        }
    }
}

fn timeout_of(step: &Step) -> Duration {
    step.timeout_seconds
        .map_or(JOB_STEP_TIMEOUT_DEFAULT, Duration::from_secs)
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// A stream's redacted output within `max` bytes: the whole when it fits, else head and tail
/// around a marker. Each side is read with the longest needle's length to spare and cut in the
/// original's coordinates ([`Redactor::head`], [`Redactor::tail`]), so no part of a secret is
/// shown at the cut. Returns `(text, truncated)`.
fn capture(stream: &Stream, max: usize, r: &Redactor) -> (String, bool) {
    stream
        .with(|b| {
            let margin = r.longest();
            if let Some(all) = b.whole() {
                let red = r.redact(&all);
                if red.len() <= max {
                    return (String::from_utf8_lossy(&red).into_owned(), false);
                }
            }
            let half = max / 2;
            let head = r.head(b.first_bytes(half + margin), half);
            let tail = r.tail(&b.last_bytes(half + margin), half);
            let text = format!(
                "{}\n[... {} bytes in total; head and tail shown ...]\n{}",
                String::from_utf8_lossy(&head),
                b.total(),
                String::from_utf8_lossy(&tail)
            );
            (text, true)
        })
        .unwrap_or_default()
}
