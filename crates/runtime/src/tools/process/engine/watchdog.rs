//! The watchdog: nothing the server started outlives the server, even a SIGKILLed one.
//!
//! A server that is SIGKILLed runs no shutdown, so the tree termination of the engine's `tree` module
//! never happens and its children are reparented to init. Before its first child, a server that
//! [`enable`]d the watchdog starts one: its own executable again, running [`run`] in a process
//! group of its own (a terminal's Ctrl-C to the server's group does not reach it), with the read
//! end of a pipe as stdin. Only the server holds the write end (close-on-exec, so no child
//! inherits it), so the watchdog reads end of file exactly when the server is gone, however it
//! ended. It then terminates every process whose `TREE_ENV` tag starts with this
//! server's instance prefix — every child of the server inherits one, including a descendant
//! that called `setsid()` and was reparented — and every descendant of those by parent links:
//! SIGTERM, up to [`TERMINATION_GRACE`], then SIGKILL until none is left, rescanning `/proc`
//! each round so that a process forked meanwhile is caught too.
//!
//! Why not `PR_SET_PDEATHSIG`: it reaches only direct children (not a grandchild that called
//! `setsid()`), it fires when the *thread* that forked exits (a Tokio blocking-pool thread exits
//! after 10 s idle, which would kill a healthy child), and setting it needs `pre_exec` (unsafe).
//! A cgroup would need a delegated cgroup v2 subtree, which a user's server usually lacks.
//!
//! Limits: a descendant that cleared or replaced its environment and whose parent is gone by the
//! time the server dies escapes (as from the tree termination); so does anything when the watchdog
//! itself is SIGKILLed first or could not be started (then a warning is logged once).

use std::{
    collections::HashMap,
    ffi::OsString,
    io::Read,
    os::unix::process::CommandExt,
    process::{Child, Command, Stdio},
    sync::OnceLock,
    time::Duration,
};

use lock::Lock;

use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};

use crate::limits::TERMINATION_GRACE;
use tokio::time::Instant;

use super::tree::{self, TREE_ENV};

/// Poll interval of the watchdog while the processes it signalled exit.
const POLL: Duration = Duration::from_millis(25);
/// How long the watchdog keeps sending SIGKILL to processes that are still there (a fork loop).
const KILL_RETRIES_FOR: Duration = Duration::from_secs(5);

/// The subcommand of this executable that runs [`run`]; set by [`enable`].
static SUBCOMMAND: OnceLock<&'static str> = OnceLock::new();
/// The running watchdog, kept for the server's whole life: dropping its stdin would end it.
static WATCHDOG: Lock<Option<Child>> = Lock::new(None);
/// Whether a start was attempted (only one is).
static STARTED: OnceLock<()> = OnceLock::new();

/// This server's instance prefix (`<pid>.<random>`): the first part of every tree tag it hands
/// out.
fn instance() -> &'static str {
    static INSTANCE: OnceLock<String> = OnceLock::new();
    INSTANCE.get_or_init(|| {
        format!(
            "{}.{}",
            std::process::id(),
            &uuid::Uuid::new_v4().simple().to_string()[..16]
        )
    })
}

/// Lets this process start a watchdog: `subcommand` is the argument that makes this executable
/// (`/proc/self/exe`) call [`run`] with the instance prefix as the next argument. Called by the
/// binary; without it (library tests) no watchdog is started.
pub fn enable(subcommand: &'static str) {
    let _ = SUBCOMMAND.set(subcommand);
}

/// A fresh tree tag for a process about to start, as the `(name, value)` of the environment
/// variable to give it; starts the watchdog first if it is enabled and not yet running, so that
/// no child exists unwatched.
pub fn tag_env() -> (OsString, OsString) {
    (TREE_ENV.into(), new_tag().into())
}

/// A fresh tree tag (`<instance>-<random>`); starts the watchdog as [`tag_env`] does.
pub(crate) fn new_tag() -> String {
    ensure_started();
    format!("{}-{}", instance(), uuid::Uuid::new_v4().simple())
}

