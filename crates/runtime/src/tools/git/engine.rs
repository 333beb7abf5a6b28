//! Running the `git` CLI safely on behalf of a caller.
//!
//! The claim these rules keep: **neither a repository nor the user's git configuration can make
//! the git tools start a program** (other than git itself), under any profile. Git starts
//! programs from configuration (git-config(1): `core.fsmonitor`, `core.hooksPath`/githooks(5),
//! `core.pager`, `core.editor`, `core.askPass`, `core.sshCommand`, `core.gitProxy`,
//! `credential.helper`, `diff.external`, `diff.<driver>.command`/`.textconv`, `filter.<driver>.*`
//! via gitattributes(5), `gpg.program`, `remote.<name>.uploadpack`/`.vcs`, `protocol.*.allow`,
//! `url.<base>.insteadOf`, `gc.auto`/`maintenance.auto`), from the environment (git(1)
//! "ENVIRONMENT": `GIT_SSH[_COMMAND]`, `GIT_ASKPASS`, `GIT_EXTERNAL_DIFF`, `GIT_PAGER`,
//! `GIT_EDITOR`, `GIT_EXEC_PATH`, `GIT_CONFIG_PARAMETERS`, ...), and from every configuration file
//! it reads: system, global (`~/.gitconfig`), XDG (`$XDG_CONFIG_HOME/git/config`), the
//! repository's, and files those include (`include.path`, `includeIf`). The most dangerous path
//! needs no diff at all: in a partial clone, reading a missing object *lazily fetches* it from the
//! promisor remote, which runs that remote's transport — `remote.<name>.uploadpack`, `ext::`
//! commands, ssh, credential helpers, askpass.
//!
//! Every invocation therefore:
//! - runs `git` directly (never a shell) with a clean environment (only `PATH`, user name,
//!   locale and time zone are kept), so no inherited `GIT_*` variable can redirect the
//!   repository, index or configuration or name a program;
//! - reads no configuration but the repository's own: `GIT_CONFIG_NOSYSTEM=1`,
//!   `GIT_CONFIG_SYSTEM`/`GIT_CONFIG_GLOBAL=/dev/null`, and `HOME`/`XDG_CONFIG_HOME=/dev/null`
//!   (a path below which nothing can exist, so `~/.gitconfig`, the XDG files and `~/`-includes
//!   are never found, also by a git older than 2.32 that ignores `GIT_CONFIG_GLOBAL`). The few
//!   settings of the user's that only carry data (identity, ignore and attributes files,
//!   `safe.directory` from global scope) are read by [`discover`] and passed back explicitly;
//! - never fetches: `GIT_NO_LAZY_FETCH=1` (git ≥ 2.44; a missing object is an error, reported
//!   as [`missing_from_partial_clone`]) and, for older git and any other transport,
//!   `GIT_ALLOW_PROTOCOL=` (empty: git(1) "ENVIRONMENT" — every transport and remote helper is
//!   refused, whatever `protocol.<name>.allow` the repository sets) with
//!   `GIT_PROTOCOL_FROM_USER=0`.
//!   So no uploadpack, `ext::`/remote helper, ssh, proxy, credential helper or askpass can start;
//! - gets a fixed `-c` prefix that outranks repository configuration ([`SAFE_CONFIG`]):
//!   `core.fsmonitor`, hooks (`core.hooksPath=/dev/null`), pager, editor (`:` runs nothing),
//!   askpass, ssh command, credential helpers (an empty `credential.helper` resets the list),
//!   `diff.external`, `protocol.allow=never`, signing and signature display, automatic
//!   gc/maintenance, implicit bare repositories (`safe.bareRepository=explicit`), colour;
//!   the commands that diff also pass `--no-ext-diff --no-textconv`, which covers
//!   `diff.<driver>.command` and `.textconv`;
//! - in a discovered repository ([`run_in`]), also empties every content filter its
//!   configuration defines (`filter.<driver>.clean`, `.smudge`, `.process`, with
//!   `.required=false`), found by [`discover`] with `git config --get-regexp` (reading
//!   configuration runs nothing). Clean filters run on read paths too: `git diff` and
//!   `git status` hash a work-tree file whose stat data changed through its clean filter. The
//!   overrides go through `GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_<n>`/`GIT_CONFIG_VALUE_<n>`
//!   (git-config(1) "ENVIRONMENT"), which outrank repository config and carry any driver name
//!   exactly; an empty command means "no filter" to git. Diffs therefore compare raw file
//!   contents. Submodules are never entered (`--ignore-submodules=all`), so their own
//!   configuration is never read;
//! - passes caller-supplied revisions after `--end-of-options` (a revision starting with `-` is
//!   refused first) and paths after `--` as `:(literal)` pathspecs, so neither can be read as an
//!   option or a glob;
//! - has bounded output and a timeout, and is killed if the call is cancelled.
//!
//! [`discover`] resolves the repository of a path; when paths are confined, both its work tree
//! and its git directory (following a `.git` file or symlink) must lie inside the workspace.
//! Its two commands (`rev-parse` and `config --get-regexp`) read no index, object or remote, so
//! they may see the user's global configuration (for `safe.directory` and the data settings
//! above) with everything else still isolated.

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
    call::error::{ToolError, ToolErrorCode, ToolResult},
    path::Workspace,
};

