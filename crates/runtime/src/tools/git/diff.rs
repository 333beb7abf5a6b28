//! `git_diff`: the unified diff of the work tree or the index, and its `--numstat` file list.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    Access,
    mcp::{context::CallContext, error::ToolResult},
    primitives::diff,
};

use super::{
    DIFF_DEFAULT_BYTES, DIFF_MAX_BYTES, dot,
    engine::{self, pathspec},
    os, repo_at,
};

/// Largest `context_lines` of `git_diff`.
const CONTEXT_LINES_MAX: u32 = 100;

/// Arguments of `git_diff`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DiffArgs {
    /// Only changes under this path (default: the whole repository of the workspace).
    #[serde(default = "dot")]
    path: String,
    /// Diff the index against HEAD instead of the work tree against the index.
    #[serde(default)]
    staged: bool,
    /// Lines of context (default 3, at most 100).
    #[schemars(range(min = 0, max = CONTEXT_LINES_MAX))]
    context_lines: Option<u32>,
    /// Most bytes of diff text (default 262144, at most 4194304).
    #[schemars(range(min = 1, max = DIFF_MAX_BYTES))]
    max_bytes: Option<usize>,
}

/// A file in a diff.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct DiffFile {
    /// The path.
    path: String,
    /// Lines added (null for binary files).
    added: Option<u64>,
    /// Lines deleted (null for binary files).
    deleted: Option<u64>,
}

/// Result of `git_diff`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct DiffOutput {
    /// Files changed with line counts.
    files: Vec<DiffFile>,
    /// The unified diff.
    diff: String,
    /// The diff was cut at max_bytes.
    truncated: bool,
}

pub(super) async fn git_diff(
    rt: Arc<Access>,
    args: DiffArgs,
    cx: CallContext,
) -> ToolResult<DiffOutput> {
    let (repo, target) = repo_at(&rt, &args.path, &cx).await?;
    let ctx = args.context_lines.unwrap_or(3).min(CONTEXT_LINES_MAX);
    let cap = args
        .max_bytes
        .unwrap_or(DIFF_DEFAULT_BYTES)
        .clamp(1, DIFF_MAX_BYTES);
    let spec = pathspec(&repo, &target)?;
    let mut base = os(&[
        "diff",
        "--no-ext-diff",
        "--no-textconv",
        "--no-color",
        "--ignore-submodules=all",
    ]);
    if args.staged {
        base.push("--cached".into());
    }
    let mut patch = base.clone();
    patch.push(format!("-U{ctx}").into());
    patch.extend(["--".into(), spec.clone()]);
    let out = engine::run_in(&repo, &patch, None, cap, &cx.cancel).await?;
    if !out.ok() && !out.truncated {
        return Err(out.error("git diff"));
    }
    let mut numstat = base;
    numstat.extend(["--numstat".into(), "-z".into(), "--".into(), spec]);
    let ns = engine::run_in(&repo, &numstat, None, 4 * 1024 * 1024, &cx.cancel).await?;
    let ws = rt.workspace();
    let files = parse_numstat(&ns.stdout)
        .into_iter()
        .map(|(a, d, p)| DiffFile {
            path: ws.display(&repo.worktree.join(p)),
            added: a,
            deleted: d,
        })
        .collect();
    let mut text = crate::primitives::text::lossy(&out.stdout).into_owned();
    if out.truncated {
        text = diff::mark_cut(text, cap);
    }
    Ok(DiffOutput {
        files,
        diff: text,
        truncated: out.truncated,
    })
}

/// Parses `--numstat -z`: `added\tdeleted\tpath\0`, or for renames `added\tdeleted\t\0old\0new\0`.
fn parse_numstat(bytes: &[u8]) -> Vec<(Option<u64>, Option<u64>, String)> {
    let text = crate::primitives::text::lossy(bytes);
    let mut recs = text.split('\0');
    let mut out = Vec::new();
    while let Some(r) = recs.next() {
        if r.is_empty() {
            continue;
        }
        let mut f = r.splitn(3, '\t');
        let a = f.next().and_then(|v| v.parse().ok());
        let d = f.next().and_then(|v| v.parse().ok());
        let p = f.next().unwrap_or("");
        let path = if p.is_empty() {
            let _old = recs.next();
            recs.next().unwrap_or("").to_owned()
        } else {
            p.to_owned()
        };
        out.push((a, d, path));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numstat_with_renames() {
        let v = parse_numstat(b"1\t2\ta.txt\0-\t-\tbin.dat\0" as &[u8]);
        assert_eq!(
            v,
            vec![
                (Some(1), Some(2), "a.txt".into()),
                (None, None, "bin.dat".into())
            ]
        );
        let v = parse_numstat(b"3\t0\t\0old.rs\0new.rs\0" as &[u8]);
        assert_eq!(v, vec![(Some(3), Some(0), "new.rs".into())]);
    }
}
