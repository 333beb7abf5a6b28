//! The daemon's binary swap: when the installed `machine-mcp` at the path the daemon
//! was started by holds another build than the one running (checked every
//! [`UPGRADE_CHECK_INTERVAL`] and on SIGHUP: device, inode, size and modification time against
//! the running executable, then `BINARY --version`, which must name another version: a `touch`
//! or a reinstall of the same build restarts nothing), the daemon waits until no call is in
//! flight, no process session runs, no task works and no delegation is queued or running; ended
//! work that a restart would drop — exited process sessions and finished tasks still readable,
//! results the relay has not acknowledged yet (its link is down) — holds it back for at most
//! [`UPGRADE_ENDED_GRACE`] from when the new binary was noticed. Then it checks the new file
//! once more (`--version`, and `connect --help` must answer), closes its link cleanly and
//! `exec`s it with its own arguments (less `--enroll`: a code is redeemed once), with SIGHUP
//! blocked across the `exec` (the new image unblocks it once it handles it: a SIGHUP meanwhile
//! is kept, not fatal). The process keeps its PID, so a service manager keeps tracking it; the
//! new image is a new daemon instance: it reconnects, and the relay ends the old instance's MCP
//! sessions (clients get 404 and initialize again, DESIGN §5 step 8), so new sessions are served
//! by the new binary. Managed jobs run in their own runner processes and carry on.

use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use lock::Lock;

use crate::limits::UPGRADE_ENDED_GRACE;
use protocol::{limits::UPGRADE_CHECK_INTERVAL, limits::VERSION_PROBE_TIMEOUT};
use runtime::Runtime;
use supervisor::binary::{FileId, probe_version};
use tokio::{
    sync::{Notify, mpsc},
    time::Instant,
};

use daemon::sessions::HostedSessions;

/// How often a daemon with an upgrade pending checks whether it may restart.
const IDLE_POLL: Duration = Duration::from_millis(200);

/// How often, at most, a pending upgrade logs what it waits for.
const WAITING_LOG_EVERY: Duration = Duration::from_secs(60);

/// A changed binary that answered `--version` with another version than the running one.
#[derive(Debug, Clone)]
pub(super) struct Upgrade {
    /// The path the daemon was started by (symlinks kept: an upgrade may move one).
    pub(super) path: PathBuf,
    /// What the new file reports (`0.1.0+2`).
    pub(super) version: String,
    /// When it was noticed: the grace for ended work counts from here.
    pub(super) noticed: Instant,
}

/// The file this process runs: `/proc/self/exe` followed to the file behind it (still there
/// when the path was renamed over or unlinked), else the file at `path` (no `/proc`).
fn running_file(path: &Path) -> Option<FileId> {
    FileId::of(Path::new("/proc/self/exe")).or_else(|| FileId::of(path))
}

