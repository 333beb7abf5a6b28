//! Without an exec mode, no write may plant git configuration: git configuration can run
//! programs ([`guard_git_internals`], called by every writing tool).

use std::{
    ffi::OsStr,
    path::{Component, Path, PathBuf},
    sync::OnceLock,
};

use crate::{
    Access,
    call::error::{ToolError, ToolErrorCode, ToolResult},
    path,
    policy::Capability,
};

/// Refuses a write that could make git run a program when the policy allows no processes:
///
/// - inside a `.git` directory: git reads the repository's configuration and hooks from there.
///   Every name a file system may fold to `.git` counts ([`folds_to`]): any case (`.GIT` on
///   macOS and Windows), trailing dots and spaces (`.git.`, `.git ` on Windows, SMB and NTFS),
///   the 8.3 short name `GIT~1`, and code points HFS+ ignores (`.g\u{200c}it`) — the names git
///   refuses to check out under `core.protectNTFS`/`core.protectHFS`. They are refused on every
///   file system, since the guard cannot know whether the one below folds them (on ext4 `.git.`
///   is another name, and refusing it costs nothing);
/// - to git configuration outside `.git` that git reads for repositories below it, which matters
///   when the workspace is or contains a home directory (git-config(1) "FILES"): any
///   `.gitconfig` (folded the same way, short name `GITCON~1`), anything below a `.config/git/`
///   directory (`config`, `attributes`, `ignore`,
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
    let is = |c: Component<'_>, name: &str| match c {
        Component::Normal(n) => folds_to(n, name),
        _ => false,
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
        path::own::below(real, p) && (*below || parts.len() == p.components().count())
    });
    if in_config_git || named_gitconfig || server_config {
        return denied("git configuration");
    }
    Ok(())
}

/// Whether a file system that folds names could take `name` for `want` (a name beginning with
/// `.` or a plain lowercase one): equal ignoring ASCII case once the code points HFS+ ignores
/// are removed and trailing dots and spaces dropped (Windows, SMB, NTFS), or an 8.3 short name of
/// it (`want`'s first six letters without the dot, `~`, digits; `.git` → `GIT~1`). The rules of
/// git's own `is_ntfs_dotgit` and `is_hfs_dotgit` (git `path.c`, `utf8.c`).
fn folds_to(name: &OsStr, want: &str) -> bool {
    let Some(name) = name.to_str() else {
        return false; // not UTF-8: no ASCII name folds to it
    };
    let kept: String = name.chars().filter(|&c| !hfs_ignorable(c)).collect();
    let trimmed = kept.trim_end_matches(['.', ' ']);
    if trimmed.eq_ignore_ascii_case(want) {
        return true;
    }
    let stem = want.trim_start_matches('.');
    let stem = &stem[..stem.len().min(6)];
    trimmed
        .get(..stem.len())
        .is_some_and(|s| s.eq_ignore_ascii_case(stem))
        && trimmed[stem.len()..]
            .strip_prefix('~')
            .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

/// Code points HFS+ ignores when it compares names (git `utf8.c` `next_hfs_char`): zero-width
/// joiners and marks, directional formatting, deprecated format characters, the BOM.
fn hfs_ignorable(c: char) -> bool {
    matches!(c, '\u{200c}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{206a}'..='\u{206f}' | '\u{feff}')
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_folding_file_systems_take_for_dot_git_fold_to_it() {
        for n in [
            ".git",
            ".GIT",
            ".git.",
            ".git ",
            ".git. .",
            "GIT~1",
            "git~12",
            ".g\u{200c}it",
            "\u{feff}.Git",
        ] {
            assert!(folds_to(OsStr::new(n), ".git"), "{n:?}");
        }
        for n in [
            ".gitx", ".git.bak", "git", "git~", "GIT~1x", "GIT~a", ".github", "x.git", "",
        ] {
            assert!(!folds_to(OsStr::new(n), ".git"), "{n:?}");
        }
        assert!(folds_to(OsStr::new("GITCON~1"), ".gitconfig"));
        assert!(folds_to(OsStr::new(".gitconfig. "), ".gitconfig"));
        assert!(folds_to(OsStr::new("Git."), "git"));
        assert!(!folds_to(OsStr::new("GIT~1"), ".gitconfig"));
    }
}
