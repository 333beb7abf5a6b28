//! One daemon per state directory ([`InstanceLock`]), with a verified takeover.
//!
//! Two files in the state directory, both owner-only:
//! - `daemon.lock`: held with an exclusive `flock(2)` for the daemon's whole life. The kernel
//!   releases it when the process ends, however it ends, so a lock that can be taken is a lock
//!   nobody alive holds ("stale"), and is taken at once.
//! - `daemon.json` ([`Record`]): who holds it — PID, process start time and boot id, executable,
//!   command line, start time, the status endpoint's address, and while stopping the calls
//!   still draining. Written atomically (temporary file + rename) after the lock is taken.
//!
//! A second daemon refuses, naming the holder. With `--takeover` it first verifies that the
//! holder is really a `machine-mcp` daemon: the PID's start time and boot id are the recorded
//! ones (so a PID reused by an unrelated process is never signalled), its command line and
//! executable are the recorded ones, its arguments name a daemon subcommand, and where
//! `/proc/locks` tells, the lock's holder is that PID. Then SIGTERM, up to
//! [`TAKEOVER_WAIT`] for the lock to be released, and SIGKILL of its process tree (managed-job
//! runners excepted) once [`NO_PROGRESS_KILL`] passes without progress (fewer calls draining
//! or fewer processes in its tree) or the wait runs out.

use std::{
    fs,
    io::{self, Write},
    net::SocketAddr,
    os::unix::fs::OpenOptionsExt,
    path::{Path, PathBuf},
    time::Duration,
};

use lock::Lock;
use serde::{Deserialize, Serialize};

/// The lock file's name in the state directory.
pub const LOCK_FILE: &str = "daemon.lock";
/// The record's name in the state directory.
pub const RECORD_FILE: &str = "daemon.json";
/// How long a takeover waits at most for the holder to release the lock after SIGTERM.
pub const TAKEOVER_WAIT: Duration = Duration::from_secs(15);
/// How long a stopping holder may go without progress before its tree is SIGKILLed.
pub const NO_PROGRESS_KILL: Duration = Duration::from_secs(2);
/// How long a lock held by a process whose record is not written yet (it is starting) is
/// re-read before it is reported.
const STARTING_GRACE: Duration = Duration::from_secs(2);
/// Polling interval of the takeover.
const POLL: Duration = Duration::from_millis(50);
/// The largest record read, in bytes.
const RECORD_MAX_BYTES: u64 = 64 * 1024;
/// Subcommands that run a daemon (the record's `command`).
const DAEMON_COMMANDS: [&str; 2] = ["connect", "up"];

/// Who holds the lock (`daemon.json`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Record {
    /// Its PID.
    pub pid: u32,
    /// Its start time, clock ticks since boot (`/proc/PID/stat` field 22).
    pub start_ticks: u64,
    /// The boot it started in (`/proc/sys/kernel/random/boot_id`).
    pub boot_id: String,
    /// Its executable.
    pub exe: PathBuf,
    /// Its command line.
    pub argv: Vec<String>,
    /// The daemon subcommand: `connect` or `up`.
    pub command: String,
    /// Its version (`runtime::version()`: with the build stamp, `0.1.0+2`).
    pub version: String,
    /// When it took the lock, Unix ms.
    pub started_at_unix_ms: u64,
    /// Its status endpoint (`GET /healthz`, `GET /status`), once listening.
    pub status_addr: Option<SocketAddr>,
    /// The MCP URL clients use, when it knows one (`up`).
    #[serde(default)]
    pub mcp_url: Option<String>,
    /// The address its relay listens on, once bound (`up`).
    #[serde(default)]
    pub listen: Option<SocketAddr>,
    /// Calls still draining, once it is stopping.
    pub stopping_in_flight: Option<usize>,
}

impl Record {
    /// One line naming the holder: PID, command line and how long it has run.
    pub fn describe(&self) -> String {
        let up = protocol::frame::now_unix_ms().saturating_sub(self.started_at_unix_ms) / 1000;
        format!(
            "PID {} (`{}`, version {}, running for {})",
            self.pid,
            shown_command_line(&self.argv),
            self.version,
            human_duration(up)
        )
    }
}