/// Watches `path` for a new binary: when the file there is not the one this process runs
/// (every [`UPGRADE_CHECK_INTERVAL`], or at once when `nudge` is notified; also at start, so a
/// build installed while this process was being started is not missed) probes its version and
/// sends an [`Upgrade`] when it names another version than this build's. A file that does not
/// answer is logged once and skipped until it changes again; a missing file (an upgrade in
/// progress, or an uninstall) is waited for. Ends when `tx` closes.
pub(super) async fn watch(path: PathBuf, nudge: Arc<Notify>, tx: mpsc::Sender<Upgrade>) {
    let mut known = running_file(&path);
    let mut refused: Option<FileId> = None;
    let mut missing_told = false;
    let mut off_told = false;
    let mut first = true;
    loop {
        if !first {
            tokio::select! {
                () = tokio::time::sleep(UPGRADE_CHECK_INTERVAL) => {}
                () = nudge.notified() => {}
                () = tx.closed() => return,
            }
        }
        first = false;
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
        // A binary a caller that may write but not run programs could have replaced is never
        // swapped in automatically (`runtime::programs`); a restart by the user still is.
        if let Some(why) = runtime::programs::refusal(&path) {
            if !off_told {
                tracing::warn!("automatic upgrade is off: {why}");
                off_told = true;
            }
            continue;
        }
        match probe_version(&path).await {
            Ok(version) if version == runtime::version() => {
                tracing::info!(
                    binary = %path.display(),
                    %version,
                    "the daemon's binary changed but is the version this daemon runs; nothing is restarted"
                );
                known = Some(now);
                refused = None;
            }
            Ok(version) => {
                known = Some(now);
                refused = None;
                let u = Upgrade {
                    path: path.clone(),
                    version,
                    noticed: Instant::now(),
                };
                if tx.send(u).await.is_err() {
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

/// What holds the daemon back from restarting. Busy (never left behind): calls in flight,
/// running process sessions, working tasks, delegations queued or running. Ended (left behind
/// after [`UPGRADE_ENDED_GRACE`]): process sessions that exited and tasks that finished but are
/// still readable, and messages the relay has not acknowledged yet (a result that finished
/// while the link was down: the same process replays it on reconnect, a new one cannot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Holding {
    calls: usize,
    running_sessions: usize,
    working_tasks: usize,
    delegations: usize,
    ended_sessions: usize,
    ended_tasks: usize,
    unacknowledged: usize,
}

impl Holding {
    /// What `sessions` and `runtime` hold now.
    pub(super) fn now(sessions: &HostedSessions, runtime: &Runtime) -> Self {
        let a = runtime.activity();
        Self {
            calls: sessions.requests_in_flight(),
            running_sessions: a.running_process_sessions,
            working_tasks: a.working_tasks,
            delegations: a.active_delegations,
            ended_sessions: a
                .kept_process_sessions
                .saturating_sub(a.running_process_sessions),
            ended_tasks: a.kept_tasks.saturating_sub(a.working_tasks),
            unacknowledged: sessions.unacknowledged(),
        }
    }

    /// Work is running that a restart would end.
    pub(super) fn busy(self) -> bool {
        self.calls + self.running_sessions + self.working_tasks + self.delegations > 0
    }

    /// Ended work a restart would drop.
    fn ended(self) -> bool {
        self.ended_sessions + self.ended_tasks + self.unacknowledged > 0
    }
}

impl std::fmt::Display for Holding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} call(s) in flight, {} running process session(s), {} working task(s), \
             {} delegation(s) queued or running, \
             {} ended process session(s) and {} finished task(s) still readable, \
             {} message(s) the relay has not acknowledged",
            self.calls,
            self.running_sessions,
            self.working_tasks,
            self.delegations,
            self.ended_sessions,
            self.ended_tasks,
            self.unacknowledged
        )
    }
}

/// Whether a restart may happen at `now` for an upgrade noticed at `noticed`: nothing busy, and
/// no ended work or the grace for it is over. The grace runs from `noticed` and is not started
/// again by work that comes and goes (else a call overlapping its end would restart it).
fn may_restart(h: Holding, noticed: Instant, now: Instant) -> bool {
    !h.busy() && (!h.ended() || now.duration_since(noticed) >= UPGRADE_ENDED_GRACE)
}

/// Resolves once a restart loses nothing running (polled every [`IDLE_POLL`]; see
/// [`may_restart`]). Logs what it waits for when it first waits and then at most every
/// [`WAITING_LOG_EVERY`] (`told` keeps when, across calls: the caller polls this anew after
/// every other event).
pub(super) async fn idle(
    sessions: &HostedSessions,
    runtime: &Runtime,
    noticed: Instant,
    told: &Lock<Option<Instant>>,
) {
    loop {
        let now = Holding::now(sessions, runtime);
        if may_restart(now, noticed, Instant::now()) {
            if now.ended() {
                tracing::warn!(dropped = %now, "upgrade: ended work not collected within the grace is dropped by the restart");
            }
            return;
        }
        {
            let mut t = told.lock();
            if t.is_none_or(|at| at.elapsed() >= WAITING_LOG_EVERY) {
                tracing::info!(waiting_for = %now, "upgrade pending: the daemon restarts into the new binary once these end");
                *t = Some(Instant::now());
            }
        }
        tokio::time::sleep(IDLE_POLL).await;
    }
}

