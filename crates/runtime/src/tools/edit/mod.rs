//! Writing tools: `write_file` and `edit_file`; `edit_file`'s exact replacement is the
//! [`engine`].

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{limits::EDIT_DIFF_MAX_BYTES, limits::EDIT_FILE_MAX_BYTES};

use crate::tools::family::Family;
use crate::{
    Access,
    call::{
        catalog::{Hints, ToolMeta, ToolSpec},
        context::CallContext,
        error::{ToolError, ToolResult},
        text::TextView,
    },
    path::{Kind, Workspace, WorkspacePath},
    policy::Capability,
    primitives::{
        diff,
        text::{check_text, sha256_hex},
        write::{Precondition, Staged, existing_mode, read_bounded},
    },
    tools::{
        blocking::{blocking, blocking_locked},
        git::guard::guard_git_internals,
    },
};

/// Used by the patch engine too (`MAX_REPORTED_LINES`).
pub(super) mod engine;

use engine::EditError;

/// The family's entry in the registry: its catalog entries.
pub(crate) const FAMILY: Family = Family::tools(specs);

pub(crate) fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec::structured(
            ToolMeta {
                name: "write_file",
                title: "Write a file",
                description: "Write a whole file atomically (temp file, fsync, rename): readers \
                              see the old or the new content, never a mix. Creates missing parent \
                              directories unless create_dirs is false. create_only fails with \
                              conflict if the file exists; expected_sha256 fails with conflict \
                              unless the file's current SHA-256 matches at the moment of the \
                              rename. An existing file keeps its permission bits. Returns the size \
                              and the new SHA-256.",
                capability: Capability::Write,
                hints: Hints {
                    read_only: false,
                    destructive: true,
                    idempotent: true,
                    open_world: false,
                },
            },
            write_file,
        ),
        ToolSpec::structured(
            ToolMeta {
                name: "edit_file",
                title: "Edit a file",
                description: "Replace exact text in a UTF-8 file. old_text must occur exactly \
                              once unless replace_all is true; zero or several matches is a \
                              conflict that reports the count and the line numbers. old_text \
                              written with LF line breaks also matches a CRLF, lone-CR or mixed \
                              file, and new_text's line breaks follow the replaced text's style. \
                              Every byte outside the replaced spans (BOM, line endings, final \
                              newline) is kept. expected_sha256 guards against concurrent \
                              changes; dry_run previews. Returns a unified diff and the new \
                              SHA-256.",
                capability: Capability::Write,
                hints: Hints {
                    read_only: false,
                    destructive: true,
                    idempotent: false,
                    open_world: false,
                },
            },
            edit_file,
        ),
    ]
}

fn yes() -> bool {
    true
}

/// Arguments of `write_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct WriteFileArgs {
    /// File to write, relative to the workspace.
    path: String,
    /// The whole new content (UTF-8 text).
    content: String,
    /// Fail with conflict if the file already exists.
    #[serde(default)]
    create_only: bool,
    /// Fail with conflict unless the file's current SHA-256 (hex) is this.
    expected_sha256: Option<String>,
    /// Create missing parent directories (default true).
    #[serde(default = "yes")]
    create_dirs: bool,
}

/// Result of `write_file`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct WriteFileOutput {
    /// The file written.
    path: String,
    /// Bytes written.
    size_bytes: u64,
    /// SHA-256 (hex) of the new content.
    sha256: String,
    /// The file did not exist before.
    created: bool,
}

impl TextView for WriteFileOutput {
    fn summary(&self) -> String {
        format!(
            "write_file {}: {} {} bytes (sha256 {})",
            self.path,
            if self.created {
                "created with"
            } else {
                "replaced with"
            },
            self.size_bytes,
            self.sha256
        )
    }
}

async fn write_file(
    rt: Arc<Access>,
    args: WriteFileArgs,
    _cx: CallContext,
) -> ToolResult<WriteFileOutput> {
    if args.content.len() > EDIT_FILE_MAX_BYTES {
        return Err(ToolError::limit(format!(
            "content is {} bytes; the limit is {EDIT_FILE_MAX_BYTES}",
            args.content.len()
        )));
    }
    if args.create_only && args.expected_sha256.is_some() {
        return Err(ToolError::invalid(
            "create_only and expected_sha256 contradict each other",
        ));
    }
    let (p, display) = resolve_for_write(&rt, &args.path).await?;
    let access = rt.clone();
    blocking_locked(&access, vec![p.real().to_owned()], move |_| {
        let ws = rt.workspace();
        // The parent is opened beneath the workspace root; what follows happens in it.
        let at = match ws.at(&p) {
            Ok(at) => at,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if !args.create_dirs {
                    return Err(ToolError::new(
                        crate::call::error::ToolErrorCode::NotFound,
                        format!(
                            "{display}: the parent directory does not exist (create_dirs is false)"
                        ),
                    ));
                }
                ws.at_creating(&p, &mut Vec::new())
                    .map_err(|e| Workspace::open_error(&display, &e))?
            }
            Err(e) if e.kind() == std::io::ErrorKind::IsADirectory => {
                return Err(ToolError::invalid(format!("{display}: is a directory")));
            }
            Err(e) => return Err(Workspace::open_error(&display, &e)),
        };
        let now = at.stat().map_err(|e| Workspace::open_error(&display, &e))?;
        let existed = now.is_some();
        if now.is_some_and(|s| s.kind == Kind::Dir) {
            return Err(ToolError::invalid(format!("{display}: is a directory")));
        }
        if args.create_only && existed {
            return Err(
                ToolError::conflict(format!("{display}: already exists (create_only)"))
                    .detail("path", display.clone()),
            );
        }
        let staged = Staged::write(&at, &display, args.content.as_bytes(), existing_mode(&at))?;
        let pre = match (&args.expected_sha256, args.create_only) {
            (Some(h), _) => Precondition::Sha256(h.trim().to_ascii_lowercase()),
            (None, true) => Precondition::Absent,
            (None, false) => Precondition::None,
        };
        staged.commit(&pre)?;
        Ok(WriteFileOutput {
            path: display,
            size_bytes: args.content.len() as u64,
            sha256: sha256_hex(args.content.as_bytes()),
            created: !existed,
        })
    })
    .await
}

