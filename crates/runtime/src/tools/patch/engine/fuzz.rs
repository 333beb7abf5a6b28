//! Fuzz targets for the `*** Begin Patch` parser and hunk application (bolero: random inputs
//! under `cargo test`, coverage-guided under `cargo bolero test`; see CONTRIBUTING.md "Fuzzing").
//!
//! Inputs are built from a small vocabulary of patch lines and file lines, so the random engine
//! reaches well-formed patches, repeated lines (ambiguous hunks) and whitespace variants instead
//! of spending its budget on text the parser rejects at its first line.

use std::time::Duration;

use super::{FileOp, Hunk, HunkLine, apply_hunks, parse};

/// Time each target gets in the test suite (unless `BOLERO_RANDOM_TEST_TIME_MS` or
/// `BOLERO_RANDOM_ITERATIONS` is set).
const SHORT_RUN: Duration = Duration::from_secs(6);

/// Lines a patch is made of: every marker of the grammar, each kind of hunk line, and lines the
/// grammar rejects.
const PATCH_LINES: [&str; 24] = [
    "*** Begin Patch",
    "*** End Patch",
    "*** Update File: f.txt",
    "*** Update File: ",
    "*** Add File: g.txt",
    "*** Delete File: h.txt",
    "*** Move to: m.txt",
    "*** End of File",
    "*** Unknown",
    "@@",
    "@@ a",
    "@@ b @@",
    "@@@@",
    " a",
    " b",
    "  a",
    " ",
    "-a",
    "-b",
    "-",
    "+a",
    "+c",
    "",
    "x",
];

/// The line breaks of the line model ([`crate::primitives::text::lines`]).
const EOLS: [&str; 3] = ["\n", "\r\n", "\r"];

/// Lines of the files patches are applied to; repeats and whitespace variants of one another.
const FILE_LINES: [&str; 7] = ["a", "b", "a ", " a", "", "\ta", "c"];

/// Text of a file line or patch line chosen by `pick`; values past the table take `extra`.
fn pick<'a>(table: &[&'a str], pick: u8, extra: &'a str) -> &'a str {
    table.get(usize::from(pick)).copied().unwrap_or(extra)
}

/// A file made of `lines` with the line endings chosen by `eols` (LF, CRLF, lone CR; the last
/// line may have none) and an optional BOM.
fn file_text(lines: &[u8], eols: &[u8], bom: bool, final_newline: bool) -> String {
    let mut text = String::new();
    if bom {
        text.push('\u{feff}');
    }
    for (i, &l) in lines.iter().enumerate() {
        text.push_str(pick(&FILE_LINES, l % 8, "a\u{e9}\u{1f600}"));
        if i + 1 < lines.len() || final_newline {
            text.push_str(EOLS[usize::from(eols.get(i).copied().unwrap_or(0) % 3)]);
        }
    }
    text
}

/// Arbitrary text and a patch built from grammar lines: `parse` never panics; `apply_hunks` of
/// anything it returns never panics, keeps a BOM, names a hunk that exists when it fails, and
/// leaves the text byte-identical when every hunk is context only.
#[test]
fn fuzz_patch_parse_and_apply_never_panic() {
    type Input = (
        String,
        Vec<u8>,
        Vec<bool>,
        String,
        (Vec<u8>, Vec<u8>, bool, bool),
    );
    bolero::check!()
        .with_type::<Input>()
        .with_test_time(SHORT_RUN)
        .for_each(|(raw, patch_lines, crlf, extra, file)| {
            let _ = parse(raw);
            let mut patch = String::new();
            for (i, &l) in patch_lines.iter().enumerate() {
                patch.push_str(pick(&PATCH_LINES, l % 26, extra));
                patch.push_str(if crlf.get(i).copied().unwrap_or(false) {
                    "\r\n"
                } else {
                    "\n"
                });
            }
            let original = file_text(&file.0, &file.1, file.2, file.3);
            for text in [
                patch.clone(),
                format!("*** Begin Patch\n{patch}*** End Patch\n"),
                format!(
                    "*** Begin Patch\n{}*** End Patch\n",
                    guided(patch_lines, extra)
                ),
            ] {
                let Ok(ops) = parse(&text) else { continue };
                assert!(
                    !ops.is_empty(),
                    "{text:?}: an accepted patch has operations"
                );
                for op in &ops {
                    let FileOp::Update { hunks, .. } = op else {
                        continue;
                    };
                    check_apply(&original, hunks);
                }
            }
        });
}

/// A patch that mostly follows the grammar: each byte starts an operation (one in eight) or adds
/// a line that fits the current one; 255 adds any line of [`PATCH_LINES`] instead.
fn guided(bytes: &[u8], extra: &str) -> String {
    const HEADERS: [&str; 4] = [
        "*** Add File: a.txt",
        "*** Delete File: d.txt",
        "*** Update File: u.txt",
        "*** Update File: v.txt\n*** Move to: w.txt",
    ];
    const ADDED: [&str; 3] = ["+a", "+c", "+"];
    const HUNK: [&str; 13] = [
        "@@",
        "@@ a",
        " a",
        " b",
        "  a",
        " ",
        "-a",
        "-b",
        "-",
        "+a",
        "+c",
        "",
        "*** End of File",
    ];
    let mut text = String::new();
    let mut current = None;
    for &b in bytes {
        let line = if b == 255 {
            pick(&PATCH_LINES, b % 26, extra)
        } else if b % 8 == 0 || current.is_none() {
            let header = usize::from(b / 8) % HEADERS.len();
            current = Some(header);
            HEADERS[header]
        } else {
            match current {
                Some(0) => ADDED[usize::from(b) % ADDED.len()],
                Some(1) => continue,
                _ => HUNK[usize::from(b) % HUNK.len()],
            }
        };
        text.push_str(line);
        text.push('\n');
    }
    text
}