/// The last check of the new file before the daemon leaves its link for it: it still answers
/// `--version` with another version than this build's, and `connect --help` succeeds (a file
/// that answers `--version` but cannot run `connect` would leave no daemon). Returns the
/// version it reports.
///
/// # Errors
/// A sentence naming what failed.
pub(super) async fn verify(path: &Path) -> Result<String, String> {
    let version = probe_version(path).await?;
    if version == runtime::version() {
        return Err(format!(
            "{} is now the version this daemon runs ({version})",
            path.display()
        ));
    }
    let run = tokio::process::Command::new(path)
        .args(["connect", "--help"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(VERSION_PROBE_TIMEOUT, run).await {
        Ok(Ok(out)) if out.status.success() && out.stdout.windows(7).any(|w| w == b"--relay") => {
            Ok(version)
        }
        Ok(Ok(out)) => Err(format!(
            "{} connect --help failed ({}): it cannot run the daemon",
            path.display(),
            out.status
        )),
        Ok(Err(e)) => Err(format!(
            "{} connect --help could not run: {e}",
            path.display()
        )),
        Err(_) => Err(format!(
            "{} connect --help did not answer within {} s",
            path.display(),
            VERSION_PROBE_TIMEOUT.as_secs()
        )),
    }
}

/// Reaps the children this process inherited from its previous image (a swap's `exec` keeps
/// them: the old image's process-tree watchdog, upstream servers it was stopping), each on a
/// thread of its own, so none stays a zombie. Call before this image starts any child: then
/// every child is an inherited one. Linux only (`/proc`); elsewhere nothing is done.
pub(super) fn reap_inherited() {
    for pid in runtime::procs::children(std::process::id()) {
        let Ok(pid) = i32::try_from(pid) else {
            continue;
        };
        let _ = std::thread::Builder::new()
            .name("reap-inherited".into())
            .spawn(move || {
                let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
            });
    }
}

/// Unblocks SIGHUP in the calling thread: a previous image blocked it across its `exec` so
/// that a SIGHUP then could not end the process; call once SIGHUP is handled (a pending one is
/// delivered then).
pub(super) fn unblock_hangup() {
    let _ = nix::sys::signal::SigSet::from(nix::sys::signal::Signal::SIGHUP).thread_unblock();
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
/// streams), with SIGHUP blocked across it (see [`unblock_hangup`]). Returns only when that
/// fails, with the reason (SIGHUP is unblocked again then).
pub(super) fn exec(binary: &Path, args: &[OsString]) -> std::io::Error {
    use std::os::unix::process::CommandExt;
    let hangup = nix::sys::signal::SigSet::from(nix::sys::signal::Signal::SIGHUP);
    let _ = hangup.thread_block();
    let e = std::process::Command::new(binary).args(args).exec();
    let _ = hangup.thread_unblock();
    e
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
    fn running_work_holds_the_restart_back_and_ended_work_for_the_grace_from_the_notice() {
        let h = |calls, running_sessions, ended_sessions, unacknowledged| Holding {
            calls,
            running_sessions,
            working_tasks: 0,
            delegations: 0,
            ended_sessions,
            ended_tasks: 0,
            unacknowledged,
        };
        let t0 = Instant::now();
        let late = t0 + Duration::from_secs(3600);
        assert!(may_restart(h(0, 0, 0, 0), t0, t0));
        let delegating = Holding {
            delegations: 1,
            ..h(0, 0, 0, 0)
        };
        let working = Holding {
            working_tasks: 1,
            ..h(0, 0, 0, 0)
        };
        for busy in [h(1, 0, 0, 0), h(0, 1, 0, 0), working, delegating] {
            assert!(!may_restart(busy, t0, late), "{busy}");
        }
        // Ended work, and a result the relay has not acknowledged (one that finished while the
        // link was down must not be dropped): held back for the grace.
        for ended in [h(0, 0, 1, 0), h(0, 0, 0, 1)] {
            assert!(!may_restart(ended, t0, t0));
            assert!(!may_restart(
                ended,
                t0,
                t0 + UPGRADE_ENDED_GRACE - Duration::from_millis(1)
            ));
            assert!(may_restart(ended, t0, t0 + UPGRADE_ENDED_GRACE));
        }
        // The grace runs from the notice: calls that came and went do not start it again.
        assert!(!may_restart(h(1, 0, 1, 0), t0, t0 + UPGRADE_ENDED_GRACE));
        assert!(may_restart(h(0, 0, 1, 0), t0, t0 + UPGRADE_ENDED_GRACE));
        assert_eq!(
            h(1, 2, 4, 5).to_string(),
            "1 call(s) in flight, 2 running process session(s), 0 working task(s), \
             0 delegation(s) queued or running, \
             4 ended process session(s) and 0 finished task(s) still readable, \
             5 message(s) the relay has not acknowledged"
        );
    }
}
