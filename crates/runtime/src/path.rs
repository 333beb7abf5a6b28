//! Path confinement: turning a caller's path string into a checked [`WorkspacePath`].
//!
//! [`Workspace::resolve`] applies DESIGN §3 "Paths" in this order:
//!
//! 1. Reject empty strings and NUL bytes; `""` is not the workspace, `"."` is.
//! 2. Join a relative path to the canonical workspace root; keep an absolute one as given.
//! 3. If the path exists, canonicalize it with `realpath` (every symlink followed, `..` applied
//!    physically).
//! 4. If it does not exist, walk it forward: the existing prefix is canonicalized (symlinks
//!    followed), missing names are appended, and a `..` after a missing name cancels that name
//!    (exact, since a missing name cannot be a symlink). A dangling symlink is followed to the
//!    place a write would create.
//! 5. When paths are restricted, the result must lie inside the canonical root, compared by whole
//!    components (so a sibling `ws-other` is not inside `ws`); otherwise `path_boundary`.
//! 6. When paths are restricted, the result must not be one of the server's own files (its
//!    configuration, servers file, state directory, service definitions) nor lie below one;
//!    otherwise `path_boundary` naming what it is ([`own`]).
//! 7. When paths are restricted and a path does not resolve (a file named as a directory, a
//!    loop), its deepest ancestor that resolves is held to 5 and 6 before the file system's error
//!    is shown: the error never tells what exists where a caller may not look.
//!
//! Then what was resolved is opened again relative to a descriptor of the root ([`beneath`]):
//! [`Workspace::at`] and [`Workspace::open_dir`] are how every file tool reaches it, so a
//! directory swapped for a symlink after the check cannot redirect a read or a write.
//!
//! Results render workspace-relative (`"."` for the root) unless absolute output is on or the path
//! lies outside the workspace (possible only with unrestricted paths). A path that is not UTF-8
//! renders quoted and a quoted argument names those bytes again ([`quote`]).

use std::{
    ffi::OsStr,
    io,
    os::fd::OwnedFd,
    path::{Component, Path, PathBuf},
    sync::Arc,
};

use crate::call::error::{ToolError, ToolErrorCode, ToolResult};

pub mod beneath;
pub mod own;

pub use beneath::{At, Kind, Stat};
pub use own::{OwnKind, OwnPath};

/// Symlink hops followed while resolving a path whose target does not exist yet.
const MAX_SYMLINK_HOPS: usize = 40;

/// The workspace root and the path rules of the effective policy.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
    /// `root`, opened at start: what restricted paths are opened beneath.
    root_fd: Arc<OwnedFd>,
    /// `/`: what unrestricted paths outside the root are opened beneath.
    slash_fd: Arc<OwnedFd>,
    restricted: bool,
    absolute_output: bool,
    /// The server's own paths inside the root, refused while `restricted` ([`own`]).
    own: own::OwnFiles,
}

/// A path that passed [`Workspace::resolve`]: canonical (or canonical ancestor + new names), and
/// inside the workspace when paths are restricted. Only `resolve` builds one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspacePath {
    real: PathBuf,
    exists: bool,
}

impl WorkspacePath {
    /// The resolved filesystem path to operate on.
    pub fn real(&self) -> &Path {
        &self.real
    }

    /// Whether something existed at the path when it was resolved.
    pub fn exists(&self) -> bool {
        self.exists
    }
}

