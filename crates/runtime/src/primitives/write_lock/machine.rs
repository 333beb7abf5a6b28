//! Machine-wide write locks: the writers of every `machine-mcp` process of this user never
//! interleave on a file.
//!
//! Two servers on one workspace (two hosts open on one repository, a stdio server beside the
//! daemon of `up` or `connect`) each serialize their own writers ([`super::WriteLocks`]); this
//! module serializes them against each other. The lock of a file is an exclusive `flock(2)` on a
//! lock file named by the SHA-256 of the file's resolved path, in a per-user directory
//! ([`lock_dir`]). The kernel releases a `flock` when its holder dies, however it ends, so a
//! crashed server never leaves a file locked.
//!
//! Rules:
//! - A writer takes these locks after its in-process ones, in sorted path order (so two
//!   processes can never wait on each other), and holds them from its read through its commit.
//! - Waiting is bounded: past [`MACHINE_LOCK_WAIT`] the write is refused ([`LockError::Busy`],
//!   a retryable `conflict` for the caller) and nothing is changed.
//! - A lock file exists only while it is held: the holder removes it before it releases the lock,
//!   and a process that locked a file no longer at that name (removed meanwhile) opens the name
//!   again. The directory holds the files of writes in progress, plus those of crashed holders
//!   (each removed by the next writer of its file).
//! - Processes that see different `XDG_RUNTIME_DIR` (or, without one, different `TMPDIR`) use
//!   different directories and do not exclude each other; writers that are not `machine-mcp`
//!   take no lock, and for them the SHA-256 re-check at commit stays the guard.

use std::{
    fs::{self, File},
    io,
    os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt},
    path::{Path, PathBuf},
    time::Duration,
};

use lock::Lock;
use nix::{errno::Errno, fcntl::Flock};
use sha2::{Digest, Sha256};

/// How long a writer waits for another process's lock of a file before refusing the write.
pub(crate) const MACHINE_LOCK_WAIT: Duration = Duration::from_secs(10);

/// The first pause between two tries of a busy lock; each pause doubles up to
/// [`MAX_PAUSE`]. Another writer holds a lock for one read-modify-write (milliseconds).
const FIRST_PAUSE: Duration = Duration::from_micros(200);

/// The longest pause between two tries of a busy lock.
const MAX_PAUSE: Duration = Duration::from_millis(5);

/// Why a machine-wide lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LockError {
    /// Another process held the lock of `path` for the whole wait.
    #[error("another machine-mcp process held the write lock of {} for {waited:?}", path.display())]
    Busy {
        /// The file whose lock was busy (its resolved path).
        path: PathBuf,
        /// How long this writer waited.
        waited: Duration,
    },
    /// The lock directory cannot be created or is not this user's own.
    #[error("the write lock directory {}: {source}", dir.display())]
    Dir {
        /// The directory.
        dir: PathBuf,
        /// What failed.
        source: io::Error,
    },
    /// A lock file cannot be opened or locked.
    #[error("the write lock of {}: {source}", path.display())]
    Io {
        /// The file whose lock failed (its resolved path).
        path: PathBuf,
        /// What failed.
        source: io::Error,
    },
}

/// The machine-wide locks of one process: where the lock files are, and whether that directory
/// was made ready.
#[derive(Debug)]
pub(crate) struct MachineLocks {
    dir: PathBuf,
    /// Set once the directory was created and checked; cleared when it turns out to be gone.
    ready: Lock<bool>,
}

impl Default for MachineLocks {
    /// The directory of this user's processes ([`lock_dir`]).
    fn default() -> Self {
        Self::in_dir(lock_dir())
    }
}

/// The locks of one write, taken in sorted path order; dropping it releases them.
#[derive(Debug, Default)]
#[must_use = "the locks are released when the guard is dropped"]
pub(crate) struct MachineGuard {
    held: Vec<Held>,
}

/// One held lock: the lock file's name and its locked descriptor.
#[derive(Debug)]
struct Held {
    file: PathBuf,
    lock: Option<Flock<File>>,
}

impl Drop for Held {
    fn drop(&mut self) {
        // Removed while still held, so nobody can lock a name about to disappear unnoticed.
        let _ = fs::remove_file(&self.file);
        drop(self.lock.take());
    }
}

