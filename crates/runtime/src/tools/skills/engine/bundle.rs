//! One skill loaded: its `SKILL.md` again and the bounded inventory of its bundle.

use std::{ffi::OsString, os::fd::OwnedFd, path::PathBuf, sync::Arc};

use schemars::JsonSchema;
use serde::Serialize;

use crate::{
    call::error::{ToolError, ToolResult},
    path::{At, Kind, Workspace, quote},
};

use super::{
    Bounds, Skill,
    front_matter::{EntryText, FrontMatter, parse_front_matter, read_entry},
    open_subdir, read_names,
};

/// What a bundle entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum EntryKind {
    /// A regular file.
    File,
    /// A symbolic link (listed, never followed).
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

/// One file of a bundle's inventory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub(crate) struct InventoryFile {
    /// Path relative to the bundle directory, `/`-separated (quoted when it is not UTF-8, as
    /// paths are: `"caf\xe9.txt"`).
    pub(crate) path: String,
    /// Size in bytes (of a symlink: the length of its target).
    pub(crate) bytes: u64,
    /// What it is.
    pub(crate) kind: EntryKind,
}

/// The files of a bundle, bounded.
#[derive(Debug, Clone, Default)]
pub(crate) struct Inventory {
    /// Files (and symlinks, not followed) in path order, at most [`Bounds::inventory_files`].
    pub(crate) files: Vec<InventoryFile>,
    /// Files seen by the walk (a lower bound when it stopped).
    pub(crate) files_seen: usize,
    /// Directory entries read.
    pub(crate) entries_visited: usize,
    /// Directories not walked: deeper than [`Bounds::inventory_depth`], or unreadable.
    pub(crate) dirs_not_walked: usize,
    /// The walk stopped at [`Bounds::scan_entries`].
    pub(crate) stopped: bool,
}

impl Inventory {
    /// Whether every file of the bundle is in [`Inventory::files`].
    pub(crate) fn complete(&self) -> bool {
        !self.stopped && self.dirs_not_walked == 0 && self.files.len() == self.files_seen
    }
}

/// The bounded inventory of the bundle directory open at `dir`: a depth-first walk in name
/// order through descriptors, never following a symlink (a symlink is listed as one), at most
/// [`Bounds::scan_entries`] entries read and [`Bounds::inventory_depth`] levels descended.
pub(crate) fn inventory(dir: Arc<OwnedFd>, bounds: Bounds) -> Inventory {
    struct Frame {
        fd: Arc<OwnedFd>,
        names: std::vec::IntoIter<OsString>,
        prefix: PathBuf,
        depth: usize,
    }
    let mut inv = Inventory::default();
    let mut left = bounds.scan_entries;
    let mut stack = Vec::new();
    match read_names(&dir, &mut left) {
        Ok((names, stopped)) => {
            inv.stopped |= stopped;
            stack.push(Frame {
                fd: dir,
                names: names.into_iter(),
                prefix: PathBuf::new(),
                depth: 0,
            });
        }
        Err(_) => inv.dirs_not_walked += 1,
    }
    while let Some(frame) = stack.last_mut() {
        let Some(name) = frame.names.next() else {
            stack.pop();
            continue;
        };
        let rel = frame.prefix.join(&name);
        let stat = match At::new_in(frame.fd.clone(), name.clone()).stat() {
            Ok(Some(st)) => st,
            Ok(None) => continue,
            Err(_) => {
                inv.dirs_not_walked += 1;
                continue;
            }
        };
        let kind = match stat.kind {
            Kind::Dir => {
                if frame.depth + 1 > bounds.inventory_depth || inv.stopped {
                    inv.dirs_not_walked += 1;
                    continue;
                }
                let opened = open_subdir(&frame.fd, &name)
                    .and_then(|fd| read_names(&fd, &mut left).map(|r| (fd, r)));
                match opened {
                    Ok((fd, (names, stopped))) => {
                        inv.stopped |= stopped;
                        let depth = frame.depth + 1;
                        stack.push(Frame {
                            fd,
                            names: names.into_iter(),
                            prefix: rel,
                            depth,
                        });
                    }
                    Err(_) => inv.dirs_not_walked += 1,
                }
                continue;
            }
            Kind::File => EntryKind::File,
            Kind::Symlink => EntryKind::Symlink,
            Kind::Other => EntryKind::Other,
        };
        inv.files_seen += 1;
        if inv.files.len() < bounds.inventory_files {
            inv.files.push(InventoryFile {
                path: quote::render(rel.as_os_str()),
                bytes: stat.size,
                kind,
            });
        }
    }
    inv.entries_visited = bounds.scan_entries - left;
    inv
}

