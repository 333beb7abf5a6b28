//! Complete-before-visible writes (DESIGN §3 "Writes", invariant 8).
//!
//! [`Staged`] is a file written and fsynced beside its target under a temporary name. Committing
//! it re-checks the caller's precondition on the target, then renames it into place (or links it
//! exclusively for create-only), then fsyncs the directory. Dropping an uncommitted `Staged`
//! removes the temporary file, so a failed write leaves the target as it was.

use std::{
    fs::{self, File, Permissions},
    io::{self, Read, Write},
    os::unix::fs::{OpenOptionsExt, PermissionsExt},
    path::{Path, PathBuf},
};

use nix::fcntl::{FcntlArg, OFlag, fcntl};
use tempfile::NamedTempFile;

use crate::{
    mcp::error::{ToolError, ToolResult},
    primitives::text::sha256_hex,
};

/// What must hold for the target when a staged write commits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Precondition {
    /// Nothing; the target is replaced or created.
    None,
    /// The target must not exist (an exclusive link creates it).
    Absent,
    /// The target must exist with this lowercase hex SHA-256.
    Sha256(String),
}

/// A file written beside its target, not yet visible.
#[derive(Debug)]
#[must_use = "an uncommitted staged write is removed when dropped"]
pub(crate) struct Staged {
    temp: NamedTempFile,
    target: PathBuf,
    display: String,
}

impl Staged {
    /// Writes `bytes` to a temporary file in `target`'s directory with `mode` (or the default mode
    /// for new files) and fsyncs it. `display` names the target in errors.
    ///
    /// # Errors
    /// The directory is missing or unwritable, or the disk is full: `execution_failed` or
    /// `permission_denied`, with nothing visible changed.
    pub(crate) fn write(
        target: &Path,
        display: &str,
        bytes: &[u8],
        mode: Option<u32>,
    ) -> ToolResult<Self> {
        let dir = target
            .parent()
            .ok_or_else(|| ToolError::invalid(format!("{display}: has no parent directory")))?;
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut temp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".machine-mcp.tmp")
            .tempfile_in(dir)
            .map_err(|e| ToolError::io(display, &e))?;
        let io_err = |e: io::Error| ToolError::io(display, &e);
        temp.write_all(bytes).map_err(io_err)?;
        let mode = mode.unwrap_or_else(default_file_mode);
        temp.as_file()
            .set_permissions(Permissions::from_mode(mode))
            .map_err(io_err)?;
        temp.as_file().sync_all().map_err(io_err)?;
        Ok(Self {
            temp,
            target: target.to_owned(),
            display: display.to_owned(),
        })
    }

    /// The target path.
    pub(crate) fn target(&self) -> &Path {
        &self.target
    }

    /// Checks `pre` against the target now, then makes the staged content visible atomically.
    ///
    /// # Errors
    /// - `conflict`: the precondition does not hold (the target is left untouched).
    /// - `execution_failed` / `permission_denied`: the rename failed.
    pub(crate) fn commit(self, pre: &Precondition) -> ToolResult<()> {
        match pre {
            Precondition::None => {}
            Precondition::Absent => {
                return self
                    .temp
                    .persist_noclobber(&self.target)
                    .map(|_| sync_parent(&self.target))
                    .map_err(|e| {
                        if e.error.kind() == io::ErrorKind::AlreadyExists {
                            ToolError::conflict(format!("{}: already exists", self.display))
                        } else {
                            ToolError::io(&self.display, &e.error)
                        }
                    });
            }
            Precondition::Sha256(expected) => {
                check_sha256(&self.target, &self.display, expected)?;
            }
        }
        self.temp
            .persist(&self.target)
            .map_err(|e| ToolError::io(&self.display, &e.error))?;
        sync_parent(&self.target);
        Ok(())
    }
}

/// Fails with `conflict` unless the file at `path` exists and hashes to `expected`.
pub(crate) fn check_sha256(path: &Path, display: &str, expected: &str) -> ToolResult<()> {
    let actual = match read_bounded(path, display, u64::MAX) {
        Ok(bytes) => sha256_hex(&bytes),
        Err(e) if e.code() == crate::mcp::error::ToolErrorCode::NotFound => {
            return Err(ToolError::conflict(format!(
                "{display}: expected_sha256 was given but the file does not exist"
            ))
            .detail("path", display));
        }
        Err(e) => return Err(e),
    };
    if !actual.eq_ignore_ascii_case(expected) {
        return Err(ToolError::conflict(format!(
            "{display}: the file changed (sha256 is {actual}, expected {expected}); read it again"
        ))
        .detail("path", display)
        .detail("actual_sha256", actual));
    }
    Ok(())
}

