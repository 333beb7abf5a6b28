//! Tool handlers, one module per tool family. Each module's `specs()` lists its catalog entries.

use std::path::Path;

use crate::{
    Access,
    catalog::ToolSpec,
    error::{ToolError, ToolErrorCode, ToolResult},
    policy::Capability,
};

mod edit;
mod fs;
mod git;
mod info;
mod patch;
mod process;
mod search;
mod session;

/// Every tool, in listing order.
pub(crate) fn all() -> Vec<ToolSpec> {
    let mut v = Vec::new();
    v.extend(info::specs());
    v.extend(fs::specs());
    v.extend(search::specs());
    v.extend(edit::specs());
    v.extend(patch::specs());
    v.extend(process::specs());
    v.extend(session::specs());
    v.extend(git::specs());
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

/// Refuses a write inside a `.git` directory when the policy allows no processes: git reads its
/// configuration and hooks from there, so such a write could make a later git tool call run a
/// program (fsmonitor, filters, hooks) — an exec the policy forbids.
pub(crate) fn guard_git_internals(rt: &Access, real: &Path, display: &str) -> ToolResult<()> {
    if rt.policy().allows(Capability::ExecDirect) {
        return Ok(());
    }
    // Any case: on a case-insensitive file system ".GIT" is the git directory.
    let in_git = real.components().any(|c| {
        c.as_os_str()
            .to_str()
            .is_some_and(|n| n.eq_ignore_ascii_case(".git"))
    });
    if in_git {
        return Err(ToolError::new(
            ToolErrorCode::PolicyDenied,
            format!(
                "{display}: writing inside a .git directory needs an exec mode (direct or shell); \
                 the {} policy has none",
                rt.policy().name()
            ),
        ));
    }
    Ok(())
}
