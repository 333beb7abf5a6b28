//! `apply_patch`: multi-file patches, validated completely, then applied all or nothing. The
//! envelope's grammar and the hunk application to text are the [`engine`]; this module does the
//! filesystem work.
//!
//! Order of work (DESIGN §3 "Writes", invariant 8):
//! 1. Parse the whole envelope ([`engine::parse`]).
//! 2. Plan every operation against the files: resolve and confine paths, read originals, apply
//!    hunks in memory, check that added and move-target files do not exist. Any failure here
//!    changes nothing.
//! 3. Stage every new content as a temp file beside its target (fsynced).
//! 4. Commit in patch order, journaling an undo step for each visible change; before replacing or
//!    deleting a file its SHA-256 is checked against what was planned.
//! 5. On any failure, undo the journal in reverse and report which file and why.

use std::{
    collections::HashSet,
    io,
    path::{Path, PathBuf},
    sync::Arc,
};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{limits::EDIT_DIFF_MAX_BYTES, limits::EDIT_FILE_MAX_BYTES};

use crate::tools::family::Family;
use crate::{
    Access,
    call::{
        catalog::{Hints, ToolMeta, ToolSpec},
        context::CallContext,
        error::{ToolError, ToolErrorCode, ToolResult},
        text::TextView,
    },
    path::{At, Kind, Workspace, WorkspacePath},
    policy::Capability,
    primitives::{
        diff,
        text::{check_text, sha256_hex},
        write::{Precondition, Staged, check_sha256, read_bounded},
    },
    tools::{
        blocking::{blocking, blocking_locked},
        git::guard::guard_git_internals,
    },
};

mod engine;

use engine::FileOp;

/// The family's entry in the registry: its catalog entries.
pub(crate) const FAMILY: Family = Family::tools(specs);

pub(crate) fn specs() -> Vec<ToolSpec> {
    vec![ToolSpec::structured(
        ToolMeta {
            name: "apply_patch",
            title: "Apply a patch",
            description: "Apply a multi-file patch in the envelope \"*** Begin Patch\" ... \
                          \"*** End Patch\" with \"*** Add File: PATH\" (lines prefixed +), \
                          \"*** Delete File: PATH\", and \"*** Update File: PATH\" (optionally \
                          \"*** Move to: PATH\") followed by hunks: \"@@ [anchor line]\" then lines \
                          prefixed ' ' (context), '-' (remove) or '+' (add), optionally \
                          \"*** End of File\". The whole patch is validated before anything is \
                          written and applied all or nothing (rolled back on failure); errors name \
                          the file and the hunk. A hunk's lines must match once after the previous \
                          hunk, or several matches are a conflict naming the candidate lines; a \
                          hunk with an @@ anchor line takes the first match after the anchor. Updated files stay byte-exact: the BOM, each \
                          untouched line's ending and a missing final newline are kept, added lines \
                          take the ending of the lines they replace. dry_run returns the diff \
                          without writing.",
            capability: Capability::Write,
            hints: Hints {
                read_only: false,
                destructive: true,
                idempotent: false,
                open_world: false,
            },
        },
        apply_patch,
    )]
}

/// Arguments of `apply_patch`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApplyPatchArgs {
    /// The patch text, from "*** Begin Patch" to "*** End Patch".
    patch: String,
    /// Validate and return the diff without writing.
    #[serde(default)]
    dry_run: bool,
}

/// What happened to one file.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Action {
    /// Created.
    Add,
    /// Changed in place.
    Update,
    /// Changed and moved.
    Move,
    /// Deleted.
    Delete,
}

/// One file of the patch.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct PatchedFile {
    /// The path the patch named.
    path: String,
    /// What happened.
    action: Action,
    /// The new path of a moved file.
    #[serde(skip_serializing_if = "Option::is_none")]
    moved_to: Option<String>,
    /// SHA-256 (hex) of the new content; absent for a deletion.
    #[serde(skip_serializing_if = "Option::is_none")]
    sha256: Option<String>,
}

