//! Git tools: `git_status`, `git_diff`, `git_log`, `git_show`, `git_commit` (see [`crate::git`]).

use std::{ffi::OsString, sync::Arc};

use protocol::limits::GIT_DIFF_MAX_BYTES;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    Access,
    catalog::{Hints, ToolMeta, ToolSpec},
    context::CallContext,
    diff,
    error::{ToolError, ToolErrorCode, ToolResult},
    git::{self, Repo, check_revision, pathspec},
    policy::Capability,
};

/// Default byte cap of diff output (the largest is `protocol::limits::GIT_DIFF_MAX_BYTES`).
const DIFF_DEFAULT_BYTES: usize = 256 * 1024;
/// Default and largest `count` of git_log.
const LOG_DEFAULT: usize = 20;
const LOG_MAX: usize = 500;
/// Largest commit message.
const MESSAGE_MAX_BYTES: usize = 64 * 1024;

pub(crate) fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec::structured(
            ToolMeta {
                name: "git_status",
                title: "Git status",
                description: "Status of the git repository containing path (default the workspace): \
                              branch, upstream, ahead/behind, and each changed, renamed, unmerged \
                              or untracked path with its index (X) and work-tree (Y) status letters \
                              from `git status --porcelain=v2`.",
                capability: Capability::Read,
                hints: Hints::READ,
            },
            git_status,
        ),
        ToolSpec::structured(
            ToolMeta {
                name: "git_diff",
                title: "Git diff",
                description: "Unified diff of the work tree against the index, or of the index \
                              against HEAD with staged: true; optionally only under path. \
                              context_lines (default 3), output cut at max_bytes (default 256 KiB, \
                              at most 4 MiB). Also lists files with added/deleted line counts. \
                              External diff and textconv helpers are never run.",
                capability: Capability::Read,
                hints: Hints::READ,
            },
            git_diff,
        ),
        ToolSpec::structured(
            ToolMeta {
                name: "git_log",
                title: "Git log",
                description: "Recent commits (default 20, at most 500), newest first: hash, author \
                              name, date, subject; author e-mail only with include_email. Optional \
                              revision or range (e.g. \"main..HEAD\") and path filter.",
                capability: Capability::Read,
                hints: Hints::READ,
            },
            git_log,
        ),
        ToolSpec::structured(
            ToolMeta {
                name: "git_show",
                title: "Git show",
                description: "One commit: hash, author, date, full message and its patch, cut at \
                              max_bytes (default 256 KiB, at most 4 MiB).",
                capability: Capability::Read,
                hints: Hints::READ,
            },
            git_show,
        ),
        ToolSpec::structured(
            ToolMeta {
                name: "git_commit",
                title: "Git commit",
                description: "Commit what is already staged in the index with message. Never \
                              stages, amends, signs, pushes or runs hooks. Refused while a merge, \
                              rebase, cherry-pick, revert or bisect is in progress, and when \
                              nothing is staged (unless allow_empty). Stage with run_process \
                              [\"git\", \"add\", ...].",
                capability: Capability::ExecDirect,
                hints: Hints {
                    read_only: false,
                    destructive: false,
                    idempotent: false,
                    open_world: false,
                },
            },
            git_commit,
        ),
    ]
}

fn dot() -> String {
    ".".to_owned()
}

async fn repo_at(
    rt: &Access,
    path: &str,
    cx: &CallContext,
) -> ToolResult<(Repo, std::path::PathBuf)> {
    let p = rt.workspace().resolve(path)?;
    if !p.exists() {
        return Err(ToolError::new(
            ToolErrorCode::NotFound,
            format!("{path}: no such file or directory"),
        ));
    }
    let dir = if p.real().is_dir() {
        p.real().to_owned()
    } else {
        p.real()
            .parent()
            .map(|d| d.to_owned())
            .unwrap_or_else(|| p.real().to_owned())
    };
    let repo = git::discover(rt.workspace(), &dir, &cx.cancel).await?;
    Ok((repo, p.real().to_owned()))
}

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

// === git_status ===

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

