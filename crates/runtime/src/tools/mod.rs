//! Tool handlers, one module per tool family. Each module's `specs()` lists its catalog entries.

use crate::{
    catalog::ToolSpec,
    error::{ToolError, ToolResult},
};

mod edit;
mod fs;
mod info;
mod patch;
mod search;

/// Every tool, in listing order.
pub(crate) fn all() -> Vec<ToolSpec> {
    let mut v = Vec::new();
    v.extend(info::specs());
    v.extend(fs::specs());
    v.extend(search::specs());
    v.extend(edit::specs());
    v.extend(patch::specs());
    v
}

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