/// Result of `apply_patch`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ApplyPatchOutput {
    /// The files, in patch order.
    files: Vec<PatchedFile>,
    /// Unified diff of the whole patch (cut at 40000 bytes).
    diff: String,
    /// Nothing was written.
    dry_run: bool,
}

impl TextView for ApplyPatchOutput {
    fn summary(&self) -> String {
        format!(
            "apply_patch: {}{}; the files follow, then {}",
            crate::call::text::count(self.files.len() as u64, "file", "files"),
            if self.dry_run {
                ", dry run: nothing written"
            } else {
                " changed"
            },
            crate::primitives::diff::follows(&self.diff)
        )
    }

    fn body(&self, out: &mut String) {
        // The file list and the diff share the default body; the diff is already cut to
        // EDIT_DIFF_MAX_BYTES, the list gets the rest.
        let mut budget = crate::call::text::Budget::new(
            crate::call::text::body_limit(self.text_limit()).saturating_sub(self.diff.len() + 100),
        );
        let mut shown = 0;
        for f in &self.files {
            let action = serde_json::to_value(f.action)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            let line = match &f.moved_to {
                Some(to) => format!("{action} {} -> {to}\n", f.path),
                None => format!("{action} {}\n", f.path),
            };
            if !budget.take(line.len()) {
                break;
            }
            out.push_str(&line);
            shown += 1;
        }
        if shown < self.files.len() {
            out.push_str(&format!(
                "… and {} more files (in structuredContent)\n",
                self.files.len() - shown
            ));
        }
        out.push_str(&self.diff);
    }
}

async fn apply_patch(
    rt: Arc<Access>,
    args: ApplyPatchArgs,
    _cx: CallContext,
) -> ToolResult<ApplyPatchOutput> {
    let dry_run = args.dry_run;
    let (ops, paths) = {
        let rt = rt.clone();
        blocking(move || {
            let ops = engine::parse(&args.patch).map_err(|e| {
                ToolError::invalid(format!("patch line {}: {}", e.line, e.message))
                    .detail("line", e.line)
            })?;
            let paths = targets(rt.workspace(), &ops);
            Ok((ops, paths))
        })
        .await?
    };
    // Plan (read every original) and commit under the write locks of every file the patch
    // touches, taken in path order, so no other writer of this server commits in between.
    let access = rt.clone();
    blocking_locked(&access, paths, move |locks| {
        let steps = plan(rt.workspace(), &ops)?;
        for s in &steps {
            guard_git_internals(&rt, &s.path, &s.display)?;
            if let (Some(dest), Some(d)) = (&s.dest, &s.moved_display) {
                guard_git_internals(&rt, dest, d)?;
            }
            let unlocked = std::iter::once((&s.path, &s.display))
                .chain(s.dest.iter().zip(&s.moved_display))
                .find(|(p, _)| !locks.holds(p));
            if let Some((_, display)) = unlocked {
                return Err(ToolError::conflict(format!(
                    "{display}: the path resolved differently while the patch was being applied (a directory or link changed); nothing was changed, try again"
                ))
                .detail("path", display.clone()));
            }
        }
        let mut text = String::new();
        for s in &steps {
            text.push_str(&s.diff);
        }
        let diff = diff::cut(text, EDIT_DIFF_MAX_BYTES);
        let files = steps
            .iter()
            .map(|s| PatchedFile {
                path: s.display.clone(),
                action: s.action,
                moved_to: s.moved_display.clone(),
                sha256: s.new.as_deref().map(sha256_hex),
            })
            .collect();
        if !dry_run {
            commit(rt.workspace(), steps, None)?;
        }
        Ok(ApplyPatchOutput {
            files,
            diff,
            dry_run,
        })
    })
    .await
}

/// A file's content before the patch.
#[derive(Debug)]
pub(crate) struct Original {
    bytes: Vec<u8>,
    mode: Option<u32>,
    sha: String,
}

/// One planned, validated file operation.
#[derive(Debug)]
pub(crate) struct Step {
    action: Action,
    display: String,
    moved_display: Option<String>,
    /// The file the operation names (for an add: the file created).
    path: PathBuf,
    /// Where a moved file goes.
    dest: Option<PathBuf>,
    /// `path` as resolved (what the commit opens beneath the workspace root).
    named: WorkspacePath,
    /// `dest` as resolved.
    dest_named: Option<WorkspacePath>,
    original: Option<Original>,
    new: Option<Vec<u8>>,
    diff: String,
}

