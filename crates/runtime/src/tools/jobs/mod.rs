//! Managed jobs (`docs/jobs.md`): `start_job`, `stage_job`, `read_job`, `list_jobs`,
//! `cancel_job`. A job is a plan of argv steps run to the end by a detached runner, whatever
//! happens to the session, the server or the relay link; its plan, status and result live
//! owner-only in the state directory. The [`engine`] holds the plan, the state machine, the
//! store and the runner; this module validates a call against the caller's authority and
//! shapes the results.

use std::{sync::Arc, time::Duration};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{limits::JOB_READ_WAIT_MAX, limits::RESULT_TEXT_DEFAULT_CHARS};

use crate::{
    Access,
    call::{
        catalog::{Hints, ToolMeta, ToolSpec},
        context::CallContext,
        error::{ToolError, ToolErrorCode, ToolResult},
        text::{TextView, body_limit},
    },
    policy::Capability,
    tools::{blocking::blocking, family::Family},
};

pub mod engine;
mod state;

pub(crate) use state::JobsState;
pub use state::store;

use engine::{
    JobView,
    plan::{Checks, Plan, validate},
    state::JobState,
    store::{self, Authority, JobStore, Loaded, StoredPlan},
};

/// How often a `start_job` task reports the job's progress while it follows it.
const TASK_PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// Hints of the tools that start jobs: they run programs, and a repeated call with the same
/// idempotency key has no further effect.
const START_HINTS: Hints = Hints {
    read_only: false,
    destructive: true,
    idempotent: true,
    open_world: true,
};

/// The family's entry in the registry: the five job tools and the job store ([`JobsState`]).
pub(crate) const FAMILY: Family = Family {
    specs,
    state: Some(JobsState::make),
    resources: None,
    prompts: None,
};

pub(crate) fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec::structured(
            ToolMeta {
                name: "start_job",
                title: "Start a managed job",
                description: "Start a managed job: a plan of argv steps (1-16) that a detached \
                              runner executes to the end even if this session, the server or \
                              the connection ends, then finally_steps (cleanup, 0-16) however \
                              the steps ended. Returns job_id at once; follow it with read_job \
                              (wait_ms long-polls). Each step: argv, cwd, env, env_resources \
                              (variable -> local resource alias), stdin or stdin_resource, \
                              timeout_seconds (1-21600, default 600), allow_failure, \
                              capture_output. Placeholders {{temp:NAME}} (temporary_files), \
                              {{resource:ALIAS}} (path of a private copy), {{job:workspace}}. \
                              depends_on waits for other jobs' success. The same \
                              idempotency_key with the same plan returns the existing job \
                              (idempotency_replay: true); another plan is a conflict. Secrets \
                              of local resources never appear in results: they read as \
                              [resource:ALIAS]. See list_local_resources.",
                capability: Capability::ExecDirect,
                hints: START_HINTS,
            },
            start_job,
        ),
        ToolSpec::structured(
            ToolMeta {
                name: "stage_job",
                title: "Stage a managed job",
                description: "Validate and store a job plan (as start_job takes it) without \
                              running it: the user reviews it with `machine-mcp job inspect \
                              ID` and starts it with `machine-mcp job start ID`. A staged job \
                              expires after 24 h.",
                capability: Capability::ExecDirect,
                hints: START_HINTS,
            },
            stage_job,
        ),
        ToolSpec::structured(
            ToolMeta {
                name: "read_job",
                title: "Read a managed job",
                description: "Read a job: state (staged, queued, running, cleaning, succeeded, \
                              failed, cancelled, interrupted, recovered, recovery_failed, \
                              dependency_failed, expired, unreadable), phase, error, and per \
                              step exit code, timing and redacted output (head and tail). \
                              wait_ms (at most 30000) waits until the job changes (its version \
                              differs from after_version, or from the version when called).",
                capability: Capability::ExecDirect,
                hints: Hints::READ,
            },
            read_job,
        ),
        ToolSpec::structured(
            ToolMeta {
                name: "list_jobs",
                title: "List managed jobs",
                description: "List your jobs, newest first: id, name, state, phase, times and \
                              error. A job whose state cannot be read is listed as unreadable.",
                capability: Capability::ExecDirect,
                hints: Hints::READ,
            },
            list_jobs,
        ),
        ToolSpec::structured(
            ToolMeta {
                name: "cancel_job",
                title: "Cancel a managed job",
                description: "Cancel a job: a staged one at once; a queued or running one \
                              stops before its next step, its running step's process tree is \
                              terminated, and its finally steps still run. A finished job is \
                              left as it is.",
                capability: Capability::ExecDirect,
                hints: Hints {
                    read_only: false,
                    destructive: true,
                    idempotent: true,
                    open_world: false,
                },
            },
            cancel_job,
        ),
    ]
}

