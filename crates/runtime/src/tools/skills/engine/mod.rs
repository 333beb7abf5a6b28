//! The engine of skills: where skills live, reading and checking each
//! bundle's `SKILL.md`, ranking by a query, and a bundle's bounded inventory.
//!
//! A *skill* is a directory directly under a *skill root* holding a `SKILL.md` that starts with
//! YAML front matter (a `---` line, YAML, a `---` line) carrying a string `name` and
//! `description` (the Agent Skills format, <https://agentskills.io/specification>). As the
//! format requires, `name` is lowercase letters, digits and single inner hyphens, at most 64
//! characters, and is the name of the skill's directory (for a symlinked bundle, the link's or
//! its target's); a bundle whose name is not is a [`Problem`]. The roots, highest precedence
//! first ([`roots`]):
//!
//! 1. `.agents/skills`, `.claude/skills`, `.codex/skills` in the target directory, then in each
//!    directory above it up to the project root ([`crate::primitives::project`]);
//! 2. the same three under the user's home directory, only for callers whose paths are
//!    unrestricted (a caller confined to the workspace never sees the owner's own skills).
//!
//! A skill of a lower root whose name a higher one already has is *shadowed*: reported, not
//! listed twice. One bundle directory reached a second time (through another link or a linked
//! root) is the same skill: looked at once, neither listed again nor shadowed. A bundle that
//! cannot be used (no front matter, malformed YAML, an invalid name, a binary or non-UTF-8
//! `SKILL.md`, a symlink out of what the caller may read) is a [`Problem`], never an error of
//! the whole scan.
//!
//! Confinement: every symlink met (a root, a bundle, a `SKILL.md`) goes through
//! [`Workspace::resolve`], so a link out of the workspace is refused for a restricted caller
//! (`path_boundary`) and never read; everything else is opened relative to a directory
//! descriptor with `O_NOFOLLOW` ([`At`]), so nothing swapped in after the check is followed.
//! Scans read at most [`Bounds::scan_entries`] directory entries and [`Bounds::bundles`]
//! `SKILL.md` files, and say when they stopped.
//!
//! Parts: [`front_matter`] reads and checks a `SKILL.md`, [`rank()`] orders skills by a query,
//! [`bundle`] loads one skill and walks its files; the scan of the roots is here.

use std::{
    collections::{HashMap, HashSet},
    ffi::OsString,
    io,
    os::fd::OwnedFd,
    path::{Path, PathBuf},
    sync::Arc,
};

use nix::{
    fcntl::{OFlag, openat},
    sys::stat::Mode,
};
use schemars::JsonSchema;
use serde::Serialize;

use crate::limits::{
    SKILL_FILE_MAX_BYTES, SKILL_INVENTORY_MAX, SKILL_INVENTORY_MAX_DEPTH, SKILL_SCAN_MAX_ENTRIES,
    SKILLS_MAX,
};

use crate::{
    call::error::{ToolError, ToolErrorCode},
    path::{At, Kind, Workspace, quote},
    primitives::project,
};

mod bundle;
mod front_matter;
mod rank;

pub(crate) use bundle::{InventoryFile, load};
pub(crate) use front_matter::{FrontMatterError, check_directory, parse_front_matter, read_entry};
pub(crate) use rank::rank;

/// The skill roots of one directory, relative to it, highest precedence first: the shared
/// Agent Skills location, then Claude Code's, then Codex's.
pub(crate) const ROOTS: [&str; 3] = [".agents/skills", ".claude/skills", ".codex/skills"];

/// The entry point of a skill bundle.
pub(crate) const ENTRY: &str = "SKILL.md";

/// The bounds of a scan and an inventory; [`Bounds::CONTRACT`] outside tests.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    /// Directory entries a scan (all roots together) or an inventory reads before it stops.
    pub(crate) scan_entries: usize,
    /// `SKILL.md` files a scan reads (skills, shadowed skills and problems together); further
    /// bundles are counted, not read.
    pub(crate) bundles: usize,
    /// Bytes of a `SKILL.md` read.
    pub(crate) file_bytes: usize,
    /// Files an inventory lists.
    pub(crate) inventory_files: usize,
    /// Directory levels an inventory descends below the bundle.
    pub(crate) inventory_depth: usize,
}

impl Bounds {
    /// The bounds of the contract (`protocol::limits`, "Agent context").
    pub(crate) const CONTRACT: Bounds = Bounds {
        scan_entries: SKILL_SCAN_MAX_ENTRIES,
        bundles: SKILLS_MAX,
        file_bytes: SKILL_FILE_MAX_BYTES,
        inventory_files: SKILL_INVENTORY_MAX,
        inventory_depth: SKILL_INVENTORY_MAX_DEPTH,
    };
}

