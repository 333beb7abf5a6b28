//! ChatGPT's `search` and `fetch`: the pair of tools ChatGPT's deep research
//! and company knowledge call on an MCP server, in the shapes OpenAI documents ("Building MCP
//! servers for ChatGPT and API integrations", <https://platform.openai.com/docs/mcp>): `search`
//! takes one `query` string and returns `{"results": [{"id", "title", "url"}]}`; `fetch` takes
//! one `id` string and returns `{"id", "title", "text", "url", "metadata"}`. Each result is
//! exactly one text content item holding the JSON-encoded object, as documented, and the same
//! object as `structuredContent` ([`ToolSpec::structured_json`]).
//!
//! `search` looks for the query's terms in the workspace's file paths and, with `search_text`'s
//! engine, in their contents; the terms, the ranking and the rest of the pure rules are the
//! [`engine`]. An id is a file's workspace-relative path (quoted when not UTF-8, as every tool
//! shows paths), so `read_file` takes it too; a url is `machine://workspace/<path>`, which
//! names no host path. Both are the same for every caller.
//!
//! `search` offers only files `fetch` returns: each ranked file, best first, is opened and its
//! first [`FETCH_READ_BYTES`] checked as `fetch` reads them (binary or unreadable: left out,
//! and the next one takes its place), at most [`KNOWLEDGE_SEARCH_CHECK_MAX`] of them. A text
//! `fetch` cuts carries a `read_file` cursor in its metadata that continues exactly where the
//! text stops, even inside a line.

use std::{
    collections::BTreeMap,
    io::Read,
    path::{Path, PathBuf},
    sync::Arc,
};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::limits::{
    KNOWLEDGE_QUERY_MAX_CHARS, KNOWLEDGE_SEARCH_CHECK_MAX, KNOWLEDGE_SEARCH_RESULTS_MAX,
    KNOWLEDGE_SEARCH_SCAN_LINES_MAX, KNOWLEDGE_TITLE_SCAN_BYTES, RESULT_TEXT_DEFAULT_CHARS,
    SEARCH_LINE_MAX_BYTES,
};

use crate::tools::family::Family;
use crate::{
    Access,
    call::{
        catalog::{Hints, ToolMeta, ToolSpec},
        context::CallContext,
        error::{ToolError, ToolResult},
        text::Budget,
    },
    path::Workspace,
    policy::Capability,
    primitives::{
        text::{UTF8_BOM, looks_binary, lossy},
        write::{open_regular, reader_at},
    },
    tools::{
        blocking::blocking,
        fs::read_cursor_from,
        search::engine::{self as search_engine, Candidates, Run, Scope},
    },
};

mod engine;

use engine::{Facts, Fit, Rest, Terms};

/// Bytes of a file `fetch` reads for its text: escaping never makes text shorter, so a result
/// never holds more. `search` checks the same bytes, so it never offers a file `fetch` refuses.
const FETCH_READ_BYTES: usize = RESULT_TEXT_DEFAULT_CHARS;

/// The family's entry in the registry: its catalog entries.
pub(crate) const FAMILY: Family = Family::tools(specs);

pub(crate) fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec::structured_json(
            ToolMeta {
                name: "search",
                title: "Search (deep research)",
                description: "ChatGPT deep research / company knowledge search, the pair of \
                              fetch: finds workspace files whose path or text contains the \
                              query's words (case-insensitive, as fixed strings; .gitignore \
                              honoured; .git, symlinks and files fetch refuses, such as binary \
                              ones, skipped). Ranked: more distinct words first, then words in \
                              the file name, then in the path, then more matching lines; ties \
                              in path order. Returns at most 20 results as JSON \
                              {\"results\": [{\"id\", \"title\", \"url\"}]}; an id is the \
                              file's workspace path (fetch and read_file take it). For regexes, \
                              match lines or every match use search_text.",
                capability: Capability::Read,
                hints: Hints::READ,
            },
            search,
        ),
        ToolSpec::structured_json(
            ToolMeta {
                name: "fetch",
                title: "Fetch (deep research)",
                description: "ChatGPT deep research / company knowledge fetch, the pair of \
                              search: one workspace text file by id (a search result's id or \
                              url, or a workspace path) as JSON {\"id\", \"title\", \"text\", \
                              \"url\", \"metadata\"}. The result stays within 45000 characters: \
                              a longer text is cut after a line (inside one only when the first \
                              line alone is longer), metadata.truncated is \"true\" and \
                              read_file with cursor = metadata.next_cursor continues exactly \
                              there. Binary files are refused. For line ranges, tails or paging \
                              use read_file.",
                capability: Capability::Read,
                hints: Hints::READ,
            },
            fetch,
        ),
    ]
}

