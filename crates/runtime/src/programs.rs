//! The programs this process starts on its own — git, the agent CLIs and their probes, its
//! own binary (the watchdog, a job's runner, a stdio worker, a daemon's upgrade), upstream
//! servers — resolved to the file that will run, and never one a caller who may write but not
//! run programs could have written.
//!
//! Rules:
//! - A workspace is *guarded* when some caller may write in it without an exec mode: a local
//!   runtime whose policy allows writes but no processes, and every daemon's runtime that
//!   allows writes (its roles narrow the ceiling: an editor writes and runs nothing). Each
//!   [`crate::Runtime`] registers its workspace here ([`guard_workspace`]); the set only
//!   grows for the life of the process (a process serves one workspace; tests that make many
//!   runtimes only refuse more).
//! - A program is refused ([`refusal`]) when the path it is started by, or the real path
//!   behind it, or any directory on the way to either (each prefix as named and as resolved),
//!   lies in a guarded workspace: a writer there could replace the file, or rename a directory
//!   and put another in its place.
//! - A name is looked up ([`find`]) in absolute `PATH` entries only, skipping every entry that
//!   lies in a guarded workspace, and the file found must pass [`refusal`]; a lookup never
//!   depends on the working directory.
//! - This process's own binary is started by [`OWN_EXE`] (`/proc/self/exe`): the kernel opens
//!   the file this process runs, which a rename or a write over its path does not change.
//!
//! Programs a caller runs *with* its exec mode (`run_process`, `exec_command`, a job's steps,
//! `run_command`) are the caller's right and do not go through here.

use std::{
    ffi::OsStr,
    path::{Component, Path, PathBuf},
    sync::RwLock,
};

/// The path this process starts its own binary by: the file it runs, whatever is at the path
/// it was started from now.
pub const OWN_EXE: &str = "/proc/self/exe";

/// The guarded workspaces of this process: each as given and as resolved.
static GUARDED: RwLock<Vec<PathBuf>> = RwLock::new(Vec::new());

/// Registers `root` (a workspace directory) as guarded: from now on no program of this
/// process's own starts from it ([`refusal`], [`find`]). Both `root` as given (made absolute)
/// and its real path are kept.
pub fn guard_workspace(root: &Path) {
    let mut forms = vec![lexical(root)];
    if let Ok(real) = std::fs::canonicalize(root) {
        forms.push(real);
    }
    let mut set = GUARDED
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for f in forms {
        if !set.contains(&f) {
            set.push(f);
        }
    }
}

