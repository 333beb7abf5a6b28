//! `git_log`: recent commits, newest first.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::limits::{
    GIT_LOG_DEFAULT_COMMITS, GIT_LOG_MAX_COMMITS, RESULT_TEXT_DEFAULT_CHARS,
    RESULT_TEXT_RAISED_MAX_CHARS,
};

use crate::{
    Access,
    call::{
        context::CallContext,
        error::{ToolError, ToolResult},
        text::{self, Budget, TextView, body_limit},
    },
    tools::cursor,
};

use super::{
    engine::{self, check_revision, pathspec},
    os, repo_at,
};

/// Longest subject shown in the text (the structure has all of it).
const SUBJECT_SHOWN_MAX: usize = 500;

/// Arguments of `git_log`.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LogArgs {
    /// How many commits (default 100 and what fits in 45000 characters; at most 2000, and at
    /// most 500000 characters when given).
    #[schemars(range(min = 1, max = GIT_LOG_MAX_COMMITS))]
    #[serde(skip_serializing)]
    count: Option<usize>,
    /// A revision or range, e.g. "HEAD~5", "main..feature" (default HEAD).
    revision: Option<String>,
    /// Only commits touching this path.
    path: Option<String>,
    /// Include author e-mail addresses.
    #[serde(default)]
    include_email: bool,
    /// next_cursor of the previous page, to continue the same log.
    #[serde(skip_serializing)]
    cursor: Option<String>,
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

impl Commit {
    /// `hash date author <email> subject`, one line.
    fn line(&self) -> String {
        let email = self
            .email
            .as_deref()
            .map_or_else(String::new, |e| format!(" <{e}>"));
        let subject = text::cut(self.subject.clone(), SUBJECT_SHOWN_MAX, "…");
        format!(
            "{} {} {}{email} {subject}\n",
            self.commit, self.date, self.author
        )
    }
}

/// Result of `git_log`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct LogOutput {
    /// Commits, newest first.
    commits: Vec<Commit>,
    /// Commits of the log before this page (skipped).
    skipped_commits: u64,
    /// Pass as cursor (with the same other arguments) for the next page; absent at the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
    #[serde(skip)]
    limit: usize,
}

impl TextView for LogOutput {
    fn summary(&self) -> String {
        let mut s = if self.commits.is_empty() {
            "git_log: no commits".to_owned()
        } else {
            format!(
                "git_log: commits {}-{}, newest first (hash date author subject)",
                self.skipped_commits + 1,
                self.skipped_commits + self.commits.len() as u64
            )
        };
        text::push_cursor_more(&mut s, self.next_cursor.as_deref());
        s
    }

    fn body(&self, out: &mut String) {
        for c in &self.commits {
            out.push_str(&c.line());
        }
    }

    fn text_limit(&self) -> usize {
        self.limit
    }
}

const LOG_FORMAT: &str = "--format=%H%x1f%an%x1f%ae%x1f%aI%x1f%s";

pub(super) async fn git_log(
    rt: Arc<Access>,
    args: LogArgs,
    cx: CallContext,
) -> ToolResult<LogOutput> {
    let count = args
        .count
        .unwrap_or(GIT_LOG_DEFAULT_COMMITS)
        .clamp(1, GIT_LOG_MAX_COMMITS);
    let limit = if args.count.is_some() {
        RESULT_TEXT_RAISED_MAX_CHARS
    } else {
        RESULT_TEXT_DEFAULT_CHARS
    };
    if let Some(r) = &args.revision {
        check_revision(r)?;
    }
    // A cursor: the commits to skip and the hash the next page must start with.
    let fingerprint = crate::primitives::text::sha256_hex(
        serde_json::to_string(&args).unwrap_or_default().as_bytes(),
    )[..16]
        .to_owned();
    let (skip, expect) = match &args.cursor {
        Some(c) => {
            let v = cursor::decode(c, "git_log")?;
            if v["q"].as_str() != Some(fingerprint.as_str()) {
                return Err(ToolError::invalid(
                    "cursor belongs to a different log: repeat the same arguments with it",
                ));
            }
            (
                cursor::u64_field(&v, "k", "git_log")?,
                v["h"].as_str().map(str::to_owned),
            )
        }
        None => (0, None),
    };
    let (repo, target) = repo_at(&rt, args.path.as_deref().unwrap_or("."), &cx).await?;
    let mut a = os(&["log", "--no-color", "--no-show-signature", "-z", LOG_FORMAT]);
    // One more than the page: it says whether more follow and where they start.
    a.push(format!("-n{}", count + 1).into());
    if skip > 0 {
        a.push(format!("--skip={skip}").into());
    }
    a.push("--end-of-options".into());
    if let Some(r) = &args.revision {
        a.push(r.into());
    }
    a.push("--".into());
    if args.path.is_some() {
        a.push(pathspec(&repo, &target)?);
    }
    let out = engine::run_in(&repo, &a, None, 16 * 1024 * 1024, &cx.cancel).await?;
    let empty = |skip| LogOutput {
        commits: Vec::new(),
        skipped_commits: skip,
        next_cursor: None,
        limit,
    };
    if !out.ok() {
        if out.stderr.contains("does not have any commits") {
            return Ok(empty(0));
        }
        return Err(out.error("git log"));
    }
    let mut all: Vec<Commit> = crate::primitives::text::lossy(&out.stdout)
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
    if let Some(h) = &expect
        && all.first().map(|c| &c.commit) != Some(h)
    {
        return Err(ToolError::conflict(
            "the history changed since this cursor was returned (the next commit is not the one it named); run git_log again without a cursor",
        ));
    }
    let mut budget = Budget::new(body_limit(limit));
    let mut shown = 0;
    while shown < all.len().min(count) {
        if !budget.take(all[shown].line().len()) && shown > 0 {
            break;
        }
        shown += 1;
    }
    let next_cursor = all.get(shown).map(|next| {
        cursor::encode(&serde_json::json!({
            "k": skip + shown as u64,
            "h": next.commit,
            "q": fingerprint,
        }))
    });
    all.truncate(shown);
    Ok(LogOutput {
        commits: all,
        skipped_commits: skip,
        next_cursor,
        limit,
    })
}