/// `argv` as one line, arguments with spaces quoted, at most 200 characters; the one-time
/// enrollment code of `--enroll CODE` is shown as `…` (it is a credential until redeemed).
fn shown_command_line(argv: &[String]) -> String {
    let mut after_enroll = false;
    let line = argv
        .iter()
        .map(|a| {
            let secret = std::mem::replace(&mut after_enroll, a == "--enroll");
            if secret {
                "…".to_owned()
            } else if a.starts_with("--enroll=") {
                "--enroll=…".to_owned()
            } else if a.contains(char::is_whitespace) || a.is_empty() {
                format!("'{a}'")
            } else {
                a.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ");
    if line.chars().count() > 200 {
        format!("{}…", line.chars().take(200).collect::<String>())
    } else {
        line
    }
}

/// `secs` as `1h 2m`, `3m 4s` or `5s`.
pub fn human_duration(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    if d > 0 {
        format!("{d}d {h}h")
    } else if h > 0 {
        format!("{h}h {m}m")
    } else if m > 0 {
        format!("{m}m {s}s")
    } else {
        format!("{s}s")
    }
}

/// Why the lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another daemon holds it and no takeover was asked for.
    #[error(
        "another machine-mcp daemon is running on the state directory {dir}: {holder}. Stop it, pass --takeover to replace it, or give this one its own --state-dir"
    )]
    Held {
        /// The state directory.
        dir: PathBuf,
        /// [`Record::describe`] of the holder.
        holder: String,
    },
    /// The holder could not be verified as a daemon, so it was not signalled.
    #[error(
        "the daemon lock {lock} is held by a process that could not be verified as a machine-mcp daemon ({why}); it was not signalled. Find it with `fuser {lock}` and stop it, or use another --state-dir"
    )]
    Unverified {
        /// The lock file.
        lock: PathBuf,
        /// What did not match.
        why: String,
    },
    /// The takeover signalled the holder but the lock was not released.
    #[error("{0}")]
    TakeoverFailed(String),
    /// The state directory or its files cannot be used. The message names the path at fault
    /// and the fix ([`crate::state_io::describe`]), and holds the OS error once: `error` is
    /// not a `source`, so an error chain does not repeat it.
    #[error("{}", crate::state_io::describe(path, error))]
    Io {
        /// The file or directory the failed call named.
        path: PathBuf,
        /// The error.
        error: io::Error,
    },
}

/// The held lock; released when dropped (or when the process ends).
#[derive(Debug)]
pub struct InstanceLock {
    _lock: nix::fcntl::Flock<fs::File>,
    dir: PathBuf,
    record: Lock<Record>,
}

/// What [`InstanceLock::acquire`] did besides taking the lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquired {
    /// Nobody held it.
    Free,
    /// A record of a process that no longer holds the lock was there (it died).
    Stale(u32),
    /// A verified daemon was stopped: with SIGTERM alone, or with SIGKILL of its tree.
    TookOver {
        /// Its PID.
        pid: u32,
        /// Whether it had to be killed.
        killed: bool,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> LockError + '_ {
    move |error| LockError::Io {
        path: path.to_owned(),
        error,
    }
}

/// Creates `dir` (0700) if missing and checks it can be written.
fn prepare_dir(dir: &Path) -> Result<(), LockError> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io_err(dir))
}

fn try_lock(path: &Path) -> Result<Option<nix::fcntl::Flock<fs::File>>, LockError> {
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(io_err(path))?;
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(l) => Ok(Some(l)),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(LockError::Io {
            path: path.to_owned(),
            error: io::Error::from(e),
        }),
    }
}

/// Whether some process holds the lock of `state_dir` now, probed with a shared lock that is
/// released at once (so it never makes a starting daemon refuse for long:
/// [`InstanceLock::acquire`] retries for 2 s).
pub fn is_held(state_dir: &Path) -> bool {
    let path = state_dir.join(LOCK_FILE);
    let Ok(file) = fs::File::open(&path) else {
        return false;
    };
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockSharedNonblock) {
        Ok(_) => false,
        Err((_, e)) => e == nix::errno::Errno::EWOULDBLOCK,
    }
}

