//! The server's own files — its configuration, servers file, state directory and service
//! definitions — out of the tools' reach whenever paths are confined to the workspace.
//!
//! A workspace that is or contains the user's home holds them (`~/.config/machine-mcp/`,
//! `~/.local/state/machine-mcp/`, `~/.config/systemd/user/machine-mcp.service`). A caller who may
//! write would otherwise choose the programs the server starts at its next load, and a caller who
//! may read would read the device key, tokens and other callers' job plans. The rules:
//!
//! - Whoever builds the runtime names them ([`OwnPath`]); [`Workspace::resolve`] and
//!   [`Workspace::resolve_entry`] refuse a path equal to or below one (`path_boundary`, naming
//!   what it is and how to serve a workspace without it), for reads, writes, moves, deletes and
//!   patches alike, and [`Workspace::at`] and every open beneath the root refuse it again
//!   (`EACCES`). Walks and listings leave them out and say so in a note (`LeftOut`).
//! - Only while paths are restricted: with unrestricted paths (`full`, `--unrestricted-paths`)
//!   a caller reaches every file of the user anyway.
//! - Each is kept in two forms: its real path (symlinks followed; for a path that does not
//!   exist yet, the canonical existing prefix and the missing names, so it is protected before
//!   it is created), and its path with only the parent made real (the entry itself when it is a
//!   symlink: replacing or removing the link would redirect the server). Only forms inside the
//!   workspace root are kept: others are out of reach already.
//! - Paths compare by components ignoring ASCII case, as a case-insensitive file system would
//!   (macOS); on a case-sensitive one, leaving out a `.Config/Machine-MCP` too costs nothing.
//!
//! The tools that cannot plant a symlink or move a directory (every writer without exec moves and
//! deletes regular files only) cannot redirect a protected path after the start. A caller with an
//! exec mode runs programs as the user, which this does not contain (`SECURITY.md`).
//!
//! [`Workspace::resolve`]: super::Workspace::resolve
//! [`Workspace::resolve_entry`]: super::Workspace::resolve_entry
//! [`Workspace::at`]: super::Workspace::at

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use lock::Lock;

use super::{Workspace, resolve_physical};
use crate::call::error::{ToolError, ToolErrorCode};

/// What one of the server's own paths is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OwnKind {
    /// The user configuration directory (`$XDG_CONFIG_HOME/machine-mcp`, holding `config.toml`):
    /// it chooses the agent CLIs the server runs.
    Configuration,
    /// The servers file of a daemon (`--servers`): the upstream servers it starts.
    Servers,
    /// The state directory (`--state-dir`, `$XDG_STATE_HOME/machine-mcp`): device key, tokens,
    /// managed jobs and their plans, local resources, delegations.
    State,
    /// A service definition of this state directory (the systemd unit or launchd agent `service
    /// install` writes): the command line the service runs.
    Service,
}

impl OwnKind {
    /// What it is, for messages: "the server's state directory (...)".
    fn what(self) -> &'static str {
        match self {
            Self::Configuration => {
                "the server's own configuration directory (it chooses the agent CLIs the server runs)"
            }
            Self::Servers => {
                "the server's servers file (it names the upstream servers the daemon starts)"
            }
            Self::State => {
                "the server's state directory (device key, tokens, managed jobs, local resources)"
            }
            Self::Service => "the server's service definition (the command line its service runs)",
        }
    }

    /// How the user keeps it out of the workspace.
    fn elsewhere(self) -> &'static str {
        match self {
            Self::Configuration => ", or set XDG_CONFIG_HOME outside it",
            Self::Servers => ", or keep the --servers file outside it",
            Self::State => ", or pass a --state-dir outside it",
            Self::Service => "",
        }
    }
}

/// One of the server's own paths, as the builder of a runtime names it (absolute, or relative
/// to the current directory; it need not exist).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnPath {
    /// What it is.
    pub kind: OwnKind,
    /// The path.
    pub path: PathBuf,
}

impl OwnPath {
    /// `path` as a `kind`.
    pub fn new(kind: OwnKind, path: impl Into<PathBuf>) -> Self {
        Self {
            kind,
            path: path.into(),
        }
    }
}

/// The canonical forms of the own paths inside one workspace root (module docs). Cheap to clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct OwnFiles(Arc<[(PathBuf, OwnKind)]>);

impl OwnFiles {
    /// The forms of `given` that lie inside `root` (a canonical directory).
    pub(crate) fn new(root: &Path, given: &[OwnPath]) -> Self {
        let mut forms: Vec<(PathBuf, OwnKind)> = Vec::new();
        for own in given {
            let Ok(abs) = std::path::absolute(&own.path) else {
                continue;
            };
            let real = resolve_physical(&abs, 0).ok().map(|w| w.real);
            let entry = match (abs.parent(), abs.file_name()) {
                (Some(parent), Some(name)) => {
                    resolve_physical(parent, 0).ok().map(|p| p.real.join(name))
                }
                _ => None,
            };
            for form in [real, entry].into_iter().flatten() {
                if below(&form, root) && !forms.iter().any(|(f, _)| f == &form) {
                    forms.push((form, own.kind));
                }
            }
        }
        Self(forms.into())
    }

