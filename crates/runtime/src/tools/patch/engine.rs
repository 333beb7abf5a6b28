//! The engine of `apply_patch`: the `*** Begin Patch` envelope, parsing it and applying its hunks
//! to text.
//!
//! Grammar (one item per line):
//!
//! ```text
//! *** Begin Patch
//! *** Add File: PATH        followed by "+line" lines (the new file)
//! *** Delete File: PATH
//! *** Update File: PATH     optionally followed by "*** Move to: PATH", then hunks:
//! @@ [anchor]               starts a hunk (may be omitted before the first hunk)
//!  context / -removed / +added lines; an empty line counts as empty context
//! *** End of File           optional: the hunk must match at the end of the file
//! *** End Patch
//! ```
//!
//! A hunk's context and removed lines are looked for after the previous hunk (after its anchor
//! line when one is given): first exactly, then ignoring trailing whitespace, then ignoring
//! surrounding whitespace; the first comparison that matches must match once, else the hunk is
//! ambiguous. Lines are `edit_file`'s and the diffs' ([`crate::primitives::text::lines`]: a line
//! ends at `\r\n`, `\n` or a lone `\r`), and the result is byte-exact as `edit_file`'s: the BOM
//! and untouched lines are kept, each with its own line ending; added lines take the ending of the
//! lines they replace; a file without a final line break keeps having none. Filesystem effects live in [`super`] (`tools::patch`).

use crate::{
    primitives::text::{self, EolCounts, UTF8_BOM},
    tools::edit::engine::MAX_REPORTED_LINES,
};

/// One file operation of a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FileOp {
    /// Create `path` with `lines` (each ends with a newline in the file).
    Add { path: String, lines: Vec<String> },
    /// Delete `path`.
    Delete { path: String },
    /// Change `path` by `hunks`, optionally moving it to `move_to`.
    Update {
        path: String,
        move_to: Option<String>,
        hunks: Vec<Hunk>,
    },
}

impl FileOp {
    /// The path the operation names first.
    pub(crate) fn path(&self) -> &str {
        match self {
            FileOp::Add { path, .. } | FileOp::Delete { path } | FileOp::Update { path, .. } => {
                path
            }
        }
    }
}

/// One `@@` hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hunk {
    /// Text after `@@`, trimmed; empty when none.
    pub(crate) anchor: String,
    /// The hunk's lines in order.
    pub(crate) lines: Vec<HunkLine>,
    /// `*** End of File` followed the hunk.
    pub(crate) end_of_file: bool,
}

/// One line of a hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HunkLine {
    /// ` text`: must be present, is kept.
    Context(String),
    /// `-text`: must be present, is removed.
    Remove(String),
    /// `+text`: is inserted.
    Add(String),
}

/// A syntax error at a 1-based line of the patch text.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ParseError {
    pub(crate) line: usize,
    pub(crate) message: String,
}

const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";
const ADD: &str = "*** Add File: ";
const DELETE: &str = "*** Delete File: ";
const UPDATE: &str = "*** Update File: ";
const MOVE: &str = "*** Move to: ";
const EOF_MARK: &str = "*** End of File";

