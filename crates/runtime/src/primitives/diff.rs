//! Unified diffs of a change, bounded in time and size (via the `similar` crate).
//!
//! Lines are split at LF, CRLF and a lone CR (old Mac endings), as `similar` splits them; every
//! line of the diff text ends in LF, so a line that ends in a lone CR is written with CR LF (its
//! CR still shows) and a last line without a break gets git's `\ No newline at end of file`.

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
    cut(
        render(&diff, &format!("a/{path}"), &format!("b/{path}")),
        max_bytes,
    )
}

/// A diff of a file being created (`/dev/null` → `b/{path}`).
pub(crate) fn created(path: &str, new: &str, max_bytes: usize) -> String {
    let diff = TextDiff::configure()
        .timeout(DIFF_TIMEOUT)
        .diff_lines("", new);
    cut(render(&diff, "/dev/null", &format!("b/{path}")), max_bytes)
}

/// The unified diff text (3 lines of context) with every line ended by LF (module docs).
/// `similar`'s own writer ends a line only with the line's own break, so lone-CR lines ran
/// together into one line for every reader that splits at LF.
fn render<'a>(diff: &'a TextDiff<'a, 'a, 'a, str>, old_header: &str, new_header: &str) -> String {
    let mut out = String::new();
    let mut unified = diff.unified_diff();
    unified.context_radius(3);
    for (i, hunk) in unified.iter_hunks().enumerate() {
        if i == 0 {
            out.push_str(&format!("--- {old_header}\n+++ {new_header}\n"));
        }
        out.push_str(&format!("{}\n", hunk.header()));
        for change in hunk.iter_changes() {
            out.push_str(match change.tag() {
                similar::ChangeTag::Equal => " ",
                similar::ChangeTag::Delete => "-",
                similar::ChangeTag::Insert => "+",
            });
            let line = change.value();
            out.push_str(line);
            if line.ends_with('\r') {
                out.push('\n');
            } else if !line.ends_with('\n') {
                out.push_str("\n\\ No newline at end of file\n");
            }
        }
    }
    out
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
            crate::limits::EDIT_DIFF_MAX_BYTES
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
    fn lone_cr_lines_end_their_diff_lines_and_the_rest_is_as_similar_writes_it() {
        let d = unified("m", "a\rb\rc\r", "a\rB\rc\r", 1 << 16);
        assert_eq!(
            d,
            "--- a/m\n+++ b/m\n@@ -1,3 +1,3 @@\n a\r\n-b\r\n+B\r\n c\r\n"
        );
        for (old, new) in [
            ("a\nb\nc\n", "a\nB\nc"),
            ("x\r\ny\r\n", "x\r\nz\r\n"),
            ("", "n\n"),
        ] {
            let ours = unified("f", old, new, 1 << 16);
            let theirs = TextDiff::from_lines(old, new)
                .unified_diff()
                .context_radius(3)
                .header("a/f", "b/f")
                .to_string();
            assert_eq!(ours, theirs);
        }
    }

    #[test]
    fn long_diffs_are_cut_with_a_marker() {
        let old: String = (0..1000).map(|i| format!("{i}\n")).collect();
        let d = unified("f", &old, "", 100);
        assert!(d.len() < 160);
        assert!(d.contains("diff truncated"));
    }
}