impl Workspace {
    /// A workspace rooted at `root` (canonicalized; must be a directory), which is opened and
    /// held open: paths are opened beneath that descriptor ([`beneath`]).
    ///
    /// # Errors
    /// `root` does not exist, cannot be canonicalized or opened, or is not a directory.
    pub fn new(root: &Path, restricted: bool, absolute_output: bool) -> io::Result<Self> {
        let root = std::fs::canonicalize(root)?;
        if !root.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("{} is not a directory", root.display()),
            ));
        }
        Ok(Self {
            root_fd: Arc::new(beneath::open_dir_path(&root)?),
            slash_fd: Arc::new(beneath::open_dir_path(Path::new("/"))?),
            root,
            restricted,
            absolute_output,
            own: own::OwnFiles::default(),
        })
    }

    /// The same workspace with the server's own paths `own` (module docs of [`own`]): while
    /// paths are restricted, they and everything below them are out of reach. Each is
    /// canonicalized now (the filesystem is read); one that does not exist yet is protected by
    /// its canonical existing prefix and missing names.
    #[must_use = "returns a workspace with these own paths; self is unchanged"]
    pub fn with_own_files(mut self, own: &[OwnPath]) -> Self {
        self.own = own::OwnFiles::new(&self.root, own);
        self
    }

    /// The same root with other path rules (no filesystem access).
    #[must_use = "returns a workspace with these rules; self is unchanged"]
    pub fn with_rules(&self, restricted: bool, absolute_output: bool) -> Self {
        Self {
            root: self.root.clone(),
            root_fd: self.root_fd.clone(),
            slash_fd: self.slash_fd.clone(),
            restricted,
            absolute_output,
            own: self.own.clone(),
        }
    }

    /// The canonical root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether paths must stay inside the root.
    pub fn restricted(&self) -> bool {
        self.restricted
    }

    /// Resolves `requested` by the rules in the module docs; a quoted form ([`quote`]) names
    /// the bytes it decodes to.
    ///
    /// # Errors
    /// - `invalid_request`: empty, contains NUL, or a symlink loop.
    /// - `path_boundary`: the result lies outside the workspace while paths are restricted, or
    ///   is (or lies below) one of the server's own paths ([`own`]).
    /// - `permission_denied` / `execution_failed`: the filesystem refused to resolve it.
    pub fn resolve(&self, requested: &str) -> ToolResult<WorkspacePath> {
        let path = argument(requested)?;
        self.resolve_path(&path, requested)
    }

    /// [`Workspace::resolve`] of an already decoded path; `requested` names it in errors.
    fn resolve_path(&self, path: &Path, requested: &str) -> ToolResult<WorkspacePath> {
        let joined = if path.is_absolute() {
            path.to_owned()
        } else {
            self.root.join(path)
        };
        let resolved = match resolve_physical(&joined, 0) {
            Ok(r) => r,
            Err(e) => {
                return Err(self
                    .refusal_of_unresolved(&joined, requested)
                    .unwrap_or_else(|| match e {
                        Resolve::Io(err) => ToolError::io(requested, &err),
                        Resolve::Loop => {
                            ToolError::invalid(format!("{requested}: too many symlink hops"))
                        }
                    }));
            }
        };
        if self.restricted && !resolved.real.starts_with(&self.root) {
            return Err(outside(requested));
        }
        if let Some(kind) = self.own_kind(&resolved.real) {
            return Err(own::refusal(requested, kind));
        }
        Ok(resolved)
    }

    /// Why a path that does not resolve (a file named as a directory, a symlink loop, a
    /// directory that cannot be read) is refused anyway while paths are restricted: its deepest
    /// ancestor that resolves lies outside the root or is one of the server's own paths. Checked
    /// before the file system's error is shown, so that error tells nothing about what exists
    /// where a caller may not look.
    fn refusal_of_unresolved(&self, joined: &Path, requested: &str) -> Option<ToolError> {
        if !self.restricted {
            return None;
        }
        let real = joined
            .ancestors()
            .skip(1)
            .find_map(|a| resolve_physical(a, 0).ok())?
            .real;
        if !real.starts_with(&self.root) {
            return Some(outside(requested));
        }
        self.own_kind(&real)
            .map(|kind| own::refusal(requested, kind))
    }

    /// Resolves `requested` without following a symlink in its last component: the parent is
    /// resolved by [`Workspace::resolve`] and the name appended. For operations on a directory
    /// entry itself (delete, move away).
    ///
    /// # Errors
    /// As [`Workspace::resolve`]; `invalid_request` when the path has no file name (`.`, `..`, `/`).
    pub fn resolve_entry(&self, requested: &str) -> ToolResult<WorkspacePath> {
        let decoded = argument(requested)?;
        let p = decoded.as_path();
        let name = match p.components().next_back() {
            Some(Component::Normal(n)) => n.to_owned(),
            _ => {
                return Err(ToolError::invalid(format!(
                    "{requested}: does not name a file"
                )));
            }
        };
        let parent = match p.parent() {
            Some(pp) if !pp.as_os_str().is_empty() => pp,
            _ => Path::new("."),
        };
        let dir = self.resolve_path(parent, requested)?;
        let real = dir.real.join(name);
        if let Some(kind) = self.own_kind(&real) {
            return Err(own::refusal(requested, kind));
        }
        let exists = std::fs::symlink_metadata(&real).is_ok();
        Ok(WorkspacePath { real, exists })
    }

    /// The descriptor `real` is opened beneath and the path below it: the root's for a path in
    /// the workspace, `/`'s for another one when paths are unrestricted. `EACCES` for one of the
    /// server's own paths while paths are restricted: every open beneath the root refuses it,
    /// whatever the caller resolved or a walk found.
    fn base_for<'a>(&self, real: &'a Path) -> io::Result<(&Arc<OwnedFd>, &'a Path)> {
        if self.own_kind(real).is_some() {
            return Err(nix::errno::Errno::EACCES.into());
        }
        if let Ok(rel) = real.strip_prefix(&self.root) {
            return Ok((&self.root_fd, rel));
        }
        match real.strip_prefix("/") {
            Ok(rel) if !self.restricted => Ok((&self.slash_fd, rel)),
            _ => Err(nix::errno::Errno::EXDEV.into()),
        }
    }

    /// The directory `p` names, opened beneath the workspace root (module docs of [`beneath`]).
    ///
    /// # Errors
    /// `EXDEV`/`ELOOP` (a directory on the way was swapped for a symlink; [`Workspace::open_error`]
    /// makes that `path_boundary`), `ENOTDIR`, `ENOENT`, `EACCES`, ... as `openat2(2)`/`openat(2)`.
    pub fn open_dir(&self, p: &WorkspacePath) -> io::Result<Arc<OwnedFd>> {
        let (base, rel) = self.base_for(&p.real)?;
        beneath::open_beneath(base, rel)
    }

    /// Opens the regular file at `real` (a canonical path a walk found, inside the workspace or,
    /// when paths are unrestricted, anywhere) for reading, beneath the workspace root, never
    /// following a symlink on the way or at its end: how `search_text` reads the files its walk
    /// found, so a directory swapped for a symlink during the walk cannot make it read outside.
    ///
    /// # Errors
    /// As [`Workspace::open_dir`] for the way there (`EXDEV`/`ELOOP` when it left the workspace,
    /// `ENOENT` when the name is not there any more: see [`Workspace::changed_under`]),
    /// `ENAMETOOLONG` when `real` is `PATH_MAX` bytes or longer, and `openat(2)`'s for the file
    /// (`ELOOP` for a symlink, `EACCES`, ...).
    pub fn open_file(&self, real: &Path) -> io::Result<std::fs::File> {
        use nix::fcntl::OFlag;
        // A path no single system call takes stays unread, as when files were opened by name:
        // no tool could name it in a later call either (it is listed as `path too long`).
        if real.as_os_str().len() >= libc::PATH_MAX as usize {
            return Err(nix::errno::Errno::ENAMETOOLONG.into());
        }
        let (base, rel) = self.base_for(real)?;
        let flags = OFlag::O_RDONLY
            | OFlag::O_NONBLOCK
            | OFlag::O_NOCTTY
            | OFlag::O_NOFOLLOW
            | OFlag::O_CLOEXEC;
        beneath::open_entry_beneath(base, rel, flags).map(std::fs::File::from)
    }

    /// Whether the entry a walk found at `real`, whose inode number the walk read (`d_ino`), is
    /// still that entry beneath the workspace root, reached without following a symlink: how
    /// `list_files` checks what its walk (which descends by name) listed before it shows it.
    /// `false` when the entry moved, vanished or was reached through a directory swapped for a
    /// symlink; hard links are not told apart (`SECURITY.md`).
    pub fn still_beneath(&self, real: &Path, ino: u64) -> bool {
        self.open_entry(real)
            .ok()
            .and_then(|fd| nix::sys::stat::fstat(&fd).ok())
            .is_some_and(|st| st.st_ino == ino)
    }

    /// Whether the path of a walk error is still reachable beneath the workspace root: `false`
    /// only when opening it says it changed ([`Workspace::changed_under`]); a path too long to
    /// open, or one that is not permitted, is reachable (its error is the one to report).
    pub fn reachable(&self, real: &Path) -> bool {
        self.open_entry(real)
            .map_or_else(|e| !Self::changed_under(&e), |_| true)
    }

    /// `real` opened beneath the base with `O_PATH | O_NOFOLLOW` (the entry itself, whatever it
    /// is).
    fn open_entry(&self, real: &Path) -> io::Result<OwnedFd> {
        use nix::fcntl::OFlag;
        let (base, rel) = self.base_for(real)?;
        let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        beneath::open_entry_beneath(base, rel, flags)
    }

    /// Whether `err`, from [`Workspace::open_file`] of a path a walk found, says the path changed
    /// under the walk (`ENOENT`, `ENOTDIR`, `EXDEV`, `ELOOP`): then the path may be one the walk
    /// read through a swapped-in symlink, and is not shown.
    pub fn changed_under(err: &io::Error) -> bool {
        use nix::errno::Errno;
        matches!(
            err.raw_os_error().map(Errno::from_raw),
            Some(Errno::ENOENT | Errno::ENOTDIR | Errno::EXDEV | Errno::ELOOP)
        )
    }

    /// `p`'s parent directory opened beneath the workspace root, and `p`'s last name: where a
    /// file tool reads, writes or removes `p`.
    ///
    /// # Errors
    /// As [`Workspace::open_dir`] for the parent (`ENOENT` when it is missing); `EISDIR` when
    /// `p` has no last name (the root itself, or `/`).
    pub fn at(&self, p: &WorkspacePath) -> io::Result<At> {
        let (base, rel) = self.base_for(&p.real)?;
        let (parent, name) = split(rel)?;
        Ok(At::new(beneath::open_beneath(base, parent)?, name))
    }

    /// Like [`Workspace::at`], creating `p`'s missing parent directories first (each one pushed
    /// to `created`, outermost first, as its parent and name).
    ///
    /// # Errors
    /// As [`Workspace::at`], and `mkdirat(2)`'s.
    pub fn at_creating(&self, p: &WorkspacePath, created: &mut Vec<At>) -> io::Result<At> {
        let (base, rel) = self.base_for(&p.real)?;
        let (parent, name) = split(rel)?;
        Ok(At::new(
            beneath::create_beneath(base, parent, created)?,
            name,
        ))
    }

    /// The tool error for an error of [`Workspace::open_dir`], [`Workspace::at`] or an [`At`]
    /// operation on `display`: `path_boundary` when the kernel refused to leave the workspace
    /// (`EXDEV`) or to follow a symlink (`ELOOP`) — a directory or link on the path changed
    /// after it was resolved; otherwise [`ToolError::io`].
    pub fn open_error(display: &str, err: &io::Error) -> ToolError {
        use nix::errno::Errno;
        match err.raw_os_error().map(Errno::from_raw) {
            Some(Errno::EXDEV | Errno::ELOOP) => ToolError::new(
                ToolErrorCode::PathBoundary,
                format!(
                    "{display}: resolves outside the workspace (a directory or link on the path \
                     changed after it was checked); nothing was changed"
                ),
            )
            .detail("path", display),
            _ => ToolError::io(display, err),
        }
    }

    /// Whether `real` (an already canonical path) is inside the workspace.
    pub fn contains(&self, real: &Path) -> bool {
        real.starts_with(&self.root)
    }

    /// Renders a canonical path for output: workspace-relative unless absolute output is on or
    /// the path is outside the workspace; quoted when it is not UTF-8 ([`quote::render`]).
    pub fn display(&self, real: &Path) -> String {
        if !self.absolute_output
            && let Ok(rel) = real.strip_prefix(&self.root)
        {
            if rel.as_os_str().is_empty() {
                return ".".to_owned();
            }
            return quote::render(rel.as_os_str());
        }
        quote::render(real.as_os_str())
    }
}