/// Parses a whole patch.
///
/// # Errors
/// [`ParseError`] for a missing envelope, an unknown `***` line, a non-`+` line in an added file,
/// an update with no hunks, or a path given twice.
pub(crate) fn parse(text: &str) -> Result<Vec<FileOp>, ParseError> {
    let lines: Vec<&str> = text.lines().collect();
    let err = |line: usize, message: String| ParseError { line, message };
    let first = lines
        .iter()
        .position(|l| !l.trim().is_empty())
        .ok_or_else(|| err(1, "the patch is empty".into()))?;
    let last = lines
        .iter()
        .rposition(|l| !l.trim().is_empty())
        .unwrap_or(first);
    if lines[first].trim() != BEGIN {
        return Err(err(
            first + 1,
            format!("the patch must start with {BEGIN:?}"),
        ));
    }
    if last == first || lines[last].trim() != END {
        return Err(err(last + 1, format!("the patch must end with {END:?}")));
    }
    let body = &lines[first + 1..last];
    let at = |i: usize| first + 2 + i; // 1-based line number of body[i]
    let mut ops: Vec<FileOp> = Vec::new();
    let mut i = 0;
    while i < body.len() {
        let line = body[i];
        if let Some(path) = line.strip_prefix(ADD) {
            let path = clean_path(path, at(i))?;
            i += 1;
            let mut added = Vec::new();
            while i < body.len() && !body[i].starts_with("*** ") {
                match body[i].strip_prefix('+') {
                    Some(rest) => added.push(rest.to_owned()),
                    None => {
                        return Err(err(
                            at(i),
                            format!("Add File {path}: every line must start with '+'"),
                        ));
                    }
                }
                i += 1;
            }
            ops.push(FileOp::Add { path, lines: added });
        } else if let Some(path) = line.strip_prefix(DELETE) {
            ops.push(FileOp::Delete {
                path: clean_path(path, at(i))?,
            });
            i += 1;
        } else if let Some(path) = line.strip_prefix(UPDATE) {
            let path = clean_path(path, at(i))?;
            let start = at(i);
            i += 1;
            let mut move_to = None;
            if i < body.len()
                && let Some(dest) = body[i].strip_prefix(MOVE)
            {
                move_to = Some(clean_path(dest, at(i))?);
                i += 1;
            }
            let mut hunks: Vec<Hunk> = Vec::new();
            while i < body.len() {
                let l = body[i];
                if l.trim_end() == EOF_MARK {
                    match hunks.last_mut() {
                        Some(h) => h.end_of_file = true,
                        None => return Err(err(at(i), format!("{EOF_MARK:?} before any hunk"))),
                    }
                    i += 1;
                    continue;
                }
                if l.starts_with("*** ") {
                    break;
                }
                if let Some(anchor) = l.strip_prefix("@@") {
                    hunks.push(Hunk {
                        anchor: anchor.trim().trim_end_matches("@@").trim().to_owned(),
                        lines: Vec::new(),
                        end_of_file: false,
                    });
                    i += 1;
                    continue;
                }
                let hl = match l.chars().next() {
                    Some(' ') => HunkLine::Context(l[1..].to_owned()),
                    Some('-') => HunkLine::Remove(l[1..].to_owned()),
                    Some('+') => HunkLine::Add(l[1..].to_owned()),
                    None => HunkLine::Context(String::new()),
                    Some(_) => {
                        return Err(err(
                            at(i),
                            format!(
                                "Update File {path}: a hunk line must start with ' ', '-' or '+' (got {:?})",
                                truncate(l, 60)
                            ),
                        ));
                    }
                };
                if hunks.is_empty() || hunks.last().is_some_and(|h| h.end_of_file) {
                    hunks.push(Hunk {
                        anchor: String::new(),
                        lines: Vec::new(),
                        end_of_file: false,
                    });
                }
                if let Some(h) = hunks.last_mut() {
                    h.lines.push(hl);
                }
                i += 1;
            }
            if let Some(pos) = hunks.iter().position(|h| h.lines.is_empty()) {
                return Err(err(
                    start,
                    format!("Update File {path}: hunk {} has no lines", pos + 1),
                ));
            }
            if hunks.is_empty() && move_to.is_none() {
                return Err(err(start, format!("Update File {path}: no hunks")));
            }
            ops.push(FileOp::Update {
                path,
                move_to,
                hunks,
            });
        } else if line.trim().is_empty() {
            i += 1;
        } else {
            return Err(err(
                at(i),
                format!(
                    "expected '*** Add File: ', '*** Delete File: ' or '*** Update File: ', got {:?}",
                    truncate(line, 60)
                ),
            ));
        }
    }
    if ops.is_empty() {
        return Err(err(first + 1, "the patch has no file operations".into()));
    }
    Ok(ops)
}

fn clean_path(raw: &str, line: usize) -> Result<String, ParseError> {
    let p = raw.trim();
    if p.is_empty() {
        return Err(ParseError {
            line,
            message: "missing path".into(),
        });
    }
    Ok(p.to_owned())
}

