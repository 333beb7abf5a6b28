//! Bounded output of one stream: the first bytes (head) and a window of the newest bytes with
//! absolute offsets, so a one-shot result can show head + tail and a session can be read from
//! any offset still retained.

use std::collections::VecDeque;

use crate::primitives::text::utf8_lossy;

/// One stream's captured output.
#[derive(Debug)]
pub(crate) struct StreamBuf {
    head: Vec<u8>,
    head_cap: usize,
    window: VecDeque<u8>,
    window_cap: usize,
    total: u64,
    last_line: Vec<u8>,
    current_line: Vec<u8>,
}

fn extend_capped(line: &mut Vec<u8>, data: &[u8]) {
    let room = LAST_LINE_MAX.saturating_sub(line.len());
    line.extend_from_slice(&data[..data.len().min(room)]);
}

/// Most bytes of the newest line kept for progress messages.
const LAST_LINE_MAX: usize = 200;

impl StreamBuf {
    /// A buffer keeping the first `head_cap` bytes and the newest `window_cap` bytes.
    pub(crate) fn new(head_cap: usize, window_cap: usize) -> Self {
        Self {
            head: Vec::new(),
            head_cap,
            window: VecDeque::new(),
            window_cap,
            total: 0,
            last_line: Vec::new(),
            current_line: Vec::new(),
        }
    }

