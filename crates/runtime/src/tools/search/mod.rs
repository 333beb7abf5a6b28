//! `search_text`: literal or regex search over the workspace (the search itself is the
//! [`engine`]).

use std::{path::Path, sync::Arc};

use base64::Engine;
use grep_regex::RegexMatcherBuilder;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::limits::{
    RESULT_TEXT_DEFAULT_CHARS, RESULT_TEXT_RAISED_MAX_CHARS, SEARCH_DEFAULT_MATCHES,
    SEARCH_LINE_MAX_BYTES, SEARCH_MAX_CONTEXT_LINES, SEARCH_MAX_MATCHES,
};

use crate::tools::family::Family;
use crate::{
    Access,
    call::{
        catalog::{Hints, ToolMeta, ToolSpec},
        context::CallContext,
        error::{ToolError, ToolResult},
        text::{self, TextView, body_limit},
    },
    policy::Capability,
    primitives::{skipped::SkippedPath, text::sha256_hex},
    tools::blocking::blocking,
};

pub(crate) mod engine;

use engine::{Cursor, Run, Scope};

/// The family's entry in the registry: its catalog entries.
pub(crate) const FAMILY: Family = Family::tools(specs);

pub(crate) fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec::structured(
            ToolMeta {
                name: "search_text",
                title: "Search text",
                description: "Search file contents for a regex (Rust regex syntax) or, with \
                          literal: true, a fixed string, like ripgrep. Honours .ignore files \
                          and, inside a git repository, .gitignore and git excludes unless \
                          include_ignored (ignored_count says how many entries they left out); \
                          skips binary files, .git, symlinks and the server's own \
                          configuration and state (a note says so). Filter files with \
                          include/exclude globs (gitignore syntax). The text lists matches in path \
                          order as path:line:column:text (context lines as path-line-text). A page \
                          stops at max_matches (default 200) and, by default, at what fits in \
                          45000 characters: then `complete` is false and next_cursor continues \
                          with the same arguments plus cursor, each match exactly once. An \
                          explicit max_matches (at most 5000) allows up to 500000 characters. \
                          Paths that could not be read are listed in `skipped` (the first 100, \
                          with reasons) and make `complete` false. Sends progress notifications \
                          when the request has a progress token; can be cancelled.",
                capability: Capability::Read,
                hints: Hints::READ,
            },
            search_text,
        )
        .larger_on_request(),
    ]
}

/// Case sensitivity of `search_text`.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CaseMode {
    /// Exact case (default).
    #[default]
    Sensitive,
    /// Ignore case.
    Insensitive,
    /// Ignore case unless the pattern has an uppercase letter.
    Smart,
}

/// Arguments of `search_text`.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SearchArgs {
    /// The regex, or the fixed string when literal is true.
    pattern: String,
    /// Treat pattern as a fixed string.
    #[serde(default)]
    literal: bool,
    /// sensitive (default), insensitive or smart.
    #[serde(default)]
    case: CaseMode,
    /// File or directory to search, relative to the workspace (default ".").
    #[serde(default = "dot")]
    path: String,
    /// Only files matching any of these globs (gitignore syntax, e.g. "*.rs").
    #[serde(default)]
    include: Vec<String>,
    /// Skip files and directories matching these globs.
    #[serde(default)]
    exclude: Vec<String>,
    /// Also search files that .gitignore, .ignore or git excludes would skip.
    #[serde(default)]
    include_ignored: bool,
    /// Lines of context before and after each match (0 to 10, default 0).
    #[serde(default)]
    #[schemars(range(min = 0, max = SEARCH_MAX_CONTEXT_LINES))]
    context_lines: usize,
    /// Stop after this many matches (default 200, at most 5000).
    #[schemars(range(min = 1, max = SEARCH_MAX_MATCHES))]
    #[serde(skip_serializing)]
    max_matches: Option<usize>,
    /// next_cursor of the previous page, to continue the same search.
    #[serde(skip_serializing)]
    cursor: Option<String>,
}

fn dot() -> String {
    ".".to_owned()
}

/// One matching line.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct SearchMatch {
    /// File path.
    path: String,
    /// 1-based line number.
    line: u64,
    /// 1-based byte column of the first match on the line.
    column: u64,
    /// The line (cut around the match with … when very long).
    text: String,
    /// Context lines before the match, oldest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    before: Vec<String>,
    /// Context lines after the match.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    after: Vec<String>,
}

impl SearchMatch {
    /// The match in the result's text, as ripgrep prints it: context lines `path-line-text`,
    /// the matching line `path:line:column:text`, and `--` after a match with context.
    fn write(&self, out: &mut String) {
        let first = self.line - self.before.len() as u64;
        for (i, b) in self.before.iter().enumerate() {
            out.push_str(&format!("{}-{}-{b}\n", self.path, first + i as u64));
        }
        out.push_str(&format!(
            "{}:{}:{}:{}\n",
            self.path, self.line, self.column, self.text
        ));
        for (i, a) in self.after.iter().enumerate() {
            out.push_str(&format!("{}-{}-{a}\n", self.path, self.line + 1 + i as u64));
        }
        if !self.before.is_empty() || !self.after.is_empty() {
            out.push_str("--\n");
        }
    }
}