    /// What `real` (a canonical path) is when it equals or lies below one of the own paths.
    pub(crate) fn covering(&self, real: &Path) -> Option<OwnKind> {
        let len = real.as_os_str().len();
        self.0
            .iter()
            .find(|(own, _)| own.as_os_str().len() <= len && below(real, own))
            .map(|(_, kind)| *kind)
    }

    /// What `path` (an entry of a walk below the root) is when it is one of the own paths
    /// itself: a walk leaves it out and never descends below it. Compares lengths first, so a
    /// walk pays one comparison per own path and entry.
    fn exactly(&self, path: &Path) -> Option<OwnKind> {
        let bytes = path.as_os_str().as_encoded_bytes();
        self.0
            .iter()
            .find(|(own, _)| {
                let o = own.as_os_str().as_encoded_bytes();
                o.len() == bytes.len() && o.eq_ignore_ascii_case(bytes)
            })
            .map(|(_, kind)| *kind)
    }

    /// Whether there is none.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The error for `requested`, which names a path of `kind`.
pub(crate) fn refusal(requested: &str, kind: OwnKind) -> ToolError {
    ToolError::new(
        ToolErrorCode::PathBoundary,
        format!(
            "{requested}: is {} or lies inside it; the tools never read or change it while paths \
             are confined to the workspace. Edit it yourself, or serve a workspace that does not \
             contain it (a project directory instead of your home directory){}",
            kind.what(),
            kind.elsewhere()
        ),
    )
    .detail("path", requested)
}

/// `path` is `prefix` or below it, comparing components without ASCII case (as a
/// case-insensitive file system would).
pub(crate) fn below(path: &Path, prefix: &Path) -> bool {
    let mut p = path.components();
    prefix.components().all(|want| {
        p.next().is_some_and(|got| {
            got.as_os_str()
                .as_encoded_bytes()
                .eq_ignore_ascii_case(want.as_os_str().as_encoded_bytes())
        })
    })
}

/// What one walk or listing left out because it is the server's own: a filter for its entries
/// that records what it met ([`Workspace::left_out`]).
#[derive(Debug)]
pub(crate) struct LeftOut {
    own: OwnFiles,
    met: Lock<Vec<(PathBuf, OwnKind)>>,
}

impl Default for LeftOut {
    /// Leaves out nothing.
    fn default() -> Self {
        Self {
            own: OwnFiles::default(),
            met: Lock::new(Vec::new()),
        }
    }
}

impl LeftOut {
    /// Whether the walk keeps the entry at `path` (every entry but an own path, which is
    /// recorded).
    pub(crate) fn keep(&self, path: &Path) -> bool {
        if self.own.is_empty() {
            return true;
        }
        match self.own.exactly(path) {
            Some(kind) => {
                self.met.lock().push((path.to_owned(), kind));
                false
            }
            None => true,
        }
    }

    /// How many entries were left out.
    pub(crate) fn count(&self) -> usize {
        self.met.lock().len()
    }

    /// One note per entry left out, in path order: what it is and why it is not listed.
    pub(crate) fn notes(&self, ws: &Workspace) -> Vec<String> {
        let mut met = self.met.lock().clone();
        met.sort();
        met.dedup();
        met.into_iter()
            .map(|(p, kind)| {
                format!(
                    "{} left out: it is {}, which the tools do not reach while paths are \
                     confined to the workspace",
                    ws.display(&p),
                    kind.what()
                )
            })
            .collect()
    }
}

impl Workspace {
    /// A fresh [`LeftOut`] for one walk or listing: it leaves out the server's own paths when
    /// paths are restricted, nothing otherwise.
    pub(crate) fn left_out(&self) -> Arc<LeftOut> {
        let own = if self.restricted {
            self.own.clone()
        } else {
            OwnFiles::default()
        };
        Arc::new(LeftOut {
            own,
            met: Lock::new(Vec::new()),
        })
    }