/// `rel`'s parent and last name.
fn split(rel: &Path) -> io::Result<(&Path, std::ffi::OsString)> {
    match rel.file_name() {
        Some(name) => Ok((rel.parent().unwrap_or(Path::new("")), name.to_owned())),
        None => Err(nix::errno::Errno::EISDIR.into()),
    }
}

/// The refusal of `requested`, which resolves outside the workspace while paths are restricted.
fn outside(requested: &str) -> ToolError {
    ToolError::new(
        ToolErrorCode::PathBoundary,
        format!("{requested}: resolves outside the workspace"),
    )
    .detail("path", requested)
}

/// A caller's path string as a path: decoded when quoted ([`quote::parse`]), else as written.
///
/// # Errors
/// `invalid_request` when it is empty or contains NUL (also a quoted `\x00`).
fn argument(requested: &str) -> ToolResult<PathBuf> {
    let path = quote::parse(requested).map_or_else(|| PathBuf::from(requested), PathBuf::from);
    if path.as_os_str().is_empty() {
        return Err(ToolError::invalid(
            "path is empty (use \".\" for the workspace root)",
        ));
    }
    if path.as_os_str().as_encoded_bytes().contains(&0) {
        return Err(ToolError::invalid("path contains a NUL byte"));
    }
    Ok(path)
}

