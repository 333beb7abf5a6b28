//! `machine-mcp stdio`: one MCP session over stdin/stdout.

use anyhow::{Context, Result};

use crate::cli::{ReloadArgs, StdioArgs};

pub(crate) async fn run(args: StdioArgs) -> Result<()> {
    if !args.worker && !args.no_supervisor {
        return supervise(&args).await;
    }
    let runtime = super::build_runtime(args.workspace, &args.policy, &args.state, None, false)?;
    tracing::info!(
        workspace = %runtime.workspace().root().display(),
        policy = runtime.policy().name(),
        "serving MCP over stdio"
    );
    let serve = runtime::mcp::stdio::serve_process_stdio(runtime.clone());
    let outcome = tokio::select! {
        r = serve => r.context("stdio session failed"),
        _ = super::shutdown_signal() => {
            tracing::info!("interrupted; exiting");
            Ok(())
        }
    };
    // Every process session dies with the server.
    runtime.shutdown().await;
    outcome
}

/// `machine-mcp stdio` as a supervisor of a worker process (`runtime::mcp::stdio::supervisor`).
/// The workspace is checked here first, so that mistake is reported once, before any worker
/// starts.
async fn supervise(args: &StdioArgs) -> Result<()> {
    super::workspace_dir(args.workspace.as_deref())?;
    let mut argv = std::env::args_os();
    let argv0 = argv.next().unwrap_or_else(|| "machine-mcp".into());
    let config = runtime::mcp::stdio::supervisor::SupervisorConfig {
        binary: runtime::mcp::stdio::supervisor::invoked_path(&argv0),
        args: argv.collect(),
    };
    runtime::mcp::stdio::supervisor::supervise(config)
        .await
        .context("the stdio supervisor failed")
}

/// `machine-mcp reload`: SIGHUP to each running `machine-mcp stdio` supervisor of this user (or
/// the one `--pid` names), found through `/proc` by its command line.
///
/// # Errors
/// No supervisor runs (or `--pid` is not one), or a signal could not be sent.
pub(crate) fn reload(args: &ReloadArgs) -> Result<()> {
    let me = nix::unistd::getuid();
    let mut found = Vec::new();
    let entries = std::fs::read_dir("/proc").context("cannot read /proc")?;
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if args.pid.is_some_and(|p| p != pid) || pid == std::process::id() {
            continue;
        }
        let owner = std::fs::metadata(e.path()).map(|m| std::os::unix::fs::MetadataExt::uid(&m));
        if owner.ok() != Some(me.as_raw()) {
            continue;
        }
        if runtime::procs::command_line(pid).is_some_and(|argv| is_supervisor(&argv)) {
            found.push(pid);
        }
    }
    if found.is_empty() {
        anyhow::bail!(match args.pid {
            Some(p) => format!("process {p} is not a `machine-mcp stdio` of yours"),
            None => "no `machine-mcp stdio` of yours is running".to_owned(),
        });
    }
    for pid in &found {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid as i32),
            nix::sys::signal::Signal::SIGHUP,
        )
        .with_context(|| format!("cannot signal process {pid}"))?;
        outln!("reloading machine-mcp stdio (pid {pid})");
    }
    Ok(())
}

/// Whether `argv` is a `machine-mcp stdio` supervisor: the program named `machine-mcp`, the
/// `stdio` subcommand, neither `--worker` nor `--no-supervisor`.
fn is_supervisor(argv: &[String]) -> bool {
    let named = argv.first().is_some_and(|a| {
        std::path::Path::new(a)
            .file_name()
            .is_some_and(|n| n == "machine-mcp")
    });
    named
        && argv.iter().any(|a| a == "stdio")
        && !argv
            .iter()
            .any(|a| a == "--worker" || a == "--no-supervisor")
}

#[cfg(test)]
mod tests {
    use super::is_supervisor;

    #[test]
    fn only_supervisors_are_reloaded() {
        let v = |s: &str| s.split(' ').map(str::to_owned).collect::<Vec<_>>();
        assert!(is_supervisor(&v("/usr/bin/machine-mcp stdio -w /x")));
        assert!(!is_supervisor(&v(
            "/usr/bin/machine-mcp stdio --worker -w /x"
        )));
        assert!(!is_supervisor(&v("machine-mcp stdio --no-supervisor")));
        assert!(!is_supervisor(&v("machine-mcp connect")));
        assert!(!is_supervisor(&v("/bin/other stdio")));
    }
}
