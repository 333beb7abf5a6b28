//! Unified diffs of a change, bounded in time and size (via the `similar` crate).

use std::time::Duration;

use similar::TextDiff;

/// Longest time spent computing one diff; past it `similar` returns a coarser (still correct) diff.
const DIFF_TIMEOUT: Duration = Duration::from_secs(2);

/// A unified diff (3 lines of context) from `old` to `new`, headed `a/{path}` / `b/{path}`, cut at
/// `max_bytes` with a final `... diff truncated (N bytes total)` line. Empty when equal.
pub(crate) fn unified(path: &str, old: &str, new: &str, max_bytes: usize) -> String {
    let diff = TextDiff::configure()
        .timeout(DIFF_TIMEOUT)
        .diff_lines(old, new);
    let text = diff
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{path}"), &format!("b/{path}"))
        .to_string();
    cut(text, max_bytes)
}

/// A diff of a file being created (`/dev/null` → `b/{path}`).
pub(crate) fn created(path: &str, new: &str, max_bytes: usize) -> String {
    let diff = TextDiff::configure()
        .timeout(DIFF_TIMEOUT)
        .diff_lines("", new);
    let text = diff
        .unified_diff()
        .context_radius(3)
        .header("/dev/null", &format!("b/{path}"))
        .to_string();
    cut(text, max_bytes)
}

/// Cuts `text` to at most `max_bytes` on a char boundary and says so with its total size.
pub(crate) fn cut(text: String, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text;
    }
    let note = format!("... diff truncated ({} bytes total)\n", text.len());
    cut_with(text, max_bytes, &note)
}

/// How a summary announces `diff`: "the diff follows", and when [`cut`] cut it, how much of
/// it (there is no continuation: the change itself is in the file, `read_file` or `git_diff`
/// show it whole).
pub(crate) fn follows(diff: &str) -> String {
    let total = diff
        .rsplit_once("... diff truncated (")
        .and_then(|(_, t)| t.strip_suffix(" bytes total)\n"))
        .and_then(|n| n.parse::<usize>().ok());
    match total {
        Some(n) => format!(
            "the diff follows, cut to its first {} of {n} bytes (the file has the rest)",
            protocol::limits::EDIT_DIFF_MAX_BYTES
        ),
        None => "the diff follows".to_owned(),
    }
}

fn cut_with(text: String, max_bytes: usize, note: &str) -> String {
    let mut end = max_bytes.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = text[..end].to_owned();
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(note);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unified_diff_has_headers_and_hunks() {
        let d = unified("f.txt", "a\nb\nc\n", "a\nB\nc\n", 1 << 16);
        assert!(d.starts_with("--- a/f.txt\n+++ b/f.txt\n@@"), "{d}");
        assert!(d.contains("-b\n+B\n"), "{d}");
    }

    #[test]
    fn long_diffs_are_cut_with_a_marker() {
        let old: String = (0..1000).map(|i| format!("{i}\n")).collect();
        let d = unified("f", &old, "", 100);
        assert!(d.len() < 160);
        assert!(d.contains("diff truncated"));
    }
}