/// The store, or why jobs are not available.
fn job_store(rt: &Access) -> ToolResult<JobStore> {
    rt.state::<JobsState>()?.store.clone().ok_or_else(|| {
        ToolError::new(
            ToolErrorCode::Unavailable,
            "managed jobs need a state directory, and this server has none",
        )
    })
}

/// Whether the caller may see a job of `owner` (`None`: unknown, unreadable).
fn visible(rt: &Access, cx: &CallContext, owner: Option<&str>) -> bool {
    rt.is_owner() || owner == Some(cx.principal.id())
}

fn no_job(id: &str) -> ToolError {
    ToolError::new(ToolErrorCode::NotFound, format!("no job {id}"))
}

/// Result of `start_job` and `stage_job`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct JobStarted {
    /// The job id (for read_job, cancel_job, depends_on).
    job_id: String,
    /// The plan's name.
    name: String,
    /// Its state now.
    state: JobState,
    /// The same idempotency_key and plan were submitted before: this is that job.
    idempotency_replay: bool,
    /// Its version now (see read_job after_version).
    version: u64,
    /// The job at its end, when the call followed it as a task.
    #[serde(skip_serializing_if = "Option::is_none")]
    job: Option<JobView>,
}

impl TextView for JobStarted {
    fn summary(&self) -> String {
        let replay = if self.idempotency_replay {
            " (the same plan was submitted before under this idempotency_key: this is that job)"
        } else {
            ""
        };
        let follow = if self.job.is_some() {
            String::new()
        } else {
            format!(
                "; follow it with read_job {{\"job_id\": \"{}\", \"wait_ms\": 30000}}",
                self.job_id
            )
        };
        format!(
            "job {} ({}): {}{replay}{follow}",
            self.job_id,
            self.name,
            self.state.as_str(),
        )
    }

    fn body(&self, out: &mut String) {
        if let Some(j) = &self.job {
            job_body(j, out);
        }
    }
}

async fn start_job(rt: Arc<Access>, plan: Plan, cx: CallContext) -> ToolResult<JobStarted> {
    let in_task = cx.in_task;
    let mut started = accept(rt.clone(), plan, &cx, false).await?;
    if in_task {
        // A task-aware client follows the job in the background: the task ends with the job,
        // and `tasks/cancel` cancels the job. A server that shuts down cancels its tasks too;
        // the job outlives it, so then only the following stops.
        let store = job_store(&rt)?;
        let mut version = 0;
        let started_at = tokio::time::Instant::now();
        loop {
            let id = started.job_id.clone();
            let view = tokio::select! {
                v = wait_for_change(store.clone(), id.clone(), version, TASK_PROGRESS_EVERY) => v?,
                () = cx.cancel.cancelled() => {
                    if !rt.shutting_down() {
                        let s = store.clone();
                        let _ = blocking(move || s.cancel(&id)).await;
                    }
                    return Err(ToolError::cancelled());
                }
            };
            version = view.version;
            let done = view.steps.len();
            let total = view.planned_steps + view.planned_finally_steps;
            let msg = format!(
                "{}: {done} of {total} steps started, {} s",
                view.state.as_str(),
                started_at.elapsed().as_secs()
            );
            cx.progress
                .report(done as f64, Some(total as f64), || msg.clone());
            if view.is_terminal() {
                let mut view = view;
                started.state = view.state;
                started.version = view.version;
                view.fit(body_limit(RESULT_TEXT_DEFAULT_CHARS) - 4_000);
                started.job = Some(view);
                break;
            }
        }
    }
    Ok(started)
}

