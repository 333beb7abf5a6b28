//! Paths a walk or a search could not read, reported instead of silently left out.
//!
//! `search_text` and `list_files` return the first [`SKIPPED_PATHS_MAX`] of them in path order
//! (so the list is the same on every run, whichever thread met the error first) and count them
//! all.

use std::{io, path::PathBuf};

use crate::limits::SKIPPED_PATHS_MAX;
use schemars::JsonSchema;
use serde::Serialize;

use crate::path::{Workspace, path_order};

/// A skipped path as tools return it (`skipped` of `search_text` and `list_files`).
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct SkippedPath {
    /// The path, relative to the workspace.
    path: String,
    /// Why it was skipped: `permission denied`, `path too long` (longer than PATH_MAX), or the
    /// operating system's error text.
    reason: String,
}

impl SkippedPath {
    /// One line for a result's text: `skipped PATH: REASON`.
    pub(crate) fn line(&self) -> String {
        format!("skipped {}: {}", self.path, self.reason)
    }
}

/// A path that could not be read, with why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Skipped {
    /// Absolute path as the walk saw it.
    pub(crate) path: PathBuf,
    /// Short reason: `permission denied`, `path too long`, or the OS error's text.
    pub(crate) reason: String,
}

/// The first [`SKIPPED_PATHS_MAX`] skipped paths in path order, and how many were skipped in
/// all. Memory stays bounded however many paths fail.
#[derive(Debug, Default)]
pub(crate) struct SkipList {
    entries: Vec<Skipped>,
    total: usize,
    /// Entries that changed under the walk ([`SkipList::push_changed`]): where, and how many.
    changed: Option<(PathBuf, usize)>,
}

impl SkipList {
    /// Records one skipped path.
    pub(crate) fn push(&mut self, path: PathBuf, reason: String) {
        self.total += 1;
        self.entries.push(Skipped { path, reason });
        if self.entries.len() >= 2 * SKIPPED_PATHS_MAX {
            self.trim();
        }
    }

    /// Records a path that failed with `err`.
    pub(crate) fn push_io(&mut self, path: PathBuf, err: &io::Error) {
        self.push(path, reason(err));
    }

    /// Records every path in a walk error (`ignore` nests path, depth and partial errors);
    /// `root`, the walk's start, names the path when the error carries none. A path for which
    /// `reachable` is false (it is not there beneath the workspace any more, or is reached
    /// through a swapped-in symlink) is counted as changed, not shown
    /// ([`SkipList::push_changed`]).
    pub(crate) fn push_walk_error(
        &mut self,
        err: &ignore::Error,
        root: &std::path::Path,
        reachable: &dyn Fn(&std::path::Path) -> bool,
    ) {
        let mut found = Vec::new();
        flatten(err, None, &mut found);
        for (path, reason) in found {
            match path {
                Some(p) if !reachable(&p) => self.push_changed(root),
                p => self.push(p.unwrap_or_else(|| root.to_owned()), reason),
            }
        }
    }

    /// Records an entry under `root` (the walk's start) that changed while it was walked — moved,
    /// removed, or reached through a directory swapped for a symlink — without its path, which
    /// may name something outside the workspace. They are reported as one
    /// skipped path, `root`, with their number.
    pub(crate) fn push_changed(&mut self, root: &std::path::Path) {
        self.total += 1;
        match &mut self.changed {
            Some((_, n)) => *n += 1,
            None => self.changed = Some((root.to_owned(), 1)),
        }
    }

    /// Adds everything `other` recorded.
    pub(crate) fn extend(&mut self, other: SkipList) {
        let total = self.total + other.total;
        for s in other.entries {
            self.push(s.path, s.reason);
        }
        if let Some((root, n)) = other.changed {
            let (_, mine) = self.changed.get_or_insert((root, 0));
            *mine += n;
        }
        self.total = total;
    }

    /// How many paths were skipped in all.
    pub(crate) fn total(&self) -> usize {
        self.total
    }

    /// The first [`SKIPPED_PATHS_MAX`] skipped paths in path order.
    pub(crate) fn into_first(mut self) -> Vec<Skipped> {
        if let Some((path, n)) = self.changed.take() {
            let reason = format!(
                "{n} {} under it changed while it was walked (moved, removed, or reached through a \
                 directory swapped for a symlink) and {} not shown",
                if n == 1 { "entry" } else { "entries" },
                if n == 1 { "is" } else { "are" },
            );
            self.entries.push(Skipped { path, reason });
        }
        self.trim();
        self.entries
    }

    /// The first [`SKIPPED_PATHS_MAX`] skipped paths in path order, rendered for a tool result.
    pub(crate) fn render(self, ws: &Workspace) -> Vec<SkippedPath> {
        self.into_first()
            .into_iter()
            .map(|s| SkippedPath {
                path: ws.display(&s.path),
                reason: s.reason,
            })
            .collect()
    }

    fn trim(&mut self) {
        self.entries.sort_by(|a, b| path_order(&a.path, &b.path));
        self.entries.truncate(SKIPPED_PATHS_MAX);
    }
}

/// The reason shown for an I/O error: the two a user can act on by name, else the OS's text.
pub(crate) fn reason(err: &io::Error) -> String {
    let err = os_error(err);
    if err.kind() == io::ErrorKind::PermissionDenied {
        "permission denied".to_owned()
    } else if err.raw_os_error() == Some(libc::ENAMETOOLONG) {
        // Longer than PATH_MAX (or a name longer than NAME_MAX): no system call takes it.
        "path too long".to_owned()
    } else {
        err.to_string()
    }
}

