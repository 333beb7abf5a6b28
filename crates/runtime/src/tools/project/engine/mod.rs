//! The pure part of the project tools: what a project root holds ([`detect`]: build systems,
//! package managers, their script and target names, CI entry points, version hints, docs), the
//! registered commands ([`manifest`]: `.machine-mcp/commands.toml` and the automatic aliases),
//! the Makefile target parser ([`makefile`]) and the repository facts ([`repo`], through the git
//! family's safe engine).
//!
//! Every project file is read through [`ProjectDir::read`]: at most
//! [`PROJECT_FILE_MAX_BYTES`], opened beneath the workspace root without following a symlink on
//! the way, a symlink at the name followed only to where the caller may read. A file that is too
//! large, unreadable or malformed becomes a [`Problem`]; it never makes the rest unavailable.

use std::{
    io::Read,
    path::{Path, PathBuf},
};

use schemars::JsonSchema;
use serde::Serialize;

use crate::limits::PROJECT_FILE_MAX_BYTES;

use crate::{
    call::error::{ToolError, ToolErrorCode},
    path::Workspace,
};

pub(crate) mod detect;
pub(crate) mod makefile;
pub(crate) mod manifest;
pub(crate) mod repo;
mod systems;

/// Directory entries one listing of a project directory (the root, `.github/workflows`)
/// visits before it stops; the listing then says it is incomplete.
pub(crate) const DIR_SCAN_MAX: usize = 10_000;

/// Longest script, target or command name kept, in bytes; a longer one is left out (and
/// counted in a problem).
pub(crate) const NAME_MAX_BYTES: usize = 200;

/// Project files that, in a directory between the project root and the target, would make it
/// a project of its own; facts and commands come from the project root only, so
/// [`nested_project_files`] names them as not read.
const NESTED_PROJECT_FILES: &[&str] = &[
    "package.json",
    "Cargo.toml",
    "GNUmakefile",
    "makefile",
    "Makefile",
    "pyproject.toml",
    "go.mod",
    manifest::MANIFEST,
];

/// Most files [`nested_project_files`] names.
pub(crate) const NESTED_FILES_MAX: usize = 20;

/// A project file or setting that could not be used, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub(crate) struct Problem {
    /// The file, as paths are shown (usable with read_file).
    pub(crate) path: String,
    /// What is wrong with it and what was done instead (it is left out; the rest is served).
    pub(crate) message: String,
}

/// Why [`ProjectDir::read`] did not return a file's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unreadable {
    /// Why, in a few words (the file is not named).
    pub(crate) message: String,
    /// The file is larger than [`PROJECT_FILE_MAX_BYTES`].
    pub(crate) too_large: bool,
}

impl Unreadable {
    fn new(message: String) -> Self {
        Self {
            message,
            too_large: false,
        }
    }
}

/// One project root, as the caller may read it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProjectDir<'a> {
    ws: &'a Workspace,
    root: &'a Path,
}

impl<'a> ProjectDir<'a> {
    /// The project root `root` (canonical; inside the workspace for a restricted caller) read
    /// with `ws`'s path rules.
    pub(crate) fn new(ws: &'a Workspace, root: &'a Path) -> Self {
        Self { ws, root }
    }

    /// `rel` (a relative path below the root) as paths are shown to the caller.
    pub(crate) fn display(&self, rel: &str) -> String {
        self.ws.display(&self.root.join(rel))
    }

    /// A [`Problem`] about `rel`.
    pub(crate) fn problem(&self, rel: &str, message: impl Into<String>) -> Problem {
        Problem {
            path: self.display(rel),
            message: message.into(),
        }
    }

    /// Whether something (a file, a directory, a symlink even dangling) is at `rel`, in
    /// directories reached without a symlink (a symlinked `.circleci` is not looked into).
    pub(crate) fn exists(&self, rel: &str) -> bool {
        let parent_ok = Path::new(rel).parent().is_none_or(|p| self.is_real_dir(p));
        parent_ok && self.root.join(rel).symlink_metadata().is_ok()
    }

    /// Whether `rel` (relative to the root; empty for the root) is a directory reached without
    /// a symlink on the way.
    pub(crate) fn is_real_dir(&self, rel: impl AsRef<Path>) -> bool {
        let mut at = self.root.to_path_buf();
        for c in rel.as_ref().components() {
            at.push(c);
            match at.symlink_metadata() {
                Ok(m) if m.is_dir() => {}
                _ => return false,
            }
        }
        true
    }

