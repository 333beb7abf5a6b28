//! Results sized for hosts (issue 14; DESIGN §4 "Results sized for hosts", §7): on large inputs
//! every tool's default result is at most `RESULT_TEXT_DEFAULT_CHARS` of text, names its
//! continuation in its first line, and following the continuation to the end returns every
//! byte (match, entry, commit) exactly once; the text block is the plain text under a summary
//! line; explicit larger requests are honoured up to the hard caps and declared in `tools/list`.
//! Each test makes its large fixture once, in a temporary directory.

use std::{
    collections::BTreeSet,
    io::Write,
    path::Path,
    process::{Command, Stdio},
};

use runtime::limits::{
    ERROR_TEXT_MAX_CHARS, GIT_DIFF_MAX_BYTES, READ_HARD_MAX_BYTES, RESULT_SUMMARY_MAX_CHARS,
    RESULT_TEXT_DEFAULT_CHARS, RESULT_TEXT_RAISED_MAX_CHARS, TOOL_DESCRIPTION_MAX_CHARS,
};
use serde_json::{Value, json};

use super::util::{Reply, Server, Tree};

/// A default result: within the default size, and when `more`, its summary names `next`.
fn default_page(r: &Reply, next: &str, more: bool) {
    assert!(
        r.text.len() <= RESULT_TEXT_DEFAULT_CHARS,
        "a default result of {} characters: {}",
        r.text.len(),
        r.summary()
    );
    if more {
        assert!(r.summary().contains(next), "{}", r.summary());
    }
}

fn git(dir: &Path, args: &[&str]) -> Vec<u8> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn tools_list_declares_larger_requests_and_descriptions_and_limits_are_short() {
    let t = Tree::new();
    let mut s = Server::start(t.path(), &[]);
    let list = s.request("tools/list", json!({}));
    let larger: BTreeSet<&str> = [
        "read_file",
        "list_dir",
        "list_files",
        "search_text",
        "git_status",
        "git_diff",
        "git_log",
        "git_show",
        "run_process",
        "exec_command",
        "read_process",
        "agent_context",
        "run_command",
    ]
    .into();
    let tools = list["result"]["tools"].as_array().unwrap();
    assert!(tools.len() >= 20);
    for tool in tools {
        let name = tool["name"].as_str().unwrap();
        let d = tool["description"].as_str().unwrap();
        assert!(d.len() < TOOL_DESCRIPTION_MAX_CHARS, "{name}: {}", d.len());
        let declared = &tool["_meta"]["anthropic/maxResultSizeChars"];
        if larger.contains(name) {
            assert_eq!(declared, &json!(RESULT_TEXT_RAISED_MAX_CHARS), "{name}");
        } else {
            assert!(declared.is_null(), "{name} declares {declared}");
        }
    }
    let info = s.call("server_info", json!({}));
    let limits = &info.ok()["limits"];
    assert_eq!(
        limits["result_text_default_chars"],
        RESULT_TEXT_DEFAULT_CHARS
    );
    assert_eq!(
        limits["result_text_raised_max_chars"],
        RESULT_TEXT_RAISED_MAX_CHARS
    );
    assert_eq!(limits["error_text_max_chars"], ERROR_TEXT_MAX_CHARS);
    assert_eq!(
        limits["tool_description_max_chars"],
        TOOL_DESCRIPTION_MAX_CHARS
    );
    assert_eq!(limits["read_hard_max_bytes"], READ_HARD_MAX_BYTES);
}

#[test]
fn error_texts_stay_short_with_the_code_first() {
    let t = Tree::new();
    let mut s = Server::start(t.path(), &[]);
    // The regex error quotes the pattern: 60,000 characters of it.
    let pattern = format!("({}", "a".repeat(60_000));
    let r = s.call("search_text", json!({"pattern": pattern}));
    assert_eq!(r.code(), "invalid_request");
    assert!(r.text.len() < ERROR_TEXT_MAX_CHARS, "{}", r.text.len());
    let long = "d/".repeat(2_000);
    let r = s.call("read_file", json!({"path": long}));
    assert!(r.is_error && r.text.len() < ERROR_TEXT_MAX_CHARS);
}

