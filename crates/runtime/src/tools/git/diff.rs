//! `git_diff`: the unified diff of the work tree or the index, page by page ([`super::page`]),
//! and its `--numstat` file list.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::limits::{GIT_DIFF_DEFAULT_BYTES, GIT_DIFF_MAX_BYTES, RESULT_SUMMARY_MAX_CHARS};

use crate::{
    Access,
    call::{
        context::CallContext,
        error::{ToolError, ToolResult},
        text::{self, TextView},
    },
};

use super::{
    dot,
    engine::{self, pathspec},
    os, page, repo_at,
};

/// Largest `context_lines` of `git_diff`.
const CONTEXT_LINES_MAX: u32 = 100;
/// Largest `--numstat` listing read (the file list and the totals).
pub(super) const NUMSTAT_MAX_BYTES: usize = 16 * 1024 * 1024;

/// Arguments of `git_diff`.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
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
    /// Most bytes of diff text in this page (default 42999, what fits in a host's default result
    /// size; at most 4194304).
    #[schemars(range(min = 1, max = GIT_DIFF_MAX_BYTES))]
    #[serde(skip_serializing)]
    max_bytes: Option<usize>,
    /// next_cursor of the previous page, to continue the same diff.
    #[serde(skip_serializing)]
    cursor: Option<String>,
}

/// A file in a diff.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct DiffFile {
    /// The path.
    path: String,
    /// Lines added (null for binary files, and on pages after the first: the first page
    /// lists the counts).
    added: Option<u64>,
    /// Lines deleted (null as for `added`).
    deleted: Option<u64>,
}

/// Result of `git_diff`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct DiffOutput {
    /// The files whose diff begins in this page (on pages after the first, renamed files are not
    /// named), with line counts.
    files: Vec<DiffFile>,
    /// Files changed in the whole diff.
    files_changed: usize,
    /// Lines added in the whole diff (binary files not counted).
    lines_added: u64,
    /// Lines deleted in the whole diff.
    lines_deleted: u64,
    /// This page of the unified diff: git's output from byte `offset`, cut at a line break.
    diff: String,
    /// Bytes of the diff before this page.
    offset: u64,
    /// More of the diff follows: next_cursor continues.
    truncated: bool,
    /// Pass as cursor (with the same other arguments) for the next page; absent at the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
    #[serde(skip)]
    limit: usize,
    #[serde(skip)]
    bytes: u64,
}

impl TextView for DiffOutput {
    fn summary(&self) -> String {
        let mut s = if self.files_changed == 0 {
            "git_diff: no changes".to_owned()
        } else {
            format!(
                "git_diff: {} changed, +{} -{}; diff bytes {}-{}",
                text::count(self.files_changed as u64, "file", "files"),
                self.lines_added,
                self.lines_deleted,
                self.offset,
                self.offset + self.bytes
            )
        };
        text::push_cursor_more(&mut s, self.next_cursor.as_deref());
        s
    }

    fn body(&self, out: &mut String) {
        out.push_str(&self.diff);
    }

    fn text_limit(&self) -> usize {
        self.limit
    }
}

/// The text limit of a patch page of at most `max` bytes.
pub(super) fn page_limit(max: usize) -> usize {
    (max + RESULT_SUMMARY_MAX_CHARS + 1).max(crate::limits::RESULT_TEXT_DEFAULT_CHARS)
}

/// The totals a first page put in its cursors (`[files, added, deleted]`).
pub(super) fn carried_totals(v: &serde_json::Value) -> (usize, u64, u64) {
    let n = |i: usize| v[i].as_u64().unwrap_or(0);
    (n(0) as usize, n(1), n(2))
}

