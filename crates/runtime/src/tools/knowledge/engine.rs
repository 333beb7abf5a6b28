//! The pure parts of ChatGPT's `search` and `fetch`: splitting a query into terms, matching
//! them, ranking files, a Markdown file's title, the `machine://workspace/` URL of a file,
//! fitting a file's text into a JSON result of bounded size, and where in the file's bytes a
//! cut falls (for the `read_file` cursor that continues it).
//!
//! Ranking (the order of `search` results), each key deciding only when the ones before it tie:
//!
//! 1. more distinct query terms found in the file's path or contents;
//! 2. more distinct terms in the file's name;
//! 3. more distinct terms in its workspace-relative path (the name included);
//! 4. more matching lines in its contents (lines read within the scan cap);
//! 5. path order (the order of a sorted depth-first walk).
//!
//! So a file that names the query in its path ranks above one that only mentions it, and a
//! file that holds every term ranks above one that repeats a single term many times.

use std::{borrow::Cow, ffi::OsStr, os::unix::ffi::OsStrExt, path::Path};

use crate::limits::{
    KNOWLEDGE_QUERY_MAX_CHARS, KNOWLEDGE_QUERY_TERMS_MAX, KNOWLEDGE_TITLE_HEADING_MAX_CHARS,
};
use grep_matcher::Matcher;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};

use crate::{
    call::error::ToolError,
    path::quote,
    primitives::{text, uri},
};

// A term set is a bitmask of `u32`.
const _: () = assert!(KNOWLEDGE_QUERY_TERMS_MAX <= 32);

/// Characters trimmed from both ends of a query word: quotes, brackets and sentence
/// punctuation, so that `"relay",` and `(relay)` look for `relay`.
const EDGE: &[char] = &[
    '"', '\'', '`', '“', '”', '‘', '’', '«', '»', '(', ')', '[', ']', '{', '}', '<', '>', ',', ';',
    ':', '!', '?',
];

/// English words that say nothing about which file is meant ("how does the relay work");
/// dropped from a query unless nothing else is left.
const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from", "how",
    "i", "in", "is", "it", "of", "on", "or", "that", "the", "this", "to", "what", "when", "where",
    "which", "who", "why", "with",
];

/// The terms of a `search` query, lowercased, in the order they first appear.
///
/// Rules: split at whitespace; trim [`EDGE`] characters from both ends of each word and `.`
/// from its end (so a sentence's last word loses its full stop, `.gitignore` keeps its dot);
/// drop words left empty; drop repeats (compared lowercased); drop [`STOP_WORDS`] unless only
/// stop words are left.
///
/// # Errors
/// `invalid_request` when the query is empty or only whitespace or punctuation, longer than
/// [`KNOWLEDGE_QUERY_MAX_CHARS`] bytes, or has more than [`KNOWLEDGE_QUERY_TERMS_MAX`] terms.
pub(crate) fn split_query(query: &str) -> Result<Vec<String>, ToolError> {
    if query.trim().is_empty() {
        return Err(ToolError::invalid(
            "query is empty: pass the words to look for in file paths and contents",
        ));
    }
    if query.len() > KNOWLEDGE_QUERY_MAX_CHARS {
        return Err(ToolError::invalid(format!(
            "query is {} characters long; at most {KNOWLEDGE_QUERY_MAX_CHARS}",
            query.len()
        )));
    }
    let mut terms: Vec<String> = Vec::new();
    for word in query.split_whitespace() {
        let t = word
            .trim_start_matches(EDGE)
            .trim_end_matches(|c| EDGE.contains(&c) || c == '.')
            .to_lowercase();
        if !t.is_empty() && !terms.contains(&t) {
            terms.push(t);
        }
    }
    if terms.is_empty() {
        return Err(ToolError::invalid(
            "query has no words to look for (only punctuation)",
        ));
    }
    if terms.iter().any(|t| !STOP_WORDS.contains(&t.as_str())) {
        terms.retain(|t| !STOP_WORDS.contains(&t.as_str()));
    }
    if terms.len() > KNOWLEDGE_QUERY_TERMS_MAX {
        return Err(ToolError::invalid(format!(
            "query has {} distinct terms; at most {KNOWLEDGE_QUERY_TERMS_MAX}: keep the words that name what you look for",
            terms.len()
        )));
    }
    Ok(terms)
}

