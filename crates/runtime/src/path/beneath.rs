//! Opening what [`Workspace::resolve`] found relative to a directory descriptor, so that a
//! directory swapped for a symlink between the check and the use cannot redirect it.
//!
//! `resolve` checks a path by name (realpath, then a containment test). Another process can
//! replace a directory on that path by a symlink right after the check; an `open` by name would
//! then follow it out of the workspace. So every file tool opens the checked path *again*,
//! relative to a descriptor of the workspace root held since start (or of `/` when paths are
//! unrestricted): the canonical path below that base — only plain names, no `..`, and no symlink
//! at the time it was resolved — is opened with
//!
//! - `openat2(2)` and `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS` where the kernel has it (Linux
//!   5.6+): a resolution that would leave the base fails with `EXDEV`, whatever was swapped in;
//!   a link that stays beneath is followed;
//! - otherwise (older kernels, a seccomp filter answering `ENOSYS`/`EPERM`, other systems)
//!   `openat(2)` one component at a time with `O_NOFOLLOW | O_DIRECTORY`, which refuses every
//!   symlink (`ELOOP`/`ENOTDIR`); the canonical path has none unless one was swapped in.
//!
//! What happens to a file then happens through an [`At`]: such a directory descriptor and one
//! name in it. Reads open the name with `O_NOFOLLOW`; writes create their temporary file in that
//! directory (`O_CREAT | O_EXCL | O_NOFOLLOW`) and commit it with `renameat(2)`/`linkat(2)` on
//! the same descriptor, so the content lands in the directory that was verified, and a failed
//! write's temporary file is removed from it with `unlinkat(2)`.
//!
//! What this does not stop: a directory that is already open being *moved* out of the workspace
//! by another process (a descriptor follows its directory), and hard links (see `SECURITY.md`).
//!
//! [`Workspace::resolve`]: super::Workspace::resolve

use std::{
    ffi::{OsStr, OsString},
    fs::File,
    io,
    os::{
        fd::OwnedFd,
        unix::ffi::{OsStrExt, OsStringExt},
    },
    path::{Component, Path},
    sync::Arc,
};

use nix::{
    errno::Errno,
    fcntl::{AtFlags, OFlag, openat, renameat},
    sys::stat::{Mode, SFlag, fstatat, mkdirat},
    unistd::{UnlinkatFlags, fsync, linkat, unlinkat},
};

/// Flags of every directory opened on the way: readable (so it can be listed and fsynced), never
/// inherited by a child.
const DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_CLOEXEC);

/// Bytes of a target's name kept in its temporary file's name (NAME_MAX is 255 on Linux and
/// macOS; the rest is a dot, a random part and the suffix).
const TEMP_NAME_KEEP: usize = 180;

/// The suffix of every temporary file a write stages.
pub const TEMP_SUFFIX: &str = ".machine-mcp.tmp";

/// Attempts to find an unused temporary name before giving up.
const TEMP_ATTEMPTS: usize = 8;

/// Opens the directory `path` (by name: the workspace root at start, or `/`).
pub(super) fn open_dir_path(path: &Path) -> io::Result<OwnedFd> {
    nix::fcntl::open(path, DIR_FLAGS, Mode::empty()).map_err(io::Error::from)
}

/// Opens the directory `rel` beneath `base` (see the module docs). `rel` must consist of plain
/// names; an empty `rel` is `base` itself.
///
/// # Errors
/// `EXDEV` (from `openat2`) or `ELOOP`/`ENOTDIR` (from the per-component walk) when the path
/// leaves `base` or meets a swapped-in symlink; `ENOENT`, `EACCES`, ... as `openat(2)`.
pub(super) fn open_beneath(base: &Arc<OwnedFd>, rel: &Path) -> io::Result<Arc<OwnedFd>> {
    if rel.as_os_str().is_empty() {
        return Ok(base.clone());
    }
    if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(Errno::EXDEV.into());
    }
    // A path longer than PATH_MAX is walked a name at a time (no single call takes it).
    #[cfg(target_os = "linux")]
    match openat2_beneath(base, rel, DIR_FLAGS) {
        Some(Err(Errno::ENAMETOOLONG)) | None => {}
        Some(r) => return r.map(Arc::new).map_err(io::Error::from),
    }
    walk_beneath(base, rel)
}

