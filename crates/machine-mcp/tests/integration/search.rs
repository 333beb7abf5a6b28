//! search_text: caps, continuation, filters, context.

use std::os::unix::fs::PermissionsExt;

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
    // A repository, where a `.gitignore` applies.
    std::fs::create_dir(t.path().join(".git")).unwrap();
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

#[test]
fn paths_that_cannot_be_read_are_listed_as_skipped_and_the_search_is_not_complete() {
    let t = Tree::new();
    t.write("a.txt", "needle\n");
    let long = t.too_long_paths();
    // Root reads a mode-000 directory anyway, so permission denied is only checked as non-root.
    let as_user = !t.owned_by_root();
    if as_user {
        t.write("locked/b.txt", "needle\n");
        std::fs::set_permissions(t.path().join("locked"), PermissionsExt::from_mode(0o000))
            .unwrap();
    }
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let out = s
        .call("search_text", json!({"pattern": "needle", "literal": true}))
        .ok()
        .clone();
    if as_user {
        std::fs::set_permissions(t.path().join("locked"), PermissionsExt::from_mode(0o755))
            .unwrap();
    }
    assert_eq!(matches(&out), [("a.txt".to_owned(), 1)]);
    let mut skipped = vec![
        json!({"path": long.dir, "reason": "path too long"}),
        json!({"path": long.file, "reason": "path too long"}),
    ];
    if as_user {
        skipped.push(json!({"path": "locked", "reason": "permission denied"}));
    }
    assert_eq!(out["skipped"], json!(skipped), "in path order, relative");
    assert_eq!(out["skipped_count"], skipped.len());
    assert_eq!(out["unreadable_files"], 1);
    assert_eq!(out["complete"], false, "something was skipped");
    assert!(out.get("next_cursor").is_none(), "nothing left to page");
    // A search that skips nothing stays complete and says so.
    let out = s
        .call("search_text", json!({"pattern": "needle", "path": "a.txt"}))
        .ok()
        .clone();
    assert_eq!(out["complete"], true);
    assert_eq!(out["skipped_count"], 0);
    assert_eq!(out["skipped"], json!([]));
}

/// Peak resident memory of a process (`VmHWM` in /proc/PID/status), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/PID/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmHWM")
        * 1024
}