/// The `git status` of `git_status` and of the project facts: porcelain v2 with the branch
/// header, NUL-terminated, untracked files listed, submodules not entered.
pub(crate) const STATUS_PORCELAIN_ARGS: [&str; 6] = [
    "status",
    "--porcelain=v2",
    "--branch",
    "-z",
    "--untracked-files=normal",
    "--ignore-submodules=all",
];

/// Longest a git command may run.
const GIT_TIMEOUT: Duration = Duration::from_secs(60);
/// Stderr kept for error messages.
const STDERR_MAX: usize = 4 * 1024;

/// Settings that keep configuration from running programs (see the module docs). Command-line
/// configuration is read last, so these outrank every configuration file.
const SAFE_CONFIG: &[&str] = &[
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "core.pager=cat",
    // git-var(1): the editor `:` is never started.
    "core.editor=:",
    "core.askPass=",
    "core.sshCommand=",
    // git-config(1) "credential.helper": an empty value resets the list of helpers.
    "credential.helper=",
    "diff.external=",
    "protocol.allow=never",
    "protocol.ext.allow=never",
    "log.showSignature=false",
    "safe.bareRepository=explicit",
    "color.ui=false",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "core.untrackedCache=false",
    "status.showUntrackedFiles=normal",
];

/// Environment variables passed to git from the server's environment.
const ENV_KEEP: &[&str] = &["PATH", "USER", "LOGNAME", "LANG", "TZ"];

/// `HOME` and `XDG_CONFIG_HOME` for git: below `/dev/null` no file can exist or be created, so
/// git finds no global or XDG configuration, attributes or ignore file there.
const NO_HOME: &str = "/dev/null";

/// The configuration a git command may read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConfigSources {
    /// The repository's own configuration only (every command that reads the index, objects or
    /// the work tree).
    Repository,
    /// Also the user's global and XDG configuration (the server's `HOME`/`XDG_CONFIG_HOME`):
    /// only for [`discover`]'s `rev-parse` (so the user's `safe.directory` applies) and its
    /// configuration listing.
    WithUser,
}

/// A repository whose work tree and git directory passed the confinement check.
#[derive(Debug, Clone)]
pub(crate) struct Repo {
    pub(crate) worktree: PathBuf,
    pub(crate) git_dir: PathBuf,
    /// Configuration overrides (key, value): the repository's content filters disabled and the
    /// user's data settings carried over (see [`imported_config`]).
    overrides: Vec<(OsString, OsString)>,
    /// The repository is a partial clone (it has a promisor remote): objects may be missing.
    partial: bool,
}

/// What a git command printed.
#[derive(Debug)]
pub(crate) struct Output {
    pub(crate) code: Option<i32>,
    pub(crate) stdout: Vec<u8>,
    /// stdout was longer than the cap and was cut.
    pub(crate) truncated: bool,
    pub(crate) stderr: String,
    /// For a [`run_page`]: what the skipped bytes held (else empty).
    pub(crate) skipped: Skipped,
}

/// What [`run_page`] saw in the bytes it skipped.
#[derive(Debug, Default)]
pub(crate) struct Skipped {
    /// The first line of stdout (up to [`HEADER_LINE_MAX`] bytes, without its line break).
    pub(crate) first_line: Vec<u8>,
    /// The last line starting with [`DIFF_HEADER`] that began in the skipped bytes.
    pub(crate) last_header: Option<Vec<u8>>,
}

