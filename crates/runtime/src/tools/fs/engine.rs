//! The engine of `read_file`: reading text files by line range or tail without loading them whole.
//!
//! A range read streams the file once in 64 KiB blocks: lines before the range are only counted,
//! lines in the range are copied until the byte budget is spent, and lines after it are counted
//! (up to [`COUNT_AHEAD_MAX_BYTES`]) so the total is known. A tail read seeks to the end and reads
//! backwards block by block until it holds enough lines, so a 2-million-line log costs a few
//! blocks. Content must be UTF-8 without NUL bytes.

use std::{
    fs::File,
    io::{self, Read, Seek, SeekFrom},
};

use sha2::{Digest, Sha256};

use crate::primitives::text::{BINARY_SNIFF_BYTES, EolCounts, LineEnding, UTF8_BOM, looks_binary};

/// Block size of streaming reads.
const BLOCK: usize = 64 * 1024;
/// After the requested range, at most this many more bytes are scanned to count the total lines.
pub(crate) const COUNT_AHEAD_MAX_BYTES: u64 = 256 * 1024 * 1024;
/// Bytes a continuation page reads past a cut line's returned part to find that line's break
/// (and so its ending and length); a line whose break is further away reports neither.
const CUT_LINE_END_SCAN_MAX_BYTES: u64 = 1024 * 1024;

/// What to read.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Span {
    /// Lines `start..=end` (1-based; `end` `None` = to the end of the file).
    Lines { start: u64, end: Option<u64> },
    /// The last `n` lines.
    Tail(u64),
    /// Forward from `at` (where a previous page stopped, possibly inside a line) up to line
    /// `end` (`None` = to the end of the file).
    From { at: Position, end: Option<u64> },
    /// Backward: the last `lines` lines (a partial line at `end` counts as one) of the bytes
    /// before offset `end`, which a previous tail page started at.
    Before {
        end: u64,
        lines: u64,
        /// The line that holds byte `end` (1-based), when known.
        line_at_end: Option<u64>,
    },
}

/// A byte position in a file and the 1-based line it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Position {
    pub(crate) offset: u64,
    pub(crate) line: u64,
}

/// Where the rest of a read that did not fit continues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Read on from here ([`Span::From`]), up to the same end line.
    Forward(Position),
    /// Read the lines before this offset ([`Span::Before`]).
    Backward {
        end: u64,
        lines: u64,
        line_at_end: Option<u64>,
    },
}

/// The text read and where it sits in the file.
#[derive(Debug)]
pub(crate) struct Excerpt {
    pub(crate) content: String,
    /// Byte offset of the first byte of `content` in the file (the BOM counts).
    pub(crate) offset: u64,
    pub(crate) start_line: Option<u64>,
    pub(crate) end_line: Option<u64>,
    pub(crate) total_lines: Option<u64>,
    pub(crate) truncated: bool,
    pub(crate) next_start_line: Option<u64>,
    /// Where the rest of the requested text is: every byte of it, exactly once, page by page.
    pub(crate) next: Option<Next>,
    /// A line longer than the budget whose first (range) or last (tail) bytes alone are in
    /// `content`, and that line's length in bytes (with its line break) when known.
    pub(crate) cut_line: Option<(u64, Option<u64>)>,
    /// The line break that ends a cut line of a forward read, which `content` stops before
    /// (counted into `line_ending`); none when the line is unterminated or its end was not seen.
    pub(crate) cut_line_break: EolCounts,
    pub(crate) bom: bool,
    pub(crate) line_ending: LineEnding,
    /// SHA-256 of the whole file when every byte was read.
    pub(crate) sha256: Option<String>,
}

/// Why a read failed.
#[derive(Debug)]
pub(crate) enum ReadError {
    Io(io::Error),
    /// NUL byte at this offset.
    Binary(u64),
    /// Invalid UTF-8 at this 1-based line.
    NotUtf8 {
        line: u64,
    },
    /// `start_line` is past the last line.
    PastEnd {
        total: u64,
    },
    /// A continuation points past the end of the file.
    BadPosition,
}

