//! Per-file write locks: the writers of every `machine-mcp` process of this user never
//! interleave on a file.
//!
//! One [`WriteLocks`] table lives in the [`crate::Runtime`], so it covers every MCP session the
//! process serves (stdio, or every session of a daemon). A writing tool holds the locks of the
//! files it writes, keyed by the resolved path, from its read through its commit: the
//! read-modify-write of `edit_file`/`apply_patch` and the `expected_sha256` check of every writer
//! are then one step against the other writers. Two layers: this table (cheap, async, orders
//! the writers of one process) and under it, once a call holds its entries, the [`machine`]
//! locks (`flock` on a per-user lock file, taken with [`WriteGuard::across_processes`]), which
//! order the writers of different processes. Writers that are not `machine-mcp` are not
//! excluded; for them the SHA-256 re-check at commit ([`crate::primitives::write`]) stays the
//! guard.
//!
//! The table is bounded by the calls in flight: an entry exists only while a call holds or
//! waits for its lock and is removed by the last one to leave. Waiting is async (a Tokio
//! mutex per path), so a waiting call holds no thread and can be cancelled. A call taking
//! several locks takes them in sorted path order, so two calls can never wait on each other.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::Arc,
};

use lock::Lock;

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

pub(crate) mod machine;

pub(crate) use machine::{LockError, MACHINE_LOCK_WAIT, MachineGuard, MachineLocks};

/// The per-path lock table of one runtime, and its machine-wide locks.
#[derive(Debug, Default)]
pub(crate) struct WriteLocks {
    table: Lock<HashMap<PathBuf, Slot>>,
    machine: MachineLocks,
}

/// One path's lock and the number of [`Entry`]s (holders and waiters) using it.
#[derive(Debug, Default)]
struct Slot {
    mutex: Arc<AsyncMutex<()>>,
    users: usize,
}

/// The write locks of one call; dropping it releases them.
#[derive(Debug)]
#[must_use = "the locks are released when the guard is dropped"]
pub(crate) struct WriteGuard {
    entries: Vec<Entry>,
}

/// One path's use of the table, from taking its entry (before waiting) to dropping it.
#[derive(Debug)]
struct Entry {
    locks: Arc<WriteLocks>,
    path: PathBuf,
    held: Option<OwnedMutexGuard<()>>,
}

impl WriteLocks {
    /// Waits until this call holds the lock of every path in `paths` (resolved paths; duplicates
    /// are taken once), taking them in sorted order. Cancel-safe: dropping the future releases
    /// what it took and leaves no entry behind.
    pub(crate) async fn lock(
        self: &Arc<Self>,
        paths: impl IntoIterator<Item = PathBuf>,
    ) -> WriteGuard {
        let mut paths: Vec<PathBuf> = paths.into_iter().collect();
        paths.sort();
        paths.dedup();
        let mut guard = WriteGuard {
            entries: Vec::with_capacity(paths.len()),
        };
        for path in paths {
            let mutex = self.enter(&path);
            // Pushed before waiting, so a cancelled wait still leaves the table.
            guard.entries.push(Entry {
                locks: self.clone(),
                path,
                held: None,
            });
            let held = mutex.lock_owned().await;
            if let Some(e) = guard.entries.last_mut() {
                e.held = Some(held);
            }
        }
        guard
    }

    /// Paths with an entry (held or waited for).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.table.lock().len()
    }

    fn enter(&self, path: &Path) -> Arc<AsyncMutex<()>> {
        let mut table = self.table.lock();
        let slot = table.entry(path.to_owned()).or_default();
        slot.users += 1;
        slot.mutex.clone()
    }

    fn leave(&self, path: &Path) {
        let mut table = self.table.lock();
        if let Some(slot) = table.get_mut(path) {
            slot.users -= 1;
            if slot.users == 0 {
                table.remove(path);
            }
        }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.held.take();
        self.locks.leave(&self.path);
    }
}

impl WriteGuard {
    /// Takes the machine-wide locks of the paths this guard holds, in sorted order, waiting up
    /// to [`MACHINE_LOCK_WAIT`] for locks other `machine-mcp` processes hold. Blocks the
    /// thread while it waits: call it off the async threads, after the in-process locks.
    ///
    /// # Errors
    /// [`LockError::Busy`] when another process held a lock for the whole wait;
    /// [`LockError::Dir`] or [`LockError::Io`] when the lock files cannot be made or locked.
    pub(crate) fn across_processes(&self) -> Result<MachineGuard, LockError> {
        let paths: Vec<PathBuf> = self.entries.iter().map(|e| e.path.clone()).collect();
        match self.entries.first() {
            Some(e) => e.locks.machine.lock(&paths, MACHINE_LOCK_WAIT),
            None => Ok(MachineGuard::default()),
        }
    }

    /// Whether this guard holds the lock of `path`.
    pub(crate) fn holds(&self, path: &Path) -> bool {
        self.entries
            .iter()
            .any(|e| e.held.is_some() && e.path == path)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    #[tokio::test]
    async fn a_held_path_makes_others_wait_and_the_table_empties_after() {
        let locks = Arc::new(WriteLocks::default());
        let first = locks.lock([p("/w/a")]).await;
        assert!(first.holds(&p("/w/a")));
        // A waiter that gives up (a cancelled call) leaves no entry behind.
        let waited = tokio::time::timeout(Duration::ZERO, locks.lock([p("/w/a")])).await;
        assert!(waited.is_err(), "the second writer had to wait");
        let other = locks.lock([p("/w/b")]).await;
        assert_eq!(locks.len(), 2);
        drop(first);
        let second = locks.lock([p("/w/a"), p("/w/a")]).await;
        assert!(second.holds(&p("/w/a")));
        drop((second, other));
        assert_eq!(locks.len(), 0, "unused entries are removed");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn opposite_orders_never_deadlock() {
        let locks = Arc::new(WriteLocks::default());
        let tasks: Vec<_> = (0..64)
            .map(|i| {
                let locks = locks.clone();
                tokio::spawn(async move {
                    let paths = if i % 2 == 0 {
                        [p("/w/a"), p("/w/b")]
                    } else {
                        [p("/w/b"), p("/w/a")]
                    };
                    let g = locks.lock(paths).await;
                    tokio::task::yield_now().await;
                    drop(g);
                })
            })
            .collect();
        let all = async {
            for t in tasks {
                t.await.unwrap();
            }
        };
        tokio::time::timeout(Duration::from_secs(10), all)
            .await
            .expect("no deadlock");
        assert_eq!(locks.len(), 0);
    }
}