/// The per-user directory of lock files: `$XDG_RUNTIME_DIR/machine-mcp/locks`, else
/// `/run/user/UID/machine-mcp/locks` when that runtime directory exists, else
/// `TMPDIR/machine-mcp-UID/locks` (the base the supervisors' registry uses too).
fn lock_dir() -> PathBuf {
    let uid = nix::unistd::geteuid();
    let runtime = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute() && p.is_dir())
        .or_else(|| Some(PathBuf::from(format!("/run/user/{uid}"))).filter(|p| p.is_dir()));
    let base = match runtime {
        Some(r) => r.join("machine-mcp"),
        None => std::env::temp_dir().join(format!("machine-mcp-{uid}")),
    };
    base.join("locks")
}

impl MachineLocks {
    /// Locks kept in `dir` (created when first needed).
    pub(crate) fn in_dir(dir: PathBuf) -> Self {
        Self {
            dir,
            ready: Lock::new(false),
        }
    }

    /// Takes the lock of every path in `paths` (resolved paths, taken once each in sorted
    /// order), waiting at most `wait` in all for locks other processes hold. Blocks the thread
    /// while it waits.
    ///
    /// # Errors
    /// [`LockError::Busy`] when a lock stayed held for the whole wait (what was taken is
    /// released); [`LockError::Dir`] or [`LockError::Io`] when the lock directory or a lock file
    /// cannot be made or locked.
    pub(crate) fn lock(
        &self,
        paths: &[PathBuf],
        wait: Duration,
    ) -> Result<MachineGuard, LockError> {
        let mut sorted: Vec<&PathBuf> = paths.iter().collect();
        sorted.sort();
        sorted.dedup();
        let mut guard = MachineGuard {
            held: Vec::with_capacity(sorted.len()),
        };
        let mut waited = Duration::ZERO;
        for path in sorted {
            guard.held.push(self.take(path, wait, &mut waited)?);
        }
        Ok(guard)
    }

    /// Takes one file's lock; `waited` is what this write has waited so far.
    fn take(&self, path: &Path, wait: Duration, waited: &mut Duration) -> Result<Held, LockError> {
        self.prepare()?;
        let file = self.dir.join(lock_name(path));
        let io_err = |source| LockError::Io {
            path: path.to_owned(),
            source,
        };
        let mut pause = FIRST_PAUSE;
        let mut recreated = false;
        loop {
            let opened = match open_lock_file(&file) {
                Ok(f) => f,
                // The directory was removed (a cleaner of old temporary files): make it again.
                Err(e) if e.kind() == io::ErrorKind::NotFound && !recreated => {
                    recreated = true;
                    self.forget_ready();
                    self.prepare()?;
                    continue;
                }
                Err(e) => return Err(io_err(e)),
            };
            match Flock::lock(opened, nix::fcntl::FlockArg::LockExclusiveNonblock) {
                Ok(lock) => {
                    if still_named(&lock, &file).map_err(io_err)? {
                        return Ok(Held {
                            file,
                            lock: Some(lock),
                        });
                    }
                    // Its holder removed it before releasing it: lock the name again.
                }
                Err((_, Errno::EWOULDBLOCK)) => {
                    if *waited >= wait {
                        return Err(LockError::Busy {
                            path: path.to_owned(),
                            waited: *waited,
                        });
                    }
                    let step = pause.min(wait - *waited);
                    std::thread::sleep(step);
                    *waited += step;
                    pause = (pause * 2).min(MAX_PAUSE);
                }
                Err((_, Errno::EINTR)) => {}
                Err((_, e)) => return Err(io_err(io::Error::from(e))),
            }
        }
    }

    /// Creates the lock directory and checks it once.
    fn prepare(&self) -> Result<(), LockError> {
        let mut ready = self.ready.lock();
        if !*ready {
            let dir_err = |source| LockError::Dir {
                dir: self.dir.clone(),
                source,
            };
            if let Some(base) = self.dir.parent() {
                own_dir(base).map_err(dir_err)?;
            }
            own_dir(&self.dir).map_err(dir_err)?;
            *ready = true;
        }
        Ok(())
    }

    fn forget_ready(&self) {
        *self.ready.lock() = false;
    }
}

impl MachineGuard {
    /// How many locks this guard holds.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.held.len()
    }
}

/// The lock file's name of a resolved path: the hex SHA-256 of its bytes.
fn lock_name(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    format!(
        "{}.lock",
        hex::encode(Sha256::digest(path.as_os_str().as_bytes()))
    )
}

/// Opens (creating, 0600) a lock file; a link in its place is refused.
fn open_lock_file(file: &Path) -> io::Result<File> {
    fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(file)
}