impl From<io::Error> for ReadError {
    fn from(e: io::Error) -> Self {
        ReadError::Io(e)
    }
}

/// Reads `span` from `file` (of `size` bytes), returning at most `max_bytes` of content.
///
/// # Errors
/// [`ReadError`]: I/O failure, binary content (a NUL in the first 8 KiB or in the content),
/// invalid UTF-8 in the content, a start line past the end, or a continuation past the end.
pub(crate) fn read(
    file: &mut File,
    size: u64,
    span: Span,
    max_bytes: usize,
) -> Result<Excerpt, ReadError> {
    let mut head = vec![0u8; BINARY_SNIFF_BYTES.min(size as usize)];
    file.read_exact(&mut head)?;
    if let Some(p) = memchr::memchr(0, &head) {
        return Err(ReadError::Binary(p as u64));
    }
    let bom = head.starts_with(UTF8_BOM);
    file.seek(SeekFrom::Start(0))?;
    let max_bytes = max_bytes.max(4); // room for one character
    let mut ex = match span {
        Span::Lines { start, end } => read_lines(
            file,
            Position { offset: 0, line: 1 },
            start.max(1),
            end,
            max_bytes,
        )?,
        Span::From { at, end } => {
            if at.offset > size {
                return Err(ReadError::BadPosition);
            }
            read_lines(file, at, at.line, end, max_bytes)?
        }
        Span::Tail(n) => read_tail(file, size, n, None, true, max_bytes)?,
        Span::Before {
            end,
            lines,
            line_at_end,
        } => {
            if end > size {
                return Err(ReadError::BadPosition);
            }
            read_tail(file, end, lines, line_at_end, false, max_bytes)?
        }
    };
    if bom && ex.offset == 0 && ex.content.starts_with('\u{feff}') {
        ex.content.drain(..'\u{feff}'.len_utf8());
    }
    ex.bom = bom;
    let mut eol = EolCounts::of(ex.content.as_bytes());
    eol.lf += ex.cut_line_break.lf;
    eol.crlf += ex.cut_line_break.crlf;
    ex.line_ending = eol.kind();
    Ok(ex)
}

fn finish_text(buf: Vec<u8>, first_line: u64) -> Result<String, ReadError> {
    if looks_binary(&buf) {
        let p = memchr::memchr(0, &buf).unwrap_or(0);
        return Err(ReadError::Binary(p as u64));
    }
    String::from_utf8(buf).map_err(|e| {
        let bytes = e.as_bytes();
        let at = e.utf8_error().valid_up_to();
        let line = first_line + memchr::memchr_iter(b'\n', &bytes[..at]).count() as u64;
        ReadError::NotUtf8 { line }
    })
}

/// The longest prefix of `b` that does not end inside a UTF-8 sequence.
fn char_prefix(b: &[u8]) -> usize {
    match std::str::from_utf8(b) {
        Ok(_) => b.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => b.len(),
    }
}