/// The line that starts each file's section of a patch.
pub(crate) const DIFF_HEADER: &[u8] = b"diff --git ";
/// Longest header line kept (a quoted path is at most four times PATH_MAX).
const HEADER_LINE_MAX: usize = 20 * 1024;

/// Follows line starts through a stream of bytes, keeping the first line and the last
/// [`DIFF_HEADER`] line.
#[derive(Debug)]
struct LineWatch {
    at_start: bool,
    first: bool,
    /// The line being read, while it may be the first line or a header.
    cur: Option<Vec<u8>>,
    seen: Skipped,
}

impl LineWatch {
    fn new() -> Self {
        Self {
            at_start: true,
            first: true,
            cur: None,
            seen: Skipped::default(),
        }
    }

    fn feed(&mut self, bytes: &[u8]) {
        let mut i = 0;
        while i < bytes.len() {
            if self.at_start {
                self.cur = Some(Vec::new());
                self.at_start = false;
            }
            let nl = memchr::memchr(b'\n', &bytes[i..]).map(|p| i + p);
            let end = nl.unwrap_or(bytes.len());
            if let Some(cur) = &mut self.cur {
                let room = HEADER_LINE_MAX.saturating_sub(cur.len());
                cur.extend_from_slice(&bytes[i..end.min(i + room)]);
                let n = cur.len().min(DIFF_HEADER.len());
                if !self.first && cur[..n] != DIFF_HEADER[..n] {
                    self.cur = None;
                }
            }
            if nl.is_some() {
                self.end_line();
                i = end + 1;
            } else {
                i = end;
            }
        }
    }

