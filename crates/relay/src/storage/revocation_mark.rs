//! The revocation mark: a value read without a query that changes after every revocation
//! committed to the store, by this process or another one (the CLI), so that credentials
//! already checked can be kept in memory (`storage::credentials`) and a revoked one is still
//! refused at the next request.
//!
//! Rules:
//! - A file store's mark lives in `<database>-revocations` beside the database file (owner-only,
//!   never followed through a symlink): 8 bytes at offset 0, read with one `pread` per check.
//! - It is written in place (a reader's open descriptor sees every write), after
//!   the revoking transaction has committed — never before, or a reader could re-read the
//!   credential before the revocation is visible and keep it under the new mark.
//! - A file replaced or removed at its path (by hand) is opened again — created if missing — by
//!   `MarkFile::refresh`, which the relay runs every second and a writer before each write;
//!   until then the relay sees revocations through the store's revocation counter, within a
//!   second. Only a regular file is used, made owner-only when opened.
//! - What is written is a new random value, not a counter, so two processes writing at once can
//!   never leave the mark at a value a reader already saw.
//! - This process also counts its own announcements, so an in-memory store (no file) and a
//!   revocation made here are seen without reading the file.
//! - When the file cannot be opened or read, the mark is unknown (`MarkFile::read` gives `None`)
//!   and nothing cached may be trusted. A write that fails is logged; that revocation then reaches
//!   a running relay through the store's revocation counter, which it polls every second (the
//!   slower path every revocation also takes).

use std::{
    fs::{File, Permissions},
    os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt},
    path::{Path, PathBuf},
    sync::atomic::{AtomicU64, Ordering},
};

use lock::Lock;
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
    /// The file's path; `None` for an in-memory store.
    path: Option<PathBuf>,
    /// The open file; `None` while it cannot be opened (the mark is unknown).
    file: Lock<Option<File>>,
    local: AtomicU64,
}

/// The mark file of the database at `database`: its name with `-revocations` appended.
pub(crate) fn path_of(database: &Path) -> PathBuf {
    let mut name = database.as_os_str().to_owned();
    name.push("-revocations");
    PathBuf::from(name)
}

/// Opens (creating) the regular file at `path`, never through a symlink, and makes it
/// owner-only; logs why when it cannot.
fn open_file(path: &Path) -> Option<File> {
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .and_then(|f| {
            if f.metadata()?.is_file() {
                Ok(f)
            } else {
                Err(std::io::Error::other("not a regular file"))
            }
        });
    match opened {
        Ok(f) => {
            // Owner-only even when it existed with a wider mode (not possible when another
            // user owns it: that is logged by the store's own checks, not here).
            let _ = f.set_permissions(Permissions::from_mode(0o600));
            Some(f)
        }
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "the revocation mark cannot be opened: a relay on this store re-reads every credential from the store, and revocations made by other processes reach it within a second");
            None
        }
    }
}

impl MarkFile {
    /// The mark of the database at `database`, its file opened (created owner-only if missing).
    /// A file that cannot be opened is logged and leaves the mark unknown until
    /// [`Self::refresh`] opens it.
    pub(crate) fn open(database: &Path) -> Self {
        let path = path_of(database);
        let file = open_file(&path);
        Self {
            path: Some(path),
            file: Lock::new(file),
            local: AtomicU64::new(0),
        }
    }

    /// The mark of an in-memory store: this process's count alone.
    pub(crate) fn memory() -> Self {
        Self {
            path: None,
            file: Lock::new(None),
            local: AtomicU64::new(0),
        }
    }

    /// The mark now; `None` when it cannot be read (see the module).
    pub(crate) fn read(&self) -> Option<RevocationMark> {
        let local = self.local.load(Ordering::Acquire);
        if self.path.is_none() {
            return Some(RevocationMark { shared: 0, local });
        }
        let g = self.file.lock();
        let f = g.as_ref()?;
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
        Some(RevocationMark {
            shared: u64::from_le_bytes(b),
            local,
        })
    }

