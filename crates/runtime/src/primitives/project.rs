//! The project root of a target directory: the nearest Git work tree containing it,
//! else the workspace. The instruction chain (`AGENTS.md` files) and the skill roots are read
//! from the project root down to the target, so every family that reads them agrees on it.

use std::path::{Path, PathBuf};

use crate::{
    call::error::{ToolError, ToolErrorCode, ToolResult},
    path::Workspace,
};

/// The target directory a caller's `path` names for the context tools: the directory itself,
/// or the directory of a file; canonical, and checked by the caller's path rules.
///
/// # Errors
/// What [`Workspace::resolve`] returns (`path_boundary`, `invalid_request`, ...); `not_found`
/// when nothing is at `path`.
pub(crate) fn target_dir(ws: &Workspace, path: &str) -> ToolResult<PathBuf> {
    let resolved = ws.resolve(path)?;
    if !resolved.exists() {
        return Err(ToolError::new(
            ToolErrorCode::NotFound,
            format!("{path}: no such file or directory"),
        )
        .detail("path", path));
    }
    let real = resolved.real();
    if real.is_dir() {
        Ok(real.to_owned())
    } else {
        Ok(real.parent().unwrap_or(real).to_owned())
    }
}

/// The project root of `target` (a canonical directory): the nearest directory at or above it
/// holding a `.git` entry (a directory for a work tree, a file for a linked worktree or
/// submodule), else `workspace`.
///
/// With `restricted` the walk stops at `workspace` (a caller confined to it never has a root
/// above it), and a `target` outside `workspace` has `workspace`'s answer. Without it the walk
/// may reach `/`; a target outside the workspace with no work tree above it is its own root.
pub(crate) fn project_root(workspace: &Path, target: &Path, restricted: bool) -> PathBuf {
    let inside = target.starts_with(workspace);
    if restricted && !inside {
        return project_root(workspace, workspace, restricted);
    }
    for dir in target.ancestors() {
        if dir.join(".git").symlink_metadata().is_ok() {
            return dir.to_path_buf();
        }
        if restricted && dir == workspace {
            break;
        }
    }
    if inside {
        workspace.to_path_buf()
    } else {
        target.to_path_buf()
    }
}

/// The directories from `root` down to `target`, `root` first; just `[target]` when `target`
/// is not below `root`.
pub(crate) fn chain(root: &Path, target: &Path) -> Vec<PathBuf> {
    let Ok(rest) = target.strip_prefix(root) else {
        return vec![target.to_path_buf()];
    };
    let mut dirs = vec![root.to_path_buf()];
    let mut at = root.to_path_buf();
    for c in rest.components() {
        at.push(c);
        dirs.push(at.clone());
    }
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nearest_work_tree_wins_and_restricted_walks_stop_at_the_workspace() {
        let t = tempfile::tempdir().unwrap();
        let top = std::fs::canonicalize(t.path()).unwrap();
        std::fs::create_dir(top.join(".git")).unwrap();
        let ws = top.join("ws");
        let pkg = ws.join("pkg");
        let deep = pkg.join("src");
        std::fs::create_dir_all(&deep).unwrap();
        // The repository above the workspace is the root only for an unrestricted caller.
        assert_eq!(project_root(&ws, &deep, true), ws);
        assert_eq!(project_root(&ws, &deep, false), top);
        // A nested work tree (a `.git` file, as in a linked worktree) is nearer.
        std::fs::write(pkg.join(".git"), "gitdir: elsewhere\n").unwrap();
        assert_eq!(project_root(&ws, &deep, true), pkg);
        // A restricted caller's target outside the workspace has the workspace's answer.
        assert_eq!(project_root(&ws, &top, true), ws);
    }

    #[test]
    fn the_chain_runs_from_the_root_down_to_the_target() {
        let root = Path::new("/r");
        assert_eq!(
            chain(root, Path::new("/r/a/b")),
            vec![PathBuf::from("/r"), "/r/a".into(), "/r/a/b".into()]
        );
        assert_eq!(chain(root, root), vec![PathBuf::from("/r")]);
        assert_eq!(chain(root, Path::new("/x")), vec![PathBuf::from("/x")]);
    }
}