/// Opens `path` for reading only if it is a regular file, without ever blocking: the open is
/// non-blocking (a FIFO with no writer, or a device, would otherwise hang the call) and the
/// type is checked on the opened descriptor, so a swap between check and open cannot matter.
/// The returned file is back in blocking mode.
///
/// # Errors
/// `not_found`, `permission_denied` and other I/O errors naming `display`; `invalid_request`
/// "not a regular file" for directories (with a hint to use list_dir), FIFOs, sockets and
/// devices.
pub(crate) fn open_regular(path: &Path, display: &str) -> ToolResult<(File, fs::Metadata)> {
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NONBLOCK | OFlag::O_NOCTTY).bits())
        .open(path)
        .map_err(|e| {
            // A Unix socket cannot be opened at all (ENXIO).
            if e.raw_os_error() == Some(nix::errno::Errno::ENXIO as i32) {
                ToolError::invalid(format!("{display}: not a regular file (a socket)"))
            } else {
                ToolError::io(display, &e)
            }
        })?;
    let meta = file.metadata().map_err(|e| ToolError::io(display, &e))?;
    if !meta.is_file() {
        return Err(ToolError::invalid(format!(
            "{display}: not a regular file{}",
            if meta.is_dir() { " (use list_dir)" } else { "" }
        )));
    }
    fcntl(&file, FcntlArg::F_SETFL(OFlag::empty()))
        .map_err(|e| ToolError::io(display, &e.into()))?;
    Ok((file, meta))
}

/// Reads a whole regular file of at most `max` bytes.
///
/// # Errors
/// What [`open_regular`] returns, and `limit_exceeded` (larger than `max`).
pub(crate) fn read_bounded(path: &Path, display: &str, max: u64) -> ToolResult<Vec<u8>> {
    let (file, meta) = open_regular(path, display)?;
    if meta.len() > max {
        return Err(ToolError::limit(format!(
            "{display}: {} bytes is over the limit of {max} bytes",
            meta.len()
        )));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| ToolError::io(display, &e))?;
    if bytes.len() as u64 > max {
        return Err(ToolError::limit(format!(
            "{display}: grew past the limit of {max} bytes while being read"
        )));
    }
    Ok(bytes)
}

/// The permission bits of an existing file, to keep them across a rewrite.
pub(crate) fn existing_mode(path: &Path) -> Option<u32> {
    fs::metadata(path)
        .ok()
        .map(|m| m.permissions().mode() & 0o7777)
}

/// `0o666` minus the process umask (read from `/proc/self/status`; `0o022` if unknown).
pub(crate) fn default_file_mode() -> u32 {
    0o666 & !process_umask()
}

fn process_umask() -> u32 {
    static UMASK: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *UMASK.get_or_init(|| {
        fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Umask:"))
                    .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
            })
            .unwrap_or(0o022)
    })
}

/// Makes a rename durable; failure to sync a directory is not an error worth failing a write for.
pub(crate) fn sync_parent(path: &Path) {
    if let Some(dir) = path.parent()
        && let Ok(d) = File::open(dir)
    {
        let _ = d.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_replaces_and_keeps_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.txt");
        fs::write(&p, "old").unwrap();
        fs::set_permissions(&p, Permissions::from_mode(0o751)).unwrap();
        let staged = Staged::write(&p, "f.txt", b"new", existing_mode(&p)).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"old", "not visible before commit");
        staged.commit(&Precondition::None).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"new");
        assert_eq!(existing_mode(&p), Some(0o751));
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn failed_preconditions_change_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.txt");
        fs::write(&p, "old").unwrap();
        let staged = Staged::write(&p, "f.txt", b"new", None).unwrap();
        let e = staged.commit(&Precondition::Absent).unwrap_err();
        assert_eq!(e.code(), crate::mcp::error::ToolErrorCode::Conflict);
        let staged = Staged::write(&p, "f.txt", b"new", None).unwrap();
        let e = staged
            .commit(&Precondition::Sha256(sha256_hex(b"other")))
            .unwrap_err();
        assert_eq!(e.code(), crate::mcp::error::ToolErrorCode::Conflict);
        assert_eq!(fs::read(&p).unwrap(), b"old");
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            1,
            "temp files removed"
        );
    }
}
