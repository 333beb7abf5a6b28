//! Tidy: the shape of the workspace that `DESIGN.md` §2 and `ARCHITECTURE.md` promise, checked
//! on the source (in the manner of rust-analyzer's `tidy.rs`), so that it cannot drift silently.
//!
//! - Crate edges: `lock` depends on `tracing` only; `protocol` on serde only (and `sonic-rs`, for
//!   the lazy head scan of `protocol::head`); `runtime` on `protocol` and `lock` (of the
//!   workspace); `supervisor` and `daemon` on `protocol`, `lock` and `runtime` (the supervisor
//!   never on `rmcp`); `relay` on `protocol` and `lock` only — never `runtime`, and no `rmcp` in
//!   any of its dependency
//!   kinds; the conformance fixture on no workspace crate.
//! - Engines (`runtime/src/tools/<family>/engine.rs`, `.../engine/**`) and the shared
//!   primitives (`runtime/src/primitives/**`) import no MCP: no `rmcp`, nothing of
//!   `crate::mcp`, nothing of `crate::call` but `crate::call::error` (the tools' error value),
//!   no handler module; and no
//!   I/O transport: no sockets, no HTTP/WebSocket crate, nothing written to stdout (stdout is
//!   the stdio transport's).
//! - Tool handlers (the rest of `runtime/src/tools/`) use no rmcp type but `ContentBlock`, and
//!   never reach the daemon's ceiling through `Access::runtime()`.
//! - One direction, `mcp → tools`: nothing under `runtime/src/tools/` names `crate::mcp` (what
//!   both sides need is `crate::call`), and neither `runtime/src/lib.rs` nor `runtime/src/mcp/`
//!   names a tool family (`tools::<family>`, a family being an entry of the registry's list in
//!   `tools/mod.rs`): they reach the families through the registry.
//! - The relay's top-level modules import each other without a cycle; its routing state (`hub`)
//!   imports neither the HTTP layer nor OAuth; no SQLite type (`Sqlite…`, `sqlx`) is named
//!   outside the relay's store (`crates/relay/src/storage/`).
//! - `docs/relay-protocol.md` names every frame of `protocol::frame`.
//! - One lock-poisoning policy (`locks.rs`): no `.lock()` result is skipped or handled by hand
//!   (`if let Ok(..) = m.lock()`, `.lock().ok()`, `.lock().unwrap_or_else(..)`, …) outside
//!   `crates/lock`, whose `Lock` recovers a poisoned lock and logs it.
//! - The documents (`docs.rs`): the README is at most 300 lines; the user documents spell the
//!   product's names one way and keep the claims other files rely on (which interop clients
//!   run where, the git tools' argument rule); every relative link between README.md,
//!   CONTRIBUTING.md, SECURITY.md and `docs/**` resolves, anchors included; and
//!   `docs/reference/cli.md` is what the clap definitions render (regenerate it with
//!   `MACHINE_MCP_BLESS=1 cargo test -p machine-mcp --test tidy cli_reference`).
//!
//! Each failure names the file and line and the rule it breaks.

// A tidy check that cannot read the tree has nothing to report but the panic.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use serde_json::Value;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root")
}

/// Fails with every violation at once, one per line.
fn report(rule: &str, violations: &[String]) {
    assert!(
        violations.is_empty(),
        "tidy: {rule}:\n  {}",
        violations.join("\n  ")
    );
}

// ---------------------------------------------------------------------------------------------
// Crate edges (DESIGN §2)

/// What a workspace member may depend on: the workspace crates allowed (by package name), and,
/// when given, the only external crates allowed (normal and build dependencies).
struct Rule {
    package: &'static str,
    workspace: &'static [&'static str],
    external_only: Option<&'static [&'static str]>,
    /// External crates this member must not name in any dependency kind.
    never: &'static [&'static str],
}

const PROTOCOL: &str = "machine-bridge-protocol";
const RUNTIME: &str = "machine-bridge-runtime";
const DAEMON: &str = "machine-bridge-daemon";
const SUPERVISOR: &str = "machine-bridge-supervisor";
const RELAY: &str = "machine-bridge-relay";
const LOCK: &str = "machine-bridge-lock";

const RULES: &[Rule] = &[
    // The one lock-poisoning policy: std and tracing only.
    Rule {
        package: LOCK,
        workspace: &[],
        external_only: Some(&["tracing"]),
        never: &[],
    },
    Rule {
        package: PROTOCOL,
        workspace: &[],
        // sonic-rs: the lazy head scan (`protocol::head::Head::scan`) of the supervisor's hot path.
        external_only: Some(&["serde", "serde_json", "sonic-rs"]),
        never: &[],
    },
    Rule {
        package: RUNTIME,
        workspace: &[PROTOCOL, LOCK],
        external_only: None,
        never: &[],
    },
    Rule {
        package: DAEMON,
        workspace: &[PROTOCOL, LOCK, RUNTIME],
        external_only: None,
        never: &[],
    },
    // A process manager: it forwards lines to and from a worker process and reads only message
    // heads; it speaks no MCP through rmcp.
    Rule {
        package: SUPERVISOR,
        workspace: &[PROTOCOL, LOCK, RUNTIME],
        external_only: None,
        never: &["rmcp"],
    },
    Rule {
        package: RELAY,
        workspace: &[PROTOCOL, LOCK],
        external_only: None,
        never: &["rmcp"],
    },
    Rule {
        package: "machine-mcp",
        workspace: &[PROTOCOL, LOCK, RUNTIME, SUPERVISOR, DAEMON, RELAY],
        external_only: None,
        never: &[],
    },
    // A stand-in for a third-party MCP server: it shares no code with the product.
    Rule {
        package: "conformance-fixture",
        workspace: &[],
        external_only: None,
        never: &[],
    },
];

