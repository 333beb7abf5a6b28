//! Byte-level text facts shared by the file tools: BOM, line endings, binary sniffing, hashing,
//! and the line model of the tools that rewrite text ([`lines`]: a line ends at `\r\n`, `\n` or a
//! lone `\r`).

use schemars::JsonSchema;
use serde::Serialize;
use sha2::{Digest, Sha256};

/// The UTF-8 byte order mark.
pub(crate) const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// How many leading bytes are checked for NUL to call a file binary (git's heuristic size).
pub(crate) const BINARY_SNIFF_BYTES: usize = 8 * 1024;

/// `bytes` as text, each invalid UTF-8 sequence replaced by U+FFFD.
///
/// Same result as `String::from_utf8_lossy(&bytes).into_owned()`, but valid input (nearly all
/// process and git output) is checked by `str::from_utf8`'s fast path and kept without a copy;
/// `from_utf8_lossy` walks every byte through its chunk iterator, about 14x slower on 1 MiB.
pub(crate) fn utf8_lossy(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// `bytes` as text, borrowed when valid UTF-8, else with each invalid sequence replaced by
/// U+FFFD: `String::from_utf8_lossy` with [`utf8_lossy`]'s fast path for valid input.
pub(crate) fn lossy(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(s) => std::borrow::Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// `s` cut to at most `max` bytes (on a char boundary, `marker` appended) when it is longer.
pub(crate) fn cut(mut s: String, max: usize, marker: &str) -> String {
    if s.len() <= max {
        return s;
    }
    let mut end = max.saturating_sub(marker.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    s.push_str(marker);
    s
}

/// The line endings seen in some text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LineEnding {
    /// No line break at all.
    None,
    /// Only `\n`.
    Lf,
    /// Only `\r\n`.
    Crlf,
    /// Both.
    Mixed,
}

/// Counts of each line-break kind in a byte string, in the line model of the rewriting tools
/// ([`lines`]): `\r\n`, `\n`, and a lone `\r`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct EolCounts {
    pub(crate) lf: usize,
    pub(crate) crlf: usize,
    /// A `\r` not followed by `\n`.
    pub(crate) cr: usize,
}

impl EolCounts {
    pub(crate) fn of(bytes: &[u8]) -> Self {
        let mut c = EolCounts::default();
        for i in memchr::memchr2_iter(b'\r', b'\n', bytes) {
            match bytes[i] {
                b'\n' if i > 0 && bytes[i - 1] == b'\r' => c.crlf += 1,
                b'\n' => c.lf += 1,
                // A CR before an LF is counted with that LF.
                _ if bytes.get(i + 1) == Some(&b'\n') => {}
                _ => c.cr += 1,
            }
        }
        c
    }

    /// The kinds of `\n`-ended lines (`read_file`'s `line_ending`, whose lines end at `\n`:
    /// a lone `\r` is not counted there).
    pub(crate) fn kind(self) -> LineEnding {
        match (self.lf, self.crlf) {
            (0, 0) => LineEnding::None,
            (_, 0) => LineEnding::Lf,
            (0, _) => LineEnding::Crlf,
            _ => LineEnding::Mixed,
        }
    }

    /// The line break new lines should get: the majority; on a tie LF, then CRLF; LF with none.
    pub(crate) fn dominant(self) -> &'static str {
        if self.cr > self.lf && self.cr > self.crlf {
            "\r"
        } else if self.crlf > self.lf {
            "\r\n"
        } else {
            "\n"
        }
    }
}

/// The lines of `text` in the line model of the tools that rewrite text (`edit_file`,
/// `apply_patch`) and of their unified diffs ([`crate::primitives::diff`], which `similar`
/// splits alike): a line ends at `\r\n`, at `\n`, or at a lone `\r` (old Mac files). Yields
/// each line's text and its ending (`"\r\n"`, `"\n"`, `"\r"`, or `""` for a last line
/// without one); the texts and endings concatenated are `text`.
pub(crate) fn lines(text: &str) -> Lines<'_> {
    Lines { rest: text }
}

/// The iterator of [`lines`].
#[derive(Debug, Clone)]
pub(crate) struct Lines<'a> {
    rest: &'a str,
}

impl<'a> Iterator for Lines<'a> {
    type Item = (&'a str, &'static str);

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let bytes = self.rest.as_bytes();
        let (end, eol) = match memchr::memchr2(b'\r', b'\n', bytes) {
            None => (bytes.len(), ""),
            Some(i) if bytes[i] == b'\n' => (i, "\n"),
            Some(i) if bytes.get(i + 1) == Some(&b'\n') => (i, "\r\n"),
            Some(i) => (i, "\r"),
        };
        let line = &self.rest[..end];
        self.rest = &self.rest[end + eol.len()..];
        Some((line, eol))
    }
}

/// The 1-based line, in the [`lines`] model, of byte offset `pos` of `bytes`: one more than the
/// line breaks that end before it (a `\r\n` counts once).
pub(crate) fn line_at(bytes: &[u8], pos: usize) -> usize {
    let c = EolCounts::of(&bytes[..pos]);
    // A `\r` whose `\n` is at `pos` was counted as lone; its line has not ended yet.
    let split_crlf = pos > 0 && bytes[pos - 1] == b'\r' && bytes.get(pos) == Some(&b'\n');
    1 + c.lf + c.crlf + c.cr - usize::from(split_crlf)
}

