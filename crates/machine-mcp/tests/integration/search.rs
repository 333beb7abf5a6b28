//! search_text: caps, continuation, filters, context.

use serde_json::{Value, json};

use crate::util::{Server, Tree};

fn matches(out: &Value) -> Vec<(String, u64)> {
    out["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["path"].as_str().unwrap().to_owned(),
                m["line"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn max_matches_200_over_50000_matching_lines_returns_200_and_stops_early() {
    let t = Tree::new();
    let body: String = (0..1000).map(|i| format!("needle number {i}\n")).collect();
    for f in 0..50 {
        t.write(&format!("f{f:02}.txt"), &body);
    }
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let r = s.call(
        "search_text",
        json!({"pattern": "needle", "literal": true, "max_matches": 200}),
    );
    let out = r.ok();
    assert_eq!(out["matches"].as_array().unwrap().len(), 200);
    assert_eq!(out["complete"], false);
    assert!(out["next_cursor"].is_string());
    let searched = out["files_searched"].as_u64().unwrap();
    assert!(
        searched < 25,
        "searched {searched} of 50 files for 200 matches in the first"
    );
    // All in the first file, in line order.
    let m = matches(out);
    assert!(m.iter().all(|(p, _)| p == "f00.txt"));
    assert_eq!(m.first().unwrap().1, 1);
    assert_eq!(m.last().unwrap().1, 200);
}

#[test]
fn cursors_page_through_every_match_once() {
    let t = Tree::new();
    for f in 0..7 {
        let body: String = (0..13).map(|i| format!("hit {f} {i}\nmiss\n")).collect();
        t.write(&format!("d{}/f{f}.txt", f % 3), &body);
    }
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..50 {
        let mut args = json!({"pattern": "^hit \\d+ \\d+$", "max_matches": 10});
        if let Some(c) = &cursor {
            args["cursor"] = json!(c);
        }
        let out = s.call("search_text", args).ok().clone();
        all.extend(matches(&out));
        match out["next_cursor"].as_str() {
            Some(c) => {
                use base64::Engine;
                let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .decode(c)
                    .unwrap();
                let root = std::fs::canonicalize(t.path()).unwrap();
                assert!(
                    !String::from_utf8_lossy(&raw).contains(root.to_str().unwrap()),
                    "the cursor leaks a host path"
                );
                cursor = Some(c.to_owned());
            }
            None => break,
        }
    }
    assert_eq!(all.len(), 7 * 13);
    let mut dedup = all.clone();
    dedup.sort();
    dedup.dedup();
    assert_eq!(dedup.len(), all.len(), "no match twice");
    assert_eq!(dedup, all, "pages come in path, then line order");
    // A cursor from another query is refused.
    let r = s.call(
        "search_text",
        json!({"pattern": "other", "cursor": cursor.unwrap_or_default()}),
    );
    assert_eq!(r.code(), "invalid_request");
}

#[test]
fn filters_case_and_context() {
    let t = Tree::new();
    t.write(".gitignore", "ignored/\n");
    t.write("src/a.rs", "fn Alpha() {}\nlet x = 1;\nfn beta() {}\n");
    t.write("src/b.py", "def alpha(): pass\n");
    t.write("ignored/c.rs", "fn alpha() {}\n");
    t.write("bin.dat", b"alpha\0\x01\x02");
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let out = s
        .call(
            "search_text",
            json!({"pattern": "alpha", "case": "insensitive"}),
        )
        .ok()
        .clone();
    let paths: Vec<String> = matches(&out).into_iter().map(|(p, _)| p).collect();
    assert_eq!(
        paths,
        ["src/a.rs", "src/b.py"],
        "gitignored and binary files skipped"
    );
    assert_eq!(out["complete"], true);
    let out = s.call("search_text", json!({"pattern": "alpha", "case": "insensitive", "include": ["*.rs"], "include_ignored": true})).ok().clone();
    let paths: Vec<String> = matches(&out).into_iter().map(|(p, _)| p).collect();
    assert_eq!(paths, ["ignored/c.rs", "src/a.rs"]);
    let out = s
        .call(
            "search_text",
            json!({"pattern": "alpha", "exclude": ["*.py"]}),
        )
        .ok()
        .clone();
    assert!(matches(&out).is_empty(), "case-sensitive by default");
    let out = s
        .call(
            "search_text",
            json!({"pattern": "let x", "literal": true, "context_lines": 1}),
        )
        .ok()
        .clone();
    let m = &out["matches"][0];
    assert_eq!(m["line"], 2);
    assert_eq!(m["column"], 1);
    assert_eq!(m["before"], json!(["fn Alpha() {}"]));
    assert_eq!(m["after"], json!(["fn beta() {}"]));
    let r = s.call("search_text", json!({"pattern": "(unclosed"}));
    assert_eq!(r.code(), "invalid_request");
    let r = s.call("search_text", json!({"pattern": "x", "path": "nope"}));
    assert_eq!(r.code(), "not_found");
}