// === Scan ===

/// Where a skill root is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Scope {
    /// In the target directory or a directory above it, up to the project root.
    Project,
    /// In the user's home directory (only for callers whose paths are unrestricted).
    User,
}

/// Why a skill bundle is not listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ProblemKind {
    /// A symlink (a root, a bundle or its `SKILL.md`) leads outside what the caller may read;
    /// it was not followed.
    PathBoundary,
    /// It could not be opened or read: permissions, a dangling symlink, not a regular file.
    Unreadable,
    /// `SKILL.md` has a NUL byte: it is not text.
    Binary,
    /// `SKILL.md` is not UTF-8.
    NotUtf8,
    /// The front matter is missing or malformed, its `name` or `description` is missing or
    /// invalid, or its `name` is not the name of the skill's directory.
    FrontMatter,
}

impl ProblemKind {
    /// The wire spelling (`path_boundary`, `front_matter`, ...).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ProblemKind::PathBoundary => "path_boundary",
            ProblemKind::Unreadable => "unreadable",
            ProblemKind::Binary => "binary",
            ProblemKind::NotUtf8 => "not_utf8",
            ProblemKind::FrontMatter => "front_matter",
        }
    }
}

/// A skill bundle (or a root) that could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    /// Where (workspace display form): the root, the bundle, or its `SKILL.md`.
    pub(crate) path: String,
    /// What kind of problem.
    pub(crate) kind: ProblemKind,
    /// What is wrong, for people.
    pub(crate) reason: String,
}

/// A usable skill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Skill {
    /// Its front matter `name`.
    pub(crate) name: String,
    /// Its front matter `description` (collapsed, bounded: [`front_matter::FrontMatter::description`]).
    pub(crate) description: String,
    /// The bundle where it was found, display form (for a symlinked bundle: the link).
    pub(crate) path: String,
    /// The root it was found in, display form.
    pub(crate) root: String,
    /// Project or user level.
    pub(crate) scope: Scope,
    /// Its root's position in precedence order (0: highest).
    pub(crate) precedence: usize,
    /// The bundle directory, resolved (canonical).
    pub(crate) dir: PathBuf,
    /// Its `SKILL.md`, resolved (canonical).
    pub(crate) entry: PathBuf,
}

/// A skill hidden by a same-named one of a higher-precedence root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shadowed {
    /// The shared name.
    pub(crate) name: String,
    /// The hidden bundle, display form.
    pub(crate) path: String,
    /// The bundle listed under that name, display form.
    pub(crate) by: String,
}

/// What a scan found.
#[derive(Debug, Clone, Default)]
pub(crate) struct Scan {
    /// The project root of the target, display form.
    pub(crate) project_root: String,
    /// The roots that exist and were read, highest precedence first, display form.
    pub(crate) roots: Vec<String>,
    /// Whether the user-level roots were part of the scan.
    pub(crate) user_level: bool,
    /// Usable skills, each name once, by precedence then name.
    pub(crate) skills: Vec<Skill>,
    /// Same-named skills of lower roots.
    pub(crate) shadowed: Vec<Shadowed>,
    /// Bundles and roots that could not be used: at most [`Bounds::bundles`].
    pub(crate) problems: Vec<Problem>,
    /// Problems found after [`Bounds::bundles`] were: counted, not listed.
    pub(crate) problems_not_listed: usize,
    /// Bundles (directories with a `SKILL.md`) found after [`Bounds::bundles`] were read: not
    /// read, so neither listed nor checked.
    pub(crate) not_read: usize,
    /// Directory entries read.
    pub(crate) entries_visited: usize,
    /// The scan stopped at [`Bounds::scan_entries`]: roots or entries after it were not read.
    pub(crate) stopped: bool,
}

impl Scan {
    /// Whether every skill of every root was read: the scan did not stop and no bundle was
    /// left unread.
    pub(crate) fn complete(&self) -> bool {
        !self.stopped && self.not_read == 0
    }
}

/// The skill roots for `target` (a canonical directory), highest precedence first: [`ROOTS`]
/// in `target`, then in each directory above it up to the project root
/// ([`project::project_root`], which for a restricted workspace stays inside it); then, when
/// `home` is given, [`ROOTS`] under it.
pub(crate) fn roots(ws: &Workspace, target: &Path, home: Option<&Path>) -> Vec<(PathBuf, Scope)> {
    let top = project::project_root(ws.root(), target, ws.restricted());
    let mut out = Vec::new();
    for dir in project::chain(&top, target).iter().rev() {
        out.extend(ROOTS.iter().map(|r| (dir.join(r), Scope::Project)));
    }
    if let Some(h) = home {
        out.extend(ROOTS.iter().map(|r| (h.join(r), Scope::User)));
    }
    out
}