/// 500,000 lines of 100 bytes.
fn log_50_mb() -> Vec<u8> {
    let mut data = Vec::with_capacity(50_000_000);
    let pad = "x".repeat(91);
    for i in 0..500_000u32 {
        writeln!(data, "{i:07} {pad}").unwrap();
    }
    assert_eq!(data.len(), 50_000_000);
    data
}

#[test]
fn a_50_mb_log_is_read_whole_and_by_tail_page_by_page_every_byte_once() {
    let t = Tree::new();
    let data = log_50_mb();
    t.write("big.log", &data);
    let mut s = Server::start(t.path(), &[]);

    // Whole, forward: the first page is the file's first bytes exactly, under its summary.
    let mut r = s.call("read_file", json!({"path": "big.log"}));
    default_page(&r, "cursor", true);
    assert!(r.summary().contains("of 500000"), "{}", r.summary());
    let mut got: Vec<u8> = Vec::with_capacity(data.len());
    let mut pages = 0;
    loop {
        let sc = r.ok().clone();
        assert_eq!(
            r.body(),
            sc["content"].as_str().unwrap(),
            "text is the content"
        );
        got.extend_from_slice(r.body().as_bytes());
        pages += 1;
        let Some(c) = sc["next_cursor"].as_str() else {
            break;
        };
        default_page(&r, c, true);
        r = s.call("read_file", json!({"path": "big.log", "cursor": c}));
        default_page(&r, "cursor", false);
    }
    assert!(pages > 1000, "{pages} pages");
    assert!(got == data, "the pages are the file, every byte once");

    // By tail, backward: the first page is the file's end; the pages before it the rest.
    let mut r = s.call(
        "read_file",
        json!({"path": "big.log", "tail_lines": 500_000}),
    );
    default_page(&r, "cursor", true);
    assert!(data.ends_with(r.body().as_bytes()));
    let mut back: Vec<String> = Vec::new();
    loop {
        let sc = r.ok().clone();
        back.push(r.body().to_owned());
        let Some(c) = sc["next_cursor"].as_str() else {
            break;
        };
        r = s.call("read_file", json!({"path": "big.log", "cursor": c}));
        default_page(&r, "cursor", false);
    }
    back.reverse();
    assert!(
        back.concat().as_bytes() == data.as_slice(),
        "the tail pages are the file"
    );

    // An explicit larger read is honoured up to the hard cap (5 MiB of whole lines).
    for max in [READ_HARD_MAX_BYTES, 2 * READ_HARD_MAX_BYTES] {
        let r = s.call("read_file", json!({"path": "big.log", "max_bytes": max}));
        let n = r.ok()["content"].as_str().unwrap().len();
        assert_eq!(n, READ_HARD_MAX_BYTES / 100 * 100);
        assert!(r.text.len() <= READ_HARD_MAX_BYTES + RESULT_SUMMARY_MAX_CHARS + 1);
        assert!(data.starts_with(r.body().as_bytes()));
    }
}