/// Arguments of `search` (ChatGPT sends `{"query": "..."}`).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SearchArgs {
    /// Words to look for in file paths and contents, case-insensitive (at most 1000
    /// characters and 16 distinct words; common English words such as "the" or "how" are
    /// ignored when others are given).
    #[schemars(length(min = 1, max = KNOWLEDGE_QUERY_MAX_CHARS))]
    query: String,
}

/// One `search` result.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct SearchResult {
    /// The file's workspace path: pass it to fetch (read_file takes it too).
    id: String,
    /// The file's path; for a Markdown file its first heading, then " — " and the path.
    title: String,
    /// The file's stable URL: machine://workspace/ and its percent-encoded workspace path.
    url: String,
}

/// Result of `search`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct SearchResults {
    /// Matching files, best first; at most 20 (fewer when they would pass 45000 characters).
    /// Only files fetch returns: binary and unreadable ones are left out.
    results: Vec<SearchResult>,
}

async fn search(rt: Arc<Access>, args: SearchArgs, cx: CallContext) -> ToolResult<SearchResults> {
    let terms = engine::split_query(&args.query)?;
    let terms = Terms::new(&terms)?;
    blocking(move || {
        let ws = rt.workspace();
        let root = ws.root().to_owned();
        let threads = search_engine::default_threads();
        let scope = Scope {
            root: root.clone(),
            include: Vec::new(),
            exclude: Vec::new(),
            include_ignored: false,
            threads,
            ignore_cache: rt.ignore_cache().clone(),
            left_out: ws.left_out(),
        };
        // A walk error leaves files out of the results; the documented shape has no place to
        // say so, and search_text lists them.
        let Candidates { files, .. } =
            search_engine::candidates(&scope, &cx.cancel, &|p| ws.reachable(p))
                .map_err(ToolError::invalid)?;
        if cx.cancel.is_cancelled() {
            return Err(ToolError::cancelled());
        }
        let mut facts: Vec<Facts> = files
            .iter()
            .map(|p| {
                let rel = p.strip_prefix(&root).unwrap_or(p);
                let name = p.file_name().map_or(&[][..], |n| n.as_encoded_bytes());
                Facts {
                    name: terms.found_in(name),
                    path: terms.found_in(rel.as_os_str().as_encoded_bytes()),
                    ..Facts::default()
                }
            })
            .collect();
        // Files whose paths match are read first, so the scan cap never leaves their contents
        // out; `run` takes files in the order given when there is no cursor.
        let order: Vec<usize> = (0..files.len())
            .filter(|&i| facts[i].path != 0)
            .chain((0..files.len()).filter(|&i| facts[i].path == 0))
            .collect();
        let scan: Vec<PathBuf> = order.iter().map(|&i| files[i].clone()).collect();
        let run = Run {
            matcher: terms.any(),
            context: 0,
            max_matches: KNOWLEDGE_SEARCH_SCAN_LINES_MAX,
            max_chars: usize::MAX,
            cost: &|_, _| 0,
            line_max_bytes: SEARCH_LINE_MAX_BYTES,
            threads,
            cancel: &cx.cancel,
            root: &root,
            open: &|p| ws.open_file(p),
            changed: Workspace::changed_under,
        };
        let progress = &cx.progress;
        let out = search_engine::run(&run, scan, None, &mut |p| {
            progress.report(p.files_done as f64, Some(p.files_total as f64), || {
                format!(
                    "searched {} of {} files, {} matching lines",
                    p.files_done, p.files_total, p.matches
                )
            });
        });
        if out.cancelled {
            return Err(ToolError::cancelled());
        }
        // `out.files` (the files with hits) come in scan order: find each further along it.
        let mut scanned = order.iter().copied();
        let hit_file: Vec<Option<usize>> = out
            .files
            .iter()
            .map(|f| scanned.find(|&i| &files[i] == f))
            .collect();
        for h in &out.hits {
            if let Some(&Some(i)) = hit_file.get(h.file) {
                facts[i].content |= terms.found_in(h.text.as_bytes());
                facts[i].lines += 1;
            }
        }
        let mut budget = Budget::new(RESULT_TEXT_DEFAULT_CHARS.saturating_sub(json_len(
            &SearchResults {
                results: Vec::new(),
            },
        )));
        let mut results = Vec::new();
        // Best first, each checked as fetch will read it, until the results are full.
        let ranked = engine::rank(&facts, facts.len());
        for i in ranked.into_iter().take(KNOWLEDGE_SEARCH_CHECK_MAX) {
            if results.len() == KNOWLEDGE_SEARCH_RESULTS_MAX {
                break;
            }
            if cx.cancel.is_cancelled() {
                return Err(ToolError::cancelled());
            }
            let real = &files[i];
            let Some(head) = fetchable_head(ws, real) else {
                continue;
            };
            let id = id_of(ws, real);
            let heading = real
                .file_name()
                .filter(|n| engine::is_markdown(n))
                .and_then(|_| heading_in(&head));
            let r = SearchResult {
                title: engine::title(&id, heading.as_deref()),
                url: engine::workspace_url(real.strip_prefix(&root).unwrap_or(real)),
                id,
            };
            if !budget.take(json_len(&r) + usize::from(!results.is_empty())) {
                break;
            }
            results.push(r);
        }
        Ok(SearchResults { results })
    })
    .await
}

