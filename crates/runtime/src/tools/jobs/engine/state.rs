//! A job's state machine and its status record (`status.json`).
//!
//! [`JobState`] is an enum whose transitions ([`Status::advance`]) are the only way to change
//! it (DESIGN §2): `staged → queued | cancelled | expired`; `queued → running | cancelled |
//! failed | dependency_failed | interrupted`; `running → cleaning | succeeded | failed |
//! cancelled | interrupted`; `cleaning → succeeded | failed | cancelled | interrupted`;
//! `interrupted` (recovering) `→ recovered | recovery_failed`. The terminal states have none.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The state of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// A validated draft that runs only when the user starts it.
    Staged,
    /// Waiting for its dependencies or a run slot.
    Queued,
    /// Its main steps are running.
    Running,
    /// Its finally steps are running.
    Cleaning,
    /// Every step succeeded (or was allowed to fail).
    Succeeded,
    /// A step failed, timed out or could not start.
    Failed,
    /// Cancelled by `cancel_job`.
    Cancelled,
    /// Its runner died; while `phase` is `recovery` its finally steps are running again.
    Interrupted,
    /// Interrupted, and its finally steps then ran in recovery.
    Recovered,
    /// Interrupted, and its finally steps failed (or ran out of attempts) in recovery.
    RecoveryFailed,
    /// A job it depends on did not succeed.
    DependencyFailed,
    /// Staged and never started within 24 h.
    Expired,
    /// Its status cannot be read (reported, never replaced or pruned).
    Unreadable,
}

impl JobState {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Staged => "staged",
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Cleaning => "cleaning",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
            JobState::Interrupted => "interrupted",
            JobState::Recovered => "recovered",
            JobState::RecoveryFailed => "recovery_failed",
            JobState::DependencyFailed => "dependency_failed",
            JobState::Expired => "expired",
            JobState::Unreadable => "unreadable",
        }
    }

    fn may_become(self, to: JobState) -> bool {
        use JobState::*;
        matches!(
            (self, to),
            (Staged, Queued | Cancelled | Expired)
                | (
                    Queued,
                    Running | Cancelled | Failed | DependencyFailed | Interrupted
                )
                | (
                    Running,
                    Running | Cleaning | Succeeded | Failed | Cancelled | Interrupted
                )
                | (Cleaning, Succeeded | Failed | Cancelled | Interrupted)
                | (Interrupted, Interrupted | Recovered | RecoveryFailed)
        )
    }
}

/// Which steps run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The main steps.
    Steps,
    /// The finally steps after the main ones.
    FinallySteps,
    /// The finally steps again, after the runner died.
    Recovery,
}

impl Phase {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Steps => "steps",
            Phase::FinallySteps => "finally_steps",
            Phase::Recovery => "recovery",
        }
    }
}

/// How one step went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StepState {
    /// Running now.
    Running,
    /// Exited (see exit_code / signal).
    Exited,
    /// Its timeout terminated its tree.
    TimedOut,
    /// Cancellation terminated its tree.
    Cancelled,
    /// It could not be started (see error).
    FailedToStart,
    /// Its runner died while it ran (its tree was ended with the runner).
    Interrupted,
}

impl StepState {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            StepState::Running => "running",
            StepState::Exited => "exited",
            StepState::TimedOut => "timed_out",
            StepState::Cancelled => "cancelled",
            StepState::FailedToStart => "failed_to_start",
            StepState::Interrupted => "interrupted",
        }
    }
}

/// The identity of a runner process: PID, start time (clock ticks since boot) and boot id, so
/// a reused PID — or the same PID after a reboot — is never taken for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunnerId {
    /// Process id.
    pub pid: u32,
    /// `/proc/PID/stat` field 22.
    pub start_ticks: u64,
    /// `/proc/sys/kernel/random/boot_id`.
    pub boot_id: String,
}

/// One step's record, with its redacted output.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct StepRecord {
    /// `steps`, `finally_steps` or `recovery`.
    pub phase: Phase,
    /// Index in its list of the plan.
    pub index: usize,
    /// The argv as planned (placeholders not substituted).
    pub argv: Vec<String>,
    /// How it went.
    pub state: StepState,
    /// Exit code, when it exited normally.
    pub exit_code: Option<i32>,
    /// The signal that ended it (e.g. SIGKILL).
    pub signal: Option<String>,
    /// RFC 3339 start time.
    pub started_at: String,
    /// Milliseconds it ran (so far, while running).
    pub duration_ms: u64,
    /// Redacted stdout: head and tail around a marker when longer than its share.
    pub stdout: String,
    /// Redacted stderr, bounded the same way.
    pub stderr: String,
    /// Bytes written to stdout in all.
    pub stdout_bytes: u64,
    /// Bytes written to stderr in all.
    pub stderr_bytes: u64,
    /// stdout was cut to head and tail (or discarded).
    pub stdout_truncated: bool,
    /// stderr was cut to head and tail (or discarded).
    pub stderr_truncated: bool,
    /// Why it could not start, or what else went wrong (redacted).
    pub error: Option<String>,
}

