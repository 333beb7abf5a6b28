//! Git tools: `git_status`, `git_diff`, `git_log`, `git_show`, `git_commit`, one file each, over
//! the [`engine`] (every git invocation: a clean environment, fixed safe settings, bounded
//! output, repository discovery).

use std::ffi::OsString;

use crate::tools::family::Family;
use crate::{
    Access,
    call::{
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
mod page;
mod show;
mod status;

use engine::Repo;

/// The family's entry in the registry: its catalog entries.
pub(crate) const FAMILY: Family = Family::tools(specs);

pub(crate) fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec::structured(
            ToolMeta {
                name: "git_status",
                title: "Git status",
                description: "Status of the git repository containing path (default the workspace): \
                              branch, upstream, ahead/behind, and each changed, renamed, unmerged \
                              or untracked path with its index (X) and work-tree (Y) status letters \
                              from `git status --porcelain=v2` (the text: XY path). A page holds \
                              at most max_entries (default 1000) and, by default, what fits in \
                              45000 characters; next_offset continues. An explicit max_entries \
                              (at most 20000) allows up to 500000 characters.",
                capability: Capability::Read,
                hints: Hints::READ,
            },
            status::git_status,
        )
        .larger_on_request(),
        ToolSpec::structured(
            ToolMeta {
                name: "git_diff",
                title: "Git diff",
                description: "Unified diff of the work tree against the index, or of the index \
                              against HEAD with staged: true; optionally only under path; \
                              context_lines (default 3). The text is a summary line (files \
                              changed, +/- lines) then git's diff exactly. A page holds at most \
                              max_bytes (default 42999, what fits in a host's default result \
                              size; at most 4 MiB), cut at a line break; next_cursor continues \
                              with the same arguments plus cursor, every byte once. `files` lists \
                              the files whose diff begins in the page, with added/deleted line \
                              counts. External diff and textconv helpers are never run.",
                capability: Capability::Read,
                hints: Hints::READ,
            },
            diff::git_diff,
        )
        .larger_on_request(),
        ToolSpec::structured(
            ToolMeta {
                name: "git_log",
                title: "Git log",
                description: "Commits, newest first: hash, author name, date, subject (one line each \
                              in the text); author e-mail only with include_email. Optional \
                              revision or range (e.g. \"main..HEAD\") and path filter. A page \
                              holds count commits (default 100) and, by default, what fits in \
                              45000 characters; next_cursor continues with the same arguments plus \
                              cursor, each commit once. An explicit count (at most 2000) allows up \
                              to 500000 characters.",
                capability: Capability::Read,
                hints: Hints::READ,
            },
            log::git_log,
        )
        .larger_on_request(),
        ToolSpec::structured(
            ToolMeta {
                name: "git_show",
                title: "Git show",
                description: "One commit: hash, author, date, full message and its patch (the \
                              text: a summary line, the message, then git's patch exactly). A page \
                              holds at most max_bytes of patch (default: what fits in a host's \
                              default result size; at most 4 MiB); next_cursor continues with the \
                              same arguments plus cursor, every byte once.",
                capability: Capability::Read,
                hints: Hints::READ,
            },
            show::git_show,
        )
        .larger_on_request(),
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
