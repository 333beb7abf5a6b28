//! File reading tools: `list_dir`, `list_files`, `read_file`, `view_image`; `read_file` reads
//! through the [`engine`] (line ranges and tails, streamed).

use std::{fs, sync::Arc, time::SystemTime};

use base64::Engine;
use ignore::{WalkBuilder, overrides::OverrideBuilder};
use rmcp::model::ContentBlock;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use protocol::limits::{
    IMAGE_MAX_BYTES, LIST_DIR_DEFAULT_ENTRIES, LIST_DIR_MAX_ENTRIES, LIST_FILES_DEFAULT,
    LIST_FILES_MAX, READ_DEFAULT_MAX_BYTES, READ_HARD_MAX_BYTES,
};

use crate::{
    Access,
    mcp::{
        catalog::{Hints, ToolMeta, ToolSpec},
        context::CallContext,
        error::{ToolError, ToolResult},
    },
    policy::Capability,
    primitives::{
        ignores::IgnoreFilter,
        skipped::{SkipList, SkippedPath},
        text::LineEnding,
        write::{open_regular, read_bounded},
    },
    tools::blocking::blocking,
};

mod engine;

use engine::{ReadError, Span};

pub(crate) fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec::structured(
            ToolMeta {
                name: "list_dir",
                title: "List a directory",
                description: "List the direct children of a directory with their type (file, \
                              dir, symlink, other), size in bytes and modification time \
                              (RFC 3339, UTC), sorted by name. At most max_entries (default 1000, \
                              at most 10000) are returned; `truncated` says when more exist. \
                              Symlinks are reported, not followed.",
                capability: Capability::Read,
                hints: Hints::READ,
            },
            list_dir,
        ),
        ToolSpec::structured(
            ToolMeta {
                name: "list_files",
                title: "List files recursively",
                description: "List files under a directory, recursively, sorted by path. Honours \
                              .gitignore, .ignore and git excludes unless include_ignored is true; \
                              .git directories are skipped; symlinked directories are never \
                              followed. `glob` keeps only matching paths (gitignore syntax, e.g. \
                              \"*.rs\" or \"src/**/*.ts\"). At most max_files (default 2000, at most \
                              20000); `truncated` says when more exist. Directories that could not \
                              be read (permission denied, longer than PATH_MAX, I/O errors) are \
                              listed in `skipped` (the first 100 in path order, with reasons; \
                              skipped_count counts all); `complete` is true only when nothing was \
                              truncated or skipped.",
                capability: Capability::Read,
                hints: Hints::READ,
            },
            list_files,
        ),
        ToolSpec::structured(
            ToolMeta {
                name: "read_file",
                title: "Read a text file",
                description: "Read a UTF-8 text file: whole, a 1-based inclusive line range \
                              (start_line, end_line), or the last tail_lines lines. Returns at most \
                              max_bytes (default 1 MiB, capped at 5 MiB) of whole lines; when cut, \
                              `truncated` is true and `next_start_line` says where to continue. \
                              Reports total_lines (null when the file was not read to its end), \
                              size_bytes, line_ending, whether a BOM was present (it is not part of \
                              `content`), and sha256 of the whole file when it was read whole \
                              (use it as expected_sha256 for edits). Huge files are streamed, never \
                              loaded whole. Binary or non-UTF-8 files are an error.",
                capability: Capability::Read,
                hints: Hints::READ,
            },
            read_file,
        ),
        ToolSpec::content(
            ToolMeta {
                name: "view_image",
                title: "View an image",
                description: "Return a PNG, JPEG, GIF or WebP image (recognised by its signature, \
                              not its extension) of at most 4 MiB as MCP image content.",
                capability: Capability::Read,
                hints: Hints::READ,
            },
            view_image,
        ),
    ]
}

fn default_dot() -> String {
    ".".to_owned()
}

// === list_dir ===

/// Arguments of `list_dir`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListDirArgs {
    /// Directory to list, relative to the workspace (default ".").
    #[serde(default = "default_dot")]
    path: String,
    /// Most entries to return (default 1000, at most 10000).
    #[schemars(range(min = 1, max = LIST_DIR_MAX_ENTRIES))]
    max_entries: Option<usize>,
}

