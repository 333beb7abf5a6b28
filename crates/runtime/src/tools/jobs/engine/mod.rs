//! The engine of managed jobs (`docs/jobs.md`): the plan and its validation
//! ([`plan`]), the state machine and status record ([`state`]), the on-disk store with
//! idempotency, bounds, retention and the detection of dead runners ([`store`]), the detached
//! runner ([`runner`]) and output redaction (`redact`). [`JobView`] is a job as callers see
//! it (`read_job`, `machine-mcp job read`).

pub mod plan;
pub(crate) mod redact;
pub mod runner;
pub mod state;
pub mod store;

use schemars::JsonSchema;
use serde::Serialize;

use state::{JobError, JobState, Phase, StepRecord};
use store::Loaded;

/// A job as callers see it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct JobView {
    /// The job id.
    pub job_id: String,
    /// The plan's name (empty when unreadable).
    pub name: String,
    /// The principal that submitted it.
    pub owner: Option<String>,
    /// The state (`unreadable` when its files cannot be read).
    pub state: JobState,
    /// The phase while steps or recovery run.
    pub phase: Option<Phase>,
    /// Bumped on every change; pass it back as after_version to wait for the next.
    pub version: u64,
    /// The plan's idempotency key.
    pub idempotency_key: Option<String>,
    /// Jobs it waits for.
    pub depends_on: Vec<String>,
    /// RFC 3339 acceptance time.
    pub created_at: Option<String>,
    /// RFC 3339 time its first step started.
    pub started_at: Option<String>,
    /// RFC 3339 time it ended.
    pub finished_at: Option<String>,
    /// Recovery attempts after its runner died.
    pub recovery_attempts: u32,
    /// Main steps and finally steps in the plan.
    pub planned_steps: usize,
    /// Finally steps in the plan.
    pub planned_finally_steps: usize,
    /// Why it did not succeed (for unreadable: what cannot be read).
    pub error: Option<JobError>,
    /// Every step that started, in order, with its redacted output.
    pub steps: Vec<StepRecord>,
}

impl JobView {
    /// The view of job `id` as loaded.
    pub fn of(id: &str, loaded: &Loaded) -> Self {
        match loaded {
            Loaded::Ok(plan, status) => Self {
                job_id: id.to_owned(),
                name: plan.plan.name.clone(),
                owner: Some(plan.owner.clone()),
                state: status.state(),
                phase: status.phase,
                version: status.version,
                idempotency_key: Some(plan.plan.idempotency_key.clone()),
                depends_on: plan.plan.depends_on.clone(),
                created_at: Some(status.created_at.clone()),
                started_at: status.started_at.clone(),
                finished_at: status.finished_at.clone(),
                recovery_attempts: status.recovery_attempts,
                planned_steps: plan.plan.steps.len(),
                planned_finally_steps: plan.plan.finally_steps.len(),
                error: status.error.clone(),
                steps: status.steps.clone(),
            },
            Loaded::Unreadable { why, owner } => Self {
                job_id: id.to_owned(),
                name: String::new(),
                owner: owner.clone(),
                state: JobState::Unreadable,
                phase: None,
                version: 0,
                idempotency_key: None,
                depends_on: Vec::new(),
                created_at: None,
                started_at: None,
                finished_at: None,
                recovery_attempts: 0,
                planned_steps: 0,
                planned_finally_steps: 0,
                error: Some(JobError {
                    code: "unreadable".into(),
                    message: format!(
                        "its state cannot be read ({why}); the files are left as they are"
                    ),
                }),
                steps: Vec::new(),
            },
        }
    }

    /// Whether nothing more will happen to it.
    pub fn is_terminal(&self) -> bool {
        match self.state {
            JobState::Staged | JobState::Queued | JobState::Running | JobState::Cleaning => false,
            JobState::Interrupted => self.phase != Some(Phase::Recovery),
            _ => true,
        }
    }

    /// Appends each step as text: a line `[phase index] argv: state code/signal in N ms`, its
    /// error, its stdout, and its stderr after a `[stderr]` line.
    pub fn write_steps(&self, out: &mut String) {
        for s in &self.steps {
            out.push_str(&format!(
                "[{} {}] {:?}: {}{}{} in {} ms\n",
                s.phase.as_str(),
                s.index,
                s.argv,
                s.state.as_str(),
                s.exit_code
                    .map(|c| format!(" code {c}"))
                    .unwrap_or_default(),
                s.signal
                    .as_ref()
                    .map(|g| format!(" by {g}"))
                    .unwrap_or_default(),
                s.duration_ms
            ));
            for (label, text) in [
                ("", s.error.as_deref().unwrap_or("")),
                ("", &s.stdout),
                ("[stderr]\n", &s.stderr),
            ] {
                if text.is_empty() {
                    continue;
                }
                out.push_str(label);
                out.push_str(text);
                if !text.ends_with('\n') {
                    out.push('\n');
                }
            }
        }
    }

    /// Cuts every step's output so all of it fits in `max` bytes, each stream to an equal
    /// share, head and tail around a marker; a cut stream is flagged truncated.
    pub fn fit(&mut self, max: usize) {
        let streams = self.steps.len() * 2;
        if streams == 0 {
            return;
        }
        let total: usize = self
            .steps
            .iter()
            .map(|s| s.stdout.len() + s.stderr.len())
            .sum();
        if total <= max {
            return;
        }
        let share = max / streams;
        for s in &mut self.steps {
            if cut(&mut s.stdout, share) {
                s.stdout_truncated = true;
            }
            if cut(&mut s.stderr, share) {
                s.stderr_truncated = true;
            }
        }
    }
}

/// Cuts `s` to about `max` bytes, head and tail around a marker, on character boundaries.
fn cut(s: &mut String, max: usize) -> bool {
    if s.len() <= max {
        return false;
    }
    let half = max / 2;
    let mut h = half;
    while !s.is_char_boundary(h) {
        h -= 1;
    }
    let mut t = s.len() - half;
    while !s.is_char_boundary(t) {
        t += 1;
    }
    *s = format!(
        "{}\n[... {} bytes left out here; machine-mcp job read shows more ...]\n{}",
        &s[..h],
        t - h,
        &s[t..]
    );
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cutting_keeps_head_and_tail_on_character_boundaries() {
        let mut s = "é".repeat(100);
        assert!(cut(&mut s, 21));
        assert!(s.starts_with("ééééé\n[... "));
        assert!(s.ends_with("]\néééééé") || s.ends_with("]\nééééé"), "{s}");
        let mut short = "abc".to_owned();
        assert!(!cut(&mut short, 3));
    }
}