/// Scans the skill roots of `target` (a canonical directory the caller may read) for `ws`'s
/// caller. `home` is the user's home directory, to be given only when the caller's paths are
/// unrestricted. Never fails: what cannot be read is a [`Problem`]; what the bounds leave out
/// is counted ([`Scan::stopped`], [`Scan::not_read`]).
pub(crate) fn scan(ws: &Workspace, target: &Path, home: Option<&Path>, bounds: Bounds) -> Scan {
    let top = project::project_root(ws.root(), target, ws.restricted());
    let mut s = Scanner {
        ws,
        bounds,
        out: Scan {
            project_root: ws.display(&top),
            user_level: home.is_some(),
            ..Scan::default()
        },
        seen_roots: HashSet::new(),
        seen_bundles: HashSet::new(),
        by_name: HashMap::new(),
        read: 0,
    };
    for (precedence, (root, scope)) in roots(ws, target, home).into_iter().enumerate() {
        if s.out.stopped {
            break;
        }
        s.root(&root, scope, precedence);
    }
    let mut out = s.out;
    out.skills
        .sort_by(|a, b| (a.precedence, &a.name).cmp(&(b.precedence, &b.name)));
    out
}

/// A root being read.
struct RootDir<'a> {
    /// Its directory, opened beneath the workspace root.
    fd: Arc<OwnedFd>,
    /// As it is named (a link or not).
    path: &'a Path,
    /// Resolved.
    real: &'a Path,
    /// `path`'s display form.
    shown: &'a str,
    scope: Scope,
    precedence: usize,
}

struct Scanner<'a> {
    ws: &'a Workspace,
    bounds: Bounds,
    out: Scan,
    /// Roots already read, resolved (`.claude/skills` may be a link to `.agents/skills`).
    seen_roots: HashSet<PathBuf>,
    /// Bundle directories already looked at, resolved: one bundle reached again through
    /// another link (or another root) is the same skill, counted once, never shadowing itself.
    seen_bundles: HashSet<PathBuf>,
    /// Index in `out.skills` of each name listed.
    by_name: HashMap<String, usize>,
    /// `SKILL.md` files read.
    read: usize,
}

