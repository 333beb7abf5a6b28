//! Complete-before-visible writes (DESIGN §3 "Writes", invariant 8), through a directory
//! descriptor verified beneath the workspace root ([`crate::path::beneath`]).
//!
//! [`Staged`] is a file written and fsynced beside its target under a temporary name, in the
//! target's directory as opened by [`crate::path::Workspace::at`]. Committing it re-checks the
//! caller's precondition on the target, then renames it into place (`renameat(2)`, or
//! `linkat(2)` for create-only, which never replaces) on that same descriptor, then fsyncs the
//! directory. Dropping an uncommitted `Staged` removes the temporary file from that directory, so
//! a failed write leaves the target as it was and nothing behind.

use std::{
    ffi::OsString,
    fs::{self, File, Permissions},
    io::{self, Read, Write},
    os::unix::fs::PermissionsExt,
};

use nix::fcntl::{FcntlArg, OFlag, fcntl};

use crate::{
    call::error::{ToolError, ToolResult},
    path::{At, Workspace},
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
    target: At,
    /// The temporary file's name in the target's directory; `None` once committed.
    temp: Option<OsString>,
    display: String,
}

impl Staged {
    /// Writes `bytes` to a new temporary file in `target`'s directory with `mode` (or the default
    /// mode for new files) and fsyncs it. `display` names the target in errors.
    ///
    /// # Errors
    /// The directory is unwritable or gone, or the disk is full: `execution_failed` or
    /// `permission_denied`, with nothing visible changed and no temporary file left.
    pub(crate) fn write(
        target: &At,
        display: &str,
        bytes: &[u8],
        mode: Option<u32>,
    ) -> ToolResult<Self> {
        let io_err = |e: io::Error| Workspace::open_error(display, &e);
        let (temp, mut file) = target.create_temp().map_err(io_err)?;
        // From here on, dropping `staged` removes the temporary file.
        let staged = Self {
            target: target.clone(),
            temp: Some(temp),
            display: display.to_owned(),
        };
        file.write_all(bytes).map_err(io_err)?;
        let mode = mode.unwrap_or_else(default_file_mode);
        file.set_permissions(Permissions::from_mode(mode))
            .map_err(io_err)?;
        file.sync_all().map_err(io_err)?;
        Ok(staged)
    }

    /// The target.
    pub(crate) fn target(&self) -> &At {
        &self.target
    }

    /// Checks `pre` against the target now, then makes the staged content visible atomically.
    ///
    /// # Errors
    /// - `conflict`: the precondition does not hold (the target is left untouched).
    /// - `execution_failed` / `permission_denied`: the rename or link failed.
    pub(crate) fn commit(mut self, pre: &Precondition) -> ToolResult<()> {
        let Some(temp) = self.temp.clone() else {
            return Err(ToolError::internal("a staged write was committed twice"));
        };
        match pre {
            Precondition::None => {}
            Precondition::Absent => {
                return match self.target.link_new(&temp) {
                    Ok(()) => {
                        self.temp = None;
                        self.target.sync_dir();
                        Ok(())
                    }
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(ToolError::conflict(
                        format!("{}: already exists", self.display),
                    )),
                    Err(e) => Err(Workspace::open_error(&self.display, &e)),
                };
            }
            Precondition::Sha256(expected) => {
                check_sha256(&self.target, &self.display, expected)?;
            }
        }
        self.target
            .replace_with(&temp)
            .map_err(|e| Workspace::open_error(&self.display, &e))?;
        self.temp = None;
        self.target.sync_dir();
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if let Some(temp) = self.temp.take()
            && let Err(e) = self.target.remove_sibling(&temp)
        {
            tracing::warn!(error = %e, "a staged write's temporary file could not be removed");
        }
    }
}