    /// Appends `data`, dropping the oldest window bytes beyond the cap.
    pub(crate) fn push(&mut self, data: &[u8]) {
        if self.head.len() < self.head_cap {
            let n = (self.head_cap - self.head.len()).min(data.len());
            self.head.extend_from_slice(&data[..n]);
        }
        let keep = data.len().min(self.window_cap);
        let overflow = (self.window.len() + keep).saturating_sub(self.window_cap);
        self.window.drain(..overflow);
        self.window.extend(&data[data.len() - keep..]);
        self.total += data.len() as u64;
        // The line being written and the last complete one, for progress messages.
        match data.iter().rposition(|&b| b == b'\n') {
            Some(i) => {
                let start = data[..i]
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |p| p + 1);
                if start > 0 {
                    self.current_line.clear();
                }
                extend_capped(&mut self.current_line, &data[start..i]);
                self.last_line = std::mem::take(&mut self.current_line);
                extend_capped(&mut self.current_line, &data[i + 1..]);
            }
            None => extend_capped(&mut self.current_line, data),
        }
    }

    /// Bytes written so far.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// Bytes held: the head plus the window (a byte may be in both).
    pub(crate) fn retained(&self) -> usize {
        self.head.len() + self.window.len()
    }

    /// Gives back spare capacity, for a stream that gets no more output.
    pub(crate) fn shrink(&mut self) {
        self.head.shrink_to_fit();
        self.window.shrink_to_fit();
    }

    /// Absolute offset of the oldest retained byte.
    pub(crate) fn window_start(&self) -> u64 {
        self.total - self.window.len() as u64
    }

    /// The newest line (the one being written, else the last complete one), lossy and trimmed.
    pub(crate) fn last_line(&self) -> String {
        let line = if self.current_line.iter().any(|b| !b.is_ascii_whitespace()) {
            &self.current_line
        } else {
            &self.last_line
        };
        crate::primitives::text::lossy(line).trim().to_owned()
    }

    /// The window bytes at `range` (indices into the window), copied slice by slice.
    fn copy_window(&self, range: std::ops::Range<usize>) -> Vec<u8> {
        let (a, b) = self.window.as_slices();
        let mut bytes = Vec::with_capacity(range.len());
        // The range within `a`, then the rest within `b`.
        let in_a = range.start.min(a.len())..range.end.min(a.len());
        bytes.extend_from_slice(&a[in_a]);
        let in_b = range.start.saturating_sub(a.len())..range.end.saturating_sub(a.len());
        bytes.extend_from_slice(&b[in_b]);
        bytes
    }

    /// Up to `max` bytes from absolute `offset`: `(start, bytes, dropped)` where `dropped` is how
    /// many requested bytes were no longer retained (the data then starts at the window start).
    /// Offsets in the head (the first bytes ever written) are served from it, so a long output
    /// reads as its head, one counted gap, and its newest bytes.
    /// The end is moved back so no UTF-8 sequence is split, unless `eof` (nothing more comes).
    pub(crate) fn read(&self, offset: u64, max: usize, eof: bool) -> (u64, Vec<u8>, u64) {
        // The head serves offsets before the window (the first bytes of a long output).
        if offset < self.window_start() && offset < self.head.len() as u64 {
            let from = offset as usize;
            let to = self.head.len().min(from + max);
            let mut bytes = self.head[from..to].to_vec();
            bytes.truncate(complete_utf8_prefix(&bytes));
            return (offset, bytes, 0);
        }
        let start = offset.max(self.window_start()).min(self.total);
        let dropped = start - offset.min(start);
        let skip = (start - self.window_start()) as usize;
        let n = max.min(self.window.len() - skip);
        let mut bytes = self.copy_window(skip..skip + n);
        let more_follow = !eof || skip + n < self.window.len();
        if more_follow {
            bytes.truncate(complete_utf8_prefix(&bytes));
        }
        (start, bytes, dropped)
    }

    /// The whole output, when every byte is still retained (it never outgrew the window).
    pub(crate) fn whole(&self) -> Option<Vec<u8>> {
        (self.window.len() as u64 == self.total).then(|| self.copy_window(0..self.window.len()))
    }

    /// The first `n` bytes ever written (fewer when the head kept fewer).
    pub(crate) fn first_bytes(&self, n: usize) -> &[u8] {
        &self.head[..self.head.len().min(n)]
    }

    /// The newest `n` bytes (fewer when the window holds fewer).
    pub(crate) fn last_bytes(&self, n: usize) -> Vec<u8> {
        let len = self.window.len().min(n);
        self.copy_window(self.window.len() - len..self.window.len())
    }

    /// The whole output if it fits in `max` bytes, else the first `max/2` and last `max/2` bytes
    /// joined by a marker naming what was left out. Returns `(text, truncated, head)`, `head`
    /// being the bytes of the head shown (where the left-out bytes start).
    pub(crate) fn head_and_tail(&self, max: usize) -> (String, bool, u64) {
        if self.total as usize <= max && self.window.len() as u64 == self.total {
            return (
                utf8_lossy(self.copy_window(0..self.window.len())),
                false,
                self.total,
            );
        }
        let half = max / 2;
        let head = &self.head[..self.head.len().min(half)];
        let head = &head[..complete_utf8_prefix(head)];
        let tail_len = self.window.len().min(half);
        let tail = self.copy_window(self.window.len() - tail_len..self.window.len());
        let skip = tail
            .iter()
            .take(3)
            .take_while(|&&b| b & 0xC0 == 0x80)
            .count();
        let tail_from = self.total - (tail.len() - skip) as u64;
        let omitted = tail_from - head.len() as u64;
        let mut s = crate::primitives::text::lossy(head).into_owned();
        s.push_str(&format!(
            "\n[... {omitted} bytes omitted (offsets {}-{tail_from}); {} bytes in total ...]\n",
            head.len(),
            self.total
        ));
        s.push_str(&crate::primitives::text::lossy(&tail[skip..]));
        (s, true, head.len() as u64)
    }
}

