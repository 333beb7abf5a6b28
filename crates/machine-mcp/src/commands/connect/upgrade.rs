//! The daemon's binary swap (issue 20): when the installed `machine-mcp` at the path the daemon
//! was started by changes (checked every [`UPGRADE_CHECK_INTERVAL`] and on SIGHUP, by device,
//! inode, size and modification time, then confirmed by `BINARY --version`), the daemon waits
//! until no call is in flight, no process session runs, no task works and no delegation is
//! queued or running (exited sessions and finished tasks still readable get
//! [`UPGRADE_ENDED_GRACE`] to be read), then closes its link cleanly and `exec`s the new binary
//! with its own arguments (less `--enroll`: a code is redeemed once). The process keeps its PID,
//! so a service manager keeps tracking it; the new image is a new daemon instance: it
//! reconnects, and the relay ends the old instance's MCP sessions (clients get 404 and
//! initialize again, DESIGN §5 step 8), so new sessions are served by the new binary. Managed
//! jobs run in their own runner processes and carry on.

use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use protocol::limits::{UPGRADE_CHECK_INTERVAL, UPGRADE_ENDED_GRACE};
use runtime::{
    Runtime,
    mcp::stdio::supervisor::binary::{FileId, probe_version},
};
use tokio::{
    sync::{Notify, mpsc},
    time::Instant,
};

use daemon::sessions::HostedSessions;

/// How often a daemon with an upgrade pending checks whether it may restart.
const IDLE_POLL: Duration = Duration::from_millis(200);

/// A changed binary that answered `--version`.
#[derive(Debug, Clone)]
pub(super) struct Upgrade {
    /// The path the daemon was started by (symlinks kept: an upgrade may move one).
    pub(super) path: PathBuf,
    /// What the new file reports (`0.1.0+2`).
    pub(super) version: String,
}

/// Watches `path` for a new binary: on a change (every [`UPGRADE_CHECK_INTERVAL`], or at once
/// when `nudge` is notified) probes its version and sends an [`Upgrade`] for a file that
/// answers. A file that does not answer is logged once and skipped until it changes again; a
/// missing file (an upgrade in progress, or an uninstall) is waited for. Ends when `tx` closes.
pub(super) async fn watch(path: PathBuf, nudge: Arc<Notify>, tx: mpsc::Sender<Upgrade>) {
    let mut known = FileId::of(&path);
    let mut refused: Option<FileId> = None;
    let mut missing_told = false;
    loop {
        tokio::select! {
            () = tokio::time::sleep(UPGRADE_CHECK_INTERVAL) => {}
            () = nudge.notified() => {}
            () = tx.closed() => return,
        }
        let Some(now) = FileId::of(&path) else {
            if !missing_told {
                tracing::warn!(
                    binary = %path.display(),
                    "the daemon's binary is gone; it keeps running and restarts into a new one when it appears"
                );
                missing_told = true;
            }
            continue;
        };
        missing_told = false;
        if known.is_some_and(|k| k.same_binary(&now)) || refused == Some(now) {
            continue;
        }
        match probe_version(&path).await {
            Ok(version) => {
                known = Some(now);
                refused = None;
                if tx
                    .send(Upgrade {
                        path: path.clone(),
                        version,
                    })
                    .await
                    .is_err()
                {
                    return;
                }
            }
            Err(why) => {
                tracing::warn!(
                    binary = %path.display(),
                    error = %why,
                    "the daemon's binary changed but the new file does not answer; the daemon keeps running this build"
                );
                refused = Some(now);
            }
        }
    }
}

/// What holds the daemon back from restarting: calls in flight, running process sessions and
/// working tasks (their work would be lost), and process sessions that exited and tasks that
/// finished but are still readable (their results would be lost; they hold it back for at most
/// [`UPGRADE_ENDED_GRACE`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Holding {
    calls: usize,
    running_sessions: usize,
    working_tasks: usize,
    delegations: usize,
    ended_sessions: usize,
    ended_tasks: usize,
}

impl Holding {
    /// What `sessions` and `runtime` hold now.
    pub(super) fn now(sessions: &HostedSessions, runtime: &Runtime) -> Self {
        let running_sessions = runtime.running_sessions();
        let working_tasks = runtime.tasks().working();
        Self {
            calls: sessions.requests_in_flight(),
            running_sessions,
            working_tasks,
            delegations: runtime.active_delegations(),
            ended_sessions: runtime.kept_sessions().saturating_sub(running_sessions),
            ended_tasks: runtime.tasks().kept().saturating_sub(working_tasks),
        }
    }

    /// Work is running that a restart would end.
    pub(super) fn busy(self) -> bool {
        self.calls + self.running_sessions + self.working_tasks + self.delegations > 0
    }