/// Fails with `conflict` unless the file at `at` exists and hashes to `expected`.
pub(crate) fn check_sha256(at: &At, display: &str, expected: &str) -> ToolResult<()> {
    let actual = match read_bounded(at, display, u64::MAX) {
        Ok(bytes) => sha256_hex(&bytes),
        Err(e) if e.code() == crate::call::error::ToolErrorCode::NotFound => {
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

/// Opens the file at `at` for reading only if it is a regular file, without ever blocking: the
/// open is non-blocking (a FIFO with no writer, or a device, would otherwise hang the call),
/// never follows a symlink, and the type is checked on the opened descriptor, so a swap between
/// check and open cannot matter. The returned file is back in blocking mode.
///
/// # Errors
/// `not_found`, `permission_denied` and other I/O errors naming `display`; `path_boundary` when
/// the name became a symlink; `invalid_request` "not a regular file" for directories (with a
/// hint to use list_dir), FIFOs, sockets and devices.
pub(crate) fn open_regular(at: &At, display: &str) -> ToolResult<(File, fs::Metadata)> {
    let file = at.open_read().map_err(|e| {
        // A Unix socket cannot be opened at all (ENXIO).
        if e.raw_os_error() == Some(nix::errno::Errno::ENXIO as i32) {
            ToolError::invalid(format!("{display}: not a regular file (a socket)"))
        } else {
            Workspace::open_error(display, &e)
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

/// Where a reader opens `p`: its directory beneath the workspace root and its name
/// ([`Workspace::at`]).
///
/// # Errors
/// `invalid_request` "not a regular file (use list_dir)" for the root itself; otherwise what
/// [`Workspace::open_error`] makes of the open's error (`not_found`, `path_boundary`, ...).
pub(crate) fn reader_at(
    ws: &Workspace,
    p: &crate::path::WorkspacePath,
    display: &str,
) -> ToolResult<At> {
    ws.at(p).map_err(|e| {
        if e.kind() == io::ErrorKind::IsADirectory {
            ToolError::invalid(format!("{display}: not a regular file (use list_dir)"))
        } else {
            Workspace::open_error(display, &e)
        }
    })
}

/// Reads a whole regular file of at most `max` bytes.
///
/// # Errors
/// What [`open_regular`] returns, and `limit_exceeded` (larger than `max`).
pub(crate) fn read_bounded(at: &At, display: &str, max: u64) -> ToolResult<Vec<u8>> {
    let (file, meta) = open_regular(at, display)?;
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

/// The permission bits of an existing file (not following a symlink), to keep them across a
/// rewrite.
pub(crate) fn existing_mode(at: &At) -> Option<u32> {
    at.stat().ok().flatten().map(|s| s.mode)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn at(dir: &std::path::Path, name: &str) -> At {
        let ws = Workspace::new(dir, true, false).unwrap();
        ws.at(&ws.resolve(name).unwrap()).unwrap()
    }

    #[test]
    fn commit_replaces_and_keeps_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.txt");
        fs::write(&p, "old").unwrap();
        fs::set_permissions(&p, Permissions::from_mode(0o751)).unwrap();
        let a = at(dir.path(), "f.txt");
        let staged = Staged::write(&a, "f.txt", b"new", existing_mode(&a)).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"old", "not visible before commit");
        staged.commit(&Precondition::None).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"new");
        assert_eq!(existing_mode(&a), Some(0o751));
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn failed_preconditions_change_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.txt");
        fs::write(&p, "old").unwrap();
        let a = at(dir.path(), "f.txt");
        let staged = Staged::write(&a, "f.txt", b"new", None).unwrap();
        let e = staged.commit(&Precondition::Absent).unwrap_err();
        assert_eq!(e.code(), crate::call::error::ToolErrorCode::Conflict);
        let staged = Staged::write(&a, "f.txt", b"new", None).unwrap();
        let e = staged
            .commit(&Precondition::Sha256(sha256_hex(b"other")))
            .unwrap_err();
        assert_eq!(e.code(), crate::call::error::ToolErrorCode::Conflict);
        assert_eq!(fs::read(&p).unwrap(), b"old");
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            1,
            "temp files removed"
        );
    }

    #[test]
    fn a_staged_write_lands_in_the_verified_directory_after_a_swap() {
        // The directory is swapped for a symlink to an outside directory between opening it and
        // committing: the write still lands in the directory that was opened, nothing outside.
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        let outside = tmp.path().join("outside");
        fs::create_dir_all(ws.join("sub")).unwrap();
        fs::create_dir_all(&outside).unwrap();
        let a = at(&ws, "sub/f.txt");
        fs::rename(ws.join("sub"), ws.join("moved")).unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("sub")).unwrap();
        let staged = Staged::write(&a, "sub/f.txt", b"new", None).unwrap();
        staged.commit(&Precondition::Absent).unwrap();
        assert_eq!(fs::read(ws.join("moved/f.txt")).unwrap(), b"new");
        assert_eq!(fs::read_dir(&outside).unwrap().count(), 0);
        assert_eq!(fs::read_dir(ws.join("moved")).unwrap().count(), 1);
    }
}
