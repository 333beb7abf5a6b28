//! Without an exec mode, no write may plant git configuration: git configuration can run
//! programs ([`guard_git_internals`], called by every writing tool).

use std::{
    path::{Component, Path, PathBuf},
    sync::OnceLock,
};

use crate::{
    Access,
    mcp::error::{ToolError, ToolErrorCode, ToolResult},
    policy::Capability,
};

/// Refuses a write that could make git run a program when the policy allows no processes:
///
/// - inside a `.git` directory (any case: on a case-insensitive file system `.GIT` is the git
///   directory): git reads the repository's configuration and hooks from there;
/// - to git configuration outside `.git` that git reads for repositories below it, which matters
///   when the workspace is or contains a home directory (git-config(1) "FILES"): any
///   `.gitconfig`, anything below a `.config/git/` directory (`config`, `attributes`, `ignore`,
///   `credentials`), anything below the server's `$XDG_CONFIG_HOME/git/`, and the files the
///   server's `GIT_CONFIG_GLOBAL`/`GIT_CONFIG_SYSTEM` name or `/etc/gitconfig`.
///
/// The git tools themselves read none of the files outside `.git` ([`super::engine`]: `HOME`,
/// `XDG_CONFIG_HOME` and `GIT_CONFIG_GLOBAL` point at `/dev/null`), so this protects the user's
/// own git and later sessions that may run programs: a caller without exec must not plant
/// configuration that runs one. `.gitattributes` and `.gitignore` stay writable: attributes only
/// name drivers, whose commands live in the configuration refused here. Not covered: a file of
/// another name that the user's configuration already includes (`include.path`).
pub(crate) fn guard_git_internals(rt: &Access, real: &Path, display: &str) -> ToolResult<()> {
    if rt.policy().allows(Capability::ExecDirect) {
        return Ok(());
    }
    let is = |c: Component<'_>, name: &str| {
        c.as_os_str()
            .to_str()
            .is_some_and(|n| n.eq_ignore_ascii_case(name))
    };
    let denied = |what: &str| {
        Err(ToolError::new(
            ToolErrorCode::PolicyDenied,
            format!(
                "{display}: writing {what} needs an exec mode (direct or shell), because git \
                 configuration can run programs; the {} policy has none",
                rt.policy().name()
            ),
        ))
    };
    if real.components().any(|c| is(c, ".git")) {
        return denied("inside a .git directory");
    }
    let parts: Vec<Component<'_>> = real.components().collect();
    let in_config_git = parts
        .windows(2)
        .any(|w| is(w[0], ".config") && is(w[1], "git"));
    let named_gitconfig = parts.last().is_some_and(|c| is(*c, ".gitconfig"));
    let server_config = user_git_config_paths().iter().any(|(p, below)| {
        starts_with_ignoring_case(real, p) && (*below || parts.len() == p.components().count())
    });
    if in_config_git || named_gitconfig || server_config {
        return denied("git configuration");
    }
    Ok(())
}

/// Git configuration locations from the server's environment, with whether everything below
/// the path counts (a directory) or only the path itself (a file). Canonicalized where they
/// exist, since written paths are.
fn user_git_config_paths() -> &'static [(PathBuf, bool)] {
    static PATHS: OnceLock<Vec<(PathBuf, bool)>> = OnceLock::new();
    PATHS.get_or_init(|| {
        let canon = |p: PathBuf| std::fs::canonicalize(&p).unwrap_or(p);
        let mut v = vec![(canon(PathBuf::from("/etc/gitconfig")), false)];
        if let Some(x) = std::env::var_os("XDG_CONFIG_HOME").filter(|x| !x.is_empty()) {
            v.push((canon(PathBuf::from(x)).join("git"), true));
        }
        for var in ["GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM"] {
            if let Some(f) = std::env::var_os(var).filter(|f| !f.is_empty()) {
                v.push((canon(PathBuf::from(f)), false));
            }
        }
        v.retain(|(p, _)| p.is_absolute());
        v
    })
}

/// `path` is `prefix` or below it, comparing components without ASCII case (as a
/// case-insensitive file system would).
fn starts_with_ignoring_case(path: &Path, prefix: &Path) -> bool {
    let mut p = path.components();
    prefix.components().all(|want| {
        p.next().is_some_and(|got| {
            got.as_os_str()
                .as_encoded_bytes()
                .eq_ignore_ascii_case(want.as_os_str().as_encoded_bytes())
        })
    })
}
