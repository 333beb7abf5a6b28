//! `machine-mcp job ...` and `machine-mcp resource ...`: managed jobs and local resources from
//! the machine's own shell (docs/jobs.md). `job submit` goes through the `start_job` tool, so a
//! plan is checked exactly as an assistant's is; the other commands read the store directly,
//! as the machine's owner, who sees every job.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use runtime::{
    CallContext, McpServer, Principal,
    tools::{
        jobs::engine::{
            JobView,
            store::{JobStore, Loaded},
        },
        resources::engine::{self as resources, Registry, Validity},
    },
};
use serde_json::{Value, json};

use crate::cli::{JobCommand, JobOut, PolicyArgs, ResourceCommand, StateArgs};

/// `println!` of text for people: control, bidirectional and zero-width characters shown
/// escaped ([`super::printable`]), and a closed stdout ends the process quietly
/// (`job list | head`) instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => { emit(&super::printable(&format!($($arg)*))) };
}

/// Writes `line` and a line break to stdout: a reader that went away (broken pipe) ends the
/// process with status 0; any other write error (a full disk, a closed descriptor) with an
/// error and status 1.
pub(crate) fn emit(line: &str) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    let written = o
        .write_all(line.as_bytes())
        .and_then(|()| o.write_all(b"\n"))
        .and_then(|()| o.flush());
    match written {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => {
            eprintln!("machine-mcp: cannot write to stdout: {e}");
            std::process::exit(1);
        }
    }
}

/// Runs one `job` command.
pub(crate) async fn run(cmd: JobCommand) -> Result<()> {
    match cmd {
        JobCommand::Submit {
            plan,
            stage,
            workspace,
            policy,
            out,
        } => submit(&plan, stage, workspace, &policy, &out).await,
        JobCommand::List { out } => {
            let store = store(&out.state)?;
            store.recover();
            let views: Vec<JobView> = store
                .list()
                .iter()
                .map(|(id, l)| JobView::of(id, l))
                .collect();
            if out.json {
                return print_json(&json!({ "jobs": views }));
            }
            if views.is_empty() {
                out!("no jobs");
            }
            for v in &views {
                out!(
                    "{:<28}  {:<17}  {:<24}  {}",
                    v.job_id,
                    v.state.as_str(),
                    v.created_at.as_deref().unwrap_or("-"),
                    v.name
                );
            }
            Ok(())
        }
        JobCommand::Inspect { job_id, out } => {
            let store = store(&out.state)?;
            match load(&store, &job_id)? {
                Loaded::Ok(plan, status) => {
                    let v = json!({ "plan": plan, "status": status });
                    if out.json {
                        return print_json(&v);
                    }
                    out!("{}", serde_json::to_string_pretty(&v)?);
                    Ok(())
                }
                Loaded::Unreadable { why, .. } => bail!("job {job_id} is unreadable: {why}"),
            }
        }
        JobCommand::Read { job_id, wait, out } => {
            let store = store(&out.state)?;
            store.recover_one(&job_id);
            let mut view = JobView::of(&job_id, &load(&store, &job_id)?);
            while wait && !view.is_terminal() {
                eprintln!(
                    "job {job_id}: {} ({} steps started)",
                    view.state.as_str(),
                    view.steps.len()
                );
                let version = view.version;
                while view.version == version {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    view = JobView::of(&job_id, &load(&store, &job_id)?);
                }
            }
            if out.json {
                print_json(&serde_json::to_value(&view)?)?;
            } else {
                print_view(&view);
            }
            if wait && view.state != runtime::tools::jobs::engine::state::JobState::Succeeded {
                bail!("job {job_id} ended {}", view.state.as_str());
            }
            Ok(())
        }
        JobCommand::Start { job_id, out } => {
            let store = store(&out.state)?;
            let status = store.start_staged(&job_id).map_err(tool_error)?;
            if out.json {
                return print_json(&json!({"job_id": job_id, "state": status.state()}));
            }
            out!("job {job_id} is {}", status.state().as_str());
            Ok(())
        }
        JobCommand::Cancel { job_id, out } => {
            let store = store(&out.state)?;
            let status = store.cancel(&job_id).map_err(tool_error)?;
            let requested = !status.is_terminal();
            if out.json {
                return print_json(
                    &json!({"job_id": job_id, "state": status.state(), "cancel_requested": requested}),
                );
            }
            if requested {
                out!("cancellation of job {job_id} requested; its finally steps still run");
            } else {
                out!("job {job_id} is {}", status.state().as_str());
            }
            Ok(())
        }
        JobCommand::Prune { all, out } => {
            let removed = store(&out.state)?.prune(all);
            if out.json {
                return print_json(&json!({ "removed": removed }));
            }
            out!("removed {removed} jobs");
            Ok(())
        }
    }
}

fn store(state: &StateArgs) -> Result<JobStore> {
    let dir = super::state_dir(state)?;
    // A file in its place would read as "no jobs".
    if let Some(file) = dir
        .ancestors()
        .find(|p| std::fs::metadata(p).is_ok_and(|m| !m.is_dir()))
    {
        let e = std::io::Error::from(std::io::ErrorKind::AlreadyExists);
        anyhow::bail!(daemon::state_io::describe(file, &e));
    }
    let exe = std::env::current_exe().context("cannot find this executable")?;
    Ok(JobStore::new(&dir, exe))
}