#[test]
fn a_line_longer_than_a_page_is_continued_inside_it() {
    let t = Tree::new();
    let mut data = "é".repeat(150_000).into_bytes(); // 300,000 bytes of 2-byte characters
    data.extend_from_slice(b"\nshort\n");
    t.write("one.txt", &data);
    let mut s = Server::start(t.path(), &[]);
    let mut r = s.call("read_file", json!({"path": "one.txt"}));
    let mut got = Vec::new();
    loop {
        default_page(&r, "cursor", false);
        got.extend_from_slice(r.body().as_bytes());
        let Some(c) = r.ok()["next_cursor"].as_str().map(str::to_owned) else {
            break;
        };
        r = s.call("read_file", json!({"path": "one.txt", "cursor": c}));
    }
    assert!(got == data);
    // And backward from the end.
    let mut r = s.call("read_file", json!({"path": "one.txt", "tail_lines": 2}));
    let mut back = Vec::new();
    loop {
        default_page(&r, "cursor", false);
        back.push(r.body().to_owned());
        let Some(c) = r.ok()["next_cursor"].as_str().map(str::to_owned) else {
            break;
        };
        r = s.call("read_file", json!({"path": "one.txt", "cursor": c}));
    }
    back.reverse();
    assert!(back.concat().as_bytes() == data.as_slice());
}

/// Regression (fresh tester of issue 14): a search cursor into a file that changed resumed by
/// match count, so lines added before it came again and the new ones never.
#[test]
fn a_search_cursor_into_a_changed_file_is_a_conflict() {
    let t = Tree::new();
    let hits =
        |n: usize, tag: &str| -> String { (0..n).map(|i| format!("hit {tag}{i}\n")).collect() };
    t.write("st/a.txt", hits(400, ""));
    let mut s = Server::start(t.path(), &[]);
    let r = s.call("search_text", json!({"pattern": "hit", "path": "st"}));
    let c = r.ok()["next_cursor"]
        .as_str()
        .expect("more than a page")
        .to_owned();
    std::thread::sleep(std::time::Duration::from_millis(20));
    t.write("st/a.txt", format!("{}{}", hits(100, "new"), hits(400, "")));
    let r = s.call(
        "search_text",
        json!({"pattern": "hit", "path": "st", "cursor": c}),
    );
    assert_eq!(r.code(), "conflict", "{}", r.text);
}

#[test]
fn a_100000_match_search_pages_every_match_once() {
    let t = Tree::new();
    for f in 0..100 {
        let body: String = (0..1000)
            .map(|i| format!("needle {f:03}-{i:04}\n"))
            .collect();
        t.write(&format!("src/f{f:03}.txt"), body);
    }
    let mut s = Server::start(t.path(), &[]);
    let args = json!({"pattern": "needle", "literal": true});
    let mut r = s.call("search_text", args.clone());
    default_page(&r, "cursor", true);
    let mut seen = BTreeSet::new();
    loop {
        let sc = r.ok().clone();
        // The text is one `path:line:column:text` line per match, the text exactly the line's.
        let lines: Vec<&str> = r.body().lines().collect();
        assert_eq!(lines.len(), sc["matches"].as_array().unwrap().len());
        for l in lines {
            let mut parts = l.splitn(4, ':');
            let (path, line, column, text) = (
                parts.next().unwrap(),
                parts.next().unwrap().parse::<usize>().unwrap(),
                parts.next().unwrap(),
                parts.next().unwrap(),
            );
            assert_eq!(column, "1");
            let f = &path[path.len() - 7..path.len() - 4];
            assert_eq!(text, format!("needle {f}-{:04}", line - 1));
            assert!(seen.insert((path.to_owned(), line)), "{l} came twice");
        }
        let Some(c) = sc["next_cursor"].as_str() else {
            assert_eq!(sc["complete"], true);
            break;
        };
        let mut next = args.clone();
        next["cursor"] = c.into();
        r = s.call("search_text", next);
        default_page(&r, "cursor", false);
    }
    assert_eq!(seen.len(), 100_000);
    // An explicit page size is honoured up to its cap.
    let r = s.call(
        "search_text",
        json!({"pattern": "needle", "literal": true, "max_matches": 5000}),
    );
    assert_eq!(r.ok()["matches"].as_array().unwrap().len(), 5000);
    assert!(r.text.len() <= RESULT_TEXT_RAISED_MAX_CHARS);
}

