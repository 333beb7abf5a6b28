//! The repository facts of a project root: branch, head commit and how many paths are dirty.
//! Every git invocation goes through the git family's engine (a clean environment, only the
//! repository's configuration, no helpers, no fetch, bounded output, a timeout).

use std::{ffi::OsString, path::Path};

use schemars::JsonSchema;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::{call::error::ToolErrorCode, path::Workspace, tools::git::engine};

use super::one_line;

/// Bytes of `git status` output read to count dirty paths; past it the count is a lower bound.
const STATUS_MAX_BYTES: usize = 4 * 1024 * 1024;
/// Longest commit subject shown, in bytes.
const SUBJECT_MAX_BYTES: usize = 200;

/// What the repository of a project root says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub(crate) struct RepoFacts {
    /// The current branch; absent when HEAD is detached.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) branch: Option<String>,
    /// HEAD's abbreviated commit hash; absent before the first commit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) head: Option<String>,
    /// The subject line of HEAD's message (at most 200 bytes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) subject: Option<String>,
    /// Changed, unmerged and untracked paths (`git status`; ignored files not counted).
    pub(crate) dirty: u64,
    /// `dirty` counts every path; false when git's listing was too long to read whole (then
    /// `dirty` is a lower bound).
    pub(crate) dirty_complete: bool,
}

impl RepoFacts {
    /// `branch main, head abc1234 "subject", 3 dirty paths` for a text.
    pub(crate) fn line(&self) -> String {
        let branch = self
            .branch
            .as_deref()
            .map_or_else(|| "HEAD detached".to_owned(), |b| format!("branch {b}"));
        let head = match (&self.head, &self.subject) {
            (Some(h), Some(s)) => format!("head {h} {s:?}"),
            (Some(h), None) => format!("head {h}"),
            _ => "no commits yet".to_owned(),
        };
        let dirty = match (self.dirty, self.dirty_complete) {
            (0, true) => "clean".to_owned(),
            (n, true) => format!("{n} dirty {}", if n == 1 { "path" } else { "paths" }),
            (n, false) => format!("at least {n} dirty paths"),
        };
        format!("{branch}, {head}, {dirty}")
    }
}

/// The facts of the repository whose work tree is `root` (canonical): `Ok(None)` when `root`
/// has no `.git` or its repository is not the caller's to read (a confined caller and a work
/// tree or git directory outside the workspace).
///
/// # Errors
/// A one-line message when git could not answer (not installed, timed out, failed).
pub(crate) async fn facts(
    ws: &Workspace,
    root: &Path,
    cancel: &CancellationToken,
) -> Result<Option<RepoFacts>, String> {
    if root.join(".git").symlink_metadata().is_err() {
        return Ok(None);
    }
    let repo = match engine::discover(ws, root, cancel).await {
        Ok(r) => r,
        Err(e)
            if matches!(
                e.code(),
                ToolErrorCode::NotFound | ToolErrorCode::PathBoundary
            ) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(e.message().to_owned()),
    };
    let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
    let status = engine::run_in(
        &repo,
        &args(&engine::STATUS_PORCELAIN_ARGS),
        None,
        STATUS_MAX_BYTES,
        cancel,
    )
    .await
    .map_err(|e| e.message().to_owned())?;
    if !status.truncated && !status.ok() {
        return Err(format!("git status failed: {}", status.stderr.trim()));
    }
    let (branch, dirty) = count_status(&status.stdout);
    let log = engine::run_in(
        &repo,
        &args(&["log", "-1", "--format=%h%x00%s"]),
        None,
        4096,
        cancel,
    )
    .await
    .map_err(|e| e.message().to_owned())?;
    let (head, subject) = if log.ok() {
        let text = crate::primitives::text::lossy(&log.stdout);
        let t = text.trim_end_matches('\n');
        let (h, s) = t.split_once('\0').unwrap_or((t, ""));
        (
            Some(one_line(h, 64)).filter(|h| !h.is_empty()),
            Some(one_line(s, SUBJECT_MAX_BYTES)).filter(|s| !s.is_empty()),
        )
    } else {
        (None, None)
    };
    Ok(Some(RepoFacts {
        branch,
        head,
        subject,
        dirty,
        dirty_complete: !status.truncated,
    }))
}

/// The branch (`None` when detached) and the number of path entries of
/// `git status --porcelain=v2 --branch -z` output.
fn count_status(bytes: &[u8]) -> (Option<String>, u64) {
    let text = crate::primitives::text::lossy(bytes);
    let mut records = text.split('\0').filter(|r| !r.is_empty());
    let mut branch = None;
    let mut dirty = 0;
    while let Some(r) = records.next() {
        if let Some(v) = r.strip_prefix("# branch.head ") {
            branch = (v != "(detached)").then(|| one_line(v, 256));
        } else if r.starts_with("2 ") {
            // A rename or copy: its original path is the next record.
            records.next();
            dirty += 1;
        } else if r.starts_with("1 ") || r.starts_with("u ") || r.starts_with("? ") {
            dirty += 1;
        }
    }
    (branch, dirty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_records_are_counted_once_each() {
        let out = b"# branch.oid abc\0# branch.head main\0\
1 .M N... 100644 100644 100644 a b src/x.rs\0\
2 R. N... 100644 100644 100644 a b R100 new.rs\0old.rs\0\
u UU N... 1 2 3 4 a b c conflict.rs\0\
? untracked.txt\0";
        assert_eq!(count_status(out), (Some("main".to_owned()), 4));
        assert_eq!(count_status(b"# branch.head (detached)\0"), (None, 0));
    }
}