async fn git_status(
    rt: Arc<Access>,
    args: StatusArgs,
    cx: CallContext,
) -> ToolResult<StatusOutput> {
    let (repo, _) = repo_at(&rt, &args.path, &cx).await?;
    let out = git::run_in(
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
    let text = crate::text::lossy(bytes);
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

// === git_diff ===

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
    #[schemars(range(min = 0, max = 100))]
    context_lines: Option<u32>,
    /// Most bytes of diff text (default 262144, at most 4194304).
    #[schemars(range(min = 1, max = 4194304))]
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

async fn git_diff(rt: Arc<Access>, args: DiffArgs, cx: CallContext) -> ToolResult<DiffOutput> {
    let (repo, target) = repo_at(&rt, &args.path, &cx).await?;
    let ctx = args.context_lines.unwrap_or(3).min(100);
    let cap = args
        .max_bytes
        .unwrap_or(DIFF_DEFAULT_BYTES)
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
    let mut patch = base.clone();
    patch.push(format!("-U{ctx}").into());
    patch.extend(["--".into(), spec.clone()]);
    let out = git::run_in(&repo, &patch, None, cap, &cx.cancel).await?;
    if !out.ok() && !out.truncated {
        return Err(out.error("git diff"));
    }
    let mut numstat = base;
    numstat.extend(["--numstat".into(), "-z".into(), "--".into(), spec]);
    let ns = git::run_in(&repo, &numstat, None, 4 * 1024 * 1024, &cx.cancel).await?;
    let ws = rt.workspace();
    let files = parse_numstat(&ns.stdout)
        .into_iter()
        .map(|(a, d, p)| DiffFile {
            path: ws.display(&repo.worktree.join(p)),
            added: a,
            deleted: d,
        })
        .collect();
    let mut text = crate::text::lossy(&out.stdout).into_owned();
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
    let text = crate::text::lossy(bytes);
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

// === git_log ===

/// Arguments of `git_log`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LogArgs {
    /// How many commits (default 20, at most 500).
    #[schemars(range(min = 1, max = 500))]
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

async fn git_log(rt: Arc<Access>, args: LogArgs, cx: CallContext) -> ToolResult<LogOutput> {
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
    let out = git::run_in(&repo, &a, None, 16 * 1024 * 1024, &cx.cancel).await?;
    if !out.ok() {
        if out.stderr.contains("does not have any commits") {
            return Ok(LogOutput {
                commits: Vec::new(),
            });
        }
        return Err(out.error("git log"));
    }
    let commits = crate::text::lossy(&out.stdout)
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

// === git_show ===

/// Arguments of `git_show`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ShowArgs {
    /// The commit, e.g. "HEAD", "HEAD~2", a hash or a tag.
    revision: String,
    /// Most bytes of patch text (default 262144, at most 4194304).
    #[schemars(range(min = 1, max = 4194304))]
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

async fn git_show(rt: Arc<Access>, args: ShowArgs, cx: CallContext) -> ToolResult<ShowOutput> {
    check_revision(&args.revision)?;
    let cap = args
        .max_bytes
        .unwrap_or(DIFF_DEFAULT_BYTES)
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
    let m = git::run_in(&repo, &meta, None, 1024 * 1024, &cx.cancel).await?;
    if !m.ok() {
        return Err(ToolError::new(
            ToolErrorCode::NotFound,
            format!("revision {:?}: {}", args.revision, m.stderr.trim()),
        ));
    }
    let text = crate::text::lossy(&m.stdout).into_owned();
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
    let p = git::run_in(&repo, &patch, None, cap, &cx.cancel).await?;
    if !p.ok() && !p.truncated {
        return Err(p.error("git show"));
    }
    let mut diff_text = crate::text::lossy(&p.stdout)
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

// === git_commit ===

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

async fn git_commit(
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
    if let Some(op) = git::operation_in_progress(&repo) {
        return Err(ToolError::conflict(format!(
            "{op} is in progress in this repository; finish or abort it before committing"
        )));
    }
    if !args.allow_empty {
        let staged = git::run_in(
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
    let out = git::run_in(
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
    let head = git::run_in(&repo, &os(&["rev-parse", "HEAD"]), None, 1024, &cx.cancel).await?;
    let br = git::run_in(
        &repo,
        &os(&["symbolic-ref", "--short", "-q", "HEAD"]),
        None,
        1024,
        &cx.cancel,
    )
    .await?;
    Ok(CommitOutput {
        commit: crate::text::lossy(&head.stdout).trim().to_owned(),
        subject: args
            .message
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim()
            .to_owned(),
        branch: br
            .ok()
            .then(|| crate::text::lossy(&br.stdout).trim().to_owned()),
    })
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

    #[test]
    fn option_like_revisions_are_refused() {
        assert!(check_revision("--output=/tmp/x").is_err());
        assert!(check_revision("-p").is_err());
        assert!(check_revision("HEAD~1").is_ok());
        assert!(check_revision("main..feature").is_ok());
        assert!(check_revision("a b").is_err());
    }
}
