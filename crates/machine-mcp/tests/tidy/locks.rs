//! Tidy check of the one lock-poisoning policy (`lock::Lock`, crate `machine-bridge-lock`): no
//! source outside that crate handles a `.lock()` result itself — not skipped (`if let Ok(..) =
//! m.lock()`, `let Ok(..) = m.lock() else`, `.lock().ok()`), not recovered or mapped without a
//! trace (`.lock().unwrap_or_else(..)`, `.map(..)`, `.is_ok_and(..)`, …). A `Lock`'s `lock()`
//! returns its guard, so none of these is needed. The conformance fixture (a stand-in for a
//! third-party server, sharing no code with the product) is not held to it.
//!
//! A `.lock()` that is not a mutex's (a lock file's `io::Result`) is allowed when the line before
//! it says so with a comment containing `not a mutex`.

use std::fs;

use super::{code_only, report, rust_files, workspace_root};

/// The methods that handle a `std::sync::Mutex::lock` result instead of the policy
/// (`map_err`, which makes poisoning an error the caller sees, is not among them).
const HANDLERS: &[&str] = &[
    "ok",
    "err",
    "unwrap_or_else",
    "unwrap_or_default",
    "unwrap_or",
    "map",
    "map_or",
    "map_or_else",
    "is_ok",
    "is_ok_and",
    "is_err",
    "and_then",
];

/// Byte offsets of the `.lock()` calls of `code` whose result is handled by hand: followed by
/// one of [`HANDLERS`], or the scrutinee of a `let Ok(..) =` (as `if let`, `let … else` or a
/// let chain).
fn handled_locks(code: &str) -> Vec<usize> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = code[from..].find(".lock()") {
        let at = from + i;
        from = at + ".lock()".len();
        let rest = code[from..].trim_start();
        if let Some(after) = rest.strip_prefix('.') {
            let name: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if HANDLERS.contains(&name.as_str()) && after[name.len()..].starts_with('(') {
                out.push(at);
                continue;
            }
        }
        // The scrutinee of `let Ok(..) = <expr>.lock()`: the statement's text before the call.
        let start = code[..at].rfind([';', '{', '}']).map_or(0, |s| s + 1);
        let stmt = &code[start..at];
        let ends_here = rest.starts_with('{') || rest.starts_with("else") || rest.starts_with("&&");
        if ends_here && stmt.contains("let Ok(") {
            out.push(at);
        }
    }
    out
}

#[test]
fn lock_results_are_never_handled_outside_the_lock_crate() {
    let root = workspace_root();
    let mut violations = Vec::new();
    for file in rust_files(&root.join("crates")) {
        let rel = file
            .strip_prefix(&root)
            .unwrap_or(&file)
            .display()
            .to_string();
        if rel.starts_with("crates/lock/")
            || rel.starts_with("crates/conformance-fixture/")
            || rel.contains("/target/")
        {
            continue;
        }
        let src = fs::read_to_string(&file).unwrap_or_default();
        let code = code_only(&src);
        let lines: Vec<&str> = src.lines().collect();
        for at in handled_locks(&code) {
            let line = code[..at].matches('\n').count();
            if line > 0
                && lines
                    .get(line - 1)
                    .is_some_and(|l| l.contains("not a mutex"))
            {
                continue;
            }
            violations.push(format!(
                "{rel}:{}: a `.lock()` result handled by hand; use `lock::Lock` (poisoning \
                 recovered and logged at `error`)",
                line + 1
            ));
        }
    }
    report("one lock-poisoning policy", &violations);
}

#[test]
fn the_lock_reader_finds_handled_results_and_passes_guards() {
    let bad = [
        "if let Ok(mut g) = m.lock() { g.push(1); }",
        "let Ok(g) = self.m.lock() else { return };",
        "if a && let Ok(g) = m.lock() && g.is_empty() { }",
        "let n = m.lock().map(|g| g.len()).unwrap_or(0);",
        "let g = m.lock()\n    .ok()?;",
        "let g = m.lock().unwrap_or_else(PoisonError::into_inner);",
    ];
    for src in bad {
        assert_eq!(handled_locks(src).len(), 1, "{src}");
    }
    let good = [
        "let g = m.lock(); g.push(1);",
        "m.lock().insert(k, v);",
        "let g = slot.lock().await;",
        "if let Ok(x) = f() { m.lock().push(x); }",
        "let n = m.lock().len();",
    ];
    for src in good {
        assert!(handled_locks(src).is_empty(), "{src}");
    }
}