/// A fingerprint of what the diff `base` of `spec` is of, without computing it: git's raw
/// listing (modes, blob ids and status of each changed path, which `--cached` pins exactly) and
/// the size and modification time of each listed work-tree file (whose blob id the raw listing
/// leaves empty). 16 hex digits of SHA-256.
async fn diff_state(
    repo: &engine::Repo,
    base: &[std::ffi::OsString],
    spec: &std::ffi::OsString,
    cx: &CallContext,
) -> ToolResult<String> {
    use std::os::unix::{ffi::OsStrExt, fs::MetadataExt};
    let mut raw = base.to_vec();
    raw.extend(["--raw".into(), "-z".into(), "--".into(), spec.clone()]);
    let out = engine::run_in(repo, &raw, None, NUMSTAT_MAX_BYTES, &cx.cancel).await?;
    let mut h = out.stdout.clone();
    for name in out.stdout.split(|b| *b == 0) {
        if name.is_empty() || name.starts_with(b":") {
            continue;
        }
        let p = repo.worktree.join(std::ffi::OsStr::from_bytes(name));
        if let Ok(m) = std::fs::symlink_metadata(&p) {
            h.extend(format!("\0{} {} {}", m.len(), m.mtime(), m.mtime_nsec()).as_bytes());
        }
    }
    Ok(crate::primitives::text::sha256_hex(&h)[..16].to_owned())
}

/// `(files, added, deleted)` of a numstat listing.
pub(super) fn totals(ns: &[(Option<u64>, Option<u64>, Vec<u8>)]) -> (usize, u64, u64) {
    (
        ns.len(),
        ns.iter().filter_map(|f| f.0).sum(),
        ns.iter().filter_map(|f| f.1).sum(),
    )
}

pub(super) async fn git_diff(
    rt: Arc<Access>,
    args: DiffArgs,
    cx: CallContext,
) -> ToolResult<DiffOutput> {
    let (repo, target) = repo_at(&rt, &args.path, &cx).await?;
    let ctx = args.context_lines.unwrap_or(3).min(CONTEXT_LINES_MAX);
    let max = args
        .max_bytes
        .unwrap_or(GIT_DIFF_DEFAULT_BYTES)
        .clamp(1, GIT_DIFF_MAX_BYTES);
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
    // What the diff is of, now: a cursor of an earlier state continues nothing (its pages would
    // splice two diffs).
    let state = diff_state(&repo, &base, &spec, &cx).await?;
    if let Some(c) = &args.cursor {
        let carried = crate::tools::cursor::decode(c, "git_diff")?;
        if carried["c"][3].as_str() != Some(state.as_str()) {
            return Err(ToolError::conflict(
                "git_diff: the diff changed since this cursor was returned; call again without cursor",
            ));
        }
    }
    // The first page lists the files with their counts (which computes every file's diff);
    // later pages carry the totals in the cursor.
    let ns = if args.cursor.is_none() {
        let mut numstat = base.clone();
        numstat.extend(["--numstat".into(), "-z".into(), "--".into(), spec.clone()]);
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
        serde_json::json!([f, a, d, state])
    });
    let mut pre = base;
    pre.push(format!("-U{ctx}").into());
    let post = vec!["--".into(), spec];
    let fingerprint = crate::primitives::text::sha256_hex(
        serde_json::to_string(&args).unwrap_or_default().as_bytes(),
    )[..16]
        .to_owned();
    let p = page::page(
        &repo,
        &pre,
        &post,
        names.as_deref(),
        args.cursor.as_deref(),
        &fingerprint,
        "git_diff",
        max,
        carry,
        &cx.cancel,
    )
    .await?;
    let ws = rt.workspace();
    let show = |path: &[u8]| {
        use std::os::unix::ffi::OsStrExt;
        ws.display(&repo.worktree.join(std::ffi::OsStr::from_bytes(path)))
    };
    let counts = |path: &[u8]| {
        ns.as_ref()
            .and_then(|ns| ns.iter().find(|f| f.2 == path))
            .map_or((None, None), |f| (f.0, f.1))
    };
    let files = p
        .files
        .iter()
        .map(|path| {
            let (added, deleted) = counts(path);
            DiffFile {
                path: show(path),
                added,
                deleted,
            }
        })
        .collect();
    let (files_changed, lines_added, lines_deleted) = carried_totals(&p.carried);
    Ok(DiffOutput {
        files,
        files_changed,
        lines_added,
        lines_deleted,
        diff: p.text,
        offset: p.offset,
        truncated: p.next_cursor.is_some(),
        next_cursor: p.next_cursor,
        limit: page_limit(max),
        bytes: p.bytes,
    })
}