/// The matchers of a query's terms: each a case-insensitive fixed string.
pub(crate) struct Terms {
    /// One matcher per term, in term order (bit `i` of a [`TermSet`] is `each[i]`).
    each: Vec<RegexMatcher>,
    /// Any of the terms: what the content search looks for.
    any: RegexMatcher,
}

/// A set of query terms: bit `i` is term `i`.
pub(crate) type TermSet = u32;

impl Terms {
    /// Matchers for `terms` (from [`split_query`]).
    ///
    /// # Errors
    /// `invalid_request` when a matcher cannot be built (a term too large for the regex
    /// engine's size limit; not reachable within [`KNOWLEDGE_QUERY_MAX_CHARS`]).
    pub(crate) fn new(terms: &[String]) -> Result<Self, ToolError> {
        let builder = || {
            let mut b = RegexMatcherBuilder::new();
            b.fixed_strings(true)
                .case_insensitive(true)
                .line_terminator(Some(b'\n'));
            b
        };
        let bad = |e: grep_regex::Error| ToolError::invalid(format!("query: {e}"));
        let each = terms
            .iter()
            .map(|t| builder().build(t).map_err(bad))
            .collect::<Result<Vec<_>, _>>()?;
        let any = builder().build_many(terms).map_err(bad)?;
        Ok(Self { each, any })
    }

    /// The matcher of any term (for the content search).
    pub(crate) fn any(&self) -> &RegexMatcher {
        &self.any
    }

    /// The terms found in `haystack` (a path's bytes or a line of text).
    pub(crate) fn found_in(&self, haystack: &[u8]) -> TermSet {
        self.each
            .iter()
            .enumerate()
            .filter(|(_, m)| m.is_match(haystack).unwrap_or(false))
            .fold(0, |set, (i, _)| set | (1 << i))
    }
}

/// What is known of one candidate file, for ranking.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Facts {
    /// Terms found in the file's name.
    pub(crate) name: TermSet,
    /// Terms found in its workspace-relative path (the name included).
    pub(crate) path: TermSet,
    /// Terms found on the lines of its contents that were read.
    pub(crate) content: TermSet,
    /// Lines of its contents that matched a term (counted within the scan cap).
    pub(crate) lines: usize,
}

impl Facts {
    /// Whether any term was found in the file's path or contents.
    pub(crate) fn matched(&self) -> bool {
        self.path | self.content != 0
    }
}

/// The best `max` candidates in ranking order (module docs), as indices into `facts`, which
/// are in path order; files where no term was found are left out.
pub(crate) fn rank(facts: &[Facts], max: usize) -> Vec<usize> {
    let mut hits: Vec<usize> = (0..facts.len()).filter(|&i| facts[i].matched()).collect();
    let key = |i: usize| {
        let f = &facts[i];
        (
            std::cmp::Reverse((f.path | f.content).count_ones()),
            std::cmp::Reverse(f.name.count_ones()),
            std::cmp::Reverse(f.path.count_ones()),
            std::cmp::Reverse(f.lines),
            i,
        )
    };
    hits.sort_unstable_by_key(|&i| key(i));
    hits.truncate(max);
    hits
}

/// Whether a file name is Markdown's (`.md`, `.markdown`, `.mdx`, any case).
pub(crate) fn is_markdown(name: &OsStr) -> bool {
    Path::new(name)
        .extension()
        .and_then(OsStr::to_str)
        .is_some_and(|e| ["md", "markdown", "mdx"].contains(&e.to_ascii_lowercase().as_str()))
}

/// The first ATX heading (`# Title`, any level) of a Markdown text, outside fenced code blocks,
/// without its markers; cut to [`KNOWLEDGE_TITLE_HEADING_MAX_CHARS`] (with `…`). `None` when
/// the text has none.
pub(crate) fn markdown_heading(text: &str) -> Option<String> {
    let mut fence: Option<&str> = None;
    for line in text.lines() {
        let l = line.trim_start_matches(' ');
        if line.len() - l.len() > 3 {
            continue; // indented code
        }
        let marker = if l.starts_with("```") {
            Some("```")
        } else if l.starts_with("~~~") {
            Some("~~~")
        } else {
            None
        };
        match (fence, marker) {
            (Some(open), Some(m)) if m == open => fence = None,
            (None, Some(m)) => fence = Some(m),
            (Some(_), _) => {}
            (None, None) => {
                let hashes = l.bytes().take_while(|&b| b == b'#').count();
                let rest = &l[hashes..];
                if (1..=6).contains(&hashes) && (rest.is_empty() || rest.starts_with([' ', '\t'])) {
                    let h = rest.trim().trim_end_matches('#').trim_end();
                    if !h.is_empty() {
                        return Some(text::cut(
                            h.to_owned(),
                            KNOWLEDGE_TITLE_HEADING_MAX_CHARS,
                            "…",
                        ));
                    }
                }
            }
        }
    }
    None
}

