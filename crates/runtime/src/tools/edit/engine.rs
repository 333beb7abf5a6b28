//! The engine of `edit_file`: exact text replacement that keeps every byte outside the edited
//! spans.
//!
//! [`replace`] finds `old_text` in a file's bytes and splices in `new_text`:
//!
//! Lines are those of `apply_patch` and the diffs ([`crate::primitives::text::lines`]: a line ends
//! at `\r\n`, `\n` or a lone `\r`, as old Mac files have them).
//!
//! - An `old_text` containing a `\r`, or no line break at all, is matched byte for byte.
//! - Otherwise it is matched against the file with each line break (`\r\n`, lone `\r`) read as
//!   `\n`, so text written with LF matches a CRLF, CR or mixed file. The matched span is mapped
//!   back to the original bytes, and the line breaks of `new_text` take the style of the span they
//!   replace (the file's dominant style when the span has none); a `\r\n` or `\r` written in
//!   `new_text` stays as it is.
//! - Bytes outside the matched spans, the BOM and the final newline included, are copied as they
//!   are.

use crate::primitives::text::{EolCounts, line_at, with_line_endings};

/// Why a replacement could not be planned.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum EditError {
    /// `old_text` is empty.
    EmptyOld,
    /// `old_text` was not found.
    NotFound,
    /// `old_text` was found `count` times and `replace_all` was not set; `lines` are the 1-based
    /// lines where the first matches start.
    Ambiguous { count: usize, lines: Vec<usize> },
}

/// A planned replacement.
#[derive(Debug)]
pub(crate) struct Replaced {
    /// The whole new file.
    pub(crate) bytes: Vec<u8>,
    /// How many spans were replaced.
    pub(crate) count: usize,
    /// 1-based line of the first replaced span in the original.
    pub(crate) first_line: usize,
}

/// Most match lines reported in an ambiguity error (also `apply_patch`'s).
pub(crate) const MAX_REPORTED_LINES: usize = 20;

/// Replaces `old` with `new` in `file` as described in the module docs.
///
/// # Errors
/// [`EditError`] when `old` is empty, absent, or ambiguous without `replace_all`.
pub(crate) fn replace(
    file: &[u8],
    old: &str,
    new: &str,
    replace_all: bool,
) -> Result<Replaced, EditError> {
    if old.is_empty() {
        return Err(EditError::EmptyOld);
    }
    let normalized = old.contains('\n') && !old.contains('\r');
    let view = if normalized {
        View::breaks_as_lf(file)
    } else {
        View::exact(file)
    };
    let needle = old.as_bytes();
    let spans: Vec<(usize, usize)> = memchr::memmem::find_iter(view.bytes(), needle)
        .map(|s| (view.orig(s), view.orig(s + needle.len())))
        .collect();
    // find_iter yields overlapping matches; keep the non-overlapping ones from the left.
    let mut picked: Vec<(usize, usize)> = Vec::with_capacity(spans.len());
    for (s, e) in spans {
        if picked.last().is_none_or(|&(_, pe)| s >= pe) {
            picked.push((s, e));
        }
    }
    let line_of = |pos: usize| line_at(file, pos);
    match picked.len() {
        0 => return Err(EditError::NotFound),
        1 => {}
        n if !replace_all => {
            return Err(EditError::Ambiguous {
                count: n,
                lines: picked
                    .iter()
                    .take(MAX_REPORTED_LINES)
                    .map(|&(s, _)| line_of(s))
                    .collect(),
            });
        }
        _ => {}
    }
    let dominant = EolCounts::of(file).dominant();
    let mut out = Vec::with_capacity(file.len() + picked.len() * new.len());
    let mut last = 0;
    for &(s, e) in &picked {
        out.extend_from_slice(&file[last..s]);
        let span = EolCounts::of(&file[s..e]);
        let eol = if span.crlf + span.lf + span.cr == 0 {
            dominant
        } else {
            span.dominant()
        };
        out.extend_from_slice(with_line_endings(new, eol).as_bytes());
        last = e;
    }
    out.extend_from_slice(&file[last..]);
    Ok(Replaced {
        bytes: out,
        count: picked.len(),
        first_line: line_of(picked[0].0),
    })
}

/// The bytes matched against, and the map back to the file's offsets.
enum View<'a> {
    Exact(&'a [u8]),
    /// `bytes` is the file with each CR of a CRLF removed and each lone CR replaced by LF (same
    /// offset); `dropped[i]` is the index in `bytes` of the LF whose CR was removed (ascending).
    Normalized {
        bytes: Vec<u8>,
        dropped: Vec<usize>,
    },
}