fn cargo_metadata() -> Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").to_owned());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(workspace_root())
        .output()
        .expect("running cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON")
}

#[test]
fn crate_edges_follow_design_section_2() {
    let meta = cargo_metadata();
    let packages = meta["packages"].as_array().expect("packages");
    let members: BTreeSet<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    let mut violations = Vec::new();
    for name in &members {
        if !RULES.iter().any(|r| r.package == *name) {
            violations.push(format!(
                "{name}: a workspace member without a rule here (give it one, and its line in \
                 DESIGN §2 and ARCHITECTURE.md)"
            ));
        }
    }
    for p in packages {
        let name = p["name"].as_str().unwrap_or_default();
        let Some(rule) = RULES.iter().find(|r| r.package == name) else {
            continue;
        };
        for d in p["dependencies"].as_array().into_iter().flatten() {
            let dep = d["name"].as_str().unwrap_or_default();
            let kind = d["kind"].as_str().unwrap_or("normal");
            let edge = format!("{name} → {dep} ({kind})");
            if members.contains(dep) {
                if !rule.workspace.contains(&dep) {
                    violations.push(format!(
                        "{edge}: {name} may depend on {:?} of the workspace only",
                        rule.workspace
                    ));
                }
            } else if rule.never.contains(&dep) {
                violations.push(format!("{edge}: {name} must never depend on {dep}"));
            } else if let Some(only) = rule.external_only
                && kind != "dev"
                && !only.contains(&dep)
            {
                violations.push(format!("{edge}: {name} depends on {only:?} only"));
            }
        }
    }
    report("crate edges (DESIGN §2)", &violations);
}

// ---------------------------------------------------------------------------------------------
// Rust sources, read as paths

/// `src` with comments blanked and the contents of string and character literals blanked
/// (newlines kept, so byte offsets keep their line numbers).
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let blank = |c: u8| if c == b'\n' { b'\n' } else { b' ' };
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                out.push(b' ');
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
        } else if b[i] == b'r' && matches!(b.get(i + 1), Some(b'"' | b'#')) && raw_prefix(b, i) {
            // r"..." or r#"..."#
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push(b[i]);
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            out.extend_from_slice(&b[i..=j]);
            i = j + 1;
            while i < b.len() && !b[i..].starts_with(&close) {
                out.push(blank(b[i]));
                i += 1;
            }
            out.extend_from_slice(&close);
            i += close.len();
        } else if b[i] == b'"' {
            out.push(b'"');
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    out.push(b' ');
                    i += 1;
                }
                if i < b.len() {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
            out.push(b'"');
            i += 1;
        } else if let Some(end) = (b[i] == b'\'').then(|| char_literal_end(b, i)).flatten() {
            out.push(b'\'');
            out.extend(std::iter::repeat_n(b' ', end - i - 1));
            out.push(b'\'');
            i = end + 1;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn ident_before(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
}

/// `r` at `i` starts a raw string (`r"`, `r#"`, also after a `b`), not an identifier's end.
fn raw_prefix(b: &[u8], i: usize) -> bool {
    !ident_before(b, i) || (b[i - 1] == b'b' && !ident_before(b, i - 1))
}

/// Where the character literal opened at `i` (`'x'`, `'\n'`, `'\u{..}'`, `b'x'`) closes; `None`
/// for a lifetime (`'a`).
fn char_literal_end(b: &[u8], i: usize) -> Option<usize> {
    match *b.get(i + 1)? {
        b'\\' => {
            let mut j = i + 3;
            while j < b.len() && b[j] != b'\'' && b[j] != b'\n' {
                j += 1;
            }
            (b.get(j) == Some(&b'\'')).then_some(j)
        }
        c => {
            let len = match c {
                0..=0x7f => 1,
                0xc0..=0xdf => 2,
                0xe0..=0xef => 3,
                _ => 4,
            };
            (b.get(i + 1 + len) == Some(&b'\'')).then_some(i + 1 + len)
        }
    }
}

/// Every path the code names, with its line: each `use` tree flattened (`a::{b, c::d}` gives
/// `a::b` and `a::c::d`), and every other `x::y::z` outside `use` statements.
fn paths(code: &str) -> Vec<(usize, String)> {
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let mut out = Vec::new();
    let mut rest = String::with_capacity(code.len());
    let mut i = 0;
    while let Some(k) = find_word(code, "use", i) {
        let Some(end) = code[k..].find(';').map(|e| k + e) else {
            break;
        };
        rest.push_str(&code[i..k]);
        rest.extend(
            code[k..end]
                .chars()
                .map(|c| if c == '\n' { '\n' } else { ' ' }),
        );
        let tree: String = code[k + 3..end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        for p in flatten(&tree) {
            out.push((line_of(k), p));
        }
        i = end;
    }
    rest.push_str(&code[i..]);
    let b = rest.as_bytes();
    let mut j = 0;
    while j < b.len() {
        if (b[j].is_ascii_alphabetic() || b[j] == b'_') && !ident_before(b, j) {
            let start = j;
            let mut end = j;
            loop {
                while end < b.len() && (b[end].is_ascii_alphanumeric() || b[end] == b'_') {
                    end += 1;
                }
                let after = rest[end..].trim_start();
                let skipped = rest.len() - end - after.len();
                if after.starts_with("::")
                    && after[2..]
                        .trim_start()
                        .starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                {
                    end += skipped + 2;
                    end += rest[end..].len() - rest[end..].trim_start().len();
                } else {
                    break;
                }
            }
            let path: String = rest[start..end].split_whitespace().collect();
            if path.contains("::") {
                out.push((rest[..start].matches('\n').count() + 1, path));
            }
            j = end.max(j + 1);
        } else {
            j += 1;
        }
    }
    out
}

fn find_word(s: &str, word: &str, from: usize) -> Option<usize> {
    let b = s.as_bytes();
    let mut at = from;
    while let Some(k) = s[at..].find(word).map(|k| at + k) {
        let before_ok = !ident_before(b, k);
        let after = b.get(k + word.len()).copied().unwrap_or(b' ');
        if before_ok && !(after.is_ascii_alphanumeric() || after == b'_') {
            return Some(k);
        }
        at = k + word.len();
    }
    None
}

/// `a::{b, c::{self, d}}` → `a::b`, `a::c`, `a::c::d` (aliases dropped).
fn flatten(tree: &str) -> Vec<String> {
    fn go(s: &str, prefix: &str, out: &mut Vec<String>) {
        let s = s.trim();
        if let Some(open) = s.find('{') {
            let head = s[..open].trim().trim_end_matches("::").trim();
            let inner = &s[open + 1..s.rfind('}').unwrap_or(s.len())];
            let prefix = join(prefix, head);
            for part in split_top(inner) {
                go(part, &prefix, out);
            }
        } else if !s.is_empty() {
            let s = s.split(" as ").next().unwrap_or(s).trim();
            if s == "self" {
                out.push(prefix.to_owned());
            } else {
                out.push(join(prefix, s));
            }
        }
    }
    fn join(a: &str, b: &str) -> String {
        match (a.is_empty(), b.is_empty()) {
            (true, _) => b.to_owned(),
            (_, true) => a.to_owned(),
            _ => format!("{a}::{b}"),
        }
    }
    fn split_top(s: &str) -> Vec<&str> {
        let mut parts = Vec::new();
        let (mut depth, mut start) = (0, 0);
        for (k, c) in s.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&s[start..k]);
                    start = k + 1;
                }
                _ => {}
            }
        }
        parts.push(&s[start..]);
        parts
    }
    let tree = tree.trim().trim_start_matches("::");
    let mut out = Vec::new();
    go(tree, "", &mut out);
    out.iter_mut()
        .for_each(|p| *p = p.split_whitespace().collect());
    out
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.expect("a directory entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn runtime_src() -> PathBuf {
    workspace_root().join("crates/runtime/src")
}