/// Opens the entry `rel` beneath `base` with `flags`, which must hold `O_NOFOLLOW` (so that the
/// last name is never followed either): `openat2(2)` as [`open_beneath`], or its directory
/// opened by [`walk_beneath`] and the last name `openat(2)`-ed there. How `search_text` reads a
/// file and `list_files` checks an entry the walk found.
///
/// # Errors
/// As [`open_beneath`]; `EISDIR` for an empty `rel`; for the last name, `openat(2)`'s (`ENOENT`,
/// `ELOOP` for a symlink without `O_PATH`, ...).
pub(super) fn open_entry_beneath(
    base: &Arc<OwnedFd>,
    rel: &Path,
    flags: OFlag,
) -> io::Result<OwnedFd> {
    debug_assert!(flags.contains(OFlag::O_NOFOLLOW));
    if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(Errno::EXDEV.into());
    }
    let (parent, name) = match (rel.parent(), rel.file_name()) {
        (Some(parent), Some(name)) => (parent, name),
        _ => return Err(Errno::EISDIR.into()),
    };
    #[cfg(target_os = "linux")]
    match openat2_beneath(base, rel, flags) {
        Some(Err(Errno::ENAMETOOLONG)) | None => {}
        Some(r) => return r.map_err(io::Error::from),
    }
    let dir = walk_beneath(base, parent)?;
    Ok(openat(&*dir, name, flags, Mode::empty())?)
}

/// The per-component fallback of [`open_beneath`]: each name of `rel` opened from the previous
/// directory with `O_NOFOLLOW | O_DIRECTORY`; a symlink met on the way is `ELOOP` (the kernel
/// reports `ENOTDIR` for it; the name is looked at again to tell the two apart).
pub(super) fn walk_beneath(base: &Arc<OwnedFd>, rel: &Path) -> io::Result<Arc<OwnedFd>> {
    let mut cur = base.clone();
    for c in rel.components() {
        let name = c.as_os_str();
        cur = match openat(&*cur, name, DIR_FLAGS | OFlag::O_NOFOLLOW, Mode::empty()) {
            Ok(fd) => Arc::new(fd),
            Err(Errno::ENOTDIR) if is_symlink(&cur, name) => return Err(Errno::ELOOP.into()),
            Err(e) => return Err(e.into()),
        };
    }
    Ok(cur)
}

fn is_symlink(dir: &OwnedFd, name: &OsStr) -> bool {
    fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)
        .is_ok_and(|st| SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK)
}

/// `openat2(base, rel, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` (openat2(2)) with `flags`, or
/// `None` when the kernel (or a seccomp filter) does not offer it; then it is not tried again.
#[cfg(target_os = "linux")]
fn openat2_beneath(base: &OwnedFd, rel: &Path, flags: OFlag) -> Option<Result<OwnedFd, Errno>> {
    use std::sync::atomic::{AtomicBool, Ordering};

    use nix::fcntl::{OpenHow, ResolveFlag, openat2};
    static MISSING: AtomicBool = AtomicBool::new(false);
    if MISSING.load(Ordering::Relaxed) {
        return None;
    }
    let how = OpenHow::new()
        .flags(flags)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    match openat2(base, rel, how) {
        // ENOSYS: before Linux 5.6; EPERM: a seccomp filter; E2BIG/EINVAL: an older `open_how`.
        Err(Errno::ENOSYS | Errno::EPERM | Errno::E2BIG | Errno::EINVAL) => {
            MISSING.store(true, Ordering::Relaxed);
            None
        }
        r => Some(r),
    }
}

