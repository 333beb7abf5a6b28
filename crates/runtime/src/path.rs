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
//!
//! Results render workspace-relative (`"."` for the root) unless absolute output is on or the path
//! lies outside the workspace (possible only with unrestricted paths). A path that is not UTF-8
//! renders quoted and a quoted argument names those bytes again ([`quote`]).

use std::{
    ffi::OsStr,
    io,
    path::{Component, Path, PathBuf},
};

use crate::mcp::error::{ToolError, ToolErrorCode, ToolResult};

/// Symlink hops followed while resolving a path whose target does not exist yet.
const MAX_SYMLINK_HOPS: usize = 40;

/// The workspace root and the path rules of the effective policy.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
    restricted: bool,
    absolute_output: bool,
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
    /// A workspace rooted at `root` (canonicalized; must be a directory).
    ///
    /// # Errors
    /// `root` does not exist, cannot be canonicalized, or is not a directory.
    pub fn new(root: &Path, restricted: bool, absolute_output: bool) -> io::Result<Self> {
        let root = std::fs::canonicalize(root)?;
        if !root.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("{} is not a directory", root.display()),
            ));
        }
        Ok(Self {
            root,
            restricted,
            absolute_output,
        })
    }

    /// The same root with other path rules (no filesystem access).
    #[must_use = "returns a workspace with these rules; self is unchanged"]
    pub fn with_rules(&self, restricted: bool, absolute_output: bool) -> Self {
        Self {
            root: self.root.clone(),
            restricted,
            absolute_output,
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
    /// - `path_boundary`: the result lies outside the workspace while paths are restricted.
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
        let resolved = resolve_physical(&joined, 0).map_err(|e| match e {
            Resolve::Io(err) => ToolError::io(requested, &err),
            Resolve::Loop => ToolError::invalid(format!("{requested}: too many symlink hops")),
        })?;
        if self.restricted && !resolved.real.starts_with(&self.root) {
            return Err(ToolError::new(
                ToolErrorCode::PathBoundary,
                format!("{requested}: resolves outside the workspace"),
            )
            .detail("path", requested));
        }
        Ok(resolved)
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
        let exists = std::fs::symlink_metadata(&real).is_ok();
        Ok(WorkspacePath { real, exists })
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
    fn bad_strings_are_invalid() {
        let f = fixture();
        let w = Workspace::new(&f.ws, true, false).unwrap();
        assert_eq!(code(w.resolve("")), ToolErrorCode::InvalidRequest);
        assert_eq!(code(w.resolve("a\0b")), ToolErrorCode::InvalidRequest);
    }
}