/// The id of the file at `real`: its path relative to the workspace root (quoted when not
/// UTF-8, as every tool shows paths), whatever the caller's absolute-output setting, so that
/// ids are the same for every caller; a file outside the workspace (only an unrestricted
/// caller reaches one) as the caller's tools show it.
fn id_of(ws: &Workspace, real: &Path) -> String {
    match real.strip_prefix(ws.root()) {
        Ok(rel) if !rel.as_os_str().is_empty() => crate::path::quote::render(rel.as_os_str()),
        _ => ws.display(real),
    }
}

/// Bytes of `v` as compact JSON (as the result's text block writes it).
fn json_len<T: Serialize>(v: &T) -> usize {
    protocol::jsonrpc::encoded_len(v)
}

/// The first [`FETCH_READ_BYTES`] of the file a walk found at `real` (opened beneath the
/// root, without following a symlink), when `fetch` would return its text: `None` when it
/// cannot be opened or read, or has a NUL byte there (binary).
fn fetchable_head(ws: &Workspace, real: &Path) -> Option<Vec<u8>> {
    let file = ws.open_file(real).ok()?;
    let mut head = Vec::new();
    file.take(FETCH_READ_BYTES as u64)
        .read_to_end(&mut head)
        .ok()?;
    (!looks_binary(&head)).then_some(head)
}

/// The first heading of a Markdown file whose first bytes are `head`, within its first
/// [`KNOWLEDGE_TITLE_SCAN_BYTES`] (after a BOM).
fn heading_in(head: &[u8]) -> Option<String> {
    let text = head.strip_prefix(UTF8_BOM).unwrap_or(head);
    engine::markdown_heading(&lossy(&text[..text.len().min(KNOWLEDGE_TITLE_SCAN_BYTES)]))
}

/// Arguments of `fetch` (ChatGPT sends `{"id": "..."}`).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct FetchArgs {
    /// A search result's id (a workspace path) or url (machine://workspace/...).
    #[schemars(length(min = 1))]
    id: String,
}

/// Result of `fetch`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Document {
    /// The file's workspace path (as search returns it).
    id: String,
    /// The file's path; for a Markdown file its first heading, then " — " and the path.
    title: String,
    /// The file's text from its first line (invalid UTF-8 replaced with U+FFFD); cut after a
    /// line when the result would pass 45000 characters (metadata.truncated).
    text: String,
    /// The file's stable URL: machine://workspace/ and its percent-encoded workspace path.
    url: String,
    /// Facts about the text, every value a string: "bytes" (the file's size), "lines" (lines
    /// in text), "truncated" ("true" or "false"); when truncated, "next_cursor" (pass it with
    /// this id as path to read_file, which continues exactly where text stops, even inside a
    /// line), "read_rest" (how, in words), "next_start_line" (the first line not in text at
    /// all, when known) and, when text stops inside a line, "cut_line" (that line);
    /// "invalid_utf8" when bytes were replaced.
    metadata: BTreeMap<String, String>,
}

/// The metadata of a fetched text (see [`Document::metadata`]); `cursor` is the read_file
/// cursor of the rest, given when the text was cut.
fn metadata(
    size: u64,
    fit: &Fit,
    invalid_utf8: bool,
    cursor: Option<String>,
) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    m.insert("bytes".to_owned(), size.to_string());
    m.insert("lines".to_owned(), fit.lines.to_string());
    m.insert("truncated".to_owned(), fit.rest.is_some().to_string());
    if let Some(rest) = fit.rest {
        m.insert("read_rest".to_owned(), read_rest(&rest));
        if let Some(c) = cursor {
            m.insert("next_cursor".to_owned(), c);
        }
        if let Some(n) = rest.next_start_line {
            m.insert("next_start_line".to_owned(), n.to_string());
        }
        if rest.inside {
            m.insert("cut_line".to_owned(), rest.line.to_string());
        }
    }
    if invalid_utf8 {
        m.insert(
            "invalid_utf8".to_owned(),
            "bytes that are not UTF-8 were replaced with U+FFFD".to_owned(),
        );
    }
    m
}

/// How to read the rest of a cut text with read_file, in words.
fn read_rest(rest: &Rest) -> String {
    let cursor = "read_file with path = this id and cursor = next_cursor";
    match (rest.inside, rest.next_start_line) {
        (false, _) => format!(
            "{cursor}, or with start_line = {}, reads on from the next line",
            rest.line
        ),
        (true, Some(n)) => format!(
            "{cursor} reads on inside line {} where text stops; start_line = {n} skips the rest \
             of that line",
            rest.line
        ),
        (true, None) => format!(
            "{cursor} reads on inside line {} where text stops",
            rest.line
        ),
    }
}