/// The guarded workspaces registered so far (as given and as resolved).
pub fn guarded() -> Vec<PathBuf> {
    GUARDED
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// Whether a runtime of `policy` makes its workspace guarded: it allows writes and, locally,
/// no processes; a daemon's (`remote`) whenever it allows writes, since a role may write
/// without exec.
pub fn guards(policy: &crate::policy::Policy, remote: bool) -> bool {
    policy.allows(crate::policy::Capability::Write)
        && (remote || policy.exec_mode() == crate::policy::ExecMode::Off)
}

/// Why `program` must not be started by this process, as a sentence; `None` when it may be.
/// See the module rules: the path as named, its real path and each directory on the way to
/// either are checked against the registered workspaces.
pub fn refusal(program: &Path) -> Option<String> {
    refusal_in(program, &guarded())
}

/// [`refusal`] against the workspaces `roots` (each as given and as resolved) instead of the
/// registered ones.
pub fn refusal_in(program: &Path, roots: &[PathBuf]) -> Option<String> {
    if roots.is_empty() {
        return None;
    }
    let inside = |p: &Path| roots.iter().find(|r| p.starts_with(r));
    let named = lexical(program);
    let mut prefix = PathBuf::new();
    for c in named.components() {
        prefix.push(c);
        let real = std::fs::canonicalize(&prefix).ok();
        let hit = inside(&prefix).or_else(|| real.as_deref().and_then(inside));
        if let Some(root) = hit {
            return Some(format!(
                "{} lies in the writable workspace {} (a caller that may write there but not run \
                 programs could have replaced it), so this server does not run it",
                program.display(),
                root.display()
            ));
        }
    }
    None
}

/// The first executable regular file named `name` in the absolute entries of `path_var` (a
/// `PATH` value) that lie outside every guarded workspace. A `name` with a `/` is not looked
/// up: it is checked as a path ([`refusal`]) when absolute and refused when relative.
///
/// # Errors
/// A sentence: not found on `PATH` (saying when an entry was skipped because it lies in a
/// writable workspace), or why the named path is refused.
pub fn find(name: &OsStr, path_var: Option<&OsStr>) -> Result<PathBuf, String> {
    find_in(name, path_var, &guarded())
}

/// [`find`] against the workspaces `roots` instead of the registered ones.
///
/// # Errors
/// As [`find`].
pub fn find_in(
    name: &OsStr,
    path_var: Option<&OsStr>,
    roots: &[PathBuf],
) -> Result<PathBuf, String> {
    let shown = Path::new(name).display().to_string();
    if Path::new(name).components().count() != 1 || name.is_empty() {
        let p = Path::new(name);
        if !p.is_absolute() {
            return Err(format!(
                "{shown} is neither a name to look up nor an absolute path"
            ));
        }
        return match refusal_in(p, roots) {
            Some(why) => Err(why),
            None => Ok(p.to_owned()),
        };
    }
    let mut skipped = None;
    for dir in path_var.into_iter().flat_map(std::env::split_paths) {
        if !dir.is_absolute() {
            continue;
        }
        let candidate = dir.join(name);
        if refusal_in(&candidate, roots).is_some() {
            if is_executable_file(&candidate) {
                skipped.get_or_insert(dir);
            }
            continue;
        }
        if is_executable_file(&candidate) {
            return Ok(candidate);
        }
    }
    Err(match skipped {
        Some(dir) => format!(
            "{shown} not found on PATH (the one in {} was skipped: it lies in a writable \
             workspace, where a caller that may write but not run programs could have replaced it)",
            dir.display()
        ),
        None => format!("{shown} not found on PATH"),
    })
}

/// This process's `PATH` without its relative entries and those in a guarded workspace: the
/// `PATH` of a program of its own (git), whose own lookups must not reach there either.
pub fn own_path() -> std::ffi::OsString {
    let roots = guarded();
    let var = std::env::var_os("PATH").unwrap_or_default();
    let kept: Vec<PathBuf> = std::env::split_paths(&var)
        .filter(|d| d.is_absolute() && refusal_in(d, &roots).is_none())
        .collect();
    std::env::join_paths(kept).unwrap_or_default()
}

/// [`find`] on this process's `PATH`.
///
/// # Errors
/// As [`find`].
pub fn find_on_path(name: &str) -> Result<PathBuf, String> {
    find(OsStr::new(name), std::env::var_os("PATH").as_deref())
}

/// The path this process starts its own binary by (a job's runner): the path it runs from
/// when that passes [`refusal`], else [`OWN_EXE`] (the running file itself).
pub fn own_binary() -> PathBuf {
    match std::env::current_exe() {
        Ok(p) if refusal(&p).is_none() => p,
        _ => PathBuf::from(OWN_EXE),
    }
}

/// The path another process started for this one (an agent's MCP server, a delegation
/// worker) runs this binary by: `preferred` when it passes [`refusal`], else
/// `/proc/PID/exe` of this process (the file it runs, for as long as it runs).
pub fn own_binary_for_others(preferred: PathBuf) -> PathBuf {
    if refusal(&preferred).is_none() {
        preferred
    } else {
        PathBuf::from(format!("/proc/{}/exe", std::process::id()))
    }
}

/// Whether `path` is a regular file with an execute bit (symlinks followed).
pub fn is_executable_file(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `path` made absolute against the working directory, `.` dropped and `..` applied to the
/// names (symlinks not followed: the real path is checked separately).
fn lexical(path: &Path) -> PathBuf {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let mut out = PathBuf::new();
    for c in abs.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn exe(p: &Path) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn a_program_in_or_through_a_guarded_workspace_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let ws = t.path().join("home");
        let outside = t.path().join("opt/bin/tool");
        exe(&ws.join(".local/bin/tool"));
        exe(&outside);
        let roots = [ws.clone()];
        assert!(refusal_in(&ws.join(".local/bin/tool"), &roots).is_some());
        assert!(refusal_in(&ws.join("../home/.local/bin/tool"), &roots).is_some());
        assert_eq!(refusal_in(&outside, &roots), None);
        // A link outside to a file inside, and a directory link outside into the workspace.
        std::os::unix::fs::symlink(ws.join(".local/bin/tool"), t.path().join("link")).unwrap();
        assert!(refusal_in(&t.path().join("link"), &roots).is_some());
        std::os::unix::fs::symlink(ws.join(".local"), t.path().join("dirlink")).unwrap();
        assert!(refusal_in(&t.path().join("dirlink/bin/tool"), &roots).is_some());
        // A link inside to a file outside: the link can be replaced.
        std::os::unix::fs::symlink(&outside, ws.join("out")).unwrap();
        assert!(refusal_in(&ws.join("out"), &roots).is_some());
    }

    #[test]
    fn path_lookups_skip_guarded_and_relative_entries() {
        let t = tempfile::tempdir().unwrap();
        let ws = t.path().join("home");
        exe(&ws.join(".local/bin/tool"));
        exe(&t.path().join("usr/bin/tool"));
        let roots = [ws.clone()];
        let path = std::env::join_paths([
            PathBuf::from("rel"),
            ws.join(".local/bin"),
            t.path().join("usr/bin"),
        ])
        .unwrap();
        assert_eq!(
            find_in(OsStr::new("tool"), Some(&path), &roots).unwrap(),
            t.path().join("usr/bin/tool")
        );
        let only = std::env::join_paths([ws.join(".local/bin")]).unwrap();
        let why = find_in(OsStr::new("tool"), Some(&only), &roots).unwrap_err();
        assert!(
            why.contains("skipped") && why.contains("writable workspace"),
            "{why}"
        );
        assert!(find_in(OsStr::new("tool"), Some(&only), &[]).is_ok());
        let abs = ws.join(".local/bin/tool");
        assert!(find_in(abs.as_os_str(), None, &roots).is_err());
        assert!(find_in(OsStr::new("./tool"), Some(&path), &[]).is_err());
    }
}