/// Length of the longest prefix of `b` that does not end inside a UTF-8 sequence: `b.len()`,
/// or the position of a lead byte in the last three bytes whose sequence is incomplete. Only
/// the tail is looked at (the bytes are validated, and decoded lossily, once, by the caller);
/// invalid bytes elsewhere are kept.
pub(crate) fn complete_utf8_prefix(b: &[u8]) -> usize {
    let tail_start = b.len().saturating_sub(3);
    // 0xC2..=0xF4 are the bytes that can start a multi-byte sequence (RFC 3629 §4).
    let Some(p) = b[tail_start..]
        .iter()
        .rposition(|x| matches!(x, 0xC2..=0xF4))
    else {
        return b.len();
    };
    let lead_at = tail_start + p;
    let need = match b[lead_at] {
        0xF0.. => 4,
        0xE0.. => 3,
        _ => 2,
    };
    if b.len() - lead_at < need {
        lead_at
    } else {
        b.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complete_utf8_prefix_cuts_only_an_unfinished_last_sequence() {
        let euro = "\u{20ac}".as_bytes(); // 3 bytes
        let face = "\u{1f600}".as_bytes(); // 4 bytes
        for (bytes, want) in [
            (&b""[..], 0),
            (b"abc", 3),
            ("a\u{e9}".as_bytes(), 3),
            (&b"a\xC3"[..], 1),
            (&[b'a', euro[0], euro[1]][..], 1),
            (euro, 3),
            (&face[..3], 0),
            (&face[..2], 0),
            (face, 4),
            // An invalid byte earlier is kept (decoded lossily later); only the tail counts.
            (&b"\xFFa\xC3"[..], 2),
            (&b"\xFFab"[..], 3),
        ] {
            assert_eq!(complete_utf8_prefix(bytes), want, "{bytes:?}");
        }
    }

    #[test]
    fn window_drops_oldest_and_reports_it() {
        let mut b = StreamBuf::new(4, 8);
        b.push(b"0123456789");
        b.push(b"abc");
        assert_eq!(b.total(), 13);
        assert_eq!(b.window_start(), 5);
        // Offsets in the head come from it; past it, the window, with the gap counted.
        assert_eq!(b.read(0, 100, true), (0, b"0123".to_vec(), 0));
        let (start, bytes, dropped) = b.read(4, 100, true);
        assert_eq!((start, dropped), (5, 1));
        assert_eq!(bytes, b"56789abc");
        let (start, bytes, dropped) = b.read(11, 100, true);
        assert_eq!((start, bytes.as_slice(), dropped), (11, &b"bc"[..], 0));
        let (start, bytes, _) = b.read(13, 100, false);
        assert_eq!((start, bytes.len()), (13, 0));
    }

    #[test]
    fn head_and_tail_marks_the_gap() {
        let mut b = StreamBuf::new(10, 100);
        for i in 0..100 {
            b.push(format!("{i:03}\n").as_bytes());
        }
        let (s, cut, head) = b.head_and_tail(20);
        assert!(cut);
        assert_eq!(head, 10);
        assert!(s.starts_with("000\n001\n00"), "{s}");
        assert!(s.ends_with("098\n099\n"), "{s}");
        assert!(
            s.contains("bytes omitted (offsets 10-390); 400 bytes in total"),
            "{s}"
        );
        let mut small = StreamBuf::new(10, 100);
        small.push(b"hello\n");
        assert_eq!(small.head_and_tail(20), ("hello\n".to_owned(), false, 6));
    }

    #[test]
    fn the_head_then_one_gap_then_the_window_cover_the_output() {
        let mut b = StreamBuf::new(4, 8);
        b.push(b"0123456789abcdefghij");
        assert_eq!(b.read(0, 100, true), (0, b"0123".to_vec(), 0));
        let (start, bytes, dropped) = b.read(4, 100, true);
        assert_eq!(
            (start, bytes.as_slice(), dropped),
            (12, &b"cdefghij"[..], 8)
        );
        assert_eq!(b.read(2, 1, true), (2, b"2".to_vec(), 0));
    }

    #[test]
    fn reads_never_split_a_character_unless_at_eof() {
        let mut b = StreamBuf::new(16, 64);
        b.push("é".as_bytes());
        b.push(&"€".as_bytes()[..2]);
        let (_, bytes, _) = b.read(0, 100, false);
        assert_eq!(bytes, "é".as_bytes());
        let (_, bytes, _) = b.read(0, 100, true);
        assert_eq!(bytes.len(), 4);
    }

    #[test]
    fn last_line_tracks_the_newest_line() {
        let mut b = StreamBuf::new(16, 64);
        b.push(b"one\ntwo\n");
        assert_eq!(b.last_line(), "two");
        b.push(b"thr");
        b.push(b"ee");
        assert_eq!(b.last_line(), "three");
    }
}