/// One directory entry.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct DirEntry {
    /// File name.
    name: String,
    /// `file`, `dir`, `symlink` or `other`.
    #[serde(rename = "type")]
    kind: &'static str,
    /// Size in bytes (of the link itself for symlinks).
    size: u64,
    /// Last modification, RFC 3339 UTC; absent when unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    modified: Option<String>,
}

/// Result of `list_dir`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ListDirOutput {
    /// The directory listed.
    path: String,
    /// Entries sorted by name.
    entries: Vec<DirEntry>,
    /// Entries in the directory.
    total_entries: usize,
    /// More entries exist than were returned.
    truncated: bool,
}

async fn list_dir(
    rt: Arc<Access>,
    args: ListDirArgs,
    _cx: CallContext,
) -> ToolResult<ListDirOutput> {
    let max = args
        .max_entries
        .unwrap_or(LIST_DIR_DEFAULT_ENTRIES)
        .clamp(1, LIST_DIR_MAX_ENTRIES);
    blocking(move || {
        let ws = rt.workspace();
        let dir = ws.resolve(&args.path)?;
        let display = ws.display(dir.real());
        let rd = fs::read_dir(dir.real()).map_err(|e| ToolError::io(&args.path, &e))?;
        let mut names: Vec<std::ffi::OsString> =
            rd.filter_map(|e| e.ok().map(|e| e.file_name())).collect();
        names.sort_unstable();
        let total = names.len();
        let entries = names
            .iter()
            .take(max)
            .map(|name| {
                let meta = fs::symlink_metadata(dir.real().join(name)).ok();
                let kind = match meta.as_ref().map(|m| m.file_type()) {
                    Some(t) if t.is_symlink() => "symlink",
                    Some(t) if t.is_dir() => "dir",
                    Some(t) if t.is_file() => "file",
                    _ => "other",
                };
                DirEntry {
                    name: name.to_string_lossy().into_owned(),
                    kind,
                    size: meta.as_ref().map_or(0, |m| m.len()),
                    modified: meta.and_then(|m| m.modified().ok()).map(rfc3339),
                }
            })
            .collect();
        Ok(ListDirOutput {
            path: display,
            entries,
            total_entries: total,
            truncated: total > max,
        })
    })
    .await
}

fn rfc3339(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

// === list_files ===

/// Arguments of `list_files`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListFilesArgs {
    /// Directory to walk, relative to the workspace (default ".").
    #[serde(default = "default_dot")]
    path: String,
    /// Keep only paths matching this gitignore-style glob, e.g. "*.rs" or "src/**/*.ts".
    glob: Option<String>,
    /// Also list files that .gitignore, .ignore or git excludes would skip.
    #[serde(default)]
    include_ignored: bool,
    /// Most files to return (default 2000, at most 20000).
    #[schemars(range(min = 1, max = LIST_FILES_MAX))]
    max_files: Option<usize>,
}

/// Result of `list_files`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ListFilesOutput {
    /// The directory walked.
    path: String,
    /// File paths (files and symlinks, never directories), sorted.
    files: Vec<String>,
    /// More files exist than were returned.
    truncated: bool,
    /// Directories and entries that could not be read (so files under them are missing): the
    /// first 100 in path order.
    skipped: Vec<SkippedPath>,
    /// How many paths were skipped in all.
    skipped_count: usize,
    /// Every file under `path` was listed: nothing truncated, nothing skipped.
    complete: bool,
    /// Ignore files applied only in part because they exceed 1048576 bytes or 10000 patterns
    /// (files their later patterns ignore are listed), one note per file, at most 20. Absent
    /// when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    notes: Vec<String>,
}

