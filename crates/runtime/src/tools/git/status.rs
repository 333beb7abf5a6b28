//! `git_status`: `git status --porcelain=v2 --branch -z`, parsed.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    Access,
    mcp::{context::CallContext, error::ToolResult},
};

use super::{dot, engine, os, repo_at};

/// Arguments of `git_status`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct StatusArgs {
    /// A path inside the repository (default ".").
    #[serde(default = "dot")]
    path: String,
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
    /// Changed paths.
    entries: Vec<StatusEntry>,
    /// Nothing changed and nothing untracked.
    clean: bool,
}

pub(super) async fn git_status(
    rt: Arc<Access>,
    args: StatusArgs,
    cx: CallContext,
) -> ToolResult<StatusOutput> {
    let (repo, _) = repo_at(&rt, &args.path, &cx).await?;
    let out = engine::run_in(
        &repo,
        &os(&[
            "status",
            "--porcelain=v2",
            "--branch",
            "-z",
            "--untracked-files=normal",
            "--ignore-submodules=all",
        ]),
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
    let entries: Vec<StatusEntry> = raw
        .into_iter()
        .map(|e| StatusEntry {
            path: show(&e.path),
            orig_path: e.orig_path.as_deref().map(show),
            kind: e.kind,
            index: e.index,
            worktree: e.worktree,
        })
        .collect();
    Ok(StatusOutput {
        repository: ws.display(&repo.worktree),
        branch,
        clean: entries.is_empty(),
        entries,
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
