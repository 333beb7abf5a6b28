//! `git_status`: `git status --porcelain=v2 --branch -z`, parsed.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::limits::{
    GIT_STATUS_DEFAULT_ENTRIES, GIT_STATUS_MAX_ENTRIES, RESULT_TEXT_DEFAULT_CHARS,
    RESULT_TEXT_RAISED_MAX_CHARS,
};

use crate::{
    Access,
    call::{
        context::CallContext,
        error::ToolResult,
        text::{Budget, TextView, body_limit},
    },
};

use super::{dot, engine, os, repo_at};

/// Arguments of `git_status`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct StatusArgs {
    /// A path inside the repository (default ".").
    #[serde(default = "dot")]
    path: String,
    /// Most entries to return (default 1000 and what fits in 45000 characters; at most 20000,
    /// and at most 500000 characters when given).
    #[schemars(range(min = 1, max = GIT_STATUS_MAX_ENTRIES))]
    max_entries: Option<usize>,
    /// Entries to skip (next_offset of the previous page; default 0).
    #[serde(default)]
    offset: usize,
}

/// Branch information.
#[derive(Debug, Default, Serialize, JsonSchema)]
pub(crate) struct Branch {
    /// Branch name, or null when HEAD is detached.
    head: Option<String>,
    /// Commit of HEAD; null before the first commit.
    oid: Option<String>,
    /// Upstream branch, if set.
    upstream: Option<String>,
    /// Commits ahead of upstream.
    ahead: Option<u64>,
    /// Commits behind upstream.
    behind: Option<u64>,
}

/// One path in the status.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct StatusEntry {
    /// The path.
    path: String,
    /// The path before a rename or copy.
    #[serde(skip_serializing_if = "Option::is_none")]
    orig_path: Option<String>,
    /// changed, renamed, copied, unmerged, untracked or ignored.
    kind: &'static str,
    /// Index status letter (X of porcelain v2; "." = unchanged, "?" untracked).
    index: String,
    /// Work-tree status letter (Y).
    worktree: String,
}

/// Result of `git_status`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct StatusOutput {
    /// The work tree root.
    repository: String,
    /// Branch information.
    branch: Branch,
    /// Changed paths, in git's order, from `offset`.
    entries: Vec<StatusEntry>,
    /// Changed paths in all.
    total_entries: usize,
    /// Entries skipped before the first one returned.
    offset: usize,
    /// The offset of the next page; absent when this page reaches the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_offset: Option<usize>,
    /// Nothing changed and nothing untracked.
    clean: bool,
    #[serde(skip)]
    limit: usize,
    #[serde(skip)]
    continue_with: Option<serde_json::Value>,
}

impl StatusEntry {
    /// `XY path` (`XY orig -> path` for a rename or copy), as `git status --short` shows it.
    fn line(&self) -> String {
        match &self.orig_path {
            Some(o) => format!("{}{} {o} -> {}\n", self.index, self.worktree, self.path),
            None => format!("{}{} {}\n", self.index, self.worktree, self.path),
        }
    }
}

impl TextView for StatusOutput {
    fn summary(&self) -> String {
        let b = &self.branch;
        let mut s = format!(
            "git_status {}: {}",
            self.repository,
            match &b.head {
                Some(h) => format!("on {h}"),
                None => "HEAD detached".to_owned(),
            }
        );
        if let Some(u) = &b.upstream {
            s.push_str(&format!(
                " (upstream {u}, ahead {}, behind {})",
                b.ahead.unwrap_or(0),
                b.behind.unwrap_or(0)
            ));
        }
        if self.clean {
            s.push_str("; clean");
            return s;
        }
        s.push_str(&format!(
            "; {} changed (XY path; entries {}-{})",
            self.total_entries,
            self.offset + 1,
            self.offset + self.entries.len()
        ));
        match &self.continue_with {
            Some(args) => s.push_str(&format!("; more: call git_status with {args}")),
            None => s.push_str("; complete"),
        }
        s
    }

    fn body(&self, out: &mut String) {
        for e in &self.entries {
            out.push_str(&e.line());
        }
    }

    fn text_limit(&self) -> usize {
        self.limit
    }
}

pub(super) async fn git_status(
    rt: Arc<Access>,
    args: StatusArgs,
    cx: CallContext,
) -> ToolResult<StatusOutput> {
    let (repo, _) = repo_at(&rt, &args.path, &cx).await?;
    let out = engine::run_in(
        &repo,
        &os(&engine::STATUS_PORCELAIN_ARGS),
        None,
        8 * 1024 * 1024,
        &cx.cancel,
    )
    .await?;
    if !out.ok() {
        return Err(out.error("git status"));
    }
    let ws = rt.workspace();
    let show = |p: &str| ws.display(&repo.worktree.join(p));
    let (branch, raw) = parse_status(&out.stdout);
    let limit = if args.max_entries.is_some() {
        RESULT_TEXT_RAISED_MAX_CHARS
    } else {
        RESULT_TEXT_DEFAULT_CHARS
    };
    let max = args
        .max_entries
        .unwrap_or(GIT_STATUS_DEFAULT_ENTRIES)
        .clamp(1, GIT_STATUS_MAX_ENTRIES);
    let total = raw.len();
    let mut budget = Budget::new(body_limit(limit));
    let mut entries: Vec<StatusEntry> = Vec::new();
    for e in raw.into_iter().skip(args.offset).take(max) {
        let entry = StatusEntry {
            path: show(&e.path),
            orig_path: e.orig_path.as_deref().map(show),
            kind: e.kind,
            index: e.index,
            worktree: e.worktree,
        };
        if !budget.take(entry.line().len()) && !entries.is_empty() {
            break;
        }
        entries.push(entry);
    }
    let end = args.offset.saturating_add(entries.len());
    let next_offset = (end < total).then_some(end);
    let continue_with = next_offset.map(|n| {
        let mut v = serde_json::json!({"path": args.path, "offset": n});
        if let Some(m) = args.max_entries {
            v["max_entries"] = m.into();
        }
        v
    });
    Ok(StatusOutput {
        repository: ws.display(&repo.worktree),
        branch,
        clean: total == 0,
        entries,
        total_entries: total,
        offset: args.offset,
        next_offset,
        limit,
        continue_with,
    })
}

