//! No code outside `protocol::head` probes a raw JSON-RPC message for its method, its id or its
//! `jsonrpc` member (`.get("method")`, `["id"]`, `.pointer("/method")`, ...): a message's head
//! is read once per process hop by `protocol::head` and passed along.
//!
//! Test code (files named `tests.rs` or ending in `fuzz.rs`, folders named `tests`, and what follows a
//! file's `#[cfg(test)]` module) is not checked: tests assert on the messages they receive.

use std::{collections::BTreeMap, fs};

use super::{report, rust_files, workspace_root};

/// The probes this rule forbids, as they are spelled in code.
const PROBES: [&str; 12] = [
    ".get(\"method\")",
    ".get(\"id\")",
    ".get(\"jsonrpc\")",
    ".get_mut(\"method\")",
    ".get_mut(\"id\")",
    "[\"method\"]",
    "[\"id\"]",
    "[\"jsonrpc\"]",
    ".pointer(\"/method\")",
    ".pointer(\"/id\")",
    ".contains_key(\"method\")",
    ".contains_key(\"id\")",
];

/// The code of `src` this rule reads: without line comments, and up to its test module.
fn checked_code(src: &str) -> String {
    let code = src
        .find("#[cfg(test)]\nmod tests {")
        .map_or(src, |at| &src[..at]);
    code.lines()
        .map(|l| {
            let t = l.trim_start();
            if t.starts_with("//") { "" } else { l }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Probes per non-test source file under `crates/*/src`, outside `protocol/src/head`.
fn probes() -> BTreeMap<String, Vec<String>> {
    let root = workspace_root();
    let mut out = BTreeMap::new();
    let crates = fs::read_dir(root.join("crates")).expect("crates/");
    for c in crates {
        let src = c.expect("a directory entry").path().join("src");
        if !src.is_dir() {
            continue;
        }
        for p in rust_files(&src) {
            let rel = p.strip_prefix(&root).unwrap_or(&p).display().to_string();
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
            if rel.starts_with("crates/protocol/src/head/")
                || name
                    .as_deref()
                    .is_some_and(|n| n == "tests.rs" || n.ends_with("fuzz.rs"))
                || rel.contains("/tests/")
            {
                continue;
            }
            let code = checked_code(&fs::read_to_string(&p).expect("a source file"));
            let mut found = Vec::new();
            for (n, line) in code.lines().enumerate() {
                for probe in PROBES.iter().filter(|probe| line.contains(*probe)) {
                    found.push(format!("{rel}:{}: {probe}", n + 1));
                }
            }
            if !found.is_empty() {
                out.insert(rel, found);
            }
        }
    }
    out
}

#[test]
fn no_code_outside_the_head_module_probes_a_message_for_its_method_or_id() {
    let violations: Vec<String> = probes()
        .into_iter()
        .map(|(file, sites)| {
            format!(
                "{file}: {} probes of a raw message; read its head with protocol::head \
                 instead:\n      {}",
                sites.len(),
                sites.join("\n      ")
            )
        })
        .collect();
    report("raw method/id probes outside protocol::head", &violations);
}

#[test]
fn the_probe_reader_skips_comments_and_test_modules() {
    let src = "let m = v.get(\"method\");\n// v[\"id\"]\n#[cfg(test)]\nmod tests {\n v[\"id\"] }";
    let code = checked_code(src);
    assert!(code.contains(".get(\"method\")"));
    assert!(!code.contains("[\"id\"]"));
}