/// A result's title: a Markdown file's first heading followed by its path
/// (`"Relay protocol — docs/relay-protocol.md"`), else the path alone.
pub(crate) fn title(display: &str, heading: Option<&str>) -> String {
    match heading {
        Some(h) => format!("{h} — {display}"),
        None => display.to_owned(),
    }
}

/// The prefix of the URL of a file in the workspace.
pub(crate) const WORKSPACE_URL: &str = "machine://workspace/";
/// The prefix of the URL of a file outside the workspace (only unrestricted callers reach one).
const FILE_URL: &str = "file://";

/// The stable URL of a file: `machine://workspace/<path>` for `rel`, a path relative to the
/// workspace root, each byte outside RFC 3986 `unreserved` and `/` percent-encoded (a path that
/// is not UTF-8 keeps its bytes). It names no host path, so it is the same for every caller.
pub(crate) fn workspace_url(rel: &Path) -> String {
    format!("{WORKSPACE_URL}{}", uri::encode_path(rel.as_os_str()))
}

/// The URL of a file outside the workspace, `file://<absolute path>` percent-encoded as
/// [`workspace_url`] does.
pub(crate) fn file_url(abs: &Path) -> String {
    format!("{FILE_URL}{}", uri::encode_path(abs.as_os_str()))
}

/// The path argument a `fetch` id names: a `machine://workspace/` URL decoded to its
/// workspace-relative path, a `file://` URL to its absolute path (both in the quoted form of
/// [`quote`] when not UTF-8), anything else as written (a path as the other tools take it).
///
/// # Errors
/// `invalid_request` for a `machine://workspace/` URL that names no path or an absolute one,
/// and a `file://` URL that does not name an absolute path on this machine (`file:///...`).
pub(crate) fn id_path(id: &str) -> Result<Cow<'_, str>, ToolError> {
    if let Some(rest) = id.strip_prefix(WORKSPACE_URL) {
        let bytes = uri::decode_path(rest);
        if bytes.is_empty() || bytes.starts_with(b"/") {
            return Err(ToolError::invalid(format!(
                "{id}: a {WORKSPACE_URL} URL names a file by its path relative to the workspace"
            )));
        }
        return Ok(Cow::Owned(quote::render(OsStr::from_bytes(&bytes))));
    }
    if let Some(rest) = id.strip_prefix(FILE_URL) {
        let bytes = uri::decode_path(rest);
        if !bytes.starts_with(b"/") {
            return Err(ToolError::invalid(format!(
                "{id}: a {FILE_URL} URL must name an absolute path on this machine ({FILE_URL}/path)"
            )));
        }
        return Ok(Cow::Owned(quote::render(OsStr::from_bytes(&bytes))));
    }
    Ok(Cow::Borrowed(id))
}

/// Bytes `c` takes inside a JSON string as `serde_json` (and `call::json`) writes it: `"` `\`
/// and the control characters with a short escape take 2, other control characters 6
/// (`\u00XX`), everything else its UTF-8 length.
fn json_char_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// How much of a file's text goes into a `fetch` result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fit {
    /// Bytes of the text kept (a char boundary; a line boundary unless the first line alone
    /// is over the budget).
    pub(crate) end: usize,
    /// Lines in the kept text (a last line without its break counts).
    pub(crate) lines: u64,
    /// Where the rest starts when the text was cut; `None` when the text is the whole file.
    pub(crate) rest: Option<Rest>,
}

/// Where the rest of a cut text starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rest {
    /// The 1-based line that holds the first byte not kept.
    pub(crate) line: u64,
    /// The cut is inside `line`: the kept text holds its beginning (only when the first line
    /// alone is over the budget).
    pub(crate) inside: bool,
    /// The first line not kept at all, to read on by whole lines: `line` after a cut at a
    /// line's end; after a cut inside a line, the line after it when the text given shows that
    /// one exists, else `None` (unknown, or there is none).
    pub(crate) next_start_line: Option<u64>,
}