/// The innermost I/O error: `ignore`'s sequential walk wraps the OS error in a custom one (from
/// `walkdir`) whose text repeats the absolute path and which has no OS error code.
fn os_error(err: &io::Error) -> &io::Error {
    let mut inner = err;
    let mut cur: &(dyn std::error::Error + 'static) = err;
    while let Some(next) = cur.source() {
        if let Some(io) = next.downcast_ref::<io::Error>() {
            inner = io;
        }
        cur = next;
    }
    inner
}

fn flatten(err: &ignore::Error, path: Option<PathBuf>, out: &mut Vec<(Option<PathBuf>, String)>) {
    match err {
        ignore::Error::Partial(errs) => {
            for e in errs {
                flatten(e, path.clone(), out);
            }
        }
        ignore::Error::WithPath { path, err } => flatten(err, Some(path.clone()), out),
        ignore::Error::WithDepth { err, .. } | ignore::Error::WithLineNumber { err, .. } => {
            flatten(err, path, out);
        }
        ignore::Error::Loop { child, .. } => out.push((Some(child.clone()), "symlink loop".into())),
        ignore::Error::Io(e) => out.push((path, reason(e))),
        other => out.push((path, other.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_first_paths_in_path_order_and_counts_all() {
        let mut list = SkipList::default();
        for i in (0..SKIPPED_PATHS_MAX * 3 + 7).rev() {
            list.push(
                PathBuf::from(format!("/w/d{i:04}")),
                "permission denied".into(),
            );
        }
        assert_eq!(list.total(), SKIPPED_PATHS_MAX * 3 + 7);
        let first = list.into_first();
        assert_eq!(first.len(), SKIPPED_PATHS_MAX);
        assert_eq!(first[0].path, PathBuf::from("/w/d0000"));
        assert_eq!(
            first[SKIPPED_PATHS_MAX - 1].path,
            PathBuf::from(format!("/w/d{:04}", SKIPPED_PATHS_MAX - 1))
        );
    }

    #[test]
    fn extend_adds_totals_and_merges_in_order() {
        let mut a = SkipList::default();
        a.push("/w/b".into(), "x".into());
        let mut b = SkipList::default();
        b.push("/w/a".into(), "y".into());
        b.push("/w/c".into(), "z".into());
        a.extend(b);
        assert_eq!(a.total(), 3);
        let paths: Vec<_> = a.into_first().into_iter().map(|s| s.path).collect();
        assert_eq!(paths, [PathBuf::from("/w/a"), "/w/b".into(), "/w/c".into()]);
    }

    #[test]
    fn a_wrapped_os_error_gives_its_own_reason_without_the_wrapper_text() {
        // Like walkdir's error: a custom io::Error whose text names the absolute path.
        #[derive(Debug)]
        struct Wrap(io::Error);
        impl std::fmt::Display for Wrap {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "IO error for operation on /host/path: {}", self.0)
            }
        }
        impl std::error::Error for Wrap {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let wrap = |errno| {
            let inner = io::Error::from_raw_os_error(errno);
            io::Error::new(inner.kind(), Wrap(inner))
        };
        assert_eq!(reason(&wrap(libc::ENAMETOOLONG)), "path too long");
        assert_eq!(reason(&wrap(libc::EACCES)), "permission denied");
        let eio = reason(&wrap(libc::EIO));
        assert!(!eio.contains("/host/path"), "{eio}");
        assert_eq!(eio, io::Error::from_raw_os_error(libc::EIO).to_string());
    }

    /// A walk error's path that is not reachable beneath the workspace any more
    /// may name an outside directory the walk reached through a swapped-in symlink; it is
    /// counted under the walk's root, never shown.
    #[test]
    fn unreachable_walk_errors_and_changed_entries_are_counted_without_their_paths() {
        let denied = |path: &str| ignore::Error::WithPath {
            path: path.into(),
            err: Box::new(ignore::Error::Io(io::Error::from_raw_os_error(
                libc::EACCES,
            ))),
        };
        let mut list = SkipList::default();
        let root = std::path::Path::new("/w");
        list.push_walk_error(&denied("/w/sub/secret-dir"), root, &|p| {
            !p.ends_with("secret-dir")
        });
        list.push_walk_error(&denied("/w/locked"), root, &|p| !p.ends_with("secret-dir"));
        list.push_changed(root);
        assert_eq!(list.total(), 3);
        let got: Vec<_> = list
            .into_first()
            .into_iter()
            .map(|s| (s.path, s.reason))
            .collect();
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0].0, PathBuf::from("/w"));
        assert!(
            got[0].1.starts_with("2 entries under it changed"),
            "{got:?}"
        );
        assert_eq!(
            got[1],
            (PathBuf::from("/w/locked"), "permission denied".to_owned())
        );
    }

    #[test]
    fn walk_errors_are_flattened_with_their_paths() {
        let too_long = io::Error::from_raw_os_error(libc::ENAMETOOLONG);
        let denied = io::Error::from_raw_os_error(libc::EACCES);
        let with_path = |path: &str, err| ignore::Error::WithPath {
            path: path.into(),
            err: Box::new(err),
        };
        let err = ignore::Error::Partial(vec![
            ignore::Error::WithDepth {
                depth: 3,
                err: Box::new(with_path("/w/long", ignore::Error::Io(too_long))),
            },
            with_path("/w/locked", ignore::Error::Io(denied)),
        ]);
        let mut list = SkipList::default();
        list.push_walk_error(&err, std::path::Path::new("/w"), &|_| true);
        let got: Vec<_> = list
            .into_first()
            .into_iter()
            .map(|s| (s.path, s.reason))
            .collect();
        assert_eq!(
            got,
            [
                (PathBuf::from("/w/locked"), "permission denied".to_owned()),
                (PathBuf::from("/w/long"), "path too long".to_owned()),
            ]
        );
    }
}