    /// Opens the mark's file again when the one at its path is not the one held open (it was
    /// replaced, removed or could not be opened before): a process holding the old file would
    /// not see the writes of others. Called by the relay every second and before each
    /// announcement. Cheap when nothing changed (one `stat` and one `fstat`).
    pub(crate) fn refresh(&self) {
        let Some(path) = &self.path else { return };
        let at_path = std::fs::symlink_metadata(path)
            .ok()
            .map(|m| (m.dev(), m.ino()));
        let held = self
            .file
            .lock()
            .as_ref()
            .and_then(|f| f.metadata().ok())
            .map(|m| (m.dev(), m.ino()));
        if held.is_some() && held == at_path {
            return;
        }
        let reopened = open_file(path);
        *self.file.lock() = reopened;
    }

    /// Moves the mark: called after a revoking transaction committed. A write that fails is
    /// logged; this process's own count moves regardless.
    pub(crate) fn announce(&self) {
        self.local.fetch_add(1, Ordering::AcqRel);
        if self.path.is_none() {
            return;
        }
        self.refresh();
        let g = self.file.lock();
        if let Some(f) = g.as_ref() {
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

    /// Regression: a relay holding a mark file that was replaced (a new inode at its path) did
    /// not see the CLI's writes to the new one until it restarted. The relay's refresh (every
    /// second) opens the file at the path again, after which revocations are seen at once.
    #[test]
    fn a_replaced_mark_file_is_opened_again_and_then_seen_at_once() {
        let d = tempfile::tempdir().unwrap();
        let db = d.path().join("relay.db");
        let relay = MarkFile::open(&db);
        let before = relay.read().unwrap();
        let replacement = d.path().join("x");
        std::fs::write(&replacement, [0u8; 8]).unwrap();
        std::fs::rename(&replacement, path_of(&db)).unwrap();
        // The CLI writes the new file; the relay still reads the one it holds.
        MarkFile::open(&db).announce();
        assert_eq!(relay.read(), Some(before));
        relay.refresh();
        let opened = relay.read().unwrap();
        assert_ne!(
            opened, before,
            "the refresh reads the new file, which moved"
        );
        MarkFile::open(&db).announce();
        assert_ne!(
            relay.read(),
            Some(opened),
            "a revocation after the refresh is seen at once"
        );
        // Removed: the next refresh creates it again.
        std::fs::remove_file(path_of(&db)).unwrap();
        relay.refresh();
        let created = relay.read().unwrap();
        MarkFile::open(&db).announce();
        assert_ne!(relay.read(), Some(created));
    }

    /// A mark file that exists with a wider mode is made owner-only when opened.
    #[test]
    fn an_existing_mark_file_is_made_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let db = d.path().join("relay.db");
        std::fs::write(path_of(&db), b"").unwrap();
        std::fs::set_permissions(path_of(&db), std::fs::Permissions::from_mode(0o644)).unwrap();
        let _m = MarkFile::open(&db);
        let mode = std::fs::metadata(path_of(&db))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    /// A FIFO or a directory at the mark's path is not used: the mark is unknown.
    #[test]
    fn a_mark_path_that_is_not_a_regular_file_leaves_the_mark_unknown() {
        let d = tempfile::tempdir().unwrap();
        let db = d.path().join("relay.db");
        std::fs::create_dir(path_of(&db)).unwrap();
        assert_eq!(MarkFile::open(&db).read(), None);
        std::fs::remove_dir(path_of(&db)).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(path_of(&db))
            .status()
            .unwrap();
        assert!(made.success());
        assert_eq!(MarkFile::open(&db).read(), None);
    }

    #[test]
    fn an_in_memory_store_counts_its_own_revocations() {
        let m = MarkFile::memory();
        let before = m.read().unwrap();
        m.announce();
        assert_ne!(m.read().unwrap(), before);
    }
}
