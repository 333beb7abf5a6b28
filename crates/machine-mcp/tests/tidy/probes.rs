//! No code outside `protocol::head` probes a raw JSON-RPC message for its method, its id or its
//! `jsonrpc` member (`.get("method")`, `["id"]`, `.pointer("/method")`, ...): a message's head
//! is read once per process hop by `protocol::head` and passed along.
//!
//! Test code (files named `tests.rs` or ending in `fuzz.rs`, folders named `tests`, and what follows a
//! file's `#[cfg(test)]` module) is not checked: tests assert on the messages they receive.
//!
//! [`NOT_YET_MIGRATED`] is a ratchet, not an allow-list: the sites that still probe, by file,
//! with their count. A file may not gain a probe, and a file that loses one must have its
//! count lowered (so the list only shrinks, and is empty once every site reads a head).

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

/// Sites that still probe a message themselves, by file (relative to the workspace root), with
/// how many: the remaining migration to `protocol::head` (module docs).
const NOT_YET_MIGRATED: &[(&str, usize)] = &[
    ("crates/daemon/src/sessions/call.rs", 2),
    ("crates/daemon/src/sessions/guard.rs", 3),
    ("crates/daemon/src/sessions/retention.rs", 6),
    ("crates/daemon/src/sessions/session.rs", 3),
    ("crates/relay/src/hub/delivery.rs", 2),
    ("crates/relay/src/hub/routing.rs", 3),
    ("crates/relay/src/hub/session.rs", 1),
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
    let known: BTreeMap<&str, usize> = NOT_YET_MIGRATED.iter().copied().collect();
    let found = probes();
    let mut violations = Vec::new();
    for (file, sites) in &found {
        let allowed = known.get(file.as_str()).copied().unwrap_or(0);
        if sites.len() > allowed {
            violations.push(format!(
                "{file}: {} probes of a raw message ({allowed} known); read its head with \
                 protocol::head instead:\n      {}",
                sites.len(),
                sites.join("\n      ")
            ));
        } else if sites.len() < allowed {
            violations.push(format!(
                "{file}: {} probes left, {allowed} listed: lower its count in NOT_YET_MIGRATED",
                sites.len()
            ));
        }
    }
    for (file, n) in &known {
        if !found.contains_key(*file) {
            violations.push(format!(
                "{file}: no probe left, {n} listed: remove it from NOT_YET_MIGRATED"
            ));
        }
    }
    report("raw method/id probes outside protocol::head", &violations);
}

#[test]
fn the_probe_reader_skips_comments_and_test_modules() {
    let src = "let m = v.get(\"method\");\n// v[\"id\"]\n#[cfg(test)]\nmod tests {\n v[\"id\"] }";
    let code = checked_code(src);
    assert!(code.contains(".get(\"method\")"));
    assert!(!code.contains("[\"id\"]"));
}
