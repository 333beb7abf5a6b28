//! read_file, list_dir, list_files, view_image, server_info.

use std::os::unix::fs::PermissionsExt;

use serde_json::json;

use crate::util::{Server, Tree, rchar};

#[test]
fn two_million_lines_tail_and_range_without_reading_the_whole_file() {
    let t = Tree::new();
    let mut body = String::with_capacity(30 << 20);
    for i in 1..=2_000_000u32 {
        body.push_str(&format!("line {i}\n"));
    }
    let size = body.len() as u64;
    t.write("big.log", &body);
    drop(body);
    let mut s = Server::start(t.path(), &[]);
    let before = rchar(s.pid());
    let r = s.call("read_file", json!({"path": "big.log", "tail_lines": 10}));
    let read = rchar(s.pid()) - before;
    let out = r.ok();
    let expected: String = (1_999_991..=2_000_000)
        .map(|i| format!("line {i}\n"))
        .collect();
    assert_eq!(out["content"], expected);
    assert_eq!(out["size_bytes"], size);
    assert!(read < size / 20, "tail read {read} of {size} bytes");

    let r = s.call(
        "read_file",
        json!({"path": "big.log", "start_line": 1_500_000, "end_line": 1_500_004}),
    );
    let out = r.ok();
    assert_eq!(
        out["content"],
        "line 1500000\nline 1500001\nline 1500002\nline 1500003\nline 1500004\n"
    );
    assert_eq!(out["start_line"], 1_500_000);
    assert_eq!(out["end_line"], 1_500_004);
    assert_eq!(out["total_lines"], 2_000_000);
    assert_eq!(out["next_start_line"], 1_500_005);
    assert_eq!(out["truncated"], false);

    // The whole file is over the default budget: the first MiB of whole lines, and where to go on.
    let out = s.call("read_file", json!({"path": "big.log"})).ok().clone();
    assert_eq!(out["truncated"], true);
    let content = out["content"].as_str().unwrap();
    assert!(content.len() <= 1 << 20 && content.ends_with('\n'));
    let last = out["end_line"].as_u64().unwrap();
    assert_eq!(out["next_start_line"], last + 1);
    assert!(content.ends_with(&format!("line {last}\n")));
}

#[test]
fn max_bytes_cuts_at_lines_and_is_capped() {
    let t = Tree::new();
    t.write("f.txt", "aaaa\nbbbb\ncccc\n");
    let mut s = Server::start(t.path(), &[]);
    let out = s
        .call("read_file", json!({"path": "f.txt", "max_bytes": 12}))
        .ok()
        .clone();
    assert_eq!(out["content"], "aaaa\nbbbb\n");
    assert_eq!(out["next_start_line"], 3);
    let out = s
        .call("read_file", json!({"path": "f.txt", "start_line": 3}))
        .ok()
        .clone();
    assert_eq!(out["content"], "cccc\n");
    assert_eq!(out["next_start_line"], serde_json::Value::Null);
    let out = s
        .call(
            "read_file",
            json!({"path": "f.txt", "max_bytes": 999_999_999}),
        )
        .ok()
        .clone();
    assert_eq!(out["content"], "aaaa\nbbbb\ncccc\n");
}

#[test]
fn binary_and_non_utf8_files_are_clear_errors() {
    let t = Tree::new();
    t.write("bin.dat", b"\x7fELF\x02\x01\x01\0\0\0\0");
    t.write("latin1.txt", b"caf\xe9\n");
    let mut s = Server::start(t.path(), &[]);
    let r = s.call("read_file", json!({"path": "bin.dat"}));
    assert_eq!(r.code(), "invalid_request");
    assert!(r.error["message"].as_str().unwrap().contains("binary"));
    let r = s.call("read_file", json!({"path": "latin1.txt"}));
    assert!(r.error["message"].as_str().unwrap().contains("UTF-8"));
    let r = s.call("read_file", json!({"path": "missing.txt"}));
    assert_eq!(r.code(), "not_found");
    let r = s.call("read_file", json!({"path": "."}));
    assert_eq!(r.code(), "invalid_request");
}

