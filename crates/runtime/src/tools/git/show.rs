//! `git_show`: one commit, its message and its patch, page by page ([`super::page`]).

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use protocol::limits::{GIT_DIFF_DEFAULT_BYTES, GIT_DIFF_MAX_BYTES};

use crate::{
    Access,
    mcp::{
        context::CallContext,
        error::{ToolError, ToolErrorCode, ToolResult},
        text::{self, TextView},
    },
};

use super::{
    diff::{NUMSTAT_MAX_BYTES, carried_totals, page_limit, totals},
    engine::{self, check_revision},
    os, page, repo_at,
};

/// Most bytes of the message shown in the first page's text (the structure has all of it).
const MESSAGE_SHOWN_MAX: usize = 8_000;

/// Arguments of `git_show`.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ShowArgs {
    /// The commit, e.g. "HEAD", "HEAD~2", a hash or a tag.
    revision: String,
    /// Most bytes of patch text in this page (default 42999 less the message shown, what fits in
    /// a host's default result size; at most 4194304).
    #[schemars(range(min = 1, max = GIT_DIFF_MAX_BYTES))]
    #[serde(skip_serializing)]
    max_bytes: Option<usize>,
    /// Include the author's e-mail address.
    #[serde(default)]
    include_email: bool,
    /// next_cursor of the previous page, to continue the same patch.
    #[serde(skip_serializing)]
    cursor: Option<String>,
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
    /// Files the commit changes.
    files_changed: usize,
    /// Lines added by the commit.
    lines_added: u64,
    /// Lines deleted by the commit.
    lines_deleted: u64,
    /// This page of the commit's patch: git's output from byte `offset`, cut at a line break.
    diff: String,
    /// Bytes of the patch before this page.
    offset: u64,
    /// More of the patch follows: next_cursor continues.
    truncated: bool,
    /// Pass as cursor (with the same other arguments) for the next page; absent at the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
    #[serde(skip)]
    limit: usize,
    #[serde(skip)]
    bytes: u64,
}

impl TextView for ShowOutput {
    fn summary(&self) -> String {
        let mut s = format!(
            "git_show {} by {}{} on {}: {} changed, +{} -{}; patch bytes {}-{}",
            self.commit,
            self.author,
            self.email
                .as_deref()
                .map_or_else(String::new, |e| format!(" <{e}>")),
            self.date,
            text::count(self.files_changed as u64, "file", "files"),
            self.lines_added,
            self.lines_deleted,
            self.offset,
            self.offset + self.bytes
        );
        if self.offset == 0 {
            s.push_str(" (after the message)");
        }
        text::push_cursor_more(&mut s, self.next_cursor.as_deref());
        s
    }

    fn body(&self, out: &mut String) {
        if self.offset == 0 {
            out.push_str(&message_shown(&self.message));
        }
        out.push_str(&self.diff);
    }

    fn text_limit(&self) -> usize {
        self.limit
    }
}

/// The message as the first page shows it: cut to [`MESSAGE_SHOWN_MAX`], then a blank line.
fn message_shown(message: &str) -> String {
    let mut m = text::cut(message.to_owned(), MESSAGE_SHOWN_MAX, "…");
    m.push_str("\n\n");
    m
}

pub(super) async fn git_show(
    rt: Arc<Access>,
    args: ShowArgs,
    cx: CallContext,
) -> ToolResult<ShowOutput> {
    check_revision(&args.revision)?;
    let max = args
        .max_bytes
        .unwrap_or(GIT_DIFF_DEFAULT_BYTES)
        .clamp(1, GIT_DIFF_MAX_BYTES);
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
    let commit = f[0].to_owned();
    let message = f[4].trim_end().to_owned();
    let pre = os(&[
        "show",
        "--no-ext-diff",
        "--no-textconv",
        "--no-color",
        "--no-show-signature",
        "--format=",
        "--patch",
    ]);
    // The commit by hash, so every page shows the same one.
    let post = vec!["--end-of-options".into(), commit.clone().into()];
    let mut numstat = os(&[
        "show",
        "--no-ext-diff",
        "--no-color",
        "--no-show-signature",
        "--format=",
        "--numstat",
        "-z",
        "--end-of-options",
    ]);
    numstat.push(commit.clone().into());
    // The first page counts the files (which computes every file's diff); later pages carry it.
    let ns = if args.cursor.is_none() {
        let ns = engine::run_in(&repo, &numstat, None, NUMSTAT_MAX_BYTES, &cx.cancel).await?;
        Some(page::parse_numstat(&ns.stdout))
    } else {
        None
    };
    let names: Option<Vec<Vec<u8>>> = ns
        .as_ref()
        .map(|ns| ns.iter().map(|f| f.2.clone()).collect());
    let carry = ns.as_ref().map_or(serde_json::Value::Null, |ns| {
        let (f, a, d) = totals(ns);
        serde_json::json!([f, a, d])
    });
    let fingerprint = crate::primitives::text::sha256_hex(
        serde_json::to_string(&args).unwrap_or_default().as_bytes(),
    )[..16]
        .to_owned();
    // The first page shares its room with the message.
    let room = if args.cursor.is_none() && args.max_bytes.is_none() {
        max.saturating_sub(message_shown(&message).len()).max(1)
    } else {
        max
    };
    let p = page::page(
        &repo,
        &pre,
        &post,
        names.as_deref(),
        args.cursor.as_deref(),
        &fingerprint,
        "git_show",
        room,
        carry,
        &cx.cancel,
    )
    .await?;
    let (files_changed, lines_added, lines_deleted) = carried_totals(&p.carried);
    Ok(ShowOutput {
        commit,
        author: f[1].to_owned(),
        email: args.include_email.then(|| f[2].to_owned()),
        date: f[3].to_owned(),
        message,
        files_changed,
        lines_added,
        lines_deleted,
        diff: p.text,
        offset: p.offset,
        truncated: p.next_cursor.is_some(),
        next_cursor: p.next_cursor,
        limit: page_limit(max + MESSAGE_SHOWN_MAX + 2),
        bytes: p.bytes,
    })
}
