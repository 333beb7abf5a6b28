//! One message for a state directory that cannot be used: the path at fault, what is wrong
//! with it, and the fix, with the OS error said once.
//!
//! The path at fault is not always the one the failed call named: opening `STATE/daemon.lock`
//! fails with "Not a directory" when `STATE` is a file, and with "Permission denied" either
//! because the lock file is not writable or because `STATE` is not.

use std::{
    io,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

/// Why `path` (a state directory, or a file or directory under one) cannot be used, for an
/// error message: names the path at fault and the fix. `error` is what the failed call on
/// `path` returned; its text appears once, and only when it adds something.
///
/// - A file where a directory is needed (`path` itself after `mkdir` said it exists, or an
///   ancestor): "X is a file, not a directory: move it away or choose another --state-dir".
/// - Permission denied: the path that is not writable (the file when it exists, else its
///   nearest existing ancestor), its owner and mode, and a `chown`/`chmod` hint.
/// - Anything else: "cannot use PATH: ERROR; choose another --state-dir".
pub fn describe(path: &Path, error: &io::Error) -> String {
    if let Some(file) = file_in_the_way(path, error) {
        return format!(
            "{} is a file, not a directory, so it cannot hold machine-mcp's state: move that file away or choose another --state-dir",
            file.display()
        );
    }
    if error.kind() == io::ErrorKind::PermissionDenied {
        let at_fault = nearest_existing(path);
        let me = nix::unistd::geteuid();
        return match std::fs::metadata(&at_fault) {
            Ok(m) => {
                let kind = if m.is_dir() { "directory" } else { "file" };
                let fix = if m.uid() == me.as_raw() {
                    format!(
                        "`chmod u+rw{} {}`",
                        if m.is_dir() { "x" } else { "" },
                        at_fault.display()
                    )
                } else {
                    format!("`sudo chown {me} {}`", at_fault.display())
                };
                format!(
                    "cannot write the {kind} {}: permission denied (it is owned by uid {}, mode {:o}, and this process runs as uid {me}): run {fix}, or choose another --state-dir",
                    at_fault.display(),
                    m.uid(),
                    m.mode() & 0o7777,
                )
            }
            Err(_) => format!(
                "cannot write {}: permission denied: fix its permissions, or choose another --state-dir",
                at_fault.display()
            ),
        };
    }
    format!(
        "cannot use {}: {error}; choose another --state-dir",
        path.display()
    )
}

/// The first path, from the root down, of `path`'s ancestors that exists and is not a
/// directory; `path` itself counts when `error` says it exists (a `mkdir` on a file).
fn file_in_the_way(path: &Path, error: &io::Error) -> Option<PathBuf> {
    let mut chain: Vec<&Path> = path.ancestors().collect();
    chain.reverse();
    let last = chain.len().saturating_sub(1);
    chain
        .into_iter()
        .enumerate()
        .filter(|(i, _)| *i < last || error.kind() == io::ErrorKind::AlreadyExists)
        .find(|(_, p)| std::fs::metadata(p).is_ok_and(|m| !m.is_dir()))
        .map(|(_, p)| p.to_path_buf())
}

/// `path` when it exists, else its nearest existing ancestor.
fn nearest_existing(path: &Path) -> PathBuf {
    path.ancestors()
        .find(|p| !p.as_os_str().is_empty() && std::fs::symlink_metadata(p).is_ok())
        .unwrap_or(path)
        .to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_in_place_of_the_directory_is_named_once_with_the_fix() {
        let t = tempfile::tempdir().unwrap();
        let file = t.path().join("state");
        std::fs::write(&file, "").unwrap();
        let lock = file.join("daemon.lock");
        let e = std::fs::File::open(&lock).unwrap_err();
        let msg = describe(&lock, &e);
        assert!(
            msg.starts_with(&format!("{} is a file, not a directory", file.display())),
            "{msg}"
        );
        assert!(!msg.contains("os error"), "{msg}");
        let e = std::fs::create_dir(&file).unwrap_err();
        assert!(describe(&file, &e).contains("move that file away"));
    }

    #[test]
    fn permission_denied_names_the_path_its_owner_and_a_fix() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let lock = t.path().join("daemon.lock");
        std::fs::write(&lock, "").unwrap();
        std::fs::set_permissions(&lock, std::fs::Permissions::from_mode(0o400)).unwrap();
        let e = io::Error::from(io::ErrorKind::PermissionDenied);
        let msg = describe(&lock, &e);
        assert!(
            msg.starts_with(&format!("cannot write the file {}", lock.display())),
            "{msg}"
        );
        assert!(msg.contains("mode 400"), "{msg}");
        assert!(
            msg.contains(&format!("chmod u+rw {}", lock.display())),
            "{msg}"
        );
        // Missing under an existing directory: the directory is at fault.
        let missing = t.path().join("sub/daemon.lock");
        let msg = describe(&missing, &e);
        assert!(
            msg.starts_with(&format!(
                "cannot write the directory {}",
                t.path().display()
            )),
            "{msg}"
        );
    }

    #[test]
    fn other_errors_name_the_path_and_the_error_once() {
        let e = io::Error::other("disk on fire");
        let msg = describe(Path::new("/x/state"), &e);
        assert_eq!(
            msg,
            "cannot use /x/state: disk on fire; choose another --state-dir"
        );
    }
}