/// Regression (adversarial report F5): a line longer than max_bytes came back cut with nothing
/// saying so except `truncated`, and `next_start_line` moved past its rest; `max_bytes: 0`
/// silently returned one byte. A cut line is now named (`cut_line`, with its length when known)
/// and 0 is refused.
#[test]
fn a_line_longer_than_max_bytes_is_reported_as_cut() {
    let t = Tree::new();
    t.write("long.txt", format!("{}\nend\n", "x".repeat(3000)));
    let mut s = Server::start(t.path(), &[]);
    let out = s
        .call("read_file", json!({"path": "long.txt", "max_bytes": 1000}))
        .ok()
        .clone();
    assert_eq!(out["content"], "x".repeat(1000));
    assert_eq!(out["truncated"], true);
    assert_eq!(out["cut_line"], 1);
    assert_eq!(out["cut_line_bytes"], 3001);
    assert_eq!(out["next_start_line"], 2);
    // The tail keeps the newest whole lines that fit; a last line alone too long keeps its end
    // (from a character boundary: the line is made of 3-byte characters).
    t.write("tail.txt", format!("a\n{}\n", "\u{20ac}".repeat(1000)));
    let out = s
        .call(
            "read_file",
            json!({"path": "tail.txt", "tail_lines": 1, "max_bytes": 1001}),
        )
        .ok()
        .clone();
    assert_eq!(out["truncated"], true);
    assert_eq!(out["content"], format!("{}\n", "\u{20ac}".repeat(333)));
    assert_eq!(out["cut_line"], 2);
    assert_eq!(out["cut_line_bytes"], 3001);
    let out = s
        .call("read_file", json!({"path": "long.txt", "max_bytes": 5000}))
        .ok()
        .clone();
    assert_eq!(out["cut_line"], serde_json::Value::Null);
    let r = s.call("read_file", json!({"path": "long.txt", "max_bytes": 0}));
    assert_eq!(r.code(), "invalid_request");
}

/// Regression (adversarial report F2): opening a FIFO with no writer blocked forever, so
/// read_file, edit_file, view_image and apply_patch on one never answered and held a call slot
/// (16 of them wedged the server). Special files are refused at once and nothing is written.
#[test]
fn fifos_and_devices_are_refused_at_once() {
    let t = Tree::new();
    let fifo = t.path().join("pipe");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    std::os::unix::fs::symlink("/dev/zero", t.path().join("zero")).unwrap();
    let _socket = std::os::unix::net::UnixListener::bind(t.path().join("sock")).unwrap();
    let mut s = Server::start(t.path(), &[]);
    let calls = [
        ("read_file", json!({"path": "pipe"})),
        ("read_file", json!({"path": "pipe", "tail_lines": 3})),
        (
            "edit_file",
            json!({"path": "pipe", "old_text": "a", "new_text": "b"}),
        ),
        ("view_image", json!({"path": "pipe"})),
        (
            "apply_patch",
            json!({"patch": "*** Begin Patch\n*** Update File: pipe\n@@\n-a\n+b\n*** End Patch\n"}),
        ),
        (
            "write_file",
            json!({"path": "pipe", "content": "x", "expected_sha256": "00"}),
        ),
        ("read_file", json!({"path": "zero"})),
        ("read_file", json!({"path": "sock"})),
        (
            "edit_file",
            json!({"path": "sock", "old_text": "a", "new_text": "b"}),
        ),
        ("view_image", json!({"path": "zero"})),
    ];
    for (tool, args) in calls {
        let r = s.call(tool, args.clone());
        assert!(r.is_error, "{tool} {args}: {:?}", r.structured);
        let msg = r.error["message"].as_str().unwrap_or_default().to_owned();
        assert!(msg.contains("not a regular file"), "{tool} {args}: {msg}");
    }
    use std::os::unix::fs::FileTypeExt;
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo()
    );
}