/// Like [`open_beneath`], creating the missing directories of `rel` (mode `0o777` minus the
/// umask) one at a time with `mkdirat(2)` and opening each with `O_NOFOLLOW`. Each directory it
/// created is pushed to `created` (as its parent and name, outermost first), so a caller can
/// remove them again.
///
/// # Errors
/// As [`open_beneath`], and `mkdirat(2)`'s (`EACCES`, `ENOSPC`, ...).
pub(super) fn create_beneath(
    base: &Arc<OwnedFd>,
    rel: &Path,
    created: &mut Vec<At>,
) -> io::Result<Arc<OwnedFd>> {
    match open_beneath(base, rel) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        r => return r,
    }
    let mut cur = base.clone();
    for c in rel.components() {
        let name = c.as_os_str();
        let flags = DIR_FLAGS | OFlag::O_NOFOLLOW;
        let next = match openat(&*cur, name, flags, Mode::empty()) {
            Err(Errno::ENOTDIR) if is_symlink(&cur, name) => return Err(Errno::ELOOP.into()),
            Err(Errno::ENOENT) => {
                match mkdirat(&*cur, name, Mode::from_bits_truncate(0o777)) {
                    Ok(()) => created.push(At {
                        dir: cur.clone(),
                        name: name.to_owned(),
                    }),
                    Err(Errno::EEXIST) => {}
                    Err(e) => return Err(e.into()),
                }
                openat(&*cur, name, flags, Mode::empty())?
            }
            r => r?,
        };
        cur = Arc::new(next);
    }
    Ok(cur)
}

/// What a name in a directory is, without following a symlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (not followed).
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

/// What `fstatat(2)` says of a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// What it is.
    pub kind: Kind,
    /// Its permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Its size in bytes (a symlink's: the length of its target).
    pub size: u64,
    /// Its modification time, when representable.
    pub modified: Option<std::time::SystemTime>,
}

/// One name in a directory opened beneath the workspace root (or `/` when paths are
/// unrestricted): where a file tool reads, stages, commits or removes. Built by
/// [`super::Workspace::at`] and [`super::Workspace::at_creating`]; cheap to clone (the directory
/// descriptor is shared).
#[derive(Debug, Clone)]
pub struct At {
    dir: Arc<OwnedFd>,
    name: OsString,
}

impl At {
    /// A name in an already verified directory.
    pub(super) fn new(dir: Arc<OwnedFd>, name: OsString) -> Self {
        Self { dir, name }
    }

    /// A name in a directory that [`super::Workspace::open_dir`] opened (a listed entry).
    pub fn new_in(dir: Arc<OwnedFd>, name: OsString) -> Self {
        Self { dir, name }
    }

    /// The name in the directory.
    pub fn name(&self) -> &OsStr {
        &self.name
    }

    /// Opens the name for reading, never following a symlink in it and never blocking on a FIFO
    /// or device (`O_NONBLOCK | O_NOCTTY | O_NOFOLLOW`; the caller checks the type on the
    /// descriptor).
    ///
    /// # Errors
    /// `openat(2)`'s: `ENOENT`, `EACCES`, `ELOOP` (a symlink), `ENXIO` (a socket), ...
    pub fn open_read(&self) -> io::Result<File> {
        let flags = OFlag::O_RDONLY
            | OFlag::O_NONBLOCK
            | OFlag::O_NOCTTY
            | OFlag::O_NOFOLLOW
            | OFlag::O_CLOEXEC;
        Ok(File::from(openat(
            &*self.dir,
            self.name.as_os_str(),
            flags,
            Mode::empty(),
        )?))
    }