#[test]
fn a_20_mb_diff_pages_every_byte_once_and_is_git_diff_exactly() {
    let t = Tree::new();
    let dir = t.path();
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["config", "user.name", "A"]);
    git(dir, &["config", "user.email", "a@example.com"]);
    for f in 0..100 {
        let body: String = (0..2000)
            .map(|i| format!("{f:03} {i:05} before {}\n", "b".repeat(34)))
            .collect();
        t.write(&format!("f{f:03}.txt"), body);
    }
    git(dir, &["add", "."]);
    git(dir, &["commit", "-q", "-m", "before"]);
    for f in 0..100 {
        let body: String = (0..2000)
            .map(|i| format!("{f:03} {i:05} after {}\n", "a".repeat(35)))
            .collect();
        t.write(&format!("f{f:03}.txt"), body);
    }
    let want = git(
        dir,
        &[
            "diff",
            "--no-ext-diff",
            "--no-textconv",
            "--no-color",
            "-U3",
        ],
    );
    assert!(want.len() > 20_000_000, "{}", want.len());
    let mut s = Server::start(dir, &[]);
    let mut r = s.call("git_diff", json!({}));
    default_page(&r, "cursor", true);
    assert!(r.summary().contains("100 files changed, +200000 -200000"));
    assert!(
        want.starts_with(r.body().as_bytes()),
        "the text is git's diff"
    );
    let mut got = Vec::with_capacity(want.len());
    loop {
        let sc = r.ok().clone();
        assert_eq!(r.body(), sc["diff"].as_str().unwrap());
        assert_eq!(sc["offset"].as_u64().unwrap() as usize, got.len());
        got.extend_from_slice(r.body().as_bytes());
        let Some(c) = sc["next_cursor"].as_str() else {
            break;
        };
        // Default pages through the first 2 MB (some twenty file sections), then 1 MiB pages
        // (the cursor does not depend on the page size), to keep the test short.
        if got.len() < 2_000_000 {
            r = s.call("git_diff", json!({"cursor": c}));
            default_page(&r, "cursor", false);
        } else {
            r = s.call("git_diff", json!({"cursor": c, "max_bytes": 1 << 20}));
        }
    }
    assert!(got == want, "the pages are the diff, every byte once");
    // An explicit larger page is honoured up to the cap.
    let r = s.call("git_diff", json!({"max_bytes": GIT_DIFF_MAX_BYTES}));
    let n = r.ok()["diff"].as_str().unwrap().len();
    assert!(
        n > GIT_DIFF_MAX_BYTES - 200 && n <= GIT_DIFF_MAX_BYTES,
        "{n}"
    );
    assert!(want.starts_with(r.body().as_bytes()));
}

/// Regression (fresh tester of issue 14): a git_diff cursor stayed valid after the work tree
/// changed, and its pages spliced the old diff's first page onto the new diff's rest.
#[test]
fn a_git_diff_cursor_of_a_changed_work_tree_is_a_conflict() {
    let t = Tree::new();
    let dir = t.path();
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["config", "user.name", "A"]);
    git(dir, &["config", "user.email", "a@example.com"]);
    let lines = |tag: &str, from: usize| -> String {
        (0..20_000)
            .map(|i| {
                if i < from {
                    format!("line {i}\n")
                } else {
                    format!("{tag} {i}\n")
                }
            })
            .collect()
    };
    t.write("f.txt", lines("line", 0));
    git(dir, &["add", "."]);
    git(dir, &["commit", "-q", "-m", "c"]);
    t.write("f.txt", lines("LINE", 0));
    let mut s = Server::start(dir, &[]);
    let r = s.call("git_diff", json!({}));
    let c = r.ok()["next_cursor"]
        .as_str()
        .expect("more than a page")
        .to_owned();
    // Unchanged: the cursor continues.
    assert!(!s.call("git_diff", json!({"cursor": c})).is_error);
    t.write("f.txt", lines("LINE", 1_000));
    let r = s.call("git_diff", json!({"cursor": c}));
    assert_eq!(r.code(), "conflict", "{:?}", r.text);
}

