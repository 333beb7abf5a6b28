//! File reading tools: `list_dir`, `list_files`, `read_file`, `view_image`; `read_file` reads
//! through the [`engine`] (line ranges and tails, streamed).

use std::{fs, sync::Arc, time::SystemTime};

use base64::Engine;
use ignore::{WalkBuilder, overrides::OverrideBuilder};
use rmcp::model::ContentBlock;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::limits::{
    IMAGE_MAX_BYTES, LIST_DIR_DEFAULT_ENTRIES, LIST_DIR_MAX_ENTRIES, LIST_FILES_DEFAULT,
    LIST_FILES_MAX, READ_DEFAULT_MAX_BYTES, RESULT_SUMMARY_MAX_CHARS, RESULT_TEXT_DEFAULT_CHARS,
    RESULT_TEXT_RAISED_MAX_CHARS,
};

use crate::tools::family::Family;
use crate::{
    Access,
    call::{
        catalog::{Hints, ToolMeta, ToolSpec},
        context::CallContext,
        error::{ToolError, ToolResult},
        text::{Budget, TextView, body_limit},
    },
    path::{At, Kind, Workspace},
    policy::Capability,
    primitives::{
        ignores::IgnoreFilter,
        skipped::{SkipList, SkippedPath},
        text::LineEnding,
        write::{open_regular, read_bounded, reader_at},
    },
    tools::{blocking::blocking, cursor},
};

mod engine;

use engine::{Next, ReadError, Span};

/// The family's entry in the registry: its catalog entries.
pub(crate) const FAMILY: Family = Family::tools(specs);

pub(crate) fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec::structured(
            ToolMeta {
                name: "list_dir",
                title: "List a directory",
                description: "List the direct children of a directory with their type (file, \
                              dir, symlink, other), size in bytes and modification time \
                              (RFC 3339, UTC), sorted by name; symlinks are reported, not \
                              followed. A page holds at most max_entries (default 1000) and, \
                              by default, what fits in 45000 characters; the first line of the \
                              text says how many there are and, when more follow, the offset \
                              to pass (next_offset). An explicit max_entries (at most 10000) \
                              allows up to 500000 characters.",
                capability: Capability::Read,
                hints: Hints::READ,
            },
            list_dir,
        )
        .larger_on_request(),
        ToolSpec::structured(
            ToolMeta {
                name: "list_files",
                title: "List files recursively",
                description: "List files under a directory, recursively, sorted by path (one path a \
                              line in the text). Honours .ignore files and, inside a git \
                              repository, .gitignore and git excludes unless include_ignored \
                              (ignored_count says how many entries they left out); .git and \
                              the server's own configuration and state are skipped (a note \
                              says so); symlinked directories are \
                              never followed. glob keeps matching paths (gitignore syntax, e.g. \
                              \"*.rs\" or \"src/**/*.ts\"). A page holds at most max_files (default \
                              2000) and, by default, what fits in 45000 characters; then \
                              next_cursor continues with the same arguments plus cursor. An \
                              explicit max_files (at most 20000) allows up to 500000 characters. \
                              Directories that could not be read are listed in `skipped` (the \
                              first 100, with reasons; skipped_count counts all); `complete` is \
                              true only when nothing was truncated or skipped.",
                capability: Capability::Read,
                hints: Hints::READ,
            },
            list_files,
        )
        .larger_on_request(),
        ToolSpec::structured(
            ToolMeta {
                name: "read_file",
                title: "Read a text file",
                description: "Read a UTF-8 text file: whole, a 1-based inclusive line range \
                              (start_line, end_line), or the last tail_lines lines. The text \
                              block is a summary line (lines, total_lines, size, sha256 when read \
                              whole) then the file's text exactly. Returns at most max_bytes \
                              (default 42999, what fits in a host's default result size; at most \
                              5 MiB) of whole lines; when cut, truncated is true and next_cursor \
                              (named in the summary) continues exactly: pass it with path for \
                              the rest, forward for a range, backward for a tail, also inside a \
                              line longer than max_bytes. next_start_line gives the next whole \
                              line. Reports size_bytes, line_ending, bom (not part of the text) \
                              and sha256 of the whole file when it was read whole (use it as \
                              expected_sha256 for edits). Huge files are streamed, never loaded \
                              whole. Binary or non-UTF-8 files are an error.",
                capability: Capability::Read,
                hints: Hints::READ,
            },
            read_file,
        )
        .larger_on_request(),
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
    /// Most entries to return (default 1000 and what fits in 45000 characters; at most 10000,
    /// and at most 500000 characters when given).
    #[schemars(range(min = 1, max = LIST_DIR_MAX_ENTRIES))]
    max_entries: Option<usize>,
    /// Entries to skip, in name order (next_offset of the previous page; default 0).
    #[serde(default)]
    offset: usize,
}