/// Engines and primitives: `tools/<family>/engine.rs`, `tools/<family>/engine/**`,
/// `primitives/**` (paths relative to `runtime/src`, with `/`).
fn is_engine(rel: &str) -> bool {
    let parts: Vec<&str> = rel.split('/').collect();
    matches!(
        parts.as_slice(),
        ["primitives", ..] | ["tools", _, "engine.rs"] | ["tools", _, "engine", ..]
    )
}

/// Why an engine or primitive may not name `path`, if it may not.
fn engine_violation(rel: &str, path: &str) -> Option<String> {
    let seg: Vec<&str> = path.split("::").collect();
    let first = seg[0];
    if first == "rmcp" {
        return Some("an engine knows no MCP: no rmcp".into());
    }
    if matches!(
        first,
        "axum" | "hyper" | "tungstenite" | "tokio_tungstenite" | "reqwest" | "ureq"
    ) || path.starts_with("std::net")
        || path.starts_with("tokio::net")
    {
        return Some("an engine knows no network transport".into());
    }
    if first == "crate" && seg.get(1) == Some(&"mcp") {
        return Some("an engine imports nothing of crate::mcp (the MCP plumbing)".into());
    }
    if first == "crate" && seg.get(1) == Some(&"call") && seg.get(2) != Some(&"error") {
        return Some(
            "an engine imports nothing of crate::call but its error value (crate::call::error)"
                .into(),
        );
    }
    if first == "crate" && seg.get(1) == Some(&"tools") && seg.get(3) != Some(&"engine") {
        return Some(
            "an engine reaches other engines only (crate::tools::<family>::engine)".into(),
        );
    }
    if seg.windows(2).any(|w| w == ["super", "super"]) {
        return Some("an engine does not reach its family's handlers (super::super::)".into());
    }
    // `super` at the top of tools/<family>/engine.rs is the family's handler module.
    if first == "super" && rel.ends_with("/engine.rs") {
        return Some("an engine does not reach its family's handlers (super::)".into());
    }
    None
}

/// The top level of a file: up to its first inline module (`mod tests { ... }` comes last), where
/// `super` is the parent module; inside the inline module `super` is the file itself.
fn top_level(code: &str) -> &str {
    let mut at = 0;
    while let Some(k) = find_word(code, "mod", at) {
        let after = code[k + 3..].trim_start();
        let name_len = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        if after[name_len..].trim_start().starts_with('{') {
            return &code[..k];
        }
        at = k + 3;
    }
    code
}