    /// What `real` (a canonical path) is when paths are restricted and it equals or lies below
    /// one of the server's own paths.
    pub fn own_kind(&self, real: &Path) -> Option<OwnKind> {
        if self.restricted {
            self.own.covering(real)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    fn code<T: std::fmt::Debug>(r: Result<T, ToolError>) -> ToolErrorCode {
        r.unwrap_err().code()
    }

    /// A home directory as the workspace, with a configuration, a state directory reached
    /// through a symlink, and a state directory of another server that does not exist yet.
    fn home() -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        for d in [".config/machine-mcp", "dotfiles/state", ".local"] {
            std::fs::create_dir_all(home.join(d)).unwrap();
        }
        std::fs::write(home.join(".config/machine-mcp/config.toml"), "").unwrap();
        std::fs::write(home.join("dotfiles/state/device.key"), "k").unwrap();
        symlink(home.join("dotfiles/state"), home.join(".local/state")).unwrap();
        std::fs::write(home.join("notes.txt"), "n").unwrap();
        let home = std::fs::canonicalize(home).unwrap();
        (tmp, home)
    }

    fn workspace(home: &Path, restricted: bool) -> Workspace {
        Workspace::new(home, restricted, false)
            .unwrap()
            .with_own_files(&[
                OwnPath::new(OwnKind::Configuration, home.join(".config/machine-mcp")),
                OwnPath::new(OwnKind::State, home.join(".local/state")),
                OwnPath::new(OwnKind::Servers, home.join("missing/servers.json")),
                OwnPath::new(OwnKind::State, "/elsewhere/state"),
            ])
    }

    #[test]
    fn own_paths_are_refused_for_reads_writes_and_entries_through_links_and_case() {
        let (_tmp, home) = home();
        let w = workspace(&home, true);
        for p in [
            ".config/machine-mcp",
            ".config/machine-mcp/config.toml",
            ".config/machine-mcp/new.toml",
            ".CONFIG/Machine-MCP/config.toml",
            ".local/state/device.key",
            "dotfiles/state/device.key",
            "dotfiles/state/new",
            "missing/servers.json",
            "missing/../missing/servers.json",
        ] {
            let e = w.resolve(p).unwrap_err();
            assert_eq!(e.code(), ToolErrorCode::PathBoundary, "{p}");
            assert!(e.message().contains("the server's"), "{p}: {}", e.message());
        }
        // The link itself, and what lies below it, as directory entries.
        for p in [".local/state", ".config/machine-mcp/config.toml"] {
            assert_eq!(code(w.resolve_entry(p)), ToolErrorCode::PathBoundary, "{p}");
        }
        for p in [
            "notes.txt",
            ".config",
            ".local",
            "missing/other.json",
            "dotfiles",
        ] {
            assert!(w.resolve(p).is_ok(), "{p}");
        }
        // Opened beneath the root even without a resolve: refused there too.
        let inside = home.join("dotfiles/state/device.key");
        assert_eq!(
            w.open_file(&inside).unwrap_err().raw_os_error(),
            Some(libc::EACCES)
        );
        // Unrestricted paths reach them, and so do the rules derived from a restricted one.
        let free = workspace(&home, false);
        assert!(free.resolve(".config/machine-mcp/config.toml").is_ok());
        assert!(free.open_file(&inside).is_ok());
        assert!(
            free.with_rules(true, false)
                .resolve(".config/machine-mcp/config.toml")
                .is_err()
        );
    }

    /// A path that cannot resolve (a file named as a directory) is refused for where it is
    /// before the error could tell whether the file exists.
    #[test]
    fn an_unresolvable_path_below_an_own_path_or_outside_is_refused_not_answered() {
        let (_tmp, home) = home();
        let w = workspace(&home, true);
        for p in [
            ".config/machine-mcp/config.toml/",
            ".config/machine-mcp/config.toml/x",
            ".local/state/device.key/",
        ] {
            let e = w.resolve(p).unwrap_err();
            assert_eq!(
                e.code(),
                ToolErrorCode::PathBoundary,
                "{p}: {}",
                e.message()
            );
            assert!(e.message().contains("the server's"), "{p}: {}", e.message());
        }
        let outside = home.parent().unwrap().join("outside.txt");
        std::fs::write(&outside, "x").unwrap();
        let e = w.resolve(&format!("{}/", outside.display())).unwrap_err();
        assert_eq!(e.code(), ToolErrorCode::PathBoundary, "{}", e.message());
        // Inside the workspace the error is the file system's, as before.
        let e = w.resolve("notes.txt/").unwrap_err();
        assert_ne!(e.code(), ToolErrorCode::PathBoundary, "{}", e.message());
    }

    #[test]
    fn a_walk_leaves_out_own_paths_and_says_which() {
        let (_tmp, home) = home();
        let w = workspace(&home, true);
        let left = w.left_out();
        assert!(left.keep(&home.join(".config")));
        assert!(!left.keep(&home.join(".config/machine-mcp")));
        assert!(!left.keep(&home.join("dotfiles/state")));
        // A link is an entry a walk lists without following it: left out as what it leads to.
        assert!(!left.keep(&home.join(".local/state")));
        assert!(left.keep(&home.join("notes.txt")));
        assert_eq!(left.count(), 3);
        let notes = left.notes(&w);
        assert!(
            notes[0].starts_with(".config/machine-mcp left out"),
            "{notes:?}"
        );
        assert!(notes[1].contains("state directory"), "{notes:?}");
        let free = workspace(&home, false).left_out();
        assert!(free.keep(&home.join(".config/machine-mcp")));
        assert_eq!(free.count(), 0);
    }
}