async fn stage_job(rt: Arc<Access>, plan: Plan, cx: CallContext) -> ToolResult<JobStarted> {
    accept(rt, plan, &cx, true).await
}

/// Validates `plan` against the caller's authority and accepts it (or finds it accepted).
async fn accept(
    rt: Arc<Access>,
    plan: Plan,
    cx: &CallContext,
    staged: bool,
) -> ToolResult<JobStarted> {
    let store = job_store(&rt)?;
    let registry = super::resources::registry(&rt)?.ok_or_else(|| {
        ToolError::new(
            ToolErrorCode::Unavailable,
            "this server has no state directory",
        )
    })?;
    let owner = cx.principal.id().to_owned();
    blocking(move || {
        let id = store::job_id(&owner, &plan.idempotency_key);
        let authority = Authority {
            profile: rt.policy().name().to_owned(),
            exec_mode: rt.policy().exec_mode(),
            full_env: rt.policy().full_env(),
            workspace: rt.workspace().root().to_owned(),
            restricted: rt.workspace().restricted(),
        };
        let sha = store::plan_hash(&plan, &authority);
        // A retry of an accepted submission is answered before anything is checked again.
        if let Some(Loaded::Ok(old, status)) = store.load(&id)
            && old.plan_sha256 == sha
            && old.owner == owner
        {
            return Ok(started(&id, &old.plan.name, &status, true));
        }
        // A registry that cannot be read refuses only the plans that use a resource.
        let resources = match registry.load() {
            Ok(r) => r,
            Err(e) if uses_resources(&plan) => {
                return Err(ToolError::new(
                    ToolErrorCode::ExecutionFailed,
                    e.to_string(),
                ));
            }
            Err(_) => Default::default(),
        };
        let checks = Checks {
            exec_mode: rt.policy().exec_mode(),
            workspace: rt.workspace(),
            resources: &resources,
        };
        let v = validate(&plan, &checks)?;
        for dep in &plan.depends_on {
            match store.load(dep) {
                Some(Loaded::Ok(p, _)) if rt.is_owner() || p.owner == owner => {}
                _ => {
                    return Err(ToolError::new(
                        ToolErrorCode::NotFound,
                        format!("depends_on: no job {dep}"),
                    ));
                }
            }
        }
        let (created_at, created_unix) = store::accepted_now();
        let name = plan.name.clone();
        let stored = StoredPlan {
            job_id: id,
            owner,
            plan,
            plan_sha256: sha,
            authority,
            cwds: v.cwds,
            resources: v.resources,
            created_at,
            created_unix,
            scrubbed: false,
        };
        let a = store.accept(stored, staged, rt.is_owner())?;
        Ok(started(&a.job_id, &name, &a.status, a.replay))
    })
    .await
}

/// Whether any step of `plan` names a local resource.
fn uses_resources(plan: &Plan) -> bool {
    plan.steps.iter().chain(&plan.finally_steps).any(|s| {
        !s.env_resources.is_empty()
            || s.stdin_resource.is_some()
            || s.argv
                .iter()
                .chain(s.env.values())
                .any(|a| a.contains("{{resource:"))
    })
}

fn started(id: &str, name: &str, status: &engine::state::Status, replay: bool) -> JobStarted {
    JobStarted {
        job_id: id.to_owned(),
        name: name.to_owned(),
        state: status.state(),
        idempotency_replay: replay,
        version: status.version,
        job: None,
    }
}