/// The longest metadata a file of `meta` can get (see [`metadata`]), to size the text against.
fn largest_metadata(meta: &std::fs::Metadata) -> BTreeMap<String, String> {
    let fit = Fit {
        end: 0,
        lines: u64::MAX,
        rest: Some(Rest {
            line: u64::MAX,
            inside: true,
            next_start_line: Some(u64::MAX),
        }),
    };
    // A cursor's offset is at most the file's size; its line at most u64::MAX.
    let cursor = read_cursor_from(meta, meta.len(), u64::MAX);
    metadata(meta.len(), &fit, true, Some(cursor))
}

async fn fetch(rt: Arc<Access>, args: FetchArgs, _cx: CallContext) -> ToolResult<Document> {
    if args.id.is_empty() {
        return Err(ToolError::invalid(
            "id is empty: pass the id of a search result (a workspace path)",
        ));
    }
    blocking(move || {
        let ws = rt.workspace();
        let arg = engine::id_path(&args.id)?;
        let p = ws.resolve(&arg)?;
        let at = reader_at(ws, &p, &arg)?;
        let (file, meta) = open_regular(&at, &arg)?;
        let mut bytes = Vec::new();
        file.take(FETCH_READ_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| ToolError::io(&arg, &e))?;
        let complete = bytes.len() <= FETCH_READ_BYTES;
        bytes.truncate(FETCH_READ_BYTES);
        if let Some(at) = memchr::memchr(0, &bytes) {
            return Err(ToolError::invalid(format!(
                "{arg}: looks binary (NUL byte at offset {at}); fetch returns the text of text files only"
            )));
        }
        let bom = if bytes.starts_with(UTF8_BOM) {
            UTF8_BOM.len()
        } else {
            0
        };
        let mut raw = &bytes[bom..];
        if !complete
            && let Err(e) = std::str::from_utf8(raw)
            && e.error_len().is_none()
        {
            // The read ended inside a character; the rest of it is in the part not read.
            raw = &raw[..e.valid_up_to()];
        }
        let text = lossy(raw);
        let invalid_utf8 = matches!(text, std::borrow::Cow::Owned(_));
        let real = p.real();
        let id = id_of(ws, real);
        let url = match real.strip_prefix(ws.root()) {
            Ok(rel) => engine::workspace_url(rel),
            Err(_) => engine::file_url(real),
        };
        let heading = real
            .file_name()
            .filter(|n| engine::is_markdown(n))
            .and_then(|_| {
                let mut end = text.len().min(KNOWLEDGE_TITLE_SCAN_BYTES);
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                engine::markdown_heading(&text[..end])
            });
        let mut doc = Document {
            title: engine::title(&id, heading.as_deref()),
            id,
            text: String::new(),
            url,
            metadata: largest_metadata(&meta),
        };
        let budget = RESULT_TEXT_DEFAULT_CHARS.saturating_sub(json_len(&doc));
        let fit = engine::fit_text(&text, budget, complete);
        // Where the rest starts in the file: after the BOM and the bytes the kept text came from.
        let cursor = fit.rest.map(|rest| {
            let offset = bom + engine::raw_offset(raw, fit.end);
            read_cursor_from(&meta, offset as u64, rest.line)
        });
        doc.text = text[..fit.end].to_owned();
        doc.metadata = metadata(meta.len(), &fit, invalid_utf8, cursor);
        Ok(doc)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_metadata_is_the_one_the_text_is_sized_against() {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), "x".repeat(123_456)).unwrap();
        let meta = std::fs::metadata(f.path()).unwrap();
        let worst = largest_metadata(&meta);
        let rest = |line, inside, next_start_line| {
            Some(Rest {
                line,
                inside,
                next_start_line,
            })
        };
        for (lines, rest, bad) in [
            (0, None, false),
            (99_999, rest(100_000, false, Some(100_000)), true),
            (1, rest(1, true, None), false),
            (1, rest(1, true, Some(2)), true),
            (u64::MAX - 1, rest(u64::MAX, true, Some(u64::MAX)), true),
        ] {
            let fit = Fit {
                end: 0,
                lines,
                rest,
            };
            let cursor = rest.map(|r| read_cursor_from(&meta, meta.len() / 2, r.line));
            let m = metadata(meta.len(), &fit, bad, cursor);
            assert!(json_len(&m) <= json_len(&worst), "{m:?}");
            assert!(m.keys().all(|k| worst.contains_key(k)));
            assert_eq!(m.contains_key("next_cursor"), rest.is_some());
        }
    }
}
