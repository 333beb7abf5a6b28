//! Process identity and process trees for code outside the runtime: the daemon's instance lock
//! (one daemon per state directory) verifies and stops a holder with these.
//!
//! Linux reads `/proc`; where it is absent every function answers "nothing known" (`None`, an
//! empty list), which callers treat as "cannot verify", never as "verified".

use std::path::PathBuf;

pub use crate::tools::jobs::engine::state::RunnerId as ProcessId;
use crate::tools::process::engine::tree;

/// The identity of live process `pid`: its PID, start time (clock ticks since boot) and the
/// boot id, so a PID reused after the process ended (or after a reboot) never compares equal.
/// `None` when it is gone, a zombie, or `/proc` cannot be read.
pub fn identity(pid: u32) -> Option<ProcessId> {
    crate::tools::jobs::engine::store::identity_of(pid)
}

/// The command line of `pid` (`/proc/PID/cmdline`, split at NUL; lossy UTF-8); `None` when
/// unreadable.
pub fn command_line(pid: u32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        raw.split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect(),
    )
}

/// The executable of `pid` (`/proc/PID/exe`); `None` when unreadable (another user's process).
pub fn executable(pid: u32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/exe")).ok()
}

/// The live descendants of `pid` by parent links, except managed-job runners
/// (`machine-mcp job-runner ...`) and everything below them: jobs outlive the server that
/// started them (docs/jobs.md), so stopping a daemon's tree must leave them alone.
pub fn descendants_except_job_runners(pid: u32) -> Vec<u32> {
    let Ok(pid) = i32::try_from(pid) else {
        return Vec::new();
    };
    let runner = crate::tools::jobs::engine::store::RUNNER_SUBCOMMAND;
    tree::descendants(pid, |p| {
        u32::try_from(p)
            .ok()
            .and_then(command_line)
            .is_some_and(|argv| argv.get(1).is_some_and(|a| a == runner))
    })
    .into_iter()
    .filter_map(|p| u32::try_from(p).ok())
    .collect()
}

/// The children of `pid` by parent link, zombies included (Linux `/proc`; empty elsewhere).
pub fn children(pid: u32) -> Vec<u32> {
    let Ok(pid) = i32::try_from(pid) else {
        return Vec::new();
    };
    tree::all_stats()
        .into_iter()
        .filter(|s| s.ppid == pid)
        .filter_map(|s| u32::try_from(s.pid).ok())
        .collect()
}