    /// What the name is now (`fstatat(2)` with `AT_SYMLINK_NOFOLLOW`), or `None` if nothing has
    /// it.
    ///
    /// # Errors
    /// `fstatat(2)`'s other errors (`EACCES`, ...).
    pub fn stat(&self) -> io::Result<Option<Stat>> {
        match fstatat(
            &*self.dir,
            self.name.as_os_str(),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        ) {
            Ok(st) => {
                let fmt = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
                let kind = if fmt == SFlag::S_IFREG {
                    Kind::File
                } else if fmt == SFlag::S_IFDIR {
                    Kind::Dir
                } else if fmt == SFlag::S_IFLNK {
                    Kind::Symlink
                } else {
                    Kind::Other
                };
                let modified = u64::try_from(st.st_mtime).ok().map(|secs| {
                    std::time::UNIX_EPOCH
                        + std::time::Duration::new(
                            secs,
                            u32::try_from(st.st_mtime_nsec).unwrap_or(0),
                        )
                });
                // `st_mode` is a u16 on macOS.
                #[allow(clippy::useless_conversion)]
                let mode = u32::from(st.st_mode) & 0o7777;
                Ok(Some(Stat {
                    kind,
                    mode,
                    size: u64::try_from(st.st_size).unwrap_or(0),
                    modified,
                }))
            }
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Creates a new, empty temporary file beside the name: `.<name>.<random>.machine-mcp.tmp`
    /// (the name cut to 180 bytes), mode `0o600`, with `O_CREAT | O_EXCL | O_NOFOLLOW`.
    /// Returns the temporary file's name and the file open for writing.
    ///
    /// # Errors
    /// `openat(2)`'s (`EACCES`, `ENOSPC`, ...); `EEXIST` after 8 names taken.
    pub fn create_temp(&self) -> io::Result<(OsString, File)> {
        let bytes = self.name.as_bytes();
        let kept = &bytes[..bytes.len().min(TEMP_NAME_KEEP)];
        let mut last = Errno::EEXIST;
        for _ in 0..TEMP_ATTEMPTS {
            let mut name = b".".to_vec();
            name.extend_from_slice(kept);
            name.push(b'.');
            let random = uuid::Uuid::new_v4().simple().to_string();
            name.extend_from_slice(&random.as_bytes()[..12]);
            name.extend_from_slice(TEMP_SUFFIX.as_bytes());
            let name = OsString::from_vec(name);
            let flags = OFlag::O_WRONLY
                | OFlag::O_CREAT
                | OFlag::O_EXCL
                | OFlag::O_NOFOLLOW
                | OFlag::O_CLOEXEC;
            match openat(
                &*self.dir,
                name.as_os_str(),
                flags,
                Mode::from_bits_truncate(0o600),
            ) {
                Ok(fd) => return Ok((name, File::from(fd))),
                Err(Errno::EEXIST) => last = Errno::EEXIST,
                Err(e) => return Err(e.into()),
            }
        }
        Err(last.into())
    }

    /// Renames `from` (a name in the same directory) to this name, replacing what is there
    /// (`renameat(2)`; a symlink at the name is replaced, never followed).
    ///
    /// # Errors
    /// `renameat(2)`'s (`EISDIR` when the name is a directory, ...).
    pub fn replace_with(&self, from: &OsStr) -> io::Result<()> {
        renameat(&*self.dir, from, &*self.dir, self.name.as_os_str()).map_err(io::Error::from)
    }

    /// Gives the file named `from` (in the same directory) this name only if nothing has it yet
    /// (`linkat(2)`, which never replaces), then removes `from`.
    ///
    /// # Errors
    /// `AlreadyExists` when the name is taken; `linkat(2)`'s others (`EPERM` on file systems
    /// without hard links, ...).
    pub fn link_new(&self, from: &OsStr) -> io::Result<()> {
        linkat(
            &*self.dir,
            from,
            &*self.dir,
            self.name.as_os_str(),
            AtFlags::empty(),
        )?;
        let _ = unlinkat(&*self.dir, from, UnlinkatFlags::NoRemoveDir);
        Ok(())
    }

    /// Removes `other`, a name in the same directory (a file, or a symlink itself).
    ///
    /// # Errors
    /// `unlinkat(2)`'s.
    pub fn remove_sibling(&self, other: &OsStr) -> io::Result<()> {
        unlinkat(&*self.dir, other, UnlinkatFlags::NoRemoveDir).map_err(io::Error::from)
    }

    /// Removes the name (a file, or a symlink itself).
    ///
    /// # Errors
    /// `unlinkat(2)`'s (`ENOENT`, `EISDIR`, ...).
    pub fn remove_file(&self) -> io::Result<()> {
        self.remove_sibling(&self.name)
    }

    /// Removes the name, an empty directory.
    ///
    /// # Errors
    /// `unlinkat(2)`'s (`ENOTEMPTY`, ...).
    pub fn remove_dir(&self) -> io::Result<()> {
        unlinkat(&*self.dir, self.name.as_os_str(), UnlinkatFlags::RemoveDir)
            .map_err(io::Error::from)
    }

    /// Makes the directory's entries durable (`fsync(2)` on it); a failure is ignored, it is not
    /// worth failing a committed write for.
    pub fn sync_dir(&self) {
        let _ = fsync(&*self.dir);
    }
}