/// Result of `search_text`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct SearchOutput {
    /// Matches in path order, then line order.
    matches: Vec<SearchMatch>,
    /// Files opened by this call (the search stops early at max_matches).
    files_searched: usize,
    /// Files that could not be read and were skipped.
    unreadable_files: usize,
    /// Directories and files that could not be read (so matches in them are missing): the first
    /// 100 in path order.
    skipped: Vec<SkippedPath>,
    /// How many paths were skipped in all.
    skipped_count: usize,
    /// Every candidate file was searched to its end and nothing was skipped.
    complete: bool,
    /// Pass as cursor (with the same other arguments) to get the next page.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
    /// Ignore files applied only in part because they exceed 1048576 bytes or 10000 patterns
    /// (files their later patterns ignore are searched), one note per file, at most 20; then one
    /// note per directory or file left out because it is the server's own configuration or
    /// state (never searched while paths are confined). Absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    notes: Vec<String>,
    /// Files and directories that .ignore files, and inside a git repository .gitignore and git
    /// excludes, left out (a directory counts once; what is under it was not walked); 0 with
    /// include_ignored. Set include_ignored to search them.
    ignored_count: usize,
    #[serde(skip)]
    limit: usize,
    #[serde(skip)]
    pattern: String,
    #[serde(skip)]
    root: String,
}

impl TextView for SearchOutput {
    fn summary(&self) -> String {
        let files = {
            let mut f: Vec<&str> = self.matches.iter().map(|m| m.path.as_str()).collect();
            f.dedup();
            f.len()
        };
        let mut s = format!(
            "search_text {} in {}: {} in {} (path:line:column:text; {} searched)",
            text::arg(&self.pattern),
            self.root,
            text::count(self.matches.len() as u64, "match", "matches"),
            text::count(files as u64, "file", "files"),
            text::count(self.files_searched as u64, "file", "files"),
        );
        if self.skipped_count > 0 {
            s.push_str(&format!(
                ", {} could not be read (listed at the end)",
                text::count(self.skipped_count as u64, "path", "paths")
            ));
        }
        s.push_str(&crate::primitives::ignores::left_out(self.ignored_count));
        match &self.next_cursor {
            Some(c) => s.push_str(&format!(
                "; more: repeat the call with the same arguments and \"cursor\": {}",
                text::arg(c)
            )),
            None if self.complete => s.push_str("; complete"),
            None => s.push_str("; incomplete (see the skipped paths)"),
        }
        s
    }

    fn body(&self, out: &mut String) {
        for m in &self.matches {
            m.write(out);
        }
        text::skipped_trailer(out, &self.skipped, &self.notes);
    }

    fn text_limit(&self) -> usize {
        self.limit
    }
}