    /// Ended work is still readable that a restart would drop.
    fn ended(self) -> bool {
        self.ended_sessions + self.ended_tasks > 0
    }
}

impl std::fmt::Display for Holding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} call(s) in flight, {} running process session(s), {} working task(s), \
             {} delegation(s) queued or running, \
             {} ended process session(s) and {} finished task(s) still readable",
            self.calls,
            self.running_sessions,
            self.working_tasks,
            self.delegations,
            self.ended_sessions,
            self.ended_tasks
        )
    }
}

/// Whether a restart may happen now, given what is held and since when only ended work is
/// (`ended_since`, kept by the caller between checks).
fn may_restart(h: Holding, ended_since: &mut Option<Instant>, now: Instant) -> bool {
    if h.busy() {
        *ended_since = None;
        return false;
    }
    if !h.ended() {
        return true;
    }
    let since = *ended_since.get_or_insert(now);
    now.duration_since(since) >= UPGRADE_ENDED_GRACE
}

/// Resolves once a restart loses nothing running (polled every [`IDLE_POLL`]): no call in
/// flight, no running process session, no working task; ended ones still readable get
/// [`UPGRADE_ENDED_GRACE`] to be read. Logs what it waits for whenever that changes.
pub(super) async fn idle(sessions: &HostedSessions, runtime: &Runtime) {
    let mut told: Option<Holding> = None;
    let mut ended_since = None;
    loop {
        let now = Holding::now(sessions, runtime);
        if may_restart(now, &mut ended_since, Instant::now()) {
            if now.ended() {
                tracing::warn!(dropped = %now, "upgrade: ended process sessions and tasks not read within the grace are dropped by the restart");
            }
            return;
        }
        if told != Some(now) {
            tracing::info!(waiting_for = %now, "upgrade pending: the daemon restarts into the new binary once these end");
            told = Some(now);
        }
        tokio::time::sleep(IDLE_POLL).await;
    }
}

/// This daemon's arguments for the new binary: its own, less `--enroll CODE` (or
/// `--enroll=CODE`), which was redeemed already.
pub(super) fn exec_args(own: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut skip_value = false;
    for a in own {
        if skip_value {
            skip_value = false;
            continue;
        }
        if a == "--enroll" {
            skip_value = true;
            continue;
        }
        if a.to_str().is_some_and(|s| s.starts_with("--enroll=")) {
            continue;
        }
        out.push(a);
    }
    out
}

/// Replaces this process with `binary` run with `args` (same PID, environment and standard
/// streams). Returns only when that fails, with the reason.
pub(super) fn exec(binary: &Path, args: &[OsString]) -> std::io::Error {
    use std::os::unix::process::CommandExt;
    std::process::Command::new(binary).args(args).exec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_enrollment_code_is_not_passed_on() {
        let args = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            exec_args(args(&[
                "connect",
                "--enroll",
                "CODE",
                "--relay",
                "https://r",
                "--enroll=X",
                "-w",
                "/w"
            ])),
            args(&["connect", "--relay", "https://r", "-w", "/w"])
        );
    }

    #[test]
    fn running_work_holds_the_restart_back_and_ended_work_for_the_grace() {
        let h = |calls, running_sessions, working_tasks, ended_sessions, ended_tasks| Holding {
            calls,
            running_sessions,
            working_tasks,
            delegations: 0,
            ended_sessions,
            ended_tasks,
        };
        let t0 = Instant::now();
        let mut since = None;
        assert!(may_restart(h(0, 0, 0, 0, 0), &mut since, t0));
        let delegating = Holding {
            delegations: 1,
            ..h(0, 0, 0, 0, 0)
        };
        for busy in [
            h(1, 0, 0, 0, 0),
            h(0, 1, 0, 0, 0),
            h(0, 0, 1, 0, 0),
            delegating,
        ] {
            assert!(!may_restart(
                busy,
                &mut since,
                t0 + Duration::from_secs(3600)
            ));
        }
        // Only ended work: held back from the first time it is seen, for the grace.
        let ended = h(0, 0, 0, 1, 1);
        assert!(!may_restart(ended, &mut since, t0));
        assert!(!may_restart(
            ended,
            &mut since,
            t0 + UPGRADE_ENDED_GRACE - Duration::from_millis(1)
        ));
        assert!(may_restart(ended, &mut since, t0 + UPGRADE_ENDED_GRACE));
        // Work that starts again restarts the grace.
        assert!(!may_restart(h(0, 1, 0, 1, 0), &mut since, t0));
        assert_eq!(since, None);
        assert_eq!(
            h(1, 2, 3, 4, 5).to_string(),
            "1 call(s) in flight, 2 running process session(s), 3 working task(s), \
             0 delegation(s) queued or running, \
             4 ended process session(s) and 5 finished task(s) still readable"
        );
    }
}
