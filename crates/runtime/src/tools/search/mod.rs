//! `search_text`: literal or regex search over the workspace (the search itself is the
//! [`engine`]).

use std::{path::Path, sync::Arc};

use base64::Engine;
use grep_regex::RegexMatcherBuilder;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use protocol::limits::{
    SEARCH_DEFAULT_MATCHES, SEARCH_LINE_MAX_BYTES, SEARCH_MAX_CONTEXT_LINES, SEARCH_MAX_MATCHES,
};

use crate::{
    Access,
    mcp::{
        catalog::{Hints, ToolMeta, ToolSpec},
        context::CallContext,
        error::{ToolError, ToolResult},
    },
    policy::Capability,
    primitives::{skipped::SkippedPath, text::sha256_hex},
    tools::blocking::blocking,
};

mod engine;

use engine::{Cursor, Run, Scope};

pub(crate) fn specs() -> Vec<ToolSpec> {
    vec![ToolSpec::structured(
        ToolMeta {
            name: "search_text",
            title: "Search text",
            description: "Search file contents for a regex (Rust regex syntax) or, with \
                          literal: true, a fixed string, like ripgrep. Honours .gitignore unless \
                          include_ignored; skips binary files, .git and symlinks. Filter files with \
                          include/exclude globs (gitignore syntax). Returns matching lines in path \
                          order with 1-based line and column, optional context lines, and stops \
                          at max_matches (default 200, at most 5000): then `complete` is false and \
                          next_cursor continues with the same arguments plus cursor. Paths that \
                          could not be read (permission denied, longer than PATH_MAX, I/O \
                          errors) are listed in `skipped` (the first 100 in path order, with \
                          reasons; skipped_count counts all) and make `complete` false. Sends \
                          progress notifications when the request has a progress token; can be \
                          cancelled.",
            capability: Capability::Read,
            hints: Hints::READ,
        },
        search_text,
    )]
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
    /// (files their later patterns ignore are searched), one note per file, at most 20. Absent
    /// when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    notes: Vec<String>,
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
                crate::mcp::error::ToolErrorCode::NotFound,
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
        };
        let cursor = cursor
            .as_deref()
            .map(|c| decode_cursor(c, root.real(), &fingerprint))
            .transpose()?;
        let engine::Candidates {
            files,
            skipped: mut skipped_paths,
            capped_ignore_files,
        } = engine::candidates(&scope, &cx.cancel).map_err(ToolError::invalid)?;
        if cx.cancel.is_cancelled() {
            return Err(ToolError::cancelled());
        }
        let run = Run {
            matcher: &matcher,
            context: args.context_lines,
            max_matches,
            line_max_bytes: SEARCH_LINE_MAX_BYTES,
            threads,
            cancel: &cx.cancel,
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
            notes: crate::primitives::ignores::notes(&capped_ignore_files, ws),
        })
    })
    .await
}

/// Identifies the query a cursor belongs to (everything but the page size and the cursor).
fn query_fingerprint(args: &SearchArgs) -> String {
    let canonical = serde_json::to_string(args).unwrap_or_default();
    sha256_hex(canonical.as_bytes())[..16].to_owned()
}

/// Encodes a cursor; the path is stored relative to the search root, so no host path leaks.
fn encode_cursor(c: &Cursor, root: &Path, fingerprint: &str) -> String {
    let rel = c.path.strip_prefix(root).unwrap_or(&c.path);
    let v = json!({"p": rel.to_string_lossy(), "k": c.skip, "q": fingerprint});
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
    Ok(Cursor {
        path: root.join(v["p"].as_str().ok_or_else(bad)?),
        skip: v["k"].as_u64().ok_or_else(bad)? as usize,
    })
}
