//! Git tools: `git_status`, `git_diff`, `git_log`, `git_show`, `git_commit`, one file each, over
//! the [`engine`] (every git invocation: a clean environment, fixed safe settings, bounded
//! output, repository discovery).

use std::ffi::OsString;

use crate::{
    Access,
    mcp::{
        catalog::{Hints, ToolMeta, ToolSpec},
        context::CallContext,
        error::{ToolError, ToolErrorCode, ToolResult},
    },
    policy::Capability,
};

mod commit;
mod diff;
pub(crate) mod engine;
pub(crate) mod guard;
mod log;
mod show;
mod status;

use engine::Repo;

/// Default byte cap of diff output (`git_diff`, `git_show`).
const DIFF_DEFAULT_BYTES: usize = 256 * 1024;
/// Largest byte cap of diff output ([`protocol::limits::GIT_DIFF_MAX_BYTES`]).
const DIFF_MAX_BYTES: usize = protocol::limits::GIT_DIFF_MAX_BYTES;

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
            status::git_status,
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
            diff::git_diff,
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
            log::git_log,
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
            show::git_show,
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
            commit::git_commit,
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
    let repo = engine::discover(rt.workspace(), &dir, &cx.cancel).await?;
    Ok((repo, p.real().to_owned()))
}

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}