/// Arguments of `read_job`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadJobArgs {
    /// The job id.
    job_id: String,
    /// Wait up to this many milliseconds (at most 30000) for the job to change.
    #[serde(default)]
    #[schemars(range(max = 30000))]
    wait_ms: Option<u64>,
    /// With wait_ms: return as soon as the job's version differs from this one (default: the
    /// version when called).
    #[serde(default)]
    after_version: Option<u64>,
}

/// Result of `read_job`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ReadJob {
    #[serde(flatten)]
    job: JobView,
}

impl TextView for ReadJob {
    fn summary(&self) -> String {
        job_summary(&self.job)
    }

    fn body(&self, out: &mut String) {
        job_body(&self.job, out);
    }
}

fn job_summary(j: &JobView) -> String {
    let phase = j
        .phase
        .map(|p| format!(" (phase {})", p.as_str()))
        .unwrap_or_default();
    let err = j
        .error
        .as_ref()
        .map(|e| format!(": {} — {}", e.code, e.message))
        .unwrap_or_default();
    let more = if j.is_terminal() {
        String::new()
    } else {
        format!(
            "; wait for the next change with read_job {{\"job_id\": \"{}\", \"wait_ms\": 30000, \"after_version\": {}}}",
            j.job_id, j.version
        )
    };
    format!(
        "job {} ({}) is {}{phase}{err}; {} of {} steps started, version {}{more}",
        j.job_id,
        j.name,
        j.state.as_str(),
        j.steps.len(),
        j.planned_steps + j.planned_finally_steps,
        j.version
    )
}

fn job_body(j: &JobView, out: &mut String) {
    j.write_steps(out);
}

/// The job `id` once its version differs from `version` (or at the wait's end).
async fn wait_for_change(
    store: JobStore,
    id: String,
    version: u64,
    wait: Duration,
) -> ToolResult<JobView> {
    let deadline = tokio::time::Instant::now() + wait;
    // The status file is replaced (renamed over) on every change: its identity says when it
    // is worth reading again.
    let mut seen = None;
    loop {
        let (s, i) = (store.clone(), id.clone());
        let now = blocking(move || Ok(s.status_identity(&i))).await?;
        let last = tokio::time::Instant::now() >= deadline;
        if seen.is_none() || now != seen || last {
            seen = now;
            let (s, i) = (store.clone(), id.clone());
            let view = blocking(move || {
                s.load(&i)
                    .map(|l| JobView::of(&i, &l))
                    .ok_or_else(|| no_job(&i))
            })
            .await?;
            if view.version != version || last {
                return Ok(view);
            }
        }
        tokio::time::sleep(store::POLL).await;
    }
}

async fn read_job(rt: Arc<Access>, args: ReadJobArgs, cx: CallContext) -> ToolResult<ReadJob> {
    let store = job_store(&rt)?;
    let wait = Duration::from_millis(args.wait_ms.unwrap_or(0));
    if wait > JOB_READ_WAIT_MAX {
        return Err(ToolError::invalid("wait_ms must be at most 30000"));
    }
    let (s, id) = (store.clone(), args.job_id.clone());
    let first = blocking(move || {
        s.dir(&id)?;
        // A job whose runner died is taken care of before it is read.
        s.recover_one(&id);
        s.load(&id)
            .map(|l| JobView::of(&id, &l))
            .ok_or_else(|| no_job(&id))
    })
    .await?;
    if !visible(&rt, &cx, first.owner.as_deref()) {
        return Err(no_job(&args.job_id));
    }
    let after = args.after_version.unwrap_or(first.version);
    let mut job = if wait.is_zero() || first.version != after || first.is_terminal() {
        first
    } else {
        tokio::select! {
            v = wait_for_change(store, args.job_id.clone(), after, wait) => v?,
            _ = cx.cancel.cancelled() => return Err(ToolError::cancelled()),
        }
    };
    job.fit(body_limit(RESULT_TEXT_DEFAULT_CHARS) - 4_000);
    Ok(ReadJob { job })
}

