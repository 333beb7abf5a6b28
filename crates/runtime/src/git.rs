//! Running the `git` CLI safely on behalf of a caller.
//!
//! Every invocation:
//! - runs `git` directly (never a shell) with a fixed argument prefix that disables helpers a
//!   repository's own configuration could use to run programs: `core.fsmonitor`, hooks
//!   (`core.hooksPath=/dev/null`), external diff and textconv (`--no-ext-diff --no-textconv` on
//!   the commands that diff), signature verification (`log.showSignature=false`), implicit bare
//!   repositories (`safe.bareRepository=explicit`), pagers and colour;
//! - in a discovered repository ([`run_in`]), also empties every content filter its
//!   configuration defines (`filter.<driver>.clean`, `.smudge`, `.process`, with
//!   `.required=false`), found by [`discover`] with `git config --get-regexp` (reading
//!   configuration runs nothing). The overrides go through `GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_<n>`/
//!   `GIT_CONFIG_VALUE_<n>` (git-config(1) "ENVIRONMENT"), which outrank repository config and
//!   carry any driver name exactly; an empty command means "no filter" to git. Diffs therefore
//!   compare raw file contents. Submodules are never entered (`--ignore-submodules=all`), so
//!   their own configuration is never read;
//! - gets a clean environment: no inherited `GIT_*` variable can redirect the repository, index or
//!   config; prompts are off and optional locks are not taken;
//! - passes caller-supplied revisions after `--end-of-options` (a revision starting with `-` is
//!   refused first) and paths after `--` as `:(literal)` pathspecs, so neither can be read as an
//!   option or a glob;
//! - has bounded output and a timeout, and is killed if the call is cancelled.
//!
//! [`discover`] resolves the repository of a path; when paths are confined, both its work tree
//! and its git directory (following a `.git` file or symlink) must lie inside the workspace.

use std::{
    ffi::OsString,
    os::unix::ffi::OsStringExt,
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::{
    error::{ToolError, ToolErrorCode, ToolResult},
    path::Workspace,
};

/// Longest a git command may run.
const GIT_TIMEOUT: Duration = Duration::from_secs(60);
/// Stderr kept for error messages.
const STDERR_MAX: usize = 4 * 1024;

/// Settings that keep repository configuration from running programs.
const SAFE_CONFIG: &[&str] = &[
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "core.pager=cat",
    "diff.external=",
    "log.showSignature=false",
    "safe.bareRepository=explicit",
    "color.ui=false",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "core.untrackedCache=false",
    "status.showUntrackedFiles=normal",
];

/// Environment variables passed to git.
const ENV_KEEP: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "TZ",
    "XDG_CONFIG_HOME",
];

/// A repository whose work tree and git directory passed the confinement check.
#[derive(Debug, Clone)]
pub(crate) struct Repo {
    pub(crate) worktree: PathBuf,
    pub(crate) git_dir: PathBuf,
    /// Configuration overrides (key, value) that disable the repository's content filters.
    overrides: Vec<(OsString, OsString)>,
}

/// What a git command printed.
#[derive(Debug)]
pub(crate) struct Output {
    pub(crate) code: Option<i32>,
    pub(crate) stdout: Vec<u8>,
    /// stdout was longer than the cap and was cut.
    pub(crate) truncated: bool,
    pub(crate) stderr: String,
}

impl Output {
    pub(crate) fn ok(&self) -> bool {
        self.code == Some(0)
    }

    /// `execution_failed` with git's (bounded) stderr.
    pub(crate) fn error(&self, what: &str) -> ToolError {
        ToolError::new(
            ToolErrorCode::ExecutionFailed,
            format!("{what} failed: {}", self.stderr.trim()),
        )
    }
}

/// Refuses a revision a caller supplied if git could read it as an option.
pub(crate) fn check_revision(rev: &str) -> ToolResult<()> {
    if rev.is_empty() {
        return Err(ToolError::invalid("revision is empty"));
    }
    if rev.starts_with('-') {
        return Err(ToolError::invalid(format!(
            "revision {rev:?} starts with '-'; options cannot be passed as revisions"
        )));
    }
    if rev.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(ToolError::invalid(format!(
            "revision {rev:?} contains whitespace or control characters"
        )));
    }
    Ok(())
}

/// A `:(literal)` pathspec for `path` (canonical) relative to the repository's work tree.
pub(crate) fn pathspec(repo: &Repo, path: &Path) -> ToolResult<OsString> {
    let rel = path.strip_prefix(&repo.worktree).map_err(|_| {
        ToolError::invalid(format!("{} is not inside the repository", path.display()))
    })?;
    let mut s = OsString::from(":(literal)");
    if rel.as_os_str().is_empty() {
        s.push(".");
    } else {
        s.push(rel);
    }
    Ok(s)
}