/// A skill loaded: its `SKILL.md` text and its bundle's inventory.
#[derive(Debug, Clone)]
pub(crate) struct Loaded {
    /// The entry point's text, read again ([`read_entry`]).
    pub(crate) entry: EntryText,
    /// Its front matter, parsed again.
    pub(crate) front_matter: FrontMatter,
    /// The bundle's files.
    pub(crate) inventory: Inventory,
}

/// Loads `skill` (found by [`super::scan`] for the same caller): reads its `SKILL.md` again, beneath
/// the workspace root (or `/` for an unrestricted caller) without following a symlink, and
/// walks its bundle ([`inventory`]). Nothing in the bundle is run.
///
/// # Errors
/// - `path_boundary`: the bundle or its `SKILL.md` changed into a link out of the workspace
///   since the scan.
/// - `not_found` / `permission_denied` / `execution_failed`: it can no longer be opened.
/// - `invalid_request`: it is no longer a usable skill (binary, not UTF-8, bad front matter).
pub(crate) fn load(ws: &Workspace, skill: &Skill, bounds: Bounds) -> ToolResult<Loaded> {
    let entry_shown = ws.display(&skill.entry);
    let file = ws
        .open_file(&skill.entry)
        .map_err(|e| Workspace::open_error(&entry_shown, &e))?;
    let entry = read_entry(file, bounds.file_bytes)
        .map_err(|(_, reason)| ToolError::invalid(format!("{entry_shown}: {reason}")))?;
    let front_matter = parse_front_matter(&entry.text)
        .map_err(|e| ToolError::invalid(format!("{entry_shown}: {e}")))?;
    let dir_shown = ws.display(&skill.dir);
    let dir = ws.resolve(&quote::render(skill.dir.as_os_str()))?;
    let fd = ws
        .open_dir(&dir)
        .map_err(|e| Workspace::open_error(&dir_shown, &e))?;
    Ok(Loaded {
        entry,
        front_matter,
        inventory: inventory(fd, bounds),
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn an_inventory_is_bounded_by_files_entries_and_depth() {
        let t = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(t.path()).unwrap();
        let bundle = root.join("b");
        write(
            &bundle.join("SKILL.md"),
            "---\nname: b\ndescription: d\n---\n",
        );
        for i in 0..20 {
            write(&bundle.join(format!("refs/r{i:02}.md")), "x");
        }
        write(&bundle.join("a/b/c/deep.md"), "x");
        std::os::unix::fs::symlink("/etc/passwd", bundle.join("link")).unwrap();
        let ws = Workspace::new(&root, true, false).unwrap();
        let open = || ws.open_dir(&ws.resolve("b").unwrap()).unwrap();
        let inv = inventory(open(), Bounds::CONTRACT);
        assert!(inv.complete());
        assert_eq!(inv.files_seen, 23);
        let paths: Vec<&str> = inv.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(&paths[..3], ["SKILL.md", "a/b/c/deep.md", "link"]);
        let link = &inv.files[2];
        assert_eq!((link.kind, link.bytes), (EntryKind::Symlink, 11));
        let capped = inventory(
            open(),
            Bounds {
                inventory_files: 5,
                inventory_depth: 2,
                ..Bounds::CONTRACT
            },
        );
        assert_eq!(capped.files.len(), 5);
        assert_eq!((capped.files_seen, capped.dirs_not_walked), (22, 1));
        assert!(!capped.complete());
        let stopped = inventory(
            open(),
            Bounds {
                scan_entries: 8,
                ..Bounds::CONTRACT
            },
        );
        assert!(stopped.stopped && !stopped.complete());
        assert_eq!(stopped.entries_visited, 8);
    }
}
