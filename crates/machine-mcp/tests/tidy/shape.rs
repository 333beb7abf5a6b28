//! The size and wording rules of the source: no file under `crates/*/src` longer than
//! [`FILE_LINES_MAX`] lines; no comment in `src` that cites an issue number (a comment states the
//! rule, history lives in git); `ARCHITECTURE.md` at most [`ARCHITECTURE_BYTES_MAX`] bytes (a map,
//! with the detail in the module docs); and every constant of `protocol::limits` named by the
//! sources of at least two crates (a bound that one crate enforces alone lives in that crate's
//! `limits` module; `protocol` keeps what crosses a process boundary).

use std::{collections::BTreeSet, fs, path::Path};

use super::{report, rust_files, workspace_root};

/// The longest a source file may grow before it is split by concern.
const FILE_LINES_MAX: usize = 1_000;
/// The largest `ARCHITECTURE.md` may grow.
const ARCHITECTURE_BYTES_MAX: u64 = 30_000;

/// The source folders of every workspace crate, with the crate's folder name.
fn crate_sources() -> Vec<(String, std::path::PathBuf)> {
    let crates = workspace_root().join("crates");
    let mut out: Vec<_> = fs::read_dir(&crates)
        .expect("crates/")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.join("src").is_dir())
        .map(|p| {
            let name = p
                .file_name()
                .expect("a name")
                .to_string_lossy()
                .into_owned();
            (name, p.join("src"))
        })
        .collect();
    out.sort();
    out
}

fn relative(p: &Path) -> String {
    p.strip_prefix(workspace_root())
        .unwrap_or(p)
        .display()
        .to_string()
}

#[test]
fn no_source_file_is_longer_than_a_thousand_lines() {
    let violations: Vec<String> = crate_sources()
        .iter()
        .flat_map(|(_, src)| rust_files(src))
        .filter_map(|p| {
            let lines = fs::read_to_string(&p)
                .expect("a source file")
                .lines()
                .count();
            (lines > FILE_LINES_MAX)
                .then(|| format!("{}: {lines} lines (split it by concern)", relative(&p)))
        })
        .collect();
    report(&format!("files over {FILE_LINES_MAX} lines"), &violations);
}

/// Whether `line` cites an issue number: the word "issue" (any case), optionally `#`, digits.
fn cites_an_issue(line: &str) -> bool {
    let lower = line.to_ascii_lowercase();
    lower.match_indices("issue").any(|(i, _)| {
        let before = lower[..i].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            return false;
        }
        let rest = lower[i + "issue".len()..].trim_start_matches(['s', ' ', '#']);
        rest.starts_with(|c: char| c.is_ascii_digit())
    })
}

#[test]
fn no_source_comment_cites_an_issue() {
    let mut violations = Vec::new();
    for (_, src) in crate_sources() {
        for p in rust_files(&src) {
            let text = fs::read_to_string(&p).expect("a source file");
            for (n, line) in text.lines().enumerate() {
                if cites_an_issue(line) {
                    violations.push(format!("{}:{}: {}", relative(&p), n + 1, line.trim()));
                }
            }
        }
    }
    report(
        "a comment states the rule, not the issue that brought it",
        &violations,
    );
}

#[test]
fn the_issue_reader_finds_citations_and_nothing_else() {
    assert!(cites_an_issue("// (issue 11 item 2)"));
    assert!(cites_an_issue("//! Skills (Issue #18): x"));
    assert!(cites_an_issue("/// fresh tester of issues 14 and 15"));
    assert!(!cites_an_issue("/// the issue of a token"));
    assert!(!cites_an_issue("let reissue2 = 1;"));
    assert!(!cites_an_issue("/// issued 3 times"));
}

#[test]
fn the_architecture_document_is_a_map() {
    let path = workspace_root().join("ARCHITECTURE.md");
    let len = fs::metadata(&path).expect("ARCHITECTURE.md").len();
    report(
        "ARCHITECTURE.md is a map (detail goes into the module docs)",
        &if len > ARCHITECTURE_BYTES_MAX {
            vec![format!(
                "ARCHITECTURE.md: {len} bytes, at most {ARCHITECTURE_BYTES_MAX}"
            )]
        } else {
            Vec::new()
        },
    );
}

/// The public constants `protocol/src/limits.rs` declares.
fn protocol_limits() -> Vec<String> {
    let path = workspace_root().join("crates/protocol/src/limits.rs");
    fs::read_to_string(path)
        .expect("protocol/src/limits.rs")
        .lines()
        .filter_map(|l| l.strip_prefix("pub const "))
        .filter_map(|l| l.split(':').next())
        .map(|n| n.trim().to_owned())
        .collect()
}

/// Whether `text` names `word` as a whole identifier.
fn names(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(i, _)| {
        let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
        !text[..i].chars().next_back().is_some_and(ident)
            && !text[i + word.len()..].chars().next().is_some_and(ident)
    })
}

#[test]
fn every_protocol_limit_crosses_a_crate_boundary() {
    let limits_file = workspace_root().join("crates/protocol/src/limits.rs");
    let sources: Vec<(String, String)> = crate_sources()
        .into_iter()
        .map(|(name, src)| {
            let text = rust_files(&src)
                .into_iter()
                .filter(|p| *p != limits_file)
                .map(|p| fs::read_to_string(p).expect("a source file"))
                .collect::<Vec<_>>()
                .join("\n");
            (name, text)
        })
        .collect();
    let violations: Vec<String> = protocol_limits()
        .into_iter()
        .filter_map(|limit| {
            let users: BTreeSet<&str> = sources
                .iter()
                .filter(|(_, text)| names(text, &limit))
                .map(|(name, _)| name.as_str())
                .collect();
            (users.len() < 2).then(|| {
                format!(
                    "protocol::limits::{limit} is named by {} (move it to that crate's limits)",
                    if users.is_empty() {
                        "no crate's source".to_owned()
                    } else {
                        users.into_iter().collect::<Vec<_>>().join(", ")
                    }
                )
            })
        })
        .collect();
    report(
        "protocol::limits keeps what crosses a crate boundary",
        &violations,
    );
}