impl<'a> View<'a> {
    fn exact(file: &'a [u8]) -> Self {
        View::Exact(file)
    }

    fn breaks_as_lf(file: &'a [u8]) -> Self {
        if memchr::memchr(b'\r', file).is_none() {
            return View::Exact(file);
        }
        let mut bytes = Vec::with_capacity(file.len());
        let mut dropped = Vec::new();
        let mut last = 0;
        for i in memchr::memchr_iter(b'\r', file) {
            bytes.extend_from_slice(&file[last..i]);
            if file.get(i + 1) == Some(&b'\n') {
                dropped.push(bytes.len());
            } else {
                bytes.push(b'\n');
            }
            last = i + 1;
        }
        bytes.extend_from_slice(&file[last..]);
        View::Normalized { bytes, dropped }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            View::Exact(b) => b,
            View::Normalized { bytes, .. } => bytes,
        }
    }

    /// Maps an offset of the view to the file. A span starting at an LF whose CR was dropped
    /// starts at that CR, so a replaced line break is replaced whole.
    fn orig(&self, i: usize) -> usize {
        match self {
            View::Exact(_) => i,
            View::Normalized { dropped, .. } => i + dropped.partition_point(|&d| d < i),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(file: &str, old: &str, new: &str) -> String {
        String::from_utf8(replace(file.as_bytes(), old, new, false).unwrap().bytes).unwrap()
    }

    #[test]
    fn lf_old_text_matches_crlf_file_and_keeps_crlf() {
        assert_eq!(
            r("a\r\nb\r\nc\r\n", "a\nb\n", "x\ny\nz\n"),
            "x\r\ny\r\nz\r\nc\r\n"
        );
    }

    #[test]
    fn lf_old_text_matches_lone_cr_lines_and_keeps_cr() {
        assert_eq!(r("a\rb\rc\r", "a\nb\n", "x\ny\nz\n"), "x\ry\rz\rc\r");
        assert_eq!(r("a\r\nb\rc\n", "b\nc", "B\nC"), "a\r\nB\rC\n");
        let planned = replace(b"a\rb\rc\r", "c", "C", false).unwrap();
        assert_eq!(planned.first_line, 3, "a lone CR ends a line");
        match replace(b"x\rdup\rx\rdup\r", "dup", "D", false) {
            Err(EditError::Ambiguous { count, lines }) => {
                assert_eq!((count, lines), (2, vec![2, 4]));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn mixed_file_keeps_untouched_endings() {
        let file = "one\ntwo\r\nthree\nfour\r\n";
        assert_eq!(r(file, "three\nfour", "3\n4"), "one\ntwo\r\n3\n4\r\n");
        assert_eq!(
            r(file, "two\nthree", "2\nthree"),
            "one\n2\r\nthree\nfour\r\n"
        );
    }

    #[test]
    fn bom_and_trailing_bytes_survive() {
        let file = "\u{feff}head\r\nmid\r\ntail-no-eol";
        assert_eq!(
            r(file, "mid", "MIDDLE"),
            "\u{feff}head\r\nMIDDLE\r\ntail-no-eol"
        );
    }

    #[test]
    fn single_line_new_text_in_crlf_file_gets_crlf_when_multiline() {
        assert_eq!(r("a\r\nb\r\n", "b", "b1\nb2"), "a\r\nb1\r\nb2\r\n");
    }

    #[test]
    fn ambiguity_reports_count_and_lines() {
        let e = replace(b"x\ny\nx\nx\n", "x", "z", false).unwrap_err();
        assert_eq!(
            e,
            EditError::Ambiguous {
                count: 3,
                lines: vec![1, 3, 4]
            }
        );
        let ok = replace(b"x\ny\nx\nx\n", "x", "z", true).unwrap();
        assert_eq!(ok.bytes, b"z\ny\nz\nz\n");
        assert_eq!(ok.count, 3);
    }

    #[test]
    fn not_found_and_empty() {
        assert_eq!(
            replace(b"abc", "zz", "y", false).unwrap_err(),
            EditError::NotFound
        );
        assert_eq!(
            replace(b"abc", "", "y", false).unwrap_err(),
            EditError::EmptyOld
        );
    }

    #[test]
    fn replaced_line_break_at_span_start_takes_its_cr() {
        assert_eq!(r("a\r\nb\r\n", "\nb", "\nB"), "a\r\nB\r\n");
    }
}