/// Runs `git <SAFE_CONFIG> args` in `repo`'s work tree with its content filters disabled (see
/// the module docs), with `stdin` if given, keeping at most `cap` bytes of stdout.
///
/// # Errors
/// As [`run`].
pub(crate) async fn run_in(
    repo: &Repo,
    args: &[OsString],
    stdin: Option<&[u8]>,
    cap: usize,
    cancel: &CancellationToken,
) -> ToolResult<Output> {
    exec(&repo.worktree, &repo.overrides, args, stdin, cap, cancel).await
}

/// Runs `git <SAFE_CONFIG> args` in `cwd` (before a repository is known: only for commands that
/// read no file contents), with `stdin` if given, keeping at most `cap` bytes of stdout.
///
/// # Errors
/// `unavailable` when git is not installed, `timeout` after 60 s, `cancelled`.
pub(crate) async fn run(
    cwd: &Path,
    args: &[OsString],
    stdin: Option<&[u8]>,
    cap: usize,
    cancel: &CancellationToken,
) -> ToolResult<Output> {
    exec(cwd, &[], args, stdin, cap, cancel).await
}

async fn exec(
    cwd: &Path,
    overrides: &[(OsString, OsString)],
    args: &[OsString],
    stdin: Option<&[u8]>,
    cap: usize,
    cancel: &CancellationToken,
) -> ToolResult<Output> {
    let mut cmd = tokio::process::Command::new("git");
    for c in SAFE_CONFIG {
        cmd.arg("-c").arg(c);
    }
    cmd.arg("--no-pager")
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .envs(
            std::env::vars_os().filter(|(k, _)| k.to_str().is_some_and(|k| ENV_KEEP.contains(&k))),
        )
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("LC_ALL", "C")
        .env("GIT_CONFIG_COUNT", overrides.len().to_string())
        .envs(overrides.iter().enumerate().flat_map(|(i, (k, v))| {
            [
                (OsString::from(format!("GIT_CONFIG_KEY_{i}")), k),
                (OsString::from(format!("GIT_CONFIG_VALUE_{i}")), v),
            ]
        }))
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            ToolError::new(
                ToolErrorCode::Unavailable,
                "git is not installed (not found in PATH)",
            )
        } else {
            ToolError::new(ToolErrorCode::ExecutionFailed, format!("starting git: {e}"))
        }
    })?;
    if let (Some(data), Some(mut pipe)) = (stdin, child.stdin.take()) {
        let data = data.to_vec();
        tokio::spawn(async move {
            let _ = pipe.write_all(&data).await;
            let _ = pipe.shutdown().await;
        });
    }
    let out = child.stdout.take();
    let err = child.stderr.take();
    let read_out = async move {
        let mut buf = Vec::new();
        let mut truncated = false;
        if let Some(mut o) = out {
            let mut chunk = vec![0u8; 64 * 1024];
            loop {
                match o.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let room = cap.saturating_sub(buf.len());
                        buf.extend_from_slice(&chunk[..n.min(room)]);
                        if n > room {
                            truncated = true;
                            break;
                        }
                    }
                }
            }
            // Closing our end now makes a git still writing fail (EPIPE) and exit, so its
            // stderr ends too; holding it open would leave git blocked and the call waiting
            // for the timeout.
            drop(o);
        }
        (buf, truncated)
    };
    let read_err = async move {
        let mut kept = Vec::new();
        if let Some(mut e) = err {
            // Drain all of it (a git blocked on a full stderr pipe never ends), keep the head.
            let mut chunk = vec![0u8; 4 * 1024];
            while let Ok(n @ 1..) = e.read(&mut chunk).await {
                let room = STDERR_MAX.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..n.min(room)]);
            }
        }
        crate::text::lossy(&kept).into_owned()
    };
    let work = async {
        let ((stdout, truncated), stderr) = tokio::join!(read_out, read_err);
        // Stop a git that still writes after the cap.
        if truncated {
            let _ = child.start_kill();
        }
        let status = child.wait().await;
        (stdout, truncated, stderr, status)
    };
    tokio::select! {
        (stdout, truncated, stderr, status) = work => Ok(Output {
            code: status.ok().and_then(|s| s.code()),
            stdout,
            truncated,
            stderr,
        }),
        _ = tokio::time::sleep(GIT_TIMEOUT) => Err(ToolError::new(ToolErrorCode::Timeout, "git did not finish within 60 s")),
        _ = cancel.cancelled() => Err(ToolError::cancelled()),
    }
}