/// Whether the locked descriptor is still the file at `file` (its holder removes it before
/// releasing, so a waiter may lock a file no longer named).
fn still_named(lock: &Flock<File>, file: &Path) -> io::Result<bool> {
    let held = lock.metadata()?;
    match fs::symlink_metadata(file) {
        Ok(now) => Ok(now.dev() == held.dev() && now.ino() == held.ino()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Makes `dir` (0700) unless it exists, then checks that it is a directory of this user that no
/// other user can write (a shared temporary directory may hold a name planted by another).
fn own_dir(dir: &Path) -> io::Result<()> {
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = fs::symlink_metadata(dir)?;
    if !meta.is_dir() || meta.uid() != nix::unistd::geteuid().as_raw() || meta.mode() & 0o022 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "not a directory of this user only (remove it)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    #[test]
    fn a_held_lock_makes_another_process_wait_then_refuses_and_is_free_after_release() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("base/locks");
        // Two tables stand for two processes: `flock` excludes open file descriptions, so two
        // opens in one process exclude each other as two processes do.
        let a = MachineLocks::in_dir(dir.clone());
        let b = MachineLocks::in_dir(dir.clone());
        let held = a.lock(&[p("/w/f"), p("/w/f")], MACHINE_LOCK_WAIT).unwrap();
        assert_eq!(held.len(), 1, "a path is locked once");
        match b.lock(&[p("/w/f")], Duration::from_millis(20)) {
            Err(LockError::Busy { path, waited }) => {
                assert_eq!(path, p("/w/f"));
                assert_eq!(waited, Duration::from_millis(20));
            }
            other => panic!("expected Busy, got {other:?}"),
        }
        let other = b.lock(&[p("/w/g")], Duration::ZERO).unwrap();
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 2);
        drop((held, other));
        assert_eq!(
            fs::read_dir(&dir).unwrap().count(),
            0,
            "a released lock leaves no file"
        );
        let again = b.lock(&[p("/w/f")], Duration::ZERO).unwrap();
        assert_eq!(again.len(), 1);
        assert_eq!(
            fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
    }

    #[test]
    fn a_waiter_that_locked_a_removed_file_locks_the_name_again() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("locks");
        let a = MachineLocks::in_dir(dir.clone());
        let b = MachineLocks::in_dir(dir.clone());
        let held = a.lock(&[p("/w/f")], MACHINE_LOCK_WAIT).unwrap();
        let waiter = std::thread::spawn(move || b.lock(&[p("/w/f")], MACHINE_LOCK_WAIT));
        drop(held);
        let taken = waiter.join().unwrap().unwrap();
        // The waiter holds the file now at the name, so a third writer must wait.
        assert!(matches!(
            a.lock(&[p("/w/f")], Duration::ZERO),
            Err(LockError::Busy { .. })
        ));
        drop(taken);
        assert!(a.lock(&[p("/w/f")], Duration::ZERO).is_ok());
    }

    #[test]
    fn opposite_orders_across_processes_never_deadlock() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("locks");
        let workers: Vec<_> = (0..8)
            .map(|i| {
                let locks = MachineLocks::in_dir(dir.clone());
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        let paths = if i % 2 == 0 {
                            [p("/w/a"), p("/w/b")]
                        } else {
                            [p("/w/b"), p("/w/a")]
                        };
                        let g = locks.lock(&paths, MACHINE_LOCK_WAIT).expect("no deadlock");
                        drop(g);
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
    }

    #[test]
    fn a_lock_directory_of_another_shape_or_writable_by_others_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let open = t.path().join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
        let locks = MachineLocks::in_dir(open.join("locks"));
        assert!(matches!(
            locks.lock(&[p("/w/f")], Duration::ZERO),
            Err(LockError::Dir { .. })
        ));
        let elsewhere = t.path().join("elsewhere");
        fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, t.path().join("link")).unwrap();
        let locks = MachineLocks::in_dir(t.path().join("link/locks"));
        assert!(matches!(
            locks.lock(&[p("/w/f")], Duration::ZERO),
            Err(LockError::Dir { .. })
        ));
    }

    #[test]
    fn a_removed_directory_is_made_again() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("base/locks");
        let locks = MachineLocks::in_dir(dir.clone());
        drop(locks.lock(&[p("/w/f")], Duration::ZERO).unwrap());
        fs::remove_dir_all(t.path().join("base")).unwrap();
        drop(locks.lock(&[p("/w/f")], Duration::ZERO).unwrap());
        assert!(dir.is_dir());
    }
}
