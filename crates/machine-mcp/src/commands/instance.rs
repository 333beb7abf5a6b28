//! What `connect` and `up` share as daemons: the state directory's instance lock (one daemon
//! per state directory, `--takeover`), the loopback status endpoint, and the stop signals.

use std::{path::Path, sync::Arc, time::Duration};

use anyhow::{Context, Result};
use daemon::{
    instance::{Acquired, InstanceLock},
    sessions::HostedSessions,
    status::{self, LinkStatus},
};
use runtime::Runtime;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Takes the lock of `state_dir` for the daemon subcommand `command` (`connect` or `up`),
/// stopping a verified holder first when `takeover`.
///
/// # Errors
/// The lock is held (the message names the holder and the ways out), the holder could not be
/// verified or did not let go, the state directory cannot be used, or `stop` fired first.
pub(crate) async fn lock(
    state_dir: &Path,
    command: &str,
    takeover: bool,
    stop: &CancellationToken,
) -> Result<InstanceLock> {
    let (lock, how) = tokio::select! {
        r = InstanceLock::acquire(state_dir, command, takeover) => r?,
        () = stop.cancelled() => anyhow::bail!("stopped before the daemon lock of {} was taken", state_dir.display()),
    };
    match how {
        Acquired::Free => {}
        Acquired::Stale(pid) if pid == std::process::id() => {
            tracing::info!(pid, "restarted into the new binary (the same process)");
        }
        Acquired::Stale(pid) => {
            tracing::info!(
                pid,
                "took over the lock of a daemon that is no longer running"
            );
        }
        Acquired::TookOver { pid, killed: false } => {
            tracing::info!(
                pid,
                "took over from the daemon that was running (it stopped)"
            );
        }
        Acquired::TookOver { pid, killed: true } => tracing::warn!(
            pid,
            "took over from the daemon that was running: it did not stop on SIGTERM and was killed with its process tree"
        ),
    }
    Ok(lock)
}

/// The directories a run is about to create for its state directory: the state directory and
/// those of its parents that do not exist yet, so that a run that fails before the directory
/// holds anything worth keeping (a failed enrollment, a busy port) leaves the filesystem as it
/// found it.
pub(crate) struct Created {
    /// The missing directories, deepest first; empty when the state directory exists.
    missing: Vec<std::path::PathBuf>,
}

impl Created {
    /// Notes which of `state_dir` and its parents are missing; call it before the lock is taken
    /// (which creates them).
    pub(crate) fn before(state_dir: &Path) -> Self {
        let missing = state_dir
            .ancestors()
            .take_while(|d| !d.as_os_str().is_empty() && std::fs::symlink_metadata(d).is_err())
            .map(Path::to_owned)
            .collect();
        Self { missing }
    }

    /// Releases `lock` and removes what this run created: nothing when the state directory
    /// existed before. Its `daemon/` and `up/` subdirectories (key, enrollment, relay store)
    /// are removed while the lock is still held, so no other daemon is using them; then the
    /// lock is released (its record goes with it) and the lock file and the directories are
    /// removed only while empty, so a daemon that took the lock in between keeps its record.
    pub(crate) fn undo(self, lock: InstanceLock) {
        let Some(state_dir) = self.missing.first() else {
            drop(lock);
            return;
        };
        for sub in ["daemon", "up"] {
            let _ = std::fs::remove_dir_all(state_dir.join(sub));
        }
        drop(lock);
        let entries: Vec<_> = std::fs::read_dir(state_dir)
            .map(|r| r.filter_map(|e| e.ok().map(|e| e.file_name())).collect())
            .unwrap_or_default();
        if entries != [std::ffi::OsString::from(daemon::instance::LOCK_FILE)] {
            return;
        }
        let _ = std::fs::remove_file(state_dir.join(daemon::instance::LOCK_FILE));
        for d in &self.missing {
            if std::fs::remove_dir(d).is_err() {
                break;
            }
        }
    }
}

/// Fails as the runtime would on a workspace that is not a readable directory, so that a
/// `--takeover` with a bad workspace does not stop the daemon that runs.
///
/// # Errors
/// The workspace (default: the current directory) cannot be read as a directory.
pub(crate) fn check_workspace(workspace: Option<&Path>) -> Result<()> {
    let w = super::workspace_or_cwd(workspace)?;
    std::fs::read_dir(&w)
        .map(drop)
        .with_context(|| format!("workspace {} is not a usable directory", w.display()))
}