#[test]
fn crlf_and_bom_are_reported() {
    let t = Tree::new();
    t.write("w.txt", b"\xEF\xBB\xBFone\r\ntwo\r\n");
    let mut s = Server::start(t.path(), &[]);
    let out = s.call("read_file", json!({"path": "w.txt"})).ok().clone();
    assert_eq!(out["bom"], true);
    assert_eq!(out["line_ending"], "crlf");
    assert_eq!(out["content"], "one\r\ntwo\r\n");
    assert_eq!(out["total_lines"], 2);
}

#[test]
fn list_dir_reports_types_sizes_and_bounds() {
    let t = Tree::new();
    t.write("b.txt", "12345");
    t.write("a/inner.txt", "x");
    std::os::unix::fs::symlink("b.txt", t.path().join("link")).unwrap();
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let out = s.call("list_dir", json!({})).ok().clone();
    let entries = out["entries"].as_array().unwrap();
    let names: Vec<&str> = entries
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b.txt", "link"]);
    assert_eq!(entries[0]["type"], "dir");
    assert_eq!(entries[1]["type"], "file");
    assert_eq!(entries[1]["size"], 5);
    assert!(entries[1]["modified"].as_str().unwrap().ends_with('Z'));
    assert_eq!(entries[2]["type"], "symlink");
    let out = s
        .call("list_dir", json!({"path": ".", "max_entries": 2}))
        .ok()
        .clone();
    assert_eq!(out["entries"].as_array().unwrap().len(), 2);
    assert_eq!(out["truncated"], true);
    assert_eq!(out["total_entries"], 3);
}

