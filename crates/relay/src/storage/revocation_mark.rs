//! The revocation mark: a value read without a query that changes after every revocation
//! committed to the store, by this process or another one (the CLI), so that credentials
//! already checked can be kept in memory (`storage::credentials`) and a revoked one is still
//! refused at the next request.
//!
//! Rules:
//! - A file store's mark lives in `<database>-revocations` beside the database file (owner-only,
//!   never followed through a symlink): 8 bytes at offset 0, read with one `pread` per check.
//! - It is written in place, never replaced (a reader's open descriptor sees every write), after
//!   the revoking transaction has committed — never before, or a reader could re-read the
//!   credential before the revocation is visible and keep it under the new mark.
//! - What is written is a new random value, not a counter, so two processes writing at once can
//!   never leave the mark at a value a reader already saw.
//! - This process also counts its own announcements, so an in-memory store (no file) and a
//!   revocation made here are seen without reading the file.
//! - When the file cannot be opened or read, the mark is unknown (`MarkFile::read` gives `None`)
//!   and nothing cached may be trusted. A write that fails is logged; that revocation then reaches
//!   a running relay through the store's revocation counter, which it polls every second (the
//!   slower path every revocation also takes).

use std::{
    fs::File,
    os::unix::fs::{FileExt, OpenOptionsExt},
    path::{Path, PathBuf},
    sync::atomic::{AtomicU64, Ordering},
};

use rand::RngCore;

/// One observation of the mark: equal observations mean no revocation was committed in between
/// (as far as the mark file tells; see the module).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RevocationMark {
    /// The file's value (0 for a store without a file, or a file not written yet).
    shared: u64,
    /// Revocations announced by this process.
    local: u64,
}

/// The mark of one store: its file (if the store is a file) and this process's count.
#[derive(Debug)]
pub(crate) struct MarkFile {
    /// `None`: an in-memory store. `Some(Err(..))`: the file could not be opened (the mark is
    /// unknown for good).
    file: Option<Result<File, String>>,
    local: AtomicU64,
}

/// The mark file of the database at `database`: its name with `-revocations` appended.
pub(crate) fn path_of(database: &Path) -> PathBuf {
    let mut name = database.as_os_str().to_owned();
    name.push("-revocations");
    PathBuf::from(name)
}

impl MarkFile {
    /// The mark of the database at `database`, its file opened (created owner-only if missing).
    /// A file that cannot be opened is logged once and leaves the mark unknown.
    pub(crate) fn open(database: &Path) -> Self {
        let path = path_of(database);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| {
                tracing::warn!(path = %path.display(), error = %e, "the revocation mark cannot be opened: every request re-reads its credential from the store");
                e.to_string()
            });
        Self {
            file: Some(file),
            local: AtomicU64::new(0),
        }
    }

    /// The mark of an in-memory store: this process's count alone.
    pub(crate) fn memory() -> Self {
        Self {
            file: None,
            local: AtomicU64::new(0),
        }
    }

    /// The mark now; `None` when it cannot be read (see the module).
    pub(crate) fn read(&self) -> Option<RevocationMark> {
        let local = self.local.load(Ordering::Acquire);
        let shared = match &self.file {
            None => 0,
            Some(Err(_)) => return None,
            Some(Ok(f)) => {
                let mut b = [0u8; 8];
                let mut got = 0;
                while got < b.len() {
                    match f.read_at(&mut b[got..], got as u64) {
                        Ok(0) => break,
                        Ok(n) => got += n,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(_) => return None,
                    }
                }
                u64::from_le_bytes(b)
            }
        };
        Some(RevocationMark { shared, local })
    }

    /// Moves the mark: called after a revoking transaction committed. A write that fails is
    /// logged; this process's own count moves regardless.
    pub(crate) fn announce(&self) {
        self.local.fetch_add(1, Ordering::AcqRel);
        if let Some(Ok(f)) = &self.file {
            let value = rand::thread_rng().next_u64();
            if let Err(e) = f.write_all_at(&value.to_le_bytes(), 0) {
                tracing::warn!(error = %e, "the revocation mark cannot be written: a running relay notices this revocation within a second");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_revocation_announced_by_another_process_moves_the_mark_at_once() {
        let d = tempfile::tempdir().unwrap();
        let db = d.path().join("relay.db");
        // Two handles on one file stand for the relay and the CLI (two processes).
        let (relay, cli) = (MarkFile::open(&db), MarkFile::open(&db));
        let before = relay.read().expect("a readable mark");
        assert_eq!(
            relay.read(),
            Some(before),
            "nothing revoked: the mark stays"
        );
        cli.announce();
        assert_ne!(
            relay.read(),
            Some(before),
            "the CLI's revocation is seen at once"
        );
        let after = relay.read().unwrap();
        relay.announce();
        assert_ne!(
            relay.read(),
            Some(after),
            "this process's own revocation too"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path_of(&db))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "owner-only");
    }

    #[test]
    fn a_mark_file_that_is_a_symlink_is_not_followed_and_the_mark_is_unknown() {
        let d = tempfile::tempdir().unwrap();
        let db = d.path().join("relay.db");
        let elsewhere = d.path().join("elsewhere");
        std::fs::write(&elsewhere, b"").unwrap();
        std::os::unix::fs::symlink(&elsewhere, path_of(&db)).unwrap();
        let m = MarkFile::open(&db);
        assert_eq!(m.read(), None, "an unknown mark trusts nothing cached");
        m.announce();
        assert_eq!(
            std::fs::read(&elsewhere).unwrap(),
            b"",
            "the link's target is untouched"
        );
    }

    #[test]
    fn an_in_memory_store_counts_its_own_revocations() {
        let m = MarkFile::memory();
        let before = m.read().unwrap();
        m.announce();
        assert_ne!(m.read().unwrap(), before);
    }
}