fn plan(ws: &Workspace, ops: &[FileOp]) -> ToolResult<Vec<Step>> {
    let mut seen: HashSet<PathBuf> = HashSet::new();
    let mut steps = Vec::with_capacity(ops.len());
    for op in ops {
        let named = op.path();
        let fail = |e: ToolError| prefix(e, op);
        match op {
            FileOp::Add { path, lines } => {
                let p = ws.resolve(path).map_err(fail)?;
                let display = ws.display(p.real());
                if p.exists() {
                    return Err(fail(ToolError::conflict("the file already exists")));
                }
                claim(&mut seen, p.real(), named)?;
                let mut body = lines.join("\n");
                if !lines.is_empty() {
                    body.push('\n');
                }
                steps.push(Step {
                    action: Action::Add,
                    diff: diff::created(&display, &body, usize::MAX),
                    display,
                    moved_display: None,
                    path: p.real().to_owned(),
                    dest: None,
                    named: p,
                    dest_named: None,
                    original: None,
                    new: Some(body.into_bytes()),
                });
            }
            FileOp::Delete { path } => {
                let p = ws.resolve_entry(path).map_err(fail)?;
                let display = ws.display(p.real());
                let original = read_original(ws, &p, &display).map_err(fail)?;
                claim(&mut seen, p.real(), named)?;
                let old = String::from_utf8_lossy(&original.bytes).into_owned();
                steps.push(Step {
                    action: Action::Delete,
                    diff: diff::unified(&display, &old, "", usize::MAX),
                    display,
                    moved_display: None,
                    path: p.real().to_owned(),
                    dest: None,
                    named: p,
                    dest_named: None,
                    original: Some(original),
                    new: None,
                });
            }
            FileOp::Update {
                path,
                move_to,
                hunks,
            } => {
                let p = ws.resolve_entry(path).map_err(fail)?;
                let display = ws.display(p.real());
                let original = read_original(ws, &p, &display).map_err(fail)?;
                let old = check_text(&original.bytes)
                    .map_err(|m| fail(ToolError::invalid(format!("the file {m}"))))?;
                let new_text = if hunks.is_empty() {
                    old.to_owned()
                } else {
                    engine::apply_hunks(old, hunks).map_err(|e| {
                        let mut err =
                            ToolError::conflict(format!("hunk {}: {}", e.hunk, e.message))
                                .detail("hunk", e.hunk);
                        if !e.candidates.is_empty() {
                            err = err
                                .detail("match_count", e.matches)
                                .detail("match_lines", e.candidates);
                        }
                        fail(err)
                    })?
                };
                claim(&mut seen, p.real(), named)?;
                let (dest, moved_display, dest_named) = match move_to {
                    Some(m) => {
                        let d = ws.resolve(m).map_err(fail)?;
                        if d.real() != p.real() {
                            if d.exists() {
                                return Err(fail(ToolError::conflict(format!(
                                    "move target {m} already exists"
                                ))));
                            }
                            claim(&mut seen, d.real(), m)?;
                        }
                        (
                            Some(d.real().to_owned()),
                            Some(ws.display(d.real())),
                            Some(d),
                        )
                    }
                    None => (None, None, None),
                };
                let diff_path = moved_display.as_deref().unwrap_or(&display);
                steps.push(Step {
                    action: if dest.is_some() {
                        Action::Move
                    } else {
                        Action::Update
                    },
                    diff: diff::unified(diff_path, old, &new_text, usize::MAX),
                    display,
                    moved_display,
                    path: p.real().to_owned(),
                    dest,
                    named: p,
                    dest_named,
                    original: Some(original),
                    new: Some(new_text.into_bytes()),
                });
            }
        }
    }
    Ok(steps)
}

