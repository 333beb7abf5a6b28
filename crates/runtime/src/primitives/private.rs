//! Owner-only files and directories of the state directory: directories created 0700, files
//! written 0600 complete-before-visible (a temporary file in the same directory, fsynced, then
//! renamed over the target), and bounded reads.

use std::{
    fs,
    io::{self, Read, Write},
    os::unix::fs::{DirBuilderExt, PermissionsExt},
    path::Path,
};

/// Creates `dir` and its missing parents with mode 0700; an existing directory is narrowed to
/// 0700.
///
/// # Errors
/// The directory cannot be created or its mode set.
pub(crate) fn create_dir(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
}

/// Writes `bytes` to `path` with mode 0600: readers see the old content or the new, never a
/// part.
///
/// # Errors
/// The directory is missing or unwritable, or the disk is full; no temporary file is left.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "a file path has a parent"))?;
    // `tempfile` creates the file 0600 and removes it when dropped unpersisted.
    let mut tmp = tempfile::Builder::new().prefix(".tmp-").tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Reads at most `max` bytes of the regular file `path`.
///
/// # Errors
/// The file cannot be opened or read, or it is larger than `max` (`InvalidData`).
pub(crate) fn read_capped(path: &Path, max: usize) -> io::Result<Vec<u8>> {
    let file = fs::File::open(path)?;
    let mut out = Vec::new();
    file.take(max as u64 + 1).read_to_end(&mut out)?;
    if out.len() > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {max} bytes"),
        ));
    }
    Ok(out)
}

/// An advisory lock (`flock`) on a file, held until dropped. The kernel releases it when the
/// holder dies, however it ends, so a lock held is a holder alive.
pub(crate) type Lock = nix::fcntl::Flock<fs::File>;

/// Takes the exclusive lock of `path` (created 0600 when missing): waits for it when `wait`,
/// else `None` while another holds it.
///
/// # Errors
/// The file cannot be created or opened, or locking fails for another reason.
pub(crate) fn lock(path: &Path, wait: bool) -> io::Result<Option<Lock>> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)?;
    let arg = if wait {
        nix::fcntl::FlockArg::LockExclusive
    } else {
        nix::fcntl::FlockArg::LockExclusiveNonblock
    };
    match nix::fcntl::Flock::lock(file, arg) {
        Ok(l) => Ok(Some(l)),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(io::Error::from(e)),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    #[test]
    fn files_and_directories_are_owner_only() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("a/b");
        create_dir(&d).unwrap();
        write_atomic(&d.join("f"), b"x").unwrap();
        assert_eq!(fs::metadata(&d).unwrap().mode() & 0o777, 0o700);
        assert_eq!(fs::metadata(d.join("f")).unwrap().mode() & 0o777, 0o600);
        assert_eq!(
            fs::read_dir(&d).unwrap().count(),
            1,
            "no temporary file left"
        );
        assert!(read_capped(&d.join("f"), 0).is_err());
        assert_eq!(read_capped(&d.join("f"), 1).unwrap(), b"x");
    }

    #[test]
    fn a_lock_is_exclusive_until_dropped() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("l");
        let held = lock(&p, false).unwrap().expect("free");
        assert!(lock(&p, false).unwrap().is_none());
        drop(held);
        assert!(lock(&p, false).unwrap().is_some());
    }
}