/// One directory entry.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct DirEntry {
    /// File name (quoted when it is not UTF-8, as paths are: `"caf\xe9.txt"`).
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

impl DirEntry {
    /// The entry's line in the text block: name (with `/` for a directory), type, size, time.
    fn line(&self) -> String {
        format!(
            "{}{}\t{}\t{}\t{}\n",
            self.name,
            if self.kind == "dir" { "/" } else { "" },
            self.kind,
            self.size,
            self.modified.as_deref().unwrap_or("-")
        )
    }
}

/// Result of `list_dir`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ListDirOutput {
    /// The directory listed.
    path: String,
    /// Entries sorted by name, from `offset`.
    entries: Vec<DirEntry>,
    /// Entries in the directory.
    total_entries: usize,
    /// Entries skipped before the first one returned.
    offset: usize,
    /// More entries follow: pass next_offset as offset for them.
    truncated: bool,
    /// The offset of the next page; absent when this page reaches the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_offset: Option<usize>,
    /// One note per entry left out because it is the server's own configuration or state
    /// (never listed while paths are confined; not counted in total_entries). Absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    notes: Vec<String>,
    #[serde(skip)]
    limit: usize,
    #[serde(skip)]
    max_entries: Option<usize>,
}

impl TextView for ListDirOutput {
    fn summary(&self) -> String {
        let range = if self.entries.is_empty() {
            "no entries".to_owned()
        } else {
            format!(
                "entries {}-{}",
                self.offset + 1,
                self.offset + self.entries.len()
            )
        };
        let mut s = format!(
            "list_dir {}: {range} of {} (name, type, size, modified)",
            self.path, self.total_entries
        );
        match self.next_offset {
            Some(n) => {
                let mut args = serde_json::json!({"path": self.path, "offset": n});
                if let Some(m) = self.max_entries {
                    args["max_entries"] = m.into();
                }
                s.push_str(&format!("; more: call list_dir with {args}"));
            }
            None => s.push_str("; complete"),
        }
        s
    }

    fn body(&self, out: &mut String) {
        for e in &self.entries {
            out.push_str(&e.line());
        }
        crate::call::text::skipped_trailer(out, &[], &self.notes);
    }

    fn text_limit(&self) -> usize {
        self.limit
    }
}

