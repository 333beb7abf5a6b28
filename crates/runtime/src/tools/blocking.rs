//! How handlers run blocking filesystem work: off the async threads, and for writers under the
//! files' write locks.

use std::path::PathBuf;

use crate::{
    Access,
    call::error::{ToolError, ToolErrorCode, ToolResult},
    primitives::write_lock::{LockError, WriteGuard},
};

/// Runs blocking filesystem work off the async threads.
pub(crate) async fn blocking<T, F>(f: F) -> ToolResult<T>
where
    F: FnOnce() -> ToolResult<T> + Send + 'static,
    T: Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Err(ToolError::cancelled()),
    }
}

/// Runs blocking work that writes the files at `paths` (resolved paths) while holding their
/// write locks ([`crate::primitives::write_lock`]): no other writer of this runtime, nor of any
/// other `machine-mcp` process of this user, touches them between what `f` reads and what it
/// commits. The runtime's locks are awaited without holding a thread; the machine-wide ones are
/// then taken on the blocking thread, waiting at most
/// [`MACHINE_LOCK_WAIT`](crate::primitives::write_lock::MACHINE_LOCK_WAIT). Once `f` runs they
/// are held until it returns, even if the call is cancelled meanwhile.
///
/// # Errors
/// What `f` returns; before `f` runs: a retryable `conflict` when another process held a lock
/// for the whole wait, `unavailable` when the lock files cannot be made (nothing is changed).
pub(crate) async fn blocking_locked<T, F>(rt: &Access, paths: Vec<PathBuf>, f: F) -> ToolResult<T>
where
    F: FnOnce(&WriteGuard) -> ToolResult<T> + Send + 'static,
    T: Send + 'static,
{
    let guard = rt.write_locks().lock(paths).await;
    let ws = rt.workspace().clone();
    blocking(move || {
        let _across = guard.across_processes().map_err(|e| match e {
            LockError::Busy { path, waited } => {
                let display = ws.display(&path);
                ToolError::conflict(format!(
                    "{display}: another machine-mcp process held its write lock for {} s; nothing was changed, try again",
                    waited.as_secs()
                ))
                .detail("path", display)
                .retryable()
            }
            other => ToolError::new(
                ToolErrorCode::Unavailable,
                format!("{other}; nothing was changed"),
            ),
        })?;
        f(&guard)
    })
    .await
}
