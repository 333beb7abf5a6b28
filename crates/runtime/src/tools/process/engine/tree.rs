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
//!
//! The scan reads the stat of only the processes with a higher pid than the leader's when that
//! finds the same members: the leader's process group is empty (`killpg(leader, 0)` fails with
//! `ESRCH`: a process older than the leader can be a member only by having joined the group),
//! and pids cannot have wrapped around since the leader was started, so every process started
//! after it has a higher pid. Pids are handed out upwards from the last one, skipping those in
//! use, and wrap at `pid_max`; so they cannot have wrapped while the leader's pid, plus the
//! processes created since (the kernel's fork counter, read before the leader was started),
//! plus three pids per task that exists (its own, and a process group and session it may keep
//! in use), stays below `pid_max`. Otherwise every process is read.

use std::{collections::HashSet, ffi::OsString, time::Duration};

use nix::{
    sys::signal::{Signal, kill, killpg},
    unistd::Pid,
};

/// Bytes read of `/proc/<pid>/stat` ([`read_stat`]).
const STAT_BUFFER: usize = 2048;

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
    /// The kernel's fork counter read before the leader was started ([`forks_so_far`]).
    forks_before: Option<u64>,
}

impl Tree {
    /// A fresh tag for a process about to start: this server's instance prefix and a random
    /// part (see [`super::watchdog`], which this starts if it is not running yet).
    pub(crate) fn new_tag() -> String {
        super::watchdog::new_tag()
    }

    /// The tree of the just-started `leader`, whose environment holds `TREE_ENV=tag`;
    /// `forks_before` is [`forks_so_far`] read before it was started.
    pub(crate) fn new(leader: u32, tag: String, forks_before: Option<u64>) -> Self {
        let started = read_stat(leader as i32).map_or(0, |s| s.started);
        Self {
            leader,
            tag,
            started,
            forks_before,
        }
    }

    /// Whether every process started since the leader has a higher pid than the leader's, and
    /// no process older than the leader is in its group (the module's rule for the scan), by
    /// the machine's counters `now`.
    fn only_newer_can_be_members(&self, now: Option<&Counters>) -> bool {
        let leader = self.leader as i32;
        let (Some(before), Some(now)) = (self.forks_before, now) else {
            return false;
        };
        // Never pid 1: `killpg(1, …)` is `kill(-1, …)`, every process.
        if leader <= 1 || killpg(Pid::from_raw(leader), None) != Err(nix::errno::Errno::ESRCH) {
            return false;
        }
        u64::from(self.leader)
            .saturating_add(now.forks.saturating_sub(before))
            .saturating_add(now.tasks.saturating_mul(3))
            < now.pid_max
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
///
/// Read with one `read(2)` into a buffer on the stack: the kernel renders the whole line for
/// the first read, and the line (a short command name and 50 numbers) is far shorter than the
/// buffer. A scan reads this for every process on the machine: one `open`, one `read` and one
/// `close` each, not `read_to_string`'s size query and doubling reads (eight calls a file).
pub(crate) fn read_stat(pid: i32) -> Option<Stat> {
    use std::io::Read;
    let mut buf = [0u8; STAT_BUFFER];
    let mut file = std::fs::File::open(format!("/proc/{pid}/stat")).ok()?;
    let n = file.read(&mut buf).ok()?;
    // A full buffer may have cut the line: not trusted.
    if n == buf.len() {
        return None;
    }
    // The command name is in parentheses and may hold any bytes (spaces, `)`, bytes that are
    // not UTF-8); the fields follow the last `)` and are ASCII.
    let close = buf[..n].iter().rposition(|b| *b == b')')?;
    let rest = std::str::from_utf8(buf.get(close + 2..n)?).ok()?;
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
    stats_from(0)
}

/// The stat of every process in `/proc` whose pid is `min` or higher.
fn stats_from(min: i32) -> Vec<Stat> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| *pid >= min)
        .filter_map(read_stat)
        .collect()
}

/// What the scan's rule reads of the machine (the module's rule).
#[derive(Debug, Clone, Copy)]
struct Counters {
    /// [`forks_so_far`] now.
    forks: u64,
    /// The pid at which pids wrap around (`/proc/sys/kernel/pid_max`).
    pid_max: u64,
    /// How many tasks (threads) exist: the total of `running/total` in `/proc/loadavg`.
    tasks: u64,
}

impl Counters {
    /// The counters now; `None` when one is unreadable.
    fn read() -> Option<Self> {
        let pid_max = std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let avg = std::fs::read_to_string("/proc/loadavg").ok()?;
        let tasks = avg
            .split_ascii_whitespace()
            .nth(3)?
            .split_once('/')?
            .1
            .parse()
            .ok()?;
        Some(Self {
            forks: forks_so_far()?,
            pid_max,
            tasks,
        })
    }
}

/// The processes [`members`] looks at: those with the leader's pid or a higher one when the
/// module's rule allows it, else all.
fn candidates(tree: &Tree, now: Option<&Counters>) -> Vec<Stat> {
    if tree.only_newer_can_be_members(now) {
        stats_from(tree.leader as i32)
    } else {
        all_stats()
    }
}

/// The kernel's count of processes and threads created since boot (`processes` in
/// `/proc/stat`); `None` when unreadable.
pub(crate) fn forks_so_far() -> Option<u64> {
    let stat = std::fs::read("/proc/stat").ok()?;
    let line = stat
        .split(|b| *b == b'\n')
        .find_map(|l| l.strip_prefix(b"processes "))?;
    std::str::from_utf8(line).ok()?.trim().parse().ok()
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
    member_stats(tree).iter().map(|s| s.pid).collect()
}

