//! `git_log`: recent commits, newest first.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    Access,
    mcp::{context::CallContext, error::ToolResult},
};

use super::{
    engine::{self, check_revision, pathspec},
    os, repo_at,
};

/// Default and largest `count` of git_log.
const LOG_DEFAULT: usize = 20;
const LOG_MAX: usize = 500;

/// Arguments of `git_log`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LogArgs {
    /// How many commits (default 20, at most 500).
    #[schemars(range(min = 1, max = LOG_MAX))]
    count: Option<usize>,
    /// A revision or range, e.g. "HEAD~5", "main..feature" (default HEAD).
    revision: Option<String>,
    /// Only commits touching this path.
    path: Option<String>,
    /// Include author e-mail addresses.
    #[serde(default)]
    include_email: bool,
}

/// One commit in a log.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Commit {
    /// Full hash.
    commit: String,
    /// Author name.
    author: String,
    /// Author e-mail (only when asked for).
    #[serde(skip_serializing_if = "Option::is_none")]
    email: Option<String>,
    /// Author date, ISO 8601.
    date: String,
    /// First line of the message.
    subject: String,
}

/// Result of `git_log`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct LogOutput {
    /// Commits, newest first.
    commits: Vec<Commit>,
}

const LOG_FORMAT: &str = "--format=%H%x1f%an%x1f%ae%x1f%aI%x1f%s";

pub(super) async fn git_log(
    rt: Arc<Access>,
    args: LogArgs,
    cx: CallContext,
) -> ToolResult<LogOutput> {
    let count = args.count.unwrap_or(LOG_DEFAULT).clamp(1, LOG_MAX);
    if let Some(r) = &args.revision {
        check_revision(r)?;
    }
    let (repo, target) = repo_at(&rt, args.path.as_deref().unwrap_or("."), &cx).await?;
    let mut a = os(&["log", "--no-color", "--no-show-signature", "-z", LOG_FORMAT]);
    a.push(format!("-n{count}").into());
    a.push("--end-of-options".into());
    if let Some(r) = &args.revision {
        a.push(r.into());
    }
    a.push("--".into());
    if args.path.is_some() {
        a.push(pathspec(&repo, &target)?);
    }
    let out = engine::run_in(&repo, &a, None, 16 * 1024 * 1024, &cx.cancel).await?;
    if !out.ok() {
        if out.stderr.contains("does not have any commits") {
            return Ok(LogOutput {
                commits: Vec::new(),
            });
        }
        return Err(out.error("git log"));
    }
    let commits = crate::primitives::text::lossy(&out.stdout)
        .split('\0')
        .filter(|r| !r.trim().is_empty())
        .filter_map(|r| {
            let f: Vec<&str> = r.trim_start_matches('\n').splitn(5, '\x1f').collect();
            (f.len() == 5).then(|| Commit {
                commit: f[0].to_owned(),
                author: f[1].to_owned(),
                email: args.include_email.then(|| f[2].to_owned()),
                date: f[3].to_owned(),
                subject: f[4].to_owned(),
            })
        })
        .collect();
    Ok(LogOutput { commits })
}