/// Streams forward from `from` (the file is positioned at 0): lines before `start` are only
/// counted, lines `start..=end` are copied until `max_bytes` is spent, and, for a read from the
/// start of the file, the lines after it are counted (up to [`COUNT_AHEAD_MAX_BYTES`]) so the
/// total is known.
fn read_lines(
    file: &mut File,
    from: Position,
    start: u64,
    end: Option<u64>,
    max_bytes: usize,
) -> Result<Excerpt, ReadError> {
    let whole_file = from.offset == 0;
    let mut at_line_start = true; // the next segment begins a line
    let mut after_cr = false; // the byte before the next one read is '\r'
    if from.offset > 0 {
        file.seek(SeekFrom::Start(from.offset - 1))?;
        let mut b = [0u8; 1];
        file.read_exact(&mut b)?;
        at_line_start = b[0] == b'\n';
        after_cr = b[0] == b'\r';
    }
    let mut hasher = Sha256::new();
    let mut block = vec![0u8; BLOCK];
    let mut out: Vec<u8> = Vec::new();
    let mut out_offset: Option<u64> = None; // file offset of out[0]
    let mut file_pos = from.offset; // file offset of the next byte read
    let mut line: u64 = from.line; // line the next byte belongs to
    let mut last_byte_newline = at_line_start; // the last byte read was '\n' (or none read)
    let mut collecting_done = false; // range finished or budget spent
    let mut truncated = false;
    let mut next_start: Option<u64> = None;
    let mut next: Option<Next> = None;
    let mut last_line_in_out: Option<u64> = None;
    let mut ahead: u64 = 0;
    let mut reached_eof = false;
    let mut partial_line = false;
    let mut line_start_in_out = 0usize; // offset in `out` where the current line began
    let mut line_len: u64 = 0; // bytes of the current line seen so far
    let mut cut_len: Option<u64> = None; // length of the cut line, once its end is seen
    let mut cut_break = EolCounts::default(); // the cut line's break, once seen
    loop {
        let n = file.read(&mut block)?;
        if n == 0 {
            reached_eof = true;
            break;
        }
        let chunk = &block[..n];
        if whole_file {
            hasher.update(chunk);
        }
        let mut pos = 0;
        while pos < n {
            let nl = memchr::memchr(b'\n', &chunk[pos..]).map(|i| pos + i);
            let seg_end = nl.map_or(n, |i| i + 1);
            let seg = &chunk[pos..seg_end];
            let seg_offset = file_pos + pos as u64;
            let in_range = line >= start && end.is_none_or(|e| line <= e);
            line_len += seg.len() as u64;
            if !collecting_done && in_range {
                if at_line_start {
                    line_start_in_out = out.len();
                }
                if out_offset.is_none() {
                    out_offset = Some(seg_offset);
                }
                if out.len() + seg.len() <= max_bytes {
                    out.extend_from_slice(seg);
                    last_line_in_out = Some(line);
                } else if line_start_in_out > 0 {
                    // Over budget inside a later line: keep only the whole lines before it.
                    out.truncate(line_start_in_out);
                    collecting_done = true;
                    truncated = true;
                    next_start = Some(line);
                    last_line_in_out = Some(line - 1);
                    next = Some(Next::Forward(Position {
                        offset: out_offset.unwrap_or(seg_offset) + out.len() as u64,
                        line,
                    }));
                } else {
                    // The first line alone is over budget: keep what fits on a char boundary.
                    let room = max_bytes - out.len();
                    out.extend_from_slice(&seg[..room]);
                    out.truncate(char_prefix(&out));
                    last_line_in_out = Some(line);
                    partial_line = true;
                    collecting_done = true;
                    truncated = true;
                    next_start = Some(line + 1);
                    next = Some(Next::Forward(Position {
                        offset: out_offset.unwrap_or(seg_offset) + out.len() as u64,
                        line,
                    }));
                }
            } else if !collecting_done && end.is_some_and(|e| line > e) {
                collecting_done = true;
                next_start = Some(line);
            }
            if collecting_done {
                ahead += seg.len() as u64;
            }
            last_byte_newline = nl.is_some();
            at_line_start = nl.is_some();
            if nl.is_some() {
                if partial_line && last_line_in_out == Some(line) {
                    cut_len = Some(line_len);
                    let cr = match seg.len() {
                        1 => after_cr,
                        l => seg[l - 2] == b'\r',
                    };
                    if cr {
                        cut_break.crlf = 1;
                    } else {
                        cut_break.lf = 1;
                    }
                }
                line += 1;
                line_len = 0;
            }
            after_cr = seg.last() == Some(&b'\r');
            pos = seg_end;
        }
        file_pos += n as u64;
        // Lines are counted ahead only for a read from the start: a continuation page never
        // scans the rest of the file, only (a bounded stretch) to the end of a line it cut.
        let seeking_cut_end =
            partial_line && cut_len.is_none() && ahead <= CUT_LINE_END_SCAN_MAX_BYTES;
        if collecting_done && (!whole_file || ahead > COUNT_AHEAD_MAX_BYTES) && !seeking_cut_end {
            break;
        }
    }
    let total = reached_eof.then(|| if last_byte_newline { line - 1 } else { line });
    if reached_eof && partial_line && !last_byte_newline && last_line_in_out == Some(line) {
        cut_len = Some(line_len); // the cut line is the unterminated last one
    }
    if let Some(t) = total {
        if whole_file && (start > t.max(1) || (t == 0 && start > 1)) {
            return Err(ReadError::PastEnd { total: t });
        }
        if next_start.is_some_and(|s| s > t) {
            next_start = None;
        }
        if let Some(Next::Forward(p)) = next
            && p.offset >= file_pos
        {
            next = None; // nothing follows the cut
        }
    }
    if partial_line {
        // Continuing a cut line by start_line would skip its rest (next_cursor does not).
        next_start = last_line_in_out
            .map(|l| l + 1)
            .filter(|&s| total.is_none_or(|t| s <= t));
    }
    let content = finish_text(out, start)?;
    let end_line = last_line_in_out;
    Ok(Excerpt {
        offset: out_offset.unwrap_or(from.offset),
        start_line: end_line.map(|_| start),
        end_line,
        total_lines: total,
        truncated,
        next_start_line: next_start,
        next,
        cut_line: partial_line
            .then_some(last_line_in_out)
            .flatten()
            .map(|l| (l, cut_len)),
        cut_line_break: cut_break,
        bom: false,
        line_ending: LineEnding::None,
        sha256: (whole_file && reached_eof).then(|| hex::encode(hasher.finalize())),
        content,
    })
}