fn ensure_started() {
    let Some(sub) = SUBCOMMAND.get() else {
        return;
    };
    STARTED.get_or_init(|| {
        let spawned = Command::new("/proc/self/exe")
            .arg(sub)
            .arg(instance())
            .env_remove(TREE_ENV)
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn();
        match spawned {
            Ok(child) => {
                *WATCHDOG.lock() = Some(child);
            }
            Err(e) => tracing::warn!(
                error = %e,
                "cannot start the watchdog: processes started by this server will survive it if it is killed"
            ),
        }
    });
}

/// The watchdog's body (`machine-mcp` runs it in its hidden watchdog subcommand): waits for end
/// of file on stdin (the server is gone), then terminates every process tagged with `instance`
/// and their descendants; returns when none is left (or after `KILL_RETRIES_FOR` of SIGKILL).
pub fn run(instance: &str) {
    let server_started = tree::read_stat(nix::unistd::getppid().as_raw()).map_or(0, |s| s.started);
    let mut stdin = std::io::stdin().lock();
    let mut buf = [0u8; 256];
    loop {
        match stdin.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let prefix = format!("{TREE_ENV}={instance}-");
    let mut doomed = Doomed::default();
    doomed.signal(&prefix, server_started, Signal::SIGTERM);
    let grace_end = Instant::now() + TERMINATION_GRACE;
    while Instant::now() < grace_end {
        std::thread::sleep(POLL);
        if doomed.signal(&prefix, server_started, Signal::SIGTERM) == 0 {
            return;
        }
    }
    let kill_end = Instant::now() + KILL_RETRIES_FOR;
    while doomed.signal(&prefix, server_started, Signal::SIGKILL) > 0 && Instant::now() < kill_end {
        std::thread::sleep(POLL);
    }
}

/// Every process found so far (pid → start time): one stays doomed after its parent exits and
/// it is reparented, which would hide it from the parent-link walk.
#[derive(Default)]
struct Doomed(HashMap<i32, u64>);

impl Doomed {
    /// Rescans `/proc`, adds tagged processes and their descendants, sends `sig` to every live
    /// one sent nothing yet (every live one for SIGKILL); returns how many are alive.
    fn signal(&mut self, prefix: &str, since: u64, sig: Signal) -> usize {
        let me = std::process::id() as i32;
        let stats = tree::all_stats();
        let mut fresh = Vec::new();
        for s in &stats {
            if s.zombie || s.pid == me || s.started < since {
                continue;
            }
            let known = self.0.get(&s.pid) == Some(&s.started);
            if !known && (tagged(s.pid, prefix) || self.0.contains_key(&s.ppid)) {
                self.0.insert(s.pid, s.started);
                fresh.push(s.pid);
            }
        }
        // Descendants found through a parent added in this pass.
        loop {
            let before = fresh.len();
            for s in &stats {
                if !s.zombie
                    && s.pid != me
                    && !self.0.contains_key(&s.pid)
                    && self.0.contains_key(&s.ppid)
                {
                    self.0.insert(s.pid, s.started);
                    fresh.push(s.pid);
                }
            }
            if fresh.len() == before {
                break;
            }
        }
        let alive: Vec<i32> = stats
            .iter()
            .filter(|s| !s.zombie && self.0.get(&s.pid) == Some(&s.started))
            .map(|s| s.pid)
            .collect();
        for pid in &alive {
            if sig == Signal::SIGKILL || fresh.contains(pid) {
                let _ = kill(Pid::from_raw(*pid), sig);
            }
        }
        alive.len()
    }
}

/// Whether `pid`'s environment holds a `TREE_ENV` value starting with this instance's prefix.
fn tagged(pid: i32, prefix: &str) -> bool {
    let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
        return false;
    };
    env.split(|b| *b == 0)
        .any(|v| v.starts_with(prefix.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_carry_the_instance_prefix() {
        let (k, v) = tag_env();
        assert_eq!(k, TREE_ENV);
        let v = v.into_string().unwrap();
        assert!(v.starts_with(&format!("{}-", instance())), "{v}");
        assert_ne!(v, tag_env().1.into_string().unwrap());
    }
}
