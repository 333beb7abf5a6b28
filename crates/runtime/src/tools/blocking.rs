//! How handlers run blocking filesystem work: off the async threads, and for writers under the
//! files' write locks.

use std::path::PathBuf;

use crate::{
    Access,
    call::error::{ToolError, ToolResult},
    primitives::write_lock::WriteGuard,
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
/// write locks ([`crate::primitives::write_lock`]): no other writer of this runtime touches them
/// between what `f` reads and what it commits. The locks are awaited without holding a thread;
/// once `f` runs they are held until it returns, even if the call is cancelled meanwhile.
pub(crate) async fn blocking_locked<T, F>(rt: &Access, paths: Vec<PathBuf>, f: F) -> ToolResult<T>
where
    F: FnOnce(&WriteGuard) -> ToolResult<T> + Send + 'static,
    T: Send + 'static,
{
    let guard = rt.write_locks().lock(paths).await;
    blocking(move || f(&guard)).await
}