enum Resolve {
    Io(io::Error),
    Loop,
}

fn resolve_physical(path: &Path, hops: usize) -> Result<WorkspacePath, Resolve> {
    if hops > MAX_SYMLINK_HOPS {
        return Err(Resolve::Loop);
    }
    match std::fs::canonicalize(path) {
        Ok(real) => return Ok(WorkspacePath { real, exists: true }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) if e.raw_os_error() == Some(ELOOP) => return Err(Resolve::Loop),
        Err(e) => return Err(Resolve::Io(e)),
    }
    // Something is missing. Walk forward: `cur` is the canonical path of the existing prefix,
    // `tail` the missing names after it (a `..` cancels the last missing name lexically, which is
    // exact because a missing name cannot be a symlink).
    let mut cur = PathBuf::from("/");
    let mut tail: Vec<&OsStr> = Vec::new();
    let comps: Vec<Component<'_>> = path.components().collect();
    for (i, comp) in comps.iter().enumerate() {
        match comp {
            Component::Prefix(_) | Component::RootDir | Component::CurDir => {}
            Component::ParentDir => {
                if tail.pop().is_none() {
                    cur.pop();
                }
            }
            Component::Normal(name) if !tail.is_empty() => tail.push(name),
            Component::Normal(name) => {
                let candidate = cur.join(name);
                match std::fs::symlink_metadata(&candidate) {
                    Ok(meta) if meta.file_type().is_symlink() => {
                        match std::fs::canonicalize(&candidate) {
                            Ok(real) => cur = real,
                            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                                // A dangling link: continue at its target with the rest appended.
                                let target = std::fs::read_link(&candidate).map_err(Resolve::Io)?;
                                let mut next = cur.join(target);
                                for c in &comps[i + 1..] {
                                    next.push(c.as_os_str());
                                }
                                return resolve_physical(&next, hops + 1);
                            }
                            Err(e) if e.raw_os_error() == Some(ELOOP) => return Err(Resolve::Loop),
                            Err(e) => return Err(Resolve::Io(e)),
                        }
                    }
                    Ok(_) => cur = candidate,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => tail.push(name),
                    Err(e) => return Err(Resolve::Io(e)),
                }
            }
        }
    }
    let exists = tail.is_empty();
    for name in tail {
        cur.push(name);
    }
    Ok(WorkspacePath { real: cur, exists })
}