    /// The names in directory `rel` (`""` for the root), byte-sorted, each with whether it is a
    /// directory (symlinks are not followed), and whether the listing is complete (at most
    /// [`DIR_SCAN_MAX`] entries are visited). `None` when `rel` is not a directory reached
    /// without a symlink, or cannot be listed. Names that are not UTF-8 are left out (no
    /// project file has one).
    pub(crate) fn list(&self, rel: &str) -> Option<(Vec<(String, bool)>, bool)> {
        if !rel.is_empty() && !self.is_real_dir(rel) {
            return None;
        }
        let dir: PathBuf = if rel.is_empty() {
            self.root.to_path_buf()
        } else {
            self.root.join(rel)
        };
        let mut names = Vec::new();
        let mut complete = true;
        for (i, entry) in std::fs::read_dir(&dir).ok()?.enumerate() {
            if i >= DIR_SCAN_MAX {
                complete = false;
                break;
            }
            let Ok(entry) = entry else { continue };
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            names.push((name, is_dir));
        }
        names.sort_unstable();
        Some((names, complete))
    }

    /// Why the directory `rel` (relative to the root) cannot be a working directory for this
    /// caller; `None` when it can. It is resolved as the caller's own path would be
    /// ([`Workspace::resolve`] of its shown form: symlinks followed, and for a restricted caller
    /// confined to the workspace), and the error names it in that form: `path_boundary` (`out:
    /// resolves outside the workspace`), `not_found` (`sub: no such directory`),
    /// `invalid_request` (`README.md: not a directory`), or what [`Workspace::resolve`] returns.
    pub(crate) fn dir_error(&self, rel: &str) -> Option<ToolError> {
        let shown = self.display(rel);
        let error = |code, why: &str| {
            ToolError::new(code, format!("{shown}: {why}")).detail("path", shown.clone())
        };
        match self.ws.resolve(&shown) {
            Err(e) => Some(e),
            Ok(p) if !p.exists() => Some(error(ToolErrorCode::NotFound, "no such directory")),
            Ok(p) if !p.real().is_dir() => {
                Some(error(ToolErrorCode::InvalidRequest, "not a directory"))
            }
            Ok(_) => None,
        }
    }

    /// The bytes of the file at `rel`: `Ok(None)` when nothing is there.
    ///
    /// A symlink at `rel` is followed to its target, which must be inside the workspace for a
    /// restricted caller; the target is then opened beneath the workspace root with no symlink
    /// followed ([`Workspace::open_file`]), so a swap after the check cannot redirect the read.
    ///
    /// # Errors
    /// [`Unreadable`] saying why: larger than [`PROJECT_FILE_MAX_BYTES`], not a regular file, a
    /// symlink to outside the workspace or to nothing, or the operating system's error.
    pub(crate) fn read(&self, rel: &str) -> Result<Option<Vec<u8>>, Unreadable> {
        let path = self.root.join(rel);
        let err = |m: String| Err(Unreadable::new(m));
        match path.symlink_metadata() {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return err(format!("cannot be read: {e}")),
        }
        let real = match std::fs::canonicalize(&path) {
            Ok(r) => r,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return err("a symlink to nothing; not read".to_owned());
            }
            Err(e) => return err(format!("cannot be read: {e}")),
        };
        if self.ws.restricted() && !self.ws.contains(&real) {
            return err("a symlink to outside the workspace; not read".to_owned());
        }
        let file = match self.ws.open_file(&real) {
            Ok(f) => f,
            Err(e) if Workspace::changed_under(&e) => {
                return err("changed while it was being read; not read".to_owned());
            }
            Err(e) => return err(format!("cannot be read: {e}")),
        };
        let meta = match file.metadata() {
            Ok(m) => m,
            Err(e) => return err(format!("cannot be read: {e}")),
        };
        if !meta.is_file() {
            return err("not a regular file; not read".to_owned());
        }
        let max = PROJECT_FILE_MAX_BYTES as u64;
        if meta.len() > max {
            return Err(too_large(meta.len()));
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        if let Err(e) = file.take(max + 1).read_to_end(&mut bytes) {
            return err(format!("cannot be read: {e}"));
        }
        if bytes.len() as u64 > max {
            return Err(too_large(bytes.len() as u64));
        }
        Ok(Some(bytes))
    }
}

impl ProjectDir<'_> {
    /// [`ProjectDir::read`] of a UTF-8 text file.
    ///
    /// # Errors
    /// As [`ProjectDir::read`], and [`Unreadable`] when the bytes are binary or not UTF-8.
    pub(crate) fn read_text(&self, rel: &str) -> Result<Option<String>, Unreadable> {
        let Some(bytes) = self.read(rel)? else {
            return Ok(None);
        };
        match crate::primitives::text::check_text(&bytes) {
            Ok(_) => Ok(String::from_utf8(bytes).ok()),
            Err(why) => Err(Unreadable::new(format!("{why}; not read"))),
        }
    }
}