/// The record of `state_dir`, if one is there and readable (it may be stale: see
/// [`holder`]).
pub fn read_record(state_dir: &Path) -> Option<Record> {
    load_record(state_dir).ok().flatten()
}

/// The record of `state_dir`: `Ok(None)` when there is none, `Err(why)` when it is there but
/// cannot be read or is not a record (the message names the file and says which).
pub fn load_record(state_dir: &Path) -> Result<Option<Record>, String> {
    use std::io::Read;
    let path = state_dir.join(RECORD_FILE);
    let mut bytes = Vec::new();
    let read = fs::File::open(&path).and_then(|f| f.take(RECORD_MAX_BYTES).read_to_end(&mut bytes));
    match read {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(format!("its record {} is unreadable ({e})", path.display()));
        }
    }
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        format!(
            "its record {} is unreadable (not a daemon record: {e})",
            path.display()
        )
    })
}

/// The live, verified holder of `state_dir`'s lock: `Ok(None)` when nobody holds it,
/// `Err(why)` when it is held by a process that is not the recorded daemon, or whose record is
/// missing or unreadable (`why` says which).
pub fn holder(state_dir: &Path) -> Result<Option<Record>, String> {
    if !is_held(state_dir) {
        return Ok(None);
    }
    let r = load_record(state_dir)
        .and_then(|r| {
            r.ok_or_else(|| {
                format!(
                    "its record {} is missing",
                    state_dir.join(RECORD_FILE).display()
                )
            })
        })
        .map_err(|why| format!("the lock is held but {why}"))?;
    verify(state_dir, &r).map(|()| Some(r))
}

/// Checks that `r` describes the live process holding the lock (see the module docs).
fn verify(state_dir: &Path, r: &Record) -> Result<(), String> {
    let Some(now) = runtime::procs::identity(r.pid) else {
        return Err(format!("PID {} is not running", r.pid));
    };
    if now.start_ticks != r.start_ticks || now.boot_id != r.boot_id {
        return Err(format!(
            "PID {} was started at another time than the recorded daemon: the PID was reused",
            r.pid
        ));
    }
    if runtime::procs::command_line(r.pid).as_deref() != Some(r.argv.as_slice()) {
        return Err(format!(
            "the command line of PID {} is not the recorded one",
            r.pid
        ));
    }
    let exe = runtime::procs::executable(r.pid)
        .map(|p| strip_deleted(&p))
        .ok_or_else(|| format!("the executable of PID {} cannot be read", r.pid))?;
    if exe != strip_deleted(&r.exe) {
        return Err(format!(
            "PID {} runs {}, not the recorded {}",
            r.pid,
            exe.display(),
            r.exe.display()
        ));
    }
    if !DAEMON_COMMANDS.contains(&r.command.as_str()) || !r.argv.contains(&r.command) {
        return Err(format!("PID {} is not running a daemon subcommand", r.pid));
    }
    if let Some(pids) = flock_holders(&state_dir.join(LOCK_FILE))
        && !pids.is_empty()
        && !pids.contains(&r.pid)
    {
        return Err(format!(
            "the lock is held by PID {}, not by the recorded PID {}",
            pids.iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            r.pid
        ));
    }
    Ok(())
}

/// A replaced executable reads as `PATH (deleted)` in `/proc/PID/exe`.
fn strip_deleted(p: &Path) -> PathBuf {
    let s = p.to_string_lossy();
    PathBuf::from(s.strip_suffix(" (deleted)").unwrap_or(&s).to_string())
}

/// The PIDs `/proc/locks` names as holding a `flock` on `path`; `None` where that cannot be
/// read.
fn flock_holders(path: &Path) -> Option<Vec<u32>> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::metadata(path).ok()?;
    let text = fs::read_to_string("/proc/locks").ok()?;
    let want = format!(
        "{:02x}:{:02x}:{}",
        nix::sys::stat::major(meta.dev()),
        nix::sys::stat::minor(meta.dev()),
        meta.ino()
    );
    Some(
        text.lines()
            .filter(|l| l.contains("FLOCK") && !l.contains("->"))
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                // `1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF`
                let (pid, dev) = (f.get(4)?, f.get(5)?);
                (*dev == want).then(|| pid.parse().ok())?
            })
            .collect(),
    )
}

