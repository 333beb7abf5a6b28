//! The installed binary a supervisor starts its workers from (and that the daemon of `connect`
//! swaps itself for), and how an upgrade is noticed:
//! the path the host started (not the file behind it: an upgrade replaces the file or moves a
//! symlink), identified by device, inode, size, modification and change time, then confirmed by running
//! `BINARY --version` (a half-written file does not answer).

use std::{
    ffi::{OsStr, OsString},
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    process::Stdio,
};

use protocol::limits::VERSION_PROBE_TIMEOUT;

/// What identifies one file at a path: an upgrade changes at least one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    /// The inode change time: a `chmod +x` of a file that was refused changes it.
    ctime_ns: i128,
}

impl FileId {
    /// Whether `other` is the same file with the same contents as far as an upgrade goes
    /// (device, inode, size, mtime). The change time is left out: a hard link made elsewhere
    /// or a `chmod` changes it without changing the binary. It still tells a refused file
    /// apart once it was made executable (`==` compares it too).
    pub fn same_binary(&self, other: &Self) -> bool {
        (self.dev, self.ino, self.size, self.mtime_ns)
            == (other.dev, other.ino, other.size, other.mtime_ns)
    }

    /// The file at `path` now (symlinks followed); `None` when there is none.
    pub fn of(path: &Path) -> Option<Self> {
        let m = std::fs::metadata(path).ok()?;
        Some(Self {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
        })
    }
}

/// The path the host started this binary by: `argv0` itself when it names a path (made
/// absolute against the current directory, symlinks kept), else the first match in `PATH`,
/// else the running executable.
pub fn invoked_path(argv0: &OsStr) -> PathBuf {
    let named = Path::new(argv0);
    if named.components().count() > 1 || named.is_absolute() {
        if let Ok(abs) = std::path::absolute(named) {
            return abs;
        }
    } else if let Some(paths) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&paths) {
            let candidate = dir.join(named);
            if candidate.is_file() && std::path::absolute(&candidate).is_ok() {
                return std::path::absolute(&candidate).unwrap_or(candidate);
            }
        }
    }
    std::env::current_exe().unwrap_or_else(|_| named.to_owned())
}

/// Runs `binary --version` and returns the version it reports (`machine-mcp 0.1.0+2` →
/// `0.1.0+2`).
///
/// # Errors
/// A sentence: it could not be started, did not answer within [`VERSION_PROBE_TIMEOUT`],
/// failed, or is not `machine-mcp`.
pub async fn probe_version(binary: &Path) -> Result<String, String> {
    let shown = binary.display();
    let run = tokio::process::Command::new(binary)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = match tokio::time::timeout(VERSION_PROBE_TIMEOUT, run).await {
        Err(_) => {
            return Err(format!(
                "{shown} --version did not answer within {} s",
                VERSION_PROBE_TIMEOUT.as_secs()
            ));
        }
        Ok(Err(e)) => return Err(format!("{shown} --version could not run: {e}")),
        Ok(Ok(out)) => out,
    };
    if !out.status.success() {
        return Err(format!("{shown} --version failed ({})", out.status));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().next().unwrap_or_default().trim();
    match line.strip_prefix(runtime::SERVER_NAME) {
        Some(v) if v.starts_with(' ') && !v.trim().is_empty() => Ok(v.trim().to_owned()),
        _ => Err(format!(
            "{shown} --version answered {line:?}, not {} VERSION",
            runtime::SERVER_NAME
        )),
    }
}

/// The arguments of a worker: this process's `args` (without argv0) with `--worker` after the
/// `stdio` subcommand.
pub(super) fn worker_args(args: &[OsString]) -> Vec<OsString> {
    let mut out = Vec::with_capacity(args.len() + 1);
    let mut placed = false;
    for a in args {
        out.push(a.clone());
        if !placed && a == "stdio" {
            out.push("--worker".into());
            placed = true;
        }
    }
    if !placed {
        out.insert(0, "--worker".into());
        out.insert(0, "stdio".into());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replaced_file_has_another_identity() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bin");
        std::fs::write(&p, "one").unwrap();
        let before = FileId::of(&p).unwrap();
        assert_eq!(FileId::of(&p), Some(before));
        let next = dir.path().join("bin.new");
        std::fs::write(&next, "two").unwrap();
        std::fs::rename(&next, &p).unwrap();
        assert_ne!(FileId::of(&p), Some(before));
        assert_eq!(FileId::of(&dir.path().join("none")), None);
    }

    #[test]
    fn the_worker_flag_follows_the_subcommand() {
        let args: Vec<OsString> = ["--log-level", "debug", "stdio", "-w", "/x"]
            .iter()
            .map(OsString::from)
            .collect();
        assert_eq!(
            worker_args(&args),
            ["--log-level", "debug", "stdio", "--worker", "-w", "/x"]
                .iter()
                .map(OsString::from)
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_bare_name_is_found_in_path_and_a_relative_one_made_absolute() {
        let p = invoked_path(OsStr::new("sh"));
        assert!(p.is_absolute() && p.ends_with("sh"), "{p:?}");
        let rel = invoked_path(OsStr::new("./target/x"));
        assert!(rel.is_absolute() && rel.ends_with("target/x"), "{rel:?}");
    }
}