/// The project files ([`NESTED_PROJECT_FILES`]) in the directories below the project root
/// `root` down to `target` (both canonical; `target` at or below `root`), as paths are shown,
/// nearest the root first and in [`NESTED_PROJECT_FILES`]' order within a directory; at most
/// [`NESTED_FILES_MAX`]. Facts and commands come from the project root only: these are the
/// files a caller pointing `path` at a package may expect to be read, and are not.
pub(crate) fn nested_project_files(ws: &Workspace, root: &Path, target: &Path) -> Vec<String> {
    crate::primitives::project::chain(root, target)
        .iter()
        .filter(|d| d.as_path() != root && d.starts_with(root))
        .flat_map(|d| NESTED_PROJECT_FILES.iter().map(move |n| d.join(n)))
        .filter(|p| p.symlink_metadata().is_ok())
        .take(NESTED_FILES_MAX)
        .map(|p| ws.display(&p))
        .collect()
}

/// A TOML parser error as one line: where (1-based line and column) and what, without the
/// snippet of the file the error's `Display` shows (it could echo a dependency's value).
pub(crate) fn toml_error(text: &str, e: &toml::de::Error) -> String {
    let message = e.message().trim().replace('\n', " ");
    match e.span() {
        Some(span) => {
            let before = &text.as_bytes()[..span.start.min(text.len())];
            let line = before.iter().filter(|b| **b == b'\n').count() + 1;
            let column = before.len()
                - before
                    .iter()
                    .rposition(|b| *b == b'\n')
                    .map_or(0, |i| i + 1)
                + 1;
            format!("line {line}, column {column}: {message}")
        }
        None => message,
    }
}

fn too_large(len: u64) -> Unreadable {
    Unreadable {
        message: format!(
            "{len} bytes, larger than the {PROJECT_FILE_MAX_BYTES} bytes a project file may \
             have; not read"
        ),
        too_large: true,
    }
}

/// `name` if it can be shown and run as a name: not empty, at most [`NAME_MAX_BYTES`], no
/// control characters (a line break in a name could forge a line of a tool's text).
pub(crate) fn clean_name(name: &str) -> Option<String> {
    let ok =
        !name.is_empty() && name.len() <= NAME_MAX_BYTES && !name.chars().any(char::is_control);
    ok.then(|| name.to_owned())
}

/// `value` (a short setting read from a project file) made safe to show on one line: control
/// characters dropped, whitespace trimmed, at most `max` bytes (cut with `…`).
pub(crate) fn one_line(value: &str, max: usize) -> String {
    let s: String = value.chars().filter(|c| !c.is_control()).collect();
    crate::primitives::text::cut(s.trim().to_owned(), max, "…")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws(dir: &Path) -> Workspace {
        Workspace::new(dir, true, false).unwrap()
    }

    #[test]
    fn reads_are_bounded_and_confined() {
        let t = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(t.path()).unwrap();
        let w = ws(&root);
        let d = ProjectDir::new(&w, &root);
        std::fs::write(root.join("small"), "x").unwrap();
        std::fs::write(root.join("big"), vec![b'a'; PROJECT_FILE_MAX_BYTES + 1]).unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), root.join("out")).unwrap();
        std::os::unix::fs::symlink("small", root.join("in")).unwrap();
        std::os::unix::fs::symlink("nowhere", root.join("dangling")).unwrap();
        std::fs::create_dir(root.join("dir")).unwrap();

        assert_eq!(d.read("small").unwrap(), Some(b"x".to_vec()));
        assert_eq!(d.read("missing").unwrap(), None);
        assert_eq!(d.read("in").unwrap(), Some(b"x".to_vec()));
        assert!(d.read("big").unwrap_err().message.contains("larger than"));
        assert!(
            d.read("out")
                .unwrap_err()
                .message
                .contains("outside the workspace")
        );
        assert!(
            d.read("dangling")
                .unwrap_err()
                .message
                .contains("to nothing")
        );
        assert!(
            d.read("dir")
                .unwrap_err()
                .message
                .contains("not a regular file")
        );
    }

    #[test]
    fn names_with_control_characters_are_refused_and_values_fit_one_line() {
        assert_eq!(clean_name("build"), Some("build".to_owned()));
        assert_eq!(clean_name("a\nb"), None);
        assert_eq!(clean_name(""), None);
        assert_eq!(clean_name(&"x".repeat(NAME_MAX_BYTES + 1)), None);
        assert_eq!(one_line(" 20\r\n", 10), "20");
        assert_eq!(one_line("ééééé", 5), "é…");
    }
}