#[test]
fn git_log_of_50000_commits_pages_every_commit_once() {
    let t = Tree::new();
    let dir = t.path();
    git(dir, &["init", "-q", "-b", "main"]);
    let mut stream = Vec::new();
    for i in 0..50_000u32 {
        let msg = format!("commit {i}\n");
        write!(
            stream,
            "commit refs/heads/main\ncommitter A U Thor <a@example.com> {} +0000\ndata {}\n{msg}\n",
            1_700_000_000 + i,
            msg.len()
        )
        .unwrap();
    }
    let mut imp = Command::new("git")
        .args(["fast-import", "--quiet"])
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    imp.stdin.take().unwrap().write_all(&stream).unwrap();
    assert!(imp.wait().unwrap().success());
    git(dir, &["commit-graph", "write", "--reachable"]);
    let want: Vec<String> = String::from_utf8(git(dir, &["rev-list", "HEAD"]))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(want.len(), 50_000);
    let mut s = Server::start(dir, &[]);
    let mut r = s.call("git_log", json!({}));
    default_page(&r, "cursor", true);
    let mut got = Vec::new();
    loop {
        let sc = r.ok().clone();
        for (c, line) in sc["commits"]
            .as_array()
            .unwrap()
            .iter()
            .zip(r.body().lines())
        {
            assert!(line.starts_with(c["commit"].as_str().unwrap()));
            got.push(c["commit"].as_str().unwrap().to_owned());
        }
        let Some(c) = sc["next_cursor"].as_str() else {
            break;
        };
        // Default pages for the first 5,000 commits, then pages of 2,000 (the cursor does not
        // depend on the page size), to keep the test short.
        if got.len() < 5_000 {
            r = s.call("git_log", json!({"cursor": c}));
            default_page(&r, "cursor", false);
        } else {
            r = s.call("git_log", json!({"cursor": c, "count": 2000}));
        }
    }
    assert!(got == want, "every commit once, newest first");
    let r = s.call("git_log", json!({"count": 2000}));
    assert_eq!(r.ok()["commits"].as_array().unwrap().len(), 2000);
    assert!(r.text.len() <= RESULT_TEXT_RAISED_MAX_CHARS);
}

#[test]
fn a_directory_of_100000_entries_pages_every_entry_once() {
    let t = Tree::new();
    let d = t.path().join("d");
    std::fs::create_dir(&d).unwrap();
    let want: Vec<String> = (0..100_000).map(|i| format!("f{i:06}")).collect();
    for n in &want {
        std::fs::File::create(d.join(n)).unwrap();
    }
    let mut s = Server::start(t.path(), &[]);
    let mut r = s.call("list_dir", json!({"path": "d"}));
    default_page(&r, "offset", true);
    let mut got = Vec::new();
    loop {
        let sc = r.ok().clone();
        assert_eq!(sc["total_entries"], 100_000);
        for (e, line) in sc["entries"]
            .as_array()
            .unwrap()
            .iter()
            .zip(r.body().lines())
        {
            assert!(line.starts_with(&format!("{}\tfile\t0\t", e["name"].as_str().unwrap())));
            got.push(e["name"].as_str().unwrap().to_owned());
        }
        let Some(n) = sc["next_offset"].as_u64() else {
            break;
        };
        // Default pages for the first 20,000 entries, then pages of 10,000.
        if got.len() < 20_000 {
            r = s.call("list_dir", json!({"path": "d", "offset": n}));
            default_page(&r, "offset", false);
        } else {
            r = s.call(
                "list_dir",
                json!({"path": "d", "offset": n, "max_entries": 10_000}),
            );
            assert!(r.text.len() <= RESULT_TEXT_RAISED_MAX_CHARS);
        }
    }
    assert!(got == want, "every entry once, by name");
    // list_files: a default page, then explicit larger pages to the end.
    let r = s.call("list_files", json!({"path": "d"}));
    default_page(&r, "cursor", true);
    let mut got: Vec<String> = Vec::new();
    let mut r = s.call("list_files", json!({"path": "d", "max_files": 20_000}));
    loop {
        let sc = r.ok().clone();
        assert!(r.text.len() <= RESULT_TEXT_RAISED_MAX_CHARS);
        got.extend(
            r.body()
                .lines()
                .map(|l| l.rsplit('/').next().unwrap().to_owned()),
        );
        let Some(c) = sc["next_cursor"].as_str() else {
            break;
        };
        r = s.call(
            "list_files",
            json!({"path": "d", "max_files": 20_000, "cursor": c}),
        );
    }
    let first_diff = got.iter().zip(&want).position(|(a, b)| a != b);
    assert!(
        got == want,
        "every file once: {} of {}, first difference at {first_diff:?}: {:?}",
        got.len(),
        want.len(),
        first_diff.map(|i| (&got[i], &want[i]))
    );
}