impl Scanner<'_> {
    fn problem(&mut self, path: String, kind: ProblemKind, reason: impl Into<String>) {
        if self.out.problems.len() >= self.bounds.bundles {
            self.out.problems_not_listed += 1;
            return;
        }
        self.out.problems.push(Problem {
            path,
            kind,
            reason: reason.into(),
        });
    }

    /// The problem of a [`Workspace::resolve`] error of a symlink at `path`.
    fn resolve_problem(&mut self, path: String, e: &ToolError) {
        if e.code() == ToolErrorCode::PathBoundary {
            self.problem(
                path,
                ProblemKind::PathBoundary,
                "a symlink that leads outside the workspace; not followed for this caller",
            );
        } else {
            self.problem(path, ProblemKind::Unreadable, e.message());
        }
    }

    /// The problem of an error opening something beneath the workspace root at `path`.
    fn open_problem(&mut self, path: String, e: &io::Error) {
        use nix::errno::Errno;
        if matches!(
            e.raw_os_error().map(Errno::from_raw),
            Some(Errno::EXDEV | Errno::ELOOP)
        ) {
            self.problem(
                path,
                ProblemKind::PathBoundary,
                "it changed into a symlink that leads outside the workspace while it was read; \
                 not followed",
            );
        } else {
            self.problem(
                path,
                ProblemKind::Unreadable,
                format!("cannot be opened: {e}"),
            );
        }
    }

    /// Reads one root: `path` as it is named (a link or not).
    fn root(&mut self, path: &Path, scope: Scope, precedence: usize) {
        // Most roots do not exist; only an existing one (or a link) is resolved.
        if std::fs::symlink_metadata(path).is_err() {
            return;
        }
        let shown = self.ws.display(path);
        let resolved = match self.ws.resolve(&quote::render(path.as_os_str())) {
            Ok(r) => r,
            Err(e) => return self.resolve_problem(shown, &e),
        };
        if !resolved.exists() || !resolved.real().is_dir() {
            return;
        }
        if !self.seen_roots.insert(resolved.real().to_owned()) {
            return;
        }
        let fd = match self.ws.open_dir(&resolved) {
            Ok(fd) => fd,
            Err(e) => return self.open_problem(shown, &e),
        };
        let mut left = self.bounds.scan_entries - self.out.entries_visited;
        let listed = read_names(&fd, &mut left);
        self.out.entries_visited = self.bounds.scan_entries - left;
        let names = match listed {
            Ok((names, stopped)) => {
                self.out.stopped |= stopped;
                names
            }
            Err(e) => return self.open_problem(shown, &e),
        };
        self.out.roots.push(shown.clone());
        let root = RootDir {
            fd,
            path,
            real: resolved.real(),
            shown: &shown,
            scope,
            precedence,
        };
        for name in names {
            self.bundle(&root, name);
        }
    }

    /// Looks at one entry `name` of a root.
    fn bundle(&mut self, root: &RootDir<'_>, name: OsString) {
        let (fd, root_real) = (&root.fd, root.real);
        let found = root.path.join(&name);
        let shown = self.ws.display(&found);
        let stat = match At::new_in(fd.clone(), name.clone()).stat() {
            Ok(Some(st)) => st,
            Ok(None) => return,
            Err(e) => return self.open_problem(shown, &e),
        };
        let (dir_fd, dir_real) = match stat.kind {
            Kind::Dir => match open_subdir(fd, &name) {
                Ok(d) => (d, root_real.join(&name)),
                Err(e) => return self.open_problem(shown, &e),
            },
            Kind::Symlink => {
                let link = root_real.join(&name);
                let resolved = match self.ws.resolve(&quote::render(link.as_os_str())) {
                    Ok(r) => r,
                    Err(e) => return self.resolve_problem(shown, &e),
                };
                if !resolved.exists() {
                    return self.problem(
                        shown,
                        ProblemKind::Unreadable,
                        "a symlink to nothing (its target does not exist)",
                    );
                }
                if !resolved.real().is_dir() {
                    return;
                }
                match self.ws.open_dir(&resolved) {
                    Ok(d) => (d, resolved.real().to_owned()),
                    Err(e) => return self.open_problem(shown, &e),
                }
            }
            // Files beside the bundles (a README) are not skills.
            _ => return,
        };
        if !self.seen_bundles.insert(dir_real.clone()) {
            return;
        }
        // For a symlinked bundle, the name of the directory it leads to.
        let target_name = (stat.kind == Kind::Symlink)
            .then(|| dir_real.file_name())
            .flatten();
        let entry_at = At::new_in(dir_fd, ENTRY.into());
        let entry_shown = self.ws.display(&found.join(ENTRY));
        let entry_stat = match entry_at.stat() {
            Ok(Some(st)) => st,
            // A directory without SKILL.md (shared assets) is not a skill.
            Ok(None) => return,
            Err(e) => return self.open_problem(entry_shown, &e),
        };
        if self.read >= self.bounds.bundles {
            self.out.not_read += 1;
            return;
        }
        self.read += 1;
        let (file, entry_real) = match entry_stat.kind {
            Kind::File => (entry_at.open_read(), dir_real.join(ENTRY)),
            Kind::Symlink => {
                let link = dir_real.join(ENTRY);
                let resolved = match self.ws.resolve(&quote::render(link.as_os_str())) {
                    Ok(r) if r.exists() => r,
                    Ok(_) => {
                        return self.problem(
                            entry_shown,
                            ProblemKind::Unreadable,
                            "a symlink to nothing (its target does not exist)",
                        );
                    }
                    Err(e) => return self.resolve_problem(entry_shown, &e),
                };
                let real = resolved.real().to_owned();
                (self.ws.open_file(&real), real)
            }
            _ => {
                return self.problem(
                    entry_shown,
                    ProblemKind::Unreadable,
                    "SKILL.md is not a regular file",
                );
            }
        };
        let file = match file {
            Ok(f) => f,
            Err(e) => return self.open_problem(entry_shown, &e),
        };
        let read = match read_entry(file, self.bounds.file_bytes) {
            Ok(r) => r,
            Err((kind, reason)) => return self.problem(entry_shown, kind, reason),
        };
        let fm = match parse_front_matter(&read.text) {
            Ok(fm) => fm,
            Err(e) => {
                let mut reason = e.to_string();
                if e == FrontMatterError::Unterminated && read.truncated {
                    reason.push_str(&format!(
                        " within the first {} bytes (only those are read)",
                        self.bounds.file_bytes
                    ));
                }
                return self.problem(entry_shown, ProblemKind::FrontMatter, reason);
            }
        };
        if let Err(e) = check_directory(&fm.name, &name, target_name) {
            return self.problem(entry_shown, ProblemKind::FrontMatter, e.to_string());
        }
        if let Some(&i) = self.by_name.get(&fm.name) {
            let by = self.out.skills[i].path.clone();
            self.out.shadowed.push(Shadowed {
                name: fm.name,
                path: shown,
                by,
            });
            return;
        }
        self.by_name.insert(fm.name.clone(), self.out.skills.len());
        self.out.skills.push(Skill {
            name: fm.name,
            description: fm.description,
            path: shown,
            root: root.shown.to_owned(),
            scope: root.scope,
            precedence: root.precedence,
            dir: dir_real,
            entry: entry_real,
        });
    }
}