impl InstanceLock {
    /// Takes the lock of `state_dir` (created 0700 when missing) for this process running the
    /// daemon subcommand `command`, and writes its record. With `takeover`, a verified holder
    /// is stopped first (see the module docs); a stale lock is taken at once either way.
    ///
    /// # Errors
    /// [`LockError::Held`] (a daemon runs and no takeover), [`LockError::Unverified`] (the
    /// holder is not provably our daemon; nothing was signalled), [`LockError::TakeoverFailed`]
    /// (the holder did not let go even after SIGKILL), [`LockError::Io`].
    pub async fn acquire(
        state_dir: &Path,
        command: &str,
        takeover: bool,
    ) -> Result<(Self, Acquired), LockError> {
        prepare_dir(state_dir)?;
        let path = state_dir.join(LOCK_FILE);
        let previous = read_record(state_dir);
        let started = tokio::time::Instant::now();
        let mut outcome = Acquired::Free;
        let lock = loop {
            if let Some(l) = try_lock(&path)? {
                if outcome == Acquired::Free
                    && let Some(p) = &previous
                {
                    outcome = Acquired::Stale(p.pid);
                }
                break l;
            }
            // Held: by whom?
            let checked = load_record(state_dir)
                .and_then(|r| {
                    r.ok_or_else(|| {
                        format!(
                            "its record {} is missing",
                            state_dir.join(RECORD_FILE).display()
                        )
                    })
                })
                .and_then(|r| verify(state_dir, &r).map(|()| r));
            match checked {
                Err(why) => {
                    // A daemon that just took the lock writes its record right after.
                    if started.elapsed() < STARTING_GRACE {
                        tokio::time::sleep(POLL).await;
                        continue;
                    }
                    return Err(LockError::Unverified { lock: path, why });
                }
                Ok(r) if !takeover => {
                    return Err(LockError::Held {
                        dir: state_dir.to_owned(),
                        holder: r.describe(),
                    });
                }
                Ok(r) => {
                    let killed = stop_holder(state_dir, &r).await?;
                    outcome = Acquired::TookOver { pid: r.pid, killed };
                }
            }
        };
        let me = std::process::id();
        let id = runtime::procs::identity(me).ok_or_else(|| LockError::Io {
            path: PathBuf::from("/proc/self/stat"),
            error: io::Error::other("cannot read this process's start time"),
        })?;
        let record = Record {
            pid: me,
            start_ticks: id.start_ticks,
            boot_id: id.boot_id,
            exe: std::env::current_exe().map_err(io_err(Path::new("/proc/self/exe")))?,
            argv: runtime::procs::command_line(me).unwrap_or_default(),
            command: command.to_owned(),
            version: runtime::version().to_owned(),
            started_at_unix_ms: protocol::frame::now_unix_ms(),
            status_addr: None,
            mcp_url: None,
            listen: None,
            stopping_in_flight: None,
        };
        let this = Self {
            _lock: lock,
            dir: state_dir.to_owned(),
            record: Lock::new(record),
        };
        this.change(|_| ())?;
        Ok((this, outcome))
    }

    /// This daemon's record.
    pub fn record(&self) -> Record {
        self.record.lock().clone()
    }

    /// Records the status endpoint's address and, when known, the MCP URL, and that the daemon
    /// is serving (not stopping).
    ///
    /// # Errors
    /// The record cannot be written.
    pub fn set_endpoints(
        &self,
        status: Option<SocketAddr>,
        mcp_url: Option<String>,
    ) -> Result<(), LockError> {
        self.change(|r| {
            r.status_addr = status;
            r.mcp_url = mcp_url;
            // Serving again (after a reload's drain): no longer stopping.
            r.stopping_in_flight = None;
        })
    }