/// The text limit of a list whose caller gave `explicit` as its page size, or none.
fn list_limit<T>(explicit: Option<T>) -> usize {
    if explicit.is_some() {
        RESULT_TEXT_RAISED_MAX_CHARS
    } else {
        RESULT_TEXT_DEFAULT_CHARS
    }
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
    let limit = list_limit(args.max_entries);
    blocking(move || {
        let ws = rt.workspace();
        let dir = ws.resolve(&args.path)?;
        let display = ws.display(dir.real());
        // Listed through a descriptor opened beneath the workspace root, each entry looked at
        // relative to it: a directory swapped for a symlink cannot make it list outside.
        let fd = ws
            .open_dir(&dir)
            .map_err(|e| Workspace::open_error(&args.path, &e))?;
        let mut names = list_names(&fd).map_err(|e| ToolError::io(&args.path, &e))?;
        let left_out = ws.left_out();
        names.retain(|n| left_out.keep(&dir.real().join(n)));
        names.sort_unstable();
        let total = names.len();
        // Notes on what was left out go after the entries, in the reserve of a trailer.
        let reserve = if left_out.count() > 0 {
            crate::call::text::TRAILER_RESERVE
        } else {
            0
        };
        let mut budget = Budget::new(body_limit(limit).saturating_sub(reserve));
        let mut entries = Vec::new();
        for name in names.iter().skip(args.offset).take(max) {
            let meta = At::new_in(fd.clone(), name.clone()).stat().ok().flatten();
            let kind = match meta.map(|m| m.kind) {
                Some(Kind::Symlink) => "symlink",
                Some(Kind::Dir) => "dir",
                Some(Kind::File) => "file",
                _ => "other",
            };
            let entry = DirEntry {
                name: crate::path::quote::render(name),
                kind,
                size: meta.map_or(0, |m| m.size),
                modified: meta.and_then(|m| m.modified).map(rfc3339),
            };
            // At least one entry per page, so a page always moves on.
            if !budget.take(entry.line().len()) && !entries.is_empty() {
                break;
            }
            entries.push(entry);
        }
        let end = args.offset.saturating_add(entries.len());
        let more = end < total;
        Ok(ListDirOutput {
            path: display,
            entries,
            total_entries: total,
            offset: args.offset,
            truncated: more,
            next_offset: more.then_some(end),
            notes: left_out.notes(ws),
            limit,
            max_entries: args.max_entries,
        })
    })
    .await
}

/// The names in the directory open at `fd` (`.` and `..` left out), in no particular order.
fn list_names(fd: &std::os::fd::OwnedFd) -> std::io::Result<Vec<std::ffi::OsString>> {
    use std::os::unix::ffi::OsStrExt;
    let mut dir = nix::dir::Dir::from_fd(fd.try_clone()?)?;
    let mut names = Vec::new();
    for entry in dir.iter() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            names.push(std::ffi::OsStr::from_bytes(name).to_owned());
        }
    }
    Ok(names)
}

fn rfc3339(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

// === list_files ===

/// Arguments of `list_files`.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
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
    /// Most files to return (default 2000 and what fits in 45000 characters; at most 20000, and
    /// at most 500000 characters when given).
    #[schemars(range(min = 1, max = LIST_FILES_MAX))]
    #[serde(skip_serializing)]
    max_files: Option<usize>,
    /// next_cursor of the previous page, to continue the same listing.
    #[serde(skip_serializing)]
    cursor: Option<String>,
}

/// Result of `list_files`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ListFilesOutput {
    /// The directory walked.
    path: String,
    /// File paths (files and symlinks, never directories), sorted, after the cursor's.
    files: Vec<String>,
    /// More files follow: next_cursor continues.
    truncated: bool,
    /// Pass as cursor (with the same other arguments) for the next page; absent at the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
    /// Directories and entries that could not be read (so files under them are missing): the
    /// first 100 in path order.
    skipped: Vec<SkippedPath>,
    /// How many paths were skipped in all.
    skipped_count: usize,
    /// Every file under `path` (after the cursor) was listed: nothing truncated, nothing skipped.
    complete: bool,
    /// Ignore files applied only in part because they exceed 1048576 bytes or 10000 patterns
    /// (files their later patterns ignore are listed), one note per file, at most 20; then one
    /// note per directory or file left out because it is the server's own configuration or
    /// state (never listed while paths are confined). Absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    notes: Vec<String>,
    /// Files and directories that .ignore files, and inside a git repository .gitignore and git
    /// excludes, left out of the part of the tree this page walked (a directory counts once;
    /// what is under it was not walked); 0 with include_ignored. Set include_ignored to list
    /// them.
    ignored_count: usize,
    #[serde(skip)]
    limit: usize,
    #[serde(skip)]
    continue_with: Option<serde_json::Value>,
}

impl TextView for ListFilesOutput {
    fn summary(&self) -> String {
        let mut s = format!(
            "list_files {}: {}",
            self.path,
            crate::call::text::count(self.files.len() as u64, "file", "files")
        );
        if self.skipped_count > 0 {
            s.push_str(&format!(
                ", {} could not be read (listed at the end)",
                crate::call::text::count(self.skipped_count as u64, "path", "paths")
            ));
        }
        s.push_str(&crate::primitives::ignores::left_out(self.ignored_count));
        match &self.continue_with {
            Some(args) => s.push_str(&format!("; more: call list_files with {args}")),
            None if self.complete => s.push_str("; complete"),
            None => s.push_str("; incomplete (see the skipped paths)"),
        }
        s
    }