/// The stats of the live members of `tree`.
fn member_stats(tree: &Tree) -> Vec<Stat> {
    let leader = tree.leader as i32;
    let me = std::process::id() as i32;
    let stats = candidates(tree, Counters::read().as_ref());
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
        .into_iter()
        .filter(|s| set.contains(&s.pid) && !s.zombie && s.pid != me)
        .collect()
}

/// The members of a tree found so far during one termination (pid → start time): a member found
/// by its parent link stays one after the signal ends its parent and it is reparented out of
/// every link.
#[derive(Default)]
struct Doomed(std::collections::HashMap<i32, u64>);

impl Doomed {
    /// The members now, and those found before that still run; their pids.
    fn refresh(&mut self, tree: &Tree) -> Vec<i32> {
        for s in member_stats(tree) {
            self.0.insert(s.pid, s.started);
        }
        self.0.retain(|pid, started| {
            read_stat(*pid).is_some_and(|s| !s.zombie && s.started == *started)
        });
        self.0.keys().copied().collect()
    }

    /// Sends `sig` to every member (found before the signal, which may end their parents) and
    /// to the leader's process group.
    fn signal(&mut self, tree: &Tree, sig: Signal) {
        let found = self.refresh(tree);
        let _ = killpg(Pid::from_raw(tree.leader as i32), sig);
        for pid in found {
            let _ = kill(Pid::from_raw(pid), sig);
        }
    }
}

/// Sends `sig` to every member of the tree, found before the signal, and to the leader's
/// process group.
pub(crate) fn signal_tree(tree: &Tree, sig: Signal) {
    Doomed::default().signal(tree, sig);
}

/// SIGTERM to the tree, up to `grace` for it to exit, then SIGKILL to what is left. Returns when
/// no member is alive (or after a further second of SIGKILL retries).
pub(crate) async fn terminate_tree(tree: &Tree, grace: Duration) {
    let mut doomed = Doomed::default();
    doomed.signal(tree, Signal::SIGTERM);
    let deadline = tokio::time::Instant::now() + grace;
    while tokio::time::Instant::now() < deadline {
        if doomed.refresh(tree).is_empty() {
            return;
        }
        tokio::time::sleep(POLL).await;
    }
    kill_doomed(tree, &mut doomed).await;
}

/// SIGKILL to the tree until nothing is left (at most one second of retries).
pub(crate) async fn kill_tree_now(tree: &Tree) {
    kill_doomed(tree, &mut Doomed::default()).await;
}

async fn kill_doomed(tree: &Tree, doomed: &mut Doomed) {
    for _ in 0..40 {
        doomed.signal(tree, Signal::SIGKILL);
        if doomed.refresh(tree).is_empty() {
            return;
        }
        tokio::time::sleep(POLL).await;
    }
    tracing::warn!(
        leader = tree.leader,
        "processes of a terminated tree are still alive"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree whose leader led a group of its own and is gone (reaped: its pid and group are
    /// free, and pids are not handed out again until they wrap), started with the fork counter
    /// at 0.
    fn fresh_tree() -> Tree {
        use std::os::unix::process::CommandExt;
        let mut leader = std::process::Command::new("true")
            .process_group(0)
            .spawn()
            .unwrap();
        leader.wait().unwrap();
        Tree {
            leader: leader.id(),
            tag: "no-process-has-this-tag".into(),
            started: u64::MAX,
            forks_before: Some(0),
        }
    }

    fn roomy(forks: u64) -> Counters {
        Counters {
            forks,
            pid_max: u64::from(u32::MAX),
            tasks: 1_000,
        }
    }

    #[test]
    fn an_empty_group_without_a_wrap_reads_only_processes_started_later() {
        let tree = fresh_tree();
        let read = candidates(&tree, Some(&roomy(1_000)));
        assert!(read.iter().all(|s| s.pid >= tree.leader as i32), "{read:?}");
        // Everything else reads every process, pid 1 included.
        let all = |t: &Tree, c: Option<&Counters>| candidates(t, c).iter().any(|s| s.pid == 1);
        assert!(all(&tree, None), "no counters");
        assert!(all(
            &Tree {
                forks_before: None,
                ..tree.clone()
            },
            Some(&roomy(0))
        ));
    }

    #[test]
    fn pids_that_may_have_wrapped_read_every_process() {
        let tree = fresh_tree();
        let leader = u64::from(tree.leader);
        let edge = |forks: u64, tasks: u64| Counters {
            forks,
            pid_max: leader + 100 + 3 * 10 + 1,
            tasks,
        };
        assert!(tree.only_newer_can_be_members(Some(&edge(100, 10))));
        // One more fork, or one more task, and the pids may have wrapped.
        assert!(!tree.only_newer_can_be_members(Some(&edge(101, 10))));
        assert!(!tree.only_newer_can_be_members(Some(&edge(100, 11))));
        assert!(
            candidates(&tree, Some(&edge(101, 10)))
                .iter()
                .any(|s| s.pid == 1)
        );
    }

    #[test]
    fn a_group_with_a_process_in_it_reads_every_process() {
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let group = Tree {
            leader: child.id(),
            ..fresh_tree()
        };
        let bounded = group.only_newer_can_be_members(Some(&roomy(0)));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!bounded);
        // Reaped: the group is empty.
        assert!(group.only_newer_can_be_members(Some(&roomy(0))));
    }

    #[test]
    fn the_stat_of_a_process_is_read_in_one_piece() {
        let me = read_stat(std::process::id() as i32).expect("own stat");
        assert_eq!(me.ppid, nix::unistd::getppid().as_raw());
        assert!(me.started > 0 && !me.zombie);
        assert!(forks_so_far().is_some_and(|n| n > 0));
        assert!(Counters::read().is_some_and(|c| c.pid_max > 300 && c.tasks > 0));
    }
}