    /// Records the address the daemon's relay listens on (`up`), so that a takeover on
    /// another address can check it is free before stopping this daemon.
    ///
    /// # Errors
    /// The record cannot be written.
    pub fn set_listen(&self, listen: SocketAddr) -> Result<(), LockError> {
        self.change(|r| r.listen = Some(listen))
    }

    /// Records that the daemon is stopping with `in_flight` calls still draining (a takeover
    /// reads it as progress).
    ///
    /// # Errors
    /// The record cannot be written.
    pub fn set_stopping(&self, in_flight: usize) -> Result<(), LockError> {
        self.change(|r| r.stopping_in_flight = Some(in_flight))
    }

    fn change(&self, f: impl FnOnce(&mut Record)) -> Result<(), LockError> {
        let mut record = self.record.lock();
        f(&mut record);
        self.write(&record)
    }

    /// Replaces the record file by `record`. Callers hold the record's lock, so one write at a
    /// time uses the temporary file and the last change is the one on disk.
    fn write(&self, record: &Record) -> Result<(), LockError> {
        let path = self.dir.join(RECORD_FILE);
        let tmp = self
            .dir
            .join(format!(".{RECORD_FILE}.{}", std::process::id()));
        let bytes = serde_json::to_vec_pretty(record).unwrap_or_default();
        let write = || -> io::Result<()> {
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            fs::rename(&tmp, &path)
        };
        write().map_err(io_err(&path))
    }
}

impl Drop for InstanceLock {
    fn drop(&mut self) {
        // The record of a daemon that ended cleanly goes with it; the lock file stays (removing
        // a lock file others may be waiting on would let two holders in).
        let _ = fs::remove_file(self.dir.join(RECORD_FILE));
    }
}

/// Stops the verified holder `r`: SIGTERM, then waits for the lock; SIGKILLs its tree after
/// [`NO_PROGRESS_KILL`] without progress or at [`TAKEOVER_WAIT`]. Returns whether it was
/// killed, once the lock is free.
async fn stop_holder(state_dir: &Path, r: &Record) -> Result<bool, LockError> {
    use nix::{sys::signal::Signal, unistd::Pid};
    let path = state_dir.join(LOCK_FILE);
    let pid = Pid::from_raw(i32::try_from(r.pid).unwrap_or(i32::MAX));
    tracing::info!(holder = %r.describe(), "taking over: asking the running daemon to stop (SIGTERM)");
    let _ = nix::sys::signal::kill(pid, Signal::SIGTERM);
    let start = tokio::time::Instant::now();
    let mut last_progress = start;
    let mut last = progress_of(state_dir, r.pid);
    let mut killed = false;
    loop {
        tokio::time::sleep(POLL).await;
        if !is_held(state_dir) {
            return Ok(killed);
        }
        if start.elapsed() >= TAKEOVER_WAIT + NO_PROGRESS_KILL * 2 {
            return Err(LockError::TakeoverFailed(format!(
                "the daemon PID {} did not release {} even after SIGKILL",
                r.pid,
                path.display()
            )));
        }
        // Another takeover won the race: the lock is held by a new, verified daemon.
        if let Some(winner) = read_record(state_dir)
            && winner.pid != r.pid
            && verify(state_dir, &winner).is_ok()
        {
            return Err(LockError::Held {
                dir: state_dir.to_owned(),
                holder: winner.describe(),
            });
        }
        let now = progress_of(state_dir, r.pid);
        if now < last {
            last_progress = tokio::time::Instant::now();
        }
        last = now;
        // A daemon that recorded it is stopping answered the SIGTERM and drains its calls in
        // flight for at most DAEMON_STOP_DRAIN: that is progress until the drain is over.
        let draining = now.0 != usize::MAX && start.elapsed() < DRAIN_ALLOWANCE;
        let stalled = !draining && last_progress.elapsed() >= NO_PROGRESS_KILL;
        if !killed && (stalled || start.elapsed() >= TAKEOVER_WAIT) {
            // Verified again just before: the PID must still be the daemon's.
            if verify(state_dir, r).is_err() {
                continue;
            }
            tracing::warn!(
                pid = r.pid,
                stalled_s = last_progress.elapsed().as_secs(),
                "the running daemon is not stopping; killing its process tree (SIGKILL; managed jobs are left running)"
            );
            let tree = runtime::procs::descendants_except_job_runners(r.pid);
            let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
            for p in tree {
                if let Ok(p) = i32::try_from(p) {
                    let _ = nix::sys::signal::kill(Pid::from_raw(p), Signal::SIGKILL);
                }
            }
            killed = true;
        }
    }
}