/// The last `n` lines of the bytes before `end` (a partial line at `end` counts as one), at most
/// `max_bytes` of them (the newest), and where the rest of those lines is. `line_at_end` is the
/// line holding byte `end`, when a previous page knew it; `from_the_end` says `end` is the size
/// of the file (the first page of a tail).
fn read_tail(
    file: &mut File,
    end: u64,
    n: u64,
    line_at_end: Option<u64>,
    from_the_end: bool,
    max_bytes: usize,
) -> Result<Excerpt, ReadError> {
    // Walk backwards collecting blocks until n+1 line breaks precede the wanted text, the budget
    // is covered, or the start of the file is reached.
    let mut pos = end;
    let mut tail: Vec<u8> = Vec::new(); // bytes from `pos` to `end`
    let trailing_newline = if end > 0 {
        let mut b = [0u8; 1];
        file.seek(SeekFrom::Start(end - 1))?;
        file.read_exact(&mut b)?;
        b[0] == b'\n'
    } else {
        false
    };
    // Line breaks that end one of the last n lines don't count as separators before them.
    let needed_breaks = n + u64::from(trailing_newline);
    let cap = max_bytes as u64 + BLOCK as u64;
    let mut start_offset: Option<usize> = None; // index into `tail` where the wanted lines start
    while pos > 0 {
        let len = BLOCK.min(pos as usize);
        pos -= len as u64;
        file.seek(SeekFrom::Start(pos))?;
        let mut chunk = vec![0u8; len];
        file.read_exact(&mut chunk)?;
        chunk.extend_from_slice(&tail);
        tail = chunk;
        let breaks = memchr::memrchr_iter(b'\n', &tail).take(needed_breaks as usize);
        let found: Vec<usize> = breaks.collect();
        if found.len() as u64 >= needed_breaks {
            start_offset = Some(found[needed_breaks as usize - 1] + 1);
            break;
        }
        if tail.len() as u64 > cap {
            break;
        }
    }
    let lines_in = |b: &[u8]| {
        let nl = memchr::memchr_iter(b'\n', b).count() as u64;
        if b.is_empty() || b.ends_with(b"\n") {
            nl
        } else {
            nl + 1
        }
    };
    let from = start_offset.unwrap_or(0);
    let mut wanted = tail.split_off(from);
    let mut start = pos + from as u64; // file offset of wanted[0]
    // The byte before `start` (None: `start` is the start of the file).
    let mut before: Option<u8> = tail.last().copied();
    // The total is known only when the whole file went through memory.
    let total = (pos == 0 && from_the_end)
        .then(|| memchr::memchr_iter(b'\n', &tail).count() as u64 + lines_in(&wanted));
    let body_end = wanted.len().saturating_sub(1);
    if pos > 0
        && start_offset.is_none()
        && let Some(i) = memchr::memchr(b'\n', &wanted[..body_end])
    {
        // Stopped by the byte cap in the middle of a line: drop that partial line (a line with
        // no break before its end is kept: its end is cut to the budget below).
        before = Some(b'\n');
        wanted.drain(..=i);
        start += i as u64 + 1;
    }
    let mut cut_bytes: Option<Option<u64>> = None;
    if wanted.len() > max_bytes {
        // Keep the newest lines that fit: drop from the front up to a line start.
        let mut cut = wanted.len() - max_bytes;
        match memchr::memchr(b'\n', &wanted[cut - 1..]).map(|i| cut + i) {
            Some(s) if s < wanted.len() => {
                before = Some(wanted[s - 1]);
                wanted.drain(..s);
                start += s as u64;
            }
            _ => {
                // The last line alone is over budget: keep its end, from a char boundary.
                let body = wanted.strip_suffix(b"\n").unwrap_or(&wanted);
                let line_start = memchr::memrchr(b'\n', body).map(|i| i + 1);
                let whole_line_seen = line_start.is_some() || start_offset.is_some() || pos == 0;
                cut_bytes =
                    Some(whole_line_seen.then(|| (wanted.len() - line_start.unwrap_or(0)) as u64));
                while cut < wanted.len() && wanted[cut] & 0xC0 == 0x80 {
                    cut += 1;
                }
                before = Some(wanted[cut - 1]);
                wanted.drain(..cut);
                start += cut as u64;
            }
        }
    }
    // Line starts in [start, end): `start` itself when it follows a line break (or is the
    // start of the file), and one after every line break but a final one.
    let starts_at_line = before.is_none_or(|b| b == b'\n');
    let inner_breaks =
        memchr::memchr_iter(b'\n', wanted.strip_suffix(b"\n").unwrap_or(&wanted)).count() as u64;
    let starts = u64::from(starts_at_line && !wanted.is_empty()) + inner_breaks;
    let lines_left = n.saturating_sub(starts);
    let returned_lines = lines_in(&wanted);
    // The line holding the last byte returned, when known.
    let last_line = match (total, line_at_end) {
        (Some(t), _) => Some(t),
        (None, Some(l)) => Some(if trailing_newline { l - 1 } else { l }),
        _ => None,
    };
    let content = finish_text(wanted, 1)?;
    let (start_line, end_line) = match last_line {
        Some(l) if returned_lines > 0 && l >= returned_lines => {
            (Some(l - returned_lines + 1), Some(l))
        }
        _ => (None, None),
    };
    let next = (lines_left > 0 && start > 0).then_some(Next::Backward {
        end: start,
        lines: lines_left,
        line_at_end: start_line,
    });
    Ok(Excerpt {
        content,
        offset: start,
        start_line,
        end_line,
        total_lines: total,
        truncated: next.is_some(),
        next_start_line: None,
        next,
        cut_line: cut_bytes.and_then(|len| end_line.map(|l| (l, len))),
        // A tail's cut line ends the text returned: its break, if any, is in `content`.
        cut_line_break: EolCounts::default(),
        bom: false,
        line_ending: LineEnding::None,
        sha256: None,
    })
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn file_with(content: &[u8]) -> (tempfile::NamedTempFile, u64) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(content).unwrap();
        (f, content.len() as u64)
    }

    fn rd(content: &[u8], span: Span, max: usize) -> Result<Excerpt, ReadError> {
        let (f, size) = file_with(content);
        let mut h = File::open(f.path()).unwrap();
        read(&mut h, size, span, max)
    }

    #[test]
    fn whole_file_reports_totals_and_hash() {
        let e = rd(
            b"a\nb\nc\n",
            Span::Lines {
                start: 1,
                end: None,
            },
            100,
        )
        .unwrap();
        assert_eq!(e.content, "a\nb\nc\n");
        assert_eq!(
            (e.start_line, e.end_line, e.total_lines),
            (Some(1), Some(3), Some(3))
        );
        assert!(!e.truncated);
        assert_eq!(e.next_start_line, None);
        assert_eq!(
            e.sha256.as_deref(),
            Some(crate::primitives::text::sha256_hex(b"a\nb\nc\n").as_str())
        );
    }

    #[test]
    fn range_and_continuation() {
        let e = rd(
            b"1\n2\n3\n4\n5",
            Span::Lines {
                start: 2,
                end: Some(3),
            },
            100,
        )
        .unwrap();
        assert_eq!(e.content, "2\n3\n");
        assert_eq!(e.total_lines, Some(5));
        assert_eq!(e.next_start_line, Some(4));
        let e = rd(
            b"1\n2\n3\n4\n5",
            Span::Lines {
                start: 1,
                end: None,
            },
            4,
        )
        .unwrap();
        assert_eq!(e.content, "1\n2\n");
        assert!(e.truncated);
        assert_eq!(e.next_start_line, Some(3));
    }

    #[test]
    fn the_budget_cuts_at_a_line_that_spans_blocks() {
        let line = format!("{}\n", "x".repeat(1000));
        let content = line.repeat(200); // 200_200 bytes: lines cross 64 KiB block edges
        let e = rd(
            content.as_bytes(),
            Span::Lines {
                start: 1,
                end: None,
            },
            100_000,
        )
        .unwrap();
        assert_eq!(e.content.len(), 99 * 1001);
        assert!(e.content.ends_with('\n'));
        assert_eq!(e.end_line, Some(99));
        assert_eq!(e.next_start_line, Some(100));
        assert!(e.truncated);
    }

    #[test]
    fn tail_reads_last_lines() {
        let e = rd(b"1\n2\n3\n4\n5\n", Span::Tail(2), 100).unwrap();
        assert_eq!(e.content, "4\n5\n");
        assert_eq!(
            (e.start_line, e.end_line, e.total_lines),
            (Some(4), Some(5), Some(5))
        );
        let e = rd(b"1\n2\n3", Span::Tail(1), 100).unwrap();
        assert_eq!(e.content, "3");
        let e = rd(b"1\n2\n", Span::Tail(10), 100).unwrap();
        assert_eq!(e.content, "1\n2\n");
        assert_eq!(e.start_line, Some(1));
    }

    #[test]
    fn tail_of_a_large_file_reads_few_blocks() {
        let mut content = Vec::new();
        for i in 0..200_000 {
            content.extend_from_slice(format!("line {i}\n").as_bytes());
        }
        let e = rd(&content, Span::Tail(3), 1 << 20).unwrap();
        assert_eq!(e.content, "line 199997\nline 199998\nline 199999\n");
        assert_eq!(e.total_lines, None);
    }

    #[test]
    fn binary_and_bad_utf8_are_errors() {
        assert!(matches!(
            rd(
                b"ab\0cd",
                Span::Lines {
                    start: 1,
                    end: None
                },
                100
            ),
            Err(ReadError::Binary(2))
        ));
        assert!(matches!(
            rd(
                b"ok\nbad \xff\n",
                Span::Lines {
                    start: 1,
                    end: None
                },
                100
            ),
            Err(ReadError::NotUtf8 { line: 2 })
        ));
    }

    #[test]
    fn bom_is_reported_and_stripped() {
        let e = rd(
            b"\xEF\xBB\xBFhi\r\n",
            Span::Lines {
                start: 1,
                end: None,
            },
            100,
        )
        .unwrap();
        assert!(e.bom);
        assert_eq!(e.content, "hi\r\n");
        assert_eq!(e.line_ending, LineEnding::Crlf);
    }

    #[test]
    fn start_past_end_is_an_error() {
        assert!(matches!(
            rd(
                b"a\nb\n",
                Span::Lines {
                    start: 5,
                    end: None
                },
                100
            ),
            Err(ReadError::PastEnd { total: 2 })
        ));
    }
}
