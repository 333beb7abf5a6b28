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

/// What to read.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Span {
    /// Lines `start..=end` (1-based; `end` `None` = to the end of the file).
    Lines { start: u64, end: Option<u64> },
    /// The last `n` lines.
    Tail(u64),
}

/// The text read and where it sits in the file.
#[derive(Debug)]
pub(crate) struct Excerpt {
    pub(crate) content: String,
    pub(crate) start_line: Option<u64>,
    pub(crate) end_line: Option<u64>,
    pub(crate) total_lines: Option<u64>,
    pub(crate) truncated: bool,
    pub(crate) next_start_line: Option<u64>,
    /// A line longer than the budget whose first (range) or last (tail) bytes alone are in
    /// `content`, and that line's length in bytes (with its line break) when known.
    pub(crate) cut_line: Option<(u64, Option<u64>)>,
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
/// invalid UTF-8 in the content, or a start line past the end.
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
    let mut ex = match span {
        Span::Lines { start, end } => read_lines(file, start.max(1), end, max_bytes)?,
        Span::Tail(n) => read_tail(file, size, n, max_bytes)?,
    };
    if bom && ex.content.starts_with('\u{feff}') {
        ex.content.drain(..'\u{feff}'.len_utf8());
    }
    ex.bom = bom;
    ex.line_ending = EolCounts::of(ex.content.as_bytes()).kind();
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

fn read_lines(
    file: &mut File,
    start: u64,
    end: Option<u64>,
    max_bytes: usize,
) -> Result<Excerpt, ReadError> {
    let mut hasher = Sha256::new();
    let mut block = vec![0u8; BLOCK];
    let mut out: Vec<u8> = Vec::new();
    let mut line: u64 = 1; // line the next byte belongs to
    let mut last_byte_newline = true; // file empty or last byte read was '\n'
    let mut collecting_done = false; // range finished or budget spent
    let mut truncated = false;
    let mut next_start: Option<u64> = None;
    let mut last_line_in_out: Option<u64> = None;
    let mut ahead: u64 = 0;
    let mut reached_eof = false;
    let mut partial_line = false;
    let mut at_line_start = true; // the next segment begins a line
    let mut line_start_in_out = 0usize; // offset in `out` where the current line began
    let mut line_len: u64 = 0; // bytes of the current line seen so far
    let mut cut_len: Option<u64> = None; // length of the cut line, once its end is seen
    loop {
        let n = file.read(&mut block)?;
        if n == 0 {
            reached_eof = true;
            break;
        }
        let chunk = &block[..n];
        hasher.update(chunk);
        let mut pos = 0;
        while pos < n {
            let nl = memchr::memchr(b'\n', &chunk[pos..]).map(|i| pos + i);
            let seg_end = nl.map_or(n, |i| i + 1);
            let seg = &chunk[pos..seg_end];
            let in_range = line >= start && end.is_none_or(|e| line <= e);
            line_len += seg.len() as u64;
            if !collecting_done && in_range {
                if at_line_start {
                    line_start_in_out = out.len();
                }
                if out.len() + seg.len() <= max_bytes {
                    out.extend_from_slice(seg);
                    last_line_in_out = Some(line);
                } else if line_start_in_out > 0 {
                    // Over budget inside a later line: keep only the whole lines before it.
                    out.truncate(line_start_in_out);
                    last_line_in_out = Some(line - 1);
                    collecting_done = true;
                    truncated = true;
                    next_start = Some(line);
                } else {
                    // The first line alone is over budget: keep what fits on a char boundary.
                    let room = max_bytes - out.len();
                    out.extend_from_slice(&seg[..room]);
                    let valid = match std::str::from_utf8(&out) {
                        Ok(_) => out.len(),
                        Err(e) if e.error_len().is_none() => e.valid_up_to(),
                        Err(_) => out.len(),
                    };
                    out.truncate(valid);
                    last_line_in_out = Some(line);
                    partial_line = true;
                    collecting_done = true;
                    truncated = true;
                    next_start = Some(line + 1);
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
                }
                line += 1;
                line_len = 0;
            }
            pos = seg_end;
        }
        if collecting_done && ahead > COUNT_AHEAD_MAX_BYTES {
            break;
        }
    }
    let total = reached_eof.then(|| if last_byte_newline { line - 1 } else { line });
    if reached_eof && partial_line && !last_byte_newline && last_line_in_out == Some(line) {
        cut_len = Some(line_len); // the cut line is the unterminated last one
    }
    if let Some(t) = total {
        if start > t.max(1) || (t == 0 && start > 1) {
            return Err(ReadError::PastEnd { total: t });
        }
        if next_start.is_some_and(|s| s > t) {
            next_start = None;
        }
    }
    if partial_line {
        // Continuing a cut line would skip its rest; point at it instead.
        next_start = last_line_in_out
            .map(|l| l + 1)
            .filter(|&s| total.is_none_or(|t| s <= t));
    }
    let content = finish_text(out, start)?;
    let end_line = last_line_in_out;
    Ok(Excerpt {
        start_line: end_line.map(|_| start),
        end_line,
        total_lines: total,
        truncated,
        next_start_line: next_start,
        cut_line: partial_line
            .then_some(last_line_in_out)
            .flatten()
            .map(|l| (l, cut_len)),
        bom: false,
        line_ending: LineEnding::None,
        sha256: reached_eof.then(|| hex::encode(hasher.finalize())),
        content,
    })
}

fn read_tail(file: &mut File, size: u64, n: u64, max_bytes: usize) -> Result<Excerpt, ReadError> {
    // Walk backwards collecting blocks until n+1 line breaks precede the wanted text, the budget
    // is covered, or the start of the file is reached.
    let mut pos = size;
    let mut tail: Vec<u8> = Vec::new(); // bytes from `pos` to the end
    let trailing_newline = if size > 0 {
        let mut b = [0u8; 1];
        file.seek(SeekFrom::Start(size - 1))?;
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
    // The total is known only when the whole file went through memory.
    let total =
        (pos == 0).then(|| memchr::memchr_iter(b'\n', &tail).count() as u64 + lines_in(&wanted));
    let mut truncated = false;
    if pos > 0 && start_offset.is_none() {
        // Stopped by the byte cap in the middle of a line: drop that partial line.
        truncated = true;
        match memchr::memchr(b'\n', &wanted) {
            Some(i) => {
                wanted.drain(..=i);
            }
            None => wanted.clear(),
        }
    }
    let mut cut_bytes: Option<Option<u64>> = None;
    if wanted.len() > max_bytes {
        // Keep the newest lines that fit: drop from the front up to a line start.
        let mut cut = wanted.len() - max_bytes;
        match memchr::memchr(b'\n', &wanted[cut..]).map(|i| cut + i + 1) {
            Some(s) if s < wanted.len() => {
                wanted.drain(..s);
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
                wanted.drain(..cut);
            }
        }
        truncated = true;
    }
    let returned_lines = lines_in(&wanted);
    let content = finish_text(wanted, 1)?;
    let (start_line, end_line) = match total {
        Some(t) if returned_lines > 0 && t >= returned_lines => {
            (Some(t - returned_lines + 1), Some(t))
        }
        _ => (None, None),
    };
    Ok(Excerpt {
        content,
        start_line,
        end_line,
        total_lines: total,
        truncated,
        next_start_line: None,
        cut_line: cut_bytes.and_then(|len| end_line.map(|l| (l, len))),
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