    fn body(&self, out: &mut String) {
        for f in &self.files {
            out.push_str(f);
            out.push('\n');
        }
        crate::call::text::skipped_trailer(out, &self.skipped, &self.notes);
    }

    fn text_limit(&self) -> usize {
        self.limit
    }
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
    let limit = list_limit(args.max_files);
    let fingerprint = crate::primitives::text::sha256_hex(
        serde_json::to_string(&args).unwrap_or_default().as_bytes(),
    )[..16]
        .to_owned();
    let after = match &args.cursor {
        Some(c) => {
            let v = cursor::decode(c, "list_files")?;
            if v["q"].as_str() != Some(fingerprint.as_str()) {
                return Err(ToolError::invalid(
                    "cursor belongs to a different listing: repeat the same arguments with it",
                ));
            }
            let hex = v["p"].as_str().unwrap_or_default();
            let bytes = hex::decode(hex).map_err(|_| {
                ToolError::invalid("cursor is not a next_cursor returned by list_files")
            })?;
            use std::os::unix::ffi::OsStringExt;
            Some(std::path::PathBuf::from(std::ffi::OsString::from_vec(
                bytes,
            )))
        }
        None => None,
    };
    blocking(move || {
        let ws = rt.workspace();
        let root = ws.resolve(&args.path)?;
        if !root.real().is_dir() {
            return Err(ToolError::invalid(format!(
                "{}: not a directory",
                args.path
            )));
        }
        // The cursor holds the last path returned, relative to the root; the walk resumes after it.
        let after = after.map(|rel| root.real().join(rel));
        if after.as_ref().is_some_and(|a| !a.starts_with(root.real())) {
            return Err(ToolError::invalid(
                "cursor is not a next_cursor returned by list_files",
            ));
        }
        let mut ob = OverrideBuilder::new(root.real());
        if let Some(g) = &args.glob {
            ob.add(g)
                .map_err(|e| ToolError::invalid(format!("bad glob {g:?}: {e}")))?;
        }
        let overrides = ob
            .build()
            .map_err(|e| ToolError::invalid(format!("bad glob: {e}")))?;
        // Ignore files are read by our filter, capped and shared.
        let filter = (!args.include_ignored).then(|| {
            Arc::new(IgnoreFilter::new(
                rt.ignore_cache().clone(),
                root.real(),
                overrides.clone(),
            ))
        });
        let keep = filter.clone();
        let left_out = ws.left_out();
        let own = left_out.clone();
        let prune = after.clone();
        let mut wb = WalkBuilder::new(root.real());
        wb.standard_filters(false)
            .follow_links(false)
            .overrides(overrides)
            .sort_by_file_name(|a, b| a.cmp(b))
            .filter_entry(move |e| {
                // Directories wholly before the cursor are not walked again.
                if let Some(a) = &prune
                    && e.file_type().is_some_and(|t| t.is_dir())
                    && !a.starts_with(e.path())
                    && crate::path::path_order(e.path(), a).is_lt()
                {
                    return false;
                }
                e.file_name() != ".git"
                    && own.keep(e.path())
                    && keep.as_ref().is_none_or(|f| f.keep(e))
            });
        let mut files: Vec<String> = Vec::new();
        let mut last: Option<std::path::PathBuf> = None;
        let mut truncated = false;
        let mut skipped = SkipList::default();
        let mut budget =
            Budget::new(body_limit(limit).saturating_sub(crate::call::text::TRAILER_RESERVE));
        for entry in wb.build() {
            if cx.cancel.is_cancelled() {
                return Err(ToolError::cancelled());
            }
            let entry = match entry {
                Ok(entry) => entry,
                Err(err) => {
                    skipped.push_walk_error(&err, root.real(), &|p| ws.reachable(p));
                    continue;
                }
            };
            if entry.depth() == 0 || entry.file_type().is_none_or(|t| t.is_dir()) {
                continue;
            }
            if after
                .as_ref()
                .is_some_and(|a| !crate::path::path_order(entry.path(), a).is_gt())
            {
                continue;
            }
            // The walk descends by name: a directory swapped for a symlink after it was listed
            // leads it outside. Only an entry that is still there beneath the workspace, the same
            // inode the walk read, is shown.
            if !entry
                .ino()
                .is_some_and(|ino| ws.still_beneath(entry.path(), ino))
            {
                skipped.push_changed(root.real());
                continue;
            }
            let shown = ws.display(entry.path());
            if files.len() == max || (!budget.take(shown.len() + 1) && !files.is_empty()) {
                truncated = true;
                break;
            }
            files.push(shown);
            last = Some(entry.path().to_owned());
        }
        let skipped_count = skipped.total();
        let next_cursor = truncated.then(|| {
            use std::os::unix::ffi::OsStrExt;
            let rel = last
                .as_deref()
                .and_then(|l| l.strip_prefix(root.real()).ok())
                .map(|r| hex::encode(r.as_os_str().as_bytes()))
                .unwrap_or_default();
            cursor::encode(&serde_json::json!({"p": rel, "q": fingerprint}))
        });
        let continue_with = next_cursor.as_ref().map(|c| {
            let mut v = serde_json::to_value(&args).unwrap_or_default();
            v["cursor"] = c.clone().into();
            if let Some(m) = args.max_files {
                v["max_files"] = m.into();
            }
            v
        });
        Ok(ListFilesOutput {
            path: ws.display(root.real()),
            files,
            truncated,
            next_cursor,
            skipped: skipped.render(ws),
            skipped_count,
            complete: !truncated && skipped_count == 0,
            notes: filter
                .as_ref()
                .map_or_else(Vec::new, |f| {
                    crate::primitives::ignores::notes(&f.capped(), ws)
                })
                .into_iter()
                .chain(left_out.notes(ws))
                .collect(),
            ignored_count: filter.map_or(0, |f| f.ignored()),
            limit,
            continue_with,
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
    /// Most bytes of content to return: 1 to 5242880 (larger values are capped), default 42999
    /// (what fits in a host's default result size). Content ends at a line boundary unless one
    /// line alone is longer.
    #[schemars(range(min = 1))]
    max_bytes: Option<usize>,
    /// next_cursor of the previous page: continues exactly where it stopped (even inside a long
    /// line), forward for a range and backward for tail_lines. Replaces start_line, end_line and
    /// tail_lines.
    cursor: Option<String>,
}

/// Result of `read_file`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ReadFileOutput {
    /// The file read.
    path: String,
    /// The text, whole lines with their line endings (a BOM is not included).
    content: String,
    /// Byte offset of `content` in the file.
    offset: u64,
    /// 1-based first line of `content`; null when unknown (tail of a large file) or empty.
    start_line: Option<u64>,
    /// 1-based last line of `content`; null when unknown or empty.
    end_line: Option<u64>,
    /// Lines in the file; null when the file was not read to its end.
    total_lines: Option<u64>,
    /// File size in bytes.
    size_bytes: u64,
    /// `content` stopped before the requested lines ended because of max_bytes: next_cursor
    /// continues.
    truncated: bool,
    /// Pass as cursor (with the same path) for the rest of the requested lines: every byte of
    /// them comes exactly once, page by page. Absent when nothing of the request is left.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
    /// The line to pass as start_line to read on by whole lines; null when nothing follows.
    next_start_line: Option<u64>,
    /// A line longer than max_bytes that `content` holds only part of: its first bytes for a
    /// range read, its last bytes for tail_lines; next_cursor continues inside it. Absent when no
    /// line was cut.
    #[serde(skip_serializing_if = "Option::is_none")]
    cut_line: Option<u64>,
    /// Length in bytes of cut_line (with its line break) when the read saw all of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    cut_line_bytes: Option<u64>,
    /// The file starts with a UTF-8 byte order mark.
    bom: bool,
    /// Line endings of the lines in `content`: none, lf, crlf or mixed. A cut line counts with
    /// its own break, which `content` stops before (when the read saw it).
    line_ending: LineEnding,
    /// SHA-256 (hex) of the whole file; present only when the whole file was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    sha256: Option<String>,
    /// Whether the read was a tail (for the summary).
    #[serde(skip)]
    tail: bool,
    /// max_bytes as given (for the continuation hint).
    #[serde(skip)]
    max_bytes: Option<usize>,
}

impl TextView for ReadFileOutput {
    fn summary(&self) -> String {
        let lines = match (self.start_line, self.end_line) {
            _ if self.content.is_empty() => "no lines".to_owned(),
            (Some(a), Some(b)) if a == b => format!("line {a}"),
            (Some(a), Some(b)) => format!("lines {a}-{b}"),
            _ if self.tail => "the last lines".to_owned(),
            _ => "lines".to_owned(),
        };
        let total = self
            .total_lines
            .map_or_else(String::new, |t| format!(" of {t}"));
        let mut s = format!(
            "read_file {}: {lines}{total} ({} of {} bytes from offset {}",
            self.path,
            self.content.len(),
            self.size_bytes,
            self.offset
        );
        if let Some(sha) = &self.sha256 {
            s.push_str(&format!(", sha256 {sha}"));
        }
        if self.bom {
            s.push_str(", BOM not shown");
        }
        if let Some(l) = self.cut_line {
            s.push_str(&format!(", line {l} cut"));
        }
        s.push(')');
        match &self.next_cursor {
            Some(c) => {
                let mut args = serde_json::json!({"path": self.path, "cursor": c});
                if let Some(m) = self.max_bytes {
                    args["max_bytes"] = m.into();
                }
                s.push_str(&format!(
                    "; more {}: call read_file with {args}",
                    if self.tail { "before it" } else { "follows" }
                ));
            }
            None => match self.next_start_line {
                Some(n) => s.push_str(&format!("; the file goes on at start_line {n}")),
                None => s.push_str("; complete"),
            },
        }
        s
    }

    fn body(&self, out: &mut String) {
        out.push_str(&self.content);
    }

    fn text_limit(&self) -> usize {
        text_limit_for(self.max_bytes)
    }
}

/// The text limit of a result whose body is at most `max_bytes` when given, else the default.
fn text_limit_for(max_bytes: Option<usize>) -> usize {
    max_bytes.map_or(RESULT_TEXT_DEFAULT_CHARS, |m| {
        (m + RESULT_SUMMARY_MAX_CHARS + 1).max(RESULT_TEXT_DEFAULT_CHARS)
    })
}

/// A read's continuation, as carried by a cursor: where, and the file it belongs to.
fn encode_read_cursor(
    next: &Next,
    end: Option<u64>,
    total: Option<u64>,
    ident: (u64, i128),
) -> String {
    let mut v = match *next {
        Next::Forward(p) => serde_json::json!({"d": "f", "o": p.offset, "l": p.line, "e": end}),
        Next::Backward {
            end,
            lines,
            line_at_end,
        } => serde_json::json!({"d": "b", "o": end, "n": lines, "l": line_at_end}),
    };
    v["t"] = total.into();
    v["s"] = ident.0.into();
    v["m"] = ident.1.to_string().into();
    cursor::encode(&v)
}

/// A `read_file` cursor that reads the file `meta` describes forward from byte `offset` (on
/// the 1-based line `line`) to its end, page by page, even from inside a line: for a tool that
/// returns the first part of a file (`fetch`) and leaves the rest to `read_file`. Like every
/// read cursor it holds the file's size and modification time, so `read_file` refuses it
/// (`conflict`) once the file changed.
pub(crate) fn read_cursor_from(meta: &fs::Metadata, offset: u64, line: u64) -> String {
    let at = engine::Position { offset, line };
    encode_read_cursor(&Next::Forward(at), None, None, identity(meta))
}

/// Size and modification time (ns since the epoch) of a file, to tell whether a cursor still
/// applies.
fn identity(meta: &fs::Metadata) -> (u64, i128) {
    let m = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as i128);
    (meta.len(), m)
}

async fn read_file(
    rt: Arc<Access>,
    args: ReadFileArgs,
    _cx: CallContext,
) -> ToolResult<ReadFileOutput> {
    let cursor = match &args.cursor {
        Some(_)
            if args.start_line.is_some()
                || args.end_line.is_some()
                || args.tail_lines.is_some() =>
        {
            return Err(ToolError::invalid(
                "cursor continues a previous read: pass it with path (and max_bytes) only",
            ));
        }
        Some(c) => Some(cursor::decode(c, "read_file")?),
        None => None,
    };
    let span = match (args.tail_lines, args.start_line, args.end_line) {
        _ if cursor.is_some() => None,
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
            return Err(ToolError::invalid(
                "tail_lines cannot be combined with start_line or end_line",
            ));
        }
        (Some(0), ..) => return Err(ToolError::invalid("tail_lines must be at least 1")),
        (Some(n), ..) => Some(Span::Tail(n)),
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
            Some(Span::Lines { start, end })
        }
    };
    if args.max_bytes == Some(0) {
        return Err(ToolError::invalid("max_bytes must be at least 1"));
    }
    let max = args
        .max_bytes
        .unwrap_or(READ_DEFAULT_MAX_BYTES)
        .min(rt.read_max_bytes());
    blocking(move || {
        let ws = rt.workspace();
        let p = ws.resolve(&args.path)?;
        let display = ws.display(p.real());
        let at = reader_at(ws, &p, &args.path)?;
        let (mut file, meta) = open_regular(&at, &args.path)?;
        let ident = identity(&meta);
        // What a cursor carries: the span, the range's end line, the known total.
        let (span, end_line, known_total) = match (&span, &cursor) {
            (Some(span), _) => {
                let end = match span {
                    Span::Lines { end, .. } => *end,
                    _ => None,
                };
                (*span, end, None)
            }
            (None, Some(c)) => {
                let bad = || ToolError::invalid("cursor is not a next_cursor returned by read_file");
                let same = c["s"].as_u64() == Some(ident.0)
                    && c["m"].as_str().and_then(|m| m.parse::<i128>().ok()) == Some(ident.1);
                if !same {
                    return Err(ToolError::conflict(format!(
                        "{}: the file changed since this cursor was returned (size or modification time differ); read it again without a cursor",
                        args.path
                    )));
                }
                let offset = cursor::u64_field(c, "o", "read_file")?;
                let span = match c["d"].as_str() {
                    Some("f") => Span::From {
                        at: engine::Position {
                            offset,
                            line: cursor::u64_field(c, "l", "read_file")?,
                        },
                        end: c["e"].as_u64(),
                    },
                    Some("b") => Span::Before {
                        end: offset,
                        lines: cursor::u64_field(c, "n", "read_file")?,
                        line_at_end: c["l"].as_u64(),
                    },
                    _ => return Err(bad()),
                };
                (span, c["e"].as_u64(), c["t"].as_u64())
            }
            (None, None) => return Err(ToolError::internal("read_file: no span")),
        };
        let tail = matches!(span, Span::Tail(_) | Span::Before { .. });
        let mut ex = engine::read(&mut file, meta.len(), span, max).map_err(|e| match e {
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
            ReadError::BadPosition => {
                ToolError::invalid("cursor is not a next_cursor returned by read_file")
            }
        })?;
        if ex.total_lines.is_none() {
            ex.total_lines = known_total;
        }
        let next_cursor = ex
            .next
            .as_ref()
            .map(|n| encode_read_cursor(n, end_line, ex.total_lines, ident));
        Ok(ReadFileOutput {
            path: display,
            content: ex.content,
            offset: ex.offset,
            start_line: ex.start_line,
            end_line: ex.end_line,
            total_lines: ex.total_lines,
            size_bytes: meta.len(),
            truncated: ex.truncated,
            next_cursor,
            next_start_line: ex.next_start_line,
            cut_line: ex.cut_line.map(|(l, _)| l),
            cut_line_bytes: ex.cut_line.and_then(|(_, b)| b),
            bom: ex.bom,
            line_ending: ex.line_ending,
            sha256: ex.sha256,
            tail,
            max_bytes: args.max_bytes,
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
        let at = reader_at(ws, &p, &args.path)?;
        let bytes = read_bounded(&at, &args.path, IMAGE_MAX_BYTES as u64)?;
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