/// The longest beginning of `text` whose JSON escaping (quotes excluded) takes at most
/// `budget` bytes, cut after a line break when one fits. `complete` says `text` is the whole
/// file; otherwise a file's text goes on after it, and a last line without a break is treated
/// as cut.
pub(crate) fn fit_text(text: &str, budget: usize, complete: bool) -> Fit {
    let mut used = 0usize;
    let mut stop = text.len();
    // The end of the last whole line that fits, and the lines up to it.
    let (mut line_end, mut line_count) = (0usize, 0u64);
    for (i, c) in text.char_indices() {
        let cost = json_char_len(c);
        if used + cost > budget {
            stop = i;
            break;
        }
        used += cost;
        if c == '\n' {
            line_end = i + 1;
            line_count += 1;
        }
    }
    if stop == text.len() && complete {
        let partial = u64::from(!text.is_empty() && !text.ends_with('\n'));
        return Fit {
            end: text.len(),
            lines: line_count + partial,
            rest: None,
        };
    }
    if line_end > 0 {
        let next = line_count + 1;
        return Fit {
            end: line_end,
            lines: line_count,
            rest: Some(Rest {
                line: next,
                inside: false,
                next_start_line: Some(next),
            }),
        };
    }
    // Not even the first line fits: cut inside it. A line after it is known to exist when
    // the first line's break is in `text` and something follows it, in `text` or the file.
    let next_exists = memchr::memchr(b'\n', &text.as_bytes()[stop..])
        .is_some_and(|at| stop + at + 1 < text.len() || !complete);
    Fit {
        end: stop,
        lines: u64::from(stop > 0),
        rest: Some(Rest {
            line: 1,
            inside: true,
            next_start_line: next_exists.then_some(2),
        }),
    }
}

/// The length in `raw` (the bytes a text was decoded from, each invalid UTF-8 sequence
/// replaced by one U+FFFD, as `String::from_utf8_lossy` does) of the first `text_end` bytes of
/// the decoded text (a char boundary of it): where in the file a cut of the decoded text falls.
pub(crate) fn raw_offset(raw: &[u8], text_end: usize) -> usize {
    let (mut raw_at, mut text_at) = (0usize, 0usize);
    for chunk in raw.utf8_chunks() {
        let valid = chunk.valid().len();
        if text_end <= text_at + valid {
            return raw_at + (text_end - text_at);
        }
        raw_at += valid;
        text_at += valid;
        let invalid = chunk.invalid().len();
        if invalid > 0 {
            if text_end < text_at + char::REPLACEMENT_CHARACTER.len_utf8() {
                return raw_at;
            }
            raw_at += invalid;
            text_at += char::REPLACEMENT_CHARACTER.len_utf8();
        }
    }
    raw_at
}

#[cfg(test)]
mod tests {
    use std::{ffi::OsString, os::unix::ffi::OsStringExt};

    use super::*;

    fn terms(q: &str) -> Vec<String> {
        split_query(q).unwrap()
    }

    #[test]
    fn a_query_splits_at_whitespace_into_lowercased_distinct_terms_without_punctuation() {
        assert_eq!(
            terms("Relay  reconnect\tgrace"),
            ["relay", "reconnect", "grace"]
        );
        assert_eq!(
            terms("How does the \"relay\" handle (reconnects)?"),
            ["relay", "handle", "reconnects"]
        );
        assert_eq!(terms("relay RELAY Relay."), ["relay"]);
        assert_eq!(
            terms(".gitignore ./src/lib.rs foo.rs)."),
            [".gitignore", "./src/lib.rs", "foo.rs"]
        );
        assert_eq!(terms("search_text::run"), ["search_text::run"]);
        // Only stop words: they are what the caller looks for.
        assert_eq!(terms("the"), ["the"]);
        assert_eq!(terms("Ünïcode ÄBC"), ["ünïcode", "äbc"]);
    }