/// The resolved paths `ops` write (each named file and each move target), resolved the way
/// [`plan`] resolves them: the keys of the patch's write locks. A path that does not resolve is
/// left out; `plan` reports it.
fn targets(ws: &Workspace, ops: &[FileOp]) -> Vec<PathBuf> {
    let mut paths = Vec::with_capacity(ops.len());
    for op in ops {
        let named = match op {
            FileOp::Add { path, .. } => ws.resolve(path),
            FileOp::Delete { path } | FileOp::Update { path, .. } => ws.resolve_entry(path),
        };
        paths.extend(named.ok().map(|p| p.real().to_owned()));
        if let FileOp::Update {
            move_to: Some(m), ..
        } = op
        {
            paths.extend(ws.resolve(m).ok().map(|p| p.real().to_owned()));
        }
    }
    paths
}

fn prefix(e: ToolError, op: &FileOp) -> ToolError {
    let verb = match op {
        FileOp::Add { .. } => "Add File",
        FileOp::Delete { .. } => "Delete File",
        FileOp::Update { .. } => "Update File",
    };
    let msg = format!("{verb} {}: {}", op.path(), e.message());
    let mut out = ToolError::new(e.code(), msg).detail("path", op.path());
    let details = e.to_json();
    for key in ["hunk", "match_count", "match_lines"] {
        if let Some(v) = details.get(key) {
            out = out.detail(key, v.clone());
        }
    }
    out
}

fn claim(seen: &mut HashSet<PathBuf>, p: &Path, named: &str) -> ToolResult<()> {
    if !seen.insert(p.to_owned()) {
        return Err(ToolError::invalid(format!(
            "{named}: the patch touches this file more than once"
        )));
    }
    Ok(())
}

fn read_original(ws: &Workspace, p: &WorkspacePath, display: &str) -> ToolResult<Original> {
    let at = ws.at(p).map_err(|e| Workspace::open_error(display, &e))?;
    let now = at
        .stat()
        .map_err(|e| Workspace::open_error(display, &e))?
        .ok_or_else(|| ToolError::io(display, &io::ErrorKind::NotFound.into()))?;
    match now.kind {
        Kind::File => {}
        Kind::Symlink => {
            return Err(ToolError::invalid(
                "is a symlink; patch the file it points to",
            ));
        }
        Kind::Dir | Kind::Other => return Err(ToolError::invalid("not a regular file")),
    }
    let bytes = read_bounded(&at, display, EDIT_FILE_MAX_BYTES as u64)?;
    Ok(Original {
        sha: sha256_hex(&bytes),
        mode: Some(now.mode),
        bytes,
    })
}

/// An undo step for a change already visible, on the directory descriptor the change was made
/// through; `display` names it in a failed rollback's report.
enum Undo {
    Remove {
        at: At,
        display: String,
    },
    Restore {
        at: At,
        display: String,
        bytes: Vec<u8>,
        mode: Option<u32>,
    },
    RemoveDir {
        at: At,
        display: String,
    },
}

