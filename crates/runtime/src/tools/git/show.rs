//! `git_show`: one commit, its message and its patch.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    Access,
    mcp::{
        context::CallContext,
        error::{ToolError, ToolErrorCode, ToolResult},
    },
    primitives::diff,
};

use super::{
    DIFF_DEFAULT_BYTES, DIFF_MAX_BYTES,
    engine::{self, check_revision},
    os, repo_at,
};

/// Arguments of `git_show`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ShowArgs {
    /// The commit, e.g. "HEAD", "HEAD~2", a hash or a tag.
    revision: String,
    /// Most bytes of patch text (default 262144, at most 4194304).
    #[schemars(range(min = 1, max = DIFF_MAX_BYTES))]
    max_bytes: Option<usize>,
    /// Include the author's e-mail address.
    #[serde(default)]
    include_email: bool,
}

/// Result of `git_show`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ShowOutput {
    /// Full hash.
    commit: String,
    /// Author name.
    author: String,
    /// Author e-mail (only when asked for).
    #[serde(skip_serializing_if = "Option::is_none")]
    email: Option<String>,
    /// Author date, ISO 8601.
    date: String,
    /// The whole commit message.
    message: String,
    /// The commit's patch.
    diff: String,
    /// The patch was cut at max_bytes.
    truncated: bool,
}

pub(super) async fn git_show(
    rt: Arc<Access>,
    args: ShowArgs,
    cx: CallContext,
) -> ToolResult<ShowOutput> {
    check_revision(&args.revision)?;
    let cap = args
        .max_bytes
        .unwrap_or(DIFF_DEFAULT_BYTES)
        .clamp(1, DIFF_MAX_BYTES);
    let (repo, _) = repo_at(&rt, ".", &cx).await?;
    let mut meta = os(&[
        "show",
        "-s",
        "--no-color",
        "--no-show-signature",
        "--format=%H%x1f%an%x1f%ae%x1f%aI%x1f%B",
        "--end-of-options",
    ]);
    meta.push(args.revision.clone().into());
    let m = engine::run_in(&repo, &meta, None, 1024 * 1024, &cx.cancel).await?;
    if !m.ok() {
        return Err(ToolError::new(
            ToolErrorCode::NotFound,
            format!("revision {:?}: {}", args.revision, m.stderr.trim()),
        ));
    }
    let text = crate::primitives::text::lossy(&m.stdout).into_owned();
    let f: Vec<&str> = text.splitn(5, '\x1f').collect();
    if f.len() != 5 {
        // `git show` prints a blob or tree as it is, and nothing for `^REV`.
        return Err(ToolError::invalid(format!(
            "revision {:?} is not a commit (git_show shows one commit; use read_file for a file)",
            args.revision
        )));
    }
    let mut patch = os(&[
        "show",
        "--no-ext-diff",
        "--no-textconv",
        "--no-color",
        "--no-show-signature",
        "--format=",
        "--patch",
        "--end-of-options",
    ]);
    patch.push(args.revision.clone().into());
    let p = engine::run_in(&repo, &patch, None, cap, &cx.cancel).await?;
    if !p.ok() && !p.truncated {
        return Err(p.error("git show"));
    }
    let mut diff_text = crate::primitives::text::lossy(&p.stdout)
        .trim_start_matches('\n')
        .to_owned();
    if p.truncated {
        diff_text = diff::mark_cut(diff_text, cap);
    }
    Ok(ShowOutput {
        commit: f[0].to_owned(),
        author: f[1].to_owned(),
        email: args.include_email.then(|| f[2].to_owned()),
        date: f[3].to_owned(),
        message: f[4].trim_end().to_owned(),
        diff: diff_text,
        truncated: p.truncated,
    })
}