/// Why a job did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct JobError {
    /// A stable code: `step_failed`, `timeout`, `cancelled`, `dependency_failed`,
    /// `resource_changed`, `setup_failed`, `interrupted`, `recovery_failed`, `expired`.
    pub code: String,
    /// What happened, for people.
    pub message: String,
}

/// A job's status (`status.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Status {
    /// The state.
    state: JobState,
    /// The phase while steps run or recovery runs.
    pub phase: Option<Phase>,
    /// Bumped on every write; `read_job` waits for it to change.
    pub version: u64,
    /// RFC 3339 acceptance time.
    pub created_at: String,
    /// RFC 3339 time its first step started.
    pub started_at: Option<String>,
    /// RFC 3339 time it became terminal.
    pub finished_at: Option<String>,
    /// The same as Unix seconds (retention).
    pub finished_unix: Option<u64>,
    /// The runner expected to hold the job.
    pub runner: Option<RunnerId>,
    /// Recovery attempts so far.
    pub recovery_attempts: u32,
    /// Whether a main step ever started (finally steps run only then).
    pub main_started: bool,
    /// Why it did not succeed.
    pub error: Option<JobError>,
    /// Every step that started, in order.
    pub steps: Vec<StepRecord>,
}

impl Status {
    /// A new job's status: `staged` or `queued`.
    pub fn new(staged: bool, created_at: String) -> Self {
        Self {
            state: if staged {
                JobState::Staged
            } else {
                JobState::Queued
            },
            phase: None,
            version: 1,
            created_at,
            started_at: None,
            finished_at: None,
            finished_unix: None,
            runner: None,
            recovery_attempts: 0,
            main_started: false,
            error: None,
            steps: Vec::new(),
        }
    }

    /// The state.
    pub fn state(&self) -> JobState {
        self.state
    }

    /// Whether nothing more will happen to the job: a terminal state (and, for `interrupted`,
    /// no recovery under way).
    pub fn is_terminal(&self) -> bool {
        match self.state {
            JobState::Staged | JobState::Queued | JobState::Running | JobState::Cleaning => false,
            JobState::Interrupted => self.phase != Some(Phase::Recovery),
            _ => true,
        }
    }

    /// Moves to `to` in `phase`; a terminal state also records the finish time and `error`.
    ///
    /// # Errors
    /// The transition is not one of the state machine's (the status is unchanged).
    pub fn advance(
        &mut self,
        to: JobState,
        phase: Option<Phase>,
        error: Option<JobError>,
    ) -> Result<(), String> {
        if self.is_terminal() || !self.state.may_become(to) {
            return Err(format!(
                "a {} job cannot become {}",
                self.state.as_str(),
                to.as_str()
            ));
        }
        self.state = to;
        self.phase = phase;
        if error.is_some() {
            self.error = error;
        }
        if self.is_terminal() {
            let now = chrono::Utc::now();
            self.finished_at = Some(now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
            self.finished_unix = u64::try_from(now.timestamp()).ok();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_machines_transitions_are_taken_and_terminal_states_stay() {
        let mut s = Status::new(false, "t".into());
        assert!(
            s.advance(JobState::Succeeded, None, None).is_err(),
            "queued → succeeded"
        );
        s.advance(JobState::Running, Some(Phase::Steps), None)
            .unwrap();
        s.advance(JobState::Cleaning, Some(Phase::FinallySteps), None)
            .unwrap();
        s.advance(JobState::Succeeded, None, None).unwrap();
        assert!(s.is_terminal() && s.finished_unix.is_some());
        assert!(s.advance(JobState::Running, None, None).is_err());
        assert_eq!(s.state(), JobState::Succeeded);

        let mut s = Status::new(false, "t".into());
        s.advance(JobState::Running, Some(Phase::Steps), None)
            .unwrap();
        s.advance(JobState::Interrupted, Some(Phase::Recovery), None)
            .unwrap();
        assert!(!s.is_terminal(), "recovering");
        s.advance(JobState::Recovered, None, None).unwrap();
        assert!(s.is_terminal());

        let mut s = Status::new(true, "t".into());
        assert!(
            s.advance(JobState::Running, None, None).is_err(),
            "staged → running"
        );
        s.advance(JobState::Expired, None, None).unwrap();
        assert!(s.is_terminal());
    }
}