async fn search_text(
    rt: Arc<Access>,
    args: SearchArgs,
    cx: CallContext,
) -> ToolResult<SearchOutput> {
    if args.pattern.is_empty() {
        return Err(ToolError::invalid("pattern is empty"));
    }
    if args.context_lines > SEARCH_MAX_CONTEXT_LINES {
        return Err(ToolError::invalid(format!(
            "context_lines is at most {SEARCH_MAX_CONTEXT_LINES}"
        )));
    }
    let max_matches = args.max_matches.unwrap_or(SEARCH_DEFAULT_MATCHES);
    if max_matches == 0 || max_matches > SEARCH_MAX_MATCHES {
        return Err(ToolError::invalid(format!(
            "max_matches must be between 1 and {SEARCH_MAX_MATCHES}"
        )));
    }
    let limit = if args.max_matches.is_some() {
        RESULT_TEXT_RAISED_MAX_CHARS
    } else {
        RESULT_TEXT_DEFAULT_CHARS
    };
    let fingerprint = query_fingerprint(&args);
    let cursor = args.cursor.clone();
    let matcher = RegexMatcherBuilder::new()
        .fixed_strings(args.literal)
        .case_insensitive(args.case == CaseMode::Insensitive)
        .case_smart(args.case == CaseMode::Smart)
        .line_terminator(Some(b'\n'))
        .build(&args.pattern)
        .map_err(|e| ToolError::invalid(format!("bad pattern: {e}")))?;
    blocking(move || {
        let ws = rt.workspace();
        let root = ws.resolve(&args.path)?;
        if !root.exists() {
            return Err(ToolError::new(
                crate::call::error::ToolErrorCode::NotFound,
                format!("{}: no such file or directory", args.path),
            ));
        }
        let threads = engine::default_threads();
        let scope = Scope {
            root: root.real().to_owned(),
            include: args.include.clone(),
            exclude: args.exclude.clone(),
            include_ignored: args.include_ignored,
            threads,
            ignore_cache: rt.ignore_cache().clone(),
            left_out: ws.left_out(),
        };
        let cursor = cursor
            .as_deref()
            .map(|c| decode_cursor(c, root.real(), &fingerprint))
            .transpose()?;
        let engine::Candidates {
            files,
            skipped: mut skipped_paths,
            capped_ignore_files,
            ignored,
        } = engine::candidates(&scope, &cx.cancel, &|p| ws.reachable(p))
            .map_err(ToolError::invalid)?;
        if cx.cancel.is_cancelled() {
            return Err(ToolError::cancelled());
        }
        // A hit costs what its text will: rendered as the output will render it.
        let cost = |path: &Path, h: &engine::Hit| {
            let mut out = String::new();
            SearchMatch {
                path: ws.display(path),
                line: h.line,
                column: h.column,
                text: h.text.clone(),
                before: h.before.clone(),
                after: h.after.clone(),
            }
            .write(&mut out);
            out.len()
        };
        let run = Run {
            matcher: &matcher,
            context: args.context_lines,
            max_matches,
            max_chars: body_limit(limit).saturating_sub(text::TRAILER_RESERVE),
            cost: &cost,
            line_max_bytes: SEARCH_LINE_MAX_BYTES,
            threads,
            cancel: &cx.cancel,
            root: root.real(),
            open: &|p| ws.open_file(p),
            changed: crate::path::Workspace::changed_under,
        };
        let progress = &cx.progress;
        let out = engine::run(&run, files, cursor, &mut |p| {
            progress.report(p.files_done as f64, Some(p.files_total as f64), || {
                format!(
                    "searched {} of {} files, {} matches",
                    p.files_done, p.files_total, p.matches
                )
            });
        });
        if out.cancelled {
            return Err(ToolError::cancelled());
        }
        skipped_paths.extend(out.skipped);
        let skipped_count = skipped_paths.total();
        let names: Vec<String> = out.files.iter().map(|p| ws.display(p)).collect();
        let matches = out
            .hits
            .into_iter()
            .map(|h| SearchMatch {
                path: names[h.file].clone(),
                line: h.line,
                column: h.column,
                text: h.text,
                before: h.before,
                after: h.after,
            })
            .collect();
        Ok(SearchOutput {
            matches,
            files_searched: out.files_searched,
            unreadable_files: out.unreadable,
            skipped: skipped_paths.render(ws),
            skipped_count,
            complete: out.next.is_none() && skipped_count == 0,
            next_cursor: out
                .next
                .map(|c| encode_cursor(&c, root.real(), &fingerprint)),
            notes: crate::primitives::ignores::notes(&capped_ignore_files, ws)
                .into_iter()
                .chain(scope.left_out.notes(ws))
                .collect(),
            ignored_count: ignored,
            limit,
            pattern: args.pattern.clone(),
            root: ws.display(root.real()),
        })
    })
    .await
}

/// Identifies the query a cursor belongs to (everything but the page size and the cursor).
fn query_fingerprint(args: &SearchArgs) -> String {
    let canonical = serde_json::to_string(args).unwrap_or_default();
    sha256_hex(canonical.as_bytes())[..16].to_owned()
}

/// The size and modification time of the file a cursor resumes in (`None` when it is gone): a
/// cursor into a file that changed would skip or repeat matches.
fn file_identity(path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(format!("{} {} {}", m.len(), m.mtime(), m.mtime_nsec()))
}

/// Encodes a cursor; the path is stored relative to the search root, so no host path leaks.
fn encode_cursor(c: &Cursor, root: &Path, fingerprint: &str) -> String {
    let rel = c.path.strip_prefix(root).unwrap_or(&c.path);
    let v = json!({"p": crate::path::quote::render(rel.as_os_str()), "k": c.skip,
        "q": fingerprint, "i": file_identity(&c.path)});
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
}

fn decode_cursor(s: &str, root: &Path, fingerprint: &str) -> ToolResult<Cursor> {
    let bad = || ToolError::invalid("cursor is not a next_cursor returned by search_text");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .map_err(|_| bad())?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    if v["q"].as_str() != Some(fingerprint) {
        return Err(ToolError::invalid(
            "cursor belongs to a different search: repeat the same arguments with it",
        ));
    }
    let c = Cursor {
        path: {
            let p = v["p"].as_str().ok_or_else(bad)?;
            root.join(
                crate::path::quote::parse(p).map_or_else(|| p.into(), std::path::PathBuf::from),
            )
        },
        skip: v["k"].as_u64().ok_or_else(bad)? as usize,
    };
    if c.skip > 0 && v["i"].as_str().map(str::to_owned) != file_identity(&c.path) {
        return Err(ToolError::conflict(format!(
            "{}: the file changed since this cursor was returned (its matches would be skipped or repeated); search again without cursor",
            v["p"].as_str().unwrap_or_default()
        )));
    }
    Ok(c)
}
