//! The text block of a successful structured result (DESIGN §4 "Results sized for hosts").
//!
//! Most hosts put a result's text block, not its `structuredContent`, in front of the model, and
//! some cut it (Claude Code moves text over 50,000 characters to a file, Copilot CLI cuts at
//! 10 KB). So the text block is readable and bounded: a one-line summary first — what was
//! returned, totals, whether and how to continue — then plain text (file text, matching lines, a
//! diff, process output), never the structure serialized as JSON. `structuredContent` carries the
//! whole structure.
//!
//! One mechanism for every tool: each output type implements [`TextView`]; the catalog
//! ([`crate::call::catalog`]) renders it with [`render`] next to the structured value. A tool
//! bounds its own output (it knows where its continuation starts): it sizes its page to
//! [`body_limit`] of the call's [`TextView::text_limit`], and counts the text it will render with
//! a [`Budget`]. [`render`] cuts a summary longer than [`RESULT_SUMMARY_MAX_CHARS`] and, as a
//! backstop that tests show never fires for a default call, a text over its limit.
//!
//! Characters are counted as UTF-8 bytes, an upper bound of both Unicode scalar values and the
//! UTF-16 code units JavaScript hosts count.

use crate::{limits::RESULT_SUMMARY_MAX_CHARS, limits::RESULT_TEXT_DEFAULT_CHARS};

/// What a successful structured result shows as text.
pub(crate) trait TextView {
    /// The summary line, without a line break: what was returned, the totals, and whether and
    /// how to continue (the exact argument to pass). Line breaks in it become spaces.
    fn summary(&self) -> String;

    /// Appends the plain text that follows the summary line (empty by default).
    fn body(&self, _out: &mut String) {}

    /// Most characters the whole text may have: [`RESULT_TEXT_DEFAULT_CHARS`], unless the call
    /// explicitly asked for more.
    fn text_limit(&self) -> usize {
        RESULT_TEXT_DEFAULT_CHARS
    }
}

/// Characters a tool may put under the summary line when the text may have `text_limit`.
pub(crate) const fn body_limit(text_limit: usize) -> usize {
    text_limit.saturating_sub(RESULT_SUMMARY_MAX_CHARS + 1)
}

/// The text block of `view`: its summary line (at most [`RESULT_SUMMARY_MAX_CHARS`]), a line
/// break, and its body; at most [`TextView::text_limit`] characters.
pub(crate) fn render(view: &dyn TextView) -> String {
    let mut text = fit_summary(&view.summary().replace(['\n', '\r'], " "));
    text.push('\n');
    view.body(&mut text);
    let limit = view.text_limit().max(RESULT_SUMMARY_MAX_CHARS + 1);
    if text.len() > limit {
        // A tool sized its page wrongly; the host's bound still holds.
        tracing::warn!(
            chars = text.len(),
            limit,
            "a result's text exceeded its bound and was cut"
        );
        let marker = "\n[text cut at the server's result bound; structuredContent has all of it]\n";
        text = cut(text, limit - marker.len(), marker);
    }
    text
}

/// Where the continuation clause of a summary starts ("; more: …", always last).
const MORE: &str = "; more: ";

/// `summary` within [`RESULT_SUMMARY_MAX_CHARS`]: a long one loses the middle of what it says
/// (an echoed path or pattern), never its continuation clause, so a host that shows only the
/// text can still continue. A clause too long to keep (it echoes a path of thousands of
/// characters) is replaced by a pointer to `structuredContent`.
fn fit_summary(summary: &str) -> String {
    if summary.len() <= RESULT_SUMMARY_MAX_CHARS {
        return summary.to_owned();
    }
    let (head, more) = summary
        .rfind(MORE)
        .map_or((summary, ""), |i| summary.split_at(i));
    let more = if more.len() > RESULT_SUMMARY_MAX_CHARS / 2 {
        "; more: the continuation is too long for this line (a very long path): take next_cursor or next_offset from structuredContent"
    } else {
        more
    };
    let room = RESULT_SUMMARY_MAX_CHARS - more.len();
    let marker = " … ";
    let keep = room.saturating_sub(marker.len());
    if head.len() <= room {
        return format!("{head}{more}");
    }
    let mut start_end = keep * 2 / 3;
    while !head.is_char_boundary(start_end) {
        start_end -= 1;
    }
    let mut end_start = head.len() - (keep - start_end);
    while !head.is_char_boundary(end_start) {
        end_start += 1;
    }
    format!("{}{marker}{}{more}", &head[..start_end], &head[end_start..])
}

pub(crate) use crate::primitives::text::cut;

/// Characters left for a page's text: items are added while they fit.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    left: usize,
}

impl Budget {
    /// A budget of `chars`.
    pub(crate) fn new(chars: usize) -> Self {
        Self { left: chars }
    }

    /// Takes `chars` if that many are left; `false` (and nothing taken) otherwise.
    pub(crate) fn take(&mut self, chars: usize) -> bool {
        if chars > self.left {
            return false;
        }
        self.left -= chars;
        true
    }
}

