//! The file a child's `argv[0]` names, found the way `execvp(3)` would find it in the child, so
//! that the child can be started by its path.
//!
//! A program named by a bare name with the child's own `PATH` set cannot be started with
//! `posix_spawn(3)` (which would search this process's `PATH`), so the standard library forks
//! this whole process instead — its page tables copied, and every page it writes afterwards
//! faulted once more. Started by its path, the child is spawned without the copy.
//!
//! Rules (the lookup must never pick a file `execvp` would not run):
//! - Only a bare name is looked up; a name with a `/` is a path already.
//! - The child's `PATH` is the last `PATH` of its environment. A relative entry is taken
//!   relative to the child's working directory (`execvp` runs after the `chdir`), and the path
//!   given is the relative one `execvp` would build (a script sees it as `$0`). An empty entry
//!   (the bare name in the working directory) gives no answer.
//! - Entries are tried in order; one where nothing is found (`ENOENT`, `ENOTDIR`) is skipped,
//!   and the first executable regular file wins (`access(2)` with `X_OK`).
//! - Anything else — no `PATH`, a relative working directory, a candidate that exists but is no
//!   executable regular file (where `execvp` goes on but remembers `EACCES`), an error other
//!   than "not found" — gives no answer, and the child is started by its name as before.
//! - A file found that cannot be started (a missing interpreter, where `execvp` goes on along
//!   `PATH`; a script without `#!`, which `execvp` runs with `/bin/sh`) is started by its name
//!   again by the caller, so `execvp` decides.

use std::{
    ffi::{OsStr, OsString},
    path::{Path, PathBuf},
};

/// The path `execvp` would run for `name` in a child with environment `env` and working
/// directory `cwd`; `None` when the rules above give no answer.
pub(crate) fn resolve(name: &OsStr, env: &[(OsString, OsString)], cwd: &Path) -> Option<PathBuf> {
    if name.is_empty() || name.as_encoded_bytes().contains(&b'/') || !cwd.is_absolute() {
        return None;
    }
    let path = env.iter().rev().find(|(k, _)| k == "PATH")?.1.as_os_str();
    for entry in std::env::split_paths(path) {
        // An empty entry makes `execvp` start the bare name, which only a lookup can do.
        if entry.as_os_str().is_empty() {
            return None;
        }
        let candidate = entry.join(name);
        let at = cwd.join(&candidate);
        match std::fs::metadata(&at) {
            Ok(m) if m.is_file() && executable(&at) => return Some(candidate),
            Ok(_) => return None,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => {}
            Err(_) => return None,
        }
    }
    None
}

/// Whether this process may execute `path` (`access(2)`, `X_OK`).
fn executable(path: &Path) -> bool {
    nix::unistd::access(path, nix::unistd::AccessFlags::X_OK).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn env(path: &str) -> Vec<(OsString, OsString)> {
        vec![("PATH".into(), path.into())]
    }

    fn file(dir: &Path, name: &str, mode: u32) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    #[test]
    fn the_first_executable_on_the_childs_path_is_found() {
        let t = tempfile::tempdir().unwrap();
        let (a, b) = (t.path().join("a"), t.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let want = file(&b, "tool", 0o755);
        let path = format!(
            "{}:{}:{}",
            t.path().join("missing").display(),
            a.display(),
            b.display()
        );
        assert_eq!(
            resolve(OsStr::new("tool"), &env(&path), t.path()),
            Some(want)
        );
        // The last PATH of the environment is the child's.
        let two = vec![
            ("PATH".into(), "/nowhere".into()),
            env(&b.display().to_string()).remove(0),
        ];
        assert!(resolve(OsStr::new("tool"), &two, t.path()).is_some());
    }

    #[test]
    fn relative_entries_are_taken_in_the_childs_working_directory_and_empty_ones_give_no_answer() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("bin")).unwrap();
        file(&t.path().join("bin"), "tool", 0o755);
        // The relative path `execvp` builds, found in the working directory.
        assert_eq!(
            resolve(OsStr::new("tool"), &env("bin"), t.path()),
            Some(PathBuf::from("bin/tool"))
        );
        file(t.path(), "here", 0o755);
        assert_eq!(
            resolve(OsStr::new("here"), &env(":/usr/bin"), t.path()),
            None
        );
        assert_eq!(
            resolve(OsStr::new("here"), &env("bin"), Path::new("rel")),
            None
        );
    }

    #[test]
    fn anything_execvp_would_not_simply_run_gives_no_answer() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().display().to_string();
        file(t.path(), "plain", 0o644);
        std::fs::create_dir_all(t.path().join("sub")).unwrap();
        // Not executable, a directory, not found, no PATH, a path, an empty name.
        assert_eq!(resolve(OsStr::new("plain"), &env(&dir), t.path()), None);
        assert_eq!(resolve(OsStr::new("sub"), &env(&dir), t.path()), None);
        assert_eq!(resolve(OsStr::new("absent"), &env(&dir), t.path()), None);
        assert_eq!(resolve(OsStr::new("sh"), &[], t.path()), None);
        assert_eq!(resolve(OsStr::new("./sh"), &env("/bin"), t.path()), None);
        assert_eq!(resolve(OsStr::new(""), &env("/bin"), t.path()), None);
    }
}