#[test]
fn engines_and_primitives_import_no_mcp_and_no_transport() {
    let src = runtime_src();
    let mut checked = 0;
    let mut violations = Vec::new();
    for file in rust_files(&src) {
        let rel = file
            .strip_prefix(&src)
            .expect("under src")
            .to_string_lossy()
            .replace('\\', "/");
        if !is_engine(&rel) {
            continue;
        }
        checked += 1;
        let code = code_only(&fs::read_to_string(&file).expect("readable source"));
        let top_end_line = top_level(&code).matches('\n').count() + 1;
        for (line, path) in paths(&code) {
            let Some(why) = engine_violation(&rel, &path) else {
                continue;
            };
            // `super` inside the file's test module is the file itself.
            let parent = path.starts_with("super::super") || !path.starts_with("super");
            if parent || line < top_end_line {
                violations.push(format!("crates/runtime/src/{rel}:{line}: `{path}`: {why}"));
            }
        }
        for (needle, why) in [
            ("stdout()", "stdout is the stdio transport's"),
            ("print!(", "stdout is the stdio transport's"),
            ("println!(", "stdout is the stdio transport's"),
        ] {
            for (k, _) in code.match_indices(needle) {
                if needle.starts_with('p') && ident_before(code.as_bytes(), k) {
                    continue;
                }
                let line = code[..k].matches('\n').count() + 1;
                violations.push(format!(
                    "crates/runtime/src/{rel}:{line}: `{needle}`: {why}"
                ));
            }
        }
    }
    // A renamed folder must not make the check vacuous.
    assert!(
        checked >= 15,
        "tidy: only {checked} engine and primitive files found under {}",
        src.display()
    );
    report(
        "engines and primitives are pure (no MCP, no transport)",
        &violations,
    );
}

#[test]
fn tool_handlers_see_no_rmcp_type_but_content_blocks_and_not_the_ceiling() {
    let src = runtime_src();
    let mut violations = Vec::new();
    for file in rust_files(&src.join("tools")) {
        let rel = file
            .strip_prefix(&src)
            .expect("under src")
            .to_string_lossy()
            .replace('\\', "/");
        if is_engine(&rel) {
            continue;
        }
        let code = code_only(&fs::read_to_string(&file).expect("readable source"));
        for (line, path) in paths(&code) {
            if path.starts_with("rmcp") && path != "rmcp::model::ContentBlock" {
                violations.push(format!(
                    "crates/runtime/src/{rel}:{line}: `{path}`: handlers use no rmcp type but \
                     ContentBlock (ARCHITECTURE.md, runtime invariant)"
                ));
            }
        }
        for (k, _) in code.match_indices(".runtime()") {
            let line = code[..k].matches('\n').count() + 1;
            violations.push(format!(
                "crates/runtime/src/{rel}:{line}: `.runtime()`: Access::runtime is the daemon's \
                 ceiling, not the caller's authority; use Access's own accessors"
            ));
        }
    }
    report("tool handlers", &violations);
}