    #[test]
    fn empty_punctuation_only_long_and_many_term_queries_are_refused() {
        for q in ["", "   \n\t", "?! ,,, ()"] {
            let e = split_query(q).unwrap_err();
            assert_eq!(e.code().as_str(), "invalid_request", "{q:?}");
        }
        let long = "a".repeat(KNOWLEDGE_QUERY_MAX_CHARS + 1);
        assert!(
            split_query(&long)
                .unwrap_err()
                .message()
                .contains("at most")
        );
        assert!(split_query(&"a".repeat(KNOWLEDGE_QUERY_MAX_CHARS)).is_ok());
        let many: Vec<String> = (0..=KNOWLEDGE_QUERY_TERMS_MAX)
            .map(|i| format!("w{i}"))
            .collect();
        let e = split_query(&many.join(" ")).unwrap_err();
        assert!(e.message().contains("distinct terms"), "{}", e.message());
        assert_eq!(
            split_query(&many[1..].join(" ")).unwrap().len(),
            KNOWLEDGE_QUERY_TERMS_MAX
        );
    }

    #[test]
    fn terms_match_case_insensitively_as_fixed_strings() {
        let t = Terms::new(&terms("relay a.b")).unwrap();
        assert_eq!(t.found_in(b"crates/RELAY/src/lib.rs"), 0b01);
        assert_eq!(t.found_in(b"A.B relay"), 0b11);
        assert_eq!(t.found_in(b"axb"), 0, "a dot is a dot, not any character");
        assert!(t.any().is_match(b"x A.b y").unwrap());
    }

    fn f(name: u32, path: u32, content: u32, lines: usize) -> Facts {
        Facts {
            name,
            path,
            content,
            lines,
        }
    }

    #[test]
    fn ranking_puts_more_terms_first_then_name_then_path_then_lines_then_path_order() {
        let facts = [
            f(0, 0, 0, 0),          // 0: no term: left out
            f(0, 0, 0b01, 500),     // 1: one term, many lines
            f(0, 0, 0b11, 1),       // 2: both terms in the contents
            f(0b01, 0b01, 0, 0),    // 3: one term in the name
            f(0, 0b01, 0b01, 3),    // 4: one term in a directory name
            f(0b01, 0b11, 0, 0),    // 5: both in the path, one in the name
            f(0, 0b01, 0b01, 3),    // 6: ties with 4: path order
            f(0b01, 0b01, 0b01, 9), // 7: like 3, more lines
        ];
        assert_eq!(rank(&facts, 20), [5, 2, 7, 3, 4, 6, 1]);
        assert_eq!(rank(&facts, 2), [5, 2]);
        assert!(rank(&facts[..1], 20).is_empty());
    }

    #[test]
    fn markdown_titles_come_from_the_first_heading_outside_code() {
        assert!(is_markdown(OsStr::new("README.MD")));
        assert!(is_markdown(OsStr::new("a.markdown")));
        assert!(!is_markdown(OsStr::new("md")));
        let text = "---\ntitle: x\n---\n```sh\n# not a heading\n```\n    # indented code\n#hashtag\n## Relay  protocol ##\n# Later\n";
        assert_eq!(markdown_heading(text).as_deref(), Some("Relay  protocol"));
        assert_eq!(markdown_heading("no heading\n"), None);
        assert_eq!(markdown_heading("#\n# \n"), None);
        let long = format!("# {}", "é".repeat(KNOWLEDGE_TITLE_HEADING_MAX_CHARS));
        let h = markdown_heading(&long).unwrap();
        assert!(h.len() <= KNOWLEDGE_TITLE_HEADING_MAX_CHARS && h.ends_with('…'));
        assert_eq!(title("docs/a.md", Some("A")), "A — docs/a.md");
        assert_eq!(title("src/a.rs", None), "src/a.rs");
    }

    #[test]
    fn urls_percent_encode_the_path_and_decode_back_to_the_same_bytes() {
        assert_eq!(
            workspace_url(Path::new("src/a b/ü%#?.rs")),
            "machine://workspace/src/a%20b/%C3%BC%25%23%3F.rs"
        );
        assert_eq!(
            workspace_url(Path::new("a-b_c.~d/e")),
            "machine://workspace/a-b_c.~d/e"
        );
        assert_eq!(file_url(Path::new("/tmp/x y")), "file:///tmp/x%20y");
        for rel in ["src/a b/ü%#?.rs", "\"quoted\"", "plain.rs"] {
            let url = workspace_url(Path::new(rel));
            assert_eq!(
                id_path(&url).unwrap(),
                quote::render(OsStr::new(rel)),
                "{url}"
            );
        }
        let raw = OsString::from_vec(b"caf\xe9.txt".to_vec());
        let url = workspace_url(Path::new(&raw));
        assert_eq!(url, "machine://workspace/caf%E9.txt");
        let arg = id_path(&url).unwrap().into_owned();
        assert_eq!(quote::parse(&arg).unwrap(), raw);
        assert_eq!(id_path("file:///tmp/x%20y").unwrap(), "/tmp/x y");
        assert_eq!(id_path("src/lib.rs").unwrap(), "src/lib.rs");
        for bad in [
            "machine://workspace/",
            "machine://workspace/%2Fetc",
            "file://host/x",
        ] {
            assert_eq!(
                id_path(bad).unwrap_err().code().as_str(),
                "invalid_request",
                "{bad}"
            );
        }
    }