fn truncate(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Why a hunk did not apply.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct HunkError {
    /// 1-based hunk number within its file.
    pub(crate) hunk: usize,
    /// What was not found, or why the match is ambiguous.
    pub(crate) message: String,
    /// For an ambiguous hunk: how many times its lines match; 0 otherwise.
    pub(crate) matches: usize,
    /// For an ambiguous hunk: the 1-based lines of the original file where its matches start
    /// (at most [`MAX_REPORTED_LINES`]); empty otherwise.
    pub(crate) candidates: Vec<usize>,
}

/// Applies `hunks` to a file's text (BOM allowed) and returns the new text.
///
/// Byte exactness, as `edit_file` keeps it: the BOM and every untouched line (its ending included)
/// are copied as they are; added lines take the line ending of the lines they replace (their
/// majority, LF on a tie), else of the line before them, else of the line after, else the file's
/// dominant one; a file without a final newline still has none.
///
/// # Errors
/// [`HunkError`] naming the first hunk whose anchor or lines were not found, or whose lines match
/// more than once after the previous hunk (after its anchor line when it has one); then
/// `candidates` holds the 1-based lines of the original file where the matches start.
pub(crate) fn apply_hunks(original: &str, hunks: &[Hunk]) -> Result<String, HunkError> {
    let (bom, body) = match original.strip_prefix('\u{feff}') {
        Some(rest) => (true, rest),
        None => (false, original),
    };
    debug_assert_eq!(UTF8_BOM, "\u{feff}".as_bytes());
    let dominant = EolCounts::of(body.as_bytes()).dominant();
    let final_newline = body.is_empty() || body.ends_with(['\n', '\r']);
    let mut lines = split_lines(body);
    let past_end = lines.len() + 1;
    let mut cursor = 0usize;
    for (n, hunk) in hunks.iter().enumerate() {
        let number = n + 1;
        let fail = |message: String| HunkError {
            hunk: number,
            message,
            matches: 0,
            candidates: Vec::new(),
        };
        let mut from = cursor;
        if !hunk.anchor.is_empty() {
            let found = find_anchor(&lines, cursor, &hunk.anchor)
                .ok_or_else(|| fail(format!("anchor line {:?} not found", hunk.anchor)))?;
            from = found;
        }
        let old: Vec<&str> = hunk
            .lines
            .iter()
            .filter_map(|l| match l {
                HunkLine::Context(t) | HunkLine::Remove(t) => Some(t.as_str()),
                HunkLine::Add(_) => None,
            })
            .collect();
        let preview = || format!("{:?}", old.iter().take(3).collect::<Vec<_>>());
        let pos = if old.is_empty() {
            if hunk.end_of_file || hunk.anchor.is_empty() {
                lines.len()
            } else {
                from + 1
            }
        } else {
            match find_block(
                &lines,
                from,
                &old,
                hunk.end_of_file,
                !hunk.anchor.is_empty(),
            ) {
                Block::At(p) => p,
                Block::NotFound => {
                    return Err(fail(format!(
                        "these lines were not found{}: {}",
                        if hunk.end_of_file {
                            " at the end of the file"
                        } else {
                            ""
                        },
                        preview()
                    )));
                }
                Block::Ambiguous(all) => {
                    let candidates: Vec<usize> = all
                        .iter()
                        .take(MAX_REPORTED_LINES)
                        .map(|&p| lines[p].origin)
                        .collect();
                    let after = if !hunk.anchor.is_empty() {
                        "its anchor line"
                    } else if n > 0 {
                        "the previous hunk"
                    } else {
                        "the start of the file"
                    };
                    return Err(HunkError {
                        hunk: number,
                        message: format!(
                            "these lines match {} times after {after} (lines {}): {}; add context lines to make the match unique",
                            all.len(),
                            candidates
                                .iter()
                                .map(ToString::to_string)
                                .collect::<Vec<_>>()
                                .join(", "),
                            preview()
                        ),
                        matches: all.len(),
                        candidates,
                    });
                }
            }
        };
        let mut replacement: Vec<Line> = Vec::new();
        let mut k = pos;
        let mut eol = dominant;
        for (i, l) in hunk.lines.iter().enumerate() {
            let starts_group = !matches!(l, HunkLine::Context(_))
                && (i == 0 || matches!(hunk.lines[i - 1], HunkLine::Context(_)));
            if starts_group {
                let removed = hunk.lines[i..]
                    .iter()
                    .take_while(|l| !matches!(l, HunkLine::Context(_)))
                    .filter(|l| matches!(l, HunkLine::Remove(_)))
                    .count();
                eol = added_eol(&lines, k, removed, dominant);
            }
            match l {
                HunkLine::Context(_) => {
                    replacement.push(lines[k].clone());
                    k += 1;
                }
                HunkLine::Remove(_) => k += 1,
                HunkLine::Add(t) => replacement.push(Line {
                    text: t.clone(),
                    eol,
                    origin: lines.get(k).map_or(past_end, |l| l.origin),
                }),
            }
        }
        let added = replacement.len();
        lines.splice(pos..pos + old.len(), replacement);
        cursor = pos + added;
    }
    let count = lines.len();
    let mut out = String::with_capacity(original.len() + 64);
    if bom {
        out.push('\u{feff}');
    }
    for (i, line) in lines.iter().enumerate() {
        out.push_str(&line.text);
        let eol = if i + 1 == count && !final_newline {
            ""
        } else if !line.eol.is_empty() {
            line.eol
        } else {
            // The old last line, now followed by added lines: it takes their ending.
            lines
                .get(i + 1)
                .map(|l| l.eol)
                .filter(|e| !e.is_empty())
                .unwrap_or(dominant)
        };
        out.push_str(eol);
    }
    Ok(out)
}

/// One line of the file being patched.
#[derive(Debug, Clone)]
struct Line {
    text: String,
    /// `"\r\n"`, `"\n"`, `"\r"`, or `""` for a last line without a line break.
    eol: &'static str,
    /// 1-based line in the original file; for an added line, the line it was inserted before.
    origin: usize,
}

/// Splits text into lines in the rewriting tools' line model ([`text::lines`]: `\r\n`, `\n`
/// or a lone `\r`); the last line may have an empty ending.
fn split_lines(body: &str) -> Vec<Line> {
    text::lines(body)
        .enumerate()
        .map(|(i, (line, eol))| Line {
            text: line.to_owned(),
            eol,
            origin: i + 1,
        })
        .collect()
}

/// The ending for lines added in place of `lines[at..at + removed]`: that span's majority (LF on
/// a tie, as `edit_file`), else the ending of the line before, else of the line after, else the
/// file's `dominant` one.
fn added_eol(lines: &[Line], at: usize, removed: usize, dominant: &'static str) -> &'static str {
    let mut span = EolCounts::default();
    for l in &lines[at..at + removed] {
        match l.eol {
            "\r\n" => span.crlf += 1,
            "\n" => span.lf += 1,
            "\r" => span.cr += 1,
            _ => {}
        }
    }
    if span.lf + span.crlf + span.cr > 0 {
        return span.dominant();
    }
    let before = at.checked_sub(1).map(|i| lines[i].eol);
    let after = lines.get(at + removed).map(|l| l.eol);
    before
        .filter(|e| !e.is_empty())
        .or(after.filter(|e| !e.is_empty()))
        .unwrap_or(dominant)
}

fn find_anchor(lines: &[Line], from: usize, anchor: &str) -> Option<usize> {
    let a = anchor.trim();
    let tail = lines.get(from..)?;
    tail.iter()
        .position(|l| l.text.trim() == a)
        .or_else(|| tail.iter().position(|l| l.text.contains(a)))
        .map(|p| p + from)
}

/// Where a hunk's context and removed lines are.
#[derive(Debug, PartialEq, Eq)]
enum Block {
    At(usize),
    /// Every start (0-based index) of the first comparison that matched more than once.
    Ambiguous(Vec<usize>),
    NotFound,
}

/// Where `old` is in `lines` at or after `from`: the only match of the strictest comparison that
/// finds one, or [`Block::Ambiguous`]; `anchored`: the hunk named an `@@` anchor line, which
/// already says where it is, so the first match after the anchor is taken (as patch tools that
/// write this format expect: a short context such as a closing brace recurs further down).
fn find_block(lines: &[Line], from: usize, old: &[&str], eof: bool, anchored: bool) -> Block {
    type Cmp = fn(&str, &str) -> bool;
    let passes: [Cmp; 3] = [
        |a, b| a == b,
        |a, b| a.trim_end() == b.trim_end(),
        |a, b| a.trim() == b.trim(),
    ];
    if old.len() > lines.len() {
        return Block::NotFound;
    }
    let last_start = lines.len() - old.len();
    let matches_at = |p: usize, cmp: Cmp| {
        old.iter()
            .enumerate()
            .all(|(j, o)| cmp(&lines[p + j].text, o))
    };
    for cmp in passes {
        if eof {
            if last_start >= from && matches_at(last_start, cmp) {
                return Block::At(last_start);
            }
            continue;
        }
        // Picking the first of several matches could patch the wrong place.
        let all: Vec<usize> = (from..=last_start)
            .filter(|&p| matches_at(p, cmp))
            .collect();
        match all.len() {
            0 => {}
            1 => return Block::At(all[0]),
            _ if anchored => return Block::At(all[0]),
            _ => return Block::Ambiguous(all),
        }
    }
    // Hunks given out of order: accept a match before the cursor only when it is unique.
    for cmp in passes {
        let all: Vec<usize> = (0..from.min(last_start + 1))
            .filter(|&p| matches_at(p, cmp))
            .collect();
        if all.len() == 1 {
            return Block::At(all[0]);
        }
    }
    Block::NotFound
}

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;

    fn hunks(patch: &str) -> Vec<Hunk> {
        match parse(patch).unwrap().remove(0) {
            FileOp::Update { hunks, .. } => hunks,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn parses_every_operation() {
        let ops = parse(
            "*** Begin Patch\n*** Add File: a.txt\n+one\n+two\n*** Delete File: b.txt\n\
             *** Update File: c.txt\n*** Move to: d.txt\n@@ fn main\n ctx\n-old\n+new\n\
             *** End of File\n*** End Patch\n",
        )
        .unwrap();
        assert_eq!(ops.len(), 3);
        assert_eq!(
            ops[0],
            FileOp::Add {
                path: "a.txt".into(),
                lines: vec!["one".into(), "two".into()]
            }
        );
        assert_eq!(
            ops[1],
            FileOp::Delete {
                path: "b.txt".into()
            }
        );
        let FileOp::Update { move_to, hunks, .. } = &ops[2] else {
            panic!()
        };
        assert_eq!(move_to.as_deref(), Some("d.txt"));
        assert_eq!(hunks[0].anchor, "fn main");
        assert!(hunks[0].end_of_file);
    }

    #[test]
    fn parse_errors_name_the_line() {
        let e = parse("*** Begin Patch\n*** Frob File: x\n*** End Patch").unwrap_err();
        assert_eq!(e.line, 2);
        let e = parse("*** Begin Patch\n*** Add File: x\nno plus\n*** End Patch").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(parse("*** Add File: x\n+a\n").is_err());
        assert!(parse("*** Begin Patch\n*** Add File: x\n+a\n").is_err());
    }

    #[test]
    fn applies_hunks_keeping_crlf_and_bom() {
        let h =
            hunks("*** Begin Patch\n*** Update File: f\n@@\n a\n-b\n+B\n+B2\n c\n*** End Patch");
        let out = apply_hunks("\u{feff}a\r\nb\r\nc\r\nd", &h).unwrap();
        assert_eq!(out, "\u{feff}a\r\nB\r\nB2\r\nc\r\nd");
    }

    #[test]
    fn anchors_and_whitespace_tolerance() {
        let h = hunks(
            "*** Begin Patch\n*** Update File: f\n@@ fn two()\n-    x = 1;  \n+    x = 2;\n*** End Patch",
        );
        let src = "fn one() {\n    x = 1;\n}\nfn two() {\n    x = 1;\n}\n";
        let out = apply_hunks(src, &h).unwrap();
        assert_eq!(
            out,
            "fn one() {\n    x = 1;\n}\nfn two() {\n    x = 2;\n}\n"
        );
    }

    #[test]
    fn a_missing_hunk_is_named() {
        let h =
            hunks("*** Begin Patch\n*** Update File: f\n@@\n-a\n+A\n@@\n-zzz\n+y\n*** End Patch");
        let e = apply_hunks("a\nb\n", &h).unwrap_err();
        assert_eq!(e.hunk, 2);
    }

    #[test]
    fn a_file_without_a_final_newline_keeps_having_none() {
        let p = |body: &str| {
            hunks(&format!(
                "*** Begin Patch\n*** Update File: f\n{body}*** End Patch"
            ))
        };
        assert_eq!(apply_hunks("a\nb", &p("@@\n b\n+c\n")).unwrap(), "a\nb\nc");
        assert_eq!(apply_hunks("a\nb", &p("@@\n-b\n+B\n")).unwrap(), "a\nB");
        assert_eq!(apply_hunks("a\nb", &p("@@\n a\n-b\n")).unwrap(), "a");
        assert_eq!(
            apply_hunks("a\r\nb", &p("@@\n-b\n+B\n+C\n")).unwrap(),
            "a\r\nB\r\nC"
        );
        // A file that ends with a newline still does.
        assert_eq!(
            apply_hunks("a\nb\n", &p("@@\n b\n+c\n")).unwrap(),
            "a\nb\nc\n"
        );
    }

    #[test]
    fn lone_cr_line_endings_are_lines_as_edit_file_and_the_diff_read_them() {
        let p = |body: &str| {
            hunks(&format!(
                "*** Begin Patch\n*** Update File: f\n{body}*** End Patch"
            ))
        };
        assert_eq!(
            apply_hunks("a\rb\rc\r", &p("@@\n a\n-b\n+B\n+B2\n c\n")).unwrap(),
            "a\rB\rB2\rc\r"
        );
        assert_eq!(
            apply_hunks("a\rb", &p("@@\n-b\n+B\n+C\n")).unwrap(),
            "a\rB\rC",
            "no final break stays none; added lines take the file's CR"
        );
        assert_eq!(
            apply_hunks("a\r\nb\rc\n", &p("@@\n-b\n+B\n c\n")).unwrap(),
            "a\r\nB\rc\n",
            "each line keeps its own ending"
        );
        let e = apply_hunks("x\rdup\rx\rdup\r", &p("@@\n-dup\n+D\n")).unwrap_err();
        assert_eq!(e.candidates, [2, 4], "lines counted at each lone CR");
    }

    #[test]
    fn each_line_keeps_its_own_ending_in_a_mixed_file() {
        let p = |body: &str| {
            hunks(&format!(
                "*** Begin Patch\n*** Update File: f\n{body}*** End Patch"
            ))
        };
        // CRLF dominant: a replaced LF line stays LF, a replaced CRLF line stays CRLF.
        let crlf = "a\r\nb\nc\r\nd\r\n";
        assert_eq!(
            apply_hunks(crlf, &p("@@\n a\n-b\n+B\n c\n-d\n+D\n")).unwrap(),
            "a\r\nB\nc\r\nD\r\n"
        );
        // A line inserted after an LF line takes LF.
        assert_eq!(
            apply_hunks(crlf, &p("@@\n b\n+b2\n c\n")).unwrap(),
            "a\r\nb\nb2\nc\r\nd\r\n"
        );
        // LF dominant: a replaced CRLF line stays CRLF.
        assert_eq!(
            apply_hunks("a\nb\r\nc\nd\n", &p("@@\n-b\n+B\n+B2\n")).unwrap(),
            "a\nB\r\nB2\r\nc\nd\n"
        );
    }

    #[test]
    fn a_bom_survives_with_mixed_endings_and_no_final_newline() {
        let h = hunks(
            "*** Begin Patch\n*** Update File: f\n@@\n one\n-two\n+TWO\n three\n-last\n+LAST\n+more\n*** End Patch",
        );
        assert_eq!(
            apply_hunks("\u{feff}one\r\ntwo\nthree\r\nlast", &h).unwrap(),
            "\u{feff}one\r\nTWO\nthree\r\nLAST\r\nmore"
        );
    }

    #[test]
    fn a_hunk_matching_twice_after_the_previous_hunk_names_the_candidate_lines() {
        let h = hunks(
            "*** Begin Patch\n*** Update File: f\n@@\n-1\n+one\n+uno\n@@\n-x\n+X\n*** End Patch",
        );
        let e = apply_hunks("x\n1\nx\n2\nx\n", &h).unwrap_err();
        assert_eq!(e.hunk, 2);
        // Lines of the original file; line 1 is before the previous hunk and is no candidate.
        assert_eq!(e.candidates, vec![3, 5]);
        assert!(e.message.contains("lines 3, 5"), "{}", e.message);
        // After an anchor, only the lines after it count, and the first match after it is taken.
        let h = hunks("*** Begin Patch\n*** Update File: f\n@@ 2\n-x\n+X\n*** End Patch");
        assert_eq!(
            apply_hunks("x\n1\nx\n2\nx\n", &h).unwrap(),
            "x\n1\nx\n2\nX\n"
        );
        let h = hunks("*** Begin Patch\n*** Update File: f\n@@ 1\n-x\n+X\n*** End Patch");
        assert_eq!(
            apply_hunks("x\n1\nx\n2\nx\n", &h).unwrap(),
            "x\n1\nX\n2\nx\n"
        );
        // An exact match is unique even when a looser comparison would match twice.
        let h = hunks("*** Begin Patch\n*** Update File: f\n@@\n-x\n+X\n*** End Patch");
        assert_eq!(apply_hunks("x \nx\n", &h).unwrap(), "x \nX\n");
    }
}