fn load(store: &JobStore, id: &str) -> Result<Loaded> {
    store.dir(id).map_err(tool_error)?;
    store.load(id).with_context(|| {
        format!(
            "no job {id} in {} (machine-mcp job list shows them)",
            store.root().display()
        )
    })
}

fn tool_error(e: runtime::ToolError) -> anyhow::Error {
    anyhow::anyhow!("{} ({})", e.message(), e.code())
}

/// Prints `v` as one line of JSON, the characters [`super::printable`] escapes written as
/// `\uXXXX` (JSON escapes, so the document means the same).
pub(crate) fn print_json(v: &Value) -> Result<()> {
    let text = serde_json::to_string(v)?;
    let mut safe = String::with_capacity(text.len());
    for c in text.chars() {
        if super::unsafe_for_terminals(c) {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                safe.push_str(&format!("\\u{:04x}", u));
            }
        } else {
            safe.push(c);
        }
    }
    emit(&safe);
    Ok(())
}

fn print_view(v: &JobView) {
    out!("job {}  {}  ({})", v.job_id, v.state.as_str(), v.name);
    if let Some(e) = &v.error {
        out!("error: {}: {}", e.code, e.message);
    }
    let mut text = String::new();
    v.write_steps(&mut text);
    out!("{}", text.trim_end_matches('\n'));
}

async fn submit(
    plan: &std::path::Path,
    stage: bool,
    workspace: Option<std::path::PathBuf>,
    policy: &PolicyArgs,
    out: &JobOut,
) -> Result<()> {
    let text = std::fs::read_to_string(plan)
        .with_context(|| format!("cannot read the plan {}", plan.display()))?;
    let args: Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not valid JSON", plan.display()))?;
    let Value::Object(args) = args else {
        bail!("{} must hold one JSON object (the plan)", plan.display());
    };
    let runtime = super::build_runtime(workspace, policy, &out.state, None, false, None)?;
    let server = McpServer::new(runtime.access(None), Principal::local());
    let tool = if stage { "stage_job" } else { "start_job" };
    let result = server
        .call(tool, args, CallContext::local())
        .await
        .map_err(|e| anyhow::anyhow!("{}", e.message))?;
    let structured = result.structured_content.clone().unwrap_or(Value::Null);
    if result.is_error == Some(true) {
        // A tool error's text is its JSON object: {"code": ..., "message": ..., ...}.
        let text = result
            .content
            .first()
            .and_then(|c| c.as_text())
            .map(|t| t.text.clone())
            .unwrap_or_default();
        let e: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        match (e["message"].as_str(), e["code"].as_str()) {
            (Some(m), Some(c)) => bail!("the plan was refused: {m} ({c})"),
            _ => bail!("the plan was refused: {text}"),
        }
    }
    if out.json {
        return print_json(&structured);
    }
    let id = structured["job_id"].as_str().unwrap_or_default();
    let state = structured["state"].as_str().unwrap_or_default();
    if structured["idempotency_replay"] == true {
        out!("{id} {state} (already submitted with this idempotency_key and plan)");
    } else {
        out!("{id} {state}");
    }
    Ok(())
}

/// Runs one `resource` command.
pub(crate) fn resource(cmd: ResourceCommand) -> Result<()> {
    match cmd {
        ResourceCommand::Add {
            alias,
            path,
            allow_insecure_permissions,
            state,
        } => {
            let reg = Registry::new(&super::state_dir(&state)?);
            let e = reg.add(&alias, &path, allow_insecure_permissions)?;
            out!(
                "registered {alias}: {} ({} bytes, sha256 {})",
                e.path.display(),
                e.bytes,
                &e.sha256[..16]
            );
            Ok(())
        }
        ResourceCommand::Remove { alias, state } => {
            let reg = Registry::new(&super::state_dir(&state)?);
            if reg.remove(&alias)? {
                out!("removed {alias} (the file itself is untouched)");
                Ok(())
            } else {
                bail!("no resource {alias} (machine-mcp resource list shows them)")
            }
        }
        ResourceCommand::List { out } => show_resources(&out, false),
        ResourceCommand::Check { out } => show_resources(&out, true),
    }
}

/// Prints every resource and its state; with `check`, fails when one is not usable.
fn show_resources(out: &JobOut, check: bool) -> Result<()> {
    let reg = Registry::new(&super::state_dir(&out.state)?);
    let all = reg.load()?;
    let rows: Vec<(String, String, Validity)> = all
        .iter()
        .map(|(a, e)| (a.clone(), e.path.display().to_string(), resources::check(e)))
        .collect();
    if out.json {
        let v: Vec<Value> = rows
            .iter()
            .map(|(a, p, s)| json!({"alias": a, "path": p, "state": s}))
            .collect();
        print_json(&json!({ "resources": v }))?;
    } else {
        if rows.is_empty() {
            out!("no resources (machine-mcp resource add ALIAS PATH)");
        }
        for (a, p, s) in &rows {
            out!("{a:<24} {:<21} {p}", s.as_str());
        }
    }
    if check && rows.iter().any(|(_, _, s)| *s != Validity::Ok) {
        bail!("a resource is not usable; re-register it with machine-mcp resource add");
    }
    Ok(())
}