struct RawEntry {
    path: String,
    orig_path: Option<String>,
    kind: &'static str,
    index: String,
    worktree: String,
}

/// Parses `git status --porcelain=v2 --branch -z`.
fn parse_status(bytes: &[u8]) -> (Branch, Vec<RawEntry>) {
    let text = crate::primitives::text::lossy(bytes);
    let mut records = text.split('\0').filter(|r| !r.is_empty());
    let mut branch = Branch::default();
    let mut entries = Vec::new();
    while let Some(r) = records.next() {
        if let Some(h) = r.strip_prefix("# ") {
            let (k, v) = h.split_once(' ').unwrap_or((h, ""));
            match k {
                "branch.oid" => branch.oid = (v != "(initial)").then(|| v.to_owned()),
                "branch.head" => branch.head = (v != "(detached)").then(|| v.to_owned()),
                "branch.upstream" => branch.upstream = Some(v.to_owned()),
                "branch.ab" => {
                    let mut it = v.split(' ');
                    branch.ahead = it
                        .next()
                        .and_then(|a| a.trim_start_matches('+').parse().ok());
                    branch.behind = it
                        .next()
                        .and_then(|b| b.trim_start_matches('-').parse().ok());
                }
                _ => {}
            }
            continue;
        }
        let xy = |f: &str| {
            let mut c = f.chars();
            (
                c.next().unwrap_or('.').to_string(),
                c.next().unwrap_or('.').to_string(),
            )
        };
        let fields: Vec<&str> = r.splitn(11, ' ').collect();
        match fields.first().copied() {
            Some("1") if fields.len() >= 9 => {
                let (x, y) = xy(fields[1]);
                let path = fields[8..].join(" ");
                entries.push(RawEntry {
                    path,
                    orig_path: None,
                    kind: "changed",
                    index: x,
                    worktree: y,
                });
            }
            Some("2") if fields.len() >= 10 => {
                let (x, y) = xy(fields[1]);
                let kind = if fields[8].starts_with('C') {
                    "copied"
                } else {
                    "renamed"
                };
                let path = fields[9..].join(" ");
                let orig = records.next().map(str::to_owned);
                entries.push(RawEntry {
                    path,
                    orig_path: orig,
                    kind,
                    index: x,
                    worktree: y,
                });
            }
            Some("u") if fields.len() >= 11 => {
                let (x, y) = xy(fields[1]);
                entries.push(RawEntry {
                    path: fields[10].to_owned(),
                    orig_path: None,
                    kind: "unmerged",
                    index: x,
                    worktree: y,
                });
            }
            Some("?") => entries.push(RawEntry {
                path: r[2..].to_owned(),
                orig_path: None,
                kind: "untracked",
                index: "?".into(),
                worktree: "?".into(),
            }),
            Some("!") => entries.push(RawEntry {
                path: r[2..].to_owned(),
                orig_path: None,
                kind: "ignored",
                index: "!".into(),
                worktree: "!".into(),
            }),
            _ => {}
        }
    }
    (branch, entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn porcelain_v2_is_parsed() {
        let raw = b"# branch.oid abc\0# branch.head main\0# branch.upstream origin/main\0# branch.ab +2 -1\0\
1 .M N... 100644 100644 100644 aaa aaa src/a file.rs\0\
2 R. N... 100644 100644 100644 bbb bbb R100 new.rs\0old.rs\0\
u UU N... 100644 100644 100644 100644 c1 c2 c3 conflict.txt\0\
? untracked.txt\0";
        let (b, e) = parse_status(raw);
        assert_eq!(b.head.as_deref(), Some("main"));
        assert_eq!((b.ahead, b.behind), (Some(2), Some(1)));
        assert_eq!(e.len(), 4);
        assert_eq!(e[0].path, "src/a file.rs");
        assert_eq!((e[0].index.as_str(), e[0].worktree.as_str()), (".", "M"));
        assert_eq!(e[1].kind, "renamed");
        assert_eq!(e[1].orig_path.as_deref(), Some("old.rs"));
        assert_eq!(e[2].kind, "unmerged");
        assert_eq!(e[2].path, "conflict.txt");
        assert_eq!(e[3].kind, "untracked");
    }
}