/// Lowercase hex SHA-256 of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Whether `bytes` (a file's head) looks binary: it has a NUL byte.
pub(crate) fn looks_binary(head: &[u8]) -> bool {
    memchr::memchr(0, head).is_some()
}

/// Validates a whole file's bytes as UTF-8 text for tools that rewrite it.
///
/// # Errors
/// A message naming the 1-based line and byte offset of the first problem: a NUL byte (binary) or
/// invalid UTF-8.
pub(crate) fn check_text(bytes: &[u8]) -> Result<&str, String> {
    if let Some(pos) = memchr::memchr(0, &bytes[..bytes.len().min(BINARY_SNIFF_BYTES)]) {
        return Err(format!(
            "looks binary (NUL byte at offset {pos}); only UTF-8 text can be read or edited"
        ));
    }
    std::str::from_utf8(bytes).map_err(|e| {
        let at = e.valid_up_to();
        let line = memchr::memchr_iter(b'\n', &bytes[..at]).count() + 1;
        format!("is not valid UTF-8 (line {line}, byte offset {at}); only UTF-8 text can be read or edited")
    })
}

/// Replaces every `\n` not preceded by `\r` in `text` with `eol` (`\r\n`, `\n` or `\r`); a `\r\n`
/// or a lone `\r` already present stays as it is.
pub(crate) fn with_line_endings(text: &str, eol: &str) -> String {
    if eol == "\n" {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + text.len() / 16);
    let mut prev_cr = false;
    for ch in text.chars() {
        if ch == '\n' && !prev_cr {
            out.push_str(eol);
        } else {
            out.push(ch);
        }
        prev_cr = ch == '\r';
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_lossy_keeps_valid_text_and_replaces_invalid_bytes() {
        assert_eq!(utf8_lossy(b"caf\xC3\xA9\n".to_vec()), "caf\u{e9}\n");
        assert_eq!(utf8_lossy(b"a\xFFb\xC3".to_vec()), "a\u{fffd}b\u{fffd}");
        assert_eq!(utf8_lossy(Vec::new()), "");
        assert_eq!(lossy(b"a\xFFb"), "a\u{fffd}b");
        assert!(matches!(lossy(b"ok"), std::borrow::Cow::Borrowed("ok")));
    }

    #[test]
    fn eol_counts_and_kinds() {
        assert_eq!(EolCounts::of(b"a\nb\r\nc").kind(), LineEnding::Mixed);
        assert_eq!(EolCounts::of(b"a\r\nb\r\n").kind(), LineEnding::Crlf);
        assert_eq!(EolCounts::of(b"a\nb\n").kind(), LineEnding::Lf);
        assert_eq!(EolCounts::of(b"ab").kind(), LineEnding::None);
        assert_eq!(EolCounts::of(b"a\r\nb\r\nc\n").dominant(), "\r\n");
    }

    #[test]
    fn lines_end_at_lf_crlf_and_a_lone_cr() {
        let all: Vec<(&str, &str)> = lines("a\r\nb\nc\rd").collect();
        assert_eq!(all, [("a", "\r\n"), ("b", "\n"), ("c", "\r"), ("d", "")]);
        assert_eq!(lines("").count(), 0);
        assert_eq!(
            lines("\r\r\n").collect::<Vec<_>>(),
            [("", "\r"), ("", "\r\n")]
        );
        let c = EolCounts::of(b"a\r\nb\nc\rd\r");
        assert_eq!((c.crlf, c.lf, c.cr), (1, 1, 2));
        assert_eq!(c.dominant(), "\r");
        assert_eq!(EolCounts::of(b"a\rb\nc\n").dominant(), "\n");
        assert_eq!(EolCounts::of(b"a\rb\n").dominant(), "\n", "a tie is LF");
        assert_eq!(EolCounts::of(b"a\rb\r\n").dominant(), "\r\n", "then CRLF");
        assert_eq!(EolCounts::of(b"a\rb\r").kind(), LineEnding::None);
        let text = b"a\r\nb\rc\nd";
        let starts: Vec<usize> = [0, 3, 5, 7, 8].iter().map(|&p| line_at(text, p)).collect();
        assert_eq!(starts, [1, 2, 3, 4, 4]);
        assert_eq!(line_at(text, 2), 1, "between a CR and its LF");
    }

    #[test]
    fn line_endings_are_converted_once() {
        assert_eq!(with_line_endings("a\nb\r\nc", "\r\n"), "a\r\nb\r\nc");
        assert_eq!(with_line_endings("a\nb", "\n"), "a\nb");
    }

    #[test]
    fn check_text_names_the_problem() {
        assert!(check_text(b"ok\n").is_ok());
        assert!(check_text(b"a\0b").unwrap_err().contains("binary"));
        let e = check_text(b"line1\nline2 \xff").unwrap_err();
        assert!(e.contains("line 2"), "{e}");
    }
}