/// Fails early when a `--takeover` of `up` asks for a `listen` address other than the running
/// daemon's and that address cannot be bound (another program holds it), so the running
/// daemon is not stopped for nothing. Nothing to check without a takeover, for port 0, when
/// no verified daemon runs, or when it listens on that very address (it frees it as it stops).
///
/// # Errors
/// `listen` is held by a program other than the daemon to be taken over.
pub(crate) fn check_listen_for_takeover(
    state_dir: &Path,
    listen: std::net::SocketAddr,
    takeover: bool,
) -> Result<()> {
    if !takeover || listen.port() == 0 {
        return Ok(());
    }
    let Ok(Some(holder)) = daemon::instance::holder(state_dir) else {
        return Ok(());
    };
    // Records of daemons from before `listen` was recorded: the address in their MCP URL.
    let theirs = holder.listen.or_else(|| {
        let url = url::Url::parse(holder.mcp_url.as_deref()?).ok()?;
        url.socket_addrs(|| None).ok()?.into_iter().next()
    });
    if theirs == Some(listen) {
        return Ok(());
    }
    match std::net::TcpListener::bind(listen) {
        Ok(l) => {
            drop(l);
            Ok(())
        }
        Err(e) => anyhow::bail!(
            "cannot listen on {listen} ({e}): port {} is held by another program, not by the daemon to be taken over ({}), which was left running. Free the port, or choose another --listen",
            listen.port(),
            holder.describe()
        ),
    }
}

/// What the status report says besides the link: set once the daemon knows it.
pub(crate) struct Facts {
    /// The daemon subcommand.
    pub(crate) command: &'static str,
    /// The relay's URL.
    pub(crate) relay: String,
    /// The bridge.
    pub(crate) bridge: String,
    /// The MCP URL clients use (`up`).
    pub(crate) mcp_url: Option<String>,
}

/// Serves the status endpoint on a loopback port, records it in the lock's record, and mirrors
/// the calls still draining into the record while the daemon stops (a takeover reads that as
/// progress). Runs until `stop`.
///
/// # Errors
/// The listener cannot be bound or the record cannot be written.
pub(crate) async fn serve_status(
    lock: Arc<InstanceLock>,
    link: Arc<LinkStatus>,
    runtime: Arc<Runtime>,
    sessions: Arc<HostedSessions>,
    facts: Facts,
    stop: CancellationToken,
) -> Result<()> {
    let listener = status::bind().await?;
    let addr = status::local_addr(&listener);
    lock.set_endpoints(addr, facts.mcp_url.clone())?;
    let started = lock.record().started_at_unix_ms;
    let pid = std::process::id();
    let report_link = link.clone();
    let report: Arc<dyn Fn() -> Value + Send + Sync> = Arc::new(move || {
        let (sessions_open, calls) = sessions.counts();
        let jobs_running = runtime::tools::jobs::store(&runtime).map_or(0, |s| {
            s.list()
                .iter()
                .filter(|(_, l)| {
                    matches!(l, runtime::tools::jobs::engine::store::Loaded::Ok(_, st) if !st.is_terminal())
                })
                .count()
        });
        let now = protocol::frame::now_unix_ms();
        json!({
            "version": runtime::version(),
            "pid": pid,
            "command": facts.command,
            "uptime_s": now.saturating_sub(started) / 1000,
            "relay": facts.relay,
            "bridge": facts.bridge,
            "mcp_url": facts.mcp_url,
            "link": report_link.snapshot(),
            "sessions": sessions_open,
            "calls_in_flight": calls,
            "requests_in_flight": sessions.requests_in_flight(),
            "process_sessions": runtime.activity().running_process_sessions,
            "jobs_running": jobs_running,
            "workspace": runtime.workspace().root().display().to_string(),
            "policy": runtime.policy().name(),
        })
    });
    tokio::spawn(status::serve(listener, link.clone(), report, stop.clone()));
    tokio::spawn(async move {
        let mut last = None;
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = tick.tick() => {}
            }
            let n = link.snapshot().draining_in_flight;
            if n.is_some() && n != last {
                last = n;
                let _ = lock.set_stopping(n.unwrap_or(0));
            }
        }
    });
    Ok(())
}

/// Resolves when the daemon is asked to stop: Ctrl-C, or SIGTERM unless `ignore_sigterm` (a
/// hidden test flag that simulates a daemon that does not stop, for the takeover's SIGKILL
/// escalation).
pub(crate) async fn stop_signal(ignore_sigterm: bool) {
    if !ignore_sigterm {
        return super::shutdown_signal().await;
    }
    // Handling SIGTERM without acting on it replaces its default action (exit).
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate());
    let _ = tokio::signal::ctrl_c().await;
    drop(term);
}