/// Arguments of `list_jobs`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListJobsArgs {
    /// Only jobs in this state: staged, queued, running, cleaning, succeeded, failed,
    /// cancelled, interrupted, recovered, recovery_failed, dependency_failed, expired or
    /// unreadable.
    #[serde(default)]
    state: Option<String>,
    /// Most jobs listed (1-512, default 100).
    #[serde(default)]
    #[schemars(range(min = 1, max = 512))]
    limit: Option<usize>,
}

/// One job in `list_jobs`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct JobSummary {
    /// The job id.
    job_id: String,
    /// The plan's name.
    name: String,
    /// Its state.
    state: JobState,
    /// Its phase.
    phase: Option<engine::state::Phase>,
    /// RFC 3339 acceptance time.
    created_at: Option<String>,
    /// RFC 3339 end time.
    finished_at: Option<String>,
    /// Why it did not succeed.
    error: Option<engine::state::JobError>,
}

/// Result of `list_jobs`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ListJobs {
    /// The jobs, newest first.
    jobs: Vec<JobSummary>,
    /// More jobs matched than `limit`.
    truncated: bool,
}

impl TextView for ListJobs {
    fn summary(&self) -> String {
        format!(
            "{} jobs{}",
            self.jobs.len(),
            if self.truncated {
                " (more not listed: raise limit)"
            } else {
                ""
            }
        )
    }

    fn body(&self, out: &mut String) {
        for j in &self.jobs {
            out.push_str(&format!(
                "{} {} {}{}\n",
                j.job_id,
                j.state.as_str(),
                j.name,
                j.error
                    .as_ref()
                    .map(|e| format!(" ({}: {})", e.code, e.message))
                    .unwrap_or_default()
            ));
        }
    }
}

/// Every job the caller may see, as views (also used by `machine-mcp job list`).
fn visible_jobs(store: &JobStore, rt: &Access, cx: &CallContext) -> Vec<JobView> {
    store.recover();
    store
        .list()
        .iter()
        .map(|(id, l)| JobView::of(id, l))
        .filter(|v| visible(rt, cx, v.owner.as_deref()))
        .collect()
}

async fn list_jobs(rt: Arc<Access>, args: ListJobsArgs, cx: CallContext) -> ToolResult<ListJobs> {
    let store = job_store(&rt)?;
    let limit = args.limit.unwrap_or(100);
    if !(1..=512).contains(&limit) {
        return Err(ToolError::invalid("limit must be 1-512"));
    }
    let state: Option<JobState> = match &args.state {
        None => None,
        Some(s) => Some(
            serde_json::from_value(serde_json::Value::String(s.clone()))
                .map_err(|_| ToolError::invalid(format!("state {s:?} is not a job state")))?,
        ),
    };
    let rt2 = rt.clone();
    let views = blocking(move || Ok(visible_jobs(&store, &rt2, &cx))).await?;
    let mut jobs: Vec<JobSummary> = views
        .into_iter()
        .filter(|v| state.is_none_or(|s| s == v.state))
        .map(|v| JobSummary {
            job_id: v.job_id,
            name: v.name,
            state: v.state,
            phase: v.phase,
            created_at: v.created_at,
            finished_at: v.finished_at,
            error: v.error,
        })
        .collect();
    let truncated = jobs.len() > limit;
    jobs.truncate(limit);
    Ok(ListJobs { jobs, truncated })
}

/// Arguments of `cancel_job`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CancelJobArgs {
    /// The job id.
    job_id: String,
}

/// Result of `cancel_job`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct CancelJob {
    /// The job id.
    job_id: String,
    /// Its state after the request (a running job moves on as its runner stops it).
    state: JobState,
    /// Cancellation was requested (false: it had already ended).
    cancel_requested: bool,
}

impl TextView for CancelJob {
    fn summary(&self) -> String {
        if self.cancel_requested {
            format!(
                "cancellation of job {} requested (state {}); its finally steps still run; \
                 read_job shows the end",
                self.job_id,
                self.state.as_str()
            )
        } else {
            format!(
                "job {} had already ended ({})",
                self.job_id,
                self.state.as_str()
            )
        }
    }
}