/// The directory `name` in `dir`, opened without following a symlink.
fn open_subdir(dir: &OwnedFd, name: &std::ffi::OsStr) -> io::Result<Arc<OwnedFd>> {
    open_dir_at(dir, name).map(Arc::new)
}

/// [`open_subdir`], not shared.
fn open_dir_at(dir: &OwnedFd, name: &std::ffi::OsStr) -> io::Result<OwnedFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    Ok(openat(dir, name, flags, Mode::empty())?)
}

/// The names in the directory open at `dir` (`.` and `..` left out), sorted, at most `left` of
/// them (decremented by each name read); `true` when names were left unread.
fn read_names(dir: &OwnedFd, left: &mut usize) -> io::Result<(Vec<OsString>, bool)> {
    use std::os::unix::ffi::OsStrExt;
    // A fresh open file description: the listing's offset is its own, not the caller's.
    let mut listing = nix::dir::Dir::from_fd(open_dir_at(dir, std::ffi::OsStr::new("."))?)?;
    let mut names = Vec::new();
    let mut stopped = false;
    for entry in listing.iter() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if *left == 0 {
            stopped = true;
            break;
        }
        *left -= 1;
        names.push(std::ffi::OsStr::from_bytes(name).to_owned());
    }
    names.sort_unstable();
    Ok((names, stopped))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace(dir: &Path, restricted: bool) -> Workspace {
        Workspace::new(dir, restricted, false).unwrap()
    }

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn skill_md(name: &str) -> String {
        format!("---\nname: {name}\ndescription: the {name} skill\n---\nDo {name}.\n")
    }

    #[test]
    fn a_scan_stops_at_its_entry_bound_and_at_its_bundle_bound() {
        let t = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(t.path()).unwrap();
        for i in 0..30 {
            write(
                &root.join(format!(".agents/skills/s{i:02}/SKILL.md")),
                &skill_md(&format!("s{i:02}")),
            );
        }
        let ws = workspace(&root, true);
        let all = scan(&ws, &root, None, Bounds::CONTRACT);
        assert_eq!(all.skills.len(), 30);
        assert!(all.complete());
        let few = Bounds {
            scan_entries: 10,
            ..Bounds::CONTRACT
        };
        let s = scan(&ws, &root, None, few);
        assert!(s.stopped && !s.complete());
        assert_eq!((s.skills.len(), s.entries_visited), (10, 10));
        let few = Bounds {
            bundles: 4,
            ..Bounds::CONTRACT
        };
        let s = scan(&ws, &root, None, few);
        assert_eq!((s.skills.len(), s.not_read), (4, 26));
        assert!(!s.complete());
    }

    #[test]
    fn a_linked_root_is_read_once_inside_and_refused_outside_for_a_restricted_caller() {
        let t = tempfile::tempdir().unwrap();
        let top = std::fs::canonicalize(t.path()).unwrap();
        let root = top.join("ws");
        let outside = top.join("outside");
        write(&outside.join("skills/x/SKILL.md"), &skill_md("x"));
        write(&root.join(".agents/skills/a/SKILL.md"), &skill_md("a"));
        // `.claude/skills` is `.agents/skills` again; `.codex` leads out of the workspace.
        std::fs::create_dir_all(root.join(".claude")).unwrap();
        std::os::unix::fs::symlink("../.agents/skills", root.join(".claude/skills")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join(".codex")).unwrap();

        let s = scan(&workspace(&root, true), &root, None, Bounds::CONTRACT);
        let names: Vec<&str> = s.skills.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["a"]);
        assert_eq!(s.roots, [".agents/skills"]);
        assert!(s.shadowed.is_empty(), "{:?}", s.shadowed);
        assert_eq!(
            s.problems,
            [Problem {
                path: ".codex/skills".into(),
                kind: ProblemKind::PathBoundary,
                reason: "a symlink that leads outside the workspace; not followed for this caller"
                    .into()
            }]
        );
        let s = scan(&workspace(&root, false), &root, None, Bounds::CONTRACT);
        let names: Vec<&str> = s.skills.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["a", "x"]);
        assert!(s.problems.is_empty());
    }
}