/// `seq 1 N` as bytes.
fn seq(n: u32) -> Vec<u8> {
    let mut v = Vec::new();
    for i in 1..=n {
        writeln!(v, "{i}").unwrap();
    }
    v
}

#[test]
fn a_20_mb_process_output_is_bounded_and_what_is_kept_reads_once() {
    let t = Tree::new();
    let mut s = Server::start(t.path(), &[]);
    let want = seq(3_000_000);
    assert!(want.len() > 20_000_000);
    let r = s.call("run_process", json!({"argv": ["seq", "1", "3000000"]}));
    default_page(&r, "read_process", true);
    let sc = r.ok().clone();
    assert_eq!(sc["stdout_bytes"].as_u64().unwrap() as usize, want.len());
    assert_eq!(sc["stdout_truncated"], true);
    let session = sc["session_id"].as_str().unwrap().to_owned();
    let head = sc["stdout_next_offset"].as_u64().unwrap() as usize;
    assert!(
        sc["stdout"]
            .as_str()
            .unwrap()
            .starts_with(std::str::from_utf8(&want[..head]).unwrap())
    );
    // From where the shown head stops: the retained head, one counted gap, the newest bytes.
    let mut offset = head as u64;
    let (mut returned, mut dropped, mut pages) = (head as u64, 0u64, 0);
    loop {
        let r = s.call(
            "read_process",
            json!({"session_id": session, "stdout_offset": offset}),
        );
        default_page(&r, "stdout_offset", false);
        let sc = r.ok().clone();
        let chunk = &sc["stdout"];
        let data = chunk["data"].as_str().unwrap();
        assert_eq!(r.body(), data, "the text is the output exactly");
        let start = chunk["offset"].as_u64().unwrap();
        assert_eq!(start, offset + chunk["dropped_bytes"].as_u64().unwrap());
        assert!(data.as_bytes() == &want[start as usize..start as usize + data.len()]);
        dropped += chunk["dropped_bytes"].as_u64().unwrap();
        returned += data.len() as u64;
        offset = chunk["next_offset"].as_u64().unwrap();
        pages += 1;
        if offset >= want.len() as u64 {
            break;
        }
        assert!(pages < 100, "read_process does not move on");
    }
    assert_eq!(
        returned + dropped,
        want.len() as u64,
        "every byte returned once or counted"
    );
    assert!(
        returned > 1_200_000,
        "the head and the newest MiB are kept: {returned}"
    );
    // An explicit larger result is honoured up to its cap.
    let r = s.call(
        "exec_command",
        json!({"command": "seq 1 3000000", "max_output_bytes": 524_288}),
    );
    let out = r.ok()["stdout"].as_str().unwrap().len();
    assert!(out > 524_000 && out < 524_288 + 200, "{out}");
    assert!(r.text.len() <= 2 * 524_288 + 4_000);
    let _: Value = r.ok().clone();
}