/// `ELOOP` on Linux: too many levels of symbolic links.
const ELOOP: i32 = 40;

/// The order of a depth-first walk with sorted directories: byte order with `/` below every
/// other byte (so `a/b` sorts before `a-b`, as `a` sorts before `a-b`). Same as comparing by
/// components for the walker's normalized paths, at the cost of one pass over the bytes.
pub(crate) fn path_order(a: &Path, b: &Path) -> std::cmp::Ordering {
    use std::os::unix::ffi::OsStrExt;
    let key = |c: u8| if c == b'/' { 0 } else { c };
    a.as_os_str()
        .as_bytes()
        .iter()
        .map(|&c| key(c))
        .cmp(b.as_os_str().as_bytes().iter().map(|&c| key(c)))
}

pub mod quote;

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    struct Fixture {
        _tmp: tempfile::TempDir,
        ws: PathBuf,
        outside: PathBuf,
    }

    fn fixture() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        let outside = tmp.path().join("ws-sibling");
        std::fs::create_dir_all(ws.join("sub")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(ws.join("sub/a.txt"), "a").unwrap();
        std::fs::write(outside.join("secret.txt"), "s").unwrap();
        symlink(outside.join("secret.txt"), ws.join("link-file")).unwrap();
        symlink(&outside, ws.join("link-dir")).unwrap();
        symlink(ws.join("sub"), ws.join("inner-link")).unwrap();
        symlink(outside.join("missing.txt"), ws.join("dangling")).unwrap();
        Fixture {
            _tmp: tmp,
            ws,
            outside,
        }
    }

    fn code(r: ToolResult<WorkspacePath>) -> ToolErrorCode {
        r.unwrap_err().code()
    }

    #[test]
    fn path_order_is_component_order() {
        let mut v: Vec<PathBuf> = ["a-b", "a/b", "a/b/c", "a.txt", "a", "ab", "a/c"]
            .iter()
            .map(PathBuf::from)
            .collect();
        let mut by_components = v.clone();
        by_components.sort();
        v.sort_by(|a, b| path_order(a, b));
        assert_eq!(v, by_components);
    }

    #[test]
    fn restricted_paths_deny_every_escape() {
        let f = fixture();
        let w = Workspace::new(&f.ws, true, false).unwrap();
        for p in [
            "link-file",
            "link-dir/secret.txt",
            "link-dir/new.txt",
            "../ws-sibling/secret.txt",
            "sub/../../ws-sibling/secret.txt",
            "dangling",
            "/etc/passwd",
        ] {
            assert_eq!(code(w.resolve(p)), ToolErrorCode::PathBoundary, "{p}");
        }
        let abs = f.outside.join("secret.txt");
        assert_eq!(
            code(w.resolve(abs.to_str().unwrap())),
            ToolErrorCode::PathBoundary
        );
    }

    #[test]
    fn restricted_paths_allow_inside() {
        let f = fixture();
        let w = Workspace::new(&f.ws, true, false).unwrap();
        let p = w.resolve("sub/a.txt").unwrap();
        assert!(p.exists());
        assert_eq!(w.display(p.real()), "sub/a.txt");
        let p = w.resolve("inner-link/a.txt").unwrap();
        assert_eq!(w.display(p.real()), "sub/a.txt");
        let p = w.resolve("sub/new/deeper.txt").unwrap();
        assert!(!p.exists());
        assert_eq!(w.display(p.real()), "sub/new/deeper.txt");
        assert_eq!(w.display(w.resolve(".").unwrap().real()), ".");
    }

    #[test]
    fn dotdot_after_a_missing_component_cancels_it() {
        let f = fixture();
        let w = Workspace::new(&f.ws, true, false).unwrap();
        assert_eq!(
            code(w.resolve("nope/../../ws-sibling/secret.txt")),
            ToolErrorCode::PathBoundary
        );
        assert_eq!(
            code(w.resolve("nope/../link-dir/x")),
            ToolErrorCode::PathBoundary
        );
        let p = w.resolve("nope/../sub/a.txt").unwrap();
        assert!(p.exists());
        assert_eq!(w.display(p.real()), "sub/a.txt");
        let p = w.resolve("a/b/../c.txt").unwrap();
        assert_eq!(w.display(p.real()), "a/c.txt");
    }

    #[test]
    fn unrestricted_paths_resolve_outside_and_render_absolute() {
        let f = fixture();
        let w = Workspace::new(&f.ws, false, true).unwrap();
        let p = w.resolve("link-file").unwrap();
        assert_eq!(
            p.real(),
            std::fs::canonicalize(f.outside.join("secret.txt")).unwrap()
        );
        assert!(Path::new(&w.display(p.real())).is_absolute());
    }

    #[test]
    fn a_directory_swapped_for_a_symlink_after_resolving_is_refused() {
        let f = fixture();
        let w = Workspace::new(&f.ws, true, false).unwrap();
        let p = w.resolve("sub/a.txt").unwrap();
        std::fs::rename(f.ws.join("sub"), f.ws.join("sub-moved")).unwrap();
        symlink(&f.outside, f.ws.join("sub")).unwrap();
        let e = w.at(&p).unwrap_err();
        assert_eq!(
            Workspace::open_error("sub/a.txt", &e).code(),
            ToolErrorCode::PathBoundary,
            "{e}"
        );
        // The per-component fallback (no openat2) refuses it too.
        let e = beneath::walk_beneath(&w.root_fd, Path::new("sub")).unwrap_err();
        assert_eq!(
            Workspace::open_error("sub", &e).code(),
            ToolErrorCode::PathBoundary,
            "{e}"
        );
        assert!(beneath::walk_beneath(&w.root_fd, Path::new("sub-moved")).is_ok());
    }

    #[test]
    fn resolved_paths_open_beneath_the_root() {
        use std::io::Read;
        let f = fixture();
        let w = Workspace::new(&f.ws, true, false).unwrap();
        // A symlink inside that stays inside keeps working: what is opened is its target.
        let p = w.resolve("inner-link/a.txt").unwrap();
        let mut text = String::new();
        w.at(&p)
            .unwrap()
            .open_read()
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "a");
        assert!(w.open_dir(&w.resolve(".").unwrap()).is_ok());
        assert_eq!(
            w.at(&w.resolve(".").unwrap()).unwrap_err().kind(),
            io::ErrorKind::IsADirectory
        );
        // Missing parents are created one by one, and reported outermost first.
        let p = w.resolve("new/deeper/x.txt").unwrap();
        let mut created = Vec::new();
        let at = w.at_creating(&p, &mut created).unwrap();
        assert_eq!(at.name(), "x.txt");
        let names: Vec<_> = created.iter().map(|a| a.name().to_owned()).collect();
        assert_eq!(names, ["new", "deeper"]);
        assert!(f.ws.join("new/deeper").is_dir());
    }

    #[test]
    fn bad_strings_are_invalid() {
        let f = fixture();
        let w = Workspace::new(&f.ws, true, false).unwrap();
        assert_eq!(code(w.resolve("")), ToolErrorCode::InvalidRequest);
        assert_eq!(code(w.resolve("a\0b")), ToolErrorCode::InvalidRequest);
    }
}