/// The tool families: the names of the entries of the registry's list (`NAME::FAMILY` in
/// `runtime/src/tools/mod.rs`).
fn family_names(src: &Path) -> Vec<String> {
    let code = code_only(&fs::read_to_string(src.join("tools/mod.rs")).expect("tools/mod.rs"));
    let mut names: Vec<String> = code
        .match_indices("::FAMILY")
        .map(|(k, _)| {
            code[..k]
                .chars()
                .rev()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect::<Vec<char>>()
                .into_iter()
                .rev()
                .collect()
        })
        .filter(|n: &String| !n.is_empty())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Why `path`, named in `rel` (a file relative to `runtime/src`, with `/`), goes against the one
/// direction `mcp → tools`, if it does.
fn direction_violation(rel: &str, path: &str, families: &[String]) -> Option<String> {
    let seg: Vec<&str> = path.split("::").collect();
    if rel.starts_with("tools/") {
        let first = seg.iter().position(|s| *s != "super").unwrap_or(seg.len());
        let reaches_root = seg[0] == "crate" || first > 0;
        let named = if seg[0] == "crate" {
            seg.get(1)
        } else {
            seg.get(first)
        };
        if reaches_root && named == Some(&"mcp") {
            return Some(
                "nothing under tools/ imports from crate::mcp: the direction is mcp → tools, and \
                 what both sides need is crate::call"
                    .into(),
            );
        }
    }
    if rel == "lib.rs" || rel.starts_with("mcp/") {
        let family = seg
            .windows(2)
            .find(|w| w[0] == "tools" && families.iter().any(|f| f == w[1]));
        if let Some(w) = family {
            return Some(format!(
                "lib.rs and mcp/ name no tool family (`tools::{}`): they reach the families \
                 through the registry (tools/mod.rs, tools/family.rs)",
                w[1]
            ));
        }
    }
    None
}

#[test]
fn mcp_imports_tools_never_the_reverse_and_names_no_family() {
    let src = runtime_src();
    let families = family_names(&src);
    // A renamed list must not make the check vacuous.
    assert!(
        families.len() >= 10 && families.iter().any(|f| f == "process"),
        "tidy: the families were not found in {}: {families:?}",
        src.join("tools/mod.rs").display()
    );
    let mut checked = 0;
    let mut violations = Vec::new();
    for file in rust_files(&src) {
        let rel = file
            .strip_prefix(&src)
            .expect("under src")
            .to_string_lossy()
            .replace('\\', "/");
        if !(rel.starts_with("tools/") || rel.starts_with("mcp/") || rel == "lib.rs") {
            continue;
        }
        checked += 1;
        let code = code_only(&fs::read_to_string(&file).expect("readable source"));
        for (line, path) in paths(&code) {
            if let Some(why) = direction_violation(&rel, &path, &families) {
                violations.push(format!("crates/runtime/src/{rel}:{line}: `{path}`: {why}"));
            }
        }
    }
    assert!(
        checked >= 50,
        "tidy: only {checked} files of tools/, mcp/ and lib.rs found under {}",
        src.display()
    );
    report("one direction, mcp → tools", &violations);
}

// ---------------------------------------------------------------------------------------------
// The relay protocol document

/// The frames of `protocol::frame` as they are spelled on the wire: the variants of every
/// `pub enum *Frame` (serde `rename_all = "snake_case"`, unless a variant is renamed).
fn wire_frames(src: &str) -> Vec<(String, String)> {
    let code = code_only(src);
    let mut frames = Vec::new();
    let mut at = 0;
    while let Some(k) = code[at..].find("pub enum ").map(|k| at + k) {
        let name: String = code[k + 9..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let open = k + code[k..].find('{').expect("an enum body");
        at = open + 1;
        if !name.ends_with("Frame") {
            continue;
        }
        let attrs = &src[code[..k].rfind([';', '}']).unwrap_or(0)..k];
        let snake = attrs.contains("rename_all = \"snake_case\"");
        // Variants: identifiers at depth 1 of the enum body, each after `,` `{` or attributes.
        let body_start = open + 1;
        let mut depth = 1;
        let mut rename: Option<String> = None;
        let mut expect_variant = true;
        let mut i = body_start;
        let b = code.as_bytes();
        while i < b.len() && depth > 0 {
            let c = b[i];
            if depth == 1 && c == b'#' {
                // An attribute: read it from the original text (string contents are blanked).
                let end = i + code[i..].find(']').expect("an attribute's end");
                let attr = &src[i..=end];
                if let Some(r) = attr.split("rename = \"").nth(1) {
                    rename = r.split('"').next().map(str::to_owned);
                }
                i = end + 1;
                continue;
            }
            match c {
                b'{' | b'(' => depth += 1,
                b'}' | b')' => depth -= 1,
                b',' if depth == 1 => expect_variant = true,
                _ if depth == 1 && expect_variant && c.is_ascii_uppercase() => {
                    let v: String = code[i..]
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    i += v.len();
                    let wire = rename
                        .take()
                        .unwrap_or_else(|| if snake { snake_case(&v) } else { v.clone() });
                    frames.push((format!("{name}::{v}"), wire));
                    expect_variant = false;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
        at = i;
    }
    frames
}

fn snake_case(camel: &str) -> String {
    let mut s = String::new();
    for (k, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if k > 0 {
                s.push('_');
            }
            s.push(c.to_ascii_lowercase());
        } else {
            s.push(c);
        }
    }
    s
}

#[test]
fn the_relay_protocol_document_names_every_frame() {
    let root = workspace_root();
    let src = fs::read_to_string(root.join("crates/protocol/src/frame.rs")).expect("frame.rs");
    let doc = fs::read_to_string(root.join("docs/relay-protocol.md")).expect("the document");
    let frames = wire_frames(&src);
    assert!(
        frames.iter().any(|(v, _)| v.starts_with("RelayFrame::"))
            && frames.iter().any(|(v, _)| v.starts_with("DaemonFrame::"))
            && frames.len() >= 10,
        "tidy: the frame enums were not found in protocol/src/frame.rs: {frames:?}"
    );
    let named = |wire: &str| {
        doc.match_indices(&format!("`{wire}"))
            .any(|(k, m)| matches!(doc[k + m.len()..].chars().next(), Some('`' | ' ' | '{')))
    };
    let missing: Vec<String> = frames
        .iter()
        .filter(|(_, wire)| !named(wire))
        .map(|(variant, wire)| {
            format!("`{wire}` ({variant}) is not named in docs/relay-protocol.md")
        })
        .collect();
    report("docs/relay-protocol.md names every frame", &missing);
}

// ---------------------------------------------------------------------------------------------
// The documents: README budget, names and claims, links, the CLI reference

#[path = "tidy/docs.rs"]
mod docs;
#[path = "tidy/probes.rs"]
mod probes;
#[path = "tidy/shape.rs"]
mod shape;

// ---------------------------------------------------------------------------------------------
// One lock-poisoning policy: no `.lock()` result handled by hand outside `crates/lock`

#[path = "tidy/locks.rs"]
mod locks;

// ---------------------------------------------------------------------------------------------
// The checkers themselves

#[test]
fn the_path_reader_flattens_use_trees_and_skips_comments_and_strings() {
    let code = code_only(
        "use crate::{mcp::{context::CallContext, error::{self, ToolError}}, tools::x::engine};\n\
         // use rmcp::model::Tool;\n\
         let s = \"rmcp::model::Tool\"; let c = '\"'; let r = r#\"crate::mcp::x\"#;\n\
         fn f<'a>() { crate::mcp::json::to_string(&1); }\n",
    );
    let p: Vec<String> = paths(&code).into_iter().map(|(_, p)| p).collect();
    assert_eq!(
        p,
        [
            "crate::mcp::context::CallContext",
            "crate::mcp::error",
            "crate::mcp::error::ToolError",
            "crate::tools::x::engine",
            "crate::mcp::json::to_string",
        ]
    );
    assert!(engine_violation("tools/fs/engine.rs", "crate::call::json::to_string").is_some());
    assert!(engine_violation("tools/fs/engine.rs", "crate::call::error::ToolError").is_none());
    assert!(engine_violation("tools/fs/engine.rs", "crate::mcp::error::ToolError").is_some());
    assert!(engine_violation("tools/fs/engine.rs", "crate::tools::fs::Args").is_some());
    assert!(engine_violation("primitives/text.rs", "crate::tools::fs::engine::x").is_none());
    assert!(engine_violation("tools/fs/engine.rs", "rmcp::model::Tool").is_some());
    assert!(engine_violation("tools/fs/engine.rs", "tokio::net::TcpStream").is_some());

    let families = ["process".to_owned(), "jobs".to_owned()];
    let direction = |rel: &str, path: &str| direction_violation(rel, path, &families).is_some();
    assert!(direction(
        "tools/fs/mod.rs",
        "crate::mcp::server::McpServer"
    ));
    assert!(direction("tools/git/status.rs", "super::super::mcp::tasks"));
    assert!(!direction(
        "tools/fs/mod.rs",
        "crate::call::error::ToolError"
    ));
    assert!(direction("lib.rs", "tools::process::engine::watchdog"));
    assert!(direction("mcp/server.rs", "crate::tools::jobs::store"));
    assert!(!direction("mcp/server.rs", "tools::find"));
    assert!(!direction("mcp/server.rs", "crate::tools::family::States"));
    assert!(!direction("config.rs", "crate::tools::process::engine"));
}

#[test]
fn the_frame_reader_spells_frames_as_the_wire_does() {
    let src = "#[serde(tag = \"type\", rename_all = \"snake_case\")]\npub enum RelayFrame {\n    \
               /// Doc.\n    HelloAck { x: u8 },\n    #[serde(rename = \"odd\")]\n    Ready {},\n    \
               Rpc(Vec<u8>),\n}\n";
    assert_eq!(
        wire_frames(src),
        [
            ("RelayFrame::HelloAck".to_owned(), "hello_ack".to_owned()),
            ("RelayFrame::Ready".to_owned(), "odd".to_owned()),
            ("RelayFrame::Rpc".to_owned(), "rpc".to_owned()),
        ]
    );
}

#[test]
fn the_module_graph_reader_resolves_paths_to_top_level_modules_and_finds_cycles() {
    let modules: BTreeSet<String> = ["config", "hub", "mcp"].map(String::from).into();
    let reexports: BTreeMap<String, String> =
        [("RelayConfig".to_owned(), "config".to_owned())].into();
    let to = |path: &str, file: &str, inline: bool| {
        relay_target(path, &module_path(file), inline, &modules, &reexports)
    };
    let some = |m: &str| Some(m.to_owned());
    assert_eq!(to("crate::hub::Hub", "mcp/mod.rs", false), some("hub"));
    assert_eq!(
        to("crate::RelayConfig", "hub/mod.rs", false),
        some("config")
    );
    assert_eq!(to("crate::router", "hub/mod.rs", false), some(RELAY_ROOT));
    assert_eq!(to("super::Bridge", "hub/session.rs", false), some("hub"));
    assert_eq!(to("super::config::X", "mcp/mod.rs", false), some("config"));
    assert_eq!(
        to("super::super::config::X", "hub/tests/mod.rs", false),
        some("config")
    );
    assert_eq!(
        to("super::Hub", "hub/mod.rs", true),
        some("hub"),
        "in `mod tests`"
    );
    assert_eq!(to("super::config::X", "hub/mod.rs", true), some("hub"));
    assert_eq!(
        to("mcp::get", "lib.rs", false),
        some("mcp"),
        "the root names its modules"
    );
    assert_eq!(
        to("mcp::get", "hub/mod.rs", false),
        None,
        "a local name elsewhere"
    );
    assert_eq!(to("serde_json::Value", "hub/mod.rs", false), None);
    let edge = |from: &str, to: &str| ModuleEdge {
        from: from.to_owned(),
        to: to.to_owned(),
        at: String::new(),
    };
    let g = graph_of(&[
        edge("a", "b"),
        edge("b", "c"),
        edge("c", "a"),
        edge("c", "d"),
    ]);
    let found = cycles(&g);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, ["a", "b", "c"].map(String::from).into());
    assert_eq!(found[0].1, ["a", "b", "c", "a"]);
    assert!(cycles(&graph_of(&[edge("a", "b"), edge("b", "c"), edge("a", "c")])).is_empty());
}

// ---------------------------------------------------------------------------------------------
// The relay's module graph (DESIGN §6: node-local state behind the routing seam)

fn relay_src() -> PathBuf {
    workspace_root().join("crates/relay/src")
}

/// The crate root (`lib.rs`) as a node of the relay's module graph.
const RELAY_ROOT: &str = "crate";

/// The relay's routing state: the module behind the routing trait.
const RELAY_ROUTING: &str = "hub";

/// What the routing state may not import: the HTTP layer (the endpoints, their checks and
/// framing, the server, the daemon socket route, the crate root that wires them) and OAuth.
const RELAY_ROUTING_MAY_NOT_IMPORT: &[&str] = &[
    "admission",
    "error",
    "http_fuzz",
    "link",
    "mcp",
    "oauth",
    "ops",
    "origin",
    "server",
    "state",
    "stateless",
    "streamable",
    RELAY_ROOT,
];

/// Crates of the HTTP layer, which the routing state names no path of.
const HTTP_CRATES: &[&str] = &[
    "axum",
    "http",
    "http_body_util",
    "hyper",
    "hyper_util",
    "tokio_tungstenite",
    "tower",
    "tower_http",
];

/// One import between two top-level modules of the relay, and where it is.
#[derive(Debug, Clone)]
struct ModuleEdge {
    from: String,
    to: String,
    at: String,
}

/// The relay's top-level modules: a file `x.rs` (not `lib.rs`) or a folder `x/` under `src`.
fn relay_top_modules(src: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for e in fs::read_dir(src).expect("crates/relay/src") {
        let p = e.expect("a directory entry").path();
        let name = p
            .file_stem()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        if p.is_dir() || (p.extension().is_some_and(|x| x == "rs") && name != "lib") {
            out.insert(name);
        }
    }
    out
}

/// The module path of a file (relative to `src`, with `/`): `hub/session.rs` → `[hub, session]`,
/// `hub/mod.rs` → `[hub]`, `lib.rs` → `[]`.
fn module_path(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel.split('/').map(str::to_owned).collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs");
        if stem != "mod" && stem != "lib" {
            parts.push(stem.to_owned());
        }
    }
    parts
}

/// The names the crate root re-exports (`pub use x::…::Name`), with the module each comes from.
fn root_reexports(lib: &str, modules: &BTreeSet<String>) -> BTreeMap<String, String> {
    let code = code_only(lib);
    let mut out = BTreeMap::new();
    for (_, path) in paths(&code) {
        let seg: Vec<&str> = path.split("::").collect();
        let seg = if seg[0] == "crate" {
            &seg[1..]
        } else {
            &seg[..]
        };
        if let (Some(first), Some(last)) = (seg.first(), seg.last())
            && seg.len() > 1
            && modules.contains(*first)
        {
            out.insert((*last).to_owned(), (*first).to_owned());
        }
    }
    out
}

/// The top-level node a path names, when it is a path into the crate: `crate::x::…`, a `super`
/// chain that climbs to the root, or in the root itself a path that starts with a module's
/// name. A root re-export counts as the module it comes from; anything else defined in the root
/// is [`RELAY_ROOT`]. `at` is the module path of the naming file, `inline` whether the path is
/// inside an inline module of it (`mod tests { … }`).
fn relay_target(
    path: &str,
    at: &[String],
    inline: bool,
    modules: &BTreeSet<String>,
    reexports: &BTreeMap<String, String>,
) -> Option<String> {
    let seg: Vec<&str> = path.split("::").collect();
    let named = |name: &str| -> String {
        if modules.contains(name) {
            name.to_owned()
        } else {
            reexports
                .get(name)
                .cloned()
                .unwrap_or_else(|| RELAY_ROOT.to_owned())
        }
    };
    match seg[0] {
        "crate" => seg.get(1).map(|n| named(n)),
        "super" => {
            let ups = seg.iter().take_while(|s| **s == "super").count();
            let mut base: Vec<&str> = at.iter().map(String::as_str).collect();
            if inline {
                base.push("<inline>");
            }
            if ups > base.len() {
                return None;
            }
            base.truncate(base.len() - ups);
            match base.first() {
                Some(top) => Some((*top).to_owned()),
                None => seg.get(ups).map(|n| named(n)),
            }
        }
        first if at.is_empty() && !inline && modules.contains(first) => Some(first.to_owned()),
        _ => None,
    }
}

/// Every import from one top-level module of the relay to another (or to the root), test code
/// included.
fn relay_module_edges() -> Vec<ModuleEdge> {
    let src = relay_src();
    let modules = relay_top_modules(&src);
    let lib = fs::read_to_string(src.join("lib.rs")).expect("lib.rs");
    let reexports = root_reexports(&lib, &modules);
    let mut out = Vec::new();
    for file in rust_files(&src) {
        let rel = file
            .strip_prefix(&src)
            .expect("under src")
            .to_string_lossy()
            .replace('\\', "/");
        let at = module_path(&rel);
        let from = at.first().cloned().unwrap_or_else(|| RELAY_ROOT.to_owned());
        let code = code_only(&fs::read_to_string(&file).expect("readable source"));
        let top_end_line = top_level(&code).matches('\n').count() + 1;
        for (line, path) in paths(&code) {
            let Some(to) = relay_target(&path, &at, line >= top_end_line, &modules, &reexports)
            else {
                continue;
            };
            if to != from {
                out.push(ModuleEdge {
                    from: from.clone(),
                    to,
                    at: format!("crates/relay/src/{rel}:{line} `{path}`"),
                });
            }
        }
    }
    out
}

/// The graph of `edges`: each node with the nodes it imports.
fn graph_of(edges: &[ModuleEdge]) -> BTreeMap<String, BTreeSet<String>> {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for e in edges {
        g.entry(e.from.clone()).or_default().insert(e.to.clone());
        g.entry(e.to.clone()).or_default();
    }
    g
}

/// Every strongly connected component of `g` that has more than one node, with its shortest
/// cycle through its first node (the nodes in order, the first repeated at the end).
fn cycles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<(BTreeSet<String>, Vec<String>)> {
    let reaches = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_owned()];
        while let Some(n) = stack.pop() {
            for m in g.get(&n).into_iter().flatten() {
                if seen.insert(m.clone()) {
                    stack.push(m.clone());
                }
            }
        }
        seen
    };
    let reach: BTreeMap<&String, BTreeSet<String>> = g.keys().map(|n| (n, reaches(n))).collect();
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for n in g.keys() {
        if done.contains(n) || !reach[n].contains(n) {
            continue;
        }
        let component: BTreeSet<String> = reach[n]
            .iter()
            .filter(|m| reach[*m].contains(n))
            .cloned()
            .collect();
        done.extend(component.iter().cloned());
        if component.len() < 2 {
            continue;
        }
        // The shortest way from `n` back to itself inside its component.
        let mut parent: BTreeMap<String, String> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([n.clone()]);
        'search: while let Some(x) = queue.pop_front() {
            for y in &g[&x] {
                if !component.contains(y) || parent.contains_key(y) {
                    continue;
                }
                parent.insert(y.clone(), x.clone());
                if y == n {
                    break 'search;
                }
                queue.push_back(y.clone());
            }
        }
        let mut cycle = vec![n.clone()];
        let mut at = parent.get(n).cloned();
        while let Some(p) = at {
            cycle.push(p.clone());
            if &p == n {
                break;
            }
            at = parent.get(&p).cloned();
        }
        cycle.reverse();
        out.push((component, cycle));
    }
    out
}

