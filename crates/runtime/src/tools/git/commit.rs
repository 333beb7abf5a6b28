//! `git_commit`: commit what is staged, never staging, amending, signing or running hooks.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    Access,
    call::{
        context::CallContext,
        error::{ToolError, ToolResult},
        text::TextView,
    },
};

use super::{dot, engine, os, repo_at};

/// Largest commit message.
const MESSAGE_MAX_BYTES: usize = 64 * 1024;

/// Arguments of `git_commit`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CommitArgs {
    /// The commit message (first line = subject).
    message: String,
    /// Commit even when nothing is staged.
    #[serde(default)]
    allow_empty: bool,
    /// A path inside the repository (default ".").
    #[serde(default = "dot")]
    path: String,
}

/// Result of `git_commit`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct CommitOutput {
    /// The new commit's hash.
    commit: String,
    /// Its subject line.
    subject: String,
    /// The branch it was made on (null when detached).
    branch: Option<String>,
}

impl TextView for CommitOutput {
    fn summary(&self) -> String {
        format!(
            "git_commit: {} on {}: {}",
            self.commit,
            self.branch.as_deref().unwrap_or("a detached HEAD"),
            self.subject
        )
    }
}

pub(super) async fn git_commit(
    rt: Arc<Access>,
    args: CommitArgs,
    cx: CallContext,
) -> ToolResult<CommitOutput> {
    if args.message.trim().is_empty() {
        return Err(ToolError::invalid("message is empty"));
    }
    if args.message.len() > MESSAGE_MAX_BYTES || args.message.contains('\0') {
        return Err(ToolError::invalid(format!(
            "message must be at most {MESSAGE_MAX_BYTES} bytes without NUL"
        )));
    }
    let (repo, _) = repo_at(&rt, &args.path, &cx).await?;
    if let Some(op) = engine::operation_in_progress(&repo) {
        return Err(ToolError::conflict(format!(
            "{op} is in progress in this repository; finish or abort it before committing"
        )));
    }
    if !args.allow_empty {
        let staged = engine::run_in(
            &repo,
            &os(&[
                "diff",
                "--cached",
                "--quiet",
                "--no-ext-diff",
                "--no-textconv",
                "--ignore-submodules=all",
            ]),
            None,
            1024,
            &cx.cancel,
        )
        .await?;
        match staged.code {
            Some(1) => {}
            Some(0) => {
                return Err(ToolError::conflict(
                    "nothing is staged; stage changes first (git add) or set allow_empty",
                ));
            }
            _ => return Err(staged.error("checking the index")),
        }
    }
    let mut a = os(&[
        "commit",
        "--no-verify",
        "--no-gpg-sign",
        "--cleanup=strip",
        "--file=-",
        "--quiet",
    ]);
    if args.allow_empty {
        a.push("--allow-empty".into());
    }
    let out = engine::run_in(
        &repo,
        &a,
        Some(args.message.as_bytes()),
        64 * 1024,
        &cx.cancel,
    )
    .await?;
    if !out.ok() {
        return Err(out.error("git commit").with_side_effects());
    }
    let head = engine::run_in(&repo, &os(&["rev-parse", "HEAD"]), None, 1024, &cx.cancel).await?;
    let br = engine::run_in(
        &repo,
        &os(&["symbolic-ref", "--short", "-q", "HEAD"]),
        None,
        1024,
        &cx.cancel,
    )
    .await?;
    Ok(CommitOutput {
        commit: crate::primitives::text::lossy(&head.stdout)
            .trim()
            .to_owned(),
        subject: args
            .message
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim()
            .to_owned(),
        branch: br
            .ok()
            .then(|| crate::primitives::text::lossy(&br.stdout).trim().to_owned()),
    })
}