/// Finds the repository containing `dir` (canonical) and checks confinement.
///
/// # Errors
/// `not_found` outside any repository; `path_boundary` when paths are confined and the work tree
/// or git directory is outside the workspace.
pub(crate) async fn discover(
    ws: &Workspace,
    dir: &Path,
    cancel: &CancellationToken,
) -> ToolResult<Repo> {
    let args: Vec<OsString> = ["rev-parse", "--show-toplevel", "--absolute-git-dir"]
        .iter()
        .map(OsString::from)
        .collect();
    let out = run(dir, &args, None, 64 * 1024, cancel).await?;
    if !out.ok() {
        return Err(ToolError::new(
            ToolErrorCode::NotFound,
            format!(
                "{} is not in a git work tree ({})",
                ws.display(dir),
                out.stderr.trim()
            ),
        ));
    }
    let text = crate::text::lossy(&out.stdout);
    let mut lines = text.lines();
    let (Some(top), Some(gd)) = (lines.next(), lines.next()) else {
        return Err(ToolError::new(
            ToolErrorCode::NotFound,
            format!("{} is not in a git work tree", ws.display(dir)),
        ));
    };
    let canon = |p: &str| std::fs::canonicalize(p).map_err(|e| ToolError::io(p, &e));
    let mut repo = Repo {
        worktree: canon(top)?,
        git_dir: canon(gd)?,
        overrides: Vec::new(),
    };
    if ws.restricted() {
        if !ws.contains(&repo.worktree) {
            return Err(ToolError::new(
                ToolErrorCode::PathBoundary,
                "the repository's work tree is outside the workspace",
            ));
        }
        if !ws.contains(&repo.git_dir) {
            return Err(ToolError::new(
                ToolErrorCode::PathBoundary,
                "the repository's git directory is outside the workspace (a .git file or symlink points out of it)",
            ));
        }
    }
    let config: Vec<OsString> = ["config", "--null", "--get-regexp", r"^filter\."]
        .iter()
        .map(OsString::from)
        .collect();
    let out = run(&repo.worktree, &config, None, 1024 * 1024, cancel).await?;
    // Past the cap git was stopped, so its exit status says nothing.
    if out.truncated {
        return Err(ToolError::invalid(
            "the repository's configuration defines too many filters to disable them safely",
        ));
    }
    // Exit status 1: no filter configured.
    if out.code != Some(0) && out.code != Some(1) {
        return Err(out.error("reading the repository's configuration"));
    }
    repo.overrides = filter_overrides(&out.stdout);
    Ok(repo)
}

/// The overrides that disable every filter driver named in `git config --null --get-regexp
/// '^filter\.'` output (`filter.<driver>.<variable>\n<value>\0` records; the driver name may
/// contain dots, the variable cannot).
fn filter_overrides(listing: &[u8]) -> Vec<(OsString, OsString)> {
    let mut drivers: Vec<&[u8]> = listing
        .split(|b| *b == 0)
        .filter_map(|record| {
            let key = record.split(|b| *b == b'\n').next()?;
            let rest = key.strip_prefix(b"filter.")?;
            let dot = rest.iter().rposition(|b| *b == b'.')?;
            Some(&rest[..dot])
        })
        .collect();
    drivers.sort_unstable();
    drivers.dedup();
    drivers
        .into_iter()
        .flat_map(|d| {
            [
                ("clean", ""),
                ("smudge", ""),
                ("process", ""),
                ("required", "false"),
            ]
            .map(|(var, value)| {
                let key = [b"filter.", d, b".", var.as_bytes()].concat();
                (OsString::from_vec(key), OsString::from(value))
            })
        })
        .collect()
}

/// An operation in progress in the repository that makes committing wrong, if any.
pub(crate) fn operation_in_progress(repo: &Repo) -> Option<&'static str> {
    let g = &repo.git_dir;
    [
        ("MERGE_HEAD", "a merge"),
        ("CHERRY_PICK_HEAD", "a cherry-pick"),
        ("REVERT_HEAD", "a revert"),
        ("BISECT_LOG", "a bisect"),
        ("rebase-merge", "a rebase"),
        ("rebase-apply", "a rebase or am"),
    ]
    .into_iter()
    .find(|(f, _)| g.join(f).exists())
    .map(|(_, what)| what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_filter_driver_is_disabled_exactly_once() {
        let listing = b"filter.lfs.clean\ngit-lfs clean -- %f\0filter.lfs.process\ngit-lfs filter-process\0filter.My.Dotted.smudge\nx\ny\0filter.\xffraw.clean\nz\0";
        let keys: Vec<OsString> = filter_overrides(listing)
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        let mut want = Vec::new();
        for d in [&b"My.Dotted"[..], b"lfs", b"\xffraw"] {
            for v in ["clean", "smudge", "process", "required"] {
                want.push(OsString::from_vec(
                    [b"filter.", d, b".", v.as_bytes()].concat(),
                ));
            }
        }
        assert_eq!(keys, want);
        assert!(filter_overrides(b"").is_empty());
    }
}
