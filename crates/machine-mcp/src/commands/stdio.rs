//! `machine-mcp stdio`: one MCP session over stdin/stdout.

use anyhow::{Context, Result};

use crate::cli::{ReloadArgs, StdioArgs};

pub(crate) async fn run(args: StdioArgs) -> Result<()> {
    if !args.worker && !args.no_supervisor {
        return supervise(&args).await;
    }
    let runtime =
        super::build_runtime(args.workspace, &args.policy, &args.state, None, false, None)?;
    tracing::info!(
        workspace = %runtime.workspace().root().display(),
        policy = runtime.policy().name(),
        pid = std::process::id(),
        worker = args.worker,
        "serving MCP over stdio"
    );
    let serve = runtime::mcp::stdio::serve_process_stdio(runtime.clone());
    let outcome = tokio::select! {
        r = serve => r.context("stdio session failed"),
        () = runtime::mcp::stdio::stdout_closed() => {
            tracing::info!("stdout closed; exiting");
            Ok(())
        }
        _ = super::shutdown_signal() => {
            tracing::info!("interrupted; exiting");
            super::exit_on_second_signal();
            Ok(())
        }
    };
    // Every process session dies with the server.
    runtime.shutdown().await;
    outcome
}

/// `machine-mcp stdio` as a supervisor of a worker process (the `supervisor` crate).
/// The workspace is checked here first, so that mistake is reported once, before any worker
/// starts.
async fn supervise(args: &StdioArgs) -> Result<()> {
    let workspace = super::workspace_dir(args.workspace.as_deref())?;
    let mut argv = std::env::args_os();
    let argv0 = argv.next().unwrap_or_else(|| "machine-mcp".into());
    let binary = supervisor::invoked_path(&argv0);
    // A binary a caller of the workers could replace (the workspace is writable without exec
    // and holds it) is never swapped in automatically (`runtime::programs`).
    let automatic_swap_off = if runtime::programs::guards(&super::policy(&args.policy), false) {
        runtime::programs::refusal_in(&binary, std::slice::from_ref(&workspace)).map(|_| {
            format!(
                "the binary {} lies in the writable workspace {} (a caller that may write there \
                 but not run programs could replace it), so a changed binary is swapped in only \
                 by `machine-mcp reload`",
                binary.display(),
                workspace.display()
            )
        })
    } else {
        None
    };
    let config = supervisor::SupervisorConfig {
        binary,
        args: argv.collect(),
        automatic_swap_off,
    };
    match supervisor::supervise(config)
        .await
        .context("the stdio supervisor failed")?
    {
        supervisor::Ended::Stopped => Ok(()),
        supervisor::Ended::AtOnce => super::exit_at_once(),
    }
}

/// `machine-mcp reload`: SIGHUP to each running `machine-mcp stdio` supervisor of this user
/// (they announce themselves: `supervisor::running_supervisors`), or to
/// the one `--pid` names.
///
/// # Errors
/// No supervisor runs, `--pid` is not one (the message says what that process is), or a
/// signal could not be sent.
pub(crate) fn reload(args: &ReloadArgs) -> Result<()> {
    let running = supervisor::running_supervisors();
    let targets: Vec<u32> = match args.pid {
        Some(pid) if running.contains(&pid) => vec![pid],
        Some(pid) => anyhow::bail!(describe_other(pid)),
        None if running.is_empty() => {
            anyhow::bail!("no `machine-mcp stdio` of yours is running (nothing to reload)")
        }
        None => running,
    };
    for pid in &targets {
        let raw = i32::try_from(*pid).context("a process id out of range")?;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(raw),
            nix::sys::signal::Signal::SIGHUP,
        )
        .with_context(|| format!("cannot signal process {pid}"))?;
        outln!("reloading machine-mcp stdio (pid {pid})");
    }
    Ok(())
}

/// Why process `pid` is not a supervisor this user can reload, in a sentence.
fn describe_other(pid: u32) -> String {
    if runtime::procs::identity(pid).is_none() {
        return format!("no process {pid} is running");
    }
    let mine = std::fs::metadata(format!("/proc/{pid}"))
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == nix::unistd::getuid().as_raw())
        .unwrap_or(false);
    if !mine {
        return format!("process {pid} belongs to another user");
    }
    let argv = runtime::procs::command_line(pid).unwrap_or_default();
    if argv.iter().any(|a| a == "--worker") {
        return format!(
            "process {pid} is the worker of a `machine-mcp stdio` supervisor: reload the \
             supervisor, its parent (`machine-mcp reload` without --pid reloads every one)"
        );
    }
    if argv.iter().any(|a| a == "--no-supervisor") {
        return format!(
            "process {pid} serves without a supervisor (--no-supervisor): it cannot swap in a \
             new binary; restart its client to upgrade it"
        );
    }
    format!("process {pid} is not a running `machine-mcp stdio` supervisor")
}
