//! Finding and terminating a whole process tree (DESIGN §3 "Processes", invariant 10).
//!
//! Every child is started as the leader of its own process group (a PTY child also leads its own
//! session) with [`TREE_ENV`] set to a tag unique to it, which its descendants inherit. The tree
//! of a leader is every live process that is in its process group, in its session when it leads
//! one, descends from it by parent links, or — started no earlier than the leader — carries its
//! tag in its environment (this finds a descendant that called `setsid()` and was reparented
//! away once its parent exited), all found by scanning `/proc`. Termination sends SIGTERM to all
//! of them, waits up to the grace for them to go, then sends SIGKILL to whatever is left. Out of
//! reach: a descendant that left the group and session, was reparented, and also cleared or
//! replaced its environment (a deliberate escape).

use std::{collections::HashSet, ffi::OsString, time::Duration};

use nix::{
    sys::signal::{Signal, kill, killpg},
    unistd::Pid,
};

/// Poll interval while waiting for a tree to exit.
const POLL: Duration = Duration::from_millis(25);

/// The environment variable that marks every process of a tree; see the module docs.
pub(crate) const TREE_ENV: &str = "MACHINE_MCP_TREE";

/// A process tree: its leader and the tag its processes carry in [`TREE_ENV`].
#[derive(Debug, Clone)]
pub(crate) struct Tree {
    leader: u32,
    tag: String,
    /// The leader's start time (clock ticks since boot); 0 when unknown.
    started: u64,
}

impl Tree {
    /// A fresh tag for a process about to start: this server's instance prefix and a random
    /// part (see [`super::watchdog`], which this starts if it is not running yet).
    pub(crate) fn new_tag() -> String {
        super::watchdog::new_tag()
    }

    /// The tree of the just-started `leader`, whose environment holds `TREE_ENV=tag`.
    pub(crate) fn new(leader: u32, tag: String) -> Self {
        let started = read_stat(leader as i32).map_or(0, |s| s.started);
        Self {
            leader,
            tag,
            started,
        }
    }

    /// The leader's pid.
    pub(crate) fn leader(&self) -> u32 {
        self.leader
    }

    /// Whether `pid`'s environment holds this tree's tag.
    fn tagged(&self, pid: i32) -> bool {
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            return false;
        };
        let want = [TREE_ENV.as_bytes(), b"=", self.tag.as_bytes()].concat();
        env.split(|b| *b == 0).any(|v| v == want.as_slice())
    }
}

/// The variable to put in the environment of the process that will lead the tree `tag`.
pub(crate) fn env_var(tag: &str) -> (OsString, OsString) {
    (TREE_ENV.into(), tag.into())
}

/// What the tree walk needs from `/proc/<pid>/stat`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stat {
    pub(crate) pid: i32,
    pub(crate) ppid: i32,
    pgrp: i32,
    session: i32,
    pub(crate) zombie: bool,
    /// Start time, clock ticks since boot.
    pub(crate) started: u64,
}

/// The stat of `pid`; `None` when it is gone or unreadable.
pub(crate) fn read_stat(pid: i32) -> Option<Stat> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces; fields follow the last ')'.
    let rest = &s[s.rfind(')')? + 2..];
    let mut f = rest.split_ascii_whitespace();
    let state = f.next()?;
    let ppid = f.next()?.parse().ok()?;
    let pgrp = f.next()?.parse().ok()?;
    let session = f.next()?.parse().ok()?;
    // Fields 7-21 (tty_nr .. itrealvalue), then field 22, starttime.
    let started = f.nth(15)?.parse().ok()?;
    Some(Stat {
        pid,
        ppid,
        pgrp,
        session,
        zombie: state == "Z" || state == "X",
        started,
    })
}

/// The stat of every process in `/proc`.
pub(crate) fn all_stats() -> Vec<Stat> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(read_stat)
        .collect()
}

/// Live descendants of `pid` by parent links, children first seen before their own children;
/// a process for which `prune(pid)` is true is left out together with everything below it.
pub(crate) fn descendants(pid: i32, prune: impl Fn(i32) -> bool) -> Vec<i32> {
    let stats = all_stats();
    let mut found: Vec<i32> = Vec::new();
    let mut frontier = vec![pid];
    while let Some(parent) = frontier.pop() {
        for s in &stats {
            if s.ppid == parent && !s.zombie && !found.contains(&s.pid) && !prune(s.pid) {
                found.push(s.pid);
                frontier.push(s.pid);
            }
        }
    }
    found
}

/// Live (non-zombie) members of `tree`.
pub(crate) fn members(tree: &Tree) -> Vec<i32> {
    let leader = tree.leader as i32;
    let me = std::process::id() as i32;
    let stats = all_stats();
    let mut set: HashSet<i32> = HashSet::new();
    for s in &stats {
        if s.pid == leader || s.pgrp == leader || s.session == leader {
            set.insert(s.pid);
        }
    }
    // Tagged processes; only those started since the leader can be, which skips reading the
    // environment of nearly every other process on the machine.
    for s in &stats {
        if !s.zombie
            && s.pid != me
            && s.started >= tree.started
            && !set.contains(&s.pid)
            && tree.tagged(s.pid)
        {
            set.insert(s.pid);
        }
    }
    // Descendants by parent links (children that changed their process group).
    loop {
        let before = set.len();
        for s in &stats {
            if set.contains(&s.ppid) {
                set.insert(s.pid);
            }
        }
        if set.len() == before {
            break;
        }
    }
    stats
        .iter()
        .filter(|s| set.contains(&s.pid) && !s.zombie && s.pid != me)
        .map(|s| s.pid)
        .collect()
}

/// Sends `sig` to the leader's process group and to every member of the tree.
pub(crate) fn signal_tree(tree: &Tree, sig: Signal) {
    let _ = killpg(Pid::from_raw(tree.leader as i32), sig);
    for pid in members(tree) {
        let _ = kill(Pid::from_raw(pid), sig);
    }
}

/// SIGTERM to the tree, up to `grace` for it to exit, then SIGKILL to what is left. Returns when
/// no member is alive (or after a further second of SIGKILL retries).
pub(crate) async fn terminate_tree(tree: &Tree, grace: Duration) {
    signal_tree(tree, Signal::SIGTERM);
    let deadline = tokio::time::Instant::now() + grace;
    while tokio::time::Instant::now() < deadline {
        if members(tree).is_empty() {
            return;
        }
        tokio::time::sleep(POLL).await;
    }
    kill_tree_now(tree).await;
}

/// SIGKILL to the tree until nothing is left (at most one second of retries).
pub(crate) async fn kill_tree_now(tree: &Tree) {
    for _ in 0..40 {
        signal_tree(tree, Signal::SIGKILL);
        if members(tree).is_empty() {
            return;
        }
        tokio::time::sleep(POLL).await;
    }
    tracing::warn!(
        leader = tree.leader,
        "processes of a terminated tree are still alive"
    );
}
