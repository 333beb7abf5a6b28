//! Finding and terminating a whole process tree (DESIGN §3 "Processes", invariant 10).
//!
//! Every child is started as the leader of its own process group (a PTY child also leads its own
//! session). The tree of a leader is every live process that is in its process group, in its
//! session when it leads one, or descends from it by parent links — found by scanning `/proc`.
//! Termination sends SIGTERM to all of them, waits up to the grace for them to go, then sends
//! SIGKILL to whatever is left. A process that moved itself into a new session (`setsid`) and
//! reparented away is out of reach; that is the documented limit of process-group tracking.

use std::{collections::HashSet, time::Duration};

use nix::{
    sys::signal::{Signal, kill, killpg},
    unistd::Pid,
};

/// Poll interval while waiting for a tree to exit.
const POLL: Duration = Duration::from_millis(25);

#[derive(Debug, Clone, Copy)]
struct Stat {
    pid: i32,
    ppid: i32,
    pgrp: i32,
    session: i32,
    zombie: bool,
}

fn read_stat(pid: i32) -> Option<Stat> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces; fields follow the last ')'.
    let rest = &s[s.rfind(')')? + 2..];
    let mut f = rest.split_ascii_whitespace();
    let state = f.next()?;
    let ppid = f.next()?.parse().ok()?;
    let pgrp = f.next()?.parse().ok()?;
    let session = f.next()?.parse().ok()?;
    Some(Stat {
        pid,
        ppid,
        pgrp,
        session,
        zombie: state == "Z" || state == "X",
    })
}

fn all_stats() -> Vec<Stat> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(read_stat)
        .collect()
}

/// Live (non-zombie) members of `leader`'s tree.
pub(crate) fn members(leader: u32) -> Vec<i32> {
    let leader = leader as i32;
    let stats = all_stats();
    let mut set: HashSet<i32> = HashSet::new();
    for s in &stats {
        if s.pid == leader || s.pgrp == leader || s.session == leader {
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
        .filter(|s| set.contains(&s.pid) && !s.zombie && s.pid != std::process::id() as i32)
        .map(|s| s.pid)
        .collect()
}

/// Sends `sig` to `leader`'s process group and to every member of its tree.
pub(crate) fn signal_tree(leader: u32, sig: Signal) {
    let _ = killpg(Pid::from_raw(leader as i32), sig);
    for pid in members(leader) {
        let _ = kill(Pid::from_raw(pid), sig);
    }
}

/// SIGTERM to the tree, up to `grace` for it to exit, then SIGKILL to what is left. Returns when
/// no member is alive (or after a further second of SIGKILL retries).
pub(crate) async fn terminate_tree(leader: u32, grace: Duration) {
    signal_tree(leader, Signal::SIGTERM);
    let deadline = tokio::time::Instant::now() + grace;
    while tokio::time::Instant::now() < deadline {
        if members(leader).is_empty() {
            return;
        }
        tokio::time::sleep(POLL).await;
    }
    kill_tree_now(leader).await;
}

/// SIGKILL to the tree until nothing is left (at most one second of retries).
pub(crate) async fn kill_tree_now(leader: u32) {
    for _ in 0..40 {
        signal_tree(leader, Signal::SIGKILL);
        if members(leader).is_empty() {
            return;
        }
        tokio::time::sleep(POLL).await;
    }
    tracing::warn!(leader, "processes of a terminated tree are still alive");
}