async fn list_files(
    rt: Arc<Access>,
    args: ListFilesArgs,
    cx: CallContext,
) -> ToolResult<ListFilesOutput> {
    let max = args
        .max_files
        .unwrap_or(LIST_FILES_DEFAULT)
        .clamp(1, LIST_FILES_MAX);
    blocking(move || {
        let ws = rt.workspace();
        let root = ws.resolve(&args.path)?;
        if !root.real().is_dir() {
            return Err(ToolError::invalid(format!(
                "{}: not a directory",
                args.path
            )));
        }
        let mut ob = OverrideBuilder::new(root.real());
        if let Some(g) = &args.glob {
            ob.add(g)
                .map_err(|e| ToolError::invalid(format!("bad glob {g:?}: {e}")))?;
        }
        let overrides = ob
            .build()
            .map_err(|e| ToolError::invalid(format!("bad glob: {e}")))?;
        // Ignore files are read by our filter, capped and shared (issue 11 item 4).
        let filter = (!args.include_ignored).then(|| {
            Arc::new(IgnoreFilter::new(
                rt.ignore_cache().clone(),
                root.real(),
                overrides.clone(),
            ))
        });
        let keep = filter.clone();
        let mut wb = WalkBuilder::new(root.real());
        wb.standard_filters(false)
            .follow_links(false)
            .overrides(overrides)
            .sort_by_file_name(|a, b| a.cmp(b))
            .filter_entry(move |e| {
                e.file_name() != ".git" && keep.as_ref().is_none_or(|f| f.keep(e))
            });
        let mut files = Vec::new();
        let mut truncated = false;
        let mut skipped = SkipList::default();
        for entry in wb.build() {
            if cx.cancel.is_cancelled() {
                return Err(ToolError::cancelled());
            }
            let entry = match entry {
                Ok(entry) => entry,
                Err(err) => {
                    skipped.push_walk_error(&err, root.real());
                    continue;
                }
            };
            if entry.depth() == 0 || entry.file_type().is_none_or(|t| t.is_dir()) {
                continue;
            }
            if files.len() == max {
                truncated = true;
                break;
            }
            files.push(ws.display(entry.path()));
        }
        let skipped_count = skipped.total();
        Ok(ListFilesOutput {
            path: ws.display(root.real()),
            files,
            truncated,
            skipped: skipped.render(ws),
            skipped_count,
            complete: !truncated && skipped_count == 0,
            notes: filter.map_or_else(Vec::new, |f| {
                crate::primitives::ignores::notes(&f.capped(), ws)
            }),
        })
    })
    .await
}

// === read_file ===

/// Arguments of `read_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadFileArgs {
    /// File to read, relative to the workspace.
    path: String,
    /// First line to return, 1-based (default 1).
    #[schemars(range(min = 1))]
    start_line: Option<u64>,
    /// Last line to return, 1-based and inclusive (default: the end of the file).
    #[schemars(range(min = 1))]
    end_line: Option<u64>,
    /// Return the last N lines instead of a range.
    #[schemars(range(min = 1))]
    tail_lines: Option<u64>,
    /// Most bytes of content to return: 1 to 5242880 (larger values are capped), default
    /// 1048576. Content ends at a line boundary unless one line alone is longer (see cut_line).
    #[schemars(range(min = 1))]
    max_bytes: Option<usize>,
}

/// Result of `read_file`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ReadFileOutput {
    /// The file read.
    path: String,
    /// The text, whole lines with their line endings (a BOM is not included).
    content: String,
    /// 1-based first line of `content`; null when unknown (tail of a large file) or empty.
    start_line: Option<u64>,
    /// 1-based last line of `content`; null when unknown or empty.
    end_line: Option<u64>,
    /// Lines in the file; null when the file was not read to its end.
    total_lines: Option<u64>,
    /// File size in bytes.
    size_bytes: u64,
    /// `content` stopped before the requested lines ended because of max_bytes.
    truncated: bool,
    /// The line to pass as start_line to continue; null when nothing follows.
    next_start_line: Option<u64>,
    /// A line longer than max_bytes that `content` holds only part of: its first bytes for a
    /// range read, its last bytes for tail_lines. Its other bytes cannot be read with this
    /// max_bytes (raise it, up to 5242880). Absent when no line was cut.
    #[serde(skip_serializing_if = "Option::is_none")]
    cut_line: Option<u64>,
    /// Length in bytes of cut_line (with its line break) when the read saw all of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    cut_line_bytes: Option<u64>,
    /// The file starts with a UTF-8 byte order mark.
    bom: bool,
    /// Line endings seen in `content`: none, lf, crlf or mixed.
    line_ending: LineEnding,
    /// SHA-256 (hex) of the whole file; present only when the whole file was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    sha256: Option<String>,
}