/// Arguments of `edit_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct EditFileArgs {
    /// File to edit, relative to the workspace.
    path: String,
    /// Exact text to replace (must occur once unless replace_all).
    old_text: String,
    /// Replacement text.
    new_text: String,
    /// Replace every occurrence.
    #[serde(default)]
    replace_all: bool,
    /// Fail with conflict unless the file's current SHA-256 (hex) is this.
    expected_sha256: Option<String>,
    /// Compute and return the diff without writing.
    #[serde(default)]
    dry_run: bool,
}

/// Result of `edit_file`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct EditFileOutput {
    /// The file edited.
    path: String,
    /// Spans replaced.
    replacements: usize,
    /// 1-based line of the first replaced span.
    first_line: usize,
    /// Unified diff of the change (cut at 40000 bytes).
    diff: String,
    /// SHA-256 (hex) before the edit.
    previous_sha256: String,
    /// SHA-256 (hex) after the edit (what it would be, for a dry run).
    sha256: String,
    /// Nothing was written.
    dry_run: bool,
}

impl TextView for EditFileOutput {
    fn summary(&self) -> String {
        format!(
            "edit_file {}: {} from line {}{} (sha256 {} -> {}); {}",
            self.path,
            crate::call::text::count(self.replacements as u64, "replacement", "replacements"),
            self.first_line,
            if self.dry_run {
                ", dry run: nothing written"
            } else {
                ""
            },
            self.previous_sha256,
            self.sha256,
            crate::primitives::diff::follows(&self.diff)
        )
    }

    fn body(&self, out: &mut String) {
        out.push_str(&self.diff);
    }
}

async fn edit_file(
    rt: Arc<Access>,
    args: EditFileArgs,
    _cx: CallContext,
) -> ToolResult<EditFileOutput> {
    if args.old_text == args.new_text {
        return Err(ToolError::invalid("old_text and new_text are identical"));
    }
    let (p, display) = resolve_for_write(&rt, &args.path).await?;
    // Read, check, compute and commit under the file's write lock: another writer of this
    // server cannot commit in between, so a success is never overwritten unseen.
    let access = rt.clone();
    blocking_locked(&access, vec![p.real().to_owned()], move |_| {
        let at = rt.workspace().at(&p).map_err(|e| Workspace::open_error(&display, &e))?;
        let original = read_bounded(&at, &display, EDIT_FILE_MAX_BYTES as u64)?;
        let old_str = check_text(&original).map_err(|m| ToolError::invalid(format!("{display} {m}")))?;
        let previous = sha256_hex(&original);
        if let Some(expected) = &args.expected_sha256
            && !expected.trim().eq_ignore_ascii_case(&previous)
        {
            return Err(ToolError::conflict(format!(
                "{display}: the file changed (sha256 is {previous}, expected {expected}); read it again"
            ))
            .detail("path", display.clone())
            .detail("actual_sha256", previous));
        }
        let planned = engine::replace(&original, &args.old_text, &args.new_text, args.replace_all)
            .map_err(|e| match e {
                EditError::EmptyOld => ToolError::invalid("old_text is empty"),
                EditError::NotFound => ToolError::conflict(format!(
                    "{display}: old_text was not found (0 matches); read the file again and copy the text exactly"
                ))
                .detail("match_count", 0),
                EditError::Ambiguous { count, lines } => ToolError::conflict(format!(
                    "{display}: old_text matches {count} times (lines {}); add surrounding lines to make it unique, or set replace_all",
                    lines.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
                ))
                .detail("match_count", count)
                .detail("match_lines", lines),
            })?;
        let new_str = std::str::from_utf8(&planned.bytes)
            .map_err(|_| ToolError::internal("the edit produced invalid UTF-8"))?;
        let diff = diff::unified(&display, old_str, new_str, EDIT_DIFF_MAX_BYTES);
        let sha = sha256_hex(&planned.bytes);
        if !args.dry_run {
            let staged = Staged::write(&at, &display, &planned.bytes, existing_mode(&at))?;
            staged.commit(&Precondition::Sha256(previous.clone()))?;
        }
        Ok(EditFileOutput {
            path: display,
            replacements: planned.count,
            first_line: planned.first_line,
            diff,
            previous_sha256: previous,
            sha256: sha,
            dry_run: args.dry_run,
        })
    })
    .await
}

/// Resolves `path` for writing (confined to the workspace, not inside git's configuration
/// without an exec mode) and its display name, off the async threads.
///
/// # Errors
/// What `Workspace::resolve` and `guard_git_internals` return.
async fn resolve_for_write(rt: &Arc<Access>, path: &str) -> ToolResult<(WorkspacePath, String)> {
    let rt = rt.clone();
    let path = path.to_owned();
    blocking(move || {
        let ws = rt.workspace();
        let p = ws.resolve(&path)?;
        let display = ws.display(p.real());
        guard_git_internals(&rt, p.real(), &display)?;
        Ok((p, display))
    })
    .await
}