fn check_apply(original: &str, hunks: &[Hunk]) {
    match apply_hunks(original, hunks) {
        Ok(result) => {
            if original.starts_with('\u{feff}') {
                assert!(result.starts_with('\u{feff}'), "{original:?}: BOM lost");
            }
            let context_only = hunks
                .iter()
                .all(|h| h.lines.iter().all(|l| matches!(l, HunkLine::Context(_))));
            if context_only {
                assert_eq!(
                    result, original,
                    "context-only hunks {hunks:?} changed the text"
                );
            }
        }
        Err(e) => {
            assert!(
                (1..=hunks.len()).contains(&e.hunk),
                "{original:?}: error names hunk {} of {}",
                e.hunk,
                hunks.len()
            );
            assert!(e.candidates.len() <= e.matches, "{e:?}");
        }
    }
}

/// An edit generated from the file itself — context before, removed lines, added lines,
/// context after, taken from one place of a file with one kind of line ending — rendered as
/// patch text: parsing the text gives back that hunk exactly, and applying it gives exactly the
/// file with that place edited (in the file's line ending, keeping BOM and a missing final
/// newline), or, when the same lines occur elsewhere too, the ambiguity error naming that place.
#[test]
fn fuzz_patch_round_trip() {
    type Input = (Vec<u8>, u8, bool, bool, (u8, u8, u8, u8), Vec<u8>);
    bolero::check!()
        .with_type::<Input>()
        .with_test_time(SHORT_RUN)
        .for_each(|(lines, eol_kind, bom, final_newline, (at, before, removed, after), added)| {
            let mut lines: Vec<&str> = lines.iter().map(|&l| pick(&FILE_LINES, l % 7, "")).collect();
            // An empty last line without a line break is no line at all.
            while !*final_newline && lines.last() == Some(&"") {
                lines.pop();
            }
            let added: Vec<String> = added
                .iter()
                .map(|&l| {
                    // Added text may look like patch syntax: the `+` prefix keeps it a line.
                    pick(&["a", "d", "", "*** End Patch", "@@ a", " -x"], l % 6, "").to_owned()
                })
                .collect();
            let n = lines.len();
            let start = usize::from(*at) % (n + 1);
            let before = usize::from(*before % 3).min(n - start);
            let removed = usize::from(*removed % 4).min(n - start - before);
            let after = usize::from(*after % 3).min(n - start - before - removed);
            let mut hunk_lines: Vec<HunkLine> = Vec::new();
            let kept_end = start + before;
            let removed_end = kept_end + removed;
            hunk_lines.extend(lines[start..kept_end].iter().map(|l| HunkLine::Context((*l).into())));
            hunk_lines.extend(
                lines[kept_end..removed_end]
                    .iter()
                    .map(|l| HunkLine::Remove((*l).into())),
            );
            hunk_lines.extend(added.iter().map(|l| HunkLine::Add(l.clone())));
            hunk_lines.extend(
                lines[removed_end..removed_end + after]
                    .iter()
                    .map(|l| HunkLine::Context((*l).into())),
            );
            if hunk_lines.is_empty() {
                return; // the grammar has no empty hunk
            }
            // A hunk without context or removed lines appends at the end of the file.
            let (kept_end, removed_end) = if before + removed + after == 0 {
                (n, n)
            } else {
                (kept_end, removed_end)
            };
            let hunk = Hunk {
                anchor: String::new(),
                lines: hunk_lines,
                end_of_file: false,
            };

            let mut patch = String::from("*** Begin Patch\n*** Update File: f.txt\n@@\n");
            for l in &hunk.lines {
                let (sign, t) = match l {
                    HunkLine::Context(t) => (' ', t),
                    HunkLine::Remove(t) => ('-', t),
                    HunkLine::Add(t) => ('+', t),
                };
                patch.push(sign);
                patch.push_str(t);
                patch.push('\n');
            }
            patch.push_str("*** End Patch\n");
            let expected_ops = vec![FileOp::Update {
                path: "f.txt".into(),
                move_to: None,
                hunks: vec![hunk.clone()],
            }];
            assert_eq!(parse(&patch), Ok(expected_ops), "{patch}");

            // A file without any line break gets LF for its new lines (`EolCounts` tie).
            let has_eol = n > 1 || (n == 1 && *final_newline);
            let eol = if has_eol { EOLS[usize::from(*eol_kind % 3)] } else { "\n" };
            let render = |lines: &[&str]| {
                let mut s = String::from(if *bom { "\u{feff}" } else { "" });
                for (i, l) in lines.iter().enumerate() {
                    s.push_str(l);
                    if i + 1 < lines.len() || *final_newline || n == 0 {
                        s.push_str(eol);
                    }
                }
                s
            };
            let original = render(&lines);
            let mut edited: Vec<&str> = lines[..kept_end].to_vec();
            edited.extend(added.iter().map(String::as_str));
            edited.extend(&lines[removed_end..]);
            match apply_hunks(&original, std::slice::from_ref(&hunk)) {
                Ok(result) => assert_eq!(result, render(&edited), "{original:?}\n{patch}"),
                Err(e) => {
                    assert!(e.matches >= 2, "{original:?}\n{patch}\n{e:?}");
                    assert!(
                        e.candidates.contains(&(start + 1)) || e.candidates.len() < e.matches,
                        "{original:?}\n{patch}\n{e:?}: the place the hunk was taken from is a candidate"
                    );
                }
            }
        });
}