/// Stages and commits `steps` (planned by [`plan`] on `ws`); with `fail_at = Some(i)` the commit
/// fails on purpose before step `i` (tests of the rollback).
pub(crate) fn commit(ws: &Workspace, steps: Vec<Step>, fail_at: Option<usize>) -> ToolResult<()> {
    let mut journal: Vec<Undo> = Vec::new();
    // Stage every new content first, so a full disk is found before anything is visible.
    let mut staged: Vec<Option<Staged>> = Vec::with_capacity(steps.len());
    for s in &steps {
        let Some(bytes) = &s.new else {
            staged.push(None);
            continue;
        };
        let (target, display) = match (&s.dest_named, &s.moved_display) {
            (Some(d), Some(md)) => (d, md),
            _ => (&s.named, &s.display),
        };
        let mut created = Vec::new();
        let at = ws.at_creating(target, &mut created);
        journal.extend(created.into_iter().map(|at| Undo::RemoveDir {
            display: at.name().to_string_lossy().into_owned(),
            at,
        }));
        let r = at
            .map_err(|e| Workspace::open_error(display, &e))
            .and_then(|at| {
                Staged::write(
                    &at,
                    display,
                    bytes,
                    s.original.as_ref().and_then(|o| o.mode),
                )
            });
        match r {
            Ok(st) => staged.push(Some(st)),
            Err(e) => {
                drop(staged);
                let _ = rollback(journal);
                return Err(e);
            }
        }
    }
    for (i, (s, st)) in steps.iter().zip(staged).enumerate() {
        let r = if fail_at == Some(i) {
            Err(ToolError::new(
                ToolErrorCode::ExecutionFailed,
                "injected failure",
            ))
        } else {
            commit_one(ws, s, st, &mut journal)
        };
        if let Err(e) = r {
            let what = prefix_step(&e, s);
            let undone = journal
                .iter()
                .filter(|u| !matches!(u, Undo::RemoveDir { .. }))
                .count();
            return match rollback(journal) {
                Ok(()) => Err(ToolError::new(
                    e.code(),
                    format!(
                        "{what}; nothing was changed (rolled back {undone} earlier file change(s))"
                    ),
                )
                .detail("path", s.display.clone())),
                Err(left) => Err(ToolError::new(
                    ToolErrorCode::ExecutionFailed,
                    format!(
                        "{what}; the rollback failed too, these files may be partly patched: {}",
                        left.join(", ")
                    ),
                )
                .with_side_effects()
                .detail("path", s.display.clone())),
            };
        }
    }
    Ok(())
}

fn prefix_step(e: &ToolError, s: &Step) -> String {
    format!("{}: {}", s.display, e.message())
}

fn commit_one(
    ws: &Workspace,
    s: &Step,
    st: Option<Staged>,
    journal: &mut Vec<Undo>,
) -> ToolResult<()> {
    let restore = |at: At, o: &Original| Undo::Restore {
        at,
        display: s.display.clone(),
        bytes: o.bytes.clone(),
        mode: o.mode,
    };
    let named = || {
        ws.at(&s.named)
            .map_err(|e| Workspace::open_error(&s.display, &e))
    };
    match (s.action, st, &s.original) {
        (Action::Add, Some(st), _) => {
            let target = st.target().clone();
            st.commit(&Precondition::Absent)?;
            journal.push(Undo::Remove {
                at: target,
                display: s.display.clone(),
            });
        }
        (Action::Update, Some(st), Some(o)) => {
            let target = st.target().clone();
            st.commit(&Precondition::Sha256(o.sha.clone()))?;
            journal.push(restore(target, o));
        }
        (Action::Move, Some(st), Some(o)) => {
            let source = named()?;
            check_sha256(&source, &s.display, &o.sha)?;
            let target = st.target().clone();
            if s.dest.as_ref() == Some(&s.path) {
                st.commit(&Precondition::Sha256(o.sha.clone()))?;
                journal.push(restore(target, o));
            } else {
                st.commit(&Precondition::Absent)?;
                journal.push(Undo::Remove {
                    at: target,
                    display: s.moved_display.clone().unwrap_or_default(),
                });
                source
                    .remove_file()
                    .map_err(|e| Workspace::open_error(&s.display, &e))?;
                journal.push(restore(source, o));
            }
        }
        (Action::Delete, None, Some(o)) => {
            let source = named()?;
            check_sha256(&source, &s.display, &o.sha)?;
            source
                .remove_file()
                .map_err(|e| Workspace::open_error(&s.display, &e))?;
            journal.push(restore(source, o));
        }
        _ => return Err(ToolError::internal("inconsistent patch step")),
    }
    Ok(())
}