#[test]
fn list_files_honours_gitignore_globs_and_bounds() {
    let t = Tree::new();
    t.write(".gitignore", "target/\n*.log\n");
    t.write("src/main.rs", "");
    t.write("src/lib.rs", "");
    t.write("README.md", "");
    t.write("target/debug/out.rs", "");
    t.write("x.log", "");
    t.write(".git/config", "");
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let files = |r: &serde_json::Value| -> Vec<String> {
        r["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    };
    let out = s.call("list_files", json!({})).ok().clone();
    assert_eq!(
        files(&out),
        [".gitignore", "README.md", "src/lib.rs", "src/main.rs"]
    );
    let out = s
        .call("list_files", json!({"include_ignored": true}))
        .ok()
        .clone();
    assert!(files(&out).contains(&"target/debug/out.rs".to_owned()));
    assert!(!files(&out).iter().any(|f| f.starts_with(".git/")));
    let out = s.call("list_files", json!({"glob": "*.rs"})).ok().clone();
    assert_eq!(files(&out), ["src/lib.rs", "src/main.rs"]);
    let out = s.call("list_files", json!({"max_files": 1})).ok().clone();
    assert_eq!(out["truncated"], true);
    assert_eq!(files(&out).len(), 1);
}

#[test]
fn view_image_recognises_signatures_not_extensions() {
    let t = Tree::new();
    let png: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89\0\0\0\rIDATx\x9cc\xf8\x0f\x00\x01\x01\x01\x00\x18\xdd\x8d\xb0\0\0\0\0IEND\xaeB`\x82";
    t.write("pic.dat", png);
    t.write("fake.png", "not an image");
    t.write("huge.png", [&png[..8], &vec![0u8; 5 << 20][..]].concat());
    let mut s = Server::start(t.path(), &[]);
    let r = s.call("view_image", json!({"path": "pic.dat"}));
    assert!(!r.is_error);
    assert_eq!(r.content[0]["type"], "image");
    assert_eq!(r.content[0]["mimeType"], "image/png");
    use base64::Engine;
    let data = base64::engine::general_purpose::STANDARD
        .decode(r.content[0]["data"].as_str().unwrap())
        .unwrap();
    assert_eq!(data, png);
    assert_eq!(
        s.call("view_image", json!({"path": "fake.png"})).code(),
        "invalid_request"
    );
    assert_eq!(
        s.call("view_image", json!({"path": "huge.png"})).code(),
        "limit_exceeded"
    );
}

#[test]
fn server_info_describes_policy_tools_and_limits() {
    let t = Tree::new();
    let mut s = Server::start(t.path(), &["--profile", "edit"]);
    let out = s.call("server_info", json!({})).ok().clone();
    assert_eq!(out["name"], "machine-mcp");
    assert_eq!(out["policy"]["profile"], "edit");
    assert_eq!(out["policy"]["write"], true);
    assert_eq!(out["policy"]["exec_mode"], "off");
    assert_eq!(
        out["workspace"],
        std::fs::canonicalize(t.path()).unwrap().to_str().unwrap()
    );
    assert!(
        out["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("edit_file"))
    );
    assert_eq!(out["limits"]["read_hard_max_bytes"], 5 << 20);
    assert_eq!(out["limits"]["process_sessions_max"], 8);
    assert_eq!(out["limits"]["calls_per_principal"], 8);
    assert_eq!(out["limits"]["owner_reserved_calls"], 4);
    assert_eq!(out["limits"]["exited_session_retention_secs"], 1800);
    assert_eq!(out["limits"]["exited_sessions_max"], 32);
    assert_eq!(out["limits"]["exited_sessions_output_max_bytes"], 16 << 20);
}

#[test]
fn list_files_lists_directories_it_cannot_read_as_skipped() {
    let t = Tree::new();
    t.write("a.txt", "");
    t.write("clean/c.txt", "");
    let long = t.too_long_paths();
    // Root lists a mode-000 directory anyway, so permission denied is only checked as non-root.
    let as_user = !t.owned_by_root();
    if as_user {
        t.write("locked/b.txt", "");
        std::fs::set_permissions(t.path().join("locked"), PermissionsExt::from_mode(0o000))
            .unwrap();
    }
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let out = s.call("list_files", json!({})).ok().clone();
    if as_user {
        std::fs::set_permissions(t.path().join("locked"), PermissionsExt::from_mode(0o755))
            .unwrap();
    }
    // Listing a file does not open it: the too-long file is listed, the directory is not.
    assert_eq!(out["files"], json!(["a.txt", "clean/c.txt", long.file]));
    let mut skipped = vec![json!({"path": long.dir, "reason": "path too long"})];
    if as_user {
        skipped.push(json!({"path": "locked", "reason": "permission denied"}));
    }
    assert_eq!(out["skipped"], json!(skipped));
    assert_eq!(out["skipped_count"], skipped.len());
    assert_eq!(out["truncated"], false);
    assert_eq!(out["complete"], false, "something was skipped");
    let out = s.call("list_files", json!({"path": "clean"})).ok().clone();
    assert_eq!(out["files"], json!(["clean/c.txt"]));
    assert_eq!(out["skipped"], json!([]));
    assert_eq!(out["skipped_count"], 0);
    assert_eq!(out["complete"], true);
    let out = s
        .call("list_files", json!({"path": "clean", "max_files": 1}))
        .ok()
        .clone();
    assert_eq!(
        out["complete"], true,
        "exactly max_files files is not truncated"
    );
}

/// Regression (issue 11 item 11): a file name that is not UTF-8 came back with U+FFFD in place of
/// its bytes, so two names could render alike and neither could be passed back. Such a path is
/// rendered quoted (`"caf\xe9.txt"`: `\xHH` for each byte that is not UTF-8, `\\` and `\"`) by
/// list_dir, list_files and search_text, and that string names the file again as a path argument.
#[test]
fn non_utf8_file_names_are_listed_losslessly_and_round_trip_as_paths() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let t = Tree::new();
    let latin1 = t.path().join(OsStr::from_bytes(b"caf\xe9.txt"));
    std::fs::write(&latin1, "latin1 needle\n").unwrap();
    t.write("caf\u{fffd}.txt", "replacement needle\n");
    let dir = t.path().join(OsStr::from_bytes(b"d\xff"));
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("inner.txt"), "inner needle\n").unwrap();
    // Relative paths (agent); absolute ones are quoted alike.
    let mut s = Server::start(t.path(), &["--profile", "agent"]);

    let out = s.call("list_dir", json!({})).ok().clone();
    let names: Vec<&str> = out["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["\"caf\\xe9.txt\"", "caf\u{fffd}.txt", "\"d\\xff\""]);
    let out = s.call("read_file", json!({"path": names[0]})).ok().clone();
    assert_eq!(out["content"], "latin1 needle\n");
    let out = s.call("read_file", json!({"path": names[1]})).ok().clone();
    assert_eq!(out["content"], "replacement needle\n");
    let out = s.call("list_dir", json!({"path": names[2]})).ok().clone();
    assert_eq!(out["path"], "\"d\\xff\"");
    assert_eq!(out["entries"][0]["name"], "inner.txt");

    let out = s.call("list_files", json!({})).ok().clone();
    let files: Vec<&str> = out["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert_eq!(
        files,
        [
            "\"caf\\xe9.txt\"",
            "caf\u{fffd}.txt",
            "\"d\\xff/inner.txt\""
        ]
    );
    let out = s.call("read_file", json!({"path": files[2]})).ok().clone();
    assert_eq!(out["content"], "inner needle\n");

    let r = s.call("search_text", json!({"pattern": "needle"}));
    assert!(r.body().contains("\"d\\xff/inner.txt\":1:"), "{}", r.body());
    let matched: Vec<&str> = r.ok()["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["path"].as_str().unwrap())
        .collect();
    assert_eq!(matched, files);

    // Writing through the quoted form writes the file with those bytes, nothing else.
    s.call(
        "write_file",
        json!({"path": "\"d\\xff/new\\xfe.txt\"", "content": "made\n"}),
    )
    .ok();
    assert_eq!(
        std::fs::read(dir.join(OsStr::from_bytes(b"new\xfe.txt"))).unwrap(),
        b"made\n"
    );
    // A UTF-8 name that looks quoted is quoted itself, so it round-trips too.
    t.write("\"q\"", "quoted\n");
    let out = s.call("list_dir", json!({})).ok().clone();
    assert_eq!(out["entries"][0]["name"], "\"\\\"q\\\"\"");
    let out = s
        .call("read_file", json!({"path": "\"\\\"q\\\"\""}))
        .ok()
        .clone();
    assert_eq!(out["content"], "quoted\n");
}

/// Regression (issue 11 item 11): a line cut because it alone was over `max_bytes` reported
/// `line_ending: "none"`, as if the file had no line breaks: the ending was taken from the text
/// returned, which stops before the line's break. The cut line's own break counts, on the first
/// page and on a continuation page that is cut again, also when the cut falls between `\r` and
/// `\n`; an unterminated last line still has none.
#[test]
fn a_cut_line_reports_its_real_line_ending() {
    let t = Tree::new();
    t.write("crlf.txt", format!("{}\r\nend\r\n", "x".repeat(3000)));
    t.write("lf.txt", format!("{}\nend\n", "x".repeat(3000)));
    t.write("split.txt", format!("{}\r\nend\r\n", "x".repeat(999)));
    t.write("open.txt", "x".repeat(3000));
    let mut s = Server::start(t.path(), &[]);
    for (path, ending) in [
        ("crlf.txt", "crlf"),
        ("lf.txt", "lf"),
        ("split.txt", "crlf"),
        ("open.txt", "none"),
    ] {
        let out = s
            .call("read_file", json!({"path": path, "max_bytes": 1000}))
            .ok()
            .clone();
        assert_eq!(out["cut_line"], 1, "{path}: {out}");
        assert_eq!(out["line_ending"], ending, "{path}");
        let Some(cursor) = out["next_cursor"].as_str() else {
            continue;
        };
        let next = s
            .call(
                "read_file",
                json!({"path": path, "max_bytes": 1000, "cursor": cursor}),
            )
            .ok()
            .clone();
        if next["cut_line"] == 1 {
            assert_eq!(next["line_ending"], ending, "{path} page 2: {next}");
        }
    }
}