/// Most lines of a trailer ([`trailer`]); the rest are counted, not shown.
pub(crate) const TRAILER_LINES: usize = 10;
/// Longest line of a trailer; a longer one is cut with `…`.
pub(crate) const TRAILER_LINE_MAX: usize = 500;
/// Characters a page keeps free for its trailer under the listed items: [`TRAILER_LINES`] lines
/// of [`TRAILER_LINE_MAX`] and the line that counts the rest.
pub(crate) const TRAILER_RESERVE: usize = TRAILER_LINES * (TRAILER_LINE_MAX + 1) + 200;

/// Appends `lines` (skipped paths, notes) after a page's items: at most [`TRAILER_LINES`] of
/// them, each cut to [`TRAILER_LINE_MAX`], then one line counting the rest; at most
/// [`TRAILER_RESERVE`] characters.
pub(crate) fn trailer(out: &mut String, lines: &[String]) {
    for l in lines.iter().take(TRAILER_LINES) {
        out.push_str(&cut(l.replace('\n', " "), TRAILER_LINE_MAX, "…"));
        out.push('\n');
    }
    if lines.len() > TRAILER_LINES {
        out.push_str(&format!(
            "… and {} more (in structuredContent)\n",
            lines.len() - TRAILER_LINES
        ));
    }
}

/// `n` with the unit `one`/`many` ("1 file", "3 files").
pub(crate) fn count(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A string argument as it must be passed (a JSON string literal), for continuation hints.
pub(crate) fn arg(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

/// Ends a summary line of a tool paged by an opaque cursor: how to ask for the next page, or
/// that the result is complete.
pub(crate) fn push_cursor_more(summary: &mut String, next_cursor: Option<&str>) {
    match next_cursor {
        Some(c) => summary.push_str(&format!(
            "; more: repeat the call with the same arguments and \"cursor\": {}",
            arg(c)
        )),
        None => summary.push_str("; complete"),
    }
}

/// [`trailer`] of the paths a walk skipped, then its notes.
pub(crate) fn skipped_trailer(
    out: &mut String,
    skipped: &[crate::primitives::skipped::SkippedPath],
    notes: &[String],
) {
    let lines: Vec<String> = skipped
        .iter()
        .map(crate::primitives::skipped::SkippedPath::line)
        .chain(notes.iter().cloned())
        .collect();
    trailer(out, &lines);
}

#[cfg(test)]
mod tests {
    use super::*;

    struct View(&'static str, String, usize);

    impl TextView for View {
        fn summary(&self) -> String {
            self.0.to_owned()
        }
        fn body(&self, out: &mut String) {
            out.push_str(&self.1);
        }
        fn text_limit(&self) -> usize {
            self.2
        }
    }

    #[test]
    fn the_text_is_the_summary_line_then_the_body_as_it_is() {
        let body = "line \"one\"\n\ttwo\\\n".to_owned();
        let t = render(&View("a\nsummary", body.clone(), 1 << 20));
        assert_eq!(t, format!("a summary\n{body}"));
    }

    #[test]
    fn an_oversized_text_is_cut_to_its_limit_with_a_marker() {
        let t = render(&View("s", "é".repeat(40_000), 45_000));
        assert!(t.len() <= 45_000, "{}", t.len());
        assert!(t.ends_with("structuredContent has all of it]\n"));
        let long = "x".repeat(5_000).leak();
        let t = render(&View(long, String::new(), 45_000));
        assert_eq!(t.len(), RESULT_SUMMARY_MAX_CHARS + 1);
    }

    /// A long path in a summary never pushes its continuation out of the text.
    #[test]
    fn a_long_summary_keeps_its_continuation_clause() {
        let path = "é/".repeat(2_000);
        let s =
            format!("read_file {path}: lines 1-2{MORE}repeat the call with \"cursor\": \"abc\"")
                .leak();
        let t = render(&View(s, String::new(), 45_000));
        assert!(t.len() <= RESULT_SUMMARY_MAX_CHARS + 1, "{}", t.len());
        assert!(t.starts_with("read_file é/"), "{t}");
        assert!(
            t.ends_with(": lines 1-2; more: repeat the call with \"cursor\": \"abc\"\n"),
            "{t}"
        );
        // A clause that is itself too long is replaced by a pointer to the structure.
        let s = format!("list_dir x{MORE}call list_dir with {{\"path\": \"{path}\"}}").leak();
        let t = render(&View(s, String::new(), 45_000));
        assert!(t.len() <= RESULT_SUMMARY_MAX_CHARS + 1);
        assert!(
            t.contains("take next_cursor or next_offset from structuredContent"),
            "{t}"
        );
    }

    #[test]
    fn a_budget_takes_only_what_fits() {
        let mut b = Budget::new(10);
        assert!(b.take(6));
        assert!(!b.take(5));
        assert!(b.take(4));
        assert!(!b.take(1));
    }
}