/// Issue 11 item 4: a 100,000-line `.gitignore` cost ~16 KB of memory per pattern and call
/// (1.6 GB for one `list_files`). It is applied up to the pattern cap
/// (`runtime::limits::IGNORE_FILE_MAX_PATTERNS`, 10,000): the result names the file and the cap,
/// patterns past it do not apply, and the server's peak memory stays bounded while list_files
/// and four parallel searches share one compiled matcher.
#[test]
fn an_oversized_gitignore_is_applied_up_to_the_cap_with_a_note_and_bounded_memory() {
    const PATTERN_CAP: usize = 10_000; // runtime::limits::IGNORE_FILE_MAX_PATTERNS
    let t = Tree::new();
    let mut gitignore: String = (0..100_000).map(|i| format!("build-{i}/*.log\n")).collect();
    gitignore.push_str("late.txt\n");
    // A repository, where a `.gitignore` applies.
    std::fs::create_dir(t.path().join(".git")).unwrap();
    t.write(".gitignore", gitignore);
    t.write("src/a.txt", "needle\n");
    t.write("build-1/x.log", "needle\n");
    t.write("late.txt", "needle\n");
    let mut s = Server::start(t.path(), &["--profile", "agent"]);

    let expect_note = |out: &Value| {
        let notes = out["notes"]
            .as_array()
            .unwrap_or_else(|| panic!("no notes: {out}"));
        assert_eq!(notes.len(), 1, "{notes:?}");
        let note = notes[0].as_str().unwrap();
        assert!(
            note.contains(".gitignore") && note.contains(&PATTERN_CAP.to_string()),
            "the note names the file and the cap: {note}"
        );
    };
    let listed = s.call("list_files", json!({}));
    let out = listed.ok();
    let files: Vec<&str> = out["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert!(files.contains(&"src/a.txt"), "{files:?}");
    assert!(
        !files.contains(&"build-1/x.log"),
        "a pattern within the cap applies: {files:?}"
    );
    assert!(
        files.contains(&"late.txt"),
        "a pattern past the cap does not: {files:?}"
    );
    expect_note(out);

    let replies = s.call_all(
        "search_text",
        (0..4).map(|_| json!({"pattern": "needle"})).collect(),
    );
    for r in &replies {
        let out = r.ok();
        let found: Vec<String> = matches(out).into_iter().map(|(p, _)| p).collect();
        assert_eq!(found, ["late.txt", "src/a.txt"], "{out}");
        expect_note(out);
    }
    // One compiled copy of the capped file takes ~150 MiB here. It lives while a walk holds it:
    // a search whose walk starts after another's ended compiles it again, and glibc's
    // per-thread arenas can keep the first copy's pages, so the high-water mark is one or two
    // copies (175 or 320 MiB seen, depending on how the four calls overlap), never one per
    // call or per pattern past the cap.
    let peak = peak_rss(s.pid());
    assert!(
        peak < 400 * 1024 * 1024,
        "peak RSS {} MiB (before the fix: ~1.6 GiB per call)",
        peak >> 20
    );
}

/// A `.gitignore` applies only inside a git repository, as git and ripgrep apply it; `.ignore`
/// files apply anywhere. An unpacked source tarball whose top `.gitignore` ignores `/*` was
/// answered "0 files searched; complete". And when ignore rules leave entries out, both tools
/// say how many and which argument includes them.
#[test]
fn a_gitignore_outside_any_repository_is_not_applied_and_left_out_entries_are_counted() {
    let t = Tree::new();
    t.write(".gitignore", "/*\n");
    t.write("README", "needle\n");
    t.write("src/a.c", "needle\n");
    t.write("gen/.ignore", "*.o\n");
    t.write("gen/x.o", "needle\n");
    t.write("gen/y.c", "needle\n");
    let mut s = Server::start(t.path(), &["--profile", "edit"]);
    let listed = |s: &mut Server, args: Value| {
        let r = s.call("list_files", args);
        let files: Vec<String> = r.ok()["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap().to_owned())
            .collect();
        (files, r)
    };
    let r = s.call("search_text", json!({"pattern": "needle"}));
    let found: Vec<String> = matches(r.ok()).into_iter().map(|(p, _)| p).collect();
    assert_eq!(found, ["README", "gen/y.c", "src/a.c"], "{}", r.text);
    assert_eq!(r.ok()["ignored_count"], 1, "gen/x.o, by gen/.ignore");
    assert!(
        r.summary().contains("1 entry left out by ignore rules")
            && r.summary().contains(r#""include_ignored": true"#),
        "{}",
        r.summary()
    );
    let (files, r) = listed(&mut s, json!({}));
    assert_eq!(
        files,
        [".gitignore", "README", "gen/.ignore", "gen/y.c", "src/a.c"]
    );
    assert_eq!(r.ok()["ignored_count"], 1);
    assert!(
        r.summary().contains(r#""include_ignored": true"#),
        "{}",
        r.summary()
    );

    // Inside a repository the same `.gitignore` applies (`.git` itself is never listed).
    std::fs::create_dir(t.path().join(".git")).unwrap();
    let (files, r) = listed(&mut s, json!({}));
    assert!(files.is_empty(), "{files:?}");
    assert_eq!(r.ok()["ignored_count"], 4, "the four top-level entries");
    assert!(
        r.summary().contains("4 entries left out by ignore rules"),
        "{}",
        r.summary()
    );
    let r = s.call("search_text", json!({"pattern": "needle"}));
    assert_eq!(r.ok()["files_searched"], 0);
    assert_eq!(r.ok()["ignored_count"], 4);
    assert!(
        r.summary().contains(r#""include_ignored": true"#),
        "an empty answer says how to include what was left out: {}",
        r.summary()
    );
    let (files, r) = listed(&mut s, json!({"include_ignored": true}));
    assert_eq!(files.len(), 6, "{files:?}");
    assert_eq!(r.ok()["ignored_count"], 0);
    assert!(!r.summary().contains("left out"), "{}", r.summary());
}
