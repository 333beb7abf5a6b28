//! The `*** Begin Patch` envelope: parsing it and applying its hunks to text.
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
//! surrounding whitespace. Untouched lines keep their own line endings; added lines get the file's
//! dominant one. Filesystem effects live in `tools::patch`.

use crate::text::{EolCounts, UTF8_BOM};

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
    /// What was not found.
    pub(crate) message: String,
}

/// Applies `hunks` to a file's text (BOM allowed) and returns the new text.
///
/// # Errors
/// [`HunkError`] naming the first hunk whose anchor or lines were not found.
pub(crate) fn apply_hunks(original: &str, hunks: &[Hunk]) -> Result<String, HunkError> {
    let (bom, body) = match original.strip_prefix('\u{feff}') {
        Some(rest) => (true, rest),
        None => (false, original),
    };
    debug_assert_eq!(UTF8_BOM, "\u{feff}".as_bytes());
    let dominant = EolCounts::of(body.as_bytes()).dominant();
    let mut lines: Vec<(String, String)> = split_lines(body);
    let mut cursor = 0usize;
    for (n, hunk) in hunks.iter().enumerate() {
        let number = n + 1;
        let fail = |message: String| HunkError {
            hunk: number,
            message,
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
        let pos = if old.is_empty() {
            if hunk.end_of_file || hunk.anchor.is_empty() {
                lines.len()
            } else {
                from + 1
            }
        } else {
            find_block(&lines, from, &old, hunk.end_of_file).ok_or_else(|| {
                let preview: Vec<&str> = old.iter().take(3).copied().collect();
                fail(format!(
                    "these lines were not found{}: {:?}",
                    if hunk.end_of_file {
                        " at the end of the file"
                    } else {
                        ""
                    },
                    preview
                ))
            })?
        };
        let mut replacement: Vec<(String, String)> = Vec::new();
        let mut k = pos;
        for l in &hunk.lines {
            match l {
                HunkLine::Context(_) => {
                    replacement.push(lines[k].clone());
                    k += 1;
                }
                HunkLine::Remove(_) => k += 1,
                HunkLine::Add(t) => replacement.push((t.clone(), dominant.to_owned())),
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
    for (i, (text, eol)) in lines.iter().enumerate() {
        out.push_str(text);
        if eol.is_empty() && i + 1 < count {
            out.push_str(dominant);
        } else {
            out.push_str(eol);
        }
    }
    Ok(out)
}

/// Splits text into (line, line ending) pairs; the last line may have an empty ending.
fn split_lines(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        match rest.find('\n') {
            Some(i) => {
                let (line, eol) = if i > 0 && rest.as_bytes()[i - 1] == b'\r' {
                    (&rest[..i - 1], "\r\n")
                } else {
                    (&rest[..i], "\n")
                };
                out.push((line.to_owned(), eol.to_owned()));
                rest = &rest[i + 1..];
            }
            None => {
                out.push((rest.to_owned(), String::new()));
                rest = "";
            }
        }
    }
    out
}

fn find_anchor(lines: &[(String, String)], from: usize, anchor: &str) -> Option<usize> {
    let a = anchor.trim();
    let tail = lines.get(from..)?;
    tail.iter()
        .position(|(l, _)| l.trim() == a)
        .or_else(|| tail.iter().position(|(l, _)| l.contains(a)))
        .map(|p| p + from)
}

fn find_block(lines: &[(String, String)], from: usize, old: &[&str], eof: bool) -> Option<usize> {
    type Cmp = fn(&str, &str) -> bool;
    let passes: [Cmp; 3] = [
        |a, b| a == b,
        |a, b| a.trim_end() == b.trim_end(),
        |a, b| a.trim() == b.trim(),
    ];
    if old.len() > lines.len() {
        return None;
    }
    let last_start = lines.len() - old.len();
    let matches_at =
        |p: usize, cmp: Cmp| old.iter().enumerate().all(|(j, o)| cmp(&lines[p + j].0, o));
    for cmp in passes {
        if eof {
            if last_start >= from && matches_at(last_start, cmp) {
                return Some(last_start);
            }
            continue;
        }
        if let Some(p) = (from..=last_start).find(|&p| matches_at(p, cmp)) {
            return Some(p);
        }
    }
    // Hunks given out of order: accept a match before the cursor only when it is unique.
    for cmp in passes {
        let all: Vec<usize> = (0..from.min(last_start + 1))
            .filter(|&p| matches_at(p, cmp))
            .collect();
        if all.len() == 1 {
            return Some(all[0]);
        }
    }
    None
}

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
    fn appending_after_a_last_line_without_newline() {
        let h = hunks("*** Begin Patch\n*** Update File: f\n@@\n b\n+c\n*** End Patch");
        assert_eq!(apply_hunks("a\nb", &h).unwrap(), "a\nb\nc\n");
    }
}