async fn read_file(
    rt: Arc<Access>,
    args: ReadFileArgs,
    _cx: CallContext,
) -> ToolResult<ReadFileOutput> {
    let span = match (args.tail_lines, args.start_line, args.end_line) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
            return Err(ToolError::invalid(
                "tail_lines cannot be combined with start_line or end_line",
            ));
        }
        (Some(0), ..) => return Err(ToolError::invalid("tail_lines must be at least 1")),
        (Some(n), ..) => Span::Tail(n),
        (None, start, end) => {
            let start = start.unwrap_or(1);
            if start == 0 {
                return Err(ToolError::invalid(
                    "start_line is 1-based: use 1 for the first line",
                ));
            }
            if let Some(e) = end
                && e < start
            {
                return Err(ToolError::invalid(format!(
                    "end_line {e} is before start_line {start}"
                )));
            }
            Span::Lines { start, end }
        }
    };
    if args.max_bytes == Some(0) {
        return Err(ToolError::invalid("max_bytes must be at least 1"));
    }
    let max = args
        .max_bytes
        .unwrap_or(READ_DEFAULT_MAX_BYTES)
        .min(READ_HARD_MAX_BYTES);
    blocking(move || {
        let ws = rt.workspace();
        let p = ws.resolve(&args.path)?;
        let display = ws.display(p.real());
        let (mut file, meta) = open_regular(p.real(), &args.path)?;
        let ex = engine::read(&mut file, meta.len(), span, max).map_err(|e| match e {
            ReadError::Io(err) => ToolError::io(&args.path, &err),
            ReadError::Binary(at) => ToolError::invalid(format!(
                "{}: looks binary (NUL byte at offset {at}); only UTF-8 text can be read (use view_image for images)",
                args.path
            )),
            ReadError::NotUtf8 { line } => ToolError::invalid(format!(
                "{}: line {line} is not valid UTF-8; only UTF-8 text can be read",
                args.path
            )),
            ReadError::PastEnd { total } => ToolError::invalid(format!(
                "{}: start_line is past the end of the file ({total} lines)",
                args.path
            ))
            .detail("total_lines", total),
        })?;
        Ok(ReadFileOutput {
            path: display,
            content: ex.content,
            start_line: ex.start_line,
            end_line: ex.end_line,
            total_lines: ex.total_lines,
            size_bytes: meta.len(),
            truncated: ex.truncated,
            next_start_line: ex.next_start_line,
            cut_line: ex.cut_line.map(|(l, _)| l),
            cut_line_bytes: ex.cut_line.and_then(|(_, b)| b),
            bom: ex.bom,
            line_ending: ex.line_ending,
            sha256: ex.sha256,
        })
    })
    .await
}

// === view_image ===

/// Arguments of `view_image`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ViewImageArgs {
    /// Image file, relative to the workspace.
    path: String,
}

async fn view_image(
    rt: Arc<Access>,
    args: ViewImageArgs,
    _cx: CallContext,
) -> ToolResult<Vec<ContentBlock>> {
    blocking(move || {
        let ws = rt.workspace();
        let p = ws.resolve(&args.path)?;
        let bytes = read_bounded(p.real(), &args.path, IMAGE_MAX_BYTES as u64)?;
        let mime = image_mime(&bytes).ok_or_else(|| {
            ToolError::invalid(format!(
                "{}: not a PNG, JPEG, GIF or WebP image (by its first bytes)",
                args.path
            ))
        })?;
        let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
        Ok(vec![ContentBlock::image(data, mime)])
    })
    .await
}

/// The MIME type of an image recognised by its signature.
fn image_mime(b: &[u8]) -> Option<&'static str> {
    if b.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if b.starts_with(b"\xFF\xD8\xFF") {
        Some("image/jpeg")
    } else if b.starts_with(b"GIF87a") || b.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if b.len() >= 12 && &b[..4] == b"RIFF" && &b[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_signatures() {
        assert_eq!(image_mime(b"\x89PNG\r\n\x1a\nrest"), Some("image/png"));
        assert_eq!(image_mime(b"\xFF\xD8\xFF\xE0"), Some("image/jpeg"));
        assert_eq!(image_mime(b"GIF89a.."), Some("image/gif"));
        assert_eq!(image_mime(b"RIFF\0\0\0\0WEBPVP8 "), Some("image/webp"));
        assert_eq!(image_mime(b"<svg"), None);
    }
}