    /// Bytes of `s` as a JSON string literal, quotes included.
    fn json_str_len(s: &str) -> usize {
        2 + s.chars().map(json_char_len).sum::<usize>()
    }

    #[test]
    fn json_lengths_are_what_serde_json_writes() {
        let mut all = String::new();
        for c in (0u32..0x80).chain([0xe9, 0x2028, 0xfeff, 0x1f600]) {
            all.push(char::from_u32(c).unwrap());
        }
        for s in [all.as_str(), "", "\"\\", "a\r\nb\tc\u{1}"] {
            assert_eq!(
                json_str_len(s),
                serde_json::to_string(s).unwrap().len(),
                "{s:?}"
            );
        }
    }

    fn after_line(line: u64) -> Option<Rest> {
        Some(Rest {
            line,
            inside: false,
            next_start_line: Some(line),
        })
    }

    #[test]
    fn text_fits_whole_or_is_cut_after_a_line_within_the_escaped_budget() {
        let text = "ab\n\"q\"\nlast";
        assert_eq!(
            fit_text(text, 100, true),
            Fit {
                end: text.len(),
                lines: 3,
                rest: None
            }
        );
        // "ab\n" costs 4, "\"q\"\n" costs 7: a budget of 10 keeps the first line only.
        assert_eq!(
            fit_text(text, 10, true),
            Fit {
                end: 3,
                lines: 1,
                rest: after_line(2)
            }
        );
        assert_eq!(fit_text(text, 11, true).end, 7);
        // A buffer that is not the whole file: its last line is cut even when it fits.
        assert_eq!(
            fit_text("a\nb", 100, false),
            Fit {
                end: 2,
                lines: 1,
                rest: after_line(2)
            }
        );
        assert_eq!(fit_text("", 0, true).lines, 0);
        // "abc\n" costs 5 (the line break is escaped as two characters).
        assert_eq!(fit_text("abc\n", 5, true).rest, None);
    }

    #[test]
    fn a_cut_inside_the_first_line_names_no_start_line_that_repeats_it() {
        let inside = |next_start_line| {
            Some(Rest {
                line: 1,
                inside: true,
                next_start_line,
            })
        };
        // A first line longer than the budget is cut on a char boundary.
        let fit = fit_text("ééééé\nx", 5, true);
        assert_eq!((fit.end, fit.lines, fit.rest), (4, 1, inside(Some(2))));
        // One line and nothing after it, or only its break: no line 2 to start at.
        assert_eq!(fit_text("abcdef", 3, true).rest, inside(None));
        assert_eq!(fit_text("abcdef\n", 3, true).rest, inside(None));
        // Not known whether the line ends within what was read.
        assert_eq!(fit_text("abcdef", 3, false).rest, inside(None));
        // Its break is the last byte read, and the file goes on: line 2 exists.
        assert_eq!(fit_text("abcdef\n", 3, false).rest, inside(Some(2)));
        assert_eq!(fit_text("abc\n", 4, true).rest, inside(None));
    }

    #[test]
    fn a_cut_of_the_decoded_text_maps_back_to_the_files_bytes() {
        let raw = b"a\xffb\xc3\xa9\xe2\x82c";
        let text = String::from_utf8_lossy(raw);
        assert_eq!(text, "a\u{fffd}b\u{e9}\u{fffd}c");
        // Each char boundary of the text and the raw offset it stands for.
        for (text_end, raw_end) in [(0, 0), (1, 1), (4, 2), (5, 3), (7, 5), (10, 7), (11, 8)] {
            assert!(text.is_char_boundary(text_end));
            assert_eq!(raw_offset(raw, text_end), raw_end, "{text_end}");
        }
        assert_eq!(raw_offset("plain é".as_bytes(), 6), 6);
    }
}