/// Undoes `journal` in reverse; returns the files it could not restore.
fn rollback(journal: Vec<Undo>) -> Result<(), Vec<String>> {
    let mut failed = Vec::new();
    for u in journal.into_iter().rev() {
        let r = match &u {
            Undo::Remove { at, display } => at.remove_file().map_err(|_| display),
            Undo::RemoveDir { at, display } => at.remove_dir().map_err(|_| display),
            Undo::Restore {
                at,
                display,
                bytes,
                mode,
            } => Staged::write(at, display, bytes, *mode)
                .and_then(|st| st.commit(&Precondition::None))
                .map_err(|_| display),
        };
        if let Err(file) = r {
            tracing::error!(path = %file, "patch rollback could not restore a file");
            failed.push(file.clone());
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed)
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    fn ws() -> (tempfile::TempDir, Workspace) {
        let d = tempfile::tempdir().unwrap();
        let w = Workspace::new(d.path(), true, false).unwrap();
        (d, w)
    }

    #[test]
    fn a_commit_failure_rolls_back_earlier_files() {
        let (d, w) = ws();
        let root = d.path();
        fs::write(root.join("a.txt"), "a1\n").unwrap();
        fs::write(root.join("gone.txt"), "bye\n").unwrap();
        fs::write(root.join("c.txt"), "c1\n").unwrap();
        let ops = engine::parse(
            "*** Begin Patch\n*** Update File: a.txt\n@@\n-a1\n+a2\n*** Add File: new/b.txt\n+b\n\
             *** Delete File: gone.txt\n*** Update File: c.txt\n@@\n-c1\n+c2\n*** End Patch",
        )
        .unwrap();
        let steps = plan(&w, &ops).unwrap();
        let e = commit(&w, steps, Some(3)).unwrap_err();
        assert!(e.message().contains("rolled back 3"), "{}", e.message());
        assert_eq!(fs::read_to_string(root.join("a.txt")).unwrap(), "a1\n");
        assert_eq!(fs::read_to_string(root.join("gone.txt")).unwrap(), "bye\n");
        assert_eq!(fs::read_to_string(root.join("c.txt")).unwrap(), "c1\n");
        assert!(
            !root.join("new").exists(),
            "created directories are removed"
        );
        let names: Vec<_> = fs::read_dir(root)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 3, "no temp files left: {names:?}");
    }

    #[test]
    fn a_changed_file_at_commit_time_is_a_conflict_and_rolls_back() {
        let (d, w) = ws();
        let root = d.path();
        fs::write(root.join("a.txt"), "a1\n").unwrap();
        fs::write(root.join("b.txt"), "b1\n").unwrap();
        let ops = engine::parse(
            "*** Begin Patch\n*** Update File: a.txt\n@@\n-a1\n+a2\n*** Update File: b.txt\n@@\n-b1\n+b2\n*** End Patch",
        )
        .unwrap();
        let steps = plan(&w, &ops).unwrap();
        fs::write(root.join("b.txt"), "b1 changed by someone\n").unwrap();
        let e = commit(&w, steps, None).unwrap_err();
        assert_eq!(e.code(), ToolErrorCode::Conflict);
        assert_eq!(fs::read_to_string(root.join("a.txt")).unwrap(), "a1\n");
    }

    #[test]
    fn an_ambiguous_hunk_is_a_conflict_naming_the_candidate_lines() {
        let (d, w) = ws();
        fs::write(d.path().join("f.txt"), "x\n1\nx\n2\nx\n").unwrap();
        let ops = engine::parse(
            "*** Begin Patch\n*** Update File: f.txt\n@@\n-1\n+one\n@@\n-x\n+X\n*** End Patch",
        )
        .unwrap();
        let e = plan(&w, &ops).unwrap_err();
        assert_eq!(e.code(), ToolErrorCode::Conflict);
        assert!(
            e.message().contains("f.txt") && e.message().contains("lines 3, 5"),
            "{}",
            e.message()
        );
        let j = e.to_json();
        assert_eq!(j["hunk"], 2);
        assert_eq!(j["match_count"], 2);
        assert_eq!(j["match_lines"], serde_json::json!([3, 5]));
    }

    #[test]
    fn moves_and_parent_creation() {
        let (d, w) = ws();
        let root = d.path();
        fs::write(root.join("old.txt"), "x\n").unwrap();
        let ops = engine::parse(
            "*** Begin Patch\n*** Update File: old.txt\n*** Move to: dir/new.txt\n@@\n-x\n+y\n*** End Patch",
        )
        .unwrap();
        commit(&w, plan(&w, &ops).unwrap(), None).unwrap();
        assert!(!root.join("old.txt").exists());
        assert_eq!(fs::read_to_string(root.join("dir/new.txt")).unwrap(), "y\n");
    }
}