    fn end_line(&mut self) {
        if let Some(cur) = self.cur.take() {
            if cur.starts_with(DIFF_HEADER) {
                self.seen.last_header = Some(cur.clone());
            }
            if self.first {
                self.seen.first_line = cur;
            }
        }
        self.first = false;
        self.at_start = true;
    }
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
/// `unavailable` when git is not installed, `timeout` after 60 s, `cancelled`; also `not_found`
/// when git failed because an object is missing from a partial clone (it is never fetched).
pub(crate) async fn run_in(
    repo: &Repo,
    args: &[OsString],
    stdin: Option<&[u8]>,
    cap: usize,
    cancel: &CancellationToken,
) -> ToolResult<Output> {
    run_window(repo, args, stdin, 0, cap, cancel).await
}

/// Like [`run_in`], but stdout's first `skip` bytes are read and dropped, then at most `cap`
/// kept; [`Output::skipped`] says what the dropped bytes held (the first line, the last
/// [`DIFF_HEADER`] line). For paging through a long patch.
///
/// # Errors
/// As [`run_in`].
pub(crate) async fn run_page(
    repo: &Repo,
    args: &[OsString],
    skip: u64,
    cap: usize,
    cancel: &CancellationToken,
) -> ToolResult<Output> {
    run_window(repo, args, None, skip, cap, cancel).await
}

async fn run_window(
    repo: &Repo,
    args: &[OsString],
    stdin: Option<&[u8]>,
    skip: u64,
    cap: usize,
    cancel: &CancellationToken,
) -> ToolResult<Output> {
    let out = exec(
        &repo.worktree,
        ConfigSources::Repository,
        &repo.overrides,
        args,
        stdin,
        skip,
        cap,
        cancel,
    )
    .await?;
    if repo.partial && !out.ok() && missing_from_partial_clone(&out.stderr) {
        return Err(ToolError::new(
            ToolErrorCode::NotFound,
            format!(
                "an object this needs is missing from this partial clone; machine-mcp never \
                 fetches (a fetch runs the remote's transport, which the repository's \
                 configuration chooses). Run the git command yourself, which fetches what is \
                 missing, then call again. git said: {}",
                out.stderr.trim()
            ),
        ));
    }
    Ok(out)
}

/// Whether git's stderr says it needed an object it would have fetched from a promisor remote:
/// `GIT_NO_LAZY_FETCH` (git ≥ 2.44) warns "lazy fetching disabled", and a refused or failed lazy
/// fetch ends with "could not fetch <oid> from promisor remote".
fn missing_from_partial_clone(stderr: &str) -> bool {
    stderr.contains("lazy fetching disabled") || stderr.contains("from promisor remote")
}

/// Runs `git <SAFE_CONFIG> args` in `cwd` reading `sources`, with `overrides` as command-line
/// configuration and `stdin` if given, dropping the first `skip` bytes of stdout and keeping at
/// most `cap` bytes after them.
///
/// # Errors
/// `unavailable` when git is not installed, `timeout` after 60 s, `cancelled`.
#[allow(clippy::too_many_arguments)]
async fn exec(
    cwd: &Path,
    sources: ConfigSources,
    overrides: &[(OsString, OsString)],
    args: &[OsString],
    stdin: Option<&[u8]>,
    skip: u64,
    cap: usize,
    cancel: &CancellationToken,
) -> ToolResult<Output> {
    // The git of the server's PATH outside every writable workspace (`crate::programs`).
    let git = crate::programs::find_on_path("git")
        .map_err(|why| ToolError::new(ToolErrorCode::Unavailable, format!("git: {why}")))?;
    let mut cmd = tokio::process::Command::new(git);
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
        .env("PATH", crate::programs::own_path())
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_SYSTEM", "/dev/null")
        // git(1) "ENVIRONMENT": an empty list refuses every transport and remote helper.
        .env("GIT_ALLOW_PROTOCOL", "")
        .env("GIT_PROTOCOL_FROM_USER", "0")
        .env("GIT_NO_LAZY_FETCH", "1")
        .env("LC_ALL", "C");
    // Tagged like every child, so the watchdog ends it with a SIGKILLed server.
    let (tree_key, tree_value) = crate::tools::process::engine::watchdog::tag_env();
    cmd.env(tree_key, tree_value);
    match sources {
        ConfigSources::Repository => {
            cmd.env("HOME", NO_HOME)
                .env("XDG_CONFIG_HOME", NO_HOME)
                .env("GIT_CONFIG_GLOBAL", "/dev/null");
        }
        ConfigSources::WithUser => {
            cmd.envs(std::env::vars_os().filter(|(k, _)| k == "HOME" || k == "XDG_CONFIG_HOME"));
        }
    }
    cmd.env("GIT_CONFIG_COUNT", overrides.len().to_string())
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
        let mut to_skip = skip;
        let mut watch = LineWatch::new();
        if let Some(mut o) = out {
            let mut chunk = vec![0u8; 64 * 1024];
            loop {
                match o.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let dropped = (to_skip.min(n as u64)) as usize;
                        if dropped > 0 {
                            watch.feed(&chunk[..dropped]);
                            to_skip -= dropped as u64;
                        }
                        let data = &chunk[dropped..n];
                        let room = cap.saturating_sub(buf.len());
                        buf.extend_from_slice(&data[..data.len().min(room)]);
                        if data.len() > room {
                            truncated = true;
                            break;
                        }
                    }
                }
            }
            if skip > 0 && to_skip == 0 && watch.first {
                // The first line ends in the kept bytes.
                let end = memchr::memchr(b'\n', &buf).unwrap_or(buf.len());
                watch.feed(&buf[..end]);
                watch.end_line();
            } else if skip > 0 && watch.first {
                watch.end_line();
            }
            // Closing our end now makes a git still writing fail (EPIPE) and exit, so its
            // stderr ends too; holding it open would leave git blocked and the call waiting
            // for the timeout.
            drop(o);
        }
        (buf, truncated, watch.seen)
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
        crate::primitives::text::lossy(&kept).into_owned()
    };
    let work = async {
        let ((stdout, truncated, skipped), stderr) = tokio::join!(read_out, read_err);
        // Stop a git that still writes after the cap.
        if truncated {
            let _ = child.start_kill();
        }
        let status = child.wait().await;
        (stdout, truncated, skipped, stderr, status)
    };
    tokio::select! {
        (stdout, truncated, skipped, stderr, status) = work => Ok(Output {
            code: status.ok().and_then(|s| s.code()),
            stdout,
            truncated,
            stderr,
            skipped,
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
    // The user's global configuration is read here so that their `safe.directory` applies;
    // rev-parse reads no index, object or remote, so nothing else in it matters.
    let out = exec(
        dir,
        ConfigSources::WithUser,
        &[],
        &args,
        None,
        0,
        64 * 1024,
        cancel,
    )
    .await?;
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
    let text = crate::primitives::text::lossy(&out.stdout);
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
        partial: false,
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
    let config: Vec<OsString> = [
        "config",
        "--null",
        "--show-scope",
        "--includes",
        "--get-regexp",
        IMPORTED_KEYS,
    ]
    .iter()
    .map(OsString::from)
    .collect();
    let out = exec(
        &repo.worktree,
        ConfigSources::WithUser,
        &[],
        &config,
        None,
        0,
        1024 * 1024,
        cancel,
    )
    .await?;
    // Past the cap git was stopped, so its exit status says nothing.
    if out.truncated {
        return Err(ToolError::invalid(
            "the repository's configuration defines too many filters to disable them safely",
        ));
    }
    // Exit status 1: none of these keys is set.
    if out.code != Some(0) && out.code != Some(1) {
        return Err(out.error("reading the repository's configuration"));
    }
    let home = std::env::var_os("HOME");
    let xdg = std::env::var_os("XDG_CONFIG_HOME");
    (repo.overrides, repo.partial) = imported_config(&out.stdout, home.as_deref(), xdg.as_deref());
    Ok(repo)
}

/// The keys [`discover`] lists (git matches the regex against keys with the section and
/// variable lowercased): every filter driver's settings (to disable them), the data settings
/// carried over from the user's configuration, and what makes a repository a partial clone
/// (gitrepository-layout(5) "extensions.partialClone", git-config(1) "remote.<name>.promisor").
const IMPORTED_KEYS: &str = concat!(
    r"^filter\.",
    r"|^(user|author|committer)\.(name|email)$",
    r"|^core\.(excludesfile|attributesfile)$",
    r"|^safe\.directory$",
    r"|^extensions\.partialclone$",
    r"|^remote\..*\.promisor$",
);

/// From `git config --null --show-scope --get-regexp IMPORTED_KEYS` output
/// (`<scope>\0<key>\n<value>\0` records, in the order git reads them; `--show-scope` needs
/// git ≥ 2.26): the overrides that
/// commands isolated from the user's configuration need to behave as before, and whether the
/// repository is a partial clone.
///
/// - every filter driver emptied (see [`filter_overrides`]);
/// - identity (`user.*`, `author.*`, `committer.*` name and e-mail) and
///   `core.excludesFile`/`core.attributesFile`: the effective (last) value, with a leading `~/`
///   expanded against the server's `home` as git would; when no ignore or attributes file is
///   configured, git's default (`$XDG_CONFIG_HOME/git/ignore`, else `$HOME/.config/git/ignore`;
///   likewise `attributes`, git-config(1) "core.excludesFile", gitattributes(5)). These only
///   carry data: an ignore file lists patterns, and an attributes file can only name drivers,
///   whose commands are never read (global config) or disabled (filters, external diff, textconv);
/// - `safe.directory` only from global scope: git honours it only in protected configuration
///   (git-config(1) "SCOPES"), and re-passing a repository's own value on the command line would
///   promote it there.
fn imported_config(
    listing: &[u8],
    home: Option<&std::ffi::OsStr>,
    xdg: Option<&std::ffi::OsStr>,
) -> (Vec<(OsString, OsString)>, bool) {
    let mut fields = listing.split(|b| *b == 0);
    let mut records = Vec::new();
    while let (Some(scope), Some(entry)) = (fields.next(), fields.next()) {
        let (key, value) = match entry.iter().position(|b| *b == b'\n') {
            Some(i) => (&entry[..i], &entry[i + 1..]),
            None => (entry, &b""[..]),
        };
        records.push((scope, key, value));
    }
    let expand = |v: &[u8]| -> OsString {
        match (v.strip_prefix(b"~/"), home) {
            (Some(rest), Some(h)) => {
                let mut p = PathBuf::from(h);
                p.push(OsString::from_vec(rest.to_vec()));
                p.into_os_string()
            }
            _ => OsString::from_vec(v.to_vec()),
        }
    };
    let mut overrides = filter_overrides(records.iter().map(|(_, k, _)| *k));
    for key in [
        "user.name",
        "user.email",
        "author.name",
        "author.email",
        "committer.name",
        "committer.email",
    ] {
        if let Some((_, _, v)) = records.iter().rev().find(|(_, k, _)| *k == key.as_bytes()) {
            overrides.push((key.into(), OsString::from_vec(v.to_vec())));
        }
    }
    for (key, name, file) in [
        ("core.excludesFile", "core.excludesfile", "ignore"),
        ("core.attributesFile", "core.attributesfile", "attributes"),
    ] {
        let configured = records.iter().rev().find(|(_, k, _)| *k == name.as_bytes());
        let path = match (configured, xdg.filter(|x| !x.is_empty()), home) {
            (Some((_, _, v)), _, _) => Some(expand(v)),
            (None, Some(x), _) => Some(Path::new(x).join("git").join(file).into_os_string()),
            (None, None, Some(h)) => {
                Some(Path::new(h).join(".config/git").join(file).into_os_string())
            }
            (None, None, None) => None,
        };
        if let Some(p) = path {
            overrides.push((key.into(), p));
        }
    }
    overrides.extend(
        records
            .iter()
            .filter(|(scope, k, _)| *scope == b"global" && *k == b"safe.directory")
            .map(|(_, _, v)| ("safe.directory".into(), expand(v))),
    );
    let partial = records.iter().any(|(_, k, v)| {
        *k == b"extensions.partialclone"
            || (k.starts_with(b"remote.")
                && k.ends_with(b".promisor")
                && v.eq_ignore_ascii_case(b"true"))
    });
    (overrides, partial)
}

/// The overrides that disable every filter driver named by `keys` (configuration keys; only
/// `filter.<driver>.<variable>` ones count; the driver name may contain dots, the variable
/// cannot).
fn filter_overrides<'a>(keys: impl Iterator<Item = &'a [u8]>) -> Vec<(OsString, OsString)> {
    let mut drivers: Vec<&[u8]> = keys
        .filter_map(|key| {
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
    fn option_like_revisions_are_refused() {
        assert!(check_revision("--output=/tmp/x").is_err());
        assert!(check_revision("-p").is_err());
        assert!(check_revision("HEAD~1").is_ok());
        assert!(check_revision("main..feature").is_ok());
        assert!(check_revision("a b").is_err());
    }

    fn os(s: &str) -> OsString {
        OsString::from(s)
    }

    #[test]
    fn every_filter_driver_is_disabled_exactly_once() {
        let listing = b"local\0filter.lfs.clean\ngit-lfs clean -- %f\0global\0filter.lfs.process\ngit-lfs filter-process\0local\0filter.My.Dotted.smudge\nx\ny\0local\0filter.\xffraw.clean\nz\0";
        let (overrides, partial) = imported_config(listing, None, None);
        let keys: Vec<OsString> = overrides.into_iter().map(|(k, _)| k).collect();
        let mut want = Vec::new();
        for d in [&b"My.Dotted"[..], b"lfs", b"\xffraw"] {
            for v in ["clean", "smudge", "process", "required"] {
                want.push(OsString::from_vec(
                    [b"filter.", d, b".", v.as_bytes()].concat(),
                ));
            }
        }
        assert_eq!(keys, want);
        assert!(!partial);
        assert!(imported_config(b"", None, None).0.is_empty());
    }

    #[test]
    fn data_settings_are_carried_over_and_safe_directory_only_from_global_scope() {
        let listing = b"global\0user.name\nGlobal\0global\0user.email\ng@example.com\0\
            local\0user.name\nLocal\0global\0core.excludesfile\n~/.ignore\0\
            global\0safe.directory\n~/shared\0local\0safe.directory\n*\0\
            local\0extensions.partialclone\norigin\0";
        let (o, partial) = imported_config(listing, Some("/h".as_ref()), Some("/x".as_ref()));
        assert_eq!(
            o,
            vec![
                (os("user.name"), os("Local")),
                (os("user.email"), os("g@example.com")),
                (os("core.excludesFile"), os("/h/.ignore")),
                (os("core.attributesFile"), os("/x/git/attributes")),
                (os("safe.directory"), os("/h/shared")),
            ]
        );
        assert!(partial);
        let (o, partial) = imported_config(b"", Some("/h".as_ref()), Some("".as_ref()));
        assert_eq!(
            o,
            vec![
                (os("core.excludesFile"), os("/h/.config/git/ignore")),
                (os("core.attributesFile"), os("/h/.config/git/attributes")),
            ]
        );
        assert!(!partial);
    }

    #[test]
    fn a_missing_object_in_a_partial_clone_is_recognised() {
        assert!(missing_from_partial_clone(
            "warning: lazy fetching disabled; some objects may not be available\nfatal: x"
        ));
        assert!(missing_from_partial_clone(
            "fatal: could not fetch 45b9 from promisor remote"
        ));
        assert!(!missing_from_partial_clone("fatal: bad revision 'x'"));
    }
}