async fn cancel_job(
    rt: Arc<Access>,
    args: CancelJobArgs,
    cx: CallContext,
) -> ToolResult<CancelJob> {
    let store = job_store(&rt)?;
    let id = args.job_id;
    blocking(move || {
        let owner = match store.load(&id) {
            None => return Err(no_job(&id)),
            Some(Loaded::Ok(p, _)) => Some(p.owner),
            Some(Loaded::Unreadable { owner, .. }) => owner,
        };
        if !visible(&rt, &cx, owner.as_deref()) {
            return Err(no_job(&id));
        }
        let before = match store.load(&id) {
            Some(Loaded::Ok(_, s)) => s.is_terminal(),
            _ => false,
        };
        let status = store.cancel(&id)?;
        Ok(CancelJob {
            job_id: id,
            state: status.state(),
            cancel_requested: !before,
        })
    })
    .await
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::{
        CallContext, McpServer, Principal, Runtime, RuntimeConfig,
        policy::{Policy, Profile},
    };

    struct Machine {
        _dirs: (tempfile::TempDir, tempfile::TempDir),
        runtime: Arc<Runtime>,
        state: std::path::PathBuf,
    }

    use std::sync::Arc;

    fn machine() -> Machine {
        let ws = tempfile::tempdir().unwrap();
        let st = tempfile::tempdir().unwrap();
        let runtime = Arc::new(
            Runtime::new(RuntimeConfig {
                workspace: ws.path().into(),
                policy: Policy::profile(Profile::Full),
                default_yield_after: None,
                remote: true,
                state_dir: Some(st.path().into()),
                own_files: Vec::new(),
            })
            .unwrap(),
        );
        let state = st.path().to_owned();
        Machine {
            _dirs: (ws, st),
            runtime,
            state,
        }
    }

    /// Calls `tool` as `who` with `role` (`None`: the local owner); the structured result, or
    /// the error code.
    async fn call(
        m: &Machine,
        role: Option<Profile>,
        who: &str,
        tool: &str,
        args: Value,
    ) -> Result<Value, String> {
        let principal = if who == "local" {
            Principal::local()
        } else {
            Principal::named(who)
        };
        let server = McpServer::new(m.runtime.access(role), principal.clone());
        let mut cx = CallContext::local();
        cx.principal = principal;
        let r = server
            .call(tool, args.as_object().cloned().unwrap_or_default(), cx)
            .await
            .map_err(|e| e.message.to_string())?;
        if r.is_error == Some(true) {
            let text = r
                .content
                .first()
                .and_then(|c| c.as_text())
                .map(|t| t.text.clone())
                .unwrap_or_default();
            let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            return Err(v["code"].as_str().unwrap_or(&text).to_owned());
        }
        Ok(r.structured_content.unwrap_or(Value::Null))
    }

    fn plan(key: &str) -> Value {
        json!({"name": "n", "idempotency_key": key, "steps": [{"argv": ["true"]}]})
    }

    #[tokio::test]
    async fn a_remote_caller_sees_and_cancels_only_its_own_jobs_and_the_owner_sees_all() {
        let m = machine();
        let agent = Some(Profile::Agent);
        let a = call(&m, agent, "alice", "stage_job", plan("k"))
            .await
            .unwrap();
        assert_eq!(a["state"], "staged");
        let id = a["job_id"].as_str().unwrap().to_owned();
        let b = call(&m, agent, "bob", "stage_job", plan("k"))
            .await
            .unwrap();
        assert_ne!(
            b["job_id"], a["job_id"],
            "the same key of another principal is another job"
        );

        let listed = call(&m, agent, "bob", "list_jobs", json!({}))
            .await
            .unwrap();
        assert_eq!(listed["jobs"].as_array().unwrap().len(), 1, "{listed}");
        let read = call(&m, agent, "bob", "read_job", json!({"job_id": id})).await;
        assert_eq!(read.unwrap_err(), "not_found");
        let cancel = call(&m, agent, "bob", "cancel_job", json!({"job_id": id})).await;
        assert_eq!(cancel.unwrap_err(), "not_found");

        let all = call(&m, None, "local", "list_jobs", json!({}))
            .await
            .unwrap();
        assert_eq!(all["jobs"].as_array().unwrap().len(), 2, "{all}");
        let c = call(&m, agent, "alice", "cancel_job", json!({"job_id": id}))
            .await
            .unwrap();
        assert_eq!(c["state"], "cancelled");
    }

    #[tokio::test]
    async fn a_refused_plan_writes_nothing() {
        let m = machine();
        let agent = Some(Profile::Agent);
        let cases = [
            json!({"name": "n", "idempotency_key": "k", "steps": [{"argv": ["true"], "cwd": ".."}]}),
            json!({"name": "n", "idempotency_key": "k", "steps": [{"argv": ["sh -c x"], "shell": true}]}),
            json!({"name": "n", "idempotency_key": "k", "steps": [{"argv": ["cat", "{{resource:nope}}"]}]}),
            json!({"name": "n", "idempotency_key": "bad key", "steps": [{"argv": ["true"]}]}),
            json!({"name": "n", "idempotency_key": "k", "steps": [{"argv": ["true"]}], "depends_on": ["job_000000000000000000000000"]}),
        ];
        let want = [
            "path_boundary",
            "policy_denied",
            "not_found",
            "invalid_request",
            "not_found",
        ];
        for (plan, code) in cases.into_iter().zip(want) {
            let r = call(&m, agent, "alice", "stage_job", plan.clone()).await;
            assert_eq!(r.unwrap_err(), code, "{plan}");
        }
        let jobs = std::fs::read_dir(m.state.join("jobs"))
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| e.file_name().to_string_lossy().starts_with("job_"))
                    .count()
            })
            .unwrap_or(0);
        assert_eq!(jobs, 0);
    }

    #[tokio::test]
    async fn the_same_key_with_another_plan_is_a_conflict_and_with_the_same_plan_a_replay() {
        let m = machine();
        let first = call(&m, None, "local", "stage_job", plan("same"))
            .await
            .unwrap();
        let again = call(&m, None, "local", "stage_job", plan("same"))
            .await
            .unwrap();
        assert_eq!(again["job_id"], first["job_id"]);
        assert_eq!(again["idempotency_replay"], true);
        let mut other = plan("same");
        other["steps"][0]["argv"] = json!(["false"]);
        let r = call(&m, None, "local", "stage_job", other).await;
        assert_eq!(r.unwrap_err(), "conflict");
    }

    #[tokio::test]
    async fn a_corrupt_resource_registry_refuses_only_plans_that_use_a_resource() {
        let m = machine();
        std::fs::write(m.state.join("resources.json"), b"{not json").unwrap();
        call(&m, None, "local", "stage_job", plan("plain"))
            .await
            .unwrap();
        let mut with = plan("secret");
        with["steps"][0]["env_resources"] = json!({"T": "tok"});
        let r = call(&m, None, "local", "stage_job", with).await;
        assert_eq!(r.unwrap_err(), "execution_failed");
        let listed = call(&m, None, "local", "list_local_resources", json!({})).await;
        assert_eq!(
            listed.unwrap_err(),
            "execution_failed",
            "reported, not shown as empty"
        );
        assert_eq!(
            std::fs::read(m.state.join("resources.json")).unwrap(),
            b"{not json",
            "left as it was"
        );
    }

    /// Fresh tester finding 6: a replay ignored the workspace and authority.
    #[tokio::test]
    async fn the_same_key_under_another_authority_is_a_conflict_not_a_replay() {
        let m = machine();
        call(&m, None, "alice", "stage_job", plan("auth"))
            .await
            .unwrap();
        let r = call(&m, Some(Profile::Agent), "alice", "stage_job", plan("auth")).await;
        assert_eq!(r.unwrap_err(), "conflict");
    }

    /// Fresh tester finding 10: a cancelled draft kept its secrets in plan.json.
    #[tokio::test]
    async fn a_cancelled_draft_has_its_secrets_scrubbed() {
        let m = machine();
        let mut p = plan("scrub");
        p["steps"][0]["stdin"] = json!("plan-secret-STDIN-12345");
        p["temporary_files"] = json!({"a": "plan-temp-secret-678"});
        let a = call(&m, None, "local", "stage_job", p).await.unwrap();
        let id = a["job_id"].as_str().unwrap().to_owned();
        call(&m, None, "local", "cancel_job", json!({"job_id": id}))
            .await
            .unwrap();
        let text =
            std::fs::read_to_string(m.state.join("jobs").join(&id).join("plan.json")).unwrap();
        assert!(!text.contains("plan-secret-STDIN"), "{text}");
        assert!(!text.contains("plan-temp-secret"), "{text}");
    }

    /// Fresh tester finding 13: a draft older than 24 h still showed as staged.
    #[tokio::test]
    async fn a_draft_older_than_a_day_is_listed_expired_and_scrubbed() {
        let m = machine();
        let mut p = plan("old");
        p["steps"][0]["stdin"] = json!("old-secret-stdin");
        let a = call(&m, None, "local", "stage_job", p).await.unwrap();
        let id = a["job_id"].as_str().unwrap().to_owned();
        let status = m.state.join("jobs").join(&id).join("status.json");
        let mut v: Value = serde_json::from_slice(&std::fs::read(&status).unwrap()).unwrap();
        v["created_at"] = json!("2026-01-01T00:00:00.000Z");
        std::fs::write(&status, serde_json::to_vec(&v).unwrap()).unwrap();
        let listed = call(&m, None, "local", "list_jobs", json!({}))
            .await
            .unwrap();
        assert_eq!(listed["jobs"][0]["state"], "expired", "{listed}");
        let text =
            std::fs::read_to_string(m.state.join("jobs").join(&id).join("plan.json")).unwrap();
        assert!(!text.contains("old-secret-stdin"), "{text}");
    }

    /// Fresh tester finding 5: one remote principal could fill the store with drafts.
    #[tokio::test]
    async fn a_remote_principal_keeps_at_most_its_share_of_unfinished_jobs() {
        let m = machine();
        let agent = Some(Profile::Agent);
        for i in 0..crate::limits::JOBS_UNFINISHED_PER_PRINCIPAL {
            call(&m, agent, "mallory", "stage_job", plan(&format!("d{i}")))
                .await
                .unwrap();
        }
        let r = call(&m, agent, "mallory", "stage_job", plan("one-more")).await;
        assert_eq!(r.unwrap_err(), "limit_exceeded");
        call(&m, agent, "alice", "stage_job", plan("alice"))
            .await
            .unwrap();
        call(&m, None, "local", "stage_job", plan("owner"))
            .await
            .unwrap();
    }

    /// One principal cycling stage + cancel makes room from its own finished jobs, and never
    /// fills the share of every caller other than the owner.
    #[tokio::test]
    async fn a_principal_cycling_drafts_makes_room_from_its_own_finished_jobs() {
        let m = machine();
        let agent = Some(Profile::Agent);
        for i in 0..crate::limits::JOBS_RETAINED_PER_PRINCIPAL + 10 {
            let a = call(&m, agent, "mallory", "stage_job", plan(&format!("c{i}")))
                .await
                .unwrap_or_else(|e| panic!("draft {i}: {e}"));
            call(
                &m,
                agent,
                "mallory",
                "cancel_job",
                json!({"job_id": a["job_id"]}),
            )
            .await
            .unwrap();
        }
        let all = call(&m, None, "local", "list_jobs", json!({"limit": 512}))
            .await
            .unwrap();
        let n = all["jobs"].as_array().unwrap().len();
        assert_eq!(n, crate::limits::JOBS_RETAINED_PER_PRINCIPAL, "{n} kept");
        call(&m, agent, "alice", "stage_job", plan("alice"))
            .await
            .unwrap();
    }
}