/// How long after the SIGTERM a daemon that recorded it is stopping is left to drain: its drain
/// bound and the time to close its link and end its process sessions.
const DRAIN_ALLOWANCE: Duration =
    Duration::from_secs(crate::limits::DAEMON_STOP_DRAIN.as_secs() + 2);

/// A measure that falls while a stopping daemon makes progress: the calls it still drains
/// plus the processes in its tree.
fn progress_of(state_dir: &Path, pid: u32) -> (usize, usize) {
    let draining = read_record(state_dir)
        .filter(|r| r.pid == pid)
        .and_then(|r| r.stopping_in_flight)
        .unwrap_or(usize::MAX);
    (
        draining,
        runtime::procs::descendants_except_job_runners(pid).len(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    // The enrollment code is never repeated in the takeover log, `status` or `doctor`.
    #[test]
    fn the_shown_command_line_hides_the_enrollment_code() {
        let argv: Vec<String> = [
            "machine-mcp",
            "connect",
            "--enroll",
            "mbe_secret",
            "--enroll=mbe_other",
            "-w",
            "a b",
        ]
        .map(str::to_owned)
        .to_vec();
        let shown = shown_command_line(&argv);
        assert_eq!(shown, "machine-mcp connect --enroll … --enroll=… -w 'a b'");
    }

    #[tokio::test]
    async fn a_second_lock_on_one_directory_is_refused_and_a_stale_one_taken() {
        let t = tempfile::tempdir().unwrap();
        let (first, how) = InstanceLock::acquire(t.path(), "connect", false)
            .await
            .unwrap();
        assert_eq!(how, Acquired::Free);
        assert!(is_held(t.path()));
        assert_eq!(read_record(t.path()).unwrap().pid, std::process::id());
        // The holder is this test process, which does not run `connect`: not verifiable.
        let e = InstanceLock::acquire(t.path(), "connect", false)
            .await
            .unwrap_err();
        assert!(matches!(e, LockError::Unverified { .. }), "{e}");
        drop(first);
        assert!(!is_held(t.path()));
        // A record left by a process that is gone.
        let (second, how) = InstanceLock::acquire(t.path(), "connect", false)
            .await
            .unwrap();
        assert_eq!(how, Acquired::Free, "a clean stop removed the record");
        let mut stale = second.record();
        drop(second);
        stale.pid = u32::MAX / 2;
        fs::write(
            t.path().join(RECORD_FILE),
            serde_json::to_vec(&stale).unwrap(),
        )
        .unwrap();
        let (_third, how) = InstanceLock::acquire(t.path(), "connect", false)
            .await
            .unwrap();
        assert_eq!(how, Acquired::Stale(u32::MAX / 2));
    }

    // The status task records endpoints while the link's drain records progress: concurrent
    // writes of one record all succeed and the file ends with the last change.
    #[tokio::test]
    async fn concurrent_changes_of_the_record_all_succeed() {
        let t = tempfile::tempdir().unwrap();
        let (lock, _) = InstanceLock::acquire(t.path(), "connect", false)
            .await
            .unwrap();
        let lock = std::sync::Arc::new(lock);
        let writers: Vec<_> = (0..4)
            .map(|i| {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    for n in 0..100 {
                        if i % 2 == 0 {
                            lock.set_stopping(n)?;
                        } else {
                            lock.set_endpoints(None, Some(format!("u{n}")))?;
                        }
                    }
                    Ok::<_, LockError>(())
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap().unwrap();
        }
        assert_eq!(read_record(t.path()).unwrap(), lock.record());
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(65), "1m 5s");
        assert_eq!(human_duration(3700), "1h 1m");
        assert_eq!(human_duration(90000), "1d 1h");
    }
}