#[test]
fn the_relay_modules_form_a_dag() {
    let edges = relay_module_edges();
    let g = graph_of(&edges);
    // A moved source tree must not make the check vacuous.
    assert!(
        g.len() >= 10 && edges.len() >= 30,
        "tidy: only {} modules and {} imports found under crates/relay/src",
        g.len(),
        edges.len()
    );
    let found: Vec<String> = cycles(&g)
        .into_iter()
        .map(|(component, c)| {
            let witnesses: Vec<String> = c
                .windows(2)
                .filter_map(|w| edges.iter().find(|e| e.from == w[0] && e.to == w[1]))
                .map(|e| format!("{} → {}: {}", e.from, e.to, e.at))
                .collect();
            format!(
                "{} import each other; one cycle: {} ({})",
                component.into_iter().collect::<Vec<_>>().join(", "),
                c.join(" → "),
                witnesses.join("; ")
            )
        })
        .collect();
    report(
        "the relay's top-level modules import each other without a cycle",
        &found,
    );
}

#[test]
fn the_relay_routing_state_imports_neither_the_http_layer_nor_oauth() {
    let mut violations: Vec<String> = relay_module_edges()
        .into_iter()
        .filter(|e| {
            e.from == RELAY_ROUTING && RELAY_ROUTING_MAY_NOT_IMPORT.contains(&e.to.as_str())
        })
        .map(|e| {
            format!(
                "{}: the routing state imports `{}` (the HTTP layer and OAuth sit above it)",
                e.at, e.to
            )
        })
        .collect();
    let src = relay_src();
    let routing = src.join(RELAY_ROUTING);
    assert!(routing.is_dir(), "tidy: no {}", routing.display());
    for file in rust_files(&routing) {
        let rel = file
            .strip_prefix(&src)
            .expect("under src")
            .to_string_lossy()
            .replace('\\', "/");
        let code = code_only(&fs::read_to_string(&file).expect("readable source"));
        for (line, path) in paths(&code) {
            let first = path.split("::").next().unwrap_or_default();
            if HTTP_CRATES.contains(&first) {
                violations.push(format!(
                    "crates/relay/src/{rel}:{line}: `{path}`: the routing state knows no HTTP"
                ));
            }
        }
    }
    report(
        "the relay's routing state (hub) imports neither the HTTP layer nor OAuth",
        &violations,
    );
}

/// Identifiers of the SQLite implementation: `Sqlite…` types and the `sqlx` crate.
fn names_sqlite(word: &str) -> bool {
    word.contains("Sqlite") || word.contains("SQLite") || word == "sqlx"
}

#[test]
fn no_sqlite_type_is_named_outside_the_relay_store() {
    let root = workspace_root();
    let store = root.join("crates/relay/src/storage");
    let mut checked = 0;
    let mut violations = Vec::new();
    for e in fs::read_dir(root.join("crates")).expect("crates") {
        let krate = e.expect("a directory entry").path();
        for dir in ["src", "tests", "benches"] {
            let d = krate.join(dir);
            if !d.is_dir() {
                continue;
            }
            for file in rust_files(&d) {
                if file.starts_with(&store) {
                    continue;
                }
                checked += 1;
                let code = code_only(&fs::read_to_string(&file).expect("readable source"));
                let b = code.as_bytes();
                let mut i = 0;
                while i < b.len() {
                    if (b[i].is_ascii_alphabetic() || b[i] == b'_') && !ident_before(b, i) {
                        let end = i + code[i..]
                            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                            .unwrap_or(code.len() - i);
                        let word = &code[i..end];
                        if names_sqlite(word) {
                            let line = code[..i].matches('\n').count() + 1;
                            let rel = file.strip_prefix(&root).unwrap_or(&file).display();
                            violations.push(format!(
                                "{rel}:{line}: `{word}`: callers name the store (`storage::Store` \
                                 and its traits), never its SQLite implementation"
                            ));
                        }
                        i = end;
                    } else {
                        i += 1;
                    }
                }
            }
        }
    }
    assert!(checked >= 100, "tidy: only {checked} Rust files found");
    report(
        "no SQLite type outside crates/relay/src/storage/",
        &violations,
    );
}
